//! Collectives on one device, without a fabric: what XLA computes with one participant.
//! A group of one makes each result its operand; a module whose groups have more members
//! (or that declares more devices) needs them, and a result that is not its operand's
//! shape (a growing all-gather) cannot be computed from one operand. The JIT must agree
//! with the interpreter on every such module, run after run (it used to copy the result's
//! byte count from the smaller operand, reading past its buffer).

use hlo_fabric::FabricError;
use hlo_ir::{Opcode, Tensor};
use hlo_runtime::{CompileOptions, Program, RunError, RuntimeError};

/// The JIT's and the interpreter's outcomes on `src` (seeded inputs), `runs` times each;
/// every JIT run must give the interpreter's outputs bit for bit, or fail where it fails.
fn agree(name: &str, src: &str, runs: usize) -> Result<Vec<Tensor>, String> {
    let m = hlo_driver::parse(src).unwrap_or_else(|d| panic!("{}", d.render(src, name, false)));
    let inputs = hlo_interp::seeded::seeded_inputs(&m.entry_param_shapes(), 3).expect("inputs");
    let want = hlo_interp::run(&m, &inputs).map_err(|e| e.to_string());
    let p =
        Program::compile(&m, &CompileOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    for run in 0..runs {
        let got = p.run(&inputs).map_err(|e| e.to_string());
        match (&got, &want) {
            (Ok(g), Ok(w)) => {
                assert_eq!(g.len(), w.len(), "{name}: output count");
                for (i, (g, w)) in g.iter().zip(w).enumerate() {
                    assert_eq!(g.shape(), w.shape(), "{name} run {run}: o{i}'s shape");
                    assert_eq!(g.bytes(), w.bytes(), "{name} run {run}: o{i} differs");
                }
            }
            (Err(_), Err(_)) => {}
            (Ok(_), Err(w)) => {
                panic!("{name} run {run}: the JIT ran what the interpreter refuses ({w})")
            }
            (Err(g), Ok(_)) => panic!("{name} run {run}: the JIT failed ({g})"),
        }
    }
    want
}

#[test]
fn collectives_over_groups_of_several_devices_fail_on_one_device() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../hlo-tests/cases/shape/collectives.hlo");
    let src = std::fs::read_to_string(path).expect("the golden case");
    let err = agree("collectives.hlo", &src, 8).expect_err("groups of 2 and 4 on one device");
    assert!(err.contains("all-gather"), "{err}");
    // The JIT names the instruction and the devices it needs.
    let e = jit_error(&src);
    match e.run_error() {
        Some(RunError::Collective {
            instruction,
            error: FabricError::NeedsDevices { opcode: Opcode::AllGather, group: 2, devices: 4 },
        }) => assert_eq!(instruction, "ag"),
        _ => panic!("{e:?}"),
    }
    assert!(e.to_string().starts_with("`ag`: all-gather over groups of 2 needs 4 devices"), "{e}");
}

/// The JIT's error running `src` (seeded inputs) on one device.
fn jit_error(src: &str) -> RuntimeError {
    let m = hlo_driver::parse(src).expect("parses");
    let inputs = hlo_interp::seeded::seeded_inputs(&m.entry_param_shapes(), 3).expect("inputs");
    let p = Program::compile(&m, &CompileOptions::default()).expect("compiles");
    p.run(&inputs).expect_err("one device")
}

#[test]
fn a_growing_all_gather_without_groups_fails_on_one_device() {
    // No replica groups: shape inference takes the declared size, but one device has one
    // participant, whose operand is smaller than the result.
    let src = "HloModule grow\nENTRY e {\n  x = f32[4,8] parameter(0)\n  ROOT ag = f32[8,8] all-gather(x), dimensions={0}\n}\n";
    let err = agree("grow.hlo", src, 8).expect_err("the result is not the operand");
    assert!(err.contains("f32[4,8]") && err.contains("f32[8,8]"), "{err}");
    let e = jit_error(src);
    match e.run_error() {
        Some(RunError::Collective { instruction, error: FabricError::Malformed(why) }) => {
            assert_eq!(instruction, "ag");
            assert!(why.contains("all-gather of f32[4,8] into f32[8,8] on one device"), "{why}");
        }
        _ => panic!("{e:?}"),
    }
}

#[test]
fn collectives_over_groups_of_one_are_the_identity() {
    let src = "HloModule single

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[4,8] parameter(0)
  ag = f32[4,8] all-gather(x), replica_groups={{0}}, dimensions={0}
  rs = f32[4,8] reduce-scatter(x), replica_groups={{0}}, dimensions={1}, to_apply=sum
  a2a = f32[4,8] all-to-all(x), replica_groups={{0}}, dimensions={1}
  ar = f32[4,8] all-reduce(x), replica_groups={}, to_apply=sum
  cp = f32[4,8] collective-permute(x), source_target_pairs={{0,0}}
  ROOT t = (f32[4,8], f32[4,8], f32[4,8], f32[4,8], f32[4,8]) tuple(ag, rs, a2a, ar, cp)
}
";
    let outs = agree("single.hlo", src, 8).expect("groups of one run on one device");
    let m = hlo_driver::parse(src).expect("parses");
    let x = &hlo_interp::seeded::seeded_inputs(&m.entry_param_shapes(), 3).expect("inputs")[0];
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.bytes(), x.bytes(), "o{i} is the operand");
    }
}
