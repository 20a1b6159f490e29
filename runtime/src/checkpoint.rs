//! Checkpoints of a training step's resident state as `safetensors` files (the format
//! PyTorch, JAX and Hugging Face tools read: `safetensors.numpy.load_file(path)` opens one).
//!
//! A checkpoint holds the state tensors under their names plus string metadata
//! (`__metadata__` in the file's header):
//!
//! | key | value |
//! |---|---|
//! | `format` | `hloc-checkpoint` |
//! | `version` | `1` |
//! | `step` | steps run when it was written |
//! | `program` | the fingerprint of the program the state belongs to (32 hex digits) |
//! | `order` | the tensor names in state order, a JSON array (the file sorts them by dtype) |
//! | `crc32` | a JSON object: tensor name → CRC-32 of its bytes (little-endian, row-major) |
//! | `header_crc32` | CRC-32 of the other metadata values, so a damaged header is caught too |
//!
//! Writing is atomic: the file is written beside its destination under a temporary
//! name, flushed to disk (`fsync`), renamed over the destination, and the directory is
//! flushed; a crash leaves the previous checkpoint or the new one, never half of one.
//! Reading checks the header's structure and offsets (`safetensors` rejects truncated
//! or overlapping data), then every CRC: a corrupted file is an error naming what is
//! damaged, and nothing of it is returned.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use hlo_ir::{ElemType, Tensor};
use safetensors::{Dtype, SafeTensors, View};

use crate::cache::Fingerprint;

/// The `format` metadata value of every checkpoint this crate writes.
pub const FORMAT: &str = "hloc-checkpoint";
/// The `version` metadata value.
pub const VERSION: &str = "1";

/// A checkpoint as read from disk: the state tensors in state order, and where they came
/// from.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Checkpoint {
    /// Steps run when it was written.
    pub step: u64,
    /// The fingerprint of the program the state belongs to.
    pub program: Fingerprint,
    /// `(name, tensor)` in state order.
    pub tensors: Vec<(String, Tensor)>,
}

/// Why a checkpoint could not be written, read or restored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The file system refused (the checkpoint, if one was being written, is unchanged).
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Not a checkpoint, or a damaged one (truncated, bits flipped): nothing was loaded.
    #[error("{}: corrupt checkpoint: {reason}", .path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the tensor when the damage is in one.
        reason: String,
    },
    /// A valid checkpoint of another program.
    #[error(
        "{}: the checkpoint belongs to program {found}, not to this step's program {expected} \
         (a checkpoint restores only into the program that wrote it)",
        .path.display()
    )]
    WrongProgram {
        /// The file.
        path: PathBuf,
        /// This step's program.
        expected: Fingerprint,
        /// The checkpoint's.
        found: Fingerprint,
    },
    /// A tensor missing, extra, or of another type or shape than the state it would replace.
    #[error("{}: tensor `{name}`: {reason}", .path.display())]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// How it differs.
        reason: String,
    },
    /// A state tensor whose element type `safetensors` has no dtype for.
    #[error("tensor `{name}`: {elem} has no safetensors dtype")]
    Unsupported {
        /// The tensor.
        name: String,
        /// Its element type.
        elem: ElemType,
    },
}

/// The `safetensors` dtype of an element type (`None`: it has none).
fn dtype_of(e: ElemType) -> Option<Dtype> {
    Some(match e {
        ElemType::Pred => Dtype::BOOL,
        ElemType::S8 => Dtype::I8,
        ElemType::S16 => Dtype::I16,
        ElemType::S32 => Dtype::I32,
        ElemType::S64 => Dtype::I64,
        ElemType::U8 => Dtype::U8,
        ElemType::U16 => Dtype::U16,
        ElemType::U32 => Dtype::U32,
        ElemType::U64 => Dtype::U64,
        ElemType::F16 => Dtype::F16,
        ElemType::BF16 => Dtype::BF16,
        ElemType::F32 => Dtype::F32,
        ElemType::F64 => Dtype::F64,
        ElemType::C64 => Dtype::C64,
        // PyTorch's float8_e4m3fn and float8_e5m2, as safetensors names them.
        ElemType::F8E4M3FN => Dtype::F8_E4M3,
        ElemType::F8E5M2 => Dtype::F8_E5M2,
        ElemType::F8E4M3FNUZ => Dtype::F8_E4M3FNUZ,
        ElemType::F8E5M2FNUZ => Dtype::F8_E5M2FNUZ,
        ElemType::F8E8M0FNU => Dtype::F8_E8M0,
        _ => return None,
    })
}

