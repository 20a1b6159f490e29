//! The host floating-point mode JIT kernels run in, chosen to match XLA CPU.
//!
//! # What XLA CPU does with subnormal f32 values (measured)
//!
//! XLA CPU (jax/jaxlib 0.10.2, the project's oracle, `shared/xla-oracle/run_hlo.py`) runs its
//! kernels with **FTZ and DAZ on**: subnormal results are flushed to zero and subnormal
//! inputs are read as zero, including by comparisons. The module used:
//!
//! ```text
//! HloModule subnormals
//! ENTRY main {
//!   x = f32[8] parameter(0)        // 1e-40, -1e-40, 1.4e-45, 1e-38, 2e-38, 1.17549435e-38, 3e-39, 0
//!   e = f32[8] parameter(1)        // -88, -90, -95, -100, -103, -104, -87.3, -87.4
//!   big = f32[65536] parameter(2)  // 2e-38 and 1e-40 alternating
//!   half = f32[] constant(0.5)
//!   halfb = f32[8] broadcast(half), dimensions={}
//!   tenb = f32[] constant(1e+10)
//!   tenbb = f32[8] broadcast(tenb), dimensions={}
//!   mul_half = f32[8] multiply(x, halfb)
//!   mul_big = f32[8] multiply(x, tenbb)
//!   sum = f32[8] add(x, x)
//!   ex = f32[8] exponential(e)
//!   zero = f32[] constant(0)
//!   zerob = f32[8] broadcast(zero), dimensions={}
//!   gt = pred[8] compare(x, zerob), direction=GT
//!   halfbig = f32[65536] broadcast(half), dimensions={}
//!   mulbig = f32[65536] multiply(big, halfbig)
//!   ROOT t = (f32[8], f32[8], f32[8], f32[8], pred[8], f32[65536]) tuple(mul_half, mul_big, sum, ex, gt, mulbig)
//! }
//! ```
//!
//! XLA returned:
//!
//! | output | XLA | IEEE without flushing |
//! |---|---|---|
//! | `x * 0.5` | `0, -0, 0, 0, 0, 0, 0, 0` | `5e-41, -5e-41, 0, 5e-39, 1e-38, 5.877472e-39, 1.5e-39, 0` |
//! | `x * 1e10` | `0, -0, 0, 0, 2e-28, 1.1754944e-28, 0, 0` | `1e-30, -1e-30, 1.4e-35, 1e-28, 2e-28, 1.1754944e-28, 3e-29, 0` |
//! | `x + x` | `0, -0, 0, 0, 4e-38, 2.3509887e-38, 0, 0` | `2e-40, -2e-40, 2.8e-45, 2e-38, 4e-38, 2.3509887e-38, 6e-39, 0` |
//! | `exp(e)` | `0, 0, 0, 0, 0, 0, 1.2192433e-38, 0` | `6.05e-39, 8.19e-40, 5.52e-42, 3.78e-44, 1.4e-45, 0, 1.2192433e-38, 1.1032187e-38` |
//! | `x > 0` | `F, F, F, F, T, T, F, F` | `T, F, T, T, T, T, T, F` |
//! | `big * 0.5` (65536 elements) | all 0 | 1e-38 and 5e-41 |
//!
//! A second module of unary ops on subnormal inputs `[1e-40, -1e-40, 1.4e-45, 3e-39, -3e-39,
//! 1e-38]` gave `sqrt` = ±0, `rsqrt` = ±inf, `maximum(x, 0)` = 0, `erf` = ±0, `log1p` = ±0,
//! `exp` = `cos` = 1, `logistic` = 0.5 (all consistent with DAZ), while `abs`, `negate` and
//! `copy` keep the bits (no arithmetic) and `tanh`/`sin`/`expm1`/`atan2(x, 1)` return the
//! input bits unchanged (XLA's small-argument `select(|x| < c, x, …)` sees a zero under DAZ
//! and passes `x` through). XLA's own `log` gives -103.97208 for every positive subnormal and
//! NaN for negative ones — an artefact of its polynomial, not reproduced here.
//!
//! [`with_host_fp_mode`] therefore sets FTZ (MXCSR bit 15) and DAZ (bit 6) around kernel
//! execution. The bits are per thread: parallel work (split loop kernels, the GEMM crate's
//! and the convolution's threads) runs on the runtime's own pools
//! ([`crate::pool`]), whose threads enter the mode when they start, so it never
//! depends on which thread first built the process's global rayon pool
//! (`tests/fp_mode_threads.rs` builds it first, in the default mode). The interpreter
//! does not flush (it uses Rust's IEEE arithmetic), so runtime and interpreter can differ
//! on values below 2^-126.

