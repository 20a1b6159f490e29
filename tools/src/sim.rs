//! `hloc sim`: the systolic-array simulator on one GEMM or convolution, and its benchmark.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Subcommand, ValueEnum};
use hlo_chip::config::{Dataflow, TpuConfig, parse_array};
use hlo_chip::report::{Model, Report};
use hlo_chip::scalesim::{self, ScalesimSetup};
use hlo_chip::tile_ir::{Conv, Gemm, Schedule, TileProgram};
use hlo_chip::{pe_array, timeline, tpu_mode, trace};
use hlo_tools::error::CliError;

#[derive(Subcommand)]
pub enum SimCmd {
    /// Simulate C[M,N] = A[M,K] x B[K,N].
    Gemm {
        m: u64,
        n: u64,
        k: u64,
        #[command(flatten)]
        opts: SimOpts,
    },
    /// Simulate a convolution IH,IW,FH,FW,C,NF[,S] (no padding, batch 1) as its im2col GEMM
    /// (scalesim mode runs SCALE-Sim's native conv addressing).
    Conv {
        /// IH,IW,FH,FW,C,NF[,S], e.g. 229,229,7,7,3,64,2
        shape: String,
        #[command(flatten)]
        opts: SimOpts,
    },
    /// Time the models on the large SCALE-Sim reference shapes and print a table.
    Bench {
        /// Also run SCALE-Sim itself (../shared/scalesim/gemm.py) on WS 512³ and 1024³ for
        /// same-machine wall times (about a minute); otherwise its measured times from
        /// reference.csv are shown.
        #[arg(long)]
        scalesim: bool,
        /// Skip the PE-level runs (seconds each on 1024³ shapes).
        #[arg(long)]
        no_pe: bool,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModelArg {
    /// SCALE-Sim 3.0.0, reproduced exactly (cycles, utilization, SRAM/DRAM counts).
    Scalesim,
    /// The TPU model: double-buffered weights, pipelined folds, DMA from HBM.
    Tpu,
    /// The PE-level model moving real bf16/f32 values (same cycles as the fast model).
    Pe,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScheduleArg {
    /// SCALE-Sim's: one fold at a time.
    Scalesim,
    /// The TPU's: double-buffered weights, folds back to back, DMA.
    Tpu,
}

#[derive(Args)]
pub struct SimOpts {
    /// Dataflow: weight-, output- or input-stationary.
    #[arg(long, default_value = "ws", value_parser = parse_dataflow)]
    dataflow: Dataflow,
    /// Systolic array rows x columns.
    #[arg(long, default_value = "128x128", value_parser = parse_array)]
    array: (u64, u64),
    /// Which model runs.
    #[arg(long, value_enum, default_value_t = ModelArg::Tpu)]
    model: ModelArg,
    /// Hardware preset for the TPU and PE models: v2, v3 or v4.
    #[arg(long, default_value = "v3", value_parser = parse_preset)]
    config: TpuConfig,
    /// The PE model's schedule (scalesim reproduces `--model scalesim`'s compute cycles,
    /// tpu reproduces `--model tpu`).
    #[arg(long, value_enum, default_value_t = ScheduleArg::Scalesim)]
    schedule: ScheduleArg,
    /// scalesim mode: ifmap,filter,ofmap SRAM sizes in kB (SCALE-Sim's 1-byte words).
    #[arg(long, default_value = "1024,1024,1024", value_parser = parse_sram)]
    sram_kb: [u64; 3],
    /// scalesim mode: DRAM bandwidth in words/cycle (SCALE-Sim's USER mode, with stalls);
    /// without it, CALC mode.
    #[arg(long)]
    bandwidth: Option<u64>,
    /// Print one JSON object instead of the summary.
    #[arg(long)]
    json: bool,
    /// Also write the report as a SCALE-Sim-style CSV (header and one row).
    #[arg(long, value_name = "OUT.csv")]
    csv: Option<PathBuf>,
    /// Write a Chrome-trace JSON of the timeline (open it in https://ui.perfetto.dev).
    #[arg(long, value_name = "OUT.json")]
    trace: Option<PathBuf>,
    /// Print the tile-level program before simulating.
    #[arg(long)]
    program: bool,
    /// PE model: seed of the random bf16 operands.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn parse_dataflow(s: &str) -> Result<Dataflow, String> {
    s.parse()
}

fn parse_preset(s: &str) -> Result<TpuConfig, String> {
    TpuConfig::preset(s).ok_or_else(|| {
        format!("unknown preset `{s}` (expected one of {})", TpuConfig::PRESETS.join(", "))
    })
}

fn parse_sram(s: &str) -> Result<[u64; 3], String> {
    let v: Vec<u64> = s
        .split(',')
        .map(|x| x.trim().parse::<u64>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("`{s}` is not IFMAP,FILTER,OFMAP sizes in kB"))?;
    <[u64; 3]>::try_from(v)
        .map_err(|_| format!("`{s}` is not three sizes IFMAP,FILTER,OFMAP in kB"))
}

pub fn run(cmd: SimCmd) -> Result<(), CliError> {
    let result = match cmd {
        SimCmd::Gemm { m, n, k, opts } => simulate(Gemm { m, n, k }, None, &opts),
        SimCmd::Conv { shape, opts } => Conv::parse(&shape)
            .map_err(String::from)
            .and_then(|c| simulate(c.im2col(), Some(c), &opts)),
        SimCmd::Bench { scalesim, no_pe } => bench(scalesim, no_pe),
    };
    result.map_err(CliError::Message)
}

/// The largest operand the PE model allocates (elements).
const PE_MAX_ELEMS: u64 = 1 << 28;
/// The most folds a tile program may have.
const MAX_FOLDS: u64 = 20_000_000;

fn simulate(gemm: Gemm, conv: Option<Conv>, o: &SimOpts) -> Result<(), String> {
    if gemm.m == 0 || gemm.n == 0 || gemm.k == 0 {
        return Err(format!(
            "GEMM dimensions must be at least 1 (got M={} N={} K={})",
            gemm.m, gemm.n, gemm.k
        ));
    }
    let (rows, cols) = o.array;
    // The program holds one entry per fold: bound it (about 200 bytes each).
    let side = rows.min(cols);
    let folds = gemm
        .m
        .div_ceil(side)
        .saturating_mul(gemm.n.div_ceil(side))
        .saturating_mul(gemm.k.div_ceil(side));
    if folds > MAX_FOLDS {
        return Err(format!(
            "this GEMM needs up to {folds} folds on a {rows}x{cols} array; the simulator handles at most {MAX_FOLDS} (about 4 GB of tile program)"
        ));
    }
    let cfg = TpuConfig { rows, cols, dataflow: o.dataflow, ..o.config.clone() };
    if o.model != ModelArg::Scalesim && (o.bandwidth.is_some() || o.sram_kb != [1024; 3]) {
        return Err("--bandwidth and --sram-kb configure SCALE-Sim's memories; use them with --model scalesim".into());
    }
    let (program, tl, report) = match o.model {
        ModelArg::Scalesim => {
            let mut setup = match conv {
                Some(c) => ScalesimSetup::conv(c, rows, cols, o.dataflow),
                None => ScalesimSetup::gemm(gemm, rows, cols, o.dataflow),
            };
            setup.sram_kb = o.sram_kb;
            setup.bandwidth = o.bandwidth;
            setup.validate()?;
            let start = Instant::now();
            let (p, tl) = setup.compute_side();
            // Where no closed form is exact, SCALE-Sim's memory system is walked request by
            // request (~100 M/s).
            let requests = tl.counters.ifmap_reads + tl.counters.filter_reads;
            if requests > 10_000_000_000 && setup.memory_walked() {
                eprintln!(
                    "note: SCALE-Sim's memory model serves {requests} SRAM requests one by one; this takes minutes"
                );
            }
            let mut report = setup.with_memory(&p, &tl)?;
            report.wall_s = start.elapsed().as_secs_f64();
            (p, tl, report)
        }
        ModelArg::Tpu => {
            let (p, tl, mut report) = tpu_mode::run(gemm, &cfg);
            report.conv = conv;
            (p, tl, report)
        }
        ModelArg::Pe => run_pe(gemm, conv, &cfg, o)?,
    };
    if o.program {
        crate::emit(&program.to_string());
    }
    if o.json {
        outln!("{}", serde_json::to_string_pretty(&report.to_json()).unwrap());
    } else {
        crate::emit(&report.summary());
    }
    if let Some(path) = &o.csv {
        write_text(path, &format!("{}\n{}\n", Report::CSV_HEADER, report.csv_row()))?;
    }
    if let Some(path) = &o.trace {
        let title = format!(
            "{} model: gemm {}x{}x{} on {}x{} {}",
            report.model.name(),
            gemm.m,
            gemm.n,
            gemm.k,
            rows,
            cols,
            o.dataflow
        );
        let v = trace::chrome_trace(&program, &tl, &title);
        write_text(path, &serde_json::to_string(&v).unwrap())?;
        if !o.json {
            outln!(
                "trace: {} ({} events; open in https://ui.perfetto.dev)",
                path.display(),
                v["traceEvents"].as_array().map_or(0, |e| e.len())
            );
        }
    }
    Ok(())
}

fn write_text(path: &Path, text: &str) -> Result<(), String> {
    hlo_ir::atomic::write(path, text.as_bytes())
        .map_err(|e| format!("cannot write `{}`: {e}", path.display()))
}

fn run_pe(
    gemm: Gemm,
    conv: Option<Conv>,
    cfg: &TpuConfig,
    o: &SimOpts,
) -> Result<(TileProgram, timeline::Timeline, Report), String> {
    for (name, elems) in [("A", gemm.m * gemm.k), ("B", gemm.k * gemm.n), ("C", gemm.m * gemm.n)] {
        if elems > PE_MAX_ELEMS {
            return Err(format!(
                "the PE model holds real operands; {name} would have {elems} elements (limit {PE_MAX_ELEMS}); use --model tpu or scalesim for this shape"
            ));
        }
    }
    let schedule = match o.schedule {
        ScheduleArg::Scalesim => Schedule::Sequential,
        ScheduleArg::Tpu => Schedule::Pipelined,
    };
    let p = TileProgram::gemm(gemm, cfg, schedule);
    let engine = (schedule == Schedule::Pipelined).then(|| tpu_mode::dma_engine(cfg));
    let fast = timeline::simulate(&p, engine.clone());
    let (a, b) = (
        pe_array::sample_operands(gemm.m * gemm.k, o.seed),
        pe_array::sample_operands(gemm.k * gemm.n, o.seed + 1),
    );
    let bar = (std::io::stderr().is_terminal() && fast.compute_cycles > 200_000).then(|| {
        let bar = indicatif::ProgressBar::new(fast.compute_cycles);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} PE array {bar:40} {pos}/{len} cycles ({per_sec}, eta {eta})",
            )
            .unwrap(),
        );
        bar
    });
    let start = Instant::now();
    let mut tick = |t: u64| {
        if let Some(bar) = &bar {
            bar.set_position(t);
        }
    };
    let run = pe_array::simulate(&p, &a, &b, engine, Some(&mut tick))?;
    let wall = start.elapsed().as_secs_f64();
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if run.timeline != fast {
        return Err(format!(
            "internal error: the PE model ({} cycles) and the fast model ({} cycles) disagree",
            run.timeline.compute_cycles, fast.compute_cycles
        ));
    }
    let exact = run
        .out
        .iter()
        .zip(pe_array::reference_product(&p, &a, &b))
        .all(|(x, y)| x.to_bits() == y.to_bits());
    let mut report = match schedule {
        Schedule::Sequential => scalesim::compute_report(&p, &run.timeline, Model::Pe),
        Schedule::Pipelined => tpu_mode::report(&p, &run.timeline, cfg, Model::Pe),
    };
    report.conv = conv;
    report.numerics_exact = Some(exact);
    report.wall_s = wall;
    Ok((p, run.timeline, report))
}

