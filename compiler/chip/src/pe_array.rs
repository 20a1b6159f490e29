//! The PE-level model: the R x C array stepped one clock at a time, moving real values.
//!
//! Every cycle each processing element takes the operand arriving from its left
//! neighbour (and, for output-stationary, from above), multiplies it in f32 (operands are
//! rounded to the input type, bf16 by default, when they enter the array, so the product
//! is exact) and adds it to the partial sum arriving from above (weight-/input-stationary)
//! or to its own accumulator (output-stationary). Partial sums leave the bottom edge into
//! f32 accumulators; output-stationary results leave on per-column output buses.
//!
//! Representation (this is what makes it fast, not a simplification of the model):
//! * a row's left-to-right shift register is a *delay line*: the value PE `(r, c)` holds
//!   at cycle `t` is the one injected into row `r` at `t − c`, so a row's C registers are
//!   one contiguous window of the line and a clock tick moves a pointer, not C values;
//! * the top-to-bottom partial-sum pipeline is updated in place, bottom row first, so each
//!   row reads the row above as it was one cycle earlier;
//! * the stationary tile travels down per-column transport chains (delay lines too) and
//!   lands in the PE's inactive bank when the chain is full;
//! * a PE computes only when a wavefront of real data passes it (the rest of the array is
//!   clock-gated). Wavefronts are tracked per fold, so each row's update is one or two
//!   contiguous, vectorizable spans.
//!
//! The controller that decides when a fold's load and stream start observes the array
//! (when a fold's last row entered, when its last result left) and applies the issue rules
//! written down in [`super::timeline`]; the cycles at which results then *leave the array*
//! are observed, not computed.

use std::collections::VecDeque;

use super::config::{DType, Dataflow};
use super::tile_ir::{Schedule, TileProgram};
use super::timeline::{Counters, DmaEngine, DmaTimes, FoldTimes, Timeline};

/// The PE model's result: the observed timeline and the product matrix `C[M,N]` (f32).
#[derive(Clone, Debug)]
pub struct PeRun {
    pub timeline: Timeline,
    pub out: Vec<f32>,
}

/// Rounds to the MXU's input type (the operand as it sits in VMEM).
fn to_input(dtype: DType, x: f32) -> f32 {
    match dtype {
        DType::Bf16 => half::bf16::from_f32(x).to_f32(),
        DType::F16 => half::f16::from_f32(x).to_f32(),
        DType::F32 | DType::S8 => x,
    }
}

/// `rows` delay lines of which the newest `width` entries are visible as a window.
struct DelayLines {
    width: usize,
    len: usize,
    pos: usize,
    buf: Vec<f32>,
}

const SLACK: usize = 2048;

impl DelayLines {
    fn new(rows: usize, width: usize) -> DelayLines {
        let len = width + SLACK;
        DelayLines { width, len, pos: SLACK, buf: vec![0.0; rows * len] }
    }

    /// Advances one cycle; the new entry of every line is 0 until `set`.
    fn tick(&mut self) {
        if self.pos == 0 {
            for r in 0..self.buf.len() / self.len {
                let base = r * self.len;
                self.buf.copy_within(base..base + self.width, base + SLACK);
            }
            self.pos = SLACK;
        }
        self.pos -= 1;
        for r in 0..self.buf.len() / self.len {
            self.buf[r * self.len + self.pos] = 0.0;
        }
    }

    fn set(&mut self, row: usize, v: f32) {
        self.buf[row * self.len + self.pos] = v;
    }

    /// Entry `c` of the window = the value injected `c` cycles ago.
    fn window(&self, row: usize) -> &[f32] {
        let s = row * self.len + self.pos;
        &self.buf[s..s + self.width]
    }
}

/// Per-fold constants the array needs.
struct FoldGeom {
    m0: usize,
    n0: usize,
    k0: usize,
    /// Valid array rows, valid array columns, streamed rows (T).
    vr: usize,
    vc: usize,
    t: usize,
    first_k: bool,
}

/// Progress callback: called with the number of cycles simulated so far.
pub type Progress<'a> = &'a mut dyn FnMut(u64);

