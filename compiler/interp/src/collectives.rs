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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elementwise::binary;
    use hlo_ir::{ElemType, Tensor};

    /// The fabric's reductions are the interpreter's arithmetic: an all-reduce over two
    /// devices gives, bit for bit, what `binary` gives on the same operands, for every
    /// reducer and element type the fabric runs.
    #[test]
    fn fabric_reductions_are_the_interpreters_arithmetic() {
        let specials = [0.0, -0.0, 1.0, -2.5, 1e-40, 3.0e38, f64::INFINITY, f64::NAN, 0.1, 7.0];
        let types = [
            ElemType::F32,
            ElemType::F64,
            ElemType::BF16,
            ElemType::F16,
            ElemType::F8E4M3FN,
            ElemType::F8E5M2,
            ElemType::S8,
            ElemType::S32,
            ElemType::U16,
            ElemType::U64,
            ElemType::Pred,
            ElemType::C64,
        ];
        let ops = [Opcode::Add, Opcode::Multiply, Opcode::Maximum, Opcode::Minimum, Opcode::And];
        for e in types {
            let lit = |off: usize| -> Array {
                let n = specials.len();
                let data = if e.is_float() || matches!(e, ElemType::C64) {
                    hlo_ir::literal::LiteralData::Float(
                        (0..n).map(|i| specials[(i + off) % n]).collect(),
                    )
                } else if e == ElemType::Pred {
                    hlo_ir::literal::LiteralData::Pred(
                        (0..n).map(|i| (i + off).is_multiple_of(3)).collect(),
                    )
                } else {
                    hlo_ir::literal::LiteralData::Int(
                        (0..n as i64).map(|i| (i * 97 + off as i64 * 13) % 300 - 150).collect(),
                    )
                };
                Array::from_literal(&hlo_ir::literal::Literal::Array(data), e, vec![n]).unwrap()
            };
            let (a, b) = (lit(0), lit(3));
            for op in ops {
                let Ok(want) = binary(op, &a, &b) else { continue };
                let fabric = Fabric::new(2);
                let got = std::thread::scope(|s| {
                    let run = |d: usize, x: &Array| {
                        let f = &fabric;
                        let x = x.clone();
                        s.spawn(move || {
                            execute(f, d, Opcode::AllReduce, &Default::default(), Some(op), vec![x])
                        })
                    };
                    let (h0, h1) = (run(0, &a), run(1, &b));
                    let _ = h1.join().unwrap();
                    h0.join().unwrap()
                });
                let got = got.unwrap_or_else(|f| panic!("{op:?} on {e}: {f}"));
                let bits = |x: &Array| -> Tensor { x.to_tensor().unwrap() };
                assert_eq!(bits(&got[0]), bits(&want), "{} on {e}", op.name());
            }
        }
    }
}
