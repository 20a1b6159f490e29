//! Differential fuzzing of every engine: a generator of random well-typed HLO modules
//! ([`generator`]), the harness that runs one module on every engine and compares each with the
//! reference interpreter ([`diff`]; XLA through the oracle as one more engine: [`xla`]),
//! and a reducer that shrinks a module while a predicate
//! still holds ([`reduce`]).
//!
//! The generator is driven by a [`rng::Rng`]: seeded (the deterministic mode CI and
//! `hloc fuzz` use) or fed the bytes of a fuzzer (`tools/fuzz/fuzz/`, a cargo-fuzz target).

pub mod diff;
pub mod generator;
pub mod reduce;
pub mod rng;
pub mod xla;

pub use diff::{Engine, Finding, Outcome, Report, differential};
pub use generator::{Config, Generated, generate};
pub use rng::Rng;

/// The module of seed `seed` under `cfg`.
pub fn module_of_seed(seed: u64, cfg: &Config) -> Generated {
    generate(&mut Rng::seeded(seed), cfg)
}
