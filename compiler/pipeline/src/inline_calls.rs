//! `inline-calls`: replaces every `call` (JAX's `closed_call`s, `is_composite` calls too)
//! by a copy of its callee's instructions, as XLA's `CallInliner`.
//!
//! Computations are visited callees first ([`Module::post_order`]), so a callee has no
//! calls left when it is copied and nested calls disappear in one run. The copy of each
//! callee instruction gets a fresh name from its own (metadata, sharding and extras are
//! kept), the callee's parameters become the call's operands, and the call's uses go to
//! the copy of the callee's root. Control predecessors of the call become control
//! predecessors of every copied instruction; its control successors follow its uses.
//! Finally computations no longer reachable from the entry are removed.
//!
//! Only `call` instructions are inlined: `fusion`, `while`, `conditional`, reducers and
//! the computations of custom-calls are left alone. A call of itself (an invalid
//! recursive call graph) is skipped.

use hlo_ir::hash::FnvHashMap;
use hlo_ir::{CompId, Diagnostic, Instr, Module, NodeIndex, Op};

use crate::{Pass, PassContext};

pub struct InlineCalls;

impl Pass for InlineCalls {
    fn name(&self) -> &'static str {
        "inline-calls"
    }

    fn run(&mut self, m: &mut Module, _cx: &mut PassContext) -> Result<bool, Diagnostic> {
        let mut changed = false;
        for id in m.post_order() {
            let calls: Vec<(NodeIndex, CompId)> = {
                let comp = m.comp(id);
                comp.post_order()
                    .into_iter()
                    .filter_map(|n| match comp.instr(n).op {
                        Op::Call { to_apply, .. }
                            if to_apply != id && m.get_comp(to_apply).is_some() =>
                        {
                            Some((n, to_apply))
                        }
                        _ => None,
                    })
                    .collect()
            };
            for (call, callee) in calls {
                changed |= inline_one(m, id, call, callee);
            }
        }
        if changed {
            m.remove_unreachable_computations();
        }
        Ok(changed)
    }
}

/// One callee instruction to copy: its node, a clone, its operands and control predecessors.
struct Item {
    node: NodeIndex,
    instr: Instr,
    operands: Vec<NodeIndex>,
    control: Vec<NodeIndex>,
}

/// Inlines `call` (in computation `caller`) of `callee`; false when it cannot be done
/// (a parameter without a matching operand, a callee without root).
fn inline_one(m: &mut Module, caller: CompId, call: NodeIndex, callee: CompId) -> bool {
    let (items, root) = {
        let c = m.comp(callee);
        let Some(root) = c.root() else { return false };
        let items: Vec<Item> = c
            .post_order()
            .into_iter()
            .map(|n| Item {
                node: n,
                instr: c.instr(n).clone(),
                operands: c.operands(n),
                control: c.control_predecessors(n).to_vec(),
            })
            .collect();
        (items, root)
    };
    let comp = m.comp_mut(caller);
    let args = comp.operands(call);
    let call_control = comp.control_predecessors(call).to_vec();
    // Check the parameters first so that a failure leaves the caller untouched.
    for it in &items {
        if let Op::Parameter { number, .. } = it.instr.op
            && number as usize >= args.len()
        {
            return false;
        }
    }
    let mut map: FnvHashMap<NodeIndex, NodeIndex> = FnvHashMap::default();
    for it in items {
        let new = match it.instr.op {
            Op::Parameter { number, .. } => args[number as usize],
            _ => {
                let Some(ops) =
                    it.operands.iter().map(|o| map.get(o).copied()).collect::<Option<Vec<_>>>()
                else {
                    return false;
                };
                let n = comp.add(it.instr, &ops);
                for p in it.control.iter().filter_map(|p| map.get(p)) {
                    comp.add_control_edge(*p, n);
                }
                for &p in &call_control {
                    comp.add_control_edge(p, n);
                }
                n
            }
        };
        map.insert(it.node, new);
    }
    let Some(&new_root) = map.get(&root) else { return false };
    comp.replace_all_uses(call, new_root);
    let _ = comp.remove(call);
    true
}
