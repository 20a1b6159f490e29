//! Gather and scatter sharding rules, GSPMD's.
//!
//! Three kinds of dimension carry a sharding through a gather (and, mirrored, a scatter):
//!
//! - **Index pass-through**: every indices dim but the index vector dim is a batch dim of
//!   the output (the updates' scatter dims), in order.
//! - **Operand pass-through**: an operand dim sliced whole lands on its offset (window)
//!   dim of the output (updates).
//! - **Index-parallel**: an indices dim along which the index into some operand dim is an
//!   `iota` (GSPMD's `GetGatherParallelBatchDims`: `iota`, broadcast of one, an `s32`
//!   constant counting along a dim, or a `concatenate` of such pieces along the index
//!   vector dim), or an explicit batching dim. Element `k` along it reads operand row `k`
//!   only, so the operand, the indices and the output (updates) can all be split there
//!   alike.
//!
//! Forward, the candidates are offered one after the other to the instruction's sharding
//! as GSPMD's `InferShardingFromOperands` does (each may refine or merge into what the
//! earlier ones left); backward, GSPMD's `GetShardingFromUser` picks or merges the
//! parallel and pass-through shardings the output implies.
//!
//! Not done: GSPMD also follows indices read from loop state (a `get-tuple-element` of a
//! `while` body's parameter) back to the iota the loop was entered with.

use hlo_ir::literal::{Literal, LiteralData};
use hlo_ir::op::{GatherDims, ScatterDims};
use hlo_ir::{Computation, ElemType, NodeIndex, Op, Opcode};

use super::spec::{Spec, Tiling, better, dims, invert, map_dims, more_specific};
use super::{Leaves, Rule};

/// Index-parallel dims: (indices dim, operand dim) pairs, sorted by the indices dim (the
/// order their output/updates dims come in).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Parallel {
    pairs: Vec<(usize, usize)>,
}

/// The dim along which `n` counts `0, 1, 2, ...` (GSPMD's `GetDimensionForIota`).
fn iota_dim(c: &Computation, n: NodeIndex) -> Option<usize> {
    let i = c.instr(n);
    if let Op::Iota { dimension } = i.op {
        return Some(dimension as usize);
    }
    let a = i.shape.as_array()?;
    if a.elem != ElemType::S32 {
        return None;
    }
    match &i.op {
        Op::Constant(Literal::Array(LiteralData::Int(v))) => {
            let d = dims(&i.shape)?;
            if v.len() as i64 != d.iter().product::<i64>() {
                return None;
            }
            (0..d.len()).find(|&k| {
                d[k] > 1 && {
                    let inner: i64 = d[k + 1..].iter().product();
                    v.iter().enumerate().all(|(p, &x)| (p as i64 / inner) % d[k] == x)
                }
            })
        }
        Op::Broadcast { dimensions } => {
            let d = iota_dim(c, *c.operands(n).first()?)?;
            dimensions.get(d).map(|&x| x as usize)
        }
        _ => None,
    }
}

/// GSPMD's `GetGatherScatterBatchParallelDims`, plus the explicit batching dims.
fn parallel_dims(
    c: &Computation,
    operand: NodeIndex,
    indices: NodeIndex,
    slice_sizes: &[i64],
    ivd: usize,
    index_map: &[i64],
    batching: impl Iterator<Item = (usize, usize)>,
) -> Option<Parallel> {
    let od = dims(&c.instr(operand).shape)?;
    // Look through copies for a concatenate of index pieces.
    let mut x = indices;
    while c.instr(x).op.opcode() == Opcode::Copy {
        x = *c.operands(x).first()?;
    }
    let indices = if matches!(c.instr(x).op, Op::Concatenate { .. }) { x } else { indices };
    let id = dims(&c.instr(indices).shape)?;
    let count_of = |n: NodeIndex| -> usize {
        dims(&c.instr(n).shape).and_then(|d| d.get(ivd).copied()).unwrap_or(1) as usize
    };
    let mut in_dim: Vec<Option<usize>> = vec![None; index_map.len()];
    match c.instr(indices).op {
        Op::Concatenate { dimension } if dimension as usize == ivd => {
            let mut at = 0;
            for o in c.operands(indices) {
                let k = count_of(o);
                if let Some(d) = iota_dim(c, o).filter(|&d| d != ivd) {
                    for slot in in_dim.iter_mut().skip(at).take(k) {
                        *slot = Some(d);
                    }
                }
                at += k;
            }
        }
        _ => {
            if let Some(d) = iota_dim(c, indices).filter(|&d| d != ivd) {
                in_dim = vec![Some(d); count_of(indices)];
            }
        }
    }
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for (k, d) in in_dim.iter().enumerate() {
        let Some(d) = *d else { continue };
        if pairs.iter().any(|p| p.0 == d) {
            return None;
        }
        let o = *index_map.get(k)? as usize;
        if slice_sizes.get(o) == Some(&1) {
            if od.get(o) != id.get(d) {
                return None;
            }
            pairs.push((d, o));
        }
    }
    for (d, o) in batching {
        if !pairs.iter().any(|p| p.0 == d || p.1 == o) {
            pairs.push((d, o));
        }
    }
    pairs.sort_unstable();
    (!pairs.is_empty()).then_some(Parallel { pairs })
}

