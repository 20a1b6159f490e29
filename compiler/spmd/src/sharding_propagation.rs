//! `sharding-propagation`: GSPMD's sharding propagation. From the user's annotations
//! (entry parameter and root shardings, `Sharding` custom-calls from
//! `with_sharding_constraint`) every instruction of every partitioned computation (the
//! entry and the `while`/`conditional`/`call` bodies it reaches) gets a sharding.
//!
//! - **Never overwritten**: shardings written in the module are fixed, except on entry
//!   parameters and outputs that `allow_spmd_sharding_propagation_to_parameters` /
//!   `_to_output` open. Without those flags an entry parameter or output is open exactly
//!   when unannotated; with a flag written `false`, an unannotated one stays without a
//!   sharding (XLA's semantics; the partitioner takes it replicated). A parameter or
//!   output a flag opens takes the propagated sharding only where it divides the shape
//!   evenly, else replicated (leaf by leaf when the flags list one entry per leaf). A conflict
//!   between an annotation and its neighbours stays a reshard point
//!   ([`crate::sharding::reshard`]), never a silent change.
//! - **Priority as GSPMD**: aggressiveness levels 0-3 gate the op types
//!   ([`crate::sharding::rules::allowed`]); within a level, rounds of a forward sweep in
//!   post order and a backward sweep in reverse post order run until nothing changes
//!   (capped), then loop state and call boundaries are synchronised. A candidate replaces
//!   a sharding only if strictly more specific (tiled beats replicated, more tiles beat
//!   fewer), or, from level 1, if merging two compatible partial shardings gives more
//!   tiles. Monotone, hence terminating, and deterministic (fixed visiting order).
//! - **Provenance**: every leaf records the rule and neighbour that set it
//!   ([`crate::sharding::Propagation`]); `hloc opt --explain-sharding NAME` prints the
//!   chain back to an annotation.
//! - Manual regions: an array op with a wholly `{manual}` operand is manual, and so is an
//!   unsharded operand of a manual op; tuple-shaped reduce/sort/custom-calls and async ops
//!   go manual as a whole, and tuples carry manual leaves. `SPMDFullToShardShape` /
//!   `SPMDShardToFullShape` are the borders, which no sharding crosses.
//! - A `Sharding` constraint's `unspecified_dims` are refined from the neighbours; `shard_as`
//!   / `shard_like` groups offer their members' shardings to one another;
//!   `ShardBarrierFrom` / `ShardBarrierTo` stop propagation one way and are removed after;
//!   shardings written only to prevent CSE are cleared and propagated afresh.
//! - Whatever nothing constrains keeps no sharding, as in XLA (the partitioner takes it
//!   replicated). Applied computations (reducers, comparators, fusion bodies) are scalar
//!   or per-element functions that the partitioner does not split; they get no sharding.
//!
//! Not done: manual subgroups (`last_tile_dims={manual}`) beyond pass-through, the
//! convolution-as-dot classification of trivial spatial dims, the CSE-prevention-only
//! mode, `shard_like`'s one-way semantics (treated as `shard_as`), and GSPMD's look-ahead
//! of user shardings when choosing a dot's leading operand (the larger operand leads).

use std::collections::HashMap;

use hlo_ir::{CompId, Diagnostic, Module, NodeIndex, Op, Opcode, Shape, Sharding};

use crate::sharding::rules::{self, Link};
use crate::sharding::{Leaves, Origin, Propagation, Spec, spec};
use hlo_pipeline::{Pass, PassContext};

pub struct ShardingPropagation;

impl Pass for ShardingPropagation {
    fn name(&self) -> &'static str {
        "sharding-propagation"
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext) -> Result<bool, Diagnostic> {
        let (changed, p) = propagate(m);
        cx.set_report(p);
        Ok(changed)
    }
}

/// Rounds per aggressiveness level before giving up on a fixpoint (each round is linear;
/// real modules settle in a handful).
const ROUND_CAP: usize = 64;

