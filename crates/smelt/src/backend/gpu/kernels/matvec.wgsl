// Mat-vec: out[t, r] = dot(w[r], x[t]) for a few tokens t. Decode is
// memory-bound, so the weight row is read once as u32 words and decoded in
// registers (quant.wgsl); one workgroup per (token, output row), and the
// partial sums meet in a subgroup reduction where the adapter has one.
//
// Params: 0 m (rows of w), 1 k (cols), 2 n (tokens), 3 row_bytes.

@group(0) @binding(1) var<storage, read> wq: array<{{WQ}}>;          // (m, k) in TYPE
@group(0) @binding(2) var<storage, read_write> x: array<f32>;     // (n, k)
@group(0) @binding(3) var<storage, read_write> out: array<f32>;   // (n, m)

fn x4(o: u32) -> vec4<f32> {
    return vec4<f32>(x[o], x[o + 1u], x[o + 2u], x[o + 3u]);
}

@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wg_index(wid, nwg);
    let m = pu(0);
    let k = pu(1);
    if (g >= m * pu(2)) {
        return;
    }
    let r = g % m;
    let t = g / m;
    let rb = r * pu(3);
    let xb = t * k;
    var acc = 0.0;
    for (var i = ln.lid; i < k / 8u; i += RED_WG) {
        let v = dq8(rb, i);
        let o = xb + i * 8u;
        acc += dot(v.a, x4(o)) + dot(v.b, x4(o + 4u));
    }
#ifdef PLAIN
    for (var c = (k / 8u) * 8u + ln.lid; c < k; c += RED_WG) {
        acc += dq1(rb, c) * x[xb + c];
    }
#endif
    let total = wg_sum(acc, ln);
    if (ln.lid == 0u) {
        out[t * m + r] = total;
    }
}
