//! `hloc run`: executes a checked module on `.npz` inputs and writes `.npz` outputs.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use hlo_check::Checked;
use hlo_io::compare::{Tolerance, Tolerances, compare};
use hlo_io::npz;
use hlo_ir::{Diagnostics, Module, Tensor};
use hlo_tools::error::CliError;

/// Which executor runs the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// Native code from the Cranelift JIT (optimized and fused first).
    Jit,
    /// The reference interpreter (the semantic oracle), on the module as written.
    Interp,
    /// The TPU model (optimized first): MXU matmuls in bf16 passes with f32
    /// accumulation, vector work in f32; prints the simulated step time too.
    Tpu,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Jit => "jit",
            Engine::Interp => "interp",
            Engine::Tpu => "tpu",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct RunCli {
    /// The HLO text file, or `-` for standard input.
    pub file: PathBuf,
    /// The inputs: an .npz holding p0..pN in parameter order (bf16 as uint16 bits).
    /// Without it, the parameters get seeded pseudo-random values.
    #[arg(long)]
    pub inputs: Option<PathBuf>,
    /// Seed of the generated inputs (without `--inputs`).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write the inputs used to this .npz (to repeat the run, e.g. on XLA with the oracle).
    #[arg(long)]
    pub save_inputs: Option<PathBuf>,
    /// Write the outputs here (.npz; written to a temporary file, then renamed).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// The executor.
    #[arg(long, value_enum, default_value_t = Engine::Jit)]
    pub engine: Engine,
    /// Run this many times and report the compile time and the median execution time.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// With `--repeat`: print the timings as one JSON object on standard output.
    #[arg(long)]
    pub json: bool,
    /// List the kernels by kind, the time spent in each and the instruction-set path each
    /// took (JIT engine; `HLOC_ISA` caps the instruction set: amx, avx512-bf16, avx512,
    /// avx2 or native).
    #[arg(long)]
    pub stats: bool,
    /// Keep compiled (optimized) programs in this directory across runs (JIT engine).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Compare the outputs with these expected outputs (.npz with o0..oM).
    #[arg(long)]
    pub expect: Option<PathBuf>,
    /// Per-output tolerances from a corpus NAME.json (used with --expect).
    #[arg(long, requires = "expect")]
    pub tolerances: Option<PathBuf>,
    /// TPU engine: the chip (v2, v3, v4, v5e, v5p).
    #[arg(long, default_value = "v4")]
    pub config: String,
    /// TPU engine: MXU precision of f32 matmuls (default: as each dot's operand_precision
    /// says, which is what a TPU does: one bf16 pass unless HIGH/HIGHEST is written).
    #[arg(long, value_enum)]
    pub precision: Option<crate::tpu::PrecisionArg>,
    /// Run SPMD on this many host devices (threads): the module's shardings are
    /// propagated, the module partitioned, and every device runs its shards with
    /// collectives between them (JIT, interpreter, or N chips of the TPU model). Must match the device count
    /// of the module's shardings (`num_partitions`).
    #[arg(long)]
    pub devices: Option<usize>,
    /// Print how many times each piece of front-end and compile work ran (parse, verify,
    /// shape inference, the driver's phases) on standard error.
    #[arg(long)]
    pub time_passes: bool,
}

use crate::bench::median;

/// The module `hloc run` runs: checked, or (for the JIT) shape-polymorphic and only
/// verified, to be specialized to the inputs' shapes and checked then.
enum Loaded {
    Checked(Checked<Module>),
    Polymorphic(Module),
}

impl Loaded {
    fn module(&self) -> &Module {
        match self {
            Loaded::Checked(m) => m,
            Loaded::Polymorphic(m) => m,
        }
    }
}

/// One parse, then either the checks (one verification, one shape inference) or, for a
/// shape-polymorphic module on the JIT, the verifier alone.
fn load(path: &str, src: &str, engine: Engine) -> Result<Loaded, CliError> {
    let (m, mut diags) = hlo_ir::text::parse(src);
    let Some(m) = m.filter(|_| !diags.has_errors()) else {
        return Err(CliError::located(diags, src, path));
    };
    if engine == Engine::Jit && hlo_driver::is_polymorphic(&m) {
        diags.extend(hlo_ir::verify::verify_source(&m, src));
        if diags.has_errors() {
            return Err(CliError::located(diags, src, path));
        }
        crate::report(&diags, src, path);
        return Ok(Loaded::Polymorphic(m));
    }
    match hlo_driver::check(m, Some(src)) {
        Ok(c) => {
            diags.extend(c.warnings().clone());
            crate::report(&diags, src, path);
            Ok(Loaded::Checked(c))
        }
        Err(d) => {
            diags.extend(d);
            diags.sort();
            Err(CliError::located(diags, src, path))
        }
    }
}