/// The element type of a `safetensors` dtype.
fn elem_of(d: Dtype) -> Option<ElemType> {
    ElemType::ALL.iter().copied().find(|&e| dtype_of(e) == Some(d))
}

/// A tensor as `safetensors` serializes it.
struct Viewed<'t> {
    dtype: Dtype,
    shape: Vec<usize>,
    t: &'t Tensor,
}

impl View for Viewed<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(self.t.bytes())
    }
    fn data_len(&self) -> usize {
        self.t.bytes().len()
    }
}

fn header_crc(step: &str, program: &str, order: &str, crcs: &str) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for v in [FORMAT, VERSION, step, program, order, crcs] {
        h.update(v.as_bytes());
        h.update(&[0]);
    }
    h.finalize()
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io { path: path.to_path_buf(), source }
}

/// Writes `tensors` (in state order; names must be distinct) as a checkpoint at `path`,
/// atomically (see the module doc).
pub fn save(
    path: &Path,
    step: u64,
    program: Fingerprint,
    tensors: &[(&str, &Tensor)],
) -> Result<(), CheckpointError> {
    let mut views = Vec::with_capacity(tensors.len());
    let mut crcs = serde_json::Map::new();
    for &(name, t) in tensors {
        let dtype = dtype_of(t.elem())
            .ok_or_else(|| CheckpointError::Unsupported { name: name.into(), elem: t.elem() })?;
        if crcs.insert(name.to_string(), crc32fast::hash(t.bytes()).into()).is_some() {
            return Err(CheckpointError::Mismatch {
                path: path.to_path_buf(),
                name: name.into(),
                reason: "two state tensors have this name".into(),
            });
        }
        let shape = t.dims().iter().map(|&d| d as usize).collect();
        views.push((name, Viewed { dtype, shape, t }));
    }
    let order: Vec<&str> = tensors.iter().map(|(n, _)| *n).collect();
    let (step, program) = (step.to_string(), program.to_hex());
    let order = serde_json::to_string(&order).expect("strings serialize");
    let crcs = serde_json::Value::Object(crcs).to_string();
    let hcrc = header_crc(&step, &program, &order, &crcs).to_string();
    let meta: HashMap<String, String> = [
        ("format", FORMAT.to_string()),
        ("version", VERSION.to_string()),
        ("step", step),
        ("program", program),
        ("order", order),
        ("crc32", crcs),
        ("header_crc32", hcrc),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let bytes =
        safetensors::serialize(views, Some(meta)).map_err(|e| CheckpointError::Corrupt {
            path: path.to_path_buf(),
            reason: format!("could not serialize: {e}"),
        })?;
    hlo_ir::atomic::write(path, &bytes).map_err(io(path))
}

/// Reads and verifies the checkpoint at `path`.
pub fn load(path: &Path) -> Result<Checkpoint, CheckpointError> {
    let bytes = std::fs::read(path).map_err(io(path))?;
    let corrupt = |reason: String| CheckpointError::Corrupt { path: path.to_path_buf(), reason };
    let (_, header) = SafeTensors::read_metadata(&bytes)
        .map_err(|e| corrupt(format!("not a readable safetensors file ({e})")))?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| corrupt(format!("not a readable safetensors file ({e})")))?;
    let meta = header.metadata().as_ref().ok_or_else(|| corrupt("no metadata".into()))?;
    let get = |k: &str| meta.get(k).ok_or_else(|| corrupt(format!("no `{k}` in the metadata")));
    if get("format")? != FORMAT {
        return Err(corrupt(format!("`format` is not {FORMAT}")));
    }
    if get("version")? != VERSION {
        return Err(corrupt(format!(
            "version {} (this build reads version {VERSION})",
            get("version")?
        )));
    }
    let (step_s, program_s, order_s, crcs_s) =
        (get("step")?, get("program")?, get("order")?, get("crc32")?);
    let hcrc = header_crc(step_s, program_s, order_s, crcs_s).to_string();
    if get("header_crc32")? != &hcrc {
        return Err(corrupt("the metadata does not match its checksum".into()));
    }
    let step: u64 = step_s.parse().map_err(|_| corrupt(format!("step `{step_s}`")))?;
    let program = u128::from_str_radix(program_s, 16)
        .map(Fingerprint)
        .map_err(|_| corrupt(format!("program `{program_s}`")))?;
    let order: Vec<String> =
        serde_json::from_str(order_s).map_err(|e| corrupt(format!("`order`: {e}")))?;
    let crcs: HashMap<String, u32> =
        serde_json::from_str(crcs_s).map_err(|e| corrupt(format!("`crc32`: {e}")))?;
    if order.len() != st.len() || crcs.len() != st.len() {
        return Err(corrupt(format!(
            "{} tensors in the file, {} in its order, {} checksums",
            st.len(),
            order.len(),
            crcs.len()
        )));
    }
    let mut tensors = Vec::with_capacity(order.len());
    for name in order {
        let v = st.tensor(&name).map_err(|_| corrupt(format!("tensor `{name}` is missing")))?;
        if crcs.get(&name) != Some(&crc32fast::hash(v.data())) {
            return Err(corrupt(format!("tensor `{name}`: its data does not match its checksum")));
        }
        let elem = elem_of(v.dtype())
            .ok_or_else(|| corrupt(format!("tensor `{name}`: dtype {:?}", v.dtype())))?;
        let dims = v.shape().iter().map(|&d| d as u64).collect();
        let t = Tensor::from_bytes(elem, dims, v.data().to_vec())
            .map_err(|e| corrupt(format!("tensor `{name}`: {e}")))?;
        tensors.push((name, t));
    }
    Ok(Checkpoint { step, program, tensors })
}

