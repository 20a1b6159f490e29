//! Element types as Cranelift sees them: the storage type in memory and the type values are
//! computed in (bf16 is stored as 16 bits and computed in f32, rounded to nearest even on
//! every store, as XLA's CPU backend does; `pred` is one byte holding 0 or 1).
//!
//! The fp8 types and `f4e2m1fn` are one byte holding the bit pattern, computed in f32: a load
//! looks the value up in a 256-entry table per type, a store and a `convert` to them round
//! once (a call of [`hlo_ir::narrow::from_f32`]), and the result of an operation rounds
//! through f16 as XLA's CPU backend does ([`hlo_ir::narrow::round_op`]); the calls go to
//! Rust functions by address. Sub-byte integers (`s4`, `u2`, ...) are one byte holding the
//! value sign- or zero-extended, computed in an i8 and wrapped to their width after every
//! operation ([`wrap_int`]).

use std::sync::LazyLock;

use cranelift_codegen::ir::{AbiParam, InstBuilder, MemFlagsData, Signature, Type, Value, types};
use cranelift_frontend::FunctionBuilder;
use hlo_ir::ElemType;
use hlo_ir::types::ElemClass;

use super::CgError;

/// How values of an element type are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr {
    /// f32, or bf16 widened to f32.
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
            ElemType::F32 | ElemType::BF16 => Repr::F32,
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
                return Err(CgError::unsupported(format!(
                    "element type {other} is not supported by the JIT"
                )));
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

/// Loads one element of type `e` at `addr` as its compute representation.
pub fn load(b: &mut FunctionBuilder, e: ElemType, addr: Value) -> Result<Value, CgError> {
    let r = Repr::of(e)?;
    Ok(match e {
        ElemType::BF16 => {
            let h = b.ins().load(types::I16, flags(), addr, 0);
            bf16_bits_to_f32(b, h)
        }
        e if hlo_ir::narrow::is_narrow_float(e) => {
            let bits = b.ins().uload8(types::I64, flags(), addr, 0);
            narrow_bits_to_f32(b, e, bits)
        }
        _ => b.ins().load(r.ty(), flags(), addr, 0),
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

/// Rounds an f32 compute value to the precision of `e` (bf16: to nearest even; others
/// unchanged).
pub fn round_to(b: &mut FunctionBuilder, e: ElemType, v: Value) -> Value {
    if e == ElemType::BF16 {
        let h = f32_to_bf16_bits(b, v);
        bf16_bits_to_f32(b, h)
    } else if hlo_ir::narrow::is_narrow_float(e) {
        call_narrow(b, hlo_narrow_round_op as *const u8, e, v, types::F32)
    } else {
        v
    }
}
