//! `hlo-pipeline`: the pass manager, below every pass: an ordered list of passes and
//! fixpoint groups over one module, and the call inliner every phase's pipeline runs.
//! It depends on the IR and the checks only (not on the interpreter, which the
//! optimizer's constant folding needs), so the partitioner (`hlo-spmd`) runs passes
//! without reaching the interpreter.
//!
//! A [`Pass`] has a kebab-case name and reports whether it changed the module. The
//! [`Pipeline`] runs its steps in order and
//! - checks the module after every pass that changed it (structural verifier + shape
//!   inference) in debug builds and when [`Pipeline::verify_each`] is set; a broken
//!   invariant is an error naming the pass;
//! - skips passes by name ([`Pipeline::skip`]);
//! - runs a [`Step::Fixpoint`] group until no pass in it changes the module, at most `cap`
//!   rounds (a group that still changes at the cap stops there with a note);
//! - dumps the module after a named pass (or after every pass) into a directory;
//! - times every pass run (wall time, instruction count before and after).
//!
//! [`PassInfo`] is how a crate lists the passes `hloc opt --passes` can name
//! (`hlo_passes::registry`, `hlo_spmd::registry`); the optimizer's default order lives
//! in one place, `hlo_passes::default_pipeline`. [`inline_calls`] is the `inline-calls`
//! pass (XLA's `CallInliner`), which the optimizer and the partitioner's phases both run.

pub mod inline_calls;

use std::any::Any;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hlo_ir::{Diagnostic, Diagnostics, Module};

/// What a pass may read and record besides the module.
///
/// Passes record what they decided as reports, one per type: the fusion decisions
/// (`fusion::decision::FusionLog`), what `sharding-propagation` decided, what
/// `spmd-partition` did. The pass manager knows none of these types.
#[derive(Default)]
pub struct PassContext {
    reports: Vec<Box<dyn Any + Send>>,
}

impl std::fmt::Debug for PassContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassContext").field("reports", &self.reports.len()).finish()
    }
}

impl PassContext {
    /// The report of type `T` a pass recorded, if any.
    pub fn report<T: Any>(&self) -> Option<&T> {
        self.reports.iter().find_map(|r| r.downcast_ref::<T>())
    }

    /// The report of type `T`, to update it.
    pub fn report_mut<T: Any>(&mut self) -> Option<&mut T> {
        self.reports.iter_mut().find_map(|r| r.downcast_mut::<T>())
    }

    /// The report of type `T`, made empty first if no pass recorded one yet.
    pub fn report_or_default<T: Any + Send + Default>(&mut self) -> &mut T {
        if self.report::<T>().is_none() {
            self.reports.push(Box::new(T::default()));
        }
        self.report_mut::<T>().expect("just recorded")
    }

    /// Records `report`, replacing an earlier report of the same type.
    pub fn set_report<T: Any + Send>(&mut self, report: T) {
        self.take_report::<T>();
        self.reports.push(Box::new(report));
    }

    /// Removes and returns the report of type `T`.
    pub fn take_report<T: Any>(&mut self) -> Option<T> {
        let i = self.reports.iter().position(|r| r.is::<T>())?;
        self.reports.remove(i).downcast::<T>().ok().map(|b| *b)
    }
}

/// A pass `hloc opt --passes` can name: its name, what it does, and how to make one.
pub struct PassInfo {
    pub name: &'static str,
    pub about: &'static str,
    pub make: fn() -> Box<dyn Pass>,
}

/// One transformation of a module.
pub trait Pass {
    /// The kebab-case name (`inline-calls`, `cse`, ...) used by `--passes`, `--skip` and
    /// dumps.
    fn name(&self) -> &'static str;
    /// Runs over the module; `Ok(true)` when anything changed. An `Err` means the module
    /// cannot be optimized as given (it is left in a valid state).
    fn run(&mut self, m: &mut Module, cx: &mut PassContext) -> Result<bool, Diagnostic>;
}

