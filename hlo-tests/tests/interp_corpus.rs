//! The reference interpreter on every runnable corpus case: run `NAME.hlo` and
//! `NAME.debug.hlo` on `NAME.inputs.npz` and compare with XLA's `NAME.outputs.npz` under
//! the per-output tolerances of `NAME.json`. Runnable = accepted by `hloc check`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use hlo_interp as interp;

use hlo_io::compare::Tolerances;
use hlo_io::npz;

fn corpus() -> PathBuf {
    hlo_tests::shared_dir().join("corpus")
}

/// Runs one file of a case; `Ok(None)` when the checker rejects it (not runnable).
fn run_case(name: &str, file: &Path) -> Result<Option<f64>, String> {
    let src = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let m = hlo_ir::parse_and_verify(&src).map_err(|d| d.render(&src, name, false))?;
    if hlo_ir::check::diagnose(&m, Some(&src)).has_errors() {
        return Ok(None);
    }
    let (params, outs) = (m.entry_param_shapes(), m.entry_output_shapes());
    let dir = corpus();
    let inputs = npz::read_inputs(dir.join(format!("{name}.inputs.npz")), &params)
        .map_err(|e| e.to_string())?;
    let expected = npz::read_outputs(dir.join(format!("{name}.outputs.npz")), &outs)
        .map_err(|e| e.to_string())?;
    let tols =
        Tolerances::from_case_json(dir.join(format!("{name}.json"))).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let actual = interp::run(&m, &inputs).map_err(|d| {
        hlo_ir::Diagnostics::from(d).render(&src, &file.display().to_string(), false)
    })?;
    let secs = t.elapsed().as_secs_f64();
    hlo_tests::compare_outputs(&actual, &expected, &tols)?;
    Ok(Some(secs))
}

#[test]
fn interpreter_matches_xla_on_the_corpus() {
    let dir = corpus();
    let names = hlo_tests::corpus_case_names();
    let (mut passed, mut skipped, mut failures) = (0, Vec::new(), Vec::new());
    for name in &names {
        for suffix in [".hlo", ".debug.hlo"] {
            let file = dir.join(format!("{name}{suffix}"));
            if !file.exists() {
                continue;
            }
            match run_case(name, &file) {
                Ok(Some(secs)) => {
                    passed += 1;
                    if secs > 0.05 {
                        println!("  {name}{suffix}: {:.1} ms", secs * 1e3);
                    }
                }
                Ok(None) => skipped.push(format!("{name}{suffix}")),
                Err(e) => failures.push(format!("{name}{suffix}:\n{e}")),
            }
        }
    }
    println!(
        "interpreter vs XLA: {passed} files match, {} failed, {} rejected by the checker ({})",
        failures.len(),
        skipped.len(),
        skipped.join(", ")
    );
    assert!(
        failures.is_empty(),
        "{} corpus files differ from XLA:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(passed >= 80, "only {passed} corpus files ran");
}
