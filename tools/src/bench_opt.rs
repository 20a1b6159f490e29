//! `hloc bench pipeline` and `hloc bench scaling`: how long the optimization pipeline
//! takes on every corpus case (beside XLA's compile time), and how each pass scales on
//! synthetic modules of 1k, 10k and 100k instructions.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use hlo_passes as passes;
use hlo_tools::error::CliError;

use crate::bench::median;

/// Runs the default pipeline `repeat` times on clones of `m`; the median total and the
/// median time of one run of each pass (averaged over its runs within a pipeline run).
fn time_pipeline(
    m: &hlo_check::Checked<hlo_ir::Module>,
    repeat: usize,
) -> Result<(Duration, BTreeMap<&'static str, Duration>, usize), String> {
    let mut totals = Vec::new();
    let mut per_pass: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
    let mut after = 0;
    for _ in 0..repeat.max(1) {
        // The driver's optimize phase for the host (verification between passes off).
        let compiled = hlo_driver::compile(m, &hlo_driver::Host, &hlo_driver::Options::default())
            .map_err(|d| d.to_string())?;
        let report = compiled.optimization.ok_or("the optimize phase did not run")?;
        totals.push(report.total);
        // Time per run of each pass (a fixpoint group may run a pass a different number
        // of times on different modules).
        let mut sums: BTreeMap<&'static str, Duration> = BTreeMap::new();
        let mut runs: BTreeMap<&'static str, u32> = BTreeMap::new();
        for r in &report.runs {
            *sums.entry(r.pass).or_default() += r.wall;
            *runs.entry(r.pass).or_default() += 1;
        }
        let sums: BTreeMap<&'static str, Duration> =
            sums.into_iter().map(|(k, v)| (k, v / runs[k].max(1))).collect();
        for (k, v) in sums {
            per_pass.entry(k).or_default().push(v);
        }
        after = compiled.program.instr_count();
    }
    Ok((median(totals), per_pass.into_iter().map(|(k, v)| (k, median(v))).collect(), after))
}

/// XLA's compile times in ms per case from `xla_timings.py --json` (text route, cold
/// compile), measured now on this machine.
fn xla_compile_ms(shared: &Path) -> Option<BTreeMap<String, (f64, f64)>> {
    let py = hlo_io::oracle::python()?;
    let out_json =
        std::env::temp_dir().join(format!("hloc-xla-timings-{}.json", std::process::id()));
    eprintln!("note: measuring XLA's compile times with xla_timings.py (about a minute)...");
    let status = std::process::Command::new(py)
        .arg(shared.join("xla-oracle/xla_timings.py"))
        .args(["--runs", "3", "--json"])
        .arg(&out_json)
        .stdout(std::process::Stdio::null())
        .status()
        .ok()?;
    if !status.success() {
        eprintln!("note: xla_timings.py failed; the XLA columns stay empty");
        return None;
    }
    let text = std::fs::read_to_string(&out_json).ok()?;
    let _ = std::fs::remove_file(&out_json);
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let rows = v.get("rows")?.as_array()?;
    Some(
        rows.iter()
            .filter_map(|r| {
                let name = r.get("case")?.as_str()?.to_string();
                let compile = r.get("compile_ms").and_then(|x| x.as_f64()).unwrap_or(f64::NAN);
                let text = r.get("text_compile_ms").and_then(|x| x.as_f64()).unwrap_or(f64::NAN);
                Some((name, (compile, text)))
            })
            .collect(),
    )
}

/// The corpus cases (`NAME.json` with a `NAME.hlo` beside it), sorted.
pub(crate) fn corpus_cases(corpus: &Path) -> Result<Vec<String>, CliError> {
    let mut names: Vec<String> = match std::fs::read_dir(corpus) {
        Ok(d) => d
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".json").map(str::to_string))
            .collect(),
        Err(e) => return Err(CliError::io("read", corpus, e)),
    };
    names.retain(|n| corpus.join(format!("{n}.hlo")).exists());
    names.sort();
    Ok(names)
}

/// A case's `NAME.json`, if it reads and parses.
pub(crate) fn case_json(corpus: &Path, name: &str) -> Option<serde_json::Value> {
    serde_json::from_str(&std::fs::read_to_string(corpus.join(format!("{name}.json"))).ok()?).ok()
}

