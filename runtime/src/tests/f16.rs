//! The f16 conversions of `codegen::ty` as JIT kernels against `half::f16` (what the
//! interpreter computes with): every f16 bit pattern to f32, and f32 to f16 at every
//! rounding boundary (each f16 value and each midpoint between neighbours, with their f32
//! neighbours), around the subnormal and overflow thresholds, the special values and a sweep
//! of the bit patterns. `f32_to_f16_exhaustive` (ignored) covers all 2^32 inputs:
//! `cargo test --release -p hlo-runtime --lib f16 -- --ignored`.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, types};
use half::f16;
use rayon::prelude::*;

use crate::codegen::ty;
use crate::jit::{JitCode, JitModule};

/// Kernel 0: `out16[i] = f32_to_f16_bits(in32[i])`; kernel 1: `out32[i] =
/// f16_bits_to_f32(in16[i])`. Arguments: `[&n (u64), input, output]`.
fn kernels() -> JitCode {
    let mut m = JitModule::new().expect("jit module");
    for to_f16 in [true, false] {
        m.define(if to_f16 { "to_f16" } else { "from_f16" }, |b, _jm, args, _range| {
            let fl = MemFlagsData::new().with_notrap();
            let np = b.ins().load(types::I64, fl, args, 0);
            let src = b.ins().load(types::I64, fl, args, 8);
            let dst = b.ins().load(types::I64, fl, args, 16);
            let n = b.ins().load(types::I64, fl, np, 0);
            let head = b.create_block();
            let body = b.create_block();
            let exit = b.create_block();
            b.append_block_param(head, types::I64);
            let zero = b.ins().iconst(types::I64, 0);
            b.ins().jump(head, &[zero.into()]);
            b.switch_to_block(head);
            let i = b.block_params(head)[0];
            let go = b.ins().icmp(IntCC::UnsignedLessThan, i, n);
            b.ins().brif(go, body, &[], exit, &[]);
            b.switch_to_block(body);
            let (in_size, out_size) = if to_f16 { (2, 1) } else { (1, 2) };
            let a = b.ins().ishl_imm_u(i, in_size);
            let a = b.ins().iadd(src, a);
            let o = b.ins().ishl_imm_u(i, out_size);
            let o = b.ins().iadd(dst, o);
            if to_f16 {
                let x = b.ins().load(types::F32, fl, a, 0);
                let h = ty::f32_to_f16_bits(b, x);
                b.ins().store(fl, h, o, 0);
            } else {
                let h = b.ins().load(types::I16, fl, a, 0);
                let x = ty::f16_bits_to_f32(b, h);
                b.ins().store(fl, x, o, 0);
            }
            let next = b.ins().iadd_imm_s(i, 1);
            b.ins().jump(head, &[next.into()]);
            b.switch_to_block(exit);
            b.ins().return_(&[]);
            Ok(())
        })
        .expect("define kernel");
    }
    m.finish().expect("finish")
}

fn run<I: Copy, O: Copy + Default>(code: &JitCode, k: usize, xs: &[I]) -> Vec<O> {
    let n = xs.len() as u64;
    let mut out = vec![O::default(); xs.len()];
    let args: [*mut u8; 3] =
        [&n as *const u64 as *mut u8, xs.as_ptr() as *mut u8, out.as_mut_ptr() as *mut u8];
    // SAFETY: the kernel reads `n` inputs and writes `n` outputs of the sizes it was built for.
    unsafe { (code.fns[k])(args.as_ptr(), 0, 1) };
    out
}

fn check_to_f16(code: &JitCode, xs: &[f32]) {
    let got: Vec<u16> = run(code, 0, xs);
    for (&x, &g) in xs.iter().zip(&got) {
        let want = f16::from_f32(x).to_bits();
        assert_eq!(g, want, "f32_to_f16_bits({x:e} = {:#010x})", x.to_bits());
    }
}

#[test]
fn f16_bits_to_f32_matches_half_on_every_pattern() {
    let code = kernels();
    let hs: Vec<u16> = (0..=u16::MAX).collect();
    let got: Vec<f32> = run(&code, 1, &hs);
    for (&h, &g) in hs.iter().zip(&got) {
        let want = f16::from_bits(h).to_f32();
        assert_eq!(g.to_bits(), want.to_bits(), "f16_bits_to_f32({h:#06x})");
    }
}

#[test]
fn f32_to_f16_bits_matches_half_at_every_rounding_boundary() {
    let code = kernels();
    let mut xs: Vec<f32> = Vec::new();
    // Each f16 value and the midpoint above it, with four f32 neighbours either side (the
    // midpoint of the largest finite value and infinity is the overflow threshold).
    for h in 0..0x7c00u16 {
        for sign in [0u16, 0x8000] {
            let lo = f16::from_bits(h | sign).to_f32() as f64;
            let hi = if h == 0x7bff { 65536.0 } else { f16::from_bits(h + 1).to_f32() as f64 };
            let hi = if sign != 0 { -hi } else { hi };
            for c in [lo as f32, ((lo + hi) / 2.0) as f32] {
                let b = c.to_bits();
                xs.extend((b.saturating_sub(4)..=b.saturating_add(4)).map(f32::from_bits));
            }
        }
    }
    // Around the smallest subnormal's half (ties to zero) and below, every f32 exponent.
    for e in 0..255u32 {
        for m in [0u32, 1, 0x40_0000, 0x7f_ffff] {
            xs.push(f32::from_bits((e << 23) | m));
            xs.push(f32::from_bits(0x8000_0000 | (e << 23) | m));
        }
    }
    // Specials: zeros, infinities, NaNs with payloads (quiet and signalling, both signs).
    xs.extend([0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, f32::MIN]);
    for p in [0x7fc0_0000u32, 0x7f80_0001, 0x7fa0_2000, 0x7fff_ffff, 0x7f80_2000, 0x7fbf_e000] {
        xs.push(f32::from_bits(p));
        xs.push(f32::from_bits(p | 0x8000_0000));
    }
    // A sweep of the bit patterns.
    xs.extend((0..=u32::MAX).step_by(4099).map(f32::from_bits));
    check_to_f16(&code, &xs);
}

#[test]
#[ignore = "all 2^32 inputs: run in release"]
fn f32_to_f16_exhaustive() {
    let code = kernels();
    (0..1u64 << 16).into_par_iter().for_each(|hi| {
        let xs: Vec<f32> =
            (0..1u32 << 16).map(|lo| f32::from_bits(((hi as u32) << 16) | lo)).collect();
        check_to_f16(&code, &xs);
    });
}
