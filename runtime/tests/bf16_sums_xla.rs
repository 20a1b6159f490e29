//! bf16 column and row sums have XLA CPU's bits. XLA's CPU compiler runs a bf16
//! sum with a reduced dimension over 32 as a tree (`TreeReductionRewriter`): windows of
//! 32 summed with bf16 rounding at every step, then the window sums. A sequential fold,
//! which the interpreter runs (HLO leaves the order open), stalls: a sum of 1000 bf16 ones
//! is 256 there and 1000 in XLA. The host pipeline's `tree-reduction` writes XLA's tree
//! for column sums, so the JIT's outputs are XLA's bit for bit, on 1 and 3 threads.

use std::path::PathBuf;

use hlo_ir::Tensor;
use hlo_runtime::{CompileOptions, Program};

/// bf16 sums in the shapes that take each path of XLA's split: columns over a multiple of
/// 32 rows, over 1000 (padded), over two reduced dimensions (one of them short), a sum of
/// ones, rows of 1000, and sums of squares (the product fused into the sums' kernels).
const SRC: &str = "HloModule sums
add {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT s = bf16[] add(a, b)
}
ENTRY e {
  x = bf16[1024,64] parameter(0)
  y = bf16[1000,48] parameter(1)
  w = bf16[8,128,64] parameter(2)
  z = bf16[] constant(0)
  one = bf16[] constant(1)
  ones = bf16[1000,16] broadcast(one), dimensions={}
  sx = bf16[64] reduce(x, z), dimensions={0}, to_apply=add
  sy = bf16[48] reduce(y, z), dimensions={0}, to_apply=add
  sw = bf16[64] reduce(w, z), dimensions={0,1}, to_apply=add
  so = bf16[16] reduce(ones, z), dimensions={0}, to_apply=add
  r = bf16[64,1000] parameter(3)
  sr = bf16[64] reduce(r, z), dimensions={1}, to_apply=add
  rr = bf16[64,1000] multiply(r, r)
  sq = bf16[64] reduce(rr, z), dimensions={1}, to_apply=add
  yy = bf16[1000,48] multiply(y, y)
  sc = bf16[48] reduce(yy, z), dimensions={0}, to_apply=add
  ROOT t = (bf16[64], bf16[48], bf16[64], bf16[16], bf16[64], bf16[64], bf16[48]) tuple(sx, sy, sw, so, sr, sq, sc)
}
";

#[test]
fn bf16_sums_are_xlas_bit_for_bit() {
    let Some(python) = hlo_tests::oracle_python(module_path!()) else { return };
    let m = hlo_driver::parse(SRC).unwrap();
    let inputs = hlo_interp::seeded::seeded_inputs(&m.entry_param_shapes(), 11).unwrap();
    let dir_guard = tempfile::Builder::new()
        .prefix("hloc-bf16-sums-")
        .tempdir()
        .expect("a temporary directory");
    let dir = dir_guard.path();
    let (file, ins, outs) = (dir.join("sums.hlo"), dir.join("in.npz"), dir.join("out.npz"));
    std::fs::write(&file, SRC).unwrap();
    hlo_io::npz::write_arrays(
        &ins,
        &inputs
            .iter()
            .enumerate()
            .map(|(i, t)| (["p0", "p1", "p2", "p3"][i], t))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let script: PathBuf = hlo_tests::shared_dir().join("xla-oracle/run_hlo.py");
    let run = hlo_tests::oracle_command(&python)
        .arg(script)
        .arg(&file)
        .arg(&ins)
        .arg("-o")
        .arg(&outs)
        .output()
        .expect("the oracle runs");
    assert!(run.status.success(), "XLA: {}", String::from_utf8_lossy(&run.stderr));
    let xla = hlo_io::npz::read_outputs(&outs, &m.entry_output_shapes()).unwrap();
    // The all-ones sum tells the orders apart: 1000 in XLA, 256 folded in sequence.
    let interp = hlo_interp::run(&m, &inputs).unwrap();
    assert_ne!(xla[3].bytes(), interp[3].bytes(), "XLA's tree and a sequential fold differ");
    for k in [1usize, 3] {
        let p = Program::compile(&m, &CompileOptions::default().with_threads(k)).unwrap();
        let ours: Vec<Tensor> = p.run(&inputs).unwrap();
        for (i, (a, b)) in ours.iter().zip(&xla).enumerate() {
            assert_eq!(a.bytes(), b.bytes(), "{k} threads: output {i} is not XLA's bits");
        }
    }
}
