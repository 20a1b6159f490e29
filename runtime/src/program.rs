//! The embedding API: [`Runtime`] compiles modules into [`Program`]s; a program runs on
//! host tensors.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hlo_passes as passes;
use hlo_ir::{Module, Tensor};

use crate::codegen::CgError;
use crate::exec::{ExecError, Executable, Stats};

/// Errors of compiling or running a program.
#[derive(Debug)]
pub enum RuntimeError {
    /// The module failed the checks or an optimization pass.
    Compile(String),
    /// An instruction the JIT does not compile (no silent fallback).
    Unsupported(String),
    /// Bad arguments or a failure while running.
    Run(String),
    /// One of the above, about the instruction written at this span of the module's
    /// source (for a `file:line:col` diagnostic; see [`RuntimeError::span`]).
    At(hlo_ir::Span, Box<RuntimeError>),
}

impl RuntimeError {
    /// The error without its location.
    pub fn kind(&self) -> &RuntimeError {
        match self {
            RuntimeError::At(_, e) => e.kind(),
            e => e,
        }
    }

    /// Where in the module's source the error is, when known.
    pub fn span(&self) -> Option<hlo_ir::Span> {
        match self {
            RuntimeError::At(s, _) => Some(*s),
            _ => None,
        }
    }

    /// Whether the JIT refused an instruction or type it does not compile.
    pub fn is_unsupported(&self) -> bool {
        matches!(self.kind(), RuntimeError::Unsupported(_))
    }

    /// The error without its location (for modules whose spans point into other text).
    fn unlocated(self) -> RuntimeError {
        match self {
            RuntimeError::At(_, e) => e.unlocated(),
            e => e,
        }
    }

    fn at(span: Option<hlo_ir::Span>, e: RuntimeError) -> RuntimeError {
        match span {
            Some(s) => RuntimeError::At(s, Box::new(e)),
            None => e,
        }
    }
}

impl std::fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuntimeError::Compile(m) => write!(f, "compile error: {m}"),
            RuntimeError::Unsupported(m) => write!(f, "not supported by the JIT: {m}"),
            RuntimeError::Run(m) => write!(f, "{m}"),
            RuntimeError::At(_, e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RuntimeError {}

impl From<CgError> for RuntimeError {
    fn from(e: CgError) -> RuntimeError {
        let kind = if e.unsupported {
            RuntimeError::Unsupported(e.message)
        } else {
            RuntimeError::Compile(e.message)
        };
        RuntimeError::at(e.span, kind)
    }
}

impl From<ExecError> for RuntimeError {
    fn from(e: ExecError) -> RuntimeError {
        RuntimeError::Run(e.0)
    }
}

/// Compile options (part of the compilation cache key).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// Run the default optimization pipeline (fusion included) before code generation.
    pub optimize: bool,
}

impl Default for CompileOptions {
    fn default() -> CompileOptions {
        CompileOptions { optimize: true }
    }
}

/// A compiled program; cheap to clone, `Send + Sync`: concurrent runs use separate arenas.
#[derive(Clone)]
pub struct Program {
    exe: Arc<Executable>,
    /// Time spent optimizing and generating code.
    pub compile_time: Duration,
}

impl Program {
    /// Checks, optimizes and compiles `m`.
    pub fn compile(m: &Module, opts: &CompileOptions) -> Result<Program, RuntimeError> {
        Program::compile_keeping(m, opts).map(|(p, _)| p)
    }

    /// [`Program::compile`], also returning the optimized module it generated code for.
    pub fn compile_keeping(
        m: &Module,
        opts: &CompileOptions,
    ) -> Result<(Program, Module), RuntimeError> {
        let t = Instant::now();
        let checked = hlo_ir::check::diagnose(m, None);
        // Errors of the checks and passes point at the first one's instruction.
        let located = |d: &hlo_ir::Diagnostics| {
            let msgs: Vec<String> =
                d.iter().filter(|d| d.is_error()).map(|d| d.message.clone()).collect();
            RuntimeError::at(
                d.iter().find(|d| d.is_error()).and_then(|d| d.span),
                RuntimeError::Compile(msgs.join("; ")),
            )
        };
        if checked.has_errors() {
            return Err(located(&checked));
        }
        let mut opt = m.clone();
        if opts.optimize {
            let mut p = passes::default_pipeline();
            p.verify_each = false;
            p.run(&mut opt).map_err(|d| located(&d))?;
        }
        let exe = Executable::compile(&opt)?;
        Ok((Program { exe: Arc::new(exe), compile_time: t.elapsed() }, opt))
    }

    /// Generates code for an already optimized module (a persistent cache entry).
    pub fn from_optimized(m: &Module) -> Result<Program, RuntimeError> {
        let t = Instant::now();
        // Its spans point into the cache entry's text, not the user's source.
        let exe = Executable::compile(m).map_err(|e| RuntimeError::from(e).unlocated())?;
        Ok(Program { exe: Arc::new(exe), compile_time: t.elapsed() })
    }

    /// Compiles `m` for arguments of shapes `args`: a shape-polymorphic module (entry
    /// parameters with `?` dims) is specialized to them first
    /// ([`hlo_passes::specialize`]); a static module must match them.
    pub fn compile_for(
        m: &Module,
        args: &[hlo_ir::Shape],
        opts: &CompileOptions,
    ) -> Result<Program, RuntimeError> {
        Program::compile_for_keeping(m, args, opts).map(|(p, _)| p)
    }

    /// [`Program::compile_for`], also returning the optimized module.
    pub fn compile_for_keeping(
        m: &Module,
        args: &[hlo_ir::Shape],
        opts: &CompileOptions,
    ) -> Result<(Program, Module), RuntimeError> {
        if hlo_passes::specialize::is_polymorphic(m) {
            let t = Instant::now();
            let s = hlo_passes::specialize::specialize(m, args).map_err(RuntimeError::Compile)?;
            let (mut p, opt) = Program::compile_keeping(&s, opts)?;
            p.compile_time = t.elapsed();
            return Ok((p, opt));
        }
        Program::compile_keeping(m, opts)
    }

    /// Runs the program; arguments are checked against the entry parameters first.
    pub fn run(&self, args: &[Tensor]) -> Result<Vec<Tensor>, RuntimeError> {
        Ok(self.exe.run(args, None)?)
    }

    /// Runs as device `device` of an SPMD run (collectives meet the other devices on its
    /// fabric; `partition-id` is its index).
    pub fn run_device(
        &self,
        device: crate::exec::Device<'_>,
        args: &[Tensor],
    ) -> Result<Vec<Tensor>, RuntimeError> {
        let mut outs = Vec::new();
        self.exe.run_on(Some(device), args, &[], &mut outs, None)?;
        Ok(outs)
    }

    /// Runs and adds per-kernel times to `stats`.
    pub fn run_with_stats(
        &self,
        args: &[Tensor],
        stats: &mut Stats,
    ) -> Result<Vec<Tensor>, RuntimeError> {
        Ok(self.exe.run(args, Some(stats))?)
    }

    pub fn executable(&self) -> &Executable {
        &self.exe
    }
}
