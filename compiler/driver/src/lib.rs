//! `hlo-driver`: the compile driver, the one place that sequences the compiler's phases.
//!
//! ```text
//!  text ──parse──▶ Module ──check──▶ Checked<Module> ──compile(target)──────────▶ Compiled<T::Program>
//!                     └─(shape-polymorphic)─specialize(arg shapes)─┘
//!                                                 └──compile_spmd(target, N)──▶ Compiled<Partitioned<T::Program>>
//!
//!  compile:       optimize  (Host, Tpu; the Interpreter runs the module as written)
//!                 ─▶ lower  (Tpu)
//!  compile_spmd:  propagate ─▶ partition ─▶ optimize ─▶ lower
//! ```
//!
//! - The front door is [`parse`] (one parse, one verification, one shape inference) or
//!   [`check`] for a module built in memory; a shape-polymorphic module is bound to
//!   argument shapes by [`specialize`]. Each returns a [`Checked<Module>`], the only kind of
//!   module the compiles take, so nothing downstream checks again.
//! - A [`Target`] says which phases run and what the compile makes, typed: the module for
//!   the [`Interpreter`] and the [`Host`], a [`TpuProgram`] (the module, its lowering and the
//!   chip configuration it was lowered for) for a [`Tpu`]. On N devices [`compile_spmd`]
//!   wraps that product in a [`Partitioned`] one with the partition's [`Plan`]. Nothing is
//!   optional: what a target makes is always there.
//! - Every compile returns its product with what every phase reported and how long it took
//!   ([`Compiled::phases`], the `--time-passes` table); [`stop_after`] ends one after a
//!   phase (the module as that phase left it).
//! - Engines run what the driver made and sequence nothing (`hlo-engine` puts the
//!   interpreter, the host JIT and the TPU model behind one interface).
//! - The TPU target ([`Tpu`], its lower phase, and with them the chip model and the TPU
//!   lowering) is the cargo feature `tpu`, on by default; the host runtime builds the
//!   driver without it.
//!
//! ```
//! use hlo_driver::{Host, Options};
//!
//! let src = "HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(p)\n}\n";
//! let checked = hlo_driver::parse(src).expect("a valid module");
//! let compiled = hlo_driver::compile(&checked, &Host, &Options::default()).unwrap();
//! assert_eq!(compiled.program.entry().instrs().count(), 2);
//! assert!(compiled.phases.iter().any(|p| p.phase == hlo_driver::Phase::Optimize));
//! ```

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[cfg(feature = "tpu")]
use hlo_chip::config::TpuConfig;
use hlo_ir::{Diagnostic, Diagnostics, Module, Shape};
use hlo_pipeline::{Dump, PassInfo, Pipeline, PipelineReport, Step};
use hlo_spmd::devices::Plan;
#[cfg(feature = "tpu")]
use hlo_tpu::lower::{Lowered, Passes};

pub use hlo_check::Checked;

/// Where the compiled program runs: it decides which phases [`compile`] runs and what
/// it makes (the target's typed [`Target::Program`]).
pub trait Target {
    /// What the compile makes for one device: the module the engine runs, and for a
    /// target that lowers, the lowered program with what it was lowered for.
    type Program;
    /// The target's name in reports (`interp`, `host`, `tpu`).
    fn name(&self) -> &'static str;
    /// Whether the default optimizer runs for this target (the interpreter runs the module
    /// as written).
    fn optimizes(&self) -> bool;
    /// The optimizer's passes for this target when it optimizes by default
    /// ([`Optimizer::Default`]): `hlo_passes::default_pipeline`, bit-exact, unless the
    /// target adds passes of its own.
    fn default_pipeline(&self) -> Pipeline {
        hlo_passes::default_pipeline()
    }
    /// The lower phase: the optimized module made into the target's program (the module
    /// itself for targets without one; [`Target::LOWERS`] says whether it is timed as a
    /// phase).
    fn lower(&self, module: Module) -> Result<Self::Program, Diagnostics>;
    /// Whether [`Target::lower`] is a phase of its own ([`Phase::Lower`]).
    const LOWERS: bool = false;
}

