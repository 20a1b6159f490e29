//! Trains the bundled byte-level transformer language model on Shakespeare's sonnets, data
//! parallel on N host devices: what a training binary built on the toolchain looks like.
//!
//! `cargo run --release -p hlo-examples --bin train_lm` (defaults: 300 steps, 2 devices,
//! checkpoints every 50 steps in `target/train_lm/`).
//!
//! - The step (`models/transformer_lm.hlo`, exported from JAX on one device) is annotated
//!   for data parallelism (state replicated, batch split), partitioned and compiled once;
//!   each device is a thread, gradients meet in an all-reduce.
//! - Every `--every` steps the state (weights, AdamW moments, step count) is written as a
//!   `safetensors` checkpoint, `latest.safetensors`, with the losses so far
//!   (`losses.csv`). Started again, the run resumes from the checkpoint (`--fresh` starts
//!   over): batches depend only on the seed and the step number, so an interrupted and
//!   resumed run computes the same bits as one that never stopped.
//! - At the end the loss curve is drawn to `loss.svg`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use hlo_examples::lm::{self, Model};
use hlo_runtime::{CompileOptions, SpmdProgram, TrainStep};

#[derive(Parser)]
#[command(about = "Train the bundled transformer language model on N host devices")]
struct Args {
    /// Train until this many steps have run (counting those before a resume).
    #[arg(long, default_value_t = 300)]
    steps: u64,
    /// Host devices (threads) the batch is split over; must divide the batch (16).
    #[arg(long, default_value_t = 2)]
    devices: usize,
    /// Where checkpoints, the losses and the curve go.
    #[arg(long, default_value = "target/train_lm")]
    dir: PathBuf,
    /// Steps between checkpoints.
    #[arg(long, default_value_t = 50)]
    every: u64,
    /// Start over even if the directory holds a checkpoint.
    #[arg(long)]
    fresh: bool,
    /// Seed of the initial weights and of the batches.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Train on this text file instead of the bundled sonnets.
    #[arg(long)]
    text: Option<PathBuf>,
    /// Stop abruptly (exit code 130, no checkpoint) after this step: what an interrupted
    /// run leaves behind, for trying the resume.
    #[arg(long, hide = true)]
    crash_after: Option<u64>,
}

const CHECKPOINT: &str = "latest.safetensors";
const LOSSES: &str = "losses.csv";

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<()> {
    let model = Model::bundled()?;
    let text = match &args.text {
        Some(p) => std::fs::read(p).with_context(|| format!("reading {}", p.display()))?,
        None => lm::TEXT.to_vec(),
    };
    if args.every == 0 {
        bail!("--every must be at least 1");
    }
    let module = hlo_driver::parse(lm::HLO)
        .map_err(|d| anyhow!(d.render(lm::HLO, "transformer_lm.hlo", false)))?;
    let sharded = hlo_spmd::annotate::data_parallel(&module, args.devices, model.state_len())
        .map_err(|d| {
            anyhow!(hlo_ir::Diagnostics::from(d).render(lm::HLO, "transformer_lm.hlo", false))
        })?;
    let sharded = hlo_driver::check(sharded, None)
        .map_err(|d| anyhow!(d.render(lm::HLO, "transformer_lm.hlo", false)))?;
    let program = SpmdProgram::compile(&sharded, args.devices, &CompileOptions::default())?;
    println!(
        "transformer LM: {} parameters, {} layers, d_model {}, batch {} x {} bytes; \
         {} devices, compiled in {:.1} s",
        model.params,
        model.config["layers"],
        model.config["d_model"],
        model.batch,
        model.window - 1,
        program.devices(),
        program.compile_time.as_secs_f64()
    );
    let mut step = TrainStep::spmd(program, model.init(args.seed)?)?.with_names(model.names())?;

    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let ck = args.dir.join(CHECKPOINT);
    let mut losses: Vec<(u64, f32)> = Vec::new();
    if ck.exists() && !args.fresh {
        let at = step.restore(&ck)?;
        losses = read_losses(&args.dir.join(LOSSES), at)?;
        println!("resumed from step {at} ({})", ck.display());
    }

    let start = step.steps();
    let pb = bar(args.steps.saturating_sub(start));
    let t = Instant::now();
    for k in start..args.steps {
        let loss = step.step(&[model.batch(&text, args.seed, k)?])?;
        if !loss.is_finite() {
            bail!("step {k}: the loss is {loss}");
        }
        losses.push((k, loss));
        pb.inc(1);
        let done = k + 1 - start;
        let rate =
            done as f64 * (model.batch * (model.window - 1)) as f64 / t.elapsed().as_secs_f64();
        pb.set_message(format!("loss {loss:.3}  {rate:.0} tokens/s"));
        if k == start || (k + 1) % 25 == 0 {
            pb.suspend(|| println!("step {:4}: loss {loss:.4}", k + 1));
        }
        if args.crash_after == Some(k + 1) {
            pb.suspend(|| println!("stopping abruptly after step {}", k + 1));
            std::process::exit(130);
        }
        if (k + 1) % args.every == 0 || k + 1 == args.steps {
            step.save(&ck)?;
            write_losses(&args.dir.join(LOSSES), &losses)?;
            pb.suspend(|| println!("checkpoint at step {}: {}", k + 1, ck.display()));
        }
    }
    pb.finish_and_clear();
    let ran = args.steps.saturating_sub(start);
    if ran > 0 {
        let secs = t.elapsed().as_secs_f64();
        println!(
            "{ran} steps in {secs:.1} s: {:.0} ms/step, {:.1} GFLOP/s",
            secs * 1e3 / ran as f64,
            model.flops_per_step * ran as f64 / secs / 1e9
        );
    }
    if losses.len() >= 2 {
        let avg = |s: &[(u64, f32)]| s.iter().map(|l| f64::from(l.1)).sum::<f64>() / s.len() as f64;
        let w = (losses.len() / 10).max(1);
        println!(
            "mean loss: first {w} steps {:.3}, last {w} steps {:.3} (ln 256 = {:.3})",
            avg(&losses[..w]),
            avg(&losses[losses.len() - w..]),
            256f64.ln()
        );
        let svg = args.dir.join("loss.svg");
        plot(&svg, &losses, args.devices)?;
        println!("loss curve: {}", svg.display());
    }
    Ok(())
}

