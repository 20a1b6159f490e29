//! `hloc._hloc`: the native module of the Python package `hloc` (`python/hloc/`, which
//! wraps it with numpy conversions, typed signatures and the exception classes).
//!
//! Each function does what an `hloc` subcommand does, through the same library calls, and
//! reports errors with the same text:
//!
//! - [`check`]: `hloc check` (parse, verify, infer shapes, dynamic shapes).
//! - [`optimize`]: `hloc opt [--passes ...]` (the printed module).
//! - [`run`]: `hloc run --engine E [--devices N]`; the JIT's programs stay in one
//!   process-wide [`hlo_runtime::Runtime`], whose shape-keyed cache every call shares.
//! - [`predict`]: `hloc compile --chips N --json` (`hlo_tools::predict`, the function the
//!   command line calls).
//!
//! Arrays cross the boundary as `(element type, dims, bytes)`: the HLO element type's
//! name (`f32`, `bf16`, `s4`, ...), the dimensions and the little-endian row-major bytes
//! of a [`Tensor`] (sub-byte types one element per byte, signed ones sign-extended); the
//! Python layer maps numpy and `ml_dtypes` dtypes to and from these.
//!
//! Errors become Python exceptions of the package (`hloc.HloError`, `hloc.InputError`,
//! defined in `hloc/_errors.py`), never a crash: the work runs without the GIL and inside
//! `catch_unwind`, and a panic (a bug) becomes an `HloError` that says so.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Mutex, OnceLock};

use hlo_check::Checked;
use hlo_driver::{Optimizer, Target, TpuTarget};
use hlo_ir::diag::LineIndex;
use hlo_ir::{Diagnostic, Diagnostics, ElemType, Module, Tensor};
use hlo_tools::predict as tpu_predict;
use hlo_tpu::lower::Passes;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyByteArray;

/// An error of this module, before it becomes a Python exception.
enum Error {
    /// Diagnostics about the module, rendered as the command line prints them (`hloc.HloError`).
    Hlo { message: String, line: Option<usize>, column: Option<usize> },
    /// Arguments the program or the function cannot take (`hloc.InputError`, a `ValueError`).
    Input(String),
}

impl Error {
    /// `diags` rendered against `src` (named `path`) exactly as the command line writes them
    /// to standard error (`report` in tools/src/main.rs, without colors), with the
    /// position of the first error.
    fn located(diags: &Diagnostics, src: &str, path: &str) -> Error {
        let mut message = diags.render(src, path, false);
        let n = diags.error_count();
        if n > 0 {
            message.push_str(&format!(
                "error: {n} error{} in `{path}`\n",
                if n == 1 { "" } else { "s" }
            ));
        }
        let span = diags.iter().find(|d| d.is_error()).and_then(|d| d.span);
        let (line, column) = match span {
            Some(s) => {
                let (l, c) = LineIndex::new(src).line_col(src, s.start as usize);
                (Some(l), Some(c))
            }
            None => (None, None),
        };
        Error::Hlo { message: trimmed(message), line, column }
    }

    /// A message that is not located in the source (`error: ...`, as the command line says).
    fn message(message: String) -> Error {
        Error::Hlo { message: trimmed(message), line: None, column: None }
    }

    /// The exception of the `hloc` package this error is.
    fn into_py(self, py: Python<'_>) -> PyErr {
        let (class, args) = match self {
            Error::Hlo { message, line, column } => ("HloError", (message, line, column)),
            Error::Input(message) => ("InputError", (message, None, None)),
        };
        let made = py
            .import("hloc._errors")
            .and_then(|m| m.getattr(class))
            .and_then(|cls| cls.call1(args.clone()));
        match made {
            Ok(exc) => PyErr::from_value(exc),
            // Imported without its package (`hloc/_errors.py` missing): still an exception.
            Err(_) => pyo3::exceptions::PyRuntimeError::new_err(args.0),
        }
    }
}

/// The message without the final newline the command line ends its output with.
fn trimmed(mut s: String) -> String {
    while s.ends_with('\n') {
        s.pop();
    }
    s
}

