//! `hloc validate`: the TPU model against published measurements on real TPUs.
//!
//! Every row of `rows.json` (`../shared/tpu-published/`: a training step whose speed on
//! real TPU v2/v3/v4 chips was published, with its exact configuration and source) is
//! built as a JAX program by the project's model generators (`tools/models/models.py`,
//! run with the oracle's Python; shapes only, nothing is allocated), lowered with its
//! shardings for the row's chip count, and simulated by `hloc compile --chips N` in a
//! child process (its wall time and peak memory are reported per row). The simulated
//! step becomes the row's metric (TFLOP/s per chip with the source's FLOP count, step
//! time, or MFU) and is printed beside the published figure with the error.
//!
//! Stretch rows (several slices or pods joined by the data-center network) are attempted
//! the same way, the slices passed as `--slices`; when one cannot be built (a
//! parallelism the generators do not express), the table says why and the command still
//! succeeds: only a failing non-stretch row fails it.
//!
//! When the libtpu venv is installed (`tools/models/setup_libtpu.sh`), every row is built
//! as lowered for its TPU topology (multi-slice rows over that many slices), with the
//! Pallas kernels the published run used, and each single-slice row is also compiled
//! ahead of time by XLA's own TPU compiler for the row's topology (`models.py --tpu`), as
//! a reference beside ours: XLA's estimate of the step
//! (`optimal_seconds`, in the row's metric) and its HBM per chip from its own buffer
//! assignment, beside our predicted peak. Compiled programs are cached like the generated
//! ones; a large row takes minutes to compile the first time.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use hlo_tools::error::CliError;
use hlo_tools::generators::{fnv, generate, libtpu_python, project_dir, python_error, resolve};
use serde_json::Value;

#[derive(clap::Args)]
pub struct ValidateArgs {
    /// The published rows (default: ../shared/tpu-published/rows.json beside the project).
    #[arg(long)]
    rows: Option<PathBuf>,
    /// Only these rows (by name; repeatable).
    #[arg(long = "row")]
    only: Vec<String>,
    /// A Python with jax to run the model generators (default: the XLA oracle's venv).
    #[arg(long)]
    python: Option<PathBuf>,
    /// Where generated programs are kept between runs (default: target/validate).
    #[arg(long)]
    cache: Option<PathBuf>,
    /// The table as JSON.
    #[arg(long)]
    json: bool,
    /// The libtpu venv's Python, to compile each single-slice row with XLA's own TPU
    /// compiler as a reference (default: `$HLOC_LIBTPU_VENV/bin/python`, else
    /// `~/.cache/hloc-libtpu-venv/bin/python`, when it exists; install it with
    /// `bash tools/models/setup_libtpu.sh`).
    #[arg(long)]
    tpu_python: Option<PathBuf>,
    /// Leave XLA's TPU compiler out (no XLA TPU columns).
    #[arg(long, conflicts_with = "tpu_python")]
    no_xla_tpu: bool,
}

/// Our simulation of a row's step.
struct Prediction {
    /// The row's metric.
    value: f64,
    /// The simulated step, in seconds.
    step_s: f64,
    /// The simulation's wall time and peak memory.
    wall_s: f64,
    peak_rss: Option<u64>,
    /// The row's FLOPs per chip (its convention), and the MFU of the simulated step.
    model_flops: f64,
    mfu_pct: Option<f64>,
    /// Our peak HBM per chip.
    hbm_peak: Option<u64>,
    /// The HBM verdict.
    note: String,
    /// The Pallas kernel calls of the simulated program (its metadata's
    /// `tpu_custom_calls`).
    pallas_calls: u64,
}

/// XLA's TPU compiler on a row's step (`models.py --tpu`, its `xla_tpu.json`).
#[derive(Default)]
struct XlaTpu {
    /// XLA's estimate of the step (`optimal_seconds`) in the row's metric; `None` when XLA
    /// gives none (zero or negative: unknown).
    value: Option<f64>,
    optimal_s: Option<f64>,
    /// Arguments + outputs - aliased outputs + temporaries, per chip (XLA's buffer
    /// assignment).
    hbm_per_chip: Option<u64>,
    /// XLA's own peak (`peak_memory_in_bytes`) per chip, which can be below the sum above.
    peak_per_chip: Option<u64>,
    compile_s: Option<f64>,
    topology: Option<String>,
    /// Where `program.hlo` and `xla_tpu.json` are.
    dir: Option<PathBuf>,
    /// Why there is no estimate (a skipped row, a failed compilation).
    note: String,
    /// XLA TPU's own program (`program.hlo`) simulated as scheduled by our chip model
    /// (`hloc compile --no-opt` on its devices' slice): the row's metric and the step.
    program: Option<f64>,
    program_step_s: Option<f64>,
    /// Our HBM peak of XLA's program (its own schedule).
    program_hbm: Option<u64>,
}

