//! The tile-level IR the array simulator consumes: one GEMM broken into *folds* (one
//! stationary tile, or one output tile for output-stationary, and the rows streamed
//! through it), each with its DMA transfers, accumulate/drain and weight loads.
//!
//! Lowering a GEMM ([`TileProgram::gemm`]) fixes the tiling and the loop order; the
//! simulators ([`super::timeline`], [`super::pe_array`]) only execute it. Later lowering of
//! whole HLO programs produces the same IR, one program per dot/convolution.
//!
//! The printed form (`Display`) is stable and line-oriented:
//!
//! ```text
//! mxu.program gemm(m=256, n=128, k=256) dataflow=ws array=128x128 schedule=pipelined in=bf16 acc=f32 folds=2 prefetch=8
//! fold 0 (k 0:128, n 0:128, m 0:256):
//!   dma.in     filter[0:128, 0:128]  32768 B
//!   dma.in     ifmap[0:256, 0:128]  65536 B
//!   load.stationary filter[0:128, 0:128] -> pe[0:128, 0:128]
//!   stream     ifmap[0:256, 0:128] -> rows[0:128]  256 rows
//!   accumulate ofmap[0:256, 0:128] init
//! ```

use std::collections::VecDeque;
use std::fmt;
use std::ops::Range;

use super::config::{DType, Dataflow, TpuConfig};

/// `C[M,N] = A[M,K] · B[K,N]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gemm {
    pub m: u64,
    pub n: u64,
    pub k: u64,
}

impl Gemm {
    pub fn macs(&self) -> u64 {
        self.m * self.n * self.k
    }
}

/// A convolution as SCALE-Sim describes it (no padding, square stride, batch 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv {
    pub ih: u64,
    pub iw: u64,
    pub fh: u64,
    pub fw: u64,
    pub c: u64,
    pub nf: u64,
    pub stride: u64,
}

impl Conv {
    /// Parses `IH,IW,FH,FW,C,NF[,S]`.
    pub fn parse(s: &str) -> Result<Conv, crate::TpuError> {
        let v: Vec<u64> =
            s.split(',').map(|x| x.trim().parse::<u64>()).collect::<Result<_, _>>().map_err(
                |_| format!("conv shape `{s}` is not IH,IW,FH,FW,C,NF[,S] (positive integers)"),
            )?;
        let conv = match v[..] {
            [ih, iw, fh, fw, c, nf] => Conv { ih, iw, fh, fw, c, nf, stride: 1 },
            [ih, iw, fh, fw, c, nf, stride] => Conv { ih, iw, fh, fw, c, nf, stride },
            _ => {
                return Err(crate::TpuError::from(format!(
                    "conv shape `{s}` has {} fields; expected IH,IW,FH,FW,C,NF[,S]",
                    v.len()
                )));
            }
        };
        if v.contains(&0) {
            return Err(crate::TpuError::from(format!("conv shape `{s}` has a zero field")));
        }
        if conv.fh > conv.ih || conv.fw > conv.iw {
            return Err(crate::TpuError::from(format!(
                "conv filter {}x{} is larger than the input {}x{}",
                conv.fh, conv.fw, conv.ih, conv.iw
            )));
        }
        Ok(conv)
    }

    /// Output height and width (SCALE-Sim: no padding, `⌈(I − F + S)/S⌉`).
    pub fn output_hw(&self) -> (u64, u64) {
        (
            (self.ih - self.fh).div_ceil(self.stride) + 1,
            (self.iw - self.fw).div_ceil(self.stride) + 1,
        )
    }

    /// The im2col GEMM: M = OH·OW output pixels, K = FH·FW·C window, N = filters.
    pub fn im2col(&self) -> Gemm {
        let (oh, ow) = self.output_hw();
        Gemm { m: oh * ow, n: self.nf, k: self.fh * self.fw * self.c }
    }
}

/// How folds follow each other on the array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// SCALE-Sim 3.0: a fold starts only after the previous fold's last output left the
    /// array; the stationary operand is loaded while the array is idle.
    Sequential,
    /// A TPU MXU: double-buffered stationary registers (the next fold's weights load while
    /// the current fold streams), folds streamed back to back, DMA overlapped.
    Pipelined,
}

