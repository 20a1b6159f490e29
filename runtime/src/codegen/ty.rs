//! Element types as Cranelift sees them: the storage type in memory and the type values are
//! computed in (bf16 and f16 are stored as 16 bits and computed in f32, rounded to nearest
//! even after every operation and on every store, as XLA's CPU backend does; `pred` is one
//! byte holding 0 or 1).
//!
//! f16 conversions are integer CLIF ([`f32_to_f16_bits`], [`f16_bits_to_f32`]): exact, with
//! subnormals, infinities and overflow to infinity, NaN kept NaN with its payload's high
//! bits (quiet bit set), bit for bit what `half::f16` computes. A `convert` from f64 to f16
//! calls `half::f16::from_f64` by address, as the interpreter converts. f16 values have no
//! f32x4 form ([`super::vector`]): f16 results are computed by the scalar loop.
//!
//! The fp8 types and `f4e2m1fn` are one byte holding the bit pattern, computed in f32: a load
//! looks the value up in a 256-entry table per type, a store and a `convert` to them round
//! once (a call of [`hlo_ir::narrow::from_f32`]), and the result of an operation rounds
//! through f16 as XLA's CPU backend does ([`hlo_ir::narrow::round_op`]); the calls go to
//! Rust functions by address. Sub-byte integers (`s4`, `u2`, ...) are one byte holding the
//! value sign- or zero-extended, computed in an i8 and wrapped to their width after every
//! operation ([`wrap_int`]).

use std::sync::LazyLock;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{AbiParam, InstBuilder, MemFlagsData, Signature, Type, Value, types};
use cranelift_frontend::FunctionBuilder;
use hlo_ir::ElemType;
use hlo_ir::types::ElemClass;

use super::CgError;

/// How values of an element type are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr {
    /// f32, or bf16/f16/fp8/f4e2m1fn widened to f32.
    F32,
    F64,
    /// Integers at their own width; `signed` picks the signed or unsigned operations.
    Int {
        ty: Type,
        signed: bool,
    },
    /// `pred`: an i8 holding 0 or 1.
    Pred,
}

impl Repr {
    pub fn of(e: ElemType) -> Result<Repr, CgError> {
        Ok(match e {
            ElemType::F32 | ElemType::BF16 | ElemType::F16 => Repr::F32,
            e if hlo_ir::narrow::is_narrow_float(e) => Repr::F32,
            ElemType::S4 | ElemType::S2 | ElemType::S1 => Repr::Int { ty: types::I8, signed: true },
            ElemType::U4 | ElemType::U2 | ElemType::U1 => {
                Repr::Int { ty: types::I8, signed: false }
            }
            ElemType::F64 => Repr::F64,
            ElemType::Pred => Repr::Pred,
            ElemType::S8 | ElemType::U8 => {
                Repr::Int { ty: types::I8, signed: e.class() == ElemClass::Signed }
            }
            ElemType::S16 | ElemType::U16 => {
                Repr::Int { ty: types::I16, signed: e.class() == ElemClass::Signed }
            }
            ElemType::S32 | ElemType::U32 => {
                Repr::Int { ty: types::I32, signed: e.class() == ElemClass::Signed }
            }
            ElemType::S64 | ElemType::U64 => {
                Repr::Int { ty: types::I64, signed: e.class() == ElemClass::Signed }
            }
            other => {
                return Err(CgError::unsupported(crate::Unsupported::ElemType(other)));
            }
        })
    }
    pub fn ty(self) -> Type {
        match self {
            Repr::F32 => types::F32,
            Repr::F64 => types::F64,
            Repr::Int { ty, .. } => ty,
            Repr::Pred => types::I8,
        }
    }
    pub fn is_float(self) -> bool {
        matches!(self, Repr::F32 | Repr::F64)
    }
}

/// Bytes per element in memory.
pub fn size_of(e: ElemType) -> i64 {
    (e.bits() as i64 + 7) / 8
}

pub fn flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// The flags of a load from a buffer nothing writes while the kernel runs
/// ([`super::elemental::Leaf::Input`]): pure for Cranelift's optimizer, which may then
/// move it (and what is computed from it) out of the loops that do not vary its address.
pub fn input_flags() -> MemFlagsData {
    flags().with_readonly().with_can_move()
}

/// Loads one element of type `e` at `addr` as its compute representation.
pub fn load(b: &mut FunctionBuilder, e: ElemType, addr: Value) -> Result<Value, CgError> {
    load_with(b, e, addr, flags())
}

