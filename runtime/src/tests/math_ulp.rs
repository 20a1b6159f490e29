//! Accuracy and special values of the `codegen::math` emitters, run as JIT kernels (an
//! f32x4 loop plus scalar tail, and a scalar-only loop; both must agree bit for bit).
//!
//! Errors are measured in ulps of the correctly rounded result against an f64 reference.
//! The default tests sweep every 1021st bit pattern, dense samples of each function's
//! interesting range and the special values; `exhaustive_ulp` (ignored) covers all 2^32
//! inputs: `cargo test --release -p hlo-runtime --test math_ulp -- --ignored --nocapture`.

use super::common::{Kernels, Op, Unary, compile};
use crate::codegen::math;
use hlo_vmath as vmath;
use rayon::prelude::*;

/// Error of `got` against the exact `want`, in ulps of `want` rounded to f32 (infinities
/// count as 2^128 so that an overflow next to f32::MAX measures as a finite error).
fn ulp_err(got: f32, want: f64) -> f64 {
    if want.is_nan() || got.is_nan() {
        return if want.is_nan() && got.is_nan() { 0.0 } else { f64::INFINITY };
    }
    if got as f64 == want {
        return 0.0;
    }
    let big = 2f64.powi(128);
    let w = want.clamp(-big, big);
    let g = if got.is_infinite() { got.signum() as f64 * big } else { got as f64 };
    let w32 = (want as f32).abs();
    let exp = if w32.is_infinite() {
        127
    } else if w32 < f32::MIN_POSITIVE {
        -126
    } else {
        ((w32.to_bits() >> 23) as i32) - 127
    };
    (g - w).abs() / 2f64.powi(exp - 23)
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

struct UnaryCase {
    name: &'static str,
    emit: Unary,
    /// The f64 reference.
    reference: fn(f64) -> f64,
    /// What the interpreter computes (special values must match it exactly).
    interp: fn(f32) -> f32,
    /// Max error allowed, in ulps.
    bound: f64,
    /// Ranges sampled densely (2^20 values each, evenly over the bit patterns).
    dense: &'static [(f32, f32)],
    /// Inputs whose result must equal `interp`'s bit for bit (besides ±0, ±inf, NaN).
    exact: &'static [f32],
}

fn logistic64(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

const TINY: f32 = 1e-30;
const SUB: [f32; 4] = [1e-40, -1e-40, 1.4e-45, -1.1754942e-38];

fn unary_cases() -> Vec<UnaryCase> {
    vec![
        UnaryCase {
            name: "exp",
            emit: math::exp,
            reference: f64::exp,
            interp: f32::exp,
            bound: 1.05,
            dense: &[(-104.0, 89.0), (-1.0, 1.0)],
            exact: &[
                88.73,
                100.0,
                -104.0,
                -110.0,
                1e-10,
                -1e-10,
                1e-40,
                -1e-40,
                f32::MAX,
                f32::MIN,
            ],
        },
        UnaryCase {
            name: "expm1",
            emit: math::expm1,
            reference: f64::exp_m1,
            interp: f32::exp_m1,
            bound: 1.2,
            dense: &[(-18.0, 89.0), (-0.5, 0.5)],
            exact: &[89.0, -20.0, -1e30, TINY, -TINY, SUB[0], SUB[1], SUB[2], SUB[3], f32::MAX],
        },
        UnaryCase {
            name: "log",
            emit: math::log,
            reference: f64::ln,
            interp: f32::ln,
            bound: 0.9,
            dense: &[(0.5, 2.0), (0.0, f32::MAX)],
            exact: &[1.0, -1.0, -TINY, -1e-40, f32::MIN],
        },
        UnaryCase {
            name: "log1p",
            emit: math::log1p,
            reference: f64::ln_1p,
            interp: f32::ln_1p,
            bound: 0.9,
            dense: &[(-1.0, 1.0), (-1.0, f32::MAX)],
            exact: &[-1.0, -1.5, -2.0, f32::MIN, TINY, -TINY, SUB[0], SUB[1], SUB[2], SUB[3]],
        },
        UnaryCase {
            name: "tanh",
            emit: math::tanh,
            reference: f64::tanh,
            interp: f32::tanh,
            bound: 1.5,
            dense: &[(-10.0, 10.0), (-1.0, 1.0)],
            exact: &[
                9.1,
                -9.1,
                10.0,
                -10.0,
                50.0,
                -50.0,
                f32::MAX,
                f32::MIN,
                TINY,
                -TINY,
                SUB[0],
                SUB[1],
                SUB[2],
                SUB[3],
            ],
        },
        UnaryCase {
            name: "logistic",
            emit: math::logistic,
            reference: logistic64,
            interp: |x| 1.0 / (1.0 + (-x).exp()),
            bound: 2.5,
            dense: &[(-105.0, 20.0), (-2.0, 2.0)],
            exact: &[17.0, 100.0, f32::MAX, -88.0, -80.0, f32::MIN, TINY, SUB[0], SUB[1]],
        },
        UnaryCase {
            name: "erf",
            emit: math::erf,
            reference: libm::erf,
            interp: libm::erff,
            bound: 0.9,
            dense: &[(-4.0, 4.0), (-1.0, 1.0)],
            exact: &[3.9375, 4.0, -4.0, 10.0, -10.0, f32::MAX, f32::MIN],
        },
        UnaryCase {
            name: "sin",
            emit: math::sin,
            reference: f64::sin,
            interp: f32::sin,
            bound: 1.6,
            dense: &[(-10.0, 10.0), (-10000.0, 10000.0), (-1e6, 1e6)],
            exact: &[TINY, -TINY, SUB[0], SUB[1], SUB[2], SUB[3]],
        },
        UnaryCase {
            name: "cos",
            emit: math::cos,
            reference: f64::cos,
            interp: f32::cos,
            bound: 1.6,
            dense: &[(-10.0, 10.0), (-10000.0, 10000.0), (-1e6, 1e6)],
            exact: &[TINY, -TINY, SUB[0], SUB[1], SUB[2], SUB[3]],
        },
        UnaryCase {
            name: "cbrt",
            emit: math::cbrt,
            reference: f64::cbrt,
            interp: f32::cbrt,
            bound: 0.55,
            dense: &[(-8.0, 8.0), (0.0, 1e-30)],
            exact: &[1.0, -1.0, 8.0, -27.0, 0.125, 64.0],
        },
        UnaryCase {
            name: "rsqrt",
            emit: math::rsqrt,
            reference: |x| 1.0 / x.sqrt(),
            interp: |x| 1.0 / x.sqrt(),
            bound: 1.5,
            dense: &[(0.0, 4.0)],
            exact: &[1.0, 4.0, 0.25, -1.0, f32::MIN, SUB[0], SUB[1]],
        },
    ]
}

/// Every common special value.
fn specials() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001), // signaling
        f32::from_bits(0xffbf_ffff),
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        -2.0,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x8000_0001),
        f32::from_bits(0x007f_ffff),
        f32::from_bits(0x807f_ffff),
        f32::MAX,
        f32::MIN,
        f32::EPSILON,
        std::f32::consts::PI,
        std::f32::consts::FRAC_PI_2,
        -std::f32::consts::FRAC_PI_2,
        1e4,
        131071.99,
        131072.0,
        -131072.0,
        16777216.0,
        1e30,
    ];
    v.extend_from_slice(&SUB);
    v
}

