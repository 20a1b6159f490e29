//! `spmd-partition`: turns a module with shardings (run `sharding-propagation` first)
//! into the per-device SPMD program for its device count ([`crate::spmd::partition`]).
//! Calls are inlined first; independent all-reduces are combined last
//! ([`crate::passes::all_reduce_combiner`]). The result is real HLO: `num_partitions=N`, per-device
//! parameter and result shapes with their global shardings, `partition-id` offsets and
//! collectives, which XLA runs as an already partitioned program.

use hlo_ir::{Diagnostic, Module, Op};

use crate::passes::inline_calls::InlineCalls;
use crate::pipeline::{Pass, PassContext};

pub struct SpmdPartition;

impl Pass for SpmdPartition {
    fn name(&self) -> &'static str {
        "spmd-partition"
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext) -> Result<bool, Diagnostic> {
        if crate::spmd::device_count(m) <= 1 {
            return Ok(false);
        }
        let has_calls = m.entry().instrs().any(|i| matches!(i.op, Op::Call { .. }));
        if has_calls {
            InlineCalls.run(m, cx)?;
        }
        let done = crate::spmd::partition(m)?;
        cx.spmd = done;
        crate::passes::all_reduce_combiner::AllReduceCombiner.run(m, cx)?;
        if let Some(p) = cx.spmd.as_mut() {
            p.collectives = crate::spmd::inventory::inventory(m)
                .into_iter()
                .map(|i| (i.kind, i.count))
                .collect();
        }
        Ok(true)
    }
}
