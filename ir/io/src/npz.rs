//! `.npz` tensor I/O: program inputs `p0..pN` (entry-parameter order) and outputs `o0..oM`
//! (root tuple flattened), as the corpus stores them.
//!
//! The archive is read and written with the `zip` crate and every member with `npyz`;
//! nothing here parses the formats by hand except [`check_npy_preamble`], a bounds check on
//! the header length and shape that keeps a corrupt member from reaching an allocation or
//! an overflowing multiplication inside `npyz`.
//!
//! Conventions (`shared/xla-oracle/README.md`, "npz / JSON conventions"):
//! - npz has no bf16: bf16 arrays are stored as `uint16` bit patterns. A `u16` array is
//!   accepted for a `bf16` parameter and reinterpreted; bf16 tensors are written as `u16`.
//! - Likewise the float8 types (`f8e4m3fn`, `f8e5m2`, ...) travel as `uint8` bit patterns:
//!   a `u1`/`i1` array, or the one-byte raw (`V1`) array numpy writes for ml_dtypes'
//!   float8, binds a float8 parameter; float8 tensors are written as `uint8`.
//! - `complex64`/`complex128` are numpy's own (`<c8`/`<c16`), read and written as stored
//!   (little-endian `(re, im)` pairs).
//! - Sub-byte types travel one element per byte, as numbers numpy has: `s4`/`s2`/`s1` as
//!   `int8` values, `u4`/`u2`/`u1` as `uint8` values, `f4e2m1fn` as `uint8` bit patterns
//!   (low four bits), read and written. A value outside the type's range (or an f4 pattern
//!   above 15) is refused, naming the array. (ml_dtypes' own `int4`/`float4_e2m1fn` arrays
//!   do not survive `np.savez`: numpy writes them as raw `V1` bytes.) `tools/oracle_interp.py`
//!   converts to and from ml_dtypes on the XLA side with these rules.
//! - Arrays are little-endian, C order. Fortran-order members are refused (the corpus has
//!   none); big-endian members are converted by `npyz`.
//!
//! Every failure is an [`NpzError`] that names the file; corrupt or truncated files give an
//! error, never a panic. Writes go to a temporary file in the destination directory that
//! is renamed over the destination, so a failure never leaves a half-written file.

use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use half::f16;
use hlo_ir::tensor::Element;
use hlo_ir::{ElemType, Shape, Tensor};
use npyz::{NpyFile, TypeChar, WriterBuilder};

/// An `.npz` read or write that failed; `Display` starts with the file's path.
#[derive(Debug)]
pub struct NpzError {
    pub path: PathBuf,
    pub kind: NpzErrorKind,
}

#[derive(Debug)]
pub enum NpzErrorKind {
    /// Opening, reading, writing or renaming failed.
    Io(io::Error),
    /// Not a zip archive, a damaged or truncated one, or a member that is not valid `.npy`.
    Corrupt(String),
    /// A member this tool cannot represent (complex, strings, Fortran order, ...).
    Unsupported { array: String, reason: String },
    /// The arrays do not match the expected shapes (every problem found, in parameter order).
    Invalid(Vec<ArrayProblem>),
    /// A tensor that cannot be written as npz (sub-byte types).
    Unwritable { array: String, elem: ElemType },
}

/// One way an archive's arrays differ from what the program expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArrayProblem {
    Missing {
        name: String,
        expected: Shape,
    },
    Unexpected {
        name: String,
    },
    /// Wrong element type or dims; `got` is the array's type as stored, e.g. `f32[64,32]`.
    Mismatch {
        name: String,
        expected: Shape,
        got: Shape,
    },
    /// A sub-byte type's storage array holds a value the type does not have.
    OutOfRange {
        name: String,
        elem: ElemType,
        value: i128,
        lo: i128,
        hi: i128,
    },
    /// The declared shape is not a static array (dynamic dims, tuple, token): no input can bind it.
    NotStatic {
        name: String,
        declared: Shape,
    },
}

impl fmt::Display for ArrayProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArrayProblem::Missing { name, expected } => {
                write!(f, "missing {name} (expected {expected})")
            }
            ArrayProblem::Unexpected { name } => write!(f, "unexpected array {name}"),
            ArrayProblem::Mismatch { name, expected, got } => {
                write!(f, "{name}: expected {expected}, got {got}")?;
                let (Some(e), Some(g)) = (expected.as_array(), got.as_array()) else {
                    return Ok(());
                };
                if e.elem != g.elem {
                    f.write_str(" (element type differs")?;
                    if e.elem == ElemType::BF16 {
                        f.write_str("; bf16 is stored as uint16 bit patterns")?;
                    }
                    if let Some(s) = sub_byte_storage(e.elem) {
                        write!(
                            f,
                            "; {} is stored as {} one element per byte",
                            e.elem,
                            if s == ElemType::S8 { "int8" } else { "uint8" }
                        )?;
                    }
                    f.write_str(")")?;
                }
                Ok(())
            }
            ArrayProblem::OutOfRange { name, elem, value, lo, hi } => {
                write!(
                    f,
                    "{name}: value {value} does not fit {elem} (its storage array must hold {lo}..={hi})"
                )
            }
            ArrayProblem::NotStatic { name, declared } => {
                write!(
                    f,
                    "{name}: the declared shape {declared} is not a static array; no input can bind it"
                )
            }
        }
    }
}

