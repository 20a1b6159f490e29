//! The default optimization pipeline on every corpus case that has inputs (`NAME.hlo`
//! and `NAME.debug.hlo`): the interpreter must give bit-identical outputs on
//! `NAME.inputs.npz` before and after (`Vec<Tensor>` equality, NaN bits included).
//! Modules the checker rejects are skipped. A second test runs the pipeline on every
//! module of `../shared` the checker accepts.

use std::time::Instant;

use hlo_interp as interp;

use hlo_io::npz;
use hlo_passes as passes;

/// `Ok(None)`: rejected by the checker (not runnable); `Ok(Some((before, after)))`:
/// instruction counts.
fn run_case(name: &str, suffix: &str) -> Result<Option<(usize, usize)>, String> {
    let dir = hlo_tests::shared_dir().join("corpus");
    let file = dir.join(format!("{name}{suffix}"));
    if suffix != ".hlo" && !file.exists() {
        return Ok(None);
    }
    let src = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
    // A module the checks reject is not runnable: skipped, where a parse error fails.
    let m = hlo_tests::parse_verified(&src).map_err(|d| d.render(&src, name, false))?;
    let Ok(m) = hlo_check::check(m, Some(&src)) else { return Ok(None) };
    let inputs = npz::read_inputs(dir.join(format!("{name}.inputs.npz")), &m.entry_param_shapes())
        .map_err(|e| e.to_string())?;
    let before = interp::run(&m, &inputs)
        .map_err(|d| format!("the original does not run: {}", d.message))?;
    let (reparsed, _) = hlo_tests::optimize_round_trip(&m, passes::default_pipeline(), &src, name)?;
    let after = interp::run(&reparsed, &inputs)
        .map_err(|d| format!("the optimized module fails: {}", d.message))?;
    if before.len() != after.len() {
        return Err(format!("{} outputs before, {} after", before.len(), after.len()));
    }
    if let Some(k) = before.iter().zip(&after).position(|(a, b)| a != b) {
        return Err(format!("output {k} differs after optimization"));
    }
    Ok(Some((m.instr_count(), reparsed.instr_count())))
}

#[test]
fn default_pipeline_keeps_corpus_outputs_bit_identical() {
    let names = hlo_tests::corpus_case_names();
    let (mut same, mut skipped, mut failures) = (0, Vec::new(), Vec::new());
    let t = Instant::now();
    for name in &names {
        for suffix in [".hlo", ".debug.hlo"] {
            match run_case(name, suffix) {
                Ok(Some((before, after))) => {
                    same += 1;
                    println!("  {name}{suffix}: {before} -> {after} instructions");
                }
                Ok(None) => skipped.push(format!("{name}{suffix}")),
                Err(e) => failures.push(format!("{name}{suffix}: {e}")),
            }
        }
    }
    let runnable = same + failures.len();
    println!(
        "default pipeline: {same}/{runnable} corpus files bit-identical before and after ({} absent or rejected by the checker: {}) in {:.1} s",
        skipped.len(),
        skipped.join(", "),
        t.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} corpus cases differ or fail:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(same >= 80, "only {same} corpus files ran");
}

/// Every module of the corpus (inputs or not), `../shared/bench` and
/// `../shared/external-hlo` that the checker accepts goes through the default pipeline
/// (verified after every changing pass) without an error, and prints to text that
/// parses back to the same text. The modules are shared out to one worker per core.
#[test]
fn default_pipeline_accepts_every_checked_module() {
    let shared = hlo_tests::shared_dir();
    let mut jobs = Vec::new();
    for dir in ["corpus", "bench", "external-hlo"] {
        for file in hlo_tests::hlo_files(&shared.join(dir)) {
            let text = std::fs::read_to_string(&file).expect("readable");
            for (k, src) in hlo_tests::split_modules(&text).into_iter().enumerate() {
                jobs.push((format!("{}#{k}", file.display()), src));
            }
        }
    }
    let t = Instant::now();
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let outcomes = hlo_tests::par_map(&jobs, |(name, src)| optimize_one(name, src));
    let (mut ok, mut rejected, mut failures) = (0, 0, Vec::new());
    let (mut before, mut after) = (0usize, 0usize);
    let mut slowest = Vec::new();
    for (i, outcome) in outcomes.into_iter().enumerate() {
        match outcome {
            Outcome::Rejected => rejected += 1,
            Outcome::Optimized { before: b, after: a, seconds } => {
                ok += 1;
                before += b;
                after += a;
                slowest.push((seconds, &jobs[i].0));
            }
            Outcome::Failed(e) => failures.push(format!("{}: {e}", jobs[i].0)),
        }
    }
    slowest.sort_by(|a, b| b.0.total_cmp(&a.0));
    println!(
        "default pipeline: {ok} modules optimized ({before} -> {after} instructions), {rejected} rejected by the checker, {} failed, in {:.1} s on {workers} threads; slowest:",
        failures.len(),
        t.elapsed().as_secs_f64()
    );
    for (seconds, name) in slowest.iter().take(5) {
        println!("  {seconds:.1} s {name}");
    }
    assert!(failures.is_empty(), "{} modules failed:\n{}", failures.len(), failures.join("\n\n"));
}

enum Outcome {
    Rejected,
    Optimized { before: usize, after: usize, seconds: f64 },
    Failed(String),
}

fn optimize_one(name: &str, src: &str) -> Outcome {
    let t = Instant::now();
    let Ok(m) = hlo_check::parse(src) else {
        return Outcome::Rejected;
    };
    match hlo_tests::optimize_round_trip(&m, passes::default_pipeline(), src, name) {
        Ok((opt, _)) => Outcome::Optimized {
            before: m.instr_count(),
            after: opt.instr_count(),
            seconds: t.elapsed().as_secs_f64(),
        },
        Err(e) => Outcome::Failed(e),
    }
}
