// Causal grouped-query attention over the KV cache, flash style: an online
// softmax over the keys in position order (running max m and sum l, the
// output rescaled by exp(m_old - m_new) when the max grows), so scores are
// never stored whole. It computes what ggml's CPU flash attention computes
// (as the fast CPU backend does, exact.wgsl says why): with an F16 cache the
// query rounded to f16 and the value accumulator rounded to f16 after every
// update (`rh`); q·k summed in ggml's order (`kdot`); libm's expf
// (`exp_rn`); fused multiply-adds where ggml fuses.
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
// With the QUADS define (prefill in the f32 mode, with subgroups), four
// invocations per (head, query row) instead, each holding a quarter of the
// query and output head: the query's scores are partial dots summed across
// the quad (subgroupShuffleXor), four keys a step with one online-softmax
// update per step. A workgroup is 32 neighbouring rows of one head, so its
// quads read the same keys (from L1) and hold a quarter of the registers
// of ROWS.
//
// The Q8 define (decode) also rounds the output row to Q8 blocks for the
// matmul after it (exact.wgsl's q8_store, as quantize.wgsl's Q8), a head
// being whole blocks of 32: one dispatch fewer per layer.
//
// The ROPE define (decode of one row, FAST, head_dim a multiple of 4)
// takes in the ropes and cache writes before it (`AttentionRope`): each
// workgroup rotates its Q head and its group's K head (rotate.wgsl), keeps
// the new key and value as the cache holds them in workgroup memory, and
// the group's first head writes K rotated and both cache rows (rows
// ids[i]). Key p is taken from workgroup memory when ids[i] is the row
// the attention reads for it (slot · ctx + pos, as the model writes it);
// a write elsewhere inside the window would race with the reads (no
// caller does that). With Q8 always bound, param 13 says whether the
// output is rounded.
//
// Params: 0 n (query rows), 1 n_heads, 2 n_kv_heads, 3 head_dim, 4 ctx,
// 5 window (0: none), 6 scale (f32; over softcap when there is one),
// 7 softcap (f32, 0: none), 8 cache rows; ROPE: 9 n_dims, 10 theta_scale
// (f32), 11 freq_scale (f32), 12 has frequency factors, 13 rounds to Q8.

@group(0) @binding(1) var<storage, read_write> q: array<f32>;     // (n, n_heads * head_dim)
#ifdef KV_F16
#ifdef ROPE
// Written too (the new key and value): u32 words, as rope.wgsl writes them.
@group(0) @binding(2) var<storage, read_write> kc: array<u32>;    // (slots * ctx, n_kv_heads * head_dim / 2)
@group(0) @binding(3) var<storage, read_write> vc: array<u32>;    // (slots * ctx, n_kv_heads * head_dim / 2)
#else
// With shader-f16, {{KV}} is vec2<f16>, read natively; else u32 words
// unpacked in registers.
@group(0) @binding(2) var<storage, read> kc: array<{{KV}}>;       // (slots * ctx, n_kv_heads * head_dim / 2)
@group(0) @binding(3) var<storage, read> vc: array<{{KV}}>;       // (slots * ctx, n_kv_heads * head_dim / 2)
#endif
#ifdef KV_HALF
fn kv2(w: vec2<f16>) -> vec2<f32> {
    return vec2<f32>(w);
}
#else
fn kv2(w: u32) -> vec2<f32> {
    return h2(w);
}
#endif
#else
#ifdef ROPE
@group(0) @binding(2) var<storage, read_write> kc: array<f32>;    // (slots * ctx, n_kv_heads * head_dim)
@group(0) @binding(3) var<storage, read_write> vc: array<f32>;    // (slots * ctx, n_kv_heads * head_dim)
#else
@group(0) @binding(2) var<storage, read> kc: array<f32>;          // (slots * ctx, n_kv_heads * head_dim)
@group(0) @binding(3) var<storage, read> vc: array<f32>;          // (slots * ctx, n_kv_heads * head_dim)
#endif
#endif
@group(0) @binding(4) var<storage, read_write> pos: array<i32>;   // (n)
@group(0) @binding(5) var<storage, read_write> seq: array<i32>;   // (n)
@group(0) @binding(6) var<storage, read_write> out: array<f32>;   // (n, n_heads * head_dim)
#ifdef Q8
@group(0) @binding(7) var<storage, read_write> xq: array<u32>;    // (n, n_heads * head_dim / 4) quants, 4 per word
@group(0) @binding(8) var<storage, read_write> xd: array<f32>;    // (n, n_heads * head_dim / 32) f16(d), widened
@group(0) @binding(9) var<storage, read_write> xs: array<f32>;    // (n, n_heads * head_dim / 32) f16(d · Σq), widened
#endif
#ifdef ROPE
// The rope's outputs and the cache writes' inputs (q, binding 1, is Q
// before its rope).
@group(0) @binding(10) var<storage, read_write> qo: array<f32>;   // (1, n_heads * head_dim) Q rotated
@group(0) @binding(11) var<storage, read_write> xk: array<f32>;   // (1, n_kv_heads * head_dim) K
@group(0) @binding(12) var<storage, read_write> ko: array<f32>;   // (1, n_kv_heads * head_dim) K rotated
@group(0) @binding(13) var<storage, read_write> xv: array<f32>;   // (1, n_kv_heads * head_dim) V
@group(0) @binding(14) var<storage, read_write> ff: array<f32>;   // (n_dims / 2) frequency factors, or a dummy
@group(0) @binding(15) var<storage, read_write> ids: array<i32>;  // (1) the new row's cache row
#endif

