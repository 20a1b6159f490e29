//! `hlo-tpu`: the TPU backend: lowering of optimized modules onto the chip model's
//! program IR (`hlo_chip::program`), and the engine that runs modules on the model
//! (`hlo-chip`, which knows nothing of HLO).
//!
//! - [`lower`]: an optimized module onto [`hlo_chip::program::Program`]; [`engine`]: runs
//!   it on the model (timing, and values through the interpreter with MXU numerics).
//! - [`pallas`]: Pallas kernels (`tpu_custom_call`) timed by their blocked algorithms.

pub mod engine;
pub mod lower;
pub mod pallas;
