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
            Op::Scatter(s) => scatter(&mut em, n, s, &outs)?,
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

fn to_i64(em: &mut Emitter, v: Value, e: hlo_ir::ElemType) -> Value {
    let signed = e.class() == hlo_ir::types::ElemClass::Signed;
    match em.b.func.dfg.value_type(v) {
        types::I64 => v,
        _ if signed => em.b.ins().sextend(types::I64, v),
        _ => em.b.ins().uextend(types::I64, v),
    }
}

fn scatter(
    em: &mut Emitter,
    n: NodeIndex,
    s: &hlo_ir::op::ScatterDims,
    outs: &[Value],
) -> Result<(), CgError> {
    let comp = em.comp;
    let ops = comp.operands(n);
    let k = ops.len() / 2; // operands, indices, updates: k + 1 + k
    let (operands, indices, updates) = (&ops[..k], ops[k], &ops[k + 1..]);
    let out_shapes: Vec<hlo_ir::Shape> =
        flat_arrays(&comp.instr(n).shape).into_iter().cloned().collect();
    for (i, &o) in operands.iter().enumerate() {
        copy_into(em, o, outs[i])?;
    }
    let op_dims = static_dims(&out_shapes[0])?;
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
    let mut extent = vec![1i64; op_dims.len()];
    for (kk, &od) in window.iter().enumerate() {
        extent[od] = upd_dims[window_dims[kk]];
    }
    let elems: Vec<_> = out_shapes.iter().map(elem_of).collect::<Result<_, _>>()?;
    let to_apply = s.to_apply;
    nest(em, &upd_dims, 0, &mut Vec::new(), &mut |em, idx| {
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
        let mut ok: Option<Value> = None;
        for d in 0..op_dims.len() {
            let ge = em.b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, start[d], 0);
            let le = em.b.ins().icmp_imm_s(
                IntCC::SignedLessThanOrEqual,
                start[d],
                op_dims[d] - extent[d],
            );
            let both = em.b.ins().band(ge, le);
            ok = Some(match ok {
                None => both,
                Some(o) => em.b.ins().band(o, both),
            });
        }
        let mut full = start.clone();
        for (kk, &od) in window.iter().enumerate() {
            full[od] = em.b.ins().iadd(start[od], idx[window_dims[kk]]);
        }
        let body = |em: &mut Emitter| -> Result<(), CgError> {
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
        match ok {
            None => body(em),
            Some(c) => em.if_then(c, body),
        }
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
        super::kernel::nest_split(em, &op_dims, range, &mut |em, idx| {
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
        Some(range) => super::kernel::nest_split(em, &src_dims, range, &mut per_source),
        None => nest(em, &src_dims, 0, &mut Vec::new(), &mut per_source),
    }
}
