//! The bundled model stays valid and the example binary runs on it.

#[test]
fn bundled_model_parses_verifies_and_round_trips() {
    let m = hlo_ir::parse_and_verify(hlo_examples::MLP_TRAIN_HLO).expect("the bundled model is valid");
    assert_eq!(m.entry().params().len(), 6, "4 weights, inputs and labels");
    let printed = hlo_ir::text::print(&m);
    let again = hlo_ir::parse_and_verify(&printed).expect("printed text parses");
    assert_eq!(hlo_ir::text::print(&again), printed);
}

#[test]
fn inspect_runs_on_the_bundled_model() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_inspect")).output().expect("inspect runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("module `jit_step`"), "{text}");
    assert!(text.contains("dot "), "the MLP has matrix products: {text}");
}

#[test]
fn training_with_the_interpreter_lowers_the_loss() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_train")).arg("15").output().expect("train runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let losses: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.rsplit_once("loss ").and_then(|(_, v)| v.trim().parse().ok()))
        .collect();
    assert_eq!(losses.len(), 15, "one loss per step");
    assert!(losses.windows(2).all(|w| w[1] < w[0]), "SGD on a fixed batch lowers the loss every step: {losses:?}");
}
