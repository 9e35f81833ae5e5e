// The experts' matmuls of a mixture of experts (ggml's mul_mat_id):
// out[p, r] = dot(w[ids[p], r], x[p / x_div]) for every pair p = t·K + j of
// a token t and its j-th chosen expert, all pairs in one dispatch. w stacks
// the experts' (m, k) weights, (n_expert·m, k), read in place: expert e's
// row r is row e·m + r of the stack. x has a row per token (x_div = K: each
// expert reads its token) or per pair (x_div = 1).
//
// Each pair is the decode mat-vec of its expert, so prefill is more
// workgroups of the same kernel:
// - f32 activations (or ggml's f32/f16/Q8_K rounding of them): matvec.wgsl's
//   form, a workgroup per (pair, 4 rows), weights decoded by quant.wgsl;
// - Q8 (ggml's mode, legacy quants): matmul_q8.wgsl's integer lanes, bit for
//   bit ggml's CPU, a quad of invocations per row, 16 rows a workgroup.
// An id outside 0..n_expert is clamped (the CPU refuses it; a kernel cannot,
// and it must not read outside w).

struct Params {
    m: u32,          // rows of one expert
    k: u32,          // values per row
    pairs: u32,      // tokens × K
    row_bytes: u32,  // w's row stride
    groups_m: u32,   // workgroups along m
    x_div: u32,      // pairs per row of x: K or 1
    n_expert: u32,   // experts in w
    zero: u32,       // 0 (exact.wgsl's `opaque`)
}
@group(0) @binding(0) var<uniform> P: Params;

@group(0) @binding(1) var<storage, read> wq: array<{{WQ}}>;       // (n_expert · m, k) in TYPE
#ifdef Q8_BLOCKS
@group(0) @binding(2) var<storage, read> xq: array<u32>;          // (rows of x, k / 4) quants, 4 per word
@group(0) @binding(3) var<storage, read> xd: array<f32>;          // (rows of x, k / 32) scales
@group(0) @binding(4) var<storage, read> ids: array<i32>;         // (pairs) expert of each pair
@group(0) @binding(5) var<storage, read_write> out: array<f32>;   // (pairs, m)
#ifdef HAS_MIN
@group(0) @binding(6) var<storage, read> xs: array<f32>;          // (rows of x, k / 32) f16(d · Σq)
#endif
#else
@group(0) @binding(2) var<storage, read> x: array<f32>;           // (rows of x, k)
@group(0) @binding(3) var<storage, read> ids: array<i32>;         // (pairs) expert of each pair
@group(0) @binding(4) var<storage, read_write> out: array<f32>;   // (pairs, m)
#endif

// The first row of pair p's expert in the stack.
fn expert_row0(p: u32) -> u32 {
    return u32(clamp(ids[p], 0, i32(P.n_expert) - 1)) * P.m;
}

#ifdef Q8_BLOCKS
const ROWS: u32 = 16u;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wg_index(wid, nwg);
    let m = P.m;
    let groups = P.groups_m;
    // Whole workgroups leave together (before any barrier); rows past m
    // compute row m - 1 and store nothing.
    if (g >= groups * P.pairs) {
        return;
    }
    let p = g / groups;
    let row = (g % groups) * ROWS + lid / 4u;
    let j = lid % 4u;
    let rb = (expert_row0(p) + min(row, m - 1u)) * P.row_bytes;
    let nb = P.k / 32u;
    let xt0 = (p / P.x_div) * nb;
    var acc_lo = 0.0;
    var acc_hi = 0.0;
    var mins = 0.0;
    for (var b = 0u; b < nb; b++) {
        let bo = rb + b * BLOCK;
        let w = lanes(bo, j);
        let dw = rdf16(bo);
        let xt = xt0 + b;
        let d = dw * xd[xt];
        acc_lo = fmaf(d, f32(dot4I8Packed(w.x, xq[8u * xt + j])), acc_lo);
        acc_hi = fmaf(d, f32(dot4I8Packed(w.y, xq[8u * xt + j + 4u])), acc_hi);
#ifdef HAS_MIN
        mins = fmaf(rdf16(bo + 2u), xs[xt], mins);
#endif
    }
    let s = quad_sum(acc_lo + acc_hi, lid);
    if (j == 0u && row < m) {
        out[p * m + row] = s + mins;
    }
}
#else
const NR: u32 = 4u;

fn x4(o: u32) -> vec4<f32> {
    return vec4<f32>(x[o], x[o + 1u], x[o + 2u], x[o + 3u]);
}

@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wg_index(wid, nwg);
    let m = P.m;
    let k = P.k;
    let blocks = P.groups_m;
    if (g >= blocks * P.pairs) {
        return;
    }
    let r0 = (g % blocks) * NR;
    let p = g / blocks;
    let xb = (p / P.x_div) * k;
    let e0 = expert_row0(p);
    // Rows past m (the last block) repeat row m - 1 and are not stored.
    var rb: array<u32, 4>;
    for (var i = 0u; i < NR; i++) {
        rb[i] = (e0 + min(r0 + i, m - 1u)) * P.row_bytes;
    }
    let total = sweep_rows(rb, xb, k, ln);
    if (ln.lid == 0u) {
        for (var r = 0u; r < NR; r++) {
            if (r0 + r < m) {
                out[p * m + r0 + r] = total[r];
            }
        }
    }
}
#endif