/// The reference interpreter: the module as written (not optimized unless
/// [`Options::optimizer`] names passes), partitioned on N devices.
#[derive(Clone, Copy, Debug, Default)]
pub struct Interpreter;

/// Native code on the host: the optimized module, which `hlo-runtime` compiles with
/// Cranelift.
#[derive(Clone, Copy, Debug, Default)]
pub struct Host;

impl Target for Interpreter {
    type Program = Module;
    fn name(&self) -> &'static str {
        "interp"
    }
    fn optimizes(&self) -> bool {
        false
    }
    fn lower(&self, module: Module) -> Result<Module, Diagnostics> {
        Ok(module)
    }
}

impl Target for Host {
    type Program = Module;
    fn name(&self) -> &'static str {
        "host"
    }
    fn optimizes(&self) -> bool {
        true
    }
    /// `hlo_passes::host_pipeline`: the default one and `tree-reduction`, which groups the
    /// rows of reductions the runtime would otherwise run on one thread.
    fn default_pipeline(&self) -> Pipeline {
        hlo_passes::host_pipeline()
    }
    fn lower(&self, module: Module) -> Result<Module, Diagnostics> {
        Ok(module)
    }
}

#[cfg(feature = "tpu")]
/// The TPU model: the optimized module lowered onto the chip's program IR, for this chip
/// and MXU precision.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Tpu {
    /// The chip (`TpuConfig::v4()`, ...), with its slice and DCN for N chips.
    pub config: TpuConfig,
    /// How many bf16 passes f32 matmuls take.
    pub passes: Passes,
}

#[cfg(feature = "tpu")]
impl Tpu {
    /// A TPU target for `config` with f32 matmul precision `passes`.
    pub fn new(config: TpuConfig, passes: Passes) -> Tpu {
        Tpu { config, passes }
    }
}

#[cfg(feature = "tpu")]
/// A TPU compile's product: the optimized module, its lowering, and the chip and precision
/// it was lowered for (the engine times it on this configuration, built once per compile).
#[derive(Clone)]
#[non_exhaustive]
pub struct TpuProgram {
    /// The optimized module (the values the chip computes).
    pub module: Module,
    /// The lowered program (kernels over HBM buffers) the chip model times.
    pub lowered: Lowered,
    /// The chip it was lowered for.
    pub config: TpuConfig,
    /// How many bf16 passes its f32 matmuls take.
    pub passes: Passes,
}

#[cfg(feature = "tpu")]
impl Target for Tpu {
    type Program = TpuProgram;
    const LOWERS: bool = true;
    fn name(&self) -> &'static str {
        "tpu"
    }
    fn optimizes(&self) -> bool {
        true
    }
    fn lower(&self, module: Module) -> Result<TpuProgram, Diagnostics> {
        let lowered = hlo_tpu::lower::lower(&module, self.passes)?;
        Ok(TpuProgram { module, lowered, config: self.config.clone(), passes: self.passes })
    }
}

/// What a compile for N devices makes: the partition, what propagation reported, and the
/// program every device runs.
#[non_exhaustive]
pub struct Partitioned<P> {
    /// The partition: the global inputs' and outputs' shardings, the per-device module as
    /// partitioned (before optimization), the collectives.
    pub plan: Plan,
    /// The program each device runs (optimized and lowered as the target asks).
    pub program: P,
}

/// Which optimization pipeline the optimize phase runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Optimizer {
    /// The default pipeline (`hlo_passes::default_pipeline`) for `Host` and `Tpu`; none for
    /// the `Interpreter`, which runs the module as written.
    #[default]
    Default,
    /// No optimization.
    Off,
    /// These passes, in this order (any name of [`registry`]).
    Passes(Vec<String>),
}

