//! The library kernels against references: `dot_general` against a by-definition loop
//! and the reference interpreter, `convolution` against the interpreter on tiny modules.

use crate::{
    convolution_f32, convolution_f32_direct, convolution_f64, dot::dot_output_dims,
    dot_general_f32, dot_general_f64,
};
use hlo_ir::op::{Convolution, DotDims};
use hlo_ir::{Op, Tensor};

/// Deterministic values in [-1, 1) on a 1/64 grid (so most sums are exact in f32).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 33) % 128) as f32 / 64.0 - 1.0
        })
        .collect()
}

fn strides(dims: &[usize]) -> Vec<usize> {
    let mut st = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        st[d] = st[d + 1] * dims[d + 1];
    }
    st
}

/// Every multi-index of `dims`, row-major.
fn indices(dims: &[usize]) -> Vec<Vec<usize>> {
    let mut all = vec![vec![]];
    for &d in dims {
        all = all
            .into_iter()
            .flat_map(|p| (0..d).map(move |i| [p.clone(), vec![i]].concat()))
            .collect();
    }
    all
}

fn dn(lb: &[i64], rb: &[i64], lc: &[i64], rc: &[i64]) -> DotDims {
    DotDims {
        lhs_batch: lb.to_vec(),
        rhs_batch: rb.to_vec(),
        lhs_contracting: lc.to_vec(),
        rhs_contracting: rc.to_vec(),
        ..Default::default()
    }
}

/// `dot_general` by definition, in f64.
fn naive_dot(l: &[f32], ld: &[usize], r: &[f32], rd: &[usize], d: &DotDims) -> Vec<f64> {
    let u = |v: &[i64]| -> Vec<usize> { v.iter().map(|&x| x as usize).collect() };
    let (lb, rb, lc, rc) =
        (u(&d.lhs_batch), u(&d.rhs_batch), u(&d.lhs_contracting), u(&d.rhs_contracting));
    let lf: Vec<usize> = (0..ld.len()).filter(|x| !lb.contains(x) && !lc.contains(x)).collect();
    let rf: Vec<usize> = (0..rd.len()).filter(|x| !rb.contains(x) && !rc.contains(x)).collect();
    let (ls, rs) = (strides(ld), strides(rd));
    let bdims: Vec<usize> = lb.iter().map(|&x| ld[x]).collect();
    let lfd: Vec<usize> = lf.iter().map(|&x| ld[x]).collect();
    let rfd: Vec<usize> = rf.iter().map(|&x| rd[x]).collect();
    let cd: Vec<usize> = lc.iter().map(|&x| ld[x]).collect();
    let mut out = Vec::new();
    for bi in indices(&bdims) {
        for li in indices(&lfd) {
            for ri in indices(&rfd) {
                let mut acc = 0f64;
                for ci in indices(&cd) {
                    let mut lo = 0;
                    let mut ro = 0;
                    for (k, &i) in bi.iter().enumerate() {
                        lo += i * ls[lb[k]];
                        ro += i * rs[rb[k]];
                    }
                    for (k, &i) in ci.iter().enumerate() {
                        lo += i * ls[lc[k]];
                        ro += i * rs[rc[k]];
                    }
                    lo += li.iter().zip(&lf).map(|(&i, &x)| i * ls[x]).sum::<usize>();
                    ro += ri.iter().zip(&rf).map(|(&i, &x)| i * rs[x]).sum::<usize>();
                    acc += l[lo] as f64 * r[ro] as f64;
                }
                out.push(acc);
            }
        }
    }
    out
}

fn close(got: &[f32], want: &[f64], k: usize, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let tol = 1e-5 * (k.max(1) as f64);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= tol * w.abs().max(1.0),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

fn check_dot(ld: &[usize], rd: &[usize], d: &DotDims) {
    let what = format!("dot {ld:?} x {rd:?} {d:?}");
    let l = values(ld.iter().product(), 1 + ld.len() as u64);
    let r = values(rd.iter().product(), 7 + rd.len() as u64);
    let od = dot_output_dims(ld, rd, d);
    let mut out = vec![f32::NAN; od.iter().product()];
    dot_general_f32(&l, ld, &r, rd, d, &mut out);
    let want = naive_dot(&l, ld, &r, rd, d);
    let k: usize = d.lhs_contracting.iter().map(|&x| ld[x as usize]).product();
    close(&out, &want, k, &what);
    // f64 as well.
    let (l64, r64): (Vec<f64>, Vec<f64>) =
        (l.iter().map(|&x| x as f64).collect(), r.iter().map(|&x| x as f64).collect());
    let mut out64 = vec![f64::NAN; out.len()];
    dot_general_f64(&l64, ld, &r64, rd, d, &mut out64);
    for (i, (&g, &w)) in out64.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-9 * w.abs().max(1.0),
            "{what} (f64): element {i}: got {g}, want {w}"
        );
    }
}

