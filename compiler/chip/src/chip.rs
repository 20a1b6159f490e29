//! The whole-chip model: times the kernels of a [`Program`] on a multi-core,
//! multi-MXU chip, as executed, and reports where the time goes.
//!
//! # One kernel
//!
//! [`plan`] decides how a kernel runs:
//!
//! * **Split.** Work is split across the chip's cores along the kernel's independent rows
//!   (`Kernel::parallel`; a kernel with fewer rows than cores runs on one core). A matmul's
//!   rows (batch, then `m`) go to cores; within a core its columns (`n`, in 128-wide
//!   blocks) go to the MXUs, or the batch, or the rows when `n` is narrower than the MXUs.
//!   HBM is shared: a kernel moves its bytes at the chip's bandwidth however many cores run it.
//! * **Units.** The MXU time of the per-MXU GEMM comes from the fold-level model of one
//!   array ([`super::timeline`], pipelined schedule: weight loads hidden behind the
//!   previous fold, fill and drain once), times the batch and the bf16 passes. The vector
//!   unit issues `alus` ops per (sublanes x lanes) vector register per cycle, the
//!   transcendental unit (EUP) and the cross-lane unit (XLU) one register-op per cycle.
//!   These units work in parallel on different tiles, so a kernel's compute time is the
//!   largest of them.
//! * **Tiles and double-buffering.** Operands and results stream through VMEM in `t`
//!   tiles, two slots per operand (one filling by DMA while the other is computed on), sized
//!   so that every slot pair fits in VMEM. With DMA-in `di`, compute `c`, DMA-out `do`
//!   (all in cycles) and HBM latency `l`, the 3-stage pipeline takes
//!   `l + (di + c + do)/t + (t - 1) max((di + do)/t, c/t)`: the first tile's load and the
//!   last tile's store are exposed, the rest overlaps.
//!
//! # The program
//!
//! Kernels run one after the other in program order (a kernel starts when the previous
//! one has finished on every core: each usually consumes the previous one's result).
//! [`Sim::run_kernel`] is called once per executed kernel, so a loop body is timed as
//! many times as it runs. Beside the sequential time the simulator tracks the critical
//! path: the longest chain of kernels linked by the buffers they read and write, i.e. the
//! step time if independent kernels could overlap perfectly.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use super::config::TpuConfig;
use super::program::{Class, Kernel};
use super::tile_ir::{Gemm, Operand, Schedule, TileProgram};
use super::timeline;

/// Cycles the EUP needs per (sublanes x lanes) register of transcendental results.
/// Assumption: one register-op per cycle, like one VPU ALU slot; the scaling book (App. C)
/// lists the EUP as a separate unit beside the VPU's ALUs but gives no throughput.
pub const EUP_CYCLES_PER_VREG: u64 = 1;
/// Cycles the XLU needs per register of cross-lane work (assumed, as for the EUP).
pub const XLU_CYCLES_PER_VREG: u64 = 1;

/// How one kernel runs on the chip ([`plan`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Cores the kernel is split across.
    pub cores: u64,
    /// Pipeline tiles per core.
    pub tiles: u64,
    /// VMEM slots: (name, offset, slot bytes); each slot is double-buffered.
    pub vmem: Vec<(String, u64, u64)>,
    /// The GEMM each busy MXU runs, and how many times (batch x passes).
    pub gemm: Option<Gemm>,
    pub gemm_reps: u64,
    /// MXUs busy per core.
    pub mxus: u64,
    pub mxu_cycles: u64,
    pub vpu_cycles: u64,
    pub eup_cycles: u64,
    pub xlu_cycles: u64,
    pub dma_in_cycles: u64,
    pub dma_out_cycles: u64,
    /// HBM bytes read (operand tiles fetched again when VMEM cannot hold them count again).
    pub hbm_in_bytes: u64,
    pub hbm_out_bytes: u64,
    /// The kernel's cycles, start to finish.
    pub cycles: u64,
    /// The roofline bound: max(compute at peak, bytes at full HBM bandwidth).
    pub roofline_cycles: u64,
    /// Collectives: cycles on the ICI.
    pub ici_cycles: u64,
    pub compute_bound: bool,
}

impl Plan {
    /// Compute cycles: the busiest of the MXU, VPU, EUP and XLU.
    pub fn compute_cycles(&self) -> u64 {
        self.mxu_cycles.max(self.vpu_cycles).max(self.eup_cycles).max(self.xlu_cycles)
    }
}

/// A GEMM's compute cycles and its lhs and rhs bytes fetched ([`gemm_cycles`]).
type GemmTimes = (u64, u64, u64);

thread_local! {
    static GEMMS: std::cell::RefCell<HashMap<(Gemm, String), GemmTimes>> = std::cell::RefCell::new(HashMap::new());
}

