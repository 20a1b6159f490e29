//! The `fusion` pass: producer→consumer fusion with XLA's driver.
//!
//! Per computation ([`super::fusible_computations`]): visit instructions in reverse post
//! order (consumers before producers); for a consumer, try its distinct operands nearest
//! first (decreasing post-order position; scalar constants last, so that they join a
//! fusion rather than being refused as "a constant alone"). When a producer is fused, the
//! consumer becomes (or stays) a fusion instruction and its operand scan restarts. A
//! producer left without users is removed; one with other users stays (it was
//! duplicated, which the rules only allow for cheap producers).
//!
//! Kinds: a consumer that is a `reduce` makes a `kInput` fusion (the reduce is the hero
//! root; its producers are fused into its inputs). A `dot`/`convolution` producer fused
//! into an elementwise epilogue (bias add, relu, scale, convert...) makes a `kOutput`
//! fusion; the hero's own operands stay outside ([`Refusal::ContractionOperand`]).
//! Everything else is `kLoop`. A `reduce` is never fused as a producer
//! ([`Refusal::ReductionEpilogue`]): its epilogue becomes its own loop fusion. That is the
//! TPU-friendly choice: the reduce result is small, and a loop fusion reading it through a
//! broadcast would recompute the reduction per element.
//!
//! Cycles cannot arise here: a fused producer's operands are its own ancestors, and a
//! producer that keeps other users stays in place, so no reachability analysis is needed
//! (it is in [`super::multi_output`], where siblings are merged). Every edit is O(degree),
//! so the pass is O(n log n) in the instruction count.

use hlo_ir::op::{FusionKind, Op};
use hlo_ir::{CompId, Computation, Diagnostic, Module, NodeIndex, Opcode};

use super::decision::{Decision, Outcome, Refusal};
use super::fused::{self, FusedState};
use super::rules;
use hlo_ir::hash::FnvHashMap as FnvMap;
use hlo_pipeline::{Pass, PassContext};

/// The `fusion` pass.
#[derive(Debug, Default)]
pub struct Fusion;

impl Pass for Fusion {
    fn name(&self) -> &'static str {
        "fusion"
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext) -> Result<bool, Diagnostic> {
        let calls = super::call_counts(m);
        let mut changed = false;
        for cid in super::fusible_computations(m) {
            let mut f = Fuser::new(m, cid, &calls);
            f.run();
            changed |= f.changed;
            let Fuser { log, renames, .. } = f;
            // Final names: each fusion was replaced by a newer one, in order; walking the
            // renames backwards resolves every chain in one pass.
            let mut last: FnvMap<String, String> = FnvMap::default();
            for (old, new) in renames.into_iter().rev() {
                let end = last.get(&new).cloned().unwrap_or(new);
                last.insert(old, end);
            }
            let resolve = |name: &str| -> String {
                last.get(name).cloned().unwrap_or_else(|| name.to_string())
            };
            for mut d in log {
                d.consumer = resolve(&d.consumer);
                if let Outcome::Fused { fusion, .. } = &mut d.outcome {
                    *fusion = resolve(fusion);
                }
                cx.report_or_default::<super::decision::FusionLog>().decisions.push(d);
            }
        }
        Ok(changed)
    }
}

/// How the consumer would take the producer.
#[derive(Debug, Clone, Copy)]
enum Consumer {
    /// A plain instruction, to be wrapped into a fusion of this kind.
    Plain(FusionKind),
    /// A fusion instruction to extend.
    Fusion { comp: CompId, kind: FusionKind },
}

struct Fuser<'a> {
    m: &'a mut Module,
    cid: CompId,
    calls: &'a [u32],
    states: FnvMap<CompId, FusedState>,
    /// Post-order position of each node (index by `NodeIndex::index`).
    pos: Vec<usize>,
    /// `seq`s of instructions that take part in control dependencies.
    controlled: std::collections::HashSet<u32>,
    log: Vec<Decision>,
    /// (old fusion name, the name of the fusion that replaced it), in order.
    renames: Vec<(String, String)>,
    changed: bool,
}

