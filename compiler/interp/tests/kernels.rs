//! The interpreter's kernels against published answers and independent references:
//! Random123 known-answer vectors and XLA CPU's rng streams, FFTs against a naive DFT,
//! Cholesky and triangular solves against products, complex arithmetic. (Integration
//! tests: the library is compiled once, at its opt-level 3, not again as a test harness.)

mod rng_tests {
    use hlo_interp::rng::*;
    use hlo_interp::value::{Array, Data};
    use hlo_ir::ElemType;
    use hlo_ir::op::{RngAlgorithm, RngDistribution};

    // Known-answer vectors of Random123 (kat_vectors): philox4x32 10 rounds and
    // threefry2x32 20 rounds.
    #[test]
    fn philox4x32_known_answers() {
        assert_eq!(philox4x32([0; 4], [0; 2]), [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
        assert_eq!(
            philox4x32([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox4x32([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0]),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn threefry2x32_known_answers() {
        assert_eq!(threefry2x32([0; 2], [0; 2]), [0x6b200159, 0x99ba4efe]);
        assert_eq!(threefry2x32([u32::MAX; 2], [u32::MAX; 2]), [0x1cb996fc, 0xbb002be7]);
        assert_eq!(
            threefry2x32([0x243f6a88, 0x85a308d3], [0x13198a2e, 0x03707344]),
            [0xc4923a9c, 0x483df7a0]
        );
    }

    // XLA CPU (jax 0.10.2) on state (0x123456789abcdef0, 0x0fedcba987654321), u32[2,3].
    const S: [u64; 2] = [0x1234_5678_9abc_def0, 0x0fed_cba9_8765_4321];

    #[test]
    fn philox_matches_xla() {
        let (state, bits) = bit_generator(RngAlgorithm::Philox, &S, 32, &[2, 3]).unwrap();
        assert_eq!(state, vec![S[0], 0x0fed_cba9_8765_4323]);
        assert_eq!(
            bits,
            vec![0xff2403f1, 0x0e3e6ba8, 0x405ce119, 0xaed8669e, 0x9e057f2a, 0x4d5d28bd]
        );
        let (state, bits) = bit_generator(RngAlgorithm::Default, &S, 64, &[3]).unwrap();
        assert_eq!(state, vec![S[0], 0x0fed_cba9_8765_4323]);
        assert_eq!(bits, vec![0x0e3e6ba8ff2403f1, 0xaed8669e405ce119, 0x4d5d28bd9e057f2a]);
        let (_, bits) =
            bit_generator(RngAlgorithm::Philox, &[S[0], S[1], u64::MAX - 1], 8, &[5]).unwrap();
        assert_eq!(bits, vec![0x58, 0xa8, 0xd6, 0x69, 0x46]);
    }

    #[test]
    fn threefry_matches_xla() {
        let (state, bits) = bit_generator(RngAlgorithm::ThreeFry, &S, 32, &[2, 3]).unwrap();
        assert_eq!(state, vec![S[0], 0x0fed_cba9_8765_4324]);
        assert_eq!(
            bits,
            vec![0x1324f11a, 0xf5ee7bf6, 0xac0a940e, 0x2ae1effe, 0x5af1ca39, 0x2594e3df]
        );
        let (state, bits) = bit_generator(RngAlgorithm::ThreeFry, &S, 64, &[3]).unwrap();
        assert_eq!(state, vec![S[0], 0x0fed_cba9_8765_4324]);
        assert_eq!(bits, vec![0x2ae1effe1324f11a, 0x5af1ca39f5ee7bf6, 0x2594e3dfac0a940e]);
    }

    #[test]
    fn halves_split_the_first_even_else_the_largest_dimension() {
        assert_eq!(Halves::of(&[3, 4, 2]).split, 1);
        assert_eq!(Halves::of(&[3, 5, 5]).split, 1);
        assert_eq!(Halves::of(&[3, 5, 5]).concat, vec![3, 3, 2, 5]);
        assert_eq!(Halves::of(&[]).concat, vec![2]);
        assert_eq!(Halves::of(&[5]).gather_map(&[5]), vec![(0, 0), (1, 0), (0, 1), (1, 1), (0, 2)]);
    }

    #[test]
    fn counters_start_at_xlas_value_and_advance_by_delta() {
        let c = Counters::default();
        assert_eq!(c.get_and_update("s", 7), [0x7012395, 0]);
        assert_eq!(c.get_and_update("s", 7), [0x701239c, 0]);
        assert_eq!(c.get_and_update("t", 1), [0x7012395, 0]);
    }

    // XLA CPU's rng streams.

    fn f32s(a: &Array) -> Vec<f32> {
        a.data.as_f32().to_vec()
    }

    // XLA CPU (jax 0.10.2) compiled `u = f32[5] rng(0, 1), distribution=rng_uniform` and
    // `n = f32[5] rng(0, 1), distribution=rng_normal` with these keys (its
    // `--xla_dump_hlo_pass_re=rng-expander` dump); the first execution's state is
    // 0x7012395. Its outputs:
    #[test]
    fn rng_steps_match_xla_given_its_key() {
        let zero = Array::new(ElemType::F32, Vec::new(), Data::F32(vec![0.0]));
        let one = Array::new(ElemType::F32, Vec::new(), Data::F32(vec![1.0]));
        let s = [INITIAL_STATE as u64, 0];
        let u = rng(
            RngDistribution::Uniform,
            13448155576104175439,
            s,
            &zero,
            &one,
            ElemType::F32,
            &[5],
        )
        .unwrap();
        let want = [
            0.22009384632110596,
            0.5597473382949829,
            0.482332706451416,
            0.05868268013000488,
            0.294669508934021,
        ];
        assert_eq!(f32s(&u), want.map(|x: f64| x as f32));
        let n =
            rng(RngDistribution::Normal, 5296180084612001234, s, &zero, &one, ElemType::F32, &[5])
                .unwrap();
        let want = [
            0.398869127035141,
            0.6750538945198059,
            -0.9326765537261963,
            -0.8736827969551086,
            -0.3231765031814575,
        ];
        for (g, w) in f32s(&n).iter().zip(want) {
            assert!((g - w as f32).abs() <= 2e-6 * (w as f32).abs().max(1.0), "{g} vs {w}");
        }
    }
}

mod fft_tests {
    use hlo_interp::fft::*;
    use hlo_interp::value::{Array, Data, Failure};
    use hlo_ir::ElemType;
    use num_complex::Complex64;
    use std::f64::consts::PI;

    fn c128(dims: &[usize], v: Vec<Complex64>) -> Array {
        Array::new(ElemType::C128, dims.to_vec(), Data::C128(v))
    }

    /// The DFT by its definition along the last axis of rows of length n.
    fn naive(x: &[Complex64], n: usize, sign: f64) -> Vec<Complex64> {
        x.chunks(n)
            .flat_map(|row| {
                (0..n).map(move |k| {
                    (0..n)
                        .map(|j| {
                            row[j]
                                * Complex64::from_polar(
                                    1.0,
                                    sign * 2.0 * PI * (j * k) as f64 / n as f64,
                                )
                        })
                        .sum()
                })
            })
            .collect()
    }

    fn signal(n: usize, seed: u64) -> Vec<Complex64> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut next = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        };
        (0..n).map(|_| Complex64::new(next(), next())).collect()
    }

    fn close(a: &[Complex64], b: &[Complex64], tol: f64) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).norm() <= tol * (1.0 + y.norm()), "element {i}: {x} vs {y}");
        }
    }

