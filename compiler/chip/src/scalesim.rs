//! `scalesim` mode: SCALE-Sim 3.0.0's numbers, exactly.
//!
//! The compute side comes from the fast model under the sequential schedule (which is
//! SCALE-Sim's: each fold loads, streams and drains alone); the memory side (stalls, DRAM
//! words, prefetch) from [`super::scalesim_mem`], in closed form where that is exact.
//! SCALE-Sim's conventions are applied on top, each one named where it is applied:
//!
//! * cycles are reported as the index of the last cycle (one less than the cycle count);
//! * output-stationary ofmap writes are double counted, `+ F·(R + C)`
//!   (`systolic_compute_os.py:385` and `:403`);
//! * "compute util" divides by `L + C − 1` cycles per fold for WS/IS
//!   (`systolic_compute_ws.py:403`), by `L` for OS;
//! * words are one byte; SRAM sizes are kilo-words.

use std::time::Instant;

use super::config::{Dataflow, TpuConfig};
use super::report::{Model, Report};
use super::scalesim_mem::{self, Layer, MemConfig};
use super::tile_ir::{Conv, Gemm, Schedule, TileProgram};
use super::timeline::{self, Timeline};

/// A SCALE-Sim run's inputs.
#[derive(Clone, Debug)]
pub struct ScalesimSetup {
    pub gemm: Gemm,
    /// Native conv mode (SCALE-Sim computes real ifmap addresses); else GEMM mode.
    pub conv: Option<Conv>,
    pub rows: u64,
    pub cols: u64,
    pub dataflow: Dataflow,
    /// ifmap, filter, ofmap SRAM sizes in kB (kilo-words).
    pub sram_kb: [u64; 3],
    /// `None`: CALC mode (bandwidth estimated, no stalls); `Some(w)`: USER mode at w words/cycle.
    pub bandwidth: Option<u64>,
}

impl ScalesimSetup {
    pub fn gemm(gemm: Gemm, rows: u64, cols: u64, dataflow: Dataflow) -> ScalesimSetup {
        ScalesimSetup {
            gemm,
            conv: None,
            rows,
            cols,
            dataflow,
            sram_kb: [1024; 3],
            bandwidth: None,
        }
    }

    pub fn conv(conv: Conv, rows: u64, cols: u64, dataflow: Dataflow) -> ScalesimSetup {
        ScalesimSetup {
            conv: Some(conv),
            ..ScalesimSetup::gemm(conv.im2col(), rows, cols, dataflow)
        }
    }

    /// Errors on input SCALE-Sim does not accept (or that is too large to model).
    pub fn validate(&self) -> Result<(), crate::TpuError> {
        scalesim_mem::validate(&self.layer(), &self.mem_config())
    }

    /// Whether the memory system has to be walked request by request (USER mode with an operand
    /// larger than its active SRAM half, or an overlapping-window conv whose ifmap overflows
    /// CALC mode's epoch); otherwise closed forms give it in microseconds.
    pub fn memory_walked(&self) -> bool {
        scalesim_mem::uses_walk(&self.layer(), &self.mem_config())
    }

    fn layer(&self) -> Layer {
        match self.conv {
            Some(c) => Layer::Conv {
                ih: c.ih,
                iw: c.iw,
                fh: c.fh,
                fw: c.fw,
                c: c.c,
                nf: c.nf,
                stride: c.stride,
            },
            None => Layer::Gemm { m: self.gemm.m, n: self.gemm.n, k: self.gemm.k },
        }
    }

    fn mem_config(&self) -> MemConfig {
        let [i, f, o] = self.sram_kb;
        MemConfig {
            rows: self.rows,
            cols: self.cols,
            dataflow: self.dataflow,
            ifmap_kb: i,
            filter_kb: f,
            ofmap_kb: o,
            bandwidth: self.bandwidth,
        }
    }
}

