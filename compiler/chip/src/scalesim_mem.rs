//! Exact re-implementation of SCALE-Sim 3.0.0's *memory system* (DRAM traffic, stall cycles and
//! "total cycles incl. prefetch") for one layer: closed forms where they are exact, else a walk
//! over lazily generated demand streams.
//!
//! Why one file: it mirrors one upstream component, SCALE-Sim 3.0.0's memory system (the
//! buffers of `memory/` as `single_layer_sim.py` drives them), and keeps the
//! request-by-request walk ([`simulate_memory_walk`]) beside the closed forms
//! ([`simulate_memory`]) that must equal it, with the sweeps that hold the two equal (a sixth
//! of the file); split, every closed form would sit away from the walk it short-cuts.
//!
//! This is an original Rust implementation of the algorithm of the PyPI package `scalesim==3.0.0`
//! (paths below are relative to its `scalesim/` package directory). It reproduces the numbers
//! SCALE-Sim reports, including its quirks; it is *not* a realistic memory model. See
//! `shared/design/systolic-model.md` §2–§6 for the surrounding discussion.
//!
//! # Pipeline (what SCALE-Sim does, and what is reproduced here)
//!
//! 1. **Operand matrices** (`compute/operand_matrix.py`). A GEMM `M×N×K` is loaded as the conv
//!    layer `ifmap M×K, filter 1×K, C = 1, NF = N, stride 1` (`topology_utils.py:110`), so every
//!    layer is a conv: `P = OH·OW` ofmap pixels with `OH = ⌈(IH−FH+S)/S⌉` (`topology_utils.py:285`),
//!    window `W = FH·FW·C`. Addresses (see [`AddressLayout`]):
//!    * ifmap `[P × W]`: the im2col address of the input pixel, or `-1` when the window leaves the
//!      image (`operand_matrix.py:195-220`, possible because OH uses a ceiling);
//!    * filter `[W × NF]`: `f·W + w + filter_offset` (`operand_matrix.py:371`);
//!    * ofmap `[P × NF]`: `p·NF + f + ofmap_offset` (`operand_matrix.py:247`).
//! 2. **Demand matrices** (`compute/systolic_compute_{ws,os,is}.py`): one row per cycle, one
//!    column per array edge port, `-1` = no request. Folds are walked `for fc: for fr:` and every
//!    fold has the same number of rows `L` (WS/IS `2R+C+T−2`, OS `T+R+C−2`). Here they are never
//!    materialised: [`simulate_memory_walk`] generates each row's valid column interval on the fly
//!    (`skew_matrix` makes every operand a "skewed stream" or a "stationary preload" whose valid
//!    columns in a row form one contiguous interval).
//! 3. **Memory service loop** (`memory/double_buffered_scratchpad_mem.py:234-307`): row `i` is
//!    presented at cycle `i + stall_cycles` (line 256) to the ifmap read buffer, the filter read
//!    buffer and the ofmap write buffer, in that order, each seeing the row's addresses in column
//!    order. Each returns a service cycle; read stalls are `out − cycle − 1` (hit latency 1, lines
//!    263/270), the write stall is `out − cycle` (line 277), and `stall_cycles` grows by the largest
//!    of the three (line 279). `total_cycles = max(ofmap service cycle)` (line 307), i.e. `rows − 1`
//!    without stalls. After the loop the write buffer is flushed starting at the last row's ofmap
//!    service cycle (line 288).
//! 4. **Report** (`single_layer_sim.py:327-379`): DRAM counts are the buffers' `num_access`;
//!    "Total Cycles (incl. prefetch)" is `int(ofmap_dram_stop − min(ifmap_dram_start,
//!    filter_dram_start))` (`single_layer_sim.py:371`).
//!
//! Word size is hard-wired to 1 byte and the active fraction of every buffer to 0.5
//! (`single_layer_sim.py:238-239`), so an SRAM of `kb` kB holds `S = 1024·kb` words.
//!
//! # CALC ("estimate bandwidth") mode — `memory/read_buffer_estimate_bw.py`
//!
//! ifmap/filter reads never stall (line 119). The buffer tracks *newly seen* addresses in sets of
//! `items = ⌊S/100⌋` words (line 94); 50 sets form the "active" window (lines 95-96). An address
//! is a hit iff it was inserted into a set of the current window (sets `[50·⌊set/50⌋, current]`,
//! `check_hit` lines 200-216 plus the current-set test at line 149). When the 50th set of a window
//! fills, the window jumps to the next 50 sets and the old ones are forgotten (lines 160-197). So
//! with `E = 50·items`, the insertions are cut into epochs of `E`, and an address is a miss iff it
//! was not yet inserted in the current epoch. **DRAM reads = number of insertions** (every set is
//! "prefetched" exactly once, line 276, incl. the partial last one in `complete_all_prefetches`,
//! lines 219-253).
//!
//! DRAM start cycle (first row of the trace, line 359, read port latency 1 `memory/read_port.py:82`):
//! * if the first epoch filled during the run: `first_request_cycle − ⌈50·items/10⌉`
//!   (lines 163-171; 10 words/cycle is the hard-wired CALC fill rate, `single_layer_sim.py:261`);
//! * otherwise (prefetched in `complete_all_prefetches`, lines 232-243):
//!   `−⌈⌈inserted/items⌉·items / 10⌉` — the "1 % set quantisation" of the prefetch time.
//!
//! The ofmap write buffer drains at `C` words/cycle in CALC mode (`single_layer_sim.py:263`).
//!
//! # USER mode — `memory/read_buffer.py`
//!
//! ifmap/filter fill at `IfmapSRAMBankBandwidth`/`FilterSRAMBankBandwidth` words/cycle and the
//! ofmap drains at `Bandwidth` (`single_layer_sim.py:250-254`); `gemm.py` sets all three to the
//! same `bw`, which is what [`MemConfig::bandwidth`] models.
//! * The **prefetch ("fetch") matrix** of each operand (`create_*_prefetch_mat`) is the operand
//!   stacked once per fold of the *other* spatial dimension only (e.g. WS ifmap: once per row fold,
//!   not per column fold), optionally read along anti-diagonals ("ISSUE #15" rollout: WS ifmap,
//!   OS ifmap+filter, IS filter), else row-major (WS filter, IS ifmap).
//! * Its valid entries, in that order, are cut into sets of `eps = ⌈S/100⌉` entries
//!   (`prepare_hashed_buffer`, lines 173-222); there are `⌊valid/eps⌋ + 1` sets (the last may be
//!   empty). The active window holds `min(#sets, ⌈A/eps⌉)` sets and a prefetch moves it by
//!   `min(rest, ⌈(S−A)/eps⌉)` sets, modulo `#sets` (lines 205-219, 464-469), `A = ⌈S/2⌉`. A window
//!   with `start ≥ end` wraps around (lines 259-267; `start == end` means "everything").
//! * The first `service_reads` call prefetches the active half before cycle 0:
//!   `min(⌈A/bw⌉, fetch_lines)·bw` DRAM words, responses at cycles `−lines … −1`, and
//!   `last_prefetch_cycle = −1` (`prefetch_active_buffer`, lines 377-448).
//! * A request that misses the window triggers `new_prefetch` repeatedly until it hits
//!   (line 359). Each prefetch moves the window, costs `⌈(S−A)/bw⌉·bw` DRAM words (size-based,
//!   line 479 — not the number of distinct words fetched) and completes at
//!   `last_prefetch_cycle += ⌈(S−A)/bw⌉ + 1` (lines 505-517): prefetches chain back to back
//!   from cycle −1 regardless of when they are requested.
//! * Stall quirk (lines 361-364): with `p = last_prefetch_cycle − (cycle + offset)`, `offset += p`
//!   and, if `p > 0`, `offset += p` *again* (positive waits are counted twice; negative ones pull the
//!   offset back). `offset` starts at the hit latency 1 and is carried across the row's requests.
//! * Because the fetch matrix contains each operand only once per fold of one dimension, the
//!   window has to wrap all the way round whenever the demand revisits data (quirk 4 in the
//!   design note), which is what makes USER-mode DRAM reads a multiple of the compulsory traffic.
//!
//! DRAM start cycle = min of the trace's cycle column = `−(initial prefetch lines)` (line 572).
//!
//! # Ofmap write buffer — `memory/write_buffer.py` (both modes)
//!
//! `S` words, drain half `D = S − ⌈S/2⌉` (lines 84-86), drain rate `B` words/cycle. Written words
//! are packed into `B`-word lines (lines 115-147). Per written word (`service_writes`, lines
//! 189-225): `free −= 1`; if the current cycle is before the end of the running drain and
//! `free ≤ 0`, the row stalls until that drain ends (lines 214-217); otherwise, if
//! `free < S − D`, the partial current line is flushed as a full line padded with `-1`
//! (line 220) and a drain of `⌈D/B⌉` lines starts at the current cycle (`empty_drain_buf`,
//! lines 238-273): it takes one cycle per line (write port latency 0, `memory/write_port.py:70`),
//! and `free` grows *immediately* by the drained word count. That count is `lines·B` minus the
//! padding of the **last** line only (lines 251-256): padding in earlier (forced partial) lines is
//! counted as DRAM writes — the "+127 words" seen in `reference.csv`. At the end the remaining
//! lines are drained back to back from the last row's ofmap cycle (`empty_all_buffers`,
//! lines 276-287). DRAM ofmap stop cycle = end of the last drain (line 325).
//!
//! # Closed forms, and when the requests are still walked
//!
//! [`simulate_memory_walk`] follows the pipeline above row by row and request by request:
//! O(SRAM requests), about 50 ms for a 1024³ GEMM. [`simulate_memory`] returns exactly the same
//! [`MemStats`] from closed forms wherever they are exact, and falls back to the walk elsewhere
//! ([`uses_walk`] tells which). The equality is asserted by the sweeps in this module's tests.
//!
//! * **SRAM requests** (always closed). The demand matrices hold each valid operand entry once
//!   per pass over it: ifmap `V·⌈Sc/C⌉` (WS, OS) or `V` (IS), filter `W·NF` (WS),
//!   `W·NF·⌈Sc/C⌉` (IS) or `W·NF·⌈Sr/R⌉` (OS), ofmap `P·NF·⌈Sr/R⌉` (WS, IS) or `P·NF` (OS), with
//!   `V = M·K` for a GEMM and, for a conv, the entries whose window stays inside the image.
//!   These are the §5 counters of `shared/design/systolic-model.md`.
//! * **CALC-mode reads** (closed unless noted). Reads never stall, so the read buffers do not
//!   interact with the write buffer or with time, except through the first request's cycle,
//!   which is a stall-free row index. Each operand's request stream is a sequence of passes over
//!   the same addresses in the same order (see `Mapping::calc_insertions`), and the epoch rule
//!   above then gives the insertion count from a few runs of insertion indices
//!   (`epoch_insertions`): compulsory traffic when an operand fits in an epoch
//!   (`50·⌊S/100⌋` words), one DRAM read per SRAM read when it does not. The one stream that is
//!   not a sequence of such passes, the ifmap of a conv whose windows overlap, is closed only
//!   when its distinct pixels fit in one epoch (then every re-request hits); otherwise walked.
//! * **USER-mode reads** (closed only without misses). When an operand's prefetch matrix fits in
//!   the active window, every request hits with latency 1 and the DRAM reads are the initial
//!   prefetch. Otherwise each miss slides the window with the size-based, double-counted stall
//!   arithmetic above, whose outcome depends on the exact cycle of every request: walked.
//! * **Ofmap write buffer** (closed whenever the reads are). With no read stalls, rows only
//!   differ in how many words they write, and the buffer acts only when a row fills it during
//!   a drain or takes it below the active half. The writes per row of a fold have a closed
//!   prefix sum, so the event rows are found by binary search, the rows between them are stored
//!   in one step, and the event rows go through the exact per-row code (`write_side`). That
//!   gives the DRAM writes, stall cycles, total cycles and DRAM stop cycle, in both modes, in
//!   O(folds + events · log rows).

