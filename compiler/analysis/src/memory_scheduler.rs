//! Memory-minimizing instruction orders, as XLA's `hlo_memory_scheduler.cc` computes them
//! before buffer assignment: a pure analysis that returns an order for each computation
//! and leaves the module as it is (nothing is reordered, so nothing it computes can
//! change; [`crate::memory_usage`] estimates the peak on the order it returns).
//!
//! The algorithms, each an order of one computation's instructions that respects every
//! data and control dependency:
//!
//! - [`Algorithm::List`]: XLA's `ListScheduler`. A greedy list scheduler: of the ready
//!   instructions it takes the one that frees the most bytes net of the bytes it defines
//!   (a buffer is freed by its last unscheduled use), ties broken by the number of users,
//!   then by the most recently readied; instructions with a scalar result go first;
//!   parameters and constants define nothing it counts.
//! - [`Algorithm::Dfs`]: XLA's `DFSMemoryScheduler`. A depth-first post-order from the
//!   root (after the computation's other sinks), visiting the operands whose transitive
//!   fan-out (`extra_users`) and then transitive sizes are largest first, by name last.
//! - [`Algorithm::PostOrder`]: XLA's `PostOrderScheduler` (`MakeInstructionPostOrder`): a
//!   depth-first post-order from each sink, operands in slot order.
//! - [`Algorithm::Program`]: the order the optimizer leaves (`Computation::post_order`),
//!   which is what the estimate used before this module.
//!
//! XLA's `DefaultMemoryScheduler` runs the first three and keeps, for the whole module,
//! the one whose heap simulation needs the least memory. [`crate::memory_usage`] does the
//! same per computation (callees first, so a loop body's peak is known when the loop is
//! placed in its caller), and also considers the program order: the best per computation
//! is never worse than the best per module.
//!
//! What the heuristics see of a computation's buffers is [`LogicalBuffers`]: one buffer per
//! array leaf an instruction defines; a tuple, a get-tuple-element, a bitcast, a reshape,
//! an optimization barrier and a while loop hold their operand's buffers instead of
//! defining their own (XLA's points-to sets, with reshapes taken as the bitcasts XLA's
//! layout assignment makes most of them), and so does a value the caller says XLA's fusion
//! would recompute in its consumers (the scheduler runs after fusion in XLA). A buffer's
//! bytes are counted by a [`Sizing`]: dense, padded to the tiles of the layouts the module
//! carries (XLA's per-chip program), or padded to the tiles XLA TPU gives an array without
//! a layout ([`default_tpu_tiles`], read off the layouts of XLA's programs).
//! [`check_order`] tells whether an order is a valid schedule of a computation: the tests
//! run every algorithm on random computations with control edges through it.

use std::collections::{BTreeSet, HashMap};

use hlo_ir::{Computation, NodeIndex, Op, Opcode, Shape};

/// Which algorithm orders a computation (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    List,
    Dfs,
    PostOrder,
    Program,
}

impl Algorithm {
    /// Every algorithm, in the order ties between their peaks are broken (XLA prefers
    /// the list scheduler, then DFS, then the post-order).
    pub const ALL: [Algorithm; 4] =
        [Algorithm::List, Algorithm::Dfs, Algorithm::PostOrder, Algorithm::Program];

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::List => "list",
            Algorithm::Dfs => "dfs",
            Algorithm::PostOrder => "post-order",
            Algorithm::Program => "program",
        }
    }
}

/// A computation's instructions as a DAG over dense positions (program order).
pub struct Dag {
    /// Instructions in program order.
    pub nodes: Vec<NodeIndex>,
    /// Per position: operand positions in slot order (repeats kept).
    pub operands: Vec<Vec<usize>>,
    /// Per position: distinct users, ascending.
    pub users: Vec<Vec<usize>>,
    /// Per position: control predecessors and successors.
    pub preds: Vec<Vec<usize>>,
    pub succs: Vec<Vec<usize>>,
    /// The root's position.
    pub root: usize,
    /// Position of each node (by `NodeIndex::index()`).
    pos: Vec<usize>,
}

