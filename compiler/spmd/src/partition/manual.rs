//! Manual regions (`shard_map`; XLA's `HandleCustomCall` for `SPMDFullToShardShape` and
//! `SPMDShardToFullShape`, and the visitor's handling of manual shardings): kept as
//! written. The borders turn a sharded array into its local shard and back without
//! moving data; an instruction of the region (a Pallas kernel, the body's own
//! collectives, which already name devices) runs on its operands' local arrays with the
//! per-device shapes it was written with.

use hlo_ir::{Diagnostic, Instr, NodeIndex, Op, Opcode, Shape};

use super::builder::{A, Builder, PV, err, global_dims, tuple_element, udims, wanted};
use crate::sharding::Spec;

/// Whether `v` can be read inside a manual region as its local array: a value of the
/// region, or a replicated one (the same on every device).
fn usable_in_region(v: &PV) -> bool {
    match v {
        PV::Manual(_) | PV::Token(_) => true,
        PV::Arr(a) => a.p.is_replicated(),
        PV::Tup(items) => items.iter().all(usable_in_region),
    }
}

pub(super) fn has_manual(v: &PV) -> bool {
    match v {
        PV::Manual(_) => true,
        PV::Tup(items) => items.iter().any(has_manual),
        PV::Arr(_) | PV::Token(_) => false,
    }
}

impl Builder<'_> {
    /// `ins` when it belongs to a manual region or borders one, lowered: the borders turn
    /// a sharded array into its per-device shard and back (no data moves: the shard is
    /// the local array), and an instruction of the region is kept as written on its
    /// operands' local arrays (its shapes are the per-device ones; its collectives
    /// already name devices). `None` for every other instruction.
    pub(super) fn lower_manual(
        &mut self,
        ins: &Instr,
        ops: &[PV],
    ) -> Result<Option<PV>, Diagnostic> {
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
}
