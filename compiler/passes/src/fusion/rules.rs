//! The fusion rules shared by both passes: what is fusible, what is expensive, how a
//! consumer reads an operand (use vs reuse), what may be duplicated, sizes; for both
//! phases of multi-output fusion, which outputs one loop computes together
//! ([`same_space`]) and how far a reachability search looks ([`SEARCH_BUDGET`]).
//!
//! These restate XLA's `IsFusible`, `IsExpensive`, `OperandElementUse`,
//! `IsAlwaysDuplicable` and the "effectively unary" test of `InstructionFusion` (see
//! `shared/design/passes.md` §b), adapted to a TPU-like target: `reduce` is the hero of
//! input fusions and `dot`/`convolution` the hero of output fusions, never loop-fused.

use hlo_ir::op::Op;
use hlo_ir::types::ElemClass;
use hlo_ir::{Computation, NodeIndex, Opcode, Shape};

use hlo_ir::opcode::Category;

/// A cheap producer is duplicated into at most this many consumers.
pub const MAX_DUPLICATION_USERS: usize = 8;
/// A fusion takes at most this many operands.
pub const MAX_FUSION_OPERANDS: usize = 64;
/// A concatenate with more operands than this is not fused (XLA:CPU).
pub const MAX_CONCAT_OPERANDS: usize = 8;
/// Instructions a reachability search of a multi-output fusion may visit before giving up
/// (the search then counts as reaching: no merge).
pub const SEARCH_BUDGET: usize = 4096;

/// Bytes of a value (every array leaf; dynamic dims at their bound, unbounded as 0).
pub fn bytes(shape: &Shape) -> u64 {
    let mut total = 0u64;
    shape.for_each_array(&mut |a| {
        let n = a.element_count().unwrap_or(0);
        total = total.saturating_add(n.saturating_mul(u64::from(a.elem.bits())).div_ceil(8));
    });
    total
}

/// Elements of an array value (tuples: the sum of their leaves).
pub fn elements(shape: &Shape) -> u64 {
    let mut total = 0u64;
    shape.for_each_array(&mut |a| total = total.saturating_add(a.element_count().unwrap_or(0)));
    total
}

/// Same dims and layout as `a` (element types may differ): the outputs one loop of a
/// multi-output fusion can compute together.
pub fn same_space(s: &Shape, a: &hlo_ir::ArrayShape) -> bool {
    let Some(x) = s.as_array() else { return false };
    let layout = |l: &Option<Box<hlo_ir::Layout>>, r: usize| {
        l.as_ref().map_or_else(
            || hlo_ir::Layout::row_major(r).minor_to_major,
            |l| l.minor_to_major.clone(),
        )
    };
    x.dims == a.dims && layout(&x.layout, x.rank()) == layout(&a.layout, a.rank())
}

fn is_scalar(shape: &Shape) -> bool {
    shape.as_array().is_some_and(|a| a.rank() == 0)
}

/// Rank counting only dims of size > 1 (XLA's "true rank").
fn true_rank(shape: &Shape) -> usize {
    shape.as_array().map_or(0, |a| a.dims.iter().filter(|d| d.bound() != Some(1)).count())
}

/// Elementwise in XLA's sense: unary/binary/ternary math, compare, select, clamp, convert,
/// and `bitcast-convert` between types of the same width. `copy` counts too (it reads
/// each element once and writes it to the same index).
pub fn is_elementwise(c: &Computation, n: NodeIndex) -> bool {
    let i = c.instr(n);
    let op = i.op.opcode();
    match op {
        Opcode::BitcastConvert => {
            let from =
                c.operand(n, 0).and_then(|o| c.instr(o).shape.as_array().map(|a| a.elem.bits()));
            from.is_some() && from == i.shape.as_array().map(|a| a.elem.bits())
        }
        Opcode::Copy => true,
        _ => op.is_elementwise() && i.shape.as_array().is_some(),
    }
}

