//! The runtime's thread pools and how parallel work is split over them.
//!
//! Parallel work (split loop kernels and row chains, scatters by the rows their windows
//! land in, sorts over independent rows, the GEMM crate's and the convolution's threads)
//! runs on a rayon pool of the runtime's own, never on the process's global pool, and the
//! embedder's pools are left alone. Each pool's
//! threads enter the host floating-point mode when they start ([`crate::fpenv`]), so they
//! flush subnormals as the generated kernels do.
//!
//! # Pool size
//!
//! A program runs on the pool of the size its options say ([`crate::CompileOptions::threads`],
//! [`crate::Runtime::with_threads`], [`crate::Program::with_threads`]); without one, on the
//! default pool, whose size is, first found:
//!
//! 1. `HLOC_THREADS` (a positive integer);
//! 2. `RAYON_NUM_THREADS` (a positive integer; it sized the runtime's pool implicitly
//!    before `HLOC_THREADS` existed, and is still honoured for compatibility);
//! 3. [`std::thread::available_parallelism`] (which respects `taskset` and cgroup limits);
//!    1 if even that is unknown.
//!
//! An invalid value (0, not a number) is skipped, as if unset: the library never fails on
//! it ([`env_threads`] reports it, and the `hloc` CLI refuses to start with it). Pools are
//! made lazily, once per size per process, and kept.
//!
//! # Splitting
//!
//! [`in_parts`] runs a range `0..extent` as `parts` contiguous, balanced ranges, one per
//! rayon task. Every kernel the runtime splits computes each output element entirely in
//! the part that owns its unit (its leading indices), with every reduction in an order fixed by the data,
//! so results are bit-identical whatever the number of threads (`tools/tests/threads.rs`).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Minimum elements of work each part of a split loop kernel, row chain, select-and-scatter,
/// sort or top-k gets (a kernel splits into at most `work / MIN_WORK_PER_PART` parts); the
/// environment variable `HLOC_SPLIT_WORK` overrides it, for measuring ([`min_work_per_part`]).
///
/// Measured 2026-11-28 (release, this 2-core AVX-512 host, `HLOC_SPLIT_WORK=1024 hloc run
/// --repeat 300` (sorts 30) of one kernel, median µs, 1 part / 2 parts, two runs each).
/// Another job was compiling at load 4-6 during the first measurement and had finished
/// (load 1.4-2) during the second, shown here:
///
/// | kind (f32)                            | 8k elements | 32k        | 64k        | 256k          |
/// |---------------------------------------|-------------|------------|------------|---------------|
/// | elementwise `x*y+x`, rows of 256      | 1.9 / 15-25 | 7.0 / 10-23 | 15.0 / 14-28 | 55-59 / 54  |
/// | row sum, rows of 256                  | 0.7 / 11-17 | 2.4 / 6-14 | 4.6 / 9-21  | 18.0 / 35-36  |
/// | column sum over 64 rows               | 0.8 / 0.8 (one block) | 2.7 / 17-18 | 5.2 / 17-22 | 22.6 / 32-40 |
/// | row chain (softmax: exp, sum, divide) | 4.9 / 21    | 19.1 / 16-36 | 38.2 / 26-56 | 152 / 120-171 |
/// | sort, rows of 64                      | 550 / 250-267 | 2810 / 1411-1417 | 5640 / 2880 | 22640 / 11400 |
///
/// Loop kernels, row reductions, column reductions and row chains behave alike: handing a
/// part to the second thread costs 5-25 µs here (the worker wakes from sleep between the
/// runs of one kernel; inside a step, with the other core loaded, 12-15 µs), so two parts
/// win only from about 64k-256k elements, erratically; under load (first measurement) they
/// never won below 256k. One constant serves them all, and it stays where the two-halves
/// split put it (each part at least 32k elements, 64k to split in two): on 2 threads every
/// loop kernel and row chain splits exactly as before, and on more threads only kernels with
/// 32k elements per thread split further. Sorts cost ~300 times more per element and halve
/// from 8k elements on; they weigh their comparisons accordingly (`library::sort`).
pub(crate) const MIN_WORK_PER_PART: u64 = 1 << 15;

/// [`MIN_WORK_PER_PART`], or `HLOC_SPLIT_WORK` when it is a positive integer (read once).
pub(crate) fn min_work_per_part() -> u64 {
    static MIN: OnceLock<u64> = OnceLock::new();
    *MIN.get_or_init(|| {
        std::env::var("HLOC_SPLIT_WORK")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|&n| n > 0)
            .unwrap_or(MIN_WORK_PER_PART)
    })
}

