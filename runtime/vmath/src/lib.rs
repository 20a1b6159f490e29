//! Host vector math for `hlo-runtime`'s JIT kernels: `exp`, `expm1`, `log`, `log1p`, `tanh`, `logistic` and `pow` over
//! arrays of f32, at the widest vector width the host has (AVX-512: 16 lanes, AVX2: 8),
//! for generated loops to call on chunks of elements the way XLA's CPU code calls its
//! runtime's vectorized math.
//!
//! Cranelift emits 128-bit vectors only, so the inline polynomials of
//! `hlo-runtime`'s `codegen::math` run four lanes at a time. Each function here is the same
//! algorithm, step for step: the same operations on the same constants in the same order,
//! each an IEEE-rounded `f32`/`f64` operation or `fma`, so a lane computes exactly the bits
//! the inline code computes for it, in either FP mode (the call runs on the kernel's thread,
//! in its MXCSR). `hlo-runtime`'s `tests/math_ulp.rs` checks that bit for bit on every sweep of the
//! emitters' accuracy tests, in the default mode and under FTZ/DAZ. The scalar functions
//! below are written once and compiled per instruction set (`#[target_feature]`), where
//! LLVM vectorizes their loops; which one a process uses is decided once, by run-time
//! feature detection.
//!
//! Measured (release, 1M elements, one thread, this project's 2-core AVX-512 host):
//! `exp` 0.30 ns/element with AVX-512, 0.42 with AVX2, against 1.4 for the inline f32x4
//! polynomial; see the README's "Beside XLA" section for the kernels.
//!
//! LLVM assumes IEEE subnormals when it optimizes: it folds `x * 1.0` to `x` and may turn
//! a float comparison with zero into an integer test of the bits, neither of which holds
//! under DAZ (a subnormal reads as zero). The one multiplication by one the emitters make
//! on purpose (`log1p`'s tiny-argument path) and every comparison with zero therefore use
//! constants read at run time, which the optimizer cannot see through. (Comparisons with
//! other constants give the same answer for a subnormal and for zero.)

use consts::*;

pub mod cpu;

/// The constants the inline emitters (`hlo-runtime`'s `codegen::math`) and these entry
/// points share. Polynomial coefficients are f32 values (written as their exact decimal
/// expansions), fitted as minimax polynomials (Lawson iteration, coefficients rounded to
/// f32 one at a time with the rest refitted) unless noted.
pub mod consts {
    /// 1.5 * 2^23: `x + MAGIC` rounds `x` to an integer held in the low mantissa bits.
    pub const MAGIC: f64 = 12582912.0;
    pub const MAGIC_BITS: i64 = 0x4b40_0000;
    pub const LOG2E: f64 = 1.4426950216293335; // f32(1/ln 2)
    /// ln 2 = LN2_HI + LN2_LO (f32 parts).
    pub const LN2_HI: f64 = 0.6931471824645996;
    pub const LN2_LO: f64 = -1.904654212125934e-9;

    /// e^r = 1 + r + r^2 P(r) on |r| <= ln2/2; relative error 3.1e-9.
    pub const EXP_P: [f64; 5] = [
        0.4999999403953552,
        0.1666652113199234,
        0.04166826233267784,
        0.008368674665689468,
        0.0013821055181324482,
    ];
    /// e^r - 1 = r + r^2 P(r) on |r| <= ln2/2; relative error 4.3e-10.
    pub const EXPM1_P: [f64; 6] = [
        0.5,
        0.1666666567325592,
        0.04166649281978607,
        0.008333546109497547,
        0.0013932327274233103,
        0.0001976163184735924,
    ];