/// Opcodes whose result is computed one element at a time from operand elements: the
/// members of loop fusions besides elementwise ops (XLA:CPU's loop-fusible list, minus
/// `reduce`, which is a hero here, and `dynamic-update-slice`, which is only fused as a
/// consumer so that it stays in place).
fn is_loop_data_movement(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        Bitcast
            | Broadcast
            | Reshape
            | Transpose
            | Slice
            | Concatenate
            | Pad
            | Iota
            | DynamicSlice
            | Reverse
            | Gather
    )
}

/// A constant with an array (or tuple) value of more than one element.
pub fn is_large_constant(c: &Computation, n: NodeIndex) -> bool {
    let i = c.instr(n);
    matches!(i.op, Op::Constant(_)) && !is_scalar(&i.shape)
}

/// Whether `n` can be cloned into a loop (or input, or output epilogue) fusion as a
/// non-hero member.
pub fn is_loop_fusible(c: &Computation, n: NodeIndex) -> bool {
    let i = c.instr(n);
    if i.shape.as_array().is_none() {
        return false;
    }
    match &i.op {
        Op::Constant(_) => is_scalar(&i.shape),
        op => {
            is_elementwise(c, n)
                || is_loop_data_movement(op.opcode())
                || op.opcode() == Opcode::DynamicUpdateSlice
        }
    }
}

/// A contraction that becomes the hero of an output fusion.
pub fn is_contraction(op: Opcode) -> bool {
    matches!(op, Opcode::Dot | Opcode::Convolution)
}

/// XLA's generic `IsExpensive` for one instruction (`shared/design/passes.md` §b.1):
/// transcendentals, divisions (integer divide/remainder are cheap by a constant),
/// contractions, reductions, gathers, control flow and anything opaque are expensive.
pub fn is_expensive(c: &Computation, n: NodeIndex) -> bool {
    use Opcode::*;
    let i = c.instr(n);
    let op = i.op.opcode();
    let complex = i.shape.as_array().is_some_and(|a| a.elem.class() == ElemClass::Complex);
    match op {
        Add | Subtract | Multiply | Maximum | Minimum | And | Or | Xor | Not | Compare | Select
        | Clamp | Negate | Floor | Ceil | RoundNearestAfz | RoundNearestEven | Convert
        | Bitcast | BitcastConvert | Broadcast | Reshape | Transpose | Slice | DynamicSlice
        | DynamicUpdateSlice | Concatenate | Pad | Reverse | Iota | Constant | Copy | Tuple
        | GetTupleElement | PopCnt | Clz | IsFinite | ReducePrecision | ShiftLeft
        | ShiftRightArithmetic | ShiftRightLogical | PartitionId | ReplicaId | Real | Imag
        | Complex | Parameter => false,
        Abs | Sign | Cos | Sin => complex,
        Divide | Remainder => {
            let integer = i.shape.as_array().is_some_and(|a| a.elem.is_integer());
            !(integer && c.operand(n, 1).is_some_and(|d| is_constant_scalar_like(c, d)))
        }
        _ => true,
    }
}

/// A scalar constant, or a broadcast of one.
fn is_constant_scalar_like(c: &Computation, n: NodeIndex) -> bool {
    let i = c.instr(n);
    match &i.op {
        Op::Constant(_) => is_scalar(&i.shape),
        Op::Broadcast { .. } => c.operand(n, 0).is_some_and(|o| {
            matches!(c.instr(o).op, Op::Constant(_)) && is_scalar(&c.instr(o).shape)
        }),
        _ => false,
    }
}

/// Duplicated freely into any number of consumers (XLA's `IsAlwaysDuplicable` plus the
/// operand-free producers): broadcast, iota, scalar constants and widening converts.
pub fn is_always_duplicable(c: &Computation, n: NodeIndex) -> bool {
    let i = c.instr(n);
    match &i.op {
        Op::Broadcast { .. } | Op::Iota { .. } => true,
        Op::Constant(_) => is_scalar(&i.shape),
        Op::Plain(Opcode::Convert) => {
            let from =
                c.operand(n, 0).and_then(|o| c.instr(o).shape.as_array().map(|a| a.elem.bits()));
            matches!((from, i.shape.as_array().map(|a| a.elem.bits())), (Some(f), Some(t)) if t > f)
        }
        _ => false,
    }
}

