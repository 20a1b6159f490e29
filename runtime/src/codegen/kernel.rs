//! Loop kernels: for each output, a loop nest over its dimensions (row-major, last
//! dimension innermost) whose body computes the element with the elemental emitter and
//! stores it.

use std::collections::HashMap;

use cranelift_codegen::ir::{InstBuilder, Value, types};
use hlo_ir::{Computation, ElemType, Module, NodeIndex, Op};

use super::elemental::{Emitter, IndexBody, Leaf, elem_of, flat_arrays, static_dims};
use super::{CgError, ty};
use crate::jit::JitModule;

/// What one loop kernel computes: `outputs` (each an instruction of `comp` and the
/// argument slots of its arrays) from `leaves` (instructions whose values are read from
/// the buffers at those argument slots).
pub struct LoopKernel<'a> {
    pub comp: &'a Computation,
    pub leaves: Vec<(NodeIndex, Vec<usize>)>,
    pub outputs: Vec<(NodeIndex, Vec<usize>)>,
}

/// A defined loop kernel.
pub struct DefinedLoop {
    /// Its index in the [`JitModule`].
    pub index: usize,
    /// The extent of its split range (what callers may split `lo..hi` over): the units of
    /// [`split_of`].
    pub extent: i64,
    /// When unit `r` of the split range computes exactly row `r` of every output (its
    /// leading dimensions flattened, the same ones for every output): per input argument
    /// position, whether the kernel reads that buffer only in its row `r` too
    /// ([`super::rows`]).
    pub rows: Option<Vec<bool>>,
}

/// Defines the kernel in `jit`.
pub fn define_loop_kernel(
    jit: &mut JitModule,
    m: &Module,
    name: &str,
    k: &LoopKernel,
) -> Result<DefinedLoop, CgError> {
    let mut extent = 1i64;
    // The leading dimensions every output's split range flattens (`Some(None)`: a loop of
    // another kind, e.g. a column reduction's blocks of columns, or outputs that differ).
    let mut row_loop: Option<Option<Vec<i64>>> = None;
    let mut saw_rows = |r: Option<Vec<i64>>| {
        row_loop = Some(match row_loop.take() {
            None => r,
            Some(prev) => prev.filter(|p| Some(p) == r.as_ref()),
        })
    };
    let index = super::define_kernel(jit, name, |b, jm, args, range| {
        let load_arg =
            |b: &mut cranelift_frontend::FunctionBuilder, i: usize| super::arg_ptr(b, args, i);
        let mut leaves = HashMap::new();
        for (n, slots) in &k.leaves {
            let ptrs: Vec<Leaf> = slots.iter().map(|&s| Leaf::Input(load_arg(b, s))).collect();
            leaves.insert(*n, ptrs);
        }
        let outs: Vec<(NodeIndex, Vec<Value>)> = k
            .outputs
            .iter()
            .map(|(n, slots)| (*n, slots.iter().map(|&s| load_arg(b, s)).collect()))
            .collect();
        let mut em = Emitter::new(b, jm, m, k.comp, leaves);
        if let Some(dims) = shared_vector_dims(&em, &outs) {
            let split = split_of(&dims, true, false);
            extent = emit_vector_loop(&mut em, &outs, &dims, split, range)?;
            saw_rows(split.rows(&dims));
            em.b.ins().return_(&[]);
            return Ok(());
        }
        for (n, ptrs) in outs {
            let shapes: Vec<hlo_ir::Shape> =
                flat_arrays(&k.comp.instr(n).shape).into_iter().cloned().collect();
            let dims = static_dims(&shapes[0])?;
            for s in &shapes[1..] {
                if static_dims(s)? != dims {
                    return Err(CgError::unsupported(crate::Unsupported::TupleResultDims));
                }
            }
            let elems: Vec<_> = shapes.iter().map(elem_of).collect::<Result<_, _>>()?;
            em.forget();
            let root_op = &k.comp.instr(n).op;
            let vectorize = shapes.len() == 1
                && matches!(elems[0], ElemType::F32 | ElemType::BF16)
                && dims.last().is_some_and(|&d| d >= 4)
                && match root_op {
                    // Column reductions (the last dimension kept) vectorize across outputs.
                    Op::Reduce { dimensions, .. } => {
                        let in_rank = k
                            .comp
                            .operands(n)
                            .first()
                            .and_then(|&o| static_dims(&k.comp.instr(o).shape).ok())
                            .map_or(0, |d| d.len());
                        in_rank > 0
                            && !dimensions.contains(&(in_rank as i64 - 1))
                            && k.comp.operands(n).len() == 2
                    }
                    Op::ReduceWindow { .. } => em.reduce_window_lanes(n, dims.len() - 1),
                    _ => true,
                };
            if let Some(cr) = column_reduce(&em, n)? {
                extent = emit_column_reduce(&mut em, &cr, ptrs[0], range)?;
                saw_rows(None);
                continue;
            }
            // A reduction's or a window's element is a loop of its own: its loop nest may
            // flatten every dimension into the split range.
            let heavy = matches!(root_op, Op::Reduce { .. } | Op::ReduceWindow { .. });
            let split = split_of(&dims, vectorize, heavy);
            extent = split.extent;
            saw_rows(split.rows(&dims));
            if vectorize {
                extent = emit_vector_loop(&mut em, &[(n, ptrs)], &dims, split, range)?;
                continue;
            }
            nest_split(&mut em, &dims, split.lead, range, &mut |em, idx| {
                let vals = em.at_all(n, idx)?;
                for ((v, p), e) in vals.iter().zip(&ptrs).zip(&elems) {
                    let addr = em.address(*p, &dims, *e, idx);
                    ty::store(em.b, *e, *v, addr)?;
                }
                Ok(())
            })?;
        }
        em.b.ins().return_(&[]);
        Ok(())
    })?;
    let rows = row_loop.flatten().filter(|p| units(p) >= 2 && units(p) == extent).map(|prefix| {
        let leaves: Vec<NodeIndex> = k.leaves.iter().map(|(n, _)| *n).collect();
        let outs: Vec<NodeIndex> = k.outputs.iter().map(|(n, _)| *n).collect();
        let by_rows = super::rows::leaves_read_by_rows(k.comp, &outs, &leaves, &prefix);
        let inputs = k.leaves.iter().flat_map(|(_, s)| s.iter().map(|&p| p + 1)).max().unwrap_or(0);
        let mut flags = vec![false; inputs];
        for (n, slots) in &k.leaves {
            for &p in slots {
                flags[p] = by_rows[n];
            }
        }
        flags
    });
    Ok(DefinedLoop { index, extent, rows })
}