/// Compute cycles of one GEMM on one MXU (pipelined fold schedule, no DMA), and the bytes
/// its lhs and its rhs tiles are fetched with (greater than the operands when VMEM cannot
/// keep a tile resident for all its uses).
fn gemm_cycles(g: Gemm, cfg: &TpuConfig) -> GemmTimes {
    if g.m == 0 || g.n == 0 || g.k == 0 {
        return (0, 0, 0);
    }
    GEMMS.with(|c| {
        if let Some(&v) = c.borrow().get(&(g, cfg.name.clone())) {
            return v;
        }
        let p = TileProgram::gemm(g, cfg, Schedule::Pipelined);
        let tl = timeline::simulate(&p, None);
        let v =
            (tl.compute_cycles, p.fetched_bytes(Operand::Ifmap), p.fetched_bytes(Operand::Filter));
        c.borrow_mut().insert((g, cfg.name.clone()), v);
        v
    })
}

fn ceil_div(a: u64, b: u64) -> u64 {
    if b == 0 { 0 } else { a.div_ceil(b) }
}

/// Decides the split, tiling and unit times of `k` on `cfg` (see the module docs).
pub fn plan(k: &Kernel, cfg: &TpuConfig) -> Plan {
    let vreg = (cfg.vector.sublanes * cfg.vector.lanes) as u64;
    let cores = cfg.cores_per_chip.min(k.parallel.max(1)).max(1);
    let mxus = cfg.mxus_per_core;
    let mut p = Plan {
        cores,
        tiles: 1,
        vmem: vec![],
        gemm: None,
        gemm_reps: 0,
        mxus: 0,
        mxu_cycles: 0,
        vpu_cycles: 0,
        eup_cycles: 0,
        xlu_cycles: 0,
        dma_in_cycles: 0,
        dma_out_cycles: 0,
        hbm_in_bytes: k.read_bytes(),
        hbm_out_bytes: k.write_bytes(),
        cycles: 0,
        roofline_cycles: 0,
        ici_cycles: 0,
        compute_bound: true,
    };
    if let Some(c) = &k.collective {
        // On the ICI (and the DCN across slices): the kernel's time is the collective
        // algorithm's (see `ici`).
        p.cores = 1;
        p.ici_cycles = (crate::ici::seconds(c, cfg) * cfg.clock_hz).ceil() as u64;
        p.cycles = p.ici_cycles;
        p.roofline_cycles = p.ici_cycles;
        p.compute_bound = false;
        return p;
    }
    if let Some(bytes) = k.dma {
        // An asynchronous copy on the chip's DMA engines: its bytes at HBM bandwidth (one
        // side of the copy is HBM), after one DMA latency.
        let bpc = cfg.hbm_bytes_per_s / cfg.clock_hz;
        p.cores = 1;
        p.hbm_in_bytes = bytes;
        p.hbm_out_bytes = 0;
        p.dma_in_cycles = (bytes as f64 / bpc).ceil() as u64;
        p.cycles = cfg.hbm_latency_cycles + p.dma_in_cycles;
        p.roofline_cycles = p.dma_in_cycles;
        p.compute_bound = false;
        return p;
    }
    let mut alu = k.vector.alu;
    let mut xlu = k.vector.xlu;
    if let Some(mm) = k.matmul {
        // Rows to cores: whole batches when there are enough, else rows of m.
        let (mut b, mut m) = if mm.batch >= cores {
            (ceil_div(mm.batch, cores), mm.m)
        } else {
            (mm.batch, ceil_div(mm.m, cores))
        };
        let mut n = mm.n;
        // Columns (or batches, or rows) to the MXUs of a core.
        let busy = if n >= cfg.cols * mxus {
            n = ceil_div(n, mxus);
            mxus
        } else if b >= mxus {
            b = ceil_div(b, mxus);
            mxus
        } else if m >= 8 * mxus {
            m = ceil_div(m, mxus);
            mxus
        } else {
            1
        };
        let g = Gemm { m, n, k: mm.k };
        let (cyc, fetched_lhs, fetched_rhs) = gemm_cycles(g, cfg);
        let reps = b * mm.passes as u64;
        p.gemm = Some(g);
        p.gemm_reps = reps;
        p.mxus = busy;
        p.mxu_cycles = cyc * reps;
        // Operand tiles fetched more than once (VMEM too small to keep them) are read from
        // HBM again: each operand's bytes (the whole kernel's, in the MXU's input type)
        // times its refetch factor on one MXU's GEMM. The MXUs of a core consume the same
        // tiles of the operand they share in lockstep (the lhs when they split columns),
        // so a factor counts the operand's reloads for the whole core, not per MXU.
        let ib = cfg.in_dtype.bytes();
        let extra = |fetched: u64, per_mxu: u64, whole: u64| -> f64 {
            if per_mxu == 0 || fetched <= per_mxu {
                return 0.0;
            }
            (fetched as f64 / per_mxu as f64 - 1.0) * whole as f64
        };
        let more = extra(fetched_lhs, g.m * g.k * ib, mm.batch * mm.m * mm.k * ib)
            + extra(fetched_rhs, g.k * g.n * ib, mm.batch * mm.k * mm.n * ib);
        p.hbm_in_bytes += more as u64;
        // Passes beyond the first split f32 operands into bf16 parts on the VPU (3 ops
        // per element per part) and transposes go through the XLU.
        let elems_l = mm.batch * mm.m * mm.k;
        let elems_r = mm.batch * mm.k * mm.n;
        if mm.passes > 1 {
            alu += 6 * (elems_l + elems_r);
        }
        if mm.lhs_transposed {
            xlu += elems_l;
        }
        if mm.rhs_transposed {
            xlu += elems_r;
        }
    }
    let per_core = |x: u64| ceil_div(x, cores);
    p.vpu_cycles = ceil_div(per_core(alu), vreg * cfg.vector.alus as u64);
    p.eup_cycles = ceil_div(per_core(k.vector.eup), vreg) * EUP_CYCLES_PER_VREG;
    p.xlu_cycles = ceil_div(per_core(xlu), vreg) * XLU_CYCLES_PER_VREG;
    let bpc = cfg.hbm_bytes_per_s / cfg.clock_hz;
    p.dma_in_cycles = (p.hbm_in_bytes as f64 / bpc).ceil() as u64;
    p.dma_out_cycles = (p.hbm_out_bytes as f64 / bpc).ceil() as u64;
    // VMEM: two slots per operand and result; tiles so that every slot pair fits.
    let streams: Vec<(String, u64)> = k
        .reads
        .iter()
        .enumerate()
        .map(|(i, r)| (format!("in{i}"), per_core(r.1)))
        .chain(k.writes.iter().enumerate().map(|(i, w)| (format!("out{i}"), per_core(w.1))))
        .collect();
    let total: u64 = streams.iter().map(|s| s.1).sum();
    let budget = cfg.vmem_bytes / 2;
    // At least enough tiles to fit, and up to 8 when the kernel is long enough that
    // overlapping DMA with compute pays for the per-tile step (one tile per 128 KiB).
    let fit = ceil_div(total, budget).max(1);
    p.tiles = fit.max(ceil_div(total, 128 << 10).min(8)).max(1);
    let mut off = 0;
    for (name, bytes) in streams {
        let slot = ceil_div(bytes, p.tiles).next_multiple_of(512);
        p.vmem.push((name, off, slot));
        off += 2 * slot;
    }
    let t = p.tiles as f64;
    let (di, dout, c) =
        (p.dma_in_cycles as f64, p.dma_out_cycles as f64, p.compute_cycles() as f64);
    let steady = ((di + dout) / t).max(c / t);
    let dma_any = di + dout > 0.0;
    let lat = if dma_any { cfg.hbm_latency_cycles as f64 } else { 0.0 };
    p.cycles = (lat + (di + c + dout) / t + (t - 1.0) * steady).ceil() as u64;
    p.compute_bound = c >= di + dout;
    // Roofline: the kernel's useful work at the chip's peak, or its bytes at full bandwidth.
    let total_mxus = (cfg.cores_per_chip * cfg.mxus_per_core) as f64;
    let mxu_peak =
        k.matmul.map_or(0.0, |mm| mm.macs() as f64 / (cfg.rows * cfg.cols) as f64 / total_mxus);
    let vpu_peak = alu as f64 / (vreg * cfg.vector.alus as u64 * cfg.cores_per_chip) as f64;
    let eup_peak = k.vector.eup as f64 / (vreg * cfg.cores_per_chip) as f64;
    let compute_roof = mxu_peak.max(vpu_peak).max(eup_peak);
    let mem_roof = (k.read_bytes() + k.write_bytes()) as f64 / bpc;
    p.roofline_cycles = compute_roof.max(mem_roof).ceil() as u64;
    p
}

