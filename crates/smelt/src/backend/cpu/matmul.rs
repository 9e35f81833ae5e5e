//! The fast CPU matmul, `out = x · wᵀ`, with `w` in its GGUF type.
//!
//! Work is cut into items of `W_BLOCK` weight rows × `X_BLOCK` activation
//! rows, handed to the pool's threads on demand. An item decodes its weight
//! rows once into the thread's scratch and then computes its output
//! rectangle in register tiles of `XR` activation rows × `WR` weight rows.
//! Decode (one activation row) is the same code with one row.
//!
//! The kinds of decoding and tiles:
//! - the 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): activations
//!   quantized to Q8 blocks once per matmul and integer dot products, in
//!   ggml's order ([`super::q8`]): decode (items of 1 or 2 activation rows)
//!   reads the GGUF blocks in place ([`super::q8_decode`]), prefill in the
//!   exact mode unpacks the weight rows to one byte per value.
//! - their prefill on AVX2 (but Q4_1's): the same integer dot products,
//!   the weight rows unpacked 8 interleaved so that one conversion and one
//!   `fma` add a block to 8 outputs ([`super::gemm8`]); not ggml's order,
//!   so `SMELT_CPU_EXACT=1` sends these to the previous kind instead.
//! - the K-quants (Q2_K..Q6_K): activations quantized to Q8_K blocks once
//!   per matmul; prefill on AVX2 the interleaved GEMM of [`super::gemmk`],
//!   decode each pair's dot product on the blocks in place
//!   ([`super::kdot`]) in that GEMM's f32 order, so a row gets the same
//!   bits alone as in a batch; the exact mode and CPUs without AVX2 take
//!   ggml's dot product of each pair throughout.
//! - every other type: weights dequantized to f32 (F32 read in place) and
//!   8-lane f32 dot products. F16, Q4_0, Q4_1, Q8_0 have vectorizable block
//!   decoders here; other types go through `quant::dequantize_row`.
//!
//! Legend: `w` is `m × k`, `x` is `n × k`, `out` is `n × m`.

use std::ops::Range;
use std::sync::Mutex;

use half::f16;
use half::slice::HalfFloatSliceExt;

use super::gemm8::{self, Interleaved};
use super::gemmk::{self, KInterleaved};
use super::kdot;
use super::pool::{SharedMut, ThreadPool};
use super::q8::{self, Q8Acts, Unpacked};
use super::q8_decode;
use super::q8k::{Q8KActs, QK_K};
use super::simd::{self, Isa, Madd, multiversion};
use crate::quant::{self, GgmlType, QuantError};

/// Weight rows per work item: decoded together, reused by every
/// activation row of the item.
const W_BLOCK: usize = 16;
/// Activation rows per work item: they stay in cache (L2: 256 rows of
/// 1536 quants are 384 KiB) while the item's weight rows pass over them;
/// each item unpacks its weight rows once, a cost that 64 rows left at 8%
/// of a prompt.
const X_BLOCK: usize = 256;
/// Most work items per grab in decode (512 weight rows): half of a
/// thread's share of the job, at least 4. Longer runs measured faster (4
/// → 8 → 16 items: +15%, +8%; 16 → this: +4%; 128 no better).
const DECODE_CHUNK: usize = 32;
/// How far ahead a decode prefetches weight rows, in bytes (rounded up to
/// whole rows, at least `WR` rows): 4 Q4_0 rows of 576 values (1.3 KiB)
/// measured 7% slower than 8, 4 Q8_0 rows (2.4 KiB) as fast as 8.
const PREFETCH_BYTES: usize = 2560;
/// Register tile: activation rows × weight rows (12 accumulators of 8 lanes
/// fit the 16 AVX registers with room for the loads).
const XR: usize = 3;
const WR: usize = 4;

