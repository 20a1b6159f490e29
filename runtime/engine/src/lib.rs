//! `hlo-engine`: one interface over every engine, as PJRT's client and executable are over
//! every XLA backend.
//!
//! ```text
//!  Checked<Module> ──Engine::compile(devices, options)──▶ Box<dyn Executable> ──run(inputs)──▶ outputs
//!                     Interp  ─ hlo-driver (Interpreter) ─▶ hlo-interp / hlo-devices
//!                     Jit     ─ hlo-runtime (the driver's Host target, Cranelift)
//!                     Tpu     ─ hlo-driver (Tpu) ─▶ hlo-tpu's engine on the chip model
//! ```
//!
//! - An [`Engine`] compiles a checked module for one device or for N (`devices: Some(n)`:
//!   the driver propagates the module's shardings and partitions it) into an
//!   [`Executable`]; the executable runs the *global* program: it takes the global inputs,
//!   shards them over its devices and assembles the global outputs.
//! - What a compile made is typed per engine (the driver's `Compiled<TpuProgram>` carries
//!   the chip configuration it was lowered for); through the trait a caller sees what
//!   every engine has: its name, its devices, the compile's phases and notes, the
//!   partition, and per run the outputs, the execution time and the engine's own detail
//!   ([`Detail`]: the TPU model's timed runs).
//! - Callers (`hloc run`, the fuzz harness, the Python package, the tests) pick engines by
//!   name ([`by_name`]) or list them ([`ENGINES`]) and loop; nothing matches on an engine.
//!
//! ```
//! let src = "HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(p)\n}\n";
//! let m = hlo_driver::parse(src).expect("a valid module");
//! let x = hlo_ir::Tensor::from_f32(&[4], &[1.0, -2.0, 3.0, 0.5]).expect("4 values");
//! for name in hlo_engine::ENGINES {
//!     let engine = hlo_engine::by_name(name).expect("a known engine");
//!     let exe = engine.compile(&m, None, &hlo_engine::Options::default()).expect("compiles");
//!     let out = exe.run(std::slice::from_ref(&x)).expect("runs");
//!     assert_eq!(out[0].to_f64_vec().expect("floats"), [-1.0, 2.0, -3.0, -0.5], "{name}");
//! }
//! ```

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hlo_check::Checked;
use hlo_driver::{Compiled, Partitioned, TpuProgram};
use hlo_ir::{Diagnostic, Diagnostics, Module, Tensor};
use hlo_spmd::devices::Plan;

pub use hlo_driver::{Optimizer, Tpu};
pub use hlo_spmd::PartialSums;

/// The engines by name, in the order the CLI lists them.
pub const ENGINES: [&str; 3] = ["jit", "interp", "tpu"];

/// How an engine compiles: the driver's options, and for the TPU model its chip and
/// precision.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Options {
    /// The compile driver's options (optimizer, passes skipped, partial sums, ...).
    pub driver: hlo_driver::Options,
}

impl Options {
    /// Options whose optimize phase runs `optimizer`.
    pub fn with_optimizer(mut self, optimizer: Optimizer) -> Options {
        self.driver = self.driver.with_optimizer(optimizer);
        self
    }

    /// Options whose partitioner sums split contractions as `sums` says (exact sums check
    /// N devices against one).
    pub fn with_partial_sums(mut self, sums: PartialSums) -> Options {
        self.driver = self.driver.with_partial_sums(sums);
        self
    }
}

/// Why an engine could not compile or run a program.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// A compile phase failed: every diagnostic, located where known.
    #[error("{}", first(.0))]
    Compile(Diagnostics),
    /// The engine does not run this program (an instruction it has no kernel for); the
    /// diagnostic is located at it where known.
    #[error("{}", .0.message)]
    Unsupported(Diagnostic),
    /// Running failed (bad inputs, an instruction's runtime error, a device's failure),
    /// located at the instruction where known.
    #[error("{}", .0.message)]
    Run(Diagnostic),
}

fn first(d: &Diagnostics) -> String {
    d.iter().find(|x| x.is_error()).map(|x| x.message.clone()).unwrap_or_else(|| "error".into())
}

