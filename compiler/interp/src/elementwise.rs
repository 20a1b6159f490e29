//! Elementwise kernels: unary and binary arithmetic, compare, select, clamp, convert,
//! bitcast-convert and reduce-precision, with XLA's semantics for every storage class
//! (see `../shared/design/hlo-ops.md` §2–3):
//!
//! - floats: IEEE arithmetic in f32 (f32, bf16, f16; narrow types rounded to nearest even
//!   after every operation) or f64; `maximum`/`minimum` propagate NaN;
//! - integers: two's-complement wrap-around at the type's width; division by zero gives
//!   -1 (all ones) and `remainder` by zero gives the dividend; `INT_MIN / -1` gives
//!   `INT_MIN` and `INT_MIN % -1` gives 0; shift amounts are read as unsigned and amounts
//!   ≥ the width give 0 (left, logical) or the sign fill (arithmetic);
//! - `convert` float→int truncates toward zero, maps NaN to 0 and saturates;
//! - `compare` with `TOTALORDER` orders −NaN < −inf < … < −0 < +0 < … < inf < +NaN;
//! - complex values (`c64`, `c128`): [`super::complex`]; `real`/`imag` of a real float are
//!   the value and zero.

use hlo_ir::op::{CmpDirection, CmpType};
use hlo_ir::types::ElemClass;
use hlo_ir::{ElemType, Opcode, Tensor};

use super::complex;
use super::value::{Array, Data, Failure, Store, convert_f32, convert_f64, round_f32, store, wrap};
use super::value::{dims_text, ensure};
use num_complex::Complex as Cx;

type R<T> = Result<T, Failure>;

/// Operands of an elementwise opcode have the same dims (no implicit broadcast); shape
/// inference checks it on checked modules.
fn ensure_same_dims(what: &str, a: &Array, b: &Array) -> R<()> {
    ensure(a.dims == b.dims, || {
        format!(
            "{what} operands of different dims ({}{} and {}{})",
            a.elem,
            dims_text(&a.dims),
            b.elem,
            dims_text(&b.dims)
        )
    })
}

fn unsupported(op: Opcode, e: ElemType) -> String {
    format!("{} is not defined on {e}", op.name())
}

/// A unary elementwise opcode; `is-finite` gives `pred`.
pub fn unary(op: Opcode, a: &Array) -> R<Array> {
    use Opcode::*;
    let e = a.elem;
    let data = match &a.data {
        Data::C64(_) | Data::C128(_) => return complex::unary(op, a),
        Data::F32(v) => {
            if op == IsFinite {
                return Ok(Array::new(
                    ElemType::Pred,
                    a.dims.clone(),
                    Data::Pred(v.iter().map(|x| x.is_finite()).collect()),
                ));
            }
            let f = float_unary_f32(op).ok_or_else(|| Failure::Here(unsupported(op, e)))?;
            Data::F32(v.iter().map(|&x| round_f32(e, f(x))).collect())
        }
        Data::F64(v) => {
            if op == IsFinite {
                return Ok(Array::new(
                    ElemType::Pred,
                    a.dims.clone(),
                    Data::Pred(v.iter().map(|x| x.is_finite()).collect()),
                ));
            }
            let f = float_unary_f64(op).ok_or_else(|| Failure::Here(unsupported(op, e)))?;
            Data::F64(v.iter().map(|&x| f(x)).collect())
        }
        Data::Int(v) => {
            let bits = e.bits();
            let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
            let f: Box<dyn Fn(i64) -> i64> = match op {
                Negate => Box::new(|x: i64| x.wrapping_neg()),
                Abs => Box::new(|x: i64| x.wrapping_abs()),
                Sign => Box::new(|x: i64| x.signum()),
                Not => Box::new(|x: i64| !x),
                PopCnt => Box::new(move |x: i64| ((x as u64) & mask).count_ones() as i64),
                Clz => Box::new(move |x: i64| {
                    (((x as u64) & mask).leading_zeros() - (64 - bits)) as i64
                }),
                Copy | OptBarrier => Box::new(|x| x),
                _ => return Err(unsupported(op, e).into()),
            };
            if e.class() == ElemClass::Unsigned && matches!(op, Abs | Sign) {
                // Unsigned values are never negative.
                Data::Int(v.iter().map(|&x| if op == Sign { (x != 0) as i64 } else { x }).collect())
            } else {
                Data::Int(v.iter().map(|&x| wrap(e, f(x))).collect())
            }
        }
        Data::Pred(v) => match op {
            Not => Data::Pred(v.iter().map(|x| !x).collect()),
            _ => return Err(unsupported(op, e).into()),
        },
    };
    Ok(Array::new(e, a.dims.clone(), data))
}

