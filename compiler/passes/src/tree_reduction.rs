//! `tree-reduction`: a reduction whose result keeps few columns and no leading dimension
//! (a bias gradient `[16384, 32] → [32]`, a layer norm's scale gradient
//! `[8, 128, 256] → [256]`, a loss summed to a scalar) becomes two: the reduced rows in
//! `G` fixed groups, each summed on its own, then the `G` partial results in group order.
//!
//! ```text
//! reduce(x: [d0, d1, .., C...], dims={0, 1, ..})
//!   ──▶ reduce(reduce(x, dims={1, ..}): [d0, C...], dims={0})             groups: d0
//!   ──▶ reduce(reduce(reshape(x): [g, d0/g, ..], dims={1, ..}): [g, C...], dims={0})
//! ```
//!
//! The groups are whole leading dimensions where they fit, then a divisor of the next
//! dimension ([`grouping`]): the reshape, when there is one, splits one dimension in two,
//! which the runtime reads with a multiply-add per row (a reshape merging dimensions
//! would cost divisions).
//!
//! Why: the host runtime splits a reduction over the units of its result (the kept
//! dimensions before the columns, blocks of 256 columns), each element's rows combined in
//! order by the part that owns it. A result of a few hundred columns with nothing before
//! them is one or two units, so it ran on one thread whatever the pool. In the bench
//! transformer step these were the largest work left on one thread on a 16-thread pool:
//! 1.2 of the 9.6 ms a step that its one-thread kernel times divided by their parts on 16
//! threads add up to. The inner reduction keeps the groups as leading dimensions, so it
//! splits into up to `G` parts; the outer one is `G` rows, small.
//!
//! XLA's GPU pipeline rewrites long reductions into two the same way
//! (`TreeReductionRewriter`, for the parallelism of a GPU). Here `G` follows from the
//! shape alone, never from the number of threads, so the results are the same on any pool;
//! they differ from the one sequential order in the rounding of sums (a two-level sum's
//! error bound is the smaller one).
//! That is why this pass is the host's own (`host_pipeline`), not in the
//! bit-exact default pipeline: the interpreter and the TPU model run the reduction as
//! written.
//!
//! Rewritten: single-operand reductions over a leading block of dimensions (every
//! dimension before the kept ones) of f32, f64 or integer elements, with an `add`,
//! `maximum`, `minimum`, `and` or `or` reducer and the reducer's identity as initial
//! value (the initial value is combined once per group and once more at the end).
//!
//! **bf16 sums take XLA's CPU tree instead.** XLA's CPU compiler rewrites every
//! reduction with a reduced dimension over 32 (its `TreeReductionRewriter`, window 32):
//! each reduced dimension padded with the initial value (`SAME` padding) and cut into
//! windows of 32, each window summed from the initial value, then the window sums. With
//! bf16 rounding at every step that order decides the result: 1000 bf16 ones sum to 1000
//! in XLA and to 256 in one sequential fold (`tools/interp-cases/bf16_reduce.hlo`), and a
//! bias gradient summed in bf16 over 1024 rows lost most of its bits. For bf16 column
//! sums (the last dimension kept, any reduced dimensions) this pass writes XLA's tree
//! exactly ([`xla_tree`]), and so for bf16 row sums (the last dimension alone
//! reduced), so the JIT's bits are XLA's (`runtime/tests/bf16_sums_xla.rs` checks them
//! against the oracle), and the window sums split over threads like any column
//! reduction with leading dimensions. Sums over the last dimension and others together,
//! and f16 sums, stay as written: XLA's f16 sums follow neither order (see
//! [`narrow_windows`]).

use hlo_ir::literal::{Literal, LiteralData};
use hlo_ir::types::ElemClass;
use hlo_ir::{CompId, Computation, Diagnostic, ElemType, Instr, Module, NodeIndex};
use hlo_ir::{Op, Opcode, Shape};

use crate::expander::OpExpander;

/// Elements of work per group: the runtime's least work per part of a split kernel
/// (`hlo_runtime`'s `MIN_WORK_PER_PART`, 2^15 elements), so that a reduction has as many
/// groups as it could have parts. Fixed here, not read from the runtime's environment
/// override: the groups decide the rounding, which must not change with a setting.
pub const WORK_PER_GROUP: u64 = 1 << 15;

