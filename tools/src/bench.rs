//! `hloc bench parse`: parse+verify throughput on large modules, beside XLA's own parser.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use hlo_tools::error::CliError;

/// The shared folder beside the project (`../shared`), found from the current directory
/// or from this binary's build location.
pub fn shared_dir() -> Option<PathBuf> {
    let candidates = [
        std::env::current_dir().ok().map(|d| d.join("../shared")),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared")),
    ];
    candidates.into_iter().flatten().find(|p| p.join("external-hlo").is_dir())
}

/// The `n` largest `.hlo` files in `dir`.
fn largest(dir: &Path, n: usize) -> Vec<PathBuf> {
    let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "hlo"))
        .filter_map(|e| Some((e.metadata().ok()?.len(), e.path())))
        .collect();
    v.sort_by_key(|x| std::cmp::Reverse(x.0));
    v.into_iter().take(n).map(|x| x.1).collect()
}

/// `src` parsed and structurally verified, deliberately without the checks
/// `hlo_driver::parse` also runs: what XLA's parser does (the parse benchmark), and where
/// `hloc bench jit` starts (its compile times include the checks).
pub(crate) fn parse_verified(src: &str) -> Result<hlo_ir::Module, hlo_ir::Diagnostics> {
    let (m, mut diags) = hlo_ir::text::parse(src);
    if let Some(m) = &m {
        diags.extend(hlo_ir::verify::verify_source(m, src));
    }
    m.filter(|_| !diags.has_errors()).ok_or(diags)
}

/// The median of `v` (the upper one of an even count; the default value when empty): the
/// one median every benchmark table reports.
pub fn median<T: PartialOrd + Copy + Default>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// XLA parser timings from the oracle's Python (`tools/xla_parse_time.py`), if available.
fn xla_times(files: &[PathBuf], repeat: usize) -> Option<Vec<Option<f64>>> {
    let py = hlo_io::oracle::python()?;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("xla_parse_time.py");
    let out = std::process::Command::new(py)
        .arg(script)
        .arg("--repeat")
        .arg(repeat.to_string())
        .args(files)
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "note: XLA timing failed: {}",
            String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")
        );
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Some(text.lines().map(|l| l.trim().parse::<f64>().ok()).collect())
}

pub fn run(files: &[PathBuf], repeat: usize) -> Result<ExitCode, CliError> {
    let files: Vec<PathBuf> = if files.is_empty() {
        match shared_dir() {
            Some(d) => largest(&d.join("external-hlo"), 6),
            None => return Err("no files given and ../shared/external-hlo not found".into()),
        }
    } else {
        files.to_vec()
    };
    let repeat = repeat.max(1);
    let xla = xla_times(&files, repeat.min(3));
    outln!(
        "{:<52} {:>8} {:>8} {:>10} {:>9} {:>10} {:>9} {:>7}",
        "file",
        "MB",
        "instrs",
        "hloc ms",
        "MB/s",
        "XLA ms",
        "XLA MB/s",
        "speedup"
    );
    let mut failed = false;
    let (mut total_bytes, mut total_time) = (0usize, Duration::ZERO);
    for (k, f) in files.iter().enumerate() {
        let src = match std::fs::read_to_string(f) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: cannot read `{}`: {e}", f.display());
                failed = true;
                continue;
            }
        };
        let mut times = Vec::with_capacity(repeat);
        let mut instrs = 0;
        for _ in 0..repeat {
            let t = Instant::now();
            let res = parse_verified(&src);
            times.push(t.elapsed());
            match res {
                Ok(m) => instrs = m.instr_count(),
                Err(d) => {
                    eprint!("{}", d.render(&src, &f.display().to_string(), false));
                    failed = true;
                    break;
                }
            }
        }
        let t = median(times);
        total_bytes += src.len();
        total_time += t;
        let mb = src.len() as f64 / 1e6;
        let ours = t.as_secs_f64();
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let (xla_ms, xla_mbs, speedup) =
            match xla.as_ref().and_then(|x| x.get(k).copied().flatten()) {
                Some(xs) => (
                    format!("{:.1}", xs * 1e3),
                    format!("{:.1}", mb / xs),
                    format!("{:.1}x", xs / ours),
                ),
                None => ("-".into(), "-".into(), "-".into()),
            };
        outln!(
            "{:<52} {:>8.2} {:>8} {:>10.2} {:>9.1} {:>10} {:>9} {:>7}",
            name,
            mb,
            instrs,
            ours * 1e3,
            mb / ours,
            xla_ms,
            xla_mbs,
            speedup
        );
    }
    if total_time > Duration::ZERO {
        outln!(
            "total: {:.2} MB in {:.1} ms = {:.1} MB/s (median of {repeat} runs per file)",
            total_bytes as f64 / 1e6,
            total_time.as_secs_f64() * 1e3,
            total_bytes as f64 / 1e6 / total_time.as_secs_f64()
        );
    }
    if xla.is_none() {
        outln!("(XLA column empty: run `bash ../shared/xla-oracle/setup.sh` or set ORACLE_PYTHON)");
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}
