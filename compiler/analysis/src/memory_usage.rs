//! Will it fit: the bytes a step holds in one device's memory (a TPU chip's HBM), from the
//! buffers of the optimized (per-device) module, against a capacity — added up as XLA's
//! buffer assignment adds them (arguments + outputs - aliased outputs + temporaries), on
//! the order XLA's memory scheduler would give each computation.
//!
//! **Order.** Each computation (callees first) is ordered by every algorithm of
//! [`crate::memory_scheduler`] (XLA's list, DFS and post-order schedulers, and the program
//! order our optimizer leaves), and the order with the fewest bytes live at once is kept,
//! as XLA's `DefaultMemoryScheduler` keeps the best of its three. This is an analysis:
//! nothing in the module is reordered. The report names the algorithm the entry took
//! ([`MemoryUsage::schedule`]) and the estimate in program order
//! ([`MemoryUsage::program_order_peak`]). A scheduled module (`is_scheduled=true`: XLA's
//! per-chip program) is walked in its own schedule only, as XLA's buffer assignment walks
//! it, and, being fused already, recomputes nothing (below).
//!
//! **Sizes** ([`memory_scheduler::array_bytes`]): an array takes its HBM bytes padded to
//! its layout's tiles, as XLA's `ShapeUtil::ArraySize` counts them (the first tile pads the
//! minor dimensions; `bf16[32,256,20]{2,1,0:T(8,128)(2,1)}` takes 128 lanes for its 20,
//! 6.4 times its elements). A module that carries tiled layouts (XLA's program) is counted
//! by them, an array in an on-chip memory space (`S(1)` VMEM, `S(2)` SMEM, ...) taking no
//! HBM; a module without them (ours) by the tiles XLA TPU gives such arrays
//! ([`memory_scheduler::default_tpu_tiles`]: 128 lanes by 8 rows, fewer rows for a short
//! second-minor dimension, the two minor dimensions chosen to pad least, as XLA lays out
//! every parameter of the rows' programs). On the rows' programs the padding is small
//! (XLA keeps FSDP shards with a small dimension major): 0-0.5% of the peak, 4% on XLA's
//! MaxText 16B program (`bf16[3145728,20]{1,0}` dot operands, 6.4 times their elements).
//!
//! **Buffers**, walking an order as XLA's heap simulator walks a sequence:
//!
//! - Every array leaf an instruction defines is a buffer, freed after its last use in the
//!   order. A tuple, a get-tuple-element, a bitcast, a reshape (a bitcast once XLA has
//!   assigned layouts, where it can), an optimization barrier and the single-device
//!   identity custom-calls hold their operands' buffers. Liveness is per buffer: a
//!   get-tuple-element reads its element's buffers only, so a loop body's state element
//!   dies at its last reader (and is updated in place there) while other elements of the
//!   state are still read.
//! - Fusions keep their intermediates on chip: a fusion defines its outputs only.
//! - In place, as XLA's dataflow analysis lets a user share its operand's buffer (and as
//!   copy insertion leaves it when the operand is not read afterwards): a
//!   dynamic-update-slice, a scatter, a fusion whose root is one of them on a fused
//!   parameter, and any `output_to_operand_aliasing` write into the operand's buffer when
//!   that operand dies there; an elementwise instruction, and a loop or input fusion whose
//!   fused parameter is only read elementwise, reuse a dying operand buffer of the same
//!   shape (XLA's `CanShareOperandBufferWithUser`). Otherwise the result gets a buffer of
//!   its own (the copy XLA would insert).
//! - Recomputed (not in a scheduled module), as XLA's fusion duplicates a cheap producer
//!   into each of its consumers: a value computed elementwise or by data movement (one
//!   instruction or a loop fusion of them) whose every use a consumer fusion can absorb,
//!   and whose operands' buffers are
//!   no larger than it (an eighth more at most), has no buffer of its own; its operands'
//!   buffers live until its last consumer instead. The attention probabilities
//!   `exp(scores - max)` in f32 are kept as the bf16 scores and the row maxima, as XLA's
//!   BERT program keeps them; a batch norm's normalized, rectified output as the
//!   convolution output it is computed from, as XLA's ResNet program keeps it.
//! - While loops update their state in place: the loop holds its operand's buffers; a state
//!   element the body changes gets a buffer of its own when its initial value is read
//!   after the loop (the copy XLA's copy insertion adds); an element passed through
//!   unchanged stays shared, and one that is a constant (or a broadcast or iota-built
//!   fusion of constants) costs nothing: XLA's `WhileLoopConstantSinking` sinks it into the
//!   body, where its readers recompute it. A callee's parameters are its caller's buffers.
//! - The entry's parameters are XLA's argument allocations: resident for the whole step,
//!   donated or not. An output aliased to a parameter (`input_output_alias`, as JAX's
//!   `donate_argnums` prints it) is written into that parameter's buffer and costs
//!   nothing more; other outputs live from their definition to the end. Constants are
//!   XLA's constant allocations, not counted.
//!
//! **Heap.** The live ranges of every temporary, each callee walked where it runs (XLA's
//! whole-module heap simulation flattens loop bodies into the caller's sequence), are
//! packed as XLA's `GlobalDecreasingSizeBestFitHeap` packs them ([`best_fit_heap`]);
//! [`MemoryUsage::temporaries`] is that heap's size, fragmentation included, and
//! [`MemoryUsage::live_peak`] the most bytes live at once. No kernel scratch memory is
//! counted.
//!
//! **Against XLA TPU** (`hloc validate`'s rows; XLA's program, `memory_analysis()` and,
//! with `XLA_FLAGS=--xla_dump_to=DIR` on `models.py --tpu`, its buffer assignment). This
//! walk on XLA's own program (`program.hlo`, in its schedule, counted by its layouts)
//! gives XLA's `peak_memory_in_bytes` within 2% on every row (BERT-large 26.61 GiB against
//! 26.49, ResNet-50 4.51 per core against 4.51, MaxText 16B 9.20 against 9.20, 128B 14.13
//! against 14.09, 32B 90.57 against 90.25, 512B 48.90 against 48.58, DeepSeek-V2-Lite
//! 87.02 against 88.90, the SD2 UNet 45.21 against 45.16), and XLA's temporary allocation
//! within 1-2% where dumped (128B: our heap 8.64 GiB, its `preallocated-temp` 8.61; 16B
//! 8.59 and 8.74). `memory_analysis().temp_size_in_bytes` is not that allocation: libtpu
//! adds to it what its compiler log calls the allocation's fragmentation (`Program hbm
//! requirement ...: HLO temp 8.61G (Unpadded (4.08G) Padded (4.08G), 52.6% fragmentation
//! (4.53G))` on 128B, whose `temp_size_in_bytes` is 13.14 GiB = 8.61 + 4.53; the same sum on
//! a one-layer test program), where that fragmentation is the allocation less a live peak
//! of XLA's own that misses buffers the heap holds (on the test program: the heap 480 MiB,
//! this walk's live peak 480, XLA's 288). So on the MaxText rows XLA's `argument + output -
//! alias + temp` is 18-48% above its own `peak_memory_in_bytes` (16B 13.64 GiB against
//! 9.20, 128B 18.78 against 14.09, 32B 106.95 against 90.25, 512B 67.50 against 48.58),
//! and above what its compiler log calls the program's total HBM use (128B: 14.62 GiB,
//! 0.26 of it reserved); on BERT and ResNet the two agree within 1.5%. The remaining differences between our pipeline's programs
//! and XLA's are in the programs, not in this walk: our `while-loop-invariant-code-motion`
//! hoists size-inflating invariants into the loop state (counted as sunk constants
//! above); our layer loops read the f32 weights where XLA converts them to bf16 copies
//! before each loop; our backward attention keeps products of another type than XLA's dot
//! fusions; and our partitioning of the Pallas flash-attention programs gathers more in
//! the layer loop (MaxText 32B: a 20 GiB all-gather in the body, XLA's largest 1.25 GiB).