/// `hloc run`: exit status 1 also when an output differs from `--expect`.
pub fn run(a: &RunCli) -> Result<ExitCode, CliError> {
    let (path, src) = crate::read_input(&a.file)?;
    let counts = hlo_ir::counters::snapshot();
    let loaded = load(&path, &src, a.engine)?;
    let m = loaded.module();
    if a.engine == Engine::Jit
        && let Some(d) = hlo_runtime::Program::refusal(m)
    {
        return Err(CliError::located(Diagnostics::from(d), &src, &path));
    }
    let code = run_loaded(a, &path, &src, &loaded);
    // The work counts follow the run, or the diagnostics of a run that failed.
    if a.time_passes && matches!(code, Ok(_) | Err(CliError::Located { .. })) {
        let code = code.map_err(crate::reported);
        eprint!("{}", work_counts(&counts));
        return code;
    }
    code
}

/// What the front end and the driver did during this command: how many parses,
/// verifications and shape inference runs, and how many times each driver phase ran.
fn work_counts(before: &std::collections::BTreeMap<&'static str, u64>) -> String {
    let mut out = String::from("work done (runs):\n");
    for (what, n) in hlo_ir::counters::snapshot() {
        let n = n - before.get(what).copied().unwrap_or(0);
        if n > 0 {
            out.push_str(&format!("  {what:<16} {n}\n"));
        }
    }
    out
}

