// Tiled matmul for prefill: out[t, r] = dot(w[r], x[t]) for n tokens.
// Each workgroup computes a 64 (rows of w) × 64 (tokens) tile of out,
// stepping k by 32: the weight tile is decoded from its GGUF blocks into
// workgroup memory once per step (one group of 8 values per invocation),
// then every invocation accumulates a 4 × 4 block in registers.
//
// Params: 0 m, 1 k, 2 n, 3 row_bytes, 4 tiles along m.

@group(0) @binding(1) var<storage, read> wq: array<{{WQ}}>;          // (m, k) in TYPE
@group(0) @binding(2) var<storage, read_write> x: array<f32>;     // (n, k)
@group(0) @binding(3) var<storage, read_write> out: array<f32>;   // (n, m)

const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 32u;

var<workgroup> ws: array<f32, 2048>; // (TM, TK)
var<workgroup> xs: array<f32, 2048>; // (TN, TK)

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let m = pu(0);
    let k = pu(1);
    let n = pu(2);
    let row_bytes = pu(3);
    let g = wg_index(wid, nwg);
    let r0 = (g % pu(4)) * TM;
    let t0 = (g / pu(4)) * TN;
    if (t0 >= n) {
        return;
    }
    // This invocation's 4 × 4 block: rows r0 + 4*ty.., tokens t0 + 4*tx..
    let tx = lid % 16u;
    let ty = lid / 16u;
    var acc: array<vec4<f32>, 4>;
    for (var k0 = 0u; k0 < k; k0 += TK) {
        // Weight tile: invocation lid decodes 8 values of row lid / 4.
        let wr = r0 + lid / 4u;
        let wc = (lid % 4u) * 8u;
#ifdef PLAIN
        for (var e = 0u; e < 8u; e++) {
            var v = 0.0;
            if (wr < m && k0 + wc + e < k) {
                v = dq1(wr * row_bytes, k0 + wc + e);
            }
            ws[(lid / 4u) * TK + wc + e] = v;
        }
#else
        var v = V8(vec4<f32>(0.0), vec4<f32>(0.0));
        if (wr < m) {
            v = dq8(wr * row_bytes, (k0 + wc) / 8u);
        }
        for (var e = 0u; e < 4u; e++) {
            ws[(lid / 4u) * TK + wc + e] = v.a[e];
            ws[(lid / 4u) * TK + wc + 4u + e] = v.b[e];
        }
#endif
        // Activation tile: 8 values of token lid / 4.
        let xt = t0 + lid / 4u;
        for (var e = 0u; e < 8u; e++) {
            var v = 0.0;
            if (xt < n && k0 + wc + e < k) {
                v = x[xt * k + k0 + wc + e];
            }
            xs[(lid / 4u) * TK + wc + e] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk++) {
            let a = vec4<f32>(
                ws[(4u * ty) * TK + kk],
                ws[(4u * ty + 1u) * TK + kk],
                ws[(4u * ty + 2u) * TK + kk],
                ws[(4u * ty + 3u) * TK + kk],
            );
            for (var j = 0u; j < 4u; j++) {
                acc[j] += a * xs[(4u * tx + j) * TK + kk];
            }
        }
        workgroupBarrier();
    }
    for (var j = 0u; j < 4u; j++) {
        let t = t0 + 4u * tx + j;
        for (var i = 0u; i < 4u; i++) {
            let r = r0 + 4u * ty + i;
            if (t < n && r < m) {
                out[t * m + r] = acc[j][i];
            }
        }
    }
}
