//! Every weight type against the `gguf` Python package's numpy code
//! (`scripts/quant_ref.py`), on random data with a fresh, printed seed.
//!
//! - Dequantization of random blocks (random bytes with sane scales):
//!   within 1e-6 of the row's largest reference magnitude (see
//!   `quant_ref::assert_close_rows`); NaN and infinity must match.
//! - The reference dot product, against an f64 dot of gguf's dequantized
//!   values: within 1e-6 of Σ|w·x|.
//! - Quantization: byte for byte equal to `gguf.quants.quantize` (which
//!   mirrors ggml's `quantize_row_*_ref`) on varied rows, ties included.
//! - Quantize → dequantize error: within bounds derived from each format,
//!   and within the thresholds of llama.cpp's `test-quantize-fns`.

mod quant_ref;

use std::ffi::OsStr;

use quant_ref::{TempDir, assert_close_rows, read_f32, write_f32};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use smelt::quant::{self, GgmlType, QK_K};

use GgmlType as T;

/// Types we dequantize, and those we quantize.
const DEQUANT_TYPES: [GgmlType; 20] = [
    T::F32,
    T::F16,
    T::BF16,
    T::Q4_0,
    T::Q4_1,
    T::Q5_0,
    T::Q5_1,
    T::Q8_0,
    T::Q8_1,
    T::Q2_K,
    T::Q3_K,
    T::Q4_K,
    T::Q5_K,
    T::Q6_K,
    T::Q8_K,
    T::IQ4_NL,
    T::IQ4_XS,
    T::MXFP4,
    T::TQ1_0,
    T::TQ2_0,
];
const QUANT_TYPES: [GgmlType; 10] = [
    T::F32,
    T::F16,
    T::BF16,
    T::Q4_0,
    T::Q4_1,
    T::Q5_0,
    T::Q5_1,
    T::Q8_0,
    T::Q8_1,
    T::Q8_K,
];

/// The byte offsets of a block's floating-point scales, from ggml's
/// `block_*` definitions in `ggml-common.h` (written out here, not taken
/// from smelt's structs, so a wrong struct layout shows up).
fn scale_fields(t: GgmlType) -> (&'static [usize], Option<usize>) {
    // (offsets of f16 fields, offset of an f32 field)
    match t {
        T::Q4_0 | T::Q5_0 | T::Q8_0 | T::IQ4_NL | T::IQ4_XS => (&[0], None),
        T::Q4_1 | T::Q5_1 | T::Q8_1 | T::Q4_K | T::Q5_K => (&[0, 2], None),
        T::Q2_K => (&[80, 82], None),
        T::Q3_K => (&[108], None),
        T::Q6_K => (&[208], None),
        T::TQ1_0 => (&[52], None),
        T::TQ2_0 => (&[64], None),
        T::Q8_K => (&[], Some(0)),
        _ => (&[], None),
    }
}

/// A sane f16 scale: mostly ±2^-14..2^2, sometimes zero or subnormal.
fn random_f16_scale(rng: &mut StdRng) -> [u8; 2] {
    let bits: u16 = match rng.gen_range(0..40) {
        0 => 0,
        1 => 0x8000,
        2 => rng.gen_range(1..0x400),
        _ => {
            let mag = 2f32.powf(rng.gen_range(-14.0..2.0));
            let v = if rng.r#gen() { mag } else { -mag };
            half::f16::from_f32(v).to_bits()
        }
    };
    bits.to_le_bytes()
}

/// Random values for the float types: a wide range with a few specials.
fn random_float(rng: &mut StdRng) -> f32 {
    match rng.gen_range(0..100) {
        0 => f32::NAN,
        1 => f32::INFINITY,
        2 => -0.0,
        3 => f32::from_bits(rng.gen_range(1..0x0080_0000)),
        _ => {
            let mag = 2f32.powf(rng.gen_range(-30.0..30.0));
            if rng.r#gen() { mag } else { -mag }
        }
    }
}

