//! Producer-consumer multi-output fusion, the second phase of `multi-output-fusion`: a
//! loop fusion `C` that reads outputs of a multi-output loop fusion `P` (through
//! `get-tuple-element`) joins `P` as one more output when every output has the same dims
//! and layout. `P`'s outputs stay outputs (other instructions read them: the ordinary
//! fusion pass could not fuse `P` into `C` without computing it twice), and `C` reads them
//! where they are computed. An optimizer step's moment updates and the weight update
//! that reads them (`m' = β₁m + (1-β₁)g`, `v' = β₂v + (1-β₂)g²`, `w' = w - α m'/(√v'+ε)`)
//! become one fusion, which the JIT runs as one loop: the gradient and moments are read
//! once, not once per kernel (XLA's GPU multi-output fusion does the same; its CPU backend
//! keeps them apart).
//!
//! Conditions, besides both being loop fusions either phase may merge
//! ([`fused::mergeable_loop_fusion`]) in a computation without control dependencies: `C` is array-shaped; `P`'s result is a tuple read only
//! through `get-tuple-element`; inside `C` the parameters bound to `P`'s outputs are read
//! only by elementwise instructions of the same dims (the value at the same index, so the
//! merged loop never needs another element of them); none of `C`'s other operands is
//! reachable from `P` (it must exist before the merged fusion; a search that runs out of
//! budget refuses); together they take fewer than [`rules::MAX_FUSION_OPERANDS`]
//! operands.

use hlo_ir::op::{FusionKind, Op};
use hlo_ir::{CompId, Instr, Module, NodeIndex, Opcode, Shape};

use super::decision::{Decision, Outcome};
use super::{fused, rules};

/// Merges every eligible consumer into its producer in computation `cid`, logging each
/// merge; the replaced fused computations are pushed to `dead` (their call counts in
/// `calls` set to 0, the new ones' to 1). Returns whether anything changed.
pub fn absorb_consumers(
    m: &mut Module,
    cid: CompId,
    calls: &mut Vec<u32>,
    log: &mut Vec<Decision>,
    dead: &mut Vec<CompId>,
) -> bool {
    if m.comp(cid).has_control_edges() {
        return false;
    }
    let mut changed = false;
    // Each merge removes one fusion, so this ends; the scan restarts after a merge.
    while let Some((p, c)) = candidate(m, cid, calls) {
        merge(m, cid, p, c, calls, log, dead);
        changed = true;
    }
    changed
}

/// Instruction `n` of `cid` as a fusion the phase may merge: its fused computation.
fn loop_fusion(m: &Module, cid: CompId, n: NodeIndex, calls: &[u32]) -> Option<CompId> {
    fused::mergeable_loop_fusion(m, m.comp(cid).instr(n), calls)
}

/// The first (producer, consumer) pair to merge, in post order of the consumers.
fn candidate(m: &Module, cid: CompId, calls: &[u32]) -> Option<(NodeIndex, NodeIndex)> {
    let c = m.comp(cid);
    for cn in c.post_order() {
        let Some(cfc) = loop_fusion(m, cid, cn, calls) else { continue };
        let Some(out) = c.instr(cn).shape.as_array() else { continue };
        let ops = c.operands(cn);
        // The producers this consumer reads through get-tuple-element.
        let mut producers: Vec<NodeIndex> = Vec::new();
        for &o in &ops {
            if let Op::GetTupleElement { .. } = c.instr(o).op
                && let Some(p) = c.operand(o, 0)
                && !producers.contains(&p)
            {
                producers.push(p);
            }
        }
        for p in producers {
            if ok_pair(m, cid, p, cn, cfc, out, calls) {
                return Some((p, cn));
            }
        }
    }
    None
}

fn ok_pair(
    m: &Module,
    cid: CompId,
    p: NodeIndex,
    cn: NodeIndex,
    cfc: CompId,
    out: &hlo_ir::ArrayShape,
    calls: &[u32],
) -> bool {
    let c = m.comp(cid);
    let Some(pfc) = loop_fusion(m, cid, p, calls) else { return false };
    let Shape::Tuple(items) = &c.instr(p).shape else { return false };
    let pcomp = m.comp(pfc);
    if pcomp.root().map(|r| pcomp.instr(r).op.opcode()) != Some(Opcode::Tuple)
        || c.root() == Some(p)
        || items.iter().any(|s| !rules::same_space(s, out))
        || !c.users(p).iter().all(|&u| matches!(c.instr(u).op, Op::GetTupleElement { .. }))
    {
        return false;
    }
    // Inside the consumer: its parameters bound to the producer's outputs are read at the
    // same index only.
    let cops = c.operands(cn);
    let ccomp = m.comp(cfc);
    for param in ccomp.params() {
        let Op::Parameter { number, .. } = ccomp.instr(param).op else { continue };
        let Some(&o) = cops.get(number as usize) else { return false };
        if c.operand(o, 0) != Some(p) || !matches!(c.instr(o).op, Op::GetTupleElement { .. }) {
            continue;
        }
        let dims = ccomp.instr(param).shape.as_array().map(|a| a.dims.clone());
        let same_index_only = ccomp.users(param).iter().all(|&u| {
            rules::is_elementwise(ccomp, u)
                && ccomp.instr(u).shape.as_array().map(|a| a.dims.clone()) == dims
        });
        if !same_index_only {
            return false;
        }
    }
    // The consumer's other operands exist before the merged fusion: none is reachable from
    // the producer.
    let others: Vec<NodeIndex> = cops
        .iter()
        .copied()
        .filter(|&o| {
            !(matches!(c.instr(o).op, Op::GetTupleElement { .. }) && c.operand(o, 0) == Some(p))
        })
        .collect();
    let mut distinct = rules::distinct_operands(c, p);
    for &o in &others {
        if !distinct.contains(&o) {
            distinct.push(o);
        }
    }
    if distinct.len() >= rules::MAX_FUSION_OPERANDS {
        return false;
    }
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![p];
    while let Some(n) = stack.pop() {
        for u in c.users(n) {
            if u == cn {
                continue;
            }
            if others.contains(&u) || seen.len() > rules::SEARCH_BUDGET {
                return false;
            }
            if seen.insert(u) {
                stack.push(u);
            }
        }
    }
    true
}

