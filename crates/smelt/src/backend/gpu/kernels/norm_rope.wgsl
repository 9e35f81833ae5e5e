// A head norm and the rope after it (Qwen 3's and Gemma 3's per-head Q
// and K RMSNorm): out[r] = rope(x[r] / sqrt(mean(x[r]²) + eps) · w) for
// each head row r of x (rows = tokens · heads, head_dim values each), at
// the position of row r's token. Plain f32 (the f32-activation mode):
// norm.wgsl's FAST sum, then rope.wgsl's pairs (normal mode 2i, 2i+1; the
// NEOX define i, i + n_dims/2; values past n_dims pass through), turned by
// rotate.wgsl. The norm's own output is not stored (the fusion pass joins
// the two only where nothing reads it).
//
// Each tensor's outputs are scaled last (`scale`, `scale2`: Gemma's
// query scale taken in).
//
// The PAIR define takes a second tensor's head rows (K's, with its own
// weight and heads, at the same positions) after the first's: workgroup r
// of rows + rows2 works on x2, w2 and out2 from r = rows on.
//
// One workgroup per head row: every invocation sums its values' squares,
// then turns its pairs. x and out may be the same buffer: a row is read
// whole before the reduction's barrier, and after it each pair is read and
// written by one invocation.
//
struct Params {
    rows: u32,        // head rows (tokens · heads)
    heads: u32,       // heads per token
    head_dim: u32,
    n_dims: u32,
    eps: f32,
    theta_scale: f32, // base^(-2 / n_dims)
    freq_scale: f32,
    factored: u32,    // 1: ff holds frequency factors
    attn_factor: f32, // the cosines and sines times this (LongRoPE)
    zero: u32,        // 0 (exact.wgsl's `opaque`)
    rows2: u32,       // PAIR: head rows of the second tensor
    heads2: u32,      // PAIR: its heads per token
    scale: f32,       // the first tensor's outputs times this
    scale2: f32,      // PAIR: the second's
}
@group(0) @binding(0) var<uniform> P: Params;

@group(0) @binding(1) var<storage, read_write> x: array<f32>;     // (rows, head_dim)
@group(0) @binding(2) var<storage, read_write> w: array<f32>;     // (head_dim)
@group(0) @binding(3) var<storage, read_write> pos: array<i32>;   // (rows / heads)
@group(0) @binding(4) var<storage, read_write> ff: array<f32>;    // (n_dims / 2), or a dummy
@group(0) @binding(5) var<storage, read_write> out: array<f32>;   // (rows, head_dim)
#ifdef PAIR
@group(0) @binding(6) var<storage, read_write> x2: array<f32>;    // (rows2, head_dim)
@group(0) @binding(7) var<storage, read_write> w2: array<f32>;    // (head_dim)
@group(0) @binding(8) var<storage, read_write> out2: array<f32>;  // (rows2, head_dim)
#endif

// Weight c of the first tensor or (PAIR) the second (values: pair_io.wgsl).
fn weight(second: bool, c: u32) -> f32 {
#ifdef PAIR
    if (second) {
        return w2[c];
    }
#endif
    return w[c];
}

@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let lid = ln.lid;
    var r = wg_index(wid, nwg);
    var rows = P.rows;
    var heads = P.heads;
    let second = r >= P.rows;
#ifdef PAIR
    if (second) {
        r -= P.rows;
        rows = P.rows2;
        heads = P.heads2;
    }
#endif
    // Whole workgroups leave together (the reduction's barriers).
    let live = r < rows;
    let hd = P.head_dim;
    let b = r * hd;
    var s = 0.0;
    if (live) {
        for (var c = lid; c < hd; c += RED_WG) {
            let v = ld(second, b + c);
            s = fma(v, v, s);
        }
    }
    let mean = wg_sum(s, ln) / f32(hd);
    if (!live) {
        return;
    }
    let inv_rms = div_rn(1.0, sqrt_rn(mean + P.eps));
    let at = f32(pos[r / heads]);
    let nd2 = P.n_dims / 2u;
    for (var p = lid; p < hd / 2u; p += RED_WG) {
        let turn = p < nd2;
        let c = rope_columns(p, P.n_dims);
        var y = vec2<f32>(ld(second, b + c.x) * inv_rms * weight(second, c.x),
            ld(second, b + c.y) * inv_rms * weight(second, c.y));
        if (turn) {
            var factor = 1.0;
            if (P.factored != 0u) {
                factor = ff[p];
            }
            let sc = rope_angle(p, at, P.theta_scale, P.freq_scale, P.factored != 0u, factor) * P.attn_factor;
            y = rope_turn(y.x, y.y, sc);
        }
        y *= select(P.scale, P.scale2, second);
        st(second, b + c.x, y.x);
        st(second, b + c.y, y.y);
    }
}