/// The dims of `n` when a vectorized loop can compute it beside other outputs: a single
/// f32/bf16 array whose last dimension is at least four, not a reduction or a window
/// (their loops differ). The planner groups a fusion's outputs by this
/// (`exec::planner::output_group`) and [`shared_vector_dims`] accepts what it grouped.
pub fn vector_dims(comp: &Computation, n: NodeIndex) -> Option<Vec<i64>> {
    let i = comp.instr(n);
    let a = i.shape.as_array()?;
    if !matches!(a.elem, ElemType::F32 | ElemType::BF16)
        || matches!(i.op, Op::Reduce { .. } | Op::ReduceWindow { .. })
    {
        return None;
    }
    static_dims(&i.shape).ok().filter(|d| d.last().is_some_and(|&l| l >= 4))
}

/// The dims of every output when there are several, each with the same
/// [`vector_dims`]: then one vectorized loop computes them all ([`emit_vector_loop`]).
fn shared_vector_dims(em: &Emitter, outs: &[(NodeIndex, Vec<Value>)]) -> Option<Vec<i64>> {
    if outs.len() < 2 || outs.iter().any(|(_, ptrs)| ptrs.len() != 1) {
        return None;
    }
    let first = vector_dims(em.comp, outs[0].0)?;
    outs.iter().all(|(n, _)| vector_dims(em.comp, *n).as_ref() == Some(&first)).then_some(first)
}