use std::collections::{HashMap, HashSet};

use hlo_ir::opcode::Category;
use hlo_ir::tensor::format_bytes;
use hlo_ir::{CompId, Computation, Instr, Module, Op, Opcode, Shape};

use crate::memory_scheduler::{
    self, Algorithm, Dag, LogicalBuffers, Sizing, element_leaves, leaf_bytes_as,
};

/// The memory one device needs for a step.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryUsage {
    /// The entry's parameters, resident for the whole step (XLA's arguments).
    pub parameters: u64,
    /// What the step needs, as XLA's buffer assignment adds it up: parameters + outputs +
    /// temporaries (XLA TPU's `memory_analysis()` reports more: see the module doc).
    pub peak: u64,
    /// The instruction during which the most bytes are live.
    pub peak_at: String,
    /// The device's memory capacity (a TPU chip's HBM).
    pub capacity: u64,
    /// Outputs not aliased to a parameter.
    pub outputs: u64,
    /// The heap of every other buffer: its live ranges packed as XLA's buffer assignment
    /// packs them (see [`best_fit_heap`]), fragmentation included.
    pub temporaries: u64,
    /// The most bytes live at once (parameters included): the peak without fragmentation.
    pub live_peak: u64,
    /// The algorithm that ordered the entry computation ([`Algorithm::name`]).
    pub schedule: &'static str,
    /// The peak (as [`MemoryUsage::peak`]) with every computation in program order.
    pub program_order_peak: u64,
    /// The largest buffers live at the peak: (instruction, bytes), largest first, the
    /// buffers of a loop body (or other callee) running at the peak named
    /// `body/instruction`.
    pub largest: Vec<(String, u64)>,
    /// How an array's bytes were counted (the layouts' tiles, or XLA TPU's default tiles).
    pub sizing: Sizing,
}

impl MemoryUsage {
    /// Whether the step fits.
    pub fn fits(&self) -> bool {
        self.peak <= self.capacity
    }

    /// "fits, 3.2 GiB free" or "exceeds by 1.5 GiB".
    pub fn verdict(&self) -> String {
        if self.fits() {
            format!("fits, {} free", format_bytes(self.capacity - self.peak))
        } else {
            format!("exceeds by {}", format_bytes(self.peak - self.capacity))
        }
    }
}

/// How many of the largest live buffers [`MemoryUsage::largest`] lists.
const LARGEST: usize = 12;

/// The peak of one computation on one order.
#[derive(Clone)]
struct Peak {
    /// Bytes live at once at the peak (for a callee: its own buffers only).
    bytes: u64,
    /// The position (in the order) where it is reached.
    step: usize,
}

/// One computation's chosen order and its peak.
#[derive(Clone)]
struct Chosen {
    alg: Algorithm,
    order: Vec<usize>,
    peak: Peak,
}

/// What the walk of one computation needs to know about it, computed once.
struct Prepared {
    dag: Dag,
    /// Per position: for each output leaf, the (operand slot, operand leaf) it may update in
    /// place.
    in_place: Vec<Vec<Option<(usize, usize)>>>,
    /// Per position: the operand slots whose buffer an output leaf of the same shape may
    /// reuse when the operand dies there (elementwise sharing).
    share: Vec<Vec<usize>>,
    /// Per position: for a while loop, which state leaves the body changes.
    changed: Vec<Vec<bool>>,
    /// Per position: the callees that run during it.
    callees: Vec<Vec<CompId>>,
    /// Per position and output leaf: how many operand slots of users read it (a
    /// get-tuple-element reads only its element's leaves, as XLA's liveness is per logical
    /// buffer).
    reads: Vec<Vec<u32>>,
    /// Per position: how many operand slots of users read it.
    slots: Vec<u32>,
    /// Per position: for a get-tuple-element, the leaves of its operand it reads.
    element: Vec<Option<std::ops::Range<usize>>>,
    /// Per position: whether it holds its operands' buffers
    /// ([`memory_scheduler::aliases_operand`]).
    alias: Vec<bool>,
    /// Per position: leaf shapes, and leaf bytes.
    leaf_shapes: Vec<Vec<Shape>>,
    bytes: Vec<Vec<u64>>,
    /// (position, leaf) of the entry's outputs aliased to a parameter: no bytes of their own.
    free_outputs: HashSet<(usize, usize)>,
    /// The buffers the scheduling heuristics see, and which values XLA's fusion recomputes
    /// in their consumers (`bufs.remat`).
    bufs: LogicalBuffers,
}

fn array_leaves(s: &Shape) -> Vec<Shape> {
    let mut v = Vec::new();
    s.for_each_array(&mut |a| v.push(Shape::Array(a.clone()).with_default_layouts()));
    v
}

/// For each output leaf of `ins`, the (operand slot, operand leaf) XLA may update in place.
fn in_place_sources(m: &Module, ins: &Instr) -> Vec<Option<(usize, usize)>> {
    let leaves = ins.shape.leaf_count();
    let mut v = vec![None; leaves];
    let from_aliasing = |v: &mut Vec<Option<(usize, usize)>>, aliasing: &[hlo_ir::op::Alias]| {
        for a in aliasing {
            let leaf = leaf_of(&ins.shape, &a.output_index);
            if let (Some(l), Ok(op)) = (leaf, usize::try_from(a.operand)) {
                // Operand leaves beyond the first tuple level are not followed.
                if l < v.len() && a.operand_index.len() <= 1 {
                    let ol = a.operand_index.first().map_or(0, |&x| x as usize);
                    v[l] = Some((op, ol));
                }
            }
        }
    };
    match &ins.op {
        Op::Plain(Opcode::DynamicUpdateSlice) => v[0] = Some((0, 0)),
        Op::Scatter(_) => {
            for (j, s) in v.iter_mut().enumerate() {
                *s = Some((j, 0));
            }
        }
        Op::CustomCall(cc) => from_aliasing(&mut v, &cc.output_to_operand_aliasing),
        Op::Fusion { calls, output_to_operand_aliasing, .. } => {
            if !output_to_operand_aliasing.is_empty() {
                from_aliasing(&mut v, output_to_operand_aliasing);
            } else if let Some(fc) = m.get_comp(*calls) {
                let Some(root) = fc.root() else { return v };
                let roots: Vec<_> = match fc.instr(root).op {
                    Op::Plain(Opcode::Tuple) => fc.operands(root),
                    _ => vec![root],
                };
                if roots.len() != leaves {
                    return v;
                }
                for (j, r) in roots.into_iter().enumerate() {
                    let ri = fc.instr(r);
                    let target = match ri.op {
                        Op::Plain(Opcode::DynamicUpdateSlice) | Op::Scatter(_) => fc.operand(r, 0),
                        _ => None,
                    };
                    let mut t = target;
                    while let Some(n) = t {
                        match fc.instr(n).op {
                            Op::Plain(Opcode::Bitcast) | Op::Reshape { .. } => t = fc.operand(n, 0),
                            _ => break,
                        }
                    }
                    if let Some(Op::Parameter { number, .. }) = t.map(|n| &fc.instr(n).op) {
                        v[j] = Some((*number as usize, 0));
                    }
                }
            }
        }
        _ => {}
    }
    v
}

/// The leaf index of `index` (a tuple index path) in `s`.
fn leaf_of(s: &Shape, index: &[i64]) -> Option<usize> {
    let mut s = s;
    let mut at = 0;
    for &k in index {
        let k = usize::try_from(k).ok()?;
        at += element_leaves(s, k)?.start;
        s = s.tuple_elements()?.get(k)?;
    }
    Some(at)
}

