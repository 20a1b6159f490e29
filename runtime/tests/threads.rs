//! A program runs on the pool of the size its options say ([`Runtime::with_threads`],
//! [`CompileOptions::with_threads`], [`Program::with_threads`]), and large kernels split
//! over that pool give the same bits on any number of threads.

use hlo_ir::Tensor;
use hlo_runtime::{CompileOptions, Program, RunOptions, Runtime, Stats};

/// A row-wise softmax-like step over 256 rows of 1000 (loop kernels, a row reduction, a
/// column reduction) and a sort of 64 rows: every kind that splits.
const SRC: &str = "HloModule t
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
less {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT l = pred[] compare(a, b), direction=LT
}
ENTRY e {
  x = f32[256,1000] parameter(0)
  e = f32[256,1000] exponential(x)
  z = f32[] constant(0)
  rs = f32[256] reduce(e, z), dimensions={1}, to_apply=add
  b = f32[256,1000] broadcast(rs), dimensions={0}
  d = f32[256,1000] divide(e, b)
  cs = f32[1000] reduce(d, z), dimensions={0}, to_apply=add
  s = f32[256,1000] sort(x), dimensions={1}, to_apply=less
  ROOT t = (f32[256,1000], f32[1000], f32[256,1000]) tuple(d, cs, s)
}
";

fn input() -> Tensor {
    let v: Vec<f32> = (0..256 * 1000).map(|i| ((i * 7919) % 1013) as f32 / 97.0 - 5.0).collect();
    Tensor::from_f32(&[256, 1000], &v).unwrap()
}

fn run_stats(p: &Program, x: &Tensor) -> (Vec<Vec<u8>>, Stats) {
    run_stats_on(p, std::slice::from_ref(x))
}

/// The outputs' bytes and the run's statistics.
fn run_stats_on(p: &Program, inputs: &[Tensor]) -> (Vec<Vec<u8>>, Stats) {
    let mut stats = Stats::default();
    let mut outs = Vec::new();
    p.run_with(inputs, &mut outs, RunOptions::default().with_stats(&mut stats)).unwrap();
    (outs.iter().map(|t| t.bytes().to_vec()).collect(), stats)
}

#[test]
fn a_runtime_with_k_threads_runs_on_a_pool_of_k_threads_with_the_same_bits() {
    let m = hlo_driver::parse(SRC).unwrap().into_inner();
    let x = input();
    let mut first = None;
    for k in [1usize, 2, 3, 7] {
        let rt = Runtime::new().with_threads(k);
        let p = rt.compile("t.hlo", &m, &[x.shape()]).unwrap().program;
        assert_eq!(p.threads(), k);
        let (bytes, stats) = run_stats(&p, &x);
        assert_eq!(stats.threads, k, "the run's pool");
        match &first {
            None => first = Some(bytes),
            Some(f) => assert!(f == &bytes, "{k} threads: outputs differ from 1 thread's"),
        }
    }
}

#[test]
fn a_program_runs_on_the_pool_its_options_say() {
    let m = hlo_driver::parse(SRC).unwrap();
    let x = input();
    let p = Program::compile(&m, &CompileOptions::default().with_threads(3)).unwrap();
    assert_eq!(run_stats(&p, &x).1.threads, 3);
    let p = p.with_threads(Some(5));
    assert_eq!(run_stats(&p, &x).1.threads, 5);
    let p = p.with_threads(None);
    assert_eq!(run_stats(&p, &x).1.threads, hlo_runtime::default_threads());
}

/// One-dimensional vectorized loops split in runs of 4096 elements: lengths with a partial
/// last run and a scalar tail, a staged `exp` written by its host call, and two outputs of
/// one loop. Plain arithmetic is the interpreter's exactly; every output has the same bits
/// on 1, 3 and 7 threads.
#[test]
fn one_dimensional_vector_loops_split_in_runs_with_the_same_bits() {
    for n in [4096usize * 9, 4096 * 17 + 1, 4096 * 23 + 4093] {
        let src = format!(
            "HloModule t\nENTRY e {{\n  x = f32[{n}] parameter(0)\n  y = f32[{n}] parameter(1)\n  \
             m = f32[{n}] multiply(x, y)\n  a = f32[{n}] add(m, x)\n  e = f32[{n}] exponential(m)\n  \
             ROOT t = (f32[{n}], f32[{n}]) tuple(a, e)\n}}\n"
        );
        let m = hlo_driver::parse(&src).unwrap();
        let inputs = hlo_interp::seeded::seeded_inputs(&m.entry_param_shapes(), 11).unwrap();
        let want = hlo_interp::run(&m, &inputs).unwrap();
        let mut first: Option<Vec<Vec<u8>>> = None;
        for k in [1usize, 3, 7] {
            let p = Program::compile(&m, &CompileOptions::default().with_threads(k)).unwrap();
            let got = p.run(&inputs).unwrap();
            assert_eq!(got[0].bytes(), want[0].bytes(), "n = {n}, {k} threads: x*y + x");
            let bytes: Vec<Vec<u8>> = got.iter().map(|t| t.bytes().to_vec()).collect();
            match &first {
                None => first = Some(bytes),
                Some(f) => {
                    assert!(f == &bytes, "n = {n}, {k} threads: outputs differ from 1 thread's")
                }
            }
        }
    }
}

