//! Matrix products on the CPU: `C[m, n] = Σ_k A[m, k] · B[k, n]`, each
//! output summed over `k` in order from zero with one fused multiply-add
//! a term (the GPU kernels' `fma`, so that both round alike), vectorized
//! across `n`: panels of B packed `NR` columns wide, blocks of A `MR` rows
//! tall, an `MR × NR` register tile per step of `k`. `gemm` may cut `k`
//! into chunks (`Dims::chunk`): each chunk summed so, then the chunks'
//! sums added in order. Long `k`
//! runs in slabs (a slab's B panels stay in cache while every block of A
//! passes), each tile continuing from what the slab before left in C: the
//! same additions in the same order.
//!
//! Operands are strided views, so transposes cost nothing: element
//! `(i, p)` of A is `a[i·row + p·col]`.

use crate::cpu::Cx;
use smelt::backend::cpu::pool::SharedMut;

/// Rows a register tile: 16 independent accumulators keep both of a
/// core's 512-bit FMA units busy through a 4-cycle latency (6 reach 1.5 a
/// cycle), and each line of a B panel read from L2 feeds 16 of them.
pub const MR: usize = 16;
/// Columns a tile row: the x86 tiles assume 16.
pub const NR: usize = 16;

const _: () = assert!(MR == 16 && NR == 16, "interleave packs 16 runs");

/// A strided matrix view.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub data: &'a [f32],
    pub row: usize,
    pub col: usize,
}

impl<'a> View<'a> {
    /// Row-major `rows × cols`, or its transpose when `trans` (the memory
    /// then holds `cols × rows`).
    pub fn new(data: &'a [f32], cols: usize, rows: usize, trans: bool) -> Self {
        if trans {
            View {
                data,
                row: 1,
                col: rows,
            }
        } else {
            View {
                data,
                row: cols,
                col: 1,
            }
        }
    }

    #[inline]
    fn at(&self, i: usize, p: usize) -> f32 {
        self.data[i * self.row + p * self.col]
    }
}

/// B packed once into panels of `NR` columns (`k × NR` each, zero-padded),
/// so that a product repeated with the same B (a recurrent weight at every
/// time step) packs it only once.
pub struct PackedB {
    pub k: usize,
    pub n: usize,
    /// `[panels, k, NR]`.
    panels: Vec<f32>,
}

impl PackedB {
    /// Packs `b (k × n)` on one thread.
    pub fn new(k: usize, n: usize, b: View) -> Self {
        let mut panels = vec![0f32; k * NR * n.div_ceil(NR)];
        pack_b(k, n, b, &mut panels, 0..n.div_ceil(NR));
        PackedB { k, n, panels }
    }

    /// Packs `b (k × n)` on the pool's threads.
    fn new_parallel(cx: &mut Cx, k: usize, n: usize, b: View) -> Self {
        let count = n.div_ceil(NR);
        let mut panels = vec![0f32; k * NR * count];
        {
            let shared = SharedMut::new(&mut panels);
            cx.pool.for_each(count, 4, &|_, r| {
                // SAFETY: each panel range is packed by one thread.
                let dst = unsafe { shared.slice(r.start * k * NR, r.len() * k * NR) };
                pack_b(k, n, b, dst, r);
            });
        }
        PackedB { k, n, panels }
    }

    /// Panel `jb`, `[k, NR]`.
    pub fn panel(&self, jb: usize) -> &[f32] {
        &self.panels[jb * self.k * NR..][..self.k * NR]
    }
}

/// `c (m × n, row-major) = a (m × k) · b (k × n)` on one thread.
pub fn gemm_serial(m: usize, n: usize, k: usize, a: View, b: View, c: &mut [f32]) {
    let b = PackedB::new(k, n, b);
    let ops = Operands {
        a,
        b: &b,
        m,
        chunk: k,
    };
    let tasks = Tasks::new(m, n, 1);
    run_tasks(&tasks, 0..tasks.count_for(m), ops, &SharedMut::new(c));
}

/// A product's sizes. `k` is summed in chunks of `chunk` (the last one
/// shorter), each from zero, and the chunks' sums are added in order;
/// `chunk ≥ k` is one sum.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub chunk: usize,
}

/// Whether a product is too small to share out between threads.
fn serial(cx: &Cx, m: usize, n: usize, k: usize) -> bool {
    m * n * k < 32 * 1024 || cx.pool.n_threads() == 1
}