/// Whether fused parameter `p` is only read elementwise on its way to the root (XLA's
/// `AreTransitiveUsesElementwiseOrTuple`).
fn read_elementwise(fc: &Computation, p: hlo_ir::NodeIndex) -> bool {
    let mut work = vec![p];
    let mut seen = HashSet::new();
    while let Some(n) = work.pop() {
        if !seen.insert(n) {
            continue;
        }
        for u in fc.users(n) {
            let op = &fc.instr(u).op;
            let ok = matches!(op, Op::Plain(Opcode::Tuple))
                || matches!(
                    op.opcode().category(),
                    Category::Unary | Category::Binary | Category::Ternary
                );
            if !ok {
                return false;
            }
            work.push(u);
        }
    }
    true
}

/// The operand slots whose buffer `ins` may reuse for an output leaf of the same shape.
fn shareable_slots(m: &Module, ins: &Instr, operands: usize) -> Vec<usize> {
    use hlo_ir::op::FusionKind;
    match &ins.op {
        Op::Fusion { kind: FusionKind::Loop | FusionKind::Input, calls, .. } => {
            let Some(fc) = m.get_comp(*calls) else { return vec![] };
            (0..operands)
                .filter(|&k| fc.param(k as u32).is_some_and(|p| read_elementwise(fc, p)))
                .collect()
        }
        Op::Fusion { .. } => vec![],
        op if matches!(
            op.opcode().category(),
            Category::Unary | Category::Binary | Category::Ternary
        ) =>
        {
            (0..operands).collect()
        }
        _ => vec![],
    }
}

/// Whether XLA's fusion can duplicate `ins` into its consumers: an array computed
/// elementwise, by broadcasts, reshapes, transposes, slices and the like (one instruction
/// or a loop fusion of them), nothing that reduces, contracts, gathers, updates in place or
/// has a side effect.
fn cheap(m: &Module, ins: &Instr) -> bool {
    fn op_ok(op: &Op) -> bool {
        match op {
            Op::Parameter { .. } | Op::Constant(_) => true,
            Op::Plain(Opcode::DynamicUpdateSlice | Opcode::Tuple) => false,
            Op::Scatter(_) | Op::Gather(_) | Op::Rng { .. } | Op::RngBitGenerator { .. } => false,
            op => matches!(
                op.opcode().category(),
                Category::Unary | Category::Binary | Category::Ternary | Category::Data
            ),
        }
    }
    if !matches!(ins.shape, Shape::Array(_)) {
        return false;
    }
    match &ins.op {
        Op::Parameter { .. } | Op::Constant(_) => false,
        Op::Fusion { kind: hlo_ir::op::FusionKind::Loop, calls, .. } => {
            m.get_comp(*calls).is_some_and(|fc| fc.instrs().all(|x| op_ok(&x.op)))
        }
        op => op_ok(op),
    }
}

/// Whether every use of the value at `i` is one a consumer fusion can absorb: an operand
/// of a fusion, an elementwise or data-movement instruction, a reduction or a contraction
/// (XLA's TPU fusions take producers into convolutions), except a buffer it updates in
/// place; not the root, a loop, a collective or a call. With `constant`, also an element
/// of a while loop's initial state that the body passes through unchanged: XLA's
/// `WhileLoopConstantSinking` sinks a constant (or a broadcast of one) into the body.
fn fusible_uses(c: &Computation, p: &Prepared, i: usize, constant: bool) -> bool {
    if i == p.dag.root || p.dag.users[i].is_empty() {
        return false;
    }
    p.dag.users[i].iter().all(|&u| {
        let op = &c.instr(p.dag.nodes[u]).op;
        let in_place_slot = p.in_place[u]
            .iter()
            .flatten()
            .any(|&(slot, _)| p.dag.operands[u].get(slot) == Some(&i));
        let kind_ok = match op {
            Op::Fusion { .. } => true,
            Op::Plain(Opcode::Tuple) => constant && sunk_in_loops(c, p, u, i),
            Op::GetTupleElement { .. } => false,
            op => matches!(
                op.opcode().category(),
                Category::Unary
                    | Category::Binary
                    | Category::Ternary
                    | Category::Data
                    | Category::Reduction
                    | Category::Contraction
            ),
        };
        kind_ok && !in_place_slot
    })
}

/// Whether every element of tuple `t` that is the value at `v` is an unchanged state leaf of
/// every while loop the tuple starts (and the tuple is used by nothing else).
fn sunk_in_loops(c: &Computation, p: &Prepared, t: usize, v: usize) -> bool {
    let mut leaf = 0;
    let mut leaves = Vec::new();
    for &o in &p.dag.operands[t] {
        let k = c.instr(p.dag.nodes[o]).shape.leaf_count();
        if o == v {
            leaves.extend(leaf..leaf + k);
        }
        leaf += k;
    }
    !p.dag.users[t].is_empty()
        && p.dag.users[t].iter().all(|&w| {
            matches!(c.instr(p.dag.nodes[w]).op, Op::While { .. })
                && leaves.iter().all(|&l| p.changed[w].get(l) == Some(&false))
        })
}

/// Whether `ins` computes from constants alone (a constant, an iota, a broadcast or an
/// elementwise function of such values, or a fusion of them with no other operand), given
/// which of its operands do.
fn constant_like(m: &Module, ins: &Instr, operands_constant: bool) -> bool {
    operands_constant
        && match &ins.op {
            Op::Constant(_) | Op::Iota { .. } | Op::Broadcast { .. } => true,
            Op::Fusion { .. } => cheap(m, ins),
            op => matches!(
                op.opcode().category(),
                Category::Unary | Category::Binary | Category::Ternary
            ),
        }
}

