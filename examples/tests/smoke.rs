//! The bundled model stays valid and the example binary runs on it.

#[test]
fn bundled_model_parses_verifies_and_round_trips() {
    let m =
        hlo_ir::parse_and_verify(hlo_examples::MLP_TRAIN_HLO).expect("the bundled model is valid");
    assert_eq!(m.entry().params().len(), 6, "4 weights, inputs and labels");
    let printed = hlo_ir::text::print(&m);
    let again = hlo_ir::parse_and_verify(&printed).expect("printed text parses");
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