/// A thread's scratch, grown on first use and kept.
#[derive(Default)]
pub struct Scratch {
    /// Dequantized weight rows (f32 path), attention's keys and values.
    pub f: Vec<f32>,
    /// Unpacked weight rows (Q8 path).
    pub w: Unpacked,
    /// Weight rows unpacked 8 interleaved (Q4_0, Q8_0 prefill).
    pub i: Interleaved,
    /// ... and K-quant rows (K-quant prefill).
    pub k: KInterleaved,
    /// A group's outputs (interleaved prefill).
    pub o: Vec<f32>,
}

/// The activations of a matmul, as its weight type wants them.
#[derive(Clone, Copy)]
pub enum Acts<'a> {
    F32(&'a [f32]),
    Q8(&'a Q8Acts),
    Q8K(&'a Q8KActs),
}

/// The activations of matmuls that share them: as they are, and rounded to
/// the blocks some weight types take (each `None` where none takes it).
#[derive(Clone, Copy)]
pub struct Inputs<'a> {
    pub f32: &'a [f32],
    pub q8: Option<&'a Q8Acts>,
    pub q8k: Option<&'a Q8KActs>,
}

impl<'a> Inputs<'a> {
    /// What weights of `dtype` take.
    fn for_type(self, dtype: GgmlType) -> Acts<'a> {
        match (self.q8, self.q8k) {
            (Some(x), _) if q8::has_q8_path(dtype) => Acts::Q8(x),
            (_, Some(x)) if kdot::has_path(dtype) => Acts::Q8K(x),
            _ => Acts::F32(self.f32),
        }
    }
}

/// `out = x · wᵀ` on the pool, with `x` already quantized when the weight
/// type takes the Q8 path. `scratch` has one entry per thread. `exact`
/// keeps Q4_0 and Q8_0 prefill in ggml's order ([`q8::tile`]) instead of
/// [`gemm8`]'s.
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    pool: &mut ThreadPool,
    isa: Isa,
    exact: bool,
    scratch: &[Mutex<Scratch>],
    w: &[u8],
    dtype: GgmlType,
    k: usize,
    n: usize,
    inputs: Inputs,
    out: &mut [f32],
) -> Result<(), QuantError> {
    matmuls(
        pool,
        isa,
        exact,
        scratch,
        &[(w, dtype)],
        k,
        n,
        inputs,
        &mut [out],
    )
}

/// `outs[i] = x · ws[i]ᵀ` for weights `ws[i] = (bytes, type)` sharing one
/// input, in one pool job: their work items are numbered one after the
/// other, so small matrices (a decode's K and V) share the threads with
/// their neighbours instead of each waiting for its own job to close.
#[allow(clippy::too_many_arguments)]
pub fn matmuls(
    pool: &mut ThreadPool,
    isa: Isa,
    exact: bool,
    scratch: &[Mutex<Scratch>],
    ws: &[(&[u8], GgmlType)],
    k: usize,
    n: usize,
    inputs: Inputs,
    outs: &mut [&mut [f32]],
) -> Result<(), QuantError> {
    let mut jobs = Vec::with_capacity(ws.len());
    // The first item of each job, and the total.
    let mut starts = Vec::with_capacity(ws.len());
    let mut total = 0;
    for (&(w, dtype), out) in ws.iter().zip(outs.iter_mut()) {
        let row_bytes = dtype.row_bytes(k).ok_or(QuantError::NotWholeBlocks {
            dtype,
            n: k,
            block: dtype.block_size(),
        })?;
        let m = w.len() / row_bytes.max(1);
        if m == 0 || n == 0 {
            continue;
        }
        starts.push(total);
        total += m.div_ceil(W_BLOCK) * n.div_ceil(X_BLOCK);
        jobs.push(Job {
            w,
            dtype,
            row_bytes,
            m,
            k,
            acts: inputs.for_type(dtype),
            exact,
            out: SharedMut::new(out),
        });
    }
    let error = Mutex::new(None);
    // Decode streams the weights from memory once: longer runs of
    // consecutive rows per grab keep the prefetchers on one stream, while
    // a few grabs per thread still balance the threads.
    let chunk = if n <= 2 {
        (total / (2 * pool.n_threads())).clamp(4, DECODE_CHUNK)
    } else {
        1
    };
    pool.for_each(total, chunk, &|t, items| {
        let mut buf = scratch[t].lock().unwrap_or_else(|e| e.into_inner());
        for item in items {
            let j = starts.partition_point(|&s| s <= item) - 1;
            let (job, item) = (&jobs[j], item - starts[j]);
            let n_wb = job.m.div_ceil(W_BLOCK);
            let (xb, wb) = (item / n_wb, item % n_wb);
            let rows = wb * W_BLOCK..job.m.min((wb + 1) * W_BLOCK);
            let xrows = xb * X_BLOCK..n.min((xb + 1) * X_BLOCK);
            if let Err(e) = item_kernel(isa, job, rows, xrows, &mut buf) {
                *error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
            }
        }
    });
    match error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

struct Job<'a> {
    w: &'a [u8],
    dtype: GgmlType,
    row_bytes: usize,
    m: usize,
    k: usize,
    acts: Acts<'a>,
    /// Q4_0 and Q8_0 prefill in ggml's order rather than [`gemm8`]'s.
    exact: bool,
    /// `n × m`; each item writes only its own rectangle.
    out: SharedMut<f32>,
}

