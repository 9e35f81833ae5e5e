//! Fast CPU attention: causal, grouped-query, over an F32, F16, Q8_0 or
//! Q4_0 cache.
//!
//! A work item is a block of query rows (`row_block`) and one KV head.
//! It widens the keys and values of that head into the thread's scratch and
//! serves every query head of the group from them; consecutive rows of one
//! sequence (a prompt) see the same cache rows plus one, so the widened span
//! is extended rather than widened again: widening once per row made a
//! 512-token prompt convert its cache 512 times per layer.
//!
//! The arithmetic is ggml's CPU flash attention for batches under 64 rows,
//! rounding for rounding: an online softmax in position order, and with an
//! F16 cache the query rounded to f16 and the value accumulator kept in
//! f16. That loses a little precision against the reference op (the tests
//! bound it), and buys llama.cpp's numbers: a small quantized model's
//! greedy choices depend on them (see `q8`). From 64 rows llama.cpp tiles
//! its attention in f32, and so does the fast mode here
//! ([`super::attention_tiled`]) for a sequence with at least that many rows
//! in the batch; the exact mode, and a Q8_0/Q4_0 cache (as in ggml), keep
//! the one-row order. The choice is per
//! sequence, not per batch, so that a row's numbers do not depend on the
//! other sequences sharing its batch (a server's request answers the same
//! alone and among others).
//!
//! Legend: `n` query rows, `hd` head dim, `s` span (visible positions).

use std::ops::Range;
use std::sync::Mutex;

use super::attention_tiled::{self as tiled, MIN_ROWS, Run};
use super::kv_blocks::BLOCK;
use super::pool::{SharedMut, ThreadPool};
use super::reference::{Rows, attention_span};
use super::simd::{Isa, LANES, Madd, multiversion};
use crate::backend::{AttentionParams, Result};
use crate::quant::{Block, BlockQ8_0, Quantize};

/// Query rows per work item, which share one widening of the cache: as
/// many as leave [`ITEMS_PER_THREAD`] items a thread, within these bounds.
/// A prompt's items widen the span before their rows each, so fewer rows an
/// item widen more: 16 rows a block spent ~5% of a SmolLM2 pp512 (Q8_0, 2
/// threads) converting the f16 cache, 64 a quarter of that (the pp512 3%
/// faster; 128 no faster again).
const ROW_BLOCK: std::ops::RangeInclusive<usize> = 16..=64;
/// Work items a thread at least, where [`ROW_BLOCK`]'s lower bound allows:
/// the longest first, enough to even the threads out.
const ITEMS_PER_THREAD: usize = 8;

/// The query rows of one work item (see [`ROW_BLOCK`]).
fn row_block(rows: usize, n_kv: usize, threads: usize) -> usize {
    let even = rows * n_kv / (ITEMS_PER_THREAD * threads.max(1));
    even.clamp(*ROW_BLOCK.start(), *ROW_BLOCK.end())
}