/// Index dim -> output (updates) dim: the indices dims but the index vector dim, in
/// order, onto the output dims that are not offset (window) dims.
fn index_passthrough(
    irank: usize,
    out_rank: usize,
    window: &[i64],
    ivd: usize,
) -> Vec<Option<usize>> {
    let mut batch = (0..out_rank).filter(|d| !window.contains(&(*d as i64)));
    (0..irank).map(|d| if d == ivd { None } else { batch.next() }).collect()
}

/// Operand dim -> output offset (updates window) dim for operand dims sliced whole
/// (GSPMD's `GetGatherScatterOperandPassthroughOperandDims`).
fn operand_passthrough(
    od: &[i64],
    collapsed: &[i64],
    window: &[i64],
    slice_sizes: &[i64],
) -> Vec<Option<usize>> {
    let mut map = vec![None; od.len()];
    let mut k = 0;
    for (d, slot) in map.iter_mut().enumerate() {
        if collapsed.contains(&(d as i64)) {
            continue;
        }
        let w = window.get(k).copied();
        let prev = k.checked_sub(1).and_then(|p| window.get(p)).copied();
        k += 1;
        if slice_sizes.get(d) != od.get(d) {
            continue;
        }
        if let Some(w) = w
            && prev.is_none_or(|p| p < w)
        {
            *slot = Some(w as usize);
        }
    }
    map
}

/// Operand dim -> output (updates) dim for the parallel pairs.
fn parallel_operand_map(
    p: &Parallel,
    to_out: &[Option<usize>],
    orank: usize,
) -> Vec<Option<usize>> {
    let mut map = vec![None; orank];
    for &(i, o) in &p.pairs {
        if let Some(&Some(t)) = to_out.get(i) {
            map[o] = Some(t);
        }
    }
    map
}

/// Index dim -> output (updates) dim for the parallel pairs only.
fn parallel_index_map(p: &Parallel, to_out: &[Option<usize>]) -> Vec<Option<usize>> {
    let mut map = vec![None; to_out.len()];
    for &(i, _) in &p.pairs {
        map[i] = to_out[i];
    }
    map
}

/// A sharding for the instruction, improved candidate by candidate as GSPMD's
/// `MaybeImproveInstructionSharding`: any sharding is better than none; after that only
/// a strictly more specific or a merged one replaces it.
struct Fold {
    cur: Option<Spec>,
    from: Option<NodeIndex>,
    changed: bool,
    level: u8,
}

impl Fold {
    fn new(cur: Option<Spec>, level: u8) -> Fold {
        Fold { cur, from: None, changed: false, level }
    }
    fn offer(&mut self, cand: Option<Spec>, from: NodeIndex) {
        let Some(cand) = cand else { return };
        let new = match &self.cur {
            None => Some(cand),
            Some(cur) => better(cur, &cand, self.level),
        };
        if let Some(new) = new {
            self.cur = Some(new);
            self.from = Some(from);
            self.changed = true;
        }
    }
}

/// A leaf that can carry a sharding through (not maximal, not manual).
fn spatial(s: Option<&Spec>) -> Option<&Spec> {
    s.filter(|s| matches!(s, Spec::Replicated | Spec::Tiled(_)))
}

