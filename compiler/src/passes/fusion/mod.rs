//! Fusion: producer→consumer loop, input and output fusion and sibling multi-output
//! fusion, every considered pair recorded with its decision ([`decision`]).

pub mod decision;
