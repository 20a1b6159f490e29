//! GSPMD's SPMD partitioner: a module whose instructions carry shardings (after
//! `sharding-propagation`) becomes the one program every device runs, parameterized by
//! `partition-id`, with per-device shapes and the collectives between devices.
//!
//! Each instruction is lowered by a rule that states which sharding it needs its operands
//! in; [`Builder::reshard`] moves a value from the sharding it has to the one needed:
//! - a tiling moved from one dim to another among the same devices: one `all-to-all`;
//! - along every dimension where some device's target region is not inside the region it
//!   holds, an `all-gather` within the devices that differ only along that dimension;
//! - then a `dynamic-slice` at per-device offsets (a constant table indexed by
//!   `partition-id`; no communication), padding first where a slice would be clamped.
//!
//! Rules: elementwise ops (`map` among them), broadcast, transpose and reshape run
//! locally on operands resharded to match the result; `dot` runs locally when its
//! operands agree on the contracting-dim tiling and sums the partial products with an
//! `all-reduce` (or one `reduce-scatter` when the result is needed split among the
//! summing devices), else gathers the operand tiles the output does not share; `reduce`
//! over a tiled dimension reduces locally, masking the padding of uneven shards with the
//! init value, then `all-reduce`s with its own reducer. Every other op is computed on
//! replicated operands and sliced to its sharding (GSPMD's "involuntary full
//! rematerialization"; [`Partitioned::rematerialized`] lists them).
//!
//! Uneven shards are padded chunks of `ceil(n / tiles)`: padding holds unspecified values
//! and is masked wherever it could reach a valid element (reductions, dot contraction) and
//! sliced off where arrays are gathered. Collectives get fresh `channel_id`s,
//! `use_global_device_ids=true` and replica groups in iota form where one exists.
//!
//! `tuple` and `get-tuple-element` forward their operands' values, resharded to their own
//! sharding when they carry one (as GSPMD does); the entry root ends in its sharding
//! (replicated where it has none), which is what the outputs are assembled by.
//! `while` and `conditional` bodies are partitioned as computations of their own, their
//! parameters and roots in the loop's (branch's) sharding; a tuple-shaped entry parameter
//! is one parameter of its leaves' local shapes. Manual regions (`shard_map`: between
//! `SPMDFullToShardShape` and `SPMDShardToFullShape`) are kept as written, their borders
//! the local shards of the sharded arrays. Not done: halo exchange beyond stride-1 "same"
//! convolutions (reduce-window, pad, slice, concatenate and dynamic-update-slice across
//! shard boundaries are rematerialized), windowed einsum.

use std::collections::HashMap;

use hlo_ir::literal::{Literal, LiteralData};
use hlo_ir::op::{CmpDirection, CollectiveAttrs, DotDims, PadDim, ReplicaGroups, SliceRange};
use hlo_ir::sharding::IotaList;
use hlo_ir::{
    CompId, Computation, Diagnostic, ElemType, Instr, Module, NodeIndex, Op, Opcode, Shape,
};

use super::geometry::Placed;
use crate::sharding::Spec;
use crate::sharding::spec::{Tiling, iota_form};
use hlo_check::shape_inference::infer_shape;

/// What partitioning did.
#[derive(Debug, Clone, Default)]
pub struct Partitioned {
    pub devices: i64,
    /// Instructions computed on replicated operands (no partitioning rule applied).
    pub rematerialized: Vec<String>,
    /// Collectives by kind, as combined (set by `spmd-partition` from the inventory).
    pub collectives: Vec<(&'static str, usize)>,
}

/// A value of the partitioned program: a local array with the sharding it is in.
#[derive(Debug, Clone)]
enum PV {
    Arr(A),
    Tup(Vec<PV>),
    Token(NodeIndex),
    /// A value of a manual region (between `SPMDFullToShardShape` and
    /// `SPMDShardToFullShape`, as `shard_map` writes it): already per device, its
    /// shape the local one as printed; never resharded.
    Manual(NodeIndex),
}

#[derive(Debug, Clone)]
struct A {
    node: NodeIndex,
    p: Placed,
    /// Global dimensions.
    dims: Vec<i64>,
    elem: ElemType,
    /// A broadcast scalar (the node of that local scalar): resharding re-broadcasts it
    /// instead of moving data.
    splat: Option<NodeIndex>,
}

fn err(ins: &Instr, msg: impl Into<String>) -> Diagnostic {
    Diagnostic::error(ins.span, msg.into())
}

/// The device count a module is partitioned for: `num_partitions`, else the largest
/// device count of its shardings.
pub fn device_count(m: &Module) -> i64 {
    if let Some(n) = m.header.num_partitions.filter(|&n| n > 1) {
        return n;
    }
    let mut n = 1;
    for c in m.comps() {
        for i in c.instrs() {
            if let Some(s) = i.sharding.as_deref().and_then(Spec::from_ir) {
                n = n.max(s.device_count().unwrap_or(1));
            }
        }
    }
    n
}

/// How the partial sums of a contraction split over devices are summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PartialSums {
    /// In the dot's own type, as XLA's SPMD partitioner sums them (the sharded dot keeps
    /// the result type and the all-reduce or reduce-scatter follows it): a bf16 gradient
    /// crosses the interconnect as bf16, and is rounded once per partial sum.
    #[default]
    AsXla,
    /// Low-precision (bf16, f16) partial sums kept in f32 until summed, then rounded
    /// once, so the partitioned program computes the one-device module's values: for
    /// checking the partitioning rules apart from the rounding XLA's choice adds.
    Exact,
}

/// Partitions `m` in place for its device count (nothing to do for one device), partial
/// sums as XLA sums them.
pub fn partition(m: &mut Module) -> Result<Option<Partitioned>, Diagnostic> {
    partition_with(m, PartialSums::AsXla)
}

/// [`partition`] with the partial sums of split contractions summed as `sums` says.
pub fn partition_with(
    m: &mut Module,
    sums: PartialSums,
) -> Result<Option<Partitioned>, Diagnostic> {
    let n = device_count(m);
    if n <= 1 {
        return Ok(None);
    }
    // Propagation accepts shardings over any distinct devices (as XLA's does); the SPMD
    // program needs every sharding to span the same devices 0..n-1.
    if let Some(d) =
        hlo_check::sharding_devices::check_partitionable(m, None, None).into_iter().next()
    {
        return Err(d);
    }
    let entry = m.entry;
    let old = m.comp(entry).clone();
    let first_channel = max_channel(m);
    let mut b = Builder {
        c: m.new_computation(&old.name),
        m,
        n,
        pid: None,
        tables: HashMap::new(),
        zeros: HashMap::new(),
        neg_zeros: HashMap::new(),
        reshards: HashMap::new(),
        adders: HashMap::new(),
        // Fresh channels follow those the program's own collectives (in manual regions)
        // already use.
        channel: first_channel,
        sums,
        out: Partitioned { devices: n, ..Default::default() },
    };
    let mut vals: HashMap<NodeIndex, PV> = HashMap::new();
    for node in old.post_order() {
        let ins = old.instr(node);
        let ops: Vec<PV> = old.operands(node).iter().map(|o| vals[o].clone()).collect();
        let v = b.lower(ins, &ops)?;
        vals.insert(node, v);
    }
    let root =
        old.root().ok_or_else(|| Diagnostic::error(None, "the entry computation has no root"))?;
    let rootv = vals.remove(&root).expect("root lowered");
    if has_manual(&rootv) {
        return Err(err(
            old.instr(root),
            "a value of a manual region is an output of the program (it leaves through \
             `SPMDShardToFullShape`)",
        ));
    }
    // The outputs are assembled by the root's sharding (replicated where it has none).
    let wants = b.leaf_wants(old.instr(root))?;
    let root_node = match b.reshard_tree(&rootv, &mut wants.iter()) {
        PV::Arr(a) => a.node,
        PV::Tup(items) => {
            let nodes: Vec<NodeIndex> = items.iter().map(|v| b.materialize(v)).collect();
            let shapes = nodes.iter().map(|&x| b.c.instr(x).shape.clone()).collect();
            b.add(Instr::new("tuple", Op::Plain(Opcode::Tuple), Shape::Tuple(shapes)), &nodes)
        }
        PV::Token(t) | PV::Manual(t) => t,
    };
    b.c.set_root(root_node);
    if let Some(s) = &old.instr(root).sharding {
        b.c.instr_mut(root_node).sharding = Some(s.clone());
    }
    let Builder { c, out, .. } = b;
    let new_id = m.add_computation(c);
    m.entry = new_id;
    m.header.num_partitions = Some(n);
    m.header.entry_layout = None;
    m.remove_computation(entry).map_err(|e| {
        Diagnostic::error(None, format!("cannot drop the unpartitioned entry: {e:?}"))
    })?;
    m.remove_unreachable_computations();
    Ok(Some(out))
}

struct Builder<'m> {
    c: Computation,
    m: &'m mut Module,
    n: i64,
    pid: Option<NodeIndex>,
    tables: HashMap<Vec<i64>, NodeIndex>,
    zeros: HashMap<ElemType, NodeIndex>,
    /// `-0.0` constants ([`Self::sum_identity`]).
    neg_zeros: HashMap<ElemType, NodeIndex>,
    /// Reshards done in this computation: (value, target tiles, repl, devices) -> result.
    reshards: HashMap<(NodeIndex, Vec<i64>, i64, Vec<i64>), A>,
    adders: HashMap<ElemType, CompId>,
    channel: i64,
    sums: PartialSums,
    out: Partitioned,
}

/// Whether `v` can be read inside a manual region as its local array: a value of the
/// region, or a replicated one (the same on every device).
fn usable_in_region(v: &PV) -> bool {
    match v {
        PV::Manual(_) | PV::Token(_) => true,
        PV::Arr(a) => a.p.is_replicated(),
        PV::Tup(items) => items.iter().all(usable_in_region),
    }
}

/// Element `index` of tuple value `v` (`ins` is the get-tuple-element, for errors).
fn tuple_element(ins: &Instr, v: &PV, index: i64) -> Result<PV, Diagnostic> {
    match v {
        PV::Tup(v) => {
            v.get(index as usize).cloned().ok_or_else(|| err(ins, "tuple index out of range"))
        }
        _ => Err(err(ins, "get-tuple-element of a non-tuple")),
    }
}

fn has_manual(v: &PV) -> bool {
    match v {
        PV::Manual(_) => true,
        PV::Tup(items) => items.iter().any(has_manual),
        PV::Arr(_) | PV::Token(_) => false,
    }
}

/// The largest `channel_id` of any instruction of `m` (0 when none has one).
fn max_channel(m: &Module) -> i64 {
    let mut most = 0;
    for id in m.comp_ids() {
        let c = m.comp(id);
        for n in c.post_order() {
            let ch = match &c.instr(n).op {
                Op::Collective { attrs, .. } => attrs.channel_id,
                Op::SendRecv { channel_id, .. } => *channel_id,
                _ => None,
            };
            most = most.max(ch.unwrap_or(0));
        }
    }
    most
}

fn udims(d: &[i64]) -> Vec<u64> {
    d.iter().map(|&x| x.max(0) as u64).collect()
}

fn global_dims(s: &Shape) -> Option<(ElemType, Vec<i64>)> {
    let a = s.as_array()?;
    let dims = a.static_dims()?;
    Some((a.elem, dims.iter().map(|&d| d as i64).collect()))
}

/// `spec` as a tiling of a rank-`rank` array over `n` devices (replicated and maximal:
/// one tile); `None` when it does not fit (another rank or device count, manual, tuple).
pub(crate) fn as_tiling(spec: &Spec, rank: usize, n: i64) -> Option<Tiling> {
    match spec {
        Spec::Tiled(t) if t.rank() == rank && t.other.is_empty() && t.num_devices() == n => {
            Some(t.clone())
        }
        Spec::Replicated | Spec::Maximal(_) => Some(Placed::replicated(rank, n).t),
        _ => None,
    }
}

/// The sharding instruction `ins` wants for leaf `leaf` (replicated when it has none).
fn wanted(ins: &Instr, leaf: Option<usize>, rank: usize, n: i64) -> Result<Placed, Diagnostic> {
    let spec = ins.sharding.as_deref().and_then(Spec::from_ir).unwrap_or(Spec::Replicated);
    let spec = match (leaf, &spec) {
        (Some(i), Spec::Tuple(v)) => v.get(i).cloned().unwrap_or(Spec::Replicated),
        (Some(_), s) => s.clone(),
        (None, Spec::Tuple(_)) => return Err(err(ins, "an array with a tuple sharding")),
        (None, s) => s.clone(),
    };
    if matches!(spec, Spec::Manual) {
        return Err(err(ins, "manual sharding regions are not supported by the partitioner"));
    }
    let t = as_tiling(&spec, rank, n).ok_or_else(|| {
        err(ins, format!("sharding does not fit a rank-{rank} array on {n} devices"))
    })?;
    Placed::new(t)
        .ok_or_else(|| err(ins, "sharding's device list is not a permutation of the devices"))
}

fn to_spec(p: &Placed) -> Spec {
    if p.is_replicated() { Spec::Replicated } else { Spec::Tiled(p.t.clone()) }
}

/// Replica groups as XLA prints them: `[G,S]<=[...]` when the groups are an iota list.
pub fn replica_groups(groups: &[Vec<i64>]) -> ReplicaGroups {
    let g = groups.len() as i64;
    let s = groups.first().map_or(0, |x| x.len() as i64);
    let flat: Vec<i64> = groups.concat();
    if groups.iter().all(|x| x.len() as i64 == s)
        && let Some(IotaList { dims: _, reshape, transpose }) = iota_form(&[g, s], &flat)
    {
        return ReplicaGroups::Iota(IotaList { dims: vec![g, s], reshape, transpose });
    }
    ReplicaGroups::Explicit(groups.to_vec())
}

