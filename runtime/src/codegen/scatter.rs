//! Kernels that write to computed positions: `scatter` and `select-and-scatter`. Each copies
//! its initial values into the result first, then walks the updates (sources) in row-major
//! order combining them in place, which is the order the interpreter uses.

use std::collections::HashMap;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{InstBuilder, Value, types};
use hlo_ir::{Computation, Module, NodeIndex, Op};

use super::elemental::{Emitter, Leaf, elem_of, flat_arrays, static_dims};
use super::kernel::nest;
use super::{CgError, ty};
use crate::jit::JitModule;

/// Defines a scatter or select-and-scatter kernel for instruction `n` of `comp`; `args`
/// lists the operands' buffers then the results'. Returns its index and the extent of the
/// range its callers may split (1: the whole kernel at once).
pub fn define(
    jit: &mut JitModule,
    m: &Module,
    name: &str,
    comp: &Computation,
    n: NodeIndex,
    operand_slots: &[(NodeIndex, usize)],
    out_slots: &[usize],
) -> Result<(usize, i64), CgError> {
    let split = match &comp.instr(n).op {
        Op::SelectAndScatter { window, .. } => rows_apart(comp, n, window)?,
        Op::Scatter(s) => rows_owned(comp, n, s)?,
        _ => 1,
    };
    let i = super::define_kernel(jit, name, |b, jm, args, range| {
        let load_arg =
            |b: &mut cranelift_frontend::FunctionBuilder, i: usize| super::arg_ptr(b, args, i);
        let mut leaves = HashMap::new();
        for &(o, s) in operand_slots {
            let p = load_arg(b, s);
            leaves.insert(o, vec![Leaf::Buffer(p)]);
        }
        let outs: Vec<Value> = out_slots.iter().map(|&s| load_arg(b, s)).collect();
        let mut em = Emitter::new(b, jm, m, comp, leaves);
        match &comp.instr(n).op {
            Op::Scatter(s) => scatter(&mut em, n, s, &outs, (split > 1).then_some(range))?,
            Op::SelectAndScatter { window, select, scatter } => {
                let range = (split > 1).then_some(range);
                select_and_scatter(&mut em, n, window, *select, *scatter, outs[0], range)?
            }
            other => {
                return Err(CgError::new(format!("{} is not a scatter", other.opcode().name())));
            }
        }
        em.b.ins().return_(&[]);
        Ok(())
    })?;
    Ok((i, split))
}

/// The operand's first dimension when a select-and-scatter's windows stay within one row
/// of it (size 1, stride 1, no padding along it): source row `r` then writes only result
/// row `r`, so rows can be computed apart, each in the interpreter's order. 1 otherwise.
fn rows_apart(
    comp: &Computation,
    n: NodeIndex,
    window: &hlo_ir::op::Window,
) -> Result<i64, CgError> {
    let dims = static_dims(&comp.instr(comp.operands(n)[0]).shape)?;
    let apart = match (window.dims.first(), dims.first()) {
        (Some(w), Some(&d)) => {
            w.size == 1 && w.stride == 1 && w.pad_lo == 0 && w.pad_hi == 0 && d >= 2
        }
        _ => false,
    };
    Ok(if apart { dims[0] } else { 1 })
}

/// The operand's first dimension when every update window of a scatter is one row thick
/// along it (the dimension is inserted, a batching one, or a window dimension of size 1):
/// each window then lands in exactly one row, and a part owning rows `lo..hi` can apply,
/// in the interpreter's order, exactly the windows that land there ("owner computes").
/// Colliding updates of one element stay in one part, in order, so the bits never depend
/// on the split. 1 otherwise.
fn rows_owned(
    comp: &Computation,
    n: NodeIndex,
    s: &hlo_ir::op::ScatterDims,
) -> Result<i64, CgError> {
    let op_dims = static_dims(&comp.instr(comp.operands(n)[0]).shape)?;
    let Some(&rows) = op_dims.first() else { return Ok(1) };
    let thin = s.inserted_window_dims.contains(&0)
        || s.input_batching_dims.contains(&0)
        || window_extents(comp, n, s)?.first() == Some(&1);
    Ok(if thin && rows >= 2 { rows } else { 1 })
}

