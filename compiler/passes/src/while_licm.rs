//! `while-loop-invariant-code-motion`: computes loop-invariant work once, before the
//! loop, as XLA's `WhileLoopInvariantCodeMotion`.
//!
//! In the body of a `while`, an element `i` of the loop state is **invariant** when the
//! body's root passes it through unchanged (root operand `i` is `get-tuple-element(param),
//! index=i`, or the root is the parameter itself). An instruction of the body is
//! invariant when it is a constant, a `get-tuple-element` of an invariant element, or a
//! side-effect-free operation (callees included) whose operands are all invariant.
//!
//! Invariant instructions that do real work are hoisted: everything but the cheap ones
//! XLA does not hoist on their own (`constant`, `broadcast`, `iota`, `reshape`,
//! `bitcast`, `transpose`, `slice`, `reverse`, `copy`, `tuple`, `get-tuple-element`),
//! which are hoisted only as operands of a hoisted instruction. Each hoisted instruction
//! used by code that stays in the loop becomes a new element of the loop state: the
//! computation is cloned before the `while` (parameters read from the init tuple), the
//! init tuple, the `while`'s shape, the body's and condition's parameter shapes and the
//! body's root tuple get one more element each (passed through unchanged), and the body
//! reads the value with a `get-tuple-element`. Users of the `while` keep their indices;
//! a user that needs the whole old state gets a tuple of the old elements. The original
//! instructions in the body become dead (`dce` removes them).
//!
//! Skipped (left as is): loops whose body or condition is called from elsewhere too,
//! whose parameter is used other than through `get-tuple-element`, whose body has
//! control edges, with shardings on the `while`, the parameters or the root (the tuple
//! sharding would have to grow too), and bodies whose root is neither a tuple nor the
//! parameter. Never hoisted: `while` loops (a hoisted loop would also run when the outer
//! loop runs zero times and might not terminate), side-effecting instructions,
//! custom-calls, async/collective/token operations, `opt-barrier`, and tuple-shaped
//! values as state elements. Like XLA, hoisted work runs even when the loop runs zero
//! times (it has no side effects, so only time is spent).

use hlo_ir::hash::FnvHashMap;
use hlo_ir::{CompId, Computation, Diagnostic, Instr, Module, NodeIndex, Op, Opcode, Shape};

use super::effects::{Effects, is_pure_value};
use hlo_pipeline::{Pass, PassContext};

pub struct WhileLicm;

impl Pass for WhileLicm {
    fn name(&self) -> &'static str {
        "while-loop-invariant-code-motion"
    }

    fn run(&mut self, m: &mut Module, _cx: &mut PassContext) -> Result<bool, Diagnostic> {
        let fx = Effects::of(m);
        let mut callers = vec![0usize; m.comps().len()];
        for c in m.comps() {
            for i in c.instrs() {
                for (_, x) in i.op.called_computations() {
                    if let Some(k) = callers.get_mut(x.index()) {
                        *k += 1;
                    }
                }
            }
        }
        let mut changed = false;
        for id in m.post_order() {
            let whiles: Vec<NodeIndex> = {
                let comp = m.comp(id);
                comp.post_order()
                    .into_iter()
                    .filter(|&n| matches!(comp.instr(n).op, Op::While { .. }))
                    .collect()
            };
            for w in whiles {
                if let Some(plan) = plan(m, id, w, &fx, &callers) {
                    apply(m, id, w, plan);
                    changed = true;
                }
            }
        }
        Ok(changed)
    }
}

/// Cheap instructions XLA does not hoist on their own (`NotWorthHoistingIndividually`).
fn trivial(op: &Op) -> bool {
    use Opcode::*;
    matches!(
        op,
        Op::Constant(_)
            | Op::Broadcast { .. }
            | Op::Iota { .. }
            | Op::Reshape { .. }
            | Op::Transpose { .. }
            | Op::Slice { .. }
            | Op::Reverse { .. }
            | Op::GetTupleElement { .. }
            | Op::Plain(Bitcast | Copy | Tuple)
    )
}

/// Operations that may move out of a loop when their operands are invariant.
fn movable(op: &Op, fx: &Effects) -> bool {
    is_pure_value(op) && !fx.op(op)
}

