//! Lowering of an optimized (fused) module onto the program-level TPU IR
//! ([`hlo_chip::program`]).
//!
//! Every computation that runs as control flow (the entry, while conditions and bodies,
//! conditional branches, call targets) becomes a [`Block`]; fused computations and
//! reducers are folded into the kernel that uses them. Per instruction:
//!
//! - **No kernel**: parameters and constants (HBM buffers), `get-tuple-element`, `tuple`,
//!   `bitcast`, `reshape` (a relabelling of the same bytes in row-major order),
//!   `add-dependency`, `opt-barrier`, `after-all`, `domain`.
//! - **Control flow**: `while`, `conditional`, `call` become items naming their blocks.
//! - **One kernel** for everything else: fusions (the work of every fused instruction),
//!   dot and convolution (MXU; a convolution as its implicit GEMM, incl. dilated and
//!   grouped weight/input gradients), elementwise ops, reduce, reduce-window,
//!   select-and-scatter, gather, scatter, (dynamic) slices and updates, sort, top-k,
//!   rng, copies and transposes; and collectives (`all-reduce`, `all-gather`,
//!   `reduce-scatter`, `all-to-all`, `collective-permute`), whose ICI traffic the kernel
//!   carries ([`hlo_chip::ici`]).
//!
//! Anything else (host transfers, unknown custom-calls, ...) is an error naming the
//! instruction: nothing is silently skipped.
//!
//! Work estimates are element-ops (see [`hlo_chip::program::VectorWork`]): one VPU op
//! per element per arithmetic instruction; one EUP op per element for transcendentals
//! (divide: a reciprocal on the EUP and a multiply on the VPU); reductions one reducer
//! application per input element, plus a cross-lane tree (7 rotate-and-combine steps
//! of a 128-lane register per 8 rows) when the minor dimension is reduced; transposes one
//! XLU op per element; sorts a bitonic network (`log2 n (log2 n + 1) / 2` stages of
//! compare-and-exchange, 3 ops per element each). FLOPs and transcendentals come from
//! [`hlo_analysis::cost`] (XLA's counting rules), not from these estimates.

use std::collections::HashMap;

use hlo_ir::op::{Branches, FusionKind, Precision};
use hlo_ir::{CompId, Computation, Diagnostic, ElemType, Module, NodeIndex, Op, Opcode, Shape};

use hlo_analysis::cost;
use hlo_chip::program::{Block, Buffer, Class, Item, Kernel, Matmul, Origin, Program, VectorWork};

/// How many bf16 passes an f32 matmul takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Passes {
    /// As each dot/convolution's `operand_precision` says (DEFAULT: 1, HIGH: 3, HIGHEST: 6),
    /// what a TPU does.
    AsWritten,
    /// Every f32 matmul at this precision.
    All(Precision),
}

/// bf16 passes for a matmul of `elem` operands at `precision`.
/// The real products a matmul of `elem` values takes: four for complex (`rr - ii`,
/// `ri + ir`), else one.
fn complex_products(elem: ElemType) -> u64 {
    if elem.is_complex() { 4 } else { 1 }
}

pub fn passes_for(elem: ElemType, precision: Precision) -> u32 {
    // c64 multiplies its f32 parts.
    if elem != ElemType::F32 && elem != ElemType::C64 {
        return 1;
    }
    match precision {
        Precision::Default => 1,
        Precision::High => 3,
        Precision::Highest => 6,
    }
}

/// The precision a dot/convolution runs at under `passes` (the highest of its operands').
pub fn precision_of(written: &[Precision], passes: Passes) -> Precision {
    match passes {
        Passes::All(p) => p,
        Passes::AsWritten => {
            let rank = |p: &Precision| match p {
                Precision::Default => 0,
                Precision::High => 1,
                Precision::Highest => 2,
            };
            written.iter().copied().max_by_key(rank).unwrap_or(Precision::Default)
        }
    }
}

/// Instructions whose result is their first operand's buffers (no kernel): bitcasts,
/// reshapes (row-major), barriers, dependencies, domains, single-device identity
/// custom-calls.
fn aliases_first_operand(op: &Op) -> bool {
    match op {
        Op::Plain(Opcode::Bitcast | Opcode::OptBarrier | Opcode::AddDependency)
        | Op::Reshape { .. }
        | Op::Domain { .. } => true,
        Op::CustomCall(cc) => {
            cc.is_single_device_identity() || cc.target == "AssumeGatherIndicesInBound"
        }
        _ => false,
    }
}

/// Custom-calls of XLA TPU's compiled programs that do no work of their own: buffer
/// bookkeeping (`AllocateBuffer`: an uninitialized buffer; `ConcatBitcast`: operands laid
/// out side by side read as one array; `AssumeGatherIndicesInBound`: a promise about
/// indices) and the markers of an asynchronous collective fusion (its
/// `AsyncCollectiveStart`/`AsyncCollectiveDone` roots: the collective inside is the
/// work) or of an asynchronous call's preparation (`PrepareAsyncCall*`: the SparseCore
/// offloads of v5p, whose `call-start` is the work).
fn bookkeeping(target: &str) -> bool {
    matches!(
        target,
        "AllocateBuffer"
            | "ConcatBitcast"
            | "AssumeGatherIndicesInBound"
            | "AsyncCollectiveStart"
            | "AsyncCollectiveDone"
            | "PrepareAsyncCallStart"
            | "PrepareAsyncCallDone"
    )
}

/// The root custom-call target of a fused computation (`AsyncCollectiveStart`, ...).
fn fusion_root_target<'a>(m: &'a Module, op: &Op) -> Option<&'a str> {
    let Op::Fusion { calls, .. } = op else { return None };
    let f = m.comp(*calls);
    match &f.instr(f.root()?).op {
        Op::CustomCall(cc) => Some(cc.target.as_str()),
        _ => None,
    }
}

/// The memory space of an array's layout (`S(1)` in `{1,0:T(8,128)S(1)}`; 0: HBM).
fn memory_space(shape: &Shape) -> u64 {
    shape.as_array().map_or(0, |a| a.layout_fields().memory_space)
}

/// The buffers of tuple element `index` of a value of `shape` held in `bufs` (one per
/// array leaf).
fn element_bufs(shape: &Shape, index: usize, bufs: &[usize]) -> Vec<usize> {
    let Some(t) = shape.tuple_elements() else { return bufs.to_vec() };
    let start: usize = t[..index.min(t.len())].iter().map(|s| leaves(s).len()).sum();
    let count = t.get(index).map_or(0, |s| leaves(s).len());
    bufs.get(start..start + count).map(<[usize]>::to_vec).unwrap_or_default()
}

