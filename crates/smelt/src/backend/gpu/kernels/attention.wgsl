// Causal grouped-query attention over the KV cache, flash style: keys are
// visited in chunks of WG with an online softmax (running max m and sum l,
// the output rescaled by exp(m_old - m_new) per chunk), so scores are never
// stored whole and one kernel serves decode (1 query row) and prefill (many).
// One workgroup per (query row, head); invocation `lid` scores key j0 + lid
// and owns output dims lid, lid + WG, ... (head_dim <= 4 * WG).
//
// Params: 0 n (query rows), 1 n_heads, 2 n_kv_heads, 3 head_dim, 4 ctx,
// 5 window (0: none), 6 scale (f32), 7 softcap (f32, 0: none),
// 8 cache rows.

@group(0) @binding(1) var<storage, read_write> q: array<f32>;     // (n, n_heads * head_dim)
#ifdef KV_F16
// With shader-f16, {{KV}} is vec2<f16>, read natively; else u32 words
// unpacked in registers.
@group(0) @binding(2) var<storage, read> kc: array<{{KV}}>;       // (slots * ctx, n_kv_heads * head_dim / 2)
@group(0) @binding(3) var<storage, read> vc: array<{{KV}}>;       // (slots * ctx, n_kv_heads * head_dim / 2)
#ifdef SHADER_F16
fn kv2(w: vec2<f16>) -> vec2<f32> {
    return vec2<f32>(w);
}
#else
fn kv2(w: u32) -> vec2<f32> {
    return h2(w);
}
#endif
#else
@group(0) @binding(2) var<storage, read> kc: array<f32>;          // (slots * ctx, n_kv_heads * head_dim)
@group(0) @binding(3) var<storage, read> vc: array<f32>;          // (slots * ctx, n_kv_heads * head_dim)
#endif
@group(0) @binding(4) var<storage, read_write> pos: array<i32>;   // (n)
@group(0) @binding(5) var<storage, read_write> seq: array<i32>;   // (n)
@group(0) @binding(6) var<storage, read_write> out: array<f32>;   // (n, n_heads * head_dim)

var<workgroup> qs: array<f32, 256>;     // (head_dim) this row's query head
var<workgroup> ps: array<f32, RED_WG>;  // (WG) this chunk's probabilities
var<workgroup> w_pos: u32;
var<workgroup> w_row0: u32;

// q · k for the key head starting at element e of the cache.
fn kdot(e: u32, hd: u32) -> f32 {
    var s = 0.0;
#ifdef KV_F16
    for (var d = 0u; d < hd; d += 2u) {
        let k2 = kv2(kc[(e + d) / 2u]);
        s += qs[d] * k2.x + qs[d + 1u] * k2.y;
    }
#else
    for (var d = 0u; d < hd; d++) {
        s += qs[d] * kc[e + d];
    }
#endif
    return s;
}

fn vval(e: u32) -> f32 {
#ifdef KV_F16
    return kv2(vc[e / 2u])[e % 2u];
#else
    return vc[e];
#endif
}

@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wg_index(wid, nwg);
    let nh = pu(1);
    if (g >= pu(0) * nh) {
        return;
    }
    let i = g / nh;
    let h = g % nh;
    let hd = pu(3);
    let ctx = pu(4);
    let kvh = h / (nh / pu(2));
    let kv_stride = pu(2) * hd;
    let qb = i * nh * hd + h * hd;
    let lid = ln.lid;
    if (lid == 0u) {
        // Positions and slots come from storage, so they are not uniform to
        // the compiler; broadcast them to make the chunk loop uniform.
        // Out-of-range values are clamped so reads stay in the cache.
        w_pos = min(u32(max(pos[i], 0)), ctx - 1u);
        w_row0 = min(u32(max(seq[i], 0)) * ctx, pu(8) - ctx);
    }
    for (var d = lid; d < hd; d += RED_WG) {
        qs[d] = q[qb + d];
    }
    let p = workgroupUniformLoad(&w_pos);
    let row0 = workgroupUniformLoad(&w_row0);
    var start = 0u;
    let win = pu(5);
    if (win > 0u && p + 1u > win) {
        start = p + 1u - win;
    }
    let scale = pf(6);
    let cap = pf(7);
    var m = NEG_BIG;
    var l = 0.0;
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var j0 = start; j0 <= p; j0 += RED_WG) {
        let j = j0 + lid;
        var sc = NEG_BIG;
        if (j <= p) {
            sc = kdot((row0 + j) * kv_stride + kvh * hd, hd) * scale;
            if (cap > 0.0) {
                let u = clamp(sc / cap, -15.0, 15.0);
                let e = exp(2.0 * u);
                sc = cap * (e - 1.0) / (e + 1.0);
            }
        }
        let m_new = max(m, wg_max(sc, ln));
        var pj = 0.0;
        if (j <= p) {
            pj = exp(sc - m_new);
        }
        ps[lid] = pj;
        let alpha = exp(m - m_new);
        // wg_sum's barriers also publish ps to the workgroup.
        l = l * alpha + wg_sum(pj, ln);
        let cnt = min(RED_WG, p + 1u - j0);
        for (var c = 0u; c < 4u; c++) {
            let d = lid + c * RED_WG;
            if (d < hd) {
                var a = acc[c] * alpha;
                for (var jj = 0u; jj < cnt; jj++) {
                    a += ps[jj] * vval((row0 + j0 + jj) * kv_stride + kvh * hd + d);
                }
                acc[c] = a;
            }
        }
        m = m_new;
        workgroupBarrier();
    }
    for (var c = 0u; c < 4u; c++) {
        let d = lid + c * RED_WG;
        if (d < hd) {
            out[qb + d] = acc[c] / l;
        }
    }
}