impl Dag {
    pub fn new(c: &Computation) -> Dag {
        let nodes = c.post_order();
        let bound = c.graph().node_indices().map(|n| n.index() + 1).max().unwrap_or(0);
        let mut pos = vec![usize::MAX; bound];
        for (i, n) in nodes.iter().enumerate() {
            pos[n.index()] = i;
        }
        let operands: Vec<Vec<usize>> =
            nodes.iter().map(|&n| c.operands(n).iter().map(|o| pos[o.index()]).collect()).collect();
        let mut users = vec![Vec::new(); nodes.len()];
        for (i, ops) in operands.iter().enumerate() {
            for &o in ops {
                if users[o].last() != Some(&i) {
                    users[o].push(i);
                }
            }
        }
        let preds: Vec<Vec<usize>> = nodes
            .iter()
            .map(|&n| c.control_predecessors(n).iter().map(|p| pos[p.index()]).collect())
            .collect();
        let mut succs = vec![Vec::new(); nodes.len()];
        for (i, ps) in preds.iter().enumerate() {
            for &p in ps {
                succs[p].push(i);
            }
        }
        let root = c.root().map_or(nodes.len().saturating_sub(1), |r| pos[r.index()]);
        Dag { nodes, operands, users, preds, succs, root, pos }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The position of `n`.
    pub fn position(&self, n: NodeIndex) -> Option<usize> {
        self.pos.get(n.index()).copied().filter(|&p| p != usize::MAX)
    }

    /// Distinct operand positions of `i`, in slot order.
    fn unique_operands(&self, i: usize) -> Vec<usize> {
        let mut v: Vec<usize> = Vec::with_capacity(self.operands[i].len());
        for &o in &self.operands[i] {
            if !v.contains(&o) {
                v.push(o);
            }
        }
        v
    }

    /// Instructions nothing depends on (no users, no control successors), the root last.
    fn sinks(&self) -> Vec<usize> {
        let mut v: Vec<usize> = (0..self.len())
            .filter(|&i| i != self.root && self.users[i].is_empty() && self.succs[i].is_empty())
            .collect();
        if !self.is_empty() {
            v.push(self.root);
        }
        v
    }
}

/// Bytes of each array leaf of `s` (dynamic dimensions at their bound), dense: no padding.
pub fn leaf_bytes(s: &Shape) -> Vec<u64> {
    leaf_bytes_as(s, Sizing::Dense)
}

/// Bytes of each array leaf of `s` as [`array_bytes`] counts them under `sizing`.
pub fn leaf_bytes_as(s: &Shape, sizing: Sizing) -> Vec<u64> {
    let mut v = Vec::new();
    s.for_each_array(&mut |a| v.push(array_bytes(a, sizing)));
    v
}

/// How the bytes of an array are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizing {
    /// Elements times their size: no padding, every memory space.
    Dense,
    /// HBM bytes as the layouts the module carries lay the array out (XLA TPU's per-chip
    /// program): padded to the layout's first tile, as XLA's `ShapeUtil::ArraySize` counts
    /// it; an array in an on-chip memory space (`S(n)`, n > 0) has no HBM bytes; an array
    /// with no tile is dense.
    Tiled,
    /// HBM bytes of a module that carries no tiled layout (our pipeline's): every array
    /// padded to the tile XLA TPU's layout assignment gives such an array (see
    /// [`default_tpu_tiles`]).
    DefaultTpuTiles,
}

impl Sizing {
    pub fn name(self) -> &'static str {
        match self {
            Sizing::Dense => "dense",
            Sizing::Tiled => "layout tiles",
            Sizing::DefaultTpuTiles => "default TPU tiles",
        }
    }

    /// `Tiled` for a module any of whose arrays carries a tiled layout, else
    /// `DefaultTpuTiles`.
    pub fn for_module(m: &hlo_ir::Module) -> Sizing {
        let tiled = |s: &Shape| {
            let mut t = false;
            s.for_each_array(&mut |a| t |= !a.layout_fields().tiles.is_empty());
            t
        };
        let any = m.entry_param_shapes().iter().any(tiled)
            || m.comps().iter().any(|c| c.instrs().any(|ins| tiled(&ins.shape)));
        if any { Sizing::Tiled } else { Sizing::DefaultTpuTiles }
    }
}

/// Bytes of array `a` under `sizing` (dynamic dimensions at their bound).
pub fn array_bytes(a: &hlo_ir::ArrayShape, sizing: Sizing) -> u64 {
    let dims: Vec<u64> = a.dims.iter().map(|d| d.bound().unwrap_or(0)).collect();
    let bits = a.elem.bits() as u64;
    let bytes = |elements: u64, bits: u64| elements.saturating_mul(bits).div_ceil(8);
    let dense = || bytes(dims.iter().product(), bits);
    match sizing {
        Sizing::Dense => dense(),
        Sizing::Tiled => {
            let e = a.layout_fields();
            if e.memory_space != 0 {
                return 0;
            }
            let bits = e.element_bits.unwrap_or(bits);
            match a.tiled_elements() {
                Some(n) => bytes(n, bits),
                None => bytes(dims.iter().product(), bits),
            }
        }
        Sizing::DefaultTpuTiles => bytes(default_tpu_tiles(&dims, bits), bits),
    }
}

