//! The embedding API: [`Runtime`] compiles modules into [`Program`]s; a program runs on
//! host tensors.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hlo_check::Checked;
use hlo_ir::{Module, Tensor};

use crate::cache::{Fingerprint, module_fingerprint};
use crate::error::RuntimeError;
use crate::exec::{Executable, Stats};

/// Compile options (the cache key of a [`Runtime`](crate::Runtime) includes `optimize`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct CompileOptions {
    /// Run the default optimization pipeline (fusion included) before code generation.
    pub optimize: bool,
    /// On N devices: sum the partial sums of a contraction split over devices in f32 until
    /// summed (the one-device module's values), instead of in the dot's own type as XLA's
    /// partitioner sums them (the default).
    pub exact_partial_sums: bool,
    /// Keep the optimized module code was generated for, for [`Program::optimized`] (off by
    /// default: it is a copy of the module).
    pub keep_optimized: bool,
    /// Threads of the runtime pool the program's parallel work runs on (`None`, the
    /// default: the default pool, sized by `HLOC_THREADS`, else `RAYON_NUM_THREADS`, else
    /// the available parallelism; see [`crate::default_threads`]). Not part of a cache key:
    /// the generated code is the same, and results are bit-identical on any number of
    /// threads.
    pub threads: Option<usize>,
}

