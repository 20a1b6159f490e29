//! Row reductions: a reduction over the contiguous last dimension of an f32 input with
//! vector accumulators, four lanes each ([`ROW_ACCUMULATORS`] of them for long rows),
//! the input read by the vector emitter ([`super::vector`]) a chunk at a time with its
//! math staged ([`super::staged`]), max/min in the one-instruction `maxps`/`minps` form
//! with what it gets wrong tracked beside it ([`MinMaxLanes`]). The elemental emitter's
//! `reduce` hands such reductions here ([`Emitter::reduce_rows`]).

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{InstBuilder, Value, types};
use cranelift_frontend::FunctionBuilder;
use hlo_ir::{NodeIndex, Opcode};

use super::CgError;
use super::elemental::{Emitter, combine, static_dims};
use super::staged;
use super::vector::{pminmax, vflags};

/// Vector accumulators of a row reduction ([`Emitter::reduce_rows`]): enough independent
/// combines in flight to cover the latency of one. Measured (release, this 2-core
/// AVX-512 host, idle, two runs each, `hloc run --repeat 100 --stats`): the bench
/// `layernorm` (rows of 1024) took 1000/818 µs with one accumulator, 740/712 with 2,
/// 690/685 with 4, 779/704 with 8; the bench `softmax`'s row max over 4096 columns
/// 426/410 µs with one, 256/247 with 2, 275/173 with 4, 174/179 with 8.
pub const ROW_ACCUMULATORS: usize = 4;

impl Emitter<'_, '_> {
    /// A reduction over the contiguous last dimension (and any others): partial results
    /// in vector lanes over the last dimension, combined pairwise, then into the running
    /// value that started at the init value; a scalar tail. Rows of at least
    /// [`ROW_ACCUMULATORS`]` * 4` elements keep that many vector accumulators (seeded by the
    /// row's first vectors, combined pairwise at the end), so that consecutive vectors do
    /// not wait on each other's combine; shorter rows one. Sums are therefore
    /// reassociated, as vectorized reductions are (max/min are exact).
    pub(super) fn reduce_rows(
        &mut self,
        ops: &[NodeIndex],
        dimensions: &[i64],
        op: Opcode,
        idx: &[Value],
    ) -> Result<Value, CgError> {
        let in_dims = static_dims(self.shape(ops[0]))?;
        let last = in_dims.len() - 1;
        let len = in_dims[last];
        let vec_end = len - len % 4;
        let acc = self.b.declare_var(types::F32);
        let init = self.at(ops[1], &[])?;
        self.b.def_var(acc, init);
        let mut outer: Vec<usize> =
            dimensions.iter().map(|&d| d as usize).filter(|&d| d != last).collect();
        outer.sort_unstable();
        let kept: Vec<usize> =
            (0..in_dims.len()).filter(|d| !dimensions.contains(&(*d as i64))).collect();
        let zero = self.iconst(0);
        let mut full = vec![zero; in_dims.len()];
        for (j, &d) in kept.iter().enumerate() {
            full[d] = idx[j];
        }
        let vop = |b: &mut FunctionBuilder, x: Value, y: Value| combine(b, op, x, y);
        let input = ops[0];
        let accs = if len >= ROW_ACCUMULATORS as i64 * 4 { ROW_ACCUMULATORS } else { 1 };
        let wide_end = len - len % (accs as i64 * 4);
        let stage = staged::stageable(self, input)?;
        self.reduce_nest(&outer, 0, &in_dims, &mut full, &mut |em, full| {
            let vaccs: Vec<_> = (0..accs).map(|_| em.b.declare_var(types::F32X4)).collect();
            let minmax = matches!(op, Opcode::Maximum | Opcode::Minimum)
                .then(|| MinMaxLanes::new(em, op == Opcode::Maximum, accs));
            for (j, &va) in vaccs.iter().enumerate() {
                let mut first = full.to_vec();
                first[last] = em.iconst(4 * j as i64);
                let v0 = em.at_v(input, &first, Some(last))?;
                em.b.def_var(va, v0);
                if let Some(m) = &minmax {
                    m.seed(em, j, v0);
                }
            }
            let step = accs as i64 * 4;
            let (from, to) = (em.iconst(step), em.iconst(wide_end.max(step)));
            staged::chunked_loop(em, from, to, step, &stage, full, last, None, |em, i| {
                for (j, &va) in vaccs.iter().enumerate() {
                    let mut at = full.to_vec();
                    at[last] = if j == 0 { i } else { em.b.ins().iadd_imm_s(i, 4 * j as i64) };
                    let x = em.at_v(input, &at, Some(last))?;
                    let a = em.b.use_var(va);
                    let r = match &minmax {
                        Some(m) => m.combine(em, j, a, x),
                        None => vop(em.b, a, x),
                    };
                    em.b.def_var(va, r);
                }
                Ok(())
            })?;
            // The accumulators combined pairwise into the first.
            let mut vs: Vec<Value> = vaccs.iter().map(|&va| em.b.use_var(va)).collect();
            if let Some(m) = &minmax {
                vs = vs.iter().enumerate().map(|(j, &v)| m.finish(em, j, v)).collect();
            }
            while vs.len() > 1 {
                vs = vs.chunks(2).map(|p| vop(em.b, p[0], p[1])).collect();
            }
            let vacc = vaccs[0];
            em.b.def_var(vacc, vs[0]);
            em.for_range(wide_end, vec_end, 4, |em, i| {
                let mut at = full.to_vec();
                at[last] = i;
                let x = em.at_v(input, &at, Some(last))?;
                let a = em.b.use_var(vacc);
                let r = vop(em.b, a, x);
                em.b.def_var(vacc, r);
                Ok(())
            })?;
            let v = em.b.use_var(vacc);
            let l: Vec<Value> = (0..4u8).map(|k| em.b.ins().extractlane(v, k)).collect();
            let p01 = vop(em.b, l[0], l[1]);
            let p23 = vop(em.b, l[2], l[3]);
            let s = vop(em.b, p01, p23);
            let a = em.b.use_var(acc);
            let r = vop(em.b, a, s);
            em.b.def_var(acc, r);
            em.for_range(vec_end, len, 1, |em, i| {
                let mut at = full.to_vec();
                at[last] = i;
                let x = em.at(input, &at)?;
                let a = em.b.use_var(acc);
                let r = vop(em.b, a, x);
                em.b.def_var(acc, r);
                Ok(())
            })
        })?;
        Ok(self.b.use_var(acc))
    }
}