/// Elements an array of dimensions `dims` (of `bits`-bit elements) occupies under the tiling
/// XLA TPU's layout assignment gives it, as the layouts of XLA's per-chip programs show
/// them (`target/validate/*-xla-tpu/program.hlo`: every array of rank >= 2 is tiled
/// `T(r,128)`, with `(2,1)` or `(4,1)` sub-tiles packing 16- and 8-bit types, which do not
/// change the size):
///
/// - Rank >= 2: the minor dimension padded to 128 lanes; the second-minor to `r` rows:
///   8, or the power of two that holds it when it is under 8 (at least 2 rows for 16-bit
///   and 4 for 8-bit types: `f32[1,5120]{1,0:T(1,128)}`, `bf16[1,1024]{1,0:T(2,128)(2,1)}`,
///   `f32[4,2048]{1,0:T(4,128)}`, `pred[1,2048,1,1]{1,3,2,0:T(4,128)(4,1)}`). Which two
///   dimensions are minor is XLA's choice: our modules keep row-major layouts, so the two
///   are taken that pad least (ties: the row-major ones), which is the layout XLA's
///   `entry_computation_layout` gives every parameter of these programs (an FSDP shard
///   `f32[32,32768,20]` is `{1,0,2}`: 20 major, unpadded; row-major it would take 6.4
///   times its bytes). XLA keeps a worse layout for some temporaries (a
///   `bf16[3145728,20]{1,0}` operand of a dot, 6.4 times its bytes): those are not
///   predicted.
/// - Rank 1: `T(128)`-`T(1024)`: padded to the power of two that holds it, at least 512
///   bytes (128 f32, 256 bf16, 512 8-bit elements) and at most 1024 elements; longer
///   arrays to a multiple of 1024 (`f32[3648]{0:T(1024)}`).
/// - Rank 0: one 512-byte tile (`f32[]{:T(128)}`, `bf16[]{:T(256)}`).
pub fn default_tpu_tiles(dims: &[u64], bits: u64) -> u64 {
    let bits = bits.max(1);
    let min_1d = (4096 / bits).max(1);
    match dims {
        [] => min_1d,
        [n] => {
            let n = *n;
            if n <= min_1d {
                min_1d
            } else if n <= 1024 {
                n.next_power_of_two()
            } else {
                n.div_ceil(1024) * 1024
            }
        }
        _ => {
            let min_rows = match bits {
                0..=8 => 4,
                9..=16 => 2,
                _ => 1,
            };
            let rows = |s: u64| {
                if s >= 8 { s.div_ceil(8) * 8 } else { s.next_power_of_two().max(min_rows) }
            };
            let all: u64 = dims.iter().product();
            let rank = dims.len();
            let mut best: Option<u64> = None;
            // Row-major first, so that it wins ties.
            let pairs = std::iter::once((rank - 1, rank - 2)).chain(
                (0..rank).flat_map(|m| (0..rank).filter(move |&s| s != m).map(move |s| (m, s))),
            );
            for (minor, second) in pairs {
                let (dm, ds) = (dims[minor], dims[second]);
                let rest = if dm == 0 || ds == 0 { 0 } else { all / dm / ds };
                let n = rest.saturating_mul(rows(ds)).saturating_mul(dm.div_ceil(128) * 128);
                if best.is_none_or(|b| n < b) {
                    best = Some(n);
                }
            }
            best.unwrap_or(0)
        }
    }
}

/// The leaves of tuple element `index` of `s`: their range among `s`'s leaves.
pub fn element_leaves(s: &Shape, index: usize) -> Option<std::ops::Range<usize>> {
    let Shape::Tuple(t) = s else { return None };
    let start: usize = t.get(..index)?.iter().map(Shape::leaf_count).sum();
    Some(start..start + t.get(index)?.leaf_count())
}

/// Whether `op` holds its operands' buffers rather than defining its own: what XLA's
/// points-to analysis aliases (tuple, get-tuple-element, bitcast, optimization barrier,
/// while), and reshapes, which XLA's layout assignment makes bitcasts where it can.
pub fn aliases_operand(op: &Op) -> bool {
    match op {
        Op::Plain(o) => matches!(
            o,
            Opcode::Tuple | Opcode::Bitcast | Opcode::OptBarrier | Opcode::AddDependency
        ),
        Op::GetTupleElement { .. } | Op::While { .. } | Op::Reshape { .. } | Op::Domain { .. } => {
            true
        }
        Op::CustomCall(cc) => cc.is_single_device_identity(),
        _ => false,
    }
}

