//! `hloc opt`: runs the optimization pipeline (or the passes named) over a checked module
//! and prints the result.

use std::path::{Path, PathBuf};

use hlo_passes as passes;
use hlo_pipeline::PipelineReport;
use hlo_tools::error::CliError;

#[derive(clap::Args)]
pub struct OptArgs {
    /// The HLO text file, or `-` for standard input.
    #[arg(required_unless_present = "list_passes")]
    pub file: Option<PathBuf>,
    /// Run these passes, in this order, instead of the default pipeline (`a,b,c`).
    #[arg(long, value_delimiter = ',')]
    pub passes: Option<Vec<String>>,
    /// Do not run this pass (repeatable).
    #[arg(long)]
    pub skip: Vec<String>,
    /// Write the module after this pass (or `all`) into `--dump-dir` (repeatable).
    #[arg(long, requires = "dump_dir")]
    pub dump_after: Vec<String>,
    /// The directory for `--dump-after` (created if missing).
    #[arg(long)]
    pub dump_dir: Option<PathBuf>,
    /// Print each pass's wall time and instruction counts to standard error.
    #[arg(long)]
    pub time_passes: bool,
    /// Verify the module (structure and shapes) after every pass that changed it (always
    /// on in debug builds).
    #[arg(long)]
    pub verify_each: bool,
    /// Write the fusion report (kernels before/after, decisions, refusals by reason) as JSON.
    #[arg(long)]
    pub fusion_report: Option<PathBuf>,
    /// After `sharding-propagation`: print why NAME has its sharding, step by step back to
    /// the user's annotation (repeatable).
    #[arg(long, value_name = "NAME")]
    pub explain_sharding: Vec<String>,
    /// After `sharding-propagation`: print the reshard points (the collective each needs
    /// and the bytes it moves per device per step) and the collectives the computation
    /// itself needs.
    #[arg(long)]
    pub sharding_report: bool,
    /// The device mesh, for reports in named axes (`data=4,model=2`; default: inferred
    /// from the shardings, axes x0, x1, ...).
    #[arg(long, value_name = "AXIS=SIZE,...")]
    pub mesh: Option<String>,
    /// Write the optimized module here instead of standard output.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// List the passes and the default pipeline, then exit.
    #[arg(long)]
    pub list_passes: bool,
}

pub fn run(a: OptArgs) -> Result<(), CliError> {
    if a.list_passes {
        list_passes();
        return Ok(());
    }
    let file = a.file.as_deref().expect("clap requires FILE without --list-passes");
    let options = build_options(&a);
    let (path, src) = crate::read_input(file)?;
    let original = crate::load_checked_source(&path, &src)?;
    let mesh = match a.mesh.as_deref().map(hlo_spmd::sharding::Mesh::parse).transpose() {
        Ok(mesh) => mesh,
        Err(e) => return Err(CliError::Message(format!("--mesh: {e}"))),
    };
    if let Some(mesh) = &mesh {
        let diags = hlo_ir::Diagnostics(mesh.check(&original, Some(&src)));
        if diags.has_errors() {
            return Err(CliError::located(diags, &src, &path));
        }
    }
    let wants_sharding = !a.explain_sharding.is_empty() || a.sharding_report;
    let named = |p: &str| a.passes.as_ref().is_some_and(|v| v.iter().any(|n| n == p));
    // What `hloc opt` prints is for XLA to compile as it is. A combined (variadic)
    // all-reduce is not: XLA's text-to-StableHLO path fails on it ("LogicalBuffer ... does
    // not have a layout", with or without layouts on the tuple's elements). The engines
    // combine all-reduces themselves when they run on N devices.
    if named("all-reduce-combiner") && !a.skip.iter().any(|s| s == "all-reduce-combiner") {
        return Err(CliError::Message(
            "`all-reduce-combiner` is not run by `hloc opt`: it makes variadic all-reduces, \
             which XLA does not compile from text, and `hloc opt` prints modules for XLA\n  \
             = help: the engines combine all-reduces when they run on N devices \
             (`hloc run --devices N`, `hloc compile --chips N`)"
                .into(),
        ));
    }
    if wants_sharding
        && (!named("sharding-propagation") || a.skip.iter().any(|s| s == "sharding-propagation"))
    {
        return Err(CliError::Message(
            "--explain-sharding and --sharding-report need `--passes ...,sharding-propagation`"
                .into(),
        ));
    }
    let compiled = match hlo_driver::compile(&original, &hlo_driver::Host, &options) {
        Ok(c) => c,
        Err(diags) => return Err(CliError::located(diags, &src, &path)),
    };
    let m = &compiled.program;
    let empty = PipelineReport::default();
    let report = compiled.optimization.as_ref().unwrap_or(&empty);
    for note in &report.notes {
        eprintln!("note: {note}");
    }
    if a.time_passes {
        eprint!("{}", compiled.time_table());
    }
    if wants_sharding {
        sharding_reports(&a, m, report, mesh.as_ref())?;
    }
    if let Some(out) = &a.fusion_report {
        write_fusion_report(out, &original, m, report)
            .map_err(|e| CliError::io("write", out, e))?;
    }
    let text = hlo_ir::text::print(m);
    match &a.output {
        Some(p) => {
            hlo_ir::atomic::write(p, text.as_bytes()).map_err(|e| CliError::io("write", p, e))?;
        }
        None => crate::emit(&text),
    }
    Ok(())
}

