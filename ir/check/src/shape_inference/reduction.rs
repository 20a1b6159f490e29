//! Reductions and windows (XLA's `InferReduceShape`, `InferReduceWindowShape`,
//! `InferSelectAndScatterShape`, `VerifyReducerShape`, and MHLO's `ScanOp` verifier):
//! `reduce`, `reduce-window`, `select-and-scatter` and `scan`, and the reducer check that
//! `scatter` and the reducing collectives share ([`check_reducer`]).

use hlo_ir::op::Window;
use hlo_ir::{ElemType, Shape};

use super::context::{Cx, R, check_unique_in_range, mk, scalar, tuple_if_many, window_dim};
use super::show;

fn ignoring_fp(a: ElemType, b: ElemType) -> bool {
    a == b || (a.is_float() && b.is_float())
}

/// Checks a reducer over `inits.len()` values: `2N` scalar parameters (accumulators typed
/// like the inits, then values typed like the inputs) and `N` scalar results, result `k`
/// of exactly the type of accumulator parameter `k` (XLA's `VerifyReducerShape`). With
/// `exact`, parameter types must equal the operand types (XLA's verifier for `reduce`,
/// where mixed floating-point precision is not allowed); otherwise they may differ in
/// floating-point precision.
pub(super) fn check_reducer(
    cx: &Cx,
    id: hlo_ir::CompId,
    inits: &[ElemType],
    inputs: &[ElemType],
    exact: bool,
) -> R<()> {
    let c = cx.callee(id)?;
    let n = inits.len();
    let ps = &c.params;
    if ps.len() != 2 * n {
        return Err(cx.err(format!(
            "reducer `{}` must take {} scalar parameters, takes {}",
            c.name,
            2 * n,
            ps.len()
        )));
    }
    for (k, p) in ps.iter().enumerate() {
        let want = if k < n { inits[k] } else { inputs[k - n] };
        match scalar(p) {
            Some(e) if e == want || (!exact && ignoring_fp(e, want)) => {}
            _ => {
                return Err(cx.err(format!(
                    "reducer `{}` parameter {k} is {}, expected {want}[]",
                    c.name,
                    show(p)
                )));
            }
        }
    }
    let root = cx.callee_root(&c)?;
    let outs: Vec<&Shape> = match root {
        Shape::Tuple(t) if n > 1 || t.len() == 1 => t.iter().collect(),
        s => vec![s],
    };
    if outs.len() != n {
        return Err(cx.err(format!(
            "reducer `{}` returns {}, expected {n} scalar(s)",
            c.name,
            show(root)
        )));
    }
    for (k, o) in outs.iter().enumerate() {
        match scalar(o) {
            Some(e) if scalar(ps[k]) == Some(e) => {}
            _ => {
                return Err(cx.err(format!(
                    "reducer `{}` result {k} is {}, but its accumulator parameter {k} is {}",
                    c.name,
                    show(o),
                    show(ps[k])
                )));
            }
        }
    }
    Ok(())
}

/// Splits the operands of reduce/reduce-window into inputs (same dims) and scalar inits.
fn inputs_and_inits(cx: &Cx) -> R<(Vec<ElemType>, Vec<i64>, Vec<ElemType>)> {
    let n = cx.ops.len() / 2;
    if n == 0 || !cx.ops.len().is_multiple_of(2) {
        return Err(cx.err(format!(
            "{} needs an even number (>= 2) of operands, got {}",
            cx.name(),
            cx.ops.len()
        )));
    }
    let (_, d) = cx.arr(0)?;
    let mut ins = Vec::new();
    let mut inits = Vec::new();
    for k in 0..n {
        let (e, dk) = cx.arr(k)?;
        if dk != d {
            return Err(cx.err(format!(
                "{} inputs must have the same dimensions: {} and {}",
                cx.name(),
                show(cx.shape(0)?),
                show(cx.shape(k)?)
            )));
        }
        ins.push(e);
        let s = cx.shape(n + k)?;
        match scalar(s) {
            Some(ie) if ignoring_fp(ie, e) => inits.push(ie),
            _ => {
                return Err(cx.err(format!(
                    "{} init value {k} must be a {e}[] scalar, got {}",
                    cx.name(),
                    show(s)
                )));
            }
        }
    }
    Ok((ins, d, inits))
}