    #[test]
    fn known_signals() {
        // An impulse has a flat spectrum; a constant, a single DC bin.
        let mut imp = vec![Complex64::new(0.0, 0.0); 8];
        imp[0] = Complex64::new(1.0, 0.0);
        let r = fft(&c128(&[8], imp), "FFT", &[8], (ElemType::C128, &[8])).unwrap();
        assert!(r.data.as_c128().iter().all(|z| (z - Complex64::new(1.0, 0.0)).norm() < 1e-15));
        let r = fft(
            &c128(&[5], vec![Complex64::new(2.0, 0.0); 5]),
            "FFT",
            &[5],
            (ElemType::C128, &[5]),
        )
        .unwrap();
        close(
            r.data.as_c128(),
            &[Complex64::new(10.0, 0.0), 0.0.into(), 0.0.into(), 0.0.into(), 0.0.into()],
            1e-14,
        );
        // A cosine of frequency 3 over 16 samples: bins 3 and 13 hold n/2.
        let cos: Vec<f32> =
            (0..16).map(|j| (2.0 * PI * 3.0 * j as f64 / 16.0).cos() as f32).collect();
        let r = fft(
            &Array::new(ElemType::F32, vec![16], Data::F32(cos)),
            "RFFT",
            &[16],
            (ElemType::C64, &[9]),
        )
        .unwrap();
        for (k, z) in r.data.as_c64().iter().enumerate() {
            let want = if k == 3 { 8.0 } else { 0.0 };
            assert!((z.re - want).abs() < 1e-5 && z.im.abs() < 1e-5, "bin {k}: {z}");
        }
    }

