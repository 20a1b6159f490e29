//! The entry of the partitioner and its visitor (XLA's `SpmdPartitioner::Run` and
//! `SpmdPartitioningVisitor`): the entry computation lowered instruction by instruction in
//! post order, each by the handler of its op family (the other files of this module),
//! the root resharded to its sharding; parameters, tuples, tokens and barriers here
//! (`HandleParameter`, `HandleTuple`, `HandleGetTupleElement`,
//! `HandleOptimizationBarrier`), and the `DefaultAction` for every op no handler takes:
//! computed on replicated operands and sliced to its sharding
//! ([`Partitioned::rematerialized`] lists them).

use std::collections::HashMap;

use hlo_ir::{Diagnostic, ElemType, Instr, Module, NodeIndex, Op, Opcode, Shape};

use super::builder::{
    A, Builder, PV, PartialSums, Partitioned, err, global_dims, to_spec, tuple_element, udims,
    wanted,
};
use super::data_movement::passthrough_maps;
use super::elementwise::is_elementwise;
use super::manual::has_manual;
use crate::geometry::Placed;
use crate::sharding::Spec;

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
        at: hlo_ir::Span::default(),
    };
    let mut vals: HashMap<NodeIndex, PV> = HashMap::new();
    for node in old.post_order() {
        let ins = old.instr(node);
        let ops: Vec<PV> = old.operands(node).iter().map(|o| vals[o].clone()).collect();
        b.at = ins.span;
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
    b.at = old.instr(root).span;
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

impl Builder<'_> {
    /// Lowers one instruction of the global program on its operands' values: manual
    /// regions first, then one handler per op family (GSPMD's `SpmdPartitioningVisitor`);
    /// an op no handler takes is computed replicated ([`Self::rematerialize`], XLA's
    /// `DefaultAction`).
    pub(super) fn lower(&mut self, ins: &Instr, ops: &[PV]) -> Result<PV, Diagnostic> {
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
        if let (Op::Plain(Opcode::OptBarrier), [v @ PV::Tup(_)]) = (&ins.op, ops) {
            return self.tuple_barrier(ins, v);
        }
        let Some((elem, dims)) = global_dims(&ins.shape) else {
            if let Op::Parameter { number, .. } = &ins.op {
                return self.tuple_parameter(ins, *number);
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
        match &ins.op {
            Op::Parameter { number, .. } => self.parameter(ins, *number, elem, &dims, want),
            Op::CustomCall(cc) if cc.is_single_device_identity() && ops.len() == 1 => {
                self.copy(ins, ops, &want)
            }
            Op::Plain(Opcode::Copy) | Op::Plain(Opcode::OptBarrier) if ops.len() == 1 => {
                self.copy(ins, ops, &want)
            }
            op if is_elementwise(op)
                && ops.iter().all(|v| matches!(v, PV::Arr(a) if a.dims == dims)) =>
            {
                self.elementwise(ins, ops, want)
            }
            Op::Broadcast { dimensions } => self.broadcast(ins, dimensions, ops, &want),
            Op::Transpose { dimensions } => self.transpose(ins, dimensions, ops, want),
            Op::Reshape { .. } => self.reshape(ins, ops, want),
            Op::Dot { dims: dd, .. } if ops.len() == 2 && dd.lhs_ragged.is_empty() => {
                self.dot(ins, dd, ops, &want)
            }
            Op::Reduce { dimensions, to_apply } if ops.len() == 2 => {
                self.reduce(ins, dimensions, *to_apply, ops, &want)
            }
            Op::Gather(g) if ops.len() == 2 => self.gather(ins, g, ops, &want),
            Op::Convolution(cv) if ops.len() == 2 => self.convolution(ins, cv, ops, &want),
            Op::Scatter(sd) if ops.len() == 3 => self.scatter(ins, sd, ops, &want),
            Op::Iota { dimension } if want.t.tiles[*dimension as usize] == 1 => {
                self.iota(ins, elem, &dims, want)
            }
            Op::Constant(_) if want.is_replicated() => self.replicated_constant(ins, want),
            _ => match passthrough_maps(ins, ops) {
                Some(maps) => self.passthrough(ins, ops, &want, &maps),
                None => self.rematerialize(ins, ops, &want),
            },
        }
    }

    /// An array parameter: one parameter of its local shape, carrying its sharding.
    fn parameter(
        &mut self,
        ins: &Instr,
        number: u32,
        elem: ElemType,
        dims: &[i64],
        want: Placed,
    ) -> Result<PV, Diagnostic> {
        let local_shape = Shape::array(elem, &udims(&want.local_dims(dims)));
        let mut p =
            Instr::new(ins.name.clone(), Op::Parameter { number, replication: None }, local_shape);
        p.sharding = Some(Box::new(to_spec(&want).to_ir()));
        p.metadata = ins.metadata.clone();
        let node = self.add(p, &[]);
        self.result(ins, node, want)
    }

    /// A tuple-shaped parameter: one parameter of the leaves' local shapes, with their
    /// shardings, read through get-tuple-element.
    fn tuple_parameter(&mut self, ins: &Instr, number: u32) -> Result<PV, Diagnostic> {
        let wants = self.leaf_wants(ins)?;
        let local = Self::local_shape(&ins.shape, &mut wants.iter());
        let mut p =
            Instr::new(ins.name.clone(), Op::Parameter { number, replication: None }, local);
        let specs: Vec<Spec> = wants.iter().map(to_spec).collect();
        p.sharding = Some(Box::new(Spec::Tuple(specs).to_ir()));
        p.metadata = ins.metadata.clone();
        let node = self.add(p, &[]);
        Ok(self.unpack(node, &ins.shape, &mut wants.iter()))
    }

    /// A barrier over a tuple: each leaf in the sharding wanted for it, kept together.
    fn tuple_barrier(&mut self, ins: &Instr, v: &PV) -> Result<PV, Diagnostic> {
        let wants = self.leaf_wants(ins)?;
        let moved = self.reshard_tree(v, &mut wants.iter());
        let node = self.materialize(&moved);
        let shape = self.shape(node).clone();
        let mut barrier = Instr::new(ins.name.clone(), ins.op.clone(), shape);
        barrier.metadata = ins.metadata.clone();
        let node = self.add(barrier, &[node]);
        Ok(self.unpack(node, &ins.shape, &mut wants.iter()))
    }

    /// The op computed whole on every device, then sliced to `want`.
    pub(super) fn rematerialize(
        &mut self,
        ins: &Instr,
        ops: &[PV],
        want: &Placed,
    ) -> Result<PV, Diagnostic> {
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
}
