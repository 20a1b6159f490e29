//! `convolution` (XLA's `convolution_handler`): as a contraction of the input and kernel
//! feature dims with the batch and output feature passing through (`Builder::conv` on the
//! dot handler's `Builder::contraction`), or, when the output is tiled along one
//! spatial dim, by halo exchange: each device convolves its shard extended by its
//! neighbours' boundary rows (`collective-permute`, XLA's `ExchangeHalo`). Not done: halos
//! beyond stride-1 "same" convolutions.

use std::collections::HashMap;

use hlo_ir::op::{CollectiveAttrs, SliceRange};
use hlo_ir::{Diagnostic, Instr, NodeIndex, Op, Opcode, Shape};

use super::builder::{A, Builder, PV, global_dims, udims};
use super::space::{Space, project};
use crate::geometry::Placed;

impl Builder<'_> {
    /// A convolution: by halo exchange when its output is tiled along one spatial dim
    /// ([`Self::conv_halo`]), else as a contraction ([`Self::conv`]).
    pub(super) fn convolution(
        &mut self,
        ins: &Instr,
        cv: &hlo_ir::op::Convolution,
        ops: &[PV],
        want: &Placed,
    ) -> Result<PV, Diagnostic> {
        match self.conv_halo(ins, cv, ops, want)? {
            Some(v) => Ok(v),
            None => self.conv(ins, cv, ops, want),
        }
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
}
