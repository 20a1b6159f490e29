//! Structure: tuples and tokens (`tuple`, `get-tuple-element`, `after-all`,
//! `add-dependency`), `get-dimension-size`, `bitcast` (the text decides the result; the
//! size in bits must be kept, within a backend's tiles), and the asynchronous copy pair
//! `copy-start`/`copy-done`. Ops that pass their operand through or whose result the text
//! alone decides are answered in the dispatch itself ([`super::infer_shape`]).

use hlo_ir::{ElemType, Shape};

use super::context::{Cx, R, dim_in_range};
use super::show;

pub(super) fn add_dependency(cx: &Cx) -> R<Shape> {
    if !matches!(cx.shape(1)?, Shape::Token) {
        return Err(
            cx.err(format!("add-dependency operand 1 must be a token, got {}", show(cx.shape(1)?)))
        );
    }
    Ok(cx.shape(0)?.clone())
}

pub(super) fn after_all(cx: &Cx) -> R<Shape> {
    for k in 0..cx.ops.len() {
        if !matches!(cx.shape(k)?, Shape::Token) {
            return Err(cx.err(format!(
                "after-all operand {k} must be a token, got {}",
                show(cx.shape(k)?)
            )));
        }
    }
    Ok(Shape::Token)
}

pub(super) fn get_dimension_size(cx: &Cx, dimension: i64) -> R<Shape> {
    let (_, d) = cx.arr(0)?;
    dim_in_range(cx, dimension, d.len(), "get-dimension-size dimension")?;
    Ok(Shape::scalar(ElemType::S32))
}

pub(super) fn tuple(cx: &Cx) -> R<Shape> {
    Ok(Shape::Tuple((0..cx.ops.len()).map(|k| cx.shape(k).cloned()).collect::<R<_>>()?))
}

pub(super) fn get_tuple_element(cx: &Cx, index: i64) -> R<Shape> {
    match cx.shape(0)? {
        Shape::Tuple(t) => {
            if index < 0 || index as usize >= t.len() {
                return Err(cx.err(format!(
                    "get-tuple-element index {index} is out of range for a tuple of {} elements",
                    t.len()
                )));
            }
            Ok(t[index as usize].clone())
        }
        s => Err(cx.err(format!("get-tuple-element operand must be a tuple, got {}", show(s)))),
    }
}

/// The bits an array occupies under its layout's first tile (`T(8,128)` pads the two most
/// minor dimensions to multiples of 8 and 128); `None` without a tiled layout.
fn tiled_bits(s: &Shape) -> Option<i64> {
    let a = s.as_array()?;
    let n = i64::try_from(a.tiled_elements()?).ok()?;
    Some(n.saturating_mul(i64::from(a.elem.bits())))
}

pub(super) fn bitcast(cx: &Cx) -> R<Shape> {
    let (e, d) = cx.arr(0)?;
    let (te, td) = cx.declared_arr()?;
    let bits = |e: ElemType, d: &[i64]| d.iter().product::<i64>() * i64::from(e.bits());
    // A bitcast is physical: arrays with tiled layouts (a backend's) may differ in
    // logical size within the same tiles (`s32[576]` and `s32[575]` under `T(1024)`).
    let tiled =
        tiled_bits(cx.shape(0)?).zip(tiled_bits(cx.declared()?)).is_some_and(|(a, b)| a == b);
    if bits(e, &d) != bits(te, &td) && !tiled {
        return Err(cx.err(format!(
            "bitcast changes the size in bits: operand {} has {}, result {} has {}",
            show(cx.shape(0)?),
            bits(e, &d),
            show(cx.declared()?),
            bits(te, &td)
        )));
    }
    Ok(cx.declared()?.clone())
}

pub(super) fn copy_start(cx: &Cx) -> R<Shape> {
    let a = cx.shape(0)?;
    Ok(Shape::Tuple(vec![a.clone(), a.clone(), Shape::scalar(ElemType::U32)]))
}

pub(super) fn copy_done(cx: &Cx) -> R<Shape> {
    match cx.shape(0)? {
        Shape::Tuple(t) if t.len() == 3 && t[0].compatible(&t[1]) => Ok(t[0].clone()),
        s => Err(cx.err(format!(
            "copy-done operand must be a copy-start's (T, T, u32[]) tuple, got {}",
            show(s)
        ))),
    }
}
