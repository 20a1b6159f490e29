//! Library kernels: what XLA's CPU backend hands to a tuned library rather than to
//! generated code. `dot` (general dimension numbers) and `convolution` (full HLO
//! generality) on row-major `f32`/`f64` slices, both lowered to strided GEMMs run by the
//! `gemm` crate (see the workspace Cargo.toml for why that crate). Integer convolutions
//! run on wrapping `i64` slices, by the convolution's direct loop instead.
//!
//! Large products use every thread of the current rayon pool; small ones stay on the
//! calling thread. bf16/f16 callers widen to f32 before and round after, except bf16
//! GEMMs on a host with AMX, or with AVX512-BF16 where its `vdpbf16ps` pays
//! ([`bf16_gemm`]). Which instruction-set path each kernel takes
//! under the process's cap (`HLOC_ISA`) is [`cpu`]'s to say.

pub mod bf16_gemm;
pub mod conv;
pub mod cpu;
pub mod dot;
pub mod gemm;

pub use conv::convolution_f32;
#[cfg(test)]
pub use conv::{convolution_f32_direct, convolution_f64};
pub use dot::dot_general_f32;
#[cfg(test)]
pub use dot::dot_general_f64;

use gemm::Shape;
use std::fmt::Write as _;
use std::time::Instant;

/// The element types the kernels run on (`f32`, `f64`; wrapping `i64` for integer
/// convolutions, in their direct loop only).
pub trait Float:
    Copy
    + Send
    + Sync
    + PartialEq
    + std::fmt::Debug
    + 'static
    + std::ops::Add<Output = Self>
    + std::ops::Mul<Output = Self>
    + private::Sealed
{
    const ZERO: Self;
    const ONE: Self;
    /// Neither infinite nor NaN.
    fn is_finite(self) -> bool;
}

impl Float for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    fn is_finite(self) -> bool {
        f32::is_finite(self)
    }
}

impl Float for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    fn is_finite(self) -> bool {
        f64::is_finite(self)
    }
}

/// Wrap-around 64-bit integers, for integer convolutions: they run only through
/// [`conv`]'s direct loop, never the GEMM.
impl Float for std::num::Wrapping<i64> {
    const ZERO: Self = std::num::Wrapping(0);
    const ONE: Self = std::num::Wrapping(1);
    fn is_finite(self) -> bool {
        true
    }
}

mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for std::num::Wrapping<i64> {}
}

/// Row-major strides of `dims`.
pub(crate) fn row_major_strides(dims: &[usize]) -> Vec<usize> {
    let mut st = vec![1usize; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        st[d] = st[d + 1] * dims[d + 1];
    }
    st
}