impl EngineError {
    /// The error as diagnostics, to render against the module's text.
    pub fn diagnostics(&self) -> Diagnostics {
        match self {
            EngineError::Compile(d) => d.clone(),
            EngineError::Unsupported(d) | EngineError::Run(d) => Diagnostics::from(d.clone()),
        }
    }

    /// Whether the engine refused the program (rather than failed on it).
    pub fn is_unsupported(&self) -> bool {
        matches!(self, EngineError::Unsupported(_))
    }

    fn jit(e: hlo_runtime::RuntimeError) -> EngineError {
        if let Some(d) = e.diagnostics() {
            return EngineError::Compile(d.clone());
        }
        let d = Diagnostic::error(e.span(), e.kind().to_string());
        if e.is_unsupported() { EngineError::Unsupported(d) } else { EngineError::Run(d) }
    }
}

/// A compiler and runtime for one kind of device.
pub trait Engine: Send + Sync {
    /// The engine's name (`jit`, `interp`, `tpu`).
    fn name(&self) -> &'static str;

    /// Compiles `m` to run on one device (`devices: None`) or on `n` (shardings
    /// propagated, the module partitioned; a module without shardings runs whole on each).
    fn compile(
        &self,
        m: &Checked<Module>,
        devices: Option<usize>,
        opts: &Options,
    ) -> Result<Box<dyn Executable>, EngineError>;
}

/// What a compile reported, whatever the engine.
#[derive(Debug)]
#[non_exhaustive]
pub struct Compilation {
    /// The engine that compiled (`jit`, `interp`, `tpu`).
    pub engine: &'static str,
    /// How long compiling took (phases and code generation).
    pub time: Duration,
    /// The phases' notes and warnings.
    pub warnings: Diagnostics,
    /// The `--time-passes` table of the driver's phases (empty where the engine's compile
    /// ran elsewhere).
    pub time_table: String,
    /// The engine's own account of the compile, one line each, worded for the user (a
    /// cache miss's explanation, a program read from the cache directory).
    pub notes: Vec<String>,
}

impl Compilation {
    /// A JIT compile's account: the JIT's own phases ran inside its compile (no table).
    fn jit() -> Compilation {
        Compilation {
            engine: "jit",
            time: Duration::ZERO,
            warnings: Diagnostics::new(),
            time_table: String::new(),
            notes: Vec::new(),
        }
    }
}

/// An engine's own detail about a run.
#[non_exhaustive]
pub enum Detail {
    /// Nothing beyond the outputs.
    None,
    /// The TPU model's timed runs, one per chip.
    Tpu(Vec<hlo_tpu::engine::Run>),
}

/// One run's outputs and what it took.
#[non_exhaustive]
pub struct Execution {
    /// The global outputs.
    pub outputs: Vec<Tensor>,
    /// The execution's wall time (the run itself, without checking or assembling inputs
    /// where the engine can tell them apart).
    pub time: Duration,
    /// The engine's detail.
    pub detail: Detail,
}

/// A program compiled by an [`Engine`], ready to run on the global inputs.
pub trait Executable: Send {
    /// What the compile reported (the engine's name among it).
    fn compilation(&self) -> &Compilation;
    /// The engine that compiled it.
    fn engine(&self) -> &'static str {
        self.compilation().engine
    }
    /// On N devices: the partition (the global inputs' and outputs' shardings, the
    /// collectives).
    fn plan(&self) -> Option<&Plan> {
        None
    }
    /// How many devices run it.
    fn devices(&self) -> usize {
        self.plan().map_or(1, |p| p.devices)
    }
    /// Runs on the global inputs.
    fn execute(&self, inputs: &[Tensor]) -> Result<Execution, EngineError>;
    /// Runs on the global inputs: the outputs.
    fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, EngineError> {
        self.execute(inputs).map(|e| e.outputs)
    }
    /// Runs into `outputs` (an engine may reuse the previous run's tensors): the
    /// execution's wall time and the engine's detail.
    fn execute_into(
        &self,
        inputs: &[Tensor],
        outputs: &mut Vec<Tensor>,
    ) -> Result<(Duration, Detail), EngineError> {
        let e = self.execute(inputs)?;
        *outputs = e.outputs;
        Ok((e.time, e.detail))
    }
    /// The module each device runs, where the engine keeps it (the interpreter's and the
    /// TPU model's; the JIT keeps native code).
    fn program(&self) -> Option<&Module> {
        None
    }
    /// The engine's account of the runs so far, one line each (the JIT's cache and, when
    /// asked, its kernels' time).
    fn report(&self) -> Vec<String> {
        Vec::new()
    }
    /// The program cache's hits and misses, for an engine that has one.
    fn cache_counts(&self) -> Option<(u64, u64)> {
        None
    }
}