/// A progress callback: kernels executed so far.
pub type Progress = std::sync::Arc<dyn Fn(u64) + Send + Sync>;

/// One executed kernel.
#[derive(Clone, Debug)]
pub struct Record {
    /// Index of the kernel in [`Sim::kernels`].
    pub kernel: usize,
    pub start: u64,
    pub end: u64,
    /// The record this one waited for on the critical path.
    pub cp_pred: Option<usize>,
    pub cp_end: u64,
}

/// Totals per kernel (over all its executions).
#[derive(Clone, Debug, Default)]
pub struct KernelStats {
    pub calls: u64,
    pub cycles: u64,
    pub mxu_cycles: u64,
    pub vpu_cycles: u64,
    pub hbm_bytes: u64,
    pub roofline_cycles: u64,
    pub flops: f64,
    pub transcendentals: f64,
    pub macs: u64,
}

/// The simulation of one run: kernels are registered once ([`Sim::add_kernel`]) and
/// executed any number of times ([`Sim::run_kernel`]).
#[derive(Clone)]
pub struct Sim {
    pub cfg: TpuConfig,
    pub kernels: Vec<(Kernel, Plan)>,
    pub stats: Vec<KernelStats>,
    pub records: Vec<Record>,
    /// Keep per-execution records (for traces and the critical path) up to this many.
    pub record_limit: usize,
    pub now: u64,
    /// Per buffer: the record that last wrote it and its critical-path finish.
    ready: HashMap<usize, (usize, u64)>,
    cp_best: Option<(u64, usize)>,
    /// Critical-path length when records overflowed the limit (tracked without the chain).
    cp_len: u64,
    pub records_dropped: u64,
    /// Called with the kernels executed so far, every 1024 kernels.
    pub progress: Option<Progress>,
    executed: u64,
    /// When the ICI finishes its queued collectives, and the DMA engines their
    /// asynchronous copies.
    ici_free: u64,
    dma_free: u64,
    /// Run as scheduled ([`crate::program::Program::scheduled`]): asynchronous work starts
    /// no earlier than where the program issues it, and synchronous collectives block.
    pub in_order: bool,
    /// When each buffer written by a collective arrives, and by a compute kernel is done.
    arrives: HashMap<usize, u64>,
    written: HashMap<usize, u64>,
    /// Cycles of collectives, and cycles the compute stream waited for one.
    pub comm_cycles: u64,
    pub stall_cycles: u64,
}

