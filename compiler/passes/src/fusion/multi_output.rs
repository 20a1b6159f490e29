//! The `multi-output-fusion` pass: sibling multi-output fusion (XLA:CPU's rules,
//! `passes.md` §b.4/§b.6), then producer-consumer multi-output fusion
//! ([`super::multi_output_consumer`]).
//!
//! Candidates are loop kernels: `kLoop` fusions (not in-place, computation not shared,
//! array-shaped or an earlier multi-output fusion read only through
//! `get-tuple-element`) and plain elementwise instructions, each with fewer than 20
//! operands. Two candidates that share an operand of more than 0 bytes and have the same
//! output dims (and layout) are merged into one fusion whose root is a `tuple` of both
//! outputs; their former users read `get-tuple-element`s. Pairs are taken greedily by
//! profit (bytes of the shared operands), largest first; a merged fusion can merge again.
//!
//! Cycle safety: merging A and B is illegal when one reaches the other. With `pos` a
//! topological order, only the earlier one (A) can reach the later (B), so a search from A
//! through users that never goes past `pos(B)` settles it; it gives up after
//! [`rules::SEARCH_BUDGET`] instructions and then counts as reaching (conservative). The
//! instructions it found below `pos(B)` (A's descendants there) are moved after the merged
//! fusion, which keeps `pos` a topological order without recomputing it (positions are
//! spaced; when a gap runs out they are recomputed once). The pass is O(n log n) plus
//! O(budget) per candidate pair; pairs per shared operand are capped.
//!
//! Computations with control dependencies are left alone.

use std::collections::BTreeMap;

use hlo_ir::op::{FusionKind, Op};
use hlo_ir::{CompId, Computation, Diagnostic, Instr, Module, NodeIndex, Opcode, Shape};

use super::decision::{Decision, Outcome, Refusal};
use super::{fused, rules};
use hlo_ir::hash::FnvHashMap as FnvMap;
use hlo_pipeline::{Pass, PassContext};

/// Siblings must each have fewer operands than this (XLA:CPU).
pub const MAX_SIBLING_OPERANDS: usize = 20;
/// At most this many candidate users of one shared operand are paired.
const MAX_SIBLINGS_PER_OPERAND: usize = 16;
const SPACING: u64 = 1 << 20;

/// The `multi-output-fusion` pass.
#[derive(Debug, Default)]
pub struct MultiOutputFusion;

impl Pass for MultiOutputFusion {
    fn name(&self) -> &'static str {
        "multi-output-fusion"
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext) -> Result<bool, Diagnostic> {
        let mut changed = false;
        let mut dead_comps = Vec::new();
        let mut calls = super::call_counts(m);
        let mut param_counts = FnvMap::default();
        for cid in super::fusible_computations(m) {
            if m.comp(cid).has_control_edges() {
                continue;
            }
            let mut s = Sibling {
                m,
                cid,
                calls: std::mem::take(&mut calls),
                param_counts: std::mem::take(&mut param_counts),
                pos: Vec::new(),
                order: BTreeMap::new(),
                log: Vec::new(),
                forward: FnvMap::default(),
                dead_comps: Vec::new(),
            };
            let merged = s.run();
            changed |= merged;
            let mut log = std::mem::take(&mut s.log);
            dead_comps.append(&mut s.dead_comps);
            calls = s.calls;
            param_counts = s.param_counts;
            changed |= super::multi_output_consumer::absorb_consumers(
                m,
                cid,
                &mut calls,
                &mut log,
                &mut dead_comps,
            );
            cx.report_or_default::<super::decision::FusionLog>().decisions.append(&mut log);
        }
        remove_dead_computations(m, &dead_comps);
        Ok(changed)
    }
}

/// Removes the fused computations the merges left uncalled.
fn remove_dead_computations(m: &mut Module, dead: &[CompId]) {
    if dead.is_empty() {
        return;
    }
    // One bulk removal when nothing else is unreachable; otherwise one at a time (by name,
    // as ids move after each removal).
    let mut reachable = vec![false; m.comps().len()];
    let mut stack = vec![m.entry];
    while let Some(id) = stack.pop() {
        if id.index() >= reachable.len() || std::mem::replace(&mut reachable[id.index()], true) {
            continue;
        }
        for i in m.comp(id).instrs() {
            stack.extend(i.op.called_computations().into_iter().map(|(_, c)| c));
        }
    }
    let unreachable = reachable.iter().filter(|r| !**r).count();
    if unreachable == dead.len() && dead.iter().all(|d| !reachable[d.index()]) {
        m.remove_unreachable_computations();
        return;
    }
    let names: Vec<String> = dead.iter().map(|&d| m.comp(d).name.clone()).collect();
    for n in names {
        if let Some(id) = m.find_comp(&n) {
            let _ = m.remove_computation(id);
        }
    }
}