impl fmt::Display for NpzError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.path.display())?;
        match &self.kind {
            NpzErrorKind::Io(e) => write!(f, "{e}"),
            NpzErrorKind::Corrupt(msg) => write!(f, "corrupt npz: {msg}"),
            NpzErrorKind::Unsupported { array, reason } => write!(f, "array {array}: {reason}"),
            NpzErrorKind::Invalid(problems) => {
                // One line per problem; surplus arrays are listed together on one line.
                let unexpected: Vec<&str> = problems
                    .iter()
                    .filter_map(|p| match p {
                        ArrayProblem::Unexpected { name } => Some(name.as_str()),
                        _ => None,
                    })
                    .collect();
                let n = problems.len() - unexpected.len() + usize::from(!unexpected.is_empty());
                write!(
                    f,
                    "the arrays do not match what the program expects ({n} problem{}):",
                    if n == 1 { "" } else { "s" }
                )?;
                for p in problems.iter().filter(|p| !matches!(p, ArrayProblem::Unexpected { .. })) {
                    write!(f, "\n  {p}")?;
                }
                match unexpected.as_slice() {
                    [] => {}
                    [one] => write!(f, "\n  unexpected array {one}")?,
                    many => write!(f, "\n  {} unexpected arrays: {}", many.len(), many.join(", "))?,
                }
                Ok(())
            }
            NpzErrorKind::Unwritable { array, elem } => {
                write!(f, "array {array}: {elem} tensors cannot be stored in npz")
            }
        }
    }
}

impl std::error::Error for NpzError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            NpzErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}

fn err(path: &Path, kind: NpzErrorKind) -> NpzError {
    NpzError { path: path.to_path_buf(), kind }
}

/// Every `.npy` member of the archive as `(name, tensor)`, in archive order. Members that
/// are not `.npy` are ignored (numpy does not list them as arrays either). A `uint16` array
/// stays `u16`: only the expected shapes say whether it holds bf16 bits.
pub fn read_npz(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>, NpzError> {
    let path = path.as_ref();
    let file = fs::File::open(path).map_err(|e| err(path, NpzErrorKind::Io(e)))?;
    let corrupt = |msg: String| err(path, NpzErrorKind::Corrupt(msg));
    let mut zip =
        zip::ZipArchive::new(io::BufReader::new(file)).map_err(|e| corrupt(e.to_string()))?;
    let mut arrays: Vec<(String, Tensor)> = Vec::new();
    for i in 0..zip.len() {
        let mut member = zip.by_index(i).map_err(|e| corrupt(e.to_string()))?;
        let member_name = member.name().map_err(|e| corrupt(e.to_string()))?.into_owned();
        let Some(name) = npyz::npz::array_name_from_file_name(&member_name) else { continue };
        let name = name.to_string();
        if arrays.iter().any(|(n, _)| *n == name) {
            return Err(corrupt(format!("array {name} appears twice")));
        }
        // Read the whole member first: the zip reader stops at the recorded size and checks
        // the CRC, so a damaged member is an error here rather than odd values later.
        let mut buf = Vec::new();
        member.read_to_end(&mut buf).map_err(|e| corrupt(format!("array {name}: {e}")))?;
        let tensor = decode_npy(&buf).map_err(|e| match e {
            Decode::Corrupt(msg) => corrupt(format!("array {name}: {msg}")),
            Decode::Unsupported(reason) => {
                err(path, NpzErrorKind::Unsupported { array: name.clone(), reason })
            }
        })?;
        arrays.push((name, tensor));
    }
    Ok(arrays)
}

/// The program inputs `p0..pN`, checked against the entry parameter shapes before anything
/// runs: count, element type and dims, every problem reported (each naming its parameter).
/// A `u16` array binds a `bf16` parameter (bit patterns).
pub fn read_inputs(path: impl AsRef<Path>, params: &[Shape]) -> Result<Vec<Tensor>, NpzError> {
    read_expected(path.as_ref(), "p", params)
}

/// The outputs `o0..oM` of a program whose root tuple flattens to `outputs` (a non-tuple
/// root is one output), with the same checks and bf16 rule as [`read_inputs`].
pub fn read_outputs(path: impl AsRef<Path>, outputs: &[Shape]) -> Result<Vec<Tensor>, NpzError> {
    read_expected(path.as_ref(), "o", outputs)
}

/// Named arrays (e.g. `p0..pN` built in memory by an embedding, as the Python package
/// does) bound to the entry parameters with the checks and messages of [`read_inputs`];
/// `path` names where they came from in the error.
pub fn bind_inputs(
    path: impl AsRef<Path>,
    arrays: Vec<(String, Tensor)>,
    params: &[Shape],
) -> Result<Vec<Tensor>, NpzError> {
    bind(path.as_ref(), arrays, "p", params)
}

fn read_expected(path: &Path, prefix: &str, shapes: &[Shape]) -> Result<Vec<Tensor>, NpzError> {
    bind(path, read_npz(path)?, prefix, shapes)
}

fn bind(
    path: &Path,
    arrays: Vec<(String, Tensor)>,
    prefix: &str,
    shapes: &[Shape],
) -> Result<Vec<Tensor>, NpzError> {
    let mut arrays: Vec<Option<(String, Tensor)>> = arrays.into_iter().map(Some).collect();
    let mut problems = Vec::new();
    let mut out = Vec::with_capacity(shapes.len());
    for (i, declared) in shapes.iter().enumerate() {
        let name = format!("{prefix}{i}");
        let found = arrays
            .iter_mut()
            .find(|a| a.as_ref().is_some_and(|(n, _)| *n == name))
            .and_then(Option::take);
        let Some((elem, dims)) = declared.as_array().and_then(|a| Some((a.elem, a.static_dims()?)))
        else {
            let mut declared = declared.clone();
            if let Shape::Array(a) = &mut declared {
                a.layout = None;
            }
            problems.push(ArrayProblem::NotStatic { name, declared });
            continue;
        };
        // Messages show shapes without layouts: an npz array has none.
        let expected = Shape::array(elem, &dims);
        let Some((_, tensor)) = found else {
            problems.push(ArrayProblem::Missing { name, expected });
            continue;
        };
        let elem_ok = tensor.elem() == elem
            || (elem == ElemType::BF16 && tensor.elem() == ElemType::U16)
            || (is_float8(elem) && matches!(tensor.elem(), ElemType::U8 | ElemType::S8))
            || (sub_byte_storage(elem) == Some(tensor.elem()));
        if !elem_ok || tensor.dims() != dims.as_slice() {
            problems.push(ArrayProblem::Mismatch { name, expected, got: tensor.shape() });
            continue;
        }
        if sub_byte_storage(elem).is_some() {
            let (lo, hi) = sub_byte_range(elem);
            let bad =
                tensor.to_i128_vec().ok().and_then(|v| v.into_iter().find(|&x| x < lo || x > hi));
            if let Some(value) = bad {
                problems.push(ArrayProblem::OutOfRange { name, elem, value, lo, hi });
                continue;
            }
        }
        out.push(tensor.bitcast(elem).expect("u16 and bf16, u8 and float8 have the same width"));
    }
    problems
        .extend(arrays.into_iter().flatten().map(|(name, _)| ArrayProblem::Unexpected { name }));
    if problems.is_empty() { Ok(out) } else { Err(err(path, NpzErrorKind::Invalid(problems))) }
}

/// Writes `outputs` as `o0..oM` (bf16 as uint16 bit patterns); see [`write_arrays`].
pub fn write_npz(path: impl AsRef<Path>, outputs: &[Tensor]) -> Result<(), NpzError> {
    let names: Vec<String> = (0..outputs.len()).map(|i| format!("o{i}")).collect();
    let arrays: Vec<(&str, &Tensor)> = names.iter().map(String::as_str).zip(outputs).collect();
    write_arrays(path, &arrays)
}

/// Writes named arrays as an uncompressed `.npz` (what `np.savez` writes), bf16 as uint16
/// bit patterns. The archive is built in a temporary file beside `path` and renamed over
/// it, so `path` is either untouched or complete. Names must be distinct.
pub fn write_arrays(path: impl AsRef<Path>, arrays: &[(&str, &Tensor)]) -> Result<(), NpzError> {
    let path = path.as_ref();
    for (i, (name, t)) in arrays.iter().enumerate() {
        if npy_writer_kind(t.elem()).is_none() {
            return Err(err(
                path,
                NpzErrorKind::Unwritable { array: name.to_string(), elem: t.elem() },
            ));
        }
        if arrays[..i].iter().any(|(n, _)| n == name) {
            return Err(err(
                path,
                NpzErrorKind::Io(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("array {name} given twice"),
                )),
            ));
        }
    }
    hlo_ir::atomic::write_with(path, |f| {
        let mut w = io::BufWriter::new(f);
        write_zip(&mut w, arrays)?;
        w.flush()
    })
    .map_err(|e| err(path, NpzErrorKind::Io(e)))
}