/// The vectorized loop nest of one or more f32/bf16 outputs of the same dims: the outer
/// dimensions as loops, the last one four lanes at a time, then a scalar tail; at each
/// index every output is computed and stored, so the values several share (their common
/// operands' loads, an output another one reads) are computed once. Math is staged for
/// all of them together. Returns the outermost loop's extent.
fn emit_vector_loop(
    em: &mut Emitter,
    outs: &[(NodeIndex, Vec<Value>)],
    dims: &[i64],
    split: Split,
    range: [Value; 2],
) -> Result<i64, CgError> {
    em.forget();
    let mut stage: Vec<NodeIndex> = Vec::new();
    for (n, _) in outs {
        for t in super::staged::stageable(em, *n)? {
            if !stage.contains(&t) {
                stage.push(t);
            }
        }
    }
    let (last, outer) = dims.split_last().expect("rank >= 1");
    let last = *last;
    let vec_end = last - last % 4;
    let elems: Vec<ElemType> =
        outs.iter().map(|(n, _)| elem_of(&em.comp.instr(*n).shape)).collect::<Result<_, _>>()?;
    // One index in the vector lanes or the scalar tail: every output computed and stored.
    let store_at = |em: &mut Emitter, idx: &[Value], vector: bool| -> Result<(), CgError> {
        for ((n, ptrs), &e) in outs.iter().zip(&elems) {
            let addr = em.address(ptrs[0], dims, e, idx);
            if vector {
                let v = em.at_v(*n, idx, Some(idx.len() - 1))?;
                em.store_v(e, v, addr)?;
            } else {
                let v = em.at(*n, idx)?;
                ty::store(em.b, e, v, addr)?;
            }
        }
        Ok(())
    };
    let staged_root = |at: &[Value]| match (outs, elems.as_slice()) {
        // A single f32 output computed by a host call: written by it directly.
        ([(n, ptrs)], [ElemType::F32]) => Some(super::staged::StagedRoot {
            node: *n,
            ptr: ptrs[0],
            dims: dims.to_vec(),
            at: at.to_vec(),
            accumulate: false,
        }),
        _ => None,
    };
    if outer.is_empty() {
        // One dimension: split in runs of `VECTOR_RUN` elements (a multiple of four, so
        // every part's vector lanes are the whole loop's, and of the staging chunk); each
        // element's value does not depend on where its run starts.
        let [lo, hi] = range;
        let (zero, runs) = (em.iconst(0), em.iconst(split.extent));
        let lo = em.b.ins().smax(lo, zero);
        let hi = em.b.ins().smin(hi, runs);
        let start = em.b.ins().imul_imm_s(lo, VECTOR_RUN);
        let end = em.b.ins().imul_imm_s(hi, VECTOR_RUN);
        let all = em.iconst(last);
        let end = em.b.ins().smin(end, all);
        let end = em.b.ins().smax(end, start);
        let vend = em.b.ins().band_imm_s(end, !3);
        let at = [start];
        super::staged::chunked_loop(
            em,
            start,
            vend,
            4,
            &stage,
            &at,
            0,
            staged_root(&at).as_ref(),
            |em, i| store_at(em, &[i], true),
        )?;
        em.for_values(vend, end, 1, |em, i| store_at(em, &[i], false))?;
        return Ok(split.extent);
    }
    nest_split(em, outer, split.lead, range, &mut |em, oidx| {
        let mut at = oidx.to_vec();
        at.push(oidx[0]);
        let (from, to) = (em.iconst(0), em.iconst(vec_end));
        let lane = at.len() - 1;
        super::staged::chunked_loop(
            em,
            from,
            to,
            4,
            &stage,
            &at,
            lane,
            staged_root(&at).as_ref(),
            |em, i| {
                let mut idx = oidx.to_vec();
                idx.push(i);
                store_at(em, &idx, true)
            },
        )?;
        em.for_range(vec_end, last, 1, |em, i| {
            let mut idx = oidx.to_vec();
            idx.push(i);
            store_at(em, &idx, false)
        })
    })?;
    Ok(split.extent)
}

