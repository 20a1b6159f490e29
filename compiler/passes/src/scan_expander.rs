//! `scan-expander`: rewrites every `scan` into a `while` loop, as XLA's `ScanExpander`
//! does, so the JIT and the TPU model (which have no scan kernel) run it.
//!
//! The loop state is `(i, carries.., inputs.., outputs..)` with `i` an s32 counter from 0
//! to the scan length `L`; the outputs start as zeros. Each iteration reads index
//! `a = i` (`L-1-i` when `is_reverse`), slices every input at `a` along the scan
//! dimension (`dynamic-slice` then a `reshape` dropping the dimension), calls `to_apply`
//! on the slices and the carries (a `call`, inlined later by `inline-calls`), writes each
//! per-step output at `a` (`reshape` adding the dimension, `dynamic-update-slice`) and
//! takes the remaining results as the next carries. The scan's result is the loop's
//! outputs then its carries (one array when that is one value). The interpreter
//! evaluates `scan` natively with the same steps (`interp::Interpreter::scan`).
//!
//! A zero-length scan becomes its result directly (empty outputs, the inits as carries):
//! XLA's expander slices the empty dimension there, which its verifier then refuses.
//!
//! Scans whose shapes are not static arrays (or tuples of them) are left alone; the
//! engines without a scan kernel refuse them at the instruction.

use hlo_ir::literal::{Literal, LiteralData};
use hlo_ir::op::CmpDirection;
use hlo_ir::{CompId, Diagnostic, ElemType, Module, NodeIndex, Op, Opcode, Shape};

use super::hlo_builder::{Builder, N};
use crate::expander::OpExpander;

pub struct ScanExpander;

impl OpExpander for ScanExpander {
    fn name(&self) -> &'static str {
        "scan-expander"
    }

    fn matches(&self, op: &Op) -> bool {
        matches!(op, Op::Scan { .. })
    }

    fn expand(
        &mut self,
        m: &mut Module,
        id: CompId,
        n: NodeIndex,
    ) -> Result<Option<NodeIndex>, Diagnostic> {
        match Plan::of(m, id, n) {
            Some(plan) => expand(m, id, n, plan).map(Some),
            None => Ok(None),
        }
    }
}

/// One scan, read off its instruction: what the loop needs.
struct Plan {
    dim: usize,
    reverse: bool,
    to_apply: CompId,
    /// The scan length.
    len: u64,
    inputs: Vec<Shape>,
    inits: Vec<Shape>,
    /// Per output: element type and stacked dims.
    outputs: Vec<(ElemType, Vec<u64>)>,
    /// Whether `to_apply` returns a tuple (else its one value is the one result).
    tuple_root: bool,
}

impl Plan {
    fn of(m: &Module, id: CompId, n: NodeIndex) -> Option<Plan> {
        let c = m.comp(id);
        let i = c.instr(n);
        let Op::Scan { dimension, num_carries, is_reverse, to_apply, .. } = i.op else {
            return None;
        };
        let dim = usize::try_from(dimension).ok()?;
        let ops: Vec<Shape> = c.operands(n).iter().map(|&o| c.instr(o).shape.clone()).collect();
        let carries = usize::try_from(num_carries).ok().filter(|&k| k <= ops.len())?;
        let (inputs, inits) =
            (ops[..ops.len() - carries].to_vec(), ops[ops.len() - carries..].to_vec());
        let declared: Vec<&Shape> = match &i.shape {
            Shape::Tuple(t) => t.iter().collect(),
            s => vec![s],
        };
        let mut outputs = Vec::new();
        for s in &declared[..declared.len().checked_sub(carries)?] {
            let a = s.as_array()?;
            outputs.push((a.elem, a.static_dims()?));
        }
        let static_arrays = |s: &Shape| {
            let mut ok = true;
            s.for_each_array(&mut |a| ok &= a.is_static());
            ok && !matches!(s, Shape::Token)
        };
        if !inputs.iter().chain(&inits).all(static_arrays) {
            return None;
        }
        let len = match inputs.first() {
            Some(s) => *s.as_array()?.static_dims()?.get(dim)?,
            None => *outputs.first()?.1.get(dim)?,
        };
        let callee = m.comp(to_apply);
        let tuple_root = callee.instr(callee.root()?).shape.is_tuple();
        Some(Plan { dim, reverse: is_reverse, to_apply, len, inputs, inits, outputs, tuple_root })
    }

    fn state(&self) -> Shape {
        let mut s = vec![Shape::scalar(ElemType::S32)];
        s.extend(self.inits.iter().cloned());
        s.extend(self.inputs.iter().cloned());
        s.extend(self.outputs.iter().map(|(e, d)| Shape::array(*e, d)));
        Shape::Tuple(s)
    }
}

/// A zero of `elem` (a scalar constant).
fn zero(b: &mut Builder, elem: ElemType) -> N {
    let data = if elem == ElemType::Pred {
        LiteralData::Pred(vec![false])
    } else if elem.is_complex() {
        LiteralData::Complex(vec![(0.0, 0.0)])
    } else if elem.is_float() {
        LiteralData::Float(vec![0.0])
    } else {
        LiteralData::Int(vec![0])
    };
    b.emit("constant", Op::Constant(Literal::Array(data)), Shape::scalar(elem), &[])
}

