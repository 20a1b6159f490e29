//! Prints the GEMM throughput table of the library kernels (`cargo run --release -p
//! hlo-runtime --example gemm_table`).
fn main() {
    print!("{}", hlo_runtime::kernels::gemm_gflops_table());
}
