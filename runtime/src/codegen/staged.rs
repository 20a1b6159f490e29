//! Staged vector math: the transcendental instructions of a vectorized loop computed a
//! chunk at a time by the host's wide vector entry points ([`hlo_vmath`]), the way
//! XLA's CPU code calls its runtime's vectorized `exp`/`log`.
//!
//! A vectorized loop (`for i in (start..end).step_by(4)`, lanes along one dimension) is cut
//! into chunks of [`CHUNK`] elements. Before a chunk's loop runs, every *staged*
//! instruction is computed over the whole chunk: its operands (the vector emitter's values,
//! four lanes at a time) go into a scratch array on the stack, one host call computes the
//! function over the array at the host's full vector width (16 lanes with AVX-512), and the
//! results land in a second array. Inside the chunk's loop, the vector emitter reads a
//! staged instruction's value from that array instead of emitting its polynomial inline.
//!
//! Only instructions reached from the loop's root *at the root's own index* are staged:
//! every path from the root down to them goes through elementwise instructions of the same
//! dims (an instruction also reached through a broadcast, slice, reverse or reduction is
//! computed inline, as before). Then the loop index of the chunk is the index of the staged
//! value, and the array holds exactly the lanes the loop asks for.
//!
//! The entry points compute the inline emitters' bits exactly (`tests/math_ulp.rs`), so
//! staging changes speed, not results. Measured on the bench set: see the README.

use std::collections::{HashMap, HashSet};
#[cfg(test)]
use std::sync::atomic::Ordering;

use cranelift_codegen::ir::{AbiParam, InstBuilder, StackSlotData, StackSlotKind, Value, types};
use cranelift_module::{Linkage, Module as _};
use hlo_ir::{ElemType, NodeIndex, Op};

use super::CgError;
use super::elemental::{Emitter, StagedAt, elem_of, static_dims};

/// Elements per chunk: one host call per staged instruction per chunk. A multiple of 16
/// (the widest unrolled loop step, a row reduction's four accumulators of four lanes).
/// Measured (release, this 2-core AVX-512 host, idle, `hloc run --repeat 50`, two runs
/// each): the bench `ew_chain_f32` took 3630/3644 µs with chunks of 128, 3571/3519 with
/// 256, 3390/3444 with 512, 3390/3473 with 1024; `softmax` 1640/1666, 1658/1706,
/// 1592/1664, 1688/1631 µs.
pub const CHUNK: i64 = 512;

/// Vectors of operands a chunk's staging loop computes per iteration. Measured: see the
/// README.
const STAGE_UNROLL: i64 = 8;

/// Whether loops stage their math (`HLOC_VECTOR_MATH=0` in the environment turns it off,
/// for measuring; the results are the same bits either way).
pub fn enabled() -> bool {
    SWITCH.on()
}

static SWITCH: crate::switch::Switch = crate::switch::Switch::new("HLOC_VECTOR_MATH");

/// Turns staging on or off for programs compiled from now on (tests compare both).
#[cfg(test)]
pub fn set_enabled(on: bool) {
    SWITCH.set(on);
}

/// Instructions staged so far in this process (tests check that staging happened).
#[cfg(test)]
pub static STAGED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Loops whose staged root the host call wrote into the output, so far in this process.
#[cfg(test)]
pub static STAGED_ROOTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The instructions to stage in a loop over `root`'s own index space, operands before
/// users. Empty when nothing in the expression has a vector entry point.
pub fn stageable(em: &Emitter, root: NodeIndex) -> Result<Vec<NodeIndex>, CgError> {
    let comp = em.comp;
    if !enabled() {
        return Ok(Vec::new());
    }
    // The nodes the loop body evaluates (it stops at leaves), in post-order.
    let mut order = Vec::new();
    let mut seen = HashSet::new();
    let mut stack = vec![(root, false)];
    while let Some((n, done)) = stack.pop() {
        if done {
            order.push(n);
            continue;
        }
        if !seen.insert(n) {
            continue;
        }
        stack.push((n, true));
        if em.leaves.contains_key(&n) {
            continue;
        }
        for o in comp.operands(n) {
            if !seen.contains(&o) {
                stack.push((o, false));
            }
        }
    }
    if !order.iter().any(|&n| candidate(em, n)) {
        return Ok(Vec::new());
    }
    let reached: HashSet<NodeIndex> = order.iter().copied().collect();
    // Nodes every path from the root reaches at the root's index: users first.
    let mut pure: HashSet<NodeIndex> = HashSet::new();
    let mut dims_of: HashMap<NodeIndex, Option<Vec<i64>>> = HashMap::new();
    let mut dims = |n: NodeIndex| -> Option<Vec<i64>> {
        dims_of
            .entry(n)
            .or_insert_with(|| {
                comp.instr(n).shape.as_array().and_then(|_| static_dims(&comp.instr(n).shape).ok())
            })
            .clone()
    };
    for &n in order.iter().rev() {
        if n == root {
            pure.insert(n);
            continue;
        }
        let nd = dims(n);
        let ok = nd.is_some()
            && comp.users_unordered(n).filter(|u| reached.contains(u)).all(|u| {
                pure.contains(&u)
                    && !em.leaves.contains_key(&u)
                    && comp.instr(u).op.opcode().is_elementwise()
                    && dims(u) == nd
            });
        if ok {
            pure.insert(n);
        }
    }
    Ok(order.into_iter().filter(|n| pure.contains(n) && candidate(em, *n)).collect())
}

