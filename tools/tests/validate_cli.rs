//! `hloc validate` on published rows: the programs are built by the model generators
//! (the oracle's Python), simulated in a child process, and each row's metric is derived
//! from the simulated step and compared with the published figure.

use std::process::Command;

fn oracle_present() -> bool {
    match hlo_io::oracle::python() {
        Some(_) => true,
        None if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("validate_cli: the XLA oracle is missing under CI=true")
        }
        None => {
            println!("SKIPPED validate_cli: no oracle python");
            false
        }
    }
}

#[test]
fn validate_predicts_published_rows_and_reports_errors() {
    if !oracle_present() {
        return;
    }
    let rows = ["maxtext-22b-1x-v4-128", "resnet50-tf-reference-v2-8", "maxtext-22b-2x-v4-128"];
    let mut args = vec!["validate", "--json"];
    for r in &rows {
        args.extend(["--row", r]);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_hloc")).args(&args).output().expect("hloc runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "hloc validate failed:\n{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON table");
    let table = v["rows"].as_array().expect("rows");
    assert_eq!(table.len(), rows.len());
    for row in table {
        let name = row["row"].as_str().unwrap_or("?");
        let note = row["note"].as_str().unwrap_or("");
        let predicted = row["predicted"].as_f64().unwrap_or_else(|| panic!("{name}: {row}"));
        let published = row["published"].as_f64().expect("published");
        assert!(predicted.is_finite() && predicted > 0.0, "{name}: {predicted}");
        let err = row["error_pct"].as_f64().expect("error");
        assert!((err - 100.0 * (predicted - published) / published).abs() < 1e-9, "{row}");
        assert!(row["wall_s"].as_f64().is_some_and(|w| w > 0.0), "{row}");
        assert!(row["peak_rss_bytes"].as_u64().is_some_and(|b| b > 0), "{row}");
        assert_eq!(note.starts_with("stretch"), name.contains("-2x-"), "{row}");
        println!("{name}: predicted {predicted:.1}, published {published}, error {err:+.1}%");
    }
    // A stretch row whose parallelism no generator maps is reported with the reason and
    // does not fail the command; the same row not marked stretch does.
    let dir = std::env::temp_dir().join(format!("hloc-validate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let rows_file = dir.join("rows.json");
    let row = |stretch: bool| {
        let mut r = serde_json::json!({
            "name": "pipelined", "chips": 8, "chip": "v4", "metric": "step_ms",
            "published": 100.0,
            "model": {"family": "decoder-lm", "layers": 2, "emb": 64, "heads": 4,
                      "head_dim": 16, "mlp": 128, "vocab": 256, "seq": 32},
            "parallelism": {"pipeline": 8, "per_device_batch": 1},
        });
        if stretch {
            r["stretch"] = serde_json::json!("pipeline parallel");
        }
        r
    };
    for stretch in [true, false] {
        std::fs::write(&rows_file, serde_json::json!([row(stretch)]).to_string()).expect("write");
        let o = Command::new(env!("CARGO_BIN_EXE_hloc"))
            .args(["validate", "--json", "--rows", rows_file.to_str().expect("utf-8")])
            .output()
            .expect("hloc runs");
        assert_eq!(o.status.success(), stretch, "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("a JSON table");
        let r = &v["rows"][0];
        assert!(r["predicted"].is_null(), "{r}");
        let note = r["note"].as_str().unwrap_or("");
        assert!(note.contains("pipeline") && note.contains("does not understand"), "{r}");
    }
    std::fs::remove_dir_all(&dir).ok();

    let unknown = Command::new(env!("CARGO_BIN_EXE_hloc"))
        .args(["validate", "--row", "no-such-row"])
        .output()
        .expect("hloc runs");
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no row named `no-such-row`"));
}
