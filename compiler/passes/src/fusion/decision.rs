//! Fusion decisions: for every (producer, consumer) pair a fusion pass considers, whether
//! it fused them and, if not, why, from a closed set of reasons.
//!
//! The kebab-case names ([`Refusal::as_str`]) are stable: they appear in golden
//! snapshots, in `--fusion-report` JSON and in user scripts. Add new reasons at the end of
//! [`Refusal::ALL`]; never rename one.
//!
//! What counts as "considered": the `fusion` pass considers every operand of every
//! instruction that could absorb a producer at all. Pairs whose consumer is a natural
//! kernel boundary that no fusion could ever cross (`tuple`, `get-tuple-element`,
//! `parameter`, control flow, side-effecting ops) and pairs whose producer is a
//! `parameter`, `get-tuple-element` or `tuple` (values that are buffers by definition) are
//! not logged: they would only repeat the obvious. `multi-output-fusion` considers pairs
//! of sibling kernels that share an operand; it logs them as (first sibling, second
//! sibling).

use hlo_ir::Opcode;
use hlo_ir::op::FusionKind;

/// Why a producer was not fused into a consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Refusal {
    /// The producer's opcode cannot be fused (while, call, custom-call, scatter,
    /// reduce-window, sort, an existing fusion, a tuple-shaped value, ...).
    ProducerNotFusible,
    /// The consumer's opcode cannot absorb a producer (scatter, reduce-window, sort,
    /// select-and-scatter, a `kCustom` fusion or one whose computation is shared, ...).
    ConsumerNotFusible,
    /// The producer has side effects (rng, send, collectives, side-effecting custom-calls).
    SideEffects,
    /// The producer is the computation's root (XLA never fuses the root as a producer).
    ProducerIsRoot,
    /// An expensive producer (dot, transcendental, reduce, gather, ...) has other users:
    /// fusing would compute it twice.
    ExpensiveWouldDuplicate,
    /// An expensive producer feeding a consumer that reads each element many times
    /// (broadcast, pad value, reduce init, dynamic-slice indices, dot, ...).
    ExpensiveIntoReusingConsumer,
    /// The consumer updates an operand in place (dynamic-update-slice, a fusion rooted at
    /// one, a fusion with `output_to_operand_aliasing`) and the producer reads that buffer
    /// in a way that is not provably safe (anything but elementwise reads or a
    /// dynamic-slice of exactly the updated window); or the producer is itself an
    /// in-place `dynamic-update-slice` (it stays the root of its own kernel).
    InPlaceHazard,
    /// Merging the two siblings would create a cycle: one reaches the other through
    /// instructions outside the fusion (or reachability could not be settled within the
    /// search budget, which counts as reaching).
    WouldCreateCycle,
    /// A cheap producer with more users than the duplication cap (8).
    DuplicationCap,
    /// The fusion would exceed the operand limit (64 for `fusion`, 20 per sibling for
    /// `multi-output-fusion`).
    TooManyOperands,
    /// A non-scalar constant is not worth fusing (it stays a buffer).
    LargeConstant,
    /// Iteration spaces do not match (siblings with different output dims).
    ShapeMismatch,
    /// The producer or the consumer takes part in control dependencies.
    ControlDependency,
    /// The producer is a reduction (a `reduce` or a reduction input fusion). It stays the
    /// hero root of its own kernel: its result is small, and an epilogue fused after it
    /// would recompute the reduction for every element that reads it.
    ReductionEpilogue,
    /// A dot/convolution producer whose consumer is not a plain elementwise epilogue of
    /// its result (output fusion only absorbs bias/activation/convert/scale consumers that
    /// read each result element once), or the consumer already has a hero.
    NotAnEpilogue,
    /// The consumer is a dot/convolution, or the producer feeds the hero operands of an
    /// output fusion: MXU operands are streamed from memory as they are.
    ContractionOperand,
    /// A cheap producer with several users that reads several full-size operands (XLA's
    /// un-duplicable set): duplicating it would multiply memory reads.
    NotDuplicable,
    /// A constant alone with one other op is not worth a fusion (XLA:CPU): a constant is
    /// only fused into a consumer that is already a fusion.
    ConstantIntoNonFusion,
    /// A concatenate with more than 8 operands, or along a minor dimension of 128 or more
    /// elements (XLA:CPU: such loop fusions are inefficient).
    ConcatenateInefficient,
}

