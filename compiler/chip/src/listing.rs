//! The lowered program printed for a chip (`hloc compile --emit tiles`): every buffer,
//! then every block's kernels with the split, tiles and VMEM slots the chip model
//! ([`crate::chip::plan`]) gives them, so the simulator's choices can be read.

use std::fmt;

use crate::config::TpuConfig;
use crate::program::{Item, Origin, Program};

impl Program {
    /// The program printed for `cfg`: each kernel with its split, tiles and VMEM slots
    /// as the simulator will run it.
    pub fn display<'a>(&'a self, cfg: &'a TpuConfig) -> impl fmt::Display + 'a {
        Printed { p: self, cfg }
    }
}

struct Printed<'a> {
    p: &'a Program,
    cfg: &'a TpuConfig,
}

impl fmt::Display for Printed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (p, cfg) = (self.p, self.cfg);
        writeln!(
            f,
            "tpu.program \"{}\" config={} ({} cores x {} MXUs {}x{}, VMEM {} MiB/core, HBM {} GB/s)",
            p.name,
            cfg.name,
            cfg.cores_per_chip,
            cfg.mxus_per_core,
            cfg.rows,
            cfg.cols,
            cfg.vmem_bytes >> 20,
            cfg.hbm_bytes_per_s / 1e9
        )?;
        for (i, b) in p.buffers.iter().enumerate() {
            let origin = match b.origin {
                Origin::Parameter => " (parameter)",
                Origin::Constant => " (constant)",
                Origin::Result => "",
            };
            writeln!(f, "buffer %{i} \"{}\" {} {} B hbm{origin}", b.name, b.ty, b.bytes)?;
        }
        let mut n = 0usize;
        for (bi, block) in p.blocks.iter().enumerate() {
            let entry = if bi == p.entry { " (entry)" } else { "" };
            writeln!(f, "block {bi} \"{}\"{entry}:", block.name)?;
            for item in &block.items {
                match item {
                    Item::Kernel(k) => {
                        let plan = crate::chip::plan(k, cfg);
                        writeln!(
                            f,
                            "  kernel {n} \"{}\" {} ({}) cores={} tiles={}",
                            k.name,
                            k.class.name(),
                            k.what,
                            plan.cores,
                            plan.tiles
                        )?;
                        n += 1;
                        let slots: Vec<String> = plan
                            .vmem
                            .iter()
                            .map(|s| format!("{} [{}, {}) x2", s.0, s.1, s.1 + 2 * s.2))
                            .collect();
                        if !slots.is_empty() {
                            writeln!(f, "    vmem      {}", slots.join("  "))?;
                        }
                        let list = |v: &[(usize, u64)]| {
                            v.iter()
                                .map(|(b, by)| format!("%{b} {by} B"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        };
                        if !k.reads.is_empty() {
                            writeln!(f, "    dma.in    {}", list(&k.reads))?;
                        }
                        if let Some(mm) = &k.matmul {
                            let g = plan.gemm.expect("a matmul kernel has a per-MXU GEMM");
                            let t = |b: bool| if b { " (transposed on the XLU)" } else { "" };
                            writeln!(
                                f,
                                "    mxu.matmul batch={} m={} n={} k={} passes={} lhs{} rhs{}; per MXU gemm(m={}, n={}, k={}) x{}",
                                mm.batch,
                                mm.m,
                                mm.n,
                                mm.k,
                                mm.passes,
                                t(mm.lhs_transposed),
                                t(mm.rhs_transposed),
                                g.m,
                                g.n,
                                g.k,
                                plan.gemm_reps
                            )?;
                        }
                        let v = k.vector;
                        if v.alu > 0 {
                            writeln!(f, "    vpu       {} element-ops", v.alu)?;
                        }
                        if v.eup > 0 {
                            writeln!(f, "    eup       {} transcendental element-ops", v.eup)?;
                        }
                        if v.xlu > 0 {
                            writeln!(f, "    xlu       {} cross-lane element-ops", v.xlu)?;
                        }
                        if !k.writes.is_empty() {
                            writeln!(f, "    dma.out   {}", list(&k.writes))?;
                        }
                    }
                    Item::While { name, cond, body, trip_count } => {
                        let trips =
                            trip_count.map_or("as executed".to_string(), |t| format!("{t} trips"));
                        writeln!(
                            f,
                            "  while \"{name}\" cond=block {cond} body=block {body} ({trips})"
                        )?;
                    }
                    Item::Cond { name, branches, taken } => {
                        let b: Vec<String> =
                            branches.iter().map(|b| format!("block {b}")).collect();
                        let t = taken.map_or("as executed".to_string(), |t| format!("branch {t}"));
                        writeln!(f, "  conditional \"{name}\" [{}] ({t})", b.join(", "))?;
                    }
                    Item::Call { name, block } => writeln!(f, "  call \"{name}\" block {block}")?,
                }
            }
        }
        Ok(())
    }
}
