//! Checks `tpu::scalesim_mem` against every row of `shared/scalesim/reference.csv` (SCALE-Sim
//! 3.0.0 runs produced by `shared/scalesim/run_reference.py`): stall cycles, total cycles, the
//! three DRAM counters and "total cycles incl. prefetch" must match exactly.
//!
//! Run with `cargo test -p hlo-compiler --test scalesim_memory -- --show-output` for the table.

use std::path::Path;
use std::time::Instant;

use hlo_compiler::tpu::scalesim_mem::{Dataflow, Layer, MemConfig, MemStats, simulate_memory};

struct Row {
    case: String,
    layer: Layer,
    cfg: MemConfig,
    want: MemStats,
}

fn reference_rows() -> Vec<Row> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/scalesim/reference.csv");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read SCALE-Sim reference table {}: {e}",
            path.display()
        )
    });
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .expect("empty reference.csv")
        .split(',')
        .collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    };
    let c_case = col("case");
    let c_df = col("dataflow");
    let (c_m, c_n, c_k, c_conv) = (col("M"), col("N"), col("K"), col("conv"));
    let (c_rows, c_cols) = (col("rows"), col("cols"));
    let (c_ikb, c_fkb, c_okb) = (
        col("ifmap_sram_kb"),
        col("filter_sram_kb"),
        col("ofmap_sram_kb"),
    );
    let (c_mode, c_bw) = (col("bandwidth_mode"), col("dram_bw_words_per_cycle"));
    let (c_stall, c_total, c_incl) = (
        col("stall_cycles"),
        col("total_cycles"),
        col("total_cycles_incl_prefetch"),
    );
    let (c_di, c_df_, c_do) = (
        col("dram_ifmap_reads"),
        col("dram_filter_reads"),
        col("dram_ofmap_writes"),
    );
    // All needed columns precede the free-text `note` column, so a plain split is enough.
    let mut rows = Vec::new();
    for line in lines.filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').collect();
        let num = |i: usize| -> u64 {
            f[i].trim()
                .parse()
                .unwrap_or_else(|e| panic!("bad number {:?} in {line}: {e}", f[i]))
        };
        let dataflow = match f[c_df] {
            "ws" => Dataflow::Ws,
            "os" => Dataflow::Os,
            "is" => Dataflow::Is,
            other => panic!("unknown dataflow {other}"),
        };
        let layer = if f[c_conv].trim().is_empty() {
            Layer::Gemm {
                m: num(c_m),
                n: num(c_n),
                k: num(c_k),
            }
        } else {
            let v: Vec<u64> = f[c_conv]
                .split('x')
                .map(|s| s.parse().expect("conv field"))
                .collect();
            assert_eq!(
                v.len(),
                7,
                "conv column must be IHxIWxFHxFWxCxNFxS: {}",
                f[c_conv]
            );
            Layer::Conv {
                ih: v[0],
                iw: v[1],
                fh: v[2],
                fw: v[3],
                c: v[4],
                nf: v[5],
                stride: v[6],
            }
        };
        let bandwidth = match f[c_mode] {
            "CALC" => None,
            "USER" => Some(num(c_bw)),
            other => panic!("unknown bandwidth mode {other}"),
        };
        rows.push(Row {
            case: format!("{} {}", f[c_case], f[c_df]),
            layer,
            cfg: MemConfig {
                rows: num(c_rows),
                cols: num(c_cols),
                dataflow,
                ifmap_kb: num(c_ikb),
                filter_kb: num(c_fkb),
                ofmap_kb: num(c_okb),
                bandwidth,
            },
            want: MemStats {
                stall_cycles: num(c_stall),
                total_cycles: num(c_total),
                dram_ifmap_reads: num(c_di),
                dram_filter_reads: num(c_df_),
                dram_ofmap_writes: num(c_do),
                total_cycles_incl_prefetch: Some(num(c_incl)),
            },
        });
    }
    rows
}

#[test]
fn scalesim_memory_matches_reference() {
    let rows = reference_rows();
    assert_eq!(rows.len(), 47, "reference.csv should have 47 rows");
    let mut failures = Vec::new();
    println!(
        "{:<34} {:>4} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}  ok",
        "case", "mode", "stall", "total", "dram_if", "dram_fl", "dram_of", "incl_pf", "ms"
    );
    let t_all = Instant::now();
    for row in &rows {
        let t = Instant::now();
        let got = simulate_memory(&row.layer, &row.cfg);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let ok = got == row.want;
        let mode = match row.cfg.bandwidth {
            None => "CALC".to_string(),
            Some(w) => format!("U{w}"),
        };
        println!(
            "{:<34} {:>4} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8.1}  {}",
            row.case,
            mode,
            got.stall_cycles,
            got.total_cycles,
            got.dram_ifmap_reads,
            got.dram_filter_reads,
            got.dram_ofmap_writes,
            got.total_cycles_incl_prefetch.map_or(-1, |v| v as i64),
            ms,
            if ok { "ok" } else { "MISMATCH" }
        );
        if !ok {
            failures.push(format!(
                "{} ({:?}):\n   got  {:?}\n   want {:?}",
                row.case, row.cfg, got, row.want
            ));
        }
    }
    println!(
        "all {} rows in {:.2} s",
        rows.len(),
        t_all.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {} rows differ:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}