fn write_zip<W: Write + io::Seek>(w: &mut W, arrays: &[(&str, &Tensor)]) -> io::Result<()> {
    let mut zip = zip::ZipWriter::new(w);
    for (name, t) in arrays {
        let npy_len = t.bytes().len() as u64 + 4096;
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .large_file(npy_len >= u64::from(u32::MAX));
        zip.start_file(npyz::npz::file_name_from_array_name(name), options)
            .map_err(io::Error::other)?;
        write_npy(&mut zip, t)?;
    }
    zip.finish().map_err(io::Error::other)?;
    Ok(())
}

/// The npy element type a tensor is written as.
#[derive(Clone, Copy)]
enum NpyKind {
    /// The tensor's own type.
    Native,
    /// bf16 as uint16 bits.
    Bits16,
    /// A float8 type or f4e2m1fn as uint8 bits; u4/u2/u1 as uint8 values.
    Bits8,
    /// s4/s2/s1 as int8 values.
    Int8,
}

/// The numpy dtype (as our element type) that carries a sub-byte type.
fn sub_byte_storage(elem: ElemType) -> Option<ElemType> {
    use ElemType::*;
    match elem {
        S4 | S2 | S1 => Some(S8),
        U4 | U2 | U1 | F4E2M1FN => Some(U8),
        _ => None,
    }
}

/// The values (f4e2m1fn: bit patterns) a sub-byte type's storage array may hold.
fn sub_byte_range(elem: ElemType) -> (i128, i128) {
    let bits = elem.bits();
    match elem.class() {
        hlo_ir::types::ElemClass::Signed => (-(1 << (bits - 1)), (1 << (bits - 1)) - 1),
        _ => (0, (1 << bits) - 1),
    }
}

/// The 8-bit float types (`f8e4m3fn`, `f8e5m2`, ...): no numpy dtype, stored as bits.
fn is_float8(elem: ElemType) -> bool {
    elem.bits() == 8 && elem.is_float()
}

fn npy_writer_kind(elem: ElemType) -> Option<NpyKind> {
    use ElemType::*;
    match elem {
        Pred | S8 | S16 | S32 | S64 | U8 | U16 | U32 | U64 | F16 | F32 | F64 | C64 | C128 => {
            Some(NpyKind::Native)
        }
        BF16 => Some(NpyKind::Bits16),
        e if is_float8(e) => Some(NpyKind::Bits8),
        F4E2M1FN | U4 | U2 | U1 => Some(NpyKind::Bits8),
        S4 | S2 | S1 => Some(NpyKind::Int8),
        _ => None,
    }
}