#[test]
fn dot_matmul_and_transposes() {
    for (m, k, n) in [(3, 4, 5), (1, 7, 9), (9, 7, 1), (1, 1, 1), (17, 33, 29), (40, 50, 60)] {
        check_dot(&[m, k], &[k, n], &dn(&[], &[], &[1], &[0]));
        check_dot(&[k, m], &[k, n], &dn(&[], &[], &[0], &[0]));
        check_dot(&[m, k], &[n, k], &dn(&[], &[], &[1], &[1]));
        check_dot(&[k, m], &[n, k], &dn(&[], &[], &[0], &[1]));
    }
}

#[test]
fn dot_vectors() {
    check_dot(&[13], &[13], &dn(&[], &[], &[0], &[0]));
    check_dot(&[6, 13], &[13], &dn(&[], &[], &[1], &[0]));
    check_dot(&[13], &[13, 6], &dn(&[], &[], &[0], &[0]));
    check_dot(&[4], &[5], &dn(&[], &[], &[], &[]));
    check_dot(&[3, 4], &[5, 2], &dn(&[], &[], &[], &[]));
}

#[test]
fn dot_empty_contraction_and_results() {
    // K = 0: all zeros.
    check_dot(&[3, 0], &[0, 4], &dn(&[], &[], &[1], &[0]));
    check_dot(&[2, 3, 0], &[2, 0, 4], &dn(&[0], &[0], &[2], &[1]));
    // M = 0, N = 0, B = 0: empty result.
    check_dot(&[0, 5], &[5, 4], &dn(&[], &[], &[1], &[0]));
    check_dot(&[3, 5], &[5, 0], &dn(&[], &[], &[1], &[0]));
    check_dot(&[0, 3, 5], &[0, 5, 4], &dn(&[0], &[0], &[2], &[1]));
}

#[test]
fn dot_batched() {
    // Leading batch dims (the corpus' attention shapes).
    check_dot(&[2, 4, 8, 16], &[2, 4, 16, 16], &dn(&[0, 1], &[0, 1], &[3], &[2]));
    check_dot(&[2, 4, 8, 16], &[2, 4, 16, 16], &dn(&[0, 1], &[0, 1], &[3], &[3]));
    // Batch dims elsewhere, and paired in a different order.
    check_dot(&[5, 3, 6], &[6, 3, 4], &dn(&[1], &[1], &[2], &[0]));
    check_dot(&[2, 3, 5, 4], &[3, 2, 4, 6], &dn(&[0, 1], &[1, 0], &[3], &[2]));
    check_dot(&[3, 5, 2, 4], &[4, 2, 3, 6], &dn(&[2, 0], &[1, 2], &[3], &[0]));
    // Size-1 batch and many batches of small products.
    check_dot(&[1, 7, 9], &[1, 9, 5], &dn(&[0], &[0], &[2], &[1]));
    check_dot(&[64, 4, 8], &[64, 8, 4], &dn(&[0], &[0], &[2], &[1]));
    // Batched matvec and vecmat.
    check_dot(&[6, 7, 9], &[6, 9], &dn(&[0], &[0], &[2], &[1]));
    check_dot(&[6, 9], &[6, 9, 7], &dn(&[0], &[0], &[1], &[1]));
    // Large enough for the library and the parallel batch split.
    check_dot(&[8, 24, 40], &[8, 40, 32], &dn(&[0], &[0], &[2], &[1]));
    check_dot(&[3, 24, 40], &[3, 32, 40], &dn(&[0], &[0], &[2], &[2]));
}