/// A row-major array of dims `sizes` gathered from `src`: element `idx` is
/// `src[base + Σ idx[d]·strides[d]]` (negative strides read a dimension backwards).
///
/// Its rows (the last dimension) are copied over the current rayon pool from
/// [`PARALLEL_COPY`] elements on, in runs of at least that many: a copy changes no bit.
/// These copies (a convolution's weights and transposed input, a dot operand's layout)
/// had been serial: the bench CNN's two weight-gradient convolutions spent 470 of their
/// 2560 µs (one thread) in them, time that no number of threads shortened.
pub(crate) fn gather<T: Copy + Send + Sync>(
    src: &[T],
    sizes: &[usize],
    strides: &[isize],
    base: isize,
) -> Vec<T> {
    use rayon::prelude::*;
    let total: usize = sizes.iter().product();
    let mut out = Vec::with_capacity(total);
    if total == 0 {
        return out;
    }
    let Some((&inner, outer)) = sizes.split_last() else {
        out.push(src[base as usize]);
        return out;
    };
    let inner_stride = strides[sizes.len() - 1];
    // Rows `first..` into `cells` (whole rows): the first row's outer index decoded, the
    // next ones by counting (an odometer, last outer dimension fastest).
    let rows = |first: usize, cells: &mut [std::mem::MaybeUninit<T>]| {
        let mut idx = vec![0usize; outer.len()];
        let mut rest = first;
        for (d, &n) in outer.iter().enumerate().rev() {
            idx[d] = rest % n;
            rest /= n;
        }
        for dst in cells.chunks_mut(inner) {
            let start =
                base + idx.iter().zip(strides).map(|(&i, &s)| i as isize * s).sum::<isize>();
            if inner_stride == 1 {
                let from = &src[start as usize..start as usize + dst.len()];
                // SAFETY: `from` and `dst` have the same length, `T: Copy`, and they do
                // not overlap (`dst` is the output's own spare capacity).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        from.as_ptr(),
                        dst.as_mut_ptr().cast(),
                        from.len(),
                    )
                };
            } else {
                // The row's first and last elements bound every one between them.
                let last = start + (dst.len() as isize - 1) * inner_stride;
                assert!(start.min(last) >= 0 && (start.max(last) as usize) < src.len());
                for (j, o) in dst.iter_mut().enumerate() {
                    // SAFETY: between the row's first and last elements (checked above).
                    o.write(unsafe {
                        *src.get_unchecked((start + j as isize * inner_stride) as usize)
                    });
                }
            }
            for d in (0..outer.len()).rev() {
                idx[d] += 1;
                if idx[d] < outer[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    };
    let cells = &mut out.spare_capacity_mut()[..total];
    let rows_per = PARALLEL_COPY.div_ceil(inner).max(1);
    if total >= 2 * PARALLEL_COPY && rayon::current_num_threads() > 1 && total / inner > 1 {
        cells
            .par_chunks_mut(rows_per * inner)
            .enumerate()
            .for_each(|(c, chunk)| rows(c * rows_per, chunk));
    } else {
        rows(0, cells);
    }
    // SAFETY: every one of the `total` cells was written above (the chunks cover them).
    unsafe { out.set_len(total) };
    out
}

/// Elements from which [`gather`] copies over the pool, and the least each task copies
/// (a task hand-off costs some 5-25 µs here, a 64k-element copy about as much).
pub(crate) const PARALLEL_COPY: usize = 1 << 16;

/// One timed case of [`gemm_gflops_table`]: `batch` independent `[m,k]·[k,n]` products,
/// the rhs stored `[n, k]` when `rhs_transposed` (as `x·Wᵀ` dots are).
#[derive(Debug, Clone, Copy)]
pub struct BenchCase {
    /// The row label in the table.
    pub label: &'static str,
    /// Independent products.
    pub batch: usize,
    /// Rows of the lhs.
    pub m: usize,
    /// The contracted dimension.
    pub k: usize,
    /// Columns of the rhs.
    pub n: usize,
    /// Whether the rhs is stored `[n, k]`.
    pub rhs_transposed: bool,
}

const fn case(
    label: &'static str,
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    rhs_transposed: bool,
) -> BenchCase {
    BenchCase { label, batch, m, k, n, rhs_transposed }
}

/// The cases `gemm_gflops_table` times.
pub const BENCH_CASES: [BenchCase; 10] = [
    case("1024^3", 1, 1024, 1024, 1024, false),
    case("256^3", 1, 256, 256, 256, false),
    case("mlp 128x784x512", 1, 128, 784, 512, false),
    case("mlp 128x784x512, W^T", 1, 128, 784, 512, true),
    case("mlp 128x512x10", 1, 128, 512, 10, false),
    case("64^3", 1, 64, 64, 64, false),
    case("8x128x128", 1, 8, 128, 128, false),
    case("16^3", 1, 16, 16, 16, false),
    case("32 x 64^3 (batched)", 32, 64, 64, 64, false),
    case("64 x 8x16x16 (batched)", 64, 8, 16, 16, false),
];

/// GFLOP/s of `dot_general_f32` on `c`, best of five runs of about `seconds / 5`, on a
/// rayon pool of `threads` threads.
pub fn gemm_gflops(c: &BenchCase, threads: usize, seconds: f64) -> f64 {
    let BenchCase { batch, m, k, n, .. } = *c;
    let a: Vec<f32> = (0..batch * m * k).map(|i| (i % 17) as f32 * 0.125 - 1.0).collect();
    let b: Vec<f32> = (0..batch * k * n).map(|i| (i % 13) as f32 * 0.25 - 1.5).collect();
    let mut out = vec![0f32; batch * m * n];
    let (rc, rhs_dims) = if c.rhs_transposed { (2, [batch, n, k]) } else { (1, [batch, k, n]) };
    let dn = hlo_ir::op::DotDims {
        lhs_batch: vec![0],
        rhs_batch: vec![0],
        lhs_contracting: vec![2],
        rhs_contracting: vec![rc],
        ..Default::default()
    };
    best_of(threads, seconds, 2.0 * (batch * m * k * n) as f64, || {
        dot_general_f32(&a, &[batch, m, k], &b, &rhs_dims, &dn, &mut out)
    })
}

/// GFLOP/s of the bf16 GEMM ([`bf16_gemm`], on AMX or `vdpbf16ps`: [`bf16_gemm::engine`])
/// on a row-major `[m,k]·[k,n]` with a bf16 result, as [`gemm_gflops`]; `None` where bf16
/// dots are widened to f32 (no bf16 unit that pays, or the instruction-set cap, [`cpu`],
/// keeps them from it).
pub fn bf16_gflops(m: usize, k: usize, n: usize, threads: usize, seconds: f64) -> Option<f64> {
    use bf16_gemm::{Dst, Mat, Src, bf16_bits};
    if !bf16_gemm::available() {
        return None;
    }
    let a: Vec<u16> = (0..m * k).map(|i| bf16_bits((i % 17) as f32 * 0.125 - 1.0)).collect();
    let b: Vec<u16> = (0..k * n).map(|i| bf16_bits((i % 13) as f32 * 0.25 - 1.5)).collect();
    let mut out = vec![0u16; m * n];
    let offs = [0usize];
    let flops = 2.0 * (m * k * n) as f64;
    let out_ptr = out.as_mut_ptr() as usize;
    Some(best_of(threads, seconds, flops, || {
        let am = Mat { ptr: a.as_ptr() as *const u8, src: Src::Bf16, offsets: &offs, rs: k, cs: 1 };
        let bm = Mat { ptr: b.as_ptr() as *const u8, src: Src::Bf16, offsets: &offs, rs: n, cs: 1 };
        // SAFETY: a bf16 unit is available; the buffers hold the views' elements; `out` is
        // written by this call alone.
        unsafe {
            bf16_gemm::gemm(Shape { m, n, k }, am, bm, out_ptr as *mut u8, Dst::Bf16, threads > 1)
        };
    }))
}

/// GFLOP/s of `convolution_f32` for a 3x3, pad-1 `b01f_01io->b01f` convolution of a
/// `[batch, hw, hw, cin]` input to `cout` features (ResNet-style), as [`gemm_gflops`].
pub fn conv_gflops(
    batch: usize,
    hw: usize,
    cin: usize,
    cout: usize,
    threads: usize,
    seconds: f64,
) -> f64 {
    use hlo_ir::op::{Convolution, Window, WindowDim};
    let dims = conv::nhwc_dims();
    let wd = WindowDim { size: 3, pad_lo: 1, pad_hi: 1, ..Default::default() };
    let conv = Convolution {
        window: Window { dims: vec![wd; 2] },
        dims,
        feature_group_count: 1,
        batch_group_count: 1,
        precision: vec![],
        kind: None,
    };
    let (ld, rd, od) = ([batch, hw, hw, cin], [3, 3, cin, cout], [batch, hw, hw, cout]);
    let x: Vec<f32> =
        (0..ld.iter().product()).map(|i: usize| (i % 17) as f32 * 0.125 - 1.0).collect();
    let w: Vec<f32> =
        (0..rd.iter().product()).map(|i: usize| (i % 13) as f32 * 0.25 - 1.5).collect();
    let mut out = vec![0f32; od.iter().product()];
    let flops = 2.0 * (batch * hw * hw * 9 * cin * cout) as f64;
    best_of(threads, seconds, flops, || {
        convolution_f32(&x, &ld, &w, &rd, &conv, &mut out, &od);
    })
}

/// `flops / best time` of `run` in GFLOP/s: best of five batches of about `seconds / 5`
/// each, on a rayon pool of `threads` threads.
fn best_of(threads: usize, seconds: f64, flops: f64, mut run: impl FnMut() + Send) -> f64 {
    let pool =
        rayon::ThreadPoolBuilder::new().num_threads(threads.max(1)).build().expect("a rayon pool");
    pool.install(|| {
        let t = Instant::now();
        run();
        let once = t.elapsed().as_secs_f64().max(1e-9);
        let reps = ((seconds / 5.0 / once) as usize).clamp(1, 1 << 20);
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let t = Instant::now();
            for _ in 0..reps {
                run();
            }
            best = best.min(t.elapsed().as_secs_f64() / reps as f64);
        }
        flops / best / 1e9
    })
}

