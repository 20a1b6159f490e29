//! `hloc`: the command line of the HLO toolchain.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use hlo_check::Checked;
use hlo_ir::Diagnostics;
use hlo_tools::error::CliError;

/// Compilers allocate many small objects; mimalloc serves them about twice as fast as the
/// system allocator (measured with `hloc bench`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "hloc",
    version,
    about = "Check, optimize and simulate XLA HLO training programs",
    long_about = "hloc reads HLO text exactly as XLA and JAX print it (plain `as_text` style or \
                  `%`-sigil dump style), checks it, and prints it back in canonical form.\n\n\
                  Errors are reported as `file:line:col: error: ...` with the source line, a caret \
                  and a hint; the exit status is 1 when any error was found.",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Parse an HLO module, verify it and print it in canonical XLA syntax.
    ///
    /// Reads FILE (or standard input for `-`), runs the structural verifier and prints the
    /// module to standard output. Diagnostics go to standard error; the exit status is 1 if
    /// there was any error. The printed text parses back to the same text.
    Parse {
        /// The HLO text file, or `-` for standard input.
        file: PathBuf,
        /// Skip the structural verifier (parse and print only).
        #[arg(long)]
        no_verify: bool,
        /// Write the canonical text here instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Check an HLO module: structural verifier, shape inference, data-dependent shapes.
    ///
    /// Exit status 0 when the module is clean (nothing is printed), 1 with diagnostics on
    /// standard error otherwise. Dynamic shapes (`<=N`, `?`, set-dimension-size,
    /// dynamic-reshape, shape assertions) are reported once per origin, with a remedy.
    Check {
        /// The HLO text file, or `-` for standard input.
        file: PathBuf,
    },
    /// Run an HLO module: compiled to native code by the JIT (default) or interpreted.
    ///
    /// The module is checked first (as `hloc check`); the inputs are checked against the
    /// entry parameters (count, dtype, dims) before anything runs. Without `--inputs` the
    /// parameters get seeded pseudo-random values (`--seed`). Without `-o` the outputs are
    /// summarized on standard output. With `--expect`, the outputs are compared with an .npz
    /// of expected outputs (tolerances from `--tolerances NAME.json`, else per dtype).
    Run(run::RunCli),
    /// Optimize an HLO module and print it: cleanup passes, then fusion.
    ///
    /// Without `--passes`, runs the default pipeline (`hloc opt --list-passes` shows it).
    /// The module is checked first (as `hloc check`); in debug builds, and with
    /// `--verify-each`, it is verified again after every pass that changed it. The printed
    /// module is valid HLO (fusions print as `fusion(...), kind=..., calls=...`).
    Opt(opt::OptArgs),
    /// Simulate a GEMM or convolution on the systolic-array (MXU) model.
    ///
    /// Three models: `scalesim` reproduces SCALE-Sim 3.0.0 exactly; `tpu` models a TPU
    /// core (double-buffered weights, pipelined folds, DMA from HBM); `pe` steps every
    /// processing element every cycle with real bf16/f32 values (same cycles as the fast
    /// model, and its product is checked against a reference matmul).
    #[command(subcommand)]
    Sim(Box<sim::SimCmd>),
    /// Compile a whole module for the TPU model: lower every op onto a multi-core chip
    /// (MXUs, vector unit, DMA) and report its timing, print the lowered program or write
    /// a Perfetto trace.
    ///
    /// The default optimization pipeline runs first (skip it with `--no-opt`). The step is
    /// timed from shapes alone: loops by the trip count the program states (XLA's
    /// `known_trip_count`, or a counted loop's induction variable), conditionals by a
    /// constant selector. When one depends on values, the module runs on `--inputs` (or on
    /// seeded inputs when they fit in memory); `--trip-count LOOP=N` gives a count instead.
    Compile(Box<tpu::CompileArgs>),
    /// Check the TPU model against published measurements on real TPUs: every row of
    /// ../shared/tpu-published/rows.json is built as a JAX program (tools/models, shapes
    /// only), simulated on the row's chips, and printed beside the published figure with
    /// the error, the simulation's wall time and peak memory.
    Validate(validate::ValidateArgs),
    /// Pick the mesh, remat policy and batch split for a model on a TPU slice: every
    /// FSDP x tensor split, remat policy and gradient accumulation is enumerated, those
    /// that cannot fit are pruned by an HBM lower bound, the rest built by tools/models
    /// and simulated (in parallel), and ranked by predicted step time.
    Plan(Box<hlo_tools::plan::PlanArgs>),
    /// Differential fuzzing: generated modules (seeded, reproducible) on the JIT, the TPU
    /// model, the optimized module and N devices, each compared with the reference
    /// interpreter; prints a table of agreements, findings and refusals. Exit status 1 when
    /// any engine disagreed, failed or panicked.
    Fuzz(fuzz::FuzzArgs),
    /// Shrink a module to a minimal one on which a predicate still holds: a shell command
    /// (`--cmd`, exit 0 = still interesting) or an engine disagreeing with the reference
    /// interpreter (`--engine`). Edits: cut the root tuple, replace instructions by new
    /// parameters or by their operands, drop what no one uses, drop shardings and metadata.
    Reduce(reduce::ReduceArgs),
    /// Benchmarks, each printing a table: parse throughput, the optimization pipeline, pass
    /// scaling, fusion, the JIT, the TPU model and N devices (`hloc bench --help`).
    #[command(subcommand)]
    Bench(BenchCmd),
}

