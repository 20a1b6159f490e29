//! `hlo-compiler`: passes over the HLO IR and, for now, host tensor I/O.
//!
//! - [`npz`]: read program inputs and expected outputs from `.npz`, write outputs.
//! - [`compare`]: the corpus comparison rule with per-output tolerances.
//! - [`passes`]: passes over the IR (shape inference).

pub mod compare;
pub mod npz;
pub mod passes;
pub mod interp;
pub mod tpu;
