//! `hloc validate` on published rows: the programs are built by the model generators
//! (the oracle's Python), simulated in a child process, and each row's metric is derived
//! from the simulated step and compared with the published figure. With the libtpu venv
//! (`tools/models/setup_libtpu.sh`, optional for a user, installed by CI), XLA's own TPU
//! compiler compiles small steps as the reference `hloc validate` puts beside ours.

use std::path::{Path, PathBuf};
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
    // XLA's TPU compiler is left out here (minutes per large row the first time); the
    // test below runs it on small steps.
    let mut args = vec!["validate", "--json", "--no-xla-tpu"];
    for r in &rows {
        args.extend(["--row", r]);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_hloc")).args(&args).output().expect("hloc runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "hloc validate failed:\n{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON table");
    let table = v["rows"].as_array().expect("rows");
    assert_eq!(table.len(), rows.len());
    assert_eq!(v["xla_tpu_skipped"], "XLA TPU columns off (--no-xla-tpu)", "{v}");
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
        assert!(row["hbm_peak_bytes"].as_u64().is_some_and(|b| b > 0), "{row}");
        assert!(row["xla_tpu_predicted"].is_null() && row["xla_tpu"] == false, "{row}");
        assert_eq!(note.starts_with("stretch"), name.contains("-2x-"), "{row}");
        println!("{name}: predicted {predicted:.1}, published {published}, error {err:+.1}%");
    }
    // A stretch row whose parallelism no generator maps is reported with the reason and
    // does not fail the command; the same row not marked stretch does.
    let dir_guard =
        tempfile::Builder::new().prefix("hloc-validate-").tempdir().expect("a temporary directory");
    let dir = dir_guard.path();
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
        // Without the libtpu venv the table says once that XLA's columns were skipped.
        let o = Command::new(env!("CARGO_BIN_EXE_hloc"))
            .args(["validate", "--json", "--rows", rows_file.to_str().expect("utf-8")])
            .env("HLOC_LIBTPU_VENV", dir.join("no-libtpu-venv"))
            .output()
            .expect("hloc runs");
        assert_eq!(o.status.success(), stretch, "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("a JSON table");
        let skipped = v["xla_tpu_skipped"].as_str().unwrap_or("");
        assert!(skipped.contains("bash tools/models/setup_libtpu.sh"), "{v}");
        let r = &v["rows"][0];
        assert!(r["predicted"].is_null(), "{r}");
        let note = r["note"].as_str().unwrap_or("");
        assert!(note.contains("pipeline") && note.contains("does not understand"), "{r}");
    }

    let unknown = Command::new(env!("CARGO_BIN_EXE_hloc"))
        .args(["validate", "--row", "no-such-row"])
        .output()
        .expect("hloc runs");
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no row named `no-such-row`"));
}

/// The libtpu venv's Python, where `hloc validate` looks for it (`$HLOC_LIBTPU_VENV`, else
/// `~/.cache/hloc-libtpu-venv`); optional for a user, installed by CI (`.ci/run`), so under
/// `CI=true` its absence fails the test.
fn libtpu_python() -> Option<PathBuf> {
    let venv = std::env::var_os("HLOC_LIBTPU_VENV").map(PathBuf::from).or_else(|| {
        std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/hloc-libtpu-venv"))
    })?;
    let python = venv.join("bin/python");
    if python.exists() {
        Some(python)
    } else if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("validate_cli: the libtpu venv is missing under CI=true ({})", venv.display())
    } else {
        println!(
            "SKIPPED validate_cli XLA TPU: no libtpu venv at `{}` (bash tools/models/setup_libtpu.sh)",
            venv.display()
        );
        None
    }
}

/// A 2-layer decoder small enough to compile in seconds, on `chips` chips of `chip`.
fn tiny_decoder(name: &str, chips: u64, chip: &str) -> serde_json::Value {
    serde_json::json!({
        "name": name, "chips": chips, "chip": chip, "metric": "tflops_per_chip",
        "published": 100.0,
        "model": {"family": "decoder-lm", "layers": 2, "emb": 64, "heads": 4,
                  "head_dim": 16, "mlp": 128, "vocab": 256, "seq": 32},
        "parallelism": {"ici_fsdp": chips, "per_device_batch": 2},
    })
}

fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn xla_tpu_compiles_small_steps_and_validate_reports_them() {
    let Some(tpu) = libtpu_python() else { return };
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/models.py");
    let dir_guard = tempfile::Builder::new()
        .prefix("hloc-validate-tpu-")
        .tempdir()
        .expect("a temporary directory");
    let dir = dir_guard.path();
    let compile = |row: &serde_json::Value, topology: &str, out: &Path| {
        let o = Command::new(&tpu)
            .arg(&models)
            .args(["--config", &row.to_string(), "--tpu", topology, "--tpu-out"])
            .arg(out)
            .output()
            .expect("models.py runs");
        assert!(o.status.success(), "models.py --tpu:\n{}", String::from_utf8_lossy(&o.stderr));
        read_json(&out.join("xla_tpu.json"))
    };

    // A decoder on a v4 slice of 2x2x1 chips (one device per chip: megacore).
    let out = dir.join("decoder");
    let r = compile(&tiny_decoder("tiny", 4, "v4"), "v4:2x2x1", &out);
    let program = std::fs::read_to_string(out.join("program.hlo")).expect("program.hlo");
    assert!(program.contains("is_scheduled=true"), "{}", &program[..program.len().min(300)]);
    assert!(r["cost"]["flops"].as_f64().is_some_and(|f| f > 0.0), "{r}");
    let mem = &r["memory"];
    assert!(mem["argument_size_in_bytes"].as_u64().is_some_and(|b| b > 0), "{r}");
    let per_device = ["argument", "output", "temp"]
        .iter()
        .map(|k| mem[format!("{k}_size_in_bytes")].as_u64().expect("memory field"))
        .sum::<u64>()
        - mem["alias_size_in_bytes"].as_u64().expect("alias bytes");
    assert_eq!(mem["hbm_per_chip_bytes"].as_u64(), Some(per_device), "{r}");
    assert_eq!((r["topology"].as_str(), r["devices"].as_u64()), (Some("v4:2x2x1"), Some(4)));
    assert!(r["compile_s"].as_f64().is_some_and(|s| s > 0.0), "{r}");
    assert!(r["mesh_layout"].as_str().is_some_and(|l| !l.is_empty()), "{r}");
    // Partition i runs on the i-th device of the flattened mesh: four distinct chips.
    let parts = r["partitions"].as_array().expect("partitions");
    let mut coords: Vec<String> = parts.iter().map(|p| p["coords"].to_string()).collect();
    coords.sort();
    coords.dedup();
    assert_eq!((parts.len(), coords.len()), (4, 4), "{r}");
    assert!(parts.iter().enumerate().all(|(i, p)| p["partition"] == i), "{r}");

    // `auto`: Cloud TPU's default slice for the row's chips; a v2 chip is two devices
    // (cores), so the batch is split over both.
    let r = compile(&tiny_decoder("tiny-v2", 4, "v2"), "auto", &dir.join("v2"));
    assert_eq!(r["topology"], "v2:2x2", "{r}");
    assert_eq!((r["devices"].as_u64(), r["cores_per_chip"].as_u64()), (Some(8), Some(2)), "{r}");
    assert_eq!(r["mesh_shape"]["fsdp"], 8, "{r}");

    // A multi-slice row is skipped, and says so.
    let mut multi = tiny_decoder("tiny-2x", 8, "v4");
    multi["parallelism"] = serde_json::json!({"ici_fsdp": 4, "dcn_data": 2, "slices": 2,
                                              "per_device_batch": 2});
    let r = compile(&multi, "auto", &dir.join("multi"));
    assert!(r["skipped"].as_str().is_some_and(|s| s.contains("multi-slice")), "{r}");
    assert!(!dir.join("multi/program.hlo").exists());

    // `hloc validate` puts XLA's estimate and HBM beside ours (the programs are built by
    // the oracle's Python first), and a second run reads XLA's from the cache.
    if !oracle_present() {
        return;
    }
    let rows_file = dir.join("rows.json");
    std::fs::write(&rows_file, serde_json::json!([tiny_decoder("tiny", 4, "v4")]).to_string())
        .expect("write");
    let validate = || {
        let o = Command::new(env!("CARGO_BIN_EXE_hloc"))
            .args(["validate", "--json", "--rows"])
            .arg(&rows_file)
            .arg("--cache")
            .arg(dir.join("cache"))
            .arg("--tpu-python")
            .arg(&tpu)
            .output()
            .expect("hloc runs");
        assert!(o.status.success(), "hloc validate:\n{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("a JSON table")
    };
    let v = validate();
    assert!(v["xla_tpu_skipped"].is_null(), "{v}");
    let row = &v["rows"][0];
    assert_eq!(row["xla_tpu"], true, "{row}");
    assert_eq!(row["xla_tpu_topology"], "v4:2x2x1", "{row}");
    assert!(row["xla_tpu_hbm_per_chip_bytes"].as_u64().is_some_and(|b| b > 0), "{row}");
    assert!(row["hbm_peak_bytes"].as_u64().is_some_and(|b| b > 0), "{row}");
    let opt = row["xla_tpu_optimal_seconds"].as_f64().expect("optimal_seconds");
    match row["xla_tpu_predicted"].as_f64() {
        // TFLOP/s per chip: the row's FLOPs per chip over XLA's step.
        Some(p) => {
            assert!(opt > 0.0, "{row}");
            let err = row["xla_tpu_error_pct"].as_f64().expect("error");
            assert!((err - (p - 100.0)).abs() < 1e-9, "{row}");
        }
        // Unknown: zero or negative, or a cost analysis that left most FLOPs out.
        None => {
            let note = row["xla_tpu_note"].as_str().unwrap_or("");
            assert!(note.starts_with("no step estimate"), "{row}");
            assert!(row["xla_tpu_error_pct"].is_null(), "{row}");
        }
    }
    let xla_dir = PathBuf::from(row["xla_tpu_dir"].as_str().expect("dir"));
    assert!(xla_dir.join("program.hlo").exists(), "{row}");
    let again = validate();
    assert_eq!(again["rows"][0]["xla_tpu_compile_s"], row["xla_tpu_compile_s"], "cached");
}

/// A tiny MaxText row in full (MaxText's 2023-12-15 block with RoPE, QKV RMSNorm and flash
/// attention, global-norm clipping, minimal remat) on 2 x 4 devices, a DeepSeek-style MoE
/// decoder (MLA, a dense layer, routed and shared experts) and an SD2-style UNet.
fn tiny_new_families() -> Vec<serde_json::Value> {
    let maxtext = serde_json::json!({
        "name": "tiny-maxtext", "chips": 8, "chip": "v5p", "metric": "tflops_per_chip",
        "published": 100.0,
        "model": {"family": "decoder-lm", "layers": 2, "emb": 256, "heads": 4, "head_dim": 128,
                  "mlp": 512, "vocab": 1024, "seq": 512,
                  "remat": "minimal (checkpoint_dots_with_no_batch_dims)",
                  "optimizer": "adamw (b1 0.9, b2 0.95, wd 0.1), global-norm clipping 1.0",
                  "block": "MaxText DecoderLayer as of 2023-12-15: RoPE on q and k, a QKV \
                            RMSNorm, Pallas flash attention with causal=True, use_iota_embed=true"},
        "parallelism": {"ici_fsdp": 2, "ici_tensor": 4, "per_device_batch": 2},
        "flops_convention": "6 * params * seq * per_device_batch + 12 * heads * layers * \
                             head_dim * seq^2 * per_device_batch, per device",
    });
    let moe = serde_json::json!({
        "name": "tiny-moe", "chips": 4, "chip": "v5p", "metric": "step_ms", "published": 100.0,
        "model": {"family": "decoder-lm-moe", "layers": 2, "emb": 256, "heads": 4,
                  "vocab": 1024, "seq": 512, "remat": "full",
                  "block": "MLA attention (q_lora_rank 0, kv_lora_rank 128, qk_nope_head_dim 64 \
                            + qk_rope_head_dim 32, v_head_dim 64, YaRN RoPE factor 40); first \
                            layer dense SwiGLU 512, the other 1 MoE: 8 routed experts SwiGLU 128 \
                            top-2 with softmax routing plus 2 shared experts"},
        "parallelism": {"ici_fsdp": 4, "per_device_batch": 2},
    });
    let unet = serde_json::json!({
        "name": "tiny-unet", "chips": 2, "chip": "v5p", "metric": "step_ms", "published": 100.0,
        "model": {"family": "unet-diffusion", "latent": [16, 16, 4],
                  "optimizer": "adamw (b1 0.9, b2 0.999, wd 0.01), clip_by_global_norm 1.0",
                  "block": "UNet2DConditionModel: block_out_channels 64/128, 1 layers per block, \
                            attention head dim 32, cross-attention to 77x64 text embeddings, \
                            norm_num_groups overridden to 16"},
        "parallelism": {"data": 2, "per_device_batch": 2},
    });
    vec![maxtext, moe, unet]
}

#[test]
fn models_py_builds_maxtext_moe_and_unet_steps_hloc_simulates() {
    if !oracle_present() {
        return;
    }
    let python = hlo_io::oracle::python().expect("oracle python");
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/models.py");
    let dir_guard =
        tempfile::Builder::new().prefix("hloc-models-").tempdir().expect("a temporary directory");
    let dir = dir_guard.path();
    for row in tiny_new_families() {
        let name = row["name"].as_str().expect("name").to_string();
        let (hlo, meta) = (dir.join(format!("{name}.hlo")), dir.join(format!("{name}.json")));
        let o = Command::new(&python)
            .arg(&models)
            .arg(&hlo)
            .args(["--config", &row.to_string(), "--meta"])
            .arg(&meta)
            .output()
            .expect("models.py runs");
        assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        let m = read_json(&meta);
        let chips = row["chips"].as_u64().expect("chips");
        assert_eq!(m["devices"].as_u64(), Some(chips), "{name}: {m}");
        let params = m["params"].as_f64().expect("params");
        let flops = m["model_flops_per_device"].as_f64().expect("flops");
        assert!(params > 0.0 && flops > 0.0, "{name}: {m}");
        let text = std::fs::read_to_string(&hlo).expect("hlo");
        match name.as_str() {
            "tiny-maxtext" => {
                // MaxText's global batch: per_device_batch x every device, the tensor axis
                // included (2 x 8), each input split over all of them.
                assert!(text.contains("s32[16,512]{1,0} parameter"), "{name}: token inputs");
                // The row's convention: 6 N T + 12 H L D S T, the attention term not halved.
                let want =
                    6.0 * params * 512.0 * 2.0 + 12.0 * 4.0 * 2.0 * 128.0 * 512.0 * 512.0 * 2.0;
                assert!((flops - want).abs() <= 1e-9 * want, "{name}: {flops} != {want}");
            }
            "tiny-moe" => {
                assert!(m["flops_convention"].as_str().is_some_and(|c| c.contains("DeepSeek")));
                // Host devices: each expert's group as a batched matmul (no custom-calls).
                assert!(!text.contains("tpu_custom_call"), "{name}");
            }
            _ => {}
        }
        let sim = Command::new(env!("CARGO_BIN_EXE_hloc"))
            .arg("compile")
            .arg(&hlo)
            .args(["--chips", &chips.to_string(), "--config", "v5p", "--json"])
            .output()
            .expect("hloc runs");
        assert!(sim.status.success(), "{name}: {}", String::from_utf8_lossy(&sim.stderr));
        let report: serde_json::Value = serde_json::from_slice(&sim.stdout).expect("JSON report");
        assert!(report["step_time_us"].as_f64().is_some_and(|t| t > 0.0), "{name}: {report}");
        println!("{name}: {params} parameters, step {} us", report["step_time_us"]);
    }

    // On a TPU topology (the libtpu venv, optional): the same steps lowered with the Pallas
    // kernels (flash attention; splash attention and megablox), not compiled.
    let Some(tpu) = libtpu_python() else {
        return;
    };
    for row in tiny_new_families().into_iter().take(2) {
        let name = row["name"].as_str().expect("name").to_string();
        let (hlo, meta) =
            (dir.join(format!("{name}.tpu.hlo")), dir.join(format!("{name}.tpu.json")));
        let o = Command::new(&tpu)
            .arg(&models)
            .args(["--config", &row.to_string(), "--tpu", "auto", "--tpu-lowered"])
            .arg(&hlo)
            .arg("--meta")
            .arg(&meta)
            .output()
            .expect("models.py runs");
        assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        let m = read_json(&meta);
        assert!(m["tpu_custom_calls"].as_u64().is_some_and(|n| n > 0), "{name}: {m}");
        let text = std::fs::read_to_string(&hlo).expect("lowered module");
        assert!(text.contains("custom_call_target=\"tpu_custom_call\""), "{name}");
        assert!(text.contains("SPMDFullToShardShape"), "{name}: the kernels run in a shard_map");
        // Our pipeline partitions around the shard_maps and times the kernels by their
        // rules (`hlo_tpu::pallas`).
        let chips = m["devices"].as_u64().expect("devices").to_string();
        let sim = Command::new(env!("CARGO_BIN_EXE_hloc"))
            .arg("compile")
            .arg(&hlo)
            .args(["--chips", &chips, "--config", "v5p", "--json"])
            .output()
            .expect("hloc runs");
        assert!(sim.status.success(), "{name}: {}", String::from_utf8_lossy(&sim.stderr));
        let report: serde_json::Value = serde_json::from_slice(&sim.stdout).expect("JSON report");
        let kernels: Vec<&serde_json::Value> = report["per_op"]
            .as_array()
            .expect("per_op")
            .iter()
            .filter(|o| o["what"] == "custom-call")
            .collect();
        assert!(!kernels.is_empty(), "{name}: no Pallas kernel timed: {report}");
        for k in kernels {
            assert!(k["flops"].as_f64().is_some_and(|f| f > 0.0), "{name}: {k}");
            assert!(k["cycles"].as_u64().is_some_and(|c| c > 0), "{name}: {k}");
        }
    }
}