/// The size of a scatter's update windows along each operand dimension (1 for the
/// inserted and batching dimensions).
fn window_extents(
    comp: &Computation,
    n: NodeIndex,
    s: &hlo_ir::op::ScatterDims,
) -> Result<Vec<i64>, CgError> {
    let ops = comp.operands(n);
    let op_dims = static_dims(&comp.instr(ops[0]).shape)?;
    let upd_dims = static_dims(&comp.instr(ops[ops.len() / 2 + 1]).shape)?;
    let window = (0..op_dims.len()).filter(|d| {
        !s.inserted_window_dims.contains(&(*d as i64))
            && !s.input_batching_dims.contains(&(*d as i64))
    });
    let mut extent = vec![1i64; op_dims.len()];
    for (&wd, od) in s.update_window_dims.iter().zip(window) {
        extent[od] = *upd_dims
            .get(wd as usize)
            .ok_or_else(|| CgError::new("scatter: update window dims mismatch".into()))?;
    }
    Ok(extent)
}

/// Copies `src` (a leaf) into `out`.
fn copy_into(em: &mut Emitter, src: NodeIndex, out: Value) -> Result<(), CgError> {
    let shape = em.comp.instr(src).shape.clone();
    let dims = static_dims(&shape)?;
    let e = elem_of(&shape)?;
    nest(em, &dims, 0, &mut Vec::new(), &mut |em, idx| {
        let v = em.load_fresh(src, idx)?;
        let a = em.address(out, &dims, e, idx);
        ty::store(em.b, e, v, a)
    })
}

extern "C" fn hlo_copy_bytes(dst: *mut u8, src: *const u8, len: i64) {
    // SAFETY: the kernels call this only with `len` bytes inside both buffers (a run of
    // rows of two buffers of one shape); `copy` allows them to be the same buffer.
    unsafe { std::ptr::copy(src, dst, len as usize) }
}

/// Calls the host's `memmove` of `len` bytes from `src` to `dst`.
fn copy_bytes(b: &mut cranelift_frontend::FunctionBuilder, dst: Value, src: Value, len: Value) {
    use cranelift_codegen::ir::{AbiParam, Signature};
    let mut sig = Signature::new(b.func.signature.call_conv);
    for _ in 0..3 {
        sig.params.push(AbiParam::new(types::I64));
    }
    let sigref = b.import_signature(sig);
    let fp = b.ins().iconst(types::I64, hlo_copy_bytes as *const u8 as i64);
    b.ins().call_indirect(sigref, fp, &[dst, src, len]);
}

fn to_i64(em: &mut Emitter, v: Value, e: hlo_ir::ElemType) -> Value {
    let signed = e.class() == hlo_ir::types::ElemClass::Signed;
    match em.b.func.dfg.value_type(v) {
        types::I64 => v,
        _ if signed => em.b.ins().sextend(types::I64, v),
        _ => em.b.ins().uextend(types::I64, v),
    }
}