struct Node {
    leaves: Leaves,
    origins: Vec<Option<Origin>>,
    fixed: bool,
    /// A `Sharding` constraint's `unspecified_dims`: the written sharding holds on the
    /// other dims, these may still be refined from the neighbours.
    unspecified: Option<Vec<usize>>,
    /// Leaves of an opened entry parameter or output that their flag keeps: the written
    /// sharding, put back once propagation ends (empty: none).
    restore: Vec<Option<Spec>>,
    /// Leaves of an opened entry parameter or output whose propagated sharding must
    /// divide the shape (`true`), else becomes replicated (empty: none).
    check_divides: Vec<bool>,
}

/// The `unspecified_dims=[...]` of a `Sharding` custom-call's backend config.
fn unspecified_dims(i: &hlo_ir::Instr) -> Option<Vec<usize>> {
    let cfg = i.extras.as_ref()?.backend_config.as_deref()?;
    let rest = &cfg[cfg.find("unspecified_dims=[")? + "unspecified_dims=[".len()..];
    let list = &rest[..rest.find(']')?];
    let dims: Option<Vec<usize>> =
        list.split(',').filter(|t| !t.trim().is_empty()).map(|t| t.trim().parse().ok()).collect();
    dims.filter(|d| !d.is_empty())
}

fn leaves_of(shape: &Shape, s: &Spec) -> Leaves {
    match (shape, s) {
        (Shape::Tuple(_), Spec::Tuple(v)) if v.len() == shape.leaf_count() => {
            v.iter().cloned().map(Some).collect()
        }
        (Shape::Tuple(_), s) => vec![Some(s.clone()); shape.leaf_count()],
        (_, s) => vec![Some(s.clone())],
    }
}