#[test]
fn dot_multiple_contracting_and_free_dims() {
    // Contracting dims in memory order on both sides: strided, no copy.
    check_dot(&[4, 3, 5], &[3, 5, 6], &dn(&[], &[], &[1, 2], &[0, 1]));
    // Contracting dims paired out of memory order: a copy.
    check_dot(&[4, 3, 5], &[5, 6, 3], &dn(&[], &[], &[1, 2], &[2, 0]));
    check_dot(&[4, 3, 5], &[5, 3, 6], &dn(&[], &[], &[2, 1], &[0, 1]));
    // Free dims split by a contracting dim: a copy.
    check_dot(&[4, 3, 5], &[3, 6], &dn(&[], &[], &[1], &[0]));
    check_dot(&[3, 6], &[6, 2, 7], &dn(&[], &[], &[1], &[0]));
    check_dot(&[7, 6], &[2, 6, 7, 3], &dn(&[], &[], &[1], &[1]));
    // Everything at once.
    check_dot(&[2, 3, 4, 5, 6], &[6, 3, 7, 4, 2], &dn(&[1, 0], &[1, 4], &[2, 4], &[3, 0]));
    // Size-1 dims anywhere.
    check_dot(&[1, 4, 1, 5], &[5, 1, 3], &dn(&[], &[], &[3, 2], &[0, 1]));
    check_dot(&[4, 1], &[1, 3], &dn(&[], &[], &[1], &[0]));
}

#[test]
fn dot_large_uses_threads_and_matches() {
    // Above the parallel threshold, on a two-thread pool.
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    pool.install(|| {
        check_dot(&[100, 130], &[130, 90], &dn(&[], &[], &[1], &[0]));
        check_dot(&[130, 100], &[90, 130], &dn(&[], &[], &[0], &[1]));
        check_dot(&[3, 60, 70], &[3, 70, 50], &dn(&[0], &[0], &[2], &[1]));
        // Above `PARALLEL_MNK` (6Mi multiply-adds): one GEMM split into a block of rows
        // (more rows than columns) or of columns per thread, operands plain or transposed.
        check_dot(&[203, 170], &[170, 190], &dn(&[], &[], &[1], &[0]));
        check_dot(&[150, 181], &[250, 181], &dn(&[], &[], &[1], &[1]));
        check_dot(&[181, 150], &[181, 250], &dn(&[], &[], &[0], &[0]));
    });
}

/// Parses and runs `text` on the interpreter (f32 inputs), returning the f32 result.
fn interp(text: &str, inputs: &[(&[usize], &[f32])]) -> Vec<f32> {
    let m = hlo_check::parse(text).unwrap_or_else(|e| panic!("{text}\n{e:?}"));
    let ts: Vec<Tensor> = inputs
        .iter()
        .map(|(d, v)| {
            Tensor::from_f32(&d.iter().map(|&x| x as u64).collect::<Vec<_>>(), v).unwrap()
        })
        .collect();
    let out = hlo_interp::run(&m, &ts).unwrap_or_else(|e| panic!("{text}\n{e:?}"));
    out[0].to_vec::<f32>().unwrap()
}

fn shape(dims: &[usize]) -> String {
    format!("f32[{}]", dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(","))
}

fn list(v: &[i64]) -> String {
    v.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",")
}

#[test]
fn dot_matches_interpreter() {
    for (ld, rd, d) in [
        (vec![8usize, 16], vec![16usize, 10], dn(&[], &[], &[1], &[0])),
        (vec![32, 64], vec![48, 64], dn(&[], &[], &[1], &[1])),
        (vec![2, 4, 8, 16], vec![2, 4, 16, 16], dn(&[0, 1], &[0, 1], &[3], &[2])),
        (vec![4, 3, 2, 5], vec![5, 2, 6, 3], dn(&[2], &[1], &[3, 1], &[0, 3])),
    ] {
        let od = dot_output_dims(&ld, &rd, &d);
        let text = format!(
            "HloModule t\nENTRY e {{\n  a = {} parameter(0)\n  b = {} parameter(1)\n  ROOT d = {} dot(a, b), lhs_batch_dims={{{}}}, lhs_contracting_dims={{{}}}, rhs_batch_dims={{{}}}, rhs_contracting_dims={{{}}}\n}}\n",
            shape(&ld),
            shape(&rd),
            shape(&od),
            list(&d.lhs_batch),
            list(&d.lhs_contracting),
            list(&d.rhs_batch),
            list(&d.rhs_contracting)
        );
        let (l, r) = (values(ld.iter().product(), 3), values(rd.iter().product(), 4));
        let want = interp(&text, &[(&ld, &l), (&rd, &r)]);
        let mut got = vec![0f32; want.len()];
        dot_general_f32(&l, &ld, &r, &rd, &d, &mut got);
        let k: usize = d.lhs_contracting.iter().map(|&x| ld[x as usize]).product();
        close(&got, &want.iter().map(|&x| x as f64).collect::<Vec<_>>(), k, &text);
    }
}

