//! Interpreter values: arrays in a few storage classes, tuples and tokens.
//!
//! Storage classes keep the kernels few while every element type stays exact:
//! - `pred` → [`Data::Pred`];
//! - every integer type → [`Data::Int`] (`i64`), **normalized** to its width after every
//!   operation: signed types sign-extended, unsigned zero-extended (`u64` bit-cast), so
//!   wrap-around is exactly the type's;
//! - `f32`, `bf16`, `f16` → [`Data::F32`]; `bf16`/`f16` values are always exactly
//!   representable in their type (every result is rounded to nearest even, as XLA's CPU
//!   backend does when it computes narrow floats in f32 and rounds back);
//! - `f64` → [`Data::F64`];
//! - `c64` → [`Data::C64`] (`f32` real and imaginary parts), `c128` → [`Data::C128`]
//!   (`f64` parts), as [`num_complex::Complex`].
//!
//! - the fp8 types and `f4e2m1fn` → [`Data::F32`] too, always exactly representable in
//!   their type: conversions to them round once ([`hlo_ir::narrow::convert_f32`]), results
//!   of operations on them round through f16 as XLA's CPU backend computes them
//!   ([`hlo_ir::narrow::round_op`], via [`round_f32`]);
//! - sub-byte integers (`s4`, `u2`, ...) are [`Data::Int`] like the others, normalized to
//!   their width.

use std::cell::Cell;
use std::rc::Rc;

use half::{bf16, f16};
use hlo_ir::{Dim, ElemType, Shape, Tensor};

use hlo_ir::literal::Literal;
pub use num_complex::{Complex32, Complex64};

/// Elements in row-major order (last dimension fastest).
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    Pred(Vec<bool>),
    Int(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    C64(Vec<Complex32>),
    C128(Vec<Complex64>),
}