// Rounds to the cache type: f16 for an F16 cache.
fn rh(v: f32) -> f32 {
#ifdef FAST
    return v;
#endif
#ifdef KV_F16
    return f16_round(v);
#else
    return v;
#endif
}

fn rh4(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(rh(v.x), rh(v.y), rh(v.z), rh(v.w));
}

// A scaled score, capped as ggml caps it: cap · tanh(s · scale / cap).
fn capped(s: f32) -> f32 {
    let cap = pf(7);
    let v = s * pf(6);
    if (cap <= 0.0) {
        return v;
    }
    let e = exp_rn(-2.0 * abs(v));
    return cap * sign(v) * div_rn(1.0 - e, 1.0 + e);
}

// Sums 4 × 8 lane accumulators of q·k as ggml's AVX2 vec_dot_f16 does:
// folded 0+2, 1+3, then together; lanes l + (l + 4); then (0+1) + (2+3).
fn fold_dot(a: array<f32, 32>) -> f32 {
    var v: array<f32, 8>;
    for (var l = 0u; l < 8u; l++) {
        v[l] = (a[l] + a[16u + l]) + (a[8u + l] + a[24u + l]);
    }
    return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

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

#ifdef ROWS
#ifdef QUADS
// vec4s of a head per invocation: vec4 t + 4c of the head for c < QV, so
// a quad reads 64 contiguous bytes of a key.
const QV: u32 = {{HD}}u / 16u;
// Keys per step.
const KS: u32 = 4u;

@compute @workgroup_size(128)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let n = pu(0);
    let nh = pu(1);
    let hd = {{HD}}u;
    let blocks = (n + 31u) / 32u;
    let g = wg_index(wid, nwg);
    if (g >= blocks * nh) {
        return;
    }
    // The last rows (the most keys) first, so the long blocks do not end
    // the dispatch alone; a block's heads are neighbouring workgroups.
    let h = g % nh;
    let i = (blocks - 1u - g / nh) * 32u + lid / 4u;
    let t = lid % 4u;
    // A quad past the last row computes row n - 1 and stores nothing: its
    // shuffles stay within itself either way.
    let ii = min(i, n - 1u);
    let kvh = h / (nh / pu(2));
    let kv_stride = pu(2) * hd;
    let p = last_key(ii);
    let row0 = slot_row0(ii);
    let start = first_key(p);
    let qb = ii * nh * hd + h * hd;
    var qv: array<vec4<f32>, QV>;
    var acc: array<vec4<f32>, QV>;
    for (var c = 0u; c < QV; c++) {
        let e = qb + 4u * (t + 4u * c);
        qv[c] = vec4<f32>(q[e], q[e + 1u], q[e + 2u], q[e + 3u]);
        acc[c] = vec4<f32>(0.0);
    }
    var m = NEG_BIG;
    var l = 0.0;
    for (var j0 = start; j0 <= p; j0 += KS) {
        // Keys past p are clamped to p (in the cache) and weigh 0.
        var s = vec4<f32>(0.0);
        for (var c = 0u; c < QV; c++) {
            for (var jj = 0u; jj < KS; jj++) {
                let kb = (row0 + min(j0 + jj, p)) * kv_stride + kvh * hd;
                s[jj] = dot(qv[c], k4(kb + 4u * (t + 4u * c))) + s[jj];
            }
        }
        s += subgroupShuffleXor(s, 1u);
        s += subgroupShuffleXor(s, 2u);
        var sc = vec4<f32>(NEG_BIG);
        for (var jj = 0u; jj < KS; jj++) {
            if (j0 + jj <= p) {
                sc[jj] = capped(s[jj]);
            }
        }
        let m_new = max(m, max(max(sc.x, sc.y), max(sc.z, sc.w)));
        let corr = exp(m - m_new);
        // exp(NEG_BIG - m_new) is 0 for the keys past p.
        let pj = exp(sc - vec4<f32>(m_new));
        l = l * corr + ((pj.x + pj.y) + (pj.z + pj.w));
        m = m_new;
        for (var c = 0u; c < QV; c++) {
            var a = acc[c] * corr;
            for (var jj = 0u; jj < KS; jj++) {
                let vb = (row0 + min(j0 + jj, p)) * kv_stride + kvh * hd;
                a = fma(vec4<f32>(pj[jj]), v4(vb + 4u * (t + 4u * c)), a);
            }
            acc[c] = a;
        }
    }
    if (i >= n) {
        return;
    }
    var inv = 0.0;
    if (l != 0.0) {
        inv = 1.0 / l;
    }
    for (var c = 0u; c < QV; c++) {
        let e = qb + 4u * (t + 4u * c);
        let o = acc[c] * inv;
        out[e] = o.x;
        out[e + 1u] = o.y;
        out[e + 2u] = o.z;
        out[e + 3u] = o.w;
    }
}
#else
const HD4: u32 = {{HD}}u / 4u;
// Groups of 4 before the tail that is not a whole step of 32.
const FULL4: u32 = ({{HD}}u / 32u) * 8u;

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
    let kvh = h / (nh / pu(2));
    let kv_stride = pu(2) * hd;
    let p = last_key(i);
    let row0 = slot_row0(i);
    let start = first_key(p);
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
#ifdef FAST
        var s4 = vec4<f32>(0.0);
        for (var c = 0u; c < HD4; c++) {
            s4 = fma(qv[c], k4(kb + 4u * c), s4);
        }
        let t = vec2<f32>((s4.x + s4.y) + (s4.z + s4.w), 0.0);