impl Sim {
    pub fn new(cfg: TpuConfig) -> Sim {
        Sim {
            cfg,
            kernels: vec![],
            stats: vec![],
            records: vec![],
            record_limit: 1 << 20,
            now: 0,
            ready: HashMap::new(),
            cp_best: None,
            cp_len: 0,
            records_dropped: 0,
            progress: None,
            executed: 0,
            ici_free: 0,
            dma_free: 0,
            in_order: false,
            arrives: HashMap::new(),
            written: HashMap::new(),
            comm_cycles: 0,
            stall_cycles: 0,
        }
    }

    /// Registers `k` (planned once) and returns its id.
    pub fn add_kernel(&mut self, k: Kernel) -> usize {
        let p = plan(&k, &self.cfg);
        self.kernels.push((k, p));
        self.stats.push(KernelStats::default());
        self.kernels.len() - 1
    }

    /// Executes kernel `id` once.
    pub fn run_kernel(&mut self, id: usize) {
        self.executed += 1;
        if let Some(pb) = &self.progress
            && self.executed.is_multiple_of(1024)
        {
            pb(self.executed);
        }
        let (k, p) = &self.kernels[id];
        // Collectives run on the ICI beside compute, started as soon as their operands
        // are written (as a latency-hiding scheduler hoists collective-starts), one at a
        // time in program order; compute waits only for the buffers a collective writes.
        let inputs_at =
            k.reads.iter().filter_map(|(b, _)| self.arrives.get(b)).copied().max().unwrap_or(0);
        // Asynchronous copies run on the DMA engines the same way, on their own queue.
        // Run as scheduled, they start no earlier than where the program issues them, and
        // one the program does not issue asynchronously holds the program until it ends.
        let (start, end) = if k.collective.is_some() || k.dma.is_some() {
            let written =
                k.reads.iter().filter_map(|(b, _)| self.written.get(b)).copied().max().unwrap_or(0);
            let free = if k.collective.is_some() { self.ici_free } else { self.dma_free };
            let issued = if self.in_order { self.now } else { 0 };
            let start = free.max(written).max(inputs_at).max(issued);
            let end = start + p.cycles;
            if k.collective.is_some() {
                self.ici_free = end;
                self.comm_cycles += p.cycles;
            } else {
                self.dma_free = end;
            }
            for (b, _) in &k.writes {
                self.arrives.insert(*b, end);
            }
            if self.in_order && !k.asynchronous {
                if k.collective.is_some() {
                    self.stall_cycles += end - self.now;
                }
                self.now = end;
            }
            (start, end)
        } else {
            let start = self.now.max(inputs_at);
            self.stall_cycles += start - self.now;
            self.now = start + p.cycles;
            for (b, _) in &k.writes {
                self.written.insert(*b, self.now);
            }
            (start, self.now)
        };
        let s = &mut self.stats[id];
        s.calls += 1;
        s.cycles += p.cycles;
        s.mxu_cycles += p.mxu_cycles;
        s.vpu_cycles += p.vpu_cycles;
        s.hbm_bytes += p.hbm_in_bytes + p.hbm_out_bytes;
        s.roofline_cycles += p.roofline_cycles;
        s.flops += k.flops;
        s.transcendentals += k.transcendentals;
        s.macs += k.matmul.map_or(0, |m| m.macs());
        // Critical path through the buffers this kernel reads.
        let mut pred = None;
        let mut at = 0;
        for (b, _) in &k.reads {
            if let Some(&(r, e)) = self.ready.get(b)
                && e > at
            {
                at = e;
                pred = Some(r);
            }
        }
        let cp_end = at + p.cycles;
        self.cp_len = self.cp_len.max(cp_end);
        if self.records.len() < self.record_limit {
            let r = self.records.len();
            self.records.push(Record { kernel: id, start, end, cp_pred: pred, cp_end });
            for (b, _) in &k.writes {
                self.ready.insert(*b, (r, cp_end));
            }
            if self.cp_best.is_none_or(|(e, _)| cp_end > e) {
                self.cp_best = Some((cp_end, r));
            }
        } else {
            self.records_dropped += 1;
            for (b, _) in &k.writes {
                self.ready.insert(*b, (usize::MAX, cp_end));
            }
        }
    }