/// The scatter of instruction `n` into `outs`: the operands copied in, then every update
/// combined in row-major order of the updates. `rows` (from [`rows_owned`]): only the
/// operand rows `lo..hi` are copied and only the windows landing in them applied. When the
/// updates' scatter dimensions come before their window dimensions (the usual layout), a
/// window's index vector is loaded and checked once, outside the loop over its elements.
fn scatter(
    em: &mut Emitter,
    n: NodeIndex,
    s: &hlo_ir::op::ScatterDims,
    outs: &[Value],
    rows: Option<[Value; 2]>,
) -> Result<(), CgError> {
    let comp = em.comp;
    let ops = comp.operands(n);
    let k = ops.len() / 2; // operands, indices, updates: k + 1 + k
    let (operands, indices, updates) = (&ops[..k], ops[k], &ops[k + 1..]);
    let out_shapes: Vec<hlo_ir::Shape> =
        flat_arrays(&comp.instr(n).shape).into_iter().cloned().collect();
    let op_dims = static_dims(&out_shapes[0])?;
    let elems: Vec<_> = out_shapes.iter().map(elem_of).collect::<Result<_, _>>()?;
    for (i, &o) in operands.iter().enumerate() {
        let Some(Leaf::Buffer(src)) = em.leaves.get(&o).and_then(|l| l.first()).cloned() else {
            copy_into(em, o, outs[i])?;
            continue;
        };
        // Row-major buffers of one shape: the rows `lo..hi` (all of them) are one run of
        // bytes, copied by the host's `memmove`.
        let row_bytes = op_dims.iter().skip(1).product::<i64>() * ty::size_of(elems[i]);
        let rows_total = op_dims.first().copied().unwrap_or(1);
        let [lo, hi] = match rows {
            Some([lo, hi]) => {
                let (zero, all) = (em.iconst(0), em.iconst(rows_total));
                let lo = em.b.ins().smax(lo, zero);
                let hi = em.b.ins().smin(hi, all);
                let hi = em.b.ins().smax(hi, lo);
                [lo, hi]
            }
            None => [em.iconst(0), em.iconst(rows_total)],
        };
        let from = em.b.ins().imul_imm_s(lo, row_bytes);
        let to = em.b.ins().imul_imm_s(hi, row_bytes);
        let len = em.b.ins().isub(to, from);
        let (s, d) = (em.b.ins().iadd(src, from), em.b.ins().iadd(outs[i], from));
        copy_bytes(em.b, d, s, len);
    }
    let upd_dims = static_dims(&comp.instr(updates[0]).shape)?;
    let ind_shape = comp.instr(indices).shape.clone();
    let ind_dims = static_dims(&ind_shape)?;
    let ind_elem = elem_of(&ind_shape)?;
    let ivd = s.index_vector_dim as usize;
    let window_dims: Vec<usize> = s.update_window_dims.iter().map(|&d| d as usize).collect();
    let scatter_dims: Vec<usize> =
        (0..upd_dims.len()).filter(|d| !window_dims.contains(d)).collect();
    let window: Vec<usize> = (0..op_dims.len())
        .filter(|d| {
            !s.inserted_window_dims.contains(&(*d as i64))
                && !s.input_batching_dims.contains(&(*d as i64))
        })
        .collect();
    let extent = window_extents(comp, n, s)?;
    let to_apply = s.to_apply;
    // The window's start in the operand at update index `idx` (its scatter dims read),
    // and whether the window is applied here: inside the operand, and in this part's rows.
    let start_of = |em: &mut Emitter, idx: &[Value]| -> Result<(Vec<Value>, Value), CgError> {
        let batch: Vec<Value> = scatter_dims.iter().map(|&d| idx[d]).collect();
        // The index vector at `batch` (index_vector_dim inserted).
        let zero = em.iconst(0);
        let mut start = vec![zero; op_dims.len()];
        for (kk, &d) in s.scatter_dims_to_operand_dims.iter().enumerate() {
            let mut ii = Vec::with_capacity(ind_dims.len());
            let mut bi = batch.iter();
            for dd in 0..ind_dims.len() {
                if dd == ivd {
                    ii.push(em.iconst(kk as i64));
                } else {
                    ii.push(
                        *bi.next()
                            .ok_or_else(|| CgError::new("scatter: index dims mismatch".into()))?,
                    );
                }
            }
            let v = em.load_fresh(indices, &ii)?;
            start[d as usize] = to_i64(em, v, ind_elem);
        }
        for (&od, &id) in s.input_batching_dims.iter().zip(&s.scatter_indices_batching_dims) {
            let pos = if (id as usize) < ivd || ivd >= ind_dims.len() {
                id as usize
            } else {
                id as usize - 1
            };
            start[od as usize] = batch[pos];
        }
        let mut ok = em.b.ins().iconst(types::I8, 1);
        for d in 0..op_dims.len() {
            let ge = em.b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, start[d], 0);
            let le = em.b.ins().icmp_imm_s(
                IntCC::SignedLessThanOrEqual,
                start[d],
                op_dims[d] - extent[d],
            );
            let both = em.b.ins().band(ge, le);
            ok = em.b.ins().band(ok, both);
        }
        if let Some([lo, hi]) = rows {
            // `rows_owned`: the window is one row thick along dimension 0.
            let ge = em.b.ins().icmp(IntCC::SignedGreaterThanOrEqual, start[0], lo);
            let lt = em.b.ins().icmp(IntCC::SignedLessThan, start[0], hi);
            let mine = em.b.ins().band(ge, lt);
            ok = em.b.ins().band(ok, mine);
        }
        Ok((start, ok))
    };
    // Combines the update element at `idx` into the window at `start`.
    let combine = |em: &mut Emitter, start: &[Value], idx: &[Value]| -> Result<(), CgError> {
        let mut full = start.to_vec();
        for (kk, &od) in window.iter().enumerate() {
            full[od] = em.b.ins().iadd(start[od], idx[window_dims[kk]]);
        }
        let mut cur = Vec::new();
        let mut addrs = Vec::new();
        for (i, e) in elems.iter().enumerate() {
            let a = em.address(outs[i], &op_dims, *e, &full);
            cur.push(ty::load(em.b, *e, a)?);
            addrs.push(a);
        }
        let mut argv = cur;
        for &u in updates {
            argv.push(em.load_fresh(u, idx)?);
        }
        let r = em.apply(to_apply, &argv)?;
        for (i, e) in elems.iter().enumerate() {
            ty::store(em.b, *e, r[i], addrs[i])?;
        }
        Ok(())
    };
    let outer = scatter_dims.len();
    if scatter_dims.iter().enumerate().all(|(i, &d)| i == d) {
        // Scatter dims first: per window, its start once, then its elements.
        let mut idx_of_window = Vec::new();
        return nest(em, &upd_dims[..outer], 0, &mut idx_of_window, &mut |em, widx| {
            let (start, ok) = start_of(em, widx)?;
            em.if_then(ok, |em| {
                let mut idx = widx.to_vec();
                nest(em, &upd_dims, outer, &mut idx, &mut |em, idx| combine(em, &start, idx))
            })
        });
    }
    nest(em, &upd_dims, 0, &mut Vec::new(), &mut |em, idx| {
        let (start, ok) = start_of(em, idx)?;
        em.if_then(ok, |em| combine(em, &start, idx))
    })
}

