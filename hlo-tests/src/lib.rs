//! The golden-file harness: one function per suite turns a case file into the text that
//! is snapshotted. Tests touch the library only through here ("tests are data driven").
//!
//! A case is an `.hlo` file under `cases/<suite>/`. Its first lines may hold directives:
//! `// error-at: LINE:COL` — the first diagnostic must be an error at that position;
//! `// passes: a,b,c` — (suites `opt` and `fusion`) the passes to run instead of the
//! suite's default (`opt`: the default pipeline; `fusion`: `fusion`; `sharding`:
//! `inline-calls,sharding-propagation`);
//! `// mesh: data=4,model=2` — (suite `sharding`) the mesh reports name axes by.
//!
//! Suite `spmd` propagates, partitions and prints the per-device program with its
//! collectives, then runs the case on one device and on every device of the partitioned
//! program (interpreter, seeded inputs) and checks that the outputs agree.

use std::path::{Path, PathBuf};

/// What a suite prints for one case.
pub fn run_case(suite: &str, name: &str, src: &str) -> String {
    match suite {
        "parse" => parse_case(name, src, false),
        "verify" => parse_case(name, src, true),
        "shape" => check_case(name, src, true),
        "dynamic" => check_case(name, src, false),
        "opt" => opt_case(name, src, None),
        "fusion" => opt_case(name, src, Some("fusion")),
        "sharding" => sharding_case(name, src),
        "spmd" => spmd_case(name, src),
        other => format!("unknown suite `{other}`"),
    }
}

/// Parses (and verifies, if asked): canonical text when clean, rendered diagnostics otherwise.
fn parse_case(name: &str, src: &str, verify: bool) -> String {
    let (m, mut diags) = hlo_ir::text::parse(src);
    if let Some(m) = &m
        && verify
    {
        diags.extend(hlo_ir::verify::verify_source(m, src));
    }
    let mut out = diags.render(src, name, false);
    match m {
        Some(m) if !diags.has_errors() => {
            let printed = hlo_ir::text::print(&m);
            // The printed text must be a fixpoint of parse+print.
            let again = hlo_ir::text::parse(&printed).0.map(|m2| hlo_ir::text::print(&m2));
            if again.as_deref() != Some(printed.as_str()) {
                out.push_str("!! printed text is not a fixpoint of parse+print\n");
            }
            out.push_str(&printed);
        }
        _ => out.push_str("-- rejected\n"),
    }
    out
}

/// Runs the checking pipeline (`hloc check`): the rendered diagnostics, or, when the
/// module is clean, the inferred shape of every instruction (`with_shapes`) or `-- accepted`.
fn check_case(name: &str, src: &str, with_shapes: bool) -> String {
    match checked(name, src, |_| hlo_ir::Diagnostics::new()) {
        Ok((m, mut out)) => {
            if with_shapes {
                out.push_str(&inferred_shapes(&m));
            }
            out.push_str("-- accepted\n");
            out
        }
        Err(out) => out,
    }
}

/// Parses `src` and runs the checking pipeline (`hloc check`) and `extra` checks on a
/// module that parsed cleanly: the module and the rendered diagnostics when nothing is an
/// error, else the diagnostics ending in `-- rejected`.
fn checked(
    name: &str,
    src: &str,
    extra: impl FnOnce(&hlo_ir::Module) -> hlo_ir::Diagnostics,
) -> Result<(hlo_ir::Module, String), String> {
    let (m, mut diags) = hlo_ir::text::parse(src);
    if let Some(m) = &m
        && !diags.has_errors()
    {
        diags.extend(hlo_check::diagnose(m, Some(src)));
        diags.extend(extra(m));
    }
    let mut out = diags.render(src, name, false);
    match m {
        Some(m) if !diags.has_errors() => Ok((m, out)),
        _ => {
            out.push_str("-- rejected\n");
            Err(out)
        }
    }
}