impl<'a> Fuser<'a> {
    fn new(m: &'a mut Module, cid: CompId, calls: &'a [u32]) -> Fuser<'a> {
        let c = m.comp(cid);
        let mut controlled = std::collections::HashSet::new();
        if c.has_control_edges() {
            for n in c.nodes() {
                for &p in c.control_predecessors(n) {
                    controlled.insert(c.instr(n).seq);
                    controlled.insert(c.instr(p).seq);
                }
            }
        }
        Fuser {
            m,
            cid,
            calls,
            states: FnvMap::default(),
            pos: Vec::new(),
            controlled,
            log: Vec::new(),
            renames: Vec::new(),
            changed: false,
        }
    }

    fn comp(&self) -> &Computation {
        self.m.comp(self.cid)
    }

    fn pos_of(&self, n: NodeIndex) -> usize {
        self.pos.get(n.index()).copied().unwrap_or(0)
    }

    fn set_pos(&mut self, n: NodeIndex, p: usize) {
        if self.pos.len() <= n.index() {
            self.pos.resize(n.index() + 1, 0);
        }
        self.pos[n.index()] = p;
    }

    fn run(&mut self) {
        let order: Vec<(NodeIndex, u32)> = {
            let c = self.comp();
            c.post_order().into_iter().map(|n| (n, c.instr(n).seq)).collect()
        };
        for (k, &(n, _)) in order.iter().enumerate() {
            self.set_pos(n, k);
        }
        for &(n, seq) in order.iter().rev() {
            if self.comp().get(n).map(|i| i.seq) == Some(seq) {
                self.process(n);
            }
        }
    }

    /// Fuses producers into consumer `c` until none of its operands can be fused.
    fn process(&mut self, mut c: NodeIndex) {
        if self.classify_consumer(c).is_none() {
            return;
        }
        let mut logged: FnvMap<String, Refusal> = FnvMap::default();
        'scan: loop {
            let cands = {
                let comp = self.comp();
                let mut v = rules::distinct_operands(comp, c);
                v.sort_by_key(|&o| {
                    let i = comp.instr(o);
                    let scalar_const =
                        matches!(i.op, Op::Constant(_)) && !rules::is_large_constant(comp, o);
                    (scalar_const, std::cmp::Reverse(self.pos_of(o)))
                });
                v
            };
            for p in cands {
                let Some(verdict) = self.consider(p, c) else { continue };
                match verdict {
                    Err(r) => {
                        let name = self.comp().instr(p).name.clone();
                        if logged.get(&name) != Some(&r) {
                            logged.insert(name, r);
                            self.record(p, c, Outcome::Refused(r));
                        }
                    }
                    Ok((consumer, kind)) => {
                        let p_name = self.comp().instr(p).name.clone();
                        let p_op = self.comp().instr(p).op.opcode();
                        let p_bytes = rules::bytes(&self.comp().instr(p).shape);
                        let (c_name, c_op) = {
                            let i = self.comp().instr(c);
                            (i.name.clone(), i.op.opcode())
                        };
                        c = self.fuse(p, c, consumer, kind);
                        self.changed = true;
                        let fusion = self.comp().instr(c).name.clone();
                        self.log.push(Decision {
                            pass: "fusion",
                            computation: self.comp().name.clone(),
                            producer: p_name,
                            producer_op: p_op,
                            consumer: c_name,
                            consumer_op: c_op,
                            producer_bytes: p_bytes,
                            outcome: Outcome::Fused { fusion, kind },
                        });
                        continue 'scan;
                    }
                }
            }
            break;
        }
        self.finish(c);
    }

    /// Names the parameters of `c`'s fused computation `param_<number>` (XLA style), once
    /// the fusion is complete.
    fn finish(&mut self, c: NodeIndex) {
        let Some(Op::Fusion { calls, .. }) = self.comp().get(c).map(|i| &i.op) else { return };
        let calls = *calls;
        let Some(st) = self.states.get(&calls) else { return };
        let params = st.params.clone();
        let fc = self.m.comp_mut(calls);
        for (k, p) in params.into_iter().enumerate() {
            let want = format!("param_{k}");
            if hlo_ir::computation::name_stem(&fc.instr(p).name) != want {
                fc.rename(p, &want);
            }
        }
    }

    fn record(&mut self, p: NodeIndex, c: NodeIndex, outcome: Outcome) {
        let comp = self.comp();
        let (pi, ci) = (comp.instr(p), comp.instr(c));
        let d = Decision {
            pass: "fusion",
            computation: comp.name.clone(),
            producer: pi.name.clone(),
            producer_op: pi.op.opcode(),
            consumer: ci.name.clone(),
            consumer_op: ci.op.opcode(),
            producer_bytes: rules::bytes(&pi.shape),
            outcome,
        };
        self.log.push(d);
    }

    fn state(&mut self, fc: CompId) -> &FusedState {
        if !self.states.contains_key(&fc) {
            let st = FusedState::of(self.m.comp(fc));
            self.states.insert(fc, st);
        }
        &self.states[&fc]
    }

    /// Where consumer `c` reads `p`: (computation, user, slot) triples — `c` itself in
    /// the parent, or the users of `p`'s parameters inside `c`'s fused computation.
    fn uses(
        &mut self,
        p: NodeIndex,
        c: NodeIndex,
        consumer: Consumer,
    ) -> (CompId, Vec<(NodeIndex, usize)>) {
        let ops = self.comp().operands(c);
        match consumer {
            Consumer::Plain(_) => (
                self.cid,
                ops.iter().enumerate().filter(|(_, o)| **o == p).map(|(s, _)| (c, s)).collect(),
            ),
            Consumer::Fusion { comp, .. } => {
                let params = self.state(comp).params.clone();
                let fc = self.m.comp(comp);
                let mut v = Vec::new();
                for (k, o) in ops.iter().enumerate() {
                    if *o != p {
                        continue;
                    }
                    let Some(&param) = params.get(k) else { continue };
                    for u in fc.users(param) {
                        for (s, x) in fc.operands(u).into_iter().enumerate() {
                            if x == param {
                                v.push((u, s));
                            }
                        }
                    }
                }
                (comp, v)
            }
        }
    }

    /// How `c` could absorb a producer; `None` for a kernel boundary (not logged).
    fn classify_consumer(&self, c: NodeIndex) -> Option<Result<Consumer, Refusal>> {
        let comp = self.comp();
        let i = comp.instr(c);
        if let Op::Fusion { kind, calls, .. } = &i.op {
            if *kind == FusionKind::Custom
                || (!self.states.contains_key(calls)
                    && self.calls.get(calls.index()).copied().unwrap_or(0) != 1)
            {
                return Some(Err(Refusal::ConsumerNotFusible));
            }
            return Some(Ok(Consumer::Fusion { comp: *calls, kind: *kind }));
        }
        if rules::is_boundary_consumer(&i.op) {
            return None;
        }
        let op = i.op.opcode();
        Some(if rules::is_contraction(op) {
            Err(Refusal::ContractionOperand)
        } else if op == Opcode::Reduce {
            Ok(Consumer::Plain(FusionKind::Input))
        } else if rules::is_inefficient_concat(comp, c) {
            Err(Refusal::ConcatenateInefficient)
        } else if rules::is_loop_fusible(comp, c) {
            Ok(Consumer::Plain(FusionKind::Loop))
        } else {
            Err(Refusal::ConsumerNotFusible)
        })
    }

    /// The decision for (p, c): `None` when the pair is not worth logging, the consumer
    /// form and resulting kind when it may be fused.
    fn consider(
        &mut self,
        p: NodeIndex,
        c: NodeIndex,
    ) -> Option<Result<(Consumer, FusionKind), Refusal>> {
        let comp = self.comp();
        let pi = comp.instr(p);
        if rules::is_boundary_producer(&pi.op) {
            return None;
        }
        let consumer = match self.classify_consumer(c)? {
            Ok(k) => k,
            Err(r) => return Some(Err(r)),
        };
        // An existing fusion whose parameters do not match its operands is left alone.
        if let Consumer::Fusion { comp, .. } = consumer
            && self.state(comp).params.len() != self.comp().operand_count(c)
        {
            return Some(Err(Refusal::ConsumerNotFusible));
        }
        Some(self.check(p, c, consumer))
    }

    fn check(
        &mut self,
        p: NodeIndex,
        c: NodeIndex,
        consumer: Consumer,
    ) -> Result<(Consumer, FusionKind), Refusal> {
        let comp = self.comp();
        let pi = comp.instr(p);
        let p_op = pi.op.opcode();
        if comp.root() == Some(p) {
            return Err(Refusal::ProducerIsRoot);
        }
        if pi.op.has_side_effects() {
            return Err(Refusal::SideEffects);
        }
        if !self.controlled.is_empty()
            && (self.controlled.contains(&pi.seq) || self.controlled.contains(&comp.instr(c).seq))
        {
            return Err(Refusal::ControlDependency);
        }
        let contraction = rules::is_contraction(p_op);
        if p_op == Opcode::Reduce || matches!(pi.op, Op::Fusion { kind: FusionKind::Input, .. }) {
            return Err(Refusal::ReductionEpilogue);
        }
        if pi.shape.as_array().is_none() || matches!(pi.op, Op::Fusion { .. }) {
            return Err(Refusal::ProducerNotFusible);
        }
        if p_op == Opcode::DynamicUpdateSlice {
            return Err(Refusal::InPlaceHazard);
        }
        if rules::is_large_constant(comp, p) {
            return Err(Refusal::LargeConstant);
        }
        if p_op == Opcode::Constant && matches!(consumer, Consumer::Plain(_)) {
            return Err(Refusal::ConstantIntoNonFusion);
        }
        if !contraction && !rules::is_loop_fusible(comp, p) {
            return Err(Refusal::ProducerNotFusible);
        }
        if rules::is_inefficient_concat(comp, p) {
            return Err(Refusal::ConcatenateInefficient);
        }
        let exclusive = comp.sole_user(p) == Some(c);
        // More distinct users than the duplication cap (counting stops past it).
        let too_many_users = {
            let mut distinct: Vec<NodeIndex> = Vec::with_capacity(rules::MAX_DUPLICATION_USERS + 1);
            for u in comp.users_unordered(p) {
                if !distinct.contains(&u) {
                    distinct.push(u);
                    if distinct.len() > rules::MAX_DUPLICATION_USERS {
                        break;
                    }
                }
            }
            distinct.len() > rules::MAX_DUPLICATION_USERS
        };
        let expensive = rules::is_expensive(comp, p);
        let always_dup = rules::is_always_duplicable(comp, p);
        let cheap_dup = rules::is_cheaply_duplicable(comp, p);
        let p_dims = pi.shape.as_array().map(|a| a.dims.clone());
        let (ucomp, uses) = self.uses(p, c, consumer);
        let hero = match consumer {
            Consumer::Fusion { comp: fcomp, .. } => self.state(fcomp).hero,
            Consumer::Plain(_) => None,
        };
        let fc = self.m.comp(ucomp);
        let mut kind = match consumer {
            Consumer::Plain(k) => k,
            Consumer::Fusion { kind, .. } => kind,
        };
        if hero.is_some() && uses.iter().any(|&(u, _)| Some(u) == hero) {
            return Err(Refusal::ContractionOperand);
        }
        if contraction {
            if !exclusive {
                return Err(Refusal::ExpensiveWouldDuplicate);
            }
            let epilogue = kind == FusionKind::Loop
                && hero.is_none()
                && !uses.is_empty()
                && uses.iter().all(|&(u, _)| {
                    rules::is_elementwise(fc, u)
                        && fc.instr(u).shape.as_array().map(|a| a.dims.clone()) == p_dims
                });
            if !epilogue {
                return Err(Refusal::NotAnEpilogue);
            }
            kind = FusionKind::Output;
        } else if expensive && uses.iter().any(|&(u, s)| rules::reuses_operand(fc, u, s)) {
            return Err(Refusal::ExpensiveIntoReusingConsumer);
        }
        if !exclusive && !always_dup {
            if expensive {
                return Err(Refusal::ExpensiveWouldDuplicate);
            }
            if !cheap_dup {
                return Err(Refusal::NotDuplicable);
            }
            if too_many_users {
                return Err(Refusal::DuplicationCap);
            }
        }
        self.in_place_check(p, c, consumer)?;
        let comp = self.comp();
        let comp_ops = comp.operands(c);
        let p_ops = rules::distinct_operands(comp, p);
        let after = comp_ops.iter().filter(|&&o| o != p).count()
            + p_ops.iter().filter(|o| !comp_ops.contains(o)).count();
        let before_distinct = rules::distinct_operands(comp, c).len();
        if after > rules::MAX_FUSION_OPERANDS && after > before_distinct {
            return Err(Refusal::TooManyOperands);
        }
        Ok((consumer, kind))
    }

    /// XLA's `ShouldFuseInPlaceOp` (see `passes.md` §b.2).
    fn in_place_check(
        &mut self,
        p: NodeIndex,
        c: NodeIndex,
        consumer: Consumer,
    ) -> Result<(), Refusal> {
        let ops = self.comp().operands(c);
        // The operands `c` updates in place, and (for a DUS) its index operands.
        let mut in_place: Vec<NodeIndex> = Vec::new();
        let mut dus_indices: Option<Vec<NodeIndex>> = None;
        let mut inplace_params: Vec<NodeIndex> = Vec::new();
        let mut dus_root: Option<NodeIndex> = None;
        match consumer {
            Consumer::Plain(_) => {
                if self.comp().instr(c).op.opcode() == Opcode::DynamicUpdateSlice
                    && let Some(&buf) = ops.first()
                {
                    in_place.push(buf);
                    dus_indices = ops.get(2..).map(<[NodeIndex]>::to_vec);
                }
            }
            Consumer::Fusion { comp: fcid, .. } => {
                let params = self.state(fcid).params.clone();
                let fc = self.m.comp(fcid);
                if let Op::Fusion { output_to_operand_aliasing, .. } = &self.comp().instr(c).op {
                    if output_to_operand_aliasing.iter().any(|a| {
                        usize::try_from(a.operand).ok().and_then(|k| ops.get(k)) == Some(&p)
                    }) {
                        return Err(Refusal::InPlaceHazard);
                    }
                    for a in output_to_operand_aliasing {
                        if let Some(&o) = usize::try_from(a.operand).ok().and_then(|k| ops.get(k)) {
                            in_place.push(o);
                            if let Some(&pp) =
                                usize::try_from(a.operand).ok().and_then(|k| params.get(k))
                            {
                                inplace_params.push(pp);
                            }
                        }
                    }
                }
                if let Some(r) = fc.root()
                    && fc.instr(r).op.opcode() == Opcode::DynamicUpdateSlice
                {
                    let rops = fc.operands(r);
                    if let Some(&buf) = rops.first()
                        && let Some(k) = params.iter().position(|&x| x == buf)
                        && let Some(&o) = ops.get(k)
                    {
                        in_place.push(o);
                        inplace_params.push(buf);
                        dus_root = Some(r);
                        // Index operands that are parameters map back to fusion operands.
                        let idx: Option<Vec<NodeIndex>> = rops
                            .get(2..)
                            .unwrap_or(&[])
                            .iter()
                            .map(|x| {
                                params.iter().position(|y| y == x).and_then(|k| ops.get(k).copied())
                            })
                            .collect();
                        dus_indices = idx;
                    }
                }
            }
        }
        if in_place.is_empty() {
            return Ok(());
        }
        let comp = self.comp();
        // The in-place buffer passed twice to the consumer.
        if matches!(consumer, Consumer::Plain(_))
            && in_place.iter().any(|b| ops.iter().filter(|o| *o == b).count() > 1)
        {
            return Err(Refusal::InPlaceHazard);
        }
        if in_place.contains(&p) {
            return Ok(());
        }
        let p_ops = comp.operands(p);
        if !p_ops.iter().any(|o| in_place.contains(o)) {
            return Ok(());
        }
        // `p` reads the buffer updated in place.
        if comp.instr(p).op.opcode() == Opcode::DynamicSlice
            && let Some(idx) = &dus_indices
            && p_ops.len() == idx.len() + 1
            && p_ops[1..] == idx[..]
            && in_place.contains(&p_ops[0])
        {
            return Ok(());
        }
        if !rules::is_elementwise(comp, p) && comp.instr(p).op.opcode() != Opcode::Bitcast {
            return Err(Refusal::InPlaceHazard);
        }
        // Elementwise: only if no other non-elementwise fused op reads the buffer.
        if let Consumer::Fusion { comp: fcid, .. } = consumer {
            let fc = self.m.comp(fcid);
            for &pp in &inplace_params {
                for u in fc.users(pp) {
                    if Some(u) == dus_root
                        && fc.operand(u, 0) == Some(pp)
                        && fc.operands(u).iter().filter(|&&x| x == pp).count() == 1
                    {
                        continue;
                    }
                    if !rules::is_elementwise(fc, u) && fc.instr(u).op.opcode() != Opcode::Bitcast {
                        return Err(Refusal::InPlaceHazard);
                    }
                }
            }
        }
        Ok(())
    }

    /// Fuses `p` into `c`; returns the fusion instruction that replaces `c`.
    fn fuse(
        &mut self,
        p: NodeIndex,
        c: NodeIndex,
        consumer: Consumer,
        kind: FusionKind,
    ) -> NodeIndex {
        let c_pos = self.pos_of(c);
        let (f, fcid) = match consumer {
            Consumer::Fusion { comp, .. } => (c, comp),
            Consumer::Plain(k) => {
                let (root_op, p_op) =
                    (self.comp().instr(c).op.opcode(), self.comp().instr(p).op.opcode());
                let (f, fcid, st) =
                    fused::wrap(self.m, self.cid, c, fused::fusion_name(root_op, p_op), k);
                self.states.insert(fcid, st);
                self.set_pos(f, c_pos);
                (f, fcid)
            }
        };
        self.state(fcid);
        let mut st = self.states.remove(&fcid).expect("state loaded");
        let parent = self.m.comp(self.cid);
        let ops = parent.operands(f);
        let pi = fused::member(parent.instr(p));
        let p_ops = parent.operands(p);
        let p_op_shapes: Vec<_> = p_ops.iter().map(|&o| parent.instr(o).shape.clone()).collect();
        let (old_op, old_name) = (parent.instr(f).op.clone(), parent.instr(f).name.clone());
        let contraction = rules::is_contraction(pi.op.opcode());
        // Parameters for p's operands: existing ones where the operand is already passed.
        let mut new_ops = ops.clone();
        let fc = self.m.comp_mut(fcid);
        let mut clone_ops = Vec::with_capacity(p_ops.len());
        for (o, shape) in p_ops.iter().zip(p_op_shapes) {
            match new_ops.iter().position(|x| x == o) {
                Some(k) => clone_ops.push(st.params[k]),
                None => {
                    let k = new_ops.len();
                    let param = fused::new_param(fc, k, shape);
                    st.params.push(param);
                    new_ops.push(*o);
                    clone_ops.push(param);
                }
            }
        }
        let clone = fc.add(pi, &clone_ops);
        if contraction {
            st.hero = Some(clone);
        }
        let removed: Vec<usize> = (0..ops.len()).filter(|&k| ops[k] == p).collect();
        for &k in &removed {
            fc.replace_all_uses(st.params[k], clone);
            fused::delete_dead_param(fc, st.params[k]);
        }
        for &k in removed.iter().rev() {
            st.params.remove(k);
            new_ops.remove(k);
        }
        if let Some(&first) = removed.first() {
            for k in first..st.params.len() {
                fused::set_param_number(fc, st.params[k], k);
            }
        }
        self.states.insert(fcid, st);
        let aliases = match &old_op {
            Op::Fusion { output_to_operand_aliasing, .. } => {
                fused::shift_aliases(output_to_operand_aliasing, &removed)
            }
            _ => Vec::new(),
        };
        let parent = self.m.comp_mut(self.cid);
        let nf = fused::rebuild(
            parent,
            f,
            &new_ops,
            Op::Fusion { kind, calls: fcid, output_to_operand_aliasing: aliases },
        );
        if !parent.has_users(p) && parent.root() != Some(p) {
            let _ = parent.remove(p);
        }
        let new_name = parent.instr(nf).name.clone();
        self.renames.push((old_name, new_name));
        self.set_pos(nf, c_pos);
        nf
    }
}
