//! The one strided GEMM both `dot` and `convolution` end in: `C = A·B` (or `C += A·B`)
//! on matrices given by a base offset and element strides, dispatched to a simple loop
//! for tiny products and to the `gemm` crate (runtime AVX2/AVX-512 kernels, rayon) for
//! the rest.

use super::Float;

/// Up to this many multiply-adds (`m·n·k`) the plain loop beats the library call, whose
/// fixed cost (dispatch, packing setup) is ~0.2 µs: at 4³ the loop takes 0.08 µs and the
/// library 0.23 µs, at 8³ both ~0.25 µs, from 12³ on the library wins (0.3 vs 0.6 µs).
pub const SMALL_MNK: usize = 8 * 8 * 8;

/// From this many multiply-adds on, one GEMM is split over the rayon pool, a block of
/// columns or rows per thread ([`Gemm::split_into`]).
/// Measured on the 2-core AVX-512 host (GFLOP/s, 1 vs 2 threads): quiet, 128x512x128
/// went 110 to 194 and 256^3 112 to 202; with the other core partly busy (the usual case
/// on a shared builder) the split loses up to 160^3 (4M) and wins from 192^3 (7M):
/// 128^3 103 vs 77, 160^3 101 vs 88, 192^3 105 vs 123, 224^3 108 vs 163 (so 6M, until
/// narrow products were measured). Narrow products split well even when small, as one
/// block of rows per thread: the bench MLP's `128x1024·1024x10` 115 to 75-94 µs and
/// `(128x1024)ᵀ·128x10` 90-112 to 34 µs with 1M instead of 6M, its SGD step 2109-2145
/// to 1981-2055 µs and its Adam step 2541-2629 to 2424-2483 µs; the CNN, transformer
/// and bf16 MLP steps and the corpus-size MLP-Adam (29 µs) within noise (release,
/// `hloc run --repeat 100`, alternating).
pub(crate) const PARALLEL_MNK: usize = 1 << 20;

/// From this many multiply-adds on, independent products (dot batch elements,
/// convolution row chunks) are spread over the rayon pool, each single-threaded: that
/// costs one task hand-off (a few µs), not the library's split of packed panels.
pub const TASKS_MNK: usize = 1 << 20;

/// Where a matrix operand lives in its buffer: element `(i, j)` is `data[off + i·rs + j·cs]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Strided {
    pub off: usize,
    pub rs: usize,
    pub cs: usize,
}

impl Strided {
    /// A row-major `rows × cols` matrix at `off`.
    pub fn row_major(off: usize, cols: usize) -> Strided {
        Strided { off, rs: cols, cs: 1 }
    }

    /// One past the largest index a `rows × cols` view touches (`off` when empty).
    pub fn end(&self, rows: usize, cols: usize) -> usize {
        if rows == 0 || cols == 0 {
            self.off
        } else {
            self.off + (rows - 1) * self.rs + (cols - 1) * self.cs + 1
        }
    }
}

/// One `m×k · k×n` product.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

impl Shape {
    pub fn mnk(&self) -> usize {
        self.m.saturating_mul(self.n).saturating_mul(self.k)
    }
}

/// A raw output pointer that tasks writing disjoint elements share across threads.
#[derive(Clone, Copy)]
pub(crate) struct OutPtr<T> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: an `OutPtr` is only dereferenced through `Gemm::run_into`, whose callers guarantee
// that concurrent tasks write disjoint element sets (documented at each use).
unsafe impl<T: Send> Send for OutPtr<T> {}
unsafe impl<T: Send> Sync for OutPtr<T> {}

impl<T> OutPtr<T> {
    pub fn new(out: &mut [T]) -> OutPtr<T> {
        OutPtr { ptr: out.as_mut_ptr(), len: out.len() }
    }
}

/// `C = A·B` (`accumulate`: `C += A·B`) for `s`, `A` and `B` read from `a` and `b`
/// through their views. `threads > 1` lets one large product split over
/// the current rayon pool.
#[derive(Clone, Copy)]
pub(crate) struct Gemm<'a, T> {
    pub s: Shape,
    pub a: &'a [T],
    pub al: Strided,
    pub b: &'a [T],
    pub bl: Strided,
    pub accumulate: bool,
    pub threads: usize,
}

