//! Host tensors: the values that programs take and produce on the host (inputs read from
//! `.npz`, interpreter values, outputs to compare).
//!
//! A [`Tensor`] is an element type, static dimensions and the elements' bytes,
//! little-endian, row-major (last dimension fastest), densely packed.
//!
//! **Invariant** (checked by every constructor; the fields are private so it cannot be
//! broken): `bytes.len() == element_count(dims) * elem_size(elem)`, and `elem` has a
//! whole-byte storage size. `pred` takes one byte (0 = false, anything else = true; the
//! constructors here only write 0 and 1), `bf16`/`f16` two. Sub-byte types take one byte
//! per element, unpacked, as XLA's host literals hold them: `s4`/`s2`/`s1` the value as a
//! sign-extended `i8`, `u4`/`u2`/`u1` the value as a `u8`, `f4e2m1fn` its bit pattern in
//! the low four bits. The fp8 types are their bit patterns (see [`crate::narrow`]). A
//! scalar has no dims and one element.

use std::fmt;

use half::{bf16, f16};

use crate::types::{ElemClass, ElemType, Shape};

/// Why a tensor could not be built or viewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TensorError {
    /// The element type has no host representation (token, opaque, ...).
    SubByte(ElemType),
    /// The element count or byte size does not fit in memory sizes.
    TooLarge { dims: Vec<u64> },
    /// A value or byte buffer of the wrong length for the dims.
    Length { what: &'static str, expected: usize, got: usize },
    /// A typed access with a type that is not the tensor's element type.
    Type { tensor: ElemType, requested: ElemType },
    /// A conversion this element type does not have (complex or f8 to f64, float to integer).
    NoConversion { elem: ElemType, to: &'static str },
    /// A bitcast between element types of different widths.
    Bitcast { from: ElemType, to: ElemType },
}

impl fmt::Display for TensorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TensorError::SubByte(e) => write!(f, "{e} elements have no host tensor representation"),
            TensorError::TooLarge { dims } => write!(f, "a tensor of dims {dims:?} is too large"),
            TensorError::Length { what, expected, got } => {
                write!(f, "expected {expected} {what}, got {got}")
            }
            TensorError::Type { tensor, requested } => {
                write!(f, "the tensor holds {tensor}, not {requested}")
            }
            TensorError::NoConversion { elem, to } => {
                write!(f, "no conversion from {elem} to {to}")
            }
            TensorError::Bitcast { from, to } => {
                write!(f, "cannot bitcast {from} to {to}: the widths differ")
            }
        }
    }
}

impl std::error::Error for TensorError {}

/// Bytes of one element in a host tensor (one for the sub-byte types, which are unpacked);
/// an error for types without elements.
pub fn elem_size(elem: ElemType) -> Result<usize, TensorError> {
    match elem.bits() {
        0 => Err(TensorError::SubByte(elem)),
        bits => Ok(bits.div_ceil(8) as usize),
    }
}

/// The host memory one process's tensors may take together, when no other budget is set:
/// 16 GiB, or 3/4 of the physical memory (`MemTotal` in `/proc/meminfo`) when that is less.
/// The interpreter's storage, seeded inputs and the shards of an SPMD run's inputs are held
/// to it, so that a program too large for the host is refused with an error before anything
/// that large is allocated.
pub fn memory_budget() -> u64 {
    const FIXED: u64 = 16 << 30;
    physical_memory().map_or(FIXED, |p| FIXED.min(p / 4 * 3))
}

/// This host's physical memory in bytes (`MemTotal` in `/proc/meminfo`, read once), or
/// `None` where that is unknown.
pub fn physical_memory() -> Option<u64> {
    static PHYSICAL: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *PHYSICAL.get_or_init(|| {
        let s = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        kb.checked_mul(1024)
    })
}

/// `n` bytes in the largest binary unit that keeps the number at least 1: `1.5 GiB`,
/// `512 bytes`.
pub fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut x = n as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} bytes") } else { format!("{x:.1} {}", UNITS[u]) }
}

