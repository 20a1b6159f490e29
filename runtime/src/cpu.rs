//! The instruction-set cap and the paths kernels take under it. The cap itself ([`Level`],
//! `HLOC_ISA`, [`set_cap`]) is decided once per process in `hlo-vmath` (re-exported by
//! `hlo-kernels` and here); [`paths`] names each dispatch point's choice, and
//! `hloc run --stats` the paths each kernel kind took.
//!
//! `set_cap` works before the first dispatch (the first compile, or the first use of a
//! kernel); afterwards it errs unless it repeats the cap in force. An invalid `HLOC_ISA`
//! makes every compile fail with its error ([`crate::Program::compile`]).
//!
//! The `gemm` crate's f32/f64 kernels cannot be capped (they dispatch inside the crate):
//! [`hlo_kernels::cpu::gemm_crate`] names what they use.

use std::sync::OnceLock;

pub use hlo_kernels::cpu::{
    AMX_BF16, CONV_DIRECT, CapError, DP_BF16, ENV, Level, allows, bf16_dot, cap, conv_path, dot,
    effective, gemm_crate, host, parse, set_cap, small_gemm,
};

/// The path of Cranelift's loop kernels: `"cranelift avx512vl"` when the flags they are
/// compiled with include AVX-512 (VL: Cranelift's 128-bit vectors use its encodings),
/// `"cranelift avx2"` with AVX2, `"cranelift sse"` otherwise; read from the flags of the
/// ISA the JIT builds (the one every compile uses).
pub fn cranelift() -> &'static str {
    static PATH: OnceLock<&'static str> = OnceLock::new();
    PATH.get_or_init(|| match crate::jit::host_isa() {
        Ok(isa) if crate::jit::isa_flag(&isa, "has_avx512vl") => "cranelift avx512vl",
        Ok(isa) if crate::jit::isa_flag(&isa, "has_avx2") => "cranelift avx2",
        Ok(_) => "cranelift sse",
        Err(_) => "cranelift (no ISA: invalid cap)",
    })
}

/// The path of a loop kernel: Cranelift's flags and the vector math it calls.
pub fn loops() -> &'static str {
    static PATH: OnceLock<&'static str> = OnceLock::new();
    PATH.get_or_init(|| leak(format!("{} + {}", cranelift(), hlo_vmath::isa().path())))
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Each dispatch point's path in this process, `(dispatch point, path)`: the kernels'
/// ([`hlo_kernels::cpu::paths`]) and Cranelift's.
pub fn paths() -> Vec<(&'static str, &'static str)> {
    let mut v = hlo_kernels::cpu::paths();
    v.push(("loop kernels", cranelift()));
    v
}

/// One line for reports: the cap, the host and the effective level.
pub fn summary() -> String {
    let cap = match cap() {
        Ok(Some(l)) => l.name().to_string(),
        Ok(None) => "native".into(),
        Err(e) => format!("invalid ({e})"),
    };
    format!("instruction set: {} (cap {cap}, host {})", effective(), host())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under the cap this test process runs with (`HLOC_ISA`, as CI sets it), every
    /// dispatch point reports `min(cap, host)`: Cranelift's flags, the vector math, AMX.
    #[test]
    fn every_dispatch_point_follows_the_effective_level() {
        let cap = cap().expect("a valid HLOC_ISA in the test environment");
        let eff = effective();
        assert_eq!(eff, cap.map_or(host(), |c| c.min(host())));
        let isa = crate::jit::host_isa().expect("the host ISA");
        let avx512 = crate::jit::AVX512_FLAGS.map(|f| crate::jit::isa_flag(&isa, f));
        if eff < Level::Avx512 {
            assert_eq!(avx512, [false; 6], "AVX-512 flags on under {eff}");
        } else {
            assert!(avx512[0] && avx512[1] && avx512[2], "AVX-512 F/VL/DQ off under {eff}");
        }
        if eff >= Level::Avx2 {
            assert!(
                crate::jit::isa_flag(&isa, "has_avx2") && crate::jit::isa_flag(&isa, "has_fma")
            );
        }
        let loops = paths().into_iter().find(|p| p.0 == "loop kernels").expect("loops").1;
        let vmath = paths().into_iter().find(|p| p.0 == "vector math").expect("vmath").1;
        let (want_loops, want_vmath) = match eff {
            Level::Base => ("cranelift sse", "vmath base"),
            Level::Avx2 => ("cranelift avx2", "vmath avx2"),
            _ => ("cranelift avx512vl", "vmath avx512"),
        };
        assert_eq!((loops, vmath), (want_loops, want_vmath));
        let bf16 = paths().into_iter().find(|p| p.0 == "bf16 dot").expect("bf16").1;
        if eff < Level::Avx512Bf16 {
            assert_eq!(bf16, "widened to f32");
        } else if eff < Level::Amx {
            assert!(bf16 == "widened to f32" || bf16 == DP_BF16, "{bf16} under {eff}");
        }
        // A second decision is refused unless it repeats the first.
        assert_eq!(set_cap(cap), Ok(()));
        let other = if cap == Some(Level::Avx2) { Some(Level::Avx512) } else { Some(Level::Avx2) };
        assert!(matches!(set_cap(other), Err(CapError::AlreadyDecided { .. })));
    }
}
