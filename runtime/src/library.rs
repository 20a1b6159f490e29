//! Library steps: `dot` and `convolution` on buffers, through `hlo_kernels` in f32
//! (bf16, f16 and fp8/f4e2m1fn operands are widened on the way in and results rounded to
//! nearest even on the way out, as XLA's CPU backend computes such dots; bf16 dots go to
//! the AMX kernel where the host has it, without widening); f64 dots and
//! convolutions in f64; integer dots and integer and pred convolutions in wrap-around
//! 64-bit integers, wrapped to the result type. Sorts and top-k split over independent
//! rows on the runtime pool ([`crate::pool::in_parts`]).

use half::f16;
use hlo_ir::ElemType;
use hlo_kernels::bf16_gemm::bf16_bits as f32_to_bf16_bits;

/// A buffer seen by a library kernel: its address, element type and dims.
pub(crate) struct View {
    pub ptr: *mut u8,
    pub elem: ElemType,
    pub dims: Vec<usize>,
}

// SAFETY: a view points into a run's arena or argument buffers, which outlive the library
// call; the call that sends it to the library pool blocks until the pool is done with it,
// and the planner gives a kernel's output a buffer no operand aliases.
unsafe impl Send for View {}
unsafe impl Sync for View {}

/// Elements from which a widening or rounding conversion is split across the thread pool.
const PARALLEL_CONVERT: usize = 1 << 16;
/// Elements per task of a split conversion.
const CONVERT_CHUNK: usize = 1 << 14;

/// bf16 bit patterns (little-endian bytes, any alignment) widened to f32, exactly.
fn bf16_to_f32(src: &[u8], dst: &mut [f32]) {
    use rayon::prelude::*;
    let run = |s: &[u8], d: &mut [f32]| {
        for (o, h) in d.iter_mut().zip(s.chunks_exact(2)) {
            *o = f32::from_bits(u32::from(u16::from_le_bytes([h[0], h[1]])) << 16);
        }
    };
    if dst.len() >= PARALLEL_CONVERT {
        dst.par_chunks_mut(CONVERT_CHUNK)
            .zip(src.par_chunks(2 * CONVERT_CHUNK))
            .for_each(|(d, s)| run(s, d));
    } else {
        run(src, dst);
    }
}

/// f32 values rounded to bf16, written as little-endian bytes (any alignment).
fn f32_to_bf16(src: &[f32], dst: &mut [u8]) {
    use rayon::prelude::*;
    let run = |s: &[f32], d: &mut [u8]| {
        for (o, &x) in d.chunks_exact_mut(2).zip(s) {
            o.copy_from_slice(&f32_to_bf16_bits(x).to_le_bytes());
        }
    };
    if src.len() >= PARALLEL_CONVERT {
        dst.par_chunks_mut(2 * CONVERT_CHUNK)
            .zip(src.par_chunks(CONVERT_CHUNK))
            .for_each(|(d, s)| run(s, d));
    } else {
        run(src, dst);
    }
}

/// `buf`'s values rounded to bf16 precision in place (split across the pool when large).
fn round_to_bf16(buf: &mut [f32]) {
    use rayon::prelude::*;
    let run = |c: &mut [f32]| {
        for x in c {
            *x = f32::from_bits(u32::from(f32_to_bf16_bits(*x)) << 16);
        }
    };
    if buf.len() >= PARALLEL_CONVERT {
        buf.par_chunks_mut(CONVERT_CHUNK).for_each(run);
    } else {
        run(buf);
    }
}

fn to_f32(v: &View) -> Result<Vec<f32>, String> {
    let mut out = Vec::new();
    to_f32_into(v, &mut out)?;
    Ok(out)
}

/// The values of `v` as f32 in `out` (its allocation reused).
fn to_f32_into(v: &View, out: &mut Vec<f32>) -> Result<(), String> {
    let n: usize = v.dims.iter().product();
    out.clear();
    if n == 0 {
        return Ok(());
    }
    if v.elem == ElemType::BF16 {
        out.resize(n, 0.0);
        // SAFETY: the buffer holds `n` bf16 values (2n bytes), read bytewise.
        bf16_to_f32(unsafe { std::slice::from_raw_parts(v.ptr, 2 * n) }, out);
        return Ok(());
    }
    *out = to_f32_fresh(v, n)?;
    Ok(())
}

