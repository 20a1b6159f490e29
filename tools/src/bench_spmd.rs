//! `hloc bench spmd`: the bench transformer training step (`../shared/bench/
//! train_transformer_sgd`) sharded two ways over 1, 2, 4 and 8 devices:
//! - data-parallel: the token batch split over `data`, every weight replicated;
//! - 2-D: `data x model` with `model = 2` (Megatron: w1/wq/wk/wv column-split, w2/wo
//!   row-split, b1 split), the batch over `data`.
//!
//! For each: the simulated step on v4 chips linked by ICI (compute, exposed
//! communication, its share of the step, the ideal `t1 / N` and the scaling efficiency)
//! and the multi-device runtime's wall time on N host threads (JIT, median of `repeat`).

use std::path::Path;
use std::time::Instant;

use hlo_chip::config::TpuConfig;
use hlo_engine::TpuModel;
use hlo_ir::Module;
use hlo_spmd::sharding::Mesh;
use hlo_tpu::lower::Passes;

const CASE: &str = "train_transformer_sgd";

#[derive(Clone, Copy, PartialEq)]
enum Strategy {
    Data,
    TwoD,
}

impl Strategy {
    fn name(self) -> &'static str {
        match self {
            Strategy::Data => "data-parallel",
            Strategy::TwoD => "2-D data x model",
        }
    }
}

/// The last key of a parameter's pytree path: `[0]['blocks'][1]['w1']` -> `w1`; the
/// batch inputs (`[1]`, `[2]`) -> `batch`.
fn leaf(path: &str) -> &str {
    match path.rsplit_once("['") {
        Some((_, rest)) => rest.trim_end_matches("']"),
        None => "batch",
    }
}

/// `m` with its entry parameters annotated for `n` devices under `s`.
fn annotate(m: &Module, paths: &[String], s: Strategy, n: i64) -> Result<Module, String> {
    let model = if s == Strategy::TwoD && n >= 2 { 2 } else { 1 };
    let mesh = Mesh { axes: vec![("data".into(), n / model), ("model".into(), model)] };
    let (data, mdl) = (0usize, 1usize);
    let mut out = m.clone();
    out.header.num_partitions = Some(n);
    let entry = out.entry;
    let params = out.comp(entry).params();
    if params.len() != paths.len() {
        return Err(format!(
            "{CASE}: {} parameters but {} paths in its json",
            params.len(),
            paths.len()
        ));
    }
    for (&p, path) in params.iter().zip(paths) {
        let rank = out.comp(entry).instr(p).shape.as_array().map_or(0, |a| a.rank());
        let mut dims: Vec<Vec<usize>> = vec![Vec::new(); rank];
        match (leaf(path), s) {
            ("batch", _) if rank >= 1 => dims[0] = vec![data],
            ("w1" | "wq" | "wk" | "wv", Strategy::TwoD) if rank == 2 => dims[1] = vec![mdl],
            ("w2" | "wo", Strategy::TwoD) if rank == 2 => dims[0] = vec![mdl],
            ("b1", Strategy::TwoD) if rank == 1 => dims[0] = vec![mdl],
            _ => {}
        }
        let spec = mesh.sharding(&dims);
        out.comp_mut(entry).instr_mut(p).sharding = Some(Box::new(spec.to_ir()));
    }
    Ok(out)
}

use crate::bench::median;

pub fn spmd(shared: &Path, repeat: usize) -> Result<(), hlo_tools::error::CliError> {
    run(shared, repeat.max(1)).map_err(Into::into)
}

