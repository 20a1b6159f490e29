//! `hlo-devices`: a partitioned program ([`hlo_spmd::devices::Plan`]) run on N devices of
//! the reference interpreter. The global inputs are split into each device's shards by
//! the plan, every device runs the per-device module on its own interpreter and thread,
//! their collectives meet on one [`Fabric`] ([`hlo_fabric::on_devices`]; the interpreter
//! joins it through [`Hooks::device`]), and the global outputs are assembled from the
//! devices' by the plan's output shardings.
//!
//! It is the oracle the other engines' N-device runs are checked against (the JIT's
//! `hlo_runtime::SpmdProgram`, the TPU model's chips), and sits above both the
//! partitioner and the interpreter so that `hlo-spmd` only partitions.

use hlo_fabric::Fabric;
use hlo_interp::{Hooks, Interpreter};
use hlo_ir::{Diagnostic, Tensor};
use hlo_spmd::devices::{Plan, assemble_outputs, shard_inputs};

/// Device `d` of an SPMD run: the interpreter's collectives go to `fabric`.
struct Device<'f> {
    d: usize,
    fabric: &'f Fabric,
}

impl Hooks for Device<'_> {
    fn device(&self) -> Option<(usize, &Fabric)> {
        Some((self.d, self.fabric))
    }
}

/// Every device runs the partitioned program on the interpreter.
pub fn run_interp(plan: &Plan, inputs: &[Tensor]) -> Result<Vec<Tensor>, Diagnostic> {
    let per = shard_inputs(plan, inputs)?;
    let budget = plan.device_budget();
    let outs = hlo_fabric::on_devices(plan.devices, |d, fabric| {
        let hooks = Device { d, fabric };
        Interpreter::new(&plan.module).with_hooks(&hooks).with_memory_budget(budget).run(&per[d])
    })?;
    assemble_outputs(plan, &outs)
}
