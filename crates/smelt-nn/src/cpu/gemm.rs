//! Matrix products on the CPU: `C[m, n] = Σ_k A[m, k] · B[k, n]`, each
//! output summed over `k` in order from zero with a separate multiply and
//! add (the GPU kernels' order), vectorized across `n`: panels of B packed
//! `NR` columns wide, blocks of A `MR` rows tall, an `MR × NR` register
//! tile per step of `k`.
//!
//! Operands are strided views, so transposes cost nothing: element
//! `(i, p)` of A is `a[i·row + p·col]`.

use crate::cpu::Cx;
use smelt::backend::cpu::pool::SharedMut;

const MR: usize = 4;
const NR: usize = 16;

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
    k: usize,
    n: usize,
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

    fn panel(&self, jb: usize) -> &[f32] {
        &self.panels[jb * self.k * NR..][..self.k * NR]
    }
}

/// `c (m × n, row-major) = a (m × k) · b (k × n)` on one thread.
pub fn gemm_serial(m: usize, n: usize, k: usize, a: View, b: View, c: &mut [f32]) {
    serial_packed(m, a, &PackedB::new(k, n, b), c);
}

fn serial_packed(m: usize, a: View, b: &PackedB, c: &mut [f32]) {
    let (n, k) = (b.n, b.k);
    let mut apack = vec![0f32; k * MR];
    for ib in 0..m.div_ceil(MR) {
        pack_a(k, m, a, ib, &mut apack);
        for jb in 0..n.div_ceil(NR) {
            let tile = tile(k, &apack, b.panel(jb));
            store(&tile, ib, jb, m, n, |i, j, v| c[i * n + j] = v);
        }
    }
}

/// Whether a product is too small to share out between threads.
fn serial(cx: &Cx, m: usize, n: usize, k: usize) -> bool {
    m * n * k < 32 * 1024 || cx.pool.n_threads() == 1
}

/// `c (m × n, row-major) = a (m × k) · b (k × n)`, on the pool's threads
/// in tiles of `MR` rows × `4·NR` columns.
pub fn gemm(cx: &mut Cx, m: usize, n: usize, k: usize, a: View, b: View, c: &mut [f32]) {
    let packed = if serial(cx, m, n, k) {
        PackedB::new(k, n, b)
    } else {
        PackedB::new_parallel(cx, k, n, b)
    };
    gemm_packed(cx, m, a, &packed, c);
}

/// `c (m × n) = a (m × k) · b` with B already packed.
pub fn gemm_packed(cx: &mut Cx, m: usize, a: View, b: &PackedB, c: &mut [f32]) {
    let (n, k) = (b.n, b.k);
    let panels = n.div_ceil(NR);
    if serial(cx, m, n, k) {
        return serial_packed(m, a, b, c);
    }
    const GROUP: usize = 4;
    let groups = panels.div_ceil(GROUP);
    let blocks = m.div_ceil(MR);
    let out = SharedMut::new(c);
    cx.pool.for_each(blocks * groups, 1, &|_, r| {
        let mut apack = vec![0f32; k * MR];
        for t in r {
            let (ib, gi) = (t / groups, t % groups);
            pack_a(k, m, a, ib, &mut apack);
            for jb in gi * GROUP..((gi + 1) * GROUP).min(panels) {
                let tile = tile(k, &apack, b.panel(jb));
                store(&tile, ib, jb, m, n, |i, j, v| {
                    // SAFETY: each (block, panel) tile's elements are written
                    // by exactly one task.
                    unsafe { out.slice(i * n + j, 1)[0] = v };
                });
            }
        }
    });
}

fn pack_a(k: usize, m: usize, a: View, ib: usize, dst: &mut [f32]) {
    for p in 0..k {
        for r in 0..MR {
            let i = ib * MR + r;
            dst[p * MR + r] = if i < m { a.at(i, p) } else { 0.0 };
        }
    }
}

fn pack_b(k: usize, n: usize, b: View, dst: &mut [f32], panels: std::ops::Range<usize>) {
    let first = panels.start;
    for jb in panels {
        let panel = &mut dst[(jb - first) * k * NR..][..k * NR];
        for p in 0..k {
            for c in 0..NR {
                let j = jb * NR + c;
                panel[p * NR + c] = if j < n { b.at(p, j) } else { 0.0 };
            }
        }
    }
}

fn store(
    tile: &[[f32; NR]; MR],
    ib: usize,
    jb: usize,
    m: usize,
    n: usize,
    mut put: impl FnMut(usize, usize, f32),
) {
    for (r, row) in tile.iter().enumerate() {
        let i = ib * MR + r;
        if i >= m {
            break;
        }
        for (c, &v) in row.iter().enumerate() {
            let j = jb * NR + c;
            if j >= n {
                break;
            }
            put(i, j, v);
        }
    }
}

/// One register tile: `Σ_p a[p, r] · b[p, c]` in order of `p`.
fn tile(k: usize, a: &[f32], b: &[f32]) -> [[f32; NR]; MR] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked above).
        return unsafe { tile_avx2(k, a, b) };
    }
    tile_generic(k, a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn tile_avx2(k: usize, a: &[f32], b: &[f32]) -> [[f32; NR]; MR] {
    tile_generic(k, a, b)
}

#[inline(always)]
fn tile_generic(k: usize, a: &[f32], b: &[f32]) -> [[f32; NR]; MR] {
    let mut acc = [[0f32; NR]; MR];
    for (ap, bp) in a[..k * MR]
        .chunks_exact(MR)
        .zip(b[..k * NR].chunks_exact(NR))
    {
        for r in 0..MR {
            let av = ap[r];
            for c in 0..NR {
                // Rust does not contract this into a fused multiply-add.
                acc[r][c] += av * bp[c];
            }
        }
    }
    acc
}
