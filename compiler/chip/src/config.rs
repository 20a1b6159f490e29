//! The hardware description the simulator runs against: array shape, dataflow, memories,
//! clock, vector unit and element widths, with presets for TPU v2/v3/v4-like cores.

use std::fmt;
use std::str::FromStr;

pub use crate::torus::{Torus, Wrap};

/// Which operand stays in the processing elements while the other one streams through.
///
/// For `C[M,N] = A[M,K] · B[K,N]` (SCALE-Sim's names: A = ifmap, B = filter, C = ofmap):
///
/// | dataflow | array rows ← | array cols ← | streamed in time | stationary |
/// |---|---|---|---|---|
/// | `Ws` | K | N | M | B (weights) |
/// | `Is` | K | M | N | A (inputs) |
/// | `Os` | M | N | K | C (partial sums) |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dataflow {
    Ws,
    Os,
    Is,
}

impl Dataflow {
    pub const ALL: [Dataflow; 3] = [Dataflow::Ws, Dataflow::Os, Dataflow::Is];

    pub fn name(self) -> &'static str {
        match self {
            Dataflow::Ws => "ws",
            Dataflow::Os => "os",
            Dataflow::Is => "is",
        }
    }
}

impl fmt::Display for Dataflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Dataflow {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "ws" | "weight-stationary" => Ok(Dataflow::Ws),
            "os" | "output-stationary" => Ok(Dataflow::Os),
            "is" | "input-stationary" => Ok(Dataflow::Is),
            _ => Err(format!("unknown dataflow `{s}` (expected ws, os or is)")),
        }
    }
}

/// Element types the MXU and its memories move, with their widths in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    Bf16,
    F16,
    F32,
    S8,
}

impl DType {
    pub fn bytes(self) -> u64 {
        match self {
            DType::Bf16 | DType::F16 => 2,
            DType::F32 => 4,
            DType::S8 => 1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::S8 => "s8",
        }
    }
}

impl FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bf16" => Ok(DType::Bf16),
            "f16" => Ok(DType::F16),
            "f32" => Ok(DType::F32),
            "s8" | "int8" => Ok(DType::S8),
            _ => Err(format!("unknown element type `{s}` (expected bf16, f16, f32 or s8)")),
        }
    }
}

/// The vector unit beside the MXU: a 2-D SIMD unit of sublanes x lanes (f32 lanes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VectorUnit {
    pub sublanes: u32,
    pub lanes: u32,
    /// Vector registers of `sublanes x lanes` 32-bit elements.
    pub vregs: u32,
    /// ALUs per lane-sublane position (elementwise ops issued per cycle per position).
    pub alus: u32,
}

/// One core's MXU and the memories that feed it.
///
/// The simulator models one MXU. Chip-level figures (cores, MXUs per core, chip HBM
/// bandwidth) are kept so that reports can convert to seconds and FLOP/s, and so the HBM
/// bandwidth seen by one MXU is `hbm_bytes_per_s / (cores * mxus_per_core)`.
#[derive(Clone, Debug, PartialEq)]
pub struct TpuConfig {
    pub name: String,
    /// Systolic array rows (R) and columns (C).
    pub rows: u64,
    pub cols: u64,
    pub dataflow: Dataflow,
    pub clock_hz: f64,
    pub cores_per_chip: u64,
    pub mxus_per_core: u64,
    /// On-chip vector memory (VMEM) per core, in bytes: the operand staging buffers.
    pub vmem_bytes: u64,
    /// Accumulator storage per MXU, in bytes (f32 partial sums, double-buffered: half is
    /// drained while the other half accumulates).
    pub accumulator_bytes: u64,
    /// HBM capacity per chip, bytes (what a step's buffers must fit in).
    pub hbm_bytes: u64,
    /// HBM bandwidth per chip (bytes/s) and the latency of one DMA (cycles).
    pub hbm_bytes_per_s: f64,
    pub hbm_latency_cycles: u64,
    pub vector: VectorUnit,
    /// Operand (multiplier input) and accumulator element types.
    pub in_dtype: DType,
    pub acc_dtype: DType,
    /// The inter-chip interconnect (multi-chip runs).
    pub ici: Ici,
    /// The data-center network between slices (multi-slice runs).
    pub dcn: Dcn,
    /// Chips per slice when the chips form several slices joined by the DCN (consecutive
    /// device ids share a slice, as a mesh with its DCN axis outermost numbers them);
    /// `None`: one slice. Set per run (`hloc compile --slices`), not by a preset.
    pub chips_per_slice: Option<u64>,
    /// The slice's torus (`hloc compile --topology`, or the default shape of the run's
    /// chips); `None`: the default shape of as many chips as a collective's group has.
    pub slice: Option<Torus>,
}

