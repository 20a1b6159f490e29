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
    let m = hlo_ir::parse_and_verify(src)
        .unwrap_or_else(|d| panic!("{}", d.render(src, "t.hlo", false)));
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