    // log/log1p: FreeBSD/musl logf kernel, |(log(1+s)-log(1-s))/s - Lg(s)| < 2^-34.24.
    pub const LG1: f64 = 0.6666666269302368; // 0xaaaaaa.0p-24
    pub const LG2: f64 = 0.40000972151756287; // 0xccce13.0p-25
    pub const LG3: f64 = 0.2849878668785095; // 0x91e9ee.0p-25
    pub const LG4: f64 = 0.24279078841209412; // 0xf89e26.0p-26
    /// ln 2 with trailing zeros in the high part, so `k * LOG_LN2_HI` is exact.
    pub const LOG_LN2_HI: f64 = 0.6931381225585938; // 0x3f317180
    pub const LOG_LN2_LO: f64 = 9.05800061445916e-6; // 0x3717f7d1

    /// tanh(x) = x + x^3 P(x^2) on |x| <= 0.55; relative error 1.1e-9.
    pub const TANH_P: [f64; 5] = [
        -0.33333316445350647,
        0.133325457572937,
        -0.05384785309433937,
        0.02105250582098961,
        -0.00624606478959322,
    ];
    pub const TANH_SMALL: f64 = 0.55;

    /// log(m) = 2 atanh(s) = s (2 + 2/3 s^2 + 2/5 s^4 + …) to s^17, in f64 (`pow`).
    pub const POW_LOG_P: [f64; 9] = pow_log_p();
    /// 2^f = sum (f ln2)^j / j! to f^11, in f64 (`pow`).
    pub const POW_EXP2_P: [f64; 12] = pow_exp2_p();

    const fn pow_log_p() -> [f64; 9] {
        let mut c = [0.0; 9];
        let mut j = 0;
        while j < 9 {
            c[j] = 2.0 / (2 * j + 1) as f64;
            j += 1;
        }
        c
    }

    const fn pow_exp2_p() -> [f64; 12] {
        let mut c = [1.0f64; 12];
        let mut j = 1;
        while j < 12 {
            c[j] = c[j - 1] * std::f64::consts::LN_2 / j as f64;
            j += 1;
        }
        c
    }
}

#[inline(always)]
fn bits(x: f32) -> i32 {
    x.to_bits() as i32
}
#[inline(always)]
fn float(i: i32) -> f32 {
    f32::from_bits(i as u32)
}
#[inline(always)]
fn sel(m: bool, x: f32, y: f32) -> f32 {
    if m { x } else { y }
}
#[inline(always)]
fn seli(m: bool, x: i32, y: i32) -> i32 {
    if m { x } else { y }
}
/// `x` clamped to `[lo, hi]`; NaN stays NaN (the emitters' `clamp`).
#[inline(always)]
fn clamp(x: f32, lo: f32, hi: f32) -> f32 {
    let x = if x > hi { hi } else { x };
    if x < lo { lo } else { x }
}
#[inline(always)]
fn poly(x: f32, c: &[f64]) -> f32 {
    let (last, rest) = c.split_last().expect("coefficients");
    let mut acc = *last as f32;
    for &ck in rest.iter().rev() {
        acc = acc.mul_add(x, ck as f32);
    }
    acc
}
#[inline(always)]
fn pow2i(n: i32) -> f32 {
    float(n.wrapping_add(127).wrapping_shl(23))
}

/// `n = round(x / ln 2)` as a float and as an integer (the magic-number rounding).
#[inline(always)]
fn ln2_multiple(x: f32) -> (f32, i32) {
    let magic = MAGIC as f32;
    let t = x.mul_add(LOG2E as f32, magic);
    (t - magic, bits(t).wrapping_add(-(MAGIC_BITS as i32)))
}

#[inline(always)]
fn exp_core(x: f32) -> f32 {
    let x = clamp(x, -104.0, 88.8);
    let (nf, n) = ln2_multiple(x);
    let r = nf.mul_add(-LN2_HI as f32, x);
    let r = nf.mul_add(-LN2_LO as f32, r);
    let p = poly(r, &EXP_P);
    let r2 = r * r;
    let q = r2.mul_add(p, r);
    let e = q + 1.0;
    let n1 = n >> 1;
    let n2 = n.wrapping_sub(n1);
    let e = e * pow2i(n1);
    e * pow2i(n2)
}