/// Runs the propagation; returns whether any sharding changed and the provenance.
pub fn propagate(m: &mut Module) -> (bool, Propagation) {
    let comps = rules::partitioned_computations(m);
    let cleared = clear_cse_prevention(m, &comps);
    let pos: HashMap<CompId, usize> = comps.iter().enumerate().map(|(k, &c)| (c, k)).collect();
    let allow_params = m.header.allow_spmd_sharding_propagation_to_parameters.clone();
    let allow_output = m.header.allow_spmd_sharding_propagation_to_output.clone();
    let entry_params = m.entry().params().len();
    let mut st: Vec<Vec<Option<Node>>> = Vec::with_capacity(comps.len());
    for &cid in &comps {
        let c = m.comp(cid);
        let mut v: Vec<Option<Node>> =
            (0..c.nodes().map(|n| n.index() + 1).max().unwrap_or(0)).map(|_| None).collect();
        for n in c.nodes() {
            let i = c.instr(n);
            let count = i.shape.leaf_count();
            let given = i.sharding.as_ref().and_then(|s| Spec::from_ir(s));
            let is_constraint = matches!(&i.op, Op::CustomCall(cc) if cc.target == "Sharding");
            let is_param = cid == m.entry && matches!(i.op, Op::Parameter { .. });
            let is_root = cid == m.entry && c.root() == Some(n);
            // The flags written for this entry parameter or output, one per leaf: one
            // value for all, one per parameter, or (a lone tuple parameter, a tuple
            // output) one per element. `one_each`: the flags name this value's leaves one
            // by one (per parameter, per element, or a lone array output), the case in
            // which XLA checks that an opened leaf's sharding divides its shape.
            let (leaf_flags, one_each): (Option<Vec<bool>>, bool) = match i.op {
                Op::Parameter { number, .. } if is_param => match allow_params.as_ref() {
                    Some(a) if entry_params == 1 && i.shape.is_tuple() && a.len() == count => {
                        (Some(a.clone()), true)
                    }
                    Some(a) => (
                        a.get(number as usize)
                            .or(if a.len() == 1 { a.first() } else { None })
                            .map(|&f| vec![f; count]),
                        a.len() == entry_params && !i.shape.is_tuple(),
                    ),
                    None => (None, false),
                },
                _ if is_root => match allow_output.as_ref() {
                    Some(a) if i.shape.is_tuple() && a.len() == count => (Some(a.clone()), true),
                    Some(a) => (Some(vec![a.iter().any(|&x| x); count]), !i.shape.is_tuple()),
                    None => (None, false),
                },
                _ => (None, false),
            };
            let check_divides = match &leaf_flags {
                Some(flags) if one_each => flags.clone(),
                _ => Vec::new(),
            };
            let open_flag = leaf_flags.as_ref().map(|f| f.iter().any(|&x| x));
            // Written, the flags open a parameter or output (any leaf `true`); the leaves
            // written `false` get their annotation back afterwards, as XLA restores them.
            // Written `false`, they keep an unannotated one without a sharding (the
            // partitioner takes it replicated). Not written, an unannotated parameter or
            // output is open and an annotated one fixed.
            let fixed = match (given.is_some(), open_flag) {
                (_, Some(open)) => !open,
                (true, None) => true,
                (false, None) => false,
            };
            let restore: Vec<Option<Spec>> = match (&given, &leaf_flags) {
                (Some(s), Some(flags)) if !fixed => leaves_of(&i.shape, s)
                    .into_iter()
                    .zip(flags)
                    .map(|(l, &open)| if open { None } else { l })
                    .collect(),
                _ => Vec::new(),
            };
            let leaves = match &given {
                Some(s) => leaves_of(&i.shape, s),
                None => vec![None; count],
            };
            let origins = leaves
                .iter()
                .map(|l| {
                    l.as_ref().map(|_| {
                        if fixed || is_constraint {
                            Origin::annotation()
                        } else {
                            Origin { rule: "given (open)", from: None, level: 0 }
                        }
                    })
                })
                .collect();
            let unspecified = if is_constraint && given.is_some() && !i.shape.is_tuple() {
                unspecified_dims(i)
            } else {
                None
            };
            v[n.index()] = Some(Node {
                leaves,
                origins,
                fixed: (fixed || is_constraint && given.is_some()) && unspecified.is_none(),
                unspecified,
                restore,
                check_divides,
            });
        }
        st.push(v);
    }

    let groups = shard_groups(m, &comps);
    let mut rounds = [0usize; 4];
    for level in 0..4u8 {
        for _ in 0..ROUND_CAP {
            rounds[level as usize] += 1;
            let mut changed = false;
            for (k, &cid) in comps.iter().enumerate() {
                let c = m.comp(cid);
                let order = c.post_order();
                for &n in &order {
                    if st[k][n.index()].as_ref().is_none_or(|x| x.fixed)
                        || !rules::allowed(&c.instr(n).op, true, level)
                    {
                        continue;
                    }
                    // As GSPMD: only spatially partitioned (tiled) operands propagate
                    // forward; a value computed from replicated ones stays open for its
                    // users to decide.
                    let tiled_operand = c.operands(n).iter().any(|o| {
                        st[k][o.index()].as_ref().is_some_and(|x| {
                            x.leaves
                                .iter()
                                .any(|l| matches!(l, Some(Spec::Tiled(_) | Spec::Manual)))
                        })
                    });
                    if !tiled_operand {
                        continue;
                    }
                    let cand = rules::forward(c, n, level, &|x| {
                        &st[k][x.index()].as_ref().expect("node state").leaves
                    });
                    if let Some((leaves, rule, from)) = cand {
                        let origin =
                            || Origin { rule, from: from.map(|f| c.instr(f).name.clone()), level };
                        changed |= improve(&mut st[k][n.index()], &leaves, origin, level);
                    }
                }
                for &n in order.iter().rev() {
                    if !rules::allowed(&c.instr(n).op, false, level) {
                        continue;
                    }
                    for (slot, o) in c.operands(n).into_iter().enumerate() {
                        if st[k][o.index()].as_ref().is_none_or(|x| x.fixed) {
                            continue;
                        }
                        let cand = rules::backward(c, n, slot, level, &|x| {
                            &st[k][x.index()].as_ref().expect("node state").leaves
                        });
                        if let Some((leaves, rule)) = cand {
                            let origin =
                                || Origin { rule, from: Some(c.instr(n).name.clone()), level };
                            changed |= improve(&mut st[k][o.index()], &leaves, origin, level);
                        }
                    }
                }
            }
            for (k, &cid) in comps.iter().enumerate() {
                changed |= manual_regions(m.comp(cid), &mut st[k], level);
            }
            changed |= sync_links(m, &comps, &pos, &mut st, level);
            changed |= sync_groups(m, &comps, &groups, &mut st, level);
            if !changed {
                break;
            }
        }
    }

    // Write back. An instruction nothing constrains keeps no sharding (XLA's; the
    // partitioner takes it replicated); within a tuple that has some, unconstrained leaves
    // are replicated.
    let mut prop = Propagation { rounds, ..Default::default() };
    let mut any_change = false;
    for (k, &cid) in comps.iter().enumerate() {
        let nodes: Vec<NodeIndex> = m.comp(cid).nodes().collect();
        for n in nodes {
            let Some(node) = st[k][n.index()].take() else { continue };
            let name = m.comp(cid).instr(n).name.clone();
            if !node.fixed && node.leaves.iter().all(Option::is_none) {
                let origin = Origin { rule: "unconstrained (no sharding)", from: None, level: 3 };
                prop.origins.insert(name, vec![origin; node.leaves.len()]);
                continue;
            }
            let mut origins = Vec::with_capacity(node.leaves.len());
            let mut leaves = Vec::with_capacity(node.leaves.len());
            for (l, o) in node.leaves.into_iter().zip(node.origins) {
                match l {
                    Some(s) => {
                        leaves.push(s);
                        origins.push(o.unwrap_or(Origin {
                            rule: "given (open)",
                            from: None,
                            level: 0,
                        }));
                    }
                    None => {
                        leaves.push(Spec::Replicated);
                        origins.push(Origin { rule: "default", from: None, level: 3 });
                    }
                }
            }
            if node.fixed {
                prop.origins.insert(name, origins);
                continue;
            }
            // An entry parameter or output opened by its flag takes the propagated sharding
            // only if it divides the shape evenly, else replicated (XLA: no padding at the
            // program's boundary), leaf by leaf where the flags name the leaves one by
            // one; a single flag for several leaves checks nothing.
            if !node.check_divides.is_empty() {
                let mut shapes = Vec::with_capacity(leaves.len());
                m.comp(cid).instr(n).shape.for_each_array(&mut |a| shapes.push(a.clone()));
                for (k, &flag) in node.check_divides.iter().enumerate() {
                    if flag
                        && let (Some(leaf), Some(shape)) = (leaves.get_mut(k), shapes.get(k))
                        && !divides(shape, leaf)
                    {
                        *leaf = Spec::Replicated;
                        origins[k] =
                            Origin { rule: "replicated: does not divide", from: None, level: 3 };
                    }
                }
            }
            for (k, kept) in node.restore.iter().enumerate() {
                if let (Some(kept), Some(leaf)) = (kept, leaves.get_mut(k)) {
                    *leaf = kept.clone();
                    origins[k] = Origin::annotation();
                }
            }
            prop.origins.insert(name, origins);
            let i = m.comp_mut(cid).instr_mut(n);
            let spec = if i.shape.is_tuple() {
                Spec::Tuple(leaves)
            } else {
                leaves.into_iter().next().unwrap_or(Spec::Replicated)
            };
            let new: Sharding = spec.to_ir();
            let same = i
                .sharding
                .as_ref()
                .and_then(|s| Spec::from_ir(s))
                .is_some_and(|old| old.same(&spec));
            if !same {
                i.sharding = Some(Box::new(new));
                any_change = true;
            }
        }
    }
    any_change |= remove_barriers(m, &comps);
    (any_change || cleared, prop)
}

