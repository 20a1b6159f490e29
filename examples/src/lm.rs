//! The bundled transformer language model: one training step exported from JAX
//! (`models/gen_transformer_lm.py`: a 2-layer byte-level decoder, bf16 activations, f32
//! master weights, AdamW), the description of its state (`models/transformer_lm.json`),
//! and the text it learns (`data/sonnets.txt`).
//!
//! The step is `step(params..., mu..., nu..., count, tokens) -> (loss, params'..., mu'...,
//! nu'..., count')`: the state is every parameter but the last, which is a batch of byte
//! windows `s32[B, S+1]` (inputs are `tokens[:, :-1]`, targets `tokens[:, 1:]`).

use anyhow::{Context, Result, anyhow, bail};
use hlo_interp::seeded::SplitMix;
use hlo_ir::{ElemType, Tensor};

/// The step's HLO text.
pub const HLO: &str = include_str!("../models/transformer_lm.hlo");
/// What the exporting script wrote about the step: configuration, state, reference.
pub const DESCRIPTION: &str = include_str!("../models/transformer_lm.json");
/// The training text.
pub const TEXT: &[u8] = include_bytes!("../data/sonnets.txt");

/// How one state tensor starts.
#[derive(Debug, Clone, Copy)]
enum Init {
    Normal(f64),
    Zeros,
    Ones,
}

/// One state tensor as the description gives it.
#[derive(Debug, Clone)]
struct Spec {
    name: String,
    elem: ElemType,
    dims: Vec<u64>,
    init: Init,
}

/// The model's description, read from [`DESCRIPTION`].
#[derive(Debug, Clone)]
pub struct Model {
    specs: Vec<Spec>,
    /// Sequences per global batch.
    pub batch: usize,
    /// Bytes per sequence, the predicted next byte included (`S + 1`).
    pub window: usize,
    /// Trainable parameters.
    pub params: u64,
    /// Model FLOPs of one step (the exporter's count).
    pub flops_per_step: f64,
    /// The configuration, as JSON.
    pub config: serde_json::Value,
    /// The losses XLA computed for the reference run (see [`Model::reference_state`]).
    pub reference_losses: Vec<f64>,
}

fn dims_of(v: &serde_json::Value) -> Result<Vec<u64>> {
    v.as_array()
        .ok_or_else(|| anyhow!("a shape is not a list"))?
        .iter()
        .map(|d| d.as_u64().ok_or_else(|| anyhow!("a dimension is not a number")))
        .collect()
}

impl Model {
    /// Reads [`DESCRIPTION`].
    pub fn bundled() -> Result<Model> {
        Model::from_json(DESCRIPTION)
    }

    /// Reads a description in the format `gen_transformer_lm.py` writes.
    pub fn from_json(text: &str) -> Result<Model> {
        let d: serde_json::Value = serde_json::from_str(text).context("the model description")?;
        let mut specs = Vec::new();
        for s in d["state"].as_array().ok_or_else(|| anyhow!("no `state` list"))? {
            let name = s["name"].as_str().ok_or_else(|| anyhow!("a state tensor has no name"))?;
            let elem = s["dtype"]
                .as_str()
                .and_then(ElemType::from_name)
                .ok_or_else(|| anyhow!("`{name}`: unknown dtype {}", s["dtype"]))?;
            let init = match s["init"]["kind"].as_str() {
                Some("normal") => Init::Normal(
                    s["init"]["std"].as_f64().ok_or_else(|| anyhow!("`{name}`: no std"))?,
                ),
                Some("zeros") => Init::Zeros,
                Some("ones") => Init::Ones,
                k => bail!("`{name}`: unknown init {k:?}"),
            };
            specs.push(Spec { name: name.into(), elem, dims: dims_of(&s["shape"])?, init });
        }
        let batch = dims_of(&d["batch"]["shape"])?;
        let [b, w] = batch[..] else { bail!("the batch is not [B, S+1]") };
        let reference_losses = d["reference"]["losses"]
            .as_array()
            .map(|l| l.iter().filter_map(|v| v.as_f64()).collect())
            .unwrap_or_default();
        Ok(Model {
            specs,
            batch: b as usize,
            window: w as usize,
            params: d["num_params"].as_u64().unwrap_or(0),
            flops_per_step: d["flops_per_step"].as_f64().unwrap_or(0.0),
            config: d["config"].clone(),
            reference_losses,
        })
    }