#else
        // q·k in ggml's order: lane e % 32 of each step of 32, then any
        // tail in f64 (a float-float).
        var a: array<f32, 32>;
        for (var e = 0u; e < 32u; e++) {
            a[e] = 0.0;
        }
        for (var c = 0u; c < FULL4; c++) {
            let kk = k4(kb + 4u * c);
            for (var e = 0u; e < 4u; e++) {
                a[(4u * c + e) % 32u] = fmaf(qv[c][e], kk[e], a[(4u * c + e) % 32u]);
            }
        }
        var t = vec2<f32>(fold_dot(a), 0.0);
        for (var c = FULL4; c < HD4; c++) {
            let kk = k4(kb + 4u * c);
            for (var e = 0u; e < 4u; e++) {
                t = ff_add_f(t, opaque(qv[c][e] * kk[e]));
            }
        }
#endif
        let s = capped(t.x);
        var ms = 1.0;
        var vs = 1.0;
        if (s > m) {
            ms = exp_rn(m - s);
            m = s;
            for (var c = 0u; c < HD4; c++) {
                acc[c] = rh4(acc[c] * ms);
            }
        } else {
            vs = exp_rn(s - m);
        }
        for (var c = 0u; c < HD4; c++) {
            acc[c] = rh4(fmaf4(v4(kb + 4u * c), vec4<f32>(vs), acc[c]));
        }
        l = fmaf(l, ms, vs);
    }
    var inv = 0.0;
    if (l != 0.0) {
        inv = div_rn(1.0, l);
    }
    for (var c = 0u; c < HD4; c++) {
        let o = acc[c] * inv;
        out[qb + 4u * c] = o.x;
        out[qb + 4u * c + 1u] = o.y;
        out[qb + 4u * c + 2u] = o.z;
        out[qb + 4u * c + 3u] = o.w;
    }
}
#endif
#else
var<workgroup> qs: array<f32, 256>;     // (head_dim) this row's query head
var<workgroup> ps: array<f32, RED_WG>;  // (WG) this chunk's probabilities
var<workgroup> vpart: array<vec4<f32>, RED_WG>; // (WG) slices' weighted values
var<workgroup> w_pos: u32;
var<workgroup> w_row0: u32;
#ifdef ROPE
var<workgroup> kn: array<f32, 256>;     // (head_dim) the new key, as the cache holds it
var<workgroup> vn: array<f32, 256>;     // (head_dim) the new value, likewise
var<workgroup> w_new: u32;              // 1: key p is the new one (kn, vn)

