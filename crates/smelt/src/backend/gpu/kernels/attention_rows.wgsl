// Prefill attention (attention.wgsl describes it): one invocation per
// (head, query row), or with QUADS four, each a quarter of the head.

#ifdef QUADS
// vec4s of a head per invocation: vec4 t + 4c of the head for c < QV, so
// a quad reads 64 contiguous bytes of a key.
const QV: u32 = {{HD}}u / 16u;
// Keys per step.
const KS: u32 = 4u;

#ifdef KV_BLOCKS
// The head held by quad lane t (vec4 c is values 16c + 4t..+4) times H
// (attention_blocks.wgsl), group by group: the butterflies of spans 1 and
// 2 inside a vec4, of 4 and 8 between the quad's lanes, of 16, 32 between
// vec4s. Every lane of the quad calls it (shuffles).
fn rotate_quad(x: ptr<function, array<vec4<f32>, QV>>, t: u32) {
    let n = P.rot;
    for (var c = 0u; c < QV; c++) {
        var v = (*x)[c];
        v = vec4<f32>(v.x + v.y, v.x - v.y, v.z + v.w, v.z - v.w);
        v = vec4<f32>(v.x + v.z, v.y + v.w, v.x - v.z, v.y - v.w);
        for (var m = 1u; m <= 2u; m *= 2u) {
            let other = subgroupShuffleXor(v, m);
            v = select(other - v, v + other, (t & m) == 0u);
        }
        (*x)[c] = v;
    }
    for (var span = 1u; span < n / 16u; span *= 2u) {
        for (var c = 0u; c < QV; c++) {
            if ((c & span) == 0u) {
                let a = (*x)[c];
                let b = (*x)[c + span];
                (*x)[c] = a + b;
                (*x)[c + span] = a - b;
            }
        }
    }
    let s = rot_scale();
    for (var c = 0u; c < QV; c++) {
        (*x)[c] *= s;
    }
}
#endif

@compute @workgroup_size(128)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let n = P.n;
    let nh = P.n_heads;
    let hd = {{HD}}u;
    let blocks = (n - P.row0 + 31u) / 32u;
    let g = wg_index(wid, nwg);
    if (g >= blocks * nh) {
        return;
    }
    // The last rows (the most keys) first, so the long blocks do not end
    // the dispatch alone; a block's heads are neighbouring workgroups.
    let h = g % nh;
    let i = P.row0 + (blocks - 1u - g / nh) * 32u + lid / 4u;
    let t = lid % 4u;
    // A quad past the last row computes row n - 1 and stores nothing: its
    // shuffles stay within itself either way.
    let ii = min(i, n - 1u);
    let kvh = h / (nh / P.n_kv_heads);
    let kv_stride = P.n_kv_heads * hd;
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
#ifdef KV_BLOCKS
    rotate_quad(&qv, t);
#endif
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
#ifdef KV_BLOCKS
    rotate_quad(&acc, t);
#endif
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

#ifdef KV_BLOCKS
// The head in x (vec4 c is values 4c..4c+4) times H (attention_blocks.wgsl),
// group by group: the butterflies of spans 1 and 2 inside a vec4, then of
// 4, 8, ... between vec4s.
fn rotate_vec4s(x: ptr<function, array<vec4<f32>, HD4>>) {
    let n4 = P.rot / 4u;
    for (var c = 0u; c < HD4; c++) {
        var v = (*x)[c];
        v = vec4<f32>(v.x + v.y, v.x - v.y, v.z + v.w, v.z - v.w);
        (*x)[c] = vec4<f32>(v.x + v.z, v.y + v.w, v.x - v.z, v.y - v.w);
    }
    for (var span = 1u; span < n4; span *= 2u) {
        for (var c = 0u; c < HD4; c++) {
            if ((c & span) == 0u) {
                let a = (*x)[c];
                let b = (*x)[c + span];
                (*x)[c] = a + b;
                (*x)[c + span] = a - b;
            }
        }
    }
    let s = rot_scale();
    for (var c = 0u; c < HD4; c++) {
        (*x)[c] *= s;
    }
}
#endif

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = gid.x + gid.y * nwg.x * 64u;
    let n = P.n;
    let nh = P.n_heads;
    let rows = n - P.row0;
    if (g >= rows * nh) {
        return;
    }
    let h = g / rows;
    let i = P.row0 + g % rows;
    let hd = HD4 * 4u;
    let kvh = h / (nh / P.n_kv_heads);
    let kv_stride = P.n_kv_heads * hd;
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
#ifdef KV_BLOCKS
    rotate_vec4s(&qv);
#endif
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
#ifdef KV_BLOCKS
    rotate_vec4s(&acc);
#endif
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
