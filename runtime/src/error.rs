//! The runtime's errors: [`RuntimeError`], with what the JIT refuses to compile
//! ([`Unsupported`]) and why a run failed ([`RunError`]) as enums, so that callers match on
//! what failed instead of on text.

use hlo_fabric::FabricError;
use hlo_ir::{ElemType, Opcode, Shape, TensorError};

use crate::checkpoint::CheckpointError;

/// Errors of compiling or running a program.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The module failed the checks or a compile phase: every diagnostic, located in the
    /// module's text where known (render them with [`hlo_ir::Diagnostics::render`]).
    #[error("compile error: {}", messages(.0))]
    Compile(hlo_ir::Diagnostics),
    /// An instruction the JIT does not compile (no silent fallback): which one, when known,
    /// and what about it.
    #[error("not supported by the JIT: {}{what}", named(.instruction))]
    Unsupported {
        /// The instruction refused, by name.
        instruction: Option<String>,
        /// What the JIT does not compile.
        what: Unsupported,
    },
    /// Bad arguments, or a failure while running.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A checkpoint could not be written, read, or restored into this step.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// One of the above, about the instruction written at this span of the module's
    /// source (for a `file:line:col` diagnostic; see [`RuntimeError::span`]).
    #[error("{1}")]
    At(hlo_ir::Span, Box<RuntimeError>),
}

/// The error messages of `d`, joined (the `Display` of [`RuntimeError::Compile`]).
fn messages(d: &hlo_ir::Diagnostics) -> String {
    let msgs: Vec<&str> = d.iter().filter(|d| d.is_error()).map(|d| d.message.as_str()).collect();
    msgs.join("; ")
}

/// "`name`: " for an instruction's name, or nothing.
pub(crate) fn named(instruction: &Option<String>) -> String {
    instruction.as_ref().map(|n| format!("`{n}`: ")).unwrap_or_default()
}

impl RuntimeError {
    /// The error without its location.
    pub fn kind(&self) -> &RuntimeError {
        match self {
            RuntimeError::At(_, e) => e.kind(),
            e => e,
        }
    }

    /// Where in the module's source the error is, when known.
    pub fn span(&self) -> Option<hlo_ir::Span> {
        match self {
            RuntimeError::At(s, _) => Some(*s),
            _ => None,
        }
    }

    /// Whether the JIT refused an instruction or type it does not compile.
    pub fn is_unsupported(&self) -> bool {
        self.unsupported().is_some()
    }

    /// What the JIT refused, when it refused something.
    pub fn unsupported(&self) -> Option<&Unsupported> {
        match self.kind() {
            RuntimeError::Unsupported { what, .. } => Some(what),
            _ => None,
        }
    }

    /// Why a run failed, when it did.
    pub fn run_error(&self) -> Option<&RunError> {
        match self.kind() {
            RuntimeError::Run(e) => Some(e),
            _ => None,
        }
    }

    /// The diagnostics of a compile error, when it is one.
    pub fn diagnostics(&self) -> Option<&hlo_ir::Diagnostics> {
        match self.kind() {
            RuntimeError::Compile(d) => Some(d),
            _ => None,
        }
    }

    /// The error without its location (for modules whose spans point into other text).
    pub(crate) fn unlocated(self) -> RuntimeError {
        match self {
            RuntimeError::At(_, e) => e.unlocated(),
            e => e,
        }
    }

    /// `e`, located at `span` when given.
    pub(crate) fn at(span: Option<hlo_ir::Span>, e: RuntimeError) -> RuntimeError {
        match span {
            Some(s) => RuntimeError::At(s, Box::new(e)),
            None => e,
        }
    }

    /// A compile error, located at its first error (errors of the checks and phases point
    /// at the instruction concerned).
    pub(crate) fn compile(d: hlo_ir::Diagnostics) -> RuntimeError {
        let span = d.iter().find(|d| d.is_error()).and_then(|d| d.span);
        RuntimeError::at(span, RuntimeError::Compile(d))
    }
}