/// The buffers of one computation as the scheduling heuristics see them.
#[derive(Default)]
pub struct LogicalBuffers {
    /// Per position: the buffers the value holds, one per array leaf (for a value XLA's
    /// fusion recomputes in its consumers: every buffer of its operands).
    pub held: Vec<Vec<usize>>,
    /// Per buffer: its bytes.
    pub bytes: Vec<u64>,
    /// Per buffer: the position that defines it.
    pub def: Vec<usize>,
    /// Per buffer: whether the heuristics ignore it (parameters and constants, as XLA's).
    pub ignored: Vec<bool>,
    /// Per position: whether the value holds no buffer of its own because XLA's fusion
    /// would recompute it in each of its consumers (see `crate::memory_usage`).
    pub remat: Vec<bool>,
}

impl LogicalBuffers {
    /// The buffers of `c`; `remat` decides, in program order, which values hold their
    /// operands' buffers instead of their own (given the buffers so far).
    pub fn new(
        c: &Computation,
        dag: &Dag,
        sizing: Sizing,
        remat: &mut dyn FnMut(usize, &LogicalBuffers) -> bool,
    ) -> LogicalBuffers {
        let mut b = LogicalBuffers {
            held: vec![Vec::new(); dag.len()],
            bytes: Vec::new(),
            def: Vec::new(),
            ignored: Vec::new(),
            remat: vec![false; dag.len()],
        };
        for (i, &n) in dag.nodes.iter().enumerate() {
            let ins = c.instr(n);
            let ops = &dag.operands[i];
            let held: Option<Vec<usize>> = match &ins.op {
                Op::Plain(Opcode::Tuple) => {
                    Some(ops.iter().flat_map(|&o| b.held[o].iter().copied()).collect())
                }
                Op::GetTupleElement { index } => ops.first().and_then(|&src| {
                    let shape = &c.instr(dag.nodes[src]).shape;
                    element_leaves(shape, *index as usize)
                        .filter(|r| r.end <= b.held[src].len())
                        .map(|r| b.held[src][r].to_vec())
                }),
                op if aliases_operand(op) => ops
                    .first()
                    .map(|&o| b.held[o].clone())
                    .filter(|h| h.len() == ins.shape.leaf_count()),
                _ if remat(i, &b) => {
                    b.remat[i] = true;
                    let mut v: Vec<usize> =
                        ops.iter().flat_map(|&o| b.held[o].iter().copied()).collect();
                    v.sort_unstable();
                    v.dedup();
                    if v.is_empty() {
                        // Computed from nothing: a placeholder of no bytes.
                        b.bytes.push(0);
                        b.def.push(i);
                        b.ignored.push(true);
                        v.push(b.bytes.len() - 1);
                    }
                    Some(v)
                }
                _ => None,
            };
            b.held[i] = held.unwrap_or_else(|| {
                let ignored = matches!(ins.op, Op::Parameter { .. } | Op::Constant(_));
                leaf_bytes_as(&ins.shape, sizing)
                    .into_iter()
                    .map(|bytes| {
                        b.bytes.push(bytes);
                        b.def.push(i);
                        b.ignored.push(ignored);
                        b.bytes.len() - 1
                    })
                    .collect()
            });
        }
        b
    }

    /// Bytes the heuristics count for buffer `k`.
    pub fn counted(&self, k: usize) -> u64 {
        if self.ignored[k] { 0 } else { self.bytes[k] }
    }
}

/// An order of `c`'s instructions by `alg`, over `dag` and `bufs` (built from `c`).
pub fn order(c: &Computation, dag: &Dag, bufs: &LogicalBuffers, alg: Algorithm) -> Vec<usize> {
    match alg {
        Algorithm::List => list(c, dag, bufs),
        Algorithm::Dfs => dfs(c, dag, bufs),
        Algorithm::PostOrder => post_order(dag),
        Algorithm::Program => (0..dag.len()).collect(),
    }
}

/// Whether a shape is a scalar or has one element in every dimension.
fn effective_scalar(s: &Shape) -> bool {
    match s {
        Shape::Array(a) => a.dims.iter().all(|d| d.bound() == Some(1)),
        _ => false,
    }
}

