//! Resharding: a value moved from the sharding it is in to the one a user needs, and the
//! collectives that move it (XLA's `PartitionedHlo::Reshard`, `ReshardWithAllToAll`,
//! `ReshardNoCache`, `PadWithValue`, and the collective builders of
//! `spmd_partitioner_util`):
//! - a tiling moved from one dim to another among the same devices: one `all-to-all`;
//! - along every dimension where some device's target region is not inside the region it
//!   holds, an `all-gather` within the devices that differ only along that dimension;
//! - then a `dynamic-slice` at per-device offsets (no communication), padding first where
//!   a slice would be clamped.
//!
//! Partial results (a split contraction or reduction) are summed here too: an
//! `all-reduce`, one `reduce-scatter` when the result is wanted split among the summing
//! devices, or a `reduce-scatter` within sub-groups then an `all-reduce` across them.
//! [`reshard_bytes`] is what a reshard costs, for the handlers that choose among
//! candidate shardings.

use std::collections::HashMap;

use hlo_ir::op::{CmpDirection, CollectiveAttrs, PadDim, ReplicaGroups, SliceRange};
use hlo_ir::sharding::IotaList;
use hlo_ir::{CompId, Diagnostic, ElemType, Instr, NodeIndex, Op, Opcode, Shape};

use super::builder::{A, Builder, PV, udims};
use crate::geometry::Placed;
use crate::sharding::spec::iota_form;

/// Replica groups as XLA prints them: `[G,S]<=[...]` when the groups are an iota list.
pub fn replica_groups(groups: &[Vec<i64>]) -> ReplicaGroups {
    let g = groups.len() as i64;
    let s = groups.first().map_or(0, |x| x.len() as i64);
    let flat: Vec<i64> = groups.concat();
    if groups.iter().all(|x| x.len() as i64 == s)
        && let Some(IotaList { dims: _, reshape, transpose }) = iota_form(&[g, s], &flat)
    {
        return ReplicaGroups::Iota(IotaList { dims: vec![g, s], reshape, transpose });
    }
    ReplicaGroups::Explicit(groups.to_vec())
}

/// The dims `(x, y)` when `to` is `from`'s tiling moved from dim `x` to dim `y` among the
/// same devices (each device's coordinate along `x` is its target coordinate along `y`),
/// both evenly divided and everything else unchanged: what one all-to-all does.
fn dim_move(from: &Placed, to: &Placed, dims: &[i64]) -> Option<(usize, usize)> {
    let rank = dims.len();
    let x = (0..rank).find(|&k| from.t.tiles[k] > 1 && to.t.tiles[k] == 1)?;
    let y = (0..rank).find(|&k| from.t.tiles[k] == 1 && to.t.tiles[k] > 1)?;
    let t = from.t.tiles[x];
    if to.t.tiles[y] != t || dims[x] % t != 0 || dims[y] % t != 0 {
        return None;
    }
    let same_rest = (0..rank).filter(|&k| k != x && k != y).all(|k| {
        let n = dims[k];
        from.chunk(k, n) == to.chunk(k, n)
            && (0..from.devices()).all(|d| from.start(d, k, n) == to.start(d, k, n))
    });
    (same_rest && (0..from.devices()).all(|d| from.coords[d][x] == to.coords[d][y]))
        .then_some((x, y))
}

/// Bytes per device the collectives of `reshard(from -> to)` move (its all-gather
/// results, or the buffer of an all-to-all); local slicing is free.
pub(super) fn reshard_bytes(from: &Placed, to: &Placed, dims: &[i64], ebytes: u64) -> u64 {
    if from.same_regions(to, dims) {
        return 0;
    }
    let local =
        |p: &Placed| p.local_dims(dims).iter().map(|&d| d.max(0) as u64).product::<u64>() * ebytes;
    if dim_move(from, to, dims).is_some() {
        return local(from);
    }
    let mut cur = from.clone();
    let mut bytes = 0;
    for (k, &n) in dims.iter().enumerate() {
        if cur.t.tiles[k] > 1 && !Builder::contained(&cur, to, k, n) {
            cur = Placed::new(cur.t.partially_replicate(&[k])).expect("keeps devices");
            bytes += local(&cur);
        }
    }
    bytes
}

/// Every dim of `a` but `k` is placed as `want` places it (same chunk and start on every
/// device): only dim `k` changes when partial sums are scattered.
fn others_kept(a: &A, want: &Placed, k: usize) -> bool {
    (0..a.dims.len()).filter(|&q| q != k).all(|q| {
        let m = a.dims[q];
        want.chunk(q, m) == a.p.chunk(q, m)
            && (0..a.p.devices()).all(|d| want.start(d, q, m) == a.p.start(d, q, m))
    })
}