impl<'m> Builder<'m> {
    fn add(&mut self, ins: Instr, operands: &[NodeIndex]) -> NodeIndex {
        self.c.add(ins, operands)
    }

    fn shape(&self, n: NodeIndex) -> &Shape {
        &self.c.instr(n).shape
    }

    fn constant(&mut self, elem: ElemType, dims: &[i64], data: LiteralData) -> NodeIndex {
        self.add(
            Instr::new(
                "constant",
                Op::Constant(Literal::Array(data)),
                Shape::array(elem, &udims(dims)),
            ),
            &[],
        )
    }

    fn zero(&mut self, elem: ElemType) -> NodeIndex {
        if let Some(&z) = self.zeros.get(&elem) {
            return z;
        }
        let data = match elem {
            ElemType::Pred => LiteralData::Pred(vec![false]),
            e if e.is_float() => LiteralData::Float(vec![0.0]),
            _ => LiteralData::Int(vec![0]),
        };
        let z = self.constant(elem, &[], data);
        self.zeros.insert(elem, z);
        z
    }

    /// The identity of a sum for `elem`: `-0.0` for floats (`x + -0 = x` for every `x`,
    /// `-0` included, where `-0 + +0` would give `+0`), 0 otherwise. Masked-out elements
    /// of a partial result that an all-reduce sums hold it, so that a value contributed by
    /// one device comes out unchanged, sign of zero included.
    fn sum_identity(&mut self, elem: ElemType) -> NodeIndex {
        if !elem.is_float() {
            return self.zero(elem);
        }
        if let Some(&z) = self.neg_zeros.get(&elem) {
            return z;
        }
        let z = self.constant(elem, &[], LiteralData::Float(vec![-0.0]));
        self.neg_zeros.insert(elem, z);
        z
    }

    /// `partition-id` as an s32 scalar (emitted once).
    fn pid(&mut self) -> NodeIndex {
        if let Some(p) = self.pid {
            return p;
        }
        let raw = self.add(
            Instr::new(
                "partition-id",
                Op::Plain(Opcode::PartitionId),
                Shape::scalar(ElemType::U32),
            ),
            &[],
        );
        let p = self.add(
            Instr::new(
                "partition-id.s32",
                Op::Plain(Opcode::Convert),
                Shape::scalar(ElemType::S32),
            ),
            &[raw],
        );
        self.pid = Some(p);
        p
    }

    /// An s32 scalar that is `table[partition-id]` on each device.
    fn lookup(&mut self, table: Vec<i64>) -> NodeIndex {
        if let Some(&n) = self.tables.get(&table) {
            return n;
        }
        let node = if table.iter().all(|&x| x == table[0]) {
            self.constant(ElemType::S32, &[], LiteralData::Int(vec![table[0]]))
        } else {
            let pid = self.pid();
            let t = self.constant(ElemType::S32, &[self.n], LiteralData::Int(table.clone()));
            let one = self.add(
                Instr::new(
                    "dynamic-slice",
                    Op::DynamicSlice { sizes: vec![1] },
                    Shape::array(ElemType::S32, &[1]),
                ),
                &[t, pid],
            );
            self.add(
                Instr::new(
                    "offset",
                    Op::Reshape { inferred_dimension: None },
                    Shape::scalar(ElemType::S32),
                ),
                &[one],
            )
        };
        self.tables.insert(table, node);
        node
    }

    fn next_channel(&mut self) -> i64 {
        self.channel += 1;
        self.channel
    }

    /// A scalar `add` computation for `elem` (all-reduce of partial dot products).
    fn adder(&mut self, elem: ElemType) -> CompId {
        if let Some(&c) = self.adders.get(&elem) {
            return c;
        }
        let mut c = self.m.new_computation(&format!("sum.{}", elem.name()));
        let s = Shape::scalar(elem);
        let x = c.add_param("x", s.clone());
        let y = c.add_param("y", s.clone());
        let r = c.add(Instr::new("add", Op::Plain(Opcode::Add), s), &[x, y]);
        c.set_root(r);
        let id = self.m.add_computation(c);
        self.adders.insert(elem, id);
        id
    }

    fn local(&self, a: &A) -> Shape {
        Shape::array(a.elem, &udims(&a.p.local_dims(&a.dims)))
    }

    fn materialize(&mut self, v: &PV) -> NodeIndex {
        match v {
            PV::Arr(a) => a.node,
            PV::Token(t) | PV::Manual(t) => *t,
            PV::Tup(items) => {
                let nodes: Vec<NodeIndex> = items.iter().map(|x| self.materialize(x)).collect();
                let shapes = nodes.iter().map(|&x| self.shape(x).clone()).collect();
                self.add(
                    Instr::new("tuple", Op::Plain(Opcode::Tuple), Shape::Tuple(shapes)),
                    &nodes,
                )
            }
        }
    }

    // ---- resharding -------------------------------------------------------------------

    /// `a` gathered along dimension `k` within the devices that differ only along `k`.
    fn all_gather(&mut self, a: A, k: usize) -> A {
        let groups = a.p.groups_along(&[k]);
        let n = a.dims[k];
        let full = a.p.chunk(k, n) * a.p.t.tiles[k];
        let mut dims = a.p.local_dims(&a.dims);
        dims[k] = full;
        let attrs = CollectiveAttrs {
            replica_groups: Some(replica_groups(&groups)),
            channel_id: Some(self.next_channel()),
            use_global_device_ids: true,
            dimensions: Some(vec![k as i64]),
            ..Default::default()
        };
        let mut node = self.add(
            Instr::new(
                "all-gather",
                Op::Collective { opcode: Opcode::AllGather, attrs: Box::new(attrs) },
                Shape::array(a.elem, &udims(&dims)),
            ),
            &[a.node],
        );
        if full != n {
            let ranges = dims
                .iter()
                .enumerate()
                .map(|(d, &x)| SliceRange {
                    start: 0,
                    limit: if d == k { n } else { x },
                    stride: 1,
                })
                .collect();
            dims[k] = n;
            node = self.add(
                Instr::new("slice", Op::Slice { ranges }, Shape::array(a.elem, &udims(&dims))),
                &[node],
            );
        }
        let p = Placed::new(a.p.t.partially_replicate(&[k]))
            .expect("partial replication keeps a permutation");
        A { node, p, ..a }
    }

    /// `a` tiled along dim `x` resharded to the same tiling along dim `y` by one
    /// `all-to-all` (GSPMD's dim move): split `y` into `[t, c]`, exchange along the new
    /// dim, then fold it into `x`. Needs even tiles and each device's coordinate along
    /// `x` equal to its target coordinate along `y`, everything else unchanged.
    fn all_to_all(&mut self, a: &A, to: &Placed) -> Option<A> {
        let (x, y) = dim_move(&a.p, to, &a.dims)?;
        let t = a.p.t.tiles[x];
        // Devices exchanging: those that differ only along x, in x order.
        let groups = a.p.groups_along(&[x]);
        let (cx, cy) = (a.dims[x] / t, a.dims[y] / t);
        let mut local = a.p.local_dims(&a.dims);
        // [.., y, ..] -> [.., t, cy, ..]
        let mut split = local.clone();
        split[y] = cy;
        split.insert(y, t);
        let r1 = self.add(
            Instr::new(
                "reshape",
                Op::Reshape { inferred_dimension: None },
                Shape::array(a.elem, &udims(&split)),
            ),
            &[a.node],
        );
        let attrs = CollectiveAttrs {
            replica_groups: Some(replica_groups(&groups)),
            channel_id: Some(self.next_channel()),
            dimensions: Some(vec![y as i64]),
            ..Default::default()
        };
        let ex = self.add(
            Instr::new(
                "all-to-all",
                Op::Collective { opcode: Opcode::AllToAll, attrs: Box::new(attrs) },
                Shape::array(a.elem, &udims(&split)),
            ),
            &[r1],
        );
        // Move the exchanged dim (position y) right before x, then merge it into x.
        let xs = if x < y { x } else { x + 1 };
        let mut perm: Vec<usize> = (0..split.len()).filter(|&k| k != y).collect();
        let at = perm.iter().position(|&k| k == xs).expect("x present");
        perm.insert(at, y);
        let tdims: Vec<i64> = perm.iter().map(|&k| split[k]).collect();
        let tr = self.add(
            Instr::new(
                "transpose",
                Op::Transpose { dimensions: perm.iter().map(|&k| k as i64).collect() },
                Shape::array(a.elem, &udims(&tdims)),
            ),
            &[ex],
        );
        local[x] = cx * t;
        local[y] = cy;
        let node = self.add(
            Instr::new(
                "reshape",
                Op::Reshape { inferred_dimension: None },
                Shape::array(a.elem, &udims(&local)),
            ),
            &[tr],
        );
        Some(A { node, p: to.clone(), ..a.clone() })
    }

    /// Whether every device's valid target region along `k` lies inside what it holds.
    fn contained(from: &Placed, to: &Placed, k: usize, n: i64) -> bool {
        (0..from.devices()).all(|d| {
            let (ts, te) = (to.start(d, k, n), (to.start(d, k, n) + to.chunk(k, n)).min(n));
            let (fs, fe) = (from.start(d, k, n), (from.start(d, k, n) + from.chunk(k, n)).min(n));
            ts >= te || (ts >= fs && te <= fe)
        })
    }

    /// `a` in sharding `to`.
    fn reshard(&mut self, a: A, to: &Placed) -> A {
        if a.p.same_regions(to, &a.dims) {
            return A { p: to.clone(), ..a };
        }
        // A value resharded once is not moved again for its next user.
        let key = (a.node, to.t.tiles.clone(), to.t.repl, to.t.devices.clone());
        if let Some(done) = self.reshards.get(&key) {
            return done.clone();
        }
        let out = self.reshard_uncached(a, to);
        self.reshards.insert(key, out.clone());
        out
    }

    fn reshard_uncached(&mut self, a: A, to: &Placed) -> A {
        if let Some(scalar) = a.splat {
            let shape = Shape::array(a.elem, &udims(&to.local_dims(&a.dims)));
            let node = self.add(
                Instr::new("broadcast", Op::Broadcast { dimensions: vec![] }, shape),
                &[scalar],
            );
            return A { node, p: to.clone(), ..a };
        }
        if let Some(moved) = self.all_to_all(&a, to) {
            return moved;
        }
        let mut a = a;
        for k in 0..a.dims.len() {
            if a.p.t.tiles[k] > 1 && !Self::contained(&a.p, to, k, a.dims[k]) {
                a = self.all_gather(a, k);
            }
        }
        self.slice_to(a, to)
    }

    /// `a` sliced locally to `to`, whose regions lie inside `a`'s on every device.
    fn slice_to(&mut self, a: A, to: &Placed) -> A {
        let rank = a.dims.len();
        let have = a.p.local_dims(&a.dims);
        let want = to.local_dims(&a.dims);
        let mut offsets: Vec<Vec<i64>> = Vec::with_capacity(rank);
        let mut pad = vec![0i64; rank];
        let mut moves = false;
        for k in 0..rank {
            let n = a.dims[k];
            let off: Vec<i64> =
                (0..a.p.devices()).map(|d| to.start(d, k, n) - a.p.start(d, k, n)).collect();
            let reach = off.iter().map(|&o| o + want[k]).max().unwrap_or(0);
            pad[k] = (reach - have[k]).max(0);
            moves |= want[k] != have[k] || off.iter().any(|&o| o != 0);
            offsets.push(off);
        }
        if !moves {
            return A { p: to.clone(), ..a };
        }
        let mut node = a.node;
        if pad.iter().any(|&x| x > 0) {
            let z = self.zero(a.elem);
            let padded: Vec<i64> = have.iter().zip(&pad).map(|(h, p)| h + p).collect();
            let config = pad.iter().map(|&hi| PadDim { lo: 0, hi, interior: 0 }).collect();
            node = self.add(
                Instr::new("pad", Op::Pad { config }, Shape::array(a.elem, &udims(&padded))),
                &[node, z],
            );
        }
        let starts: Vec<NodeIndex> = offsets.into_iter().map(|o| self.lookup(o)).collect();
        let mut ops = vec![node];
        ops.extend(starts);
        let node = self.add(
            Instr::new(
                "dynamic-slice",
                Op::DynamicSlice { sizes: want.clone() },
                Shape::array(a.elem, &udims(&want)),
            ),
            &ops,
        );
        A { node, p: to.clone(), ..a }
    }