pub(super) fn reduce(cx: &Cx, dims: &[i64], to_apply: hlo_ir::CompId) -> R<Shape> {
    let (ins, d, inits) = inputs_and_inits(cx)?;
    check_unique_in_range(cx, dims, d.len(), "reduce dimension", false)?;
    for (k, (&i, &x)) in inits.iter().zip(&ins).enumerate() {
        if i != x {
            return Err(cx.err(format!(
                "reduce init value {k} is {}[] but input {k} is {}: no mixed floating-point precision in reduce",
                i,
                show(cx.shape(k)?)
            )));
        }
    }
    check_reducer(cx, to_apply, &inits, &ins, true)?;
    let out: Vec<i64> =
        (0..d.len() as i64).filter(|i| !dims.contains(i)).map(|i| d[i as usize]).collect();
    Ok(tuple_if_many(inits.iter().map(|&e| mk(e, &out)).collect()))
}

fn window_out(cx: &Cx, window: &Window, d: &[i64], what: &str) -> R<Vec<i64>> {
    if window.dims.len() != d.len() {
        return Err(cx.err(format!(
            "{what} window has {} dimensions, operand has rank {}",
            window.dims.len(),
            d.len()
        )));
    }
    let mut out = Vec::new();
    for (i, (w, &n)) in window.dims.iter().zip(d).enumerate() {
        if w.size < 1 || w.stride < 1 || w.lhs_dilate < 1 || w.rhs_dilate < 1 {
            return Err(cx.err(format!(
                "window dimension {i} needs size, stride and dilations >= 1 (size={} stride={} lhs_dilate={} rhs_dilate={})",
                w.size, w.stride, w.lhs_dilate, w.rhs_dilate
            )));
        }
        out.push(window_dim(n, w));
    }
    Ok(out)
}

pub(super) fn reduce_window(cx: &Cx, window: &Window, to_apply: hlo_ir::CompId) -> R<Shape> {
    let (ins, d, inits) = inputs_and_inits(cx)?;
    check_reducer(cx, to_apply, &inits, &ins, false)?;
    let out = window_out(cx, window, &d, "reduce-window")?;
    Ok(tuple_if_many(inits.iter().map(|&e| mk(e, &out)).collect()))
}

pub(super) fn select_and_scatter(
    cx: &Cx,
    window: &Window,
    select: hlo_ir::CompId,
    scatter: hlo_ir::CompId,
) -> R<Shape> {
    let (e, d) = cx.arr(0)?;
    let (se, sd) = cx.arr(1)?;
    let init = cx.shape(2)?;
    if se != e {
        return Err(cx.err(format!(
            "select-and-scatter source {} must have the element type of the operand {}",
            show(cx.shape(1)?),
            show(cx.shape(0)?)
        )));
    }
    if scalar(init) != Some(se) {
        return Err(
            cx.err(format!("select-and-scatter init must be a {se}[] scalar, got {}", show(init)))
        );
    }
    let c = cx.callee(select)?;
    let ps = &c.params;
    if ps.len() != 2 || ps.iter().any(|p| scalar(p).is_none_or(|pe| !ignoring_fp(pe, e))) {
        return Err(cx.err(format!("select computation `{}` must take two {e}[] scalars", c.name)));
    }
    if scalar(cx.callee_root(&c)?) != Some(ElemType::Pred) {
        return Err(cx.err(format!("select computation `{}` must return pred[]", c.name)));
    }
    check_reducer(cx, scatter, &[se], &[se], false)?;
    let w = window_out(cx, window, &d, "select-and-scatter")?;
    if w != sd {
        return Err(cx.err(format!(
            "select-and-scatter source is {} but the window over the operand gives dimensions {w:?}",
            show(cx.shape(1)?)
        )));
    }
    Ok(mk(e, &d))
}

