//! `fusion` + `multi-output-fusion` on every checkable corpus module (`.hlo`, `.debug.hlo`,
//! `.opt.hlo` with XLA's own fusions, sharded variants): the pipeline verifies
//! after each pass, the printed result re-parses to the same text, and the interpreter
//! gives bit-identical outputs before and after on the case's inputs. Prints one line per
//! case (kernels, fusions by kind beside XLA's `fusion_kinds`, refusals by reason).
//! `FUSION_DUMP_DIR=dir` writes each fused module there (for the XLA oracle).

use std::path::PathBuf;

use hlo_interp as interp;
use hlo_io::npz;
use hlo_passes as passes;
use hlo_passes::fusion::fusion_report;

fn corpus() -> PathBuf {
    hlo_tests::shared_dir().join("corpus")
}

fn xla_kinds(name: &str) -> String {
    let Ok(text) = std::fs::read_to_string(corpus().join(format!("{name}.json"))) else {
        return "-".into();
    };
    // A plain scan (no JSON dependency here): `"fusion_kinds": {"kLoop": 33, ...}`.
    let Some(at) = text.find("\"fusion_kinds\"") else { return "none".into() };
    let rest = &text[at..];
    let (Some(open), Some(close)) = (rest.find('{'), rest.find('}')) else { return "-".into() };
    let body: String =
        rest[open + 1..close].chars().filter(|c| !c.is_whitespace() && *c != '"').collect();
    if body.is_empty() { "none".into() } else { body.replace(':', " ").replace(',', ", ") }
}

fn run_one(name: &str, suffix: &str) -> Result<Option<String>, String> {
    let file = corpus().join(format!("{name}{suffix}"));
    let src = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
    // A module the checks reject is not runnable: skipped, where a parse error fails.
    let m = hlo_tests::parse_verified(&src).map_err(|d| d.render(&src, name, false))?;
    let Ok(m) = hlo_check::check(m, Some(&src)) else { return Ok(None) };
    let (again, report) = hlo_tests::optimize_round_trip(
        &m,
        passes::pipeline_of(&["fusion", "multi-output-fusion"]).map_err(|e| e.to_string())?,
        &src,
        name,
    )?;
    if let Ok(dir) = std::env::var("FUSION_DUMP_DIR") {
        let _ = std::fs::write(
            PathBuf::from(dir).join(format!("{name}{suffix}")),
            hlo_ir::text::print(&again),
        );
    }
    let inputs_file = corpus().join(format!("{name}.inputs.npz"));
    let inputs = if inputs_file.exists() {
        npz::read_inputs(&inputs_file, &m.entry_param_shapes()).ok()
    } else {
        None
    };
    let verdict = if let Some(inputs) = inputs {
        let a = interp::run(&m, &inputs).map_err(|e| e.message.clone());
        let b = interp::run(&again, &inputs).map_err(|e| e.message.clone());
        match (a, b) {
            (Ok(a), Ok(b)) if a == b => "same",
            (Ok(_), Ok(_)) => return Err("interpreter outputs differ after fusion".into()),
            (Err(_), _) => "not run",
            (Ok(_), Err(e)) => return Err(format!("fused module fails in the interpreter: {e}")),
        }
    } else {
        "no inputs for this signature"
    };
    let r = fusion_report(
        &m,
        &again,
        &report
            .context
            .report::<hlo_passes::fusion::decision::FusionLog>()
            .cloned()
            .unwrap_or_default(),
    );
    if std::env::var("FUSION_LOG").is_ok() {
        use hlo_passes::fusion::decision::Outcome;
        for d in &report
            .context
            .report::<hlo_passes::fusion::decision::FusionLog>()
            .cloned()
            .unwrap_or_default()
            .decisions
        {
            if let Outcome::Refused(x) = d.outcome {
                println!(
                    "  {} {}: {} ({}, {} B) -> {} ({}): {}",
                    d.pass,
                    d.computation,
                    d.producer,
                    d.producer_op.name(),
                    d.producer_bytes,
                    d.consumer,
                    d.consumer_op.name(),
                    x.as_str()
                );
            }
        }
        println!("{r}");
    }
    let kinds: Vec<String> = r.fusions_by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let refusals: Vec<String> =
        r.refusals.iter().map(|(x, n)| format!("{} {n}", x.as_str())).collect();
    Ok(Some(format!(
        "{name}{suffix}: kernels {} -> {}; fusions {} ({} multi-output); XLA {}; interp {verdict}; refusals: {}",
        r.kernels_before,
        r.kernels_after,
        if kinds.is_empty() { "none".into() } else { kinds.join(", ") },
        r.multi_output_fusions,
        xla_kinds(name),
        refusals.join(", ")
    )))
}