/// What an earlier propagation wrote only to keep CSE from merging instructions (XLA's
/// `_sharding_propagation_cse_prevention` metadata) is no annotation: cleared, so the
/// instruction is propagated afresh. True if any was cleared.
fn clear_cse_prevention(m: &mut Module, comps: &[CompId]) -> bool {
    let is_cse = |s: &Sharding| match s {
        Sharding::Single(s) => {
            s.metadata.iter().any(|md| md.op_name() == Some("_sharding_propagation_cse_prevention"))
        }
        Sharding::Tuple(_) => false,
    };
    let mut changed = false;
    for &cid in comps {
        let c = m.comp_mut(cid);
        let nodes: Vec<NodeIndex> = c.nodes().collect();
        for n in nodes {
            let i = c.instr_mut(n);
            if i.sharding.as_deref().is_some_and(is_cse) {
                i.sharding = None;
                changed = true;
            }
        }
    }
    changed
}

/// Removes the propagation barriers: each `ShardBarrierFrom`/`ShardBarrierTo` is replaced
/// by its operand. True if any was removed.
fn remove_barriers(m: &mut Module, comps: &[CompId]) -> bool {
    let mut changed = false;
    for &cid in comps {
        let c = m.comp_mut(cid);
        let barriers: Vec<NodeIndex> =
            c.nodes().filter(|&n| rules::barrier(&c.instr(n).op).is_some()).collect();
        for b in barriers {
            let Some(&operand) = c.operands(b).first() else { continue };
            c.replace_all_uses(b, operand);
            if c.root() == Some(b) {
                c.set_root(operand);
            }
            if c.remove(b).is_ok() {
                changed = true;
            }
        }
    }
    changed
}