fn run_loaded(a: &RunCli, path: &str, src: &str, loaded: &Loaded) -> Result<ExitCode, CliError> {
    let m = loaded.module();
    let params = m.entry_param_shapes();
    let repeat = a.repeat.max(1);
    let devices = a.devices.filter(|&n| n > 1 || hlo_spmd::device_count(m) > 1);
    if matches!(loaded, Loaded::Polymorphic(_)) && devices.is_some() {
        return Err(CliError::Message(format!(
            "{path}: a shape-polymorphic module runs on one device"
        )));
    }
    let engine: Box<dyn hlo_engine::Engine> = match a.engine {
        Engine::Jit => {
            let rt = match &a.cache_dir {
                Some(d) => hlo_runtime::Runtime::new().with_cache_dir(d),
                None => hlo_runtime::Runtime::new(),
            };
            Box::new(hlo_engine::Jit::cached(Arc::new(rt), path).with_stats(a.stats))
        }
        Engine::Interp => Box::new(hlo_engine::Interp::default()),
        Engine::Tpu => Box::new(crate::tpu::engine_for_run(&a.config, a.precision)?),
    };
    let compile = |checked: &Checked<hlo_ir::Module>| {
        let t = Instant::now();
        let exe = engine
            .compile(checked, devices, &hlo_engine::Options::default())
            .map_err(|e| engine_error(&e, true, a.engine, src, path))?;
        let time = if a.engine == Engine::Jit { exe.compilation().time } else { t.elapsed() };
        Ok::<_, CliError>((exe, time))
    };
    // A module of static shapes compiles from them alone, before its inputs are read or
    // seeded: a refusal (an op the engine lacks, a program too large) comes at once, not
    // after gigabytes of inputs were made.
    let early = match loaded {
        Loaded::Checked(c) => Some(compile(c)?),
        Loaded::Polymorphic(_) => None,
    };
    // Devices hold shards of the global inputs beside them: both must fit before either is
    // made.
    if let Some(plan) = early.as_ref().and_then(|(exe, _)| exe.plan()) {
        plan.check_inputs_fit().map_err(|d| CliError::located(d.into(), src, path))?;
    }
    // Inputs are validated against the entry parameters before anything runs.
    let inputs = match &a.inputs {
        Some(p) if hlo_driver::is_polymorphic(m) => {
            npz::read_npz(p).map_err(|e| e.to_string())?.into_iter().map(|(_, t)| t).collect()
        }
        Some(p) => npz::read_inputs(p, &params).map_err(|e| e.to_string())?,
        None if hlo_driver::is_polymorphic(m) => {
            return Err(CliError::Message(format!(
                "{path}: a shape-polymorphic module needs --inputs (their shapes bind the `?` dimensions)"
            )));
        }
        None => {
            // The TPU model computes its values on the interpreter too.
            let copies = matches!(a.engine, Engine::Interp | Engine::Tpu) && devices.is_none();
            seeded_inputs_fit(m, copies, src, path)?;
            let t =
                hlo_interp::seeded::seeded_inputs(&params, a.seed).map_err(|e| e.to_string())?;
            eprintln!(
                "note: no --inputs: {} parameter{} seeded with --seed {} (floats uniform in [-2, 2), integers in [0, 4) so indices stay in bounds)",
                t.len(),
                if t.len() == 1 { "" } else { "s" },
                a.seed
            );
            t
        }
    };
    if let Some(p) = &a.save_inputs {
        let named: Vec<(String, &Tensor)> =
            inputs.iter().enumerate().map(|(i, t)| (format!("p{i}"), t)).collect();
        let refs: Vec<(&str, &Tensor)> = named.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        npz::write_arrays(p, &refs).map_err(|e| e.to_string())?;
        eprintln!(
            "wrote {} input{} to `{}`",
            inputs.len(),
            if inputs.len() == 1 { "" } else { "s" },
            p.display()
        );
    }
    let expected = match &a.expect {
        // By name (o0..oM), with the bf16-as-uint16 rule, against the entry's outputs.
        Some(p) => Some(npz::read_outputs(p, &m.entry_output_shapes()).map_err(|e| e.to_string())?),
        None => None,
    };
    let tolerances = match &a.tolerances {
        Some(p) => Some(Tolerances::from_case_json(p).map_err(|e| e.to_string())?),
        None => None,
    };
    let (exe, compiled_in) = match (early, loaded) {
        (Some(done), _) => done,
        // The `?` dimensions bound to the inputs' shapes.
        (None, Loaded::Polymorphic(p)) => {
            let shapes: Vec<hlo_ir::Shape> = inputs.iter().map(Tensor::shape).collect();
            match hlo_driver::specialize(p, &shapes) {
                Ok(c) => compile(&c)?,
                Err(d) => return Err(CliError::located(d, src, path)),
            }
        }
        (None, Loaded::Checked(c)) => compile(c)?,
    };
    crate::report_warnings(&exe.compilation().warnings, src, path);
    for line in &exe.compilation().notes {
        eprintln!("{line}");
    }
    let mut compile = compiled_in;
    let t = Instant::now();
    let mut times = Vec::with_capacity(repeat);
    let mut outputs = Vec::new();
    let mut tpu_runs = Vec::new();
    for _ in 0..repeat {
        match exe.execute_into(&inputs, &mut outputs) {
            Ok((time, detail)) => {
                times.push(time);
                if let hlo_engine::Detail::Tpu(runs) = detail {
                    tpu_runs = runs;
                }
            }
            Err(e) => return Err(engine_error(&e, false, a.engine, src, path)),
        }
    }
    let report = exe.report();
    if let Some(plan) = exe.plan() {
        let n = exe.devices();
        // The TPU model's chips: the step split into compute and communication.
        if let (Some(first), Some(module)) = (tpu_runs.first(), exe.program()) {
            let cfg = &first.sim.cfg;
            let text = crate::tpu::chips_report(&tpu_runs, module, cfg, None, false, 0);
            eprint!("{}", text.lines().take(2).map(|l| format!("{l}\n")).collect::<String>());
            compile += t.elapsed();
        }
        let partitioned = &plan.partitioned;
        let collectives: Vec<String> =
            partitioned.collectives.iter().map(|(k, c)| format!("{c} {k}")).collect();
        eprintln!(
            "ran `{path}` on {n} devices with the {} engine: partition+compile {:.2} ms, median execution {:.1} µs over {} run{}; collectives: {}",
            a.engine.name(),
            compile.as_secs_f64() * 1e3,
            median(times.clone()).as_secs_f64() * 1e6,
            times.len(),
            if times.len() == 1 { "" } else { "s" },
            if collectives.is_empty() { "none".to_string() } else { collectives.join(", ") }
        );
        if !partitioned.rematerialized.is_empty() {
            eprintln!(
                "note: computed on replicated operands (no partitioning rule): {}",
                partitioned.rematerialized.join(", ")
            );
        }
        return finish(a, m, &outputs, expected, tolerances, true);
    }
    let exec = median(times.clone());
    if a.json {
        let cache = exe.cache_counts();
        outln!(
            "{}",
            serde_json::json!({
                "file": path,
                "engine": a.engine.name(),
                "compile_ms": compile.as_secs_f64() * 1e3,
                "exec_us_median": exec.as_secs_f64() * 1e6,
                "exec_us_min": times.iter().min().copied().unwrap_or_default().as_secs_f64() * 1e6,
                "repeat": repeat,
                "cache_hits": cache.map(|c| c.0),
                "cache_misses": cache.map(|c| c.1),
            })
        );
    } else {
        for line in report.iter().take(report.len().saturating_sub(1)) {
            eprintln!("{line}");
        }
        if repeat > 1 || a.engine == Engine::Jit {
            eprintln!(
                "ran `{path}` with the {} engine: compile {:.2} ms, median execution {:.1} µs over {repeat} run{}",
                a.engine.name(),
                compile.as_secs_f64() * 1e3,
                exec.as_secs_f64() * 1e6,
                if repeat == 1 { "" } else { "s" }
            );
        } else {
            eprintln!(
                "ran `{path}` with the {} engine in {:.2} ms",
                a.engine.name(),
                exec.as_secs_f64() * 1e3
            );
        }
        if let Some(run) = tpu_runs.first() {
            eprintln!("{}", crate::tpu::run_line(run));
        }
        if let Some(line) = report.last() {
            eprintln!("{line}");
        }
    }
    finish(a, m, &outputs, expected, tolerances, !a.json)
}

