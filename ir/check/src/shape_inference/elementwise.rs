//! Elementwise operations (XLA's `InferUnaryOpShape`, `InferBinaryOpShape`,
//! `InferTernaryOpShape`, `InferMapShape`): unary and binary math with the element types
//! each accepts, `select` and `clamp`, `compare`, `convert`, `bitcast-convert`,
//! `reduce-precision` and `map`. Operands must agree exactly: no implicit broadcast, no
//! mixed precision.

use hlo_ir::op::CmpType;
use hlo_ir::opcode::Category;
use hlo_ir::types::ElemClass;
use hlo_ir::{ArrayShape, ElemType, Opcode, Shape};

use super::context::{Cx, R, complex_component, like, mk, scalar};
use super::show;

/// Operands of identical static dimensions and element type; the first of them.
fn same_arrays<'a>(cx: &Cx<'a>) -> R<&'a ArrayShape> {
    let a = cx.array(0)?;
    let e = a.elem;
    for k in 1..cx.ops.len() {
        let a2 = cx.array(k)?;
        let e2 = a2.elem;
        if a2.dims != a.dims {
            return Err(cx.err(format!(
                "{} operands must have identical dimensions (no implicit broadcast in HLO): {} and {}",
                cx.name(),
                show(cx.shape(0)?),
                show(cx.shape(k)?)
            )));
        }
        if e2 != e {
            return Err(cx.err(format!(
                "{} operands must have the same element type: {e} and {e2}",
                cx.name()
            )));
        }
    }
    Ok(a)
}

pub(super) fn elementwise(cx: &Cx, op: Opcode) -> R<Shape> {
    use Opcode::*;
    let name = op.name();
    let bad =
        |e: ElemType, want: &str| Err(cx.err(format!("{name} expects {want} operands, got {e}")));
    match op.category() {
        Category::Unary => {
            let a = cx.array(0)?;
            let e = a.elem;
            let c = e.class();
            let out = match op {
                Negate if c == ElemClass::Pred => {
                    return bad(e, "integer, floating-point or complex");
                }
                Abs => match c {
                    ElemClass::Signed | ElemClass::Float => e,
                    ElemClass::Complex => complex_component(e).unwrap_or(e),
                    _ => return bad(e, "signed integer, floating-point or complex"),
                },
                Sign if !matches!(c, ElemClass::Signed | ElemClass::Float | ElemClass::Complex) => {
                    return bad(e, "signed integer, floating-point or complex");
                }
                Exp | Expm1 | Log | Log1p | Logistic | Sqrt | Rsqrt | Tanh | Tan | Sin | Cos
                | Sinh | Cosh | Asin | Acos | Asinh | Acosh | Atanh
                    if !matches!(c, ElemClass::Float | ElemClass::Complex) =>
                {
                    return bad(e, "floating-point or complex");
                }
                Erf | Cbrt | Floor | Ceil | RoundNearestEven | RoundNearestAfz
                    if c != ElemClass::Float =>
                {
                    return bad(e, "floating-point");
                }
                IsFinite => {
                    if c != ElemClass::Float {
                        return bad(e, "floating-point");
                    }
                    ElemType::Pred
                }
                Not if !matches!(c, ElemClass::Pred | ElemClass::Signed | ElemClass::Unsigned) => {
                    return bad(e, "pred or integer");
                }
                Clz | PopCnt if !e.is_integer() => return bad(e, "integer"),
                Real | Imag => match c {
                    ElemClass::Complex => complex_component(e).unwrap_or(e),
                    ElemClass::Float => e,
                    _ => return bad(e, "complex or floating-point"),
                },
                _ => e,
            };
            Ok(like(a, out))
        }
        Category::Binary => {
            let a = same_arrays(cx)?;
            let e = a.elem;
            let c = e.class();
            let out = match op {
                Subtract | Divide | Remainder | Power if c == ElemClass::Pred => {
                    return bad(e, "integer, floating-point or complex");
                }
                Atan2 if !matches!(c, ElemClass::Float | ElemClass::Complex) => {
                    return bad(e, "floating-point or complex");
                }
                And | Or | Xor
                    if !matches!(c, ElemClass::Pred | ElemClass::Signed | ElemClass::Unsigned) =>
                {
                    return bad(e, "pred or integer");
                }
                ShiftLeft | ShiftRightArithmetic | ShiftRightLogical if !e.is_integer() => {
                    return bad(e, "integer");
                }
                Maximum | Minimum if c == ElemClass::Complex => return bad(e, "non-complex"),
                Complex => match e {
                    ElemType::F32 => ElemType::C64,
                    ElemType::F64 => ElemType::C128,
                    _ => return bad(e, "f32 or f64"),
                },
                _ => e,
            };
            Ok(like(a, out))
        }
        _ => {
            // select, clamp
            let (p, x, y) = (cx.array(0)?, cx.array(1)?, cx.array(2)?);
            let (pe, pd, xe, xd, ye, yd) = (p.elem, &p.dims, x.elem, &x.dims, y.elem, &y.dims);
            if op == Select {
                if pe != ElemType::Pred {
                    return Err(cx.err(format!(
                        "select predicate must be pred, got {}",
                        show(cx.shape(0)?)
                    )));
                }
                if xe != ye || xd != yd {
                    return Err(cx.err(format!(
                        "select on_true and on_false must have the same shape: {} and {}",
                        show(cx.shape(1)?),
                        show(cx.shape(2)?)
                    )));
                }
                if !pd.is_empty() && pd != xd {
                    return Err(cx.err(format!(
                        "select predicate {} must be a scalar or have the dimensions of {}",
                        show(cx.shape(0)?),
                        show(cx.shape(1)?)
                    )));
                }
                Ok(like(x, xe))
            } else {
                for (k, (e, d)) in [(0, (pe, pd)), (2, (ye, yd))] {
                    if e != xe {
                        return Err(cx.err(format!(
                            "clamp operand {k} has element type {e}, the clamped operand {xe}"
                        )));
                    }
                    if !d.is_empty() && d != xd {
                        return Err(cx.err(format!(
                            "clamp bound {} must be a scalar or have the dimensions of {}",
                            show(cx.shape(k)?),
                            show(cx.shape(1)?)
                        )));
                    }
                }
                Ok(like(x, xe))
            }
        }
    }
}

