//! Typed operations: an [`Opcode`] together with the attributes that give it meaning.
//!
//! [`Op`] is a closed enum. Opcodes without attributes (`add`, `tuple`, `copy`, ...) are
//! [`Op::Plain`]; every other opcode has its own variant with typed fields. Attributes
//! that never change semantics (`metadata`, `backend_config`, ...) live on
//! [`crate::Instr`], not here.

use crate::ids::CompId;
use crate::literal::Literal;
use crate::opcode::Opcode;
use crate::sharding::IotaList;
use crate::types::Shape;

#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// An opcode with no attributes of its own.
    Plain(Opcode),
    Parameter {
        number: u32,
        replication: Option<Vec<bool>>,
    },
    Constant(Literal),
    Iota {
        dimension: i64,
    },
    GetTupleElement {
        index: i64,
    },
    Compare {
        direction: CmpDirection,
        kind: Option<CmpType>,
    },
    Broadcast {
        dimensions: Vec<i64>,
    },
    Reshape {
        inferred_dimension: Option<i64>,
    },
    Transpose {
        dimensions: Vec<i64>,
    },
    Reverse {
        dimensions: Vec<i64>,
    },
    Concatenate {
        dimension: i64,
    },
    Slice {
        ranges: Vec<SliceRange>,
    },
    DynamicSlice {
        sizes: Vec<i64>,
    },
    Pad {
        config: Vec<PadDim>,
    },
    ReducePrecision {
        exponent_bits: i64,
        mantissa_bits: i64,
    },
    Gather(Box<GatherDims>),
    Scatter(Box<ScatterDims>),
    Reduce {
        dimensions: Vec<i64>,
        to_apply: CompId,
    },
    ReduceWindow {
        window: Window,
        to_apply: CompId,
    },
    SelectAndScatter {
        window: Window,
        select: CompId,
        scatter: CompId,
    },
    Map {
        dimensions: Option<Vec<i64>>,
        to_apply: CompId,
    },
    Sort {
        dimension: i64,
        is_stable: bool,
        to_apply: CompId,
    },
    TopK {
        k: i64,
        largest: Option<bool>,
        /// Newer XLA's `is_stable` (true when not written, as there). The oracle's XLA
        /// reads no such attribute (its top-k is stable), so it is never printed; every
        /// engine here is stable, which `false` allows too.
        is_stable: bool,
    },
    Scan {
        dimension: i64,
        num_carries: i64,
        is_reverse: bool,
        is_associative: Option<bool>,
        to_apply: CompId,
    },
    /// `dot`, `ragged-dot` and `scaled-dot`.
    Dot {
        opcode: Opcode,
        dims: Box<DotDims>,
    },
    Convolution(Box<Convolution>),
    BatchNorm {
        opcode: Opcode,
        epsilon: f64,
        feature_index: i64,
    },
    Cholesky {
        lower: bool,
    },
    TriangularSolve {
        left_side: bool,
        lower: bool,
        unit_diagonal: bool,
        transpose_a: Option<String>,
    },
    Fft {
        fft_type: String,
        fft_length: Vec<i64>,
    },
    While {
        condition: CompId,
        body: CompId,
    },
    Conditional(Branches),
    Call {
        to_apply: CompId,
        is_composite: bool,
    },
    Fusion {
        kind: FusionKind,
        calls: CompId,
        output_to_operand_aliasing: Vec<Alias>,
    },
    CustomCall(Box<CustomCall>),
    /// all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute,
    /// collective-broadcast, ragged-all-to-all and the `*-start` forms.
    Collective {
        opcode: Opcode,
        attrs: Box<CollectiveAttrs>,
    },
    /// `async-start`, `async-update`, `async-done`.
    /// `calls` is optional on `-update`/`-done`, which inherit their start's. `sugar` is
    /// the op an `X-update` / `X-done` shorthand names (`X`), which the verifier checks
    /// against the op its start wraps; it is not printed (the canonical form is printed).
    Async {
        opcode: Opcode,
        calls: Option<CompId>,
        sugar: Option<Opcode>,
    },
    CopyStart {
        cross_program_prefetch_index: Option<i64>,
    },
    /// send, recv, send-done, recv-done.
    SendRecv {
        opcode: Opcode,
        channel_id: Option<i64>,
        is_host_transfer: bool,
    },
    Infeed {
        config: Option<String>,
    },
    Outfeed {
        config: Option<String>,
        shape: Option<Shape>,
    },
    Rng {
        distribution: RngDistribution,
    },
    RngBitGenerator {
        algorithm: RngAlgorithm,
    },
    RngGetAndUpdateState {
        delta: i64,
    },
    GetDimensionSize {
        dimension: i64,
    },
    SetDimensionSize {
        dimension: i64,
    },
    /// `domain`: kept verbatim (a TensorFlow-era sharding marker; an identity for us).
    Domain {
        raw: String,
    },
}

