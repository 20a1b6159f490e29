//! Compute kernels: dot, convolution, reduce, reduce-window, select-and-scatter, scatter,
//! sort and top-k. Reductions fold in row-major order of the reduced positions, one
//! element at a time, starting from the init value; dot and convolution accumulate in the
//! operands' compute type (f32 for f32/bf16/f16, f64, wrapping i64) and round once to the
//! result type.

use hlo_ir::op::{Convolution, DotDims, ScatterDims, Window};
use hlo_ir::{ElemType, Opcode};

use super::data_movement::{
    batch_position, dims_text, ensure, index_vector, transpose, window_operand_dims,
};
use super::elementwise::{binary, convert, nan_max, nan_min};
use super::value::{
    Array, Complex32, Complex64, Data, Failure, Store, Value, for_each_index, round_f32, store,
    strides, wrap,
};

type R<T> = Result<T, Failure>;

/// How a reducer/combiner computation is applied.
pub enum Reducer<'a> {
    /// The computation is `ROOT op(p0, p1)` on scalars: applied as a kernel.
    Binary(Opcode),
    /// Anything else: the interpreter evaluates the computation on scalar values.
    General(&'a dyn Fn(Vec<Value>) -> R<Value>),
}

/// Element `i` of `a` as a scalar value.
fn scalar(a: &Array, i: usize) -> Array {
    Array::new(a.elem, Vec::new(), a.data.scalar_at(i))
}

/// Applies a general reducer to `(accs..., xs...)` and returns the N scalar results.
fn apply(f: &dyn Fn(Vec<Value>) -> R<Value>, accs: &[Array], xs: Vec<Array>) -> R<Vec<Array>> {
    let args: Vec<Value> = accs.iter().cloned().chain(xs).map(Value::array).collect();
    let out = f(args)?;
    let leaves: Vec<Array> = out.leaves().into_iter().cloned().collect();
    if leaves.len() != accs.len() {
        return Err(format!(
            "the reducer returned {} values for {} accumulators",
            leaves.len(),
            accs.len()
        )
        .into());
    }
    Ok(leaves)
}

/// One folding step `acc[o] = f(acc[o], x[i])` for a binary kernel, per storage class.
fn fold_binary(op: Opcode, acc: &mut Array, o: usize, x: &Array, i: usize) -> R<()> {
    let a = Array::new(acc.elem, Vec::new(), acc.data.scalar_at(o));
    let b = scalar(x, i);
    let r = binary(op, &a, &b)?;
    acc.data.scatter_from(&r.data, std::iter::once((o, 0)))?;
    Ok(())
}

/// The operands of a variadic reduction: N inputs of the same dims (`dims` of them), N
/// scalar init values. Checked on checked modules by shape inference, here again so that
/// unchecked ones give an error.
fn ensure_reduction(inputs: &[&Array], inits: &[&Array]) -> R<()> {
    let first = inputs.first().ok_or("a reduction without inputs")?;
    ensure(inits.len() == inputs.len(), || {
        format!("{} inputs with {} init values", inputs.len(), inits.len())
    })?;
    for (k, x) in inputs.iter().enumerate() {
        ensure(x.dims == first.dims, || {
            format!(
                "input {k} has dims {} but input 0 has {}",
                dims_text(&x.dims),
                dims_text(&first.dims)
            )
        })?;
    }
    for (k, (i, x)) in inits.iter().zip(inputs).enumerate() {
        ensure(i.len() == 1 && i.data.store() == x.data.store(), || {
            format!(
                "init value {k} is {}{}, not a scalar of the input's type {}",
                i.elem,
                dims_text(&i.dims),
                x.elem
            )
        })?;
    }
    Ok(())
}

/// `dims` are distinct dimension numbers below `rank`.
fn ensure_dims_in(dims: &[i64], rank: usize, what: &str) -> R<()> {
    for (k, &d) in dims.iter().enumerate() {
        ensure(d >= 0 && (d as usize) < rank && !dims[..k].contains(&d), || {
            format!("{what} {d} is out of range or repeated for rank {rank}")
        })?;
    }
    Ok(())
}

