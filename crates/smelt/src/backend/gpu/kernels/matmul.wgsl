// Tiled matmul for prefill: out[t, r] = dot(w[r], x[t]) for n tokens.
// Each workgroup computes a 64 (rows of w) × 64 (tokens) tile of out,
// stepping k by 32: the weight tile is decoded from its GGUF blocks into
// workgroup memory once per step (one group of 8 values per invocation),
// then every invocation accumulates a 4 × 4 block in registers. Tiles are
// stored as vec4s along rows and tokens, so the inner loop does two vec4
// loads per four vec4 multiply-adds.
//
// Params: 0 m, 1 k, 2 n, 3 row_bytes, 4 tiles along m.

@group(0) @binding(1) var<storage, read> wq: array<{{WQ}}>;          // (m, k) in TYPE
@group(0) @binding(2) var<storage, read_write> x: array<f32>;     // (n, k)
@group(0) @binding(3) var<storage, read_write> out: array<f32>;   // (n, m)

const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 32u;

var<workgroup> ws: array<vec4<f32>, 512>; // (TK, TM / 4): rows 4i..4i+4 at column kk
var<workgroup> xs: array<vec4<f32>, 512>; // (TK, TN / 4): tokens 4j..4j+4 at column kk

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
    // What it loads: 8 values (columns wc..wc+8) of tile row/token lid / 4.
    let lr = lid / 4u;
    let wc = (lid % 4u) * 8u;
    let wr = r0 + lr;
    let xt = t0 + lr;
    var acc: array<vec4<f32>, 4>;
    for (var k0 = 0u; k0 < k; k0 += TK) {
#ifdef PLAIN
        for (var e = 0u; e < 8u; e++) {
            var v = 0.0;
            if (wr < m && k0 + wc + e < k) {
                v = dq1(wr * row_bytes, k0 + wc + e);
            }
            ws[(wc + e) * 16u + lr / 4u][lr % 4u] = v;
        }
#else
        var v = V8(vec4<f32>(0.0), vec4<f32>(0.0));
        if (wr < m) {
            v = dq8(wr * row_bytes, (k0 + wc) / 8u);
        }
        for (var e = 0u; e < 4u; e++) {
            ws[(wc + e) * 16u + lr / 4u][lr % 4u] = v.a[e];
            ws[(wc + 4u + e) * 16u + lr / 4u][lr % 4u] = v.b[e];
        }
#endif
        for (var e = 0u; e < 8u; e++) {
            var v = 0.0;
            if (xt < n && k0 + wc + e < k) {
                v = x[xt * k + k0 + wc + e];
            }
            xs[(wc + e) * 16u + lr / 4u][lr % 4u] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk++) {
            let a = ws[kk * 16u + ty];
            let b = xs[kk * 16u + tx];
            acc[0] += a * b.x;
            acc[1] += a * b.y;
            acc[2] += a * b.z;
            acc[3] += a * b.w;
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