    /// The records on the critical path, in order.
    pub fn critical_records(&self) -> Vec<usize> {
        let mut chain = vec![];
        let mut cur = self.cp_best.map(|b| b.1);
        while let Some(r) = cur {
            if r == usize::MAX || r >= self.records.len() {
                break;
            }
            chain.push(r);
            cur = self.records[r].cp_pred;
        }
        chain.reverse();
        chain
    }

    /// The critical path: its length in cycles and its kernels (in order).
    pub fn critical_path(&self) -> (u64, Vec<usize>) {
        (self.cp_len, self.critical_records().into_iter().map(|r| self.records[r].kernel).collect())
    }

    /// The step's cycles: compute, and any collective still on the ICI at the end.
    pub fn step_cycles(&self) -> u64 {
        self.now.max(self.ici_free)
    }

    /// Communication cycles not hidden behind compute: the compute stream's waits for
    /// collectives plus the collectives still running after the last compute kernel.
    pub fn exposed_comm_cycles(&self) -> u64 {
        self.stall_cycles + self.ici_free.saturating_sub(self.now)
    }

    /// The whole-run report.
    pub fn report(&self) -> Report {
        let cfg = &self.cfg;
        let total = self.step_cycles();
        let mut per_op = vec![];
        let mut by_class: HashMap<Class, ClassStats> = HashMap::new();
        let (mut flops, mut trans, mut hbm, mut macs, mut vpu_ops) = (0.0, 0.0, 0u64, 0u64, 0u64);
        for ((k, p), s) in self.kernels.iter().zip(&self.stats) {
            if s.calls == 0 {
                continue;
            }
            flops += s.flops;
            trans += s.transcendentals;
            hbm += s.hbm_bytes;
            macs += s.macs;
            vpu_ops += s.calls * k.vector.alu;
            let c = by_class.entry(k.class).or_default();
            c.kernels += 1;
            c.cycles += s.cycles;
            c.flops += s.flops;
            c.hbm_bytes += s.hbm_bytes;
            if p.compute_bound {
                c.compute_bound += 1;
                c.compute_bound_cycles += s.cycles;
            }
            per_op.push(OpReport {
                name: k.name.clone(),
                what: k.what.clone(),
                class: k.class,
                calls: s.calls,
                cycles: s.cycles,
                pct: 0.0,
                flops: s.flops,
                transcendentals: s.transcendentals,
                hbm_bytes: s.hbm_bytes,
                roofline_cycles: s.roofline_cycles,
                bound: if p.compute_bound { "compute" } else { "memory" },
                roofline_bound: roofline_bound(k, p, cfg),
                mxu_util_pct: if s.cycles > 0 && k.matmul.is_some() {
                    100.0 * s.macs as f64
                        / (s.cycles as f64
                            * (cfg.rows * cfg.cols * cfg.mxus_per_core * cfg.cores_per_chip) as f64)
                } else {
                    0.0
                },
                cores: p.cores,
                tiles: p.tiles,
            });
        }
        for o in &mut per_op {
            o.pct = if total > 0 { 100.0 * o.cycles as f64 / total as f64 } else { 0.0 };
        }
        per_op.sort_by(|a, b| b.cycles.cmp(&a.cycles).then(a.name.cmp(&b.name)));
        let mxus = (cfg.cores_per_chip * cfg.mxus_per_core) as f64;
        let vreg = (cfg.vector.sublanes * cfg.vector.lanes) as f64;
        let (cp, chain) = self.critical_path();
        let mut classes: Vec<(Class, ClassStats)> = by_class.into_iter().collect();
        classes.sort_by_key(|c| c.0);
        Report {
            config: cfg.name.clone(),
            clock_hz: cfg.clock_hz,
            total_cycles: total,
            step_time_us: total as f64 / cfg.clock_hz * 1e6,
            peak_flops: cfg.peak_flops(),
            flops,
            transcendentals: trans,
            hbm_bytes: hbm,
            macs,
            mxu_util_pct: if total > 0 {
                100.0 * macs as f64 / (total as f64 * (cfg.rows * cfg.cols) as f64 * mxus)
            } else {
                0.0
            },
            vpu_util_pct: if total > 0 {
                100.0 * vpu_ops as f64
                    / (total as f64 * vreg * cfg.vector.alus as f64 * cfg.cores_per_chip as f64)
            } else {
                0.0
            },
            kernels_executed: self.stats.iter().map(|s| s.calls).sum(),
            critical_path_cycles: cp,
            critical_path: chain.iter().map(|&k| self.kernels[k].0.name.clone()).collect(),
            by_class: classes,
            per_op,
            comm_cycles: self.comm_cycles,
            exposed_comm_cycles: self.exposed_comm_cycles(),
        }
    }
}

