//! `dot` (XLA's `dot_handler`): a contraction over one iteration space of output and
//! contracted dims ([`Space`]); the tiling of that space whose collectives move the fewest
//! bytes per device wins among the output's, the operands' and their merges. Operands
//! that agree on a split contracting dim compute partial products locally, summed by an
//! `all-reduce` or a `reduce-scatter` (in the dot's own type as XLA sums them, or in f32:
//! [`PartialSums`]); operand tiles the output does not share are gathered. Convolutions
//! that are contractions come here too ([`super::convolution`]). Not done: windowed
//! einsum.

use hlo_ir::op::DotDims;
use hlo_ir::{Diagnostic, ElemType, Instr, Op, Opcode, Shape};

use super::builder::{A, Builder, PV, PartialSums, global_dims, udims};
use super::reshard::reshard_bytes;
use super::space::{Space, lift, project};
use crate::geometry::Placed;
use crate::sharding::spec::Tiling;

impl Builder<'_> {
    /// A `dot` as a contraction over its own iteration space ([`Space::of_dot`]).
    pub(super) fn dot(
        &mut self,
        ins: &Instr,
        dd: &DotDims,
        ops: &[PV],
        want: &Placed,
    ) -> Result<PV, Diagnostic> {
        let (lr, rr) = (self.arr(ins, &ops[0])?.dims.len(), self.arr(ins, &ops[1])?.dims.len());
        self.contraction(ins, ops, want, Space::of_dot(dd, lr, rr), &[])
    }

    /// A two-operand op whose iteration space is its output dims followed by contracted
    /// dims (`space`): operand dims mapped to `None`, the output dims in `whole` and the
    /// space dims no operand dim maps to (a grouped convolution's output feature dim:
    /// every device would compute all of it) are never split.
    pub(super) fn contraction(
        &mut self,
        ins: &Instr,
        ops: &[PV],
        want: &Placed,
        space: Space,
        whole: &[usize],
    ) -> Result<PV, Diagnostic> {
        let (elem, dims) = global_dims(&ins.shape).expect("array result");
        let l = self.arr(ins, &ops[0])?.clone();
        let r = self.arr(ins, &ops[1])?.clone();
        let ro = dims.len();
        let unmapped = (0..space.rank).filter(|&k| {
            !whole.contains(&k) && !space.lhs.contains(&Some(k)) && !space.rhs.contains(&Some(k))
        });
        let whole: Vec<usize> = whole.iter().copied().chain(unmapped).collect();
        let whole = whole.as_slice();
        // Both operands' tilings in the iteration space (out dims ++ contracting).
        let lt = lift(&l.p.t, &space.lhs, space.rank).partially_replicate(whole);
        let rt = lift(&r.p.t, &space.rhs, space.rank).partially_replicate(whole);
        let contracting: Vec<usize> = (ro..space.rank).collect();
        // Candidate iteration-space tilings; the one whose collectives carry the fewest
        // bytes per device (all-gather results, all-reduce buffers) wins. The output's tiling (contraction whole), the operands' own and
        // merged tilings, and the output's tiling with either operand's contraction split.
        let out_space = want.t.insert_dims(&contracting).partially_replicate(whole);
        let free: Vec<usize> = (0..ro).collect();
        let only_contracting = |t: &Tiling| t.partially_replicate(&free);
        let mut candidates: Vec<Tiling> = vec![out_space.clone()];
        candidates.extend(lt.merge(&rt));
        candidates.push(lt.clone());
        candidates.push(rt.clone());
        candidates.extend(out_space.merge(&only_contracting(&lt)));
        candidates.extend(out_space.merge(&only_contracting(&rt)));
        let ebytes = (elem.bits() as u64).div_ceil(8);
        let mut best: Option<(u64, Placed)> = None;
        for t in candidates {
            let t = t.partially_replicate(whole);
            let Some(plan) = Placed::new(t) else { continue };
            let (Some(lp), Some(rp)) = (
                project(&plan.t, &space.lhs, space.rank).and_then(Placed::new),
                project(&plan.t, &space.rhs, space.rank).and_then(Placed::new),
            ) else {
                continue;
            };
            let split: Vec<usize> =
                contracting.iter().copied().filter(|&k| plan.t.tiles[k] > 1).collect();
            let Some(out_p) =
                plan.t.partially_replicate(&split).remove_dims(&contracting).and_then(Placed::new)
            else {
                continue;
            };
            let out_local: u64 =
                out_p.local_dims(&dims).iter().map(|&d| d as u64).product::<u64>() * ebytes;
            let cost = reshard_bytes(&l.p, &lp, &l.dims, (l.elem.bits() as u64).div_ceil(8))
                + reshard_bytes(&r.p, &rp, &r.dims, (r.elem.bits() as u64).div_ceil(8))
                + if split.is_empty() { 0 } else { out_local }
                + reshard_bytes(&out_p, want, &dims, ebytes);
            // Fewer bytes wins; at equal bytes, more tiles (less duplicated compute).
            if best.as_ref().is_none_or(|b| {
                cost < b.0 || (cost == b.0 && plan.t.num_tiles() > b.1.t.num_tiles())
            }) {
                best = Some((cost, plan));
            }
        }
        let plan = best
            .map(|b| b.1)
            .unwrap_or_else(|| Placed::new(out_space).expect("insert keeps devices"));
        let lp = project(&plan.t, &space.lhs, space.rank)
            .and_then(Placed::new)
            .expect("projection keeps devices");
        let rp = project(&plan.t, &space.rhs, space.rank)
            .and_then(Placed::new)
            .expect("projection keeps devices");
        let l = self.reshard(l, &lp);
        let r = self.reshard(r, &rp);
        let split: Vec<usize> =
            contracting.iter().copied().filter(|&k| plan.t.tiles[k] > 1).collect();
        // Padding along a split contracting dim would add garbage products: zero both
        // sides (zeroing one is not enough: padding may hold a NaN or an infinity, and
        // 0 * NaN is NaN).
        let zero_padding = |b: &mut Self, a: &A, map: &[Option<usize>]| {
            let split: Vec<usize> = (0..a.dims.len())
                .filter(|&d| map[d].is_some_and(|k| k >= ro) && a.p.padded(d, a.dims[d]))
                .collect();
            if split.is_empty() {
                return a.node;
            }
            let z = b.zero(a.elem);
            b.mask(a, &split, z)
        };
        let lnode = zero_padding(self, &l, &space.lhs);
        let rnode = zero_padding(self, &r, &space.rhs);
        let out_t = plan
            .t
            .partially_replicate(&split)
            .remove_dims(&contracting)
            .expect("contracting dims untiled after replication");
        let out_p = Placed::new(out_t).expect("keeps devices");
        if split.is_empty() {
            let node = self.add_local(
                ins,
                ins.op.clone(),
                &[lnode, rnode],
                elem,
                &out_p.local_dims(&dims),
            );
            let res = A { node, p: out_p, dims, elem, splat: None };
            return Ok(PV::Arr(self.reshard(res, want)));
        }
        // Partial sums in the dot's own type as XLA sums them, or in f32 until summed
        // ([`PartialSums`]).
        let low = matches!(elem, ElemType::BF16 | ElemType::F16);
        let acc = if low && self.sums == PartialSums::Exact { ElemType::F32 } else { elem };
        let node =
            self.add_local(ins, ins.op.clone(), &[lnode, rnode], acc, &out_p.local_dims(&dims));
        let groups = plan.groups_along(&split);
        let add = self.adder(acc);
        let partial = A { node, p: out_p, dims: dims.clone(), elem: acc, splat: None };
        let summed = self.sum_partials(partial, groups, add, want);
        if acc == elem {
            return Ok(PV::Arr(summed));
        }
        let shape = Shape::array(elem, &udims(&summed.p.local_dims(&dims)));
        let node =
            self.add(Instr::new("convert", Op::Plain(Opcode::Convert), shape), &[summed.node]);
        Ok(PV::Arr(A { node, elem, ..summed }))
    }
}
