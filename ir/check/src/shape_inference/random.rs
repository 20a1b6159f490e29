//! Random numbers: `rng` (the text decides the result; the bounds are scalars of its
//! element type) and `rng-bit-generator` (XLA's verifier and the state sizes and bit types
//! its CPU backend compiles). `rng-get-and-update-state` is answered in the dispatch
//! ([`super::infer_shape`]).

use hlo_ir::{ElemType, Shape};

use super::context::{Cx, R, scalar};
use super::show;

pub(super) fn rng(cx: &Cx) -> R<Shape> {
    let (e, _) = cx.declared_arr()?;
    for k in 0..2 {
        match scalar(cx.shape(k)?) {
            Some(t) if t == e => {}
            _ => {
                return Err(cx.err(format!(
                    "rng operand {k} must be a {e}[] scalar, got {}",
                    show(cx.shape(k)?)
                )));
            }
        }
    }
    Ok(cx.declared()?.clone())
}

/// `rng-bit-generator` (XLA's verifier: a tuple result has two elements, the state and
/// the bits, and the state keeps the operand's shape; XLA compiles a non-tuple result
/// too, so that is left to the engines). XLA's CPU backend also refuses, when it
/// compiles, a state that is not `u64[2]` (`rng_three_fry`) or `u64[2]`/`u64[3]`
/// (`rng_philox`, the default) and `pred` bits (StableHLO's verifier); those are checked
/// here too. Which integer or float widths the bits may have is the engines' business.
pub(super) fn rng_bit_generator(cx: &Cx, alg: hlo_ir::op::RngAlgorithm) -> R<Shape> {
    let declared = cx.declared()?;
    let Shape::Tuple(t) = declared else { return Ok(declared.clone()) };
    if t.len() != 2 {
        return Err(cx.err(format!(
            "rng-bit-generator produces a (state, bits) tuple of two elements, declared {}",
            show(declared)
        )));
    }
    let state = cx.array(0)?;
    if !t[0].compatible(cx.shape(0)?) {
        return Err(cx.err(format!(
            "rng-bit-generator's output state {} must have the input state's shape {}",
            show(&t[0]),
            show(cx.shape(0)?)
        )));
    }
    let n = match (state.elem, state.dims.as_slice()) {
        (ElemType::U64, [d]) => d.bound().unwrap_or(0),
        _ => {
            return Err(cx.err(format!(
                "rng-bit-generator's state must be a u64 vector, got {}",
                show(cx.shape(0)?)
            )));
        }
    };
    use hlo_ir::op::RngAlgorithm as A;
    match (alg, n) {
        (A::ThreeFry, 2) | (A::Philox | A::Default, 2 | 3) => {}
        (A::ThreeFry, _) => {
            return Err(
                cx.err(format!("rng_three_fry takes a u64[2] state (key, counter), got u64[{n}]"))
            );
        }
        _ => {
            return Err(cx.err(format!(
                "rng_philox (and rng_default on CPU) takes a u64[2] or u64[3] state, got u64[{n}]"
            )));
        }
    }
    match &t[1] {
        Shape::Array(b)
            if b.elem != ElemType::Pred && (b.elem.is_integer() || b.elem.is_float()) => {}
        s => {
            return Err(cx.err(format!(
                "rng-bit-generator produces integer or floating-point bits, declared {}",
                show(s)
            )));
        }
    }
    Ok(declared.clone())
}