    /// `a` with the padding of its uneven tiled dimensions `dims` replaced by `value`.
    fn mask(&mut self, a: &A, dims: &[usize], value: NodeIndex) -> NodeIndex {
        let local = a.p.local_dims(&a.dims);
        let mut cond: Option<NodeIndex> = None;
        for &k in dims {
            let n = a.dims[k];
            if !a.p.padded(k, n) {
                continue;
            }
            let valid: Vec<i64> = (0..a.p.devices()).map(|d| a.p.valid(d, k, n)).collect();
            let limit = self.lookup(valid);
            let iota = self.add(
                Instr::new(
                    "iota",
                    Op::Iota { dimension: k as i64 },
                    Shape::array(ElemType::S32, &udims(&local)),
                ),
                &[],
            );
            let lim = self.add(
                Instr::new(
                    "broadcast",
                    Op::Broadcast { dimensions: vec![] },
                    Shape::array(ElemType::S32, &udims(&local)),
                ),
                &[limit],
            );
            let pred = Shape::array(ElemType::Pred, &udims(&local));
            let lt = self.add(
                Instr::new(
                    "compare",
                    Op::Compare { direction: CmpDirection::Lt, kind: None },
                    pred.clone(),
                ),
                &[iota, lim],
            );
            cond = Some(match cond {
                None => lt,
                Some(c) => self.add(Instr::new("and", Op::Plain(Opcode::And), pred), &[c, lt]),
            });
        }
        let Some(cond) = cond else { return a.node };
        let shape = self.local(a);
        let fill = self.add(
            Instr::new("broadcast", Op::Broadcast { dimensions: vec![] }, shape.clone()),
            &[value],
        );
        self.add(Instr::new("select", Op::Plain(Opcode::Select), shape), &[cond, a.node, fill])
    }

    /// A local partial result (`a`, whose devices along data dims `sum_over` of `space`
    /// hold partial sums) summed across them with `reducer`.
    fn all_reduce(&mut self, node: NodeIndex, groups: Vec<Vec<i64>>, reducer: CompId) -> NodeIndex {
        let shape = self.shape(node).clone();
        self.reducing(Opcode::AllReduce, node, &groups, reducer, None, shape)
    }

    /// An all-reduce or reduce-scatter (along `dimension`) of `node` within `groups`,
    /// global device ids, on a channel of its own.
    fn reducing(
        &mut self,
        opcode: Opcode,
        node: NodeIndex,
        groups: &[Vec<i64>],
        reducer: CompId,
        dimension: Option<usize>,
        shape: Shape,
    ) -> NodeIndex {
        let attrs = CollectiveAttrs {
            replica_groups: Some(replica_groups(groups)),
            channel_id: Some(self.next_channel()),
            use_global_device_ids: true,
            dimensions: dimension.map(|k| vec![k as i64]),
            to_apply: Some(reducer),
            ..Default::default()
        };
        let op = Op::Collective { opcode, attrs: Box::new(attrs) };
        self.add(Instr::new(opcode.name(), op, shape), &[node])
    }

    // ---- per-instruction rules -------------------------------------------------------

