//! Scalar host functions JIT code may call: the math the interpreter computes with Rust's
//! `f32`/`f64` methods (which call the platform's libm) and `libm::erf`, exposed under
//! stable symbol names so JIT results equal the interpreter's bit for bit. Kernels call
//! them once per element; vectorized CLIF polynomials replace them where speed matters.

use cranelift_codegen::ir::{AbiParam, InstBuilder, Type, Value};
use cranelift_frontend::FunctionBuilder;
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, Module as _};

macro_rules! host_fns {
    ($( $name:ident : $t:ty = $body:expr ; )*) => {
        $( extern "C" fn $name(x: $t) -> $t { let f: fn($t) -> $t = $body; f(x) } )*
        /// `(symbol, address)` of every unary host function.
        const UNARY: &[(&str, *const u8)] = &[ $( (stringify!($name), $name as *const u8) ),* ];
    };
}

host_fns! {
    hlo_exp_f32: f32 = |x| x.exp();
    hlo_expm1_f32: f32 = |x| x.exp_m1();
    hlo_log_f32: f32 = |x| x.ln();
    hlo_log1p_f32: f32 = |x| x.ln_1p();
    hlo_tanh_f32: f32 = |x| x.tanh();
    hlo_tan_f32: f32 = |x| x.tan();
    hlo_sin_f32: f32 = |x| x.sin();
    hlo_cos_f32: f32 = |x| x.cos();
    hlo_cbrt_f32: f32 = |x| x.cbrt();
    hlo_erf_f32: f32 = libm::erff;
    hlo_round_f32: f32 = |x| x.round();
    hlo_sinh_f32: f32 = |x| x.sinh();
    hlo_cosh_f32: f32 = |x| x.cosh();
    hlo_asin_f32: f32 = |x| x.asin();
    hlo_acos_f32: f32 = |x| x.acos();
    hlo_asinh_f32: f32 = |x| x.asinh();
    hlo_acosh_f32: f32 = |x| x.acosh();
    hlo_atanh_f32: f32 = |x| x.atanh();
    hlo_exp_f64: f64 = |x| x.exp();
    hlo_expm1_f64: f64 = |x| x.exp_m1();
    hlo_log_f64: f64 = |x| x.ln();
    hlo_log1p_f64: f64 = |x| x.ln_1p();
    hlo_tanh_f64: f64 = |x| x.tanh();
    hlo_tan_f64: f64 = |x| x.tan();
    hlo_sin_f64: f64 = |x| x.sin();
    hlo_cos_f64: f64 = |x| x.cos();
    hlo_cbrt_f64: f64 = |x| x.cbrt();
    hlo_erf_f64: f64 = libm::erf;
    hlo_round_f64: f64 = |x| x.round();
    hlo_sinh_f64: f64 = |x| x.sinh();
    hlo_cosh_f64: f64 = |x| x.cosh();
    hlo_asin_f64: f64 = |x| x.asin();
    hlo_acos_f64: f64 = |x| x.acos();
    hlo_asinh_f64: f64 = |x| x.asinh();
    hlo_acosh_f64: f64 = |x| x.acosh();
    hlo_atanh_f64: f64 = |x| x.atanh();
}

extern "C" fn hlo_pow_f32(x: f32, y: f32) -> f32 {
    x.powf(y)
}
extern "C" fn hlo_pow_f64(x: f64, y: f64) -> f64 {
    x.powf(y)
}
extern "C" fn hlo_rem_f32(x: f32, y: f32) -> f32 {
    x % y
}
extern "C" fn hlo_rem_f64(x: f64, y: f64) -> f64 {
    x % y
}
extern "C" fn hlo_atan2_f32(x: f32, y: f32) -> f32 {
    x.atan2(y)
}
extern "C" fn hlo_atan2_f64(x: f64, y: f64) -> f64 {
    x.atan2(y)
}

const BINARY: &[(&str, *const u8)] = &[
    ("hlo_pow_f32", hlo_pow_f32 as *const u8),
    ("hlo_pow_f64", hlo_pow_f64 as *const u8),
    ("hlo_rem_f32", hlo_rem_f32 as *const u8),
    ("hlo_rem_f64", hlo_rem_f64 as *const u8),
    ("hlo_atan2_f32", hlo_atan2_f32 as *const u8),
    ("hlo_atan2_f64", hlo_atan2_f64 as *const u8),
];

/// Registers every host function with a JIT builder.
pub fn register(jb: &mut JITBuilder) {
    for &(name, f) in UNARY {
        jb.symbol(name, f);
    }
    for &(name, f) in BINARY {
        jb.symbol(name, f);
    }
    for (name, f) in hlo_vmath::entry_points(hlo_vmath::isa()) {
        jb.symbol(name, f);
    }
}

/// Whether a host function of that name exists.
pub fn exists(name: &str) -> bool {
    UNARY.iter().any(|u| u.0 == name) || BINARY.iter().any(|u| u.0 == name)
}

/// Emits a call of host function `name` (declared on first use) on scalar `args` of type `ty`.
pub(crate) fn call(
    module: &mut JITModule,
    b: &mut FunctionBuilder,
    name: &str,
    args: &[Value],
    ty: Type,
) -> Result<Value, String> {
    let mut sig = module.make_signature();
    for _ in args {
        sig.params.push(AbiParam::new(ty));
    }
    sig.returns.push(AbiParam::new(ty));
    let id = module
        .declare_function(name, Linkage::Import, &sig)
        .map_err(|e| format!("declare host function `{name}`: {e}"))?;
    let fref = module.declare_func_in_func(id, b.func);
    let call = b.ins().call(fref, args);
    Ok(b.inst_results(call)[0])
}