/// A row reduction's max (or min) accumulators, four lanes each, in the one-instruction
/// `maxps`/`minps` form (`x > acc ? x : acc`) instead of the IEEE `fmax` sequence (eight
/// instructions on x86, all on the accumulator's dependency chain), with what `maxps`
/// gets wrong tracked beside it: a NaN operand (it keeps the accumulator) in a NaN mask,
/// and a `+0` met by a `-0` accumulator (equal, so kept) in a mask of lanes that saw `+0`
/// (`-0` for min). [`MinMaxLanes::finish`] applies both, so each lane ends with the exact
/// IEEE maximum of its values, which the exact `fmax` then combines: the same result as
/// the scalar code, NaN for any NaN (the canonical quiet NaN).
struct MinMaxLanes {
    max: bool,
    /// Per accumulator: lanes that saw a NaN, lanes that saw the preferred zero.
    masks: Vec<(cranelift_frontend::Variable, cranelift_frontend::Variable)>,
}

impl MinMaxLanes {
    fn new(em: &mut Emitter, max: bool, accs: usize) -> MinMaxLanes {
        let masks = (0..accs)
            .map(|_| (em.b.declare_var(types::I32X4), em.b.declare_var(types::I32X4)))
            .collect();
        MinMaxLanes { max, masks }
    }

    /// The bits of the zero a max (`+0`) or min (`-0`) prefers, in every lane.
    fn zero_bits(&self, em: &mut Emitter) -> Value {
        let z = em.b.ins().iconst(types::I32, if self.max { 0 } else { i32::MIN as i64 });
        em.b.ins().splat(types::I32X4, z)
    }

    fn flags(x: Value, em: &mut Emitter, zb: Value) -> (Value, Value) {
        use cranelift_codegen::ir::condcodes::FloatCC;
        let nan = em.b.ins().fcmp(FloatCC::Unordered, x, x);
        let bits = em.b.ins().bitcast(types::I32X4, vflags(), x);
        let zero = em.b.ins().icmp(IntCC::Equal, bits, zb);
        (nan, zero)
    }

    /// Accumulator `j` starts at `v0`.
    fn seed(&self, em: &mut Emitter, j: usize, v0: Value) {
        let zb = self.zero_bits(em);
        let (nan, zero) = Self::flags(v0, em, zb);
        em.b.def_var(self.masks[j].0, nan);
        em.b.def_var(self.masks[j].1, zero);
    }

    /// `acc` combined with `x` (accumulator `j`).
    fn combine(&self, em: &mut Emitter, j: usize, acc: Value, x: Value) -> Value {
        let zb = self.zero_bits(em);
        let (nan, zero) = Self::flags(x, em, zb);
        let (nv, zv) = self.masks[j];
        let n = em.b.use_var(nv);
        let n = em.b.ins().bor(n, nan);
        em.b.def_var(nv, n);
        let z = em.b.use_var(zv);
        let z = em.b.ins().bor(z, zero);
        em.b.def_var(zv, z);
        pminmax(em.b, self.max, acc, x)
    }

    /// Accumulator `j`'s value `v` with NaN lanes and zero signs set right.
    fn finish(&self, em: &mut Emitter, j: usize, v: Value) -> Value {
        use cranelift_codegen::ir::condcodes::FloatCC;
        let (nv, zv) = self.masks[j];
        let n = em.b.use_var(nv);
        let z = em.b.use_var(zv);
        let nan = em.b.ins().f32const(f32::NAN);
        let nan = em.b.ins().splat(types::F32X4, nan);
        let nmask = em.b.ins().bitcast(types::F32X4, vflags(), n);
        let v = em.b.ins().bitselect(nmask, nan, v);
        let zero = em.b.ins().f32const(0.0);
        let zero = em.b.ins().splat(types::F32X4, zero);
        let is_zero = em.b.ins().fcmp(FloatCC::Equal, v, zero);
        let fix = em.b.ins().band(is_zero, z);
        let zb = self.zero_bits(em);
        let pref = em.b.ins().bitcast(types::F32X4, vflags(), zb);
        let fix = em.b.ins().bitcast(types::F32X4, vflags(), fix);
        em.b.ins().bitselect(fix, pref, v)
    }
}