/// One step of a pipeline.
pub enum Step {
    Pass(Box<dyn Pass>),
    /// Passes run in order, round after round, until a round changes nothing (at most
    /// `cap` rounds).
    Fixpoint {
        name: &'static str,
        passes: Vec<Box<dyn Pass>>,
        cap: usize,
    },
}

/// Statistics of one pass run.
#[derive(Debug, Clone)]
pub struct PassRun {
    pub pass: &'static str,
    /// The fixpoint group and round (1-based) the run belongs to.
    pub group: Option<(&'static str, usize)>,
    pub wall: Duration,
    pub instrs_before: usize,
    pub instrs_after: usize,
    pub changed: bool,
}

/// What a pipeline run did.
#[derive(Debug, Default)]
pub struct PipelineReport {
    pub runs: Vec<PassRun>,
    /// Fixpoint groups that were still changing at their cap.
    pub notes: Vec<String>,
    pub context: PassContext,
    pub total: Duration,
}

impl PipelineReport {
    /// The `--time-passes` table: one line per pass (summed over its runs), then the total.
    pub fn time_table(&self) -> String {
        let mut rows: Vec<(&'static str, usize, Duration, usize, usize, usize)> = Vec::new();
        for r in &self.runs {
            match rows.iter_mut().find(|row| row.0 == r.pass) {
                Some(row) => {
                    row.1 += 1;
                    row.2 += r.wall;
                    row.4 = r.instrs_after;
                    row.5 += usize::from(r.changed);
                }
                None => rows.push((
                    r.pass,
                    1,
                    r.wall,
                    r.instrs_before,
                    r.instrs_after,
                    usize::from(r.changed),
                )),
            }
        }
        // Instruction counts: before the pass's first run and after its last one.
        let mut out = format!(
            "{:<36} {:>5} {:>8} {:>11} {:>7} {:>10} {:>10}\n",
            "pass", "runs", "changed", "wall ms", "%", "instrs in", "out"
        );
        let total = self.total.as_secs_f64().max(1e-9);
        for (name, runs, wall, before, after, changed) in rows {
            out.push_str(&format!(
                "{name:<36} {runs:>5} {changed:>8} {:>11.3} {:>6.1}% {before:>10} {after:>10}\n",
                wall.as_secs_f64() * 1e3,
                100.0 * wall.as_secs_f64() / total
            ));
        }
        let changed = self.runs.iter().filter(|r| r.changed).count();
        out.push_str(&format!(
            "{:<36} {:>5} {changed:>8} {:>11.3}\n",
            "total",
            self.runs.len(),
            self.total.as_secs_f64() * 1e3
        ));
        out
    }
}

/// Where and after which passes to write the module.
#[derive(Debug, Clone)]
pub struct Dump {
    pub dir: PathBuf,
    /// Pass names; `all` matches every pass.
    pub after: Vec<String>,
}

pub struct Pipeline {
    steps: Vec<Step>,
    /// Check invariants after every changing pass (always on in debug builds).
    pub verify_each: bool,
    /// Pass names not to run.
    pub skip: Vec<String>,
    pub dump: Option<Dump>,
}

impl Pipeline {
    pub fn new(steps: Vec<Step>) -> Pipeline {
        Pipeline { steps, verify_each: cfg!(debug_assertions), skip: Vec::new(), dump: None }
    }

    /// The pipeline with `pass` inserted before its first step that is the pass or the
    /// fixpoint group named `before` (at the end when there is none).
    pub fn inserted_before(mut self, before: &str, pass: Box<dyn Pass>) -> Pipeline {
        let at = self
            .steps
            .iter()
            .position(|s| match s {
                Step::Pass(p) => p.name() == before,
                Step::Fixpoint { name, .. } => *name == before,
            })
            .unwrap_or(self.steps.len());
        self.steps.insert(at, Step::Pass(pass));
        self
    }

    /// This pipeline with `pass` run before its first step.
    pub fn starting_with(mut self, pass: Box<dyn Pass>) -> Pipeline {
        self.steps.insert(0, Step::Pass(pass));
        self
    }

