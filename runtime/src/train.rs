//! [`TrainStep`]: a compiled training step whose parameters and optimizer state stay
//! resident between steps. The step function follows JAX's convention
//! `step(state..., batch...) -> (loss, new_state...)`: the first `state.len()` entry
//! parameters are the state, the rest the batch; output 0 is the loss and outputs
//! `1..=state.len()` replace the state (further outputs, e.g. metrics, are kept in
//! [`TrainStep::outputs`]).
//!
//! After the first step nothing is allocated: the outputs are written into tensors kept
//! from the previous step, and the new state is swapped in (on N devices,
//! [`TrainStep::spmd`], the global state is split per device every step and the new
//! state put back together).
//!
//! [`TrainStep::save`] and [`TrainStep::restore`] write and read the state as a
//! checkpoint ([`crate::checkpoint`]): a `safetensors` file recording the step count and
//! the program's fingerprint. A restored step continues bit for bit as if it had never
//! stopped: the state is everything a step reads besides the batch.

use std::path::Path;

use hlo_ir::{Shape, Tensor};

use crate::cache::Fingerprint;
use crate::checkpoint;
use crate::error::{RunError, RuntimeError};
use crate::program::{Program, RunOptions};
use crate::runtime::{Compiled, Entry};
use crate::spmd::SpmdProgram;

/// A training step with resident state. Made from one [`Program`] ([`TrainStep::new`]) or
/// from a runtime [`Entry`] ([`TrainStep::from_entry`]), which finds (or compiles) the
/// program for each batch's shapes, so batches of several sizes need no bookkeeping.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // loss = sum((w - x)^2); the step returns (loss, w - 0.2 (w - x)).
/// let module = hlo_driver::parse(hlo_runtime::doc_example::STEP)?;
/// let program = hlo_runtime::Program::compile(&module, &Default::default())?;
/// let w = hlo_ir::Tensor::from_f32(&[4], &[0.0; 4])?;
/// let mut step = hlo_runtime::TrainStep::new(program, vec![w])?; // w stays resident
/// let x = hlo_ir::Tensor::from_f32(&[4], &[1.0; 4])?;
/// let first = step.step(&[x.clone()])?;
/// for _ in 0..10 {
///     step.step(&[x.clone()])?;
/// }
/// assert!(step.step(&[x])? < first / 100.0);
/// assert_eq!(step.steps(), 12);
/// # Ok(())
/// # }
/// ```
pub struct TrainStep<'a> {
    source: Source<'a>,
    state: Vec<Tensor>,
    names: Vec<String>,
    outs: Vec<Tensor>,
    steps: u64,
}

enum Source<'a> {
    Program(Program),
    Entry { entry: Entry<'a>, last: Option<Compiled> },
    Spmd(Box<SpmdProgram>),
}

/// `state.0`, `state.1`, ...: the names of state tensors nobody named.
fn default_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("state.{i}")).collect()
}

impl TrainStep<'static> {
    /// A step running `program`; `state`: the initial values of its leading entry
    /// parameters (checked against the program's parameters and outputs).
    pub fn new(program: Program, state: Vec<Tensor>) -> Result<TrainStep<'static>, RuntimeError> {
        validate(program.param_shapes(), program.output_shapes(), &state)?;
        let names = default_names(state.len());
        Ok(TrainStep { source: Source::Program(program), state, names, outs: Vec::new(), steps: 0 })
    }

    /// A step running on the devices of `program` (data parallel, or however its
    /// shardings split the work); `state` holds global tensors, checked like
    /// [`TrainStep::new`]'s.
    pub fn spmd(
        program: SpmdProgram,
        state: Vec<Tensor>,
    ) -> Result<TrainStep<'static>, RuntimeError> {
        let (params, outputs) = program.signature();
        validate(&params, &outputs, &state)?;
        let names = default_names(state.len());
        let source = Source::Spmd(Box::new(program));
        Ok(TrainStep { source, state, names, outs: Vec::new(), steps: 0 })
    }
}

