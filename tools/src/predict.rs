//! What `hloc compile --chips N` computes, as a library: the chip configuration of a
//! slice, the per-chip program compiled by the driver, the chips simulated, and the
//! report (text or the JSON object of `--json`). The command line and the Python package
//! (`tools/python`, `hloc.predict`) both call these functions, so the two give the same
//! fields by construction.
//!
//! ```text
//!  chips_config(chip, N, slices, topology, placement, per_core) ──▶ TpuConfig
//!  compile_chips(&Checked<Module>, &TpuConfig, N, passes) ──▶ hlo_engine::TpuChipsExecutable
//!      [apply_trip_counts] ─▶ simulate_chips ──▶ Vec<Run>
//!      ─▶ chips_json (the `--json` object) / chips_report (text or JSON)
//!  predict: the whole chain above, as `hloc compile FILE --chips N --json` runs it
//! ```
//!
//! Failures are [`CliError`]s (the messages the command line prints), or the driver's
//! [`Diagnostics`] where a function is given a module without its text.

use std::path::Path;

use hlo_analysis::memory_usage::{MemoryUsage, memory_usage};
use hlo_check::Checked;
use hlo_chip::chip;
use hlo_chip::config::TpuConfig;
use hlo_chip::torus::Torus;
use hlo_engine::{EngineError, TpuChipsExecutable, TpuModel};
use hlo_ir::{Diagnostics, Module, Tensor};
use hlo_tpu::engine::Run;
use hlo_tpu::lower::Passes;

use crate::error::CliError;

/// The chip preset `name` (`v2`, `v3`, `v4`, `v5e`, `v5p`).
pub fn config(name: &str) -> Result<TpuConfig, CliError> {
    TpuConfig::preset(name).ok_or_else(|| {
        CliError::Message(format!(
            "unknown TPU config `{name}` (expected one of {})",
            TpuConfig::PRESETS.join(", ")
        ))
    })
}

/// The slice `chips` chips of `cfg` form: `topology` (`16x16x8`) or Cloud TPU's default
/// shape, with the coordinates of `placement` (the file they were read from, for
/// messages, and one coordinate list per device id).
pub fn slice(
    cfg: &TpuConfig,
    chips: u64,
    topology: Option<&str>,
    placement: Option<(&Path, Vec<Vec<u64>>)>,
) -> Result<Torus, CliError> {
    let torus = match topology {
        Some(t) => {
            let dims = Torus::parse_shape(t)?;
            let torus = Torus::new(dims, cfg.ici.wrap);
            if torus.chips() != chips {
                return Err(CliError::Message(format!(
                    "--topology {t} has {} chips, but each slice has {chips}",
                    torus.chips()
                )));
            }
            torus
        }
        None => Torus::slice(chips, cfg.ici.axes, cfg.ici.wrap),
    };
    let Some((p, mut coords)) = placement else { return Ok(torus) };
    let axes = torus.dims.len();
    for (i, c) in coords.iter_mut().enumerate() {
        // A 3-D coordinate on a 2-D slice must have a zero third axis.
        let outside =
            c.iter().zip(&torus.dims).any(|(x, d)| x >= d) || c.iter().skip(axes).any(|&x| x > 0);
        if outside {
            return Err(CliError::Message(format!(
                "`{}`: device {i} at {c:?} is outside the {} slice",
                p.display(),
                torus.describe()
            )));
        }
        c.resize(axes, 0);
    }
    Ok(torus.with_coords(coords))
}

/// The configuration `n` chips of preset `chip` run with (`hloc compile --chips N`):
/// `slices` slices joined by the data-center network, each one a `topology` slice (or
/// Cloud TPU's default shape) with the devices at `placement`; `per_core`: each device
/// is one TensorCore.
pub fn chips_config(
    chip: &str,
    n: usize,
    slices: Option<u64>,
    topology: Option<&str>,
    placement: Option<(&Path, Vec<Vec<u64>>)>,
    per_core: bool,
) -> Result<TpuConfig, CliError> {
    let mut cfg = config(chip)?;
    if let Some(s) = slices {
        if s == 0 || !(n as u64).is_multiple_of(s) {
            return Err(CliError::Message(format!("--slices {s} does not divide --chips {n}")));
        }
        cfg.chips_per_slice = (s > 1).then_some(n as u64 / s);
    }
    let per_slice = cfg.chips_per_slice.unwrap_or(n as u64);
    let chips = if per_core { per_slice.div_ceil(cfg.cores_per_chip.max(1)) } else { per_slice };
    cfg.slice = Some(slice(&cfg, chips, topology, placement)?);
    if per_core {
        cfg = cfg.one_core();
    }
    Ok(cfg)
}

/// `m` compiled for `n` chips of `cfg` by the TPU engine (the driver propagates the
/// shardings, partitions the module, optimizes and lowers the per-chip program).
pub fn compile_chips(
    m: &Checked<Module>,
    cfg: &TpuConfig,
    n: usize,
    passes: Passes,
) -> Result<TpuChipsExecutable, Diagnostics> {
    let engine = TpuModel::new(hlo_driver::Tpu::new(cfg.clone(), passes));
    engine.compile_chips(m, n, &hlo_engine::Options::default()).map_err(|e| e.diagnostics())
}

