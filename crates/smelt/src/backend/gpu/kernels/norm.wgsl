// rms_norm: out[r] = x[r] / sqrt(mean(x[r]²) + eps), times weight when the
// WEIGHT define is set (the fused norm·weight multiply). One workgroup per
// row.
//
// As ggml (and the fast CPU backend): the squares rounded to f32, summed
// in f64 (here a float-float, exact.wgsl), `sum / cols` rounded to f32,
// scale = 1 / sqrt(mean + eps) with both operations correctly rounded, and
// out = x · scale · w in that order.
//
// Params: 0 rows, 1 cols, 2 eps (f32).

@group(0) @binding(1) var<storage, read_write> x: array<f32>;     // (rows, cols)
@group(0) @binding(2) var<storage, read_write> out: array<f32>;   // (rows, cols)
#ifdef WEIGHT
@group(0) @binding(3) var<storage, read_write> w: array<f32>;     // (cols)
#endif

const NORM_WG: u32 = {{WG}}u;
var<workgroup> partial: array<vec2<f32>, NORM_WG>; // (WG) float-float sums

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = wg_index(wid, nwg);
    let cols = pu(1);
    if (r >= pu(0)) {
        return;
    }
    let b = r * cols;
    var ss = vec2<f32>(0.0, 0.0);
    for (var c = lid; c < cols; c += NORM_WG) {
        ss = ff_add_f(ss, opaque(x[b + c] * x[b + c]));
    }
    partial[lid] = ss;
    for (var s = NORM_WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (lid < s) {
            partial[lid] = ff_add(partial[lid], partial[lid + s]);
        }
    }
    workgroupBarrier();
    let mean = ff_div_rn(partial[0], f32(cols));
    let scale = div_rn(1.0, sqrt_rn(mean + pf(2)));
    for (var c = lid; c < cols; c += NORM_WG) {
#ifdef WEIGHT
        out[b + c] = x[b + c] * scale * w[c];
#else
        out[b + c] = x[b + c] * scale;
#endif
    }
}