/// Seeded inputs must fit the memory budget, and where the interpreter computes the values
/// on one device (`--engine interp`, and `tpu`, which computes on it) together with its
/// copies of them (floats in 4 bytes). Checked before anything is seeded, so that a module
/// too large for this host is refused at once with the sizes, at its largest parameter, not
/// after its inputs were made or by the kernel's out-of-memory killer.
fn seeded_inputs_fit(
    m: &hlo_ir::Module,
    copies: bool,
    src: &str,
    path: &str,
) -> Result<(), CliError> {
    let entry = m.entry();
    let sizes: Vec<(hlo_ir::Span, u64, u64)> = entry
        .params()
        .into_iter()
        .map(|p| {
            let ins = entry.instr(p);
            let native = ins.shape.as_array().and_then(|a| {
                let n = a.static_dims()?.iter().try_fold(1u64, |n, &d| n.checked_mul(d))?;
                n.checked_mul(hlo_ir::tensor::elem_size(a.elem).ok()? as u64)
            });
            let copy = if copies { hlo_interp::shape_bytes(&ins.shape) } else { Some(0) };
            (ins.span, native.unwrap_or(u64::MAX), copy.unwrap_or(u64::MAX))
        })
        .collect();
    let native = sizes.iter().fold(0u64, |a, s| a.saturating_add(s.1));
    let copied = sizes.iter().fold(0u64, |a, s| a.saturating_add(s.2));
    let budget = hlo_interp::default_memory_budget();
    let need = native.saturating_add(copied);
    if need <= budget {
        return Ok(());
    }
    let format = hlo_ir::tensor::format_bytes;
    // The first of the largest (`max_by_key` keeps the last of equals).
    let span =
        sizes.iter().rev().max_by_key(|s| s.1.saturating_add(s.2)).map_or(entry.span, |s| s.0);
    let limit = format!(
        "more than the memory budget of {} (16 GiB, or 3/4 of the physical memory if less)",
        format(budget)
    );
    let (message, help) = if copies {
        (
            format!(
                "seeded inputs would take {} and the interpreter's copies of them {}: {} in all, {limit}",
                format(native),
                format(copied),
                format(need)
            ),
            "run it with `--engine jit`, which reads its inputs in place, or on smaller shapes",
        )
    } else {
        (
            format!("seeded inputs would take {}, {limit}", format(native)),
            "give --inputs, or smaller shapes",
        )
    };
    let d = hlo_ir::Diagnostic::error(span, message)
        .with_label("the largest parameter")
        .with_help(help);
    Err(CliError::located(d.into(), src, path))
}

/// An engine's error, at the instruction with its source line where the error knows it (a
/// JIT refusal while `compiling` with a hint naming the engines that run it).
fn engine_error(
    e: &hlo_engine::EngineError,
    compiling: bool,
    engine: Engine,
    src: &str,
    path: &str,
) -> CliError {
    let mut d = e.diagnostics();
    if compiling && engine == Engine::Jit && !matches!(e, hlo_engine::EngineError::Compile(_)) {
        let hint = if e.is_unsupported() {
            "run it with `--engine interp` or `--engine tpu`"
        } else {
            "see `hloc check` and `hloc opt` for this module"
        };
        let first = d.iter().next().cloned();
        let first = first.unwrap_or_else(|| hlo_ir::Diagnostic::error(None, e.to_string()));
        d = Diagnostics::from(first.with_help(hint));
    }
    CliError::located(d, src, path)
}