/// Runs `f` without the GIL; a panic (a bug in hloc) becomes an `HloError`, not an abort
/// or a `PanicException`.
fn detached<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T, Error> + Send) -> PyResult<T> {
    let out = py.detach(|| {
        std::panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            Err(Error::message(format!(
                "error: internal error in hloc (a bug; please report it with the module): {what}"
            )))
        })
    });
    out.map_err(|e| e.into_py(py))
}

/// The warnings and notes of `diags` as the command line prints them (empty when none).
fn rendered_warnings(diags: &Diagnostics, src: &str, path: &str) -> String {
    if diags.is_empty() { String::new() } else { trimmed(diags.render(src, path, false)) }
}

/// `src` refused as the command line refuses a binary file (`text_of` in
/// tools/src/main.rs): located at its first NUL byte. (Python strings are Unicode, so the
/// other refusal, invalid UTF-8, cannot happen here.)
fn text(src: &str, path: &str) -> Result<(), Error> {
    let Some(off) = src.bytes().position(|b| b == 0) else { return Ok(()) };
    let (line, col) = LineIndex::new(src).line_col(src, off);
    Err(Error::Hlo {
        message: format!(
            "{path}:{line}:{col}: error: this is a binary file, not HLO text (a NUL byte at offset {off})"
        ),
        line: Some(line),
        column: Some(col),
    })
}

/// Parses and checks `src` as `hloc check` does (one parse, the checks once).
fn load(src: &str, path: &str) -> Result<(Checked<Module>, String), Error> {
    text(src, path)?;
    match hlo_driver::parse(src) {
        Ok(m) => {
            let warnings = rendered_warnings(m.warnings(), src, path);
            Ok((m, warnings))
        }
        Err(diags) => Err(Error::located(&diags, src, path)),
    }
}

/// Checks an HLO module as `hloc check` does: the structural verifier, shape inference,
/// data-dependent shapes, loops and sharding devices. Returns the warnings (empty when
/// none); raises `hloc.HloError` with the command line's diagnostics on any error.
#[pyfunction]
#[pyo3(signature = (text, path = "<string>".to_string()))]
fn check(py: Python<'_>, text: String, path: String) -> PyResult<String> {
    detached(py, || load(&text, &path).map(|(_, warnings)| warnings))
}

/// Every pass `optimize(passes=...)` can name, and the default pipeline's order.
#[pyfunction]
fn pass_names() -> (Vec<String>, Vec<String>) {
    let all = hlo_driver::registry().iter().map(|p| p.name.to_string()).collect();
    let (order, _) = hlo_driver::default_order();
    (all, order.into_iter().map(str::to_string).collect())
}

/// Optimizes an HLO module as `hloc opt` does (the default pipeline, or `passes` in this
/// order) and returns the printed module and the warnings and notes.
#[pyfunction]
#[pyo3(signature = (text, passes = None, path = "<string>".to_string()))]
fn optimize(
    py: Python<'_>,
    text: String,
    passes: Option<Vec<String>>,
    path: String,
) -> PyResult<(String, String)> {
    detached(py, || {
        if let Some(names) = &passes {
            let known: Vec<&str> = hlo_driver::registry().iter().map(|p| p.name).collect();
            if let Some(bad) = names.iter().find(|n| !known.contains(&n.as_str())) {
                return Err(Error::Input(format!(
                    "unknown pass `{bad}` (known passes: {})",
                    known.join(", ")
                )));
            }
            // As `hloc opt`: the printed module is for XLA, which does not compile the
            // variadic all-reduces this pass makes.
            if names.iter().any(|n| n == "all-reduce-combiner") {
                return Err(Error::Input(
                    "`all-reduce-combiner` is not run by `optimize`: it makes variadic \
                     all-reduces, which XLA does not compile from text (the engines combine \
                     all-reduces when they run on N devices)"
                        .to_string(),
                ));
            }
        }
        let (checked, mut warnings) = load(&text, &path)?;
        let optimizer = match passes {
            Some(names) => Optimizer::Passes(names),
            None => Optimizer::Default,
        };
        let options = hlo_driver::Options::default()
            .with_optimizer(optimizer)
            .verifying_each(cfg!(debug_assertions));
        let compiled = hlo_driver::compile(&checked, &Target::Host, &options)
            .map_err(|d| Error::located(&d, &text, &path))?;
        if let Some(report) = &compiled.optimization {
            for note in &report.notes {
                if !warnings.is_empty() {
                    warnings.push('\n');
                }
                warnings.push_str(&format!("note: {note}"));
            }
        }
        Ok((hlo_ir::text::print(&compiled.module), warnings))
    })
}

