//! `hloc compile`: lowers a whole module onto the TPU model and reports, prints or traces
//! it; and the `tpu` engine of `hloc run` (outputs computed by the model).

use std::path::{Path, PathBuf};
use std::time::Instant;

use hlo_analysis::memory_usage::{MemoryUsage, memory_usage};
use hlo_check::Checked;
use hlo_chip::chip;
use hlo_chip::config::TpuConfig;
use hlo_driver::{Optimizer, Tpu};
use hlo_engine::{TpuExecutable, TpuModel};
use hlo_ir::Module;
use hlo_ir::op::Precision;
use hlo_tools::error::CliError;
use hlo_tools::predict;
pub use hlo_tools::predict::{apply_trip_counts, chips_report, config};
use hlo_tools::predict::{hbm_json, hbm_line, mfu_json, mfu_line, peak_rss_bytes};
use hlo_tpu::engine::Run;
use hlo_tpu::lower::Passes;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Emit {
    /// Per-op and total cycles, step time, utilization, HBM bytes, bounds, critical path.
    Report,
    /// The lowered program: buffers, kernels with their split, tiles, VMEM slots and work.
    Tiles,
    /// A Chrome trace (open in https://ui.perfetto.dev): one process per core, one track
    /// per unit (MXU, VPU, EUP, XLU, DMA).
    Trace,
}

/// The MXU precision of f32 matmuls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PrecisionArg {
    /// One bf16 pass (what JAX asks a TPU for by default).
    Default,
    /// Three bf16 passes (bf16_3x).
    High,
    /// Six bf16 passes (bf16_6x: f32-accurate products).
    Highest,
}

pub fn passes_of(p: Option<PrecisionArg>) -> Passes {
    match p {
        None => Passes::AsWritten,
        Some(PrecisionArg::Default) => Passes::All(Precision::Default),
        Some(PrecisionArg::High) => Passes::All(Precision::High),
        Some(PrecisionArg::Highest) => Passes::All(Precision::Highest),
    }
}

fn parse_trip_count(s: &str) -> Result<(String, u64), String> {
    let (name, n) = s.rsplit_once('=').ok_or("expected LOOP=N, e.g. while.3=48")?;
    let n = n.trim().parse().map_err(|e| format!("trip count `{n}`: {e}"))?;
    Ok((name.trim().trim_start_matches('%').to_string(), n))
}

#[derive(clap::Args, Debug)]
pub struct CompileArgs {
    /// The HLO text file, or `-` for standard input.
    pub file: PathBuf,
    /// The chip: v2 (2 cores x 1 MXU), v3 (2 x 2), v4 (2 x 4), v5e (1 x 4), v5p (2 x 4).
    #[arg(long, default_value = "v4")]
    pub config: String,
    /// What to produce.
    #[arg(long, value_enum, default_value_t = Emit::Report)]
    pub emit: Emit,
    /// Write it here (written to a temporary file, then renamed) instead of standard output.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// The report as JSON.
    #[arg(long)]
    pub json: bool,
    /// MXU precision of f32 matmuls (default: as each dot's operand_precision says).
    #[arg(long, value_enum)]
    pub precision: Option<PrecisionArg>,
    /// Inputs (.npz, p0..pN) to follow data-dependent control flow (while loops whose
    /// trip count the program does not state, conditionals on computed values); without
    /// them such a module runs on seeded inputs when they fit in memory.
    #[arg(long)]
    pub inputs: Option<PathBuf>,
    /// The trip count of a data-dependent while loop, by name (`--trip-count while.3=48`;
    /// repeatable): the module is then timed from shapes alone.
    #[arg(long, value_name = "LOOP=N", value_parser = parse_trip_count)]
    pub trip_count: Vec<(String, u64)>,
    /// The model's FLOPs per chip and step, to report the model FLOPs utilization (MFU)
    /// beside the hardware's (HFU, from the FLOPs the program executes). MaxText and PaLM
    /// count 6 x parameters x tokens plus attention, divided by the chips.
    #[arg(long, value_name = "FLOPS")]
    pub model_flops: Option<f64>,
    /// Ops listed in the text report.
    #[arg(long, default_value_t = 25)]
    pub top: usize,
    /// Skip the optimization pipeline (the module is already optimized).
    #[arg(long)]
    pub no_opt: bool,
    /// Simulate N chips linked by the preset's ICI: shardings are propagated, the module
    /// partitioned and the per-chip program optimized; collectives are timed on the ICI
    /// and overlapped with compute. Must match the shardings' device count.
    #[arg(long)]
    pub chips: Option<usize>,
    /// The chips form this many slices joined by the data-center network (with
    /// `--chips`; consecutive device ids share a slice, as a mesh with its DCN axis
    /// outermost numbers them): collectives whose groups span slices cross the DCN.
    #[arg(long, requires = "chips", value_parser = clap::value_parser!(u64).range(1..))]
    pub slices: Option<u64>,
    /// The shape of each slice's ICI mesh (`16x16x8`, `16x16`; with `--chips`); default:
    /// Cloud TPU's shape for the chips of a slice (`8x16x16` for 2048 v4 chips). Device
    /// ids run along the first axis first; whole 4x4x4 cubes of v4 and v5p, and full
    /// pod axes of the 2-D generations, have wraparound links.
    #[arg(long, value_name = "AxBxC")]
    pub topology: Option<String>,
    /// Where each device of the program sits on the slice: a JSON list of coordinates per
    /// device id, or the `partitions` of `models.py --tpu`'s `xla_tpu.json` (XLA's device
    /// assignment); default: ids along the first axis first.
    #[arg(long, value_name = "FILE")]
    pub placement: Option<PathBuf>,
    /// Each device of the program is one TensorCore, as JAX's devices are on TPU v2 and
    /// v3: time it on one core with its share of the chip's HBM and links.
    #[arg(long)]
    pub per_core: bool,
}