impl<'a> TrainStep<'a> {
    /// A step whose program comes from `entry` for each batch's shapes (the state's shapes
    /// stay fixed): one compile per batch shape, cache hits after that. The state is
    /// checked against the first program.
    pub fn from_entry(entry: Entry<'a>, state: Vec<Tensor>) -> TrainStep<'a> {
        let names = default_names(state.len());
        TrainStep {
            source: Source::Entry { entry, last: None },
            state,
            names,
            outs: Vec::new(),
            steps: 0,
        }
    }

    /// Names the state tensors (one distinct name each, in state order): the names a
    /// checkpoint stores them under (by default `state.0`, `state.1`, ...).
    pub fn with_names(mut self, names: Vec<String>) -> Result<TrainStep<'a>, RuntimeError> {
        if names.len() != self.state.len() {
            return Err(RunError::StateNames { names: names.len(), state: self.state.len() }.into());
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = names.iter().find(|n| !seen.insert(n.as_str())) {
            return Err(RunError::DuplicateName(dup.clone()).into());
        }
        self.names = names;
        Ok(self)
    }

    /// The state tensors' names, in state order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The fingerprint of the step's module (for a step made from an [`Entry`], of the
    /// entry's module, whatever batch shape it was compiled for).
    pub fn fingerprint(&self) -> Fingerprint {
        match &self.source {
            Source::Program(p) => p.fingerprint(),
            Source::Entry { entry, .. } => entry.fingerprint(),
            Source::Spmd(p) => p.fingerprint(),
        }
    }

    /// Writes the state, the step count and the program's fingerprint to `path` as a
    /// `safetensors` checkpoint, atomically: a crash leaves the previous file or the new
    /// one.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let module = hlo_driver::parse(hlo_runtime::doc_example::STEP)?;
    /// let program = hlo_runtime::Program::compile(&module, &Default::default())?;
    /// let (w, x) = (hlo_ir::Tensor::from_f32(&[4], &[0.0; 4])?, hlo_ir::Tensor::from_f32(&[4], &[1.0; 4])?);
    /// let new_step = |p| hlo_runtime::TrainStep::new(p, vec![w.clone()])?.with_names(vec!["w".into()]);
    /// let mut step = new_step(program.clone())?;
    /// step.step(&[x.clone()])?;
    /// let path = std::env::temp_dir().join(format!("doc-{}.safetensors", std::process::id()));
    /// step.save(&path)?;
    /// let mut resumed = new_step(program)?; // e.g. in a new process
    /// assert_eq!(resumed.restore(&path)?, 1); // the step count
    /// assert_eq!(resumed.state(), step.state());
    /// # std::fs::remove_file(&path)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), RuntimeError> {
        let tensors: Vec<(&str, &Tensor)> =
            self.names.iter().map(String::as_str).zip(&self.state).collect();
        checkpoint::save(path.as_ref(), self.steps, self.fingerprint(), &tensors)?;
        Ok(())
    }

    /// Replaces the state and the step count with the checkpoint at `path` and returns the
    /// step count. The checkpoint must come from this step's program, with the same
    /// tensor names, types and shapes; a damaged file is an error and the state is left
    /// as it was.
    pub fn restore(&mut self, path: impl AsRef<Path>) -> Result<u64, RuntimeError> {
        let path = path.as_ref();
        let ck = checkpoint::load(path)?;
        checkpoint::check_restores(path, &ck, self.fingerprint(), &self.names, &self.state)?;
        self.state = ck.tensors.into_iter().map(|(_, t)| t).collect();
        self.steps = ck.step;
        self.outs.clear();
        Ok(ck.step)
    }

    /// The program lookup of the last step (hit, or the miss with its explanation and
    /// compile time), for a step made with [`TrainStep::from_entry`].
    pub fn last_compile(&self) -> Option<&Compiled> {
        match &self.source {
            Source::Entry { last, .. } => last.as_ref(),
            Source::Program(_) | Source::Spmd(_) => None,
        }
    }

