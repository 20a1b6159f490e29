//! The differential harness: one module on every engine, every result against the
//! reference interpreter's.
//!
//! Engines: the interpreter on the module as written (the reference), the JIT, the TPU
//! model at HIGHEST precision (f32 matmuls in six bf16 passes), the interpreter on the
//! optimized module (`hloc opt`'s pipeline), and the sharded text partitioned on N devices
//! on the interpreter and on the JIT. Each runs in `catch_unwind`: a panic is a finding
//! like a wrong value.
//!
//! # What counts as agreeing
//!
//! - Integers and predicates: the same bits.
//! - A float output the generator marks exact (see the `generator` module doc): the same value,
//!   NaN matching any NaN (XLA does not define NaN payloads: a NaN operand of max, min or
//!   clamp may come back with its bits or as the canonical NaN) and zero matching zero of
//!   either sign (likewise implementation-defined in max/min of ±0).
//! - Other float outputs: within a relative tolerance of the tensor's largest magnitude:
//!   the type's (f64 1e-9, f32 1e-4, f16 5e-3, bf16 4e-2), or the coarsest type an inexact
//!   value passed through on its way (the generator tracks it); infinities of one sign and
//!   NaN where the reference has them.
//! - The JIT runs with FTZ/DAZ, as XLA CPU does (`hlo_runtime`'s `fpenv` module documents
//!   the measurement); the interpreter keeps subnormals. Against a JIT engine a subnormal
//!   reference value matches a zero.
//!
//! An engine may refuse a module with a located error saying what it does not support;
//! refusals are counted by message, not failures.

use std::panic::{AssertUnwindSafe, catch_unwind};

use hlo_check::Checked;
use hlo_ir::{ElemType, Module, Tensor};

use crate::generator::Generated;

/// The engines the harness compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Engine {
    /// The reference interpreter on the module as written.
    Interp,
    /// The Cranelift JIT (optimized module).
    Jit,
    /// The TPU model at HIGHEST precision.
    Tpu,
    /// The interpreter on the module the default optimization pipeline returns.
    Opt,
    /// The sharded module partitioned on N devices, each an interpreter.
    DevicesInterp,
    /// The sharded module partitioned on N devices, each running JIT code.
    DevicesJit,
}

impl Engine {
    /// Every engine but the reference.
    pub const OTHERS: [Engine; 5] =
        [Engine::Jit, Engine::Tpu, Engine::Opt, Engine::DevicesInterp, Engine::DevicesJit];

    pub fn name(self) -> &'static str {
        match self {
            Engine::Interp => "interp",
            Engine::Jit => "jit",
            Engine::Tpu => "tpu",
            Engine::Opt => "opt+interp",
            Engine::DevicesInterp => "devices-interp",
            Engine::DevicesJit => "devices-jit",
        }
    }

    pub fn from_name(s: &str) -> Option<Engine> {
        [
            Engine::Interp,
            Engine::Jit,
            Engine::Tpu,
            Engine::Opt,
            Engine::DevicesInterp,
            Engine::DevicesJit,
        ]
        .into_iter()
        .find(|e| e.name() == s)
    }

    fn flushes_subnormals(self) -> bool {
        matches!(self, Engine::Jit | Engine::DevicesJit)
    }
}

/// What one engine did with one module.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Its outputs.
    Values(Vec<Tensor>),
    /// A located refusal: something it does not support.
    Refused(String),
    /// Any other error.
    Failed(String),
    /// It panicked.
    Panicked(String),
}

/// A finding: an engine that disagrees with the reference, failed or panicked.
#[derive(Clone, Debug)]
pub struct Finding {
    pub engine: Engine,
    /// `mismatch`, `failed`, `panicked`, or `invalid` (the module failed the checks).
    pub kind: &'static str,
    pub detail: String,
}

