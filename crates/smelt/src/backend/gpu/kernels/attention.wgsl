// Causal grouped-query attention over the KV cache, flash style: an online
// softmax over the keys in position order (running max m and sum l, the
// output rescaled by exp(m_old - m_new) when the max grows), so scores are
// never stored whole. With an F16 cache it rounds as ggml's CPU flash
// attention does, which llama.cpp's numbers follow: the query to f16, and
// the value accumulator to f16 after every update (`rh`).
// One workgroup per (query row, head) for decode: invocation `lid` scores
// key j0 + lid of each chunk of WG keys, then every invocation walks the
// chunk's scores in order for its output dims lid, lid + WG, ...
// (head_dim <= 4 * WG).
//
// With the ROWS define (prefill), one invocation per (head, query row)
// instead: it walks its keys alone with the same online softmax, the query
// and the output row in registers ({{HD}}, the head size, is a constant),
// and no barriers. Neighbouring invocations are neighbouring rows of one
// head, so they read the same keys.
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

// Rounds to the cache type: f16 for an F16 cache.
fn rh(v: f32) -> f32 {
#ifdef KV_F16
    return unpack2x16float(pack2x16float(vec2<f32>(v, 0.0))).x;
#else
    return v;
#endif
}

fn rh4(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(rh(v.x), rh(v.y), rh(v.z), rh(v.w));
}

#ifdef ROWS
const HD4: u32 = {{HD}}u / 4u;

// 4 cache values at element e (a multiple of 4).
fn k4(e: u32) -> vec4<f32> {
#ifdef KV_F16
    return vec4<f32>(kv2(kc[e / 2u]), kv2(kc[e / 2u + 1u]));
#else
    return vec4<f32>(kc[e], kc[e + 1u], kc[e + 2u], kc[e + 3u]);
#endif
}

fn v4(e: u32) -> vec4<f32> {
#ifdef KV_F16
    return vec4<f32>(kv2(vc[e / 2u]), kv2(vc[e / 2u + 1u]));
#else
    return vec4<f32>(vc[e], vc[e + 1u], vc[e + 2u], vc[e + 3u]);
#endif
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = gid.x + gid.y * nwg.x * 64u;
    let n = pu(0);
    let nh = pu(1);
    if (g >= n * nh) {
        return;
    }
    let h = g / n;
    let i = g % n;
    let hd = HD4 * 4u;
    let ctx = pu(4);
    let kvh = h / (nh / pu(2));
    let kv_stride = pu(2) * hd;
    // Out-of-range positions and slots are clamped so reads stay in the cache.
    let p = min(u32(max(pos[i], 0)), ctx - 1u);
    let row0 = min(u32(max(seq[i], 0)) * ctx, pu(8) - ctx);
    var start = 0u;
    let win = pu(5);
    if (win > 0u && p + 1u > win) {
        start = p + 1u - win;
    }
    let scale = pf(6);
    let cap = pf(7);
    let qb = i * nh * hd + h * hd;
    var qv: array<vec4<f32>, HD4>;
    var acc: array<vec4<f32>, HD4>;
    for (var c = 0u; c < HD4; c++) {
        qv[c] = rh4(vec4<f32>(q[qb + 4u * c], q[qb + 4u * c + 1u], q[qb + 4u * c + 2u], q[qb + 4u * c + 3u]));
        acc[c] = vec4<f32>(0.0);
    }
    var m = NEG_BIG;
    var l = 0.0;
    for (var j = start; j <= p; j++) {
        let kb = (row0 + j) * kv_stride + kvh * hd;
        var s = 0.0;
        for (var c = 0u; c < HD4; c++) {
            s += dot(qv[c], k4(kb + 4u * c));
        }
        s *= scale;
        if (cap > 0.0) {
            let u = clamp(s / cap, -15.0, 15.0);
            let e = exp(2.0 * u);
            s = cap * (e - 1.0) / (e + 1.0);
        }
        var ms = 1.0;
        var vs = 1.0;
        if (s > m) {
            ms = exp(m - s);
            m = s;
            for (var c = 0u; c < HD4; c++) {
                acc[c] = rh4(acc[c] * ms);
            }
        } else {
            vs = exp(s - m);
        }
        for (var c = 0u; c < HD4; c++) {
            acc[c] = rh4(fma(v4(kb + 4u * c), vec4<f32>(vs), acc[c]));
        }
        l = l * ms + vs;
    }
    for (var c = 0u; c < HD4; c++) {
        let o = acc[c] / l;
        out[qb + 4u * c] = o.x;
        out[qb + 4u * c + 1u] = o.y;
        out[qb + 4u * c + 2u] = o.z;
        out[qb + 4u * c + 3u] = o.w;
    }
}
#else
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
        qs[d] = rh(q[qb + d]);
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
        ps[lid] = sc;
        workgroupBarrier();
        // Every invocation walks the chunk's scores in order (the same
        // running max and sum in each), updating its own output dims.
        let cnt = min(RED_WG, p + 1u - j0);
        for (var jj = 0u; jj < cnt; jj++) {
            let s = ps[jj];
            var ms = 1.0;
            var vs = 1.0;
            if (s > m) {
                ms = exp(m - s);
                m = s;
            } else {
                vs = exp(s - m);
            }
            let vb = (row0 + j0 + jj) * kv_stride + kvh * hd;
            for (var c = 0u; c < 4u; c++) {
                let d = lid + c * RED_WG;
                if (d < hd) {
                    acc[c] = rh(fma(vval(vb + d), vs, rh(acc[c] * ms)));
                }
            }
            l = l * ms + vs;
        }
        workgroupBarrier();
    }
    for (var c = 0u; c < 4u; c++) {
        let d = lid + c * RED_WG;
        if (d < hd) {
            out[qb + d] = acc[c] / l;
        }
    }
}
#endif
