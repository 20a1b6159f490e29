//! Prints the GEMM throughput table of the library kernels (`cargo run --release -p
//! hlo-runtime --example gemm_table`), or with `THREADS M K N` (or `THREADS conv`) times
//! that one product (the 3x3 ResNet-style convolution) for about three seconds.
use hlo_runtime::kernel_bench::{BenchCase, conv_gflops, gemm_gflops, gemm_gflops_table};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| args[i].parse::<usize>().expect("a number");
    match args.len() {
        0 => print!("{}", gemm_gflops_table()),
        2 if args[1] == "conv" => {
            println!("{:.1} GFLOP/s", conv_gflops(8, 56, 64, 64, num(0), 3.0))
        }
        4 => {
            let c = BenchCase {
                label: "",
                batch: 1,
                m: num(1),
                k: num(2),
                n: num(3),
                rhs_transposed: false,
            };
            println!("{:.1} GFLOP/s", gemm_gflops(&c, num(0), 3.0));
        }
        _ => eprintln!("usage: gemm_table [THREADS (M K N | conv)]"),
    }
}