/// Order-preserving integer key of a float, and back.
fn key(x: f32) -> i64 {
    let b = x.to_bits();
    if b >> 31 == 1 { -((b & 0x7fff_ffff) as i64) } else { b as i64 }
}
fn unkey(k: i64) -> f32 {
    if k < 0 { f32::from_bits((-k) as u32 | 0x8000_0000) } else { f32::from_bits(k as u32) }
}

fn sweep_inputs(dense: &[(f32, f32)]) -> Vec<f32> {
    let mut xs: Vec<f32> = (0..=u32::MAX).step_by(1021).map(f32::from_bits).collect();
    for &(lo, hi) in dense {
        let (a, b) = (key(lo), key(hi));
        let n = 1i64 << 20;
        xs.extend((0..=n).map(|i| unkey(a + (b - a) * i / n)));
    }
    xs.extend(specials());
    // Odd length, so the scalar tail of the vector kernel runs too.
    if xs.len().is_multiple_of(4) {
        xs.push(0.75);
    }
    xs
}

struct Stats {
    max: f64,
    at: f32,
    got: f32,
}

fn max_err_unary(xs: &[f32], got: &[f32], reference: fn(f64) -> f64) -> Stats {
    xs.par_iter()
        .zip(got.par_iter())
        .map(|(&x, &g)| Stats { max: ulp_err(g, reference(x as f64)), at: x, got: g })
        .reduce(|| Stats { max: 0.0, at: 0.0, got: 0.0 }, |a, b| if b.max > a.max { b } else { a })
}

