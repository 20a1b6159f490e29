//! The PE-level model computes a real matrix product: bf16 operands, exact products, f32
//! partial sums flowing through the array and f32 accumulation across K folds. Its result
//! is compared bit for bit with the reference interpreter running the same product as HLO:
//! `dot(bf16, bf16) -> f32` when K fits in one fold (and for output-stationary, which
//! never folds K), and otherwise the dot blocked by the array's rows, one f32 partial sum
//! per K block added in order (the accumulation order of a K-folded systolic array).
//!
//! It lives here, not beside the model in `hlo-chip`, because it needs the interpreter:
//! the chip model depends on no crate of the workspace, not even for its tests.

use half::bf16;
use hlo_chip::config::{Dataflow, TpuConfig};
use hlo_chip::pe_array;
use hlo_chip::tile_ir::{Gemm, Schedule, TileProgram};
use hlo_chip::timeline::DmaEngine;
use hlo_interp as interp;
use hlo_ir::tensor::Tensor;

/// The simulator's sample operands (exact bf16, several binades, both signs).
fn values(n: u64, seed: u64) -> Vec<bf16> {
    pe_array::sample_operands(n, seed).into_iter().map(bf16::from_f32).collect()
}

/// The product computed by the interpreter from HLO text.
fn interpreted(g: Gemm, block: Option<u64>, a: &[bf16], b: &[bf16]) -> Vec<f32> {
    let (m, n, k) = (g.m, g.n, g.k);
    let body = match block {
        None => format!(
            "  ROOT d = f32[{m},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n"
        ),
        Some(r) => {
            let kb = k.div_ceil(r);
            let kp = kb * r;
            format!(
                "  z = bf16[] constant(0)\n\
                 \x20 ap = bf16[{m},{kp}] pad(a, z), padding=0_0x0_{pa}\n\
                 \x20 bp = bf16[{kp},{n}] pad(b, z), padding=0_{pa}x0_0\n\
                 \x20 a3 = bf16[{m},{kb},{r}] reshape(ap)\n\
                 \x20 b3 = bf16[{kb},{r},{n}] reshape(bp)\n\
                 \x20 p = f32[{kb},{m},{n}] dot(a3, b3), lhs_batch_dims={{1}}, lhs_contracting_dims={{2}}, rhs_batch_dims={{0}}, rhs_contracting_dims={{1}}\n\
                 \x20 zf = f32[] constant(0)\n\
                 \x20 ROOT s = f32[{m},{n}] reduce(p, zf), dimensions={{0}}, to_apply=add\n",
                pa = kp - k
            )
        }
    };
    let src = format!(
        "HloModule mxu\n\nadd {{\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}}\n\n\
         ENTRY main {{\n  a = bf16[{m},{k}] parameter(0)\n  b = bf16[{k},{n}] parameter(1)\n{body}}}\n"
    );
    // Parsed and verified (hlo-tpu's tests do not depend on hlo-check, whose
    // `hlo_check::parse` is the front door elsewhere).
    let (module, mut diags) = hlo_ir::text::parse(&src);
    if let Some(m) = &module {
        diags.extend(hlo_ir::verify::verify_source(m, &src));
    }
    let module = module
        .filter(|_| !diags.has_errors())
        .unwrap_or_else(|| panic!("{}", diags.render(&src, "mxu.hlo", false)));
    let inputs = [Tensor::from_bf16(&[m, k], a).unwrap(), Tensor::from_bf16(&[k, n], b).unwrap()];
    let out = interp::run(&module, &inputs).unwrap_or_else(|d| {
        panic!("{}", hlo_ir::Diagnostics::from(d).render(&src, "mxu.hlo", false))
    });
    out[0].to_vec::<f32>().unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn check(g: Gemm, r: u64, c: u64, df: Dataflow, schedule: Schedule) {
    let a = values(g.m * g.k, g.m * 31 + g.k);
    let b = values(g.k * g.n, g.n * 17 + g.k + 5);
    let cfg = TpuConfig {
        rows: r,
        cols: c,
        dataflow: df,
        accumulator_bytes: 2 * 5 * c * 4,
        ..TpuConfig::v3()
    };
    let p = TileProgram::gemm(g, &cfg, schedule);
    let dma = (schedule == Schedule::Pipelined).then(|| DmaEngine::new(6.0, 3));
    let af: Vec<f32> = a.iter().map(|x| x.to_f32()).collect();
    let bf: Vec<f32> = b.iter().map(|x| x.to_f32()).collect();
    let run = pe_array::simulate(&p, &af, &bf, dma, None).unwrap();
    let folds_k = df != Dataflow::Os && g.k > r;
    let want = interpreted(g, folds_k.then_some(r), &a, &b);
    let what = format!("{g:?} on {r}x{c} {df} {schedule:?}");
    assert_eq!(bits(&run.out), bits(&want), "{what}: PE array differs from the interpreter");
    if folds_k {
        // The blocked order really differs from a plain dot for these values, so the
        // comparison above is a real check of the accumulation order.
        let plain = interpreted(g, None, &a, &b);
        let close =
            run.out.iter().zip(&plain).all(|(x, y)| (x - y).abs() <= 1e-4 * (1.0 + y.abs()));
        assert!(close, "{what}: far from the plain dot");
    }
}

#[test]
fn pe_array_product_equals_interpreter_dot() {
    for df in Dataflow::ALL {
        for schedule in [Schedule::Sequential, Schedule::Pipelined] {
            // One fold, ragged folds in every dimension, K folded several times.
            check(Gemm { m: 7, n: 5, k: 6 }, 8, 8, df, schedule);
            check(Gemm { m: 13, n: 11, k: 29 }, 4, 6, df, schedule);
            check(Gemm { m: 33, n: 40, k: 64 }, 16, 16, df, schedule);
        }
    }
}

#[test]
fn blocked_order_is_visible_in_the_bits() {
    // Guard against a vacuous test: with these values the K-blocked sum and the plain
    // sequential dot differ in some bits, so equality above pins the order down.
    let g = Gemm { m: 13, n: 11, k: 29 };
    let a = values(g.m * g.k, g.m * 31 + g.k);
    let b = values(g.k * g.n, g.n * 17 + g.k + 5);
    assert_ne!(bits(&interpreted(g, Some(4), &a, &b)), bits(&interpreted(g, None, &a, &b)));
}

#[test]
fn operands_are_rounded_to_bf16_on_entry() {
    // 1 + 2^-10 is not a bf16: the array multiplies the rounded value (1.0).
    let g = Gemm { m: 1, n: 1, k: 1 };
    let cfg = TpuConfig { rows: 2, cols: 2, dataflow: Dataflow::Ws, ..TpuConfig::v3() };
    let p = TileProgram::gemm(g, &cfg, Schedule::Sequential);
    let run = pe_array::simulate(&p, &[1.0 + 1.0 / 1024.0], &[3.0], None, None).unwrap();
    assert_eq!(run.out, [3.0]);
    assert!(pe_array::simulate(&p, &[1.0, 2.0], &[3.0], None, None).is_err());
}