/// The lowered program and where each instruction went.
#[derive(Clone)]
pub struct Lowered {
    pub program: Program,
    /// Per computation (by `CompId` index): `Some(block)` when it is a block; per node the
    /// item index of its kernel in that block.
    pub blocks_of: Vec<Option<usize>>,
    pub kernel_of: HashMap<(CompId, NodeIndex), (usize, usize)>,
}

fn elems(shape: &Shape) -> u64 {
    let mut n = 0;
    shape.for_each_array(&mut |a| n += a.element_count().unwrap_or(0));
    n
}

fn bytes_of(shape: &Shape) -> u64 {
    let mut n = 0;
    shape.for_each_array(&mut |a| {
        n += a.element_count().unwrap_or(0) * (a.elem.bits() as u64).div_ceil(8)
    });
    n
}

fn dims(shape: &Shape) -> Vec<u64> {
    shape.as_array().and_then(|a| a.static_dims()).unwrap_or_default()
}

fn leaves(shape: &Shape) -> Vec<Shape> {
    match shape {
        Shape::Tuple(t) => t.iter().flat_map(leaves).collect(),
        s => vec![s.clone()],
    }
}

/// Element-ops of one application of a reducer/combiner computation (at least 1).
fn applied_ops(m: &Module, id: CompId) -> (u64, u64) {
    let c = m.comp(id);
    let mut w = VectorWork::default();
    for n in c.nodes() {
        let i = c.instr(n);
        if let Op::Plain(op) = i.op
            && op.is_elementwise()
        {
            let (a, e) = elementwise_cost(op);
            w.alu += a;
            w.eup += e;
        } else if matches!(i.op, Op::Compare { .. }) {
            w.alu += 1;
        }
    }
    (w.alu.max(1), w.eup)
}

/// (VPU ops, EUP ops) per element of an elementwise opcode.
fn elementwise_cost(op: Opcode) -> (u64, u64) {
    use Opcode::*;
    match op {
        Exp | Expm1 | Log | Log1p | Logistic | Tanh | Sqrt | Rsqrt | Cbrt | Sin | Cos | Tan
        | Erf | Atan2 | Acos | Acosh | Asin | Asinh | Atanh | Cosh | Sinh => (1, 1),
        Power => (2, 2),
        Divide => (1, 1),
        Remainder => (4, 1),
        Clamp => (2, 0),
        _ => (1, 0),
    }
}

struct Lowerer<'m> {
    m: &'m Module,
    passes: Passes,
    program: Program,
    blocks_of: Vec<Option<usize>>,
    kernel_of: HashMap<(CompId, NodeIndex), (usize, usize)>,
}

/// Lowers `m` (checked, optimized) with matmuls at `passes`.
pub fn lower(m: &Module, passes: Passes) -> Result<Lowered, Diagnostic> {
    let mut l = Lowerer {
        m,
        passes,
        program: Program {
            name: m.name.clone(),
            buffers: vec![],
            blocks: vec![],
            entry: 0,
            scheduled: m.header.is_scheduled == Some(true),
        },
        blocks_of: vec![None; m.comps().len()],
        kernel_of: HashMap::new(),
    };
    l.program.entry = l.block(m.entry)?;
    Ok(Lowered { program: l.program, blocks_of: l.blocks_of, kernel_of: l.kernel_of })
}

impl<'m> Lowerer<'m> {
    fn buffer(&mut self, name: &str, shape: &Shape, origin: Origin) -> usize {
        let mut ty = String::new();
        shape.write(&mut ty, false);
        self.program.buffers.push(Buffer {
            name: name.to_string(),
            ty,
            bytes: bytes_of(shape),
            origin,
            on_chip: memory_space(shape) != 0,
        });
        self.program.buffers.len() - 1
    }