/// Number of elements of `dims` (1 for a scalar), checked against overflow.
pub fn element_count(dims: &[u64]) -> Result<usize, TensorError> {
    let too_large = || TensorError::TooLarge { dims: dims.to_vec() };
    let n = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).ok_or_else(too_large)?;
    usize::try_from(n).map_err(|_| too_large())
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that is the host representation of one element type. Sealed: the set is
/// exactly the impls below, so `SIZE` always equals the element type's byte size.
pub trait Element: Copy + sealed::Sealed + 'static {
    const ELEM: ElemType;
    const SIZE: usize;
    /// Appends the little-endian encoding (`SIZE` bytes).
    fn put(self, out: &mut Vec<u8>);
    /// Decodes `SIZE` little-endian bytes.
    fn get(bytes: &[u8]) -> Self;
}

macro_rules! le_elements {
    ($($t:ty => $e:ident;)*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const ELEM: ElemType = ElemType::$e;
            const SIZE: usize = std::mem::size_of::<$t>();
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("callers pass SIZE bytes"))
            }
        }
    )*};
}

le_elements! {
    i8 => S8; i16 => S16; i32 => S32; i64 => S64;
    u8 => U8; u16 => U16; u32 => U32; u64 => U64;
    f16 => F16; bf16 => BF16; f32 => F32; f64 => F64;
}

impl sealed::Sealed for bool {}
impl Element for bool {
    const ELEM: ElemType = ElemType::Pred;
    const SIZE: usize = 1;
    fn put(self, out: &mut Vec<u8>) {
        out.push(self as u8);
    }
    fn get(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

/// A host tensor; see the module doc for the layout invariant.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Tensor {
    elem: ElemType,
    dims: Vec<u64>,
    bytes: Vec<u8>,
}

impl Tensor {
    /// A tensor from its little-endian row-major bytes; the length must match the dims.
    pub fn from_bytes(
        elem: ElemType,
        dims: Vec<u64>,
        bytes: Vec<u8>,
    ) -> Result<Tensor, TensorError> {
        let expected = byte_len(elem, &dims)?;
        if bytes.len() != expected {
            return Err(TensorError::Length { what: "bytes", expected, got: bytes.len() });
        }
        Ok(Tensor { elem, dims, bytes })
    }

    /// All-zero bits: 0, +0.0 or false (for `f8e8m0fnu`, which has no zero, its smallest value).
    pub fn zeros(elem: ElemType, dims: &[u64]) -> Result<Tensor, TensorError> {
        let n = byte_len(elem, dims)?;
        Ok(Tensor { elem, dims: dims.to_vec(), bytes: vec![0; n] })
    }

    /// A tensor of `T::ELEM` from values in row-major order; `values.len()` must match the dims.
    pub fn from_slice<T: Element>(dims: &[u64], values: &[T]) -> Result<Tensor, TensorError> {
        let expected = element_count(dims)?;
        if values.len() != expected {
            return Err(TensorError::Length { what: "elements", expected, got: values.len() });
        }
        let mut bytes = Vec::with_capacity(expected * T::SIZE);
        values.iter().for_each(|v| v.put(&mut bytes));
        Ok(Tensor { elem: T::ELEM, dims: dims.to_vec(), bytes })
    }

    /// A rank-0 tensor.
    pub fn scalar<T: Element>(value: T) -> Tensor {
        let mut bytes = Vec::with_capacity(T::SIZE);
        value.put(&mut bytes);
        Tensor { elem: T::ELEM, dims: Vec::new(), bytes }
    }