fn to_f32_fresh(v: &View, n: usize) -> Result<Vec<f32>, String> {
    if v.elem == ElemType::F32 && !(v.ptr as usize).is_multiple_of(4) {
        let mut out = vec![0f32; n];
        // SAFETY: the buffer holds `n` f32 values; copied bytewise since it is unaligned.
        unsafe { std::ptr::copy_nonoverlapping(v.ptr, out.as_mut_ptr() as *mut u8, n * 4) };
        return Ok(out);
    }
    match v.elem {
        // SAFETY: the buffer holds `n` elements of its type.
        ElemType::F32 => Ok(unsafe { std::slice::from_raw_parts(v.ptr as *const f32, n) }.to_vec()),
        // SAFETY: the buffer holds `n` f16 values (2n bytes), read bytewise (any alignment).
        ElemType::F16 => Ok(unsafe { std::slice::from_raw_parts(v.ptr, 2 * n) }
            .chunks_exact(2)
            .map(|h| f16::from_le_bytes([h[0], h[1]]).to_f32())
            .collect()),
        // fp8/f4e2m1fn bit patterns, one byte each, widened exactly.
        e if hlo_ir::narrow::is_narrow_float(e) => {
            Ok(unsafe { std::slice::from_raw_parts(v.ptr, n) }
                .iter()
                .map(|&b| hlo_ir::narrow::to_f32(e, b).expect("narrow float"))
                .collect())
        }
        e => Err(format!("{e} operands are not supported by the dot/convolution library kernels")),
    }
}

fn from_f32(v: &View, data: &[f32]) -> Result<(), String> {
    if data.is_empty() {
        return Ok(());
    }
    match v.elem {
        // SAFETY: the buffer holds `data.len()` elements of its type.
        ElemType::F32 => unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), v.ptr as *mut f32, data.len())
        },
        // SAFETY: the buffer holds `data.len()` bf16 values, written bytewise.
        ElemType::BF16 => {
            f32_to_bf16(data, unsafe { std::slice::from_raw_parts_mut(v.ptr, 2 * data.len()) })
        }
        ElemType::F16 => {
            // SAFETY: the buffer holds `data.len()` f16 values, written bytewise.
            let out = unsafe { std::slice::from_raw_parts_mut(v.ptr, 2 * data.len()) };
            for (o, &x) in out.chunks_exact_mut(2).zip(data) {
                o.copy_from_slice(&f16::from_f32(x).to_le_bytes());
            }
        }
        // Rounded as the interpreter rounds a dot on these types (through f16).
        e if hlo_ir::narrow::is_narrow_float(e) => {
            let out = unsafe { std::slice::from_raw_parts_mut(v.ptr, data.len()) };
            for (o, &x) in out.iter_mut().zip(data) {
                *o = hlo_ir::narrow::from_f32(e, hlo_ir::narrow::round_op(e, x))
                    .expect("narrow float");
            }
        }
        e => {
            return Err(format!(
                "{e} results are not supported by the dot/convolution library kernels"
            ));
        }
    }
    Ok(())
}