impl<T: Float> Gemm<'_, T> {
    /// Runs the product into `c` (view `cl`), bounds checked against the slices.
    pub fn run(&self, c: &mut [T], cl: Strided) {
        let out = OutPtr::new(c);
        // SAFETY: `c` is borrowed mutably for the whole call, so nothing else touches it.
        unsafe { self.run_into(out, cl) }
    }

    /// [`Gemm::run`] writing through a shared output pointer.
    ///
    /// # Safety
    /// The elements of `c` this product writes (`cl` over `m × n`, distinct for distinct
    /// `(i, j)`) must not be read or written by anyone else during the call.
    pub unsafe fn run_into(&self, c: OutPtr<T>, cl: Strided) {
        let Shape { m, n, k } = self.s;
        let (al, bl, accumulate) = (self.al, self.bl, self.accumulate);
        if m == 0 || n == 0 {
            return;
        }
        assert!(
            cl.end(m, n) <= c.len,
            "gemm: output view {cl:?} of {m}x{n} overruns {} elements",
            c.len
        );
        if k == 0 {
            if !accumulate {
                for i in 0..m {
                    for j in 0..n {
                        // SAFETY: in bounds (checked above), exclusive by the caller's contract.
                        unsafe { *c.ptr.add(cl.off + i * cl.rs + j * cl.cs) = T::ZERO };
                    }
                }
            }
            return;
        }
        assert!(
            al.end(m, k) <= self.a.len(),
            "gemm: lhs view {al:?} of {m}x{k} overruns {} elements",
            self.a.len()
        );
        assert!(
            bl.end(k, n) <= self.b.len(),
            "gemm: rhs view {bl:?} of {k}x{n} overruns {} elements",
            self.b.len()
        );
        // SAFETY: `cl.off` is in bounds (checked above).
        let raw = Raw {
            s: self.s,
            a: self.a[al.off..].as_ptr(),
            al,
            b: self.b[bl.off..].as_ptr(),
            bl,
            c: unsafe { c.ptr.add(cl.off) },
            cl,
            accumulate,
        };
        if is_small(self.s) {
            // SAFETY: all three views are in bounds (checked above), `c`'s exclusive.
            unsafe { small_gemm(raw) };
            return;
        }
        let mut par = gemm::Parallelism::None;
        if self.threads > 1 && self.s.mnk() >= PARALLEL_MNK {
            if !crate_split() {
                let least = least_block(cl);
                let (pr, pc) = grid(m, n, self.threads * blocks_per_thread(), least);
                let slices = k.div_ceil(DEPTH);
                if slices > pr * pc && m.saturating_mul(n).saturating_mul(slices) <= PARTIALS_MAX {
                    // SAFETY: as this call's.
                    unsafe { split_depth(raw) };
                } else {
                    // SAFETY: as this call's (the parts write disjoint blocks of `c`).
                    unsafe { self.split_into(c, cl, (pr, pc), least) };
                }
                return;
            }
            par = gemm::Parallelism::Rayon(self.threads);
        }
        // The contraction in fixed slices of `DEPTH` ([`DEPTH`]), each added to the result
        // of the ones before.
        for p0 in (0..k).step_by(DEPTH) {
            // SAFETY: the views are in bounds (checked above), `c`'s exclusive (contract).
            unsafe { raw.slice(p0, raw.c, cl, accumulate || p0 > 0, par) }
        }
    }
}

impl<T: Float> Raw<T> {
    /// One slice of the contraction, `p0..p0 + DEPTH` (or to its end), by one `gemm` crate
    /// call into `dst` laid out as `dl` (its offset already in `dst`): `dst = lhs·rhs` over
    /// the slice, or with `read_dst` `dst + lhs·rhs`, the slice's sum formed in the crate's
    /// registers and added once.
    ///
    /// # Safety
    /// The views of `self` are in bounds; `dst` holds an `m × n` view `dl` no one else
    /// touches during the call.
    unsafe fn slice(
        &self,
        p0: usize,
        dst: *mut T,
        dl: Strided,
        read_dst: bool,
        par: gemm::Parallelism,
    ) {
        let Shape { m, n, k } = self.s;
        let (al, bl) = (self.al, self.bl);
        // SAFETY: the caller's; a slice along `k` stays inside the views. `gemm::gemm`
        // computes dst = alpha·dst + beta·lhs·rhs, reading dst only if asked.
        unsafe {
            gemm::gemm(
                m,
                n,
                DEPTH.min(k - p0),
                dst,
                dl.cs as isize,
                dl.rs as isize,
                read_dst,
                self.a.add(p0 * al.cs),
                al.cs as isize,
                al.rs as isize,
                self.b.add(p0 * bl.rs),
                bl.cs as isize,
                bl.rs as isize,
                T::ONE,
                T::ONE,
                false,
                false,
                false,
                par,
            )
        }
    }
}

