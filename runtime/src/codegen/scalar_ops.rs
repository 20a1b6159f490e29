//! Scalar elementwise operations in CLIF with XLA's semantics, mirroring the interpreter
//! (`hlo_interp::elementwise`): IEEE float arithmetic computed in f32 for bf16 and f16
//! and rounded after every operation, NaN-propagating `maximum`/`minimum`, wrap-around
//! integers, division by zero giving -1 and `remainder` by zero the dividend, shifts by
//! at least the width giving 0 or the sign fill, integer `power` by squaring (negative
//! exponents: 1, ±1 or 0), saturating float→int `convert` with NaN→0.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Type, Value, types};
use cranelift_frontend::FunctionBuilder;
use cranelift_jit::JITModule;
use hlo_ir::op::{CmpDirection, CmpType};
use hlo_ir::types::ElemClass;
use hlo_ir::{ElemType, Opcode};

use super::CgError;
use super::ty::{Repr, round_to, wrap_int};
use crate::host;

fn float_suffix(r: Repr) -> &'static str {
    if r == Repr::F64 { "f64" } else { "f32" }
}

fn host_call(
    m: &mut JITModule,
    b: &mut FunctionBuilder,
    name: &str,
    r: Repr,
    args: &[Value],
) -> Result<Value, CgError> {
    let sym = format!("hlo_{name}_{}", float_suffix(r));
    if !host::exists(&sym) {
        return Err(CgError::unsupported(crate::Unsupported::HostFunction(sym)));
    }
    host::call(m, b, &sym, args, r.ty()).map_err(CgError::new)
}

pub fn fconst(b: &mut FunctionBuilder, ty: Type, v: f64) -> Value {
    if ty == types::F64 { b.ins().f64const(v) } else { b.ins().f32const(v as f32) }
}

fn unsupported(op: Opcode, e: ElemType) -> CgError {
    CgError::unsupported(crate::Unsupported::OpOnType { opcode: op, elem: e })
}