/// What to hoist out of one loop.
struct Plan {
    cond: CompId,
    body: CompId,
    /// The state's elements before hoisting.
    elems: Vec<Shape>,
    /// Body instructions to clone before the loop, in dependency order: node, a clone,
    /// its operands. `get-tuple-element`s of the parameter stand for init elements.
    hoisted: Vec<(NodeIndex, Instr, Vec<NodeIndex>)>,
    /// Hoisted body instructions that become new state elements, in order, with shapes.
    outputs: Vec<(NodeIndex, Shape)>,
    param: NodeIndex,
    cond_param: NodeIndex,
    root: NodeIndex,
    /// Whether the body's root is a `tuple` instruction (else it is the parameter).
    root_is_tuple: bool,
}

fn only_gte_users(comp: &Computation, p: NodeIndex) -> bool {
    comp.users_unordered(p).all(|u| matches!(comp.instr(u).op, Op::GetTupleElement { .. }))
}

fn plan(m: &Module, c: CompId, w: NodeIndex, fx: &Effects, callers: &[usize]) -> Option<Plan> {
    let caller = m.comp(c);
    let wi = caller.instr(w);
    let Op::While { condition: cond, body } = wi.op else { return None };
    if cond == body
        || c == cond
        || c == body
        || callers.get(cond.index()) != Some(&1)
        || callers.get(body.index()) != Some(&1)
    {
        return None;
    }
    let (b, k) = (m.get_comp(body)?, m.get_comp(cond)?);
    let elems = wi.shape.tuple_elements()?.to_vec();
    let (bp, kp) = (b.params(), k.params());
    let (&[param], &[cond_param]) = (bp.as_slice(), kp.as_slice()) else { return None };
    let root = b.root()?;
    if wi.sharding.is_some()
        || b.instr(param).sharding.is_some()
        || k.instr(cond_param).sharding.is_some()
        || b.instr(root).sharding.is_some()
        || b.has_control_edges()
        || !only_gte_users(b, param)
        || !only_gte_users(k, cond_param)
        || k.root() == Some(cond_param)
        || b.instr(param).shape != wi.shape
        || k.instr(cond_param).shape != wi.shape
        || caller.operand(w, 0).is_none_or(|init| caller.instr(init).shape != wi.shape)
    {
        return None;
    }
    let root_is_tuple = matches!(b.instr(root).op, Op::Plain(Opcode::Tuple));
    let gte_index = |n: NodeIndex| match b.instr(n).op {
        Op::GetTupleElement { index } if b.operand(n, 0) == Some(param) => {
            usize::try_from(index).ok()
        }
        _ => None,
    };
    let invariant_elem: Vec<bool> = if root == param {
        vec![true; elems.len()]
    } else if root_is_tuple {
        let ops = b.operands(root);
        if ops.len() != elems.len() {
            return None;
        }
        ops.iter().enumerate().map(|(i, &o)| gte_index(o) == Some(i)).collect()
    } else {
        return None;
    };
    if !invariant_elem.iter().any(|&x| x) {
        return None;
    }
    let order = b.post_order();
    let bound = b.graph().node_indices().map(|n| n.index() + 1).max().unwrap_or(0);
    let mut inv = vec![false; bound];
    let mut worth = vec![false; bound];
    for &v in &order {
        let i = b.instr(v);
        inv[v.index()] = match &i.op {
            Op::Parameter { .. } => false,
            Op::Constant(_) => true,
            Op::GetTupleElement { .. } if b.operand(v, 0) == Some(param) => {
                gte_index(v).is_some_and(|k| invariant_elem.get(k) == Some(&true))
            }
            op => movable(op, fx) && b.operands(v).iter().all(|o| inv[o.index()]),
        };
        worth[v.index()] = inv[v.index()] && !trivial(&i.op) && i.shape.as_array().is_some();
    }
    if !worth.iter().any(|&x| x) {
        return None;
    }
    // Everything a worthwhile invariant instruction needs is hoisted with it.
    let mut need = vec![false; bound];
    for &v in order.iter().rev() {
        if worth[v.index()] || (inv[v.index()] && b.users_unordered(v).any(|u| need[u.index()])) {
            need[v.index()] = true;
        }
    }
    let outputs: Vec<(NodeIndex, Shape)> = order
        .iter()
        .copied()
        .filter(|&v| {
            worth[v.index()] && (v == root || b.users_unordered(v).any(|u| !need[u.index()]))
        })
        .map(|v| (v, b.instr(v).shape.clone()))
        .collect();
    if outputs.is_empty() {
        return None;
    }
    let hoisted = order
        .iter()
        .filter(|v| need[v.index()])
        .map(|&v| (v, b.instr(v).clone(), b.operands(v)))
        .collect();
    Some(Plan { cond, body, elems, hoisted, outputs, param, cond_param, root, root_is_tuple })
}

