//! bf16 GEMM on AMX (Intel Advanced Matrix Extensions): `tdpbf16ps` multiplies a 16×32
//! bf16 tile by a 32×16 one into a 16×16 f32 tile, 8192 multiply-adds per instruction;
//! or, on hosts without AMX where it pays, on AVX512-BF16's `vdpbf16ps` (`dp`).
//! XLA's CPU backend hands bf16 dots to a library; without these kernels a bf16 dot here
//! is widened to f32 first and takes longer than the f32 dot of the same shape.
//!
//! Measured on a 2-core Xeon with AMX and AVX512-BF16 (release, one thread):
//! `tdpbf16ps` 5.1 ns each, 3.2 TFLOP/s; an f32 `vfmadd` on zmm 0.18 ns (2 per cycle, 180
//! GFLOP/s); AVX512-BF16's `vdpbf16ps` 0.54 ns for twice an FMA's work, i.e. *slower* than
//! f32 FMAs per multiply-add there (a first version of this kernel on it took 1450 µs for
//! the bench MLP's 128×784·784×1024 bf16 dot, against 1160-1420 µs widened to f32 and 760
//! µs for the f32 dot). On an AMD EPYC (Zen 4) `vdpbf16ps` issues as fast as an FMA, so
//! it does twice the multiply-adds (`dp::pays`).
//!
//! Products of two bf16 values are exact in f32 and AMX accumulates them in f32, as the f32
//! path's FMAs do; only the order of the additions differs, as it already does between the
//! f32 GEMM and the interpreter. AMX always reads subnormal inputs as zero and flushes
//! subnormal results, which is the mode `hlo-runtime` runs every kernel in; it uses this one
//! only when the calling thread is in that mode.
//!
//! Layout: both operands are packed once per call (in parallel) as `u32` pairs
//! `(x[2p], x[2p + 1])` of consecutive `k`, zero-padded to whole tiles: the lhs as rows
//! (`[m][kp]`, what a tile row of `A` is), the rhs in panels of 32 columns (`[kp][32]`,
//! AMX's pair-interleaved `B`). Each 32×32 block of the result is 2×2 accumulator tiles;
//! a batched product's elements are spread over the rayon pool one per thread (each
//! packed into that thread's buffers); otherwise blocks are, by runs of column panels (so
//! a thread reuses its rhs panels) and of row blocks; each thread loads the tile
//! configuration for its share. Linux asks the kernel for
//! the tile-data permission once per process (`arch_prctl(ARCH_REQ_XCOMP_PERM)`); where
//! that or the CPU feature is missing, dots take the f32 path.

use super::gemm::Shape;

/// Rows and columns of the result one block computes (2×2 tiles of 16×16).
const BLOCK: usize = 32;
/// Pairs of `k` one tile covers (a 64-byte tile row of bf16 pairs).
const TILE_K: usize = 16;

/// How an operand's elements are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Src {
    /// bf16 bit patterns.
    Bf16,
    /// f32 values, rounded to bf16 as they are packed (a convert the dot absorbed).
    F32,
}

/// The result's element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dst {
    Bf16,
    F32,
}

/// An operand as `[batch, rows, cols]`: element `(b, i, j)` at element offset
/// `offsets[b] + i·rs + j·cs` from `ptr` (any alignment).
#[derive(Clone, Copy, Debug)]
pub struct Mat<'o> {
    pub ptr: *const u8,
    pub src: Src,
    pub offsets: &'o [usize],
    pub rs: usize,
    pub cs: usize,
}

// SAFETY: a `Mat` points into buffers that outlive the call that reads them (see
// `library::View`); it is only read.
unsafe impl Send for Mat<'_> {}
unsafe impl Sync for Mat<'_> {}

/// The unit a bf16 GEMM runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// AMX tiles (`tdpbf16ps`).
    Amx,
    /// AVX512-BF16's `vdpbf16ps` on zmm registers, where it beats f32 FMAs (`dp::pays`).
    Dp,
}

/// The unit bf16 dots run on in this process, decided once: AMX where the instruction-set
/// cap allows it ([`crate::cpu`]: effective level [`Level::Amx`](crate::cpu::Level::Amx)),
/// the host has AMX-BF16 (and AVX-512 with BF16 for the packing and the result's
/// conversion) and the OS lets this process use the tile data (under a lower cap the OS is
/// not even asked); else `vdpbf16ps` where the cap allows
/// [`Level::Avx512Bf16`](crate::cpu::Level::Avx512Bf16) and it pays on this host
/// (`dp::pays`); else none (bf16 dots are widened to f32).
pub fn engine() -> Option<Engine> {
    use hlo_vmath::cpu::{Level, allows};
    static ENGINE: std::sync::OnceLock<Option<Engine>> = std::sync::OnceLock::new();
    *ENGINE.get_or_init(|| {
        if allows(Level::Amx) && amx::enable() {
            Some(Engine::Amx)
        } else if allows(Level::Avx512Bf16) && dp::pays() {
            Some(Engine::Dp)
        } else {
            None
        }
    })
}

/// Whether bf16 dots run on a bf16 unit here ([`engine`]).
pub fn available() -> bool {
    engine().is_some()
}

/// Whether this process's bf16 unit takes a product of shape `s` (else it is widened to
/// f32). `vdpbf16ps` leaves matrix-vector products (one row or one column) to the f32
/// path: the pairs it packs cost more than the product, and its blocks compute 8 rows
/// and 32 columns at the least. Measured (release, one thread, this project's 2-core AMD
/// EPYC): `1x784 · 784x1024` 161 µs on it against 152 widened, `1024x784 · 784x1` 347
/// against 204; from 4 rows or columns on it is the faster (136 against 171 µs, 299
/// against 389).
pub fn takes(s: Shape) -> bool {
    match engine() {
        Some(Engine::Amx) => true,
        Some(Engine::Dp) => s.m > 1 && s.n > 1,
        None => false,
    }
}

/// `x` rounded to bf16 (nearest, ties to even; NaN kept, made quiet): the bits
/// `half::bf16::from_f32(x)` gives, computed without branches so that a loop of them
/// vectorizes. The runtime's library steps round with it too.
#[inline(always)]
pub fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let rounded = (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16;
    let quiet_nan = ((b >> 16) | 0x40) as u16;
    if (b & 0x7fff_ffff) > 0x7f80_0000 { quiet_nan } else { rounded }
}