    fn block(&mut self, id: CompId) -> Result<usize, Diagnostic> {
        if let Some(b) = self.blocks_of[id.index()] {
            return Ok(b);
        }
        let bi = self.program.blocks.len();
        let comp = self.m.comp(id);
        self.program.blocks.push(Block { name: comp.name.clone(), items: vec![] });
        self.blocks_of[id.index()] = Some(bi);
        let order = hlo_ir::schedule::Schedule::new(comp);
        // Buffers (one per array leaf) of every evaluated node.
        let mut bufs: HashMap<NodeIndex, Vec<usize>> = HashMap::new();
        let mut items = vec![];
        for &n in &order.nodes {
            let instr = comp.instr(n);
            let ops = comp.operands(n);
            let operand_bufs = |bufs: &HashMap<NodeIndex, Vec<usize>>, k: usize| -> Vec<usize> {
                ops.get(k).and_then(|o| bufs.get(o)).cloned().unwrap_or_default()
            };
            let all_operand_bufs = |bufs: &HashMap<NodeIndex, Vec<usize>>| -> Vec<usize> {
                ops.iter().flat_map(|o| bufs.get(o).cloned().unwrap_or_default()).collect()
            };
            let fresh = |s: &mut Self, origin: Origin| -> Vec<usize> {
                let ls = leaves(&instr.shape);
                ls.iter()
                    .enumerate()
                    .map(|(i, leaf)| {
                        let name = if ls.len() == 1 {
                            instr.name.clone()
                        } else {
                            format!("{}.{i}", instr.name)
                        };
                        s.buffer(&name, leaf, origin)
                    })
                    .collect()
            };
            match &instr.op {
                Op::Parameter { .. } => {
                    let b = fresh(self, Origin::Parameter);
                    bufs.insert(n, b);
                }
                Op::Constant(_) => {
                    let b = fresh(self, Origin::Constant);
                    bufs.insert(n, b);
                }
                Op::GetTupleElement { index } => {
                    let tuple = &comp.instr(ops[0]).shape;
                    let (mut start, idx) = (0usize, *index as usize);
                    if let Some(t) = tuple.tuple_elements() {
                        for s in &t[..idx.min(t.len())] {
                            start += leaves(s).len();
                        }
                    }
                    let count = leaves(&instr.shape).len();
                    let all = operand_bufs(&bufs, 0);
                    bufs.insert(
                        n,
                        all.get(start..start + count).map(<[usize]>::to_vec).unwrap_or_default(),
                    );
                }
                Op::Plain(Opcode::Tuple) => {
                    let b = all_operand_bufs(&bufs);
                    bufs.insert(n, b);
                }
                op if aliases_first_operand(op) => {
                    let b = operand_bufs(&bufs, 0);
                    bufs.insert(n, b);
                }
                Op::Plain(Opcode::AfterAll) => {
                    bufs.insert(n, vec![]);
                }
                // The end of an asynchronous copy or op: its result is the start's
                // destination (element 0 of copy-start's `(dest, src, context)`, element 1
                // of async-start's `((operands), result, context)`); no kernel, but whoever
                // reads it waits until it arrives.
                Op::Plain(Opcode::CopyDone) => {
                    let b = element_bufs(&comp.instr(ops[0]).shape, 0, &operand_bufs(&bufs, 0));
                    bufs.insert(n, b);
                }
                Op::Async { opcode: Opcode::AsyncDone, .. } => {
                    let b = element_bufs(&comp.instr(ops[0]).shape, 1, &operand_bufs(&bufs, 0));
                    bufs.insert(n, b);
                }
                Op::Async { opcode: Opcode::AsyncUpdate, .. } => {
                    let b = operand_bufs(&bufs, 0);
                    bufs.insert(n, b);
                }
                Op::Collective {
                    opcode:
                        Opcode::AllGatherDone | Opcode::AllReduceDone | Opcode::CollectivePermuteDone,
                    ..
                }
                | Op::Plain(
                    Opcode::AllGatherDone | Opcode::AllReduceDone | Opcode::CollectivePermuteDone,
                ) => {
                    let start = &comp.instr(ops[0]).shape;
                    let all = operand_bufs(&bufs, 0);
                    let b = if start.tuple_elements().is_some() {
                        element_bufs(start, 1, &all)
                    } else {
                        all
                    };
                    bufs.insert(n, b);
                }
                Op::CustomCall(cc) if cc.target == "AllocateBuffer" => {
                    let b = fresh(self, Origin::Result);
                    bufs.insert(n, b);
                }
                // The end of an asynchronous collective fusion: its output is the
                // collective's destination, an operand it aliases.
                Op::Fusion { output_to_operand_aliasing, .. }
                    if fusion_root_target(self.m, &instr.op) == Some("AsyncCollectiveDone") =>
                {
                    let k = output_to_operand_aliasing
                        .iter()
                        .find(|a| a.output_index.is_empty())
                        .map_or(0, |a| a.operand as usize);
                    let b = operand_bufs(&bufs, k);
                    bufs.insert(n, b);
                }
                Op::While { condition, body } => {
                    let (c, b) = (self.block(*condition)?, self.block(*body)?);
                    items.push(Item::While {
                        name: instr.name.clone(),
                        cond: c,
                        body: b,
                        trip_count: hlo_analysis::while_loop_analysis::trip_count(self.m, comp, n),
                    });
                    let out = fresh(self, Origin::Result);
                    bufs.insert(n, out);
                }
                Op::Conditional(br) => {
                    let comps: Vec<CompId> = match br {
                        Branches::TrueFalse(t, f) => vec![*t, *f],
                        Branches::Indexed(v) => v.clone(),
                    };
                    let mut bl = vec![];
                    for c in comps {
                        bl.push(self.block(c)?);
                    }
                    let taken = constant_branch(comp, n, bl.len());
                    items.push(Item::Cond { name: instr.name.clone(), branches: bl, taken });
                    let out = fresh(self, Origin::Result);
                    bufs.insert(n, out);
                }
                Op::Call { to_apply, .. } => {
                    let b = self.block(*to_apply)?;
                    items.push(Item::Call { name: instr.name.clone(), block: b });
                    let out = fresh(self, Origin::Result);
                    bufs.insert(n, out);
                }
                _ => {
                    let (mut k, algorithm_hbm) = self.kernel(id, comp, n)?;
                    let ins = ops
                        .iter()
                        .map(|o| (bufs.get(o).cloned().unwrap_or_default(), &comp.instr(*o).shape))
                        .collect::<Vec<_>>();
                    let mut out = fresh(self, Origin::Result);
                    // Outputs the kernel's own compute leaves alone ([`passthrough`]): a
                    // fusion's parameter passed straight through (an asynchronous
                    // collective's state carried across the compute that overlaps it) or a
                    // collective step's result aliased to an operand, and copy-start's
                    // `(dest, src, context)` `src`, are the operands' buffers, not written.
                    let carried = match &instr.op {
                        Op::Fusion { calls, .. } => passthrough(self.m.comp(*calls)),
                        Op::CopyStart { .. } => vec![None, Some(Some(0))],
                        _ => vec![],
                    };
                    let aliasing = match &instr.op {
                        Op::Fusion { output_to_operand_aliasing, .. } => {
                            output_to_operand_aliasing.as_slice()
                        }
                        _ => &[],
                    };
                    for (leaf, how) in carried.iter().enumerate() {
                        let source = match how {
                            Some(Some(p)) => Some(*p),
                            Some(None) => aliasing
                                .iter()
                                .find(|a| {
                                    a.output_index == [leaf as i64] && a.operand_index.is_empty()
                                })
                                .map(|a| a.operand as usize),
                            None => None,
                        };
                        if let Some(b) =
                            source.and_then(|p| operand_bufs(&bufs, p).first().copied())
                            && leaf < out.len()
                        {
                            out[leaf] = b;
                        }
                    }
                    k.reads = read_bytes(self.m, comp, n, &ins, &self.program.buffers);
                    let written = written_bytes(self.m, comp, n);
                    k.writes = out
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| carried.get(*i).is_none_or(Option::is_none))
                        .map(|(i, &b)| {
                            let buf = &self.program.buffers[b];
                            let full = if buf.on_chip { 0 } else { buf.bytes };
                            (b, written.get(i).copied().flatten().map_or(full, |w| w.min(full)))
                        })
                        .collect();
                    // A Pallas kernel reads what its blocked algorithm streams.
                    if let Some(hbm) = algorithm_hbm {
                        let written = k.write_bytes();
                        let read = k.read_bytes().max(1);
                        let want = hbm.saturating_sub(written);
                        for r in &mut k.reads {
                            r.1 = (r.1 as f64 * want as f64 / read as f64).round() as u64;
                        }
                    }
                    bufs.insert(n, out);
                    self.kernel_of.insert((id, n), (bi, items.len()));
                    items.push(Item::Kernel(k));
                }
            }
        }
        self.program.blocks[bi].items = items;
        Ok(bi)
    }

    /// The kernel of instruction `n`, and the HBM bytes its algorithm moves when that is
    /// not its operands and results (a Pallas kernel's blocked algorithm).
    fn kernel(
        &self,
        id: CompId,
        comp: &Computation,
        n: NodeIndex,
    ) -> Result<(Kernel, Option<u64>), Diagnostic> {
        let instr = comp.instr(n);
        let mut w = Work::default();
        self.work(comp, n, &mut w, true)?;
        let mut c = cost::instr_cost(self.m, id, n);
        if let Some(p) = &w.pallas {
            c.flops = p.flops;
            c.transcendentals = p.transcendentals;
        }
        let what = match &instr.op {
            Op::Fusion { kind, .. } => format!(
                "{} fusion",
                match kind {
                    FusionKind::Loop => "loop",
                    FusionKind::Input => "input",
                    FusionKind::Output => "output",
                    FusionKind::Custom => "custom",
                }
            ),
            op => op.opcode().name().to_string(),
        };
        let class = if w.class == Some(Class::Collective) {
            Class::Collective
        } else if w.conv {
            Class::Conv
        } else if w.matmul.is_some() {
            Class::Matmul
        } else {
            match w.class {
                Some(Class::Movement) | None if w.vector.alu + w.vector.eup > 0 => {
                    Class::Elementwise
                }
                Some(c) => c,
                None => Class::Movement,
            }
        };
        // Independent rows: the result's leading dims (all but the minor one).
        let out_dims = dims(leaves(&instr.shape).first().unwrap_or(&instr.shape));
        let parallel = if out_dims.len() >= 2 {
            out_dims[..out_dims.len() - 1].iter().product::<u64>()
        } else {
            out_dims.first().map_or(1, |&d| d / 1024)
        };
        let parallel = match w.matmul {
            Some(mm) => (mm.batch * mm.m).max(parallel),
            None => parallel,
        };
        let algorithm_hbm = w.pallas.as_ref().map(|p| p.hbm_bytes);
        let kernel = Kernel {
            name: instr.name.clone(),
            what,
            class,
            reads: vec![],
            writes: vec![],
            matmul: w.matmul,
            vector: w.vector,
            parallel: parallel.max(1),
            flops: c.flops,
            transcendentals: c.transcendentals,
            collective: self.collective(comp, n),
            dma: self.dma(comp, n),
            asynchronous: matches!(
                instr.op,
                Op::CopyStart { .. }
                    | Op::Async { opcode: Opcode::AsyncStart, .. }
                    | Op::Collective {
                        opcode: Opcode::AllGatherStart
                            | Opcode::AllReduceStart
                            | Opcode::CollectivePermuteStart,
                        ..
                    }
            ) || fusion_root_target(self.m, &instr.op)
                == Some("AsyncCollectiveStart"),
        };
        Ok((kernel, algorithm_hbm))
    }

    /// The Pallas kernel a `tpu_custom_call` runs, by [`crate::pallas`]'s rules.
    fn pallas(
        &self,
        comp: &Computation,
        n: NodeIndex,
    ) -> Result<crate::pallas::PallasWork, String> {
        let instr = comp.instr(n);
        let operands: Vec<Shape> =
            comp.operands(n).iter().map(|&o| comp.instr(o).shape.clone()).collect();
        let config = instr.extras.as_ref().and_then(|e| e.backend_config.as_deref());
        crate::pallas::work(&instr.name, config, &operands, &leaves(&instr.shape))
    }

    /// The bytes an asynchronous copy moves (`copy-start`; an `async-start` of anything
    /// but a collective: its result).
    fn dma(&self, comp: &Computation, n: NodeIndex) -> Option<u64> {
        let instr = comp.instr(n);
        match &instr.op {
            Op::CopyStart { .. } => {
                comp.operands(n).first().map(|&o| bytes_of(&comp.instr(o).shape))
            }
            Op::Async { opcode: Opcode::AsyncStart, .. } if self.collective(comp, n).is_none() => {
                instr.shape.tuple_elements().and_then(|t| t.get(1)).map(bytes_of)
            }
            _ => None,
        }
    }

    /// The ICI traffic of a collective instruction (`None` for anything else).
    fn collective(
        &self,
        comp: &Computation,
        n: NodeIndex,
    ) -> Option<hlo_chip::program::Collective> {
        let instr = comp.instr(n);
        // An asynchronous collective fusion or an async-start wrapping a collective: the
        // collective inside.
        // (A fusion whose compute carries a step of a collective started earlier is a
        // compute kernel: the collective is timed once, where it starts.)
        let inner = match &instr.op {
            Op::Fusion { calls, .. }
                if fusion_root_target(self.m, &instr.op) == Some("AsyncCollectiveStart") =>
            {
                Some(*calls)
            }
            Op::Async { calls: Some(calls), opcode: Opcode::AsyncStart, .. } => Some(*calls),
            _ => None,
        };
        if let Some(calls) = inner {
            let f = self.m.comp(calls);
            let x = f.nodes().find(|&x| matches!(f.instr(x).op, Op::Collective { .. }))?;
            return self.collective(f, x);
        }
        let Op::Collective { opcode, attrs } = &instr.op else { return None };
        let devices = self
            .m
            .header
            .num_partitions
            .unwrap_or(1)
            .max(self.m.header.replica_count.unwrap_or(1))
            .max(1) as usize;
        let first = hlo_fabric::groups(attrs.replica_groups.as_ref(), devices)
            .ok()
            .and_then(|g| g.into_iter().next())
            .unwrap_or_default();
        let group = (first.len() as u64).max(1);
        let kind = hlo_spmd::inventory::kind(&instr.op).unwrap_or(opcode.name());
        // Device ids, to tell which slices a group spans (see `ici`).
        let id = |d: i64| u32::try_from(d).unwrap_or(u32::MAX);
        let members = match &attrs.source_target_pairs {
            Some(pairs) if kind == "collective-permute" => {
                pairs.iter().flat_map(|&(a, b)| [id(a), id(b)]).collect()
            }
            _ => first.into_iter().map(id).collect(),
        };
        let bytes = if kind == "all-gather" {
            // all-gather-start's `(operand, result)`: the result.
            let result =
                instr.shape.tuple_elements().and_then(|t| t.last()).unwrap_or(&instr.shape);
            hlo_spmd::inventory::array_bytes(result)
        } else {
            comp.operands(n)
                .iter()
                .map(|&o| hlo_spmd::inventory::array_bytes(&comp.instr(o).shape))
                .sum()
        };
        Some(hlo_chip::program::Collective { kind, bytes, group, members })
    }

    /// Adds the work of instruction `n` (and of the computations it folds in) to `w`.
    fn work(
        &self,
        comp: &Computation,
        n: NodeIndex,
        w: &mut Work,
        top: bool,
    ) -> Result<(), Diagnostic> {
        let instr = comp.instr(n);
        let out = elems(&instr.shape);
        let operand_shape = |k: usize| {
            comp.operands(n).get(k).map(|&o| comp.instr(o).shape.clone()).unwrap_or(Shape::Token)
        };
        let no_lowering = |why: &str| {
            Diagnostic::error(instr.span, format!("no TPU lowering for `{}` ({}){why}", instr.name, instr.op.opcode().name()))
                .with_label("not lowered")
                .with_help("the TPU backend lowers training steps: fusions, dot, convolution, reductions, data movement, sort, rng, control flow and collectives")
        };
        match &instr.op {
            Op::Parameter { .. }
            | Op::Constant(_)
            | Op::GetTupleElement { .. }
            | Op::Domain { .. } => {}
            Op::Plain(Opcode::Tuple | Opcode::AfterAll) => {}
            Op::Plain(Opcode::PartitionId | Opcode::ReplicaId) => w.set_class(Class::Movement),
            // A scalar counter the host keeps (the interpreter's, for values).
            Op::RngGetAndUpdateState { .. } => w.set_class(Class::Rng),
            Op::Collective { .. } if top => w.set_class(Class::Collective),
            // Inside an asynchronous collective fusion: the kernel's collective.
            Op::Collective { .. } => {}
            Op::CopyStart { .. } | Op::Async { opcode: Opcode::AsyncStart, .. } => {
                w.set_class(if self.collective(comp, n).is_some() {
                    Class::Collective
                } else {
                    Class::Movement
                })
            }
            Op::CustomCall(cc) if bookkeeping(&cc.target) => {
                if fusion_root_target(self.m, &instr.op).is_none() && top {
                    w.set_class(Class::Movement);
                }
            }
            // A Pallas kernel: its blocked algorithm's work (`crate::pallas`).
            Op::CustomCall(cc) if cc.target == "tpu_custom_call" => {
                let p = self.pallas(comp, n).map_err(|why| no_lowering(&format!(": {why}")))?;
                if let Some(mm) = p.matmul {
                    w.add_matmul(mm);
                }
                w.vector += p.vector;
                w.pallas = Some(p);
            }
            // Index repacking for a gather or scatter: one vector op per element.
            Op::CustomCall(cc) if cc.target == "GatherScatterIndicesBitpacked" => {
                w.set_class(Class::Movement);
                w.vector.alu += out;
            }
            op if aliases_first_operand(op) => {}
            Op::Reshape { .. }
            | Op::Broadcast { .. }
            | Op::Slice { .. }
            | Op::DynamicSlice { .. }
            | Op::Reverse { .. }
            | Op::Pad { .. }
            | Op::Concatenate { .. } => {
                w.set_class(Class::Movement);
            }
            Op::Plain(Opcode::Copy) => {
                w.set_class(Class::Movement);
            }
            Op::Transpose { dimensions } => {
                w.set_class(Class::Movement);
                // A transpose that moves the minor dimension crosses lanes.
                if dimensions.last().is_some_and(|&d| d as usize + 1 != dimensions.len()) {
                    w.vector.xlu += out;
                }
            }
            Op::Iota { .. } => w.vector.alu += out,
            Op::Plain(Opcode::DynamicUpdateSlice) => {
                w.set_class(Class::Movement);
            }
            Op::Gather(_) => w.set_class(Class::Movement),
            Op::Plain(op) if op.is_elementwise() => {
                let (a, e) = elementwise_cost(*op);
                // Complex values (operand or result): real and imaginary parts, and the
                // cross terms of products and quotients: about 4x the vector work.
                let cx =
                    if instr.shape.has_complex() || operand_shape(0).has_complex() { 4 } else { 1 };
                w.vector.alu += cx * a * out;
                w.vector.eup += cx * e * out;
            }
            // A DFT as MXU matmuls per transformed dimension (complex x complex: four real
            // products; RFFT/IRFFT have a real side: two), then the vector unit's
            // real/imaginary bookkeeping.
            Op::Fft { fft_type, fft_length } => {
                let complex_side =
                    if fft_type == "RFFT" { elems(&instr.shape) } else { elems(&operand_shape(0)) };
                let real_products = if fft_type == "FFT" || fft_type == "IFFT" { 4 } else { 2 };
                for &len in fft_length {
                    let len = len.max(1) as u64;
                    w.add_matmul(Matmul {
                        batch: real_products,
                        m: complex_side / len,
                        n: len,
                        k: len,
                        passes: passes_for(ElemType::F32, precision_of(&[], self.passes)),
                        lhs_transposed: false,
                        rhs_transposed: false,
                    });
                }
                w.vector.alu += 2 * out;
            }
            Op::Plain(Opcode::BitcastConvert) | Op::ReducePrecision { .. } | Op::Compare { .. } => {
                w.vector.alu += out
            }
            Op::Map { to_apply, .. } => {
                let (a, e) = applied_ops(self.m, *to_apply);
                w.vector.alu += a * out;
                w.vector.eup += e * out;
            }
            Op::Fusion { calls, .. } => {
                if fusion_root_target(self.m, &instr.op) == Some("AsyncCollectiveStart") {
                    w.set_class(Class::Collective);
                }
                let f = self.m.comp(*calls);
                for fnode in f.nodes() {
                    self.work(f, fnode, w, false)?;
                }
            }
            Op::Dot { opcode: Opcode::Dot, dims: d } => {
                let (l, r) = (operand_shape(0), operand_shape(1));
                let (ld, rd) = (dims(&l), dims(&r));
                let size = |ds: &[u64], ix: &[i64]| -> u64 {
                    ix.iter().map(|&i| ds.get(i as usize).copied().unwrap_or(1)).product()
                };
                let free = |ds: &[u64], batch: &[i64], con: &[i64]| -> u64 {
                    (0..ds.len() as i64)
                        .filter(|i| !batch.contains(i) && !con.contains(i))
                        .map(|i| ds[i as usize])
                        .product()
                };
                let elem = l.as_array().map_or(ElemType::F32, |a| a.elem);
                let (m, n_free) = (
                    free(&ld, &d.lhs_batch, &d.lhs_contracting),
                    free(&rd, &d.rhs_batch, &d.rhs_contracting),
                );
                if m == 1 && n_free == 1 && complex_products(elem) == 1 {
                    // Both operands have only batch and contracting dims (a row-wise dot
                    // product, as flash attention's backward computes `sum(dO * O)`): XLA
                    // strength-reduces such a dot to multiply + reduce (AlgebraicSimplifier's
                    // dot strength reduction; its TPU programs print it as a reduce fusion
                    // whose op_name is the dot_general), which the vector unit runs. On the
                    // MXU it would load a weight tile per batch element.
                    w.set_class(Class::Reduce);
                    let products = size(&ld, &d.lhs_batch) * size(&ld, &d.lhs_contracting);
                    w.vector.alu += 2 * products;
                    if d.lhs_contracting.iter().any(|&c| c as usize + 1 == ld.len()) {
                        w.vector.xlu += out.div_ceil(8) * 7 * 1024;
                    }
                    return Ok(());
                }
                let passes = passes_for(elem, precision_of(&d.precision, self.passes));
                // The MXU wants the lhs contracting dim minor and the rhs contracting dim
                // major (weights loaded row by row); anything else is a cross-lane transpose.
                let lhs_t = d.lhs_contracting.last().is_some_and(|&c| c as usize + 1 != ld.len());
                let rhs_t = d.rhs_contracting.first().is_some_and(|&c| {
                    r.as_array().is_some_and(|_| c as usize != d.rhs_batch.len())
                });
                w.add_matmul(Matmul {
                    batch: size(&ld, &d.lhs_batch) * complex_products(elem),
                    m,
                    n: n_free,
                    k: size(&ld, &d.lhs_contracting),
                    passes,
                    lhs_transposed: lhs_t,
                    rhs_transposed: rhs_t,
                });
            }
            Op::Convolution(c) => {
                let (l, r) = (operand_shape(0), operand_shape(1));
                let (ld, rd, od) = (dims(&l), dims(&r), dims(&instr.shape));
                let dn = &c.dims;
                let g = c.feature_group_count.max(1) as u64 * c.batch_group_count.max(1) as u64;
                // Taps that land on input elements, not on padding or base-dilation holes
                // ([`real_taps`]): XLA TPU writes batched matmuls as convolutions whose batch
                // dims are spatial dims, dilated or padded so that one tap meets input.
                let spatial = |which: &[i64], of: &[u64], i: usize| {
                    which.get(i).and_then(|&x| of.get(x as usize)).copied().unwrap_or(1)
                };
                let taps: f64 = (0..dn.kernel_spatial.len())
                    .map(|i| {
                        let size = spatial(&dn.kernel_spatial, &rd, i);
                        let (input, output) = (
                            spatial(&dn.input_spatial, &ld, i),
                            spatial(&dn.output_spatial, &od, i),
                        );
                        c.window.dims.get(i).map_or(size as f64, |w| real_taps(w, input, output).0)
                    })
                    .product();
                let taps = (taps.round() as u64).max(1);
                let in_feat = rd.get(dn.kernel_input_feature as usize).copied().unwrap_or(1);
                let out_feat = od.get(dn.output_feature as usize).copied().unwrap_or(1);
                let positions: u64 = od.iter().product::<u64>() / out_feat.max(1);
                let elem = l.as_array().map_or(ElemType::F32, |a| a.elem);
                w.add_matmul(Matmul {
                    batch: g * complex_products(elem),
                    m: positions,
                    n: out_feat / g.max(1),
                    k: taps * in_feat,
                    passes: passes_for(elem, precision_of(&c.precision, self.passes)),
                    lhs_transposed: false,
                    rhs_transposed: false,
                });
                w.conv = true;
            }
            Op::Reduce { dimensions, to_apply } => {
                w.set_class(Class::Reduce);
                let inputs = comp.operand_count(n) / 2;
                let ins: u64 = (0..inputs).map(|k| elems(&operand_shape(k))).sum();
                let (a, e) = applied_ops(self.m, *to_apply);
                w.vector.alu += a * ins;
                w.vector.eup += e * ins;
                let rank = dims(&operand_shape(0)).len() as i64;
                if dimensions.contains(&(rank - 1)) {
                    // A lane-reduction tree per 8 result rows.
                    w.vector.xlu += out.div_ceil(8) * 7 * 1024;
                }
            }
            Op::ReduceWindow { window, to_apply } => {
                w.set_class(Class::Reduce);
                // Per output, the window's elements that are real input (not padding nor
                // base-dilation holes); a dimension whose window covers all of it at every
                // output (XLA TPU writes a row reduction broadcast back over the row this
                // way) is reduced once per row and shared.
                let (ind, od) = (dims(&operand_shape(0)), dims(&instr.shape));
                let size: f64 = window
                    .dims
                    .iter()
                    .enumerate()
                    .map(|(i, wd)| {
                        let (input, output) =
                            (ind.get(i).copied().unwrap_or(1), od.get(i).copied().unwrap_or(1));
                        match real_taps(wd, input, output) {
                            (_, true) => input as f64 / output.max(1) as f64,
                            (taps, false) => taps,
                        }
                    })
                    .product();
                let work = (out as f64 * size).ceil() as u64 + out;
                let (a, e) = applied_ops(self.m, *to_apply);
                w.vector.alu += a * work;
                w.vector.eup += e * work;
            }
            Op::SelectAndScatter { window, select, scatter } => {
                w.set_class(Class::Reduce);
                let size: u64 = window.dims.iter().map(|d| d.size.max(1) as u64).product();
                let source = elems(&operand_shape(1));
                let (s, _) = applied_ops(self.m, *select);
                let (a, _) = applied_ops(self.m, *scatter);
                w.vector.alu += source * size * (s + 1) + source * a + out;
            }
            Op::Scatter(s) => {
                w.set_class(Class::Movement);
                let updates: u64 = (0..comp.operand_count(n))
                    .skip(comp.operand_count(n) / 2 + 1)
                    .map(|k| elems(&operand_shape(k)))
                    .sum();
                let (a, e) = applied_ops(self.m, s.to_apply);
                w.vector.alu += updates * (a + 1);
                w.vector.eup += updates * e;
            }
            Op::Sort { dimension, .. } => {
                w.set_class(Class::Sort);
                let len = dims(&operand_shape(0)).get(*dimension as usize).copied().unwrap_or(1);
                let ins: u64 = (0..comp.operand_count(n)).map(|k| elems(&operand_shape(k))).sum();
                w.vector.alu += ins * 3 * bitonic_stages(len);
                w.vector.xlu += ins * bitonic_stages(len).min(7);
            }
            Op::TopK { .. } => {
                w.set_class(Class::Sort);
                let d = dims(&operand_shape(0));
                let len = d.last().copied().unwrap_or(1);
                let ins = elems(&operand_shape(0));
                w.vector.alu += ins * 3 * bitonic_stages(len);
                w.vector.xlu += ins * bitonic_stages(len).min(7);
            }
            Op::CustomCall(cc) if cc.target == "TopK" => {
                w.set_class(Class::Sort);
                let d = dims(&operand_shape(0));
                let ins = elems(&operand_shape(0));
                let len = d.last().copied().unwrap_or(1);
                w.vector.alu += ins * 3 * bitonic_stages(len);
                w.vector.xlu += ins * bitonic_stages(len).min(7);
            }
            Op::Rng { .. } | Op::RngBitGenerator { .. } => {
                w.set_class(Class::Rng);
                // Philox-4x32-10: 10 rounds of 2 multiplies, 4 xors/adds per 4 outputs.
                w.vector.alu += out * 15;
            }
            Op::CustomCall(cc) => {
                return Err(no_lowering(&format!(
                    ": custom-call target `{}` has no TPU kernel",
                    cc.target
                )));
            }
            Op::While { .. } | Op::Conditional(_) | Op::Call { .. } if !top => {
                return Err(no_lowering(": control flow inside a fusion"));
            }
            _ => return Err(no_lowering("")),
        }
        Ok(())
    }
}