/// `map_dims` of a spatial leaf: replication stays replication.
fn map_leaf(s: &Spec, map: &[Option<usize>], rank: usize) -> Option<Spec> {
    match s {
        Spec::Tiled(t) => Some(map_dims(t, map, rank)?.into_spec()),
        Spec::Replicated => Some(Spec::Replicated),
        _ => None,
    }
}

/// A pass-through candidate: only a tiling that survives counts (GSPMD's
/// `PassthroughOperandToGatherOutputOrScatterUpdate` gives none otherwise).
fn map_tiled(s: &Spec, map: &[Option<usize>], rank: usize) -> Option<Spec> {
    map_leaf(s, map, rank).filter(|s| matches!(s, Spec::Tiled(_)))
}

/// The merge of two partial shardings over the same devices when it has at least
/// `min_tiles` tiles (GSPMD's `MergeShardingIfCompatible` with a minimum).
fn merge_min(to_merge: &Spec, dst: &Spec, min_tiles: i64) -> Option<Spec> {
    match (to_merge, dst) {
        (Spec::Tiled(_), Spec::Replicated) => Some(to_merge.clone()),
        (Spec::Tiled(a), Spec::Tiled(b)) if b.repl > 1 && a.num_devices() == b.num_devices() => {
            a.merge(b).filter(|m| m.num_tiles() >= min_tiles).map(Tiling::into_spec)
        }
        _ => None,
    }
}

/// GSPMD's `MergeShardingIfCompatible(to_merge, dst)`: `dst` refined by `to_merge` when
/// compatible (a replicated `dst` takes `to_merge`), else `dst`.
fn merge_if_compatible(to_merge: &Spec, dst: &Spec) -> Spec {
    merge_min(to_merge, dst, dst.num_tiles() + 1).unwrap_or_else(|| dst.clone())
}

/// The operand sharding the output implies (GSPMD's `GatherOperandShardingFromOutput`
/// and `ScatterUpdateShardingFromOutput`): parallel and pass-through merged when both are
/// partial and compatible, else the pass-through one if more specific, else the parallel
/// one.
fn pick(parallel: Option<Spec>, passthrough: Option<Spec>) -> Option<Spec> {
    match (parallel, passthrough) {
        (p, None) => p,
        (None, t) => t,
        (Some(p), Some(t)) => {
            if let (Spec::Tiled(a), Spec::Tiled(b)) = (&p, &t)
                && a.repl > 1
                && let Some(m) = merge_min(&p, &t, a.num_tiles().max(b.num_tiles()) + 1)
            {
                return Some(m);
            }
            Some(if more_specific(&t, &p) { t } else { p })
        }
    }
}

/// The parallel and pass-through shardings an output (scatter: result) sharding implies
/// for the operand (scatter: updates), picked or merged.
fn from_output(
    out: &Spec,
    parallel_map: Option<Vec<Option<usize>>>,
    passthrough_map: &[Option<usize>],
    rank: usize,
) -> Option<Spec> {
    if matches!(out, Spec::Replicated) {
        return Some(Spec::Replicated);
    }
    let parallel = parallel_map.and_then(|m| map_leaf(out, &m, rank));
    pick(parallel, map_tiled(out, passthrough_map, rank))
}