/// One row's outcome.
struct Outcome {
    name: String,
    chips: u64,
    chip: String,
    metric: String,
    published: f64,
    predicted: Option<f64>,
    upper_bound: bool,
    wall_s: Option<f64>,
    peak_rss: Option<u64>,
    note: String,
    /// Needs several slices or pods (`stretch` in the row).
    stretch: bool,
    /// Our predicted peak HBM per chip.
    hbm_peak: Option<u64>,
    /// XLA's TPU compiler on the same step, when it ran.
    xla: Option<XlaTpu>,
    /// Our simulated step, in seconds.
    step_s: Option<f64>,
}

impl Outcome {
    fn error_pct(&self) -> Option<f64> {
        self.predicted.map(|p| 100.0 * (p - self.published) / self.published)
    }

    /// XLA TPU's estimate against the published figure.
    fn xla_error_pct(&self) -> Option<f64> {
        let v = self.xla.as_ref()?.value?;
        Some(100.0 * (v - self.published) / self.published)
    }

    /// XLA TPU's program, simulated by our model, against the published figure.
    fn program_error_pct(&self) -> Option<f64> {
        let v = self.xla.as_ref()?.program?;
        Some(100.0 * (v - self.published) / self.published)
    }

    /// Our pipeline's step against XLA TPU's program's, both simulated: how far our own
    /// compilation (fusion, partitioning, schedule) is from XLA's.
    fn gap_pct(&self) -> Option<f64> {
        let x = self.xla.as_ref()?.program_step_s?;
        Some(100.0 * (self.step_s? - x) / x)
    }

    /// Within 15% of the figure; a figure that is an upper bound is met at or below it
    /// and not below half of it (rows.json's definition of an upper-bound row).
    fn verdict(&self) -> &'static str {
        let Some(e) = self.error_pct() else { return "-" };
        let ok = if self.upper_bound { (-50.0..=0.0).contains(&e) } else { e.abs() <= 15.0 };
        if ok { "ok" } else { "off" }
    }
}

