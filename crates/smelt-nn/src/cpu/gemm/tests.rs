use super::*;

/// A product with no columns, or no rows, is no work (and no panic).
#[test]
fn empty_products_are_no_work() {
    let a = vec![1.0f32; 64 * 3];
    let mut c: Vec<f32> = Vec::new();
    gemm_serial(
        64,
        0,
        3,
        View::new(&a, 3, 64, false),
        View::new(&[], 0, 3, false),
        &mut c,
    );
    gemm_serial(
        0,
        5,
        3,
        View::new(&[], 3, 0, false),
        View::new(&a[..15], 5, 3, false),
        &mut c,
    );
}

/// Every product sums each output over `k` in order from zero, chunk by
/// chunk (one fused multiply-add a term, the chunks' sums added in
/// order), whatever the operands' layouts, the tiles' edges and the
/// threads.
#[test]
fn products_sum_in_order() {
    let val = |i: usize| ((i * 7919 % 1000) as f32 - 500.0) / 97.0;
    let run = crate::cpu::RunState::default();
    let shapes = [
        (1, 1, 1, 1),
        (5, 3, 7, 7),
        (40, 17, 300, 64),
        (300, 20, 513, 256),
        (33, 70, 64, 64),
        (17, 90, 600, 600),
    ];
    for threads in [1, 2] {
        let mut pool = smelt::backend::cpu::pool::ThreadPool::new(threads).expect("a pool");
        let mut cx = Cx {
            pool: &mut pool,
            run: &run,
        };
        for (m, n, k, chunk) in shapes {
            for (trans_a, trans_b) in [(false, false), (true, false), (false, true), (true, true)] {
                let a: Vec<f32> = (0..m * k).map(val).collect();
                let b: Vec<f32> = (0..k * n).map(|i| val(i + 5)).collect();
                let (av, bv) = (View::new(&a, k, m, trans_a), View::new(&b, n, k, trans_b));
                let mut c = vec![f32::NAN; m * n];
                gemm(&mut cx, Dims { m, n, k, chunk }, av, bv, &mut c);
                for i in 0..m {
                    for j in 0..n {
                        let mut total: Option<f32> = None;
                        for c0 in (0..k).step_by(chunk) {
                            let mut s = 0f32;
                            for p in c0..(c0 + chunk).min(k) {
                                s = av.at(i, p).mul_add(bv.at(p, j), s);
                            }
                            total = Some(total.map_or(s, |t| t + s));
                        }
                        let want = total.unwrap_or(0.0);
                        assert_eq!(
                            c[i * n + j].to_bits(),
                            want.to_bits(),
                            "{m}x{n}x{k} chunk {chunk}, trans {trans_a}/{trans_b}, {threads} threads, at {i},{j}"
                        );
                    }
                }
            }
        }
    }
}

/// The register tiles of every x86 path this CPU has give the portable
/// tile's bits, from a non-zero start, over a k that is not a multiple
/// of any unroll.
#[test]
fn x86_tiles_give_the_portable_bits() {
    let k = 37;
    let val = |i: usize| ((i * 7919 % 1000) as f32 - 500.0) / 97.0;
    let a: Vec<f32> = (0..k * MR).map(val).collect();
    let b: Vec<f32> = (0..k * NR).map(|i| val(i + 3)).collect();
    let mut init = [[0.0; NR]; MR];
    for (r, row) in init.iter_mut().enumerate() {
        for (c, v) in row.iter_mut().enumerate() {
            *v = val(r * NR + c + 11);
        }
    }
    let bits = |t: &Tile| t.iter().flatten().map(|v| v.to_bits()).collect::<Vec<_>>();
    for (start, rows) in [Start::Zero, Start::Tile]
        .into_iter()
        .flat_map(|s| [1, 4, 5, 8, 9, MR].map(|r| (s, r)))
    {
        // The live rows' bits.
        let run = |f: &dyn Fn(&mut Tile)| {
            let mut t = init;
            f(&mut t);
            bits(&t)[..rows * NR].to_vec()
        };
        let want = run(&|t| tile_generic(t, start, rows, &a, &b));
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                // SAFETY: the CPU has AVX2 and FMA (checked above).
                let got = run(&|t| unsafe { x86::tile_avx2(t, start, rows, &a, &b) });
                assert_eq!(got, want, "AVX2 from {start:?}, {rows} rows");
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512F (checked above).
                let got = run(&|t| unsafe { x86::tile_avx512::<MR>(t, start, &a, &b) });
                assert_eq!(got, want, "AVX-512 from {start:?}, {rows} rows");
            }
        }
        assert_eq!(run(&|t| tile(t, start, rows, &a, &b)), want, "{rows} rows");
    }
}