/// Attention of `q` (`n × (H·hd)`) over the caches into `out`; `spans` is
/// scratch for the validated `(base row, first, last)` of each query row,
/// `tiled` for whether it takes the tiles. `exact` keeps ggml's one-row
/// order for every batch.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    pool: &mut ThreadPool,
    isa: Isa,
    exact: bool,
    scratch: &[Mutex<super::matmul::Scratch>],
    spans: &mut Vec<(usize, usize, usize)>,
    tiled: &mut Vec<bool>,
    q: &[f32],
    k: Rows,
    v: Rows,
    cache_rows: usize,
    pos: &[i32],
    seq: &[i32],
    p: &AttentionParams,
    out: &mut [f32],
) -> Result<()> {
    // Every position and slot is checked here, before any thread starts.
    spans.clear();
    for (&ps, &sq) in pos.iter().zip(seq) {
        spans.push(attention_span(p, cache_rows, ps, sq)?);
    }
    // Each run of one sequence's rows (one cache base) takes the tiles when
    // it is at least MIN_ROWS long and the cache holds floats (ggml tiles
    // F32 and F16 caches only: block keys take the one-row order).
    let tiles = !exact && !k.is_blocks();
    tiled.clear();
    let mut start = 0;
    while start < spans.len() {
        let base = spans[start].0;
        let end = (start..spans.len())
            .find(|&r| spans[r].0 != base)
            .unwrap_or(spans.len());
        tiled.extend(std::iter::repeat_n(
            tiles && end - start >= MIN_ROWS,
            end - start,
        ));
        start = end;
    }
    let job = Job {
        q,
        k,
        v,
        spans,
        p,
        tiled,
        out: SharedMut::new(out),
    };
    let n_kv = p.n_kv_heads;
    let block_rows = row_block(spans.len(), n_kv, pool.n_threads());
    let n_blocks = spans.len().div_ceil(block_rows);
    pool.for_each(n_blocks * n_kv, 1, &|t, items| {
        let mut buf = scratch[t].lock().unwrap_or_else(|e| e.into_inner());
        for item in items {
            // Last blocks first: in a prompt they have the longest spans,
            // and ending on the short ones balances the threads.
            let block = n_blocks - 1 - item / n_kv;
            let rows = block * block_rows..job.spans.len().min((block + 1) * block_rows);
            item_kernel(isa, &job, rows, item % n_kv, &mut buf.f);
        }
    });
    Ok(())
}

struct Job<'a> {
    q: &'a [f32],
    k: Rows<'a>,
    v: Rows<'a>,
    spans: &'a [(usize, usize, usize)],
    p: &'a AttentionParams,
    /// Per row: whether it takes [`tiled`]'s f32 tiles.
    tiled: &'a [bool],
    /// `n × (H·hd)`; each item writes its row's heads of its group.
    out: SharedMut<f32>,
}

multiversion! {
    fn item_kernel(job: &Job, rows: Range<usize>, kv_head: usize, buf: &mut Vec<f32>) = item_generic;
}

/// Widens `hd` values from `at` of a cache into `dst` (a block cache's
/// blocks dequantized: the tile is all that is ever widened).
#[inline(always)]
fn widen(src: Rows, at: usize, dst: &mut [f32]) {
    src.widen(at, dst);
}

/// An item's rows, in runs that take the tiles or the one-row order.
#[inline(always)]
fn item_generic<M: Madd>(job: &Job, rows: Range<usize>, kv_head: usize, buf: &mut Vec<f32>) {
    let mut start = rows.start;
    while start < rows.end {
        let tiled = job.tiled[start];
        let end = (start..rows.end)
            .find(|&r| job.tiled[r] != tiled)
            .unwrap_or(rows.end);
        if tiled {
            tiled_item::<M>(job, start..end, kv_head, buf);
        } else {
            one_row_item::<M>(job, start..end, kv_head, buf);
        }
        start = end;
    }
}

/// Rows in ggml's one-row order, each over its span's keys and values,
/// widened once for consecutive rows of one sequence.
#[inline(always)]
fn one_row_item<M: Madd>(job: &Job, rows: Range<usize>, kv_head: usize, buf: &mut Vec<f32>) {
    let p = job.p;
    let hd = p.head_dim;
    let kv_cols = p.n_kv_heads * hd;
    let spans = &job.spans[rows.clone()];
    let s_max = spans.iter().map(|&(_, f, l)| l + 1 - f).max().unwrap_or(0);
    let group = p.n_heads / p.n_kv_heads;
    // Scratch: keys s_max × hd | values s_max × hd | queries group × hd |
    // accumulators group × hd | 2 · group × s_max for the grouped kernel.
    let need = 2 * s_max * hd + 2 * group * hd + 2 * group * s_max;
    if buf.len() < need {
        buf.resize(need, 0.0);
    }
    let (keys, rest) = buf.split_at_mut(s_max * hd);
    let (vals, rest) = rest.split_at_mut(s_max * hd);
    let (qh, rest) = rest.split_at_mut(group * hd);
    let (acc, work) = rest.split_at_mut(group * hd);
    // The cache rows widened so far: `(base, first, count)`.
    let mut widened: Option<(usize, usize, usize)> = None;
    for (row, &(base, first, last)) in rows.zip(spans) {
        let s = last + 1 - first;
        let have = match widened {
            Some((b, f, n)) if b == base && f == first => n,
            _ => 0,
        };
        let from = have.min(s);
        for j in from..s {
            let at = (base + first + j) * kv_cols + kv_head * hd;
            widen(job.k, at, &mut keys[j * hd..(j + 1) * hd]);
            widen(job.v, at, &mut vals[j * hd..(j + 1) * hd]);
        }
        widened = Some((base, first, have.max(s)));
        row_kernel::<M>(
            job,
            row,
            kv_head,
            &keys[..s * hd],
            &vals[..s * hd],
            qh,
            acc,
            work,
        );
    }
}