#[inline(always)]
fn expm1_core(x: f32) -> f32 {
    let ax = x.abs();
    let tiny = ax < 2f32.powi(-25);
    let xc = clamp(x, -18.0, 88.8);
    let (nf, n) = ln2_multiple(xc);
    let r1 = nf.mul_add(-LN2_HI as f32, xc);
    let corr = nf * (-LN2_LO as f32);
    let p = poly(r1, &EXPM1_P);
    let r2 = r1 * r1;
    let q = r2.mul_add(p, r1);
    let corr = corr.mul_add(q, corr);
    let lo = r2.mul_add(p, corr);
    let top = n > 127;
    let n = n.wrapping_sub(seli(top, 1, 0));
    let two_n = pow2i(n);
    let tm1 = two_n + -1.0;
    let hi = two_n.mul_add(r1, tm1);
    let res = two_n.mul_add(lo, hi);
    let res = res * sel(top, 2.0, 1.0);
    sel(tiny, x, res)
}

#[inline(always)]
fn logistic1(x: f32, k: Opaque) -> f32 {
    let e = exp_core(-x.abs());
    let num = sel(x < k.zero, e, 1.0);
    num / (e + 1.0)
}

#[inline(always)]
fn tanh1(x: f32) -> f32 {
    let ax = x.abs();
    let z = x * x;
    let p = poly(z, &TANH_P);
    let small = (x * z).mul_add(p, x);
    let e = expm1_core(ax + ax);
    let q = 2.0 / (e + 2.0);
    let big = 1.0 - q;
    let big = float((bits(big) & 0x7fff_ffff) | (bits(x) & i32::MIN));
    let res = sel(ax < TANH_SMALL as f32, small, big);
    sel(ax < 2f32.powi(-13), x, res)
}

#[inline(always)]
fn log_kernel(f: f32, k: i32, corr: Option<f32>) -> f32 {
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * w.mul_add(LG4 as f32, LG2 as f32);
    let t2 = z * w.mul_add(LG3 as f32, LG1 as f32);
    let r = t2 + t1;
    let hfsq = (f * 0.5) * f;
    let dk = k as f32;
    let mut lo = dk * LOG_LN2_LO as f32;
    if let Some(c) = corr {
        lo += c;
    }
    let acc = s.mul_add(hfsq + r, lo);
    let acc = acc - hfsq;
    let acc = acc + f;
    dk.mul_add(LOG_LN2_HI as f32, acc)
}

#[inline(always)]
fn split_exponent(x: f32) -> (i32, f32) {
    let small = x < 2f32.powi(-126);
    let xs = sel(small, x * 2f32.powi(23), x);
    let kb = seli(small, -23, 0);
    let ix = bits(xs).wrapping_add(0x3f80_0000 - 0x3f35_04f3);
    let k = (ix >> 23) - 0x7f + kb;
    let m = float((ix & 0x007f_ffff) + 0x3f35_04f3);
    (k, m)
}

#[inline(always)]
fn log_specials(x: f32, res: f32, at: f32) -> f32 {
    let res = sel(x < at, f32::NAN, res);
    let res = sel(x == at, f32::NEG_INFINITY, res);
    let top = x.is_nan() || x >= f32::INFINITY;
    sel(top, x + x, res)
}

#[inline(always)]
fn log1(x: f32, o: Opaque) -> f32 {
    let (k, m) = split_exponent(x);
    let res = log_kernel(m + -1.0, k, None);
    log_specials(x, res, o.zero)
}

