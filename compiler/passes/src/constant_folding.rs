//! `constant-folding`: evaluates instructions whose operands are all constants, as XLA's
//! `HloConstantFolding`, with the reference interpreter ([`hlo_interp`]) so that the
//! folded value is exactly what the module would have computed.
//!
//! An instruction is folded when every operand is a constant or a `broadcast` of a
//! constant, at least one operand is a plain constant, its result is an array of at most
//! [`MAX_ELEMENTS`] elements and its operands hold at most [`MAX_OPERAND_ELEMENTS`]
//! elements together. It becomes a `constant` with the same shape (its metadata and
//! sharding are kept). Folding runs in dependency order, so chains fold in one run.
//!
//! **Size cap.** XLA folds results up to 45M elements; ours is 4096 elements
//! ([`MAX_ELEMENTS`]) because folded constants are printed in full in every dump and
//! golden file, and a large constant costs more text than the instruction it replaces.
//!
//! Never folded: instructions without operands (`constant`, `iota`, `rng`, `parameter`,
//! `partition-id`, ...), a bare `broadcast` (it would materialize a large constant),
//! side-effecting instructions, `rng-bit-generator`, `while`, `conditional`, `call`,
//! `fusion`, `custom-call`, async and collective operations, `tuple` and
//! `get-tuple-element` (the tuple simplifier's business), token plumbing, `opt-barrier`,
//! `domain`, `fft`, instructions with control predecessors, operands with elided values
//! (`{...}`), results the interpreter cannot compute (complex and fp8 types, ...: left
//! as they are) and tuple-shaped results.
//!
//! Evaluation builds a small module holding the operands, the instruction and (copies of)
//! the computations it calls, and runs it on the interpreter: O(instruction + callees).

use hlo_ir::hash::FnvHashMap;
use hlo_ir::literal::{Literal, LiteralData};
use hlo_ir::{CompId, Computation, Diagnostic, Module, NodeIndex, Op, Opcode, Shape};

use super::effects::{Effects, is_pure_value};
use super::rewrite::replace;
use hlo_interp::{Data, Interpreter, Value};
use hlo_pipeline::{Pass, PassContext};

/// The largest result folded, in elements.
pub const MAX_ELEMENTS: u64 = 1 << 12;
/// The most operand elements (broadcasts counted at their full size) an evaluation reads.
pub const MAX_OPERAND_ELEMENTS: u64 = 1 << 16;

pub struct ConstantFolding;

impl Pass for ConstantFolding {
    fn name(&self) -> &'static str {
        "constant-folding"
    }

    fn run(&mut self, m: &mut Module, _cx: &mut PassContext) -> Result<bool, Diagnostic> {
        let fx = Effects::of(m);
        let mut changed = false;
        for id in m.comp_ids() {
            for n in m.comp(id).post_order() {
                let comp = m.comp(id);
                if !comp.contains(n) || !foldable(comp, n, &fx) {
                    continue;
                }
                let Some(lit) = evaluate(m, comp, n) else { continue };
                let comp = m.comp_mut(id);
                let mut c = comp.instr(n).clone();
                c.op = Op::Constant(lit);
                c.extras = None;
                let new = comp.add(c, &[]);
                changed |= replace(comp, n, new);
            }
        }
        Ok(changed)
    }
}

fn elements(s: &Shape) -> Option<u64> {
    s.as_array()?.element_count()
}

fn is_constant(comp: &Computation, n: NodeIndex) -> bool {
    matches!(comp.instr(n).op, Op::Constant(Literal::Array(_)))
}

