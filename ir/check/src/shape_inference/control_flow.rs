//! Calls and control flow (XLA's `InferCallShape`, `InferWhileShape`,
//! `InferConditionalShape`): `call` and `fusion` (arguments against the callee's
//! parameters), `while` (condition and body against the loop state) and `conditional`
//! (the selector, and every branch's parameter and result).

use hlo_ir::op::Branches;
use hlo_ir::{CompId, ElemType, Shape};

use super::context::{Cx, R, scalar};
use super::show;

pub(super) fn call_like(cx: &Cx, id: hlo_ir::CompId, first: usize) -> R<Shape> {
    let c = cx.callee(id)?;
    let ps = &c.params;
    let args = &cx.ops[first..];
    if ps.len() != args.len() {
        return Err(cx.err(format!(
            "{} passes {} arguments to `{}`, which takes {}",
            cx.name(),
            args.len(),
            c.name,
            ps.len()
        )));
    }
    for (k, p) in ps.iter().enumerate() {
        let a = cx.shape(first + k)?;
        if !a.compatible(p) {
            return Err(cx.err(format!(
                "argument {k} is {} but parameter {k} of `{}` is {}",
                show(a),
                c.name,
                show(p)
            )));
        }
    }
    Ok(cx.callee_root(&c)?.clone())
}

pub(super) fn while_loop(cx: &Cx, condition: CompId, body: CompId) -> R<Shape> {
    let init = cx.shape(0)?;
    let (c, b) = (cx.callee(condition)?, cx.callee(body)?);
    for (what, comp) in [("condition", &c), ("body", &b)] {
        let ps = &comp.params;
        if ps.len() != 1 || !ps[0].compatible(init) {
            return Err(cx.err(format!(
                "while {what} `{}` must take one parameter of the init shape {}, takes ({})",
                comp.name,
                show(init),
                ps.iter().map(|s| show(s)).collect::<Vec<_>>().join(", ")
            )));
        }
    }
    let cr = cx.callee_root(&c)?;
    if scalar(cr) != Some(ElemType::Pred) {
        return Err(cx.err(format!(
            "while condition `{}` must return pred[], returns {}",
            c.name,
            show(cr)
        )));
    }
    let br = cx.callee_root(&b)?;
    if !br.compatible(init) {
        return Err(cx.err(format!(
            "while body `{}` returns {}, not the init shape {}",
            b.name,
            show(br),
            show(init)
        )));
    }
    Ok(init.clone())
}

pub(super) fn conditional(cx: &Cx, branches: &Branches) -> R<Shape> {
    let sel = cx.shape(0)?;
    let comps: Vec<hlo_ir::CompId> = match branches {
        Branches::TrueFalse(t, f) => {
            if scalar(sel) != Some(ElemType::Pred) {
                return Err(cx.err(format!(
                    "conditional with true/false computations needs a pred[] selector, got {}",
                    show(sel)
                )));
            }
            vec![*t, *f]
        }
        Branches::Indexed(b) => {
            if scalar(sel) != Some(ElemType::S32) {
                return Err(cx.err(format!(
                    "conditional with branch_computations needs an s32[] selector, got {}",
                    show(sel)
                )));
            }
            b.clone()
        }
    };
    if cx.ops.len() != comps.len() + 1 {
        return Err(cx.err(format!(
            "conditional has {} branches but {} branch operands",
            comps.len(),
            cx.ops.len() - 1
        )));
    }
    let mut result: Option<&Shape> = None;
    for (k, id) in comps.iter().enumerate() {
        let c = cx.callee(*id)?;
        let ps = &c.params;
        let a = cx.shape(k + 1)?;
        if ps.len() != 1 || !ps[0].compatible(a) {
            return Err(cx.err(format!(
                "branch {k} `{}` must take one parameter of shape {}",
                c.name,
                show(a)
            )));
        }
        let r = cx.callee_root(&c)?;
        if let Some(r0) = result {
            if !r0.compatible(r) {
                return Err(cx.err(format!(
                    "conditional branches return different shapes: {} and {} (branch {k})",
                    show(r0),
                    show(r)
                )));
            }
        } else {
            result = Some(r);
        }
    }
    result.cloned().ok_or_else(|| cx.err("conditional has no branches"))
}
