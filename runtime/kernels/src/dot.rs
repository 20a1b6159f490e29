//! HLO `dot` with general dimension numbers as batched GEMMs.
//!
//! Each operand is viewed as `[B, M, K]` (lhs) or `[B, K, N]` (rhs) through strides:
//! the batch dims give one offset per batch, and the free and contracting dim groups each
//! need a single stride, which they have whenever the group's dims sit in memory in
//! the order HLO reads them (e.g. a transposed 2-D operand is just swapped strides). Only
//! an operand whose group is interleaved in memory is first copied into canonical order.
//! The result is `[B, M, N]` row-major, which is HLO's result layout (batch dims, then
//! lhs free dims, then rhs free dims).

use super::gemm::{self, Gemm, OutPtr, Shape, Strided};
use super::{Float, gather, row_major_strides};
use hlo_ir::op::DotDims;
use rayon::prelude::*;
use std::borrow::Cow;

/// `out = dot(lhs, rhs)` per HLO `dot_general` semantics, on row-major `f32` arrays.
///
/// `out` holds the result in row-major order with dims `dot_output_dims`: the batch
/// dims (in `dn`'s order), then lhs free dims, then rhs free dims (each in operand
/// order). Accumulates in `f32`.
///
/// # Panics
/// If the dimension numbers are out of range, repeated or pair dims of different sizes,
/// if a slice length does not match its dims, or for ragged-dot dimension numbers.
pub fn dot_general_f32(
    lhs: &[f32],
    lhs_dims: &[usize],
    rhs: &[f32],
    rhs_dims: &[usize],
    dn: &DotDims,
    out: &mut [f32],
) {
    dot_general(lhs, lhs_dims, rhs, rhs_dims, dn, out)
}

/// [`dot_general_f32`] on `f64` arrays.
pub fn dot_general_f64(
    lhs: &[f64],
    lhs_dims: &[usize],
    rhs: &[f64],
    rhs_dims: &[usize],
    dn: &DotDims,
    out: &mut [f64],
) {
    dot_general(lhs, lhs_dims, rhs, rhs_dims, dn, out)
}

#[cfg(test)]
/// The result dims of `dot(lhs, rhs)`: batch, lhs free, rhs free.
///
/// # Panics
/// As [`dot_general_f32`] for bad dimension numbers.
pub fn dot_output_dims(lhs_dims: &[usize], rhs_dims: &[usize], dn: &DotDims) -> Vec<usize> {
    Plan::new(lhs_dims, rhs_dims, dn).out_dims
}

/// The dims of a dot, grouped.
struct Plan {
    lhs_batch: Vec<usize>,
    rhs_batch: Vec<usize>,
    lhs_contract: Vec<usize>,
    rhs_contract: Vec<usize>,
    lhs_free: Vec<usize>,
    rhs_free: Vec<usize>,
    out_dims: Vec<usize>,
}

fn dim_list(ds: &[i64], rank: usize, what: &str) -> Vec<usize> {
    ds.iter()
        .map(|&d| {
            assert!(
                d >= 0 && (d as usize) < rank,
                "dot: {what} dimension {d} is out of range for rank {rank}"
            );
            d as usize
        })
        .collect()
}