/// How [`compile`] compiles.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Options {
    /// The optimization pipeline.
    pub optimizer: Optimizer,
    /// Passes not to run (by name).
    pub skip: Vec<String>,
    /// Check the module after every pass that changed it (a broken invariant is an error
    /// naming the pass).
    pub verify_each: bool,
    /// Print the module after these passes (`all` for every pass) into this directory.
    pub dump: Option<(PathBuf, Vec<String>)>,
    /// How the partitioner sums the partial sums of a split contraction: in the dot's type
    /// as XLA does (the default), or exactly (f32 until summed), to check partitioned
    /// programs against the one-device module's values.
    pub partial_sums: hlo_spmd::PartialSums,
}

impl Options {
    /// Options with optimizer `optimizer`.
    pub fn with_optimizer(mut self, optimizer: Optimizer) -> Options {
        self.optimizer = optimizer;
        self
    }

    /// Options that check the module after every pass that changed it.
    pub fn verifying_each(mut self, on: bool) -> Options {
        self.verify_each = on;
        self
    }

    /// Options whose partitioner sums split contractions as `sums` says.
    pub fn with_partial_sums(mut self, sums: hlo_spmd::PartialSums) -> Options {
        self.partial_sums = sums;
        self
    }
}

/// One phase of [`compile`] (parsing and checking come before it and count themselves in
/// `hlo_ir::counters`: `parse`, `verify`, `shape inference`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Phase {
    /// GSPMD sharding propagation (on N devices).
    Propagate,
    /// SPMD partitioning into the per-device program (on N devices).
    Partition,
    /// The optimization pipeline.
    Optimize,
    /// Lowering onto the TPU program IR.
    Lower,
}