fn prepare(m: &Module, id: CompId, entry: bool, sizing: Sizing) -> Prepared {
    let c = m.comp(id);
    let dag = Dag::new(c);
    let n = dag.len();
    let mut p = Prepared {
        in_place: Vec::with_capacity(n),
        share: Vec::with_capacity(n),
        changed: vec![Vec::new(); n],
        callees: vec![Vec::new(); n],
        reads: vec![Vec::new(); n],
        slots: vec![0; n],
        element: vec![None; n],
        alias: vec![false; n],
        leaf_shapes: Vec::with_capacity(n),
        bytes: Vec::with_capacity(n),
        free_outputs: HashSet::new(),
        bufs: LogicalBuffers::default(),
        dag,
    };
    for i in 0..n {
        let ins = c.instr(p.dag.nodes[i]);
        p.reads[i] = vec![0; ins.shape.leaf_count()];
        if let (Op::GetTupleElement { index }, Some(&o)) = (&ins.op, p.dag.operands[i].first()) {
            p.element[i] = element_leaves(&c.instr(p.dag.nodes[o]).shape, *index as usize);
        }
        for &o in &p.dag.operands[i] {
            p.slots[o] += 1;
            let leaves = p.reads[o].len();
            let range = p.element[i].clone().filter(|r| r.end <= leaves).unwrap_or(0..leaves);
            for r in &mut p.reads[o][range] {
                *r += 1;
            }
        }
        p.alias[i] = memory_scheduler::aliases_operand(&ins.op);
        p.leaf_shapes.push(array_leaves(&ins.shape));
        p.bytes.push(leaf_bytes_as(&ins.shape, sizing));
        p.in_place.push(in_place_sources(m, ins));
        p.share.push(shareable_slots(m, ins, p.dag.operands[i].len()));
        match &ins.op {
            Op::While { condition, body } => {
                p.callees[i] = vec![*body, *condition];
                p.changed[i] = changed_state(m.comp(*body), ins.shape.leaf_count());
            }
            Op::Conditional(_) | Op::Call { .. } | Op::Async { .. } => {
                p.callees[i] = ins.op.called_computations().into_iter().map(|(_, c)| c).collect();
            }
            _ => {}
        }
    }
    // Values XLA's fusion recomputes in every consumer (the module doc's "Recomputed").
    let mut constant = vec![false; n];
    for i in 0..n {
        let ops_constant = p.dag.operands[i].iter().all(|&o| constant[o]);
        constant[i] = constant_like(m, c.instr(p.dag.nodes[i]), ops_constant);
    }
    // A scheduled module (XLA's per-chip program) is fused already: every value it
    // computes is a buffer.
    let scheduled = m.header.is_scheduled == Some(true);
    let fusible: Vec<bool> =
        (0..n).map(|i| !scheduled && fusible_uses(c, &p, i, constant[i])).collect();
    p.bufs = LogicalBuffers::new(c, &p.dag, sizing, &mut |i, b| {
        fusible[i] && cheap(m, c.instr(p.dag.nodes[i])) && {
            let mut under: Vec<usize> =
                p.dag.operands[i].iter().flat_map(|&o| b.held[o].iter().copied()).collect();
            under.sort_unstable();
            under.dedup();
            let kept: u64 = under.iter().map(|&k| b.counted(k)).sum();
            let own: u64 = p.bytes[i].iter().sum();
            kept <= own + own / 8
        }
    });
    if entry {
        let root = p.dag.root;
        let root_shape = &c.instr(p.dag.nodes[root]).shape;
        for a in m.header.input_output_alias.iter().flatten() {
            let Some(leaf) = leaf_of(root_shape, &a.output_index) else { continue };
            let count = match &a.output_index[..] {
                [] => root_shape.leaf_count(),
                idx => sub_shape(root_shape, idx).map_or(1, Shape::leaf_count),
            };
            for l in leaf..leaf + count {
                if let Some(src) = trace_leaf(c, &p.dag, root, l) {
                    p.free_outputs.insert(src);
                }
            }
        }
    }
    p
}

fn sub_shape<'s>(s: &'s Shape, index: &[i64]) -> Option<&'s Shape> {
    let mut s = s;
    for &k in index {
        s = s.tuple_elements()?.get(usize::try_from(k).ok()?)?;
    }
    Some(s)
}

/// The (position, leaf) that defines leaf `leaf` of the value at position `at`, through
/// the instructions that hold their operands' buffers.
fn trace_leaf(
    c: &Computation,
    dag: &Dag,
    mut at: usize,
    mut leaf: usize,
) -> Option<(usize, usize)> {
    for _ in 0..dag.len() + 1 {
        let ins = c.instr(dag.nodes[at]);
        match &ins.op {
            Op::Plain(Opcode::Tuple) => {
                let mut l = leaf;
                let mut next = None;
                for &o in &dag.operands[at] {
                    let k = c.instr(dag.nodes[o]).shape.leaf_count();
                    if l < k {
                        next = Some(o);
                        break;
                    }
                    l -= k;
                }
                at = next?;
                leaf = l;
            }
            Op::GetTupleElement { index } => {
                let src = *dag.operands[at].first()?;
                let r = element_leaves(&c.instr(dag.nodes[src]).shape, *index as usize)?;
                at = src;
                leaf += r.start;
            }
            Op::While { .. } => return Some((at, leaf)),
            op if memory_scheduler::aliases_operand(op) => at = *dag.operands[at].first()?,
            _ => return Some((at, leaf)),
        }
    }
    None
}

/// Which leaves of a loop's state its body changes (the root's element is not the
/// parameter's own element).
fn changed_state(body: &Computation, leaves: usize) -> Vec<bool> {
    let dag = Dag::new(body);
    let mut v = vec![true; leaves];
    if dag.is_empty() {
        return v;
    }
    for (l, c) in v.iter_mut().enumerate() {
        if let Some((at, leaf)) = trace_leaf(body, &dag, dag.root, l)
            && matches!(body.instr(dag.nodes[at]).op, Op::Parameter { .. })
            && leaf == l
        {
            *c = false;
        }
    }
    v
}

struct Walk<'m> {
    m: &'m Module,
    sizing: Sizing,
    /// Prepared computations.
    prepared: HashMap<CompId, Prepared>,
    /// Each computation's chosen order and peak (its own buffers), per kind of walk
    /// (`true`: program order everywhere).
    chosen: HashMap<(CompId, bool), Chosen>,
    /// Recursion guard (recursive calls are not valid HLO; they cost nothing).
    busy: HashSet<CompId>,
}

/// What one walk of a computation on an order found.
struct Sim {
    peak: Peak,
    /// At the step asked for: the live buffers (defining position, bytes), and the callee
    /// running with its bytes.
    live: Vec<(usize, u64)>,
    during: Option<(CompId, u64)>,
}

impl Walk<'_> {
    fn prepare(&mut self, id: CompId) {
        let (m, entry, sizing) = (self.m, id == self.m.entry, self.sizing);
        self.prepared.entry(id).or_insert_with(|| prepare(m, id, entry, sizing));
    }

    /// The peaks of the callees of `id`'s instructions.
    fn callee_peaks(&mut self, id: CompId, program: bool) -> HashMap<CompId, u64> {
        self.prepare(id);
        let callees: Vec<CompId> = self.prepared[&id].callees.iter().flatten().copied().collect();
        callees.into_iter().map(|c| (c, self.chosen(c, program).peak.bytes)).collect()
    }

    /// `id`'s order with the lowest peak of its own buffers (callees' peaks added while
    /// they run), or with `program` its program order (callees' too).
    fn chosen(&mut self, id: CompId, program: bool) -> Chosen {
        if let Some(c) = self.chosen.get(&(id, program)) {
            return c.clone();
        }
        if !self.busy.insert(id) {
            return Chosen {
                alg: Algorithm::Program,
                order: vec![],
                peak: Peak { bytes: 0, step: 0 },
            };
        }
        // Callees first: their peaks are known when this computation is walked.
        let during = self.callee_peaks(id, program);
        let c = self.m.comp(id);
        let p = &self.prepared[&id];
        let entry = id == self.m.entry;
        // A scheduled module (XLA's per-chip program) is walked in its schedule, as XLA's
        // buffer assignment walks it.
        let scheduled = self.m.header.is_scheduled == Some(true);
        let algs: &[Algorithm] =
            if program || scheduled { &[Algorithm::Program] } else { &Algorithm::ALL };
        let bufs = &p.bufs;
        let mut best: Option<Chosen> = None;
        for &alg in algs {
            let mut order = memory_scheduler::order(c, &p.dag, bufs, alg);
            if entry {
                // The entry's parameters are resident from the start.
                let is_param =
                    |i: &&usize| matches!(c.instr(p.dag.nodes[**i]).op, Op::Parameter { .. });
                let (params, rest): (Vec<usize>, Vec<usize>) = order.iter().partition(is_param);
                order = params.into_iter().chain(rest).collect();
            }
            debug_assert!(memory_scheduler::check_order(c, &p.dag, &order).is_ok());
            let peak = simulate(c, p, &order, entry, &during, None, None).peak;
            if best.as_ref().is_none_or(|b| peak.bytes < b.peak.bytes) {
                best = Some(Chosen { alg, order, peak });
            }
        }
        let best = best.expect("at least one algorithm");
        self.busy.remove(&id);
        self.chosen.insert((id, program), best.clone());
        best
    }

    /// What is live at the peak of `id` on its chosen order.
    fn at_peak(&mut self, id: CompId) -> (Chosen, Sim) {
        let ch = self.chosen(id, false);
        let during = self.callee_peaks(id, false);
        let entry = id == self.m.entry;
        let sim = simulate(
            self.m.comp(id),
            &self.prepared[&id],
            &ch.order,
            entry,
            &during,
            Some(ch.peak.step),
            None,
        );
        (ch, sim)
    }
}

