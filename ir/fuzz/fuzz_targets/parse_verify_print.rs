//! Parse arbitrary text; if it yields a module, verify and print it, then check that the
//! printed text re-parses cleanly and that printing is a fixpoint. Every diagnostics set
//! is rendered too: nothing in the library may panic on any input.
#![no_main]

use libfuzzer_sys::fuzz_target;

const PATH: &str = "fuzz.hlo";

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };

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
});