macro_rules! float_unary {
    ($name:ident, $t:ty, $erf:path) => {
        fn $name(op: Opcode) -> Option<fn($t) -> $t> {
            use Opcode::*;
            Some(match op {
                Negate => |x: $t| -x,
                Abs => |x: $t| x.abs(),
                Sign => |x: $t| if x.is_nan() || x == 0.0 { x } else { x.signum() },
                Exp => |x: $t| x.exp(),
                Expm1 => |x: $t| x.exp_m1(),
                Log => |x: $t| x.ln(),
                Log1p => |x: $t| x.ln_1p(),
                Logistic => |x: $t| 1.0 / (1.0 + (-x).exp()),
                Sqrt => |x: $t| x.sqrt(),
                Rsqrt => |x: $t| 1.0 / x.sqrt(),
                Cbrt => |x: $t| x.cbrt(),
                Tanh => |x: $t| x.tanh(),
                Tan => |x: $t| x.tan(),
                Sin => |x: $t| x.sin(),
                Cos => |x: $t| x.cos(),
                Sinh => |x: $t| x.sinh(),
                Cosh => |x: $t| x.cosh(),
                Asin => |x: $t| x.asin(),
                Acos => |x: $t| x.acos(),
                Asinh => |x: $t| x.asinh(),
                Acosh => |x: $t| x.acosh(),
                Atanh => |x: $t| x.atanh(),
                Erf => |x: $t| $erf(x),
                Floor => |x: $t| x.floor(),
                Ceil => |x: $t| x.ceil(),
                RoundNearestEven => |x: $t| x.round_ties_even(),
                RoundNearestAfz => |x: $t| x.round(),
                Copy | OptBarrier | Real => |x: $t| x,
                Imag => |_: $t| 0.0,
                _ => return None,
            })
        }
    };
}
float_unary!(float_unary_f32, f32, libm::erff);
float_unary!(float_unary_f64, f64, libm::erf);

/// IEEE 754-2019 `maximum`, as XLA computes it: NaN if either is NaN, and +0 > -0.
macro_rules! nan_max {
    ($x:expr, $y:expr, $t:ty) => {{
        let (x, y): ($t, $t) = ($x, $y);
        if x.is_nan() || y.is_nan() {
            <$t>::NAN
        } else if x > y || (x == y && y.is_sign_negative()) {
            x
        } else {
            y
        }
    }};
}
/// IEEE 754-2019 `minimum`: NaN if either is NaN, and -0 < +0.
macro_rules! nan_min {
    ($x:expr, $y:expr, $t:ty) => {{
        let (x, y): ($t, $t) = ($x, $y);
        if x.is_nan() || y.is_nan() {
            <$t>::NAN
        } else if x < y || (x == y && x.is_sign_negative()) {
            x
        } else {
            y
        }
    }};
}
pub(crate) use {nan_max, nan_min};

macro_rules! float_binary {
    ($name:ident, $t:ty) => {
        fn $name(op: Opcode) -> Option<fn($t, $t) -> $t> {
            use Opcode::*;
            Some(match op {
                Add => |x: $t, y: $t| x + y,
                Subtract => |x: $t, y: $t| x - y,
                Multiply => |x: $t, y: $t| x * y,
                Divide => |x: $t, y: $t| x / y,
                Remainder => |x: $t, y: $t| x % y,
                Power => |x: $t, y: $t| x.powf(y),
                Atan2 => |x: $t, y: $t| x.atan2(y),
                Maximum => |x: $t, y: $t| nan_max!(x, y, $t),
                Minimum => |x: $t, y: $t| nan_min!(x, y, $t),
                _ => return None,
            })
        }
    };
}
float_binary!(float_binary_f32, f32);
float_binary!(float_binary_f64, f64);

