use crate::{Diagnostics, Module};
pub fn verify(_m: &Module) -> Diagnostics { Diagnostics::new() }
