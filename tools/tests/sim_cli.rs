//! `hloc sim`: the JSON keys SCALE-Sim users script against, the models agreeing with each
//! other, the trace and CSV files, and clean errors on bad input.

use std::process::{Command, Output};

use serde_json::Value;

fn hloc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hloc")).args(args).output().expect("hloc runs")
}

fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let o = hloc(&all);
    assert!(o.status.success(), "hloc {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("hloc {args:?} printed no JSON object: {e}"))
}

/// A fresh directory, removed when the returned guard drops (a failing test's too).
fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("hloc-sim-").tempdir().unwrap()
}

#[test]
fn scalesim_json_has_scalesim_keys_and_values() {
    // reference.csv: mult_256x128x512, WS and OS.
    let v = json(&["sim", "gemm", "256", "128", "512", "--model", "scalesim", "--dataflow", "ws"]);
    for (k, want) in [
        ("total_cycles", 2551),
        ("compute_cycles", 2551),
        ("sram_ifmap_reads", 131072),
        ("sram_filter_reads", 65536),
        ("sram_ofmap_writes", 131072),
    ] {
        assert_eq!(v[k].as_u64(), Some(want), "{k}");
    }
    assert!((v["overall_util_pct"].as_f64().unwrap() - 40.1411).abs() < 1e-3);
    assert_eq!(v["mapping_eff_pct"].as_f64(), Some(100.0));
    let os = json(&["sim", "gemm", "256", "128", "512", "--model", "scalesim", "--dataflow", "os"]);
    assert_eq!(os["total_cycles"].as_u64(), Some(1531));
    // USER mode with stalls (reference row: 64 kB SRAMs at 16 words/cycle).
    let user = json(&[
        "sim",
        "gemm",
        "256",
        "128",
        "512",
        "--model",
        "scalesim",
        "--sram-kb",
        "64,64,64",
        "--bandwidth",
        "16",
    ]);
    assert_eq!(
        (user["total_cycles"].as_u64(), user["stall_cycles"].as_u64()),
        (Some(32909), Some(30358))
    );
}

#[test]
fn conv_uses_native_addressing_in_scalesim_mode() {
    // reference.csv: conv_resnet50_c2_3x3_native.
    let v = json(&["sim", "conv", "58,58,3,3,64,64", "--model", "scalesim"]);
    assert_eq!(v["total_cycles"].as_u64(), Some(17589));
    assert_eq!(v["dram_ifmap_reads"].as_u64(), Some(215296));
    assert_eq!(
        (v["M"].as_u64(), v["N"].as_u64(), v["K"].as_u64()),
        (Some(3136), Some(64), Some(576))
    );
}

#[test]
fn pe_model_agrees_with_the_fast_models_and_computes_the_product() {
    for df in ["ws", "os", "is"] {
        let fast = json(&[
            "sim",
            "gemm",
            "40",
            "70",
            "300",
            "--model",
            "scalesim",
            "--dataflow",
            df,
            "--array",
            "16x32",
        ]);
        let pe = json(&[
            "sim",
            "gemm",
            "40",
            "70",
            "300",
            "--model",
            "pe",
            "--dataflow",
            df,
            "--array",
            "16x32",
        ]);
        assert_eq!(pe["compute_cycles"], fast["compute_cycles"], "{df}");
        assert_eq!(pe["sram_ifmap_reads"], fast["sram_ifmap_reads"], "{df}");
        assert_eq!(pe["numerics_exact"], Value::Bool(true), "{df}");
        let tpu = json(&[
            "sim",
            "gemm",
            "40",
            "70",
            "300",
            "--model",
            "tpu",
            "--dataflow",
            df,
            "--array",
            "16x32",
        ]);
        let pe = json(&[
            "sim",
            "gemm",
            "40",
            "70",
            "300",
            "--model",
            "pe",
            "--schedule",
            "tpu",
            "--dataflow",
            df,
            "--array",
            "16x32",
        ]);
        assert_eq!(pe["total_cycles"], tpu["total_cycles"], "{df}");
        assert_eq!(pe["hbm_read_bytes"], tpu["hbm_read_bytes"], "{df}");
    }
}

#[test]
fn trace_and_csv_files_are_written() {
    let dir = tmp();
    let (trace, csv) = (dir.path().join("t.json"), dir.path().join("r.csv"));
    let o = hloc(&[
        "sim",
        "gemm",
        "512",
        "512",
        "512",
        "--trace",
        trace.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    // 16 folds: a load, a stream and a drain slice each, plus DMA slices.
    let slices = events.iter().filter(|e| e["ph"] == "X").count();
    assert!(slices >= 48, "{slices} slices");
    let text = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0].split(',').count(), lines[1].split(',').count());
    assert!(lines[1].starts_with("tpu,ws,512,512,512,128,128,"));
}

#[test]
fn bad_input_is_a_clear_error() {
    for (args, code, needle) in [
        (vec!["sim", "gemm", "0", "4", "4"], 1, "at least 1"),
        (vec!["sim", "gemm", "4", "4", "4", "--array", "0x4"], 2, "ROWSxCOLS"),
        (vec!["sim", "gemm", "4", "4", "4", "--dataflow", "xs"], 2, "unknown dataflow"),
        (vec!["sim", "conv", "1,2,3"], 1, "IH,IW,FH,FW,C,NF"),
        (vec!["sim", "conv", "3,3,5,5,1,1", "--model", "scalesim"], 1, "larger than the input"),
        (
            vec!["sim", "gemm", "4", "4", "4", "--model", "tpu", "--bandwidth", "8"],
            1,
            "--model scalesim",
        ),
        (
            vec!["sim", "gemm", "4", "4", "4", "--model", "scalesim", "--sram-kb", "0,1,1"],
            1,
            "at least 1 kB",
        ),
        (vec!["sim", "gemm", "100000", "100000", "4", "--model", "pe"], 1, "--model tpu"),
        (vec!["sim", "gemm", "100000", "100000", "100000"], 1, "folds"),
        (
            vec!["sim", "gemm", "4", "4", "4", "--trace", "/nonexistent-dir/t.json"],
            1,
            "cannot write",
        ),
    ] {
        let o = hloc(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "hloc {args:?}: {err}");
        assert!(err.contains(needle), "hloc {args:?}: {err}");
        assert!(!err.contains("panicked"), "hloc {args:?}: {err}");
    }
}

#[test]
fn a_closed_pipe_ends_quietly() {
    // `hloc sim ... --program | head`: ~400 kB of program text into a pipe closed early.
    let mut child = Command::new(env!("CARGO_BIN_EXE_hloc"))
        .args(["sim", "gemm", "4096", "4096", "4096", "--program"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
}
