//! `hlo-analysis`: what a module costs and holds, read from it without changing it (no
//! pass of the optimizer needs these; the TPU lowering and the `hloc` reports do).
//!
//! - [`cost`]: FLOP, transcendental and byte counts as XLA's cost analysis counts them.
//! - [`memory_usage`]: the peak bytes a step holds in device memory, on the order
//!   [`memory_scheduler`] (XLA's memory-minimizing schedulers, an analysis) gives each
//!   computation.
//! - [`while_loop_analysis`]: trip counts read from the program.

pub mod cost;
pub mod memory_scheduler;
pub mod memory_usage;
pub mod while_loop_analysis;