impl Plan {
    fn new(lhs_dims: &[usize], rhs_dims: &[usize], dn: &DotDims) -> Plan {
        assert!(
            dn.lhs_ragged.is_empty() && dn.rhs_group.is_empty(),
            "dot: ragged-dot is not supported by the dot kernel"
        );
        let (lr, rr) = (lhs_dims.len(), rhs_dims.len());
        let lhs_batch = dim_list(&dn.lhs_batch, lr, "lhs batch");
        let rhs_batch = dim_list(&dn.rhs_batch, rr, "rhs batch");
        let lhs_contract = dim_list(&dn.lhs_contracting, lr, "lhs contracting");
        let rhs_contract = dim_list(&dn.rhs_contracting, rr, "rhs contracting");
        let free = |rank: usize, batch: &[usize], contract: &[usize], what: &str| -> Vec<usize> {
            let mut seen = vec![false; rank];
            for &d in batch.iter().chain(contract) {
                assert!(!seen[d], "dot: {what} dimension {d} is used twice");
                seen[d] = true;
            }
            (0..rank).filter(|&d| !seen[d]).collect()
        };
        let lhs_free = free(lr, &lhs_batch, &lhs_contract, "lhs");
        let rhs_free = free(rr, &rhs_batch, &rhs_contract, "rhs");
        let pairs = |l: &[usize], r: &[usize], what: &str| {
            assert!(
                l.len() == r.len(),
                "dot: {} lhs but {} rhs {what} dimensions",
                l.len(),
                r.len()
            );
            for (&a, &b) in l.iter().zip(r) {
                assert!(
                    lhs_dims[a] == rhs_dims[b],
                    "dot: {what} dimensions lhs {a} (size {}) and rhs {b} (size {}) differ",
                    lhs_dims[a],
                    rhs_dims[b]
                );
            }
        };
        pairs(&lhs_batch, &rhs_batch, "batch");
        pairs(&lhs_contract, &rhs_contract, "contracting");
        let mut out_dims: Vec<usize> = lhs_batch.iter().map(|&d| lhs_dims[d]).collect();
        out_dims.extend(lhs_free.iter().map(|&d| lhs_dims[d]));
        out_dims.extend(rhs_free.iter().map(|&d| rhs_dims[d]));
        Plan { lhs_batch, rhs_batch, lhs_contract, rhs_contract, lhs_free, rhs_free, out_dims }
    }
}

/// How a group of dims (outermost first) maps to memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Group {
    /// At most one element: any stride will do.
    Trivial,
    /// One stride walks the whole group.
    Stride(usize),
    /// The dims are interleaved with others: needs a copy.
    Scattered,
}

fn group(dims: &[usize], sizes: &[usize], strides: &[usize]) -> Group {
    let live: Vec<usize> = dims.iter().copied().filter(|&d| sizes[d] != 1).collect();
    let Some(&last) = live.last() else { return Group::Trivial };
    if live.windows(2).all(|w| strides[w[0]] == strides[w[1]] * sizes[w[1]]) {
        Group::Stride(strides[last])
    } else {
        Group::Scattered
    }
}

/// Strides for a `rows × cols` view whose trivial groups may take any value: the ones
/// a row-major matrix would have, so the GEMM sees a familiar layout.
fn view_strides(rows: Group, cols: Group, ncols: usize, nrows: usize) -> Option<(usize, usize)> {
    match (rows, cols) {
        (Group::Stride(r), Group::Stride(c)) => Some((r, c)),
        (Group::Trivial, Group::Stride(c)) => Some((c * ncols, c)),
        (Group::Stride(r), Group::Trivial) => Some((r, if r == 1 { nrows } else { 1 })),
        (Group::Trivial, Group::Trivial) => Some((ncols, 1)),
        _ => None,
    }
}

/// One operand as `[B, rows, cols]`: its data (borrowed, or a canonical copy), one offset
/// per batch element, and the row/column strides.
struct Operand<'a, T: Clone> {
    data: Cow<'a, [T]>,
    offsets: Vec<usize>,
    rs: usize,
    cs: usize,
}

/// Views `data` (dims `sizes`) as `[batch..., row dims..., col dims...]`, copying only
/// when a row or column group is scattered.
fn operand<'a, T: Float>(
    data: &'a [T],
    sizes: &[usize],
    batch: &[usize],
    rows: &[usize],
    cols: &[usize],
) -> Operand<'a, T> {
    let st = row_major_strides(sizes);
    let extent = |ds: &[usize]| -> usize { ds.iter().map(|&d| sizes[d]).product() };
    let (nb, nr, nc) = (extent(batch), extent(rows), extent(cols));
    if let Some((rs, cs)) = view_strides(group(rows, sizes, &st), group(cols, sizes, &st), nc, nr) {
        return Operand {
            data: Cow::Borrowed(data),
            offsets: batch_offsets(batch, sizes, &st),
            rs,
            cs,
        };
    }
    let order: Vec<usize> = batch.iter().chain(rows).chain(cols).copied().collect();
    let osizes: Vec<usize> = order.iter().map(|&d| sizes[d]).collect();
    let ostrides: Vec<isize> = order.iter().map(|&d| st[d] as isize).collect();
    let copy = gather(data, &osizes, &ostrides, 0);
    Operand {
        data: Cow::Owned(copy),
        offsets: (0..nb).map(|b| b * nr * nc).collect(),
        rs: nc,
        cs: 1,
    }
}