impl Data {
    pub fn len(&self) -> usize {
        match self {
            Data::Pred(v) => v.len(),
            Data::Int(v) => v.len(),
            Data::F32(v) => v.len(),
            Data::F64(v) => v.len(),
            Data::C64(v) => v.len(),
            Data::C128(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The elements at `idx`, in that order (gathers of any storage class).
    pub fn pick(&self, idx: &[usize]) -> Data {
        match self {
            Data::Pred(v) => Data::Pred(idx.iter().map(|&i| v[i]).collect()),
            Data::Int(v) => Data::Int(idx.iter().map(|&i| v[i]).collect()),
            Data::F32(v) => Data::F32(idx.iter().map(|&i| v[i]).collect()),
            Data::F64(v) => Data::F64(idx.iter().map(|&i| v[i]).collect()),
            Data::C64(v) => Data::C64(idx.iter().map(|&i| v[i]).collect()),
            Data::C128(v) => Data::C128(idx.iter().map(|&i| v[i]).collect()),
        }
    }
    /// The elements at `base + Σ idx[d]·strides[d]` for every index of `dims` in row-major
    /// order: every broadcast, transpose, slice, reverse and dynamic-slice is one such map.
    pub fn affine(&self, dims: &[usize], base: isize, strides: &[isize]) -> Data {
        let n = dims.iter().product();
        macro_rules! go {
            ($v:expr, $variant:ident) => {{
                let mut out = Vec::with_capacity(n);
                for_each_affine(dims, base, strides, |i| out.push($v[i]));
                Data::$variant(out)
            }};
        }
        match self {
            Data::Pred(v) => go!(v, Pred),
            Data::Int(v) => go!(v, Int),
            Data::F32(v) => go!(v, F32),
            Data::F64(v) => go!(v, F64),
            Data::C64(v) => go!(v, C64),
            Data::C128(v) => go!(v, C128),
        }
    }
    /// `n` copies of element `i`.
    pub fn splat(&self, i: usize, n: usize) -> Data {
        match self {
            Data::Pred(v) => Data::Pred(vec![v[i]; n]),
            Data::Int(v) => Data::Int(vec![v[i]; n]),
            Data::F32(v) => Data::F32(vec![v[i]; n]),
            Data::F64(v) => Data::F64(vec![v[i]; n]),
            Data::C64(v) => Data::C64(vec![v[i]; n]),
            Data::C128(v) => Data::C128(vec![v[i]; n]),
        }
    }
    /// The storage class.
    pub fn store(&self) -> Store {
        match self {
            Data::Pred(_) => Store::Pred,
            Data::Int(_) => Store::Int,
            Data::F32(_) => Store::F32,
            Data::F64(_) => Store::F64,
            Data::C64(_) => Store::C64,
            Data::C128(_) => Store::C128,
        }
    }
    /// `self[dst] = src[s]` for each `(dst, s)`; both of the same storage class, every
    /// index in range (a mismatch is an error, never a panic: shape inference rules it out
    /// on checked modules, but the interpreter also runs unchecked ones).
    pub fn scatter_from(
        &mut self,
        src: &Data,
        pairs: impl Iterator<Item = (usize, usize)>,
    ) -> Result<(), Failure> {
        fn go<T: Copy>(
            d: &mut [T],
            s: &[T],
            mut pairs: impl Iterator<Item = (usize, usize)>,
        ) -> Result<(), Failure> {
            pairs.try_for_each(|(i, j)| match (d.get_mut(i), s.get(j)) {
                (Some(x), Some(&y)) => {
                    *x = y;
                    Ok(())
                }
                _ => Err(Failure::from(format!(
                    "element {j} of {} written to element {i} of {}: out of range",
                    s.len(),
                    d.len()
                ))),
            })
        }
        match (self, src) {
            (Data::Pred(d), Data::Pred(s)) => go(d, s, pairs),
            (Data::Int(d), Data::Int(s)) => go(d, s, pairs),
            (Data::F32(d), Data::F32(s)) => go(d, s, pairs),
            (Data::F64(d), Data::F64(s)) => go(d, s, pairs),
            (Data::C64(d), Data::C64(s)) => go(d, s, pairs),
            (Data::C128(d), Data::C128(s)) => go(d, s, pairs),
            (d, s) => Err(Failure::from(store_mismatch(d.store(), s.store()))),
        }
    }
    /// Element `i` as a scalar of the same storage class.
    pub fn scalar_at(&self, i: usize) -> Data {
        self.splat(i, 1)
    }
    /// An empty vector of the same storage class with room for `cap` elements.
    pub fn empty_like(&self, cap: usize) -> Data {
        match self {
            Data::Pred(_) => Data::Pred(Vec::with_capacity(cap)),
            Data::Int(_) => Data::Int(Vec::with_capacity(cap)),
            Data::F32(_) => Data::F32(Vec::with_capacity(cap)),
            Data::F64(_) => Data::F64(Vec::with_capacity(cap)),
            Data::C64(_) => Data::C64(Vec::with_capacity(cap)),
            Data::C128(_) => Data::C128(Vec::with_capacity(cap)),
        }
    }
    /// Appends `src[r]` (same storage class, `r` in range; otherwise an error).
    pub fn push_range(&mut self, src: &Data, r: std::ops::Range<usize>) -> Result<(), Failure> {
        fn go<T: Copy>(d: &mut Vec<T>, s: &[T], r: std::ops::Range<usize>) -> Result<(), Failure> {
            let n = s.len();
            let part =
                s.get(r.clone()).ok_or_else(|| format!("elements {r:?} of {n}: out of range"))?;
            d.extend_from_slice(part);
            Ok(())
        }
        match (self, src) {
            (Data::Pred(d), Data::Pred(s)) => go(d, s, r),
            (Data::Int(d), Data::Int(s)) => go(d, s, r),
            (Data::F32(d), Data::F32(s)) => go(d, s, r),
            (Data::F64(d), Data::F64(s)) => go(d, s, r),
            (Data::C64(d), Data::C64(s)) => go(d, s, r),
            (Data::C128(d), Data::C128(s)) => go(d, s, r),
            (d, s) => Err(Failure::from(store_mismatch(d.store(), s.store()))),
        }
    }
    pub fn as_pred(&self) -> &[bool] {
        match self {
            Data::Pred(v) => v,
            _ => &[],
        }
    }
    pub fn as_int(&self) -> &[i64] {
        match self {
            Data::Int(v) => v,
            _ => &[],
        }
    }
    pub fn as_f32(&self) -> &[f32] {
        match self {
            Data::F32(v) => v,
            _ => &[],
        }
    }
    pub fn as_f64(&self) -> &[f64] {
        match self {
            Data::F64(v) => v,
            _ => &[],
        }
    }
    pub fn as_c64(&self) -> &[Complex32] {
        match self {
            Data::C64(v) => v,
            _ => &[],
        }
    }
    pub fn as_c128(&self) -> &[Complex64] {
        match self {
            Data::C128(v) => v,
            _ => &[],
        }
    }
}

/// The error for mixing storage classes in one kernel.
fn store_mismatch(dst: Store, src: Store) -> String {
    format!(
        "{} values where {} values were expected (the operand and result element types disagree)",
        src.name(),
        dst.name()
    )
}

/// Which [`Data`] variant holds an element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    Pred,
    Int,
    F32,
    F64,
    C64,
    C128,
}

impl Store {
    /// How the storage class is described in errors.
    pub fn name(self) -> &'static str {
        match self {
            Store::Pred => "pred",
            Store::Int => "integer",
            Store::F32 => "f32/bf16/f16/fp8",
            Store::F64 => "f64",
            Store::C64 => "c64",
            Store::C128 => "c128",
        }
    }
    /// Bytes per element the interpreter holds (`Vec<bool>`, `Vec<i64>`, `Vec<f32>`,
    /// `Vec<f64>`, two `f32` or `f64` per complex): what the memory budget counts.
    pub fn bytes(self) -> u64 {
        match self {
            Store::Pred => 1,
            Store::Int | Store::F64 | Store::C64 => 8,
            Store::F32 => 4,
            Store::C128 => 16,
        }
    }
}

/// The storage class of `e`, or why the interpreter cannot hold it.
pub fn store(e: ElemType) -> Result<Store, Failure> {
    use ElemType::*;
    match e {
        Pred => Ok(Store::Pred),
        F32 | BF16 | F16 => Ok(Store::F32),
        _ if hlo_ir::narrow::is_narrow_float(e) => Ok(Store::F32),
        F64 => Ok(Store::F64),
        C64 => Ok(Store::C64),
        C128 => Ok(Store::C128),
        _ if e.is_integer() => Ok(Store::Int),
        _ => Err(Failure::Here(format!("the interpreter does not support {e} values"))),
    }
}

/// `v` wrapped to the width of integer type `e` (sign- or zero-extended into an i64).
#[inline]
pub fn wrap(e: ElemType, v: i64) -> i64 {
    hlo_ir::literal::wrap_int(e, v)
}

/// `x`, the f32 result of an operation on type `e` (f32/bf16/f16 or a narrow float),
/// rounded to nearest even to `e` as XLA rounds such a result (narrow floats through f16,
/// see [`hlo_ir::narrow`]).
#[inline]
pub fn round_f32(e: ElemType, x: f32) -> f32 {
    match e {
        ElemType::F32 => x,
        ElemType::BF16 => bf16::from_f32(x).to_f32(),
        ElemType::F16 => f16::from_f32(x).to_f32(),
        _ => hlo_ir::narrow::round_op(e, x),
    }
}

/// `x` converted (`convert`) to `e`, one of f32/bf16/f16 or a narrow float: one rounding.
#[inline]
pub fn convert_f32(e: ElemType, x: f32) -> f32 {
    match e {
        ElemType::F32 | ElemType::BF16 | ElemType::F16 => round_f32(e, x),
        _ => hlo_ir::narrow::convert_f32(e, x),
    }
}

/// `x` converted (`convert`, or a literal) from f64 to `e`, one of f32/bf16/f16 or a
/// narrow float (bf16/f16 through f32, as XLA's CPU code does; narrow floats once).
#[inline]
pub fn convert_f64(e: ElemType, x: f64) -> f32 {
    match e {
        ElemType::F32 | ElemType::BF16 | ElemType::F16 => round_f32(e, x as f32),
        _ => hlo_ir::narrow::from_f64(e, x)
            .and_then(|b| hlo_ir::narrow::to_f32(e, b))
            .unwrap_or(x as f32),
    }
}

thread_local! {
    /// Bytes held by the [`Array`]s alive on this thread (see [`live_bytes`]).
    static LIVE: Cell<u64> = const { Cell::new(0) };
}

/// Bytes of element storage held by the [`Array`]s alive on this thread: the interpreter's
/// live memory, which its budget bounds. Every array is counted once however many values
/// share it (values hold arrays behind `Rc`); an array's length never changes after
/// construction, so construction adds it and drop subtracts it.
pub fn live_bytes() -> u64 {
    LIVE.with(Cell::get)
}

/// A dense array value. `data` holds `dims.iter().product()` elements: [`Array::new`]
/// does not check it (kernels build consistent arrays), the interpreter's shape check
/// does for every instruction's result.
#[derive(Debug, PartialEq)]
pub struct Array {
    pub elem: ElemType,
    pub dims: Vec<usize>,
    pub data: Data,
}

impl Clone for Array {
    fn clone(&self) -> Array {
        Array::new(self.elem, self.dims.clone(), self.data.clone())
    }
}

impl Drop for Array {
    fn drop(&mut self) {
        let b = self.bytes();
        LIVE.with(|c| c.set(c.get().saturating_sub(b)));
    }
}

impl Array {
    pub fn new(elem: ElemType, dims: Vec<usize>, data: Data) -> Array {
        let a = Array { elem, dims, data };
        let b = a.bytes();
        LIVE.with(|c| c.set(c.get().saturating_add(b)));
        a
    }
    /// Bytes of element storage (what the memory budget counts).
    pub fn bytes(&self) -> u64 {
        self.data.len() as u64 * self.data.store().bytes()
    }
    pub fn len(&self) -> usize {
        self.data.len()
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    /// All elements zero (false, 0, +0.0).
    pub fn zeros(elem: ElemType, dims: Vec<usize>) -> Result<Array, Failure> {
        let n = dims.iter().product();
        let data = match store(elem)? {
            Store::Pred => Data::Pred(vec![false; n]),
            Store::Int => Data::Int(vec![0; n]),
            Store::F32 => Data::F32(vec![0.0; n]),
            Store::F64 => Data::F64(vec![0.0; n]),
            Store::C64 => Data::C64(vec![Complex32::new(0.0, 0.0); n]),
            Store::C128 => Data::C128(vec![Complex64::new(0.0, 0.0); n]),
        };
        Ok(Array::new(elem, dims, data))
    }
    /// Element `i` as an integer (index operands); floats and preds are refused by the verifier.
    pub fn int_at(&self, i: usize) -> i64 {
        match &self.data {
            Data::Int(v) => v[i],
            Data::Pred(v) => v[i] as i64,
            Data::F32(v) => v[i] as i64,
            Data::F64(v) => v[i] as i64,
            Data::C64(v) => v[i].re as i64,
            Data::C128(v) => v[i].re as i64,
        }
    }

    /// From a host tensor; its element type must be storable.
    pub fn from_tensor(t: &Tensor) -> Result<Array, Failure> {
        let dims: Vec<usize> = t.dims().iter().map(|&d| d as usize).collect();
        let e = t.elem();
        let err = |x: hlo_ir::TensorError| x.to_string();
        let data = match (store(e)?, e) {
            (Store::Pred, _) => Data::Pred(t.to_vec::<bool>().map_err(err)?),
            (Store::F32, ElemType::BF16) => {
                Data::F32(t.values::<bf16>().map_err(err)?.map(f32::from).collect())
            }
            (Store::F32, ElemType::F16) => {
                Data::F32(t.values::<f16>().map_err(err)?.map(f32::from).collect())
            }
            (Store::F32, e) if hlo_ir::narrow::is_narrow_float(e) => Data::F32(
                t.bytes()
                    .iter()
                    .map(|&b| hlo_ir::narrow::to_f32(e, b).expect("narrow float"))
                    .collect(),
            ),
            (Store::F32, _) => Data::F32(t.to_vec::<f32>().map_err(err)?),
            (Store::F64, _) => Data::F64(t.to_vec::<f64>().map_err(err)?),
            // (re, im) pairs, little-endian, as numpy and XLA store them.
            (Store::C64, _) => Data::C64(
                t.bytes()
                    .chunks_exact(8)
                    .map(|b| {
                        Complex32::new(
                            f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                            f32::from_le_bytes([b[4], b[5], b[6], b[7]]),
                        )
                    })
                    .collect(),
            ),
            (Store::C128, _) => Data::C128(
                t.bytes()
                    .chunks_exact(16)
                    .map(|b| {
                        let part =
                            |o: usize| f64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
                        Complex64::new(part(0), part(8))
                    })
                    .collect(),
            ),
            (Store::Int, _) => Data::Int(
                t.to_i128_vec().map_err(err)?.into_iter().map(|v| wrap(e, v as i64)).collect(),
            ),
        };
        Ok(Array::new(e, dims, data))
    }

    /// To a host tensor of the same element type.
    pub fn to_tensor(&self) -> Result<Tensor, Failure> {
        use ElemType::*;
        let dims: Vec<u64> = self.dims.iter().map(|&d| d as u64).collect();
        let r = match (&self.data, self.elem) {
            (Data::Pred(v), _) => Tensor::from_pred(&dims, v),
            (Data::F32(v), BF16) => {
                Tensor::from_bf16(&dims, &v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>())
            }
            (Data::F32(v), F16) => {
                Tensor::from_f16(&dims, &v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>())
            }
            (Data::F32(v), e) if hlo_ir::narrow::is_narrow_float(e) => Tensor::from_bytes(
                e,
                dims,
                v.iter().map(|&x| hlo_ir::narrow::from_f32(e, x).expect("narrow float")).collect(),
            ),
            (Data::F32(v), _) => Tensor::from_f32(&dims, v),
            (Data::F64(v), _) => Tensor::from_f64(&dims, v),
            (Data::C64(v), e) => Tensor::from_bytes(
                e,
                dims,
                v.iter().flat_map(|c| [c.re.to_le_bytes(), c.im.to_le_bytes()]).flatten().collect(),
            ),
            (Data::C128(v), e) => Tensor::from_bytes(
                e,
                dims,
                v.iter().flat_map(|c| [c.re.to_le_bytes(), c.im.to_le_bytes()]).flatten().collect(),
            ),
            (Data::Int(v), e) => {
                let mut bytes = Vec::with_capacity(v.len() * 8);
                let width = e.bits().div_ceil(8) as usize;
                for x in v {
                    bytes.extend_from_slice(&x.to_le_bytes()[..width]);
                }
                Tensor::from_bytes(e, dims, bytes)
            }
        };
        r.map_err(|e| Failure::Here(e.to_string()))
    }

    /// From a constant literal of array shape `shape` (laid out by
    /// [`Literal::encode`], the one encoding every engine shares).
    pub fn from_literal(lit: &Literal, elem: ElemType, dims: Vec<usize>) -> Result<Array, Failure> {
        let n: usize = dims.iter().product();
        let bytes = lit.encode(elem, n).map_err(|e| Failure::Here(e.to_string()))?;
        let t = Tensor::from_bytes(elem, dims.iter().map(|&d| d as u64).collect(), bytes)
            .map_err(|e| Failure::Here(e.to_string()))?;
        Array::from_tensor(&t)
    }
}

/// A value: an array (shared, copy-on-write), a tuple or a token.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Array(Rc<Array>),
    Tuple(Vec<Value>),
    Token,
}

impl Value {
    pub fn array(a: Array) -> Value {
        Value::Array(Rc::new(a))
    }
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
    /// The leaves in order (the root tuple flattened, as `.npz` outputs are).
    pub fn leaves(&self) -> Vec<&Array> {
        let mut out = Vec::new();
        fn walk<'a>(v: &'a Value, out: &mut Vec<&'a Array>) {
            match v {
                Value::Array(a) => out.push(a),
                Value::Tuple(t) => t.iter().for_each(|x| walk(x, out)),
                Value::Token => {}
            }
        }
        walk(self, &mut out);
        out
    }
}