// Row i's Q head h rotated into qs (and qo); its K head kvh rotated, and
// its V head, as the cache holds them, into kn and vn. The group's first
// head also writes K's rotated head to ko and both heads to cache row
// ids[i] (nothing for a row outside the cache), as rope.wgsl's STORE.
fn rope_heads(i: u32, h: u32, kvh: u32, qb: u32, lid: u32) {
    let hd = pu(3);
    let kb = i * pu(2) * hd + kvh * hd;
    let at = f32(pos[i]);
    let first = h % (pu(1) / pu(2)) == 0u;
    let id = ids[i];
    let store = first && id >= 0 && u32(id) < pu(8);
    let cb = u32(max(id, 0)) * pu(2) * hd + kvh * hd;
    let factored = pu(12) != 0u;
    for (var pp = lid; pp < hd / 2u; pp += RED_WG) {
        let d = 2u * pp;
        var qv = vec2<f32>(q[qb + d], q[qb + d + 1u]);
        var kv = vec2<f32>(xk[kb + d], xk[kb + d + 1u]);
        if (pp < pu(9) / 2u) {
            var factor = 1.0;
            if (factored) {
                factor = ff[pp];
            }
            let sc = rope_angle(pp, at, pf(10), pf(11), factored, factor);
            qv = rope_turn(qv.x, qv.y, sc);
            kv = rope_turn(kv.x, kv.y, sc);
        }
        let vv = vec2<f32>(xv[kb + d], xv[kb + d + 1u]);
        qo[qb + d] = qv.x;
        qo[qb + d + 1u] = qv.y;
        qs[d] = rh(qv.x);
        qs[d + 1u] = rh(qv.y);
#ifdef KV_F16
        let kw = pack_f16(kv.x, kv.y);
        let vw = pack_f16(vv.x, vv.y);
        let k2 = h2(kw);
        let v2 = h2(vw);
#else
        let k2 = kv;
        let v2 = vv;
#endif
        kn[d] = k2.x;
        kn[d + 1u] = k2.y;
        vn[d] = v2.x;
        vn[d + 1u] = v2.y;
        if (first) {
            ko[kb + d] = kv.x;
            ko[kb + d + 1u] = kv.y;
        }
        if (store) {
#ifdef KV_F16
            kc[(cb + d) / 2u] = kw;
            vc[(cb + d) / 2u] = vw;
#else
            kc[cb + d] = kv.x;
            kc[cb + d + 1u] = kv.y;
            vc[cb + d] = vv.x;
            vc[cb + d + 1u] = vv.y;
#endif
        }
    }
}

