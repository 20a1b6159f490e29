//! The embedding API: [`Runtime`] compiles modules into [`Program`]s; a program runs on
//! host tensors.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hlo_check::Checked;
use hlo_ir::{Module, Tensor};

use crate::cache::{Fingerprint, module_fingerprint};
use crate::checkpoint::CheckpointError;
use crate::codegen::CgError;
use crate::exec::{ExecError, Executable, Stats};

/// Errors of compiling or running a program.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The module failed the checks or a compile phase: every diagnostic, located in the
    /// module's text where known (render them with [`hlo_ir::Diagnostics::render`]).
    #[error("compile error: {}", messages(.0))]
    Compile(hlo_ir::Diagnostics),
    /// An instruction the JIT does not compile (no silent fallback).
    #[error("not supported by the JIT: {0}")]
    Unsupported(String),
    /// Bad arguments or a failure while running.
    #[error("{0}")]
    Run(String),
    /// A checkpoint could not be written, read, or restored into this step.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// One of the above, about the instruction written at this span of the module's
    /// source (for a `file:line:col` diagnostic; see [`RuntimeError::span`]).
    #[error("{1}")]
    At(hlo_ir::Span, Box<RuntimeError>),
}

/// The error messages of `d`, joined (the `Display` of [`RuntimeError::Compile`]).
fn messages(d: &hlo_ir::Diagnostics) -> String {
    let msgs: Vec<&str> = d.iter().filter(|d| d.is_error()).map(|d| d.message.as_str()).collect();
    msgs.join("; ")
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

    /// The diagnostics of a compile error, when it is one.
    pub fn diagnostics(&self) -> Option<&hlo_ir::Diagnostics> {
        match self.kind() {
            RuntimeError::Compile(d) => Some(d),
            _ => None,
        }
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

    /// A compile error, located at its first error (errors of the checks and phases point
    /// at the instruction concerned).
    pub(crate) fn compile(d: hlo_ir::Diagnostics) -> RuntimeError {
        let span = d.iter().find(|d| d.is_error()).and_then(|d| d.span);
        RuntimeError::at(span, RuntimeError::Compile(d))
    }
}

impl From<CgError> for RuntimeError {
    fn from(e: CgError) -> RuntimeError {
        let kind = if e.unsupported {
            RuntimeError::Unsupported(e.message)
        } else {
            RuntimeError::Compile(hlo_ir::Diagnostic::error(e.span, e.message).into())
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
#[non_exhaustive]
pub struct CompileOptions {
    /// Run the default optimization pipeline (fusion included) before code generation.
    pub optimize: bool,
    /// On N devices: sum the partial sums of a contraction split over devices in f32 until
    /// summed (the one-device module's values), instead of in the dot's own type as XLA's
    /// partitioner sums them (the default).
    pub exact_partial_sums: bool,
}

impl Default for CompileOptions {
    fn default() -> CompileOptions {
        CompileOptions { optimize: true, exact_partial_sums: false }
    }
}

impl CompileOptions {
    /// Options with the optimization pipeline on or off.
    pub fn optimized(optimize: bool) -> CompileOptions {
        CompileOptions { optimize, ..CompileOptions::default() }
    }

    /// Options that sum the partial sums of split contractions exactly (`true`) or as XLA
    /// does (`false`, the default); see [`CompileOptions::exact_partial_sums`].
    pub fn with_exact_partial_sums(mut self, exact: bool) -> CompileOptions {
        self.exact_partial_sums = exact;
        self
    }

    /// The compile driver's options for these.
    pub(crate) fn driver(&self) -> hlo_driver::Options {
        let optimizer =
            if self.optimize { hlo_driver::Optimizer::Default } else { hlo_driver::Optimizer::Off };
        let sums = if self.exact_partial_sums {
            hlo_spmd::PartialSums::Exact
        } else {
            hlo_spmd::PartialSums::AsXla
        };
        hlo_driver::Options::default().with_optimizer(optimizer).with_partial_sums(sums)
    }
}

/// A compiled program; cheap to clone, `Send + Sync`: concurrent runs use separate arenas.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let src = "HloModule m\nENTRY e {\n  a = f32[2,2] parameter(0)\n  ROOT d = f32[2,2] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
/// let module = hlo_driver::parse(src)?; // one parse, one check
/// let program = hlo_runtime::Program::compile_checked(&module, &Default::default())?;
/// let a = hlo_ir::Tensor::from_f32(&[2, 2], &[1.0, 2.0, 3.0, 4.0])?;
/// assert_eq!(program.run(&[a])?[0].to_f64_vec()?, vec![7.0, 10.0, 15.0, 22.0]);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Program {
    exe: Arc<Executable>,
    pub(crate) fingerprint: Fingerprint,
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
        let checked = hlo_driver::check(m.clone(), None).map_err(RuntimeError::compile)?;
        let (mut p, opt) = Program::compile_checked_keeping(&checked, opts)?;
        p.compile_time = t.elapsed();
        Ok((p, opt))
    }

    /// Optimizes and compiles a module that passed the checks (no check runs again).
    pub fn compile_checked(
        m: &Checked<Module>,
        opts: &CompileOptions,
    ) -> Result<Program, RuntimeError> {
        Program::compile_checked_keeping(m, opts).map(|(p, _)| p)
    }

    /// [`Program::compile_checked`], also returning the optimized module.
    pub fn compile_checked_keeping(
        m: &Checked<Module>,
        opts: &CompileOptions,
    ) -> Result<(Program, Module), RuntimeError> {
        let t = Instant::now();
        let compiled = hlo_driver::compile(m, &hlo_driver::Host, &opts.driver())
            .map_err(RuntimeError::compile)?;
        let exe = Executable::compile(&compiled.program)?;
        let fingerprint = module_fingerprint(m);
        Ok((
            Program { exe: Arc::new(exe), fingerprint, compile_time: t.elapsed() },
            compiled.program,
        ))
    }

    /// Why the JIT may refuse `m` (the first complex value or `fft`: it has no complex
    /// kernels), as a located diagnostic with a hint, for a check before compiling; `None`
    /// when `m` has neither. (Code generation refuses what it cannot compile in any case;
    /// complex constants the optimizer folds into outputs compile.)
    pub fn refusal(m: &Module) -> Option<hlo_ir::Diagnostic> {
        crate::complex_refusal::refuse_complex(m, "the JIT")
    }

    /// Generates code for a module the compile driver produced (spans kept).
    pub(crate) fn from_module(
        m: &Module,
        fingerprint: Fingerprint,
    ) -> Result<Program, RuntimeError> {
        let t = Instant::now();
        let exe = Executable::compile(m)?;
        Ok(Program { exe: Arc::new(exe), fingerprint, compile_time: t.elapsed() })
    }

    /// Generates code for an already optimized module (a persistent cache entry).
    pub fn from_optimized(m: &Module) -> Result<Program, RuntimeError> {
        let t = Instant::now();
        // Its spans point into the cache entry's text, not the user's source.
        let exe = Executable::compile(m).map_err(|e| RuntimeError::from(e).unlocated())?;
        let fingerprint = module_fingerprint(m);
        Ok(Program { exe: Arc::new(exe), fingerprint, compile_time: t.elapsed() })
    }

    /// Compiles `m` for arguments of shapes `args`: a shape-polymorphic module (entry
    /// parameters with `?` dims) is specialized to them first
    /// ([`hlo_driver::specialize`]); a static module must match them.
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
        if hlo_driver::is_polymorphic(m) {
            let t = Instant::now();
            let s = hlo_driver::specialize(m, args).map_err(RuntimeError::compile)?;
            let (mut p, opt) = Program::compile_checked_keeping(&s, opts)?;
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
    pub(crate) fn run_device(
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

    /// Runs with the arguments in two parts (`first` then `rest`: resident state and a
    /// batch, without concatenating them), writing the outputs into `outs`: tensors kept
    /// from an earlier run are reused, so a loop allocates nothing after its first run.
    pub fn run_into(
        &self,
        first: &[Tensor],
        rest: &[Tensor],
        outs: &mut Vec<Tensor>,
    ) -> Result<(), RuntimeError> {
        Ok(self.exe.run_into(first, rest, outs, None)?)
    }

    /// [`Program::run_into`], adding per-kernel times to `stats`.
    pub fn run_into_with_stats(
        &self,
        first: &[Tensor],
        rest: &[Tensor],
        outs: &mut Vec<Tensor>,
        stats: &mut Stats,
    ) -> Result<(), RuntimeError> {
        Ok(self.exe.run_into(first, rest, outs, Some(stats))?)
    }

    /// The fingerprint of the module it was compiled from (for [`Program::from_optimized`],
    /// of the optimized module; from a [`Runtime`](crate::Runtime), of the module given to
    /// it): what a checkpoint of its state records.
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    /// The entry parameters' shapes, in order.
    pub fn param_shapes(&self) -> &[hlo_ir::Shape] {
        self.exe.param_shapes()
    }

    /// The outputs' shapes (the root tuple's leaves), in order.
    pub fn output_shapes(&self) -> &[hlo_ir::Shape] {
        self.exe.output_shapes()
    }

    /// How many kernels code generation produced.
    pub fn kernel_count(&self) -> usize {
        self.exe.kernel_count
    }

    /// Bytes of generated machine code.
    pub fn code_bytes(&self) -> usize {
        self.exe.code_bytes()
    }

    /// Bytes of the arena every run allocates for intermediate values.
    pub fn arena_bytes(&self) -> usize {
        self.exe.arena_bytes()
    }
}
