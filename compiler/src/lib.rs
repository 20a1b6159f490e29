//! `hlo-compiler`: passes over the HLO IR and, for now, host tensor I/O.
//!
//! - [`npz`]: read program inputs and expected outputs from `.npz`, write outputs.
//! - [`compare`]: the corpus comparison rule with per-output tolerances.

pub mod compare;
pub mod npz;
