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

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

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
}

impl Outcome {
    fn error_pct(&self) -> Option<f64> {
        self.predicted.map(|p| 100.0 * (p - self.published) / self.published)
    }

    /// Within 15% of the figure; a figure that is an upper bound is met at or below it
    /// and within 25%.
    fn verdict(&self) -> &'static str {
        let Some(e) = self.error_pct() else { return "-" };
        let ok = if self.upper_bound { (-25.0..=0.0).contains(&e) } else { e.abs() <= 15.0 };
        if ok { "ok" } else { "off" }
    }
}

fn project_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The row with the fields of its `same_as` row it does not set itself.
fn resolve(rows: &[Value], row: &Value) -> Value {
    let mut r = row.clone();
    if let Some(base) = row["same_as"].as_str().and_then(|b| rows.iter().find(|x| x["name"] == b))
        && let (Some(dst), Some(src)) = (r.as_object_mut(), base.as_object())
    {
        for (k, v) in src {
            dst.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    r
}

/// FNV-1a: the cache key of a generated program (generator source and row).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

pub fn validate(a: &ValidateArgs) -> ExitCode {
    match run(a) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: &ValidateArgs) -> Result<ExitCode, String> {
    let rows_path =
        a.rows.clone().unwrap_or_else(|| project_dir().join("../shared/tpu-published/rows.json"));
    let text = std::fs::read_to_string(&rows_path)
        .map_err(|e| format!("cannot read `{}`: {e}", rows_path.display()))?;
    let rows: Vec<Value> = serde_json::from_str(&text)
        .map_err(|e| format!("`{}` is not a JSON list of rows: {e}", rows_path.display()))?;
    for name in &a.only {
        if !rows.iter().any(|r| r["name"] == name.as_str()) {
            return Err(format!("no row named `{name}` in `{}`", rows_path.display()));
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
    std::fs::create_dir_all(&cache)
        .map_err(|e| format!("cannot create `{}`: {e}", cache.display()))?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find hloc itself: {e}"))?;

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
        };
        eprintln!("{name}: building the program ...");
        match predict(&row, &python, &generator, &gen_src, &cache, &exe) {
            Ok((value, wall, rss, note)) => {
                o.predicted = Some(value);
                o.wall_s = Some(wall);
                o.peak_rss = rss;
                o.note = note;
            }
            Err(e) if o.stretch => o.note = format!("stretch row not predicted: {e}"),
            Err(e) => o.note = format!("failed: {e}"),
        }
        if o.stretch && o.predicted.is_some() {
            o.note = format!("stretch; {}", o.note);
        }
        out.push(o);
    }
    print_table(&out, a.json);
    let failed = out.iter().any(|o| o.note.starts_with("failed"));
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// The row's metric from a simulated step, the simulation's wall time and peak memory,
/// and a note (HBM verdict).
fn predict(
    row: &Value,
    python: &Path,
    generator: &Path,
    gen_src: &[u8],
    cache: &Path,
    exe: &Path,
) -> Result<(f64, f64, Option<u64>, String), String> {
    let name = row["name"].as_str().unwrap_or("row");
    let row_text = serde_json::to_string(row).unwrap_or_default();
    let key = fnv(&[gen_src, row_text.as_bytes()].concat());
    let hlo = cache.join(format!("{name}-{key:016x}.hlo"));
    let meta_path = cache.join(format!("{name}-{key:016x}.json"));
    if !(hlo.exists() && meta_path.exists()) {
        let run = Command::new(python)
            .arg(generator)
            .arg(&hlo)
            .arg("--config")
            .arg(&row_text)
            .arg("--meta")
            .arg(&meta_path)
            .output()
            .map_err(|e| format!("cannot run `{}`: {e}", python.display()))?;
        if !run.status.success() {
            // The exception's own line (Python prints it last, JAX a note after it).
            let err = String::from_utf8_lossy(&run.stderr);
            let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
            let why = lines
                .iter()
                .rev()
                .find(|l| !l.starts_with(' ') && (l.contains("Error") || l.starts_with("row ")))
                .or(lines.last())
                .copied()
                .unwrap_or("");
            return Err(format!("the model generator failed: {why}"));
        }
    }
    let meta: Value = serde_json::from_str(
        &std::fs::read_to_string(&meta_path).map_err(|e| format!("generator metadata: {e}"))?,
    )
    .map_err(|e| format!("generator metadata: {e}"))?;
    let devices = meta["devices"].as_u64().ok_or("generator metadata without `devices`")?;
    let flops = meta["model_flops_per_device"].as_f64().ok_or("metadata without FLOPs")?;
    let chip = row["chip"].as_str().ok_or("row without `chip`")?;
    let slices = meta["slices"].as_u64().unwrap_or(1);
    let t = Instant::now();
    let run = Command::new(exe)
        .arg("compile")
        .arg(&hlo)
        .arg("--chips")
        .arg(devices.to_string())
        .arg("--slices")
        .arg(slices.to_string())
        .arg("--config")
        .arg(chip)
        .arg("--model-flops")
        .arg(format!("{flops}"))
        .arg("--json")
        .output()
        .map_err(|e| format!("cannot run hloc compile: {e}"))?;
    let wall = t.elapsed().as_secs_f64();
    if !run.status.success() {
        let err = String::from_utf8_lossy(&run.stderr);
        return Err(format!("hloc compile: {}", err.lines().next().unwrap_or("")));
    }
    let report: Value = serde_json::from_slice(&run.stdout)
        .map_err(|e| format!("hloc compile printed no JSON report: {e}"))?;
    let step_s = report["step_time_us"].as_f64().ok_or("report without a step time")? * 1e-6;
    let value = match row["metric"].as_str() {
        Some("tflops_per_chip") => flops / step_s / 1e12,
        Some("step_ms") => step_s * 1e3,
        Some("mfu_pct") => report["mfu_pct"].as_f64().ok_or("report without MFU")?,
        other => return Err(format!("unknown metric {other:?}")),
    };
    let note = match (report["hbm_fits"].as_bool(), report["hbm_peak_bytes"].as_u64()) {
        (Some(true), _) => "fits in HBM".to_string(),
        (Some(false), Some(p)) => format!(
            "HBM peak {} exceeds the chip's {}",
            hlo_ir::tensor::format_bytes(p),
            hlo_ir::tensor::format_bytes(report["hbm_capacity_bytes"].as_u64().unwrap_or(0))
        ),
        _ => String::new(),
    };
    Ok((value, wall, report["peak_rss_bytes"].as_u64(), note))
}

fn print_table(rows: &[Outcome], json: bool) {
    // Mean and max |error| of the single-slice rows, and of the stretch rows apart.
    let errors = |stretch: bool| -> Vec<f64> {
        rows.iter()
            .filter(|o| o.stretch == stretch)
            .filter_map(|o| o.error_pct())
            .map(f64::abs)
            .collect()
    };
    let summary = |e: &[f64]| {
        (e.iter().sum::<f64>() / e.len().max(1) as f64, e.iter().copied().fold(0f64, f64::max))
    };
    let (scored, stretched) = (errors(false), errors(true));
    let ((mean, max), (s_mean, s_max)) = (summary(&scored), summary(&stretched));
    if json {
        let v: Vec<Value> = rows
            .iter()
            .map(|o| {
                serde_json::json!({
                    "row": o.name, "chips": o.chips, "chip": o.chip, "metric": o.metric,
                    "predicted": o.predicted, "published": o.published,
                    "error_pct": o.error_pct(), "upper_bound": o.upper_bound,
                    "verdict": o.verdict(), "wall_s": o.wall_s,
                    "peak_rss_bytes": o.peak_rss, "note": o.note,
                })
            })
            .collect();
        let all = serde_json::json!({
            "rows": v, "mean_abs_error_pct": mean, "max_abs_error_pct": max,
            "stretch_mean_abs_error_pct": s_mean, "stretch_max_abs_error_pct": s_max,
        });
        println!("{}", serde_json::to_string_pretty(&all).unwrap_or_default());
        return;
    }
    println!(
        "{:<32} {:>5} {:<4} {:<16} {:>10} {:>10} {:>8} {:<4} {:>8} {:>9}  note",
        "row",
        "chips",
        "chip",
        "metric",
        "predicted",
        "published",
        "error",
        "",
        "sim s",
        "peak RSS"
    );
    for o in rows {
        let f = |x: Option<f64>, p: usize| x.map_or("-".into(), |v| format!("{v:.p$}"));
        println!(
            "{:<32} {:>5} {:<4} {:<16} {:>10} {:>10} {:>8} {:<4} {:>8} {:>9}  {}",
            o.name,
            o.chips,
            o.chip,
            o.metric,
            f(o.predicted, 1),
            format!("{}{:.1}", if o.upper_bound { "<=" } else { "" }, o.published),
            o.error_pct().map_or("-".into(), |e| format!("{e:+.1}%")),
            o.verdict(),
            f(o.wall_s, 1),
            o.peak_rss.map_or("-".into(), hlo_ir::tensor::format_bytes),
            o.note
        );
    }
    if scored.is_empty() {
        println!("no single-slice row predicted");
    } else {
        println!(
            "{} single-slice rows predicted: mean |error| {mean:.1}%, max |error| {max:.1}% (ok: within 15%, or at or below an upper bound and within 25%)",
            scored.len()
        );
    }
    if !stretched.is_empty() {
        println!(
            "{} stretch rows predicted: mean |error| {s_mean:.1}%, max |error| {s_max:.1}%",
            stretched.len()
        );
    }
}