// q · the new key (head_dim a multiple of 4).
fn kdot_new(hd: u32) -> f32 {
    var s = vec4<f32>(0.0);
    for (var d = 0u; d < hd; d += 4u) {
        let qv = vec4<f32>(qs[d], qs[d + 1u], qs[d + 2u], qs[d + 3u]);
        s = fma(qv, vec4<f32>(kn[d], kn[d + 1u], kn[d + 2u], kn[d + 3u]), s);
    }
    return (s.x + s.y) + (s.z + s.w);
}
#endif

// q · k for the key head starting at element e of the cache, in ggml's
// order (see the ROWS variant).
fn kdot(e: u32, hd: u32) -> f32 {
    var a: array<f32, 32>;
    for (var i = 0u; i < 32u; i++) {
        a[i] = 0.0;
    }
    let full = hd - hd % 32u;
    for (var o = 0u; o < full; o += 32u) {
#ifdef KV_F16
        for (var i = 0u; i < 32u; i += 2u) {
            let k2 = kv2(kc[(e + o + i) / 2u]);
            a[i] = fmaf(qs[o + i], k2.x, a[i]);
            a[i + 1u] = fmaf(qs[o + i + 1u], k2.y, a[i + 1u]);
        }
#else
        for (var i = 0u; i < 32u; i++) {
            a[i] = fmaf(qs[o + i], kc[e + o + i], a[i]);
        }
#endif
    }
    var t = vec2<f32>(fold_dot(a), 0.0);
    for (var d = full; d < hd; d++) {
#ifdef KV_F16
        let kd = kv2(kc[(e + d) / 2u])[d % 2u];
#else
        let kd = kc[e + d];
#endif
        t = ff_add_f(t, opaque(qs[d] * kd));
    }
    return t.x;
}

fn vval(e: u32) -> f32 {
#ifdef KV_F16
    return kv2(vc[e / 2u])[e % 2u];
#else
    return vc[e];
#endif
}

#ifdef FAST
// Plain f32 decode (FAST): keys and values loaded several at a time.
fn k2_at(e: u32) -> vec2<f32> {
#ifdef KV_F16
    return kv2(kc[e / 2u]);
#else
    return vec2<f32>(kc[e], kc[e + 1u]);
#endif
}

// q · k over dims d..d+8 of a key head at element e.
fn kdot8(e: u32, d: u32) -> vec4<f32> {
    let a = k2_at(e + d);
    let b = k2_at(e + d + 2u);
    let c = k2_at(e + d + 4u);
    let f = k2_at(e + d + 6u);
    let s = vec4<f32>(qs[d], qs[d + 2u], qs[d + 4u], qs[d + 6u]) * vec4<f32>(a.x, b.x, c.x, f.x);
    return fma(vec4<f32>(qs[d + 1u], qs[d + 3u], qs[d + 5u], qs[d + 7u]), vec4<f32>(a.y, b.y, c.y, f.y), s);
}

// q · k over a key head: 32 dims (16 loads) a step, all in flight
// together (head_dim is even; the tail goes 8, then 2 at a time).
fn kdot_fast(e: u32, hd: u32) -> f32 {
    var s = vec4<f32>(0.0);
    var d = 0u;
    for (; d + 32u <= hd; d += 32u) {
        s += (kdot8(e, d) + kdot8(e, d + 8u)) + (kdot8(e, d + 16u) + kdot8(e, d + 24u));
    }
    for (; d + 8u <= hd; d += 8u) {
        s += kdot8(e, d);
    }
    for (; d < hd; d += 2u) {
        let k2 = k2_at(e + d);
        s.x = fma(qs[d], k2.x, fma(qs[d + 1u], k2.y, s.x));
    }
    return (s.x + s.y) + (s.z + s.w);
}