    /// Every pass name in the pipeline, in order (fixpoint groups expanded once).
    pub fn pass_names(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        for s in &self.steps {
            match s {
                Step::Pass(p) => v.push(p.name()),
                Step::Fixpoint { passes, .. } => v.extend(passes.iter().map(|p| p.name())),
            }
        }
        v
    }

    /// The order as one line: `a, b, group{c, d}x8, e`.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .steps
            .iter()
            .map(|s| match s {
                Step::Pass(p) => p.name().to_string(),
                Step::Fixpoint { name, passes, cap } => {
                    format!(
                        "{name}{{{}}} (to a fixpoint, at most {cap} rounds)",
                        passes.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
                    )
                }
            })
            .collect();
        if parts.is_empty() { "(no passes)".into() } else { parts.join(", ") }
    }

    /// Runs every step. On an error the module is left as the failing pass left it, and
    /// the error names the pass.
    pub fn run(&mut self, m: &mut Module) -> Result<PipelineReport, Diagnostics> {
        let start = Instant::now();
        let mut report = PipelineReport::default();
        let mut dump_index = 0usize;
        let mut steps = std::mem::take(&mut self.steps);
        let result = (|| {
            for step in steps.iter_mut() {
                match step {
                    Step::Pass(p) => {
                        self.run_one(p.as_mut(), m, None, &mut report, &mut dump_index)?;
                    }
                    Step::Fixpoint { name, passes, cap } => {
                        let mut round = 0;
                        loop {
                            round += 1;
                            let mut changed = false;
                            for p in passes.iter_mut() {
                                changed |= self.run_one(
                                    p.as_mut(),
                                    m,
                                    Some((name, round)),
                                    &mut report,
                                    &mut dump_index,
                                )?;
                            }
                            if !changed {
                                break;
                            }
                            if round >= *cap {
                                report.notes.push(format!("fixpoint group `{name}` still changed the module after {cap} rounds; stopped there"));
                                break;
                            }
                        }
                    }
                }
            }
            Ok(())
        })();
        self.steps = steps;
        report.total = start.elapsed();
        result.map(|()| report)
    }

    fn run_one(
        &self,
        p: &mut dyn Pass,
        m: &mut Module,
        group: Option<(&'static str, usize)>,
        report: &mut PipelineReport,
        dump_index: &mut usize,
    ) -> Result<bool, Diagnostics> {
        let name = p.name();
        if self.skip.iter().any(|s| s == name) {
            return Ok(false);
        }
        let instrs_before = m.instr_count();
        let t = Instant::now();
        let changed = p.run(m, &mut report.context).map_err(|d| {
            let mut ds = Diagnostics::new();
            ds.push(d.with_help(format!("raised by pass `{name}`; skip it with `--skip {name}`")));
            ds
        })?;
        let wall = t.elapsed();
        report.runs.push(PassRun {
            pass: name,
            group,
            wall,
            instrs_before,
            instrs_after: m.instr_count(),
            changed,
        });
        if changed && self.verify_each {
            let mut diags = hlo_check::diagnose(m, None);
            if diags.has_errors() {
                let mut out = Diagnostics::new();
                out.push(
                    Diagnostic::error(
                        None,
                        format!("pass `{name}` left an invalid module (this is a compiler bug)"),
                    )
                    .with_help(format!("skip it with `--skip {name}`")),
                );
                out.extend(std::mem::take(&mut diags));
                return Err(out);
            }
        }
        if let Some(d) = &self.dump
            && d.after.iter().any(|a| a == "all" || a == name)
        {
            *dump_index += 1;
            let file = d.dir.join(format!("{:03}.after-{name}.hlo", *dump_index));
            let text = hlo_ir::text::print(m);
            hlo_ir::atomic::write(&file, text.as_bytes()).map_err(|e| {
                Diagnostics::from(Diagnostic::error(
                    None,
                    format!("cannot write dump {}: {e}", file.display()),
                ))
            })?;
        }
        Ok(changed)
    }
}