/// One window dim: (stride, pad_lo, pad_hi, lhs_dilate, rhs_dilate, reversal).
type Win = (i64, i64, i64, i64, i64, bool);

/// One convolution case: operand dims, window text fields, labels and group counts.
struct ConvCase<'a> {
    lhs: Vec<usize>,
    rhs: Vec<usize>,
    win: Vec<Win>,
    labels: &'a str,
    fgc: usize,
    bgc: usize,
}

/// Positions of `b`/`f` (or `i`/`o`) and of the digits 0.. in one label part.
fn label_dims(part: &str, a: char, b: char) -> (usize, usize, Vec<usize>) {
    let pos = |c: char| part.find(c).unwrap();
    let mut sp: Vec<(usize, usize)> =
        part.char_indices().filter_map(|(i, c)| c.to_digit(10).map(|d| (d as usize, i))).collect();
    sp.sort();
    (pos(a), pos(b), sp.into_iter().map(|(_, i)| i).collect())
}

fn conv_out_dims(c: &ConvCase) -> Vec<usize> {
    let (inp, rest) = c.labels.split_once('_').unwrap();
    let (ker, out) = rest.split_once("->").unwrap();
    let (ib, if_, isp) = label_dims(inp, 'b', 'f');
    let (_, ko, ksp) = label_dims(ker, 'i', 'o');
    let (ob, of, osp) = label_dims(out, 'b', 'f');
    let _ = if_;
    let mut od = vec![0usize; c.lhs.len()];
    od[ob] = c.lhs[ib] / c.bgc;
    od[of] = c.rhs[ko];
    for s in 0..isp.len() {
        let (st, lo, hi, ldl, rdl, _) = c.win[s];
        let n = c.lhs[isp[s]] as i64;
        let padded = if n == 0 { 0 } else { (n - 1) * ldl + 1 } + lo + hi;
        let k = c.rhs[ksp[s]] as i64;
        let kd = if k == 0 { 0 } else { (k - 1) * rdl + 1 };
        od[osp[s]] = if padded < kd { 0 } else { ((padded - kd) / st + 1) as usize };
    }
    od
}