/// Runs `f` on f32 copies (or the buffers themselves when they are f32 and nothing is
/// to be rounded); `round[i]`: operand `i`'s f32 values are rounded to bf16 precision in
/// the copy (exactly what converting them to bf16 and widening back gives).
fn with_f32(
    lhs: &View,
    rhs: &View,
    out: &View,
    round: [bool; 2],
    f: impl FnOnce(&[f32], &[f32], &mut [f32]),
) -> Result<(), String> {
    let n: usize = out.dims.iter().product();
    let aligned =
        |v: &View| (v.ptr as usize).is_multiple_of(4) && v.dims.iter().product::<usize>() > 0;
    let all_f32 = round == [false; 2]
        && lhs.elem == ElemType::F32
        && rhs.elem == ElemType::F32
        && out.elem == ElemType::F32
        && aligned(lhs)
        && aligned(rhs)
        && aligned(out);
    if all_f32 {
        // SAFETY: f32 buffers of the planned sizes; the output never aliases an operand.
        let (l, r, o) = unsafe {
            (
                std::slice::from_raw_parts(lhs.ptr as *const f32, lhs.dims.iter().product()),
                std::slice::from_raw_parts(rhs.ptr as *const f32, rhs.dims.iter().product()),
                std::slice::from_raw_parts_mut(out.ptr as *mut f32, n),
            )
        };
        f(l, r, o);
        return Ok(());
    }
    // Widened copies in buffers kept per thread: a training step's dots reuse them, with
    // no allocation (and no fresh pages to fault in) per call.
    SCRATCH.with(|cell| {
        let mut guard = cell.try_borrow_mut();
        let mut own = Default::default();
        let (l, r, o) = match guard.as_deref_mut() {
            Ok(bufs) => bufs,
            Err(_) => &mut own,
        };
        to_f32_into(lhs, l)?;
        to_f32_into(rhs, r)?;
        for (buf, round) in [(&mut *l, round[0]), (&mut *r, round[1])] {
            if round {
                round_to_bf16(buf);
            }
        }
        o.clear();
        o.resize(n, 0.0);
        f(l, r, o);
        from_f32(out, o)
    })
}

thread_local! {
    /// The widened operands and result of [`with_f32`] on this thread.
    static SCRATCH: std::cell::RefCell<(Vec<f32>, Vec<f32>, Vec<f32>)> =
        std::cell::RefCell::default();
}

/// A dot on the library pool (see [`crate::pool::on_library_pool`]). `round[i]`: operand
/// `i` holds f32 values to be rounded to bf16 first (a convert the dot absorbed). Returns
/// the path it took ([`crate::cpu`]'s names: `amx-bf16`, a `gemm crate` or `small gemm`
/// one, or the integer loop).
pub(crate) fn dot(
    lhs: &View,
    rhs: &View,
    out: &View,
    round: [bool; 2],
    dims: &hlo_ir::op::DotDims,
) -> Result<&'static str, String> {
    if small(&[lhs, rhs, out], dot_work(lhs, out, dims)) {
        // One thread's work: here, in the executor's (flushing) mode, without a hand-off
        // to the pool and back.
        return crate::fpenv::with_host_fp_mode(|| dot_here(lhs, rhs, out, round, dims, false));
    }
    crate::pool::on_library_pool(|| dot_here(lhs, rhs, out, round, dims, true))
}

/// Multiply-adds of a dot: output elements times the contracted size.
fn dot_work(lhs: &View, out: &View, dims: &hlo_ir::op::DotDims) -> usize {
    let k: usize = dims.lhs_contracting.iter().filter_map(|&d| lhs.dims.get(d as usize)).product();
    out.dims.iter().product::<usize>().saturating_mul(k)
}

/// Whether a library step stays on one thread anyway (below the GEMM's split and task
/// thresholds, operands too small for parallel widening), so that it runs on the calling
/// thread. Measured (release, idle 2-core host, three alternating runs of 300 steps): the
/// bench MLP-Adam step (three dots with a 10-wide side) took 3322/3349/3302 µs this way,
/// 3355/3386/3323 µs with every dot handed to the pool.
fn small(views: &[&View], work: usize) -> bool {
    work < hlo_kernels::gemm::TASKS_MNK
        && views.iter().all(|v| v.dims.iter().product::<usize>() < PARALLEL_CONVERT)
}

