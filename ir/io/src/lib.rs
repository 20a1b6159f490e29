//! Host tensor I/O: what moves [`hlo_ir::Tensor`]s between files and programs, kept here
//! beside `Tensor` so the CLI, the Python package, the fuzz harness and the tests share it
//! without one depending on another.
//!
//! - [`npz`]: read program inputs and expected outputs from `.npz`, write outputs.
//! - [`compare`]: the corpus comparison rule with per-output tolerances.
//! - [`oracle`]: where the XLA oracle's Python is, and the case sets it generates.
//!
//! `.npz` outputs are written all or nothing (a temporary file renamed over the
//! destination); other crates write their files atomically with `tempfile` themselves.

pub mod compare;
pub mod npz;
pub mod oracle;