/// Device groups of a collective.
type Groups = Vec<Vec<i64>>;

/// Partial sums over `groups` wanted split `f` ways along one dim and replicated over the
/// rest of each group (data parallel across slices with FSDP inside: the weight gradient
/// is wanted sharded over `fsdp` and replicated over the slices): `(k, within, across)`
/// for a `reduce-scatter` within sub-groups of `f` members holding distinct chunks of dim
/// `k`, then an `all-reduce` of each chunk across the sub-groups (the members holding the
/// same chunk). The same sum as an all-reduce over the whole group and a slice, with
/// `1/f` of its all-reduce bytes; `None` when the placement is not of that form.
fn scatter_then_replicate(
    a: &A,
    groups: &[Vec<i64>],
    want: &Placed,
) -> Option<(usize, Groups, Groups)> {
    let g = groups.first()?.len();
    let devices = a.p.devices();
    let rank = a.dims.len();
    'dims: for k in 0..rank {
        let n = a.dims[k];
        let (have, to) = (a.p.chunk(k, n), want.chunk(k, n));
        if to <= 0 || have % to != 0 || a.p.padded(k, n) || want.padded(k, n) {
            continue;
        }
        let f = (have / to) as usize;
        if f <= 1 || f >= g || g % f != 0 {
            continue;
        }
        if !others_kept(a, want, k) {
            continue;
        }
        let (mut within, mut across) = (Vec::new(), Vec::new());
        for group in groups {
            if group.len() != g {
                return None;
            }
            // Each member's chunk of dim k within its own tile of the partial sums.
            let mut buckets = vec![Vec::new(); f];
            for &d in group {
                let du = usize::try_from(d).ok().filter(|&x| x < devices)?;
                let off = want.start(du, k, n) - a.p.start(du, k, n);
                if off < 0 || off % to != 0 || (off / to) as usize >= f {
                    continue 'dims;
                }
                buckets[(off / to) as usize].push(d);
            }
            if buckets.iter().any(|b| b.len() != g / f) {
                continue 'dims;
            }
            within.extend((0..g / f).map(|j| buckets.iter().map(|b| b[j]).collect::<Vec<_>>()));
            across.extend(buckets);
        }
        return Some((k, within, across));
    }
    None
}