/// Replaces `p` and `c` by one fusion computing `p`'s outputs and then `c`'s.
fn merge(
    m: &mut Module,
    cid: CompId,
    p: NodeIndex,
    cn: NodeIndex,
    calls: &mut Vec<u32>,
    log: &mut Vec<Decision>,
    dead: &mut Vec<CompId>,
) {
    let parent = m.comp(cid);
    let (pi, ci) = (parent.instr(p).clone(), parent.instr(cn).clone());
    let (Op::Fusion { calls: pfc, .. }, Op::Fusion { calls: cfc, .. }) = (&pi.op, &ci.op) else {
        return;
    };
    let (pfc, cfc) = (*pfc, *cfc);
    let p_ops = parent.operands(p);
    let c_ops = parent.operands(cn);
    let from_p = |o: NodeIndex| -> Option<usize> {
        match parent.instr(o).op {
            Op::GetTupleElement { index } if parent.operand(o, 0) == Some(p) => {
                usize::try_from(index).ok()
            }
            _ => None,
        }
    };
    let mut ops: Vec<NodeIndex> = Vec::new();
    for &o in p_ops.iter().chain(c_ops.iter().filter(|&&o| from_p(o).is_none())) {
        if !ops.contains(&o) {
            ops.push(o);
        }
    }
    let shapes: Vec<Shape> = ops.iter().map(|&o| parent.instr(o).shape.clone()).collect();
    let c_bound: Vec<Option<usize>> = c_ops.iter().map(|&o| from_p(o)).collect();
    let mut fc = m.new_computation("fused_computation");
    let params: Vec<NodeIndex> =
        shapes.into_iter().enumerate().map(|(k, s)| fused::new_param(&mut fc, k, s)).collect();
    let param_of = |o: NodeIndex| params[ops.iter().position(|x| *x == o).expect("listed")];
    // The producer's outputs, then the consumer reading them.
    let p_outs = fused::import(m.comp(pfc), &mut fc, &|k| Some(param_of(p_ops[k])), true);
    let c_out = fused::import(
        m.comp(cfc),
        &mut fc,
        &|k| match c_bound.get(k).copied().flatten() {
            Some(i) => p_outs.get(i).copied(),
            None => c_ops.get(k).map(|&o| param_of(o)),
        },
        false,
    );
    let mut outs = p_outs.clone();
    outs.extend(c_out);
    let out_shapes: Vec<Shape> = outs.iter().map(|&o| fc.instr(o).shape.clone()).collect();
    let tuple_shape = Shape::Tuple(out_shapes);
    let root = fc.add(Instr::new("tuple", Op::Plain(Opcode::Tuple), tuple_shape.clone()), &outs);
    fc.set_root(root);
    let fcid = m.add_computation(fc);
    if calls.len() <= fcid.index() {
        calls.resize(fcid.index() + 1, 0);
    }
    calls[fcid.index()] = 1;
    for old in [pfc, cfc] {
        calls[old.index()] = 0;
        dead.push(old);
    }
    let parent = m.comp_mut(cid);
    let mut fi = Instr::new(
        pi.name.clone(),
        Op::Fusion { kind: FusionKind::Loop, calls: fcid, output_to_operand_aliasing: vec![] },
        tuple_shape,
    );
    fi.metadata = pi.metadata.clone();
    let f = parent.add(fi, &ops);
    for u in parent.users(p) {
        let _ = parent.set_operand(u, 0, f);
    }
    let g = parent.add(
        Instr::new(
            "get-tuple-element",
            Op::GetTupleElement { index: p_outs.len() as i64 },
            ci.shape.clone(),
        ),
        &[f],
    );
    parent.replace_all_uses(cn, g);
    let _ = parent.remove(cn);
    let _ = parent.remove(p);
    let fname = parent.instr(f).name.clone();
    log.push(Decision {
        pass: "multi-output-fusion",
        computation: parent.name.clone(),
        producer: pi.name,
        producer_op: Opcode::Fusion,
        consumer: ci.name,
        consumer_op: Opcode::Fusion,
        producer_bytes: rules::bytes(&pi.shape),
        outcome: Outcome::Fused { fusion: fname, kind: FusionKind::Loop },
    });
}