/// Everything about one module.
#[derive(Debug, Default)]
pub struct Report {
    pub findings: Vec<Finding>,
    /// Refusals: (engine, message).
    pub refusals: Vec<(Engine, String)>,
    /// Engines that ran and agreed.
    pub agreed: Vec<Engine>,
    /// The inputs, the reference outputs and the JIT's (for XLA, which runs apart).
    pub inputs: Vec<Tensor>,
    pub reference: Option<Vec<Tensor>>,
    pub jit: Option<Vec<Tensor>>,
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

fn guarded(f: impl FnOnce() -> Outcome) -> Outcome {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(o) => o,
        Err(p) => Outcome::Panicked(panic_message(p)),
    }
}

/// Parses and checks `text`: the module or the first error, rendered.
pub fn load(text: &str) -> Result<Checked<Module>, String> {
    hlo_driver::parse(text).map_err(|d| d.render(text, "fuzz.hlo", false))
}

fn is_refusal(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    m.contains("not supported") || m.contains("unsupported") || m.contains("not yet implemented")
}

fn diag_outcome(msg: String) -> Outcome {
    if is_refusal(&msg) { Outcome::Refused(msg) } else { Outcome::Failed(msg) }
}

/// Runs `m` on `engine` (`sharded`: the module with shardings, for the device engines).
pub fn run_engine(
    engine: Engine,
    m: &Checked<Module>,
    sharded: Option<&Checked<Module>>,
    devices: usize,
    inputs: &[Tensor],
) -> Outcome {
    guarded(|| match engine {
        Engine::Interp => match hlo_interp::run(m, inputs) {
            Ok(v) => Outcome::Values(v),
            Err(e) => diag_outcome(e.message),
        },
        Engine::Jit => {
            let opts = hlo_runtime::CompileOptions::default();
            match hlo_runtime::Program::compile(m, &opts) {
                Ok(p) => match p.run(inputs) {
                    Ok(v) => Outcome::Values(v),
                    Err(e) => Outcome::Failed(e.to_string()),
                },
                Err(e) if e.is_unsupported() => Outcome::Refused(e.to_string()),
                Err(e) => diag_outcome(e.to_string()),
            }
        }
        Engine::Tpu => {
            use hlo_ir::op::Precision;
            let cfg = hlo_tpu::config::TpuConfig::preset("v4").expect("the v4 preset");
            let passes = hlo_tpu::lower::Passes::All(Precision::Highest);
            let target = hlo_driver::Target::Tpu(hlo_driver::TpuTarget::new(cfg.clone(), passes));
            match hlo_driver::compile(m, &target, &hlo_driver::Options::default()) {
                Ok(c) => {
                    let lowered = c.lowered.as_ref().expect("lowered for a TPU");
                    let opts = hlo_tpu::engine::Options::new(cfg, passes);
                    match hlo_tpu::engine::run(&c.module, lowered, inputs, &opts) {
                        Ok(r) => Outcome::Values(r.outputs.unwrap_or_default()),
                        Err(d) => diag_outcome(d.message),
                    }
                }
                Err(d) => diag_outcome(first(&d)),
            }
        }
        Engine::Opt => {
            match hlo_driver::compile(m, &hlo_driver::Target::Host, &hlo_driver::Options::default())
            {
                Ok(c) => match hlo_interp::run(&c.module, inputs) {
                    Ok(v) => Outcome::Values(v),
                    Err(e) => Outcome::Failed(e.message),
                },
                Err(d) => diag_outcome(first(&d)),
            }
        }
        Engine::DevicesInterp => {
            let Some(s) = sharded else { return Outcome::Refused("no sharded module".into()) };
            // Exact partial sums: the N-device engines are checked against the one-device
            // reference, not against XLA's bf16 rounding of split contractions.
            let options = hlo_driver::Options::default()
                .on_devices(Some(devices))
                .with_partial_sums(hlo_spmd::PartialSums::Exact);
            match hlo_driver::compile(s, &hlo_driver::Target::Interpreter, &options) {
                Ok(c) => {
                    let plan = c.plan.expect("partitioned on N devices");
                    match hlo_devices::run_interp(&plan, inputs) {
                        Ok(v) => Outcome::Values(v),
                        Err(d) => Outcome::Failed(d.message),
                    }
                }
                Err(d) => diag_outcome(first(&d)),
            }
        }
        Engine::DevicesJit => {
            let Some(s) = sharded else { return Outcome::Refused("no sharded module".into()) };
            let opts = hlo_runtime::CompileOptions::default().with_exact_partial_sums(true);
            match hlo_runtime::SpmdProgram::compile(s, devices, &opts) {
                Ok(p) => match p.run(inputs) {
                    Ok(v) => Outcome::Values(v),
                    Err(e) => Outcome::Failed(e.to_string()),
                },
                Err(e) if e.is_unsupported() => Outcome::Refused(e.to_string()),
                Err(e) => diag_outcome(e.to_string()),
            }
        }
    })
}

