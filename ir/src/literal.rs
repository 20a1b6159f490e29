//! Constant values.

use crate::types::{ElemClass, ElemType, Shape};

/// Element values of an array literal, flattened in row-major order.
#[derive(Debug, Clone, PartialEq)]
pub enum LiteralData {
    Pred(Vec<bool>),
    /// Integers of any width; `u64` values above `i64::MAX` are stored bit-cast.
    Int(Vec<i64>),
    /// Floats of any width, already rounded to the element type.
    Float(Vec<f64>),
    /// `(re, im)` pairs.
    Complex(Vec<(f64, f64)>),
}

impl LiteralData {
    pub fn len(&self) -> usize {
        match self {
            LiteralData::Pred(v) => v.len(),
            LiteralData::Int(v) => v.len(),
            LiteralData::Float(v) => v.len(),
            LiteralData::Complex(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Array(LiteralData),
    /// `{...}`: a large constant whose values the printer left out. Shapes still work;
    /// anything that needs the values must refuse it.
    Elided,
    Tuple(Vec<Literal>),
}

/// Why a literal cannot be laid out as an array of a given element type and size.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LiteralError {
    /// The module was printed with large constants elided (`{...}`).
    #[error("the constant's values were elided (`{{...}}`) when the module was printed")]
    Elided,
    /// A tuple literal where an array was expected.
    #[error("a tuple literal where an array was expected")]
    Tuple,
    /// Neither one value (which fills the array) nor one per element.
    #[error("the literal has {values} values for {elements} elements")]
    Count {
        /// Values the literal has.
        values: usize,
        /// Elements of the array.
        elements: usize,
    },
    /// Values of a kind the element type cannot hold (complex values for a real type).
    #[error("a literal of the wrong kind for {0}")]
    Kind(ElemType),
}

/// `v` wrapped to the width of integer type `e`, sign- or zero-extended into an `i64`
/// (XLA's two's-complement wrap-around for every integer width, s2 to u64).
#[inline]
pub fn wrap_int(e: ElemType, v: i64) -> i64 {
    let bits = e.bits();
    if bits >= 64 {
        return v;
    }
    let sh = 64 - bits;
    if e.class() == ElemClass::Signed { (v << sh) >> sh } else { ((v as u64) << sh >> sh) as i64 }
}

impl Literal {
    /// The literal's values as `count` elements of `elem`, dense, row-major and
    /// little-endian: the layout of a [`Tensor`](crate::Tensor) and of every engine's
    /// buffers (pred one byte, sub-byte integers and floats one byte each, complex numbers
    /// as (re, im)). A single value fills the whole array. Floats are rounded once to
    /// `elem` (round to nearest even), integers wrap to its width.
    pub fn encode(&self, elem: ElemType, count: usize) -> Result<Vec<u8>, LiteralError> {
        use ElemType::*;
        let data = match self {
            Literal::Array(d) => d,
            Literal::Elided => return Err(LiteralError::Elided),
            Literal::Tuple(_) => return Err(LiteralError::Tuple),
        };
        if data.len() != count && data.len() != 1 {
            return Err(LiteralError::Count { values: data.len(), elements: count });
        }
        let at = |i: usize| if data.len() == 1 { 0 } else { i };
        let real = |i: usize| -> Option<f64> {
            match data {
                LiteralData::Float(v) => Some(v[at(i)]),
                LiteralData::Int(v) => Some(v[at(i)] as f64),
                LiteralData::Pred(_) | LiteralData::Complex(_) => None,
            }
        };
        let wrong = || LiteralError::Kind(elem);
        let mut out = Vec::with_capacity(count * 8);
        type Put<'a> = &'a mut dyn FnMut(usize, &mut Vec<u8>) -> Result<(), LiteralError>;
        let mut each = |f: Put| (0..count).try_for_each(|i| f(i, &mut out));
        match elem {
            Pred => each(&mut |i, o| {
                o.push(u8::from(match data {
                    LiteralData::Pred(v) => v[at(i)],
                    LiteralData::Int(v) => v[at(i)] != 0,
                    _ => return Err(wrong()),
                }));
                Ok(())
            })?,
            _ if elem.is_integer() => {
                let width = elem.bits().div_ceil(8) as usize;
                each(&mut |i, o| {
                    let x = match data {
                        LiteralData::Int(v) => wrap_int(elem, v[at(i)]),
                        LiteralData::Pred(v) => i64::from(v[at(i)]),
                        _ => return Err(wrong()),
                    };
                    o.extend_from_slice(&x.to_le_bytes()[..width]);
                    Ok(())
                })?
            }
            F32 => each(&mut |i, o| {
                o.extend_from_slice(&(real(i).ok_or_else(wrong)? as f32).to_le_bytes());
                Ok(())
            })?,
            BF16 => each(&mut |i, o| {
                let x = half::bf16::from_f32(real(i).ok_or_else(wrong)? as f32);
                o.extend_from_slice(&x.to_le_bytes());
                Ok(())
            })?,
            F16 => each(&mut |i, o| {
                let x = half::f16::from_f32(real(i).ok_or_else(wrong)? as f32);
                o.extend_from_slice(&x.to_le_bytes());
                Ok(())
            })?,
            F64 => each(&mut |i, o| {
                o.extend_from_slice(&real(i).ok_or_else(wrong)?.to_le_bytes());
                Ok(())
            })?,
            C64 | C128 => each(&mut |i, o| {
                let (re, im) = match data {
                    LiteralData::Complex(v) => v[at(i)],
                    _ => (real(i).ok_or_else(wrong)?, 0.0),
                };
                if elem == C64 {
                    o.extend_from_slice(&(re as f32).to_le_bytes());
                    o.extend_from_slice(&(im as f32).to_le_bytes());
                } else {
                    o.extend_from_slice(&re.to_le_bytes());
                    o.extend_from_slice(&im.to_le_bytes());
                }
                Ok(())
            })?,
            _ if crate::narrow::is_narrow_float(elem) => each(&mut |i, o| {
                o.push(
                    crate::narrow::from_f64(elem, real(i).ok_or_else(wrong)?).ok_or_else(wrong)?,
                );
                Ok(())
            })?,
            _ => return Err(wrong()),
        }
        Ok(out)
    }
}

/// Writes `v` so that parsing it back as `elem` gives the same value: the shortest
/// decimal that round-trips at the element type's precision, `inf`/`nan` spelled as XLA does.
pub fn write_float(out: &mut String, v: f64, elem: ElemType) {
    use std::fmt::Write;
    if v.is_nan() {
        let bits = v.to_bits();
        if v.is_sign_negative() {
            out.push('-');
        }
        let payload = bits & 0x000f_ffff_ffff_ffff;
        if payload == 0x0008_0000_0000_0000 {
            out.push_str("nan");
        } else {
            let _ = write!(out, "nan(0x{payload:x})");
        }
        return;
    }
    if v.is_infinite() {
        out.push_str(if v < 0.0 { "-inf" } else { "inf" });
        return;
    }
    if v == v.trunc() && v.abs() < 1e16 {
        if v == 0.0 && v.is_sign_negative() {
            // Not `-0` as XLA prints it: XLA's parser (and ours) reads `-0` as the integer 0, +0.
            out.push_str("-0.0");
        } else {
            let _ = write!(out, "{}", v as i64);
        }
        return;
    }
    let mag = v.abs();
    let sci = !(1e-4..1e16).contains(&mag);
    if elem == ElemType::F64 {
        let _ = if sci { write!(out, "{v:e}") } else { write!(out, "{v}") };
    } else {
        let f = v as f32;
        let _ = if sci { write!(out, "{f:e}") } else { write!(out, "{f}") };
    }
}

impl Literal {
    /// Writes the literal (the part inside `constant(...)`) for a value of `shape`.
    pub fn write(&self, out: &mut String, shape: &Shape) {
        match (self, shape) {
            (Literal::Elided, _) => out.push_str("{...}"),
            (Literal::Tuple(items), Shape::Tuple(shapes)) => {
                out.push('(');
                for (i, (l, s)) in items.iter().zip(shapes).enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    l.write(out, s);
                }
                out.push(')');
            }
            (Literal::Array(data), Shape::Array(a)) => {
                let dims: Vec<usize> =
                    a.dims.iter().map(|d| d.bound().unwrap_or(0) as usize).collect();
                let mut pos = 0;
                write_nested(out, data, a.elem, &dims, &mut pos, dims.len() > 1);
            }
            // Shapes and literal disagree only if the IR was built wrongly; print what we have.
            (Literal::Array(data), _) => {
                let mut pos = 0;
                write_nested(out, data, ElemType::F64, &[data.len()], &mut pos, false);
            }
            (Literal::Tuple(_), _) => out.push_str("()"),
        }
    }
}

fn write_nested(
    out: &mut String,
    data: &LiteralData,
    elem: ElemType,
    dims: &[usize],
    pos: &mut usize,
    spaced: bool,
) {
    if dims.is_empty() {
        write_scalar(out, data, elem, *pos, true);
        *pos += 1;
        return;
    }
    out.push('{');
    if spaced && dims[0] > 0 {
        out.push(' ');
    }
    for i in 0..dims[0] {
        if i > 0 {
            out.push_str(", ");
        }
        if dims.len() == 1 {
            write_scalar(out, data, elem, *pos, false);
            *pos += 1;
        } else {
            write_nested(out, data, elem, &dims[1..], pos, spaced);
        }
    }
    if spaced && dims[0] > 0 {
        out.push(' ');
    }
    out.push('}');
}

fn write_scalar(out: &mut String, data: &LiteralData, elem: ElemType, i: usize, rank0: bool) {
    use std::fmt::Write;
    match data {
        LiteralData::Pred(v) => {
            let b = v.get(i).copied().unwrap_or(false);
            // XLA prints pred scalars as words and pred arrays as digits.
            out.push_str(match (rank0, b) {
                (true, true) => "true",
                (true, false) => "false",
                (false, true) => "1",
                (false, false) => "0",
            });
        }
        LiteralData::Int(v) => {
            let x = v.get(i).copied().unwrap_or(0);
            let _ = if elem.class() == ElemClass::Unsigned {
                write!(out, "{}", x as u64)
            } else {
                write!(out, "{x}")
            };
        }
        LiteralData::Float(v) => write_float(out, v.get(i).copied().unwrap_or(0.0), elem),
        LiteralData::Complex(v) => {
            let (re, im) = v.get(i).copied().unwrap_or((0.0, 0.0));
            let part = if elem == ElemType::C128 { ElemType::F64 } else { ElemType::F32 };
            out.push('(');
            write_float(out, re, part);
            out.push_str(", ");
            write_float(out, im, part);
            out.push(')');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(v: f64, e: ElemType) -> String {
        let mut s = String::new();
        write_float(&mut s, v, e);
        s
    }

    #[test]
    fn floats_print_shortest() {
        assert_eq!(f(1.0, ElemType::F32), "1");
        assert_eq!(f(-0.0, ElemType::F32), "-0.0");
        assert_eq!(f(0.1f32 as f64, ElemType::F32), "0.1");
        assert_eq!(f(1e-5f32 as f64, ElemType::F32), "1e-5");
        assert_eq!(f(f64::NEG_INFINITY, ElemType::F32), "-inf");
        assert_eq!(f(f64::NAN, ElemType::F32), "nan");
        assert_eq!(f(3.4028234663852886e38, ElemType::F32), "3.4028235e38");
    }

    fn enc(lit: LiteralData, e: ElemType, n: usize) -> Result<Vec<u8>, LiteralError> {
        Literal::Array(lit).encode(e, n)
    }

    #[test]
    fn encodes_every_kind_little_endian() {
        assert_eq!(
            enc(LiteralData::Int(vec![-1, 300]), ElemType::S16, 2).unwrap(),
            [0xff, 0xff, 0x2c, 0x01]
        );
        // Wrap-around to the width, sub-byte types one byte each.
        assert_eq!(enc(LiteralData::Int(vec![15]), ElemType::S4, 2).unwrap(), [0xff, 0xff]);
        assert_eq!(enc(LiteralData::Int(vec![256 + 7]), ElemType::U8, 1).unwrap(), [7]);
        assert_eq!(enc(LiteralData::Pred(vec![true, false]), ElemType::Pred, 2).unwrap(), [1, 0]);
        assert_eq!(enc(LiteralData::Int(vec![2]), ElemType::Pred, 1).unwrap(), [1]);
        assert_eq!(
            enc(LiteralData::Float(vec![1.5]), ElemType::F32, 1).unwrap(),
            1.5f32.to_le_bytes()
        );
        // bf16 rounds to nearest even once: 1 + 2^-8 is a tie, down to 1.
        assert_eq!(
            enc(LiteralData::Float(vec![1.0 + 1.0 / 256.0]), ElemType::BF16, 1).unwrap(),
            [0x80, 0x3f]
        );
        assert_eq!(enc(LiteralData::Int(vec![3]), ElemType::F64, 1).unwrap(), 3f64.to_le_bytes());
        let c = enc(LiteralData::Complex(vec![(1.0, -2.0)]), ElemType::C64, 1).unwrap();
        assert_eq!(c, [1f32.to_le_bytes(), (-2f32).to_le_bytes()].concat());
        assert_eq!(
            enc(LiteralData::Float(vec![1.0]), ElemType::F8E4M3FN, 1).unwrap(),
            [crate::narrow::from_f32(ElemType::F8E4M3FN, 1.0).unwrap()]
        );
    }

    #[test]
    fn refuses_what_it_cannot_lay_out() {
        assert_eq!(
            enc(LiteralData::Int(vec![1, 2]), ElemType::S32, 3),
            Err(LiteralError::Count { values: 2, elements: 3 })
        );
        assert_eq!(
            enc(LiteralData::Complex(vec![(1.0, 0.0)]), ElemType::F32, 1),
            Err(LiteralError::Kind(ElemType::F32))
        );
        assert_eq!(Literal::Elided.encode(ElemType::F32, 1), Err(LiteralError::Elided));
        assert!(LiteralError::Elided.to_string().contains("{...}"));
    }

    #[test]
    fn nested_arrays() {
        let lit = Literal::Array(LiteralData::Int(vec![1, 2, 3, 4]));
        let mut s = String::new();
        lit.write(&mut s, &Shape::array(ElemType::S32, &[2, 2]));
        assert_eq!(s, "{ { 1, 2 }, { 3, 4 } }");
        let mut s = String::new();
        lit.write(&mut s, &Shape::array(ElemType::S32, &[4]));
        assert_eq!(s, "{1, 2, 3, 4}");
    }
}
