//! `sort` comparators compiled to CLIF. A comparator kernel takes
//! `[&a0, &b0, &a1, &b1, ..., &out]`: pointers to one element of each operand for the two
//! positions compared, and a one-byte result (the comparator's pred).

use hlo_ir::{CompId, ElemType, Module};

use cranelift_codegen::ir::{InstBuilder, types};

use super::elemental::Emitter;
use super::{CgError, ty};
use crate::jit::JitModule;

pub fn define_comparator(
    jit: &mut JitModule,
    m: &Module,
    name: &str,
    cmp: CompId,
    elems: &[ElemType],
) -> Result<usize, CgError> {
    let i = super::define_kernel(jit, name, |b, jm, args, _range| {
        let mut vals = Vec::new();
        for (i, &e) in elems.iter().enumerate() {
            for side in 0..2 {
                let p = b.ins().load(types::I64, ty::flags(), args, ((2 * i + side) * 8) as i32);
                vals.push(ty::load(b, e, p)?);
            }
        }
        let out = b.ins().load(types::I64, ty::flags(), args, (2 * elems.len() * 8) as i32);
        let comp = m.comp(cmp);
        let mut em = Emitter::new(b, jm, m, comp, Default::default());
        let r = em.apply(cmp, &vals)?;
        em.b.ins().store(ty::flags(), r[0], out, 0);
        em.b.ins().return_(&[]);
        Ok(())
    })?;
    Ok(i)
}
