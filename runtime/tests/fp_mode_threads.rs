//! The library kernels' threads flush subnormals as the generated kernels do (FTZ/DAZ, as
//! XLA CPU's intra-op threads), whatever state the process's global rayon pool is in.
//! Here it is built before any JIT code runs, so its threads keep the default IEEE mode:
//! a dot whose blocks ran there would read subnormal operands as themselves.

use hlo_ir::Tensor;
use hlo_runtime::{CompileOptions, Program};

const N: usize = 512;

#[test]
fn a_parallel_dot_reads_subnormals_as_zero_on_every_thread() {
    // Before anything of the runtime runs: threads in the default floating-point mode.
    let _ = rayon::ThreadPoolBuilder::new().num_threads(4).build_global();
    let src = format!(
        "HloModule daz\nENTRY e {{\n  a = f32[{N},{N}] parameter(0)\n  b = f32[{N},{N}] parameter(1)\n  ROOT d = f32[{N},{N}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n}}\n"
    );
    let m = hlo_driver::parse(&src).unwrap();
    let p = Program::compile(&m, &CompileOptions::default()).unwrap();
    let dims = [N as u64, N as u64];
    // 1e-40 is subnormal; read as itself, each product is 1e-30 and each sum 5e-28.
    let a = Tensor::from_f32(&dims, &vec![1e-40f32; N * N]).unwrap();
    let b = Tensor::from_f32(&dims, &vec![1e10f32; N * N]).unwrap();
    let out = p.run(&[a, b]).unwrap()[0].to_f64_vec().unwrap();
    let nonzero = out.iter().filter(|&&x| x != 0.0).count();
    // XLA CPU returns zeros for this dot (measured with run_hlo.py, 256 and 1024 squared).
    assert_eq!(nonzero, 0, "{nonzero} of {} results read a subnormal operand", N * N);
    // Normal values still multiply.
    let a = Tensor::from_f32(&dims, &vec![1e-20f32; N * N]).unwrap();
    let b = Tensor::from_f32(&dims, &vec![1e10f32; N * N]).unwrap();
    let out = p.run(&[a, b]).unwrap()[0].to_f64_vec().unwrap();
    assert!(out.iter().all(|&x| (x / 512e-10 - 1.0).abs() < 1e-5), "{}", out[0]);
}