/// The data-center network (DCN) that joins slices: each host's network interface, shared
/// by the chips attached to that host.
#[derive(Clone, Debug, PartialEq)]
pub struct Dcn {
    /// One direction of one host's interface, bytes/s.
    pub host_bytes_per_s: f64,
    pub chips_per_host: u32,
    /// Fixed cost of one step of a collective algorithm across hosts.
    pub step_latency_s: f64,
}

impl Dcn {
    /// "DCN bandwidth is typically around 2.5e10 bytes / second per host": Austin et al.,
    /// "How to Scale Your Model" (Google DeepMind, 2025), Part 2, stated for TPUs in
    /// general; applied to every preset (an assumption where a generation's own figure is
    /// not public). The 10 us step is an assumption (a data-center round trip plus
    /// synchronization), not a published figure.
    fn typical(chips_per_host: u32) -> Dcn {
        Dcn { host_bytes_per_s: 2.5e10, chips_per_host, step_latency_s: 10e-6 }
    }
}

/// The inter-chip interconnect (ICI) of a preset: links per chip, their bandwidth, the
/// torus they form, and the fixed cost of one collective step.
#[derive(Clone, Debug, PartialEq)]
pub struct Ici {
    /// `2D torus`, `3D torus`.
    pub topology: &'static str,
    /// Axes of a slice's mesh (2 or 3), and which of them have wraparound links.
    pub axes: usize,
    pub wrap: Wrap,
    pub links_per_chip: u32,
    /// One direction of one link, bytes/s.
    pub link_bytes_per_s: f64,
    /// Fixed cost of one step of a collective algorithm (one hop plus synchronization).
    pub step_latency_s: f64,
}

impl TpuConfig {
    /// A TPU v2-like core: one 128x128 MXU per core, 2 cores per chip, 700 MHz.
    pub fn v2() -> TpuConfig {
        TpuConfig {
            name: "tpu-v2".into(),
            // 128x128 MXU, 1 per TensorCore, 2 TensorCores per chip: Norrie et al., "The
            // Design Process for Google's Training Chips: TPUv2 and TPUv3", IEEE Micro 2021.
            rows: 128,
            cols: 128,
            dataflow: Dataflow::Ws,
            // 700 MHz: Jouppi et al., "A Domain-Specific Supercomputer for Training Deep
            // Neural Networks", CACM 2020, Table 3 (2 x 16384 MAC x 2 x 0.7 GHz = 45.9 TF).
            clock_hz: 700e6,
            cores_per_chip: 2,
            mxus_per_core: 1,
            // 16 MiB VMEM per core: v2/v3 have about 32 MiB on chip (CACM 2020 table,
            // recalled, not re-verified), taken as split between the two cores.
            vmem_bytes: 16 << 20,
            // 4 MiB of f32 accumulators, TPUv1's figure ("4096, 256-element, 32-bit
            // accumulators", Jouppi et al., ISCA 2017 §2). On v2/v3 the accumulators live in
            // VMEM (Norrie et al. 2021); the size is an assumption carried over.
            accumulator_bytes: 4 << 20,
            // 16 GiB per chip (8 GiB per TensorCore): Cloud TPU "System architecture"
            // documentation, TPU v2 table.
            hbm_bytes: 16 << 30,
            // 700 GB/s per chip: Norrie et al. 2021 (Google's 2017 slides said 600 GB/s).
            hbm_bytes_per_s: 700e9,
            // Assumed, not published: ~0.5-0.7 us from DMA issue to first data, typical of
            // HBM behind a DMA engine. It only shifts the first fold and the last write-back.
            hbm_latency_cycles: 500,
            // 8 sublanes x 128 lanes, 32 vregs, 2 ALUs per position: "How to Scale Your
            // Model", App. C (stated for v4; the 128-lane 32-bit width dates from v2/v3).
            vector: VectorUnit { sublanes: 8, lanes: 128, vregs: 32, alus: 2 },
            // "All multiplies take bfloat16 inputs, but all accumulations are performed in
            // FP32": Cloud TPU "System architecture" documentation.
            in_dtype: DType::Bf16,
            acc_dtype: DType::F32,
            // 4 ICI links x 496 Gbit/s in a 2D torus: CACM 2020, Table 3 (recalled; Norrie
            // et al. 2021 summarize "four external links: 500 Gb/s"). The 1 us step cost is
            // an assumption (link latency plus synchronization), not a published figure.
            // A v2 pod is 256 chips in a 16x16 2D torus (CACM 2020): an axis wraps when
            // it is the pod's full 16.
            ici: Ici {
                topology: "2D torus",
                axes: 2,
                wrap: Wrap::FullAxis(16),
                links_per_chip: 4,
                link_bytes_per_s: 496e9 / 8.0,
                step_latency_s: 1e-6,
            },
            // 4 chips per host (a v2-8 or v3-8 host: 4 chips, 8 cores): Cloud TPU
            // "System architecture"; the same on v4 and v5p (2x2x1 hosts, "How to Scale
            // Your Model", Part 2).
            dcn: Dcn::typical(4),
            chips_per_slice: None,
            slice: None,
        }
    }