fn dot_here(
    lhs: &View,
    rhs: &View,
    out: &View,
    round: [bool; 2],
    dims: &hlo_ir::op::DotDims,
    on_pool: bool,
) -> Result<&'static str, String> {
    if lhs.elem.is_integer() || out.elem.is_integer() {
        return dot_int(lhs, rhs, out, dims).map(|()| "integer loop");
    }
    let gemm_path = || hlo_kernels::cpu::dot(&lhs.dims, &rhs.dims, dims);
    if lhs.elem == ElemType::F64 && rhs.elem == ElemType::F64 && out.elem == ElemType::F64 {
        return dot_f64(lhs, rhs, out, dims).map(|()| gemm_path());
    }
    if dot_bf16(lhs, rhs, out, round, dims, on_pool) {
        return Ok(hlo_kernels::cpu::bf16_dot());
    }
    with_f32(lhs, rhs, out, round, |l, r, o| {
        hlo_kernels::dot::dot_general_f32(l, &lhs.dims, r, &rhs.dims, dims, o)
    })
    .map(|()| gemm_path())
}

/// A dot of bf16 operands (or f32 ones it rounds to bf16, absorbed converts) into a bf16
/// or f32 result on a bf16 unit ([`hlo_kernels::bf16_gemm`]: AMX, or AVX512-BF16's
/// `vdpbf16ps` where that pays), when the host has one, this thread flushes subnormals as
/// both do, and the dot is a batched GEMM over its operands in place; `false` when it did
/// not run. `on_pool`: on the library pool, so it
/// may split across its threads.
///
/// Measured (release, 2-core host, `hloc run --repeat 100`): the bench MLP's
/// `bf16[128,784] · bf16[784,1024]` took 1160-1420 µs widened to f32 (the same dot in f32
/// 745-800 µs; XLA 1107 µs in bf16) and 233-280 µs on AMX; on the 2-core AMD EPYC
/// (AVX512-BF16, no AMX), one thread, 2118-2141 µs widened and 1042-1046 µs on
/// `vdpbf16ps` (`hlo_kernels::bf16_gemm::dp::pays`).
fn dot_bf16(
    lhs: &View,
    rhs: &View,
    out: &View,
    round: [bool; 2],
    dims: &hlo_ir::op::DotDims,
    on_pool: bool,
) -> bool {
    use hlo_kernels::bf16_gemm::{self as kernel, Dst, Mat, Src};
    let src = |v: &View, round: bool| match v.elem {
        ElemType::BF16 => Some(Src::Bf16),
        ElemType::F32 if round => Some(Src::F32),
        _ => None,
    };
    let (Some(sa), Some(sb)) = (src(lhs, round[0]), src(rhs, round[1])) else { return false };
    let dst = match out.elem {
        ElemType::BF16 => Dst::Bf16,
        ElemType::F32 => Dst::F32,
        _ => return false,
    };
    if !kernel::available() || !thread_flushes() {
        return false;
    }
    let Some(v) = hlo_kernels::dot::gemm_views(&lhs.dims, &rhs.dims, dims) else {
        return false;
    };
    let (s, batch) = (v.s, v.lhs_offsets.len());
    if s.k == 0
        || s.mnk() <= hlo_kernels::gemm::SMALL_MNK
        || !kernel::takes(s)
        || out.dims.iter().product::<usize>() != batch * s.m * s.n
    {
        return false;
    }
    let a = Mat { ptr: lhs.ptr, src: sa, offsets: &v.lhs_offsets, rs: v.l.0, cs: v.l.1 };
    let b = Mat { ptr: rhs.ptr, src: sb, offsets: &v.rhs_offsets, rs: v.r.0, cs: v.r.1 };
    // SAFETY: the host has the instructions (checked); the views address exactly their
    // buffers' elements (the layout is derived from the same dims, counts checked), and
    // the planner gives the output a buffer no operand aliases.
    unsafe { kernel::gemm(s, a, b, out.ptr, dst, on_pool) };
    true
}

/// Whether this thread flushes subnormals (FTZ and DAZ), as AMX and `vdpbf16ps` always do.
fn thread_flushes() -> bool {
    let m = crate::fpenv::read_mxcsr();
    let both = crate::fpenv::MXCSR_FTZ | crate::fpenv::MXCSR_DAZ;
    m & both == both
}

