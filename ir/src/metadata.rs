//! `metadata={...}`: what an instruction came from (op name, source file and line,
//! stack frame). A leaf module: it depends on nothing else in the crate.

use std::borrow::Cow;
use std::fmt;

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
