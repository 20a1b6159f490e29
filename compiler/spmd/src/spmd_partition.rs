//! `spmd-partition`: turns a module with shardings (run `sharding-propagation` first)
//! into the per-device SPMD program for its device count ([`crate::partition`](mod@crate::partition)).
//! Calls are inlined first. The result is real HLO: `num_partitions=N`, per-device
//! parameter and result shapes with their global shardings, `partition-id` offsets and
//! collectives, which XLA runs as an already partitioned program, exactly as printed.
//! Independent all-reduces are not combined here: XLA's CPU compiler cannot compile a
//! variadic all-reduce from text ("does not have a layout"), so combining them
//! (`all-reduce-combiner`) is the optimizer's job, in the engines' programs.

use hlo_ir::{Diagnostic, Module, Op};

use hlo_pipeline::inline_calls::InlineCalls;
use hlo_pipeline::{Pass, PassContext};

pub struct SpmdPartition;

impl Pass for SpmdPartition {
    fn name(&self) -> &'static str {
        "spmd-partition"
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext) -> Result<bool, Diagnostic> {
        if crate::partition::device_count(m) <= 1 {
            return Ok(false);
        }
        let has_calls = m.entry().instrs().any(|i| matches!(i.op, Op::Call { .. }));
        if has_calls {
            InlineCalls.run(m, cx)?;
        }
        // A caller may ask for exact partial sums (a `PartialSums` in the context).
        let sums = cx.report::<crate::partition::PartialSums>().copied().unwrap_or_default();
        let done = crate::partition::partition_with(m, sums)?;
        if let Some(done) = done {
            cx.set_report(done);
        }
        if let Some(p) = cx.report_mut::<crate::partition::Partitioned>() {
            p.collectives =
                crate::inventory::inventory(m).into_iter().map(|i| (i.kind, i.count)).collect();
        }
        Ok(true)
    }
}