/// The offset of each batch element (row-major over `batch`, in that order).
fn batch_offsets(batch: &[usize], sizes: &[usize], strides: &[usize]) -> Vec<usize> {
    let mut offs = vec![0usize];
    for &d in batch {
        offs = offs.iter().flat_map(|&o| (0..sizes[d]).map(move |i| o + i * strides[d])).collect();
    }
    offs
}

fn dot_general<T: Float>(
    lhs: &[T],
    lhs_dims: &[usize],
    rhs: &[T],
    rhs_dims: &[usize],
    dn: &DotDims,
    out: &mut [T],
) {
    if let Some(f) = Fast::new(lhs_dims, rhs_dims, dn) {
        let count = |dims: &[usize]| -> usize { dims.iter().product() };
        assert!(
            lhs.len() == count(lhs_dims) && rhs.len() == count(rhs_dims),
            "dot: operands of {} and {} elements for dims {lhs_dims:?} and {rhs_dims:?}",
            lhs.len(),
            rhs.len()
        );
        assert!(
            out.len() == f.batch * f.s.m * f.s.n,
            "dot: out has {} elements for a [{}, {}, {}] result",
            out.len(),
            f.batch,
            f.s.m,
            f.s.n
        );
        if out.is_empty() {
            return;
        }
        if f.s.k == 0 {
            out.fill(T::ZERO);
            return;
        }
        let (l, r) = (
            Batched { data: lhs, offsets: Offsets::Step(f.l.0), rs: f.l.1, cs: f.l.2 },
            Batched { data: rhs, offsets: Offsets::Step(f.r.0), rs: f.r.1, cs: f.r.2 },
        );
        batched_gemm(f.s, f.batch, &l, &r, out);
        return;
    }
    let p = Plan::new(lhs_dims, rhs_dims, dn);
    let count = |dims: &[usize]| -> usize { dims.iter().product() };
    assert!(
        lhs.len() == count(lhs_dims),
        "dot: lhs has {} elements for dims {lhs_dims:?}",
        lhs.len()
    );
    assert!(
        rhs.len() == count(rhs_dims),
        "dot: rhs has {} elements for dims {rhs_dims:?}",
        rhs.len()
    );
    assert!(
        out.len() == count(&p.out_dims),
        "dot: out has {} elements for result dims {:?}",
        out.len(),
        p.out_dims
    );
    if out.is_empty() {
        return;
    }
    let extent =
        |sizes: &[usize], ds: &[usize]| -> usize { ds.iter().map(|&d| sizes[d]).product() };
    let (m, k, n) = (
        extent(lhs_dims, &p.lhs_free),
        extent(lhs_dims, &p.lhs_contract),
        extent(rhs_dims, &p.rhs_free),
    );
    if k == 0 {
        out.fill(T::ZERO);
        return;
    }
    let l = operand(lhs, lhs_dims, &p.lhs_batch, &p.lhs_free, &p.lhs_contract);
    let r = operand(rhs, rhs_dims, &p.rhs_batch, &p.rhs_contract, &p.rhs_free);
    let batch = l.offsets.len();
    let lb = Batched { data: &l.data, offsets: Offsets::List(&l.offsets), rs: l.rs, cs: l.cs };
    let rb = Batched { data: &r.data, offsets: Offsets::List(&r.offsets), rs: r.rs, cs: r.cs };
    batched_gemm(Shape { m, n, k }, batch, &lb, &rb, out);
}

