//! HLO `convolution` as im2col + GEMM.
//!
//! With `M` the output positions (batch × spatial), `Kc` the kernel taps × input features
//! of one group and `O` the output features, the convolution is `out[M, O] =
//! patches[M, Kc] · weights[Kc, O]` per feature/batch group. The weights are copied once
//! into that `[Kc, O]` order (window reversal folded in); the patch matrix is built in
//! row chunks (and tap chunks when `Kc` is huge) so its buffer stays bounded, and the
//! chunks run on the rayon pool. The GEMM writes straight into `out` through strides:
//! the output's batch and spatial dims, taken in memory order, split into a prefix that
//! indexes row blocks and the longest suffix that walks `out` with one stride (all of
//! them for `b01f` or `01bf`, the spatial dims for `bf01`). Only when that suffix is
//! shorter than a useful GEMM does the result go through a `[M, O]` buffer.
//!
//! The patch matrix holds zeros at window positions in padding and in lhs-dilation holes,
//! where HLO's convolution (and XLA) skips the position. Multiplying those zeros is exact
//! while every kernel value is finite (a `±0` product changes a sum at most from `-0` to
//! `+0`, which is what the interpreter's sums, started at `+0`, give), but `0 · inf` and
//! `0 · NaN` are NaN. So a kernel holding an infinite or NaN value (one scan of the
//! weights) goes to `direct_loop` when the convolution has any such position: a loop
//! that skips them and accumulates each output element in the reference interpreter's
//! order (taps row-major, then input features). Window (rhs) dilation holes are never
//! materialized: only the kernel's own taps are read, so an infinite or NaN input under
//! a hole never meets a zero.
//!
//! Integer (and pred) convolutions ([`convolution_i64`]) always take `direct_loop`, on
//! wrap-around 64-bit values: the reference interpreter's sums, which the caller wraps to
//! the result type.

use super::gemm::{self, Gemm, OutPtr, Shape, Strided};
use super::{Float, gather, row_major_strides};
use hlo_ir::op::Convolution;
use rayon::prelude::*;

/// Elements of patch matrix one task builds at a time (4 MiB of f32).
const PATCH_BUDGET: usize = 1 << 20;

/// Patch elements from which a convolution that runs as one task fills its patch matrix
/// on the pool too, in chunks of a quarter of this (whole rows). Measured (release, this
/// 2-core host, quiet, `hloc run --repeat 300`, six alternating runs): the bench CNN's
/// weight gradient `3x32x32x16 ⊛ 32x32x16x32` (27 rows of 16384 patch elements; its GEMM
/// split along the contraction, `gemm::split_depth`) took 421-428 µs on two threads
/// against 438-450 with the fill on one (466-487 on one thread).
const PARALLEL_FILL: usize = 1 << 16;

/// Fewest rows worth a GEMM call of their own.
const MIN_ROWS: usize = 32;

/// `out = convolution(lhs, rhs)` per HLO semantics (window strides, padding including
/// negative, lhs/rhs dilation, window reversal, `dim_labels`, feature and batch groups),
/// on row-major `f32` arrays. `out_dims` are the result's declared dims; the result
/// positions are computed the reference interpreter's way, so any declared spatial
/// extent is honoured (windows past the input read zeros).
///
/// # Panics
/// If ranks, group counts, feature/batch sizes or slice lengths are inconsistent.
pub fn convolution_f32(
    lhs: &[f32],
    lhs_dims: &[usize],
    rhs: &[f32],
    rhs_dims: &[usize],
    conv: &Convolution,
    out: &mut [f32],
    out_dims: &[usize],
) -> &'static str {
    convolution(lhs, lhs_dims, rhs, rhs_dims, conv, out, out_dims)
}

/// The dimension numbers `b01f_01io->b01f`: channels-last input and output, an HWIO
/// kernel (as JAX lays out a 2-d convolution).
pub(crate) fn nhwc_dims() -> hlo_ir::op::ConvDims {
    hlo_ir::op::ConvDims {
        input_batch: 0,
        input_feature: 3,
        input_spatial: vec![1, 2],
        kernel_input_feature: 2,
        kernel_output_feature: 3,
        kernel_spatial: vec![0, 1],
        output_batch: 0,
        output_feature: 3,
        output_spatial: vec![1, 2],
    }
}