/// An item in [`tiled`]'s f32 tiles: its rows in runs of one cache base
/// (one sequence), each run's keys and values widened once for the union
/// of its rows' spans.
#[inline(always)]
fn tiled_item<M: Madd>(job: &Job, rows: Range<usize>, kv_head: usize, buf: &mut Vec<f32>) {
    let p = job.p;
    let (hd, group) = (p.head_dim, p.n_heads / p.n_kv_heads);
    let kv_cols = p.n_kv_heads * hd;
    let q_cols = p.n_heads * hd;
    let mut start = rows.start;
    while start < rows.end {
        let base = job.spans[start].0;
        let end = (start..rows.end)
            .find(|&r| job.spans[r].0 != base)
            .unwrap_or(rows.end);
        let spans = &job.spans[start..end];
        let first0 = spans.iter().map(|s| s.1).min().unwrap_or(0);
        let s = spans.iter().map(|s| s.2 + 1).max().unwrap_or(0) - first0;
        let need = 2 * s * hd + tiled::scratch_len(hd);
        if buf.len() < need {
            buf.resize(need, 0.0);
        }
        let (keys, rest) = buf.split_at_mut(s * hd);
        let (vals, work) = rest.split_at_mut(s * hd);
        for j in 0..s {
            let at = (base + first0 + j) * kv_cols + kv_head * hd;
            widen(job.k, at, &mut keys[j * hd..(j + 1) * hd]);
            widen(job.v, at, &mut vals[j * hd..(j + 1) * hd]);
        }
        // The rows' spans as positions of the widened keys (an item has at
        // most `ROW_BLOCK`'s end rows).
        let mut rel = [(0usize, 0usize); *ROW_BLOCK.end()];
        for (r, &(_, f, l)) in rel.iter_mut().zip(spans) {
            *r = (f - first0, l - first0);
        }
        let run = Run {
            q: job.q,
            q_cols,
            rows: start..end,
            spans: &rel[..spans.len()],
            heads: kv_head * group..(kv_head + 1) * group,
            hd,
            keys,
            vals,
            scale: p.softcap.map_or(p.scale, |cap| p.scale / cap),
            softcap: p.softcap,
        };
        tiled::run::<M>(&run, work, &mut |row, head, vals| {
            // SAFETY: row `row`, head `head` belongs to this item alone (one
            // of its query rows and one of its KV head's query heads), and
            // `out` outlives the pool job.
            let o = unsafe { job.out.slice(row * q_cols + head * hd, hd) };
            o.copy_from_slice(vals);
        });
        start = end;
    }
}