/// The engine called `name` (one of [`ENGINES`]) with its default settings.
pub fn by_name(name: &str) -> Option<Box<dyn Engine>> {
    match name {
        "jit" => Some(Box::new(Jit::default())),
        "interp" => Some(Box::new(Interp::default())),
        "tpu" => Some(Box::new(TpuModel::default())),
        _ => None,
    }
}

fn compilation<P>(engine: &'static str, c: &Compiled<P>, time: Duration) -> Compilation {
    Compilation {
        engine,
        time,
        warnings: c.warnings.clone(),
        time_table: c.time_table(),
        notes: Vec::new(),
    }
}

fn run_error(d: Diagnostic) -> EngineError {
    EngineError::Run(d)
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed())
}

// ---- the interpreter ----

/// The reference interpreter: the module as written (unless the options name an
/// optimizer), on one device or on N threads joined by the collective fabric.
#[derive(Clone, Copy, Debug, Default)]
pub struct Interp {
    /// Run the module the host target runs (optimized by the default pipeline) instead of
    /// the module as written: the optimizer checked against the reference.
    pub optimized: bool,
}

impl Interp {
    /// The interpreter on the optimized module (what the host JIT compiles).
    pub fn optimized() -> Interp {
        Interp { optimized: true }
    }

    fn compile_for<T: hlo_driver::Target<Program = Module>>(
        target: &T,
        m: &Checked<Module>,
        devices: Option<usize>,
        opts: &Options,
    ) -> Result<Box<dyn Executable>, EngineError> {
        let t = Instant::now();
        Ok(match devices {
            None => {
                let c =
                    hlo_driver::compile(m, target, &opts.driver).map_err(EngineError::Compile)?;
                let compilation = compilation("interp", &c, t.elapsed());
                Box::new(InterpOne { module: c.program, compilation })
            }
            Some(n) => {
                let c = hlo_driver::compile_spmd(m, target, n, &opts.driver)
                    .map_err(EngineError::Compile)?;
                let compilation = compilation("interp", &c, t.elapsed());
                // The devices run the partitioned module (optimized when asked).
                let mut plan = c.program.plan;
                plan.module = c.program.program;
                Box::new(InterpSpmd { plan, compilation })
            }
        })
    }
}

struct InterpOne {
    module: Module,
    compilation: Compilation,
}

struct InterpSpmd {
    plan: Plan,
    compilation: Compilation,
}

impl Engine for Interp {
    fn name(&self) -> &'static str {
        "interp"
    }

    fn compile(
        &self,
        m: &Checked<Module>,
        devices: Option<usize>,
        opts: &Options,
    ) -> Result<Box<dyn Executable>, EngineError> {
        if self.optimized {
            Interp::compile_for(&hlo_driver::Host, m, devices, opts)
        } else {
            Interp::compile_for(&hlo_driver::Interpreter, m, devices, opts)
        }
    }
}

impl Executable for InterpOne {
    fn program(&self) -> Option<&Module> {
        Some(&self.module)
    }
    fn compilation(&self) -> &Compilation {
        &self.compilation
    }
    fn execute(&self, inputs: &[Tensor]) -> Result<Execution, EngineError> {
        // The interpreter's arrays are copies: the caller's inputs come out of its budget.
        let held = inputs.iter().fold(0u64, |a, t| a.saturating_add(t.bytes().len() as u64));
        let budget = hlo_interp::default_memory_budget().saturating_sub(held);
        let (outputs, time) = timed(|| {
            hlo_interp::Interpreter::new(&self.module).with_memory_budget(budget).run(inputs)
        });
        Ok(Execution { outputs: outputs.map_err(run_error)?, time, detail: Detail::None })
    }
}

