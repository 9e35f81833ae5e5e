//! The LSTM's steps on the CPU, each step one pass of the pool whose tasks
//! are blocks of `MR` batch rows: a task packs its rows of the state once,
//! sums their products with every panel of `W_hh` (`gemm`'s register
//! tiles, over `k` in order from zero), and runs those rows' cells, so the
//! activations run on every thread while the rows are in cache. Each value
//! is what the matmul and then the cell gave: the same sum, then `+ xp`
//! (forward) or `+ dh` (backward), then the same formulas.
//!
//! Shapes (`ops::rnn`): `B` batch rows, `H` hidden units, gates `i, f, g,
//! o` in runs of `H` along a row of `4H`.

use std::ops::Range;

use smelt::backend::cpu::pool::SharedMut;

use crate::cpu::Cx;
use crate::cpu::gemm::{MR, NR, PackedB, Tile, View, pack_a, store_row, tile};
use crate::cpu::vmath;

/// A step below this many multiply-adds runs on the calling thread: a
/// pass of the pool costs about as much as 32K of them.
const SERIAL_WORK: usize = 32 * 1024;

const ZERO: Tile = [[0.0; NR]; MR];

/// Runs `f(row block, its rows)` for every block of `MR` of the `b` rows,
/// on the pool's threads unless the step does fewer than `SERIAL_WORK`
/// multiply-adds.
fn for_blocks(cx: &mut Cx, b: usize, work: usize, f: &(dyn Fn(usize, Range<usize>) + Sync)) {
    let blocks = b.div_ceil(MR);
    let per_take = if work < SERIAL_WORK { blocks.max(1) } else { 1 };
    cx.pool.for_each(blocks, per_take, &|_, r| {
        for ib in r {
            f(ib, ib * MR..b.min(ib * MR + MR));
        }
    });
}

/// `out[rows, n] = A's packed block · B`, each tile summed from zero.
fn block_product(apack: &[f32], w: &PackedB, n: usize, rows: usize, out: &mut [f32]) {
    for jb in 0..n.div_ceil(NR) {
        let t = tile(ZERO, apack, w.panel(jb));
        let (j0, cols) = (jb * NR, NR.min(n - jb * NR));
        for (r, lanes) in t.iter().enumerate().take(rows) {
            store_row(lanes, &mut out[r * n + j0..][..cols]);
        }
    }
}

/// One forward step's operands, `[B, H]` unless noted.
pub struct Step<'a> {
    pub hprev: &'a [f32],
    pub cprev: &'a [f32],
    /// `[B, 4H]`: the input projection.
    pub xp: &'a [f32],
    /// `[B, 4H]` out: the activated gates.
    pub gates: &'a mut [f32],
    pub c: &'a mut [f32],
    pub h: &'a mut [f32],
}

/// `pre = xp + h₋₁ · W_hhᵀ`, `c = σ(f)·c₋₁ + σ(i)·tanh(g)`, `h = σ(o)·tanh(c)`
/// (`w`: `W_hhᵀ` packed, `k` H by `n` 4H).
pub fn step(cx: &mut Cx, w: &PackedB, b: usize, hd: usize, st: Step) {
    let (gates, c, h) = (
        SharedMut::new(st.gates),
        SharedMut::new(st.c),
        SharedMut::new(st.h),
    );
    let (hprev, cprev, xp) = (st.hprev, st.cprev, st.xp);
    for_blocks(cx, b, b * 4 * hd * hd, &|ib, rows| {
        let mut apack = vec![0f32; hd * MR];
        pack_a(View::new(hprev, hd, b, false), b, ib, 0..hd, &mut apack);
        let (first, n) = (rows.start, rows.len());
        // SAFETY: this task alone writes rows `rows` of the gates, c and h.
        let (pre, c, h) = unsafe {
            (
                gates.slice(first * 4 * hd, n * 4 * hd),
                c.slice(first * hd, n * hd),
                h.slice(first * hd, n * hd),
            )
        };
        block_product(&apack, w, 4 * hd, n, pre);
        for (p, &x) in pre.iter_mut().zip(&xp[first * 4 * hd..]) {
            *p += x;
        }
        let cells = pre
            .chunks_exact_mut(4 * hd)
            .zip(cprev[first * hd..].chunks_exact(hd))
            .zip(c.chunks_exact_mut(hd).zip(h.chunks_exact_mut(hd)));
        for ((g, cprev), (c, h)) in cells {
            cell(g, cprev, c, h, hd);
        }
    });
}

