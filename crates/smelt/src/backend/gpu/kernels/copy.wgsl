// copy (F32 <-> F16 conversion) and, with SET_ROWS, the KV-cache write
// dst[ids[i]] = src[i]. SRC_F16 / DST_F16 pick packed-f16 sides: two values
// per u32 word, so with DST_F16 each invocation writes one whole word and
// no two invocations share one.
//
// copy params:     0 n (elements).
// set_rows params: 0 n (src rows), 1 cols, 2 dst rows.

#ifdef SRC_F16
@group(0) @binding(1) var<storage, read_write> src: array<u32>;   // (rows, cols) f16 pairs
fn src_at(e: u32) -> f32 {
    return h2(src[e / 2u])[e % 2u];
}
#else
@group(0) @binding(1) var<storage, read_write> src: array<f32>;   // (rows, cols)
fn src_at(e: u32) -> f32 {
    return src[e];
}
#endif
#ifdef DST_F16
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;   // (rows, cols) f16 pairs
#else
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;   // (rows, cols)
#endif
#ifdef SET_ROWS
@group(0) @binding(3) var<storage, read_write> ids: array<i32>;   // (n)
#endif

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = gid.x + gid.y * nwg.x * 256u;
#ifdef SET_ROWS
    let cols = pu(1);
#ifdef DST_F16
    let per_row = cols / 2u;
#else
    let per_row = cols;
#endif
    if (g >= pu(0) * per_row) {
        return;
    }
    let i = g / per_row;
    let c = g % per_row;
    let id = ids[i];
    // An id outside the cache writes nothing rather than out of bounds.
    if (id < 0 || u32(id) >= pu(2)) {
        return;
    }
#ifdef DST_F16
    let e = i * cols + 2u * c;
    dst[(u32(id) * cols) / 2u + c] = pack2x16float(vec2<f32>(src_at(e), src_at(e + 1u)));
#else
    dst[u32(id) * cols + c] = src_at(i * cols + c);
#endif
#else
    let n = pu(0);
#ifdef DST_F16
    let e = 2u * g;
    if (e >= n) {
        return;
    }
    if (e + 1u < n) {
        dst[g] = pack2x16float(vec2<f32>(src_at(e), src_at(e + 1u)));
    } else {
        // The odd last value: keep the other half of the word, which may
        // belong to the next row of a larger buffer.
        dst[g] = (dst[g] & 0xffff0000u) | (pack2x16float(vec2<f32>(src_at(e), 0.0)) & 0xffffu);
    }
#else
    if (g < n) {
        dst[g] = src_at(g);
    }
#endif
#endif
}