/// An f32/bf16 instruction with a vector entry point whose operands have its type (the
/// cases the vector emitter computes with the inline polynomial).
fn candidate(em: &Emitter, n: NodeIndex) -> bool {
    let comp = em.comp;
    if em.leaves.contains_key(&n) {
        return false;
    }
    let Op::Plain(op) = comp.instr(n).op else { return false };
    if symbol(op).is_none() {
        return false;
    }
    let Ok(e) = elem_of(&comp.instr(n).shape) else { return false };
    matches!(e, ElemType::F32 | ElemType::BF16)
        && comp.operands(n).iter().all(|&o| elem_of(&comp.instr(o).shape).ok() == Some(e))
}

/// A loop's only output when it is an f32 instruction staged last: the host call writes
/// each chunk's results straight into the output (`ptr`, row-major `dims`, the chunk's
/// first element at `at` with its last index the chunk's start), or with `accumulate`
/// adds them to it (a column sum of the instruction), and the loop body, which would only
/// copy or add them there, does not run.
pub struct StagedRoot {
    pub node: NodeIndex,
    pub ptr: Value,
    pub dims: Vec<i64>,
    pub at: Vec<Value>,
    pub accumulate: bool,
}

/// `for i in (start..end).step_by(step) { body(i) }` with the instructions of `stage`
/// computed a chunk at a time (see the module documentation). `at` is the index the body
/// evaluates the root at, with `i` in position `lane`; `end - start` and [`CHUNK`] must be
/// multiples of `step`, and `step` of 4.
#[allow(clippy::too_many_arguments)]
pub fn chunked_loop(
    em: &mut Emitter,
    start: Value,
    end: Value,
    step: i64,
    stage: &[NodeIndex],
    at: &[Value],
    lane: usize,
    root: Option<&StagedRoot>,
    mut body: impl FnMut(&mut Emitter, Value) -> Result<(), CgError>,
) -> Result<(), CgError> {
    // Only the instruction staged last (the value the loop body would store or add), with
    // an accumulating entry point when its values are added.
    let root = root
        .filter(|r| stage.last() == Some(&r.node) && (!r.accumulate || accumulates(em, r.node)));
    #[cfg(test)]
    if root.is_some() {
        STAGED_ROOTS.fetch_add(1, Ordering::Relaxed);
    }
    debug_assert!(CHUNK % step == 0 && step % 4 == 0);
    if stage.is_empty() {
        return em.for_values(start, end, step, body);
    }
    #[cfg(test)]
    STAGED.fetch_add(stage.len(), Ordering::Relaxed);
    let bytes = (CHUNK * 4) as u32;
    let mut slots = Vec::with_capacity(stage.len());
    for &t in stage {
        let n_args = em.comp.operands(t).len();
        let args: Vec<_> = (0..n_args)
            .map(|_| {
                em.b.create_sized_stack_slot(StackSlotData::new(
                    StackSlotKind::ExplicitSlot,
                    bytes,
                    6,
                ))
            })
            .collect();
        let res =
            em.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, bytes, 6));
        slots.push((args, res));
    }
    em.for_values(start, end, CHUNK, |em, c| {
        let lim = em.b.ins().iadd_imm_s(c, CHUNK);
        let hi = em.b.ins().smin(lim, end);
        let len = em.b.ins().isub(hi, c);
        for (&t, (arg_slots, res_slot)) in stage.iter().zip(&slots) {
            let ops = em.comp.operands(t);
            let args: Vec<Value> =
                arg_slots.iter().map(|&s| em.b.ins().stack_addr(types::I64, s, 0)).collect();
            // The operands, [`STAGE_UNROLL`] vectors per iteration, then one at a time.
            let store_args = |em: &mut Emitter, j: Value, k: i64| -> Result<(), CgError> {
                let mut ix = at.to_vec();
                ix[lane] = if k == 0 { j } else { em.b.ins().iadd_imm_s(j, 4 * k) };
                let off = em.b.ins().isub(j, c);
                let off = em.b.ins().ishl_imm_u(off, 2);
                for (&o, &p) in ops.iter().zip(&args) {
                    let v = em.at_v(o, &ix, Some(lane))?;
                    let a = em.b.ins().iadd(p, off);
                    em.b.ins().store(super::ty::flags(), v, a, (16 * k) as i32);
                }
                Ok(())
            };
            let whole = em.b.ins().band_imm_s(len, !(4 * STAGE_UNROLL - 1));
            let mid = em.b.ins().iadd(c, whole);
            em.for_values(c, mid, 4 * STAGE_UNROLL, |em, j| {
                (0..STAGE_UNROLL).try_for_each(|k| store_args(em, j, k))
            })?;
            em.for_values(mid, hi, 4, |em, j| store_args(em, j, 0))?;
            let Op::Plain(op) = em.comp.instr(t).op else { unreachable!("a staged plain op") };
            let mut name = symbol(op).expect("a staged op has an entry point");
            let res = match root {
                Some(r) if r.node == t => {
                    let mut ix = r.at.clone();
                    *ix.last_mut().expect("rank >= 1") = c;
                    if r.accumulate {
                        name = hlo_vmath::symbols::accumulating(name)
                            .expect("accumulating roots are unary");
                    }
                    em.address(r.ptr, &r.dims, ElemType::F32, &ix)
                }
                _ => em.b.ins().stack_addr(types::I64, *res_slot, 0),
            };
            let mut call_args = args.clone();
            call_args.push(res);
            call_args.push(len);
            call_void(em, name, &call_args)?;
            em.staged.insert(t, StagedAt { buf: res, base: c, lane, at: at.to_vec() });
        }
        let r = if root.is_some() { Ok(()) } else { em.for_values(c, hi, step, &mut body) };
        for t in stage {
            em.staged.remove(t);
        }
        r
    })
}

