//! The f32x4 paths against the interpreter on shapes whose last dimension is and is not a
//! multiple of four (main loop, tail, both): elementwise f32 and bf16 (vector loads,
//! rounding, stores), broadcasts along and across the lanes, transposes (per-lane
//! fallback), column reductions (exact: same order per element) and row reductions
//! (max exact; sums reassociated, within f32 rounding).

use hlo_interp as interp;

use hlo_interp::seeded;
use hlo_runtime::{CompileOptions, Program};

fn run_both(src: &str) -> (Vec<hlo_ir::Tensor>, Vec<hlo_ir::Tensor>) {
    let m = hlo_driver::parse(src).unwrap_or_else(|d| panic!("{}", d.render(src, "t.hlo", false)));
    let inputs = seeded::seeded_inputs(&m.entry_param_shapes(), 3).unwrap();
    let want = interp::run(&m, &inputs).unwrap();
    let got = Program::compile(&m, &CompileOptions::default()).unwrap().run(&inputs).unwrap();
    (got, want)
}

/// `src` run by the JIT and by the interpreter on `inputs`: (ours, the interpreter's).
fn run_on(src: &str, inputs: &[hlo_ir::Tensor]) -> (Vec<hlo_ir::Tensor>, Vec<hlo_ir::Tensor>) {
    let m = hlo_driver::parse(src).unwrap_or_else(|d| panic!("{}", d.render(src, "t.hlo", false)));
    let want = interp::run(&m, inputs).unwrap();
    let got = Program::compile(&m, &CompileOptions::default()).unwrap().run(inputs).unwrap();
    (got, want)
}

/// Each f32 output's elements the interpreter's bit for bit, or NaN where it gives NaN;
/// `what(k, i)` names element `i` of output `k` in the message.
fn assert_f32_bits(
    got: &[hlo_ir::Tensor],
    want: &[hlo_ir::Tensor],
    what: impl Fn(usize, usize) -> String,
) {
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g.to_vec::<f32>().unwrap(), w.to_vec::<f32>().unwrap());
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "{}: {a:e} ({:#010x}), the interpreter gives {b:e} ({:#010x})",
                what(k, i),
                a.to_bits(),
                b.to_bits()
            );
        }
    }
}

/// The computation `(a, b) -> op(a, b)` on scalars of type `t`, named `add`, `max`, `min`
/// or `mul` after `op`.
fn reducer(op: &str, t: &str) -> String {
    let name = match op {
        "maximum" => "max",
        "minimum" => "min",
        "multiply" => "mul",
        o => o,
    };
    format!(
        "{name} {{\n  a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n  ROOT s = {t}[] {op}(a, b)\n}}\n"
    )
}

#[test]
fn elementwise_f32_and_bf16_are_bit_exact_for_every_tail_length() {
    for n in 1..=9 {
        let src = format!(
            "HloModule t\nENTRY e {{\n  x = f32[3,{n}] parameter(0)\n  y = f32[3,{n}] parameter(1)\n  b = f32[{n}] parameter(2)\n  c = f32[3] parameter(3)\n  \
             m = f32[3,{n}] multiply(x, y)\n  bb = f32[3,{n}] broadcast(b), dimensions={{1}}\n  cc = f32[3,{n}] broadcast(c), dimensions={{0}}\n  \
             s = f32[3,{n}] add(m, bb)\n  t = f32[3,{n}] maximum(s, cc)\n  h = bf16[3,{n}] convert(t)\n  hh = bf16[3,{n}] multiply(h, h)\n  \
             tt = f32[{n},3] transpose(t), dimensions={{1,0}}\n  k = pred[3,{n}] compare(x, y), direction=LT\n  sel = f32[3,{n}] select(k, x, y)\n  \
             ROOT r = (bf16[3,{n}], f32[{n},3], f32[3,{n}]) tuple(hh, tt, sel)\n}}\n"
        );
        let (got, want) = run_both(&src);
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.bytes(), w.bytes(), "n = {n}");
        }
    }
}