/// Sets the trip counts of data-dependent loops (`LOOP=N`) in the lowered program; an
/// error names a loop the program does not have.
pub fn apply_trip_counts(
    lowered: &mut hlo_tpu::lower::Lowered,
    given: &[(String, u64)],
) -> Result<(), CliError> {
    for (name, n) in given {
        if !lowered.program.set_trip_count(name, *n) {
            return Err(CliError::Message(format!(
                "--trip-count: the lowered program has no while loop `{name}`"
            )));
        }
    }
    Ok(())
}

/// Every chip of a program `compile_chips` made, simulated (on `inputs` when given, to
/// follow data-dependent control flow).
pub fn simulate_chips(
    exe: &TpuChipsExecutable,
    inputs: Option<&[Tensor]>,
) -> Result<Vec<Run>, Diagnostics> {
    exe.simulate(inputs, &exe.options()).map_err(|e: EngineError| e.diagnostics())
}

/// The report of `hloc compile --chips N --json`: the slowest chip's report with the
/// chips, the links, the collectives, the HBM peak and, with `model_flops`, the MFU;
/// `module` is the per-chip program the `runs` ran.
pub fn chips_json(
    runs: &[Run],
    module: &Module,
    cfg: &TpuConfig,
    model_flops: Option<f64>,
) -> serde_json::Value {
    use hlo_spmd::inventory;
    let slowest = runs.iter().max_by_key(|r| r.sim.step_cycles()).expect("at least one chip");
    let r = slowest.sim.report();
    let inv = inventory::inventory(module);
    let slices = cfg.chips_per_slice.map(|per| runs.len() as u64 / per.max(1));
    let mut v = r.to_json();
    v["chips"] = serde_json::json!(runs.len());
    let slice = cfg.slice.as_ref().map(|t| t.describe());
    v["ici"] = serde_json::json!({ "topology": cfg.ici.topology, "slice": slice, "links_per_chip": cfg.ici.links_per_chip, "link_bytes_per_s": cfg.ici.link_bytes_per_s });
    if let (Some(slices), Some(per)) = (slices, cfg.chips_per_slice) {
        v["dcn"] = serde_json::json!({ "slices": slices, "chips_per_slice": per, "host_bytes_per_s": cfg.dcn.host_bytes_per_s, "chips_per_host": cfg.dcn.chips_per_host });
    }
    v["collectives"] = inv
        .iter()
        .map(|i| serde_json::json!({ "kind": i.kind, "count": i.count, "bytes": i.bytes }))
        .collect();
    v["control_flow"] = serde_json::json!(slowest.control);
    hbm_json(&mut v, &memory_usage(module, cfg.hbm_bytes));
    v["peak_rss_bytes"] = serde_json::json!(peak_rss_bytes());
    mfu_json(&mut v, &r, model_flops);
    v
}

/// The slowest chip's report, led by the step split into compute and communication
/// (`json`: [`chips_json`], pretty-printed); `module` is the per-chip program the `runs`
/// ran.
pub fn chips_report(
    runs: &[Run],
    module: &Module,
    cfg: &TpuConfig,
    model_flops: Option<f64>,
    json: bool,
    top: usize,
) -> String {
    use hlo_spmd::inventory;
    if json {
        let v = chips_json(runs, module, cfg, model_flops);
        return format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default());
    }
    let slowest = runs.iter().max_by_key(|r| r.sim.step_cycles()).expect("at least one chip");
    let r = slowest.sim.report();
    let inv = inventory::inventory(module);
    let us = |c: u64| c as f64 / cfg.clock_hz * 1e6;
    let slices = cfg.chips_per_slice.map(|per| runs.len() as u64 / per.max(1));
    let dcn = match slices {
        Some(slices) => format!(
            " in {slices} slices joined by the DCN ({:.1} GB/s per host of {} chips)",
            cfg.dcn.host_bytes_per_s / 1e9,
            cfg.dcn.chips_per_host
        ),
        None => String::new(),
    };
    let mut s = format!(
        "{} chips of {} ({}, {} ICI links x {:.0} GB/s per direction){dcn}: step {:.1} us = compute {:.1} us + exposed communication {:.1} us ({:.1}% of the step); collectives {:.1} us on the ICI{}\ncollectives per chip: {}\n\n",
        runs.len(),
        cfg.name,
        match &cfg.slice {
            Some(t) => format!("{}: a {} slice", cfg.ici.topology, t.describe()),
            None => cfg.ici.topology.to_string(),
        },
        cfg.ici.links_per_chip,
        cfg.ici.link_bytes_per_s / 1e9,
        r.step_time_us,
        us(r.compute_cycles()),
        us(r.exposed_comm_cycles),
        if r.total_cycles > 0 {
            100.0 * r.exposed_comm_cycles as f64 / r.total_cycles as f64
        } else {
            0.0
        },
        us(r.comm_cycles),
        if dcn.is_empty() { "" } else { " and DCN" },
        inventory::describe(&inv)
    );
    s.push_str(&hbm_line(&memory_usage(module, cfg.hbm_bytes)));
    s.push_str(&mfu_line(&r, model_flops));
    s.push_str(&r.text(top));
    s
}