/// the benchmark's GEMM cases and two convolutions in GFLOP/s on 1 and 2 threads (about four
/// seconds), for the CLI to print. Best-of timing; the 2-thread column needs a quiet
/// second core.
pub fn gemm_gflops_table() -> String {
    let mut s = format!(
        "{:<26} {:>9} {:>10}   (GFLOP/s, f32)\n",
        "dot_general (m x k x n)", "1 thread", "2 threads"
    );
    for c in &BENCH_CASES {
        let one = gemm_gflops(c, 1, 0.15);
        let two = gemm_gflops(c, 2, 0.15);
        let _ = writeln!(s, "{:<26} {one:>9.1} {two:>10.1}", c.label);
    }
    for (label, m, k, n) in
        [("bf16 mlp 128x784x1024", 128, 784, 1024), ("bf16 1024^3", 1024, 1024, 1024)]
    {
        match (bf16_gflops(m, k, n, 1, 0.15), bf16_gflops(m, k, n, 2, 0.15)) {
            (Some(one), Some(two)) => {
                let unit = crate::cpu::bf16_dot();
                let _ = writeln!(s, "{label:<26} {one:>9.1} {two:>10.1}   ({unit})");
            }
            _ => {
                let _ = writeln!(
                    s,
                    "{label:<26} {:>9} {:>10}   (no bf16 unit: widened to f32)",
                    "-", "-"
                );
            }
        }
    }
    for (label, b, hw, cin, cout) in
        [("conv 3x3 8x56x56x64->64", 8, 56, 64, 64), ("conv 3x3 4x16x16x3->8", 4, 16, 3, 8)]
    {
        let one = conv_gflops(b, hw, cin, cout, 1, 0.3);
        let two = conv_gflops(b, hw, cin, cout, 2, 0.3);
        let _ = writeln!(s, "{label:<26} {one:>9.1} {two:>10.1}");
    }
    s
}

#[cfg(test)]
mod tests;