/// [`convolution_f32`] on `f64` arrays.
pub fn convolution_f64(
    lhs: &[f64],
    lhs_dims: &[usize],
    rhs: &[f64],
    rhs_dims: &[usize],
    conv: &Convolution,
    out: &mut [f64],
    out_dims: &[usize],
) -> &'static str {
    convolution(lhs, lhs_dims, rhs, rhs_dims, conv, out, out_dims)
}

/// [`convolution_f32`] on integers (operands already converted to the result type's
/// values, sign- or zero-extended), always by `direct_loop`: each output element is the
/// wrap-around 64-bit sum of products the interpreter computes (the caller wraps it to
/// the result type).
pub fn convolution_i64(
    lhs: &[i64],
    lhs_dims: &[usize],
    rhs: &[i64],
    rhs_dims: &[usize],
    conv: &Convolution,
    out: &mut [i64],
    out_dims: &[usize],
) {
    use std::num::Wrapping;
    let (l, r): (Vec<_>, Vec<_>) =
        (lhs.iter().map(|&x| Wrapping(x)).collect(), rhs.iter().map(|&x| Wrapping(x)).collect());
    let mut o = vec![Wrapping(0i64); out.len()];
    convolution_chunked(&l, lhs_dims, &r, rhs_dims, conv, &mut o, out_dims, PATCH_BUDGET, true);
    for (d, s) in out.iter_mut().zip(o) {
        *d = s.0;
    }
}

#[cfg(test)]
/// [`convolution_f32`] always by [`direct_loop`] (skipping padding and holes).
pub fn convolution_f32_direct(
    lhs: &[f32],
    lhs_dims: &[usize],
    rhs: &[f32],
    rhs_dims: &[usize],
    conv: &Convolution,
    out: &mut [f32],
    out_dims: &[usize],
) {
    convolution_chunked(lhs, lhs_dims, rhs, rhs_dims, conv, out, out_dims, PATCH_BUDGET, true);
}

/// One output row dim of the GEMM: the output batch or a spatial dim.
#[derive(Debug, Clone, Copy)]
enum RowDim {
    Batch,
    Spatial(usize),
}

/// Everything the im2col of one chunk needs.
struct Im2col<'a, T> {
    lhs: &'a [T],
    /// Row dims (outermost first) with their sizes: row `r` decodes through these.
    rows: Vec<(RowDim, usize)>,
    /// Per spatial dim: `src[o·ks + k]` = input index read by output `o`, tap `k`, or
    /// `usize::MAX` for padding and base-dilation holes.
    src: Vec<Vec<usize>>,
    ksizes: Vec<usize>,
    in_spatial_strides: Vec<usize>,
    in_batch_stride: usize,
    in_feature_stride: usize,
    out_batch: usize,
    in_per_group: usize,
}

