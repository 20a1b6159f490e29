//! Data movement (XLA's `InferBroadcastShape`, `InferReshapeShape`,
//! `InferTransposeShape`, `InferReverseShape`, `InferSliceShape`,
//! `InferConcatOpShape`, `InferPadShape`, `InferDynamicSliceShape`,
//! `InferDynamicUpdateSliceShape`, `InferGatherShape`, `InferScatterShape`, `InferTopKShape`
//! and the variadic `sort`): `iota`, `broadcast`, `reshape`, `transpose`, `reverse`,
//! `slice`, `concatenate`, `pad`, `dynamic-slice`, `dynamic-update-slice`, `gather` and
//! `scatter` (with their batching dimensions), `sort` and `topk`.

use hlo_ir::{ElemType, Shape};

use super::context::{
    Cx, R, check_permutation, check_unique_in_range, dim_in_range, mk, scalar, tuple_if_many,
};
use super::reduction::check_reducer;
use super::show;

pub(super) fn iota(cx: &Cx, dimension: i64) -> R<Shape> {
    let (e, d) = cx.declared_arr()?;
    if d.is_empty() {
        return Err(cx.err("iota must produce an array of rank >= 1"));
    }
    if e == ElemType::Pred {
        return Err(cx.err("iota element type must be integral, floating or complex, got pred"));
    }
    dim_in_range(cx, dimension, d.len(), "iota_dimension")?;
    Ok(cx.declared()?.clone())
}

pub(super) fn broadcast(cx: &Cx, dims: &[i64]) -> R<Shape> {
    let (e, d) = cx.arr(0)?;
    let (te, td) = cx.declared_arr()?;
    if e != te {
        return Err(cx.err(format!("broadcast changes the element type from {e} to {te}")));
    }
    if dims.len() != d.len() {
        return Err(cx.err(format!(
            "broadcast dimensions {dims:?} must have one entry per operand dimension ({})",
            d.len()
        )));
    }
    for (i, &t) in dims.iter().enumerate() {
        dim_in_range(cx, t, td.len(), "broadcast dimension")?;
        if i > 0 && dims[i - 1] >= t {
            return Err(
                cx.err(format!("broadcast dimensions {dims:?} must be strictly increasing"))
            );
        }
        if td[t as usize] != d[i] {
            return Err(cx.err(format!(
                "broadcast maps operand dim {i} (size {}) to result dim {t} (size {}); sizes must match",
                d[i], td[t as usize]
            )));
        }
    }
    Ok(cx.declared()?.clone())
}

pub(super) fn reshape(cx: &Cx) -> R<Shape> {
    let (e, d) = cx.arr(0)?;
    let (te, td) = cx.declared_arr()?;
    if e != te {
        return Err(cx.err(format!("reshape changes the element type from {e} to {te}")));
    }
    let (a, b): (i64, i64) = (d.iter().product(), td.iter().product());
    if a != b {
        return Err(cx.err(format!(
            "reshape changes the element count: operand has {a} elements, result has {b}"
        )));
    }
    Ok(cx.declared()?.clone())
}

pub(super) fn transpose(cx: &Cx, dimensions: &[i64]) -> R<Shape> {
    let (e, d) = cx.arr(0)?;
    check_permutation(cx, dimensions, d.len(), "transpose dimensions")?;
    Ok(mk(e, &dimensions.iter().map(|&p| d[p as usize]).collect::<Vec<_>>()))
}

pub(super) fn reverse(cx: &Cx, dimensions: &[i64]) -> R<Shape> {
    let (e, d) = cx.arr(0)?;
    check_unique_in_range(cx, dimensions, d.len(), "reverse dimensions", false)?;
    Ok(mk(e, &d))
}

pub(super) fn slice(cx: &Cx, ranges: &[hlo_ir::op::SliceRange]) -> R<Shape> {
    let (e, d) = cx.arr(0)?;
    if ranges.len() != d.len() {
        return Err(cx.err(format!(
            "slice has {} ranges for an operand of rank {}",
            ranges.len(),
            d.len()
        )));
    }
    let mut out = Vec::new();
    for (i, (r, &dim)) in ranges.iter().zip(&d).enumerate() {
        if r.stride < 1 {
            return Err(
                cx.err(format!("slice stride of dimension {i} must be >= 1, got {}", r.stride))
            );
        }
        if r.start < 0 || r.start > r.limit || r.limit > dim {
            return Err(cx.err(format!(
                "slice range [{}:{}] of dimension {i} is not within 0 <= start <= limit <= {dim}",
                r.start, r.limit
            )));
        }
        out.push((r.limit - r.start + r.stride - 1) / r.stride);
    }
    Ok(mk(e, &out))
}