/// Most elements of partial products [`split_depth`] keeps (16 MiB of f32).
const PARTIALS_MAX: usize = 1 << 22;

/// A product whose output is too small to split into a block per thread and whose
/// contraction is long (weight gradients: a few rows and columns, `k` the batch times the
/// positions), split along the contraction instead: each [`DEPTH`] slice's product is
/// formed on its own, all of them in parallel, then each element adds them up in slice
/// order. That is the sum [`Gemm::run_into`] forms one slice after another, so the bits
/// are the same (`tests::gemm_depth_split_gives_the_one_thread_bits`). Measured: see the
/// README's threads section.
///
/// # Safety
/// As [`Gemm::run_into`]'s, for `r` made from its checked views.
unsafe fn split_depth<T: Float>(r: Raw<T>) {
    use rayon::prelude::*;
    let Shape { m, n, k } = r.s;
    let (mn, slices) = (m * n, k.div_ceil(DEPTH));
    // Laid out as the output, so that the crate orients each slice's product the same.
    let pl =
        if r.cl.cs < r.cl.rs { Strided::row_major(0, n) } else { Strided { off: 0, rs: 1, cs: m } };
    let mut partials = vec![T::ZERO; slices * mn];
    let shared = Shared(r);
    partials.par_chunks_mut(mn).enumerate().for_each(|(s, p)| {
        let r = &shared; // the whole wrapper, not its raw field
        // SAFETY: the caller's views; `p` is this task's own `m × n` buffer.
        unsafe { r.0.slice(s * DEPTH, p.as_mut_ptr(), pl, false, gemm::Parallelism::None) }
    });
    let sum_row = |i: usize| {
        let r = &shared; // the whole wrapper, not its raw field
        let r = &r.0;
        for j in 0..n {
            let at = i * pl.rs + j * pl.cs;
            // SAFETY: `(i, j)` is inside the output view, and row `i` is this call's alone.
            let c = unsafe { r.c.add(i * r.cl.rs + j * r.cl.cs) };
            let mut acc = if r.accumulate { (unsafe { *c }) + partials[at] } else { partials[at] };
            for s in 1..slices {
                acc = acc + partials[s * mn + at];
            }
            unsafe { *c = acc };
        }
    };
    if slices * mn >= 1 << 16 {
        (0..m).into_par_iter().for_each(sum_row);
    } else {
        (0..m).for_each(sum_row);
    }
}

/// [`Raw`] shared by the tasks of [`split_depth`], which read its operands and write
/// disjoint parts of its output.
struct Shared<T>(Raw<T>);
// SAFETY: see `Shared`: reads of the operands, writes of disjoint output elements.
unsafe impl<T: Send> Send for Shared<T> {}
unsafe impl<T: Sync> Sync for Shared<T> {}

/// The slice of the contraction one `gemm` crate call sums (longer contractions are
/// several calls, each adding to the last). The crate splits a contraction into depth
/// blocks itself, each added to the result: up to 512 deep for outputs of at most 64 x 64,
/// else 512 or more, balanced (`k = 768`: 384 + 384 against 512 + 256). The block sizes,
/// and so the rounding of every sum, would then depend on the output block a thread gets:
/// a 256 x 256 x 768 product split 4 x 4 on 16 threads differed in its last bits from
/// one thread's. Slices of 512 are single depth blocks on either path, so the sums are the
/// same whatever the split (`tests::gemm_bits_do_not_depend_on_the_grid`).
pub(crate) const DEPTH: usize = 512;

