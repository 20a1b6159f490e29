//! `hloc bench jit`: per case our compile time and median execution time on the JIT
//! beside XLA's (measured now, on this machine, with `xla_timings.py`), with ratios; on
//! the corpus or on `../shared/bench` (realistic sizes, inputs regenerated on first use).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use hlo_io::compare::{Tolerances, compare};
use hlo_io::npz;
use hlo_runtime::{CompileOptions, Program, RunOptions, RuntimeError};
use hlo_tools::error::CliError;

use crate::bench_opt::{case_json, corpus_cases};

/// XLA's `(text compile ms, median exec µs)` per case, from `xla_timings.py --json`.
fn xla_timings(shared: &Path, bench: bool, runs: usize) -> Option<BTreeMap<String, (f64, f64)>> {
    let py = hlo_io::oracle::python()?;
    let out_json =
        std::env::temp_dir().join(format!("hloc-xla-timings-{}.json", std::process::id()));
    eprintln!("note: measuring XLA with xla_timings.py (about a minute)...");
    let mut cmd = std::process::Command::new(py);
    cmd.arg(shared.join("xla-oracle/xla_timings.py"))
        .args(["--runs", &runs.to_string(), "--json"])
        .arg(&out_json);
    if bench {
        cmd.args(["--set", "bench", "--cases-file"]).arg(shared.join("xla-oracle/bench_cases.py"));
    }
    let ok = cmd.stdout(std::process::Stdio::null()).status().ok()?.success();
    if !ok {
        eprintln!("note: xla_timings.py failed; the XLA columns stay empty");
        return None;
    }
    let text = std::fs::read_to_string(&out_json).ok()?;
    let _ = std::fs::remove_file(&out_json);
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some(
        v.get("rows")?
            .as_array()?
            .iter()
            .filter_map(|r| {
                let name = r.get("case")?.as_str()?.to_string();
                // From the HLO text when measured; else the compile of JAX's own lowering.
                let text = r
                    .get("text_compile_ms")
                    .and_then(|x| x.as_f64())
                    .or_else(|| r.get("compile_ms").and_then(|x| x.as_f64()))
                    .unwrap_or(f64::NAN);
                let exec = r.get("exec_us_median").and_then(|x| x.as_f64()).unwrap_or(f64::NAN);
                Some((name, (text, exec)))
            })
            .collect(),
    )
}

/// `../shared/bench` with its inputs and XLA's outputs, in `target/bench-inputs`.
fn bench_dir(shared: &Path) -> Option<PathBuf> {
    hlo_io::oracle::bench_inputs(
        shared,
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench-inputs"),
    )
}

use crate::bench::median;

/// One case of one measurement: our median execution time and XLA's (when measured).
#[derive(Clone, Debug)]
pub struct Timing {
    pub case: String,
    pub ours_us: f64,
    pub xla_us: Option<f64>,
}

impl Timing {
    fn ratio(&self) -> Option<f64> {
        self.xla_us.map(|x| self.ours_us / x)
    }
}

/// `runs` whole measurements (ours and XLA's, one after the other, each its table); with
/// more than one, the ratio of every case in each run and their median. With `json`, the
/// per-case medians over the runs (ours, XLA's, the ratio) also go to that file.
pub fn jit(
    shared: &Path,
    bench: bool,
    measure_xla: bool,
    repeat: usize,
    runs: usize,
    json: Option<&Path>,
) -> Result<(), CliError> {
    let mut timings: Vec<Vec<Timing>> = Vec::new();
    for r in 0..runs.max(1) {
        if runs > 1 {
            outln!("run {} of {runs}:", r + 1);
        }
        timings.push(jit_once(shared, bench, measure_xla, repeat)?);
    }
    if let Some(path) = json {
        write_json(path, &timings)?;
    }
    let per_run: Vec<Vec<(String, f64)>> = timings
        .iter()
        .map(|r| r.iter().filter_map(|t| Some((t.case.clone(), t.ratio()?))).collect())
        .collect();
    if per_run.len() > 1 && per_run.iter().all(|r| !r.is_empty()) {
        outln!("ratio (ours / XLA's execution time) per run, and the median of the runs:");
        let mut at_or_below = 0;
        for (name, _) in &per_run[0] {
            let v: Vec<f64> = per_run
                .iter()
                .filter_map(|r| r.iter().find(|(n, _)| n == name).map(|x| x.1))
                .collect();
            let runs_text: Vec<String> = v.iter().map(|x| format!("{x:.2}")).collect();
            let median = median(v);
            at_or_below += usize::from(median <= 1.0);
            outln!("{name:<26} {:<24} median {median:.2}x", runs_text.join(" "));
        }
        outln!(
            "{at_or_below} of {} cases at or below XLA's time (median of {} runs)",
            per_run[0].len(),
            per_run.len()
        );
    }
    Ok(())
}