pub(super) fn concatenate(cx: &Cx, dim: i64) -> R<Shape> {
    let (e, d) = cx.arr(0)?;
    dim_in_range(cx, dim, d.len(), "concatenate dimension")?;
    let mut out = d.clone();
    for k in 1..cx.ops.len() {
        let (e2, d2) = cx.arr(k)?;
        if e2 != e {
            return Err(
                cx.err(format!("concatenate operand {k} has element type {e2}, operand 0 has {e}"))
            );
        }
        if d2.len() != d.len() {
            return Err(cx.err(format!(
                "concatenate operand {k} has rank {}, operand 0 has rank {}",
                d2.len(),
                d.len()
            )));
        }
        for i in 0..d.len() {
            if i as i64 != dim && d2[i] != d[i] {
                return Err(cx.err(format!(
                    "concatenate operands differ outside dimension {dim}: operand 0 is {} and operand {k} is {}",
                    show(cx.shape(0)?),
                    show(cx.shape(k)?)
                )));
            }
        }
        out[dim as usize] += d2[dim as usize];
    }
    Ok(mk(e, &out))
}

pub(super) fn pad(cx: &Cx, config: &[hlo_ir::op::PadDim]) -> R<Shape> {
    let (e, d) = cx.arr(0)?;
    match scalar(cx.shape(1)?) {
        Some(pe) if pe == e => {}
        _ => {
            return Err(
                cx.err(format!("pad value must be a {e}[] scalar, got {}", show(cx.shape(1)?)))
            );
        }
    }
    if config.len() != d.len() {
        return Err(cx.err(format!(
            "padding has {} dimensions for an operand of rank {}",
            config.len(),
            d.len()
        )));
    }
    let mut out = Vec::new();
    for (i, (p, &n)) in config.iter().zip(&d).enumerate() {
        if p.interior < 0 {
            return Err(cx.err(format!(
                "interior padding of dimension {i} must be >= 0, got {}",
                p.interior
            )));
        }
        let r = p.lo + p.hi + n + (n - 1).max(0) * p.interior;
        if r < 0 {
            return Err(cx.err(format!(
                "padding {}_{}_{} of dimension {i} (size {n}) gives a negative size {r}",
                p.lo, p.hi, p.interior
            )));
        }
        out.push(r);
    }
    Ok(mk(e, &out))
}

/// `rank` scalar integer index operands of one type starting at operand `first` (or the
/// legacy single rank-1 index vector).
fn check_indices(cx: &Cx, first: usize, rank: usize) -> R<()> {
    let n = cx.ops.len() - first.min(cx.ops.len());
    if n == 1 && rank != 1 {
        let (e, d) = cx.arr(first)?;
        if e.is_integer() && d.len() == 1 && d[0] as usize == rank {
            return Ok(());
        }
    }
    if n != rank {
        return Err(cx.err(format!("{} needs {rank} start index operands, got {n}", cx.name())));
    }
    let mut ty = None;
    for k in first..cx.ops.len() {
        let s = cx.shape(k)?;
        match scalar(s) {
            Some(e) if e.is_integer() => {
                if ty.is_some_and(|t| t != e) {
                    return Err(cx.err(format!(
                        "{} start indices must all have one type, got {} and {e}",
                        cx.name(),
                        ty.unwrap()
                    )));
                }
                ty = Some(e);
            }
            _ => {
                return Err(cx.err(format!(
                    "{} start index operand {k} must be an integer scalar, got {}",
                    cx.name(),
                    show(s)
                )));
            }
        }
    }
    Ok(())
}

pub(super) fn dynamic_slice(cx: &Cx, sizes: &[i64]) -> R<Shape> {
    let (e, d) = cx.arr(0)?;
    check_indices(cx, 1, d.len())?;
    if sizes.len() != d.len() {
        return Err(cx.err(format!(
            "dynamic-slice has {} sizes for an operand of rank {}",
            sizes.len(),
            d.len()
        )));
    }
    for (i, (&s, &dim)) in sizes.iter().zip(&d).enumerate() {
        if s < 0 || s > dim {
            return Err(
                cx.err(format!("dynamic-slice size {s} of dimension {i} is not within 0..={dim}"))
            );
        }
    }
    Ok(mk(e, sizes))
}

