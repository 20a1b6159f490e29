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
    let m = hlo_tests::parse_verified(&src).map_err(|d| d.render(&src, name, false))?;
    let Ok(m) = hlo_check::check(m, Some(&src)) else { return Ok(None) };
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

/// Counts, per computation, how often its root ran and how often each while ran.
#[derive(Default)]
struct Executions {
    roots: std::sync::Mutex<std::collections::HashMap<(hlo_ir::CompId, hlo_ir::NodeIndex), u64>>,
}

impl interp::Hooks for Executions {
    fn executed(&self, comp: hlo_ir::CompId, node: hlo_ir::NodeIndex) {
        *self.roots.lock().unwrap().entry((comp, node)).or_default() += 1;
    }
}

/// The trip counts `hlo_analysis::while_loop_analysis` reads from the program, against the
/// interpreter: on every corpus file with loops, run on the case's inputs, each loop whose
/// count the analysis claims ran its body exactly that many times per execution; for loops
/// whose trip count XLA wrote (`known_trip_count`), the induction variable alone gives the
/// same count or none, never another. Data-dependent loops (`while_dynamic`) get no count.
#[test]
fn while_trip_counts_match_the_interpreter() {
    use hlo_analysis::while_loop_analysis::trip_count;
    let dir = corpus();
    let (mut claimed, mut unknown, mut xla_agreed, mut xla_unseen) = (0, 0, 0, 0);
    for name in hlo_tests::corpus_case_names() {
        for file in [format!("{name}.hlo"), format!("{name}.opt.hlo"), format!("{name}.debug.hlo")]
        {
            let path = dir.join(&file);
            let Ok(src) = std::fs::read_to_string(&path) else { continue };
            if !src.contains(" while(") {
                continue;
            }
            let m = hlo_tests::parse_verified(&src).unwrap_or_else(|d| panic!("{file}: {d}"));
            let Ok(m) = hlo_check::check(m, Some(&src)) else { continue };
            // Every while: (its computation, node, body, analysed count).
            let mut loops = vec![];
            for cid in m.comp_ids() {
                let c = m.comp(cid);
                for n in c.nodes() {
                    if let hlo_ir::Op::While { body, .. } = &c.instr(n).op {
                        loops.push((cid, n, *body, trip_count(&m, c, n)));
                    }
                }
            }
            let inputs =
                npz::read_inputs(dir.join(format!("{name}.inputs.npz")), &m.entry_param_shapes())
                    .unwrap_or_else(|e| panic!("{file}: {e}"));
            let hooks = Executions::default();
            interp::Interpreter::new(&m)
                .with_hooks(&hooks)
                .run(&inputs)
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            let counts = hooks.roots.lock().unwrap();
            for &(cid, n, body, t) in &loops {
                let c = m.comp(cid);
                let wname = &c.instr(n).name;
                let Some(t) = t else {
                    unknown += 1;
                    continue;
                };
                assert!(!name.contains("dynamic"), "{file}: `{wname}` is data-dependent, not {t}");
                // Only loops whose body no other while shares can be counted alone.
                if loops.iter().filter(|l| l.2 == body).count() != 1 {
                    continue;
                }
                let runs = counts.get(&(cid, n)).copied().unwrap_or(0);
                let body_root = m.comp(body).root().expect("body root");
                let bodies = counts.get(&(body, body_root)).copied().unwrap_or(0);
                assert_eq!(
                    bodies,
                    t * runs,
                    "{file}: `{wname}` ran {runs} times, its body {bodies}"
                );
                claimed += 1;
                // XLA's count, from the induction variable alone.
                let config = c.instr(n).extras.as_ref().and_then(|x| x.backend_config.clone());
                if config.is_some_and(|k| k.contains("known_trip_count")) {
                    let mut bare = (*m).clone();
                    bare.comp_mut(cid).instr_mut(n).extras.as_mut().unwrap().backend_config = None;
                    // The induction variable may start outside this computation (a
                    // loop outlined into a call): then there is nothing to compare, but a
                    // count it does give must be XLA's.
                    match trip_count(&bare, bare.comp(cid), n) {
                        Some(x) => {
                            assert_eq!(
                                x, t,
                                "{file}: `{wname}`: XLA says {t}, the induction variable {x}"
                            );
                            xla_agreed += 1;
                        }
                        None => xla_unseen += 1,
                    }
                }
            }
        }
    }
    println!(
        "while trip counts: {claimed} loops counted and confirmed by the interpreter \
         ({xla_agreed} also from the induction variable against XLA's known_trip_count, \
         {xla_unseen} whose initial value is outside their computation), {unknown} not counted"
    );
    assert!(claimed >= 6 && xla_agreed >= 2, "too few counted loops: {claimed}, {xla_agreed}");
}