/// The f64 values of `v`, copied: its buffer need not be 8-byte aligned.
fn read_f64(v: &View) -> Vec<f64> {
    let n: usize = v.dims.iter().product();
    let mut x = vec![0f64; n];
    if n > 0 {
        // SAFETY: the buffer holds `n` f64 values; copied bytewise (any alignment).
        unsafe { std::ptr::copy_nonoverlapping(v.ptr, x.as_mut_ptr() as *mut u8, n * 8) };
    }
    x
}

/// Writes `o` into the f64 buffer `v` (bytewise: any alignment).
fn write_f64(v: &View, o: &[f64]) {
    if !o.is_empty() {
        // SAFETY: the output buffer holds `o.len()` f64 values and aliases no operand copy.
        unsafe { std::ptr::copy_nonoverlapping(o.as_ptr() as *const u8, v.ptr, o.len() * 8) };
    }
}

/// An f64 dot (the expansions of f64 `cholesky`/`triangular-solve` have them), on copies
/// of the operands: their buffers need not be 8-byte aligned.
fn dot_f64(lhs: &View, rhs: &View, out: &View, dims: &hlo_ir::op::DotDims) -> Result<(), String> {
    let (l, r) = (read_f64(lhs), read_f64(rhs));
    let mut o = vec![0f64; out.dims.iter().product()];
    hlo_kernels::dot::dot_general_f64(&l, &lhs.dims, &r, &rhs.dims, dims, &mut o);
    write_f64(out, &o);
    Ok(())
}

/// A convolution: integer and pred ones by [`conv_int`], f64 operands into f64 in f64, the
/// rest through f32 (see the module doc).
pub(crate) fn conv(
    lhs: &View,
    rhs: &View,
    out: &View,
    c: &hlo_ir::op::Convolution,
) -> Result<&'static str, String> {
    crate::pool::on_library_pool(|| conv_here(lhs, rhs, out, c))
}

/// [`conv`] on this thread; returns the path it took ([`hlo_kernels::cpu::conv_path`]).
fn conv_here(
    lhs: &View,
    rhs: &View,
    out: &View,
    c: &hlo_ir::op::Convolution,
) -> Result<&'static str, String> {
    if [lhs, rhs, out].iter().any(|v| is_int_or_pred(v.elem)) {
        return conv_int(lhs, rhs, out, c).map(|()| hlo_kernels::cpu::CONV_DIRECT);
    }
    let f64s = [lhs, rhs, out].iter().filter(|v| v.elem == ElemType::F64).count();
    if f64s == 3 {
        let (l, r) = (read_f64(lhs), read_f64(rhs));
        let mut o = vec![0f64; out.dims.iter().product()];
        let path =
            hlo_kernels::conv::convolution_f64(&l, &lhs.dims, &r, &rhs.dims, c, &mut o, &out.dims);
        write_f64(out, &o);
        return Ok(path);
    }
    if f64s > 0 {
        return Err(format!(
            "a convolution of {} and {} into {} (f64 convolves f64 operands into f64 only)",
            lhs.elem, rhs.elem, out.elem
        ));
    }
    let mut path = "empty";
    with_f32(lhs, rhs, out, [false; 2], |l, r, o| {
        path = hlo_kernels::conv::convolution_f32(l, &lhs.dims, r, &rhs.dims, c, o, &out.dims);
    })?;
    Ok(path)
}

/// An integer or pred element type (what [`conv_int`] convolves).
pub(crate) fn is_int_or_pred(e: ElemType) -> bool {
    e.is_integer() || e == ElemType::Pred
}

