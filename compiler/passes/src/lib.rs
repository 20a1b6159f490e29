//! `hlo-passes`: the optimizer's passes over the IR, one file per pass, named for what it
//! does.
//!
//! - The pass manager ([`Pass`], [`Pipeline`]: verification between passes, fixpoint
//!   groups, dumps, timing) and `inline-calls` are `hlo-pipeline`, below the interpreter
//!   this crate's constant folding runs on.
//! - [`registry`] lists every pass `hloc opt --passes` can name from this crate (the
//!   sharding passes live in `hlo-spmd`; the compile driver joins the two lists);
//!   [`default_pipeline`] is the optimizer's order, written here and nowhere else.
//! - The op expanders (`scan`, `rng`, `rng-bit-generator`, `batch-norm`, `cholesky`,
//!   `triangular-solve`) share one skeleton, [`expander::OpExpander`].
//! - [`specialize`]: shape-polymorphic modules specialized to concrete argument shapes.
//!
//! The checks every module passes first (verifier, shape inference, dynamic shapes) live in
//! `hlo_check`: passes take modules that passed them. What a module costs and holds (cost,
//! memory, trip counts) is `hlo-analysis`: no pass here needs it.

pub mod algebraic_simplifier;
pub mod all_reduce_combiner;
pub mod batch_norm_expander;
pub mod bitcast_to_logical;
pub mod cholesky_expander;
pub mod constant_folding;
pub mod cse;
pub mod dce;
pub mod effects;
pub mod expander;
pub mod fusion;
pub mod hlo_builder;
pub mod rewrite;
pub mod rng_bit_generator_expander;
pub mod rng_expander;
pub mod scan_expander;
pub mod specialize;
pub mod tree_reduction;
pub mod triangular_solve_expander;
pub mod tuple_simplifier;
pub mod while_licm;

use crate::expander::Expand;
use hlo_pipeline::{Pass, PassInfo, Pipeline, Step};

/// Every pass of this crate, in the default pipeline's order, then `all-reduce-combiner`
/// (which the compile driver runs first when it optimizes a program for N devices); the
/// sharding passes are `hlo_spmd::registry`, and `hlo_driver::registry` joins the two.
pub fn registry() -> Vec<PassInfo> {
    vec![
        PassInfo {
            name: "scan-expander",
            about: "scan as a while loop over the scan dimension (dynamic-slice, call, dynamic-update-slice; XLA's ScanExpander)",
            make: || Box::new(Expand(scan_expander::ScanExpander)),
        },
        PassInfo {
            name: "batch-norm-expander",
            about: "batch-norm-training/-inference/-grad as reduce, broadcast and elementwise steps (XLA's BatchNormExpander formulas)",
            make: || Box::new(Expand(batch_norm_expander::BatchNormExpander::default())),
        },
        PassInfo {
            name: "rng-expander",
            about: "rng (uniform, normal) as rng-get-and-update-state, a Philox rng-bit-generator and XLA's conversions",
            make: || Box::new(Expand(rng_expander::RngExpander)),
        },
        PassInfo {
            name: "rng-bit-generator-expander",
            about: "rng-bit-generator (threefry, philox) as u32/u64 integer HLO (XLA's RngBitGeneratorExpander)",
            make: || Box::new(Expand(rng_bit_generator_expander::RngBitGeneratorExpander)),
        },
        PassInfo {
            name: "cholesky-expander",
            about: "cholesky as a while loop over columns (dynamic-slice, dot, dynamic-update-slice; XLA's CholeskyExpander recurrence)",
            make: || Box::new(Expand(cholesky_expander::CholeskyExpander::default())),
        },
        PassInfo {
            name: "triangular-solve-expander",
            about: "triangular-solve as substitution or inverted diagonal blocks and dots (XLA's TriangularSolveExpander)",
            make: || {
                Box::new(Expand(triangular_solve_expander::TriangularSolveExpander::default()))
            },
        },
        PassInfo {
            name: "bitcast-to-logical",
            about: "rewrite layout-changing bitcasts (XLA's optimized modules) as transpose/reshape, so row-major engines run them",
            make: || Box::new(bitcast_to_logical::BitcastToLogical),
        },
        PassInfo {
            name: "inline-calls",
            about: "inline every `call` (callees first) and drop unreachable computations",
            make: || Box::new(hlo_pipeline::inline_calls::InlineCalls),
        },
        PassInfo {
            name: "algebraic-simplifier",
            about: "bit-exact local rewrites: identity reshapes/transposes/converts/slices, x*1, x-0, double negate, composed transposes",
            make: || Box::new(algebraic_simplifier::AlgebraicSimplifier),
        },
        PassInfo {
            name: "constant-folding",
            about: "evaluate instructions with constant operands on the interpreter (results up to 4096 elements)",
            make: || Box::new(constant_folding::ConstantFolding),
        },
        PassInfo {
            name: "tuple-simplifier",
            about: "get-tuple-element(tuple) and tuple(get-tuple-element...) shortcuts",
            make: || Box::new(tuple_simplifier::TupleSimplifier),
        },
        PassInfo {
            name: "cse",
            about: "merge identical instructions (constants and iotas first; commutative operands in any order)",
            make: || Box::new(cse::Cse),
        },
        PassInfo {
            name: "while-loop-invariant-code-motion",
            about: "hoist loop-invariant work out of while bodies into new loop-state elements",
            make: || Box::new(while_licm::WhileLicm),
        },
        PassInfo {
            name: "dce",
            about: "remove unused side-effect-free instructions and unreachable computations",
            make: || Box::new(dce::Dce),
        },
        PassInfo {
            name: "tree-reduction",
            about: "reductions keeping few columns and no leading dimension summed in fixed groups of rows, then the groups (the host's pipeline only: it splits them over threads; sums round differently)",
            make: || Box::new(Expand(tree_reduction::TreeReduction)),
        },
        PassInfo {
            name: "fusion",
            about: "producer→consumer fusion: loop (elementwise chains), input (into a reduce) and output (dot/convolution epilogues) fusions",
            make: || Box::new(fusion::Fusion),
        },
        PassInfo {
            name: "multi-output-fusion",
            about: "sibling multi-output fusion: loop kernels that read the same operand become one fusion with a tuple root; then a loop fusion reading such a fusion's outputs at the same index joins it as another output",
            make: || Box::new(fusion::MultiOutputFusion),
        },
        PassInfo {
            name: "all-reduce-combiner",
            about: "independent all-reduces with the same groups and reduction become one variadic all-reduce (the driver runs it first on N devices; `hloc opt` does not, as XLA does not compile variadic all-reduces from text)",
            make: || Box::new(all_reduce_combiner::AllReduceCombiner),
        },
    ]
}

