//! Elementwise kernels on complex values (`c64` in `f32` parts, `c128` in `f64` parts),
//! with the formulas of XLA's CPU backend (`ElementalIrEmitter`): every operation is
//! computed in the precision of the parts, as XLA's compiled code does.
//!
//! - `add`, `subtract`, `negate` part by part; `multiply` as `(ac − bd, ad + bc)`;
//!   `divide` by Smith's algorithm (no overflow for large divisors);
//! - `abs` (a real result) as `hypot`; `sign` is `z / |z|`, 0 for 0;
//! - `exp` as `eᵃ(cos b, sin b)`; `log` as `(log |z|, atan2(b, a))`; `sqrt` by the
//!   cancellation-free formula (`t = √((|a| + |z|)/2)`); `rsqrt` as `1 / sqrt`;
//! - `power` as `|x|^c e^{−d·arg x} (cos q, sin q)`, `q = c·arg x + d·log|x|`, with
//!   `0^y` = 1 for `y = 0`, 0 for a positive real exponent;
//! - `tanh`, `sin`, `cos`, ... through `num_complex` (the textbook formulas);
//! - `compare` only `EQ`/`NE` (both parts equal), as XLA defines it.

use hlo_ir::{ElemType, Opcode};
use num_complex::Complex as Cx;
use num_traits::Float;

use super::value::{Array, Data, Failure};

type R<T> = Result<T, Failure>;

/// The real part type of a complex element type (`c64` → `f32`, `c128` → `f64`).
pub fn part_type(e: ElemType) -> ElemType {
    if e == ElemType::C128 { ElemType::F64 } else { ElemType::F32 }
}

/// The complex type with parts of real type `e` (`f32` → `c64`, `f64` → `c128`).
pub fn complex_type(e: ElemType) -> Option<ElemType> {
    match e {
        ElemType::F32 => Some(ElemType::C64),
        ElemType::F64 => Some(ElemType::C128),
        _ => None,
    }
}

fn unsupported(op: Opcode, e: ElemType) -> Failure {
    Failure::Here(format!("{} is not defined on {e}", op.name()))
}

/// `sqrt` as XLA computes it: `t = √((|a| + |z|)/2)`; `(t, b/2t)` for `a ≥ 0`, else
/// `(|b|/2t, ±t)`, `−t` when `b < 0`; 0 for 0.
fn sqrt<T: Float>(z: Cx<T>) -> Cx<T> {
    let two = T::one() + T::one();
    let r = z.re.hypot(z.im);
    if r == T::zero() {
        return Cx::new(T::zero(), z.im);
    }
    if z.im.is_infinite() {
        return Cx::new(T::infinity(), z.im);
    }
    let t = ((z.re.abs() + r) / two).sqrt();
    // XLA picks the imaginary sign by `b < 0`, so −0 counts as positive: sqrt(−4 − 0i) = 2i.
    if z.re >= T::zero() {
        Cx::new(t, z.im / (two * t))
    } else {
        Cx::new(z.im.abs() / (two * t), if z.im < T::zero() { -t } else { t })
    }
}

/// `x / y` by Smith's algorithm.
fn divide<T: Float>(x: Cx<T>, y: Cx<T>) -> Cx<T> {
    let (a, b, c, d) = (x.re, x.im, y.re, y.im);
    if c.abs() >= d.abs() {
        if c == T::zero() && d == T::zero() {
            // Division by zero: each part divided by a real zero (inf or NaN), as IEEE.
            return Cx::new(a / c, b / c);
        }
        let r = d / c;
        let den = c + d * r;
        Cx::new((a + b * r) / den, (b - a * r) / den)
    } else {
        let r = c / d;
        let den = c * r + d;
        Cx::new((a * r + b) / den, (b * r - a) / den)
    }
}