    /// The state tensors' names, in state order (`params.*`, `adam.mu.*`, `adam.nu.*`,
    /// `adam.count`).
    pub fn names(&self) -> Vec<String> {
        self.specs.iter().map(|s| s.name.clone()).collect()
    }

    /// How many state tensors the step takes before the batch.
    pub fn state_len(&self) -> usize {
        self.specs.len()
    }

    fn build(&self, value: impl Fn(usize, &Spec, usize) -> f64) -> Result<Vec<Tensor>> {
        self.specs
            .iter()
            .enumerate()
            .map(|(t, s)| {
                let n: u64 = s.dims.iter().product();
                let v: Vec<f64> = (0..n as usize).map(|k| value(t, s, k)).collect();
                Ok(match s.elem {
                    ElemType::F32 => {
                        Tensor::from_f32(&s.dims, &v.iter().map(|&x| x as f32).collect::<Vec<_>>())?
                    }
                    ElemType::S32 => {
                        Tensor::from_i32(&s.dims, &v.iter().map(|&x| x as i32).collect::<Vec<_>>())?
                    }
                    e => bail!("`{}`: state of type {e}", s.name),
                })
            })
            .collect()
    }

    /// Fresh state: normal weights from a seeded generator, ones and zeros as described.
    pub fn init(&self, seed: u64) -> Result<Vec<Tensor>> {
        let rng = std::cell::RefCell::new(SplitMix(seed ^ 0x005e_ed0f_1a7e));
        self.build(|_, s, _| match s.init {
            Init::Normal(std) => std * normal(&mut rng.borrow_mut()),
            Init::Zeros => 0.0,
            Init::Ones => 1.0,
        })
    }

    /// The state of the exporter's reference run: element `k` of normal tensor `t` is
    /// `std * sin(1 + k + 1000 t)` (in f64, rounded to f32).
    pub fn reference_state(&self) -> Result<Vec<Tensor>> {
        self.build(|t, s, k| match s.init {
            Init::Normal(std) => std * (1.0 + k as f64 + 1000.0 * t as f64).sin(),
            Init::Zeros => 0.0,
            Init::Ones => 1.0,
        })
    }

    /// The reference run's batch: the first `B * (S+1)` bytes of `text`.
    pub fn reference_batch(&self, text: &[u8]) -> Result<Tensor> {
        let n = self.batch * self.window;
        if text.len() < n {
            bail!("the text has {} bytes; the reference batch takes {n}", text.len());
        }
        let v: Vec<i32> = text[..n].iter().map(|&b| i32::from(b)).collect();
        Ok(Tensor::from_i32(&[self.batch as u64, self.window as u64], &v)?)
    }

    /// The batch of step `step`: `B` windows of `S+1` bytes at offsets drawn from
    /// (`seed`, `step`), so a resumed run sees the batches an uninterrupted one would.
    pub fn batch(&self, text: &[u8], seed: u64, step: u64) -> Result<Tensor> {
        if text.len() <= self.window {
            bail!("the text has {} bytes; a window takes {}", text.len(), self.window);
        }
        let mut rng = SplitMix(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ step);
        let span = (text.len() - self.window) as u64;
        let mut v = Vec::with_capacity(self.batch * self.window);
        for _ in 0..self.batch {
            let at = (rng.next() % (span + 1)) as usize;
            v.extend(text[at..at + self.window].iter().map(|&b| i32::from(b)));
        }
        Ok(Tensor::from_i32(&[self.batch as u64, self.window as u64], &v)?)
    }
}

/// A standard normal sample (Box-Muller).
fn normal(rng: &mut SplitMix) -> f64 {
    let u = ((rng.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let v = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}
