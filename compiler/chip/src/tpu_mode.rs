//! `tpu` mode: the GEMM as a TPU core would run it on one MXU.
//!
//! Differences from SCALE-Sim, term by term (the closed forms are SCALE-Sim's):
//!
//! | term | SCALE-Sim | TPU mode |
//! |---|---|---|
//! | stationary load | R cycles per fold, array idle | overlapped: two banks per PE, the next tile loads while the current one streams; a fold costs `max(T, R)` in steady state |
//! | fill/drain skew | `R + C − 2` per fold | once per program (and where a DMA wait empties the array) |
//! | streamed dimension | whole (T = M for WS) | tiled so one output tile's f32 sums fit in half the accumulators and the tile's operand rows fit in VMEM; that tile is the outer loop, so it is reused across all column blocks |
//! | partial sums | written per K fold, never read | accumulated in f32 accumulators (read-modify-write counted as `acc_reads`) |
//! | memory | three SRAMs of 1-byte words, CALC/USER prefetcher | VMEM (a third per operand, least-recently-used) fed by DMA from HBM: bytes by dtype (bf16 in, f32 out), bandwidth = chip HBM / MXUs, fixed latency, input tiles prefetched up to D folds ahead (D VMEM slots per operand), overlap with compute |
//! | cycles | index of the last cycle | cycle count until the last write-back completes |

use std::time::Instant;

use super::config::TpuConfig;
use super::report::{Model, Report};
use super::tile_ir::{Gemm, Schedule, TileProgram};
use super::timeline::{self, DmaEngine, Timeline};

/// The HBM channel one MXU sees under `cfg`.
pub fn dma_engine(cfg: &TpuConfig) -> DmaEngine {
    DmaEngine::new(cfg.hbm_bytes_per_cycle(), cfg.hbm_latency_cycles)
}

/// The report of a pipelined-schedule run (fast or PE model).
pub fn report(p: &TileProgram, tl: &Timeline, cfg: &TpuConfig, model: Model) -> Report {
    let (r, c, g, df) = (p.rows, p.cols, p.gemm, p.dataflow);
    let arr = (r * c) as f64;
    let macs = g.macs();
    let (row_folds, col_folds) = p.fold_counts();
    let mapped: u64 = p.folds.iter().map(|f| f.extent(df)).map(|(a, b, _)| a * b).sum();
    let streamed: u64 = p.folds.iter().map(|f| f.extent(df).2).sum();
    let bytes = tl.counters.dma_in_bytes + tl.counters.dma_out_bytes;
    let roofline =
        macs.div_ceil(r * c).max((bytes as f64 / cfg.hbm_bytes_per_cycle()).ceil() as u64);
    let (sr, sc, _) = p.spatial();
    Report {
        model,
        config: cfg.name.clone(),
        rows: r,
        cols: c,
        dataflow: df,
        gemm: g,
        conv: None,
        schedule: p.schedule.name(),
        total_cycles: tl.total_cycles,
        compute_cycles: tl.compute_cycles,
        stall_cycles: tl.total_cycles - tl.compute_cycles,
        total_cycles_incl_prefetch: None,
        macs,
        sr,
        sc,
        t: streamed,
        row_folds,
        col_folds,
        folds: p.folds.len() as u64,
        overall_util_pct: 100.0 * macs as f64 / (arr * tl.total_cycles as f64),
        mapping_eff_pct: 100.0 * mapped as f64 / (p.folds.len() as f64 * arr),
        compute_util_pct: 100.0 * macs as f64 / (arr * tl.compute_cycles as f64),
        sram_ifmap_reads: tl.counters.ifmap_reads,
        sram_filter_reads: tl.counters.filter_reads,
        sram_ofmap_writes: tl.counters.ofmap_writes,
        dram: None,
        hbm_read_bytes: Some(tl.counters.dma_in_bytes),
        hbm_write_bytes: Some(tl.counters.dma_out_bytes),
        acc_reads: Some(tl.counters.acc_reads),
        seconds: Some(tl.total_cycles as f64 / cfg.clock_hz),
        roofline_cycles: Some(roofline),
        numerics_exact: None,
        wall_s: 0.0,
    }
}

/// Runs TPU mode (fast model) for `gemm` on `cfg`.
pub fn run(gemm: Gemm, cfg: &TpuConfig) -> (TileProgram, Timeline, Report) {
    let start = Instant::now();
    let p = TileProgram::gemm(gemm, cfg, Schedule::Pipelined);
    let tl = timeline::simulate(&p, Some(dma_engine(cfg)));
    let mut rep = report(&p, &tl, cfg, Model::Tpu);
    rep.wall_s = start.elapsed().as_secs_f64();
    (p, tl, rep)
}
