//! The JIT on every runnable corpus case: compile `NAME.hlo` (optimized, fused), run it on
//! `NAME.inputs.npz` and compare with XLA's `NAME.outputs.npz` under the per-output
//! tolerances of `NAME.json`. Runnable = accepted by `hloc check`.

use std::path::PathBuf;

use hlo_io::compare::Tolerances;
use hlo_io::npz;
use hlo_runtime::{CompileOptions, Program};

fn corpus() -> PathBuf {
    hlo_tests::shared_dir().join("corpus")
}

fn run_case(name: &str, suffix: &str) -> Result<Option<()>, String> {
    let file = corpus().join(format!("{name}{suffix}"));
    let src = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
    // Parsed and verified; checked when static (runnable = accepted by the checks), bound
    // to the inputs' shapes first when shape-polymorphic.
    let m = hlo_tests::parse_verified(&src).map_err(|d| d.render(&src, name, false))?;
    let dir = corpus();
    let (checked, inputs) = if hlo_driver::is_polymorphic(&m) {
        // Inputs are read by name and dtype; a polymorphic module takes their shapes.
        let inputs: Vec<hlo_ir::Tensor> = npz::read_npz(dir.join(format!("{name}.inputs.npz")))
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        let shapes: Vec<hlo_ir::Shape> = inputs.iter().map(|t| t.shape()).collect();
        let s = hlo_driver::specialize(&m, &shapes).map_err(|d| d.render(&src, name, false))?;
        (s, inputs)
    } else {
        let Ok(checked) = hlo_driver::check(m, Some(&src)) else { return Ok(None) };
        let file = dir.join(format!("{name}.inputs.npz"));
        match npz::read_inputs(file, &checked.entry_param_shapes()) {
            Ok(t) => (checked, t),
            // XLA's partitioned programs (sharded cases' `.opt.hlo`) take per-device shards.
            Err(_) if suffix == ".opt.hlo" => return Ok(None),
            Err(e) => return Err(e.to_string()),
        }
    };
    let p = Program::compile(&checked, &CompileOptions::default()).map_err(|e| e.to_string())?;
    let expected = npz::read_outputs(dir.join(format!("{name}.outputs.npz")), p.output_shapes())
        .map_err(|e| e.to_string())?;
    let tols =
        Tolerances::from_case_json(dir.join(format!("{name}.json"))).map_err(|e| e.to_string())?;
    let actual = p.run(&inputs).map_err(|e| e.to_string())?;
    hlo_tests::compare_outputs(&actual, &expected, &tols)?;
    Ok(Some(()))
}

#[test]
fn jit_matches_xla_on_the_corpus() {
    let names = hlo_tests::corpus_case_names();
    let (mut passed, mut skipped, mut failures) = (Vec::new(), Vec::new(), Vec::new());
    for name in &names {
        // The module JAX printed, and XLA's own optimized module (layouts, bitcasts,
        // XLA's fusions and custom-calls).
        for suffix in [".hlo", ".opt.hlo"] {
            if !corpus().join(format!("{name}{suffix}")).exists() {
                continue;
            }
            match run_case(name, suffix) {
                Ok(Some(())) => passed.push(format!("{name}{suffix}")),
                Ok(None) => skipped.push(format!("{name}{suffix}")),
                Err(e) => failures.push(format!("{name}{suffix}: {e}")),
            }
        }
    }
    println!(
        "JIT vs XLA: {} files match, {} failed, {} not runnable here ({})",
        passed.len(),
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
    assert!(passed.len() >= 80, "only {} corpus files ran", passed.len());
}
