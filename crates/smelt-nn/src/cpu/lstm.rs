//! The LSTM's sequences on the CPU as one pass of the pool whose tasks are
//! blocks of `MR` batch rows: batch rows are independent, so a task runs
//! every step of its rows, forward or backward, with no wait between
//! steps. A step packs the block's rows of the state, sums their products
//! with every panel of `W_hh` (`gemm`'s register tiles, over `k` in order
//! from zero), and runs those rows' cells while they are in cache. Each
//! value is what the matmul and then the cell gave: the same sum, then
//! `+ (xp + b)` (forward) or `+ dh` (backward), then the same formulas.
//!
//! Shapes (`ops::rnn`): `T` steps, `B` batch rows, `H` hidden units, gates
//! `i, f, g, o` in runs of `H` along a row of `4H`.

use std::ops::Range;

use smelt::backend::cpu::pool::SharedMut;

use crate::cpu::Cx;
use crate::cpu::gemm::{KC, MR, NR, PackedB, Start, Tile, View, ZERO, pack_a, store_row, tile};
use crate::cpu::vmath;

/// A sequence below this many multiply-adds runs on the calling thread: a
/// pass of the pool costs about as much as 32K of them.
const SERIAL_WORK: usize = 32 * 1024;

/// A sequence's sizes.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    /// Steps.
    pub t: usize,
    /// Batch rows.
    pub b: usize,
    /// Hidden units.
    pub h: usize,
}

/// Runs `f(its rows)` for every block of `MR` of the `b` rows, on the
/// pool's threads unless the sequence does fewer than `SERIAL_WORK`
/// multiply-adds.
fn for_blocks(cx: &mut Cx, b: usize, work: usize, f: &(dyn Fn(Range<usize>) + Sync)) {
    let blocks = b.div_ceil(MR);
    let per_take = if work < SERIAL_WORK { blocks.max(1) } else { 1 };
    cx.pool.for_each(blocks, per_take, &|_, r| {
        for ib in r {
            f(ib * MR..b.min(ib * MR + MR));
        }
    });
}

/// `out[rows, n] = A's packed block · B`, each tile summed from zero. A
/// `k` past `KC` runs in slabs (a tile continues from the slab before: the
/// same sum), so that A's slab and a panel's stay in L1 (`acc`: a tile a
/// panel, scratch).
fn block_product(apack: &[f32], w: &PackedB, rows: usize, acc: &mut [Tile], out: &mut [f32]) {
    let (n, k) = (w.n, apack.len() / MR);
    let panels = n.div_ceil(NR);
    let store = |jb: usize, t: &Tile, out: &mut [f32]| {
        let (j0, cols) = (jb * NR, NR.min(n - jb * NR));
        for (r, lanes) in t.iter().enumerate().take(rows) {
            store_row(lanes, &mut out[r * n + j0..][..cols]);
        }
    };
    if k <= KC {
        // One slab: each tile stored while in cache.
        for jb in 0..panels {
            tile(&mut acc[0], Start::Zero, rows, apack, w.panel(jb));
            store(jb, &acc[0], out);
        }
        return;
    }
    for p0 in (0..k).step_by(KC) {
        let p1 = (p0 + KC).min(k);
        let start = if p0 == 0 { Start::Zero } else { Start::Tile };
        for (jb, t) in acc[..panels].iter_mut().enumerate() {
            let b = &w.panel(jb)[p0 * NR..p1 * NR];
            tile(t, start, rows, &apack[p0 * MR..p1 * MR], b);
        }
    }
    for (jb, t) in acc[..panels].iter().enumerate() {
        store(jb, t, out);
    }
}

/// Packs a block's `rows × k` values (row-major) as `gemm`'s A block.
fn pack_rows(x: &[f32], rows: usize, k: usize, apack: &mut [f32]) {
    pack_a(View::new(x, k, rows, false), rows, 0, 0..k, apack);
}

/// A forward sequence's operands, `[T, B, H]` unless noted.
pub struct Sequence<'a> {
    /// `[B, H]`: the state carried in.
    pub h0: &'a [f32],
    pub c0: &'a [f32],
    /// `[T, B, 4H]`: the input projection.
    pub xp: &'a [f32],
    /// `[4H]`.
    pub bias: &'a [f32],
    /// `[T, B, 4H]` out: the activated gates.
    pub gates: &'a mut [f32],
    pub cs: &'a mut [f32],
    pub hs: &'a mut [f32],
}