impl Phase {
    /// The phase's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Propagate => "propagate",
            Phase::Partition => "partition",
            Phase::Optimize => "optimize",
            Phase::Lower => "lower",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One phase run and its wall time.
#[derive(Clone, Copy, Debug)]
pub struct PhaseRun {
    /// The phase.
    pub phase: Phase,
    /// How long it took.
    pub wall: Duration,
}

/// A compiled program: the target's typed product (`P`: a [`Target::Program`], or a
/// [`Partitioned`] one on N devices), with what the phases reported and how long each took.
#[non_exhaustive]
pub struct Compiled<P> {
    /// What the compile made: for one device the target's program (the optimized module for
    /// `Host`, the module as checked for the `Interpreter`, a [`TpuProgram`] for a TPU); on
    /// N devices a [`Partitioned`] one.
    pub program: P,
    /// On N devices: what the propagate phase (inline-calls, sharding-propagation)
    /// reported, pass by pass (`context.report::<hlo_spmd::sharding::Propagation>()`).
    pub propagation: Option<PipelineReport>,
    /// What the optimizer reported, pass by pass (fusion decisions: `context.report::<FusionLog>()`),
    /// when the optimize phase ran.
    pub optimization: Option<PipelineReport>,
    /// Every phase run, in order, with its wall time.
    pub phases: Vec<PhaseRun>,
    /// Notes and warnings of the phases (the checks' own are [`Checked::warnings`]).
    pub warnings: Diagnostics,
}

impl<P> Compiled<P> {
    /// The `--time-passes` table of the phases: one line per phase with its runs and wall
    /// time, then the optimizer's per-pass table.
    pub fn time_table(&self) -> String {
        let total: Duration = self.phases.iter().map(|p| p.wall).sum();
        let mut out = format!("{:<12} {:>5} {:>11}\n", "phase", "runs", "wall ms");
        let mut rows: Vec<(Phase, usize, Duration)> = Vec::new();
        for p in &self.phases {
            match rows.iter_mut().find(|r| r.0 == p.phase) {
                Some(r) => {
                    r.1 += 1;
                    r.2 += p.wall;
                }
                None => rows.push((p.phase, 1, p.wall)),
            }
        }
        for (phase, runs, wall) in rows {
            out.push_str(&format!("{:<12} {runs:>5} {:>11.3}\n", phase.name(), ms(wall)));
        }
        out.push_str(&format!("{:<12} {:>5} {:>11.3}\n", "total", self.phases.len(), ms(total)));
        for report in [&self.propagation, &self.optimization].into_iter().flatten() {
            out.push('\n');
            out.push_str(&report.time_table());
        }
        out
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Every pass `--passes` can name: the optimizer's (`hlo-passes`), then the sharding
/// passes (`hlo-spmd`).
pub fn registry() -> Vec<PassInfo> {
    let mut v = hlo_passes::registry();
    v.extend(hlo_spmd::registry());
    v
}

/// The optimize phase's default order: its pass names (each once), and the order as one
/// line (`a, b, group{c, d} (to a fixpoint, ...), e`).
pub fn default_order() -> (Vec<&'static str>, String) {
    let p = hlo_passes::default_pipeline();
    (p.pass_names(), p.describe())
}

/// The passes the host's pipeline (`hlo_passes::host_pipeline`, the `Host` target's)
/// runs beyond the default order.
pub fn host_only_passes() -> Vec<&'static str> {
    let default = hlo_passes::default_pipeline().pass_names();
    let mut host = hlo_passes::host_pipeline().pass_names();
    host.retain(|p| !default.contains(p));
    host
}

/// A pipeline of the named passes, in order.
pub fn pipeline_of(names: &[&str]) -> Result<Pipeline, Diagnostic> {
    let all = registry();
    let mut steps = Vec::new();
    for n in names {
        match all.iter().find(|p| p.name == *n) {
            Some(p) => steps.push(Step::Pass((p.make)())),
            None => {
                let known: Vec<&str> = all.iter().map(|p| p.name).collect();
                return Err(Diagnostic::error(None, format!("unknown pass `{n}`"))
                    .with_help(format!("known passes: {}", known.join(", "))));
            }
        }
    }
    Ok(Pipeline::new(steps))
}

/// Phase timings, recorded as phases run.
struct Clock(Vec<PhaseRun>);

impl Clock {
    fn time<T>(&mut self, phase: Phase, f: impl FnOnce() -> T) -> T {
        hlo_ir::counters::bump(phase.name());
        let t = Instant::now();
        let out = f();
        self.0.push(PhaseRun { phase, wall: t.elapsed() });
        out
    }
}

/// Parses `src` and checks the module: one parse, one verification, one shape inference.
pub fn parse(src: &str) -> Result<Checked<Module>, Diagnostics> {
    hlo_check::parse(src)
}

/// Checks a module built in memory (`src`, when given, is its text, for located errors).
pub fn check(m: Module, src: Option<&str>) -> Result<Checked<Module>, Diagnostics> {
    hlo_check::check(m, src)
}

/// Whether `m` is shape-polymorphic (entry parameters with `?` dimensions): it must be
/// bound to argument shapes with [`specialize`] before it can be checked.
pub fn is_polymorphic(m: &Module) -> bool {
    hlo_passes::specialize::is_polymorphic(m)
}

/// Binds a shape-polymorphic module (structurally verified) to the argument shapes `args`
/// and checks the result. A static module is only checked (its parameters must match
/// `args`).
pub fn specialize(m: &Module, args: &[Shape]) -> Result<Checked<Module>, Diagnostics> {
    if !is_polymorphic(m) {
        let params = m.entry_param_shapes();
        if params.len() != args.len() || params.iter().zip(args).any(|(p, a)| p != a) {
            return Err(Diagnostics::from(Diagnostic::error(
                m.entry().span,
                format!("the program takes ({}), called with ({})", shapes(&params), shapes(args)),
            )));
        }
        return check(m.clone(), None);
    }
    let s = hlo_passes::specialize::specialize(m, args).map_err(|mut e| {
        e.span = e.span.or(Some(m.entry().span));
        Diagnostics::from(e)
    })?;
    check(s, None)
}

fn shapes(v: &[Shape]) -> String {
    v.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ")
}

/// One compile in progress: the phases' clock, notes and reports.
struct Session {
    clock: Clock,
    warnings: Diagnostics,
    propagation: Option<PipelineReport>,
    optimization: Option<PipelineReport>,
}

impl Session {
    fn new() -> Session {
        Session {
            clock: Clock(Vec::new()),
            warnings: Diagnostics::new(),
            propagation: None,
            optimization: None,
        }
    }