fn first(d: &hlo_ir::Diagnostics) -> String {
    d.iter().find(|x| x.is_error()).map(|x| x.message.clone()).unwrap_or_else(|| "error".into())
}

/// Runs `g` on the reference and on `engines`, with the inputs of `seed`.
pub fn differential(g: &Generated, seed: u64, engines: &[Engine], devices: usize) -> Report {
    let mut report = Report::default();
    let m = match load(&g.text) {
        Ok(m) => m,
        Err(e) => {
            report.findings.push(Finding { engine: Engine::Interp, kind: "invalid", detail: e });
            return report;
        }
    };
    let sharded = match g.sharded.as_deref().map(load) {
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => {
            report.findings.push(Finding {
                engine: Engine::DevicesInterp,
                kind: "invalid",
                detail: format!("the sharded module: {e}"),
            });
            None
        }
        None => None,
    };
    let inputs = g.inputs(seed);
    report.inputs = inputs.clone();
    let reference = match run_engine(Engine::Interp, &m, None, devices, &inputs) {
        Outcome::Values(v) => v,
        Outcome::Refused(msg) => {
            report.refusals.push((Engine::Interp, msg));
            return report;
        }
        Outcome::Failed(msg) => {
            report.findings.push(Finding { engine: Engine::Interp, kind: "failed", detail: msg });
            return report;
        }
        Outcome::Panicked(msg) => {
            report.findings.push(Finding { engine: Engine::Interp, kind: "panicked", detail: msg });
            return report;
        }
    };
    // The f64 reference, computed at the first disagreement on an inexact output.
    let mut r64: Option<Option<Vec<Tensor>>> = None;
    for &e in engines {
        if e == Engine::Interp {
            continue;
        }
        let is_devices = matches!(e, Engine::DevicesInterp | Engine::DevicesJit);
        if is_devices && sharded.is_none() {
            continue;
        }
        // A known deviation (README, "Differential fuzzing"): a convolution split on a
        // spatial dim computes on shards padded with explicit zeros, as GSPMD's do, and a
        // zero times an infinite kernel value is NaN where one device skips the padding.
        if is_devices && g.edge_values && g.text.contains(" convolution(") {
            continue;
        }
        match run_engine(e, &m, sharded.as_ref(), devices, &inputs) {
            Outcome::Values(got) => {
                match compare_all(&got, &reference, &g.tolerances, e) {
                    Ok(()) => report.agreed.push(e),
                    Err(_) if within_reference_error(&got, &reference, g, &inputs, &mut r64, e) => {
                        report.agreed.push(e)
                    }
                    Err(detail) => {
                        report.findings.push(Finding { engine: e, kind: "mismatch", detail })
                    }
                }
                if e == Engine::Jit {
                    report.jit = Some(got);
                }
            }
            Outcome::Refused(msg) => report.refusals.push((e, msg)),
            Outcome::Failed(msg) => {
                report.findings.push(Finding { engine: e, kind: "failed", detail: msg })
            }
            Outcome::Panicked(msg) => {
                report.findings.push(Finding { engine: e, kind: "panicked", detail: msg })
            }
        }
    }
    report.reference = Some(reference);
    report
}

