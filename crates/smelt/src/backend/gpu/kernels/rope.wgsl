// RoPE: rotates pairs of each head by the angle of pair i at position p,
// pos · freq_scale · base^(-2i/n_dims) (divided by freq_factors[i] when
// given). Normal mode pairs (2i, 2i+1); the NEOX define pairs
// (i, i + n_dims/2). Values past n_dims pass through. One invocation per
// pair; x and out may be the same buffer.
//
// As ggml: theta_scale = base^(-2/n_dims) (computed by the host with
// powf), the rotation itself in rotate.wgsl.
//
// The STORE define (with PAIR, normal mode: a pair is two neighbouring
// values) also writes the second tensor's rotated rows into a KV cache at
// rows ids[row] (K's cache write), and copies a third tensor's rows into
// another cache the same way (V's), two values per invocation after the
// ropes': the rope of Q and K and both cache writes in one dispatch. An id
// outside the cache writes nothing.
//
// Params: 0 rows, 1 n_heads, 2 head_dim, 3 n_dims, 4 theta_scale (f32),
// 5 freq_scale (f32), 6 has freq_factors, 7 heads of the second tensor;
// STORE: 8 cache rows, 9 values of a V row (0: no V).

@group(0) @binding(1) var<storage, read_write> x: array<f32>;     // (rows, n_heads * head_dim)
@group(0) @binding(2) var<storage, read_write> pos: array<i32>;   // (rows)
@group(0) @binding(3) var<storage, read_write> out: array<f32>;   // (rows, n_heads * head_dim)
@group(0) @binding(4) var<storage, read_write> ff: array<f32>;    // (n_dims / 2), or a dummy
#ifdef PAIR
// A second tensor rotated at the same positions (K after Q), with param 7
// heads: invocations past the first's go there.
@group(0) @binding(5) var<storage, read_write> x2: array<f32>;    // (rows, heads2 * head_dim)
@group(0) @binding(6) var<storage, read_write> out2: array<f32>;  // (rows, heads2 * head_dim)
#endif
#ifdef STORE
@group(0) @binding(7) var<storage, read_write> ids: array<i32>;   // (rows) cache rows
#ifdef CACHE_F16
@group(0) @binding(8) var<storage, read_write> kc: array<u32>;    // (cache rows, heads2 * head_dim / 2) f16 pairs
#else
@group(0) @binding(8) var<storage, read_write> kc: array<f32>;    // (cache rows, heads2 * head_dim)
#endif
@group(0) @binding(9) var<storage, read_write> v: array<f32>;     // (rows, vcols)
#ifdef CACHE_F16
@group(0) @binding(10) var<storage, read_write> vc: array<u32>;   // (cache rows, vcols / 2) f16 pairs
#else
@group(0) @binding(10) var<storage, read_write> vc: array<f32>;   // (cache rows, vcols)
#endif

// Values a, b at even column c of input row `row` (rows of `cols`
// values) into its cache row ids[row] of K's cache, or V's (`to_v`);
// nothing for an id outside the cache.
fn store_pair(to_v: bool, row: u32, cols: u32, c: u32, a: f32, b: f32) {
    let id = ids[row];
    if (id < 0 || u32(id) >= pu(8)) {
        return;
    }
    let at = u32(id) * cols + c;
#ifdef CACHE_F16
    let word = pack_f16(a, b);
    if (to_v) {
        vc[at / 2u] = word;
    } else {
        kc[at / 2u] = word;
    }
#else
    if (to_v) {
        vc[at] = a;
        vc[at + 1u] = b;
    } else {
        kc[at] = a;
        kc[at + 1u] = b;
    }
#endif
}

// Values a, b at even column c of K's row `row`, into its cache row.
fn store_k(row: u32, c: u32, a: f32, b: f32) {
    store_pair(false, row, pu(7) * pu(2), c, a, b);
}

// Pair j of V (values 2j, 2j + 1 of its rows), into its cache row.
fn store_v(j: u32) {
    let half_row = pu(9) / 2u;
    let row = j / half_row;
    if (row >= pu(0)) {
        return;
    }
    let c = 2u * (j % half_row);
    let at = row * pu(9) + c;
    store_pair(true, row, pu(9), c, v[at], v[at + 1u]);
}
#endif

fn ld(second: bool, i: u32) -> f32 {
#ifdef PAIR
    if (second) {
        return x2[i];
    }
#endif
    return x[i];
}

fn st(second: bool, i: u32, v: f32) {
#ifdef PAIR
    if (second) {
        out2[i] = v;
        return;
    }
#endif
    out[i] = v;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    var g = gid.x + gid.y * nwg.x * 64u;
    var n_heads = pu(1);
    let hd = pu(2);
    let n_dims = pu(3);
    let half_pairs = hd / 2u;
    var second = false;
#ifdef STORE
    let ropes = pu(0) * (n_heads + pu(7)) * half_pairs;
    if (g >= ropes) {
        store_v(g - ropes);
        return;
    }
#endif
#ifdef PAIR
    if (g >= pu(0) * n_heads * half_pairs) {
        g -= pu(0) * n_heads * half_pairs;
        n_heads = pu(7);
        second = true;
    }
#endif
    if (g >= pu(0) * n_heads * half_pairs) {
        return;
    }
    let p = g % half_pairs;
    let row = g / (n_heads * half_pairs);
    let base = (g / half_pairs) * hd;
    let nd2 = n_dims / 2u;
    if (p >= nd2) {
#ifdef NEOX
        let i0 = base + n_dims + 2u * (p - nd2);
#else
        let i0 = base + 2u * p;
#endif
        let a = ld(second, i0);
        let b = ld(second, i0 + 1u);
        st(second, i0, a);
        st(second, i0 + 1u, b);
#ifdef STORE
        if (second) {
            store_k(row, i0 - row * n_heads * hd, a, b);
        }
#endif
        return;
    }
#ifdef NEOX
    let i0 = base + p;
    let i1 = base + p + nd2;
#else
    let i0 = base + 2u * p;
    let i1 = i0 + 1u;
#endif
    var factor = 1.0;
    if (pu(6) != 0u) {
        factor = ff[p];
    }
    let x0 = ld(second, i0);
    let x1 = ld(second, i1);
    let y = rope_rotate(x0, x1, p, f32(pos[row]), pf(4), pf(5), pu(6) != 0u, factor);
    let y0 = y.x;
    let y1 = y.y;
    st(second, i0, y0);
    st(second, i1, y1);
#ifdef STORE
    if (second) {
        store_k(row, i0 - row * n_heads * hd, y0, y1);
    }
#endif
}