/// A convolution's path is the one it took, call by call: patches on the GEMM, or the
/// direct loop when an infinite weight would meet the zeros of the padding.
#[test]
fn a_convolutions_stats_name_the_path_it_took() {
    let src = "HloModule t
ENTRY e {
  x = f32[2,16,16,8] parameter(0)
  w = f32[3,3,8,16] parameter(1)
  ROOT c = f32[2,16,16,16] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}
";
    let m = hlo_driver::parse(src).unwrap();
    let p = Program::compile(&m, &CompileOptions::default()).unwrap();
    let x = Tensor::from_f32(&[2, 16, 16, 8], &vec![0.5; 2 * 16 * 16 * 8]).unwrap();
    let paths = |w: &[f32]| {
        let w = Tensor::from_f32(&[3, 3, 8, 16], w).unwrap();
        let mut stats = Stats::default();
        let mut outs = Vec::new();
        p.run_with(&[x.clone(), w], &mut outs, RunOptions::default().with_stats(&mut stats))
            .unwrap();
        let kind = hlo_runtime::KernelKind::Convolution;
        stats.paths[&kind].iter().copied().collect::<Vec<_>>()
    };
    let mut w = vec![0.25f32; 3 * 3 * 8 * 16];
    let gemm = hlo_runtime::cpu::conv_path(hlo_runtime::cpu::gemm_crate());
    assert_eq!(paths(&w), [gemm]);
    w[0] = f32::INFINITY;
    assert_eq!(paths(&w), [hlo_runtime::cpu::CONV_DIRECT]);
}

/// f32 `add` and `max` reducers for the modules below.
const REDUCERS: &str = "add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
";

/// Kernels over `[batch, rows, features]` split over their leading dimensions flattened,
/// not the batch alone: on 7 threads a batch of 4 runs in 7 parts. A softmax over the
/// features (a row chain: the reductions' `[4, 128]` rows are the elementwise kernels'
/// leading dimensions), a per-batch scale broadcast along the batch only, and a reshape
/// keeping the leading dimensions give the same bits on 1, 3 and 7 threads, and plain
/// arithmetic the interpreter's.
#[test]
fn kernels_split_over_their_leading_dimensions_not_the_batch_alone() {
    let entry = "ENTRY e {
  x = f32[4,128,512] parameter(0)
  s = f32[4] parameter(1)
  ninf = f32[] constant(-inf)
  z = f32[] constant(0)
  mx = f32[4,128] reduce(x, ninf), dimensions={2}, to_apply=max
  bm = f32[4,128,512] broadcast(mx), dimensions={0,1}
  d = f32[4,128,512] subtract(x, bm)
  e = f32[4,128,512] exponential(d)
  sm = f32[4,128] reduce(e, z), dimensions={2}, to_apply=add
  bs = f32[4,128,512] broadcast(sm), dimensions={0,1}
  p = f32[4,128,512] divide(e, bs)
  sc = f32[4,128,512] broadcast(s), dimensions={0}
  y = f32[4,128,512] multiply(x, sc)
  r = f32[4,128,8,64] reshape(y)
  ROOT t = (f32[4,128,512], f32[4,128,8,64]) tuple(p, r)
}
";
    let m = hlo_driver::parse(&["HloModule t\n", REDUCERS, entry].concat()).unwrap();
    let inputs = hlo_interp::seeded::seeded_inputs(&m.entry_param_shapes(), 3).unwrap();
    let want = hlo_interp::run(&m, &inputs).unwrap();
    let mut first: Option<Vec<Vec<u8>>> = None;
    for k in [1usize, 3, 7] {
        let p = Program::compile(&m, &CompileOptions::default().with_threads(k)).unwrap();
        let (bytes, stats) = run_stats_on(&p, &inputs);
        assert_eq!(bytes[1], want[1].bytes(), "{k} threads: x * s, reshaped");
        let chain = stats.by_name.keys().find(|n| n.split(" » ").count() >= 3);
        assert!(chain.is_some(), "the softmax runs as a row chain: {:?}", stats.by_name.keys());
        let most = stats.parts.values().copied().max().unwrap_or(0);
        assert_eq!(most, k, "{k} threads: the largest kernels run in {k} parts ({stats:?})");
        match &first {
            None => first = Some(bytes),
            Some(f) => assert!(f == &bytes, "{k} threads: outputs differ from 1 thread's"),
        }
    }
}

