//! HLO → CLIF. [`kernel::define_loop_kernel`] turns one instruction (or a fused
//! computation's root) into a loop nest over its output whose body the
//! [`elemental::Emitter`] fills.

pub mod elemental;
pub mod host;
pub mod kernel;
pub mod math;
pub mod scalar_ops;
pub mod scatter;
pub mod sort;
pub mod ty;
pub mod vector;

/// A code generation failure; `unsupported` marks an opcode or type the JIT does not
/// compile (never silently run another way).
#[derive(Debug, Clone)]
pub struct CgError {
    pub message: String,
    pub unsupported: bool,
}

impl CgError {
    pub fn new(message: String) -> CgError {
        CgError { message, unsupported: false }
    }
    pub fn unsupported(message: String) -> CgError {
        CgError { message, unsupported: true }
    }
}

impl std::fmt::Display for CgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<crate::jit::JitError> for CgError {
    fn from(e: crate::jit::JitError) -> CgError {
        CgError::new(e.0)
    }
}
