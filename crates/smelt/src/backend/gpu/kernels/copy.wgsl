// copy (F32 <-> F16 conversion) and, with SET_ROWS, the KV-cache write
// dst[ids[i]] = src[i]. SRC_F16 / DST_F16 pick packed-f16 sides: two values
// per u32 word, so with DST_F16 each invocation writes one whole word and
// no two invocations share one.
//
// With BLOCKS (and DST_F16), the copy writes the blocks of 32 values of a
// row apart, the same block of all rows together (`matmul_coop.wgsl`'s
// activations: a tile's step then reads one run).
//
struct Params {
    n: u32,        // values (copy), or rows of src (SET_ROWS)
    cols: u32,     // values per row (BLOCKS: a multiple of 32)
    dst_rows: u32, // SET_ROWS: rows of dst
}
@group(0) @binding(0) var<uniform> P: Params;

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
#ifdef PAIR
// SET_ROWS of a second source into a second destination, same shapes and
// ids (K and V into their caches): invocations past the first's go there.
@group(0) @binding(4) var<storage, read_write> src2: array<f32>;  // (rows, cols)
#ifdef DST_F16
@group(0) @binding(5) var<storage, read_write> dst2: array<u32>;  // (rows, cols) f16 pairs
#else
@group(0) @binding(5) var<storage, read_write> dst2: array<f32>;  // (rows, cols)
#endif
#endif

// Value e of the source (the second one when `second`).
fn src_of(second: bool, e: u32) -> f32 {
#ifdef PAIR
    if (second) {
        return src2[e];
    }
#endif
    return src_at(e);
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = gid.x + gid.y * nwg.x * 256u;
#ifdef SET_ROWS
    let cols = P.cols;
#ifdef DST_F16
    let per_row = cols / 2u;
#else
    let per_row = cols;
#endif
    var gi = g;
    var second = false;
#ifdef PAIR
    if (g >= P.n * per_row) {
        gi = g - P.n * per_row;
        second = true;
    }
#endif
    if (gi >= P.n * per_row) {
        return;
    }
    let i = gi / per_row;
    let c = gi % per_row;
    let id = ids[i];
    // An id outside the cache writes nothing rather than out of bounds.
    if (id < 0 || u32(id) >= P.dst_rows) {
        return;
    }
#ifdef DST_F16
    let e = i * cols + 2u * c;
    let word = pack_f16(src_of(second, e), src_of(second, e + 1u));
    let at = (u32(id) * cols) / 2u + c;
#else
    let word = src_of(second, i * cols + c);
    let at = u32(id) * cols + c;
#endif
#ifdef PAIR
    if (second) {
        dst2[at] = word;
        return;
    }
#endif
    dst[at] = word;
#else
    let n = P.n;
#ifdef BLOCKS
    if (2u * g >= n) {
        return;
    }
    let e = block_pair(g, P.cols, n / P.cols);
    dst[g] = pack_f16(src_at(e), src_at(e + 1u));
#else
#ifdef DST_F16
    let e = 2u * g;
    if (e >= n) {
        return;
    }
    if (e + 1u < n) {
        dst[g] = pack_f16(src_at(e), src_at(e + 1u));
    } else {
        // The odd last value: keep the other half of the word, which may
        // belong to the next row of a larger buffer.
        dst[g] = (dst[g] & 0xffff0000u) | f16_bits(src_at(e));
    }
#else
    if (g < n) {
        dst[g] = src_at(g);
    }
#endif
#endif
#endif
}