/// A window has one entry per input dimension, with positive sizes, strides and dilations.
fn ensure_window(window: &Window, rank: usize) -> R<()> {
    ensure(window.dims.len() == rank, || {
        format!("a window of rank {} on an input of rank {rank}", window.dims.len())
    })?;
    ensure(
        window
            .dims
            .iter()
            .all(|w| w.size >= 0 && w.stride >= 1 && w.lhs_dilate >= 1 && w.rhs_dilate >= 1),
        || "a window with a negative size or a stride or dilation below 1".into(),
    )
}

/// Accumulators of `out_dims` holding each init value everywhere.
fn splat_inits(inits: &[&Array], out_dims: &[usize]) -> Vec<Array> {
    let n: usize = out_dims.iter().product();
    inits.iter().map(|a| Array::new(a.elem, out_dims.to_vec(), a.data.splat(0, n))).collect()
}

/// Folds the input elements `items` (pairs of accumulator index, input index, in folding
/// order) into the accumulators `accs` (one per input): `acc[o] = f(acc[o], x[i])`.
fn fold(
    inputs: &[&Array],
    mut accs: Vec<Array>,
    reducer: &Reducer,
    items: &[(usize, usize)],
) -> R<Vec<Array>> {
    match reducer {
        Reducer::Binary(op) if inputs.len() == 1 => {
            let (x, e) = (inputs[0], inputs[0].elem);
            let acc = &mut accs[0];
            // Hot loops per storage class; the generic step is the fallback.
            macro_rules! hot {
                ($acc:expr, $x:expr, $f:expr) => {{
                    let f = $f;
                    for &(o, i) in items {
                        $acc[o] = f($acc[o], $x[i]);
                    }
                }};
            }
            match (&mut acc.data, &x.data, op) {
                (Data::F32(a), Data::F32(v), Opcode::Add) => {
                    hot!(a, v, |p: f32, q: f32| round_f32(e, p + q))
                }
                (Data::F32(a), Data::F32(v), Opcode::Maximum) => {
                    hot!(a, v, |p: f32, q: f32| nan_max!(p, q, f32))
                }
                (Data::F32(a), Data::F32(v), Opcode::Minimum) => {
                    hot!(a, v, |p: f32, q: f32| nan_min!(p, q, f32))
                }
                (Data::F64(a), Data::F64(v), Opcode::Add) => hot!(a, v, |p: f64, q: f64| p + q),
                (Data::C64(a), Data::C64(v), Opcode::Add) => {
                    hot!(a, v, |p: Complex32, q: Complex32| p + q)
                }
                (Data::C128(a), Data::C128(v), Opcode::Add) => {
                    hot!(a, v, |p: Complex64, q: Complex64| p + q)
                }
                (Data::Int(a), Data::Int(v), Opcode::Add) => {
                    hot!(a, v, |p: i64, q: i64| wrap(e, p.wrapping_add(q)))
                }
                _ => {
                    for &(o, i) in items {
                        fold_binary(*op, acc, o, x, i)?;
                    }
                }
            }
            Ok(accs)
        }
        Reducer::Binary(_) => Err("a binary reducer over several inputs".into()),
        Reducer::General(f) => {
            for &(o, i) in items {
                let current: Vec<Array> = accs.iter().map(|a| scalar(a, o)).collect();
                let xs = inputs.iter().map(|x| scalar(x, i)).collect();
                for (acc, v) in accs.iter_mut().zip(apply(*f, &current, xs)?) {
                    acc.data.scatter_from(&v.data, std::iter::once((o, 0)))?;
                }
            }
            Ok(accs)
        }
    }
}

/// `reduce` over `dims` of N inputs with N init values.
pub fn reduce(
    inputs: &[&Array],
    inits: &[&Array],
    dims: &[i64],
    reducer: &Reducer,
) -> R<Vec<Array>> {
    ensure_reduction(inputs, inits)?;
    ensure_dims_in(dims, inputs[0].dims.len(), "reduced dimension")?;
    let in_dims = &inputs[0].dims;
    let kept: Vec<usize> = (0..in_dims.len()).filter(|d| !dims.contains(&(*d as i64))).collect();
    let out_dims: Vec<usize> = kept.iter().map(|&d| in_dims[d]).collect();
    let ost = strides(&out_dims);
    let mut items = Vec::with_capacity(inputs[0].len());
    for_each_index(in_dims, |idx, lin| {
        let o: usize = kept.iter().zip(&ost).map(|(&d, &s)| idx[d] * s).sum();
        items.push((o, lin));
    });
    fold(inputs, splat_inits(inits, &out_dims), reducer, &items)
}