    /// Runs one step on `batch` (the remaining parameters, in order) and returns the loss.
    pub fn step(&mut self, batch: &[Tensor]) -> Result<f32, RuntimeError> {
        let program = match &mut self.source {
            Source::Program(p) => p.clone(),
            Source::Entry { entry, last } => {
                let shapes: Vec<Shape> =
                    self.state.iter().chain(batch).map(Tensor::shape).collect();
                let c = entry.program(&shapes)?;
                if c.outcome.miss().is_some() {
                    validate(c.program.param_shapes(), c.program.output_shapes(), &self.state)?;
                }
                let p = c.program.clone();
                *last = Some(c);
                p
            }
            Source::Spmd(p) => {
                self.outs = p.run_parts(&self.state, batch)?;
                return self.advance();
            }
        };
        self.step_on(&program, batch)
    }

    /// Runs one step with another program over the same state (e.g. the same step
    /// compiled for another batch-size bucket).
    pub fn step_on(&mut self, program: &Program, batch: &[Tensor]) -> Result<f32, RuntimeError> {
        program.run_with(&self.state, &mut self.outs, RunOptions::default().with_rest(batch))?;
        self.advance()
    }

    /// Swaps the new state in from the outputs; the loss.
    fn advance(&mut self) -> Result<f32, RuntimeError> {
        for (s, o) in self.state.iter_mut().zip(self.outs[1..].iter_mut()) {
            std::mem::swap(s, o);
        }
        self.steps += 1;
        let loss = &self.outs[0];
        // The first element's bytes (an empty loss is an error, not a panic).
        fn first<const N: usize>(b: &[u8]) -> Result<[u8; N], RunError> {
            b.get(..N).and_then(|b| b.try_into().ok()).ok_or(RunError::EmptyLoss)
        }
        let b = loss.bytes();
        match loss.elem() {
            hlo_ir::ElemType::F32 => Ok(f32::from_le_bytes(first(b)?)),
            hlo_ir::ElemType::BF16 => Ok(half::bf16::from_le_bytes(first(b)?).to_f32()),
            hlo_ir::ElemType::F16 => Ok(half::f16::from_le_bytes(first(b)?).to_f32()),
            e => Err(RunError::LossType(e).into()),
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
    /// How many steps ran.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The program of the last step (the only one for [`TrainStep::new`]; none on N
    /// devices).
    pub fn program(&self) -> Option<&Program> {
        match &self.source {
            Source::Program(p) => Some(p),
            Source::Entry { last, .. } => last.as_ref().map(|c| &c.program),
            Source::Spmd(_) => None,
        }
    }
}

/// `state` fits the leading parameters of `program`, and outputs `1..=state.len()` can
/// replace it.
fn validate(params: &[Shape], outputs: &[Shape], state: &[Tensor]) -> Result<(), RuntimeError> {
    let (np, no) = (params.len(), outputs.len());
    if state.len() >= np {
        return Err(RunError::NoBatchParameters { state: state.len(), params: np }.into());
    }
    if no < state.len() + 1 {
        return Err(RunError::TooFewOutputs { outputs: no, state: state.len() }.into());
    }
    for (i, t) in state.iter().enumerate() {
        let (want, got_o) = (&params[i], &outputs[i + 1]);
        if !same(&t.shape(), want) {
            return Err(RunError::StateShape {
                index: i,
                expected: want.clone(),
                given: t.shape(),
            }
            .into());
        }
        if !same(got_o, want) {
            return Err(RunError::StateOutput {
                output: i + 1,
                shape: got_o.clone(),
                param: i,
                expected: want.clone(),
            }
            .into());
        }
    }
    Ok(())
}

/// Same element type and dims (layouts aside).
fn same(a: &hlo_ir::Shape, b: &hlo_ir::Shape) -> bool {
    match (a.as_array(), b.as_array()) {
        (Some(x), Some(y)) => x.elem == y.elem && x.dims == y.dims,
        _ => false,
    }
}
