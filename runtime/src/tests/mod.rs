//! White-box tests of the runtime's internals: the compilation
//! cache, the JIT's math functions against the host's, its f16 conversions against
//! `half`'s and the floating-point environment (the embedding API is tested from outside,
//! in `runtime/tests/`).

mod cache;
mod common;
mod f16;
mod fp_mode;
mod math_ulp;
mod row_chain;
mod staged;
