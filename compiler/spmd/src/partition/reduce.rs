//! `reduce` (XLA's `HandleReduce`): over a tiled dimension, each device reduces its
//! shard (the padding of uneven shards masked with the init value) and the partial
//! results are combined by a collective with the reducer itself, when it is one that
//! combines (add, multiply, max, min, and, or); kept dims follow the result's sharding.

use hlo_ir::{CompId, Diagnostic, Instr, Opcode};

use super::builder::{A, Builder, PV, global_dims};
use crate::geometry::Placed;

impl Builder<'_> {
    /// A `reduce` of an array operand with its init value (see the module doc).
    pub(super) fn reduce(
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
        let combinable = hlo_fabric::binary_reducer(self.m.comp(to_apply)).is_some_and(|o| {
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
