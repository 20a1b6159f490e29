//! XLA as one more engine (`hloc fuzz --xla`), through the oracle's Python: a batch of
//! generated modules is written to a directory, run by `tools/xla_fuzz.py` in one process,
//! and every output compared with the reference interpreter's under the harness's rules.
//!
//! When XLA disagrees, someone is wrong, and it need not be us: XLA CPU has bugs a
//! generator finds. An f64 reference decides: the module with every float type promoted
//! to f64, run by the interpreter. When the interpreter's output is within the type's
//! tolerance of it and XLA's is not, the verdict is "XLA differs, the f64 reference agrees
//! with the interpreter", reported apart from findings. Integer outputs have no such
//! reference; there the JIT (an implementation independent of the interpreter's) agreeing
//! with the interpreter is the evidence, and the case is listed for inspection.

use std::path::{Path, PathBuf};
use std::process::Command;

use hlo_ir::{Shape, Tensor};

use crate::diff::{Engine, compare_all};

/// One module for XLA.
pub struct Case {
    pub seed: u64,
    pub text: String,
    pub inputs: Vec<Tensor>,
    pub reference: Vec<Tensor>,
    /// The generator's tolerance of each output (0: exact).
    pub tolerances: Vec<f64>,
    pub outputs: Vec<Shape>,
    /// The JIT's outputs, when it ran.
    pub jit: Option<Vec<Tensor>>,
}

/// What XLA's run says about one case.
#[derive(Debug)]
pub enum Verdict {
    Agrees,
    /// XLA refused or failed to compile or run the module.
    Error(String),
    /// XLA differs and the evidence says XLA is the one that is wrong.
    XlaDiffers(String),
    /// XLA differs and nothing says it is XLA: a finding.
    Mismatch(String),
}

/// `tools/xla_fuzz.py` in this checkout.
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../xla_fuzz.py")
}

/// Runs `cases` on XLA with `python` and judges each.
pub fn run(python: &Path, cases: &[Case]) -> Result<Vec<Verdict>, String> {
    let dir = std::env::temp_dir().join(format!("hloc-fuzz-xla-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (k, c) in cases.iter().enumerate() {
        std::fs::write(dir.join(format!("{k:06}.hlo")), &c.text).map_err(|e| e.to_string())?;
        let named: Vec<(String, &Tensor)> =
            c.inputs.iter().enumerate().map(|(i, t)| (format!("p{i}"), t)).collect();
        let refs: Vec<(&str, &Tensor)> = named.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        hlo_io_write(&dir.join(format!("{k:06}.inputs.npz")), &refs)?;
    }
    // XLA may crash the whole process on one module: the case it was running is given
    // that result and the script goes on with the rest.
    for _ in 0..=cases.len() {
        let out = Command::new(python)
            .arg(script())
            .arg(&dir)
            .output()
            .map_err(|e| format!("{}: {e}", python.display()))?;
        if out.status.success() {
            break;
        }
        let running =
            (0..cases.len()).map(|k| dir.join(format!("{k:06}.running"))).find(|p| p.exists());
        let Some(running) = running else {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!(
                "xla_fuzz.py failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        };
        std::fs::write(running.with_extension("error"), format!("XLA crashed: {}\n", out.status))
            .map_err(|e| e.to_string())?;
        let _ = std::fs::remove_file(&running);
    }
    let verdicts = cases
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let base = dir.join(format!("{k:06}"));
            if let Ok(e) = std::fs::read_to_string(base.with_extension("error")) {
                return Verdict::Error(e.lines().next().unwrap_or("").to_string());
            }
            match hlo_io::npz::read_outputs(base.with_extension("outputs.npz"), &c.outputs) {
                Ok(xla) => judge(c, &xla),
                Err(e) => Verdict::Error(e.to_string()),
            }
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(verdicts)
}

fn hlo_io_write(path: &Path, arrays: &[(&str, &Tensor)]) -> Result<(), String> {
    hlo_io::npz::write_arrays(path, arrays).map_err(|e| e.to_string())
}

/// XLA's outputs against the reference, and who is wrong when they differ.
fn judge(c: &Case, xla: &[Tensor]) -> Verdict {
    // XLA CPU flushes subnormals as the JIT does (`hlo_runtime`'s fpenv measurement).
    let Err(diff) = compare_all(xla, &c.reference, &c.tolerances, Engine::Jit) else {
        return Verdict::Agrees;
    };
    let jit_agrees = c
        .jit
        .as_ref()
        .is_some_and(|j| compare_all(j, &c.reference, &c.tolerances, Engine::Jit).is_ok());
    match crate::diff::f64_reference(&c.text, &c.inputs) {
        Some(r64) => {
            let ours = distance(&c.reference, &r64);
            let theirs = distance(xla, &r64);
            if theirs > 4.0 * ours && theirs > 0.0 {
                Verdict::XlaDiffers(format!(
                    "{diff}; the f64 reference is {ours:.3e} (relative) from the interpreter, {theirs:.3e} from XLA"
                ))
            } else {
                Verdict::Mismatch(format!(
                    "{diff}; the f64 reference is {ours:.3e} from the interpreter, {theirs:.3e} from XLA"
                ))
            }
        }
        None if jit_agrees => Verdict::XlaDiffers(format!(
            "{diff}; no f64 reference (integers or bit casts); the JIT agrees with the interpreter"
        )),
        None => Verdict::Mismatch(diff),
    }
}

/// The largest relative distance between two output lists (floats; integers and
/// predicates count 1 per differing element); NaN matches NaN, equal infinities match.
fn distance(a: &[Tensor], b: &[Tensor]) -> f64 {
    let mut worst = 0f64;
    for (x, y) in a.iter().zip(b) {
        let (Ok(x), Ok(y)) = (x.to_f64_vec(), y.to_f64_vec()) else { continue };
        let scale = y.iter().filter(|v| v.is_finite()).fold(0f64, |m, v| m.max(v.abs())).max(1e-6);
        for (p, q) in x.iter().zip(&y) {
            let d = if p.is_nan() && q.is_nan() || p == q {
                0.0
            } else if !p.is_finite() || !q.is_finite() {
                f64::INFINITY
            } else {
                (p - q).abs() / scale
            };
            worst = worst.max(d);
        }
    }
    worst
}