/// One row per corpus case: instructions before/after, our pipeline time, XLA's compile
/// time (from the case's json, and measured now with `--xla`).
pub fn pipeline(shared: &Path, repeat: usize, measure_xla: bool) -> Result<ExitCode, CliError> {
    let corpus = shared.join("corpus");
    let names = corpus_cases(&corpus)?;
    let xla = if measure_xla { xla_compile_ms(shared) } else { None };
    outln!(
        "{:<28} {:>7} {:>7} {:>10} {:>12} {:>12} {:>9}  slowest pass",
        "case",
        "instrs",
        "after",
        "opt ms",
        "XLA comp ms",
        "XLA text ms",
        "XLA/ours"
    );
    let mut failed = false;
    let (mut ours_sum, mut xla_sum) = (0.0, 0.0);
    for name in &names {
        let Ok(src) = std::fs::read_to_string(corpus.join(format!("{name}.hlo"))) else { continue };
        let Ok(m) = hlo_driver::parse(&src) else {
            continue; // rejected by design (dynamic shapes)
        };
        let json_compile = case_json(&corpus, name)
            .and_then(|v| v.pointer("/timing_s/compile")?.as_f64())
            .map(|s| s * 1e3);
        match time_pipeline(&m, repeat) {
            Ok((t, per_pass, after)) => {
                let ours = t.as_secs_f64() * 1e3;
                let measured = xla.as_ref().and_then(|x| x.get(name)).copied();
                let compile = measured.map(|x| x.0).or(json_compile);
                let text = measured.map(|x| x.1);
                let ratio = compile.filter(|c| c.is_finite()).map(|c| {
                    ours_sum += ours;
                    xla_sum += c;
                    format!("{:.0}x", c / ours)
                });
                let slowest = per_pass
                    .iter()
                    .max_by_key(|x| *x.1)
                    .map(|(p, d)| format!("{p} {:.2} ms", d.as_secs_f64() * 1e3))
                    .unwrap_or_default();
                let fmt = |x: Option<f64>| {
                    x.filter(|v| v.is_finite()).map_or("-".to_string(), |v| format!("{v:.1}"))
                };
                outln!(
                    "{:<28} {:>7} {:>7} {:>10.2} {:>12} {:>12} {:>9}  {slowest}",
                    name,
                    m.instr_count(),
                    after,
                    ours,
                    fmt(compile),
                    fmt(text),
                    ratio.unwrap_or_else(|| "-".into())
                );
            }
            Err(e) => {
                eprintln!("error: {name}: {e}");
                failed = true;
            }
        }
    }
    if xla_sum > 0.0 {
        outln!(
            "total: ours {ours_sum:.1} ms, XLA compile {xla_sum:.1} ms ({:.0}x)",
            xla_sum / ours_sum
        );
    }
    outln!(
        "(opt ms: median of {repeat} runs of the default pipeline, verification off; XLA comp ms: {})",
        if xla.is_some() {
            "measured now by xla_timings.py (jit compile, cold)"
        } else {
            "the case json's timing_s.compile (pass --xla to measure now)"
        }
    );
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// A synthetic training-step-like module of about `n` instructions: blocks of dot, bias,
/// a called activation, x*1, a double transpose, duplicated exp, reduce/broadcast
/// normalization and a foldable constant, chained. Every pass of the default pipeline finds
/// work in every block.
pub fn synthetic(n: usize) -> String {
    const PER_BLOCK: usize = 22;
    let blocks = (n / PER_BLOCK).max(1);
    let mut s = String::with_capacity(blocks * 1200);
    s.push_str(&format!("HloModule synth_{n}\n\n"));
    s.push_str("%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n  ROOT %s = f32[] add(%a, %b)\n}\n\n");
    s.push_str("%act (x: f32[64,64]) -> f32[64,64] {\n  %x = f32[64,64] parameter(0)\n  %z = f32[] constant(0)\n  %zb = f32[64,64] broadcast(%z), dimensions={}\n  ROOT %m = f32[64,64] maximum(%x, %zb)\n}\n\n");
    s.push_str("ENTRY %main (x: f32[64,64], w: f32[64,64], b: f32[64]) -> f32[64,64] {\n");
    s.push_str("  %x = f32[64,64] parameter(0)\n  %w = f32[64,64] parameter(1)\n  %b = f32[64] parameter(2)\n");
    let mut h = "x".to_string();
    for i in 0..blocks {
        // `s1`, `f16`, ... would spell types: the block number follows an underscore.
        let l = |k: &str| format!("{k}_{i}");
        let lines = [
            format!(
                "%{} = f32[64,64] dot(%{h}, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}",
                l("d")
            ),
            format!("%{} = f32[64,64] broadcast(%b), dimensions={{1}}", l("bb")),
            format!("%{} = f32[64,64] add(%{}, %{})", l("a"), l("d"), l("bb")),
            format!("%{} = f32[64,64] call(%{}), to_apply=%act", l("c"), l("a")),
            format!("%{} = f32[] constant(1)", l("one")),
            format!("%{} = f32[64,64] broadcast(%{}), dimensions={{}}", l("ob"), l("one")),
            format!("%{} = f32[64,64] multiply(%{}, %{})", l("m"), l("c"), l("ob")),
            format!("%{} = f32[64,64] transpose(%{}), dimensions={{1,0}}", l("t"), l("m")),
            format!("%{} = f32[64,64] transpose(%{}), dimensions={{1,0}}", l("tt"), l("t")),
            format!("%{} = f32[64,64] exponential(%{})", l("e"), l("tt")),
            format!("%{} = f32[64,64] exponential(%{})", l("f"), l("tt")),
            format!("%{} = f32[64,64] add(%{}, %{})", l("s"), l("e"), l("f")),
            format!("%{} = f32[] constant(0)", l("z")),
            format!(
                "%{} = f32[64] reduce(%{}, %{}), dimensions={{1}}, to_apply=%add",
                l("r"),
                l("s"),
                l("z")
            ),
            format!("%{} = f32[64,64] broadcast(%{}), dimensions={{0}}", l("rb"), l("r")),
            format!("%{} = f32[64,64] subtract(%{}, %{})", l("n"), l("s"), l("rb")),
            format!("%{} = f32[] constant(2)", l("k")),
            format!("%{} = f32[] constant(3)", l("q")),
            format!("%{} = f32[] multiply(%{}, %{})", l("kq"), l("k"), l("q")),
            format!("%{} = f32[64,64] broadcast(%{}), dimensions={{}}", l("kb"), l("kq")),
            format!("%{} = f32[64,64] divide(%{}, %{})", l("h"), l("n"), l("kb")),
        ];
        for line in lines {
            s.push_str("  ");
            s.push_str(&line);
            s.push('\n');
        }
        h = l("h");
    }
    s.push_str(&format!("  ROOT %out = f32[64,64] negate(%{h})\n}}\n"));
    s
}

/// Per-pass time on synthetic modules of 1k, 10k and 100k instructions and the growth
/// ratio per 10x: near-linear passes stay at or under 12x.
pub fn scaling(repeat: usize, synthetic_dir: Option<&Path>) -> Result<(), CliError> {
    let sizes = [1_000usize, 10_000, 100_000];
    let mut rows: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
    let mut totals = Vec::new();
    let mut counts = Vec::new();
    for &n in &sizes {
        let src = synthetic(n);
        if let Some(dir) = synthetic_dir {
            let file = dir.join(format!("synthetic_{n}.hlo"));
            if let Err(e) = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&file, &src))
            {
                return Err(CliError::io("write", file, e));
            }
        }
        let m = match hlo_driver::parse(&src) {
            Ok(m) => m,
            Err(d) => {
                eprint!("{}", d.render(&src, "synthetic.hlo", false));
                return Err(CliError::Reported);
            }
        };
        counts.push(m.instr_count());
        match time_pipeline(&m, if n >= 100_000 { repeat.min(3) } else { repeat }) {
            Ok((t, per_pass, _)) => {
                totals.push(t);
                for (p, d) in per_pass {
                    rows.entry(p).or_default().push(d);
                }
            }
            Err(e) => return Err(format!("synthetic {n}: {e}").into()),
        }
    }
    outln!(
        "{:<36} {:>11} {:>11} {:>11} {:>9} {:>9}",
        "instructions",
        counts[0],
        counts[1],
        counts[2],
        "",
        ""
    );
    outln!(
        "{:<36} {:>11} {:>11} {:>11} {:>9} {:>9}",
        "pass (median ms per run)",
        "1k",
        "10k",
        "100k",
        "1k->10k",
        "10k->100k"
    );
    let mut worst: f64 = 0.0;
    let ratio = |a: Duration, b: Duration| b.as_secs_f64() / a.as_secs_f64().max(1e-9);
    for (p, v) in rows.iter().chain(std::iter::once((&"total", &totals))) {
        if v.len() < 3 {
            continue;
        }
        let (r1, r2) = (ratio(v[0], v[1]), ratio(v[1], v[2]));
        if *p != "total" && v[1].as_secs_f64() > 1e-3 {
            worst = worst.max(r2);
        }
        outln!(
            "{:<36} {:>11.3} {:>11.3} {:>11.3} {:>8.1}x {:>8.1}x",
            p,
            v[0].as_secs_f64() * 1e3,
            v[1].as_secs_f64() * 1e3,
            v[2].as_secs_f64() * 1e3,
            r1,
            r2
        );
    }
    outln!(
        "worst 10k->100k growth of a pass taking over 1 ms: {worst:.1}x (near-linear: at most 12x)"
    );
    outln!(
        "(wall time includes memory effects: past ~10k instructions the graph outgrows the L2 cache; tools/pass_instruction_counts.sh counts executed instructions instead)"
    );
    Ok(())
}

