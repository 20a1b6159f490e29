//! Row chains: loop kernels over the same rows run a block of rows at a time.
//!
//! A softmax or a layer norm is several kernels over the same rows: a row reduction, a
//! loop that reads the input again with the reduction broadcast along each row, another
//! reduction, a last loop. One after the other, each streams the whole input (megabytes)
//! from the shared cache or memory. When every kernel computes row `r` of its outputs at
//! iteration `r` of its outer loop and reads what an earlier one of them wrote only in
//! row `r` ([`crate::codegen::rows`]), the executor can run them a block of rows at a time
//! instead: all of them over rows `0..b`, then all over `b..2b`, and so on, so what one
//! writes is still in the core's own cache when the next reads it. Each row is computed
//! by the same code from the same values, so the results are the same bits.
//!
//! [`form`] groups the planner's steps before buffers get their places: a kernel joins a
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

use std::sync::atomic::{AtomicU8, Ordering};

use crate::exec::{ChainKernel, Slot, Step};

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
    match SWITCH.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let on = std::env::var_os("HLOC_ROW_CHAINS").is_none_or(|v| v != "0");
            SWITCH.store(if on { 1 } else { 2 }, Ordering::Relaxed);
            on
        }
    }
}

/// 0: not read yet, 1: on, 2: off.
static SWITCH: AtomicU8 = AtomicU8::new(0);

/// Turns chains on or off for programs compiled from now on (tests compare both).
#[cfg(test)]
pub fn set_enabled(on: bool) {
    SWITCH.store(if on { 1 } else { 2 }, Ordering::Relaxed);
}

/// A loop kernel's view for grouping: its buffers (by [`Buffers::root`]).
struct Access<'s> {
    reads: Vec<Slot>,
    writes: Vec<Slot>,
    by_rows: Option<(&'s [bool], i64)>,
    at: usize,
}

fn access<'s>(step: &'s Step, bufs: &Buffers) -> Option<Access<'s>> {
    match step {
        Step::Kernel { args, inputs, rows, split, at, .. } => Some(Access {
            reads: args[..*inputs].iter().map(|&s| bufs.root[s]).collect(),
            writes: args[*inputs..].iter().map(|&s| bufs.root[s]).collect(),
            by_rows: rows.as_deref().map(|r| (r, *split)),
            at: *at,
        }),
        _ => None,
    }
}

/// The steps with chains formed (inside loops and conditionals too), and the buffers
/// whose lifetimes the planner must widen for them.
pub(crate) fn form(steps: Vec<Step>, bufs: &Buffers, widen: &mut Vec<Widen>) -> Vec<Step> {
    if !enabled() {
        return steps;
    }
    let mut steps: Vec<Option<Step>> = steps.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(steps.len());
    for i in 0..steps.len() {
        let Some(step) = steps[i].take() else { continue };
        let step = match step {
            Step::While { cond, pred, body, write_back } => Step::While {
                cond: form(cond, bufs, widen),
                pred,
                body: form(body, bufs, widen),
                write_back,
            },
            Step::Conditional { selector, is_pred, branches } => Step::Conditional {
                selector,
                is_pred,
                branches: branches.into_iter().map(|(b, m)| (form(b, bufs, widen), m)).collect(),
            },
            s => s,
        };
        let rows = match access(&step, bufs) {
            Some(Access { by_rows: Some((_, r)), .. }) if r >= 2 => r,
            _ => {
                out.push(step);
                continue;
            }
        };
        // Later kernels that may join, and the ones they skip.
        let mut members = vec![step];
        let mut skipped: Vec<usize> = Vec::new();
        let mut j = i + 1;
        while j < steps.len() && j - i <= WINDOW {
            let Some(cand) = steps[j].as_ref() else { break };
            let Some(a) = access(cand, bufs) else { break };
            if joins(&a, rows, &members, &skipped, &steps, bufs) {
                members.push(steps[j].take().expect("present"));
            } else {
                skipped.push(j);
            }
            j += 1;
        }
        if members.len() == 1 {
            out.push(members.pop().expect("one"));
            continue;
        }
        // Everything the chain and the steps it skipped use stays live over their span.
        let last = members.iter().map(|m| access(m, bufs).expect("kernel").at).max();
        let mut slots = Vec::new();
        for st in members.iter().chain(skipped.iter().filter_map(|&k| steps[k].as_ref())) {
            let a = access(st, bufs).expect("kernel");
            if a.at <= last.unwrap_or(0) {
                slots.extend(a.reads.iter().chain(&a.writes));
            }
        }
        let first = access(&members[0], bufs).expect("kernel").at;
        widen.push(Widen { slots, from: first, to: last.unwrap_or(first) });
        out.push(chain(members, rows, bufs));
    }
    out
}

/// Whether kernel `a` can run in the chain of `members` over `rows` rows, moved before
/// the `skipped` steps.
fn joins(
    a: &Access,
    rows: i64,
    members: &[Step],
    skipped: &[usize],
    steps: &[Option<Step>],
    bufs: &Buffers,
) -> bool {
    let Some((by_rows, r)) = a.by_rows else { return false };
    if r != rows {
        return false;
    }
    let hits = |x: &Slot, ys: &[Slot]| ys.contains(x);
    for m in members {
        let m = access(m, bufs).expect("members are kernels");
        if a.reads.iter().enumerate().any(|(k, x)| hits(x, &m.writes) && !by_rows[k])
            || a.writes.iter().any(|w| hits(w, &m.reads) || hits(w, &m.writes))
        {
            return false;
        }
    }
    for &s in skipped {
        let s = access(steps[s].as_ref().expect("skipped steps stay"), bufs).expect("kernels");
        if a.reads.iter().any(|x| hits(x, &s.writes))
            || a.writes.iter().any(|w| hits(w, &s.reads) || hits(w, &s.writes))
        {
            return false;
        }
    }
    true
}

/// The chain step of `members` (kernels over `rows` rows).
fn chain(members: Vec<Step>, rows: i64, bufs: &Buffers) -> Step {
    let mut kernels = Vec::new();
    let mut args = Vec::new();
    let mut work = 0;
    let mut names = Vec::new();
    // Bytes per row of the buffers written or read by rows.
    let mut seen: Vec<Slot> = Vec::new();
    let mut row_bytes = 0usize;
    for m in members {
        let Step::Kernel { f, args: a, inputs, rows: by_rows, kind, name, work: w, .. } = m else {
            unreachable!("chains hold kernels")
        };
        let by_rows = by_rows.unwrap_or_default();
        for (k, &s) in a.iter().enumerate() {
            let r = bufs.root[s];
            let counted = k >= inputs || by_rows.get(k).copied().unwrap_or(false);
            if counted && !seen.contains(&r) {
                seen.push(r);
                row_bytes += bufs.bytes[r] / rows as usize;
            }
        }
        kernels.push(ChainKernel { f, at: args.len(), kind });
        args.extend(a);
        work += w;
        names.push(name);
    }
    let block = (BLOCK_BYTES / row_bytes.max(1)).clamp(1, rows as usize) as i64;
    Step::Chain { kernels, args, rows, block, work, name: names.join(" » ") }
}
