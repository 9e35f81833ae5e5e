// The merge of a split decode attention (attention.wgsl's SPLIT): a
// workgroup per (row, head) rescales its {{PARTS}} parts to their common
// max M, exp(m_s - M) each, and divides the sum of their outputs by the
// sum of their l_s so rescaled. A part with no keys has m = NEG_BIG and
// l = 0: its weight is 0. With Q8, the output is also rounded to Q8 blocks
// for the matmul after it, as attention_decode.wgsl's Q8 does.

@group(0) @binding(1) var<storage, read> parts: array<f32>;      // (n * n_heads * PARTS, head_dim + 2)
@group(0) @binding(2) var<storage, read_write> out: array<f32>;  // (n, n_heads * head_dim)
#ifdef Q8
@group(0) @binding(3) var<storage, read_write> xq: array<u32>;   // (n, n_heads * head_dim / 4) quants, 4 per word
@group(0) @binding(4) var<storage, read_write> xd: array<f32>;   // (n, n_heads * head_dim / 32) f16(d), widened
@group(0) @binding(5) var<storage, read_write> xs: array<f32>;   // (n, n_heads * head_dim / 32) f16(d · Σq), widened

var<workgroup> qs: array<f32, 256>;    // (head_dim) the output head
#endif

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wg_index(wid, nwg);
    if (g >= P.n * P.n_heads) {
        return;
    }
    let hd = P.head_dim;
    let stride = hd + 2u;
    let pb = g * {{PARTS}}u * stride;
    var top = NEG_BIG;
    for (var s = 0u; s < {{PARTS}}u; s++) {
        top = max(top, parts[pb + s * stride + hd]);
    }
    var w: array<f32, {{PARTS}}>;
    var l = 0.0;
    for (var s = 0u; s < {{PARTS}}u; s++) {
        w[s] = exp(parts[pb + s * stride + hd] - top);
        l = fma(parts[pb + s * stride + hd + 1u], w[s], l);
    }
    var inv = 0.0;
    if (l != 0.0) {
        inv = 1.0 / l;
    }
    // Output row i, head h starts at (i · n_heads + h) · head_dim.
    let ob = g * hd;
    for (var d = lid; d < hd; d += {{WG}}u) {
        var t = 0.0;
        for (var s = 0u; s < {{PARTS}}u; s++) {
            t = fma(parts[pb + s * stride + d], w[s], t);
        }
        out[ob + d] = t * inv;
#ifdef Q8
        qs[d] = t * inv;
#endif
    }
#ifdef Q8
    q8_store_head(lid, hd, true, ob / 4u);
#endif
}