/// reported rather than failed.
fn finish(
    a: &RunCli,
    m: &hlo_ir::Module,
    outputs: &[Tensor],
    expected: Option<Vec<Tensor>>,
    tolerances: Option<Tolerances>,
    summaries: bool,
) -> Result<ExitCode, CliError> {
    match &a.output {
        Some(p) => {
            npz::write_npz(p, outputs).map_err(|e| e.to_string())?;
            eprintln!(
                "wrote {} output{} to `{}`",
                outputs.len(),
                if outputs.len() == 1 { "" } else { "s" },
                p.display()
            );
        }
        None if summaries => {
            outputs.iter().enumerate().for_each(|(i, t)| outln!("o{i}: {}", summary(t)))
        }
        None => {}
    }
    let Some(expected) = expected else { return Ok(ExitCode::SUCCESS) };
    let bf16 = if a.engine == Engine::Tpu {
        crate::tpu::reduced_precision_matmuls(m, a.precision)
    } else {
        0
    };
    if bf16 > 0 {
        eprintln!(
            "note: {bf16} f32 matmul{} ran in fewer than six bf16 MXU passes; the error against the expected outputs:",
            if bf16 == 1 { "" } else { "s" }
        );
    }
    let mut failed = 0;
    for (i, (got, want)) in outputs.iter().zip(&expected).enumerate() {
        let tol = tolerances
            .as_ref()
            .and_then(|t| t.get(i))
            .unwrap_or_else(|| Tolerance::default_for(want.elem()));
        match compare(got, want, tol) {
            Ok(()) => eprintln!("o{i}: matches (rtol {}, atol {})", tol.rtol, tol.atol),
            Err(_) if bf16 > 0 && got.dims() == want.dims() && got.elem() == want.elem() => {
                eprintln!("o{i}: {}", bf16_error(got, want))
            }
            Err(m) => {
                failed += 1;
                eprintln!("error: o{i}: {m}");
            }
        }
    }
    if bf16 > 0 {
        eprintln!(
            "note: `--precision highest` runs every f32 matmul in six bf16 passes (f32-accurate products), to compare within the f32 tolerances"
        );
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `f32[2,3] = [0.1, 0.2, ...]`: the shape and the first few values.
fn summary(t: &Tensor) -> String {
    const SHOW: usize = 8;
    // Integers exactly (an s64 does not fit an f64), floats as f64.
    let values: Vec<String> = match (t.elem().is_float(), t.to_i128_vec(), t.to_f64_vec()) {
        // Complex as `re+imj` (numpy's spelling), from the (re, im) part pairs.
        _ if t.elem().is_complex() => {
            let part = t.elem_size() / 2;
            let read = |b: &[u8]| {
                if part == 4 {
                    f32::from_le_bytes(b.try_into().expect("4 bytes")) as f64
                } else {
                    f64::from_le_bytes(b.try_into().expect("8 bytes"))
                }
            };
            t.bytes()
                .chunks_exact(2 * part)
                .take(SHOW)
                .map(|c| {
                    let (re, im) = (read(&c[..part]), read(&c[part..]));
                    format!("{re}{}{}j", if im.is_sign_negative() { "-" } else { "+" }, im.abs())
                })
                .collect()
        }
        (false, Ok(v), _) => v.iter().take(SHOW).map(|x| x.to_string()).collect(),
        (_, _, Ok(v)) => v.iter().take(SHOW).map(|x| format!("{x}")).collect(),
        _ => Vec::new(),
    };
    let more = if t.element_count() > SHOW { ", ..." } else { "" };
    format!("{} = [{}{more}]", t.shape(), values.join(", "))
}

/// The error of an output computed with bf16 MXU products: the worst absolute and relative
/// differences and the relative error of the whole tensor (‖got − want‖ / ‖want‖).
fn bf16_error(got: &Tensor, want: &Tensor) -> String {
    let (Ok(g), Ok(w)) = (got.to_f64_vec(), want.to_f64_vec()) else {
        return "differs (values not comparable as numbers)".into();
    };
    let (mut worst_abs, mut worst_rel, mut diff2, mut norm2) = (0f64, 0f64, 0f64, 0f64);
    for (&x, &y) in g.iter().zip(&w) {
        let d = (x - y).abs();
        worst_abs = worst_abs.max(d);
        if y != 0.0 {
            worst_rel = worst_rel.max(d / y.abs());
        }
        diff2 += d * d;
        norm2 += y * y;
    }
    format!(
        "differs by bf16 products: max |diff| {worst_abs:.3e}, max relative {worst_rel:.3e}, relative error of the tensor {:.3e}",
        if norm2 > 0.0 { (diff2 / norm2).sqrt() } else { diff2.sqrt() }
    )
}