impl Schedule {
    pub fn name(self) -> &'static str {
        match self {
            Schedule::Sequential => "sequential",
            Schedule::Pipelined => "pipelined",
        }
    }
}

/// The three GEMM operands, by SCALE-Sim's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    /// A[M,K]
    Ifmap,
    /// B[K,N]
    Filter,
    /// C[M,N]
    Ofmap,
}

impl Operand {
    pub fn name(self) -> &'static str {
        match self {
            Operand::Ifmap => "ifmap",
            Operand::Filter => "filter",
            Operand::Ofmap => "ofmap",
        }
    }
}

/// A rectangle of one operand, in its own (row, col) coordinates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TileRef {
    pub operand: Operand,
    pub rows: Range<u64>,
    pub cols: Range<u64>,
}

impl TileRef {
    pub fn elems(&self) -> u64 {
        (self.rows.end - self.rows.start) * (self.cols.end - self.cols.start)
    }
}

impl fmt::Display for TileRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}[{}:{}, {}:{}]",
            self.operand.name(),
            self.rows.start,
            self.rows.end,
            self.cols.start,
            self.cols.end
        )
    }
}

/// A DMA between HBM and the on-chip vector memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dma {
    pub tile: TileRef,
    pub bytes: u64,
}

/// One fold: the sub-GEMM `C[m, n] (+)= A[m, k] · B[k, n]` mapped onto the array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fold {
    pub m: Range<u64>,
    pub n: Range<u64>,
    pub k: Range<u64>,
    /// The first K-slice of its output tile: the accumulators start from this fold's sums.
    pub first_k: bool,
    /// The last K-slice: the output tile is complete when this fold drains.
    pub last_k: bool,
    /// HBM → VMEM transfers this fold waits for: the stationary tile first (if any).
    pub dma_in: Vec<Dma>,
    /// VMEM → HBM after the fold drains (the finished output tile).
    pub dma_out: Option<Dma>,
}

fn len(r: &Range<u64>) -> u64 {
    r.end - r.start
}

impl Fold {
    /// The GEMM ranges along the array rows, the array columns and time, per dataflow.
    pub fn mapping(&self, df: Dataflow) -> (&Range<u64>, &Range<u64>, &Range<u64>) {
        match df {
            Dataflow::Ws => (&self.k, &self.n, &self.m),
            Dataflow::Is => (&self.k, &self.m, &self.n),
            Dataflow::Os => (&self.m, &self.n, &self.k),
        }
    }

    /// Array rows used, array columns used, rows streamed (T).
    pub fn extent(&self, df: Dataflow) -> (u64, u64, u64) {
        let (r, c, t) = self.mapping(df);
        (len(r), len(c), len(t))
    }

    /// The tile held in the PEs (weight-/input-stationary), as an operand rectangle.
    pub fn stationary(&self, df: Dataflow) -> Option<TileRef> {
        match df {
            Dataflow::Ws => Some(TileRef {
                operand: Operand::Filter,
                rows: self.k.clone(),
                cols: self.n.clone(),
            }),
            Dataflow::Is => Some(TileRef {
                operand: Operand::Ifmap,
                rows: self.m.clone(),
                cols: self.k.clone(),
            }),
            Dataflow::Os => None,
        }
    }

    /// The tiles streamed into the array edges (left edge first).
    pub fn streamed(&self, df: Dataflow) -> Vec<TileRef> {
        let a = TileRef { operand: Operand::Ifmap, rows: self.m.clone(), cols: self.k.clone() };
        let b = TileRef { operand: Operand::Filter, rows: self.k.clone(), cols: self.n.clone() };
        match df {
            Dataflow::Ws => vec![a],
            Dataflow::Is => vec![b],
            Dataflow::Os => vec![a, b],
        }
    }

    pub fn output(&self) -> TileRef {
        TileRef { operand: Operand::Ofmap, rows: self.m.clone(), cols: self.n.clone() }
    }
}

