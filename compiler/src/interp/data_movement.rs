//! Data movement: broadcast, transpose, slice, reverse, concatenate, pad, iota,
//! dynamic-slice, dynamic-update-slice and gather. Each output element is read from one
//! operand element, so most kernels build the list of source indices and pick them.

use hlo_ir::ElemType;
use hlo_ir::op::{GatherDims, PadDim, SliceRange};

use super::elementwise::convert;
use super::value::{Failure, Array, Data, for_each_index, strides};

type R<T> = Result<T, Failure>;

/// Source linear index of every output element, in row-major output order.
fn sources(out_dims: &[usize], mut f: impl FnMut(&[usize]) -> usize) -> Vec<usize> {
    let mut v = Vec::with_capacity(out_dims.iter().product());
    for_each_index(out_dims, |idx, _| v.push(f(idx)));
    v
}

fn pick(a: &Array, out_dims: Vec<usize>, src: Vec<usize>) -> Array {
    Array::new(a.elem, out_dims, a.data.pick(&src))
}

/// Row-major strides as `isize` (for affine maps, which may step backwards).
fn istrides(dims: &[usize]) -> Vec<isize> {
    strides(dims).into_iter().map(|s| s as isize).collect()
}

fn affine(a: &Array, out_dims: Vec<usize>, base: isize, st: &[isize]) -> Array {
    let data = a.data.affine(&out_dims, base, st);
    Array::new(a.elem, out_dims, data)
}

/// `broadcast` with `dims[i]` = the output dimension of operand dimension i.
pub fn broadcast(a: &Array, out_dims: Vec<usize>, dims: &[i64]) -> Array {
    let ist = istrides(&a.dims);
    let mut st = vec![0isize; out_dims.len()];
    for (k, &d) in dims.iter().enumerate() {
        st[d as usize] = ist[k];
    }
    affine(a, out_dims, 0, &st)
}

/// `transpose`: output dimension i is operand dimension `perm[i]`.
pub fn transpose(a: &Array, perm: &[i64]) -> Array {
    let ist = istrides(&a.dims);
    let out_dims: Vec<usize> = perm.iter().map(|&p| a.dims[p as usize]).collect();
    let st: Vec<isize> = perm.iter().map(|&p| ist[p as usize]).collect();
    affine(a, out_dims, 0, &st)
}

pub fn slice(a: &Array, ranges: &[SliceRange]) -> Array {
    let ist = istrides(&a.dims);
    let out_dims: Vec<usize> =
        ranges.iter().map(|r| ((r.limit - r.start).max(0) as usize).div_ceil(r.stride.max(1) as usize)).collect();
    let base = ranges.iter().zip(&ist).map(|(r, &s)| r.start as isize * s).sum();
    let st: Vec<isize> = ranges.iter().zip(&ist).map(|(r, &s)| r.stride as isize * s).collect();
    affine(a, out_dims, base, &st)
}

pub fn reverse(a: &Array, dims: &[i64]) -> Array {
    let mut st = istrides(&a.dims);
    let mut base = 0;
    for &d in dims {
        let d = d as usize;
        base += (a.dims[d] as isize - 1) * st[d];
        st[d] = -st[d];
    }
    affine(a, a.dims.clone(), base, &st)
}

/// Concatenation of `parts` along `dim`: per outer index, each part contributes a
/// contiguous run of its `dims[dim..]` elements.
pub fn concatenate(parts: &[&Array], dim: usize) -> Array {
    let outer: usize = parts[0].dims[..dim].iter().product();
    let mut out_dims = parts[0].dims.clone();
    out_dims[dim] = parts.iter().map(|p| p.dims[dim]).sum();
    let runs: Vec<usize> = parts.iter().map(|p| p.dims[dim..].iter().product()).collect();
    let mut data = parts[0].data.empty_like(out_dims.iter().product());
    for o in 0..outer {
        for (p, &run) in parts.iter().zip(&runs) {
            data.push_range(&p.data, o * run..(o + 1) * run);
        }
    }
    Array::new(parts[0].elem, out_dims, data)
}

/// `pad` with edge (possibly negative) and interior padding.
pub fn pad(a: &Array, value: &Array, config: &[PadDim]) -> Array {
    let out_dims: Vec<usize> = a
        .dims
        .iter()
        .zip(config)
        .map(|(&d, p)| (p.lo + p.hi + d as i64 + (d as i64 - 1).max(0) * p.interior).max(0) as usize)
        .collect();
    let n = out_dims.iter().product();
    let mut data = value.data.splat(0, n);
    let ost = strides(&out_dims);
    let mut pairs = Vec::with_capacity(a.len());
    for_each_index(&a.dims, |idx, lin| {
        let mut dst = 0usize;
        for (d, &i) in idx.iter().enumerate() {
            let p = config[d].lo + i as i64 * (config[d].interior + 1);
            if p < 0 || p >= out_dims[d] as i64 {
                return;
            }
            dst += p as usize * ost[d];
        }
        pairs.push((dst, lin));
    });
    data.scatter_from(&a.data, pairs.into_iter());
    Array::new(a.elem, out_dims, data)
}