use std::collections::VecDeque;

pub use super::config::Dataflow;

/// A layer as SCALE-Sim sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// GEMM `C[M,N] = A[M,K]·B[K,N]` (SCALE-Sim `-i gemm` topology).
    Gemm { m: u64, n: u64, k: u64 },
    /// Native conv layer: ifmap `ih×iw×c`, `nf` filters of `fh×fw×c`, equal row/col stride, no
    /// padding (SCALE-Sim conv topology).
    Conv { ih: u64, iw: u64, fh: u64, fw: u64, c: u64, nf: u64, stride: u64 },
}

/// Memory-system configuration (the parts of SCALE-Sim's config that matter here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemConfig {
    /// Systolic array height R.
    pub rows: u64,
    /// Systolic array width C.
    pub cols: u64,
    pub dataflow: Dataflow,
    /// SRAM sizes in kB; SCALE-Sim's word is 1 byte, so this is kilo-words.
    pub ifmap_kb: u64,
    pub filter_kb: u64,
    pub ofmap_kb: u64,
    /// `None` = CALC (estimate-bandwidth) mode, `Some(w)` = USER mode at `w` words/cycle (used for
    /// the ifmap/filter fill and the ofmap drain, as `shared/scalesim/gemm.py` configures it).
    pub bandwidth: Option<u64>,
}

/// SCALE-Sim's memory-side results for one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MemStats {
    /// "Stall Cycles" of the compute report.
    pub stall_cycles: u64,
    /// "Total Cycles" of the compute report (= max ofmap service cycle, includes stalls).
    pub total_cycles: u64,
    /// DRAM words read into the ifmap SRAM.
    pub dram_ifmap_reads: u64,
    /// DRAM words read into the filter SRAM.
    pub dram_filter_reads: u64,
    /// DRAM words written from the ofmap SRAM.
    pub dram_ofmap_writes: u64,
    /// "Total Cycles (incl. prefetch)" = ofmap DRAM stop − min(ifmap, filter DRAM start).
    pub total_cycles_incl_prefetch: Option<u64>,
    /// Valid (not `-1`) ifmap requests the memory system served. SCALE-Sim's "SRAM ifmap
    /// reads" counts demand-slice *shapes* instead, so for a native conv whose windows leave the
    /// image (`OH = ⌈(IH−FH+S)/S⌉`) it also counts the `-1` entries; for a GEMM the two agree.
    pub sram_ifmap_requests: u64,
    /// Valid filter requests served (= SCALE-Sim's "SRAM filter reads").
    pub sram_filter_requests: u64,
    /// Ofmap writes served. SCALE-Sim's OS "SRAM ofmap writes" adds a spurious `F·(R + C)`
    /// (`systolic_compute_os.py:403`) that never reaches the write buffer.
    pub sram_ofmap_requests: u64,
}

/// Operand address offsets as `shared/scalesim/gemm.py` (`_write_inputs`) configures them:
/// ifmap at 0, filter at `max(10 M, ifmap_elems + 1)`, ofmap `max(10 M, filter_elems + 1)`
/// above the filter, keeping the three address ranges disjoint. (SCALE-Sim's own defaults are
/// 0 / 10 M / 20 M.) The memory model only compares addresses within one operand, so the
/// offsets do not change any result as long as the ranges are disjoint; they are kept so that
/// [`AddressLayout::ifmap_addr`] etc. return SCALE-Sim's exact addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressLayout {
    pub ifmap_offset: u64,
    pub filter_offset: u64,
    pub ofmap_offset: u64,
    shape: ConvShape,
}

impl AddressLayout {
    /// The layout `gemm.py` uses for `layer`.
    pub fn for_layer(layer: &Layer) -> Self {
        // A GEMM is the conv [M x K x 1] * [1 x K x 1] x N, so these are M·K and K·N.
        let shape = ConvShape::new(layer);
        let (ifmap_elems, filt_elems) = (shape.ih * shape.iw * shape.c, shape.win * shape.nf);
        let filter_offset = 10_000_000u64.max(ifmap_elems + 1);
        let ofmap_offset = filter_offset + 10_000_000u64.max(filt_elems + 1);
        AddressLayout { ifmap_offset: 0, filter_offset, ofmap_offset, shape }
    }

    /// SCALE-Sim ifmap operand-matrix entry `[p][w]` (`operand_matrix.py:195`), `None` for `-1`.
    pub fn ifmap_addr(&self, p: u64, w: u64) -> Option<u64> {
        self.shape.ifmap_index(p, w).map(|a| a + self.ifmap_offset)
    }

    /// SCALE-Sim filter operand-matrix entry `[w][f]` (`operand_matrix.py:371`).
    pub fn filter_addr(&self, w: u64, f: u64) -> u64 {
        f * self.shape.win + w + self.filter_offset
    }

    /// SCALE-Sim ofmap operand-matrix entry `[p][f]` (`operand_matrix.py:247`).
    pub fn ofmap_addr(&self, p: u64, f: u64) -> u64 {
        p * self.shape.nf + f + self.ofmap_offset
    }
}

/// The layer in SCALE-Sim's conv terms (a GEMM is converted as in `topology_utils.py:110`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ConvShape {
    ih: u64,
    iw: u64,
    fh: u64,
    fw: u64,
    c: u64,
    nf: u64,
    s: u64,
    ow: u64,
    /// Ofmap pixels per filter, `OH·OW`.
    px: u64,
    /// Window size `FH·FW·C`.
    win: u64,
}

impl ConvShape {
    fn new(layer: &Layer) -> Self {
        let (ih, iw, fh, fw, c, nf, s) = match *layer {
            Layer::Gemm { m, n, k } => (m, k, 1, k, 1, n, 1),
            Layer::Conv { ih, iw, fh, fw, c, nf, stride } => (ih, iw, fh, fw, c, nf, stride),
        };
        assert!(ih > 0 && iw > 0 && c > 0 && nf > 0 && s > 0, "empty layer");
        assert!(fh >= 1 && fh <= ih && fw >= 1 && fw <= iw, "filter larger than ifmap");
        let oh = (ih - fh + s).div_ceil(s);
        let ow = (iw - fw + s).div_ceil(s);
        ConvShape { ih, iw, fh, fw, c, nf, s, ow, px: oh * ow, win: fh * fw * c }
    }

    /// ifmap address without offset; `None` where SCALE-Sim writes `-1`.
    fn ifmap_index(&self, p: u64, w: u64) -> Option<u64> {
        let (orow, ocol) = (p / self.ow, p % self.ow);
        let (i_row, i_col) = (orow * self.s, ocol * self.s);
        let (c_row, k) = (w / (self.fw * self.c), w % (self.fw * self.c));
        let (c_col, ch) = (k / self.c, k % self.c);
        if c_row + i_row < self.ih && c_col + i_col < self.iw {
            Some((c_row * self.iw + c_col) * self.c + ch + (i_row * self.iw + i_col) * self.c)
        } else {
            None
        }
    }
}

/// Precomputed ifmap address tables: `addr(p, w) = base[p] + inner[w]` when in bounds.
struct IfmapTable {
    /// Per ofmap pixel: (input row, input col, window base address).
    pix: Vec<(u32, u32, u32)>,
    /// Per window element: (row in window, col in window, address offset).
    wel: Vec<(u32, u32, u32)>,
    ih: u32,
    iw: u32,
}