fn check_unary(name: &str) {
    let case = unary_cases().into_iter().find(|c| c.name == name).unwrap();
    let k = compile(Op::Unary(case.emit));
    let xs = sweep_inputs(case.dense);
    let got = k.run(&xs, None);
    let s = max_err_unary(&xs, &got, case.reference);
    eprintln!(
        "{name}: max {:.3} ulp at x = {:e} ({:#010x}) -> {:e}",
        s.max,
        s.at,
        s.at.to_bits(),
        s.got
    );
    assert!(
        s.max <= case.bound,
        "{name}: {:.3} ulp at x = {:e} ({:#010x}): got {:e}, want {:e}",
        s.max,
        s.at,
        s.at.to_bits(),
        s.got,
        (case.reference)(s.at as f64)
    );
    check_exact(&k, name, case.interp, case.exact);
    if let Some(op) = vector_entry(name) {
        let mut xs = xs;
        xs.extend_from_slice(&specials());
        check_unary_entry(name, op, &xs, &k);
    }
}

/// The opcode whose host vector entry point ([`hlo_vmath`]) computes `name`.
fn vector_entry(name: &str) -> Option<hlo_ir::Opcode> {
    use hlo_ir::Opcode::*;
    Some(match name {
        "exp" => Exp,
        "expm1" => Expm1,
        "log" => Log,
        "log1p" => Log1p,
        "tanh" => Tanh,
        "logistic" => Logistic,
        "pow" => Power,
        _ => return None,
    })
}

/// [`check_vector_entry`] for the unary function `name` (opcode `op`).
fn check_unary_entry(name: &str, op: hlo_ir::Opcode, xs: &[f32], k: &Kernels) {
    let symbol = crate::codegen::staged::symbol(op).expect("a vector entry point");
    check_vector_entry(name, xs, None, |xs, _| vmath::run_unary(symbol, xs), k);
}

/// The host vector entry point gives the inline emitter's bits on every input, in the
/// default FP mode and under the kernels' FTZ/DAZ mode.
fn check_vector_entry(
    name: &str,
    xs: &[f32],
    ys: Option<&[f32]>,
    host: impl Fn(&[f32], Option<&[f32]>) -> Vec<f32>,
    k: &Kernels,
) {
    for ftz in [false, true] {
        let (inline, wide) = if ftz {
            crate::fpenv::with_host_fp_mode(|| (k.run_with(0, xs, ys), host(xs, ys)))
        } else {
            (k.run_with(0, xs, ys), host(xs, ys))
        };
        let bad = (0..xs.len()).find(|&i| inline[i].to_bits() != wide[i].to_bits());
        if let Some(i) = bad {
            panic!(
                "{name} ({:?}, FTZ/DAZ {ftz}): the vector entry point gives {:e} ({:#010x}) at x = {:e} ({:#010x}){}, the inline code {:e} ({:#010x})",
                vmath::isa(),
                wide[i],
                wide[i].to_bits(),
                xs[i],
                xs[i].to_bits(),
                ys.map(|y| format!(", y = {:e} ({:#010x})", y[i], y[i].to_bits()))
                    .unwrap_or_default(),
                inline[i],
                inline[i].to_bits()
            );
        }
    }
}

fn check_exact(k: &Kernels, name: &str, interp: fn(f32) -> f32, extra: &[f32]) {
    let mut xs = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001),
    ];
    xs.extend_from_slice(extra);
    let got = k.run(&xs, None);
    for (&x, &g) in xs.iter().zip(&got) {
        let want = interp(x);
        assert!(
            same(g, want),
            "{name}({x:e}) = {g:e} ({:#010x}), the interpreter gives {want:e} ({:#010x})",
            g.to_bits(),
            want.to_bits()
        );
        if g.is_nan() {
            assert!(g.to_bits() & 0x0040_0000 != 0, "{name}({x:e}) gives a signaling NaN");
        }
    }
}