fn check_conv(c: &ConvCase) {
    let (_, rest) = c.labels.split_once('_').unwrap();
    let (ker, _) = rest.split_once("->").unwrap();
    let (_, _, ksp) = label_dims(ker, 'i', 'o');
    let od = conv_out_dims(c);
    let x = |f: &dyn Fn(&Win) -> String| c.win.iter().map(f).collect::<Vec<_>>().join("x");
    let window = if c.win.is_empty() {
        String::new()
    } else {
        format!(
            "window={{size={} stride={} pad={} lhs_dilate={} rhs_dilate={} rhs_reversal={}}}, ",
            ksp.iter().map(|&d| c.rhs[d].to_string()).collect::<Vec<_>>().join("x"),
            x(&|w| w.0.to_string()),
            x(&|w| format!("{}_{}", w.1, w.2)),
            x(&|w| w.3.to_string()),
            x(&|w| w.4.to_string()),
            x(&|w| u8::from(w.5).to_string()),
        )
    };
    let text = format!(
        "HloModule t\nENTRY e {{\n  a = {} parameter(0)\n  b = {} parameter(1)\n  ROOT c = {} convolution(a, b), {window}dim_labels={}, feature_group_count={}, batch_group_count={}\n}}\n",
        shape(&c.lhs),
        shape(&c.rhs),
        shape(&od),
        c.labels,
        c.fgc,
        c.bgc
    );
    let (l, r) = (values(c.lhs.iter().product(), 11), values(c.rhs.iter().product(), 12));
    let want = interp(&text, &[(&c.lhs, &l), (&c.rhs, &r)]);
    let m = hlo_check::parse(&text).unwrap();
    let comp = m.comp(m.entry);
    let Op::Convolution(conv) = &comp.instr(comp.root().unwrap()).op else {
        panic!("not a convolution")
    };
    let conv: &Convolution = conv;
    let mut got = vec![f32::NAN; want.len()];
    convolution_f32(&l, &c.lhs, &r, &c.rhs, conv, &mut got, &od);
    let k = c.rhs.iter().product::<usize>() / c.rhs[label_dims(ker, 'i', 'o').1].max(1);
    close(&got, &want.iter().map(|&v| v as f64).collect::<Vec<_>>(), k, &text);
    // f64 agrees with f32 on these exactly representable inputs (up to rounding).
    let (l64, r64): (Vec<f64>, Vec<f64>) =
        (l.iter().map(|&v| v as f64).collect(), r.iter().map(|&v| v as f64).collect());
    let mut got64 = vec![f64::NAN; want.len()];
    convolution_f64(&l64, &c.lhs, &r64, &c.rhs, conv, &mut got64, &od);
    close(&got, &got64, k, &format!("f64 vs f32: {text}"));
    // The direct loop (skipping padding and holes) accumulates in the interpreter's
    // order: bit for bit.
    let mut direct = vec![f32::NAN; want.len()];
    convolution_f32_direct(&l, &c.lhs, &r, &c.rhs, conv, &mut direct, &od);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&direct), bits(&want), "direct loop: {text}");
    // Infinite and NaN kernel values: skipped positions contribute no NaN (what the
    // direct loop is taken for), the rest as the interpreter.
    let n = r.len();
    if n == 0 {
        return;
    }
    for planted in [&[(0, f32::INFINITY), (n / 2, f32::NEG_INFINITY)][..], &[(n - 1, f32::NAN)]] {
        let mut r = r.clone();
        for &(i, v) in planted {
            r[i] = v;
        }
        let want = interp(&text, &[(&c.lhs, &l), (&c.rhs, &r)]);
        let mut got = vec![f32::NAN; want.len()];
        convolution_f32(&l, &c.lhs, &r, &c.rhs, conv, &mut got, &od);
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            let ok = if w.is_finite() {
                (g as f64 - w as f64).abs() <= 1e-5 * k.max(1) as f64 * (w.abs().max(1.0) as f64)
            } else {
                g.is_nan() && w.is_nan() || g == w
            };
            assert!(ok, "{planted:?}: element {i}: got {g}, want {w}: {text}");
        }
    }
}

fn plain(n: usize) -> Vec<Win> {
    vec![(1, 0, 0, 1, 1, false); n]
}

fn pad1(n: usize) -> Vec<Win> {
    vec![(1, 1, 1, 1, 1, false); n]
}

fn case<'a>(lhs: &[usize], rhs: &[usize], win: Vec<Win>, labels: &'a str) -> ConvCase<'a> {
    ConvCase { lhs: lhs.to_vec(), rhs: rhs.to_vec(), win, labels, fgc: 1, bgc: 1 }
}

#[test]
fn conv_corpus_shapes() {
    // conv2d_nhwc, conv2d_nhwc_grad and train_cnn_sgd (forward, input grad, weight grad),
    // as written by JAX and as the optimizer rewrites the weight grads.
    for c in [
        case(&[2, 16, 16, 4], &[3, 3, 4, 8], pad1(2), "b01f_01io->b01f"),
        case(&[2, 12, 12, 3], &[3, 3, 3, 6], pad1(2), "b01f_01io->b01f"),
        case(&[2, 12, 12, 6], &[3, 3, 3, 6], pad1(2), "b01f_01oi->b01f"),
        case(&[2, 12, 12, 3], &[2, 12, 12, 6], pad1(2), "f01b_i01o->01bf"),
        case(&[3, 12, 12, 2], &[12, 12, 2, 6], pad1(2), "b01f_01io->b01f"),
        case(&[4, 16, 16, 3], &[3, 3, 3, 8], pad1(2), "b01f_01io->b01f"),
        case(&[4, 8, 8, 8], &[3, 3, 8, 16], pad1(2), "b01f_01io->b01f"),
        case(&[4, 8, 8, 16], &[3, 3, 8, 16], pad1(2), "b01f_01oi->b01f"),
        case(&[4, 16, 16, 3], &[4, 16, 16, 8], pad1(2), "f01b_i01o->01bf"),
        case(&[4, 8, 8, 8], &[4, 8, 8, 16], pad1(2), "f01b_i01o->01bf"),
        case(&[8, 8, 8, 4], &[8, 8, 4, 16], pad1(2), "b01f_01io->b01f"),
    ] {
        check_conv(&c);
    }
}

