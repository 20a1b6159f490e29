//! Data movement: broadcast, transpose, slice, reverse, concatenate, pad, iota,
//! dynamic-slice, dynamic-update-slice and gather. Each output element is read from one
//! operand element, so most kernels build the list of source indices and pick them.

use hlo_ir::ElemType;
use hlo_ir::op::{GatherDims, PadDim, SliceRange};

use super::elementwise::convert;
use super::value::{Array, Data, Failure, for_each_index, strides};

type R<T> = Result<T, Failure>;

// The kernels' preconditions (`ensure`), which shape inference guarantees on checked
// modules, are checked again here (cheaply, on dims and attributes) so that an unchecked
// module gives an error instead of an out-of-range index.
pub(crate) use super::value::{dims_text, ensure};

/// Checks that the dims a kernel derived from its attributes are the declared ones
/// (before it allocates anything of that size).
fn ensure_dims(derived: &[usize], declared: &[usize], what: &str) -> R<()> {
    ensure(derived == declared, || {
        format!(
            "{what} gives dims {} but the result is declared with dims {}",
            dims_text(derived),
            dims_text(declared)
        )
    })
}

/// Every entry of `dims` is a distinct dimension number below `rank`.
fn ensure_dim_numbers(dims: &[i64], rank: usize, what: &str) -> R<()> {
    let mut seen = vec![false; rank];
    for &d in dims {
        let ok = d >= 0 && (d as usize) < rank && !seen[d as usize];
        ensure(ok, || format!("{what} {d} is out of range or repeated for rank {rank}"))?;
        seen[d as usize] = true;
    }
    Ok(())
}

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
pub fn broadcast(a: &Array, out_dims: Vec<usize>, dims: &[i64]) -> R<Array> {
    ensure(dims.len() == a.dims.len(), || {
        format!("broadcast dimensions {dims:?} for an operand of rank {}", a.dims.len())
    })?;
    ensure_dim_numbers(dims, out_dims.len(), "broadcast dimension")?;
    let ist = istrides(&a.dims);
    let mut st = vec![0isize; out_dims.len()];
    for (k, &d) in dims.iter().enumerate() {
        let d = d as usize;
        ensure(a.dims[k] == out_dims[d], || {
            format!(
                "operand dimension {k} (size {}) maps to result dimension {d} of size {}",
                a.dims[k], out_dims[d]
            )
        })?;
        st[d] = ist[k];
    }
    Ok(affine(a, out_dims, 0, &st))
}

/// `transpose`: output dimension i is operand dimension `perm[i]`.
pub fn transpose(a: &Array, perm: &[i64]) -> R<Array> {
    ensure(perm.len() == a.dims.len(), || {
        format!("permutation {perm:?} for an operand of rank {}", a.dims.len())
    })?;
    ensure_dim_numbers(perm, a.dims.len(), "permutation entry")?;
    let ist = istrides(&a.dims);
    let out_dims: Vec<usize> = perm.iter().map(|&p| a.dims[p as usize]).collect();
    let st: Vec<isize> = perm.iter().map(|&p| ist[p as usize]).collect();
    Ok(affine(a, out_dims, 0, &st))
}

pub fn slice(a: &Array, ranges: &[SliceRange], declared: &[usize]) -> R<Array> {
    ensure(ranges.len() == a.dims.len(), || {
        format!("{} slice ranges for an operand of rank {}", ranges.len(), a.dims.len())
    })?;
    for (d, (r, &n)) in ranges.iter().zip(&a.dims).enumerate() {
        ensure(
            0 <= r.start && r.start <= r.limit && r.limit as u64 <= n as u64 && r.stride >= 1,
            || {
                format!(
                    "slice [{}:{}:{}] of dimension {d} (size {n}) is out of range",
                    r.start, r.limit, r.stride
                )
            },
        )?;
    }
    let ist = istrides(&a.dims);
    let out_dims: Vec<usize> =
        ranges.iter().map(|r| ((r.limit - r.start) as usize).div_ceil(r.stride as usize)).collect();
    ensure_dims(&out_dims, declared, "the slice")?;
    let base = ranges.iter().zip(&ist).map(|(r, &s)| r.start as isize * s).sum();
    let st: Vec<isize> = ranges.iter().zip(&ist).map(|(r, &s)| r.stride as isize * s).collect();
    Ok(affine(a, out_dims, base, &st))
}