/// At most this many groups: the partial results stay a small fraction of the input
/// (64 rows of the kept columns), and 64 parts cover the pools of most servers.
pub const MAX_GROUPS: u64 = 64;

/// Rows each group sums at least.
pub const MIN_GROUP_ROWS: u64 = 8;

/// A reduction is left alone when its result already has this many units of the
/// runtime's split (blocks of 256 kept elements): it splits well as it is.
pub const ENOUGH_UNITS: u64 = 16;

/// Columns of one unit of the runtime's split of a column reduction.
const COLUMN_BLOCK: u64 = 256;

/// `tree-reduction` (see the module documentation).
#[derive(Default)]
pub struct TreeReduction;

/// How the reduced rows of a reduction are grouped: the groups are the indices of its
/// first `whole` reduced dimensions, times `split` parts of the next one (1: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grouping {
    pub whole: usize,
    pub split: u64,
}

/// The grouping of a reduction over the leading `reduced` dimensions of `dims`, or `None`
/// when it stays one reduction. Groups are whole leading dimensions as far as they go,
/// then a divisor of the next (so the input is at most reshaped by splitting one
/// dimension in two, which costs the runtime no division): as many as
/// `min(work / WORK_PER_GROUP, MAX_GROUPS)` allows with at least `MIN_GROUP_ROWS` rows
/// each, at least 2. The shape alone decides.
pub fn grouping(dims: &[u64], reduced: usize) -> Option<Grouping> {
    let product = |d: &[u64]| d.iter().try_fold(1u64, |a, &x| a.checked_mul(x));
    let (rows, cols) = (product(&dims[..reduced])?, product(&dims[reduced..])?);
    if dims.contains(&0) || cols.div_ceil(COLUMN_BLOCK) >= ENOUGH_UNITS {
        return None;
    }
    let target = (rows.saturating_mul(cols) / WORK_PER_GROUP).min(MAX_GROUPS);
    let fits = |g: u64| g <= target && rows / g >= MIN_GROUP_ROWS;
    let (mut groups, mut whole) = (1u64, 0usize);
    while whole < reduced && fits(groups.saturating_mul(dims[whole])) {
        groups *= dims[whole];
        whole += 1;
    }
    let split = match dims[..reduced].get(whole) {
        Some(&d) => {
            (1..=d.min(target)).rev().find(|&f| d % f == 0 && fits(groups * f)).unwrap_or(1)
        }
        None => 1,
    };
    (groups * split >= 2).then_some(Grouping { whole, split })
}

impl OpExpander for TreeReduction {
    fn name(&self) -> &'static str {
        "tree-reduction"
    }

    fn matches(&self, op: &Op) -> bool {
        matches!(op, Op::Reduce { .. })
    }

    fn expand(
        &mut self,
        m: &mut Module,
        id: CompId,
        n: NodeIndex,
    ) -> Result<Option<NodeIndex>, Diagnostic> {
        if let Some(windows) = narrow_windows(m, m.comp(id), n) {
            return Ok(xla_tree(m.comp_mut(id), n, &windows));
        }
        let Some(plan) = plan(m, m.comp(id), n) else { return Ok(None) };
        let c = m.comp_mut(id);
        let to_apply = plan.to_apply;
        let like = Like::of(c.instr(n), plan.elem);
        let stem = &like.stem;
        let add = |c: &mut Computation, name: &str, op, dims: &[u64], ops: &[NodeIndex]| {
            like.add(c, name, op, dims, ops)
        };
        // The input with the split dimension in two (when a divisor of it splits).
        let Grouping { whole, split } = plan.grouping;
        let mut dims = plan.dims.clone();
        let mut input = plan.input;
        let mut group_dims = whole;
        if split > 1 {
            let d = dims[whole];
            dims.splice(whole..=whole, [split, d / split]);
            input = add(c, "reshape", Op::Reshape { inferred_dimension: None }, &dims, &[input]);
            group_dims += 1;
        }
        let reduced = plan.reduced + usize::from(split > 1);
        let mut partial_dims = dims[..group_dims].to_vec();
        partial_dims.extend(&dims[reduced..]);
        let inner: Vec<i64> = (group_dims as i64..reduced as i64).collect();
        let partials = add(
            c,
            stem,
            Op::Reduce { dimensions: inner, to_apply },
            &partial_dims,
            &[input, plan.init],
        );
        let whole = add(
            c,
            stem,
            Op::Reduce { dimensions: (0..group_dims as i64).collect(), to_apply },
            &dims[reduced..],
            &[partials, plan.init],
        );
        Ok(Some(whole))
    }
}