/// A unary opcode on a value of element type `e` (result of the same type, except
/// `is-finite` which gives pred).
pub fn unary(
    m: &mut JITModule,
    b: &mut FunctionBuilder,
    op: Opcode,
    e: ElemType,
    x: Value,
) -> Result<Value, CgError> {
    use Opcode::*;
    let r = Repr::of(e)?;
    let v = match r {
        Repr::F32 | Repr::F64 => {
            let ty = r.ty();
            match op {
                Negate => b.ins().fneg(x),
                Abs => b.ins().fabs(x),
                Sign => {
                    let one = fconst(b, ty, 1.0);
                    let s = b.ins().fcopysign(one, x);
                    let zero = fconst(b, ty, 0.0);
                    // NaN and ±0 are returned unchanged.
                    let keep = b.ins().fcmp(FloatCC::UnorderedOrEqual, x, zero);
                    b.ins().select(keep, x, s)
                }
                Sqrt => b.ins().sqrt(x),
                Rsqrt => {
                    let s = b.ins().sqrt(x);
                    let one = fconst(b, ty, 1.0);
                    b.ins().fdiv(one, s)
                }
                Floor => b.ins().floor(x),
                Ceil => b.ins().ceil(x),
                RoundNearestEven => b.ins().nearest(x),
                RoundNearestAfz => host_call(m, b, "round", r, &[x])?,
                // f32: the vectorizable CLIF polynomials of `math` (≤ 2.4 ulp), the same
                // code the f32x4 loops run, so every element of a result is computed alike.
                Exp if r == Repr::F32 => super::math::exp(b, x),
                Expm1 if r == Repr::F32 => super::math::expm1(b, x),
                Log if r == Repr::F32 => super::math::log(b, x),
                Log1p if r == Repr::F32 => super::math::log1p(b, x),
                Tanh if r == Repr::F32 => super::math::tanh(b, x),
                Sin if r == Repr::F32 => super::math::sin(b, x),
                Cos if r == Repr::F32 => super::math::cos(b, x),
                Erf if r == Repr::F32 => super::math::erf(b, x),
                Cbrt if r == Repr::F32 => super::math::cbrt(b, x),
                Logistic if r == Repr::F32 => super::math::logistic(b, x),
                Exp => host_call(m, b, "exp", r, &[x])?,
                Expm1 => host_call(m, b, "expm1", r, &[x])?,
                Log => host_call(m, b, "log", r, &[x])?,
                Log1p => host_call(m, b, "log1p", r, &[x])?,
                Tanh => host_call(m, b, "tanh", r, &[x])?,
                Tan => host_call(m, b, "tan", r, &[x])?,
                Sin => host_call(m, b, "sin", r, &[x])?,
                Cos => host_call(m, b, "cos", r, &[x])?,
                Cbrt => host_call(m, b, "cbrt", r, &[x])?,
                Erf => host_call(m, b, "erf", r, &[x])?,
                Sinh => host_call(m, b, "sinh", r, &[x])?,
                Cosh => host_call(m, b, "cosh", r, &[x])?,
                Asin => host_call(m, b, "asin", r, &[x])?,
                Acos => host_call(m, b, "acos", r, &[x])?,
                Asinh => host_call(m, b, "asinh", r, &[x])?,
                Acosh => host_call(m, b, "acosh", r, &[x])?,
                Atanh => host_call(m, b, "atanh", r, &[x])?,
                Logistic => {
                    let n = b.ins().fneg(x);
                    let ex = host_call(m, b, "exp", r, &[n])?;
                    let one = fconst(b, ty, 1.0);
                    let d = b.ins().fadd(one, ex);
                    b.ins().fdiv(one, d)
                }
                IsFinite => {
                    let a = b.ins().fabs(x);
                    let inf = fconst(b, ty, f64::INFINITY);
                    return Ok(b.ins().fcmp(FloatCC::LessThan, a, inf));
                }
                // A real value's real part is itself and its imaginary part +0 (NaN too).
                Copy | OptBarrier | Real => x,
                Imag => fconst(b, ty, 0.0),
                _ => return Err(unsupported(op, e)),
            }
        }
        Repr::Int { ty, signed } => match op {
            Negate => b.ins().ineg(x),
            Abs if signed => b.ins().iabs(x),
            Abs => x,
            Sign if signed => {
                let zero = b.ins().iconst(ty, 0);
                let pos = b.ins().icmp(IntCC::SignedGreaterThan, x, zero);
                let neg = b.ins().icmp(IntCC::SignedLessThan, x, zero);
                let pos = b.ins().uextend_or_same(ty, pos);
                let neg = b.ins().uextend_or_same(ty, neg);
                b.ins().isub(pos, neg)
            }
            Sign => {
                let zero = b.ins().iconst(ty, 0);
                let nz = b.ins().icmp(IntCC::NotEqual, x, zero);
                b.ins().uextend_or_same(ty, nz)
            }
            Not => b.ins().bnot(x),
            // Sub-byte integers live sign- or zero-extended in an i8: count their own bits.
            PopCnt if e.bits() < 8 => {
                let low = b.ins().band_imm_u(x, (1i64 << e.bits()) - 1);
                b.ins().popcnt(low)
            }
            Clz if e.bits() < 8 => {
                let low = b.ins().band_imm_u(x, (1i64 << e.bits()) - 1);
                let c = b.ins().clz(low);
                b.ins().iadd_imm_s(c, -(8 - e.bits() as i64))
            }
            PopCnt => b.ins().popcnt(x),
            Clz => b.ins().clz(x),
            Copy | OptBarrier => x,
            _ => return Err(unsupported(op, e)),
        },
        Repr::Pred => match op {
            Not => b.ins().bxor_imm_u(x, 1),
            Copy | OptBarrier => x,
            _ => return Err(unsupported(op, e)),
        },
    };
    Ok(match r {
        Repr::F32 => round_to(b, e, v),
        Repr::Int { .. } => wrap_int(b, e, v),
        _ => v,
    })
}

trait UextendOrSame {
    fn uextend_or_same(self, ty: Type, v: Value) -> Value;
}

impl<'a, T: InstBuilder<'a>> UextendOrSame for T {
    fn uextend_or_same(self, ty: Type, v: Value) -> Value {
        if ty == types::I8 { v } else { self.uextend(ty, v) }
    }
}

