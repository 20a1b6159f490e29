//! Host tensor I/O: what moves [`hlo_ir::Tensor`]s between files and programs, kept here
//! beside `Tensor` so the interpreter, the runtime and the CLI share it without one
//! depending on another.
//!
//! - [`npz`]: read program inputs and expected outputs from `.npz`, write outputs.
//! - [`compare`]: the corpus comparison rule with per-output tolerances.
//! - [`atomic_file`]: all-or-nothing file writes.

pub mod atomic_file;
pub mod compare;
pub mod npz;
pub mod oracle;
