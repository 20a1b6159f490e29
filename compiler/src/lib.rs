//! `hlo-compiler`: passes over the HLO IR, the reference interpreter and the TPU model.
//! Host tensor I/O (`.npz`, comparison, atomic writes) lives in `hlo_ir::io`.
//!
//! - [`passes`]: passes over the IR: the checks (shape inference, dynamic shapes) and the
//!   optimizer (cleanup passes, fusion), with the pass registry and the default order.
//! - [`pipeline`]: the pass manager (verification between passes, fixpoint groups, dumps,
//!   timing).
//! - [`interp`]: the reference interpreter.
//! - [`tpu`]: the TPU hardware model (systolic-array simulator).
//! - [`schedule`]: the linearization and liveness analysis every engine runs by.
//! - [`specialize`]: shape-polymorphic modules specialized to concrete argument shapes.
//! - [`seeded`]: seeded pseudo-random inputs for a module's parameters.

pub mod passes;
pub mod pipeline;
pub mod schedule;
pub mod seeded;
pub mod specialize;
pub mod interp;
pub mod tpu;