    fn arr<'v>(&self, ins: &Instr, v: &'v PV) -> Result<&'v A, Diagnostic> {
        match v {
            PV::Arr(a) => Ok(a),
            PV::Manual(_) => Err(err(
                ins,
                "a value of a manual region is used outside it (it leaves through \
                 `SPMDShardToFullShape`)",
            )),
            _ => Err(err(ins, "expected an array operand")),
        }
    }

    /// `ins` when it belongs to a manual region or borders one, lowered: the borders turn
    /// a sharded array into its per-device shard and back (no data moves: the shard is
    /// the local array), and an instruction of the region is kept as written on its
    /// operands' local arrays (its shapes are the per-device ones; its collectives
    /// already name devices). `None` for every other instruction.
    fn lower_manual(&mut self, ins: &Instr, ops: &[PV]) -> Result<Option<PV>, Diagnostic> {
        let target = match &ins.op {
            Op::CustomCall(cc) => Some(cc.target.as_str()),
            _ => None,
        };
        let dims_of = |s: &Shape| s.as_array().and_then(|a| a.static_dims()).map(|d| d.to_vec());
        if target == Some("SPMDFullToShardShape") {
            let a = self.arr(ins, &ops[0])?.clone();
            let local = a.p.local_dims(&a.dims);
            if dims_of(&ins.shape) != Some(udims(&local)) {
                return Err(err(
                    ins,
                    format!(
                        "the shard shape {} is not the operand's per-device shape {local:?} in \
                         its sharding",
                        ins.shape
                    ),
                ));
            }
            return Ok(Some(PV::Manual(a.node)));
        }
        if target == Some("SPMDShardToFullShape") {
            let PV::Manual(node) = ops[0] else {
                return Err(err(ins, "`SPMDShardToFullShape` of a value outside a manual region"));
            };
            let (elem, dims) = global_dims(&ins.shape)
                .ok_or_else(|| err(ins, "the partitioner needs static array shapes"))?;
            let want = wanted(ins, None, dims.len(), self.n)?;
            let local: Vec<u64> = udims(&want.local_dims(&dims));
            if dims_of(self.shape(node)) != Some(local.clone()) {
                return Err(err(
                    ins,
                    format!(
                        "the shard {} is not the per-device shape {local:?} of {} in its sharding",
                        self.shape(node),
                        ins.shape
                    ),
                ));
            }
            return Ok(Some(PV::Arr(A { node, p: want, dims, elem, splat: None })));
        }
        let spec = ins.sharding.as_deref().and_then(Spec::from_ir);
        // A tuple of a region (a loop's state) may hold replicated leaves beside manual
        // ones (a counter starting at a constant): a replicated array is the same on
        // every device, so its local array serves the region as it is.
        let manual = match &spec {
            Some(Spec::Manual) => true,
            Some(Spec::Tuple(v)) => {
                v.iter().any(|s| matches!(s, Spec::Manual))
                    && v.iter().all(|s| matches!(s, Spec::Manual | Spec::Replicated))
            }
            _ => ops.iter().any(has_manual),
        };
        if !manual {
            return Ok(None);
        }
        match &ins.op {
            Op::Plain(Opcode::Tuple) if ops.iter().all(usable_in_region) => {
                return Ok(Some(PV::Tup(ops.to_vec())));
            }
            Op::GetTupleElement { index } => {
                if let PV::Manual(t) = ops[0] {
                    let mut g = Instr::new(ins.name.clone(), ins.op.clone(), ins.shape.clone());
                    g.metadata = ins.metadata.clone();
                    return Ok(Some(PV::Manual(self.add(g, &[t]))));
                }
                return tuple_element(ins, &ops[0], *index).map(Some);
            }
            Op::CustomCall(cc) if cc.is_single_device_identity() && ops.len() == 1 => {
                return Ok(Some(ops[0].clone()));
            }
            Op::Parameter { .. } => {
                return Err(err(
                    ins,
                    "a manual parameter (only a region inside the program is supported)",
                ));
            }
            _ => {}
        }
        if !ops.iter().all(usable_in_region) {
            return Err(err(
                ins,
                "a sharded value enters a manual region without `SPMDFullToShardShape`",
            ));
        }
        let nodes: Vec<NodeIndex> = ops.iter().map(|v| self.materialize(v)).collect();
        let mut new = ins.clone();
        new.sharding = None;
        new.span = Default::default();
        Ok(Some(PV::Manual(self.add(new, &nodes))))
    }

    /// Clones `ins` with `operands` (local) and infers its local shape.
    fn local_op(
        &mut self,
        ins: &Instr,
        op: Op,
        operands: &[NodeIndex],
    ) -> Result<NodeIndex, Diagnostic> {
        let shapes: Vec<Shape> = operands.iter().map(|&o| self.shape(o).clone()).collect();
        let refs: Vec<&Shape> = shapes.iter().collect();
        let shape = infer_shape(&op, &refs, Some(&ins.shape), &*self.m)
            .map_err(|e| err(ins, format!("partitioned shape: {e}")))?;
        let mut new = Instr::new(ins.name.clone(), op, shape);
        new.metadata = ins.metadata.clone();
        Ok(self.add(new, operands))
    }

    fn result(&self, ins: &Instr, node: NodeIndex, p: Placed) -> Result<PV, Diagnostic> {
        let (elem, dims) = global_dims(&ins.shape)
            .ok_or_else(|| err(ins, "the partitioner needs static array shapes"))?;
        Ok(PV::Arr(A { node, p, dims, elem, splat: None }))
    }

    fn lower(&mut self, ins: &Instr, ops: &[PV]) -> Result<PV, Diagnostic> {
        let n = self.n;
        if let Some(v) = self.lower_manual(ins, ops)? {
            return Ok(v);
        }
        // Tuples, tokens and element access.
        match &ins.op {
            Op::Plain(Opcode::Tuple) => return self.in_own_sharding(ins, PV::Tup(ops.to_vec())),
            Op::GetTupleElement { index } => {
                let v = tuple_element(ins, &ops[0], *index)?;
                return self.in_own_sharding(ins, v);
            }
            Op::Plain(Opcode::AfterAll) => {
                let nodes: Vec<NodeIndex> = ops.iter().map(|v| self.materialize(v)).collect();
                return Ok(PV::Token(self.add(
                    Instr::new(ins.name.clone(), ins.op.clone(), ins.shape.clone()),
                    &nodes,
                )));
            }
            _ => {}
        }
        match &ins.op {
            Op::Call { .. } => {
                return Err(err(
                    ins,
                    "calls must be inlined before partitioning (run `inline-calls` first)",
                ));
            }
            Op::While { condition, body } => return self.lower_while(ins, *condition, *body, ops),
            Op::Conditional(br) => return self.lower_conditional(ins, br, ops),
            _ => {}
        }
        // A barrier over a tuple: each leaf in the sharding wanted for it, kept together.
        if let (Op::Plain(Opcode::OptBarrier), [v @ PV::Tup(_)]) = (&ins.op, ops) {
            let wants = self.leaf_wants(ins)?;
            let moved = self.reshard_tree(v, &mut wants.iter());
            let node = self.materialize(&moved);
            let shape = self.shape(node).clone();
            let mut barrier = Instr::new(ins.name.clone(), ins.op.clone(), shape);
            barrier.metadata = ins.metadata.clone();
            let node = self.add(barrier, &[node]);
            return Ok(self.unpack(node, &ins.shape, &mut wants.iter()));
        }
        let Some((elem, dims)) = global_dims(&ins.shape) else {
            // A tuple-shaped parameter: one parameter of the leaves' local shapes, with
            // their shardings, read through get-tuple-element.
            if let Op::Parameter { number, .. } = &ins.op {
                let wants = self.leaf_wants(ins)?;
                let local = Self::local_shape(&ins.shape, &mut wants.iter());
                let mut p = Instr::new(
                    ins.name.clone(),
                    Op::Parameter { number: *number, replication: None },
                    local,
                );
                let specs: Vec<Spec> = wants.iter().map(to_spec).collect();
                p.sharding = Some(Box::new(Spec::Tuple(specs).to_ir()));
                p.metadata = ins.metadata.clone();
                let node = self.add(p, &[]);
                return Ok(self.unpack(node, &ins.shape, &mut wants.iter()));
            }
            if ins.shape.tuple_elements().is_some_and(|t| t.iter().all(|x| x.as_array().is_some()))
            {
                return self.rematerialize_tuple(ins, ops);
            }
            return Err(err(
                ins,
                format!(
                    "`{}` producing {} is not supported by the partitioner",
                    ins.op.opcode().name(),
                    ins.shape
                ),
            ));
        };
        let rank = dims.len();
        let want = wanted(ins, None, rank, n)?;
        let local_shape = Shape::array(elem, &udims(&want.local_dims(&dims)));
        match &ins.op {
            Op::Parameter { number, .. } => {
                let mut p = Instr::new(
                    ins.name.clone(),
                    Op::Parameter { number: *number, replication: None },
                    local_shape,
                );
                p.sharding = Some(Box::new(to_spec(&want).to_ir()));
                p.metadata = ins.metadata.clone();
                let node = self.add(p, &[]);
                self.result(ins, node, want)
            }
            Op::CustomCall(cc) if cc.is_single_device_identity() && ops.len() == 1 => {
                let a = self.arr(ins, &ops[0])?.clone();
                Ok(PV::Arr(self.reshard(a, &want)))
            }
            Op::Plain(Opcode::Copy) | Op::Plain(Opcode::OptBarrier) if ops.len() == 1 => {
                let a = self.arr(ins, &ops[0])?.clone();
                Ok(PV::Arr(self.reshard(a, &want)))
            }
            op if elementwise(op)
                && ops.iter().all(|v| matches!(v, PV::Arr(a) if a.dims == dims)) =>
            {
                let mut nodes = Vec::with_capacity(ops.len());
                for v in ops {
                    let a = self.arr(ins, v)?.clone();
                    nodes.push(self.reshard(a, &want).node);
                }
                let node = self.local_op(ins, ins.op.clone(), &nodes)?;
                self.result(ins, node, want)
            }
            Op::Broadcast { dimensions } => {
                let a = self.arr(ins, &ops[0])?.clone();
                let bdims: Vec<usize> = dimensions.iter().map(|&d| d as usize).collect();
                let added: Vec<usize> = (0..rank).filter(|k| !bdims.contains(k)).collect();
                // Operand dim i is result dim bdims[i] (increasing in valid HLO).
                let sorted = bdims.windows(2).all(|w| w[0] < w[1]);
                let target = if sorted {
                    want.t.partially_replicate(&added).remove_dims(&added).and_then(Placed::new)
                } else {
                    None
                };
                // With the operand tiled as the wanted result is on its dims (and
                // replicated along the added ones), every device broadcasts straight into
                // its own shard: added dims may be tiled at no cost (padding of uneven
                // shards holds unspecified values). Otherwise the result comes as the
                // operand's tiling allows and is resharded.
                let direct = target.is_some();
                let target = target.unwrap_or_else(|| Placed::replicated(a.dims.len(), n));
                let src = self.reshard(a, &target);
                let got = if direct {
                    want.clone()
                } else {
                    Placed::new(target.t.insert_dims(&added)).expect("insert keeps devices")
                };
                let op = Op::Broadcast { dimensions: dimensions.clone() };
                let node = self.add_local(ins, op, &[src.node], elem, &got.local_dims(&dims));
                let r = A {
                    node,
                    p: got,
                    dims: dims.clone(),
                    elem,
                    splat: (src.dims.is_empty()).then_some(src.node),
                };
                Ok(PV::Arr(self.reshard(r, &want)))
            }
            Op::Transpose { dimensions } => {
                let a = self.arr(ins, &ops[0])?.clone();
                let perm: Vec<usize> = dimensions.iter().map(|&d| d as usize).collect();
                let mut inv = vec![0usize; perm.len()];
                for (k, &p) in perm.iter().enumerate() {
                    inv[p] = k;
                }
                let target = Placed::new(want.t.transpose(&inv)).expect("transpose keeps devices");
                let src = self.reshard(a, &target);
                let node = self.local_op(ins, ins.op.clone(), &[src.node])?;
                self.result(ins, node, want)
            }
            Op::Reshape { .. } => {
                let a = self.arr(ins, &ops[0])?.clone();
                if let Some(target) = reshape_source(&want, &a.dims, &dims) {
                    let src = self.reshard(a, &target);
                    let node = self.add_local(
                        ins,
                        Op::Reshape { inferred_dimension: None },
                        &[src.node],
                        elem,
                        &want.local_dims(&dims),
                    );
                    return self.result(ins, node, want);
                }
                // The operand's own tiling may carry through (the result then reshards).
                if let Some(t) = a.p.t.reshape(&a.dims, &dims).and_then(Placed::new)
                    && reshape_source(&t, &a.dims, &dims)
                        .is_some_and(|s| s.same_regions(&a.p, &a.dims))
                {
                    let node = self.add_local(
                        ins,
                        Op::Reshape { inferred_dimension: None },
                        &[a.node],
                        elem,
                        &t.local_dims(&dims),
                    );
                    let r = A { node, p: t, dims: dims.clone(), elem, splat: None };
                    return Ok(PV::Arr(self.reshard(r, &want)));
                }
                self.rematerialize(ins, ops, &want)
            }
            Op::Dot { dims: dd, .. } if ops.len() == 2 && dd.lhs_ragged.is_empty() => {
                self.dot(ins, dd, ops, &want)
            }
            Op::Reduce { dimensions, to_apply } if ops.len() == 2 => {
                self.reduce(ins, dimensions, *to_apply, ops, &want)
            }
            Op::Gather(g) if ops.len() == 2 => self.gather(ins, g, ops, &want),
            Op::Convolution(cv) if ops.len() == 2 => match self.conv_halo(ins, cv, ops, &want)? {
                Some(v) => Ok(v),
                None => self.conv(ins, cv, ops, &want),
            },
            Op::Scatter(sd) if ops.len() == 3 => self.scatter(ins, sd, ops, &want),
            Op::Iota { dimension } if want.t.tiles[*dimension as usize] == 1 => {
                let node = self.add_local(ins, ins.op.clone(), &[], elem, &want.local_dims(&dims));
                self.result(ins, node, want)
            }
            Op::Constant(_) if want.is_replicated() => {
                let node = self.local_op(ins, ins.op.clone(), &[])?;
                self.result(ins, node, want)
            }
            _ => match passthrough_maps(ins, ops) {
                Some(maps) => self.passthrough(ins, ops, &want, &maps),
                None => self.rematerialize(ins, ops, &want),
            },
        }
    }

    /// An op that reads across some dims (slices, pads, windows, concatenates, updates
    /// them) and leaves the others untouched, element for element (`maps[i][d]`: the
    /// result dim operand `i`'s dim `d` passes through to): computed locally with the
    /// untouched dims split (as the result wants them, or as an operand has them, whichever
    /// moves fewer bytes) and the others whole. Padding of uneven shards stays padding:
    /// nothing mixes along an untouched dim.
    fn passthrough(
        &mut self,
        ins: &Instr,
        ops: &[PV],
        want: &Placed,
        maps: &[Vec<Option<usize>>],
    ) -> Result<PV, Diagnostic> {
        let (elem, dims) = global_dims(&ins.shape).expect("array result");
        let rank = dims.len();
        let arrays: Vec<A> =
            ops.iter().map(|v| self.arr(ins, v).cloned()).collect::<Result<_, _>>()?;
        let shaped: Vec<usize> = (0..arrays.len()).filter(|&i| !maps[i].is_empty()).collect();
        let blocked: Vec<usize> =
            (0..rank).filter(|&k| !shaped.iter().all(|&i| maps[i].contains(&Some(k)))).collect();
        if blocked.len() == rank {
            return self.rematerialize(ins, ops, want);
        }
        let mut candidates = vec![want.t.partially_replicate(&blocked)];
        for &i in &shaped {
            candidates.push(lift(&arrays[i].p.t, &maps[i], rank).partially_replicate(&blocked));
        }
        let ebytes = (elem.bits() as u64).div_ceil(8);
        let mut best: Option<(u64, Placed, Vec<Placed>)> = None;
        for t in candidates {
            let Some(plan) = Placed::new(t) else { continue };
            let mut targets = Vec::with_capacity(arrays.len());
            let mut cost = reshard_bytes(&plan, want, &dims, ebytes);
            for (i, a) in arrays.iter().enumerate() {
                let to = if maps[i].is_empty() {
                    Placed::replicated(a.dims.len(), self.n)
                } else {
                    match project(&plan.t, &maps[i], rank).and_then(Placed::new) {
                        Some(p) => p,
                        None => break,
                    }
                };
                cost += reshard_bytes(&a.p, &to, &a.dims, (a.elem.bits() as u64).div_ceil(8));
                targets.push(to);
            }
            if targets.len() != arrays.len() {
                continue;
            }
            if best.as_ref().is_none_or(|b| {
                cost < b.0 || (cost == b.0 && plan.t.num_tiles() > b.1.t.num_tiles())
            }) {
                best = Some((cost, plan, targets));
            }
        }
        let Some((_, plan, targets)) = best else {
            return self.rematerialize(ins, ops, want);
        };
        // Split along no untouched dim: every device computes it whole.
        if plan.is_replicated()
            && (!want.is_replicated() || arrays.iter().any(|a| !a.p.is_replicated()))
        {
            self.out.rematerialized.push(ins.name.clone());
        }
        let local = plan.local_dims(&dims);
        let nodes: Vec<NodeIndex> =
            arrays.into_iter().zip(&targets).map(|(a, to)| self.reshard(a, to).node).collect();
        let op = match &ins.op {
            // Untouched dims are whole ranges: their local extent is the shard's.
            Op::Slice { ranges } => Op::Slice {
                ranges: ranges
                    .iter()
                    .enumerate()
                    .map(|(k, r)| {
                        if blocked.contains(&k) {
                            *r
                        } else {
                            SliceRange { start: 0, limit: local[k], stride: 1 }
                        }
                    })
                    .collect(),
            },
            Op::DynamicSlice { sizes } => Op::DynamicSlice {
                sizes: sizes
                    .iter()
                    .enumerate()
                    .map(|(k, &n)| if blocked.contains(&k) { n } else { local[k] })
                    .collect(),
            },
            other => other.clone(),
        };
        let node = self.local_op(ins, op, &nodes)?;
        let r = A { node, p: plan, dims, elem, splat: None };
        Ok(PV::Arr(self.reshard(r, want)))
    }

    // ---- tuples and control flow --------------------------------------------------

    /// The sharding `ins` wants for each array leaf of its (tuple) shape, in leaf order.
    fn leaf_wants(&self, ins: &Instr) -> Result<Vec<Placed>, Diagnostic> {
        let mut leaves = Vec::new();
        ins.shape.for_each_array(&mut |a| leaves.push(a.dims.len()));
        let tuple = ins.shape.is_tuple();
        leaves
            .iter()
            .enumerate()
            .map(|(i, &rank)| wanted(ins, tuple.then_some(i), rank, self.n))
            .collect()
    }

    /// `v` (the value `ins` forwards: a tuple's operands, a tuple element) resharded to
    /// the sharding `ins` carries, as GSPMD reshards a `tuple` or `get-tuple-element`;
    /// unchanged when it carries none.
    fn in_own_sharding(&mut self, ins: &Instr, v: PV) -> Result<PV, Diagnostic> {
        if ins.sharding.is_none() {
            return Ok(v);
        }
        let wants = self.leaf_wants(ins)?;
        Ok(self.reshard_tree(&v, &mut wants.iter()))
    }

    /// The per-device shape of `global` with its leaves in `specs` (leaf order).
    fn local_shape(global: &Shape, specs: &mut std::slice::Iter<'_, Placed>) -> Shape {
        match global {
            Shape::Tuple(items) => {
                Shape::Tuple(items.iter().map(|x| Self::local_shape(x, specs)).collect())
            }
            other => match (global_dims(other), specs.next()) {
                (Some((elem, dims)), Some(p)) => Shape::array(elem, &udims(&p.local_dims(&dims))),
                _ => other.clone(),
            },
        }
    }

    /// The value of local `node` (shape: `global` split by `specs`), with element nodes.
    fn unpack(
        &mut self,
        node: NodeIndex,
        global: &Shape,
        specs: &mut std::slice::Iter<'_, Placed>,
    ) -> PV {
        match global {
            Shape::Tuple(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let local = Self::local_shape(item, &mut specs.clone());
                    let gte = self.add(
                        Instr::new(
                            "get-tuple-element",
                            Op::GetTupleElement { index: i as i64 },
                            local,
                        ),
                        &[node],
                    );
                    out.push(self.unpack(gte, item, specs));
                }
                PV::Tup(out)
            }
            other => match (global_dims(other), specs.next()) {
                (Some((elem, dims)), Some(p)) => {
                    PV::Arr(A { node, p: p.clone(), dims, elem, splat: None })
                }
                _ => PV::Token(node),
            },
        }
    }

    /// `v` with every array leaf resharded to `specs` (leaf order).
    fn reshard_tree(&mut self, v: &PV, specs: &mut std::slice::Iter<'_, Placed>) -> PV {
        match v {
            PV::Arr(a) => match specs.next() {
                Some(p) => PV::Arr(self.reshard(a.clone(), p)),
                None => v.clone(),
            },
            PV::Tup(items) => PV::Tup(items.iter().map(|x| self.reshard_tree(x, specs)).collect()),
            PV::Token(_) | PV::Manual(_) => v.clone(),
        }
    }

    /// A tuple-producing op (variadic reduce, sort, top-k, ...) computed whole on every
    /// device, its elements then sliced to their shardings.
    fn rematerialize_tuple(&mut self, ins: &Instr, ops: &[PV]) -> Result<PV, Diagnostic> {
        let mut nodes = Vec::with_capacity(ops.len());
        for v in ops {
            let full = self.replicate(v);
            nodes.push(self.materialize(&full));
        }
        let node = self.local_op(ins, ins.op.clone(), &nodes)?;
        let wants = self.leaf_wants(ins)?;
        let full: Vec<Placed> =
            wants.iter().map(|p| Placed::replicated(p.rank(), self.n)).collect();
        let v = self.unpack(node, &ins.shape, &mut full.iter());
        if wants.iter().any(|p| !p.is_replicated())
            || ops.iter().any(|v| matches!(v, PV::Arr(a) if !a.p.is_replicated()))
        {
            self.out.rematerialized.push(ins.name.clone());
        }
        Ok(self.reshard_tree(&v, &mut wants.iter()))
    }

    /// Partitions computation `id` (a loop body, condition or branch) into a new one
    /// whose parameter leaves are in `param`'s shardings and whose root leaves are
    /// resharded to `root` (when given).
    fn lower_body(
        &mut self,
        id: CompId,
        param: &[Placed],
        root: Option<&[Placed]>,
    ) -> Result<CompId, Diagnostic> {
        let old = self.m.comp(id).clone();
        let fresh = self.m.new_computation(&old.name);
        let saved = (
            std::mem::replace(&mut self.c, fresh),
            self.pid.take(),
            std::mem::take(&mut self.tables),
            std::mem::take(&mut self.zeros),
            std::mem::take(&mut self.reshards),
        );
        let result = (|| -> Result<(), Diagnostic> {
            let mut vals: HashMap<NodeIndex, PV> = HashMap::new();
            for node in old.post_order() {
                let ins = old.instr(node);
                let v = if let Op::Parameter { number, .. } = ins.op {
                    let local = Self::local_shape(&ins.shape, &mut param.iter());
                    let p = self.add(
                        Instr::new(
                            ins.name.clone(),
                            Op::Parameter { number, replication: None },
                            local,
                        ),
                        &[],
                    );
                    self.unpack(p, &ins.shape, &mut param.iter())
                } else {
                    let ops: Vec<PV> = old.operands(node).iter().map(|o| vals[o].clone()).collect();
                    self.lower(ins, &ops)?
                };
                vals.insert(node, v);
            }
            let r = old.root().ok_or_else(|| {
                Diagnostic::error(old.span, format!("`{}` has no root", old.name))
            })?;
            let v = vals.remove(&r).expect("root lowered");
            let v = match root {
                Some(specs) => self.reshard_tree(&v, &mut specs.iter()),
                None => v,
            };
            let node = self.materialize(&v);
            self.c.set_root(node);
            Ok(())
        })();
        let c = std::mem::replace(&mut self.c, saved.0);
        (self.pid, self.tables, self.zeros, self.reshards) = (saved.1, saved.2, saved.3, saved.4);
        result?;
        Ok(self.m.add_computation(c))
    }

    fn lower_while(
        &mut self,
        ins: &Instr,
        condition: CompId,
        body: CompId,
        ops: &[PV],
    ) -> Result<PV, Diagnostic> {
        let specs = self.leaf_wants(ins)?;
        let init = self.reshard_tree(&ops[0], &mut specs.iter());
        let init = self.materialize(&init);
        let body = self.lower_body(body, &specs, Some(&specs))?;
        let cond = self.lower_body(condition, &specs, None)?;
        let shape = Self::local_shape(&ins.shape, &mut specs.iter());
        let mut w = Instr::new(ins.name.clone(), Op::While { condition: cond, body }, shape);
        w.metadata = ins.metadata.clone();
        let node = self.add(w, &[init]);
        Ok(self.unpack(node, &ins.shape, &mut specs.iter()))
    }

    fn lower_conditional(
        &mut self,
        ins: &Instr,
        br: &hlo_ir::op::Branches,
        ops: &[PV],
    ) -> Result<PV, Diagnostic> {
        use hlo_ir::op::Branches;
        let specs = self.leaf_wants(ins)?;
        let comps: Vec<CompId> = match br {
            Branches::TrueFalse(t, f) => vec![*t, *f],
            Branches::Indexed(v) => v.clone(),
        };
        let sel = self.replicate(&ops[0]);
        let mut operands = vec![self.materialize(&sel)];
        let mut new = Vec::with_capacity(comps.len());
        for (k, &c) in comps.iter().enumerate() {
            let callee = self.m.comp(c);
            let p = callee.param(0).ok_or_else(|| err(ins, "a branch without a parameter"))?;
            let pspecs = self.leaf_wants(&callee.instr(p).clone())?;
            let arg = self.reshard_tree(&ops[k + 1], &mut pspecs.iter());
            operands.push(self.materialize(&arg));
            new.push(self.lower_body(c, &pspecs, Some(&specs))?);
        }
        let branches = match br {
            Branches::TrueFalse(..) => Branches::TrueFalse(new[0], new[1]),
            Branches::Indexed(_) => Branches::Indexed(new),
        };
        let shape = Self::local_shape(&ins.shape, &mut specs.iter());
        let mut c = Instr::new(ins.name.clone(), Op::Conditional(branches), shape);
        c.metadata = ins.metadata.clone();
        let node = self.add(c, &operands);
        Ok(self.unpack(node, &ins.shape, &mut specs.iter()))
    }

    fn add_local(
        &mut self,
        ins: &Instr,
        op: Op,
        operands: &[NodeIndex],
        elem: ElemType,
        local: &[i64],
    ) -> NodeIndex {
        let mut new = Instr::new(ins.name.clone(), op, Shape::array(elem, &udims(local)));
        new.metadata = ins.metadata.clone();
        self.add(new, operands)
    }

    /// The op computed whole on every device, then sliced to `want`.
    fn rematerialize(&mut self, ins: &Instr, ops: &[PV], want: &Placed) -> Result<PV, Diagnostic> {
        let mut nodes = Vec::with_capacity(ops.len());
        for v in ops {
            let full = self.replicate(v);
            nodes.push(self.materialize(&full));
        }
        let node = self.local_op(ins, ins.op.clone(), &nodes)?;
        let (elem, dims) = global_dims(&ins.shape).expect("array result");
        let all = Placed::replicated(dims.len(), self.n);
        if !want.is_replicated()
            || ops.iter().any(|v| matches!(v, PV::Arr(a) if !a.p.is_replicated()))
        {
            self.out.rematerialized.push(ins.name.clone());
        }
        let r = A { node, p: all, dims, elem, splat: None };
        Ok(PV::Arr(self.reshard(r, want)))
    }

    fn replicate(&mut self, v: &PV) -> PV {
        match v {
            PV::Arr(a) => {
                let to = Placed::replicated(a.dims.len(), self.n);
                PV::Arr(self.reshard(a.clone(), &to))
            }
            PV::Tup(items) => PV::Tup(items.iter().map(|x| self.replicate(x)).collect()),
            PV::Token(_) | PV::Manual(_) => v.clone(),
        }
    }

    fn dot(
        &mut self,
        ins: &Instr,
        dd: &DotDims,
        ops: &[PV],
        want: &Placed,
    ) -> Result<PV, Diagnostic> {
        let (lr, rr) = (self.arr(ins, &ops[0])?.dims.len(), self.arr(ins, &ops[1])?.dims.len());
        self.contraction(ins, ops, want, Space::of_dot(dd, lr, rr), &[])
    }

    /// A convolution as a contraction: the input's batch dim and the kernel's output
    /// feature dim pass through to the output, the input feature dim and the kernel's
    /// input feature dim are contracted (partial sums, then `all-reduce` or
    /// `reduce-scatter`), spatial dims stay whole on every device. This covers the
    /// forward convolution of a batch-sharded network and both of its gradients (the
    /// weight gradient contracts the batch, which JAX labels as the feature dims).
    /// Grouped convolutions keep only the batch dim (`feature_group_count` > 1) or nothing
    /// (`batch_group_count` > 1): their other dims stay whole.
    fn conv(
        &mut self,
        ins: &Instr,
        cv: &hlo_ir::op::Convolution,
        ops: &[PV],
        want: &Placed,
    ) -> Result<PV, Diagnostic> {
        let d = &cv.dims;
        let (lr, rr) = (self.arr(ins, &ops[0])?.dims.len(), self.arr(ins, &ops[1])?.dims.len());
        let ro = d.output_spatial.len() + 2;
        let mut lhs = vec![None; lr];
        let mut rhs = vec![None; rr];
        if cv.batch_group_count == 1 {
            lhs[d.input_batch as usize] = Some(d.output_batch as usize);
        }
        if cv.feature_group_count == 1 && cv.batch_group_count == 1 {
            lhs[d.input_feature as usize] = Some(ro);
            rhs[d.kernel_input_feature as usize] = Some(ro);
            rhs[d.kernel_output_feature as usize] = Some(d.output_feature as usize);
        }
        let spatial: Vec<usize> = d.output_spatial.iter().map(|&k| k as usize).collect();
        self.contraction(ins, ops, want, Space { rank: ro + 1, lhs, rhs }, &spatial)
    }

    /// A two-operand op whose iteration space is its output dims followed by contracted
    /// dims (`space`): operand dims mapped to `None`, the output dims in `whole` and the
    /// space dims no operand dim maps to (a grouped convolution's output feature dim:
    /// every device would compute all of it) are never split.
    fn contraction(
        &mut self,
        ins: &Instr,
        ops: &[PV],
        want: &Placed,
        space: Space,
        whole: &[usize],
    ) -> Result<PV, Diagnostic> {
        let (elem, dims) = global_dims(&ins.shape).expect("array result");
        let l = self.arr(ins, &ops[0])?.clone();
        let r = self.arr(ins, &ops[1])?.clone();
        let ro = dims.len();
        let unmapped = (0..space.rank).filter(|&k| {
            !whole.contains(&k) && !space.lhs.contains(&Some(k)) && !space.rhs.contains(&Some(k))
        });
        let whole: Vec<usize> = whole.iter().copied().chain(unmapped).collect();
        let whole = whole.as_slice();
        // Both operands' tilings in the iteration space (out dims ++ contracting).
        let lt = lift(&l.p.t, &space.lhs, space.rank).partially_replicate(whole);
        let rt = lift(&r.p.t, &space.rhs, space.rank).partially_replicate(whole);
        let contracting: Vec<usize> = (ro..space.rank).collect();
        // Candidate iteration-space tilings; the one whose collectives carry the fewest
        // bytes per device (all-gather results, all-reduce buffers) wins. The output's tiling (contraction whole), the operands' own and
        // merged tilings, and the output's tiling with either operand's contraction split.
        let out_space = want.t.insert_dims(&contracting).partially_replicate(whole);
        let free: Vec<usize> = (0..ro).collect();
        let only_contracting = |t: &Tiling| t.partially_replicate(&free);
        let mut candidates: Vec<Tiling> = vec![out_space.clone()];
        candidates.extend(lt.merge(&rt));
        candidates.push(lt.clone());
        candidates.push(rt.clone());
        candidates.extend(out_space.merge(&only_contracting(&lt)));
        candidates.extend(out_space.merge(&only_contracting(&rt)));
        let ebytes = (elem.bits() as u64).div_ceil(8);
        let mut best: Option<(u64, Placed)> = None;
        for t in candidates {
            let t = t.partially_replicate(whole);
            let Some(plan) = Placed::new(t) else { continue };
            let (Some(lp), Some(rp)) = (
                project(&plan.t, &space.lhs, space.rank).and_then(Placed::new),
                project(&plan.t, &space.rhs, space.rank).and_then(Placed::new),
            ) else {
                continue;
            };
            let split: Vec<usize> =
                contracting.iter().copied().filter(|&k| plan.t.tiles[k] > 1).collect();
            let Some(out_p) =
                plan.t.partially_replicate(&split).remove_dims(&contracting).and_then(Placed::new)
            else {
                continue;
            };
            let out_local: u64 =
                out_p.local_dims(&dims).iter().map(|&d| d as u64).product::<u64>() * ebytes;
            let cost = reshard_bytes(&l.p, &lp, &l.dims, (l.elem.bits() as u64).div_ceil(8))
                + reshard_bytes(&r.p, &rp, &r.dims, (r.elem.bits() as u64).div_ceil(8))
                + if split.is_empty() { 0 } else { out_local }
                + reshard_bytes(&out_p, want, &dims, ebytes);
            // Fewer bytes wins; at equal bytes, more tiles (less duplicated compute).
            if best.as_ref().is_none_or(|b| {
                cost < b.0 || (cost == b.0 && plan.t.num_tiles() > b.1.t.num_tiles())
            }) {
                best = Some((cost, plan));
            }
        }
        let plan = best
            .map(|b| b.1)
            .unwrap_or_else(|| Placed::new(out_space).expect("insert keeps devices"));
        let lp = project(&plan.t, &space.lhs, space.rank)
            .and_then(Placed::new)
            .expect("projection keeps devices");
        let rp = project(&plan.t, &space.rhs, space.rank)
            .and_then(Placed::new)
            .expect("projection keeps devices");
        let l = self.reshard(l, &lp);
        let r = self.reshard(r, &rp);
        let split: Vec<usize> =
            contracting.iter().copied().filter(|&k| plan.t.tiles[k] > 1).collect();
        // Padding along a split contracting dim would add garbage products: zero both
        // sides (zeroing one is not enough: padding may hold a NaN or an infinity, and
        // 0 * NaN is NaN).
        let zero_padding = |b: &mut Self, a: &A, map: &[Option<usize>]| {
            let split: Vec<usize> = (0..a.dims.len())
                .filter(|&d| map[d].is_some_and(|k| k >= ro) && a.p.padded(d, a.dims[d]))
                .collect();
            if split.is_empty() {
                return a.node;
            }
            let z = b.zero(a.elem);
            b.mask(a, &split, z)
        };
        let lnode = zero_padding(self, &l, &space.lhs);
        let rnode = zero_padding(self, &r, &space.rhs);
        let out_t = plan
            .t
            .partially_replicate(&split)
            .remove_dims(&contracting)
            .expect("contracting dims untiled after replication");
        let out_p = Placed::new(out_t).expect("keeps devices");
        if split.is_empty() {
            let node = self.add_local(
                ins,
                ins.op.clone(),
                &[lnode, rnode],
                elem,
                &out_p.local_dims(&dims),
            );
            let res = A { node, p: out_p, dims, elem, splat: None };
            return Ok(PV::Arr(self.reshard(res, want)));
        }
        // Partial sums in the dot's own type as XLA sums them, or in f32 until summed
        // ([`PartialSums`]).
        let low = matches!(elem, ElemType::BF16 | ElemType::F16);
        let acc = if low && self.sums == PartialSums::Exact { ElemType::F32 } else { elem };
        let node =
            self.add_local(ins, ins.op.clone(), &[lnode, rnode], acc, &out_p.local_dims(&dims));
        let groups = plan.groups_along(&split);
        let add = self.adder(acc);
        let partial = A { node, p: out_p, dims: dims.clone(), elem: acc, splat: None };
        let summed = self.sum_partials(partial, groups, add, want);
        if acc == elem {
            return Ok(PV::Arr(summed));
        }
        let shape = Shape::array(elem, &udims(&summed.p.local_dims(&dims)));
        let node =
            self.add(Instr::new("convert", Op::Plain(Opcode::Convert), shape), &[summed.node]);
        Ok(PV::Arr(A { node, elem, ..summed }))
    }

    /// Partial results (`a`, each device of a group holding a part of the sum) summed
    /// with `reducer` and brought to `want`: one `reduce-scatter` when `want` splits one
    /// dim of the summed value evenly among each group's members in group order (the
    /// all-reduce-then-slice pattern); a `reduce-scatter` within sub-groups and an
    /// `all-reduce` across them when `want` splits it among fewer devices and replicates
    /// it over the rest ([`scatter_then_replicate`]); else `all-reduce` and a reshard.
    fn sum_partials(&mut self, a: A, groups: Vec<Vec<i64>>, reducer: CompId, want: &Placed) -> A {
        let g = groups.first().map_or(1, |x| x.len()) as i64;
        let pos: HashMap<i64, i64> = groups
            .iter()
            .flat_map(|grp| grp.iter().enumerate().map(|(i, &d)| (d, i as i64)))
            .collect();
        let rank = a.dims.len();
        let devices = a.p.devices();
        let scatter_dim = (0..rank).find(|&k| {
            let n = a.dims[k];
            let (have, to) = (a.p.chunk(k, n), want.chunk(k, n));
            to * g == have
                && !a.p.padded(k, n)
                && !want.padded(k, n)
                && (0..devices).all(|d| {
                    want.start(d, k, n) - a.p.start(d, k, n)
                        == pos.get(&(d as i64)).copied().unwrap_or(-1) * to
                })
                && others_kept(&a, want, k)
        });
        if let Some(k) = scatter_dim.filter(|_| g > 1) {
            let node = self.reduce_scatter(&a, &groups, k, want, reducer);
            return A { node, p: want.clone(), ..a };
        }
        if let Some((k, within, across)) = scatter_then_replicate(&a, &groups, want) {
            let node = self.reduce_scatter(&a, &within, k, want, reducer);
            let node = self.all_reduce(node, across, reducer);
            return A { node, p: want.clone(), ..a };
        }
        let node = self.all_reduce(a.node, groups, reducer);
        let summed = A { node, ..a };
        self.reshard(summed, want)
    }

    /// `a` summed within each of `groups` and scattered along dim `k` to `want`'s chunk
    /// (the i-th member of a group gets the i-th chunk).
    fn reduce_scatter(
        &mut self,
        a: &A,
        groups: &[Vec<i64>],
        k: usize,
        want: &Placed,
        reducer: CompId,
    ) -> NodeIndex {
        let mut local = a.p.local_dims(&a.dims);
        local[k] = want.chunk(k, a.dims[k]);
        let shape = Shape::array(a.elem, &udims(&local));
        self.reducing(Opcode::ReduceScatter, a.node, groups, reducer, Some(k), shape)
    }

    /// `a`'s values moved to another device along data dim `k`: device at coordinate `j`
    /// sends to coordinate `j + step` (same other coordinates); devices nobody sends to
    /// receive zeros (the global boundary's padding).
    fn shift(&mut self, node: NodeIndex, p: &Placed, k: usize, step: i64) -> NodeIndex {
        let by_coord: HashMap<&Vec<i64>, i64> =
            p.coords.iter().enumerate().map(|(d, c)| (c, d as i64)).collect();
        let mut pairs = Vec::new();
        for (d, c) in p.coords.iter().enumerate() {
            let mut to = c.clone();
            to[k] += step;
            if let Some(&e) = by_coord.get(&to) {
                pairs.push((d as i64, e));
            }
        }
        let shape = self.shape(node).clone();
        let attrs = CollectiveAttrs {
            channel_id: Some(self.next_channel()),
            source_target_pairs: Some(pairs),
            ..Default::default()
        };
        self.add(
            Instr::new(
                "collective-permute",
                Op::Collective { opcode: Opcode::CollectivePermute, attrs: Box::new(attrs) },
                shape,
            ),
            &[node],
        )
    }

    /// A convolution whose output is tiled along one spatial dim (and maybe the batch):
    /// each device convolves its input shard extended by halos from its neighbours
    /// (`collective-permute` of the boundary rows; zeros at the global edges, so the
    /// window's padding becomes the halo). Needs stride 1, no dilation, a "same"-size
    /// output, halos within one shard and an untiled feature dim; `None` otherwise.
    fn conv_halo(
        &mut self,
        ins: &Instr,
        cv: &hlo_ir::op::Convolution,
        ops: &[PV],
        want: &Placed,
    ) -> Result<Option<PV>, Diagnostic> {
        let (elem, dims) = global_dims(&ins.shape).expect("array result");
        let a = self.arr(ins, &ops[0])?.clone();
        let r = self.arr(ins, &ops[1])?.clone();
        let d = &cv.dims;
        let tiled: Vec<usize> = (0..d.output_spatial.len())
            .filter(|&j| want.t.tiles[d.output_spatial[j] as usize] > 1)
            .collect();
        if tiled.len() != 1
            || want.t.tiles[d.output_feature as usize] > 1
            || cv.feature_group_count != 1
            || cv.batch_group_count != 1
        {
            return Ok(None);
        }
        let j = tiled[0];
        let w = cv.window.dims.get(j).copied().unwrap_or_default();
        let (k_in, k_out) = (d.input_spatial[j] as usize, d.output_spatial[j] as usize);
        let n = a.dims[k_in];
        if w.stride != 1
            || w.lhs_dilate != 1
            || w.rhs_dilate != 1
            || w.pad_lo < 0
            || w.pad_hi < 0
            || dims[k_out] != n
        {
            return Ok(None);
        }
        let mut imap: Vec<Option<usize>> = vec![None; a.dims.len()];
        imap[d.input_batch as usize] = Some(d.output_batch as usize);
        for (i, &sp) in d.input_spatial.iter().enumerate() {
            imap[sp as usize] = d.output_spatial.get(i).map(|&o| o as usize);
        }
        let Some(lt) = project(&want.t, &imap, dims.len()).and_then(Placed::new) else {
            return Ok(None);
        };
        let c = lt.chunk(k_in, n);
        let (lo, hi) = (w.pad_lo, w.size - 1 - w.pad_lo);
        if lo > c || hi > c || hi < 0 {
            return Ok(None);
        }
        let a = self.reshard(a, &lt);
        let all = Placed::replicated(r.dims.len(), self.n);
        let r = self.reshard(r, &all);
        // Zero the padding of an uneven last shard: it is inside some window.
        let z = self.zero(a.elem);
        let x = self.mask(&a, &[k_in], z);
        let local = lt.local_dims(&a.dims);
        let slice = |b: &mut Self, from: i64, to: i64| {
            let ranges = local
                .iter()
                .enumerate()
                .map(|(q, &e)| {
                    if q == k_in {
                        SliceRange { start: from, limit: to, stride: 1 }
                    } else {
                        SliceRange { start: 0, limit: e, stride: 1 }
                    }
                })
                .collect();
            let mut sd = local.clone();
            sd[k_in] = to - from;
            b.add(Instr::new("halo", Op::Slice { ranges }, Shape::array(a.elem, &udims(&sd))), &[x])
        };
        let mut parts = Vec::new();
        if lo > 0 {
            let left = slice(self, c - lo, c);
            parts.push(self.shift(left, &lt, k_in, 1));
        }
        parts.push(x);
        if hi > 0 {
            let right = slice(self, 0, hi);
            parts.push(self.shift(right, &lt, k_in, -1));
        }
        let mut ext = local.clone();
        ext[k_in] = c + lo + hi;
        let x = if parts.len() == 1 {
            x
        } else {
            self.add(
                Instr::new(
                    "concatenate",
                    Op::Concatenate { dimension: k_in as i64 },
                    Shape::array(a.elem, &udims(&ext)),
                ),
                &parts,
            )
        };
        let mut cv2 = cv.clone();
        cv2.window.dims[j].pad_lo = 0;
        cv2.window.dims[j].pad_hi = 0;
        let node = self.local_op(ins, Op::Convolution(Box::new(cv2)), &[x, r.node])?;
        let out = A { node, p: want.clone(), dims, elem, splat: None };
        Ok(Some(PV::Arr(out)))
    }

    /// Index-parallel and operand-passthrough gather: the result's batch dims follow the
    /// indices' tiling (and the paired operand batching dims), its offset dims the
    /// operand's full-slice dims that no index addresses; indexed operand dims are
    /// gathered whole.
    fn gather(
        &mut self,
        ins: &Instr,
        g: &hlo_ir::op::GatherDims,
        ops: &[PV],
        want: &Placed,
    ) -> Result<PV, Diagnostic> {
        let (elem, dims) = global_dims(&ins.shape).expect("array result");
        let a = self.arr(ins, &ops[0])?.clone();
        let ix = self.arr(ins, &ops[1])?.clone();
        if let Some(v) = self.gather_masked(ins, g, &a, &ix, want)? {
            return Ok(v);
        }
        let rank = dims.len();
        let has = |v: &[i64], d: usize| v.contains(&(d as i64));
        let (omap, imap) = gather_dim_maps(g, &a.dims, ix.dims.len(), rank);
        let li = lift(&ix.p.t, &imap, rank);
        let lo = lift(&a.p.t, &omap, rank);
        let plan = Placed::new(li.merge(&lo).unwrap_or(li)).expect("keeps devices");
        let it =
            Placed::new(project(&plan.t, &imap, rank).expect("projection")).expect("keeps devices");
        let ot =
            Placed::new(project(&plan.t, &omap, rank).expect("projection")).expect("keeps devices");
        let ix = self.reshard(ix, &it);
        let a = self.reshard(a, &ot);
        let local = ot.local_dims(&a.dims);
        let mut g2 = g.clone();
        for d in 0..a.dims.len() {
            if omap[d].is_some() && !has(&g.operand_batching_dims, d) {
                g2.slice_sizes[d] = local[d];
            }
        }
        let node = self.local_op(ins, Op::Gather(Box::new(g2)), &[a.node, ix.node])?;
        let r = A { node, p: plan, dims, elem, splat: None };
        Ok(PV::Arr(self.reshard(r, want)))
    }

    /// A gather whose operand is tiled along one indexed, collapsed dim `d` (a lookup into
    /// a sharded vocabulary): every device gathers from its own shard with the index moved
    /// into it, zeroes the rows whose index falls in another shard, and an all-reduce over
    /// the devices along `d` sums the one non-zero contribution. `None` when the gather is
    /// not of that form.
    fn gather_masked(
        &mut self,
        ins: &Instr,
        g: &hlo_ir::op::GatherDims,
        a: &A,
        ix: &A,
        want: &Placed,
    ) -> Result<Option<PV>, Diagnostic> {
        let (elem, dims) = global_dims(&ins.shape).expect("array result");
        let has = |v: &[i64], x: usize| v.contains(&(x as i64));
        // Batching dims may be tiled too, exactly as their indices dims are (local).
        let batching_ok = |k: usize| {
            let Some(i) = g.operand_batching_dims.iter().position(|&x| x as usize == k) else {
                return false;
            };
            let Some(&id) = g.start_indices_batching_dims.get(i) else { return false };
            let id = id as usize;
            a.p.chunk(k, a.dims[k]) == ix.p.chunk(id, ix.dims[id])
                && (0..a.p.devices())
                    .all(|q| a.p.start(q, k, a.dims[k]) == ix.p.start(q, id, ix.dims[id]))
        };
        let tiled: Vec<usize> =
            (0..a.dims.len()).filter(|&k| a.p.t.tiles[k] > 1 && !batching_ok(k)).collect();
        let &[d] = tiled.as_slice() else { return Ok(None) };
        let Some(j) = g.start_index_map.iter().position(|&x| x as usize == d) else {
            return Ok(None);
        };
        if !has(&g.collapsed_slice_dims, d) || g.slice_sizes.get(d) != Some(&1) || !elem.is_float()
        {
            return Ok(None);
        }
        let groups = a.p.groups_along(&[d]);
        // The indices must not vary along the operand's split (every member looks up the
        // same rows), and their own tiling becomes the result's (batch dims).
        if groups.iter().any(|grp| {
            grp.iter().any(|&m| {
                (0..ix.dims.len()).any(|k| {
                    ix.p.start(m as usize, k, ix.dims[k])
                        != ix.p.start(grp[0] as usize, k, ix.dims[k])
                })
            })
        }) {
            return Ok(None);
        }
        let (rank, ivd) = (dims.len(), g.index_vector_dim as usize);
        let irank = ix.dims.len();
        let offset: Vec<usize> = g.offset_dims.iter().map(|&x| x as usize).collect();
        let batch_pos: Vec<usize> = (0..rank).filter(|k| !offset.contains(k)).collect();
        let imap = gather_dim_maps(g, &a.dims, irank, rank).1;
        if ivd < irank && ix.p.t.tiles[ivd] > 1 {
            return Ok(None);
        }
        let Some(plan) = Placed::new(lift(&ix.p.t, &imap, rank)) else { return Ok(None) };
        let ielem = ix.elem;
        if !ielem.is_integer() {
            return Ok(None);
        }
        let n = a.dims[d];
        let local_ix = ix.p.local_dims(&ix.dims);
        let ishape = Shape::array(ielem, &udims(&local_ix));
        let scalar = |b: &mut Self, table: Vec<i64>| {
            let v = b.lookup(table);
            if ielem == ElemType::S32 {
                v
            } else {
                b.add(Instr::new("convert", Op::Plain(Opcode::Convert), Shape::scalar(ielem)), &[v])
            }
        };
        let bcast = |b: &mut Self, v: NodeIndex, shape: &Shape| {
            b.add(
                Instr::new("broadcast", Op::Broadcast { dimensions: vec![] }, shape.clone()),
                &[v],
            )
        };
        let start = scalar(self, (0..a.p.devices()).map(|q| a.p.start(q, d, n)).collect());
        let valid = scalar(self, (0..a.p.devices()).map(|q| a.p.valid(q, d, n)).collect());
        let zero_i = scalar(self, vec![0; a.p.devices()]);
        let last = scalar(self, vec![n - 1; a.p.devices()]);
        // Component j of every index vector, clamped as gather clamps it, moved into the shard.
        let (lo, hi, st) =
            (bcast(self, zero_i, &ishape), bcast(self, last, &ishape), bcast(self, start, &ishape));
        let clamped = self
            .add(Instr::new("clamp", Op::Plain(Opcode::Clamp), ishape.clone()), &[lo, ix.node, hi]);
        let moved = self.add(
            Instr::new("subtract", Op::Plain(Opcode::Subtract), ishape.clone()),
            &[clamped, st],
        );
        let new_ix = if ivd < irank {
            let pred = Shape::array(ElemType::Pred, &udims(&local_ix));
            let io = self.add(
                Instr::new(
                    "iota",
                    Op::Iota { dimension: ivd as i64 },
                    Shape::array(ElemType::S32, &udims(&local_ix)),
                ),
                &[],
            );
            let jv = self.constant(ElemType::S32, &[], LiteralData::Int(vec![j as i64]));
            let jb = self.add(
                Instr::new(
                    "broadcast",
                    Op::Broadcast { dimensions: vec![] },
                    Shape::array(ElemType::S32, &udims(&local_ix)),
                ),
                &[jv],
            );
            let is_j = self.add(
                Instr::new(
                    "compare",
                    Op::Compare { direction: CmpDirection::Eq, kind: None },
                    pred,
                ),
                &[io, jb],
            );
            self.add(
                Instr::new("select", Op::Plain(Opcode::Select), ishape.clone()),
                &[is_j, moved, ix.node],
            )
        } else {
            moved
        };
        // Which index vectors land in this shard: 0 <= moved component < valid.
        let (comp, cdims) = if ivd < irank {
            let ranges = local_ix
                .iter()
                .enumerate()
                .map(|(k, &e)| {
                    if k == ivd {
                        SliceRange { start: j as i64, limit: j as i64 + 1, stride: 1 }
                    } else {
                        SliceRange { start: 0, limit: e, stride: 1 }
                    }
                })
                .collect();
            let mut sd = local_ix.clone();
            sd[ivd] = 1;
            let sl = self.add(
                Instr::new("slice", Op::Slice { ranges }, Shape::array(ielem, &udims(&sd))),
                &[moved],
            );
            sd.remove(ivd);
            (
                self.add(
                    Instr::new(
                        "reshape",
                        Op::Reshape { inferred_dimension: None },
                        Shape::array(ielem, &udims(&sd)),
                    ),
                    &[sl],
                ),
                sd,
            )
        } else {
            (moved, local_ix.clone())
        };
        let cshape = Shape::array(ielem, &udims(&cdims));
        let pshape = Shape::array(ElemType::Pred, &udims(&cdims));
        let (z, v) = (bcast(self, zero_i, &cshape), bcast(self, valid, &cshape));
        let ge = self.add(
            Instr::new(
                "compare",
                Op::Compare { direction: CmpDirection::Ge, kind: None },
                pshape.clone(),
            ),
            &[comp, z],
        );
        let lt = self.add(
            Instr::new(
                "compare",
                Op::Compare { direction: CmpDirection::Lt, kind: None },
                pshape.clone(),
            ),
            &[comp, v],
        );
        let inb = self.add(Instr::new("and", Op::Plain(Opcode::And), pshape), &[ge, lt]);
        let gathered = self.local_op(ins, ins.op.clone(), &[a.node, new_ix])?;
        let oshape = self.shape(gathered).clone();
        let mask = self.add(
            Instr::new(
                "broadcast",
                Op::Broadcast { dimensions: batch_pos.iter().map(|&x| x as i64).collect() },
                Shape::array(ElemType::Pred, &udims(&plan.local_dims(&dims))),
            ),
            &[inb],
        );
        let ze = self.sum_identity(elem);
        let zeros = bcast(self, ze, &oshape);
        let masked = self
            .add(Instr::new("select", Op::Plain(Opcode::Select), oshape), &[mask, gathered, zeros]);
        let add = self.adder(elem);
        let node = self.all_reduce(masked, groups, add);
        let r = A { node, p: plan, dims, elem, splat: None };
        Ok(Some(PV::Arr(self.reshard(r, want))))
    }

    /// Scatter: batch-parallel where indices, updates and operand share batching dims
    /// (local), index-parallel over the updates' scatter dims when the combiner adds
    /// (local scatters into zeros, `all-reduce`, then added to the operand), and
    /// passthrough for full-size window dims no index addresses. Every other window dim
    /// stays whole on every device (a window is skipped only when it is out of bounds as
    /// a whole).
    fn scatter(
        &mut self,
        ins: &Instr,
        sd: &hlo_ir::op::ScatterDims,
        ops: &[PV],
        want: &Placed,
    ) -> Result<PV, Diagnostic> {
        let (elem, dims) = global_dims(&ins.shape).expect("array result");
        let a = self.arr(ins, &ops[0])?.clone();
        let ix = self.arr(ins, &ops[1])?.clone();
        let u = self.arr(ins, &ops[2])?.clone();
        let (ur, ivd) = (u.dims.len(), sd.index_vector_dim as usize);
        let has = |v: &[i64], d: usize| v.contains(&(d as i64));
        let scatter_pos: Vec<usize> =
            (0..ur).filter(|&k| !has(&sd.update_window_dims, k)).collect();
        let mut imap: Vec<Option<usize>> = vec![None; ix.dims.len()];
        let mut j = 0;
        for (i, slot) in imap.iter_mut().enumerate() {
            if i != ivd {
                *slot = scatter_pos.get(j).copied();
                j += 1;
            }
        }
        // Operand dim -> updates dim: the propagation's map (passthrough window dims and
        // batching dims, updates -> operand) inverted.
        let omap = crate::sharding::rules::invert(
            &crate::sharding::rules::scatter_maps(sd, &a.dims, &u.dims, ix.dims.len()).0,
            a.dims.len(),
        );
        let batch_pos: Vec<usize> =
            sd.input_batching_dims.iter().filter_map(|&od| omap[od as usize]).collect();
        let umap: Vec<Option<usize>> = (0..ur).map(Some).collect();
        // A window dim that is not a passthrough (an index addresses it, or it is smaller
        // than its operand dim) stays whole: a device holding part of a window would put it
        // at the window's start and test only that part against the bounds, while scatter
        // skips a window only when it is out of bounds as a whole.
        let partial_windows: Vec<usize> = sd
            .update_window_dims
            .iter()
            .map(|&w| w as usize)
            .filter(|&w| !omap.contains(&Some(w)))
            .collect();
        let lu = lift(&u.p.t, &umap, ur).partially_replicate(&partial_windows);
        let li = lift(&ix.p.t, &imap, ur);
        let lo = lift(&a.p.t, &omap, ur);
        let base = lu.merge(&li).unwrap_or(lu);
        let mut plan = base.merge(&lo).unwrap_or(base);
        let adds = hlo_interp::binary_reducer(self.m.comp(sd.to_apply)) == Some(Opcode::Add);
        let mut ip: Vec<usize> = scatter_pos
            .iter()
            .copied()
            .filter(|&k| plan.tiles[k] > 1 && !batch_pos.contains(&k))
            .collect();
        if !ip.is_empty() && !adds {
            plan = plan.partially_replicate(&ip);
            ip.clear();
        }
        let plan = Placed::new(plan).expect("keeps devices");
        let it =
            Placed::new(project(&plan.t, &imap, ur).expect("projection")).expect("keeps devices");
        let ot =
            Placed::new(project(&plan.t, &omap, ur).expect("projection")).expect("keeps devices");
        let u = self.reshard(u, &plan);
        let ix = self.reshard(ix, &it);
        let a = self.reshard(a, &ot);
        let node = if ip.is_empty() {
            self.local_op(ins, ins.op.clone(), &[a.node, ix.node, u.node])?
        } else {
            // Padding of the updates would scatter garbage through garbage indices. The
            // partial results start at the sum's identity, so that `a + summed` keeps every
            // element of `a` no update reaches, `-0` included.
            let z = self.sum_identity(u.elem);
            let upd = self.mask(&u, &ip, z);
            let shape = self.local(&a);
            let zeros = self.add(
                Instr::new("broadcast", Op::Broadcast { dimensions: vec![] }, shape.clone()),
                &[z],
            );
            let part = self.local_op(ins, ins.op.clone(), &[zeros, ix.node, upd])?;
            let summed = self.all_reduce(part, plan.groups_along(&ip), sd.to_apply);
            self.add(Instr::new("add", Op::Plain(Opcode::Add), shape), &[a.node, summed])
        };
        let r = A { node, p: ot, dims, elem, splat: None };
        Ok(PV::Arr(self.reshard(r, want)))
    }

    fn reduce(
        &mut self,
        ins: &Instr,
        dimensions: &[i64],
        to_apply: CompId,
        ops: &[PV],
        want: &Placed,
    ) -> Result<PV, Diagnostic> {
        let (elem, dims) = global_dims(&ins.shape).expect("array result");
        let a = self.arr(ins, &ops[0])?.clone();
        let init = self.replicate(&ops[1]);
        let init = self.materialize(&init);
        let red: Vec<usize> = dimensions.iter().map(|&d| d as usize).collect();
        let kept: Vec<usize> = (0..a.dims.len()).filter(|k| !red.contains(k)).collect();
        let combinable = hlo_interp::binary_reducer(self.m.comp(to_apply)).is_some_and(|o| {
            matches!(
                o,
                Opcode::Add
                    | Opcode::Multiply
                    | Opcode::Maximum
                    | Opcode::Minimum
                    | Opcode::And
                    | Opcode::Or
            )
        });
        // The operand keeps its tiling on reduced dims when partial results combine;
        // kept dims follow the result.
        let want_kept = want.t.insert_dims(&red);
        let target = if combinable {
            let split: Vec<usize> = red.iter().copied().filter(|&k| a.p.t.tiles[k] > 1).collect();
            let from_a = a.p.t.partially_replicate(&kept);
            from_a
                .merge(&want_kept)
                .filter(|m| split.iter().all(|&k| m.tiles[k] == a.p.t.tiles[k]))
                .and_then(Placed::new)
        } else {
            None
        };
        // When the result's wanted tiling clashes with the operand's on a mesh axis (a norm
        // scale's gradient: the operand split over batch and heads, the result over its
        // own axis), partial results still combine: reduce the operand where it lies and
        // reshard the small result, as XLA does, rather than the whole operand.
        let target = target
            .or_else(|| combinable.then(|| a.p.clone()))
            .unwrap_or_else(|| Placed::new(want_kept.clone()).expect("keeps devices"));
        let a = self.reshard(a, &target);
        let split: Vec<usize> = red.iter().copied().filter(|&k| target.t.tiles[k] > 1).collect();
        let operand = if split.is_empty() { a.node } else { self.mask(&a, &split, init) };
        let out_p = Placed::new(
            target.t.partially_replicate(&split).remove_dims(&red).expect("reduced dims untiled"),
        )
        .expect("keeps devices");
        let node =
            self.add_local(ins, ins.op.clone(), &[operand, init], elem, &out_p.local_dims(&dims));
        let res = A { node, p: out_p, dims, elem, splat: None };
        if split.is_empty() {
            return Ok(PV::Arr(self.reshard(res, want)));
        }
        Ok(PV::Arr(self.sum_partials(res, target.groups_along(&split), to_apply, want)))
    }
}

