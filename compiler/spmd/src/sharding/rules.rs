//! Per-op sharding rules, GSPMD's: the sharding an instruction gets from its operands
//! (forward) and the sharding an operand gets from one of its users (backward).
//!
//! Every rule works on leaves: an instruction's sharding is one optional [`Spec`] per
//! array leaf of its shape (a tuple's leaves flattened), so tuples, get-tuple-element and
//! loop state are index arithmetic. Most rules are one [`map_dims`](super::spec::map_dims): which data dimension
//! of the source lands where in the destination; dropped dimensions have their tiling
//! moved into the replication group (partial replication).
//!
//! Aggressiveness gates the op types, as GSPMD's: level 0 passes through only ops whose
//! sharding is unambiguous (elementwise, reshape, transpose, tuples, ...), level 1 adds
//! every other op except broadcast, broadcast joins backward at level 2 and forward at
//! level 3.

use hlo_ir::op::{Branches, DotDims};
use hlo_ir::{CompId, Computation, Module, NodeIndex, Op, Opcode, Shape};

use super::gather_scatter;
use super::spec::{Spec, Tiling, combine, dims, invert, map_spec, more_specific, replicate_dims};
use super::{Leaves, Rule};

/// The leaf range of tuple element `index` of `shape`.
pub fn leaf_range(shape: &Shape, index: usize) -> Option<std::ops::Range<usize>> {
    let t = shape.tuple_elements()?;
    let start: usize = t.get(..index)?.iter().map(Shape::leaf_count).sum();
    Some(start..start + t.get(index)?.leaf_count())
}

fn one(s: Option<Spec>) -> Leaves {
    vec![s]
}

/// Whether this op takes part at this aggressiveness level.
pub fn allowed(op: &Op, forward: bool, level: u8) -> bool {
    let code = op.opcode();
    let pass_through = code.is_elementwise()
        || matches!(
            code,
            Opcode::Copy
                | Opcode::Call
                | Opcode::Concatenate
                | Opcode::DynamicSlice
                | Opcode::DynamicUpdateSlice
                | Opcode::GetTupleElement
                | Opcode::OptBarrier
                | Opcode::Reshape
                | Opcode::Tuple
                | Opcode::Transpose
                | Opcode::While
                | Opcode::Bitcast
        )
        || matches!(op, Op::CustomCall(c) if c.is_single_device_identity());
    match code {
        Opcode::Broadcast => level >= if forward { 3 } else { 2 },
        _ if pass_through => true,
        _ => level >= 1,
    }
}

/// A sharding-propagation barrier: `ShardBarrierFrom` lets no sharding flow from its
/// operand to its users, `ShardBarrierTo` none from its users to its operand (which sees
/// a replicated use). Both are removed once propagation ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Barrier {
    From,
    To,
}

/// The barrier an instruction is, if any.
pub fn barrier(op: &Op) -> Option<Barrier> {
    match op {
        Op::CustomCall(cc) if cc.target == "ShardBarrierFrom" => Some(Barrier::From),
        Op::CustomCall(cc) if cc.target == "ShardBarrierTo" => Some(Barrier::To),
        _ => None,
    }
}

/// Custom-calls whose result is tiled as their operands are (GSPMD's pass-through
/// custom ops): `X64Combine` (two halves into one 64-bit value) and the per-element
/// resizes and `Cholesky` on an array of the same rank.
pub fn passthrough_custom_call(op: &Op, shape: &Shape) -> bool {
    let Op::CustomCall(cc) = op else { return false };
    shape.as_array().is_some()
        && matches!(
            cc.target.as_str(),
            "X64Combine"
                | "ResizeNearest"
                | "ResizeBilinear"
                | "ResizeNearestGrad"
                | "ResizeBilinearGrad"
                | "Cholesky"
        )
}

/// The borders of a manual region: a sharding does not cross them (inside is `{manual}`,
/// outside the written sharding).
pub fn manual_border(target: &str) -> bool {
    matches!(target, "SPMDFullToShardShape" | "SPMDShardToFullShape")
}