/// Every query head of `kv_head`'s group for one row, over its span's
/// widened keys and values (`s × hd` each). `qh` and `acc` hold
/// `group × hd` values, `work` `2 · group × s`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn row_kernel<M: Madd>(
    job: &Job,
    row: usize,
    kv_head: usize,
    keys: &[f32],
    vals: &[f32],
    qh: &mut [f32],
    acc: &mut [f32],
    work: &mut [f32],
) {
    let p = job.p;
    let (hd, group) = (p.head_dim, p.n_heads / p.n_kv_heads);
    let q_cols = p.n_heads * hd;
    let f16_cache = matches!(job.v, Rows::F16(_));
    // ggml rounds to the cache type where it rounds: the query to the key
    // dot product's type (f16 for F16 keys, Q8_0 blocks for Q8_0 and Q4_0
    // keys), the value accumulator to f16 after every update of an F16
    // value cache (`online_softmax`). Identity for F32 caches.
    let round_query = |v: &mut [f32]| match job.k {
        Rows::F16(_) => M::round_to_f16(v),
        Rows::Q8_0(_) | Rows::Q4_0(_) => round_to_q8_0(v),
        Rows::F32(_) => {}
    };
    // With a softcap ggml folds 1/cap into the scale, then takes cap·tanh.
    let scale = p.softcap.map_or(p.scale, |cap| p.scale / cap);
    let heads = kv_head * group..(kv_head + 1) * group;
    let q_at = |h: usize| row * q_cols + h * hd;
    qh.copy_from_slice(&job.q[q_at(heads.start)..q_at(heads.end)]);
    round_query(qh);
    let mut sums = [0f32; MAX_GROUP];
    let grouped = group <= MAX_GROUP
        && grouped_softmax::<M>(
            hd,
            qh,
            keys,
            vals,
            scale,
            p.softcap,
            f16_cache,
            acc,
            work,
            &mut sums[..group],
        );
    for (i, h) in heads.enumerate() {
        let (q, a) = (&qh[i * hd..(i + 1) * hd], &mut acc[i * hd..(i + 1) * hd]);
        let sum = if grouped {
            sums[i]
        } else {
            online_softmax::<M>(q, keys, vals, scale, p.softcap, f16_cache, a)
        };
        let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
        // SAFETY: row `row`, head `h` belongs to this item alone (its query
        // row and one of its KV head's query heads), and `out` outlives the
        // pool job.
        let o = unsafe { job.out.slice(q_at(h), hd) };
        for (o, &a) in o.iter_mut().zip(a.iter()) {
            *o = a * inv;
        }
    }
}

/// `v` (whole blocks of [`BLOCK`]) rounded through Q8_0 blocks, as
/// ggml quantizes the query for its dot products with Q8_0 or Q4_0 keys.
fn round_to_q8_0(v: &mut [f32]) {
    for x in v.chunks_exact_mut(BLOCK) {
        BlockQ8_0::quantize(x).dequantize(x);
    }
}

/// Query heads per KV head that [`grouped_softmax`] takes.
const MAX_GROUP: usize = 16;

/// [`online_softmax`] for all the query heads of a group at once, with the
/// same operations in the same order per head, rearranged: every score
/// first, then the running maximum and the argument of each step's one
/// `exp`, then the exps, then the value updates of all heads key by key
/// (independent heads hide each other's f16 rounding latency). Returns
/// false where it has no kernel (then nothing is written).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn grouped_softmax<M: Madd>(
    hd: usize,
    qs: &[f32],
    keys: &[f32],
    vals: &[f32],
    scale: f32,
    softcap: Option<f32>,
    f16_cache: bool,
    accs: &mut [f32],
    work: &mut [f32],
    sums: &mut [f32],
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if M::AVX2 {
        // SAFETY (each): `M::AVX2` holds only inside the AVX2 entry points,
        // which run after the CPU reported AVX2, FMA and F16C.
        match hd {
            64 => unsafe {
                avx2::grouped_softmax::<8>(
                    qs, keys, vals, scale, softcap, f16_cache, accs, work, sums,
                )
            },
            128 => unsafe {
                avx2::grouped_softmax::<16>(
                    qs, keys, vals, scale, softcap, f16_cache, accs, work, sums,
                )
            },
            _ => return false,
        }
        return true;
    }
    let _ = (
        hd, qs, keys, vals, scale, softcap, f16_cache, accs, work, sums,
    );
    false
}