/// Where each operand dim and each index dim of a gather lands in its output: the
/// propagation's passthrough and index-parallel maps
/// ([`crate::sharding::rules::gather_maps`]), with the operand's batching dims following
/// their paired index dims (the local gather then needs operand and indices alike there).
fn gather_dim_maps(
    g: &hlo_ir::op::GatherDims,
    od: &[i64],
    irank: usize,
    rank: usize,
) -> (Vec<Option<usize>>, Vec<Option<usize>>) {
    let (mut omap, imap) = crate::sharding::rules::gather_maps(g, od, irank, rank);
    for (k, &o) in g.operand_batching_dims.iter().enumerate() {
        omap[o as usize] = g
            .start_indices_batching_dims
            .get(k)
            .and_then(|&i| imap.get(i as usize).copied().flatten());
    }
    (omap, imap)
}

/// The dims `(x, y)` when `to` is `from`'s tiling moved from dim `x` to dim `y` among the
/// same devices (each device's coordinate along `x` is its target coordinate along `y`),
/// both evenly divided and everything else unchanged: what one all-to-all does.
fn dim_move(from: &Placed, to: &Placed, dims: &[i64]) -> Option<(usize, usize)> {
    let rank = dims.len();
    let x = (0..rank).find(|&k| from.t.tiles[k] > 1 && to.t.tiles[k] == 1)?;
    let y = (0..rank).find(|&k| from.t.tiles[k] == 1 && to.t.tiles[k] > 1)?;
    let t = from.t.tiles[x];
    if to.t.tiles[y] != t || dims[x] % t != 0 || dims[y] % t != 0 {
        return None;
    }
    let same_rest = (0..rank).filter(|&k| k != x && k != y).all(|k| {
        let n = dims[k];
        from.chunk(k, n) == to.chunk(k, n)
            && (0..from.devices()).all(|d| from.start(d, k, n) == to.start(d, k, n))
    });
    (same_rest && (0..from.devices()).all(|d| from.coords[d][x] == to.coords[d][y]))
        .then_some((x, y))
}

