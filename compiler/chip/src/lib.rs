//! `hlo-chip`: the TPU chip model, "tile programs in, cycles out". It times programs
//! that the TPU lowering (`hlo-tpu`) made from HLO, and single GEMMs and convolutions
//! (`hloc sim`), and knows nothing of HLO itself: no crate of the workspace is below it.
//!
//! - [`config`]: the hardware description ([`config::TpuConfig`]) and TPU v2/v3/v4/v5e/v5p presets.
//! - [`tile_ir`]: the tile-level program the array executes (folds, loads, streams, DMA).
//! - [`timeline`]: the fast fold-level model (closed-form recurrences).
//! - [`pe_array`]: the PE-level model, one clock at a time with real values.
//! - [`scalesim`]: SCALE-Sim 3.0 mode, with [`scalesim_mem`], its memory system.
//! - [`tpu_mode`]: the TPU mode (pipelined folds, DMA, HBM roofline).
//! - [`program`]: the program-level IR of a whole lowered step (kernels over HBM buffers,
//!   MXU/VPU/EUP/XLU work, DMA, control flow); [`chip`]: the multi-core chip model that
//!   times it and reports (per op, per class, critical path, Chrome trace); [`listing`]:
//!   the program printed with each kernel's plan.
//! - [`torus`]: a slice's ICI mesh or torus and how a device group lies on it; [`ici`]:
//!   a collective's time on it as per-axis ring phases (and across slices on the DCN).
//! - [`report`]: reports as JSON, CSV and text; [`trace`]: Chrome-trace timelines.

pub mod chip;
pub mod config;
pub mod ici;
pub mod listing;
pub mod pe_array;
pub mod program;
pub mod report;
pub mod scalesim;
pub mod scalesim_mem;
pub mod tile_ir;
pub mod timeline;
pub mod torus;
pub mod tpu_mode;
pub mod trace;

/// The TPU model's error: a hardware configuration, a layer or a simulation request it
/// cannot take (a bad array size, a layer that does not fit, a memory the mode lacks).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TpuError {
    /// The input is not one the model can simulate; the message says why.
    #[error("{0}")]
    Invalid(String),
}

impl From<String> for TpuError {
    fn from(message: String) -> TpuError {
        TpuError::Invalid(message)
    }
}

impl From<&str> for TpuError {
    fn from(message: &str) -> TpuError {
        TpuError::Invalid(message.to_string())
    }
}

/// The message, for callers that report errors as text.
impl From<TpuError> for String {
    fn from(e: TpuError) -> String {
        e.to_string()
    }
}
