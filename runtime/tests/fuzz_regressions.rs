//! Regressions found by differential fuzzing of the JIT against the reference interpreter:
//! each module runs on both engines (optimized and not) and must give the interpreter's
//! outputs bit for bit.

use hlo_interp as interp;

use hlo_interp::seeded;
use hlo_ir::Tensor;
use hlo_runtime::{CompileOptions, Program};

/// Runs `src` on the interpreter and on the JIT (with and without the optimizer) on
/// `inputs` (seeded when `None`) and asserts every output is bit-identical; returns the
/// outputs.
fn bit_exact(src: &str, inputs: Option<Vec<Tensor>>) -> Vec<Tensor> {
    let m = hlo_driver::parse(src).unwrap_or_else(|d| panic!("{}", d.render(src, "t.hlo", false)));
    let inputs =
        inputs.unwrap_or_else(|| seeded::seeded_inputs(&m.entry_param_shapes(), 5).unwrap());
    let want = interp::run(&m, &inputs).unwrap();
    for optimize in [true, false] {
        let p = Program::compile(&m, &CompileOptions::optimized(optimize))
            .unwrap_or_else(|e| panic!("optimize={optimize}: {e}"));
        let got = p.run(&inputs).unwrap();
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.shape(), w.shape(), "o{i}, optimize={optimize}");
            assert_eq!(
                g.bytes(),
                w.bytes(),
                "o{i} ({}), optimize={optimize}: JIT {:?}, interpreter {:?}",
                w.shape(),
                g.to_f64_vec(),
                w.to_f64_vec()
            );
        }
    }
    want
}