/// Rows of XLA's CPU tree for narrow floats: `TreeReductionRewriter`'s window
/// (`reduce_window_size`, 32 in XLA's CPU pipeline).
pub const XLA_WINDOW: u64 = 32;

/// One dimension of a narrow-float reduction as XLA's CPU compiler splits it: `windows`
/// windows of `size` elements, the dimension padded with the initial value by `lo` before
/// and `hi` after (XLA's `SAME` padding). Kept dimensions are one window of their size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSplit {
    pub windows: u64,
    pub size: u64,
    pub lo: u64,
    pub hi: u64,
}

/// XLA's split of a dimension of `d` elements into windows of `min(d, XLA_WINDOW)`.
pub fn window_split(d: u64) -> WindowSplit {
    let size = d.clamp(1, XLA_WINDOW);
    let windows = d.div_ceil(size);
    let pad = windows * size - d;
    WindowSplit { windows, size, lo: pad / 2, hi: pad - pad / 2 }
}

/// The windows of a bf16 sum that XLA's CPU compiler runs as a tree, or `None`:
/// a single-operand `add` reduction that keeps its last dimension (a column sum) or
/// reduces that dimension alone (a row sum), where the runtime's kernels run both levels
/// in XLA's order, and that has a reduced dimension longer than [`XLA_WINDOW`] (XLA
/// leaves the others alone). One entry per
/// input dimension (`None` for kept ones). Not f16: XLA's f16 sums follow neither this
/// tree nor a sequential fold (checked with the oracle: 3 of 8 sums of `[3000, 8]` agree
/// with this tree, none with the others tried), so they stay as written.
fn narrow_windows(m: &Module, c: &Computation, n: NodeIndex) -> Option<Vec<Option<WindowSplit>>> {
    let i = c.instr(n);
    let Op::Reduce { dimensions, to_apply } = &i.op else { return None };
    let [input, _] = c.operands(n)[..] else { return None };
    let a = c.instr(input).shape.as_array()?;
    let dims = a.static_dims()?;
    if a.elem != ElemType::BF16
        || i.shape.as_array().map(|r| r.elem) != Some(a.elem)
        || dims.contains(&0)
        || hlo_interp::binary_reducer(m.comp(*to_apply)) != Some(Opcode::Add)
    {
        return None;
    }
    let reduced = |d: usize| dimensions.contains(&(d as i64));
    let last = dims.len().checked_sub(1)?;
    // Column sums (the last dimension kept) and row sums (the last dimension alone
    // reduced): the runtime's column and bf16 row kernels fold in row-major order.
    let rows = dimensions.len() == 1 && reduced(last);
    if (reduced(last) && !rows) || !(0..dims.len()).any(|d| reduced(d) && dims[d] > XLA_WINDOW) {
        return None;
    }
    Some((0..dims.len()).map(|d| reduced(d).then(|| window_split(dims[d]))).collect())
}