/// Whether the pool's other threads wait for work spinning during a run instead of going
/// to sleep between kernels ([`keeping_awake`]): `HLOC_SPIN=1`, read once. Off by default.
/// A knob for measuring what hand-offs to sleeping threads cost on a many-core host
/// (`tools/device_threads.sh` runs the transformer steps with and without it). On this
/// 2-core host, two threads, it took the bench transformer SGD step from 66.3-66.7 to
/// 65.5 ms and the CNN step from 4.79 to 4.58-4.65 ms (`hloc run --repeat 20/100`,
/// alternated), the other steps within noise: too little to spin by default, which burns
/// the cores an embedder's other work could use between kernels.
fn spin_wait() -> bool {
    static SPIN: OnceLock<bool> = OnceLock::new();
    *SPIN.get_or_init(|| std::env::var("HLOC_SPIN").is_ok_and(|v| v.trim() == "1"))
}

/// Runs `f` on the calling pool thread; with [`spin_wait`], the pool's other threads run
/// stolen work or spin (`pause`) until `f` returns, instead of sleeping when they run out
/// of work, so the parts of the next split kernel start without a wake-up. The results are
/// `f`'s whatever the setting: it only changes which thread waits how.
pub(crate) fn keeping_awake<R>(f: impl FnOnce() -> R) -> R {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (Some(me), true) = (rayon::current_thread_index(), spin_wait()) else { return f() };
    let done = AtomicBool::new(false);
    let mut out = None;
    rayon::in_place_scope(|s| {
        for _ in 1..rayon::current_num_threads() {
            s.spawn(|_| {
                // A spinner this thread pops itself (while it waits inside `f`, or after
                // it) returns at once: it must not hold the thread `f` runs on.
                if rayon::current_thread_index() == Some(me) {
                    return;
                }
                while !done.load(Ordering::Acquire) {
                    if rayon::yield_now() != Some(rayon::Yield::Executed) {
                        std::hint::spin_loop();
                    }
                }
            });
        }
        out = Some(f());
        done.store(true, Ordering::Release);
    });
    out.expect("the scope ran `f`")
}

/// The number of parts `0..extent` is split into for `work` elements on `threads` threads:
/// `min(threads, extent, work / min_per_part)`, at least 1.
pub(crate) fn parts(threads: usize, extent: i64, work: u64, min_per_part: u64) -> usize {
    let by_work = work / min_per_part.max(1);
    let by_extent = u64::try_from(extent).unwrap_or(0);
    (threads as u64).min(by_extent).min(by_work).max(1) as usize
}

/// Part `p` of `0..extent` split into `parts` contiguous ranges whose lengths differ by at
/// most one (the first `extent % parts` are the longer ones).
pub(crate) fn part(extent: i64, parts: usize, p: usize) -> (i64, i64) {
    let (n, p) = (parts.max(1) as i64, p as i64);
    let (q, r) = (extent / n, extent % n);
    let lo = p * q + p.min(r);
    (lo, lo + q + i64::from(p < r))
}

/// Runs `run(lo, hi)` over `0..extent`: on the calling thread when the work is too small to
/// split (fewer than two parts by [`parts`], [`min_work_per_part`] elements each) or the
/// pool has one thread, else as that many balanced contiguous parts ([`part`]) on the
/// current pool ([`current`]), returning when all are done. Returns the number of parts.
pub(crate) fn in_parts(extent: i64, work: u64, run: impl Fn(i64, i64) + Sync) -> usize {
    let pool = current();
    let threads = pool.map_or(1, |p| p.current_num_threads());
    let n = parts(threads, extent, work, min_work_per_part());
    match pool {
        Some(pool) if n > 1 => pool.install(|| {
            use rayon::prelude::*;
            (0..n).into_par_iter().for_each(|p| {
                let (lo, hi) = part(extent, n, p);
                run(lo, hi)
            })
        }),
        _ => run(0, extent),
    }
    n
}

/// Runs `f` on the current pool ([`current`]): its threads are in the host floating-point
/// mode for their whole life, so a dot splits across threads that all flush as the kernels
/// do (as XLA's intra-op threads do). Without a pool (threads could not be spawned) `f`
/// runs here, in the caller's mode.
pub(crate) fn on_library_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    match current() {
        Some(p) => p.install(f),
        None => crate::fpenv::with_host_fp_mode(f),
    }
}

thread_local! {
    /// The pool this thread's runs use (set by [`with_threads`] for one run).
    static CURRENT: std::cell::Cell<Option<&'static rayon::ThreadPool>> =
        const { std::cell::Cell::new(None) };
}

/// Runs `f` with the pool of `threads` threads (`None`: the default pool) as this thread's
/// [`current`] pool, restoring the previous one afterwards (also when `f` panics).
pub(crate) fn with_threads<R>(threads: Option<usize>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<&'static rayon::ThreadPool>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(self.0));
        }
    }
    let pool = pool(threads.unwrap_or_else(default_threads));
    let _restore = Restore(CURRENT.with(|c| c.replace(pool)));
    f()
}

/// The pool parallel work of this thread runs on: the one [`with_threads`] set, else the
/// default pool. `None` when its threads could not be spawned.
pub(crate) fn current() -> Option<&'static rayon::ThreadPool> {
    CURRENT.with(|c| c.get()).or_else(|| pool(default_threads()))
}