/// Bytes per device the collectives of `reshard(from -> to)` move (its all-gather
/// results, or the buffer of an all-to-all); local slicing is free.
fn reshard_bytes(from: &Placed, to: &Placed, dims: &[i64], ebytes: u64) -> u64 {
    if from.same_regions(to, dims) {
        return 0;
    }
    let local =
        |p: &Placed| p.local_dims(dims).iter().map(|&d| d.max(0) as u64).product::<u64>() * ebytes;
    if dim_move(from, to, dims).is_some() {
        return local(from);
    }
    let mut cur = from.clone();
    let mut bytes = 0;
    for (k, &n) in dims.iter().enumerate() {
        if cur.t.tiles[k] > 1 && !Builder::contained(&cur, to, k, n) {
            cur = Placed::new(cur.t.partially_replicate(&[k])).expect("keeps devices");
            bytes += local(&cur);
        }
    }
    bytes
}

fn elementwise(op: &Op) -> bool {
    match op {
        Op::Plain(o) => o.is_elementwise() && !matches!(o, Opcode::Copy),
        // `map` applies its computation element by element, over every dimension.
        Op::Compare { .. } | Op::ReducePrecision { .. } | Op::Map { .. } => true,
        _ => false,
    }
}

/// A sharding of the reshape operand (`from` dims) whose local reshape gives `to`'s
/// shards exactly (`want` over `to` dims), if one exists: every tiled result dim divides
/// evenly and maps back through [`Tiling::reshape`] to the same tiling.
fn reshape_source(want: &Placed, from: &[i64], to: &[i64]) -> Option<Placed> {
    if want.is_replicated() {
        return Some(Placed::replicated(from.len(), want.devices() as i64));
    }
    if (0..to.len()).any(|k| to[k] % want.t.tiles[k] != 0) {
        return None;
    }
    let back = want.t.reshape(to, from)?;
    if back.num_tiles() != want.t.num_tiles()
        || (0..from.len()).any(|k| from[k] % back.tiles[k] != 0)
    {
        return None;
    }
    let forth = back.reshape(from, to)?;
    Spec::Tiled(forth.clone()).same(&Spec::Tiled(want.t.clone())).then_some(())?;
    // Local reshape is exact only when each shard is a contiguous row-major block of the
    // same elements: check the local shapes agree in element count.
    let pl = Placed::new(back)?;
    let (a, b): (i64, i64) =
        (pl.local_dims(from).iter().product(), want.local_dims(to).iter().product());
    (a == b).then_some(pl)
}

