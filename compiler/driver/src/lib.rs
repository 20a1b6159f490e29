//! `hlo-driver`: the compile driver, the one place that sequences the compiler's phases.
//!
//! ```text
//!  text ──parse──▶ Module ──check──▶ Checked<Module> ──compile(target, options)──▶ Compiled
//!                     └─(shape-polymorphic)─specialize(arg shapes)─┘
//!
//!  compile:  [propagate ─▶ partition]  (on N devices)
//!            ─▶ optimize               (Host, Tpu; the Interpreter runs the module as written)
//!            ─▶ lower                  (Tpu)
//! ```
//!
//! - The front door is [`parse`] (one parse, one verification, one shape inference) or
//!   [`check`] for a module built in memory; a shape-polymorphic module is bound to
//!   argument shapes by [`specialize`]. Each returns a [`Checked<Module>`], the only kind of
//!   module [`compile`] takes, so nothing downstream checks again.
//! - [`compile`] runs the phases the [`Target`] and [`Options`] ask for and returns the
//!   program each device runs ([`Compiled`]) with what every phase reported and how long
//!   it took ([`Compiled::phases`], the `--time-passes` table).
//! - Engines run what the driver made and sequence nothing: the interpreter and the host
//!   JIT (`hlo-runtime`) take [`Compiled::module`], the TPU engine also takes
//!   `Compiled::lowered`, and N devices follow [`Compiled::plan`].
//! - The TPU target (`Target::Tpu`, the lower phase, and with them the chip model and the
//!   TPU lowering) is the cargo feature `tpu`, on by default; the host runtime builds the
//!   driver without it.
//!
//! ```
//! use hlo_driver::{Options, Target};
//!
//! let src = "HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(p)\n}\n";
//! let checked = hlo_driver::parse(src).expect("a valid module");
//! let compiled = hlo_driver::compile(&checked, &Target::Host, &Options::default()).unwrap();
//! assert_eq!(compiled.module.entry().instrs().count(), 2);
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

/// Where the compiled program runs; it decides which phases [`compile`] runs.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Target {
    /// The reference interpreter: the module as written (not optimized unless
    /// [`Options::optimizer`] names passes), partitioned on N devices.
    Interpreter,
    /// Native code on the host: the optimized module, which `hlo-runtime` compiles with
    /// Cranelift.
    Host,
    /// The TPU model: the optimized module lowered onto the chip's program IR (feature
    /// `tpu`).
    #[cfg(feature = "tpu")]
    Tpu(TpuTarget),
}

/// The chip and MXU precision a TPU target is lowered for.
#[cfg(feature = "tpu")]
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TpuTarget {
    /// The chip (`TpuConfig::v4()`, ...), boxed: a preset is several hundred bytes and
    /// the other targets none.
    pub config: Box<TpuConfig>,
    /// How many bf16 passes f32 matmuls take.
    pub passes: Passes,
}

#[cfg(feature = "tpu")]
impl TpuTarget {
    /// A TPU target for `config` with f32 matmul precision `passes`.
    pub fn new(config: TpuConfig, passes: Passes) -> TpuTarget {
        TpuTarget { config: Box::new(config), passes }
    }
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
    /// Run SPMD on this many devices (threads or chips): shardings are propagated from the
    /// module's annotations and the module is partitioned. The count must match the
    /// shardings' device count; a module without shardings runs whole on every device.
    pub devices: Option<usize>,
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
    /// Stop after this phase: [`Compiled::module`] is the module as that phase left it
    /// (after `Propagate`, the whole program with every sharding propagated, not yet
    /// partitioned). A phase the target does not run (the `Propagate` of one device, the
    /// `Lower` of the host) stops nothing earlier than the end.
    pub stop_after: Option<Phase>,
}

impl Options {
    /// Options for `devices` devices (SPMD); `None` for one device.
    pub fn on_devices(mut self, devices: Option<usize>) -> Options {
        self.devices = devices;
        self
    }

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