/// [`load`] with the memory flags `f`.
pub fn load_with(
    b: &mut FunctionBuilder,
    e: ElemType,
    addr: Value,
    f: MemFlagsData,
) -> Result<Value, CgError> {
    let r = Repr::of(e)?;
    Ok(match e {
        ElemType::BF16 => {
            let h = b.ins().load(types::I16, f, addr, 0);
            bf16_bits_to_f32(b, h)
        }
        ElemType::F16 => {
            let h = b.ins().load(types::I16, f, addr, 0);
            f16_bits_to_f32(b, h)
        }
        e if hlo_ir::narrow::is_narrow_float(e) => {
            let bits = b.ins().uload8(types::I64, f, addr, 0);
            narrow_bits_to_f32(b, e, bits)
        }
        _ => b.ins().load(r.ty(), f, addr, 0),
    })
}

/// The f32 value of narrow float `e`'s bit pattern `bits` (an integer of any width whose
/// low byte is the pattern), by table lookup.
pub fn narrow_bits_to_f32(b: &mut FunctionBuilder, e: ElemType, bits: Value) -> Value {
    let k = hlo_ir::narrow::kind(e).expect("narrow float");
    let ty = b.func.dfg.value_type(bits);
    let bits = if ty == types::I64 { bits } else { b.ins().uextend(types::I64, bits) };
    let bits = b.ins().band_imm_u(bits, 0xff);
    let off = b.ins().ishl_imm_u(bits, 2);
    let table = b.ins().iconst(types::I64, NARROW_TABLES[k].as_ptr() as i64);
    let at = b.ins().iadd(table, off);
    b.ins().load(types::F32, flags(), at, 0)
}

/// The bit pattern (an i8) of f32 value `x` converted to narrow float `e` (rounded once).
pub fn f32_to_narrow_bits(b: &mut FunctionBuilder, e: ElemType, x: Value) -> Value {
    let bits = call_narrow(b, hlo_narrow_from_f32 as *const u8, e, x, types::I32);
    b.ins().ireduce(types::I8, bits)
}

/// Every narrow float type's 256 values (f4e2m1fn: the low four bits decide), indexed by
/// [`hlo_ir::narrow::kind`]. Static: kernels embed the addresses.
static NARROW_TABLES: LazyLock<Vec<[f32; 256]>> = LazyLock::new(|| {
    hlo_ir::narrow::TYPES
        .iter()
        .map(|&e| {
            std::array::from_fn(|i| hlo_ir::narrow::to_f32(e, i as u8).expect("narrow float"))
        })
        .collect()
});

extern "C" fn hlo_narrow_from_f32(x: f32, kind: u32) -> u32 {
    let e = hlo_ir::narrow::TYPES[kind as usize];
    u32::from(hlo_ir::narrow::from_f32(e, x).expect("narrow float"))
}

extern "C" fn hlo_narrow_convert(x: f32, kind: u32) -> f32 {
    hlo_ir::narrow::convert_f32(hlo_ir::narrow::TYPES[kind as usize], x)
}

extern "C" fn hlo_narrow_round_op(x: f32, kind: u32) -> f32 {
    hlo_ir::narrow::round_op(hlo_ir::narrow::TYPES[kind as usize], x)
}

/// Calls `f(x: f32, kind: u32) -> ret` by address (a Rust `extern "C"` function).
fn call_narrow(b: &mut FunctionBuilder, f: *const u8, e: ElemType, x: Value, ret: Type) -> Value {
    let k = hlo_ir::narrow::kind(e).expect("narrow float");
    let mut sig = Signature::new(b.func.signature.call_conv);
    sig.params.push(AbiParam::new(types::F32));
    sig.params.push(AbiParam::new(types::I32));
    sig.returns.push(AbiParam::new(ret));
    let sigref = b.import_signature(sig);
    let fp = b.ins().iconst(types::I64, f as i64);
    let kv = b.ins().iconst(types::I32, k as i64);
    let call = b.ins().call_indirect(sigref, fp, &[x, kv]);
    b.inst_results(call)[0]
}

/// `convert` of an f32 value to narrow float `e`: rounded once, as an f32 value.
pub fn convert_narrow(b: &mut FunctionBuilder, e: ElemType, x: Value) -> Value {
    call_narrow(b, hlo_narrow_convert as *const u8, e, x, types::F32)
}

/// A sub-byte integer result (computed in an i8) wrapped to its width, sign- or
/// zero-extended; other types unchanged.
pub fn wrap_int(b: &mut FunctionBuilder, e: ElemType, v: Value) -> Value {
    let bits = e.bits() as i64;
    if bits >= 8 || !e.is_integer() {
        return v;
    }
    if e.class() == ElemClass::Signed {
        let s = b.ins().ishl_imm_u(v, 8 - bits);
        b.ins().sshr_imm_u(s, 8 - bits)
    } else {
        b.ins().band_imm_u(v, (1i64 << bits) - 1)
    }
}

