//! `tuple-simplifier`: removes tuples that are built only to be taken apart, as XLA's
//! `TupleSimplifier`.
//!
//! - `get-tuple-element(tuple(a0, a1, ...)), index=k` → `ak`;
//! - `tuple(get-tuple-element(t, 0), ..., get-tuple-element(t, n-1))` of one tuple `t`
//!   with exactly `n` elements and the tuple's own shape → `t`.
//!
//! Both rewrites require the replacement to have exactly the replaced instruction's shape
//! (layouts included, a missing layout counting as the default). Not done: looking
//! through `while`/`call` boundaries, or tuples of constants.

use hlo_ir::{Computation, Diagnostic, Module, NodeIndex, Op, Opcode};

use super::rewrite::rewrite_each;
use hlo_pipeline::{Pass, PassContext};

pub struct TupleSimplifier;

impl Pass for TupleSimplifier {
    fn name(&self) -> &'static str {
        "tuple-simplifier"
    }

    fn run(&mut self, m: &mut Module, _cx: &mut PassContext) -> Result<bool, Diagnostic> {
        Ok(rewrite_each(m, shortcut))
    }
}

/// The value a `get-tuple-element` of a `tuple`, or a `tuple` rebuilt from every element
/// of one tuple in order, stands for.
fn shortcut(comp: &mut Computation, n: NodeIndex) -> Option<NodeIndex> {
    match &comp.instr(n).op {
        Op::GetTupleElement { index } => {
            let t = comp.operand(n, 0)?;
            if !matches!(comp.instr(t).op, Op::Plain(Opcode::Tuple)) {
                return None;
            }
            comp.operand(t, u32::try_from(*index).ok()?)
        }
        Op::Plain(Opcode::Tuple) => {
            let ops = comp.operands(n);
            let src = comp.operand(*ops.first()?, 0)?;
            let all = ops.iter().enumerate().all(|(k, &o)| {
                matches!(comp.instr(o).op, Op::GetTupleElement { index } if index == k as i64)
                    && comp.operand(o, 0) == Some(src)
            });
            let arity = comp.instr(src).shape.tuple_elements().map(<[_]>::len);
            (all && arity == Some(ops.len())).then_some(src)
        }
        _ => None,
    }
}