fn roofline_bound(k: &Kernel, p: &Plan, cfg: &TpuConfig) -> &'static str {
    let bpc = cfg.hbm_bytes_per_s / cfg.clock_hz;
    let mem = (k.read_bytes() + k.write_bytes()) as f64 / bpc;
    if mem as u64 >= p.roofline_cycles && mem > 0.0 { "memory" } else { "compute" }
}

/// Per op class totals.
#[derive(Clone, Debug, Default)]
pub struct ClassStats {
    pub kernels: u64,
    pub compute_bound: u64,
    /// Cycles of the compute-bound kernels.
    pub compute_bound_cycles: u64,
    pub cycles: u64,
    pub flops: f64,
    pub hbm_bytes: u64,
}

/// One kernel's line of the report.
#[derive(Clone, Debug)]
pub struct OpReport {
    pub name: String,
    pub what: String,
    pub class: Class,
    pub calls: u64,
    pub cycles: u64,
    pub pct: f64,
    pub flops: f64,
    pub transcendentals: f64,
    pub hbm_bytes: u64,
    pub roofline_cycles: u64,
    /// Which side of the simulated kernel dominates (compute units or DMA).
    pub bound: &'static str,
    /// Which roofline term is larger (peak compute or full-bandwidth bytes).
    pub roofline_bound: &'static str,
    pub mxu_util_pct: f64,
    pub cores: u64,
    pub tiles: u64,
}

/// The whole-program report.
#[derive(Clone, Debug)]
pub struct Report {
    pub config: String,
    pub clock_hz: f64,
    pub total_cycles: u64,
    pub step_time_us: f64,
    /// The chip's peak bf16 FLOP/s ([`TpuConfig::peak_flops`]).
    pub peak_flops: f64,
    /// FLOPs executed, counted by XLA's HloCostAnalysis rules (loops as often as they run,
    /// rematerialized recomputation included).
    pub flops: f64,
    pub transcendentals: f64,
    pub hbm_bytes: u64,
    pub macs: u64,
    pub mxu_util_pct: f64,
    pub vpu_util_pct: f64,
    pub kernels_executed: u64,
    pub critical_path_cycles: u64,
    pub critical_path: Vec<String>,
    pub by_class: Vec<(Class, ClassStats)>,
    pub per_op: Vec<OpReport>,
    /// Collective cycles on the ICI, and those not overlapped with compute.
    pub comm_cycles: u64,
    pub exposed_comm_cycles: u64,
}

impl Report {
    /// Hardware FLOPs utilization: the FLOPs the chip executed (XLA's count, recomputation
    /// included) over what its peak could do in the step, in percent.
    pub fn hfu_pct(&self) -> f64 {
        self.utilization_pct(self.flops)
    }

    /// `flops` per step over the chip's peak in the step time, in percent: the model FLOPs
    /// utilization when `flops` is the model's count (MaxText and PaLM count 6 x parameters
    /// x tokens plus attention, per chip).
    pub fn utilization_pct(&self, flops: f64) -> f64 {
        let secs = self.step_time_us * 1e-6;
        if secs > 0.0 && self.peak_flops > 0.0 {
            100.0 * flops / (secs * self.peak_flops)
        } else {
            0.0
        }
    }

    /// Compute cycles: the step without its exposed communication.
    pub fn compute_cycles(&self) -> u64 {
        self.total_cycles.saturating_sub(self.exposed_comm_cycles)
    }
}

impl Report {
    pub fn to_json(&self) -> Value {
        json!({
            "config": self.config,
            "clock_hz": self.clock_hz,
            "total_cycles": self.total_cycles,
            "step_time_us": self.step_time_us,
            "flops": self.flops,
            "peak_flops": self.peak_flops,
            "hfu_pct": self.hfu_pct(),
            "transcendentals": self.transcendentals,
            "hbm_bytes": self.hbm_bytes,
            "mxu_macs": self.macs,
            "mxu_util_pct": self.mxu_util_pct,
            "vpu_util_pct": self.vpu_util_pct,
            "kernels_executed": self.kernels_executed,
            "critical_path_cycles": self.critical_path_cycles,
            "critical_path": self.critical_path,
            "compute_cycles": self.compute_cycles(),
            "comm_cycles": self.comm_cycles,
            "exposed_comm_cycles": self.exposed_comm_cycles,
            "by_class": self.by_class.iter().map(|(c, s)| json!({
                "class": c.name(), "kernels": s.kernels, "compute_bound": s.compute_bound, "compute_bound_cycles": s.compute_bound_cycles,
                "cycles": s.cycles, "flops": s.flops, "hbm_bytes": s.hbm_bytes,
            })).collect::<Vec<_>>(),
            "per_op": self.per_op.iter().map(|o| json!({
                "name": o.name, "what": o.what, "class": o.class.name(), "calls": o.calls,
                "cycles": o.cycles, "pct": o.pct, "flops": o.flops, "transcendentals": o.transcendentals,
                "hbm_bytes": o.hbm_bytes, "roofline_cycles": o.roofline_cycles, "bound": o.bound,
                "roofline_bound": o.roofline_bound, "mxu_util_pct": o.mxu_util_pct, "cores": o.cores, "tiles": o.tiles,
            })).collect::<Vec<_>>(),
        })
    }

