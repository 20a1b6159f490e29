//! Parse arbitrary text; if it yields a module, verify and print it, then check that the
//! printed text re-parses cleanly and that printing is a fixpoint. Every diagnostics set
//! is rendered too: nothing in the library may panic on any input.
//!
//! `HLO_FUZZ_KNOWN=parse.rs:216,printer.rs:40` (comma-separated `file:line` suffixes of
//! panic locations) turns panics at those places into ignored inputs, so that a run can
//! go on looking for *other* bugs while a known one is unfixed. Unset, every panic counts.
#![no_main]

use std::panic::{self, AssertUnwindSafe};
use std::sync::{Once, OnceLock};

use libfuzzer_sys::fuzz_target;

const PATH: &str = "fuzz.hlo";

fn known() -> &'static [String] {
    static KNOWN: OnceLock<Vec<String>> = OnceLock::new();
    KNOWN.get_or_init(|| {
        std::env::var("HLO_FUZZ_KNOWN")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    })
}

fn is_known(loc: Option<&panic::Location<'_>>) -> bool {
    let Some(loc) = loc else { return false };
    let here = format!("{}:{}", loc.file(), loc.line());
    known().iter().any(|k| here.ends_with(k.as_str()))
}

/// Wraps libFuzzer's panic hook (which aborts) so that known panics unwind quietly instead.
fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if known().is_empty() {
            return;
        }
        let fuzzer_hook = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !is_known(info.location()) {
                fuzzer_hook(info);
            }
        }));
    });
}

fn check(src: &str) {
    let (module, diags) = hlo_ir::text::parse(src);
    let _ = diags.render(src, PATH, false);
    let Some(module) = module else { return };

    let vdiags = hlo_ir::verify::verify(&module);
    let _ = vdiags.render(src, PATH, false);

    let printed = hlo_ir::text::print(&module);

    let (module2, diags2) = hlo_ir::text::parse(&printed);
    let rendered2 = diags2.render(&printed, PATH, false);
    assert!(
        !diags2.has_errors(),
        "printed text does not re-parse:\n--- input ---\n{src}\n--- printed ---\n{printed}\n--- diagnostics ---\n{rendered2}"
    );
    let module2 = module2.expect("re-parse without errors returned no module");
    let _ = hlo_ir::verify::verify(&module2).render(&printed, PATH, false);

    let printed2 = hlo_ir::text::print(&module2);
    assert!(
        printed == printed2,
        "print is not a fixpoint:\n--- input ---\n{src}\n--- first print ---\n{printed}\n--- second print ---\n{printed2}"
    );
}

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    if known().is_empty() {
        check(src);
    } else {
        install_hook();
        // Only known panics get here without aborting: the hook passes every other one on.
        let _ = panic::catch_unwind(AssertUnwindSafe(|| check(src)));
    }
});