/// Integer binary operation on values normalized for `e`.
fn int_binary(op: Opcode, e: ElemType) -> Option<Box<dyn Fn(i64, i64) -> i64>> {
    use Opcode::*;
    let bits = e.bits() as u64;
    let signed = e.class() == ElemClass::Signed;
    let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
    let min = if signed { wrap(e, 1i64 << (bits - 1)) } else { 0 };
    Some(match op {
        Add => Box::new(|x: i64, y: i64| x.wrapping_add(y)),
        Subtract => Box::new(|x: i64, y: i64| x.wrapping_sub(y)),
        Multiply => Box::new(|x: i64, y: i64| x.wrapping_mul(y)),
        And => Box::new(|x, y| x & y),
        Or => Box::new(|x, y| x | y),
        Xor => Box::new(|x, y| x ^ y),
        Maximum if signed => Box::new(|x: i64, y| x.max(y)),
        Minimum if signed => Box::new(|x: i64, y| x.min(y)),
        Maximum => Box::new(|x, y| (x as u64).max(y as u64) as i64),
        Minimum => Box::new(|x, y| (x as u64).min(y as u64) as i64),
        Divide if signed => Box::new(move |x: i64, y: i64| match y {
            0 => -1,
            -1 if x == min => min,
            _ => x.wrapping_div(y),
        }),
        Divide => Box::new(|x, y| if y == 0 { -1 } else { ((x as u64) / (y as u64)) as i64 }),
        Remainder if signed => Box::new(move |x: i64, y: i64| match y {
            0 => x,
            -1 if x == min => 0,
            _ => x.wrapping_rem(y),
        }),
        Remainder => Box::new(|x, y| if y == 0 { x } else { ((x as u64) % (y as u64)) as i64 }),
        ShiftLeft => Box::new(move |x: i64, y: i64| {
            let amount = (y as u64) & mask;
            if amount >= bits { 0 } else { ((x as u64) << amount) as i64 }
        }),
        ShiftRightLogical => Box::new(move |x: i64, y: i64| {
            let amount = (y as u64) & mask;
            if amount >= bits { 0 } else { (((x as u64) & mask) >> amount) as i64 }
        }),
        ShiftRightArithmetic => Box::new(move |x: i64, y: i64| {
            let amount = (y as u64) & mask;
            // The value as a signed number of the type's width.
            let sx = if bits >= 64 { x } else { (x << (64 - bits)) >> (64 - bits) };
            if amount >= bits { if sx < 0 { -1 } else { 0 } } else { sx >> amount }
        }),
        Power => Box::new(move |x: i64, y: i64| {
            if signed && y < 0 {
                return match x {
                    1 => 1,
                    -1 => {
                        if y & 1 == 0 {
                            1
                        } else {
                            -1
                        }
                    }
                    _ => 0,
                };
            }
            let (mut base, mut exp, mut acc) = (x, y as u64 & mask, 1i64);
            while exp > 0 {
                if exp & 1 == 1 {
                    acc = acc.wrapping_mul(base);
                }
                base = base.wrapping_mul(base);
                exp >>= 1;
            }
            acc
        }),
        _ => return None,
    })
}

