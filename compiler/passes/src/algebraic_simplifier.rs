//! `algebraic-simplifier`: local rewrites that remove work without changing a single bit
//! of any result (the reference interpreter is the oracle: outputs are bit-identical
//! before and after). A subset of XLA's `AlgebraicSimplifier`.
//!
//! Identities (the result must have exactly the operand's shape, layout included, a
//! missing layout counting as the default):
//! - `reshape`, `bitcast`, `copy` of an operand of the same shape → the operand;
//! - `transpose` with the identity permutation, `broadcast` with `dimensions={0..r-1}`,
//!   `convert` to the operand's own type, `slice` of the whole operand with stride 1 →
//!   the operand;
//! - `negate(negate(x))` → `x` (exact for floats and for wrapping integers);
//! - `slice`/`dynamic-slice` of a `broadcast` that keeps every operand dimension whole →
//!   the broadcast of the operand to the slice's shape (any offsets);
//! - `transpose(transpose(x, p1), p2)` → `transpose(x, p1∘p2)` (or `x` when that is the
//!   identity), `reshape(reshape(x))` → `reshape(x)` (or `x`);
//! - `transpose(dot(a, b), {1,0})` of a rank-2 dot without batch dimensions whose only
//!   user is the transpose → `dot(b, a)` with the contracting dimensions swapped (XLA's
//!   transpose folding): the same products summed in the same order, and the dot's
//!   epilogue (the SGD update of a weight gradient) can then be fused into it.
//!
//! Arithmetic with a constant operand (a constant whose elements are all equal, or a
//! broadcast of one), only where IEEE arithmetic makes it exact:
//! - `x * 1`, `1 * x`, `x / 1` → `x` (integers, floats, `pred` for `multiply`);
//! - `x + 0`, `0 + x` → `x` for integers; for floats **only with `-0.0`**: `x + (+0.0)`
//!   turns `-0.0` into `+0.0`, while `x + (-0.0)` is `x` for every `x` (XLA folds both;
//!   we do not);
//! - `x - 0` → `x` for integers; for floats only with `+0.0` (`x - (+0.0)` = `x + (-0.0)`).
//!
//! Not done: anything that changes rounding (reassociation, `x * 0`, `x / c` → `x * 1/c`),
//! `broadcast` of a scalar constant feeding elementwise ops (left as it is), complex
//! types, moving reshapes/transposes around other operations.

use hlo_ir::literal::LiteralData;
use hlo_ir::types::ElemClass;
use hlo_ir::{Computation, Diagnostic, ElemType, Module, NodeIndex, Op, Opcode};

use super::rewrite::{rewrite_each, same_shape, splat_value};
use hlo_pipeline::{Pass, PassContext};

pub struct AlgebraicSimplifier;

impl Pass for AlgebraicSimplifier {
    fn name(&self) -> &'static str {
        "algebraic-simplifier"
    }

    fn run(&mut self, m: &mut Module, _cx: &mut PassContext) -> Result<bool, Diagnostic> {
        Ok(rewrite_each(m, simplify))
    }
}