/// `x ^ y` as XLA computes it.
fn power<T: Float>(x: Cx<T>, y: Cx<T>) -> Cx<T> {
    let (a, b, c, d) = (x.re, x.im, y.re, y.im);
    let zero = T::zero();
    if a == zero && b == zero {
        if c == zero && d == zero {
            return Cx::new(T::one(), zero);
        }
        if d == zero && c > zero {
            return Cx::new(zero, zero);
        }
    }
    let two = T::one() + T::one();
    let aa_p_bb = a * a + b * b;
    let arg = b.atan2(a);
    let coeff = aa_p_bb.powf(c / two) * (-d * arg).exp();
    let q = c * arg + d / two * aa_p_bb.ln();
    Cx::new(coeff * q.cos(), coeff * q.sin())
}

/// A unary opcode on complex values giving complex values.
fn unary_fn<T: Float>(op: Opcode) -> Option<fn(Cx<T>) -> Cx<T>> {
    use Opcode::*;
    Some(match op {
        Negate => |z: Cx<T>| -z,
        Copy | OptBarrier => |z| z,
        Exp => |z: Cx<T>| {
            let e = z.re.exp();
            // A real argument keeps an exactly zero imaginary part (no NaN from inf·0).
            if z.im == T::zero() {
                Cx::new(e, z.im)
            } else {
                Cx::new(e * z.im.cos(), e * z.im.sin())
            }
        },
        Log => |z: Cx<T>| Cx::new(z.re.hypot(z.im).ln(), z.im.atan2(z.re)),
        Sqrt => sqrt,
        Rsqrt => |z| divide(Cx::new(T::one(), T::zero()), sqrt(z)),
        Sign => |z: Cx<T>| {
            let r = z.re.hypot(z.im);
            if r == T::zero() { z } else { Cx::new(z.re / r, z.im / r) }
        },
        Tanh => |z: Cx<T>| z.tanh(),
        Sin => |z: Cx<T>| z.sin(),
        Cos => |z: Cx<T>| z.cos(),
        Tan => |z: Cx<T>| z.tan(),
        Sinh => |z: Cx<T>| z.sinh(),
        Cosh => |z: Cx<T>| z.cosh(),
        Asin => |z: Cx<T>| z.asin(),
        Acos => |z: Cx<T>| z.acos(),
        Asinh => |z: Cx<T>| z.asinh(),
        Acosh => |z: Cx<T>| z.acosh(),
        Atanh => |z: Cx<T>| z.atanh(),
        Expm1 => |z: Cx<T>| {
            // expm1(a)·cos b + (cos b − 1), accurate near 0.
            let (s, c) = z.im.sin_cos();
            let em1 = z.re.exp_m1();
            let cm1 = -(T::one() + T::one()) * (z.im / (T::one() + T::one())).sin().powi(2);
            Cx::new(em1 * c + cm1, (em1 + T::one()) * s)
        },
        Log1p => |z: Cx<T>| {
            let two = T::one() + T::one();
            // log|1 + z| = ½·log1p(2a + a² + b²); arg(1 + z) = atan2(b, 1 + a).
            let l = (two * z.re + z.re * z.re + z.im * z.im).ln_1p() / two;
            Cx::new(l, z.im.atan2(T::one() + z.re))
        },
        _ => return None,
    })
}

/// A unary opcode on complex values giving real values.
fn unary_real_fn<T: Float>(op: Opcode) -> Option<fn(Cx<T>) -> T> {
    use Opcode::*;
    Some(match op {
        Abs => |z: Cx<T>| z.re.hypot(z.im),
        Real => |z: Cx<T>| z.re,
        Imag => |z: Cx<T>| z.im,
        _ => return None,
    })
}