/// A GEMM lowered onto one R x C array.
#[derive(Clone, Debug, PartialEq)]
pub struct TileProgram {
    pub gemm: Gemm,
    pub dataflow: Dataflow,
    pub rows: u64,
    pub cols: u64,
    pub schedule: Schedule,
    pub in_dtype: DType,
    pub acc_dtype: DType,
    /// How many folds ahead input DMAs run (the VMEM slots per operand); pipelined only.
    pub prefetch: usize,
    pub folds: Vec<Fold>,
}

fn blocks(n: u64, b: u64) -> impl Iterator<Item = Range<u64>> {
    (0..n.div_ceil(b)).map(move |i| i * b..((i + 1) * b).min(n))
}

impl TileProgram {
    /// Lowers a GEMM for `cfg`'s array and dataflow.
    ///
    /// `Sequential` is SCALE-Sim's mapping: for each column block, for each row block, one
    /// fold streaming the whole T dimension; no DMA (SCALE-Sim models its own SRAMs).
    ///
    /// `Pipelined` tiles the streamed dimension so that one output tile's f32 partial sums
    /// fit in half the accumulators (`TpuConfig::accumulator_rows`) and the streamed
    /// operand's tile row-block (all of K) fits in its third of VMEM; it walks that tile
    /// outermost (so the block is reused across every column block while resident) and K
    /// innermost (so each output tile is accumulated, then drained once). It adds DMA:
    /// each operand has a third of VMEM, managed least-recently-used; a tile is fetched
    /// from HBM when it is not resident, and each finished output tile is written back once.
    ///
    /// Where the streamed operand's row block over all of K does not fit (a large K: the
    /// weight gradients of an FSDP step contract over every token of the batch), taller
    /// tiles than that bound are tried too (up to the accumulators), and the tile that
    /// fetches the fewest bytes from HBM is kept, as a compiler choosing its tiling would:
    /// the weights are then re-read once per tile instead of once per 128 rows.
    pub fn gemm(gemm: Gemm, cfg: &TpuConfig, schedule: Schedule) -> TileProgram {
        let first = Self::gemm_tiled(gemm, cfg, schedule, None);
        if !(schedule == Schedule::Pipelined && cfg.dataflow == Dataflow::Ws) {
            return first;
        }
        let fetched =
            |p: &TileProgram| p.fetched_bytes(Operand::Ifmap) + p.fetched_bytes(Operand::Filter);
        let t0 = first.folds.first().map_or(gemm.m, |f| f.m.end - f.m.start);
        let top = gemm.m.min(cfg.accumulator_rows()).max(1);
        let mut best = (fetched(&first), first);
        // Every power of two above the bound's tile, and the top itself.
        let mut tile = t0;
        while tile < top {
            tile = (tile + 1).next_power_of_two().min(top);
            let p = Self::gemm_tiled(gemm, cfg, schedule, Some(tile));
            let f = fetched(&p);
            if f < best.0 {
                best = (f, p);
            }
        }
        best.1
    }