#[test]
fn column_reductions_are_exact_and_row_reductions_close() {
    let (add, max) = (reducer("add", "f32"), reducer("maximum", "f32"));
    // Rows: fewer than two groups of four (one row at a time), and groups plus a
    // remainder; a 3-d input reduced over its first two dimensions (groups of the second).
    for m in [5usize, 11] {
        for n in [3usize, 4, 7, 8, 13] {
            let src = format!(
                "HloModule t\n{add}\
                 {max}\
                 ENTRY e {{\n  x = f32[{m},{n}] parameter(0)\n  y = f32[3,{m},{n}] parameter(1)\n  z = f32[] constant(0)\n  ninf = f32[] constant(-inf)\n  \
                 col = f32[{n}] reduce(x, z), dimensions={{0}}, to_apply=add\n  rmax = f32[{m}] reduce(x, ninf), dimensions={{1}}, to_apply=max\n  \
                 rsum = f32[{m}] reduce(x, z), dimensions={{1}}, to_apply=add\n  \
                 cmax = f32[{n}] reduce(x, ninf), dimensions={{0}}, to_apply=max\n  \
                 col3 = f32[{n}] reduce(y, z), dimensions={{0,1}}, to_apply=add\n  \
                 ROOT r = (f32[{n}], f32[{m}], f32[{m}], f32[{n}], f32[{n}]) tuple(col, rmax, rsum, cmax, col3)\n}}\n"
            );
            let (got, want) = run_both(&src);
            assert_eq!(got[0].bytes(), want[0].bytes(), "column sums, {m}x{n}");
            assert_eq!(got[1].bytes(), want[1].bytes(), "row max, {m}x{n}");
            assert_eq!(got[3].bytes(), want[3].bytes(), "column max, {m}x{n}");
            assert_eq!(got[4].bytes(), want[4].bytes(), "3-d column sums, {m}x{n}");
            hlo_io::compare::compare(
                &got[2],
                &want[2],
                hlo_io::compare::Tolerance { rtol: 1e-6, atol: 1e-6 },
            )
            .unwrap();
        }
    }
}

#[test]
fn kernels_split_across_threads_give_the_same_bits() {
    // 301 x 257 = 77,357 elements: above the split threshold, odd extents.
    let src = "HloModule t\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\
               ENTRY e {\n  x = f32[301,257] parameter(0)\n  y = f32[257] parameter(1)\n  yy = f32[301,257] broadcast(y), dimensions={1}\n  \
               m = f32[301,257] multiply(x, yy)\n  t = f32[301,257] maximum(m, yy)\n  z = f32[] constant(0)\n  col = f32[257] reduce(t, z), dimensions={0}, to_apply=add\n  \
               ROOT r = (f32[301,257], f32[257]) tuple(t, col)\n}\n";
    let (got, want) = run_both(src);
    assert_eq!(got[0].bytes(), want[0].bytes());
    assert_eq!(got[1].bytes(), want[1].bytes());
}