/// `hloc validate`: exit status 1 when a row that is not a stretch row failed.
pub fn validate(a: &ValidateArgs) -> Result<ExitCode, CliError> {
    let rows_path =
        a.rows.clone().unwrap_or_else(|| project_dir().join("../shared/tpu-published/rows.json"));
    let text =
        std::fs::read_to_string(&rows_path).map_err(|e| CliError::io("read", &rows_path, e))?;
    let rows: Vec<Value> = serde_json::from_str(&text)
        .map_err(|e| format!("`{}` is not a JSON list of rows: {e}", rows_path.display()))?;
    for name in &a.only {
        if !rows.iter().any(|r| r["name"] == name.as_str()) {
            return Err(format!("no row named `{name}` in `{}`", rows_path.display()).into());
        }
    }
    let python =
        a.python.clone().or_else(hlo_io::oracle::python).ok_or(
            "no Python with jax: run `bash ../shared/xla-oracle/setup.sh` or give --python",
        )?;
    let generator = project_dir().join("tools/models/models.py");
    let gen_src = std::fs::read(&generator)
        .map_err(|e| format!("cannot read the model generators `{}`: {e}", generator.display()))?;
    let cache = a.cache.clone().unwrap_or_else(|| project_dir().join("target/validate"));
    std::fs::create_dir_all(&cache).map_err(|e| CliError::io("create", &cache, e))?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find hloc itself: {e}"))?;
    // XLA's TPU compiler: the given Python (which must exist), else the default venv's
    // when it is installed; otherwise the table says once why its columns are empty.
    let tpu_python = match (&a.tpu_python, a.no_xla_tpu) {
        (_, true) => Err("XLA TPU columns off (--no-xla-tpu)".to_string()),
        (Some(p), _) if !p.exists() => {
            return Err(format!("--tpu-python `{}` does not exist", p.display()).into());
        }
        (Some(p), _) => Ok(p.clone()),
        (None, _) => libtpu_python().ok_or_else(|| {
            "XLA TPU columns skipped: no libtpu venv (install it with `bash tools/models/setup_libtpu.sh`, or give --tpu-python)".to_string()
        }),
    };

    let mut out = Vec::new();
    for raw in &rows {
        let name = raw["name"].as_str().unwrap_or("?").to_string();
        if !a.only.is_empty() && !a.only.contains(&name) {
            continue;
        }
        let row = resolve(&rows, raw);
        let mut o = Outcome {
            name: name.clone(),
            chips: row["chips"].as_u64().unwrap_or(0),
            chip: row["chip"].as_str().unwrap_or("?").to_string(),
            metric: row["metric"].as_str().unwrap_or("?").to_string(),
            published: row["published"].as_f64().unwrap_or(f64::NAN),
            predicted: None,
            upper_bound: row["note"].as_str().is_some_and(|n| n.contains("upper bound")),
            wall_s: None,
            peak_rss: None,
            note: String::new(),
            stretch: row.get("stretch").is_some(),
            hbm_peak: None,
            xla: None,
            step_s: None,
        };
        eprintln!("{name}: building the program ...");
        // Every row is lowered for its TPU topology when the libtpu venv is there (a
        // multi-slice row over that many copies of its slice); XLA compiles single slices.
        let lower_for_tpu = tpu_python.as_ref().ok();
        match predict(
            &row,
            &python,
            lower_for_tpu.map(PathBuf::as_path),
            &generator,
            &gen_src,
            &cache,
            &exe,
        ) {
            Ok(p) => {
                o.predicted = Some(p.value);
                o.wall_s = Some(p.wall_s);
                o.peak_rss = p.peak_rss;
                o.hbm_peak = p.hbm_peak;
                o.step_s = Some(p.step_s);
                if let (Ok(tpu), false) = (&tpu_python, o.stretch) {
                    let mut x = xla_tpu(&row, &p, tpu, &generator, &gen_src, &cache);
                    simulate_xla_program(&row, &p, &mut x, &exe);
                    o.xla = Some(x);
                }
                o.note = p.note;
            }
            Err(e) if o.stretch => o.note = format!("stretch row not predicted: {e}"),
            Err(e) => o.note = format!("failed: {e}"),
        }
        if o.stretch && o.predicted.is_some() {
            o.note = format!("stretch; {}", o.note);
        }
        if let Some(x) = o.xla.as_ref().filter(|x| !x.note.is_empty()) {
            o.note = format!(
                "{}{}XLA TPU: {}",
                o.note,
                if o.note.is_empty() { "" } else { "; " },
                x.note
            );
        }
        out.push(o);
    }
    print_table(&out, a.json, tpu_python.as_ref().err().map(String::as_str));
    let failed = out.iter().any(|o| o.note.starts_with("failed"));
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// The name generated files of a row start with in the cache: the row's name and a key
/// of the generators' source and the row.
fn cache_stem(row: &Value, gen_src: &[u8]) -> String {
    let name = row["name"].as_str().unwrap_or("row");
    let row_text = serde_json::to_string(row).unwrap_or_default();
    let key = fnv(&[gen_src, row_text.as_bytes()].concat());
    format!("{name}-{key:016x}")
}

/// A step of `step_s` seconds in the row's metric: the row's FLOPs per chip over the step
/// (TFLOP/s per chip), the step in milliseconds, or MFU, scaled from the MFU of our
/// simulated step (`mfu_at`: its step seconds and MFU; at fixed FLOPs MFU goes as
/// 1 / step).
fn metric_of(
    metric: Option<&str>,
    step_s: f64,
    flops: f64,
    mfu_at: Option<(f64, f64)>,
) -> Result<f64, String> {
    match metric {
        Some("tflops_per_chip") => Ok(flops / step_s / 1e12),
        Some("step_ms") => Ok(step_s * 1e3),
        Some("mfu_pct") => {
            let (at_s, mfu) = mfu_at.ok_or("report without MFU")?;
            Ok(mfu * at_s / step_s)
        }
        other => Err(format!("unknown metric {other:?}")),
    }
}

/// Our prediction of a row: from the step lowered for the row's TPU topology when the
/// libtpu venv is there (`tpu_python`; a multi-slice row over that many slices), which calls the Pallas kernels
/// the published run used (flash and splash attention, megablox) inside `shard_map`s, as
/// MaxText and MaxDiffusion do; else, or when that program cannot be had, from the
/// host-lowered step (attention written out densely), the note saying so.
fn predict(
    row: &Value,
    python: &Path,
    tpu_python: Option<&Path>,
    generator: &Path,
    gen_src: &[u8],
    cache: &Path,
    exe: &Path,
) -> Result<Prediction, String> {
    let stem = cache_stem(row, gen_src);
    let lowered_for_tpu = tpu_python.map(|tpu| {
        let hlo = cache.join(format!("{stem}-tpu-lowered.hlo"));
        let meta = cache.join(format!("{stem}-tpu-lowered.json"));
        let built = generate(tpu, generator, row, &hlo, &meta, &["--tpu", "auto", "--tpu-lowered"]);
        built.and_then(|_| predict_from(row, &hlo, &meta, exe))
    });
    let why_host = match lowered_for_tpu {
        Some(Ok(mut p)) => {
            p.note = match p.pallas_calls {
                0 => format!("{}; lowered for TPU", p.note),
                n => format!("{}; lowered for TPU, {n} Pallas kernel calls", p.note),
            };
            return Ok(p);
        }
        Some(Err(e)) => format!("host-lowered, attention written out (lowered for TPU: {e})"),
        None => "host-lowered, attention written out".to_string(),
    };
    let hlo = cache.join(format!("{stem}.hlo"));
    let meta = cache.join(format!("{stem}.json"));
    generate(python, generator, row, &hlo, &meta, &[])?;
    let mut p = predict_from(row, &hlo, &meta, exe)?;
    p.note = format!("{}; {why_host}", p.note);
    Ok(p)
}

/// `hloc compile --chips N` on a generated program and its metadata: the row's metric
/// from the simulated step, with the simulation's wall time and peak memory, our HBM peak
/// and its verdict.
fn predict_from(
    row: &Value,
    hlo: &Path,
    meta_path: &Path,
    exe: &Path,
) -> Result<Prediction, String> {
    let meta: Value = serde_json::from_str(
        &std::fs::read_to_string(meta_path).map_err(|e| format!("generator metadata: {e}"))?,
    )
    .map_err(|e| format!("generator metadata: {e}"))?;
    let devices = meta["devices"].as_u64().ok_or("generator metadata without `devices`")?;
    let flops = meta["model_flops_per_device"].as_f64().ok_or("metadata without FLOPs")?;
    let chip = row["chip"].as_str().ok_or("row without `chip`")?;
    let slices = meta["slices"].as_u64().unwrap_or(1);
    // A program lowered for TPU v2/v3 has a device per TensorCore (JAX's devices there):
    // each is timed on one core with its share of the chip (`--per-core`).
    let cores_per_device =
        row["chips"].as_u64().filter(|&c| c > 0 && devices > c).map(|c| devices / c);
    let t = Instant::now();
    let mut cmd = Command::new(exe);
    cmd.arg("compile")
        .arg(hlo)
        .arg("--chips")
        .arg(devices.to_string())
        .arg("--slices")
        .arg(slices.to_string())
        .arg("--config")
        .arg(chip)
        .arg("--model-flops")
        .arg(format!("{flops}"))
        .arg("--json");
    if cores_per_device.is_some() {
        cmd.arg("--per-core");
    }
    let run = cmd.output().map_err(|e| format!("cannot run hloc compile: {e}"))?;
    let wall = t.elapsed().as_secs_f64();
    if !run.status.success() {
        let err = String::from_utf8_lossy(&run.stderr);
        return Err(format!("hloc compile: {}", err.lines().next().unwrap_or("")));
    }
    let report: Value = serde_json::from_slice(&run.stdout)
        .map_err(|e| format!("hloc compile printed no JSON report: {e}"))?;
    let step_s = report["step_time_us"].as_f64().ok_or("report without a step time")? * 1e-6;
    let mfu_pct = report["mfu_pct"].as_f64();
    let value = metric_of(row["metric"].as_str(), step_s, flops, mfu_pct.map(|m| (step_s, m)))?;
    let note = match (report["hbm_fits"].as_bool(), report["hbm_peak_bytes"].as_u64()) {
        (Some(true), _) => "fits in HBM".to_string(),
        (Some(false), Some(p)) => format!(
            "HBM peak {} exceeds the chip's {}",
            hlo_ir::tensor::format_bytes(p),
            hlo_ir::tensor::format_bytes(report["hbm_capacity_bytes"].as_u64().unwrap_or(0))
        ),
        _ => String::new(),
    };
    Ok(Prediction {
        value,
        step_s,
        wall_s: wall,
        peak_rss: report["peak_rss_bytes"].as_u64(),
        model_flops: flops,
        mfu_pct,
        hbm_peak: report["hbm_peak_bytes"].as_u64().map(|b| b * cores_per_device.unwrap_or(1)),
        note,
        pallas_calls: meta["tpu_custom_calls"].as_u64().unwrap_or(0),
    })
}

/// XLA's TPU compiler on the row's step (`models.py --tpu auto`, in the libtpu venv, its
/// output cached beside the generated program), its estimate in the row's metric. A
/// failure is a note: XLA is a reference, not the row's verdict.
fn xla_tpu(
    row: &Value,
    ours: &Prediction,
    python: &Path,
    generator: &Path,
    gen_src: &[u8],
    cache: &Path,
) -> XlaTpu {
    let dir = cache.join(format!("{}-xla-tpu", cache_stem(row, gen_src)));
    let report_path = dir.join("xla_tpu.json");
    let failed = |note: String| XlaTpu { note, dir: Some(dir.clone()), ..XlaTpu::default() };
    if !report_path.exists() {
        eprintln!(
            "{}: compiling with XLA's TPU compiler (minutes for a large row; cached) ...",
            row["name"].as_str().unwrap_or("row")
        );
        let run = Command::new(python)
            .arg(generator)
            .arg("--config")
            .arg(serde_json::to_string(row).unwrap_or_default())
            .arg("--tpu")
            .arg("auto")
            .arg("--tpu-out")
            .arg(&dir)
            .output();
        match run {
            Err(e) => return failed(format!("cannot run `{}`: {e}", python.display())),
            // A compilation XLA refused leaves its report (with the error): cached too.
            Ok(r) if !r.status.success() && !report_path.exists() => {
                return failed(format!("models.py --tpu failed: {}", python_error(&r.stderr)));
            }
            Ok(_) => {}
        }
    }
    let report: Value = match std::fs::read_to_string(&report_path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(v) => v,
        Err(e) => return failed(format!("`{}`: {e}", report_path.display())),
    };
    xla_outcome(row, ours, &report, dir)
}

/// XLA TPU's per-chip program simulated as scheduled (`hloc compile program.hlo --no-opt`
/// on the slice of its topology, its devices where XLA's device assignment put them, one
/// TensorCore per device where a chip has two devices), in the row's metric. A failure is
/// a note.
fn simulate_xla_program(row: &Value, ours: &Prediction, x: &mut XlaTpu, exe: &Path) {
    let Some(dir) = x.dir.clone() else { return };
    let program = dir.join("program.hlo");
    let report = dir.join("xla_tpu.json");
    if !program.exists() {
        return;
    }
    let meta: Value = std::fs::read_to_string(&report)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let (chip, shape) = match x.topology.as_deref().and_then(|t| t.split_once(':')) {
        Some((c, s)) => (c.to_string(), s.to_string()),
        None => return,
    };
    let per_core =
        meta["devices"].as_u64().unwrap_or(0) > meta["chips"].as_u64().unwrap_or(u64::MAX);
    let mut cmd = Command::new(exe);
    cmd.arg("compile")
        .arg(&program)
        .arg("--no-opt")
        .arg("--config")
        .arg(&chip)
        .arg("--topology")
        .arg(&shape)
        .arg("--placement")
        .arg(&report)
        .arg("--json");
    if per_core {
        cmd.arg("--per-core");
    }
    let out = match cmd.output() {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            x.note = format!(
                "{}{}its program not simulated: {}",
                x.note,
                if x.note.is_empty() { "" } else { "; " },
                err.lines().next().unwrap_or("")
            );
            return;
        }
        Err(e) => {
            x.note = format!("cannot run hloc compile on its program: {e}");
            return;
        }
    };
    let Ok(v) = serde_json::from_slice::<Value>(&out.stdout) else { return };
    let Some(step_s) = v["step_time_us"].as_f64().map(|us| us * 1e-6) else { return };
    let mfu_at = ours.mfu_pct.map(|m| (ours.step_s, m));
    x.program = metric_of(row["metric"].as_str(), step_s, ours.model_flops, mfu_at).ok();
    x.program_step_s = Some(step_s);
    x.program_hbm = v["hbm_peak_bytes"].as_u64().map(|b| if per_core { b * 2 } else { b });
}

