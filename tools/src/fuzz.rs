//! `hloc fuzz`: generated modules on every engine, each compared with the reference
//! interpreter (the differential harness of `hlo-fuzz`), with a summary table.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use hlo_fuzz::{Config, Engine, differential, module_of_seed};
use hlo_tools::error::CliError;

#[derive(clap::Args, Debug)]
pub struct FuzzArgs {
    /// The first seed: module `k` of the run is the module of seed `seed + k`.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// How many modules.
    #[arg(long, default_value_t = 300)]
    pub count: u64,
    /// Engines compared with the interpreter (comma-separated: jit, tpu, opt+interp,
    /// devices-interp, devices-jit); default all.
    #[arg(long, value_delimiter = ',')]
    pub engines: Vec<String>,
    /// NaN, infinities, signed zeros and integer extremes in inputs and constants.
    #[arg(long)]
    pub edge_values: bool,
    /// Largest number of instructions of a module's entry.
    #[arg(long, default_value_t = 24)]
    pub max_instrs: usize,
    /// Devices of the sharded modules.
    #[arg(long, default_value_t = 4)]
    pub devices: usize,
    /// Write every module with a finding here (`seed-N.hlo`, with the finding as comments).
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Also run every module on XLA CPU (the oracle's Python, one process for the batch);
    /// where XLA differs, an f64 reference says who is wrong.
    #[arg(long)]
    pub xla: bool,
    /// Print the module of `--seed` and stop.
    #[arg(long)]
    pub print: bool,
}

/// `hloc fuzz`: exit status 1 when any engine disagreed, failed or panicked.
pub fn run(a: &FuzzArgs) -> Result<ExitCode, CliError> {
    let cfg = Config {
        max_instrs: a.max_instrs.max(1),
        edge_values: a.edge_values,
        devices: a.devices,
        ..Config::default()
    };
    if a.print {
        let g = module_of_seed(a.seed, &cfg);
        crate::emit(&g.text);
        if let Some(s) = &g.sharded {
            crate::emit(&format!("\n// sharded:\n{s}"));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let engines: Vec<Engine> = if a.engines.is_empty() {
        Engine::OTHERS.to_vec()
    } else {
        let mut v = Vec::new();
        for e in &a.engines {
            match Engine::from_name(e) {
                Some(e) => v.push(e),
                None => return Err(CliError::Message(format!("unknown engine `{e}`"))),
            }
        }
        v
    };
    if let Some(d) = &a.save
        && let Err(e) = std::fs::create_dir_all(d)
    {
        return Err(CliError::Message(format!("{}: {e}", d.display())));
    }
    // Panics are findings: the harness catches them; their messages are in the table.
    std::panic::set_hook(Box::new(|_| {}));
    let start = Instant::now();
    let mut agreed: BTreeMap<Engine, u64> = BTreeMap::new();
    let mut findings: BTreeMap<(Engine, &'static str), u64> = BTreeMap::new();
    let mut refusals: BTreeMap<(Engine, String), u64> = BTreeMap::new();
    let mut bad = 0u64;
    let python = if a.xla {
        match hlo_io::oracle::python() {
            Some(p) => Some(p),
            None => {
                return Err(
                    "--xla needs the oracle's Python (bash ../shared/xla-oracle/setup.sh)".into()
                );
            }
        }
    } else {
        None
    };
    let mut xla_cases = Vec::new();
    for k in 0..a.count {
        let seed = a.seed + k;
        let g = module_of_seed(seed, &cfg);
        let r = differential(&g, seed, &engines, a.devices);
        for e in &r.agreed {
            *agreed.entry(*e).or_default() += 1;
        }
        for (e, msg) in &r.refusals {
            *refusals.entry((*e, unnamed(&first_line(msg)))).or_default() += 1;
        }
        if let (true, Some(reference)) = (a.xla, &r.reference)
            && let Ok(m) = hlo_fuzz::diff::load(&g.text)
        {
            xla_cases.push(hlo_fuzz::xla::Case {
                seed,
                text: g.text.clone(),
                inputs: r.inputs.clone(),
                reference: reference.clone(),
                tolerances: g.tolerances.clone(),
                outputs: m.entry_output_shapes(),
                jit: r.jit.clone(),
            });
        }
        if r.findings.is_empty() {
            continue;
        }
        bad += 1;
        for f in &r.findings {
            *findings.entry((f.engine, f.kind)).or_default() += 1;
            eprintln!("seed {seed}: {} {}: {}", f.engine.name(), f.kind, first_line(&f.detail));
        }
        if let Some(d) = &a.save {
            let mut text = String::new();
            for f in &r.findings {
                for l in format!("{} {}: {}", f.engine.name(), f.kind, f.detail).lines() {
                    text.push_str(&format!("// {l}\n"));
                }
            }
            text.push_str(&format!("// hloc fuzz --seed {seed} --count 1\n"));
            text.push_str(&g.text);
            if let Some(s) = &g.sharded {
                text.push_str("\n// sharded:\n");
                for l in s.lines() {
                    text.push_str(&format!("// {l}\n"));
                }
            }
            let _ = std::fs::write(d.join(format!("seed-{seed}.hlo")), text);
        }
    }
    let mut xla_line = None;
    if let Some(py) = &python {
        let verdicts = match hlo_fuzz::xla::run(py, &xla_cases) {
            Ok(v) => v,
            Err(e) => return Err(CliError::Message(e.to_string())),
        };
        let (mut agree, mut errors, mut differs, mut mismatch) = (0, 0, 0, 0);
        for (c, v) in xla_cases.iter().zip(&verdicts) {
            use hlo_fuzz::xla::Verdict;
            match v {
                Verdict::Agrees => agree += 1,
                Verdict::Error(e) => {
                    errors += 1;
                    eprintln!("seed {}: xla error: {}", c.seed, first_line(e));
                }
                Verdict::XlaDiffers(d) => {
                    differs += 1;
                    eprintln!("seed {}: xla differs, we are right: {}", c.seed, first_line(d));
                }
                Verdict::Mismatch(d) => {
                    mismatch += 1;
                    bad += 1;
                    eprintln!("seed {}: xla mismatch: {}", c.seed, first_line(d));
                }
            }
        }
        xla_line = Some(format!(
            "xla: {agree} agreed, {mismatch} mismatches, {differs} where XLA differs and the f64 reference (or the JIT) sides with the interpreter, {errors} XLA errors"
        ));
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{} modules (seeds {}..{}), {:.1} s ({:.1} ms per module); modules with a finding: {bad}",
        a.count,
        a.seed,
        a.seed + a.count,
        secs,
        1e3 * secs / a.count.max(1) as f64
    );
    println!(
        "{:<16} {:>8} {:>9} {:>7} {:>8} {:>8}",
        "engine", "agreed", "mismatch", "failed", "panicked", "refused"
    );
    for &e in &engines {
        let f = |k| findings.get(&(e, k)).copied().unwrap_or(0);
        let refused: u64 = refusals.iter().filter(|((x, _), _)| *x == e).map(|(_, n)| n).sum();
        println!(
            "{:<16} {:>8} {:>9} {:>7} {:>8} {:>8}",
            e.name(),
            agreed.get(&e).copied().unwrap_or(0),
            f("mismatch"),
            f("failed"),
            f("panicked"),
            refused
        );
    }
    if let Some(l) = &xla_line {
        println!("{l}");
    }
    for k in ["invalid", "failed", "panicked"] {
        let n = findings.get(&(Engine::Interp, k)).copied().unwrap_or(0);
        if n > 0 {
            println!("reference interpreter: {n} {k}");
        }
    }
    if !refusals.is_empty() {
        println!("refusals:");
        for ((e, msg), n) in &refusals {
            println!("  {n:>6}  {:<16} {msg}", e.name());
        }
    }
    Ok(if bad == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn first_line(s: &str) -> String {
    let l = s.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    l.chars().take(160).collect()
}

/// `msg` with backquoted names replaced by `_`: refusals of one kind count together.
fn unnamed(msg: &str) -> String {
    let mut out = String::new();
    let mut parts = msg.split('`');
    if let Some(p) = parts.next() {
        out.push_str(p);
    }
    for (i, p) in parts.enumerate() {
        out.push_str(if i % 2 == 0 { "`_" } else { "`" });
        if i % 2 == 1 {
            out.push_str(p);
        }
    }
    out
}
