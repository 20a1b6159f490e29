//! `hlo-tools` as a library: what the `hloc` command line computes that other front ends
//! (the Python package, `tools/python`) compute too, so both give the same results by
//! construction. The command line itself is the `hloc` binary (`src/main.rs`).

pub mod error;
pub mod generators;
pub mod plan;
pub mod predict;