/// The shape of a value as HLO text: `f32[2,3]`, `(s32[], token[])`.
pub fn describe(v: &Value) -> String {
    match v {
        Value::Array(a) => format!(
            "{}[{}]",
            a.elem,
            a.dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",")
        ),
        Value::Tuple(t) => format!("({})", t.iter().map(describe).collect::<Vec<_>>().join(", ")),
        Value::Token => "token[]".into(),
    }
}

/// A shape as HLO text without layouts.
pub fn shape_text(s: &Shape) -> String {
    let mut out = String::new();
    s.write(&mut out, false);
    out
}

/// Where value `v` differs from shape `s` (element type, rank and dims, tuple structure;
/// layouts are not values' business), or `None` when it has that shape. A bounded
/// dimension `<=N` accepts any size up to N, `?` any size. Only metadata is compared
/// (plus the element count against the dims), never the elements.
pub fn mismatch(v: &Value, s: &Shape) -> Option<String> {
    fn go(v: &Value, s: &Shape, path: &mut Vec<usize>) -> Option<String> {
        let at = |path: &[usize]| {
            if path.is_empty() {
                String::new()
            } else {
                format!(
                    " at tuple index {{{}}}",
                    path.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",")
                )
            }
        };
        match (v, s) {
            (Value::Array(a), Shape::Array(x)) => {
                let dims_ok = a.dims.len() == x.dims.len()
                    && a.dims.iter().zip(&x.dims).all(|(&d, &want)| match want {
                        Dim::Static(n) => d as u64 == n,
                        Dim::Bounded(n) => d as u64 <= n,
                        Dim::Unbounded => true,
                    });
                if a.elem != x.elem || !dims_ok {
                    return Some(format!(
                        "{}{} where {} is declared",
                        describe(v),
                        at(path),
                        shape_text(s)
                    ));
                }
                let n = a.dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
                if n != Some(a.data.len()) {
                    return Some(format!(
                        "{}{} holds {} elements (an interpreter bug)",
                        describe(v),
                        at(path),
                        a.data.len()
                    ));
                }
                None
            }
            (Value::Tuple(t), Shape::Tuple(x)) if t.len() == x.len() => {
                for (i, (v, s)) in t.iter().zip(x).enumerate() {
                    path.push(i);
                    let r = go(v, s, path);
                    path.pop();
                    if r.is_some() {
                        return r;
                    }
                }
                None
            }
            (Value::Token, Shape::Token) => None,
            _ => Some(format!("{}{} where {} is declared", describe(v), at(path), shape_text(s))),
        }
    }
    go(v, s, &mut Vec::new())
}