/// The loop nest over `dims`, its first `lead` dimensions (at least one) flattened into
/// one loop over the kernel's `lo..hi` arguments (clamped to their product), each unit's
/// indices its digits in row-major order (divisions by constants: multiplies and shifts).
pub(crate) fn nest_split<'e, 'f>(
    em: &mut Emitter<'e, 'f>,
    dims: &[i64],
    lead: usize,
    range: [Value; 2],
    body: &mut IndexBody<'_, 'e, 'f>,
) -> Result<(), CgError> {
    if dims.is_empty() {
        return body(em, &[]);
    }
    let lead = lead.clamp(1, dims.len());
    let flat = units(&dims[..lead]);
    if flat == 0 {
        return Ok(()); // no element: nothing to store
    }
    em.for_dyn(range[0], range[1], flat, |em, unit| {
        let mut idx = digits(em, &dims[..lead], unit);
        nest(em, dims, lead, &mut idx, body)
    })
}

/// The row-major index into `dims` of flat position `flat` (divisions by constants:
/// multiplies and shifts).
fn digits(em: &mut Emitter, dims: &[i64], flat: Value) -> Vec<Value> {
    let mut digits = vec![flat; dims.len()];
    let mut rest = flat;
    for d in (1..dims.len()).rev() {
        digits[d] = em.b.ins().urem_imm_u(rest, dims[d]);
        rest = em.b.ins().udiv_imm_u(rest, dims[d]);
    }
    if let Some(first) = digits.first_mut() {
        *first = rest;
    }
    digits
}

/// The product of `dims` (0 when one is empty or negative).
fn units(dims: &[i64]) -> i64 {
    dims.iter().map(|&d| d.max(0)).product()
}

/// Elements of a one-dimensional vectorized loop per unit of its split range (the kernel's
/// `lo..hi` counts runs of this many): a multiple of four lanes and of the staging chunk
/// ([`super::staged::CHUNK`]), small beside the work a part must have to pay
/// ([`crate::pool::MIN_WORK_PER_PART`], 32k elements) so that parts stay balanced.
pub const VECTOR_RUN: i64 = 4096;
const _: () = assert!(VECTOR_RUN % super::staged::CHUNK == 0 && VECTOR_RUN % 4 == 0);

/// Units a kernel's split range should have when its shape allows: its leading
/// dimensions are flattened until their product reaches this many. The batch dimension
/// alone (8 in the bench transformer's `[8, 128, 256]` activations and `[8, 8, 128, 128]`
/// attention scores) left half of a 16-core pool idle: a kernel split into at most 8
/// parts. 1024 units give every part of a 64-thread pool 16 of them (parts differ by at
/// most one unit: 6% imbalance); flattening costs a division by a constant (a multiply)
/// per unit, and more units than elements a part must have never split further
/// ([`crate::pool::MIN_WORK_PER_PART`]).
pub const SPLIT_UNITS: i64 = 1024;

/// How a loop nest splits: over the product of its first `lead` dimensions (`extent`
/// units), or, when `lead` is 0, over runs of [`VECTOR_RUN`] elements of a
/// one-dimensional vectorized loop (or one unit for a scalar).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split {
    pub lead: usize,
    pub extent: i64,
}

impl Split {
    /// The leading dimensions unit `r` is row `r` of, when there are some.
    fn rows(self, dims: &[i64]) -> Option<Vec<i64>> {
        (self.lead >= 1).then(|| dims[..self.lead].to_vec())
    }
}

/// How a kernel over an output of these dims splits: its leading dimensions flattened up to
/// [`SPLIT_UNITS`] units, keeping the last dimension whole for a vectorized loop (its
/// lanes) and for a plain scalar one (a division per element would cost); a `heavy`
/// element (a reduction's, a window's: a loop of its own) may flatten every dimension. A
/// one-dimensional vectorized loop splits in runs of [`VECTOR_RUN`] elements.
pub fn split_of(dims: &[i64], vectorized: bool, heavy: bool) -> Split {
    match (dims.len(), vectorized) {
        (0, _) => Split { lead: 0, extent: 1 },
        (1, true) => {
            Split { lead: 0, extent: ((dims[0].max(0) + VECTOR_RUN - 1) / VECTOR_RUN).max(1) }
        }
        (rank, _) => {
            let most = if heavy && !vectorized { rank } else { (rank - 1).max(1) };
            let lead = (1..=most).find(|&k| units(&dims[..k]) >= SPLIT_UNITS).unwrap_or(most);
            Split { lead, extent: units(&dims[..lead]) }
        }
    }
}