/// An integer or pred convolution, as the interpreter computes it: operands widened to
/// 64 bits (sign- or zero-extended: the same values modulo the result width as the
/// interpreter's conversion to the result type), wrap-around 64-bit sums of products,
/// wrapped to the result type (a pred result is that wrapped sum's being nonzero).
fn conv_int(lhs: &View, rhs: &View, out: &View, c: &hlo_ir::op::Convolution) -> Result<(), String> {
    if ![lhs, rhs, out].iter().all(|v| is_int_or_pred(v.elem)) {
        return Err(format!(
            "a convolution of {} and {} into {} (integer convolutions take integer or pred operands and results)",
            lhs.elem, rhs.elem, out.elem
        ));
    }
    let (l, r) = (read_ints(lhs)?, read_ints(rhs)?);
    let mut o = vec![0i64; out.dims.iter().product()];
    hlo_kernels::conv::convolution_i64(&l, &lhs.dims, &r, &rhs.dims, c, &mut o, &out.dims);
    let sz = crate::codegen::ty::size_of(out.elem) as usize;
    for (i, &acc) in o.iter().enumerate() {
        let w = hlo_ir::literal::wrap_int(out.elem, acc);
        let v = if out.elem == ElemType::Pred { (w != 0) as i64 } else { w };
        // SAFETY: element `i` of the result is `sz` bytes (`sz` <= 8).
        unsafe { std::ptr::copy_nonoverlapping(v.to_le_bytes().as_ptr(), out.ptr.add(i * sz), sz) };
    }
    Ok(())
}

fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * dims[d + 1];
    }
    s
}

/// Stable merge sort of `v` by `less`.
fn merge_sort(v: &mut [usize], tmp: &mut Vec<usize>, less: &mut dyn FnMut(usize, usize) -> bool) {
    if v.len() <= 1 {
        return;
    }
    let mid = v.len() / 2;
    merge_sort(&mut v[..mid], tmp, less);
    merge_sort(&mut v[mid..], tmp, less);
    tmp.clear();
    let (mut i, mut j) = (0, mid);
    while i < mid && j < v.len() {
        // Take from the right only when strictly less: equal keys keep their order.
        if less(v[j], v[i]) {
            tmp.push(v[j]);
            j += 1;
        } else {
            tmp.push(v[i]);
            i += 1;
        }
    }
    tmp.extend_from_slice(&v[i..mid]);
    tmp.extend_from_slice(&v[j..]);
    v.copy_from_slice(tmp);
}

/// Elements of loop-kernel work one call of a sort's compiled comparator counts as, when
/// deciding how many parts a sort splits into ([`crate::pool::in_parts`]). Measured
/// (release, this 2-core host, the other core mostly idle, `hloc run --repeat 30`): sorting
/// rows of 64 f32 takes about 67 ns per element (550 µs for 8k elements, 22.6 ms for 256k)
/// against 0.23 ns per element of an elementwise loop kernel, and two parts halve it from
/// 8k elements on (550 to 250-267 µs); one comparator call (6 per element) is thus worth
/// about 40 elements. 16 keeps a margin: a sort splits from about 2k elements.
const SORT_COMPARE_WORK: u64 = 16;

/// [`SORT_COMPARE_WORK`] for top-k, whose comparisons are inlined f64 compares (a few
/// nanoseconds each rather than a call of generated code).
const TOPK_COMPARE_WORK: u64 = 4;

