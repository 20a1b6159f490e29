//! The bundled model stays valid and the example binary runs on it.

#[test]
fn bundled_model_parses_verifies_and_round_trips() {
    let m = hlo_driver::parse(hlo_examples::MLP_TRAIN_HLO).expect("the bundled model is valid");
    assert_eq!(m.entry().params().len(), 6, "4 weights, inputs and labels");
    let printed = hlo_ir::text::print(&m);
    let again = hlo_driver::parse(&printed).expect("printed text parses");
    assert_eq!(hlo_ir::text::print(&again), printed);
}

#[test]
fn inspect_runs_on_the_bundled_model() {
    let out =
        std::process::Command::new(env!("CARGO_BIN_EXE_inspect")).output().expect("inspect runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("module `jit_step`"), "{text}");
    assert!(text.contains("dot "), "the MLP has matrix products: {text}");
}

#[test]
fn training_with_the_jit_lowers_the_loss_and_compiles_once_per_shape() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_train"))
        .arg("40")
        .output()
        .expect("train runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let (fixed, bucketed) = text.split_once("variable batch sizes").expect("two parts");
    let losses = |part: &str| -> Vec<f64> {
        part.lines()
            .filter_map(|l| l.rsplit_once("loss ").and_then(|(_, v)| v.trim().parse().ok()))
            .collect()
    };
    for (what, part) in [("fixed", fixed), ("bucketed", bucketed)] {
        let l = losses(part);
        assert!(l.len() >= 5, "{what}: {text}");
        assert!(l[l.len() - 1] < 0.5 * l[0], "{what}: the loss falls: {l:?}");
    }
    assert!(fixed.contains("cache: 1 compile, 39 hits"), "{text}");
    assert!(bucketed.contains("cache: 3 compiles (one per bucket), 37 hits"), "{text}");
    let explained = bucketed
        .lines()
        .filter(|l| {
            l.contains("compiled in")
                && l.contains("param 4: f32[")
                && l.contains(",24] before; param 5: s32[")
        })
        .count();
    assert_eq!(explained, 2, "the second and third bucket misses are explained: {text}");
}

/// The transformer's step on the JIT, on one device and data parallel on two, against the
/// losses XLA computed for the exporter's reference run (same state, same batch, three
/// steps): bf16 activations round differently along the way, so they agree to 1e-3, not
/// bit for bit.
#[test]
fn transformer_step_matches_xla_on_one_and_two_devices() {
    use hlo_examples::lm;
    let model = lm::Model::bundled().unwrap();
    assert_eq!(model.reference_losses.len(), 3, "the description records three losses");
    let module = hlo_driver::parse(lm::HLO).expect("the bundled step is valid");
    let batch = model.reference_batch(lm::TEXT).unwrap();
    let opts = hlo_runtime::CompileOptions::default();
    let one = hlo_runtime::Program::compile(&module, &opts).unwrap();
    let sharded = hlo_spmd::annotate::data_parallel(&module, 2, model.state_len()).unwrap();
    let sharded = hlo_driver::check(sharded, None).unwrap();
    let two = hlo_runtime::SpmdProgram::compile(&sharded, 2, &opts).unwrap();
    let mut steps = [
        hlo_runtime::TrainStep::new(one, model.reference_state().unwrap()).unwrap(),
        hlo_runtime::TrainStep::spmd(two, model.reference_state().unwrap()).unwrap(),
    ];
    for (devices, step) in [1, 2].into_iter().zip(steps.iter_mut()) {
        for (k, &want) in model.reference_losses.iter().enumerate() {
            let got = f64::from(step.step(std::slice::from_ref(&batch)).unwrap());
            let rel = (got - want).abs() / want.abs();
            assert!(rel < 1e-3, "{devices} device(s), step {k}: {got} vs XLA {want} ({rel:.1e})");
        }
    }
}

fn losses_csv(dir: &std::path::Path) -> Vec<f64> {
    std::fs::read_to_string(dir.join("losses.csv"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split_once(',').unwrap().1.parse().unwrap())
        .collect()
}

/// The transformer example: trains (the loss falls), checkpoints, stops abruptly, resumes
/// from its last checkpoint to the same bits as a run that never stopped, and draws its
/// loss curve.
#[test]
fn train_lm_trains_resumes_bit_for_bit_and_draws_its_curve() {
    let base_guard =
        tempfile::Builder::new().prefix("hlo-train-lm-").tempdir().expect("a temporary directory");
    let base = base_guard.path();
    let (straight, resumed) = (base.join("straight"), base.join("resumed"));
    let train = |dir: &std::path::Path, extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_train_lm"))
            .args(["--steps", "12", "--every", "5", "--devices", "2", "--dir"])
            .arg(dir)
            .args(extra)
            .output()
            .expect("train_lm runs")
    };
    let out = train(&straight, &[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let l = losses_csv(&straight);
    assert_eq!(l.len(), 12, "{text}");
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    assert!(mean(&l[9..]) < mean(&l[..3]) - 0.5, "the loss falls: {l:?}");
    let svg = std::fs::read_to_string(straight.join("loss.svg")).expect("the curve is drawn");
    assert!(svg.starts_with("<svg") && svg.contains("<polyline"), "{svg}");

    let out = train(&resumed, &["--crash-after", "7"]);
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    let out = train(&resumed, &[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("resumed from step 5"), "{text}");
    let a = hlo_runtime::checkpoint::load(&straight.join("latest.safetensors")).unwrap();
    let b = hlo_runtime::checkpoint::load(&resumed.join("latest.safetensors")).unwrap();
    assert_eq!((a.step, b.step), (12, 12));
    assert_eq!(a.tensors.len(), b.tensors.len());
    for ((na, ta), (nb, tb)) in a.tensors.iter().zip(&b.tensors) {
        assert_eq!(na, nb);
        assert!(ta.bytes() == tb.bytes(), "`{na}` differs after the resume");
    }
    assert_eq!(losses_csv(&resumed), l, "the resumed run's losses are the straight run's");
}
