//! The TPU backend's hardware model: a systolic-array (MXU) simulator.
//!
//! - [`config`]: the hardware description ([`config::TpuConfig`]) and TPU v2/v3/v4 presets.
//! - [`tile_ir`]: the tile-level program the array executes (folds, loads, streams, DMA).
//! - [`timeline`]: the fast fold-level model (closed-form recurrences).
//! - [`pe_array`]: the PE-level model, one clock at a time with real values.
//! - [`scalesim_mem`]: SCALE-Sim 3.0's memory system (SRAM prefetch, DRAM counts, stalls).

pub mod config;
pub mod pe_array;
pub mod scalesim_mem;
pub mod tile_ir;
pub mod timeline;