    /// Propagate then partition for `n` devices: the global module with its shardings
    /// propagated, and then (unless stopping after propagation) the partition.
    fn propagate(&mut self, m: Module, n: usize, opts: &Options) -> Result<Module, Diagnostics> {
        let warnings = &mut self.warnings;
        let (global, report) =
            self.clock.time(Phase::Propagate, || propagate(m, n, opts, warnings))?;
        self.propagation = Some(report);
        Ok(global)
    }

    fn partition(&mut self, global: &Module, opts: &Options) -> Result<Plan, Diagnostics> {
        Ok(self
            .clock
            .time(Phase::Partition, || hlo_spmd::devices::plan_with(global, opts.partial_sums))?)
    }

    /// The optimize phase, when it runs for `target` (`spmd`: on N devices).
    fn optimize<T: Target>(
        &mut self,
        target: &T,
        mut module: Module,
        opts: &Options,
        spmd: bool,
    ) -> Result<Module, Diagnostics> {
        if let Some(mut pipeline) =
            optimizer(target.optimizes().then(|| target.default_pipeline()), spmd, opts)?
        {
            let report = self.clock.time(Phase::Optimize, || pipeline.run(&mut module))?;
            for note in &report.notes {
                self.warnings.push(Diagnostic::note(None, note.clone()));
            }
            self.optimization = Some(report);
        }
        Ok(module)
    }

    fn lower<T: Target>(&mut self, target: &T, module: Module) -> Result<T::Program, Diagnostics> {
        if T::LOWERS {
            self.clock.time(Phase::Lower, || target.lower(module))
        } else {
            target.lower(module)
        }
    }