/// A binary opcode on two values of element type `e`.
pub fn binary(
    m: &mut JITModule,
    b: &mut FunctionBuilder,
    op: Opcode,
    e: ElemType,
    x: Value,
    y: Value,
) -> Result<Value, CgError> {
    use Opcode::*;
    let r = Repr::of(e)?;
    let v = match r {
        Repr::F32 | Repr::F64 => match op {
            Add => b.ins().fadd(x, y),
            Subtract => b.ins().fsub(x, y),
            Multiply => b.ins().fmul(x, y),
            Divide => b.ins().fdiv(x, y),
            Maximum => b.ins().fmax(x, y),
            Minimum => b.ins().fmin(x, y),
            Power if r == Repr::F32 => super::math::pow(b, x, y),
            Atan2 if r == Repr::F32 => super::math::atan2(b, x, y),
            Power => host_call(m, b, "pow", r, &[x, y])?,
            Remainder => host_call(m, b, "rem", r, &[x, y])?,
            Atan2 => host_call(m, b, "atan2", r, &[x, y])?,
            _ => return Err(unsupported(op, e)),
        },
        Repr::Int { ty, signed } => {
            let v = int_binary(b, op, e, ty, signed, x, y)?;
            wrap_int(b, e, v)
        }
        Repr::Pred => match op {
            And | Multiply | Minimum => b.ins().band(x, y),
            Or | Add | Maximum => b.ins().bor(x, y),
            Xor => b.ins().bxor(x, y),
            _ => return Err(unsupported(op, e)),
        },
    };
    Ok(if r == Repr::F32 { round_to(b, e, v) } else { v })
}

fn int_binary(
    b: &mut FunctionBuilder,
    op: Opcode,
    e: ElemType,
    ty: Type,
    signed: bool,
    x: Value,
    y: Value,
) -> Result<Value, CgError> {
    use Opcode::*;
    // Sub-byte integers (s4, u2, ...) are computed in an i8 and wrapped by the caller.
    let bits = (ty.bits() as i64).min(e.bits() as i64);
    Ok(match op {
        Add => b.ins().iadd(x, y),
        Subtract => b.ins().isub(x, y),
        Multiply => b.ins().imul(x, y),
        And => b.ins().band(x, y),
        Or => b.ins().bor(x, y),
        Xor => b.ins().bxor(x, y),
        Maximum if signed => b.ins().smax(x, y),
        Minimum if signed => b.ins().smin(x, y),
        Maximum => b.ins().umax(x, y),
        Minimum => b.ins().umin(x, y),
        Divide | Remainder => {
            let zero = b.ins().iconst(ty, 0);
            let one = b.ins().iconst(ty, 1);
            let y0 = b.ins().icmp(IntCC::Equal, y, zero);
            let mut bad = y0;
            if signed {
                let min = b.ins().iconst(ty, i64::MIN >> (64 - bits));
                let minus1 = b.ins().iconst(ty, -1);
                let xmin = b.ins().icmp(IntCC::Equal, x, min);
                let ym1 = b.ins().icmp(IntCC::Equal, y, minus1);
                let ovf = b.ins().band(xmin, ym1);
                bad = b.ins().bor(y0, ovf);
            }
            let safe = b.ins().select(bad, one, y);
            if op == Divide {
                let q = if signed { b.ins().sdiv(x, safe) } else { b.ins().udiv(x, safe) };
                let minus1 = b.ins().iconst(ty, -1);
                b.ins().select(y0, minus1, q)
            } else {
                let q = if signed { b.ins().srem(x, safe) } else { b.ins().urem(x, safe) };
                b.ins().select(y0, x, q)
            }
        }
        ShiftLeft | ShiftRightLogical | ShiftRightArithmetic => {
            let width = b.ins().iconst(ty, bits);
            let big = b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, y, width);
            match op {
                ShiftLeft => {
                    let s = b.ins().ishl(x, y);
                    let zero = b.ins().iconst(ty, 0);
                    b.ins().select(big, zero, s)
                }
                ShiftRightLogical => {
                    let x = if bits < ty.bits() as i64 {
                        b.ins().band_imm_u(x, (1i64 << bits) - 1)
                    } else {
                        x
                    };
                    let s = b.ins().ushr(x, y);
                    let zero = b.ins().iconst(ty, 0);
                    b.ins().select(big, zero, s)
                }
                _ => {
                    let last = b.ins().iconst(ty, bits - 1);
                    let amount = b.ins().select(big, last, y);
                    b.ins().sshr(x, amount)
                }
            }
        }
        Power => int_power(b, ty, signed, x, y),
        _ => return Err(unsupported(op, e)),
    })
}