/// Optimizes the case with its `// passes:` (or the suite default) and prints the result,
/// the fusion decisions, and whether the interpreter gives bit-identical outputs before
/// and after on seeded inputs.
fn opt_case(name: &str, src: &str, default_passes: Option<&str>) -> String {
    let (original, mut out) = match checked(name, src, |_| hlo_ir::Diagnostics::new()) {
        Ok(x) => x,
        Err(out) => return out,
    };
    let directive = src
        .lines()
        .take_while(|l| l.starts_with("//"))
        .find_map(|l| l.strip_prefix("// passes:"))
        .map(str::trim);
    let pipeline = match directive.or(default_passes) {
        Some("") => hlo_pipeline::Pipeline::new(Vec::new()),
        Some(list) => {
            match hlo_driver::pipeline_of(&list.split(',').map(str::trim).collect::<Vec<_>>()) {
                Ok(p) => p,
                Err(e) => return format!("{out}!! {e}\n"),
            }
        }
        None => hlo_passes::default_pipeline(),
    };
    let Some((m, report)) = run_verified(pipeline, &original, src, name, &mut out, "optimization")
    else {
        return out;
    };
    let printed = hlo_ir::text::print(&m);
    match hlo_check::parse(&printed) {
        Ok(again) if hlo_ir::text::print(&again) == printed => {}
        Ok(_) => out.push_str("!! printed text is not a fixpoint of parse+print\n"),
        Err(d) => out.push_str(&format!(
            "!! printed text does not verify:\n{}",
            d.render(&printed, name, false)
        )),
    }
    out.push_str(&printed);
    let fusion = report
        .context
        .report::<hlo_passes::fusion::decision::FusionLog>()
        .cloned()
        .unwrap_or_default();
    if !fusion.decisions.is_empty() {
        out.push_str("-- fusion decisions\n");
        for d in &fusion.decisions {
            out.push_str(&format!("{}\n", decision_line(d)));
        }
    }
    out.push_str(&interpreter_agreement(&original, &m));
    out
}

/// Propagates shardings (the case's `// passes:`, default `inline-calls,
/// sharding-propagation`) and prints the module, each entry instruction's provenance, and
/// the reshard report; invalid shardings print their diagnostics.
fn sharding_case(name: &str, src: &str) -> String {
    use hlo_spmd::sharding;
    let directive = |key: &str| {
        src.lines()
            .take_while(|l| l.starts_with("//"))
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
    };
    let mesh = match directive("// mesh:").map(sharding::Mesh::parse).transpose() {
        Ok(m) => m,
        Err(e) => return format!("!! bad mesh directive: {e}\n"),
    };
    let (original, mut out) = match checked(name, src, |m| {
        hlo_ir::Diagnostics(match &mesh {
            Some(mesh) => mesh.check(m, Some(src)),
            None => hlo_check::sharding_devices::check(m, Some(src), None),
        })
    }) {
        Ok(x) => x,
        Err(out) => return out,
    };
    let list = directive("// passes:").unwrap_or("inline-calls,sharding-propagation");
    let pipeline =
        match hlo_driver::pipeline_of(&list.split(',').map(str::trim).collect::<Vec<_>>()) {
            Ok(p) => p,
            Err(e) => return format!("{out}!! {e}\n"),
        };
    let Some((m, report)) = run_verified(pipeline, &original, src, name, &mut out, "propagation")
    else {
        return out;
    };
    let printed = hlo_ir::text::print(&m);
    if hlo_check::parse(&printed).is_err() {
        out.push_str("!! printed text does not verify\n");
    }
    out.push_str(&printed);
    out.push_str("\n-- provenance\n");
    if let Some(p) = report.context.report::<hlo_spmd::sharding::Propagation>() {
        for c in m.comps() {
            for i in c.instrs() {
                let Some(origins) = p.origins.get(&i.name) else { continue };
                let o = origins.iter().find(|o| o.rule != "default").unwrap_or(&origins[0]);
                let from = o.from.as_deref().map(|f| format!(" <- {f}")).unwrap_or_default();
                let spec = i.sharding.as_ref().and_then(|s| sharding::Spec::from_ir(s));
                let named = match (&mesh, &spec) {
                    (Some(mesh), Some(s)) if !i.shape.is_tuple() => {
                        mesh.describe(s).map(|d| format!("  {d}")).unwrap_or_default()
                    }
                    _ => String::new(),
                };
                out.push_str(&format!("{}: {}{from} (level {}){named}\n", i.name, o.rule, o.level));
            }
        }
    }
    out.push_str("-- reshard report\n");
    out.push_str(&sharding::reshard::report(&m).render(mesh.as_ref()));
    out
}

