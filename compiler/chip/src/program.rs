//! The program-level TPU IR: a whole compiled step as the chip runs it, above the
//! single-GEMM [`super::tile_ir::TileProgram`].
//!
//! A [`Program`] is a set of [`Block`]s (straight-line kernel sequences: the entry, loop
//! bodies and conditions, conditional branches) over HBM [`Buffer`]s. A [`Kernel`] is one
//! launch: it streams its operands from HBM into VMEM tiles by DMA, works on them on the
//! MXUs ([`Matmul`]), the vector unit, the transcendental unit and the cross-lane unit
//! ([`VectorWork`]), and streams its results back; tiles are double-buffered so DMA
//! overlaps compute. Control flow ([`Item::While`], [`Item::Cond`], [`Item::Call`]) names
//! other blocks; the lowering records a loop's trip count and a conditional's branch when
//! the program states them without values (`hlo_analysis::while_loop_analysis`, constant
//! selectors), and the engine times such programs statically; otherwise the simulator
//! ([`super::chip`]) follows them as executed.
//!
//! The IR knows nothing of HLO: the lowering (`hlo_tpu::lower`) produces it, the
//! simulator consumes it. Names are labels (the source instruction's name) for reports.
//! It imports nothing: the models above it ([`super::chip`], [`super::ici`]) read it.
//!
//! Printed form (`hloc compile --emit tiles`):
//!
//! ```text
//! tpu.program "train_step" config=tpu-v3 (2 cores x 2 MXUs 128x128, VMEM 16 MiB/core)
//! buffer %0 "Arg_0.1" f32[784,512] 1605632 B hbm (parameter)
//! block 0 "main" (entry):
//!   kernel 3 "dot.4" matmul cores=2 tiles=2
//!     vmem  in0 [0, 802816) x2  out [1605632, 1867776) x2
//!     dma.in    %0 1605632 B, %1 401408 B
//!     mxu.matmul batch=1 m=128 n=512 k=784 passes=1 bf16 per-mxu gemm(m=64, n=256, k=784) x1
//!     dma.out   %5 262144 B
//! ```

/// A collective's traffic: its kind, each chip's buffer (operands; the result of an
/// all-gather) and the size of its device groups ([`super::ici`] times it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collective {
    pub kind: &'static str,
    pub bytes: u64,
    pub group: u64,
    /// The device ids of the first group (every group of a collective has the same
    /// shape); for a collective-permute, its pairs flattened (source, target, ...).
    pub members: Vec<u32>,
}

/// An HBM buffer: a parameter, a constant or a kernel's result.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    /// The producing instruction's name.
    pub name: String,
    /// The element type and dims, printed (`f32[128,784]`).
    pub ty: String,
    pub bytes: u64,
    pub origin: Origin,
    /// In an on-chip memory space (`S(n)` with `n > 0` in a layout XLA's memory-space
    /// assignment wrote: VMEM, or CMEM on v4), not HBM: kernels reading or writing it move
    /// no HBM bytes.
    pub on_chip: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Parameter,
    Constant,
    Result,
}

/// The class of a kernel, for reports grouped by op class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// A dot (or a fusion around one): MXU.
    Matmul,
    /// A convolution (or a fusion around one), as an implicit GEMM on the MXU.
    Conv,
    /// Elementwise work on the vector unit (loop fusions, standalone elementwise ops).
    Elementwise,
    /// Reductions (input fusions, reduce, reduce-window, select-and-scatter).
    Reduce,
    /// Data movement: copies, transposes, (dynamic) slices and updates, gather, scatter.
    Movement,
    /// Sorting networks (sort, top-k).
    Sort,
    /// Random-number generation.
    Rng,
    /// A collective between chips over the ICI (multi-chip programs).
    Collective,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Matmul => "matmul",
            Class::Conv => "conv",
            Class::Elementwise => "elementwise",
            Class::Reduce => "reduce",
            Class::Movement => "movement",
            Class::Sort => "sort",
            Class::Rng => "rng",
            Class::Collective => "collective",
        }
    }
}

/// Matrix-unit work: `batch` independent products `[m,k] x [k,n]`, each run as `passes`
/// bf16 passes with f32 accumulation (1 for bf16 operands or DEFAULT precision, 3 for
/// HIGH, 6 for HIGHEST on f32). A convolution is its implicit GEMM: `m` = output
/// positions x batch, `k` = taps x input features per group, `n` = output features per
/// group, `batch` = groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Matmul {
    pub batch: u64,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub passes: u32,
    /// Whether an operand must be transposed on the cross-lane unit before it can enter
    /// the array (its contracting dimension is not where the MXU wants it).
    pub lhs_transposed: bool,
    pub rhs_transposed: bool,
}