#[test]
fn bf16_column_reductions_are_exact() {
    let (add, max, mul) =
        (reducer("add", "bf16"), reducer("maximum", "bf16"), reducer("multiply", "bf16"));
    // bf16 sums, maxima and products over every dimension but the last (blocks of 256
    // columns plus a tail), rounded to bf16 after every combine as the reducer computes.
    for n in [3usize, 4, 13, 260, 517] {
        let src = format!(
            "HloModule t\n{add}\
             {max}\
             {mul}\
             ENTRY e {{\n  x = bf16[6,5,{n}] parameter(0)\n  z = bf16[] constant(0)\n  one = bf16[] constant(1)\n  ninf = bf16[] constant(-inf)\n  \
             e = bf16[6,5,{n}] exponential(x)\n  \
             s = bf16[{n}] reduce(e, z), dimensions={{0,1}}, to_apply=add\n  m = bf16[5,{n}] reduce(x, ninf), dimensions={{0}}, to_apply=max\n  \
             p = bf16[6,{n}] reduce(x, one), dimensions={{1}}, to_apply=mul\n  ROOT r = (bf16[{n}], bf16[5,{n}], bf16[6,{n}]) tuple(s, m, p)\n}}\n"
        );
        let (got, want) = run_both(&src);
        // exp differs from the interpreter's by up to an ulp before rounding to bf16; the
        // sum of its values is compared with the interpreter's within bf16 rounding, max and
        // product exactly.
        hlo_io::compare::compare(
            &got[0],
            &want[0],
            hlo_io::compare::Tolerance { rtol: 2e-2, atol: 1e-2 },
        )
        .unwrap();
        assert_eq!(got[1].bytes(), want[1].bytes(), "bf16 column max, n = {n}");
        assert_eq!(got[2].bytes(), want[2].bytes(), "bf16 column product, n = {n}");
    }
}

#[test]
fn pooling_windows_are_exact() {
    let (add, max) = (reducer("add", "f32"), reducer("maximum", "f32"));
    // Channels-last pooling (lanes along the channels, taps unrolled, no bounds checks when
    // every tap is inside) and windows that reach padding or span the channels (checked
    // taps, scalar code), with the select-and-scatter of the max-pool gradient: all exact.
    let cases = [
        ("1x2x2x1", "1x2x2x1", "0_0x0_0x0_0x0_0", 6, 3, 9, 9),
        ("1x3x3x1", "1x2x2x1", "0_0x1_1x1_1x0_0", 7, 4, 7, 7),
        ("1x2x2x2", "1x1x1x2", "0_0x0_0x0_0x0_0", 5, 4, 4, 2),
    ];
    for (size, stride, pad, hw, ohw, c, oc) in cases {
        let src = format!(
            "HloModule t\n{add}\
             {max}\
             ge {{\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = pred[] compare(a, b), direction=GE\n}}\n\
             ENTRY e {{\n  x = f32[3,{hw},{hw},{c}] parameter(0)\n  g = f32[3,{ohw},{ohw},{oc}] parameter(1)\n  \
             z = f32[] constant(0)\n  ninf = f32[] constant(-inf)\n  \
             mx = f32[3,{ohw},{ohw},{oc}] reduce-window(x, ninf), window={{size={size} stride={stride} pad={pad}}}, to_apply=max\n  \
             sm = f32[3,{ohw},{ohw},{oc}] reduce-window(x, z), window={{size={size} stride={stride} pad={pad}}}, to_apply=add\n  \
             sc = f32[3,{hw},{hw},{c}] select-and-scatter(x, g, z), window={{size={size} stride={stride} pad={pad}}}, select=ge, scatter=add\n  \
             ROOT r = (f32[3,{ohw},{ohw},{oc}], f32[3,{ohw},{ohw},{oc}], f32[3,{hw},{hw},{c}]) tuple(mx, sm, sc)\n}}\n"
        );
        let (got, want) = run_both(&src);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.bytes(), w.bytes(), "output {k}, window {size} stride {stride} pad {pad}");
        }
    }
}

/// A select-and-scatter whose windows stay within one batch row is computed a row range at
/// a time, on both threads when large: the same bits as the interpreter, with windows
/// that do not overlap, that overlap (adds into one element in order), and a window
/// along the batch (computed whole).
#[test]
fn select_and_scatter_by_rows_is_exact() {
    let cases = [
        ("1x2x2x1", "1x2x2x1", 16, 8),
        ("1x3x3x1", "1x1x1x1", 16, 14),
        ("2x2x2x1", "2x2x2x1", 8, 4),
    ];
    for (size, stride, hw, ohw) in cases {
        let (b, c) = (16, 16);
        let (ob, oc) = if size.starts_with('2') { (8, 16) } else { (16, 16) };
        let src = format!(
            "HloModule t\nadd {{\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}}\n\
             ge {{\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = pred[] compare(a, b), direction=GE\n}}\n\
             ENTRY e {{\n  x = f32[{b},{hw},{hw},{c}] parameter(0)\n  g = f32[{ob},{ohw},{ohw},{oc}] parameter(1)\n  \
             z = f32[] constant(0)\n  \
             ROOT sc = f32[{b},{hw},{hw},{c}] select-and-scatter(x, g, z), window={{size={size} stride={stride}}}, select=ge, scatter=add\n}}\n"
        );
        let (got, want) = run_both(&src);
        assert_eq!(got[0].bytes(), want[0].bytes(), "window {size} stride {stride}");
    }
}