/// What the JIT does not compile (it never falls back to another engine silently): the
/// reason of a [`RuntimeError::Unsupported`]. The interpreter and the TPU model compute
/// most of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unsupported {
    /// An operation the JIT has no kernel for.
    #[error("{} is not supported by the JIT runtime", .0.name())]
    Opcode(Opcode),
    /// An operation met inside a loop kernel (a fusion's body) that has no elemental form.
    #[error("{} has no elemental form in the JIT", .0.name())]
    NoElementalForm(Opcode),
    /// A custom-call target the JIT does not implement.
    #[error("custom-call target `{0}` is not supported by the JIT runtime")]
    CustomCall(String),
    /// An attribute the parser keeps (newer XLA attributes) but the JIT does not implement.
    #[error("`{attribute}=` on {} is not supported by the JIT runtime", .opcode.name())]
    Attribute {
        /// The attribute, as written.
        attribute: String,
        /// The operation it is on.
        opcode: Opcode,
    },
    /// An element type the JIT has no representation for.
    #[error("element type {0} is not supported by the JIT")]
    ElemType(ElemType),
    /// An operation on an element type the JIT does not compute it in.
    #[error("{} on {elem} is not supported by the JIT", .opcode.name())]
    OpOnType {
        /// The operation.
        opcode: Opcode,
        /// The element type.
        elem: ElemType,
    },
    /// A conversion between these element types.
    #[error("convert from {from} to {to} is not supported by the JIT")]
    Convert {
        /// The operand's element type.
        from: ElemType,
        /// The result's.
        to: ElemType,
    },
    /// A `bitcast-convert` between element types of different widths, elementwise.
    #[error("bitcast-convert from {from} to {to} changes the width")]
    BitcastConvertWidth {
        /// The operand's element type.
        from: ElemType,
        /// The result's.
        to: ElemType,
    },
    /// A `bitcast-convert` that packs or unpacks elements of a width the JIT has no
    /// integer type for.
    #[error("bitcast-convert of {0}-bit elements")]
    BitcastConvertBits(i64),
    /// A bitcast (or reshape) that changes the element type to one of another width.
    #[error("a bitcast from {from} to {to} (different widths)")]
    BitcastWidth {
        /// The operand's element type.
        from: ElemType,
        /// The result's.
        to: ElemType,
    },
    /// A bitcast whose result has another byte size than its operand.
    #[error("a bitcast that changes the byte size")]
    BitcastSize,
    /// A convolution of these element types: the library convolves f32, bf16 and f16
    /// into those, f64 operands into f64, and integer or pred operands into integers.
    #[error("{}", convolution(*.lhs, *.rhs, *.out))]
    Convolution {
        /// The input's element type.
        lhs: ElemType,
        /// The kernel's.
        rhs: ElemType,
        /// The result's.
        out: ElemType,
    },
    /// A loop kernel whose tuple-shaped result has arrays of different dims.
    #[error("a tuple-shaped result with arrays of different dims")]
    TupleResultDims,
    /// A shape with dynamic dimensions (the JIT compiles static shapes; the checks refuse
    /// dynamic ones, so only a module that skipped them gets here).
    #[error("the dynamic shape {0} (the JIT compiles static shapes)")]
    DynamicShape(Shape),
    /// A host function the generated code would call that the runtime does not have.
    #[error("no host function `{0}`")]
    HostFunction(String),
}

/// Why the library does not convolve these types (the `Display` of
/// [`Unsupported::Convolution`]).
fn convolution(lhs: ElemType, rhs: ElemType, out: ElemType) -> String {
    let ints = [lhs, rhs, out].iter().filter(|e| e.is_integer() || **e == ElemType::Pred).count();
    let f64s = [lhs, rhs, out].iter().filter(|&&e| e == ElemType::F64).count();
    if ints != 0 && ints != 3 {
        format!(
            "a convolution of {lhs} and {rhs} producing {out} (integer convolutions take integer or pred operands and results only)"
        )
    } else if f64s != 0 && f64s != 3 {
        format!(
            "a convolution of {lhs} and {rhs} producing {out} (f64 convolves f64 operands into f64 only)"
        )
    } else {
        format!(
            "a convolution producing {out} (the library convolves f32, bf16, f16, f64, integers and pred)"
        )
    }
}