#[inline(always)]
fn log1p1(x: f32, o: Opaque) -> f32 {
    let u = x + 1.0;
    let iu = bits(u).wrapping_add(0x3f80_0000 - 0x3f35_04f3);
    let k = (iu >> 23) - 0x7f;
    let c_ge2 = 1.0 - (u - x);
    let c_lt2 = x - (u + -1.0);
    let corr = sel(k >= 2, c_ge2, c_lt2) / u;
    let corr = sel(k < 25, corr, 0.0);
    let m = float((iu & 0x007f_ffff) + 0x3f35_04f3);
    let f = m + -1.0;
    let k0 = k == 0;
    let f = sel(k0, x, f);
    let corr = sel(k0, 0.0, corr);
    let res = log_kernel(f, k, Some(corr));
    let res = sel(x.abs() < 2f32.powi(-24), x * o.one, res);
    log_specials(x, res, -1.0)
}

#[inline(always)]
fn is_snan(x: f32) -> bool {
    let xb = bits(x);
    (xb & 0x7fff_ffff) > 0x7f80_0000 && (xb & 0x0040_0000) == 0
}

#[inline(always)]
fn poly64(x: f64, c: &[f64]) -> f64 {
    let (last, rest) = c.split_last().expect("coefficients");
    let mut acc = *last;
    for &ck in rest.iter().rev() {
        acc = acc.mul_add(x, ck);
    }
    acc
}

#[inline(always)]
fn pow_core64(m: f64, k: f64, y: f64) -> f64 {
    let s = (m + -1.0) / (m + 1.0);
    let z = s * s;
    let lnm = s * poly64(z, &POW_LOG_P);
    let l2 = lnm.mul_add(std::f64::consts::LOG2_E, k);
    let t = y * l2;
    let t = if t > 400.0 { 400.0 } else { t };
    let t = if t < -400.0 { -400.0 } else { t };
    let nf = t.round_ties_even();
    let f = t - nf;
    let p = poly64(f, &POW_EXP2_P);
    let nb = (nf + (4503599627370496.0 + 1023.0)).to_bits().wrapping_shl(52);
    p * f64::from_bits(nb)
}

#[inline(always)]
fn pow1(x: f32, y: f32, o: Opaque) -> f32 {
    let ax = x.abs();
    let (k, m) = split_exponent(ax);
    let kf = k as f32;
    let core = pow_core64(m as f64, kf as f64, y as f64) as f32;
    let inf = f32::INFINITY;
    let ylt0 = y < o.zero;
    let r = sel(ax == o.zero, sel(ylt0, inf, 0.0), core);
    let r = sel(ax == inf, sel(ylt0, 0.0, inf), r);
    let r = sel(x.is_nan() || y.is_nan(), x + y, r);
    let yint = y.trunc() == y;
    let hy = y * 0.5;
    let yodd = yint & (hy.trunc() != hy);
    let flip = seli(yodd, bits(x) & i32::MIN, 0);
    let r = float(bits(r) ^ flip);
    let bad = (x < o.zero) & (x > -inf) & !yint;
    let r = sel(bad, f32::NAN, r);
    let r = sel((ax == 1.0) & (y.abs() == inf), 1.0, r);
    let xone = (x == 1.0) & !is_snan(y);
    let y0 = (y == o.zero) & !is_snan(x);
    sel(xone | y0, 1.0, r)
}

/// Constants the optimizer cannot see through (see the module documentation), read once
/// per call.
#[derive(Clone, Copy)]
struct Opaque {
    zero: f32,
    one: f32,
}

#[inline(always)]
fn opaque() -> Opaque {
    static K: [f32; 2] = [0.0, 1.0];
    // SAFETY: reads of an initialized static.
    let (zero, one) = unsafe { (std::ptr::read_volatile(&K[0]), std::ptr::read_volatile(&K[1])) };
    Opaque { zero, one }
}

/// A unary entry point: `y[i] = f(x[i])` for `i < n`.
pub type UnaryFn = unsafe extern "C" fn(x: *const f32, y: *mut f32, n: i64);
/// A binary entry point: `out[i] = f(x[i], y[i])` for `i < n`.
pub type BinaryFn = unsafe extern "C" fn(x: *const f32, y: *const f32, out: *mut f32, n: i64);