    #[test]
    fn matches_the_definition_for_odd_and_prime_lengths() {
        for n in [1usize, 2, 3, 7, 12, 17, 97, 100, 101] {
            let x = signal(2 * n, n as u64);
            let f = fft(&c128(&[2, n], x.clone()), "FFT", &[n as i64], (ElemType::C128, &[2, n]))
                .unwrap();
            close(f.data.as_c128(), &naive(&x, n, -1.0), 1e-12);
            let back = fft(&f, "IFFT", &[n as i64], (ElemType::C128, &[2, n])).unwrap();
            close(back.data.as_c128(), &x, 1e-13);
        }
    }

    #[test]
    fn two_and_three_dimensions() {
        // 2-D: the 1-D transform of the rows, then of the columns.
        let (r, c) = (3, 5);
        let x = signal(r * c, 9);
        let f =
            fft(&c128(&[r, c], x.clone()), "FFT", &[r as i64, c as i64], (ElemType::C128, &[r, c]))
                .unwrap();
        let rows = naive(&x, c, -1.0);
        let t: Vec<Complex64> =
            (0..c).flat_map(|j| (0..r).map(|i| rows[i * c + j]).collect::<Vec<_>>()).collect();
        let cols = naive(&t, r, -1.0);
        let want: Vec<Complex64> =
            (0..r).flat_map(|i| (0..c).map(|j| cols[j * r + i]).collect::<Vec<_>>()).collect();
        close(f.data.as_c128(), &want, 1e-12);
        // 3-D roundtrip with a batch dimension.
        let x = signal(2 * 3 * 4 * 5, 3);
        let f = fft(
            &c128(&[2, 3, 4, 5], x.clone()),
            "FFT",
            &[3, 4, 5],
            (ElemType::C128, &[2, 3, 4, 5]),
        )
        .unwrap();
        let back = fft(&f, "IFFT", &[3, 4, 5], (ElemType::C128, &[2, 3, 4, 5])).unwrap();
        close(back.data.as_c128(), &x, 1e-13);
    }

    #[test]
    fn real_transforms_roundtrip() {
        for (dims, lens) in [
            (vec![4usize, 10], vec![10i64]),
            (vec![7], vec![7]),
            (vec![2, 6, 9], vec![6, 9]),
            (vec![3, 4, 5], vec![3, 4, 5]),
        ] {
            let n: usize = dims.iter().product();
            let x: Vec<f64> = signal(n, 5).iter().map(|z| z.re).collect();
            let a = Array::new(ElemType::F64, dims.clone(), Data::F64(x.clone()));
            let mut half = dims.clone();
            *half.last_mut().unwrap() = *dims.last().unwrap() / 2 + 1;
            let f = fft(&a, "RFFT", &lens, (ElemType::C128, &half)).unwrap();
            // RFFT is the FFT of the real signal, cut to n/2 + 1 bins.
            let full = fft(
                &c128(&dims, x.iter().map(|&v| v.into()).collect()),
                "FFT",
                &lens,
                (ElemType::C128, &dims),
            )
            .unwrap();
            let last = *dims.last().unwrap();
            let cut: Vec<Complex64> =
                full.data.as_c128().chunks(last).flat_map(|r| r[..last / 2 + 1].to_vec()).collect();
            close(f.data.as_c128(), &cut, 1e-13);
            let back = fft(&f, "IRFFT", &lens, (ElemType::F64, &dims)).unwrap();
            for (p, q) in back.data.as_f64().iter().zip(&x) {
                assert!((p - q).abs() < 1e-13, "{p} vs {q}");
            }
        }
    }

