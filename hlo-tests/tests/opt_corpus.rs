//! The default optimization pipeline on every corpus case that has inputs: the
//! interpreter must give bit-identical outputs on `NAME.inputs.npz` before and after
//! (`Vec<Tensor>` equality, NaN bits included). Modules the checker rejects are skipped.

use std::time::Instant;

use hlo_compiler::{interp, npz, passes};

/// `Ok(None)`: rejected by the checker (not runnable); `Ok(Some((before, after)))`:
/// instruction counts.
fn run_case(name: &str) -> Result<Option<(usize, usize)>, String> {
    let dir = hlo_tests::shared_dir().join("corpus");
    let file = dir.join(format!("{name}.hlo"));
    let src = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
    let m = hlo_ir::parse_and_verify(&src).map_err(|d| d.render(&src, name, false))?;
    if passes::check(&m, Some(&src)).has_errors() {
        return Ok(None);
    }
    let inputs = npz::read_inputs(dir.join(format!("{name}.inputs.npz")), &m.entry_param_shapes()).map_err(|e| e.to_string())?;
    let before = interp::run(&m, &inputs).map_err(|d| format!("the original does not run: {}", d.message))?;
    let mut opt = m.clone();
    let mut pipeline = passes::default_pipeline();
    pipeline.verify_each = true;
    pipeline.run(&mut opt).map_err(|d| d.render(&src, name, false))?;
    let printed = hlo_ir::text::print(&opt);
    let reparsed = hlo_ir::parse_and_verify(&printed).map_err(|d| format!("the optimized module does not re-parse:\n{}", d.render(&printed, name, false)))?;
    if hlo_ir::text::print(&reparsed) != printed {
        return Err("the optimized module's text is not a fixpoint of parse+print".into());
    }
    let after = interp::run(&reparsed, &inputs).map_err(|d| format!("the optimized module fails: {}", d.message))?;
    if before.len() != after.len() {
        return Err(format!("{} outputs before, {} after", before.len(), after.len()));
    }
    if let Some(k) = before.iter().zip(&after).position(|(a, b)| a != b) {
        return Err(format!("output {k} differs after optimization"));
    }
    Ok(Some((m.instr_count(), opt.instr_count())))
}

#[test]
fn default_pipeline_keeps_corpus_outputs_bit_identical() {
    let names = hlo_tests::corpus_case_names();
    let (mut same, mut skipped, mut failures) = (0, Vec::new(), Vec::new());
    let t = Instant::now();
    for name in &names {
        match run_case(name) {
            Ok(Some((before, after))) => {
                same += 1;
                println!("  {name}: {before} -> {after} instructions");
            }
            Ok(None) => skipped.push(name.clone()),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    let runnable = same + failures.len();
    println!(
        "default pipeline: {same}/{runnable} corpus cases bit-identical before and after ({} rejected by the checker: {}) in {:.1} s",
        skipped.len(),
        skipped.join(", "),
        t.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{} corpus cases differ or fail:\n{}", failures.len(), failures.join("\n\n"));
    assert!(same >= 40, "only {same} corpus cases ran");
}
