// rms_norm: out[r] = x[r] / sqrt(mean(x[r]²) + eps), times weight when the
// WEIGHT define is set (the fused norm·weight multiply). One workgroup per
// row.
//
// Params: 0 rows, 1 cols, 2 eps (f32).

@group(0) @binding(1) var<storage, read_write> x: array<f32>;     // (rows, cols)
@group(0) @binding(2) var<storage, read_write> out: array<f32>;   // (rows, cols)
#ifdef WEIGHT
@group(0) @binding(3) var<storage, read_write> w: array<f32>;     // (cols)
#endif

@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = wg_index(wid, nwg);
    let cols = pu(1);
    if (r >= pu(0)) {
        return;
    }
    let b = r * cols;
    var ss = 0.0;
    for (var c = ln.lid; c < cols; c += RED_WG) {
        ss += x[b + c] * x[b + c];
    }
    let scale = 1.0 / sqrt(wg_sum(ss, ln) / f32(cols) + pf(2));
    for (var c = ln.lid; c < cols; c += RED_WG) {
#ifdef WEIGHT
        out[b + c] = x[b + c] * scale * w[c];
#else
        out[b + c] = x[b + c] * scale;
#endif
    }
}
