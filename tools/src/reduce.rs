//! `hloc reduce`: shrinks a module while a predicate holds (`hlo_fuzz::reduce`).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hlo_fuzz::Engine;
use hlo_tools::error::CliError;

#[derive(clap::Args, Debug)]
pub struct ReduceArgs {
    /// The module to shrink.
    pub file: PathBuf,
    /// Write the reduced module here (written to a temporary file, then renamed);
    /// default: standard output.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Interesting when this shell command exits 0 with the candidate's path as its last
    /// argument (as C-Reduce's interestingness tests), e.g. `--cmd './still-fails.sh'`.
    #[arg(long, conflicts_with = "engine")]
    pub cmd: Option<String>,
    /// Seconds a `--cmd` run may take before it is killed (and the candidate counted as
    /// not interesting).
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Interesting when this engine disagrees with the reference interpreter (wrong
    /// values, an error or a panic): jit, tpu, opt+interp, devices-interp, devices-jit.
    #[arg(long)]
    pub engine: Option<String>,
    /// With `--engine`: only when the engine's error or panic message contains this text.
    #[arg(long, requires = "engine")]
    pub error_contains: Option<String>,
    /// With `--engine`: the seed of the inputs (small integers, as `hloc fuzz` uses).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// With `--engine`: inputs with edge values (as `hloc fuzz --edge-values`).
    #[arg(long, requires = "engine")]
    pub edge_values: bool,
    /// With a device engine: how many devices.
    #[arg(long, default_value_t = 4)]
    pub devices: usize,
}

pub fn run(a: &ReduceArgs) -> Result<(), CliError> {
    let (path, src) = crate::read_input(&a.file)?;
    let tmp = std::env::temp_dir().join(format!("hloc-reduce-{}", std::process::id()));
    let mut predicate: Box<hlo_fuzz::reduce::Predicate<'_>> = match (&a.cmd, &a.engine) {
        (Some(cmd), _) => {
            if let Err(e) = std::fs::create_dir_all(&tmp) {
                return Err(CliError::Message(format!("{}: {e}", tmp.display())));
            }
            let (cmd, timeout, file) =
                (cmd.clone(), Duration::from_secs(a.timeout), tmp.join("candidate.hlo"));
            Box::new(move |_, text| {
                std::fs::write(&file, text).is_ok() && run_cmd(&cmd, &file, timeout)
            })
        }
        (None, Some(e)) => {
            let Some(engine) = Engine::from_name(e) else {
                return Err(CliError::Message(format!("unknown engine `{e}`")));
            };
            let (devices, seed, edge, needle) =
                (a.devices, a.seed, a.edge_values, a.error_contains.clone());
            std::panic::set_hook(Box::new(|_| {}));
            Box::new(move |m, _| {
                match hlo_fuzz::diff::disagreement(engine, m, devices, seed, edge) {
                    None => false,
                    Some(f) => needle
                        .as_ref()
                        .is_none_or(|n| f.kind != "mismatch" && f.detail.contains(n.as_str())),
                }
            })
        }
        (None, None) => {
            return Err("give the predicate: --cmd COMMAND or --engine ENGINE".into());
        }
    };
    let start = Instant::now();
    let result = hlo_fuzz::reduce::reduce(&src, &mut *predicate, &mut |n| {
        eprintln!("  {n} instructions ({:.1} s)", start.elapsed().as_secs_f64())
    });
    let _ = std::fs::remove_dir_all(&tmp);
    let r = result.map_err(|e| CliError::Message(format!("{path}: {e}")))?;
    eprintln!(
        "reduced `{path}` from {} to {} instructions ({} candidates tested, {:.1} s)",
        r.original_instrs,
        r.instrs,
        r.tests,
        start.elapsed().as_secs_f64()
    );
    match &a.output {
        Some(p) => hlo_ir::atomic::write(p, r.text.as_bytes())
            .map_err(|e| CliError::Message(format!("{}: {e}", p.display()))),
        None => {
            crate::emit(&r.text);
            Ok(())
        }
    }
}

/// Runs `cmd file` in a shell: true when it exits 0 within `timeout`.
fn run_cmd(cmd: &str, file: &std::path::Path, timeout: Duration) -> bool {
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!("{cmd} \"$1\""))
        .arg("hloc-reduce")
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else { return false };
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}