/// Gather: the output's sharding from the indices (pass-through and parallel dims) and
/// the operand (parallel and pass-through dims).
pub fn gather_forward<'a>(
    c: &Computation,
    n: NodeIndex,
    g: &GatherDims,
    level: u8,
    get: &dyn Fn(NodeIndex) -> &'a Leaves,
) -> Option<(Leaves, Rule, Option<NodeIndex>)> {
    let ops = c.operands(n);
    let (operand, indices) = (*ops.first()?, *ops.get(1)?);
    let od = dims(&c.instr(operand).shape)?;
    let irank = dims(&c.instr(indices).shape)?.len();
    let out_rank = dims(&c.instr(n).shape)?.len();
    let leaf = |x: NodeIndex| spatial(get(x).first()?.as_ref());
    let to_out = index_passthrough(irank, out_rank, &g.offset_dims, g.index_vector_dim as usize);
    let mut f = Fold::new(get(n).first().cloned().flatten(), level);
    if let Some(s) = leaf(indices) {
        f.offer(map_leaf(s, &to_out, out_rank), indices);
    }
    let par = gather_parallel(c, operand, indices, g);
    if let Some(p) = &par {
        if let Some(s) = leaf(operand) {
            f.offer(map_leaf(s, &parallel_operand_map(p, &to_out, od.len()), out_rank), operand);
        }
        if let Some(s) = leaf(indices) {
            f.offer(map_leaf(s, &parallel_index_map(p, &to_out), out_rank), indices);
        }
    }
    if let Some(s) = leaf(operand) {
        // The parallel dims' tiling does not pass through the window.
        let pdims: Vec<usize> = par.iter().flat_map(|p| p.pairs.iter().map(|x| x.1)).collect();
        let filtered = match s {
            Spec::Tiled(t) => t.partially_replicate(&pdims).into_spec(),
            s => s.clone(),
        };
        let map = operand_passthrough(&od, &gather_collapsed(g), &g.offset_dims, &g.slice_sizes);
        f.offer(map_tiled(&filtered, &map, out_rank), operand);
    }
    f.changed.then(|| (vec![f.cur], "gather", f.from))
}

/// Gather: the operand's (`slot` 0) or the indices' (`slot` 1) sharding from the
/// output's.
pub fn gather_backward(
    c: &Computation,
    user: NodeIndex,
    g: &GatherDims,
    slot: usize,
    out: &Spec,
) -> Option<(Leaves, Rule)> {
    let out = spatial(Some(out))?;
    let ops = c.operands(user);
    let (operand, indices) = (*ops.first()?, *ops.get(1)?);
    let od = dims(&c.instr(operand).shape)?;
    let irank = dims(&c.instr(indices).shape)?.len();
    let out_rank = dims(&c.instr(user).shape)?.len();
    let to_out = index_passthrough(irank, out_rank, &g.offset_dims, g.index_vector_dim as usize);
    let s = match slot {
        1 => map_leaf(out, &invert(&to_out, out_rank), irank)?,
        0 => {
            let parallel = gather_parallel(c, operand, indices, g)
                .map(|p| invert(&parallel_operand_map(&p, &to_out, od.len()), out_rank));
            let pass =
                operand_passthrough(&od, &gather_collapsed(g), &g.offset_dims, &g.slice_sizes);
            from_output(out, parallel, &invert(&pass, out_rank), od.len())?
        }
        _ => return None,
    };
    Some((vec![Some(s)], "gather (from user)"))
}

fn gather_collapsed(g: &GatherDims) -> Vec<i64> {
    g.collapsed_slice_dims.iter().chain(&g.operand_batching_dims).copied().collect()
}

fn gather_parallel(
    c: &Computation,
    operand: NodeIndex,
    indices: NodeIndex,
    g: &GatherDims,
) -> Option<Parallel> {
    let batching = g
        .start_indices_batching_dims
        .iter()
        .zip(&g.operand_batching_dims)
        .map(|(&i, &o)| (i as usize, o as usize));
    parallel_dims(
        c,
        operand,
        indices,
        &g.slice_sizes,
        g.index_vector_dim as usize,
        &g.start_index_map,
        batching,
    )
}

/// A scatter's shape facts: operand dims, updates dims, indices rank, the operand dims'
/// slice sizes, the inserted (and batching) dims and the index-parallel dims.
struct ScatterInfo {
    od: Vec<i64>,
    ud: Vec<i64>,
    irank: usize,
    slice: Vec<i64>,
    inserted: Vec<i64>,
    par: Option<Parallel>,
}