/// The process-wide JIT runtime: every `run(engine="jit")` looks its program up in this
/// runtime's shape-keyed cache (a module run again with arguments of the same shapes is
/// not compiled again).
fn runtime() -> &'static hlo_runtime::Runtime {
    static RUNTIME: OnceLock<hlo_runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(hlo_runtime::Runtime::new)
}

/// The JIT cache's counters: hits, misses and the total compile time (ms).
#[pyfunction]
fn jit_cache_stats() -> (u64, u64, f64) {
    let s = runtime().stats();
    (s.hits, s.misses, s.compile_time.as_secs_f64() * 1e3)
}

/// One array as it crosses the boundary: element type, dims, bytes.
type Array = (String, Vec<u64>, PyBackedBytes);

/// The input tensors: each array's element type by its HLO name, its bytes checked
/// against its dims.
fn tensors(inputs: &[Array]) -> Result<Vec<Tensor>, Error> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, (elem, dims, bytes))| {
            let e = ElemType::from_name(elem).ok_or_else(|| {
                Error::Input(format!("error: inputs: p{i}: `{elem}` is not an HLO element type"))
            })?;
            Tensor::from_bytes(e, dims.clone(), bytes.to_vec())
                .map_err(|err| Error::Input(format!("error: inputs: p{i}: {err}")))
        })
        .collect()
}

/// Which executor `run` uses (`hloc run --engine`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Engine {
    Jit,
    Interp,
    Tpu,
}

/// The module `run` runs: checked, or (for the JIT) shape-polymorphic and only verified,
/// to be specialized to the inputs' shapes (as `hloc run` loads it).
enum Loaded {
    Checked(Checked<Module>),
    Polymorphic(Module),
}

fn load_for_run(src: &str, path: &str, engine: Engine) -> Result<(Loaded, String), Error> {
    text(src, path)?;
    let (m, mut diags) = hlo_ir::text::parse(src);
    let Some(m) = m.filter(|_| !diags.has_errors()) else {
        return Err(Error::located(&diags, src, path));
    };
    if engine == Engine::Jit && hlo_driver::is_polymorphic(&m) {
        diags.extend(hlo_ir::verify::verify_source(&m, src));
        return if diags.has_errors() {
            Err(Error::located(&diags, src, path))
        } else {
            Ok((Loaded::Polymorphic(m), rendered_warnings(&diags, src, path)))
        };
    }
    match hlo_driver::check(m, Some(src)) {
        Ok(c) => {
            diags.extend(c.warnings().clone());
            let warnings = rendered_warnings(&diags, src, path);
            Ok((Loaded::Checked(c), warnings))
        }
        Err(d) => {
            diags.extend(d);
            diags.sort();
            Err(Error::located(&diags, src, path))
        }
    }
}

/// Runs an HLO module on host tensors as `hloc run` does: `engine` `jit` (the default of
/// the Python API), `interp` or `tpu` (the TPU model of chip `chip`), on one device or,
/// with `devices` > 1, SPMD on that many. Returns the outputs and the warnings.
#[pyfunction]
#[pyo3(signature = (text, inputs, engine = "jit".to_string(), devices = 1, chip = "v4".to_string(), path = "<string>".to_string()))]
#[allow(clippy::type_complexity)]
fn run(
    py: Python<'_>,
    text: String,
    inputs: Vec<Array>,
    engine: String,
    devices: usize,
    chip: String,
    path: String,
) -> PyResult<(Vec<(String, Vec<u64>, Py<PyByteArray>)>, String)> {
    let engine = match engine.as_str() {
        "jit" => Engine::Jit,
        "interp" => Engine::Interp,
        "tpu" => Engine::Tpu,
        other => {
            return Err(Error::Input(format!(
                "unknown engine `{other}` (expected one of jit, interp, tpu)"
            ))
            .into_py(py));
        }
    };
    if devices == 0 {
        return Err(Error::Input("devices must be at least 1".to_string()).into_py(py));
    }
    let (outputs, warnings) =
        detached(py, || run_detached(&text, &path, &inputs, engine, devices, &chip))?;
    let arrays = outputs
        .iter()
        .map(|t| {
            let bytes = PyByteArray::new(py, t.bytes()).unbind();
            (t.elem().name().to_string(), t.dims().to_vec(), bytes)
        })
        .collect();
    Ok((arrays, warnings))
}