/// A dot's iteration space: result dims (batch, lhs free, rhs free) then contracting dims.
/// The iteration space of a contraction: output dims, then contracted dims; operand dim
/// `d` is space dim `lhs[d]` (`None`: never split).
struct Space {
    rank: usize,
    lhs: Vec<Option<usize>>,
    rhs: Vec<Option<usize>>,
}

impl Space {
    /// A dot's space: batch dims, lhs free, rhs free (the output), then contracted.
    fn of_dot(dd: &DotDims, lr: usize, rr: usize) -> Space {
        let nb = dd.lhs_batch.len();
        let nc = dd.lhs_contracting.len();
        let lfree: Vec<usize> = (0..lr)
            .filter(|d| {
                !dd.lhs_batch.contains(&(*d as i64)) && !dd.lhs_contracting.contains(&(*d as i64))
            })
            .collect();
        let rfree: Vec<usize> = (0..rr)
            .filter(|d| {
                !dd.rhs_batch.contains(&(*d as i64)) && !dd.rhs_contracting.contains(&(*d as i64))
            })
            .collect();
        let ro = nb + lfree.len() + rfree.len();
        let mut lhs = vec![0; lr];
        let mut rhs = vec![0; rr];
        for (i, &d) in dd.lhs_batch.iter().enumerate() {
            lhs[d as usize] = i;
        }
        for (i, &d) in dd.rhs_batch.iter().enumerate() {
            rhs[d as usize] = i;
        }
        for (i, &d) in lfree.iter().enumerate() {
            lhs[d] = nb + i;
        }
        for (i, &d) in rfree.iter().enumerate() {
            rhs[d] = nb + lfree.len() + i;
        }
        for (i, &d) in dd.lhs_contracting.iter().enumerate() {
            lhs[d as usize] = ro + i;
        }
        for (i, &d) in dd.rhs_contracting.iter().enumerate() {
            rhs[d as usize] = ro + i;
        }
        let some = |v: Vec<usize>| v.into_iter().map(Some).collect();
        Space { rank: ro + nc, lhs: some(lhs), rhs: some(rhs) }
    }
}