impl Refusal {
    /// Every reason, in declaration order.
    pub const ALL: [Refusal; 19] = [
        Refusal::ProducerNotFusible,
        Refusal::ConsumerNotFusible,
        Refusal::SideEffects,
        Refusal::ProducerIsRoot,
        Refusal::ExpensiveWouldDuplicate,
        Refusal::ExpensiveIntoReusingConsumer,
        Refusal::InPlaceHazard,
        Refusal::WouldCreateCycle,
        Refusal::DuplicationCap,
        Refusal::TooManyOperands,
        Refusal::LargeConstant,
        Refusal::ShapeMismatch,
        Refusal::ControlDependency,
        Refusal::ReductionEpilogue,
        Refusal::NotAnEpilogue,
        Refusal::ContractionOperand,
        Refusal::NotDuplicable,
        Refusal::ConstantIntoNonFusion,
        Refusal::ConcatenateInefficient,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::ProducerNotFusible => "producer-not-fusible",
            Refusal::ConsumerNotFusible => "consumer-not-fusible",
            Refusal::SideEffects => "side-effects",
            Refusal::ProducerIsRoot => "producer-is-root",
            Refusal::ExpensiveWouldDuplicate => "expensive-would-duplicate",
            Refusal::ExpensiveIntoReusingConsumer => "expensive-into-reusing-consumer",
            Refusal::InPlaceHazard => "in-place-hazard",
            Refusal::WouldCreateCycle => "would-create-cycle",
            Refusal::DuplicationCap => "duplication-cap",
            Refusal::TooManyOperands => "too-many-operands",
            Refusal::LargeConstant => "large-constant",
            Refusal::ShapeMismatch => "shape-mismatch",
            Refusal::ControlDependency => "control-dependency",
            Refusal::ReductionEpilogue => "reduction-epilogue",
            Refusal::NotAnEpilogue => "not-an-epilogue",
            Refusal::ContractionOperand => "contraction-operand",
            Refusal::NotDuplicable => "not-duplicable",
            Refusal::ConstantIntoNonFusion => "constant-into-non-fusion",
            Refusal::ConcatenateInefficient => "concatenate-inefficient",
        }
    }
}

/// What happened to one considered pair.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Fused into the fusion instruction named here (its name at the end of the pass), of
    /// this kind.
    Fused {
        fusion: String,
        kind: FusionKind,
    },
    Refused(Refusal),
}

/// One considered (producer, consumer) pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The pass that considered it (`fusion`, `multi-output-fusion`).
    pub pass: &'static str,
    pub computation: String,
    pub producer: String,
    pub producer_op: Opcode,
    pub consumer: String,
    pub consumer_op: Opcode,
    /// Size in bytes of the producer's result (what fusing it saves materializing).
    pub producer_bytes: u64,
    pub outcome: Outcome,
}

/// Every decision of a pipeline run, in the order taken.
#[derive(Debug, Clone, Default)]
pub struct FusionLog {
    pub decisions: Vec<Decision>,
}

impl FusionLog {
    /// How many pairs were refused for each reason, in [`Refusal::ALL`] order (zero counts
    /// left out).
    pub fn refusal_counts(&self) -> Vec<(Refusal, usize)> {
        let mut counts: Vec<(Refusal, usize)> = Vec::new();
        for d in &self.decisions {
            if let Outcome::Refused(r) = d.outcome {
                match counts.iter_mut().find(|(x, _)| *x == r) {
                    Some(c) => c.1 += 1,
                    None => counts.push((r, 1)),
                }
            }
        }
        counts.sort_by_key(|(r, _)| *r);
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_names_are_distinct_and_complete() {
        let mut names: Vec<&str> = Refusal::ALL.iter().map(|r| r.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Refusal::ALL.len());
        // `ALL` is in declaration order, which `refusal_counts` relies on.
        assert!(Refusal::ALL.windows(2).all(|w| w[0] < w[1]));
    }
}