/// Input position of output coordinate `o`, window offset `w` in one window dimension:
/// `None` for padding and base-dilation holes.
fn window_source(o: usize, w: usize, wd: &hlo_ir::op::WindowDim, in_dim: usize) -> Option<usize> {
    let w = if wd.reversal { wd.size as usize - 1 - w } else { w };
    let p = (o as i64) * wd.stride + (w as i64) * wd.rhs_dilate - wd.pad_lo;
    if p < 0 || p % wd.lhs_dilate != 0 {
        return None;
    }
    let i = (p / wd.lhs_dilate) as usize;
    (i < in_dim).then_some(i)
}

/// Visits every (window offset, input linear index) of output position `idx`.
fn for_each_window_source(
    window: &Window,
    in_dims: &[usize],
    idx: &[usize],
    mut f: impl FnMut(usize),
) {
    let st = strides(in_dims);
    let sizes: Vec<usize> = window.dims.iter().map(|w| w.size as usize).collect();
    for_each_index(&sizes, |w, _| {
        let mut lin = 0;
        for d in 0..in_dims.len() {
            match window_source(idx[d], w[d], &window.dims[d], in_dims[d]) {
                Some(i) => lin += i * st[d],
                None => return,
            }
        }
        f(lin);
    });
}

/// `reduce-window`: each output folds the valid (non-padding) elements of its window.
pub fn reduce_window(
    inputs: &[&Array],
    inits: &[&Array],
    window: &Window,
    out_dims: &[usize],
    reducer: &Reducer,
) -> R<Vec<Array>> {
    ensure_reduction(inputs, inits)?;
    ensure_window(window, inputs[0].dims.len())?;
    ensure(out_dims.len() == inputs[0].dims.len(), || {
        format!("a result of rank {} for inputs of rank {}", out_dims.len(), inputs[0].dims.len())
    })?;
    let mut items = Vec::new();
    for_each_index(out_dims, |idx, o| {
        for_each_window_source(window, &inputs[0].dims, idx, |i| items.push((o, i)));
    });
    fold(inputs, splat_inits(inits, out_dims), reducer, &items)
}

/// `select-and-scatter`: per window, the element `select` keeps (the first valid one unless
/// `select(current, candidate)` is false) receives the source value via `scatter`.
pub fn select_and_scatter(
    operand: &Array,
    source: &Array,
    init: &Array,
    window: &Window,
    select: &dyn Fn(&Array, &Array) -> R<bool>,
    scatter: &Reducer,
) -> R<Array> {
    ensure_reduction(&[source], &[init])?;
    ensure_window(window, operand.dims.len())?;
    ensure(source.dims.len() == operand.dims.len(), || {
        format!(
            "a source of rank {} for an operand of rank {}",
            source.dims.len(),
            operand.dims.len()
        )
    })?;
    let mut items = Vec::with_capacity(source.len());
    let mut err = None;
    for_each_index(&source.dims, |idx, s| {
        let mut chosen: Option<usize> = None;
        for_each_window_source(window, &operand.dims, idx, |i| {
            if err.is_some() {
                return;
            }
            chosen = match chosen {
                None => Some(i),
                Some(c) => match select(&scalar(operand, c), &scalar(operand, i)) {
                    Ok(true) => Some(c),
                    Ok(false) => Some(i),
                    Err(e) => {
                        err = Some(e);
                        Some(c)
                    }
                },
            };
        });
        if let Some(c) = chosen {
            items.push((c, s));
        }
    });
    if let Some(e) = err {
        return Err(e);
    }
    Ok(fold(&[source], splat_inits(&[init], &operand.dims), scatter, &items)?.remove(0))
}