fn run_detached(
    src: &str,
    path: &str,
    inputs: &[Array],
    engine: Engine,
    devices: usize,
    chip: &str,
) -> Result<(Vec<Tensor>, String), Error> {
    let (loaded, mut warnings) = load_for_run(src, path, engine)?;
    let m: &Module = match &loaded {
        Loaded::Checked(c) => c,
        Loaded::Polymorphic(m) => m,
    };
    if engine == Engine::Jit
        && let Some(d) = hlo_runtime::Program::refusal(m)
    {
        return Err(Error::located(&Diagnostics::from(d), src, path));
    }
    let tensors = tensors(inputs)?;
    // Validated against the entry parameters before anything runs, with the messages of
    // `hloc run --inputs` (the arrays are `p0..pN`, "from" `inputs`).
    let inputs = if hlo_driver::is_polymorphic(m) {
        tensors
    } else {
        let named = tensors.into_iter().enumerate().map(|(i, t)| (format!("p{i}"), t)).collect();
        hlo_io::npz::bind_inputs("inputs", named, &m.entry_param_shapes())
            .map_err(|e| Error::Input(format!("error: {e}")))?
    };
    // As `hloc run`: SPMD on more than one device; one device (no `--devices`) runs the
    // whole module, shardings or not.
    let outputs = if devices > 1 {
        let Loaded::Checked(checked) = &loaded else {
            return Err(Error::message(format!(
                "error: {path}: a shape-polymorphic module runs on one device"
            )));
        };
        run_spmd(src, path, checked, devices, &inputs, engine, chip, &mut warnings)?
    } else {
        run_one(src, path, &loaded, &inputs, engine, chip, &mut warnings)?
    };
    Ok((outputs, warnings))
}

/// Appends the warnings and notes of a compile to `warnings`.
fn add_warnings(warnings: &mut String, c: &hlo_driver::Compiled, src: &str, path: &str) {
    let more = rendered_warnings(&c.warnings, src, path);
    if !more.is_empty() {
        if !warnings.is_empty() {
            warnings.push('\n');
        }
        warnings.push_str(&more);
    }
}

fn tpu_config(chip: &str) -> Result<hlo_tpu::config::TpuConfig, Error> {
    tpu_predict::config(chip).map_err(Error::Input)
}

