use super::*;
use crate::backend::cpu::simd::{Avx2Fma, Isa};

/// The grouped kernel gives, bit for bit, each head's online softmax.
#[test]
fn grouped_softmax_matches_online_softmax() {
    if !Isa::available().contains(&Isa::Avx2) {
        return;
    }
    let mut seed = 12345u64;
    let mut rnd = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
    };
    for (hd, g, s, f16_cache, softcap) in [
        (64, 3, 1, true, None),
        (64, 3, 77, true, None),
        (64, 2, 300, false, None),
        (128, 4, 50, true, Some(30.0)),
    ] {
        let round = |v: Vec<f32>| -> Vec<f32> {
            if f16_cache {
                v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect()
            } else {
                v
            }
        };
        let qs = round((0..g * hd).map(|_| rnd()).collect());
        let keys = round((0..s * hd).map(|_| rnd()).collect());
        let vals = round((0..s * hd).map(|_| rnd()).collect());
        let scale = 0.125;
        let mut want = vec![0f32; g * hd];
        let mut want_sums = vec![0f32; g];
        for h in 0..g {
            want_sums[h] = online_softmax::<Avx2Fma>(
                &qs[h * hd..(h + 1) * hd],
                &keys,
                &vals,
                scale,
                softcap,
                f16_cache,
                &mut want[h * hd..(h + 1) * hd],
            );
        }
        let (mut got, mut sums) = (vec![0f32; g * hd], vec![0f32; g]);
        let mut work = vec![0f32; 2 * g * s];
        assert!(grouped_softmax::<Avx2Fma>(
            hd, &qs, &keys, &vals, scale, softcap, f16_cache, &mut got, &mut work, &mut sums
        ));
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "hd {hd} g {g} s {s}");
        assert_eq!(bits(&sums), bits(&want_sums), "hd {hd} g {g} s {s}");
    }
}
