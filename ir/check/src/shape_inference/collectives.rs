//! Collectives (XLA's `InferAllReduceShape`, `InferAllGatherShape`,
//! `InferReduceScatterShape`, `InferAllToAllShape`, `InferCollectivePermuteShape`): the
//! group size from `replica_groups`; the size-changing checks are skipped when it is
//! unknown (the declared size is taken as is).

use hlo_ir::op::ReplicaGroups;
use hlo_ir::{Dim, Opcode, Shape};

use super::context::{Cx, R, dim_in_range, mk, tuple_if_many};
use super::reduction::check_reducer;

fn group_size(groups: &Option<ReplicaGroups>) -> Option<i64> {
    match groups {
        Some(ReplicaGroups::Explicit(g)) => g.first().map(|g| g.len() as i64),
        Some(ReplicaGroups::Iota(l)) => l.dims.get(1).copied(),
        _ => None,
    }
}

pub(super) fn collective(cx: &Cx, op: Opcode, attrs: &hlo_ir::op::CollectiveAttrs) -> R<Shape> {
    let n = group_size(&attrs.replica_groups);
    let shapes: Vec<&Shape> = (0..cx.ops.len()).map(|k| cx.shape(k)).collect::<R<_>>()?;
    if let (Some(r), Opcode::AllReduce | Opcode::ReduceScatter) = (attrs.to_apply, op) {
        // One binary reducer applied to every operand.
        for k in 0..shapes.len() {
            let (e, _) = cx.arr(k)?;
            check_reducer(cx, r, &[e], &[e], false)?;
        }
    }
    let declared_leaves: Vec<&Shape> = match cx.declared {
        Some(Shape::Tuple(t)) => t.iter().collect(),
        Some(s) => vec![s],
        None => Vec::new(),
    };
    match op {
        Opcode::AllReduce | Opcode::CollectiveBroadcast => {
            for k in 0..shapes.len() {
                cx.arr(k)?;
            }
            Ok(tuple_if_many(shapes.into_iter().cloned().collect()))
        }
        Opcode::CollectivePermute => {
            if let Some(pairs) = &attrs.source_target_pairs {
                for (i, (s, t)) in pairs.iter().enumerate() {
                    if pairs[..i].iter().any(|p| p.0 == *s) {
                        return Err(cx.err(format!("collective-permute source {s} appears twice")));
                    }
                    if pairs[..i].iter().any(|p| p.1 == *t) {
                        return Err(cx.err(format!("collective-permute target {t} appears twice")));
                    }
                }
            }
            Ok(tuple_if_many(shapes.into_iter().cloned().collect()))
        }
        Opcode::AllGather | Opcode::ReduceScatter | Opcode::AllToAll => {
            let dims = attrs.dimensions.clone();
            if op == Opcode::AllToAll && dims.is_none() {
                return Ok(Shape::Tuple(shapes.into_iter().cloned().collect()));
            }
            let Some(&[d]) = dims.as_deref() else {
                return Err(
                    cx.err(format!("{} needs dimensions={{d}} with one dimension", op.name()))
                );
            };
            let mut out = Vec::new();
            for k in 0..shapes.len() {
                let (e, mut dk) = cx.arr(k)?;
                dim_in_range(cx, d, dk.len(), &format!("{} dimension", op.name()))?;
                let x = dk[d as usize];
                match (op, n) {
                    (Opcode::AllGather, Some(n)) => dk[d as usize] = x * n,
                    (Opcode::ReduceScatter | Opcode::AllToAll, Some(n)) => {
                        if n == 0 || x % n != 0 {
                            return Err(cx.err(format!("{} dimension {d} of size {x} is not divisible by the group size {n}", op.name())));
                        }
                        if op == Opcode::ReduceScatter {
                            dk[d as usize] = x / n;
                        }
                    }
                    (Opcode::AllToAll, None) => {}
                    // Group size unknown: take the declared size of dimension d.
                    _ => {
                        cx.declared()?;
                        if let Some(Shape::Array(a)) = declared_leaves.get(k)
                            && let Some(Dim::Static(s)) = a.dims.get(d as usize)
                        {
                            dk[d as usize] = *s as i64;
                        }
                    }
                }
                out.push(mk(e, &dk));
            }
            Ok(tuple_if_many(out))
        }
        _ => Err(cx.err(format!("shape inference for `{}` is not yet implemented", op.name()))),
    }
}
