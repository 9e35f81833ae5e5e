// Activation quantization before a matmul, as ggml does: ggml multiplies a
// Q4_0/Q5_0/Q8_0 weight by activations quantized to Q8_0, Q4_1/Q5_1 by
// Q8_1, the K-quants by Q8_K and F16 by F16. Matching its rounding matters
// where llama.cpp's greedy choice is decided by a small margin.
//
// Defines:
// - Q8 (blocks of 32, ggml's quantize_row_q8_1 bit for bit: d = amax / 127,
//   q = round_ties_even(x · (127 / amax)), d stored as f16, s = f16(d · Σq)):
//   the quants packed 4 per word for the integer dot products of
//   matmul_q8.wgsl, with d and s beside them;
// - Q8_K (blocks of 256: iscale = -127 / the value of largest magnitude,
//   q = min(127, round(iscale * x)), d = 1 / iscale) and F16 (x rounded to
//   f16): the rounded values q · d as f32, for the float kernels.
//
struct Params {
    n: u32, // values: a whole number of blocks for Q8 and Q8_K
    zero: u32,       // 0 (exact.wgsl's `opaque`)
}
@group(0) @binding(0) var<uniform> P: Params;

@group(0) @binding(1) var<storage, read_write> x: array<f32>;     // (rows, cols)
#ifdef Q8
@group(0) @binding(2) var<storage, read_write> xq: array<u32>;    // (rows, cols / 4) quants, 4 per word
@group(0) @binding(3) var<storage, read_write> xd: array<f32>;    // (rows, cols / 32) f16(d), widened
@group(0) @binding(4) var<storage, read_write> xs: array<f32>;    // (rows, cols / 32) f16(d · Σq), widened
#else
@group(0) @binding(2) var<storage, read_write> xq: array<f32>;    // (rows, cols)
#endif

#ifdef F16
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i < P.n) {
        xq[i] = f16_round(x[i]);
    }
}
#endif

#ifdef Q8
// One invocation per word of 4 values (exact.wgsl's q8_store).
@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wg_index(wid, nwg) * {{WG}}u + lid;
    let live = g < P.n / 4u;
    var v = vec4<f32>(0.0);
    if (live) {
        v = vec4<f32>(x[4u * g], x[4u * g + 1u], x[4u * g + 2u], x[4u * g + 3u]);
    }
    q8_store(v, lid, live, g);
}
#endif

#ifdef Q8_K
// One invocation per block of 256.
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let b = gid.x + gid.y * nwg.x * 64u;
    if (b >= P.n / 256u) {
        return;
    }
    let o = b * 256u;
    var amax = 0.0;
    var vmax = 0.0;
    for (var i = 0u; i < 256u; i++) {
        let a = abs(x[o + i]);
        if (a > amax) {
            amax = a;
            vmax = x[o + i];
        }
    }
    if (amax == 0.0) {
        for (var i = 0u; i < 256u; i++) {
            xq[o + i] = 0.0;
        }
        return;
    }
    let iscale = -127.0 / vmax;
    let d = 1.0 / iscale;
    for (var i = 0u; i < 256u; i++) {
        xq[o + i] = min(127.0, round(iscale * x[o + i])) * d;
    }
}
#endif
