//! Process-wide counts of the expensive front-end work (parses, verifications, shape
//! inference runs) and of the compile driver's phases, so a tool or a test can show that
//! each ran once (`hloc run --time-passes`).

use std::collections::BTreeMap;
use std::sync::Mutex;

static COUNTS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

/// Counts one run of `what` (`parse`, `verify`, `shape inference`, a driver phase).
pub fn bump(what: &'static str) {
    let mut c = COUNTS.lock().unwrap_or_else(|e| e.into_inner());
    *c.entry(what).or_insert(0) += 1;
}

/// Every count so far, by name.
pub fn snapshot() -> BTreeMap<&'static str, u64> {
    COUNTS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}
