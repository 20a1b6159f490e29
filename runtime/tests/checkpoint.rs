//! Checkpoints of a training step: saved and restored in another process, a run continues
//! bit for bit; a checkpoint of another program, of other shapes or types, or a damaged
//! file, is a clear error and the state stays as it was.
//!
//! The step is the bundled MLP (`examples/models/mlp_train.hlo`, SGD) on one device, and
//! the same step data parallel on two devices; batches are made from the step number, so
//! every process sees the same ones.

use std::path::Path;

use hlo_ir::{ElemType, Tensor};
use hlo_runtime::checkpoint::{self, CheckpointError};
use hlo_runtime::{CompileOptions, Program, RuntimeError, SpmdProgram, TrainStep};

const MLP: &str = include_str!("../../examples/models/mlp_train.hlo");
const STEPS: u64 = 6;
const SPLIT: u64 = 2;

fn module() -> hlo_driver::Checked<hlo_ir::Module> {
    hlo_driver::parse(MLP).expect("the MLP parses")
}

fn initial_state() -> Vec<Tensor> {
    let m = module();
    let inputs = hlo_io::npz::read_inputs(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/models/mlp_train.inputs.npz"),
        &m.entry_param_shapes(),
    )
    .expect("inputs");
    inputs[..4].to_vec()
}

/// The batch of step `k`: 16 rows of 24 features, labels 0..8.
fn batch(k: u64) -> Vec<Tensor> {
    let x: Vec<f32> = (0..16 * 24).map(|i| ((i as f32) * 0.37 + k as f32 * 1.3).sin()).collect();
    let y: Vec<i32> = (0..16).map(|i| (i * 5 + k as i32 * 3) % 8).collect();
    vec![Tensor::from_f32(&[16, 24], &x).unwrap(), Tensor::from_i32(&[16], &y).unwrap()]
}

fn names() -> Vec<String> {
    ["w1", "b1", "w2", "b2"].iter().map(|s| s.to_string()).collect()
}

fn one_device() -> TrainStep<'static> {
    let p = Program::compile(&module(), &CompileOptions::default()).expect("compiles");
    TrainStep::new(p, initial_state()).unwrap().with_names(names()).unwrap()
}

/// The MLP with its batch split over two devices (parameters replicated).
fn two_devices() -> TrainStep<'static> {
    let m = hlo_spmd::annotate::data_parallel(&module(), 2, 4).expect("annotates");
    let m = hlo_driver::check(m, None).expect("checks");
    let p = SpmdProgram::compile(&m, 2, &CompileOptions::default()).expect("compiles");
    assert_eq!(p.devices(), 2);
    TrainStep::spmd(p, initial_state()).unwrap().with_names(names()).unwrap()
}

fn run(step: &mut TrainStep<'_>, from: u64, to: u64) {
    for k in from..to {
        step.step(&batch(k)).expect("a step runs");
    }
}

fn bits(state: &[Tensor]) -> Vec<Vec<u8>> {
    state.iter().map(|t| t.bytes().to_vec()).collect()
}

/// A fresh directory, removed when the returned guard drops (a failing test's too).
fn scratch(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("hlo-ck-{tag}-")).tempdir().unwrap()
}

fn make(devices: &str) -> TrainStep<'static> {
    match devices {
        "1" => one_device(),
        "2" => two_devices(),
        d => panic!("devices {d}"),
    }
}

/// The second half of a run, as another process does it: restore `from`, run the
/// remaining steps, save to `to`. Run directly (no environment), it resumes a checkpoint
/// it writes itself, in this process, and compares with the run straight through.
#[test]
fn continue_from_checkpoint() {
    if let (Ok(from), Ok(to), Ok(dev)) =
        (std::env::var("HLO_CK_FROM"), std::env::var("HLO_CK_TO"), std::env::var("HLO_CK_DEVICES"))
    {
        let mut s = make(&dev);
        assert_eq!(s.restore(&from).expect("restores"), SPLIT);
        run(&mut s, SPLIT, STEPS);
        s.save(&to).expect("saves");
        return;
    }
    let scratch_dir = scratch("inproc");
    let dir = scratch_dir.path();
    let mut straight = one_device();
    run(&mut straight, 0, STEPS);
    let mut first = one_device();
    run(&mut first, 0, SPLIT);
    first.save(dir.join("a.safetensors")).unwrap();
    let mut second = one_device();
    assert_eq!(second.restore(dir.join("a.safetensors")).unwrap(), SPLIT);
    assert_eq!(second.steps(), SPLIT);
    run(&mut second, SPLIT, STEPS);
    assert_eq!(bits(second.state()), bits(straight.state()));
    assert_eq!(second.steps(), STEPS);
}

