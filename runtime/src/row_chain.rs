//! Row chains: loop kernels over the same rows run a block of rows at a time.
//!
//! A softmax or a layer norm is several kernels over the same rows: a row reduction, a
//! loop that reads the input again with the reduction broadcast along each row, another
//! reduction, a last loop. One after the other, each streams the whole input (megabytes)
//! from the shared cache or memory. When every kernel computes row `r` of its outputs at
//! unit `r` of its split range (rows: its leading dimensions flattened) and reads what an earlier one of them wrote only in
//! row `r` ([`crate::codegen::rows`]), the executor can run them a block of rows at a time
//! instead: all of them over rows `0..b`, then all over `b..2b`, and so on, so what one
//! writes is still in the core's own cache when the next reads it. Each row is computed
//! by the same code from the same values, so the results are the same bits.
//!
//! [`group`] groups the planner's steps before buffers get their places: a kernel joins a
//! chain when it has the chain's rows and
//! - reads what a chain kernel writes only by rows,
//! - writes nothing an earlier chain kernel reads or writes,
//! - and, when kernels between them are skipped (they run after the chain), reads nothing
//!   they write and writes nothing they read or write.
//!
//! Every buffer the chain's kernels and the skipped ones use is then kept live from the
//! first of those steps to the last ([`Widen`]): interleaved, they all run during that
//! time, and no two of them may share bytes (a buffer reused after its last reader would
//! otherwise be overwritten before that reader's later blocks ran).
//!
//! `HLOC_ROW_CHAINS=0` in the environment turns chains off (for measuring; the results
//! are the same bits either way).

/// A buffer of the planner.
pub(crate) type Slot = usize;

/// The planner's buffers as chains see them, by slot: the buffer a slot's bytes belong to
/// (a view's: its buffer's) and its size.
pub(crate) struct Buffers {
    pub root: Vec<Slot>,
    pub bytes: Vec<usize>,
}

/// Buffers to keep live over planner ticks `from..=to` (a chain's span).
pub(crate) struct Widen {
    pub slots: Vec<Slot>,
    pub from: usize,
    pub to: usize,
}

/// Bytes of all the chain's buffers per block: a block's rows of every buffer its
/// kernels write or read by rows stay within a core's L2 (2 MiB on this host) with room
/// for the rest. Measured on the bench softmax and layernorm: see the README.
const BLOCK_BYTES: usize = 256 << 10;

/// How many steps past a chain's last kernel [`form`] looks for the next one.
const WINDOW: usize = 16;

/// Whether chains form (`HLOC_ROW_CHAINS=0` turns them off).
pub fn enabled() -> bool {
    SWITCH.on()
}

static SWITCH: crate::switch::Switch = crate::switch::Switch::new("HLOC_ROW_CHAINS");

/// Turns chains on or off for programs compiled from now on (tests compare both).
#[cfg(test)]
pub fn set_enabled(on: bool) {
    SWITCH.set(on);
}

/// A loop kernel as chains see it: the buffers it reads and writes (by
/// [`Buffers::root`]), for a kernel over rows the row count and whether it reads each of
/// `reads` by rows, and the planner tick it was planned at.
pub(crate) struct Kernel<'s> {
    pub reads: Vec<Slot>,
    pub writes: Vec<Slot>,
    pub by_rows: Option<(&'s [bool], i64)>,
    pub at: usize,
}

/// Steps to run as one: a step alone, or a chain of kernels run `block` rows at a time.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Group {
    pub steps: Vec<usize>,
    pub block: i64,
}

/// The steps (`None`: not a loop kernel) in the order to run them, grouped into chains,
/// and the buffers whose lifetimes the planner must widen for those chains.
pub(crate) fn group(
    steps: &[Option<Kernel>],
    bufs: &Buffers,
    widen: &mut Vec<Widen>,
) -> Vec<Group> {
    let mut taken = vec![false; steps.len()];
    let mut out = Vec::with_capacity(steps.len());
    for i in 0..steps.len() {
        if taken[i] {
            continue;
        }
        taken[i] = true;
        let rows = match &steps[i] {
            Some(Kernel { by_rows: Some((_, r)), .. }) if enabled() && *r >= 2 => *r,
            _ => {
                out.push(Group { steps: vec![i], block: 0 });
                continue;
            }
        };
        // Later kernels that may join, and the ones they skip.
        let mut members = vec![i];
        let mut skipped: Vec<usize> = Vec::new();
        let mut j = i + 1;
        while j < steps.len() && j - i <= WINDOW && !taken[j] {
            let Some(a) = &steps[j] else { break };
            if joins(a, rows, &members, &skipped, steps) {
                members.push(j);
                taken[j] = true;
            } else {
                skipped.push(j);
            }
            j += 1;
        }
        if members.len() == 1 {
            out.push(Group { steps: members, block: 0 });
            continue;
        }
        // Everything the chain and the steps it skipped use stays live over their span.
        let kernel = |k: usize| steps[k].as_ref().expect("chains hold kernels");
        let last = members.iter().map(|&m| kernel(m).at).max().unwrap_or(0);
        let mut slots = Vec::new();
        for &k in members.iter().chain(&skipped) {
            let a = kernel(k);
            if a.at <= last {
                slots.extend(a.reads.iter().chain(&a.writes));
            }
        }
        widen.push(Widen { slots, from: kernel(i).at, to: last });
        let block = block_rows(&members, rows, steps, bufs);
        out.push(Group { steps: members, block });
    }
    out
}

/// Whether kernel `a` can run in the chain of `members` over `rows` rows, moved before
/// the `skipped` steps.
fn joins(
    a: &Kernel,
    rows: i64,
    members: &[usize],
    skipped: &[usize],
    steps: &[Option<Kernel>],
) -> bool {
    let Some((by_rows, r)) = a.by_rows else { return false };
    if r != rows {
        return false;
    }
    let hits = |x: &Slot, ys: &[Slot]| ys.contains(x);
    for &m in members {
        let m = steps[m].as_ref().expect("members are kernels");
        if a.reads.iter().enumerate().any(|(k, x)| hits(x, &m.writes) && !by_rows[k])
            || a.writes.iter().any(|w| hits(w, &m.reads) || hits(w, &m.writes))
        {
            return false;
        }
    }
    for &s in skipped {
        let s = steps[s].as_ref().expect("skipped steps are kernels");
        if a.reads.iter().any(|x| hits(x, &s.writes))
            || a.writes.iter().any(|w| hits(w, &s.reads) || hits(w, &s.writes))
        {
            return false;
        }
    }
    true
}

/// Rows per block: [`BLOCK_BYTES`] over the bytes per row of the buffers the chain's
/// kernels write or read by rows.
fn block_rows(members: &[usize], rows: i64, steps: &[Option<Kernel>], bufs: &Buffers) -> i64 {
    let mut seen: Vec<Slot> = Vec::new();
    let mut row_bytes = 0usize;
    for &m in members {
        let k = steps[m].as_ref().expect("members are kernels");
        let by_rows = k.by_rows.map(|(b, _)| b).unwrap_or_default();
        let read =
            k.reads.iter().enumerate().filter(|(j, _)| by_rows.get(*j).copied() == Some(true));
        for &s in read.map(|(_, s)| s).chain(&k.writes) {
            if !seen.contains(&s) {
                seen.push(s);
                row_bytes += bufs.bytes[s] / rows as usize;
            }
        }
    }
    (BLOCK_BYTES / row_bytes.max(1)).clamp(1, rows as usize) as i64
}