/// Along one window dimension over `input` elements giving `output` positions: the mean
/// number of window taps per output that land on input elements (not in the padding, not
/// in the holes of a base dilation), and whether every output's window covers the whole
/// input (a reduction along the dimension, broadcast back).
fn real_taps(w: &hlo_ir::op::WindowDim, input: u64, output: u64) -> (f64, bool) {
    let size = w.size.max(1);
    let (base, step, stride) = (w.lhs_dilate.max(1), w.rhs_dilate.max(1), w.stride.max(1));
    let last = (input.max(1) as i64 - 1) * base;
    let (input, output) = (input.max(1) as i64, output.max(1) as i64);
    // Exact for up to a million (output, tap) pairs; beyond, a sample of outputs.
    let every = ((output * size) / 1_000_000).max(1);
    let (mut hits, mut seen, mut covers) = (0i64, 0i64, true);
    let mut o = 0;
    while o < output {
        let mut here = 0;
        for j in 0..size {
            let pos = o * stride + j * step - w.pad_lo;
            if pos >= 0 && pos <= last && pos % base == 0 {
                here += 1;
            }
        }
        covers &= here == input;
        hits += here;
        seen += 1;
        o += every;
    }
    (hits as f64 / seen.max(1) as f64, covers && input > 1)
}

