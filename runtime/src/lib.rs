//! Host runtime: optimized HLO modules compiled to native code with Cranelift and run.
pub mod cache;
pub mod codegen;
pub mod complex_refusal;
pub mod exec;
pub mod fpenv;
pub mod jit;
pub mod kernels;
pub mod library;
pub mod program;
pub mod runtime;
pub mod spmd;
pub mod train;

pub use exec::Stats;
pub use program::{CompileOptions, Program, RuntimeError};
pub use runtime::{Compiled, DiskEvent, Entry, Runtime};
pub use spmd::SpmdProgram;
pub use train::TrainStep;