/// MXCSR flush-to-zero: subnormal results become ±0.
pub const MXCSR_FTZ: u32 = 1 << 15;
/// MXCSR denormals-are-zero: subnormal inputs are read as ±0.
pub const MXCSR_DAZ: u32 = 1 << 6;

/// Runs `f` with the floating-point mode XLA CPU uses (FTZ and DAZ on, round to nearest),
/// restoring the caller's mode afterwards, also when `f` panics. On architectures other
/// than x86-64 it just runs `f`.
pub fn with_host_fp_mode<R>(f: impl FnOnce() -> R) -> R {
    let _guard = FpModeGuard::enter();
    f()
}

/// Puts the calling thread in the host floating-point mode for the rest of its life (a
/// runtime pool thread's start handler, [`crate::pool`]).
pub(crate) fn enter_host_fp_mode_for_life() {
    std::mem::forget(FpModeGuard::enter());
}

/// Restores the saved control/status word when dropped.
struct FpModeGuard {
    #[cfg(target_arch = "x86_64")]
    saved: u32,
}

impl FpModeGuard {
    #[cfg(target_arch = "x86_64")]
    fn enter() -> FpModeGuard {
        let saved = read_mxcsr();
        // Keep the exception masks, force round-to-nearest (RC = 00), set FTZ and DAZ, and
        // clear the sticky exception flags so they describe only the kernel.
        const RC: u32 = 0b11 << 13;
        const FLAGS: u32 = 0x3f;
        write_mxcsr((saved & !RC & !FLAGS) | MXCSR_FTZ | MXCSR_DAZ);
        FpModeGuard { saved }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn enter() -> FpModeGuard {
        FpModeGuard {}
    }
}

impl Drop for FpModeGuard {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        write_mxcsr(self.saved);
    }
}

/// The current thread's MXCSR (0 on other architectures).
pub fn read_mxcsr() -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: SSE is part of the x86-64 baseline; reading MXCSR has no side effects.
        #[allow(deprecated)]
        unsafe {
            core::arch::x86_64::_mm_getcsr()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

#[cfg(target_arch = "x86_64")]
fn write_mxcsr(v: u32) {
    // SAFETY: SSE is part of the x86-64 baseline. Only rounding/flushing modes and masks
    // change; the value always comes from a read MXCSR with known bits adjusted, so no
    // reserved bit is set.
    #[allow(deprecated)]
    unsafe {
        core::arch::x86_64::_mm_setcsr(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn mode_is_set_inside_and_restored_after() {
        let before = read_mxcsr();
        let inside = with_host_fp_mode(read_mxcsr);
        assert_eq!(inside & (MXCSR_FTZ | MXCSR_DAZ), MXCSR_FTZ | MXCSR_DAZ);
        assert_eq!(inside & (0b11 << 13), 0, "round to nearest");
        assert_eq!(read_mxcsr() & !0x3f, before & !0x3f);
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn restored_after_panic() {
        let before = read_mxcsr();
        let r = std::panic::catch_unwind(|| with_host_fp_mode(|| panic!("inside")));
        assert!(r.is_err());
        assert_eq!(read_mxcsr() & !0x3f, before & !0x3f);
    }
}