/// Stores a compute-representation value as one element of type `e` at `addr`.
pub fn store(b: &mut FunctionBuilder, e: ElemType, v: Value, addr: Value) -> Result<(), CgError> {
    match e {
        ElemType::BF16 => {
            let h = f32_to_bf16_bits(b, v);
            b.ins().store(flags(), h, addr, 0);
        }
        ElemType::F16 => {
            let h = f32_to_f16_bits(b, v);
            b.ins().store(flags(), h, addr, 0);
        }
        e if hlo_ir::narrow::is_narrow_float(e) => {
            let bits = call_narrow(b, hlo_narrow_from_f32 as *const u8, e, v, types::I32);
            b.ins().istore8(flags(), bits, addr, 0);
        }
        _ => {
            b.ins().store(flags(), v, addr, 0);
        }
    }
    Ok(())
}

/// An i16 holding bf16 bits → the f32 it denotes.
pub fn bf16_bits_to_f32(b: &mut FunctionBuilder, h: Value) -> Value {
    let w = b.ins().uextend(types::I32, h);
    let w = b.ins().ishl_imm_u(w, 16);
    b.ins().bitcast(types::F32, MemFlagsData::new(), w)
}

/// f32 → bf16 bits, rounded to nearest even; NaN stays a quiet NaN of the same sign.
pub fn f32_to_bf16_bits(b: &mut FunctionBuilder, v: Value) -> Value {
    let bits = b.ins().bitcast(types::I32, MemFlagsData::new(), v);
    let lsb = b.ins().ushr_imm_u(bits, 16);
    let lsb = b.ins().band_imm_u(lsb, 1);
    let bias = b.ins().iadd_imm_s(lsb, 0x7fff);
    let rounded = b.ins().iadd(bits, bias);
    let rounded = b.ins().ushr_imm_u(rounded, 16);
    let quiet = b.ins().ushr_imm_u(bits, 16);
    let quiet = b.ins().bor_imm_u(quiet, 0x40);
    let is_nan = b.ins().fcmp(cranelift_codegen::ir::condcodes::FloatCC::Unordered, v, v);
    let r = b.ins().select(is_nan, quiet, rounded);
    b.ins().ireduce(types::I16, r)
}

/// An i16 holding f16 bits → the f32 it denotes (exact; a NaN gets its quiet bit set, as
/// `half::f16::to_f32` does).
pub fn f16_bits_to_f32(b: &mut FunctionBuilder, h: Value) -> Value {
    let w = b.ins().uextend(types::I32, h);
    let sign = b.ins().band_imm_u(w, 0x8000);
    let sign = b.ins().ishl_imm_u(sign, 16);
    let exp = b.ins().band_imm_u(w, 0x7c00);
    let man = b.ins().band_imm_u(w, 0x3ff);
    let man13 = b.ins().ishl_imm_u(man, 13);
    // Normal numbers: rebias the exponent (15 → 127).
    let mag = b.ins().band_imm_u(w, 0x7fff);
    let mag = b.ins().ishl_imm_u(mag, 13);
    let normal = b.ins().iadd_imm_s(mag, 112 << 23);
    // Infinities and NaN (quieted).
    let nan = b.ins().icmp_imm_u(IntCC::NotEqual, man, 0);
    let quiet = b.ins().iconst(types::I32, 0x40_0000);
    let zero = b.ins().iconst(types::I32, 0);
    let q = b.ins().select(nan, quiet, zero);
    let special = b.ins().bor_imm_u(man13, 0x7f80_0000);
    let special = b.ins().bor(special, q);
    // Subnormals and zero: man · 2^-24, exact in f32 (and a normal f32 unless zero).
    let f = b.ins().fcvt_from_uint(types::F32, man);
    let scale = b.ins().f32const(f32::from_bits(0x3380_0000)); // 2^-24
    let f = b.ins().fmul(f, scale);
    let sub = b.ins().bitcast(types::I32, MemFlagsData::new(), f);
    let is_special = b.ins().icmp_imm_u(IntCC::Equal, exp, 0x7c00);
    let is_sub = b.ins().icmp_imm_u(IntCC::Equal, exp, 0);
    let r = b.ins().select(is_sub, sub, normal);
    let r = b.ins().select(is_special, special, r);
    let r = b.ins().bor(r, sign);
    b.ins().bitcast(types::F32, MemFlagsData::new(), r)
}