fn run_one(
    src: &str,
    path: &str,
    loaded: &Loaded,
    inputs: &[Tensor],
    engine: Engine,
    chip: &str,
    warnings: &mut String,
) -> Result<Vec<Tensor>, Error> {
    match (engine, loaded) {
        (Engine::Interp, Loaded::Checked(m)) => {
            hlo_interp::run(m, inputs).map_err(|d| Error::located(&Diagnostics::from(d), src, path))
        }
        (Engine::Tpu, Loaded::Checked(m)) => {
            let cfg = tpu_config(chip)?;
            let passes = Passes::AsWritten;
            let target = Target::Tpu(TpuTarget::new(cfg.clone(), passes));
            let options = hlo_driver::Options::default().with_optimizer(Optimizer::Default);
            let compiled = hlo_driver::compile(m, &target, &options)
                .map_err(|d| Error::located(&d, src, path))?;
            add_warnings(warnings, &compiled, src, path);
            let lowered = compiled.lowered.as_ref().ok_or_else(|| {
                Error::message("error: the module was not lowered for the TPU".to_string())
            })?;
            let opts = hlo_tpu::engine::Options::new(cfg, passes);
            let run = hlo_tpu::engine::run(&compiled.module, lowered, inputs, &opts)
                .map_err(|d| Error::located(&Diagnostics::from(d), src, path))?;
            Ok(run.outputs.unwrap_or_default())
        }
        (Engine::Jit, loaded) => {
            let shapes: Vec<hlo_ir::Shape> = inputs.iter().map(Tensor::shape).collect();
            let rt = runtime();
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
                    let d = Diagnostic::error(e.span(), e.kind().to_string()).with_help(hint);
                    return Err(Error::located(&Diagnostics::from(d), src, path));
                }
                Err(e) => return Err(Error::message(format!("error: {path}: {e}"))),
            };
            c.program.run(inputs).map_err(|e| Error::message(format!("error: {path}: {e}")))
        }
        // Only the JIT loads a module without checking it.
        (_, Loaded::Polymorphic(_)) => Err(Error::message(format!(
            "error: {path}: a shape-polymorphic module runs on the JIT only"
        ))),
    }
}

/// `hloc run --devices N`: propagate, partition, then every device runs its shards.
#[allow(clippy::too_many_arguments)]
fn run_spmd(
    src: &str,
    path: &str,
    m: &Checked<Module>,
    n: usize,
    inputs: &[Tensor],
    engine: Engine,
    chip: &str,
    warnings: &mut String,
) -> Result<Vec<Tensor>, Error> {
    let options = hlo_driver::Options::default().on_devices(Some(n));
    let mut compile = |target: Target| match hlo_driver::compile(m, &target, &options) {
        Ok(c) => {
            add_warnings(warnings, &c, src, path);
            Ok(c)
        }
        Err(d) => Err(Error::located(&d, src, path)),
    };
    let not_partitioned = || Error::message(format!("error: {path}: not partitioned"));
    match engine {
        Engine::Interp => {
            let compiled = compile(Target::Interpreter)?;
            let plan = compiled.plan.ok_or_else(not_partitioned)?;
            hlo_devices::run_interp(&plan, inputs)
                .map_err(|d| Error::message(format!("error: {path}: {}", d.message)))
        }
        Engine::Tpu => {
            let cfg = tpu_config(chip)?;
            let passes = Passes::AsWritten;
            let compiled = compile(Target::Tpu(TpuTarget::new(cfg.clone(), passes)))?;
            let plan = compiled.plan.as_ref().ok_or_else(not_partitioned)?;
            let lowered = compiled.lowered.as_ref().ok_or_else(not_partitioned)?;
            let opts = hlo_tpu::engine::Options::new(cfg, passes);
            let runs = hlo_tpu::engine::simulate_chips(
                plan,
                &m.entry_param_shapes(),
                &compiled.module,
                lowered,
                Some(inputs),
                &opts,
            )
            .map_err(|d| Error::located(&Diagnostics::from(d), src, path))?;
            let outs: Vec<Vec<Tensor>> =
                runs.iter().map(|r| r.outputs.clone().unwrap_or_default()).collect();
            hlo_spmd::devices::assemble_outputs(plan, &outs)
                .map_err(|d| Error::message(format!("error: {path}: {}", d.message)))
        }
        Engine::Jit => {
            let prog =
                hlo_runtime::SpmdProgram::compile(m, n, &hlo_runtime::CompileOptions::default())
                    .map_err(|e| match e.diagnostics() {
                        Some(d) => Error::located(d, src, path),
                        None => Error::message(format!("error: {path}: {e}")),
                    })?;
            prog.run(inputs).map_err(|e| Error::message(format!("error: {path}: {e}")))
        }
    }
}

