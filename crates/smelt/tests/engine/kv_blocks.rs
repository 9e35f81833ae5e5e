//! Block KV caches (Q8_0, Q4_0) on the CPU backends: `set_rows` writes
//! exactly the blocks of the quantizer (`quant::quantize_row`, ggml's
//! reference rounding) over each row's groups of 64 (or 32) values rotated
//! by the Walsh-Hadamard matrix (a plain matrix product here), and
//! attention over them equals the naive formula over the cache as it gives
//! the values back (dequantized, rotated back), the fast op with its query
//! rounded through Q8_0 blocks as ggml's dot products with block keys take
//! it. Heads of 32 in rows of 64-value groups read groups that span two
//! heads.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use smelt::backend::{AttentionParams, BackendExt};
use smelt::quant::{self, GgmlType};

use super::ops::{assert_close, backends, f32s, i32s, naive_attention, random};

const BLOCK_TYPES: [GgmlType; 2] = [GgmlType::Q8_0, GgmlType::Q4_0];

/// Values per rotation group of rows of `cols`: 64 where they divide the
/// row, else 32.
fn group(cols: usize) -> usize {
    if cols.is_multiple_of(64) { 64 } else { 32 }
}

/// Each `n` values of `v` times the orthonormal Walsh-Hadamard matrix, as a
/// plain matrix product: `H[i][j] = (-1)^popcount(i & j) / sqrt(n)`.
fn rotate(v: &[f32], n: usize) -> Vec<f32> {
    let h = move |i: usize, j: usize| {
        let sign = if (i & j).count_ones().is_multiple_of(2) {
            1.0
        } else {
            -1.0
        };
        sign / (n as f64).sqrt()
    };
    v.chunks_exact(n)
        .flat_map(|x| {
            (0..n).map(move |i| (0..n).map(|j| h(i, j) * x[j] as f64).sum::<f64>() as f32)
        })
        .collect()
}

/// `values` (rows of `cols`) quantized to `dtype`, as the bytes of a row.
fn quantized(dtype: GgmlType, values: &[f32], cols: usize) -> Vec<u8> {
    let row_bytes = dtype.row_bytes(cols).unwrap();
    let mut bytes = vec![0u8; values.len() / cols * row_bytes];
    for (src, dst) in values
        .chunks_exact(cols)
        .zip(bytes.chunks_exact_mut(row_bytes))
    {
        quant::quantize_row(dtype, src, dst).unwrap();
    }
    bytes
}

/// `values` through the quantizer and back.
fn round_trip(dtype: GgmlType, values: &[f32], cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; values.len()];
    quant::dequantize_row(dtype, &quantized(dtype, values, cols), &mut out).unwrap();
    out
}

/// The bytes a block cache stores for `values`: each rotation group
/// rotated, then quantized.
fn stored(dtype: GgmlType, values: &[f32], cols: usize) -> Vec<u8> {
    quantized(dtype, &rotate(values, group(cols)), cols)
}

/// `values` as a block cache gives them back: rotated, quantized,
/// dequantized, rotated back.
fn cached(dtype: GgmlType, values: &[f32], cols: usize) -> Vec<f32> {
    let n = group(cols);
    rotate(&round_trip(dtype, &rotate(values, n), cols), n)
}

#[test]
fn set_rows_writes_the_quantizers_blocks() {
    let mut rng = StdRng::seed_from_u64(21);
    let (n, cols, rows) = (3, 64, 5);
    // One row all zeros, one with a value far out: the scale's edge cases.
    let mut src = random(&mut rng, n * cols);
    src[..cols].fill(0.0);
    src[cols + 7] = 40.0;
    let ids = [4, 0, 2];
    for mut b in backends() {
        for dtype in BLOCK_TYPES {
            let row_bytes = dtype.row_bytes(cols).unwrap();
            let blocks = stored(dtype, &src, cols);
            // Rows never written stay zero bytes.
            let mut want = vec![0u8; rows * row_bytes];
            for (&id, b) in ids.iter().zip(blocks.chunks_exact(row_bytes)) {
                let at = id as usize * row_bytes;
                want[at..at + row_bytes].copy_from_slice(b);
            }
            let s = f32s(b.as_mut(), n, cols, &src);
            let i = i32s(b.as_mut(), &ids);
            let dst = b.alloc(dtype, rows, cols).unwrap();
            b.set_rows(s, i, dst).unwrap();
            let mut got = vec![0u8; rows * row_bytes];
            b.read(dst, &mut got).unwrap();
            assert_eq!(got, want, "{} {dtype}", b.name());
            // An id past the cache is an error, not a write.
            let bad = i32s(b.as_mut(), &[0, 5, 1]);
            assert!(b.set_rows(s, bad, dst).is_err());
        }
    }
}