/// `power` on integers, as the interpreter computes it: exponentiation by squaring with
/// wrap-around products (the caller wraps sub-byte results to their width); a negative
/// exponent of a signed type gives 1 for a base of 1, ±1 (by the exponent's parity) for -1
/// and 0 for any other base. Emits a loop over the exponent's bits and leaves the builder
/// after it.
fn int_power(b: &mut FunctionBuilder, ty: Type, signed: bool, x: Value, y: Value) -> Value {
    let zero = b.ins().iconst(ty, 0);
    let one = b.ins().iconst(ty, 1);
    let negative = if signed { Some(b.ins().icmp(IntCC::SignedLessThan, y, zero)) } else { None };
    let exp = match negative {
        Some(neg) => b.ins().select(neg, zero, y),
        None => y,
    };
    let head = b.create_block();
    let body = b.create_block();
    let exit = b.create_block();
    for _ in 0..3 {
        b.append_block_param(head, ty); // acc, base, exp
    }
    b.append_block_param(exit, ty);
    b.ins().jump(head, &[one.into(), x.into(), exp.into()]);
    b.switch_to_block(head);
    let (acc, base, exp) = {
        let p = b.block_params(head);
        (p[0], p[1], p[2])
    };
    b.ins().brif(exp, body, &[], exit, &[acc.into()]);
    b.switch_to_block(body);
    let odd = b.ins().band_imm_u(exp, 1);
    let times = b.ins().imul(acc, base);
    let acc = b.ins().select(odd, times, acc);
    let base = b.ins().imul(base, base);
    let exp = b.ins().ushr_imm_u(exp, 1);
    b.ins().jump(head, &[acc.into(), base.into(), exp.into()]);
    b.switch_to_block(exit);
    let r = b.block_params(exit)[0];
    let Some(neg) = negative else { return r };
    // Negative exponents: 1 → 1, -1 → 1 or -1 by parity, anything else → 0.
    let minus1 = b.ins().iconst(ty, -1);
    let is_one = b.ins().icmp(IntCC::Equal, x, one);
    let is_minus1 = b.ins().icmp(IntCC::Equal, x, minus1);
    let odd = b.ins().band_imm_u(y, 1);
    let sign = b.ins().select(odd, minus1, one);
    let special = b.ins().select(is_minus1, sign, zero);
    let special = b.ins().select(is_one, one, special);
    b.ins().select(neg, special, r)
}

/// `compare` of two values of element type `e`: an i8 0/1.
pub fn compare(
    b: &mut FunctionBuilder,
    dir: CmpDirection,
    kind: Option<CmpType>,
    e: ElemType,
    x: Value,
    y: Value,
) -> Result<Value, CgError> {
    let r = Repr::of(e)?;
    let total = kind == Some(CmpType::TotalOrder);
    if r.is_float() && !total {
        let cc = match dir {
            CmpDirection::Eq => FloatCC::Equal,
            CmpDirection::Ne => FloatCC::NotEqual,
            CmpDirection::Lt => FloatCC::LessThan,
            CmpDirection::Le => FloatCC::LessThanOrEqual,
            CmpDirection::Gt => FloatCC::GreaterThan,
            CmpDirection::Ge => FloatCC::GreaterThanOrEqual,
        };
        return Ok(b.ins().fcmp(cc, x, y));
    }
    let (x, y, signed) = if r.is_float() {
        // Total order: flip the magnitude bits of negative numbers, then compare signed.
        let ity = if r == Repr::F64 { types::I64 } else { types::I32 };
        let key = |b: &mut FunctionBuilder, v: Value| {
            let i = b.ins().bitcast(ity, MemFlagsData::new(), v);
            let s = b.ins().sshr_imm_u(i, (ity.bits() - 1) as i64);
            let s = b.ins().ushr_imm_u(s, 1);
            b.ins().bxor(i, s)
        };
        (key(b, x), key(b, y), true)
    } else {
        let signed = match kind {
            Some(CmpType::Signed) => true,
            Some(CmpType::Unsigned) => false,
            _ => e.class() == ElemClass::Signed,
        };
        (x, y, signed)
    };
    let cc = match (dir, signed) {
        (CmpDirection::Eq, _) => IntCC::Equal,
        (CmpDirection::Ne, _) => IntCC::NotEqual,
        (CmpDirection::Lt, true) => IntCC::SignedLessThan,
        (CmpDirection::Le, true) => IntCC::SignedLessThanOrEqual,
        (CmpDirection::Gt, true) => IntCC::SignedGreaterThan,
        (CmpDirection::Ge, true) => IntCC::SignedGreaterThanOrEqual,
        (CmpDirection::Lt, false) => IntCC::UnsignedLessThan,
        (CmpDirection::Le, false) => IntCC::UnsignedLessThanOrEqual,
        (CmpDirection::Gt, false) => IntCC::UnsignedGreaterThan,
        (CmpDirection::Ge, false) => IntCC::UnsignedGreaterThanOrEqual,
    };
    Ok(b.ins().icmp(cc, x, y))
}

