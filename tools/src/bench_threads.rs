//! `hloc bench threads`: the bench set at 1, 2 and all threads, ours beside XLA CPU given
//! the same cores. Each thread count is one child `hloc bench jit --xla --json` pinned with
//! `taskset` to `t` of the CPUs this process may use, one per physical core first (SMT
//! siblings last; the header says when `t` CPUs are fewer cores), with `HLOC_THREADS=t`:
//! the runtime's pool and XLA's intra-op pool (sized from the CPU affinity) both get
//! exactly those cores. The table gives, per case and thread count, our median time, XLA's, the
//! ratio (median of the runs' ratios) and our parallel efficiency `T1 / (t·Tt)`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use hlo_tools::error::CliError;

/// One thread count's medians: case → (ours µs, XLA µs, ratio).
type Medians = BTreeMap<String, (f64, Option<f64>, Option<f64>)>;

/// The CPUs this process may run on (`Cpus_allowed_list` of `/proc/self/status`, e.g.
/// `0-3,8`), in order; `None` where that is not readable (not Linux).
fn allowed_cpus() -> Option<Vec<usize>> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?.trim();
    let mut cpus = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.trim().parse::<usize>().ok()?..=b.trim().parse().ok()?),
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// The physical core of each CPU (`(package, core)` from
/// `/sys/devices/system/cpu/cpuN/topology`), `None` for one whose topology is not readable.
fn core_of(cpu: usize) -> Option<(u64, u64)> {
    let read = |f: &str| -> Option<u64> {
        let p = format!("/sys/devices/system/cpu/cpu{cpu}/topology/{f}");
        std::fs::read_to_string(p).ok()?.trim().parse().ok()
    };
    Some((read("physical_package_id")?, read("core_id")?))
}

/// `cpus` ordered one per physical core first, then their SMT siblings (each group in
/// the order given), so that the first `t` of them are `t` cores where there are that
/// many: on a host whose siblings are numbered next to each other, the first two CPUs
/// would be one core. `core` gives a CPU's core ([`core_of`]); one of unknown topology
/// counts as a core of its own.
fn spread_over_cores(cpus: &[usize], core: impl Fn(usize) -> Option<(u64, u64)>) -> Vec<usize> {
    let mut seen = std::collections::HashMap::new();
    let mut rank = Vec::with_capacity(cpus.len());
    for (i, &c) in cpus.iter().enumerate() {
        let n = seen.entry(core(c).unwrap_or((u64::MAX, i as u64))).or_insert(0usize);
        rank.push((*n, i, c));
        *n += 1;
    }
    rank.sort_unstable();
    rank.into_iter().map(|(_, _, c)| c).collect()
}

/// The number of distinct physical cores among `cpus` (by `core`, as
/// [`spread_over_cores`]).
fn cores_among(cpus: &[usize], core: impl Fn(usize) -> Option<(u64, u64)>) -> usize {
    let keys: std::collections::HashSet<_> =
        cpus.iter().enumerate().map(|(i, &c)| core(c).unwrap_or((u64::MAX, i as u64))).collect();
    keys.len()
}

/// `cpus` as `taskset -c` takes them (`0,1,2,3,8`).
fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")
}

fn read_medians(path: &Path) -> Result<Medians, CliError> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let rows = v.get("rows").and_then(|r| r.as_array()).cloned().unwrap_or_default();
    Ok(rows
        .iter()
        .filter_map(|r| {
            let case = r.get("case")?.as_str()?.to_string();
            let ours = r.get("ours_us")?.as_f64()?;
            let xla = r.get("xla_us").and_then(|x| x.as_f64());
            let ratio = r.get("ratio").and_then(|x| x.as_f64());
            Some((case, (ours, xla, ratio)))
        })
        .collect())
}