/// The sharding of `n` from its operands' (`get`), with the rule and the operand it came
/// from. `None` when the op has no forward rule or its operands carry nothing yet.
pub fn forward<'a>(
    c: &Computation,
    n: NodeIndex,
    level: u8,
    get: &dyn Fn(NodeIndex) -> &'a Leaves,
) -> Option<(Leaves, Rule, Option<NodeIndex>)> {
    let i = c.instr(n);
    let ops = c.operands(n);
    let leaf = |k: usize| -> Option<&'a Spec> { get(*ops.get(k)?).first()?.as_ref() };
    let out_dims = || dims(&i.shape);
    let merge = level >= 1;
    let code = i.op.opcode();
    if barrier(&i.op) == Some(Barrier::From) {
        return None;
    }
    // Elementwise and the Sharding-like identities: the most specific operand sharding,
    // merged with the others' from level 1.
    if code.is_elementwise()
        || matches!(code, Opcode::Copy | Opcode::OptBarrier) && !i.shape.is_tuple()
        || matches!(&i.op, Op::CustomCall(cc) if cc.is_single_device_identity() && !manual_border(&cc.target) && !i.shape.is_tuple())
        || passthrough_custom_call(&i.op, &i.shape)
    {
        let rank = i.shape.as_array()?.rank();
        let mut best: Option<(Spec, NodeIndex)> = None;
        for (k, &o) in ops.iter().enumerate() {
            if c.instr(o).shape.as_array().map(|a| a.rank()) != Some(rank) {
                continue;
            }
            let Some(s) = leaf(k) else { continue };
            if matches!(s, Spec::Maximal(_) | Spec::Manual) {
                continue;
            }
            best = Some(match best {
                None => (s.clone(), o),
                Some((b, from)) => {
                    let m = combine(&b, s, merge);
                    let from = if more_specific(s, &b) && m.same(s) { o } else { from };
                    (m, from)
                }
            });
        }
        let (s, from) = best?;
        return Some((one(Some(s)), "elementwise", Some(from)));
    }
    match &i.op {
        Op::Transpose { dimensions } => {
            let s = leaf(0)?;
            let perm: Vec<usize> = dimensions.iter().map(|&d| d as usize).collect();
            let t = match s {
                Spec::Tiled(t) => Spec::Tiled(t.transpose(&perm)),
                other => other.clone(),
            };
            Some((one(Some(t)), "transpose", Some(ops[0])))
        }
        Op::Reshape { .. } | Op::Plain(Opcode::Bitcast) => {
            let s = leaf(0)?;
            let from = dims(&c.instr(ops[0]).shape)?;
            let to = out_dims()?;
            // Nothing of the tiling survives: no candidate (users may decide).
            let r = match s {
                Spec::Tiled(t) => reshape_tiling(t, &from, &to)?,
                other => other.clone(),
            };
            Some((one(Some(r)), "reshape", Some(ops[0])))
        }
        Op::Broadcast { dimensions } => {
            let s = leaf(0)?;
            let map: Vec<Option<usize>> = dimensions.iter().map(|&d| Some(d as usize)).collect();
            Some((one(Some(map_spec(s, &map, out_dims()?.len())?)), "broadcast", Some(ops[0])))
        }
        Op::Reduce { dimensions, .. } => {
            let n_in = ops.len() / 2;
            let in_rank = dims(&c.instr(ops[0]).shape)?.len();
            let mut best: Option<(Spec, NodeIndex)> = None;
            for (k, &o) in ops.iter().enumerate().take(n_in) {
                if let Some(s) = leaf(k) {
                    best = Some(match best {
                        None => (s.clone(), o),
                        Some((b, f)) => (combine(&b, s, merge), f),
                    });
                }
            }
            let (s, from) = best?;
            let mut map = Vec::with_capacity(in_rank);
            let mut next = 0;
            for d in 0..in_rank {
                if dimensions.contains(&(d as i64)) {
                    map.push(None);
                } else {
                    map.push(Some(next));
                    next += 1;
                }
            }
            let r = map_spec(&s, &map, next)?;
            Some((vec![Some(r); i.shape.leaf_count()], "reduce", Some(from)))
        }
        Op::Dot { dims: dd, .. } => {
            let (l, r) = (leaf(0), leaf(1));
            let lr = dims(&c.instr(ops[0]).shape)?.len();
            let rr = dims(&c.instr(ops[1]).shape)?.len();
            let out_rank = out_dims()?.len();
            let from_l =
                l.and_then(|s| map_spec(s, &dot_operand_to_out(dd, true, lr, rr), out_rank));
            let from_r =
                r.and_then(|s| map_spec(s, &dot_operand_to_out(dd, false, lr, rr), out_rank));
            let bytes = |k: usize| {
                c.instr(ops[k]).shape.as_array().and_then(|a| a.element_count()).unwrap_or(0)
            };
            let (s, from) = match (from_l, from_r) {
                (Some(a), Some(b)) => {
                    // The larger operand leads; the other merges in where compatible.
                    let (p, q, f) = if bytes(1) > bytes(0) && more_specific(&b, &Spec::Replicated)
                        || !more_specific(&a, &Spec::Replicated)
                    {
                        (b, a, ops[1])
                    } else {
                        (a, b, ops[0])
                    };
                    (combine(&p, &q, merge), f)
                }
                (Some(a), None) => (a, ops[0]),
                (None, Some(b)) => (b, ops[1]),
                (None, None) => return None,
            };
            Some((one(Some(s)), "dot", Some(from)))
        }
        Op::Convolution(cv) => {
            let d = &cv.dims;
            let in_rank = dims(&c.instr(ops[0]).shape)?.len();
            let k_rank = dims(&c.instr(ops[1]).shape)?.len();
            let out_rank = out_dims()?.len();
            // Batch and (untouched) spatial dims follow the input; output features follow
            // the kernel's; input features are contracted.
            let mut lmap = vec![None; in_rank];
            lmap[d.input_batch as usize] = Some(d.output_batch as usize);
            for (k, (&is, &os)) in d.input_spatial.iter().zip(&d.output_spatial).enumerate() {
                let w = cv.window.dims.get(k).copied().unwrap_or_default();
                if w.size == 1
                    && w.stride == 1
                    && w.pad_lo == 0
                    && w.pad_hi == 0
                    && w.lhs_dilate == 1
                {
                    lmap[is as usize] = Some(os as usize);
                }
            }
            let mut kmap = vec![None; k_rank];
            kmap[d.kernel_output_feature as usize] = Some(d.output_feature as usize);
            let from_l = leaf(0).and_then(|s| map_spec(s, &lmap, out_rank));
            let from_r = leaf(1).and_then(|s| map_spec(s, &kmap, out_rank));
            let (s, from) = match (from_l, from_r) {
                (Some(a), Some(b)) => (combine(&a, &b, merge), ops[0]),
                (Some(a), None) => (a, ops[0]),
                (None, Some(b)) => (b, ops[1]),
                (None, None) => return None,
            };
            Some((one(Some(s)), "convolution", Some(from)))
        }
        Op::Slice { .. }
        | Op::Pad { .. }
        | Op::ReduceWindow { .. }
        | Op::SelectAndScatter { .. }
        | Op::ReducePrecision { .. }
        | Op::Map { .. } => {
            let s = leaf(0)?;
            let rule = match code {
                Opcode::Slice => "slice",
                Opcode::Pad => "pad",
                Opcode::ReduceWindow => "reduce-window",
                Opcode::SelectAndScatter => "select-and-scatter",
                _ => "first operand",
            };
            if let Op::ReduceWindow { window, .. } = &i.op
                && window.dims.iter().any(|w| w.lhs_dilate != 1 || w.rhs_dilate != 1)
            {
                return None;
            }
            Some((vec![Some(s.clone()); i.shape.leaf_count()], rule, Some(ops[0])))
        }
        Op::Reverse { dimensions } => {
            let s = leaf(0)?;
            let d: Vec<usize> = dimensions.iter().map(|&d| d as usize).collect();
            let r = match s {
                Spec::Tiled(t) => Spec::Tiled(t.reverse(&d)),
                o => o.clone(),
            };
            Some((one(Some(r)), "reverse", Some(ops[0])))
        }
        Op::DynamicSlice { .. } => {
            let s = leaf(0)?;
            let sliced = changed_dims(&dims(&c.instr(ops[0]).shape)?, &out_dims()?);
            Some((one(Some(replicate_dims(s, &sliced)?)), "dynamic-slice", Some(ops[0])))
        }
        Op::Plain(Opcode::DynamicUpdateSlice) => {
            if let Some(s) = leaf(0) {
                return Some((one(Some(s.clone())), "dynamic-update-slice", Some(ops[0])));
            }
            let s = leaf(1)?;
            let sliced = changed_dims(&out_dims()?, &dims(&c.instr(ops[1]).shape)?);
            Some((one(Some(replicate_dims(s, &sliced)?)), "dynamic-update-slice", Some(ops[1])))
        }
        Op::Concatenate { .. } => {
            let mut best: Option<(Spec, NodeIndex)> = None;
            for (k, &o) in ops.iter().enumerate() {
                if let Some(s) = leaf(k) {
                    best = Some(match best {
                        None => (s.clone(), o),
                        Some((b, f)) => {
                            if more_specific(s, &b) {
                                (s.clone(), o)
                            } else {
                                (b, f)
                            }
                        }
                    });
                }
            }
            let (s, from) = best?;
            Some((one(Some(s)), "concatenate", Some(from)))
        }
        Op::Sort { dimension, .. } => {
            let mut best: Option<(Spec, NodeIndex)> = None;
            for (k, &o) in ops.iter().enumerate() {
                if let Some(s) = leaf(k) {
                    best = Some(match best {
                        None => (s.clone(), o),
                        Some((b, f)) => (combine(&b, s, merge), f),
                    });
                }
            }
            let (s, from) = best?;
            // GSPMD's: an operand tiled along the sort dimension passes only if some
            // other dimension is free to take that tiling later (the partitioner
            // gathers the sort dimension); the sharding itself passes unchanged.
            if let Spec::Tiled(t) = &s
                && t.tiles.get(*dimension as usize).is_some_and(|&k| k > 1)
            {
                let shape = dims(&c.instr(from).shape)?;
                let movable = (0..t.rank()).any(|d| {
                    d != *dimension as usize
                        && t.tiles[d] == 1
                        && shape.get(d).is_some_and(|&n| n != 1)
                });
                if !movable {
                    return None;
                }
            }
            Some((vec![Some(s); i.shape.leaf_count()], "sort", Some(from)))
        }
        Op::Gather(g) => gather_scatter::gather_forward(c, n, g, level, get),
        Op::Scatter(sd) => gather_scatter::scatter_forward(c, n, sd, level, get),
        Op::Plain(Opcode::Tuple) => {
            let mut out = Vec::new();
            for &o in &ops {
                out.extend(get(o).iter().cloned());
            }
            out.iter().any(Option::is_some).then_some((out, "tuple", None))
        }
        Op::GetTupleElement { index } => {
            let range = leaf_range(&c.instr(ops[0]).shape, *index as usize)?;
            let v = get(ops[0]).get(range)?.to_vec();
            v.iter().any(Option::is_some).then_some((v, "get-tuple-element", Some(ops[0])))
        }
        Op::Plain(Opcode::Copy | Opcode::OptBarrier) => {
            let v = get(ops[0]).clone();
            v.iter().any(Option::is_some).then_some((v, "copy", Some(ops[0])))
        }
        _ => None,
    }
}