/// `scatter` (hlo-ops.md §4.2): update windows that do not fit entirely are skipped;
/// updates are combined in row-major order of the updates.
pub fn scatter(
    operands: &[&Array],
    indices: &Array,
    updates: &[&Array],
    s: &ScatterDims,
    combiner: &Reducer,
) -> R<Vec<Array>> {
    let op_dims = &operands[0].dims;
    let ost = strides(op_dims);
    let ivd = s.index_vector_dim as usize;
    let upd_dims = &updates[0].dims;
    let window_dims: Vec<usize> = s.update_window_dims.iter().map(|&d| d as usize).collect();
    let scatter_dims: Vec<usize> =
        (0..upd_dims.len()).filter(|d| !window_dims.contains(d)).collect();
    let window =
        window_operand_dims(op_dims.len(), &s.inserted_window_dims, &s.input_batching_dims);
    // Window extent per operand dim (1 for inserted and batching dims).
    let mut extent = vec![1usize; op_dims.len()];
    for (k, &od) in window.iter().enumerate() {
        extent[od] = upd_dims[window_dims[k]];
    }
    let mut items = Vec::with_capacity(updates[0].len());
    let mut batch = vec![0usize; scatter_dims.len()];
    for_each_index(upd_dims, |idx, u| {
        for (b, &d) in batch.iter_mut().zip(&scatter_dims) {
            *b = idx[d];
        }
        let iv = index_vector(indices, ivd, &batch, s.scatter_dims_to_operand_dims.len());
        let mut start = vec![0i64; op_dims.len()];
        for (k, &d) in s.scatter_dims_to_operand_dims.iter().enumerate() {
            start[d as usize] = iv[k];
        }
        for (&od, &id) in s.input_batching_dims.iter().zip(&s.scatter_indices_batching_dims) {
            start[od as usize] = batch[batch_position(id as usize, ivd)] as i64;
        }
        if start
            .iter()
            .zip(&extent)
            .zip(op_dims)
            .any(|((&st, &ex), &d)| st < 0 || st as usize + ex > d)
        {
            return;
        }
        let mut lin: usize = start.iter().zip(&ost).map(|(&st, &m)| st as usize * m).sum();
        for (k, &od) in window.iter().enumerate() {
            lin += idx[window_dims[k]] * ost[od];
        }
        items.push((lin, u));
    });
    // Fold with the operands as the initial accumulators.
    fold(updates, operands.iter().map(|a| (*a).clone()).collect(), combiner, &items)
}

/// Stable merge sort of `v` by a fallible strict "less than".
fn merge_sort(v: &mut Vec<usize>, less: &mut dyn FnMut(usize, usize) -> R<bool>) -> R<()> {
    if v.len() <= 1 {
        return Ok(());
    }
    let mut right = v.split_off(v.len() / 2);
    merge_sort(v, less)?;
    merge_sort(&mut right, less)?;
    let left = std::mem::take(v);
    let (mut i, mut j) = (0, 0);
    v.reserve(left.len() + right.len());
    while i < left.len() && j < right.len() {
        // Take from the right only when strictly less: equal keys keep their order.
        if less(right[j], left[i])? {
            v.push(right[j]);
            j += 1;
        } else {
            v.push(left[i]);
            i += 1;
        }
    }
    v.extend_from_slice(&left[i..]);
    v.extend_from_slice(&right[j..]);
    Ok(())
}

/// `sort` of N operands along `dim` with a comparator over `(a0, b0, a1, b1, ...)`.
/// Always stable (which satisfies `is_stable=false` too).
pub fn sort(
    operands: &[&Array],
    dim: usize,
    less: &dyn Fn(Vec<Value>) -> R<bool>,
) -> R<Vec<Array>> {
    let dims = &operands.first().ok_or("sort without operands")?.dims;
    ensure(dim < dims.len(), || {
        format!("sort dimension {dim} for operands of rank {}", dims.len())
    })?;
    for (k, x) in operands.iter().enumerate() {
        ensure(&x.dims == dims, || {
            format!(
                "operand {k} has dims {} but operand 0 has {}",
                dims_text(&x.dims),
                dims_text(dims)
            )
        })?;
    }
    let st = strides(dims);
    let len = dims[dim];
    let mut outer = dims.clone();
    outer[dim] = 1;
    let mut perm = vec![0usize; operands[0].len()];
    let mut result = Ok(());
    for_each_index(&outer, |idx, _| {
        if result.is_err() {
            return;
        }
        let base: usize = idx.iter().zip(&st).map(|(&i, &s)| i * s).sum();
        let mut order: Vec<usize> = (0..len).collect();
        let mut cmp = |a: usize, b: usize| -> R<bool> {
            let (ia, ib) = (base + a * st[dim], base + b * st[dim]);
            let args = operands
                .iter()
                .flat_map(|x| [Value::array(scalar(x, ia)), Value::array(scalar(x, ib))])
                .collect();
            less(args)
        };
        result = merge_sort(&mut order, &mut cmp);
        for (k, &o) in order.iter().enumerate() {
            perm[base + k * st[dim]] = base + o * st[dim];
        }
    });
    result?;
    Ok(operands.iter().map(|x| Array::new(x.elem, x.dims.clone(), x.data.pick(&perm))).collect())
}

