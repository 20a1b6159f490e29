//! What a simulation reports: cycles, utilization, traffic; as JSON, as a SCALE-Sim-style
//! CSV row, and as a human-readable table.

use serde_json::{Value, json};

use super::config::Dataflow;
use super::tile_ir::{Conv, Gemm};

/// Which model produced a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// SCALE-Sim 3.0 reproduced exactly (fast model, sequential schedule, SCALE-Sim's
    /// memory system and conventions).
    Scalesim,
    /// The TPU model: pipelined folds, double-buffered weights, DMA from HBM (fast model).
    Tpu,
    /// The PE-level model, under SCALE-Sim's schedule or the TPU schedule.
    Pe,
}

impl Model {
    pub fn name(self) -> &'static str {
        match self {
            Model::Scalesim => "scalesim",
            Model::Tpu => "tpu",
            Model::Pe => "pe",
        }
    }
}

/// One simulated layer. Fields that a model does not produce are `None`.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub model: Model,
    pub config: String,
    pub rows: u64,
    pub cols: u64,
    pub dataflow: Dataflow,
    pub gemm: Gemm,
    pub conv: Option<Conv>,
    /// "pipelined" or "sequential".
    pub schedule: &'static str,
    pub total_cycles: u64,
    pub compute_cycles: u64,
    pub stall_cycles: u64,
    pub total_cycles_incl_prefetch: Option<u64>,
    pub macs: u64,
    pub sr: u64,
    pub sc: u64,
    pub t: u64,
    pub row_folds: u64,
    pub col_folds: u64,
    pub folds: u64,
    pub overall_util_pct: f64,
    pub mapping_eff_pct: f64,
    pub compute_util_pct: f64,
    /// Elements delivered to / produced by the array (SCALE-Sim: SRAM words).
    pub sram_ifmap_reads: u64,
    pub sram_filter_reads: u64,
    pub sram_ofmap_writes: u64,
    /// SCALE-Sim's DRAM words.
    pub dram: Option<[u64; 3]>,
    /// TPU mode: HBM bytes read and written, accumulator reads, seconds at the clock.
    pub hbm_read_bytes: Option<u64>,
    pub hbm_write_bytes: Option<u64>,
    pub acc_reads: Option<u64>,
    pub seconds: Option<f64>,
    /// Lower bound on cycles from the HBM roofline: `max(MACs / (R·C), bytes / (bytes/cycle))`.
    pub roofline_cycles: Option<u64>,
    /// PE model: whether the array's product equals the reference matmul bit for bit.
    pub numerics_exact: Option<bool>,
    /// Wall-clock seconds the simulation took.
    pub wall_s: f64,
}