impl<T: Float> Im2col<'_, T> {
    /// The output batch index and spatial multi-index (into `os`) of GEMM row `r`.
    fn decode(&self, r: usize, os: &mut [usize]) -> usize {
        let mut ob = 0;
        let mut rest = r;
        for &(d, size) in self.rows.iter().rev() {
            let i = rest % size;
            rest /= size;
            match d {
                RowDim::Batch => ob = i,
                RowDim::Spatial(s) => os[s] = i,
            }
        }
        ob
    }

    /// The offset in `lhs` of input feature 0 of group `fg` that output position `os`
    /// reads at window tap `tap` from batch `b`, or `None` in padding or a dilation hole.
    fn source(&self, b: usize, fg: usize, os: &[usize], tap: &[usize]) -> Option<usize> {
        let mut off = b * self.in_batch_stride + fg * self.in_per_group * self.in_feature_stride;
        for (s, (&o, &k)) in os.iter().zip(tap).enumerate() {
            let i = self.src[s][o * self.ksizes[s] + k];
            if i == usize::MAX {
                return None;
            }
            off += i * self.in_spatial_strides[s];
        }
        Some(off)
    }

    /// `buf[(r - r0), (t - t0)·ipg + ci]` for rows `r0..r1` and linear taps `t0..t1`, for
    /// feature group `fg` and batch group `bgi`.
    fn fill(
        &self,
        buf: &mut Vec<T>,
        (r0, r1): (usize, usize),
        (t0, t1): (usize, usize),
        fg: usize,
        bgi: usize,
        parallel: bool,
    ) {
        let ipg = self.in_per_group;
        let nsp = self.ksizes.len();
        if nsp == 2 && self.in_feature_stride == 1 && (t0, t1) == (0, self.taps()) {
            return self.fill_2d(buf, (r0, r1), fg, bgi, parallel);
        }
        buf.clear();
        buf.reserve((r1 - r0) * (t1 - t0) * ipg);
        let mut os = vec![0usize; nsp];
        let mut tap = vec![0usize; nsp];
        for r in r0..r1 {
            let b = bgi * self.out_batch + self.decode(r, &mut os);
            // The multi-index of tap t0 (row-major over the kernel's spatial dims).
            let mut rest = t0;
            for s in (0..nsp).rev() {
                tap[s] = rest % self.ksizes[s];
                rest /= self.ksizes[s];
            }
            for _ in t0..t1 {
                match self.source(b, fg, &os, &tap) {
                    None => buf.extend(std::iter::repeat_n(T::ZERO, ipg)),
                    Some(off) if self.in_feature_stride == 1 => {
                        buf.extend_from_slice(&self.lhs[off..off + ipg])
                    }
                    Some(off) => {
                        buf.extend((0..ipg).map(|c| self.lhs[off + c * self.in_feature_stride]))
                    }
                }
                self.next_tap(&mut tap);
            }
        }
    }

    /// The number of window taps.
    fn taps(&self) -> usize {
        self.ksizes.iter().product()
    }

    /// [`Self::fill`] of every tap for two spatial dims with the features innermost in the
    /// input: per row, per tap of the first dim, runs of taps of the second dim that read
    /// adjacent input positions are one copy (a row of a stride-1 3x3 window is three
    /// copies of `3·ipg` values); positions in padding stay zero.
    /// With `parallel`, row chunks are filled on the rayon pool (a convolution that is one
    /// task, with few output rows and a long contraction: a weight gradient).
    fn fill_2d(
        &self,
        buf: &mut Vec<T>,
        (r0, r1): (usize, usize),
        fg: usize,
        bgi: usize,
        parallel: bool,
    ) {
        let cols = self.ksizes[0] * self.ksizes[1] * self.in_per_group;
        buf.clear();
        buf.resize((r1 - r0) * cols, T::ZERO);
        if parallel && (r1 - r0) * cols >= PARALLEL_FILL {
            let chunk_rows = (PARALLEL_FILL / 4 / cols).max(1);
            buf.par_chunks_mut(chunk_rows * cols).enumerate().for_each(|(i, rows)| {
                let ra = r0 + i * chunk_rows;
                self.fill_2d_rows(rows, (ra, (ra + chunk_rows).min(r1)), fg, bgi)
            });
        } else {
            self.fill_2d_rows(buf, (r0, r1), fg, bgi)
        }
    }

    /// [`Self::fill_2d`] of rows `r0..r1` into `buf`, which holds them, zeroed.
    fn fill_2d_rows(&self, buf: &mut [T], (r0, r1): (usize, usize), fg: usize, bgi: usize) {
        let ipg = self.in_per_group;
        let (k0n, k1n) = (self.ksizes[0], self.ksizes[1]);
        let (st0, st1) = (self.in_spatial_strides[0], self.in_spatial_strides[1]);
        let cols = k0n * k1n * ipg;
        let mut os = [0usize; 2];
        for r in r0..r1 {
            let b = bgi * self.out_batch + self.decode(r, &mut os);
            let base = b * self.in_batch_stride + fg * ipg;
            let s0 = &self.src[0][os[0] * k0n..(os[0] + 1) * k0n];
            let s1 = &self.src[1][os[1] * k1n..(os[1] + 1) * k1n];
            let row = &mut buf[(r - r0) * cols..(r - r0 + 1) * cols];
            for (k0, &i0) in s0.iter().enumerate() {
                if i0 == usize::MAX {
                    continue;
                }
                let b0 = base + i0 * st0;
                let mut k1 = 0;
                while k1 < k1n {
                    let i1 = s1[k1];
                    if i1 == usize::MAX {
                        k1 += 1;
                        continue;
                    }
                    // The run of taps reading consecutive, contiguous positions.
                    let mut run = 1;
                    while k1 + run < k1n && st1 == ipg && s1[k1 + run] == i1 + run {
                        run += 1;
                    }
                    let from = b0 + i1 * st1;
                    let at = (k0 * k1n + k1) * ipg;
                    row[at..at + run * ipg].copy_from_slice(&self.lhs[from..from + run * ipg]);
                    k1 += run;
                }
            }
        }
    }

    /// Advances the row-major tap multi-index `tap` by one.
    fn next_tap(&self, tap: &mut [usize]) {
        for s in (0..tap.len()).rev() {
            tap[s] += 1;
            if tap[s] < self.ksizes[s] {
                return;
            }
            tap[s] = 0;
        }
    }

    /// Whether some output position's window reaches padding or a dilation hole.
    fn skips_any(&self) -> bool {
        self.src.iter().any(|t| t.contains(&usize::MAX))
    }
}