    /// Options that stop [`compile`] after `phase` (see [`Options::stop_after`]).
    pub fn stopping_after(mut self, phase: Phase) -> Options {
        self.stop_after = Some(phase);
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

/// A compiled program: what each device runs, and what the phases reported.
#[non_exhaustive]
pub struct Compiled {
    /// The program each device runs: optimized for `Host` and `Tpu`, as checked for the
    /// `Interpreter`; on N devices the per-device (partitioned) program.
    pub module: Module,
    /// On N devices: the partition (global inputs' and outputs' shardings, collectives).
    pub plan: Option<Plan>,
    /// For a TPU target: the lowered program.
    #[cfg(feature = "tpu")]
    pub lowered: Option<Lowered>,
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

impl Compiled {
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

/// Compiles a checked module for `target`: on N devices propagate and partition, then
/// optimize (for `Host` and `Tpu`, or as [`Options::optimizer`] says), then lower (for a
/// TPU). Errors are located diagnostics (a pass's error names the pass).
pub fn compile(
    m: &Checked<Module>,
    target: &Target,
    opts: &Options,
) -> Result<Compiled, Diagnostics> {
    let mut clock = Clock(Vec::new());
    let mut warnings = Diagnostics::new();
    let mut module: Module = (**m).clone();
    let mut plan = None;
    let mut propagation = None;
    let mut optimization = None;
    #[cfg(feature = "tpu")]
    let mut lowered = None;
    let stop = |phase: Phase| opts.stop_after == Some(phase);
    // Each phase in order; `break 'phases` ends the compile after `opts.stop_after`.
    'phases: {
        if let Some(n) = opts.devices {
            let (global, report) =
                clock.time(Phase::Propagate, || propagate(module, n, opts, &mut warnings))?;
            propagation = Some(report);
            module = global;
            if stop(Phase::Propagate) {
                break 'phases;
            }
            let p = clock.time(Phase::Partition, || {
                hlo_spmd::devices::plan_with(&module, opts.partial_sums)
            })?;
            module = p.module.clone();
            plan = Some(p);
            if stop(Phase::Partition) {
                break 'phases;
            }
        }
        if let Some(mut pipeline) = optimizer(target, opts)? {
            let report = clock.time(Phase::Optimize, || pipeline.run(&mut module))?;
            for note in &report.notes {
                warnings.push(Diagnostic::note(None, note.clone()));
            }
            optimization = Some(report);
            if stop(Phase::Optimize) {
                break 'phases;
            }
        }
        #[cfg(feature = "tpu")]
        if let Target::Tpu(t) = target {
            lowered = Some(clock.time(Phase::Lower, || hlo_tpu::lower::lower(&module, t.passes))?);
        }
    }
    Ok(Compiled {
        module,
        plan,
        #[cfg(feature = "tpu")]
        lowered,
        propagation,
        optimization,
        phases: clock.0,
        warnings,
    })
}

/// The optimize phase's pipeline for `target`, or `None` when it does not run.
fn optimizer(target: &Target, opts: &Options) -> Result<Option<Pipeline>, Diagnostics> {
    let mut p = match (&opts.optimizer, target) {
        (Optimizer::Off, _) | (Optimizer::Default, Target::Interpreter) => return Ok(None),
        // On N devices the engines run combined all-reduces (one rendezvous for the
        // independent all-reduces of a step); the partitioned program stays as XLA runs it.
        (Optimizer::Default, _) if opts.devices.is_some() => hlo_passes::default_pipeline()
            .starting_with(Box::new(hlo_passes::all_reduce_combiner::AllReduceCombiner)),
        (Optimizer::Default, _) => hlo_passes::default_pipeline(),
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

// The test's target is a TPU (every phase runs).
#[cfg(all(test, feature = "tpu"))]
mod tests {
    use super::*;

    const SHARDED: &str = "HloModule m, num_partitions=2

ENTRY e {
  p = f32[4,8] parameter(0), sharding={devices=[2,1]0,1}
  ROOT n = f32[4,8] negate(p)
}
";

    fn run(target: &Target, stop: Option<Phase>) -> Compiled {
        let m = parse(SHARDED).expect("the module checks");
        let mut opts = Options::default().on_devices(Some(2));
        opts.stop_after = stop;
        compile(&m, target, &opts).expect("compiles")
    }

    fn root(c: &Compiled) -> &hlo_ir::Instr {
        let e = c.module.entry();
        e.instr(e.root().expect("a root"))
    }

    fn phases(c: &Compiled) -> Vec<Phase> {
        c.phases.iter().map(|p| p.phase).collect()
    }

    #[test]
    fn stop_after_ends_the_compile_after_that_phase() {
        let tpu = Target::Tpu(TpuTarget::new(TpuConfig::v4(), Passes::AsWritten));
        // After propagation: the whole program, the negate's sharding propagated.
        let c = run(&tpu, Some(Phase::Propagate));
        assert_eq!(phases(&c), [Phase::Propagate]);
        assert!(c.plan.is_none() && c.optimization.is_none() && c.lowered.is_none());
        let r = root(&c);
        assert_eq!(r.shape.to_string(), "f32[4,8]");
        assert!(r.sharding.is_some(), "the root's sharding is propagated");
        // After partitioning: each device's half.
        let c = run(&tpu, Some(Phase::Partition));
        assert_eq!(phases(&c), [Phase::Propagate, Phase::Partition]);
        assert!(c.plan.is_some() && c.optimization.is_none());
        assert!(root(&c).shape.to_string().starts_with("f32[2,8]"));
        // After optimizing: not lowered; without a stop, lowered.
        let c = run(&tpu, Some(Phase::Optimize));
        assert_eq!(phases(&c), [Phase::Propagate, Phase::Partition, Phase::Optimize]);
        assert!(c.lowered.is_none());
        let c = run(&tpu, None);
        assert_eq!(*phases(&c).last().expect("phases"), Phase::Lower);
        assert!(c.lowered.is_some());
        // A phase the target does not run stops nothing earlier.
        let c = run(&Target::Host, Some(Phase::Lower));
        assert_eq!(phases(&c), [Phase::Propagate, Phase::Partition, Phase::Optimize]);
    }
}