impl Op {
    pub fn opcode(&self) -> Opcode {
        match self {
            Op::Plain(op) => *op,
            Op::Parameter { .. } => Opcode::Parameter,
            Op::Constant(_) => Opcode::Constant,
            Op::Iota { .. } => Opcode::Iota,
            Op::GetTupleElement { .. } => Opcode::GetTupleElement,
            Op::Compare { .. } => Opcode::Compare,
            Op::Broadcast { .. } => Opcode::Broadcast,
            Op::Reshape { .. } => Opcode::Reshape,
            Op::Transpose { .. } => Opcode::Transpose,
            Op::Reverse { .. } => Opcode::Reverse,
            Op::Concatenate { .. } => Opcode::Concatenate,
            Op::Slice { .. } => Opcode::Slice,
            Op::DynamicSlice { .. } => Opcode::DynamicSlice,
            Op::Pad { .. } => Opcode::Pad,
            Op::ReducePrecision { .. } => Opcode::ReducePrecision,
            Op::Gather(_) => Opcode::Gather,
            Op::Scatter(_) => Opcode::Scatter,
            Op::Reduce { .. } => Opcode::Reduce,
            Op::ReduceWindow { .. } => Opcode::ReduceWindow,
            Op::SelectAndScatter { .. } => Opcode::SelectAndScatter,
            Op::Map { .. } => Opcode::Map,
            Op::Sort { .. } => Opcode::Sort,
            Op::TopK { .. } => Opcode::TopK,
            Op::Scan { .. } => Opcode::Scan,
            Op::Dot { opcode, .. }
            | Op::BatchNorm { opcode, .. }
            | Op::Collective { opcode, .. }
            | Op::Async { opcode, .. }
            | Op::SendRecv { opcode, .. } => *opcode,
            Op::Convolution(_) => Opcode::Convolution,
            Op::Cholesky { .. } => Opcode::Cholesky,
            Op::TriangularSolve { .. } => Opcode::TriangularSolve,
            Op::Fft { .. } => Opcode::Fft,
            Op::While { .. } => Opcode::While,
            Op::Conditional(_) => Opcode::Conditional,
            Op::Call { .. } => Opcode::Call,
            Op::Fusion { .. } => Opcode::Fusion,
            Op::CustomCall(_) => Opcode::CustomCall,
            Op::CopyStart { .. } => Opcode::CopyStart,
            Op::Infeed { .. } => Opcode::Infeed,
            Op::Outfeed { .. } => Opcode::Outfeed,
            Op::Rng { .. } => Opcode::Rng,
            Op::RngBitGenerator { .. } => Opcode::RngBitGenerator,
            Op::RngGetAndUpdateState { .. } => Opcode::RngGetAndUpdateState,
            Op::GetDimensionSize { .. } => Opcode::GetDimensionSize,
            Op::SetDimensionSize { .. } => Opcode::SetDimensionSize,
            Op::Domain { .. } => Opcode::Domain,
        }
    }

    /// Computations this operation calls, with the attribute that names each.
    pub fn called_computations(&self) -> Vec<(&'static str, CompId)> {
        match self {
            Op::Reduce { to_apply, .. }
            | Op::ReduceWindow { to_apply, .. }
            | Op::Map { to_apply, .. }
            | Op::Sort { to_apply, .. }
            | Op::Scan { to_apply, .. }
            | Op::Call { to_apply, .. } => vec![("to_apply", *to_apply)],
            Op::Scatter(s) => vec![("to_apply", s.to_apply)],
            Op::SelectAndScatter { select, scatter, .. } => {
                vec![("select", *select), ("scatter", *scatter)]
            }
            Op::While { condition, body } => vec![("condition", *condition), ("body", *body)],
            Op::Conditional(Branches::TrueFalse(t, f)) => {
                vec![("true_computation", *t), ("false_computation", *f)]
            }
            Op::Conditional(Branches::Indexed(b)) => {
                b.iter().map(|&c| ("branch_computations", c)).collect()
            }
            Op::Fusion { calls, .. } | Op::Async { calls: Some(calls), .. } => {
                vec![("calls", *calls)]
            }
            Op::CustomCall(c) => {
                let mut v: Vec<_> =
                    c.called_computations.iter().map(|&c| ("called_computations", c)).collect();
                v.extend(c.to_apply.map(|c| ("to_apply", c)));
                v
            }
            Op::Collective { attrs, .. } => {
                attrs.to_apply.map(|c| vec![("to_apply", c)]).unwrap_or_default()
            }
            _ => Vec::new(),
        }
    }