/// The compute-side report of a sequential-schedule run (fast or PE model), with
/// SCALE-Sim's conventions; memory fields are left empty.
pub fn compute_report(p: &TileProgram, tl: &Timeline, model: Model) -> Report {
    let (r, c, g) = (p.rows, p.cols, p.gemm);
    let (sr, sc, t) = p.spatial();
    let (row_folds, col_folds) = p.fold_counts();
    let folds = row_folds * col_folds;
    // SCALE-Sim reports the index of the last cycle, not the count.
    let compute_cycles = tl.compute_cycles - 1;
    let per_fold = tl.compute_cycles / folds;
    let util_cycles = if p.dataflow == Dataflow::Os { per_fold } else { per_fold + c - 1 };
    let arr = (r * c) as f64;
    let mut ofmap_writes = tl.counters.ofmap_writes;
    if p.dataflow == Dataflow::Os {
        ofmap_writes += folds * (r + c);
    }
    let macs = g.macs();
    Report {
        model,
        config: "scalesim-3.0".into(),
        rows: r,
        cols: c,
        dataflow: p.dataflow,
        gemm: g,
        conv: None,
        schedule: p.schedule.name(),
        total_cycles: compute_cycles,
        compute_cycles,
        stall_cycles: 0,
        total_cycles_incl_prefetch: None,
        macs,
        sr,
        sc,
        t,
        row_folds,
        col_folds,
        folds,
        overall_util_pct: 100.0 * macs as f64 / (arr * compute_cycles as f64),
        mapping_eff_pct: 100.0 * (sr * sc) as f64 / (folds as f64 * arr),
        compute_util_pct: 100.0 * (sr * sc * t) as f64 / (folds as f64 * arr * util_cycles as f64),
        sram_ifmap_reads: tl.counters.ifmap_reads,
        sram_filter_reads: tl.counters.filter_reads,
        sram_ofmap_writes: ofmap_writes,
        dram: None,
        hbm_read_bytes: None,
        hbm_write_bytes: None,
        acc_reads: None,
        seconds: None,
        roofline_cycles: None,
        numerics_exact: None,
        wall_s: 0.0,
    }
}

/// Runs SCALE-Sim mode. Errors only on input SCALE-Sim does not accept.
pub fn run(s: &ScalesimSetup) -> Result<Report, crate::TpuError> {
    let start = Instant::now();
    s.validate()?;
    let (program, tl) = s.compute_side();
    let mut rep = s.with_memory(&program, &tl)?;
    rep.wall_s = start.elapsed().as_secs_f64();
    Ok(rep)
}

impl ScalesimSetup {
    /// The sequential-schedule program and its fast-model timeline (SCALE-Sim's compute side).
    pub fn compute_side(&self) -> (TileProgram, Timeline) {
        let cfg = TpuConfig {
            rows: self.rows,
            cols: self.cols,
            dataflow: self.dataflow,
            ..TpuConfig::v2()
        };
        let program = TileProgram::gemm(self.gemm, &cfg, Schedule::Sequential);
        let tl = timeline::simulate(&program, None);
        (program, tl)
    }

    /// The full report: [`compute_report`] of `(program, tl)` (from [`Self::compute_side`])
    /// plus SCALE-Sim's memory system (stalls, DRAM words, prefetch). Call [`Self::validate`]
    /// first.
    pub fn with_memory(
        &self,
        program: &TileProgram,
        tl: &Timeline,
    ) -> Result<Report, crate::TpuError> {
        let start = Instant::now();
        let mem = scalesim_mem::simulate_memory(&self.layer(), &self.mem_config());
        let mut rep = compute_report(program, tl, Model::Scalesim);
        rep.conv = self.conv;
        rep.stall_cycles = mem.stall_cycles;
        rep.total_cycles = rep.compute_cycles + mem.stall_cycles;
        if mem.total_cycles != rep.total_cycles {
            return Err(crate::TpuError::from(format!(
                "internal error: the memory model's cycle count {} disagrees with compute {} + stalls {}",
                mem.total_cycles, rep.compute_cycles, mem.stall_cycles
            )));
        }
        // SCALE-Sim's SRAM counters are the compute side's closed forms (§5 of
        // systolic-model.md); the memory system serves the same requests, except the OS double
        // count and, in native conv mode, `-1` entries of windows that leave the image.
        let ofmap_writes = rep.sram_ofmap_writes
            - if self.dataflow == Dataflow::Os { rep.folds * (self.rows + self.cols) } else { 0 };
        let served = [mem.sram_ifmap_requests, mem.sram_filter_requests, mem.sram_ofmap_requests];
        if self.conv.is_none()
            && served != [rep.sram_ifmap_reads, rep.sram_filter_reads, ofmap_writes]
        {
            return Err(crate::TpuError::from(format!(
                "internal error: the memory model served {served:?} requests where the compute side counts {:?}",
                [rep.sram_ifmap_reads, rep.sram_filter_reads, ofmap_writes]
            )));
        }
        rep.overall_util_pct =
            100.0 * rep.macs as f64 / ((self.rows * self.cols) as f64 * rep.total_cycles as f64);
        rep.total_cycles_incl_prefetch = mem.total_cycles_incl_prefetch;
        rep.dram = Some([mem.dram_ifmap_reads, mem.dram_filter_reads, mem.dram_ofmap_writes]);
        rep.wall_s = start.elapsed().as_secs_f64();
        Ok(rep)
    }
}
