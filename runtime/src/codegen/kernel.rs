//! Loop kernels: for each output, a loop nest over its dimensions (row-major, last
//! dimension innermost) whose body computes the element with the elemental emitter and
//! stores it.

use std::collections::HashMap;

use cranelift_codegen::ir::{types, InstBuilder, Value};
use hlo_ir::{Computation, ElemType, Module, NodeIndex, Op};

use super::elemental::{elem_of, flat_arrays, static_dims, Emitter, Leaf};
use super::{ty, CgError};
use crate::jit::{JitError, JitModule};

/// What one loop kernel computes: `outputs` (each an instruction of `comp` and the
/// argument slots of its arrays) from `leaves` (instructions whose values are read from
/// the buffers at those argument slots).
pub struct LoopKernel<'a> {
    pub comp: &'a Computation,
    pub leaves: Vec<(NodeIndex, Vec<usize>)>,
    pub outputs: Vec<(NodeIndex, Vec<usize>)>,
}

/// Defines the kernel in `jit`; returns its index there and the extent of its outermost
/// loop (what callers may split `lo..hi` over).
pub fn define_loop_kernel(jit: &mut JitModule, m: &Module, name: &str, k: &LoopKernel) -> Result<(usize, i64), CgError> {
    let mut failure: Option<CgError> = None;
    let mut extent = 1i64;
    let r = jit.define(name, |b, jm, args, range| {
        let res = (|| -> Result<(), CgError> {
            let load_arg = |b: &mut cranelift_frontend::FunctionBuilder, i: usize| b.ins().load(types::I64, ty::flags(), args, (i * 8) as i32);
            let mut leaves = HashMap::new();
            for (n, slots) in &k.leaves {
                let ptrs: Vec<Leaf> = slots.iter().map(|&s| Leaf::Buffer(load_arg(b, s))).collect();
                leaves.insert(*n, ptrs);
            }
            let outs: Vec<(NodeIndex, Vec<Value>)> = k.outputs.iter().map(|(n, slots)| (*n, slots.iter().map(|&s| load_arg(b, s)).collect())).collect();
            let mut em = Emitter::new(b, jm, m, k.comp, leaves);
            for (n, ptrs) in outs {
                let shapes: Vec<hlo_ir::Shape> = flat_arrays(&k.comp.instr(n).shape).into_iter().cloned().collect();
                let dims = static_dims(&shapes[0])?;
                for s in &shapes[1..] {
                    if static_dims(s)? != dims {
                        return Err(CgError::unsupported("a tuple-shaped result with arrays of different dims".into()));
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
                            let in_rank = k.comp.operands(n).first().and_then(|&o| static_dims(&k.comp.instr(o).shape).ok()).map_or(0, |d| d.len());
                            in_rank > 0 && !dimensions.contains(&(in_rank as i64 - 1)) && k.comp.operands(n).len() == 2
                        }
                        Op::ReduceWindow { .. } => false,
                        _ => true,
                    };
                extent = split_extent(&dims, vectorize);
                if vectorize {
                    // Outer dimensions as loops; the last one four lanes at a time, then a
                    // scalar tail.
                    let (last, outer) = dims.split_last().expect("rank >= 1");
                    let (last, e, p) = (*last, elems[0], ptrs[0]);
                    let vec_end = last - last % 4;
                    nest_split(&mut em, outer, range, &mut |em, oidx| {
                        em.for_range(0, vec_end, 4, |em, i| {
                            let mut idx = oidx.to_vec();
                            idx.push(i);
                            let v = em.at_v(n, &idx, Some(idx.len() - 1))?;
                            let addr = em.address(p, &dims, e, &idx);
                            em.store_v(e, v, addr)
                        })?;
                        em.for_range(vec_end, last, 1, |em, i| {
                            let mut idx = oidx.to_vec();
                            idx.push(i);
                            let v = em.at(n, &idx)?;
                            let addr = em.address(p, &dims, e, &idx);
                            ty::store(em.b, e, v, addr)
                        })
                    })?;
                    continue;
                }
                nest_split(&mut em, &dims, range, &mut |em, idx| {
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
        })();
        res.map_err(|e| {
            let msg = e.message.clone();
            failure = Some(e);
            JitError(msg)
        })
    });
    match (r, failure) {
        (Ok(i), _) => Ok((i, extent)),
        (Err(_), Some(f)) => Err(f),
        (Err(e), None) => Err(e.into()),
    }
}

/// The loop nest over `dims`, its outermost loop running over the kernel's `lo..hi`
/// arguments (clamped to the dimension).
fn nest_split(em: &mut Emitter, dims: &[i64], range: [Value; 2], body: &mut dyn FnMut(&mut Emitter, &[Value]) -> Result<(), CgError>) -> Result<(), CgError> {
    if dims.is_empty() {
        return body(em, &[]);
    }
    let mut idx = Vec::new();
    em.for_dyn(range[0], range[1], dims[0], |em, i| {
        idx.push(i);
        let r = nest(em, dims, 1, &mut idx, body);
        idx.pop();
        r
    })
}

/// The number of outer iterations a kernel for an output of these dims splits over (the
/// first dimension; the vectorized path keeps its last one whole).
pub fn split_extent(dims: &[i64], vectorized: bool) -> i64 {
    match (dims.len(), vectorized) {
        (0, _) | (1, true) => 1,
        _ => dims[0],
    }
}

fn nest(em: &mut Emitter, dims: &[i64], level: usize, idx: &mut Vec<Value>, body: &mut dyn FnMut(&mut Emitter, &[Value]) -> Result<(), CgError>) -> Result<(), CgError> {
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