    #[test]
    fn bad_operands_are_errors() {
        let a = c128(&[4], signal(4, 1));
        let msg = |r: Result<Array, Failure>| match r {
            Err(Failure::Here(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(
            msg(fft(&a, "FFT", &[5], (ElemType::C128, &[4])))
                .contains("needs an operand of dims [5]")
        );
        assert!(msg(fft(&a, "DCT", &[4], (ElemType::C128, &[4]))).contains("unknown fft_type"));
        assert!(
            msg(fft(&a, "RFFT", &[4], (ElemType::C128, &[3])))
                .contains("takes an f32 or f64 operand")
        );
        assert!(msg(fft(&a, "FFT", &[1, 1, 1, 4], (ElemType::C128, &[4]))).contains("1 to 3"));
        assert!(msg(fft(&a, "IFFT", &[4], (ElemType::C64, &[4]))).contains("declared c64[4]"));
        assert!(
            msg(fft(&a, "IRFFT", &[4], (ElemType::F64, &[4])))
                .contains("needs an operand of dims [3]")
        );
    }
}

mod linalg_tests {
    use hlo_interp::linalg::*;

    /// A well-conditioned symmetric positive definite matrix from a seed.
    fn spd(n: usize, seed: u64) -> Mat<f64> {
        let mut s = seed;
        let mut rnd = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 33) as f64 / (1u64 << 31) as f64) - 0.5
        };
        let x = Mat::new(n, n, (0..n * n).map(|_| rnd()).collect());
        let mut a = matmul(&x, false, &x, true);
        for i in 0..n {
            a.set(i, i, a.at(i, i) + n as f64);
        }
        a
    }