/// The sharding operand `slot` of `user` should have, given the user's leaves.
pub fn backward<'a>(
    c: &Computation,
    user: NodeIndex,
    slot: usize,
    level: u8,
    get: &dyn Fn(NodeIndex) -> &'a Leaves,
) -> Option<(Leaves, Rule)> {
    let u = c.instr(user);
    let ops = c.operands(user);
    let opnd = *ops.get(slot)?;
    let oshape = &c.instr(opnd).shape;
    let us = get(user);
    let s = || us.first()?.as_ref();
    let merge = level >= 1;
    if barrier(&u.op) == Some(Barrier::To) {
        // Nothing of the user's sharding crosses; the operand sees a replicated use.
        s()?;
        return Some((one(Some(Spec::Replicated)), "shard barrier (from user)"));
    }
    let code = u.op.opcode();
    if code.is_elementwise()
        || matches!(code, Opcode::Copy) && !u.shape.is_tuple()
        || matches!(&u.op, Op::CustomCall(cc) if cc.is_single_device_identity() && !manual_border(&cc.target) && !u.shape.is_tuple())
        || passthrough_custom_call(&u.op, &u.shape)
    {
        let s = s()?;
        if oshape.as_array()?.rank() != u.shape.as_array()?.rank() {
            return None;
        }
        return Some((one(Some(s.clone())), "elementwise (from user)"));
    }
    match &u.op {
        Op::Transpose { dimensions } => {
            let s = s()?;
            let mut inv = vec![0usize; dimensions.len()];
            for (k, &d) in dimensions.iter().enumerate() {
                inv[d as usize] = k;
            }
            let t = match s {
                Spec::Tiled(t) => Spec::Tiled(t.transpose(&inv)),
                o => o.clone(),
            };
            Some((one(Some(t)), "transpose (from user)"))
        }
        Op::Reshape { .. } | Op::Plain(Opcode::Bitcast) => {
            let s = s()?;
            let r = match s {
                Spec::Tiled(t) => reshape_tiling(t, &dims(&u.shape)?, &dims(oshape)?)?,
                o => o.clone(),
            };
            Some((one(Some(r)), "reshape (from user)"))
        }
        Op::Broadcast { dimensions } => {
            let s = s()?;
            let out_rank = dims(&u.shape)?.len();
            let mut map = vec![None; out_rank];
            for (k, &d) in dimensions.iter().enumerate() {
                map[d as usize] = Some(k);
            }
            Some((one(Some(map_spec(s, &map, dimensions.len())?)), "broadcast (from user)"))
        }
        Op::Reduce { dimensions, .. } => {
            let n_in = ops.len() / 2;
            if slot >= n_in {
                return None;
            }
            let s = us.iter().flatten().next()?;
            let in_rank = dims(oshape)?.len();
            let mut map = Vec::new();
            for d in 0..in_rank {
                if !dimensions.contains(&(d as i64)) {
                    map.push(Some(d));
                }
            }
            let mut cand = map_spec(s, &map, in_rank)?;
            // GSPMD's: merged with the other inputs' shardings where compatible (the
            // inputs of a variadic reduce are reduced together).
            for (k, &o) in ops.iter().enumerate().take(n_in) {
                if k == slot {
                    continue;
                }
                if let (Spec::Tiled(a), Some(Spec::Tiled(b))) =
                    (&cand, get(o).first().and_then(Option::as_ref))
                    && let Some(m) = a.merge(b)
                {
                    cand = m.into_spec();
                }
            }
            Some((one(Some(cand)), "reduce (from user)"))
        }
        Op::Dot { dims: dd, .. } => {
            let lr = dims(&c.instr(ops[0]).shape)?.len();
            let rr = dims(&c.instr(ops[1]).shape)?.len();
            let lhs = slot == 0;
            let to_out = dot_operand_to_out(dd, lhs, lr, rr);
            let my_rank = if lhs { lr } else { rr };
            let out_rank = dims(&u.shape)?.len();
            // Output -> this operand: batch and own free dims come back; the other
            // operand's free dims are dropped (partially replicated).
            let inv = invert(to_out.as_slice(), out_rank);
            // GSPMD's InferDotOperandSharding: what the output implies (replicated while
            // the dot has no sharding yet), merged with what the other operand implies.
            let from_out = match s() {
                Some(s) => Some(map_spec(s, &inv, my_rank)?),
                None => None,
            };
            let mut cand = from_out.clone().unwrap_or(Spec::Replicated);
            // Contracting (and batch) dims from the other operand's sharding.
            let other = ops[usize::from(lhs)];
            if let Some(os) = get(other).first().and_then(|x| x.as_ref()) {
                let (mine, theirs) = if lhs {
                    (&dd.lhs_contracting, &dd.rhs_contracting)
                } else {
                    (&dd.rhs_contracting, &dd.lhs_contracting)
                };
                let (my_batch, their_batch) = if lhs {
                    (&dd.lhs_batch, &dd.rhs_batch)
                } else {
                    (&dd.rhs_batch, &dd.lhs_batch)
                };
                let other_rank = if lhs { rr } else { lr };
                let mut cmap = vec![None; other_rank];
                for (a, b) in theirs.iter().zip(mine).chain(their_batch.iter().zip(my_batch)) {
                    cmap[*a as usize] = Some(*b as usize);
                }
                if let Some(from_other) = map_spec(os, &cmap, my_rank) {
                    cand = combine(&cand, &from_other, merge);
                }
            }
            if from_out.is_none() && !matches!(cand, Spec::Tiled(_)) {
                return None;
            }
            Some((one(Some(cand)), "dot (from user)"))
        }
        Op::Convolution(cv) => {
            let s = s()?;
            let d = &cv.dims;
            let out_rank = dims(&u.shape)?.len();
            let my_rank = dims(oshape)?.len();
            let mut map = vec![None; out_rank];
            if slot == 0 {
                map[d.output_batch as usize] = Some(d.input_batch as usize);
            } else {
                map[d.output_feature as usize] = Some(d.kernel_output_feature as usize);
            }
            Some((one(Some(map_spec(s, &map, my_rank)?)), "convolution (from user)"))
        }
        Op::Slice { .. }
        | Op::Pad { .. }
        | Op::ReduceWindow { .. }
        | Op::ReducePrecision { .. }
        | Op::Map { .. }
            if slot == 0 || matches!(u.op, Op::Map { .. }) =>
        {
            let s = s()?;
            if dims(oshape)?.len() != dims(&u.shape).map(|d| d.len()).unwrap_or(usize::MAX) {
                return None;
            }
            Some((one(Some(s.clone())), "first operand (from user)"))
        }
        Op::Reverse { dimensions } => {
            let d: Vec<usize> = dimensions.iter().map(|&d| d as usize).collect();
            let r = match s()? {
                Spec::Tiled(t) => Spec::Tiled(t.reverse(&d)),
                o => o.clone(),
            };
            Some((one(Some(r)), "reverse (from user)"))
        }
        Op::DynamicSlice { .. } if slot == 0 && level >= 1 => {
            let sliced = changed_dims(&dims(oshape)?, &dims(&u.shape)?);
            Some((one(Some(replicate_dims(s()?, &sliced)?)), "dynamic-slice (from user)"))
        }
        Op::Plain(Opcode::DynamicUpdateSlice) if slot <= 1 => {
            let s = s()?;
            if slot == 0 {
                return Some((one(Some(s.clone())), "dynamic-update-slice (from user)"));
            }
            let sliced = changed_dims(&dims(&u.shape)?, &dims(oshape)?);
            Some((one(Some(replicate_dims(s, &sliced)?)), "dynamic-update-slice (from user)"))
        }
        Op::Concatenate { .. } if level >= 1 => {
            Some((one(Some(s()?.clone())), "concatenate (from user)"))
        }
        Op::Sort { .. } => Some((one(us.get(slot)?.clone()), "sort (from user)")),
        Op::Gather(g) => gather_scatter::gather_backward(c, user, g, slot, s()?),
        Op::Scatter(sd) => gather_scatter::scatter_backward(c, user, sd, slot, get),
        Op::Plain(Opcode::Tuple) => {
            let range = leaf_range(&u.shape, slot)?;
            let v = us.get(range)?.to_vec();
            v.iter().any(Option::is_some).then_some((v, "tuple (from user)"))
        }
        Op::GetTupleElement { index } => {
            let range = leaf_range(oshape, *index as usize)?;
            let mut v: Leaves = vec![None; oshape.leaf_count()];
            for (k, s) in range.zip(us.iter()) {
                v[k] = s.clone();
            }
            v.iter().any(Option::is_some).then_some((v, "get-tuple-element (from user)"))
        }
        Op::Plain(Opcode::Copy | Opcode::OptBarrier) => Some((us.clone(), "copy (from user)")),
        // An outfeed's sharding covers its operand's leaves, then the token.
        Op::Outfeed { .. } if slot == 0 => {
            let Some(Some(Spec::Tuple(v))) = us.first() else { return None };
            let n = oshape.leaf_count();
            (v.len() == n + 1)
                .then(|| (v[..n].iter().cloned().map(Some).collect(), "outfeed (from user)"))
        }
        _ => None,
    }
}

