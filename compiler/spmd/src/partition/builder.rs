//! The partitioner's core state and values (XLA's `SpmdBuilder` and `PartitionedHlo`):
//! the per-device computation being built ([`Builder`]: the `partition-id` and its offset
//! tables, shared constants, reducer computations, fresh channels, the reshards already
//! done), the value of a global instruction in the partitioned program ([`PV`]: a local
//! array with the sharding it is in, a tuple, a token, a manual region's value), the
//! sharding each instruction wants, and the instructions every handler emits with them.

use std::collections::HashMap;

use hlo_check::shape_inference::infer_shape;
use hlo_ir::literal::{Literal, LiteralData};
use hlo_ir::{
    CompId, Computation, Diagnostic, ElemType, Instr, Module, NodeIndex, Op, Opcode, Shape,
};

use crate::geometry::Placed;
use crate::sharding::Spec;
use crate::sharding::spec::Tiling;

/// What partitioning did.
#[derive(Debug, Clone, Default)]
pub struct Partitioned {
    pub devices: i64,
    /// Instructions computed on replicated operands (no partitioning rule applied).
    pub rematerialized: Vec<String>,
    /// Collectives by kind, as combined (set by `spmd-partition` from the inventory).
    pub collectives: Vec<(&'static str, usize)>,
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

/// A value of the partitioned program: a local array with the sharding it is in.
#[derive(Debug, Clone)]
pub(super) enum PV {
    Arr(A),
    Tup(Vec<PV>),
    Token(NodeIndex),
    /// A value of a manual region (between `SPMDFullToShardShape` and
    /// `SPMDShardToFullShape`, as `shard_map` writes it): already per device, its
    /// shape the local one as printed; never resharded.
    Manual(NodeIndex),
}

/// A local array of the partitioned program: its node, the sharding it is in, and its
/// global shape.
#[derive(Debug, Clone)]
pub(super) struct A {
    pub(super) node: NodeIndex,
    pub(super) p: Placed,
    /// Global dimensions.
    pub(super) dims: Vec<i64>,
    pub(super) elem: ElemType,
    /// A broadcast scalar (the node of that local scalar): resharding re-broadcasts it
    /// instead of moving data.
    pub(super) splat: Option<NodeIndex>,
}

/// An error located at `ins`.
pub(super) fn err(ins: &Instr, msg: impl Into<String>) -> Diagnostic {
    Diagnostic::error(ins.span, msg.into())
}

/// The partitioner's state while it builds a computation (the entry, a body, a branch:
/// `lower_body` swaps the per-computation parts).
pub(super) struct Builder<'m> {
    pub(super) c: Computation,
    pub(super) m: &'m mut Module,
    pub(super) n: i64,
    pub(super) pid: Option<NodeIndex>,
    pub(super) tables: HashMap<Vec<i64>, NodeIndex>,
    pub(super) zeros: HashMap<ElemType, NodeIndex>,
    /// `-0.0` constants ([`Self::sum_identity`]).
    pub(super) neg_zeros: HashMap<ElemType, NodeIndex>,
    /// Reshards done in this computation: (value, target tiles, repl, devices) -> result.
    pub(super) reshards: HashMap<(NodeIndex, Vec<i64>, i64, Vec<i64>), A>,
    pub(super) adders: HashMap<ElemType, CompId>,
    pub(super) channel: i64,
    pub(super) sums: PartialSums,
    pub(super) out: Partitioned,
    /// The span of the global instruction being partitioned: every instruction made for it
    /// without a span of its own gets it ([`Self::add`]), so that an error about the
    /// per-device program (an engine's refusal, a buffer too large) points at the source.
    pub(super) at: hlo_ir::Span,
}

/// Element `index` of tuple value `v` (`ins` is the get-tuple-element, for errors).
pub(super) fn tuple_element(ins: &Instr, v: &PV, index: i64) -> Result<PV, Diagnostic> {
    match v {
        PV::Tup(v) => {
            v.get(index as usize).cloned().ok_or_else(|| err(ins, "tuple index out of range"))
        }
        _ => Err(err(ins, "get-tuple-element of a non-tuple")),
    }
}

/// Dims as a shape takes them.
pub(super) fn udims(d: &[i64]) -> Vec<u64> {
    d.iter().map(|&x| x.max(0) as u64).collect()
}

/// The element type and static dims of an array shape (an instruction's global ones).
pub(super) fn global_dims(s: &Shape) -> Option<(ElemType, Vec<i64>)> {
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
pub(super) fn wanted(
    ins: &Instr,
    leaf: Option<usize>,
    rank: usize,
    n: i64,
) -> Result<Placed, Diagnostic> {
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

/// A sharding to write on an instruction, for placement `p`.
pub(super) fn to_spec(p: &Placed) -> Spec {
    if p.is_replicated() { Spec::Replicated } else { Spec::Tiled(p.t.clone()) }
}

impl Builder<'_> {
    pub(super) fn add(&mut self, mut ins: Instr, operands: &[NodeIndex]) -> NodeIndex {
        if ins.span == hlo_ir::Span::default() {
            ins.span = self.at;
        }
        self.c.add(ins, operands)
    }

    pub(super) fn shape(&self, n: NodeIndex) -> &Shape {
        &self.c.instr(n).shape
    }

    pub(super) fn constant(
        &mut self,
        elem: ElemType,
        dims: &[i64],
        data: LiteralData,
    ) -> NodeIndex {
        self.add(
            Instr::new(
                "constant",
                Op::Constant(Literal::Array(data)),
                Shape::array(elem, &udims(dims)),
            ),
            &[],
        )
    }

    pub(super) fn zero(&mut self, elem: ElemType) -> NodeIndex {
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
    pub(super) fn sum_identity(&mut self, elem: ElemType) -> NodeIndex {
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
    pub(super) fn lookup(&mut self, table: Vec<i64>) -> NodeIndex {
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

    pub(super) fn next_channel(&mut self) -> i64 {
        self.channel += 1;
        self.channel
    }

    /// A scalar `add` computation for `elem` (all-reduce of partial dot products).
    pub(super) fn adder(&mut self, elem: ElemType) -> CompId {
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

    pub(super) fn local(&self, a: &A) -> Shape {
        Shape::array(a.elem, &udims(&a.p.local_dims(&a.dims)))
    }

    pub(super) fn materialize(&mut self, v: &PV) -> NodeIndex {
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

    pub(super) fn arr<'v>(&self, ins: &Instr, v: &'v PV) -> Result<&'v A, Diagnostic> {
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

    /// Clones `ins` with `operands` (local) and infers its local shape.
    pub(super) fn local_op(
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

    pub(super) fn result(&self, ins: &Instr, node: NodeIndex, p: Placed) -> Result<PV, Diagnostic> {
        let (elem, dims) = global_dims(&ins.shape)
            .ok_or_else(|| err(ins, "the partitioner needs static array shapes"))?;
        Ok(PV::Arr(A { node, p, dims, elem, splat: None }))
    }

    pub(super) fn add_local(
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

    /// The sharding `ins` wants for each array leaf of its (tuple) shape, in leaf order.
    pub(super) fn leaf_wants(&self, ins: &Instr) -> Result<Vec<Placed>, Diagnostic> {
        let mut leaves = Vec::new();
        ins.shape.for_each_array(&mut |a| leaves.push(a.dims.len()));
        let tuple = ins.shape.is_tuple();
        leaves
            .iter()
            .enumerate()
            .map(|(i, &rank)| wanted(ins, tuple.then_some(i), rank, self.n))
            .collect()
    }

    /// The per-device shape of `global` with its leaves in `specs` (leaf order).
    pub(super) fn local_shape(global: &Shape, specs: &mut std::slice::Iter<'_, Placed>) -> Shape {
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
    pub(super) fn unpack(
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
}
