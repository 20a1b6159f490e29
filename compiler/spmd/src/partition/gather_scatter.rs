//! `gather` and `scatter` (XLA's `gather_scatter_handler`): index-parallel (the result's
//! batch dims follow the indices' tiling and the paired operand batching dims) and
//! operand pass-through (full-slice dims no index addresses); a gather from an operand
//! split along one indexed dim (a sharded vocabulary) by masked local lookups and an
//! `all-reduce`; a scatter split over its updates' scatter dims when its combiner adds.
//! The dim maps are the propagation's ([`crate::sharding::gather_scatter`]).

use hlo_ir::literal::LiteralData;
use hlo_ir::op::{CmpDirection, SliceRange};
use hlo_ir::{Diagnostic, ElemType, Instr, NodeIndex, Op, Opcode, Shape};

use super::builder::{A, Builder, PV, global_dims, udims};
use super::space::{lift, project};
use crate::geometry::Placed;

/// Where each operand dim and each index dim of a gather lands in its output: the
/// propagation's passthrough and index-parallel maps
/// ([`crate::sharding::gather_scatter::gather_maps`]), with the operand's batching dims following
/// their paired index dims (the local gather then needs operand and indices alike there).
fn gather_dim_maps(
    g: &hlo_ir::op::GatherDims,
    od: &[i64],
    irank: usize,
    rank: usize,
) -> (Vec<Option<usize>>, Vec<Option<usize>>) {
    let (mut omap, imap) = crate::sharding::gather_scatter::gather_maps(g, od, irank, rank);
    for (k, &o) in g.operand_batching_dims.iter().enumerate() {
        omap[o as usize] = g
            .start_indices_batching_dims
            .get(k)
            .and_then(|&i| imap.get(i as usize).copied().flatten());
    }
    (omap, imap)
}