pub fn reverse(a: &Array, dims: &[i64]) -> R<Array> {
    ensure_dim_numbers(dims, a.dims.len(), "reversed dimension")?;
    let mut st = istrides(&a.dims);
    let mut base = 0;
    for &d in dims {
        let d = d as usize;
        base += (a.dims[d] as isize - 1).max(0) * st[d];
        st[d] = -st[d];
    }
    Ok(affine(a, a.dims.clone(), base, &st))
}

/// Concatenation of `parts` along `dim`: per outer index, each part contributes a
/// contiguous run of its `dims[dim..]` elements.
pub fn concatenate(parts: &[&Array], dim: usize, declared: &[usize]) -> R<Array> {
    let first = parts.first().ok_or("concatenate without operands")?;
    let rank = first.dims.len();
    ensure(dim < rank, || format!("concatenate dimension {dim} for operands of rank {rank}"))?;
    for (k, p) in parts.iter().enumerate() {
        let same =
            p.dims.len() == rank && (0..rank).all(|d| d == dim || p.dims[d] == first.dims[d]);
        ensure(same && p.elem == first.elem, || {
            format!(
                "operand {k} ({}{}) does not fit operand 0 ({}{}) outside dimension {dim}",
                p.elem,
                dims_text(&p.dims),
                first.elem,
                dims_text(&first.dims)
            )
        })?;
    }
    let outer: usize = first.dims[..dim].iter().product();
    let mut out_dims = first.dims.clone();
    out_dims[dim] = parts.iter().map(|p| p.dims[dim]).sum();
    ensure_dims(&out_dims, declared, "the concatenation")?;
    let runs: Vec<usize> = parts.iter().map(|p| p.dims[dim..].iter().product()).collect();
    let mut data = first.data.empty_like(out_dims.iter().product());
    for o in 0..outer {
        for (p, &run) in parts.iter().zip(&runs) {
            data.push_range(&p.data, o * run..(o + 1) * run)?;
        }
    }
    Ok(Array::new(first.elem, out_dims, data))
}

/// `pad` with edge (possibly negative) and interior padding.
pub fn pad(a: &Array, value: &Array, config: &[PadDim], declared: &[usize]) -> R<Array> {
    ensure(config.len() == a.dims.len(), || {
        format!("{} padding entries for an operand of rank {}", config.len(), a.dims.len())
    })?;
    ensure(value.len() == 1 && value.elem == a.elem, || {
        format!(
            "the padding value is {}{}, not a {} scalar",
            value.elem,
            dims_text(&value.dims),
            a.elem
        )
    })?;
    // In i128: attributes are arbitrary i64s on an unchecked module.
    let out_dims: Vec<usize> = a
        .dims
        .iter()
        .zip(config)
        .map(|(&d, p)| {
            let n = p.lo as i128
                + p.hi as i128
                + d as i128
                + (d as i128 - 1).max(0) * p.interior as i128;
            usize::try_from(n.max(0)).unwrap_or(usize::MAX)
        })
        .collect();
    ensure_dims(&out_dims, declared, "the padding configuration")?;
    ensure(config.iter().all(|p| p.interior >= 0), || "negative interior padding".into())?;
    let n = out_dims.iter().product();
    let mut data = value.data.splat(0, n);
    let ost = strides(&out_dims);
    let mut pairs = Vec::with_capacity(a.len());
    for_each_index(&a.dims, |idx, lin| {
        let mut dst = 0usize;
        for (d, &i) in idx.iter().enumerate() {
            let p = config[d].lo as i128 + i as i128 * (config[d].interior as i128 + 1);
            if p < 0 || p >= out_dims[d] as i128 {
                return;
            }
            dst += p as usize * ost[d];
        }
        pairs.push((dst, lin));
    });
    data.scatter_from(&a.data, pairs.into_iter())?;
    Ok(Array::new(a.elem, out_dims, data))
}

