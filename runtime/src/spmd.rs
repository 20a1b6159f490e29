//! SPMD execution on N host devices: a sharded module is propagated (when it has not
//! been), partitioned ([`hlo_spmd::devices::plan`]), optimized and compiled
//! once; every device is a thread running that one program on its shards, with
//! collectives over a shared-memory [`Fabric`](hlo_fabric::Fabric)
//! (deterministic: each group reduces in group order, so every run gives the same bits).
//! Inputs are split and outputs reassembled from the global shardings.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use hlo_check::Checked;
use hlo_ir::{Module, Tensor};
use hlo_spmd::devices::{self, Plan};

use crate::cache::{Fingerprint, module_fingerprint};
use crate::error::{RunError, RuntimeError};
use crate::exec::Device;
use crate::program::{CompileOptions, Program};

/// A module compiled for N devices: each device is a thread running the one per-device
/// program on its shards; collectives meet on a shared-memory fabric.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let src = "HloModule m, num_partitions=2\nENTRY e {\n  p = f32[4] parameter(0), sharding={devices=[2]0,1}\n  ROOT n = f32[4] negate(p), sharding={devices=[2]0,1}\n}\n";
/// let global = hlo_driver::parse(src)?;
/// let program = hlo_runtime::SpmdProgram::compile(&global, 2, &Default::default())?;
/// let x = hlo_ir::Tensor::from_f32(&[4], &[1.0, 2.0, 3.0, 4.0])?;
/// // Global tensors in and out: split by the input shardings, put back together.
/// assert_eq!(program.run(&[x])?[0].to_f64_vec()?, vec![-1.0, -2.0, -3.0, -4.0]);
/// assert_eq!(program.devices(), 2);
/// # Ok(())
/// # }
/// ```
pub struct SpmdProgram {
    /// The partition: the per-device module, the global inputs' and outputs' shardings, the
    /// collectives.
    pub plan: Plan,
    program: Program,
    /// Partitioning plus compilation.
    pub compile_time: Duration,
}

impl SpmdProgram {
    /// Compiles a checked global module for `devices` devices (`hlo_spmd::device_count`
    /// gives the count its shardings name): shardings propagated (unannotated
    /// instructions are replicated), the module partitioned, the per-device program
    /// optimized and compiled once.
    pub fn compile(
        global: &Checked<Module>,
        devices: usize,
        opts: &CompileOptions,
    ) -> Result<SpmdProgram, RuntimeError> {
        let t = Instant::now();
        let compiled = hlo_driver::compile_spmd(global, &hlo_driver::Host, devices, &opts.driver())
            .map_err(RuntimeError::compile)?;
        let hlo_driver::Partitioned { plan, program: module, .. } = compiled.program;
        let program = Program::generate(&module, module_fingerprint(global))?;
        Ok(SpmdProgram { plan, program, compile_time: t.elapsed() })
    }

    /// The fingerprint of the global module it was compiled from (what a checkpoint of its
    /// state records).
    pub fn fingerprint(&self) -> Fingerprint {
        self.program.fingerprint()
    }

    /// How many devices it runs on.
    pub fn devices(&self) -> usize {
        self.plan.devices
    }

    /// Runs every device on its shards of `inputs` (global tensors) and returns the global
    /// outputs.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, RuntimeError> {
        self.run_parts(inputs, &[])
    }

    /// [`SpmdProgram::run`] with the inputs in two parts (`first` then `rest`: resident
    /// state and a batch, without concatenating them).
    pub(crate) fn run_parts(
        &self,
        first: &[Tensor],
        rest: &[Tensor],
    ) -> Result<Vec<Tensor>, RuntimeError> {
        let per = devices::shard_input_parts(&self.plan, first, rest)
            .map_err(|d| RunError::ShardInputs(d.message))?;
        let outs = self.run_sharded(&per)?;
        Ok(devices::assemble_outputs(&self.plan, &outs)
            .map_err(|d| RunError::AssembleOutputs(d.message))?)
    }

    /// The global inputs' and outputs' element types and dims, in order.
    pub(crate) fn signature(&self) -> (Vec<hlo_ir::Shape>, Vec<hlo_ir::Shape>) {
        let shape = |s: &devices::Sharded| {
            let dims: Vec<u64> = s.dims.iter().map(|&d| d as u64).collect();
            hlo_ir::Shape::array(s.elem, &dims)
        };
        (
            self.plan.inputs.iter().map(shape).collect(),
            self.plan.outputs.iter().map(shape).collect(),
        )
    }

    /// Runs on inputs already split per device (`per[d]`); returns each device's outputs.
    /// A failure is the first device's that failed on its own
    /// ([`RunError::Device`]), not one that another device's failure woke.
    fn run_sharded(&self, per: &[Vec<Tensor>]) -> Result<Vec<Vec<Tensor>>, RuntimeError> {
        let n = self.plan.devices;
        if per.len() != n {
            let why = format!("{} device input sets for {n} devices", per.len());
            return Err(RunError::ShardInputs(why).into());
        }
        let failed: Vec<Mutex<Option<RuntimeError>>> = (0..n).map(|_| Mutex::new(None)).collect();
        let run = hlo_fabric::on_devices(n, |d, fabric| {
            self.program.run_device(Device { index: d, fabric }, &per[d]).map_err(|e| {
                let message = format!("device {d}: {e}");
                *failed[d].lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                hlo_ir::Diagnostic::error(None, message)
            })
        });
        run.map_err(|d| {
            // The device `on_devices` reports: the first that failed on its own; without one
            // (a device panicked), its message.
            let own = failed
                .into_iter()
                .enumerate()
                .filter_map(|(k, e)| Some((k, e.into_inner().unwrap_or_else(|p| p.into_inner())?)))
                .find(|(_, e)| !woken(e));
            match own {
                Some((device, error)) => RunError::Device { device, error: Box::new(error) },
                None => RunError::Devices(d.message),
            }
            .into()
        })
    }
}

/// Whether `e` is a device's error for having been woken by another device's failure.
fn woken(e: &RuntimeError) -> bool {
    matches!(
        e.run_error(),
        Some(RunError::Collective { error: hlo_fabric::FabricError::Aborted(_), .. })
    )
}