/// `rows` rows of `n` values of type `t`, as random bytes with sane scales.
fn random_rows(rng: &mut StdRng, t: GgmlType, rows: usize, n: usize) -> Vec<u8> {
    match t {
        T::F32 => (0..rows * n)
            .flat_map(|_| random_float(rng).to_le_bytes())
            .collect(),
        // Every 16-bit pattern is a value (NaNs and infinities included).
        T::F16 | T::BF16 => (0..rows * n * 2).map(|_| rng.r#gen()).collect(),
        _ => {
            let mut bytes: Vec<u8> = (0..rows * t.row_bytes(n).unwrap())
                .map(|_| rng.r#gen())
                .collect();
            let (f16s, f32_at) = scale_fields(t);
            for block in bytes.chunks_exact_mut(t.type_size()) {
                for &at in f16s {
                    block[at..at + 2].copy_from_slice(&random_f16_scale(rng));
                }
                if let Some(at) = f32_at {
                    let d = 2f32.powf(rng.gen_range(-20.0..0.0)) * rng.gen_range(-1.0..1.0);
                    block[at..at + 4].copy_from_slice(&d.to_le_bytes());
                }
                if t == T::MXFP4 {
                    // The E8M0 exponent byte: 2^-28..2^22, or the
                    // subnormal scales of exponents 0 and 1.
                    block[0] = match rng.gen_range(0..20) {
                        0 => 0,
                        1 => 1,
                        _ => rng.gen_range(100..150),
                    };
                }
            }
            bytes
        }
    }
}

#[test]
fn dequantize_and_dot_random_blocks_match_gguf() {
    let seed = quant_ref::seed("dequantize_and_dot_random_blocks_match_gguf");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = TempDir::new("quant-dequant");
    let rows = 64;
    let row_len = |t: GgmlType| t.block_size().max(32) * 4;

    let mut inputs = Vec::new();
    let mut args: Vec<std::ffi::OsString> = vec!["ops".into()];
    for t in DEQUANT_TYPES {
        let bytes = random_rows(&mut rng, t, rows, row_len(t));
        let (src, dst) = (dir.path(&format!("{t}.bin")), dir.path(&format!("{t}.f32")));
        std::fs::write(&src, &bytes).unwrap();
        args.extend(["dequant".into(), t.name().into(), src.into(), dst.into()]);
        inputs.push((t, bytes));
    }
    let args: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    quant_ref::run(&args);

    for (t, bytes) in inputs {
        let n = row_len(t);
        let want = read_f32(&dir.path(&format!("{t}.f32")));
        assert_eq!(want.len(), rows * n, "{t}: reference length");
        let mut got = vec![0f32; rows * n];
        let row_bytes = t.row_bytes(n).unwrap();
        for (src, dst) in bytes.chunks_exact(row_bytes).zip(got.chunks_exact_mut(n)) {
            quant::dequantize_row(t, src, dst).unwrap();
        }
        let exact = assert_close_rows(&format!("dequantize {t}"), &got, &want, n);
        eprintln!("{t}: {exact}/{} values bit-exact", got.len());

        // The dot product against gguf's values, summed in f64.
        for (r, (w, ref_w)) in bytes
            .chunks_exact(row_bytes)
            .zip(want.chunks_exact(n))
            .enumerate()
        {
            let x: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let got = quant::dot_f32(t, w, &x).unwrap();
            let (sum, abs) = ref_w.iter().zip(&x).fold((0f64, 0f64), |(s, a), (&w, &x)| {
                let p = f64::from(w) * f64::from(x);
                (s + p, a + p.abs())
            });
            let want = sum as f32;
            let ok = if want.is_finite() {
                f64::from((got - want).abs()) <= 1e-6 * abs
            } else {
                got.is_nan() == want.is_nan() && (want.is_nan() || got == want)
            };
            assert!(
                ok,
                "dot {t} row {r}: got {got:e}, reference {want:e} (Σ|wx| {abs:e})"
            );
        }
    }
}

/// One row of test values of a random kind: the shapes weights and
/// activations take, plus the corner cases of each quantizer.
fn random_values(rng: &mut StdRng, n: usize) -> Vec<f32> {
    let kind = rng.gen_range(0..9);
    let scale = 10f32.powf(rng.gen_range(-3.0..1.0));
    let pow2 = 2f32.powi(rng.gen_range(-4..4));
    (0..n)
        .map(|i| match kind {
            // Roughly normal (Box-Muller).
            0 => {
                let (u, v): (f32, f32) = (rng.gen_range(f32::EPSILON..1.0), rng.r#gen());
                scale * (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
            }
            // Asymmetric uniform, sometimes all of one sign.
            1 => rng.gen_range(-0.2 * scale..scale),
            // A constant block: zero range for the min/max quantizers.
            2 => scale,
            // Mostly zeros with spikes.
            3 => match rng.gen_range(0..16) {
                0 => rng.gen_range(-scale..scale),
                _ => 0.0,
            },
            // Tiny values: f16 scales go subnormal.
            4 => rng.gen_range(-1e-6..1e-6),
            // Large values.
            5 => rng.gen_range(-5e3..5e3),
            // A coarse grid: values that land on the 4- and 5-bit
            // quantizers' rounding ties.
            6 => rng.gen_range(-16..=16) as f32 * 0.25,
            // Half-integer multiples of a power of two led by ±127 of them:
            // the 8-bit scales come out exact, so every odd multiple is a
            // tie between two quants (roundf and nearest_int part ways).
            7 => {
                let k = if i == 0 {
                    254
                } else {
                    rng.gen_range(-254..=254)
                };
                let sign = if rng.r#gen() { 1.0 } else { -1.0 };
                sign * k as f32 * 0.5 * pow2
            }
            // Exact zeros.
            _ => 0.0,
        })
        .collect()
}

#[test]
fn quantize_matches_gguf_byte_for_byte() {
    let seed = quant_ref::seed("quantize_matches_gguf_byte_for_byte");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = TempDir::new("quant-quant");
    let (rows, n) = (96, 2 * QK_K);
    let x: Vec<f32> = (0..rows).flat_map(|_| random_values(&mut rng, n)).collect();
    // Every f32 bit pattern for the float types: NaNs, infinities,
    // subnormals, and values that overflow f16.
    let bits: Vec<f32> = (0..rows * n).map(|_| f32::from_bits(rng.r#gen())).collect();
    let float_types = [T::F32, T::F16, T::BF16];

    let mut cases: Vec<(GgmlType, &str, &[f32])> = Vec::new();
    cases.extend(QUANT_TYPES.iter().map(|&t| (t, "x", &x[..])));
    cases.extend(float_types.iter().map(|&t| (t, "bits", &bits[..])));
    write_f32(&dir.path("x.f32"), &x);
    write_f32(&dir.path("bits.f32"), &bits);
    let mut args: Vec<std::ffi::OsString> = vec!["ops".into()];
    for &(t, input, _) in &cases {
        args.extend([
            "quant".into(),
            t.name().into(),
            dir.path(&format!("{input}.f32")).into(),
            dir.path(&format!("{t}.{input}.q")).into(),
        ]);
    }
    let args: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    quant_ref::run(&args);

    for (t, input, x) in cases {
        let want = std::fs::read(dir.path(&format!("{t}.{input}.q"))).unwrap();
        let row_bytes = t.row_bytes(n).unwrap();
        assert_eq!(want.len(), rows * row_bytes, "{t}: reference length");
        let mut got = vec![0u8; rows * row_bytes];
        for (xs, dst) in x.chunks_exact(n).zip(got.chunks_exact_mut(row_bytes)) {
            quant::quantize_row(t, xs, dst).unwrap();
        }
        let bs = t.type_size();
        let same = |a: &[u8], b: &[u8]| {
            // ggml's own f16 NaNs depend on the build (F16C keeps the
            // payload and sets the quiet bit, the portable code writes
            // 0x7e00, numpy keeps it signalling): any NaN will do.
            let nan16 = |h: &[u8]| half::f16::from_le_bytes([h[0], h[1]]).is_nan();
            a == b || (t == T::F16 && nan16(a) && nan16(b))
        };
        if let Some(b) =
            (0..got.len() / bs).find(|b| !same(&got[b * bs..][..bs], &want[b * bs..][..bs]))
        {
            let k = t.block_size();
            panic!(
                "quantize {t} ({input}): block {b} differs from gguf\n ours:  {:?}\n gguf:  {:?}\n input: {:?}",
                &got[b * bs..][..bs],
                &want[b * bs..][..bs],
                &x[b * k..][..k]
            );
        }
    }
}

/// The largest error a quantize → dequantize round trip may make on one
/// block `x`, from the format's arithmetic. `H` is f16's relative
/// precision; `S` covers an f16 scale that went subnormal.
fn error_bound(t: GgmlType, x: &[f32]) -> f32 {
    const H: f32 = 1.0 / 2048.0;
    const S: f32 = 1.0 / 33_554_432.0; // 2^-25
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let (min, max) = x
        .iter()
        .fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let slack = 1e-6 * amax;
    match t {
        T::F32 => 0.0,
        // Round to nearest: half an ulp (2^-11 or 2^-8 of the value at most),
        // or half the subnormal spacing.
        T::F16 => amax * H + S,
        T::BF16 => amax / 256.0 + f32::MIN_POSITIVE,
        // q = round(x/d) with d = amax/127 in f32, stored as f16.
        T::Q8_0 | T::Q8_1 => amax / 127.0 * (0.5 + 127.0 * H) + 127.0 * S + slack,
        // d in f32, no f16 rounding.
        T::Q8_K => amax / 127.0 * 0.5 + slack,
        // The extreme value maps to -8 (-16); its mirror image clips to
        // +7 (+15), one full step d = amax/8 (amax/16) off.
        T::Q4_0 => amax / 8.0 * (1.0 + 8.0 * H) + 8.0 * S + slack,
        T::Q5_0 => amax / 16.0 * (1.0 + 16.0 * H) + 16.0 * S + slack,
        // Half a step d = (max-min)/15 (/31), plus the f16 rounding of d
        // (times up to 15 or 31 steps) and of min.
        T::Q4_1 => {
            let d = (max - min) / 15.0;
            d * (0.5 + 15.0 * H) + min.abs() * H + 16.0 * S + slack
        }
        T::Q5_1 => {
            let d = (max - min) / 31.0;
            d * (0.5 + 31.0 * H) + min.abs() * H + 32.0 * S + slack
        }
        _ => unreachable!("{t} has no quantizer"),
    }
}

#[test]
fn quantize_dequantize_error_is_bounded() {
    let seed = quant_ref::seed("quantize_dequantize_error_is_bounded");
    let mut rng = StdRng::seed_from_u64(seed);
    let n = QK_K;
    for t in QUANT_TYPES {
        let k = t.block_size();
        let mut q = vec![0u8; t.row_bytes(n).unwrap()];
        let mut y = vec![0f32; n];
        for _ in 0..200 {
            let x = random_values(&mut rng, n);
            quant::quantize_row(t, &x, &mut q).unwrap();
            quant::dequantize_row(t, &q, &mut y).unwrap();
            for (b, (xb, yb)) in x.chunks(k.max(32)).zip(y.chunks(k.max(32))).enumerate() {
                let bound = error_bound(t, xb);
                for (i, (&a, &b2)) in xb.iter().zip(yb).enumerate() {
                    assert!(
                        (a - b2).abs() <= bound,
                        "{t} block {b} value {i}: {a:e} came back as {b2:e}, error above {bound:e}"
                    );
                }
            }
        }
    }
}

/// llama.cpp's `test-quantize-fns`: on `0.1 + 2 cos(i)` (4096 values), the
/// round-trip error `sqrt(Σ(x - y)²) / n` stays under 0.002 (0.0075 for
/// Q2_K, 0.004 for Q3_K) and the dot
/// product error `|w·x - ref| / n` under 0.02 (ggml's thresholds; our dot
/// takes f32 activations, so it meets the bound ggml sets for its 8-bit
/// activation dot products with room to spare).
#[test]
fn llama_cpp_test_quantize_fns_thresholds() {
    let n = 32 * 128;
    let data = |offset: f32| -> Vec<f32> {
        (0..n)
            .map(|i| 0.1 + 2.0 * (i as f32 + offset).cos())
            .collect()
    };
    let (x1, x2) = (data(0.0), data(1.0));
    let reference: f64 = x1.iter().zip(&x2).map(|(&a, &b)| f64::from(a * b)).sum();
    let k_quants = [T::Q2_K, T::Q3_K, T::Q4_K, T::Q5_K, T::Q6_K];
    for t in QUANT_TYPES.into_iter().chain(k_quants) {
        // ggml's MAX_QUANTIZATION_TOTAL_ERROR, _2BITS and _3BITS.
        let max_error = match t {
            T::Q2_K => 0.0075,
            T::Q3_K => 0.0040,
            _ => 0.002,
        };
        let mut q = vec![0u8; t.row_bytes(n).unwrap()];
        let mut y = vec![0f32; n];
        quant::quantize_row(t, &x1, &mut q).unwrap();
        quant::dequantize_row(t, &q, &mut y).unwrap();
        let sq: f64 = x1
            .iter()
            .zip(&y)
            .map(|(&a, &b)| f64::from(a - b).powi(2))
            .sum();
        let total_error = sq.sqrt() as f32 / n as f32;
        assert!(
            total_error < max_error,
            "{t}: total quantization error {total_error}"
        );
        let dot = quant::dot_f32(t, &q, &x2).unwrap();
        let dot_error = (f64::from(dot) - reference).abs() as f32 / n as f32;
        assert!(dot_error < 0.02, "{t}: dot product error {dot_error}");
        eprintln!("{t}: total error {total_error:.6}, dot error {dot_error:.6}");
    }
}

/// `GgmlType::llama_ftype` against gguf-py's `LlamaFileType`.
#[test]
fn llama_ftypes_match_gguf() {
    let mut args: Vec<&OsStr> = vec!["ftypes".as_ref()];
    args.extend(quant::ALL_TYPES.iter().map(|t| OsStr::new(t.name())));
    let out = quant_ref::run(&args);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), quant::ALL_TYPES.len());
    for (t, line) in quant::ALL_TYPES.iter().zip(lines) {
        let want = line.split_once(' ').map(|(_, v)| v);
        let got = t
            .llama_ftype()
            .map_or("none".to_string(), |v| v.to_string());
        assert_eq!(Some(got.as_str()), want, "{t}");
    }
}