impl Executable for InterpSpmd {
    fn program(&self) -> Option<&Module> {
        Some(&self.plan.module)
    }
    fn compilation(&self) -> &Compilation {
        &self.compilation
    }
    fn plan(&self) -> Option<&Plan> {
        Some(&self.plan)
    }
    fn execute(&self, inputs: &[Tensor]) -> Result<Execution, EngineError> {
        let (outputs, time) = timed(|| hlo_devices::run_interp(&self.plan, inputs));
        Ok(Execution { outputs: outputs.map_err(run_error)?, time, detail: Detail::None })
    }
}

// ---- the host JIT ----

/// The host JIT (Cranelift): the optimized module compiled to native kernels, on one
/// device or on N threads. With [`Jit::cached`], one-device programs come from a
/// shape-keyed cache ([`hlo_runtime::Runtime`], with a directory when it has one), looked up
/// again on every run as a training loop does.
#[derive(Default)]
pub struct Jit {
    cache: Option<(Arc<hlo_runtime::Runtime>, String)>,
    stats: bool,
}

impl Jit {
    /// A JIT whose one-device programs are looked up in `runtime`'s cache under `name`.
    pub fn cached(runtime: Arc<hlo_runtime::Runtime>, name: &str) -> Jit {
        Jit { cache: Some((runtime, name.to_string())), stats: false }
    }

    /// A JIT whose cached executables count every kernel's calls and time (their
    /// [`Executable::report`] lists them).
    pub fn with_stats(mut self, on: bool) -> Jit {
        self.stats = on;
        self
    }
}

/// A one-device JIT program behind a cache: each run looks it up again (a hit), as every
/// step of a training loop does.
struct JitCached {
    runtime: Arc<hlo_runtime::Runtime>,
    name: String,
    module: Checked<Module>,
    shapes: Vec<hlo_ir::Shape>,
    stats: Option<Mutex<hlo_runtime::Stats>>,
    /// The compile's lookup, for the first run.
    first: Mutex<Option<hlo_runtime::Program>>,
    /// The last program looked up (for the report's kernel counts).
    last: Mutex<Option<hlo_runtime::Program>>,
    compilation: Compilation,
}

impl Executable for JitCached {
    fn compilation(&self) -> &Compilation {
        &self.compilation
    }
    fn execute(&self, inputs: &[Tensor]) -> Result<Execution, EngineError> {
        let mut outputs = Vec::new();
        let (time, detail) = self.execute_into(inputs, &mut outputs)?;
        Ok(Execution { outputs, time, detail })
    }
    fn execute_into(
        &self,
        inputs: &[Tensor],
        outputs: &mut Vec<Tensor>,
    ) -> Result<(Duration, Detail), EngineError> {
        // The first run takes the compile's own lookup; every later one looks up again.
        let program = match self.first.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(program) => program,
            None => {
                self.runtime
                    .compile_checked(&self.name, &self.module, &self.shapes)
                    .map_err(EngineError::jit)?
                    .program
            }
        };
        let t = Instant::now();
        match &self.stats {
            Some(stats) => {
                let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
                let opts = hlo_runtime::RunOptions::default().with_stats(&mut s);
                program.run_with(inputs, outputs, opts)
            }
            None => program.run_with(inputs, outputs, hlo_runtime::RunOptions::default()),
        }
        .map_err(EngineError::jit)?;
        let time = t.elapsed();
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(program);
        Ok((time, Detail::None))
    }
    fn report(&self) -> Vec<String> {
        let mut out = Vec::new();
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if let (Some(stats), Some(p)) = (&self.stats, last.as_ref()) {
            let stats = stats.lock().unwrap_or_else(|p| p.into_inner());
            out.extend(stats_table(&stats, p));
        }
        let s = self.runtime.stats();
        out.push(format!(
            "cache: {} miss{}, {} hit{}, {:.2} ms compiling",
            s.misses,
            if s.misses == 1 { "" } else { "es" },
            s.hits,
            if s.hits == 1 { "" } else { "s" },
            s.compile_time.as_secs_f64() * 1e3
        ));
        out
    }
    fn cache_counts(&self) -> Option<(u64, u64)> {
        let s = self.runtime.stats();
        Some((s.hits, s.misses))
    }
}

