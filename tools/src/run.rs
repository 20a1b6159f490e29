//! `hloc run`: executes a checked module on `.npz` inputs and writes `.npz` outputs.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use hlo_check::Checked;
use hlo_interp as interp;
use hlo_io::compare::{Tolerance, Tolerances, compare};
use hlo_io::npz;
use hlo_ir::{Diagnostics, Module, Tensor};

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
    /// List the kernels by kind and the time spent in each (JIT engine).
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

pub fn run(a: &RunCli) -> ExitCode {
    match run_inner(a) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

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
fn load(path: &str, src: &str, engine: Engine) -> Result<Loaded, ExitCode> {
    let (m, mut diags) = hlo_ir::text::parse(src);
    let Some(m) = m.filter(|_| !diags.has_errors()) else {
        crate::report(&diags, src, path);
        return Err(ExitCode::FAILURE);
    };
    if engine == Engine::Jit && hlo_driver::is_polymorphic(&m) {
        diags.extend(hlo_ir::verify::verify_source(&m, src));
        crate::report(&diags, src, path);
        return if diags.has_errors() {
            Err(ExitCode::FAILURE)
        } else {
            Ok(Loaded::Polymorphic(m))
        };
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
            crate::report(&diags, src, path);
            Err(ExitCode::FAILURE)
        }
    }
}