/// XLA's `ListScheduler` (see the module doc).
fn list(c: &Computation, dag: &Dag, bufs: &LogicalBuffers) -> Vec<usize> {
    let n = dag.len();
    // The buffers each instruction reads, once each.
    let uses: Vec<Vec<usize>> = (0..n)
        .map(|i| {
            let mut v: Vec<usize> =
                dag.operands[i].iter().flat_map(|&o| bufs.held[o].iter().copied()).collect();
            v.sort_unstable();
            v.dedup();
            v
        })
        .collect();
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); bufs.bytes.len()];
    let mut unscheduled = vec![0i64; bufs.bytes.len()];
    for (i, u) in uses.iter().enumerate() {
        for &k in u {
            readers[k].push(i);
            unscheduled[k] += 1;
        }
    }
    // What the computation returns is used once more, at its end.
    for &k in &bufs.held[dag.root] {
        unscheduled[k] += 1;
    }
    let mut defined = vec![0u64; n];
    for (k, &d) in bufs.def.iter().enumerate() {
        defined[d] += bufs.counted(k);
    }
    let scalar: Vec<bool> =
        dag.nodes.iter().map(|&x| effective_scalar(&c.instr(x).shape)).collect();
    let priority = |i: usize, unscheduled: &[i64]| -> (i64, i64) {
        if scalar[i] {
            return (i64::MAX, i64::MAX);
        }
        let freed: u64 =
            uses[i].iter().filter(|&&k| unscheduled[k] == 1).map(|&k| bufs.counted(k)).sum();
        (freed as i64 - defined[i] as i64, dag.users[i].len() as i64)
    };
    let mut waiting: Vec<usize> =
        (0..n).map(|i| dag.unique_operands(i).len() + dag.preds[i].len()).collect();
    // Ready instructions keyed by (priority, when readied): the greatest goes next.
    let mut ready: BTreeSet<((i64, i64), u64, usize)> = BTreeSet::new();
    let mut key: Vec<Option<((i64, i64), u64)>> = vec![None; n];
    let mut stamp = 0u64;
    let mut push = |i: usize,
                    unscheduled: &[i64],
                    ready: &mut BTreeSet<((i64, i64), u64, usize)>,
                    key: &mut Vec<Option<((i64, i64), u64)>>| {
        stamp += 1;
        let p = priority(i, unscheduled);
        ready.insert((p, stamp, i));
        key[i] = Some((p, stamp));
    };
    for (i, _) in waiting.iter().enumerate().filter(|(_, w)| **w == 0) {
        push(i, &unscheduled, &mut ready, &mut key);
    }
    let mut out = Vec::with_capacity(n);
    while let Some((_, _, best)) = ready.pop_last() {
        key[best] = None;
        out.push(best);
        let mut now_last: Vec<usize> = Vec::new();
        for &k in &uses[best] {
            unscheduled[k] -= 1;
            if unscheduled[k] == 1 {
                now_last.push(k);
            }
        }
        for &u in dag.users[best].iter().chain(&dag.succs[best]) {
            waiting[u] -= 1;
            if waiting[u] == 0 {
                push(u, &unscheduled, &mut ready, &mut key);
            }
        }
        // A buffer down to one unscheduled use raises the priority of the ready
        // instruction that reads it.
        for k in now_last {
            for &r in &readers[k] {
                if let Some((p, s)) = key[r] {
                    let q = priority(r, &unscheduled);
                    if q != p {
                        ready.remove(&(p, s, r));
                        push(r, &unscheduled, &mut ready, &mut key);
                    }
                }
            }
        }
    }
    out
}

/// XLA's `DFSMemoryScheduler` (see the module doc).
fn dfs(c: &Computation, dag: &Dag, bufs: &LogicalBuffers) -> Vec<usize> {
    let n = dag.len();
    let mut defined = vec![0u64; n];
    for (k, &d) in bufs.def.iter().enumerate() {
        defined[d] += bufs.counted(k);
    }
    let mut extra_users = vec![0u64; n];
    let mut total_sizes = vec![0u64; n];
    let mut cumulative = 0u64;
    // Program order is a topological order: operands' stats are final when read.
    for i in 0..n {
        if matches!(c.instr(dag.nodes[i]).op, Op::Parameter { .. } | Op::Constant(_)) {
            continue;
        }
        extra_users[i] = dag.users[i].len().saturating_sub(1) as u64;
        total_sizes[i] = defined[i];
        cumulative = cumulative.saturating_add(defined[i]);
        for o in dag.unique_operands(i) {
            extra_users[i] = extra_users[i].saturating_add(extra_users[o]);
            total_sizes[i] = total_sizes[i].saturating_add(total_sizes[o]);
        }
        total_sizes[i] = total_sizes[i].min(cumulative);
        extra_users[i] = extra_users[i].min(n as u64);
    }
    let name = |i: usize| c.instr(dag.nodes[i]).name.as_str();
    depth_first(dag, |i| {
        let mut v = dag.unique_operands(i);
        v.sort_by(|&a, &b| {
            extra_users[b]
                .cmp(&extra_users[a])
                .then(total_sizes[b].cmp(&total_sizes[a]))
                .then_with(|| name(a).cmp(name(b)))
        });
        v
    })
}

/// XLA's `MakeInstructionPostOrder`: operands in slot order.
fn post_order(dag: &Dag) -> Vec<usize> {
    depth_first(dag, |i| dag.unique_operands(i))
}