/// Bytes the interpreter's storage needs for a value of shape `s` (elements times
/// [`Store::bytes`]; a bounded dimension counts at its bound, an unbounded one as 0 since
/// kernels refuse non-static results before allocating), or `None` when the count
/// overflows `u64`. Element types the interpreter cannot store count at their own width.
pub fn shape_bytes(s: &Shape) -> Option<u64> {
    match s {
        Shape::Array(a) => {
            let width = store(a.elem)
                .map(Store::bytes)
                .unwrap_or_else(|_| (a.elem.bits() as u64).div_ceil(8).max(1));
            a.dims.iter().try_fold(width, |acc, d| {
                acc.checked_mul(match *d {
                    Dim::Static(n) | Dim::Bounded(n) => n,
                    Dim::Unbounded => 0,
                })
            })
        }
        Shape::Tuple(t) => t.iter().try_fold(0u64, |acc, s| acc.checked_add(shape_bytes(s)?)),
        Shape::Buffer(b) => shape_bytes(b),
        Shape::Token | Shape::Opaque => Some(0),
    }
}

/// Static dims of an array shape as `usize` (shapes are static once checked).
pub fn dims_of(s: &Shape) -> Option<(ElemType, Vec<usize>)> {
    let a = s.as_array()?;
    Some((a.elem, a.static_dims()?.into_iter().map(|d| d as usize).collect()))
}