#[test]
fn row_max_and_min_keep_nan_and_zero_signs() {
    let (max, min) = (reducer("maximum", "f32"), reducer("minimum", "f32"));
    // Row max/min in the four-accumulator loop (`maxps`/`minps` with NaN and zero-sign
    // tracking) and column max/min (`maxps`/`minps`, recomputed exactly for a block that
    // met a NaN or a zero): a NaN anywhere in a row, +0 among -0s (max: +0), -0 among +0s (min: -0),
    // rows of only -0 or only +0, at positions in the unrolled loop, the vector tail and
    // the scalar tail; every result exact (any NaN for a row with a NaN).
    let n = 37usize;
    let mut rows: Vec<Vec<f32>> = Vec::new();
    for pos in [0usize, 5, 20, 33, 36] {
        let mut r: Vec<f32> = (0..n).map(|i| -1.0 - i as f32).collect();
        r[pos] = f32::NAN;
        rows.push(r);
        let mut r = vec![-0.0f32; n];
        r[pos] = 0.0;
        rows.push(r);
        let mut r = vec![0.0f32; n];
        r[pos] = -0.0;
        rows.push(r);
        let mut r: Vec<f32> = (0..n).map(|i| if i % 3 == 0 { -0.0 } else { -(i as f32) }).collect();
        r[pos] = 0.0;
        rows.push(r);
    }
    rows.push(vec![-0.0; n]);
    rows.push(vec![0.0; n]);
    let m = rows.len();
    let src = format!(
        "HloModule t\n{max}\
         {min}\
         ENTRY e {{\n  x = f32[{m},{n}] parameter(0)\n  ninf = f32[] constant(-inf)\n  inf = f32[] constant(inf)\n  \
         mx = f32[{m}] reduce(x, ninf), dimensions={{1}}, to_apply=max\n  \
         mn = f32[{m}] reduce(x, inf), dimensions={{1}}, to_apply=min\n  \
         cmx = f32[{n}] reduce(x, ninf), dimensions={{0}}, to_apply=max\n  \
         cmn = f32[{n}] reduce(x, inf), dimensions={{0}}, to_apply=min\n  \
         ROOT r = (f32[{m}], f32[{m}], f32[{n}], f32[{n}]) tuple(mx, mn, cmx, cmn)\n}}\n"
    );
    let flat: Vec<f32> = rows.concat();
    let inputs = vec![hlo_ir::Tensor::from_f32(&[m as u64, n as u64], &flat).unwrap()];
    let (got, want) = run_on(&src, &inputs);
    assert_f32_bits(&got, &want, |k, i| {
        format!("{} {i}", ["row max", "row min", "column max", "column min"][k])
    });
}