    pub fn from_pred(dims: &[u64], values: &[bool]) -> Result<Tensor, TensorError> {
        Tensor::from_slice(dims, values)
    }
    pub fn from_i8(dims: &[u64], values: &[i8]) -> Result<Tensor, TensorError> {
        Tensor::from_slice(dims, values)
    }
    pub fn from_i16(dims: &[u64], values: &[i16]) -> Result<Tensor, TensorError> {
        Tensor::from_slice(dims, values)
    }
    pub fn from_i32(dims: &[u64], values: &[i32]) -> Result<Tensor, TensorError> {
        Tensor::from_slice(dims, values)
    }
    pub fn from_i64(dims: &[u64], values: &[i64]) -> Result<Tensor, TensorError> {
        Tensor::from_slice(dims, values)
    }
    pub fn from_u8(dims: &[u64], values: &[u8]) -> Result<Tensor, TensorError> {
        Tensor::from_slice(dims, values)
    }
    pub fn from_u16(dims: &[u64], values: &[u16]) -> Result<Tensor, TensorError> {
        Tensor::from_slice(dims, values)
    }
    pub fn from_u32(dims: &[u64], values: &[u32]) -> Result<Tensor, TensorError> {
        Tensor::from_slice(dims, values)
    }
    pub fn from_u64(dims: &[u64], values: &[u64]) -> Result<Tensor, TensorError> {
        Tensor::from_slice(dims, values)
    }
    pub fn from_f16(dims: &[u64], values: &[f16]) -> Result<Tensor, TensorError> {
        Tensor::from_slice(dims, values)
    }
    pub fn from_bf16(dims: &[u64], values: &[bf16]) -> Result<Tensor, TensorError> {
        Tensor::from_slice(dims, values)
    }
    pub fn from_f32(dims: &[u64], values: &[f32]) -> Result<Tensor, TensorError> {
        Tensor::from_slice(dims, values)
    }
    pub fn from_f64(dims: &[u64], values: &[f64]) -> Result<Tensor, TensorError> {
        Tensor::from_slice(dims, values)
    }

    pub fn elem(&self) -> ElemType {
        self.elem
    }
    pub fn dims(&self) -> &[u64] {
        &self.dims
    }
    pub fn rank(&self) -> usize {
        self.dims.len()
    }
    /// Little-endian, row-major element bytes.
    /// The little-endian row-major bytes, writable (the length stays fixed).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
    /// Bytes per element (never 0: sub-byte types take one byte).
    pub fn elem_size(&self) -> usize {
        self.elem.bits().div_ceil(8) as usize
    }
    /// Number of elements (1 for a scalar).
    pub fn element_count(&self) -> usize {
        self.bytes.len() / self.elem_size()
    }
    /// The static array shape `elem[dims]`, without layout.
    pub fn shape(&self) -> Shape {
        Shape::array(self.elem, &self.dims)
    }

    /// The same bytes viewed as another element type of the same byte size (XLA's
    /// `bitcast-convert` between equal widths; e.g. u16 bit patterns → bf16).
    pub fn bitcast(self, elem: ElemType) -> Result<Tensor, TensorError> {
        if elem_size(elem)? != self.elem_size() {
            return Err(TensorError::Bitcast { from: self.elem, to: elem });
        }
        Ok(Tensor { elem, ..self })
    }

    /// The `i`-th element in row-major order; `None` past the end or for another type.
    pub fn get<T: Element>(&self, i: usize) -> Option<T> {
        if T::ELEM != self.elem {
            return None;
        }
        self.bytes.get(i * T::SIZE..(i + 1) * T::SIZE).map(T::get)
    }

    /// The elements in row-major order, decoded as `T` (which must be the element type).
    pub fn values<T: Element>(&self) -> Result<impl ExactSizeIterator<Item = T> + '_, TensorError> {
        if T::ELEM != self.elem {
            return Err(TensorError::Type { tensor: self.elem, requested: T::ELEM });
        }
        Ok(self.bytes.chunks_exact(T::SIZE).map(T::get))
    }