    /// A human-readable table (the `top` ops by cycles).
    pub fn text(&self, top: usize) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{}: {} cycles = {:.1} us at {:.0} MHz; {} kernels executed",
            self.config,
            self.total_cycles,
            self.step_time_us,
            self.clock_hz / 1e6,
            self.kernels_executed
        );
        let _ = writeln!(
            s,
            "flops {:.4e} (HFU {:.1}%)  transcendentals {:.4e}  HBM {:.2} MB  MXU util {:.1}%  VPU util {:.1}%",
            self.flops,
            self.hfu_pct(),
            self.transcendentals,
            self.hbm_bytes as f64 / 1e6,
            self.mxu_util_pct,
            self.vpu_util_pct
        );
        // Share of the step's cycles, in percent.
        let pct = |x: u64| {
            if self.total_cycles > 0 { 100.0 * x as f64 / self.total_cycles as f64 } else { 0.0 }
        };
        if self.comm_cycles > 0 {
            let _ = writeln!(
                s,
                "step = compute {} + exposed communication {} cycles ({:.1}%); collectives {} cycles on the ICI, {:.0}% hidden behind compute",
                self.compute_cycles(),
                self.exposed_comm_cycles,
                pct(self.exposed_comm_cycles),
                self.comm_cycles,
                100.0 * (self.comm_cycles.saturating_sub(self.exposed_comm_cycles)) as f64
                    / self.comm_cycles as f64
            );
        }
        let cp_pct = pct(self.critical_path_cycles);
        let _ = writeln!(
            s,
            "critical path {} cycles ({cp_pct:.0}% of the step) through {} kernels",
            self.critical_path_cycles,
            self.critical_path.len()
        );
        let _ = writeln!(
            s,
            "\n{:<12} {:>7} {:>12} {:>6} {:>14}",
            "class", "kernels", "cycles", "%", "compute-bound"
        );
        for (c, st) in &self.by_class {
            let pct = pct(st.cycles);
            let _ = writeln!(
                s,
                "{:<12} {:>7} {:>12} {:>6.1} {:>8}/{}",
                c.name(),
                st.kernels,
                st.cycles,
                pct,
                st.compute_bound,
                st.kernels
            );
        }
        let _ = writeln!(
            s,
            "\n{:<28} {:<12} {:>6} {:>11} {:>6} {:>11} {:>10} {:>8} {:>7}",
            "op", "class", "calls", "cycles", "%", "roofline", "HBM B", "bound", "MXU %"
        );
        for o in self.per_op.iter().take(top) {
            let name: String = o.name.chars().take(28).collect();
            let _ = writeln!(
                s,
                "{:<28} {:<12} {:>6} {:>11} {:>6.1} {:>11} {:>10} {:>8} {:>7.1}",
                name,
                o.class.name(),
                o.calls,
                o.cycles,
                o.pct,
                o.roofline_cycles,
                o.hbm_bytes,
                o.bound,
                o.mxu_util_pct
            );
        }
        if self.per_op.len() > top {
            let _ = writeln!(s, "... {} more ops (--json has all)", self.per_op.len() - top);
        }
        s
    }
}

