//! Sharding propagation on the sharded corpus cases against XLA's own answers: entry
//! parameter and output shardings equal `NAME.json`'s (semantically), and every
//! instruction's sharding is compared with `NAME.propagated.hlo` (matched by name after
//! the same inlining), reported as a percentage per case.

use hlo_ir::Module;
use hlo_spmd::sharding::compare::{agreement, parse_for};
use hlo_spmd::sharding::{Mesh, Spec};

const CASES: [&str; 4] = [
    "sharded_dp_explicit",
    "sharded_matmul_constraint",
    "sharded_mlp_train",
    "sharded_transformer_train",
];

fn propagate(src: &str) -> Module {
    let m = hlo_check::parse(src).expect("corpus case parses");
    hlo_tests::propagated(&m).expect("propagation runs")
}

fn json(name: &str) -> serde_json::Value {
    let path = hlo_tests::shared_dir().join(format!("corpus/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("case json")).expect("valid json")
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .expect("a list")
        .iter()
        .map(|s| s.as_str().expect("a string").to_string())
        .collect()
}

fn sharding_of(m: &Module, n: hlo_ir::NodeIndex) -> Spec {
    let c = m.comp(m.entry);
    c.instr(n)
        .sharding
        .as_ref()
        .and_then(|s| Spec::from_ir(s))
        .expect("every entry instruction is sharded")
}

#[test]
fn entry_parameters_and_outputs_match_xla() {
    let mut failures = Vec::new();
    for name in CASES {
        let src =
            std::fs::read_to_string(hlo_tests::shared_dir().join(format!("corpus/{name}.hlo")))
                .expect("case");
        let m = propagate(&src);
        let j = json(name);
        let sh = &j["sharding"];
        let mesh_axes: Vec<String> = strings(&sh["mesh"]["axes"]);
        let mesh_shape: Vec<i64> =
            sh["mesh"]["shape"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect();
        let mesh = Mesh { axes: mesh_axes.into_iter().zip(mesh_shape).collect() };
        let c = m.comp(m.entry);
        let params = c.params();
        let inputs = strings(&sh["input_shardings"]);
        assert_eq!(params.len(), inputs.len(), "{name}: parameter count");
        for (k, (&p, want)) in params.iter().zip(&inputs).enumerate() {
            let want = parse_for(want, &c.instr(p).shape).unwrap();
            let got = sharding_of(&m, p);
            if !got.same(&want) {
                failures.push(format!(
                    "{name}: parameter {k}: ours {} ({:?}), XLA {} ({:?})",
                    got.to_ir(),
                    mesh.describe(&got),
                    want.to_ir(),
                    mesh.describe(&want)
                ));
            }
        }
        let root = c.root().expect("root");
        let outs = strings(&sh["output_shardings"]);
        let got = sharding_of(&m, root);
        let leaves = match &got {
            Spec::Tuple(v) => v.clone(),
            s => vec![s.clone()],
        };
        let shapes: Vec<hlo_ir::Shape> = match &c.instr(root).shape {
            hlo_ir::Shape::Tuple(t) => t.clone(),
            s => vec![s.clone()],
        };
        assert_eq!(leaves.len(), outs.len(), "{name}: output count");
        for (k, ((g, want), shape)) in leaves.iter().zip(&outs).zip(&shapes).enumerate() {
            let want = parse_for(want, shape).unwrap();
            if !g.same(&want) {
                failures.push(format!(
                    "{name}: output {k}: ours {} ({:?}), XLA {} ({:?})",
                    g.to_ir(),
                    mesh.describe(g),
                    want.to_ir(),
                    mesh.describe(&want)
                ));
            }
        }
    }
    println!("{}", failures.join("\n"));
    assert!(
        failures.is_empty(),
        "{} shardings differ from XLA's:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The propagated modules run on real XLA with SPMD partitioning over 8 devices and
/// reproduce the case's outputs (skipped without the oracle).
#[test]
fn propagated_modules_run_partitioned_on_xla() {
    let Some(python) = hlo_tests::oracle_python(module_path!()) else {
        return;
    };
    let dir = hlo_tests::shared_dir().join("corpus");
    let out =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/sharding-propagated");
    std::fs::create_dir_all(&out).expect("target dir");
    let mut failed = Vec::new();
    for name in CASES {
        let src = std::fs::read_to_string(dir.join(format!("{name}.hlo"))).expect("case");
        let file = out.join(format!("{name}.hlo"));
        std::fs::write(&file, hlo_ir::text::print(&propagate(&src))).expect("write");
        let (expect, meta, save) = (
            dir.join(format!("{name}.outputs.npz")),
            dir.join(format!("{name}.json")),
            out.join(format!("{name}.outputs.npz")),
        );
        let args: [&std::ffi::OsStr; 8] = [
            "--partitions".as_ref(),
            "8".as_ref(),
            "--expect".as_ref(),
            expect.as_os_str(),
            "--meta".as_ref(),
            meta.as_os_str(),
            "-o".as_ref(),
            save.as_os_str(),
        ];
        let (ok, verdict, all) =
            hlo_tests::run_oracle(&python, &file, &dir.join(format!("{name}.inputs.npz")), &args);
        println!("{name}: {verdict}");
        if !ok {
            failed.push(format!("{name}:\n{all}"));
        }
    }
    assert!(
        failed.is_empty(),
        "XLA does not reproduce the outputs from our propagated modules:\n{}",
        failed.join("\n")
    );
}

#[test]
fn per_instruction_agreement_with_xla() {
    let mut report = Vec::new();
    let mut disagree = Vec::new();
    for name in CASES {
        let dir = hlo_tests::shared_dir().join("corpus");
        let src = std::fs::read_to_string(dir.join(format!("{name}.hlo"))).expect("case");
        let theirs_src = std::fs::read_to_string(dir.join(format!("{name}.propagated.hlo")))
            .expect("propagated");
        let theirs = hlo_check::parse(&theirs_src).expect("XLA's propagated module parses");
        let ours = propagate(&src);
        let a = agreement(&ours, &theirs);
        report.push(format!(
            "{name}: {}/{} instructions agree ({:.1}%), {} of XLA's names not in ours",
            a.agree,
            a.matched,
            a.percent(),
            a.unmatched.len()
        ));
        for d in &a.differences {
            report.push(format!("    {}: ours {} XLA {}", d.name, d.ours, d.theirs));
        }
        if a.agree != a.matched {
            disagree.push(name);
        }
    }
    println!("{}", report.join("\n"));
    assert!(
        disagree.is_empty(),
        "instructions sharded otherwise than XLA's propagation in {disagree:?}:\n{}",
        report.join("\n")
    );
}