impl ScatterInfo {
    fn new(c: &Computation, n: NodeIndex, sd: &ScatterDims) -> Option<ScatterInfo> {
        let ops = c.operands(n);
        let k = ops.len() / 2;
        let (operand, indices, update) = (*ops.first()?, *ops.get(k)?, *ops.get(k + 1)?);
        let od = dims(&c.instr(operand).shape)?;
        let ud = dims(&c.instr(update).shape)?;
        let irank = dims(&c.instr(indices).shape)?.len();
        let inserted: Vec<i64> =
            sd.inserted_window_dims.iter().chain(&sd.input_batching_dims).copied().collect();
        // GSPMD's `GetScatterSliceSize`: 1 on inserted dims, the window's size elsewhere.
        let mut slice = vec![1i64; od.len()];
        let mut w = sd.update_window_dims.iter();
        for (d, s) in slice.iter_mut().enumerate() {
            if !inserted.contains(&(d as i64)) {
                *s = *ud.get(*w.next()? as usize)?;
            }
        }
        let batching = sd
            .scatter_indices_batching_dims
            .iter()
            .zip(&sd.input_batching_dims)
            .map(|(&i, &o)| (i as usize, o as usize));
        let par = parallel_dims(
            c,
            operand,
            indices,
            &slice,
            sd.index_vector_dim as usize,
            &sd.scatter_dims_to_operand_dims,
            batching,
        );
        Some(ScatterInfo { od, ud, irank, slice, inserted, par })
    }
    /// Indices dim -> updates dim.
    fn to_update(&self, sd: &ScatterDims) -> Vec<Option<usize>> {
        index_passthrough(
            self.irank,
            self.ud.len(),
            &sd.update_window_dims,
            sd.index_vector_dim as usize,
        )
    }
    /// Operand (result) dim -> updates window dim, for dims scattered whole.
    fn passthrough(&self, sd: &ScatterDims) -> Vec<Option<usize>> {
        operand_passthrough(&self.od, &self.inserted, &sd.update_window_dims, &self.slice)
    }
}

/// Scatter: each result's sharding from its operand, then (when the indices or an update
/// has one) from the parallel dims of operands, indices and updates, then from the
/// updates' pass-through window dims.
pub fn scatter_forward<'a>(
    c: &Computation,
    n: NodeIndex,
    sd: &ScatterDims,
    level: u8,
    get: &dyn Fn(NodeIndex) -> &'a Leaves,
) -> Option<(Leaves, Rule, Option<NodeIndex>)> {
    let ops = c.operands(n);
    let k = ops.len() / 2;
    let indices = *ops.get(k)?;
    let update = |i: usize| ops[k + 1 + i];
    let leaf = |x: NodeIndex| spatial(get(x).first()?.as_ref());
    let cur = get(n);
    let mut folds: Vec<Fold> =
        (0..k).map(|i| Fold::new(cur.get(i).cloned().flatten(), level)).collect();
    for (i, f) in folds.iter_mut().enumerate() {
        f.offer(leaf(ops[i]).cloned(), ops[i]);
    }
    if leaf(indices).is_some() || (0..k).any(|i| leaf(update(i)).is_some()) {
        let info = ScatterInfo::new(c, n, sd)?;
        let orank = info.od.len();
        if let Some(p) = &info.par {
            // The operand's parallel dims are the result's own; the indices' and the
            // updates' map onto them.
            let own: Vec<Option<usize>> =
                (0..orank).map(|d| p.pairs.iter().any(|x| x.1 == d).then_some(d)).collect();
            for (i, f) in folds.iter_mut().enumerate() {
                if let Some(s) = leaf(ops[i]) {
                    f.offer(map_leaf(s, &own, orank), ops[i]);
                }
            }
            if let Some(s) = leaf(indices) {
                let mut map = vec![None; info.irank];
                for &(i, o) in &p.pairs {
                    map[i] = Some(o);
                }
                let cand = map_leaf(s, &map, orank);
                for f in folds.iter_mut() {
                    f.offer(cand.clone(), indices);
                }
            }
            let from_update =
                invert(&parallel_operand_map(p, &info.to_update(sd), orank), info.ud.len());
            for (i, f) in folds.iter_mut().enumerate() {
                if let Some(s) = leaf(update(i)) {
                    f.offer(map_leaf(s, &from_update, orank), update(i));
                }
            }
        }
        let pass = invert(&info.passthrough(sd), info.ud.len());
        for (i, f) in folds.iter_mut().enumerate() {
            if let Some(s) = leaf(update(i)) {
                f.offer(map_tiled(s, &pass, orank), update(i));
            }
        }
    }
    if !folds.iter().any(|f| f.changed) {
        return None;
    }
    let from = folds.iter().find_map(|f| f.from);
    Some((folds.into_iter().map(|f| f.cur).collect(), "scatter", from))
}

