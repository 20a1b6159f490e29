//! The TPU backend on every runnable corpus case: optimize `NAME.hlo` with the default
//! pipeline, lower it onto the chip model and run it (timing and values). At HIGHEST
//! precision (f32 matmuls as six bf16 passes, as a TPU runs them) the outputs must match
//! XLA CPU's `NAME.outputs.npz` within `NAME.json`'s tolerances; at DEFAULT (one bf16
//! pass) the error against XLA is measured and must be larger but bounded.

use std::path::PathBuf;

use hlo_chip::config::TpuConfig;
use hlo_interp::seeded;
use hlo_io::compare::Tolerances;
use hlo_io::npz;
use hlo_ir::op::Precision;
use hlo_tpu::engine::Options;
use hlo_tpu::lower::Passes;

fn corpus() -> PathBuf {
    hlo_tests::shared_dir().join("corpus")
}

#[test]
fn tpu_engine_matches_xla_on_the_corpus_at_highest_precision() {
    let dir = corpus();
    let opts = Options::new(TpuConfig::v4(), Passes::All(Precision::Highest));
    let (mut passed, mut skipped, mut failures) = (0, vec![], vec![]);
    for name in hlo_tests::corpus_case_names() {
        let file = dir.join(format!("{name}.hlo"));
        let Some(m) = hlo_tests::optimized_module(&file) else {
            skipped.push(name);
            continue;
        };
        let res = (|| -> Result<(), String> {
            let inputs =
                npz::read_inputs(dir.join(format!("{name}.inputs.npz")), &m.entry_param_shapes())
                    .map_err(|e| e.to_string())?;
            let expected = npz::read_outputs(
                dir.join(format!("{name}.outputs.npz")),
                &m.entry_output_shapes(),
            )
            .map_err(|e| e.to_string())?;
            let tols = Tolerances::from_case_json(dir.join(format!("{name}.json")))
                .map_err(|e| e.to_string())?;
            let run = hlo_tests::tpu_run(&m, &inputs, &opts).map_err(|d| format!("{d:?}"))?;
            hlo_tests::tpu_report_invariants(&name, &run)?;
            hlo_tests::compare_outputs(run.outputs.as_deref().unwrap_or_default(), &expected, &tols)
        })();
        match res {
            Ok(()) => passed += 1,
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    println!(
        "tpu engine (HIGHEST) vs XLA: {passed} cases match, {} failed, skipped (rejected by the checker): {}",
        failures.len(),
        skipped.join(", ")
    );
    assert!(failures.is_empty(), "{} cases differ:\n{}", failures.len(), failures.join("\n"));
    assert!(passed >= 40, "only {passed} corpus cases ran");
}

/// The largest error relative to the expected magnitude, over all outputs.
fn worst_error(actual: &[hlo_ir::Tensor], expected: &[hlo_ir::Tensor]) -> f64 {
    let mut worst = 0f64;
    for (a, e) in actual.iter().zip(expected) {
        let (a, e) = (a.to_f64_vec().expect("numeric"), e.to_f64_vec().expect("numeric"));
        let scale = e.iter().fold(0f64, |m, x| m.max(x.abs())).max(1e-30);
        for (x, y) in a.iter().zip(&e) {
            worst = worst.max((x - y).abs() / scale);
        }
    }
    worst
}

#[test]
fn one_bf16_pass_shows_its_error_against_xla() {
    let dir = corpus();
    for name in ["train_mlp_sgd", "train_cnn_sgd"] {
        let m = hlo_tests::optimized_module(&dir.join(format!("{name}.hlo"))).expect("runnable");
        let inputs =
            npz::read_inputs(dir.join(format!("{name}.inputs.npz")), &m.entry_param_shapes())
                .expect("inputs");
        let expected =
            npz::read_outputs(dir.join(format!("{name}.outputs.npz")), &m.entry_output_shapes())
                .expect("outputs");
        let err = |p: Precision| {
            let run =
                hlo_tests::tpu_run(&m, &inputs, &Options::new(TpuConfig::v4(), Passes::All(p)))
                    .expect("runs");
            worst_error(run.outputs.as_deref().expect("values"), &expected)
        };
        let (one, three, six) =
            (err(Precision::Default), err(Precision::High), err(Precision::Highest));
        println!(
            "{name}: worst error relative to the output's magnitude: 1 pass {one:.2e}, 3 passes {three:.2e}, 6 passes {six:.2e}"
        );
        // bf16 keeps 8 significant bits: one pass is off by ~2^-9 relative per product.
        assert!(
            one > 4.0 * six && one > 1e-4 && one < 0.1,
            "{name}: 1 pass {one:e}, 6 passes {six:e}"
        );
        assert!(three <= one && six < 1e-4, "{name}: 3 passes {three:e}, 6 passes {six:e}");
    }
}

#[test]
fn loops_are_timed_as_executed() {
    // fori_loop's body runs a fixed number of times; its kernels execute that often.
    let dir = corpus();
    let m = hlo_tests::optimized_module(&dir.join("fori_loop.hlo")).expect("runnable");
    let inputs = npz::read_inputs(dir.join("fori_loop.inputs.npz"), &m.entry_param_shapes())
        .expect("inputs");
    let run = hlo_tests::tpu_run(&m, &inputs, &Options::new(TpuConfig::v4(), Passes::AsWritten))
        .expect("runs");
    let r = run.sim.report();
    let body_calls: Vec<u64> = r.per_op.iter().map(|o| o.calls).collect();
    let max = body_calls.iter().copied().max().unwrap_or(0);
    assert!(max > 1, "some kernel of the loop body should run more than once: {body_calls:?}");
    let kernels: u64 = run.sim.stats.iter().map(|s| s.calls).sum();
    assert_eq!(kernels, r.kernels_executed);
    // Timing without values follows the same control flow: the optimized loop's counter
    // lives in a multi-output fusion, and its trip count is read through it.
    let timed = hlo_tests::tpu_simulate(
        &m,
        Some(&inputs),
        &Options::new(TpuConfig::v4(), Passes::AsWritten),
    )
    .expect("simulates");
    assert_eq!(timed.control, "static");
    assert_eq!(timed.sim.report().total_cycles, r.total_cycles);
}

#[test]
fn more_mxus_make_matmul_heavy_steps_faster() {
    let dir = corpus();
    let m = hlo_tests::optimized_module(&dir.join("train_cnn_sgd.hlo")).expect("runnable");
    let cycles = |cfg: TpuConfig| -> (f64, u64) {
        let run = hlo_tests::tpu_simulate(&m, None, &Options::new(cfg, Passes::AsWritten))
            .expect("simulates");
        assert_eq!(run.control, "static");
        let r = run.sim.report();
        let mxu: u64 = run
            .sim
            .kernels
            .iter()
            .zip(&run.sim.stats)
            .filter(|(k, _)| k.0.matmul.is_some())
            .map(|(_, s)| s.mxu_cycles)
            .sum();
        (r.step_time_us, mxu)
    };
    let (v2, v2_mxu) = cycles(TpuConfig::v2());
    let (v3, v3_mxu) = cycles(TpuConfig::v3());
    let (v4, v4_mxu) = cycles(TpuConfig::v4());
    println!(
        "train_cnn_sgd step: v2 {v2:.2} us, v3 {v3:.2} us, v4 {v4:.2} us; MXU cycles {v2_mxu} / {v3_mxu} / {v4_mxu}"
    );
    assert!(v3 < v2 && v4 < v3, "v2 {v2} v3 {v3} v4 {v4}");
    assert!(
        v4_mxu < v3_mxu && v3_mxu < v2_mxu,
        "MXU cycles per config: {v2_mxu} {v3_mxu} {v4_mxu}"
    );
}

#[test]
fn every_runnable_case_lowers_on_every_config_without_values() {
    let dir = corpus();
    let mut n = 0;
    for name in hlo_tests::corpus_case_names() {
        let Some(m) = hlo_tests::optimized_module(&dir.join(format!("{name}.hlo"))) else {
            continue;
        };
        for cfg in [TpuConfig::v2(), TpuConfig::v3(), TpuConfig::v4()] {
            let run =
                hlo_tests::tpu_simulate(&m, None, &Options::new(cfg.clone(), Passes::AsWritten))
                    .unwrap_or_else(|d| panic!("{name} on {}: {d:?}", cfg.name));
            hlo_tests::tpu_report_invariants(&name, &run).unwrap();
            // The printed program names every kernel.
            let lowered = hlo_tests::tpu_lowered(&m, Passes::AsWritten).expect("lowers");
            let text = lowered.program.display(&cfg).to_string();
            for k in lowered.program.kernels() {
                assert!(
                    text.contains(&format!("\"{}\"", k.name)),
                    "{name}: {} not printed",
                    k.name
                );
            }
            let trace = hlo_chip::chip::chrome_trace(&run.sim, &name);
            if let Err(e) = trace_is_well_formed(&trace, run.sim.records.len()) {
                panic!("{name} on {}: {e}", cfg.name);
            }
        }
        n += 1;
    }
    assert!(n >= 40, "{n} cases");
}

#[test]
fn unlowerable_ops_are_errors_naming_them_and_zero_sizes_are_fine() {
    let src = "HloModule m\n\nENTRY e {\n  p = f32[4,4] parameter(0)\n  ROOT ch = f32[4,4] cholesky(p), lower=true\n}\n";
    let m = hlo_check::parse(src).expect("parses");
    let err = match hlo_tests::tpu_simulate(
        &m,
        None,
        &Options::new(TpuConfig::v4(), Passes::AsWritten),
    ) {
        Err(d) => format!("{d:?}"),
        Ok(_) => panic!("a cholesky has no TPU lowering"),
    };
    assert!(err.contains("no TPU lowering for `ch` (cholesky)"), "{err}");

    let src = "HloModule z\n\nENTRY e {\n  a = f32[0,4] parameter(0)\n  b = f32[4,3] parameter(1)\n  d = f32[0,3] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  c = f32[5,0] parameter(2)\n  e = f32[0,5] transpose(c), dimensions={1,0}\n  ROOT t = (f32[0,3], f32[0,5]) tuple(d, e)\n}\n";
    let m = hlo_check::parse(src).expect("parses");
    let inputs = seeded::seeded_inputs(&m.entry_param_shapes(), 1).expect("inputs");
    let run = hlo_tests::tpu_run(&m, &inputs, &Options::new(TpuConfig::v4(), Passes::AsWritten))
        .expect("zero-size dims run");
    assert_eq!(run.outputs.as_ref().map(Vec::len), Some(2));
    hlo_tests::tpu_report_invariants("zero", &run).unwrap();
}

/// A trace Perfetto draws as intended: every slice on a named track, slices on one track
/// never overlap (they would be drawn nested), one slice per executed kernel on the chip's
/// kernel track, and nothing past the end of the step.
fn trace_is_well_formed(trace: &serde_json::Value, records: usize) -> Result<(), String> {
    let events = trace["traceEvents"].as_array().ok_or("no traceEvents")?;
    let mut named = std::collections::HashSet::new();
    let mut tracks: std::collections::HashMap<(u64, u64), Vec<(f64, f64)>> = Default::default();
    for e in events {
        let (pid, tid) =
            (e["pid"].as_u64().unwrap_or(u64::MAX), e["tid"].as_u64().unwrap_or(u64::MAX));
        match e["ph"].as_str() {
            Some("M") if e["name"] == "thread_name" => {
                named.insert((pid, tid));
            }
            Some("X") => {
                let (ts, dur) = (
                    e["ts"].as_f64().ok_or("slice without ts")?,
                    e["dur"].as_f64().ok_or("slice without dur")?,
                );
                if !(ts >= 0.0 && dur > 0.0) {
                    return Err(format!("slice {e} has ts {ts} dur {dur}"));
                }
                tracks.entry((pid, tid)).or_default().push((ts, ts + dur));
            }
            _ => {}
        }
    }
    let cfg = &trace["otherData"];
    let end = cfg["total_cycles"].as_f64().ok_or("no total_cycles")?
        / (cfg["clock_hz"].as_f64().ok_or("no clock_hz")? / 1e6);
    let chip = tracks.keys().map(|k| k.0).max().unwrap_or(0);
    if records > 0 && tracks.get(&(chip, 0)).map_or(0, Vec::len) != records {
        return Err(format!(
            "{records} kernel executions, {} slices on the kernel track",
            tracks.get(&(chip, 0)).map_or(0, Vec::len)
        ));
    }
    for (track, mut v) in tracks {
        if !named.contains(&track) {
            return Err(format!("track {track:?} has no name"));
        }
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in v.windows(2) {
            if w[1].0 < w[0].1 - 1e-6 {
                return Err(format!(
                    "overlapping slices on track {track:?}: {:?} and {:?}",
                    w[0], w[1]
                ));
            }
        }
        if v.last().is_some_and(|l| l.1 > end + 1e-3) {
            return Err(format!("track {track:?} ends after the step ({end} µs)"));
        }
    }
    Ok(())
}

/// A dot whose operands have only batch and contracting dims (a row-wise dot product,
/// flash attention's `sum(dO * O)`) is timed as XLA TPU runs it after strength reduction,
/// a multiply and a reduce on the vector unit: within a small factor of that multiply +
/// reduce written out, never on the MXU one weight tile per row.
#[test]
fn row_dot_products_run_on_the_vector_unit() {
    let text = |body: &str| {
        format!(
            "HloModule m\n\nadd {{\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}}\n\nENTRY e {{\n  a = bf16[16,4096,128] parameter(0)\n  b = bf16[16,4096,128] parameter(1)\n{body}\n}}\n"
        )
    };
    let dot = text(
        "  ROOT d = f32[16,4096] dot(a, b), lhs_batch_dims={0,1}, lhs_contracting_dims={2}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}",
    );
    let reduced = text(
        "  fa = f32[16,4096,128] convert(a)\n  fb = f32[16,4096,128] convert(b)\n  p = f32[16,4096,128] multiply(fa, fb)\n  z = f32[] constant(0)\n  ROOT d = f32[16,4096] reduce(p, z), dimensions={2}, to_apply=add",
    );
    let opts = Options::new(TpuConfig::v5p(), Passes::AsWritten);
    let time = |src: &str| {
        let checked = hlo_driver::parse(src).expect("parses");
        let m = hlo_driver::compile(&checked, &hlo_driver::Host, &Default::default())
            .expect("optimizes")
            .program;
        let run = hlo_tests::tpu_simulate(&m, None, &opts).expect("simulates");
        let r = run.sim.report();
        hlo_tests::tpu_report_invariants("row dot", &run).unwrap();
        (r.total_cycles, r.mxu_util_pct)
    };
    let ((d, d_mxu), (r, _)) = (time(&dot), time(&reduced));
    assert_eq!(d_mxu, 0.0, "the row dot used the MXU");
    assert!(d <= 2 * r && r <= 2 * d, "row dot {d} cycles, multiply + reduce {r}");
}