/// The kernels by kind with their total time, then the ten slowest kernels.
fn stats_table(stats: &hlo_runtime::Stats, exe: &hlo_runtime::Program) -> Vec<String> {
    let mut out = Vec::new();
    let total: Duration = stats.by_kind.values().map(|v| v.1).sum();
    out.push(format!(
        "{} compiled kernels ({} bytes of code), arena {} bytes",
        exe.kernel_count(),
        exe.code_bytes(),
        exe.arena_bytes()
    ));
    out.push(hlo_runtime::cpu::summary());
    out.push(format!(
        "{:<36} {:>8} {:>12} {:>7}  {}",
        "kernel kind", "calls", "time µs", "share", "path"
    ));
    let mut kinds: Vec<_> = stats.by_kind.iter().collect();
    kinds.sort_by_key(|(_, v)| std::cmp::Reverse(v.1));
    for (k, (calls, t)) in kinds {
        let paths = stats.paths.get(k).map(|p| p.iter().copied().collect::<Vec<_>>());
        out.push(format!(
            "{:<36} {:>8} {:>12.1} {:>6.1}%  {}",
            k.name(),
            calls,
            t.as_secs_f64() * 1e6,
            100.0 * t.as_secs_f64() / total.as_secs_f64().max(1e-12),
            paths.map_or_else(|| "-".to_string(), |p| p.join(", "))
        ));
    }
    let mut names: Vec<_> = stats.by_name.iter().collect();
    names.sort_by_key(|(_, v)| std::cmp::Reverse(v.2));
    out.push(format!(
        "slowest kernels (parts: the most a loop kernel split into on {} threads):",
        stats.threads
    ));
    for (n, (k, calls, t)) in names.into_iter().take(10) {
        let parts = stats.parts.get(n).map_or_else(String::new, |p| format!("  {p:>3} parts"));
        out.push(format!(
            "  {:<40} {:<28} {:>6} calls {:>10.1} µs{parts}",
            n,
            k.name(),
            calls,
            t.as_secs_f64() * 1e6
        ));
    }
    out
}

struct JitOne {
    program: hlo_runtime::Program,
    compilation: Compilation,
}

struct JitSpmd {
    program: hlo_runtime::SpmdProgram,
    compilation: Compilation,
}

impl Engine for Jit {
    fn name(&self) -> &'static str {
        "jit"
    }

    fn compile(
        &self,
        m: &Checked<Module>,
        devices: Option<usize>,
        opts: &Options,
    ) -> Result<Box<dyn Executable>, EngineError> {
        let jit_opts = jit_options(opts);
        Ok(match devices {
            None if self.cache.is_some() => {
                let Some((runtime, name)) = &self.cache else { unreachable!() };
                let shapes = m.entry_param_shapes();
                let c = runtime.compile_checked(name, m, &shapes).map_err(EngineError::jit)?;
                let mut notes = Vec::new();
                if let Some(miss) = c.outcome.miss() {
                    notes.push(format!(
                        "compiled `{name}` in {:.2} ms ({})",
                        c.program.compile_time.as_secs_f64() * 1e3,
                        miss.explanation().replace('\n', "; ")
                    ));
                }
                match &c.disk {
                    Some(hlo_runtime::DiskEvent::Loaded) => notes
                        .push("note: loaded the optimized program from the cache directory".into()),
                    Some(hlo_runtime::DiskEvent::Replaced(why)) => {
                        notes.push(format!("warning: corrupt cache entry replaced: {why}"))
                    }
                    Some(hlo_runtime::DiskEvent::StoreFailed(why)) => notes
                        .push(format!("warning: could not store in the cache directory: {why}")),
                    _ => {}
                }
                let compilation =
                    Compilation { time: c.program.compile_time, notes, ..Compilation::jit() };
                Box::new(JitCached {
                    runtime: Arc::clone(runtime),
                    name: name.clone(),
                    module: m.clone(),
                    shapes,
                    stats: self.stats.then(|| Mutex::new(hlo_runtime::Stats::default())),
                    first: Mutex::new(Some(c.program.clone())),
                    last: Mutex::new(None),
                    compilation,
                })
            }
            None => {
                let program =
                    hlo_runtime::Program::compile(m, &jit_opts).map_err(EngineError::jit)?;
                let compilation = Compilation { time: program.compile_time, ..Compilation::jit() };
                Box::new(JitOne { program, compilation })
            }
            Some(n) => {
                let program =
                    hlo_runtime::SpmdProgram::compile(m, n, &jit_opts).map_err(EngineError::jit)?;
                let compilation = Compilation { time: program.compile_time, ..Compilation::jit() };
                Box::new(JitSpmd { program, compilation })
            }
        })
    }
}

