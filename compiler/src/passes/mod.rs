//! Passes over the IR, one file per pass, named for what it does.
//!
//! - [`shape_inference`]: re-derives each instruction's result shape from its operands and
//!   attributes and checks it against the declared shape.

pub mod shape_inference;
