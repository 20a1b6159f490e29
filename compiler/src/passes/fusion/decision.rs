//! Fusion decisions: for every (producer, consumer) pair a fusion pass considers, whether
//! it fused them and, if not, why, from a closed set of reasons.

use hlo_ir::Opcode;
use hlo_ir::op::FusionKind;

/// Why a producer was not fused into a consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Refusal {
    /// The producer's opcode cannot be fused (parameter, while, call, custom-call, ...).
    ProducerNotFusible,
    /// The consumer's opcode cannot absorb a producer.
    ConsumerNotFusible,
    /// The producer has side effects.
    SideEffects,
    /// The producer is the computation's root.
    ProducerIsRoot,
    /// An expensive producer (dot, transcendental, ...) has other users: fusing would
    /// compute it twice.
    ExpensiveWouldDuplicate,
    /// An expensive producer feeding a consumer that reads each element many times.
    ExpensiveIntoReusingConsumer,
    /// The consumer updates an operand in place (dynamic-update-slice, scatter) that the
    /// producer reads elsewhere.
    InPlaceHazard,
    /// Fusing would create a cycle (the producer reaches another operand of the consumer).
    WouldCreateCycle,
    /// A cheap producer would be duplicated beyond the cap.
    DuplicationCap,
    /// The fusion would exceed the operand limit.
    TooManyOperands,
    /// A non-scalar constant is not worth fusing (it stays a buffer).
    LargeConstant,
    /// Iteration spaces do not match (e.g. different output shapes in a sibling fusion).
    ShapeMismatch,
}

impl Refusal {
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
        }
    }
}

/// What happened to one considered pair.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Fused into the fusion instruction named here, of this kind.
    Fused { fusion: String, kind: FusionKind },
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
    pub outcome: Outcome,
}

/// Every decision of a pipeline run, in the order taken.
#[derive(Debug, Clone, Default)]
pub struct FusionLog {
    pub decisions: Vec<Decision>,
}