macro_rules! unary_variants {
    ($($name:ident = |$x:ident, $k:ident| $body:expr;)*) => {
        $(
            mod $name {
                use super::*;
                #[inline(always)]
                fn f($x: f32, $k: Opaque) -> f32 { let _ = $k; $body }
                /// `y[i] = f(x[i])`, or with `ACC` `y[i] = y[i] + f(x[i])` (a column
                /// sum's rows added as they come).
                #[inline(always)]
                unsafe fn run<const ACC: bool>(x: *const f32, y: *mut f32, n: i64) {
                    let k = opaque();
                    // SAFETY: the caller passes `n` readable inputs and `n` writable
                    // outputs that do not overlap.
                    let (xs, ys) = unsafe {
                        (std::slice::from_raw_parts(x, n as usize),
                         std::slice::from_raw_parts_mut(y, n as usize))
                    };
                    for (a, b) in xs.iter().zip(ys.iter_mut()) {
                        let v = f(*a, k);
                        *b = if ACC { *b + v } else { v };
                    }
                }
                #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx2,fma")]
                pub unsafe extern "C" fn avx512(x: *const f32, y: *mut f32, n: i64) {
                    unsafe { run::<false>(x, y, n) }
                }
                #[target_feature(enable = "avx2,fma")]
                pub unsafe extern "C" fn avx2(x: *const f32, y: *mut f32, n: i64) {
                    unsafe { run::<false>(x, y, n) }
                }
                pub unsafe extern "C" fn base(x: *const f32, y: *mut f32, n: i64) {
                    unsafe { run::<false>(x, y, n) }
                }
                #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx2,fma")]
                pub unsafe extern "C" fn avx512_acc(x: *const f32, y: *mut f32, n: i64) {
                    unsafe { run::<true>(x, y, n) }
                }
                #[target_feature(enable = "avx2,fma")]
                pub unsafe extern "C" fn avx2_acc(x: *const f32, y: *mut f32, n: i64) {
                    unsafe { run::<true>(x, y, n) }
                }
                pub unsafe extern "C" fn base_acc(x: *const f32, y: *mut f32, n: i64) {
                    unsafe { run::<true>(x, y, n) }
                }
            }
        )*
    };
}

unary_variants! {
    exp = |x, k| exp_core(x);
    expm1 = |x, k| expm1_core(x);
    log = |x, k| log1(x, k);
    log1p = |x, k| log1p1(x, k);
    tanh = |x, k| tanh1(x);
    logistic = |x, k| logistic1(x, k);
}

mod pow {
    use super::*;
    #[inline(always)]
    unsafe fn run(x: *const f32, y: *const f32, out: *mut f32, n: i64) {
        // SAFETY: the caller passes `n` readable elements of each input and `n` writable
        // outputs that overlap neither.
        let (xs, ys, os) = unsafe {
            (
                std::slice::from_raw_parts(x, n as usize),
                std::slice::from_raw_parts(y, n as usize),
                std::slice::from_raw_parts_mut(out, n as usize),
            )
        };
        let k = opaque();
        for ((a, b), o) in xs.iter().zip(ys).zip(os.iter_mut()) {
            *o = pow1(*a, *b, k);
        }
    }
    #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx2,fma")]
    pub unsafe extern "C" fn avx512(x: *const f32, y: *const f32, out: *mut f32, n: i64) {
        unsafe { run(x, y, out, n) }
    }
    #[target_feature(enable = "avx2,fma")]
    pub unsafe extern "C" fn avx2(x: *const f32, y: *const f32, out: *mut f32, n: i64) {
        unsafe { run(x, y, out, n) }
    }
    pub unsafe extern "C" fn base(x: *const f32, y: *const f32, out: *mut f32, n: i64) {
        unsafe { run(x, y, out, n) }
    }
}

