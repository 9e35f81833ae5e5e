// Mat-vec: out[t, r] = dot(w[r], x[t]) for a few tokens t. Decode is
// memory-bound, so weight rows are read once as u32 words and decoded in
// registers (quant.wgsl). One workgroup per (token, 4 output rows): each
// invocation walks groups of 8 values of the 4 rows, and the 4 partial sums
// meet in one vec4 reduction (subgroups first where the adapter has them).
//
// Params: 0 m (rows of w), 1 k (cols), 2 n (tokens), 3 row_bytes,
// 4 row blocks (ceil(m / 4)).

@group(0) @binding(1) var<storage, read> wq: array<{{WQ}}>;          // (m, k) in TYPE
@group(0) @binding(2) var<storage, read_write> x: array<f32>;     // (n, k)
@group(0) @binding(3) var<storage, read_write> out: array<f32>;   // (n, m)

const NR: u32 = 4u;

fn x4(o: u32) -> vec4<f32> {
    return vec4<f32>(x[o], x[o + 1u], x[o + 2u], x[o + 3u]);
}

@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wg_index(wid, nwg);
    let m = pu(0);
    let k = pu(1);
    let blocks = pu(4);
    if (g >= blocks * pu(2)) {
        return;
    }
    let r0 = (g % blocks) * NR;
    let t = g / blocks;
    let row_bytes = pu(3);
    let xb = t * k;
    // Rows past m (the last block) repeat row m - 1 and are not stored.
    var rb: array<u32, 4>;
    for (var i = 0u; i < NR; i++) {
        rb[i] = min(r0 + i, m - 1u) * row_bytes;
    }
    var acc = vec4<f32>(0.0);
    for (var i = ln.lid; i < k / 8u; i += RED_WG) {
        let o = xb + i * 8u;
        let xa = x4(o);
        let xc = x4(o + 4u);
        for (var r = 0u; r < NR; r++) {
            let v = dq8(rb[r], i);
            acc[r] += dot(v.a, xa) + dot(v.b, xc);
        }
    }
#ifdef PLAIN
    for (var c = (k / 8u) * 8u + ln.lid; c < k; c += RED_WG) {
        for (var r = 0u; r < NR; r++) {
            acc[r] += dq1(rb[r], c) * x[xb + c];
        }
    }
#endif
    let total = wg_sum4(acc, ln);
    if (ln.lid == 0u) {
        for (var r = 0u; r < NR; r++) {
            if (r0 + r < m) {
                out[t * m + r0 + r] = total[r];
            }
        }
    }
}
