//! The reducer of an all-reduce or reduce-scatter applied elementwise to two host
//! tensors' bytes: the arithmetic of the reference interpreter (XLA's), one rounding to
//! the element type per step.
//!
//! bf16, f16 and the narrow floats compute in f32 and round to the element type after
//! every step (narrow floats through f16, as XLA does, see [`hlo_ir::narrow`]); integers
//! wrap; `maximum`/`minimum` return NaN when either operand is NaN and order -0 below +0
//! (IEEE 754-2019); on pred, add/or/maximum are `or` and multiply/and/minimum are `and`.

use half::{bf16, f16};
use hlo_ir::types::ElemClass;
use hlo_ir::{Computation, ElemType, Op, Opcode};

use crate::FabricError;

/// The opcode of a reducer computation of the form `ROOT op(p0, p1)` over two scalar
/// parameters of the result's type: the elementwise op a collective's `to_apply` reduces
/// with (what [`crate::execute`] takes as its reducer), and what the SPMD partitioner asks
/// before it sums partial results with a computation's own reducer.
pub fn binary_reducer(comp: &Computation) -> Option<Opcode> {
    let root = comp.root()?;
    let instr = comp.instr(root);
    let Op::Plain(op) = instr.op else { return None };
    if !matches!(
        op,
        Opcode::Add
            | Opcode::Multiply
            | Opcode::Maximum
            | Opcode::Minimum
            | Opcode::And
            | Opcode::Or
            | Opcode::Xor
    ) {
        return None;
    }
    let params = comp.params();
    if params.len() != 2 || !matches!(instr.shape.as_array(), Some(a) if a.dims.is_empty()) {
        return None;
    }
    let numbers: Vec<u32> = comp
        .operands(root)
        .iter()
        .map(|&o| match comp.instr(o).op {
            Op::Parameter { number, .. } if comp.instr(o).shape == instr.shape => number,
            _ => u32::MAX,
        })
        .collect();
    // Every opcode above is commutative, so (p1, p0) is the same reducer.
    (numbers == [0, 1] || numbers == [1, 0]).then_some(op)
}

fn unsupported(op: Opcode, e: ElemType) -> FabricError {
    FabricError::Reducer(format!("{} on {e} is not a reducer the fabric runs", op.name()))
}

macro_rules! float_op {
    ($t:ty, $op:expr) => {{
        let f: fn($t, $t) -> $t = match $op {
            Opcode::Add => |x, y| x + y,
            Opcode::Multiply => |x, y| x * y,
            Opcode::Maximum => |x: $t, y: $t| {
                if x.is_nan() || y.is_nan() {
                    <$t>::NAN
                } else if x > y || (x == y && y.is_sign_negative()) {
                    x
                } else {
                    y
                }
            },
            Opcode::Minimum => |x: $t, y: $t| {
                if x.is_nan() || y.is_nan() {
                    <$t>::NAN
                } else if x < y || (x == y && x.is_sign_negative()) {
                    x
                } else {
                    y
                }
            },
            _ => return None,
        };
        Some(f)
    }};
}

fn f32_op(op: Opcode) -> Option<fn(f32, f32) -> f32> {
    float_op!(f32, op)
}

fn f64_op(op: Opcode) -> Option<fn(f64, f64) -> f64> {
    float_op!(f64, op)
}

