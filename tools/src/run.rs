//! `hloc run`: executes a checked module on `.npz` inputs and writes `.npz` outputs.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use hlo_compiler::compare::{Tolerance, Tolerances, compare};
use hlo_compiler::{interp, npz};
use hlo_ir::{Diagnostics, Tensor};

/// Which executor runs the program.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Engine {
    /// The reference interpreter (the semantic oracle).
    Interp,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Interp => "interp",
        }
    }
}

pub struct RunArgs<'a> {
    pub file: &'a Path,
    pub inputs: &'a Path,
    pub output: Option<&'a Path>,
    pub engine: Engine,
    pub expect: Option<&'a Path>,
    pub tolerances: Option<&'a Path>,
}

pub fn run(a: RunArgs<'_>) -> ExitCode {
    match run_inner(&a) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}

fn run_inner(a: &RunArgs<'_>) -> Result<ExitCode, String> {
    let (path, src) = crate::read_input(a.file)?;
    let Ok(m) = crate::load_checked_source(&path, &src) else {
        return Ok(ExitCode::FAILURE);
    };
    // Inputs are validated against the entry parameters before anything runs.
    let inputs = npz::read_inputs(a.inputs, &m.entry_param_shapes()).map_err(|e| format!("error: {e}"))?;
    let outputs_shapes = m.entry_output_shapes();
    let expected = match a.expect {
        Some(p) => Some(npz::read_outputs(p, &outputs_shapes).map_err(|e| format!("error: {e}"))?),
        None => None,
    };
    let tolerances = match a.tolerances {
        Some(p) => Some(Tolerances::from_case_json(p).map_err(|e| format!("error: {e}"))?),
        None => None,
    };
    let start = Instant::now();
    let outputs = match a.engine {
        Engine::Interp => interp::run(&m, &inputs),
    };
    let outputs = match outputs {
        Ok(o) => o,
        Err(d) => {
            crate::report(&Diagnostics::from(d), &src, &path);
            return Ok(ExitCode::FAILURE);
        }
    };
    let elapsed = start.elapsed();
    eprintln!("ran `{path}` with the {} engine in {:.2} ms", a.engine.name(), elapsed.as_secs_f64() * 1e3);
    match a.output {
        Some(p) => {
            npz::write_npz(p, &outputs).map_err(|e| format!("error: {e}"))?;
            eprintln!("wrote {} output{} to `{}`", outputs.len(), if outputs.len() == 1 { "" } else { "s" }, p.display());
        }
        None => outputs.iter().enumerate().for_each(|(i, t)| outln!("o{i}: {}", summary(t))),
    }
    let Some(expected) = expected else { return Ok(ExitCode::SUCCESS) };
    let mut failed = 0;
    for (i, (got, want)) in outputs.iter().zip(&expected).enumerate() {
        let tol = tolerances.as_ref().and_then(|t| t.get(i)).unwrap_or_else(|| Tolerance::default_for(want.elem()));
        match compare(got, want, tol) {
            Ok(()) => eprintln!("o{i}: matches (rtol {}, atol {})", tol.rtol, tol.atol),
            Err(m) => {
                failed += 1;
                eprintln!("error: o{i}: {m}");
            }
        }
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `f32[2,3] = [0.1, 0.2, ...]`: the shape and the first few values.
fn summary(t: &Tensor) -> String {
    const SHOW: usize = 8;
    // Integers exactly (an s64 does not fit an f64), floats as f64.
    let values: Vec<String> = match (t.elem().is_float(), t.to_i128_vec(), t.to_f64_vec()) {
        (false, Ok(v), _) => v.iter().take(SHOW).map(|x| x.to_string()).collect(),
        (_, _, Ok(v)) => v.iter().take(SHOW).map(|x| format!("{x}")).collect(),
        _ => Vec::new(),
    };
    let more = if t.element_count() > SHOW { ", ..." } else { "" };
    format!("{} = [{}{more}]", t.shape(), values.join(", "))
}