/// The large reference rows: (case, dataflow, M, N, K, SCALE-Sim's measured wall seconds).
const BENCH_CASES: [(&str, Dataflow, u64, u64, u64, f64); 8] = [
    ("mult_1024x1024x1024", Dataflow::Ws, 1024, 1024, 1024, 43.351),
    ("mult_1024x1024x1024", Dataflow::Os, 1024, 1024, 1024, 63.7005),
    ("mult_1024x1024x1024", Dataflow::Is, 1024, 1024, 1024, 60.173),
    ("ragged_1000x1000x1000", Dataflow::Ws, 1000, 1000, 1000, 45.548),
    ("conv_resnet50_c5_3x3_im2col", Dataflow::Ws, 49, 512, 4608, 17.4025),
    ("conv_resnet50_conv1_im2col", Dataflow::Ws, 12544, 64, 147, 9.90769),
    ("mlp_b256_784to512", Dataflow::Ws, 256, 512, 784, 4.32585),
    ("mult_512x512x512", Dataflow::Ws, 512, 512, 512, 3.83078),
];

/// Runs SCALE-Sim itself through the oracle's Python, if available: wall seconds.
fn scalesim_wall(g: Gemm, df: Dataflow) -> Option<f64> {
    let py = hlo_io::oracle::python()?;
    let script = [
        std::env::current_dir().ok()?.join("../shared/scalesim/gemm.py"),
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/scalesim/gemm.py"),
    ]
    .into_iter()
    .find(|p| p.exists())?;
    let out = std::process::Command::new(py)
        .arg(script)
        .args([
            g.m.to_string(),
            g.n.to_string(),
            g.k.to_string(),
            "--dataflow".into(),
            df.name().into(),
        ])
        .output()
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v["wall_s"].as_f64()
}