/// A Chrome-trace (Perfetto) timeline of the run: one process per core, one track per
/// unit (MXU, VPU, EUP, XLU, DMA); one trace microsecond is one cycle.
pub fn chrome_trace(sim: &Sim, title: &str) -> Value {
    const UNITS: [&str; 6] =
        ["MXU", "VPU", "EUP", "XLU", "DMA in (HBM to VMEM)", "DMA out (VMEM to HBM)"];
    let cores = sim.cfg.cores_per_chip;
    let chip = cores; // the pid of the chip-wide process (kernels in order, critical path)
    let mut events = vec![
        json!({ "name": "process_name", "ph": "M", "pid": chip, "args": { "name": format!("{title} on {}", sim.cfg.name) } }),
        json!({ "name": "process_sort_index", "ph": "M", "pid": chip, "args": { "sort_index": -1 } }),
        json!({ "name": "thread_name", "ph": "M", "pid": chip, "tid": 0, "args": { "name": "kernels" } }),
        json!({ "name": "thread_name", "ph": "M", "pid": chip, "tid": 1, "args": { "name": "critical path" } }),
        json!({ "name": "thread_name", "ph": "M", "pid": chip, "tid": 2, "args": { "name": "ICI (collectives)" } }),
    ];
    for c in 0..cores {
        events.push(json!({ "name": "process_name", "ph": "M", "pid": c, "args": { "name": format!("core {c}") } }));
        events.push(json!({ "name": "process_sort_index", "ph": "M", "pid": c, "args": { "sort_index": c } }));
        for (u, name) in UNITS.iter().enumerate() {
            events.push(json!({ "name": "thread_name", "ph": "M", "pid": c, "tid": u, "args": { "name": name } }));
            events.push(json!({ "name": "thread_sort_index", "ph": "M", "pid": c, "tid": u, "args": { "sort_index": u } }));
        }
    }
    // Timestamps in microseconds of the chip's clock (the viewer's unit).
    let us = |cycles: u64| cycles as f64 / (sim.cfg.clock_hz / 1e6);
    let critical: HashSet<usize> = sim.critical_records().into_iter().collect();
    for (i, r) in sim.records.iter().enumerate() {
        let (k, p) = &sim.kernels[r.kernel];
        let t = p.tiles.max(1);
        let lat =
            if p.dma_in_cycles + p.dma_out_cycles > 0 { sim.cfg.hbm_latency_cycles } else { 0 };
        // The first tile's operands arrive before compute starts; the last tile's results
        // leave after it ends; in between DMA overlaps compute (double-buffered slots).
        let first_in = (lat + p.dma_in_cycles / t).min(p.cycles);
        let args = json!({
            "op": k.what, "class": k.class.name(), "cycles": p.cycles, "tiles": p.tiles, "cores": p.cores,
            "mxus_per_core": p.mxus, "hbm_in_bytes": p.hbm_in_bytes, "hbm_out_bytes": p.hbm_out_bytes, "flops": k.flops,
            "bound": if p.compute_bound { "compute" } else { "memory" }, "critical_path": critical.contains(&i),
        });
        let dur = (r.end - r.start).max(1);
        if let Some(c) = &k.collective {
            events.push(json!({ "name": k.name, "cat": "ICI", "ph": "X", "pid": chip, "tid": 2, "ts": us(r.start), "dur": us(dur), "args": { "kind": c.kind, "bytes": c.bytes, "group": c.group } }));
            continue;
        }
        events.push(json!({ "name": k.name, "cat": k.class.name(), "ph": "X", "pid": chip, "tid": 0, "ts": us(r.start), "dur": us(dur), "args": args }));
        if critical.contains(&i) {
            events.push(json!({ "name": k.name, "cat": "critical", "ph": "X", "pid": chip, "tid": 1, "ts": us(r.start), "dur": us(dur), "args": { "critical_path_end": r.cp_end } }));
        }
        let busy = [p.mxu_cycles, p.vpu_cycles, p.eup_cycles, p.xlu_cycles];
        for c in 0..p.cores {
            for (u, &b) in busy.iter().enumerate() {
                if b > 0 {
                    let start = r.start + first_in.min(p.cycles.saturating_sub(b));
                    events.push(json!({ "name": k.name, "cat": UNITS[u], "ph": "X", "pid": c, "tid": u, "ts": us(start), "dur": us(b.max(1)) }));
                }
            }
            if p.dma_in_cycles > 0 {
                let d = (lat + p.dma_in_cycles).min(p.cycles).max(1);
                events.push(json!({ "name": k.name, "cat": "DMA", "ph": "X", "pid": c, "tid": 4, "ts": us(r.start), "dur": us(d), "args": { "bytes": p.hbm_in_bytes / p.cores.max(1) } }));
            }
            if p.dma_out_cycles > 0 {
                let d = p.dma_out_cycles.min(p.cycles).max(1);
                events.push(json!({ "name": k.name, "cat": "DMA", "ph": "X", "pid": c, "tid": 5, "ts": us(r.start + p.cycles - d), "dur": us(d), "args": { "bytes": p.hbm_out_bytes / p.cores.max(1) } }));
            }
        }
    }
    json!({ "traceEvents": events, "displayTimeUnit": "ns", "otherData": { "title": title, "config": sim.cfg.name, "clock_hz": sim.cfg.clock_hz, "total_cycles": sim.step_cycles() } })
}

/// One trace for several chips (`sims[i]` is chip `i`): each chip's processes (its cores
/// and its kernel/ICI tracks) under their own ids, named `chip i: ...`.
pub fn chrome_trace_chips(sims: &[&Sim], title: &str) -> Value {
    let mut events = Vec::new();
    let per = sims.first().map_or(1, |s| s.cfg.cores_per_chip + 1);
    for (i, sim) in sims.iter().enumerate() {
        let t = chrome_trace(sim, &format!("{title} (chip {i})"));
        for mut e in t["traceEvents"].as_array().cloned().unwrap_or_default() {
            let pid = e["pid"].as_u64().unwrap_or(0);
            e["pid"] = json!(i as u64 * per + pid);
            if e["name"] == "process_name" {
                let n = e["args"]["name"].as_str().unwrap_or("").to_string();
                e["args"]["name"] =
                    json!(if n.starts_with(title) { n } else { format!("chip {i}: {n}") });
            }
            if e["name"] == "process_sort_index" {
                e["args"]["sort_index"] =
                    json!(i as i64 * per as i64 + e["args"]["sort_index"].as_i64().unwrap_or(0));
            }
            events.push(e);
        }
    }
    let total = sims.iter().map(|s| s.step_cycles()).max().unwrap_or(0);
    json!({ "traceEvents": events, "displayTimeUnit": "ns", "otherData": { "title": title, "chips": sims.len(), "total_cycles": total } })
}