/// `c (m × n, row-major) = a (m × k) · b (k × n)`, `k` in chunks, on the
/// pool's threads (`Tasks`).
pub fn gemm(cx: &mut Cx, d: Dims, a: View, b: View, c: &mut [f32]) {
    let packed = if serial(cx, d.m, d.n, d.k) {
        PackedB::new(d.k, d.n, b)
    } else {
        PackedB::new_parallel(cx, d.k, d.n, b)
    };
    chunked_packed(cx, d.m, d.chunk, a, &packed, c);
}

/// `c (m × n) = a (m × k) · b` with B already packed.
pub fn gemm_packed(cx: &mut Cx, m: usize, a: View, b: &PackedB, c: &mut [f32]) {
    chunked_packed(cx, m, b.k, a, b, c);
}

/// A, B packed, and the chunk of the sums over `k`.
#[derive(Clone, Copy)]
struct Operands<'a> {
    a: View<'a>,
    b: &'a PackedB,
    m: usize,
    chunk: usize,
}

/// The work of a product in tasks of one block of `MR` rows × a group of
/// panels: a thread's share of the panels (at least 4), or all of them
/// when A is tall enough to share out by rows alone. A task packs its
/// block of A once, so a block is packed once per thread, not once per
/// few panels. A thread takes `per_take` consecutive tasks and runs them
/// a slab of `k` at a time, so that B's slab stays in cache across its
/// blocks.
struct Tasks {
    panels: usize,
    group: usize,
    groups: usize,
    per_take: usize,
}

impl Tasks {
    fn new(m: usize, n: usize, threads: usize) -> Tasks {
        let blocks = m.div_ceil(MR);
        let panels = n.div_ceil(NR);
        let tall = blocks >= 8 * threads;
        // At least one panel a group, so that an empty product divides by
        // no zero.
        let group = if tall {
            panels
        } else {
            panels.div_ceil(threads).max(4).min(panels)
        }
        .max(1);
        Tasks {
            panels,
            group,
            groups: panels.div_ceil(group),
            per_take: if tall { blocks / (4 * threads) } else { 1 }.max(1),
        }
    }

    fn count_for(&self, m: usize) -> usize {
        m.div_ceil(MR) * self.groups
    }
}

fn chunked_packed(cx: &mut Cx, m: usize, chunk: usize, a: View, b: &PackedB, c: &mut [f32]) {
    let (n, k) = (b.n, b.k);
    let threads = if serial(cx, m, n, k) {
        1
    } else {
        cx.pool.n_threads()
    };
    let ops = Operands { a, b, m, chunk };
    let tasks = Tasks::new(m, n, threads);
    let count = tasks.count_for(m);
    let out = SharedMut::new(c);
    if threads == 1 {
        return run_tasks(&tasks, 0..count, ops, &out);
    }
    cx.pool.for_each(count, tasks.per_take, &|_, r| {
        run_tasks(&tasks, r, ops, &out)
    });
}

/// Slabs of `k`: a multiple of the chunk (so that no chunk is split), near
/// `KC`; one slab's B panels fit in L2, and a block of A's slab with one
/// panel's (16 KB each) in L1.
pub const KC: usize = 256;

fn slab(k: usize, chunk: usize) -> usize {
    let chunk = chunk.max(1);
    if chunk < k {
        chunk * (KC / chunk).max(1)
    } else {
        KC
    }
}

/// Runs tasks `r`, slab by slab of `k`: each output tile is summed over a
/// slab on top of what the slabs before left in C, which is the same sum
/// in the same order.
fn run_tasks(tasks: &Tasks, r: std::ops::Range<usize>, ops: Operands, out: &SharedMut<f32>) {
    let (m, n, k) = (ops.m, ops.b.n, ops.b.k);
    let chunk = ops.chunk.clamp(1, k.max(1));
    let step = slab(k, chunk);
    let r = r.start..r.end.min(tasks.count_for(m));
    let mut apack = vec![0f32; step.min(k) * MR];
    // The running tile and a chunk's own sum, reused by every tile.
    let (mut acc, mut part) = (Box::new(ZERO), Box::new(ZERO));
    let mut p0 = 0;
    loop {
        let p1 = (p0 + step).min(k);
        for t in r.clone() {
            let (ib, gi) = (t / tasks.groups, t % tasks.groups);
            let a = &mut apack[..(p1 - p0) * MR];
            pack_a(ops.a, m, ib, p0..p1, a);
            for jb in gi * tasks.group..((gi + 1) * tasks.group).min(tasks.panels) {
                let b = ops.b.panel(jb);
                let cell = TileAt { ib, jb, m, n };
                if p0 > 0 {
                    // SAFETY: each tile of C is written by exactly one task,
                    // and the tasks' ranges are disjoint.
                    unsafe { cell.load(&mut acc, out) };
                }
                let sums = Sums {
                    acc: &mut acc,
                    part: &mut part,
                    loaded: p0 > 0,
                    rows: cell.rows(),
                };
                tile_span(sums, p0..p1, chunk, a, &b[p0 * NR..p1 * NR]);
                // SAFETY: as above.
                unsafe { cell.store(&acc, out) };
            }
        }
        if p1 >= k {
            break;
        }
        p0 = p1;
    }
}

