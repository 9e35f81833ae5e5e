// rms_norm: out[r] = x[r] / sqrt(mean(x[r]²) + eps), times weight when the
// WEIGHT define is set (the fused norm·weight multiply). One workgroup per
// row.
//
// As ggml (and the fast CPU backend): the squares rounded to f32, summed
// in f64 (here a float-float, exact.wgsl), `sum / cols` rounded to f32,
// scale = 1 / sqrt(mean + eps) with both operations correctly rounded, and
// out = x · scale · w in that order.
//
// The Q8 define (with WEIGHT) fuses the next matmul's activation rounding
// (quantize.wgsl's Q8, exact.wgsl's q8_store) on the values written: one
// dispatch instead of two before Q, K, V and gate, up. A row is then spread
// over `parts` workgroups of one invocation per word of 4 values; each
// workgroup sums the whole row's squares first, the same way (the same
// scale in every part).
//
// The ADD define (with WEIGHT, f32-activation mode) fuses the residual
// add before the norm: sum = x + addend is written to `sum` (which may be
// x itself) and normalised, one dispatch instead of two.
//
// The RESIDUAL define (with WEIGHT, f32-activation mode) fuses the
// residual add after the norm (Gemma's post-norms): out = res + the
// normalised row, where out may be res.
//
// norm_half.wgsl is ADD with fast math that also writes the output as the
// next matmul's f16 blocks.
//
struct Params {
    rows: u32,
    cols: u32,
    eps: f32,
    parts: u32, // Q8: workgroups per row
    zero: u32,       // 0 (exact.wgsl's `opaque`)
}
@group(0) @binding(0) var<uniform> P: Params;

@group(0) @binding(1) var<storage, read_write> x: array<f32>;     // (rows, cols)
@group(0) @binding(2) var<storage, read_write> out: array<f32>;   // (rows, cols)
#ifdef WEIGHT
@group(0) @binding(3) var<storage, read_write> w: array<f32>;     // (cols)
#endif
#ifdef ADD
@group(0) @binding(4) var<storage, read_write> addend: array<f32>; // (rows, cols)
@group(0) @binding(5) var<storage, read_write> sum: array<f32>;   // (rows, cols), may be x
#endif
#ifdef RESIDUAL
@group(0) @binding(4) var<storage, read_write> res: array<f32>;   // (rows, cols), may be out
#endif
#ifdef Q8
@group(0) @binding(4) var<storage, read_write> xq: array<u32>;    // (rows, cols / 4) quants, 4 per word
@group(0) @binding(5) var<storage, read_write> xd: array<f32>;    // (rows, cols / 32) f16(d), widened
@group(0) @binding(6) var<storage, read_write> xs: array<f32>;    // (rows, cols / 32) f16(d · Σq), widened
#endif

const NORM_WG: u32 = {{WG}}u;
var<workgroup> partial: array<vec2<f32>, NORM_WG>; // (WG) float-float sums

// Value i of the row: x, or with ADD x + addend, also stored as the sum
// (each invocation reads back below only the values it stored here).
fn val(i: u32) -> f32 {
#ifdef ADD
    let v = x[i] + addend[i];
    sum[i] = v;
    return v;
#else
    return x[i];
#endif
}

// Output value c of the row starting at b.
fn normed(b: u32, c: u32, scale: f32) -> f32 {
#ifdef ADD
    return sum[b + c] * scale * w[c];
#else
#ifdef WEIGHT
    return x[b + c] * scale * w[c];
#else
    return x[b + c] * scale;
#endif
#endif
}

// Stores output value i: v, or with RESIDUAL res + v.
fn store(i: u32, v: f32) {
#ifdef RESIDUAL
    out[i] = res[i] + v;
#else
    out[i] = v;
#endif
}

@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let lid = ln.lid;
#ifdef Q8
    let parts = P.parts;
#else
    let parts = 1u;
#endif
    let r = wg_index(wid, nwg) / parts;
    let cols = P.cols;
    if (r >= P.rows) {
        return;
    }
    let b = r * cols;
    var ss = vec2<f32>(0.0, 0.0);
#ifdef FAST
    // Plain f32: four values a step, their loads in flight together.
    var s4 = vec4<f32>(0.0);
    var c = lid;
    for (; c + 3u * NORM_WG < cols; c += 4u * NORM_WG) {
        let v = vec4<f32>(val(b + c), val(b + c + NORM_WG), val(b + c + 2u * NORM_WG), val(b + c + 3u * NORM_WG));
        s4 = fma(v, v, s4);
    }
    for (; c < cols; c += NORM_WG) {
        let v = val(b + c);
        s4.x = fma(v, v, s4.x);
    }
    ss.x = (s4.x + s4.y) + (s4.z + s4.w);
#else
    for (var c = lid; c < cols; c += NORM_WG) {
        let v = val(b + c);
        ss = ff_add_f(ss, opaque(v * v));
    }
#endif
#ifdef FAST
    // Plain f32: one workgroup reduction (subgroups where there are).
    let mean = wg_sum(ss.x, ln) / f32(cols);
#else
    partial[lid] = ss;
    for (var s = NORM_WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (lid < s) {
            partial[lid] = ff_add(partial[lid], partial[lid + s]);
        }
    }
    workgroupBarrier();
    let mean = ff_div_rn(partial[0], f32(cols));
#endif
    let scale = div_rn(1.0, sqrt_rn(mean + P.eps));
#ifdef Q8
    // One invocation per word of this part of the row.
    let c4 = (wg_index(wid, nwg) % parts) * NORM_WG + lid;
    let live = c4 < cols / 4u;
    var v = vec4<f32>(0.0);
    if (live) {
        let c = 4u * c4;
        v = vec4<f32>(x[b + c] * scale * w[c], x[b + c + 1u] * scale * w[c + 1u],
            x[b + c + 2u] * scale * w[c + 2u], x[b + c + 3u] * scale * w[c + 3u]);
        out[b + c] = v.x;
        out[b + c + 1u] = v.y;
        out[b + c + 2u] = v.z;
        out[b + c + 3u] = v.w;
    }
    q8_store(v, lid, live, b / 4u + c4);
    return;
#endif
    var o = lid;
#ifdef FAST
    // Four values a step, their loads in flight together.
    for (; o + 3u * NORM_WG < cols; o += 4u * NORM_WG) {
        let v = vec4<f32>(normed(b, o, scale), normed(b, o + NORM_WG, scale),
            normed(b, o + 2u * NORM_WG, scale), normed(b, o + 3u * NORM_WG, scale));
        store(b + o, v.x);
        store(b + o + NORM_WG, v.y);
        store(b + o + 2u * NORM_WG, v.z);
        store(b + o + 3u * NORM_WG, v.w);
    }
#endif
    for (; o < cols; o += NORM_WG) {
        store(b + o, normed(b, o, scale));
    }
}