    /// The elements as a `Vec<T>` (`T` must be the element type).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, TensorError> {
        Ok(self.values::<T>()?.collect())
    }

    /// Every element as f64, for comparisons: floats exactly (bf16/f16/f32 and the fp8/fp4
    /// types widen without rounding), pred as 0/1, integers as the nearest f64 (exact up to
    /// 2^53). Complex types have no conversion here.
    pub fn to_f64_vec(&self) -> Result<Vec<f64>, TensorError> {
        let b = &self.bytes;
        let v: Vec<f64> = match self.elem {
            ElemType::Pred => b.iter().map(|&x| f64::from(u8::from(x != 0))).collect(),
            ElemType::F16 => chunks::<f16>(b).map(f16::to_f64).collect(),
            ElemType::BF16 => chunks::<bf16>(b).map(bf16::to_f64).collect(),
            ElemType::F32 => chunks::<f32>(b).map(f64::from).collect(),
            ElemType::F64 => chunks::<f64>(b).collect(),
            e if crate::narrow::is_narrow_float(e) => b
                .iter()
                .map(|&x| f64::from(crate::narrow::to_f32(e, x).expect("narrow float")))
                .collect(),
            e if e.is_integer() => self.to_i128_vec()?.into_iter().map(|x| x as f64).collect(),
            e => return Err(TensorError::NoConversion { elem: e, to: "f64" }),
        };
        Ok(v)
    }

    /// Every element as an exact i128, for pred (0/1) and integer types.
    pub fn to_i128_vec(&self) -> Result<Vec<i128>, TensorError> {
        let b = &self.bytes;
        let v: Vec<i128> = match self.elem {
            ElemType::Pred => b.iter().map(|&x| i128::from(x != 0)).collect(),
            ElemType::S8 => chunks::<i8>(b).map(i128::from).collect(),
            ElemType::S16 => chunks::<i16>(b).map(i128::from).collect(),
            ElemType::S32 => chunks::<i32>(b).map(i128::from).collect(),
            ElemType::S64 => chunks::<i64>(b).map(i128::from).collect(),
            ElemType::U8 => chunks::<u8>(b).map(i128::from).collect(),
            ElemType::U16 => chunks::<u16>(b).map(i128::from).collect(),
            ElemType::U32 => chunks::<u32>(b).map(i128::from).collect(),
            ElemType::U64 => chunks::<u64>(b).map(i128::from).collect(),
            // Sub-byte integers: one byte each, the value (sign-extended for s4/s2/s1).
            ElemType::S4 | ElemType::S2 | ElemType::S1 => {
                b.iter().map(|&x| i128::from(x as i8)).collect()
            }
            ElemType::U4 | ElemType::U2 | ElemType::U1 => {
                b.iter().map(|&x| i128::from(x)).collect()
            }
            e => return Err(TensorError::NoConversion { elem: e, to: "an integer" }),
        };
        Ok(v)
    }

    /// True for element types compared exactly (pred and integers).
    pub fn is_exact(&self) -> bool {
        matches!(self.elem.class(), ElemClass::Pred | ElemClass::Signed | ElemClass::Unsigned)
    }
}

fn byte_len(elem: ElemType, dims: &[u64]) -> Result<usize, TensorError> {
    element_count(dims)?
        .checked_mul(elem_size(elem)?)
        .ok_or_else(|| TensorError::TooLarge { dims: dims.to_vec() })
}

fn chunks<T: Element>(bytes: &[u8]) -> impl Iterator<Item = T> + '_ {
    bytes.chunks_exact(T::SIZE).map(T::get)
}

/// `f32[2,3] (24 bytes)`: tensors can be large, so Debug does not list the elements.
impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({}, {} bytes)", self.shape(), self.bytes.len())
    }
}