/// Propagates and partitions (`spmd-partition`), prints the per-device program and its
/// collectives, and checks the partitioned program on N interpreter devices against the
/// module on one (seeded inputs; products may sum in another order, so floats compare
/// within 1e-5).
fn spmd_case(name: &str, src: &str) -> String {
    use hlo_interp as interp;
    use hlo_interp::seeded;
    use hlo_spmd::{devices, inventory};
    let (original, mut out) = match checked(name, src, |_| hlo_ir::Diagnostics::new()) {
        Ok(x) => x,
        Err(out) => return out,
    };
    let global = match propagated(&original) {
        Ok(g) => g,
        Err(d) => {
            out.push_str(&d.render(src, name, false));
            out.push_str("-- propagation failed\n");
            return out;
        }
    };
    let plan = match devices::plan(&global) {
        Ok(p) => p,
        Err(d) => {
            out.push_str(&hlo_ir::Diagnostics::from(d).render(src, name, false));
            out.push_str("-- partitioning failed\n");
            return out;
        }
    };
    let printed = hlo_ir::text::print(&plan.module);
    if let Err(d) = hlo_check::parse(&printed) {
        out.push_str(&format!(
            "!! the partitioned text does not verify:\n{}",
            d.render(&printed, name, false)
        ));
    }
    out.push_str(&printed);
    out.push_str(&format!(
        "\n-- {} devices: {}\n",
        plan.devices,
        inventory::describe(&inventory::inventory(&plan.module))
    ));
    if !plan.partitioned.rematerialized.is_empty() {
        out.push_str(&format!(
            "-- computed on replicated operands: {}\n",
            plan.partitioned.rematerialized.join(", ")
        ));
    }
    let inputs = match seeded::seeded_inputs(&original.entry_param_shapes(), 7) {
        Ok(i) => i,
        Err(e) => return format!("{out}!! inputs: {e}\n"),
    };
    let one = interp::run(&original, &inputs);
    let many = hlo_devices::run_interp(&plan, &inputs);
    match (one, many) {
        (Ok(a), Ok(b)) => {
            let tol = hlo_io::compare::Tolerance { rtol: 1e-5, atol: 1e-5 };
            let bad: Vec<String> = a
                .iter()
                .zip(&b)
                .enumerate()
                .filter_map(|(i, (x, y))| {
                    hlo_io::compare::compare(y, x, tol).err().map(|e| format!("o{i}: {e}"))
                })
                .collect();
            if bad.is_empty() && a.len() == b.len() {
                out.push_str(&format!(
                    "-- {} devices reproduce the single-device outputs\n",
                    plan.devices
                ));
            } else {
                out.push_str(&format!(
                    "!! the partitioned program differs from the module:\n{}\n",
                    bad.join("\n")
                ));
            }
        }
        (Err(e), _) => out.push_str(&format!("!! single device: {}\n", e.message)),
        (_, Err(e)) => out.push_str(&format!("!! {} devices: {}\n", plan.devices, e.message)),
    }
    out
}

/// Runs `pipeline` with verification after every pass on a copy of `original`; on failure
/// appends the diagnostics and `-- WHAT failed` to `out`.
fn run_verified(
    mut pipeline: hlo_pipeline::Pipeline,
    original: &hlo_ir::Module,
    src: &str,
    name: &str,
    out: &mut String,
    what: &str,
) -> Option<(hlo_ir::Module, hlo_pipeline::PipelineReport)> {
    pipeline.verify_each = true;
    let mut m = original.clone();
    match pipeline.run(&mut m) {
        Ok(r) => Some((m, r)),
        Err(d) => {
            out.push_str(&d.render(src, name, false));
            out.push_str(&format!("-- {what} failed\n"));
            None
        }
    }
}

fn decision_line(d: &hlo_passes::fusion::decision::Decision) -> String {
    use hlo_passes::fusion::decision::Outcome;
    let what = match &d.outcome {
        Outcome::Fused { fusion, kind } => format!("fused into {fusion} ({})", kind.name()),
        Outcome::Refused(r) => format!("refused: {}", r.as_str()),
    };
    format!(
        "{} {} ({}) -> {} ({}): {what}",
        d.pass,
        d.producer,
        d.producer_op.name(),
        d.consumer,
        d.consumer_op.name()
    )
}

