//! The MXU models against each other and against plain matrix multiplication:
//! the PE-level model equals the fast model cycle for cycle (every fold event, every DMA,
//! every counter) on all small arrays, under SCALE-Sim's schedule and the TPU schedule with
//! and without DMA waits; its product equals a plain matrix product (small integers, so
//! exact in any order; `hlo-tpu`'s `mxu_numerics.rs` checks rounding against the interpreter).

use hlo_chip::config::{Dataflow, TpuConfig};
use hlo_chip::pe_array;
use hlo_chip::tile_ir::{Gemm, Schedule, TileProgram};
use hlo_chip::timeline::{self, DmaEngine};

fn cfg(r: u64, c: u64, df: Dataflow, acc_rows: u64) -> TpuConfig {
    TpuConfig {
        rows: r,
        cols: c,
        dataflow: df,
        accumulator_bytes: 2 * acc_rows * c * 4,
        ..TpuConfig::v3()
    }
}

/// The same with VMEM so small that input DMAs run only `depth`-ish folds ahead.
fn with_prefetch(mut c: TpuConfig, bytes: u64) -> TpuConfig {
    c.vmem_bytes = bytes;
    c
}

/// Small integers (exact in bf16 and in f32 sums), different per element.
fn operands(g: Gemm) -> (Vec<f32>, Vec<f32>) {
    let a = (0..g.m * g.k).map(|i| ((i * 7 + 3) % 11) as f32 - 5.0).collect();
    let b = (0..g.k * g.n).map(|i| ((i * 5 + 1) % 13) as f32 - 6.0).collect();
    (a, b)
}

fn matmul(g: Gemm, a: &[f32], b: &[f32]) -> Vec<f32> {
    let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
    let mut c = vec![0.0f32; m * n];
    for i in 0..m {
        for p in 0..k {
            for j in 0..n {
                c[i * n + j] += a[i * k + p] * b[p * n + j];
            }
        }
    }
    c
}

fn check(g: Gemm, c: &TpuConfig, schedule: Schedule, dma: Option<(f64, u64)>) {
    let (a, b) = operands(g);
    check_with(g, c, schedule, dma, &a, &b, &matmul(g, &a, &b));
}

fn check_with(
    g: Gemm,
    c: &TpuConfig,
    schedule: Schedule,
    dma: Option<(f64, u64)>,
    a: &[f32],
    b: &[f32],
    expect: &[f32],
) {
    let p = TileProgram::gemm(g, c, schedule);
    let engine = || dma.map(|(bw, lat)| DmaEngine::new(bw, lat));
    let fast = timeline::simulate(&p, engine());
    let pe =
        pe_array::simulate(&p, a, b, engine(), None).unwrap_or_else(|e| panic!("{g:?} {c:?}: {e}"));
    if pe.timeline != fast {
        for (i, (x, y)) in pe.timeline.folds.iter().zip(&fast.folds).enumerate() {
            if x != y {
                eprintln!("fold {i}: pe {x:?}\n        fast {y:?}");
            }
        }
        panic!(
            "PE and fast models differ for {g:?} on {}x{} {} {:?} dma {dma:?}\npe   {:?} {:?} {}/{}\nfast {:?} {:?} {}/{}",
            c.rows,
            c.cols,
            c.dataflow,
            schedule,
            pe.timeline.counters,
            pe.timeline.dma.len(),
            pe.timeline.compute_cycles,
            pe.timeline.total_cycles,
            fast.counters,
            fast.dma.len(),
            fast.compute_cycles,
            fast.total_cycles
        );
    }
    assert_eq!(pe.out, expect, "{g:?} {}x{} {}", c.rows, c.cols, c.dataflow);
}

#[test]
fn smoke() {
    for df in Dataflow::ALL {
        for s in [Schedule::Sequential, Schedule::Pipelined] {
            check(Gemm { m: 5, n: 7, k: 9 }, &cfg(3, 4, df, 2), s, None);
            check(Gemm { m: 5, n: 7, k: 9 }, &cfg(3, 4, df, 2), s, Some((3.0, 4)));
        }
    }
}