/// The runtime's pool of `threads` threads (at least 1), made on first use and kept for
/// the life of the process; `None` when its threads could not be spawned.
fn pool(threads: usize) -> Option<&'static rayon::ThreadPool> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Option<&'static rayon::ThreadPool>>>> =
        OnceLock::new();
    let threads = threads.max(1);
    let mut pools = POOLS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    *pools.entry(threads).or_insert_with(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(move |i| format!("hlo-runtime-{threads}-{i}"))
            .start_handler(|_| crate::fpenv::enter_host_fp_mode_for_life())
            .build()
            .ok()
            .map(|p| &*Box::leak(Box::new(p)))
    })
}

/// The default pool's size (see the module documentation): `HLOC_THREADS`, else
/// `RAYON_NUM_THREADS`, else the available parallelism; invalid values are skipped.
/// Read once per process.
pub fn default_threads() -> usize {
    static DEFAULT: OnceLock<usize> = OnceLock::new();
    *DEFAULT.get_or_init(|| {
        let var = |name: &str| std::env::var(name).ok().and_then(|v| parse_threads(&v).ok());
        var("HLOC_THREADS")
            .or_else(|| var("RAYON_NUM_THREADS"))
            .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
            .unwrap_or(1)
    })
}

/// `HLOC_THREADS` as the runtime reads it: `Ok(None)` when unset, `Ok(Some(n))` for a
/// positive integer, and an error saying what is wrong otherwise (the runtime then skips it;
/// a command-line tool should refuse to start).
pub fn env_threads() -> Result<Option<usize>, String> {
    match std::env::var("HLOC_THREADS") {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => {
            Err(format!("HLOC_THREADS={v:?}: expected a positive number of threads"))
        }
        Ok(v) => parse_threads(&v).map(Some).map_err(|e| format!("HLOC_THREADS={v:?}: {e}")),
    }
}

/// A thread count: a positive integer (surrounding spaces allowed).
fn parse_threads(v: &str) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(0) => Err("expected a positive number of threads, not 0".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("expected a positive number of threads".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_the_extent_exactly_and_are_balanced() {
        for extent in [0i64, 1, 2, 3, 7, 10, 64, 100, 1001] {
            for n in 1..=12usize {
                let mut next = 0;
                let mut lens = Vec::new();
                for p in 0..n {
                    let (lo, hi) = part(extent, n, p);
                    assert_eq!(
                        lo, next,
                        "extent {extent} in {n}: part {p} starts where the last ended"
                    );
                    assert!(hi >= lo);
                    lens.push(hi - lo);
                    next = hi;
                }
                assert_eq!(next, extent, "extent {extent} in {n} parts: covered exactly");
                let (min, max) = (lens.iter().min().unwrap(), lens.iter().max().unwrap());
                assert!(max - min <= 1, "extent {extent} in {n}: {lens:?} balanced");
            }
        }
    }

    #[test]
    fn parts_follow_threads_extent_and_work() {
        let m = MIN_WORK_PER_PART;
        assert_eq!(parts(8, 100, 100 * m, m), 8);
        assert_eq!(parts(8, 3, 100 * m, m), 3);
        assert_eq!(parts(8, 100, 5 * m + 1, m), 5);
        assert_eq!(parts(8, 100, m - 1, m), 1);
        assert_eq!(parts(1, 100, 100 * m, m), 1);
        assert_eq!(parts(8, 0, 100 * m, m), 1);
        assert_eq!(parts(8, -1, 100 * m, m), 1);
    }

    #[test]
    fn in_parts_runs_every_index_once_on_a_pool_of_the_asked_size() {
        for threads in [1usize, 2, 3, 7] {
            with_threads(Some(threads), || {
                assert_eq!(current().map(|p| p.current_num_threads()), Some(threads));
                let seen = Mutex::new(vec![0u32; 1000]);
                in_parts(1000, 1000 * min_work_per_part(), |lo, hi| {
                    let mut s = seen.lock().unwrap();
                    for i in lo..hi {
                        s[i as usize] += 1;
                    }
                });
                assert!(seen.into_inner().unwrap().iter().all(|&c| c == 1));
            });
        }
    }

    #[test]
    fn thread_counts_parse() {
        assert_eq!(parse_threads("4"), Ok(4));
        assert_eq!(parse_threads(" 12 "), Ok(12));
        assert!(parse_threads("0").is_err());
        assert!(parse_threads("-1").is_err());
        assert!(parse_threads("many").is_err());
        assert!(parse_threads("").is_err());
    }

    #[test]
    fn pools_flush_subnormals_on_every_thread() {
        let pool = pool(3).expect("a pool");
        let modes: Vec<u32> = pool.broadcast(|_| crate::fpenv::read_mxcsr());
        #[cfg(target_arch = "x86_64")]
        for m in modes {
            let both = crate::fpenv::MXCSR_FTZ | crate::fpenv::MXCSR_DAZ;
            assert_eq!(m & both, both);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = modes;
    }
}