/// The loop nest over `dims[level..]` (row-major), calling `body` with the full index.
pub(crate) fn nest<'e, 'f>(
    em: &mut Emitter<'e, 'f>,
    dims: &[i64],
    level: usize,
    idx: &mut Vec<Value>,
    body: &mut IndexBody<'_, 'e, 'f>,
) -> Result<(), CgError> {
    if level == dims.len() {
        return body(em, idx);
    }
    em.for_loop(dims[level], |em, i| {
        idx.push(i);
        let r = nest(em, dims, level + 1, idx, body);
        idx.pop();
        r
    })
}

/// A reduction that keeps the input's last dimension (bias gradients, softmax over the
/// batch): see [`emit_column_reduce`].
struct ColumnReduce {
    input: NodeIndex,
    init: NodeIndex,
    op: hlo_ir::Opcode,
    /// The result's type: f32, or bf16 (accumulated in f32 lanes rounded to bf16 after
    /// every combine, as the reducer computes, then stored).
    elem: ElemType,
    in_dims: Vec<i64>,
    reduced: Vec<usize>,
    kept: Vec<usize>,
    out_dims: Vec<i64>,
}

fn column_reduce(em: &Emitter, n: NodeIndex) -> Result<Option<ColumnReduce>, CgError> {
    let Op::Reduce { dimensions, to_apply } = &em.comp.instr(n).op else { return Ok(None) };
    let ops = em.comp.operands(n);
    if ops.len() != 2 {
        return Ok(None);
    }
    let out_elem = elem_of(&em.comp.instr(n).shape)?;
    if !matches!(out_elem, ElemType::F32 | ElemType::BF16) {
        return Ok(None);
    }
    let Some(op) = em.simple_reducer(*to_apply) else { return Ok(None) };
    let in_dims = static_dims(&em.comp.instr(ops[0]).shape)?;
    let Some(last) = in_dims.len().checked_sub(1) else { return Ok(None) };
    if dimensions.contains(&(last as i64))
        || !matches!(elem_of(&em.comp.instr(ops[0]).shape)?, ElemType::F32 | ElemType::BF16)
    {
        return Ok(None);
    }
    let mut reduced: Vec<usize> = dimensions.iter().map(|&d| d as usize).collect();
    reduced.sort_unstable();
    let kept: Vec<usize> = (0..in_dims.len()).filter(|d| !reduced.contains(d)).collect();
    let out_dims = static_dims(&em.comp.instr(n).shape)?;
    Ok(Some(ColumnReduce {
        input: ops[0],
        init: ops[1],
        op,
        elem: out_elem,
        in_dims,
        reduced,
        kept,
        out_dims,
    }))
}

/// Columns per block of a column reduction: the block's accumulators (the result itself)
/// stay in L1 while every reduced row streams through them.
const COLUMN_BLOCK: i64 = 256;

/// Rows a column reduction combines into each vector of results between its load and its
/// store (without staged math). Measured: see the README.
const COLUMN_ROWS: i64 = 4;