impl Builder<'_> {
    /// Index-parallel and operand-passthrough gather: the result's batch dims follow the
    /// indices' tiling (and the paired operand batching dims), its offset dims the
    /// operand's full-slice dims that no index addresses; indexed operand dims are
    /// gathered whole.
    pub(super) fn gather(
        &mut self,
        ins: &Instr,
        g: &hlo_ir::op::GatherDims,
        ops: &[PV],
        want: &Placed,
    ) -> Result<PV, Diagnostic> {
        let (elem, dims) = global_dims(&ins.shape).expect("array result");
        let a = self.arr(ins, &ops[0])?.clone();
        let ix = self.arr(ins, &ops[1])?.clone();
        if let Some(v) = self.gather_masked(ins, g, &a, &ix, want)? {
            return Ok(v);
        }
        let rank = dims.len();
        let has = |v: &[i64], d: usize| v.contains(&(d as i64));
        let (omap, imap) = gather_dim_maps(g, &a.dims, ix.dims.len(), rank);
        let li = lift(&ix.p.t, &imap, rank);
        let lo = lift(&a.p.t, &omap, rank);
        let plan = Placed::new(li.merge(&lo).unwrap_or(li)).expect("keeps devices");
        let it =
            Placed::new(project(&plan.t, &imap, rank).expect("projection")).expect("keeps devices");
        let ot =
            Placed::new(project(&plan.t, &omap, rank).expect("projection")).expect("keeps devices");
        let ix = self.reshard(ix, &it);
        let a = self.reshard(a, &ot);
        let local = ot.local_dims(&a.dims);
        let mut g2 = g.clone();
        for d in 0..a.dims.len() {
            if omap[d].is_some() && !has(&g.operand_batching_dims, d) {
                g2.slice_sizes[d] = local[d];
            }
        }
        let node = self.local_op(ins, Op::Gather(Box::new(g2)), &[a.node, ix.node])?;
        let r = A { node, p: plan, dims, elem, splat: None };
        Ok(PV::Arr(self.reshard(r, want)))
    }

    /// A gather whose operand is tiled along one indexed, collapsed dim `d` (a lookup into
    /// a sharded vocabulary): every device gathers from its own shard with the index moved
    /// into it, zeroes the rows whose index falls in another shard, and an all-reduce over
    /// the devices along `d` sums the one non-zero contribution. `None` when the gather is
    /// not of that form.
    fn gather_masked(
        &mut self,
        ins: &Instr,
        g: &hlo_ir::op::GatherDims,
        a: &A,
        ix: &A,
        want: &Placed,
    ) -> Result<Option<PV>, Diagnostic> {
        let (elem, dims) = global_dims(&ins.shape).expect("array result");
        let has = |v: &[i64], x: usize| v.contains(&(x as i64));
        // Batching dims may be tiled too, exactly as their indices dims are (local).
        let batching_ok = |k: usize| {
            let Some(i) = g.operand_batching_dims.iter().position(|&x| x as usize == k) else {
                return false;
            };
            let Some(&id) = g.start_indices_batching_dims.get(i) else { return false };
            let id = id as usize;
            a.p.chunk(k, a.dims[k]) == ix.p.chunk(id, ix.dims[id])
                && (0..a.p.devices())
                    .all(|q| a.p.start(q, k, a.dims[k]) == ix.p.start(q, id, ix.dims[id]))
        };
        let tiled: Vec<usize> =
            (0..a.dims.len()).filter(|&k| a.p.t.tiles[k] > 1 && !batching_ok(k)).collect();
        let &[d] = tiled.as_slice() else { return Ok(None) };
        let Some(j) = g.start_index_map.iter().position(|&x| x as usize == d) else {
            return Ok(None);
        };
        if !has(&g.collapsed_slice_dims, d) || g.slice_sizes.get(d) != Some(&1) || !elem.is_float()
        {
            return Ok(None);
        }
        let groups = a.p.groups_along(&[d]);
        // The indices must not vary along the operand's split (every member looks up the
        // same rows), and their own tiling becomes the result's (batch dims).
        if groups.iter().any(|grp| {
            grp.iter().any(|&m| {
                (0..ix.dims.len()).any(|k| {
                    ix.p.start(m as usize, k, ix.dims[k])
                        != ix.p.start(grp[0] as usize, k, ix.dims[k])
                })
            })
        }) {
            return Ok(None);
        }
        let (rank, ivd) = (dims.len(), g.index_vector_dim as usize);
        let irank = ix.dims.len();
        let offset: Vec<usize> = g.offset_dims.iter().map(|&x| x as usize).collect();
        let batch_pos: Vec<usize> = (0..rank).filter(|k| !offset.contains(k)).collect();
        let imap = gather_dim_maps(g, &a.dims, irank, rank).1;
        if ivd < irank && ix.p.t.tiles[ivd] > 1 {
            return Ok(None);
        }
        let Some(plan) = Placed::new(lift(&ix.p.t, &imap, rank)) else { return Ok(None) };
        let ielem = ix.elem;
        if !ielem.is_integer() {
            return Ok(None);
        }
        let n = a.dims[d];
        let local_ix = ix.p.local_dims(&ix.dims);
        let ishape = Shape::array(ielem, &udims(&local_ix));
        let scalar = |b: &mut Self, table: Vec<i64>| {
            let v = b.lookup(table);
            if ielem == ElemType::S32 {
                v
            } else {
                b.add(Instr::new("convert", Op::Plain(Opcode::Convert), Shape::scalar(ielem)), &[v])
            }
        };
        let bcast = |b: &mut Self, v: NodeIndex, shape: &Shape| {
            b.add(
                Instr::new("broadcast", Op::Broadcast { dimensions: vec![] }, shape.clone()),
                &[v],
            )
        };
        let start = scalar(self, (0..a.p.devices()).map(|q| a.p.start(q, d, n)).collect());
        let valid = scalar(self, (0..a.p.devices()).map(|q| a.p.valid(q, d, n)).collect());
        let zero_i = scalar(self, vec![0; a.p.devices()]);
        let last = scalar(self, vec![n - 1; a.p.devices()]);
        // Component j of every index vector, clamped as gather clamps it, moved into the shard.
        let (lo, hi, st) =
            (bcast(self, zero_i, &ishape), bcast(self, last, &ishape), bcast(self, start, &ishape));
        let clamped = self
            .add(Instr::new("clamp", Op::Plain(Opcode::Clamp), ishape.clone()), &[lo, ix.node, hi]);
        let moved = self.add(
            Instr::new("subtract", Op::Plain(Opcode::Subtract), ishape.clone()),
            &[clamped, st],
        );
        let new_ix = if ivd < irank {
            let pred = Shape::array(ElemType::Pred, &udims(&local_ix));
            let io = self.add(
                Instr::new(
                    "iota",
                    Op::Iota { dimension: ivd as i64 },
                    Shape::array(ElemType::S32, &udims(&local_ix)),
                ),
                &[],
            );
            let jv = self.constant(ElemType::S32, &[], LiteralData::Int(vec![j as i64]));
            let jb = self.add(
                Instr::new(
                    "broadcast",
                    Op::Broadcast { dimensions: vec![] },
                    Shape::array(ElemType::S32, &udims(&local_ix)),
                ),
                &[jv],
            );
            let is_j = self.add(
                Instr::new(
                    "compare",
                    Op::Compare { direction: CmpDirection::Eq, kind: None },
                    pred,
                ),
                &[io, jb],
            );
            self.add(
                Instr::new("select", Op::Plain(Opcode::Select), ishape.clone()),
                &[is_j, moved, ix.node],
            )
        } else {
            moved
        };
        // Which index vectors land in this shard: 0 <= moved component < valid.
        let (comp, cdims) = if ivd < irank {
            let ranges = local_ix
                .iter()
                .enumerate()
                .map(|(k, &e)| {
                    if k == ivd {
                        SliceRange { start: j as i64, limit: j as i64 + 1, stride: 1 }
                    } else {
                        SliceRange { start: 0, limit: e, stride: 1 }
                    }
                })
                .collect();
            let mut sd = local_ix.clone();
            sd[ivd] = 1;
            let sl = self.add(
                Instr::new("slice", Op::Slice { ranges }, Shape::array(ielem, &udims(&sd))),
                &[moved],
            );
            sd.remove(ivd);
            (
                self.add(
                    Instr::new(
                        "reshape",
                        Op::Reshape { inferred_dimension: None },
                        Shape::array(ielem, &udims(&sd)),
                    ),
                    &[sl],
                ),
                sd,
            )
        } else {
            (moved, local_ix.clone())
        };
        let cshape = Shape::array(ielem, &udims(&cdims));
        let pshape = Shape::array(ElemType::Pred, &udims(&cdims));
        let (z, v) = (bcast(self, zero_i, &cshape), bcast(self, valid, &cshape));
        let ge = self.add(
            Instr::new(
                "compare",
                Op::Compare { direction: CmpDirection::Ge, kind: None },
                pshape.clone(),
            ),
            &[comp, z],
        );
        let lt = self.add(
            Instr::new(
                "compare",
                Op::Compare { direction: CmpDirection::Lt, kind: None },
                pshape.clone(),
            ),
            &[comp, v],
        );
        let inb = self.add(Instr::new("and", Op::Plain(Opcode::And), pshape), &[ge, lt]);
        let gathered = self.local_op(ins, ins.op.clone(), &[a.node, new_ix])?;
        let oshape = self.shape(gathered).clone();
        let mask = self.add(
            Instr::new(
                "broadcast",
                Op::Broadcast { dimensions: batch_pos.iter().map(|&x| x as i64).collect() },
                Shape::array(ElemType::Pred, &udims(&plan.local_dims(&dims))),
            ),
            &[inb],
        );
        let ze = self.sum_identity(elem);
        let zeros = bcast(self, ze, &oshape);
        let masked = self
            .add(Instr::new("select", Op::Plain(Opcode::Select), oshape), &[mask, gathered, zeros]);
        let add = self.adder(elem);
        let node = self.all_reduce(masked, groups, add);
        let r = A { node, p: plan, dims, elem, splat: None };
        Ok(Some(PV::Arr(self.reshard(r, want))))
    }

    /// Scatter: batch-parallel where indices, updates and operand share batching dims
    /// (local), index-parallel over the updates' scatter dims when the combiner adds
    /// (local scatters into zeros, `all-reduce`, then added to the operand), and
    /// passthrough for full-size window dims no index addresses. Every other window dim
    /// stays whole on every device (a window is skipped only when it is out of bounds as
    /// a whole).
    pub(super) fn scatter(
        &mut self,
        ins: &Instr,
        sd: &hlo_ir::op::ScatterDims,
        ops: &[PV],
        want: &Placed,
    ) -> Result<PV, Diagnostic> {
        let (elem, dims) = global_dims(&ins.shape).expect("array result");
        let a = self.arr(ins, &ops[0])?.clone();
        let ix = self.arr(ins, &ops[1])?.clone();
        let u = self.arr(ins, &ops[2])?.clone();
        let (ur, ivd) = (u.dims.len(), sd.index_vector_dim as usize);
        let has = |v: &[i64], d: usize| v.contains(&(d as i64));
        let scatter_pos: Vec<usize> =
            (0..ur).filter(|&k| !has(&sd.update_window_dims, k)).collect();
        let mut imap: Vec<Option<usize>> = vec![None; ix.dims.len()];
        let mut j = 0;
        for (i, slot) in imap.iter_mut().enumerate() {
            if i != ivd {
                *slot = scatter_pos.get(j).copied();
                j += 1;
            }
        }
        // Operand dim -> updates dim: the propagation's map (passthrough window dims and
        // batching dims, updates -> operand) inverted.
        let omap = crate::sharding::spec::invert(
            &crate::sharding::gather_scatter::scatter_maps(sd, &a.dims, &u.dims, ix.dims.len()).0,
            a.dims.len(),
        );
        let batch_pos: Vec<usize> =
            sd.input_batching_dims.iter().filter_map(|&od| omap[od as usize]).collect();
        let umap: Vec<Option<usize>> = (0..ur).map(Some).collect();
        // A window dim that is not a passthrough (an index addresses it, or it is smaller
        // than its operand dim) stays whole: a device holding part of a window would put it
        // at the window's start and test only that part against the bounds, while scatter
        // skips a window only when it is out of bounds as a whole.
        let partial_windows: Vec<usize> = sd
            .update_window_dims
            .iter()
            .map(|&w| w as usize)
            .filter(|&w| !omap.contains(&Some(w)))
            .collect();
        let lu = lift(&u.p.t, &umap, ur).partially_replicate(&partial_windows);
        let li = lift(&ix.p.t, &imap, ur);
        let lo = lift(&a.p.t, &omap, ur);
        let base = lu.merge(&li).unwrap_or(lu);
        let mut plan = base.merge(&lo).unwrap_or(base);
        let adds = hlo_fabric::binary_reducer(self.m.comp(sd.to_apply)) == Some(Opcode::Add);
        let mut ip: Vec<usize> = scatter_pos
            .iter()
            .copied()
            .filter(|&k| plan.tiles[k] > 1 && !batch_pos.contains(&k))
            .collect();
        if !ip.is_empty() && !adds {
            plan = plan.partially_replicate(&ip);
            ip.clear();
        }
        let plan = Placed::new(plan).expect("keeps devices");
        let it =
            Placed::new(project(&plan.t, &imap, ur).expect("projection")).expect("keeps devices");
        let ot =
            Placed::new(project(&plan.t, &omap, ur).expect("projection")).expect("keeps devices");
        let u = self.reshard(u, &plan);
        let ix = self.reshard(ix, &it);
        let a = self.reshard(a, &ot);
        let node = if ip.is_empty() {
            self.local_op(ins, ins.op.clone(), &[a.node, ix.node, u.node])?
        } else {
            // Padding of the updates would scatter garbage through garbage indices. The
            // partial results start at the sum's identity, so that `a + summed` keeps every
            // element of `a` no update reaches, `-0` included.
            let z = self.sum_identity(u.elem);
            let upd = self.mask(&u, &ip, z);
            let shape = self.local(&a);
            let zeros = self.add(
                Instr::new("broadcast", Op::Broadcast { dimensions: vec![] }, shape.clone()),
                &[z],
            );
            let part = self.local_op(ins, ins.op.clone(), &[zeros, ix.node, upd])?;
            let summed = self.all_reduce(part, plan.groups_along(&ip), sd.to_apply);
            self.add(Instr::new("add", Op::Plain(Opcode::Add), shape), &[a.node, summed])
        };
        let r = A { node, p: ot, dims, elem, splat: None };
        Ok(PV::Arr(self.reshard(r, want)))
    }
}
