//! Contractions (XLA's `InferDotOpShape`, `InferConvolveShape`): `dot` with general
//! dimension numbers and `convolution` with its dim labels, feature and batch groups and
//! windows. Their result element type is the declared one when the text gives it (XLA's
//! `preferred_element_type`), else the operands' common one ([`result_elem`]).

use hlo_ir::{ElemType, Shape};

use super::context::{Cx, R, check_permutation, check_unique_in_range, mk, window_dim};

/// The result element type of `dot`/`convolution`: the declared one (the text decides it,
/// like XLA's `preferred_element_type`), or without a declared shape the operands' common
/// element type.
fn result_elem(cx: &Cx, lhs: ElemType, rhs: ElemType) -> R<ElemType> {
    match cx.declared {
        Some(_) => Ok(cx.declared_array()?.elem),
        None if lhs == rhs => Ok(lhs),
        None => Err(cx.err(format!(
            "the result shape of {} must be given: its operands have different element types ({lhs} and {rhs})",
            cx.name()
        ))),
    }
}

pub(super) fn dot(cx: &Cx, dd: &hlo_ir::op::DotDims) -> R<Shape> {
    let (le, l) = cx.arr(0)?;
    let (re, r) = cx.arr(1)?;
    let te = result_elem(cx, le, re)?;
    for (side, dims, batch, contr) in [
        ("lhs", &l, &dd.lhs_batch, &dd.lhs_contracting),
        ("rhs", &r, &dd.rhs_batch, &dd.rhs_contracting),
    ] {
        let all: Vec<i64> = batch.iter().chain(contr.iter()).copied().collect();
        check_unique_in_range(
            cx,
            &all,
            dims.len(),
            &format!("dot {side} batch/contracting dimension"),
            false,
        )?;
    }
    if dd.lhs_contracting.len() != dd.rhs_contracting.len() {
        return Err(cx.err(format!(
            "dot has {} lhs contracting dimensions but {} rhs contracting dimensions",
            dd.lhs_contracting.len(),
            dd.rhs_contracting.len()
        )));
    }
    if dd.lhs_batch.len() != dd.rhs_batch.len() {
        return Err(cx.err(format!(
            "dot has {} lhs batch dimensions but {} rhs batch dimensions",
            dd.lhs_batch.len(),
            dd.rhs_batch.len()
        )));
    }
    for (what, ls, rs) in [
        ("contracting", &dd.lhs_contracting, &dd.rhs_contracting),
        ("batch", &dd.lhs_batch, &dd.rhs_batch),
    ] {
        for (&a, &b) in ls.iter().zip(rs.iter()) {
            if l[a as usize] != r[b as usize] {
                return Err(cx.err(format!(
                    "dot {what} dimension sizes differ: lhs dim {a} is {}, rhs dim {b} is {}",
                    l[a as usize], r[b as usize]
                )));
            }
        }
    }
    let mut out: Vec<i64> = dd.lhs_batch.iter().map(|&b| l[b as usize]).collect();
    let free = |dims: &[i64], batch: &[i64], contr: &[i64]| -> Vec<i64> {
        (0..dims.len() as i64)
            .filter(|i| !batch.contains(i) && !contr.contains(i))
            .map(|i| dims[i as usize])
            .collect()
    };
    out.extend(free(&l, &dd.lhs_batch, &dd.lhs_contracting));
    out.extend(free(&r, &dd.rhs_batch, &dd.rhs_contracting));
    Ok(mk(te, &out))
}

pub(super) fn convolution(cx: &Cx, c: &hlo_ir::op::Convolution) -> R<Shape> {
    let (le, l) = cx.arr(0)?;
    let (ke, k) = cx.arr(1)?;
    let te = result_elem(cx, le, ke)?;
    let dn = &c.dims;
    let ns = dn.input_spatial.len();
    let (g, b) = (c.feature_group_count, c.batch_group_count);
    if g < 1 || b < 1 {
        return Err(
            cx.err(format!("feature_group_count ({g}) and batch_group_count ({b}) must be >= 1"))
        );
    }
    if g > 1 && b > 1 {
        return Err(cx.err(format!(
            "feature_group_count ({g}) and batch_group_count ({b}) cannot both be > 1"
        )));
    }
    if dn.kernel_spatial.len() != ns || dn.output_spatial.len() != ns {
        return Err(cx.err(
            "dim_labels give different numbers of spatial dimensions to input, kernel and output",
        ));
    }
    for (what, rank, perm) in [
        (
            "input",
            l.len(),
            [&[dn.input_batch, dn.input_feature][..], &dn.input_spatial[..]].concat(),
        ),
        (
            "kernel",
            k.len(),
            [&[dn.kernel_input_feature, dn.kernel_output_feature][..], &dn.kernel_spatial[..]]
                .concat(),
        ),
        (
            "output",
            ns + 2,
            [&[dn.output_batch, dn.output_feature][..], &dn.output_spatial[..]].concat(),
        ),
    ] {
        if rank != ns + 2 {
            return Err(
                cx.err(format!("convolution {what} has rank {rank}, dim_labels need {}", ns + 2))
            );
        }
        check_permutation(cx, &perm, rank, &format!("convolution {what} dim_labels"))?;
    }
    if c.window.dims.len() != ns {
        return Err(cx.err(format!(
            "convolution window has {} dimensions, dim_labels have {ns} spatial dimensions",
            c.window.dims.len()
        )));
    }
    let in_f = l[dn.input_feature as usize];
    let in_b = l[dn.input_batch as usize];
    let k_in = k[dn.kernel_input_feature as usize];
    let k_out = k[dn.kernel_output_feature as usize];
    if in_f % g != 0 || in_f / g != k_in {
        return Err(cx.err(format!(
            "convolution input features ({in_f}) / feature_group_count ({g}) must equal kernel input features ({k_in})"
        )));
    }
    if k_out % g != 0 {
        return Err(cx.err(format!(
            "kernel output features ({k_out}) must be divisible by feature_group_count ({g})"
        )));
    }
    if k_out % b != 0 {
        return Err(cx.err(format!(
            "kernel output features ({k_out}) must be divisible by batch_group_count ({b})"
        )));
    }
    if in_b % b != 0 {
        return Err(
            cx.err(format!("input batch ({in_b}) must be divisible by batch_group_count ({b})"))
        );
    }
    let mut out = vec![0; ns + 2];
    out[dn.output_batch as usize] = in_b / b;
    out[dn.output_feature as usize] = k_out;
    for i in 0..ns {
        let w = &c.window.dims[i];
        let ks = k[dn.kernel_spatial[i] as usize];
        if w.size != ks {
            return Err(cx.err(format!("convolution window size {} of spatial dimension {i} differs from the kernel's size {ks}", w.size)));
        }
        if w.stride < 1 || w.lhs_dilate < 1 || w.rhs_dilate < 1 {
            return Err(
                cx.err(format!("convolution window dimension {i} needs stride and dilations >= 1"))
            );
        }
        out[dn.output_spatial[i] as usize] = window_dim(l[dn.input_spatial[i] as usize], w);
    }
    Ok(mk(te, &out))
}
