// Activation quantization before a matmul, as ggml does: ggml multiplies a
// Q4_0/Q5_0/Q8_0 weight by activations quantized to Q8_0, Q4_1/Q5_1 by
// Q8_1, the K-quants by Q8_K and F16 by F16. Matching its rounding matters
// where llama.cpp's greedy choice is decided by a small margin. The output
// holds the dequantized values (q * d), so the matmul kernels read f32 as
// usual.
//
// Defines: Q8 (blocks of 32: d = amax / 127 stored as f16, q = round(x / d)),
// Q8_K (blocks of 256: iscale = -127 / the value of largest magnitude,
// q = min(127, round(iscale * x)), d = 1 / iscale), F16 (x rounded to f16).
//
// Params: 0 n (values; a whole number of blocks for Q8 and Q8_K).

@group(0) @binding(1) var<storage, read_write> x: array<f32>;     // (rows, cols)
@group(0) @binding(2) var<storage, read_write> xq: array<f32>;    // (rows, cols)
#ifdef Q8
// Q8_1's s = f16(d * sum(q)) per block: Q4_1 and Q5_1 multiply their
// minimum by it, rounded as stored.
@group(0) @binding(3) var<storage, read_write> xs: array<f32>;    // (rows * cols / 32)
#endif

#ifdef F16
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i < pu(0)) {
        xq[i] = unpack2x16float(pack2x16float(vec2<f32>(x[i], 0.0))).x;
    }
}
#else
#ifdef Q8_K
const QB: u32 = 256u;
#else
const QB: u32 = 32u;
#endif

// One invocation per block.
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let b = gid.x + gid.y * nwg.x * 64u;
    if (b >= pu(0) / QB) {
        return;
    }
    let o = b * QB;
    var amax = 0.0;
    var vmax = 0.0;
    for (var i = 0u; i < QB; i++) {
        let a = abs(x[o + i]);
        if (a > amax) {
            amax = a;
            vmax = x[o + i];
        }
    }
    if (amax == 0.0) {
        for (var i = 0u; i < QB; i++) {
            xq[o + i] = 0.0;
        }
#ifdef Q8
        xs[b] = 0.0;
#endif
        return;
    }
#ifdef Q8_K
    let iscale = -127.0 / vmax;
    let d = 1.0 / iscale;
    for (var i = 0u; i < QB; i++) {
        xq[o + i] = min(127.0, round(iscale * x[o + i])) * d;
    }
#else
    // As ggml's AVX2 quantize_row_q8_0: id = 127 / amax, ties to even.
    let d = amax / 127.0;
    let id = 127.0 / amax;
    // The dot product uses d as stored in the block: an f16.
    let dh = unpack2x16float(pack2x16float(vec2<f32>(d, 0.0))).x;
    var sum = 0.0;
    for (var i = 0u; i < QB; i++) {
        let q = round(x[o + i] * id);
        sum += q;
        xq[o + i] = q * dh;
    }
    xs[b] = unpack2x16float(pack2x16float(vec2<f32>(d * sum, 0.0))).x;
#endif
}
#endif