/// Whether staged instruction `n` has an accumulating entry point (`acc[i] += f(x[i])`).
fn accumulates(em: &Emitter, n: NodeIndex) -> bool {
    match em.comp.instr(n).op {
        Op::Plain(op) => symbol(op).and_then(hlo_vmath::symbols::accumulating).is_some(),
        _ => false,
    }
}

/// The host vector entry point computing `op`, if there is one.
pub fn symbol(op: hlo_ir::Opcode) -> Option<&'static str> {
    use hlo_ir::Opcode::*;
    use hlo_vmath::symbols;
    Some(match op {
        Exp => symbols::EXP,
        Expm1 => symbols::EXPM1,
        Log => symbols::LOG,
        Log1p => symbols::LOG1P,
        Tanh => symbols::TANH,
        Logistic => symbols::LOGISTIC,
        Power => symbols::POW,
        _ => return None,
    })
}

/// Emits a call of vector entry point `name(ptr…, n)` (declared on first use).
fn call_void(em: &mut Emitter, name: &str, args: &[Value]) -> Result<(), CgError> {
    let mut sig = em.jm.make_signature();
    for (k, _) in args.iter().enumerate() {
        let t = if k + 1 == args.len() { types::I64 } else { em.jm.target_config().pointer_type() };
        sig.params.push(AbiParam::new(t));
    }
    let id = em
        .jm
        .declare_function(name, Linkage::Import, &sig)
        .map_err(|e| CgError::new(format!("declare host function `{name}`: {e}")))?;
    let fref = em.jm.declare_func_in_func(id, em.b.func);
    em.b.ins().call(fref, args);
    Ok(())
}
