//! Moving the bytes of host tensors: slices of the row-major order, chunks along a
//! dimension, concatenation.

use std::ops::Range;

use hlo_ir::{ElemType, Tensor};

use crate::{FabricError, malformed};

pub(crate) fn tensor(e: ElemType, dims: Vec<u64>, bytes: Vec<u8>) -> Result<Tensor, FabricError> {
    Tensor::from_bytes(e, dims, bytes).map_err(|x| malformed(x.to_string()))
}

/// Elements `r` of `t` in row-major order, as a rank-1 tensor.
pub(crate) fn flat_range(t: &Tensor, r: Range<usize>) -> Result<Tensor, FabricError> {
    let es = t.elem_size();
    let bytes = t
        .bytes()
        .get(r.start * es..r.end * es)
        .ok_or_else(|| malformed(format!("elements {r:?} of {}", t.shape())))?;
    tensor(t.elem(), vec![r.len() as u64], bytes.to_vec())
}

/// (outer, bytes of one step along `dim`) of `t`: the dims before `dim` multiplied, and
/// the bytes of everything after it.
fn split(t: &Tensor, dim: usize) -> Result<(usize, usize), FabricError> {
    if dim >= t.rank() {
        return Err(malformed(format!("dimension {dim} of {}", t.shape())));
    }
    let outer = t.dims()[..dim].iter().product::<u64>() as usize;
    let inner = t.dims()[dim + 1..].iter().product::<u64>() as usize * t.elem_size();
    Ok((outer, inner))
}

/// Chunk `i` of `g` equal chunks of `t` along `dim`.
pub(crate) fn chunk(t: &Tensor, dim: usize, g: usize, i: usize) -> Result<Tensor, FabricError> {
    let (outer, inner) = split(t, dim)?;
    let n = t.dims()[dim] as usize;
    if g == 0 || !n.is_multiple_of(g) || i >= g {
        return Err(malformed(format!("chunk {i} of {g} along dimension {dim} of {}", t.shape())));
    }
    let len = n / g;
    let mut bytes = Vec::with_capacity(outer * len * inner);
    for o in 0..outer {
        let start = (o * n + i * len) * inner;
        bytes.extend_from_slice(&t.bytes()[start..start + len * inner]);
    }
    let mut dims = t.dims().to_vec();
    dims[dim] = len as u64;
    tensor(t.elem(), dims, bytes)
}

/// `parts` (the same shape but along `dim`) concatenated along `dim`.
pub(crate) fn concatenate(parts: &[&Tensor], dim: usize) -> Result<Tensor, FabricError> {
    let first = parts.first().ok_or_else(|| malformed("a concatenation of nothing"))?;
    let (outer, inner) = split(first, dim)?;
    let mut dims = first.dims().to_vec();
    dims[dim] = 0;
    for p in parts {
        let same = p.elem() == first.elem()
            && p.rank() == first.rank()
            && (0..p.rank()).all(|k| k == dim || p.dims()[k] == first.dims()[k]);
        if !same {
            return Err(malformed(format!(
                "{} and {} do not concatenate along dimension {dim}",
                first.shape(),
                p.shape()
            )));
        }
        dims[dim] += p.dims()[dim];
    }
    let total: usize = parts.iter().map(|p| p.bytes().len()).sum();
    let mut bytes = Vec::with_capacity(total);
    for o in 0..outer {
        for p in parts {
            let step = p.dims()[dim] as usize * inner;
            bytes.extend_from_slice(&p.bytes()[o * step..(o + 1) * step]);
        }
    }
    tensor(first.elem(), dims, bytes)
}