/// The shape of each of the GEMMs [`dot_general_f32`] runs for these dims (the same
/// `m`, `n`, `k` for every batch element), as it derives them.
///
/// # Panics
/// As [`dot_general_f32`], for dimension numbers that do not fit the dims.
pub fn gemm_shape(lhs_dims: &[usize], rhs_dims: &[usize], dn: &DotDims) -> Shape {
    if let Some(f) = Fast::new(lhs_dims, rhs_dims, dn) {
        return f.s;
    }
    let p = Plan::new(lhs_dims, rhs_dims, dn);
    let extent =
        |sizes: &[usize], ds: &[usize]| -> usize { ds.iter().map(|&d| sizes[d]).product() };
    Shape {
        m: extent(lhs_dims, &p.lhs_free),
        n: extent(rhs_dims, &p.rhs_free),
        k: extent(lhs_dims, &p.lhs_contract),
    }
}

/// The common dots, set up without allocating: `[B?, M, K]`- or `[B?, K, M]`-shaped lhs
/// with `[B?, K, N]`- or `[B?, N, K]`-shaped rhs, the batch dim (if any) leading both.
/// Per-call overhead matters for the many small dots of a training step.
struct Fast {
    batch: usize,
    s: Shape,
    /// Batch, row and column strides of lhs and rhs.
    l: (usize, usize, usize),
    r: (usize, usize, usize),
}

impl Fast {
    fn new(ld: &[usize], rd: &[usize], dn: &DotDims) -> Option<Fast> {
        let nb = dn.lhs_batch.len();
        if nb > 1
            || dn.lhs_batch != dn.rhs_batch
            || dn.lhs_batch.iter().any(|&d| d != 0)
            || !dn.lhs_ragged.is_empty()
            || !dn.rhs_group.is_empty()
        {
            return None;
        }
        if ld.len() != nb + 2
            || rd.len() != nb + 2
            || dn.lhs_contracting.len() != 1
            || dn.rhs_contracting.len() != 1
        {
            return None;
        }
        let (lc, rc) = (dn.lhs_contracting[0], dn.rhs_contracting[0]);
        let (nb64, last) = (nb as i64, nb as i64 + 1);
        if !(nb64..=last).contains(&lc)
            || !(nb64..=last).contains(&rc)
            || ld[lc as usize] != rd[rc as usize]
            || (nb == 1 && ld[0] != rd[0])
        {
            return None;
        }
        let batch = if nb == 1 { ld[0] } else { 1 };
        let (m, k, l) = if lc == last {
            (ld[nb], ld[nb + 1], (ld[nb] * ld[nb + 1], ld[nb + 1], 1))
        } else {
            (ld[nb + 1], ld[nb], (ld[nb] * ld[nb + 1], 1, ld[nb + 1]))
        };
        let (n, r) = if rc == nb64 {
            (rd[nb + 1], (rd[nb] * rd[nb + 1], rd[nb + 1], 1))
        } else {
            (rd[nb], (rd[nb] * rd[nb + 1], 1, rd[nb + 1]))
        };
        Some(Fast { batch, s: Shape { m, n, k }, l, r })
    }
}

/// A dot as batched GEMMs over its operands in place: the product's shape, each batch
/// element's offset in the lhs (`[M, K]` views) and rhs (`[K, N]` views), and the row and
/// column strides of each; the result is `[B, M, N]` row-major. `None` when an operand
/// would first need a canonical copy (a dim group interleaved in memory) or for ragged
/// dots.
pub struct GemmViews {
    pub s: Shape,
    pub lhs_offsets: Vec<usize>,
    pub rhs_offsets: Vec<usize>,
    pub l: (usize, usize),
    pub r: (usize, usize),
}

