// Mat-vec: out[t, r] = dot(w[r], x[t]) for a few tokens t. Decode is
// memory-bound, so weight rows are read once as u32 words and decoded in
// registers (quant.wgsl). One workgroup per (token, 4 output rows): each
// invocation walks groups of 8 values of the 4 rows, and the 4 partial sums
// meet in one vec4 reduction (subgroups first where the adapter has them).
// Its workgroups along m are ceil(m / 4).

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

@group(0) @binding(1) var<storage, read> wq: array<{{WQ}}>;          // (m, k) in TYPE
@group(0) @binding(2) var<storage, read> x: array<f32>;           // (n, k)
@group(0) @binding(3) var<storage, read_write> out: array<f32>;   // (n, m)

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
    if (g >= blocks * P.n) {
        return;
    }
    let tg = token_group(g, P.n);
    let r0 = tg.group * NR;
    let t = tg.t;
    let row_bytes = P.row_bytes;
    let xb = t * k;
    // Rows past m (the last block) repeat row m - 1 and are not stored.
    var rb: array<u32, 4>;
    for (var i = 0u; i < NR; i++) {
        rb[i] = min(r0 + i, m - 1u) * row_bytes;
    }
    let total = sweep_rows(rb, xb, k, ln);
    if (ln.lid == 0u) {
        for (var r = 0u; r < NR; r++) {
            if (r0 + r < m) {
                out[t * P.out_stride + P.out_col0 + r0 + r] = total[r];
            }
        }
    }
}
