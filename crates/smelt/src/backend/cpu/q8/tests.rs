use super::*;
#[cfg(target_arch = "x86_64")]
use crate::backend::cpu::q8_decode;
#[cfg(target_arch = "x86_64")]
use crate::backend::cpu::simd::Avx2Fma;
use crate::backend::cpu::simd::Fused;

/// The types of the Q8 path.
pub(in crate::backend::cpu) const TYPES: [GgmlType; 5] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
];

/// Deterministic pseudo-random bytes (xorshift).
pub(in crate::backend::cpu) fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect()
}

/// `m` rows of random `dtype` blocks with small finite scales.
pub(in crate::backend::cpu) fn weights(dtype: GgmlType, m: usize, k: usize, seed: u64) -> Vec<u8> {
    let size = dtype.type_size();
    let mut w = bytes(seed, m * k / QK8 * size);
    for (i, blk) in w.chunks_exact_mut(size).enumerate() {
        let d = f16::from_f32(((i % 13) as f32 - 6.0) * 0.003 + 0.0005);
        blk[..2].copy_from_slice(&d.to_le_bytes());
        if matches!(dtype, GgmlType::Q4_1 | GgmlType::Q5_1) {
            let m = f16::from_f32(((i % 7) as f32 - 3.0) * 0.01);
            blk[2..4].copy_from_slice(&m.to_le_bytes());
        }
    }
    w
}

/// `n` rows of `k` activations of a few magnitudes.
pub(in crate::backend::cpu) fn acts(n: usize, k: usize, seed: u64) -> Vec<f32> {
    bytes(seed, n * k)
        .iter()
        .enumerate()
        .map(|(i, &b)| (b as i8) as f32 * 0.01 * (1 + i % 5) as f32)
        .collect()
}

/// The AVX2 tiles and raw-block dot products give, bit for bit, the
/// portable tile's numbers (ggml's arithmetic), for every kind.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_kernels_match_the_portable_tile() {
    if !Isa::available().contains(&Isa::Avx2) {
        return;
    }
    let (m, n, k) = (6, 4, 8 * QK8);
    let nb = k / QK8;
    for (t, dtype) in TYPES.into_iter().enumerate() {
        let w = weights(dtype, m, k, 7 + t as u64);
        let x = acts(n, k, 99 + t as u64);
        let mut qa = Q8Acts::default();
        qa.quantize_rows(&x);
        let mut qb = Q8Acts::default();
        qb.quantize(Isa::Avx2, &x);
        assert_eq!(qa.qs, qb.qs);
        assert_eq!(qa.d, qb.d);
        assert_eq!(qa.s, qb.s);
        assert_eq!(qa.sum8, qb.sum8);
        let mut u = Unpacked::default();
        u.unpack_portable(dtype, &w);
        let mut ua = Unpacked::default();
        // SAFETY: the CPU has AVX2, FMA and F16C (checked above).
        unsafe { avx2::unpack(&mut ua, dtype, &w) };
        assert_eq!(
            (&u.qs, &u.d, &u.m),
            (&ua.qs, &ua.d, &ua.m),
            "{dtype:?} unpacking"
        );
        let kind = Kind::of(dtype);
        let xrow = |i: usize| {
            (
                &qb.qs[i * k..(i + 1) * k],
                &qb.d[i * nb..(i + 1) * nb],
                &qb.s[i * nb..(i + 1) * nb],
                &qb.x8[i * k / 2..(i + 1) * k / 2],
            )
        };
        let xraw = |i: usize| {
            let (q, d, s, _) = xrow(i);
            (q, d, s)
        };
        let wrow = |j: usize| WRow {
            q: &u.qs[j * k..(j + 1) * k],
            d: &u.d[j * nb..(j + 1) * nb],
            m: &u.m[j * nb..(j + 1) * nb],
        };
        let rb = w.len() / m;
        for i in 0..n {
            for j in 0..m - 3 {
                let want: Vec<u32> = (j..j + 4)
                    .map(|c| tile::<Fused, 1, 1>([xrow(i)], [wrow(c)], kind)[0][0].to_bits())
                    .collect();
                // SAFETY: the CPU has AVX2, FMA and F16C (checked above).
                let got = unsafe {
                    avx2::tile::<1, 4>(
                        [xrow(i)],
                        [wrow(j), wrow(j + 1), wrow(j + 2), wrow(j + 3)],
                        kind,
                    )
                };
                let got: Vec<u32> = got[0].iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "{dtype:?} tile row {i} weights {j}..");
                if i + 3 <= n {
                    let ws = [wrow(j), wrow(j + 1), wrow(j + 2), wrow(j + 3)];
                    // SAFETY: as above.
                    let got = unsafe {
                        avx2::tile::<3, 4>([xrow(i), xrow(i + 1), xrow(i + 2)], ws, kind)
                    };
                    for (r, got) in got.iter().enumerate() {
                        let want: Vec<u32> = (j..j + 4)
                            .map(|c| {
                                tile::<Fused, 1, 1>([xrow(i + r)], [wrow(c)], kind)[0][0].to_bits()
                            })
                            .collect();
                        let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                        assert_eq!(got, want, "{dtype:?} 3×4 tile row {} weights {j}..", i + r);
                    }
                }
                let raw = |c: usize| &w[c * rb..(c + 1) * rb];
                let got = q8_decode::raw_dots::<Avx2Fma, 4>(
                    dtype,
                    q8_decode::SumOrder::Ggml,
                    xraw(i),
                    [raw(j), raw(j + 1), raw(j + 2), raw(j + 3)],
                );
                let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "{dtype:?} raw row {i} weights {j}..");
            }
        }
    }
}