/// Runs the bench set at each of `threads` (default 1, 2 and every allowed CPU) and
/// prints the scaling table.
pub fn threads(
    threads: &[usize],
    runs: usize,
    repeat: usize,
    measure_xla: bool,
) -> Result<(), CliError> {
    let cpus = allowed_cpus().ok_or("the CPUs this process may use are not known (Linux only)")?;
    let cpus = spread_over_cores(&cpus, core_of);
    let mut counts: Vec<usize> =
        if threads.is_empty() { vec![1, 2, cpus.len()] } else { threads.to_vec() };
    counts.retain(|&t| t >= 1);
    counts.sort_unstable();
    counts.dedup();
    if let Some(&t) = counts.iter().find(|&&t| t > cpus.len()) {
        return Err(format!(
            "{t} threads asked for, but this process may use {} CPUs ({})",
            cpus.len(),
            cpu_list(&cpus)
        )
        .into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("this executable: {e}"))?;
    let dir = std::env::temp_dir().join(format!("hloc-bench-threads-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut by_count: Vec<(usize, Medians)> = Vec::new();
    for &t in &counts {
        let pinned = cpu_list(&cpus[..t]);
        let json = dir.join(format!("t{t}.json"));
        let cores = cores_among(&cpus[..t], core_of);
        let on = if cores < t { format!(" ({cores} physical cores)") } else { String::new() };
        outln!("== {t} thread(s): taskset -c {pinned}{on}, HLOC_THREADS={t}");
        let mut cmd = Command::new("taskset");
        cmd.args(["-c", &pinned])
            .arg(&exe)
            .args(["bench", "jit", "--bench-set", "--runs", &runs.to_string()])
            .args(["--repeat", &repeat.to_string(), "--json"])
            .arg(&json)
            .env("HLOC_THREADS", t.to_string());
        if measure_xla {
            cmd.arg("--xla");
        }
        let status = cmd.status().map_err(|e| format!("taskset (util-linux): {e}"))?;
        if !status.success() {
            return Err(format!("the bench at {t} thread(s) failed ({status})").into());
        }
        by_count.push((t, read_medians(&json)?));
    }
    let _ = std::fs::remove_dir_all(&dir);
    print_table(&by_count, runs);
    Ok(())
}

fn print_table(by_count: &[(usize, Medians)], runs: usize) {
    let Some((_, first)) = by_count.first() else { return };
    let one = by_count.iter().find(|(t, _)| *t == 1).map(|(_, m)| m);
    let mut head = format!("{:<26}", "case");
    for (t, _) in by_count {
        head += &format!(" | {:>9} {:>9} {:>6} {:>5}", format!("ours@{t}"), "XLA", "ratio", "eff");
    }
    outln!("{head}");
    let mut worst: BTreeMap<usize, f64> = BTreeMap::new();
    for case in first.keys() {
        let mut line = format!("{case:<26}");
        for (t, m) in by_count {
            let Some(&(ours, xla, ratio)) = m.get(case) else {
                line += &format!(" | {:>32}", "-");
                continue;
            };
            let eff = one.and_then(|o| o.get(case)).map(|&(o1, ..)| o1 / (*t as f64 * ours));
            if let Some(r) = ratio {
                let w = worst.entry(*t).or_insert(0.0);
                *w = w.max(r);
            }
            line += &format!(
                " | {ours:>9.1} {} {} {}",
                xla.map_or(format!("{:>9}", "-"), |x| format!("{x:>9.1}")),
                ratio.map_or(format!("{:>6}", "-"), |r| format!("{r:>5.2}x")),
                eff.map_or(format!("{:>5}", "-"), |e| format!("{:>4.0}%", e * 100.0)),
            );
        }
        outln!("{line}");
    }
    for (t, w) in &worst {
        outln!("{t} thread(s): worst ratio {w:.2}x");
    }
    outln!(
        "(µs: median over {runs} run(s) of each run's median; ratio: median of the runs' ours/XLA; eff: ours at 1 thread / (t x ours at t); both pinned with taskset to the same CPUs)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpus_spread_one_per_core_before_siblings() {
        // Siblings numbered next to each other (cores 0-3 as CPUs 0-7), or apart
        // (cores 0-3 as CPUs 0-3 and 4-7), and a CPU of unknown topology.
        let adjacent = |c: usize| Some((0, (c / 2) as u64));
        assert_eq!(
            spread_over_cores(&[0, 1, 2, 3, 4, 5, 6, 7], adjacent),
            [0, 2, 4, 6, 1, 3, 5, 7]
        );
        assert_eq!(cores_among(&[0, 1, 2, 3], adjacent), 2);
        let apart = |c: usize| Some((0, (c % 4) as u64));
        assert_eq!(spread_over_cores(&[0, 1, 2, 3, 4, 5, 6, 7], apart), [0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(cores_among(&[0, 1, 2, 3], apart), 4);
        let unknown = |c: usize| (c != 5).then_some((0, (c / 2) as u64));
        assert_eq!(spread_over_cores(&[4, 5, 6, 7], unknown), [4, 5, 6, 7]);
        assert_eq!(cores_among(&[4, 5, 6, 7], unknown), 3);
    }
}
