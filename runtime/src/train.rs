//! [`TrainStep`]: a compiled training step whose parameters and optimizer state stay
//! resident between steps. The step function follows JAX's convention
//! `step(state..., batch...) -> (loss, new_state...)`: the first `state.len()` entry
//! parameters are the state, the rest the batch; output 0 is the loss and outputs
//! `1..=state.len()` replace the state (further outputs, e.g. metrics, are kept in
//! [`TrainStep::outputs`]).
//!
//! After the first step nothing is allocated: the outputs are written into tensors kept
//! from the previous step, and the new state is swapped in.

use hlo_ir::Tensor;

use crate::program::{Program, RuntimeError};

pub struct TrainStep {
    program: Program,
    state: Vec<Tensor>,
    outs: Vec<Tensor>,
    steps: u64,
}

impl TrainStep {
    /// `state`: the initial values of the leading entry parameters.
    pub fn new(program: Program, state: Vec<Tensor>) -> Result<TrainStep, RuntimeError> {
        let exe = program.executable();
        let (np, no) = (exe.param_shapes().len(), exe.output_shapes().len());
        if state.len() >= np {
            return Err(RuntimeError::Run(format!(
                "{} state tensors for a step with {np} parameters: no batch parameters left",
                state.len()
            )));
        }
        if no < state.len() + 1 {
            return Err(RuntimeError::Run(format!(
                "the step has {no} outputs; a loss and {} new state tensors are needed",
                state.len()
            )));
        }
        for (i, t) in state.iter().enumerate() {
            let (want, got_o) = (&exe.param_shapes()[i], &exe.output_shapes()[i + 1]);
            if !same(&t.shape(), want) {
                return Err(RuntimeError::Run(format!(
                    "state {i}: the step's parameter {i} is {want}, given {}",
                    t.shape()
                )));
            }
            if !same(got_o, want) {
                return Err(RuntimeError::Run(format!(
                    "output {} ({got_o}) cannot replace parameter {i} ({want})",
                    i + 1
                )));
            }
        }
        Ok(TrainStep { program, state, outs: Vec::new(), steps: 0 })
    }

    /// Runs one step on `batch` (the remaining parameters, in order) and returns the loss.
    pub fn step(&mut self, batch: &[Tensor]) -> Result<f32, RuntimeError> {
        let program = self.program.clone();
        self.step_on(&program, batch)
    }

    /// Runs one step with another program over the same state (e.g. the same step
    /// compiled for another batch-size bucket).
    pub fn step_on(&mut self, program: &Program, batch: &[Tensor]) -> Result<f32, RuntimeError> {
        program.executable().run_into(&self.state, batch, &mut self.outs, None)?;
        for (s, o) in self.state.iter_mut().zip(self.outs[1..].iter_mut()) {
            std::mem::swap(s, o);
        }
        self.steps += 1;
        let loss = &self.outs[0];
        match loss.elem() {
            hlo_ir::ElemType::F32 => Ok(f32::from_le_bytes(
                loss.bytes()[..4].try_into().map_err(|_| RuntimeError::Run("empty loss".into()))?,
            )),
            hlo_ir::ElemType::BF16 => {
                Ok(half::bf16::from_le_bytes([loss.bytes()[0], loss.bytes()[1]]).to_f32())
            }
            e => Err(RuntimeError::Run(format!("the loss is {e}, not a float"))),
        }
    }

    /// The current state (parameters and optimizer state).
    pub fn state(&self) -> &[Tensor] {
        &self.state
    }
    /// The last step's outputs (output 0 is the loss; the state outputs hold the previous
    /// state after the swap).
    pub fn outputs(&self) -> &[Tensor] {
        &self.outs
    }
    pub fn steps(&self) -> u64 {
        self.steps
    }
    pub fn program(&self) -> &Program {
        &self.program
    }
}

/// Same element type and dims (layouts aside).
fn same(a: &hlo_ir::Shape, b: &hlo_ir::Shape) -> bool {
    match (a.as_array(), b.as_array()) {
        (Some(x), Some(y)) => x.elem == y.elem && x.dims == y.dims,
        _ => false,
    }
}