/// Elementwise maximum and minimum on f32x4 (`vector::ieee_minmax`: `maxps` both ways
/// round, their AND or OR, the NaN lanes blended): every pair of special values in both
/// orders (NaNs of either sign and any payload, ±0, ±inf, equal values), in the
/// vector lanes and the scalar tail; the interpreter's bits (IEEE 754-2019: `+0` above
/// `-0`), any NaN where it gives NaN (the scalar tail's NaN keeps the sign of its operand).
#[test]
fn elementwise_max_and_min_are_ieee_on_every_pair_of_special_values() {
    let specials = [
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001), // a signalling NaN
        f32::from_bits(0xffc0_1234), // a negative NaN with a payload
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1.5,
        -1.5,
        f32::MIN_POSITIVE,
        f32::MAX,
    ]; // no subnormals: kernels run in XLA's flush-to-zero mode, the interpreter does not

    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for &x in &specials {
        for &y in &specials {
            xs.push(x);
            ys.push(y);
        }
    }
    let n = xs.len(); // 144 pairs, then 3 more: 36 vectors and a scalar tail
    for k in 0..3 {
        xs.push(specials[k]);
        ys.push(specials[k + 4]);
    }
    let n = n + 3;
    let src = format!(
        "HloModule t
ENTRY e {{
  x = f32[{n}] parameter(0)
  y = f32[{n}] parameter(1)
           mx = f32[{n}] maximum(x, y)
  mn = f32[{n}] minimum(x, y)
           ROOT r = (f32[{n}], f32[{n}]) tuple(mx, mn)
}}
"
    );
    let (got, want) = run_on(&src, &two_vectors(&xs, &ys));
    assert_f32_bits(&got, &want, |k, i| {
        format!("{}({:e}, {:e})", ["maximum", "minimum"][k], xs[i], ys[i])
    });
}

/// `xs` and `ys` as two f32 vector inputs.
fn two_vectors(xs: &[f32], ys: &[f32]) -> Vec<hlo_ir::Tensor> {
    [xs, ys].iter().map(|v| hlo_ir::Tensor::from_f32(&[v.len() as u64], v).unwrap()).collect()
}

/// f32 → bf16 rounding on the f32x4 path (`vector::bf16_rounded_bits`), alone, inside a
/// chain of bf16 operations, and through a select and a max of bf16 values stored without
/// rounding again: low halves just below, at and above the tie with an even and an odd
/// last kept bit, carries into the exponent, the largest finite values (rounding to
/// infinity), infinities, and NaNs whose payload lies only in the dropped half, of both
/// signs; the interpreter's bits (any NaN where it gives one, and NaN-ness kept).
#[test]
fn bf16_rounding_is_the_interpreters_on_every_edge() {
    let mut xs: Vec<f32> = Vec::new();
    for sign in [0u32, 0x8000_0000] {
        for hi in [0x3f80u32, 0x3f81, 0x4049, 0x407f, 0x7f7f, 0x0080, 0x3fff] {
            for lo in [0u32, 1, 0x7fff, 0x8000, 0x8001, 0xffff] {
                xs.push(f32::from_bits(sign | (hi << 16) | lo));
            }
        }
        for bits in [0x7f80_0000u32, 0x7f80_0001, 0x7f80_8000, 0x7fc0_0000, 0x7fff_ffff] {
            xs.push(f32::from_bits(sign | bits));
        }
    }
    let ys: Vec<f32> = xs.iter().rev().copied().collect();
    let n = xs.len();
    let src = format!(
        "HloModule t\nENTRY e {{\n  x = f32[{n}] parameter(0)\n  y = f32[{n}] parameter(1)\n  \
         a = bf16[{n}] convert(x)\n  b = bf16[{n}] convert(y)\n  \
         s = bf16[{n}] add(a, b)\n  p = bf16[{n}] multiply(s, a)\n  \
         c = pred[{n}] compare(a, b), direction=LT\n  m = bf16[{n}] select(c, a, b)\n  \
         mx = bf16[{n}] maximum(p, m)\n  \
         ROOT r = (bf16[{n}], bf16[{n}], bf16[{n}], bf16[{n}]) tuple(a, p, m, mx)\n}}\n"
    );
    let (got, want) = run_on(&src, &two_vectors(&xs, &ys));
    let bits = |t: &hlo_ir::Tensor| -> Vec<u16> {
        t.bytes().chunks(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()
    };
    let nan = |b: u16| b & 0x7f80 == 0x7f80 && b & 0x7f != 0;
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        for (i, (a, b)) in bits(g).into_iter().zip(bits(w)).enumerate() {
            assert!(
                a == b || (nan(a) && nan(b)),
                "{} at {i} (x = {:#010x}, y = {:#010x}): {a:#06x}, the interpreter gives {b:#06x}",
                ["convert", "(a + b) * a", "select", "maximum"][k],
                xs[i].to_bits(),
                ys[i].to_bits()
            );
        }
    }
}