impl Report {
    /// The JSON object `hloc sim --json` prints.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "model": self.model.name(),
            "config": self.config,
            "array": format!("{}x{}", self.rows, self.cols),
            "dataflow": self.dataflow.name(),
            "schedule": self.schedule,
            "M": self.gemm.m, "N": self.gemm.n, "K": self.gemm.k,
            "macs": self.macs,
            "total_cycles": self.total_cycles,
            "compute_cycles": self.compute_cycles,
            "stall_cycles": self.stall_cycles,
            "Sr": self.sr, "Sc": self.sc, "T": self.t,
            "row_folds": self.row_folds, "col_folds": self.col_folds, "folds": self.folds,
            "overall_util_pct": self.overall_util_pct,
            "mapping_eff_pct": self.mapping_eff_pct,
            "compute_util_pct": self.compute_util_pct,
            "sram_ifmap_reads": self.sram_ifmap_reads,
            "sram_filter_reads": self.sram_filter_reads,
            "sram_ofmap_writes": self.sram_ofmap_writes,
            "wall_s": self.wall_s,
        });
        let o = v.as_object_mut().unwrap();
        if let Some(c) = self.conv {
            o.insert("conv".into(), json!([c.ih, c.iw, c.fh, c.fw, c.c, c.nf, c.stride]));
        }
        if let Some(x) = self.total_cycles_incl_prefetch {
            o.insert("total_cycles_incl_prefetch".into(), json!(x));
        }
        if let Some([i, f, w]) = self.dram {
            o.insert("dram_ifmap_reads".into(), json!(i));
            o.insert("dram_filter_reads".into(), json!(f));
            o.insert("dram_ofmap_writes".into(), json!(w));
        }
        let opt = [
            ("hbm_read_bytes", self.hbm_read_bytes.map(|x| json!(x))),
            ("hbm_write_bytes", self.hbm_write_bytes.map(|x| json!(x))),
            ("acc_reads", self.acc_reads.map(|x| json!(x))),
            ("seconds", self.seconds.map(|x| json!(x))),
            ("roofline_cycles", self.roofline_cycles.map(|x| json!(x))),
            ("numerics_exact", self.numerics_exact.map(|x| json!(x))),
        ];
        for (k, x) in opt {
            if let Some(x) = x {
                o.insert(k.into(), x);
            }
        }
        v
    }

    /// SCALE-Sim-style CSV columns (the names of `shared/scalesim/reference.csv`).
    pub const CSV_HEADER: &'static str = "model,dataflow,M,N,K,rows,cols,total_cycles,stall_cycles,compute_cycles,\
total_cycles_incl_prefetch,overall_util_pct,mapping_eff_pct,compute_util_pct,Sr,Sc,T,row_folds,col_folds,\
sram_ifmap_reads,sram_filter_reads,sram_ofmap_writes,dram_ifmap_reads,dram_filter_reads,dram_ofmap_writes,\
hbm_read_bytes,hbm_write_bytes";

    pub fn csv_row(&self) -> String {
        let o = |x: Option<u64>| x.map(|v| v.to_string()).unwrap_or_default();
        let d = self.dram.map(|x| x.map(Some)).unwrap_or([None; 3]);
        format!(
            "{},{},{},{},{},{},{},{},{},{},{},{:.6},{:.6},{:.6},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            self.model.name(),
            self.dataflow,
            self.gemm.m,
            self.gemm.n,
            self.gemm.k,
            self.rows,
            self.cols,
            self.total_cycles,
            self.stall_cycles,
            self.compute_cycles,
            o(self.total_cycles_incl_prefetch),
            self.overall_util_pct,
            self.mapping_eff_pct,
            self.compute_util_pct,
            self.sr,
            self.sc,
            self.t,
            self.row_folds,
            self.col_folds,
            self.sram_ifmap_reads,
            self.sram_filter_reads,
            self.sram_ofmap_writes,
            o(d[0]),
            o(d[1]),
            o(d[2]),
            o(self.hbm_read_bytes),
            o(self.hbm_write_bytes),
        )
    }

    /// A short human-readable summary.
    pub fn summary(&self) -> String {
        let g = self.gemm;
        let mut s = format!(
            "{} model, {}x{} array ({}), {} dataflow, {} schedule\n",
            self.model.name(),
            self.rows,
            self.cols,
            self.config,
            self.dataflow,
            self.schedule
        );
        if let Some(c) = self.conv {
            s += &format!(
                "conv {}x{}x{} * {}x{} / {} -> {} filters = ",
                c.ih, c.iw, c.c, c.fh, c.fw, c.stride, c.nf
            );
        }
        s += &format!(
            "gemm M={} N={} K={}: {} folds ({} x {})\n",
            g.m, g.n, g.k, self.folds, self.row_folds, self.col_folds
        );
        s += &format!("  total cycles      {:>14}\n", self.total_cycles);
        s += &format!("  compute cycles    {:>14}\n", self.compute_cycles);
        if self.stall_cycles > 0 {
            // SCALE-Sim: memory stalls; TPU schedule: the last write-back after the array is done.
            let what = if self.dram.is_some() { "stall cycles    " } else { "write-back tail " };
            s += &format!("  {what}  {:>14}\n", self.stall_cycles);
        }
        s += &format!("  MXU utilization   {:>13.2}%\n", self.overall_util_pct);
        s += &format!("  mapping efficiency{:>13.2}%\n", self.mapping_eff_pct);
        s += &format!(
            "  operand reads     {:>14} ifmap, {} filter; {} results written\n",
            self.sram_ifmap_reads, self.sram_filter_reads, self.sram_ofmap_writes
        );
        if let Some([i, f, w]) = self.dram {
            s +=
                &format!("  DRAM words        {i:>14} ifmap, {f} filter read; {w} ofmap written\n");
        }
        if let (Some(r), Some(w)) = (self.hbm_read_bytes, self.hbm_write_bytes) {
            s += &format!("  HBM bytes         {r:>14} read, {w} written\n");
        }
        if let Some(x) = self.roofline_cycles {
            s += &format!("  roofline bound    {x:>14} cycles\n");
        }
        if let Some(sec) = self.seconds {
            let tflops = 2.0 * self.macs as f64 / sec / 1e12;
            s += &format!(
                "  time at clock     {:>11.3} us  ({tflops:.2} TFLOP/s on one MXU)\n",
                sec * 1e6
            );
        }
        if let Some(ok) = self.numerics_exact {
            s += &format!(
                "  numerics          {}\n",
                if ok {
                    "equal to the reference matmul"
                } else {
                    "DIFFER from the reference matmul"
                }
            );
        }
        s
    }
}