/// The instruction set the entry points use in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// 16 lanes (AVX-512 F, VL, DQ with FMA).
    Avx512,
    /// 8 lanes (AVX2 with FMA).
    Avx2,
    /// Portable code (no `#[target_feature]`).
    Base,
}

impl Isa {
    /// The entry points' path name, as `hloc run --stats` reports it.
    pub fn path(self) -> &'static str {
        match self {
            Isa::Avx512 => "vmath avx512",
            Isa::Avx2 => "vmath avx2",
            Isa::Base => "vmath base",
        }
    }

    /// The instruction sets this host can run, lowest first, whatever the cap (for
    /// tests that compare them in one process).
    pub fn on_host() -> Vec<Isa> {
        let host = cpu::host();
        let mut v = vec![Isa::Base];
        if host >= cpu::Level::Avx2 {
            v.push(Isa::Avx2);
        }
        if host >= cpu::Level::Avx512 {
            v.push(Isa::Avx512);
        }
        v
    }
}

/// The instruction set of the process's entry points: the widest one the effective level
/// ([`cpu::effective`]: the `HLOC_ISA` cap bounded by the host) allows.
pub fn isa() -> Isa {
    match cpu::effective() {
        cpu::Level::Base => Isa::Base,
        cpu::Level::Avx2 => Isa::Avx2,
        _ => Isa::Avx512,
    }
}

macro_rules! pick {
    ($m:ident, $isa:expr, $t:ty) => {
        match $isa {
            Isa::Avx512 => $m::avx512 as $t as *const u8,
            Isa::Avx2 => $m::avx2 as $t as *const u8,
            Isa::Base => $m::base as $t as *const u8,
        }
    };
    ($m:ident, $isa:expr, $t:ty, acc) => {
        match $isa {
            Isa::Avx512 => $m::avx512_acc as $t as *const u8,
            Isa::Avx2 => $m::avx2_acc as $t as *const u8,
            Isa::Base => $m::base_acc as $t as *const u8,
        }
    };
}

/// The entry points' symbols.
pub mod symbols {
    pub const EXP: &str = "hlo_vexp_f32";
    pub const EXPM1: &str = "hlo_vexpm1_f32";
    pub const LOG: &str = "hlo_vlog_f32";
    pub const LOG1P: &str = "hlo_vlog1p_f32";
    pub const TANH: &str = "hlo_vtanh_f32";
    pub const LOGISTIC: &str = "hlo_vlogistic_f32";
    /// Binary: `out[i] = x[i]^y[i]`.
    pub const POW: &str = "hlo_vpow_f32";

    /// The unary functions' accumulating forms: `y[i] = y[i] + f(x[i])`.
    pub const ACCUMULATING: [(&str, &str); 6] = [
        (EXP, "hlo_vexp_acc_f32"),
        (EXPM1, "hlo_vexpm1_acc_f32"),
        (LOG, "hlo_vlog_acc_f32"),
        (LOG1P, "hlo_vlog1p_acc_f32"),
        (TANH, "hlo_vtanh_acc_f32"),
        (LOGISTIC, "hlo_vlogistic_acc_f32"),
    ];

    /// The accumulating form of unary entry point `symbol`.
    pub fn accumulating(symbol: &str) -> Option<&'static str> {
        ACCUMULATING.iter().find(|(s, _)| *s == symbol).map(|(_, a)| *a)
    }
}

