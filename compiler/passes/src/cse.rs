//! `cse`: common-subexpression elimination per computation, as XLA's `HloCSE`.
//!
//! First identical constants (same shape, literal equal bit for bit: `0.0` and `-0.0`
//! differ, a NaN equals a NaN of the same bits) and identical iotas are merged; then, in
//! dependency order, every instruction whose operation (opcode and every attribute,
//! called computations by id: [`Op::cse_key`]), shape and operands equal those of an
//! earlier one is replaced by it. For the commutative opcodes (`add`, `multiply`,
//! `maximum`, `minimum`, `and`, `or`, `xor`) and `compare` with `EQ`/`NE` the operands
//! may come in either order. Hash based: one map lookup per instruction.
//!
//! Never merged: parameters, side-effecting instructions (also through callees:
//! [`super::effects`]), `opt-barrier`, elided constants (`{...}`), instructions with
//! control predecessors, and instructions whose shardings differ.

use std::collections::HashMap;

use hlo_ir::op::CmpDirection;
use hlo_ir::op_props::OpKey;
use hlo_ir::{Computation, Diagnostic, Module, NodeIndex, Op};

use super::effects::Effects;
use hlo_pipeline::{Pass, PassContext};

pub struct Cse;

impl Pass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn run(&mut self, m: &mut Module, _cx: &mut PassContext) -> Result<bool, Diagnostic> {
        let fx = Effects::of(m);
        let mut changed = false;
        for id in m.comp_ids() {
            changed |= cse_computation(m.comp_mut(id), &fx);
        }
        Ok(changed)
    }
}

fn commutes(op: &Op) -> bool {
    match op {
        Op::Plain(o) => o.is_commutative(),
        Op::Compare { direction, .. } => matches!(direction, CmpDirection::Eq | CmpDirection::Ne),
        _ => false,
    }
}

fn key_of(comp: &Computation, n: NodeIndex, fx: &Effects) -> Option<(OpKey, Vec<NodeIndex>)> {
    let i = comp.instr(n);
    if fx.op(&i.op) || !comp.control_predecessors(n).is_empty() {
        return None;
    }
    let key = i.op.cse_key(&i.shape)?;
    let mut ops = comp.operands(n);
    if commutes(&i.op) {
        ops.sort_unstable();
    }
    Some((key, ops))
}

fn cse_computation(comp: &mut Computation, fx: &Effects) -> bool {
    let order = comp.post_order();
    let (first, rest): (Vec<NodeIndex>, Vec<NodeIndex>) = order
        .into_iter()
        .partition(|&n| matches!(comp.instr(n).op, Op::Constant(_) | Op::Iota { .. }));
    let mut seen: HashMap<(OpKey, Vec<NodeIndex>), NodeIndex> = HashMap::new();
    let mut merged = Vec::new();
    for n in first.into_iter().chain(rest) {
        let Some(key) = key_of(comp, n, fx) else { continue };
        match seen.get(&key) {
            Some(&earlier) => {
                if comp.instr(earlier).sharding == comp.instr(n).sharding {
                    comp.replace_all_uses(n, earlier);
                    merged.push(n);
                }
            }
            None => {
                seen.insert(key, n);
            }
        }
    }
    // Remove the merged copies latest first: an operand's use list holds its newest user
    // first, so each removal unlinks near the head instead of walking past every other
    // copy (quadratic for a value shared by thousands of identical instructions).
    for &n in merged.iter().rev() {
        let _ = comp.remove(n);
    }
    !merged.is_empty()
}
