//! Instructions: the nodes of a computation's dataflow graph.

use std::borrow::Cow;
use std::fmt;

use crate::diag::Span;
use crate::op::Op;
use crate::sharding::Sharding;
use crate::types::Shape;

/// One HLO instruction. Operands are the graph's incoming edges, ordered by slot.
#[derive(Debug, Clone, PartialEq)]
pub struct Instr {
    /// The name as written (without `%`); unique within the module.
    pub name: String,
    /// Creation order within the module. Printing and any persistent reference use
    /// `seq` or `name`, never a `NodeIndex` (indices are reused after removals).
    pub seq: u32,
    pub op: Op,
    pub shape: Shape,
    /// Boxed: most instructions have none, and it is the largest attribute.
    pub sharding: Option<Box<Sharding>>,
    pub metadata: Option<Box<Metadata>>,
    pub extras: Option<Box<Extras>>,
    /// Where the instruction's name was written; default for instructions built by passes.
    pub span: Span,
    /// The whole instruction statement as written (diagnostics re-lex it to point at an
    /// attribute).
    pub extent: Span,
}

impl Instr {
    pub fn new(name: impl Into<String>, op: Op, shape: Shape) -> Instr {
        Instr { name: name.into(), seq: 0, op, shape, sharding: None, metadata: None, extras: None, span: Span::default(), extent: Span::default() }
    }
    pub fn extras_mut(&mut self) -> &mut Extras {
        self.extras.get_or_insert_with(Default::default)
    }
    pub fn control_predecessors(&self) -> &[String] {
        self.extras.as_deref().map_or(&[], |e| &e.control_predecessors)
    }
}

/// Attributes that never change what an instruction computes, kept so that dumps
/// round-trip and diagnostics can point at the user's source.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Extras {
    /// `frontend_attributes={...}`, verbatim including braces.
    pub frontend_attributes: Option<String>,
    /// `backend_config=...`, verbatim (a quoted string or a JSON object).
    pub backend_config: Option<String>,
    /// Names of instructions that must run before this one (`control-predecessors`).
    pub control_predecessors: Vec<String>,
    /// `statistics=`, `result_accuracy=`, `origin=`: verbatim.
    pub statistics: Option<String>,
    pub result_accuracy: Option<String>,
    pub origin: Option<String>,
}

/// A value in `metadata={...}`.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    Str(String),
    Int(i64),
    /// Anything else (`profile_type={1}`), verbatim.
    Raw(String),
}

/// `metadata={op_type="dot" op_name="jit(f)/dot" source_file="m.py" source_line=3 ...}`:
/// fields in the order written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Metadata {
    /// Keys XLA prints are borrowed from a static table; others are owned.
    pub fields: Vec<(Cow<'static, str>, MetaValue)>,
}

/// Metadata keys XLA prints; parsing maps these to static strings (no allocation).
pub const META_KEYS: &[&str] = &[
    "op_type",
    "op_name",
    "source_file",
    "source_line",
    "source_end_line",
    "source_column",
    "source_end_column",
    "profile_type",
    "deduplicated_name",
    "scheduling_name",
    "stack_frame_id",
    "preserve_layout",
    "size_of_generated_code_in_bytes",
    "size_of_memory_working_set_in_bytes",
];

impl Metadata {
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
    pub fn get_str(&self, key: &str) -> Option<&str> {
        match self.get(key)? {
            MetaValue::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn get_int(&self, key: &str) -> Option<i64> {
        match self.get(key)? {
            MetaValue::Int(i) => Some(*i),
            _ => None,
        }
    }
    pub fn op_name(&self) -> Option<&str> {
        self.get_str("op_name")
    }
    pub fn source_file(&self) -> Option<&str> {
        self.get_str("source_file")
    }
    pub fn source_line(&self) -> Option<i64> {
        self.get_int("source_line")
    }
    pub fn stack_frame_id(&self) -> Option<i64> {
        self.get_int("stack_frame_id")
    }
}

/// Escapes a string for HLO text (C escapes, as XLA's `CEscape`).
pub fn escape(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\{:03o}", c as u32)),
            c => out.push(c),
        }
    }
}

impl fmt::Display for Metadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (k, v)) in self.fields.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            match v {
                MetaValue::Str(s) => {
                    let mut e = String::with_capacity(s.len());
                    escape(s, &mut e);
                    write!(f, "{k}=\"{e}\"")?;
                }
                MetaValue::Int(n) => write!(f, "{k}={n}")?,
                MetaValue::Raw(r) => write!(f, "{k}={r}")?,
            }
        }
        f.write_str("}")
    }
}