/// `convert` from `from` to `to`.
pub fn convert(
    b: &mut FunctionBuilder,
    from: ElemType,
    to: ElemType,
    x: Value,
) -> Result<Value, CgError> {
    let (rf, rt) = (Repr::of(from)?, Repr::of(to)?);
    let fsigned = from.class() == ElemClass::Signed;
    Ok(match (rf, rt) {
        (Repr::F32, Repr::F32) if from != to && hlo_ir::narrow::is_narrow_float(to) => {
            super::ty::convert_narrow(b, to, x)
        }
        (a, b2)
            if a == b2
                && !(rt == Repr::F32
                    && matches!(to, ElemType::BF16 | ElemType::F16)
                    && from != to)
                && !(to.bits() < 8 && from != to) =>
        {
            x
        }
        (Repr::F32, Repr::F32) => round_to(b, to, x),
        (Repr::F32, Repr::F64) => b.ins().fpromote(types::F64, x),
        (Repr::F64, Repr::F32) => {
            if to == ElemType::F16 {
                // Rounded as the interpreter rounds it (`half::f16::from_f64`).
                return Ok(super::ty::convert_f64_to_f16(b, x));
            }
            let f = b.ins().fdemote(types::F32, x);
            // f64 → bf16 goes through f32 (double rounding, as XLA's CPU code does).
            if hlo_ir::narrow::is_narrow_float(to) {
                super::ty::convert_narrow(b, to, f)
            } else {
                round_to(b, to, f)
            }
        }
        (Repr::F32 | Repr::F64, Repr::Pred) => {
            let zero = fconst(b, rf.ty(), 0.0);
            b.ins().fcmp(FloatCC::NotEqual, x, zero)
        }
        (Repr::F32 | Repr::F64, Repr::Int { ty, signed }) => {
            // Saturating, NaN → 0 (Cranelift's `_sat` conversions do exactly that).
            // Narrow targets saturate at the narrow type's range: convert to i64 first, then
            // clamp.
            let wide = if signed {
                b.ins().fcvt_to_sint_sat(types::I64, x)
            } else {
                b.ins().fcvt_to_uint_sat(types::I64, x)
            };
            if ty == types::I64 {
                wide
            } else {
                let bits = (ty.bits() as i64).min(to.bits() as i64);
                let (lo, hi) = if signed {
                    (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1)
                } else {
                    (0, (1i64 << bits) - 1)
                };
                let hi = b.ins().iconst(types::I64, hi);
                // Unsigned: `wide` is already at least 0, and above 2^63 (+inf) it is
                // negative as a signed number: only the upper bound, compared unsigned.
                let c = if signed {
                    let lo = b.ins().iconst(types::I64, lo);
                    let c = b.ins().smax(wide, lo);
                    b.ins().smin(c, hi)
                } else {
                    b.ins().umin(wide, hi)
                };
                b.ins().ireduce(ty, c)
            }
        }
        (Repr::Int { .. } | Repr::Pred, Repr::F32 | Repr::F64) => {
            let f32ty = if rt == Repr::F64 { types::F64 } else { types::F32 };
            let v = if rf == Repr::Pred || !fsigned {
                b.ins().fcvt_from_uint(f32ty, x)
            } else {
                b.ins().fcvt_from_sint(f32ty, x)
            };
            if rt == Repr::F32 && hlo_ir::narrow::is_narrow_float(to) {
                super::ty::convert_narrow(b, to, v)
            } else if rt == Repr::F32 {
                round_to(b, to, v)
            } else {
                v
            }
        }
        (Repr::Int { .. } | Repr::Pred, Repr::Int { ty: tt, .. }) => {
            let tf = rf.ty();
            let fs = rf != Repr::Pred && fsigned;
            let v = if tt.bits() > tf.bits() {
                if fs { b.ins().sextend(tt, x) } else { b.ins().uextend(tt, x) }
            } else if tt.bits() < tf.bits() {
                b.ins().ireduce(tt, x)
            } else {
                x
            };
            wrap_int(b, to, v)
        }
        (Repr::Int { ty, .. }, Repr::Pred) => {
            let zero = b.ins().iconst(ty, 0);
            b.ins().icmp(IntCC::NotEqual, x, zero)
        }
        (Repr::Pred, Repr::Pred) => x,
        _ => {
            return Err(CgError::unsupported(crate::Unsupported::Convert { from, to }));
        }
    })
}