/// `--explain-sharding` and `--sharding-report`, on standard error.
fn sharding_reports(
    a: &OptArgs,
    m: &hlo_ir::Module,
    report: &PipelineReport,
    mesh: Option<&hlo_spmd::sharding::Mesh>,
) -> Result<(), CliError> {
    use hlo_spmd::sharding::{self, Mesh, Spec};
    let inferred;
    let mesh = match mesh {
        Some(mesh) => Some(mesh),
        None => {
            let specs: Vec<Spec> = m
                .comps()
                .iter()
                .flat_map(|c| c.instrs())
                .filter_map(|i| i.sharding.as_ref().and_then(|s| Spec::from_ir(s)))
                .collect();
            inferred = Mesh::infer(&specs.iter().collect::<Vec<_>>());
            inferred.as_ref()
        }
    };
    let Some(prop) = report.context.report::<hlo_spmd::sharding::Propagation>() else {
        return Err("sharding-propagation did not run (skipped?)".into());
    };
    if let Some(mesh) = mesh {
        eprintln!("mesh: {mesh}");
    }
    for name in &a.explain_sharding {
        match prop.explain(m, name, mesh) {
            Ok(text) => eprint!("{text}"),
            Err(e) => return Err(CliError::Message(format!("--explain-sharding: {e}"))),
        }
    }
    if a.sharding_report {
        eprint!("{}", sharding::reshard::report(m).render(mesh));
    }
    Ok(())
}

/// The driver's options for these arguments (pass names are checked by the driver).
fn build_options(a: &OptArgs) -> hlo_driver::Options {
    let optimizer = match &a.passes {
        Some(names) => hlo_driver::Optimizer::Passes(names.clone()),
        None => hlo_driver::Optimizer::Default,
    };
    let mut o = hlo_driver::Options::default()
        .with_optimizer(optimizer)
        .verifying_each(a.verify_each || cfg!(debug_assertions));
    o.skip = a.skip.clone();
    o.dump = a.dump_dir.clone().map(|dir| (dir, a.dump_after.clone()));
    o
}

fn list_passes() {
    let (order, described) = hlo_driver::default_order();
    let host = hlo_driver::host_only_passes();
    outln!("{:<36} {:<9} what it does", "pass", "default");
    for p in hlo_driver::registry() {
        let d = if order.contains(&p.name) {
            "yes"
        } else if host.contains(&p.name) {
            "host"
        } else {
            "no"
        };
        outln!("{:<36} {:<9} {}", p.name, d, p.about);
    }
    outln!("");
    outln!("default order: {described}");
    outln!(
        "the JIT (host) runs the default order with {} before its simplify group",
        host.join(", ")
    );
}

fn write_fusion_report(
    out: &Path,
    before: &hlo_ir::Module,
    after: &hlo_ir::Module,
    report: &PipelineReport,
) -> std::io::Result<()> {
    let r = passes::fusion::report::fusion_report(
        before,
        after,
        &report
            .context
            .report::<passes::fusion::decision::FusionLog>()
            .cloned()
            .unwrap_or_default(),
    );
    let json = serde_json::to_string_pretty(&r.to_json()).expect("JSON values serialize");
    hlo_ir::atomic::write(out, json.as_bytes())
}
