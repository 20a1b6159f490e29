//! Fusion: producer→consumer loop, input and output fusion ([`producer_consumer`]) and
//! sibling multi-output fusion ([`multi_output`]), every considered pair recorded with its
//! decision ([`decision`]); [`report`] summarizes a run.
//!
//! - [`rules`]: fusibility, cost classes (expensive, always duplicable), operand reuse.
//! - [`fused`]: building and growing fused computations in O(degree) per edit.
//!
//! Where fusion runs: in the entry and in every computation reached from it only through
//! control flow (`while` bodies and conditions, `conditional` branches, `call` and async
//! callees), each on its own. Never inside computations used as reducers, comparators,
//! scatter/select bodies, `map`/custom-call/collective appliers or fused computations
//! ([`fusible_computations`]): those are evaluated per element, not as kernels.

pub mod decision;
pub mod fused;
pub mod multi_output;
pub mod multi_output_consumer;
pub mod producer_consumer;
pub mod report;
pub mod rules;

use hlo_ir::op::Op;
use hlo_ir::{CompId, Module};

pub use multi_output::MultiOutputFusion;
pub use producer_consumer::Fusion;
pub use report::{FusionReport, fusion_report};

/// Computations in which fusion runs, in module post order (callees first): reached from
/// the entry through control-flow calls only, and never called as an embedded computation.
pub fn fusible_computations(m: &Module) -> Vec<CompId> {
    let n = m.comps().len();
    let mut embedded = vec![false; n];
    let mut control = vec![false; n];
    for c in m.comps() {
        for i in c.instrs() {
            let flow = matches!(
                i.op,
                Op::While { .. } | Op::Conditional(_) | Op::Call { .. } | Op::Async { .. }
            );
            for (_, callee) in i.op.called_computations() {
                if callee.index() < n && !flow {
                    embedded[callee.index()] = true;
                }
            }
        }
    }
    let mut stack = vec![m.entry];
    while let Some(id) = stack.pop() {
        if id.index() >= n || std::mem::replace(&mut control[id.index()], true) {
            continue;
        }
        for i in m.comp(id).instrs() {
            if matches!(
                i.op,
                Op::While { .. } | Op::Conditional(_) | Op::Call { .. } | Op::Async { .. }
            ) {
                stack.extend(i.op.called_computations().into_iter().map(|(_, c)| c));
            }
        }
    }
    m.post_order().into_iter().filter(|c| control[c.index()] && !embedded[c.index()]).collect()
}

/// How many instructions call each computation (a fused computation called from two
/// places must not be edited for one of them).
pub fn call_counts(m: &Module) -> Vec<u32> {
    let mut counts = vec![0u32; m.comps().len()];
    for c in m.comps() {
        for i in c.instrs() {
            for (_, callee) in i.op.called_computations() {
                if let Some(x) = counts.get_mut(callee.index()) {
                    *x += 1;
                }
            }
        }
    }
    counts
}