/// N steps straight = K steps, save, restore in a new process, N-K steps: the same bits,
/// on one device and on two.
#[test]
fn a_restored_run_continues_bit_for_bit_in_a_new_process() {
    for dev in ["1", "2"] {
        let scratch_dir = scratch(&format!("proc{dev}"));
        let dir = scratch_dir.path();
        let mut straight = make(dev);
        run(&mut straight, 0, STEPS);
        let mut first = make(dev);
        run(&mut first, 0, SPLIT);
        let (from, to) = (dir.join("k.safetensors"), dir.join("n.safetensors"));
        first.save(&from).unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "continue_from_checkpoint", "--nocapture", "--test-threads=1"])
            .env("HLO_CK_FROM", &from)
            .env("HLO_CK_TO", &to)
            .env("HLO_CK_DEVICES", dev)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the resuming process failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let ck = checkpoint::load(&to).expect("the other process wrote a checkpoint");
        assert_eq!(ck.step, STEPS);
        assert_eq!(ck.program, straight.fingerprint());
        let names: Vec<&str> = ck.tensors.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["w1", "b1", "w2", "b2"]);
        let resumed: Vec<Tensor> = ck.tensors.into_iter().map(|(_, t)| t).collect();
        assert_eq!(bits(&resumed), bits(straight.state()), "devices {dev}");
        // The run moved: the state after N steps is not the state after K.
        assert_ne!(bits(&resumed), bits(first.state()));
    }
}

/// The error of a restore that must fail; the state is left as it was.
fn refused(step: &mut TrainStep<'_>, path: &Path) -> CheckpointError {
    let before = (bits(step.state()), step.steps());
    let e = step.restore(path).expect_err("the restore is refused");
    assert_eq!((bits(step.state()), step.steps()), before, "a refused restore changed the state");
    match e {
        RuntimeError::Checkpoint(c) => c,
        e => panic!("not a checkpoint error: {e}"),
    }
}

#[test]
fn a_checkpoint_of_another_program_shape_or_type_is_refused_by_name() {
    let scratch_dir = scratch("wrong");
    let dir = scratch_dir.path();
    let ck = dir.join("mlp.safetensors");
    let mut s = one_device();
    run(&mut s, 0, 1);
    s.save(&ck).unwrap();

    // Same state shapes, another program (a different learning rate).
    let other = MLP.replacen("constant(0.05)", "constant(0.04)", 1);
    assert_ne!(other, MLP, "the MLP's learning rate constant moved");
    let p = Program::compile(&hlo_driver::parse(&other).unwrap(), &Default::default()).unwrap();
    let mut t = TrainStep::new(p, initial_state()).unwrap().with_names(names()).unwrap();
    let e = refused(&mut t, &ck);
    assert!(matches!(e, CheckpointError::WrongProgram { .. }), "{e}");
    assert!(e.to_string().contains("belongs to program"), "{e}");

    // Another shape: the tensor is named. (The crate example's step, on 4 and on 8 values.)
    let small = hlo_runtime::doc_example::STEP;
    let big = small.replace("f32[4]", "f32[8]");
    let step_of = |src: &str, n: u64| {
        let m = hlo_driver::parse(src).unwrap();
        let p = Program::compile(&m, &Default::default()).unwrap();
        let w = Tensor::from_f32(&[n], &vec![0.5; n as usize]).unwrap();
        TrainStep::new(p, vec![w]).unwrap().with_names(vec!["w".into()]).unwrap()
    };
    let small_ck = dir.join("small.safetensors");
    step_of(small, 4).save(&small_ck).unwrap();
    let e = refused(&mut step_of(&big, 8), &small_ck).to_string();
    assert!(e.contains("tensor `w`") && e.contains("f32[4]") && e.contains("f32[8]"), "{e}");

    // Another element type: a checkpoint whose `b1` is f64.
    let mut tensors: Vec<(String, Tensor)> =
        names().into_iter().zip(s.state().iter().cloned()).collect();
    let b1 = tensors[1].1.to_f64_vec().unwrap();
    tensors[1].1 = Tensor::from_f64(&[32], &b1).unwrap();
    let f64ck = dir.join("f64.safetensors");
    let refs: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    checkpoint::save(&f64ck, 1, s.fingerprint(), &refs).unwrap();
    let e = refused(&mut one_device(), &f64ck).to_string();
    assert!(e.contains("tensor `b1`") && e.contains("f64") && e.contains("f32"), "{e}");

    // Other names (the default `state.i`).
    let mut unnamed =
        TrainStep::new(Program::compile(&module(), &Default::default()).unwrap(), initial_state())
            .unwrap();
    let e = refused(&mut unnamed, &ck).to_string();
    assert!(e.contains("`state.0`") && e.contains("`w1`"), "{e}");
}

