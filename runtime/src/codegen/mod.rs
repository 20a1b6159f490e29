//! HLO → CLIF. [`kernel::define_loop_kernel`] turns one instruction (or a fused
//! computation's root) into a loop nest over its output whose body the
//! [`elemental::Emitter`] fills.

pub mod elemental;
pub mod kernel;
pub mod math;
pub mod row_reduction;
pub mod rows;
pub mod scalar_ops;
pub mod scatter;
pub mod sort;
pub mod staged;
pub mod ty;
pub mod vector;

/// A code generation failure; `unsupported` marks an opcode or type the JIT does not
/// compile (never silently run another way).
#[derive(Debug, Clone)]
pub struct CgError {
    pub message: String,
    pub unsupported: bool,
    /// Where the instruction at fault was written, when known.
    pub span: Option<hlo_ir::Span>,
}

impl CgError {
    pub fn new(message: String) -> CgError {
        CgError { message, unsupported: false, span: None }
    }
    pub fn unsupported(message: String) -> CgError {
        CgError { message, unsupported: true, span: None }
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

/// Defines a kernel whose body can fail with a [`CgError`] (kept whole: an unsupported
/// opcode stays marked unsupported). Returns the kernel's index in `jit`.
pub fn define_kernel(
    jit: &mut crate::jit::JitModule,
    name: &str,
    build: impl FnOnce(
        &mut cranelift_frontend::FunctionBuilder,
        &mut cranelift_jit::JITModule,
        cranelift_codegen::ir::Value,
        [cranelift_codegen::ir::Value; 2],
    ) -> Result<(), CgError>,
) -> Result<usize, CgError> {
    let mut failure = None;
    let r = jit.define(name, |b, jm, args, range| {
        build(b, jm, args, range).map_err(|e| {
            let msg = crate::jit::JitError(e.message.clone());
            failure = Some(e);
            msg
        })
    });
    match (r, failure) {
        (Ok(i), _) => Ok(i),
        (Err(_), Some(f)) => Err(f),
        (Err(e), None) => Err(e.into()),
    }
}

/// Loads kernel argument `i` (a buffer pointer) from the `args` array.
pub fn arg_ptr(
    b: &mut cranelift_frontend::FunctionBuilder,
    args: cranelift_codegen::ir::Value,
    i: usize,
) -> cranelift_codegen::ir::Value {
    use cranelift_codegen::ir::InstBuilder;
    b.ins().load(cranelift_codegen::ir::types::I64, ty::flags(), args, (i * 8) as i32)
}
