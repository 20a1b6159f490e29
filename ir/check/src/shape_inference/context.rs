//! The context of one inference ([`Cx`]: the operation, its operands' shapes, the
//! declared result, the callees) and what every op family's rules share: building result
//! shapes ([`mk`], [`like`], [`tuple_if_many`]), reading scalars, checking dimension
//! numbers against a rank, and XLA's window formula ([`window_dim`]).

use hlo_ir::{ArrayShape, CompId, Dim, ElemType, Op, Shape};

use super::{Callee, Callees, show};

/// Context of one inference: the operation, its operands' shapes, the declared shape (if
/// any) and the callees.
pub(super) struct Cx<'a> {
    pub(super) op: &'a Op,
    pub(super) ops: &'a [&'a Shape],
    pub(super) declared: Option<&'a Shape>,
    pub(super) callees: &'a dyn Callees,
}

pub(super) type R<T> = Result<T, String>;

pub(super) fn mk(elem: ElemType, dims: &[i64]) -> Shape {
    Shape::Array(ArrayShape {
        elem,
        dims: dims.iter().map(|&d| Dim::Static(d as u64)).collect(),
        layout: None,
    })
}

/// `a`'s dimensions (static, checked by [`Cx::array`]) with element type `elem`, no layout:
/// what [`mk`] builds from the same dimensions, without the intermediate `Vec<i64>`.
pub(super) fn like(a: &ArrayShape, elem: ElemType) -> Shape {
    Shape::Array(ArrayShape { elem, dims: a.dims.clone(), layout: None })
}

pub(super) fn complex_component(e: ElemType) -> Option<ElemType> {
    match e {
        ElemType::C64 => Some(ElemType::F32),
        ElemType::C128 => Some(ElemType::F64),
        _ => None,
    }
}

impl<'a> Cx<'a> {
    pub(super) fn err(&self, msg: impl Into<String>) -> String {
        msg.into()
    }
    pub(super) fn name(&self) -> &'static str {
        self.op.opcode().name()
    }
    /// The declared result shape; an error when the caller gave none (text-decided opcodes).
    pub(super) fn declared(&self) -> R<&'a Shape> {
        self.declared.ok_or_else(|| {
            self.err(format!(
                "the result shape of {} must be given: the text decides it",
                self.name()
            ))
        })
    }
    pub(super) fn shape(&self, k: usize) -> R<&'a Shape> {
        match self.ops.get(k) {
            Some(&s) => Ok(s),
            None => Err(self.err(format!("{} has no operand {k}", self.name()))),
        }
    }
    /// Operand `k` as a static array (no allocation).
    pub(super) fn array(&self, k: usize) -> R<&'a ArrayShape> {
        let s = self.shape(k)?;
        match s {
            Shape::Array(a) => {
                self.check_static(a)?;
                Ok(a)
            }
            _ => Err(self.err(format!(
                "{} operand {k} must be an array, got {}",
                self.name(),
                show(s)
            ))),
        }
    }
    pub(super) fn arr(&self, k: usize) -> R<(ElemType, Vec<i64>)> {
        let a = self.array(k)?;
        Ok((a.elem, a.dims.iter().map(|d| d.bound().unwrap_or(0) as i64).collect()))
    }
    pub(super) fn check_static(&self, a: &ArrayShape) -> R<()> {
        if a.is_static() {
            Ok(())
        } else {
            Err(self.err("dynamic dimensions are not inferred (static shapes only)"))
        }
    }
    /// The declared result as a static array (no allocation).
    pub(super) fn declared_array(&self) -> R<&'a ArrayShape> {
        match self.declared()? {
            Shape::Array(a) => {
                self.check_static(a)?;
                Ok(a)
            }
            s => Err(self.err(format!(
                "{} must produce an array, declared {}",
                self.name(),
                show(s)
            ))),
        }
    }
    pub(super) fn declared_arr(&self) -> R<(ElemType, Vec<i64>)> {
        let a = self.declared_array()?;
        Ok((a.elem, a.dims.iter().map(|d| d.bound().unwrap_or(0) as i64).collect()))
    }
    pub(super) fn callee(&self, id: CompId) -> R<Callee<'a>> {
        self.callees.callee(id).ok_or_else(|| self.err("called computation does not exist"))
    }
    pub(super) fn callee_root(&self, c: &Callee<'a>) -> R<&'a Shape> {
        c.result.ok_or_else(|| self.err(format!("computation `{}` has no root", c.name)))
    }
}

pub(super) fn scalar(s: &Shape) -> Option<ElemType> {
    match s {
        Shape::Array(a) if a.dims.is_empty() => Some(a.elem),
        _ => None,
    }
}

pub(super) fn tuple_if_many(shapes: Vec<Shape>) -> Shape {
    if shapes.len() == 1 { shapes.into_iter().next().expect("one") } else { Shape::Tuple(shapes) }
}

pub(super) fn dim_in_range(cx: &Cx, d: i64, rank: usize, what: &str) -> R<()> {
    if d < 0 || d as usize >= rank {
        return Err(cx.err(format!("{what} {d} is out of range for rank {rank}")));
    }
    Ok(())
}

pub(super) fn check_unique_in_range(
    cx: &Cx,
    v: &[i64],
    rank: usize,
    what: &str,
    sorted: bool,
) -> R<()> {
    for (i, &d) in v.iter().enumerate() {
        dim_in_range(cx, d, rank, what)?;
        if v[..i].contains(&d) {
            return Err(cx.err(format!("{what} lists dimension {d} twice")));
        }
        if sorted && i > 0 && v[i - 1] > d {
            return Err(cx.err(format!("{what} must be sorted, got {v:?}")));
        }
    }
    Ok(())
}

pub(super) fn check_permutation(cx: &Cx, p: &[i64], rank: usize, what: &str) -> R<()> {
    if p.len() != rank {
        return Err(cx.err(format!("{what} {p:?} has {} entries for rank {rank}", p.len())));
    }
    check_unique_in_range(cx, p, rank, what, false)
}

/// XLA's window formula: dilated base, padded, minus dilated window, by stride.
pub fn window_dim(n: i64, w: &hlo_ir::op::WindowDim) -> i64 {
    let b = if n == 0 { 0 } else { (n - 1) * w.lhs_dilate + 1 };
    let p = w.pad_lo + b + w.pad_hi;
    let ws = (w.size - 1) * w.rhs_dilate + 1;
    if ws > p { 0 } else { (p - ws) / w.stride + 1 }
}