/// `iota` along `dim` converted to `elem`.
pub fn iota(elem: ElemType, dims: Vec<usize>, dim: usize) -> R<Array> {
    let st = strides(&dims);
    let n: usize = dims.iter().product();
    let v: Vec<i64> = (0..n).map(|lin| ((lin / st[dim]) % dims[dim]) as i64).collect();
    convert(&Array::new(ElemType::S64, dims, Data::Int(v)), elem)
}

/// Start indices clamped so that a window of `sizes` fits in `dims`.
pub fn clamp_starts(starts: &[i64], dims: &[usize], sizes: &[usize]) -> Vec<usize> {
    starts.iter().zip(dims).zip(sizes).map(|((&s, &d), &z)| s.clamp(0, (d - z.min(d)) as i64) as usize).collect()
}

pub fn dynamic_slice(a: &Array, starts: &[i64], sizes: &[usize]) -> Array {
    let ist = istrides(&a.dims);
    let starts = clamp_starts(starts, &a.dims, sizes);
    let base = starts.iter().zip(&ist).map(|(&s, &m)| s as isize * m).sum();
    affine(a, sizes.to_vec(), base, &ist)
}

pub fn dynamic_update_slice(a: &Array, update: &Array, starts: &[i64]) -> Array {
    let st = strides(&a.dims);
    let starts = clamp_starts(starts, &a.dims, &update.dims);
    let mut out = a.clone();
    let mut pairs = Vec::with_capacity(update.len());
    for_each_index(&update.dims, |idx, lin| {
        pairs.push((idx.iter().zip(&starts).zip(&st).map(|((&i, &s), &m)| (i + s) * m).sum(), lin));
    });
    out.data.scatter_from(&update.data, pairs.into_iter());
    out
}

/// Operand dimensions that are windowed (not collapsed/inserted, not batching), ascending.
pub fn window_operand_dims(rank: usize, collapsed: &[i64], batching: &[i64]) -> Vec<usize> {
    (0..rank).filter(|d| !collapsed.contains(&(*d as i64)) && !batching.contains(&(*d as i64))).collect()
}

/// The scatter/gather index vector for batch position `batch` (coordinates of the indices
/// array without `index_vector_dim`): `count` integers.
pub fn index_vector(indices: &Array, index_vector_dim: usize, batch: &[usize], count: usize) -> Vec<i64> {
    let st = strides(&indices.dims);
    let implicit = index_vector_dim == indices.dims.len();
    (0..count)
        .map(|k| {
            let mut lin = 0;
            let mut b = batch.iter();
            for (d, &s) in st.iter().enumerate() {
                let coord = if !implicit && d == index_vector_dim { k } else { *b.next().unwrap_or(&0) };
                lin += coord * s;
            }
            indices.int_at(lin)
        })
        .collect()
}

/// Position in the batch coordinates (indices dims without `index_vector_dim`) of
/// indices dimension `d`.
pub fn batch_position(d: usize, index_vector_dim: usize) -> usize {
    if d > index_vector_dim { d - 1 } else { d }
}

/// `gather` (hlo-ops.md §4.1): start indices clamped so each slice fits.
pub fn gather(a: &Array, indices: &Array, g: &GatherDims, out_dims: Vec<usize>) -> Array {
    let st = strides(&a.dims);
    let ivd = g.index_vector_dim as usize;
    let sizes: Vec<usize> = g.slice_sizes.iter().map(|&s| s as usize).collect();
    let window = window_operand_dims(a.dims.len(), &g.collapsed_slice_dims, &g.operand_batching_dims);
    let offset: Vec<usize> = g.offset_dims.iter().map(|&d| d as usize).collect();
    let batch_dims: Vec<usize> = (0..out_dims.len()).filter(|d| !offset.contains(d)).collect();
    let mut batch = vec![0usize; batch_dims.len()];
    let src = sources(&out_dims, |idx| {
        for (b, &d) in batch.iter_mut().zip(&batch_dims) {
            *b = idx[d];
        }
        let iv = index_vector(indices, ivd, &batch, g.start_index_map.len());
        let mut start = vec![0i64; a.dims.len()];
        for (k, &d) in g.start_index_map.iter().enumerate() {
            start[d as usize] = iv[k];
        }
        for (&od, &id) in g.operand_batching_dims.iter().zip(&g.start_indices_batching_dims) {
            start[od as usize] = batch[batch_position(id as usize, ivd)] as i64;
        }
        let start = clamp_starts(&start, &a.dims, &sizes);
        let mut lin = 0;
        for (d, &s) in start.iter().enumerate() {
            lin += s * st[d];
        }
        for (k, &od) in window.iter().enumerate() {
            lin += idx[offset[k]] * st[od];
        }
        lin
    });
    pick(a, out_dims, src)
}