/// The coordinates of each device id from `--placement` (a list of coordinate lists, or
/// an object whose `partitions` list has a `coords` per partition, in partition order).
fn placement(path: &std::path::Path) -> Result<Vec<Vec<u64>>, CliError> {
    let text = std::fs::read_to_string(path).map_err(|e| CliError::io("read", path, e))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("`{}` is not JSON: {e}", path.display()))?;
    let list = match &v {
        serde_json::Value::Array(a) => a.clone(),
        v => v["partitions"]
            .as_array()
            .map(|p| p.iter().map(|x| x["coords"].clone()).collect())
            .ok_or_else(|| {
                format!("`{}` has no list of coordinates nor `partitions`", path.display())
            })?,
    };
    list.iter()
        .enumerate()
        .map(|(i, c)| {
            c.as_array()
                .and_then(|a| a.iter().map(serde_json::Value::as_u64).collect::<Option<Vec<u64>>>())
                .filter(|c| !c.is_empty() && c.len() <= 3)
                .ok_or_else(|| {
                    CliError::Message(format!(
                        "`{}`: device {i} has no coordinates (a list of 1-3 non-negative integers)",
                        path.display()
                    ))
                })
        })
        .collect()
}

/// The slice the devices run on: `--topology` or the default shape of `chips` chips, with
/// `--placement`'s coordinates.
fn slice_of(
    a: &CompileArgs,
    cfg: &TpuConfig,
    chips: u64,
) -> Result<hlo_chip::torus::Torus, CliError> {
    let placement = match &a.placement {
        Some(p) => Some((p.as_path(), placement(p)?)),
        None => None,
    };
    predict::slice(cfg, chips, a.topology.as_deref(), placement)
}

/// `m` compiled for one chip of the TPU model (optimized unless `optimize` is false, then
/// lowered), its warnings reported.
fn compile_tpu(
    path: &str,
    src: &str,
    m: &Checked<Module>,
    target: Tpu,
    optimize: bool,
) -> Result<TpuExecutable, CliError> {
    let optimizer = if optimize { Optimizer::Default } else { Optimizer::Off };
    let options = hlo_engine::Options::default().with_optimizer(optimizer);
    match TpuModel::new(target).compile_one(m, &options) {
        Ok(exe) => {
            crate::report_warnings(&exe.compiled.warnings, src, path);
            Ok(exe)
        }
        Err(e) => Err(CliError::located(e.diagnostics(), src, path)),
    }
}

fn write_out(output: Option<&Path>, text: &str) -> Result<(), CliError> {
    match output {
        Some(p) => {
            hlo_ir::atomic::write(p, text.as_bytes()).map_err(|e| CliError::io("write", p, e))
        }
        None => {
            crate::emit(text);
            Ok(())
        }
    }
}