/// `(symbol, address)` of every entry point for instruction set `isa`.
pub fn entry_points(isa: Isa) -> Vec<(&'static str, *const u8)> {
    use symbols::*;
    vec![
        (EXP, pick!(exp, isa, UnaryFn)),
        (EXPM1, pick!(expm1, isa, UnaryFn)),
        (LOG, pick!(log, isa, UnaryFn)),
        (LOG1P, pick!(log1p, isa, UnaryFn)),
        (TANH, pick!(tanh, isa, UnaryFn)),
        (LOGISTIC, pick!(logistic, isa, UnaryFn)),
        (POW, pick!(pow, isa, BinaryFn)),
        (ACCUMULATING[0].1, pick!(exp, isa, UnaryFn, acc)),
        (ACCUMULATING[1].1, pick!(expm1, isa, UnaryFn, acc)),
        (ACCUMULATING[2].1, pick!(log, isa, UnaryFn, acc)),
        (ACCUMULATING[3].1, pick!(log1p, isa, UnaryFn, acc)),
        (ACCUMULATING[4].1, pick!(tanh, isa, UnaryFn, acc)),
        (ACCUMULATING[5].1, pick!(logistic, isa, UnaryFn, acc)),
    ]
}

/// Runs the unary entry point `symbol` over `xs` with the process's instruction set.
pub fn run_unary(symbol: &str, xs: &[f32]) -> Vec<f32> {
    let (_, p) = *entry_points(isa()).iter().find(|e| e.0 == symbol).expect("a unary entry point");
    assert_ne!(symbol, symbols::POW, "pow is binary");
    // SAFETY: every entry point but pow has the `UnaryFn` signature.
    let f = unsafe { std::mem::transmute::<*const u8, UnaryFn>(p) };
    let mut out = vec![0f32; xs.len()];
    // SAFETY: `xs.len()` inputs and as many outputs, not overlapping.
    unsafe { f(xs.as_ptr(), out.as_mut_ptr(), xs.len() as i64) };
    out
}

