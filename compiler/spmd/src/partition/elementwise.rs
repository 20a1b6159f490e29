//! Elementwise ops and the ops that only rearrange dims (XLA's `HandleElementwise`,
//! `HandleBroadcast`, `HandleTranspose`, `HandleReshape`, `HandleIota`, `HandleConstant`,
//! and the copies): computed locally on operands resharded to match the result.
//! `map` is elementwise (its computation applies element by element).

use hlo_ir::{Diagnostic, ElemType, Instr, Op, Opcode};

use super::builder::{A, Builder, PV, global_dims};
use crate::geometry::Placed;
use crate::sharding::Spec;

pub(super) fn is_elementwise(op: &Op) -> bool {
    match op {
        Op::Plain(o) => o.is_elementwise() && !matches!(o, Opcode::Copy),
        // `map` applies its computation element by element, over every dimension.
        Op::Compare { .. } | Op::ReducePrecision { .. } | Op::Map { .. } => true,
        _ => false,
    }
}

/// A sharding of the reshape operand (`from` dims) whose local reshape gives `to`'s
/// shards exactly (`want` over `to` dims), if one exists: every tiled result dim divides
/// evenly and maps back through [`Tiling::reshape`](crate::sharding::Tiling::reshape) to the same tiling.
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

impl Builder<'_> {
    /// `copy`, a single-operand `opt-barrier` and the single-device identity
    /// custom-calls (`Sharding`): the operand resharded to the result's sharding.
    pub(super) fn copy(
        &mut self,
        ins: &Instr,
        ops: &[PV],
        want: &Placed,
    ) -> Result<PV, Diagnostic> {
        let a = self.arr(ins, &ops[0])?.clone();
        Ok(PV::Arr(self.reshard(a, want)))
    }

    /// An elementwise op (operands of the result's dims): every operand in the result's
    /// sharding, computed locally.
    pub(super) fn elementwise(
        &mut self,
        ins: &Instr,
        ops: &[PV],
        want: Placed,
    ) -> Result<PV, Diagnostic> {
        let mut nodes = Vec::with_capacity(ops.len());
        for v in ops {
            let a = self.arr(ins, v)?.clone();
            nodes.push(self.reshard(a, &want).node);
        }
        let node = self.local_op(ins, ins.op.clone(), &nodes)?;
        self.result(ins, node, want)
    }

    /// A broadcast: straight into each device's shard when the operand can be tiled as
    /// the result is on its dims, else as the operand's tiling allows, then resharded.
    pub(super) fn broadcast(
        &mut self,
        ins: &Instr,
        dimensions: &[i64],
        ops: &[PV],
        want: &Placed,
    ) -> Result<PV, Diagnostic> {
        let (elem, dims) = global_dims(&ins.shape).expect("array result");
        let rank = dims.len();
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
        // With the operand tiled as the wanted result is on its dims (and replicated along
        // the added ones), every device broadcasts straight into its own shard: added dims
        // may be tiled at no cost (padding of uneven shards holds unspecified values).
        // Otherwise the result comes as the operand's tiling allows and is resharded.
        let direct = target.is_some();
        let target = target.unwrap_or_else(|| Placed::replicated(a.dims.len(), self.n));
        let src = self.reshard(a, &target);
        let got = if direct {
            want.clone()
        } else {
            Placed::new(target.t.insert_dims(&added)).expect("insert keeps devices")
        };
        let op = Op::Broadcast { dimensions: dimensions.to_vec() };
        let node = self.add_local(ins, op, &[src.node], elem, &got.local_dims(&dims));
        let r = A {
            node,
            p: got,
            dims: dims.clone(),
            elem,
            splat: (src.dims.is_empty()).then_some(src.node),
        };
        Ok(PV::Arr(self.reshard(r, want)))
    }

    /// A transpose: the operand in the result's tiling permuted back, transposed locally.
    pub(super) fn transpose(
        &mut self,
        ins: &Instr,
        dimensions: &[i64],
        ops: &[PV],
        want: Placed,
    ) -> Result<PV, Diagnostic> {
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

    /// A reshape: locally, from an operand sharding whose shards reshape into the
    /// result's ([`reshape_source`]), or from the operand's own tiling carried through
    /// (the result then reshards); else computed replicated.
    pub(super) fn reshape(
        &mut self,
        ins: &Instr,
        ops: &[PV],
        want: Placed,
    ) -> Result<PV, Diagnostic> {
        let (elem, dims) = global_dims(&ins.shape).expect("array result");
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
            && reshape_source(&t, &a.dims, &dims).is_some_and(|s| s.same_regions(&a.p, &a.dims))
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

    /// An `iota` untiled along its counting dim: each device computes its shard as is.
    pub(super) fn iota(
        &mut self,
        ins: &Instr,
        elem: ElemType,
        dims: &[i64],
        want: Placed,
    ) -> Result<PV, Diagnostic> {
        let node = self.add_local(ins, ins.op.clone(), &[], elem, &want.local_dims(dims));
        self.result(ins, node, want)
    }

    /// A replicated constant: every device holds all of it.
    pub(super) fn replicated_constant(
        &mut self,
        ins: &Instr,
        want: Placed,
    ) -> Result<PV, Diagnostic> {
        let node = self.local_op(ins, ins.op.clone(), &[])?;
        self.result(ins, node, want)
    }
}