#[test]
fn conv_layouts() {
    for c in [
        case(&[2, 3, 7, 6], &[4, 3, 3, 2], pad1(2), "bf01_oi01->bf01"),
        case(&[2, 7, 6, 3], &[3, 2, 3, 4], plain(2), "b01f_01io->bf01"),
        case(&[7, 2, 6, 3], &[4, 3, 2, 3], plain(2), "0b1f_o01i->f01b"),
        case(&[3, 7, 6, 2], &[3, 2, 4, 3], pad1(2), "f01b_1o0i->1b0f"),
        case(&[2, 9, 3], &[3, 3, 5], plain(1), "b0f_0io->b0f"),
        case(&[2, 5, 4, 3, 3], &[2, 2, 2, 3, 4], plain(3), "b012f_012io->b012f"),
        case(&[3, 4], &[4, 5], vec![], "bf_io->bf"),
    ] {
        check_conv(&c);
    }
}

#[test]
fn conv_window_options() {
    let t = |s, lo, hi, ld, rd, rev| (s, lo, hi, ld, rd, rev);
    for win in [
        vec![t(2, 0, 0, 1, 1, false), t(3, 1, 2, 1, 1, false)],
        vec![t(1, -1, 0, 1, 1, false), t(1, 2, -2, 1, 1, false)],
        vec![t(1, 1, 1, 2, 1, false), t(2, 0, 1, 3, 1, false)],
        vec![t(1, 0, 0, 1, 2, false), t(1, 2, 2, 1, 3, false)],
        vec![t(1, 1, 1, 1, 1, true), t(1, 0, 0, 1, 1, false)],
        vec![t(2, 2, 1, 2, 2, true), t(1, -1, 3, 1, 2, true)],
        // Padding larger than the input, windows entirely in padding.
        vec![t(1, 5, 5, 1, 1, false), t(1, 4, 0, 1, 1, false)],
    ] {
        check_conv(&case(&[2, 7, 6, 3], &[3, 2, 3, 4], win.clone(), "b01f_01io->b01f"));
        check_conv(&case(&[2, 3, 7, 6], &[4, 3, 3, 2], win, "bf01_oi01->bf01"));
    }
}

#[test]
fn conv_groups() {
    let mut c = case(&[2, 6, 5, 6], &[3, 3, 2, 9], pad1(2), "b01f_01io->b01f");
    c.fgc = 3;
    check_conv(&c);
    // Depthwise.
    let mut c = case(&[2, 6, 5, 4], &[3, 3, 1, 8], pad1(2), "b01f_01io->b01f");
    c.fgc = 4;
    check_conv(&c);
    let mut c = case(&[2, 4, 6, 5], &[6, 2, 3, 3], pad1(2), "bf01_oi01->bf01");
    c.fgc = 2;
    check_conv(&c);
    // Batch groups (what a grouped conv's weight gradient uses).
    let mut c = case(&[6, 5, 5, 3], &[3, 3, 3, 4], plain(2), "b01f_01io->b01f");
    c.bgc = 2;
    check_conv(&c);
    let mut c = case(&[3, 5, 5, 4], &[3, 3, 3, 8], pad1(2), "f01b_i01o->01bf");
    c.bgc = 4;
    check_conv(&c);
}

#[test]
fn conv_degenerate() {
    // Zero input features, zero batch, an empty output window.
    check_conv(&case(&[2, 5, 5, 0], &[3, 3, 0, 4], pad1(2), "b01f_01io->b01f"));
    check_conv(&case(&[0, 5, 5, 3], &[3, 3, 3, 4], pad1(2), "b01f_01io->b01f"));
    check_conv(&case(&[2, 2, 5, 3], &[3, 3, 3, 4], plain(2), "b01f_01io->b01f"));
    check_conv(&case(&[1, 1, 1, 1], &[1, 1, 1, 1], plain(2), "b01f_01io->b01f"));
}