fn bitonic_stages(len: u64) -> u64 {
    let lg = len.max(2).next_power_of_two().trailing_zeros() as u64;
    lg * (lg + 1) / 2
}

/// The bytes a kernel reads from each operand buffer: all of it, except where the
/// instruction (or its fusion) only reads a slice, a gathered subset or updates in place.
/// Inside a fusion, a parameter read only by slices (`slice`, `dynamic-slice`, `gather`
/// as their operand 0) costs what those slices read, and a parameter a
/// `dynamic-update-slice` updates in place costs nothing: XLA's buffer assignment gives
/// the update its operand's buffer, and its cost analysis counts only the bytes touched
/// (`HloCostAnalysis::HandleDynamicUpdateSlice`, fusion operand utilization).
fn read_bytes(
    m: &Module,
    comp: &Computation,
    n: NodeIndex,
    ins: &[(Vec<usize>, &Shape)],
    buffers: &[Buffer],
) -> Vec<(usize, u64)> {
    let instr = comp.instr(n);
    let out_bytes = bytes_of(&instr.shape);
    let fused = match &instr.op {
        Op::Fusion { calls, .. } => Some(fused_param_reads(m, m.comp(*calls))),
        _ => None,
    };
    let mut reads: Vec<(usize, u64)> = vec![];
    for (k, (bufs, _shape)) in ins.iter().enumerate() {
        for &b in bufs {
            let full = if buffers[b].on_chip { 0 } else { buffers[b].bytes };
            let bytes = match &instr.op {
                Op::Slice { .. } | Op::DynamicSlice { .. } | Op::Gather(_) if k == 0 => {
                    full.min(out_bytes)
                }
                // In place: the operand is not re-read, only the update is written.
                Op::Plain(Opcode::DynamicUpdateSlice) if k == 0 => 0,
                Op::Scatter(_) if k < comp.operand_count(n) / 2 => 0,
                Op::Fusion { .. } => match fused.as_ref().and_then(|f| f.get(k).copied()) {
                    Some(Some(part)) => full.min(part),
                    _ => full,
                },
                _ => full,
            };
            if let Some(r) = reads.iter_mut().find(|r| r.0 == b) {
                r.1 = r.1.max(bytes);
            } else {
                reads.push((b, bytes));
            }
        }
    }
    reads
}