/// Why a run failed: its arguments (or a training step's state) do not fit the program, or
/// something failed while it ran.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Not as many arguments as the program has parameters.
    #[error("the program takes {expected} argument{}, {given} given", plural(*.expected))]
    ArgumentCount {
        /// The program's parameters.
        expected: usize,
        /// The arguments given.
        given: usize,
    },
    /// An argument whose element type or dims differ from its parameter's.
    #[error("parameter {index}: expected {expected}, given {given}")]
    ArgumentShape {
        /// The parameter, from 0.
        index: usize,
        /// The parameter's shape.
        expected: Shape,
        /// The argument's.
        given: Shape,
    },
    /// The output tensors could not be made.
    #[error(transparent)]
    Output(TensorError),
    /// A run panicked while holding the pool of arenas.
    #[error("arena pool poisoned")]
    ArenaPoisoned,
    /// The run's arena (its working buffers) could not be allocated.
    #[error("the run's {} of working buffers could not be allocated (not enough memory left)", hlo_ir::tensor::format_bytes(*.bytes as u64))]
    Arena {
        /// The arena's size in bytes.
        bytes: usize,
    },
    /// A library kernel (dot, convolution, top-k) refused its operands.
    #[error("`{instruction}`: {reason}")]
    Kernel {
        /// The instruction it computes.
        instruction: String,
        /// What the kernel said.
        reason: String,
    },
    /// A collective failed: another device failed, its groups or operands do not fit the
    /// devices, or it needs more devices than the run has.
    #[error("`{instruction}`: {error}")]
    Collective {
        /// The collective instruction.
        instruction: String,
        /// What the fabric (or the one device) said.
        error: FabricError,
    },
    /// One device of an N-device run failed (the first to fail; the others were woken).
    #[error("device {device}: {error}")]
    Device {
        /// The device, from 0.
        device: usize,
        /// Its error.
        error: Box<RuntimeError>,
    },
    /// An N-device run failed without a device's error (a device thread panicked).
    #[error("{0}")]
    Devices(String),
    /// Inputs split per device whose count is not the program's device count.
    #[error("{given} device input sets for {devices} devices")]
    DeviceInputs {
        /// The input sets given.
        given: usize,
        /// The program's devices.
        devices: usize,
    },
    /// The global inputs do not fit the partitioned program (count, shapes).
    #[error("{0}")]
    ShardInputs(String),
    /// The devices' outputs could not be put back together into global outputs.
    #[error("{0}")]
    AssembleOutputs(String),
    /// A training step given as many state tensors as its step has parameters, or more.
    #[error("{state} state tensors for a step with {params} parameters: no batch parameters left")]
    NoBatchParameters {
        /// The state tensors given.
        state: usize,
        /// The step's parameters.
        params: usize,
    },
    /// A training step with too few outputs for a loss and the new state.
    #[error("the step has {outputs} outputs; a loss and {state} new state tensors are needed")]
    TooFewOutputs {
        /// The step's outputs.
        outputs: usize,
        /// The state tensors.
        state: usize,
    },
    /// A state tensor that does not fit the step's parameter it is passed as.
    #[error("state {index}: the step's parameter {index} is {expected}, given {given}")]
    StateShape {
        /// The state tensor (and parameter), from 0.
        index: usize,
        /// The parameter's shape.
        expected: Shape,
        /// The state tensor's.
        given: Shape,
    },
    /// A step output that cannot replace the state tensor it follows.
    #[error("output {output} ({shape}) cannot replace parameter {param} ({expected})")]
    StateOutput {
        /// The output, from 0 (output 0 is the loss).
        output: usize,
        /// Its shape.
        shape: Shape,
        /// The parameter (state tensor) it would replace.
        param: usize,
        /// The parameter's shape.
        expected: Shape,
    },
    /// Not one name per state tensor.
    #[error("{names} names for {state} state tensors")]
    StateNames {
        /// The names given.
        names: usize,
        /// The state tensors.
        state: usize,
    },
    /// Two state tensors given one name.
    #[error("two state tensors are named `{0}`")]
    DuplicateName(String),
    /// A training step whose loss (output 0) holds no value.
    #[error("empty loss")]
    EmptyLoss,
    /// A training step whose loss is not a float.
    #[error("the loss is {0}, not a float")]
    LossType(ElemType),
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
