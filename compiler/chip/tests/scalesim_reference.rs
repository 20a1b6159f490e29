//! `scalesim` mode against every row of `shared/scalesim/reference.csv` (SCALE-Sim 3.0.0
//! runs, `shared/scalesim/run_reference.py`): cycles, stalls, folds, utilizations, SRAM and
//! DRAM counts, in GEMM and native conv modes, CALC and USER bandwidth modes, all dataflows.
//!
//! `cargo test -p hlo-compiler --test scalesim_reference -- --show-output` prints the table.

use std::collections::HashMap;
use std::path::Path;

use hlo_chip::config::Dataflow;
use hlo_chip::report::Report;
use hlo_chip::scalesim::{self, ScalesimSetup};
use hlo_chip::tile_ir::{Conv, Gemm};

fn reference() -> Vec<HashMap<String, String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/scalesim/reference.csv");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("cannot read the SCALE-Sim reference table {}: {e}", path.display())
    });
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("empty reference.csv").split(',').collect();
    // Every column used precedes the free-text `note`, so splitting on ',' is enough.
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            header.iter().zip(l.split(',')).map(|(h, v)| (h.to_string(), v.to_string())).collect()
        })
        .collect()
}

fn setup(row: &HashMap<String, String>) -> ScalesimSetup {
    let num = |k: &str| -> u64 {
        row[k].parse().unwrap_or_else(|e| panic!("column {k} = {:?}: {e}", row[k]))
    };
    let df: Dataflow = row["dataflow"].parse().unwrap();
    let (r, c) = (num("rows"), num("cols"));
    let mut s = if row["conv"].is_empty() {
        ScalesimSetup::gemm(Gemm { m: num("M"), n: num("N"), k: num("K") }, r, c, df)
    } else {
        let conv = Conv::parse(&row["conv"].replace('x', ",")).unwrap();
        ScalesimSetup::conv(conv, r, c, df)
    };
    s.sram_kb = [num("ifmap_sram_kb"), num("filter_sram_kb"), num("ofmap_sram_kb")];
    s.bandwidth = (row["bandwidth_mode"] == "USER").then(|| num("dram_bw_words_per_cycle"));
    s
}

fn mismatches(row: &HashMap<String, String>, got: &Report) -> Vec<String> {
    let json = got.to_json();
    let mut bad = Vec::new();
    let exact = [
        "total_cycles",
        "stall_cycles",
        "compute_cycles",
        "total_cycles_incl_prefetch",
        "Sr",
        "Sc",
        "T",
        "row_folds",
        "col_folds",
        "sram_ifmap_reads",
        "sram_filter_reads",
        "sram_ofmap_writes",
        "dram_ifmap_reads",
        "dram_filter_reads",
        "dram_ofmap_writes",
        "macs",
    ];
    for k in exact {
        let want: u64 = row[k].parse().unwrap();
        if json[k].as_u64() != Some(want) {
            bad.push(format!("{k}: got {} want {want}", json[k]));
        }
    }
    // The table keeps 6 significant digits.
    for k in ["overall_util_pct", "mapping_eff_pct", "compute_util_pct"] {
        let want: f64 = row[k].parse().unwrap();
        let g = json[k].as_f64().unwrap();
        if (g - want).abs() > 2e-5 * want.abs() + 1e-9 {
            bad.push(format!("{k}: got {g} want {want}"));
        }
    }
    bad
}

#[test]
fn every_reference_row_is_reproduced_exactly() {
    let rows = reference();
    assert_eq!(rows.len(), 47, "reference.csv should have 47 rows");
    println!(
        "{:<32} {:>2} {:>4} {:>9} {:>8} {:>7} {:>9} {:>9} {:>9} {:>8}  result",
        "case", "df", "mode", "total", "stall", "util%", "sram_if", "dram_if", "dram_fl", "ms"
    );
    let mut failures = Vec::new();
    for row in &rows {
        assert_eq!(row["status"], "ok");
        let got = scalesim::run(&setup(row)).unwrap_or_else(|e| panic!("{}: {e}", row["case"]));
        let bad = mismatches(row, &got);
        println!(
            "{:<32} {:>2} {:>4} {:>9} {:>8} {:>7.2} {:>9} {:>9} {:>9} {:>8.1}  {}",
            row["case"],
            row["dataflow"],
            row["bandwidth_mode"],
            got.total_cycles,
            got.stall_cycles,
            got.overall_util_pct,
            got.sram_ifmap_reads,
            got.dram.unwrap()[0],
            got.dram.unwrap()[1],
            got.wall_s * 1e3,
            if bad.is_empty() { "exact".to_string() } else { bad.join("; ") }
        );
        if !bad.is_empty() {
            failures.push(format!("{} {}: {}", row["case"], row["dataflow"], bad.join("; ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows differ:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}

#[test]
fn bad_setups_are_errors_not_panics() {
    let g = Gemm { m: 4, n: 4, k: 4 };
    let mut s = ScalesimSetup::gemm(g, 8, 8, Dataflow::Ws);
    s.sram_kb = [0, 1, 1];
    assert!(scalesim::run(&s).unwrap_err().to_string().contains("at least 1 kB"));
    let mut s = ScalesimSetup::gemm(g, 8, 8, Dataflow::Os);
    s.bandwidth = Some(0);
    assert!(scalesim::run(&s).unwrap_err().to_string().contains("bandwidth"));
    let s = ScalesimSetup::gemm(Gemm { m: 0, n: 4, k: 4 }, 8, 8, Dataflow::Is);
    assert!(scalesim::run(&s).is_err());
}