/// A binary elementwise opcode on two arrays of the same dims and element type.
pub fn binary(op: Opcode, a: &Array, b: &Array) -> R<Array> {
    use Opcode::*;
    ensure_same_dims(op.name(), a, b)?;
    let e = a.elem;
    if op == Complex {
        return complex::make(a, b);
    }
    let data = match (&a.data, &b.data) {
        (Data::C64(_), _) | (Data::C128(_), _) => return complex::binary(op, a, b),
        (Data::F32(x), Data::F32(y)) => {
            let f = float_binary_f32(op).ok_or_else(|| Failure::Here(unsupported(op, e)))?;
            Data::F32(x.iter().zip(y).map(|(&p, &q)| round_f32(e, f(p, q))).collect())
        }
        (Data::F64(x), Data::F64(y)) => {
            let f = float_binary_f64(op).ok_or_else(|| Failure::Here(unsupported(op, e)))?;
            Data::F64(x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect())
        }
        (Data::Int(x), Data::Int(y)) => {
            let f = int_binary(op, e).ok_or_else(|| Failure::Here(unsupported(op, e)))?;
            Data::Int(x.iter().zip(y).map(|(&p, &q)| wrap(e, f(p, q))).collect())
        }
        (Data::Pred(x), Data::Pred(y)) => {
            let f: fn(bool, bool) -> bool = match op {
                And | Multiply | Minimum => |p, q| p & q,
                Or | Add | Maximum => |p, q| p | q,
                Xor => |p, q| p ^ q,
                _ => return Err(unsupported(op, e).into()),
            };
            Data::Pred(x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect())
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

/// `compare` with its direction and comparison type (default from the element type).
pub fn compare(dir: CmpDirection, kind: Option<CmpType>, a: &Array, b: &Array) -> R<Array> {
    use std::cmp::Ordering;
    let test = move |o: Option<Ordering>| -> bool {
        match (dir, o) {
            (CmpDirection::Ne, None) => true,
            (_, None) => false,
            (CmpDirection::Eq, Some(o)) => o == Ordering::Equal,
            (CmpDirection::Ne, Some(o)) => o != Ordering::Equal,
            (CmpDirection::Lt, Some(o)) => o == Ordering::Less,
            (CmpDirection::Le, Some(o)) => o != Ordering::Greater,
            (CmpDirection::Gt, Some(o)) => o == Ordering::Greater,
            (CmpDirection::Ge, Some(o)) => o != Ordering::Less,
        }
    };
    ensure_same_dims("compare", a, b)?;
    if matches!(a.data, Data::C64(_) | Data::C128(_)) {
        let eq = complex::equal(a, b)?;
        return match dir {
            CmpDirection::Eq | CmpDirection::Ne => {
                Ok(Array::new(ElemType::Pred, a.dims.clone(), Data::Pred(eq.into_iter().map(|x| x == (dir == CmpDirection::Eq)).collect())))
            }
            _ => Err(format!("compare {dir:?} is not defined on {} (complex values are only compared for equality)", a.elem).into()),
        };
    }
    let total = kind == Some(CmpType::TotalOrder);
    let out: Vec<bool> = match (&a.data, &b.data) {
        (Data::F32(x), Data::F32(y)) if total => {
            x.iter().zip(y).map(|(p, q)| test(Some(p.total_cmp(q)))).collect()
        }
        (Data::F32(x), Data::F32(y)) => {
            x.iter().zip(y).map(|(p, q)| test(p.partial_cmp(q))).collect()
        }
        (Data::F64(x), Data::F64(y)) if total => {
            x.iter().zip(y).map(|(p, q)| test(Some(p.total_cmp(q)))).collect()
        }
        (Data::F64(x), Data::F64(y)) => {
            x.iter().zip(y).map(|(p, q)| test(p.partial_cmp(q))).collect()
        }
        (Data::Int(x), Data::Int(y)) => {
            let unsigned = match kind {
                Some(k) => k == CmpType::Unsigned,
                None => a.elem.class() == ElemClass::Unsigned,
            };
            if unsigned {
                x.iter().zip(y).map(|(&p, &q)| test(Some((p as u64).cmp(&(q as u64))))).collect()
            } else {
                x.iter().zip(y).map(|(p, q)| test(Some(p.cmp(q)))).collect()
            }
        }
        (Data::Pred(x), Data::Pred(y)) => {
            x.iter().zip(y).map(|(p, q)| test(Some(p.cmp(q)))).collect()
        }
        _ => {
            return Err(format!(
                "compare operands of different element types ({} and {})",
                a.elem, b.elem
            )
            .into());
        }
    };
    Ok(Array::new(ElemType::Pred, a.dims.clone(), Data::Pred(out)))
}

/// Index `i` of an operand that is either a scalar or full-size.
#[inline]
fn at(len: usize, i: usize) -> usize {
    if len == 1 { 0 } else { i }
}

/// `select(pred, on_true, on_false)`; `pred` may be a scalar.
pub fn select(p: &Array, t: &Array, f: &Array) -> R<Array> {
    ensure_same_dims("select", t, f)?;
    ensure(matches!(p.data, Data::Pred(_)) && (p.len() == 1 || p.dims == t.dims), || {
        format!(
            "the select predicate is {}{}, not pred[] or pred{}",
            p.elem,
            dims_text(&p.dims),
            dims_text(&t.dims)
        )
    })?;
    let p = p.data.as_pred();
    let n = t.len();
    let pick = |i: usize| p[at(p.len(), i)];
    let data = match (&t.data, &f.data) {
        (Data::Pred(x), Data::Pred(y)) => {
            Data::Pred((0..n).map(|i| if pick(i) { x[i] } else { y[i] }).collect())
        }
        (Data::Int(x), Data::Int(y)) => {
            Data::Int((0..n).map(|i| if pick(i) { x[i] } else { y[i] }).collect())
        }
        (Data::F32(x), Data::F32(y)) => {
            Data::F32((0..n).map(|i| if pick(i) { x[i] } else { y[i] }).collect())
        }
        (Data::F64(x), Data::F64(y)) => {
            Data::F64((0..n).map(|i| if pick(i) { x[i] } else { y[i] }).collect())
        }
        (Data::C64(x), Data::C64(y)) => {
            Data::C64((0..n).map(|i| if pick(i) { x[i] } else { y[i] }).collect())
        }
        (Data::C128(x), Data::C128(y)) => {
            Data::C128((0..n).map(|i| if pick(i) { x[i] } else { y[i] }).collect())
        }
        _ => return Err("select branches of different element types".into()),
    };
    Ok(Array::new(t.elem, t.dims.clone(), data))
}

/// `clamp(lo, x, hi)` = `min(max(x, lo), hi)`; `lo` and `hi` may be scalars.
pub fn clamp(lo: &Array, x: &Array, hi: &Array) -> R<Array> {
    let n = x.len();
    for b in [lo, hi] {
        ensure(b.len() == 1 || b.dims == x.dims, || {
            format!(
                "a clamp bound of dims {} for an operand of dims {}",
                dims_text(&b.dims),
                dims_text(&x.dims)
            )
        })?;
    }
    let full = |b: &Array| -> Array {
        if b.dims == x.dims {
            b.clone()
        } else {
            Array::new(b.elem, x.dims.clone(), b.data.splat(0, n))
        }
    };
    let (lo, hi) = (full(lo), full(hi));
    binary(Opcode::Minimum, &binary(Opcode::Maximum, x, &lo)?, &hi)
}

/// `convert` to `to` (hlo-ops.md §2: RNE between floats and from ints, float→int
/// truncating with NaN→0 and saturation, →pred is `x != 0`).
pub fn convert(a: &Array, to: ElemType) -> R<Array> {
    let n = a.len();
    let target = store(to)?;
    if matches!(target, Store::C64 | Store::C128) {
        return convert_to_complex(a, to);
    }
    if matches!(a.data, Data::C64(_) | Data::C128(_)) {
        return Err(format!(
            "convert from {} to {to} is not defined (take `real` or `imag` first)",
            a.elem
        )
        .into());
    }
    let int_range = |e: ElemType| -> (f64, f64) {
        let bits = e.bits() as i32;
        if e.class() == ElemClass::Signed {
            (-(2f64.powi(bits - 1)), 2f64.powi(bits - 1) - 1.0)
        } else {
            (0.0, 2f64.powi(bits) - 1.0)
        }
    };
    let float_to_int = |x: f64| -> i64 {
        if x.is_nan() {
            return 0;
        }
        let (lo, hi) = int_range(to);
        let t = x.trunc().clamp(lo, hi);
        if to.class() == ElemClass::Unsigned { wrap(to, t as u64 as i64) } else { t as i64 }
    };
    let int_as_f64 = |v: i64| -> f64 {
        if a.elem.class() == ElemClass::Unsigned { v as u64 as f64 } else { v as f64 }
    };
    let data = match (&a.data, target) {
        (Data::Pred(v), Store::Pred) => Data::Pred(v.clone()),
        (Data::Pred(v), Store::Int) => Data::Int(v.iter().map(|&b| b as i64).collect()),
        (Data::Pred(v), Store::F32) => Data::F32(v.iter().map(|&b| b as i64 as f32).collect()),
        (Data::Pred(v), Store::F64) => Data::F64(v.iter().map(|&b| b as i64 as f64).collect()),
        (Data::Int(v), Store::Pred) => Data::Pred(v.iter().map(|&x| x != 0).collect()),
        (Data::Int(v), Store::Int) => Data::Int(v.iter().map(|&x| wrap(to, x)).collect()),
        (Data::Int(v), Store::F32) => {
            let unsigned = a.elem.class() == ElemClass::Unsigned;
            Data::F32(
                v.iter()
                    // Through f32, then to the narrow type: XLA's compiled code rounds twice
                    // (int→f32→bf16), and so does the interpreter, to match it bit for bit.
                    .map(|&x| convert_f32(to, if unsigned { x as u64 as f32 } else { x as f32 }))
                    .collect(),
            )
        }
        (Data::Int(v), Store::F64) => Data::F64(v.iter().map(|&x| int_as_f64(x)).collect()),
        (Data::F32(v), Store::Pred) => Data::Pred(v.iter().map(|&x| x != 0.0).collect()),
        (Data::F64(v), Store::Pred) => Data::Pred(v.iter().map(|&x| x != 0.0).collect()),
        (Data::F32(v), Store::Int) => {
            Data::Int(v.iter().map(|&x| float_to_int(x as f64)).collect())
        }
        (Data::F64(v), Store::Int) => Data::Int(v.iter().map(|&x| float_to_int(x)).collect()),
        (Data::F32(v), Store::F32) => Data::F32(v.iter().map(|&x| convert_f32(to, x)).collect()),
        (Data::F32(v), Store::F64) => Data::F64(v.iter().map(|&x| x as f64).collect()),
        (Data::F64(v), Store::F32) => Data::F32(
            v.iter()
                .map(|&x| match to {
                    ElemType::BF16 => half::bf16::from_f64(x).to_f32(),
                    ElemType::F16 => half::f16::from_f64(x).to_f32(),
                    ElemType::F32 => x as f32,
                    _ => convert_f64(to, x),
                })
                .collect(),
        ),
        (Data::F64(v), Store::F64) => Data::F64(v.clone()),
        (_, Store::C64 | Store::C128) | (Data::C64(_) | Data::C128(_), _) => {
            unreachable!("complex conversions returned above")
        }
    };
    debug_assert_eq!(data.len(), n);
    Ok(Array::new(to, a.dims.clone(), data))
}

/// `bitcast-convert` to `to` with result dims `dims` (widths may differ: the minor dim
/// splits or joins, little-endian as on the host).
pub fn bitcast_convert(a: &Array, to: ElemType, dims: Vec<usize>) -> R<Array> {
    let bytes = a.to_tensor()?.into_bytes();
    let (fb, tb) = (a.elem.bits() as usize, to.bits() as usize);
    let bytes = if fb < 8 || tb < 8 {
        // Sub-byte elements are packed for the reinterpretation, element 0 in the least
        // significant bits (as XLA packs them), then unpacked one per byte.
        let width = |b: usize| b.div_ceil(8);
        let mut bits = Vec::with_capacity(bytes.len() * 8);
        for e in bytes.chunks_exact(width(fb)) {
            for i in 0..fb {
                bits.push(e[i / 8] >> (i % 8) & 1);
            }
        }
        let signed = to.class() == ElemClass::Signed;
        let mut out = Vec::with_capacity(bits.len() / tb * width(tb));
        for chunk in bits.chunks_exact(tb) {
            if tb < 8 {
                let mut v = chunk.iter().rev().fold(0u8, |acc, &b| acc << 1 | b);
                if signed && chunk[tb - 1] == 1 {
                    v |= !0u8 << tb;
                }
                out.push(v);
            } else {
                for byte in chunk.chunks_exact(8) {
                    out.push(byte.iter().rev().fold(0u8, |acc, &b| acc << 1 | b));
                }
            }
        }
        out
    } else {
        bytes
    };
    let t = Tensor::from_bytes(to, dims.iter().map(|&d| d as u64).collect(), bytes)
        .map_err(|e| e.to_string())?;
    Array::from_tensor(&t)
}

/// `reduce-precision`: rounds the mantissa to `mantissa_bits` (ties to even) and the
/// exponent range to `exponent_bits` (overflow → ±inf, underflow → ±0); NaN stays NaN.
pub fn reduce_precision(a: &Array, exponent_bits: i64, mantissa_bits: i64) -> R<Array> {
    fn reduce(
        bits: u64,
        width: u32,
        exp_w: u32,
        exp_bits: i64,
        man_bits: i64,
        is_nan: bool,
    ) -> u64 {
        let man_w = width - exp_w - 1;
        let sign_mask = 1u64 << (width - 1);
        let exp_mask = ((1u64 << exp_w) - 1) << man_w;
        let mut x = bits;
        if (man_bits as u32) < man_w {
            let shift = man_w - man_bits as u32;
            let last_bit = 1u64 << shift;
            let base_bias = (last_bit >> 1) - 1;
            let x_last = (x & last_bit) >> shift;
            x = (x + x_last + base_bias) & !(last_bit - 1);
        }
        if (exp_bits as u32) < exp_w {
            let bias = (1i64 << (exp_w - 1)) - 1;
            let reduced_bias = (1i64 << (exp_bits - 1)) - 1;
            let max_exp = ((bias + reduced_bias) as u64) << man_w;
            let min_exp = ((bias - reduced_bias) as u64) << man_w;
            let e = x & exp_mask;
            if e > max_exp {
                x = (x & sign_mask) | exp_mask;
            } else if e <= min_exp {
                x &= sign_mask;
            }
        }
        if is_nan { if man_bits > 0 { bits } else { (bits & sign_mask) | exp_mask } } else { x }
    }
    let (e, m) = (exponent_bits, mantissa_bits);
    let data = match &a.data {
        Data::F32(v) => Data::F32(
            v.iter()
                .map(|&x| {
                    round_f32(
                        a.elem,
                        f32::from_bits(reduce(x.to_bits() as u64, 32, 8, e, m, x.is_nan()) as u32),
                    )
                })
                .collect(),
        ),
        Data::F64(v) => Data::F64(
            v.iter()
                .map(|&x| f64::from_bits(reduce(x.to_bits(), 64, 11, e, m, x.is_nan())))
                .collect(),
        ),
        _ => return Err(format!("reduce-precision is not defined on {}", a.elem).into()),
    };
    Ok(Array::new(a.elem, a.dims.clone(), data))
}

/// `convert` to complex type `to` from any array: real values get a zero imaginary part
/// (integers and pred through the part type, as XLA converts them); `c64` ↔ `c128` part
/// by part. Complex → real is refused (XLA requires `real`).
fn convert_to_complex(a: &Array, to: ElemType) -> R<Array> {
    let part = complex::part_type(to);
    let data = match &a.data {
        Data::C64(v) if to == ElemType::C128 => {
            Data::C128(v.iter().map(|z| Cx::new(z.re as f64, z.im as f64)).collect())
        }
        Data::C128(v) if to == ElemType::C64 => {
            Data::C64(v.iter().map(|z| Cx::new(z.re as f32, z.im as f32)).collect())
        }
        Data::C64(_) | Data::C128(_) => a.data.clone(),
        _ => match &convert(a, part)?.data {
            Data::F32(v) => Data::C64(v.iter().map(|&x| Cx::new(x, 0.0)).collect()),
            Data::F64(v) => Data::C128(v.iter().map(|&x| Cx::new(x, 0.0)).collect()),
            _ => return Err(format!("cannot convert {} to {to}", a.elem).into()),
        },
    };
    Ok(Array::new(to, a.dims.clone(), data))
}