#[test]
fn exp_ulp() {
    check_unary("exp");
}
#[test]
fn expm1_ulp() {
    check_unary("expm1");
}
#[test]
fn log_ulp() {
    check_unary("log");
}
#[test]
fn log1p_ulp() {
    check_unary("log1p");
}
#[test]
fn tanh_ulp() {
    check_unary("tanh");
}
#[test]
fn logistic_ulp() {
    check_unary("logistic");
}
#[test]
fn erf_ulp() {
    check_unary("erf");
}
#[test]
fn sin_ulp() {
    check_unary("sin");
}
#[test]
fn cos_ulp() {
    check_unary("cos");
}
#[test]
fn cbrt_ulp() {
    check_unary("cbrt");
}
#[test]
fn rsqrt_ulp() {
    check_unary("rsqrt");
}

#[test]
fn sin_cos_stay_in_range_for_huge_arguments() {
    let xs: Vec<f32> = (0..=u32::MAX)
        .step_by(4099)
        .map(f32::from_bits)
        .filter(|x| x.abs() >= 131072.0 && x.is_finite())
        .collect();
    for emit in [math::sin as Unary, math::cos] {
        let got = compile(Op::Unary(emit)).run(&xs, None);
        assert!(got.iter().all(|v| v.abs() <= 1.0));
    }
}

// ---------------------------------------------------------------------------------------
// Binary functions.

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn bits(&mut self) -> f32 {
        f32::from_bits(self.next() as u32)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn uniform(&mut self, lo: f64, hi: f64) -> f32 {
        (lo + (hi - lo) * self.unit()) as f32
    }
}

fn binary_specials() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        -2.0,
        3.0,
        -3.0,
        2.5,
        -2.5,
        16777216.0,
        16777217.0,
        -16777217.0,
        8388609.0,
        -8388609.0,
        1e30,
        -1e30,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        1e-40,
        -1e-40,
        f32::from_bits(1),
    ];
    v.push(1.0 + f32::EPSILON);
    v.push(1.0 - f32::EPSILON / 2.0);
    v
}

fn is_special(x: f32) -> bool {
    x == 0.0 || x.is_infinite() || x.is_nan()
}

fn check_binary(
    name: &str,
    emit: super::common::Binary,
    reference: fn(f64, f64) -> f64,
    interp: fn(f32, f32) -> f32,
    pairs: Vec<(f32, f32)>,
    bound: f64,
) {
    let k = compile(Op::Binary(emit));
    let mut pairs = pairs;
    let sp = binary_specials();
    for &a in &sp {
        for &b in &sp {
            pairs.push((a, b));
        }
    }
    if pairs.len().is_multiple_of(4) {
        pairs.push((0.75, 0.75));
    }
    let (xs, ys): (Vec<f32>, Vec<f32>) = pairs.iter().copied().unzip();
    let got = k.run(&xs, Some(&ys));
    if vector_entry(name).is_some() {
        check_vector_entry(name, &xs, Some(&ys), |x, y| vmath::run_pow(x, y.unwrap()), &k);
    }
    let worst = (0..xs.len())
        .into_par_iter()
        // NaN operands are checked against the interpreter below (f64 conversion would
        // quiet a signaling NaN, which matters to pow).
        .filter(|&i| !xs[i].is_nan() && !ys[i].is_nan())
        .map(|i| (ulp_err(got[i], reference(xs[i] as f64, ys[i] as f64)), i))
        .reduce(|| (0.0, 0), |a, b| if b.0 > a.0 { b } else { a });
    let i = worst.1;
    eprintln!("{name}: max {:.3} ulp at ({:e}, {:e}) -> {:e}", worst.0, xs[i], ys[i], got[i]);
    assert!(
        worst.0 <= bound,
        "{name}: {:.3} ulp at ({:e}, {:e}): got {:e}, want {:e}",
        worst.0,
        xs[i],
        ys[i],
        got[i],
        reference(xs[i] as f64, ys[i] as f64)
    );
    for i in 0..xs.len() {
        let want = interp(xs[i], ys[i]);
        let special = is_special(xs[i])
            || is_special(ys[i])
            || (name == "pow" && xs[i].abs() == 1.0)
            || want == 0.0
            || want.is_infinite()
            || want.is_nan();
        if special {
            assert!(
                same(got[i], want),
                "{name}({:e}, {:e}) = {:e}, the interpreter gives {want:e}",
                xs[i],
                ys[i],
                got[i]
            );
        }
    }
}