impl Mat<'_> {
    /// The bf16 bits of element offset `off`.
    ///
    /// # Safety
    /// `off` must be an element of the operand's buffer.
    #[inline(always)]
    unsafe fn get(&self, off: usize) -> u32 {
        // SAFETY: in bounds by the caller; read unaligned (buffers need not be aligned).
        unsafe {
            match self.src {
                Src::Bf16 => u32::from((self.ptr as *const u16).add(off).read_unaligned()),
                Src::F32 => {
                    u32::from(bf16_bits((self.ptr as *const f32).add(off).read_unaligned()))
                }
            }
        }
    }

    /// The packed pair of the elements at offsets `lo` and `hi` (bf16 bits, `lo` in the
    /// low half); a missing `hi` (past the end of `k`) packs as zero.
    ///
    /// # Safety
    /// As [`Mat::get`], for both offsets.
    #[inline(always)]
    unsafe fn pair(&self, lo: usize, hi: Option<usize>) -> u32 {
        // SAFETY: the caller's.
        unsafe { self.get(lo) | hi.map_or(0, |h| self.get(h)) << 16 }
    }
}

/// The packed operands of one batch element, shared by the threads of a call.
#[derive(Default)]
struct Packed {
    /// `[mp·BLOCK][kp]` pairs.
    a: Vec<u32>,
    /// `np` panels of `[kp][BLOCK]` pairs.
    b: Vec<u32>,
}

impl Packed {
    /// The first `alen` and `blen` pairs of the buffers, grown to hold them.
    fn sized(&mut self, alen: usize, blen: usize) -> (&mut [u32], &mut [u32]) {
        if self.a.len() < alen {
            self.a.resize(alen, 0);
        }
        if self.b.len() < blen {
            self.b.resize(blen, 0);
        }
        (&mut self.a[..alen], &mut self.b[..blen])
    }
}

/// Packs batch element `bi` of `a` (by row blocks, into `pa`) and of `bt` (by column
/// panels, into `pb`), the blocks and panels spread over the current rayon pool when
/// `parallel`.
///
/// # Safety
/// As [`gemm`]'s: every element the views address must be readable.
#[allow(clippy::too_many_arguments)]
unsafe fn pack(
    a: &Mat<'_>,
    bt: &Mat<'_>,
    bi: usize,
    Shape { m, n, k }: Shape,
    kp: usize,
    pa: &mut [u32],
    pb: &mut [u32],
    parallel: bool,
) {
    use rayon::prelude::*;
    let a_rows = pa.chunks_mut(BLOCK * kp).enumerate().map(|(i, c)| (true, i, c));
    let b_cols = pb.chunks_mut(BLOCK * kp).enumerate().map(|(j, c)| (false, j, c));
    let one = |(is_a, i, c): (bool, usize, &mut [u32])| {
        // SAFETY: the views address the operands' elements (the caller's contract).
        unsafe {
            if is_a {
                pack_rows(a, a.offsets[bi], i * BLOCK, m, k, kp, c);
            } else {
                pack_cols(bt, bt.offsets[bi], i * BLOCK, n, k, kp, c);
            }
        }
    };
    let items: Vec<_> = a_rows.chain(b_cols).collect();
    if parallel {
        items.into_par_iter().for_each(one);
    } else {
        items.into_iter().for_each(one);
    }
}

/// Packing buffers kept across calls (a fresh allocation of a megabyte per dot would
/// fault its pages in every time); a concurrent call (devices of an SPMD run) that finds
/// them taken allocates its own.
static PACKED: std::sync::Mutex<Option<Packed>> = std::sync::Mutex::new(None);

thread_local! {
    /// A pool thread's packing buffers when batch elements run one per thread.
    static LOCAL: std::cell::RefCell<Packed> =
        const { std::cell::RefCell::new(Packed { a: Vec::new(), b: Vec::new() }) };
}

/// `out[b] = a[b] · bt[b]` for the batch elements of the views (as many in each) of
/// shape `s` (`a`: `[m, k]`, `bt`: `[k, n]`), `out` being `[batch, m, n]` row-major of
/// `dst` elements. Splits the work over the current rayon pool when `parallel` (the
/// caller is on the library pool, whose threads flush subnormals).
///
/// # Safety
/// [`available`] must hold; every element the views address must be readable, `out`
/// writable for `batch·m·n` elements and aliased by neither operand.
pub unsafe fn gemm(s: Shape, a: Mat<'_>, bt: Mat<'_>, out: *mut u8, dst: Dst, parallel: bool) {
    let e = engine().expect("bf16_gemm::gemm called where no bf16 unit is available");
    // SAFETY: the caller's.
    unsafe { gemm_with(e, s, a, bt, out, dst, parallel) }
}