/// The JIT's options for the engine options (the driver's optimizer on or off, the
/// partial sums).
fn jit_options(opts: &Options) -> hlo_runtime::CompileOptions {
    hlo_runtime::CompileOptions::optimized(opts.driver.optimizer != Optimizer::Off)
        .with_exact_partial_sums(opts.driver.partial_sums == PartialSums::Exact)
}

impl Executable for JitOne {
    fn compilation(&self) -> &Compilation {
        &self.compilation
    }
    fn execute(&self, inputs: &[Tensor]) -> Result<Execution, EngineError> {
        let (outputs, time) = timed(|| self.program.run(inputs));
        Ok(Execution { outputs: outputs.map_err(EngineError::jit)?, time, detail: Detail::None })
    }
}

impl Executable for JitSpmd {
    fn compilation(&self) -> &Compilation {
        &self.compilation
    }
    fn plan(&self) -> Option<&Plan> {
        Some(&self.program.plan)
    }
    fn execute(&self, inputs: &[Tensor]) -> Result<Execution, EngineError> {
        let (outputs, time) = timed(|| self.program.run(inputs));
        Ok(Execution { outputs: outputs.map_err(EngineError::jit)?, time, detail: Detail::None })
    }
}

// ---- the TPU model ----

/// The TPU model: the optimized module lowered for a chip and run on its cycle model (the
/// values through the interpreter with the MXU's numerics), on one chip or on N chips
/// joined by the slice's ICI.
#[derive(Clone, Debug)]
pub struct TpuModel {
    /// The chip and MXU precision.
    pub target: Tpu,
}

impl Default for TpuModel {
    /// A v4 chip, f32 matmuls at HIGHEST precision (six bf16 passes, f32-accurate).
    fn default() -> TpuModel {
        let passes = hlo_tpu::lower::Passes::All(hlo_ir::op::Precision::Highest);
        TpuModel { target: Tpu::new(hlo_chip::config::TpuConfig::v4(), passes) }
    }
}

impl TpuModel {
    /// The TPU model for `target`'s chip and precision.
    pub fn new(target: Tpu) -> TpuModel {
        TpuModel { target }
    }

    /// Compiles for one chip: the typed executable (its program and configuration).
    pub fn compile_one(
        &self,
        m: &Checked<Module>,
        opts: &Options,
    ) -> Result<TpuExecutable, EngineError> {
        let t = Instant::now();
        let c = hlo_driver::compile(m, &self.target, &opts.driver).map_err(EngineError::Compile)?;
        let compilation = compilation("tpu", &c, t.elapsed());
        Ok(TpuExecutable { compiled: c, compilation })
    }

    /// Compiles for `n` chips of the target's slice: the typed executable.
    pub fn compile_chips(
        &self,
        m: &Checked<Module>,
        n: usize,
        opts: &Options,
    ) -> Result<TpuChipsExecutable, EngineError> {
        let t = Instant::now();
        let c = hlo_driver::compile_spmd(m, &self.target, n, &opts.driver)
            .map_err(EngineError::Compile)?;
        let compilation = compilation("tpu", &c, t.elapsed());
        let global_params = m.entry_param_shapes();
        Ok(TpuChipsExecutable { compiled: c, compilation, global_params })
    }
}

