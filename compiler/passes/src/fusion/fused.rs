//! Building and editing fused computations: parameters, clones, the fusion instruction.
//!
//! Everything here is O(degree) per edit (no scan of a whole fused computation), so that
//! growing a fusion one producer at a time stays linear in the size of the fusion.

use hlo_ir::op::{Alias, FusionKind, Op};
use hlo_ir::{CompId, Computation, Instr, Module, NodeIndex, Opcode, Shape};

use super::rules;
use hlo_ir::hash::FnvHashMap as FnvMap;

/// A parameter numbered `number`, named `param_<number>` (plus the fresh `.N` suffix).
pub fn new_param(fc: &mut Computation, number: usize, shape: Shape) -> NodeIndex {
    fc.add(
        Instr::new(
            format!("param_{number}"),
            Op::Parameter { number: number as u32, replication: None },
            shape,
        ),
        &[],
    )
}

/// Removes a dead parameter without renumbering the others (the caller renumbers the
/// few it tracks; [`Computation::remove_param`] would scan the whole computation).
pub fn delete_dead_param(fc: &mut Computation, p: NodeIndex) {
    if fc.has_users(p) || fc.root() == Some(p) {
        return;
    }
    fc.instr_mut(p).op = Op::Plain(Opcode::Tuple);
    let _ = fc.remove(p);
}

/// Sets the number of parameter node `p` (a parameter of `fc`).
pub fn set_param_number(fc: &mut Computation, p: NodeIndex, number: usize) {
    if let Op::Parameter { number: k, .. } = &mut fc.instr_mut(p).op {
        *k = number as u32;
    }
}

/// A copy of `i` to add to a fused computation: same op, shape, metadata, sharding and
/// extras; the name's stem is kept (the computation gives it a fresh suffix). It keeps
/// the span of the name as written, so that a later error (the JIT refusing it) points
/// at the user's instruction; not the statement's extent, whose attributes are no
/// longer this instruction's.
pub fn member(i: &Instr) -> Instr {
    let mut c = i.clone();
    c.extent = Default::default();
    c
}

/// `<root-op>_<producer-op>_fusion`, with `-` spelled `_` (`multiply_add_fusion`).
pub fn fusion_name(root: Opcode, producer: Opcode) -> String {
    format!("{}_{}_fusion", root.name(), producer.name()).replace('-', "_")
}

/// The kind of a fusion with this hero and root.
pub fn kind_for(has_contraction: bool, root: Opcode) -> FusionKind {
    if has_contraction {
        FusionKind::Output
    } else if root == Opcode::Reduce {
        FusionKind::Input
    } else {
        FusionKind::Loop
    }
}

/// What a fusion pass tracks about a fused computation it edits.
#[derive(Debug, Clone)]
pub struct FusedState {
    /// The parameter nodes in number order (parameter `k` ↔ fusion operand `k`).
    pub params: Vec<NodeIndex>,
    /// The dot/convolution hero of an output fusion, if any.
    pub hero: Option<NodeIndex>,
}

impl FusedState {
    /// Reads the state of an existing fused computation (one scan).
    pub fn of(fc: &Computation) -> FusedState {
        let params = fc.params();
        let hero = fc.nodes().find(|&n| rules::is_contraction(fc.instr(n).op.opcode()));
        FusedState { params, hero }
    }
}

