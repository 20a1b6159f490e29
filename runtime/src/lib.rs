//! Host runtime: optimized HLO modules compiled to native code with Cranelift and run.
pub mod jit;
