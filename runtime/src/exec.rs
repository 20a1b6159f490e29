//! Executables: an optimized module planned into steps over buffers, its kernels compiled,
//! and the executor that runs the steps.
//!
//! Planning walks each computation in the order of [`hlo_ir::schedule::Schedule`]
//! (the linearization the interpreter uses):
//! - parameters, constants, `tuple`, `get-tuple-element`, `reshape`, `bitcast`, `copy` and
//!   identity custom-calls produce no step: they name existing buffers (buffers are
//!   immutable once written, and row-major reshapes do not move bytes);
//! - every other elementwise or data-movement instruction, `reduce`, `reduce-window`,
//!   `gather` and every fusion becomes a Cranelift loop kernel; inside a fusion only the
//!   root's arrays and the operands of library calls are materialized;
//! - `dot` and `convolution` call library kernels (`hlo-kernels`, through [`crate::library`]);
//! - `while` and `conditional` become nested step lists over their own buffers; the values
//!   a loop body or a branch returns are written into the loop state or the results as one
//!   parallel copy ([`Planner::parallel_copy`]): sources are compared by the buffer whose
//!   bytes they are (a reshape, bitcast or copy is a view of another buffer), so a body
//!   that swaps state slots, through views or not, reads every source before it is
//!   overwritten.
//!
//! Buffers get offsets in one arena from their live intervals (first definition to last
//! use, in one step numbering across nested computations), reusing the space of dead
//! buffers; an arena is allocated on a program's first run and reused afterwards.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hlo_ir::schedule::Schedule;
use hlo_ir::{CompId, Computation, ElemType, Module, NodeIndex, Op, Opcode, Shape, Tensor};

use crate::codegen::elemental::{elem_of, flat_arrays, static_dims};
use crate::codegen::kernel::{DefinedLoop, LoopKernel, define_loop_kernel, vector_dims};
use crate::codegen::{CgError, ty};
use crate::jit::{JitCode, JitModule};
use crate::library::View;
use crate::row_chain;

pub type Slot = usize;

/// A value: one buffer or a tuple of values.
#[derive(Clone, Debug)]
pub enum Val {
    A(Slot),
    T(Vec<Val>),
}

impl Val {
    pub fn leaves(&self, out: &mut Vec<Slot>) {
        match self {
            Val::A(s) => out.push(*s),
            Val::T(v) => v.iter().for_each(|x| x.leaves(out)),
        }
    }
    fn flat(&self) -> Vec<Slot> {
        let mut v = Vec::new();
        self.leaves(&mut v);
        v
    }
}

#[derive(Clone, Debug)]
enum Place {
    Arena(usize),
    /// Written straight into the caller's output tensor `k` (no copy at the end).
    Output(usize),
    Param(usize),
    Const(usize),
}

#[derive(Clone, Debug)]
struct Buffer {
    bytes: usize,
    elem: ElemType,
    dims: Vec<i64>,
    place: Option<Place>,
    /// A reshaped view of another buffer (same bytes, other dims).
    alias: Option<Slot>,
    def: usize,
    last: usize,
}

/// What a kernel is, for statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum KernelKind {
    /// A fused loop (an XLA `fusion`).
    Fusion,
    /// One elementwise instruction.
    Elementwise,
    /// A reduction.
    Reduce,
    /// Data movement (transpose, slice, concatenate, pad, gather, ...).
    DataMovement,
    /// A `dot` on the GEMM library.
    Dot,
    /// A `convolution` on the GEMM library.
    Convolution,
    /// A buffer copy.
    Copy,
    /// A `scatter`.
    Scatter,
    /// A `sort` (or TopK).
    Sort,
    /// A collective exchanged with the other devices.
    Collective,
}

impl KernelKind {
    /// The kind's name in `--stats` tables.
    pub fn name(self) -> &'static str {
        match self {
            KernelKind::Fusion => "fusion (jit)",
            KernelKind::Elementwise => "elementwise (jit)",
            KernelKind::Reduce => "reduce (jit)",
            KernelKind::DataMovement => "data movement (jit)",
            KernelKind::Dot => "dot (gemm)",
            KernelKind::Convolution => "convolution (im2col+gemm)",
            KernelKind::Copy => "copy",
            KernelKind::Scatter => "scatter (jit)",
            KernelKind::Sort => "sort/topk (library, jit comparator)",
            KernelKind::Collective => "collective (fabric)",
        }
    }
}

/// Buffer copies `(from, to)`, run one after the other in this order (a
/// [`Planner::parallel_copy`]).
type Moves = Vec<(Slot, Slot)>;

#[derive(Debug)]
pub(crate) enum Step {
    /// `split`: the extent of the kernel's outermost loop; `work`: elements computed (large
    /// kernels run their outer range on both cores). `args`: the `inputs` buffers it reads,
    /// then those it writes. `rows`: when its outer iteration `r` computes row `r` of every
    /// output, whether it reads each input only in row `r` too (see
    /// [`crate::codegen::rows`]; what [`crate::row_chain`] groups by). `at`: the planner's
    /// clock when it was planned (buffer lifetimes are in those ticks).
    Kernel {
        f: usize,
        args: Vec<Slot>,
        inputs: usize,
        rows: Option<Vec<bool>>,
        at: usize,
        kind: KernelKind,
        name: String,
        split: i64,
        work: u64,
    },
    /// Loop kernels run a block of `block` rows at a time: every kernel over the block,
    /// then the next block (each kernel reads what an earlier one wrote only in the rows
    /// it computes, so the rows stay in cache between them; see [`crate::row_chain`]).
    /// `args` holds every kernel's arguments one after the other.
    Chain {
        kernels: Vec<ChainKernel>,
        args: Vec<Slot>,
        rows: i64,
        block: i64,
        work: u64,
        name: String,
    },
    Dot {
        lhs: Slot,
        rhs: Slot,
        out: Slot,
        /// Per operand: the slot holds f32 values the dot rounds to bf16 (a convert it
        /// absorbed).
        round: [bool; 2],
        dims: Box<hlo_ir::op::DotDims>,
        name: String,
    },
    Conv {
        lhs: Slot,
        rhs: Slot,
        out: Slot,
        conv: Box<hlo_ir::op::Convolution>,
        name: String,
    },
    /// Copies, one after the other: `(from, to)` copies buffer `from` into `to` (a
    /// [`Planner::parallel_copy`]).
    Copy {
        moves: Moves,
    },
    /// `write_back`: the body's results into the state (a [`Planner::parallel_copy`]).
    While {
        cond: Vec<Step>,
        pred: Slot,
        body: Vec<Step>,
        write_back: Moves,
    },
    /// A stable sort of every operand along `dim`, ordered by comparator kernel `cmp`.
    Sort {
        cmp: usize,
        operands: Vec<Slot>,
        outs: Vec<Slot>,
        dim: usize,
        name: String,
    },
    /// The `k` largest (or smallest) elements along the last dimension, with their indices.
    TopK {
        operand: Slot,
        values: Slot,
        indices: Slot,
        k: usize,
        largest: bool,
        name: String,
    },
    /// Each branch: its steps, and the copies of its results into the conditional's.
    Conditional {
        selector: Slot,
        is_pred: bool,
        branches: Vec<(Vec<Step>, Moves)>,
    },
    /// A collective across the devices of an SPMD run (see [`Device`]); one device: a copy.
    Collective {
        opcode: Opcode,
        attrs: Box<hlo_ir::op::CollectiveAttrs>,
        reducer: Option<Opcode>,
        operands: Vec<Slot>,
        outs: Vec<Slot>,
        name: String,
    },
    /// Writes this device's index (`partition-id`, `replica-id`) as a u32 scalar.
    DeviceId {
        out: Slot,
    },
    /// `rng-get-and-update-state`: writes counter `counter` as u64[2] (low, high), then
    /// adds `delta` (see [`Executable`]'s `rng`).
    RngState {
        out: Slot,
        counter: usize,
        delta: i64,
    },
}

