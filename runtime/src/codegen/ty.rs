//! Element types as Cranelift sees them: the storage type in memory and the type values are
//! computed in (bf16 is stored as 16 bits and computed in f32, rounded to nearest even on
//! every store, as XLA's CPU backend does; `pred` is one byte holding 0 or 1).

use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;
use hlo_ir::types::ElemClass;
use hlo_ir::ElemType;

use super::CgError;

/// How values of an element type are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr {
    /// f32, or bf16 widened to f32.
    F32,
    F64,
    /// Integers at their own width; `signed` picks the signed or unsigned operations.
    Int { ty: Type, signed: bool },
    /// `pred`: an i8 holding 0 or 1.
    Pred,
}

impl Repr {
    pub fn of(e: ElemType) -> Result<Repr, CgError> {
        Ok(match e {
            ElemType::F32 | ElemType::BF16 => Repr::F32,
            ElemType::F64 => Repr::F64,
            ElemType::Pred => Repr::Pred,
            ElemType::S8 | ElemType::U8 => Repr::Int { ty: types::I8, signed: e.class() == ElemClass::Signed },
            ElemType::S16 | ElemType::U16 => Repr::Int { ty: types::I16, signed: e.class() == ElemClass::Signed },
            ElemType::S32 | ElemType::U32 => Repr::Int { ty: types::I32, signed: e.class() == ElemClass::Signed },
            ElemType::S64 | ElemType::U64 => Repr::Int { ty: types::I64, signed: e.class() == ElemClass::Signed },
            other => return Err(CgError::unsupported(format!("element type {other} is not supported by the JIT"))),
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
        _ => b.ins().load(r.ty(), flags(), addr, 0),
    })
}

/// Stores a compute-representation value as one element of type `e` at `addr`.
pub fn store(b: &mut FunctionBuilder, e: ElemType, v: Value, addr: Value) -> Result<(), CgError> {
    match e {
        ElemType::BF16 => {
            let h = f32_to_bf16_bits(b, v);
            b.ins().store(flags(), h, addr, 0);
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
    } else {
        v
    }
}