    fn max_diff(x: &Mat<f64>, y: &Mat<f64>) -> f64 {
        x.v.iter().zip(&y.v).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max)
    }

    #[test]
    fn cholesky_reconstructs() {
        for n in [1, 2, 5, 17] {
            let a = spd(n, n as u64);
            let l = cholesky(&a, true);
            assert!(max_diff(&matmul(&l, false, &l, true), &a) < 1e-12, "n={n}");
            assert!((0..n).all(|r| (r + 1..n).all(|c| l.at(r, c) == 0.0)), "upper triangle zero");
            let u = cholesky(&a, false);
            assert!(max_diff(&matmul(&u, true, &u, false), &a) < 1e-12, "upper n={n}");
            assert_eq!(u, l.t(), "upper is the transpose of lower for a symmetric matrix");
        }
    }

    #[test]
    fn cholesky_reads_one_triangle_and_flags_non_pd() {
        let mut a = spd(4, 3);
        let l = cholesky(&a, true);
        a.set(0, 3, 1e9); // the upper triangle is not read
        assert_eq!(cholesky(&a, true), l);
        a.set(2, 2, -5.0);
        assert!(cholesky(&a, true).v.iter().all(|x| x.is_nan()));
    }

    #[test]
    fn solves_satisfy_the_system() {
        for k in [1, 3, 20, 130, 260] {
            // Off-diagonal entries small enough that unit-diagonal systems stay well conditioned.
            let a = spd(k, 7 + k as u64)
                .map(|r, c, x| if r == c { x / k as f64 } else { x / (k * k) as f64 });
            for lower in [true, false] {
                for unit in [true, false] {
                    for t in [true, false] {
                        for left in [true, false] {
                            let o = Solve {
                                left_side: left,
                                lower,
                                unit_diagonal: unit,
                                transpose_a: t,
                            };
                            let am = masked(&a, lower, unit);
                            let op = if t { am.t() } else { am.clone() };
                            let b = if left {
                                spd(k, 1).slice(0, k, 0, 2.min(k))
                            } else {
                                spd(k, 2).slice(0, 3.min(k), 0, k)
                            };
                            let kinds = if k < 32 {
                                vec![solve_kind(1, k, 1), SolveKind::Direct]
                            } else {
                                vec![solve_kind(1, k, 1)]
                            };
                            for kind in kinds {
                                let x = triangular_solve(&a, &b, o, kind);
                                let back = if left {
                                    matmul(&op, false, &x, false)
                                } else {
                                    matmul(&x, false, &op, false)
                                };
                                assert!(
                                    max_diff(&back, &b) < 1e-9,
                                    "k={k} {o:?} {kind:?}: {}",
                                    max_diff(&back, &b)
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn transpose_option() {
        assert_eq!(Transpose::parse(Some("ADJOINT")).ok(), Some(Transpose::Adjoint));
        assert!(Transpose::parse(None).is_err());
        assert!(Transpose::parse(Some("FOO")).is_err());
    }
}

mod complex_tests {
    use hlo_interp::complex::*;
    use hlo_interp::value::{Array, Data};
    use hlo_ir::{ElemType, Opcode};
    use num_complex::Complex as Cx;

    fn c64(v: &[(f32, f32)]) -> Array {
        Array::new(
            ElemType::C64,
            vec![v.len()],
            Data::C64(v.iter().map(|&(a, b)| Cx::new(a, b)).collect()),
        )
    }

    #[test]
    fn arithmetic_and_parts() {
        let x = c64(&[(1.0, 2.0), (3.0, -4.0)]);
        let y = c64(&[(0.5, -1.0), (0.0, 2.0)]);
        let m = binary(Opcode::Multiply, &x, &y).unwrap();
        assert_eq!(m.data.as_c64(), &[Cx::new(2.5, 0.0), Cx::new(8.0, 6.0)]);
        let d = binary(Opcode::Divide, &m, &y).unwrap();
        for (p, q) in d.data.as_c64().iter().zip(x.data.as_c64()) {
            assert!((p - q).norm() < 1e-6, "{p} vs {q}");
        }
        assert_eq!(unary(Opcode::Abs, &x).unwrap().data.as_f32()[1], 5.0);
        assert_eq!(unary(Opcode::Real, &x).unwrap().data.as_f32(), &[1.0, 3.0]);
        assert_eq!(unary(Opcode::Imag, &x).unwrap().data.as_f32(), &[2.0, -4.0]);
        let s = unary(Opcode::Sqrt, &c64(&[(-4.0, 0.0), (3.0, 4.0), (0.0, 0.0)])).unwrap();
        assert_eq!(s.data.as_c64(), &[Cx::new(0.0, 2.0), Cx::new(2.0, 1.0), Cx::new(0.0, 0.0)]);
        let e = unary(Opcode::Exp, &c64(&[(0.0, std::f32::consts::PI)])).unwrap();
        assert!((e.data.as_c64()[0] - Cx::new(-1.0, 0.0)).norm() < 1e-6);
        assert!(unary(Opcode::IsFinite, &x).is_err());
    }

    #[test]
    fn power_and_conversions() {
        let x = c64(&[(0.0, 1.0), (0.0, 0.0), (0.0, 0.0)]);
        let y = c64(&[(2.0, 0.0), (0.0, 0.0), (2.0, 0.0)]);
        let p = binary(Opcode::Power, &x, &y).unwrap();
        let v = p.data.as_c64();
        assert!((v[0] - Cx::new(-1.0, 0.0)).norm() < 1e-6, "{}", v[0]);
        assert_eq!(&v[1..], &[Cx::new(1.0, 0.0), Cx::new(0.0, 0.0)]);
        let i = Array::new(ElemType::S32, vec![2], Data::Int(vec![-3, 7]));
        let c = hlo_interp::elementwise::convert(&i, ElemType::C128).unwrap();
        assert_eq!(c.data.as_c128(), &[Cx::new(-3.0, 0.0), Cx::new(7.0, 0.0)]);
        let back = hlo_interp::elementwise::convert(&c, ElemType::C64).unwrap();
        assert_eq!(back.data.as_c64(), &[Cx::new(-3.0, 0.0), Cx::new(7.0, 0.0)]);
        let re = Array::new(ElemType::F32, vec![1], Data::F32(vec![1.5]));
        let im = Array::new(ElemType::F32, vec![1], Data::F32(vec![-2.0]));
        assert_eq!(make(&re, &im).unwrap().data.as_c64(), &[Cx::new(1.5, -2.0)]);
        assert!(make(&re, &Array::new(ElemType::F64, vec![1], Data::F64(vec![0.0]))).is_err());
    }
}

mod collectives_tests {
    use hlo_fabric::Fabric;
    use hlo_interp::Array;
    use hlo_interp::elementwise::binary;
    use hlo_ir::{ElemType, Opcode, Tensor};

    /// An all-reduce of `x` on device `d` of `fabric`, through the fabric as the
    /// interpreter runs it (arrays to tensors and back).
    fn all_reduce(fabric: &Fabric, d: usize, op: Opcode, x: Array) -> Result<Vec<Array>, String> {
        let t = x.to_tensor().map_err(|e| e.to_string())?;
        hlo_fabric::execute(fabric, d, Opcode::AllReduce, &Default::default(), Some(op), vec![t])
            .map_err(|e| e.to_string())?
            .iter()
            .map(|t| Array::from_tensor(t).map_err(|e| e.to_string()))
            .collect()
    }

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
                        s.spawn(move || all_reduce(f, d, op, x))
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