fn bar(steps: u64) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new(steps);
    b.set_style(
        indicatif::ProgressStyle::with_template("[{elapsed_precise}] [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    b
}

/// `losses.csv` (`step,loss`) up to step `upto`; written beside each checkpoint, so it
/// covers at least that far.
fn read_losses(path: &Path, upto: u64) -> Result<Vec<(u64, f32)>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let parsed = line
            .split_once(',')
            .and_then(|(s, l)| Some((s.parse::<u64>().ok()?, l.parse::<f32>().ok()?)));
        let (s, l) =
            parsed.ok_or_else(|| anyhow!("{}:{}: not `step,loss`", path.display(), i + 1))?;
        if s < upto {
            out.push((s, l));
        }
    }
    Ok(out)
}

/// Writes `losses.csv` atomically.
fn write_losses(path: &Path, losses: &[(u64, f32)]) -> Result<()> {
    let mut text = String::from("step,loss\n");
    for (s, l) in losses {
        text.push_str(&format!("{s},{l}\n"));
    }
    hlo_ir::atomic::write(path, text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// The loss per step and its 20-step moving average, as SVG.
fn plot(path: &Path, losses: &[(u64, f32)], devices: usize) -> Result<()> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (720, 420)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let last = losses.last().map_or(1, |l| l.0 + 1);
    let top = losses.iter().map(|l| l.1).fold(0.0f32, f32::max).max(1.0) * 1.05;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("byte-level transformer LM on the sonnets, {devices} host devices"),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d(0u64..last, 0f32..top)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("training loss (nats per byte)")
        .draw()
        .map_err(|e| err(&e))?;
    chart
        .draw_series(LineSeries::new(
            losses.iter().map(|&(s, l)| (s + 1, l)),
            RGBColor(160, 190, 230),
        ))
        .map_err(|e| err(&e))?
        .label("loss")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RGBColor(160, 190, 230)));
    let avg: Vec<(u64, f32)> = losses
        .iter()
        .enumerate()
        .map(|(i, &(s, _))| {
            let w = &losses[i.saturating_sub(19)..=i];
            (s + 1, w.iter().map(|l| l.1).sum::<f32>() / w.len() as f32)
        })
        .collect();
    chart
        .draw_series(LineSeries::new(avg, BLUE.stroke_width(2)))
        .map_err(|e| err(&e))?
        .label("20-step mean")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLUE.stroke_width(2)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