/// A column reduction into the result buffer (bf16 results: into an f32 block on the stack,
/// stored when the block is done): per index of the result's leading dimensions and block of
/// columns (the unit the kernel's `lo..hi` range splits across threads; a `[8, 128, 256]`
/// summed over its middle dimension had been one unit, its 8 batch rows inside it), the
/// result is set to the init value, then every
/// reduced row is combined into it, four columns at a time. Each element combines its
/// values in the order of the scalar code (rows in row-major order), so results are exact;
/// only the loop order changes (rows outside, columns inside: contiguous loads).
/// Returns the number of units.
fn emit_column_reduce(
    em: &mut Emitter,
    cr: &ColumnReduce,
    out: Value,
    range: [Value; 2],
) -> Result<i64, CgError> {
    let n_cols = *cr.out_dims.last().unwrap_or(&1);
    let blocks = (n_cols + COLUMN_BLOCK - 1) / COLUMN_BLOCK;
    let out_dims = cr.out_dims.clone();
    let (outer_dims, _) = out_dims.split_at(out_dims.len() - 1);
    let outer_dims = outer_dims.to_vec();
    let last_in = cr.in_dims.len() - 1;
    let stage = super::staged::stageable(em, cr.input)?;
    let op = cr.op;
    let elem = cr.elem;
    let vop = |em: &mut Emitter, x: Value, y: Value| {
        let r = if em.b.func.dfg.value_type(x).is_vector() {
            super::vector::combine_v(em.b, op, x, y)
        } else {
            super::elemental::combine(em.b, op, x, y)
        };
        if elem == ElemType::F32 {
            r
        } else if em.b.func.dfg.value_type(r).is_vector() {
            em.round_v(elem, r)
        } else {
            ty::round_to(em.b, elem, r)
        }
    };
    // bf16 results accumulate in an f32 block.
    let scratch = (elem != ElemType::F32).then(|| {
        em.b.create_sized_stack_slot(cranelift_codegen::ir::StackSlotData::new(
            cranelift_codegen::ir::StackSlotKind::ExplicitSlot,
            (COLUMN_BLOCK * 4) as u32,
            4,
        ))
    });
    // Units: an index of the result's dimensions before the columns and a block of
    // columns. Each element combines its rows in the same order however the units split.
    let unit_count = units(&outer_dims) * blocks;
    em.for_dyn(range[0], range[1], unit_count, |em, unit| {
        let blk = em.b.ins().urem_imm_u(unit, blocks.max(1));
        let outer = em.b.ins().udiv_imm_u(unit, blocks.max(1));
        let outer = digits(em, &outer_dims, outer);
        let c0 = em.b.ins().imul_imm_s(blk, COLUMN_BLOCK);
        let c_lim = em.b.ins().iadd_imm_s(c0, COLUMN_BLOCK);
        let n = em.iconst(n_cols);
        let c_end = em.b.ins().smin(c_lim, n);
        let len = em.b.ins().isub(c_end, c0);
        let vlen = em.b.ins().band_imm_s(len, !3);
        let v_end = em.b.ins().iadd(c0, vlen);
        with_index(em, &outer, &mut |em, oidx| {
            let oidx = oidx.to_vec();
            let out_at = |em: &mut Emitter, c: Value| {
                let mut idx = oidx.clone();
                idx.push(c);
                em.address(out, &out_dims, elem, &idx)
            };
            let acc_base = scratch.map(|s| em.b.ins().stack_addr(types::I64, s, 0));
            let addr_at = |em: &mut Emitter, c: Value| match acc_base {
                Some(base) => {
                    let off = em.b.ins().isub(c, c0);
                    let off = em.b.ins().ishl_imm_u(off, 2);
                    em.b.ins().iadd(base, off)
                }
                None => out_at(em, c),
            };
            // One pass: the block set to the init value, then every reduced row combined
            // into it. A `fast` pass (f32 max/min) combines with `maxps`/`minps` and
            // records in `odd` whether any input was NaN; those differ from IEEE max/min
            // only for a NaN and where `+0` meets `-0`, which can change a result only if
            // it is ±0. Either way the block is computed again exactly.
            let odd = em.b.declare_var(types::I32X4);
            let pass = |em: &mut Emitter, fast: bool| -> Result<(), CgError> {
                let init = em.at(cr.init, &[])?;
                let init_v = em.b.ins().splat(types::F32X4, init);
                if fast {
                    let z = em.b.ins().iconst(types::I32, 0);
                    let z = em.b.ins().splat(types::I32X4, z);
                    em.b.def_var(odd, z);
                }
                em.for_values(c0, v_end, 4, |em, c| {
                    let a = addr_at(em, c);
                    em.b.ins().store(ty::flags(), init_v, a, 0);
                    Ok(())
                })?;
                em.for_values(v_end, c_end, 1, |em, c| {
                    let a = addr_at(em, c);
                    em.b.ins().store(ty::flags(), init, a, 0);
                    Ok(())
                })?;
                let zero = em.iconst(0);
                let mut full = vec![zero; cr.in_dims.len()];
                for (j, &d) in cr.kept.iter().enumerate().take(oidx.len()) {
                    full[d] = oidx[j];
                }
                // An f32 sum of a staged instruction: the host call adds each chunk of it
                // into the result (the same `acc + x` as below, in the same order).
                let mut out_idx = oidx.clone();
                out_idx.push(c0);
                let accumulate = (elem == ElemType::F32 && op == hlo_ir::Opcode::Add).then(|| {
                    super::staged::StagedRoot {
                        node: cr.input,
                        ptr: out,
                        dims: out_dims.clone(),
                        at: out_idx,
                        accumulate: true,
                    }
                });
                // One row combined into the block's vector columns.
                let combine_v = |em: &mut Emitter, acc: Value, x: Value| {
                    if fast {
                        let o = em.b.use_var(odd);
                        let o = mark_nan(em, o, x);
                        em.b.def_var(odd, o);
                        super::vector::pminmax(em.b, op == hlo_ir::Opcode::Maximum, acc, x)
                    } else {
                        vop(em, acc, x)
                    }
                };
                let row_v = |em: &mut Emitter, full: &[Value]| {
                    super::staged::chunked_loop(
                        em,
                        c0,
                        v_end,
                        4,
                        &stage,
                        full,
                        last_in,
                        accumulate.as_ref(),
                        |em, c| {
                            let mut at = full.to_vec();
                            at[last_in] = c;
                            let x = em.at_v(cr.input, &at, Some(last_in))?;
                            let a = addr_at(em, c);
                            let acc = em.b.ins().load(types::F32X4, ty::flags(), a, 0);
                            let r = combine_v(em, acc, x);
                            em.b.ins().store(ty::flags(), r, a, 0);
                            Ok(())
                        },
                    )
                };
                let row_tail = |em: &mut Emitter, full: &[Value]| {
                    em.for_values(v_end, c_end, 1, |em, c| {
                        let mut at = full.to_vec();
                        at[last_in] = c;
                        let x = em.at(cr.input, &at)?;
                        let a = addr_at(em, c);
                        let acc = em.b.ins().load(types::F32, ty::flags(), a, 0);
                        let r = vop(em, acc, x);
                        em.b.ins().store(ty::flags(), r, a, 0);
                        Ok(())
                    })
                };
                // Without staged math, the innermost reduced dimension's rows go
                // [`COLUMN_ROWS`] at a time: each vector of results is loaded once, combined
                // with those rows in order, and stored once.
                let (outer_red, inner) = cr.reduced.split_at(cr.reduced.len() - 1);
                let d = inner[0];
                let rows = cr.in_dims[d];
                if !stage.is_empty() || rows < 2 * COLUMN_ROWS {
                    return em.reduce_nest(
                        &cr.reduced,
                        0,
                        &cr.in_dims,
                        &mut full,
                        &mut |em, full| {
                            row_v(em, full)?;
                            row_tail(em, full)
                        },
                    );
                }
                let grouped = rows - rows % COLUMN_ROWS;
                em.reduce_nest(outer_red, 0, &cr.in_dims, &mut full, &mut |em, full| {
                    let full = full.to_vec();
                    let (z, g, e) = (em.iconst(0), em.iconst(grouped), em.iconst(rows));
                    em.for_values(z, g, COLUMN_ROWS, |em, r| {
                        em.for_values(c0, v_end, 4, |em, c| {
                            let a = addr_at(em, c);
                            let mut acc = em.b.ins().load(types::F32X4, ty::flags(), a, 0);
                            for u in 0..COLUMN_ROWS {
                                let mut at = full.clone();
                                at[d] = if u == 0 { r } else { em.b.ins().iadd_imm_s(r, u) };
                                at[last_in] = c;
                                let x = em.at_v(cr.input, &at, Some(last_in))?;
                                acc = combine_v(em, acc, x);
                            }
                            em.b.ins().store(ty::flags(), acc, a, 0);
                            Ok(())
                        })
                    })?;
                    em.for_values(g, e, 1, |em, r| {
                        let mut at = full.clone();
                        at[d] = r;
                        row_v(em, &at)
                    })?;
                    em.for_values(z, e, 1, |em, r| {
                        let mut at = full.clone();
                        at[d] = r;
                        row_tail(em, &at)
                    })
                })
            };
            let fast = elem == ElemType::F32
                && matches!(op, hlo_ir::Opcode::Maximum | hlo_ir::Opcode::Minimum);
            pass(em, fast)?;
            if fast {
                // A NaN input, or a result of ±0 (where a `+0` and a `-0` may have met):
                // computed again exactly. Any other result is the IEEE one.
                let zero = em.b.ins().f32const(0.0);
                let zero = em.b.ins().splat(types::F32X4, zero);
                em.for_values(c0, v_end, 4, |em, c| {
                    let a = addr_at(em, c);
                    let v = em.b.ins().load(types::F32X4, ty::flags(), a, 0);
                    let z =
                        em.b.ins().fcmp(cranelift_codegen::ir::condcodes::FloatCC::Equal, v, zero);
                    let o = em.b.use_var(odd);
                    let o = em.b.ins().bor(o, z);
                    em.b.def_var(odd, o);
                    Ok(())
                })?;
                let o = em.b.use_var(odd);
                let any = em.b.ins().vany_true(o);
                em.if_then(any, |em| pass(em, false))?;
            }
            if acc_base.is_none() {
                return Ok(());
            }
            // The block's bf16 results.
            em.for_values(c0, v_end, 4, |em, c| {
                let a = addr_at(em, c);
                let v = em.b.ins().load(types::F32X4, ty::flags(), a, 0);
                let o = out_at(em, c);
                em.store_v(elem, v, o)
            })?;
            em.for_values(v_end, c_end, 1, |em, c| {
                let a = addr_at(em, c);
                let v = em.b.ins().load(types::F32, ty::flags(), a, 0);
                let o = out_at(em, c);
                ty::store(em.b, elem, v, o)
            })
        })
    })?;
    Ok(unit_count)
}