fn write_npy(w: &mut impl Write, t: &Tensor) -> io::Result<()> {
    fn typed<T: npyz::AutoSerialize>(
        w: &mut impl Write,
        dims: &[u64],
        values: impl Iterator<Item = T>,
    ) -> io::Result<()> {
        let mut writer =
            npyz::WriteOptions::new().default_dtype().shape(dims).writer(w).begin_nd()?;
        writer.extend(values)?;
        writer.finish()
    }
    let d = t.dims();
    let unexpected = || io::Error::other(format!("{} tensors cannot be stored in npz", t.elem()));
    match (npy_writer_kind(t.elem()).ok_or_else(unexpected)?, t.elem()) {
        (NpyKind::Bits16, _) => {
            typed::<u16>(w, d, t.bytes().chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])))
        }
        (NpyKind::Bits8, _) => typed::<u8>(w, d, t.bytes().iter().copied()),
        (NpyKind::Int8, _) => typed::<i8>(w, d, t.bytes().iter().map(|&b| b as i8)),
        (NpyKind::Native, ElemType::Pred) => {
            typed::<bool>(w, d, t.values().map_err(io::Error::other)?)
        }
        (NpyKind::Native, ElemType::S8) => typed::<i8>(w, d, t.values().map_err(io::Error::other)?),
        (NpyKind::Native, ElemType::S16) => {
            typed::<i16>(w, d, t.values().map_err(io::Error::other)?)
        }
        (NpyKind::Native, ElemType::S32) => {
            typed::<i32>(w, d, t.values().map_err(io::Error::other)?)
        }
        (NpyKind::Native, ElemType::S64) => {
            typed::<i64>(w, d, t.values().map_err(io::Error::other)?)
        }
        (NpyKind::Native, ElemType::U8) => typed::<u8>(w, d, t.values().map_err(io::Error::other)?),
        (NpyKind::Native, ElemType::U16) => {
            typed::<u16>(w, d, t.values().map_err(io::Error::other)?)
        }
        (NpyKind::Native, ElemType::U32) => {
            typed::<u32>(w, d, t.values().map_err(io::Error::other)?)
        }
        (NpyKind::Native, ElemType::U64) => {
            typed::<u64>(w, d, t.values().map_err(io::Error::other)?)
        }
        (NpyKind::Native, ElemType::F16) => {
            typed::<f16>(w, d, t.values().map_err(io::Error::other)?)
        }
        (NpyKind::Native, ElemType::F32) => {
            typed::<f32>(w, d, t.values().map_err(io::Error::other)?)
        }
        (NpyKind::Native, ElemType::F64) => {
            typed::<f64>(w, d, t.values().map_err(io::Error::other)?)
        }
        // complex64/complex128 (`<c8`/`<c16`): (re, im) little-endian pairs, as numpy stores them.
        (NpyKind::Native, ElemType::C64) => typed::<num_complex::Complex32>(
            w,
            d,
            t.bytes().chunks_exact(8).map(|b| {
                num_complex::Complex32::new(
                    f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                    f32::from_le_bytes([b[4], b[5], b[6], b[7]]),
                )
            }),
        ),
        (NpyKind::Native, ElemType::C128) => typed::<num_complex::Complex64>(
            w,
            d,
            t.bytes().chunks_exact(16).map(|b| {
                let part = |o: usize| f64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
                num_complex::Complex64::new(part(0), part(8))
            }),
        ),
        (NpyKind::Native, _) => Err(unexpected()),
    }
}

enum Decode {
    Corrupt(String),
    Unsupported(String),
}

/// One `.npy` member (already in memory) as a tensor.
fn decode_npy(buf: &[u8]) -> Result<Tensor, Decode> {
    check_npy_preamble(buf).map_err(Decode::Corrupt)?;
    let npy = NpyFile::new(buf).map_err(|e| Decode::Corrupt(e.to_string()))?;
    let npyz::DType::Plain(ty) = npy.dtype() else {
        return Err(Decode::Unsupported(format!(
            "structured dtype {} is not supported",
            npy.dtype().descr()
        )));
    };
    if npy.order() == npyz::Order::Fortran {
        return Err(Decode::Unsupported(
            "Fortran-order arrays are not supported; save it in C order".into(),
        ));
    }
    let elem = match (ty.type_char(), ty.size_field()) {
        (TypeChar::Bool, 1) => ElemType::Pred,
        (TypeChar::Int, 1) => ElemType::S8,
        (TypeChar::Int, 2) => ElemType::S16,
        (TypeChar::Int, 4) => ElemType::S32,
        (TypeChar::Int, 8) => ElemType::S64,
        (TypeChar::Uint, 1) => ElemType::U8,
        (TypeChar::Uint, 2) => ElemType::U16,
        (TypeChar::Uint, 4) => ElemType::U32,
        (TypeChar::Uint, 8) => ElemType::U64,
        (TypeChar::Float, 2) => ElemType::F16,
        (TypeChar::Float, 4) => ElemType::F32,
        (TypeChar::Float, 8) => ElemType::F64,
        (TypeChar::Complex, 8) => ElemType::C64,
        (TypeChar::Complex, 16) => ElemType::C128,
        // One raw byte per element: how numpy stores ml_dtypes' float8 types (read as
        // their bit patterns; the declared shape says which float8 they are).
        (TypeChar::RawData, 1) => ElemType::U8,
        _ => return Err(Decode::Unsupported(format!("dtype {ty} is not supported"))),
    };
    if ty.endianness() == npyz::Endianness::Big && matches!(elem, ElemType::C64 | ElemType::C128) {
        return Err(Decode::Unsupported(format!(
            "big-endian {ty} is not supported; save it little-endian"
        )));
    }
    let dims = npy.shape().to_vec();
    // The data must be exactly what the header promises: a short member is truncated, a
    // long one is not an array numpy would have written.
    let count = hlo_ir::tensor::element_count(&dims).map_err(|e| Decode::Corrupt(e.to_string()))?;
    let data_len = buf.len() - header_len(buf);
    let expected = count
        .checked_mul(elem.bits() as usize / 8)
        .ok_or_else(|| Decode::Corrupt(format!("shape {dims:?} is too large")))?;
    if data_len != expected {
        return Err(Decode::Corrupt(format!(
            "{ty} {dims:?} needs {expected} data bytes, the member has {data_len}"
        )));
    }
    fn typed<T: Element + npyz::Deserialize>(
        npy: NpyFile<&[u8]>,
        dims: &[u64],
    ) -> Result<Tensor, Decode> {
        let values = npy.into_vec::<T>().map_err(|e| Decode::Corrupt(e.to_string()))?;
        Tensor::from_slice(dims, &values).map_err(|e| Decode::Corrupt(e.to_string()))
    }
    if matches!(elem, ElemType::C64 | ElemType::C128) || ty.type_char() == TypeChar::RawData {
        // Complex (real, imaginary pairs) and raw bytes are taken as stored.
        return Tensor::from_bytes(elem, dims, buf[header_len(buf)..].to_vec())
            .map_err(|e| Decode::Corrupt(e.to_string()));
    }
    match elem {
        ElemType::Pred => typed::<bool>(npy, &dims),
        ElemType::S8 => typed::<i8>(npy, &dims),
        ElemType::S16 => typed::<i16>(npy, &dims),
        ElemType::S32 => typed::<i32>(npy, &dims),
        ElemType::S64 => typed::<i64>(npy, &dims),
        ElemType::U8 => typed::<u8>(npy, &dims),
        ElemType::U16 => typed::<u16>(npy, &dims),
        ElemType::U32 => typed::<u32>(npy, &dims),
        ElemType::U64 => typed::<u64>(npy, &dims),
        ElemType::F16 => typed::<f16>(npy, &dims),
        ElemType::F32 => typed::<f32>(npy, &dims),
        ElemType::F64 => typed::<f64>(npy, &dims),
        _ => unreachable!("elem comes from the table above"),
    }
}