/// A tiling through a reshape from dims `from` to `to`. Tiles on a size-1 dim hold no
/// data: they become partial replication first, so the rest can still carry. As GSPMD's
/// reshape of the tile assignment, the device order stays as written (the replication
/// groups are consecutive devices, not the trivial dim's tiles).
fn reshape_tiling(t: &Tiling, from: &[i64], to: &[i64]) -> Option<Spec> {
    let trivial: Vec<usize> =
        (0..t.rank().min(from.len())).filter(|&d| from[d] == 1 && t.tiles[d] > 1).collect();
    if trivial.is_empty() {
        return Some(t.reshape(from, to)?.into_spec());
    }
    let folded = if t.other.is_empty() {
        let k: i64 = trivial.iter().map(|&d| t.tiles[d]).product();
        let mut tiles = t.tiles.clone();
        for &d in &trivial {
            tiles[d] = 1;
        }
        Tiling { tiles, repl: t.repl.max(1) * k, other: Vec::new(), devices: t.devices.clone() }
    } else {
        t.partially_replicate(&trivial)
    };
    Some(folded.reshape(from, to)?.into_spec())
}

/// Dims whose sizes differ between `a` and `b` (same rank).
fn changed_dims(a: &[i64], b: &[i64]) -> Vec<usize> {
    a.iter().zip(b).enumerate().filter(|(_, (x, y))| x != y).map(|(k, _)| k).collect()
}