#[test]
fn pow_ulp() {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let mut pairs = Vec::new();
    for _ in 0..400_000 {
        pairs.push((r.bits(), r.bits()));
    }
    for _ in 0..1_000_000 {
        let x = 10f64.powf(r.unit() * 12.0 - 6.0) as f32;
        let x = if r.next() & 1 == 1 { -x } else { x };
        let y = r.uniform(-40.0, 40.0);
        let y = if x < 0.0 { y.round() } else { y };
        pairs.push((x, y));
    }
    for _ in 0..300_000 {
        // Near 1 with large exponents, and near the overflow/underflow thresholds.
        let x = r.uniform(0.999, 1.001);
        let y = r.uniform(-1e5, 1e5);
        pairs.push((x, y));
        let x = r.uniform(1.5, 2.5);
        let y = r.uniform(-160.0, 130.0);
        pairs.push((x, y));
    }
    for _ in 0..200_000 {
        let x = -r.uniform(0.0, 5.0);
        let y = (r.next() % 61) as f32 - 30.0;
        pairs.push((x, y));
        let x = r.bits();
        let y = (r.next() % 7) as f32 - 3.0;
        pairs.push((x, y));
    }
    check_binary("pow", math::pow, f64::powf, f32::powf, pairs, 0.55);
}

#[test]
fn atan2_ulp() {
    let mut r = Rng(0x2545_f491_4f6c_dd1d);
    let mut pairs = Vec::new();
    for _ in 0..1_000_000 {
        pairs.push((r.bits(), r.bits()));
        pairs.push((r.uniform(-10.0, 10.0), r.uniform(-10.0, 10.0)));
    }
    check_binary("atan2", math::atan2, f64::atan2, f32::atan2, pairs, 1.5);
}

// ---------------------------------------------------------------------------------------
// bf16.

#[test]
fn round_to_bf16_matches_half() {
    let k = compile(Op::Unary(math::round_to_bf16));
    let mut xs: Vec<f32> = (0..=u32::MAX).step_by(251).map(f32::from_bits).collect();
    xs.extend(specials());
    xs.extend([
        f32::from_bits(0x3f80_8000),
        f32::from_bits(0x3f81_8000),
        f32::from_bits(0x7f7f_ffff),
        f32::from_bits(0x7fff_ffff),
    ]);
    xs.extend((0..1 << 17).map(|i| f32::from_bits(0x3f80_0000 + i)));
    let got = k.run(&xs, None);
    for (&x, &g) in xs.iter().zip(&got) {
        let want = half::bf16::from_f32(x).to_f32();
        assert_eq!(g.to_bits(), want.to_bits(), "round_to_bf16({x:e} = {:#010x})", x.to_bits());
    }
}