/// XLA's CPU tree of a narrow-float sum (its `TreeReductionRewriter`): every reduced
/// dimension padded with the initial value and cut into windows ([`window_split`]),
/// each window summed from the initial value in row-major order, then the windows'
/// sums from the initial value in row-major order. XLA writes the first level as a
/// `reduce-window`; here it is a pad, a reshape splitting each reduced dimension into
/// (window, offset) and a reduction over the offsets, which the runtime's column
/// kernel runs in the same order. Returns the final reduction.
fn xla_tree(
    c: &mut Computation,
    n: NodeIndex,
    windows: &[Option<WindowSplit>],
) -> Option<NodeIndex> {
    let at = c.instr(n);
    let Op::Reduce { to_apply, .. } = at.op else { return None };
    let like = Like::of(at, ElemType::BF16);
    let [mut x, init] = c.operands(n)[..] else { return None };
    let dims = c.instr(x).shape.as_array().and_then(|a| a.static_dims())?;
    let add = |c: &mut Computation, name: &str, op, dims: &[u64], ops: &[NodeIndex]| {
        like.add(c, name, op, dims, ops)
    };
    let stem = &like.stem;
    if windows.iter().flatten().any(|w| w.lo + w.hi > 0) {
        let config = windows
            .iter()
            .map(|w| {
                let (lo, hi) = w.map_or((0, 0), |w| (w.lo as i64, w.hi as i64));
                hlo_ir::op::PadDim { lo, hi, interior: 0 }
            })
            .collect();
        let padded: Vec<u64> =
            dims.iter().zip(windows).map(|(&d, w)| w.map_or(d, |w| w.windows * w.size)).collect();
        x = add(c, "pad", Op::Pad { config }, &padded, &[x, init]);
    }
    // [.., windows, size, ..] for every reduced dimension.
    let (mut split, mut offsets, mut partial) = (Vec::new(), Vec::new(), Vec::new());
    let mut window_dims = Vec::new();
    for (&d, w) in dims.iter().zip(windows) {
        match w {
            Some(w) => {
                window_dims.push(partial.len() as i64);
                partial.push(w.windows);
                split.push(w.windows);
                offsets.push(split.len() as i64);
                split.push(w.size);
            }
            None => {
                partial.push(d);
                split.push(d);
            }
        }
    }
    let x = add(c, "reshape", Op::Reshape { inferred_dimension: None }, &split, &[x]);
    let sums = add(c, stem, Op::Reduce { dimensions: offsets, to_apply }, &partial, &[x, init]);
    let kept: Vec<u64> =
        dims.iter().zip(windows).filter(|(_, w)| w.is_none()).map(|(&d, _)| d).collect();
    Some(add(c, stem, Op::Reduce { dimensions: window_dims, to_apply }, &kept, &[sums, init]))
}

/// What the instructions replacing a reduction share with it: its source span and
/// metadata, its name's stem, its element type.
struct Like {
    span: hlo_ir::Span,
    metadata: Option<Box<hlo_ir::instr::Metadata>>,
    stem: String,
    elem: ElemType,
}

impl Like {
    fn of(at: &Instr, elem: ElemType) -> Like {
        let stem = hlo_ir::computation::name_stem(&at.name).to_string();
        Like { span: at.span, metadata: at.metadata.clone(), stem, elem }
    }

    /// A new instruction `op` of `dims` elements on `ops`, stamped like the reduction.
    fn add(
        &self,
        c: &mut Computation,
        name: &str,
        op: Op,
        dims: &[u64],
        ops: &[NodeIndex],
    ) -> NodeIndex {
        let mut i = Instr::new(name, op, Shape::array(self.elem, dims));
        i.span = self.span;
        i.metadata = self.metadata.clone();
        c.add(i, ops)
    }
}

/// What [`TreeReduction`] rewrites one reduction into.
struct Plan {
    input: NodeIndex,
    init: NodeIndex,
    to_apply: CompId,
    elem: ElemType,
    dims: Vec<u64>,
    reduced: usize,
    grouping: Grouping,
}

/// The rewrite of reduction `n`, or `None` when it stays as it is.
fn plan(m: &Module, c: &Computation, n: NodeIndex) -> Option<Plan> {
    let i = c.instr(n);
    let Op::Reduce { dimensions, to_apply } = &i.op else { return None };
    let [input, init] = c.operands(n)[..] else { return None };
    let a = c.instr(input).shape.as_array()?;
    let dims = a.static_dims()?;
    let elem = a.elem;
    let exact_enough = match elem.class() {
        ElemClass::Float => matches!(elem, ElemType::F32 | ElemType::F64),
        ElemClass::Signed | ElemClass::Unsigned | ElemClass::Pred => true,
        ElemClass::Complex => false,
    };
    if !exact_enough || i.shape.as_array().map(|r| r.elem) != Some(elem) {
        return None;
    }
    // The reduced dimensions are exactly the leading ones.
    let mut reduced: Vec<usize> =
        dimensions.iter().map(|&d| usize::try_from(d).ok()).collect::<Option<_>>()?;
    reduced.sort_unstable();
    if reduced.is_empty() || reduced.iter().enumerate().any(|(k, &d)| k != d) {
        return None;
    }
    let grouping = grouping(&dims, reduced.len())?;
    let op = hlo_interp::binary_reducer(m.comp(*to_apply))?;
    is_identity(op, elem, c.instr(init)).then_some(Plan {
        input,
        init,
        to_apply: *to_apply,
        elem,
        reduced: reduced.len(),
        dims,
        grouping,
    })
}

