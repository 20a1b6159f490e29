//! The fast (fold-level) model: the cycle of every fold event from closed-form
//! recurrences, in O(folds). It must equal the PE-level model ([`super::pe_array`]) cycle
//! for cycle; the exhaustive tests in `tests/mxu_models.rs` hold it to that.
//!
//! # Timing of one fold on an R x C array
//!
//! Stationary dataflows (WS, IS): the stationary tile enters through per-column transport
//! chains, one array row per cycle, so a load started at cycle `L` lands in column `c`'s PEs
//! at `L + R − 1 + c` (columns are skewed by one cycle, like the data). Streamed row `i`
//! enters array row `r` at `s + i + r` (the skew), meets PE `(r, c)` at `s + i + r + c`, and
//! its partial sum leaves the bottom of column `c` at `s + i + R − 1 + c`.
//!
//! Output-stationary: A row `r` element `k` enters at `s + k + r`, B column `c` element `k`
//! at `s + k + c`; PE `(r, c)` does its last MAC at `s + T − 1 + r + c` and puts the result on
//! its column's output bus in that cycle (rows finish one cycle apart, so one bus per
//! column carries them without conflict).
//!
//! # Schedules
//!
//! `Sequential` (SCALE-Sim): fold `g` starts the cycle after fold `g − 1`'s last output
//! (column `C − 1`, the whole array, valid or padding); WS/IS load for `R` cycles first.
//! Per fold that is `2R + C + T − 2` cycles (WS/IS) or `R + C + T − 2` (OS).
//!
//! `Pipelined` (TPU): each PE has two stationary banks and the data carries the bank
//! select, so fold `g`'s load may overlap fold `g − 1`'s stream. The earliest cycle wins:
//!
//! * load `L_g ≥ L_{g−1} + R` (the transport chain is busy R cycles per tile);
//! * `L_g ≥ y_{g−2} + 1`, where `y` is the cycle a fold's last row enters array row 0:
//!   bank `g mod 2` then holds no data of fold `g − 2` when the new tile lands;
//! * `L_g ≥` the stationary tile's DMA completion;
//! * stream `s_g ≥ L_g + R` (landed before the first row meets it),
//!   `s_g ≥ s_{g−1} + T_{g−1}` (one row per cycle per edge),
//!   `s_g ≥` the streamed tiles' DMA completion;
//! * OS: `s_g ≥ s_{g−1} + T_{g−1} + R − T_g` (column output buses free).
//!
//! DMA (pipelined only): one HBM channel, `⌈bytes / (bytes per cycle)⌉` cycles of bandwidth
//! per transfer plus a fixed latency. Fold `g`'s input tiles are requested the cycle after
//! fold `g − D`'s last row entered the array (D = the program's prefetch depth, the VMEM
//! slots per operand; the first D folds' at cycle 0); a finished output
//! tile is written back the cycle after its last output. Requests are served in cycle
//! order, inputs before outputs within a cycle.

use std::collections::VecDeque;

use super::config::Dataflow;
use super::tile_ir::{Fold, Schedule, TileProgram};

/// When each event of one fold happens (cycle numbers from 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FoldTimes {
    /// The stationary tile's load starts (WS/IS); `None` for OS.
    pub load_start: Option<u64>,
    /// The first streamed row enters array row 0.
    pub stream_start: u64,
    /// The last streamed row enters array row 0.
    pub stream_end: u64,
    /// The first result leaves the array (column 0).
    pub first_out: u64,
    /// The last result leaves the array (column C − 1, padding included).
    pub last_out: u64,
    /// All of this fold's input DMAs have completed (0 without DMA).
    pub inputs_ready: u64,
}

/// One DMA transfer as executed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaTimes {
    pub fold: usize,
    /// Index in the fold's `dma_in`, or `None` for its `dma_out`.
    pub input: Option<usize>,
    pub issue: u64,
    pub start: u64,
    pub done: u64,
    pub bytes: u64,
}

/// Event counts (valid elements only; padding is free).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Counters {
    /// A elements delivered to the array (streamed or loaded as the stationary tile).
    pub ifmap_reads: u64,
    /// B elements delivered to the array.
    pub filter_reads: u64,
    /// Results leaving the array (partial sums per K fold for WS/IS).
    pub ofmap_writes: u64,
    /// Accumulator reads for read-modify-write of partial sums (WS/IS, K folds after the first).
    pub acc_reads: u64,
    /// Useful multiply-accumulates.
    pub macs: u64,
    pub dma_in_bytes: u64,
    pub dma_out_bytes: u64,
}

/// The timeline of a whole program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timeline {
    pub folds: Vec<FoldTimes>,
    pub dma: Vec<DmaTimes>,
    pub counters: Counters,
    /// Cycles until the last result left the array.
    pub compute_cycles: u64,
    /// Cycles until everything, including the last write-back DMA, is done.
    pub total_cycles: u64,
}

/// The HBM channel: bandwidth-serialized, fixed latency.
#[derive(Clone, Debug)]
pub struct DmaEngine {
    bytes_per_cycle: f64,
    latency: u64,
    free_at: u64,
}

impl DmaEngine {
    pub fn new(bytes_per_cycle: f64, latency: u64) -> DmaEngine {
        DmaEngine { bytes_per_cycle, latency, free_at: 0 }
    }