    /// A TPU v3-like core: two 128x128 MXUs per core, 2 cores per chip, 940 MHz, 900 GB/s.
    pub fn v3() -> TpuConfig {
        TpuConfig {
            name: "tpu-v3".into(),
            // 2 MXUs per TensorCore, 2 TensorCores per chip, 123 TFLOPS bf16: Cloud TPU
            // "TPU v3" page (4 x 16384 x 2 x 0.94 GHz = 123.2 TF).
            mxus_per_core: 2,
            // 940 MHz: CACM 2020, Table 3; matches the 123 TF arithmetic above.
            clock_hz: 940e6,
            // 32 GiB HBM at 900 GB/s per chip: Cloud TPU "TPU v3" page.
            hbm_bytes: 32 << 30,
            hbm_bytes_per_s: 900e9,
            // 4 links x 656 Gbit/s, 2D torus: CACM 2020, Table 3 (recalled; the scaling book
            // gives 1e11 B/s one way per link, within 25%).
            // A v3 pod is 1024 chips in a 32x32 2D torus (CACM 2020).
            ici: Ici {
                topology: "2D torus",
                axes: 2,
                wrap: Wrap::FullAxis(32),
                links_per_chip: 4,
                link_bytes_per_s: 656e9 / 8.0,
                step_latency_s: 1e-6,
            },
            ..TpuConfig::v2()
        }
    }

    /// A TPU v4-like core: four 128x128 MXUs per core, 2 cores per chip (megacore),
    /// 1200 GB/s HBM.
    pub fn v4() -> TpuConfig {
        TpuConfig {
            name: "tpu-v4".into(),
            // 2 TensorCores x 4 MXUs, 275 TFLOPS, 32 GiB at 1200 GB/s: Cloud TPU "TPU v4" page.
            mxus_per_core: 4,
            // 275e12 / (8 MXU x 16384 MAC x 2) = 1.05 GHz (the derivation in SCALE-Sim's
            // upstream configs/tpuv4.cfg header).
            clock_hz: 1.05e9,
            hbm_bytes_per_s: 1200e9,
            // 6 ICI links per chip in a 3D torus, 400 Gbit/s in each direction per link:
            // Jouppi et al., "TPU v4: An Optically Reconfigurable Supercomputer", ISCA 2023
            // (as summarized in G. Lockwood's TPUv4 notes; 4x4x4 cubes joined by OCS).
            // Slices of whole 4x4x4 cubes are tori, joined by optical circuit switches
            // (ISCA 2023); smaller slices are meshes.
            ici: Ici {
                topology: "3D torus",
                axes: 3,
                wrap: Wrap::Cubes(4),
                links_per_chip: 6,
                link_bytes_per_s: 400e9 / 8.0,
                step_latency_s: 1e-6,
            },
            // v4 adds 128 MiB CMEM per chip; VMEM per core is kept at 16 MiB here.
            ..TpuConfig::v3()
        }
    }