struct Sibling<'a> {
    m: &'a mut Module,
    cid: CompId,
    calls: Vec<u32>,
    /// Parameter count of each fused computation looked at (memoized).
    param_counts: FnvMap<CompId, usize>,
    pos: Vec<u64>,
    order: BTreeMap<u64, NodeIndex>,
    log: Vec<Decision>,
    /// `seq` of a merged kernel → the fusion that replaced it.
    forward: FnvMap<u32, NodeIndex>,
    dead_comps: Vec<CompId>,
}

/// A candidate kernel's outputs.
struct Kernel {
    /// Output shapes (one for an array-shaped kernel).
    outputs: Vec<Shape>,
    operands: Vec<NodeIndex>,
}

impl Sibling<'_> {
    fn comp(&self) -> &Computation {
        self.m.comp(self.cid)
    }

    fn renumber(&mut self) {
        let order = self.comp().post_order();
        self.order.clear();
        for (k, n) in order.into_iter().enumerate() {
            self.set_pos(n, (k as u64 + 1) * SPACING);
        }
    }

    fn set_pos(&mut self, n: NodeIndex, p: u64) {
        if self.pos.len() <= n.index() {
            self.pos.resize(n.index() + 1, 0);
        }
        if let Some(old) = self.pos.get(n.index()).copied()
            && self.order.get(&old) == Some(&n)
        {
            self.order.remove(&old);
        }
        self.pos[n.index()] = p;
        self.order.insert(p, n);
    }

    fn pos_of(&self, n: NodeIndex) -> u64 {
        self.pos.get(n.index()).copied().unwrap_or(0)
    }

    /// Memoizes the parameter count of `n`'s fused computation (one scan per computation).
    fn note_params(&mut self, n: NodeIndex) {
        if let Some(Op::Fusion { calls, .. }) = self.comp().get(n).map(|i| &i.op) {
            let calls = *calls;
            if !self.param_counts.contains_key(&calls) && calls.index() < self.m.comps().len() {
                let k = self.m.comp(calls).params().len();
                self.param_counts.insert(calls, k);
            }
        }
    }

    /// The candidate description of `n`, if it is a sibling candidate (call
    /// [`Self::note_params`] on it first).
    fn kernel(&self, n: NodeIndex) -> Option<Kernel> {
        let c = self.comp();
        let i = c.get(n)?;
        let operands = rules::distinct_operands(c, n);
        let outputs = match &i.op {
            Op::Fusion { .. } => {
                let calls = fused::mergeable_loop_fusion(self.m, i, &self.calls)?;
                let fc = self.m.comp(calls);
                let root = fc.root()?;
                if self.param_counts.get(&calls).copied() != Some(c.operand_count(n)) {
                    return None;
                }
                match &i.shape {
                    Shape::Array(_) => vec![i.shape.clone()],
                    Shape::Tuple(t) => {
                        if fc.instr(root).op.opcode() != Opcode::Tuple
                            || c.root() == Some(n)
                            || !c
                                .users(n)
                                .iter()
                                .all(|&u| matches!(c.instr(u).op, Op::GetTupleElement { .. }))
                            || t.iter().any(|s| s.as_array().is_none())
                        {
                            return None;
                        }
                        t.clone()
                    }
                    _ => return None,
                }
            }
            op if rules::is_elementwise(c, n) && !op.has_side_effects() && !operands.is_empty() => {
                vec![i.shape.clone()]
            }
            _ => return None,
        };
        let first = outputs.first()?.as_array()?;
        if outputs.iter().any(|s| !rules::same_space(s, first)) {
            return None;
        }
        Some(Kernel { outputs, operands })
    }

    fn resolve(&self, n: NodeIndex, seq: u32) -> Option<NodeIndex> {
        let mut cur = (n, seq);
        for _ in 0..64 {
            match self.comp().get(cur.0) {
                Some(i) if i.seq == cur.1 => return Some(cur.0),
                _ => {}
            }
            let next = *self.forward.get(&cur.1)?;
            cur = (next, self.comp().get(next)?.seq);
        }
        None
    }

    fn run(&mut self) -> bool {
        self.renumber();
        // Candidate pairs: (profit, posA, posB, A, seqA, B, seqB).
        let mut pairs: Vec<(u64, u64, u64, NodeIndex, u32, NodeIndex, u32)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let nodes: Vec<NodeIndex> = self.order.values().copied().collect();
        for x in nodes {
            let xi = self.comp().instr(x);
            let xb = rules::bytes(&xi.shape);
            if xb == 0 || xi.shape.as_array().is_none() {
                continue;
            }
            let users = self.comp().users(x);
            for &u in &users {
                self.note_params(u);
            }
            let c = self.comp();
            let mut sibs: Vec<NodeIndex> =
                users.into_iter().filter(|&u| self.kernel(u).is_some()).collect();
            sibs.sort_by_key(|&u| self.pos_of(u));
            sibs.truncate(MAX_SIBLINGS_PER_OPERAND);
            for a in 0..sibs.len() {
                for b in a + 1..sibs.len() {
                    let (na, nb) = (sibs[a], sibs[b]);
                    if seen.insert((na, nb)) {
                        pairs.push((
                            xb,
                            self.pos_of(na),
                            self.pos_of(nb),
                            na,
                            c.instr(na).seq,
                            nb,
                            c.instr(nb).seq,
                        ));
                    }
                }
            }
        }
        pairs.sort_by(|p, q| q.0.cmp(&p.0).then(p.1.cmp(&q.1)).then(p.2.cmp(&q.2)));
        let mut changed = false;
        for (_, _, _, a0, sa, b0, sb) in pairs {
            let (Some(a), Some(b)) = (self.resolve(a0, sa), self.resolve(b0, sb)) else { continue };
            if a == b {
                continue;
            }
            let (a, b) = if self.pos_of(a) < self.pos_of(b) { (a, b) } else { (b, a) };
            let (Some(ka), Some(kb)) = (self.kernel(a), self.kernel(b)) else { continue };
            let shared: u64 = ka
                .operands
                .iter()
                .filter(|o| kb.operands.contains(o))
                .map(|&o| rules::bytes(&self.comp().instr(o).shape))
                .sum();
            if shared == 0 {
                continue;
            }
            let space_ok =
                ka.outputs[0].as_array().is_some_and(|x| rules::same_space(&kb.outputs[0], x));
            let verdict = if !space_ok {
                Err(Refusal::ShapeMismatch)
            } else if ka.operands.len() >= MAX_SIBLING_OPERANDS
                || kb.operands.len() >= MAX_SIBLING_OPERANDS
            {
                Err(Refusal::TooManyOperands)
            } else {
                match self.descendants_before(a, b) {
                    Some(d) => Ok(d),
                    None => Err(Refusal::WouldCreateCycle),
                }
            };
            let (an, bn) = (self.comp().instr(a).clone(), self.comp().instr(b).clone());
            let outcome = match verdict {
                Err(r) => Outcome::Refused(r),
                Ok(desc) => {
                    let mf = self.merge(a, ka, b, kb, desc);
                    changed = true;
                    Outcome::Fused {
                        fusion: self.comp().instr(mf).name.clone(),
                        kind: FusionKind::Loop,
                    }
                }
            };
            self.log.push(Decision {
                pass: "multi-output-fusion",
                computation: self.comp().name.clone(),
                producer: an.name,
                producer_op: an.op.opcode(),
                consumer: bn.name,
                consumer_op: bn.op.opcode(),
                producer_bytes: shared,
                outcome,
            });
        }
        changed
    }

    /// Instructions reachable from `a` through users with positions below `pos(b)`, in
    /// position order; `None` when `b` is among them or the search ran out of budget.
    fn descendants_before(&self, a: NodeIndex, b: NodeIndex) -> Option<Vec<NodeIndex>> {
        let c = self.comp();
        let limit = self.pos_of(b);
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![a];
        let mut found = Vec::new();
        while let Some(n) = stack.pop() {
            for u in c.users(n) {
                if u == b {
                    return None;
                }
                if self.pos_of(u) < limit && seen.insert(u) {
                    if seen.len() > rules::SEARCH_BUDGET {
                        return None;
                    }
                    found.push(u);
                    stack.push(u);
                }
            }
        }
        found.sort_by_key(|&n| self.pos_of(n));
        Some(found)
    }

    /// Merges siblings `a` (earlier) and `b` into one multi-output fusion; returns it.
    fn merge(
        &mut self,
        a: NodeIndex,
        ka: Kernel,
        b: NodeIndex,
        kb: Kernel,
        desc: Vec<NodeIndex>,
    ) -> NodeIndex {
        let mut ops = ka.operands.clone();
        for o in &kb.operands {
            if !ops.contains(o) {
                ops.push(*o);
            }
        }
        let parent = self.m.comp(self.cid);
        let shapes: Vec<Shape> = ops.iter().map(|&o| parent.instr(o).shape.clone()).collect();
        let mut fc = self.m.new_computation("fused_computation");
        let params: Vec<NodeIndex> =
            shapes.into_iter().enumerate().map(|(k, s)| fused::new_param(&mut fc, k, s)).collect();
        let mut outs = Vec::new();
        for k in [a, b] {
            outs.extend(self.import(&mut fc, k, &ops, &params));
        }
        let out_shapes: Vec<Shape> = outs.iter().map(|&o| fc.instr(o).shape.clone()).collect();
        let tuple_shape = Shape::Tuple(out_shapes.clone());
        let root =
            fc.add(Instr::new("tuple", Op::Plain(Opcode::Tuple), tuple_shape.clone()), &outs);
        fc.set_root(root);
        let root_op = |n: NodeIndex| -> Opcode {
            let i = self.m.comp(self.cid).instr(n);
            match &i.op {
                Op::Fusion { calls, .. } => {
                    let f = self.m.comp(*calls);
                    let r = f.root().map(|r| f.instr(r));
                    match r {
                        Some(r) if r.op.opcode() == Opcode::Tuple => f
                            .operand(f.root().expect("root"), 0)
                            .map_or(Opcode::Tuple, |o| f.instr(o).op.opcode()),
                        Some(r) => r.op.opcode(),
                        None => Opcode::Fusion,
                    }
                }
                op => op.opcode(),
            }
        };
        let name = fused::fusion_name(root_op(a), root_op(b));
        let old_comps: Vec<CompId> = [a, b]
            .iter()
            .filter_map(|&k| match self.m.comp(self.cid).instr(k).op {
                Op::Fusion { calls, .. } => Some(calls),
                _ => None,
            })
            .collect();
        let fcid = self.m.add_computation(fc);
        self.param_counts.insert(fcid, ops.len());
        if self.calls.len() <= fcid.index() {
            self.calls.resize(fcid.index() + 1, 0);
        }
        self.calls[fcid.index()] = 1;
        for c in old_comps {
            self.calls[c.index()] = 0;
            self.dead_comps.push(c);
        }
        let parent = self.m.comp_mut(self.cid);
        let mut mi = Instr::new(
            name,
            Op::Fusion { kind: FusionKind::Loop, calls: fcid, output_to_operand_aliasing: vec![] },
            tuple_shape,
        );
        mi.metadata = parent.instr(a).metadata.clone();
        let mf = parent.add(mi, &ops);
        let mut new_nodes = vec![mf];
        let mut offset = 0usize;
        for (k, kern) in [(a, &ka), (b, &kb)] {
            let seq = parent.instr(k).seq;
            if parent.instr(k).shape.is_tuple() {
                for u in parent.users(k) {
                    if let Op::GetTupleElement { index } = &mut parent.instr_mut(u).op {
                        *index += offset as i64;
                    }
                    let _ = parent.set_operand(u, 0, mf);
                }
            } else {
                let g = parent.add(
                    Instr::new(
                        "get-tuple-element",
                        Op::GetTupleElement { index: offset as i64 },
                        kern.outputs[0].clone(),
                    ),
                    &[mf],
                );
                parent.replace_all_uses(k, g);
                new_nodes.push(g);
            }
            let _ = parent.remove(k);
            self.forward.insert(seq, mf);
            offset += kern.outputs.len();
        }
        // Positions: the merged fusion and its gtes where `b` was, then a's descendants
        // that sat before b (they now read the fusion), in their old order.
        let pb = self.pos_of(b);
        let pa = self.pos_of(a);
        for (p, n) in [(pa, a), (pb, b)] {
            if self.order.get(&p) == Some(&n) {
                self.order.remove(&p);
            }
        }
        let next = self.order.range(pb + 1..).next().map_or(u64::MAX / 2, |(&p, _)| p);
        let moved: Vec<NodeIndex> = new_nodes.iter().copied().chain(desc.iter().copied()).collect();
        let step = (next.saturating_sub(pb)) / (moved.len() as u64 + 1);
        if step == 0 {
            self.renumber();
        } else {
            // `mf` takes pb itself; the rest follow at step intervals.
            for (k, n) in moved.into_iter().enumerate() {
                self.set_pos(n, pb + step * k as u64);
            }
        }
        mf
    }

    /// Copies kernel `k` into `fc` reading `params` (the merged operand list `ops`);
    /// returns its outputs in `fc`.
    fn import(
        &self,
        fc: &mut Computation,
        k: NodeIndex,
        ops: &[NodeIndex],
        params: &[NodeIndex],
    ) -> Vec<NodeIndex> {
        let parent = self.m.comp(self.cid);
        let ki = parent.instr(k);
        let k_ops = parent.operands(k);
        let param_of = |o: NodeIndex| {
            params[ops.iter().position(|x| *x == o).expect("merged operands cover both kernels")]
        };
        match &ki.op {
            Op::Fusion { calls, .. } => fused::import(
                self.m.comp(*calls),
                fc,
                &|k| k_ops.get(k).map(|&o| param_of(o)),
                ki.shape.is_tuple(),
            ),
            _ => {
                let operands: Vec<NodeIndex> = k_ops.iter().map(|&o| param_of(o)).collect();
                vec![fc.add(fused::member(ki), &operands)]
            }
        }
    }
}
