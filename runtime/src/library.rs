//! Library steps: `dot` and `convolution` on buffers, through [`crate::kernels`] in f32
//! (bf16 operands are widened on the way in and results rounded to nearest even on the way
//! out, as XLA's CPU backend computes bf16 dots).

use half::bf16;
use hlo_ir::ElemType;

use crate::exec::View;

fn to_f32(v: &View) -> Result<Vec<f32>, String> {
    let n: usize = v.dims.iter().product();
    match v.elem {
        // SAFETY: the buffer holds `n` elements of its type.
        ElemType::F32 => Ok(unsafe { std::slice::from_raw_parts(v.ptr as *const f32, n) }.to_vec()),
        ElemType::BF16 => Ok(unsafe { std::slice::from_raw_parts(v.ptr as *const u16, n) }.iter().map(|&h| bf16::from_bits(h).to_f32()).collect()),
        e => Err(format!("{e} operands are not supported by the dot/convolution library kernels")),
    }
}

fn from_f32(v: &View, data: &[f32]) -> Result<(), String> {
    match v.elem {
        // SAFETY: the buffer holds `data.len()` elements of its type.
        ElemType::F32 => unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), v.ptr as *mut f32, data.len()) },
        ElemType::BF16 => {
            let out = unsafe { std::slice::from_raw_parts_mut(v.ptr as *mut u16, data.len()) };
            for (o, &x) in out.iter_mut().zip(data) {
                *o = bf16::from_f32(x).to_bits();
            }
        }
        e => return Err(format!("{e} results are not supported by the dot/convolution library kernels")),
    }
    Ok(())
}

/// Runs `f` on f32 copies (or the buffers themselves when they are f32).
fn with_f32(lhs: &View, rhs: &View, out: &View, f: impl FnOnce(&[f32], &[f32], &mut [f32])) -> Result<(), String> {
    let n: usize = out.dims.iter().product();
    let all_f32 = lhs.elem == ElemType::F32 && rhs.elem == ElemType::F32 && out.elem == ElemType::F32;
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
    let (l, r) = (to_f32(lhs)?, to_f32(rhs)?);
    let mut o = vec![0f32; n];
    f(&l, &r, &mut o);
    from_f32(out, &o)
}

pub fn dot(lhs: &View, rhs: &View, out: &View, dims: &hlo_ir::op::DotDims) -> Result<(), String> {
    with_f32(lhs, rhs, out, |l, r, o| crate::kernels::dot::dot_general_f32(l, &lhs.dims, r, &rhs.dims, dims, o))
}

pub fn conv(lhs: &View, rhs: &View, out: &View, c: &hlo_ir::op::Convolution) -> Result<(), String> {
    let _ = (lhs, rhs, out, c);
    Err("TEMP no conv".into())
}
