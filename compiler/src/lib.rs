//! `hlo-compiler`: passes over the HLO IR, the reference interpreter and the TPU model.
//! Host tensor I/O (`.npz`, comparison, atomic writes) lives in `hlo_ir::io`.
//!
//! - [`passes`]: passes over the IR: the checks (shape inference, dynamic shapes) and the
//!   optimizer (cleanup passes, fusion), with the pass registry and the default order.
//! - [`pipeline`]: the pass manager (verification between passes, fixpoint groups, dumps,
//!   timing).
//! - [`interp`]: the reference interpreter.
//! - [`tpu`]: the TPU hardware model (systolic-array simulator, whole-chip model, the
//!   program-level TPU IR); it never sees HLO.
//! - [`tpu_lower`]: lowering of an optimized module onto the TPU IR; [`tpu_engine`]: runs
//!   it on the model (timing, and values through the interpreter with MXU numerics).
//! - [`cost`]: FLOP, transcendental and byte counts as XLA's cost analysis counts them.
//! - [`schedule`]: the linearization and liveness analysis every engine runs by.
//! - [`specialize`]: shape-polymorphic modules specialized to concrete argument shapes.
//! - [`sharding`]: sharding semantics (GSPMD), named meshes, per-op propagation rules and
//!   the reshard report; the pass is `passes::sharding_propagation`.
//! - [`seeded`]: seeded pseudo-random inputs for a module's parameters.

pub mod complex_support;
pub mod cost;
pub mod interp;
pub mod passes;
pub mod pipeline;
pub mod schedule;
pub mod seeded;
pub mod sharding;
pub mod specialize;
pub mod spmd;
pub mod tpu;
pub mod tpu_engine;
pub mod tpu_lower;