/// Online softmax of `qh` over the span's `keys` in position order (flash
/// attention), accumulating `vals` into `acc` (`hd`); returns the
/// denominator. With an F16 cache the accumulator is rounded to f16 after
/// every update, as ggml keeps it in f16.
#[inline(always)]
fn online_softmax<M: Madd>(
    qh: &[f32],
    keys: &[f32],
    vals: &[f32],
    scale: f32,
    softcap: Option<f32>,
    f16_cache: bool,
    acc: &mut [f32],
) -> f32 {
    let hd = qh.len();
    #[cfg(target_arch = "x86_64")]
    if M::AVX2 {
        // SAFETY (each): `M::AVX2` holds only inside the AVX2 entry points,
        // which run after the CPU reported AVX2, FMA and F16C.
        match hd {
            64 => {
                return unsafe {
                    avx2::online_softmax::<8>(qh, keys, vals, scale, softcap, f16_cache, acc)
                };
            }
            128 => {
                return unsafe {
                    avx2::online_softmax::<16>(qh, keys, vals, scale, softcap, f16_cache, acc)
                };
            }
            _ => {}
        }
    }
    let round = |v: &mut [f32]| {
        if f16_cache {
            M::round_to_f16(v);
        }
    };
    let s = keys.len() / hd.max(1);
    // `max` the running maximum, `sum` the running denominator.
    let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
    acc.fill(0.0);
    for j in 0..s {
        let mut score = dot_ggml::<M>(qh, &keys[j * hd..(j + 1) * hd]) * scale;
        if let Some(cap) = softcap {
            score = cap * score.tanh();
        }
        let (mut ms, mut vs) = (1.0f32, 1.0f32);
        if score > max {
            ms = (max - score).exp();
            max = score;
            acc.iter_mut().for_each(|a| *a *= ms);
            round(acc);
        } else {
            vs = (score - max).exp();
        }
        for (a, &v) in acc.iter_mut().zip(&vals[j * hd..(j + 1) * hd]) {
            *a = M::madd(v, vs, *a);
        }
        round(acc);
        sum = M::madd(sum, ms, vs);
    }
    sum
}

/// `Σ a·b` summed as ggml's AVX2 `vec_dot_f16` sums: four 8-lane
/// accumulators over steps of 32 values, folded 0+2, 1+3, then 0+1, the
/// lanes added pairwise in halves, and any tail added in f64.
#[inline(always)]
fn dot_ggml<M: Madd>(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let full = n - n % 32;
    let (a, b) = (&a[..n], &b[..n]);
    #[cfg(target_arch = "x86_64")]
    if M::AVX2 {
        // SAFETY: `M::AVX2` holds only inside the AVX2 entry points, which
        // run after the CPU reported AVX2 and FMA. (LLVM leaves the portable
        // loop below scalar: it was half of a prompt's attention time.)
        let acc = unsafe { avx2::dot_lanes(&a[..full], &b[..full]) };
        return dot_finish(acc, a, b, full);
    }
    let mut acc = [[0f32; LANES]; 4];
    for o in (0..full).step_by(32) {
        for (j, accj) in acc.iter_mut().enumerate() {
            let (aj, bj) = (&a[o + j * LANES..], &b[o + j * LANES..]);
            for (l, s) in accj.iter_mut().enumerate() {
                *s = M::madd(aj[l], bj[l], *s);
            }
        }
    }
    dot_finish(acc, a, b, full)
}

/// The fold of [`dot_ggml`]'s accumulators, and its tail from `full`.
#[inline(always)]
fn dot_finish(acc: [[f32; LANES]; 4], a: &[f32], b: &[f32], full: usize) -> f32 {
    let [a0, a1, a2, a3] = acc;
    let fold =
        |x: [f32; LANES], y: [f32; LANES]| -> [f32; LANES] { std::array::from_fn(|l| x[l] + y[l]) };
    let v = fold(fold(a0, a2), fold(a1, a3));
    let t = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    let mut sum = f64::from((t[0] + t[1]) + (t[2] + t[3]));
    for (&x, &y) in a[full..].iter().zip(&b[full..]) {
        sum += f64::from(x * y);
    }
    sum as f32
}

#[cfg(target_arch = "x86_64")]
mod avx2;

#[cfg(test)]
mod tests;
