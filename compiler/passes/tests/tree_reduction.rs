//! `tree-reduction` against the interpreter: each rewritten reduction, run on the
//! interpreter before and after the pass on seeded inputs. Maximum, minimum, `and`, `or`
//! and integer sums are exact in any order, so their outputs must be bit-identical; f32
//! sums are checked against an f64 sum of the same inputs, within the error bound of a
//! sequential f32 sum (`n · ε · Σ|x|`), which the two-level sum's must meet as well. The
//! cases the pass must leave alone (a reduction that keeps a leading dimension, bf16
//! sums over the last dimension and another, f16, an initial value that is not the
//! reducer's identity, too little work) come out unchanged. bf16 column and row sums take
//! XLA's CPU tree (windows of 32, then their sums):
//! on the interpreter, a sum of 1000 ones is then 1000, not the 256 a sequential bf16
//! fold stalls at.

use hlo_interp as interp;
use hlo_interp::seeded;
use hlo_ir::{Module, Tensor};
use hlo_pipeline::Pipeline;

fn parse(src: &str) -> Module {
    hlo_check::parse(src)
        .unwrap_or_else(|d| panic!("{}", d.render(src, "t.hlo", false)))
        .into_inner()
}

/// A module reducing a `ty[dims]` parameter over `reduced` with `op` and `init`.
fn module(ty: &str, dims: &[u64], reduced: &[usize], op: &str, init: &str) -> String {
    let kept: Vec<String> =
        (0..dims.len()).filter(|d| !reduced.contains(d)).map(|d| dims[d].to_string()).collect();
    let all: Vec<String> = dims.iter().map(u64::to_string).collect();
    let red: Vec<String> = reduced.iter().map(usize::to_string).collect();
    format!(
        "HloModule t\n\nr {{\n  a = {ty}[] parameter(0)\n  b = {ty}[] parameter(1)\n  \
         ROOT c = {ty}[] {op}(a, b)\n}}\n\nENTRY main {{\n  p = {ty}[{}] parameter(0)\n  \
         i = {ty}[] constant({init})\n  ROOT s = {ty}[{}] reduce(p, i), dimensions={{{}}}, \
         to_apply=r\n}}\n",
        all.join(","),
        kept.join(","),
        red.join(",")
    )
}

/// The module after `tree-reduction`, and the number of reduces in its entry.
fn rewritten(src: &str) -> (Module, Module, usize) {
    let m = parse(src);
    let mut after = m.clone();
    let mut p = Pipeline::new(vec![hlo_pipeline::Step::Pass(
        hlo_passes::make_pass("tree-reduction").expect("registered"),
    )]);
    p.verify_each = true;
    p.run(&mut after).expect("the pass runs");
    let printed = hlo_ir::text::print(&after);
    let again = parse(&printed); // the result verifies and re-parses
    let reduces = printed.matches(" reduce(").count();
    (m, again, reduces)
}