/// The instruction that can replace `n` (an existing one or a new one), if any.
fn simplify(comp: &mut Computation, n: NodeIndex) -> Option<NodeIndex> {
    let instr = comp.instr(n);
    let ops = comp.operands(n);
    let x = *ops.first()?;
    let xi = comp.instr(x);
    let same = same_shape(&xi.shape, &instr.shape);
    let elem = instr.shape.as_array()?.elem;
    match &instr.op {
        Op::Reshape { .. } | Op::Plain(Opcode::Bitcast | Opcode::Copy) if same => Some(x),
        Op::Reshape { .. } => match xi.op {
            Op::Reshape { .. } => {
                let y = comp.operand(x, 0)?;
                if same_shape(&comp.instr(y).shape, &instr.shape) {
                    return Some(y);
                }
                let new = instr.clone();
                Some(comp.add(new, &[y]))
            }
            _ => None,
        },
        Op::Transpose { dimensions } if same && is_identity(dimensions) => Some(x),
        Op::Transpose { dimensions: outer } => match &xi.op {
            Op::Transpose { dimensions: inner } => {
                let y = comp.operand(x, 0)?;
                let composed = outer
                    .iter()
                    .map(|&d| usize::try_from(d).ok().and_then(|d| inner.get(d).copied()))
                    .collect::<Option<Vec<i64>>>()?;
                if is_identity(&composed) && same_shape(&comp.instr(y).shape, &instr.shape) {
                    return Some(y);
                }
                let mut new = instr.clone();
                new.op = Op::Transpose { dimensions: composed };
                Some(comp.add(new, &[y]))
            }
            Op::Dot { opcode: Opcode::Dot, dims }
                if outer == &[1, 0] && comp.sole_user(x) == Some(n) =>
            {
                // transpose(dot(a, b)) of a rank-2 dot without batch dimensions, each
                // operand bringing one free dimension, is dot(b, a) with the contracting
                // dimensions swapped: the same products summed in the same order, so the
                // result is bit-identical, and the dot's epilogue can then be fused into
                // it. (When one operand brings both free dimensions, swapping the
                // operands does not transpose the result.)
                let [a, b] = comp.operands(x)[..] else { return None };
                let free = |o: NodeIndex, contracting: &[i64]| {
                    comp.instr(o)
                        .shape
                        .as_array()
                        .and_then(|s| s.dims.len().checked_sub(contracting.len()))
                };
                if !dims.lhs_batch.is_empty()
                    || !dims.rhs_batch.is_empty()
                    || xi.shape.as_array()?.dims.len() != 2
                    || free(a, &dims.lhs_contracting) != Some(1)
                    || free(b, &dims.rhs_contracting) != Some(1)
                {
                    return None;
                }
                let mut d = (**dims).clone();
                std::mem::swap(&mut d.lhs_contracting, &mut d.rhs_contracting);
                d.precision.reverse();
                let mut new = xi.clone();
                new.op = Op::Dot { opcode: Opcode::Dot, dims: Box::new(d) };
                new.shape = instr.shape.clone();
                Some(comp.add(new, &[b, a]))
            }
            _ => None,
        },
        Op::Broadcast { dimensions } if same && is_identity(dimensions) => Some(x),
        Op::Plain(Opcode::Convert) if same => Some(x),
        Op::Slice { ranges } if same && ranges.iter().all(|r| r.start == 0 && r.stride == 1) => {
            Some(x)
        }
        // A (dynamic-)slice of a broadcast that keeps every operand dimension whole is
        // the broadcast of the operand to the slice's shape (XLA's simplifier does the
        // same): only replicated copies are cut, whatever the offsets.
        Op::Slice { .. } | Op::DynamicSlice { .. } => match &xi.op {
            Op::Broadcast { dimensions } => {
                let (from, to) = (xi.shape.as_array()?, instr.shape.as_array()?);
                let whole = dimensions
                    .iter()
                    .all(|&d| usize::try_from(d).is_ok_and(|d| from.dims.get(d) == to.dims.get(d)));
                if !whole || from.elem != to.elem {
                    return None;
                }
                let y = comp.operand(x, 0)?;
                let mut new = instr.clone();
                new.op = Op::Broadcast { dimensions: dimensions.clone() };
                Some(comp.add(new, &[y]))
            }
            _ => None,
        },
        Op::Plain(Opcode::Negate) => match xi.op {
            Op::Plain(Opcode::Negate) => comp.operand(x, 0),
            _ => None,
        },
        Op::Plain(op @ (Opcode::Add | Opcode::Subtract | Opcode::Multiply | Opcode::Divide)) => {
            let y = *ops.get(1)?;
            let (op, class) = (*op, elem.class());
            let kind = |c: NodeIndex| splat_value(comp, c).and_then(|v| classify(&v, elem));
            let (kx, ky) = (kind(x), kind(y));
            let keep = |k: Option<Special>, other: NodeIndex| -> Option<NodeIndex> {
                match (op, k?) {
                    (Opcode::Multiply, Special::One) if class != ElemClass::Complex => Some(other),
                    (Opcode::Add, Special::IntZero) => Some(other),
                    (Opcode::Add, Special::NegZero) => Some(other),
                    _ => None,
                }
            };
            let right_only = |k: Option<Special>| -> Option<NodeIndex> {
                match (op, k?) {
                    (Opcode::Divide, Special::One)
                        if class != ElemClass::Complex && class != ElemClass::Pred =>
                    {
                        Some(x)
                    }
                    (Opcode::Subtract, Special::IntZero | Special::PosZero) => Some(x),
                    _ => None,
                }
            };
            keep(ky, x).or_else(|| right_only(ky)).or_else(|| keep(kx, y))
        }
        _ => None,
    }
}

fn is_identity(perm: &[i64]) -> bool {
    perm.iter().enumerate().all(|(k, &d)| d == k as i64)
}

/// A constant value that makes an arithmetic operation an identity.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Special {
    One,
    /// Zero of an integer type (and `false`).
    IntZero,
    PosZero,
    NegZero,
}

fn classify(v: &LiteralData, elem: ElemType) -> Option<Special> {
    let class = elem.class();
    match v {
        LiteralData::Pred(p) if class == ElemClass::Pred => {
            Some(if p[0] { Special::One } else { Special::IntZero })
        }
        LiteralData::Int(i) if matches!(class, ElemClass::Signed | ElemClass::Unsigned) => {
            match i[0] {
                0 => Some(Special::IntZero),
                1 => Some(Special::One),
                _ => None,
            }
        }
        LiteralData::Float(f) if class == ElemClass::Float => {
            let x = f[0];
            if x == 1.0 {
                Some(Special::One)
            } else if x == 0.0 {
                Some(if x.is_sign_negative() { Special::NegZero } else { Special::PosZero })
            } else {
                None
            }
        }
        _ => None,
    }
}
