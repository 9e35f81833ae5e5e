// RoPE: rotates pairs of each head by the angle of pair i at position p,
// pos · freq_scale · base^(-2i/n_dims) (divided by freq_factors[i] when
// given). Normal mode pairs (2i, 2i+1); the NEOX define pairs
// (i, i + n_dims/2). Values past n_dims pass through. x and out may be the
// same buffer.
//
// One invocation per pair position of a row and HEADS heads of a tensor:
// the angle's sine and cosine are taken once for the heads (they are the
// same in every head), and the heads' values are all loaded before any is
// stored (as out may be x, a store holds back every load after it).
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
struct Params {
    rows: u32,
    n_heads: u32,
    head_dim: u32,
    n_dims: u32,
    theta_scale: f32, // base^(-2 / n_dims)
    freq_scale: f32,
    factored: u32,    // 1: ff holds frequency factors
    heads2: u32,      // PAIR: heads of the second tensor
    cache_rows: u32,  // STORE: rows of the caches
    v_cols: u32,      // STORE: values of a V row (0: no V)
    attn_factor: f32, // the cosines and sines times this (LongRoPE)
    zero: u32,       // 0 (exact.wgsl's `opaque`)
}
@group(0) @binding(0) var<uniform> P: Params;

@group(0) @binding(1) var<storage, read_write> x: array<f32>;     // (rows, n_heads * head_dim)
@group(0) @binding(2) var<storage, read_write> pos: array<i32>;   // (rows)
@group(0) @binding(3) var<storage, read_write> out: array<f32>;   // (rows, n_heads * head_dim)
@group(0) @binding(4) var<storage, read_write> ff: array<f32>;    // (n_dims / 2), or a dummy
#ifdef PAIR
// A second tensor rotated at the same positions (K after Q), of `heads2`
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
    if (id < 0 || u32(id) >= P.cache_rows) {
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
    store_pair(false, row, P.heads2 * P.head_dim, c, a, b);
}

// Pair j of V (values 2j, 2j + 1 of its rows), into its cache row.
fn store_v(j: u32) {
    let half_row = P.v_cols / 2u;
    let row = j / half_row;
    if (row >= P.rows) {
        return;
    }
    let c = 2u * (j % half_row);
    let at = row * P.v_cols + c;
    store_pair(true, row, P.v_cols, c, v[at], v[at + 1u]);
}
#endif

const HEADS: u32 = {{HEADS}}u;

// Pair p, at columns c of a head, of heads h0 .. h0 + HEADS (of `heads`)
// of row `row` of the first tensor or the second: turned by the angle of
// sine and cosine sc, or passed through (`turn` false).
fn rope_heads(second: bool, row: u32, heads: u32, h0: u32, c: vec2<u32>, turn: bool, sc: vec2<f32>) {
    let hd = P.head_dim;
    let rb = row * heads * hd;
    var v: array<vec2<f32>, HEADS>;
    for (var j = 0u; j < HEADS; j++) {
        let b = rb + (h0 + j) * hd;
        if (h0 + j < heads) {
            v[j] = vec2<f32>(ld(second, b + c.x), ld(second, b + c.y));
        }
    }
    for (var j = 0u; j < HEADS; j++) {
        let b = rb + (h0 + j) * hd;
        if (h0 + j < heads) {
            var y = v[j];
            if (turn) {
                y = rope_turn(y.x, y.y, sc);
            }
            st(second, b + c.x, y.x);
            st(second, b + c.y, y.y);
#ifdef STORE
            if (second) {
                store_k(row, (h0 + j) * hd + c.x, y.x, y.y);
            }
#endif
        }
    }
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = gid.x + gid.y * nwg.x * 64u;
    let half_pairs = P.head_dim / 2u;
    // Groups of HEADS heads a row: the first tensor's, then the second's.
    let groups1 = (P.n_heads + HEADS - 1u) / HEADS;
    var groups = groups1;
#ifdef PAIR
    groups += (P.heads2 + HEADS - 1u) / HEADS;
#endif
    let ropes = P.rows * groups * half_pairs;
    if (g >= ropes) {
#ifdef STORE
        store_v(g - ropes);
#endif
        return;
    }
    let p = g % half_pairs;
    let group = (g / half_pairs) % groups;
    let row = g / (half_pairs * groups);
    let second = group >= groups1;
    var heads = P.n_heads;
    var h0 = group * HEADS;
    if (second) {
        heads = P.heads2;
        h0 = (group - groups1) * HEADS;
    }
    let n_dims = P.n_dims;
    let nd2 = n_dims / 2u;
    let turn = p < nd2;
    // The pair's columns in a head.
    let c = rope_columns(p, n_dims);
    var sc = vec2<f32>(0.0, 1.0);
    if (turn) {
        var factor = 1.0;
        if (P.factored != 0u) {
            factor = ff[p];
        }
        // As ggml: the magnitude rounded into each of them, before the
        // rotation's products.
        sc = rope_angle(p, f32(pos[row]), P.theta_scale, P.freq_scale, P.factored != 0u, factor) * P.attn_factor;
    }
    rope_heads(second, row, heads, h0, c, turn, sc);
}
