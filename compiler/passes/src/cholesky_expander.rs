//! `cholesky-expander`: rewrites every f32/f64 `cholesky` into a `call` of a computation
//! (one per operand shape and `lower`, as XLA's `CholeskyExpander` caches them) that
//! factors the matrix column by column in a `while` loop, so the JIT and the TPU model,
//! which have no Cholesky kernel, run it.
//!
//! The loop follows XLA's unblocked recurrence (Cholesky–Banachiewicz) with the same
//! arithmetic XLA's CPU backend ends up with: for column `i`,
//! `c = A[:, i] - dot(L, L[i, :])` (a dynamic-slice of the row, one batched dot over all
//! `n` columns, zeros included), `r = 1 / sqrt(c[i])`, `L[:, i] = select(row >= i, c * r,
//! 0)` (a dynamic-update-slice), and an error flag per batch matrix that becomes a NaN
//! matrix at the end when any `sqrt` was NaN. `lower=false` transposes the operand and
//! the result. XLA's own loop recomputes the whole `L·Lᵀ` every column (O(n⁴)); the
//! column product here computes the same sums (the entries XLA keeps) in O(n³), and stays
//! a loop rather than unrolled so the module does not grow with `n`. A 1x1 matrix is a
//! `sqrt`; an empty operand is its own result.
//!
//! XLA factors matrices above 128 in blocks; this pass (and the interpreter, which
//! evaluates `cholesky` natively with the same steps, `interp::linalg`) keeps the
//! unblocked loop at every size: the same sums grouped differently. Narrow floats
//! (bf16, f16) are left alone: the engines without a kernel refuse them with an error at
//! the instruction.

use std::collections::HashMap;

use hlo_ir::op::CmpDirection;
use hlo_ir::{CompId, Diagnostic, ElemType, Module, NodeIndex, Op, Opcode, Shape};

use super::hlo_builder::Builder;
use crate::expander::OpExpander;

/// `cholesky-expander`; the loop computations it built this run, by type, dims and side.
#[derive(Default)]
pub struct CholeskyExpander {
    cache: HashMap<(ElemType, Vec<u64>, bool), CompId>,
}

impl OpExpander for CholeskyExpander {
    fn name(&self) -> &'static str {
        "cholesky-expander"
    }

    fn matches(&self, op: &Op) -> bool {
        matches!(op, Op::Cholesky { .. })
    }

    fn begin(&mut self) {
        self.cache.clear();
    }

    fn expand(
        &mut self,
        m: &mut Module,
        id: CompId,
        n: NodeIndex,
    ) -> Result<Option<NodeIndex>, Diagnostic> {
        let c = m.comp(id);
        let i = c.instr(n);
        let Op::Cholesky { lower } = i.op else { return Ok(None) };
        let ops = c.operands(n);
        let Some(&a) = ops.first() else { return Ok(None) };
        let Some(arr) = c.instr(a).shape.as_array() else { return Ok(None) };
        let Some(dims) = arr.static_dims() else { return Ok(None) };
        let elem = arr.elem;
        if !matches!(elem, ElemType::F32 | ElemType::F64)
            || dims.len() < 2
            || dims[dims.len() - 1] != dims[dims.len() - 2]
        {
            return Ok(None);
        }
        let (span, metadata, shape) = (i.span, i.metadata.clone(), i.shape.clone());
        let callee = match self.cache.get(&(elem, dims.clone(), lower)) {
            Some(&c) => c,
            None => {
                let c = build(m, elem, &dims, lower, span, metadata.clone());
                self.cache.insert((elem, dims.clone(), lower), c);
                c
            }
        };
        Ok(Some(crate::expander::call(m, id, callee, shape, (span, metadata), &[a])))
    }
}