// q · the key at element e of the cache, or the new key.
fn kdot_at(e: u32, hd: u32, new_key: bool) -> f32 {
#ifdef ROPE
    if (new_key) {
        return kdot_new(hd);
    }
#endif
    return kdot_fast(e, hd);
}

// Keys jj..jj+4 (the first's value element at vb, rows `stride` apart)
// weighted by their probabilities.
fn v4_at(vb: u32, stride: u32, jj: u32) -> vec4<f32> {
    let v = vec4<f32>(vval(vb), vval(vb + stride), vval(vb + 2u * stride), vval(vb + 3u * stride));
    return vec4<f32>(ps[jj], ps[jj + 1u], ps[jj + 2u], ps[jj + 3u]) * v;
}

#endif

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
    let kvh = h / (nh / pu(2));
    let kv_stride = pu(2) * hd;
    let qb = i * nh * hd + h * hd;
    let lid = ln.lid;
    if (lid == 0u) {
        // Positions and slots come from storage, so they are not uniform to
        // the compiler; broadcast them to make the chunk loop uniform.
        // Out-of-range values are clamped so reads stay in the cache.
        w_pos = last_key(i);
        w_row0 = slot_row0(i);
#ifdef ROPE
        // Key p is the new one where the rope's cache write goes (the
        // model's ids: slot · ctx + pos); its row is then not read.
        w_new = u32(ids[i] == i32(w_row0 + w_pos));
#endif
    }
#ifdef ROPE
    rope_heads(i, h, kvh, qb, lid);
    let is_new = workgroupUniformLoad(&w_new) == 1u;
#else
    for (var d = lid; d < hd; d += RED_WG) {
        qs[d] = rh(q[qb + d]);
    }
    let is_new = false;