fn select_and_scatter(
    em: &mut Emitter,
    n: NodeIndex,
    window: &hlo_ir::op::Window,
    select: hlo_ir::CompId,
    scatter: hlo_ir::CompId,
    out: Value,
    rows: Option<[Value; 2]>,
) -> Result<(), CgError> {
    let comp = em.comp;
    let ops = comp.operands(n);
    let (operand, source, init) = (ops[0], ops[1], ops[2]);
    let op_shape = comp.instr(operand).shape.clone();
    let op_dims = static_dims(&op_shape)?;
    let e = elem_of(&comp.instr(n).shape)?;
    let oe = elem_of(&op_shape)?;
    let src_dims = static_dims(&comp.instr(source).shape)?;
    // Fill with the initial value (f32: four at a time over the flat buffer), the rows
    // `rows` only when rows are computed apart.
    let initv = em.at(init, &[])?;
    if let Some(range) = rows {
        super::kernel::nest_split(em, &op_dims, 1, range, &mut |em, idx| {
            let a = em.address(out, &op_dims, e, idx);
            ty::store(em.b, e, initv, a)
        })?;
    } else if e == hlo_ir::ElemType::F32 {
        let total: i64 = op_dims.iter().product();
        let splat = em.b.ins().splat(types::F32X4, initv);
        let vec_end = total - total % 4;
        em.for_range(0, vec_end, 4, |em, i| {
            let off = em.b.ins().ishl_imm_u(i, 2);
            let a = em.b.ins().iadd(out, off);
            em.b.ins().store(ty::flags(), splat, a, 0);
            Ok(())
        })?;
        em.for_range(vec_end, total, 1, |em, i| {
            let off = em.b.ins().ishl_imm_u(i, 2);
            let a = em.b.ins().iadd(out, off);
            em.b.ins().store(ty::flags(), initv, a, 0);
            Ok(())
        })?;
    } else {
        nest(em, &op_dims, 0, &mut Vec::new(), &mut |em, idx| {
            let a = em.address(out, &op_dims, e, idx);
            ty::store(em.b, e, initv, a)
        })?;
    }
    let rank = op_dims.len();
    let win: Vec<i64> = (0..rank).map(|d| window.dims.get(d).map_or(1, |w| w.size)).collect();
    let wd = window.dims.clone();
    let ovt = super::ty::Repr::of(oe)?.ty();
    let mut per_source = |em: &mut Emitter, sidx: &[Value]| -> Result<(), CgError> {
        let found = em.b.declare_var(types::I8);
        let best = em.b.declare_var(ovt);
        let best_off = em.b.declare_var(types::I64);
        let zero8 = em.b.ins().iconst(types::I8, 0);
        em.b.def_var(found, zero8);
        let zf = super::scalar_ops::fconst(em.b, ovt, 0.0);
        let zero_v = if ovt.is_float() { zf } else { em.b.ins().iconst(ovt, 0) };
        em.b.def_var(best, zero_v);
        let z64 = em.iconst(0);
        em.b.def_var(best_off, z64);
        let sidx = sidx.to_vec();
        let tap = |em: &mut Emitter, w: &[Value], wc: Option<&[i64]>| {
            let mut ok: Option<Value> = None;
            let mut pos = Vec::with_capacity(rank);
            for d in 0..rank {
                let dim = wd.get(d).copied().unwrap_or_default();
                let p = em.b.ins().imul_imm_s(sidx[d], dim.stride);
                let p = em.b.ins().iadd(p, w[d]);
                let p = em.b.ins().iadd_imm_s(p, -dim.pad_lo);
                // (select-and-scatter windows have no dilation)
                let unit = hlo_ir::op::WindowDim { lhs_dilate: 1, rhs_dilate: 1, ..dim };
                if wc.is_some_and(|wc| {
                    super::elemental::tap_always_inside(&unit, wc[d], src_dims[d], op_dims[d])
                }) {
                    pos.push(p);
                    continue;
                }
                let ge = em.b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, p, 0);
                let lt = em.b.ins().icmp_imm_s(IntCC::SignedLessThan, p, op_dims[d]);
                let v = em.b.ins().band(ge, lt);
                ok = Some(match ok {
                    None => v,
                    Some(o) => em.b.ins().band(o, v),
                });
                pos.push(p);
            }
            let body = |em: &mut Emitter| -> Result<(), CgError> {
                let x = em.load_fresh(operand, &pos)?;
                let strides = super::elemental::row_major_strides(&op_dims);
                let mut off = em.iconst(0);
                for d in 0..rank {
                    let t = em.b.ins().imul_imm_s(pos[d], strides[d]);
                    off = em.b.ins().iadd(off, t);
                }
                let f = em.b.use_var(found);
                let cur = em.b.use_var(best);
                let keep = em.apply(select, &[cur, x])?[0];
                // Take the candidate when nothing is chosen yet or select() rejects the current.
                let none = em.b.ins().icmp_imm_s(IntCC::Equal, f, 0);
                let rejected = em.b.ins().icmp_imm_s(IntCC::Equal, keep, 0);
                let take = em.b.ins().bor(none, rejected);
                let nb = em.b.ins().select(take, x, cur);
                let cur_off = em.b.use_var(best_off);
                let no = em.b.ins().select(take, off, cur_off);
                em.b.def_var(best, nb);
                em.b.def_var(best_off, no);
                let one8 = em.b.ins().iconst(types::I8, 1);
                em.b.def_var(found, one8);
                Ok(())
            };
            match ok {
                None => body(em),
                Some(c) => em.if_then(c, body),
            }
        };
        em.for_window_taps(&win, &tap)?;
        let f = em.b.use_var(found);
        let sv = em.load_fresh(source, &sidx)?;
        em.if_then(f, |em| {
            let off = em.b.use_var(best_off);
            let off = em.b.ins().imul_imm_s(off, ty::size_of(e));
            let a = em.b.ins().iadd(out, off);
            let cur = ty::load(em.b, e, a)?;
            let r = em.apply(scatter, &[cur, sv])?[0];
            ty::store(em.b, e, r, a)
        })
    };
    match rows {
        Some(range) => super::kernel::nest_split(em, &src_dims, 1, range, &mut per_source),
        None => nest(em, &src_dims, 0, &mut Vec::new(), &mut per_source),
    }
}
