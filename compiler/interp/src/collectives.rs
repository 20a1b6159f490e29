//! Collectives on the interpreter's devices: the arrays go to the device fabric
//! ([`hlo_fabric`], which every engine shares) as tensors and come back as arrays.

use hlo_fabric::Fabric;
use hlo_ir::Opcode;
use hlo_ir::op::CollectiveAttrs;

use crate::{Array, Failure};

/// Runs collective `opcode` on device `d` of `fabric` (see [`hlo_fabric::execute`]).
pub fn execute(
    fabric: &Fabric,
    d: usize,
    opcode: Opcode,
    attrs: &CollectiveAttrs,
    reducer: Option<Opcode>,
    operands: Vec<Array>,
) -> Result<Vec<Array>, Failure> {
    let tensors = operands.iter().map(Array::to_tensor).collect::<Result<Vec<_>, _>>()?;
    hlo_fabric::execute(fabric, d, opcode, attrs, reducer, tensors)
        .map_err(|e| Failure::Here(e.to_string()))?
        .iter()
        .map(Array::from_tensor)
        .collect()
}
