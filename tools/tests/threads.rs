//! The host runtime's outputs do not depend on how many threads its pool has: every corpus
//! and bench program run by `hloc run --engine jit` with the pool at 1, 2, 3 and 4 threads
//! (`HLOC_THREADS`, which sizes the runtime's pool; large kernels split into that many
//! parts, unevenly for 3, oversubscribed on a small machine; large GEMMs into a grid of
//! blocks, 2 x 2 for a square one on 4; on 3 with two measuring knobs set, idle threads
//! spinning through the run (`HLOC_SPIN=1`) and three GEMM blocks per thread
//! (`HLOC_GEMM_BLOCKS=3`); on 7 with every kernel split as finely as it goes,
//! `HLOC_SPLIT_WORK=1`; and on 16, a server's grids of GEMM blocks, as small as 64 x 64 for
//! the bench transformer's 256 x 256 products) writes the same bytes.
//! Each output element is computed by one part, and a reduction's order is fixed by the
//! data, never by the thread count. An invalid `HLOC_THREADS` stops `hloc` at startup.

use std::path::{Path, PathBuf};
use std::process::Command;

fn programs() -> Vec<PathBuf> {
    let shared = hlo_tests::shared_dir();
    let mut files = Vec::new();
    for set in ["corpus", "bench"] {
        for f in hlo_tests::hlo_files(&shared.join(set)) {
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            if !name.ends_with(".debug.hlo") && !name.ends_with(".opt.hlo") {
                files.push(f);
            }
        }
    }
    files
}

/// The runtime's measuring knobs, removed from every run's environment unless set.
const KNOBS: [&str; 3] = ["HLOC_SPLIT_WORK", "HLOC_SPIN", "HLOC_GEMM_BLOCKS"];

/// `hloc run` of `file` with `threads` pool threads and the knobs `env` ([`KNOBS`]) set: the
/// exit status and the outputs' bytes.
fn run(file: &Path, (threads, env): (usize, &[(&str, &str)]), out: &Path) -> (bool, Vec<u8>) {
    let _ = std::fs::remove_file(out);
    let inputs = file.with_extension("inputs.npz");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hloc"));
    cmd.arg("run").arg(file).args(["--engine", "jit", "-o"]).arg(out);
    if inputs.exists() {
        cmd.arg("--inputs").arg(&inputs);
    }
    cmd.env_remove("RAYON_NUM_THREADS").env("HLOC_THREADS", threads.to_string());
    for knob in KNOBS {
        cmd.env_remove(knob);
    }
    cmd.envs(env.iter().copied());
    let o = cmd.output().expect("hloc runs");
    (o.status.success(), std::fs::read(out).unwrap_or_default())
}

#[test]
fn outputs_are_bit_identical_on_1_2_3_4_7_and_16_threads() {
    // 7: every kernel with an outer extent of at least 2 split, however small.
    // 3: with idle threads spinning and three GEMM blocks per thread.
    let spin_and_blocks: &[(&str, &str)] = &[("HLOC_SPIN", "1"), ("HLOC_GEMM_BLOCKS", "3")];
    let counts: [(usize, &[(&str, &str)]); 5] =
        [(2, &[]), (3, spin_and_blocks), (4, &[]), (7, &[("HLOC_SPLIT_WORK", "1")]), (16, &[])];
    let dir_guard =
        tempfile::Builder::new().prefix("hloc-threads-").tempdir().expect("a temporary directory");
    let dir = dir_guard.path();
    let files = programs();
    assert!(files.len() >= 50, "the corpus and bench programs: {}", files.len());
    let mut ran = 0;
    let mut differ = Vec::new();
    for file in &files {
        let out = dir.join("out.npz");
        let one = run(file, (1, &[]), &out);
        for threads in counts {
            let other = run(file, threads, &out);
            if other != one {
                differ.push(format!("{} on {threads:?} threads", file.display()));
            }
        }
        ran += usize::from(one.0);
    }
    assert!(differ.is_empty(), "outputs differ from one thread's:\n{}", differ.join("\n"));
    // Every program runs on the JIT (a refusal would compare two failures).
    assert!(ran >= files.len() - 2, "{ran} of {} programs ran", files.len());
    println!("{ran} programs, the same bytes on 1 and {counts:?} (threads, knobs)");
}

#[test]
fn an_invalid_thread_count_stops_hloc_at_startup() {
    let file = programs().into_iter().next().expect("a program");
    for bad in ["0", "many", "-2"] {
        let o = Command::new(env!("CARGO_BIN_EXE_hloc"))
            .arg("check")
            .arg(&file)
            .env("HLOC_THREADS", bad)
            .output()
            .expect("hloc runs");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "HLOC_THREADS={bad} accepted");
        assert!(err.contains("HLOC_THREADS"), "HLOC_THREADS={bad}: {err}");
        assert!(!err.contains("panicked"), "HLOC_THREADS={bad}: {err}");
    }
}