/// Runs `p` on the PE array with operands `a` (`M x K`, row-major) and `b` (`K x N`).
///
/// Returns an error if the operand sizes do not match the program or if the array saw a
/// structural hazard (which would mean the controller's issue rules are wrong).
pub fn simulate(
    p: &TileProgram,
    a: &[f32],
    b: &[f32],
    dma: Option<DmaEngine>,
    progress: Option<Progress>,
) -> Result<PeRun, crate::TpuError> {
    let g = p.gemm;
    let (mm, nn, kk) = (g.m as usize, g.n as usize, g.k as usize);
    if a.len() != mm * kk || b.len() != kk * nn {
        return Err(crate::TpuError::from(format!(
            "operand sizes {} and {} do not match gemm {}x{}x{}",
            a.len(),
            b.len(),
            g.m,
            g.n,
            g.k
        )));
    }
    let a: Vec<f32> = a.iter().map(|&x| to_input(p.in_dtype, x)).collect();
    let b: Vec<f32> = b.iter().map(|&x| to_input(p.in_dtype, x)).collect();
    let mut sim = Sim::new(p, a, b, dma);
    sim.run(progress)?;
    Ok(sim.finish())
}

struct Sim<'p> {
    p: &'p TileProgram,
    df: Dataflow,
    r: usize,
    c: usize,
    a: Vec<f32>,
    b: Vec<f32>,
    k: usize,
    n: usize,
    geom: Vec<FoldGeom>,
    out: Vec<f32>,
    // Array state.
    lines: DelayLines,
    /// WS/IS: partial sums `psum[r*C + c]`; OS: per-PE accumulators.
    psum: Vec<f32>,
    zeros: Vec<f32>,
    /// WS/IS: two stationary banks.
    banks: [Vec<f32>; 2],
    /// WS/IS: per-column transport chains, `tring[c * 2R + (t mod 2R)]`.
    tring: Vec<f32>,
    /// OS: values entering column tops, `top[(t mod (R+1)) * C + c]`.
    top: Vec<f32>,
    // Controller state and observations.
    times: Vec<FoldTimes>,
    load_started: usize,
    stream_started: usize,
    dma_issued: usize,
    stat_ready: Vec<u64>,
    stream_ready: Vec<u64>,
    /// Folds whose last result has left the array (they drain in program order).
    drained: usize,
    engine: Option<DmaEngine>,
    dmas: Vec<DmaTimes>,
    out_queue: VecDeque<(u64, usize, u64)>,
    counters: Counters,
    /// OS: the cycle each column's output bus was last driven.
    bus: Vec<Option<u64>>,
    /// The latest completion of any input DMA issued so far.
    dma_done_max: u64,
}