impl Builder<'_> {
    /// `a` gathered along dimension `k` within the devices that differ only along `k`.
    fn all_gather(&mut self, a: A, k: usize) -> A {
        let groups = a.p.groups_along(&[k]);
        let n = a.dims[k];
        let full = a.p.chunk(k, n) * a.p.t.tiles[k];
        let mut dims = a.p.local_dims(&a.dims);
        dims[k] = full;
        let attrs = CollectiveAttrs {
            replica_groups: Some(replica_groups(&groups)),
            channel_id: Some(self.next_channel()),
            use_global_device_ids: true,
            dimensions: Some(vec![k as i64]),
            ..Default::default()
        };
        let mut node = self.add(
            Instr::new(
                "all-gather",
                Op::Collective { opcode: Opcode::AllGather, attrs: Box::new(attrs) },
                Shape::array(a.elem, &udims(&dims)),
            ),
            &[a.node],
        );
        if full != n {
            let ranges = dims
                .iter()
                .enumerate()
                .map(|(d, &x)| SliceRange {
                    start: 0,
                    limit: if d == k { n } else { x },
                    stride: 1,
                })
                .collect();
            dims[k] = n;
            node = self.add(
                Instr::new("slice", Op::Slice { ranges }, Shape::array(a.elem, &udims(&dims))),
                &[node],
            );
        }
        let p = Placed::new(a.p.t.partially_replicate(&[k]))
            .expect("partial replication keeps a permutation");
        A { node, p, ..a }
    }

    /// `a` tiled along dim `x` resharded to the same tiling along dim `y` by one
    /// `all-to-all` (GSPMD's dim move): split `y` into `[t, c]`, exchange along the new
    /// dim, then fold it into `x`. Needs even tiles and each device's coordinate along
    /// `x` equal to its target coordinate along `y`, everything else unchanged.
    fn all_to_all(&mut self, a: &A, to: &Placed) -> Option<A> {
        let (x, y) = dim_move(&a.p, to, &a.dims)?;
        let t = a.p.t.tiles[x];
        // Devices exchanging: those that differ only along x, in x order.
        let groups = a.p.groups_along(&[x]);
        let (cx, cy) = (a.dims[x] / t, a.dims[y] / t);
        let mut local = a.p.local_dims(&a.dims);
        // [.., y, ..] -> [.., t, cy, ..]
        let mut split = local.clone();
        split[y] = cy;
        split.insert(y, t);
        let r1 = self.add(
            Instr::new(
                "reshape",
                Op::Reshape { inferred_dimension: None },
                Shape::array(a.elem, &udims(&split)),
            ),
            &[a.node],
        );
        let attrs = CollectiveAttrs {
            replica_groups: Some(replica_groups(&groups)),
            channel_id: Some(self.next_channel()),
            dimensions: Some(vec![y as i64]),
            ..Default::default()
        };
        let ex = self.add(
            Instr::new(
                "all-to-all",
                Op::Collective { opcode: Opcode::AllToAll, attrs: Box::new(attrs) },
                Shape::array(a.elem, &udims(&split)),
            ),
            &[r1],
        );
        // Move the exchanged dim (position y) right before x, then merge it into x.
        let xs = if x < y { x } else { x + 1 };
        let mut perm: Vec<usize> = (0..split.len()).filter(|&k| k != y).collect();
        let at = perm.iter().position(|&k| k == xs).expect("x present");
        perm.insert(at, y);
        let tdims: Vec<i64> = perm.iter().map(|&k| split[k]).collect();
        let tr = self.add(
            Instr::new(
                "transpose",
                Op::Transpose { dimensions: perm.iter().map(|&k| k as i64).collect() },
                Shape::array(a.elem, &udims(&tdims)),
            ),
            &[ex],
        );
        local[x] = cx * t;
        local[y] = cy;
        let node = self.add(
            Instr::new(
                "reshape",
                Op::Reshape { inferred_dimension: None },
                Shape::array(a.elem, &udims(&local)),
            ),
            &[tr],
        );
        Some(A { node, p: to.clone(), ..a.clone() })
    }

    /// Whether every device's valid target region along `k` lies inside what it holds.
    fn contained(from: &Placed, to: &Placed, k: usize, n: i64) -> bool {
        (0..from.devices()).all(|d| {
            let (ts, te) = (to.start(d, k, n), (to.start(d, k, n) + to.chunk(k, n)).min(n));
            let (fs, fe) = (from.start(d, k, n), (from.start(d, k, n) + from.chunk(k, n)).min(n));
            ts >= te || (ts >= fs && te <= fe)
        })
    }

    /// `a` in sharding `to`.
    pub(super) fn reshard(&mut self, a: A, to: &Placed) -> A {
        if a.p.same_regions(to, &a.dims) {
            return A { p: to.clone(), ..a };
        }
        // A value resharded once is not moved again for its next user.
        let key = (a.node, to.t.tiles.clone(), to.t.repl, to.t.devices.clone());
        if let Some(done) = self.reshards.get(&key) {
            return done.clone();
        }
        let out = self.reshard_uncached(a, to);
        self.reshards.insert(key, out.clone());
        out
    }

    fn reshard_uncached(&mut self, a: A, to: &Placed) -> A {
        if let Some(scalar) = a.splat {
            let shape = Shape::array(a.elem, &udims(&to.local_dims(&a.dims)));
            let node = self.add(
                Instr::new("broadcast", Op::Broadcast { dimensions: vec![] }, shape),
                &[scalar],
            );
            return A { node, p: to.clone(), ..a };
        }
        if let Some(moved) = self.all_to_all(&a, to) {
            return moved;
        }
        let mut a = a;
        for k in 0..a.dims.len() {
            if a.p.t.tiles[k] > 1 && !Self::contained(&a.p, to, k, a.dims[k]) {
                a = self.all_gather(a, k);
            }
        }
        self.slice_to(a, to)
    }

    /// `a` sliced locally to `to`, whose regions lie inside `a`'s on every device.
    fn slice_to(&mut self, a: A, to: &Placed) -> A {
        let rank = a.dims.len();
        let have = a.p.local_dims(&a.dims);
        let want = to.local_dims(&a.dims);
        let mut offsets: Vec<Vec<i64>> = Vec::with_capacity(rank);
        let mut pad = vec![0i64; rank];
        let mut moves = false;
        for k in 0..rank {
            let n = a.dims[k];
            let off: Vec<i64> =
                (0..a.p.devices()).map(|d| to.start(d, k, n) - a.p.start(d, k, n)).collect();
            let reach = off.iter().map(|&o| o + want[k]).max().unwrap_or(0);
            pad[k] = (reach - have[k]).max(0);
            moves |= want[k] != have[k] || off.iter().any(|&o| o != 0);
            offsets.push(off);
        }
        if !moves {
            return A { p: to.clone(), ..a };
        }
        let mut node = a.node;
        if pad.iter().any(|&x| x > 0) {
            let z = self.zero(a.elem);
            let padded: Vec<i64> = have.iter().zip(&pad).map(|(h, p)| h + p).collect();
            let config = pad.iter().map(|&hi| PadDim { lo: 0, hi, interior: 0 }).collect();
            node = self.add(
                Instr::new("pad", Op::Pad { config }, Shape::array(a.elem, &udims(&padded))),
                &[node, z],
            );
        }
        let starts: Vec<NodeIndex> = offsets.into_iter().map(|o| self.lookup(o)).collect();
        let mut ops = vec![node];
        ops.extend(starts);
        let node = self.add(
            Instr::new(
                "dynamic-slice",
                Op::DynamicSlice { sizes: want.clone() },
                Shape::array(a.elem, &udims(&want)),
            ),
            &ops,
        );
        A { node, p: to.clone(), ..a }
    }

    /// `a` with the padding of its uneven tiled dimensions `dims` replaced by `value`.
    pub(super) fn mask(&mut self, a: &A, dims: &[usize], value: NodeIndex) -> NodeIndex {
        let local = a.p.local_dims(&a.dims);
        let mut cond: Option<NodeIndex> = None;
        for &k in dims {
            let n = a.dims[k];
            if !a.p.padded(k, n) {
                continue;
            }
            let valid: Vec<i64> = (0..a.p.devices()).map(|d| a.p.valid(d, k, n)).collect();
            let limit = self.lookup(valid);
            let iota = self.add(
                Instr::new(
                    "iota",
                    Op::Iota { dimension: k as i64 },
                    Shape::array(ElemType::S32, &udims(&local)),
                ),
                &[],
            );
            let lim = self.add(
                Instr::new(
                    "broadcast",
                    Op::Broadcast { dimensions: vec![] },
                    Shape::array(ElemType::S32, &udims(&local)),
                ),
                &[limit],
            );
            let pred = Shape::array(ElemType::Pred, &udims(&local));
            let lt = self.add(
                Instr::new(
                    "compare",
                    Op::Compare { direction: CmpDirection::Lt, kind: None },
                    pred.clone(),
                ),
                &[iota, lim],
            );
            cond = Some(match cond {
                None => lt,
                Some(c) => self.add(Instr::new("and", Op::Plain(Opcode::And), pred), &[c, lt]),
            });
        }
        let Some(cond) = cond else { return a.node };
        let shape = self.local(a);
        let fill = self.add(
            Instr::new("broadcast", Op::Broadcast { dimensions: vec![] }, shape.clone()),
            &[value],
        );
        self.add(Instr::new("select", Op::Plain(Opcode::Select), shape), &[cond, a.node, fill])
    }

    /// A local partial result (`a`, whose devices along data dims `sum_over` of `space`
    /// hold partial sums) summed across them with `reducer`.
    pub(super) fn all_reduce(
        &mut self,
        node: NodeIndex,
        groups: Vec<Vec<i64>>,
        reducer: CompId,
    ) -> NodeIndex {
        let shape = self.shape(node).clone();
        self.reducing(Opcode::AllReduce, node, &groups, reducer, None, shape)
    }

    /// An all-reduce or reduce-scatter (along `dimension`) of `node` within `groups`,
    /// global device ids, on a channel of its own.
    fn reducing(
        &mut self,
        opcode: Opcode,
        node: NodeIndex,
        groups: &[Vec<i64>],
        reducer: CompId,
        dimension: Option<usize>,
        shape: Shape,
    ) -> NodeIndex {
        let attrs = CollectiveAttrs {
            replica_groups: Some(replica_groups(groups)),
            channel_id: Some(self.next_channel()),
            use_global_device_ids: true,
            dimensions: dimension.map(|k| vec![k as i64]),
            to_apply: Some(reducer),
            ..Default::default()
        };
        let op = Op::Collective { opcode, attrs: Box::new(attrs) };
        self.add(Instr::new(opcode.name(), op, shape), &[node])
    }

    /// Partial results (`a`, each device of a group holding a part of the sum) summed
    /// with `reducer` and brought to `want`: one `reduce-scatter` when `want` splits one
    /// dim of the summed value evenly among each group's members in group order (the
    /// all-reduce-then-slice pattern); a `reduce-scatter` within sub-groups and an
    /// `all-reduce` across them when `want` splits it among fewer devices and replicates
    /// it over the rest ([`scatter_then_replicate`]); else `all-reduce` and a reshard.
    pub(super) fn sum_partials(
        &mut self,
        a: A,
        groups: Vec<Vec<i64>>,
        reducer: CompId,
        want: &Placed,
    ) -> A {
        let g = groups.first().map_or(1, |x| x.len()) as i64;
        let pos: HashMap<i64, i64> = groups
            .iter()
            .flat_map(|grp| grp.iter().enumerate().map(|(i, &d)| (d, i as i64)))
            .collect();
        let rank = a.dims.len();
        let devices = a.p.devices();
        let scatter_dim = (0..rank).find(|&k| {
            let n = a.dims[k];
            let (have, to) = (a.p.chunk(k, n), want.chunk(k, n));
            to * g == have
                && !a.p.padded(k, n)
                && !want.padded(k, n)
                && (0..devices).all(|d| {
                    want.start(d, k, n) - a.p.start(d, k, n)
                        == pos.get(&(d as i64)).copied().unwrap_or(-1) * to
                })
                && others_kept(&a, want, k)
        });
        if let Some(k) = scatter_dim.filter(|_| g > 1) {
            let node = self.reduce_scatter(&a, &groups, k, want, reducer);
            return A { node, p: want.clone(), ..a };
        }
        if let Some((k, within, across)) = scatter_then_replicate(&a, &groups, want) {
            let node = self.reduce_scatter(&a, &within, k, want, reducer);
            let node = self.all_reduce(node, across, reducer);
            return A { node, p: want.clone(), ..a };
        }
        let node = self.all_reduce(a.node, groups, reducer);
        let summed = A { node, ..a };
        self.reshard(summed, want)
    }

    /// `a` summed within each of `groups` and scattered along dim `k` to `want`'s chunk
    /// (the i-th member of a group gets the i-th chunk).
    fn reduce_scatter(
        &mut self,
        a: &A,
        groups: &[Vec<i64>],
        k: usize,
        want: &Placed,
        reducer: CompId,
    ) -> NodeIndex {
        let mut local = a.p.local_dims(&a.dims);
        local[k] = want.chunk(k, a.dims[k]);
        let shape = Shape::array(a.elem, &udims(&local));
        self.reducing(Opcode::ReduceScatter, a.node, groups, reducer, Some(k), shape)
    }

    pub(super) fn replicate(&mut self, v: &PV) -> PV {
        match v {
            PV::Arr(a) => {
                let to = Placed::replicated(a.dims.len(), self.n);
                PV::Arr(self.reshard(a.clone(), &to))
            }
            PV::Tup(items) => PV::Tup(items.iter().map(|x| self.replicate(x)).collect()),
            PV::Token(_) | PV::Manual(_) => v.clone(),
        }
    }

    /// `v` with every array leaf resharded to `specs` (leaf order).
    pub(super) fn reshard_tree(&mut self, v: &PV, specs: &mut std::slice::Iter<'_, Placed>) -> PV {
        match v {
            PV::Arr(a) => match specs.next() {
                Some(p) => PV::Arr(self.reshard(a.clone(), p)),
                None => v.clone(),
            },
            PV::Tup(items) => PV::Tup(items.iter().map(|x| self.reshard_tree(x, specs)).collect()),
            PV::Token(_) | PV::Manual(_) => v.clone(),
        }
    }

    /// `v` (the value `ins` forwards: a tuple's operands, a tuple element) resharded to
    /// the sharding `ins` carries, as GSPMD reshards a `tuple` or `get-tuple-element`;
    /// unchanged when it carries none.
    pub(super) fn in_own_sharding(&mut self, ins: &Instr, v: PV) -> Result<PV, Diagnostic> {
        if ins.sharding.is_none() {
            return Ok(v);
        }
        let wants = self.leaf_wants(ins)?;
        Ok(self.reshard_tree(&v, &mut wants.iter()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_groups_print_in_iota_form() {
        assert_eq!(
            replica_groups(&[vec![0, 1], vec![2, 3]]),
            ReplicaGroups::Iota(IotaList { dims: vec![2, 2], reshape: vec![4], transpose: vec![] })
        );
        match replica_groups(&[vec![0, 2], vec![1, 3]]) {
            ReplicaGroups::Iota(l) => {
                assert_eq!((l.reshape, l.transpose), (vec![2, 2], vec![1, 0]))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(replica_groups(&[vec![0, 3], vec![1, 2]]), ReplicaGroups::Explicit(_)));
    }
}