    /// [`Self::gemm`] with the streamed dimension's tile given (pipelined WS), else chosen
    /// by the VMEM bound.
    fn gemm_tiled(
        gemm: Gemm,
        cfg: &TpuConfig,
        schedule: Schedule,
        tile: Option<u64>,
    ) -> TileProgram {
        assert!(gemm.m > 0 && gemm.n > 0 && gemm.k > 0, "GEMM dims must be positive");
        let (r, c, df) = (cfg.rows, cfg.cols, cfg.dataflow);
        let Gemm { m, n, k } = gemm;
        let mut folds = Vec::new();
        let mut push = |mm: Range<u64>, nn: Range<u64>, kk: Range<u64>| {
            let first_k = kk.start == 0;
            let last_k = kk.end == k;
            folds.push(Fold {
                m: mm,
                n: nn,
                k: kk,
                first_k,
                last_k,
                dma_in: vec![],
                dma_out: None,
            });
        };
        // The streamed dimension's tile: bounded by the accumulators and by VMEM (the tile's
        // rows over all of K), but at least R rows so a fold still hides its weight load.
        let share = cfg.vmem_bytes / 3;
        let t_tile = |t: u64| {
            t.min(cfg.accumulator_rows()).min((share / (k * cfg.in_dtype.bytes())).max(r)).max(1)
        };
        match (df, schedule) {
            (Dataflow::Ws, Schedule::Sequential) => {
                for nn in blocks(n, c) {
                    for kk in blocks(k, r) {
                        push(0..m, nn.clone(), kk);
                    }
                }
            }
            (Dataflow::Ws, Schedule::Pipelined) => {
                for mm in blocks(m, tile.unwrap_or_else(|| t_tile(m))) {
                    for nn in blocks(n, c) {
                        for kk in blocks(k, r) {
                            push(mm.clone(), nn.clone(), kk);
                        }
                    }
                }
            }
            (Dataflow::Is, Schedule::Sequential) => {
                for mm in blocks(m, c) {
                    for kk in blocks(k, r) {
                        push(mm.clone(), 0..n, kk);
                    }
                }
            }
            (Dataflow::Is, Schedule::Pipelined) => {
                for nn in blocks(n, t_tile(n)) {
                    for mm in blocks(m, c) {
                        for kk in blocks(k, r) {
                            push(mm.clone(), nn.clone(), kk);
                        }
                    }
                }
            }
            (Dataflow::Os, _) => {
                for nn in blocks(n, c) {
                    for mm in blocks(m, r) {
                        push(mm, nn.clone(), 0..k);
                    }
                }
            }
        }
        let mut p = TileProgram {
            gemm,
            dataflow: df,
            rows: r,
            cols: c,
            schedule,
            in_dtype: cfg.in_dtype,
            acc_dtype: cfg.acc_dtype,
            prefetch: 2,
            folds,
        };
        if schedule == Schedule::Pipelined {
            p.add_dma(share);
            // As many slots as half of VMEM holds for the largest fold's inputs, 2 to 8.
            let biggest = p
                .folds
                .iter()
                .map(|f| f.dma_in.iter().map(|d| d.bytes).sum::<u64>())
                .max()
                .unwrap_or(0);
            p.prefetch =
                (cfg.vmem_bytes / 2).checked_div(biggest).unwrap_or(8).clamp(2, 8) as usize;
        }
        p
    }

    /// The bytes the tiles of `op` are fetched from HBM with (after [`Self::gemm`]'s DMA
    /// planning; more than the operand when VMEM cannot keep a tile for all its uses).
    pub fn fetched_bytes(&self, op: Operand) -> u64 {
        self.folds
            .iter()
            .flat_map(|f| &f.dma_in)
            .filter(|d| d.tile.operand == op)
            .map(|d| d.bytes)
            .sum()
    }

    fn add_dma(&mut self, vmem_share: u64) {
        let (ib, ab) = (self.in_dtype.bytes(), self.acc_dtype.bytes());
        // Per input operand: resident tiles, least recently used first, and their bytes.
        let mut vmem: [(VecDeque<TileRef>, u64); 2] = Default::default();
        let df = self.dataflow;
        for f in &mut self.folds {
            let mut tiles: Vec<TileRef> = f.stationary(df).into_iter().collect();
            tiles.extend(f.streamed(df));
            for t in tiles {
                let (lru, used) = &mut vmem[usize::from(t.operand != Operand::Ifmap)];
                let bytes = t.elems() * ib;
                if let Some(i) = lru.iter().position(|x| *x == t) {
                    let hit = lru.remove(i).unwrap();
                    lru.push_back(hit);
                    continue;
                }
                while *used + bytes > vmem_share {
                    let Some(old) = lru.pop_front() else { break };
                    *used -= old.elems() * ib;
                }
                if bytes <= vmem_share {
                    lru.push_back(t.clone());
                    *used += bytes;
                }
                f.dma_in.push(Dma { bytes, tile: t });
            }
            if f.last_k {
                let out = f.output();
                f.dma_out = Some(Dma { bytes: out.elems() * ab, tile: out });
            }
        }
    }

    /// The GEMM dimensions on the array rows, the array columns and in time (SCALE-Sim's
    /// Sr, Sc, T).
    pub fn spatial(&self) -> (u64, u64, u64) {
        let Gemm { m, n, k } = self.gemm;
        match self.dataflow {
            Dataflow::Ws => (k, n, m),
            Dataflow::Is => (k, m, n),
            Dataflow::Os => (m, n, k),
        }
    }