multiversion! {
    fn item_kernel(job: &Job, rows: Range<usize>, xrows: Range<usize>, buf: &mut Scratch) -> Result<(), QuantError> = item_generic;
}

/// One work item: weight rows `rows` against activation rows `xrows`.
#[inline(always)]
fn item_generic<M: Madd>(
    job: &Job,
    rows: Range<usize>,
    xrows: Range<usize>,
    buf: &mut Scratch,
) -> Result<(), QuantError> {
    let (k, nw) = (job.k, rows.len());
    let src = &job.w[rows.start * job.row_bytes..rows.end * job.row_bytes];
    let store = |i: usize, j: usize, vals: &[f32]| {
        // SAFETY: (i, rows.start + j..) lies in this item's rectangle (its
        // activation rows × its weight rows), which no other item writes,
        // and the job's `out` outlives the pool job.
        unsafe { job.out.slice(i * job.m + rows.start + j, vals.len()) }.copy_from_slice(vals);
    };
    match job.acts {
        Acts::Q8(x) if xrows.len() <= 2 && q8_decode::has_raw_kernel::<M>() => {
            // Decode: each weight block is used once or twice, so the
            // kernel reads the GGUF blocks as they are instead of unpacking.
            // The fast mode sums in its prefill GEMM's order, so that a
            // row's numbers do not depend on how many rows share the batch.
            let order = if !job.exact && gemm8::has_kernel::<M>() && gemm8::has_path(job.dtype) {
                q8_decode::SumOrder::Blocks
            } else {
                q8_decode::SumOrder::Ggml
            };
            let nb = k / q8::QK8;
            for i in xrows {
                let xr = (
                    &x.qs[i * k..(i + 1) * k],
                    &x.d[i * nb..(i + 1) * nb],
                    &x.s[i * nb..(i + 1) * nb],
                );
                in_place_rows::<M>(
                    job,
                    &rows,
                    &store,
                    i,
                    true,
                    |ws| q8_decode::raw_dots::<M, WR>(job.dtype, order, xr, ws),
                    |w| q8_decode::raw_dots::<M, 1>(job.dtype, order, xr, w),
                );
            }
        }
        Acts::Q8K(x) if xrows.len() <= 2 || job.exact || !gemmk::has_kernel::<M>() => {
            // Each pair's dot product on the GGUF blocks in place. The fast
            // mode's decode sums in the GEMM's order, so that a row gets the
            // same bits in an item of its own as among a prefill's rows;
            // the exact mode, and CPUs without the GEMM, in ggml's.
            let gemm_order = !job.exact && gemmk::has_kernel::<M>();
            let decode = xrows.len() <= 2;
            for i in xrows {
                let xr = x.row(i, k);
                in_place_rows::<M>(
                    job,
                    &rows,
                    &store,
                    i,
                    decode,
                    |ws| match gemm_order {
                        true => kdot::dots_in_gemmk_order::<M, WR>(job.dtype, xr, ws),
                        false => kdot::dots::<M, WR>(job.dtype, xr, ws),
                    },
                    |w| match gemm_order {
                        true => kdot::dots_in_gemmk_order::<M, 1>(job.dtype, xr, w),
                        false => kdot::dots::<M, 1>(job.dtype, xr, w),
                    },
                );
            }
        }
        Acts::Q8K(x) => {
            // Prefill: the item's weight rows unpacked interleaved, and
            // each group of 8 against all its activation rows (as for the
            // 32-value types below).
            buf.k.unpack::<M>(job.dtype, src, k / QK_K);
            let out = grown(&mut buf.o, xrows.len() * gemmk::ROWS);
            for g in 0..buf.k.groups {
                gemmk::group::<M>(&buf.k, g, x, k, xrows.clone(), out);
                store_group(&store, &xrows, g, nw, out);
            }
        }
        Acts::Q8(x) if gemm8::has_kernel::<M>() && !job.exact && gemm8::has_path(job.dtype) => {
            // Prefill: the item's weight rows unpacked in groups of 8, each
            // group against all the item's activation rows (4 at a time),
            // staying in L1 while they pass.
            buf.i.unpack::<M>(job.dtype, src, k / q8::QK8);
            let out = grown(&mut buf.o, xrows.len() * gemm8::ROWS);
            for g in 0..buf.i.groups {
                gemm8::group::<M>(job.dtype, &buf.i, g, x, k, xrows.clone(), out);
                store_group(&store, &xrows, g, nw, out);
            }
        }
        Acts::Q8(x) => {
            let nb = k / q8::QK8;
            buf.w.unpack::<M>(job.dtype, src);
            let w = &buf.w;
            let kind = q8::Kind::of(job.dtype);
            let wrow = |j: usize| q8::WRow {
                q: &w.qs[j * k..(j + 1) * k],
                d: &w.d[j * nb..(j + 1) * nb],
                m: &w.m[j * nb..(j + 1) * nb],
            };
            let xrow = |i: usize| {
                (
                    &x.qs[i * k..(i + 1) * k],
                    &x.d[i * nb..(i + 1) * nb],
                    &x.s[i * nb..(i + 1) * nb],
                    x.x8.get(i * k / 2..(i + 1) * k / 2).unwrap_or_default(),
                )
            };
            tiles(
                xrows,
                nw,
                xrow,
                wrow,
                store,
                |xs, ws| q8::tile::<M, XR, WR>(xs, ws, kind),
                |xs, ws| q8::tile::<M, 1, WR>(xs, ws, kind),
                |xs, ws| q8::tile::<M, 1, 1>(xs, ws, kind),
            );
        }
        Acts::F32(x) => {
            // F32 weights need no decoding (the store keeps them aligned).
            let wf: &[f32] = match bytemuck::try_cast_slice(src) {
                Ok(f) if job.dtype == GgmlType::F32 => f,
                _ => {
                    if buf.f.len() < nw * k {
                        buf.f.resize(nw * k, 0.0);
                    }
                    dequantize_rows(job.dtype, src, k, &mut buf.f[..nw * k])?;
                    &buf.f[..nw * k]
                }
            };
            let wrow = |j: usize| &wf[j * k..(j + 1) * k];
            let xrow = |i: usize| &x[i * k..(i + 1) * k];
            tiles(
                xrows,
                nw,
                xrow,
                wrow,
                store,
                simd::tile::<M, XR, WR>,
                simd::tile::<M, 1, WR>,
                simd::tile::<M, 1, 1>,
            );
        }
    }
    Ok(())
}