/// The buffers of one walk.
#[derive(Default)]
struct Heap {
    bytes: Vec<u64>,
    /// Pending reads (operand slots of instructions not yet walked).
    refs: Vec<i64>,
    alive: Vec<bool>,
    /// Never freed: the entry's parameters, what the computation returns.
    pinned: Vec<bool>,
    /// The defining position.
    def: Vec<usize>,
    /// When it was allocated (the recorder's clock).
    start: Vec<u64>,
    live: u64,
    clock: u64,
}

impl Heap {
    fn fresh(&mut self, size: u64, at: usize, pin: bool) -> usize {
        self.bytes.push(size);
        self.refs.push(0);
        self.alive.push(true);
        self.pinned.push(pin);
        self.def.push(at);
        self.start.push(self.clock);
        self.live += size;
        self.bytes.len() - 1
    }
}

/// Takes buffer `b` out of `dying` (it lives on in a new value): whether it was there.
fn take(b: usize, dying: &mut Vec<usize>) -> bool {
    match dying.iter().position(|&d| d == b) {
        Some(k) => {
            dying.swap_remove(k);
            true
        }
        None => false,
    }
}

/// Walks computation `c` on `order`: its peak, and with `detail` (a step of the order)
/// what is live at that step.
fn simulate(
    c: &Computation,
    p: &Prepared,
    order: &[usize],
    entry: bool,
    during: &HashMap<CompId, u64>,
    detail: Option<usize>,
    mut rec: Option<&mut Recorder>,
) -> Sim {
    let n = p.dag.len();
    let mut held: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut h = Heap::default();
    let mut peak = Peak { bytes: 0, step: 0 };
    let mut sim = Sim { peak: peak.clone(), live: vec![], during: None };
    let mut dying: Vec<usize> = Vec::new();
    if let Some(r) = rec.as_deref_mut() {
        h.clock = r.clock;
    }
    for (step, &i) in order.iter().enumerate() {
        h.clock += 1;
        let ins = c.instr(p.dag.nodes[i]);
        let ops = &p.dag.operands[i];
        // The operands' buffers this instruction reads last.
        dying.clear();
        for &o in ops {
            let read = match &p.element[i] {
                Some(r) if held[o].len() == p.reads[o].len() && r.end <= held[o].len() => {
                    &held[o][r.clone()]
                }
                _ => &held[o][..],
            };
            for &b in read {
                h.refs[b] -= 1;
                if h.refs[b] == 0 && h.alive[b] && !h.pinned[b] && !dying.contains(&b) {
                    dying.push(b);
                }
            }
        }
        let leaves = p.bytes[i].len();
        let mut out: Vec<usize> = Vec::with_capacity(leaves);
        match &ins.op {
            // The entry's parameters are resident; a callee's are its caller's buffers.
            Op::Parameter { .. } => {
                for l in 0..leaves {
                    out.push(h.fresh(if entry { p.bytes[i][l] } else { 0 }, i, entry));
                }
            }
            Op::Constant(_) => {
                for _ in 0..leaves {
                    out.push(h.fresh(0, i, false));
                }
            }
            Op::While { .. } => {
                let state = ops.first().map(|&o| held[o].clone()).unwrap_or_default();
                for l in 0..leaves {
                    let changed = p.changed[i].get(l).copied().unwrap_or(true);
                    match state.get(l) {
                        Some(&b) if !changed => out.push(b),
                        Some(&b) if h.alive[b] && !h.pinned[b] && take(b, &mut dying) => {
                            out.push(b)
                        }
                        // The initial value is read after the loop: the loop's own copy
                        // (in a donated parameter's buffer when it is an aliased output).
                        _ => {
                            let size =
                                if p.free_outputs.contains(&(i, l)) { 0 } else { p.bytes[i][l] };
                            out.push(h.fresh(size, i, false))
                        }
                    }
                }
            }
            // Recomputed in each consumer: it holds its operands' buffers.
            _ if p.bufs.remat[i] => {
                let mut src: Vec<usize> =
                    ops.iter().flat_map(|&o| held[o].iter().copied()).collect();
                src.sort_unstable();
                src.dedup();
                for &b in &src {
                    take(b, &mut dying);
                }
                out = src;
                if out.is_empty() {
                    out.push(h.fresh(0, i, false));
                }
            }
            _ if p.alias[i] => {
                let src: Vec<usize> = match &ins.op {
                    Op::Plain(Opcode::Tuple) => {
                        ops.iter().flat_map(|&o| held[o].iter().copied()).collect()
                    }
                    Op::GetTupleElement { index } => ops
                        .first()
                        .and_then(|&s| {
                            element_leaves(&c.instr(p.dag.nodes[s]).shape, *index as usize)
                                .filter(|r| r.end <= held[s].len())
                                .map(|r| held[s][r].to_vec())
                        })
                        .unwrap_or_default(),
                    _ => ops.first().map(|&o| held[o].clone()).unwrap_or_default(),
                };
                if src.len() == leaves {
                    for &b in &src {
                        take(b, &mut dying);
                    }
                    out = src;
                } else {
                    for l in 0..leaves {
                        out.push(h.fresh(p.bytes[i][l], i, false));
                    }
                }
            }
            _ => {
                for l in 0..leaves {
                    let size = if p.free_outputs.contains(&(i, l)) { 0 } else { p.bytes[i][l] };
                    // In place on a dying operand, or sharing a dying operand's buffer.
                    let mut got = None;
                    if let Some(Some((slot, ol))) = p.in_place[i].get(l)
                        && let Some(&b) = ops.get(*slot).and_then(|&o| held[o].get(*ol))
                        && take(b, &mut dying)
                    {
                        got = Some(b);
                    }
                    if got.is_none() {
                        for &slot in &p.share[i] {
                            let Some(&o) = ops.get(slot) else { continue };
                            if held[o].len() == 1
                                && !p.bufs.remat[o]
                                && p.leaf_shapes[o].first() == p.leaf_shapes[i].get(l)
                                && take(held[o][0], &mut dying)
                            {
                                got = Some(held[o][0]);
                                break;
                            }
                        }
                    }
                    out.push(match got {
                        Some(b) => {
                            // Written in place: an aliased output costs nothing more.
                            if size == 0 && h.alive[b] {
                                h.live -= h.bytes[b];
                                if let Some(r) = rec.as_deref_mut() {
                                    r.span(h.start[b], h.clock, h.bytes[b]);
                                }
                                h.bytes[b] = 0;
                            }
                            b
                        }
                        None => h.fresh(size, i, false),
                    });
                }
            }
        }
        // The callees run now, on the recorder's clock.
        if let Some(r) = rec.as_deref_mut() {
            r.clock = h.clock;
            for &cid in &p.callees[i] {
                let (Some(cp), Some(ch)) = (r.prepared.get(&cid), r.chosen.get(&(cid, r.program)))
                else {
                    continue;
                };
                let order = ch.order.clone();
                simulate(r.m.comp(cid), cp, &order, false, &HashMap::new(), None, Some(&mut *r));
            }
            h.clock = r.clock + 1;
        }
        let callee = p.callees[i]
            .iter()
            .map(|c| (*c, during.get(c).copied().unwrap_or(0)))
            .max_by_key(|&(_, b)| b);
        let now = h.live + callee.map_or(0, |(_, b)| b);
        if now > peak.bytes {
            peak = Peak { bytes: now, step };
        }
        if detail == Some(step) {
            for b in 0..h.bytes.len() {
                if h.alive[b] && h.bytes[b] > 0 {
                    sim.live.push((h.def[b], h.bytes[b]));
                }
            }
            sim.during = callee;
        }
        let per_leaf = out.len() == p.reads[i].len();
        for (l, &b) in out.iter().enumerate() {
            h.refs[b] += if per_leaf { p.reads[i][l] } else { p.slots[i] } as i64;
            if i == p.dag.root {
                h.pinned[b] = true;
            }
        }
        held[i] = out;
        for &b in dying.iter().chain(&held[i]) {
            if h.alive[b] && h.refs[b] == 0 && !h.pinned[b] {
                h.alive[b] = false;
                h.live -= h.bytes[b];
                if let Some(r) = rec.as_deref_mut() {
                    r.span(h.start[b], h.clock, h.bytes[b]);
                }
            }
        }
    }
    // What is left: the entry's parameters and outputs, a callee's result.
    if let Some(r) = rec {
        h.clock += 1;
        for b in 0..h.bytes.len() {
            if !h.alive[b] || h.bytes[b] == 0 {
                continue;
            }
            if !entry {
                r.span(h.start[b], h.clock, h.bytes[b]);
            } else if !matches!(c.instr(p.dag.nodes[h.def[b]]).op, Op::Parameter { .. }) {
                r.outputs += h.bytes[b];
            }
        }
        r.clock = h.clock;
    }
    sim.peak = peak;
    sim
}