/// Manual regions (between `SPMDFullToShardShape` and `SPMDShardToFullShape`, or from a
/// value written `{manual}`): every device computes on its own data. As GSPMD: an
/// unsharded array op with a wholly manual operand is manual, and so are the correlated
/// tuple ops (`reduce`, `sort`, `reduce-window`), a tuple-shaped custom-call and the
/// async ops (whose wrapped computations propagation does not enter) as a whole; an
/// unsharded array operand of a wholly manual user is manual (a constant broadcast inside
/// the region, say). The conversions are the region's borders: a manual
/// operand does not make `SPMDShardToFullShape` manual, nor a manual
/// `SPMDFullToShardShape` its operand. At level 0 manual does not enter a concatenate or a
/// dynamic-slice. Structural ops (tuple, get-tuple-element, copy, loop state) carry manual
/// leaves through the ordinary rules. True if any sharding changed.
fn manual_regions(c: &hlo_ir::Computation, st: &mut [Option<Node>], level: u8) -> bool {
    let is_manual = |st: &[Option<Node>], x: NodeIndex| {
        st[x.index()].as_ref().is_some_and(|n| {
            !n.leaves.is_empty() && n.leaves.iter().all(|l| matches!(l, Some(Spec::Manual)))
        })
    };
    let target = |x: NodeIndex| match &c.instr(x).op {
        Op::CustomCall(cc) => Some(cc.target.as_str()),
        _ => None,
    };
    let mut changed = false;
    let set = |st: &mut [Option<Node>], x: NodeIndex, rule: &'static str, from: &str| {
        let Some(node) = st[x.index()].as_mut() else { return false };
        if node.fixed || !node.leaves.iter().all(|l| matches!(l, None | Some(Spec::Replicated))) {
            return false;
        }
        for (l, o) in node.leaves.iter_mut().zip(node.origins.iter_mut()) {
            *l = Some(Spec::Manual);
            *o = Some(Origin { rule, from: Some(from.to_string()), level });
        }
        true
    };
    for n in c.post_order() {
        // Forward: a manual operand makes the op manual.
        let i = c.instr(n);
        let takes = i.shape.as_array().is_some()
            || matches!(i.op.opcode(), Opcode::Reduce | Opcode::Sort | Opcode::ReduceWindow)
            || matches!(i.op, Op::CustomCall(_) | Op::Async { .. });
        let held_back =
            level == 0 && matches!(i.op.opcode(), Opcode::Concatenate | Opcode::DynamicSlice);
        if takes
            && !held_back
            && target(n) != Some("SPMDShardToFullShape")
            && target(n) != Some("SPMDFullToShardShape")
            && let Some(o) = c
                .operands(n)
                .into_iter()
                .find(|&o| is_manual(st, o) && target(o) != Some("SPMDShardToFullShape"))
        {
            changed |= set(st, n, "manual region", &c.instr(o).name);
        }
    }
    for n in c.post_order().into_iter().rev() {
        // Backward: a wholly manual user makes its unsharded array operands manual.
        if is_manual(st, n) && target(n) != Some("SPMDFullToShardShape") {
            for o in c.operands(n) {
                if target(o) != Some("SPMDShardToFullShape")
                    && c.instr(o).shape.as_array().is_some()
                {
                    changed |= set(st, o, "manual region (from user)", &c.instr(n).name);
                }
            }
        }
    }
    changed
}