    /// A TPU v5e-like chip: one TensorCore of four 128x128 MXUs, 16 GB HBM at 819 GB/s,
    /// four ICI links in a 2D torus.
    pub fn v5e() -> TpuConfig {
        TpuConfig {
            name: "tpu-v5e".into(),
            // One TensorCore with four MXUs, 197 TFLOPs bf16, 16 GB HBM2 at 819 GBps, 4 ICI
            // ports, 400 GBps bidirectional ICI per chip, 2D torus: Cloud TPU "TPU v5e" page.
            cores_per_chip: 1,
            mxus_per_core: 4,
            // 197e12 / (4 MXU x 16384 MAC x 2) = 1.50 GHz (derived from the peak above).
            clock_hz: 1.5e9,
            hbm_bytes: 16_000_000_000,
            hbm_bytes_per_s: 819e9,
            // 400 GB/s bidirectional over 4 links: 50 GB/s each way per link.
            // A v5e pod is one 16x16 2D torus (Cloud TPU "TPU v5e" page: 256 chips, 2D
            // torus); an axis wraps when it is the full 16 (an assumption for the smaller
            // slices, which the page does not describe).
            ici: Ici {
                topology: "2D torus",
                axes: 2,
                wrap: Wrap::FullAxis(16),
                links_per_chip: 4,
                link_bytes_per_s: 400e9 / 4.0 / 2.0,
                step_latency_s: 1e-6,
            },
            // 8 chips per host (4x2): "How to Scale Your Model", Part 2.
            dcn: Dcn::typical(8),
            // VMEM, accumulators, vector unit and the 1 us collective step: carried over
            // from the v4 preset (assumptions; v5e's are not in the Cloud TPU pages).
            ..TpuConfig::v4()
        }
    }

    /// A TPU v5p-like chip: two TensorCores of four 128x128 MXUs, 95 GiB HBM at
    /// 2765 GB/s, six ICI links in a 3D torus.
    pub fn v5p() -> TpuConfig {
        TpuConfig {
            name: "tpu-v5p".into(),
            // 2 TensorCores per chip, 4 MXUs each, 459 TFLOPs bf16, 95 GiB HBM at 2765 GBps,
            // 1200 GBps bidirectional ICI per chip, 3D torus: Cloud TPU "TPU v5p" page.
            cores_per_chip: 2,
            mxus_per_core: 4,
            // 459e12 / (8 MXU x 16384 MAC x 2) = 1.75 GHz (derived from the peak above).
            clock_hz: 1.75e9,
            hbm_bytes: 95 << 30,
            hbm_bytes_per_s: 2765e9,
            // 1200 GB/s bidirectional over the 6 links of a 3D torus: 100 GB/s each way.
            // "All 4x4x4 and larger slices (one cube) have full 3D torus" (the same page).
            ici: Ici {
                topology: "3D torus",
                axes: 3,
                wrap: Wrap::Cubes(4),
                links_per_chip: 6,
                link_bytes_per_s: 1200e9 / 6.0 / 2.0,
                step_latency_s: 1e-6,
            },
            // VMEM, accumulators, vector unit: carried over from v4 (assumptions).
            ..TpuConfig::v4()
        }
    }

    /// The preset named `name` (`v2`, `v3`, `v4`, `v5e`, `v5p`, or `tpu-v2` ...).
    pub fn preset(name: &str) -> Option<TpuConfig> {
        match name.trim_start_matches("tpu-") {
            "v2" => Some(TpuConfig::v2()),
            "v3" => Some(TpuConfig::v3()),
            "v4" => Some(TpuConfig::v4()),
            "v5e" | "v5litepod" => Some(TpuConfig::v5e()),
            "v5p" => Some(TpuConfig::v5p()),
            _ => None,
        }
    }

