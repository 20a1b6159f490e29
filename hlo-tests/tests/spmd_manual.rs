//! Manual sharding regions (`shard_map`, as JAX writes it with GSPMD shardings): the
//! partitioner keeps the region's per-device body as written, its borders
//! (`SPMDFullToShardShape`, `SPMDShardToFullShape`) the local shards of the sharded
//! arrays. Checked on interpreter devices against an equivalent global module (the
//! runtime's compiled devices: `runtime/tests/spmd_corpus.rs`), on real
//! XLA (which partitions the same module itself, and runs ours as printed), and on the
//! TPU model with a Pallas kernel inside the region (how the published TPU runs call
//! flash attention).

use hlo_interp::seeded;
use hlo_io::npz;
use hlo_ir::{Module, Op};
use hlo_spmd::{devices, inventory};

fn case_text(name: &str) -> String {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cases/manual").join(name);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// `src` propagated and partitioned as `hloc run --devices` and `hloc compile --chips` do.
fn planned(src: &str) -> Result<devices::Plan, String> {
    let m = hlo_check::parse(src).map_err(|d| d.render(src, "case", false))?;
    let global = hlo_tests::propagated(&m).map_err(|d| d.render(src, "case", false))?;
    devices::plan(&global).map_err(|d| hlo_ir::Diagnostics::from(d).render(src, "case", false))
}

/// What the shard_map of `shard_map_psum.hlo` computes, written globally: the column
/// sums of `2a * b` over all rows (the psum of every device's rows), and
/// `tanh(2a) * sums + 1`.
const REFERENCE: &str = r#"
HloModule reference
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY main {
  a = f32[8,6] parameter(0)
  b = f32[8,6] parameter(1)
  two = f32[] constant(2)
  twos = f32[8,6] broadcast(two), dimensions={}
  a2 = f32[8,6] multiply(a, twos)
  prod = f32[8,6] multiply(a2, b)
  zero = f32[] constant(0)
  col = f32[6] reduce(prod, zero), dimensions={0}, to_apply=add
  t = f32[1,6] reshape(col)
  th = f32[8,6] tanh(a2)
  cols = f32[8,6] broadcast(col), dimensions={1}
  scaled = f32[8,6] multiply(th, cols)
  one = f32[] constant(1)
  ones = f32[8,6] broadcast(one), dimensions={}
  y = f32[8,6] add(scaled, ones)
  ROOT out = (f32[8,6], f32[1,6]) tuple(y, t)
}
"#;

fn custom_call_targets(m: &Module) -> Vec<String> {
    let mut out = Vec::new();
    for c in m.comps() {
        for i in c.instrs() {
            if let Op::CustomCall(cc) = &i.op {
                out.push(cc.target.clone());
            }
        }
    }
    out
}

/// The shard_map as JAX writes it with GSPMD shardings, and as it writes it by default
/// (Shardy: `sdy-manual-regions` turns its borders into GSPMD's).
const FORMS: [&str; 2] = ["shard_map_psum.hlo", "shard_map_psum_sdy.hlo"];

#[test]
fn a_shard_map_keeps_its_body_and_reproduces_the_global_computation() {
    for form in FORMS {
        check_form(form);
    }
}

fn check_form(form: &str) {
    let src = case_text(form);
    let plan = planned(&src).unwrap_or_else(|e| panic!("{e}"));
    let printed = hlo_ir::text::print(&plan.module);
    hlo_check::parse(&printed)
        .unwrap_or_else(|d| panic!("{}\n{printed}", d.render(&printed, "partitioned", false)));
    // The borders are gone: each device's shard is its local array.
    let left = custom_call_targets(&plan.module);
    assert!(left.is_empty(), "custom-calls left in the partitioned program: {left:?}");
    // The body's psum is the only collective: the inputs arrive split as the region wants
    // them, the split output leaves as it is and the psum'd one is already replicated.
    let inv = inventory::describe(&inventory::inventory(&plan.module));
    assert_eq!(inv, "1 all-reduce (24 B)", "{form}: {printed}");
    assert_eq!(plan.devices, 4);
    let reference = hlo_check::parse(REFERENCE).expect("reference parses");
    let original = hlo_check::parse(&src).expect("case parses");
    let inputs = seeded::seeded_inputs(&original.entry_param_shapes(), 11).expect("inputs");
    let expected = hlo_interp::run(&reference, &inputs).expect("reference runs");
    let got = hlo_devices::run_interp(&plan, &inputs).expect("4 interpreter devices run");
    assert_eq!(got.len(), expected.len());
    let tol = hlo_io::compare::Tolerance { rtol: 1e-5, atol: 1e-5 };
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        hlo_io::compare::compare(g, e, tol)
            .unwrap_or_else(|err| panic!("{form}: output {i}: {err}"));
    }
}