/// A depth-first post-order from each sink (the root last), visiting the children that
/// `operands` lists in its order, then the control predecessors.
fn depth_first(dag: &Dag, operands: impl Fn(usize) -> Vec<usize>) -> Vec<usize> {
    let n = dag.len();
    let mut state = vec![0u8; n]; // 0 unseen, 1 on the stack, 2 emitted
    let mut out = Vec::with_capacity(n);
    for s in dag.sinks() {
        let mut stack: Vec<(usize, Vec<usize>, usize)> = Vec::new();
        if state[s] != 0 {
            continue;
        }
        state[s] = 1;
        let mut kids = operands(s);
        kids.extend(dag.preds[s].iter().copied());
        stack.push((s, kids, 0));
        while let Some((node, kids, next)) = stack.last_mut() {
            if let Some(&k) = kids.get(*next) {
                *next += 1;
                if state[k] == 0 {
                    state[k] = 1;
                    let mut kk = operands(k);
                    kk.extend(dag.preds[k].iter().copied());
                    stack.push((k, kk, 0));
                }
            } else {
                state[*node] = 2;
                out.push(*node);
                stack.pop();
            }
        }
    }
    // Instructions no sink reaches (none in a valid computation) keep program order.
    out.extend((0..n).filter(|&i| state[i] == 0));
    out
}