/// Every step of `pre = (xp + b) + h₋₁ · W_hhᵀ`, `c = σ(f)·c₋₁ + σ(i)·tanh(g)`,
/// `h = σ(o)·tanh(c)` (`w`: `W_hhᵀ` packed, `k` H by `n` 4H).
pub fn forward(cx: &mut Cx, w: &PackedB, d: Dims, seq: Sequence) {
    let Dims { t, b, h: hd } = d;
    let (gates, cs, hs) = (
        SharedMut::new(seq.gates),
        SharedMut::new(seq.cs),
        SharedMut::new(seq.hs),
    );
    let (h0, c0, xp, bias) = (seq.h0, seq.c0, seq.xp, seq.bias);
    for_blocks(cx, b, t * b * 4 * hd * hd, &|rows| {
        let (first, n) = (rows.start, rows.len());
        let mut apack = vec![0f32; hd * MR];
        let mut acc = vec![ZERO; w.n.div_ceil(NR)];
        for s in 0..t {
            let (now, gate_rows) = ((s * b + first) * hd, (s * b + first) * 4 * hd);
            // SAFETY: this task alone reads and writes rows `rows` of every
            // step of the gates, cs and hs.
            let (pre, c, h) = unsafe {
                (
                    gates.slice(gate_rows, n * 4 * hd),
                    cs.slice(now, n * hd),
                    hs.slice(now, n * hd),
                )
            };
            // SAFETY: as above; step `s − 1`'s rows are the task's own.
            let (hprev, cprev): (&[f32], &[f32]) = if s == 0 {
                (&h0[first * hd..][..n * hd], &c0[first * hd..][..n * hd])
            } else {
                unsafe {
                    (
                        hs.slice(now - b * hd, n * hd),
                        cs.slice(now - b * hd, n * hd),
                    )
                }
            };
            pack_rows(hprev, n, hd, &mut apack);
            block_product(&apack, w, n, &mut acc, pre);
            let rows = pre
                .chunks_exact_mut(4 * hd)
                .zip(xp[gate_rows..].chunks_exact(4 * hd))
                .zip(cprev.chunks_exact(hd))
                .zip(c.chunks_exact_mut(hd).zip(h.chunks_exact_mut(hd)));
            for (((g, xp), cprev), (c, h)) in rows {
                let row = Cell {
                    gates: g,
                    xp,
                    bias,
                    cprev,
                    c,
                    h,
                };
                cell(row, hd);
            }
        }
    });
}

/// One row of a forward step: `gates` holds the recurrent sums on entry.
struct Cell<'a> {
    gates: &'a mut [f32],
    xp: &'a [f32],
    bias: &'a [f32],
    cprev: &'a [f32],
    c: &'a mut [f32],
    h: &'a mut [f32],
}

/// One row's cell: adds `xp + b` to the gates' sums, activates them in
/// place (σ, σ, tanh, σ over runs of `H`), then `c = f·c₋₁ + i·g`,
/// `h = o·tanh(c)`.
fn cell(row: Cell, hd: usize) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked above).
        return unsafe { cell_avx2(row, hd) };
    }
    cell_lanes(row, hd);
}

/// `cell_lanes` in 256-bit vectors: the same operations on each lane, so
/// the same bits (no multiply-add is fused).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn cell_avx2(row: Cell, hd: usize) {
    cell_lanes(row, hd);
}

#[inline(always)]
fn cell_lanes(row: Cell, hd: usize) {
    let Cell {
        gates: g,
        xp,
        bias,
        cprev,
        c,
        h,
    } = row;
    for ((p, &x), &b) in g.iter_mut().zip(xp).zip(bias) {
        *p += x + b;
    }
    vmath::sigmoid(&mut g[..2 * hd]);
    vmath::tanh(&mut g[2 * hd..3 * hd]);
    vmath::sigmoid(&mut g[3 * hd..]);
    let (i, rest) = g.split_at(hd);
    let (f, rest) = rest.split_at(hd);
    let (gg, o) = rest.split_at(hd);
    for ((c, &cp), ((&i, &f), &gg)) in c.iter_mut().zip(cprev).zip(i.iter().zip(f).zip(gg)) {
        *c = f * cp + i * gg;
    }
    h.copy_from_slice(c);
    vmath::tanh(h);
    for (h, &o) in h.iter_mut().zip(o) {
        *h *= o;
    }
}

/// A backward sequence's operands, `[T, B, H]` unless noted.
pub struct GradSequence<'a> {
    /// The outputs' gradients.
    pub dhs: &'a [f32],
    /// `[T, B, 4H]`: the activated gates.
    pub gates: &'a [f32],
    pub cs: &'a [f32],
    /// `[B, H]`: the cell state carried in.
    pub c0: &'a [f32],
    /// `[T, B, 4H]` out: the pre-activation gradients.
    pub dxp: &'a mut [f32],
    /// `[B, H]` out: the carried-in state's gradients.
    pub dh0: &'a mut [f32],
    pub dc0: &'a mut [f32],
}