/// A tile's running sums, and scratch for a chunk's own.
struct Sums<'a> {
    acc: &'a mut Tile,
    part: &'a mut Tile,
    /// Whether `acc` holds what the slabs before left in C.
    loaded: bool,
    /// The tile's live rows.
    rows: usize,
}

/// One register tile's sum over `span` of `k` (`a`, `b`: the span's packed
/// rows), chunk by chunk, into `sums.acc`: a chunk starts from zero and is
/// added to the tiles before it; a slab that does not start a chunk (only
/// when the whole of `k` is one chunk) continues the running sum.
fn tile_span(sums: Sums, span: std::ops::Range<usize>, chunk: usize, a: &[f32], b: &[f32]) {
    let Sums {
        acc,
        part,
        loaded,
        rows,
    } = sums;
    let mut started = loaded;
    if span.is_empty() && !started {
        *acc = ZERO;
    }
    let mut p = span.start;
    while p < span.end {
        let end = ((p / chunk + 1) * chunk).min(span.end);
        let q = p - span.start;
        let (ap, bp) = (
            &a[q * MR..(end - span.start) * MR],
            &b[q * NR..(end - span.start) * NR],
        );
        if !started {
            tile(acc, Start::Zero, rows, ap, bp);
        } else if p.is_multiple_of(chunk) {
            tile(part, Start::Zero, rows, ap, bp);
            for (row, prow) in acc.iter_mut().zip(part.iter()) {
                for (v, pv) in row.iter_mut().zip(prow) {
                    *v += pv;
                }
            }
        } else {
            tile(acc, Start::Tile, rows, ap, bp);
        }
        started = true;
        p = end;
    }
}

/// A register tile's values, `MR × NR`.
pub type Tile = [[f32; NR]; MR];

/// A tile of zeros.
pub const ZERO: Tile = [[0.0; NR]; MR];

/// Where a tile's sums start.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Start {
    Zero,
    /// From the values in the tile.
    Tile,
}

/// Where a register tile sits in C (`m × n`, row-major).
struct TileAt {
    ib: usize,
    jb: usize,
    m: usize,
    n: usize,
}

impl TileAt {
    fn rows(&self) -> usize {
        MR.min(self.m - self.ib * MR)
    }

    fn cols(&self) -> usize {
        NR.min(self.n - self.jb * NR)
    }

    /// # Safety
    /// No other thread writes this tile meanwhile.
    unsafe fn load(&self, t: &mut Tile, c: &SharedMut<f32>) {
        let cols = self.cols();
        for (r, row) in t.iter_mut().enumerate().take(self.rows()) {
            let at = (self.ib * MR + r) * self.n + self.jb * NR;
            // SAFETY: the caller's.
            let src = unsafe { c.slice(at, cols) };
            if cols == NR {
                // A whole row (a fixed-size copy, kept in registers).
                *row = src.try_into().expect("NR values");
            } else {
                row[..cols].copy_from_slice(src);
            }
        }
    }

    /// # Safety
    /// No other thread reads or writes this tile meanwhile.
    unsafe fn store(&self, t: &Tile, c: &SharedMut<f32>) {
        let cols = self.cols();
        for (r, row) in t.iter().enumerate().take(self.rows()) {
            let at = (self.ib * MR + r) * self.n + self.jb * NR;
            // SAFETY: the caller's.
            store_row(row, unsafe { c.slice(at, cols) });
        }
    }
}

/// A tile row's first `dst.len()` (up to `NR`) values into `dst`: a whole
/// row as a fixed-size copy, kept in registers (a slice copy is a memcpy
/// call).
pub fn store_row(row: &[f32; NR], dst: &mut [f32]) {
    if let Ok(whole) = <&mut [f32; NR]>::try_from(&mut *dst) {
        *whole = *row;
    } else {
        dst.copy_from_slice(&row[..dst.len()]);
    }
}

