//! Side effects as the cleanup passes see them: one answer per computation, computed once
//! per pass run, so that asking about an instruction costs O(its callees).
//!
//! The rule itself is `hlo_ir::op_props` ([`Op::has_side_effects`], XLA's
//! `HasSideEffectNoRecurse`, and [`SideEffects`] through callees); this module only caches
//! it for a module that the pass is about to edit. A `while`/`conditional`/`call`/... whose
//! called computations contain a side-effecting instruction is side-effecting; so is an
//! `async-update`/`async-done` whose callee is inherited (unknown here).

use hlo_ir::op_props::SideEffects;
use hlo_ir::{Module, Op};

/// Whether each computation of a module has side effects (through its callees).
#[derive(Debug, Clone)]
pub struct Effects {
    comps: Vec<bool>,
}

impl Effects {
    /// Scans every computation of `m` once.
    pub fn of(m: &Module) -> Effects {
        let mut fx = SideEffects::new();
        Effects { comps: m.comp_ids().map(|c| fx.computation(m, c)).collect() }
    }

    /// Whether an instruction of operation `op` has side effects. A computation the
    /// module does not have counts as side-effecting.
    pub fn op(&self, op: &Op) -> bool {
        op.has_side_effects()
            || matches!(op, Op::Async { calls: None, .. })
            || op
                .called_computations()
                .iter()
                .any(|&(_, c)| self.comps.get(c.index()).copied().unwrap_or(true))
    }
}

/// Whether `op` computes its value from its operands alone, so that a pass may evaluate it
/// elsewhere (ahead of time, or once before a loop): not a parameter; nothing stateful,
/// communicating or random; no token, barrier, `domain` or custom-call; no `while` (its
/// trip count need not be bounded). Callees' side effects are [`Effects::op`]'s question.
pub fn is_pure_value(op: &Op) -> bool {
    use hlo_ir::Opcode::*;
    !matches!(
        op,
        Op::Parameter { .. }
            | Op::While { .. }
            | Op::CustomCall(_)
            | Op::Collective { .. }
            | Op::Async { .. }
            | Op::CopyStart { .. }
            | Op::SendRecv { .. }
            | Op::Infeed { .. }
            | Op::Outfeed { .. }
            | Op::Rng { .. }
            | Op::RngBitGenerator { .. }
            | Op::RngGetAndUpdateState { .. }
            | Op::Domain { .. }
            | Op::Plain(AfterAll | AddDependency | OptBarrier | CopyDone)
    )
}
