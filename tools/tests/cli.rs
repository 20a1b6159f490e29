//! End-to-end tests of the `hloc` binary: exit codes, streams, and diagnostics locations.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn hloc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hloc")).args(args).output().expect("hloc runs")
}

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../hlo-tests/cases")
}

fn shared() -> PathBuf {
    hlo_tests::shared_dir()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_documents_every_subcommand() {
    let o = hloc(&["--help"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    for sub in ["parse", "check", "opt", "run", "sim", "bench"] {
        assert!(text.contains(sub), "`hloc --help` does not mention `{sub}`:\n{text}");
    }
    let o = hloc(&["parse", "--help"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("--no-verify"));
}

#[test]
fn bench_is_one_subcommand_per_benchmark() {
    let o = hloc(&["bench", "--help"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    for sub in ["parse", "pipeline", "scaling", "fusion", "jit", "tpu", "spmd"] {
        assert!(text.contains(&format!("  {sub} ")), "`hloc bench --help` lacks `{sub}`:\n{text}");
    }
    // No benchmark is a usage error, as is a flag of another benchmark.
    let o = hloc(&["bench"]);
    assert!(!o.status.success(), "`hloc bench` alone ran something");
    let o = hloc(&["bench", "tpu", "--bench-set"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--bench-set"), "{}", stderr(&o));
    // One benchmark runs and prints its table.
    let file = shared().join("corpus/softmax.debug.hlo");
    let o = hloc(&["bench", "parse", file.to_str().expect("utf-8 path"), "--repeat", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("softmax.debug.hlo"));
}

#[test]
fn parse_prints_canonical_text_that_parses_again() {
    let file = shared().join("corpus/softmax.debug.hlo");
    let o = hloc(&["parse", file.to_str().expect("utf-8 path")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stderr.is_empty(), "a clean module prints no diagnostics: {}", stderr(&o));
    let first = String::from_utf8(o.stdout).expect("utf-8 output");
    assert!(first.starts_with("HloModule jit_f"));
    // Feed the output back through stdin: the text is a fixpoint.
    let mut child = Command::new(env!("CARGO_BIN_EXE_hloc"))
        .args(["parse", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hloc runs");
    child.stdin.take().expect("stdin").write_all(first.as_bytes()).expect("write stdin");
    let again = child.wait_with_output().expect("hloc finishes");
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(String::from_utf8(again.stdout).expect("utf-8"), first);
}

/// Every case with an `// error-at: L:C` directive fails with exit code 1 and a first
/// diagnostic at exactly that place, without panicking.
#[test]
fn malformed_inputs_exit_1_with_located_diagnostics() {
    let mut checked = 0;
    for suite in ["parse", "verify"] {
        let dir = cases_dir().join(suite);
        for path in hlo_tests::hlo_files(&dir) {
            let src = std::fs::read_to_string(&path).expect("case is UTF-8");
            let Some((line, col)) = hlo_tests::expected_error_at(&src) else {
                continue;
            };
            let p = path.to_str().expect("utf-8 path");
            let o = hloc(&["parse", p]);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(1), "{p}: expected exit code 1, stderr:\n{err}");
            assert!(!err.contains("panicked"), "{p} panicked:\n{err}");
            assert!(o.stdout.is_empty(), "{p}: nothing may be printed to stdout on error");
            let want = format!("{p}:{line}:{col}: error:");
            assert!(
                err.starts_with(&want),
                "{p}: expected the first diagnostic to start with `{want}`, got:\n{err}"
            );
            checked += 1;
        }
    }
    println!("{checked} malformed cases exit 1 with the diagnostic at the expected line:col");
    assert!(checked >= 40, "only {checked} malformed cases");
}

#[test]
fn unreadable_inputs_are_clear_errors() {
    let o = hloc(&["parse", "/definitely/not/here.hlo"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cannot read `/definitely/not/here.hlo`"), "{}", stderr(&o));

    let scratch = scratch("cli");

    let dir = scratch.path();
    let bad = dir.join("latin1.hlo");
    std::fs::write(&bad, b"HloModule m\n// caf\xe9\n").expect("write");
    let o = hloc(&["parse", bad.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("latin1.hlo:2:7: error: the file is not UTF-8 text (invalid byte 0xe9"),
        "{}",
        stderr(&o)
    );
    // A binary file: located at its first NUL byte, also on standard input.
    let bin = dir.join("model.bin");
    std::fs::write(&bin, b"\x89HLO\r\n\x00\x01\x02").expect("write");
    let o = hloc(&["parse", bin.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("model.bin:1:1: error: the file is not UTF-8 text")
            || stderr(&o).contains("model.bin:2:1: error: this is a binary file"),
        "{}",
        stderr(&o)
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_hloc"))
        .args(["parse", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("hloc runs");
    std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), b"HloModule m\n\x00")
        .expect("write");
    let o = child.wait_with_output().expect("exits");
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("<stdin>:2:1: error: this is a binary file"), "{}", stderr(&o));
}

#[test]
fn output_file_is_written_only_on_success() {
    let scratch = scratch("out");
    let dir = scratch.path();
    let out = dir.join("out.hlo");
    let good = shared().join("corpus/dot_matmul.hlo");
    let o = hloc(&["parse", good.to_str().expect("utf-8"), "-o", out.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&out).expect("written").starts_with("HloModule"));

    let bad = dir.join("bad.hlo");
    std::fs::write(&bad, "HloModule m\nENTRY e {\n  ROOT x = f32[] bogus-op()\n}\n")
        .expect("write");
    let out2 = dir.join("out2.hlo");
    let o = hloc(&["parse", bad.to_str().expect("utf-8"), "-o", out2.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(!out2.exists(), "no output file may be created on error");
}

#[test]
fn no_verify_skips_the_verifier() {
    let scratch = scratch("nv");
    let dir = scratch.path();
    let f = dir.join("cycle.hlo");
    std::fs::write(
        &f,
        "HloModule m\nENTRY e {\n  a = f32[] negate(b)\n  ROOT b = f32[] negate(a)\n}\n",
    )
    .expect("write");
    let p = f.to_str().expect("utf-8");
    let o = hloc(&["parse", p]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cycle in computation `e`"), "{}", stderr(&o));
    let o = hloc(&["parse", "--no-verify", p]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn check_accepts_every_corpus_module_but_the_dynamic_ones() {
    // Only these two carry data-dependent shapes; everything else (plain, dump style,
    // XLA-optimized, Shardy, propagated) must be accepted.
    const REJECTED: [&str; 2] = ["dyn_bounded_hlo.hlo", "dyn_unbounded_export.hlo"];
    let files = hlo_tests::hlo_files(&shared().join("corpus"));
    assert!(files.len() >= 130, "only {} corpus modules found", files.len());
    let mut wrong = Vec::new();
    for f in &files {
        let name = f.file_name().and_then(|n| n.to_str()).expect("utf-8 name");
        let o = hloc(&["check", f.to_str().expect("utf-8 path")]);
        let code = o.status.code();
        let want = if REJECTED.contains(&name) { 1 } else { 0 };
        if code != Some(want) {
            wrong.push(format!("{name}: exit {code:?}, expected {want}\n{}", stderr(&o)));
        }
        if want == 1 && !stderr(&o).contains(": error: ") {
            wrong.push(format!("{name}: rejected without a located diagnostic"));
        }
    }
    println!("hloc check: {} corpus modules, {} rejected as expected", files.len(), REJECTED.len());
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A fresh directory, removed when the returned guard drops (a failing test's too).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("hloc-{name}-")).tempdir().expect("temp dir")
}

/// A fresh scratch directory, the output path inside it, and a corpus file path helper.
fn run_scratch(name: &str) -> (tempfile::TempDir, PathBuf, impl Fn(&str) -> String) {
    let dir = scratch(name);
    let out = dir.path().join("out.npz");
    let corpus = shared().join("corpus");
    (dir, out, move |n: &str| corpus.join(n).to_str().expect("utf-8 path").to_string())
}

#[test]
fn run_writes_outputs_that_match_xla() {
    let (_scratch, out, p) = run_scratch("run");
    let o = hloc(&[
        "run",
        &p("layernorm.hlo"),
        "--inputs",
        &p("layernorm.inputs.npz"),
        "-o",
        out.to_str().expect("utf-8"),
        "--engine",
        "interp",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.exists(), "no output file written");
    // The written file holds what XLA computed (checked through --expect on a second run
    // would be circular; read it back and compare here).
    let m = hlo_driver::parse(&std::fs::read_to_string(p("layernorm.hlo")).expect("read"))
        .expect("valid");
    let got = hlo_io::npz::read_outputs(&out, &m.entry_output_shapes())
        .expect("our own output file reads back");
    let want = hlo_io::npz::read_outputs(p("layernorm.outputs.npz"), &m.entry_output_shapes())
        .expect("expected outputs");
    let tols =
        hlo_io::compare::Tolerances::from_case_json(p("layernorm.json")).expect("tolerances");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        hlo_io::compare::compare(g, w, tols.get(i).expect("tolerance"))
            .unwrap_or_else(|e| panic!("o{i}: {e}"));
    }
    // --expect compares in the CLI and fails on a mismatch (here: another case's outputs).
    let o = hloc(&[
        "run",
        &p("layernorm.hlo"),
        "--inputs",
        &p("layernorm.inputs.npz"),
        "--expect",
        &p("layernorm.outputs.npz"),
        "--tolerances",
        &p("layernorm.json"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = hloc(&[
        "run",
        &p("softmax.hlo"),
        "--inputs",
        &p("softmax.inputs.npz"),
        "--expect",
        &p("softmax.outputs.npz"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn run_rejects_bad_inputs_before_running_and_writes_nothing() {
    let (scratch, out, p) = run_scratch("badrun");
    let dir = scratch.path();
    let corrupt = dir.join("corrupt.npz");
    std::fs::write(&corrupt, b"PK\x03\x04 this is not a zip archive").expect("write");
    let cases: [(String, &str); 3] = [
        // Another program's inputs: wrong count and shapes, each parameter named.
        (p("train_transformer_sgd.inputs.npz"), "p0: expected"),
        (corrupt.to_str().expect("utf-8").to_string(), "corrupt.npz"),
        (dir.join("missing.npz").to_str().expect("utf-8").to_string(), "missing.npz"),
    ];
    for (inputs, needle) in &cases {
        let o = hloc(&[
            "run",
            &p("dot_matmul.hlo"),
            "--inputs",
            inputs,
            "-o",
            out.to_str().expect("utf-8"),
        ]);
        assert_eq!(o.status.code(), Some(1), "{inputs}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(needle),
            "{inputs}: the error does not mention `{needle}`:\n{}",
            stderr(&o)
        );
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
        assert!(!out.exists(), "{inputs}: an output was written although the run failed");
    }
    // A module the checker rejects never runs.
    let o = hloc(&[
        "run",
        &p("dyn_bounded_hlo.hlo"),
        "--inputs",
        &p("dyn_bounded_hlo.inputs.npz"),
        "-o",
        out.to_str().expect("utf-8"),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(!out.exists());
}

#[test]
fn opt_lists_passes_and_rejects_unknown_names() {
    let o = hloc(&["opt", "--list-passes"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    for p in hlo_passes::registry() {
        assert!(text.contains(p.name), "--list-passes does not list `{}`:\n{text}", p.name);
    }
    assert!(text.contains("default order:"), "{text}");
    let file = shared().join("corpus/softmax.hlo");
    let f = file.to_str().expect("utf-8");
    for args in
        [vec!["opt", f, "--passes", "no-such-pass"], vec!["opt", f, "--skip", "no-such-pass"]]
    {
        let o = hloc(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("unknown pass `no-such-pass`"), "{}", stderr(&o));
        assert!(o.stdout.is_empty());
    }
    // `hloc opt` prints modules for XLA, which does not compile variadic all-reduces from
    // text: the combiner is refused, with the engines named as where it runs.
    let sharded = shared().join("corpus/sharded_mlp_train.hlo");
    let o = hloc(&[
        "opt",
        sharded.to_str().expect("utf-8"),
        "--passes",
        "sharding-propagation,spmd-partition,all-reduce-combiner",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("`all-reduce-combiner` is not run by `hloc opt`"),
        "{}",
        stderr(&o)
    );
    assert!(o.stdout.is_empty());
    // A malformed module is reported with its location, nothing printed.
    let bad = cases_dir().join("parse");
    let case = hlo_tests::hlo_files(&bad).into_iter().find(|p| {
        hlo_tests::expected_error_at(&std::fs::read_to_string(p).unwrap_or_default()).is_some()
    });
    let case = case.expect("a malformed parse case");
    let o = hloc(&["opt", case.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains(": error: "), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
}

/// The default pipeline's output is valid HLO that `hloc run` executes with XLA's outputs;
/// dumps, the timing table and the fusion report are written where asked.
#[test]
fn opt_output_runs_with_xla_outputs_and_dumps_every_pass() {
    let (scratch, out, p) = run_scratch("opt");
    let dir = scratch.path();
    let optimized = dir.join("train_mlp_sgd.opt.hlo");
    let dumps = dir.join("dumps");
    let report = dir.join("fusion.json");
    let o = hloc(&[
        "opt",
        &p("train_mlp_sgd.hlo"),
        "-o",
        optimized.to_str().expect("utf-8"),
        "--time-passes",
        "--verify-each",
        "--dump-after",
        "all",
        "--dump-dir",
        dumps.to_str().expect("utf-8"),
        "--fusion-report",
        report.to_str().expect("utf-8"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "with -o nothing goes to stdout");
    assert!(stderr(&o).contains("total"), "no --time-passes table:\n{}", stderr(&o));
    let runs = stderr(&o)
        .lines()
        .filter(|l| !l.starts_with("pass") && !l.starts_with("total") && !l.starts_with("note"))
        .count();
    let dumped = std::fs::read_dir(&dumps).expect("dump dir").count();
    assert!(dumped >= runs.min(1), "{dumped} dumps for {runs} passes");
    serde_json::from_str::<serde_json::Value>(
        &std::fs::read_to_string(&report).expect("report written"),
    )
    .expect("the report is JSON");
    let o = hloc(&[
        "run",
        optimized.to_str().expect("utf-8"),
        "--inputs",
        &p("train_mlp_sgd.inputs.npz"),
        "--expect",
        &p("train_mlp_sgd.outputs.npz"),
        "--tolerances",
        &p("train_mlp_sgd.json"),
        "-o",
        out.to_str().expect("utf-8"),
    ]);
    assert!(
        o.status.success(),
        "the optimized module does not reproduce XLA's outputs:\n{}",
        stderr(&o)
    );
}

/// `hloc compile`: the report (text and JSON with the documented keys), the lowered
/// program, a trace written atomically, and located errors with nothing written.
#[test]
fn compile_reports_prints_tiles_and_traces() {
    let (scratch, _, p) = run_scratch("compile");
    let dir = scratch.path();
    let o = hloc(&["compile", &p("train_cnn_sgd.hlo"), "--config", "v3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).expect("utf-8");
    assert!(
        text.starts_with("tpu-v3: ") && text.contains("MXU util") && text.contains("critical path"),
        "{text}"
    );

    let o = hloc(&["compile", &p("train_cnn_sgd.hlo"), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON report");
    for key in [
        "total_cycles",
        "step_time_us",
        "flops",
        "transcendentals",
        "hbm_bytes",
        "mxu_util_pct",
        "vpu_util_pct",
        "per_op",
        "critical_path",
    ] {
        assert!(!v[key].is_null(), "JSON report lacks `{key}`");
    }
    let per_op = v["per_op"].as_array().expect("per_op list");
    let cycles: u64 = per_op.iter().map(|o| o["cycles"].as_u64().expect("cycles")).sum();
    assert_eq!(
        cycles,
        v["total_cycles"].as_u64().expect("total"),
        "per-op cycles sum to the total"
    );
    assert!(per_op.iter().any(|o| o["class"] == "conv"), "a CNN step has convolution kernels");

    let o = hloc(&["compile", &p("train_cnn_sgd.hlo"), "--emit", "tiles"]);
    let tiles = String::from_utf8(o.stdout).expect("utf-8");
    assert!(
        o.status.success()
            && tiles.contains("mxu.")
            && tiles.contains("dma.in")
            && tiles.contains("vmem"),
        "{tiles}"
    );

    let trace = dir.join("cnn.trace.json");
    let o = hloc(&[
        "compile",
        &p("train_cnn_sgd.hlo"),
        "--emit",
        "trace",
        "-o",
        trace.to_str().expect("utf-8"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).expect("trace written"))
            .expect("trace is JSON");
    assert!(
        t["traceEvents"].as_array().is_some_and(|e| e.iter().any(|e| e["cat"] == "MXU")),
        "MXU slices in the trace"
    );

    // An unknown chip and an op with no TPU lowering: errors, exit 1, nothing written.
    let out = dir.join("never.json");
    let o = hloc(&[
        "compile",
        &p("train_cnn_sgd.hlo"),
        "--config",
        "v9",
        "-o",
        out.to_str().expect("utf-8"),
    ]);
    assert!(
        !o.status.success() && stderr(&o).contains("unknown TPU config `v9`"),
        "{}",
        stderr(&o)
    );
    // An f32 cholesky is expanded (cholesky-expander) and compiles; a bf16 one is not.
    let src = dir.join("ch.hlo");
    std::fs::write(&src, "HloModule m\n\nENTRY e {\n  p = f32[4,4] parameter(0)\n  ROOT ch = f32[4,4] cholesky(p), lower=true\n}\n").expect("write");
    let ok = dir.join("ch.json");
    let o = hloc(&["compile", src.to_str().expect("utf-8"), "-o", ok.to_str().expect("utf-8")]);
    assert!(o.status.success() && ok.exists(), "{}", stderr(&o));
    std::fs::write(&src, "HloModule m\n\nENTRY e {\n  p = bf16[4,4] parameter(0)\n  ROOT ch = bf16[4,4] cholesky(p), lower=true\n}\n").expect("write");
    let o = hloc(&["compile", src.to_str().expect("utf-8"), "-o", out.to_str().expect("utf-8")]);
    let err = stderr(&o);
    assert!(
        !o.status.success()
            && err.contains("ch.hlo:5:8: error: no TPU lowering for `ch` (cholesky)"),
        "{err}"
    );
    assert!(!out.exists(), "no output on error");
}

/// `hloc run --engine tpu`: at HIGHEST precision the outputs match XLA within the f32
/// tolerances; at the module's own (DEFAULT) precision the bf16 error is reported per
/// output, not failed.
#[test]
fn tpu_engine_matches_at_highest_and_reports_the_bf16_error_otherwise() {
    let (_, _, p) = run_scratch("tpu-run");
    let case = [
        "run",
        &p("train_mlp_sgd.hlo"),
        "--engine",
        "tpu",
        "--inputs",
        &p("train_mlp_sgd.inputs.npz"),
        "--expect",
        &p("train_mlp_sgd.outputs.npz"),
        "--tolerances",
        &p("train_mlp_sgd.json"),
    ]
    .map(String::from);
    let args = |extra: &[&'static str]| {
        case.iter().map(String::as_str).chain(extra.iter().copied()).collect::<Vec<&str>>()
    };
    let o = hloc(&args(&["--precision", "highest"]));
    let err = stderr(&o);
    assert!(
        o.status.success() && !err.contains("bf16") && err.matches(": matches").count() == 5,
        "{err}"
    );
    let o = hloc(&args(&[]));
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("5 f32 matmuls ran in fewer than six bf16 MXU passes")
            && err.contains("differs by bf16 products: max |diff|"),
        "{err}"
    );
}

#[test]
fn devices_run_sharded_modules_and_refuse_the_wrong_count() {
    let case = shared().join("corpus/sharded_mlp_train");
    let file = format!("{}.hlo", case.display());
    let inputs = format!("{}.inputs.npz", case.display());
    let expect = format!("{}.outputs.npz", case.display());
    let tols = format!("{}.json", case.display());
    for engine in ["jit", "interp"] {
        let o = hloc(&[
            "run",
            &file,
            "--inputs",
            &inputs,
            "--devices",
            "8",
            "--engine",
            engine,
            "--expect",
            &expect,
            "--tolerances",
            &tols,
        ]);
        assert!(o.status.success(), "{engine}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("on 8 devices") && stderr(&o).contains("all-reduce"),
            "{}",
            stderr(&o)
        );
    }
    let o = hloc(&["run", &file, "--inputs", &inputs, "--devices", "4"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("shardings are for 8 devices, but 4 devices were asked for")
            && stderr(&o).contains("--devices 8"),
        "{}",
        stderr(&o)
    );
    // Inputs of the wrong shape are refused before anything runs.
    let bad = hloc(&[
        "run",
        &file,
        "--inputs",
        &format!("{}/corpus/sharded_dp_explicit.inputs.npz", shared().display()),
        "--devices",
        "8",
    ]);
    assert_eq!(bad.status.code(), Some(1), "{}", stderr(&bad));
}

#[test]
fn compile_chips_splits_the_step_and_traces_every_chip() {
    let file = format!("{}/corpus/sharded_mlp_train.hlo", shared().display());
    let o = hloc(&["compile", &file, "--chips", "8"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with("8 chips of tpu-v4 (3D torus") && out.contains("exposed communication"),
        "{out}"
    );
    let scratch = scratch("chips");
    let dir = scratch.path();
    let trace = dir.join("t.json");
    let o =
        hloc(&["compile", &file, "--chips", "8", "--emit", "trace", "-o", trace.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let names: Vec<String> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    for chip in 0..8 {
        assert!(
            names.iter().any(|n| n.contains(&format!("(chip {chip})"))),
            "no track for chip {chip}: {names:?}"
        );
    }
    assert!(
        t["traceEvents"].as_array().unwrap().iter().any(|e| e["cat"] == "ICI"),
        "no collective on the ICI track"
    );
    let o = hloc(&["compile", &file, "--chips", "4"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn chips_in_several_slices_pay_for_the_dcn() {
    let file = format!("{}/corpus/sharded_mlp_train.hlo", shared().display());
    let step = |slices: &str| {
        let o = hloc(&["compile", &file, "--chips", "8", "--slices", slices, "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON report");
        (v["step_time_us"].as_f64().expect("a step time"), v)
    };
    let (one, v1) = step("1");
    let (two, v2) = step("2");
    assert!(v1.get("dcn").is_none(), "{v1}");
    assert_eq!(v2["dcn"]["slices"], 2, "{v2}");
    // Data parallel over 8 chips: the gradients' all-reduce spans both slices.
    assert!(two > one, "2 slices {two} us, 1 slice {one} us");
    let text = hloc(&["compile", &file, "--chips", "8", "--slices", "2"]);
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(out.contains("in 2 slices joined by the DCN"), "{out}");
    let bad = hloc(&["compile", &file, "--chips", "8", "--slices", "3"]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("--slices 3 does not divide --chips 8"), "{}", stderr(&bad));
    let no_chips = hloc(&["compile", &file, "--slices", "2"]);
    assert_eq!(no_chips.status.code(), Some(2), "{}", stderr(&no_chips));
}

#[test]
fn seeded_inputs_larger_than_memory_are_refused_at_once() {
    let scratch = scratch("huge");
    let dir = scratch.path();
    let file = dir.join("huge.hlo");
    std::fs::write(&file, "HloModule m\n\nENTRY e {\n  p = f32[1000000000000] parameter(0), sharding={devices=[8]<=[8]}\n  ROOT n = f32[1000000000000] negate(p)\n}\n").expect("write");
    let f = file.to_str().expect("utf-8");
    // Each engine refuses before making anything that large, at the line at fault: the
    // JIT at compile (the output alone exceeds any host's memory), the interpreter and the
    // TPU model (which computes its values on it) before seeding (the inputs and the
    // interpreter's copies of them), and every engine's devices before seeding (the inputs
    // beside their shards).
    for (args, want, at) in [
        (vec!["run", f], "more than this host's", Some("huge.hlo:5:8: error: the program needs")),
        // On 8 devices, at the source line of the global instruction (the partitioner
        // gives what it makes for an instruction that instruction's span).
        (
            vec!["run", f, "--devices", "8"],
            "more than this host's",
            Some("huge.hlo:5:8: error: the program needs 465.7 GiB"),
        ),
        (
            vec!["run", f, "--engine", "interp"],
            "the interpreter's copies of them",
            Some("huge.hlo:4:3: error"),
        ),
        (
            vec!["run", f, "--engine", "tpu"],
            "the interpreter's copies of them",
            Some("huge.hlo:4:3: error"),
        ),
        (
            vec!["run", f, "--engine", "interp", "--devices", "8"],
            "shards on 8 devices take 7.3 TiB",
            Some("huge.hlo:4:3: error"),
        ),
        (
            vec!["run", f, "--engine", "tpu", "--devices", "8"],
            "shards on 8 devices take 7.3 TiB",
            Some("huge.hlo:4:3: error"),
        ),
    ] {
        let o = hloc(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(at.is_none_or(|at| err.contains(at)), "{args:?}: {err}");
    }
}

/// What a run needs is counted before its inputs are made: seeded inputs over the budget
/// (the JIT), the interpreter's own copies of them (three 4 GiB inputs fit a 16 GiB budget
/// alone, not with their copies), a replicated input's copy on every device (2 GiB on 8
/// devices), the JIT's working buffers (a 4 PiB intermediate, located at the instruction).
#[test]
fn what_a_run_holds_beside_its_inputs_is_counted_before_they_are_made() {
    let scratch = scratch("beside");
    let dir = scratch.path();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p.to_str().expect("utf-8").to_string()
    };
    let three = write(
        "three.hlo",
        "HloModule m\n\nENTRY e {\n  a = f32[1073741824] parameter(0)\n  b = f32[1073741824] parameter(1)\n  c = f32[1073741824] parameter(2)\n  s = f32[1073741824] add(a, b)\n  ROOT t = f32[1073741824] add(s, c)\n}\n",
    );
    let replicated = write(
        "replicated.hlo",
        "HloModule m\n\nENTRY e {\n  p = f32[536870912] parameter(0), sharding={replicated}\n  ROOT n = f32[536870912] negate(p), sharding={replicated}\n}\n",
    );
    // Two 11 GiB inputs for a one-element result: the JIT compiles it, seeding is refused.
    let seeded = write(
        "seeded.hlo",
        "HloModule m\n\nENTRY e {\n  a = f32[3000000000] parameter(0)\n  b = f32[3000000000] parameter(1)\n  ROOT x = f32[1] slice(a), slice={[0:1]}\n}\n",
    );
    // `x` feeds two reductions (one through `sine`), so it is a buffer of its own.
    let wide = write(
        "wide.hlo",
        "HloModule m\n\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n\nENTRY e {\n  p = f32[] parameter(0)\n  b = f32[33554432,33554432] broadcast(p), dimensions={}\n  x = f32[33554432,33554432] exponential(b)\n  c = f32[33554432,33554432] sine(x)\n  z = f32[] constant(0)\n  r1 = f32[] reduce(x, z), dimensions={0,1}, to_apply=add\n  r2 = f32[] reduce(c, z), dimensions={0,1}, to_apply=add\n  ROOT r = f32[] add(r1, r2)\n}\n",
    );
    for (args, want, at) in [
        (
            vec!["run", seeded.as_str()],
            "seeded inputs would take 22.4 GiB, more than",
            ":4:3: error",
        ),
        (
            vec!["run", three.as_str(), "--engine", "interp"],
            "the interpreter's copies of them",
            ":4:3: error",
        ),
        (
            vec!["run", replicated.as_str(), "--engine", "interp", "--devices", "8"],
            "(f32[536870912], replicated: a whole copy on every device), takes 16.0 GiB",
            ":4:3: error",
        ),
        (
            vec!["run", wide.as_str()],
            "the largest, f32[33554432, 33554432], takes 4.0 PiB",
            ":12:3: error",
        ),
    ] {
        // Nothing of that size is made: refused within seconds (a generous bound, after
        // which the run is killed: seeding 12 GiB, or computing 2^50 elements, takes far
        // longer).
        let mut child = Command::new(env!("CARGO_BIN_EXE_hloc"))
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("hloc runs");
        let t = std::time::Instant::now();
        while child.try_wait().expect("waits").is_none() {
            if t.elapsed() > std::time::Duration::from_secs(60) {
                let _ = child.kill();
                panic!("{args:?}: still running after a minute");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let o = child.wait_with_output().expect("exits");
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want) && err.contains(at), "{args:?}: {err}");
        assert!(!err.contains("seeded with"), "{args:?}: refused only after seeding: {err}");
    }
}

#[test]
fn engines_refuse_kept_attributes_they_do_not_implement() {
    // `slice_sizes` is accepted and printed back (a newer XLA attribute), but no engine
    // implements it: each refuses the instruction, located, instead of ignoring it.
    let path = cases_dir().join("parse/valid_newer_attributes.hlo");
    let p = path.to_str().expect("utf-8 path");
    assert!(hloc(&["parse", p]).status.success());
    for engine in ["interp", "jit", "tpu"] {
        let o = hloc(&["run", "--engine", engine, p]);
        let err = stderr(&o);
        assert!(!o.status.success(), "{engine} ran it: {err}");
        assert!(
            err.contains("`slice_sizes=` on collective-permute is not supported"),
            "{engine}: {err}"
        );
    }
}

#[test]
fn complex_values_and_fft_run_on_the_interpreter_and_the_tpu_model() {
    let scratch = scratch("complex");
    let dir = scratch.path();
    let path = dir.join("fft.hlo");
    std::fs::write(
        &path,
        "HloModule fft\n\nENTRY main {\n  x = f32[8] parameter(0)\n  s = f32[8] multiply(x, x)\n  f = c64[5] fft(s), fft_type=RFFT, fft_length={8}\n  ROOT a = f32[5] abs(f)\n}\n",
    )
    .expect("write module");
    let p = path.to_str().expect("utf-8 path");
    // The JIT refuses the first complex value, located, and never panics.
    let o = hloc(&["run", "--engine", "jit", p]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{p}:6:3: error: `f` (fft): fft not supported by this engine")),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // The interpreter and the TPU model compute it; complex outputs travel through .npz
    // and --expect.
    let (inputs, out) = (dir.join("in.npz"), dir.join("out.npz"));
    let x: Vec<f32> = (0..8).map(|i| i as f32 - 3.0).collect();
    hlo_io::npz::write_arrays(
        &inputs,
        &[("p0", &hlo_ir::Tensor::from_f32(&[8], &x).expect("tensor"))],
    )
    .expect("inputs");
    for engine in ["interp", "tpu"] {
        let o = hloc(&[
            "run",
            "--engine",
            engine,
            p,
            "--inputs",
            inputs.to_str().expect("utf-8"),
            "-o",
            out.to_str().expect("utf-8"),
        ]);
        assert!(o.status.success(), "{engine}: {}", stderr(&o));
        let got = hlo_io::npz::read_npz(&out).expect("outputs");
        // |RFFT(x²)| at frequency 0 is Σx² = 44.
        assert_eq!(got[0].1.to_vec::<f32>().expect("f32")[0], 44.0, "{engine}");
    }
    let cpath = dir.join("c.hlo");
    std::fs::write(&cpath, "HloModule c\n\nENTRY main {\n  x = f32[8] parameter(0)\n  ROOT f = c64[5] fft(x), fft_type=RFFT, fft_length={8}\n}\n").expect("write");
    let c = cpath.to_str().expect("utf-8 path");
    let o = hloc(&[
        "run",
        "--engine",
        "interp",
        c,
        "--inputs",
        inputs.to_str().expect("utf-8"),
        "-o",
        out.to_str().expect("utf-8"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = hloc(&[
        "run",
        "--engine",
        "interp",
        c,
        "--inputs",
        inputs.to_str().expect("utf-8"),
        "--expect",
        out.to_str().expect("utf-8"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn jit_refusals_point_at_the_instruction_as_written() {
    let (scratch, _, _) = run_scratch("jit-located");
    let dir = scratch.path();
    let path = dir.join("complex.hlo");
    // The convert, `imag` and add would fuse into one loop; the JIT (no complex numbers)
    // refuses the module before optimizing it, pointing at the first complex value as
    // written. (It used to refuse the `imag` of a real value, which it now computes.)
    std::fs::write(&path, "HloModule m\n\nENTRY main {\n  p = f32[4] parameter(0)\n  c = c64[4] convert(p)\n  h = f32[4] imag(c)\n  ROOT r = f32[4] add(h, h)\n}\n").expect("write module");
    let p = path.to_str().expect("utf-8 path");
    let o = hloc(&["run", "--engine", "jit", p]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{p}:5:3: error: `c` (convert): c64 values not supported")),
        "{err}"
    );
    assert!(err.contains("c = c64[4] convert(p)") && err.contains("--engine interp"), "{err}");
}

/// The counts `hloc run --time-passes` prints: `what -> runs`.
fn work_counts(err: &str) -> std::collections::BTreeMap<String, u64> {
    err.lines()
        .skip_while(|l| !l.starts_with("work done (runs):"))
        .skip(1)
        .map_while(|l| {
            let l = l.strip_prefix("  ")?;
            let (what, n) = l.rsplit_once(' ')?;
            Some((what.trim().to_string(), n.parse().ok()?))
        })
        .collect()
}

#[test]
fn run_parses_verifies_and_infers_shapes_once_and_optimizes_once_per_compile() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/models/mlp_train.hlo");
    let file = file.to_str().expect("utf-8 path");
    for engine in ["jit", "interp", "tpu"] {
        let o = hloc(&["run", file, "--engine", engine, "--repeat", "3", "--time-passes"]);
        assert!(o.status.success(), "{engine}: {}", stderr(&o));
        let counts = work_counts(&stderr(&o));
        assert_eq!(counts.get("parse"), Some(&1), "{engine}: {counts:?}");
        assert_eq!(counts.get("verify"), Some(&1), "{engine}: {counts:?}");
        assert_eq!(counts.get("shape inference"), Some(&1), "{engine}: {counts:?}");
        // Three runs, one compile: the interpreter runs the module as written.
        let optimized = if engine == "interp" { None } else { Some(&1) };
        assert_eq!(counts.get("optimize"), optimized, "{engine}: {counts:?}");
        let lowered = if engine == "tpu" { Some(&1) } else { None };
        assert_eq!(counts.get("lower"), lowered, "{engine}: {counts:?}");
    }
}

/// A 16 GiB loop state: timed from shapes alone when the loop is counted (no tensor is
/// made); a located error naming the loop when its count depends on a parameter, unless
/// `--trip-count` gives it.
#[test]
fn compile_times_counted_loops_from_shapes_and_names_data_dependent_ones() {
    let scratch = scratch("loops");
    let dir = scratch.path();
    let module = |limit: &str, extra_param: &str| {
        format!(
            "HloModule loops\n\n\
             cond {{\n  s = (s32[], f32[65536,65536], s32[]) parameter(0)\n  \
             i = s32[] get-tuple-element(s), index=0\n  {limit}\n  \
             ROOT lt = pred[] compare(i, n), direction=LT\n}}\n\n\
             body {{\n  s = (s32[], f32[65536,65536], s32[]) parameter(0)\n  \
             i = s32[] get-tuple-element(s), index=0\n  one = s32[] constant(1)\n  \
             i1 = s32[] add(i, one)\n  x = f32[65536,65536] get-tuple-element(s), index=1\n  \
             y = f32[65536,65536] tanh(x)\n  k = s32[] get-tuple-element(s), index=2\n  \
             ROOT t = (s32[], f32[65536,65536], s32[]) tuple(i1, y, k)\n}}\n\n\
             ENTRY e {{\n  p = f32[65536,65536] parameter(0)\n  {extra_param}\n  \
             z = s32[] constant(0)\n  \
             t = (s32[], f32[65536,65536], s32[]) tuple(z, p, lim)\n  \
             w = (s32[], f32[65536,65536], s32[]) while(t), condition=cond, body=body\n  \
             ROOT r = f32[65536,65536] get-tuple-element(w), index=1\n}}\n"
        )
    };
    // Counted: the limit is the constant 48 (in the condition) or a state element the
    // body passes through, initialized by a constant.
    for (name, limit, extra) in [
        ("in_cond", "n = s32[] constant(48)", "lim = s32[] constant(7)"),
        ("in_state", "n = s32[] get-tuple-element(s), index=2", "lim = s32[] constant(48)"),
    ] {
        let file = dir.join(format!("{name}.hlo"));
        std::fs::write(&file, module(limit, extra)).expect("write");
        let o = hloc(&["compile", file.to_str().unwrap(), "--json", "--model-flops", "1e9"]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        assert_eq!(v["control_flow"], "static", "{name}");
        // The 16 GiB parameter stays resident; the loop's tanh writes a second 16 GiB.
        assert_eq!(v["hbm_parameter_bytes"], 1u64 << 34, "{name}");
        assert!(v["hbm_peak_bytes"].as_u64().unwrap() >= 2 << 34, "{name}: {v}");
        assert_eq!(v["hbm_fits"], false, "{name}: 32 GiB and more do not fit v4's 32 GiB");
        // Utilizations: the model's 1e9 FLOPs and the executed ones, over the same peak.
        let (hfu, mfu) = (v["hfu_pct"].as_f64().unwrap(), v["mfu_pct"].as_f64().unwrap());
        let flops = v["flops"].as_f64().unwrap();
        assert!(mfu > 0.0 && (hfu / mfu - flops / 1e9).abs() < 1e-6 * (flops / 1e9), "{v}");
    }
    // Data-dependent: the limit is a parameter.
    let file = dir.join("dynamic.hlo");
    std::fs::write(
        &file,
        module("n = s32[] get-tuple-element(s), index=2", "lim = s32[] parameter(1)"),
    )
    .expect("write");
    let path = file.to_str().unwrap();
    let o = hloc(&["compile", path]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("while loop `w` depends on values"), "{err}");
    assert!(err.contains("dynamic.hlo:") && err.contains("--trip-count w=N"), "{err}");
    let o = hloc(&["compile", path, "--json", "--trip-count", "w=48"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["control_flow"], "static");
    let o = hloc(&["compile", path, "--trip-count", "nope=3"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no while loop `nope`"), "{}", stderr(&o));
}