/// [`gemm`] on the unit `e`.
///
/// # Safety
/// As [`gemm`]'s, with the host able to run `e` ([`amx::enable`] for AMX, the AVX512-BF16
/// instructions for `vdpbf16ps`).
unsafe fn gemm_with(
    e: Engine,
    s: Shape,
    a: Mat<'_>,
    bt: Mat<'_>,
    out: *mut u8,
    dst: Dst,
    parallel: bool,
) {
    use rayon::prelude::*;
    let Shape { m, n, k } = s;
    let batch = a.offsets.len();
    debug_assert_eq!(batch, bt.offsets.len());
    if batch == 0 || m == 0 || n == 0 {
        return;
    }
    let kp = k.div_ceil(2).next_multiple_of(TILE_K);
    let (mp, np) = (m.div_ceil(BLOCK), n.div_ceil(BLOCK));
    let (alen, blen) = (mp * BLOCK * kp, np * kp * BLOCK);
    let threads = if parallel { rayon::current_num_threads() } else { 1 };
    if threads > 1 && batch > 1 && (batch >= 2 * threads || batch.is_multiple_of(threads)) {
        // Batch elements spread over the pool, each packed and multiplied by one thread
        // in its own buffers (attention's batched products: one element at a time, each
        // over its few column panels, kept 16 threads waiting).
        let out = OutPtr(out);
        (0..batch).into_par_iter().for_each(|bi| {
            let out = &out;
            LOCAL.with(|cell| {
                let mut own = Packed::default();
                let mut guard = cell.try_borrow_mut();
                let p = match guard.as_deref_mut() {
                    Ok(p) => p,
                    Err(_) => &mut own,
                };
                let (pa, pb) = p.sized(alen, blen);
                // SAFETY: the views address the operands' elements (contract).
                unsafe { pack(&a, &bt, bi, s, kp, pa, pb, false) };
                // SAFETY: the task writes only the blocks of batch element `bi`; the
                // packed buffers hold every pair the blocks read.
                unsafe { blocks(e, &Job { pa, pb, kp, m, n, bi, out: out.0, dst }, 0..mp, 0..np) };
            });
        });
        return;
    }
    let mut guard = PACKED.try_lock().ok();
    let mut own = None;
    let slot = match guard.as_deref_mut() {
        Some(slot) => slot,
        None => &mut own,
    };
    let p = slot.get_or_insert_with(Packed::default);
    let out = OutPtr(out);
    for bi in 0..batch {
        // Pack: lhs by row blocks, rhs by column panels.
        {
            let (pa, pb) = p.sized(alen, blen);
            let parallel = threads > 1 && m * k + k * n >= 1 << 15;
            // SAFETY: the views address the operands' elements (contract).
            unsafe { pack(&a, &bt, bi, s, kp, pa, pb, parallel) };
        }
        // Multiply: each task a run of column panels and of row blocks (runs of panels
        // first, so that a thread reuses its rhs panels; row blocks too where there are
        // fewer panels than tasks: 8 panels of a 256-wide result left half of 16 threads
        // idle).
        let want = if threads > 1 { 2 * threads } else { 1 };
        let col_tasks = want.min(np);
        let row_tasks = (want / col_tasks).clamp(1, mp);
        let tasks = col_tasks * row_tasks;
        let (cper, rper) = (np.div_ceil(col_tasks), mp.div_ceil(row_tasks));
        let (pa, pb) = (&p.a[..alen], &p.b[..blen]);
        let run = |t: usize| {
            let out = &out;
            let (ct, rt) = (t / row_tasks, t % row_tasks);
            let cols = (ct * cper).min(np)..((ct + 1) * cper).min(np);
            let rows = (rt * rper).min(mp)..((rt + 1) * rper).min(mp);
            // SAFETY: the task writes only its blocks (its column panels and row blocks)
            // of batch `bi`; the packed buffers hold every pair the blocks read.
            unsafe { blocks(e, &Job { pa, pb, kp, m, n, bi, out: out.0, dst }, rows, cols) };
        };
        if tasks > 1 {
            (0..tasks).into_par_iter().for_each(run);
        } else {
            run(0);
        }
    }
}

#[derive(Clone, Copy)]
struct OutPtr(*mut u8);
// SAFETY: tasks write disjoint blocks through it (see `gemm`).
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

/// Packs rows `r0..r0 + BLOCK` of `x` (`[rows, k]` at `base`, valid below `m`) as
/// `[BLOCK][kp]` pairs, zero-padded.
///
/// # Safety
/// Every valid element must be readable.
#[allow(clippy::too_many_arguments)]
unsafe fn pack_rows(
    x: &Mat<'_>,
    base: usize,
    r0: usize,
    m: usize,
    k: usize,
    kp: usize,
    out: &mut [u32],
) {
    let live = BLOCK.min(m - r0);
    if x.rs == 1 && x.cs != 1 {
        // Rows adjacent in memory (a transposed lhs): read along the rows, pair by pair.
        out.fill(0);
        for pi in 0..k.div_ceil(2) {
            let (k0, k1) = (2 * pi, 2 * pi + 1);
            let (at0, at1) = (base + r0 + k0 * x.cs, base + r0 + k1 * x.cs);
            for r in 0..live {
                // SAFETY: rows below `m` of columns below `k` are readable.
                out[r * kp + pi] = unsafe { x.pair(at0 + r, (k1 < k).then_some(at1 + r)) };
            }
        }
        return;
    }
    for (r, row) in out.chunks_mut(kp).enumerate() {
        if r >= live {
            row.fill(0);
            continue;
        }
        let at = base + (r0 + r) * x.rs;
        if x.cs == 1 && x.src == Src::Bf16 {
            // SAFETY: the row's `k` bf16 values are readable; copied bytewise into the
            // first `k` halves of the packed row.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (x.ptr as *const u16).add(at) as *const u8,
                    row.as_mut_ptr() as *mut u8,
                    2 * k,
                )
            };
            if k % 2 == 1 {
                row[k / 2] &= 0xffff;
            }
            row[k.div_ceil(2)..].fill(0);
            continue;
        }
        for (pi, o) in row.iter_mut().enumerate() {
            let (k0, k1) = (2 * pi, 2 * pi + 1);
            // SAFETY: elements below `k` are readable.
            *o = if k0 < k {
                unsafe { x.pair(at + k0 * x.cs, (k1 < k).then_some(at + k1 * x.cs)) }
            } else {
                0
            };
        }
    }
}

/// Packs columns `c0..c0 + BLOCK` of `x` (`[k, cols]` at `base`, valid below `n`) as
/// `[kp][BLOCK]` pairs, zero-padded.
///
/// # Safety
/// Every valid element must be readable.
#[allow(clippy::too_many_arguments)]
unsafe fn pack_cols(
    x: &Mat<'_>,
    base: usize,
    c0: usize,
    n: usize,
    k: usize,
    kp: usize,
    out: &mut [u32],
) {
    let live = BLOCK.min(n - c0);
    for (pi, row) in out.chunks_mut(BLOCK).enumerate().take(kp) {
        let (k0, k1) = (2 * pi, 2 * pi + 1);
        if k0 >= k {
            row.fill(0);
            continue;
        }
        let (at0, at1) = (base + k0 * x.rs + c0 * x.cs, base + k1 * x.rs + c0 * x.cs);
        if x.cs == 1 && live == BLOCK {
            // SAFETY: `BLOCK` values of row `k0` (and of `k1` below `k`) are readable.
            unsafe { amx::interleave_rows(x, at0, (k1 < k).then_some(at1), row) };
            continue;
        }
        if x.rs == 1 && x.src == Src::Bf16 && k1 < k {
            // Each column's pair is adjacent in memory: one 32-bit read.
            for (j, o) in row.iter_mut().enumerate() {
                *o = if j < live {
                    // SAFETY: elements `k0` and `k1` of column `c0 + j` are readable.
                    unsafe {
                        (x.ptr as *const u16).add(at0 + j * x.cs).cast::<u32>().read_unaligned()
                    }
                } else {
                    0
                };
            }
            continue;
        }
        for (j, o) in row.iter_mut().enumerate() {
            *o = if j < live {
                // SAFETY: columns below `n` of rows below `k` are readable.
                unsafe { x.pair(at0 + j * x.cs, (k1 < k).then_some(at1 + j * x.cs)) }
            } else {
                0
            };
        }
    }
}