/// `v[..len]`, grown first where it is shorter.
#[inline(always)]
fn grown(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if v.len() < len {
        v.resize(len, 0.0);
    }
    &mut v[..len]
}

/// Stores a group's outputs (8 per activation row of `xrows`, row after
/// row in `out`): the weight rows of group `g` that exist among the item's
/// `nw`.
#[inline(always)]
fn store_group(
    store: &impl Fn(usize, usize, &[f32]),
    xrows: &Range<usize>,
    g: usize,
    nw: usize,
    out: &[f32],
) {
    const ROWS: usize = gemm8::ROWS;
    let (j, cols) = (g * ROWS, (nw - g * ROWS).min(ROWS));
    for (i, vals) in xrows.clone().zip(out.chunks_exact(ROWS)) {
        // A whole group's copy has a constant length: two vector moves,
        // where a variable one calls `memmove`.
        if cols == ROWS {
            store(i, j, &vals[..ROWS]);
        } else {
            store(i, j, &vals[..cols]);
        }
    }
}

/// Activation row `i` against the item's weight rows `rows`, read in their
/// GGUF blocks: `WR` rows at a time by `four`, the rest by `one`, results
/// stored by `store`. In decode (`prefetch`), rows a little ahead are
/// fetched while these compute: a decode waits on memory, not on
/// arithmetic. From the whole matrix, so the first rows of the next item
/// (which this thread most likely takes too) are on their way.
#[inline(always)]
fn in_place_rows<'w, M: Madd>(
    job: &Job<'w>,
    rows: &Range<usize>,
    store: &impl Fn(usize, usize, &[f32]),
    i: usize,
    prefetch: bool,
    four: impl Fn([&'w [u8]; WR]) -> [f32; WR],
    one: impl Fn([&'w [u8]; 1]) -> [f32; 1],
) {
    let rb = job.row_bytes;
    let wrow = |j: usize| &job.w[(rows.start + j) * rb..(rows.start + j + 1) * rb];
    let rows_ahead = PREFETCH_BYTES.div_ceil(rb).max(WR);
    let nw = rows.len();
    let mut j = 0;
    while j < nw {
        if prefetch {
            let ahead = (rows.start + j + rows_ahead) * rb;
            let end = job.w.len().min(ahead + WR * rb);
            prefetch_bytes::<M>(job.w.get(ahead.min(end)..end));
        }
        if nw - j >= WR {
            store(
                i,
                j,
                &four([wrow(j), wrow(j + 1), wrow(j + 2), wrow(j + 3)]),
            );
            j += WR;
        } else {
            store(i, j, &one([wrow(j)]));
            j += 1;
        }
    }
}

/// Asks for `bytes` to be brought into cache (a hint; AVX2 entry points
/// only).
#[inline(always)]
fn prefetch_bytes<M: Madd>(bytes: Option<&[u8]>) {
    #[cfg(target_arch = "x86_64")]
    if let (true, Some(b)) = (M::AVX2, bytes) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        for line in b.chunks(64) {
            // SAFETY: a prefetch is a hint that never faults; the address is
            // inside `b` anyway.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// Covers activation rows `xrows` × weight rows `0..nw` with full `XR × WR`
/// tiles, then `1 × WR` and `1 × 1` tiles at the edges, storing each result
/// with `store(activation row, weight row, values)`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn tiles<X: Copy, W: Copy>(
    xrows: Range<usize>,
    nw: usize,
    xrow: impl Fn(usize) -> X,
    wrow: impl Fn(usize) -> W,
    store: impl Fn(usize, usize, &[f32]),
    full: impl Fn([X; XR], [W; WR]) -> [[f32; WR]; XR],
    row: impl Fn([X; 1], [W; WR]) -> [[f32; WR]; 1],
    one: impl Fn([X; 1], [W; 1]) -> [[f32; 1]; 1],
) {
    let mut i = xrows.start;
    while i < xrows.end {
        let xr = (xrows.end - i).min(XR);
        let mut j = 0;
        while j < nw {
            let wr = (nw - j).min(WR);
            if xr == XR && wr == WR {
                let t = full(
                    [xrow(i), xrow(i + 1), xrow(i + 2)],
                    [wrow(j), wrow(j + 1), wrow(j + 2), wrow(j + 3)],
                );
                for (r, vals) in t.iter().enumerate() {
                    store(i + r, j, vals);
                }
            } else if wr == WR {
                for r in 0..xr {
                    let t = row(
                        [xrow(i + r)],
                        [wrow(j), wrow(j + 1), wrow(j + 2), wrow(j + 3)],
                    );
                    store(i + r, j, &t[0]);
                }
            } else {
                for r in 0..xr {
                    for c in 0..wr {
                        let t = one([xrow(i + r)], [wrow(j + c)]);
                        store(i + r, j + c, &t[0]);
                    }
                }
            }
            j += wr;
        }
        i += xr;
    }
}

/// Whether [`dequantize_rows`] decodes `dtype` itself (other types go
/// through the quant module).
pub fn has_decoder(dtype: GgmlType) -> bool {
    use GgmlType::*;
    matches!(dtype, F32 | F16 | Q4_0 | Q4_1 | Q8_0)
}

/// Dequantizes whole rows of `k` values: `src` holds `dst.len() / k` rows.
#[inline(always)]
pub fn dequantize_rows(
    dtype: GgmlType,
    src: &[u8],
    k: usize,
    dst: &mut [f32],
) -> Result<(), QuantError> {
    let f16_of = |b: &[u8]| simd::f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    match dtype {
        GgmlType::F32 => {
            for (d, c) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        GgmlType::F16 => match bytemuck::try_cast_slice::<u8, f16>(src) {
            Ok(h) => h.convert_to_f32_slice(&mut dst[..h.len()]),
            Err(_) => {
                for (d, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
                    *d = f16_of(c);
                }
            }
        },
        // Q4_0: d (f16), 16 bytes of nibbles; value j is (low nibble − 8)·d,
        // value j + 16 is (high nibble − 8)·d.
        GgmlType::Q4_0 => {
            for (b, o) in src.chunks_exact(18).zip(dst.chunks_exact_mut(32)) {
                let d = f16_of(&b[0..2]);
                let (lo, hi) = o.split_at_mut(16);
                for j in 0..16 {
                    let q = b[2 + j];
                    lo[j] = ((q & 15) as i32 - 8) as f32 * d;
                    hi[j] = ((q >> 4) as i32 - 8) as f32 * d;
                }
            }
        }
        // Q4_1: d, m (f16), 16 bytes of nibbles; value = nibble·d + m.
        GgmlType::Q4_1 => {
            for (b, o) in src.chunks_exact(20).zip(dst.chunks_exact_mut(32)) {
                let (d, m) = (f16_of(&b[0..2]), f16_of(&b[2..4]));
                let (lo, hi) = o.split_at_mut(16);
                for j in 0..16 {
                    let q = b[4 + j];
                    lo[j] = (q & 15) as f32 * d + m;
                    hi[j] = (q >> 4) as f32 * d + m;
                }
            }
        }
        // Q8_0: d (f16), 32 signed bytes; value = q·d.
        GgmlType::Q8_0 => {
            for (b, o) in src.chunks_exact(34).zip(dst.chunks_exact_mut(32)) {
                let d = f16_of(&b[0..2]);
                for j in 0..32 {
                    o[j] = (b[2 + j] as i8) as f32 * d;
                }
            }
        }
        _ => {
            let row_bytes = src.len() / (dst.len() / k.max(1)).max(1);
            for (s, d) in src
                .chunks_exact(row_bytes.max(1))
                .zip(dst.chunks_exact_mut(k))
            {
                quant::dequantize_row(dtype, s, d)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