/// Through ops that relabel the same bytes.
fn strip_relabel(c: &Computation, mut x: NodeIndex) -> NodeIndex {
    while matches!(c.instr(x).op, Op::Plain(Opcode::Bitcast) | Op::Reshape { .. }) {
        match c.operands(x).first() {
            Some(&o) => x = o,
            None => break,
        }
    }
    x
}

/// The values a fused computation returns: its root's operands for a tuple root (a
/// multi-output fusion), else the root itself.
fn fusion_roots(f: &Computation) -> Vec<NodeIndex> {
    match f.root() {
        Some(r) if f.instr(r).op == Op::Plain(Opcode::Tuple) => f.operands(r).to_vec(),
        Some(r) => vec![r],
        None => vec![],
    }
}

/// Per output leaf of fused computation `f`, whether the fusion's own compute leaves it
/// alone: `Some(Some(p))` when it passes parameter `p` through unchanged (an array
/// parameter that is an element of the root tuple), `Some(None)` when a collective inside
/// the fusion produces it (a step of an asynchronous collective carried across the
/// compute: the collective, timed where it starts, writes it), `None` otherwise.
fn passthrough(f: &Computation) -> Vec<Option<Option<usize>>> {
    let Some(r) = f.root() else { return vec![] };
    if f.instr(r).op != Op::Plain(Opcode::Tuple) {
        return vec![];
    }
    let mut out = vec![];
    for x in f.operands(r) {
        let leaves_here = leaves(&f.instr(x).shape).len();
        match f.instr(strip_relabel(f, x)).op {
            Op::Parameter { number, .. } if leaves_here == 1 => {
                out.push(Some(Some(number as usize)))
            }
            Op::Collective { .. } if leaves_here == 1 => out.push(Some(None)),
            _ => out.extend(std::iter::repeat_n(None, leaves_here)),
        }
    }
    out
}