/// Bytes before the data: magic, version, header length field, header text. Only valid
/// after [`check_npy_preamble`] accepted `buf`.
fn header_len(buf: &[u8]) -> usize {
    if buf[6] == 1 {
        10 + usize::from(u16::from_le_bytes([buf[8], buf[9]]))
    } else {
        12 + u32::from_le_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize
    }
}

/// Guards `npyz` against corrupt members: the header must lie inside the member (npyz
/// allocates the declared header length up front) and the product of the nonzero dims must
/// fit in u64 (npyz multiplies the dims, and their prefixes for strides, unchecked, which
/// panics in debug builds). The header text is parsed by `py_literal`, the parser `npyz`
/// uses; every `shape` entry is checked, since a dict literal may repeat a key.
fn check_npy_preamble(buf: &[u8]) -> Result<(), String> {
    if buf.len() < 10 || &buf[..6] != b"\x93NUMPY" {
        return Err("not an .npy array (no NUMPY magic)".into());
    }
    let (text_start, len): (usize, usize) = match buf[6] {
        1 => (10, usize::from(u16::from_le_bytes([buf[8], buf[9]]))),
        2 | 3 if buf.len() >= 12 => {
            (12, u32::from_le_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize)
        }
        2 | 3 => return Err("truncated .npy header".into()),
        v => return Err(format!(".npy format version {v} is not supported")),
    };
    let Some(text) = buf.get(text_start..text_start.saturating_add(len)) else {
        return Err(format!(
            "truncated .npy header: {len} header bytes declared, {} present",
            buf.len() - text_start
        ));
    };
    let text = std::str::from_utf8(text).map_err(|_| ".npy header is not UTF-8".to_string())?;
    let header: py_literal::Value =
        text.trim_end().parse().map_err(|e| format!("bad .npy header: {e}"))?;
    let py_literal::Value::Dict(entries) = header else {
        return Err(".npy header is not a dict".into());
    };
    let mut shapes = entries
        .iter()
        .filter(|(k, _)| k.as_string().map(String::as_str) == Some("shape"))
        .map(|(_, v)| v)
        .peekable();
    if shapes.peek().is_none() {
        return Err(".npy header has no shape".into());
    }
    for shape in shapes {
        let (py_literal::Value::Tuple(dims) | py_literal::Value::List(dims)) = shape else {
            return Err(".npy shape is not a tuple".into());
        };
        let mut product: u64 = 1;
        for d in dims {
            let py_literal::Value::Integer(n) = d else {
                return Err(".npy shape holds a non-integer".into());
            };
            let n = u64::try_from(n)
                .map_err(|_| format!(".npy shape dimension {n} is out of range"))?;
            if n != 0 {
                product =
                    product.checked_mul(n).ok_or_else(|| ".npy shape is too large".to_string())?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    /// A fresh directory under the system temp dir, removed when dropped.
    struct TempDir(PathBuf);
    impl std::ops::Deref for TempDir {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn temp_dir(test: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("hlo-npz-{}-{test}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// A `.npy` member with a hand-made header (for corrupt cases only).
    fn npy(header: &str, data: &[u8]) -> Vec<u8> {
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(&(header.len() as u16).to_le_bytes());
        b.extend_from_slice(header.as_bytes());
        b.extend_from_slice(data);
        b
    }

    fn zip_of(path: &Path, members: &[(&str, Vec<u8>)]) {
        let mut zip = zip::ZipWriter::new(fs::File::create(path).unwrap());
        for (name, bytes) in members {
            zip.start_file(*name, zip::write::SimpleFileOptions::default()).unwrap();
            zip.write_all(bytes).unwrap();
        }
        zip.finish().unwrap();
    }

    #[test]
    fn float8_travels_as_bits_and_complex_as_numpy_stores_it() {
        let dir = temp_dir("float8_complex");
        // float8 written as uint8 bits, read back against its declared type.
        let f8 = Tensor::from_bytes(ElemType::F8E4M3FN, vec![3], vec![0x38, 0xb8, 0x7f]).unwrap();
        let path = dir.join("f8.npz");
        write_npz(&path, std::slice::from_ref(&f8)).unwrap();
        assert_eq!(read_npz(&path).unwrap()[0].1.elem(), ElemType::U8);
        assert_eq!(read_outputs(&path, &[f8.shape()]).unwrap(), vec![f8.clone()]);
        // What numpy writes for an ml_dtypes float8 array: one raw byte per element.
        let raw = dir.join("raw.npz");
        zip_of(
            &raw,
            &[(
                "p0.npy",
                npy(
                    "{'descr': '|V1', 'fortran_order': False, 'shape': (3,), }\n",
                    &[0x38, 0xb8, 0x7f],
                ),
            )],
        );
        assert_eq!(read_inputs(&raw, &[f8.shape()]).unwrap(), vec![f8]);
        // complex64: (re, im) f32 pairs.
        let c = dir.join("c.npz");
        let data: Vec<u8> = [1.0f32, -2.0, 0.5, 4.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        zip_of(
            &c,
            &[(
                "p0.npy",
                npy("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }\n", &data),
            )],
        );
        let t = read_inputs(&c, &[Shape::array(ElemType::C64, &[2])]).unwrap();
        assert_eq!(t[0].bytes(), data.as_slice());
        // Written back as numpy's complex64/complex128, byte for byte.
        let c128 = Tensor::from_bytes(
            ElemType::C128,
            vec![2],
            [1.0f64, -2.0, 0.5, 4.0].iter().flat_map(|x| x.to_le_bytes()).collect(),
        )
        .unwrap();
        let out = dir.join("out.npz");
        write_npz(&out, &[t[0].clone(), c128.clone()]).unwrap();
        let back = read_npz(&out).unwrap();
        assert_eq!((back[0].1.clone(), back[1].1.clone()), (t[0].clone(), c128));
        let mut member = Vec::new();
        zip::ZipArchive::new(fs::File::open(&out).unwrap())
            .unwrap()
            .by_name("o0.npy")
            .unwrap()
            .read_to_end(&mut member)
            .unwrap();
        assert!(String::from_utf8_lossy(&member[..128]).contains("'descr': '<c8'"));
        // A raw-byte array never binds an s4 parameter (s4 travels as int8 values).
        let err = read_inputs(&raw, &[Shape::array(ElemType::S4, &[3])]).unwrap_err().to_string();
        assert!(err.contains("p0"), "{err}");
    }

    #[test]
    fn sub_byte_types_travel_as_int8_uint8() {
        let dir = temp_dir("sub_byte");
        // s4/s2/s1 as int8 values, u4/u2/u1 as uint8 values, f4e2m1fn as uint8 bits; every
        // fp8 type as uint8 bits.
        let cases: Vec<(ElemType, Vec<u8>, &str)> = vec![
            (ElemType::S4, [-8i8, -1, 0, 7].iter().map(|&x| x as u8).collect(), "'|i1'"),
            (ElemType::S2, [-2i8, -1, 0, 1].iter().map(|&x| x as u8).collect(), "'|i1'"),
            (ElemType::S1, [-1i8, 0, -1, 0].iter().map(|&x| x as u8).collect(), "'|i1'"),
            (ElemType::U4, vec![0, 1, 9, 15], "'|u1'"),
            (ElemType::U2, vec![0, 1, 2, 3], "'|u1'"),
            (ElemType::U1, vec![0, 1, 1, 0], "'|u1'"),
            (ElemType::F4E2M1FN, vec![0x0, 0x7, 0x8, 0xf], "'|u1'"),
        ];
        let mut all = cases.clone();
        for e in hlo_ir::narrow::TYPES.into_iter().filter(|&e| e != ElemType::F4E2M1FN) {
            all.push((e, vec![0x00, 0x38, 0x7f, 0xff], "'|u1'"));
        }
        for (e, bytes, descr) in all {
            let t = Tensor::from_bytes(e, vec![4], bytes).unwrap();
            let path = dir.join(format!("{e}.npz"));
            write_npz(&path, std::slice::from_ref(&t)).unwrap();
            let mut member = Vec::new();
            zip::ZipArchive::new(fs::File::open(&path).unwrap())
                .unwrap()
                .by_name("o0.npy")
                .unwrap()
                .read_to_end(&mut member)
                .unwrap();
            assert!(
                String::from_utf8_lossy(&member[..64]).contains(descr),
                "{e}: {}",
                String::from_utf8_lossy(&member[..64])
            );
            assert_eq!(read_outputs(&path, &[t.shape()]).unwrap(), vec![t.clone()], "{e}");
        }
        // The values as numbers: s4 -8..7 reads back through to_i128_vec.
        let s4 = Tensor::from_bytes(ElemType::S4, vec![2], vec![0xf8, 0x07]).unwrap();
        assert_eq!(s4.to_i128_vec().unwrap(), vec![-8, 7]);
        assert_eq!(
            Tensor::from_bytes(ElemType::F4E2M1FN, vec![2], vec![0x3, 0xf])
                .unwrap()
                .to_f64_vec()
                .unwrap(),
            vec![1.5, -6.0]
        );
        // Out-of-range values and the wrong storage dtype are refused, naming the array.
        let bad = dir.join("bad.npz");
        write_arrays(
            &bad,
            &[
                ("p0", &Tensor::from_i8(&[2], &[3, 8]).unwrap()),
                ("p1", &Tensor::from_u8(&[1], &[16]).unwrap()),
            ],
        )
        .unwrap();
        let err = read_inputs(
            &bad,
            &[Shape::array(ElemType::S4, &[2]), Shape::array(ElemType::F4E2M1FN, &[1])],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("p0: value 8 does not fit s4")
                && err.contains("p1: value 16 does not fit f4e2m1fn"),
            "{err}"
        );
        let err = read_inputs(
            &bad,
            &[Shape::array(ElemType::U4, &[2]), Shape::array(ElemType::U4, &[1])],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("u4 is stored as uint8"), "{err}");
    }

    #[test]
    fn round_trip_every_writable_type() {
        let dir = temp_dir("round_trip");
        let bf = Tensor::from_bf16(&[2], &[bf16::from_f32(1.5), bf16::from_bits(0xffc1)]).unwrap();
        let tensors = vec![
            Tensor::from_f32(&[2, 3], &[1.0, -2.5, 3.25, f32::NAN, f32::INFINITY, -0.0]).unwrap(),
            Tensor::scalar(7i32),
            Tensor::from_pred(&[3], &[true, false, true]).unwrap(),
            Tensor::from_u32(&[1], &[u32::MAX]).unwrap(),
            Tensor::from_i8(&[2], &[-128, 127]).unwrap(),
            Tensor::from_i64(&[1, 1], &[i64::MIN]).unwrap(),
            Tensor::from_u8(&[0, 5], &[]).unwrap(),
            Tensor::from_u64(&[1], &[u64::MAX]).unwrap(),
            Tensor::from_f16(&[1], &[f16::from_f32(0.1)]).unwrap(),
            Tensor::from_f64(&[1], &[std::f64::consts::PI]).unwrap(),
            Tensor::from_i16(&[1], &[-3]).unwrap(),
            bf.clone(),
        ];
        let path = dir.join("out.npz");
        write_npz(&path, &tensors).unwrap();
        let raw = read_npz(&path).unwrap();
        let names: Vec<&str> = raw.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["o0", "o1", "o2", "o3", "o4", "o5", "o6", "o7", "o8", "o9", "o10", "o11"]
        );
        // bf16 comes back as its u16 bits until a shape says otherwise.
        assert_eq!(raw[11].1.elem(), ElemType::U16);
        assert_eq!(raw[11].1.bytes(), bf.bytes());
        let shapes: Vec<Shape> = tensors.iter().map(Tensor::shape).collect();
        let back = read_outputs(&path, &shapes).unwrap();
        assert_eq!(back, tensors);
        // Writing what was read gives the same file, byte for byte.
        let again = dir.join("again.npz");
        write_npz(&again, &back).unwrap();
        assert_eq!(fs::read(&path).unwrap(), fs::read(&again).unwrap());
        // No temporary files are left behind.
        let mut left: Vec<String> = fs::read_dir(&*dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["again.npz", "out.npz"]);
    }

    #[test]
    fn validation_names_every_problem() {
        let dir = temp_dir("validation");
        let path = dir.join("in.npz");
        let a = Tensor::from_f32(&[2, 3], &[0.0; 6]).unwrap();
        let b = Tensor::from_i32(&[4], &[0; 4]).unwrap();
        write_arrays(&path, &[("p0", &a), ("p1", &b), ("p7", &b)]).unwrap();
        let params = [
            Shape::array(ElemType::F32, &[3, 2]),
            Shape::array(ElemType::F32, &[4]),
            Shape::array(ElemType::BF16, &[2]),
        ];
        let e = read_inputs(&path, &params).unwrap_err();
        let NpzErrorKind::Invalid(problems) = &e.kind else { panic!("{e}") };
        assert_eq!(problems.len(), 4);
        assert_eq!(
            e.to_string(),
            format!(
                "{}: the arrays do not match what the program expects (4 problems):\n  p0: expected f32[3,2], got f32[2,3]\n  \
                 p1: expected f32[4], got s32[4] (element type differs)\n  missing p2 (expected bf16[2])\n  unexpected array p7",
                path.display()
            )
        );
        let dynamic = [Shape::Array(hlo_ir::ArrayShape {
            elem: ElemType::F32,
            dims: vec![hlo_ir::Dim::Unbounded, hlo_ir::Dim::Static(3)],
            layout: None,
        })];
        let e = read_inputs(&path, &dynamic).unwrap_err();
        assert!(
            e.to_string().contains("p0: the declared shape f32[?,3] is not a static array"),
            "{e}"
        );
        // bf16 parameters take u16 bits, not floats.
        let f = Tensor::from_f32(&[2], &[1.0, 2.0]).unwrap();
        write_arrays(&path, &[("p0", &f)]).unwrap();
        let e = read_inputs(&path, &[Shape::array(ElemType::BF16, &[2])]).unwrap_err();
        assert!(e.to_string().ends_with("p0: expected bf16[2], got f32[2] (element type differs; bf16 is stored as uint16 bit patterns)"), "{e}");
    }

    #[test]
    fn corrupt_members_are_errors() {
        let dir = temp_dir("corrupt");
        let path = dir.join("c.npz");
        let header = |shape: &str, descr: &str, fortran: &str| {
            format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}\n")
        };
        let cases: Vec<(Vec<u8>, &str)> = vec![
            // Shape product overflows u64: npyz alone would panic here.
            (
                npy(&header("(1099511627776, 1099511627776)", "<f4", "False"), &[]),
                "shape is too large",
            ),
            // An empty array whose other dims overflow (npyz's strides would).
            (
                npy(&header("(0, 1099511627776, 1099511627776)", "<f4", "False"), &[]),
                "shape is too large",
            ),
            (
                npy(
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'shape': (1099511627776, 1099511627776)}",
                    &[],
                ),
                "shape is too large",
            ),
            (
                npy(&header("(4,)", "<f4", "False"), &[0; 12]),
                "needs 16 data bytes, the member has 12",
            ),
            (
                npy(&header("(4,)", "<f4", "False"), &[0; 20]),
                "needs 16 data bytes, the member has 20",
            ),
            (npy(&header("(-1,)", "<f4", "False"), &[]), "out of range"),
            (npy("{'descr': '<f4'", &[]), "bad .npy header"),
            (b"\x93NUMPY\x02\x00\xff\xff\xff\xff{".to_vec(), "truncated .npy header"),
            (b"\x93NUMPY\x01\x00\x50\x00{'descr'".to_vec(), "truncated .npy header"),
            (b"PK\x03\x04 not npy".to_vec(), "no NUMPY magic"),
            (npy(&header("(2,)", "|b1", "False"), &[0, 2]), "invalid value for bool"),
            (npy(&header("(2,)", "<c32", "False"), &[0; 64]), "dtype <c32 is not supported"),
            (npy(&header("(2, 2)", "<f4", "True"), &[0; 16]), "Fortran-order"),
            (npy(&header("(2,)", "<U3", "False"), &[0; 24]), "is not supported"),
        ];
        for (member, want) in cases {
            zip_of(&path, &[("p0.npy", member)]);
            let e = read_npz(&path).unwrap_err().to_string();
            assert!(
                e.starts_with(&path.display().to_string()) && e.contains(want),
                "{e} (wanted {want})"
            );
        }
        // Not an npz at all, empty, truncated.
        fs::write(&path, b"").unwrap();
        assert!(matches!(read_npz(&path).unwrap_err().kind, NpzErrorKind::Corrupt(_)));
        let good = dir.join("good.npz");
        write_npz(&good, &[Tensor::from_f32(&[64], &[1.0; 64]).unwrap()]).unwrap();
        let bytes = fs::read(&good).unwrap();
        for cut in [1, 10, 100, bytes.len() / 2, bytes.len() - 1] {
            fs::write(&path, &bytes[..cut]).unwrap();
            assert!(
                matches!(read_npz(&path).unwrap_err().kind, NpzErrorKind::Corrupt(_)),
                "cut at {cut}"
            );
        }
        // A flipped data byte fails the zip CRC.
        let mut flipped = bytes.clone();
        let at = flipped.windows(4).position(|w| w == 1.0f32.to_le_bytes()).unwrap();
        flipped[at] ^= 1;
        fs::write(&path, &flipped).unwrap();
        assert!(matches!(read_npz(&path).unwrap_err().kind, NpzErrorKind::Corrupt(_)));
        let missing = read_npz(dir.join("nope.npz")).unwrap_err();
        assert!(matches!(missing.kind, NpzErrorKind::Io(_)));
    }

    #[test]
    fn odd_headers_never_panic() {
        let descrs = [
            "'<f4'",
            "'>f8'",
            "'|b1'",
            "'<c16'",
            "'<f16'",
            "'|O'",
            "'<M8[ns]'",
            "'<U0'",
            "'<U18446744073709551615'",
            "'|V0'",
            "'|S0'",
            "[('a', '<f4', (1099511627776, 1099511627776))]",
            "[('a', '<f4'), ('b', '<i8')]",
        ];
        let shapes = [
            "()",
            "(0,)",
            "(3,)",
            "[3]",
            "(2, 2)",
            "(18446744073709551615,)",
            "(18446744073709551616,)",
            "(4294967296, 4294967296)",
            "(0, 18446744073709551615, 2)",
        ];
        let mut seed = 1u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        for d in descrs {
            for s in shapes {
                for fortran in ["False", "True"] {
                    for data_len in [0usize, 1, 8, 64] {
                        let data: Vec<u8> = (0..data_len).map(|_| next() as u8).collect();
                        let member = npy(
                            &format!(
                                "{{'descr': {d}, 'fortran_order': {fortran}, 'shape': {s}, }}\n"
                            ),
                            &data,
                        );
                        let _ = decode_npy(&member);
                        for _ in 0..10 {
                            let mut m = member.clone();
                            let at = 6 + next() % (m.len() - 6);
                            m[at] = next() as u8;
                            let _ = decode_npy(&m);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn compressed_members_are_read() {
        // np.savez_compressed deflates each member.
        let dir = temp_dir("compressed");
        let path = dir.join("z.npz");
        let t = Tensor::from_f32(&[3, 4], &[0.5; 12]).unwrap();
        let mut member = Vec::new();
        write_npy(&mut member, &t).unwrap();
        let mut zip = zip::ZipWriter::new(fs::File::create(&path).unwrap());
        let deflated = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        zip.start_file("p0.npy", deflated).unwrap();
        zip.write_all(&member).unwrap();
        zip.start_file("README.txt", deflated).unwrap();
        zip.write_all(b"not an array").unwrap();
        zip.finish().unwrap();
        assert_eq!(read_inputs(&path, &[t.shape()]).unwrap(), vec![t]);
    }

    #[test]
    fn failed_writes_leave_nothing() {
        let dir = temp_dir("failed_writes");
        let path = dir.join("o.npz");
        write_npz(&path, &[Tensor::scalar(1.0f32)]).unwrap();
        let before = fs::read(&path).unwrap();
        let two = Tensor::scalar(2.0f32);
        let e = write_arrays(&path, &[("o0", &two), ("o0", &two)]).unwrap_err();
        assert!(e.to_string().ends_with("array o0 given twice"), "{e}");
        assert_eq!(fs::read(&path).unwrap(), before);
        let e = write_npz(dir.join("no/such/dir/o.npz"), &[Tensor::scalar(1.0f32)]).unwrap_err();
        assert!(matches!(e.kind, NpzErrorKind::Io(_)));
        assert_eq!(fs::read_dir(&*dir).unwrap().count(), 1);
    }
}