/// A kernel of a [`Step::Chain`]: its arguments start at `at` in the chain's `args`.
#[derive(Debug)]
pub(crate) struct ChainKernel {
    pub f: usize,
    pub at: usize,
    pub kind: KernelKind,
}

/// The device a program runs as in an SPMD run: its index and the fabric its
/// collectives rendezvous on.
#[derive(Clone, Copy)]
pub struct Device<'f> {
    pub index: usize,
    pub fabric: &'f hlo_fabric::Fabric,
}

struct Planner<'m> {
    m: &'m Module,
    jit: JitModule,
    bufs: Vec<Buffer>,
    consts: Vec<Vec<u64>>,
    clock: usize,
    kernels: usize,
    /// `rng-get-and-update-state` instructions planned so far (each owns a counter).
    rng_counters: usize,
}

fn cg(e: CgError, comp: &Computation, n: NodeIndex) -> CgError {
    let i = comp.instr(n);
    let span = e.span.or((i.span != hlo_ir::Span::default()).then_some(i.span));
    CgError { message: format!("`{}`: {}", i.name, e.message), unsupported: e.unsupported, span }
}

/// Whether `op` can be computed element by element inside a loop kernel.
/// Whether `n` converts f32 to bf16 for one `dot` only (its one user), which then reads
/// the f32 operand and rounds it itself ([`Step::Dot`]'s `round`).
fn rounds_for_one_dot(comp: &Computation, n: NodeIndex) -> bool {
    let ins = comp.instr(n);
    let (Some(&src), Some(user)) = (comp.operands(n).first(), comp.sole_user(n)) else {
        return false;
    };
    elem_of(&ins.shape).ok() == Some(ElemType::BF16)
        && elem_of(&comp.instr(src).shape).ok() == Some(ElemType::F32)
        && comp.root() != Some(n)
        && matches!(comp.instr(user).op, Op::Dot { opcode: Opcode::Dot, .. })
}

/// The outputs of a multi-output loop fusion (root `tuple`) that one loop computes: at
/// least two distinct elementwise-computed arrays with the same
/// [`vector_dims`](crate::codegen::kernel::vector_dims) (f32/bf16, last dimension of four
/// or more, not reductions or windows), whose values no other kernel of the fusion reads
/// (they are computed only when the last of them is scheduled). Empty when that is not
/// the case.
fn output_group(
    comp: &Computation,
    root: NodeIndex,
    materialize: &HashSet<NodeIndex>,
) -> Vec<NodeIndex> {
    if comp.instr(root).op != Op::Plain(Opcode::Tuple) {
        return Vec::new();
    }
    let mut group: Vec<NodeIndex> = Vec::new();
    for o in comp.operands(root) {
        if !group.contains(&o) {
            group.push(o);
        }
    }
    let first = group.first().and_then(|&g| vector_dims(comp, g));
    let ok = group.len() >= 2
        && first.is_some()
        && group.iter().all(|&g| {
            let op = &comp.instr(g).op;
            elemental(op)
                && !matches!(op, Op::Constant(_) | Op::GetTupleElement { .. } | Op::Map { .. })
                && vector_dims(comp, g) == first
        });
    if !ok {
        return Vec::new();
    }
    // Every value a member feeds must end in members or the root: a kernel of its own
    // (materialized) reading it would run before the group is computed.
    let mut stack: Vec<NodeIndex> = group.clone();
    let mut seen = HashSet::new();
    while let Some(x) = stack.pop() {
        if !seen.insert(x) {
            continue;
        }
        for u in comp.users(x) {
            if u == root || group.contains(&u) {
                continue;
            }
            if materialize.contains(&u) {
                return Vec::new();
            }
            stack.push(u);
        }
    }
    group
}

fn elemental(op: &Op) -> bool {
    match op {
        Op::Plain(o) => !matches!(
            o,
            Opcode::Tuple
                | Opcode::AfterAll
                | Opcode::AddDependency
                | Opcode::PartitionId
                | Opcode::ReplicaId
        ),
        Op::Iota { .. }
        | Op::Compare { .. }
        | Op::Broadcast { .. }
        | Op::Reshape { .. }
        | Op::Transpose { .. }
        | Op::Reverse { .. }
        | Op::Concatenate { .. }
        | Op::Slice { .. }
        | Op::DynamicSlice { .. }
        | Op::Pad { .. }
        | Op::ReducePrecision { .. }
        | Op::Gather(_)
        | Op::Reduce { .. }
        | Op::ReduceWindow { .. }
        | Op::Map { .. }
        | Op::Constant(_)
        | Op::GetTupleElement { .. } => true,
        _ => false,
    }
}

/// `steps` with the chains [`row_chain::group`] finds (see [`Planner::row_chains`]).
fn chain_steps(
    steps: Vec<Step>,
    bufs: &row_chain::Buffers,
    widen: &mut Vec<row_chain::Widen>,
) -> Vec<Step> {
    let steps: Vec<Step> = steps
        .into_iter()
        .map(|st| match st {
            Step::While { cond, pred, body, write_back } => Step::While {
                cond: chain_steps(cond, bufs, widen),
                pred,
                body: chain_steps(body, bufs, widen),
                write_back,
            },
            Step::Conditional { selector, is_pred, branches } => Step::Conditional {
                selector,
                is_pred,
                branches: branches
                    .into_iter()
                    .map(|(b, m)| (chain_steps(b, bufs, widen), m))
                    .collect(),
            },
            st => st,
        })
        .collect();
    let views: Vec<Option<row_chain::Kernel>> = steps
        .iter()
        .map(|st| match st {
            Step::Kernel { args, inputs, rows, split, at, .. } => Some(row_chain::Kernel {
                reads: args[..*inputs].iter().map(|&s| bufs.root[s]).collect(),
                writes: args[*inputs..].iter().map(|&s| bufs.root[s]).collect(),
                by_rows: rows.as_deref().map(|r| (r, *split)),
                at: *at,
            }),
            _ => None,
        })
        .collect();
    let groups = row_chain::group(&views, bufs, widen);
    drop(views);
    let mut steps: Vec<Option<Step>> = steps.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(steps.len());
    for g in groups {
        if g.steps.len() == 1 {
            out.push(steps[g.steps[0]].take().expect("each step in one group"));
            continue;
        }
        let (mut kernels, mut args, mut names, mut work, mut rows) =
            (Vec::new(), Vec::new(), Vec::new(), 0, 0);
        for k in g.steps {
            let Some(Step::Kernel { f, args: a, kind, name, split, work: w, .. }) = steps[k].take()
            else {
                unreachable!("chains hold kernels")
            };
            kernels.push(ChainKernel { f, at: args.len(), kind });
            args.extend(a);
            names.push(name);
            work += w;
            rows = split;
        }
        out.push(Step::Chain {
            kernels,
            args,
            rows,
            block: g.block,
            work,
            name: names.join(" » "),
        });
    }
    out
}

impl<'m> Planner<'m> {
    fn tick(&mut self) -> usize {
        self.clock += 1;
        self.clock
    }

    fn new_buf(&mut self, s: &Shape) -> Result<Slot, CgError> {
        let e = elem_of(s)?;
        let dims = static_dims(s)?;
        let n: i64 = dims.iter().product();
        let bytes = (n.max(0) as usize)
            .checked_mul(ty::size_of(e) as usize)
            .ok_or_else(|| CgError::new(format!("{s} is too large")))?;
        let t = self.clock;
        self.bufs.push(Buffer { bytes, elem: e, dims, place: None, alias: None, def: t, last: t });
        Ok(self.bufs.len() - 1)
    }

