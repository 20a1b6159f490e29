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

use hlo_ir::{Diagnostic, Module, Op, Opcode};

use super::rewrite::{replace, same_shape};
use crate::pipeline::{Pass, PassContext};

pub struct TupleSimplifier;

impl Pass for TupleSimplifier {
    fn name(&self) -> &'static str {
        "tuple-simplifier"
    }

    fn run(&mut self, m: &mut Module, _cx: &mut PassContext) -> Result<bool, Diagnostic> {
        let mut changed = false;
        for id in m.comp_ids() {
            let comp = m.comp_mut(id);
            for n in comp.post_order() {
                if !comp.contains(n) {
                    continue;
                }
                let instr = comp.instr(n);
                let target = match &instr.op {
                    Op::GetTupleElement { index } => {
                        let Some(t) = comp.operand(n, 0) else { continue };
                        if !matches!(comp.instr(t).op, Op::Plain(Opcode::Tuple)) {
                            continue;
                        }
                        let Ok(k) = u32::try_from(*index) else { continue };
                        comp.operand(t, k)
                    }
                    Op::Plain(Opcode::Tuple) => {
                        let ops = comp.operands(n);
                        let Some(&first) = ops.first() else { continue };
                        let Some(src) = comp.operand(first, 0) else { continue };
                        let all = ops.iter().enumerate().all(|(k, &o)| {
                            matches!(comp.instr(o).op, Op::GetTupleElement { index } if index == k as i64) && comp.operand(o, 0) == Some(src)
                        });
                        let arity = comp.instr(src).shape.tuple_elements().map(<[_]>::len);
                        (all && arity == Some(ops.len())).then_some(src)
                    }
                    _ => continue,
                };
                if let Some(t) = target
                    && same_shape(&comp.instr(t).shape, &comp.instr(n).shape)
                {
                    changed |= replace(comp, n, t);
                }
            }
        }
        Ok(changed)
    }
}