#[test]
fn block_caches_refuse_partial_blocks() {
    for mut b in backends() {
        let b = b.as_mut();
        // Rows of 48 values are not whole blocks: no such tensor.
        assert!(b.alloc(GgmlType::Q8_0, 2, 48).is_err());
        // Heads of 16 values split the blocks of 32-wide rows.
        let cache = b.alloc(GgmlType::Q4_0, 4, 32).unwrap();
        let q = f32s(b, 1, 32, &[0.5; 32]);
        let (pos, seq) = (i32s(b, &[0]), i32s(b, &[0]));
        let out = b.alloc(GgmlType::F32, 1, 32).unwrap();
        let p = AttentionParams::new(2, 2, 16, 4);
        let e = b.attention(q, cache, cache, pos, seq, &p, out).unwrap_err();
        assert!(e.to_string().contains("multiple of 32"), "{e}");
    }
}

#[test]
fn attention_over_block_caches() {
    let mut rng = StdRng::seed_from_u64(22);
    // (query heads, kv heads, head dim, ctx, slots, rows, prompt): a
    // prompt's rows are positions 0.. of slot 0 (70 rows take the fast
    // op's tiles), other rows random positions and slots.
    let cases = [
        (4, 2, 64, 20, 2, 5, false),
        (6, 3, 32, 40, 1, 9, false),
        (4, 2, 32, 24, 2, 6, false),
        (6, 2, 96, 20, 1, 5, false),
        (4, 1, 128, 80, 1, 70, true),
        (8, 2, 64, 30, 1, 30, true),
    ];
    for (hq, hk, hd, ctx, slots, n, prompt) in cases {
        let rows = ctx * slots;
        let kv_cols = hk * hd;
        let kv = random(&mut rng, rows * kv_cols);
        let vv = random(&mut rng, rows * kv_cols);
        let qv: Vec<f32> = random(&mut rng, n * hq * hd)
            .iter()
            .map(|x| x * 3.0)
            .collect();
        let (posv, seqv): (Vec<i32>, Vec<i32>) = if prompt {
            ((0..n as i32).collect(), vec![0; n])
        } else {
            (0..n)
                .map(|_| (rng.gen_range(0..ctx as i32), rng.gen_range(0..slots as i32)))
                .unzip()
        };
        for dtype in BLOCK_TYPES {
            let (kq, vq) = (cached(dtype, &kv, kv_cols), cached(dtype, &vv, kv_cols));
            let q8 = round_trip(GgmlType::Q8_0, &qv, hd);
            for window in [None, Some(7)] {
                let mut p = AttentionParams::new(hq, hk, hd, ctx);
                p.window = window;
                for mut b in backends() {
                    let b = b.as_mut();
                    let (k32, v32) = (f32s(b, rows, kv_cols, &kv), f32s(b, rows, kv_cols, &vv));
                    let all = i32s(b, &(0..rows as i32).collect::<Vec<_>>());
                    let k = b.alloc(dtype, rows, kv_cols).unwrap();
                    let v = b.alloc(dtype, rows, kv_cols).unwrap();
                    b.set_rows(k32, all, k).unwrap();
                    b.set_rows(v32, all, v).unwrap();
                    let q = f32s(b, n, hq * hd, &qv);
                    let (pos, seq) = (i32s(b, &posv), i32s(b, &seqv));
                    let out = b.alloc(GgmlType::F32, n, hq * hd).unwrap();
                    b.attention(q, k, v, pos, seq, &p, out).unwrap();
                    // The reference takes the query as it is; the fast op
                    // rounds it through Q8_0 (and sums in f32).
                    let (query, tol) = if b.name() == "cpu-ref" {
                        (&qv, 1e-5)
                    } else {
                        (&q8, 2e-5)
                    };
                    let want = naive_attention(query, &kq, &vq, &posv, &seqv, &p, rows);
                    let what =
                        format!("{} {dtype} {hq}/{hk}x{hd} n{n} window {window:?}", b.name());
                    eprintln!("{what}");
                    assert_close(&b.read_f32(out).unwrap(), &want, tol);
                }
            }
        }
    }
}