pub(super) fn dynamic_update_slice(cx: &Cx) -> R<Shape> {
    let (e, d) = cx.arr(0)?;
    let (ue, ud) = cx.arr(1)?;
    if ue != e {
        return Err(cx.err(format!(
            "dynamic-update-slice update element type {ue} differs from operand element type {e}"
        )));
    }
    if ud.len() != d.len() {
        return Err(cx.err(format!(
            "dynamic-update-slice update rank {} differs from operand rank {}",
            ud.len(),
            d.len()
        )));
    }
    for (i, (&u, &o)) in ud.iter().zip(&d).enumerate() {
        if u > o {
            return Err(cx.err(format!(
                "dynamic-update-slice update dim {i} is {u}, larger than operand dim {o}"
            )));
        }
    }
    check_indices(cx, 2, d.len())?;
    Ok(mk(e, &d))
}

/// Indices with the implicit trailing 1 when `index_vector_dim == rank`.
fn index_dims(cx: &Cx, k: usize, ivd: i64) -> R<Vec<i64>> {
    let (e, mut d) = cx.arr(k)?;
    if !e.is_integer() {
        return Err(cx.err(format!("{} indices must be integers, got {e}", cx.name())));
    }
    if ivd < 0 || ivd as usize > d.len() {
        return Err(cx.err(format!(
            "index_vector_dim {ivd} is out of range for indices of rank {}",
            d.len()
        )));
    }
    if ivd as usize == d.len() {
        d.push(1);
    }
    Ok(d)
}

/// The batching dimensions of gather/scatter, each with its attribute name: operand-side
/// and indices-side batching dims, collapsed (gather) / inserted (scatter) window dims,
/// and the start_index_map (gather) / scatter_dims_to_operand_dims (scatter).
struct Batching<'a> {
    operand: (&'static str, &'a [i64]),
    indices: (&'static str, &'a [i64]),
    collapsed: (&'static str, &'a [i64]),
    index_map: (&'static str, &'a [i64]),
}

/// XLA's pairing rules for batching dimensions: equal counts; indices-side dims unique, in
/// range and not `index_vector_dim`; paired dims of equal size; an operand batching dim is
/// neither collapsed/inserted nor indexed. `id` has the implicit trailing 1 when
/// `index_vector_dim == rank`, so range checks use the rank written in the text.
fn check_batching(
    cx: &Cx,
    b: Batching,
    od: &[i64],
    id: &[i64],
    ivd: usize,
    indices_operand: usize,
) -> R<()> {
    let op = cx.name();
    let ((on, ob), (inn, ib)) = (b.operand, b.indices);
    if ob.len() != ib.len() {
        return Err(cx.err(format!("{op} {on} {ob:?} and {inn} {ib:?} differ in length")));
    }
    let indices_rank = cx.arr(indices_operand)?.1.len();
    for &d in ib {
        if d == ivd as i64 {
            return Err(cx.err(format!("{op} {inn} must not contain index_vector_dim {ivd}")));
        }
    }
    check_unique_in_range(cx, ib, indices_rank, &format!("{op} {inn}"), false)?;
    for (k, (&o, &i)) in ob.iter().zip(ib).enumerate() {
        let (os, is) = (od[o as usize], id[i as usize]);
        if os != is {
            return Err(cx.err(format!(
                "{op} {on}[{k}] (operand dim {o}, size {os}) and {inn}[{k}] (indices dim {i}, size {is}) must have the same size: operand {} and indices {}",
                show(cx.shape(0)?),
                show(cx.shape(indices_operand)?)
            )));
        }
    }
    for (what, dims) in [b.collapsed, b.index_map] {
        if let Some(d) = dims.iter().find(|d| ob.contains(d)) {
            return Err(cx.err(format!("{op} operand dimension {d} is in both {what} and {on}")));
        }
    }
    Ok(())
}

