//! Ops that read across some dims and leave the others untouched (XLA's `HandleSlice`,
//! `HandleDynamicSlice`, `HandleDynamicUpdateSlice`, `HandlePad`, `HandleConcatenate`,
//! `HandleReverse`, `HandleReduceWindow`, `HandleSelectAndScatter`, `HandleSort`):
//! computed locally with the untouched dims split and the others whole. Not done: halo
//! exchange across shard boundaries (a split read across dims is computed replicated).

use hlo_ir::op::SliceRange;
use hlo_ir::{Diagnostic, Instr, NodeIndex, Op, Opcode};

use super::builder::{A, Builder, PV, global_dims};
use super::reshard::reshard_bytes;
use super::space::{lift, project};
use crate::geometry::Placed;

/// For ops that leave some dims untouched: per operand, the result dim each of its dims
/// passes through to (`None`: the op reads across it; an empty map: a scalar operand,
/// replicated). `None` for every other op.
pub(super) fn passthrough_maps(ins: &Instr, ops: &[PV]) -> Option<Vec<Vec<Option<usize>>>> {
    let ranks: Vec<usize> = ops
        .iter()
        .map(|v| match v {
            PV::Arr(a) => Some(a.dims.len()),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let dims = |i: usize| match &ops[i] {
        PV::Arr(a) => a.dims.clone(),
        _ => vec![],
    };
    let (_, out) = global_dims(&ins.shape)?;
    let same = |i: usize, keep: &dyn Fn(usize) -> bool| -> Vec<Option<usize>> {
        (0..ranks[i]).map(|d| keep(d).then_some(d)).collect()
    };
    let scalar = Vec::new;
    // A window dim that neither moves nor mixes elements.
    let unit = |w: &hlo_ir::op::WindowDim| {
        w.size == 1
            && w.stride == 1
            && w.pad_lo == 0
            && w.pad_hi == 0
            && w.lhs_dilate == 1
            && w.rhs_dilate == 1
    };
    Some(match &ins.op {
        Op::Slice { ranges } => {
            let d0 = dims(0);
            vec![same(0, &|d| {
                ranges[d].start == 0 && ranges[d].stride == 1 && ranges[d].limit == d0[d]
            })]
        }
        Op::DynamicSlice { sizes } => {
            let d0 = dims(0);
            let mut m = vec![same(0, &|d| sizes[d] == d0[d])];
            m.extend((1..ops.len()).map(|_| scalar()));
            m
        }
        Op::Plain(Opcode::DynamicUpdateSlice) => {
            let (d0, d1) = (dims(0), dims(1));
            let keep = |d: usize| d1.get(d) == d0.get(d);
            let mut m = vec![same(0, &keep), same(1, &keep)];
            m.extend((2..ops.len()).map(|_| scalar()));
            m
        }
        Op::Pad { config } => {
            let zero = |d: usize| config[d].lo == 0 && config[d].hi == 0 && config[d].interior == 0;
            vec![same(0, &zero), scalar()]
        }
        Op::Concatenate { dimension } => {
            (0..ops.len()).map(|i| same(i, &|d| d as i64 != *dimension)).collect()
        }
        Op::Reverse { dimensions } => vec![same(0, &|d| !dimensions.contains(&(d as i64)))],
        Op::ReduceWindow { window, .. } if ops.len() == 2 => {
            vec![same(0, &|d| window.dims.get(d).is_some_and(unit)), scalar()]
        }
        Op::SelectAndScatter { window, .. } if ops.len() == 3 => {
            let keep = |d: usize| window.dims.get(d).is_some_and(unit);
            vec![same(0, &keep), same(1, &keep), scalar()]
        }
        Op::Sort { dimension, .. } if ops.len() == 1 => {
            vec![same(0, &|d| d as i64 != *dimension)]
        }
        _ => return None,
    })
    .filter(|m: &Vec<Vec<Option<usize>>>| {
        // Every mapped dim keeps its size (the op's result dim is the operand dim).
        m.iter().enumerate().all(|(i, map)| {
            let di = dims(i);
            map.iter().enumerate().all(|(d, k)| k.is_none_or(|k| out.get(k) == di.get(d)))
        })
    })
}

impl Builder<'_> {
    /// An op that reads across some dims (slices, pads, windows, concatenates, updates
    /// them) and leaves the others untouched, element for element (`maps[i][d]`: the
    /// result dim operand `i`'s dim `d` passes through to): computed locally with the
    /// untouched dims split (as the result wants them, or as an operand has them, whichever
    /// moves fewer bytes) and the others whole. Padding of uneven shards stays padding:
    /// nothing mixes along an untouched dim.
    pub(super) fn passthrough(
        &mut self,
        ins: &Instr,
        ops: &[PV],
        want: &Placed,
        maps: &[Vec<Option<usize>>],
    ) -> Result<PV, Diagnostic> {
        let (elem, dims) = global_dims(&ins.shape).expect("array result");
        let rank = dims.len();
        let arrays: Vec<A> =
            ops.iter().map(|v| self.arr(ins, v).cloned()).collect::<Result<_, _>>()?;
        let shaped: Vec<usize> = (0..arrays.len()).filter(|&i| !maps[i].is_empty()).collect();
        let blocked: Vec<usize> =
            (0..rank).filter(|&k| !shaped.iter().all(|&i| maps[i].contains(&Some(k)))).collect();
        if blocked.len() == rank {
            return self.rematerialize(ins, ops, want);
        }
        let mut candidates = vec![want.t.partially_replicate(&blocked)];
        for &i in &shaped {
            candidates.push(lift(&arrays[i].p.t, &maps[i], rank).partially_replicate(&blocked));
        }
        let ebytes = (elem.bits() as u64).div_ceil(8);
        let mut best: Option<(u64, Placed, Vec<Placed>)> = None;
        for t in candidates {
            let Some(plan) = Placed::new(t) else { continue };
            let mut targets = Vec::with_capacity(arrays.len());
            let mut cost = reshard_bytes(&plan, want, &dims, ebytes);
            for (i, a) in arrays.iter().enumerate() {
                let to = if maps[i].is_empty() {
                    Placed::replicated(a.dims.len(), self.n)
                } else {
                    match project(&plan.t, &maps[i], rank).and_then(Placed::new) {
                        Some(p) => p,
                        None => break,
                    }
                };
                cost += reshard_bytes(&a.p, &to, &a.dims, (a.elem.bits() as u64).div_ceil(8));
                targets.push(to);
            }
            if targets.len() != arrays.len() {
                continue;
            }
            if best.as_ref().is_none_or(|b| {
                cost < b.0 || (cost == b.0 && plan.t.num_tiles() > b.1.t.num_tiles())
            }) {
                best = Some((cost, plan, targets));
            }
        }
        let Some((_, plan, targets)) = best else {
            return self.rematerialize(ins, ops, want);
        };
        // Split along no untouched dim: every device computes it whole.
        if plan.is_replicated()
            && (!want.is_replicated() || arrays.iter().any(|a| !a.p.is_replicated()))
        {
            self.out.rematerialized.push(ins.name.clone());
        }
        let local = plan.local_dims(&dims);
        let nodes: Vec<NodeIndex> =
            arrays.into_iter().zip(&targets).map(|(a, to)| self.reshard(a, to).node).collect();
        let op = match &ins.op {
            // Untouched dims are whole ranges: their local extent is the shard's.
            Op::Slice { ranges } => Op::Slice {
                ranges: ranges
                    .iter()
                    .enumerate()
                    .map(|(k, r)| {
                        if blocked.contains(&k) {
                            *r
                        } else {
                            SliceRange { start: 0, limit: local[k], stride: 1 }
                        }
                    })
                    .collect(),
            },
            Op::DynamicSlice { sizes } => Op::DynamicSlice {
                sizes: sizes
                    .iter()
                    .enumerate()
                    .map(|(k, &n)| if blocked.contains(&k) { n } else { local[k] })
                    .collect(),
            },
            other => other.clone(),
        };
        let node = self.local_op(ins, op, &nodes)?;
        let r = A { node, p: plan, dims, elem, splat: None };
        Ok(PV::Arr(self.reshard(r, want)))
    }
}