/// Whether `got` agrees with the reference once every inexact output may also differ by
/// twice the reference's own rounding error (its largest distance from the f64 reference)
/// and by the tolerance times the magnitude of the terms it was computed from: sums that
/// cancel leave a result far smaller than the values that made it, and its error is of
/// their size, not of its own.
fn within_reference_error(
    got: &[Tensor],
    reference: &[Tensor],
    g: &Generated,
    inputs: &[Tensor],
    r64: &mut Option<Option<Vec<Tensor>>>,
    engine: Engine,
) -> bool {
    let Some(r64) = r64.get_or_insert_with(|| f64_reference(&g.text, inputs)) else { return false };
    got.iter().zip(reference).zip(r64.iter()).enumerate().all(|(i, ((x, want), exact64))| {
        let tol = g.tolerances.get(i).copied().unwrap_or(0.0);
        if tol == 0.0 {
            return compare(x, want, 0.0, engine.flushes_subnormals()).is_ok();
        }
        let (Ok(a), Ok(b), Ok(c)) = (x.to_f64_vec(), want.to_f64_vec(), exact64.to_f64_vec())
        else {
            return false;
        };
        let own = b
            .iter()
            .zip(&c)
            .filter(|(p, q)| p.is_finite() && q.is_finite())
            .fold(0f64, |m, (p, q)| m.max((p - q).abs()));
        // The terms' magnitude, as the generator bounds it, at most a thousand times the
        // output's own scale (the bound is a worst case).
        let scale = b.iter().filter(|v| v.is_finite()).fold(0f64, |m, v| m.max(v.abs()));
        let terms = g.magnitudes.get(i).copied().unwrap_or(0.0).min(1e3 * scale.max(1.0));
        a.iter().zip(&b).all(|(p, q)| {
            p.is_nan() && q.is_nan()
                || p == q
                || (p - q).abs() <= 2.0 * own + tol * (q.abs() + terms)
        })
    })
}

/// Compares every output of `engine` with the reference's: output `i` bit for bit when
/// `tolerances[i]` is 0 (an exact value), else within that relative tolerance (at least
/// its type's); outputs past `tolerances` within their type's tolerance.
pub fn compare_all(
    got: &[Tensor],
    want: &[Tensor],
    tolerances: &[f64],
    engine: Engine,
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} outputs, the reference has {}", got.len(), want.len()));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = tolerances.get(i).copied().unwrap_or(f64::MIN_POSITIVE);
        compare(g, w, tol, engine.flushes_subnormals()).map_err(|e| format!("output {i}: {e}"))?;
    }
    Ok(())
}

/// The generator's tolerance of a float type (4e-2, bf16's, for the narrow formats it
/// does not write).
fn rtol(e: ElemType) -> f64 {
    crate::generator::Elem::of(e).map_or(4e-2, crate::generator::rtol)
}