/// `bitcast-convert` between element types of the same width.
pub fn bitcast(
    b: &mut FunctionBuilder,
    from: ElemType,
    to: ElemType,
    x: Value,
) -> Result<Value, CgError> {
    if from.bits() != to.bits() {
        return Err(CgError::unsupported(crate::Unsupported::BitcastConvertWidth { from, to }));
    }
    let (rf, rt) = (Repr::of(from)?, Repr::of(to)?);
    // Go through the storage bits.
    let bits = match from {
        ElemType::BF16 => {
            let i = b.ins().bitcast(types::I32, MemFlagsData::new(), x);
            let i = b.ins().ushr_imm_u(i, 16);
            b.ins().ireduce(types::I16, i)
        }
        // Exact: the value is an f16.
        ElemType::F16 => super::ty::f32_to_f16_bits(b, x),
        e if hlo_ir::narrow::is_narrow_float(e) => super::ty::f32_to_narrow_bits(b, e, x),
        _ if rf.is_float() => {
            let ity = if rf == Repr::F64 { types::I64 } else { types::I32 };
            b.ins().bitcast(ity, MemFlagsData::new(), x)
        }
        _ => x,
    };
    Ok(match to {
        ElemType::BF16 => super::ty::bf16_bits_to_f32(b, bits),
        ElemType::F16 => super::ty::f16_bits_to_f32(b, bits),
        e if hlo_ir::narrow::is_narrow_float(e) => super::ty::narrow_bits_to_f32(b, e, bits),
        _ if rt.is_float() => b.ins().bitcast(rt.ty(), MemFlagsData::new(), bits),
        _ => wrap_int(b, to, bits),
    })
}

/// `reduce-precision` to `exp_bits`/`man_bits` (round to nearest even in the mantissa,
/// overflow to infinity, underflow to signed zero, NaN kept NaN), as the interpreter does.
pub fn reduce_precision(
    b: &mut FunctionBuilder,
    e: ElemType,
    x: Value,
    exp_bits: i64,
    man_bits: i64,
) -> Result<Value, CgError> {
    let r = Repr::of(e)?;
    let (ity, width, exp_w) = match r {
        Repr::F32 => (types::I32, 32u32, 8u32),
        Repr::F64 => (types::I64, 64, 11),
        _ => return Err(CgError::new(format!("reduce-precision is not defined on {e}"))),
    };
    let man_w = width - exp_w - 1;
    let sign_mask: i64 = (1u64 << (width - 1)) as i64;
    let exp_mask: i64 = (((1u64 << exp_w) - 1) << man_w) as i64;
    let bits = b.ins().bitcast(ity, MemFlagsData::new(), x);
    let mut v = bits;
    if (man_bits as u32) < man_w {
        let shift = man_w - man_bits as u32;
        let last_bit: i64 = 1i64 << shift;
        let base_bias = (last_bit >> 1) - 1;
        let x_last = b.ins().band_imm_u(v, last_bit);
        let x_last = b.ins().ushr_imm_u(x_last, shift as i64);
        let t = b.ins().iadd(v, x_last);
        let t = b.ins().iadd_imm_s(t, base_bias);
        v = b.ins().band_imm_u(t, !(last_bit - 1));
    }
    if (exp_bits as u32) < exp_w {
        let bias = (1i64 << (exp_w - 1)) - 1;
        let reduced_bias = (1i64 << (exp_bits - 1)) - 1;
        let max_exp = (bias + reduced_bias) << man_w;
        let min_exp = (bias - reduced_bias) << man_w;
        let ex = b.ins().band_imm_u(v, exp_mask);
        let sign = b.ins().band_imm_u(v, sign_mask);
        let inf = b.ins().bor_imm_u(sign, exp_mask);
        let over = b.ins().icmp_imm_u(IntCC::UnsignedGreaterThan, ex, max_exp);
        let under = b.ins().icmp_imm_u(IntCC::UnsignedLessThanOrEqual, ex, min_exp);
        let t = b.ins().select(under, sign, v);
        v = b.ins().select(over, inf, t);
    }
    let is_nan = b.ins().fcmp(FloatCC::Unordered, x, x);
    let nan_bits = if man_bits > 0 {
        bits
    } else {
        let s = b.ins().band_imm_u(bits, sign_mask);
        b.ins().bor_imm_u(s, exp_mask)
    };
    let v = b.ins().select(is_nan, nan_bits, v);
    let f = b.ins().bitcast(r.ty(), MemFlagsData::new(), v);
    Ok(if r == Repr::F32 { round_to(b, e, f) } else { f })
}
