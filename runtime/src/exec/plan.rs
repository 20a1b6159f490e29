//! The plan an [`Executable`](super::Executable) runs: its buffers ([`Buffer`], each in
//! one [`Place`]), the values that name them ([`Val`]) and the [`Step`]s over them, in
//! order. The [planner](super::planner) writes it; the [executor](super::executor) reads
//! it. Nothing here plans or runs.

use hlo_ir::{ElemType, Opcode};

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
    pub(super) fn flat(&self) -> Vec<Slot> {
        let mut v = Vec::new();
        self.leaves(&mut v);
        v
    }
}

#[derive(Clone, Debug)]
pub(super) enum Place {
    Arena(usize),
    /// Written straight into the caller's output tensor `k` (no copy at the end).
    Output(usize),
    Param(usize),
    Const(usize),
}

#[derive(Clone, Debug)]
pub(super) struct Buffer {
    pub(super) bytes: usize,
    pub(super) elem: ElemType,
    pub(super) dims: Vec<i64>,
    pub(super) place: Option<Place>,
    /// A reshaped view of another buffer (same bytes, other dims).
    pub(super) alias: Option<Slot>,
    pub(super) def: usize,
    pub(super) last: usize,
    /// The instruction whose value it holds (name and span), for errors; `None` for the
    /// entry's parameters.
    pub(super) at: Option<(String, hlo_ir::Span)>,
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
            KernelKind::Convolution => "convolution (library)",
            KernelKind::Copy => "copy",
            KernelKind::Scatter => "scatter (jit)",
            KernelKind::Sort => "sort/topk (library, jit comparator)",
            KernelKind::Collective => "collective (fabric)",
        }
    }

    /// The instruction-set path a kernel of this kind takes ([`crate::cpu`]), for the
    /// kinds whose path does not depend on the call (a dot's and a convolution's do: the
    /// executor records what their dispatchers returned).
    pub fn path(self) -> &'static str {
        match self {
            KernelKind::Fusion
            | KernelKind::Elementwise
            | KernelKind::Reduce
            | KernelKind::DataMovement
            | KernelKind::Scatter => crate::cpu::loops(),
            KernelKind::Sort => crate::cpu::cranelift(),
            KernelKind::Dot => "gemm",
            KernelKind::Convolution => "convolution",
            KernelKind::Copy => "memcpy",
            KernelKind::Collective => "fabric",
        }
    }
}

/// Buffer copies `(from, to)`, run one after the other in this order (a
/// `Planner::parallel_copy`).
pub(super) type Moves = Vec<(Slot, Slot)>;

#[derive(Debug)]
pub(crate) enum Step {
    /// `split`: the extent of the kernel's split range (its leading dimensions flattened,
    /// [`crate::codegen::kernel::split_of`]); `work`: elements computed (large kernels
    /// split their range over the pool). `args`: the `inputs` buffers it reads, then those
    /// it writes. `rows`: when its unit `r` computes row `r` of every
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
    /// `Planner::parallel_copy`).
    Copy {
        moves: Moves,
    },
    /// `write_back`: the body's results into the state (a `Planner::parallel_copy`).
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
    /// A collective across the devices of an SPMD run (see [`Device`](super::Device)). On
    /// one device (no fabric) each result is a copy of its operand when `alone` says it
    /// can be (groups of one, results of the operands' shapes), else `alone` is the error.
    Collective {
        opcode: Opcode,
        attrs: Box<hlo_ir::op::CollectiveAttrs>,
        reducer: Option<Opcode>,
        operands: Vec<Slot>,
        outs: Vec<Slot>,
        alone: Result<(), hlo_fabric::FabricError>,
        name: String,
    },
    /// Writes this device's index (`partition-id`, `replica-id`) as a u32 scalar.
    DeviceId {
        out: Slot,
    },
    /// `rng-get-and-update-state`: writes counter `counter` as `u64[2]` (low, high), then
    /// adds `delta` (see [`Executable`](super::Executable)'s `rng`).
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

/// Steps with parallel work from which a run on one device runs on a thread of the
/// runtime's pool rather than the caller's: there each split kernel's parts start from a
/// pool thread that takes one of them itself, instead of a caller that hands them all
/// over, sleeps, and is woken when they are done; but getting onto the pool costs the run
/// one hand-off to a sleeping thread. Measured (release, this 2-core host, two threads,
/// `hloc run --repeat`, three alternating runs each): on the pool the bench transformer
/// SGD step took 67.8-78.5 against 69.8-82.5 ms, softmax 662-741 against 709-847 µs,
/// MLP-Adam 2860-2983 against 3002-3782 µs, the CNN step 5203-8145 against 5254-8856 µs;
/// the corpus MLP-SGD step (no parallel step) 69-74 against 23 µs, and the corpus
/// transformer 213 against 157 µs: the hand-off is some 50 µs here, a split kernel's
/// wake-up of the caller 10-20.
pub(crate) const IN_POOL_STEPS: usize = 8;

/// The steps of `steps` (control flow's included) that split their work over the pool on
/// more than one thread: loop kernels and row chains of at least two parts' work
/// ([`crate::pool::MIN_WORK_PER_PART`]), dots of at least `TASKS_MNK` multiply-adds, and
/// every convolution, sort and top-k.
pub(crate) fn parallel_steps(steps: &[Step], bufs: &[Buffer]) -> usize {
    let elements = |s: Slot| bufs[s].dims.iter().map(|&d| d.max(0) as u64).product::<u64>();
    steps
        .iter()
        .map(|step| match step {
            Step::Kernel { work, split, .. } => {
                usize::from(*split > 1 && *work >= 2 * crate::pool::MIN_WORK_PER_PART)
            }
            Step::Chain { work, rows, .. } => {
                usize::from(*rows > 1 && *work >= 2 * crate::pool::MIN_WORK_PER_PART)
            }
            Step::Dot { lhs, out, dims, .. } => {
                let k: u64 = dims
                    .lhs_contracting
                    .iter()
                    .filter_map(|&d| bufs[*lhs].dims.get(d as usize))
                    .map(|&d| d.max(0) as u64)
                    .product();
                let mnk = elements(*out).saturating_mul(k);
                usize::from(mnk >= hlo_kernels::gemm::TASKS_MNK as u64)
            }
            Step::Conv { .. } | Step::Sort { .. } | Step::TopK { .. } => 1,
            Step::While { cond, body, .. } => {
                parallel_steps(cond, bufs) + parallel_steps(body, bufs)
            }
            Step::Conditional { branches, .. } => {
                branches.iter().map(|(b, _)| parallel_steps(b, bufs)).max().unwrap_or(0)
            }
            _ => 0,
        })
        .sum()
}