    fn new_val(&mut self, s: &Shape) -> Result<Val, CgError> {
        Ok(match s {
            Shape::Tuple(items) => {
                Val::T(items.iter().map(|i| self.new_val(i)).collect::<Result<_, _>>()?)
            }
            Shape::Token => Val::T(vec![]),
            _ => Val::A(self.new_buf(s)?),
        })
    }

    fn use_val(&mut self, v: &Val) {
        let t = self.clock;
        for mut s in v.flat() {
            loop {
                let b = &mut self.bufs[s];
                b.last = b.last.max(t);
                match b.alias {
                    Some(a) => s = a,
                    None => break,
                }
            }
        }
    }

    fn constant(&mut self, lit: &hlo_ir::literal::Literal, s: &Shape) -> Result<Val, CgError> {
        if let (hlo_ir::literal::Literal::Tuple(items), Shape::Tuple(shapes)) = (lit, s) {
            return Ok(Val::T(
                items
                    .iter()
                    .zip(shapes)
                    .map(|(l, s)| self.constant(l, s))
                    .collect::<Result<_, _>>()?,
            ));
        }
        let e = elem_of(s)?;
        let dims = static_dims(s)?;
        let count = dims.iter().map(|&d| d as usize).product();
        let bytes = lit.encode(e, count).map_err(|e| CgError::new(e.to_string()))?;
        let mut words = vec![0u64; bytes.len().div_ceil(8).max(1)];
        // SAFETY: `words` has at least `bytes.len()` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                words.as_mut_ptr() as *mut u8,
                bytes.len(),
            )
        };
        self.consts.push(words);
        let slot = self.new_buf(s)?;
        self.bufs[slot].place = Some(Place::Const(self.consts.len() - 1));
        Ok(Val::A(slot))
    }

    /// Plans computation `id` with its parameters bound to `params`; `fused` computations
    /// materialize only their root and library-call operands. Returns the root's value.
    fn plan(
        &mut self,
        id: CompId,
        params: &[Val],
        fused: bool,
        steps: &mut Vec<Step>,
    ) -> Result<Val, CgError> {
        let m = self.m;
        let comp = m.comp(id);
        let sched = Schedule::new(comp);
        let root = sched.nodes[sched.root];
        // Which instructions get a buffer inside a fused computation.
        let mut materialize: HashSet<NodeIndex> = HashSet::new();
        if fused {
            materialize.insert(root);
            if let Op::Plain(Opcode::Tuple) = comp.instr(root).op {
                materialize.extend(comp.operands(root));
            }
            for &n in &sched.nodes {
                if !elemental(&comp.instr(n).op) {
                    materialize.insert(n);
                    materialize.extend(comp.operands(n));
                }
            }
        }
        // The outputs of a multi-output loop fusion computed by one loop (see
        // `output_group`); planned together where the last of them is scheduled.
        let group = if fused { output_group(comp, root, &materialize) } else { Vec::new() };
        let group_last =
            group.iter().copied().max_by_key(|&g| sched.nodes.iter().position(|&x| x == g));
        let mut vals: HashMap<NodeIndex, Val> = HashMap::new();
        // Converts to bf16 a dot does itself: the convert's f32 operand buffer.
        let mut rounded: HashMap<NodeIndex, Slot> = HashMap::new();
        for (pos, &n) in sched.nodes.iter().enumerate() {
            let ins = comp.instr(n);
            let ops = &sched.operands[pos];
            let opn: Vec<NodeIndex> = ops.iter().map(|&o| sched.nodes[o]).collect();
            self.tick();
            let v = match &ins.op {
                Op::Parameter { number, .. } => {
                    params.get(*number as usize).cloned().ok_or_else(|| {
                        CgError::new(format!("parameter {number} of `{}` is not bound", comp.name))
                    })?
                }
                Op::Constant(lit)
                    if !fused
                        || materialize.contains(&n)
                        || static_dims(&ins.shape)
                            .map_or(true, |d| d.iter().product::<i64>() != 1) =>
                {
                    self.constant(lit, &ins.shape).map_err(|e| cg(e, comp, n))?
                }
                _ if fused && !materialize.contains(&n) => continue,
                _ if group.contains(&n) => {
                    if Some(n) != group_last {
                        continue;
                    }
                    let outs = self
                        .loop_kernel(comp, &group, &vals, &materialize, fused, steps)
                        .map_err(|e| if e.message.starts_with('`') { e } else { cg(e, comp, n) })?;
                    vals.extend(group.iter().copied().zip(outs));
                    vals[&n].clone()
                }
                Op::Plain(Opcode::Tuple) => Val::T(opn.iter().map(|o| vals[o].clone()).collect()),
                Op::GetTupleElement { index } => match &vals[&opn[0]] {
                    Val::T(items) => items.get(*index as usize).cloned().ok_or_else(|| {
                        cg(CgError::new("tuple index out of range".into()), comp, n)
                    })?,
                    Val::A(_) => {
                        return Err(cg(
                            CgError::new("get-tuple-element of an array".into()),
                            comp,
                            n,
                        ));
                    }
                },
                Op::Reshape { .. }
                | Op::Plain(Opcode::Bitcast | Opcode::Copy | Opcode::OptBarrier)
                    if !fused || opn.iter().all(|o| vals.contains_key(o)) =>
                {
                    let v = vals[&opn[0]].clone();
                    self.use_val(&v);
                    match (&v, &ins.shape) {
                        (Val::A(src), Shape::Array(_))
                            if static_dims(&ins.shape)? != self.bufs[*src].dims
                                || elem_of(&ins.shape)? != self.bufs[*src].elem =>
                        {
                            let a = self.new_buf(&ins.shape).map_err(|e| cg(e, comp, n))?;
                            if self.bufs[a].bytes != self.bufs[*src].bytes {
                                return Err(cg(
                                    CgError::unsupported(
                                        "a bitcast that changes the byte size".into(),
                                    ),
                                    comp,
                                    n,
                                ));
                            }
                            self.bufs[a].alias = Some(*src);
                            Val::A(a)
                        }
                        _ => v,
                    }
                }
                Op::CustomCall(cc) if cc.is_single_device_identity() && !opn.is_empty() => {
                    let v = vals[&opn[0]].clone();
                    self.use_val(&v);
                    v
                }
                Op::Plain(Opcode::AfterAll) => Val::T(vec![]),
                Op::Fusion { calls, .. } => {
                    let args: Vec<Val> = opn.iter().map(|o| vals[o].clone()).collect();
                    for a in &args {
                        self.use_val(a);
                    }
                    let v = self.plan(*calls, &args, true, steps)?;
                    self.tick();
                    for a in &args {
                        self.use_val(a);
                    }
                    v
                }
                Op::Call { to_apply, .. } => {
                    let args: Vec<Val> = opn.iter().map(|o| vals[o].clone()).collect();
                    self.plan(*to_apply, &args, false, steps)?
                }
                Op::Plain(Opcode::Convert) if !fused && rounds_for_one_dot(comp, n) => {
                    // f32 values converted to bf16 only for one dot (mixed-precision
                    // weights): the dot reads the f32 buffer and rounds as it widens, the
                    // bf16 copy is never written.
                    let src = self.slot_of(&vals, opn[0], comp, n)?;
                    rounded.insert(n, src);
                    continue;
                }
                Op::Dot { opcode: Opcode::Dot, dims } => {
                    let mut round = [false; 2];
                    let mut operand = |i: usize| match rounded.get(&opn[i]) {
                        Some(&src) => {
                            round[i] = true;
                            Ok(src)
                        }
                        None => self.slot_of(&vals, opn[i], comp, n),
                    };
                    let (lhs, rhs) = (operand(0)?, operand(1)?);
                    let out = self.new_buf(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    self.use_val(&Val::A(lhs));
                    self.use_val(&Val::A(rhs));
                    steps.push(Step::Dot {
                        lhs,
                        rhs,
                        out,
                        round,
                        dims: dims.clone(),
                        name: ins.name.clone(),
                    });
                    Val::A(out)
                }
                Op::Convolution(c) => {
                    let (lhs, rhs) = (
                        self.slot_of(&vals, opn[0], comp, n)?,
                        self.slot_of(&vals, opn[1], comp, n)?,
                    );
                    let (le, re, oe) =
                        (self.bufs[lhs].elem, self.bufs[rhs].elem, elem_of(&ins.shape)?);
                    let ints =
                        [le, re, oe].iter().filter(|&&e| crate::library::is_int_or_pred(e)).count();
                    if ints != 0 && ints != 3 {
                        return Err(cg(
                            CgError::unsupported(format!(
                                "a convolution of {le} and {re} producing {oe} (integer convolutions take integer or pred operands and results only)"
                            )),
                            comp,
                            n,
                        ));
                    }
                    let f64s = [le, re, oe].iter().filter(|&&e| e == ElemType::F64).count();
                    if ints == 0
                        && f64s == 0
                        && !matches!(oe, ElemType::F32 | ElemType::BF16 | ElemType::F16)
                    {
                        return Err(cg(
                            CgError::unsupported(format!(
                                "a convolution producing {oe} (the library convolves f32, bf16, f16, f64, integers and pred)"
                            )),
                            comp,
                            n,
                        ));
                    }
                    if f64s != 0 && f64s != 3 {
                        return Err(cg(
                            CgError::unsupported(format!(
                                "a convolution of {le} and {re} producing {oe} (f64 convolves f64 operands into f64 only)"
                            )),
                            comp,
                            n,
                        ));
                    }
                    let out = self.new_buf(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    self.use_val(&Val::A(lhs));
                    self.use_val(&Val::A(rhs));
                    steps.push(Step::Conv {
                        lhs,
                        rhs,
                        out,
                        conv: c.clone(),
                        name: ins.name.clone(),
                    });
                    Val::A(out)
                }
                Op::Scatter(_) | Op::SelectAndScatter { .. } => {
                    let mut args = Vec::new();
                    let mut operand_slots = Vec::new();
                    for &o in &opn {
                        let s = self.slot_of(&vals, o, comp, n)?;
                        if !operand_slots.iter().any(|&(x, _)| x == o) {
                            operand_slots.push((o, args.len()));
                            args.push(s);
                        }
                        self.use_val(&Val::A(s));
                    }
                    let out = self.new_val(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    let out_slots: Vec<usize> =
                        (args.len()..args.len() + out.flat().len()).collect();
                    args.extend(out.flat());
                    self.kernels += 1;
                    let kname = format!(
                        "k{}_{}",
                        self.kernels,
                        ins.name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
                    );
                    let (f, split) = crate::codegen::scatter::define(
                        &mut self.jit,
                        m,
                        &kname,
                        comp,
                        n,
                        &operand_slots,
                        &out_slots,
                    )
                    .map_err(|e| cg(e, comp, n))?;
                    steps.push(Step::Kernel {
                        f,
                        inputs: operand_slots.len(),
                        args,
                        rows: None,
                        at: self.clock,
                        kind: KernelKind::Scatter,
                        name: ins.name.clone(),
                        split,
                        work: if split > 1 { elements(&ins.shape) } else { 0 },
                    });
                    out
                }
                Op::Sort { dimension, to_apply, .. } => {
                    let operands: Vec<Slot> = opn
                        .iter()
                        .map(|&o| self.slot_of(&vals, o, comp, n))
                        .collect::<Result<_, _>>()?;
                    for &s in &operands {
                        self.use_val(&Val::A(s));
                    }
                    let elems: Vec<ElemType> =
                        operands.iter().map(|&s| self.bufs[s].elem).collect();
                    self.kernels += 1;
                    let kname = format!(
                        "k{}_cmp_{}",
                        self.kernels,
                        ins.name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
                    );
                    let cmp = crate::codegen::sort::define_comparator(
                        &mut self.jit,
                        m,
                        &kname,
                        *to_apply,
                        &elems,
                    )
                    .map_err(|e| cg(e, comp, n))?;
                    let out = self.new_val(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    steps.push(Step::Sort {
                        cmp,
                        operands,
                        outs: out.flat(),
                        dim: *dimension as usize,
                        name: ins.name.clone(),
                    });
                    out
                }
                Op::CustomCall(cc) if cc.target == "TopK" => {
                    // XLA's TopK custom-call: k is the result's last dimension, largest first.
                    let operand = self.slot_of(&vals, opn[0], comp, n)?;
                    self.use_val(&Val::A(operand));
                    let out = self.new_val(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    let f = out.flat();
                    if f.len() != 2 {
                        return Err(cg(
                            CgError::new("TopK must give values and indices".into()),
                            comp,
                            n,
                        ));
                    }
                    let k = *self.bufs[f[0]].dims.last().unwrap_or(&0) as usize;
                    steps.push(Step::TopK {
                        operand,
                        values: f[0],
                        indices: f[1],
                        k,
                        largest: true,
                        name: ins.name.clone(),
                    });
                    out
                }
                Op::TopK { k, largest, .. } => {
                    let operand = self.slot_of(&vals, opn[0], comp, n)?;
                    self.use_val(&Val::A(operand));
                    let out = self.new_val(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    let f = out.flat();
                    if f.len() != 2 {
                        return Err(cg(
                            CgError::new("topk must give values and indices".into()),
                            comp,
                            n,
                        ));
                    }
                    steps.push(Step::TopK {
                        operand,
                        values: f[0],
                        indices: f[1],
                        k: *k as usize,
                        largest: largest.unwrap_or(true),
                        name: ins.name.clone(),
                    });
                    out
                }
                Op::While { condition, body } => {
                    let init = vals[&opn[0]].clone();
                    self.use_val(&init);
                    let state_val = self.new_val(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    let state = state_val.flat();
                    let moves = self.parallel_copy(&init.flat(), &state);
                    steps.push(Step::Copy { moves });
                    let mut cond_steps = Vec::new();
                    let pv = self.plan(
                        *condition,
                        std::slice::from_ref(&state_val),
                        false,
                        &mut cond_steps,
                    )?;
                    let pred = match pv {
                        Val::A(s) => s,
                        _ => {
                            return Err(cg(
                                CgError::new("while condition returns a tuple".into()),
                                comp,
                                n,
                            ));
                        }
                    };
                    let mut body_steps = Vec::new();
                    let out =
                        self.plan(*body, std::slice::from_ref(&state_val), false, &mut body_steps)?;
                    self.tick();
                    self.use_val(&out);
                    self.use_val(&Val::A(pred));
                    self.use_val(&state_val);
                    let write_back = self.parallel_copy(&out.flat(), &state);
                    steps.push(Step::While {
                        cond: cond_steps,
                        pred,
                        body: body_steps,
                        write_back,
                    });
                    state_val
                }
                Op::Conditional(br) => {
                    let selector = self.slot_of(&vals, opn[0], comp, n)?;
                    let is_pred = elem_of(&comp.instr(opn[0]).shape)? == ElemType::Pred;
                    let result = self.new_val(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    let comps: Vec<CompId> = match br {
                        hlo_ir::op::Branches::TrueFalse(t, f) => vec![*t, *f],
                        hlo_ir::op::Branches::Indexed(v) => v.clone(),
                    };
                    let mut branches = Vec::new();
                    for (k, c) in comps.iter().enumerate() {
                        let arg = vals[&opn[k + 1]].clone();
                        let mut bs = Vec::new();
                        let out = self.plan(*c, std::slice::from_ref(&arg), false, &mut bs)?;
                        self.tick();
                        self.use_val(&out);
                        self.use_val(&arg);
                        let moves = self.parallel_copy(&out.flat(), &result.flat());
                        branches.push((bs, moves));
                    }
                    self.use_val(&Val::A(selector));
                    steps.push(Step::Conditional { selector, is_pred, branches });
                    result
                }
                Op::Plain(Opcode::PartitionId | Opcode::ReplicaId) => {
                    let out = self.new_buf(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    steps.push(Step::DeviceId { out });
                    Val::A(out)
                }
                Op::RngGetAndUpdateState { delta } => {
                    let out = self.new_buf(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    steps.push(Step::RngState { out, counter: self.rng_counters, delta: *delta });
                    self.rng_counters += 1;
                    Val::A(out)
                }
                Op::Collective { opcode, attrs } => {
                    if let Some(a) = ins.unimplemented_kept_attr() {
                        return Err(cg(
                            CgError::unsupported(format!(
                                "`{a}=` on {} is not supported by the JIT runtime",
                                opcode.name()
                            )),
                            comp,
                            n,
                        ));
                    }
                    let operands: Vec<Slot> = opn
                        .iter()
                        .map(|&o| self.slot_of(&vals, o, comp, n))
                        .collect::<Result<_, _>>()?;
                    for &s in &operands {
                        self.use_val(&Val::A(s));
                    }
                    let reducer =
                        attrs.to_apply.and_then(|c| hlo_interp::binary_reducer(m.comp(c)));
                    let out = self.new_val(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    steps.push(Step::Collective {
                        opcode: *opcode,
                        attrs: attrs.clone(),
                        reducer,
                        operands,
                        outs: out.flat(),
                        name: ins.name.clone(),
                    });
                    out
                }
                op if elemental(op) => self
                    .loop_kernel(comp, &[n], &vals, &materialize, fused, steps)
                    .map_err(|e| if e.message.starts_with('`') { e } else { cg(e, comp, n) })?
                    .remove(0),
                Op::CustomCall(cc) => {
                    return Err(cg(
                        CgError::unsupported(format!(
                            "custom-call target `{}` is not supported by the JIT runtime",
                            cc.target
                        )),
                        comp,
                        n,
                    ));
                }
                other => {
                    return Err(cg(
                        CgError::unsupported(format!(
                            "{} is not supported by the JIT runtime",
                            other.opcode().name()
                        )),
                        comp,
                        n,
                    ));
                }
            };
            vals.insert(n, v);
        }
        let root_val = vals
            .get(&root)
            .cloned()
            .ok_or_else(|| CgError::new(format!("root of `{}` not computed", comp.name)))?;
        self.tick();
        self.use_val(&root_val);
        Ok(root_val)
    }

    /// The buffer whose bytes `s` names (`s` itself unless it is a view).
    fn root(&self, mut s: Slot) -> Slot {
        while let Some(a) = self.bufs[s].alias {
            s = a;
        }
        s
    }

    /// Orders the parallel copy `to[i] := from[i]` (every source read as it was before any
    /// destination is written) into a sequence of plain copies, run one after the other.
    ///
    /// Buffers are compared by the bytes they name ([`Self::root`]): a source may be a view
    /// (reshape, bitcast, copy) of a destination, and a destination may be read by several
    /// sources. A copy runs once no other pending copy still reads its destination; when
    /// every pending copy's destination is still read (the sources form cycles, e.g. a
    /// swap), one source is saved in a temporary buffer first, live only at this point of
    /// the plan. A copy whose source names its destination's bytes is no copy at all.
    /// Destinations must be distinct buffers.
    fn parallel_copy(&mut self, from: &[Slot], to: &[Slot]) -> Moves {
        debug_assert_eq!(from.len(), to.len());
        let mut pending: Vec<(Slot, Slot)> = from
            .iter()
            .zip(to)
            .filter(|&(&f, &t)| self.root(f) != self.root(t) && self.bufs[t].bytes > 0)
            .map(|(&f, &t)| (f, t))
            .collect();
        let mut moves = Vec::with_capacity(pending.len());
        while !pending.is_empty() {
            let free = (0..pending.len()).find(|&k| {
                let dst = self.root(pending[k].1);
                !pending.iter().enumerate().any(|(i, &(f, _))| i != k && self.root(f) == dst)
            });
            if let Some(k) = free {
                moves.push(pending.remove(k));
                continue;
            }
            // Cycles only: save the first source and read the saved bytes instead.
            let saved = self.root(pending[0].0);
            let b = &self.bufs[saved];
            let t = self.clock;
            let tmp = Buffer { place: None, alias: None, def: t, last: t, ..b.clone() };
            self.bufs.push(tmp);
            let tmp = self.bufs.len() - 1;
            moves.push((saved, tmp));
            for p in &mut pending {
                if self.root(p.0) == saved {
                    p.0 = tmp;
                }
            }
        }
        moves
    }

    fn slot_of(
        &self,
        vals: &HashMap<NodeIndex, Val>,
        o: NodeIndex,
        comp: &Computation,
        n: NodeIndex,
    ) -> Result<Slot, CgError> {
        match vals.get(&o) {
            Some(Val::A(s)) => Ok(*s),
            _ => Err(cg(CgError::new("operand is not an array buffer".into()), comp, n)),
        }
    }

    /// The leaves a kernel over `roots` reads (the instructions `is_leaf` accepts, reached
    /// from the roots through operands), in program order: the kernel's argument slots and
    /// each leaf's positions among them.
    fn leaf_args(
        &mut self,
        comp: &Computation,
        roots: &[NodeIndex],
        vals: &HashMap<NodeIndex, Val>,
        is_leaf: impl Fn(NodeIndex) -> bool,
    ) -> (Vec<Slot>, Vec<(NodeIndex, Vec<usize>)>) {
        let mut leaves: Vec<NodeIndex> = Vec::new();
        let mut seen = HashSet::new();
        let mut stack = roots.to_vec();
        while let Some(x) = stack.pop() {
            if !seen.insert(x) {
                continue;
            }
            if is_leaf(x) {
                leaves.push(x);
                continue;
            }
            stack.extend(comp.operands(x));
        }
        leaves.sort_by_key(|x| comp.instr(*x).seq);
        let mut args: Vec<Slot> = Vec::new();
        let mut leaf_slots = Vec::new();
        for &l in &leaves {
            let v = &vals[&l];
            let flat = v.flat();
            let idx: Vec<usize> = (args.len()..args.len() + flat.len()).collect();
            args.extend(flat);
            leaf_slots.push((l, idx));
            self.use_val(v);
        }
        (args, leaf_slots)
    }

    /// One loop kernel computing `outs` (one instruction, or the same-dims outputs of a
    /// multi-output fusion, see [`output_group`], computed together at each index); its
    /// leaves are the buffers reached first when walking up from the outputs (every
    /// operand at top level; inside a fusion, parameters and materialized instructions).
    fn loop_kernel(
        &mut self,
        comp: &Computation,
        outs: &[NodeIndex],
        vals: &HashMap<NodeIndex, Val>,
        materialize: &HashSet<NodeIndex>,
        fused: bool,
        steps: &mut Vec<Step>,
    ) -> Result<Vec<Val>, CgError> {
        let is_leaf = |x: NodeIndex| {
            !outs.contains(&x)
                && vals.contains_key(&x)
                && (!fused
                    || materialize.contains(&x)
                    || matches!(comp.instr(x).op, Op::Parameter { .. })
                    || matches!(vals.get(&x), Some(Val::A(_))))
        };
        let (mut args, leaf_slots) = self.leaf_args(comp, outs, vals, is_leaf);
        let inputs = args.len();
        let mut outputs = Vec::new();
        let mut results = Vec::new();
        for &n in outs {
            let out = self.new_val(&comp.instr(n).shape)?;
            let flat = out.flat();
            outputs.push((n, (args.len()..args.len() + flat.len()).collect::<Vec<usize>>()));
            args.extend(flat);
            results.push(out);
        }
        let first = comp.instr(outs[0]);
        let kind = match &first.op {
            _ if fused => KernelKind::Fusion,
            Op::Reduce { .. } | Op::ReduceWindow { .. } => KernelKind::Reduce,
            Op::Plain(o) if !matches!(o, Opcode::DynamicUpdateSlice) => KernelKind::Elementwise,
            Op::Compare { .. } => KernelKind::Elementwise,
            _ => KernelKind::DataMovement,
        };
        self.kernels += 1;
        let name = format!(
            "k{}_{}",
            self.kernels,
            first.name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
        );
        let spec = LoopKernel { comp, leaves: leaf_slots, outputs };
        let DefinedLoop { index: f, extent: split, rows } =
            define_loop_kernel(&mut self.jit, self.m, &name, &spec)?;
        // A reduction's work is its input, not its result.
        let work = outs
            .iter()
            .map(|&n| match &comp.instr(n).op {
                Op::Reduce { .. } => {
                    comp.operands(n).first().map_or(0, |&o| elements(&comp.instr(o).shape))
                }
                _ => elements(&comp.instr(n).shape),
            })
            .sum();
        let label: Vec<&str> = outs.iter().map(|&n| comp.instr(n).name.as_str()).collect();
        steps.push(Step::Kernel {
            f,
            args,
            inputs,
            rows,
            at: self.clock,
            kind,
            name: label.join("+"),
            split,
            work,
        });
        Ok(results)
    }

    /// Groups loop kernels over the same rows into chains ([`crate::row_chain`]), inside
    /// loops and conditionals too, and keeps the buffers they use live over each chain's
    /// span.
    fn row_chains(&mut self, steps: Vec<Step>) -> Vec<Step> {
        let root = (0..self.bufs.len()).map(|s| self.root(s)).collect();
        let bytes = self.bufs.iter().map(|b| b.bytes).collect();
        let bufs = row_chain::Buffers { root, bytes };
        let mut widen = Vec::new();
        let steps = chain_steps(steps, &bufs, &mut widen);
        for w in widen {
            for s in w.slots {
                let b = &mut self.bufs[s];
                b.def = b.def.min(w.from);
                b.last = b.last.max(w.to);
            }
        }
        steps
    }

    /// Gives every arena buffer an offset: intervals sorted by definition, first fit over
    /// the buffers still live.
    fn assign(&mut self) -> usize {
        let mut order: Vec<Slot> = (0..self.bufs.len())
            .filter(|&s| self.bufs[s].place.is_none() && self.bufs[s].alias.is_none())
            .collect();
        order.sort_by_key(|&s| (self.bufs[s].def, s));
        let mut live: Vec<(usize, usize, usize)> = Vec::new(); // (offset, end, last)
        let mut top = 0usize;
        for s in order {
            let (def, last, bytes) =
                (self.bufs[s].def, self.bufs[s].last, self.bufs[s].bytes.div_ceil(64) * 64);
            live.retain(|&(_, _, l)| l >= def);
            live.sort_unstable();
            let mut off = 0usize;
            for &(o, e, _) in &live {
                if off + bytes <= o {
                    break;
                }
                off = off.max(e);
            }
            live.push((off, off + bytes, last));
            top = top.max(off + bytes);
            self.bufs[s].place = Some(Place::Arena(off));
        }
        top
    }
}

/// Per-kernel statistics of a run.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Calls and total time per kernel kind.
    pub by_kind: HashMap<KernelKind, (u64, Duration)>,
    /// Kind, calls and total time per kernel (by its instruction's name).
    pub by_name: HashMap<String, (KernelKind, u64, Duration)>,
}

/// The memory one run works in: the arena, the buffer addresses and a kernel-argument
/// array; pooled so repeated and concurrent runs reuse them.
struct Scratch {
    arena: Vec<u64>,
    ptrs: Vec<*mut u8>,
    args: Vec<*mut u8>,
}

// SAFETY: the raw pointers point into this scratch's own arena, the executable's constants
// or the caller's arguments, and are rewritten at the start of every run.
unsafe impl Send for Scratch {}

/// A compiled program: kernels, steps and the buffer plan.
pub struct Executable {
    code: JitCode,
    consts: Vec<Vec<u64>>,
    bufs: Vec<Buffer>,
    arena_bytes: usize,
    steps: Vec<Step>,
    params: Vec<Shape>,
    param_slots: Vec<Slot>,
    outputs: Vec<Slot>,
    output_shapes: Vec<Shape>,
    arenas: Mutex<Vec<Scratch>>,
    /// The `rng-get-and-update-state` counters by (device, instruction), created at XLA
    /// CPU's initial value on first use (`hlo_interp::rng`). They live as long
    /// as the executable, so repeated runs, clones of a `Program` and cache hits continue
    /// one stream, as repeated executions of one XLA executable do; SPMD devices each
    /// have their own.
    rng: Mutex<std::collections::HashMap<(usize, usize), u128>>,
    pub kernel_count: usize,
}

#[derive(Debug)]
pub struct ExecError(pub String);

impl std::fmt::Display for ExecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for ExecError {}

impl Executable {
    /// Plans and compiles `m` (already optimized and checked; static shapes).
    pub fn compile(m: &Module) -> Result<Executable, CgError> {
        let mut p = Planner {
            m,
            jit: JitModule::new()?,
            bufs: Vec::new(),
            consts: Vec::new(),
            clock: 0,
            kernels: 0,
            rng_counters: 0,
        };
        let entry = m.entry();
        let mut params = Vec::new();
        let mut param_vals = Vec::new();
        let mut param_slots = Vec::new();
        let pshapes = m.entry_param_shapes();
        for s in &pshapes {
            let v = p.new_val(s)?;
            for slot in v.flat() {
                p.bufs[slot].place = Some(Place::Param(param_slots.len()));
                param_slots.push(slot);
            }
            params.push(s.clone());
            param_vals.push(v);
        }
        let _ = entry;
        let mut steps = Vec::new();
        let root = p.plan(m.entry, &param_vals, false, &mut steps)?;
        let outputs = root.flat();
        let output_shapes: Vec<Shape> = flat_arrays(
            &m.entry()
                .instr(m.entry().root().ok_or_else(|| CgError::new("entry has no root".into()))?)
                .shape,
        )
        .into_iter()
        .cloned()
        .collect();
        let end = p.tick();
        for &o in &outputs {
            p.bufs[o].last = end;
        }
        // Results computed by the program go straight into the output tensors; parameters,
        // constants and views returned as results are copied at the end.
        for (k, &o) in outputs.iter().enumerate() {
            let b = &mut p.bufs[o];
            if b.place.is_none() && b.alias.is_none() {
                b.place = Some(Place::Output(k));
            }
        }
        let steps = p.row_chains(steps);
        let arena_bytes = p.assign();
        let kernel_count = p.kernels;
        let code = p.jit.finish()?;
        Ok(Executable {
            code,
            consts: p.consts,
            bufs: p.bufs,
            arena_bytes,
            steps,
            params,
            param_slots,
            outputs,
            output_shapes,
            arenas: Mutex::new(Vec::new()),
            rng: Mutex::default(),
            kernel_count,
        })
    }

    pub fn param_shapes(&self) -> &[Shape] {
        &self.params
    }
    pub fn output_shapes(&self) -> &[Shape] {
        &self.output_shapes
    }
    pub fn arena_bytes(&self) -> usize {
        self.arena_bytes
    }
    pub fn code_bytes(&self) -> usize {
        self.code.code_bytes
    }

    /// Checks arguments (`first` then `rest`) against the entry parameters, naming the
    /// first that differs.
    pub fn check_args(&self, first: &[Tensor], rest: &[Tensor]) -> Result<(), ExecError> {
        let given = first.len() + rest.len();
        if given != self.param_slots.len() {
            return Err(ExecError(format!(
                "the program takes {} argument{}, {given} given",
                self.param_slots.len(),
                if self.param_slots.len() == 1 { "" } else { "s" }
            )));
        }
        for (i, (a, &slot)) in first.iter().chain(rest).zip(&self.param_slots).enumerate() {
            let b = &self.bufs[slot];
            let same = a.elem() == b.elem
                && a.dims().len() == b.dims.len()
                && a.dims().iter().zip(&b.dims).all(|(&x, &y)| x == y as u64);
            if !same {
                let dims: Vec<u64> = b.dims.iter().map(|&d| d as u64).collect();
                return Err(ExecError(format!(
                    "parameter {i}: expected {}, given {}",
                    Shape::array(b.elem, &dims),
                    a.shape()
                )));
            }
        }
        Ok(())
    }

    /// Runs the program; `stats` collects per-kernel time when given.
    pub fn run(
        &self,
        args: &[Tensor],
        stats: Option<&mut Stats>,
    ) -> Result<Vec<Tensor>, ExecError> {
        let mut outs = Vec::new();
        self.run_into(args, &[], &mut outs, stats)?;
        Ok(outs)
    }

    /// Runs the program on the parameters `first` followed by `rest`, writing the outputs
    /// into `outs` (reused when it already holds tensors of the output shapes, so a loop
    /// allocates nothing after its first run).
    pub fn run_into(
        &self,
        first: &[Tensor],
        rest: &[Tensor],
        outs: &mut Vec<Tensor>,
        stats: Option<&mut Stats>,
    ) -> Result<(), ExecError> {
        self.run_on(None, first, rest, outs, stats)
    }

    /// [`Self::run_into`] as device `device` of an SPMD run (`None`: the only device).
    pub fn run_on(
        &self,
        device: Option<Device<'_>>,
        first: &[Tensor],
        rest: &[Tensor],
        outs: &mut Vec<Tensor>,
        mut stats: Option<&mut Stats>,
    ) -> Result<(), ExecError> {
        self.check_args(first, rest)?;
        let pooled = self.arenas.lock().map_err(|_| ExecError("arena pool poisoned".into()))?.pop();
        let mut sc = pooled.unwrap_or_else(|| Scratch {
            arena: vec![0u64; self.arena_bytes.div_ceil(8).max(1)],
            ptrs: Vec::with_capacity(self.bufs.len()),
            args: Vec::with_capacity(64),
        });
        let base = sc.arena.as_mut_ptr() as *mut u8;
        let arg = |i: usize| if i < first.len() { &first[i] } else { &rest[i - first.len()] };
        // Output tensors: reused when they already have the result shapes (every run of a
        // loop after the first), else made once.
        let reuse = outs.len() == self.outputs.len()
            && outs.iter().zip(&self.outputs).all(|(t, &o)| {
                t.elem() == self.bufs[o].elem
                    && t.bytes().len() == self.bufs[o].bytes
                    && t.dims().iter().zip(&self.bufs[o].dims).all(|(&x, &y)| x == y as u64)
            });
        if !reuse {
            outs.clear();
            for &o in &self.outputs {
                let b = &self.bufs[o];
                let dims: Vec<u64> = b.dims.iter().map(|&d| d as u64).collect();
                outs.push(Tensor::zeros(b.elem, &dims).map_err(|e| ExecError(e.to_string()))?);
            }
        }
        sc.ptrs.clear();
        sc.ptrs.extend(self.bufs.iter().map(|b| match b.place {
            Some(Place::Arena(o)) => base.wrapping_add(o),
            Some(Place::Output(k)) => outs[k].bytes_mut().as_mut_ptr(),
            Some(Place::Param(i)) => arg(i).bytes().as_ptr() as *mut u8,
            Some(Place::Const(i)) => self.consts[i].as_ptr() as *mut u8,
            None => std::ptr::null_mut(),
        }));
        // Aliases come after their sources.
        for (i, b) in self.bufs.iter().enumerate() {
            if let Some(a) = b.alias {
                sc.ptrs[i] = sc.ptrs[a];
            }
        }
        let Scratch { ptrs, args, .. } = &mut sc;
        // Kernels run with subnormals flushed, as XLA's CPU backend runs them (see fpenv).
        let result = crate::fpenv::with_host_fp_mode(|| {
            self.exec(&self.steps, ptrs, args, &mut stats, device)
        });
        if result.is_ok() {
            for (k, (t, &o)) in outs.iter_mut().zip(&self.outputs).enumerate() {
                if matches!(self.bufs[o].place, Some(Place::Output(j)) if j == k) {
                    continue; // already written in place
                }
                let n = self.bufs[o].bytes;
                // SAFETY: the buffer holds `n` bytes written by the program; `t` has `n` bytes.
                unsafe { std::ptr::copy_nonoverlapping(sc.ptrs[o], t.bytes_mut().as_mut_ptr(), n) };
            }
        }
        if let Ok(mut pool) = self.arenas.lock() {
            pool.push(sc);
        }
        result
    }

    fn exec(
        &self,
        steps: &[Step],
        ptrs: &[*mut u8],
        scratch: &mut Vec<*mut u8>,
        stats: &mut Option<&mut Stats>,
        device: Option<Device<'_>>,
    ) -> Result<(), ExecError> {
        for step in steps {
            let t0 = stats.is_some().then(Instant::now);
            let (kind, name): (KernelKind, &str) = match step {
                Step::Kernel { f, args, kind, name, split, work, .. } => {
                    scratch.clear();
                    scratch.extend(args.iter().map(|&s| ptrs[s]));
                    let kf = self.code.fns[*f];
                    let a = SendPtr(scratch.as_ptr());
                    // SAFETY: the kernel reads and writes exactly the buffers in `args`, whose
                    // sizes the planner derived from the same shapes the kernel was built
                    // for; split ranges are disjoint.
                    in_halves(*split, *work, |lo, hi| {
                        let a = &a; // the whole wrapper, not its raw field
                        unsafe { kf(a.0, lo, hi) }
                    });
                    (*kind, name)
                }
                Step::Chain { kernels, args, rows, block, work, name } => {
                    scratch.clear();
                    scratch.extend(args.iter().map(|&s| ptrs[s]));
                    let a = SendPtr(scratch.as_ptr());
                    let block = *block;
                    in_halves(*rows, *work, |lo, hi| {
                        let a = &a; // the whole wrapper, not its raw field
                        let mut b = lo;
                        while b < hi {
                            let e = (b + block).min(hi);
                            for k in kernels {
                                // SAFETY: as a kernel step's, each kernel's arguments
                                // starting at `at`; the chain's kernels read what the others
                                // write only in the rows `b..e` they have computed.
                                unsafe { self.code.fns[k.f](a.0.add(k.at), b, e) }
                            }
                            b = e;
                        }
                    });
                    (kernels[0].kind, name.as_str())
                }
                Step::Dot { lhs, rhs, out, round, dims, name } => {
                    crate::library::dot(
                        &self.bufs[*lhs].view(ptrs[*lhs]),
                        &self.bufs[*rhs].view(ptrs[*rhs]),
                        &self.bufs[*out].view(ptrs[*out]),
                        *round,
                        dims,
                    )
                    .map_err(|e| ExecError(format!("`{name}`: {e}")))?;
                    (KernelKind::Dot, name)
                }
                Step::Conv { lhs, rhs, out, conv, name } => {
                    crate::library::conv(
                        &self.bufs[*lhs].view(ptrs[*lhs]),
                        &self.bufs[*rhs].view(ptrs[*rhs]),
                        &self.bufs[*out].view(ptrs[*out]),
                        conv,
                    )
                    .map_err(|e| ExecError(format!("`{name}`: {e}")))?;
                    (KernelKind::Convolution, name)
                }
                Step::Sort { cmp, operands, outs, dim, name } => {
                    crate::library::sort(
                        self.code.fns[*cmp],
                        &operands.iter().map(|&s| self.bufs[s].view(ptrs[s])).collect::<Vec<_>>(),
                        &outs.iter().map(|&s| self.bufs[s].view(ptrs[s])).collect::<Vec<_>>(),
                        *dim,
                    );
                    (KernelKind::Sort, name)
                }
                Step::TopK { operand, values, indices, k, largest, name } => {
                    crate::library::topk(
                        &self.bufs[*operand].view(ptrs[*operand]),
                        &self.bufs[*values].view(ptrs[*values]),
                        &self.bufs[*indices].view(ptrs[*indices]),
                        *k,
                        *largest,
                    )
                    .map_err(|e| ExecError(format!("`{name}`: {e}")))?;
                    (KernelKind::Sort, name)
                }
                Step::DeviceId { out } => {
                    let d = device.map_or(0, |d| d.index) as u32;
                    // SAFETY: `out` is a u32 scalar buffer.
                    unsafe { std::ptr::write_unaligned(ptrs[*out] as *mut u32, d) };
                    (KernelKind::Copy, "partition-id")
                }
                Step::RngState { out, counter, delta } => {
                    let now = {
                        let mut map = self.rng.lock().unwrap_or_else(|e| e.into_inner());
                        let c = map
                            .entry((device.map_or(0, |d| d.index), *counter))
                            .or_insert(hlo_interp::rng::INITIAL_STATE);
                        let now = *c;
                        *c = c.wrapping_add(*delta as i128 as u128);
                        now
                    };
                    // SAFETY: `out` is a u64[2] buffer (16 bytes).
                    unsafe {
                        std::ptr::write_unaligned(ptrs[*out] as *mut u64, now as u64);
                        std::ptr::write_unaligned(
                            (ptrs[*out] as *mut u64).add(1),
                            (now >> 64) as u64,
                        );
                    }
                    (KernelKind::Copy, "rng-get-and-update-state")
                }
                Step::Collective { opcode, attrs, reducer, operands, outs, name } => {
                    self.collective(device, *opcode, attrs, *reducer, operands, outs, ptrs)
                        .map_err(|e| ExecError(format!("`{name}`: {e}")))?;
                    (KernelKind::Collective, name)
                }
                Step::Copy { moves } => {
                    self.copy(moves, ptrs);
                    (KernelKind::Copy, "copy")
                }
                Step::While { cond, pred, body, write_back } => {
                    loop {
                        self.exec(cond, ptrs, scratch, stats, device)?;
                        // SAFETY: `pred` is a one-byte pred buffer the condition wrote.
                        if unsafe { *ptrs[*pred] } == 0 {
                            break;
                        }
                        self.exec(body, ptrs, scratch, stats, device)?;
                        self.copy(write_back, ptrs);
                    }
                    continue;
                }
                Step::Conditional { selector, is_pred, branches } => {
                    let b = &self.bufs[*selector];
                    // SAFETY: the selector is a scalar pred or s32 buffer.
                    let k = unsafe {
                        if *is_pred {
                            if *ptrs[*selector] != 0 { 0 } else { 1 }
                        } else {
                            let v = std::ptr::read_unaligned(ptrs[*selector] as *const i32) as i64;
                            let n = branches.len() as i64;
                            (if v < 0 || v >= n { n - 1 } else { v }) as usize
                        }
                    };
                    let _ = b;
                    let (bs, moves) = &branches[k];
                    self.exec(bs, ptrs, scratch, stats, device)?;
                    self.copy(moves, ptrs);
                    continue;
                }
            };
            if let (Some(t0), Some(st)) = (t0, stats.as_mut()) {
                let d = t0.elapsed();
                let e = st.by_kind.entry(kind).or_default();
                e.0 += 1;
                e.1 += d;
                let e = st.by_name.entry(name.to_string()).or_insert((kind, 0, Duration::ZERO));
                e.1 += 1;
                e.2 += d;
            }
        }
        Ok(())
    }

    /// Runs one collective: the operands' bytes go to the device fabric as they lie in
    /// the arena, meet the other devices' there, and the results are copied back.
    #[allow(clippy::too_many_arguments)]
    fn collective(
        &self,
        device: Option<Device<'_>>,
        opcode: Opcode,
        attrs: &hlo_ir::op::CollectiveAttrs,
        reducer: Option<Opcode>,
        operands: &[Slot],
        outs: &[Slot],
        ptrs: &[*mut u8],
    ) -> Result<(), String> {
        let Some(dev) = device else {
            // One device: every collective over a group of one is the identity (the results
            // are buffers of their own).
            for (&f, &t) in operands.iter().zip(outs) {
                // SAFETY: both buffers hold `bytes` bytes of the same shape and are distinct.
                unsafe { std::ptr::copy_nonoverlapping(ptrs[f], ptrs[t], self.bufs[t].bytes) };
            }
            return Ok(());
        };
        let tensors: Vec<Tensor> = operands
            .iter()
            .map(|&s| {
                let b = &self.bufs[s];
                // SAFETY: buffer `s` holds `b.bytes` bytes of its shape.
                let bytes = unsafe { std::slice::from_raw_parts(ptrs[s], b.bytes) }.to_vec();
                Tensor::from_bytes(b.elem, b.dims.iter().map(|&d| d as u64).collect(), bytes)
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<_, String>>()?;
        let results = hlo_fabric::execute(dev.fabric, dev.index, opcode, attrs, reducer, tensors)
            .map_err(|e| e.to_string())?;
        if results.len() != outs.len() {
            return Err(format!("{} results for {} outputs", results.len(), outs.len()));
        }
        for (t, &o) in results.iter().zip(outs) {
            if t.bytes().len() != self.bufs[o].bytes {
                return Err(format!(
                    "a result of {} bytes for a buffer of {}",
                    t.bytes().len(),
                    self.bufs[o].bytes
                ));
            }
            // SAFETY: buffer `o` holds exactly this many bytes.
            unsafe { std::ptr::copy_nonoverlapping(t.bytes().as_ptr(), ptrs[o], t.bytes().len()) };
        }
        Ok(())
    }

    /// Runs the copies of a [`Planner::parallel_copy`] in order.
    fn copy(&self, moves: &[(Slot, Slot)], ptrs: &[*mut u8]) {
        for &(f, t) in moves {
            // SAFETY: both buffers hold values of the same byte size; the planner ordered
            // the copies so that no source is overwritten before it is read, and views of
            // one buffer are never copied onto each other (`ptr::copy` allows overlap).
            unsafe { std::ptr::copy(ptrs[f], ptrs[t], self.bufs[t].bytes) };
        }
    }
}

/// Elements a loop kernel must compute before it is split across the thread pool.
const PARALLEL_WORK: u64 = 1 << 16;

/// Elements of the arrays in `s` (a kernel's work).
fn elements(s: &Shape) -> u64 {
    flat_arrays(s)
        .iter()
        .map(|a| static_dims(a).map_or(0, |d| d.iter().product::<i64>() as u64))
        .sum()
}

/// `run(0, extent)`, or for `work` of at least [`PARALLEL_WORK`] elements its two halves
/// at once on the library pool (as dots and convolutions: one set of threads for all
/// parallel work; two pools on two cores spin against each other: the bench CNN step took
/// 27 ms instead of 21). The pool's threads are in the flushing mode.
fn in_halves(extent: i64, work: u64, run: impl Fn(i64, i64) + Sync) {
    if work >= PARALLEL_WORK && extent >= 2 {
        let mid = extent / 2;
        crate::fpenv::on_library_pool(|| rayon::join(|| run(0, mid), || run(mid, extent)));
    } else {
        run(0, extent);
    }
}

/// A kernel-argument array shared by the two halves of a split kernel.
struct SendPtr(*const *mut u8);
// SAFETY: the array and the buffers it points to outlive the `rayon::join` that uses it;
// the halves only read the array and write disjoint elements.
unsafe impl Sync for SendPtr {}

impl Buffer {
    fn view(&self, ptr: *mut u8) -> View {
        View { ptr, elem: self.elem, dims: self.dims.iter().map(|&d| d as usize).collect() }
    }
}