/// XLA's report (`xla_tpu.json`) as a row's outcome: `optimal_seconds` (zero or negative:
/// unknown) in the row's metric, and the HBM per chip of XLA's buffer assignment.
fn xla_outcome(row: &Value, ours: &Prediction, report: &Value, dir: PathBuf) -> XlaTpu {
    let optimal_s = report["cost"]["optimal_seconds"].as_f64();
    // XLA's cost analysis counts a loop's body once (the scanned layers of a decoder): when
    // it counts less than half the row's FLOPs, its estimate leaves most of the step out
    // and is not one of the step.
    let counted = match (
        report["cost"]["flops"].as_f64(),
        report["builder"]["model_flops_per_device"].as_f64(),
    ) {
        (Some(xla), Some(row)) if row > 0.0 => Some(xla / row),
        _ => None,
    };
    let partial = counted.is_some_and(|c| c < 0.5);
    let known = optimal_s.filter(|&s| s > 0.0 && !partial);
    let value = known.and_then(|s| {
        let mfu_at = ours.mfu_pct.map(|m| (ours.step_s, m));
        metric_of(row["metric"].as_str(), s, ours.model_flops, mfu_at).ok()
    });
    let mut note = String::new();
    if let Some(why) = report["skipped"].as_str() {
        note = format!("skipped: {why}");
    } else if let Some(err) = report["error"].as_str() {
        note = format!("compilation failed: {}", err.lines().next().unwrap_or(""));
        if report["memory"]["hbm_per_chip_bytes"].is_u64() {
            note.push_str(" (its HBM: the arguments and the temporaries it asked for)");
        }
    } else if let (true, Some(c)) = (partial, counted) {
        note = format!(
            "no step estimate: its cost analysis counts {:.2}% of the row's FLOPs per device (a loop's body once; optimal_seconds {})",
            100.0 * c,
            report["cost"]["optimal_seconds"]
        );
    } else if known.is_none() {
        note = format!("no step estimate (optimal_seconds {})", report["cost"]["optimal_seconds"]);
    }
    XlaTpu {
        value,
        optimal_s,
        hbm_per_chip: report["memory"]["hbm_per_chip_bytes"].as_u64(),
        peak_per_chip: report["memory"]["peak_memory_in_bytes"]
            .as_u64()
            .map(|p| p * report["cores_per_chip"].as_u64().unwrap_or(1)),
        compile_s: report["compile_s"].as_f64(),
        topology: report["topology"].as_str().map(str::to_string),
        dir: Some(dir),
        note,
        program: None,
        program_step_s: None,
        program_hbm: None,
    }
}