#[test]
fn conv_large_parallel() {
    // Big enough for row chunks on two threads and for the library GEMM.
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    pool.install(|| {
        check_conv(&case(&[2, 20, 20, 16], &[3, 3, 16, 24], pad1(2), "b01f_01io->b01f"));
        check_conv(&case(&[2, 16, 20, 20], &[24, 16, 3, 3], pad1(2), "bf01_oi01->bf01"));
        check_conv(&case(&[2, 20, 20, 16], &[2, 20, 20, 24], pad1(2), "f01b_i01o->01bf"));
    });
}

#[test]
fn gemm_grids_use_every_thread_blocks_allow_and_pack_least() {
    use crate::gemm::{LANE_BLOCK, Strided, grid, least_block};
    // Row-major outputs: at least 64 columns (the crate's kernel runs along them) and 16
    // rows a block; column-major: the other way round.
    let row_major = least_block(Strided::row_major(0, 512));
    assert_eq!(row_major, (16, LANE_BLOCK));
    assert_eq!(least_block(Strided { off: 0, rs: 1, cs: 512 }), (LANE_BLOCK, 16));
    // Two threads: one block of columns, or of rows when there are more rows.
    assert_eq!(grid(1024, 1024, 2, row_major), (1, 2));
    assert_eq!(grid(2048, 512, 2, row_major), (2, 1));
    // Sixteen: a square product in 4 x 4 blocks, a wide one mostly in columns.
    assert_eq!(grid(1024, 1024, 16, row_major), (4, 4));
    assert_eq!(grid(128, 4096, 16, row_major), (1, 16));
    // Fewer blocks than threads when small; narrow outputs split by rows only.
    assert_eq!(grid(16, 16, 16, row_major), (1, 1));
    assert_eq!(grid(32, 48, 16, row_major), (2, 1));
    assert_eq!(grid(27, 32, 2, row_major), (2, 1));
    assert_eq!(grid(32, 27, 2, (LANE_BLOCK, 16)), (1, 2));
    for (m, n, t) in [(100, 7, 5), (1, 1, 1), (4096, 16, 192), (640, 640, 7), (33, 1000, 12)] {
        let (r, c) = grid(m, n, t, row_major);
        assert!(r >= 1 && c >= 1 && r * c <= t, "{m}x{n} on {t}: {r}x{c}");
        assert!(r <= m.div_ceil(16) && c <= n.div_ceil(LANE_BLOCK), "{m}x{n} on {t}: {r}x{c}");
    }
}

#[test]
fn gemm_depth_split_gives_the_one_thread_bits() {
    // Small outputs with long contractions (27 x 32 and 5 x 70, k of 16384 and 1500:
    // fewer blocks than threads, more slices) split along k: each slice's product on its
    // own, then summed in slice order, equal to the one-thread sum slice after slice, for
    // row- and column-major outputs, written or accumulated into.
    use crate::gemm::{Gemm, Shape, Strided};
    for (m, k, n) in [(27, 16384, 32), (5, 1500, 70), (64, 4096, 64)] {
        let mut rnd = uniform(0x9e37_79b9_7f4a_7c15u64);
        let (a, b, c0) = (rnd(m * k), rnd(k * n), rnd(m * n));
        for (cl, what) in [
            (Strided::row_major(0, n), "row-major"),
            (Strided { off: 0, rs: 1, cs: m }, "column-major"),
        ] {
            for accumulate in [false, true] {
                let run = |threads: usize| {
                    let g = Gemm {
                        s: Shape { m, n, k },
                        a: &a,
                        al: Strided::row_major(0, k),
                        b: &b,
                        bl: Strided::row_major(0, n),
                        accumulate,
                        threads,
                    };
                    let pool =
                        rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                    let mut out = c0.clone();
                    pool.install(|| g.run(&mut out, cl));
                    out.iter().map(|x| x.to_bits()).collect::<Vec<u32>>()
                };
                let one = run(1);
                for t in [2, 3, 16] {
                    let differ = run(t).iter().zip(&one).filter(|(x, y)| x != y).count();
                    assert_eq!(
                        differ, 0,
                        "{m}x{k}x{n} {what}, accumulate {accumulate}, {t} threads"
                    );
                }
            }
        }
    }
}

