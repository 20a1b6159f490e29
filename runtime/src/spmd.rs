//! SPMD execution on N host devices: a sharded module is propagated (when it has not
//! been), partitioned ([`hlo_spmd::devices::plan`]), optimized and compiled
//! once; every device is a thread running that one program on its shards, with
//! collectives over a shared-memory [`Fabric`](hlo_interp::collectives::Fabric)
//! (deterministic: each group reduces in group order, so every run gives the same bits).
//! Inputs are split and outputs reassembled from the global shardings.

use std::time::{Duration, Instant};

use hlo_spmd::devices::{self, Plan};
use hlo_ir::{Module, Tensor};

use crate::exec::Device;
use crate::program::{CompileOptions, Program, RuntimeError};

/// A module compiled for N devices.
pub struct SpmdProgram {
    pub plan: Plan,
    program: Program,
    /// Partitioning plus compilation.
    pub compile_time: Duration,
}

impl SpmdProgram {
    /// `global` carries shardings on its instructions (run `sharding-propagation` first;
    /// unannotated instructions are replicated).
    pub fn compile(global: &Module, opts: &CompileOptions) -> Result<SpmdProgram, RuntimeError> {
        let t = Instant::now();
        let plan = devices::plan(global).map_err(|d| RuntimeError::Compile(d.message))?;
        let program = Program::compile(&plan.module, opts)?;
        Ok(SpmdProgram { plan, program, compile_time: t.elapsed() })
    }

    pub fn devices(&self) -> usize {
        self.plan.devices
    }

    /// Runs every device on its shards of `inputs` (global tensors) and returns the global
    /// outputs.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, RuntimeError> {
        let per =
            devices::shard_inputs(&self.plan, inputs).map_err(|d| RuntimeError::Run(d.message))?;
        let outs = self.run_sharded(&per)?;
        devices::assemble_outputs(&self.plan, &outs).map_err(|d| RuntimeError::Run(d.message))
    }

    /// Runs on inputs already split per device (`per[d]`); returns each device's outputs.
    pub fn run_sharded(&self, per: &[Vec<Tensor>]) -> Result<Vec<Vec<Tensor>>, RuntimeError> {
        if per.len() != self.plan.devices {
            return Err(RuntimeError::Run(format!(
                "{} device input sets for {} devices",
                per.len(),
                self.plan.devices
            )));
        }
        devices::on_devices(self.plan.devices, |d, fabric| {
            self.program
                .run_device(Device { index: d, fabric }, &per[d])
                .map_err(|e| hlo_ir::Diagnostic::error(None, format!("device {d}: {e}")))
        })
        .map_err(|d| RuntimeError::Run(d.message))
    }
}