/// SCALE-Sim's closed forms (the sequential schedule's cycle count is F·L).
fn closed_form(g: Gemm, r: u64, c: u64, df: Dataflow) -> u64 {
    let (sr, sc, t, l) = match df {
        Dataflow::Ws => (g.k, g.n, g.m, 2 * r + c + g.m - 2),
        Dataflow::Is => (g.k, g.m, g.n, 2 * r + c + g.n - 2),
        Dataflow::Os => (g.m, g.n, g.k, r + c + g.k - 2),
    };
    let _ = t;
    sr.div_ceil(r) * sc.div_ceil(c) * l
}

#[test]
fn sequential_schedule_is_scalesim_closed_form() {
    for df in Dataflow::ALL {
        let g = Gemm { m: 5, n: 7, k: 9 };
        let c = cfg(3, 4, df, 2);
        let p = TileProgram::gemm(g, &c, Schedule::Sequential);
        let (a, b) = operands(g);
        let pe = pe_array::simulate(&p, &a, &b, None, None).unwrap();
        eprintln!("{df}: {} folds {:?}", pe.timeline.compute_cycles, pe.timeline.counters);
        assert_eq!(pe.timeline.compute_cycles, closed_form(g, 3, 4, df));
    }
}

/// Every variant of one shape: SCALE-Sim's sequential schedule, the pipelined schedule
/// with unlimited bandwidth, and (arrays up to 8x8, to bound the debug-build test time)
/// with a slow HBM channel that puts DMA waits on the critical path.
fn check_all_schedules(g: Gemm, r: u64, c: u64, df: Dataflow) {
    // Accumulators for 3 rows per tile: the streamed dimension is tiled too.
    let conf = cfg(r, c, df, 3);
    let (a, b) = operands(g);
    let expect = matmul(g, &a, &b);
    check_with(g, &conf, Schedule::Sequential, None, &a, &b, &expect);
    check_with(g, &conf, Schedule::Pipelined, None, &a, &b, &expect);
    if r.max(c) <= 8 {
        // Prefetch depth 2 (tiny VMEM) and 8 (a whole v3 VMEM).
        check_with(
            g,
            &with_prefetch(conf.clone(), 64),
            Schedule::Pipelined,
            Some((5.0, 7)),
            &a,
            &b,
            &expect,
        );
        check_with(g, &conf, Schedule::Pipelined, Some((5.0, 7)), &a, &b, &expect);
    }
}

/// All arrays up to 4x4 with every M, N, K up to two folds and a partial third.
fn exhaustive_small(df: Dataflow) {
    for r in 1..=4 {
        for c in 1..=4 {
            let top = 2 * r.max(c) + 1;
            for m in 1..=top {
                for n in 1..=top {
                    for k in 1..=top {
                        check_all_schedules(Gemm { m, n, k }, r, c, df);
                    }
                }
            }
        }
    }
}

/// All arrays R, C = 1..=16 with the shapes at fold boundaries: one element, one past
/// the array's rows and columns (a ragged second fold), and a third partial fold.
fn boundaries(df: Dataflow) -> usize {
    let mut runs = 0;
    for r in 1..=16u64 {
        for c in 1..=16u64 {
            let mut dims = vec![1, r + 1, c + 1, 2 * r.max(c) + 1];
            dims.sort();
            dims.dedup();
            for &m in &dims {
                for &n in &dims {
                    for &k in &dims {
                        check_all_schedules(Gemm { m, n, k }, r, c, df);
                        runs += 1;
                    }
                }
            }
        }
    }
    runs
}

#[test]
fn pe_equals_fast_model_ws() {
    let t0 = std::time::Instant::now();
    exhaustive_small(Dataflow::Ws);
    let t1 = std::time::Instant::now();
    let n = boundaries(Dataflow::Ws);
    eprintln!("ws: small arrays {:?}; {n} boundary shapes in {:?}", t1 - t0, t1.elapsed());
}

#[test]
fn pe_equals_fast_model_os() {
    exhaustive_small(Dataflow::Os);
    boundaries(Dataflow::Os);
}

#[test]
fn pe_equals_fast_model_is() {
    exhaustive_small(Dataflow::Is);
    boundaries(Dataflow::Is);
}