/// Whether `w` holds an infinite or NaN value (branch-free within chunks, so it
/// vectorizes).
fn any_nonfinite<T: Float>(w: &[T]) -> bool {
    use rayon::prelude::*;
    let any = |c: &[T]| c.chunks(256).any(|c| c.iter().fold(false, |a, &x| a | !x.is_finite()));
    // A weight-gradient convolution's "weights" are an activation gradient (512k elements
    // in the bench CNN: 40 µs on one thread): scanned over the pool, as `gather` copies.
    if w.len() >= 2 * crate::PARALLEL_COPY && rayon::current_num_threads() > 1 {
        w.par_chunks(crate::PARALLEL_COPY).any(any)
    } else {
        any(w)
    }
}

/// The convolution into `temp` (`[m, O]`, rows decoded as the im2col's) without a GEMM:
/// window positions in padding and lhs-dilation holes are skipped, not multiplied, and
/// each output element accumulates from `+0` over the taps in row-major order, then the
/// group's input features, as the reference interpreter does (so the result is the
/// interpreter's bit for bit). `weights` are `[taps, ipg, O]` (reversal folded in);
/// `blocks` are the output feature ranges with their feature and batch group.
fn direct_loop<T: Float>(
    im: &Im2col<'_, T>,
    weights: &[T],
    blocks: &[((usize, usize), usize, usize)],
    temp: &mut [T],
    of: usize,
    parallel: bool,
) {
    let (ipg, ifs, nsp) = (im.in_per_group, im.in_feature_stride, im.ksizes.len());
    let taps: usize = im.ksizes.iter().product();
    let row = |r: usize, acc: &mut [T], os: &mut [usize], tap: &mut [usize]| {
        let ob = im.decode(r, os);
        for &((f0, f1), fg, bgi) in blocks {
            let acc = &mut acc[f0..f1];
            tap.fill(0);
            for t in 0..taps {
                if let Some(off) = im.source(bgi * im.out_batch + ob, fg, os, tap) {
                    for ci in 0..ipg {
                        let x = im.lhs[off + ci * ifs];
                        let w = &weights[(t * ipg + ci) * of + f0..][..f1 - f0];
                        for (a, &w) in acc.iter_mut().zip(w) {
                            *a = *a + x * w;
                        }
                    }
                }
                im.next_tap(tap);
            }
        }
    };
    const ROWS: usize = 16;
    let chunk = |(i, rows): (usize, &mut [T])| {
        let (mut os, mut tap) = (vec![0usize; nsp], vec![0usize; nsp]);
        for (j, acc) in rows.chunks_exact_mut(of).enumerate() {
            row(i * ROWS + j, acc, &mut os, &mut tap);
        }
    };
    if parallel {
        temp.par_chunks_mut(ROWS * of).enumerate().for_each(chunk);
    } else {
        temp.chunks_mut(ROWS * of).enumerate().for_each(chunk);
    }
}

/// One unit of work: output rows `rows` × output features `feats` of one group.
#[derive(Debug, Clone, Copy)]
struct Task {
    /// Global row range (decoded through all row dims for im2col).
    rows: (usize, usize),
    /// Where row `rows.0`, feature 0 of this task lands in the GEMM output.
    c_off: usize,
    feats: (usize, usize),
    fg: usize,
    bgi: usize,
}