/// Rows `ib·MR..` of A over `span` of `k`, interleaved:
/// `dst[(p − span.start)·MR + r] = A[ib·MR + r, p]` (zero past `m`). A
/// transposed A (its columns contiguous) copies `MR` neighbours per `p`: a
/// slab's cache lines serve the neighbouring blocks too; a row-major A
/// reads each row in order.
pub fn pack_a(a: View, m: usize, ib: usize, span: std::ops::Range<usize>, dst: &mut [f32]) {
    let i0 = ib * MR;
    let rows = MR.min(m - i0);
    if a.row == 1 && rows == MR {
        for (d, p) in dst.chunks_exact_mut(MR).zip(span) {
            d.copy_from_slice(&a.data[p * a.col + i0..][..MR]);
        }
        return;
    }
    if a.col == 1 && rows == MR {
        // The block's rows read side by side, the packed values written in
        // order.
        let row = |r: usize| &a.data[(i0 + r) * a.row + span.start..][..span.len()];
        interleave(&std::array::from_fn(row), dst);
        return;
    }
    for (q, p) in span.enumerate() {
        for r in 0..MR {
            let i = i0 + r;
            dst[q * MR + r] = if i < m { a.at(i, p) } else { 0.0 };
        }
    }
}

/// `dst[q·16 + r] = runs[r][q]` for every step `q` of `dst`: 16 × 16
/// squares transposed in registers where the CPU has AVX-512, the rest one
/// value at a time (`MR` and `NR` are both 16).
fn interleave(runs: &[&[f32]; 16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    let done = if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F (checked above).
        unsafe { x86::transpose_squares(runs, dst) }
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    for (q, d) in dst.chunks_exact_mut(16).enumerate().skip(done) {
        for (v, run) in d.iter_mut().zip(runs) {
            *v = run[q];
        }
    }
}

fn pack_b(k: usize, n: usize, b: View, dst: &mut [f32], panels: std::ops::Range<usize>) {
    let first = panels.start;
    for jb in panels {
        let panel = &mut dst[(jb - first) * k * NR..][..k * NR];
        let j0 = jb * NR;
        if b.col == 1 && j0 + NR <= n {
            // Row-major B: NR neighbours of each row.
            for (p, d) in panel.chunks_exact_mut(NR).enumerate() {
                d.copy_from_slice(&b.data[p * b.row + j0..][..NR]);
            }
            continue;
        }
        if b.row == 1 && j0 + NR <= n {
            // Transposed B: the panel's NR columns are contiguous runs,
            // read side by side as A's row-major blocks are.
            let column = |c: usize| &b.data[(j0 + c) * b.col..][..k];
            interleave(&std::array::from_fn(column), panel);
            continue;
        }
        for p in 0..k {
            for c in 0..NR {
                let j = jb * NR + c;
                panel[p * NR + c] = if j < n { b.at(p, j) } else { 0.0 };
            }
        }
    }
}

/// One register tile: `acc = start + Σ_p a[p, r] · b[p, c]` for its first
/// `rows` rows at least (rows past a tile's live ones may be summed too, or
/// left), added in order of `p` (`a` is `[k, MR]`, `b` `[k, NR]`): the same
/// bits on every path (one fused multiply-add per term). The tile is summed
/// in place: a tile is 1 KB, too much to pass by value at every call.
pub fn tile(acc: &mut Tile, start: Start, rows: usize, a: &[f32], b: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked above).
            return unsafe {
                match rows {
                    0..=4 => x86::tile_avx512::<4>(acc, start, a, b),
                    5..=8 => x86::tile_avx512::<8>(acc, start, a, b),
                    _ => x86::tile_avx512::<MR>(acc, start, a, b),
                }
            };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            return unsafe { x86::tile_avx2(acc, start, rows, a, b) };
        }
    }
    tile_generic(acc, start, rows, a, b)
}

#[cfg(target_arch = "x86_64")]
mod x86;

#[inline(always)]
fn tile_generic(acc: &mut Tile, start: Start, rows: usize, a: &[f32], b: &[f32]) {
    if start == Start::Zero {
        *acc = ZERO;
    }
    for (ap, bp) in a.chunks_exact(MR).zip(b.chunks_exact(NR)) {
        for r in 0..rows.min(MR) {
            let av = ap[r];
            for c in 0..NR {
                acc[r][c] = av.mul_add(bp[c], acc[r][c]);
            }
        }
    }
}

#[cfg(test)]
mod tests;
