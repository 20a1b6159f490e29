//! Which instruction-set path each of this crate's kernels takes in this process: the
//! cap ([`Level`], `HLOC_ISA`, [`set_cap`]) is `hlo-vmath`'s, re-exported here; these
//! functions name what the dispatchers decide from it, for `hloc run --stats` and tests.
//! Each is the dispatcher's own decision (the same function), not a copy of it.

pub use hlo_vmath::cpu::{CapError, ENV, Level, allows, cap, effective, host, parse, set_cap};

/// The AMX bf16 GEMM's path name.
pub const AMX_BF16: &str = "amx-bf16";

/// The AVX512-BF16 (`vdpbf16ps`) bf16 GEMM's path name.
pub const DP_BF16: &str = "avx512-bf16 vdpbf16ps";

/// The path of a bf16 dot in this process ([`crate::bf16_gemm::engine`]): [`AMX_BF16`],
/// [`DP_BF16`], or `"widened to f32"`.
pub fn bf16_dot() -> &'static str {
    match crate::bf16_gemm::engine() {
        Some(crate::bf16_gemm::Engine::Amx) => AMX_BF16,
        Some(crate::bf16_gemm::Engine::Dp) => DP_BF16,
        None => "widened to f32",
    }
}

/// The path of the `gemm` crate's f32/f64 kernels: the crate decides by itself, from
/// run-time detection inside private modules (`gemm-common`'s `init_gemm_fn`), and no cap
/// reaches it: `"gemm crate avx512f"` on any AVX-512 host, whatever the cap, else
/// `"gemm crate fma"`, else `"gemm crate scalar"`.
pub fn gemm_crate() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return "gemm crate avx512f";
        }
        if std::arch::is_x86_feature_detected!("fma") {
            return "gemm crate fma";
        }
    }
    "gemm crate scalar"
}

/// The path of the small-product loop ([`crate::gemm::SMALL_MNK`] multiply-adds or
/// fewer): its AVX2 build wherever the host has AVX2 (every cap allows AVX2), else the
/// portable one.
pub fn small_gemm() -> &'static str {
    if crate::gemm::small_gemm_has_avx2() { "small gemm avx2" } else { "small gemm base" }
}

/// The path of one GEMM of shape `s` (what [`crate::gemm`] dispatches it to); `"empty"`
/// when it computes nothing (no output, or nothing to add up).
pub fn gemm_for(s: crate::gemm::Shape) -> &'static str {
    if s.m == 0 || s.n == 0 || s.k == 0 {
        "empty"
    } else if crate::gemm::is_small(s) {
        small_gemm()
    } else {
        gemm_crate()
    }
}

/// A convolution's path when it skips padding and holes instead of multiplying their zeros
/// (integers, or a non-finite kernel value that would meet them): the direct loop.
pub const CONV_DIRECT: &str = "direct loop";

/// A convolution's path when it builds patches and multiplies them on `gemm` (a path of
/// [`gemm_for`]): `"im2col + <gemm>"` (`"empty"` for an empty one).
pub fn conv_path(gemm: &'static str) -> &'static str {
    const PATHS: [&str; 5] = [
        "gemm crate avx512f",
        "gemm crate fma",
        "gemm crate scalar",
        "small gemm avx2",
        "small gemm base",
    ];
    const IM2COL: [&str; 5] = [
        "im2col + gemm crate avx512f",
        "im2col + gemm crate fma",
        "im2col + gemm crate scalar",
        "im2col + small gemm avx2",
        "im2col + small gemm base",
    ];
    PATHS.iter().position(|&p| p == gemm).map_or(gemm, |i| IM2COL[i])
}

/// The path of an f32/f64 `dot_general` of these dims ([`crate::dot::dot_general_f32`]):
/// [`gemm_for`] its products' shape.
pub fn dot(lhs_dims: &[usize], rhs_dims: &[usize], dn: &hlo_ir::op::DotDims) -> &'static str {
    gemm_for(crate::dot::gemm_shape(lhs_dims, rhs_dims, dn))
}

/// The paths this process's kernels take, by dispatch point, for a report: `(dispatch
/// point, path)`.
pub fn paths() -> Vec<(&'static str, &'static str)> {
    vec![
        ("bf16 dot", bf16_dot()),
        ("f32 gemm", gemm_crate()),
        ("small gemm", small_gemm()),
        ("vector math", hlo_vmath::isa().path()),
    ]
}