/// The per-case medians over `runs` as JSON: `{"threads": .., "rows": [{"case", "ours_us",
/// "xla_us", "ratio", "ours_runs_us", "xla_runs_us"}]}`, written atomically.
fn write_json(path: &Path, runs: &[Vec<Timing>]) -> Result<(), CliError> {
    let Some(first) = runs.first() else { return Ok(()) };
    let rows: Vec<serde_json::Value> = first
        .iter()
        .map(|t0| {
            let of_case = |f: &dyn Fn(&Timing) -> Option<f64>| -> Vec<f64> {
                runs.iter()
                    .filter_map(|r| r.iter().find(|t| t.case == t0.case).and_then(f))
                    .collect()
            };
            let ours = of_case(&|t| Some(t.ours_us));
            let xla = of_case(&|t| t.xla_us);
            let ratios = of_case(&|t| t.ratio());
            serde_json::json!({
                "case": t0.case,
                "ours_us": median(ours.clone()),
                "xla_us": (!xla.is_empty()).then(|| median(xla.clone())),
                "ratio": (!ratios.is_empty()).then(|| median(ratios)),
                "ours_runs_us": ours,
                "xla_runs_us": xla,
            })
        })
        .collect();
    let v = serde_json::json!({
        "cpus": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "rows": rows,
    });
    let text = serde_json::to_string_pretty(&v).map_err(|e| format!("JSON: {e}"))?;
    hlo_ir::atomic::write(path, text.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(())
}

fn jit_once(
    shared: &Path,
    bench: bool,
    measure_xla: bool,
    repeat: usize,
) -> Result<Vec<Timing>, CliError> {
    let dir = if bench {
        bench_dir(shared).ok_or(
            "the bench inputs are missing and the oracle (~/.cache/xla-oracle-venv, see ../shared/xla-oracle/setup.sh) cannot regenerate them",
        )?
    } else {
        shared.join("corpus")
    };
    let names = corpus_cases(&dir)?;
    let xla = if measure_xla { xla_timings(shared, bench, repeat.max(3)) } else { None };
    outln!(
        "{:<26} {:>10} {:>10} {:>8} {:>12} {:>12} {:>8} {:>8}  {}",
        "case",
        "compile ms",
        "XLA ms",
        "faster",
        "exec µs",
        "XLA µs",
        "ratio",
        "GFLOP/s",
        "outputs"
    );
    let (mut ratios, mut compile_ratios) = (Vec::new(), Vec::new());
    let mut timings = Vec::new();
    for name in names {
        let Ok(src) = std::fs::read_to_string(dir.join(format!("{name}.hlo"))) else { continue };
        let Ok(m) = crate::bench::parse_verified(&src) else { continue };
        if case_json(&dir, &name)
            .and_then(|j| j.get("shardings").cloned())
            .is_some_and(|s| !s.is_null())
            && name.starts_with("sharded")
        {
            continue;
        }
        let Ok(inputs) =
            npz::read_inputs(dir.join(format!("{name}.inputs.npz")), &m.entry_param_shapes())
        else {
            continue;
        };
        let t = Instant::now();
        // The checks run in the compile time, as they did when `Program::compile` ran them.
        let p = match hlo_driver::check(m.clone(), None)
            .map_err(RuntimeError::Compile)
            .and_then(|m| Program::compile(&m, &CompileOptions::default()))
        {
            Ok(p) => p,
            Err(e) => {
                outln!("{name:<26} {e}");
                continue;
            }
        };
        let compile = t.elapsed();
        let mut times = Vec::with_capacity(repeat);
        let mut outs = Vec::new();
        // Outputs land in the previous run's tensors, as in a training loop (XLA's runs
        // likewise take their result buffers from a warm allocator).
        for _ in 0..repeat.max(1) {
            let t = Instant::now();
            if let Err(e) = p.run_with(&inputs, &mut outs, RunOptions::default()) {
                outln!("{name:<26} {e}");
                break;
            }
            times.push(t.elapsed());
        }
        if times.is_empty() {
            continue;
        }
        let exec = median(times);
        let verdict = match (
            npz::read_outputs(dir.join(format!("{name}.outputs.npz")), &m.entry_output_shapes()),
            Tolerances::from_case_json(dir.join(format!("{name}.json"))),
        ) {
            (Ok(want), Ok(tols)) => {
                let bad = outs
                    .iter()
                    .zip(&want)
                    .enumerate()
                    .filter(|(i, (g, w))| tols.get(*i).is_none_or(|t| compare(g, w, t).is_err()))
                    .count();
                if bad == 0 { "match XLA".to_string() } else { format!("{bad} differ") }
            }
            _ => "-".into(),
        };
        let (xc, xe) =
            xla.as_ref().and_then(|x| x.get(&name)).copied().unwrap_or((f64::NAN, f64::NAN));
        let (cms, eus) = (compile.as_secs_f64() * 1e3, exec.as_secs_f64() * 1e6);
        if xe.is_finite() {
            ratios.push((name.clone(), eus / xe));
        }
        timings.push(Timing {
            case: name.clone(),
            ours_us: eus,
            xla_us: xe.is_finite().then_some(xe),
        });
        if xc.is_finite() {
            compile_ratios.push(xc / cms);
        }
        // XLA's cost analysis of the case (flops), over our execution time.
        let flops =
            case_json(&dir, &name).and_then(|j| j.get("xla_cost_analysis")?.get("flops")?.as_f64());
        let gflops = flops.map_or_else(
            || format!("{:>8}", "-"),
            |f| format!("{:>8.1}", f / exec.as_secs_f64() / 1e9),
        );
        outln!(
            "{name:<26} {cms:>10.2} {} {} {eus:>12.1} {} {} {gflops}  {verdict}",
            if xc.is_finite() { format!("{xc:>10.1}") } else { format!("{:>10}", "-") },
            if xc.is_finite() { format!("{:>7.1}x", xc / cms) } else { format!("{:>8}", "-") },
            if xe.is_finite() { format!("{xe:>12.1}") } else { format!("{:>12}", "-") },
            if xe.is_finite() { format!("{:>7.2}x", eus / xe) } else { format!("{:>8}", "-") },
        );
    }
    if !ratios.is_empty() && !compile_ratios.is_empty() {
        let geo = |v: &[f64]| (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp();
        let exec: Vec<f64> = ratios.iter().map(|r| r.1).collect();
        let train: Vec<f64> =
            ratios.iter().filter(|r| r.0.starts_with("train_")).map(|r| r.1).collect();
        outln!(
            "compile: {:.0}x faster than XLA (geometric mean; slowest case {:.1}x); execution time / XLA's: geometric mean {:.2}x, train_* worst {:.2}x",
            geo(&compile_ratios),
            compile_ratios.iter().cloned().fold(f64::INFINITY, f64::min),
            geo(&exec),
            train.iter().cloned().fold(0.0, f64::max)
        );
    }
    outln!(
        "(compile: check + optimize + codegen, cold, one process; exec: median of {} runs; XLA: xla_timings.py text_compile_ms / exec_us on this machine now; GFLOP/s: XLA's flop count over our time)",
        repeat.max(1)
    );
    Ok(timings)
}