fn convolution<T: Float>(
    lhs: &[T],
    lhs_dims: &[usize],
    rhs: &[T],
    rhs_dims: &[usize],
    c: &Convolution,
    out: &mut [T],
    out_dims: &[usize],
) -> &'static str {
    convolution_chunked(lhs, lhs_dims, rhs, rhs_dims, c, out, out_dims, PATCH_BUDGET, false)
}

/// [`convolution`] with patch buffers of about `budget` elements; by [`direct_loop`] when
/// `force_direct` (integers, tests) or when the GEMM would multiply a non-finite kernel value by
/// the zeros of padding or holes. Returns the path it took ([`crate::cpu::conv_path`]).
#[allow(clippy::too_many_arguments)]
fn convolution_chunked<T: Float>(
    lhs: &[T],
    lhs_dims: &[usize],
    rhs: &[T],
    rhs_dims: &[usize],
    c: &Convolution,
    out: &mut [T],
    out_dims: &[usize],
    budget: usize,
    force_direct: bool,
) -> &'static str {
    let dn = &c.dims;
    let nsp = dn.input_spatial.len();
    let count = |dims: &[usize]| -> usize { dims.iter().product() };
    assert!(
        lhs_dims.len() == nsp + 2 && rhs_dims.len() == nsp + 2 && out_dims.len() == nsp + 2,
        "convolution: ranks {}, {}, {} for {nsp} spatial dims",
        lhs_dims.len(),
        rhs_dims.len(),
        out_dims.len()
    );
    assert!(
        dn.kernel_spatial.len() == nsp && dn.output_spatial.len() == nsp,
        "convolution: dim_labels with different spatial ranks"
    );
    assert!(
        c.window.dims.len() == nsp,
        "convolution: a window of rank {} for {nsp} spatial dims",
        c.window.dims.len()
    );
    assert!(
        lhs.len() == count(lhs_dims)
            && rhs.len() == count(rhs_dims)
            && out.len() == count(out_dims),
        "convolution: slice lengths do not match dims"
    );
    let ld = |d: i64| lhs_dims[d as usize];
    let rd = |d: i64| rhs_dims[d as usize];
    let g = c.feature_group_count.max(1) as usize;
    let bg = c.batch_group_count.max(1) as usize;
    let in_features = ld(dn.input_feature);
    let out_features = rd(dn.kernel_output_feature);
    assert!(
        in_features % g == 0 && out_features % g == 0 && out_features % bg == 0,
        "convolution: {in_features} input / {out_features} output features do not split into {g} feature groups / {bg} batch groups"
    );
    let ipg = in_features / g;
    assert!(
        rd(dn.kernel_input_feature) == ipg,
        "convolution: kernel input features {} for {ipg} input features per group",
        rd(dn.kernel_input_feature)
    );
    assert!(
        out_dims[dn.output_feature as usize] == out_features,
        "convolution: output features {} for kernel output features {out_features}",
        out_dims[dn.output_feature as usize]
    );
    let out_batch = out_dims[dn.output_batch as usize];
    assert!(
        ld(dn.input_batch) == out_batch * bg,
        "convolution: input batch {} for output batch {out_batch} and {bg} batch groups",
        ld(dn.input_batch)
    );
    let ksizes: Vec<usize> = dn.kernel_spatial.iter().map(|&d| rd(d)).collect();
    for (s, wd) in c.window.dims.iter().enumerate() {
        assert!(
            wd.size as usize == ksizes[s]
                && wd.stride >= 1
                && wd.lhs_dilate >= 1
                && wd.rhs_dilate >= 1,
            "convolution: window dim {s} {wd:?} for kernel size {}",
            ksizes[s]
        );
    }
    if out.is_empty() {
        return "empty";
    }
    let taps: usize = ksizes.iter().product();
    let kc = taps * ipg;
    if kc == 0 {
        out.fill(T::ZERO);
        return "empty";
    }

    // Weights as [taps..., ci, o], reversed window dims read backwards.
    let rs = row_major_strides(rhs_dims);
    let mut wsizes = ksizes.clone();
    let mut wstrides: Vec<isize> = Vec::with_capacity(nsp + 2);
    let mut wbase = 0isize;
    for (s, &d) in dn.kernel_spatial.iter().enumerate() {
        let st = rs[d as usize] as isize;
        if c.window.dims[s].reversal {
            wbase += (ksizes[s] as isize - 1) * st;
            wstrides.push(-st);
        } else {
            wstrides.push(st);
        }
    }
    wsizes.extend([ipg, out_features]);
    wstrides.extend([
        rs[dn.kernel_input_feature as usize] as isize,
        rs[dn.kernel_output_feature as usize] as isize,
    ]);
    let weights = gather(rhs, &wsizes, &wstrides, wbase);

    // GEMM rows: output batch and spatial dims, ordered as they lie in `out`. The longest
    // suffix of them that walks `out` with one stride is a GEMM's row range; the dims
    // before it (if any) index separate row blocks.
    let ost = row_major_strides(out_dims);
    let mut row_dims: Vec<(RowDim, usize)> =
        std::iter::once((RowDim::Batch, dn.output_batch as usize))
            .chain(
                dn.output_spatial
                    .iter()
                    .enumerate()
                    .map(|(s, &d)| (RowDim::Spatial(s), d as usize)),
            )
            .collect();
    row_dims.sort_by_key(|&(_, d)| std::cmp::Reverse(ost[d]));
    let m: usize = row_dims.iter().map(|&(_, d)| out_dims[d]).product();
    let fs = ost[dn.output_feature as usize];
    let mut split = row_dims.len();
    let mut inner_last: Option<usize> = None; // the suffix's innermost live dim
    let mut outer: Option<usize> = None; // its outermost live dim so far
    while split > 0 {
        let d = row_dims[split - 1].1;
        if out_dims[d] != 1 {
            if outer.is_some_and(|o| ost[d] != ost[o] * out_dims[o]) {
                break;
            }
            outer = Some(d);
            inner_last = inner_last.or(Some(d));
        }
        split -= 1;
    }
    let m_inner: usize = row_dims[split..].iter().map(|&(_, d)| out_dims[d]).product();
    // Row blocks of fewer than MIN_ROWS rows make poor GEMMs: then the whole result goes
    // to a [m, O] buffer, scattered into `out` at the end.
    let direct = split == 0 || m_inner >= MIN_ROWS;
    let (m_inner, prefix_offsets, row_stride, feat_stride) = if direct {
        let inner_stride = inner_last.map_or(if fs == 1 { out_features } else { 1 }, |d| ost[d]);
        let prefix: Vec<usize> = row_dims[..split].iter().map(|&(_, d)| d).collect();
        let mut offs = vec![0usize];
        for &d in &prefix {
            let (n, st) = (out_dims[d], ost[d]);
            offs = offs.iter().flat_map(|&o| (0..n).map(move |i| o + i * st)).collect();
        }
        (m_inner, offs, inner_stride, fs)
    } else {
        (m, vec![0], out_features, 1)
    };

    // Patch rows copy `ipg` input features per tap: with the features not innermost in
    // the input (weight-gradient convolutions read the batch as features), one transposed
    // copy that puts them innermost turns strided gathers into contiguous copies.
    let mut ls = row_major_strides(lhs_dims);
    let feat = dn.input_feature as usize;
    let transposed: Option<Vec<T>> = (ls[feat] != 1 && ipg > 1).then(|| {
        let perm: Vec<usize> = (0..lhs_dims.len()).filter(|&d| d != feat).chain([feat]).collect();
        let tdims: Vec<usize> = perm.iter().map(|&d| lhs_dims[d]).collect();
        let from: Vec<isize> = perm.iter().map(|&d| ls[d] as isize).collect();
        let t = gather(lhs, &tdims, &from, 0);
        let trs = row_major_strides(&tdims);
        for (i, &d) in perm.iter().enumerate() {
            ls[d] = trs[i];
        }
        t
    });
    let lhs: &[T] = transposed.as_deref().unwrap_or(lhs);
    let src: Vec<Vec<usize>> = (0..nsp)
        .map(|s| {
            let wd = &c.window.dims[s];
            let (on, kn, inn) =
                (out_dims[dn.output_spatial[s] as usize], ksizes[s], ld(dn.input_spatial[s]));
            let mut t = Vec::with_capacity(on * kn);
            for o in 0..on as i64 {
                for k in 0..kn as i64 {
                    let p = o * wd.stride + k * wd.rhs_dilate - wd.pad_lo;
                    let ok =
                        p >= 0 && p % wd.lhs_dilate == 0 && ((p / wd.lhs_dilate) as usize) < inn;
                    t.push(if ok { (p / wd.lhs_dilate) as usize } else { usize::MAX });
                }
            }
            t
        })
        .collect();
    let im2col = Im2col {
        lhs,
        rows: row_dims.iter().map(|&(r, d)| (r, out_dims[d])).collect(),
        src,
        ksizes: ksizes.clone(),
        in_spatial_strides: dn.input_spatial.iter().map(|&d| ls[d as usize]).collect(),
        in_batch_stride: ls[dn.input_batch as usize],
        in_feature_stride: ls[dn.input_feature as usize],
        out_batch,
        in_per_group: ipg,
    };

    // Output feature blocks with one (feature group, batch group) each.
    let (opf, opb) = (out_features / g, out_features / bg);
    let mut blocks = Vec::new();
    let mut o0 = 0;
    while o0 < out_features {
        let o1 = ((o0 / opf + 1) * opf).min((o0 / opb + 1) * opb);
        blocks.push(((o0, o1), o0 / opf, o0 / opb));
        o0 = o1;
    }

    // Chunking: bounded patch buffers, and at least one task per thread when worth it.
    let threads = rayon::current_num_threads();
    let work = m.saturating_mul(kc).saturating_mul(out_features);
    let parallel = threads > 1 && work >= gemm::TASKS_MNK;
    let blocks_total = blocks.len() * prefix_offsets.len();
    let mut rows_per = m_inner.min((budget / kc).max(MIN_ROWS));
    // Taps per patch fill, from the row blocks of one thread: each GEMM sums its slice of
    // the taps and adds it to the last, so the slices must not depend on the thread count
    // (fewer rows per task below would allow longer slices, and other sums).
    let taps_per = taps.min((budget / (rows_per * ipg)).max(1));
    if parallel && blocks_total * m_inner.div_ceil(rows_per) < 2 * threads {
        // Two tasks per thread for balance, if the row blocks stay worth a GEMM.
        let per_block = (2 * threads).div_ceil(blocks_total);
        rows_per = rows_per.min(m_inner.div_ceil(per_block).max(MIN_ROWS));
    }
    if force_direct || im2col.skips_any() && any_nonfinite(&weights) {
        let mut temp = vec![T::ZERO; m * out_features];
        direct_loop(&im2col, &weights, &blocks, &mut temp, out_features, parallel);
        scatter(&temp, out, &row_dims, out_dims, &ost, fs, out_features);
        return crate::cpu::CONV_DIRECT;
    }
    let mut tasks = Vec::new();
    for &(feats, fg, bgi) in &blocks {
        for (p, &c_off) in prefix_offsets.iter().enumerate() {
            for i0 in (0..m_inner).step_by(rows_per) {
                let i1 = (i0 + rows_per).min(m_inner);
                tasks.push(Task {
                    rows: (p * m_inner + i0, p * m_inner + i1),
                    c_off: c_off + i0 * row_stride,
                    feats,
                    fg,
                    bgi,
                });
            }
        }
    }

    let mut temp = if direct { Vec::new() } else { vec![T::ZERO; m * out_features] };
    let target = if direct { OutPtr::new(out) } else { OutPtr::new(&mut temp) };
    let run = |t: &Task, buf: &mut Vec<T>, gemm_threads: usize| {
        let ((r0, r1), (f0, f1)) = (t.rows, t.feats);
        for t0 in (0..taps).step_by(taps_per) {
            let t1 = (t0 + taps_per).min(taps);
            im2col.fill(buf, (r0, r1), (t0, t1), t.fg, t.bgi, gemm_threads > 1);
            let kk = (t1 - t0) * ipg;
            let s = Shape { m: r1 - r0, n: f1 - f0, k: kk };
            let a = Strided::row_major(0, kk);
            let b = Strided { off: t0 * ipg * out_features + f0, rs: out_features, cs: 1 };
            let cv = Strided { off: t.c_off + f0 * feat_stride, rs: row_stride, cs: feat_stride };
            // SAFETY: tasks cover disjoint (row, feature) rectangles, and distinct
            // (row, feature) pairs are distinct elements of `target`: a row block's dims
            // collapse to the one stride `row_stride` in `out`, blocks start at distinct
            // prefix offsets; `temp` is plainly `[m, O]`.
            unsafe {
                Gemm {
                    s,
                    a: buf,
                    al: a,
                    b: &weights,
                    bl: b,
                    accumulate: t0 > 0,
                    threads: gemm_threads,
                }
                .run_into(target, cv)
            };
        }
    };
    if parallel && tasks.len() > 1 {
        // Fewer tasks than threads (rows too few for a task each: a weight gradient's
        // output positions on a many-core pool): each task's GEMM splits over its share,
        // with the same bits (`gemm::DEPTH`). Not measured where it applies (a many-core
        // host); 16 threads on this 2-core host ran the bench CNN's `32x16x16x16 ⊛
        // 16x16x16x64` (9 tasks) in 1018-1030 µs against 1011 before.
        let per_task = if tasks.len() < threads { threads.div_ceil(tasks.len()) } else { 1 };
        tasks.par_iter().for_each_init(Vec::new, |buf, t| run(t, buf, per_task));
    } else {
        let mut buf = Vec::new();
        for t in &tasks {
            run(t, &mut buf, threads);
        }
    }
    if !direct {
        scatter(&temp, out, &row_dims, out_dims, &ost, fs, out_features);
    }
    // The GEMM path of the first task's first tap slice (the largest: the others are the
    // same or the remainders).
    let path = tasks.first().map_or("empty", |t| {
        let k = taps.min(taps_per) * ipg;
        crate::cpu::gemm_for(Shape { m: t.rows.1 - t.rows.0, n: t.feats.1 - t.feats.0, k })
    });
    crate::cpu::conv_path(path)
}