/// XLA's duplication test for a cheap producer: "effectively at most unary" (at most one
/// operand whose true rank reaches the output's, not counting broadcast, iota and scalar
/// constant operands) or it reads no more elements than it writes.
pub fn is_cheaply_duplicable(c: &Computation, n: NodeIndex) -> bool {
    let out = &c.instr(n).shape;
    let out_rank = true_rank(out);
    let ops = distinct_operands(c, n);
    let mut full = 0;
    let mut read = 0u64;
    for &o in &ops {
        let oi = c.instr(o);
        read = read.saturating_add(elements(&oi.shape));
        let trivial = matches!(oi.op, Op::Broadcast { .. } | Op::Iota { .. })
            || (matches!(oi.op, Op::Constant(_)) && is_scalar(&oi.shape));
        if !trivial && true_rank(&oi.shape) >= out_rank {
            full += 1;
        }
    }
    full <= 1 || read <= elements(out)
}

/// Operands of `n` in slot order, each once.
pub fn distinct_operands(c: &Computation, n: NodeIndex) -> Vec<NodeIndex> {
    let mut v = c.operands(n);
    if v.len() <= 16 {
        let mut seen = Vec::with_capacity(v.len());
        v.retain(|o| {
            if seen.contains(o) {
                false
            } else {
                seen.push(*o);
                true
            }
        });
    } else {
        let mut seen = std::collections::HashSet::with_capacity(v.len());
        v.retain(|o| seen.insert(*o));
    }
    v
}

/// Whether instruction `user` reads each element of its operand in `slot` many times
/// (XLA's `kReuse`), as opposed to at most once (`kUse`).
pub fn reuses_operand(c: &Computation, user: NodeIndex, slot: usize) -> bool {
    let i = c.instr(user);
    let op = i.op.opcode();
    if is_elementwise(c, user) {
        return false;
    }
    use Opcode::*;
    match op {
        Bitcast | Concatenate | Reshape | Reverse | Slice | Transpose | Copy | Tuple
        | GetTupleElement => false,
        Pad | DynamicSlice | Gather => slot != 0,
        Reduce => slot >= c.operand_count(user) / 2,
        DynamicUpdateSlice => slot >= 2,
        _ => true,
    }
}

/// Whether a concatenate is inefficient in a loop fusion (XLA:CPU): more than
/// [`MAX_CONCAT_OPERANDS`] operands, or along the most-minor dimension (row-major) of a
/// rank > 1 result of 128 or more elements.
pub fn is_inefficient_concat(c: &Computation, n: NodeIndex) -> bool {
    let i = c.instr(n);
    let Op::Concatenate { dimension } = i.op else { return false };
    if c.operand_count(n) > MAX_CONCAT_OPERANDS {
        return true;
    }
    let Some(a) = i.shape.as_array() else { return false };
    let minor = a
        .layout
        .as_ref()
        .and_then(|l| l.minor_to_major.first().map(|&d| i64::from(d)))
        .unwrap_or(a.rank() as i64 - 1);
    a.rank() > 1
        && dimension == minor
        && a.dims.get(minor as usize).and_then(|d| d.bound()).is_some_and(|s| s >= 128)
}

/// Opcodes that are a kernel boundary by nature: never a fusion consumer, and not worth
/// logging as one.
pub fn is_boundary_consumer(op: &Op) -> bool {
    use Opcode::*;
    let code = op.opcode();
    op.has_side_effects()
        || matches!(
            code,
            Tuple
                | GetTupleElement
                | Parameter
                | Constant
                | Iota
                | While
                | Conditional
                | Call
                | AsyncStart
                | AsyncUpdate
                | AsyncDone
                | AfterAll
                | AddDependency
                | OptBarrier
                | Domain
                | CopyStart
                | CopyDone
        )
        || code.category() == Category::Collective
}

/// Producers that are buffers by definition: not worth logging.
pub fn is_boundary_producer(op: &Op) -> bool {
    matches!(op.opcode(), Opcode::Parameter | Opcode::GetTupleElement | Opcode::Tuple)
}