/// `sort` along `dim` of every operand, by the compiled comparator (always stable).
pub fn sort(cmp: crate::jit::KernelFn, operands: &[View], outs: &[View], dim: usize) {
    let dims = &operands[0].dims;
    let st = strides(dims);
    let n = dims[dim];
    let rows: usize = dims.iter().product::<usize>() / n.max(1);
    let sizes: Vec<usize> =
        operands.iter().map(|o| crate::codegen::ty::size_of(o.elem) as usize).collect();
    // Rows are independent and each is sorted whole by one part, so the split changes no
    // bit. The work is the comparisons (n log n per row), each a call of the comparator,
    // weighed as [`SORT_COMPARE_WORK`] elements of a loop kernel.
    let work =
        (rows * n) as u64 * u64::from(usize::BITS - n.leading_zeros()).max(1) * SORT_COMPARE_WORK;
    crate::pool::in_parts(rows as i64, work, |lo, hi| {
        let mut order: Vec<usize> = Vec::with_capacity(n);
        let mut tmp = Vec::with_capacity(n);
        let mut args: Vec<*mut u8> = vec![std::ptr::null_mut(); 2 * operands.len() + 1];
        let mut result = 0u8;
        for r in lo as usize..hi as usize {
            // The row's base offset: r enumerates every index with idx[dim] = 0.
            let (mut rem, mut base) = (r, 0usize);
            for d in (0..dims.len()).rev() {
                if d == dim {
                    continue;
                }
                base += (rem % dims[d]) * st[d];
                rem /= dims[d];
            }
            order.clear();
            order.extend(0..n);
            let mut less = |a: usize, b: usize| -> bool {
                for (k, o) in operands.iter().enumerate() {
                    args[2 * k] = o.ptr.wrapping_add((base + a * st[dim]) * sizes[k]);
                    args[2 * k + 1] = o.ptr.wrapping_add((base + b * st[dim]) * sizes[k]);
                }
                args[2 * operands.len()] = &mut result as *mut u8;
                // SAFETY: the comparator reads one element of each operand at the given
                // pointers (inside the row) and writes one byte (this part's own).
                unsafe { cmp(args.as_ptr(), 0, 1) };
                result != 0
            };
            merge_sort(&mut order, &mut tmp, &mut less);
            for (k, (o, out)) in operands.iter().zip(outs).enumerate() {
                let sz = sizes[k];
                for (i, &src) in order.iter().enumerate() {
                    // SAFETY: both offsets are inside row `r` of equally shaped buffers; no
                    // other part writes that row.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            o.ptr.add((base + src * st[dim]) * sz),
                            out.ptr.add((base + i * st[dim]) * sz),
                            sz,
                        )
                    };
                }
            }
        }
    });
}

/// `topk` along the last dimension: values ordered by IEEE total order (largest first when
/// `largest`), ties by index, as the interpreter does.
pub(crate) fn topk(
    a: &View,
    values: &View,
    indices: &View,
    k: usize,
    largest: bool,
) -> Result<(), String> {
    let last = *a.dims.last().ok_or("topk of a scalar")?;
    let n: usize = a.dims.iter().product();
    let rows = n / last.max(1);
    let k = k.min(last);
    let key: Vec<f64> = match a.elem {
        ElemType::F32 | ElemType::BF16 | ElemType::F16 => {
            to_f32(a)?.into_iter().map(|x| x as f64).collect()
        }
        // SAFETY: the buffer holds `n` elements of its type.
        ElemType::S32 => unsafe { std::slice::from_raw_parts(a.ptr as *const i32, n) }
            .iter()
            .map(|&x| x as f64)
            .collect(),
        e => return Err(format!("topk of {e} is not supported")),
    };
    if indices.elem != ElemType::S32 {
        return Err("topk indices must be s32".into());
    }
    let sz = crate::codegen::ty::size_of(a.elem) as usize;
    // Rows are independent, each ordered whole by one part: the split changes no bit.
    let work = n as u64 * u64::from(usize::BITS - last.leading_zeros()).max(1) * TOPK_COMPARE_WORK;
    crate::pool::in_parts(rows as i64, work, |lo, hi| {
        let mut order: Vec<usize> = Vec::with_capacity(last);
        for r in lo as usize..hi as usize {
            order.clear();
            order.extend(0..last);
            order.sort_by(|&x, &y| {
                let o = key[r * last + x].total_cmp(&key[r * last + y]);
                (if largest { o.reverse() } else { o }).then(x.cmp(&y))
            });
            for (i, &o) in order[..k].iter().enumerate() {
                // SAFETY: offsets inside row `r` of the operand and of the k-wide results,
                // which no other part writes.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        a.ptr.add((r * last + o) * sz),
                        values.ptr.add((r * k + i) * sz),
                        sz,
                    );
                    std::ptr::write_unaligned((indices.ptr as *mut i32).add(r * k + i), o as i32);
                }
            }
        }
    });
    Ok(())
}