pub(super) fn gather(cx: &Cx, g: &hlo_ir::op::GatherDims) -> R<Shape> {
    let (e, od) = cx.arr(0)?;
    let id = index_dims(cx, 1, g.index_vector_dim)?;
    let ivd = g.index_vector_dim as usize;
    let batch_rank = id.len() - 1;
    let out_rank = g.offset_dims.len() + batch_rank;
    check_unique_in_range(cx, &g.offset_dims, out_rank, "gather offset_dims", true)?;
    check_unique_in_range(
        cx,
        &g.collapsed_slice_dims,
        od.len(),
        "gather collapsed_slice_dims",
        true,
    )?;
    check_unique_in_range(
        cx,
        &g.operand_batching_dims,
        od.len(),
        "gather operand_batching_dims",
        true,
    )?;
    check_unique_in_range(cx, &g.start_index_map, od.len(), "gather start_index_map", false)?;
    if g.start_index_map.len() as i64 != id[ivd] {
        return Err(cx.err(format!(
            "gather start_index_map has {} entries but the index vector dimension has size {}",
            g.start_index_map.len(),
            id[ivd]
        )));
    }
    check_batching(
        cx,
        Batching {
            operand: ("operand_batching_dims", &g.operand_batching_dims),
            indices: ("start_indices_batching_dims", &g.start_indices_batching_dims),
            collapsed: ("collapsed_slice_dims", &g.collapsed_slice_dims),
            index_map: ("start_index_map", &g.start_index_map),
        },
        &od,
        &id,
        ivd,
        1,
    )?;
    if g.slice_sizes.len() != od.len() {
        return Err(cx.err(format!(
            "gather has {} slice_sizes for an operand of rank {}",
            g.slice_sizes.len(),
            od.len()
        )));
    }
    if g.offset_dims.len() + g.collapsed_slice_dims.len() + g.operand_batching_dims.len()
        != od.len()
    {
        return Err(cx.err(format!(
            "gather offset_dims ({}) + collapsed_slice_dims ({}) + operand_batching_dims ({}) must equal the operand rank ({})",
            g.offset_dims.len(),
            g.collapsed_slice_dims.len(),
            g.operand_batching_dims.len(),
            od.len()
        )));
    }
    for (i, (&s, &n)) in g.slice_sizes.iter().zip(&od).enumerate() {
        if s < 0 || s > n {
            return Err(cx.err(format!(
                "gather slice size {s} of dimension {i} is not within 0..={n} (operand {})",
                show(cx.shape(0)?)
            )));
        }
        let i = i as i64;
        if (g.collapsed_slice_dims.contains(&i) || g.operand_batching_dims.contains(&i)) && s > 1 {
            return Err(cx.err(format!(
                "gather slice size of collapsed/batching dimension {i} must be <= 1, got {s}"
            )));
        }
    }
    let mut offs = (0..od.len() as i64)
        .filter(|i| !g.collapsed_slice_dims.contains(i) && !g.operand_batching_dims.contains(i))
        .map(|i| g.slice_sizes[i as usize]);
    let mut bats = (0..id.len()).filter(|&i| i != ivd).map(|i| id[i]);
    let out: Vec<i64> = (0..out_rank as i64)
        .map(|i| if g.offset_dims.contains(&i) { offs.next() } else { bats.next() }.unwrap_or(0))
        .collect();
    Ok(mk(e, &out))
}