/// A generator of `len` f32 values uniform in [-1, 1) from `seed` (an LCG): values off any
/// grid, so that a different order of a sum shows in its bits.
fn uniform(seed: u64) -> impl FnMut(usize) -> Vec<f32> {
    let mut state = seed;
    move |len| {
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }
}

#[test]
fn batched_dots_split_over_elements_and_blocks_give_the_one_thread_bits() {
    // Three batch elements: one after another, each over the whole pool, on 2 threads;
    // all at once, each over its share of the pool, on 4, 7 and 16.
    let (nb, m, k, n) = (3, 96, 700, 130);
    let mut rnd = uniform(0x0123_4567_89ab_cdefu64);
    let (a, b) = (rnd(nb * m * k), rnd(nb * k * n));
    let d = dn(&[0], &[0], &[2], &[1]);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let mut out = vec![0f32; nb * m * n];
        pool.install(|| dot_general_f32(&a, &[nb, m, k], &b, &[nb, k, n], &d, &mut out));
        out.iter().map(|x| x.to_bits()).collect::<Vec<u32>>()
    };
    let one = run(1);
    for t in [2, 4, 7, 16] {
        let differ = run(t).iter().zip(&one).filter(|(x, y)| x != y).count();
        assert_eq!(differ, 0, "{t} threads: elements whose bits differ");
    }
}

#[test]
fn gemm_split_into_a_grid_gives_the_one_thread_bits() {
    // A product split 2 x 2, 1 x 3, 4 x 4 ... equals the single call bit for bit: every
    // element is the same sum over k, in the same slices ([`gemm::DEPTH`]), whichever block
    // it is in. Contractions of one slice, of a slice and a part (768: the `gemm` crate
    // would sum 384 + 384 for a large block but 512 + 256 for one of at most 64 x 64, as
    // the 32 x 32 blocks of 16 threads are), and of three.
    for (m, k, n) in [(160, 96, 176), (128, 768, 128), (96, 1100, 200)] {
        // Values off any grid, so that a different order of the sum shows in the bits.
        let mut rnd = uniform(0x2545_f491_4f6c_dd1du64);
        let (a, b) = (rnd(m * k), rnd(k * n));
        let d = dn(&[], &[], &[1], &[0]);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let mut out = vec![0f32; m * n];
            pool.install(|| dot_general_f32(&a, &[m, k], &b, &[k, n], &d, &mut out));
            out.iter().map(|x| x.to_bits()).collect::<Vec<u32>>()
        };
        let one = run(1);
        for t in [2, 3, 4, 6, 16] {
            let differ = run(t).iter().zip(&one).filter(|(x, y)| x != y).count();
            assert_eq!(differ, 0, "{m}x{k}x{n} on {t} threads: elements whose bits differ");
        }
    }
}

/// `gather` over the pool (from `2 · PARALLEL_COPY` elements) and on one thread gives the
/// by-definition copy: contiguous and strided rows, a reversed dimension (negative
/// stride), rows longer and shorter than a task's run, a one-dimensional array.
#[test]
fn gather_over_the_pool_is_the_definition() {
    let src: Vec<u32> = (0..1u32 << 19).collect();
    // (sizes, strides, base), each reading inside `src`.
    let cases: Vec<(Vec<usize>, Vec<isize>, isize)> = vec![
        (vec![64, 32, 64], vec![8192, 64, 1], 0), // contiguous rows
        (vec![32, 64, 64], vec![64, 1, 4096], 0), // a transpose: strided rows
        (vec![16, 128, 3], vec![-3 * 128, 3, 1], 15 * 384), // the first dimension reversed
        (vec![300_000], vec![1], 7),              // one row
        (vec![40_000, 5], vec![5, -1], 4),        // short rows read backwards
    ];
    for (sizes, strides, base) in cases {
        let total: usize = sizes.iter().product();
        let mut want = Vec::with_capacity(total);
        for idx in indices(&sizes) {
            let at = base + idx.iter().zip(&strides).map(|(&i, &s)| i as isize * s).sum::<isize>();
            want.push(src[at as usize]);
        }
        for threads in [1usize, 3] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let got = pool.install(|| crate::gather(&src, &sizes, &strides, base));
            assert!(got == want, "{sizes:?} / {strides:?} on {threads} threads");
        }
    }
}