/// `topk`: the k largest (or smallest) along the last dimension, ties to the lower index,
/// NaN ordered as by TOTALORDER; values and `s32` indices.
pub fn topk(a: &Array, k: usize, largest: bool) -> R<(Array, Array)> {
    let last = *a.dims.last().ok_or("topk of a scalar")?;
    let rows = a.len() / last.max(1);
    let k = k.min(last);
    let key = |i: usize| -> f64 {
        match &a.data {
            Data::F32(v) => v[i] as f64,
            Data::F64(v) => v[i],
            // Not defined on complex values (shape inference refuses them).
            Data::C64(_) | Data::C128(_) => f64::NAN,
            Data::Int(v) => v[i] as f64,
            Data::Pred(v) => v[i] as u8 as f64,
        }
    };
    let mut src = Vec::with_capacity(rows * k);
    let mut idx = Vec::with_capacity(rows * k);
    for r in 0..rows {
        let mut order: Vec<usize> = (0..last).collect();
        order.sort_by(|&x, &y| {
            let o = key(r * last + x).total_cmp(&key(r * last + y));
            (if largest { o.reverse() } else { o }).then(x.cmp(&y))
        });
        for &o in &order[..k.min(last)] {
            src.push(r * last + o);
            idx.push(o as i64);
        }
    }
    let mut dims = a.dims.clone();
    *dims.last_mut().expect("rank >= 1") = k.min(last);
    Ok((
        Array::new(a.elem, dims.clone(), a.data.pick(&src)),
        Array::new(ElemType::S32, dims, Data::Int(idx)),
    ))
}

/// Converts to the compute storage of a dot/convolution producing `out`.
fn compute_operand(a: &Array, out: ElemType) -> R<Array> {
    match (store(a.elem)?, store(out)?) {
        (Store::F32, Store::F32) => Ok(a.clone()),
        _ if a.elem == out => Ok(a.clone()),
        _ => convert(a, if store(out)? == Store::F32 { ElemType::F32 } else { out }),
    }
}

/// Multiply-accumulate loops shared by dot and convolution, per storage class.
trait Mac: Copy + Default {
    fn mac(self, a: Self, b: Self) -> Self;
}
impl Mac for f32 {
    #[inline]
    fn mac(self, a: f32, b: f32) -> f32 {
        self + a * b
    }
}
impl Mac for f64 {
    #[inline]
    fn mac(self, a: f64, b: f64) -> f64 {
        self + a * b
    }
}
impl Mac for Complex32 {
    #[inline]
    fn mac(self, a: Complex32, b: Complex32) -> Complex32 {
        Complex32::new(self.re + (a.re * b.re - a.im * b.im), self.im + (a.re * b.im + a.im * b.re))
    }
}
impl Mac for Complex64 {
    #[inline]
    fn mac(self, a: Complex64, b: Complex64) -> Complex64 {
        Complex64::new(self.re + (a.re * b.re - a.im * b.im), self.im + (a.re * b.im + a.im * b.re))
    }
}
impl Mac for i64 {
    #[inline]
    fn mac(self, a: i64, b: i64) -> i64 {
        self.wrapping_add(a.wrapping_mul(b))
    }
}

/// `out[b, m, n] = Σ_k l[b, m, k] · r[b, k, n]` (row-major), accumulating along k.
fn batched_matmul<T: Mac>(l: &[T], r: &[T], batch: usize, m: usize, k: usize, n: usize) -> Vec<T> {
    let mut out = vec![T::default(); batch * m * n];
    for b in 0..batch {
        for i in 0..m {
            let row = &mut out[(b * m + i) * n..(b * m + i + 1) * n];
            for p in 0..k {
                let a = l[(b * m + i) * k + p];
                let rr = &r[(b * k + p) * n..(b * k + p + 1) * n];
                for (o, &x) in row.iter_mut().zip(rr) {
                    *o = o.mac(a, x);
                }
            }
        }
    }
    out
}