pub(super) fn compare(cx: &Cx, kind: Option<CmpType>) -> R<Shape> {
    let a = same_arrays(cx)?;
    let e = a.elem;
    if e.is_float() && matches!(kind, Some(CmpType::Signed | CmpType::Unsigned)) {
        return Err(cx.err(format!(
            "compare of floating-point {e} operands must use type FLOAT or TOTALORDER"
        )));
    }
    Ok(like(a, ElemType::Pred))
}

pub(super) fn convert(cx: &Cx) -> R<Shape> {
    let a = cx.array(0)?;
    let (e, te) = (a.elem, cx.declared_array()?.elem);
    if e.is_complex() && !te.is_complex() {
        return Err(
            cx.err(format!("convert from complex {e} to real {te} is not allowed (use real/imag)"))
        );
    }
    Ok(like(a, te))
}

pub(super) fn bitcast_convert(cx: &Cx) -> R<Shape> {
    let (e, d) = cx.arr(0)?;
    let (te, _) = cx.declared_arr()?;
    if e.is_complex() != te.is_complex() {
        return Err(
            cx.err(format!("bitcast-convert between complex and non-complex types ({e} to {te})"))
        );
    }
    let (b, tb) = (e.bits() as i64, te.bits() as i64);
    if b == tb {
        return Ok(mk(te, &d));
    }
    if b % tb != 0 && tb % b != 0 {
        return Err(cx.err(format!(
            "bitcast-convert bit widths {b} ({e}) and {tb} ({te}) do not divide each other"
        )));
    }
    if b > tb {
        let mut out = d;
        out.push(b / tb);
        Ok(mk(te, &out))
    } else {
        match d.last() {
            Some(&l) if l == tb / b => Ok(mk(te, &d[..d.len() - 1])),
            _ => Err(cx.err(format!(
                "bitcast-convert from {e} to {te} needs a last operand dimension of {}, operand is {}",
                tb / b,
                show(cx.shape(0)?)
            ))),
        }
    }
}

pub(super) fn reduce_precision(cx: &Cx, exponent_bits: i64, mantissa_bits: i64) -> R<Shape> {
    let (e, d) = cx.arr(0)?;
    if !e.is_float() {
        return Err(cx.err(format!("reduce-precision expects a floating-point operand, got {e}")));
    }
    if exponent_bits < 1 {
        return Err(
            cx.err(format!("reduce-precision exponent_bits must be >= 1, got {exponent_bits}"))
        );
    }
    if mantissa_bits < 0 {
        return Err(
            cx.err(format!("reduce-precision mantissa_bits must be >= 0, got {mantissa_bits}"))
        );
    }
    Ok(mk(e, &d))
}

/// `map` (XLA's verifier: `InferMapShape` over every dimension, whatever `dimensions`
/// says, and operand element types equal to the parameters'): N arrays of the same dims
/// (element types may differ); `to_apply` takes N scalars of the operands' element types
/// and returns a scalar, whose element type is the result's. Scalar operands beside
/// arrays, which XLA's inference would broadcast, are refused: no engine broadcasts them.
pub(super) fn map(cx: &Cx, to_apply: hlo_ir::CompId) -> R<Shape> {
    let a = cx.array(0)?;
    for k in 1..cx.ops.len() {
        if cx.array(k)?.dims != a.dims {
            return Err(cx.err(format!(
                "map operands must have the same dimensions: {} and {}",
                show(cx.shape(0)?),
                show(cx.shape(k)?)
            )));
        }
    }
    let c = cx.callee(to_apply)?;
    if c.params.len() != cx.ops.len() {
        return Err(cx.err(format!(
            "map computation `{}` must take {} scalar parameters (one per operand), takes {}",
            c.name,
            cx.ops.len(),
            c.params.len()
        )));
    }
    for (k, p) in c.params.iter().enumerate() {
        let e = cx.array(k)?.elem;
        if scalar(p) != Some(e) {
            return Err(cx.err(format!(
                "map computation `{}` parameter {k} is {}, expected {e}[] (operand {k}'s element type)",
                c.name,
                show(p)
            )));
        }
    }
    let root = cx.callee_root(&c)?;
    let Some(e) = scalar(root) else {
        return Err(cx.err(format!(
            "map computation `{}` must return a scalar, returns {}",
            c.name,
            show(root)
        )));
    };
    Ok(like(a, e))
}