fn gte(shape: Shape, index: usize) -> Instr {
    Instr::new("get-tuple-element", Op::GetTupleElement { index: index as i64 }, shape)
}

fn tuple(shape: Shape) -> Instr {
    Instr::new("tuple", Op::Plain(Opcode::Tuple), shape)
}

fn apply(m: &mut Module, c: CompId, w: NodeIndex, p: Plan) {
    let n = p.elems.len();
    let out_shapes: Vec<Shape> = p.outputs.iter().map(|o| o.1.clone()).collect();
    let mut new_elems = p.elems.clone();
    new_elems.extend(out_shapes.iter().cloned());
    let new_shape = Shape::Tuple(new_elems);
    let old_shape = Shape::Tuple(p.elems.clone());

    // Before the loop: the init elements, the hoisted computation, the new init tuple.
    let comp = m.comp_mut(c);
    let Some(init) = comp.operand(w, 0) else { return };
    let init_ops = comp.operands(init);
    let init_is_tuple =
        matches!(comp.instr(init).op, Op::Plain(Opcode::Tuple)) && init_ops.len() == n;
    let mut elem_nodes: Vec<Option<NodeIndex>> =
        if init_is_tuple { init_ops.into_iter().map(Some).collect() } else { vec![None; n] };
    let mut elem = |comp: &mut Computation, i: usize| -> NodeIndex {
        *elem_nodes[i].get_or_insert_with(|| comp.add(gte(p.elems[i].clone(), i), &[init]))
    };
    let mut map: FnvHashMap<NodeIndex, NodeIndex> = FnvHashMap::default();
    for (v, instr, ops) in &p.hoisted {
        let new = match instr.op {
            Op::GetTupleElement { index } if ops.first() == Some(&p.param) => {
                elem(comp, index as usize)
            }
            _ => {
                let args: Vec<NodeIndex> = ops.iter().map(|o| map[o]).collect();
                comp.add(instr.clone(), &args)
            }
        };
        map.insert(*v, new);
    }
    let mut init_args: Vec<NodeIndex> = (0..n).map(|i| elem(comp, i)).collect();
    init_args.extend(p.outputs.iter().map(|o| map[&o.0]));
    let new_init = comp.add(tuple(new_shape.clone()), &init_args);
    let _ = comp.set_operand(w, 0, new_init);
    comp.instr_mut(w).shape = new_shape.clone();
    // Users of the whole state get the old elements back.
    let whole_users =
        comp.users_unordered(w).any(|u| !matches!(comp.instr(u).op, Op::GetTupleElement { .. }))
            || comp.root() == Some(w);
    if whole_users {
        let parts: Vec<NodeIndex> =
            (0..n).map(|i| comp.add(gte(p.elems[i].clone(), i), &[w])).collect();
        let old = comp.add(tuple(old_shape), &parts);
        let is_gte = |comp: &Computation, u: NodeIndex| {
            matches!(comp.instr(u).op, Op::GetTupleElement { .. })
        };
        let users: Vec<NodeIndex> =
            comp.users(w).into_iter().filter(|&u| !is_gte(comp, u)).collect();
        for u in users {
            comp.replace_operand(u, w, old);
        }
        if comp.root() == Some(w) {
            comp.set_root(old);
        }
    }

    // The body reads the hoisted values from the state and passes them through.
    let b = m.comp_mut(p.body);
    b.instr_mut(p.param).shape = new_shape.clone();
    let reads: Vec<NodeIndex> = out_shapes
        .iter()
        .enumerate()
        .map(|(j, s)| b.add(gte(s.clone(), n + j), &[p.param]))
        .collect();
    for (&(o, _), &r) in p.outputs.iter().zip(&reads) {
        b.replace_all_uses(o, r);
    }
    let mut root_args: Vec<NodeIndex> = if p.root_is_tuple {
        b.operands(p.root)
    } else {
        (0..n).map(|i| b.add(gte(p.elems[i].clone(), i), &[p.param])).collect()
    };
    root_args.extend(reads);
    let new_root = b.add(tuple(new_shape.clone()), &root_args);
    b.set_root(new_root);
    if p.root_is_tuple {
        let _ = b.remove(p.root);
    }

    let k = m.comp_mut(p.cond);
    k.instr_mut(p.cond_param).shape = new_shape;
}