/// Rounds/wraps accumulated data to the result type.
fn finish(out: ElemType, dims: Vec<usize>, data: Data) -> R<Array> {
    let data = match data {
        Data::F32(v) => Data::F32(v.into_iter().map(|x| round_f32(out, x)).collect()),
        Data::Int(v) => Data::Int(v.into_iter().map(|x| wrap(out, x)).collect()),
        d => d,
    };
    let a = Array::new(if store(out)? == Store::Pred { ElemType::S64 } else { out }, dims, data);
    if a.elem != out { convert(&a, out) } else { Ok(a) }
}

/// `dot` (general dimension numbers): result dims are batch ++ lhs free ++ rhs free.
pub fn dot(lhs: &Array, rhs: &Array, d: &DotDims, out: ElemType, declared: &[usize]) -> R<Array> {
    // The dimension numbers: batch and contracting dims distinct and in range, paired
    // dims of equal size; the result dims are the declared ones (before allocating).
    let both = |a: &[i64], b: &[i64]| -> Vec<i64> { a.iter().chain(b).copied().collect() };
    ensure_dims_in(
        &both(&d.lhs_batch, &d.lhs_contracting),
        lhs.dims.len(),
        "lhs batch/contracting dimension",
    )?;
    ensure_dims_in(
        &both(&d.rhs_batch, &d.rhs_contracting),
        rhs.dims.len(),
        "rhs batch/contracting dimension",
    )?;
    let pairs_ok = |a: &[i64], b: &[i64]| {
        a.len() == b.len()
            && a.iter().zip(b).all(|(&x, &y)| lhs.dims[x as usize] == rhs.dims[y as usize])
    };
    ensure(
        pairs_ok(&d.lhs_batch, &d.rhs_batch) && pairs_ok(&d.lhs_contracting, &d.rhs_contracting),
        || {
            format!(
                "the batch or contracting dimensions of {}{} and {}{} do not pair up",
                lhs.elem,
                dims_text(&lhs.dims),
                rhs.elem,
                dims_text(&rhs.dims)
            )
        },
    )?;
    let compute = if store(out)? == Store::Pred { ElemType::S64 } else { out };
    let (l, r) = (compute_operand(lhs, compute)?, compute_operand(rhs, compute)?);
    let free = |rank: usize, batch: &[i64], contract: &[i64]| -> Vec<i64> {
        (0..rank as i64).filter(|x| !batch.contains(x) && !contract.contains(x)).collect()
    };
    let lf = free(l.dims.len(), &d.lhs_batch, &d.lhs_contracting);
    let rf = free(r.dims.len(), &d.rhs_batch, &d.rhs_contracting);
    let lp: Vec<i64> = d.lhs_batch.iter().chain(&lf).chain(&d.lhs_contracting).copied().collect();
    let rp: Vec<i64> = d.rhs_batch.iter().chain(&d.rhs_contracting).chain(&rf).copied().collect();
    let (lt, rt) = (transpose(&l, &lp)?, transpose(&r, &rp)?);
    let size =
        |a: &Array, ds: &[i64]| -> usize { ds.iter().map(|&x| a.dims[x as usize]).product() };
    let (b, m, k, n) =
        (size(&l, &d.lhs_batch), size(&l, &lf), size(&l, &d.lhs_contracting), size(&r, &rf));
    let mut dims: Vec<usize> = d.lhs_batch.iter().map(|&x| l.dims[x as usize]).collect();
    dims.extend(lf.iter().map(|&x| l.dims[x as usize]));
    dims.extend(rf.iter().map(|&x| r.dims[x as usize]));
    ensure(dims == declared, || {
        format!(
            "the dot gives dims {} but the result is declared with dims {}",
            dims_text(&dims),
            dims_text(declared)
        )
    })?;
    let data = match (&lt.data, &rt.data) {
        (Data::F32(x), Data::F32(y)) => Data::F32(batched_matmul(x, y, b, m, k, n)),
        (Data::F64(x), Data::F64(y)) => Data::F64(batched_matmul(x, y, b, m, k, n)),
        (Data::C64(x), Data::C64(y)) => Data::C64(batched_matmul(x, y, b, m, k, n)),
        (Data::C128(x), Data::C128(y)) => Data::C128(batched_matmul(x, y, b, m, k, n)),
        (Data::Int(x), Data::Int(y)) => Data::Int(batched_matmul(x, y, b, m, k, n)),
        _ => {
            return Err(format!(
                "dot of {} and {} into {out} is not supported",
                lhs.elem, rhs.elem
            )
            .into());
        }
    };
    finish(out, dims, data)
}