/// One row's cell: activates its gates in place (σ, σ, tanh, σ over runs
/// of `H`), then `c = f·c₋₁ + i·g`, `h = o·tanh(c)`.
fn cell(g: &mut [f32], cprev: &[f32], c: &mut [f32], h: &mut [f32], hd: usize) {
    vmath::sigmoid(&mut g[..2 * hd]);
    vmath::tanh(&mut g[2 * hd..3 * hd]);
    vmath::sigmoid(&mut g[3 * hd..]);
    let (i, rest) = g.split_at(hd);
    let (f, rest) = rest.split_at(hd);
    let (gg, o) = rest.split_at(hd);
    for j in 0..hd {
        c[j] = f[j] * cprev[j] + i[j] * gg[j];
    }
    h.copy_from_slice(c);
    vmath::tanh(h);
    for j in 0..hd {
        h[j] *= o[j];
    }
}

/// One backward step's operands, `[B, H]` unless noted.
pub struct GradStep<'a> {
    /// `[B, 4H]`: the next step's pre-activation gradients, `None` at the
    /// last step.
    pub dpre_next: Option<&'a [f32]>,
    /// The output's gradient at this step.
    pub dhs: &'a [f32],
    /// `[B, 4H]`: the activated gates.
    pub gates: &'a [f32],
    pub c: &'a [f32],
    pub cprev: &'a [f32],
    /// The cell's gradient, carried in and out.
    pub dc: &'a mut [f32],
    /// `[B, 4H]` out.
    pub dpre: &'a mut [f32],
}

/// `dh = dpre₊₁ · W_hh + dhs`, then each row's cell gradients into `dpre`
/// and `dc` (`w`: `W_hh` packed, `k` 4H by `n` H).
pub fn grad_step(cx: &mut Cx, w: &PackedB, b: usize, hd: usize, st: GradStep) {
    let work = st.dpre_next.map_or(0, |_| b * 4 * hd * hd);
    let (dc, dpre) = (SharedMut::new(st.dc), SharedMut::new(st.dpre));
    let (dhs, gates, cs, cprev) = (st.dhs, st.gates, st.c, st.cprev);
    for_blocks(cx, b, work, &|ib, rows| {
        let (first, n) = (rows.start, rows.len());
        let mut dh = vec![0f32; n * hd];
        if let Some(next) = st.dpre_next {
            let mut apack = vec![0f32; 4 * hd * MR];
            pack_a(
                View::new(next, 4 * hd, b, false),
                b,
                ib,
                0..4 * hd,
                &mut apack,
            );
            block_product(&apack, w, hd, n, &mut dh);
        }
        for (d, &o) in dh.iter_mut().zip(&dhs[first * hd..]) {
            *d += o;
        }
        // SAFETY: this task alone writes rows `rows` of dc and dpre.
        let (dc, dpre) = unsafe {
            (
                dc.slice(first * hd, n * hd),
                dpre.slice(first * 4 * hd, n * 4 * hd),
            )
        };
        let mut tanh_c = vec![0f32; hd];
        let rows = rows_of(gates, first, n, 4 * hd)
            .zip(dpre.chunks_exact_mut(4 * hd))
            .zip(rows_of(cs, first, n, hd).zip(rows_of(cprev, first, n, hd)))
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
    });
}

/// Rows `first..first + n` of `[_, width]` values, one at a time.
fn rows_of(x: &[f32], first: usize, n: usize, width: usize) -> std::slice::ChunksExact<'_, f32> {
    x[first * width..][..n * width].chunks_exact(width)
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
    let (g, dp, dh, dc, cprev) = (st.gates, st.dpre, st.dh, st.dc, st.cprev);
    let (i, rest) = g.split_at(hd);
    let (f, rest) = rest.split_at(hd);
    let (gg, o) = rest.split_at(hd);
    let (di, rest) = dp.split_at_mut(hd);
    let (df, rest) = rest.split_at_mut(hd);
    let (dg, d_o) = rest.split_at_mut(hd);
    for j in 0..hd {
        let dct = dc[j] + dh[j] * o[j] * (1.0 - tc[j] * tc[j]);
        dc[j] = dct * f[j];
        di[j] = dct * gg[j] * (i[j] * (1.0 - i[j]));
        df[j] = dct * cprev[j] * (f[j] * (1.0 - f[j]));
        dg[j] = dct * i[j] * (1.0 - gg[j] * gg[j]);
        d_o[j] = dh[j] * tc[j] * (o[j] * (1.0 - o[j]));
    }
}