impl<T: Float> Gemm<'_, T> {
    /// The product as a grid of blocks, one per thread ([`grid`]), each a
    /// single-threaded GEMM, run as tasks of the current rayon pool. Every element is
    /// still one call's sum over the whole `k`, so the bits do not depend on the grid.
    ///
    /// Measured against letting the `gemm` crate split the product over the pool itself
    /// (release, 2-core host, `hloc run --repeat 100/200`, alternating, idle): the bench
    /// MLP-Adam step 3018/3133/3219 µs → 2888/2801/2913 µs (its transposed-rhs
    /// `128x512·(512x512)ᵀ` 574 → 367 µs, the `128x784·784x512` forward 510 → 420 µs), the
    /// 512³ `dot_matmul` 5596/5804 → 5475/5747 µs; the CNN and transformer steps within
    /// noise. Two or four blocks per thread measured the same as one. On two threads the
    /// grid is one block of columns (or rows) per thread, as it was before it was a grid;
    /// on 16 (a 16-core Xeon) column blocks alone packed the whole lhs once per thread,
    /// and the bench transformer step's dots ran only 4.4 times faster than on one.
    ///
    /// # Safety
    /// As [`Gemm::run_into`].
    unsafe fn split_into(
        &self,
        c: OutPtr<T>,
        cl: Strided,
        (pr, pc): (usize, usize),
        least: (usize, usize),
    ) {
        let Shape { m, n, .. } = self.s;
        let rows = m.div_ceil(pr).next_multiple_of(least.0).min(m);
        let cols = n.div_ceil(pc).next_multiple_of(least.1).min(n);
        let whole = *self;
        rayon::scope(|sc| {
            for r0 in (0..m).step_by(rows) {
                for c0 in (0..n).step_by(cols) {
                    let (r1, c1) = ((r0 + rows).min(m), (c0 + cols).min(n));
                    let (mut part, mut pl) = (whole, cl);
                    part.threads = 1;
                    part.s.m = r1 - r0;
                    part.s.n = c1 - c0;
                    part.al.off += r0 * part.al.rs;
                    part.bl.off += c0 * part.bl.cs;
                    pl.off += r0 * cl.rs + c0 * cl.cs;
                    // SAFETY: the part's views lie inside the whole product's (checked by
                    // `run_into`); its block of `c` is its own (disjoint row and column
                    // ranges).
                    sc.spawn(move |_| unsafe { part.run_into(c, pl) });
                }
            }
        });
    }
}

/// Whether large products let the `gemm` crate split them over the pool itself (one
/// call: packed panels shared by the threads, one packing allocation) instead of the grid
/// of single-threaded calls: `HLOC_GEMM_SPLIT=crate` (`grid`, the default, otherwise).
/// For measuring on many cores. Read once per process. Measured on a 16-core Xeon (AMX,
/// JAX 0.11.2 beside, `hloc bench jit --bench-set --runs 3`, 16 threads, medians): the
/// grid was faster on every GEMM-heavy case: `dot_matmul` 1024³ 2022 against 2555 µs,
/// MLP-Adam 1349 against 2525, the transformer step 26972 against 29896 (its dots alone
/// 16.0 against 21.8 ms per step); the bits are the same either way.
fn crate_split() -> bool {
    static CRATE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CRATE.get_or_init(|| std::env::var("HLOC_GEMM_SPLIT").is_ok_and(|v| v == "crate"))
}

/// Blocks per thread of a split product's grid ([`grid`]): 1, or `HLOC_GEMM_BLOCKS` when it
/// is a positive integer (read once). A knob for measuring on many cores whether smaller
/// blocks, which threads that finish early take over from late ones, beat one block per
/// thread (`tools/device_threads.sh`); on two cores two and four measured the same as one
/// ([`Gemm::split_into`]). The bits do not depend on it (`gemm_bits_do_not_depend_on_the_grid`).
fn blocks_per_thread() -> usize {
    static BLOCKS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BLOCKS.get_or_init(|| {
        std::env::var("HLOC_GEMM_BLOCKS")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| (1..=64).contains(&n))
            .unwrap_or(1)
    })
}

/// Rows of the `gemm` crate's widest f32 microkernel (AVX-512: four vectors of 16 lanes;
/// AVX2's is 16 rows, a divisor). The crate runs it down the output's unit-stride
/// dimension (it transposes a row-major product, so there it runs along the columns).
/// A block narrower than this along that dimension runs narrower kernels: the bench
/// CNN's weight-gradient convolution `27 x 32` (k = 16384), split into two column blocks
/// of 16 on two threads, took 580 µs against 470 on one (`hloc run --repeat 300`, release,
/// this 2-core host), its 16-lane kernel doing the work of the 32-lane one twice.
pub(crate) const LANE_BLOCK: usize = 64;