    fn finish<P>(self, program: P) -> Compiled<P> {
        Compiled {
            program,
            propagation: self.propagation,
            optimization: self.optimization,
            phases: self.clock.0,
            warnings: self.warnings,
        }
    }
}

/// Compiles a checked module for `target` on one device: optimize (for `Host` and `Tpu`, or
/// as [`Options::optimizer`] says), then lower (for a TPU). Errors are located diagnostics
/// (a pass's error names the pass).
pub fn compile<T: Target>(
    m: &Checked<Module>,
    target: &T,
    opts: &Options,
) -> Result<Compiled<T::Program>, Diagnostics> {
    let mut s = Session::new();
    let module = s.optimize(target, (**m).clone(), opts, false)?;
    let program = s.lower(target, module)?;
    Ok(s.finish(program))
}

/// Compiles a checked module for `target` on `devices` devices (threads or chips):
/// shardings are propagated from the module's annotations, the module is partitioned, and
/// the per-device program is optimized and lowered as [`compile`] does. The count must
/// match the shardings' device count; a module without shardings runs whole on every
/// device.
pub fn compile_spmd<T: Target>(
    m: &Checked<Module>,
    target: &T,
    devices: usize,
    opts: &Options,
) -> Result<Compiled<Partitioned<T::Program>>, Diagnostics> {
    let mut s = Session::new();
    let global = s.propagate((**m).clone(), devices, opts)?;
    let plan = s.partition(&global, opts)?;
    let module = s.optimize(target, plan.module.clone(), opts, true)?;
    let program = s.lower(target, module)?;
    Ok(s.finish(Partitioned { plan, program }))
}

/// Compiles as [`compile`] (`devices: None`) or [`compile_spmd`] does, but stops after
/// `phase`: the product is the module as that phase left it (after `Propagate`, the whole
/// program with every sharding propagated, not yet partitioned; after `Partition`, the
/// per-device module). A phase the target does not run (the `Propagate` of one device, the
/// `Lower` of the host) stops nothing earlier than the end, which is the module before
/// lowering.
pub fn stop_after<T: Target>(
    phase: Phase,
    m: &Checked<Module>,
    target: &T,
    devices: Option<usize>,
    opts: &Options,
) -> Result<Compiled<Module>, Diagnostics> {
    let mut s = Session::new();
    let mut module = (**m).clone();
    if let Some(n) = devices {
        module = s.propagate(module, n, opts)?;
        if phase == Phase::Propagate {
            return Ok(s.finish(module));
        }
        module = s.partition(&module, opts)?.module;
        if phase == Phase::Partition {
            return Ok(s.finish(module));
        }
    }
    let module = s.optimize(target, module, opts, devices.is_some())?;
    Ok(s.finish(module))
}

/// The optimize phase's pipeline (`default`: the target's own when it optimizes by
/// default, `None` when it does not; `spmd`: on N devices), or `None` when it does not run.
fn optimizer(
    default: Option<Pipeline>,
    spmd: bool,
    opts: &Options,
) -> Result<Option<Pipeline>, Diagnostics> {
    let mut p = match (&opts.optimizer, default) {
        (Optimizer::Off, _) | (Optimizer::Default, None) => return Ok(None),
        // On N devices the engines run combined all-reduces (one rendezvous for the
        // independent all-reduces of a step); the partitioned program stays as XLA runs it.
        (Optimizer::Default, Some(p)) if spmd => {
            p.starting_with(Box::new(hlo_passes::all_reduce_combiner::AllReduceCombiner))
        }
        (Optimizer::Default, Some(p)) => p,
        (Optimizer::Passes(names), _) => {
            pipeline_of(&names.iter().map(String::as_str).collect::<Vec<_>>())?
        }
    };
    let known = registry();
    for s in opts.skip.iter().chain(opts.dump.iter().flat_map(|d| &d.1).filter(|d| *d != "all")) {
        if !known.iter().any(|p| p.name == s) {
            return Err(Diagnostics::from(
                Diagnostic::error(None, format!("unknown pass `{s}`"))
                    .with_help("`hloc opt --list-passes` lists them"),
            ));
        }
    }
    p.skip = opts.skip.clone();
    p.verify_each = opts.verify_each;
    if let Some((dir, after)) = &opts.dump {
        std::fs::create_dir_all(dir).map_err(|e| {
            Diagnostics::from(Diagnostic::error(
                None,
                format!("cannot create `{}`: {e}", dir.display()),
            ))
        })?;
        let after = if after.is_empty() { vec!["all".to_string()] } else { after.clone() };
        p.dump = Some(Dump { dir: dir.clone(), after });
    }
    Ok(Some(p))
}

/// The propagate phase: Shardy's shard_maps made GSPMD manual regions, calls inlined and
/// shardings propagated; the device count checked
/// against `n` (a module without shardings runs whole on each of the `n` devices).
fn propagate(
    mut m: Module,
    n: usize,
    opts: &Options,
    warnings: &mut Diagnostics,
) -> Result<(Module, PipelineReport), Diagnostics> {
    let mut p = pipeline_of(&["sdy-manual-regions", "inline-calls", "sharding-propagation"])?;
    p.verify_each = opts.verify_each;
    let report = p.run(&mut m)?;
    let count = hlo_spmd::device_count(&m);
    if count <= 1 {
        m.header.num_partitions = Some(n as i64);
        if n > 1 {
            warnings.push(Diagnostic::note(
                None,
                format!(
                    "the module has no shardings: every one of the {n} devices computes the whole step (annotate parameters with `sharding=` to split it)"
                ),
            ));
        }
    } else if count != n as i64 {
        return Err(Diagnostics::from(
            Diagnostic::error(
                m.entry().span,
                format!(
                    "the module's shardings are for {count} devices, but {n} devices were asked for"
                ),
            )
            .with_help(format!(
                "ask for {count} devices (`hloc run --devices {count}`, `hloc compile --chips {count}`)"
            )),
        ));
    }
    Ok((m, report))
}

#[cfg(all(test, feature = "tpu"))]
mod tests {
    use super::*;