#[test]
fn xla_partitions_the_same_shard_map_to_the_same_outputs() {
    let Some(python) = hlo_tests::oracle_python(module_path!()) else {
        return;
    };
    let src = case_text("shard_map_psum.hlo");
    let plan = planned(&src).unwrap_or_else(|e| panic!("{e}"));
    let original = hlo_check::parse(&src).expect("case parses");
    let inputs = seeded::seeded_inputs(&original.entry_param_shapes(), 11).expect("inputs");
    let ours = hlo_devices::run_interp(&plan, &inputs).expect("4 interpreter devices run");
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/spmd-manual");
    std::fs::create_dir_all(&out).expect("target dir");
    let named: Vec<(String, &hlo_ir::Tensor)> =
        inputs.iter().enumerate().map(|(i, t)| (format!("p{i}"), t)).collect();
    let refs: Vec<(&str, &hlo_ir::Tensor)> = named.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    let inputs_file = out.join("shard_map_psum.inputs.npz");
    npz::write_arrays(&inputs_file, &refs).expect("inputs npz");
    let expect = out.join("shard_map_psum.outputs.npz");
    npz::write_npz(&expect, &ours).expect("outputs npz");
    let (ins, outs) = hlo_tests::plan_shardings(&plan);
    let tol = serde_json::json!({ "tolerance": { "rtol": 1e-5, "atol": 1e-5 } });
    let meta = serde_json::json!({
        "sharding": { "input_shardings": ins, "output_shardings": outs },
        "outputs": vec![tol; ours.len()],
    });
    let meta_file = out.join("shard_map_psum.json");
    std::fs::write(&meta_file, meta.to_string()).expect("meta");
    let mut failed = Vec::new();
    // XLA's own partitioner on the module as JAX wrote it, then our partitioned program
    // as printed.
    let original_file = out.join("shard_map_psum.hlo");
    std::fs::write(&original_file, &src).expect("write");
    let partitioned_file = out.join("shard_map_psum.partitioned.hlo");
    std::fs::write(&partitioned_file, hlo_ir::text::print(&plan.module)).expect("write");
    // Ours from the Shardy form (the oracle's XLA partitions with GSPMD only: it refuses
    // Shardy's custom-calls in text).
    let from_shardy =
        planned(&case_text("shard_map_psum_sdy.hlo")).unwrap_or_else(|e| panic!("{e}"));
    let shardy_file = out.join("shard_map_psum_sdy.partitioned.hlo");
    std::fs::write(&shardy_file, hlo_ir::text::print(&from_shardy.module)).expect("write");
    for (file, partitioned) in
        [(&original_file, false), (&partitioned_file, true), (&shardy_file, true)]
    {
        let mut args: Vec<std::ffi::OsString> = vec!["--partitions".into(), "4".into()];
        if partitioned {
            args.push("--partitioned".into());
        }
        args.extend(["--expect".into(), expect.clone().into(), "--meta".into()]);
        args.push(meta_file.clone().into());
        let (ok, verdict, all) = hlo_tests::run_oracle(&python, file, &inputs_file, &args);
        println!("{}: {verdict}", file.display());
        if !ok {
            failed.push(format!("{}:\n{all}", file.display()));
        }
    }
    assert!(failed.is_empty(), "XLA disagrees:\n{}", failed.join("\n"));
}

/// Misused regions are located errors naming what is wrong.
#[test]
fn misused_manual_regions_are_located_errors() {
    let wrong_shard = r#"
HloModule wrong_shard
ENTRY main {
  x = f32[8,6] parameter(0), sharding={devices=[4,1]<=[4]}
  s = f32[8,6] custom-call(x), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  l = f32[4,6] custom-call(s), custom_call_target="SPMDFullToShardShape", sharding={manual}
  n = f32[4,6] negate(l), sharding={manual}
  m = f32[4,6] custom-call(n), custom_call_target="Sharding", sharding={manual}
  ROOT f = f32[16,6] custom-call(m), custom_call_target="SPMDShardToFullShape", sharding={devices=[4,1]<=[4]}
}
"#;
    let e = planned(wrong_shard).err().expect("a wrong shard shape is refused");
    assert!(e.contains("case:6:3: error:") && e.contains("per-device shape [2, 6]"), "{e}");
    let sharded_inside = r#"
HloModule sharded_inside
ENTRY main {
  x = f32[8,6] parameter(0), sharding={devices=[4,1]<=[4]}
  y = f32[2,6] parameter(1), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
  s = f32[8,6] custom-call(x), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  l = f32[2,6] custom-call(s), custom_call_target="SPMDFullToShardShape", sharding={manual}
  n = f32[2,6] add(l, y), sharding={manual}
  m = f32[2,6] custom-call(n), custom_call_target="Sharding", sharding={manual}
  ROOT f = f32[8,6] custom-call(m), custom_call_target="SPMDShardToFullShape", sharding={devices=[4,1]<=[4]}
}
"#;
    let e = planned(sharded_inside).err().expect("a sharded operand inside is refused");
    assert!(e.contains("case:8:3: error:") && e.contains("without `SPMDFullToShardShape`"), "{e}");
    let escapes = r#"
HloModule escapes
ENTRY main {
  x = f32[8,6] parameter(0), sharding={devices=[4,1]<=[4]}
  s = f32[8,6] custom-call(x), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  l = f32[2,6] custom-call(s), custom_call_target="SPMDFullToShardShape", sharding={manual}
  ROOT n = f32[2,6] negate(l), sharding={manual}
}
"#;
    let partial = case_text("shard_map_psum_sdy.hlo")
        .replace("#sdy.mesh<[\"x\"=4]>", "#sdy.mesh<[\"x\"=4, \"y\"=1]>");
    let e = planned(&partial).err().expect("a partly manual region is refused");
    assert!(e.contains("error:") && e.contains("only some mesh axes"), "{e}");
    let e = planned(escapes).err().expect("a manual output is refused");
    assert!(
        e.contains("case:7:8: error:") && e.contains("manual region is an input or output"),
        "{e}"
    );
}

