// Decode attention (attention.wgsl describes it): a workgroup per (query
// row, head); with Q8 its output rounded for the next matmul, with ROPE the
// ropes and cache writes before it taken in.

var<workgroup> qs: array<f32, 256>;     // (head_dim) this row's query head
var<workgroup> ps: array<f32, RED_WG>;  // (WG) this chunk's probabilities
var<workgroup> vpart: array<vec4<f32>, RED_WG>; // (WG) slices' weighted values
var<workgroup> w_pos: u32;
var<workgroup> w_row0: u32;
#ifdef ROPE
var<workgroup> kn: array<f32, 256>;     // (head_dim) the new key, as the cache holds it
var<workgroup> vn: array<f32, 256>;     // (head_dim) the new value, likewise
var<workgroup> w_new: u32;              // 1: key p is the new one (kn, vn)

// Row i's Q head h rotated into qs (and, by the `lead` workgroup of the
// head, into qo where rope_writes' 4 asks); its K head kvh rotated, and its V head, as the cache holds
// them, into kn and vn. The lead workgroup of the group's first head also
// writes both heads to cache row ids[i] (nothing for a row outside the
// cache), as rope.wgsl's STORE, and (rope_writes' 2) K's rotated head to ko
// (which may be xk itself when nothing reads it after).
fn rope_heads(i: u32, h: u32, kvh: u32, qb: u32, lid: u32, lead: bool) {
    let hd = P.head_dim;
    let kb = i * P.n_kv_heads * hd + kvh * hd;
    let at = f32(pos[i]);
    let first = lead && h % (P.n_heads / P.n_kv_heads) == 0u;
    let id = ids[i];
    let store = first && id >= 0 && u32(id) < P.cache_rows;
    let cb = u32(max(id, 0)) * P.n_kv_heads * hd + kvh * hd;
    let factored = P.factored != 0u;
    for (var pp = lid; pp < hd / 2u; pp += RED_WG) {
        let d = 2u * pp;
        var qv = vec2<f32>(q[qb + d], q[qb + d + 1u]);
        var kv = vec2<f32>(xk[kb + d], xk[kb + d + 1u]);
        if (pp < P.n_dims / 2u) {
            var factor = 1.0;
            if (factored) {
                factor = ff[pp];
            }
            let sc = rope_angle(pp, at, P.theta_scale, P.freq_scale, factored, factor);
            qv = rope_turn(qv.x, qv.y, sc);
            kv = rope_turn(kv.x, kv.y, sc);
        }
        let vv = vec2<f32>(xv[kb + d], xv[kb + d + 1u]);
        if (lead && (P.rope_writes & 4u) != 0u) {
            qo[qb + d] = qv.x;
            qo[qb + d + 1u] = qv.y;
        }
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
        if (first && (P.rope_writes & 2u) != 0u) {
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

#ifdef KV_BLOCKS
// The head in qs times H (attention_blocks.wgsl), a group per invocation
// (kv_store.wgsl's butterflies); every invocation calls it (barriers).
fn rotate_qs(lid: u32, hd: u32) {
    workgroupBarrier();
    let n = P.rot;
    if (lid < hd / n) {
        let o = lid * n;
        for (var half = 1u; half < n; half *= 2u) {
            for (var start = o; start < o + n; start += 2u * half) {
                for (var i = start; i < start + half; i++) {
                    let a = qs[i];
                    let b = qs[i + half];
                    qs[i] = a + b;
                    qs[i + half] = a - b;
                }
            }
        }
        let s = rot_scale();
        for (var i = o; i < o + n; i++) {
            qs[i] *= s;
        }
    }
    workgroupBarrier();
}
#endif

// q · k for the key head starting at element e of the cache, in ggml's
// order (see attention_rows.wgsl).
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
        for (var i = 0u; i < 32u; i += 4u) {
            let k = k4(e + o + i);
            for (var c = 0u; c < 4u; c++) {
                a[i + c] = fmaf(qs[o + i + c], k[c], a[i + c]);
            }
        }
#endif
    }
    var t = vec2<f32>(fold_dot(a), 0.0);
    for (var d = full; d < hd; d++) {
        t = ff_add_f(t, opaque(qs[d] * k1(e + d)));
    }
    return t.x;
}

#ifndef KV_BLOCKS
fn vval(e: u32) -> f32 {
#ifdef KV_F16
    return kv2(vc[e / 2u])[e % 2u];
#else
    return vc[e];
#endif
}
#endif

#ifdef FAST
#ifndef KV_BLOCKS
// Plain f32 decode (FAST): keys and values loaded several at a time.
fn k2_at(e: u32) -> vec2<f32> {
#ifdef KV_F16
    return kv2(kc[e / 2u]);
#else
    return vec2<f32>(kc[e], kc[e + 1u]);
#endif
}
#endif

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

#ifdef SPLIT
// Part `part`'s keys of the range [start, p]: [lo, hi), empty for a part
// past the end.
fn part_keys(start: u32, p: u32, part: u32) -> vec2<u32> {
    let per = (p + 1u - start + {{PARTS}}u - 1u) / {{PARTS}}u;
    let lo = min(start + part * per, p + 1u);
    return vec2<u32>(lo, min(lo + per, p + 1u));
}
#endif

@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wg_index(wid, nwg);
    let nh = P.n_heads;
#ifdef SPLIT
    let part = g % {{PARTS}}u;
    let gh = g / {{PARTS}}u;
#else
    let part = 0u;
    let gh = g;
#endif
    if (gh >= P.n * nh) {
        return;
    }
    let i = gh / nh;
    let h = gh % nh;
    let hd = P.head_dim;
    let kvh = h / (nh / P.n_kv_heads);
    let kv_stride = P.n_kv_heads * hd;
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
    rope_heads(i, h, kvh, qb, lid, part == 0u);
    let is_new = workgroupUniformLoad(&w_new) == 1u;
#else
    for (var d = lid; d < hd; d += RED_WG) {
        qs[d] = rh(q[qb + d]);
    }
    let is_new = false;
#endif
#ifdef KV_BLOCKS
    // Scored against the keys as stored, rotated.
    rotate_qs(lid, hd);
#endif
    let p = workgroupUniformLoad(&w_pos);
    let row0 = workgroupUniformLoad(&w_row0);
    // This workgroup's keys: [lo, hi).
    var lo = first_key(p);
    var hi = p + 1u;
#ifdef SPLIT
    let range = part_keys(lo, p, part);
    lo = range.x;
    hi = range.y;
#endif
    var m = NEG_BIG;
    var l = 0.0;
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var j0 = lo; j0 < hi; j0 += RED_WG) {
        let j = j0 + lid;
        var sc = NEG_BIG;
        if (j < hi) {
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
        if (j < hi) {
            pj = exp(sc - m_new);
        }
        ps[lid] = pj;
        // wg_sum's barriers also publish ps.
        let corr = exp(m - m_new);
        l = l * corr + wg_sum(pj, ln);
        m = m_new;
        let cnt = min(RED_WG, hi - j0);
        let vb0 = (row0 + j0) * kv_stride + kvh * hd;
        if (hd % 4u == 0u) {
            // Invocation lid adds 4 dims (column lid % cols) of the keys
            // of slice lid / cols (keys s, s + sl, ...), 4 keys in flight
            // a step; the slices' sums meet in workgroup memory. The new
            // key (last of the last chunk), if any, comes from vn.
            let new_here = is_new && hi == p + 1u && hi - j0 <= RED_WG;
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
        let cnt = min(RED_WG, hi - j0);
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
#ifdef SPLIT
    let pb = g * (hd + 2u);
    for (var c = 0u; c < 4u; c++) {
        let d = lid + c * RED_WG;
        if (d < hd) {
            parts[pb + d] = acc[c];
        }
    }
    if (lid == 0u) {
        parts[pb + hd] = m;
        parts[pb + hd + 1u] = l;
    }
#else
    var inv = 0.0;
    if (l != 0.0) {
        inv = div_rn(1.0, l);
    }
#ifdef KV_BLOCKS
    // The sum of rotated values, rotated back through qs (the loop's last
    // barrier came after every read of the query).
    for (var c = 0u; c < 4u; c++) {
        let d = lid + c * RED_WG;
        if (d < hd) {
            qs[d] = acc[c] * inv;
        }
    }
    rotate_qs(lid, hd);
    for (var c = 0u; c < 4u; c++) {
        let d = lid + c * RED_WG;
        if (d < hd) {
            out[qb + d] = qs[d];
        }
    }
#else
    for (var c = 0u; c < 4u; c++) {
        let d = lid + c * RED_WG;
        if (d < hd) {
            out[qb + d] = acc[c] * inv;
#ifdef Q8
            qs[d] = acc[c] * inv;
#endif
        }
    }
#endif
#ifdef Q8
    // Through qs (the loop's last barrier came after every read of the
    // query).
#ifdef ROPE
    q8_store_head(lid, hd, (P.rope_writes & 1u) != 0u, qb / 4u);
#else
    q8_store_head(lid, hd, true, qb / 4u);
#endif
#endif
#endif
}