/// The least `(rows, columns)` of a grid block for an output laid out as `cl`:
/// [`LANE_BLOCK`] along its unit-stride dimension (the columns of a row-major output, as
/// the crate decides: the smaller stride), 16 along the other.
pub(crate) fn least_block(cl: Strided) -> (usize, usize) {
    if cl.cs < cl.rs { (16, LANE_BLOCK) } else { (LANE_BLOCK, 16) }
}

/// The grid `(row blocks, column blocks)` an `m × n` product splits into over `threads`:
/// as many blocks as threads where blocks of at least `least` rows and columns allow
/// ([`least_block`]), and of those grids the one whose blocks pack the least (each block
/// packs its rows of the lhs and its columns of the rhs: `m / rows + n / columns`, times
/// `k`).
pub(crate) fn grid(m: usize, n: usize, threads: usize, least: (usize, usize)) -> (usize, usize) {
    let (max_r, max_c) = (m.div_ceil(least.0).max(1), n.div_ceil(least.1).max(1));
    let mut best = (1, 1);
    let mut best_key = (1, usize::MAX);
    for pr in 1..=threads.clamp(1, max_r) {
        let pc = (threads / pr).clamp(1, max_c);
        let key = (pr * pc, m.div_ceil(pr) + n.div_ceil(pc));
        if key.0 > best_key.0 || (key.0 == best_key.0 && key.1 < best_key.1) {
            best = (pr, pc);
            best_key = key;
        }
    }
    best
}

/// Whether a product of shape `s` runs on the plain loop ([`SMALL_MNK`] multiply-adds or
/// fewer) rather than the `gemm` crate.
pub fn is_small(s: Shape) -> bool {
    s.mnk() <= SMALL_MNK
}

/// Whether the small-product loop runs its AVX2 build: wherever the host has AVX2, the
/// floor of every instruction-set cap ([`crate::cpu`]).
pub fn small_gemm_has_avx2() -> bool {
    hlo_vmath::cpu::host() >= hlo_vmath::cpu::Level::Avx2
}

/// A product on raw pointers, each already at its view's offset.
#[derive(Clone, Copy)]
struct Raw<T> {
    s: Shape,
    a: *const T,
    al: Strided,
    b: *const T,
    bl: Strided,
    c: *mut T,
    cl: Strided,
    accumulate: bool,
}

/// The plain `i, p, j` loop (accumulating along `k` like the reference interpreter), with
/// an AVX2 build of the same loop picked at run time where the host has it.
///
/// # Safety
/// The three views must be in bounds of their pointers; `c` not aliased.
unsafe fn small_gemm<T: Float>(r: Raw<T>) {
    #[cfg(target_arch = "x86_64")]
    if small_gemm_has_avx2() {
        // SAFETY: the host has AVX2 (just detected); the views are the caller's.
        unsafe { small_gemm_avx2(r) };
        return;
    }
    unsafe { small_gemm_body(r) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn small_gemm_avx2<T: Float>(r: Raw<T>) {
    unsafe { small_gemm_body(r) }
}

#[inline(always)]
unsafe fn small_gemm_body<T: Float>(r: Raw<T>) {
    let Raw { s: Shape { m, n, k }, a, al, b, bl, c, cl, accumulate } = r;
    for i in 0..m {
        // SAFETY (whole body): every index is inside the views the caller vouched for.
        unsafe {
            let crow = c.add(i * cl.rs);
            if cl.cs == 1 && bl.cs == 1 {
                let row = std::slice::from_raw_parts_mut(crow, n);
                if !accumulate {
                    row.fill(T::ZERO);
                }
                for p in 0..k {
                    let x = *a.add(i * al.rs + p * al.cs);
                    let brow = std::slice::from_raw_parts(b.add(p * bl.rs), n);
                    for (o, &y) in row.iter_mut().zip(brow) {
                        *o = *o + x * y;
                    }
                }
            } else {
                for j in 0..n {
                    let o = crow.add(j * cl.cs);
                    let mut acc = if accumulate { *o } else { T::ZERO };
                    for p in 0..k {
                        acc = acc + *a.add(i * al.rs + p * al.cs) * *b.add(p * bl.rs + j * bl.cs);
                    }
                    *o = acc;
                }
            }
        }
    }
}