#[test]
fn fusion_keeps_corpus_outputs_bit_identical() {
    let names = hlo_tests::corpus_case_names();
    let only = std::env::var("FUSION_ONLY").ok();
    let mut failures = Vec::new();
    let mut ran = 0;
    for name in &names {
        if only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        for suffix in [".hlo", ".debug.hlo", ".opt.hlo", ".propagated.hlo", ".sdy.hlo"] {
            if !corpus().join(format!("{name}{suffix}")).exists() {
                continue;
            }
            match run_one(name, suffix) {
                Ok(Some(line)) => {
                    ran += 1;
                    println!("{line}");
                }
                Ok(None) => {}
                Err(e) => failures.push(format!("{name}{suffix}: {e}")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} corpus files fail under fusion:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(ran > 0 || only.is_some());
}

/// A 100k-instruction module (long elementwise chains with shared operands, broadcasts
/// and reduces): both passes must handle it without quadratic work.
#[test]
fn fusion_handles_a_large_module() {
    let mut s = String::from(
        "HloModule big\n\nsum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\nENTRY main {\n",
    );
    s.push_str("  x = f32[4,8] parameter(0)\n  c = f32[] constant(1)\n  z = f32[] constant(0)\n");
    let mut prev = "x".to_string();
    let n = 20_000;
    let mut outs = Vec::new();
    for k in 0..n {
        s.push_str(&format!("  b{k} = f32[4,8] broadcast(c), dimensions={{}}\n"));
        s.push_str(&format!("  a{k} = f32[4,8] add({prev}, b{k})\n"));
        s.push_str(&format!("  m{k} = f32[4,8] multiply(a{k}, b{k})\n"));
        s.push_str(&format!("  e{k} = f32[4,8] exponential(m{k})\n"));
        if k % 100 == 99 {
            s.push_str(&format!(
                "  r{k} = f32[4] reduce(e{k}, z), dimensions={{1}}, to_apply=sum\n"
            ));
            outs.push(format!("r{k}"));
        }
        prev = format!("e{k}");
    }
    let shapes = vec!["f32[4]"; outs.len()].join(", ");
    s.push_str(&format!(
        "  ROOT t = ({shapes}, f32[4,8]) tuple({}, {prev})\n}}\n",
        outs.join(", ")
    ));
    let m = hlo_check::parse(&s).expect("the generated module parses");
    assert!(m.instr_count() > 80_000);
    let mut fused = (*m).clone();
    let mut p = passes::pipeline_of(&["fusion", "multi-output-fusion"]).expect("registered");
    p.verify_each = false;
    let report = p.run(&mut fused).expect("fusion runs");
    println!("{}", report.time_table());
    assert!(
        hlo_check::diagnose(&fused, None).is_empty()
            || !hlo_check::diagnose(&fused, None).has_errors()
    );
    let r = fusion_report(
        &m,
        &fused,
        &report
            .context
            .report::<hlo_passes::fusion::decision::FusionLog>()
            .cloned()
            .unwrap_or_default(),
    );
    assert!(r.kernels_after < r.kernels_before / 2, "{r}");
}