fn progress_bar() -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = indicatif::ProgressBar::new_spinner();
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} simulating: {pos} kernels executed, {elapsed}",
        )
        .ok()?,
    );
    Some(pb)
}

/// `hloc compile`.
pub fn compile(a: &CompileArgs) -> Result<(), CliError> {
    let (path, src) = crate::read_input(&a.file)?;
    if let Some(n) = a.chips {
        let placement = match &a.placement {
            Some(p) => Some((p.as_path(), placement(p)?)),
            None => None,
        };
        let cfg = predict::chips_config(
            &a.config,
            n,
            a.slices,
            a.topology.as_deref(),
            placement,
            a.per_core,
        )?;
        return compile_chips(a, &path, &src, cfg, n);
    }
    let mut cfg = config(&a.config)?;
    let checked = crate::load_checked_source(&path, &src)?;
    // A per-device program of N partitions (XLA TPU's): its collectives run on the slice
    // of its devices' chips.
    let partitions = checked.header.num_partitions.unwrap_or(1).max(1) as u64;
    if partitions > 1 || a.topology.is_some() || a.placement.is_some() {
        let chips =
            if a.per_core { partitions.div_ceil(cfg.cores_per_chip.max(1)) } else { partitions };
        cfg.slice = Some(slice_of(a, &cfg, chips)?);
    }
    if a.per_core {
        cfg = cfg.one_core();
    }
    let passes = passes_of(a.precision);
    let mut exe = compile_tpu(&path, &src, &checked, Tpu::new(cfg, passes), !a.no_opt)?;
    apply_trip_counts(&mut exe.compiled.program.lowered, &a.trip_count)?;
    let mut opts = exe.options();
    let pb = progress_bar();
    if let Some(pb) = pb.clone() {
        opts.progress = Some(std::sync::Arc::new(move |n| pb.set_position(n)));
    }
    let inputs = match &a.inputs {
        Some(p) => Some(
            hlo_io::npz::read_inputs(p, &checked.entry_param_shapes())
                .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    let start = Instant::now();
    let run = match exe.simulate(inputs.as_deref(), &opts) {
        Ok(r) => r,
        Err(e) => return Err(CliError::located(e.diagnostics(), &src, &path)),
    };
    // The chip the program was compiled for (built once, carried by the compile).
    let (m, lowered, cfg) =
        (&exe.compiled.program.module, &exe.compiled.program.lowered, &exe.compiled.program.config);
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    let wall = start.elapsed();
    if run.control == "executed" {
        eprintln!(
            "note: control flow depends on values: followed as executed on {} inputs",
            if a.inputs.is_some() { "the given" } else { "seeded (--seed 0)" }
        );
    }
    let text = match a.emit {
        Emit::Tiles => lowered.program.display(cfg).to_string(),
        Emit::Trace => {
            let name = Path::new(&path)
                .file_stem()
                .map_or("module".into(), |s| s.to_string_lossy().into_owned());
            let t = chip::chrome_trace(&run.sim, &name);
            let mut s = serde_json::to_string(&t).map_err(|e| e.to_string())?;
            s.push('\n');
            s
        }
        Emit::Report => {
            report_text(&run, &memory_usage(m, cfg.hbm_bytes), a.model_flops, a.json, a.top)
        }
    };
    write_out(a.output.as_deref(), &text)?;
    if let Some(p) = &a.output {
        eprintln!("wrote the {} to `{}`", emit_name(a.emit), p.display());
    }
    eprintln!(
        "simulated {} kernels in {:.1} ms",
        run.sim.report().kernels_executed,
        wall.as_secs_f64() * 1e3
    );
    Ok(())
}

/// `hloc compile --chips N`.
fn compile_chips(
    a: &CompileArgs,
    path: &str,
    src: &str,
    cfg: TpuConfig,
    n: usize,
) -> Result<(), CliError> {
    let checked = crate::load_checked_source(path, src)?;
    let passes = passes_of(a.precision);
    let mut exe = match predict::compile_chips(&checked, &cfg, n, passes) {
        Ok(exe) => {
            crate::report_warnings(&exe.compiled.warnings, src, path);
            exe
        }
        Err(d) => return Err(CliError::located(d, src, path)),
    };
    apply_trip_counts(&mut exe.compiled.program.program.lowered, &a.trip_count)?;
    let inputs = match &a.inputs {
        Some(p) => Some(
            hlo_io::npz::read_inputs(p, &checked.entry_param_shapes())
                .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    let start = Instant::now();
    let runs = predict::simulate_chips(&exe, inputs.as_deref())
        .map_err(|d| CliError::located(d, src, path))?;
    let wall = start.elapsed();
    let name =
        Path::new(path).file_stem().map_or("module".into(), |s| s.to_string_lossy().into_owned());
    let chip = &exe.compiled.program.program;
    let text = match a.emit {
        Emit::Tiles => chip.lowered.program.display(&chip.config).to_string(),
        Emit::Trace => {
            let sims: Vec<&chip::Sim> = runs.iter().map(|r| &*r.sim).collect();
            let mut s = serde_json::to_string(&chip::chrome_trace_chips(&sims, &name))
                .map_err(|e| e.to_string())?;
            s.push('\n');
            s
        }
        Emit::Report => {
            chips_report(&runs, &chip.module, &chip.config, a.model_flops, a.json, a.top)
        }
    };
    write_out(a.output.as_deref(), &text)?;
    if let Some(p) = &a.output {
        eprintln!("wrote the {} to `{}`", emit_name(a.emit), p.display());
    }
    eprintln!("simulated {} chips in {:.1} ms", runs.len(), wall.as_secs_f64() * 1e3);
    Ok(())
}

fn emit_name(e: Emit) -> &'static str {
    match e {
        Emit::Report => "report",
        Emit::Tiles => "lowered program",
        Emit::Trace => "trace (open it in https://ui.perfetto.dev)",
    }
}

fn report_text(
    run: &Run,
    hbm: &MemoryUsage,
    model_flops: Option<f64>,
    json: bool,
    top: usize,
) -> String {
    let r = run.sim.report();
    if json {
        let mut v = r.to_json();
        v["control_flow"] = serde_json::json!(run.control);
        hbm_json(&mut v, hbm);
        v["peak_rss_bytes"] = serde_json::json!(peak_rss_bytes());
        mfu_json(&mut v, &r, model_flops);
        format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default())
    } else {
        // After the summary line: the step time first, then whether it fits.
        let text = r.text(top);
        let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
        format!("{first}\n{}{}{rest}", hbm_line(hbm), mfu_line(&r, model_flops))
    }
}

/// The TPU engine `hloc run --engine tpu` runs: the chip preset `cfg` at `precision`.
pub fn engine_for_run(cfg: &str, precision: Option<PrecisionArg>) -> Result<TpuModel, CliError> {
    Ok(TpuModel::new(Tpu::new(config(cfg)?, passes_of(precision))))
}

/// The line of timing of one chip's run on the TPU model.
pub fn run_line(run: &Run) -> String {
    let r = run.sim.report();
    format!(
        "tpu ({}): {} cycles = {:.1} us, MXU util {:.1}%, {} kernels, HBM {:.2} MB",
        r.config,
        r.total_cycles,
        r.step_time_us,
        r.mxu_util_pct,
        r.kernels_executed,
        r.hbm_bytes as f64 / 1e6
    )
}

/// How many f32 dots and convolutions run on the MXU below HIGHEST precision (fewer than six
/// bf16 passes): their products carry bf16 rounding, so the outputs differ from XLA CPU's
/// by more than an f32 tolerance.
pub fn reduced_precision_matmuls(m: &Module, precision: Option<PrecisionArg>) -> usize {
    let passes = passes_of(precision);
    let mut n = 0;
    for comp in m.comps() {
        for node in comp.nodes() {
            let written = match &comp.instr(node).op {
                hlo_ir::Op::Dot { dims, .. } => &dims.precision,
                hlo_ir::Op::Convolution(c) => &c.precision,
                _ => continue,
            };
            let f32_operand = comp.operands(node).iter().any(|&o| {
                comp.instr(o).shape.as_array().is_some_and(|a| a.elem == hlo_ir::ElemType::F32)
            });
            if f32_operand && hlo_tpu::lower::precision_of(written, passes) != Precision::Highest {
                n += 1;
            }
        }
    }
    n
}
