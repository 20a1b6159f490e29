//! Linear algebra and FFT (XLA's `InferCholeskyShape`, `InferTriangularSolveShape`,
//! `InferFftShape`): `cholesky`, `triangular-solve` and `fft` in its four forms.

use hlo_ir::{ElemType, Shape};

use super::context::{Cx, R, complex_component, like, mk};
use super::show;

/// Floating-point or complex (the linear-algebra ops' element types).
fn float_or_complex(e: ElemType) -> bool {
    e.is_float() || e.is_complex()
}

/// `cholesky` (XLA's `InferCholeskyShape`): a floating-point or complex operand of rank
/// >= 2 whose two minor dimensions are equal; the result is the operand's shape.
pub(super) fn cholesky(cx: &Cx) -> R<Shape> {
    let a = cx.array(0)?;
    if !float_or_complex(a.elem) {
        return Err(cx.err(format!(
            "cholesky expects a floating-point or complex operand, got {}",
            show(cx.shape(0)?)
        )));
    }
    let d = &a.dims;
    if d.len() < 2 {
        return Err(
            cx.err(format!("cholesky's operand must have rank >= 2, got {}", show(cx.shape(0)?)))
        );
    }
    if d[d.len() - 1] != d[d.len() - 2] {
        return Err(cx.err(format!(
            "the two minor dimensions of cholesky's operand must be equal, got {}",
            show(cx.shape(0)?)
        )));
    }
    Ok(like(a, a.elem))
}

/// `triangular-solve` (XLA's `InferTriangularSolveShape`): `a` and `b` floating-point or
/// complex of one element type, equal ranks >= 2, `a` square in its minor dimensions,
/// `a`'s last dimension equal to `b`'s second-minor (`left_side`) or minor dimension, the
/// same batch dimensions, and `transpose_a` one of NO_TRANSPOSE, TRANSPOSE, ADJOINT
/// (XLA refuses a solve without it); the result is `b`'s shape.
pub(super) fn triangular_solve(cx: &Cx, left_side: bool, transpose_a: Option<&str>) -> R<Shape> {
    let (a, b) = (cx.array(0)?, cx.array(1)?);
    let (sa, sb) = (show(cx.shape(0)?), show(cx.shape(1)?));
    if !float_or_complex(a.elem) || a.elem != b.elem {
        return Err(cx.err(format!("triangular-solve expects floating-point or complex operands of one element type, got {sa} and {sb}")));
    }
    let r = a.dims.len();
    if r < 2 {
        return Err(cx.err(format!("triangular-solve's `a` must have rank >= 2, got {sa}")));
    }
    if b.dims.len() != r {
        return Err(
            cx.err(format!("triangular-solve's operands must have equal ranks, got {sa} and {sb}"))
        );
    }
    if a.dims[r - 1] != a.dims[r - 2] {
        return Err(cx.err(format!(
            "the two minor dimensions of triangular-solve's `a` must be equal, got {sa}"
        )));
    }
    let shared = if left_side { r - 2 } else { r - 1 };
    if a.dims[r - 1] != b.dims[shared] {
        return Err(cx.err(format!(
            "triangular-solve's shared dimension does not match: `a` {sa} has {} columns, `b` {sb} has {} in dimension {shared} (left_side={left_side})",
            a.dims[r - 1].bound().unwrap_or(0),
            b.dims[shared].bound().unwrap_or(0)
        )));
    }
    if a.dims[..r - 2] != b.dims[..r - 2] {
        return Err(cx.err(format!("triangular-solve's batch dimensions differ: {sa} and {sb}")));
    }
    match transpose_a {
        Some("NO_TRANSPOSE" | "TRANSPOSE" | "ADJOINT") => {}
        Some(t) => return Err(cx.err(format!("transpose_a={t} is not one of NO_TRANSPOSE, TRANSPOSE, ADJOINT"))),
        None => return Err(cx.err("triangular-solve needs transpose_a= (NO_TRANSPOSE, TRANSPOSE or ADJOINT); XLA refuses a solve without it")),
    }
    Ok(like(b, b.elem))
}

/// `fft` (XLA's `InferFftShape`): 1 to 3 `fft_length` entries, at most the operand's
/// rank; FFT/IFFT take and give complex values; RFFT takes f32/f64 whose innermost
/// dimensions equal `fft_length` and gives c64/c128 with the last one `n/2+1` (0 stays
/// 0); IRFFT takes complex values whose innermost dimensions but the last equal
/// `fft_length` and whose last is `n/2+1`, and gives the real type with the last `n`.
pub(super) fn fft(cx: &Cx, fft_type: &str, len: &[i64]) -> R<Shape> {
    let a = cx.array(0)?;
    let k = len.len();
    if !(1..=3).contains(&k) {
        return Err(cx.err(format!("fft supports 1 to 3 dimensions (fft_length entries), got {k}")));
    }
    if let Some(n) = len.iter().find(|&&n| n < 0) {
        return Err(cx.err(format!("fft_length entry {n} is negative")));
    }
    let r = a.dims.len();
    if r < k {
        return Err(cx.err(format!(
            "an fft of {k} dimensions needs an operand of rank >= {k}, got {}",
            show(cx.shape(0)?)
        )));
    }
    let dims: Vec<i64> = a.dims.iter().map(|d| d.bound().unwrap_or(0) as i64).collect();
    let inner = &dims[r - k..];
    match fft_type {
        "FFT" | "IFFT" => {
            if !a.elem.is_complex() {
                return Err(cx.err(format!(
                    "{fft_type} expects a complex operand, got {}",
                    show(cx.shape(0)?)
                )));
            }
            Ok(like(a, a.elem))
        }
        "RFFT" => {
            let out = match a.elem {
                ElemType::F32 => ElemType::C64,
                ElemType::F64 => ElemType::C128,
                _ => {
                    return Err(cx.err(format!(
                        "RFFT expects an f32 or f64 operand, got {}",
                        show(cx.shape(0)?)
                    )));
                }
            };
            for (i, (&d, &n)) in inner.iter().zip(len).enumerate() {
                if d != n {
                    return Err(cx.err(format!("RFFT needs the innermost dimensions to equal fft_length, but dimension {} is {d} and should be {n}", r - k + i)));
                }
            }
            let mut o = dims.clone();
            if len[k - 1] != 0 {
                o[r - 1] = len[k - 1] / 2 + 1;
            }
            Ok(mk(out, &o))
        }
        "IRFFT" => {
            let Some(out) = complex_component(a.elem) else {
                return Err(
                    cx.err(format!("IRFFT expects a complex operand, got {}", show(cx.shape(0)?)))
                );
            };
            for (i, (&d, &n)) in inner[..k - 1].iter().zip(len).enumerate() {
                if d != n {
                    return Err(cx.err(format!(
                        "IRFFT needs all but the last innermost dimension to equal fft_length, but dimension {} is {d} and should be {n}",
                        r - k + i
                    )));
                }
            }
            let (last, n) = (dims[r - 1], len[k - 1]);
            if (last != 0 || n != 0) && last != n / 2 + 1 {
                return Err(cx.err(format!("IRFFT needs the innermost dimension to be fft_length/2+1, but dimension {} is {last} and should be {}", r - 1, n / 2 + 1)));
            }
            let mut o = dims.clone();
            o[r - 1] = n;
            Ok(mk(out, &o))
        }
        t => Err(cx.err(format!("unknown fft_type `{t}` (FFT, IFFT, RFFT or IRFFT)"))),
    }
}