#[test]
fn bf16_load_store_round_trip() {
    use cranelift_codegen::ir::{InstBuilder, MemFlagsData, types};
    // in: f32[8]; out: u16[8] via store_bf16x4 and f32_to_bf16_bits; back: f32[8].
    let mut m = crate::jit::JitModule::new().unwrap();
    m.define("bf16", |b, _jm, args, _range| {
        let ptr = types::I64;
        let fl = MemFlagsData::new().with_notrap();
        let src = b.ins().load(ptr, fl, args, 0);
        let mid = b.ins().load(ptr, fl, args, 8);
        let dst = b.ins().load(ptr, fl, args, 16);
        let x0 = b.ins().load(types::F32X4, fl, src, 0);
        math::store_bf16x4(b, fl, x0, mid, 0);
        let x1 = b.ins().load(types::F32X4, fl, src, 16);
        let h = math::f32_to_bf16_bits(b, x1);
        let h = b.ins().bitcast(
            types::I64X2,
            MemFlagsData::new().with_endianness(cranelift_codegen::ir::Endianness::Little),
            h,
        );
        let h = b.ins().extractlane(h, 0);
        b.ins().store(fl, h, mid, 8);
        let y0 = math::load_bf16x4(b, fl, mid, 0);
        b.ins().store(fl, y0, dst, 0);
        let w = b.ins().load(types::I16X8, fl, mid, 0);
        let y1 = math::bf16x8_high_to_f32(b, w);
        b.ins().store(fl, y1, dst, 16);
        let lo = math::bf16_bits_to_f32(b, w);
        b.ins().store(fl, lo, dst, 32);
        let s = b.ins().load(types::I16, fl, mid, 2);
        let s = math::bf16_bits_to_f32(b, s);
        b.ins().store(fl, s, dst, 48);
        let x = b.ins().load(types::F32, fl, src, 28);
        let hb = math::f32_to_bf16_bits(b, x);
        b.ins().store(fl, hb, mid, 16);
        b.ins().return_(&[]);
        Ok(())
    })
    .unwrap();
    let code = m.finish().unwrap();
    // 1 + 2^-8 and 1 + 3 * 2^-8 are bf16 ties (to even: down and up).
    let src: [f32; 8] =
        [1.0, 1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, -3.5, f32::NAN, f32::MAX, 1e-40, -0.0];
    let mut mid = [0u16; 9];
    let mut dst = [0f32; 13];
    let args = [src.as_ptr() as *mut u8, mid.as_mut_ptr() as *mut u8, dst.as_mut_ptr() as *mut u8];
    unsafe { (code.fns[0])(args.as_ptr(), 0, 1) };
    for i in 0..8 {
        let want = half::bf16::from_f32(src[i]);
        assert_eq!(mid[i], want.to_bits(), "bits of {:e}", src[i]);
        assert!(same(dst[i], want.to_f32()), "round trip of {:e}", src[i]);
    }
    assert_eq!(mid[8], half::bf16::from_f32(src[7]).to_bits());
    for i in 0..4 {
        assert!(same(dst[8 + i], dst[i]));
    }
    assert!(same(dst[12], dst[1]));
}

// ---------------------------------------------------------------------------------------
// Exhaustive measurement (ignored: minutes in a release build).

#[test]
#[ignore]
fn exhaustive_ulp() {
    // MATH_ULP_ONLY=exp,log limits the run to some functions.
    let only = std::env::var("MATH_ULP_ONLY").ok();
    for case in unary_cases() {
        if only.as_deref().is_some_and(|o| !o.split(',').any(|n| n == case.name)) {
            continue;
        }
        let k = compile(Op::Unary(case.emit));
        let mut worst = Stats { max: 0.0, at: 0.0, got: 0.0 };
        let mut over1 = 0u64;
        let chunk = 1u64 << 22;
        let mut start = 0u64;
        while start < 1 << 32 {
            let xs: Vec<f32> = (start..start + chunk).map(|b| f32::from_bits(b as u32)).collect();
            let got = k.run(&xs, None);
            let s = max_err_unary(&xs, &got, case.reference);
            over1 += xs
                .par_iter()
                .zip(got.par_iter())
                .filter(|(x, g)| ulp_err(**g, (case.reference)(**x as f64)) > 1.0)
                .count() as u64;
            if s.max > worst.max {
                worst = s;
            }
            start += chunk;
        }
        println!(
            "| {} | {:.3} | x = {:e} ({:#010x}) -> {:e}, want {:e}; {} inputs > 1 ulp |",
            case.name,
            worst.max,
            worst.at,
            worst.at.to_bits(),
            worst.got,
            (case.reference)(worst.at as f64),
            over1
        );
    }
}

/// The host vector entry points against the inline emitters on every f32 input, in both FP
/// modes (about two minutes on 2 cores in release):
/// `cargo test --release -p hlo-runtime --lib vector_entries_exhaustive -- --ignored`.
#[test]
#[ignore]
fn vector_entries_exhaustive() {
    for name in ["exp", "expm1", "log", "log1p", "tanh", "logistic"] {
        let case = unary_cases().into_iter().find(|c| c.name == name).unwrap();
        let op = vector_entry(name).unwrap();
        let k = compile(Op::Unary(case.emit));
        (0u32..1 << 12).into_par_iter().for_each(|hi| {
            let xs: Vec<f32> = (0u32..1 << 20).map(|lo| f32::from_bits(hi << 20 | lo)).collect();
            check_unary_entry(name, op, &xs, &k);
        });
        eprintln!("{name}: every input agrees");
    }
}