/// Whether `init` is a constant scalar the reducer `op` leaves every value of `elem`
/// unchanged with (combined once per group, it must not count more than once).
fn is_identity(op: Opcode, elem: ElemType, init: &Instr) -> bool {
    let Op::Constant(Literal::Array(data)) = &init.op else { return false };
    let float = elem.class() == ElemClass::Float;
    match (op, data) {
        (Opcode::Add, LiteralData::Float(v)) => v[..] == [0.0],
        (Opcode::Add, LiteralData::Int(v)) => v[..] == [0],
        (Opcode::Maximum, LiteralData::Float(v)) if float => v[..] == [f64::NEG_INFINITY],
        (Opcode::Minimum, LiteralData::Float(v)) if float => v[..] == [f64::INFINITY],
        (Opcode::Maximum, LiteralData::Int(v)) => int_bounds(elem).is_some_and(|b| v[..] == [b.0]),
        (Opcode::Minimum, LiteralData::Int(v)) => int_bounds(elem).is_some_and(|b| v[..] == [b.1]),
        (Opcode::And, LiteralData::Pred(v)) => v[..] == [true],
        (Opcode::Or, LiteralData::Pred(v)) => v[..] == [false],
        (Opcode::Or, LiteralData::Int(v)) => v[..] == [0],
        (Opcode::And, LiteralData::Int(v)) => int_bounds(elem).is_some_and(|_| {
            // All ones: -1 for signed types, the largest value (stored bit-cast) unsigned.
            v[..] == [-1] || int_bounds(elem).is_some_and(|b| v[..] == [b.1])
        }),
        _ => false,
    }
}

/// The least and greatest value of an integer element type as literals store them
/// (`u64` above `i64::MAX` bit-cast).
fn int_bounds(elem: ElemType) -> Option<(i64, i64)> {
    let bits = elem.bits();
    if !(1..=64).contains(&bits) {
        return None;
    }
    match elem.class() {
        ElemClass::Signed => Some((i64::MIN >> (64 - bits), i64::MAX >> (64 - bits))),
        ElemClass::Unsigned if bits == 64 => Some((0, -1)),
        ElemClass::Unsigned => Some((0, (1i64 << bits) - 1)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_leading_dimensions_then_a_divisor_of_the_next() {
        let g = |whole, split| Some(Grouping { whole, split });
        // A bias gradient of the bench CNN: its batch of 16 (work 2^19, target 16).
        assert_eq!(grouping(&[16, 32, 32, 32], 3), g(1, 1));
        // The same rows as one dimension: split into 16 x 1024.
        assert_eq!(grouping(&[16384, 32], 1), g(0, 16));
        // A layer norm's scale gradient: its batch of 8 (work 2^18).
        assert_eq!(grouping(&[8, 128, 256], 2), g(1, 1));
        // Whole dimensions, then a divisor of the next: 2 x 4 groups.
        assert_eq!(grouping(&[2, 512, 256], 2), g(1, 4));
        // Capped at 64 groups.
        assert_eq!(grouping(&[1 << 20, 64], 1), g(0, 64));
        // A full reduction to a scalar: 32 groups of 2^15.
        assert_eq!(grouping(&[1 << 20], 1), g(0, 32));
        // Too little work for two groups, or too few rows per group.
        assert_eq!(grouping(&[1024, 32], 1), None);
        assert_eq!(grouping(&[8, 1 << 16], 1), None);
        // Enough column blocks already.
        assert_eq!(grouping(&[1024, 16 * 256], 1), None);
        // No elements.
        assert_eq!(grouping(&[0, 1 << 20, 32], 2), None);
        assert_eq!(grouping(&[1 << 20, 0], 1), None);
        // A prime number of rows has no grouping.
        assert_eq!(grouping(&[65521, 64], 1), None);
        // The largest divisor under the target: 3 * 5^4 rows of 256 (target 14) → 5.
        assert_eq!(grouping(&[1875, 256], 1), g(0, 5));
    }

    #[test]
    fn integer_bounds() {
        assert_eq!(int_bounds(ElemType::S8), Some((-128, 127)));
        assert_eq!(int_bounds(ElemType::U8), Some((0, 255)));
        assert_eq!(int_bounds(ElemType::S64), Some((i64::MIN, i64::MAX)));
        assert_eq!(int_bounds(ElemType::U64), Some((0, -1)));
    }
}