impl<'p> Sim<'p> {
    fn new(p: &'p TileProgram, a: Vec<f32>, b: Vec<f32>, engine: Option<DmaEngine>) -> Sim<'p> {
        let (r, c) = (p.rows as usize, p.cols as usize);
        let df = p.dataflow;
        let geom = p
            .folds
            .iter()
            .map(|f| {
                let (vr, vc, t) = f.extent(df);
                FoldGeom {
                    m0: f.m.start as usize,
                    n0: f.n.start as usize,
                    k0: f.k.start as usize,
                    vr: vr as usize,
                    vc: vc as usize,
                    t: t as usize,
                    first_k: f.first_k,
                }
            })
            .collect();
        let nf = p.folds.len();
        Sim {
            p,
            df,
            r,
            c,
            k: p.gemm.k as usize,
            n: p.gemm.n as usize,
            out: vec![0.0; (p.gemm.m * p.gemm.n) as usize],
            a,
            b,
            geom,
            lines: DelayLines::new(r, c),
            psum: vec![0.0; r * c],
            zeros: vec![0.0; c],
            banks: [vec![0.0; r * c], vec![0.0; r * c]],
            tring: if df == Dataflow::Os { vec![] } else { vec![0.0; c * 2 * r] },
            top: if df == Dataflow::Os { vec![0.0; (r + 1) * c] } else { vec![] },
            times: vec![FoldTimes::default(); nf],
            load_started: 0,
            stream_started: 0,
            dma_issued: 0,
            stat_ready: vec![0; nf],
            stream_ready: vec![0; nf],
            drained: 0,
            engine,
            dmas: vec![],
            out_queue: VecDeque::new(),
            counters: Counters::default(),
            bus: vec![None; c],
            dma_done_max: 0,
        }
    }

    fn stationary(&self) -> bool {
        self.df != Dataflow::Os
    }

    /// The value of the streamed operand for fold `g`, streamed row `i`, array row `row`.
    fn streamed(&self, g: usize, i: usize, row: usize) -> f32 {
        let f = &self.geom[g];
        if row >= f.vr {
            return 0.0;
        }
        match self.df {
            // A[m0 + i, k0 + row]
            Dataflow::Ws => self.a[(f.m0 + i) * self.k + f.k0 + row],
            // B[k0 + row, n0 + i]
            Dataflow::Is => self.b[(f.k0 + row) * self.n + f.n0 + i],
            // A[m0 + row, k = i]
            Dataflow::Os => self.a[(f.m0 + row) * self.k + i],
        }
    }

    /// The stationary tile's element for PE (row, col) of fold `g` (WS/IS).
    fn stationary_elem(&self, g: usize, row: usize, col: usize) -> f32 {
        let f = &self.geom[g];
        if row >= f.vr || col >= f.vc {
            return 0.0;
        }
        match self.df {
            Dataflow::Ws => self.b[(f.k0 + row) * self.n + f.n0 + col],
            _ => self.a[(f.m0 + col) * self.k + f.k0 + row],
        }
    }

    /// Folds whose wavefronts can be in the array at cycle `t`.
    fn live_folds(&self, t: u64) -> std::ops::Range<usize> {
        let span = (self.r + self.c) as u64;
        let lo = self.times[..self.stream_started].partition_point(|f| f.stream_end + span < t);
        lo..self.stream_started
    }

    fn run(&mut self, mut progress: Option<Progress>) -> Result<(), String> {
        let mut t: u64 = 0;
        while self.drained < self.p.folds.len() {
            self.control(t)?;
            let live = self.live_folds(t);
            // Nothing in the array, nothing loading, no DMA outstanding: a controller bug
            // would wait forever; stop instead.
            let dma_busy = self.dma_done_max >= t;
            if live.is_empty() && self.load_window(t).is_empty() && !dma_busy && t > 0 {
                let left = self.p.folds.len() - self.drained;
                return Err(format!(
                    "the array controller stalled at cycle {t} with {left} folds left"
                ));
            }
            self.inject(t, live.clone());
            self.compute(t, live)?;
            self.land_weights(t);
            t += 1;
            if t.is_multiple_of(4096)
                && let Some(cb) = progress.as_mut()
            {
                cb(t);
            }
        }
        if let Some(cb) = progress.as_mut() {
            cb(t);
        }
        Ok(())
    }

    /// Fold `g`'s last streamed row entered array row 0 before cycle `t`.
    fn entered(&self, g: usize, t: u64) -> bool {
        self.stream_started > g && self.times[g].stream_end < t
    }

    /// Controller decisions at the start of cycle `t`.
    fn control(&mut self, t: u64) -> Result<(), String> {
        let nf = self.p.folds.len();
        let (r, stationary) = (self.r as u64, self.stationary());
        // DMA: fold g's inputs are requested once fold g − D's last row has entered.
        let depth = self.p.prefetch;
        while self.dma_issued < nf {
            let g = self.dma_issued;
            let issue = if g < depth {
                0
            } else if self.entered(g - depth, t) {
                self.times[g - depth].stream_end + 1
            } else {
                break;
            };
            if issue != t && g >= depth {
                return Err(format!("controller missed the DMA issue cycle of fold {g}"));
            }
            if let Some(e) = self.engine.as_mut() {
                (self.stat_ready[g], self.stream_ready[g]) =
                    e.fetch_inputs(g, &self.p.folds[g], self.df, issue, &mut self.dmas);
                self.dma_done_max =
                    self.dma_done_max.max(self.stat_ready[g]).max(self.stream_ready[g]);
            }
            self.dma_issued += 1;
        }
        while self.out_queue.front().is_some_and(|x| x.0 <= t) {
            let (issue, g, bytes) = self.out_queue.pop_front().unwrap();
            if let Some(e) = self.engine.as_mut() {
                self.dmas.push(e.transfer(g, None, issue, bytes));
            }
        }
        let sequential = self.p.schedule == Schedule::Sequential;
        // The previous fold's last result has left the array (sequential schedule); it was
        // observed in an earlier cycle, since the controller runs before the array.
        let prev_drained = |s: &Self, g: usize| s.drained >= g;
        if stationary && self.load_started < nf && self.load_started < self.dma_issued {
            let g = self.load_started;
            let ok = if sequential {
                prev_drained(self, g)
            } else {
                self.stat_ready[g] <= t
                    && (g == 0 || self.times[g - 1].load_start.unwrap() + r <= t)
                    && (g < 2 || self.entered(g - 2, t))
            };
            if ok {
                self.times[g].load_start = Some(t);
                self.load_started += 1;
            }
        }
        if self.stream_started < nf && self.stream_started < self.dma_issued {
            let g = self.stream_started;
            let tg = self.geom[g].t as u64;
            let prev_done = g == 0 || self.entered(g - 1, t);
            let ok = match (sequential, stationary) {
                (_, true) => {
                    self.load_started > g
                        && self.times[g].load_start.unwrap() + r <= t
                        && prev_done
                        && (sequential || self.stream_ready[g] <= t)
                }
                (true, false) => prev_drained(self, g),
                (false, false) => {
                    prev_done
                        && self.stream_ready[g] <= t
                        && (g == 0 || self.times[g - 1].stream_end + 1 + r <= t + tg)
                }
            };
            if ok {
                let f = &mut self.times[g];
                f.stream_start = t;
                f.stream_end = t + tg - 1;
                f.inputs_ready = self.stat_ready[g].max(self.stream_ready[g]);
                self.stream_started += 1;
            }
        }
        Ok(())
    }

    /// The edge positions (array rows, or columns for B in OS) on which fold `g`'s stream
    /// enters at cycle `t`: position `x` receives the row that entered row 0 at `t − x`.
    fn entering(&self, t: u64, g: usize, edge: usize) -> std::ops::Range<usize> {
        let f = &self.times[g];
        let lo = t.saturating_sub(f.stream_end) as usize;
        let hi =
            if t >= f.stream_start { ((t - f.stream_start) as usize + 1).min(edge) } else { 0 };
        lo.min(hi)..hi
    }

    /// Edge inputs for cycle `t`: streamed operands and the stationary transport chains.
    fn inject(&mut self, t: u64, live: std::ops::Range<usize>) {
        self.lines.tick();
        for g in live.clone() {
            let s = self.times[g].stream_start;
            let vr = self.geom[g].vr;
            for row in self.entering(t, g, self.r) {
                let i = (t - row as u64 - s) as usize;
                let v = self.streamed(g, i, row);
                self.lines.set(row, v);
                if row < vr {
                    match self.df {
                        Dataflow::Is => self.counters.filter_reads += 1,
                        _ => self.counters.ifmap_reads += 1,
                    }
                }
            }
        }
        if self.df == Dataflow::Os {
            // B enters column c's top at s + k + c; the slot for cycle t holds one per column.
            let slot = (t % (self.r as u64 + 1)) as usize * self.c;
            self.top[slot..slot + self.c].fill(0.0);
            for g in live {
                let s = self.times[g].stream_start;
                for col in self.entering(t, g, self.c) {
                    let f = &self.geom[g];
                    if col < f.vc {
                        let i = (t - col as u64 - s) as usize;
                        self.counters.filter_reads += 1;
                        self.top[slot + col] = self.b[i * self.n + f.n0 + col];
                    }
                }
            }
            return;
        }
        // Transport chains: fold g's tile enters column c during [L + c, L + c + R), the
        // tile's last row first, so row r holds its element when the chain is full.
        let two_r = 2 * self.r;
        for g in self.load_window(t) {
            let l = self.times[g].load_start.unwrap();
            let Some(hi) = t.checked_sub(l) else { continue };
            let cols =
                (hi + 1).saturating_sub(self.r as u64) as usize..(hi as usize + 1).min(self.c);
            for col in cols {
                let j = (t - col as u64 - l) as usize;
                let row = self.r - 1 - j;
                let v = self.stationary_elem(g, row, col);
                if row < self.geom[g].vr && col < self.geom[g].vc {
                    match self.df {
                        Dataflow::Ws => self.counters.filter_reads += 1,
                        _ => self.counters.ifmap_reads += 1,
                    }
                }
                self.tring[col * two_r + (t as usize % two_r)] = v;
            }
        }
    }

    /// Folds whose stationary tile is moving through the transport chains at cycle `t`.
    fn load_window(&self, t: u64) -> std::ops::Range<usize> {
        let span = (self.r + self.c) as u64;
        let started = &self.times[..self.load_started];
        let lo = started.partition_point(|f| f.load_start.unwrap() + span <= t);
        lo..self.load_started
    }

    /// At cycle `t`, column c of fold g's tile lands in bank g mod 2 when `t = L + R − 1 + c`.
    fn land_weights(&mut self, t: u64) {
        if self.df == Dataflow::Os {
            return;
        }
        let (r, c, two_r) = (self.r, self.c, 2 * self.r);
        for g in self.load_window(t) {
            let w = self.times[g].load_start.unwrap() + r as u64 - 1;
            let Some(col) = t.checked_sub(w).map(|x| x as usize).filter(|&x| x < c) else {
                continue;
            };
            let bank = &mut self.banks[g % 2];
            for row in 0..r {
                // Row `row` holds the element that entered `row` cycles ago.
                bank[row * c + col] =
                    self.tring[col * two_r + ((t as usize + two_r - row) % two_r)];
            }
        }
    }

    fn compute(&mut self, t: u64, live: std::ops::Range<usize>) -> Result<(), String> {
        if self.df == Dataflow::Os {
            return self.compute_os(t, live);
        }
        let (r, c) = (self.r, self.c);
        // Rows bottom-up: row `row` reads the row above as it was last cycle.
        for row in (0..r).rev() {
            for g in live.clone() {
                let Some(span) = self.span(t, row, g) else { continue };
                let bank = &self.banks[g % 2][row * c..(row + 1) * c];
                let win = self.lines.window(row);
                let (above, cur) = self.psum.split_at_mut(row * c);
                let prev: &[f32] = if row == 0 { &self.zeros } else { &above[(row - 1) * c..] };
                let cur = &mut cur[..c];
                for x in span {
                    cur[x] = prev[x] + win[x] * bank[x];
                }
            }
        }
        // Partial sums leaving the bottom row go to the accumulators.
        for g in live {
            let Some(span) = self.span(t, r - 1, g) else { continue };
            let s = self.times[g].stream_start;
            for col in span {
                let i = (t - (r - 1) as u64 - col as u64 - s) as usize;
                if i == 0 && col == 0 {
                    self.times[g].first_out = t;
                }
                if i == self.geom[g].t - 1 && col == c - 1 {
                    self.observe_last_out(g, t);
                }
                let f = &self.geom[g];
                if col >= f.vc {
                    continue;
                }
                let idx = match self.df {
                    Dataflow::Ws => (f.m0 + i) * self.n + f.n0 + col,
                    _ => (f.m0 + col) * self.n + f.n0 + i,
                };
                let v = self.psum[(r - 1) * c + col];
                self.out[idx] = if f.first_k { 0.0 + v } else { self.out[idx] + v };
                self.counters.ofmap_writes += 1;
                self.counters.macs += f.vr as u64;
                if !f.first_k {
                    self.counters.acc_reads += 1;
                }
            }
        }
        Ok(())
    }

    /// The columns of array row `row` on which fold `g`'s wavefront sits at cycle `t`.
    fn span(&self, t: u64, row: usize, g: usize) -> Option<std::ops::Range<usize>> {
        let f = &self.times[g];
        // Column c holds the wave that entered row 0 at t − row − c.
        let hi = t as i64 - row as i64 - f.stream_start as i64;
        let lo = t as i64 - row as i64 - f.stream_end as i64;
        let (lo, hi) = (lo.max(0), hi.min(self.c as i64 - 1));
        (lo <= hi).then(|| lo as usize..hi as usize + 1)
    }

    fn observe_last_out(&mut self, g: usize, t: u64) {
        self.times[g].last_out = t;
        debug_assert_eq!(g, self.drained, "folds drain in program order");
        self.drained += 1;
        if let Some(d) = &self.p.folds[g].dma_out
            && self.engine.is_some()
        {
            self.counters.dma_out_bytes += d.bytes;
            self.out_queue.push_back((t + 1, g, d.bytes));
        }
    }

    fn compute_os(&mut self, t: u64, live: std::ops::Range<usize>) -> Result<(), String> {
        let (r, c) = (self.r, self.c);
        let rows1 = r + 1;
        for row in 0..r {
            // B reaching row `row` entered the column tops `row` cycles ago.
            let slot =
                ((t + rows1 as u64 - (row as u64 % rows1 as u64)) % rows1 as u64) as usize * c;
            for g in live.clone() {
                let Some(span) = self.span(t, row, g) else { continue };
                let (s, y) = (self.times[g].stream_start, self.times[g].stream_end);
                let acc = &mut self.psum[row * c..(row + 1) * c];
                // The first MAC of a fold starts from zero (the wave with k = 0).
                let first = t as i64 - row as i64 - s as i64;
                if span.contains(&(first as usize)) && first >= 0 {
                    acc[first as usize] = 0.0;
                }
                let win = self.lines.window(row);
                let top = &self.top[slot..slot + c];
                for x in span.clone() {
                    acc[x] += win[x] * top[x];
                }
                // The last MAC (k = T − 1): the result goes onto the column's bus.
                let last = t as i64 - row as i64 - y as i64;
                if last >= 0 && span.contains(&(last as usize)) {
                    let col = last as usize;
                    if self.bus[col] == Some(t) {
                        return Err(format!("output bus conflict in column {col} at cycle {t}"));
                    }
                    self.bus[col] = Some(t);
                    let f = &self.geom[g];
                    let v = self.psum[row * c + col];
                    if row == 0 && col == 0 {
                        self.times[g].first_out = t;
                    }
                    if row < f.vr && col < f.vc {
                        self.out[(f.m0 + row) * self.n + f.n0 + col] = v;
                        self.counters.ofmap_writes += 1;
                        self.counters.macs += f.t as u64;
                    }
                    if row == r - 1 && col == c - 1 {
                        self.observe_last_out(g, t);
                    }
                }
            }
        }
        Ok(())
    }

    fn finish(mut self) -> PeRun {
        if let Some(e) = self.engine.as_mut() {
            for (issue, g, bytes) in std::mem::take(&mut self.out_queue) {
                self.dmas.push(e.transfer(g, None, issue, bytes));
            }
        }
        self.counters.dma_in_bytes =
            self.p.folds[..self.dma_issued].iter().flat_map(|f| &f.dma_in).map(|d| d.bytes).sum();
        let compute_cycles = self.times.last().map_or(0, |f| f.last_out + 1);
        let total_cycles = self.dmas.iter().map(|d| d.done).max().unwrap_or(0).max(compute_cycles);
        PeRun {
            timeline: Timeline {
                folds: self.times,
                dma: self.dmas,
                counters: self.counters,
                compute_cycles,
                total_cycles,
            },
            out: self.out,
        }
    }
}

/// The product the array must produce, computed directly on the host in the array's
/// accumulation order: f32 sums over each K fold of `R` rows (output-stationary: over all
/// of K), folds added in order. `tests/mxu_numerics.rs` shows this order is the reference
/// interpreter's (a plain dot within a fold, a K-blocked dot across folds).
pub fn reference_product(p: &TileProgram, a: &[f32], b: &[f32]) -> Vec<f32> {
    let (m, n, k) = (p.gemm.m as usize, p.gemm.n as usize, p.gemm.k as usize);
    let block = if p.dataflow == Dataflow::Os { k } else { p.rows as usize };
    let a: Vec<f32> = a.iter().map(|&x| to_input(p.in_dtype, x)).collect();
    let b: Vec<f32> = b.iter().map(|&x| to_input(p.in_dtype, x)).collect();
    let mut out = vec![0.0f32; m * n];
    let mut part = vec![0.0f32; n];
    for i in 0..m {
        for k0 in (0..k).step_by(block) {
            part.fill(0.0);
            for kk in k0..(k0 + block).min(k) {
                let x = a[i * k + kk];
                for (p, &y) in part.iter_mut().zip(&b[kk * n..(kk + 1) * n]) {
                    *p += x * y;
                }
            }
            for (o, &p) in out[i * n..(i + 1) * n].iter_mut().zip(&part) {
                *o = if k0 == 0 { 0.0 + p } else { *o + p };
            }
        }
    }
    out
}

/// Deterministic pseudo-random operands (xorshift) that are exact bf16 values spanning
/// several binades and both signs, so summation order shows in the f32 result bits.
pub fn sample_operands(n: u64, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mant = (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            let scale = [1.0f32, 0.01, 37.0, 1e-3][(x >> 8) as usize % 4];
            half::bf16::from_f32(mant * scale).to_f32()
        })
        .collect()
}