/// `out[row r, feature o] = temp[r·O + o]`, rows decoded through `row_dims`.
fn scatter<T: Float>(
    temp: &[T],
    out: &mut [T],
    row_dims: &[(RowDim, usize)],
    out_dims: &[usize],
    ost: &[usize],
    fs: usize,
    of: usize,
) {
    for (r, row) in temp.chunks_exact(of).enumerate() {
        let mut rest = r;
        let mut base = 0;
        for &(_, d) in row_dims.iter().rev() {
            base += (rest % out_dims[d]) * ost[d];
            rest /= out_dims[d];
        }
        for (o, &v) in row.iter().enumerate() {
            out[base + o * fs] = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hlo_ir::op::{Window, WindowDim};

    /// Tiny patch budgets (row chunks, tap chunks accumulating into `out`) give the
    /// one-chunk result.
    #[test]
    fn chunking_matches_one_chunk() {
        // b01f input [3, 9, 8, 16], 01io kernel [3, 2, 16, 24], stride 2x1, padded, one
        // dim reversed; chunks big enough for the library GEMM accumulating.
        let dims = super::nhwc_dims();
        let window = Window {
            dims: vec![
                WindowDim { size: 3, stride: 2, pad_lo: 1, pad_hi: 1, ..Default::default() },
                WindowDim { size: 2, pad_lo: 1, reversal: true, ..Default::default() },
            ],
        };
        let c = Convolution {
            window,
            dims,
            feature_group_count: 1,
            batch_group_count: 1,
            precision: vec![],
            kind: None,
        };
        let (ld, rd, od) = ([3usize, 9, 8, 16], [3usize, 2, 16, 24], [3usize, 5, 8, 24]);
        let lhs: Vec<f64> = (0..ld.iter().product()).map(|i: usize| (i % 7) as f64 - 3.0).collect();
        let rhs: Vec<f64> = (0..rd.iter().product()).map(|i: usize| (i % 5) as f64 - 2.0).collect();
        let mut want = vec![0f64; od.iter().product()];
        convolution_chunked(&lhs, &ld, &rhs, &rd, &c, &mut want, &od, 1 << 20, false);
        for budget in [1, 7, 40, 300] {
            let mut got = vec![f64::NAN; want.len()];
            convolution_chunked(&lhs, &ld, &rhs, &rd, &c, &mut got, &od, budget, false);
            assert_eq!(got, want, "budget {budget}");
        }
    }
}