/// On aarch64 with `dotprod`, the tiles on `sdot` (`neon.rs`) give the
/// portable tile's numbers bit for bit, for every kind.
#[cfg(target_arch = "aarch64")]
#[test]
fn neon_dot_tiles_match_the_portable_tile() {
    if !Isa::available().contains(&Isa::NeonDot) {
        eprintln!("skipped: this CPU has no dotprod");
        return;
    }
    crate::backend::cpu::simd::multiversion! {
        fn tile_kernel(xs: [XRow; 2], ws: [WRow; 3], kind: Kind) -> [[f32; 3]; 2] = tile_generic;
    }
    #[inline(always)]
    fn tile_generic<M: Madd>(xs: [XRow; 2], ws: [WRow; 3], kind: Kind) -> [[f32; 3]; 2] {
        tile::<M, 2, 3>(xs, ws, kind)
    }
    let (m, n, k) = (3, 2, 8 * QK8);
    let nb = k / QK8;
    for (t, dtype) in TYPES.into_iter().enumerate() {
        let w = weights(dtype, m, k, 7 + t as u64);
        let mut qa = Q8Acts::default();
        qa.quantize_rows(&acts(n, k, 99 + t as u64));
        let mut u = Unpacked::default();
        u.unpack_portable(dtype, &w);
        let xrow = |i: usize| {
            (
                &qa.qs[i * k..(i + 1) * k],
                &qa.d[i * nb..(i + 1) * nb],
                &qa.s[i * nb..(i + 1) * nb],
                qa.x8.get(i * k / 2..(i + 1) * k / 2).unwrap_or_default(),
            )
        };
        let wrow = |j: usize| WRow {
            q: &u.qs[j * k..(j + 1) * k],
            d: &u.d[j * nb..(j + 1) * nb],
            m: &u.m[j * nb..(j + 1) * nb],
        };
        let kind = Kind::of(dtype);
        let xs = [xrow(0), xrow(1)];
        let ws = [wrow(0), wrow(1), wrow(2)];
        let want = tile::<Fused, 2, 3>(xs, ws, kind);
        let got = tile_kernel(Isa::NeonDot, xs, ws, kind);
        assert_eq!(
            got.map(|r| r.map(f32::to_bits)),
            want.map(|r| r.map(f32::to_bits)),
            "{dtype:?}"
        );
    }
}
