//! Syntax trees → IR: names to graph nodes, operand order to edge slots, attribute token
//! trees to typed attributes. Reports every error it finds, each with a span.
//!
//! By role, each part using only those listed before it:
//! - [`names`]: the computation table and the resolver state, references to
//!   computations, the names the resolver makes up;
//! - [`literals`]: constants read against their shapes;
//! - [`ops`]: one statement to one instruction with its typed attributes;
//! - [`assembly`]: computations built and assembled into graphs (on two threads for
//!   large modules), then the module with its header and stack-frame tables.

mod assembly;
mod literals;
mod names;
mod ops;

pub(crate) use assembly::resolve;