/// The shape, e.g. `f32[2,3]`.
impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.shape())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(elem_size(ElemType::Pred), Ok(1));
        assert_eq!(elem_size(ElemType::BF16), Ok(2));
        assert_eq!(elem_size(ElemType::F16), Ok(2));
        assert_eq!(elem_size(ElemType::F32), Ok(4));
        assert_eq!(elem_size(ElemType::C128), Ok(16));
        assert_eq!(elem_size(ElemType::F8E4M3FN), Ok(1));
        // Sub-byte types are unpacked: one byte per element.
        for e in [ElemType::S4, ElemType::U2, ElemType::S1, ElemType::F4E2M1FN] {
            assert_eq!(elem_size(e), Ok(1));
            assert_eq!(Tensor::zeros(e, &[2]).unwrap().bytes().len(), 2);
        }
        // Every Element impl agrees with the element type's width.
        fn check<T: Element>() {
            assert_eq!(elem_size(T::ELEM), Ok(T::SIZE), "{}", T::ELEM);
        }
        check::<bool>();
        check::<i8>();
        check::<i16>();
        check::<i32>();
        check::<i64>();
        check::<u8>();
        check::<u16>();
        check::<u32>();
        check::<u64>();
        check::<f16>();
        check::<bf16>();
        check::<f32>();
        check::<f64>();
    }

    #[test]
    fn zeros_and_counts() {
        let t = Tensor::zeros(ElemType::F32, &[2, 3]).unwrap();
        assert_eq!(t.element_count(), 6);
        assert_eq!(t.bytes().len(), 24);
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![0.0; 6]);
        assert_eq!(t.shape().to_string(), "f32[2,3]");
        let s = Tensor::zeros(ElemType::Pred, &[]).unwrap();
        assert_eq!((s.element_count(), s.rank(), s.bytes()), (1, 0, &[0u8][..]));
        let e = Tensor::zeros(ElemType::S32, &[4, 0]).unwrap();
        assert_eq!(e.element_count(), 0);
        assert!(matches!(
            Tensor::zeros(ElemType::F64, &[u64::MAX, 2]),
            Err(TensorError::TooLarge { .. })
        ));
        assert!(matches!(
            Tensor::zeros(ElemType::F64, &[1 << 62]),
            Err(TensorError::TooLarge { .. })
        ));
    }

    #[test]
    fn little_endian_row_major() {
        let t = Tensor::from_i32(&[2, 2], &[1, -2, 0x0403_0201, 4]).unwrap();
        assert_eq!(&t.bytes()[..8], &[1, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff]);
        assert_eq!(&t.bytes()[8..12], &[1, 2, 3, 4]);
        assert_eq!(t.get::<i32>(1), Some(-2));
        assert_eq!(t.get::<i32>(4), None);
        assert_eq!(t.get::<u32>(0), None);
        assert_eq!(t.to_i128_vec().unwrap(), vec![1, -2, 0x0403_0201, 4]);
    }

    #[test]
    fn typed_round_trips() {
        let f = Tensor::from_f32(&[3], &[1.5, -0.0, f32::INFINITY]).unwrap();
        assert_eq!(f.to_vec::<f32>().unwrap()[..2], [1.5, -0.0]);
        assert_eq!(f.to_f64_vec().unwrap(), vec![1.5, 0.0, f64::INFINITY]);
        assert!(matches!(
            f.to_vec::<f64>(),
            Err(TensorError::Type { tensor: ElemType::F32, requested: ElemType::F64 })
        ));
        let p = Tensor::from_pred(&[2], &[true, false]).unwrap();
        assert_eq!(p.bytes(), &[1, 0]);
        assert_eq!(p.to_f64_vec().unwrap(), vec![1.0, 0.0]);
        let u = Tensor::from_u64(&[1], &[u64::MAX]).unwrap();
        assert_eq!(u.to_i128_vec().unwrap(), vec![i128::from(u64::MAX)]);
        assert_eq!(Tensor::scalar(7u8).to_vec::<u8>().unwrap(), vec![7]);
        assert!(matches!(
            Tensor::from_f64(&[2, 2], &[1.0; 3]),
            Err(TensorError::Length { expected: 4, got: 3, .. })
        ));
        assert!(f.to_i128_vec().is_err());
    }

    #[test]
    fn half_types_convert_exactly() {
        // bf16 0x3f81 = 1 + 2^-7; f16 0x3c01 = 1 + 2^-10; smallest subnormals too.
        let b = Tensor::from_u16(&[3], &[0x3f81, 0x0001, 0xff80])
            .unwrap()
            .bitcast(ElemType::BF16)
            .unwrap();
        assert_eq!(
            b.to_f64_vec().unwrap(),
            vec![1.0 + 2f64.powi(-7), 2f64.powi(-133), f64::NEG_INFINITY]
        );
        let h = Tensor::from_f16(&[2], &[f16::from_bits(0x3c01), f16::from_bits(0x0001)]).unwrap();
        assert_eq!(h.to_f64_vec().unwrap(), vec![1.0 + 2f64.powi(-10), 2f64.powi(-24)]);
        let back = b.clone().bitcast(ElemType::U16).unwrap();
        assert_eq!(back.to_vec::<u16>().unwrap(), vec![0x3f81, 0x0001, 0xff80]);
        assert!(b.bitcast(ElemType::F32).is_err());
        let c = Tensor::zeros(ElemType::C64, &[1]).unwrap();
        assert!(matches!(c.to_f64_vec(), Err(TensorError::NoConversion { .. })));
    }

    #[test]
    fn from_bytes_checks_length() {
        assert!(Tensor::from_bytes(ElemType::BF16, vec![2], vec![0; 4]).is_ok());
        assert_eq!(
            Tensor::from_bytes(ElemType::BF16, vec![2], vec![0; 3]),
            Err(TensorError::Length { what: "bytes", expected: 4, got: 3 })
        );
    }
}