#endif
    let p = workgroupUniformLoad(&w_pos);
    let row0 = workgroupUniformLoad(&w_row0);
    let start = first_key(p);
    var m = NEG_BIG;
    var l = 0.0;
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var j0 = start; j0 <= p; j0 += RED_WG) {
        let j = j0 + lid;
        var sc = NEG_BIG;
        if (j <= p) {
#ifdef FAST
            sc = capped(kdot_at((row0 + j) * kv_stride + kvh * hd, hd, is_new && j == p));
#else
            sc = capped(kdot((row0 + j) * kv_stride + kvh * hd, hd));
#endif
        }
#ifdef FAST
        // Plain f32: the chunk's max and sum come from workgroup
        // reductions, and each invocation adds the chunk's weighted values
        // into its own output dims: one exp per key, not one per key and
        // invocation.
        let m_new = max(m, wg_max(sc, ln));
        var pj = 0.0;
        if (j <= p) {
            pj = exp(sc - m_new);
        }
        ps[lid] = pj;
        // wg_sum's barriers also publish ps.
        let corr = exp(m - m_new);
        l = l * corr + wg_sum(pj, ln);
        m = m_new;
        let cnt = min(RED_WG, p + 1u - j0);
        let vb0 = (row0 + j0) * kv_stride + kvh * hd;
        if (hd % 4u == 0u) {
            // Invocation lid adds 4 dims (column lid % cols) of the keys
            // of slice lid / cols (keys s, s + sl, ...), 4 keys in flight
            // a step; the slices' sums meet in workgroup memory. The new
            // key (last of the last chunk), if any, comes from vn.
            let new_here = is_new && p + 1u - j0 <= RED_WG;
            let cached = cnt - u32(new_here);
            let cols = hd / 4u;
            let sl = RED_WG / cols;
            let col = lid % cols;
            let s = lid / cols;
            var a = vec4<f32>(0.0);
            if (s < sl) {
                var a1 = vec4<f32>(0.0);
                var a2 = vec4<f32>(0.0);
                var a3 = vec4<f32>(0.0);
                let vb = vb0 + 4u * col;
                var jj = s;
                for (; jj + 3u * sl < cached; jj += 4u * sl) {
                    a = fma(vec4<f32>(ps[jj]), v4(vb + jj * kv_stride), a);
                    a1 = fma(vec4<f32>(ps[jj + sl]), v4(vb + (jj + sl) * kv_stride), a1);
                    a2 = fma(vec4<f32>(ps[jj + 2u * sl]), v4(vb + (jj + 2u * sl) * kv_stride), a2);
                    a3 = fma(vec4<f32>(ps[jj + 3u * sl]), v4(vb + (jj + 3u * sl) * kv_stride), a3);
                }
                for (; jj < cached; jj += sl) {
                    a = fma(vec4<f32>(ps[jj]), v4(vb + jj * kv_stride), a);
                }
                a = (a + a1) + (a2 + a3);
#ifdef ROPE
                if (new_here && s == 0u) {
                    let c4 = 4u * col;
                    let vnew = vec4<f32>(vn[c4], vn[c4 + 1u], vn[c4 + 2u], vn[c4 + 3u]);
                    a = fma(vec4<f32>(ps[cnt - 1u]), vnew, a);
                }
#endif
            }
            vpart[lid] = a;
            workgroupBarrier();
            for (var c = 0u; c < 4u; c++) {
                let d = lid + c * RED_WG;
                if (d < hd) {
                    var t = 0.0;
                    for (var s2 = 0u; s2 < sl; s2++) {
                        t += vpart[s2 * cols + d / 4u][d % 4u];
                    }
                    acc[c] = acc[c] * corr + t;
                }
            }
        } else {
            for (var c = 0u; c < 4u; c++) {
                let d = lid + c * RED_WG;
                if (d < hd) {
                    // 8 keys a step, independent sums: the value loads of
                    // a step are in flight together.
                    var a = vec4<f32>(acc[c] * corr, 0.0, 0.0, 0.0);
                    var jj = 0u;
                    for (; jj + 8u <= cnt; jj += 8u) {
                        a += v4_at(vb0 + jj * kv_stride + d, kv_stride, jj)
                            + v4_at(vb0 + (jj + 4u) * kv_stride + d, kv_stride, jj + 4u);
                    }
                    for (; jj + 4u <= cnt; jj += 4u) {
                        a += v4_at(vb0 + jj * kv_stride + d, kv_stride, jj);
                    }
                    for (; jj < cnt; jj++) {
                        a.x = fma(ps[jj], vval(vb0 + jj * kv_stride + d), a.x);
                    }
                    acc[c] = (a.x + a.y) + (a.z + a.w);
                }
            }
        }
#else
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
                ms = exp_rn(m - s);
                m = s;
            } else {
                vs = exp_rn(s - m);
            }
            let vb = (row0 + j0 + jj) * kv_stride + kvh * hd;
            for (var c = 0u; c < 4u; c++) {
                let d = lid + c * RED_WG;
                if (d < hd) {
                    acc[c] = rh(fmaf(vval(vb + d), vs, rh(acc[c] * ms)));
                }
            }
            l = fmaf(l, ms, vs);
        }
#endif
        workgroupBarrier();
    }
    var inv = 0.0;
    if (l != 0.0) {
        inv = div_rn(1.0, l);
    }
    for (var c = 0u; c < 4u; c++) {
        let d = lid + c * RED_WG;
        if (d < hd) {
            out[qb + d] = acc[c] * inv;
#ifdef Q8
            qs[d] = acc[c] * inv;
#endif
        }
    }
#ifdef Q8
    // Four consecutive dims per invocation, through qs (the loop's last
    // barrier came after every read of the query).
    workgroupBarrier();
    let live = 4u * lid < hd;
    var v = vec4<f32>(0.0);
    if (live) {
        v = vec4<f32>(qs[4u * lid], qs[4u * lid + 1u], qs[4u * lid + 2u], qs[4u * lid + 3u]);
    }
#ifdef ROPE
    q8_store(v, lid, live && pu(13) == 1u, qb / 4u + lid);
#else
    q8_store(v, lid, live, qb / 4u + lid);
#endif
#endif
}
#endif