/// Predicts a sharded step on TPU chips as `hloc compile FILE --config CHIP --chips N
/// [--slices S] [--topology T] [--model-flops F] --json` does; returns the JSON object
/// that command prints (as text) and the warnings.
#[pyfunction]
#[pyo3(signature = (text, chips, chip = "v4".to_string(), slices = None, model_flops = None, topology = None, path = "<string>".to_string()))]
#[allow(clippy::too_many_arguments)]
fn predict(
    py: Python<'_>,
    text: String,
    chips: usize,
    chip: String,
    slices: Option<u64>,
    model_flops: Option<f64>,
    topology: Option<String>,
    path: String,
) -> PyResult<(String, String)> {
    if chips == 0 {
        return Err(Error::Input("chips must be at least 1".to_string()).into_py(py));
    }
    if slices == Some(0) {
        return Err(Error::Input("slices must be at least 1".to_string()).into_py(py));
    }
    detached(py, || {
        let cfg = tpu_predict::chips_config(&chip, chips, slices, topology.as_deref(), None, false)
            .map_err(Error::Input)?;
        let (checked, mut warnings) = load(&text, &path)?;
        let p = tpu_predict::predict(&checked, &cfg, chips, model_flops).map_err(|f| match f {
            tpu_predict::Failure::Diagnostics(d) => Error::located(&d, &text, &path),
            tpu_predict::Failure::Message(m) => Error::message(m),
        })?;
        let more = rendered_warnings(&p.warnings, &text, &path);
        if !more.is_empty() {
            if !warnings.is_empty() {
                warnings.push('\n');
            }
            warnings.push_str(&more);
        }
        let json = serde_json::to_string(&p.json)
            .map_err(|e| Error::message(format!("error: the report is not JSON: {e}")))?;
        Ok((json, warnings))
    })
}

/// The module of a training step with its name, kept for the life of the process as the
/// runtime keeps its programs (an [`hlo_runtime::Entry`] borrows both): one per distinct
/// name and text, however many steps are made from it.
fn interned(path: &str, src: &str, m: Checked<Module>) -> Interned {
    static MODULES: OnceLock<Mutex<HashMap<(String, String), Interned>>> = OnceLock::new();
    let mut map = MODULES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    *map.entry((path.to_string(), src.to_string())).or_insert_with(|| Interned {
        path: Box::leak(path.to_string().into_boxed_str()),
        src: Box::leak(src.to_string().into_boxed_str()),
        module: Box::leak(Box::new(m)),
    })
}

/// A training step's module, its text and name (see [`interned`]).
#[derive(Clone, Copy)]
struct Interned {
    path: &'static str,
    src: &'static str,
    module: &'static Checked<Module>,
}

/// A training step whose state stays resident between steps (`hlo_runtime::TrainStep`):
/// the module is `step(state..., batch...) -> (loss, new_state...)`; its program for each
/// batch shape comes from the process-wide JIT cache.
#[pyclass(module = "hloc._hloc", name = "TrainStep")]
struct PyTrainStep {
    step: hlo_runtime::TrainStep<'static>,
    src: &'static str,
    path: &'static str,
    module: &'static Checked<Module>,
}

impl PyTrainStep {
    fn runtime_error(&self, e: hlo_runtime::RuntimeError) -> Error {
        match e.diagnostics() {
            Some(d) => Error::located(d, self.src, self.path),
            None => Error::message(format!("error: {}: {e}", self.path)),
        }
    }
}

/// Outputs of a step as the boundary passes them.
fn arrays(py: Python<'_>, tensors: &[Tensor]) -> Vec<(String, Vec<u64>, Py<PyByteArray>)> {
    tensors
        .iter()
        .map(|t| {
            (
                t.elem().name().to_string(),
                t.dims().to_vec(),
                PyByteArray::new(py, t.bytes()).unbind(),
            )
        })
        .collect()
}