/// One case: element type, dims, reduced dimensions, reducer, initial value.
type Case = (&'static str, &'static [u64], &'static [usize], &'static str, &'static str);

fn run(m: &Module, inputs: &[Tensor]) -> Tensor {
    interp::run(m, inputs).expect("runs").remove(0)
}

#[test]
fn exact_reductions_keep_their_bits() {
    let cases: [Case; 7] = [
        ("f32", &[16, 32, 32, 32], &[0, 1, 2], "maximum", "-inf"),
        ("f32", &[16384, 32], &[0], "minimum", "inf"),
        ("s32", &[4096, 64], &[0], "add", "0"),
        ("s32", &[64, 64, 64], &[0, 1], "maximum", "-2147483648"),
        ("u8", &[8192, 16], &[0], "minimum", "255"),
        ("pred", &[2048, 128], &[0], "or", "false"),
        ("pred", &[1 << 18], &[0], "and", "true"),
    ];
    for (ty, dims, reduced, op, init) in cases {
        let src = module(ty, dims, reduced, op, init);
        let (m, after, reduces) = rewritten(&src);
        assert_eq!(reduces, 2, "{ty}{dims:?} {op}: rewritten into two reductions");
        for seed in [1, 2] {
            let inputs = seeded::seeded_inputs(&m.entry_param_shapes(), seed).expect("inputs");
            let (a, b) = (run(&m, &inputs), run(&after, &inputs));
            assert_eq!(a.dims(), b.dims());
            assert_eq!(a.bytes(), b.bytes(), "{ty}{dims:?} {op}: bits differ");
        }
    }
}

#[test]
fn float_sums_stay_within_the_sequential_error_bound() {
    let cases: [(&[u64], &[usize]); 4] = [
        (&[16, 32, 32, 32], &[0, 1, 2]), // groups: the batch
        (&[16384, 32], &[0]),            // groups: 16 x 1024 rows
        (&[2, 512, 256], &[0, 1]),       // groups: 2 x 4
        (&[1 << 20], &[0]),              // to a scalar: 32 x 2^15
    ];
    for (dims, reduced) in cases {
        let src = module("f32", dims, reduced, "add", "0");
        let (m, after, reduces) = rewritten(&src);
        assert_eq!(reduces, 2, "{dims:?}: rewritten");
        let inputs = seeded::seeded_inputs(&m.entry_param_shapes(), 3).expect("inputs");
        let x: Vec<f64> = inputs[0].to_f64_vec().expect("f32");
        let got = run(&after, &inputs).to_f64_vec().expect("f32");
        let before = run(&m, &inputs).to_f64_vec().expect("f32");
        let cols = got.len();
        let rows = x.len() / cols;
        for c in 0..cols {
            let (mut exact, mut abs) = (0.0f64, 0.0f64);
            for r in 0..rows {
                exact += x[r * cols + c];
                abs += x[r * cols + c].abs();
            }
            let bound = rows as f64 * f64::from(f32::EPSILON) * abs;
            let err = (got[c] - exact).abs();
            assert!(err <= bound, "{dims:?} column {c}: error {err} over {bound}");
            // The sequential sum meets the same bound (the check can tell them apart).
            assert!((before[c] - exact).abs() <= bound);
        }
        assert_ne!(got, before, "{dims:?}: grouped sums round differently somewhere");
    }
}

#[test]
fn reductions_that_split_already_or_cannot_are_left_alone() {
    let cases: [Case; 10] = [
        // A leading kept dimension: the runtime splits over it.
        ("f32", &[64, 512, 32], &[1], "add", "0"),
        // Reduced along the last dimension (rows).
        ("f32", &[32, 16384], &[1], "add", "0"),
        // bf16 sums over the last dimension and another, f16 sums, bf16 maxima, and
        // bf16 sums whose reduced dimensions are all short (XLA leaves them too).
        ("bf16", &[64, 32, 4096], &[1, 2], "add", "0"),
        ("f16", &[16384, 32], &[0], "add", "0"),
        ("bf16", &[16384, 32], &[0], "maximum", "-inf"),
        ("bf16", &[32, 32, 64], &[0, 1], "add", "0"),
        // Not the reducer's identity: counted once per group it would change the result.
        ("f32", &[16384, 32], &[0], "add", "1"),
        ("f32", &[16384, 32], &[0], "maximum", "0"),
        // Too little work for two groups.
        ("f32", &[1024, 32], &[0], "add", "0"),
        // Enough blocks of columns.
        ("f32", &[256, 8192], &[0], "add", "0"),
    ];
    for (ty, dims, reduced, op, init) in cases {
        let src = module(ty, dims, reduced, op, init);
        let (m, after, reduces) = rewritten(&src);
        assert_eq!(reduces, 1, "{ty}{dims:?} over {reduced:?} {op} {init}: left alone");
        assert_eq!(hlo_ir::text::print(&m), hlo_ir::text::print(&after));
    }
}

#[test]
fn bf16_sums_take_xlas_windows_of_32() {
    // 1000 rows: padded by 12 and 12 to 32 windows; two reduced dimensions, one short.
    for (dims, reduced, pads) in
        [(&[1000u64, 16][..], &[0usize][..], true), (&[8, 128, 64], &[0, 1], false)]
    {
        let src = module("bf16", dims, reduced, "add", "0");
        let (m, after, reduces) = rewritten(&src);
        assert_eq!(reduces, 2, "{dims:?}: windows, then their sums");
        let printed = hlo_ir::text::print(&after);
        assert_eq!(
            printed.contains(" pad("),
            pads,
            "{dims:?}: padded to whole windows:\n{printed}"
        );
        let n: u64 = dims.iter().product();
        let one_bf16 = 0x3f80u16.to_le_bytes(); // 1.0
        let bytes = one_bf16.iter().copied().cycle().take(2 * n as usize).collect();
        let ones = Tensor::from_bytes(hlo_ir::ElemType::BF16, dims.to_vec(), bytes).unwrap();
        let rows: u64 = reduced.iter().map(|&d| dims[d]).product();
        let ones = [ones];
        let (a, b) = (run(&m, &ones), run(&after, &ones));
        assert!(
            a.to_f64_vec().unwrap().iter().all(|&v| v == 256.0),
            "a sequential bf16 fold stalls at 256"
        );
        assert!(
            b.to_f64_vec().unwrap().iter().all(|&v| v == rows as f64),
            "{dims:?}: {rows} ones sum to {rows}"
        );
    }
}
