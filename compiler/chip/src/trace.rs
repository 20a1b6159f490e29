//! Chrome-trace timelines (the JSON Perfetto and `chrome://tracing` open) of a simulated
//! program: one track per array activity (stationary loads, streaming, drain) and one per
//! DMA direction. The time axis is in cycles: one trace microsecond is one MXU cycle.

use serde_json::{Value, json};

use super::config::Dataflow;
use super::tile_ir::TileProgram;
use super::timeline::Timeline;

const TRACKS: [&str; 5] = ["weight load", "stream", "drain", "DMA HBM->VMEM", "DMA VMEM->HBM"];

fn slice(name: String, tid: usize, start: u64, end: u64, args: Value) -> Value {
    json!({ "name": name, "cat": TRACKS[tid - 1], "ph": "X", "pid": 1, "tid": tid, "ts": start, "dur": end.saturating_sub(start).max(1), "args": args })
}

/// The trace of `tl` (a run of `p`) as a Chrome-trace JSON object.
pub fn chrome_trace(p: &TileProgram, tl: &Timeline, title: &str) -> Value {
    let mut events =
        vec![json!({ "name": "process_name", "ph": "M", "pid": 1, "args": { "name": title } })];
    for (i, name) in TRACKS.iter().enumerate() {
        events.push(json!({ "name": "thread_name", "ph": "M", "pid": 1, "tid": i + 1, "args": { "name": name } }));
        events.push(json!({ "name": "thread_sort_index", "ph": "M", "pid": 1, "tid": i + 1, "args": { "sort_index": i } }));
    }
    let (r, c) = (p.rows, p.cols);
    for (g, (fold, t)) in p.folds.iter().zip(&tl.folds).enumerate() {
        let args = json!({
            "fold": g,
            "m": [fold.m.start, fold.m.end], "n": [fold.n.start, fold.n.end], "k": [fold.k.start, fold.k.end],
            "stream_start_cycle": t.stream_start, "last_out_cycle": t.last_out,
        });
        if let (Some(l), true) = (t.load_start, p.dataflow != Dataflow::Os) {
            // The tile enters over R cycles and lands in the last column C − 1 cycles later.
            let tile = fold.stationary(p.dataflow).map(|s| s.to_string()).unwrap_or_default();
            events.push(slice(format!("load {tile}"), 1, l, l + r + c - 1, args.clone()));
        }
        let streamed =
            fold.streamed(p.dataflow).iter().map(|s| s.to_string()).collect::<Vec<_>>().join(" + ");
        events.push(slice(
            format!("stream {streamed}"),
            2,
            t.stream_start,
            t.stream_end + 1,
            args.clone(),
        ));
        events.push(slice(
            format!("drain {}", fold.output()),
            3,
            t.stream_end + 1,
            t.last_out + 1,
            args,
        ));
    }
    for d in &tl.dma {
        let fold = &p.folds[d.fold];
        let (tid, tile) = match d.input {
            Some(i) => (4, fold.dma_in[i].tile.to_string()),
            None => (5, fold.output().to_string()),
        };
        let args = json!({ "fold": d.fold, "bytes": d.bytes, "issue_cycle": d.issue, "done_cycle": d.done });
        events.push(slice(format!("{tile} {} B", d.bytes), tid, d.start, d.done, args));
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "time_unit": "1 trace microsecond = 1 MXU cycle",
            "program": format!("gemm m={} n={} k={} {} {}x{} {}", p.gemm.m, p.gemm.n, p.gemm.k, p.dataflow, r, c, p.schedule.name()),
            "compute_cycles": tl.compute_cycles,
            "total_cycles": tl.total_cycles,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TpuConfig;
    use crate::tile_ir::{Gemm, Schedule};
    use crate::timeline;
    use crate::tpu_mode;

    #[test]
    fn trace_has_one_slice_per_fold_activity_and_dma() {
        let cfg = TpuConfig::v3();
        let p = TileProgram::gemm(Gemm { m: 256, n: 256, k: 256 }, &cfg, Schedule::Pipelined);
        let tl = timeline::simulate(&p, Some(tpu_mode::dma_engine(&cfg)));
        let v = chrome_trace(&p, &tl, "test");
        let ev = v["traceEvents"].as_array().unwrap();
        let count = |tid: u64| ev.iter().filter(|e| e["ph"] == "X" && e["tid"] == tid).count();
        assert_eq!(p.folds.len(), 4);
        assert_eq!((count(1), count(2), count(3)), (4, 4, 4));
        assert_eq!(count(4) + count(5), tl.dma.len());
        // Slices never end before they start, and the last drain ends at the compute end.
        assert!(ev.iter().filter(|e| e["ph"] == "X").all(|e| e["dur"].as_u64().unwrap() >= 1));
        let last_drain = ev
            .iter()
            .filter(|e| e["ph"] == "X" && e["tid"] == 3)
            .map(|e| e["ts"].as_u64().unwrap() + e["dur"].as_u64().unwrap())
            .max();
        assert_eq!(last_drain, Some(tl.compute_cycles));
    }
}