/// Calls `body` at index `idx` (a loop body run once).
fn with_index<'e, 'f>(
    em: &mut Emitter<'e, 'f>,
    idx: &[Value],
    body: &mut IndexBody<'_, 'e, 'f>,
) -> Result<(), CgError> {
    body(em, idx)
}

/// `odd` with the lanes of `x` that are NaN set.
fn mark_nan(em: &mut Emitter, odd: Value, x: Value) -> Value {
    let nan = em.b.ins().fcmp(cranelift_codegen::ir::condcodes::FloatCC::Unordered, x, x);
    em.b.ins().bor(odd, nan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_flatten_leading_dimensions_up_to_the_units_a_pool_needs() {
        let s = |lead, extent| Split { lead, extent };
        // A batch of 8 alone would leave half of 16 threads idle.
        assert_eq!(split_of(&[8, 128, 256], true, false), s(2, 1024));
        assert_eq!(split_of(&[8, 8, 128, 128], true, false), s(3, 8192));
        // A reduction's rows flatten as far as the elementwise kernels over its operand.
        assert_eq!(split_of(&[8, 8, 128], false, true), s(3, 8192));
        assert_eq!(split_of(&[8, 128], false, true), s(2, 1024));
        // Enough units in the first dimension: it alone.
        assert_eq!(split_of(&[4096, 256], true, false), s(1, 4096));
        assert_eq!(split_of(&[2048, 2, 64], false, true), s(1, 2048));
        // The last dimension stays whole: vector lanes, or a plain scalar element.
        assert_eq!(split_of(&[16, 50000], true, false), s(1, 16));
        assert_eq!(split_of(&[16, 50000], false, false), s(1, 16));
        assert_eq!(split_of(&[4, 4, 4, 3], false, false), s(3, 64));
        // One dimension: runs of a vector loop, elements of a scalar one.
        assert_eq!(split_of(&[10_000], true, false), s(0, 3));
        assert_eq!(split_of(&[10_000], false, false), s(1, 10_000));
        assert_eq!(split_of(&[], false, false), s(0, 1));
        assert_eq!(split_of(&[8, 0, 4], true, false), s(2, 0));
    }
}
