//! Instructions: the nodes of a computation's dataflow graph.

use crate::diag::Span;
use crate::op::Op;
use crate::sharding::Sharding;
use crate::types::Shape;

pub use crate::metadata::{META_KEYS, MetaValue, Metadata, escape};

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
        Instr {
            name: name.into(),
            seq: 0,
            op,
            shape,
            sharding: None,
            metadata: None,
            extras: None,
            span: Span::default(),
            extent: Span::default(),
        }
    }
    /// A kept newer-XLA attribute (`Extras::kept`) that changes what the instruction
    /// computes and that no engine implements yet: `slice_sizes` on collective-permute,
    /// `has_dynamic_root=true` on collective-broadcast. Engines refuse such instructions
    /// instead of ignoring the attribute.
    pub fn unimplemented_kept_attr(&self) -> Option<&str> {
        self.extras.as_ref()?.kept.iter().find_map(|(k, v)| match k.as_str() {
            "slice_sizes" => Some(k.as_str()),
            "has_dynamic_root" if v != "false" => Some(k.as_str()),
            _ => None,
        })
    }
    pub fn extras_mut(&mut self) -> &mut Extras {
        self.extras.get_or_insert_with(Default::default)
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
    /// `control-predecessors` names written in the text that name no instruction of the
    /// computation (kept for the verifier to report and the printer to print back).
    /// Resolved control predecessors are node references held by the computation
    /// ([`crate::Computation::control_predecessors`]).
    pub dangling_control_predecessors: Vec<String>,
    /// `statistics=`, `result_accuracy=`, `origin=`: verbatim.
    pub statistics: Option<String>,
    pub result_accuracy: Option<String>,
    pub origin: Option<String>,
    /// Attributes carried verbatim and otherwise ignored (`text::resolve::ops::KEPT_ATTRS`:
    /// newer XLA attributes), as `(name, value)` in the order written.
    pub kept: Vec<(String, String)>,
}