/// Column max/min without a NaN anywhere: where `+0` meets `-0` only the results of ±0
/// can be wrong in the `maxps`/`minps` pass, and those blocks are computed again exactly.
#[test]
fn column_max_and_min_without_nans_keep_zero_signs() {
    let (max, min) = (reducer("maximum", "f32"), reducer("minimum", "f32"));
    let (m, n) = (6usize, 37usize);
    // Column j: -0 then +0 (max +0), +0 then -0 (min -0), or negatives (a nonzero max).
    let mut flat = Vec::new();
    for r in 0..m {
        for j in 0..n {
            flat.push(match (j % 3, r % 2) {
                (0, 0) => -0.0f32,
                (0, _) => 0.0,
                (1, 0) => 0.0,
                (1, _) => -0.0,
                _ => -1.0 - (r * j) as f32,
            });
        }
    }
    let src = format!(
        "HloModule t\n{max}\
         {min}\
         ENTRY e {{\n  x = f32[{m},{n}] parameter(0)\n  ninf = f32[] constant(-inf)\n  inf = f32[] constant(inf)\n  \
         cmx = f32[{n}] reduce(x, ninf), dimensions={{0}}, to_apply=max\n  \
         cmn = f32[{n}] reduce(x, inf), dimensions={{0}}, to_apply=min\n  \
         ROOT r = (f32[{n}], f32[{n}]) tuple(cmx, cmn)\n}}\n"
    );
    let module = hlo_driver::parse(&src).unwrap();
    let inputs = vec![hlo_ir::Tensor::from_f32(&[m as u64, n as u64], &flat).unwrap()];
    let want = interp::run(&module, &inputs).unwrap();
    let got = Program::compile(&module, &CompileOptions::default()).unwrap().run(&inputs).unwrap();
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.bytes(), w.bytes(), "{}", ["column max", "column min"][k]);
    }
}

#[test]
fn a_dot_rounds_the_f32_weights_it_absorbs_as_the_convert_would() {
    // `dot(x, convert(w))` with f32 `w` converted to bf16 for that dot only: the dot reads
    // `w` and rounds it itself. Beside a module where the convert is also an output (so it
    // is written and the dot reads the bf16 copy), the dot's bits must agree.
    for (x_t, out_t) in [("bf16", "bf16"), ("bf16", "f32")] {
        let body = |extra: bool| {
            format!(
                "HloModule t\nENTRY e {{\n  x = {x_t}[24,40] parameter(0)\n  w = f32[40,33] parameter(1)\n  \
                 c = bf16[40,33] convert(w)\n  d = {out_t}[24,33] dot(x, c), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n  \
                 ROOT r = {} tuple(d{})\n}}\n",
                if extra {
                    format!("({out_t}[24,33], bf16[40,33])")
                } else {
                    format!("({out_t}[24,33])")
                },
                if extra { ", c" } else { "" }
            )
        };
        let (alone, _) = run_both(&body(false));
        let (with_copy, want) = run_both(&body(true));
        assert_eq!(alone[0].bytes(), with_copy[0].bytes(), "{x_t} x, {out_t} result");
        hlo_io::compare::compare(
            &alone[0],
            &want[0],
            hlo_io::compare::Tolerance { rtol: 2e-2, atol: 1e-2 },
        )
        .unwrap();
    }
}

