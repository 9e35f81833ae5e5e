// The sweep of a mat-vec's workgroup over NR weight rows (byte offsets rb)
// against one activation row (x from xb, k values): 8 values a step
// decoded in registers (quant.wgsl's dq8, and dq1 for a PLAIN tail), the
// NR sums met in one vec4 reduction. The including file declares x, x4,
// NR and RED_WG.

fn sweep_rows(rb: array<u32, 4>, xb: u32, k: u32, ln: Lane) -> vec4<f32> {
    var acc = vec4<f32>(0.0);
    for (var i = ln.lid; i < k / 8u; i += RED_WG) {
        let o = xb + i * 8u;
        let xa = x4(o);
        let xc = x4(o + 4u);
        for (var r = 0u; r < NR; r++) {
            let v = dq8(rb[r], i);
            acc[r] += dot(v.a, xa) + dot(v.b, xc);
        }
    }
#ifdef PLAIN
    for (var c = (k / 8u) * 8u + ln.lid; c < k; c += RED_WG) {
        for (var r = 0u; r < NR; r++) {
            acc[r] += dq1(rb[r], c) * x[xb + c];
        }
    }
#endif
    return wg_sum4(acc, ln);
}