#[pymethods]
impl PyTrainStep {
    /// A step of the module `text` starting from `state` (its leading parameters), the
    /// state tensors named `names` in checkpoints (default `state.0`, `state.1`, ...).
    #[new]
    #[pyo3(signature = (text, state, names = None, path = "<string>".to_string()))]
    fn new(
        py: Python<'_>,
        text: String,
        state: Vec<Array>,
        names: Option<Vec<String>>,
        path: String,
    ) -> PyResult<PyTrainStep> {
        detached(py, || {
            let (m, _) = load(&text, &path)?;
            let state = tensors(&state)?;
            let params = m.entry_param_shapes();
            if state.len() >= params.len() {
                return Err(Error::Input(format!(
                    "{} state tensors for a step with {} parameters: no batch parameters left",
                    state.len(),
                    params.len()
                )));
            }
            if let Some((i, (t, p))) = state
                .iter()
                .zip(&params)
                .enumerate()
                .find(|(_, (t, p))| !hlo_driver::is_polymorphic(&m) && t.shape() != **p)
            {
                return Err(Error::Input(format!(
                    "state {i}: the step's parameter {i} is {p}, given {}",
                    t.shape()
                )));
            }
            let Interned { path, src, module } = interned(&path, &text, m);
            let entry = runtime().entry_checked(path, module);
            let mut step = hlo_runtime::TrainStep::from_entry(entry, state);
            if let Some(names) = names {
                step = step.with_names(names).map_err(|e| Error::Input(e.to_string()))?;
            }
            Ok(PyTrainStep { step, src, path, module })
        })
    }

    /// Runs one step on `batch` (the remaining parameters) and returns the loss.
    fn step(&mut self, py: Python<'_>, batch: Vec<Array>) -> PyResult<f32> {
        detached(py, || {
            let batch = tensors(&batch)?;
            if !hlo_driver::is_polymorphic(self.module) {
                // Checked as `hloc run --inputs` checks its arrays (state and batch, in order).
                let all = self.step.state().iter().chain(&batch).cloned();
                let named = all.enumerate().map(|(i, t)| (format!("p{i}"), t)).collect();
                hlo_io::npz::bind_inputs("inputs", named, &self.module.entry_param_shapes())
                    .map_err(|e| Error::Input(format!("error: {e}")))?;
            }
            self.step.step(&batch).map_err(|e| self.runtime_error(e))
        })
    }

    /// The state (parameters and optimizer state), as the boundary passes arrays.
    fn state(&self, py: Python<'_>) -> Vec<(String, Vec<u64>, Py<PyByteArray>)> {
        arrays(py, self.step.state())
    }

    /// The last step's outputs (output 0 is the loss; after it, where the new state was
    /// written, the previous state; then any further outputs such as metrics).
    fn outputs(&self, py: Python<'_>) -> Vec<(String, Vec<u64>, Py<PyByteArray>)> {
        arrays(py, self.step.outputs())
    }

    /// How many steps ran (restored with a checkpoint).
    fn steps(&self) -> u64 {
        self.step.steps()
    }

    /// The state tensors' names.
    fn names(&self) -> Vec<String> {
        self.step.names().to_vec()
    }

    /// Writes the state and the step count to `file` (a safetensors checkpoint).
    fn save(&self, py: Python<'_>, file: std::path::PathBuf) -> PyResult<()> {
        detached(py, || self.step.save(&file).map_err(|e| self.runtime_error(e)))
    }

    /// Replaces the state and the step count with the checkpoint `file`; the step count.
    fn restore(&mut self, py: Python<'_>, file: std::path::PathBuf) -> PyResult<u64> {
        detached(py, || {
            let step = &mut self.step;
            step.restore(&file).map_err(|e| match e.diagnostics() {
                Some(d) => Error::located(d, self.src, self.path),
                None => Error::message(format!("error: {e}")),
            })
        })
    }
}

/// The native module of the `hloc` package (use the package: `import hloc`).
/// `hloc plan ARGS --json` (see `hlo_tools::plan`): the plan's JSON object as text. A
/// request the planner refuses (a tensor degree that does not divide the slice, a batch
/// that does not divide over the chips, an unknown chip) raises `hloc.InputError` with
/// the command line's message.
#[pyfunction]
fn plan(py: Python<'_>, args: Vec<String>) -> PyResult<String> {
    detached(py, || {
        let v = hlo_tools::plan::plan_json(&args).map_err(Error::Input)?;
        serde_json::to_string(&v)
            .map_err(|e| Error::message(format!("error: the plan is not JSON: {e}")))
    })
}

#[pymodule]
mod _hloc {
    #[pymodule_export]
    use super::{PyTrainStep, check, jit_cache_stats, optimize, pass_names, plan, predict, run};
}
