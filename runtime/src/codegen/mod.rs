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

use crate::error::{RuntimeError, named};

/// A code generation failure: an internal error, or an operation or type the JIT does not
/// compile (never silently run another way). One pointer wide: code generation recurses
/// through expressions with `Result<_, CgError>` in every frame.
#[derive(Debug, Clone)]
pub struct CgError(Box<CgFailure>);

/// What a [`CgError`] holds.
#[derive(Debug, Clone)]
pub struct CgFailure {
    pub kind: CgErrorKind,
    /// The instruction at fault, when known (the innermost the planner names).
    pub instruction: Option<String>,
    /// Where the instruction at fault was written, when known.
    pub span: Option<hlo_ir::Span>,
}

impl std::ops::Deref for CgError {
    type Target = CgFailure;
    fn deref(&self) -> &CgFailure {
        &self.0
    }
}

impl std::ops::DerefMut for CgError {
    fn deref_mut(&mut self) -> &mut CgFailure {
        &mut self.0
    }
}

/// What a [`CgError`] is.
#[derive(Debug, Clone)]
pub enum CgErrorKind {
    /// Code generation failed (a module the checks should have refused, or a bug).
    Internal(String),
    /// The JIT does not compile this.
    Unsupported(crate::Unsupported),
}

impl CgError {
    pub fn new(message: String) -> CgError {
        CgError::of(CgErrorKind::Internal(message))
    }
    pub fn unsupported(what: crate::Unsupported) -> CgError {
        CgError::of(CgErrorKind::Unsupported(what))
    }
    fn of(kind: CgErrorKind) -> CgError {
        CgError(Box::new(CgFailure { kind, instruction: None, span: None }))
    }
    /// This error, about instruction `name` unless it already names one.
    pub fn in_instruction(mut self, name: &str) -> CgError {
        if self.instruction.is_none() {
            self.instruction = Some(name.to_string());
        }
        self
    }
}

impl std::fmt::Display for CgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(i) = &self.instruction {
            write!(f, "`{i}`: ")?;
        }
        match &self.kind {
            CgErrorKind::Internal(m) => f.write_str(m),
            CgErrorKind::Unsupported(u) => write!(f, "{u}"),
        }
    }
}

impl From<CgError> for RuntimeError {
    /// An unsupported operation or type as [`RuntimeError::Unsupported`], anything else as
    /// a compile error; located at the instruction when known.
    fn from(e: CgError) -> RuntimeError {
        let CgFailure { kind, instruction, span } = *e.0;
        let kind = match kind {
            CgErrorKind::Unsupported(what) => RuntimeError::Unsupported { instruction, what },
            CgErrorKind::Internal(message) => {
                let message = format!("{}{message}", named(&instruction));
                RuntimeError::Compile(hlo_ir::Diagnostic::error(span, message).into())
            }
        };
        RuntimeError::at(span, kind)
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
            let msg = crate::jit::JitError(e.to_string());
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