/// Base64 (standard alphabet, padded) of `bytes`: a Mosaic body for a test kernel.
fn base64(bytes: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let v = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(A[(v >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A Pallas splash-attention forward kernel inside a shard_map over 4 chips (as MaxText
/// and MaxDiffusion call it, lowered for TPU): our pipeline partitions around it and the
/// TPU model times it by the kernel's rule on its per-chip shapes.
#[test]
fn a_pallas_kernel_inside_a_shard_map_is_timed_per_chip() {
    let body = base64(b"splash_attention_kernel splash_mha_fwd_residuals");
    let src = format!(
        r#"
HloModule flash
ENTRY main {{
  q = bf16[8,4,1024,128] parameter(0), sharding={{devices=[4,1,1,1]<=[4]}}
  mask = s8[1,2,2] constant({{ {{ {{1,1}}, {{1,1}} }} }})
  qs = bf16[8,4,1024,128] custom-call(q), custom_call_target="Sharding", sharding={{devices=[4,1,1,1]<=[4]}}
  ql = bf16[2,4,1024,128] custom-call(qs), custom_call_target="SPMDFullToShardShape", sharding={{manual}}
  ms = s8[1,2,2] custom-call(mask), custom_call_target="Sharding", sharding={{replicated}}
  ml = s8[1,2,2] custom-call(ms), custom_call_target="SPMDFullToShardShape", sharding={{manual}}
  o = bf16[2,4,1024,128] custom-call(ml, ql, ql, ql), custom_call_target="tpu_custom_call", backend_config={{"custom_call_config": {{"body": "{body}"}}}}, sharding={{manual}}
  os = bf16[2,4,1024,128] custom-call(o), custom_call_target="Sharding", sharding={{manual}}
  ROOT out = bf16[8,4,1024,128] custom-call(os), custom_call_target="SPMDShardToFullShape", sharding={{devices=[4,1,1,1]<=[4]}}
}}
"#
    );
    let checked =
        hlo_driver::parse(&src).unwrap_or_else(|d| panic!("{}", d.render(&src, "flash", false)));
    let engine = hlo_engine::TpuModel::new(hlo_driver::Tpu::new(
        hlo_chip::config::TpuConfig::v5p(),
        hlo_tpu::lower::Passes::AsWritten,
    ));
    let exe = engine
        .compile_chips(&checked, 4, &Default::default())
        .unwrap_or_else(|e| panic!("{}", e.diagnostics().render(&src, "flash", false)));
    // One chip's program, timed alone (the kernel's FLOPs are per chip).
    let chip = &exe.compiled.program.program;
    let run = hlo_tpu::engine::simulate(&chip.module, &chip.lowered, None, &exe.options())
        .unwrap_or_else(|d| panic!("{}", d.message));
    hlo_tests::tpu_report_invariants("flash", &run).unwrap_or_else(|e| panic!("{e}"));
    let report = run.sim.report();
    let kernel = report
        .per_op
        .iter()
        .find(|o| o.name == "o" || o.name.starts_with("o."))
        .unwrap_or_else(|| panic!("no kernel `o` in {:?}", report.per_op));
    // Per chip: 2 x 4 heads, every one of the 2 x 2 blocks of the 1024 x 1024 scores
    // computed, q.k and p.v: 2 products of 2 * 1024 * 1024 * 128 FLOPs per head.
    let per_chip = 2.0 * 4.0 * 2.0 * 2.0 * 1024.0 * 1024.0 * 128.0;
    assert_eq!(kernel.flops, per_chip, "{kernel:?}");
}