/// Per parameter of fused computation `f`: the bytes it is read for when that is less
/// than all of it (`None`: all of it). A parameter handed to a nested fusion (XLA TPU
/// nests a loop fusion that slices a layer out of the stacked activations inside the
/// matmul fusion that reads it) is read as that fusion reads its parameter.
fn fused_param_reads(m: &Module, f: &Computation) -> Vec<Option<u64>> {
    let in_place: Vec<NodeIndex> = fusion_roots(f)
        .iter()
        .map(|&r| strip_relabel(f, r))
        .filter(|&r| f.instr(r).op == Op::Plain(Opcode::DynamicUpdateSlice))
        .filter_map(|r| f.operands(r).first().map(|&o| strip_relabel(f, o)))
        .collect();
    f.params()
        .iter()
        .map(|&p| {
            let users = f.users(p);
            if in_place.contains(&p) && users.len() == 1 {
                return Some(0);
            }
            // Passed straight to the output, or only to a collective inside the fusion (a
            // carried asynchronous collective's state): not read by the compute.
            if !users.is_empty()
                && users.iter().all(|&u| {
                    (Some(u) == f.root() && f.instr(u).op == Op::Plain(Opcode::Tuple))
                        || matches!(f.instr(u).op, Op::Collective { .. })
                })
            {
                return Some(0);
            }
            if users.is_empty() {
                return None;
            }
            read_of(m, f, p, 0)
        })
        .collect()
}