impl Default for CompileOptions {
    fn default() -> CompileOptions {
        CompileOptions {
            optimize: true,
            exact_partial_sums: false,
            keep_optimized: false,
            threads: None,
        }
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

    /// Options that keep the optimized module (`true`) or not (`false`, the default); see
    /// [`CompileOptions::keep_optimized`].
    pub fn with_keep_optimized(mut self, keep: bool) -> CompileOptions {
        self.keep_optimized = keep;
        self
    }

    /// Options whose programs run their parallel work on a pool of `threads` threads (0 is
    /// taken as 1); see [`CompileOptions::threads`].
    pub fn with_threads(mut self, threads: usize) -> CompileOptions {
        self.threads = Some(threads.max(1));
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

/// How [`Program::run_with`] takes its arguments and what it records, beyond the plain
/// [`Program::run`]. Build it from `RunOptions::default()` with the `with_*` methods.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct RunOptions<'a> {
    /// Arguments that follow the ones given to [`Program::run_with`] (a batch after the
    /// resident state of a training step), so that the two need not be concatenated.
    pub rest: &'a [Tensor],
    /// Where per-kernel times are added, when given.
    pub stats: Option<&'a mut Stats>,
}

impl<'a> RunOptions<'a> {
    /// These options with `rest` following the arguments; see [`RunOptions::rest`].
    pub fn with_rest(mut self, rest: &'a [Tensor]) -> RunOptions<'a> {
        self.rest = rest;
        self
    }

    /// These options adding per-kernel times to `stats`.
    pub fn with_stats(mut self, stats: &'a mut Stats) -> RunOptions<'a> {
        self.stats = Some(stats);
        self
    }
}

/// A compiled program; cheap to clone, `Send + Sync`: concurrent runs use separate arenas.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let src = "HloModule m\nENTRY e {\n  a = f32[2,2] parameter(0)\n  ROOT d = f32[2,2] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
/// let module = hlo_driver::parse(src)?; // one parse, one check
/// let program = hlo_runtime::Program::compile(&module, &Default::default())?;
/// let a = hlo_ir::Tensor::from_f32(&[2, 2], &[1.0, 2.0, 3.0, 4.0])?;
/// assert_eq!(program.run(&[a])?[0].to_f64_vec()?, vec![7.0, 10.0, 15.0, 22.0]);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Program {
    exe: Arc<Executable>,
    /// The optimized module, when [`CompileOptions::keep_optimized`] asked for it.
    optimized: Option<Arc<Module>>,
    pub(crate) fingerprint: Fingerprint,
    /// Threads of the runtime pool it runs on (`None`: the default pool).
    threads: Option<usize>,
    /// Time spent optimizing and generating code.
    pub compile_time: Duration,
}

impl Program {
    /// Optimizes (unless `opts` turns the optimizer off) and compiles a module that passed
    /// the checks: from `hlo_driver::parse` or `hlo_driver::check`, or, for a
    /// shape-polymorphic module, `hlo_driver::specialize` to the argument shapes (a
    /// [`Runtime`](crate::Runtime) does that per shape). Nothing is checked again.
    pub fn compile(m: &Checked<Module>, opts: &CompileOptions) -> Result<Program, RuntimeError> {
        let t = Instant::now();
        let compiled = hlo_driver::compile(m, &hlo_driver::Host, &opts.driver())
            .map_err(RuntimeError::compile)?;
        let exe = Executable::compile(&compiled.program)?;
        let optimized = opts.keep_optimized.then(|| Arc::new(compiled.program));
        let fingerprint = module_fingerprint(m);
        Ok(Program {
            exe: Arc::new(exe),
            optimized,
            fingerprint,
            threads: opts.threads,
            compile_time: t.elapsed(),
        })
    }

    /// Generates code for a module the compile driver already optimized (a
    /// `hlo_driver::Compiled`'s module, or the text a persistent cache stored): no check and
    /// no pass runs. Errors carry no location (such a module's spans point into other
    /// text).
    pub fn from_optimized(m: &Module) -> Result<Program, RuntimeError> {
        Program::generate(m, module_fingerprint(m)).map_err(RuntimeError::unlocated)
    }

    /// Generates code for a module the compile driver produced, errors located in the
    /// source its spans point into.
    pub(crate) fn generate(m: &Module, fingerprint: Fingerprint) -> Result<Program, RuntimeError> {
        let t = Instant::now();
        let exe = Executable::compile(m)?;
        Ok(Program {
            exe: Arc::new(exe),
            optimized: None,
            fingerprint,
            threads: None,
            compile_time: t.elapsed(),
        })
    }

    /// This program running its parallel work on a pool of `threads` threads (0 is taken as
    /// 1; `None`: the default pool); see [`CompileOptions::threads`]. Clones share the code.
    pub fn with_threads(mut self, threads: Option<usize>) -> Program {
        self.threads = threads.map(|t| t.max(1));
        self
    }

    /// Threads of the pool its parallel work runs on.
    pub fn threads(&self) -> usize {
        self.threads.unwrap_or_else(crate::default_threads)
    }

    /// The optimized module code was generated for, when [`CompileOptions::keep_optimized`]
    /// asked for it.
    pub fn optimized(&self) -> Option<&Module> {
        self.optimized.as_deref()
    }

    /// Forgets the optimized module (a [`Runtime`](crate::Runtime) keeps it only as long as
    /// its disk cache needs it, unless its options ask for it).
    pub(crate) fn forget_optimized(&mut self) {
        self.optimized = None;
    }

    /// Why the JIT may refuse `m` (the first complex value or `fft`: it has no complex
    /// kernels), as a located diagnostic with a hint, for a check before compiling; `None`
    /// when `m` has neither. (Code generation refuses what it cannot compile in any case;
    /// complex constants the optimizer folds into outputs compile.)
    pub fn refusal(m: &Module) -> Option<hlo_ir::Diagnostic> {
        crate::complex_refusal::refuse_complex(m, "the JIT")
    }

    /// Runs the program; arguments are checked against the entry parameters first.
    pub fn run(&self, args: &[Tensor]) -> Result<Vec<Tensor>, RuntimeError> {
        let mut outs = Vec::new();
        self.exe.run_on(None, args, &[], &mut outs, None, self.threads)?;
        Ok(outs)
    }

    /// Runs the program on `args` followed by `opts.rest`, writing the outputs into `outs`:
    /// tensors kept from an earlier run are reused, so a loop allocates nothing after its
    /// first run. Per-kernel times go to `opts.stats` when given.
    pub fn run_with(
        &self,
        args: &[Tensor],
        outs: &mut Vec<Tensor>,
        opts: RunOptions<'_>,
    ) -> Result<(), RuntimeError> {
        Ok(self.exe.run_on(None, args, opts.rest, outs, opts.stats, self.threads)?)
    }

    /// Runs as device `device` of an SPMD run (collectives meet the other devices on its
    /// fabric; `partition-id` is its index).
    pub(crate) fn run_device(
        &self,
        device: crate::exec::Device<'_>,
        args: &[Tensor],
    ) -> Result<Vec<Tensor>, RuntimeError> {
        let mut outs = Vec::new();
        self.exe.run_on(Some(device), args, &[], &mut outs, None, self.threads)?;
        Ok(outs)
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
