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