/// What the blocks of one batch element's product read and write: the packed lhs `pa`
/// (`[·][kp]` pairs) and rhs panels `pb` (`[·][kp][32]`), the product's `m × n`, and the
/// batch element `bi` of `out` (`[batch, m, n]` row-major of `dst` elements).
#[derive(Clone, Copy)]
struct Job<'p> {
    pa: &'p [u32],
    pb: &'p [u32],
    kp: usize,
    m: usize,
    n: usize,
    bi: usize,
    out: *mut u8,
    dst: Dst,
}

/// Result blocks `rows × cols` (in blocks of 32) of `j` on the unit `e`.
///
/// # Safety
/// The host runs `e`; the packed buffers cover the blocks; the blocks of `out` are this
/// call's alone.
unsafe fn blocks(
    e: Engine,
    j: &Job<'_>,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
) {
    // SAFETY: the caller's.
    unsafe {
        match e {
            Engine::Amx => amx::blocks(j, rows, cols),
            Engine::Dp => dp::blocks(j, rows, cols),
        }
    }
}

/// The same blocks on AVX512-BF16's `vdpbf16ps`: each instruction multiplies 16 pairs of
/// the rhs panel by one broadcast lhs pair and adds both products to 16 f32 accumulators
/// (32 multiply-adds, rounded as AMX's: products exact, subnormals flushed), from the
/// operands packed as for AMX (a lhs row's pairs, a panel's `[kp][32]` pairs are exactly
/// the broadcast and the two vectors it takes).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub(crate) mod dp {
    use super::BLOCK;

    /// Rows of one register block: 8 rows x 2 vectors of 16 columns, 16 accumulators.
    const ROWS: usize = 8;

    /// Whether `vdpbf16ps` runs here and beats widening to f32: the host has AVX512-F and
    /// AVX512-BF16 (with the OS saving zmm state, as `is_x86_feature_detected` checks) and
    /// is an AMD one. Measured (release, idle, one thread unless said): on this project's
    /// 2-core AMD EPYC (Zen 4) a zmm `vdpbf16ps` issues as fast as a zmm FMA (0.55 ns
    /// each in a loop of 12 independent chains), so twice the multiply-adds; this kernel
    /// ran 211 GFLOP/s on `128x784 · 784x1024` and 216 on 1024³ (403 and 432 on two
    /// threads; the `gemm_table` example), against 110 for the f32 GEMM; the bf16 dot
    /// `128x784 · 784x1024` took 1042-1046 µs against 2118-2141 widened to f32
    /// (`HLOC_ISA=avx512`), the bench MLP-bf16 step 3033-3047 against 5577-5598 µs and
    /// the transformer-bf16 step 118-120 against 174-175 ms (two threads: 1554-1571
    /// against 3191-3229 µs, 63 against 97 ms). On the Xeon with AMX the module doc names,
    /// `vdpbf16ps` took three times an FMA's time (0.54 against 0.18 ns: fewer
    /// multiply-adds per second than f32), so Intel hosts without AMX keep widening.
    pub(crate) fn pays() -> bool {
        use std::arch::x86_64::__cpuid;
        let has = std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bf16");
        let v = __cpuid(0); // the vendor string, on every x86-64 CPU

        let amd = (v.ebx, v.edx, v.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
        has && amd
    }

    /// Whether the host can run this module's kernel at all (for tests on hosts where it
    /// does not pay).
    #[cfg(test)]
    pub(crate) fn runs() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bf16")
    }

    /// As `amx::blocks`.
    ///
    /// # Safety
    /// The host has AVX512-F and AVX512-BF16; the packed buffers cover the blocks; the
    /// blocks of `out` are this call's alone.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn blocks(
        j: &super::Job<'_>,
        rows: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
    ) {
        use std::arch::x86_64::*;
        let super::Job { pa, pb, kp, m, n, bi, out, dst } = *j;
        let mut tmp = [0f32; BLOCK * BLOCK];
        for cb in cols {
            let panel = &pb[cb * kp * BLOCK..(cb + 1) * kp * BLOCK];
            for rb in rows.clone() {
                let a0 = &pa[rb * BLOCK * kp..(rb + 1) * BLOCK * kp];
                // Only the groups of rows the block has (a product of one row computes 8).
                let live = BLOCK.min(m - rb * BLOCK);
                for g in 0..live.div_ceil(ROWS) {
                    let mut acc = [[_mm512_setzero_ps(); 2]; ROWS];
                    let ag = &a0[g * ROWS * kp..(g + 1) * ROWS * kp];
                    for p in 0..kp {
                        // SAFETY: a panel row holds 32 pairs from `p * 32`, inside `panel`.
                        let (b0, b1) = unsafe {
                            let at = panel.as_ptr().add(p * BLOCK);
                            (
                                std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                                    at as *const _,
                                )),
                                std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                                    at.add(16) as *const _,
                                )),
                            )
                        };
                        for (r, acc) in acc.iter_mut().enumerate() {
                            let pair = ag[r * kp + p] as i32;
                            // SAFETY: a register broadcast of one pair.
                            let a = unsafe {
                                std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(pair))
                            };
                            acc[0] = _mm512_dpbf16_ps(acc[0], a, b0);
                            acc[1] = _mm512_dpbf16_ps(acc[1], a, b1);
                        }
                    }
                    for (r, acc) in acc.iter().enumerate() {
                        let row = (g * ROWS + r) * BLOCK;
                        // SAFETY: 32 f32 of row `g * ROWS + r` of `tmp`.
                        unsafe {
                            _mm512_storeu_ps(tmp.as_mut_ptr().add(row), acc[0]);
                            _mm512_storeu_ps(tmp.as_mut_ptr().add(row + 16), acc[1]);
                        }
                    }
                }
                let (i0, j0) = (rb * BLOCK, cb * BLOCK);
                let (nr, nc) = (BLOCK.min(m - i0), BLOCK.min(n - j0));
                // SAFETY: rows `i0..i0+nr`, columns `j0..j0+nc` of batch `bi` are in `out`.
                unsafe { super::amx::write(&tmp, out, (bi * m + i0) * n + j0, n, nr, nc, dst) };
            }
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub(crate) mod dp {
    pub(crate) fn pays() -> bool {
        false
    }
    #[cfg(test)]
    pub(crate) fn runs() -> bool {
        false
    }
    // Never called: `engine()` is never `Dp` here.
    pub(super) use super::amx::blocks;
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod amx {
    use super::{BLOCK, Dst, TILE_K, bf16_bits};
    use std::arch::asm;

    /// Linux `arch_prctl` request for permission to use an extended state component.
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    /// The AMX tile-data state component.
    const XFEATURE_XTILEDATA: i64 = 18;
    const SYS_ARCH_PRCTL: i64 = 158;

    /// CPUID says AMX-TILE, AMX-BF16, AVX512F and AVX512-BF16, and Linux grants the
    /// tile-data permission to this process.
    pub(super) fn enable() -> bool {
        use std::arch::x86_64::{__cpuid_count, _xgetbv};
        let (l7, l71, l1) = (__cpuid_count(7, 0), __cpuid_count(7, 1), __cpuid_count(1, 0));
        let amx_bf16 = l7.edx & (1 << 22) != 0;
        let amx_tile = l7.edx & (1 << 24) != 0;
        let avx512f = l7.ebx & (1 << 16) != 0;
        let avx512_bf16 = l71.eax & (1 << 5) != 0;
        let osxsave = l1.ecx & (1 << 27) != 0;
        if !(amx_bf16 && amx_tile && avx512f && avx512_bf16 && osxsave) {
            return false;
        }
        // SAFETY: OSXSAVE is set, so XGETBV is available.
        let xcr0 = unsafe { _xgetbv(0) };
        // AVX-512 state (opmask, ZMM) and the tile configuration and data enabled by the OS.
        if xcr0 & 0xe0 != 0xe0 || xcr0 & (0b11 << 17) != 0b11 << 17 {
            return false;
        }
        let r: i64;
        // SAFETY: the arch_prctl system call with two integer arguments; it only changes
        // which extended state this process may use.
        unsafe {
            asm!("syscall", inlateout("rax") SYS_ARCH_PRCTL => r, in("rdi") ARCH_REQ_XCOMP_PERM,
                 in("rsi") XFEATURE_XTILEDATA, lateout("rcx") _, lateout("r11") _,
                 options(nostack));
        }
        r == 0
    }

    /// Palette 1, eight tiles of 16 rows × 64 bytes.
    #[repr(C, align(64))]
    struct Config([u8; 64]);

    const CONFIG: Config = {
        let mut c = [0u8; 64];
        c[0] = 1;
        let mut t = 0;
        while t < 8 {
            c[16 + 2 * t] = 64;
            c[48 + t] = 16;
            t += 1;
        }
        Config(c)
    };

    /// Result blocks `rows × cols` (in blocks of 32) of `j`.
    ///
    /// # Safety
    /// [`enable`] returned true; the packed buffers cover the blocks; the blocks of `out`
    /// are this call's alone.
    pub(super) unsafe fn blocks(
        j: &super::Job<'_>,
        rows: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
    ) {
        let super::Job { pa, pb, kp, m, n, bi, out, dst } = *j;
        let cfg = CONFIG;
        // SAFETY: a valid palette-1 configuration (permission granted by `enable`).
        unsafe { asm!("ldtilecfg [{}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly)) };
        let mut tmp = Tile([0f32; BLOCK * BLOCK]);
        let (a_stride, b_stride) = (kp * 4, BLOCK * 4);
        for cb in cols {
            let panel = &pb[cb * kp * BLOCK..(cb + 1) * kp * BLOCK];
            for rb in rows.clone() {
                let a0 = &pa[rb * BLOCK * kp..(rb + 1) * BLOCK * kp];
                // SAFETY: each tile load reads 16 rows of 64 bytes inside `a0`/`panel`
                // (`kp` is a multiple of 16 pairs); the store writes `tmp`.
                unsafe {
                    asm!(
                        "tilezero tmm0",
                        "tilezero tmm1",
                        "tilezero tmm2",
                        "tilezero tmm3",
                        options(nostack, nomem)
                    );
                    for kb in 0..kp / TILE_K {
                        let a_top = a0.as_ptr().add(kb * TILE_K);
                        let a_bot = a_top.add(16 * kp);
                        let b_left = panel.as_ptr().add(kb * TILE_K * BLOCK);
                        let b_right = b_left.add(16);
                        asm!(
                            "tileloadd tmm4, [{at} + {as_}*1]",
                            "tileloadd tmm5, [{ab} + {as_}*1]",
                            "tileloadd tmm6, [{bl} + {bs}*1]",
                            "tileloadd tmm7, [{br} + {bs}*1]",
                            "tdpbf16ps tmm0, tmm4, tmm6",
                            "tdpbf16ps tmm1, tmm4, tmm7",
                            "tdpbf16ps tmm2, tmm5, tmm6",
                            "tdpbf16ps tmm3, tmm5, tmm7",
                            at = in(reg) a_top, ab = in(reg) a_bot,
                            bl = in(reg) b_left, br = in(reg) b_right,
                            as_ = in(reg) a_stride, bs = in(reg) b_stride,
                            options(nostack, readonly),
                        );
                    }
                    let t = tmp.0.as_mut_ptr();
                    asm!(
                        "tilestored [{c0} + {s}*1], tmm0",
                        "tilestored [{c1} + {s}*1], tmm1",
                        "tilestored [{c2} + {s}*1], tmm2",
                        "tilestored [{c3} + {s}*1], tmm3",
                        c0 = in(reg) t, c1 = in(reg) t.add(16),
                        c2 = in(reg) t.add(16 * BLOCK), c3 = in(reg) t.add(16 * BLOCK + 16),
                        s = in(reg) BLOCK * 4,
                        options(nostack),
                    );
                }
                let (i0, j0) = (rb * BLOCK, cb * BLOCK);
                let (nr, nc) = (BLOCK.min(m - i0), BLOCK.min(n - j0));
                // SAFETY: rows `i0..i0+nr`, columns `j0..j0+nc` of batch `bi` are in `out`.
                unsafe { write(&tmp.0, out, (bi * m + i0) * n + j0, n, nr, nc, dst) };
            }
        }
        // SAFETY: releases this thread's tile state.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }

    /// `out[j] = x[at0 + j] | x[at1 + j] << 16` for the `BLOCK` columns of two rows (bf16
    /// bits; f32 values rounded to bf16 by `vcvtneps2bf16`, nearest even with NaN made
    /// quiet, as `bf16_bits`; it reads a subnormal as zero, which AMX does anyway); a
    /// missing second row gives zeros.
    ///
    /// # Safety
    /// `BLOCK` elements from each offset are readable; [`enable`] returned true.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn interleave_rows(
        x: &super::Mat<'_>,
        at0: usize,
        at1: Option<usize>,
        out: &mut [u32],
    ) {
        use std::arch::x86_64::*;
        // SAFETY: reads of `BLOCK` elements at the given offsets (contract); `out` holds
        // `BLOCK` u32.
        unsafe {
            let halves = |at: usize| -> [__m256i; 2] {
                match x.src {
                    super::Src::Bf16 => {
                        let p = (x.ptr as *const u16).add(at);
                        [
                            _mm256_loadu_si256(p as *const _),
                            _mm256_loadu_si256(p.add(16) as *const _),
                        ]
                    }
                    super::Src::F32 => {
                        let p = (x.ptr as *const f32).add(at);
                        [
                            std::mem::transmute::<__m256bh, __m256i>(_mm512_cvtneps_pbh(
                                _mm512_loadu_ps(p),
                            )),
                            std::mem::transmute::<__m256bh, __m256i>(_mm512_cvtneps_pbh(
                                _mm512_loadu_ps(p.add(16)),
                            )),
                        ]
                    }
                }
            };
            let lo = halves(at0);
            let hi = match at1 {
                Some(at) => halves(at),
                None => [_mm256_setzero_si256(); 2],
            };
            for h in 0..2 {
                let v = _mm512_or_si512(
                    _mm512_cvtepu16_epi32(lo[h]),
                    _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(hi[h])),
                );
                _mm512_storeu_si512(out.as_mut_ptr().add(16 * h) as *mut _, v);
            }
        }
    }

    #[repr(C, align(64))]
    struct Tile([f32; BLOCK * BLOCK]);

    /// The block's `nr × nc` results to `out` from element `at` (row stride `ld`).
    ///
    /// # Safety
    /// Those elements of `out` are writable.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn write(
        t: &[f32],
        out: *mut u8,
        at: usize,
        ld: usize,
        nr: usize,
        nc: usize,
        dst: Dst,
    ) {
        use std::arch::x86_64::*;
        for r in 0..nr {
            let row = &t[r * BLOCK..r * BLOCK + BLOCK];
            let o = at + r * ld;
            match dst {
                Dst::F32 => {
                    // SAFETY: `nc` f32 results of this row are writable.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            row.as_ptr() as *const u8,
                            (out as *mut f32).add(o) as *mut u8,
                            4 * nc,
                        )
                    };
                }
                Dst::Bf16 if nc == BLOCK => {
                    for h in 0..2 {
                        // SAFETY: 16 results of this row; `vcvtneps2bf16` rounds to nearest
                        // even and makes NaN quiet, as `bf16_bits` does (its inputs are
                        // never subnormal: AMX flushed them).
                        unsafe {
                            let v = _mm512_loadu_ps(row.as_ptr().add(16 * h));
                            let b: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(v));
                            _mm256_storeu_si256((out as *mut u16).add(o + 16 * h) as *mut _, b);
                        }
                    }
                }
                Dst::Bf16 => {
                    for (j, &x) in row.iter().enumerate().take(nc) {
                        // SAFETY: result `j < nc` of this row is writable.
                        unsafe { (out as *mut u16).add(o + j).write_unaligned(bf16_bits(x)) };
                    }
                }
            }
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod amx {
    pub(super) fn enable() -> bool {
        false
    }
    pub(super) unsafe fn interleave_rows(
        _: &super::Mat<'_>,
        _: usize,
        _: Option<usize>,
        _: &mut [u32],
    ) {
        unreachable!("bf16_gemm::available() is false here")
    }
    pub(crate) unsafe fn blocks(
        _: &super::Job<'_>,
        _: std::ops::Range<usize>,
        _: std::ops::Range<usize>,
    ) {
        unreachable!("bf16_gemm::available() is false here")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bf16_to_f32(h: u16) -> f32 {
        f32::from_bits(u32::from(h) << 16)
    }

    /// The units the tests run: the process's choice ([`engine`]), and the `vdpbf16ps`
    /// kernel wherever the host can run it, also where it does not pay (an Intel host with
    /// AVX512-BF16 checks it too) or the cap keeps dots from it.
    fn units() -> Vec<Option<Engine>> {
        let mut u = vec![engine()];
        if dp::runs() && engine() != Some(Engine::Dp) {
            u.push(Some(Engine::Dp));
        }
        u
    }

    /// Runs a bf16 GEMM on the unit `e` ([`units`]): a bf16 unit's kernel, or with `None`
    /// the f32 fallback bf16 dots take where the process has no unit (operands widened to
    /// f32 in place, f32 ones rounded to bf16 first as the kernel's packing does,
    /// `dot_general_f32` on the same layout, the result rounded to bf16 for a bf16
    /// destination). When `e` is the process's own choice ([`engine`]) it first checks
    /// that the dispatcher reports it: the unit's path, or for the fallback no bf16 unit
    /// and the f32 GEMM path the dot's shape takes. `ta`/`tb`: the operands are stored
    /// `[b][k][m]` / `[b][n][k]`.
    ///
    /// # Safety
    /// The host runs `e`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn dispatch_on(
        e: Option<Engine>,
        s: Shape,
        a: Mat<'_>,
        b: Mat<'_>,
        (ta, tb): (bool, bool),
        (alen, blen): (usize, usize),
        out: &mut [u8],
        dst: Dst,
        parallel: bool,
    ) {
        if let Some(e) = e.filter(|&e| Some(e) != engine()) {
            // SAFETY: the host runs `e` (the caller's); the buffers fit the views.
            unsafe { gemm_with(e, s, a, b, out.as_mut_ptr(), dst, parallel) };
            return;
        }
        match engine() {
            Some(Engine::Amx) => {
                assert!(crate::cpu::allows(crate::cpu::Level::Amx));
                assert_eq!(crate::cpu::paths()[0], ("bf16 dot", crate::cpu::AMX_BF16));
            }
            Some(Engine::Dp) => {
                assert!(crate::cpu::allows(crate::cpu::Level::Avx512Bf16));
                assert!(!crate::cpu::allows(crate::cpu::Level::Amx) || !amx::enable());
                assert_eq!(crate::cpu::paths()[0], ("bf16 dot", crate::cpu::DP_BF16));
            }
            None => {}
        }
        if available() {
            // SAFETY: a bf16 unit is available; the caller sized the buffers for the views.
            unsafe { gemm(s, a, b, out.as_mut_ptr(), dst, parallel) };
            return;
        }
        if crate::cpu::host() == crate::cpu::Level::Amx {
            assert!(!crate::cpu::allows(crate::cpu::Level::Amx), "AMX host, not capped, unused");
        }
        assert_eq!(crate::cpu::paths()[0], ("bf16 dot", "widened to f32"));
        let Shape { m, n, k } = s;
        let batch = a.offsets.len();
        // SAFETY: the caller's buffers hold `alen` and `blen` elements.
        let widen = |x: &Mat<'_>, len: usize| -> Vec<f32> {
            (0..len).map(|o| f32::from_bits(unsafe { x.get(o) } << 16)).collect()
        };
        let (l, r) = (widen(&a, alen), widen(&b, blen));
        let (ld, lc) = if ta { ([batch, k, m], 1) } else { ([batch, m, k], 2) };
        let (rd, rc) = if tb { ([batch, n, k], 2) } else { ([batch, k, n], 1) };
        let dn = hlo_ir::op::DotDims {
            lhs_batch: vec![0],
            rhs_batch: vec![0],
            lhs_contracting: vec![lc],
            rhs_contracting: vec![rc],
            ..Default::default()
        };
        let path = crate::cpu::dot(&ld, &rd, &dn);
        assert_eq!(path, crate::cpu::gemm_for(s));
        assert!(path.starts_with("gemm crate") || path.starts_with("small gemm"), "{path}");
        let mut o = vec![0f32; batch * m * n];
        crate::dot_general_f32(&l, &ld, &r, &rd, &dn, &mut o);
        for (i, v) in o.into_iter().enumerate() {
            match dst {
                Dst::F32 => out[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes()),
                Dst::Bf16 => out[2 * i..2 * i + 2].copy_from_slice(&bf16_bits(v).to_le_bytes()),
            }
        }
    }

    struct Rng(u64);
    impl Rng {
        fn f(&mut self) -> f32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        }
    }

    /// The kernel against an f64 reference: the f32 accumulation of exact products is
    /// within `k·2^-23·Σ|a||b|` of the exact sum, then rounded once to the result type.
    /// Where AMX is not used (no AMX, or capped away), the f32 fallback the dispatcher
    /// reports is held to the same bound on the same cases ([`dispatch_on`]).
    #[test]
    fn matches_f64_reference_on_every_layout_and_edge() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let cases = [
            (1, 1, 1, 1),
            (1, 12, 32, 2),
            (1, 13, 33, 3),
            (2, 25, 70, 17),
            (3, 7, 5, 129),
            (1, 128, 100, 784),
            (2, 40, 64, 64),
        ];
        for &(batch, m, n, k) in &cases {
            for (ta, tb, src_a, src_b, dst) in [
                (false, false, Src::Bf16, Src::Bf16, Dst::Bf16),
                (true, false, Src::F32, Src::F32, Dst::F32),
                (false, true, Src::Bf16, Src::F32, Dst::F32),
                (true, true, Src::F32, Src::Bf16, Dst::Bf16),
                (false, false, Src::F32, Src::F32, Dst::Bf16),
            ] {
                let av: Vec<f32> = (0..batch * m * k).map(|_| rng.f()).collect();
                let bv: Vec<f32> = (0..batch * k * n).map(|_| rng.f()).collect();
                let a16: Vec<u16> = av.iter().map(|&x| bf16_bits(x)).collect();
                let b16: Vec<u16> = bv.iter().map(|&x| bf16_bits(x)).collect();
                // Logical element (b, i, kk) of a: stored [b][i][kk] or, transposed, [b][kk][i].
                let (ars, acs) = if ta { (1, m) } else { (k, 1) };
                let (brs, bcs) = if tb { (1, k) } else { (n, 1) };
                let (ao, bo): (Vec<usize>, Vec<usize>) =
                    (0..batch).map(|b| (b * m * k, b * k * n)).unzip();
                let a = Mat {
                    ptr: match src_a {
                        Src::Bf16 => a16.as_ptr() as *const u8,
                        Src::F32 => av.as_ptr() as *const u8,
                    },
                    src: src_a,
                    offsets: &ao,
                    rs: ars,
                    cs: acs,
                };
                let b = Mat {
                    ptr: match src_b {
                        Src::Bf16 => b16.as_ptr() as *const u8,
                        Src::F32 => bv.as_ptr() as *const u8,
                    },
                    src: src_b,
                    offsets: &bo,
                    rs: brs,
                    cs: bcs,
                };
                for unit in units() {
                    let mut out = vec![0u8; batch * m * n * 4];
                    let lens = (batch * m * k, batch * k * n);
                    let (s, t) = (Shape { m, n, k }, (ta, tb));
                    // SAFETY: `units` holds what the host runs.
                    unsafe { dispatch_on(unit, s, a, b, t, lens, &mut out, dst, batch > 1) };
                    for bi in 0..batch {
                        for i in 0..m {
                            for j in 0..n {
                                let (mut exact, mut mag) = (0f64, 0f64);
                                for kk in 0..k {
                                    let x =
                                        bf16_to_f32(a16[bi * m * k + i * ars + kk * acs]) as f64;
                                    let y =
                                        bf16_to_f32(b16[bi * k * n + kk * brs + j * bcs]) as f64;
                                    exact += x * y;
                                    mag += (x * y).abs();
                                }
                                let o = (bi * m + i) * n + j;
                                let (got, ulp) = match dst {
                                    Dst::F32 => (
                                        f32::from_le_bytes(
                                            out[4 * o..4 * o + 4].try_into().unwrap(),
                                        ) as f64,
                                        exact.abs() * 2f64.powi(-24),
                                    ),
                                    Dst::Bf16 => (
                                        bf16_to_f32(u16::from_le_bytes([
                                            out[2 * o],
                                            out[2 * o + 1],
                                        ])) as f64,
                                        exact.abs() * 2f64.powi(-8),
                                    ),
                                };
                                let bound = ulp + (k as f64 + 1.0) * 2f64.powi(-23) * mag * 1.01;
                                assert!(
                                    (got - exact).abs() <= bound,
                                    "batch {batch} m {m} n {n} k {k} ta {ta} tb {tb} {dst:?}: \
                                 {src_a:?} {src_b:?} {unit:?} ({bi},{i},{j}) = {got}, exact {exact}, bound {bound}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// Infinities and NaN through a whole block (the vector conversion of the results), on
    /// the AMX kernel or the f32 fallback ([`dispatch_on`]).
    /// The same bits however the work is split: batch elements one per thread (4 on 2
    /// threads), column panels (10 panels on 3), column panels and row blocks (2 panels
    /// and 4 row blocks on 8), against the product on one thread.
    #[test]
    fn every_split_gives_the_one_thread_bits() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for (batch, m, n, k, threads) in
            [(4, 70, 300, 129, 2), (4, 70, 300, 129, 3), (1, 100, 64, 40, 8)]
        {
            let av: Vec<u16> = (0..batch * m * k).map(|_| bf16_bits(rng.f())).collect();
            let bv: Vec<u16> = (0..batch * k * n).map(|_| bf16_bits(rng.f())).collect();
            let (ao, bo): (Vec<usize>, Vec<usize>) =
                (0..batch).map(|b| (b * m * k, b * k * n)).unzip();
            let a =
                Mat { ptr: av.as_ptr() as *const u8, src: Src::Bf16, offsets: &ao, rs: k, cs: 1 };
            let b =
                Mat { ptr: bv.as_ptr() as *const u8, src: Src::Bf16, offsets: &bo, rs: n, cs: 1 };
            let s = Shape { m, n, k };
            for unit in units() {
                let run = |threads: usize, parallel: bool| {
                    let mut out = vec![0u8; batch * m * n * 4];
                    let pool =
                        rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                    pool.install(|| {
                        let (lens, t) = ((av.len(), bv.len()), (false, false));
                        // SAFETY: `units` holds what the host runs.
                        unsafe { dispatch_on(unit, s, a, b, t, lens, &mut out, Dst::F32, parallel) }
                    });
                    out
                };
                assert!(
                    run(threads, true) == run(1, false),
                    "{batch}x{m}x{n}x{k} on {threads} threads, {unit:?}"
                );
            }
        }
    }

    #[test]
    fn infinities_and_nan_survive_a_full_block() {
        let (m, n, k) = (32, 32, 2);
        let mut a = vec![bf16_bits(1.0); m * k];
        a[0] = bf16_bits(f32::INFINITY);
        let mut b = vec![bf16_bits(1.0); k * n];
        b[0] = 0;
        let offs = [0usize];
        let mat = |v: &[u16], rs, cs| Mat {
            ptr: v.as_ptr() as *const u8,
            src: Src::Bf16,
            offsets: &offs,
            rs,
            cs,
        };
        let s = Shape { m, n, k };
        let (a, b) = (mat(&a, k, 1), mat(&b, n, 1));
        for unit in units() {
            let mut out = vec![0u8; 2 * m * n];
            let (lens, t) = ((m * k, k * n), (false, false));
            // SAFETY: `units` holds what the host runs.
            unsafe { dispatch_on(unit, s, a, b, t, lens, &mut out, Dst::Bf16, false) };
            let v = |i: usize| bf16_to_f32(u16::from_le_bytes([out[2 * i], out[2 * i + 1]]));
            assert!(v(0).is_nan(), "inf·0 + 1·1 is NaN, got {} ({unit:?})", v(0));
            assert_eq!(v(1), f32::INFINITY);
            assert_eq!(v(n), 1.0, "row 1 column 0: 1·0 + 1·1");
            assert_eq!(v(n + 1), 2.0);
        }
    }

    /// The branch-free rounding gives `half`'s bits for every class of input.
    #[test]
    fn bf16_bits_is_halfs_rounding() {
        let mut x: u32 = 0x1234_5678;
        let special = [
            0u32,
            0x8000_0000,
            0x7f80_0000,
            0xff80_0000,
            0x7fc0_0000,
            0x7f80_0001,
            0xff80_0001,
            0x7f7f_ffff,
            0x0000_8000,
            0x0001_8000,
            0x3f80_8000,
            0x3f81_8000,
            0x3f80_8001,
            0x3f80_7fff,
            0x0000_0001,
        ];
        let check = |b: u32| {
            let f = f32::from_bits(b);
            assert_eq!(bf16_bits(f), half::bf16::from_f32(f).to_bits(), "{b:#010x}");
        };
        special.iter().for_each(|&b| check(b));
        for _ in 0..2_000_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            check(x);
        }
    }
}
