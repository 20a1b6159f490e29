//! Passes over the IR, one file per pass, named for what it does.
//!
//! - [`shape_inference`]: re-derives each instruction's result shape from its operands and
//!   attributes and checks it against the declared shape.
//! - [`dynamic_shapes`]: rejects data-dependent shapes, one diagnostic per origin.
//!
//! [`check`] is the front half of every pipeline (`hloc check`, `hloc run`, later
//! compilation): structural verifier, then dynamic-shape rejection and shape inference.

pub mod dynamic_shapes;
pub mod shape_inference;

use hlo_ir::{Diagnostics, Module};

/// Verifier + shape inference + dynamic-shape rejection. With `src`, verifier errors point
/// into the text. Shape inference only runs on a structurally valid module (its rules
/// assume the verifier's invariants); the result is sorted by position.
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
    diags.sort();
    diags
}