pub fn gemm_views(ld: &[usize], rd: &[usize], dn: &DotDims) -> Option<GemmViews> {
    if let Some(f) = Fast::new(ld, rd, dn) {
        return Some(GemmViews {
            s: f.s,
            lhs_offsets: (0..f.batch).map(|b| b * f.l.0).collect(),
            rhs_offsets: (0..f.batch).map(|b| b * f.r.0).collect(),
            l: (f.l.1, f.l.2),
            r: (f.r.1, f.r.2),
        });
    }
    if !dn.lhs_ragged.is_empty() || !dn.rhs_group.is_empty() {
        return None;
    }
    let p = Plan::new(ld, rd, dn);
    let view = |sizes: &[usize], batch: &[usize], rows: &[usize], cols: &[usize]| {
        let st = row_major_strides(sizes);
        let extent = |ds: &[usize]| -> usize { ds.iter().map(|&d| sizes[d]).product() };
        let (rs, cs) = view_strides(
            group(rows, sizes, &st),
            group(cols, sizes, &st),
            extent(cols),
            extent(rows),
        )?;
        Some((batch_offsets(batch, sizes, &st), rs, cs, extent(rows), extent(cols)))
    };
    let (lo, lrs, lcs, m, k) = view(ld, &p.lhs_batch, &p.lhs_free, &p.lhs_contract)?;
    let (ro, rrs, rcs, _, n) = view(rd, &p.rhs_batch, &p.rhs_contract, &p.rhs_free)?;
    Some(GemmViews {
        s: Shape { m, n, k },
        lhs_offsets: lo,
        rhs_offsets: ro,
        l: (lrs, lcs),
        r: (rrs, rcs),
    })
}

/// Where each batch element of an operand starts.
enum Offsets<'a> {
    /// Element `b` at `b · step`.
    Step(usize),
    List(&'a [usize]),
}

/// One operand of a batched GEMM: batch element `b` is the matrix at `offsets(b)` with
/// strides `rs`, `cs`.
struct Batched<'a, T> {
    data: &'a [T],
    offsets: Offsets<'a>,
    rs: usize,
    cs: usize,
}

impl<T> Batched<'_, T> {
    fn view(&self, b: usize) -> Strided {
        let off = match self.offsets {
            Offsets::Step(step) => b * step,
            Offsets::List(offs) => offs[b],
        };
        Strided { off, rs: self.rs, cs: self.cs }
    }
}

/// `out[b] = lhs[b] · rhs[b]` for each of `batch` elements, `out` being `[batch, m, n]`
/// row-major. Spreads batch elements over the rayon pool when there are enough of
/// them, else lets the library split each product.
fn batched_gemm<T: Float>(
    s: Shape,
    batch: usize,
    lhs: &Batched<'_, T>,
    rhs: &Batched<'_, T>,
    out: &mut [T],
) {
    let mn = s.m * s.n;
    debug_assert_eq!(out.len(), batch * mn);
    let threads = rayon::current_num_threads();
    let g = |b: usize, threads: usize| Gemm {
        s,
        a: lhs.data,
        al: lhs.view(b),
        b: rhs.data,
        bl: rhs.view(b),
        accumulate: false,
        threads,
    };
    let total = s.mnk().saturating_mul(batch);
    let parallel = threads > 1 && batch > 1 && total >= gemm::TASKS_MNK;
    // Batch elements as tasks: one thread each when they fill the pool evenly, and when
    // there are fewer of them than threads, each split over its share of the pool (8
    // elements on 16 threads: two blocks each, all at once, rather than one element after
    // another over all 16). The bits do not depend on the split (`gemm::DEPTH`).
    let per_element = if batch >= 2 * threads || batch.is_multiple_of(threads) {
        Some(1)
    } else if batch < threads {
        Some(threads.div_ceil(batch))
    } else {
        None
    };
    if let (true, Some(per)) = (parallel, per_element) {
        out.par_chunks_mut(mn)
            .enumerate()
            .for_each(|(b, o)| g(b, per).run(o, Strided::row_major(0, s.n)));
    } else {
        let o = OutPtr::new(out);
        for b in 0..batch {
            // SAFETY: batch element `b` writes only its own `m × n` block of `out`,
            // which is borrowed mutably here.
            unsafe { g(b, threads).run_into(o, Strided::row_major(b * mn, s.n)) };
        }
    }
}
