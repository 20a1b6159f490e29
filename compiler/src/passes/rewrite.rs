//! Small helpers the cleanup passes share for rewriting one instruction.

use hlo_ir::literal::{Literal, LiteralData};
use hlo_ir::{Computation, NodeIndex, Op, Shape};

/// Replaces every use of `old` by `new` (operands, root, control edges) and removes `old`
/// when it is then dead. Returns whether anything changed.
pub fn replace(comp: &mut Computation, old: NodeIndex, new: NodeIndex) -> bool {
    if old == new {
        return false;
    }
    comp.replace_all_uses(old, new);
    let _ = comp.remove(old);
    true
}

/// Whether two shapes are the same, a missing layout counting as the default one.
pub fn same_shape(a: &Shape, b: &Shape) -> bool {
    a == b || a.with_default_layouts() == b.with_default_layouts()
}

/// The array literal of a constant (`None` for elided values or tuples).
pub fn literal_data(op: &Op) -> Option<&LiteralData> {
    match op {
        Op::Constant(Literal::Array(d)) => Some(d),
        _ => None,
    }
}

/// The value every element of `n` has, when `n` is a constant whose elements are all
/// equal or a broadcast of such a constant; as the literal of its first element.
pub fn splat_value(comp: &Computation, n: NodeIndex) -> Option<LiteralData> {
    let i = comp.instr(n);
    let d = match &i.op {
        Op::Constant(_) => literal_data(&i.op)?,
        Op::Broadcast { .. } => {
            let o = comp.operand(n, 0)?;
            literal_data(&comp.instr(o).op)?
        }
        _ => return None,
    };
    Some(match d {
        LiteralData::Pred(v) => {
            let x = *v.first()?;
            v.iter().all(|&y| y == x).then(|| LiteralData::Pred(vec![x]))?
        }
        LiteralData::Int(v) => {
            let x = *v.first()?;
            v.iter().all(|&y| y == x).then(|| LiteralData::Int(vec![x]))?
        }
        LiteralData::Float(v) => {
            let x = *v.first()?;
            v.iter().all(|&y| y.to_bits() == x.to_bits()).then(|| LiteralData::Float(vec![x]))?
        }
        LiteralData::Complex(_) => return None,
    })
}
