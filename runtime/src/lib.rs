//! `hlo-runtime`: HLO training steps compiled to native code with Cranelift and run on the
//! host, on one device or on N.
//!
//! Modules go through the compile driver (`hlo-driver`: checks, specialization, sharding
//! propagation and partitioning, the optimizer); the runtime generates code for what it
//! produces and runs it.
//!
//! - [`Program`]: one checked module compiled ([`Program::compile`]); runs on host tensors
//!   ([`Program::run`], or [`Program::run_with`] to reuse the output tensors of an earlier
//!   run, take the arguments in two parts or record per-kernel times: [`RunOptions`]).
//! - [`Runtime`]: compiles on demand for the argument shapes a module is called with,
//!   through a shape-keyed cache (in memory, and optionally in a directory across
//!   processes); a miss is explained ([`Outcome`]). [`Entry`] is the handle a training
//!   loop keeps.
//! - [`TrainStep`]: a training step whose parameters and optimizer state stay resident
//!   between steps.
//! - [`SpmdProgram`]: a sharded module partitioned onto N host devices (threads) that
//!   exchange data through collectives.
//! - [`checkpoint`]: the state of a [`TrainStep`] saved and restored as `safetensors`
//!   files ([`TrainStep::save`], [`TrainStep::restore`]).
//! - [`RuntimeError`]: every failure, typed; compile errors carry the located
//!   [`hlo_ir::Diagnostics`] of the checks and phases, the JIT's refusals say what it
//!   refused ([`Unsupported`]), failed runs why ([`RunError`]).
//!
//! Embedding it (the README's example):
//!
//! ```
//! # use hlo_ir::Tensor;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let module = hlo_driver::parse(hlo_runtime::doc_example::STEP)?.into_inner();
//! # let initial_params = vec![Tensor::from_f32(&[4], &[0.0; 4])?];
//! # let x = Tensor::from_f32(&[4], &[1.0, 2.0, 3.0, 4.0])?;
//! let rt = hlo_runtime::Runtime::new(); // .with_cache_dir(dir) to persist
//! let entry = rt.entry("step.hlo", &module); // fingerprint computed once
//! let mut step = hlo_runtime::TrainStep::from_entry(entry, initial_params);
//! let first = step.step(&[x.clone()])?; // compiled for these shapes, then cache hits
//! let loss = step.step(&[x])?; // params stay resident; no allocation per step
//! assert!(loss < first);
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

mod cache;
pub mod checkpoint;
mod codegen;
mod complex_refusal;
pub mod cpu;
mod error;
mod exec;
mod fpenv;
mod host;
mod jit;
mod library;
mod pool;
mod program;
mod row_chain;
mod runtime;
mod spmd;
mod switch;
mod train;

#[cfg(test)]
mod tests;

pub use cache::{
    CacheStats, Fingerprint, Miss, MissReason, Outcome, PadError, RecompileWarning, bucket, pad_dim,
};
pub use error::{RunError, RuntimeError, Unsupported};
pub use exec::{KernelKind, Stats};
pub use pool::{default_threads, env_threads};
pub use program::{CompileOptions, Program, RunOptions};
pub use runtime::{Compiled, DiskEvent, Entry, Runtime};
pub use spmd::SpmdProgram;
pub use train::TrainStep;

/// Throughput of the library kernels the JIT calls for `dot` and `convolution` (the
/// measurements behind the GEMM crate's choice; `cargo run --release -p hlo-runtime
/// --example gemm_table`).
pub mod kernel_bench {
    pub use hlo_kernels::{BenchCase, bf16_gflops, conv_gflops, gemm_gflops, gemm_gflops_table};
}

/// The module of the crate-level example: one SGD step that pulls four parameters towards
/// the batch (`loss = sum((w - x)^2)`, `w' = w - 0.2 (w - x)`).
#[doc(hidden)]
pub mod doc_example {
    /// The step's HLO text.
    pub const STEP: &str = "HloModule step

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  w = f32[4] parameter(0)
  x = f32[4] parameter(1)
  d = f32[4] subtract(w, x)
  sq = f32[4] multiply(d, d)
  zero = f32[] constant(0)
  loss = f32[] reduce(sq, zero), dimensions={0}, to_apply=add
  lr = f32[] constant(0.2)
  lrb = f32[4] broadcast(lr), dimensions={}
  g = f32[4] multiply(d, lrb)
  w2 = f32[4] subtract(w, g)
  ROOT t = (f32[], f32[4]) tuple(loss, w2)
}
";
}