/// Whether `order` (positions of `dag`) is a schedule of the computation: every
/// instruction exactly once, after its operands and its control predecessors.
pub fn check_order(c: &Computation, dag: &Dag, order: &[usize]) -> Result<(), String> {
    let name = |i: usize| c.instr(dag.nodes[i]).name.clone();
    if order.len() != dag.len() {
        return Err(format!(
            "{} instructions ordered, {} in the computation",
            order.len(),
            dag.len()
        ));
    }
    let mut at: HashMap<usize, usize> = HashMap::with_capacity(order.len());
    for (t, &i) in order.iter().enumerate() {
        if i >= dag.len() {
            return Err(format!("position {i} is not an instruction"));
        }
        if at.insert(i, t).is_some() {
            return Err(format!("`{}` is ordered twice", name(i)));
        }
    }
    for (t, &i) in order.iter().enumerate() {
        for &o in dag.operands[i].iter().chain(&dag.preds[i]) {
            if at[&o] >= t {
                return Err(format!(
                    "`{}` is ordered before `{}`, which it depends on",
                    name(i),
                    name(o)
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comp(src: &str) -> Computation {
        let m = hlo_check::parse(src).expect("module");
        m.entry().clone()
    }

    /// A diamond of big and small buffers, plus a control edge.
    const SRC: &str = "HloModule m\n\nENTRY e {\n  p = f32[1024] parameter(0)\n  \
        a = f32[1024] negate(p)\n  b = f32[4096] concatenate(a, a, a, a), dimensions={0}\n  \
        c = f32[1024] exponential(p)\n  d = f32[1024] slice(b), slice={[0:1024]}\n  \
        e = f32[1024] add(c, d)\n  f = f32[] constant(1), control-predecessors={e}\n  \
        ROOT t = (f32[1024], f32[]) tuple(e, f)\n}\n";

    /// The bytes of the one array in `shape` (HLO text) under `sizing`.
    fn bytes(shape: &str, sizing: Sizing) -> u64 {
        let src = format!("HloModule m\n\nENTRY e {{\n  ROOT p = {shape} parameter(0)\n}}\n");
        let m = hlo_check::parse(&src).expect("module");
        let v = leaf_bytes_as(&m.entry_param_shapes()[0], sizing);
        assert_eq!(v.len(), 1);
        v[0]
    }

    #[test]
    fn tiled_layouts_pad_to_their_first_tile() {
        // bf16[32,256,20]{1,0,2}: 256 lanes minor, 32 rows second-minor (a multiple of 8),
        // 20 major: no padding, 32 x 256 x 20 x 2 bytes.
        let t = Sizing::Tiled;
        assert_eq!(bytes("bf16[32,256,20]{1,0,2:T(8,128)(2,1)}", t), 327_680);
        // Row-major, 20 is the minor dimension: padded to 128 lanes, 6.4 times the bytes.
        assert_eq!(bytes("bf16[32,256,20]{2,1,0:T(8,128)(2,1)}", t), 32 * 256 * 128 * 2);
        assert_eq!(bytes("bf16[32,256,20]{2,1,0:T(8,128)(2,1)}", Sizing::Dense), 327_680);
        // The second-minor dimension to the tile's rows: 3 to 4, 1 to 2.
        assert_eq!(bytes("f32[7,7,3,64]{3,2,1,0:T(4,128)}", t), 7 * 7 * 4 * 128 * 4);
        assert_eq!(bytes("bf16[1,5120,32768]{2,0,1:T(2,128)(2,1)}", t), 5120 * 2 * 32768 * 2);
        // One-dimensional tiles; a scalar fills its tile (a tile dimension beyond the rank
        // pads a dimension of 1).
        assert_eq!(bytes("f32[3648]{0:T(1024)}", t), 4096 * 4);
        assert_eq!(bytes("f32[]{:T(128)}", t), 512);
        assert_eq!(bytes("bf16[]{:T(256)}", t), 512);
        // On-chip memory spaces hold no HBM bytes; an array without tiles is dense.
        assert_eq!(bytes("bf16[2048,640]{1,0:T(8,128)(2,1)S(1)}", t), 0);
        assert_eq!(bytes("u32[]{:S(2)}", t), 0);
        assert_eq!(bytes("f32[3,5]{1,0}", t), 60);
        // An element size set by the layout.
        assert_eq!(bytes("s8[8,128]{1,0:T(8,128)E(4)}", t), 512);
    }

    #[test]
    fn the_default_tpu_tiles_pad_the_least_padded_layout() {
        let d = Sizing::DefaultTpuTiles;
        // f32[3,5] row-major: 5 to 128 lanes, 3 to 4 rows (T(4,128)): 4 x 128 x 4 bytes;
        // the other way round (3 minor, 5 to 8 rows) would take twice that.
        assert_eq!(bytes("f32[3,5]", d), 2048);
        // bf16[32,256,20] without a layout: 256 minor and 32 second-minor, as XLA lays out
        // such an FSDP shard ({1,0,2}): no padding.
        assert_eq!(bytes("bf16[32,256,20]", d), 327_680);
        // f32[32,32768,20] (XLA: {1,0,2}) and f32[32768,20] ({0,1}: 20 rows padded to 24).
        assert_eq!(bytes("f32[32,32768,20]", d), 32 * 32768 * 20 * 4);
        assert_eq!(bytes("f32[32768,20]", d), 32768 * 24 * 4);
        // One row: T(1,128) for 32-bit, T(2,128) for 16-bit, T(4,128) for 8-bit types.
        assert_eq!(bytes("f32[1,5120]", d), 5120 * 4);
        assert_eq!(bytes("bf16[1,1024]", d), 2 * 1024 * 2);
        assert_eq!(bytes("pred[1,2048]", d), 4 * 2048);
        // Rank 1 and 0: powers of two from 512 bytes to 1024 elements, then multiples of 1024.
        assert_eq!(bytes("f32[20]", d), 512);
        assert_eq!(bytes("bf16[20]", d), 512);
        assert_eq!(bytes("f32[512]", d), 2048);
        assert_eq!(bytes("f32[3648]", d), 4096 * 4);
        assert_eq!(bytes("s32[]", d), 512);
    }

    #[test]
    fn a_module_with_tiled_layouts_is_sized_by_them() {
        let m = |shape: &str| {
            let src = format!(
                "HloModule m\n\nENTRY e {{\n  p = {shape} parameter(0)\n  ROOT n = {shape} negate(p)\n}}\n"
            );
            hlo_check::parse(&src).expect("module")
        };
        assert_eq!(Sizing::for_module(&m("f32[8,128]{1,0:T(8,128)}")), Sizing::Tiled);
        assert_eq!(Sizing::for_module(&m("f32[8,128]{1,0}")), Sizing::DefaultTpuTiles);
        assert_eq!(Sizing::for_module(&m("f32[8,128]")), Sizing::DefaultTpuTiles);
    }

    #[test]
    fn every_algorithm_respects_dependencies() {
        let c = comp(SRC);
        let dag = Dag::new(&c);
        let bufs = LogicalBuffers::new(&c, &dag, Sizing::Dense, &mut |_, _| false);
        for alg in Algorithm::ALL {
            let o = order(&c, &dag, &bufs, alg);
            check_order(&c, &dag, &o).unwrap_or_else(|e| panic!("{}: {e}", alg.name()));
        }
    }

    #[test]
    fn check_order_refuses_a_broken_order() {
        let c = comp(SRC);
        let dag = Dag::new(&c);
        let mut o: Vec<usize> = (0..dag.len()).collect();
        assert!(check_order(&c, &dag, &o).is_ok());
        // `e` before `d`, which it reads.
        let (d, e) = (
            dag.position(c.find("d").unwrap()).unwrap(),
            dag.position(c.find("e").unwrap()).unwrap(),
        );
        o.swap(d, e);
        let err = check_order(&c, &dag, &o).unwrap_err();
        assert!(err.contains("`e` is ordered before `d`"), "{err}");
        // The constant before `e`, its control predecessor.
        let mut o: Vec<usize> = (0..dag.len()).collect();
        let f = dag.position(c.find("f").unwrap()).unwrap();
        o.swap(e, f);
        assert!(check_order(&c, &dag, &o).is_err());
        // A missing or repeated instruction.
        assert!(check_order(&c, &dag, &o[1..]).is_err());
        let mut o: Vec<usize> = (0..dag.len()).collect();
        o[1] = o[0];
        assert!(check_order(&c, &dag, &o).is_err());
    }

    #[test]
    fn aliases_hold_their_operands_buffers() {
        let c = comp(
            "HloModule m\n\nENTRY e {\n  p = f32[8] parameter(0)\n  q = f32[2,4] reshape(p)\n  \
             t = (f32[8], f32[2,4]) tuple(p, q)\n  g = f32[2,4] get-tuple-element(t), index=1\n  \
             ROOT n = f32[2,4] negate(g)\n}\n",
        );
        let dag = Dag::new(&c);
        let b = LogicalBuffers::new(&c, &dag, Sizing::Dense, &mut |_, _| false);
        let at = |s: &str| dag.position(c.find(s).unwrap()).unwrap();
        assert_eq!(b.held[at("q")], b.held[at("p")]);
        assert_eq!(b.held[at("g")], b.held[at("p")]);
        assert_eq!(b.held[at("t")].len(), 2);
        assert_ne!(b.held[at("n")], b.held[at("p")]);
        assert!(b.ignored[b.held[at("p")][0]] && !b.ignored[b.held[at("n")][0]]);
    }

    /// A random computation over `f32[16]` and broadcasts of it (elementwise ops, tuples,
    /// control edges to earlier instructions), from `seed`.
    fn random_module(seed: u64) -> String {
        let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut rnd = |n: usize| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 33) as usize) % n.max(1)
        };
        let mut lines = vec![
            "  v0 = f32[16] parameter(0)".to_string(),
            "  v1 = f32[16] parameter(1)".to_string(),
        ];
        // (name, rows): rows 0 is f32[16], else f32[rows,16].
        let mut vals: Vec<(String, usize)> = vec![("v0".into(), 0), ("v1".into(), 0)];
        let count = 8 + rnd(40);
        for k in 2..count {
            let name = format!("v{k}");
            let pick = |rows: usize, rnd: &mut dyn FnMut(usize) -> usize| {
                let same: Vec<&(String, usize)> = vals.iter().filter(|v| v.1 == rows).collect();
                same.get(rnd(same.len())).map(|v| v.0.clone())
            };
            let rows = [0, 0, 4, 8][rnd(4)];
            let shape = if rows == 0 { "f32[16]".to_string() } else { format!("f32[{rows},16]") };
            let body = match (rnd(3), pick(rows, &mut rnd), pick(rows, &mut rnd)) {
                (0, Some(a), _) => format!("negate({a})"),
                (1, Some(a), Some(b)) => format!("add({a}, {b})"),
                _ if rows > 0 => {
                    let a = pick(0, &mut rnd).unwrap_or_else(|| "v0".into());
                    format!("broadcast({a}), dimensions={{1}}")
                }
                _ => format!("exponential({})", pick(0, &mut rnd).unwrap_or_else(|| "v0".into())),
            };
            let control = if rnd(5) == 0 && k > 2 {
                format!(", control-predecessors={{v{}}}", 2 + rnd(k - 2))
            } else {
                String::new()
            };
            lines.push(format!("  {name} = {shape} {body}{control}"));
            vals.push((name, rows));
        }
        let outs: Vec<&(String, usize)> = (0..3).map(|_| &vals[rnd(vals.len())]).collect();
        let shapes: Vec<String> = outs
            .iter()
            .map(|v| if v.1 == 0 { "f32[16]".into() } else { format!("f32[{},16]", v.1) })
            .collect();
        let names: Vec<&str> = outs.iter().map(|v| v.0.as_str()).collect();
        lines.push(format!("  ROOT t = ({}) tuple({})", shapes.join(", "), names.join(", ")));
        format!("HloModule r\n\nENTRY e {{\n{}\n}}\n", lines.join("\n"))
    }

    #[test]
    fn no_algorithm_breaks_a_dependency_of_random_computations() {
        for seed in 0..200 {
            let src = random_module(seed);
            let c = comp(&src);
            let dag = Dag::new(&c);
            let bufs = LogicalBuffers::new(&c, &dag, Sizing::Dense, &mut |_, _| false);
            for alg in Algorithm::ALL {
                let o = order(&c, &dag, &bufs, alg);
                check_order(&c, &dag, &o)
                    .unwrap_or_else(|e| panic!("seed {seed}, {}: {e}\n{src}", alg.name()));
            }
        }
    }
}
