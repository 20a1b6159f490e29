//! `hloc plan`: bad requests are refused naming the constraint, before anything is built;
//! a plan of a small decoder enumerates, simulates and ranks its candidates, with an HBM
//! lower bound that never exceeds what the simulation finds.

use std::process::{Command, Output};

use serde_json::{Value, json};

fn oracle_present() -> bool {
    match hlo_io::oracle::python() {
        Some(_) => true,
        None if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("plan_cli: the XLA oracle is missing under CI=true")
        }
        None => {
            println!("SKIPPED plan_cli: no oracle python");
            false
        }
    }
}

fn hloc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hloc")).args(args).output().expect("hloc runs")
}

/// A fresh directory, removed when the returned guard drops (a failing test's too).
fn temp_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("hloc-plan-{tag}-")).tempdir().expect("temp dir")
}

/// A two-layer decoder small enough to lower and simulate in a second.
fn small_model() -> Value {
    // Grouped-query attention: two key/value heads for four query heads.
    json!({"family": "decoder-lm", "layers": 2, "emb": 256, "heads": 4, "kv_heads": 2,
           "head_dim": 64, "mlp": 1024, "vocab": 1024, "seq": 128, "remat": "full"})
}

#[test]
fn bad_requests_name_the_constraint() {
    let scratch = temp_dir("bad");
    let dir = scratch.path();
    let model = dir.join("model.json");
    std::fs::write(&model, small_model().to_string()).expect("write");
    let m = model.to_str().expect("utf-8");
    // Models the generator would refuse for every candidate, or build with no heads.
    let bad_model = |name: &str, edit: &dyn Fn(&mut Value)| {
        let mut v = small_model();
        edit(&mut v);
        let p = dir.join(name);
        std::fs::write(&p, v.to_string()).expect("write");
        p.to_str().expect("utf-8").to_string()
    };
    let no_heads = bad_model("no_heads.json", &|v| v["heads"] = json!(0));
    let kv3 = bad_model("kv3.json", &|v| v["kv_heads"] = json!(3));
    let no_mlp = bad_model("no_mlp.json", &|v| {
        v.as_object_mut().expect("object").remove("mlp");
    });
    let half_layer = bad_model("half.json", &|v| v["layers"] = json!(2.5));
    let sized = ["--chip", "v4", "--chips", "8", "--global-batch", "8"];
    let row = "maxtext-22b-1x-v4-128";
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--row", row, "--tensor", "3"], "a tensor degree of 3 does not divide the 64 chips"),
        (
            vec!["--row", row, "--global-batch", "100"],
            "global batch of 100 does not divide over 64 chips",
        ),
        (vec!["--row", row, "--chip", "v3"], "unknown chip `v3`"),
        (vec!["--row", row, "--chip", "v9"], "unknown chip `v9`"),
        (vec!["--row", "no-such-row"], "no row named `no-such-row`"),
        (vec!["--row", row, "--remat", "some"], "unknown remat policy `some`"),
        (
            vec![
                "--model",
                m,
                "--chip",
                "v5p",
                "--chips",
                "12",
                "--slices",
                "5",
                "--global-batch",
                "12",
            ],
            "12 chips do not split into 5 equal slices",
        ),
        (vec!["--model", m, "--chip", "v5p", "--global-batch", "8"], "give --chips"),
        (vec!["--model", m, "--chips", "8", "--global-batch", "8"], "give --chip"),
        (vec![], "give --row NAME, or --model FILE.json"),
        (
            [&["--model", no_heads.as_str()][..], &sized].concat(),
            "the model's `heads` is 0: it must be a whole number of at least 1",
        ),
        (
            [&["--model", kv3.as_str()][..], &sized].concat(),
            "the model's 3 key/value heads do not divide its 4 heads",
        ),
        ([&["--model", no_mlp.as_str()][..], &sized].concat(), "the model has no `mlp`"),
        ([&["--model", half_layer.as_str()][..], &sized].concat(), "the model's `layers` is 2.5"),
    ];
    for (args, want) in cases {
        let mut all = vec!["plan"];
        all.extend(&args);
        let out = hloc(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted:\n{stderr}");
        assert!(stderr.contains(want), "{args:?}: expected `{want}` in:\n{stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: printed a plan for a bad request");
    }
    // A generator that dies fails every candidate it did not build, with its reason, and
    // the plan fails (nothing was simulated); nothing half-written stays in the cache.
    let cache = dir.join("cache");
    let out = hloc(&[
        "plan",
        "--model",
        m,
        "--chip",
        "v5p",
        "--chips",
        "8",
        "--global-batch",
        "8",
        "--remat",
        "full",
        "--host-lowered",
        "--python",
        "/bin/false",
        "--json",
        "--cache",
        cache.to_str().expect("utf-8"),
    ]);
    assert!(!out.status.success(), "a plan with nothing simulated succeeded");
    let plan: Value = serde_json::from_slice(&out.stdout).expect("a JSON plan");
    assert_eq!(plan["simulated"], 0, "{plan}");
    assert_eq!(plan["failed"], plan["candidates"], "{plan}");
    for c in plan["configurations"].as_array().expect("configurations") {
        assert!(c["error"].as_str().unwrap_or("").contains("the model generator failed"), "{c}");
    }
    let left: Vec<_> = std::fs::read_dir(&cache).expect("cache").flatten().collect();
    assert!(left.is_empty(), "files left in the cache: {left:?}");
    // A model family the planner does not search.
    std::fs::write(&model, json!({"family": "resnet50-v1.5"}).to_string()).expect("write");
    let out = hloc(&["plan", "--model", m, "--chip", "v4", "--chips", "8", "--global-batch", "8"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("model family `resnet50-v1.5`"));
}

#[test]
fn a_small_decoder_is_planned_and_ranked() {
    if !oracle_present() {
        return;
    }
    let scratch = temp_dir("small");
    let dir = scratch.path();
    let model = dir.join("model.json");
    std::fs::write(&model, small_model().to_string()).expect("write");
    let svg = dir.join("plan.svg");
    let out = hloc(&[
        "plan",
        "--model",
        model.to_str().expect("utf-8"),
        "--chip",
        "v5p",
        "--chips",
        "8",
        "--global-batch",
        "32",
        "--tensor",
        "1,2",
        "--remat",
        "full,none",
        "--max-accum",
        "2",
        "--json",
        "--svg",
        svg.to_str().expect("utf-8"),
        "--cache",
        dir.join("cache").to_str().expect("utf-8"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "hloc plan failed:\n{stderr}");
    let plan: Value = serde_json::from_slice(&out.stdout).expect("a JSON plan");
    let configs = plan["configurations"].as_array().expect("configurations");
    // tensor 1 and 2, two remat policies, accumulation 1 and 2 (per-device batch 4).
    assert_eq!(configs.len(), 8, "{plan}");
    assert_eq!(plan["candidates"], 8);
    assert_eq!(plan["simulated"], 8, "nothing is pruned on 95 GiB chips: {plan}");
    assert_eq!(plan["failed"], 0, "{plan}");
    let mut last = 0.0;
    let mut seen = Vec::new();
    for c in configs {
        assert_eq!(c["state"], "fits", "{c}");
        let step = c["step_s"].as_f64().expect("step");
        assert!(step > 0.0 && step >= last, "not ranked by step time: {c}");
        last = step;
        // The pruning bound is a lower bound on what the simulation finds.
        let bound = c["hbm_lower_bound_bytes"].as_u64().expect("bound");
        let peak = c["hbm_peak_bytes"].as_u64().expect("peak");
        assert!(bound > 0 && bound <= peak, "bound {bound} above the simulated peak {peak}: {c}");
        let (fsdp, tensor) = (c["fsdp"].as_u64().unwrap(), c["tensor"].as_u64().unwrap());
        assert_eq!(fsdp * tensor, 8, "{c}");
        assert_eq!(c["micro_batch"].as_u64().unwrap() * c["accum"].as_u64().unwrap(), 4, "{c}");
        let tokens = c["tokens_per_s_per_chip"].as_f64().expect("tokens/s");
        assert!((tokens - 32.0 * 128.0 / step / 8.0).abs() < 1e-6 * tokens, "{c}");
        seen.push((tensor, c["remat"].as_str().unwrap().to_string(), c["accum"].as_u64().unwrap()));
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 8, "every candidate once: {seen:?}");
    // The chart: one bar per simulated configuration in each panel.
    let text = std::fs::read_to_string(&svg).expect("the SVG was written");
    assert!(text.starts_with("<svg") || text.contains("<svg"), "not an SVG");
    assert!(text.matches("<rect").count() >= 2 * 8, "fewer bars than configurations");
    // The text table names every simulated configuration and the counts.
    let out = hloc(&[
        "plan",
        "--model",
        model.to_str().expect("utf-8"),
        "--chip",
        "v5p",
        "--chips",
        "8",
        "--global-batch",
        "32",
        "--tensor",
        "1,2",
        "--remat",
        "full,none",
        "--max-accum",
        "2",
        "--cache",
        dir.join("cache").to_str().expect("utf-8"),
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    assert!(table.contains("8 candidates: 8 simulated, 0 pruned"), "{table}");
    assert!(table.contains("fsdp 4 x tensor 2, remat none, batch 2/device x 2 accum"), "{table}");
}