/// Whether `spec` tiles every dimension of the array `a` evenly (anything not tiled does).
fn divides(a: &hlo_ir::ArrayShape, spec: &Spec) -> bool {
    match spec {
        Spec::Tiled(t) => a
            .dims
            .iter()
            .zip(&t.tiles)
            .all(|(d, &k)| k <= 1 || d.bound().is_some_and(|d| d % k as u64 == 0)),
        _ => true,
    }
}

/// Offers `cand` to a node leaf by leaf; true if any leaf improved.
/// `origin` is built only when something improves (most candidates do not, and building
/// one copies a name).
fn improve(slot: &mut Option<Node>, cand: &Leaves, origin: impl Fn() -> Origin, level: u8) -> bool {
    let Some(node) = slot.as_mut() else { return false };
    if node.fixed || cand.len() != node.leaves.len() {
        return false;
    }
    let mut changed = false;
    for (k, c) in cand.iter().enumerate() {
        let Some(c) = c else { continue };
        // Manual enters only a leaf that has nothing yet (the structural ops and loop
        // state carry it); it never replaces a sharding, nor is replaced.
        if matches!(c, Spec::Maximal(_) | Spec::Tuple(_))
            || matches!(c, Spec::Manual) && node.leaves[k].is_some()
        {
            continue;
        }
        let new = match (&node.leaves[k], &node.unspecified) {
            (Some(cur), Some(dims)) => refine_unspecified(cur, c, dims),
            (None, _) => Some(c.clone()),
            (Some(cur), None) => spec::better(cur, c, level),
        };
        if let Some(new) = new {
            node.leaves[k] = Some(new);
            node.origins[k] = Some(origin());
            changed = true;
        }
    }
    changed
}

/// A constraint with unspecified dims takes from a candidate only its tiling of those
/// dims, merged into the written sharding, when that adds tiles.
fn refine_unspecified(cur: &Spec, cand: &Spec, unspecified: &[usize]) -> Option<Spec> {
    let Spec::Tiled(c) = cand else { return None };
    let specified: Vec<usize> = (0..c.rank()).filter(|d| !unspecified.contains(d)).collect();
    let from = c.partially_replicate(&specified);
    let merged = match cur {
        Spec::Replicated => from,
        Spec::Tiled(t) => t.merge(&from)?,
        _ => return None,
    };
    let had = match cur {
        Spec::Tiled(t) => t.num_tiles(),
        _ => 1,
    };
    (merged.num_tiles() > had).then(|| merged.into_spec())
}