/// One output against the reference's (see the module doc for the rules).
pub fn compare(got: &Tensor, want: &Tensor, tol: f64, flushes: bool) -> Result<(), String> {
    let exact = tol == 0.0;
    if got.elem() != want.elem() || got.dims() != want.dims() {
        return Err(format!("{} where the reference has {}", got.shape(), want.shape()));
    }
    if !want.elem().is_float() {
        if got.bytes() != want.bytes() {
            let (g, w) =
                (got.to_i128_vec().unwrap_or_default(), want.to_i128_vec().unwrap_or_default());
            let k = g.iter().zip(&w).position(|(a, b)| a != b).unwrap_or(0);
            return Err(format!(
                "{}: element {k} is {} where the reference has {}",
                want.shape(),
                g.get(k).copied().unwrap_or(0),
                w.get(k).copied().unwrap_or(0)
            ));
        }
        return Ok(());
    }
    let (g, w) = match (got.to_f64_vec(), want.to_f64_vec()) {
        (Ok(g), Ok(w)) => (g, w),
        _ => return Err("values not comparable".into()),
    };
    let tiny = match want.elem() {
        ElemType::F64 => f64::MIN_POSITIVE,
        ElemType::F16 => 6.103_515_625e-5,
        _ => f32::MIN_POSITIVE as f64,
    };
    let scale = w.iter().filter(|x| x.is_finite()).fold(0f64, |m, x| m.max(x.abs()));
    let tol = tol.max(rtol(want.elem()));
    for (k, (&a, &b)) in g.iter().zip(&w).enumerate() {
        let ok = if a.is_nan() || b.is_nan() {
            a.is_nan() && b.is_nan()
        } else if a.is_infinite() || b.is_infinite() {
            a == b
        } else if flushes && b.abs() < tiny && a.abs() < tiny {
            true
        } else if exact {
            a == b
        } else {
            (a - b).abs() <= tol * (b.abs().max(scale)) + tiny
        };
        if !ok {
            return Err(format!(
                "{}: element {k} is {a:e} where the reference has {b:e}{}",
                want.shape(),
                if exact { " (an exact value)" } else { "" }
            ));
        }
    }
    Ok(())
}

/// How `engine` disagrees with the reference interpreter on `m` (inputs of `seed`, floats
/// compared within tolerance; `edge_values` as `hloc fuzz --edge-values`), for a module of
/// any origin: `None` when it agrees or
/// refuses. The device engines run `m` itself partitioned on `devices` devices.
pub fn disagreement(
    engine: Engine,
    m: &Checked<Module>,
    devices: usize,
    seed: u64,
    edge_values: bool,
) -> Option<Finding> {
    let inputs = crate::generator::inputs_for(m, seed, edge_values).ok()?;
    let reference = match run_engine(Engine::Interp, m, None, devices, &inputs) {
        Outcome::Values(v) => v,
        Outcome::Refused(_) => return None,
        Outcome::Failed(d) => {
            return Some(Finding { engine: Engine::Interp, kind: "failed", detail: d });
        }
        Outcome::Panicked(d) => {
            return Some(Finding { engine: Engine::Interp, kind: "panicked", detail: d });
        }
    };
    if engine == Engine::Interp {
        return None;
    }
    match run_engine(engine, m, Some(m), devices, &inputs) {
        Outcome::Values(got) => compare_all(&got, &reference, &[], engine)
            .err()
            .map(|detail| Finding { engine, kind: "mismatch", detail }),
        Outcome::Refused(_) => None,
        Outcome::Failed(detail) => Some(Finding { engine, kind: "failed", detail }),
        Outcome::Panicked(detail) => Some(Finding { engine, kind: "panicked", detail }),
    }
}

/// The outputs of module `text` with every float type promoted to f64, from the same
/// `inputs` (floats widened): what the module computes without rounding, to measure the
/// reference's own rounding error by. `None` when the promotion would change what the
/// module means (bit casts read a float's width) or the promoted module does not run.
pub fn f64_reference(text: &str, inputs: &[Tensor]) -> Option<Vec<Tensor>> {
    if text.contains("bitcast-convert") {
        return None;
    }
    let promoted =
        ["bf16[", "f16[", "f32["].iter().fold(text.to_string(), |t, p| t.replace(p, "f64["));
    if promoted == text {
        return None;
    }
    let m = load(&promoted).ok()?;
    let inputs: Vec<Tensor> = inputs
        .iter()
        .map(|t| {
            if matches!(t.elem(), ElemType::F16 | ElemType::BF16 | ElemType::F32) {
                Tensor::from_f64(t.dims(), &t.to_f64_vec().ok()?).ok()
            } else {
                Some(t.clone())
            }
        })
        .collect::<Option<_>>()?;
    match run_engine(Engine::Interp, &m, None, 1, &inputs) {
        Outcome::Values(v) => Some(v),
        _ => None,
    }
}