/// An operand's tiling placed in an iteration space of `rank` dims: operand dim `d` is
/// space dim `map[d]`; dims mapped to `None` cannot carry a tiling and are replicated
/// first; space dims the operand lacks are untiled.
fn lift(t: &Tiling, map: &[Option<usize>], rank: usize) -> Tiling {
    let dropped: Vec<usize> = (0..map.len()).filter(|&d| map[d].is_none()).collect();
    let kept: Vec<usize> = (0..map.len()).filter(|&d| map[d].is_some()).collect();
    let t = t.partially_replicate(&dropped).remove_dims(&dropped).expect("replicated dims");
    // `t` has the kept dims in operand order; sort them by space position.
    let mut order: Vec<usize> = (0..kept.len()).collect();
    order.sort_by_key(|&i| map[kept[i]]);
    let sorted = t.transpose(&order);
    let present: Vec<usize> = order.iter().map(|&i| map[kept[i]].expect("kept")).collect();
    let missing: Vec<usize> = (0..rank).filter(|k| !present.contains(k)).collect();
    sorted.insert_dims(&missing)
}

/// The operand's tiling under space tiling `t` (see [`lift`]): dims mapped to `None`
/// untiled, space dims the operand lacks replicated.
fn project(t: &Tiling, map: &[Option<usize>], rank: usize) -> Option<Tiling> {
    let present: Vec<usize> = map.iter().flatten().copied().collect();
    let missing: Vec<usize> = (0..rank).filter(|k| !present.contains(k)).collect();
    let reduced = t.partially_replicate(&missing).remove_dims(&missing)?;
    // `reduced` has the mapped dims in space order: back to operand order.
    let kept: Vec<usize> = (0..map.len()).filter(|&d| map[d].is_some()).collect();
    let mut order: Vec<usize> = (0..kept.len()).collect();
    order.sort_by_key(|&i| map[kept[i]]);
    let mut pos = vec![0; kept.len()];
    for (i, &k) in order.iter().enumerate() {
        pos[k] = i;
    }
    let dropped: Vec<usize> = (0..map.len()).filter(|&d| map[d].is_none()).collect();
    Some(reduced.transpose(&pos).insert_dims(&dropped))
}

/// For ops that leave some dims untouched: per operand, the result dim each of its dims
/// passes through to (`None`: the op reads across it; an empty map: a scalar operand,
/// replicated). `None` for every other op.
fn passthrough_maps(ins: &Instr, ops: &[PV]) -> Option<Vec<Vec<Option<usize>>>> {
    let ranks: Vec<usize> = ops
        .iter()
        .map(|v| match v {
            PV::Arr(a) => Some(a.dims.len()),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let dims = |i: usize| match &ops[i] {
        PV::Arr(a) => a.dims.clone(),
        _ => vec![],
    };
    let (_, out) = global_dims(&ins.shape)?;
    let same = |i: usize, keep: &dyn Fn(usize) -> bool| -> Vec<Option<usize>> {
        (0..ranks[i]).map(|d| keep(d).then_some(d)).collect()
    };
    let scalar = Vec::new;
    // A window dim that neither moves nor mixes elements.
    let unit = |w: &hlo_ir::op::WindowDim| {
        w.size == 1
            && w.stride == 1
            && w.pad_lo == 0
            && w.pad_hi == 0
            && w.lhs_dilate == 1
            && w.rhs_dilate == 1
    };
    Some(match &ins.op {
        Op::Slice { ranges } => {
            let d0 = dims(0);
            vec![same(0, &|d| {
                ranges[d].start == 0 && ranges[d].stride == 1 && ranges[d].limit == d0[d]
            })]
        }
        Op::DynamicSlice { sizes } => {
            let d0 = dims(0);
            let mut m = vec![same(0, &|d| sizes[d] == d0[d])];
            m.extend((1..ops.len()).map(|_| scalar()));
            m
        }
        Op::Plain(Opcode::DynamicUpdateSlice) => {
            let (d0, d1) = (dims(0), dims(1));
            let keep = |d: usize| d1.get(d) == d0.get(d);
            let mut m = vec![same(0, &keep), same(1, &keep)];
            m.extend((2..ops.len()).map(|_| scalar()));
            m
        }
        Op::Pad { config } => {
            let zero = |d: usize| config[d].lo == 0 && config[d].hi == 0 && config[d].interior == 0;
            vec![same(0, &zero), scalar()]
        }
        Op::Concatenate { dimension } => {
            (0..ops.len()).map(|i| same(i, &|d| d as i64 != *dimension)).collect()
        }
        Op::Reverse { dimensions } => vec![same(0, &|d| !dimensions.contains(&(d as i64)))],
        Op::ReduceWindow { window, .. } if ops.len() == 2 => {
            vec![same(0, &|d| window.dims.get(d).is_some_and(unit)), scalar()]
        }
        Op::SelectAndScatter { window, .. } if ops.len() == 3 => {
            let keep = |d: usize| window.dims.get(d).is_some_and(unit);
            vec![same(0, &keep), same(1, &keep), scalar()]
        }
        Op::Sort { dimension, .. } if ops.len() == 1 => {
            vec![same(0, &|d| d as i64 != *dimension)]
        }
        _ => return None,
    })
    .filter(|m: &Vec<Vec<Option<usize>>>| {
        // Every mapped dim keeps its size (the op's result dim is the operand dim).
        m.iter().enumerate().all(|(i, map)| {
            let di = dims(i);
            map.iter().enumerate().all(|(d, k)| k.is_none_or(|k| out.get(k) == di.get(d)))
        })
    })
}

/// Every dim of `a` but `k` is placed as `want` places it (same chunk and start on every
/// device): only dim `k` changes when partial sums are scattered.
fn others_kept(a: &A, want: &Placed, k: usize) -> bool {
    (0..a.dims.len()).filter(|&q| q != k).all(|q| {
        let m = a.dims[q];
        want.chunk(q, m) == a.p.chunk(q, m)
            && (0..a.p.devices()).all(|d| want.start(d, q, m) == a.p.start(d, q, m))
    })
}

/// Device groups of a collective.
type Groups = Vec<Vec<i64>>;

/// Partial sums over `groups` wanted split `f` ways along one dim and replicated over the
/// rest of each group (data parallel across slices with FSDP inside: the weight gradient
/// is wanted sharded over `fsdp` and replicated over the slices): `(k, within, across)`
/// for a `reduce-scatter` within sub-groups of `f` members holding distinct chunks of dim
/// `k`, then an `all-reduce` of each chunk across the sub-groups (the members holding the
/// same chunk). The same sum as an all-reduce over the whole group and a slice, with
/// `1/f` of its all-reduce bytes; `None` when the placement is not of that form.
fn scatter_then_replicate(
    a: &A,
    groups: &[Vec<i64>],
    want: &Placed,
) -> Option<(usize, Groups, Groups)> {
    let g = groups.first()?.len();
    let devices = a.p.devices();
    let rank = a.dims.len();
    'dims: for k in 0..rank {
        let n = a.dims[k];
        let (have, to) = (a.p.chunk(k, n), want.chunk(k, n));
        if to <= 0 || have % to != 0 || a.p.padded(k, n) || want.padded(k, n) {
            continue;
        }
        let f = (have / to) as usize;
        if f <= 1 || f >= g || g % f != 0 {
            continue;
        }
        if !others_kept(a, want, k) {
            continue;
        }
        let (mut within, mut across) = (Vec::new(), Vec::new());
        for group in groups {
            if group.len() != g {
                return None;
            }
            // Each member's chunk of dim k within its own tile of the partial sums.
            let mut buckets = vec![Vec::new(); f];
            for &d in group {
                let du = usize::try_from(d).ok().filter(|&x| x < devices)?;
                let off = want.start(du, k, n) - a.p.start(du, k, n);
                if off < 0 || off % to != 0 || (off / to) as usize >= f {
                    continue 'dims;
                }
                buckets[(off / to) as usize].push(d);
            }
            if buckets.iter().any(|b| b.len() != g / f) {
                continue 'dims;
            }
            within.extend((0..g / f).map(|j| buckets.iter().map(|b| b[j]).collect::<Vec<_>>()));
            across.extend(buckets);
        }
        return Some((k, within, across));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_groups_print_in_iota_form() {
        assert_eq!(
            replica_groups(&[vec![0, 1], vec![2, 3]]),
            ReplicaGroups::Iota(IotaList { dims: vec![2, 2], reshape: vec![4], transpose: vec![] })
        );
        match replica_groups(&[vec![0, 2], vec![1, 3]]) {
            ReplicaGroups::Iota(l) => {
                assert_eq!((l.reshape, l.transpose), (vec![2, 2], vec![1, 0]))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(replica_groups(&[vec![0, 3], vec![1, 2]]), ReplicaGroups::Explicit(_)));
    }

    #[test]
    fn dot_space_lifts_and_projects() {
        // [b, m, k] x [b, k, n] -> [b, m, n]; space = b, m, n, k.
        let dd = DotDims {
            lhs_batch: vec![0],
            lhs_contracting: vec![2],
            rhs_batch: vec![0],
            rhs_contracting: vec![1],
            ..Default::default()
        };
        let s = Space::of_dot(&dd, 3, 3);
        let some = |v: Vec<usize>| v.into_iter().map(Some).collect::<Vec<_>>();
        assert_eq!(
            (s.rank, s.lhs.clone(), s.rhs.clone()),
            (4, some(vec![0, 1, 3]), some(vec![0, 3, 2]))
        );
        let t = Tiling { tiles: vec![2, 1, 4], repl: 1, other: vec![], devices: (0..8).collect() };
        let lifted = lift(&t, &s.rhs, s.rank);
        assert_eq!(lifted.tiles, vec![2, 1, 4, 1]);
        let back = project(&lifted, &s.rhs, s.rank).unwrap();
        assert!(Spec::Tiled(back).same(&Spec::Tiled(t)));
    }
}
