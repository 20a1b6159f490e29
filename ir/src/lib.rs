//! `hlo-ir`: the HLO data model, its text format, the structural verifier and diagnostics.
//!
//! - [`text::parse`] turns HLO text (either XLA print style) into a [`Module`] plus
//!   [`Diagnostics`]; it never panics and reports every error it can find.
//! - [`text::print`] prints a module in XLA's dump style; `print(parse(x))` is a fixpoint.
//! - [`verify::verify`] checks the structural invariants listed in its module doc.
//! - The front door for text is `hlo_check::parse` (the `hlo-check` crate): parse, verify
//!   and the checks below, giving a `Checked<Module>`; [`text::parse`] followed by
//!   [`verify::verify_source`] is for code that deliberately wants a module unchecked
//!   (tests of the parser, the verifier and the checks).
//! - The checks every module passes before anything downstream (verifier, data-dependent
//!   shapes, shape inference, infinite loops, sharding device counts) and `Checked`, the
//!   type only they produce, are the `hlo-check` crate (`ir/check`).
//! - [`schedule`]: the linearization and liveness analysis every engine runs by.
//!
//! Each computation is a petgraph `StableDiGraph<Instr, Slot>`: an edge carries the
//! operand slot at its consumer. A `NodeIndex` is only meaningful inside one pass;
//! anything persistent refers to instructions by name or `seq`.

pub mod atomic;
pub mod computation;
pub mod counters;
pub mod diag;
mod halves;
pub mod hash;
pub mod ids;
pub mod instr;
pub mod literal;
pub mod metadata;
pub mod module;
pub mod narrow;
pub mod op;
pub mod op_props;
pub mod opcode;
pub mod schedule;
pub mod sharding;
pub mod tensor;
pub mod text;
pub mod types;
pub mod verify;

pub use computation::{Computation, EditError, Graph, IdSource, Slot};
pub use diag::{Diagnostic, Diagnostics, Severity, Span};
pub use ids::CompId;
pub use instr::{Instr, Metadata};
pub use module::Module;
pub use op::Op;
pub use opcode::Opcode;
pub use petgraph::stable_graph::NodeIndex;
pub use sharding::Sharding;
pub use tensor::{Element, Tensor, TensorError};
pub use types::{ArrayShape, Dim, ElemType, Layout, Shape};

/// Parses and structurally verifies `src`, for hlo-ir's own tests: the module, or every
/// diagnostic (parse errors, then verifier errors). Everything else enters through
/// `hlo_check::parse` (parse, verify and the checks, giving a `Checked<Module>`).
#[cfg(test)]
pub(crate) fn parse_verified(src: &str) -> Result<Module, Diagnostics> {
    let (m, mut diags) = text::parse(src);
    let Some(m) = m else { return Err(diags) };
    diags.extend(verify::verify_source(&m, src));
    if diags.has_errors() { Err(diags) } else { Ok(m) }
}