/// A while body that swaps two state slots through reshapes: the reshapes are views of the
/// state buffers, so writing the state back is a parallel copy with a cycle.
#[test]
fn while_state_swapped_through_reshapes() {
    let src = "HloModule swap

cond {
  p = (s32[], f32[2,3], f32[3,2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[2,3], f32[3,2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  a = f32[2,3] get-tuple-element(p), index=1
  b = f32[3,2] get-tuple-element(p), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ra = f32[3,2] reshape(a)
  rb = f32[2,3] reshape(b)
  ROOT t = (s32[], f32[2,3], f32[3,2]) tuple(i1, rb, ra)
}

ENTRY e {
  x = f32[2,3] parameter(0)
  y = f32[3,2] parameter(1)
  z = s32[] constant(0)
  init = (s32[], f32[2,3], f32[3,2]) tuple(z, x, y)
  ROOT w = (s32[], f32[2,3], f32[3,2]) while(init), condition=cond, body=body
}
";
    let x = Tensor::from_f32(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let y = Tensor::from_f32(&[3, 2], &[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]).unwrap();
    let out = bit_exact(src, Some(vec![x, y]));
    // Three swaps: the slots end swapped.
    assert_eq!(out[1].to_f64_vec().unwrap(), [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]);
    assert_eq!(out[2].to_f64_vec().unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
}

/// Views of every kind in the write-back: a three-slot rotation through a bitcast, a
/// reshape and a plain get-tuple-element (alone, and beside a nested tuple slot swapped
/// with its sibling and a slot kept as it is), and one slot read by two destinations.
#[test]
fn while_state_rotated_through_views_of_every_kind() {
    bit_exact(ROTATE, None);
    bit_exact(ROTATE_BESIDE_A_PAIR, None);

    // One state slot copied into two (one through a reshape) while the other is dropped.
    let src = "HloModule dup

cond {
  p = (s32[], f32[2,2], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[2,2], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  a = f32[2,2] get-tuple-element(p), index=1
  b = f32[4] get-tuple-element(p), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  rb = f32[2,2] reshape(b)
  s = f32[2,2] add(rb, a)
  ROOT t = (s32[], f32[2,2], f32[4]) tuple(i1, rb, b)
}

ENTRY e {
  x = f32[2,2] parameter(0)
  y = f32[4] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[2,2], f32[4]) tuple(zero, x, y)
  ROOT w = (s32[], f32[2,2], f32[4]) while(init), condition=cond, body=body
}
";
    bit_exact(src, None);
}

const ROTATE_BESIDE_A_PAIR: &str = "HloModule rotate_beside_a_pair

cond {
  p = (s32[], f32[6], f32[2,3], f32[3,2], (f32[2], f32[2]), f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[6], f32[2,3], f32[3,2], (f32[2], f32[2]), f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  a = f32[6] get-tuple-element(p), index=1
  b = f32[2,3] get-tuple-element(p), index=2
  c = f32[3,2] get-tuple-element(p), index=3
  pair = (f32[2], f32[2]) get-tuple-element(p), index=4
  u = f32[2] get-tuple-element(pair), index=0
  v = f32[2] get-tuple-element(pair), index=1
  k = f32[4] get-tuple-element(p), index=5
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  a2 = f32[6] bitcast(b)
  b2 = f32[2,3] reshape(c)
  c2 = f32[3,2] reshape(a)
  vu = (f32[2], f32[2]) tuple(v, u)
  ROOT t = (s32[], f32[6], f32[2,3], f32[3,2], (f32[2], f32[2]), f32[4]) tuple(i1, a2, b2, c2, vu, k)
}

ENTRY e {
  x = f32[6] parameter(0)
  y = f32[2,3] parameter(1)
  z = f32[3,2] parameter(2)
  u = f32[2] parameter(3)
  v = f32[2] parameter(4)
  k = f32[4] parameter(5)
  zero = s32[] constant(0)
  uv = (f32[2], f32[2]) tuple(u, v)
  init = (s32[], f32[6], f32[2,3], f32[3,2], (f32[2], f32[2]), f32[4]) tuple(zero, x, y, z, uv, k)
  ROOT w = (s32[], f32[6], f32[2,3], f32[3,2], (f32[2], f32[2]), f32[4]) while(init), condition=cond, body=body
}
";

const ROTATE: &str = "HloModule rotate

cond {
  p = (s32[], f32[6], f32[2,3], f32[3,2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[6], f32[2,3], f32[3,2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  a = f32[6] get-tuple-element(p), index=1
  b = f32[2,3] get-tuple-element(p), index=2
  c = f32[3,2] get-tuple-element(p), index=3
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  a2 = f32[6] bitcast(b)
  b2 = f32[2,3] reshape(c)
  c2 = f32[3,2] reshape(a)
  ROOT t = (s32[], f32[6], f32[2,3], f32[3,2]) tuple(i1, a2, b2, c2)
}

ENTRY e {
  x = f32[6] parameter(0)
  y = f32[2,3] parameter(1)
  z = f32[3,2] parameter(2)
  zero = s32[] constant(0)
  init = (s32[], f32[6], f32[2,3], f32[3,2]) tuple(zero, x, y, z)
  ROOT w = (s32[], f32[6], f32[2,3], f32[3,2]) while(init), condition=cond, body=body
}
";

/// A tensor of integer type `elem` holding `values`, each truncated to the type's width
/// (sub-byte types: one byte, sign- or zero-extended from their width).
fn ints(elem: hlo_ir::ElemType, values: &[i64]) -> Tensor {
    let bits = elem.bits();
    let size = hlo_ir::tensor::elem_size(elem).unwrap();
    let signed = elem.class() == hlo_ir::types::ElemClass::Signed;
    let mut bytes = Vec::new();
    for &v in values {
        let v = if bits < 8 {
            let s = 64 - bits;
            if signed { (v << s) >> s } else { ((v as u64) << s >> s) as i64 }
        } else {
            v
        };
        bytes.extend_from_slice(&v.to_le_bytes()[..size]);
    }
    Tensor::from_bytes(elem, vec![values.len() as u64], bytes).unwrap()
}

/// Integer `power` of every integer width, signed and unsigned: exponentiation by squaring
/// with wrap-around, and the rule for negative exponents (1, ±1 by parity for -1, else 0).
#[test]
fn integer_power_matches_the_interpreter() {
    use hlo_ir::ElemType::*;
    let bases = [0i64, 1, -1, 2, -2, 3, -3, 5, 7, 127, -128, 255, 1 << 20, i64::MIN, i64::MAX];
    let exps = [0i64, 1, 2, 3, 4, 7, 8, 15, 31, 32, 63, 64, 100, -1, -2, -3, i64::MIN, i64::MAX];
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for &x in &bases {
        for &y in &exps {
            xs.push(x);
            ys.push(y);
        }
    }
    let n = xs.len();
    for e in [S8, S16, S32, S64, U8, U16, U32, U64, S4, U4, S2, U2] {
        let t = e.name();
        let src = format!(
            "HloModule ipow\nENTRY e {{\n  x = {t}[{n}] parameter(0)\n  y = {t}[{n}] parameter(1)\n  \
             p = {t}[{n}] power(x, y)\n  q = {t}[{n}] power(y, x)\n  \
             ROOT r = ({t}[{n}], {t}[{n}]) tuple(p, q)\n}}\n"
        );
        let out = bit_exact(&src, Some(vec![ints(e, &xs), ints(e, &ys)]));
        if e == S32 {
            let p = out[0].to_f64_vec().unwrap();
            let at = |x: i64, y: i64| {
                let k = xs.iter().zip(&ys).position(|(&a, &b)| a == x && b == y).unwrap();
                p[k]
            };
            assert_eq!(at(3, 4), 81.0);
            assert_eq!(at(-2, 3), -8.0);
            assert_eq!(at(2, 31), f64::from(i32::MIN)); // wraps
            assert_eq!(at(2, 32), 0.0);
            assert_eq!(at(-1, -3), -1.0);
            assert_eq!(at(-1, -2), 1.0);
            assert_eq!(at(1, -1), 1.0);
            assert_eq!(at(2, -1), 0.0);
            assert_eq!(at(0, 0), 1.0);
        }
    }
}

/// Float → unsigned `convert` saturates at the type's maximum for +inf and values of 2^63
/// and more (they were clamped to 0: the 64-bit saturated value is negative as a signed
/// number); NaN gives 0.
#[test]
fn float_to_unsigned_convert_saturates_above_2_pow_63() {
    let src = "HloModule sat
ENTRY e {
  x = f32[9] parameter(0)
  d = f64[9] parameter(1)
  a = u8[9] convert(x)
  b = u16[9] convert(x)
  c = u32[9] convert(x)
  l = u64[9] convert(x)
  s = s8[9] convert(x)
  i = s32[9] convert(x)
  da = u8[9] convert(d)
  dc = u32[9] convert(d)
  ROOT r = (u8[9], u16[9], u32[9], u64[9], s8[9], s32[9], u8[9], u32[9]) tuple(a, b, c, l, s, i, da, dc)
}
";
    let v = [f32::INFINITY, f32::NEG_INFINITY, 1e20, 9.3e18, 3e9, 300.0, -5.0, f32::NAN, 255.9];
    let d: Vec<f64> = v.iter().map(|&x| x as f64).collect();
    let out = bit_exact(
        src,
        Some(vec![Tensor::from_f32(&[9], &v).unwrap(), Tensor::from_slice(&[9], &d).unwrap()]),
    );
    assert_eq!(out[0].bytes(), [255, 0, 255, 255, 255, 255, 0, 0, 255]);
}

/// f16 values that exercise rounding: ties, subnormals, the largest finite value, overflow
/// on arithmetic, infinities and NaN.
fn f16_edges() -> Vec<half::f16> {
    [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        0.5,
        1.5,
        2.5,
        65504.0,
        -65504.0,
        6.1035156e-5,
        5.9604645e-8,
        -1.0e-5,
        0.33325195,
        1000.0,
        -3.75,
        0.099975586,
        7.0,
        2.0,
        300.0,
        -0.1,
    ]
    .iter()
    .map(|&x| half::f16::from_f32(x))
    .chain([
        half::f16::INFINITY,
        half::f16::NEG_INFINITY,
        half::f16::NAN,
        half::f16::from_bits(0x7c01),
    ])
    .collect()
}

/// f16 on the JIT: arithmetic, comparisons (float and total order), select, constants and
/// bitcast-converts to and from s16/u16, every result rounded to nearest even as the
/// interpreter rounds it.
#[test]
fn f16_elementwise_is_bit_exact() {
    let x = f16_edges();
    let n = x.len();
    let mut y = x.clone();
    y.rotate_left(7);
    let src = format!(
        "HloModule f16_elementwise
ENTRY e {{
  x = f16[{n}] parameter(0)
  y = f16[{n}] parameter(1)
  xq = f16[{n}] parameter(2)
  yq = f16[{n}] parameter(3)
  a = f16[{n}] add(x, y)
  s = f16[{n}] subtract(x, y)
  m = f16[{n}] multiply(x, y)
  d = f16[{n}] divide(x, y)
  mx = f16[{n}] maximum(xq, yq)
  mn = f16[{n}] minimum(xq, yq)
  ng = f16[{n}] negate(x)
  ab = f16[{n}] abs(y)
  sq = f16[{n}] sqrt(ab)
  fl = f16[{n}] floor(d)
  c = pred[{n}] compare(x, y), direction=LT
  ct = pred[{n}] compare(x, y), direction=LT, type=TOTALORDER
  sel = f16[{n}] select(c, m, d)
  bs = s16[{n}] bitcast-convert(sel)
  bu = u16[{n}] bitcast-convert(a)
  k = f16[] constant(0.1)
  kb = f16[{n}] broadcast(k), dimensions={{}}
  am = f16[{n}] multiply(kb, x)
  tiny = f16[] constant(6e-08)
  tb = f16[{n}] broadcast(tiny), dimensions={{}}
  ts = f16[{n}] multiply(tb, y)
  back = f16[{n}] bitcast-convert(bs)
  ROOT r = (f16[{n}], f16[{n}], f16[{n}], f16[{n}], f16[{n}], f16[{n}], f16[{n}], f16[{n}], f16[{n}], pred[{n}], pred[{n}], s16[{n}], u16[{n}], f16[{n}], f16[{n}], f16[{n}]) tuple(a, s, m, d, mx, mn, ng, sq, fl, c, ct, bs, bu, am, ts, back)
}}
"
    );
    let t = |v: &[half::f16]| Tensor::from_f16(&[v.len() as u64], v).unwrap();
    // maximum/minimum of a NaN: the interpreter gives the canonical NaN, the JIT one of the
    // operands (a NaN payload difference of every float type): compared on quiet NaNs.
    let quiet = |v: &[half::f16]| -> Vec<half::f16> {
        v.iter().map(|&h| if h.is_nan() { half::f16::NAN } else { h }).collect()
    };
    bit_exact(&src, Some(vec![t(&x), t(&y), t(&quiet(&x)), t(&quiet(&y))]));
    // Seeded inputs, through fusions of f16 with f32 and bf16.
    let src = "HloModule f16_mixed
ENTRY e {
  x = f16[5,7] parameter(0)
  y = f16[5,7] parameter(1)
  z = f32[5,7] parameter(2)
  m = f16[5,7] multiply(x, y)
  e = f16[5,7] add(m, x)
  w = f32[5,7] convert(e)
  s = f32[5,7] multiply(w, z)
  h = f16[5,7] convert(s)
  b = bf16[5,7] convert(h)
  hb = f16[5,7] convert(b)
  ROOT r = (f16[5,7], f32[5,7], bf16[5,7], f16[5,7]) tuple(h, s, b, hb)
}
";
    bit_exact(src, None);
}

/// `convert` between f16 and every other kind of type (f32/f64 with ties and values out of
/// f16's range, bf16, fp8, signed and unsigned integers, pred), one rounding each as the
/// interpreter converts.
#[test]
fn f16_converts_are_bit_exact() {
    let x = f16_edges();
    let n = x.len();
    let w: Vec<f32> = [
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        1.0 + 2f32.powi(-11) + 2f32.powi(-20),
        65519.0,
        65520.0,
        1e6,
        2f32.powi(-25),
        2f32.powi(-25) + 2f32.powi(-40),
        3.0 * 2f32.powi(-26),
        2f32.powi(-14) - 2f32.powi(-26),
        -1e-30,
        f32::NAN,
        f32::from_bits(0x7f80_0001),
        f32::NEG_INFINITY,
        0.1,
        -123.456,
        1e-7,
        -0.0,
        1.9999,
        4097.0,
        2049.0,
        2051.0,
        -65536.0,
        5e-8,
    ]
    .to_vec();
    assert_eq!(w.len(), n);
    let v: Vec<f64> = w
        .iter()
        .enumerate()
        .map(|(i, &x)| x as f64 + if i % 3 == 0 { 2f64.powi(-40) } else { 0.0 })
        .collect();
    let ints: Vec<i32> = (0..n as i32).map(|i| (i - 12) * 2731 + i * i * i * 37).collect();
    let bits: Vec<u16> = (0..n as u16)
        .map(|i| {
            [0x0001, 0x03ff, 0x0400, 0x7bff, 0x7c00, 0xfc00, 0x7c01, 0xfe00][i as usize % 8]
                ^ (i << 10 & 0x3c00)
        })
        .collect();
    let src = format!(
        "HloModule f16_converts
ENTRY e {{
  x = f16[{n}] parameter(0)
  w = f32[{n}] parameter(1)
  v = f64[{n}] parameter(2)
  i = s32[{n}] parameter(3)
  u = u16[{n}] parameter(4)
  x2f = f32[{n}] convert(x)
  x2d = f64[{n}] convert(x)
  x2b = bf16[{n}] convert(x)
  x2i = s32[{n}] convert(x)
  x2u8 = u8[{n}] convert(x)
  x2s8 = s8[{n}] convert(x)
  x2l = s64[{n}] convert(x)
  x2p = pred[{n}] convert(x)
  x2e = f8e4m3fn[{n}] convert(x)
  x2e5 = f8e5m2[{n}] convert(x)
  w2h = f16[{n}] convert(w)
  v2h = f16[{n}] convert(v)
  i2h = f16[{n}] convert(i)
  u2h = f16[{n}] convert(u)
  b2h = f16[{n}] convert(x2b)
  e2h = f16[{n}] convert(x2e)
  p2h = f16[{n}] convert(x2p)
  hb = f16[{n}] bitcast-convert(u)
  hb2 = f16[{n}] add(hb, x)
  ROOT r = (f32[{n}], f64[{n}], bf16[{n}], s32[{n}], u8[{n}], s8[{n}], s64[{n}], pred[{n}], f8e4m3fn[{n}], f8e5m2[{n}], f16[{n}], f16[{n}], f16[{n}], f16[{n}], f16[{n}], f16[{n}], f16[{n}], f16[{n}], f16[{n}]) tuple(x2f, x2d, x2b, x2i, x2u8, x2s8, x2l, x2p, x2e, x2e5, w2h, v2h, i2h, u2h, b2h, e2h, p2h, hb, hb2)
}}
"
    );
    let d = [n as u64];
    let inputs = vec![
        Tensor::from_f16(&d, &x).unwrap(),
        Tensor::from_f32(&d, &w).unwrap(),
        Tensor::from_slice(&d, &v).unwrap(),
        Tensor::from_i32(&d, &ints).unwrap(),
        Tensor::from_u16(&d, &bits).unwrap(),
    ];
    bit_exact(&src, Some(inputs));
}

/// f16 reductions (an f16 accumulator, rounded at every step, in the interpreter's order),
/// dot and convolution through the f32 library kernels (on values whose products and sums
/// are exact in f32, so the order of accumulation does not matter), data movement, sort
/// and topk.
#[test]
fn f16_reduce_dot_convolution_and_data_movement_are_bit_exact() {
    let src = "HloModule f16_reduce
add {
  a = f16[] parameter(0)
  b = f16[] parameter(1)
  ROOT s = f16[] add(a, b)
}
max {
  a = f16[] parameter(0)
  b = f16[] parameter(1)
  ROOT s = f16[] maximum(a, b)
}
ENTRY e {
  x = f16[6,37] parameter(0)
  z = f16[] constant(0)
  ninf = f16[] constant(-inf)
  rows = f16[6] reduce(x, z), dimensions={1}, to_apply=add
  cols = f16[37] reduce(x, z), dimensions={0}, to_apply=add
  all = f16[] reduce(x, z), dimensions={0,1}, to_apply=add
  mx = f16[6] reduce(x, ninf), dimensions={1}, to_apply=max
  win = f16[6,18] reduce-window(x, z), window={size=1x3 stride=1x2}, to_apply=add
  ROOT r = (f16[6], f16[37], f16[], f16[6], f16[6,18]) tuple(rows, cols, all, mx, win)
}
";
    bit_exact(src, None);

    let src = "HloModule f16_dot
ENTRY e {
  a = f16[4,8] parameter(0)
  b = f16[8,3] parameter(1)
  k = f16[2,3,6,6] parameter(2)
  f = f16[4,3,3,3] parameter(3)
  d = f16[4,3] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  c = f16[2,4,4,4] convolution(k, f), window={size=3x3}, dim_labels=bf01_oi01->bf01
  ROOT r = (f16[4,3], f16[2,4,4,4]) tuple(d, c)
}
";
    let vals = |n: usize, seed: usize| -> Vec<half::f16> {
        (0..n).map(|i| half::f16::from_f32(((i * 7 + seed) % 9) as f32 * 0.5 - 2.0)).collect()
    };
    let t = |dims: &[u64], seed: usize| {
        let n = dims.iter().product::<u64>() as usize;
        Tensor::from_f16(dims, &vals(n, seed)).unwrap()
    };
    let inputs = vec![t(&[4, 8], 1), t(&[8, 3], 2), t(&[2, 3, 6, 6], 3), t(&[4, 3, 3, 3], 4)];
    let out = bit_exact(src, Some(inputs));
    assert!(out[0].to_f64_vec().unwrap().iter().any(|&v| v != 0.0));

    // Data movement, sort and topk on f16 values.
    let src = "HloModule f16_moves
lt {
  a = f16[] parameter(0)
  b = f16[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT, type=TOTALORDER
}
ENTRY e {
  x = f16[3,9] parameter(0)
  s = f16[3,9] sort(x), dimensions={1}, to_apply=lt
  t = (f16[3,4], s32[3,4]) topk(x), k=4, largest=true
  tv = f16[3,4] get-tuple-element(t), index=0
  z = f16[] constant(-1.5)
  p = f16[5,12] pad(x, z), padding=1_1x2_1
  tr = f16[9,3] transpose(x), dimensions={1,0}
  rv = f16[3,9] reverse(x), dimensions={1}
  cc = f16[6,9] concatenate(x, rv), dimensions={0}
  io = f16[3,9] iota(), iota_dimension=1
  m = f16[3,9] multiply(io, x)
  ROOT r = (f16[3,9], f16[3,4], f16[5,12], f16[9,3], f16[6,9], f16[3,9]) tuple(s, tv, p, tr, cc, m)
}
";
    bit_exact(src, None);
}

/// A one-dimensional `b0f_0io->b0f` convolution of `x` (`[1, n, 1]`) with `k` (`[taps, 1,
/// 1]`) of element type `t` and window `window`, the result `[1, out, 1]`.
fn conv_1d(t: &str, n: usize, taps: usize, out: usize, window: &str) -> String {
    format!(
        "HloModule c1\nENTRY main {{\n  x = {t}[1,{n},1] parameter(0)\n  k = {t}[{taps},1,1] parameter(1)\n  \
         ROOT c = {t}[1,{out},1] convolution(x, k), window={{{window}}}, dim_labels=b0f_0io->b0f\n}}\n"
    )
}

/// `values` as a tensor of float type `t` (f32, bf16, f16 or f64) with dims `dims`.
fn floats(t: &str, dims: &[u64], values: &[f64]) -> Tensor {
    match t {
        "f32" => {
            Tensor::from_f32(dims, &values.iter().map(|&v| v as f32).collect::<Vec<_>>()).unwrap()
        }
        "bf16" => Tensor::from_bf16(
            dims,
            &values.iter().map(|&v| half::bf16::from_f64(v)).collect::<Vec<_>>(),
        )
        .unwrap(),
        "f16" => Tensor::from_f16(
            dims,
            &values.iter().map(|&v| half::f16::from_f64(v)).collect::<Vec<_>>(),
        )
        .unwrap(),
        "f64" => Tensor::from_f64(dims, values).unwrap(),
        _ => unreachable!("{t}"),
    }
}

/// Window positions in padding are skipped, as XLA skips them: an infinite kernel value
/// there contributes nothing (the JIT's im2col multiplied the zeros it materialized there,
/// and `0 * inf` made a NaN). XLA CPU gives [0, inf, inf, inf].
#[test]
fn convolution_skips_padding_under_an_infinite_kernel() {
    let inf = f64::INFINITY;
    for t in ["f32", "bf16", "f16", "f64"] {
        let src = conv_1d(t, 3, 1, 4, "size=1 pad=1_0");
        let out = bit_exact(
            &src,
            Some(vec![floats(t, &[1, 3, 1], &[1.0, 2.0, 3.0]), floats(t, &[1, 1, 1], &[inf])]),
        );
        assert_eq!(out[0].to_f64_vec().unwrap(), [0.0, inf, inf, inf], "{t}");
    }
}

/// lhs-dilation holes are skipped like padding: `[1, _, 2, _, 3]` with window `[inf, 1]`;
/// and holes, padding and strides together under a negative infinity.
#[test]
fn convolution_skips_lhs_dilation_holes_under_an_infinite_kernel() {
    let inf = f64::INFINITY;
    for t in ["f32", "bf16", "f16", "f64"] {
        let src = conv_1d(t, 3, 2, 4, "size=2 lhs_dilate=2");
        let out = bit_exact(
            &src,
            Some(vec![floats(t, &[1, 3, 1], &[1.0, 2.0, 3.0]), floats(t, &[2, 1, 1], &[inf, 1.0])]),
        );
        assert_eq!(out[0].to_f64_vec().unwrap(), [inf, 2.0, inf, 3.0], "{t}");

        let src = conv_1d(t, 4, 3, 4, "size=3 stride=2 pad=2_1 lhs_dilate=2");
        bit_exact(
            &src,
            Some(vec![
                floats(t, &[1, 4, 1], &[1.0, -2.0, 3.0, 4.0]),
                floats(t, &[3, 1, 1], &[-inf, 2.0, 1.0]),
            ]),
        );
    }
}

/// A NaN kernel value over padding contributes no NaN: the first output is finite.
#[test]
fn convolution_skips_padding_under_a_nan_kernel() {
    for t in ["f32", "bf16", "f16", "f64"] {
        let src = conv_1d(t, 3, 3, 3, "size=3 pad=1_1");
        let out = bit_exact(
            &src,
            Some(vec![
                floats(t, &[1, 3, 1], &[1.0, 2.0, 3.0]),
                floats(t, &[3, 1, 1], &[f64::NAN, 1.0, 2.0]),
            ]),
        );
        let got = out[0].to_f64_vec().unwrap();
        assert_eq!(got[0], 5.0, "{t}");
        assert!(got[1].is_nan() && got[2].is_nan(), "{t}: {got:?}");
    }
}

/// A grouped convolution (two feature groups) with padding and infinite kernel values:
/// each group skips its own padding.
#[test]
fn grouped_convolution_skips_padding_under_an_infinite_kernel() {
    let inf = f64::INFINITY;
    for t in ["f32", "bf16", "f64"] {
        let src = format!(
            "HloModule g\nENTRY main {{\n  x = {t}[1,4,2] parameter(0)\n  k = {t}[3,1,4] parameter(1)\n  \
             ROOT c = {t}[1,4,4] convolution(x, k), window={{size=3 pad=1_1}}, \
             dim_labels=b0f_0io->b0f, feature_group_count=2\n}}\n"
        );
        let x: Vec<f64> = (0..8).map(|i| (i % 5) as f64 - 1.0).collect();
        let mut k: Vec<f64> = (0..12).map(|i| (i % 3) as f64 - 1.0).collect();
        k[1] = inf; // tap 0, output feature 1 (group 0)
        k[2 * 4 + 2] = -inf; // tap 2, output feature 2 (group 1)
        let out = bit_exact(&src, Some(vec![floats(t, &[1, 4, 2], &x), floats(t, &[3, 1, 4], &k)]));
        let got = out[0].to_f64_vec().unwrap();
        // Output position 0, feature 1: tap 0 falls in the padding, so no inf and no NaN.
        assert!(got[1].is_finite(), "{t}: {got:?}");
        // The last position, feature 2: tap 2 falls in the padding.
        assert!(got[3 * 4 + 2].is_finite(), "{t}: {got:?}");
    }
}

/// Window (rhs) dilation holes are never read: an infinite input value under a hole
/// contributes nothing, with and without padding. (The JIT never materialized these holes:
/// only the f64 rounds failed, refused.)
#[test]
fn convolution_rhs_dilation_holes_skip_an_infinite_input() {
    let inf = f64::INFINITY;
    for t in ["f32", "bf16", "f64"] {
        let x = floats(t, &[1, 5, 1], &[1.0, inf, 2.0, inf, 3.0]);
        let k = floats(t, &[2, 1, 1], &[1.0, 2.0]);
        let src = conv_1d(t, 5, 2, 3, "size=2 rhs_dilate=2");
        let out = bit_exact(&src, Some(vec![x.clone(), k.clone()]));
        assert_eq!(out[0].to_f64_vec().unwrap(), [5.0, inf, 8.0], "{t}");
        let src = conv_1d(t, 5, 2, 5, "size=2 pad=1_1 rhs_dilate=2");
        let out = bit_exact(&src, Some(vec![x, k]));
        assert_eq!(out[0].to_f64_vec().unwrap(), [inf, 5.0, inf, 8.0, inf], "{t}");
    }
}

/// Integer-valued `n` values of a tensor of float type `t` (sums exact in any order).
fn int_valued(t: &str, dims: &[u64], seed: usize) -> Tensor {
    let n = dims.iter().product::<u64>() as usize;
    let v: Vec<f64> = (0..n).map(|i| ((i * 7 + seed) % 11) as f64 - 5.0).collect();
    floats(t, dims, &v)
}

/// f64 convolutions on the JIT (they were refused): padding, strides, lhs and rhs
/// dilation, window reversal, feature and batch groups, several dim_labels; integer-valued
/// data, so the result is exact whatever the order of accumulation.
#[test]
fn f64_convolution_matches_the_interpreter() {
    let cases: [(&str, &[u64], &[u64]); 4] = [
        (
            "c = f64[2,3,11,6] convolution(x, k), window={size=3x2 stride=2x1 pad=1_2x0_1 \
             lhs_dilate=1x2 rhs_dilate=2x1}, dim_labels=b01f_01io->b01f, feature_group_count=2",
            &[2, 7, 6, 4],
            &[3, 2, 2, 6],
        ),
        (
            "c = f64[2,5,4] convolution(x, k), window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f, \
             batch_group_count=2",
            &[4, 5, 3],
            &[3, 3, 4],
        ),
        (
            "c = f64[2,4,6,5] convolution(x, k), window={size=3x3 pad=1_1x0_0 rhs_reversal=1x0}, \
             dim_labels=bf01_oi01->bf01",
            &[2, 3, 6, 7],
            &[4, 3, 3, 3],
        ),
        (
            "c = f64[40,37,8] convolution(x, k), window={size=5 stride=1 pad=2_2}, \
             dim_labels=b0f_0io->b0f",
            &[40, 37, 16],
            &[5, 16, 8],
        ),
    ];
    for (conv, xd, kd) in cases {
        let dims = |d: &[u64]| d.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",");
        let src = format!(
            "HloModule f64conv\nENTRY main {{\n  x = f64[{}] parameter(0)\n  k = f64[{}] parameter(1)\n  \
             ROOT {conv}\n}}\n",
            dims(xd),
            dims(kd)
        );
        let out = bit_exact(&src, Some(vec![int_valued("f64", xd, 1), int_valued("f64", kd, 4)]));
        assert!(out[0].to_f64_vec().unwrap().iter().any(|&v| v != 0.0), "{conv}");

        // Seeded (non-integer) data: within f64 rounding of the interpreter, which
        // accumulates in another order.
        let m = hlo_driver::parse(&src).unwrap();
        let inputs = seeded::seeded_inputs(&m.entry_param_shapes(), 3).unwrap();
        let want = interp::run(&m, &inputs).unwrap()[0].to_f64_vec().unwrap();
        let p = Program::compile(&m, &CompileOptions::optimized(true)).unwrap();
        let got = p.run(&inputs).unwrap()[0].to_f64_vec().unwrap();
        let scale = want.iter().fold(1f64, |a, &w| a.max(w.abs()));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-13 * scale, "{conv}: [{i}] JIT {g}, interpreter {w}");
        }
    }
}

/// `n` pseudo-random bytes (full-range integers, so products and sums wrap).
fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect()
}

/// A tensor of integer or pred type `t` with dims `dims`: full-range random values (pred
/// 0 or 1).
fn random_ints(t: &str, dims: &[u64], seed: u64) -> Tensor {
    let e = hlo_ir::ElemType::from_name(t).unwrap();
    let n = dims.iter().product::<u64>() as usize;
    let mut b = random_bytes(n * e.bits().div_ceil(8) as usize, seed);
    if e == hlo_ir::ElemType::Pred {
        b.iter_mut().for_each(|x| *x &= 1);
    }
    Tensor::from_bytes(e, dims.to_vec(), b).unwrap()
}

/// Integer convolutions (the JIT refused them): every integer type, wrapping as the
/// interpreter's sums do, over padding, strides, lhs and rhs dilation, window reversal,
/// feature and batch groups and several dim_labels; mixed operand types and pred.
#[test]
fn integer_convolution_matches_the_interpreter() {
    let cases: [(&str, &[u64], &[u64]); 6] = [
        (
            "c = T[1,5,2] convolution(x, k), window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f",
            &[1, 5, 2],
            &[3, 2, 2],
        ),
        (
            "c = T[2,3,11,6] convolution(x, k), window={size=3x2 stride=2x1 pad=1_2x0_1 \
             lhs_dilate=1x2 rhs_dilate=2x1}, dim_labels=b01f_01io->b01f, feature_group_count=2",
            &[2, 7, 6, 4],
            &[3, 2, 2, 6],
        ),
        (
            "c = T[2,5,4] convolution(x, k), window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f, \
             batch_group_count=2",
            &[4, 5, 3],
            &[3, 3, 4],
        ),
        (
            "c = T[2,4,6,5] convolution(x, k), window={size=3x3 pad=1_1x0_0 rhs_reversal=1x0}, \
             dim_labels=bf01_oi01->bf01",
            &[2, 3, 6, 7],
            &[4, 3, 3, 3],
        ),
        (
            "c = T[5,2,2,2] convolution(x, k), window={size=2x3 stride=1x2 pad=0_1x2_-1 \
             lhs_dilate=2x1}, dim_labels=f01b_i01o->01fb",
            &[6, 3, 4, 2],
            &[6, 2, 3, 2],
        ),
        (
            "c = T[40,37,8] convolution(x, k), window={size=5 stride=1 pad=2_2}, \
             dim_labels=b0f_0io->b0f",
            &[40, 37, 16],
            &[5, 16, 8],
        ),
    ];
    let dims = |d: &[u64]| d.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",");
    // (lhs, rhs, result) types.
    let types = [
        ("s8", "s8", "s8"),
        ("s16", "s16", "s16"),
        ("s32", "s32", "s32"),
        ("s64", "s64", "s64"),
        ("u8", "u8", "u8"),
        ("u16", "u16", "u16"),
        ("u32", "u32", "u32"),
        ("u64", "u64", "u64"),
        ("s8", "s8", "s32"),
        ("u8", "s8", "s16"),
        ("s32", "u16", "u64"),
        ("u32", "s64", "s8"),
        ("pred", "pred", "pred"),
        ("pred", "pred", "s32"),
        ("s8", "pred", "u16"),
    ];
    for (i, (conv, xd, kd)) in cases.iter().enumerate() {
        for (j, &(lt, rt, ot)) in types.iter().enumerate() {
            let src = format!(
                "HloModule intconv\nENTRY main {{\n  x = {lt}[{}] parameter(0)\n  k = {rt}[{}] parameter(1)\n  \
                 ROOT {}\n}}\n",
                dims(xd),
                dims(kd),
                conv.replace("T[", &format!("{ot}[")),
            );
            let seed = (i * 100 + j) as u64;
            bit_exact(&src, Some(vec![random_ints(lt, xd, seed), random_ints(rt, kd, seed + 7)]));
            bit_exact(&src, None);
        }
    }
    // Sub-byte integers, on seeded (canonical) values.
    for t in ["s4", "u4", "s2", "u2"] {
        let (conv, xd, kd) = cases[1];
        let src = format!(
            "HloModule intconv\nENTRY main {{\n  x = {t}[{}] parameter(0)\n  k = {t}[{}] parameter(1)\n  \
             ROOT {}\n}}\n",
            dims(xd),
            dims(kd),
            conv.replace("T[", &format!("{t}[")),
        );
        bit_exact(&src, None);
    }
}

/// `real` and `imag` of real floats (the JIT refused them): `real(x) = x` and
/// `imag(x) = +0`, NaN, infinities and `-0` included, standalone and fused, scalar and
/// vector loops.
#[test]
fn real_and_imag_of_real_floats() {
    let special = [f64::NAN, -f64::NAN, f64::INFINITY, -f64::INFINITY, -0.0, 0.0, 1.5, -2.25];
    for t in ["f32", "bf16", "f16", "f64"] {
        for n in [8usize, 37] {
            let src = format!(
                "HloModule ri\nENTRY main {{\n  x = {t}[{n}] parameter(0)\n  r = {t}[{n}] real(x)\n  \
                 i = {t}[{n}] imag(x)\n  s = {t}[{n}] add(r, i)\n  ri = {t}[{n}] real(i)\n  \
                 ROOT o = ({t}[{n}], {t}[{n}], {t}[{n}], {t}[{n}]) tuple(r, i, s, ri)\n}}\n"
            );
            let v: Vec<f64> =
                (0..n).map(|i| special[i % special.len()] * (1 + i / 8) as f64).collect();
            let out = bit_exact(&src, Some(vec![floats(t, &[n as u64], &v)]));
            assert!(
                out[1].to_f64_vec().unwrap().iter().all(|&x| x == 0.0 && x.is_sign_positive()),
                "{t}"
            );
            bit_exact(&src, None);
        }
    }
}