/// The computation `(a) -> L` for operands of `dims`.
fn build(
    m: &mut Module,
    elem: ElemType,
    dims: &[u64],
    lower: bool,
    span: hlo_ir::Span,
    metadata: Option<Box<hlo_ir::instr::Metadata>>,
) -> CompId {
    let tag = if lower { "lower" } else { "upper" };
    let nd = dims.len();
    let nb = nd - 2;
    let n = dims[nd - 1];
    let shape = Shape::array(elem, dims);
    let mut body_c = m.new_computation(&format!("cholesky_{tag}_body"));
    let mut cond_c = m.new_computation(&format!("cholesky_{tag}_cond"));
    let mut c = m.new_computation(&format!("cholesky_{tag}"));
    let err_dims: Vec<u64> = dims[..nb].iter().copied().chain([1, 1]).collect();
    let state = Shape::Tuple(vec![
        Shape::scalar(ElemType::S32),
        shape.clone(),
        shape.clone(),
        Shape::array(ElemType::Pred, &err_dims),
    ]);
    let empty = dims.contains(&0);
    if !empty && n > 1 {
        // Loop body: column i of L.
        let mut b = Builder { c: &mut body_c, span, metadata: metadata.clone() };
        let p = b.param("state", state.clone());
        let i = b.gte(p, 0);
        let a = b.gte(p, 1);
        let l = b.gte(p, 2);
        let err = b.gte(p, 3);
        let zero = b.s32(0);
        let starts = |r: NodeIndex, c: NodeIndex| -> Vec<NodeIndex> {
            let mut s = vec![zero; nb];
            s.push(r);
            s.push(c);
            s
        };
        let mut row_dims = dims.to_vec();
        row_dims[nd - 2] = 1;
        let st = starts(i, zero);
        let row = b.dynamic_slice(l, &st, &row_dims);
        let s = b.batch_dot(l, false, row, true); // [.., n, 1]
        let mut col_dims = dims.to_vec();
        col_dims[nd - 1] = 1;
        let st = starts(zero, i);
        let acol = b.dynamic_slice(a, &st, &col_dims);
        let col = b.binary(Opcode::Subtract, acol, s);
        let st = starts(i, zero);
        let d = b.dynamic_slice(col, &st, &err_dims);
        let sq = b.unary(Opcode::Sqrt, d);
        let one = b.full(elem, 1.0, &err_dims);
        let recip = b.binary(Opcode::Divide, one, sq);
        let nan = b.compare(sq, sq, CmpDirection::Ne);
        let err2 = b.binary(Opcode::Or, err, nan);
        let rb = b.spread_scalar_per_matrix(recip, &col_dims);
        let scaled = b.binary(Opcode::Multiply, col, rb);
        let rows = b.iota(&col_dims, nd - 2);
        let ib = b.splat(i, &col_dims);
        let below = b.compare(rows, ib, CmpDirection::Ge);
        let zeros = b.full(elem, 0.0, &col_dims);
        let newcol = b.select(below, scaled, zeros);
        let st = starts(zero, i);
        let l2 = b.dynamic_update_slice(l, newcol, &st);
        let one_i = b.s32(1);
        let i2 = b.binary(Opcode::Add, i, one_i);
        let root = b.tuple(&[i2, a, l2, err2]);
        body_c.set_root(root);
        // Condition: i < n.
        let mut b = Builder { c: &mut cond_c, span, metadata: metadata.clone() };
        let p = b.param("state", state.clone());
        let i = b.gte(p, 0);
        let limit = b.s32(n as i64);
        let root = b.compare(i, limit, CmpDirection::Lt);
        cond_c.set_root(root);
    }
    let (body, cond) = if !empty && n > 1 {
        (Some(m.add_computation(body_c)), Some(m.add_computation(cond_c)))
    } else {
        (None, None)
    };
    let mut b = Builder { c: &mut c, span, metadata };
    let a0 = b.param("a", shape.clone());
    let root = if empty {
        a0
    } else {
        let a = if lower { a0 } else { b.transpose_minor(a0) };
        let l = match (body, cond) {
            (Some(body), Some(cond)) => {
                let i0 = b.s32(0);
                let l0 = b.full(elem, 0.0, dims);
                let f = b.pred(false);
                let e0 = b.splat(f, &err_dims);
                let init = b.tuple(&[i0, a, l0, e0]);
                let w = b.while_loop(init, cond, body);
                let l = b.gte(w, 2);
                let err = b.gte(w, 3);
                let eb = b.spread_scalar_per_matrix(err, dims);
                let nan = b.full(elem, f64::NAN, dims);
                b.select(eb, nan, l)
            }
            _ => b.unary(Opcode::Sqrt, a),
        };
        if lower { l } else { b.transpose_minor(l) }
    };
    c.set_root(root);
    m.add_computation(c)
}
