//! Process-wide switches for optimizations that keep every result's bits (staged math,
//! row chains): on unless an environment variable says `0` (read once, for measuring
//! without them), and flipped by tests that compare both ways.

use std::sync::atomic::{AtomicU8, Ordering};

/// One switch, named by its environment variable.
pub(crate) struct Switch {
    var: &'static str,
    /// 0: not read yet, 1: on, 2: off.
    state: AtomicU8,
}

impl Switch {
    pub(crate) const fn new(var: &'static str) -> Switch {
        Switch { var, state: AtomicU8::new(0) }
    }

    /// Whether the optimization is on.
    pub(crate) fn on(&self) -> bool {
        match self.state.load(Ordering::Relaxed) {
            1 => true,
            2 => false,
            _ => {
                let on = std::env::var_os(self.var).is_none_or(|v| v != "0");
                self.state.store(if on { 1 } else { 2 }, Ordering::Relaxed);
                on
            }
        }
    }

    /// Turns it on or off for programs compiled from now on.
    #[cfg(test)]
    pub(crate) fn set(&self, on: bool) {
        self.state.store(if on { 1 } else { 2 }, Ordering::Relaxed);
    }
}