    /// Row folds x column folds of SCALE-Sim's mapping (`⌈Sr/R⌉`, `⌈Sc/C⌉`).
    pub fn fold_counts(&self) -> (u64, u64) {
        let (sr, sc, _) = self.spatial();
        (sr.div_ceil(self.rows), sc.div_ceil(self.cols))
    }
}

impl fmt::Display for TileProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.gemm;
        writeln!(
            f,
            "mxu.program gemm(m={}, n={}, k={}) dataflow={} array={}x{} schedule={} in={} acc={} folds={}{}",
            g.m,
            g.n,
            g.k,
            self.dataflow,
            self.rows,
            self.cols,
            self.schedule.name(),
            self.in_dtype.name(),
            self.acc_dtype.name(),
            self.folds.len(),
            if self.schedule == Schedule::Pipelined {
                format!(" prefetch={}", self.prefetch)
            } else {
                String::new()
            }
        )?;
        let df = self.dataflow;
        for (i, fold) in self.folds.iter().enumerate() {
            let r = |x: &Range<u64>| format!("{}:{}", x.start, x.end);
            writeln!(f, "fold {i} (k {}, n {}, m {}):", r(&fold.k), r(&fold.n), r(&fold.m))?;
            for d in &fold.dma_in {
                writeln!(f, "  dma.in     {}  {} B", d.tile, d.bytes)?;
            }
            let (rows, cols, t) = fold.mapping(df);
            if let Some(s) = fold.stationary(df) {
                writeln!(f, "  load.stationary {s} -> pe[0:{}, 0:{}]", len(rows), len(cols))?;
            }
            let streamed = fold.streamed(df);
            writeln!(f, "  stream     {} -> rows[0:{}]  {} rows", streamed[0], len(rows), len(t))?;
            if let Some(top) = streamed.get(1) {
                writeln!(f, "  stream     {top} -> cols[0:{}]  {} rows", len(cols), len(t))?;
            }
            let mode = if fold.first_k { "init" } else { "add" };
            match df {
                Dataflow::Os => writeln!(f, "  drain      {}", fold.output())?,
                _ => writeln!(f, "  accumulate {} {mode}", fold.output())?,
            }
            if fold.last_k && df != Dataflow::Os {
                writeln!(f, "  drain      {}", fold.output())?;
            }
            if let Some(d) = &fold.dma_out {
                writeln!(f, "  dma.out    {}  {} B", d.tile, d.bytes)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(r: u64, c: u64, df: Dataflow) -> TpuConfig {
        TpuConfig { rows: r, cols: c, dataflow: df, ..TpuConfig::v3() }
    }

    #[test]
    fn sequential_lowering_follows_scalesim_loop_order() {
        let p = TileProgram::gemm(
            Gemm { m: 5, n: 9, k: 7 },
            &cfg(4, 4, Dataflow::Ws),
            Schedule::Sequential,
        );
        assert_eq!(p.fold_counts(), (2, 3));
        // For each N block, all K blocks; M whole.
        let got: Vec<_> = p.folds.iter().map(|f| (f.n.clone(), f.k.clone(), f.m.clone())).collect();
        assert_eq!(
            got,
            vec![
                (0..4, 0..4, 0..5),
                (0..4, 4..7, 0..5),
                (4..8, 0..4, 0..5),
                (4..8, 4..7, 0..5),
                (8..9, 0..4, 0..5),
                (8..9, 4..7, 0..5)
            ]
        );
        assert!(p.folds.iter().all(|f| f.dma_in.is_empty()));
        let os = TileProgram::gemm(
            Gemm { m: 5, n: 9, k: 7 },
            &cfg(4, 4, Dataflow::Os),
            Schedule::Sequential,
        );
        assert_eq!(os.folds.len(), 6);
        assert!(os.folds.iter().all(|f| f.k == (0..7) && f.first_k && f.last_k));
    }

    #[test]
    fn pipelined_lowering_tiles_t_and_fetches_resident_tiles_once() {
        let mut c = cfg(128, 128, Dataflow::Ws);
        c.accumulator_bytes = 2 * 128 * 4 * 256; // 256 accumulator rows per half
        let p = TileProgram::gemm(Gemm { m: 1000, n: 128, k: 256 }, &c, Schedule::Pipelined);
        assert_eq!(p.folds.len(), 4 * 2);
        assert_eq!(p.folds[0].m, 0..256);
        assert_eq!(p.folds[7].m, 768..1000);
        // B (256x128 bf16) is resident: each of its two tiles is fetched once.
        assert_eq!(p.fetched_bytes(Operand::Filter), 256 * 128 * 2);
        let out: u64 = p.folds.iter().filter_map(|f| f.dma_out.as_ref()).map(|d| d.bytes).sum();
        assert_eq!(out, 1000 * 128 * 4);
        let text = p.to_string();
        assert!(text.starts_with(
            "mxu.program gemm(m=1000, n=128, k=256) dataflow=ws array=128x128 schedule=pipelined"
        ));
        assert!(text.contains("fold 1 (k 128:256, n 0:128, m 0:256):\n  dma.in     filter[128:256, 0:128]  32768 B\n"), "{text}");
    }

    #[test]
    fn streamed_tiles_fit_vmem_and_are_reused_across_column_blocks() {
        // A is 2048x512 bf16 = 2 MiB; its VMEM third is 768 KiB, so A streams in m-tiles of
        // 768 rows (768 x 512 x 2 B), each reused by all four column blocks; B (512 KiB)
        // stays resident.
        let mut c = cfg(128, 128, Dataflow::Ws);
        c.vmem_bytes = 3 * 768 * 1024;
        let g = Gemm { m: 2048, n: 512, k: 512 };
        let p = TileProgram::gemm(g, &c, Schedule::Pipelined);
        assert_eq!(p.folds[0].m, 0..768);
        let bytes = |op: Operand| p.fetched_bytes(op);
        assert_eq!(bytes(Operand::Ifmap), g.m * g.k * 2);
        assert_eq!(bytes(Operand::Filter), g.k * g.n * 2);
        // With a VMEM too small for B, B is fetched again for every m-tile.
        c.vmem_bytes = 3 * 400 * 1024;
        let p = TileProgram::gemm(g, &c, Schedule::Pipelined);
        let tiles = g.m.div_ceil(p.folds[0].m.end);
        assert_eq!(p.fetched_bytes(Operand::Filter), tiles * g.k * g.n * 2);
    }

    /// A weight gradient's GEMM contracts over every token (K = 32768): the row block over
    /// all of K cannot stay in VMEM at any height, so the tile is chosen by bytes fetched:
    /// taller tiles re-read the weights fewer times.
    #[test]
    fn a_large_k_takes_the_tile_that_fetches_least() {
        let mut c = cfg(128, 128, Dataflow::Ws);
        c.vmem_bytes = 16 << 20;
        c.accumulator_bytes = 4 << 20;
        let g = Gemm { m: 1280, n: 256, k: 32768 };
        let fetched = |p: &TileProgram, op: Operand| p.fetched_bytes(op);
        let bound = TileProgram::gemm_tiled(g, &c, Schedule::Pipelined, None);
        assert_eq!(bound.folds[0].m, 0..128, "the VMEM bound alone");
        let p = TileProgram::gemm(g, &c, Schedule::Pipelined);
        let tile = p.folds[0].m.end;
        assert!(tile > 128, "{tile}");
        let total = |p: &TileProgram| fetched(p, Operand::Ifmap) + fetched(p, Operand::Filter);
        assert!(total(&p) < total(&bound), "{} >= {}", total(&p), total(&bound));
        assert_eq!(fetched(&p, Operand::Filter), g.m.div_ceil(tile) * g.k * g.n * 2);
        assert_eq!(fetched(&bound, Operand::Filter), 10 * g.k * g.n * 2);
    }

    #[test]
    fn conv_maps_to_im2col_gemm() {
        let c = Conv::parse("229,229,7,7,3,64,2").unwrap();
        assert_eq!(c.output_hw(), (112, 112));
        assert_eq!(c.im2col(), Gemm { m: 12544, n: 64, k: 147 });
        assert!(Conv::parse("1,2,3").is_err());
        assert!(Conv::parse("3,3,4,4,1,1").is_err());
        assert!(Conv::parse("8,8,3,3,0,1").is_err());
    }
}