fn bench(live_scalesim: bool, no_pe: bool) -> Result<(), String> {
    outln!("SCALE-Sim 3.0.0 reference shapes on a 128x128 array (wall seconds; one core)\n");
    outln!(
        "{:<28} {:>2} {:>9} {:>10} {:>10} {:>9} {:>8} {:>9} {:>8} {:>9} {:>7}",
        "case",
        "df",
        "cycles",
        "scalesim",
        "ours(sim)",
        "speedup",
        "fast",
        "speedup",
        "PE",
        "G PE-c/s",
        "active"
    );
    for (case, df, m, n, k, measured) in BENCH_CASES {
        let g = Gemm { m, n, k };
        let live = if live_scalesim && df == Dataflow::Ws && (m == 512 || m == 1024) {
            scalesim_wall(g, df)
        } else {
            None
        };
        let reference = live.unwrap_or(measured);
        // Full scalesim mode: compute side plus SCALE-Sim's memory system (closed forms take
        // microseconds, so repeat it for at least 20 ms).
        let setup = ScalesimSetup::gemm(g, 128, 128, df);
        let full = scalesim::run(&setup)?;
        let (t0, mut runs) = (Instant::now(), 0u32);
        while runs < 1000 && (runs == 0 || t0.elapsed().as_secs_f64() < 0.02) {
            std::hint::black_box(scalesim::run(std::hint::black_box(&setup))?);
            runs += 1;
        }
        let sim = t0.elapsed().as_secs_f64() / runs as f64;
        // The fast model alone (what SCALE-Sim's cycle count needs).
        let cfg = TpuConfig { rows: 128, cols: 128, dataflow: df, ..TpuConfig::v3() };
        let p = TileProgram::gemm(g, &cfg, Schedule::Sequential);
        let t0 = Instant::now();
        let reps = 1000;
        let mut tl = timeline::simulate(&p, None);
        for _ in 1..reps {
            tl = std::hint::black_box(timeline::simulate(std::hint::black_box(&p), None));
        }
        let fast = t0.elapsed().as_secs_f64() / reps as f64;
        // PE updates actually computed: each streamed row's wavefront passes all R x C PEs.
        let active = 16384.0 * p.folds.iter().map(|f| f.extent(df).2).sum::<u64>() as f64;
        let (pe_s, rate) = if no_pe {
            (f64::NAN, f64::NAN)
        } else {
            let (a, b) = (pe_array::sample_operands(m * k, 1), pe_array::sample_operands(k * n, 2));
            let t0 = Instant::now();
            let run = pe_array::simulate(&p, &a, &b, None, None)?;
            let s = t0.elapsed().as_secs_f64();
            if run.timeline != tl {
                return Err(format!("internal error: PE and fast models disagree on {case} {df}"));
            }
            (s, run.timeline.compute_cycles as f64 * 16384.0 / s / 1e9)
        };
        outln!(
            "{:<28} {:>2} {:>9} {:>9.2}{} {:>8.1}us {:>8.0}x {:>7.1}us {:>8.0}x {:>7.2}s {:>9.2} {:>7.2}  (PE {:.1}x)",
            case,
            df,
            full.total_cycles,
            reference,
            if live.is_some() { "*" } else { " " },
            sim * 1e6,
            reference / sim,
            fast * 1e6,
            reference / fast,
            pe_s,
            rate,
            active / pe_s / 1e9,
            reference / pe_s
        );
    }
    outln!(
        "\nscalesim: SCALE-Sim's wall time (* = run now on this machine, else measured in reference.csv)"
    );
    outln!(
        "ours(sim): scalesim mode with the memory system (same outputs as SCALE-Sim), in-process like SCALE-Sim's time;"
    );
    outln!("    fast: the fold-level model alone");
    outln!(
        "PE: the PE-level model (real bf16/f32 values); G PE-c/s = 16384 x cycles / wall; active = G PE updates/s"
    );
    outln!("    actually computed (PEs a data wavefront passes; the others are clock-gated)");
    let (_, _, tpu) = tpu_mode::run(Gemm { m: 1024, n: 1024, k: 1024 }, &TpuConfig::v3());
    outln!(
        "\ntpu mode, 1024^3 bf16 WS on tpu-v3: {} cycles, {:.1}% MXU utilization (roofline bound {} cycles)",
        tpu.total_cycles,
        tpu.overall_util_pct,
        tpu.roofline_cycles.unwrap_or(0)
    );
    Ok(())
}
