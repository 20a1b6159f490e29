//! `cholesky` and `triangular-solve`, evaluated with the steps of XLA's `CholeskyExpander`
//! and `TriangularSolveExpander` (what XLA's CPU backend runs), after XLA's algebraic
//! simplifier has turned every division by a broadcast scalar into a multiplication by
//! its reciprocal. Sums run in ascending index order over the whole contraction a dot of
//! the expansion contracts (zeros included), so the compiler's `cholesky-expander` and
//! `triangular-solve-expander` passes, evaluated by this interpreter, give the same bits
//! (the golden cases check it). Leading dimensions are batch dimensions; f32 and f64
//! only (XLA's expansions of narrow floats round every step; not modelled).
//!
//! Cholesky (lower; `lower=false` factors the transpose and transposes back, so it reads
//! the upper triangle): for each column `i`, `c = A[:, i] - L·L[i, :]ᵀ`, `r = 1/sqrt(c[i])`,
//! `L[j, i] = c[j]·r` for `j >= i`. The other triangle is zero. When any `sqrt(c[i])` is
//! NaN (a non-positive pivot) the whole matrix of that batch element is NaN; a zero pivot
//! is not an error (its column becomes inf/NaN as the arithmetic gives). A 1x1 matrix is
//! `sqrt(a)`. XLA factors matrices larger than 128 in blocks of 128 (panel updates and a
//! triangular solve by inverted blocks); here every size runs the unblocked recurrence,
//! the same sums grouped differently (rounding-level differences above n = 128).
//!
//! Triangular solve (`op(A)·X = B` on the left side, `X·op(A) = B` on the right): B with
//! no elements is returned as is; a 1x1 `A` gives `B·(1/a)` (or `B` with a unit
//! diagonal); with more than 8 batch matrices smaller than 32x32, row-by-row substitution
//! (`SolveDirectly`); otherwise the diagonal blocks (of `min(128, n)`, the last padded
//! with the identity) of the masked `A` are inverted row by row, and the solution is
//! built block by block with matrix products (`SolveByInvertingDiagonalBlocks`). Only
//! the triangle `lower` names is read (and not the diagonal when `unit_diagonal`).

use hlo_ir::ElemType;

use super::value::{Array, Data, Failure};

type R<T> = Result<T, Failure>;

/// XLA's block size for both expanders.
pub const BLOCK: usize = 128;

/// `transpose_a`, the option of `triangular-solve`. XLA rejects the op without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transpose {
    No,
    Transpose,
    Adjoint,
}

impl Transpose {
    pub fn parse(t: Option<&str>) -> Result<Transpose, Failure> {
        match t {
            Some("NO_TRANSPOSE") => Ok(Transpose::No),
            Some("TRANSPOSE") => Ok(Transpose::Transpose),
            Some("ADJOINT") => Ok(Transpose::Adjoint),
            Some(t) => Err(Failure::from(format!(
                "transpose_a={t} is not one of NO_TRANSPOSE, TRANSPOSE, ADJOINT"
            ))),
            None => {
                Err("triangular-solve needs transpose_a= (NO_TRANSPOSE, TRANSPOSE or ADJOINT)"
                    .into())
            }
        }
    }
    /// Real matrices: TRANSPOSE and ADJOINT are the same.
    pub fn transposed(self) -> bool {
        self != Transpose::No
    }
}

/// Which algorithm XLA's `TriangularSolveExpander` picks for these shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SolveKind {
    /// B has no elements: the result is B.
    Empty,
    /// A is 1x1: `B·(1/a)`, or B with a unit diagonal.
    Scalar,
    /// Row-by-row substitution (many small matrices).
    Direct,
    /// Inverted diagonal blocks of this size.
    Blocked(usize),
}

/// XLA's choice: direct solves when there are more than `BLOCK/16` batch matrices and
/// `A` is smaller than `BLOCK/4`.
pub fn solve_kind(batch: usize, k: usize, b_elems: usize) -> SolveKind {
    if b_elems == 0 {
        SolveKind::Empty
    } else if k == 1 {
        SolveKind::Scalar
    } else if batch > BLOCK / 16 && k < BLOCK / 4 {
        SolveKind::Direct
    } else {
        SolveKind::Blocked(BLOCK.min(k))
    }
}

