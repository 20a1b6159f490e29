//! Every `cases/spmd/` program as partitioned by us runs on real XLA as an already
//! partitioned program (`run_hlo.py --partitions N --partitioned`) and reproduces the
//! unpartitioned module's outputs (computed by the interpreter, the oracle for
//! everything after it) on seeded inputs. Skipped without the oracle; cases with uneven
//! shards are skipped (JAX cannot place unevenly divisible global arrays).

use hlo_interp as interp;
use hlo_interp::seeded;
use hlo_io::npz;
use hlo_spmd::devices;

/// The oracle runs a partitioned program as N replicas of one partition (it rewrites
/// `partition-id` to `replica-id`); a cross-partition `collective-permute` or `all-to-all`
/// (one with a `channel_id` and no `use_global_device_ids`) must then be cross-replica,
/// i.e. lose its channel, for XLA to pair the replicas. Nothing else changes.
fn oracle_text(text: &str) -> String {
    text.lines()
        .map(|l| {
            if !l.contains(" collective-permute(") && !l.contains(" all-to-all(") {
                return l.to_string();
            }
            let Some(at) = l.find("channel_id=") else { return l.to_string() };
            let end = l[at..].find(", ").map_or(l.len(), |e| at + e + 2);
            format!("{}{}", &l[..at], &l[end..])
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn golden_spmd_programs_run_partitioned_on_xla() {
    let Some(python) = hlo_tests::oracle_python(module_path!()) else {
        return;
    };
    let cases = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cases/spmd");
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/spmd-golden-xla");
    std::fs::create_dir_all(&out).expect("target dir");
    let mut failed = Vec::new();
    let mut jobs = Vec::new();
    for file in hlo_tests::hlo_files(&cases) {
        let name = file.file_stem().and_then(|s| s.to_str()).expect("name").to_string();
        let src = std::fs::read_to_string(&file).expect("case");
        let m = hlo_check::parse(&src).expect("case parses");
        let global = hlo_tests::propagated(&m).expect("propagates");
        let plan = devices::plan(&global).unwrap_or_else(|d| panic!("{name}: {}", d.message));
        // JAX places only evenly divisible global arrays (`IndivisibleError`): uneven
        // cases are checked by the golden suite on our devices only.
        let uneven = plan
            .inputs
            .iter()
            .chain(&plan.outputs)
            .any(|s| s.dims.iter().enumerate().any(|(k, &n)| s.p.padded(k, n)));
        if uneven {
            println!("{name}: skipped (uneven shards; the oracle cannot place them)");
            continue;
        }
        let inputs = seeded::seeded_inputs(&m.entry_param_shapes(), 7).expect("inputs");
        let expected = interp::run(&m, &inputs).expect("runs on one device");
        let hlo = out.join(format!("{name}.hlo"));
        std::fs::write(&hlo, oracle_text(&hlo_ir::text::print(&plan.module))).expect("write");
        let named: Vec<(String, &hlo_ir::Tensor)> =
            inputs.iter().enumerate().map(|(i, t)| (format!("p{i}"), t)).collect();
        let refs: Vec<(&str, &hlo_ir::Tensor)> =
            named.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        npz::write_arrays(out.join(format!("{name}.inputs.npz")), &refs).expect("inputs npz");
        npz::write_npz(out.join(format!("{name}.outputs.npz")), &expected).expect("outputs npz");
        let (ins, outs) = hlo_tests::plan_shardings(&plan);
        let tol = serde_json::json!({ "tolerance": { "rtol": 1e-5, "atol": 1e-5 } });
        let meta = serde_json::json!({
            "sharding": { "input_shardings": ins, "output_shardings": outs },
            "outputs": vec![tol; expected.len()],
        });
        let meta_file = out.join(format!("{name}.json"));
        std::fs::write(&meta_file, meta.to_string()).expect("meta");
        let expect = out.join(format!("{name}.outputs.npz"));
        let args: Vec<std::ffi::OsString> = vec![
            "--partitions".into(),
            plan.devices.to_string().into(),
            "--partitioned".into(),
            "--expect".into(),
            expect.into(),
            "--meta".into(),
            meta_file.into(),
        ];
        let inputs_file = out.join(format!("{name}.inputs.npz"));
        jobs.push((name, hlo, inputs_file, args));
    }
    // The oracle runs (a Python start and an XLA compile each) on one worker per core.
    let verdicts = hlo_tests::par_map(&jobs, |(name, hlo, inputs, args)| {
        let (ok, verdict, all) = hlo_tests::run_oracle(&python, hlo, inputs, args);
        (name.clone(), ok, verdict, all)
    });
    for (name, ok, verdict, all) in &verdicts {
        println!("{name}: {verdict}");
        if !ok {
            failed.push(format!(
                "{name}:\n{}",
                all.lines().rev().take(4).collect::<Vec<_>>().join("\n")
            ));
        }
    }
    let ran = verdicts.len();
    assert!(ran >= 6, "only {ran} spmd cases");
    assert!(
        failed.is_empty(),
        "XLA does not reproduce the outputs from our partitioned programs:\n{}",
        failed.join("\n")
    );
}