/// Makes the pass called `name`.
pub fn make_pass(name: &str) -> Option<Box<dyn Pass>> {
    registry().into_iter().find(|p| p.name == name).map(|p| (p.make)())
}

/// The default optimization pipeline (what `hloc opt` runs without `--passes`). The order
/// is written here and nowhere else.
pub fn default_pipeline() -> Pipeline {
    let pass =
        |name: &str| make_pass(name).unwrap_or_else(|| panic!("pass `{name}` is registered"));
    Pipeline::new(vec![
        Step::Pass(pass("scan-expander")),
        Step::Pass(pass("batch-norm-expander")),
        Step::Pass(pass("cholesky-expander")),
        Step::Pass(pass("triangular-solve-expander")),
        Step::Pass(pass("rng-expander")),
        Step::Pass(pass("rng-bit-generator-expander")),
        Step::Pass(pass("bitcast-to-logical")),
        Step::Pass(pass("inline-calls")),
        Step::Fixpoint {
            name: "simplify",
            passes: vec![
                pass("algebraic-simplifier"),
                pass("constant-folding"),
                pass("tuple-simplifier"),
                pass("cse"),
                pass("while-loop-invariant-code-motion"),
                pass("dce"),
            ],
            cap: 8,
        },
        Step::Pass(pass("fusion")),
        Step::Pass(pass("multi-output-fusion")),
        Step::Pass(pass("dce")),
    ])
}

/// The host's pipeline: [`default_pipeline`] with `tree-reduction` before the `simplify`
/// group, so that reductions the runtime would run on one thread split over its pool and
/// bf16/f16 sums take XLA's CPU order (constant folding then evaluates them in that
/// order too). Not bit-exact (grouped sums round differently from one sequential fold),
/// which is why it is the host's alone.
pub fn host_pipeline() -> Pipeline {
    default_pipeline().inserted_before("simplify", Box::new(Expand(tree_reduction::TreeReduction)))
}

/// A pipeline of the named passes, in the order given (`--passes a,b,c`).
pub fn pipeline_of(names: &[&str]) -> Result<Pipeline, hlo_ir::Diagnostic> {
    let mut steps = Vec::new();
    for n in names {
        match make_pass(n) {
            Some(p) => steps.push(Step::Pass(p)),
            None => {
                let known: Vec<&str> = registry().iter().map(|p| p.name).collect();
                return Err(hlo_ir::Diagnostic::error(None, format!("unknown pass `{n}`"))
                    .with_help(format!("known passes: {}", known.join(", "))));
            }
        }
    }
    Ok(Pipeline::new(steps))
}