/// The global timeline of one walk of the module (callees walked where they run, as
/// XLA's whole-module heap simulation flattens the schedule): every temporary buffer's
/// live range and size.
struct Recorder<'a> {
    m: &'a Module,
    prepared: &'a HashMap<CompId, Prepared>,
    chosen: &'a HashMap<(CompId, bool), Chosen>,
    /// Which orders to walk (`true`: program order).
    program: bool,
    clock: u64,
    /// (first step, last step, bytes) of each temporary buffer.
    spans: Vec<(u64, u64, u64)>,
    /// The entry's outputs not aliased to a parameter.
    outputs: u64,
}

impl Recorder<'_> {
    fn span(&mut self, start: u64, end: u64, bytes: u64) {
        if bytes > 0 {
            self.spans.push((start, end, bytes));
        }
    }
}

/// The size of a heap holding every span at an offset of its own, no two spans that are
/// live at once overlapping: XLA's `GlobalDecreasingSizeBestFitHeap` (spatial order:
/// largest first, then longest; each span goes into the smallest free gap that holds it
/// over its whole live range, else on top). The difference to the most bytes live at once
/// is fragmentation.
pub fn best_fit_heap(spans: &[(u64, u64, u64)]) -> u64 {
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by(|&a, &b| {
        let (sa, ea, za) = spans[a];
        let (sb, eb, zb) = spans[b];
        zb.cmp(&za).then((eb - sb).cmp(&(ea - sa))).then(a.cmp(&b))
    });
    // Placed spans: (start, end, offset, size), in a time index of fixed-size blocks.
    let horizon = spans.iter().map(|s| s.1).max().unwrap_or(0) + 1;
    let block = (horizon / 4096).max(1);
    let mut index: Vec<Vec<u32>> = vec![Vec::new(); (horizon / block + 1) as usize];
    let mut placed: Vec<(u64, u64, u64, u64)> = Vec::with_capacity(spans.len());
    let mut seen: Vec<u32> = Vec::new();
    let mut stamp = 0u32;
    let mut top = 0u64;
    let mut busy: Vec<(u64, u64)> = Vec::new();
    for &k in &order {
        let (s, e, size) = spans[k];
        stamp += 1;
        busy.clear();
        for blk in (s / block)..=(e / block) {
            for &q in &index[blk as usize] {
                let q = q as usize;
                if seen[q] == stamp {
                    continue;
                }
                seen[q] = stamp;
                let (qs, qe, off, qz) = placed[q];
                if qs <= e && s <= qe {
                    busy.push((off, off + qz));
                }
            }
        }
        busy.sort_unstable();
        // The smallest gap that holds `size`, else the top.
        let (mut at, mut best): (u64, Option<(u64, u64)>) = (0, None);
        for &(lo, hi) in &busy {
            if lo > at {
                let gap = lo - at;
                if gap >= size && best.is_none_or(|(_, g)| gap < g) {
                    best = Some((at, gap));
                }
            }
            at = at.max(hi);
        }
        let offset = best.map_or(at, |(o, _)| o);
        top = top.max(offset + size);
        let id = placed.len() as u32;
        placed.push((s, e, offset, size));
        seen.push(0);
        for blk in (s / block)..=(e / block) {
            index[blk as usize].push(id);
        }
    }
    top
}

/// The memory one device needs for module `m` (optimized, per device), against
/// `capacity` bytes.
pub fn memory_usage(m: &Module, capacity: u64) -> MemoryUsage {
    memory_usage_sized(m, capacity, Sizing::for_module(m))
}

