//! `all-reduce-combiner`: XLA's `AllReduceCombiner`. Independent all-reduces of one
//! computation with the same replica groups and the same reduction become one variadic
//! all-reduce (a tuple of all their operands; users read their element), so a step
//! synchronizes once per group instead of once per gradient. Two all-reduces combine only
//! when neither depends on the other; combined sets are capped at [`THRESHOLD_BYTES`].
//! `spmd-partition` runs it last.

use std::collections::HashMap;

use hlo_ir::op::CollectiveAttrs;
use hlo_ir::{CompId, Computation, Diagnostic, Instr, Module, NodeIndex, Op, Opcode, Shape};

use hlo_ir::schedule::Schedule;
use hlo_pipeline::{Pass, PassContext};

/// XLA's default combine threshold (30 MiB of operands per combined all-reduce).
pub const THRESHOLD_BYTES: u64 = 30 << 20;

pub struct AllReduceCombiner;

impl Pass for AllReduceCombiner {
    fn name(&self) -> &'static str {
        "all-reduce-combiner"
    }

    fn run(&mut self, m: &mut Module, _cx: &mut PassContext) -> Result<bool, Diagnostic> {
        let mut changed = false;
        let ids: Vec<CompId> = m.comp_ids().collect();
        for id in ids {
            let reducers: HashMap<CompId, Option<Opcode>> =
                m.comp_ids().map(|c| (c, hlo_interp::binary_reducer(m.comp(c)))).collect();
            changed |= combine(m.comp_mut(id), &reducers);
        }
        Ok(changed)
    }
}

fn bytes(s: &Shape) -> u64 {
    hlo_interp::shape_bytes(s).unwrap_or(u64::MAX)
}

/// The key all-reduces must share to combine: groups, reducer op, element type.
fn key(
    ins: &Instr,
    reducers: &HashMap<CompId, Option<Opcode>>,
) -> Option<(String, Opcode, hlo_ir::ElemType)> {
    let Op::Collective { opcode: Opcode::AllReduce, attrs } = &ins.op else { return None };
    let op = reducers.get(&attrs.to_apply?).copied().flatten()?;
    let elem = ins.shape.as_array()?.elem;
    Some((format!("{:?}|{}", attrs.replica_groups, attrs.use_global_device_ids), op, elem))
}

fn combine(c: &mut Computation, reducers: &HashMap<CompId, Option<Opcode>>) -> bool {
    let sched = Schedule::new(c);
    let order = sched.nodes.clone();
    let pos: HashMap<NodeIndex, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let ars: Vec<NodeIndex> =
        order.iter().copied().filter(|&n| key(c.instr(n), reducers).is_some()).collect();
    if ars.len() < 2 {
        return false;
    }
    // ancestors[k]: which all-reduces (by index into `ars`) instruction k depends on.
    let index: HashMap<NodeIndex, usize> = ars.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let words = ars.len().div_ceil(64);
    let mut anc: Vec<Vec<u64>> = vec![vec![0; words]; order.len()];
    for (k, &n) in order.iter().enumerate() {
        let mut set = vec![0u64; words];
        for o in c.operands(n) {
            let j = pos[&o];
            for (w, x) in set.iter_mut().zip(&anc[j]) {
                *w |= x;
            }
            if let Some(&i) = index.get(&o) {
                set[i / 64] |= 1 << (i % 64);
            }
        }
        anc[k] = set;
    }
    let depends = |n: NodeIndex, i: usize| anc[pos[&n]][i / 64] >> (i % 64) & 1 == 1;
    // Greedy in schedule order: join the open set of the same key unless this one depends
    // on a member (members cannot depend on a later one).
    let mut sets: Vec<(Vec<NodeIndex>, u64)> = Vec::new();
    let mut open: HashMap<(String, Opcode, hlo_ir::ElemType), usize> = HashMap::new();
    for &n in &ars {
        let k = key(c.instr(n), reducers).expect("filtered");
        let b = bytes(&c.instr(n).shape);
        let fits = |s: &(Vec<NodeIndex>, u64)| {
            s.1.saturating_add(b) <= THRESHOLD_BYTES && !s.0.iter().any(|&m| depends(n, index[&m]))
        };
        match open.get(&k) {
            Some(&s) if fits(&sets[s]) => {
                sets[s].0.push(n);
                sets[s].1 += b;
            }
            _ => {
                open.insert(k, sets.len());
                sets.push((vec![n], b));
            }
        }
    }
    let mut changed = false;
    for (members, _) in sets.into_iter().filter(|s| s.0.len() > 1) {
        let first = c.instr(members[0]).clone();
        let Op::Collective { attrs, .. } = &first.op else { continue };
        let attrs: CollectiveAttrs = (**attrs).clone();
        let operands: Vec<NodeIndex> = members.iter().map(|&n| c.operands(n)[0]).collect();
        let shapes: Vec<Shape> = members.iter().map(|&n| c.instr(n).shape.clone()).collect();
        let mut combined = Instr::new(
            "all-reduce",
            Op::Collective { opcode: Opcode::AllReduce, attrs: Box::new(attrs) },
            Shape::Tuple(shapes.clone()),
        );
        combined.metadata = first.metadata.clone();
        let node = c.add(combined, &operands);
        for (i, &n) in members.iter().enumerate() {
            let gte = c.add(
                Instr::new(
                    c.instr(n).name.clone(),
                    Op::GetTupleElement { index: i as i64 },
                    shapes[i].clone(),
                ),
                &[node],
            );
            c.replace_all_uses(n, gte);
            let _ = c.remove(n);
        }
        changed = true;
    }
    changed
}