impl Matmul {
    /// Multiply-accumulates the array performs (all passes).
    pub fn macs(&self) -> u64 {
        self.batch * self.m * self.n * self.k * self.passes as u64
    }
}

/// Vector-side work, in element operations (one op on one 32-bit element).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VectorWork {
    /// VPU ALU element-ops (add, multiply, compare, select, convert, ...).
    pub alu: u64,
    /// Transcendental element-ops on the EUP (exp, log, reciprocal, rsqrt, tanh, ...).
    pub eup: u64,
    /// Cross-lane element-ops on the XLU (lane reductions, transposes, lane shuffles).
    pub xlu: u64,
}

impl std::ops::AddAssign for VectorWork {
    fn add_assign(&mut self, o: VectorWork) {
        self.alu += o.alu;
        self.eup += o.eup;
        self.xlu += o.xlu;
    }
}

/// One kernel launch.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub name: String,
    /// What it computes, in words (`loop fusion`, `dot`, `reduce-window`, ...).
    pub what: String,
    pub class: Class,
    /// Operand buffers and the bytes read from each.
    pub reads: Vec<(usize, u64)>,
    /// Result buffers and the bytes written to each.
    pub writes: Vec<(usize, u64)>,
    pub matmul: Option<Matmul>,
    pub vector: VectorWork,
    /// Independent rows of work that may be split across cores (1: not splittable).
    pub parallel: u64,
    /// FLOPs and transcendentals as XLA's cost analysis counts them.
    pub flops: f64,
    pub transcendentals: f64,
    /// Set on collectives: what crosses the ICI.
    pub collective: Option<Collective>,
    /// Set on asynchronous copies (`copy-start`, an `async-start` of a slice): the bytes
    /// the chip's DMA engines move beside compute.
    pub dma: Option<u64>,
    /// Issued by a `*-start` and waited for by its `*-done` (what lies between overlaps
    /// it); a collective or copy without it blocks the program until it completes when
    /// the program is run as scheduled ([`Program::scheduled`]).
    pub asynchronous: bool,
}

impl Kernel {
    pub fn read_bytes(&self) -> u64 {
        self.reads.iter().map(|r| r.1).sum()
    }
    pub fn write_bytes(&self) -> u64 {
        self.writes.iter().map(|w| w.1).sum()
    }
}

/// One entry of a block.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Kernel(Kernel),
    /// `while`: run `cond`, then `body` while the condition holds. `trip_count` when the
    /// lowering could prove it; otherwise known only when the program runs.
    While {
        name: String,
        cond: usize,
        body: usize,
        trip_count: Option<u64>,
    },
    /// `conditional`: one of `branches` runs; `taken` when the selector is a constant.
    Cond {
        name: String,
        branches: Vec<usize>,
        taken: Option<usize>,
    },
    /// `call`: the block runs inline.
    Call {
        name: String,
        block: usize,
    },
}

/// A straight-line sequence of items (one HLO computation that is not fused).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Block {
    pub name: String,
    pub items: Vec<Item>,
}

/// A whole lowered program.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub name: String,
    pub buffers: Vec<Buffer>,
    pub blocks: Vec<Block>,
    pub entry: usize,
    /// The module was scheduled by the compiler that printed it (`is_scheduled=true`: XLA
    /// TPU's per-chip program): asynchronous work starts where the program issues it and
    /// synchronous collectives block, instead of each collective starting as soon as its
    /// operands exist.
    pub scheduled: bool,
}

impl Program {
    /// Sets the trip count of every while loop named `name` (a data-dependent loop the
    /// user knows the count of); false when there is none.
    pub fn set_trip_count(&mut self, name: &str, n: u64) -> bool {
        let mut found = false;
        for item in self.blocks.iter_mut().flat_map(|b| &mut b.items) {
            if let Item::While { name: w, trip_count, .. } = item
                && w == name
            {
                *trip_count = Some(n);
                found = true;
            }
        }
        found
    }

    /// Every kernel of every block.
    pub fn kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.blocks.iter().flat_map(|b| &b.items).filter_map(|i| match i {
            Item::Kernel(k) => Some(k),
            _ => None,
        })
    }
}