/// f32 → f16 bits (an i16), rounded to nearest even: overflow gives infinity, results below
/// the smallest normal round to a subnormal or zero, NaN stays NaN with the high bits of
/// its payload and the quiet bit set (bit for bit `half::f16::from_f32`).
pub fn f32_to_f16_bits(b: &mut FunctionBuilder, v: Value) -> Value {
    let x = b.ins().bitcast(types::I32, MemFlagsData::new(), v);
    let sign = b.ins().ushr_imm_u(x, 16);
    let sign = b.ins().band_imm_u(sign, 0x8000);
    let abs = b.ins().band_imm_u(x, 0x7fff_ffff);
    let exp = b.ins().ushr_imm_u(abs, 23);
    let man = b.ins().band_imm_u(abs, 0x7f_ffff);
    let zero = b.ins().iconst(types::I32, 0);
    let one = b.ins().iconst(types::I32, 1);
    // Infinities and NaN.
    let nan = b.ins().icmp_imm_u(IntCC::NotEqual, man, 0);
    let quiet = b.ins().iconst(types::I32, 0x200);
    let q = b.ins().select(nan, quiet, zero);
    let payload = b.ins().ushr_imm_u(man, 13);
    let special = b.ins().bor_imm_u(payload, 0x7c00);
    let special = b.ins().bor(special, q);
    let inf = b.ins().iconst(types::I32, 0x7c00);
    // Normal results: rebias (127 → 15), keep ten mantissa bits, round to nearest even on
    // bit 12 (a carry may reach the exponent, and infinity).
    let t = b.ins().ushr_imm_u(abs, 13);
    let t = b.ins().iadd_imm_s(t, -(112 << 10));
    let round = b.ins().ushr_imm_u(abs, 12);
    let round = b.ins().band_imm_u(round, 1);
    let sticky = b.ins().band_imm_u(abs, 0x2fff); // the kept lsb and the bits below bit 12
    let sticky = b.ins().icmp_imm_u(IntCC::NotEqual, sticky, 0);
    let up = b.ins().select(sticky, round, zero);
    let normal = b.ins().iadd(t, up);
    // Subnormal results: the mantissa with its implicit bit, shifted right by 126 - exp
    // (14 for the largest; 25 and more give zero), rounded to nearest even.
    let m = b.ins().bor_imm_u(man, 0x80_0000);
    let k = b.ins().iconst(types::I32, 126);
    let s = b.ins().isub(k, exp);
    let cap = b.ins().iconst(types::I32, 25);
    let s = b.ins().umin(s, cap);
    let hm = b.ins().ushr(m, s);
    let s1 = b.ins().iadd_imm_s(s, -1);
    let rb = b.ins().ishl(one, s1);
    let has_rb = b.ins().band(m, rb);
    let has_rb = b.ins().icmp_imm_u(IntCC::NotEqual, has_rb, 0);
    let mask = b.ins().ishl_imm_u(rb, 1);
    let mask = b.ins().iadd(mask, rb);
    let mask = b.ins().iadd_imm_s(mask, -1); // the kept lsb and the bits below the round bit
    let st = b.ins().band(m, mask);
    let st = b.ins().icmp_imm_u(IntCC::NotEqual, st, 0);
    let up = b.ins().band(has_rb, st);
    let up = b.ins().uextend(types::I32, up);
    let sub = b.ins().iadd(hm, up);
    let is_normal = b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, exp, 113);
    let r = b.ins().select(is_normal, normal, sub);
    let is_big = b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, exp, 143);
    let r = b.ins().select(is_big, inf, r);
    let is_special = b.ins().icmp_imm_u(IntCC::Equal, exp, 0xff);
    let r = b.ins().select(is_special, special, r);
    let r = b.ins().bor(r, sign);
    b.ins().ireduce(types::I16, r)
}

extern "C" fn hlo_f16_from_f64(x: f64) -> f32 {
    half::f16::from_f64(x).to_f32()
}

/// `convert` of an f64 value to f16, as an f32 value: `half::f16::from_f64`, the
/// interpreter's conversion, called by address.
pub fn convert_f64_to_f16(b: &mut FunctionBuilder, x: Value) -> Value {
    let mut sig = Signature::new(b.func.signature.call_conv);
    sig.params.push(AbiParam::new(types::F64));
    sig.returns.push(AbiParam::new(types::F32));
    let sigref = b.import_signature(sig);
    let fp = b.ins().iconst(types::I64, hlo_f16_from_f64 as *const u8 as i64);
    let call = b.ins().call_indirect(sigref, fp, &[x]);
    b.inst_results(call)[0]
}

/// Rounds an f32 compute value to the precision of `e` (bf16, f16: to nearest even; the
/// narrow floats as XLA rounds their operations; others unchanged).
pub fn round_to(b: &mut FunctionBuilder, e: ElemType, v: Value) -> Value {
    if e == ElemType::BF16 {
        let h = f32_to_bf16_bits(b, v);
        bf16_bits_to_f32(b, h)
    } else if e == ElemType::F16 {
        let h = f32_to_f16_bits(b, v);
        f16_bits_to_f32(b, h)
    } else if hlo_ir::narrow::is_narrow_float(e) {
        call_narrow(b, hlo_narrow_round_op as *const u8, e, v, types::F32)
    } else {
        v
    }
}