fn expand(m: &mut Module, id: CompId, n: NodeIndex, p: Plan) -> Result<N, Diagnostic> {
    let (span, metadata, shape, name, operands) = {
        let c = m.comp(id);
        let i = c.instr(n);
        (i.span, i.metadata.clone(), i.shape.clone(), i.name.clone(), c.operands(n))
    };
    if p.len == 0 {
        // No step runs (XLA's expander would slice the empty dimension): empty outputs,
        // the inits as the final carries.
        let comp = m.comp_mut(id);
        let mut b = Builder { c: comp, span, metadata };
        let mut results = Vec::with_capacity(p.outputs.len() + p.inits.len());
        for (e, d) in &p.outputs {
            let z = zero(&mut b, *e);
            results.push(b.splat(z, d));
        }
        results.extend_from_slice(&operands[p.inputs.len()..]);
        return Ok(if shape.is_tuple() { b.tuple(&results) } else { results[0] });
    }
    let state = p.state();
    let (nc, ni, no) = (p.inits.len(), p.inputs.len(), p.outputs.len());
    let callee_result = {
        let callee = m.comp(p.to_apply);
        callee.root().map(|r| callee.instr(r).shape.clone()).ok_or_else(|| {
            Diagnostic::error(span, format!("scan-expander: `{}` has no root", callee.name))
        })?
    };

    // Condition: i < L.
    let mut cond_c = m.new_computation(&format!("{name}_condition"));
    {
        let mut b = Builder { c: &mut cond_c, span, metadata: metadata.clone() };
        let s = b.param("loop_state", state.clone());
        let i = b.gte(s, 0);
        let limit = b.s32(p.len as i64);
        let root = b.compare(i, limit, CmpDirection::Lt);
        cond_c.set_root(root);
    }

    // Body: one step.
    let mut body_c = m.new_computation(&format!("{name}_body"));
    {
        let mut b = Builder { c: &mut body_c, span, metadata: metadata.clone() };
        let s = b.param("loop_state", state.clone());
        let i = b.gte(s, 0);
        let carries: Vec<N> = (0..nc).map(|k| b.gte(s, 1 + k)).collect();
        let inputs: Vec<N> = (0..ni).map(|k| b.gte(s, 1 + nc + k)).collect();
        let outputs: Vec<N> = (0..no).map(|k| b.gte(s, 1 + nc + ni + k)).collect();
        let at = if p.reverse {
            let last = b.s32(p.len as i64 - 1);
            b.binary(Opcode::Subtract, last, i)
        } else {
            i
        };
        let zero_i = b.s32(0);
        let mut args = Vec::with_capacity(ni + nc);
        for &x in &inputs {
            let mut sizes = b.dims(x);
            let mut starts = vec![zero_i; sizes.len()];
            starts[p.dim] = at;
            sizes[p.dim] = 1;
            let slice = b.dynamic_slice(x, &starts, &sizes);
            sizes.remove(p.dim);
            args.push(b.reshape(slice, &sizes));
        }
        args.extend_from_slice(&carries);
        let call = b.emit(
            "call",
            Op::Call { to_apply: p.to_apply, is_composite: false },
            callee_result.clone(),
            &args,
        );
        let results: Vec<N> =
            if p.tuple_root { (0..no + nc).map(|k| b.gte(call, k)).collect() } else { vec![call] };
        let mut next = vec![];
        let one = b.s32(1);
        next.push(b.binary(Opcode::Add, i, one));
        next.extend_from_slice(&results[no..]);
        next.extend_from_slice(&inputs);
        for (k, &out) in outputs.iter().enumerate() {
            let mut dims = b.dims(results[k]);
            dims.insert(p.dim, 1);
            let step = b.reshape(results[k], &dims);
            let mut starts = vec![zero_i; dims.len()];
            starts[p.dim] = at;
            next.push(b.dynamic_update_slice(out, step, &starts));
        }
        let root = b.tuple(&next);
        body_c.set_root(root);
    }
    let (cond, body) = (m.add_computation(cond_c), m.add_computation(body_c));

    let comp = m.comp_mut(id);
    let mut b = Builder { c: comp, span, metadata };
    let mut init = vec![b.s32(0)];
    init.extend_from_slice(&operands[ni..]);
    init.extend_from_slice(&operands[..ni]);
    for (e, d) in &p.outputs {
        let z = zero(&mut b, *e);
        init.push(b.splat(z, d));
    }
    let init = b.tuple(&init);
    let w = b.while_loop(init, cond, body);
    let mut results: Vec<N> = (0..no).map(|k| b.gte(w, 1 + nc + ni + k)).collect();
    results.extend((0..nc).map(|k| b.gte(w, 1 + k)));
    Ok(if shape.is_tuple() { b.tuple(&results) } else { results[0] })
}
