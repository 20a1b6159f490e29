//! Elementwise test kernels around the `codegen::math` emitters.
#![allow(dead_code)]

use crate::jit::{JitCode, JitModule};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Value, types};
use cranelift_frontend::FunctionBuilder;

pub type Unary = fn(&mut FunctionBuilder, Value) -> Value;
pub type Binary = fn(&mut FunctionBuilder, Value, Value) -> Value;

/// An elementwise f32 function of one or two operands.
#[derive(Clone, Copy)]
pub enum Op {
    Unary(Unary),
    Binary(Binary),
}

/// Two kernels for `op`: [0] an f32x4 main loop plus a scalar tail, [1] scalar only.
/// Arguments: `[&n (u64), out, in0, in1?]`.
pub struct Kernels {
    code: JitCode,
    arity: usize,
}

pub fn compile(op: Op) -> Kernels {
    let mut m = JitModule::new().expect("jit module");
    for vector in [true, false] {
        m.define(if vector { "vector" } else { "scalar" }, |b, _jm, args, _range| {
            let ptr = cranelift_codegen::ir::types::I64;
            emit_loop(b, args, ptr, op, vector);
            Ok(())
        })
        .expect("define kernel");
    }
    let arity = match op {
        Op::Unary(_) => 1,
        Op::Binary(_) => 2,
    };
    Kernels { code: m.finish().expect("finish"), arity }
}

fn emit_loop(b: &mut FunctionBuilder, args: Value, ptr: types::Type, op: Op, vector: bool) {
    let flags = MemFlagsData::new().with_notrap();
    let arity = match op {
        Op::Unary(_) => 1,
        Op::Binary(_) => 2,
    };
    let np = b.ins().load(ptr, flags, args, 0);
    let out = b.ins().load(ptr, flags, args, 8);
    let ins: Vec<Value> = (0..arity).map(|k| b.ins().load(ptr, flags, args, 16 + 8 * k)).collect();
    let n = b.ins().load(types::I64, flags, np, 0);
    let nv = if vector { b.ins().band_imm_s(n, -4) } else { b.ins().iconst(types::I64, 0) };
    let vhead = b.create_block();
    let vbody = b.create_block();
    let thead = b.create_block();
    let tbody = b.create_block();
    let exit = b.create_block();
    for blk in [vhead, vbody, thead, tbody] {
        b.append_block_param(blk, types::I64);
    }
    let zero = b.ins().iconst(types::I64, 0);
    b.ins().jump(vhead, &[zero.into()]);

    for (head, body, next, width, ty, bound) in
        [(vhead, vbody, thead, 4i64, types::F32X4, nv), (thead, tbody, exit, 1, types::F32, n)]
    {
        b.switch_to_block(head);
        let i = b.block_params(head)[0];
        let go = b.ins().icmp(IntCC::UnsignedLessThan, i, bound);
        if next == exit {
            b.ins().brif(go, body, &[i.into()], exit, &[]);
        } else {
            b.ins().brif(go, body, &[i.into()], next, &[i.into()]);
        }
        b.switch_to_block(body);
        let i = b.block_params(body)[0];
        let off = b.ins().ishl_imm_u(i, 2);
        let xs: Vec<Value> = ins
            .iter()
            .map(|&p| {
                let a = b.ins().iadd(p, off);
                b.ins().load(ty, flags, a, 0)
            })
            .collect();
        let y = match op {
            Op::Unary(f) => f(b, xs[0]),
            Op::Binary(f) => f(b, xs[0], xs[1]),
        };
        let a = b.ins().iadd(out, off);
        b.ins().store(flags, y, a, 0);
        let i2 = b.ins().iadd_imm_s(i, width);
        b.ins().jump(head, &[i2.into()]);
    }
    b.switch_to_block(exit);
    b.ins().return_(&[]);
}

impl Kernels {
    /// Runs kernel `which` (0 vector, 1 scalar) over `xs` (and `ys` for binary ops).
    pub fn run_with(&self, which: usize, xs: &[f32], ys: Option<&[f32]>) -> Vec<f32> {
        assert_eq!(ys.is_some(), self.arity == 2);
        if let Some(ys) = ys {
            assert_eq!(xs.len(), ys.len());
        }
        let n = xs.len() as u64;
        let mut out = vec![0f32; xs.len()];
        let mut args: Vec<*mut u8> =
            vec![&n as *const u64 as *mut u8, out.as_mut_ptr() as *mut u8, xs.as_ptr() as *mut u8];
        if let Some(ys) = ys {
            args.push(ys.as_ptr() as *mut u8);
        }
        // SAFETY: the kernel reads `n` elements of each input and writes `n` outputs.
        unsafe { (self.code.fns[which])(args.as_ptr(), 0, 1) };
        out
    }

    /// Both paths; panics unless they agree bit for bit (NaNs: only NaN-ness).
    pub fn run(&self, xs: &[f32], ys: Option<&[f32]>) -> Vec<f32> {
        let v = self.run_with(0, xs, ys);
        let s = self.run_with(1, xs, ys);
        for k in 0..xs.len() {
            let same = v[k].to_bits() == s[k].to_bits() || (v[k].is_nan() && s[k].is_nan());
            assert!(
                same,
                "vector and scalar paths differ at x = {:e} ({:#010x}): {:e} vs {:e}",
                xs[k],
                xs[k].to_bits(),
                v[k],
                s[k]
            );
        }
        v
    }
}