fn run(shared: &Path, repeat: usize) -> Result<(), String> {
    let dir = shared.join("bench");
    let src = std::fs::read_to_string(dir.join(format!("{CASE}.hlo")))
        .map_err(|e| format!("{CASE}.hlo: {e}"))?;
    let m = hlo_driver::parse(&src).map_err(|d| {
        format!("{CASE}: {}", d.iter().map(|d| d.message.clone()).collect::<Vec<_>>().join("; "))
    })?;
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("{CASE}.json")))
            .map_err(|e| format!("{CASE}.json: {e}"))?,
    )
    .map_err(|e| e.to_string())?;
    let paths: Vec<String> = json["params"]
        .as_array()
        .ok_or("no params in the case json")?
        .iter()
        .map(|p| p["path"].as_str().unwrap_or("").to_string())
        .collect();
    let cfg = TpuConfig::v4();
    let inputs = hlo_interp::seeded::seeded_inputs(&m.entry_param_shapes(), 0)?;
    println!(
        "{CASE} ({}), simulated on {} chips ({}, {} links x {:.0} GB/s), runtime on host threads (JIT, median of {repeat})",
        json["description"].as_str().unwrap_or(""),
        cfg.name,
        cfg.ici.topology,
        cfg.ici.links_per_chip,
        cfg.ici.link_bytes_per_s / 1e9
    );
    println!(
        "\n{:<17} {:>5} {:>10} {:>10} {:>11} {:>7} {:>10} {:>6} {:>22} {:>10}",
        "strategy",
        "chips",
        "step us",
        "compute",
        "exposed us",
        "comm %",
        "ideal us",
        "eff %",
        "collectives/chip",
        "host ms"
    );
    for s in [Strategy::Data, Strategy::TwoD] {
        let mut t1 = None;
        for n in [1i64, 2, 4, 8] {
            let global = annotate(&m, &paths, s, n)?;
            let global =
                hlo_driver::check(global, None).map_err(|d| format!("{} on {n}: {d}", s.name()))?;
            let engine = TpuModel::new(hlo_driver::Tpu::new(cfg.clone(), Passes::AsWritten));
            let exe = engine
                .compile_chips(&global, n as usize, &Default::default())
                .map_err(|e| format!("{} on {n}: {e}", s.name()))?;
            let runs = exe
                .simulate(None, &exe.options())
                .map_err(|e| format!("{} on {n}: {e}", s.name()))?;
            let r =
                runs.iter().map(|r| r.sim.report()).max_by_key(|r| r.total_cycles).expect("a chip");
            let us = |c: u64| c as f64 / cfg.clock_hz * 1e6;
            let step = r.step_time_us;
            let base = *t1.get_or_insert(step);
            let ideal = base / n as f64;
            let inv = hlo_spmd::inventory::inventory(&exe.compiled.program.program.module);
            let coll: String = inv
                .iter()
                .map(|i| format!("{}{}", i.count, &i.kind[..5]))
                .collect::<Vec<_>>()
                .join(" ");
            let coll_kb = inv.iter().map(|i| i.bytes).sum::<u64>() as f64 / 1024.0;
            let prog = hlo_runtime::SpmdProgram::compile(&global, n as usize, &Default::default())
                .map_err(|e| format!("{} on {n}: {e}", s.name()))?;
            prog.run(&inputs).map_err(|e| e.to_string())?;
            let mut times = Vec::with_capacity(repeat);
            for _ in 0..repeat {
                let t = Instant::now();
                prog.run(&inputs).map_err(|e| e.to_string())?;
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
            println!(
                "{:<17} {:>5} {:>10.1} {:>10.1} {:>11.1} {:>7.1} {:>10.1} {:>6.0} {:>22} {:>10.1}",
                s.name(),
                n,
                step,
                us(r.compute_cycles()),
                us(r.exposed_comm_cycles),
                if r.total_cycles > 0 {
                    100.0 * r.exposed_comm_cycles as f64 / r.total_cycles as f64
                } else {
                    0.0
                },
                ideal,
                100.0 * ideal / step,
                if inv.is_empty() { "-".to_string() } else { format!("{coll} {coll_kb:.0}K") },
                median(times)
            );
        }
    }
    println!(
        "\nideal = the 1-chip step / N; eff = ideal / step. Host devices are threads on this machine's cores (the runtime's scaling is bounded by them)."
    );
    Ok(())
}