/// The real element types both ops are evaluated in.
pub trait Real: Copy + PartialEq + PartialOrd + std::fmt::Debug {
    const ZERO: Self;
    const ONE: Self;
    const NAN: Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn neg(self) -> Self;
    fn sqrt(self) -> Self;
    fn is_nan(self) -> bool;
}

macro_rules! real {
    ($t:ty) => {
        impl Real for $t {
            const ZERO: $t = 0.0;
            const ONE: $t = 1.0;
            const NAN: $t = <$t>::NAN;
            fn add(self, o: $t) -> $t {
                self + o
            }
            fn sub(self, o: $t) -> $t {
                self - o
            }
            fn mul(self, o: $t) -> $t {
                self * o
            }
            fn div(self, o: $t) -> $t {
                self / o
            }
            fn neg(self) -> $t {
                -self
            }
            fn sqrt(self) -> $t {
                <$t>::sqrt(self)
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    };
}
real!(f32);
real!(f64);

/// A row-major matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Mat<T> {
    pub rows: usize,
    pub cols: usize,
    pub v: Vec<T>,
}

impl<T: Real> Mat<T> {
    pub fn new(rows: usize, cols: usize, v: Vec<T>) -> Mat<T> {
        Mat { rows, cols, v }
    }
    pub fn zeros(rows: usize, cols: usize) -> Mat<T> {
        Mat { rows, cols, v: vec![T::ZERO; rows * cols] }
    }
    pub fn at(&self, r: usize, c: usize) -> T {
        self.v[r * self.cols + c]
    }
    pub fn set(&mut self, r: usize, c: usize, x: T) {
        self.v[r * self.cols + c] = x;
    }
    pub fn t(&self) -> Mat<T> {
        let mut o = Mat::zeros(self.cols, self.rows);
        for r in 0..self.rows {
            for c in 0..self.cols {
                o.set(c, r, self.at(r, c));
            }
        }
        o
    }
    /// Rows `r0..r1`, columns `c0..c1`.
    pub fn slice(&self, r0: usize, r1: usize, c0: usize, c1: usize) -> Mat<T> {
        let mut o = Mat::zeros(r1 - r0, c1 - c0);
        for r in r0..r1 {
            for c in c0..c1 {
                o.set(r - r0, c - c0, self.at(r, c));
            }
        }
        o
    }
    /// Writes `u` with its top-left corner at `(r0, c0)`.
    pub fn put(&mut self, u: &Mat<T>, r0: usize, c0: usize) {
        for r in 0..u.rows {
            for c in 0..u.cols {
                self.set(r0 + r, c0 + c, u.at(r, c));
            }
        }
    }
    /// `f(row, col, value)` applied to every element.
    pub fn map(&self, f: impl Fn(usize, usize, T) -> T) -> Mat<T> {
        let mut o = self.clone();
        for r in 0..self.rows {
            for c in 0..self.cols {
                o.set(r, c, f(r, c, self.at(r, c)));
            }
        }
        o
    }
}

/// `op(x)·op(y)` with every sum in ascending order of the contracted index, starting
/// from zero (a dot as the interpreter computes it).
pub fn matmul<T: Real>(x: &Mat<T>, tx: bool, y: &Mat<T>, ty: bool) -> Mat<T> {
    let (m, k) = if tx { (x.cols, x.rows) } else { (x.rows, x.cols) };
    let n = if ty { y.rows } else { y.cols };
    let xe = |i: usize, p: usize| if tx { x.at(p, i) } else { x.at(i, p) };
    let ye = |p: usize, j: usize| if ty { y.at(j, p) } else { y.at(p, j) };
    let mut o = Mat::zeros(m, n);
    for i in 0..m {
        for j in 0..n {
            let mut acc = T::ZERO;
            for p in 0..k {
                acc = acc.add(xe(i, p).mul(ye(p, j)));
            }
            o.set(i, j, acc);
        }
    }
    o
}

/// The lower Cholesky factor of the lower triangle of `a` (see the module doc).
pub fn cholesky_lower<T: Real>(a: &Mat<T>) -> Mat<T> {
    let n = a.rows;
    if n == 1 {
        return Mat::new(1, 1, vec![a.at(0, 0).sqrt()]);
    }
    let mut l: Mat<T> = Mat::zeros(n, n);
    let mut error = false;
    for i in 0..n {
        // c = A[:, i] - L · L[i, :]ᵀ over all n columns of L (zeros beyond i).
        let col: Vec<T> = (0..n)
            .map(|r| {
                let mut acc = T::ZERO;
                for k in 0..n {
                    acc = acc.add(l.at(r, k).mul(l.at(i, k)));
                }
                a.at(r, i).sub(acc)
            })
            .collect();
        let s = col[i].sqrt();
        error |= s.is_nan();
        let recip = T::ONE.div(s);
        for (r, &c) in col.iter().enumerate().skip(i) {
            l.set(r, i, c.mul(recip));
        }
    }
    if error {
        l.v.fill(T::NAN);
    }
    l
}

pub fn cholesky<T: Real>(a: &Mat<T>, lower: bool) -> Mat<T> {
    if lower { cholesky_lower(a) } else { cholesky_lower(&a.t()).t() }
}

/// The options of one solve.
#[derive(Debug, Clone, Copy)]
pub struct Solve {
    pub left_side: bool,
    pub lower: bool,
    pub unit_diagonal: bool,
    pub transpose_a: bool,
}

/// `a` with the ignored triangle zeroed (and a unit diagonal when `unit`).
pub fn masked<T: Real>(a: &Mat<T>, lower: bool, unit: bool) -> Mat<T> {
    a.map(|r, c, x| {
        if r == c {
            if unit { T::ONE } else { x }
        } else if (lower && r > c) || (!lower && r < c) {
            x
        } else {
            T::ZERO
        }
    })
}

/// The inverse of a triangular block: scaled to a unit diagonal by columns, inverted one
/// row at a time (`row_j = -(S[j, :] · out)`, from an output of `-I` with a `1` at the
/// first row's (lower) or last row's (upper) diagonal), then scaled back by rows.
pub fn invert_block<T: Real>(d: &Mat<T>, lower: bool) -> Mat<T> {
    let bs = d.rows;
    let recip: Vec<T> = (0..bs).map(|i| T::ONE.div(d.at(i, i))).collect();
    let s = d.map(|_, c, x| x.mul(recip[c]));
    let mut out = Mat::zeros(bs, bs);
    for i in 0..bs {
        out.set(i, i, T::ONE.neg());
    }
    let first = if lower { 0 } else { bs - 1 };
    out.set(first, first, T::ONE);
    for i in 1..bs {
        let j = if lower { i } else { bs - 1 - i };
        let row = s.slice(j, j + 1, 0, bs);
        let update = matmul(&row, false, &out, false);
        for c in 0..bs {
            out.set(j, c, update.at(0, c).neg());
        }
    }
    out.map(|r, _, x| x.mul(recip[r]))
}

/// Solves one batch element with the algorithm `kind` (from [`solve_kind`]).
pub fn triangular_solve<T: Real>(a: &Mat<T>, b: &Mat<T>, o: Solve, kind: SolveKind) -> Mat<T> {
    match kind {
        SolveKind::Empty => b.clone(),
        SolveKind::Scalar => {
            if o.unit_diagonal {
                b.clone()
            } else {
                let r = T::ONE.div(a.at(0, 0));
                b.map(|_, _, x| x.mul(r))
            }
        }
        SolveKind::Direct => solve_direct(a, b, o),
        SolveKind::Blocked(bs) => solve_blocked(a, b, o, bs),
    }
}

/// Row-by-row substitution. On the left side row `j` of X is
/// `(B[j, :] - Σ_p op(A)[j, p]·X[p, :])·(1/A[j, j])` over the solved rows `p`; the right
/// side is the same on columns.
fn solve_direct<T: Real>(a: &Mat<T>, b: &Mat<T>, o: Solve) -> Mat<T> {
    let k = a.rows;
    let t = o.transpose_a;
    // Work on the left side: X' = X (left) or Xᵀ (right), E[j][p] the coefficient of
    // X'[p] in equation j.
    let mut x = if o.left_side { b.clone() } else { b.t() };
    let e = |j: usize, p: usize| if t ^ !o.left_side { a.at(p, j) } else { a.at(j, p) };
    let forward = t ^ o.lower ^ !o.left_side;
    let cols = x.cols;
    for i in 0..k {
        let j = if forward { i } else { k - 1 - i };
        let range: Vec<usize> = if forward { (0..j).collect() } else { (j + 1..k).collect() };
        let recip = if o.unit_diagonal { None } else { Some(T::ONE.div(a.at(j, j))) };
        for c in 0..cols {
            let mut acc = T::ZERO;
            for &p in &range {
                acc = acc.add(e(j, p).mul(x.at(p, c)));
            }
            let mut v = x.at(j, c).sub(acc);
            if let Some(r) = recip {
                v = v.mul(r);
            }
            x.set(j, c, v);
        }
    }
    if o.left_side { x } else { x.t() }
}

/// The diagonal block `j` of `a` (already masked), the last one padded to `bs` with the
/// identity.
pub fn diagonal_block<T: Real>(a: &Mat<T>, j: usize, bs: usize) -> Mat<T> {
    let k = a.rows;
    let lo = j * bs;
    let hi = (lo + bs).min(k);
    let mut d = Mat::zeros(bs, bs);
    d.put(&a.slice(lo, hi, lo, hi), 0, 0);
    for i in hi - lo..bs {
        d.set(i, i, T::ONE);
    }
    d
}

/// XLA's `SolveByInvertingDiagonalBlocks`.
fn solve_blocked<T: Real>(a: &Mat<T>, b: &Mat<T>, o: Solve, bs: usize) -> Mat<T> {
    let k = a.rows;
    let t = o.transpose_a;
    let a = masked(a, o.lower, o.unit_diagonal);
    let nb = k.div_ceil(bs);
    let inv: Vec<Mat<T>> =
        (0..nb).map(|j| invert_block(&diagonal_block(&a, j, bs), o.lower)).collect();
    let backward = o.left_side ^ o.lower ^ t;
    // The solved blocks so far, in order, as row blocks (left) or column blocks (right).
    let mut x: Option<Mat<T>> = None;
    for i in 0..nb {
        let j = if backward { nb - 1 - i } else { i };
        let size = if !k.is_multiple_of(bs) && j + 1 == nb { k % bs } else { bs };
        let inv_block = inv[j].slice(0, size, 0, size);
        let kk = ((j + 1) * bs).min(k);
        let b_row = if o.left_side {
            b.slice(j * bs, kk, 0, b.cols)
        } else {
            b.slice(0, b.rows, j * bs, kk)
        };
        let remainder = match &x {
            None => b_row,
            Some(x) => {
                let (mut s, mut e) = if backward {
                    ([j * bs, ((nb - i) * bs).min(k)], [kk, k])
                } else {
                    ([j * bs, 0], [kk, (i * bs).min(k)])
                };
                if !o.left_side ^ t {
                    s.swap(0, 1);
                    e.swap(0, 1);
                }
                let a_row = a.slice(s[0], e[0], s[1], e[1]);
                let p = if o.left_side {
                    matmul(&a_row, t, x, false)
                } else {
                    matmul(x, false, &a_row, t)
                };
                b_row.map(|r, c, v| v.sub(p.at(r, c)))
            }
        };
        let update = if o.left_side {
            matmul(&inv_block, t, &remainder, false)
        } else {
            matmul(&remainder, false, &inv_block, t)
        };
        x = Some(match x {
            None => update,
            Some(x) => {
                let (first, second) = if backward { (update, x) } else { (x, update) };
                if o.left_side {
                    concat_rows(&first, &second)
                } else {
                    concat_rows(&first.t(), &second.t()).t()
                }
            }
        });
    }
    x.unwrap_or_else(|| b.clone())
}

fn concat_rows<T: Real>(x: &Mat<T>, y: &Mat<T>) -> Mat<T> {
    let mut v = x.v.clone();
    v.extend_from_slice(&y.v);
    Mat::new(x.rows + y.rows, x.cols, v)
}

/// The batch dimensions, matrix rows and columns of an operand of rank >= 2.
fn split(x: &Array, what: &str) -> R<(usize, usize, usize)> {
    let r = x.dims.len();
    if r < 2 {
        return Err(format!("the {what} of rank {r} is not a (batch of) matrices").into());
    }
    Ok((x.dims[..r - 2].iter().product(), x.dims[r - 2], x.dims[r - 1]))
}

fn check_elem(x: &Array, op: &str) -> R<()> {
    match x.elem {
        ElemType::F32 | ElemType::F64 => Ok(()),
        e => Err(format!("{op} of {e} values is not supported (f32 and f64 only)").into()),
    }
}

/// Applies `f` to every batch matrix of the f32 or f64 arrays `xs` (their batch counts
/// and element types already checked), giving one matrix of `out_dims` per batch element.
fn per_matrix(
    xs: &[(&Array, usize, usize)],
    batch: usize,
    elem: ElemType,
    out_dims: Vec<usize>,
    f32f: impl Fn(&[Mat<f32>]) -> Mat<f32>,
    f64f: impl Fn(&[Mat<f64>]) -> Mat<f64>,
) -> R<Array> {
    macro_rules! go {
        ($get:ident, $variant:ident, $f:expr) => {{
            let mut out = Vec::with_capacity(out_dims.iter().product());
            for bi in 0..batch {
                let mats: Vec<_> = xs
                    .iter()
                    .map(|&(x, r, c)| {
                        let v = x.data.$get();
                        Mat::new(r, c, v[bi * r * c..(bi + 1) * r * c].to_vec())
                    })
                    .collect();
                out.extend($f(&mats).v);
            }
            Data::$variant(out)
        }};
    }
    let data = match elem {
        ElemType::F32 => go!(as_f32, F32, f32f),
        _ => go!(as_f64, F64, f64f),
    };
    Ok(Array::new(elem, out_dims, data))
}

/// `cholesky(a), lower=...` on a batch of square matrices.
pub fn eval_cholesky(a: &Array, lower: bool) -> R<Array> {
    check_elem(a, "cholesky")?;
    let (batch, n, m) = split(a, "operand")?;
    if n != m {
        return Err(format!("cholesky of {n}x{m} matrices (square only)").into());
    }
    if a.is_empty() {
        return Ok(a.clone());
    }
    per_matrix(
        &[(a, n, n)],
        batch,
        a.elem,
        a.dims.clone(),
        |m| cholesky(&m[0], lower),
        |m| cholesky(&m[0], lower),
    )
}

/// `triangular-solve(a, b)` on batches of matrices.
pub fn eval_triangular_solve(a: &Array, b: &Array, o: Solve) -> R<Array> {
    check_elem(a, "triangular-solve")?;
    if a.elem != b.elem {
        return Err(format!(
            "triangular-solve of {} and {} values (one element type)",
            a.elem, b.elem
        )
        .into());
    }
    let (batch, k, k2) = split(a, "a operand")?;
    let (_, m, n) = split(b, "b operand")?;
    if k != k2
        || a.dims.len() != b.dims.len()
        || a.dims[..a.dims.len() - 2] != b.dims[..b.dims.len() - 2]
        || (if o.left_side { m } else { n }) != k
    {
        return Err(format!(
            "triangular-solve of a {:?} and b {:?}: the shapes do not fit",
            a.dims, b.dims
        )
        .into());
    }
    let kind = solve_kind(batch, k, b.len());
    if kind == SolveKind::Empty {
        return Ok(b.clone());
    }
    per_matrix(
        &[(a, k, k), (b, m, n)],
        batch,
        a.elem,
        b.dims.clone(),
        |x| triangular_solve(&x[0], &x[1], o, kind),
        |x| triangular_solve(&x[0], &x[1], o, kind),
    )
}