/// `acc[i] = acc[i] op x[i]` for every element of type `e` (both the same length).
pub(crate) fn fold_into(
    op: Opcode,
    e: ElemType,
    acc: &mut [u8],
    x: &[u8],
) -> Result<(), FabricError> {
    use ElemType::*;
    debug_assert_eq!(acc.len(), x.len());
    macro_rules! lanes {
        ($n:expr, $get:expr, $put:expr, $f:expr) => {{
            let f = $f;
            for (a, b) in acc.chunks_exact_mut($n).zip(x.chunks_exact($n)) {
                let r = f($get(&*a), $get(b));
                a.copy_from_slice(&$put(r));
            }
        }};
    }
    // (re, im) pairs of `$t`, `$n` bytes a part, computed in `$t` as num-complex does.
    macro_rules! complex {
        ($t:ty, $n:expr) => {{
            let mul = match op {
                Opcode::Add => false,
                Opcode::Multiply => true,
                _ => return Err(unsupported(op, e)),
            };
            let part = |b: &[u8], k: usize| {
                <$t>::from_le_bytes(b[k * $n..(k + 1) * $n].try_into().unwrap())
            };
            for (a, b) in acc.chunks_exact_mut(2 * $n).zip(x.chunks_exact(2 * $n)) {
                let (ar, ai, br, bi) = (part(a, 0), part(a, 1), part(b, 0), part(b, 1));
                let (re, im) =
                    if mul { (ar * br - ai * bi, ar * bi + ai * br) } else { (ar + br, ai + bi) };
                a[..$n].copy_from_slice(&re.to_le_bytes());
                a[$n..].copy_from_slice(&im.to_le_bytes());
            }
        }};
    }
    match e {
        F32 => {
            let f = f32_op(op).ok_or_else(|| unsupported(op, e))?;
            lanes!(4, |b: &[u8]| f32::from_le_bytes(b.try_into().unwrap()), f32::to_le_bytes, f)
        }
        F64 => {
            let f = f64_op(op).ok_or_else(|| unsupported(op, e))?;
            lanes!(8, |b: &[u8]| f64::from_le_bytes(b.try_into().unwrap()), f64::to_le_bytes, f)
        }
        BF16 => {
            let f = f32_op(op).ok_or_else(|| unsupported(op, e))?;
            let get = |b: &[u8]| bf16::from_le_bytes([b[0], b[1]]).to_f32();
            lanes!(2, get, |r: f32| bf16::from_f32(r).to_le_bytes(), f)
        }
        F16 => {
            let f = f32_op(op).ok_or_else(|| unsupported(op, e))?;
            let get = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
            lanes!(2, get, |r: f32| f16::from_f32(r).to_le_bytes(), f)
        }
        _ if hlo_ir::narrow::is_narrow_float(e) => {
            let f = f32_op(op).ok_or_else(|| unsupported(op, e))?;
            let get = |b: &[u8]| hlo_ir::narrow::to_f32(e, b[0]).unwrap_or(f32::NAN);
            let put =
                |r: f32| [hlo_ir::narrow::from_f32(e, hlo_ir::narrow::round_op(e, r)).unwrap_or(0)];
            lanes!(1, get, put, f)
        }
        C64 => complex!(f32, 4),
        C128 => complex!(f64, 8),
        Pred => {
            let f: fn(u8, u8) -> u8 = match op {
                Opcode::And | Opcode::Multiply | Opcode::Minimum => |p, q| p & q,
                Opcode::Or | Opcode::Add | Opcode::Maximum => |p, q| p | q,
                Opcode::Xor => |p, q| p ^ q,
                _ => return Err(unsupported(op, e)),
            };
            lanes!(1, |b: &[u8]| u8::from(b[0] != 0), |r: u8| [r], f)
        }
        _ if e.is_integer() => {
            let n =
                hlo_ir::tensor::elem_size(e).map_err(|x| FabricError::Reducer(x.to_string()))?;
            let signed = e.class() == ElemClass::Signed;
            let f: fn(i64, i64) -> i64 = match op {
                Opcode::Add => |x, y| x.wrapping_add(y),
                Opcode::Multiply => |x, y| x.wrapping_mul(y),
                Opcode::And => |x, y| x & y,
                Opcode::Or => |x, y| x | y,
                Opcode::Xor => |x, y| x ^ y,
                Opcode::Maximum if signed => |x, y| x.max(y),
                Opcode::Minimum if signed => |x, y| x.min(y),
                Opcode::Maximum => |x, y| (x as u64).max(y as u64) as i64,
                Opcode::Minimum => |x, y| (x as u64).min(y as u64) as i64,
                _ => return Err(unsupported(op, e)),
            };
            let get = |b: &[u8]| {
                let mut w = [0u8; 8];
                w[..n].copy_from_slice(b);
                hlo_ir::literal::wrap_int(e, i64::from_le_bytes(w))
            };
            for (a, b) in acc.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
                let r = hlo_ir::literal::wrap_int(e, f(get(a), get(b)));
                a.copy_from_slice(&r.to_le_bytes()[..n]);
            }
        }
        _ => return Err(unsupported(op, e)),
    }
    Ok(())
}