/// `iota` along `dim` converted to `elem`.
pub fn iota(elem: ElemType, dims: Vec<usize>, dim: usize) -> R<Array> {
    ensure(dim < dims.len(), || {
        format!("iota dimension {dim} for a result of rank {}", dims.len())
    })?;
    let st = strides(&dims);
    let n: usize = dims.iter().product();
    let v: Vec<i64> = (0..n).map(|lin| ((lin / st[dim]) % dims[dim]) as i64).collect();
    convert(&Array::new(ElemType::S64, dims, Data::Int(v)), elem)
}

/// Start indices clamped so that a window of `sizes` fits in `dims`.
pub fn clamp_starts(starts: &[i64], dims: &[usize], sizes: &[usize]) -> Vec<usize> {
    starts
        .iter()
        .zip(dims)
        .zip(sizes)
        .map(|((&s, &d), &z)| s.clamp(0, (d - z.min(d)) as i64) as usize)
        .collect()
}

/// A window of `sizes` at `starts` fits an operand of `dims` (one start per dimension).
fn ensure_window(dims: &[usize], starts: &[i64], sizes: &[usize]) -> R<()> {
    ensure(starts.len() == dims.len() && sizes.len() == dims.len(), || {
        format!(
            "{} start indices and {} sizes for an operand of rank {}",
            starts.len(),
            sizes.len(),
            dims.len()
        )
    })?;
    ensure(sizes.iter().zip(dims).all(|(z, d)| z <= d), || {
        format!("a window of {} does not fit in dims {}", dims_text(sizes), dims_text(dims))
    })
}

pub fn dynamic_slice(a: &Array, starts: &[i64], sizes: &[usize]) -> R<Array> {
    ensure_window(&a.dims, starts, sizes)?;
    let ist = istrides(&a.dims);
    let starts = clamp_starts(starts, &a.dims, sizes);
    let base = starts.iter().zip(&ist).map(|(&s, &m)| s as isize * m).sum();
    Ok(affine(a, sizes.to_vec(), base, &ist))
}

pub fn dynamic_update_slice(a: &Array, update: &Array, starts: &[i64]) -> R<Array> {
    ensure_window(&a.dims, starts, &update.dims)?;
    let st = strides(&a.dims);
    let starts = clamp_starts(starts, &a.dims, &update.dims);
    let mut out = a.clone();
    let mut pairs = Vec::with_capacity(update.len());
    for_each_index(&update.dims, |idx, lin| {
        pairs.push((idx.iter().zip(&starts).zip(&st).map(|((&i, &s), &m)| (i + s) * m).sum(), lin));
    });
    out.data.scatter_from(&update.data, pairs.into_iter())?;
    Ok(out)
}

/// Operand dimensions that are windowed (not collapsed/inserted, not batching), ascending.
pub fn window_operand_dims(rank: usize, collapsed: &[i64], batching: &[i64]) -> Vec<usize> {
    (0..rank)
        .filter(|d| !collapsed.contains(&(*d as i64)) && !batching.contains(&(*d as i64)))
        .collect()
}

/// The scatter/gather index vector for batch position `batch` (coordinates of the indices
/// array without `index_vector_dim`): `count` integers.
pub fn index_vector(
    indices: &Array,
    index_vector_dim: usize,
    batch: &[usize],
    count: usize,
) -> Vec<i64> {
    let st = strides(&indices.dims);
    let implicit = index_vector_dim == indices.dims.len();
    (0..count)
        .map(|k| {
            let mut lin = 0;
            let mut b = batch.iter();
            for (d, &s) in st.iter().enumerate() {
                let coord =
                    if !implicit && d == index_vector_dim { k } else { *b.next().unwrap_or(&0) };
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
    let window =
        window_operand_dims(a.dims.len(), &g.collapsed_slice_dims, &g.operand_batching_dims);
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