/// A multi-output loop fusion whose outputs share operands and read one another (an Adam
/// update: the new moments and the weights computed from them, and a bf16 copy) runs as
/// one loop per index range when its outputs have the same dims; its outputs have the
/// interpreter's bits for every tail length.
#[test]
fn a_multi_output_fusion_runs_as_one_loop_with_the_interpreters_bits() {
    for n in [1usize, 3, 4, 7, 8, 13] {
        let a = format!("f32[3,{n}]");
        let src = format!(
            "HloModule t\n\
             adam {{\n  g = {a} parameter(0)\n  m = {a} parameter(1)\n  v = {a} parameter(2)\n  w = {a} parameter(3)\n  \
             c9 = f32[] constant(0.9)\n  c1 = f32[] constant(0.1)\n  c999 = f32[] constant(0.999)\n  c001 = f32[] constant(0.001)\n  \
             lr = f32[] constant(0.01)\n  eps = f32[] constant(1e-8)\n  \
             b9 = {a} broadcast(c9), dimensions={{}}\n  b1 = {a} broadcast(c1), dimensions={{}}\n  \
             b999 = {a} broadcast(c999), dimensions={{}}\n  b001 = {a} broadcast(c001), dimensions={{}}\n  \
             blr = {a} broadcast(lr), dimensions={{}}\n  beps = {a} broadcast(eps), dimensions={{}}\n  \
             m9 = {a} multiply(m, b9)\n  g1 = {a} multiply(g, b1)\n  m2 = {a} add(m9, g1)\n  \
             av = {a} abs(v)\n  v9 = {a} multiply(av, b999)\n  gg = {a} multiply(g, g)\n  gg1 = {a} multiply(gg, b001)\n  v2 = {a} add(v9, gg1)\n  \
             sq = {a} sqrt(v2)\n  den = {a} add(sq, beps)\n  step = {a} multiply(m2, blr)\n  upd = {a} divide(step, den)\n  w2 = {a} subtract(w, upd)\n  \
             h = bf16[3,{n}] convert(w2)\n  \
             ROOT r = ({a}, {a}, {a}, bf16[3,{n}]) tuple(m2, v2, w2, h)\n}}\n\
             ENTRY e {{\n  g = {a} parameter(0)\n  m = {a} parameter(1)\n  v = {a} parameter(2)\n  w = {a} parameter(3)\n  \
             f = ({a}, {a}, {a}, bf16[3,{n}]) fusion(g, m, v, w), kind=kLoop, calls=adam\n  \
             o0 = {a} get-tuple-element(f), index=0\n  o1 = {a} get-tuple-element(f), index=1\n  \
             o2 = {a} get-tuple-element(f), index=2\n  o3 = bf16[3,{n}] get-tuple-element(f), index=3\n  \
             ROOT r = ({a}, {a}, {a}, bf16[3,{n}]) tuple(o0, o1, o2, o3)\n}}\n"
        );
        let m = hlo_driver::parse(&src)
            .unwrap_or_else(|d| panic!("{}", d.render(&src, "t.hlo", false)));
        let inputs = seeded::seeded_inputs(&m.entry_param_shapes(), 5).unwrap();
        let want = interp::run(&m, &inputs).unwrap();
        let program = Program::from_optimized(&m).unwrap();
        let mut stats = hlo_runtime::Stats::default();
        let mut got = Vec::new();
        let opts = hlo_runtime::RunOptions::default().with_stats(&mut stats);
        program.run_with(&inputs, &mut got, opts).unwrap();
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.bytes(), w.bytes(), "n = {n}, output {k}");
        }
        let kernels: Vec<&String> = stats.by_name.keys().collect();
        if n >= 4 {
            assert_eq!(kernels, ["m2+v2+w2+h"], "n = {n}: the four outputs in one kernel");
        } else {
            // A loop per output below four lanes, run as one row chain.
            assert_eq!(kernels.len(), 1, "n = {n}: {kernels:?}");
            assert_eq!(kernels[0].split(" » ").count(), 4, "n = {n}: a loop per output");
        }
    }
}
