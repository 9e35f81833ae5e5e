// Legacy quants (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) times Q8-rounded activations
// (quantize.wgsl), out[t, r] = dot(w[r], x[t]), in ggml's arithmetic bit for
// bit (see exact.wgsl for why): per 32-value block, 8 integer lanes, lane l
// summing the products of values 4l..4l+3 (what AVX2's maddubs/madd pair
// gives; here one dot4I8Packed); per lane an f32 chain
// acc[l] = fmaf(d_w · d_x, lane, acc[l]) over the blocks in order; then
// ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7)), plus,
// for Q4_1 and Q5_1, the chain min = fmaf(m_w, s_x, min) over the blocks.
//
// Each lane's chain is sequential in k, so k is never split: a quad of 4
// invocations owns a weight row, invocation j the lanes j and j + 4 (one
// qs word of a Q4 block holds both), and each invocation carries TT tokens
// so that a weight word is read once for all of them. A workgroup is 16
// rows; workgroups tile rows × groups of TT tokens. The quad meets in two
// xor-shuffles (or workgroup memory). Its workgroups along m are
// ceil(m / 16).

struct Params {
    m: u32,          // rows of w
    k: u32,          // values per row
    n: u32,          // tokens
    row_bytes: u32,  // w's row stride
    groups_m: u32,   // workgroups along m (rows)
    out_stride: u32, // out's row stride: m, or more for a part of a split weight
    out_col0: u32,   // out's first column
    zero: u32,       // 0 (exact.wgsl's `opaque`)
}
@group(0) @binding(0) var<uniform> P: Params;

@group(0) @binding(1) var<storage, read> wq: array<u32>;          // (m, k) in TYPE
@group(0) @binding(2) var<storage, read> xq: array<u32>;          // (n, k / 4) quants, 4 per word
@group(0) @binding(3) var<storage, read> xd: array<f32>;          // (n, k / 32) scales
@group(0) @binding(4) var<storage, read_write> out: array<f32>;   // (n, m)
#ifdef HAS_MIN
@group(0) @binding(5) var<storage, read> xs: array<f32>;          // (n, k / 32) f16(d · Σq)
#endif

const TT: u32 = {{TT}}u;
const ROWS: u32 = 16u;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wg_index(wid, nwg);
    let m = P.m;
    let k = P.k;
    let n = P.n;
    let groups = P.groups_m;
    let t0 = (g / groups) * TT;
    // Whole workgroups leave together (before any barrier); rows past m
    // compute row m - 1 and store nothing.
    if (t0 >= n) {
        return;
    }
    let row = (g % groups) * ROWS + lid / 4u;
    let j = lid % 4u;
    let rb = min(row, m - 1u) * P.row_bytes;
    let nb = k / 32u;
    let nt = min(TT, n - t0);
    var acc_lo: array<f32, TT>;
    var acc_hi: array<f32, TT>;
    var mins: array<f32, TT>;
    for (var t = 0u; t < TT; t++) {
        acc_lo[t] = 0.0;
        acc_hi[t] = 0.0;
        mins[t] = 0.0;
    }
    for (var b = 0u; b < nb; b++) {
        let bo = rb + b * BLOCK;
        let w = lanes(bo, j);
        let dw = rdf16(bo);
#ifdef HAS_MIN
        let mw = rdf16(bo + 2u);
#endif
        for (var t = 0u; t < nt; t++) {
            let xt = (t0 + t) * nb + b;
            let d = dw * xd[xt];
            acc_lo[t] = fmaf(d, f32(dot4I8Packed(w.x, xq[8u * xt + j])), acc_lo[t]);
            acc_hi[t] = fmaf(d, f32(dot4I8Packed(w.y, xq[8u * xt + j + 4u])), acc_hi[t]);
#ifdef HAS_MIN
            mins[t] = fmaf(mw, xs[xt], mins[t]);
#endif
        }
    }
    for (var t = 0u; t < nt; t++) {
        let s = quad_sum(acc_lo[t] + acc_hi[t], lid);
        if (j == 0u && row < m) {
            out[(t0 + t) * P.out_stride + P.out_col0 + row] = s + mins[t];
        }
    }
}