/// `scan` (XLA's HLO parser and verifier, and MHLO's `ScanOp` verifier that XLA runs
/// when it compiles): operands are `inputs ++ inits` (the last `num_carries` are the
/// inits); `to_apply` takes one slice of each input (the scan dimension removed) then
/// the carries, and returns `outputs ++ new carries` (a tuple, or one array when it
/// returns one value); each output is the per-step result stacked along the scan
/// dimension, the result `outputs ++ final carries` (one array when that is one value).
/// With no inputs the scan length is the declared first output's.
pub(super) fn scan(cx: &Cx, dim: i64, carries: i64, to_apply: hlo_ir::CompId) -> R<Shape> {
    let n = cx.ops.len();
    if carries < 0 || carries as usize > n {
        return Err(cx.err(format!(
            "scan num_carries={carries} must be within 0..={n} (the number of operands)"
        )));
    }
    let carries = carries as usize;
    let inputs = n - carries;
    if dim < 0 {
        return Err(cx.err(format!("scan dimension {dim} is negative")));
    }
    let d = dim as usize;
    // Inputs: arrays of rank > dim, one length along dim.
    let mut len: Option<i64> = None;
    let mut slices = Vec::with_capacity(inputs);
    for k in 0..inputs {
        let (e, mut dk) = cx.arr(k)?;
        if d >= dk.len() {
            return Err(cx.err(format!(
                "scan dimension {dim} is out of bounds for input {k} of rank {}",
                dk.len()
            )));
        }
        let l = dk.remove(d);
        match len {
            Some(l0) if l0 != l => {
                return Err(cx.err(format!(
                    "scan inputs must have one length along dimension {dim}: input 0 has {l0}, input {k} has {l}"
                )))
            }
            _ => len = Some(l),
        }
        slices.push(mk(e, &dk));
    }
    let c = cx.callee(to_apply)?;
    let ps = &c.params;
    if ps.len() != n {
        return Err(cx.err(format!("scan passes {n} arguments to `{}` ({inputs} input slices, {carries} carries), which takes {}", c.name, ps.len())));
    }
    for (k, p) in ps.iter().enumerate() {
        let (want, what) = if k < inputs {
            (&slices[k], format!("a slice of input {k}"))
        } else {
            (cx.shape(k)?, format!("init {}", k - inputs))
        };
        if !want.compatible(p) {
            return Err(cx.err(format!(
                "parameter {k} of `{}` is {} but scan passes it {what}, {}",
                c.name,
                show(p),
                show(want)
            )));
        }
    }
    let root = cx.callee_root(&c)?;
    let results: Vec<&Shape> = match root {
        Shape::Tuple(t) => t.iter().collect(),
        s => vec![s],
    };
    if results.len() < carries {
        return Err(cx.err(format!(
            "`{}` returns {} values, fewer than the {carries} carries",
            c.name,
            results.len()
        )));
    }
    let outputs = results.len() - carries;
    if inputs == 0 && outputs == 0 {
        return Err(cx.err("scan needs at least one input or one output"));
    }
    for j in 0..carries {
        let (r, init) = (results[outputs + j], cx.shape(inputs + j)?);
        if !r.compatible(init) {
            return Err(cx.err(format!(
                "`{}` result {} is {} but init {j} is {}: a carry keeps its shape",
                c.name,
                outputs + j,
                show(r),
                show(init)
            )));
        }
    }
    // With no inputs the scan length is the one the text declares for output 0.
    let len = match len {
        Some(l) => l,
        None => {
            let declared = match cx.declared()? {
                Shape::Tuple(t) => t.first(),
                s => Some(s),
            };
            match declared {
                Some(Shape::Array(a)) if d < a.dims.len() => a.dims[d].bound().unwrap_or(0) as i64,
                _ => return Err(cx.err(format!("scan with no inputs takes its length from output 0's dimension {dim}, which the declared shape lacks"))),
            }
        }
    };
    let mut out = Vec::with_capacity(results.len());
    for (i, r) in results[..outputs].iter().enumerate() {
        let Shape::Array(a) = r else {
            return Err(cx.err(format!(
                "`{}` output {i} must be an array, got {}",
                c.name,
                show(r)
            )));
        };
        cx.check_static(a)?;
        if d > a.dims.len() {
            return Err(cx.err(format!(
                "scan dimension {dim} is out of bounds for output {i} of `{}`, {} (rank {})",
                c.name,
                show(r),
                a.dims.len()
            )));
        }
        let mut dims: Vec<i64> = a.dims.iter().map(|x| x.bound().unwrap_or(0) as i64).collect();
        dims.insert(d, len);
        out.push(mk(a.elem, &dims));
    }
    out.extend(results[outputs..].iter().map(|s| (*s).clone()));
    Ok(tuple_if_many(out))
}