/// The table; `xla_off`: why XLA TPU's columns are empty (no libtpu venv, or turned off).
fn print_table(rows: &[Outcome], json: bool, xla_off: Option<&str>) {
    // Mean and max |error| of the single-slice rows, and of the stretch rows apart.
    // |error| of one figure of the single-slice (or the stretch) rows.
    let errors = |stretch: bool, of: fn(&Outcome) -> Option<f64>| -> Vec<f64> {
        rows.iter().filter(|o| o.stretch == stretch).filter_map(of).map(f64::abs).collect()
    };
    let summary = |e: &[f64]| {
        (e.iter().sum::<f64>() / e.len().max(1) as f64, e.iter().copied().fold(0f64, f64::max))
    };
    let (scored, stretched) = (errors(false, Outcome::error_pct), errors(true, Outcome::error_pct));
    let ((mean, max), (s_mean, s_max)) = (summary(&scored), summary(&stretched));
    let xla_scored = errors(false, Outcome::xla_error_pct);
    let (x_mean, x_max) = summary(&xla_scored);
    if json {
        let v: Vec<Value> = rows
            .iter()
            .map(|o| {
                let x = o.xla.as_ref();
                serde_json::json!({
                    "row": o.name, "chips": o.chips, "chip": o.chip, "metric": o.metric,
                    "predicted": o.predicted, "published": o.published,
                    "error_pct": o.error_pct(), "upper_bound": o.upper_bound,
                    "verdict": o.verdict(), "wall_s": o.wall_s,
                    "peak_rss_bytes": o.peak_rss, "note": o.note,
                    "hbm_peak_bytes": o.hbm_peak,
                    "xla_tpu": x.is_some(),
                    "xla_tpu_predicted": x.and_then(|x| x.value),
                    "xla_tpu_error_pct": o.xla_error_pct(),
                    "xla_tpu_optimal_seconds": x.and_then(|x| x.optimal_s),
                    "xla_tpu_hbm_per_chip_bytes": x.and_then(|x| x.hbm_per_chip),
                    "xla_tpu_peak_memory_per_chip_bytes": x.and_then(|x| x.peak_per_chip),
                    "xla_tpu_compile_s": x.and_then(|x| x.compile_s),
                    "xla_tpu_topology": x.and_then(|x| x.topology.clone()),
                    "xla_tpu_dir": x.and_then(|x| x.dir.as_ref().map(|d| d.display().to_string())),
                    "xla_tpu_note": x.map(|x| x.note.clone()),
                    "xla_program_predicted": x.and_then(|x| x.program),
                    "xla_program_error_pct": o.program_error_pct(),
                    "xla_program_step_s": x.and_then(|x| x.program_step_s),
                    "xla_program_hbm_peak_bytes": x.and_then(|x| x.program_hbm),
                    "pipeline_vs_xla_program_pct": o.gap_pct(),
                })
            })
            .collect();
        let all = serde_json::json!({
            "rows": v, "mean_abs_error_pct": mean, "max_abs_error_pct": max,
            "stretch_mean_abs_error_pct": s_mean, "stretch_max_abs_error_pct": s_max,
            "xla_tpu_skipped": xla_off,
            "xla_tpu_mean_abs_error_pct": (!xla_scored.is_empty()).then_some(x_mean),
            "xla_tpu_max_abs_error_pct": (!xla_scored.is_empty()).then_some(x_max),
        });
        println!("{}", serde_json::to_string_pretty(&all).unwrap_or_default());
        return;
    }
    println!(
        "{:<32} {:>5} {:<4} {:<16} {:>10} {:>10} {:>8} {:<4} {:>8} {:>8} {:>9} {:>8} {:>8} {:>10} {:>10} {:>8} {:>9}  note",
        "row",
        "chips",
        "chip",
        "metric",
        "predicted",
        "published",
        "error",
        "",
        "xla tpu",
        "xla err",
        "xla prog",
        "prog err",
        "vs prog",
        "HBM ours",
        "HBM xla",
        "sim s",
        "peak RSS"
    );
    let bytes = |b: Option<u64>| b.map_or("-".into(), hlo_ir::tensor::format_bytes);
    let pct = |e: Option<f64>| e.map_or("-".into(), |e| format!("{e:+.1}%"));
    for o in rows {
        let f = |x: Option<f64>, p: usize| x.map_or("-".into(), |v| format!("{v:.p$}"));
        let x = o.xla.as_ref();
        println!(
            "{:<32} {:>5} {:<4} {:<16} {:>10} {:>10} {:>8} {:<4} {:>8} {:>8} {:>9} {:>8} {:>8} {:>10} {:>10} {:>8} {:>9}  {}",
            o.name,
            o.chips,
            o.chip,
            o.metric,
            f(o.predicted, 1),
            format!("{}{:.1}", if o.upper_bound { "<=" } else { "" }, o.published),
            pct(o.error_pct()),
            o.verdict(),
            f(x.and_then(|x| x.value), 1),
            pct(o.xla_error_pct()),
            f(x.and_then(|x| x.program), 1),
            pct(o.program_error_pct()),
            pct(o.gap_pct()),
            bytes(o.hbm_peak),
            bytes(x.and_then(|x| x.hbm_per_chip)),
            f(o.wall_s, 1),
            bytes(o.peak_rss),
            o.note
        );
    }
    if scored.is_empty() {
        println!("no single-slice row predicted");
    } else {
        println!(
            "{} single-slice rows predicted: mean |error| {mean:.1}%, max |error| {max:.1}% (ok: within 15%, or at or below an upper bound and not below half of it)",
            scored.len()
        );
    }
    if !stretched.is_empty() {
        println!(
            "{} stretch rows predicted: mean |error| {s_mean:.1}%, max |error| {s_max:.1}%",
            stretched.len()
        );
    }
    let prog = errors(false, Outcome::program_error_pct);
    let gaps: Vec<f64> = rows.iter().filter_map(Outcome::gap_pct).map(f64::abs).collect();
    if !prog.is_empty() {
        let ((p_mean, p_max), (g_mean, g_max)) = (summary(&prog), summary(&gaps));
        println!(
            "XLA TPU's own program simulated as scheduled by our model: {} rows, mean |error| {p_mean:.1}%, max {p_max:.1}%; our pipeline's step against it: mean |difference| {g_mean:.1}%, max {g_max:.1}%",
            prog.len()
        );
    }
    match xla_off {
        Some(why) => println!("{why}"),
        None => println!(
            "XLA TPU (libtpu, ahead of time; its own estimate `optimal_seconds` and buffer assignment, a reference, not the rows): {} single-slice rows estimated{}",
            xla_scored.len(),
            if xla_scored.is_empty() {
                String::new()
            } else {
                format!(", mean |error| {x_mean:.1}%, max |error| {x_max:.1}%")
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(step_s: f64, mfu_pct: Option<f64>) -> Prediction {
        Prediction {
            value: 0.0,
            step_s,
            wall_s: 0.0,
            peak_rss: None,
            model_flops: 2e12,
            mfu_pct,
            hbm_peak: None,
            note: String::new(),
            pallas_calls: 0,
        }
    }

    #[test]
    fn a_step_becomes_the_rows_metric() {
        assert_eq!(metric_of(Some("tflops_per_chip"), 0.5, 2e12, None), Ok(4.0));
        assert_eq!(metric_of(Some("step_ms"), 0.25, 2e12, None), Ok(250.0));
        // MFU goes as 1 / step: half our step is twice our MFU.
        assert_eq!(metric_of(Some("mfu_pct"), 0.5, 2e12, Some((1.0, 40.0))), Ok(80.0));
        assert_eq!(metric_of(Some("mfu_pct"), 1.0, 2e12, Some((1.0, 40.0))), Ok(40.0));
        assert!(metric_of(Some("mfu_pct"), 1.0, 2e12, None).is_err());
        assert!(metric_of(Some("tokens"), 1.0, 2e12, None).is_err());
    }

    #[test]
    fn xla_estimates_convert_and_unknown_ones_are_none() {
        let row = serde_json::json!({"metric": "tflops_per_chip"});
        let report = |opt: f64| {
            serde_json::json!({
                "topology": "v4:2x2x1", "compile_s": 3.5,
                "cost": {"optimal_seconds": opt, "flops": 1e12},
                "memory": {"hbm_per_chip_bytes": 1024u64, "peak_memory_in_bytes": 500u64},
                "cores_per_chip": 2,
            })
        };
        let x = xla_outcome(&row, &ours(1.0, Some(50.0)), &report(0.25), PathBuf::from("d"));
        assert_eq!(x.value, Some(8.0));
        assert_eq!(x.optimal_s, Some(0.25));
        assert_eq!((x.hbm_per_chip, x.peak_per_chip), (Some(1024), Some(1000)));
        assert_eq!(x.compile_s, Some(3.5));
        assert_eq!(x.topology.as_deref(), Some("v4:2x2x1"));
        assert!(x.note.is_empty());
        // Zero or negative: XLA does not know (loops, collectives); printed as "-".
        for opt in [0.0, -1.0] {
            let x = xla_outcome(&row, &ours(1.0, None), &report(opt), PathBuf::from("d"));
            assert_eq!(x.value, None);
            assert!(x.note.contains("no step estimate"), "{}", x.note);
            assert_eq!(x.hbm_per_chip, Some(1024));
        }
        // FLOPs far below the row's: a scanned loop's body counted once.
        let mut scanned = report(0.25);
        scanned["builder"] = serde_json::json!({"model_flops_per_device": 1e14});
        let x = xla_outcome(&row, &ours(1.0, None), &scanned, PathBuf::from("d"));
        assert_eq!((x.value, x.optimal_s), (None, Some(0.25)));
        assert!(x.note.contains("counts 1.00% of the row's FLOPs"), "{}", x.note);
        scanned["builder"] = serde_json::json!({"model_flops_per_device": 1.5e12});
        let x = xla_outcome(&row, &ours(1.0, None), &scanned, PathBuf::from("d"));
        assert_eq!(x.value, Some(8.0));
        assert!(x.note.is_empty(), "{}", x.note);
        let mfu = serde_json::json!({"metric": "mfu_pct"});
        let x = xla_outcome(&mfu, &ours(1.0, Some(30.0)), &report(2.0), PathBuf::from("d"));
        assert_eq!(x.value, Some(15.0));

        let skipped = serde_json::json!({"skipped": "2 slices"});
        let x = xla_outcome(&row, &ours(1.0, None), &skipped, PathBuf::from("d"));
        assert_eq!((x.value, x.hbm_per_chip), (None, None));
        assert_eq!(x.note, "skipped: 2 slices");
        let failed = serde_json::json!({"error": "XlaRuntimeError: RESOURCE_EXHAUSTED\nmore"});
        let x = xla_outcome(&row, &ours(1.0, None), &failed, PathBuf::from("d"));
        assert_eq!(x.note, "compilation failed: XlaRuntimeError: RESOURCE_EXHAUSTED");
    }

    #[test]
    fn the_generators_error_line_is_found_after_libtpus_warnings() {
        let stderr = b"WARNING: could not determine TPU accelerator type\n\
            E0000 common_lib.cc:554] INVALID_ARGUMENT: Error: unexpected worker hostname\n\
            Traceback (most recent call last):\n  File \"models.py\", line 1\n\
            SystemExit: x\nrow big: XLA TPU compilation failed: RESOURCE_EXHAUSTED\n";
        assert_eq!(python_error(stderr), "row big: XLA TPU compilation failed: RESOURCE_EXHAUSTED");
        assert_eq!(python_error(b"ValueError: bad\n  note\n"), "ValueError: bad");
    }
}
