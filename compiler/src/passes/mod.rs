//! Passes over the IR, one file per pass, named for what it does.
//!
//! - [`shape_inference`]: re-derives each instruction's result shape from its operands and
//!   attributes and checks it against the declared shape.
//! - [`dynamic_shapes`]: rejects data-dependent shapes, one diagnostic per origin.
//! - [`infinite_loops`]: rejects `while` loops whose condition provably always returns
//!   true.
//!
//! [`check`] is the front half of every pipeline (`hloc check`, `hloc run`, later
//! compilation): structural verifier, then dynamic-shape rejection, shape inference and
//! infinite-loop rejection.

pub mod dynamic_shapes;
pub mod infinite_loops;
pub mod shape_inference;

use hlo_ir::{Diagnostics, Module};

/// Verifier + dynamic-shape rejection + shape inference + infinite-loop rejection. With
/// `src`, verifier errors point into the text. The passes only run on a structurally
/// valid module (their rules assume the verifier's invariants); the result is sorted by
/// position.
pub fn check(m: &Module, src: Option<&str>) -> Diagnostics {
    let mut diags = match src {
        Some(src) => hlo_ir::verify::verify_source(m, src),
        None => hlo_ir::verify::verify(m),
    };
    if diags.has_errors() {
        return diags;
    }
    diags.extend(dynamic_shapes::check_module(m));
    diags.extend(shape_inference::check_module(m));
    diags.extend(infinite_loops::check_module(m));
    diags.sort();
    diags
}