/// Wraps instruction `c` of computation `cid` into a new fusion whose fused computation
/// holds a copy of `c` as its root; parameters are `c`'s distinct operands in slot order.
/// Returns the fusion instruction and its computation.
pub fn wrap(
    m: &mut Module,
    cid: CompId,
    c: NodeIndex,
    name: String,
    kind: FusionKind,
) -> (NodeIndex, CompId, FusedState) {
    let parent = m.comp(cid);
    let ci = parent.instr(c).clone();
    let slots = parent.operands(c);
    let distinct = rules::distinct_operands(parent, c);
    let shapes: Vec<Shape> = distinct.iter().map(|&o| parent.instr(o).shape.clone()).collect();
    let mut fc = m.new_computation("fused_computation");
    let params: Vec<NodeIndex> =
        shapes.into_iter().enumerate().map(|(k, s)| new_param(&mut fc, k, s)).collect();
    let root_ops: Vec<NodeIndex> = slots
        .iter()
        .map(|o| params[distinct.iter().position(|d| d == o).expect("every operand is listed")])
        .collect();
    let root = fc.add(member(&ci), &root_ops);
    fc.set_root(root);
    let hero = rules::is_contraction(ci.op.opcode()).then_some(root);
    let fcid = m.add_computation(fc);
    let mut fi = Instr::new(
        name,
        Op::Fusion { kind, calls: fcid, output_to_operand_aliasing: vec![] },
        ci.shape.clone(),
    );
    fi.metadata = ci.metadata.clone();
    fi.sharding = ci.sharding.clone();
    let parent = m.comp_mut(cid);
    let f = parent.add(fi, &distinct);
    parent.replace_all_uses(c, f);
    let _ = parent.remove(c);
    (f, fcid, FusedState { params, hero })
}

/// Replaces fusion instruction `f` by a copy with operands `ops` and op `op` (same name
/// stem, shape, metadata); returns the new node.
pub fn rebuild(parent: &mut Computation, f: NodeIndex, ops: &[NodeIndex], op: Op) -> NodeIndex {
    let mut ni = member(parent.instr(f));
    ni.op = op;
    let nf = parent.add(ni, ops);
    parent.replace_all_uses(f, nf);
    let _ = parent.remove(f);
    nf
}

/// `output_to_operand_aliasing` after the operands in `removed` (sorted) were dropped:
/// later operand indices move down; aliases of a dropped operand are dropped.
pub fn shift_aliases(aliases: &[Alias], removed: &[usize]) -> Vec<Alias> {
    aliases
        .iter()
        .filter(|a| usize::try_from(a.operand).map_or(true, |k| !removed.contains(&k)))
        .map(|a| {
            let mut a = a.clone();
            let k = usize::try_from(a.operand).unwrap_or(0);
            a.operand -= removed.iter().filter(|&&r| r < k).count() as i64;
            a
        })
        .collect()
}

/// The fused computation of `i` when multi-output fusion may merge it: a `kLoop` fusion
/// without output-to-operand aliasing whose computation nothing else calls (`calls`:
/// call counts by computation) and whose root is not an in-place
/// `dynamic-update-slice`.
pub fn mergeable_loop_fusion(m: &Module, i: &Instr, calls: &[u32]) -> Option<CompId> {
    let Op::Fusion { kind: FusionKind::Loop, calls: fc, output_to_operand_aliasing } = &i.op else {
        return None;
    };
    if !output_to_operand_aliasing.is_empty() || calls.get(fc.index()).copied() != Some(1) {
        return None;
    }
    let comp = m.comp(*fc);
    let root = comp.root()?;
    (comp.instr(root).op.opcode() != Opcode::DynamicUpdateSlice).then_some(*fc)
}

/// Copies fused computation `src` into `fc`, its parameter `k` read as `param(k)`;
/// returns its outputs (a tuple root's operands when `tuple_root`, else the root).
pub fn import(
    src: &Computation,
    fc: &mut Computation,
    param: &dyn Fn(usize) -> Option<NodeIndex>,
    tuple_root: bool,
) -> Vec<NodeIndex> {
    let mut map: FnvMap<NodeIndex, NodeIndex> = FnvMap::default();
    let root = src.root();
    for n in src.post_order() {
        if tuple_root && Some(n) == root {
            continue;
        }
        let i = src.instr(n);
        let new = if let Op::Parameter { number, .. } = i.op {
            match param(number as usize) {
                Some(x) => x,
                None => continue,
            }
        } else {
            let operands: Vec<NodeIndex> =
                src.operands(n).iter().filter_map(|o| map.get(o).copied()).collect();
            fc.add(member(i), &operands)
        };
        map.insert(n, new);
    }
    let Some(root) = root else { return Vec::new() };
    if tuple_root {
        src.operands(root).iter().filter_map(|o| map.get(o).copied()).collect()
    } else {
        map.get(&root).copied().into_iter().collect()
    }
}