/// Runs `pipeline` (verified after every changing pass) on a copy of `m` and round-trips
/// the result through text: the re-parsed optimized module, which must verify and print
/// back to the same text, and the pipeline's report. `name` labels diagnostics.
pub fn optimize_round_trip(
    m: &hlo_ir::Module,
    mut pipeline: hlo_pipeline::Pipeline,
    src: &str,
    name: &str,
) -> Result<(hlo_ir::Module, hlo_pipeline::PipelineReport), String> {
    let mut opt = m.clone();
    pipeline.verify_each = true;
    let report = pipeline.run(&mut opt).map_err(|d| d.render(src, name, false))?;
    let printed = hlo_ir::text::print(&opt);
    let again = hlo_check::parse(&printed).map_err(|d| {
        format!("the optimized module does not verify:\n{}", d.render(&printed, name, false))
    })?;
    if hlo_ir::text::print(&again) != printed {
        return Err("the optimized module's text is not a fixpoint of parse+print".into());
    }
    Ok((again.into_inner(), report))
}

/// Runs both modules on the same seeded inputs; the verdict line.
pub fn interpreter_agreement(before: &hlo_ir::Module, after: &hlo_ir::Module) -> String {
    let inputs = match hlo_interp::seeded::seeded_inputs(&before.entry_param_shapes(), 1) {
        Ok(i) => i,
        Err(e) => return format!("-- interpreter: not run ({e})\n"),
    };
    let a = hlo_interp::run(before, &inputs);
    let b = hlo_interp::run(after, &inputs);
    match (a, b) {
        (Ok(a), Ok(b)) if a == b => format!(
            "-- interpreter: same outputs before and after ({} outputs, seeded inputs)\n",
            a.len()
        ),
        (Ok(a), Ok(b)) => {
            let k = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
            format!("!! interpreter: output {k} differs after optimization\n")
        }
        (Err(e), _) => format!("-- interpreter: the original does not run ({})\n", e.message),
        (_, Err(e)) => format!("!! interpreter: the optimized module fails: {}\n", e.message),
    }
}

/// `computation / name = inferred shape` for every instruction, callees first.
fn inferred_shapes(m: &hlo_ir::Module) -> String {
    use hlo_check::shape_inference::{infer, show};
    let mut out = String::new();
    for comp in m.comps() {
        out.push_str(&format!("{}:\n", comp.name));
        for n in comp.post_order() {
            let shape = match infer(m, comp, n) {
                Ok(s) => show(&s),
                Err(d) => format!("<not inferred: {}>", d.message),
            };
            out.push_str(&format!("  {} = {}\n", comp.instr(n).name, shape));
        }
    }
    out
}

/// The `// error-at: LINE:COL` directive of a case, if any.
pub fn expected_error_at(src: &str) -> Option<(usize, usize)> {
    let line = src
        .lines()
        .take_while(|l| l.starts_with("//"))
        .find_map(|l| l.strip_prefix("// error-at:"))?;
    let (l, c) = line.trim().split_once(':')?;
    Some((l.parse().ok()?, c.parse().ok()?))
}

/// `../shared` beside the project root, located from this crate's manifest directory.
pub fn shared_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

/// The project's root directory (`tools/`, `hlo-tests/`, ...).
pub fn project_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The XLA oracle's Python for a test that compares with real XLA. Without it the test
/// says SKIPPED and returns `None`, except under `CI=true`, where a missing oracle fails
/// the test (CI installs it with `../shared/xla-oracle/setup.sh`; it must never pass
/// without having compared).
pub fn oracle_python(test: &str) -> Option<PathBuf> {
    match hlo_io::oracle::python() {
        Some(p) => Some(p),
        None if std::env::var("CI").is_ok_and(|v| v == "true") => panic!(
            "{test}: the XLA oracle is missing under CI=true (run `bash ../shared/xla-oracle/setup.sh`)"
        ),
        None => {
            println!("SKIPPED {test}: no oracle python (run `bash ../shared/xla-oracle/setup.sh`)");
            None
        }
    }
}

/// XLA flags for the oracle's runs in tests: LLVM's backend at `-O0` without its
/// expensive passes. The HLO passes (the SPMD partitioner, fusion, buffer assignment) and
/// the semantics are untouched; only machine-code optimization is skipped, which is most of
/// an XLA CPU compile. Measured on the decoder FSDP test configuration (2 cores): the
/// generator's 8-device compile 9.2 s -> 5.8 s, a run of `run_hlo.py` 7.4 s -> 4.7 s; the
/// outputs moved by at most 4.8e-6 (absolute), XLA's partitioned module was identical.
pub const ORACLE_XLA_FLAGS: &str =
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true";