/// The fusion report of every `train_*` corpus case after the default pipeline, beside
/// XLA's own fusion counts (`fusion_kinds` in the case's json).
pub fn fusion(shared: &Path) -> Result<(), CliError> {
    let corpus = shared.join("corpus");
    let mut names = corpus_cases(&corpus)?;
    names.retain(|n| n.starts_with("train_"));
    outln!(
        "{:<24} {:>15} {:>30} {:>22} {:>11}  refusals (most frequent)",
        "case",
        "kernels",
        "ours",
        "XLA fusion_kinds",
        "KB saved"
    );
    for name in names {
        let Ok(src) = std::fs::read_to_string(corpus.join(format!("{name}.hlo"))) else { continue };
        let Ok(m) = hlo_driver::parse(&src) else { continue };
        let compiled =
            match hlo_driver::compile(&m, &hlo_driver::Host, &hlo_driver::Options::default()) {
                Ok(c) => c,
                Err(d) => return Err(format!("{name}: {d}").into()),
            };
        let (after, report) = (&compiled.program, compiled.optimization.unwrap_or_default());
        let r = passes::fusion::report::fusion_report(
            &m,
            after,
            &report
                .context
                .report::<passes::fusion::decision::FusionLog>()
                .cloned()
                .unwrap_or_default(),
        );
        let xla = case_json(&corpus, &name)
            .and_then(|v| v.get("fusion_kinds")?.as_object().cloned())
            .map(|o| {
                o.iter()
                    .map(|(k, v)| format!("{}={}", k.trim_start_matches('k'), v))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|| "-".into());
        let ours = r
            .fusions_by_kind
            .iter()
            .map(|(k, n)| format!("{}={n}", k.trim_start_matches('k')))
            .collect::<Vec<_>>()
            .join(" ");
        let ours = if r.multi_output_fusions > 0 {
            format!("{ours} (multi-output {})", r.multi_output_fusions)
        } else {
            ours
        };
        let mut refusals: Vec<(hlo_passes::fusion::decision::Refusal, usize)> = r.refusals.clone();
        refusals.sort_by_key(|x| std::cmp::Reverse(x.1));
        let top = refusals
            .iter()
            .take(4)
            .map(|(k, n)| format!("{} {n}", k.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        outln!(
            "{:<24} {:>15} {:>30} {:>22} {:>11.1}  {top}",
            name,
            format!("{} -> {}", r.kernels_before, r.kernels_after),
            ours,
            xla,
            r.intermediate_bytes_eliminated as f64 / 1024.0
        );
    }
    outln!(
        "(kernels: top-level instructions other than parameters, constants, tuples, get-tuple-element and bitcasts; XLA's CPU backend emits kLoop fusions and kCustom library dots)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn synthetic_modules_are_valid_hlo_of_the_asked_size() {
        for n in [1_000usize, 10_000] {
            let src = super::synthetic(n);
            let m = hlo_driver::parse(&src).unwrap_or_else(|d| {
                panic!("synthetic({n}):\n{}", d.render(&src, "synthetic.hlo", false))
            });
            let count = m.instr_count();
            assert!(count.abs_diff(n) * 20 < n, "synthetic({n}) has {count} instructions");
        }
    }
}