/// For each dim of a dot operand, where it lands in the output (`None`: contracted).
/// Output dims are batch, then lhs free, then rhs free.
pub fn dot_operand_to_out(dd: &DotDims, lhs: bool, lr: usize, rr: usize) -> Vec<Option<usize>> {
    let (batch, contracting, rank) = if lhs {
        (&dd.lhs_batch, &dd.lhs_contracting, lr)
    } else {
        (&dd.rhs_batch, &dd.rhs_contracting, rr)
    };
    let nb = batch.len();
    let lhs_free = lr - dd.lhs_batch.len() - dd.lhs_contracting.len();
    let mut map = vec![None; rank];
    for (k, &b) in batch.iter().enumerate() {
        map[b as usize] = Some(k);
    }
    let mut next = if lhs { nb } else { nb + lhs_free };
    for (d, slot) in map.iter_mut().enumerate() {
        if !batch.contains(&(d as i64)) && !contracting.contains(&(d as i64)) {
            *slot = Some(next);
            next += 1;
        }
    }
    map
}

/// Control-flow edges whose two ends must agree: (callee computation parameter or root,
/// caller-side instruction). Used by the propagation driver to synchronise shardings
/// across calls.
pub enum Link {
    /// `while`: init operand, result, body param, body root, condition param share one.
    While { body: hlo_ir::CompId, cond: hlo_ir::CompId },
    /// `call`: callee params follow the operands, the result follows the callee root.
    Call { callee: hlo_ir::CompId },
    /// `conditional`: branch `k`'s param follows operand `k + 1`; the result merges the
    /// branch roots.
    Conditional { branches: Vec<hlo_ir::CompId> },
}