fn foldable(comp: &Computation, n: NodeIndex, fx: &Effects) -> bool {
    use Opcode::*;
    let i = comp.instr(n);
    // Pure values only, and not the ones that are already as folded as they get (a
    // constant, a bare broadcast or iota, tuples), nor calls into other computations.
    let refused = !is_pure_value(&i.op)
        || matches!(
            i.op,
            Op::Constant(_)
                | Op::Iota { .. }
                | Op::Broadcast { .. }
                | Op::GetTupleElement { .. }
                | Op::Conditional(_)
                | Op::Call { .. }
                | Op::Fusion { .. }
                | Op::Fft { .. }
                | Op::Plain(Tuple | PartitionId | ReplicaId)
        );
    if refused || fx.op(&i.op) || !comp.control_predecessors(n).is_empty() {
        return false;
    }
    match elements(&i.shape) {
        Some(e) if e <= MAX_ELEMENTS && i.shape.as_array().is_some_and(|a| a.is_static()) => {}
        _ => return false,
    }
    let ops = comp.operands(n);
    let mut plain = false;
    let mut total = 0u64;
    for &o in &ops {
        let oi = comp.instr(o);
        let ok = if is_constant(comp, o) {
            plain = true;
            true
        } else {
            matches!(oi.op, Op::Broadcast { .. })
                && comp.operand(o, 0).is_some_and(|c| is_constant(comp, c))
        };
        let Some(e) = elements(&oi.shape) else { return false };
        total = total.saturating_add(e);
        if !ok || total > MAX_OPERAND_ELEMENTS {
            return false;
        }
    }
    plain
}

/// Evaluates `n` on the interpreter; `None` when it cannot.
fn evaluate(m: &Module, comp: &Computation, n: NodeIndex) -> Option<Literal> {
    let instr = comp.instr(n);
    let mut tiny = Module::new("constant_folding", "fold");
    // Copies of the called computations, transitively.
    let mut order: Vec<CompId> = Vec::new();
    let mut k = 0;
    order.extend(instr.op.called_computations().into_iter().map(|(_, c)| c));
    order.dedup();
    while k < order.len() {
        for i in m.get_comp(order[k])?.instrs() {
            for (_, c) in i.op.called_computations() {
                if !order.contains(&c) {
                    order.push(c);
                }
            }
        }
        k += 1;
        if order.len() > 64 {
            return None;
        }
    }
    let mut remap: FnvHashMap<CompId, CompId> = FnvHashMap::default();
    for &c in &order {
        let new = tiny.add_computation(m.comp(c).clone());
        remap.insert(c, new);
    }
    for &c in &order {
        let id = remap[&c];
        let nodes: Vec<NodeIndex> = tiny.comp(id).nodes().collect();
        for node in nodes {
            if !tiny.comp(id).instr(node).op.called_computations().is_empty() {
                tiny.comp_mut(id)
                    .instr_mut(node)
                    .op
                    .map_computations(&mut |x| remap.get(&x).copied().unwrap_or(x));
            }
        }
    }
    let entry = tiny.entry;
    let e = tiny.comp_mut(entry);
    let mut args = Vec::new();
    for o in comp.operands(n) {
        let oi = comp.instr(o);
        let a = match oi.op {
            Op::Broadcast { .. } => {
                let c = comp.operand(o, 0)?;
                let cc = e.add(comp.instr(c).clone(), &[]);
                e.add(oi.clone(), &[cc])
            }
            _ => e.add(oi.clone(), &[]),
        };
        args.push(a);
    }
    let mut op = instr.op.clone();
    op.map_computations(&mut |x| remap.get(&x).copied().unwrap_or(x));
    let mut root = instr.clone();
    root.op = op;
    let r = e.add(root, &args);
    e.set_root(r);
    let value = Interpreter::new(&tiny).call(entry, Vec::new()).ok()?;
    let Value::Array(a) = value else { return None };
    if a.elem != instr.shape.as_array()?.elem {
        return None;
    }
    Some(Literal::Array(match &a.data {
        Data::Pred(v) => LiteralData::Pred(v.clone()),
        Data::Int(v) => LiteralData::Int(v.clone()),
        Data::F32(v) => LiteralData::Float(v.iter().map(|&x| f64::from(x)).collect()),
        Data::F64(v) => LiteralData::Float(v.clone()),
        Data::C64(v) => {
            LiteralData::Complex(v.iter().map(|z| (f64::from(z.re), f64::from(z.im))).collect())
        }
        Data::C128(v) => LiteralData::Complex(v.iter().map(|z| (z.re, z.im)).collect()),
    }))
}