#[test]
fn a_damaged_checkpoint_is_detected_and_never_half_loaded() {
    let scratch_dir = scratch("damaged");
    let dir = scratch_dir.path();
    let ck = dir.join("mlp.safetensors");
    let mut s = one_device();
    run(&mut s, 0, 2);
    s.save(&ck).unwrap();
    let good = std::fs::read(&ck).unwrap();
    let header_len = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let mut fresh = one_device();

    // Truncated anywhere: in the length, the header, or the data.
    for cut in [0, 5, 8, 20, 8 + header_len / 2, 8 + header_len, good.len() - 1] {
        let p = dir.join(format!("cut{cut}.safetensors"));
        std::fs::write(&p, &good[..cut]).unwrap();
        let e = refused(&mut fresh, &p);
        assert!(matches!(e, CheckpointError::Corrupt { .. }), "cut at {cut}: {e}");
    }
    // A flipped bit in each tensor's data names the tensor.
    let loaded = checkpoint::load(&ck).unwrap();
    let data_start = 8 + header_len;
    let mut offset = data_start;
    // The file orders tensors by dtype then name; all are f32 here, so by name.
    let mut by_name: Vec<&(String, Tensor)> = loaded.tensors.iter().collect();
    by_name.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, t) in by_name {
        let mut bad = good.clone();
        bad[offset + t.bytes().len() / 2] ^= 0x10;
        offset += t.bytes().len();
        let p = dir.join(format!("flip-{name}.safetensors"));
        std::fs::write(&p, &bad).unwrap();
        let e = refused(&mut fresh, &p).to_string();
        assert!(e.contains(&format!("tensor `{name}`")) && e.contains("checksum"), "{e}");
    }
    assert_eq!(offset, good.len());
    // A changed digit in the header's metadata (the step count).
    let text = String::from_utf8_lossy(&good[8..data_start]).to_string();
    let at = text.find("\"step\":\"2\"").expect("the step is in the header") + 8;
    let mut bad = good.clone();
    bad[8 + at] = b'7';
    let p = dir.join("step.safetensors");
    std::fs::write(&p, &bad).unwrap();
    let e = refused(&mut fresh, &p).to_string();
    assert!(e.contains("metadata does not match its checksum"), "{e}");
    // Not a checkpoint at all, and no file.
    std::fs::write(dir.join("text.safetensors"), "HloModule m").unwrap();
    assert!(matches!(
        refused(&mut fresh, &dir.join("text.safetensors")),
        CheckpointError::Corrupt { .. }
    ));
    assert!(matches!(refused(&mut fresh, &dir.join("none")), CheckpointError::Io { .. }));
    // The good file still restores.
    assert_eq!(fresh.restore(&ck).unwrap(), 2);
    assert_eq!(bits(fresh.state()), bits(s.state()));
}

#[test]
fn a_failed_save_leaves_the_previous_checkpoint_and_no_temporary_file() {
    let scratch_dir = scratch("atomic");
    let dir = scratch_dir.path();
    let ck = dir.join("mlp.safetensors");
    let mut s = one_device();
    s.save(&ck).unwrap();
    let before = std::fs::read(&ck).unwrap();
    run(&mut s, 0, 1);
    // The destination is a directory: the rename fails after the data was written.
    let blocked = dir.join("blocked.safetensors");
    std::fs::create_dir(&blocked).unwrap();
    std::fs::write(blocked.join("x"), "x").unwrap();
    assert!(matches!(s.save(&blocked), Err(RuntimeError::Checkpoint(CheckpointError::Io { .. }))));
    // A directory that does not exist.
    assert!(s.save(dir.join("no/such/dir/ck.safetensors")).is_err());
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    assert_eq!(std::fs::read(&ck).unwrap(), before);
    // Element types safetensors cannot name are refused before anything is written.
    let t = Tensor::zeros(ElemType::C128, &[2]).unwrap();
    let e = checkpoint::save(&dir.join("c.safetensors"), 0, s.fingerprint(), &[("z", &t)]);
    assert!(matches!(e, Err(CheckpointError::Unsupported { .. })));
    assert!(!dir.join("c.safetensors").exists());
}

/// A program from a runtime records the fingerprint of the module it was given, whether it
/// was compiled or loaded from the cache directory as an optimized module: its checkpoints
/// restore in the other process.
#[test]
fn a_program_loaded_from_the_cache_directory_has_the_source_fingerprint() {
    let scratch_dir = scratch("cachedir");
    let dir = scratch_dir.path();
    let m = module();
    let shapes = m.entry_param_shapes();
    let compiled = hlo_runtime::Runtime::new().with_cache_dir(dir).compile("mlp", &m, &shapes);
    let compiled = compiled.unwrap();
    assert_eq!(compiled.disk, Some(hlo_runtime::DiskEvent::Stored));
    let loaded = hlo_runtime::Runtime::new().with_cache_dir(dir).compile("mlp", &m, &shapes);
    let loaded = loaded.unwrap();
    assert_eq!(loaded.disk, Some(hlo_runtime::DiskEvent::Loaded));
    assert_eq!(loaded.program.fingerprint(), compiled.program.fingerprint());
    assert_eq!(compiled.program.fingerprint(), one_device().fingerprint());
}
