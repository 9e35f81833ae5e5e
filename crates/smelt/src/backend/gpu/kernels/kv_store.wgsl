// KV-cache writes into a cache of ggml blocks (Q8_0 or Q4_0): dst[ids[i]]
// = src[i], each row stored as the CPU stores it (backend/cpu/kv_blocks.rs):
// every rotation group of P.rot values (64, or 32 where 64 does not divide
// the row) multiplied by the orthonormal Walsh-Hadamard matrix (the same
// butterflies in the same order, then the scale), then its 32-value
// blocks quantized as ggml's quantize_row_q8_0_ref / q4_0_ref round them
// (exact.wgsl's division, products not fused into the add).
//
// One invocation per group of a source row (PAIR: past the first
// source's groups, the second's). A block is 34 (Q8_0) or 18 (Q4_0) bytes,
// so a group's bytes start on a 2-byte boundary: the words wholly its own
// are stored, and a word it shares with its neighbour (groups of 32 only)
// gets its half through atomicAnd / atomicOr, so that neighbours written
// at once do not race.

struct Params {
    n: u32,        // rows of src
    cols: u32,     // values per row (a multiple of rot)
    dst_rows: u32, // rows of dst
    rot: u32,      // values per rotation group: 32 or 64
    scale: f32,    // 1 / sqrt(rot), as the CPU computes it
    zero: u32,     // 0 (exact.wgsl's `opaque`)
}
@group(0) @binding(0) var<uniform> P: Params;

@group(0) @binding(1) var<storage, read_write> src: array<f32>;           // (n, cols)
@group(0) @binding(2) var<storage, read_write> dst: array<atomic<u32>>;   // (dst_rows, cols / 32 blocks)
@group(0) @binding(3) var<storage, read_write> ids: array<i32>;           // (n)
#ifdef PAIR
// The second source into the second cache, same shapes and ids (V after K).
@group(0) @binding(4) var<storage, read_write> src2: array<f32>;          // (n, cols)
@group(0) @binding(5) var<storage, read_write> dst2: array<atomic<u32>>;  // (dst_rows, cols / 32 blocks)
#endif

#ifdef Q8_0
// Bytes and 16-bit halves of a block: d (f16), then 32 signed quants.
const BLOCK_BYTES: u32 = 34u;
#else
// d (f16), then 16 bytes of nibbles: value j low, value j + 16 high.
const BLOCK_BYTES: u32 = 18u;
#endif
const BLOCK_HALVES: u32 = BLOCK_BYTES / 2u;

// The group being stored, and its bytes as 16-bit halves.
var<private> x: array<f32, 64>;
var<private> halves: array<u32, 34>;

// x[0..n] times the orthonormal Walsh-Hadamard matrix, as kv_blocks.rs's
// `hadamard`: butterflies of spans 1, 2, 4, ..., then the scale.
fn hadamard(n: u32) {
    for (var half = 1u; half < n; half *= 2u) {
        for (var start = 0u; start < n; start += 2u * half) {
            for (var i = start; i < start + half; i++) {
                let a = x[i];
                let b = x[i + half];
                x[i] = a + b;
                x[i + half] = a - b;
            }
        }
    }
    for (var i = 0u; i < n; i++) {
        x[i] *= P.scale;
    }
}

#ifdef Q8_0
// Block k of the group (x[32k..32k+32]) into halves: d = amax / 127, q =
// round(x / d) half away from zero.
fn quantize_block(k: u32) {
    let o = 32u * k;
    var amax = 0.0;
    for (var j = 0u; j < 32u; j++) {
        amax = max(amax, abs(x[o + j]));
    }
    let d = div_rn(amax, 127.0);
    var id = 0.0;
    if (d != 0.0) {
        id = div_rn(1.0, d);
    }
    let h = k * BLOCK_HALVES;
    halves[h] = f16_bits(d);
    for (var j = 0u; j < 32u; j += 2u) {
        let q0 = u32(i32(round_away(x[o + j] * id))) & 0xffu;
        let q1 = u32(i32(round_away(x[o + j + 1u] * id))) & 0xffu;
        halves[h + 1u + j / 2u] = q0 | (q1 << 8u);
    }
}
#else
// The nibble of value v: min(15, trunc(v / d + 8.5)), the product rounded
// before the add.
fn nibble(v: f32, id: f32) -> u32 {
    return u32(min(15, i32(opaque(v * id) + 8.5)));
}

// Block k of the group into halves: d = (the value of largest magnitude)
// / -8, so that value maps to 0 of 0..16.
fn quantize_block(k: u32) {
    let o = 32u * k;
    var amax = 0.0;
    var vmax = 0.0;
    for (var j = 0u; j < 32u; j++) {
        if (amax < abs(x[o + j])) {
            amax = abs(x[o + j]);
            vmax = x[o + j];
        }
    }
    let d = div_rn(vmax, -8.0);
    var id = 0.0;
    if (d != 0.0) {
        id = div_rn(1.0, d);
    }
    let h = k * BLOCK_HALVES;
    halves[h] = f16_bits(d);
    for (var j = 0u; j < 16u; j += 2u) {
        let b0 = nibble(x[o + j], id) | (nibble(x[o + j + 16u], id) << 4u);
        let b1 = nibble(x[o + j + 1u], id) | (nibble(x[o + j + 17u], id) << 4u);
        halves[h + 1u + j / 2u] = b0 | (b1 << 8u);
    }
}
#endif

// Word w of the cache (the second's when `second`) set to `v` where `mask`
// has bits, the rest kept.
fn put(second: bool, w: u32, v: u32, mask: u32) {
#ifdef PAIR
    if (second) {
        if (mask == 0xffffffffu) {
            atomicStore(&dst2[w], v);
        } else {
            atomicAnd(&dst2[w], ~mask);
            atomicOr(&dst2[w], v & mask);
        }
        return;
    }
#endif
    if (mask == 0xffffffffu) {
        atomicStore(&dst[w], v);
    } else {
        atomicAnd(&dst[w], ~mask);
        atomicOr(&dst[w], v & mask);
    }
}

fn src_of(second: bool, e: u32) -> f32 {
#ifdef PAIR
    if (second) {
        return src2[e];
    }
#endif
    return src[e];
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = gid.x + gid.y * nwg.x * 64u;
    let n = P.rot;
    let per_row = P.cols / n;
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
    let group = gi % per_row;
    let id = ids[i];
    // An id outside the cache writes nothing rather than out of bounds.
    if (id < 0 || u32(id) >= P.dst_rows) {
        return;
    }
    let e = i * P.cols + group * n;
    for (var j = 0u; j < n; j++) {
        x[j] = src_of(second, e + j);
    }
    hadamard(n);
    let blocks = n / 32u;
    for (var k = 0u; k < blocks; k++) {
        quantize_block(k);
    }
    // The group's halves from half `at` of the cache (its bytes from 2 · at).
    let row_halves = (P.cols / 32u) * BLOCK_HALVES;
    let at = u32(id) * row_halves + group * blocks * BLOCK_HALVES;
    let count = blocks * BLOCK_HALVES;
    var h = 0u;
    if (at % 2u == 1u) {
        put(second, at / 2u, halves[0] << 16u, 0xffff0000u);
        h = 1u;
    }
    for (; h + 1u < count; h += 2u) {
        put(second, (at + h) / 2u, halves[h] | (halves[h + 1u] << 16u), 0xffffffffu);
    }
    if (h < count) {
        put(second, (at + h) / 2u, halves[h], 0x0000ffffu);
    }
}