/// The control-flow link of an instruction, if it has one.
pub fn link(op: &Op) -> Option<Link> {
    match op {
        Op::While { condition, body } => Some(Link::While { body: *body, cond: *condition }),
        Op::Call { to_apply, .. } => Some(Link::Call { callee: *to_apply }),
        Op::Conditional(Branches::TrueFalse(t, f)) => {
            Some(Link::Conditional { branches: vec![*t, *f] })
        }
        Op::Conditional(Branches::Indexed(b)) => Some(Link::Conditional { branches: b.clone() }),
        _ => None,
    }
}

/// The computations the partitioner splits: the entry and every computation reached
/// through `while`, `conditional` and `call`, callers first.
pub fn partitioned_computations(m: &Module) -> Vec<CompId> {
    let mut out = vec![m.entry];
    let mut k = 0;
    while k < out.len() {
        let c = m.comp(out[k]);
        for n in c.post_order() {
            if let Some(link) = link(&c.instr(n).op) {
                let callees = match link {
                    Link::While { body, cond } => vec![cond, body],
                    Link::Call { callee } => vec![callee],
                    Link::Conditional { branches } => branches,
                };
                for id in callees {
                    if !out.contains(&id) {
                        out.push(id);
                    }
                }
            }
        }
        k += 1;
    }
    out
}
