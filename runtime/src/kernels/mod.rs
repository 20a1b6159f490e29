//! Library kernels: what XLA's CPU backend hands to a tuned library rather than to
//! generated code. `dot` (general dimension numbers) and `convolution` (full HLO
//! generality) on row-major `f32`/`f64` slices, both lowered to strided GEMMs run by the
//! `gemm` crate (see the workspace Cargo.toml for why that crate).
//!
//! Large products use every thread of the current rayon pool; small ones stay on the
//! calling thread. bf16/f16 callers widen to f32 before and round after.

pub mod conv;
pub mod dot;
mod gemm;

pub use conv::{convolution_f32, convolution_f64};
pub use dot::{dot_general_f32, dot_general_f64};

/// The element types the kernels run on (`f32`, `f64`).
pub trait Float: Copy + Send + Sync + PartialEq + std::fmt::Debug + 'static + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self> + private::Sealed {
    const ZERO: Self;
    const ONE: Self;
}

impl Float for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
}

impl Float for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
}

mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
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
pub(crate) fn gather<T: Copy>(src: &[T], sizes: &[usize], strides: &[isize], base: isize) -> Vec<T> {
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
    let mut idx = vec![0usize; outer.len()];
    loop {
        let start = base + idx.iter().zip(strides).map(|(&i, &s)| i as isize * s).sum::<isize>();
        if inner_stride == 1 {
            out.extend_from_slice(&src[start as usize..start as usize + inner]);
        } else {
            out.extend((0..inner as isize).map(|j| src[(start + j * inner_stride) as usize]));
        }
        // Next outer index (odometer, last outer dim fastest).
        let mut d = outer.len();
        loop {
            if d == 0 {
                return out;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < outer[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}
