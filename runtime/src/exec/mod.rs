//! Executables: an optimized module planned into steps over buffers, its kernels compiled,
//! and the executor that runs the steps.
//!
//! Planning walks each computation in the order of [`hlo_ir::schedule::Schedule`]
//! (the linearization the interpreter uses):
//! - parameters, constants, `tuple`, `get-tuple-element`, `reshape`, `bitcast`, `copy` and
//!   identity custom-calls produce no step: they name existing buffers (buffers are
//!   immutable once written, and row-major reshapes do not move bytes);
//! - every other elementwise or data-movement instruction, `reduce`, `reduce-window`,
//!   `gather` and every fusion becomes a Cranelift loop kernel; inside a fusion only the
//!   root's arrays and the operands of library calls are materialized;
//! - `dot` and `convolution` call library kernels (`hlo-kernels`, through [`crate::library`]);
//! - `while` and `conditional` become nested step lists over their own buffers; the values
//!   a loop body or a branch returns are written into the loop state or the results as one
//!   parallel copy (`Planner::parallel_copy`): sources are compared by the buffer whose
//!   bytes they are (a reshape, bitcast or copy is a view of another buffer), so a body
//!   that swaps state slots, through views or not, reads every source before it is
//!   overwritten.
//!
//! Buffers get offsets in one arena from their live intervals (first definition to last
//! use, in one step numbering across nested computations), reusing the space of dead
//! buffers; an arena is allocated on a program's first run and reused afterwards.
//!
//! - [`plan`]: what the planner hands the executor: buffers, values, steps;
//! - [`planner`]: the module planned into steps and its kernels compiled
//!   ([`Executable::compile`]);
//! - [`executor`]: the steps run over one arena ([`Executable::run_on`]).

mod executor;
mod plan;
mod planner;

use std::sync::Mutex;

use hlo_ir::Shape;

use crate::jit::JitCode;
use executor::Scratch;
use plan::{Buffer, Slot, Step};

pub use executor::{Device, Stats};
pub use plan::KernelKind;

/// A compiled program: kernels, steps and the buffer plan.
pub struct Executable {
    code: JitCode,
    consts: Vec<Vec<u64>>,
    bufs: Vec<Buffer>,
    arena_bytes: usize,
    steps: Vec<Step>,
    params: Vec<Shape>,
    param_slots: Vec<Slot>,
    outputs: Vec<Slot>,
    output_shapes: Vec<Shape>,
    arenas: Mutex<Vec<Scratch>>,
    /// The `rng-get-and-update-state` counters by (device, instruction), created at XLA
    /// CPU's initial value on first use (`hlo_interp::rng`). They live as long
    /// as the executable, so repeated runs, clones of a `Program` and cache hits continue
    /// one stream, as repeated executions of one XLA executable do; SPMD devices each
    /// have their own.
    rng: Mutex<std::collections::HashMap<(usize, usize), u128>>,
    pub kernel_count: usize,
    /// Whether a run on one device runs on a thread of the pool ([`plan::parallel_steps`]
    /// at least [`plan::IN_POOL_STEPS`]).
    in_pool: bool,
}

impl Executable {
    pub fn param_shapes(&self) -> &[Shape] {
        &self.params
    }
    pub fn output_shapes(&self) -> &[Shape] {
        &self.output_shapes
    }
    pub fn arena_bytes(&self) -> usize {
        self.arena_bytes
    }
    pub fn code_bytes(&self) -> usize {
        self.code.code_bytes
    }
}