/// A command running the oracle's `python` with [`ORACLE_XLA_FLAGS`] added to any
/// `XLA_FLAGS` the environment gives (the oracle's scripts append their own).
pub fn oracle_command(python: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(python);
    let flags = std::env::var("XLA_FLAGS").unwrap_or_default();
    cmd.env("XLA_FLAGS", format!("{flags} {ORACLE_XLA_FLAGS}").trim());
    cmd
}

/// `f` of every job, on one worker thread per core taking the next job as it finishes
/// one; the results in the jobs' order.
pub fn par_map<T: Sync, R: Send>(jobs: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut done: Vec<(usize, R)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(job) = jobs.get(i) else { break mine };
                        mine.push((i, f(job)));
                    }
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("a worker panicked")).collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// The `.hlo` files directly in `dir`, sorted (panics when the directory cannot be read:
/// a test must not pass on a missing `../shared`).
pub fn hlo_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "hlo"))
        .collect();
    v.sort();
    v
}

/// The names of the corpus cases that have inputs (`NAME.inputs.npz`), sorted.
pub fn corpus_case_names() -> Vec<String> {
    let dir = shared_dir().join("corpus");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|e| {
            e.expect("directory entry")
                .file_name()
                .to_str()?
                .strip_suffix(".inputs.npz")
                .map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

/// The modules of a file (lit files with `-split-input-file` hold several).
pub use hlo_ir::text::split_modules;

/// `src` parsed and structurally verified, deliberately not checked: for the tests of the
/// parser, the verifier and the checks themselves (external modules that XLA's own shape
/// inference rejects still parse, verify and print). Everything else enters through
/// `hlo_check::parse` (or `hlo_driver::parse`), which also runs the checks.
pub fn parse_verified(src: &str) -> Result<hlo_ir::Module, hlo_ir::Diagnostics> {
    let (m, mut diags) = hlo_ir::text::parse(src);
    let Some(m) = m else { return Err(diags) };
    diags.extend(hlo_ir::verify::verify_source(&m, src));
    if diags.has_errors() { Err(diags) } else { Ok(m) }
}

/// Outcome of the parse + verify + round-trip check on one module (a test of the parser
/// and the printer: the module is not checked, see [`parse_verified`]).
pub fn check_round_trip(src: &str, name: &str) -> Result<usize, String> {
    let m = parse_verified(src).map_err(|d| d.render(src, name, false))?;
    let printed = hlo_ir::text::print(&m);
    let m2 = parse_verified(&printed).map_err(|d| {
        format!("printed text does not re-parse:\n{}", d.render(&printed, name, false))
    })?;
    let printed2 = hlo_ir::text::print(&m2);
    if printed != printed2 {
        let line = printed.lines().zip(printed2.lines()).position(|(a, b)| a != b).unwrap_or(0);
        return Err(format!(
            "print(parse(x)) is not a fixpoint; first difference at printed line {}:\n  {}\n  {}",
            line + 1,
            printed.lines().nth(line).unwrap_or(""),
            printed2.lines().nth(line).unwrap_or("")
        ));
    }
    if m.instr_count() != m2.instr_count() {
        return Err(format!(
            "instruction count changed from {} to {}",
            m.instr_count(),
            m2.instr_count()
        ));
    }
    Ok(m.instr_count())
}

/// Compares a run's outputs with expected ones under per-output tolerances (a case's
/// `NAME.json`): `Err` lists every output that differs, one line each.
pub fn compare_outputs(
    actual: &[hlo_ir::Tensor],
    expected: &[hlo_ir::Tensor],
    tols: &hlo_io::compare::Tolerances,
) -> Result<(), String> {
    if actual.len() != expected.len() {
        return Err(format!("{} outputs, expected {}", actual.len(), expected.len()));
    }
    let mut errors = Vec::new();
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        let tol = tols.get(i).ok_or_else(|| format!("no tolerance for o{i}"))?;
        if let Err(mismatch) = hlo_io::compare::compare(a, e, tol) {
            errors.push(format!("o{i}: {mismatch}"));
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors.join("\n")) }
}

/// A case file parsed, checked and optimized with the default pipeline (what `hloc
/// compile` and the engines run), or `None` when the checker rejects it.
pub fn optimized_module(file: &Path) -> Option<hlo_ir::Module> {
    let src = std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
    let checked = hlo_driver::parse(&src).ok()?;
    let options = hlo_driver::Options::default().verifying_each(true);
    let compiled = hlo_driver::compile(&checked, &hlo_driver::Host, &options)
        .unwrap_or_else(|e| panic!("the default pipeline fails on {}: {e:?}", file.display()));
    Some(compiled.program)
}

/// An optimized module lowered for the TPU model (the driver's lower phase alone: the
/// module is checked, not optimized again).
pub fn tpu_lowered(
    m: &hlo_ir::Module,
    passes: hlo_tpu::lower::Passes,
) -> Result<hlo_tpu::lower::Lowered, hlo_ir::Diagnostics> {
    let checked = hlo_driver::check(m.clone(), None)?;
    let target = hlo_driver::Tpu::new(hlo_chip::config::TpuConfig::v4(), passes);
    let options = hlo_driver::Options::default().with_optimizer(hlo_driver::Optimizer::Off);
    Ok(hlo_driver::compile(&checked, &target, &options)?.program.lowered)
}

/// `m` (optimized) run on the TPU model: lowered by the driver, then executed.
pub fn tpu_run(
    m: &hlo_ir::Module,
    inputs: &[hlo_ir::Tensor],
    opts: &hlo_tpu::engine::Options,
) -> Result<hlo_tpu::engine::Run, hlo_ir::Diagnostics> {
    let lowered = tpu_lowered(m, opts.passes)?;
    Ok(hlo_tpu::engine::run(m, &lowered, inputs, opts)?)
}

/// `m` (optimized) timed on the TPU model (without values when control flow allows).
pub fn tpu_simulate(
    m: &hlo_ir::Module,
    inputs: Option<&[hlo_ir::Tensor]>,
    opts: &hlo_tpu::engine::Options,
) -> Result<hlo_tpu::engine::Run, hlo_ir::Diagnostics> {
    let lowered = tpu_lowered(m, opts.passes)?;
    Ok(hlo_tpu::engine::simulate(m, &lowered, inputs, opts)?)
}

/// Invariants every TPU-model run must hold: per-op cycles sum to the total, the critical
/// path fits in the step, work takes time, utilizations are percentages, and every
/// kernel's plan fits the chip (cores, MXUs, double-buffered VMEM).
pub fn tpu_report_invariants(name: &str, run: &hlo_tpu::engine::Run) -> Result<(), String> {
    let r = run.sim.report();
    let sum: u64 = r.per_op.iter().map(|o| o.cycles).sum();
    if sum != r.total_cycles {
        return Err(format!("{name}: per-op cycles sum to {sum}, total is {}", r.total_cycles));
    }
    if r.critical_path_cycles > r.total_cycles {
        return Err(format!(
            "{name}: critical path {} longer than the step {}",
            r.critical_path_cycles, r.total_cycles
        ));
    }
    if r.kernels_executed > 0 && r.total_cycles == 0 {
        return Err(format!("{name}: {} kernels in 0 cycles", r.kernels_executed));
    }
    if !(0.0..=100.0).contains(&r.mxu_util_pct) || !(0.0..=100.0).contains(&r.vpu_util_pct) {
        return Err(format!(
            "{name}: utilization out of range: MXU {} VPU {}",
            r.mxu_util_pct, r.vpu_util_pct
        ));
    }
    for (k, p) in &run.sim.kernels {
        if p.cores > run.sim.cfg.cores_per_chip || p.mxus > run.sim.cfg.mxus_per_core {
            return Err(format!(
                "{name}: kernel {} planned on {} cores x {} MXUs",
                k.name, p.cores, p.mxus
            ));
        }
        let vmem: u64 = p.vmem.iter().map(|s| 2 * s.2).sum();
        if vmem > run.sim.cfg.vmem_bytes + 512 * p.vmem.len() as u64 * 2 {
            return Err(format!("{name}: kernel {} needs {vmem} B of VMEM", k.name));
        }
    }
    Ok(())
}

/// `m` with its entry parameters sharded over `devices` devices in a way nobody wrote:
/// even-numbered parameters split along their leading dim, odd ones along their last (so
/// that resharding and every partitioning rule are exercised); scalars replicated.
pub fn shard_params_alternately(m: &hlo_ir::Module, devices: i64) -> hlo_ir::Module {
    let mesh = hlo_spmd::sharding::Mesh { axes: vec![("x".into(), devices)] };
    let mut global = m.clone();
    global.header.num_partitions = Some(devices);
    let entry = global.entry;
    for (k, p) in global.comp(entry).params().into_iter().enumerate() {
        let Some(rank) = global.comp(entry).instr(p).shape.as_array().map(|a| a.dims.len()) else {
            continue;
        };
        if rank == 0 {
            continue;
        }
        let mut dims = vec![Vec::new(); rank];
        dims[if k % 2 == 0 { 0 } else { rank - 1 }] = vec![0];
        global.comp_mut(entry).instr_mut(p).sharding = Some(Box::new(mesh.sharding(&dims).to_ir()));
    }
    global
}

/// The sharded corpus cases.
pub const SHARDED_CASES: [&str; 4] = [
    "sharded_dp_explicit",
    "sharded_matmul_constraint",
    "sharded_mlp_train",
    "sharded_transformer_train",
];

/// A corpus case ready for SPMD runs: the module as written, the module with shardings
/// propagated (`inline-calls,sharding-propagation`, verified), its inputs, XLA's outputs
/// and the per-output tolerances.
pub struct ShardedCase {
    pub module: hlo_ir::Module,
    pub global: hlo_ir::Module,
    pub inputs: Vec<hlo_ir::Tensor>,
    pub expected: Vec<hlo_ir::Tensor>,
    pub tolerances: hlo_io::compare::Tolerances,
}

/// `m` with its calls inlined and its shardings propagated (the driver's propagate phase
/// before partitioning), each pass's result verified.
pub fn propagated(m: &hlo_ir::Module) -> Result<hlo_ir::Module, hlo_ir::Diagnostics> {
    let devices = m
        .header
        .num_partitions
        .filter(|&n| n > 1)
        .map_or_else(|| hlo_spmd::device_count(m).max(1) as usize, |n| n as usize);
    propagated_on(m, devices)
}

/// The driver's propagate phase on `m` for `devices` devices, every pass verified after it
/// ran (`hlo_driver::stop_after` `Phase::Propagate`): the whole program with
/// its shardings propagated, not yet partitioned.
pub fn propagated_on(
    m: &hlo_ir::Module,
    devices: usize,
) -> Result<hlo_ir::Module, hlo_ir::Diagnostics> {
    let checked = hlo_driver::check(m.clone(), None)?;
    let opts = hlo_driver::Options::default().verifying_each(true);
    let phase = hlo_driver::Phase::Propagate;
    Ok(hlo_driver::stop_after(phase, &checked, &hlo_driver::Interpreter, Some(devices), &opts)?
        .program)
}

pub fn sharded_case(name: &str) -> ShardedCase {
    use hlo_io::npz;
    let dir = shared_dir().join("corpus");
    let src = std::fs::read_to_string(dir.join(format!("{name}.hlo")))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let module = hlo_check::parse(&src).unwrap_or_else(|_| panic!("{name} parses"));
    let global = propagated(&module).unwrap_or_else(|_| panic!("{name}: propagation runs"));
    let inputs =
        npz::read_inputs(dir.join(format!("{name}.inputs.npz")), &module.entry_param_shapes())
            .expect("inputs");
    let expected =
        npz::read_outputs(dir.join(format!("{name}.outputs.npz")), &module.entry_output_shapes())
            .expect("outputs");
    let tolerances = hlo_io::compare::Tolerances::from_case_json(dir.join(format!("{name}.json")))
        .expect("tolerances");
    ShardedCase { module: module.into_inner(), global, inputs, expected, tolerances }
}

/// Runs the oracle's `run_hlo.py FILE INPUTS ARGS...` with `python` through
/// `tools/xla_as_printed.py`; returns whether it succeeded, its PASS/FAIL line, and
/// everything it printed (for failure messages). The text runs exactly as written: the
/// oracle's own rewriting of optimized text (fusions to calls, bitcasts, layouts) never
/// applies, so a module XLA cannot compile as printed fails the test.
pub fn run_oracle<S: AsRef<std::ffi::OsStr>>(
    python: &Path,
    file: &Path,
    inputs: &Path,
    args: &[S],
) -> (bool, String, String) {
    let run = oracle_command(python)
        .arg(project_dir().join("tools/xla_as_printed.py"))
        .arg(file)
        .arg(inputs)
        .args(args)
        .output()
        .expect("the oracle runs");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let verdict = stdout
        .lines()
        .find(|l| l.contains("PASS") || l.contains("FAIL"))
        .unwrap_or("(no verdict)")
        .to_string();
    let all = format!("{stdout}{}", String::from_utf8_lossy(&run.stderr));
    (run.status.success(), verdict, all)
}

/// The global shardings of a plan's inputs and outputs as `NAME.json` lists them, for the
/// oracle's `--partitioned` runs.
pub fn plan_shardings(plan: &hlo_spmd::devices::Plan) -> (Vec<String>, Vec<String>) {
    let text = |s: &hlo_spmd::devices::Sharded| {
        let spec = if s.p.is_replicated() {
            hlo_spmd::sharding::Spec::Replicated
        } else {
            hlo_spmd::sharding::Spec::Tiled(s.p.t.clone())
        };
        spec.to_ir().to_string()
    };
    (plan.inputs.iter().map(text).collect(), plan.outputs.iter().map(text).collect())
}

/// A runnable corpus case without annotations, sharded by [`shard_params_alternately`]
/// and propagated (`Err`: why propagation refused it).
pub struct ArbitraryCase {
    pub name: String,
    pub module: hlo_ir::Module,
    pub global: Result<hlo_ir::Module, String>,
}

/// Every runnable corpus case that carries no sharding, sharded over `devices` devices in
/// a way nobody wrote, with its shardings propagated.
pub fn alternately_sharded_corpus(devices: i64) -> Vec<ArbitraryCase> {
    let dir = shared_dir().join("corpus");
    let mut out = Vec::new();
    for name in corpus_case_names() {
        let Ok(src) = std::fs::read_to_string(dir.join(format!("{name}.hlo"))) else { continue };
        let Ok(module) = hlo_check::parse(&src) else { continue };
        if module.entry().instrs().any(|i| i.sharding.is_some()) {
            continue;
        }
        let sharded = shard_params_alternately(&module, devices);
        let global = propagated_on(&sharded, devices as usize)
            .map_err(|d| d.iter().next().map_or("?".into(), |d| d.message.clone()));
        out.push(ArbitraryCase { name, module: module.into_inner(), global });
    }
    out
}

/// Seeded inputs for `m`, its outputs on the interpreter (one device) and the case's
/// tolerances; `None` when either cannot be had.
pub fn seeded_reference(
    name: &str,
    m: &hlo_ir::Module,
) -> Option<(Vec<hlo_ir::Tensor>, Vec<hlo_ir::Tensor>, hlo_io::compare::Tolerances)> {
    let inputs = hlo_interp::seeded::seeded_inputs(&m.entry_param_shapes(), 3).ok()?;
    let expected = hlo_interp::run(m, &inputs).ok()?;
    let tols = hlo_io::compare::Tolerances::from_case_json(
        shared_dir().join(format!("corpus/{name}.json")),
    )
    .expect("tolerances");
    Some((inputs, expected, tols))
}

/// Our partitioned program's collectives beside XLA's partitioned program of the same
/// module: the printed comparison, and an error when ours move more bytes per device.
pub fn collectives_beside_xla(
    name: &str,
    ours: &hlo_ir::Module,
    xla: &hlo_ir::Module,
) -> (String, Result<(), String>) {
    use hlo_spmd::inventory::{describe, inventory};
    let (ours, xla) = (inventory(ours), inventory(xla));
    let total = |v: &[hlo_spmd::inventory::Item]| v.iter().map(|i| i.bytes).sum::<u64>();
    let line = format!(
        "{name}:\n    ours: {} = {} B\n    XLA:  {} = {} B",
        describe(&ours),
        total(&ours),
        describe(&xla),
        total(&xla)
    );
    let verdict = if total(&ours) > total(&xla) {
        Err(format!("{name}: {} B of collectives > XLA's {} B", total(&ours), total(&xla)))
    } else {
        Ok(())
    };
    (line, verdict)
}
