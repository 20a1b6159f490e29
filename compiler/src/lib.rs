//! `hlo-compiler`: passes over the HLO IR and, for now, host tensor I/O.
//!
//! - [`npz`]: read program inputs and expected outputs from `.npz`, write outputs.
//! - [`compare`]: the corpus comparison rule with per-output tolerances.
//! - [`passes`]: passes over the IR: the checks (shape inference, dynamic shapes) and the
//!   optimizer (cleanup passes, fusion), with the pass registry and the default order.
//! - [`pipeline`]: the pass manager (verification between passes, fixpoint groups, dumps,
//!   timing).
//! - [`interp`]: the reference interpreter.
//! - [`tpu`]: the TPU hardware model (systolic-array simulator).
//! - [`atomic_file`]: all-or-nothing file writes.
//! - [`schedule`]: the linearization and liveness analysis every engine runs by.
//! - [`specialize`]: shape-polymorphic modules specialized to concrete argument shapes.
//! - [`seeded`]: seeded pseudo-random inputs for a module's parameters.

pub mod atomic_file;
pub mod compare;
pub mod npz;
pub mod passes;
pub mod pipeline;
pub mod schedule;
pub mod seeded;
pub mod specialize;
pub mod interp;
pub mod tpu;