/// Every step backwards: `dh = dpre₊₁ · W_hh + dhs` (no product at the
/// last step), then each row's cell gradients into `dxp` and the carried
/// `dc`; finally `dh0 = dpre₀ · W_hh` and `dc0` (`w`: `W_hh` packed, `k` 4H
/// by `n` H).
pub fn backward(cx: &mut Cx, w: &PackedB, d: Dims, seq: GradSequence) {
    let Dims { t, b, h: hd } = d;
    let (dxp, dh0, dc0) = (
        SharedMut::new(seq.dxp),
        SharedMut::new(seq.dh0),
        SharedMut::new(seq.dc0),
    );
    let (dhs, gates, cs, c0) = (seq.dhs, seq.gates, seq.cs, seq.c0);
    for_blocks(cx, b, t * b * 4 * hd * hd, &|rows| {
        let (first, n) = (rows.start, rows.len());
        // SAFETY: this task alone reads and writes rows `rows` of dh0, dc0
        // and every step of dxp.
        let (dh0, dc) = unsafe { (dh0.slice(first * hd, n * hd), dc0.slice(first * hd, n * hd)) };
        dc.fill(0.0);
        let mut apack = vec![0f32; 4 * hd * MR];
        let mut acc = vec![ZERO; w.n.div_ceil(NR)];
        let mut dh = vec![0f32; n * hd];
        let mut tanh_c = vec![0f32; hd];
        for s in (0..t).rev() {
            let (now, gate_rows) = ((s * b + first) * hd, (s * b + first) * 4 * hd);
            if s + 1 < t {
                // SAFETY: as above; step `s + 1`'s rows are the task's own.
                let next = unsafe { dxp.slice(gate_rows + b * 4 * hd, n * 4 * hd) };
                pack_rows(next, n, 4 * hd, &mut apack);
                block_product(&apack, w, n, &mut acc, &mut dh);
            } else {
                dh.fill(0.0);
            }
            for (d, &o) in dh.iter_mut().zip(&dhs[now..]) {
                *d += o;
            }
            // SAFETY: as above.
            let dpre = unsafe { dxp.slice(gate_rows, n * 4 * hd) };
            let cprev = if s == 0 {
                &c0[first * hd..]
            } else {
                &cs[now - b * hd..]
            };
            let rows = gates[gate_rows..]
                .chunks_exact(4 * hd)
                .zip(dpre.chunks_exact_mut(4 * hd))
                .zip(cs[now..].chunks_exact(hd).zip(cprev.chunks_exact(hd)))
                .zip(dh.chunks_exact(hd).zip(dc.chunks_exact_mut(hd)));
            for (((g, dp), (c, cprev)), (dh, dc)) in rows {
                let row = CellGrad {
                    gates: g,
                    c,
                    cprev,
                    dh,
                    dc,
                    dpre: dp,
                    tanh_c: &mut tanh_c,
                };
                cell_grad(row, hd);
            }
        }
        if t == 0 {
            return dh0.fill(0.0);
        }
        // SAFETY: as above.
        let first_step = unsafe { dxp.slice(first * 4 * hd, n * 4 * hd) };
        pack_rows(first_step, n, 4 * hd, &mut apack);
        block_product(&apack, w, n, &mut acc, dh0);
    });
}

/// One row of a backward step: `dh` (the output's gradient plus the next
/// step's recurrent one), `dc` carried in and out.
struct CellGrad<'a> {
    gates: &'a [f32],
    c: &'a [f32],
    cprev: &'a [f32],
    dh: &'a [f32],
    dc: &'a mut [f32],
    dpre: &'a mut [f32],
    /// `[H]` scratch.
    tanh_c: &'a mut [f32],
}

fn cell_grad(st: CellGrad, hd: usize) {
    let tc = &mut *st.tanh_c;
    tc.copy_from_slice(st.c);
    vmath::tanh(tc);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked above).
        return unsafe { cell_grad_avx2(st, hd) };
    }
    cell_grad_lanes(st, hd);
}

/// `cell_grad_lanes` in 256-bit vectors: the same operations on each lane,
/// so the same bits (no multiply-add is fused).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn cell_grad_avx2(st: CellGrad, hd: usize) {
    cell_grad_lanes(st, hd);
}

/// Each unit's gradients, lane by lane (`st.tanh_c` holds `tanh c`).
#[inline(always)]
fn cell_grad_lanes(st: CellGrad, hd: usize) {
    let (g, dp, dh, dc, cprev, tc) = (st.gates, st.dpre, st.dh, st.dc, st.cprev, &*st.tanh_c);
    let (i, rest) = g.split_at(hd);
    let (f, rest) = rest.split_at(hd);
    let (gg, o) = rest.split_at(hd);
    let (di, rest) = dp.split_at_mut(hd);
    let (df, rest) = rest.split_at_mut(hd);
    let (dg, d_o) = rest.split_at_mut(hd);
    let (dh, dc, cprev, tc) = (&dh[..hd], &mut dc[..hd], &cprev[..hd], &tc[..hd]);
    let (o, d_o) = (&o[..hd], &mut d_o[..hd]);
    for j in 0..hd {
        let dct = dc[j] + dh[j] * o[j] * (1.0 - tc[j] * tc[j]);
        dc[j] = dct * f[j];
        di[j] = dct * gg[j] * (i[j] * (1.0 - i[j]));
        df[j] = dct * cprev[j] * (f[j] * (1.0 - f[j]));
        dg[j] = dct * i[j] * (1.0 - gg[j] * gg[j]);
        d_o[j] = dh[j] * tc[j] * (o[j] * (1.0 - o[j]));
    }
}