    const SHARDED: &str = "HloModule m, num_partitions=2

ENTRY e {
  p = f32[4,8] parameter(0), sharding={devices=[2,1]0,1}
  ROOT n = f32[4,8] negate(p)
}
";

    fn stopped<T: Target>(target: &T, phase: Phase) -> Compiled<Module> {
        let m = parse(SHARDED).expect("the module checks");
        stop_after(phase, &m, target, Some(2), &Options::default()).expect("compiles")
    }

    fn root(m: &Module) -> &hlo_ir::Instr {
        let e = m.entry();
        e.instr(e.root().expect("a root"))
    }

    fn phases<P>(c: &Compiled<P>) -> Vec<Phase> {
        c.phases.iter().map(|p| p.phase).collect()
    }

    #[test]
    fn stop_after_ends_the_compile_after_that_phase() {
        let tpu = Tpu::new(TpuConfig::v4(), Passes::AsWritten);
        // After propagation: the whole program, the negate's sharding propagated.
        let c = stopped(&tpu, Phase::Propagate);
        assert_eq!(phases(&c), [Phase::Propagate]);
        assert!(c.optimization.is_none());
        let r = root(&c.program);
        assert_eq!(r.shape.to_string(), "f32[4,8]");
        assert!(r.sharding.is_some(), "the root's sharding is propagated");
        // After partitioning: each device's half.
        let c = stopped(&tpu, Phase::Partition);
        assert_eq!(phases(&c), [Phase::Propagate, Phase::Partition]);
        assert!(c.optimization.is_none());
        assert!(root(&c.program).shape.to_string().starts_with("f32[2,8]"));
        // After optimizing: not lowered; the whole compile lowers.
        let c = stopped(&tpu, Phase::Optimize);
        assert_eq!(phases(&c), [Phase::Propagate, Phase::Partition, Phase::Optimize]);
        let m = parse(SHARDED).expect("the module checks");
        let c = compile_spmd(&m, &tpu, 2, &Options::default()).expect("compiles");
        assert_eq!(*phases(&c).last().expect("phases"), Phase::Lower);
        assert_eq!(c.program.plan.devices, 2);
        assert!(root(&c.program.program.module).shape.to_string().starts_with("f32[2,8]"));
        // A phase the target does not run stops nothing earlier.
        let c = stopped(&Host, Phase::Lower);
        assert_eq!(phases(&c), [Phase::Propagate, Phase::Partition, Phase::Optimize]);
        // One device: no propagation, the interpreter's module as written.
        let c = compile(&m, &Interpreter, &Options::default()).expect("compiles");
        assert!(phases(&c).is_empty());
        assert_eq!(hlo_ir::text::print(&c.program), hlo_ir::text::print(&m));
    }

    #[test]
    fn the_tpu_product_carries_its_chip() {
        let m = parse(SHARDED).expect("the module checks");
        let tpu = Tpu::new(TpuConfig::v5p(), Passes::AsWritten);
        let c = compile(&m, &tpu, &Options::default()).expect("compiles");
        assert_eq!(c.program.config.name, TpuConfig::v5p().name);
        assert_eq!(phases(&c), [Phase::Optimize, Phase::Lower]);
    }
}
