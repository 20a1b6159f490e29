//! Small helpers the cleanup passes share for rewriting one instruction.

use hlo_ir::literal::{Literal, LiteralData};
use hlo_ir::{Computation, Module, NodeIndex, Op, Shape};

/// The driver of the local-rewrite passes: visits every instruction of every computation
/// in post order and, where `rewrite` offers a replacement of exactly the same shape,
/// replaces the instruction with it (and removes it when dead). Returns whether anything
/// changed.
pub fn rewrite_each(
    m: &mut Module,
    mut rewrite: impl FnMut(&mut Computation, NodeIndex) -> Option<NodeIndex>,
) -> bool {
    let mut changed = false;
    for id in m.comp_ids() {
        let comp = m.comp_mut(id);
        for n in comp.post_order() {
            if !comp.contains(n) {
                continue;
            }
            if let Some(new) = rewrite(comp, n)
                && same_shape(&comp.instr(new).shape, &comp.instr(n).shape)
            {
                changed |= replace(comp, n, new);
            }
        }
    }
    changed
}

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