/// A unary elementwise opcode on a complex array (`abs`, `real`, `imag` give the part
/// type; `is-finite` is not defined on complex values, as in XLA).
pub fn unary(op: Opcode, a: &Array) -> R<Array> {
    let e = a.elem;
    let dims = a.dims.clone();
    match &a.data {
        Data::C64(v) => {
            if let Some(f) = unary_real_fn::<f32>(op) {
                return Ok(Array::new(
                    ElemType::F32,
                    dims,
                    Data::F32(v.iter().map(|&z| f(z)).collect()),
                ));
            }
            let f = unary_fn::<f32>(op).ok_or_else(|| unsupported(op, e))?;
            Ok(Array::new(e, dims, Data::C64(v.iter().map(|&z| f(z)).collect())))
        }
        Data::C128(v) => {
            if let Some(f) = unary_real_fn::<f64>(op) {
                return Ok(Array::new(
                    ElemType::F64,
                    dims,
                    Data::F64(v.iter().map(|&z| f(z)).collect()),
                ));
            }
            let f = unary_fn::<f64>(op).ok_or_else(|| unsupported(op, e))?;
            Ok(Array::new(e, dims, Data::C128(v.iter().map(|&z| f(z)).collect())))
        }
        _ => Err(unsupported(op, e)),
    }
}

/// A binary kernel on complex values.
type BinaryFn<T> = fn(Cx<T>, Cx<T>) -> Cx<T>;

fn binary_fn<T: Float>(op: Opcode) -> Option<BinaryFn<T>> {
    use Opcode::*;
    Some(match op {
        Add => |x, y| x + y,
        Subtract => |x, y| x - y,
        Multiply => {
            |x: Cx<T>, y: Cx<T>| Cx::new(x.re * y.re - x.im * y.im, x.re * y.im + x.im * y.re)
        }
        Divide => divide,
        Power => power,
        _ => return None,
    })
}

/// A binary elementwise opcode on two complex arrays of the same dims and type.
pub fn binary(op: Opcode, a: &Array, b: &Array) -> R<Array> {
    let e = a.elem;
    let data = match (&a.data, &b.data) {
        (Data::C64(x), Data::C64(y)) => {
            let f = binary_fn::<f32>(op).ok_or_else(|| unsupported(op, e))?;
            Data::C64(x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect())
        }
        (Data::C128(x), Data::C128(y)) => {
            let f = binary_fn::<f64>(op).ok_or_else(|| unsupported(op, e))?;
            Data::C128(x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect())
        }
        _ => {
            return Err(format!(
                "{} operands of different element types ({} and {})",
                op.name(),
                a.elem,
                b.elem
            )
            .into());
        }
    };
    Ok(Array::new(e, a.dims.clone(), data))
}

/// `complex(re, im)`: two f32 (f64) arrays of the same dims to a c64 (c128) array.
pub fn make(re: &Array, im: &Array) -> R<Array> {
    let dims = re.dims.clone();
    match (&re.data, &im.data) {
        (Data::F32(x), Data::F32(y)) if re.elem == ElemType::F32 && im.elem == ElemType::F32 => {
            Ok(Array::new(
                ElemType::C64,
                dims,
                Data::C64(x.iter().zip(y).map(|(&a, &b)| Cx::new(a, b)).collect()),
            ))
        }
        (Data::F64(x), Data::F64(y)) => Ok(Array::new(
            ElemType::C128,
            dims,
            Data::C128(x.iter().zip(y).map(|(&a, &b)| Cx::new(a, b)).collect()),
        )),
        _ => Err(format!(
            "complex takes two f32 or two f64 operands, not {} and {}",
            re.elem, im.elem
        )
        .into()),
    }
}

/// `compare` of complex values: `EQ` and `NE` only (both parts equal, NaN unequal).
pub fn equal(a: &Array, b: &Array) -> R<Vec<bool>> {
    Ok(match (&a.data, &b.data) {
        (Data::C64(x), Data::C64(y)) => {
            x.iter().zip(y).map(|(p, q)| p.re == q.re && p.im == q.im).collect()
        }
        (Data::C128(x), Data::C128(y)) => {
            x.iter().zip(y).map(|(p, q)| p.re == q.re && p.im == q.im).collect()
        }
        _ => {
            return Err(format!(
                "compare operands of different element types ({} and {})",
                a.elem, b.elem
            )
            .into());
        }
    })
}