pub(super) fn scatter(cx: &Cx, s: &hlo_ir::op::ScatterDims) -> R<Shape> {
    let total = cx.ops.len();
    if total < 3 || total.is_multiple_of(2) {
        return Err(cx.err(format!("scatter needs 2N+1 operands, got {total}")));
    }
    let n = (total - 1) / 2;
    let (_, od) = cx.arr(0)?;
    let id = index_dims(cx, n, s.index_vector_dim)?;
    let ivd = s.index_vector_dim as usize;
    check_unique_in_range(
        cx,
        &s.inserted_window_dims,
        od.len(),
        "scatter inserted_window_dims",
        true,
    )?;
    check_unique_in_range(
        cx,
        &s.input_batching_dims,
        od.len(),
        "scatter input_batching_dims",
        true,
    )?;
    check_unique_in_range(
        cx,
        &s.scatter_dims_to_operand_dims,
        od.len(),
        "scatter scatter_dims_to_operand_dims",
        false,
    )?;
    if s.update_window_dims.len() + s.inserted_window_dims.len() + s.input_batching_dims.len()
        != od.len()
    {
        return Err(cx.err(format!(
            "scatter update_window_dims ({}) + inserted_window_dims ({}) + input_batching_dims ({}) must equal the operand rank ({})",
            s.update_window_dims.len(),
            s.inserted_window_dims.len(),
            s.input_batching_dims.len(),
            od.len()
        )));
    }
    if s.scatter_dims_to_operand_dims.len() as i64 != id[ivd] {
        return Err(cx.err(format!(
            "scatter scatter_dims_to_operand_dims has {} entries but the index vector dimension has size {}",
            s.scatter_dims_to_operand_dims.len(),
            id[ivd]
        )));
    }
    check_batching(
        cx,
        Batching {
            operand: ("input_batching_dims", &s.input_batching_dims),
            indices: ("scatter_indices_batching_dims", &s.scatter_indices_batching_dims),
            collapsed: ("inserted_window_dims", &s.inserted_window_dims),
            index_map: ("scatter_dims_to_operand_dims", &s.scatter_dims_to_operand_dims),
        },
        &od,
        &id,
        ivd,
        n,
    )?;
    let mut results = Vec::new();
    let mut elems = Vec::new();
    for k in 0..n {
        let (e, dk) = cx.arr(k)?;
        if dk != od {
            return Err(cx.err(format!(
                "scatter operands must have the same dimensions: {} and {}",
                show(cx.shape(0)?),
                show(cx.shape(k)?)
            )));
        }
        let (ue, ud) = cx.arr(n + 1 + k)?;
        if ue != e {
            return Err(cx.err(format!(
                "scatter update {k} {} must have the element type of operand {k} {} (no mixed floating-point precision)",
                show(cx.shape(n + 1 + k)?),
                show(cx.shape(k)?)
            )));
        }
        let want = id.len() - 1 + s.update_window_dims.len();
        if ud.len() != want {
            return Err(
                cx.err(format!("scatter update {k} has rank {}, expected {want}", ud.len()))
            );
        }
        check_unique_in_range(
            cx,
            &s.update_window_dims,
            ud.len(),
            "scatter update_window_dims",
            true,
        )?;
        let mut window_operand_dims = (0..od.len() as i64)
            .filter(|i| !s.inserted_window_dims.contains(i) && !s.input_batching_dims.contains(i));
        let mut scatter_index_dims = (0..id.len()).filter(|&i| i != ivd);
        for (u, &size) in ud.iter().enumerate() {
            if s.update_window_dims.contains(&(u as i64)) {
                let o = window_operand_dims.next().unwrap_or(0) as usize;
                if size > od[o] {
                    return Err(cx.err(format!(
                        "scatter update {k} window dim {u} is {size}, larger than operand dim {o} ({}): update {}, operand {}",
                        od[o],
                        show(cx.shape(n + 1 + k)?),
                        show(cx.shape(k)?)
                    )));
                }
            } else {
                let j = scatter_index_dims.next().unwrap_or(0);
                if size != id[j] {
                    return Err(cx.err(format!(
                        "scatter update {k} dim {u} is {size}, but indices dim {j} is {}",
                        id[j]
                    )));
                }
            }
        }
        results.push(mk(e, &od));
        elems.push(e);
    }
    let ups: Vec<ElemType> = (0..n).map(|k| cx.arr(n + 1 + k).map(|x| x.0)).collect::<R<_>>()?;
    check_reducer(cx, s.to_apply, &elems, &ups, false)?;
    Ok(tuple_if_many(results))
}

pub(super) fn sort(cx: &Cx, dim: i64, to_apply: hlo_ir::CompId) -> R<Shape> {
    let (_, d) = cx.arr(0)?;
    dim_in_range(cx, dim, d.len(), "sort dimension")?;
    let mut shapes = Vec::new();
    let mut elems = Vec::new();
    for k in 0..cx.ops.len() {
        let (e, dk) = cx.arr(k)?;
        if dk != d {
            return Err(cx.err(format!(
                "sort operands must have the same dimensions: {} and {}",
                show(cx.shape(0)?),
                show(cx.shape(k)?)
            )));
        }
        shapes.push(mk(e, &d));
        elems.push(e);
    }
    let c = cx.callee(to_apply)?;
    let ps = &c.params;
    if ps.len() != 2 * elems.len() {
        return Err(cx.err(format!(
            "sort comparator `{}` must take {} scalar parameters, takes {}",
            c.name,
            2 * elems.len(),
            ps.len()
        )));
    }
    for (k, p) in ps.iter().enumerate() {
        if scalar(p) != Some(elems[k / 2]) {
            return Err(cx.err(format!(
                "sort comparator `{}` parameter {k} is {}, expected {}[]",
                c.name,
                show(p),
                elems[k / 2]
            )));
        }
    }
    if scalar(cx.callee_root(&c)?) != Some(ElemType::Pred) {
        return Err(cx.err(format!("sort comparator `{}` must return pred[]", c.name)));
    }
    Ok(tuple_if_many(shapes))
}

pub(super) fn topk(cx: &Cx, k: i64) -> R<Shape> {
    let (e, mut d) = cx.arr(0)?;
    let Some(last) = d.last_mut() else {
        return Err(cx.err("topk operand must have rank >= 1"));
    };
    if k < 0 || k > *last {
        return Err(cx.err(format!("topk k={k} is larger than the last dimension ({last})")));
    }
    *last = k;
    Ok(Shape::Tuple(vec![mk(e, &d), mk(ElemType::S32, &d)]))
}
