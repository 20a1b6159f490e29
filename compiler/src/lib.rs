//! `hlo-compiler`: passes over the HLO IR and, for now, host tensor I/O.
//!
//! - [`npz`]: read program inputs and expected outputs from `.npz`, write outputs.
//! - [`compare`]: the corpus comparison rule with per-output tolerances.
//! - [`passes`]: passes over the IR (shape inference).
//! - [`interp`]: the reference interpreter.
//! - [`tpu`]: the TPU hardware model (systolic-array simulator).
//! - [`atomic_file`]: all-or-nothing file writes.

pub mod atomic_file;
pub mod compare;
pub mod npz;
pub mod passes;
pub mod interp;
pub mod tpu;