/// The `shard_as N` / `shard_like N` groups: instructions that take one sharding (XLA's
/// shard groups), as (computation position, node) lists. A member written `{unknown
/// shard_as N}` is open; one written with a sharding brings it to the group.
fn shard_groups(m: &Module, comps: &[CompId]) -> Vec<Vec<(usize, NodeIndex)>> {
    let mut by_id: std::collections::BTreeMap<(bool, i64), Vec<(usize, NodeIndex)>> =
        Default::default();
    for (k, &cid) in comps.iter().enumerate() {
        let c = m.comp(cid);
        for n in c.nodes() {
            if let Some(Sharding::Single(s)) = c.instr(n).sharding.as_deref()
                && let Some((g, id)) = s.shard_group
            {
                by_id.entry((g == hlo_ir::sharding::ShardGroup::As, id)).or_default().push((k, n));
            }
        }
    }
    by_id.into_values().filter(|g| g.len() > 1).collect()
}

/// Each shard group's members offer their shardings to one another.
fn sync_groups(
    m: &Module,
    comps: &[CompId],
    groups: &[Vec<(usize, NodeIndex)>],
    st: &mut [Vec<Option<Node>>],
    level: u8,
) -> bool {
    let mut changed = false;
    for g in groups {
        changed |= offer_within(m, comps, g, st, level, "shard group");
    }
    changed
}

/// Every member of `group` (computation position, node) offers its sharding to the
/// others; true if any improved.
fn offer_within(
    m: &Module,
    comps: &[CompId],
    group: &[(usize, NodeIndex)],
    st: &mut [Vec<Option<Node>>],
    level: u8,
    rule: &'static str,
) -> bool {
    let mut changed = false;
    for &(ka, a) in group {
        for &(kb, b) in group {
            if (ka, a) == (kb, b) {
                continue;
            }
            let Some(src) = st[ka][a.index()].as_ref() else { continue };
            let leaves = src.leaves.clone();
            let origin =
                || Origin { rule, from: Some(m.comp(comps[ka]).instr(a).name.clone()), level };
            changed |= improve(&mut st[kb][b.index()], &leaves, origin, level);
        }
    }
    changed
}

/// Loop state, call and branch boundaries: each linked pair offers its sharding to the
/// other.
fn sync_links(
    m: &Module,
    comps: &[CompId],
    pos: &HashMap<CompId, usize>,
    st: &mut [Vec<Option<Node>>],
    level: u8,
) -> bool {
    let mut changed = false;
    for (k, &cid) in comps.iter().enumerate() {
        let c = m.comp(cid);
        for n in c.nodes() {
            let Some(link) = rules::link(&c.instr(n).op) else { continue };
            let ops = c.operands(n);
            // Groups of (computation position, node) that must agree.
            let mut groups: Vec<Vec<(usize, NodeIndex)>> = Vec::new();
            let param = |id: CompId, p: u32| -> Option<(usize, NodeIndex)> {
                Some((*pos.get(&id)?, m.comp(id).param(p)?))
            };
            let root = |id: CompId| -> Option<(usize, NodeIndex)> {
                Some((*pos.get(&id)?, m.comp(id).root()?))
            };
            match link {
                Link::While { body, cond } => {
                    let mut g = vec![(k, n)];
                    g.extend(ops.first().map(|&o| (k, o)));
                    g.extend(param(body, 0));
                    g.extend(root(body));
                    g.extend(param(cond, 0));
                    groups.push(g);
                }
                Link::Call { callee } => {
                    for (p, &o) in ops.iter().enumerate() {
                        groups.push(
                            [Some((k, o)), param(callee, p as u32)].into_iter().flatten().collect(),
                        );
                    }
                    groups.push([Some((k, n)), root(callee)].into_iter().flatten().collect());
                }
                Link::Conditional { branches } => {
                    let mut out = vec![(k, n)];
                    for (b, &id) in branches.iter().enumerate() {
                        if let Some(&o) = ops.get(b + 1) {
                            groups
                                .push([Some((k, o)), param(id, 0)].into_iter().flatten().collect());
                        }
                        out.extend(root(id));
                    }
                    groups.push(out);
                }
            }
            for g in groups {
                changed |= offer_within(m, comps, &g, st, level, "control-flow boundary");
            }
        }
    }
    changed
}