/// Scatter: an operand's sharding is its result's; the indices' comes from the updates'
/// scatter dims; an update's from the result (parallel and pass-through dims) merged with
/// what the indices imply.
pub fn scatter_backward<'a>(
    c: &Computation,
    user: NodeIndex,
    sd: &ScatterDims,
    slot: usize,
    get: &dyn Fn(NodeIndex) -> &'a Leaves,
) -> Option<(Leaves, Rule)> {
    const RULE: Rule = "scatter (from user)";
    let ops = c.operands(user);
    let k = ops.len() / 2;
    let us = get(user);
    if !us.iter().any(|l| spatial(l.as_ref()).is_some()) {
        return None;
    }
    if slot < k {
        return Some((vec![us.get(slot).cloned().flatten()], RULE));
    }
    let info = ScatterInfo::new(c, user, sd)?;
    let leaf = |x: NodeIndex| spatial(get(x).first()?.as_ref());
    let to_update = info.to_update(sd);
    if slot == k {
        // GSPMD's `FindCommonSharding` over the updates that have a sharding: their
        // merge if all are compatible, else the first.
        let from_updates: Vec<Spec> = (0..k)
            .filter_map(|i| leaf(ops[k + 1 + i]))
            .filter_map(|s| map_leaf(s, &invert(&to_update, info.ud.len()), info.irank))
            .collect();
        let first = from_updates.first()?.clone();
        let mut common = first.clone();
        for s in &from_updates[1..] {
            match merge_min(s, &common, common.num_tiles()) {
                _ if s.same(&common) => {}
                Some(m) => common = m,
                None => {
                    common = first;
                    break;
                }
            }
        }
        return Some((vec![Some(common)], RULE));
    }
    let u = slot - k - 1;
    let from_indices = match leaf(ops[k]) {
        Some(s) => map_leaf(s, &to_update, info.ud.len())?,
        None => Spec::Replicated,
    };
    let out = us.get(u).cloned().flatten().unwrap_or(Spec::Replicated);
    let orank = info.od.len();
    let parallel = info.par.as_ref().map(|p| parallel_operand_map(p, &to_update, orank));
    if let Some(fo) = spatial(Some(&out))
        .and_then(|out| from_output(out, parallel, &info.passthrough(sd), info.ud.len()))
    {
        // The result's sharding leads (parallel first, as the partitioner does).
        let m = merge_if_compatible(&from_indices, &fo);
        if matches!(m, Spec::Tiled(_)) {
            return Some((vec![Some(m)], RULE));
        }
    }
    matches!(from_indices, Spec::Tiled(_)).then(|| (vec![Some(from_indices)], RULE))
}

/// Scatter: where each updates dim (full-size window dims no index addresses, and the
/// scatter dims paired with batching dims) and each index dim (batching dims only) lands
/// in the operand/output.
pub(crate) fn scatter_maps(
    sd: &hlo_ir::op::ScatterDims,
    od: &[i64],
    ud: &[i64],
    irank: usize,
) -> (Vec<Option<usize>>, Vec<Option<usize>>) {
    let has = |v: &[i64], d: usize| v.contains(&(d as i64));
    let window: Vec<usize> = (0..od.len())
        .filter(|&d| !has(&sd.inserted_window_dims, d) && !has(&sd.input_batching_dims, d))
        .collect();
    let mut umap = vec![None; ud.len()];
    for (i, &d) in window.iter().enumerate() {
        if let Some(&w) = sd.update_window_dims.get(i)
            && !has(&sd.scatter_dims_to_operand_dims, d)
            && ud.get(w as usize) == od.get(d)
        {
            umap[w as usize] = Some(d);
        }
    }
    // Updates scatter dims, in order, are the indices dims without the index vector dim.
    let scatter_pos: Vec<usize> =
        (0..ud.len()).filter(|&k| !has(&sd.update_window_dims, k)).collect();
    let mut imap = vec![None; irank];
    for (k, &od_dim) in sd.input_batching_dims.iter().enumerate() {
        let Some(&idim) = sd.scatter_indices_batching_dims.get(k) else { continue };
        let idim = idim as usize;
        if let Some(slot) = imap.get_mut(idim) {
            *slot = Some(od_dim as usize);
        }
        let pos = idim - usize::from(idim as i64 > sd.index_vector_dim);
        if let Some(&u) = scatter_pos.get(pos) {
            umap[u] = Some(od_dim as usize);
        }
    }
    (umap, imap)
}