fn run_inner(a: &RunCli) -> Result<ExitCode, String> {
    let (path, src) = crate::read_input(&a.file)?;
    let counts = hlo_ir::counters::snapshot();
    let loaded = match load(&path, &src, a.engine) {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    let m = loaded.module();
    if a.engine == Engine::Jit
        && let Some(d) = hlo_runtime::Program::refusal(m)
    {
        crate::report(&Diagnostics::from(d), &src, &path);
        return Ok(ExitCode::FAILURE);
    }
    let code = run_loaded(a, &path, &src, &loaded)?;
    if a.time_passes {
        eprint!("{}", work_counts(&counts));
    }
    Ok(code)
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

fn run_loaded(a: &RunCli, path: &str, src: &str, loaded: &Loaded) -> Result<ExitCode, String> {
    let m = loaded.module();
    let params = m.entry_param_shapes();
    // Inputs are validated against the entry parameters before anything runs.
    let inputs = match &a.inputs {
        Some(p) if hlo_driver::is_polymorphic(m) => npz::read_npz(p)
            .map_err(|e| format!("error: {e}"))?
            .into_iter()
            .map(|(_, t)| t)
            .collect(),
        Some(p) => npz::read_inputs(p, &params).map_err(|e| format!("error: {e}"))?,
        None if hlo_driver::is_polymorphic(m) => {
            return Err(format!(
                "error: {path}: a shape-polymorphic module needs --inputs (their shapes bind the `?` dimensions)"
            ));
        }
        None => {
            let t = hlo_interp::seeded::seeded_inputs(&params, a.seed)
                .map_err(|e| format!("error: {e}"))?;
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
        npz::write_arrays(p, &refs).map_err(|e| format!("error: {e}"))?;
        eprintln!(
            "wrote {} input{} to `{}`",
            inputs.len(),
            if inputs.len() == 1 { "" } else { "s" },
            p.display()
        );
    }
    let expected = match &a.expect {
        // By name (o0..oM), with the bf16-as-uint16 rule, against the entry's outputs.
        Some(p) => Some(
            npz::read_outputs(p, &m.entry_output_shapes()).map_err(|e| format!("error: {e}"))?,
        ),
        None => None,
    };
    let tolerances = match &a.tolerances {
        Some(p) => Some(Tolerances::from_case_json(p).map_err(|e| format!("error: {e}"))?),
        None => None,
    };
    let repeat = a.repeat.max(1);
    if let Some(n) = a.devices.filter(|&n| n > 1 || hlo_spmd::device_count(m) > 1) {
        let Loaded::Checked(checked) = loaded else {
            return Err(format!("error: {path}: a shape-polymorphic module runs on one device"));
        };
        return run_spmd(a, path, src, checked, n, &inputs, expected, tolerances);
    }
    let mut times = Vec::with_capacity(repeat);
    let mut compile = Duration::ZERO;
    let mut stats = hlo_runtime::Stats::default();
    let mut outputs = Vec::new();
    let mut cache_line: Option<String> = None;
    let mut cache_json: Option<(u64, u64)> = None;
    match a.engine {
        Engine::Interp => {
            for _ in 0..repeat {
                let start = Instant::now();
                outputs = match interp::run(m, &inputs) {
                    Ok(o) => o,
                    Err(d) => {
                        crate::report(&Diagnostics::from(d), src, path);
                        return Ok(ExitCode::FAILURE);
                    }
                };
                times.push(start.elapsed());
            }
        }
        Engine::Tpu => {
            let Loaded::Checked(checked) = loaded else { unreachable!("only the JIT specializes") };
            let t = Instant::now();
            let (compiled, opts) =
                match crate::tpu::compile_for_run(path, src, checked, &a.config, a.precision)? {
                    Ok(c) => c,
                    Err(code) => return Ok(code),
                };
            compile = t.elapsed();
            for _ in 0..repeat {
                let start = Instant::now();
                match crate::tpu::run_compiled(path, src, &compiled, &inputs, &opts) {
                    Ok((o, line)) => {
                        outputs = o;
                        cache_line = Some(line);
                    }
                    Err(code) => return Ok(code),
                }
                times.push(start.elapsed());
            }
        }
        Engine::Jit => {
            let rt = match &a.cache_dir {
                Some(d) => hlo_runtime::Runtime::new().with_cache_dir(d),
                None => hlo_runtime::Runtime::new(),
            };
            let shapes: Vec<hlo_ir::Shape> = inputs.iter().map(Tensor::shape).collect();
            let mut last = None;
            for i in 0..repeat {
                // Every run looks its program up by shape, as a training loop does.
                let c = match loaded {
                    Loaded::Checked(m) => rt.compile_checked(path, m, &shapes),
                    Loaded::Polymorphic(m) => rt.compile(path, m, &shapes),
                };
                let c = match c {
                    Ok(c) => c,
                    // At the instruction, with its source line, when the error knows it.
                    Err(e) if e.span().is_some() => {
                        let hint = if e.is_unsupported() {
                            "run it with `--engine interp` or `--engine tpu`"
                        } else {
                            "see `hloc check` and `hloc opt` for this module"
                        };
                        crate::report(
                            &Diagnostics::from(
                                hlo_ir::Diagnostic::error(e.span(), e.kind().to_string())
                                    .with_help(hint),
                            ),
                            src,
                            path,
                        );
                        return Ok(ExitCode::FAILURE);
                    }
                    Err(e) => return Err(format!("error: {path}: {e}")),
                };
                if i == 0 {
                    compile = c.program.compile_time;
                    if let Some(miss) = c.outcome.miss() {
                        eprintln!(
                            "compiled `{path}` in {:.2} ms ({})",
                            compile.as_secs_f64() * 1e3,
                            miss.explanation().replace('\n', "; ")
                        );
                    }
                    match &c.disk {
                        Some(hlo_runtime::DiskEvent::Loaded) => {
                            eprintln!("note: loaded the optimized program from the cache directory")
                        }
                        Some(hlo_runtime::DiskEvent::Replaced(why)) => {
                            eprintln!("warning: corrupt cache entry replaced: {why}")
                        }
                        Some(hlo_runtime::DiskEvent::StoreFailed(why)) => {
                            eprintln!("warning: could not store in the cache directory: {why}")
                        }
                        _ => {}
                    }
                }
                let start = Instant::now();
                // Each run writes into the previous run's output tensors.
                let opts = hlo_runtime::RunOptions::default();
                let opts = if a.stats { opts.with_stats(&mut stats) } else { opts };
                c.program
                    .run_with(&inputs, &mut outputs, opts)
                    .map_err(|e| format!("error: {path}: {e}"))?;
                times.push(start.elapsed());
                last = Some(c.program);
            }
            let s = rt.stats();
            cache_line = Some(format!(
                "cache: {} miss{}, {} hit{}, {:.2} ms compiling",
                s.misses,
                if s.misses == 1 { "" } else { "es" },
                s.hits,
                if s.hits == 1 { "" } else { "s" },
                s.compile_time.as_secs_f64() * 1e3
            ));
            cache_json = Some((s.hits, s.misses));
            if let (true, Some(p)) = (a.stats, &last) {
                print_stats(&stats, p);
            }
        }
    }
    let exec = median(times.clone());
    if a.json {
        outln!(
            "{}",
            serde_json::json!({
                "file": path,
                "engine": a.engine.name(),
                "compile_ms": compile.as_secs_f64() * 1e3,
                "exec_us_median": exec.as_secs_f64() * 1e6,
                "exec_us_min": times.iter().min().copied().unwrap_or_default().as_secs_f64() * 1e6,
                "repeat": repeat,
                "cache_hits": cache_json.map(|c| c.0),
                "cache_misses": cache_json.map(|c| c.1),
            })
        );
    } else if repeat > 1 || a.engine == Engine::Jit {
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
    if let (Some(l), false) = (&cache_line, a.json) {
        eprintln!("{l}");
    }
    finish(a, m, &outputs, expected, tolerances, !a.json)
}

/// Writes `outputs` (`-o`) or prints their summaries, then compares them with `expected`
/// under `tolerances`. On the TPU model below HIGHEST precision the products of `m`'s f32
/// matmuls are bf16: the difference from XLA CPU is what the chip would do to the step,
/// reported rather than failed.
fn finish(
    a: &RunCli,
    m: &hlo_ir::Module,
    outputs: &[Tensor],
    expected: Option<Vec<Tensor>>,
    tolerances: Option<Tolerances>,
    summaries: bool,
) -> Result<ExitCode, String> {
    match &a.output {
        Some(p) => {
            npz::write_npz(p, outputs).map_err(|e| format!("error: {e}"))?;
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

/// `hloc run --devices N`: propagate, partition, then every device runs its shards.
#[allow(clippy::too_many_arguments)]
fn run_spmd(
    a: &RunCli,
    path: &str,
    src: &str,
    m: &Checked<Module>,
    n: usize,
    inputs: &[Tensor],
    expected: Option<Vec<Tensor>>,
    tolerances: Option<Tolerances>,
) -> Result<ExitCode, String> {
    let repeat = a.repeat.max(1);
    let mut times = Vec::with_capacity(repeat);
    let t = Instant::now();
    let options = hlo_driver::Options::default().on_devices(Some(n));
    let compile = |target: hlo_driver::Target| match hlo_driver::compile(m, &target, &options) {
        Ok(c) => {
            crate::report_warnings(&c, src, path);
            Ok(c)
        }
        Err(d) => {
            crate::report(&d, src, path);
            Err(ExitCode::FAILURE)
        }
    };
    let (outputs, partitioned, compile) = match a.engine {
        Engine::Interp => {
            let compiled = match compile(hlo_driver::Target::Interpreter) {
                Ok(c) => c,
                Err(code) => return Ok(code),
            };
            let plan = compiled.plan.expect("partitioned on N devices");
            let compile = t.elapsed();
            let mut outs = Vec::new();
            for _ in 0..repeat {
                let start = Instant::now();
                outs = hlo_devices::run_interp(&plan, inputs)
                    .map_err(|d| format!("error: {path}: {}", d.message))?;
                times.push(start.elapsed());
            }
            (outs, plan.partitioned, compile)
        }
        Engine::Tpu => {
            let cfg = crate::tpu::config(&a.config)?;
            let passes = crate::tpu::passes_of(a.precision);
            let target = hlo_driver::Target::Tpu(hlo_driver::TpuTarget::new(cfg.clone(), passes));
            let compiled = match compile(target) {
                Ok(c) => c,
                Err(code) => return Ok(code),
            };
            let opts = hlo_tpu::engine::Options::new(cfg.clone(), passes);
            let plan = compiled.plan.as_ref().expect("partitioned on N devices");
            let lowered = compiled.lowered.as_ref().expect("lowered for a TPU");
            let runs = match hlo_tpu::engine::simulate_chips(
                plan,
                &m.entry_param_shapes(),
                &compiled.module,
                lowered,
                Some(inputs),
                &opts,
            ) {
                Ok(r) => r,
                Err(d) => {
                    crate::report(&Diagnostics::from(d), src, path);
                    return Ok(ExitCode::FAILURE);
                }
            };
            let compile = t.elapsed();
            times.push(compile);
            let outs: Vec<Vec<Tensor>> =
                runs.iter().map(|r| r.outputs.clone().unwrap_or_default()).collect();
            let outs = hlo_spmd::devices::assemble_outputs(plan, &outs)
                .map_err(|d| format!("error: {path}: {}", d.message))?;
            eprint!(
                "{}",
                crate::tpu::chips_report(&runs, &compiled.module, &cfg, None, false, 0)
                    .lines()
                    .take(2)
                    .map(|l| format!("{l}\n"))
                    .collect::<String>()
            );
            (outs, plan.partitioned.clone(), compile)
        }
        Engine::Jit => {
            let prog = match hlo_runtime::SpmdProgram::compile(
                m,
                n,
                &hlo_runtime::CompileOptions::default(),
            ) {
                Ok(p) => p,
                Err(e) => match e.diagnostics() {
                    Some(d) => {
                        crate::report(d, src, path);
                        return Ok(ExitCode::FAILURE);
                    }
                    None => return Err(format!("error: {path}: {e}")),
                },
            };
            let mut outs = Vec::new();
            for _ in 0..repeat {
                let start = Instant::now();
                outs = prog.run(inputs).map_err(|e| format!("error: {path}: {e}"))?;
                times.push(start.elapsed());
            }
            (outs, prog.plan.partitioned.clone(), prog.compile_time)
        }
    };
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
    finish(a, m, &outputs, expected, tolerances, true)
}

/// The kernels by kind with their total time, then the ten slowest kernels.
fn print_stats(stats: &hlo_runtime::Stats, exe: &hlo_runtime::Program) {
    let total: Duration = stats.by_kind.values().map(|v| v.1).sum();
    eprintln!(
        "{} compiled kernels ({} bytes of code), arena {} bytes",
        exe.kernel_count(),
        exe.code_bytes(),
        exe.arena_bytes()
    );
    eprintln!("{:<36} {:>8} {:>12} {:>7}", "kernel kind", "calls", "time µs", "share");
    let mut kinds: Vec<_> = stats.by_kind.iter().collect();
    kinds.sort_by_key(|(_, v)| std::cmp::Reverse(v.1));
    for (k, (calls, t)) in kinds {
        eprintln!(
            "{:<36} {:>8} {:>12.1} {:>6.1}%",
            k.name(),
            calls,
            t.as_secs_f64() * 1e6,
            100.0 * t.as_secs_f64() / total.as_secs_f64().max(1e-12)
        );
    }
    let mut names: Vec<_> = stats.by_name.iter().collect();
    names.sort_by_key(|(_, v)| std::cmp::Reverse(v.2));
    eprintln!("slowest kernels:");
    for (n, (k, calls, t)) in names.into_iter().take(10) {
        eprintln!(
            "  {:<40} {:<28} {:>6} calls {:>10.1} µs",
            n,
            k.name(),
            calls,
            t.as_secs_f64() * 1e6
        );
    }
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
