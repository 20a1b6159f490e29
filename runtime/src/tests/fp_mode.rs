//! JIT kernels inside `with_host_fp_mode` reproduce what XLA CPU returned for subnormal
//! inputs and results (the measurement is documented in `crate::fpenv`).

use super::common::{Op, compile};
use crate::codegen::math;
use crate::fpenv::with_host_fp_mode;
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

fn mul(b: &mut FunctionBuilder, x: Value, y: Value) -> Value {
    b.ins().fmul(x, y)
}
fn add(b: &mut FunctionBuilder, x: Value, y: Value) -> Value {
    b.ins().fadd(x, y)
}
/// 1.0 where x > y, else 0.0.
fn gt(b: &mut FunctionBuilder, x: Value, y: Value) -> Value {
    let ty = b.func.dfg.value_type(x);
    let m = b.ins().fcmp(FloatCC::GreaterThan, x, y);
    let one = b.ins().f32const(1.0);
    let zero = b.ins().f32const(0.0);
    if ty.is_vector() {
        let one = b.ins().splat(ty, one);
        let zero = b.ins().splat(ty, zero);
        let m = b.ins().bitcast(ty, cranelift_codegen::ir::MemFlagsData::new(), m);
        b.ins().bitselect(m, one, zero)
    } else {
        b.ins().select(m, one, zero)
    }
}
fn sqrt(b: &mut FunctionBuilder, x: Value) -> Value {
    b.ins().sqrt(x)
}

/// The first module's `x` (8 values; the last 3 run through the scalar tail).
const X: [f32; 8] = [1e-40, -1e-40, 1.4e-45, 1e-38, 2e-38, f32::MIN_POSITIVE, 3e-39, 0.0];

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn binary(f: super::common::Binary, xs: &[f32], ys: &[f32]) -> (Vec<u32>, Vec<u32>) {
    let k = compile(Op::Binary(f));
    let ieee = bits(&k.run(xs, Some(ys)));
    let xla = with_host_fp_mode(|| bits(&k.run(xs, Some(ys))));
    (ieee, xla)
}

#[test]
fn arithmetic_flushes_like_xla() {
    let half = [0.5f32; 8];
    let (ieee, xla) = binary(mul, &X, &half);
    // XLA: x * 0.5 = [0, -0, 0, 0, 0, 0, 0, 0].
    assert_eq!(xla, bits(&[0.0, -0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]));
    assert_eq!(ieee, bits(&X.map(|x| x * 0.5)), "outside the mode arithmetic is IEEE");
    assert_ne!(ieee[4], 0, "2e-38 * 0.5 is a subnormal without flushing");

    let big = [1e10f32; 8];
    let (_, xla) = binary(mul, &X, &big);
    // XLA: x * 1e10 = [0, -0, 0, 0, 2e-28, 1.1754944e-28, 0, 0] (subnormal inputs read as 0).
    assert_eq!(xla, bits(&[0.0, -0.0, 0.0, 0.0, 2e-38 * 1e10, f32::MIN_POSITIVE * 1e10, 0.0, 0.0]));

    let (_, xla) = binary(add, &X, &X);
    // XLA: x + x = [0, -0, 0, 0, 4e-38, 2.3509887e-38, 0, 0].
    assert_eq!(xla, bits(&[0.0, -0.0, 0.0, 0.0, 4e-38, 2.3509887e-38, 0.0, 0.0]));

    let zeros = [0f32; 8];
    let (ieee, xla) = binary(gt, &X, &zeros);
    // XLA: x > 0 = [F, F, F, F, T, T, F, F].
    assert_eq!(xla, bits(&[0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]));
    assert_eq!(ieee, bits(&[1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0]));
}

#[test]
fn exp_underflow_flushes_like_xla() {
    let e: [f32; 8] = [-88.0, -90.0, -95.0, -100.0, -103.0, -104.0, -87.3, -87.4];
    let k = compile(Op::Unary(math::exp));
    let xla = with_host_fp_mode(|| bits(&k.run(&e, None)));
    // XLA: [0, 0, 0, 0, 0, 0, 1.2192433e-38 (bits 8700811), 0].
    assert_eq!(xla, vec![0, 0, 0, 0, 0, 0, 8700811, 0]);
    let ieee = k.run(&e, None);
    assert!(ieee[..5].iter().all(|&v| v > 0.0), "IEEE mode keeps the subnormal results: {ieee:?}");
}

/// XLA's outputs for the second module's input `[1e-40, -1e-40, 1.4e-45, 3e-39, -3e-39, 1e-38]`.
#[test]
fn unary_functions_on_subnormals_match_xla() {
    let x: [f32; 6] = [1e-40, -1e-40, 1.4e-45, 3e-39, -3e-39, 1e-38];
    let zeros = [0.0, -0.0, 0.0, 0.0, -0.0, 0.0];
    let inf = f32::INFINITY;
    let cases: [(&str, super::common::Unary, [f32; 6]); 10] = [
        ("log1p", math::log1p, zeros),
        ("exp", math::exp, [1.0; 6]),
        ("expm1", math::expm1, x),
        ("tanh", math::tanh, x),
        ("sin", math::sin, x),
        ("cos", math::cos, [1.0; 6]),
        ("sqrt", sqrt, zeros),
        ("rsqrt", math::rsqrt, [inf, -inf, inf, inf, -inf, inf]),
        ("erf", math::erf, zeros),
        ("logistic", math::logistic, [0.5; 6]),
    ];
    for (name, f, want) in cases {
        let k = compile(Op::Unary(f));
        let got = with_host_fp_mode(|| k.run(&x, None));
        assert_eq!(bits(&got), bits(&want), "{name} under FTZ/DAZ");
    }
    // Not XLA's value (it gives -103.97208 / NaN), but the log of the zero DAZ reads.
    let k = compile(Op::Unary(math::log));
    let got = with_host_fp_mode(|| k.run(&x, None));
    assert!(got.iter().all(|&v| v == f32::NEG_INFINITY), "{got:?}");
    // XLA: power([2, 2, 0.5, 1, -1, 1e-40], x) = [1, 1, 1, 1, NaN, 1]; here the fifth is 1.
    let k = compile(Op::Binary(math::pow));
    let y: [f32; 6] = [2.0, 2.0, 0.5, 1.0, -1.0, 1e-40];
    let got = with_host_fp_mode(|| k.run(&y, Some(&x)));
    assert_eq!(got, [1.0; 6]);
}