fn read_ints(v: &View) -> Result<Vec<i64>, String> {
    let n: usize = v.dims.iter().product();
    let sz = crate::codegen::ty::size_of(v.elem) as usize;
    let signed = v.elem.class() == hlo_ir::types::ElemClass::Signed;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut buf = [0u8; 8];
        // SAFETY: element `i` of the buffer is `sz` bytes.
        unsafe { std::ptr::copy_nonoverlapping(v.ptr.add(i * sz), buf.as_mut_ptr(), sz) };
        let raw = u64::from_le_bytes(buf);
        let bits = (sz * 8) as u32;
        out.push(if signed && bits < 64 {
            ((raw << (64 - bits)) as i64) >> (64 - bits)
        } else {
            raw as i64
        });
    }
    Ok(out)
}

/// Integer `dot` (wrap-around accumulation at 64 bits, truncated to the result type), for
/// the rare integer dots; the result type's width wraps as XLA's does.
fn dot_int(lhs: &View, rhs: &View, out: &View, dn: &hlo_ir::op::DotDims) -> Result<(), String> {
    if !(lhs.elem.is_integer() && rhs.elem.is_integer() && out.elem.is_integer()) {
        return Err(format!(
            "dot of {} and {} into {} is not supported",
            lhs.elem, rhs.elem, out.elem
        ));
    }
    let (l, r) = (read_ints(lhs)?, read_ints(rhs)?);
    let (ld, rd) = (&lhs.dims, &rhs.dims);
    let lb: Vec<usize> = dn.lhs_batch.iter().map(|&d| d as usize).collect();
    let rb: Vec<usize> = dn.rhs_batch.iter().map(|&d| d as usize).collect();
    let lc: Vec<usize> = dn.lhs_contracting.iter().map(|&d| d as usize).collect();
    let rc: Vec<usize> = dn.rhs_contracting.iter().map(|&d| d as usize).collect();
    let lf: Vec<usize> = (0..ld.len()).filter(|d| !lb.contains(d) && !lc.contains(d)).collect();
    let rf: Vec<usize> = (0..rd.len()).filter(|d| !rb.contains(d) && !rc.contains(d)).collect();
    let (ls, rs) = (strides(ld), strides(rd));
    let pick = |d: &[usize], of: &[usize]| d.iter().map(|&x| of[x]).collect::<Vec<usize>>();
    let (bdims, cdims, lfd, rfd) = (pick(&lb, ld), pick(&lc, ld), pick(&lf, ld), pick(&rf, rd));
    let count = |d: &[usize]| d.iter().product::<usize>();
    let unravel = |mut i: usize, d: &[usize]| {
        let mut v = vec![0; d.len()];
        for k in (0..d.len()).rev() {
            v[k] = i % d[k];
            i /= d[k];
        }
        v
    };
    let sz = crate::codegen::ty::size_of(out.elem) as usize;
    let mut o = 0usize;
    for b in 0..count(&bdims) {
        let bi = unravel(b, &bdims);
        for i in 0..count(&lfd) {
            let ii = unravel(i, &lfd);
            for j in 0..count(&rfd) {
                let jj = unravel(j, &rfd);
                let lo: usize = lb.iter().zip(&bi).map(|(&d, &x)| x * ls[d]).sum::<usize>()
                    + lf.iter().zip(&ii).map(|(&d, &x)| x * ls[d]).sum::<usize>();
                let ro: usize = rb.iter().zip(&bi).map(|(&d, &x)| x * rs[d]).sum::<usize>()
                    + rf.iter().zip(&jj).map(|(&d, &x)| x * rs[d]).sum::<usize>();
                let mut acc = 0i64;
                for c in 0..count(&cdims) {
                    let ci = unravel(c, &cdims);
                    let l2 = lo + lc.iter().zip(&ci).map(|(&d, &x)| x * ls[d]).sum::<usize>();
                    let r2 = ro + rc.iter().zip(&ci).map(|(&d, &x)| x * rs[d]).sum::<usize>();
                    acc = acc.wrapping_add(l[l2].wrapping_mul(r[r2]));
                }
                // SAFETY: element `o` of the result is `sz` bytes.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        acc.to_le_bytes().as_ptr(),
                        out.ptr.add(o * sz),
                        sz,
                    )
                };
                o += 1;
            }
        }
    }
    Ok(())
}