/// `hloc bench`: one subcommand per benchmark.
#[derive(Subcommand)]
enum BenchCmd {
    /// Time parse+verify over HLO files and print a table (MB/s), beside XLA's parser.
    Parse {
        /// Files to parse; defaults to the largest modules in ../shared/external-hlo.
        files: Vec<PathBuf>,
        /// Repetitions per file (the median is reported).
        #[arg(long, default_value_t = 5)]
        repeat: usize,
    },
    /// The default optimization pipeline on every corpus case, beside XLA's compile time.
    Pipeline {
        /// Repetitions per case (the median is reported).
        #[arg(long, default_value_t = 5)]
        repeat: usize,
        /// Measure XLA now (xla_timings.py, needs the oracle venv).
        #[arg(long)]
        xla: bool,
    },
    /// Every pass on synthetic modules of 1k, 10k and 100k instructions.
    Scaling {
        /// Repetitions per module (the median is reported).
        #[arg(long, default_value_t = 5)]
        repeat: usize,
        /// Also write the synthetic modules into this directory (for
        /// `tools/pass_instruction_counts.sh`).
        #[arg(long)]
        synthetic_dir: Option<PathBuf>,
    },
    /// The fusion report of every train_* corpus case beside XLA's fusion counts.
    Fusion,
    /// JIT compile and execution times per case beside XLA's.
    Jit {
        /// The realistic sizes of ../shared/bench instead of the corpus.
        #[arg(long)]
        bench_set: bool,
        /// Measure this many times (ours and XLA's each time) and report each case's ratio
        /// per run and the median.
        #[arg(long, default_value_t = 1)]
        runs: usize,
        /// Repetitions per case (the median is reported).
        #[arg(long, default_value_t = 5)]
        repeat: usize,
        /// Measure XLA now (xla_timings.py, needs the oracle venv).
        #[arg(long)]
        xla: bool,
        /// Also write the per-case medians over the runs (ours, XLA's, ratio) as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The bench set at 1, 2 and all threads, ours beside XLA CPU pinned to the same
    /// cores (`taskset`): times, ratios and our parallel efficiency per case.
    Threads {
        /// Thread counts (default: 1, 2 and every CPU this process may use).
        #[arg(long, value_delimiter = ',')]
        threads: Vec<usize>,
        /// Whole measurements per thread count (the median is reported).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Repetitions per case in each measurement (the median is reported).
        #[arg(long, default_value_t = 5)]
        repeat: usize,
        /// Leave XLA out (ours only).
        #[arg(long)]
        no_xla: bool,
    },
    /// The bench training steps on the TPU model (v3 and v4, bench and MXU-filling batch
    /// sizes): step time, utilization, bounds; and how long the simulation takes.
    Tpu {
        /// Repetitions per case (the median is reported).
        #[arg(long, default_value_t = 5)]
        repeat: usize,
    },
    /// The bench transformer step data-parallel and 2-D (data x model) on 1, 2, 4 and 8
    /// devices: simulated v4 step with its communication share beside ideal scaling, and
    /// the multi-device runtime's wall time.
    Spmd {
        /// Repetitions per case (the median is reported).
        #[arg(long, default_value_t = 5)]
        repeat: usize,
    },
}

/// mimalloc's option number of `purge_delay` (`mi_option_purge_delay` in the `mimalloc.h`
/// of the version `libmimalloc-sys` builds; its Rust bindings do not name it yet).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory stays with the process before mimalloc hands it back to the
/// system, in ms: never (-1). A training step frees its GEMM packing buffers and outputs
/// and allocates them again at the next step; handed back in between, they came back as
/// fresh pages the kernel zeroes (2 MiB at a time with transparent huge pages). Measured
/// (mimalloc 3.3, the bench transformer SGD step, 2 threads, `perf stat -e page-faults`,
/// 10 against 40 steps, faults per step): mimalloc's default delay of 1000 ms 14, 3000 ms
/// 7, 10000 ms 0 (the run was shorter than that), never 0; `clear_page_erms` had been 6.5%
/// of all samples. Step times on this 2-core host moved within their noise (transformer
/// 67.5-68.6 against 68.1-69.4 ms); the faults' cost grows with threads that fault at
/// once. `hloc` commands run and exit, so keeping their peak footprint until then
/// costs nothing; `MIMALLOC_PURGE_DELAY` in the environment still decides when set.
const PURGE_DELAY_MS: std::ffi::c_long = -1;

fn main() -> ExitCode {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one of mimalloc's process-wide options (an integer), as its C API
        // allows at any time.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    }
    let cli = Cli::parse();
    // The instruction-set cap is decided here, before any kernel dispatches: an invalid
    // `HLOC_ISA` stops every command with its error.
    if let Err(e) = hlo_runtime::cpu::cap() {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    // The runtime skips an invalid HLOC_THREADS; the command line refuses it up front.
    if let Err(e) = hlo_runtime::env_threads() {
        report_error(CliError::Message(format!(
            "{e}\n  = help: HLOC_THREADS sizes the JIT runtime's thread pool (unset: \
             RAYON_NUM_THREADS, else the available cores)"
        )));
        return ExitCode::FAILURE;
    }
    let done = |()| ExitCode::SUCCESS;
    let result = match cli.cmd {
        Cmd::Parse { file, no_verify, output } => {
            cmd_parse(&file, no_verify, output.as_deref()).map(done)
        }
        Cmd::Check { file } => cmd_check(&file).map(done),
        Cmd::Run(args) => run::run(&args),
        Cmd::Opt(args) => opt::run(args).map(done),
        Cmd::Sim(cmd) => sim::run(*cmd).map(done),
        Cmd::Compile(args) => tpu::compile(&args).map(done),
        Cmd::Validate(args) => validate::validate(&args),
        Cmd::Plan(args) => hlo_tools::plan::run(&args),
        Cmd::Fuzz(args) => fuzz::run(&args),
        Cmd::Reduce(args) => reduce::run(&args).map(done),
        Cmd::Bench(b) => bench_main(b),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            report_error(e);
            ExitCode::FAILURE
        }
    }
}

/// A command's error on standard error, as the command line shows errors: diagnostics
/// rendered against their source (in color on a terminal), a message, or nothing for a
/// failure already reported.
fn report_error(e: CliError) {
    match e {
        CliError::Located { diags, src, path } => report(&diags, &src, &path),
        CliError::Reported => {}
        e => eprintln!("{e}"),
    }
}

/// `e` reported now, for a command that prints more after its error: then the error
/// says that it was reported.
fn reported(e: CliError) -> CliError {
    report_error(e);
    CliError::Reported
}

/// Runs one benchmark; those over the corpus need ../shared beside the project.
fn bench_main(b: BenchCmd) -> Result<ExitCode, CliError> {
    let shared =
        || bench::shared_dir().ok_or("../shared (the corpus) not found beside the project");
    let done = |()| ExitCode::SUCCESS;
    match b {
        BenchCmd::Parse { files, repeat } => bench::run(&files, repeat),
        BenchCmd::Scaling { repeat, synthetic_dir } => {
            bench_opt::scaling(repeat, synthetic_dir.as_deref()).map(done)
        }
        BenchCmd::Pipeline { repeat, xla } => bench_opt::pipeline(&shared()?, repeat, xla),
        BenchCmd::Fusion => bench_opt::fusion(&shared()?).map(done),
        BenchCmd::Jit { bench_set, runs, repeat, xla, json } => {
            bench_jit::jit(&shared()?, bench_set, xla, repeat, runs, json.as_deref()).map(done)
        }
        BenchCmd::Threads { threads, runs, repeat, no_xla } => {
            bench_threads::threads(&threads, runs, repeat, !no_xla).map(done)
        }
        BenchCmd::Tpu { repeat } => bench_tpu::tpu(&shared()?, repeat).map(done),
        BenchCmd::Spmd { repeat } => bench_spmd::spmd(&shared()?, repeat).map(done),
    }
}

/// Writes to standard output; a closed pipe (`hloc ... | head`) ends the program quietly
/// instead of panicking.
fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

/// `println!` through [`emit`].
macro_rules! outln {
    ($($t:tt)*) => { $crate::emit(&format!("{}\n", format_args!($($t)*))) };
}

mod bench;
mod bench_jit;
mod bench_opt;
mod bench_spmd;
mod bench_threads;
mod bench_tpu;
mod fuzz;
mod opt;
mod reduce;
mod run;
mod sim;
mod tpu;
mod validate;

/// Reads a file or stdin (`-`) as UTF-8, with a clear error.
fn read_input(file: &Path) -> Result<(String, String), CliError> {
    let (name, bytes) = if file == Path::new("-") {
        let mut b = Vec::new();
        std::io::stdin()
            .read_to_end(&mut b)
            .map_err(|e| format!("cannot read standard input: {e}"))?;
        ("<stdin>".to_string(), b)
    } else {
        (
            file.display().to_string(),
            std::fs::read(file).map_err(|e| CliError::io("read", file, e))?,
        )
    };
    text_of(&name, bytes)
}

/// `bytes` as HLO text, or an error located at the first byte that is not text: invalid
/// UTF-8, or a NUL (a binary file).
fn text_of(name: &str, bytes: Vec<u8>) -> Result<(String, String), CliError> {
    let at = |off: usize| {
        let line = bytes[..off].iter().filter(|&&b| b == b'\n').count() + 1;
        let start = bytes[..off].iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        let col = String::from_utf8_lossy(&bytes[start..off]).chars().count() + 1;
        (line, col)
    };
    let not_text = |(line, column): (usize, usize), message| CliError::NotText {
        path: name.to_string(),
        line,
        column,
        message,
    };
    if let Some(off) = bytes.iter().position(|&b| b == 0) {
        return Err(not_text(
            at(off),
            format!("this is a binary file, not HLO text (a NUL byte at offset {off})"),
        ));
    }
    match String::from_utf8(bytes.clone()) {
        Ok(s) => Ok((name.to_string(), s)),
        Err(e) => {
            let off = e.utf8_error().valid_up_to();
            Err(not_text(
                at(off),
                format!(
                    "the file is not UTF-8 text (invalid byte 0x{:02x} at offset {off})",
                    bytes[off]
                ),
            ))
        }
    }
}

fn report(diags: &Diagnostics, src: &str, path: &str) {
    let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let text = hlo_tools::error::render(diags, src, path, color);
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// Reads and parses FILE and runs the checks; the module, or the error.
fn load_checked(file: &Path) -> Result<Checked<hlo_ir::Module>, CliError> {
    let (path, src) = read_input(file)?;
    load_checked_source(&path, &src)
}

/// Parses `src` and runs the checks once (the driver's front door), reporting warnings
/// against `path`; errors are located there.
fn load_checked_source(path: &str, src: &str) -> Result<Checked<hlo_ir::Module>, CliError> {
    match hlo_driver::parse(src) {
        Ok(m) => {
            report(m.warnings(), src, path);
            Ok(m)
        }
        Err(diags) => Err(CliError::located(diags, src, path)),
    }
}

/// The driver's warnings and notes of a compile (e.g. a module without shardings on N
/// devices), reported against `path`.
fn report_warnings(warnings: &Diagnostics, src: &str, path: &str) {
    if !warnings.is_empty() {
        report(warnings, src, path);
    }
}

fn cmd_check(file: &Path) -> Result<(), CliError> {
    load_checked(file).map(|_| ())
}

fn cmd_parse(file: &Path, no_verify: bool, output: Option<&Path>) -> Result<(), CliError> {
    let (path, src) = read_input(file)?;
    let (module, mut diags) = hlo_ir::text::parse(&src);
    if let Some(m) = &module
        && !no_verify
    {
        diags.extend(hlo_ir::verify::verify_source(m, &src));
    }
    let Some(m) = module.filter(|_| !diags.has_errors()) else {
        return Err(CliError::located(diags, &src, &path));
    };
    report(&diags, &src, &path);
    let text = hlo_ir::text::print(&m);
    match output {
        Some(p) => {
            // Write to a temporary file first so a failure never leaves a half-written output.
            let tmp = p.with_extension("hlo.tmp");
            if let Err(e) = std::fs::write(&tmp, &text).and_then(|_| std::fs::rename(&tmp, p)) {
                let _ = std::fs::remove_file(&tmp);
                return Err(CliError::io("write", p, e));
            }
        }
        None => {
            let mut out = std::io::stdout().lock();
            if out.write_all(text.as_bytes()).and_then(|_| out.flush()).is_err() {
                // Standard output is gone: there is no one to tell.
                return Err(CliError::Reported);
            }
        }
    }
    Ok(())
}