/// A program compiled for one TPU chip.
pub struct TpuExecutable {
    /// The driver's product: the module, its lowering and the chip it was lowered for.
    pub compiled: Compiled<TpuProgram>,
    compilation: Compilation,
}

impl TpuExecutable {
    /// The engine options of this program's chip and precision.
    pub fn options(&self) -> hlo_tpu::engine::Options {
        let p = &self.compiled.program;
        hlo_tpu::engine::Options::new(p.config.clone(), p.passes)
    }

    /// Times the program (without values when control flow allows; on `inputs`, or seeded
    /// ones, when it depends on them).
    pub fn simulate(
        &self,
        inputs: Option<&[Tensor]>,
        opts: &hlo_tpu::engine::Options,
    ) -> Result<hlo_tpu::engine::Run, EngineError> {
        let p = &self.compiled.program;
        hlo_tpu::engine::simulate(&p.module, &p.lowered, inputs, opts).map_err(run_error)
    }
}

impl Executable for TpuExecutable {
    fn program(&self) -> Option<&Module> {
        Some(&self.compiled.program.module)
    }
    fn compilation(&self) -> &Compilation {
        &self.compilation
    }
    fn execute(&self, inputs: &[Tensor]) -> Result<Execution, EngineError> {
        let p = &self.compiled.program;
        let (run, time) =
            timed(|| hlo_tpu::engine::run(&p.module, &p.lowered, inputs, &self.options()));
        let run = run.map_err(run_error)?;
        let outputs = run.outputs.clone().unwrap_or_default();
        Ok(Execution { outputs, time, detail: Detail::Tpu(vec![run]) })
    }
}

/// A program compiled for N TPU chips.
pub struct TpuChipsExecutable {
    /// The driver's product: the partition, and each chip's module, lowering and chip.
    pub compiled: Compiled<Partitioned<TpuProgram>>,
    compilation: Compilation,
    global_params: Vec<hlo_ir::Shape>,
}

impl TpuChipsExecutable {
    /// The engine options of this program's chip and precision.
    pub fn options(&self) -> hlo_tpu::engine::Options {
        let p = &self.compiled.program.program;
        hlo_tpu::engine::Options::new(p.config.clone(), p.passes)
    }

    /// Times every chip (from shapes alone when control flow allows, else executed on the
    /// shards of `inputs` or of seeded inputs).
    pub fn simulate(
        &self,
        inputs: Option<&[Tensor]>,
        opts: &hlo_tpu::engine::Options,
    ) -> Result<Vec<hlo_tpu::engine::Run>, EngineError> {
        let Partitioned { plan, program, .. } = &self.compiled.program;
        hlo_tpu::engine::simulate_chips(
            plan,
            &self.global_params,
            &program.module,
            &program.lowered,
            inputs,
            opts,
        )
        .map_err(run_error)
    }
}

impl Executable for TpuChipsExecutable {
    fn program(&self) -> Option<&Module> {
        Some(&self.compiled.program.program.module)
    }
    fn compilation(&self) -> &Compilation {
        &self.compilation
    }
    fn plan(&self) -> Option<&Plan> {
        Some(&self.compiled.program.plan)
    }
    fn execute(&self, inputs: &[Tensor]) -> Result<Execution, EngineError> {
        let plan = &self.compiled.program.plan;
        let (runs, time) = timed(|| self.simulate(Some(inputs), &self.options()));
        let runs = runs?;
        let outs: Vec<Vec<Tensor>> =
            runs.iter().map(|r| r.outputs.clone().unwrap_or_default()).collect();
        let outputs = hlo_spmd::devices::assemble_outputs(plan, &outs).map_err(run_error)?;
        Ok(Execution { outputs, time, detail: Detail::Tpu(runs) })
    }
}

impl Engine for TpuModel {
    fn name(&self) -> &'static str {
        "tpu"
    }

    fn compile(
        &self,
        m: &Checked<Module>,
        devices: Option<usize>,
        opts: &Options,
    ) -> Result<Box<dyn Executable>, EngineError> {
        Ok(match devices {
            None => Box::new(self.compile_one(m, opts)?),
            Some(n) => Box::new(self.compile_chips(m, n, opts)?),
        })
    }
}