    /// Serves one transfer of fold `fold` (`input`: index in its `dma_in`, `None` for the
    /// write-back) requested at `issue`.
    pub fn transfer(
        &mut self,
        fold: usize,
        input: Option<usize>,
        issue: u64,
        bytes: u64,
    ) -> DmaTimes {
        let start = issue.max(self.free_at);
        let busy = (bytes as f64 / self.bytes_per_cycle).ceil() as u64;
        self.free_at = start + busy;
        DmaTimes { fold, input, issue, start, done: start + busy + self.latency, bytes }
    }

    /// Requests all of fold `g`'s input tiles at `issue`, logging them; returns when the
    /// stationary tile and when the streamed tiles are in VMEM (0 if none is fetched).
    pub fn fetch_inputs(
        &mut self,
        g: usize,
        fold: &Fold,
        df: Dataflow,
        issue: u64,
        log: &mut Vec<DmaTimes>,
    ) -> (u64, u64) {
        let stat = fold.stationary(df);
        let (mut stat_ready, mut stream_ready) = (0, 0);
        for (i, d) in fold.dma_in.iter().enumerate() {
            let x = self.transfer(g, Some(i), issue, d.bytes);
            if stat.as_ref() == Some(&d.tile) {
                stat_ready = stat_ready.max(x.done);
            } else {
                stream_ready = stream_ready.max(x.done);
            }
            log.push(x);
        }
        (stat_ready, stream_ready)
    }
}

/// When a fold's first and last results leave the array, from its stream start (the PE
/// model observes these instead).
fn fold_latency(df: Dataflow, r: u64, c: u64, t: u64) -> (u64, u64) {
    // (first_out − stream_start, last_out − stream_start)
    match df {
        Dataflow::Os => (t - 1, t - 1 + r - 1 + c - 1),
        _ => (r - 1, t - 1 + r - 1 + c - 1),
    }
}

/// Runs the fast model. `dma` gives the HBM channel for pipelined programs.
pub fn simulate(p: &TileProgram, dma: Option<DmaEngine>) -> Timeline {
    let (r, c, df) = (p.rows, p.cols, p.dataflow);
    let stationary = df != Dataflow::Os;
    let mut engine = dma;
    let mut folds: Vec<FoldTimes> = Vec::with_capacity(p.folds.len());
    let mut dmas = Vec::new();
    let mut pending_out: VecDeque<(u64, usize, u64)> = VecDeque::new();
    let mut counters = Counters::default();
    for (g, fold) in p.folds.iter().enumerate() {
        let (_, _, t) = fold.extent(df);
        // Input DMAs.
        let (mut stat_ready, mut stream_ready) = (0, 0);
        if let Some(e) = engine.as_mut() {
            let d = p.prefetch;
            let issue = if g < d { 0 } else { folds[g - d].stream_end + 1 };
            while pending_out.front().is_some_and(|x| x.0 < issue) {
                let (at, h, bytes) = pending_out.pop_front().unwrap();
                dmas.push(e.transfer(h, None, at, bytes));
            }
            (stat_ready, stream_ready) = e.fetch_inputs(g, fold, df, issue, &mut dmas);
        }
        let (load_start, stream_start) = match (p.schedule, stationary) {
            (Schedule::Sequential, _) => {
                let fs = if g == 0 { 0 } else { folds[g - 1].last_out + 1 };
                if stationary { (Some(fs), fs + r) } else { (None, fs) }
            }
            (Schedule::Pipelined, true) => {
                let mut l = stat_ready;
                if g >= 1 {
                    l = l.max(folds[g - 1].load_start.unwrap() + r);
                }
                if g >= 2 {
                    l = l.max(folds[g - 2].stream_end + 1);
                }
                let mut s = (l + r).max(stream_ready);
                if g >= 1 {
                    s = s.max(folds[g - 1].stream_end + 1);
                }
                (Some(l), s)
            }
            (Schedule::Pipelined, false) => {
                let mut s = stream_ready;
                if g >= 1 {
                    let prev = &folds[g - 1];
                    s = s.max(prev.stream_end + 1).max((prev.stream_end + 1 + r).saturating_sub(t));
                }
                (None, s)
            }
        };
        let (fo, lo) = fold_latency(df, r, c, t);
        folds.push(FoldTimes {
            load_start,
            stream_start,
            stream_end: stream_start + t - 1,
            first_out: stream_start + fo,
            last_out: stream_start + lo,
            inputs_ready: stat_ready.max(stream_ready),
        });
        let (mm, nn, kk) =
            (fold.m.end - fold.m.start, fold.n.end - fold.n.start, fold.k.end - fold.k.start);
        counters.ifmap_reads += mm * kk;
        counters.filter_reads += kk * nn;
        counters.ofmap_writes += mm * nn;
        counters.macs += mm * nn * kk;
        if stationary && !fold.first_k {
            counters.acc_reads += mm * nn;
        }
        counters.dma_in_bytes += fold.dma_in.iter().map(|d| d.bytes).sum::<u64>();
        if let (Some(d), Some(_)) = (&fold.dma_out, engine.as_ref()) {
            counters.dma_out_bytes += d.bytes;
            pending_out.push_back((folds[g].last_out + 1, g, d.bytes));
        }
    }
    if let Some(e) = engine.as_mut() {
        for (at, h, bytes) in pending_out {
            dmas.push(e.transfer(h, None, at, bytes));
        }
    }
    let compute_cycles = folds.last().map_or(0, |f| f.last_out + 1);
    let total_cycles = dmas.iter().map(|d| d.done).max().unwrap_or(0).max(compute_cycles);
    Timeline { folds, dma: dmas, counters, compute_cycles, total_cycles }
}