/// Gather: where each operand dim (pass-through offset dims only) and each index dim
/// (batch dims, not the index vector dim) lands in the output.
pub(crate) fn gather_maps(
    g: &hlo_ir::op::GatherDims,
    od: &[i64],
    irank: usize,
    out_rank: usize,
) -> (Vec<Option<usize>>, Vec<Option<usize>>) {
    let mut omap = vec![None; od.len()];
    let mut offsets = g.offset_dims.iter();
    for (d, slot) in omap.iter_mut().enumerate() {
        let di = d as i64;
        if g.collapsed_slice_dims.contains(&di) || g.operand_batching_dims.contains(&di) {
            continue;
        }
        let Some(&o) = offsets.next() else { break };
        if g.slice_sizes.get(d) == Some(&od[d]) && !g.start_index_map.contains(&di) {
            *slot = Some(o as usize);
        }
    }
    let batch_out: Vec<usize> =
        (0..out_rank).filter(|d| !g.offset_dims.contains(&(*d as i64))).collect();
    let mut imap = vec![None; irank];
    let mut b = batch_out.iter();
    for (d, slot) in imap.iter_mut().enumerate() {
        if d as i64 == g.index_vector_dim {
            continue;
        }
        if let Some(&o) = b.next() {
            *slot = Some(o);
        }
    }
    (omap, imap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gather_pairs(body: &str) -> Option<Vec<(usize, usize)>> {
        let m =
            hlo_check::parse(&format!("HloModule m\nENTRY e {{\n{body}\n}}\n")).expect("parses");
        let c = m.comp(m.entry);
        let n = c.root()?;
        let Op::Gather(g) = &c.instr(n).op else { return None };
        let ops = c.operands(n);
        gather_parallel(c, ops[0], ops[1], g).map(|p| p.pairs)
    }

    #[test]
    fn iota_pieces_make_parallel_dims() {
        // The first index column counts along indices dim 1: operand dim 0 is parallel.
        let concat = "  t = f32[8,4,2] parameter(0)\n  i = s32[1,8,4] parameter(1)\n  \
             r = s32[1,8,4] iota(), iota_dimension=1\n  \
             x = s32[2,8,4] concatenate(r, i), dimensions={0}\n  \
             ROOT g = f32[8,4,2] gather(t, x), offset_dims={2}, collapsed_slice_dims={0,1}, \
             start_index_map={0,1}, index_vector_dim=0, slice_sizes={1,1,2}";
        assert_eq!(gather_pairs(concat), Some(vec![(1, 0)]));
        // A broadcast iota, and a counting constant.
        let bcast = "  t = f32[4,6] parameter(0)\n  r = s32[4] iota(), iota_dimension=0\n  \
             x = s32[4,1] broadcast(r), dimensions={0}\n  \
             ROOT g = f32[4,6] gather(t, x), offset_dims={1}, collapsed_slice_dims={0}, \
             start_index_map={0}, index_vector_dim=1, slice_sizes={1,6}";
        assert_eq!(gather_pairs(bcast), Some(vec![(0, 0)]));
        let constant = "  t = f32[3,6] parameter(0)\n  x = s32[3,1] constant({{0},{1},{2}})\n  \
             ROOT g = f32[3,6] gather(t, x), offset_dims={1}, collapsed_slice_dims={0}, \
             start_index_map={0}, index_vector_dim=1, slice_sizes={1,6}";
        assert_eq!(gather_pairs(constant), Some(vec![(0, 0)]));
        // Sizes that differ, or a slice wider than one row, are not parallel.
        let wide = "  t = f32[4,6] parameter(0)\n  x = s32[4,1] iota(), iota_dimension=0\n  \
             ROOT g = f32[4,2,6] gather(t, x), offset_dims={1,2}, collapsed_slice_dims={}, \
             start_index_map={0}, index_vector_dim=1, slice_sizes={2,6}";
        assert_eq!(gather_pairs(wide), None);
    }
}