/// A column reduction with dimensions kept before its columns (`[8, 64, 1000]` summed
/// over the middle one, f32 and bf16, and a max) splits over those and its blocks of
/// columns, not its blocks alone (4 here): 7 parts on 7 threads, each result the
/// interpreter's bits (every element combines its rows in order) on 1, 3 and 7 threads,
/// the interpreter running the module as the host optimized it (the bf16 sum as XLA's
/// CPU tree: windows of 32 rows, then their sums).
#[test]
fn column_reductions_split_over_the_dimensions_before_their_columns() {
    let entry = "addh {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT s = bf16[] add(a, b)
}
ENTRY e {
  x = f32[8,64,1000] parameter(0)
  z = f32[] constant(0)
  ninf = f32[] constant(-inf)
  s = f32[8,1000] reduce(x, z), dimensions={1}, to_apply=add
  m = f32[8,1000] reduce(x, ninf), dimensions={1}, to_apply=max
  h = bf16[8,64,1000] convert(x)
  zh = bf16[] constant(0)
  sh = bf16[8,1000] reduce(h, zh), dimensions={1}, to_apply=addh
  ROOT t = (f32[8,1000], f32[8,1000], bf16[8,1000]) tuple(s, m, sh)
}
";
    let m = hlo_driver::parse(&["HloModule t\n", REDUCERS, entry].concat()).unwrap();
    let inputs = hlo_interp::seeded::seeded_inputs(&m.entry_param_shapes(), 5).unwrap();
    let host = hlo_driver::compile(&m, &hlo_driver::Host, &hlo_driver::Options::default())
        .unwrap()
        .program;
    let want: Vec<Vec<u8>> =
        hlo_interp::run(&host, &inputs).unwrap().iter().map(|t| t.bytes().to_vec()).collect();
    let as_written = hlo_interp::run(&m, &inputs).unwrap();
    assert_eq!(want[..2], [as_written[0].bytes(), as_written[1].bytes()], "f32: as written");
    for k in [1usize, 3, 7] {
        let p = Program::compile(&m, &CompileOptions::default().with_threads(k)).unwrap();
        let (bytes, stats) = run_stats_on(&p, &inputs);
        assert!(bytes == want, "{k} threads: the interpreter's bits");
        let most = stats.parts.values().copied().max().unwrap_or(0);
        assert_eq!(most, k, "{k} threads: the reductions run in {k} parts ({:?})", stats.parts);
    }
}

/// Reductions keeping a few columns and nothing before them (bias gradients: an f32 sum
/// of a product over `[16384, 32]`, a max over `[16, 32, 32, 32]` to `[32]`) had one
/// unit, so one part on any pool. The host pipeline's `tree-reduction` sums their rows in
/// fixed groups first, which split: 7 parts on 7 threads, the same bits on 1, 3 and 7
/// threads, and those of the interpreter running the module as the host optimized it
/// (the groups, then their partial results, each in order); the max is also the
/// interpreter's on the module as written (exact in any order).
#[test]
fn few_column_reductions_split_over_groups_of_their_rows() {
    let entry = "ENTRY e {
  x = f32[16384,32] parameter(0)
  y = f32[16384,32] parameter(1)
  a = f32[16,32,32,32] parameter(2)
  z = f32[] constant(0)
  ninf = f32[] constant(-inf)
  p = f32[16384,32] multiply(x, y)
  s = f32[32] reduce(p, z), dimensions={0}, to_apply=add
  m = f32[32] reduce(a, ninf), dimensions={0,1,2}, to_apply=max
  ROOT t = (f32[32], f32[32]) tuple(s, m)
}
";
    let m = hlo_driver::parse(&["HloModule t\n", REDUCERS, entry].concat()).unwrap();
    let inputs = hlo_interp::seeded::seeded_inputs(&m.entry_param_shapes(), 9).unwrap();
    let host = hlo_driver::compile(&m, &hlo_driver::Host, &hlo_driver::Options::default())
        .unwrap()
        .program;
    let text = hlo_ir::text::print(&host);
    assert_eq!(text.matches(" reduce(").count(), 4, "two reductions each:\n{text}");
    let want: Vec<Vec<u8>> =
        hlo_interp::run(&host, &inputs).unwrap().iter().map(|t| t.bytes().to_vec()).collect();
    let as_written = hlo_interp::run(&m, &inputs).unwrap();
    assert_eq!(want[1], as_written[1].bytes(), "the max does not depend on the order");
    for k in [1usize, 3, 7] {
        let p = Program::compile(&m, &CompileOptions::default().with_threads(k)).unwrap();
        let (bytes, stats) = run_stats_on(&p, &inputs);
        assert!(bytes == want, "{k} threads: the bits of the grouped reductions");
        let split = stats.parts.values().filter(|&&n| n == k).count();
        assert!(split >= 2, "{k} threads: both reductions run in {k} parts ({:?})", stats.parts);
    }
}