/// A prediction as [`predict`] returns it: the `--json` object and the driver's warnings
/// and notes (to report against the source).
pub struct Prediction {
    pub json: serde_json::Value,
    pub warnings: Diagnostics,
}

/// `hloc compile FILE --chips N --json` on a checked module (parsed from `src`, which
/// `path` names: its errors are located there): compiled for the `n` chips of `cfg` (see
/// [`chips_config`]) with the precision each dot states, simulated from shapes (seeded
/// inputs where control flow depends on values), reported as [`chips_json`].
pub fn predict(
    m: &Checked<Module>,
    src: &str,
    path: &str,
    cfg: &TpuConfig,
    n: usize,
    model_flops: Option<f64>,
) -> Result<Prediction, CliError> {
    let passes = Passes::AsWritten;
    let exe = compile_chips(m, cfg, n, passes).map_err(|d| CliError::located(d, src, path))?;
    let warnings = exe.compiled.warnings.clone();
    let runs = match simulate_chips(&exe, None) {
        Ok(r) => r,
        // The warnings first, as the command line reports them before the error.
        Err(d) => {
            let mut all = warnings;
            all.extend(d);
            return Err(CliError::located(all, src, path));
        }
    };
    let chip = &exe.compiled.program.program;
    Ok(Prediction { json: chips_json(&runs, &chip.module, &chip.config, model_flops), warnings })
}

/// The HBM figures of a report (JSON fields): the peak and its breakdown.
pub fn hbm_json(v: &mut serde_json::Value, h: &MemoryUsage) {
    v["hbm_capacity_bytes"] = serde_json::json!(h.capacity);
    v["hbm_parameter_bytes"] = serde_json::json!(h.parameters);
    v["hbm_output_bytes"] = serde_json::json!(h.outputs);
    v["hbm_temporary_bytes"] = serde_json::json!(h.temporaries);
    v["hbm_peak_bytes"] = serde_json::json!(h.peak);
    v["hbm_live_peak_bytes"] = serde_json::json!(h.live_peak);
    v["hbm_program_order_peak_bytes"] = serde_json::json!(h.program_order_peak);
    v["hbm_peak_at"] = serde_json::json!(h.peak_at);
    v["hbm_schedule"] = serde_json::json!(h.schedule);
    v["hbm_sizing"] = serde_json::json!(h.sizing.name());
    v["hbm_largest"] = h
        .largest
        .iter()
        .map(|(name, bytes)| serde_json::json!({ "name": name, "bytes": bytes }))
        .collect();
    v["hbm_fits"] = serde_json::json!(h.fits());
}

/// The HBM lines of a text report: the peak, its breakdown, and the largest buffers live
/// at the peak.
pub fn hbm_line(h: &MemoryUsage) -> String {
    let size = hlo_ir::tensor::format_bytes;
    let largest: Vec<String> =
        h.largest.iter().take(6).map(|(name, bytes)| format!("{name} {}", size(*bytes))).collect();
    format!(
        "HBM per chip: peak {} of {} ({}; parameters {} + outputs {} + temporaries {}; live peak {} during `{}`; {} schedule, {}; program order {})\n  largest at the peak: {}\n",
        size(h.peak),
        size(h.capacity),
        h.verdict(),
        size(h.parameters),
        size(h.outputs),
        size(h.temporaries),
        size(h.live_peak),
        h.peak_at,
        h.schedule,
        h.sizing.name(),
        size(h.program_order_peak),
        if largest.is_empty() { "none".to_string() } else { largest.join(", ") }
    )
}

/// MFU from the model's FLOPs per chip, when given (JSON fields).
pub fn mfu_json(v: &mut serde_json::Value, r: &chip::Report, model_flops: Option<f64>) {
    if let Some(f) = model_flops {
        v["model_flops"] = serde_json::json!(f);
        v["mfu_pct"] = serde_json::json!(r.utilization_pct(f));
    }
}

/// The MFU line of a text report, when the model's FLOPs are given.
pub fn mfu_line(r: &chip::Report, model_flops: Option<f64>) -> String {
    match model_flops {
        Some(f) => format!(
            "MFU {:.1}% ({f:.4e} model FLOPs per chip; HFU {:.1}% counts the {:.4e} the program executes)\n",
            r.utilization_pct(f),
            r.hfu_pct(),
            r.flops
        ),
        None => String::new(),
    }
}

/// This process's peak resident memory (`VmHWM` of `/proc/self/status`; `None` where
/// there is no procfs): what a simulation cost the machine, reported beside its result.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
