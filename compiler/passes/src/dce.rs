//! `dce`: dead-code elimination, as XLA's `HloDCE`.
//!
//! In every computation, removes the instructions that nothing needs: not the root, not
//! used by a live instruction, not in a control edge, and free of side effects
//! ([`super::effects`]: `send`/`recv`, `infeed`/`outfeed`, `rng`, side-effecting
//! custom-calls, collectives, and `while`/`conditional`/`call`/... whose callees contain
//! any of these). Parameters are never removed (that would change the signature). Then
//! removes the computations no longer reachable from the entry.
//!
//! Not done: removing unused elements of a `while` loop's state or unused parameters of
//! a computation.

use hlo_ir::{Diagnostic, Module};

use super::effects::Effects;
use hlo_pipeline::{Pass, PassContext};

pub struct Dce;

impl Pass for Dce {
    fn name(&self) -> &'static str {
        "dce"
    }

    fn run(&mut self, m: &mut Module, _cx: &mut PassContext) -> Result<bool, Diagnostic> {
        let fx = Effects::of(m);
        let mut removed = 0;
        for id in m.comp_ids() {
            removed += m.comp_mut(id).remove_dead(|i| !fx.op(&i.op));
        }
        removed += m.remove_unreachable_computations();
        Ok(removed > 0)
    }
}
