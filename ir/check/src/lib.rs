//! `hlo-check`: the checks every module passes before anything downstream runs on it,
//! and [`Checked`], the type only they produce. Split from `hlo-ir` by role: `hlo-ir`
//! is the data model, its text format and the structural verifier; this crate is what a
//! module must satisfy to be computed on.
//!
//! [`check`] runs, in order: the structural verifier ([`hlo_ir::verify`]), then, on a
//! structurally valid module (their rules assume the verifier's invariants), data-dependent
//! shape rejection ([`dynamic_shapes`]), shape inference ([`shape_inference`]),
//! infinite-loop rejection ([`infinite_loops`]) and the sharding device counts
//! ([`sharding_devices`]). Passes, engines and the compile driver take a
//! [`Checked<Module>`] and never check again.

pub mod dynamic_shapes;
pub mod infinite_loops;
pub mod shape_inference;
pub mod sharding_devices;

use std::ops::Deref;

use hlo_ir::{Diagnostics, Module};

/// A value that passed [`check`] (or was made from one that did by a transformation that
/// keeps the checks' invariants, such as specialization re-checked by its caller). Only
/// this module constructs it; it derefs to the value, and [`Checked::into_inner`] gives it
/// up for editing (an edited module must be checked again to become `Checked`).
#[derive(Debug, Clone)]
pub struct Checked<T> {
    value: T,
    warnings: Diagnostics,
}

impl<T> Checked<T> {
    /// The checked value, for editing (it is no longer `Checked`).
    pub fn into_inner(self) -> T {
        self.value
    }

    /// The warnings the checks gave (no errors: a module with errors is not `Checked`).
    pub fn warnings(&self) -> &Diagnostics {
        &self.warnings
    }
}

impl<T> Deref for Checked<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> AsRef<T> for Checked<T> {
    fn as_ref(&self) -> &T {
        &self.value
    }
}

/// Every diagnostic of the checks (errors and warnings), sorted by position. With `src`,
/// errors point into the text.
pub fn diagnose(m: &Module, src: Option<&str>) -> Diagnostics {
    let mut diags = match src {
        Some(src) => hlo_ir::verify::verify_source(m, src),
        None => hlo_ir::verify::verify(m),
    };
    if diags.has_errors() {
        return diags;
    }
    diags.extend(dynamic_shapes::check_module(m));
    diags.extend(crate::shape_inference::check_module(m));
    diags.extend(infinite_loops::check_module(m));
    diags.extend(Diagnostics(sharding_devices::check(m, src, None)));
    diags.sort();
    diags
}

/// Checks `m`: the module as [`Checked`], or every diagnostic when any is an error.
pub fn check(m: Module, src: Option<&str>) -> Result<Checked<Module>, Diagnostics> {
    let diags = diagnose(&m, src);
    if diags.has_errors() { Err(diags) } else { Ok(Checked { value: m, warnings: diags }) }
}

/// Parses `src` and checks the module: one parse, one verification, one shape inference.
/// Parse errors come alone (the checks need a module); otherwise every check's diagnostics.
pub fn parse(src: &str) -> Result<Checked<Module>, Diagnostics> {
    let (m, diags) = hlo_ir::text::parse(src);
    let Some(m) = m else { return Err(diags) };
    if diags.has_errors() {
        return Err(diags);
    }
    let mut checked = check(m, Some(src)).map_err(|mut d| {
        d.extend(diags.clone());
        d.sort();
        d
    })?;
    checked.warnings.extend(diags);
    checked.warnings.sort();
    Ok(checked)
}
