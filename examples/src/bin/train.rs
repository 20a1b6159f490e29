//! Trains the bundled MLP with the JIT runtime: how a training binary embeds the toolchain.
//!
//! `cargo run --release -p hlo-examples --bin train -- [STEPS]`
//!
//! 1. Fixed batch: the training step (`models/mlp_train.hlo`, batch 16) is compiled once;
//!    every later step finds it in the shape-keyed cache. Parameters stay resident in a
//!    [`TrainStep`].
//! 2. Variable batch sizes: batches of 4..=32 rows are padded up to buckets of 8, 16 and
//!    32 rows (with a mask) and run on the batch-polymorphic masked step
//!    (`models/mlp_train_masked.hlo`): one compile per bucket, cache hits afterwards.
//!
//! The dataset is made here: 8 Gaussian clusters in 24 dimensions, one per class.

use std::io::IsTerminal;

use anyhow::{Context, Result, anyhow};
use hlo_ir::Tensor;
use hlo_runtime::{Runtime, TrainStep};
use hlo_runtime::{bucket, pad_dim};

/// Seeded (splitmix64), so every run sees the same data.
struct Rng(hlo_interp::seeded::SplitMix);
impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(hlo_interp::seeded::SplitMix(seed))
    }
    fn next(&mut self) -> u64 {
        self.0.next()
    }
    fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    fn normal(&mut self) -> f32 {
        let (u, v) = (self.uniform().max(1e-7), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
    }
}

const FEATURES: usize = 24;
const CLASSES: usize = 8;

/// `rows` examples: features near their class's centre, and the labels.
fn batch(rng: &mut Rng, centres: &[Vec<f32>], rows: usize) -> Result<(Tensor, Tensor)> {
    let (mut x, mut y) = (Vec::with_capacity(rows * FEATURES), Vec::with_capacity(rows));
    for _ in 0..rows {
        let c = (rng.next() % CLASSES as u64) as usize;
        x.extend(centres[c].iter().map(|m| m + 0.5 * rng.normal()));
        y.push(c as i32);
    }
    Ok((
        Tensor::from_f32(&[rows as u64, FEATURES as u64], &x)?,
        Tensor::from_i32(&[rows as u64], &y)?,
    ))
}

/// Small random initial weights (w1, b1, w2, b2).
fn init(rng: &mut Rng) -> Result<Vec<Tensor>> {
    let mut w = |dims: &[u64], scale: f32| -> Result<Tensor> {
        let n: u64 = dims.iter().product();
        Ok(Tensor::from_f32(dims, &(0..n).map(|_| scale * rng.normal()).collect::<Vec<_>>())?)
    };
    Ok(vec![w(&[24, 32], 0.2)?, w(&[32], 0.0)?, w(&[32, 8], 0.2)?, w(&[8], 0.0)?])
}

fn bar(steps: u64, what: &str) -> indicatif::ProgressBar {
    if std::io::stderr().is_terminal() {
        let b = indicatif::ProgressBar::new(steps);
        b.set_style(
            indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b.set_prefix(what.to_string());
        b
    } else {
        indicatif::ProgressBar::hidden()
    }
}

/// Parses and checks a module (the front door for text).
fn parse(src: &str, name: &str) -> Result<hlo_driver::Checked<hlo_ir::Module>> {
    hlo_driver::parse(src).map_err(|d| anyhow!(d.render(src, name, false)))
}

/// Parses and structurally verifies a shape-polymorphic module: the checks need concrete
/// shapes, so the runtime checks each specialization (one per bucket) instead.
fn parse_polymorphic(src: &str, name: &str) -> Result<hlo_ir::Module> {
    let (m, mut diags) = hlo_ir::text::parse(src);
    if let Some(m) = &m {
        diags.extend(hlo_ir::verify::verify_source(m, src));
    }
    match m {
        Some(m) if !diags.has_errors() => Ok(m),
        _ => Err(anyhow!(diags.render(src, name, false))),
    }
}

fn main() -> Result<()> {
    let steps: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()
        .context("STEPS must be a number")?
        .unwrap_or(100);
    let mut rng = Rng::new(42);
    let centres: Vec<Vec<f32>> =
        (0..CLASSES).map(|_| (0..FEATURES).map(|_| 1.5 * rng.normal()).collect()).collect();

    // 1. Fixed batch of 16.
    let fixed = parse(hlo_examples::MLP_TRAIN_HLO, "mlp_train.hlo")?;
    let rt = Runtime::new();
    let mut t = TrainStep::from_entry(rt.entry_checked("mlp_train.hlo", &fixed), init(&mut rng)?);
    let pb = bar(steps as u64, "fixed batch");
    println!("fixed batch of 16, {steps} steps:");
    for step in 0..steps {
        let (x, y) = batch(&mut rng, &centres, 16)?;
        let loss = t.step(&[x, y])?;
        if let Some(c) = t.last_compile()
            && let Some(miss) = c.outcome.miss()
        {
            pb.suspend(|| {
                println!(
                    "  compiled in {:.1} ms ({})",
                    c.program.compile_time.as_secs_f64() * 1e3,
                    miss.explanation()
                )
            });
        }
        pb.inc(1);
        pb.set_message(format!("loss {loss:.4}"));
        if step % (steps / 10).max(1) == 0 || step + 1 == steps {
            pb.suspend(|| println!("  step {step:4}: loss {loss:.6}"));
        }
    }
    pb.finish_and_clear();
    let s = rt.stats();
    println!("  cache: {} compile, {} hits", s.misses, s.hits);

    // 2. Variable batch sizes, padded to buckets.
    let masked = parse_polymorphic(
        include_str!("../../models/mlp_train_masked.hlo"),
        "mlp_train_masked.hlo",
    )?;
    let rt = Runtime::new();
    let buckets = [8usize, 16, 32];
    let mut t =
        TrainStep::from_entry(rt.entry("mlp_train_masked.hlo", &masked), init(&mut Rng::new(7))?);
    let pb = bar(steps as u64, "bucketed");
    println!("variable batch sizes 4..=32 in buckets {buckets:?}, {steps} steps:");
    for step in 0..steps {
        let rows = 4 + (rng.next() % 29) as usize;
        let (x, y) = batch(&mut rng, &centres, rows)?;
        let b = bucket(rows, &buckets).ok_or_else(|| anyhow!("no bucket for {rows} rows"))? as u64;
        let (x, mask) = pad_dim(&x, 0, b)?;
        let (y, _) = pad_dim(&y, 0, b)?;
        let mask = Tensor::from_f32(
            &[b],
            &mask.values::<bool>()?.map(|m| if m { 1.0 } else { 0.0 }).collect::<Vec<f32>>(),
        )?;
        let loss = t.step(&[x, y, mask])?;
        if let Some(c) = t.last_compile()
            && let Some(miss) = c.outcome.miss()
        {
            pb.suspend(|| {
                println!(
                    "  batch {rows:2} -> bucket {b:2}: compiled in {:.1} ms ({})",
                    c.program.compile_time.as_secs_f64() * 1e3,
                    miss.explanation().replace('\n', "; ")
                )
            });
        }
        pb.inc(1);
        pb.set_message(format!("loss {loss:.4}"));
        if step % (steps / 10).max(1) == 0 || step + 1 == steps {
            pb.suspend(|| {
                println!("  step {step:4}: batch {rows:2} (bucket {b:2}) loss {loss:.6}")
            });
        }
    }
    pb.finish_and_clear();
    let s = rt.stats();
    println!("  cache: {} compiles (one per bucket), {} hits", s.misses, s.hits);
    Ok(())
}