/// Row-major strides of `dims`.
pub fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// Calls `f(base + Σ idx[d]·strides[d])` for every multi-index of `dims` in row-major
/// order, incrementally (no per-element multiplication).
pub fn for_each_affine(dims: &[usize], base: isize, strides: &[isize], mut f: impl FnMut(usize)) {
    if dims.contains(&0) {
        return;
    }
    let Some((&inner, outer)) = dims.split_last() else {
        f(base as usize);
        return;
    };
    let inner_stride = strides[outer.len()];
    let mut idx = vec![0usize; outer.len()];
    let mut off = base;
    loop {
        let mut o = off;
        for _ in 0..inner {
            f(o as usize);
            o += inner_stride;
        }
        let mut d = outer.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            off += strides[d];
            if idx[d] < outer[d] {
                break;
            }
            off -= strides[d] * outer[d] as isize;
            idx[d] = 0;
        }
    }
}

/// Calls `f(index, linear)` for every multi-index of `dims` in row-major order.
pub fn for_each_index(dims: &[usize], mut f: impl FnMut(&[usize], usize)) {
    let n: usize = dims.iter().product();
    if n == 0 {
        return;
    }
    let mut idx = vec![0usize; dims.len()];
    for lin in 0..n {
        f(&idx, lin);
        for d in (0..dims.len()).rev() {
            idx[d] += 1;
            if idx[d] < dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// The interpreter crate's error: why an instruction (or a value, a collective, a seeded
/// input) could not be evaluated: a message about it, or an error already located inside
/// a computation it called.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Failure {
    /// About the instruction being evaluated (the caller locates it).
    #[error("{0}")]
    Here(String),
    /// Located inside a computation the instruction called.
    #[error("{}", .0.message)]
    Nested(hlo_ir::Diagnostic),
}

impl From<String> for Failure {
    fn from(s: String) -> Failure {
        Failure::Here(s)
    }
}

/// The message, for callers that report errors as text.
impl From<Failure> for String {
    fn from(f: Failure) -> String {
        f.to_string()
    }
}

impl From<&str> for Failure {
    fn from(s: &str) -> Failure {
        Failure::Here(s.to_string())
    }
}

/// An error at the instruction being evaluated unless `ok`.
pub(crate) fn ensure(ok: bool, msg: impl FnOnce() -> String) -> Result<(), Failure> {
    if ok { Ok(()) } else { Err(Failure::Here(msg())) }
}

/// Dims as text (`[2,3]`).
pub(crate) fn dims_text(d: &[usize]) -> String {
    format!("[{}]", d.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(","))
}