    /// Rewrites every computation reference (used when computations are renumbered).
    pub fn map_computations(&mut self, f: &mut impl FnMut(CompId) -> CompId) {
        match self {
            Op::Reduce { to_apply, .. }
            | Op::ReduceWindow { to_apply, .. }
            | Op::Map { to_apply, .. }
            | Op::Sort { to_apply, .. }
            | Op::Scan { to_apply, .. }
            | Op::Call { to_apply, .. } => *to_apply = f(*to_apply),
            Op::Scatter(s) => s.to_apply = f(s.to_apply),
            Op::SelectAndScatter { select, scatter, .. } => {
                *select = f(*select);
                *scatter = f(*scatter);
            }
            Op::While { condition, body } => {
                *condition = f(*condition);
                *body = f(*body);
            }
            Op::Conditional(Branches::TrueFalse(t, e)) => {
                *t = f(*t);
                *e = f(*e);
            }
            Op::Conditional(Branches::Indexed(b)) => b.iter_mut().for_each(|c| *c = f(*c)),
            Op::Fusion { calls, .. } | Op::Async { calls: Some(calls), .. } => *calls = f(*calls),
            Op::CustomCall(c) => {
                c.called_computations.iter_mut().for_each(|x| *x = f(*x));
                c.to_apply = c.to_apply.map(&mut *f);
            }
            Op::Collective { attrs, .. } => attrs.to_apply = attrs.to_apply.map(f),
            _ => {}
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpDirection {
    Eq,
    Ne,
    Ge,
    Gt,
    Le,
    Lt,
}

impl CmpDirection {
    pub const ALL: [(CmpDirection, &'static str); 6] = [
        (CmpDirection::Eq, "EQ"),
        (CmpDirection::Ne, "NE"),
        (CmpDirection::Ge, "GE"),
        (CmpDirection::Gt, "GT"),
        (CmpDirection::Le, "LE"),
        (CmpDirection::Lt, "LT"),
    ];
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpType {
    Float,
    TotalOrder,
    Signed,
    Unsigned,
}

impl CmpType {
    pub const ALL: [(CmpType, &'static str); 4] = [
        (CmpType::Float, "FLOAT"),
        (CmpType::TotalOrder, "TOTALORDER"),
        (CmpType::Signed, "SIGNED"),
        (CmpType::Unsigned, "UNSIGNED"),
    ];
}

/// `[start:limit:stride]` of one dimension of a `slice`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceRange {
    pub start: i64,
    pub limit: i64,
    pub stride: i64,
}

/// `lo_hi_interior` of one dimension of a `pad`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PadDim {
    pub lo: i64,
    pub hi: i64,
    pub interior: i64,
}

/// One spatial dimension of a `window={...}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowDim {
    pub size: i64,
    pub stride: i64,
    pub pad_lo: i64,
    pub pad_hi: i64,
    pub lhs_dilate: i64,
    pub rhs_dilate: i64,
    pub reversal: bool,
}

impl Default for WindowDim {
    fn default() -> WindowDim {
        WindowDim {
            size: 1,
            stride: 1,
            pad_lo: 0,
            pad_hi: 0,
            lhs_dilate: 1,
            rhs_dilate: 1,
            reversal: false,
        }
    }
}

/// A convolution or reduce-window window; empty for zero spatial dims.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Window {
    pub dims: Vec<WindowDim>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DotDims {
    pub lhs_batch: Vec<i64>,
    pub lhs_contracting: Vec<i64>,
    pub rhs_batch: Vec<i64>,
    pub rhs_contracting: Vec<i64>,
    /// `ragged-dot` only.
    pub lhs_ragged: Vec<i64>,
    /// `ragged-dot` only.
    pub rhs_group: Vec<i64>,
    pub precision: Vec<Precision>,
    /// `algorithm=dot_bf16_bf16_f32` and the like, verbatim.
    pub algorithm: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    Default,
    High,
    Highest,
}

impl Precision {
    pub const ALL: [(Precision, &'static str); 3] = [
        (Precision::Default, "default"),
        (Precision::High, "high"),
        (Precision::Highest, "highest"),
    ];
}

/// Which dimension of each convolution operand plays which role (`dim_labels`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvDims {
    pub input_batch: i64,
    pub input_feature: i64,
    pub input_spatial: Vec<i64>,
    pub kernel_input_feature: i64,
    pub kernel_output_feature: i64,
    pub kernel_spatial: Vec<i64>,
    pub output_batch: i64,
    pub output_feature: i64,
    pub output_spatial: Vec<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Convolution {
    pub window: Window,
    pub dims: ConvDims,
    pub feature_group_count: i64,
    pub batch_group_count: i64,
    pub precision: Vec<Precision>,
    /// `convolution_kind=fprop|wgrad|dgrad`, a hint kept verbatim.
    pub kind: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GatherDims {
    pub offset_dims: Vec<i64>,
    pub collapsed_slice_dims: Vec<i64>,
    pub start_index_map: Vec<i64>,
    pub operand_batching_dims: Vec<i64>,
    pub start_indices_batching_dims: Vec<i64>,
    pub index_vector_dim: i64,
    pub slice_sizes: Vec<i64>,
    pub indices_are_sorted: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScatterDims {
    pub update_window_dims: Vec<i64>,
    pub inserted_window_dims: Vec<i64>,
    pub scatter_dims_to_operand_dims: Vec<i64>,
    pub input_batching_dims: Vec<i64>,
    pub scatter_indices_batching_dims: Vec<i64>,
    pub index_vector_dim: i64,
    pub indices_are_sorted: bool,
    pub unique_indices: bool,
    pub to_apply: CompId,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Branches {
    /// `true_computation=`/`false_computation=` with a `pred[]` selector.
    TrueFalse(CompId, CompId),
    /// `branch_computations={...}` with an `s32[]` selector.
    Indexed(Vec<CompId>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FusionKind {
    Loop,
    Input,
    Output,
    Custom,
}

impl FusionKind {
    pub const ALL: [(FusionKind, &'static str); 4] = [
        (FusionKind::Loop, "kLoop"),
        (FusionKind::Input, "kInput"),
        (FusionKind::Output, "kOutput"),
        (FusionKind::Custom, "kCustom"),
    ];
    /// The spelling in HLO text (`kLoop`).
    pub fn name(self) -> &'static str {
        match self {
            FusionKind::Loop => "kLoop",
            FusionKind::Input => "kInput",
            FusionKind::Output => "kOutput",
            FusionKind::Custom => "kCustom",
        }
    }
}

/// `{out_index}: (operand, {operand_index}[, kind])` of `output_to_operand_aliasing` and
/// of the module's `input_output_alias`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alias {
    pub output_index: Vec<i64>,
    pub operand: i64,
    pub operand_index: Vec<i64>,
    /// `may-alias` / `must-alias` when written.
    pub kind: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct CustomCall {
    pub target: String,
    pub api_version: Option<String>,
    pub has_side_effect: bool,
    pub operand_layout_constraints: Option<Vec<Shape>>,
    pub output_to_operand_aliasing: Vec<Alias>,
    pub called_computations: Vec<CompId>,
    pub to_apply: Option<CompId>,
    /// Rarely used custom-call attributes (`window`, `dim_labels`, `literal`, `schedule`,
    /// `padding_type`, ...), kept as written and printed back in order.
    pub extra: Vec<(String, String)>,
}

impl CustomCall {
    /// Targets that are identities on one device: sharding and placement annotations
    /// (`Sharding`, the SPMD shape markers, Shardy's markers, sharding-propagation
    /// barriers, host offload moves, layout constraints). Every single-device engine evaluates them as their one operand.
    pub fn is_single_device_identity(&self) -> bool {
        matches!(
            self.target.as_str(),
            "Sharding"
                | "SPMDFullToShardShape"
                | "SPMDShardToFullShape"
                | "xla.sdy.FuncResultSharding"
                | "xla.sdy.ShardingGroup"
                | "xla.sdy.PropagationBarrier"
                | "MoveToHost"
                | "MoveToDevice"
                | "annotate_device_placement"
                | "LayoutConstraint"
                | "ShardBarrierFrom"
                | "ShardBarrierTo"
        )
    }
}

/// Participant groups of a collective.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaGroups {
    /// `{{0,1},{2,3}}`; empty means one group of every device.
    Explicit(Vec<Vec<i64>>),
    /// `[G,S]<=[...]T(...)`.
    Iota(IotaList),
    /// `mesh['a'=4,'b'=2] {'a'}`: groups along named mesh axes (newest XLA); the axis
    /// selection is kept verbatim. `mesh[...], device_ids=([4,2]T(1,0)) {'a'}` numbers the
    /// mesh's positions (row-major over the axes) with the devices of an iota reshaped to
    /// the first list and transposed by `T(...)` (empty: not transposed), as XLA TPU prints
    /// a mesh laid on its torus.
    Mesh { axes: Vec<(String, i64)>, selection: String, device_ids: Option<(Vec<i64>, Vec<i64>)> },
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CollectiveAttrs {
    pub replica_groups: Option<ReplicaGroups>,
    pub channel_id: Option<i64>,
    pub use_global_device_ids: bool,
    pub constrain_layout: bool,
    /// `dimensions={d}` of all-gather, reduce-scatter, all-to-all.
    pub dimensions: Option<Vec<i64>>,
    pub to_apply: Option<CompId>,
    /// collective-permute.
    pub source_target_pairs: Option<Vec<(i64, i64)>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RngDistribution {
    Uniform,
    Normal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RngAlgorithm {
    Default,
    ThreeFry,
    Philox,
}