    /// Every preset's name, for help texts and errors.
    pub const PRESETS: [&'static str; 5] = ["v2", "v3", "v4", "v5e", "v5p"];

    /// One TensorCore of this chip as a device of its own, as JAX's devices are on v2 and
    /// v3 (two per chip, no megacore): one core, and its share of the chip's HBM capacity
    /// and bandwidth. Its ICI links are the chip's, shared with the other core, which runs
    /// the same collectives at the same time: half of each link per core (an assumption,
    /// not a published split).
    pub fn one_core(&self) -> TpuConfig {
        let cores = self.cores_per_chip.max(1);
        let mut c = self.clone();
        c.name = format!("{} (one core)", self.name);
        c.cores_per_chip = 1;
        c.hbm_bytes = self.hbm_bytes / cores;
        c.hbm_bytes_per_s = self.hbm_bytes_per_s / cores as f64;
        c.ici.link_bytes_per_s = self.ici.link_bytes_per_s / cores as f64;
        c
    }

    /// Peak bf16 FLOP/s of one chip: every MXU doing one multiply-add per cell per cycle.
    pub fn peak_flops(&self) -> f64 {
        (self.cores_per_chip * self.mxus_per_core * self.rows * self.cols * 2) as f64
            * self.clock_hz
    }

    /// HBM bytes per cycle available to one MXU (the chip's bandwidth shared by all MXUs).
    pub fn hbm_bytes_per_cycle(&self) -> f64 {
        self.hbm_bytes_per_s / self.clock_hz / (self.cores_per_chip * self.mxus_per_core) as f64
    }

    /// Accumulator rows (of `cols` f32 values) usable by one output tile while the other
    /// half of the double-buffered accumulators drains.
    pub fn accumulator_rows(&self) -> u64 {
        (self.accumulator_bytes / 2 / (self.cols * self.acc_dtype.bytes())).max(1)
    }
}

/// Parses an array shape `RxC` (e.g. `128x128`, `32x8`).
pub fn parse_array(s: &str) -> Result<(u64, u64), crate::TpuError> {
    let bad = || format!("array shape `{s}` is not ROWSxCOLS with both at least 1 (e.g. 128x128)");
    let (r, c) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let (r, c): (u64, u64) =
        (r.trim().parse().map_err(|_| bad())?, c.trim().parse().map_err(|_| bad())?);
    if r == 0 || c == 0 || r > 4096 || c > 4096 {
        return Err(crate::TpuError::from(bad()));
    }
    Ok((r, c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_match_published_peaks() {
        // Peak bf16 FLOP/s per chip = cores x MXUs x R x C x 2 x clock.
        let peak = |c: &TpuConfig| {
            (c.cores_per_chip * c.mxus_per_core * c.rows * c.cols * 2) as f64 * c.clock_hz / 1e12
        };
        assert!((peak(&TpuConfig::v2()) - 45.9).abs() < 0.1);
        assert!((peak(&TpuConfig::v3()) - 123.2).abs() < 0.1);
        assert!((peak(&TpuConfig::v4()) - 275.3).abs() < 0.5);
        assert!((peak(&TpuConfig::v5e()) - 197.0).abs() < 0.5);
        assert!((peak(&TpuConfig::v5p()) - 459.0).abs() < 0.5);
        for name in TpuConfig::PRESETS {
            let c = TpuConfig::preset(name).unwrap();
            assert_eq!(c.peak_flops() / 1e12, peak(&c), "{name}");
            assert!(c.hbm_bytes >= 16_000_000_000, "{name}");
        }
        assert_eq!(TpuConfig::preset("tpu-v3").unwrap().name, "tpu-v3");
        assert!(TpuConfig::preset("v9").is_none());
    }

    #[test]
    fn array_shapes_parse_and_reject() {
        assert_eq!(parse_array("128x128").ok(), Some((128, 128)));
        assert_eq!(parse_array("4X16").ok(), Some((4, 16)));
        for bad in ["128", "0x4", "ax4", "4x", "9999x1"] {
            assert!(parse_array(bad).is_err(), "{bad}");
        }
    }
}