/// [`memory_usage`] with the array bytes counted by `sizing`.
pub fn memory_usage_sized(m: &Module, capacity: u64, sizing: Sizing) -> MemoryUsage {
    let parameters: u64 =
        m.entry_param_shapes().iter().flat_map(|s| leaf_bytes_as(s, sizing)).sum();
    let mut w =
        Walk { m, sizing, prepared: HashMap::new(), chosen: HashMap::new(), busy: HashSet::new() };
    w.chosen(m.entry, true);
    let (best, sim) = w.at_peak(m.entry);
    // The whole module's timeline on each kind of order, packed into a heap.
    let heap = |w: &Walk, program: bool| {
        let mut r = Recorder {
            m,
            prepared: &w.prepared,
            chosen: &w.chosen,
            program,
            clock: 0,
            spans: Vec::new(),
            outputs: 0,
        };
        let ch = &w.chosen[&(m.entry, program)];
        simulate(
            m.entry(),
            &w.prepared[&m.entry],
            &ch.order,
            true,
            &HashMap::new(),
            None,
            Some(&mut r),
        );
        (r.outputs, best_fit_heap(&r.spans))
    };
    let (outputs, temporaries) = heap(&w, false);
    let (program_outputs, program_temporaries) = heap(&w, true);
    let name = |c: &Computation, p: &Prepared, pos: usize| c.instr(p.dag.nodes[pos]).name.clone();
    let (entry, p) = (m.entry(), &w.prepared[&m.entry]);
    let peak_at = best.order.get(best.peak.step).map(|&i| name(entry, p, i)).unwrap_or_default();
    let mut largest: Vec<(String, u64)> =
        sim.live.iter().map(|&(d, b)| (name(entry, p, d), b)).collect();
    if let Some((callee, _)) = sim.during {
        // The largest buffers of the callee running at the peak, at its own peak.
        let (_, inner) = w.at_peak(callee);
        let (cc, cp) = (m.comp(callee), &w.prepared[&callee]);
        largest.extend(
            inner.live.iter().map(|&(d, b)| (format!("{}/{}", cc.name, name(cc, cp, d)), b)),
        );
    }
    largest.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    largest.truncate(LARGEST);
    MemoryUsage {
        parameters,
        peak: parameters + outputs + temporaries,
        peak_at,
        capacity,
        outputs,
        temporaries,
        live_peak: best.peak.bytes.max(parameters),
        schedule: best.alg.name(),
        program_order_peak: parameters + program_outputs + program_temporaries,
        largest,
        sizing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dense bytes: these tests are about the walk, not the layouts.
    fn usage(src: &str) -> MemoryUsage {
        memory_usage_sized(&hlo_check::parse(src).expect("module"), 1 << 30, Sizing::Dense)
    }

    const ADD: &str = "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  \
                       ROOT s = f32[] add(x, y)\n}\n\n";

    /// `HLOC_MEMORY_FILE=program.hlo cargo test --release -p hlo-passes -- --ignored
    /// --nocapture memory_of_a_file`: the estimate of a module on disk under every sizing.
    #[test]
    #[ignore]
    fn memory_of_a_file() {
        let Ok(path) = std::env::var("HLOC_MEMORY_FILE") else { return };
        let src = std::fs::read_to_string(&path).expect("read");
        let m = hlo_check::parse(&src).expect("module");
        let g = |b: u64| b as f64 / (1u64 << 30) as f64;
        for sizing in [Sizing::Dense, Sizing::for_module(&m)] {
            let h = memory_usage_sized(&m, 1 << 40, sizing);
            println!(
                "{sizing:?}: peak {:.3} GiB = params {:.3} + outputs {:.3} + temps {:.3}; live peak {:.3}; {} ; program order {:.3}",
                g(h.peak),
                g(h.parameters),
                g(h.outputs),
                g(h.temporaries),
                g(h.live_peak),
                h.schedule,
                g(h.program_order_peak)
            );
            for (n, b) in &h.largest {
                println!("    {:9.1} MiB {n}", *b as f64 / (1u64 << 20) as f64);
            }
        }
    }

    #[test]
    fn fits_and_verdict() {
        let src = "HloModule m\n\nENTRY e {\n  p = f32[256] parameter(0)\n  ROOT a = f32[256] negate(p)\n}\n";
        let m = hlo_check::parse(src).expect("module");
        let small = memory_usage(&m, 1024);
        // The parameter and the output, 1 KiB each.
        assert_eq!((small.parameters, small.outputs, small.peak), (1024, 1024, 2048));
        assert!(!small.fits() && small.verdict().starts_with("exceeds by"), "{}", small.verdict());
        let big = memory_usage(&m, 1 << 20);
        assert!(big.fits() && big.verdict().starts_with("fits"), "{}", big.verdict());
    }

    #[test]
    fn a_schedule_that_frees_early_beats_program_order() {
        // Program order computes the three products before reducing any: all three are
        // live at once. Reducing each right after it is computed holds one at a time.
        let h = usage(&format!(
            "HloModule m\n\n{ADD}ENTRY e {{\n  p = f32[64,64] parameter(0)\n  z = f32[] constant(0)\n  \
             a = f32[64,64] dot(p, p), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n  \
             b = f32[64,64] dot(p, p), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n  \
             c = f32[64,64] dot(p, p), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n  \
             ra = f32[] reduce(a, z), dimensions={{0,1}}, to_apply=add\n  \
             rb = f32[] reduce(b, z), dimensions={{0,1}}, to_apply=add\n  \
             rc = f32[] reduce(c, z), dimensions={{0,1}}, to_apply=add\n  \
             ROOT t = (f32[], f32[], f32[]) tuple(ra, rb, rc)\n}}\n"
        ));
        let (param, product, outputs) = (16384, 16384, 12);
        assert_eq!(h.program_order_peak, param + outputs + 3 * product);
        assert_eq!(
            (h.peak, h.outputs, h.temporaries),
            (param + outputs + product, outputs, product)
        );
        assert_ne!(h.schedule, "program");
    }

    /// A counted loop whose body overwrites its `f32[1024]` state with `exp` of it and
    /// stores it into row `i` of an `f32[8,1024]` stack, both in place.
    fn loop_module(alias: &str, result: &str) -> String {
        format!(
            "HloModule m{alias}\n\n\
             cond {{\n  s = (s32[], f32[1024], f32[8,1024]) parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n  \
             n = s32[] constant(8)\n  ROOT lt = pred[] compare(i, n), direction=LT\n}}\n\n\
             body {{\n  s = (s32[], f32[1024], f32[8,1024]) parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n  \
             one = s32[] constant(1)\n  i1 = s32[] add(i, one)\n  x = f32[1024] get-tuple-element(s), index=1\n  \
             y = f32[1024] exponential(x)\n  st = f32[8,1024] get-tuple-element(s), index=2\n  \
             r = f32[1,1024] reshape(y)\n  z = s32[] constant(0)\n  \
             u = f32[8,1024] dynamic-update-slice(st, r, i, z)\n  \
             ROOT t = (s32[], f32[1024], f32[8,1024]) tuple(i1, y, u)\n}}\n\n\
             ENTRY e {{\n  p = f32[1024] parameter(0)\n  z = s32[] constant(0)\n  zf = f32[] constant(0)\n  \
             b = f32[8,1024] broadcast(zf), dimensions={{}}\n  \
             t = (s32[], f32[1024], f32[8,1024]) tuple(z, p, b)\n  \
             w = (s32[], f32[1024], f32[8,1024]) while(t), condition=cond, body=body\n  \
             {result}\n}}\n"
        )
    }

    #[test]
    fn a_while_loop_updates_its_state_in_place() {
        let h = usage(&loop_module("", "ROOT r = f32[8,1024] get-tuple-element(w), index=2"));
        // The parameter; the stack (the loop's state, then the output) in the zeros' buffer;
        // the state element the parameter starts, copied once (the parameter is not the
        // loop's to overwrite), and the condition's `pred[]`; the body's `exp` and row
        // store write into the state.
        assert_eq!((h.parameters, h.outputs, h.temporaries), (4096, 32768, 4096 + 1));
        assert_eq!(h.peak, 4096 + 32768 + 4097);
    }

    #[test]
    fn a_donated_parameter_holds_its_output() {
        let src = |alias: &str| {
            format!(
                "HloModule m{alias}\n\nENTRY e {{\n  p = f32[1024] parameter(0)\n  q = f32[1024] parameter(1)\n  \
                 a = f32[1024] add(p, q)\n  ROOT t = (f32[1024]) tuple(a)\n}}\n"
            )
        };
        let kept = usage(&src(""));
        let donated = usage(&src(", input_output_alias={ {0}: (0, {}, may-alias) }"));
        assert_eq!((kept.peak, kept.outputs), (8192 + 4096, 4096));
        assert_eq!((donated.peak, donated.outputs), (8192, 0));
        // The loop's result aliased to the parameter that starts its state: the loop runs
        // in the donated buffer.
        let h = usage(&loop_module(
            ", input_output_alias={ {}: (0, {}, may-alias) }",
            "ROOT r = f32[1024] get-tuple-element(w), index=1",
        ));
        assert_eq!((h.outputs, h.temporaries), (0, 32768 + 1));
    }

    #[test]
    fn cheap_producers_are_recomputed_in_their_consumers() {
        // `c` and `e` (f32, twice the bf16 product) are recomputed by each reduction from
        // `s`, as XLA's fusion duplicates them: only `s` is a temporary.
        let h = usage(&format!(
            "HloModule m\n\n{ADD}ENTRY e {{\n  p = bf16[256,256] parameter(0)\n  z = f32[] constant(0)\n  \
             s = bf16[256,256] dot(p, p), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n  \
             c = f32[256,256] convert(s)\n  e = f32[256,256] exponential(c)\n  \
             r1 = f32[] reduce(e, z), dimensions={{0,1}}, to_apply=add\n  \
             m = f32[256,256] multiply(e, e)\n  r2 = f32[] reduce(m, z), dimensions={{0,1}}, to_apply=add\n  \
             ROOT t = (f32[], f32[]) tuple(r1, r2)\n}}\n"
        ));
        assert_eq!((h.parameters, h.outputs, h.temporaries), (131072, 8, 131072));
    }

    #[test]
    fn constants_in_a_loop_state_are_sunk_into_the_body() {
        // `k` (a broadcast constant the body only reads) costs nothing: XLA sinks it into
        // the body and fuses it there.
        let h = usage(
            "HloModule m\n\n\
             cond {\n  s = (s32[], f32[1024], f32[1024]) parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n  \
             n = s32[] constant(8)\n  ROOT lt = pred[] compare(i, n), direction=LT\n}\n\n\
             body {\n  s = (s32[], f32[1024], f32[1024]) parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n  \
             one = s32[] constant(1)\n  i1 = s32[] add(i, one)\n  x = f32[1024] get-tuple-element(s), index=1\n  \
             k = f32[1024] get-tuple-element(s), index=2\n  y = f32[1024] add(x, k)\n  \
             ROOT t = (s32[], f32[1024], f32[1024]) tuple(i1, y, k)\n}\n\n\
             ENTRY e {\n  p = f32[1024] parameter(0)\n  z = s32[] constant(0)\n  c = f32[] constant(-1)\n  \
             k = f32[1024] broadcast(c), dimensions={}\n  x = f32[1024] negate(p)\n  \
             t = (s32[], f32[1024], f32[1024]) tuple(z, x, k)\n  \
             w = (s32[], f32[1024], f32[1024]) while(t), condition=cond, body=body\n  \
             ROOT r = f32[1024] get-tuple-element(w), index=1\n}\n",
        );
        // The parameter, the loop's state element (the output) and the condition's
        // `pred[]`: nothing else.
        assert_eq!((h.parameters, h.outputs, h.temporaries), (4096, 4096, 1));
    }

    #[test]
    fn tiled_layouts_are_counted_padded() {
        // XLA's layouts: the parameter (an FSDP shard laid out `{1,0,2}`, unpadded), a
        // row-major copy of it (20 minor, padded to 128 lanes: 6.4 times the bytes), a
        // value in on-chip memory (`S(1)`: no HBM), and the output.
        let m = hlo_check::parse(
            "HloModule m, is_scheduled=true\n\nENTRY e {\n  \
             p = bf16[32,256,20]{1,0,2:T(8,128)(2,1)} parameter(0)\n  \
             a = bf16[32,256,20]{2,1,0:T(8,128)(2,1)} copy(p)\n  \
             v = bf16[32,256,20]{1,0,2:T(8,128)(2,1)S(1)} copy(a)\n  \
             ROOT r = bf16[32,256,20]{1,0,2:T(8,128)(2,1)} copy(v)\n}\n",
        )
        .expect("module");
        let h = memory_usage(&m, 1 << 30);
        let (shard, padded) = (32 * 256 * 20 * 2, 32 * 256 * 128 * 2);
        assert_eq!((h.parameters, h.outputs, h.temporaries), (shard, shard, padded));
        assert_eq!(h.peak, 2 * shard + padded);
        // Without tiles the same program is counted dense.
        let d = memory_usage_sized(&m, 1 << 30, Sizing::Dense);
        assert_eq!((d.parameters, d.outputs, d.temporaries), (shard, shard, 2 * shard));
    }

    #[test]
    fn the_default_tpu_tiles_pad_a_module_without_layouts() {
        // f32[3,5]: 3 rows of 4 (T(4,128)) by 128 lanes, 2 KiB each; the `f32[]` sum one
        // 512-byte tile.
        let h = memory_usage(
            &hlo_check::parse(&format!(
                "HloModule m\n\n{ADD}ENTRY e {{\n  p = f32[3,5] parameter(0)\n  \
                 e = f32[3,5] exponential(p)\n  z = f32[] constant(0)\n  \
                 s = f32[] reduce(e, z), dimensions={{0,1}}, to_apply=add\n  \
                 ROOT t = (f32[3,5], f32[]) tuple(e, s)\n}}\n"
            ))
            .expect("module"),
            1 << 30,
        );
        assert_eq!((h.parameters, h.outputs, h.temporaries), (2048, 2048 + 512, 0));
    }

    #[test]
    fn a_scheduled_module_is_walked_in_its_schedule() {
        // The program order of `a_schedule_that_frees_early_beats_program_order`, as XLA's
        // scheduled program states it: no other order is tried.
        let h = usage(&format!(
            "HloModule m, is_scheduled=true\n\n{ADD}ENTRY e {{\n  p = f32[64,64] parameter(0)\n  \
             z = f32[] constant(0)\n  \
             a = f32[64,64] dot(p, p), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n  \
             b = f32[64,64] dot(p, p), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n  \
             ra = f32[] reduce(a, z), dimensions={{0,1}}, to_apply=add\n  \
             rb = f32[] reduce(b, z), dimensions={{0,1}}, to_apply=add\n  \
             ROOT t = (f32[], f32[]) tuple(ra, rb)\n}}\n"
        ));
        assert_eq!((h.schedule, h.temporaries), ("program", 2 * 16384));
    }

    #[test]
    fn a_tuple_element_dies_at_its_last_reader() {
        // The body updates the stack in place although the counter's get-tuple-element
        // comes after: the state element's buffer is not read again (XLA's liveness is per
        // buffer, not per tuple). The temporaries: the row `r` (a buffer: a scheduled
        // program is fused already), the condition's `pred[]` in its place, no copy of the
        // stack.
        let h = usage(
            "HloModule m, is_scheduled=true\n\n\
             cond {\n  s = (s32[], f32[8,1024]) parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n  \
             n = s32[] constant(8)\n  ROOT lt = pred[] compare(i, n), direction=LT\n}\n\n\
             body {\n  s = (s32[], f32[8,1024]) parameter(0)\n  \
             st = f32[8,1024] get-tuple-element(s), index=1\n  zf = f32[] constant(1)\n  \
             r = f32[1,1024] broadcast(zf), dimensions={}\n  z = s32[] constant(0)\n  \
             u = f32[8,1024] dynamic-update-slice(st, r, z, z)\n  \
             i = s32[] get-tuple-element(s), index=0\n  one = s32[] constant(1)\n  \
             i1 = s32[] add(i, one)\n  ROOT t = (s32[], f32[8,1024]) tuple(i1, u)\n}\n\n\
             ENTRY e {\n  p = f32[8,1024] parameter(0)\n  x = f32[8,1024] negate(p)\n  \
             z = s32[] constant(0)\n  t = (s32[], f32[8,1024]) tuple(z, x)\n  \
             w = (s32[], f32[8,1024]) while(t), condition=cond, body=body\n  \
             ROOT g = f32[8,1024] get-tuple-element(w), index=1\n}\n",
        );
        assert_eq!((h.parameters, h.outputs, h.temporaries), (32768, 32768, 4096));
    }

    #[test]
    fn the_heap_packs_live_ranges_best_fit() {
        assert_eq!(best_fit_heap(&[]), 0);
        // Disjoint in time: one slot; overlapping: side by side.
        assert_eq!(best_fit_heap(&[(0, 1, 8), (2, 3, 8)]), 8);
        assert_eq!(best_fit_heap(&[(0, 2, 8), (2, 3, 8)]), 16);
        // The largest first: `a` at 0, `b` beside it; `c` (after `a`) in `a`'s gap.
        assert_eq!(best_fit_heap(&[(0, 4, 10), (0, 9, 6), (5, 9, 4)]), 16);
        // Equal sizes, the longer first: `b` at 0, `a` above it; `c` (live with `b`, after
        // `a`) in `a`'s slot; `d` (live with all three) on top.
        assert_eq!(best_fit_heap(&[(0, 1, 4), (0, 3, 4), (2, 3, 3), (1, 2, 2)]), 10);
        // Fragmentation: `a` and then `d` (disjoint in time) at 0, `b` above `a`; `c`, live
        // with `d` and `b`, finds only the 1-byte gap between them and goes on top: 10
        // bytes for at most 9 live.
        assert_eq!(best_fit_heap(&[(0, 1, 5), (0, 3, 3), (2, 3, 2), (2, 2, 4)]), 10);
    }
}