/// `convolution` with window, dimension labels, feature and batch groups (a
/// cross-correlation; `rev` window dims flip the kernel).
pub fn convolution(
    lhs: &Array,
    rhs: &Array,
    c: &Convolution,
    out_dims: Vec<usize>,
    out: ElemType,
) -> R<Array> {
    let compute = if store(out)? == Store::Pred { ElemType::S64 } else { out };
    let (l, r) = (compute_operand(lhs, compute)?, compute_operand(rhs, compute)?);
    let dn = &c.dims;
    let (ls, rs) = (strides(&l.dims), strides(&r.dims));
    let g = c.feature_group_count.max(1) as usize;
    let bg = c.batch_group_count.max(1) as usize;
    let in_features = l.dims[dn.input_feature as usize];
    let in_per_group = in_features / g;
    let out_features = r.dims[dn.kernel_output_feature as usize];
    let out_per_fgroup = (out_features / g).max(1);
    let out_per_bgroup = (out_features / bg).max(1);
    let out_batch = out_dims[dn.output_batch as usize];
    let nsp = dn.input_spatial.len();
    let ksizes: Vec<usize> = dn.kernel_spatial.iter().map(|&d| r.dims[d as usize]).collect();
    let total: usize = out_dims.iter().product();
    // Each output element sums over kernel taps (row-major) and the group's input features.
    macro_rules! run {
        ($x:expr, $y:expr, $zero:expr) => {{
            let (x, y) = ($x, $y);
            let mut res = vec![$zero; total];
            for_each_index(&out_dims, |o, lin| {
                let ob = o[dn.output_batch as usize];
                let of = o[dn.output_feature as usize];
                let fg = of / out_per_fgroup;
                let bgi = of / out_per_bgroup;
                let lb = bgi * out_batch + ob;
                let mut acc = $zero;
                for_each_index(&ksizes, |kpos, _| {
                    let mut loff = lb * ls[dn.input_batch as usize];
                    let mut roff = of * rs[dn.kernel_output_feature as usize];
                    for s in 0..nsp {
                        let wd = &c.window.dims[s];
                        let in_dim = l.dims[dn.input_spatial[s] as usize];
                        // The kernel tap is kpos[s]; with reversal the flipped tap is read.
                        let Some(i) = window_source(
                            o[dn.output_spatial[s] as usize],
                            kpos[s],
                            &hlo_ir::op::WindowDim { reversal: false, ..*wd },
                            in_dim,
                        ) else {
                            return;
                        };
                        let tap = if wd.reversal { ksizes[s] - 1 - kpos[s] } else { kpos[s] };
                        loff += i * ls[dn.input_spatial[s] as usize];
                        roff += tap * rs[dn.kernel_spatial[s] as usize];
                    }
                    for ci in 0..in_per_group {
                        let lf = fg * in_per_group + ci;
                        acc = acc.mac(
                            x[loff + lf * ls[dn.input_feature as usize]],
                            y[roff + ci * rs[dn.kernel_input_feature as usize]],
                        );
                    }
                });
                res[lin] = acc;
            });
            res
        }};
    }
    let data = match (&l.data, &r.data) {
        (Data::F32(x), Data::F32(y)) => Data::F32(run!(x, y, 0f32)),
        (Data::F64(x), Data::F64(y)) => Data::F64(run!(x, y, 0f64)),
        (Data::C64(x), Data::C64(y)) => Data::C64(run!(x, y, Complex32::default())),
        (Data::C128(x), Data::C128(y)) => Data::C128(run!(x, y, Complex64::default())),
        (Data::Int(x), Data::Int(y)) => Data::Int(run!(x, y, 0i64)),
        _ => {
            return Err(format!(
                "convolution of {} and {} into {out} is not supported",
                lhs.elem, rhs.elem
            )
            .into());
        }
    };
    finish(out, out_dims, data)
}