impl IfmapTable {
    fn new(sh: &ConvShape) -> Self {
        let pix = (0..sh.px)
            .map(|p| {
                let (ir, ic) = ((p / sh.ow) * sh.s, (p % sh.ow) * sh.s);
                (ir as u32, ic as u32, ((ir * sh.iw + ic) * sh.c) as u32)
            })
            .collect();
        let wel = (0..sh.win)
            .map(|w| {
                let (cr, k) = (w / (sh.fw * sh.c), w % (sh.fw * sh.c));
                let (cc, ch) = (k / sh.c, k % sh.c);
                (cr as u32, cc as u32, ((cr * sh.iw + cc) * sh.c + ch) as u32)
            })
            .collect();
        IfmapTable { pix, wel, ih: sh.ih as u32, iw: sh.iw as u32 }
    }

    #[inline]
    fn get(&self, p: u64, w: u64) -> Option<u32> {
        let (ir, ic, base) = self.pix[p as usize];
        let (cr, cc, off) = self.wel[w as usize];
        (ir + cr < self.ih && ic + cc < self.iw).then_some(base + off)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Operand {
    Ifmap,
    Filter,
    Ofmap,
}

/// Per-fold demand geometry of one operand: which columns of local row `r` carry a request and
/// which operand-matrix element they carry.
#[derive(Clone, Copy)]
enum Pattern {
    /// `skew_matrix` output: column `c < width` at row `r` carries stream element
    /// `x = r − c − q0` when `0 ≤ x < len`.
    Skew { q0: i64, len: i64, width: i64 },
    /// Flipped stationary preload: row `r ∈ [lo, hi)` carries element `x = hi − 1 − r` in all
    /// columns `c < width`.
    Load { lo: i64, hi: i64, width: i64 },
}

impl Pattern {
    /// Valid column interval `[c0, c1)` and the `x` of column `c0` (x decreases by one per column
    /// for `Skew`, is constant for `Load`).
    #[inline]
    fn cols(&self, r: i64) -> (i64, i64, i64) {
        match *self {
            Pattern::Skew { q0, len, width } => {
                let c0 = (r - q0 - len + 1).max(0);
                let c1 = (r - q0 + 1).min(width);
                (c0, c1.max(c0), r - c0 - q0)
            }
            Pattern::Load { lo, hi, width } => {
                if r >= lo && r < hi {
                    (0, width, hi - 1 - r)
                } else {
                    (0, 0, 0)
                }
            }
        }
    }
}

/// The folding of one layer onto the array for one dataflow (`compute/systolic_compute_*.py`).
struct Mapping {
    df: Dataflow,
    r: i64,
    c: i64,
    sh: ConvShape,
    row_fold: i64,
    col_fold: i64,
    /// Demand rows per fold.
    fold_len: i64,
    /// ifmap address table, built by [`Mapping::with_addresses`] (only the walk needs it).
    ift: Option<IfmapTable>,
}

impl Mapping {
    fn new(df: Dataflow, rows: u64, cols: u64, sh: ConvShape) -> Self {
        let (r, c) = (rows as i64, cols as i64);
        let (px, win, nf) = (sh.px as i64, sh.win as i64, sh.nf as i64);
        // Sr, Sc, T per dataflow (systolic_compute_ws.py:102-104, _os.py:85-87, _is.py:86-88).
        let (sr, sc, t) = match df {
            Dataflow::Ws => (win, nf, px),
            Dataflow::Os => (px, nf, win),
            Dataflow::Is => (win, px, nf),
        };
        let fold_len = match df {
            Dataflow::Ws | Dataflow::Is => 2 * r + c + t - 2,
            Dataflow::Os => t + r + c - 2,
        };
        Mapping {
            df,
            r,
            c,
            sh,
            row_fold: (sr + r - 1) / r,
            col_fold: (sc + c - 1) / c,
            fold_len,
            ift: None,
        }
    }

    /// Adds the ifmap address table (O(pixels + window) memory) that address generation needs.
    fn with_addresses(mut self) -> Self {
        self.ift = Some(IfmapTable::new(&self.sh));
        self
    }

    #[inline]
    fn ift(&self) -> &IfmapTable {
        self.ift.as_ref().expect("Mapping::with_addresses not called")
    }

    /// Demand pattern of `op` in fold `(fc, fr)`.
    fn pattern(&self, op: Operand, fc: i64, fr: i64) -> Pattern {
        let (r, c) = (self.r, self.c);
        let (px, win, nf) = (self.sh.px as i64, self.sh.win as i64, self.sh.nf as i64);
        let kv = (win - fr * r).min(r); // valid array rows when rows ← window
        match (self.df, op) {
            // systolic_compute_ws.py:236-325: R-row prefix, T rows, C−1 suffix, skew over R cols.
            (Dataflow::Ws, Operand::Ifmap) => Pattern::Skew { q0: r, len: px, width: kv },
            // systolic_compute_ws.py:339-392: rows of the weight tile, flipped, then suffix.
            (Dataflow::Ws, Operand::Filter) => {
                Pattern::Load { lo: r - kv, hi: r, width: (nf - fc * c).min(c) }
            }
            // systolic_compute_ws.py:428-472: 2R−1 prefix, T rows, skew over C cols.
            (Dataflow::Ws, Operand::Ofmap) => {
                Pattern::Skew { q0: 2 * r - 1, len: px, width: (nf - fc * c).min(c) }
            }
            // systolic_compute_os.py:257-294: transposed ifmap block, C−1 suffix, skew.
            (Dataflow::Os, Operand::Ifmap) => {
                Pattern::Skew { q0: 0, len: win, width: (px - fr * r).min(r) }
            }
            // systolic_compute_os.py:310-344.
            (Dataflow::Os, Operand::Filter) => {
                Pattern::Skew { q0: 0, len: win, width: (nf - fc * c).min(c) }
            }
            // systolic_compute_os.py:360-426: T−1 prefix, R flipped (row-padded) rows, skew. The
            // padding rows come first after the flip, hence q0 shifted by R − (valid rows).
            (Dataflow::Os, Operand::Ofmap) => {
                let mv = (px - fr * r).min(r);
                Pattern::Skew { q0: win - 1 + (r - mv), len: mv, width: (nf - fc * c).min(c) }
            }
            // systolic_compute_is.py:218-258: flipped stationary ifmap tile, then suffix.
            (Dataflow::Is, Operand::Ifmap) => {
                Pattern::Load { lo: r - kv, hi: r, width: (px - fc * c).min(c) }
            }
            // systolic_compute_is.py:283-321: R-row prefix, T rows, C−1 suffix, skew over R cols.
            (Dataflow::Is, Operand::Filter) => Pattern::Skew { q0: r, len: nf, width: kv },
            // systolic_compute_is.py:331-363.
            (Dataflow::Is, Operand::Ofmap) => {
                Pattern::Skew { q0: 2 * r - 1, len: nf, width: (px - fc * c).min(c) }
            }
        }
    }

    /// Appends the (offset-free) addresses requested by `op` at local row `row` of fold
    /// `(fc, fr)`, in column order. `pat` must be `self.pattern(op, fc, fr)`.
    #[inline]
    fn row_addrs(
        &self,
        op: Operand,
        pat: &Pattern,
        fc: i64,
        fr: i64,
        row: i64,
        out: &mut Vec<u32>,
    ) {
        out.clear();
        let (c0, c1, x0) = pat.cols(row);
        if c0 >= c1 {
            return;
        }
        let (r, c, win) = (self.r, self.c, self.sh.win as i64);
        let skew = matches!(pat, Pattern::Skew { .. });
        for col in c0..c1 {
            let x = if skew { x0 - (col - c0) } else { x0 };
            // (p, w) for ifmap, (w, f) for filter.
            let (a, b) = match (self.df, op) {
                (Dataflow::Ws, Operand::Ifmap) => (x, fr * r + col),
                (Dataflow::Ws, Operand::Filter) => (fr * r + x, fc * c + col),
                (Dataflow::Os, Operand::Ifmap) => (fr * r + col, x),
                (Dataflow::Os, Operand::Filter) => (x, fc * c + col),
                (Dataflow::Is, Operand::Ifmap) => (fc * c + col, fr * r + x),
                (Dataflow::Is, Operand::Filter) => (fr * r + col, x),
                (_, Operand::Ofmap) => unreachable!("ofmap addresses are not needed"),
            };
            match op {
                Operand::Ifmap => {
                    if let Some(addr) = self.ift().get(a as u64, b as u64) {
                        out.push(addr);
                    }
                }
                _ => out.push((b * win + a) as u32),
            }
        }
    }

    /// Shape `(rows, cols, anti_diagonal)` of the USER-mode prefetch matrix of `op`.
    fn prefetch_shape(&self, op: Operand) -> (i64, i64, bool) {
        let (px, win, nf) = (self.sh.px as i64, self.sh.win as i64, self.sh.nf as i64);
        match (self.df, op) {
            // systolic_compute_ws.py:128-181 (diagonal rollout), :184-208 (row-major).
            (Dataflow::Ws, Operand::Ifmap) => (self.row_fold * px, self.r, true),
            (Dataflow::Ws, Operand::Filter) => (self.col_fold * win, self.c, false),
            // systolic_compute_os.py:110-168, :174-228 (both rolled out).
            (Dataflow::Os, Operand::Ifmap) => (self.row_fold * win, self.r, true),
            (Dataflow::Os, Operand::Filter) => (self.col_fold * win, self.c, true),
            // systolic_compute_is.py:111-134 (row-major), :139-192 (rolled out).
            (Dataflow::Is, Operand::Ifmap) => (self.col_fold * win, self.c, false),
            (Dataflow::Is, Operand::Filter) => (self.row_fold * nf, self.r, true),
            (_, Operand::Ofmap) => unreachable!(),
        }
    }

    /// Entry `[row][col]` of the prefetch matrix of `op` (offset-free address, `None` for `-1`).
    #[inline]
    fn prefetch_entry(&self, op: Operand, row: i64, col: i64) -> Option<u32> {
        let ift = self.ift();
        let (px, win, nf) = (self.sh.px as i64, self.sh.win as i64, self.sh.nf as i64);
        let filt = |w: i64, f: i64| (f < nf).then(|| (f * win + w) as u32);
        match (self.df, op) {
            (Dataflow::Ws, Operand::Ifmap) => {
                let (fr, t) = (row / px, row % px);
                let w = fr * self.r + col;
                (w < win).then(|| ift.get(t as u64, w as u64)).flatten()
            }
            (Dataflow::Ws, Operand::Filter) | (Dataflow::Os, Operand::Filter) => {
                let (fc, w) = (row / win, row % win);
                filt(w, fc * self.c + col)
            }
            (Dataflow::Os, Operand::Ifmap) => {
                let (fr, w) = (row / win, row % win);
                let p = fr * self.r + col;
                (p < px).then(|| ift.get(p as u64, w as u64)).flatten()
            }
            (Dataflow::Is, Operand::Ifmap) => {
                let (fc, w) = (row / win, row % win);
                let p = fc * self.c + col;
                (p < px).then(|| ift.get(p as u64, w as u64)).flatten()
            }
            (Dataflow::Is, Operand::Filter) => {
                let (fr, f) = (row / nf, row % nf);
                let w = fr * self.r + col;
                if w < win { filt(w, f) } else { None }
            }
            (_, Operand::Ofmap) => unreachable!(),
        }
    }

    /// Calls `sink` for every entry of the prefetch matrix of `op`, in the order the read buffer
    /// sees it (anti-diagonals from the top-left, each walked bottom-up, or row-major).
    fn for_each_prefetch(&self, op: Operand, mut sink: impl FnMut(Option<u32>)) {
        let (rows, cols, diag) = self.prefetch_shape(op);
        if diag {
            for d in 0..rows + cols - 1 {
                let hi = d.min(rows - 1);
                let lo = (d - cols + 1).max(0);
                let mut row = hi;
                while row >= lo {
                    sink(self.prefetch_entry(op, row, d - row));
                    row -= 1;
                }
            }
        } else {
            for row in 0..rows {
                for col in 0..cols {
                    sink(self.prefetch_entry(op, row, col));
                }
            }
        }
    }
}

/// CALC-mode read buffer (`memory/read_buffer_estimate_bw.py`).
struct EstimateBuf {
    items_per_set: u64,
    /// Insertions per window of 50 sets (`u64::MAX` if sets never close).
    epoch_len: u64,
    inserted: u64,
    /// Epoch of each address's last insertion (`u32::MAX` = never).
    last_epoch: Vec<u32>,
    first_request_cycle: Option<i64>,
}

impl EstimateBuf {
    fn new(size_words: u64, n_addr: usize) -> Self {
        let items_per_set = size_words / 100; // line 94
        let epoch_len = if items_per_set == 0 { u64::MAX } else { 50 * items_per_set };
        EstimateBuf {
            items_per_set,
            epoch_len,
            inserted: 0,
            last_epoch: vec![u32::MAX; n_addr],
            first_request_cycle: None,
        }
    }

    fn service_row(&mut self, addrs: &[u32], cycle: i64) -> i64 {
        if self.first_request_cycle.is_none() && !addrs.is_empty() {
            self.first_request_cycle = Some(cycle); // lines 128-131
        }
        for &a in addrs {
            let epoch = (self.inserted / self.epoch_len) as u32;
            let slot = &mut self.last_epoch[a as usize];
            if *slot != epoch {
                *slot = epoch;
                self.inserted += 1;
            }
        }
        1 // always a hit with latency 1 (line 119)
    }

    fn dram_start(&self) -> i64 {
        calc_dram_start(
            self.items_per_set,
            self.epoch_len,
            self.inserted,
            self.first_request_cycle.unwrap_or(0),
        )
    }
}

/// First cycle of a CALC-mode read buffer's DRAM trace (`trace_matrix[0][0]`, line 359), from
/// its set size, epoch length, number of insertions and first request cycle.
fn calc_dram_start(items: u64, epoch_len: u64, inserted: u64, first_request_cycle: i64) -> i64 {
    if inserted >= epoch_len {
        // First (active-half) prefetch triggered during the run, lines 161-171.
        first_request_cycle - (50 * items).div_ceil(10) as i64
    } else {
        // Prefetched by complete_all_prefetches, lines 232-243.
        let sets = if items == 0 { 1 } else { inserted.div_ceil(items) };
        -((sets * items).div_ceil(10) as i64)
    }
}

/// USER-mode read buffer (`memory/read_buffer.py`).
struct UserBuf {
    /// CSR: the sets holding address `a` are `sets[set_ptr[a]..set_ptr[a+1]]`.
    set_ptr: Vec<u32>,
    sets: Vec<u32>,
    num_sets: u32,
    n_active: u32,
    n_prefetch: u32,
    win: (u32, u32),
    bw: u64,
    initial_lines: u64,
    lines_per_prefetch: u64,
    last_prefetch_cycle: i64,
    started: bool,
    num_access: u64,
}

/// Walks `op`'s prefetch matrix in fetch order, cutting its valid entries into sets of
/// `eps`, and calls `f(address, set)` the first time each address appears in each set.
/// Returns the number of valid entries.
fn for_each_address_set(
    map: &Mapping,
    op: Operand,
    eps: u64,
    n_addr: usize,
    mut f: impl FnMut(usize, u32),
) -> u64 {
    let mut last = vec![u32::MAX; n_addr];
    let mut valid = 0u64;
    map.for_each_prefetch(op, |e| {
        if let Some(a) = e {
            let s = (valid / eps) as u32;
            valid += 1;
            if last[a as usize] != s {
                last[a as usize] = s;
                f(a as usize, s);
            }
        }
    });
    valid
}

impl UserBuf {
    fn new(map: &Mapping, op: Operand, n_addr: usize, size: u64, bw: u64) -> Self {
        let active = size.div_ceil(2); // ceil(S·0.5)
        let prefetch = size - active;
        let eps = size.div_ceil(100).max(1); // prepare_hashed_buffer line 178
        // Two passes over the fetch order: count, then fill, the distinct sets of each address.
        let mut count = vec![0u32; n_addr + 1];
        let valid = for_each_address_set(map, op, eps, n_addr, |a, _| count[a + 1] += 1);
        for i in 0..n_addr {
            count[i + 1] += count[i];
        }
        let set_ptr = count.clone();
        let mut fill = count;
        let mut sets = vec![0u32; set_ptr[n_addr] as usize];
        for_each_address_set(map, op, eps, n_addr, |a, s| {
            sets[fill[a] as usize] = s;
            fill[a] += 1;
        });
        let num_sets = (valid / eps + 1) as u32; // lines 203, 207
        let max_active = active.div_ceil(eps) as u32; // line 205
        let max_prefetch = prefetch.div_ceil(eps) as u32; // line 206
        let n_active = num_sets.min(max_active);
        let n_prefetch = (num_sets - n_active).min(max_prefetch);
        let (rows, cols, _) = map.prefetch_shape(op);
        let fetch_lines = ((rows * cols) as u64).div_ceil(bw); // set_fetch_matrix line 153
        UserBuf {
            set_ptr,
            sets,
            num_sets,
            n_active,
            n_prefetch,
            win: (0, n_active),
            bw,
            initial_lines: active.div_ceil(bw).min(fetch_lines), // lines 385-387
            lines_per_prefetch: prefetch.div_ceil(bw),           // line 476
            last_prefetch_cycle: -1,
            started: false,
            num_access: 0,
        }
    }

    #[inline]
    fn hit(&self, a: u32) -> bool {
        let (start, end) = self.win;
        let sets =
            &self.sets[self.set_ptr[a as usize] as usize..self.set_ptr[a as usize + 1] as usize];
        if start < end {
            sets.iter().any(|&s| s >= start && s < end)
        } else {
            sets.iter().any(|&s| s >= start || s < end) // wrapped window, lines 259-267
        }
    }

    fn new_prefetch(&mut self) {
        // lines 464-469
        let start = (self.win.0 + self.n_prefetch) % self.num_sets;
        let end = (start + self.n_active) % self.num_sets;
        self.win = (start, end);
        self.num_access += self.lines_per_prefetch * self.bw; // line 479
        self.last_prefetch_cycle += self.lines_per_prefetch as i64 + 1; // lines 505-517
    }

    fn service_row(&mut self, addrs: &[u32], cycle: i64) -> i64 {
        if !self.started {
            // prefetch_active_buffer (lines 377-448) on the first call.
            self.started = true;
            self.num_access += self.initial_lines * self.bw;
            self.last_prefetch_cycle = cycle - 1;
        }
        let mut offset = 1i64; // hit latency, line 296
        for &a in addrs {
            let mut tries = 0u32;
            while !self.hit(a) {
                assert!(tries <= self.num_sets, "address {a} is not in the fetch matrix");
                tries += 1;
                self.new_prefetch();
                let p = self.last_prefetch_cycle - (cycle + offset);
                offset += p; // line 362
                if p > 0 {
                    offset += p; // line 364: positive waits counted twice
                }
            }
        }
        offset
    }

    fn dram_start(&self) -> i64 {
        -(self.initial_lines as i64)
    }
}

enum ReadBuf {
    Calc(EstimateBuf),
    User(UserBuf),
}

impl ReadBuf {
    fn service_row(&mut self, addrs: &[u32], cycle: i64) -> i64 {
        match self {
            ReadBuf::Calc(b) => b.service_row(addrs, cycle),
            ReadBuf::User(b) => b.service_row(addrs, cycle),
        }
    }
    fn dram_reads(&self) -> u64 {
        match self {
            ReadBuf::Calc(b) => b.inserted,
            ReadBuf::User(b) => b.num_access,
        }
    }
    fn dram_start(&self) -> i64 {
        match self {
            ReadBuf::Calc(b) => b.dram_start(),
            ReadBuf::User(b) => b.dram_start(),
        }
    }
}

/// Ofmap write buffer (`memory/write_buffer.py`), simulated per row in O(events).
struct WriteBuf {
    /// `total_size_elems − drain_buf_size` (= active size), the drain trigger threshold.
    active: i64,
    drain_lines: i64,
    bw: i64,
    free: i64,
    /// Words in the current, not yet stored line.
    line_fill: i64,
    /// Lines stored so far (trace matrix + cache).
    n_lines: i64,
    /// Forced partial lines `(line index, valid words)`, in order, not yet drained.
    partial: VecDeque<(i64, i64)>,
    drain_start: i64,
    drain_end_cycle: i64,
    num_access: u64,
    stop_cycle: Option<i64>,
}

impl WriteBuf {
    fn new(size: u64, bw: u64) -> Self {
        let size = size as i64;
        let active = (size + 1) / 2; // ceil(S·0.5), line 85
        let drain = size - active; // line 86
        let bw = bw as i64;
        WriteBuf {
            active,
            drain_lines: (drain + bw - 1) / bw, // line 243
            bw,
            free: size,
            line_fill: 0,
            n_lines: 0,
            partial: VecDeque::new(),
            drain_start: 0,
            drain_end_cycle: 0,
            num_access: 0,
            stop_cycle: None,
        }
    }

    fn store(&mut self, j: i64) {
        self.free -= j;
        let t = self.line_fill + j;
        self.n_lines += t / self.bw;
        self.line_fill = t % self.bw;
    }

    /// `append_to_trace_mat(force=True)`: a partial line becomes a padded full line.
    fn flush(&mut self) {
        if self.line_fill > 0 {
            self.partial.push_back((self.n_lines, self.line_fill));
            self.n_lines += 1;
            self.line_fill = 0;
        }
    }

    /// `empty_drain_buf`: returns the cycle of the last drained line.
    fn drain(&mut self, start_cycle: i64) -> i64 {
        let end = (self.drain_start + self.drain_lines).min(self.n_lines);
        let k = end - self.drain_start;
        assert!(k > 0, "write buffer drain with no lines");
        let last = end - 1;
        let mut valid_last = self.bw;
        while let Some(&(l, v)) = self.partial.front() {
            if l >= end {
                break;
            }
            if l == last {
                valid_last = v;
            }
            self.partial.pop_front();
        }
        // Only the last line's padding is subtracted (lines 251-256).
        let data = k * self.bw - (self.bw - valid_last);
        self.num_access += data as u64;
        self.free += data;
        self.drain_start = end;
        let end_cycle = start_cycle + k - 1;
        self.stop_cycle = Some(self.stop_cycle.map_or(end_cycle, |s| s.max(end_cycle)));
        end_cycle
    }

    /// `service_writes` for one demand row with `n` valid writes; returns the row's stall.
    fn service_row(&mut self, mut n: i64, cycle: i64) -> i64 {
        let mut offset = 0;
        let mut cur = cycle;
        while n > 0 {
            if cur < self.drain_end_cycle {
                // Stall when the buffer becomes full during a drain (lines 214-217).
                let j = self.free.max(1);
                if j > n {
                    self.store(n);
                    break;
                }
                self.store(j);
                offset += self.drain_end_cycle - cur;
                cur = self.drain_end_cycle;
                n -= j;
            } else {
                // Start a drain once the active half is exceeded (lines 219-221).
                let j = (self.free - self.active + 1).max(1);
                if j > n {
                    self.store(n);
                    break;
                }
                self.store(j);
                self.flush();
                self.drain_end_cycle = self.drain(cur);
                n -= j;
            }
        }
        offset
    }

    /// `empty_all_buffers` (lines 276-287).
    fn empty_all(&mut self, mut cycle: i64) {
        self.flush();
        while self.drain_start < self.n_lines {
            self.drain_end_cycle = self.drain(cycle);
            cycle = self.drain_end_cycle + 1;
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Closed forms (the default path of `simulate_memory`)
// ------------------------------------------------------------------------------------------------

impl ConvShape {
    fn oh(&self) -> u64 {
        self.px / self.ow
    }

    /// Valid (not `-1`) entries of the ifmap operand matrix `[P × W]`. Validity separates into
    /// rows and columns, so this is (valid (ofmap row, filter row) pairs) · (valid (ofmap col,
    /// filter col) pairs) · C.
    fn ifmap_valid(&self) -> u64 {
        valid_pairs(self.oh(), self.fh, self.s, self.ih)
            * valid_pairs(self.ow, self.fw, self.s, self.iw)
            * self.c
    }

    /// Distinct ifmap addresses ever requested: the input pixels some window covers.
    fn ifmap_distinct(&self) -> u64 {
        covered(self.oh(), self.fh, self.s, self.ih)
            * covered(self.ow, self.fw, self.s, self.iw)
            * self.c
    }

    /// Whether each ifmap address occurs at most once in the operand matrix (windows do not
    /// overlap). Always true for a GEMM (`FH = S = 1`, one window column).
    fn ifmap_injective(&self) -> bool {
        (self.fh <= self.s || self.oh() == 1) && (self.fw <= self.s || self.ow == 1)
    }
}

/// `Σ_{t<o} min(f, i − t·s)⁺`: valid (output position, filter offset) pairs along one axis of
/// length `i` with `o = ⌈(i−f+s)/s⌉` outputs. Every output but possibly the last sees a full
/// window.
fn valid_pairs(o: u64, f: u64, s: u64, i: u64) -> u64 {
    let full = ((i - f) / s + 1).min(o);
    full * f + (full..o).map(|t| i.saturating_sub(t * s).min(f)).sum::<u64>()
}

/// Input positions along one axis that some window covers.
fn covered(o: u64, f: u64, s: u64, i: u64) -> u64 {
    if f >= s {
        ((o - 1) * s + f).min(i) // the windows touch or overlap: one interval
    } else {
        valid_pairs(o, f, s, i) // disjoint windows
    }
}

/// Number of requests in local rows `[0, x)` of a `Skew` pattern:
/// `Σ_{c<width} clamp(x − c − q0, 0, len) = G(x−q0) − G(x−q0−width)` with `G` the prefix sum of
/// `clamp(·, 0, len)`.
fn skew_prefix(q0: i64, len: i64, width: i64, x: i64) -> i64 {
    let g = |y: i64| {
        if y <= 0 {
            0
        } else if y <= len {
            y * (y + 1) / 2
        } else {
            len * (len + 1) / 2 + (y - len) * len
        }
    };
    g(x - q0) - g(x - q0 - width)
}

impl Pattern {
    /// The first local row with a request (every pattern's first row holds element 0 in
    /// column 0, or the last stationary row, whose ifmap/filter entries are always valid).
    fn first_row(&self) -> i64 {
        match *self {
            Pattern::Skew { q0, .. } => q0,
            Pattern::Load { lo, .. } => lo,
        }
    }
}

/// Insertions of a CALC-mode read buffer (`read_buffer_estimate_bw.py`) whose request stream is a
/// sequence of blocks `(w, passes)`: `w` fresh addresses, requested `passes` times, each exactly
/// once per pass and in the same order in every pass.
///
/// An address hits iff its last insertion index `j` lies in the current epoch, i.e.
/// `j ≥ E·⌊inserted/E⌋`. The block's addresses are tracked as runs (in pass order) of consecutive
/// insertion indices; in a pass a run's elements below the current epoch start miss (and become a
/// new run at the end of the insertions), and once one element hits, the rest of the run hits.
/// So a pass costs O(runs), and a handful of runs suffice: for `w ≥ E` every request misses
/// (between two requests of one address lie `w − 1` misses), giving `passes·w`; for `w < E` the
/// stream settles into all hits after at most two passes. Exact for any `E` (`u64::MAX` when
/// sets never close).
fn epoch_insertions(blocks: impl IntoIterator<Item = (u64, u64)>, epoch_len: u64) -> u64 {
    fn push(runs: &mut Vec<(u64, u64)>, len: u64, start: u64) {
        match runs.last_mut() {
            Some(last) if last.1 + last.0 == start => last.0 += len,
            _ => runs.push((len, start)),
        }
    }
    let e = epoch_len;
    let mut ins = 0u64;
    for (w, passes) in blocks {
        if w == 0 || passes == 0 {
            continue;
        }
        // First pass: all fresh.
        let mut runs = vec![(w, ins)];
        ins += w;
        let mut pass = 1;
        while pass < passes {
            let before = ins;
            let mut next = Vec::with_capacity(runs.len() + 2);
            for &(len, start) in &runs {
                let mut i = 0;
                while i < len {
                    let epoch_start = ins / e * e;
                    if start + i >= epoch_start {
                        push(&mut next, len - i, start + i); // the rest of the run hits
                        break;
                    }
                    let k = (len - i).min(epoch_start - (start + i));
                    push(&mut next, k, ins);
                    ins += k;
                    i += k;
                }
            }
            runs = next;
            pass += 1;
            if ins == before {
                break; // all hits: nothing changed, so every later pass hits too
            }
            if ins - before == w && w >= e {
                ins += (passes - pass) * w; // all misses, and they keep missing
                break;
            }
        }
    }
    ins
}

impl Mapping {
    /// The CALC-mode insertion count (= DRAM reads) of `op` in closed form, or `None` when
    /// only the walk gives it (a conv whose windows overlap, so addresses repeat within a pass,
    /// and whose distinct addresses do not fit in one epoch).
    ///
    /// Request streams (the fold loop is `for fc: for fr:`), with `V` the valid ifmap entries
    /// and `F = W·NF` the filter words:
    /// * WS ifmap, OS ifmap: all of the ifmap once per column fold, same order: `(V, col_fold)`;
    /// * IS ifmap, WS filter: stationary, each word once: `(V, 1)`, `(F, 1)`;
    /// * IS filter: all of the filter once per column fold: `(F, col_fold)`;
    /// * OS filter: column block `fc` (`W·min(C, NF − fc·C)` words) once per row fold.
    fn calc_insertions(&self, op: Operand, epoch_len: u64) -> Option<u64> {
        let sh = &self.sh;
        let (row_fold, col_fold) = (self.row_fold as u64, self.col_fold as u64);
        let filter = sh.win * sh.nf;
        Some(match (op, self.df) {
            (Operand::Ifmap, _) if !sh.ifmap_injective() => {
                // Every address is requested before an epoch could close: compulsory reads.
                let distinct = sh.ifmap_distinct();
                return (distinct < epoch_len).then_some(distinct);
            }
            (Operand::Ifmap, Dataflow::Ws | Dataflow::Os) => {
                epoch_insertions([(sh.ifmap_valid(), col_fold)], epoch_len)
            }
            (Operand::Ifmap, Dataflow::Is) => sh.ifmap_valid(),
            (Operand::Filter, Dataflow::Ws) => filter,
            (Operand::Filter, Dataflow::Is) => epoch_insertions([(filter, col_fold)], epoch_len),
            (Operand::Filter, Dataflow::Os) => {
                let c = self.c as u64;
                epoch_insertions(
                    (0..col_fold).map(|fc| (sh.win * (sh.nf - fc * c).min(c), row_fold)),
                    epoch_len,
                )
            }
            (Operand::Ofmap, _) => unreachable!("the ofmap is written, not read"),
        })
    }

    /// Valid entries of `op`'s USER-mode prefetch matrix: each valid operand entry once.
    fn prefetch_valid(&self, op: Operand) -> u64 {
        match op {
            Operand::Ifmap => self.sh.ifmap_valid(),
            _ => self.sh.win * self.sh.nf,
        }
    }

    /// Valid requests of each operand over the whole run (the §5 table of
    /// `shared/design/systolic-model.md`, with `V` valid ifmap entries in place of `M·K`).
    fn requests(&self) -> [u64; 3] {
        let sh = &self.sh;
        let (rf, cf) = (self.row_fold as u64, self.col_fold as u64);
        let (v, filter, ofmap) = (sh.ifmap_valid(), sh.win * sh.nf, sh.px * sh.nf);
        match self.df {
            Dataflow::Ws => [v * cf, filter, ofmap * rf],
            Dataflow::Is => [v, filter * cf, ofmap * rf],
            Dataflow::Os => [v * cf, filter * rf, ofmap],
        }
    }
}

/// One read buffer's results in closed form: DRAM words read and the DRAM trace's start cycle.
/// Reads never stall on this path.
#[derive(Clone, Copy)]
struct ClosedReads {
    dram_reads: u64,
    dram_start: i64,
}

/// The ifmap and filter read buffers in closed form, or `None` where the walk is needed.
///
/// * CALC: reads always hit with latency 1, so they never stall and do not interact with the
///   write buffer; the DRAM reads are `Mapping::calc_insertions`. The DRAM start cycle needs
///   the first request's cycle, which is its stall-free row (the first ofmap write, the only
///   possible source of a stall, comes no earlier than the first ifmap/filter request).
/// * USER: only when an operand's whole prefetch matrix fits in the active window
///   (`⌊valid/eps⌋ + 1 ≤ ⌈A/eps⌉` sets): then every request hits with latency 1 (no stall), the
///   only DRAM reads are the initial prefetch of `min(⌈A/bw⌉, fetch lines)` lines, and the trace
///   starts at minus that many cycles. Otherwise a miss triggers `new_prefetch` and its stall
///   quirks, which depend on the exact timing: walked.
fn closed_reads(map: &Mapping, cfg: &MemConfig) -> Option<[ClosedReads; 2]> {
    let one = |op: Operand, kb: u64| -> Option<ClosedReads> {
        let size = kb * 1024;
        match cfg.bandwidth {
            None => {
                let items = size / 100;
                let epoch_len = if items == 0 { u64::MAX } else { 50 * items };
                let inserted = map.calc_insertions(op, epoch_len)?;
                let first = map.pattern(op, 0, 0).first_row();
                Some(ClosedReads {
                    dram_reads: inserted,
                    dram_start: calc_dram_start(items, epoch_len, inserted, first),
                })
            }
            Some(bw) => {
                let active = size.div_ceil(2);
                let eps = size.div_ceil(100).max(1);
                if map.prefetch_valid(op) / eps + 1 > active.div_ceil(eps) {
                    return None;
                }
                let (rows, cols, _) = map.prefetch_shape(op);
                let lines = active.div_ceil(bw).min(((rows * cols) as u64).div_ceil(bw));
                Some(ClosedReads { dram_reads: lines * bw, dram_start: -(lines as i64) })
            }
        }
    };
    Some([one(Operand::Ifmap, cfg.ifmap_kb)?, one(Operand::Filter, cfg.filter_kb)?])
}

/// Smallest `x` in `[lo, hi)` with `pred(x)` (`pred` monotone false → true), else `hi`.
fn first_true(mut lo: i64, mut hi: i64, pred: impl Fn(i64) -> bool) -> i64 {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// The ofmap write buffer over all folds, given that reads never stall, in O(folds + events ·
/// log rows) instead of O(rows): returns `(stall cycles, max ofmap service cycle, last row's
/// ofmap service cycle)`.
///
/// A row with `n` writes does nothing but store them unless (`service_writes`) it is presented
/// before the running drain ends and `free − n < 1` (it would fill the buffer: stall), or after
/// it and `free − n < A` (a drain starts). Word counts alone decide these events, and the
/// number of writes in local rows `[0, x)` of a fold is `skew_prefix`, so the first event row
/// of a stretch of rows is found by binary search; the rows before it are stored in one step
/// (`store` is additive) and the event row itself goes through the exact per-row code.
fn write_side(map: &Mapping, wbuf: &mut WriteBuf) -> (i64, i64, i64) {
    let (mut stall, mut max_out, mut last_out) = (0i64, i64::MIN, 0i64);
    let l = map.fold_len;
    let mut base = 0i64; // global index of the fold's first row
    for fc in 0..map.col_fold {
        for fr in 0..map.row_fold {
            let Pattern::Skew { q0, len, width } = map.pattern(Operand::Ofmap, fc, fr) else {
                unreachable!("ofmap demand is always skewed")
            };
            let pre = |x: i64| skew_prefix(q0, len, width, x);
            let mut r = 0;
            while r < l {
                let cycle = base + r + stall; // cycle of row r
                // Rows [r, during) are presented while the running drain lasts.
                let during = (r + (wbuf.drain_end_cycle - cycle).max(0)).min(l);
                let (end, floor) = if during > r { (during, 1) } else { (l, wbuf.active) };
                let budget = (wbuf.free - floor).max(0);
                let p0 = pre(r);
                let event = first_true(r, end, |x| pre(x + 1) - p0 > budget);
                wbuf.store(pre(event) - p0);
                if event > r {
                    let out = cycle + (event - 1 - r);
                    max_out = max_out.max(out);
                    last_out = out;
                }
                if event < end {
                    let at = cycle + (event - r);
                    let off = wbuf.service_row(pre(event + 1) - pre(event), at);
                    stall += off;
                    max_out = max_out.max(at + off);
                    last_out = at + off;
                    r = event + 1;
                } else {
                    r = end;
                }
            }
            base += l;
        }
    }
    (stall, max_out, last_out)
}

/// Whether [`simulate_memory`] has to walk the requests for this layer and configuration
/// (see `closed_reads`): USER mode with an operand larger than its active prefetch window,
/// or CALC mode with a conv whose windows overlap and whose ifmap does not fit in one epoch.
pub fn uses_walk(layer: &Layer, cfg: &MemConfig) -> bool {
    let map = Mapping::new(cfg.dataflow, cfg.rows, cfg.cols, ConvShape::new(layer));
    closed_reads(&map, cfg).is_none()
}

/// Runs SCALE-Sim 3.0.0's memory simulation for `layer` on the array and memories of `cfg` and
/// returns its stall cycles, total cycles, DRAM traffic, "total cycles incl. prefetch" and the
/// requests served: exactly what [`simulate_memory_walk`] returns.
///
/// Closed forms are used wherever they are exact (`closed_reads`):
/// * SRAM requests per operand: always (valid entries times the passes over them);
/// * ifmap/filter DRAM reads and DRAM start cycles: always in CALC mode except for an
///   overlapping-window conv whose ifmap exceeds one epoch (`50·⌊S/100⌋` words); in USER mode
///   when the operand fits in the active half of its SRAM;
/// * then reads never stall, and the ofmap write buffer (DRAM writes, stalls, total cycles and
///   the DRAM stop cycle) is advanced from event to event (`write_side`), exact in both modes.
///
/// Otherwise (USER-mode misses) it falls back to [`simulate_memory_walk`].
///
/// Cost on the closed path: O(folds + write-buffer events · log rows) time, O(1) memory.
///
/// Panics on input that [`validate`] rejects.
pub fn simulate_memory(layer: &Layer, cfg: &MemConfig) -> MemStats {
    assert!(cfg.rows > 0 && cfg.cols > 0, "empty array");
    let map = Mapping::new(cfg.dataflow, cfg.rows, cfg.cols, ConvShape::new(layer));
    let Some([ifmap, filter]) = closed_reads(&map, cfg) else {
        return simulate_memory_walk(layer, cfg);
    };
    let ofmap_bw = cfg.bandwidth.unwrap_or(cfg.cols); // single_layer_sim.py:263 in CALC mode
    let mut wbuf = WriteBuf::new(cfg.ofmap_kb * 1024, ofmap_bw);
    let (stall, max_out, last_out) = write_side(&map, &mut wbuf);
    wbuf.empty_all(last_out); // double_buffered_scratchpad_mem.py:288
    let start = ifmap.dram_start.min(filter.dram_start);
    let [ifmap_req, filter_req, ofmap_req] = map.requests();
    MemStats {
        stall_cycles: stall as u64,
        total_cycles: max_out.max(0) as u64,
        dram_ifmap_reads: ifmap.dram_reads,
        dram_filter_reads: filter.dram_reads,
        dram_ofmap_writes: wbuf.num_access,
        total_cycles_incl_prefetch: wbuf.stop_cycle.map(|stop| (stop - start) as u64),
        sram_ifmap_requests: ifmap_req,
        sram_filter_requests: filter_req,
        sram_ofmap_requests: ofmap_req,
    }
}

/// Checks that `layer` and `cfg` are inside what SCALE-Sim (and this model) accepts:
/// a non-empty array and layer, a filter no larger than the ifmap, SRAMs of at least 1 kB
/// (SCALE-Sim splits each into 100 sets), a non-zero USER bandwidth, and, where the requests
/// must be walked ([`uses_walk`]), operands of at most 2²⁸ words.
pub fn validate(layer: &Layer, cfg: &MemConfig) -> Result<(), crate::TpuError> {
    if cfg.rows == 0 || cfg.cols == 0 {
        return Err("the array must have at least one row and one column".into());
    }
    match *layer {
        Layer::Gemm { m, n, k } if m == 0 || n == 0 || k == 0 => {
            return Err("GEMM dimensions must be at least 1".into());
        }
        Layer::Conv { ih, iw, fh, fw, c, nf, stride } => {
            if [ih, iw, fh, fw, c, nf, stride].contains(&0) {
                return Err("conv fields must be at least 1".into());
            }
            if fh > ih || fw > iw {
                return Err(crate::TpuError::from(format!(
                    "conv filter {fh}x{fw} is larger than the ifmap {ih}x{iw}"
                )));
            }
        }
        _ => {}
    }
    if [cfg.ifmap_kb, cfg.filter_kb, cfg.ofmap_kb].contains(&0) {
        return Err("SCALE-Sim SRAM sizes must be at least 1 kB".into());
    }
    if cfg.bandwidth == Some(0) {
        return Err("the DRAM bandwidth must be at least 1 word per cycle".into());
    }
    let sh = ConvShape::new(layer);
    // The walk keeps a few bytes per operand word (which words are resident); the closed forms
    // keep nothing per word.
    const MAX_WORDS: u64 = 1 << 28;
    let words = (sh.ih * sh.iw * sh.c).max(sh.win * sh.nf);
    if words > MAX_WORDS && uses_walk(layer, cfg) {
        return Err(crate::TpuError::from(format!(
            "an operand has {words} words; SCALE-Sim's memory model walks this configuration request by request and tracks at most {MAX_WORDS} words (about 1 GB of state); use the tpu model for this size"
        )));
    }
    Ok(())
}

/// SCALE-Sim 3.0.0's memory simulation by walking every demand row and every request, as
/// SCALE-Sim does: the reference that [`simulate_memory`] reproduces, and its fallback where no
/// closed form is exact.
///
/// Cost: O(SRAM read requests) time for the ifmap/filter streams (each request is an O(1) table
/// lookup; rows are generated lazily), O(rows) for the write buffer, plus, in USER mode, one pass
/// over each prefetch matrix. Memory: O(ifmap + filter words).
///
/// Panics on input that [`validate`] rejects.
pub fn simulate_memory_walk(layer: &Layer, cfg: &MemConfig) -> MemStats {
    assert!(cfg.rows > 0 && cfg.cols > 0, "empty array");
    let sh = ConvShape::new(layer);
    let map = Mapping::new(cfg.dataflow, cfg.rows, cfg.cols, sh).with_addresses();
    let n_ifmap = (sh.ih * sh.iw * sh.c) as usize;
    let n_filter = (sh.win * sh.nf) as usize;
    assert!(n_ifmap < u32::MAX as usize && n_filter < u32::MAX as usize, "layer too large");
    let words = |kb: u64| kb * 1024;

    let (mut ibuf, mut fbuf, ofmap_bw) = match cfg.bandwidth {
        None => (
            ReadBuf::Calc(EstimateBuf::new(words(cfg.ifmap_kb), n_ifmap)),
            ReadBuf::Calc(EstimateBuf::new(words(cfg.filter_kb), n_filter)),
            cfg.cols, // single_layer_sim.py:263
        ),
        Some(bw) => {
            assert!(bw > 0, "zero bandwidth");
            (
                ReadBuf::User(UserBuf::new(&map, Operand::Ifmap, n_ifmap, words(cfg.ifmap_kb), bw)),
                ReadBuf::User(UserBuf::new(
                    &map,
                    Operand::Filter,
                    n_filter,
                    words(cfg.filter_kb),
                    bw,
                )),
                bw,
            )
        }
    };
    let mut wbuf = WriteBuf::new(words(cfg.ofmap_kb), ofmap_bw);

    let mut stall: i64 = 0;
    let mut row_idx: i64 = 0;
    let mut max_out = i64::MIN;
    let mut last_out = 0;
    let mut requests = [0u64; 3];
    let mut iaddrs = Vec::with_capacity(cfg.rows.max(cfg.cols) as usize);
    let mut faddrs = Vec::with_capacity(cfg.rows.max(cfg.cols) as usize);
    for fc in 0..map.col_fold {
        for fr in 0..map.row_fold {
            let ip = map.pattern(Operand::Ifmap, fc, fr);
            let fp = map.pattern(Operand::Filter, fc, fr);
            let op = map.pattern(Operand::Ofmap, fc, fr);
            for r in 0..map.fold_len {
                let cycle = row_idx + stall; // double_buffered_scratchpad_mem.py:256
                map.row_addrs(Operand::Ifmap, &ip, fc, fr, r, &mut iaddrs);
                let i_off = ibuf.service_row(&iaddrs, cycle);
                map.row_addrs(Operand::Filter, &fp, fc, fr, r, &mut faddrs);
                let f_off = fbuf.service_row(&faddrs, cycle);
                let (c0, c1, _) = op.cols(r);
                let o_off = wbuf.service_row(c1 - c0, cycle);
                requests[0] += iaddrs.len() as u64;
                requests[1] += faddrs.len() as u64;
                requests[2] += (c1 - c0) as u64;
                let out = cycle + o_off;
                max_out = max_out.max(out);
                last_out = out;
                // lines 263, 270, 277, 279
                stall += (i_off - 1).max(f_off - 1).max(o_off);
                row_idx += 1;
            }
        }
    }
    wbuf.empty_all(last_out); // line 288

    let start = ibuf.dram_start().min(fbuf.dram_start());
    MemStats {
        stall_cycles: stall as u64,
        total_cycles: max_out.max(0) as u64,
        dram_ifmap_reads: ibuf.dram_reads(),
        dram_filter_reads: fbuf.dram_reads(),
        dram_ofmap_writes: wbuf.num_access,
        total_cycles_incl_prefetch: wbuf.stop_cycle.map(|stop| (stop - start) as u64),
        sram_ifmap_requests: requests[0],
        sram_filter_requests: requests[1],
        sram_ofmap_requests: requests[2],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calc(m: u64, n: u64, k: u64, df: Dataflow) -> MemStats {
        let cfg = MemConfig {
            rows: 128,
            cols: 128,
            dataflow: df,
            ifmap_kb: 1024,
            filter_kb: 1024,
            ofmap_kb: 1024,
            bandwidth: None,
        };
        simulate_memory(&Layer::Gemm { m, n, k }, &cfg)
    }

    #[test]
    fn tiny_ws_matches_scalesim() {
        // reference.csv row tiny_1x1x1 (WS): 382 cycles, incl. prefetch 1431, 1/1/1 DRAM words.
        let s = calc(1, 1, 1, Dataflow::Ws);
        assert_eq!(s.total_cycles, 382);
        assert_eq!(s.stall_cycles, 0);
        assert_eq!((s.dram_ifmap_reads, s.dram_filter_reads, s.dram_ofmap_writes), (1, 1, 1));
        assert_eq!(s.total_cycles_incl_prefetch, Some(1431));
    }

    #[test]
    fn address_layout_follows_gemm_py() {
        let l = AddressLayout::for_layer(&Layer::Gemm { m: 4, n: 3, k: 5 });
        assert_eq!((l.filter_offset, l.ofmap_offset), (10_000_000, 20_000_000));
        assert_eq!(l.ifmap_addr(2, 3), Some(13));
        assert_eq!(l.filter_addr(4, 2), 10_000_000 + 2 * 5 + 4);
        assert_eq!(l.ofmap_addr(1, 2), 20_000_000 + 5);
    }

    /// A small deterministic generator (64-bit LCG), so the sweeps need no dependency.
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    const DATAFLOWS: [Dataflow; 3] = [Dataflow::Ws, Dataflow::Os, Dataflow::Is];

    /// Memory configurations `([ifmap, filter, ofmap] kB, bandwidth)`: 1–3 kB SRAMs make
    /// epochs of 500–1500 words (re-fetches) and drains of 512 words; USER mode at 1–4
    /// words/cycle with a 1 kB ofmap SRAM makes the write buffer stall; the large SRAMs give
    /// compulsory traffic only.
    const MEMS: [([u64; 3], Option<u64>); 12] = [
        ([1, 1, 1], None),
        ([2, 3, 1], None),
        ([3, 1, 2], None),
        ([8, 8, 8], None),
        ([1024, 1024, 1024], None),
        ([8, 8, 1], Some(1)),
        ([64, 64, 2], Some(4)),
        ([16, 16, 1], Some(3)),
        ([1, 1, 1], Some(16)),
        ([2, 2, 1024], Some(8)),
        ([64, 64, 1], Some(1)),
        ([32, 32, 1], Some(2)),
    ];

    fn mem_cfg(rows: u64, cols: u64, df: Dataflow, (kb, bw): ([u64; 3], Option<u64>)) -> MemConfig {
        MemConfig {
            rows,
            cols,
            dataflow: df,
            ifmap_kb: kb[0],
            filter_kb: kb[1],
            ofmap_kb: kb[2],
            bandwidth: bw,
        }
    }

    /// What a sweep exercised on the closed-form path.
    #[derive(Default, Debug)]
    struct Tally {
        cases: u64,
        closed: u64,
        closed_user: u64,
        closed_stalls: u64,
        closed_refetch: u64,
    }

    impl Tally {
        /// Asserts that the closed-form path equals the walk on `layer` under `cfg`.
        fn check(&mut self, layer: &Layer, cfg: &MemConfig) {
            let walk = simulate_memory_walk(layer, cfg);
            let fast = simulate_memory(layer, cfg);
            assert_eq!(fast, walk, "closed forms differ from the walk on {layer:?} {cfg:?}");
            self.cases += 1;
            if !uses_walk(layer, cfg) {
                let sh = ConvShape::new(layer);
                self.closed += 1;
                self.closed_user += cfg.bandwidth.is_some() as u64;
                self.closed_stalls += (walk.stall_cycles > 0) as u64;
                self.closed_refetch += (walk.dram_ifmap_reads > sh.ifmap_distinct()
                    || walk.dram_filter_reads > sh.win * sh.nf)
                    as u64;
            }
        }
    }

    #[test]
    fn closed_forms_equal_the_walk_on_a_gemm_grid() {
        // Edge sizes around the array sizes: 1, below, at and above a multiple, several folds.
        const DIMS: [u64; 6] = [1, 2, 7, 8, 9, 33];
        const ARRAYS: [(u64, u64); 4] = [(4, 4), (8, 8), (8, 3), (2, 16)];
        let mut t = Tally::default();
        let mut i = 0;
        for &(rows, cols) in &ARRAYS {
            for df in DATAFLOWS {
                for &m in &DIMS {
                    for &n in &DIMS {
                        for &k in &DIMS {
                            for j in [i, i + 3] {
                                t.check(
                                    &Layer::Gemm { m, n, k },
                                    &mem_cfg(rows, cols, df, MEMS[j % MEMS.len()]),
                                );
                            }
                            i += 1;
                        }
                    }
                }
            }
        }
        println!("{t:?}");
        assert_eq!(t.cases, 2 * 4 * 3 * 216);
        assert!(t.closed * 10 >= t.cases * 8, "{t:?}");
        assert!(t.closed_user > 0 && t.closed_stalls > 0 && t.closed_refetch > 0, "{t:?}");
    }

    #[test]
    fn closed_forms_equal_the_walk_on_random_gemms() {
        let mut rng = Lcg(0x5ca1e);
        let mut t = Tally::default();
        for _ in 0..1500 {
            let (rows, cols) = (1 + rng.below(16), 1 + rng.below(16));
            let dim = |rng: &mut Lcg| {
                if rng.below(4) == 0 { 1 + rng.below(3) } else { 1 + rng.below(120) }
            };
            let (m, n, k) = (dim(&mut rng), dim(&mut rng), dim(&mut rng));
            let df = DATAFLOWS[rng.below(3) as usize];
            let mem = MEMS[rng.below(MEMS.len() as u64) as usize];
            t.check(&Layer::Gemm { m, n, k }, &mem_cfg(rows, cols, df, mem));
        }
        println!("{t:?}");
        assert!(t.closed * 10 >= t.cases * 7, "{t:?}");
        assert!(t.closed_user > 0 && t.closed_stalls > 0 && t.closed_refetch > 0, "{t:?}");
    }

    #[test]
    fn closed_forms_equal_the_walk_on_convs() {
        // (ih, iw, fh, fw, c, nf, stride): overlapping windows, stride = filter, stride > filter,
        // windows leaving the image (OH rounds up), 1x1 filters, full-image filters.
        const CONVS: [[u64; 7]; 9] = [
            [9, 9, 3, 3, 2, 5, 1],
            [10, 7, 3, 2, 3, 4, 2],
            [8, 8, 2, 2, 3, 6, 2],
            [11, 11, 2, 3, 1, 7, 4],
            [12, 5, 1, 1, 4, 9, 1],
            [6, 6, 6, 6, 2, 3, 1],
            [23, 23, 7, 7, 3, 8, 2],
            [5, 17, 5, 4, 2, 3, 3],
            [16, 16, 3, 3, 8, 16, 1],
        ];
        let mut t = Tally::default();
        for (i, &[ih, iw, fh, fw, c, nf, stride]) in CONVS.iter().enumerate() {
            let layer = Layer::Conv { ih, iw, fh, fw, c, nf, stride };
            for (j, &(rows, cols)) in [(4, 4), (8, 3), (16, 16)].iter().enumerate() {
                for df in DATAFLOWS {
                    for mem in MEMS.iter().skip((i + j) % 2).step_by(2) {
                        t.check(&layer, &mem_cfg(rows, cols, df, *mem));
                    }
                }
            }
        }
        println!("{t:?}");
        assert!(t.closed > 0 && t.closed < t.cases, "{t:?}");
    }

    #[test]
    fn closed_forms_equal_the_walk_on_reference_shapes() {
        // A few reference.csv shapes on the 128x128 array, with memories small enough to re-fetch
        // and stall.
        for (m, n, k) in [(256, 128, 512), (130, 257, 300), (64, 600, 64), (8, 8, 8)] {
            for df in DATAFLOWS {
                for mem in [
                    ([1024; 3], None),
                    ([64, 64, 64], None),
                    ([256, 256, 256], Some(16)),
                    ([4, 4, 4], Some(64)),
                ] {
                    Tally::default().check(&Layer::Gemm { m, n, k }, &mem_cfg(128, 128, df, mem));
                }
            }
        }
    }

    /// The CALC read buffer's rule, request by request (the walk's `EstimateBuf`).
    fn brute_insertions(blocks: &[(u64, u64)], epoch_len: u64) -> u64 {
        let mut buf = EstimateBuf {
            items_per_set: 0,
            epoch_len,
            inserted: 0,
            last_epoch: vec![u32::MAX; 4096],
            first_request_cycle: None,
        };
        let mut base = 0u32;
        for &(w, passes) in blocks {
            let addrs: Vec<u32> = (base..base + w as u32).collect();
            for _ in 0..passes {
                buf.service_row(&addrs, 0);
            }
            base += w as u32;
        }
        buf.inserted
    }

    #[test]
    fn epoch_insertions_follow_the_estimate_buffer() {
        let mut rng = Lcg(7);
        for _ in 0..3000 {
            let blocks: Vec<(u64, u64)> =
                (0..1 + rng.below(4)).map(|_| (1 + rng.below(300), 1 + rng.below(8))).collect();
            let e = if rng.below(10) == 0 { u64::MAX } else { 1 + rng.below(400) };
            assert_eq!(
                epoch_insertions(blocks.iter().copied(), e),
                brute_insertions(&blocks, e),
                "{blocks:?} E={e}"
            );
        }
    }

    #[test]
    fn axis_counts_and_skew_prefix_follow_their_definitions() {
        for i in 1..30u64 {
            for f in 1..=i {
                for s in 1..8u64 {
                    let o = (i - f + s).div_ceil(s);
                    let pairs: u64 =
                        (0..o).map(|t| (0..f).filter(|d| t * s + d < i).count() as u64).sum();
                    let mut hit = vec![false; i as usize];
                    (0..o).for_each(|t| {
                        (0..f)
                            .filter(|d| t * s + d < i)
                            .for_each(|d| hit[(t * s + d) as usize] = true)
                    });
                    assert_eq!(valid_pairs(o, f, s, i), pairs, "i={i} f={f} s={s}");
                    assert_eq!(
                        covered(o, f, s, i),
                        hit.iter().filter(|&&h| h).count() as u64,
                        "i={i} f={f} s={s}"
                    );
                }
            }
        }
        for (q0, len, width) in [(0, 5, 3), (4, 1, 7), (7, 9, 9), (2, 3, 1)] {
            let p = Pattern::Skew { q0, len, width };
            let mut sum = 0;
            for x in 0..40 {
                assert_eq!(skew_prefix(q0, len, width, x), sum, "{q0} {len} {width} {x}");
                let (c0, c1, _) = p.cols(x);
                sum += c1 - c0;
            }
        }
    }

    #[test]
    fn large_operands_need_no_per_word_state_on_the_closed_path() {
        // 2^30 ifmap words: beyond what the walk tracks, fine for the closed forms in CALC mode.
        let layer = Layer::Gemm { m: 1 << 15, n: 128, k: 1 << 15 };
        let calc = mem_cfg(128, 128, Dataflow::Ws, ([1024; 3], None));
        assert!(validate(&layer, &calc).is_ok());
        let s = simulate_memory(&layer, &calc);
        assert_eq!(s.dram_ifmap_reads, 1 << 30);
        assert_eq!(s.total_cycles, (1 << 8) * ((1 << 15) + 382) - 1);
        let user = mem_cfg(128, 128, Dataflow::Ws, ([64; 3], Some(16)));
        assert!(validate(&layer, &user).unwrap_err().to_string().contains("walks"));
    }
}