/// Checks that `ck` (read from `path`) restores `state` (named `names`) of `program`:
/// same program, the same tensors, each of the same type and shape.
pub(crate) fn check_restores(
    path: &Path,
    ck: &Checkpoint,
    program: Fingerprint,
    names: &[String],
    state: &[Tensor],
) -> Result<(), CheckpointError> {
    let mismatch = |name: &str, reason: String| CheckpointError::Mismatch {
        path: path.to_path_buf(),
        name: name.to_string(),
        reason,
    };
    for (i, (name, t)) in names.iter().zip(state).enumerate() {
        let Some((got_name, got)) = ck.tensors.get(i) else {
            return Err(mismatch(name, "missing from the checkpoint".into()));
        };
        if got_name != name {
            return Err(mismatch(
                name,
                format!("state tensor {i} is `{name}`, the checkpoint has `{got_name}` there"),
            ));
        }
        if got.elem() != t.elem() || got.dims() != t.dims() {
            return Err(mismatch(
                name,
                format!(
                    "the checkpoint has {}{:?}, the step's state is {}{:?}",
                    got.elem(),
                    got.dims(),
                    t.elem(),
                    t.dims()
                ),
            ));
        }
    }
    if let Some((extra, _)) = ck.tensors.get(names.len()) {
        return Err(mismatch(
            extra,
            format!(
                "the checkpoint has {} tensors, the step's state {}",
                ck.tensors.len(),
                names.len()
            ),
        ));
    }
    if ck.program != program {
        return Err(CheckpointError::WrongProgram {
            path: path.to_path_buf(),
            expected: program,
            found: ck.program,
        });
    }
    Ok(())
}