/// The bytes read of value `x` of fused computation `f` when its users read less than all
/// of it (`None`: all of it): a slice, dynamic slice or gather reads its result; a nested
/// fusion what it reads of that parameter; a bitcast, reshape or pad what its own users
/// read.
fn read_of(m: &Module, f: &Computation, x: NodeIndex, depth: u32) -> Option<u64> {
    let users = f.users(x);
    if users.is_empty() || depth > 16 {
        return None;
    }
    users
        .iter()
        .map(|&u| {
            let ops = f.operands(u);
            match &f.instr(u).op {
                Op::Slice { .. } | Op::DynamicSlice { .. } | Op::Gather(_)
                    if ops.first() == Some(&x) && !ops[1..].contains(&x) =>
                {
                    Some(bytes_of(&f.instr(u).shape))
                }
                Op::Plain(Opcode::Bitcast) | Op::Reshape { .. } => read_of(m, f, u, depth + 1),
                // A pad read through a slice reads at most what the slice reads.
                Op::Pad { .. } if ops.first() == Some(&x) => read_of(m, f, u, depth + 1),
                Op::Fusion { calls, .. } => {
                    let inner = fused_param_reads(m, m.comp(*calls));
                    ops.iter()
                        .enumerate()
                        .filter(|(_, o)| **o == x)
                        .map(|(i, _)| inner.get(i).copied().flatten())
                        .sum::<Option<u64>>()
                }
                _ => None,
            }
        })
        .sum()
}

/// Per output leaf of instruction `n`: the bytes it writes when that is less than its
/// whole buffer (an in-place `dynamic-update-slice` writes its update).
fn written_bytes(m: &Module, comp: &Computation, n: NodeIndex) -> Vec<Option<u64>> {
    let instr = comp.instr(n);
    match &instr.op {
        Op::Plain(Opcode::DynamicUpdateSlice) => {
            vec![comp.operands(n).get(1).map(|&u| bytes_of(&comp.instr(u).shape))]
        }
        Op::Fusion { calls, .. } => {
            let f = m.comp(*calls);
            fusion_roots(f)
                .iter()
                .map(|&x| {
                    let x = strip_relabel(f, x);
                    let ins = f.instr(x);
                    let base = f.operands(x).first().map(|&o| strip_relabel(f, o));
                    (ins.op == Op::Plain(Opcode::DynamicUpdateSlice)
                        && base.is_some_and(|b| matches!(f.instr(b).op, Op::Parameter { .. })))
                    .then(|| f.operands(x).get(1).map(|&u| bytes_of(&f.instr(u).shape)))
                    .flatten()
                })
                .collect()
        }
        _ => vec![],
    }
}

#[derive(Default)]
struct Work {
    matmul: Option<Matmul>,
    conv: bool,
    vector: VectorWork,
    class: Option<Class>,
    /// A Pallas kernel's rule, when the instruction is one (its FLOPs and HBM traffic).
    pallas: Option<crate::pallas::PallasWork>,
}

impl Work {
    fn set_class(&mut self, c: Class) {
        // Reductions and sorts dominate a fusion's character over data movement.
        let rank = |c: Class| match c {
            Class::Sort => 4,
            Class::Reduce => 3,
            Class::Rng => 2,
            Class::Movement => 1,
            _ => 0,
        };
        if self.class.is_none_or(|old| rank(c) > rank(old)) {
            self.class = Some(c);
        }
    }

    fn add_matmul(&mut self, mm: Matmul) {
        // A fusion holds at most one contraction in practice; a second one adds its MACs
        // as extra batch.
        self.matmul = Some(match self.matmul {
            None => mm,
            Some(old) => Matmul {
                batch: old.batch
                    + mm.batch * (mm.m * mm.n * mm.k).div_ceil((old.m * old.n * old.k).max(1)),
                ..old
            },
        });
    }
}

/// The branch conditional `n` takes when its selector is a constant: a pred selects
/// branch 0 (true) or 1 (false); an index out of range selects the last branch, as XLA
/// defines it.
fn constant_branch(comp: &hlo_ir::Computation, n: NodeIndex, branches: usize) -> Option<usize> {
    use hlo_ir::literal::{Literal, LiteralData};
    let sel = *comp.operands(n).first()?;
    let Op::Constant(Literal::Array(data)) = &comp.instr(sel).op else { return None };
    match data {
        LiteralData::Pred(v) if v.len() == 1 => Some(if v[0] { 0 } else { 1 }),
        LiteralData::Int(v) if v.len() == 1 => {
            let last = branches.checked_sub(1)?;
            Some(usize::try_from(v[0]).ok().filter(|&i| i < last).unwrap_or(last))
        }
        _ => None,
    }
}