/// Runs the `pow` entry point over `xs`, `ys` (same length).
pub fn run_pow(xs: &[f32], ys: &[f32]) -> Vec<f32> {
    assert_eq!(xs.len(), ys.len());
    let (_, p) = *entry_points(isa()).iter().find(|e| e.0 == symbols::POW).expect("pow");
    // SAFETY: the pow entry point has the `BinaryFn` signature.
    let f = unsafe { std::mem::transmute::<*const u8, BinaryFn>(p) };
    let mut out = vec![0f32; xs.len()];
    // SAFETY: `xs.len()` elements of each input and as many outputs, not overlapping.
    unsafe { f(xs.as_ptr(), ys.as_ptr(), out.as_mut_ptr(), xs.len() as i64) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every unary entry point, plain and accumulating, for every instruction set this
    /// host has: the plain one overwrites what its output held, the accumulating one adds
    /// the same values to it (`y + f(x)` exactly), for lengths around the vector widths.
    #[test]
    fn plain_entry_points_overwrite_and_accumulating_ones_add() {
        for isa in Isa::on_host() {
            let eps = entry_points(isa);
            let get = |name: &str| {
                let p = eps.iter().find(|e| e.0 == name).expect("an entry point").1;
                // SAFETY: every unary entry point has the `UnaryFn` signature.
                unsafe { std::mem::transmute::<*const u8, UnaryFn>(p) }
            };
            for (plain, acc) in symbols::ACCUMULATING {
                for n in [1usize, 7, 16, 33] {
                    let xs: Vec<f32> = (0..n).map(|i| 0.25 + i as f32 * 0.37).collect();
                    let mut ys = vec![f32::NAN; n];
                    // SAFETY: `n` inputs, `n` outputs, not overlapping.
                    unsafe { get(plain)(xs.as_ptr(), ys.as_mut_ptr(), n as i64) };
                    assert!(ys.iter().all(|y| y.is_finite()), "{isa:?} {plain}: {ys:?}");
                    let base: Vec<f32> = (0..n).map(|i| 1.5 - i as f32).collect();
                    let mut acc_ys = base.clone();
                    // SAFETY: as above.
                    unsafe { get(acc)(xs.as_ptr(), acc_ys.as_mut_ptr(), n as i64) };
                    for i in 0..n {
                        assert_eq!(
                            acc_ys[i].to_bits(),
                            (base[i] + ys[i]).to_bits(),
                            "{isa:?} {acc}, n = {n}, element {i}"
                        );
                    }
                }
            }
        }
    }

    /// Inputs for comparing instruction sets: specials, subnormals, the functions' range
    /// edges and a spread of random bit patterns.
    fn spread() -> Vec<f32> {
        let mut xs = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            2.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7f80_0001), // signalling NaN
            f32::MIN_POSITIVE,
            f32::from_bits(1),
            f32::from_bits(0x8000_0001),
            f32::from_bits(0x007f_ffff),
            f32::MAX,
            f32::MIN,
            88.7,
            88.8,
            -103.9,
            -104.5,
            -18.0,
            0.55,
            -0.55,
            1e-8,
            -1e-8,
            2f32.powi(-25),
            2f32.powi(-13),
            -0.999_999,
        ];
        let mut r: u32 = 0x2545_f491;
        for _ in 0..20_000 {
            r ^= r << 13;
            r ^= r >> 17;
            r ^= r << 5;
            xs.push(f32::from_bits(r));
            // and a denser sample of the ordinary range
            xs.push((r >> 8) as f32 / (1u32 << 24) as f32 * 40.0 - 20.0);
        }
        xs
    }

    /// Every entry point gives the same bits under every instruction set this host has
    /// (whatever the process's cap): the wider builds are the same IEEE operations, so a
    /// capped process computes what an uncapped one does. The one allowed difference is
    /// a NaN's payload when both results are NaN: LLVM treats `fadd` as commutative, and
    /// x86 keeps the first operand's payload when both are NaN, so the accumulating forms'
    /// `y + f(x)` of a NaN `y` and a NaN `f(x)` may keep either (IEEE leaves it open).
    #[test]
    fn every_instruction_set_gives_the_same_bits() {
        let xs = spread();
        let mut ys = xs.clone();
        ys.rotate_left(7);
        let base = entry_points(Isa::Base);
        let on_host = Isa::on_host();
        assert!(
            on_host.len() > 1 || !cfg!(target_arch = "x86_64") || cpu::host() == cpu::Level::Base
        );
        let mut nan_payloads = 0;
        for isa in on_host {
            for ((name, p), (_, q)) in entry_points(isa).into_iter().zip(base.iter().copied()) {
                let run = |f: *const u8| -> Vec<f32> {
                    if name == symbols::POW {
                        // SAFETY: the pow entry point has the `BinaryFn` signature.
                        let f = unsafe { std::mem::transmute::<*const u8, BinaryFn>(f) };
                        let mut out = vec![0f32; xs.len()];
                        // SAFETY: as many elements of each input as outputs, not overlapping.
                        unsafe { f(xs.as_ptr(), ys.as_ptr(), out.as_mut_ptr(), xs.len() as i64) };
                        out
                    } else {
                        // SAFETY: every other entry point has the `UnaryFn` signature.
                        let f = unsafe { std::mem::transmute::<*const u8, UnaryFn>(f) };
                        let mut out = ys.clone(); // the accumulating forms add to it
                        // SAFETY: as many inputs as outputs, not overlapping.
                        unsafe { f(xs.as_ptr(), out.as_mut_ptr(), xs.len() as i64) };
                        out
                    }
                };
                let (got, want) = (run(p), run(q));
                for i in 0..xs.len() {
                    if got[i].is_nan() && want[i].is_nan() {
                        nan_payloads += usize::from(got[i].to_bits() != want[i].to_bits());
                        continue;
                    }
                    assert_eq!(
                        got[i].to_bits(),
                        want[i].to_bits(),
                        "{name} {isa:?} vs Base at x = {:e} ({:#010x}), y = {:e}: {:e} vs {:e}",
                        xs[i],
                        xs[i].to_bits(),
                        ys[i],
                        got[i],
                        want[i]
                    );
                }
            }
        }
        eprintln!("{nan_payloads} NaN results with another payload");
    }
}
