// Shared by every kernel, prepended to each kernel's source: the
// workgroup-index helper, f16 rounding and the blocked f16 layout.
//
// Each family declares its parameters as `struct Params`, bound as `P` at
// binding 0: one 64-byte slot per dispatch of a uniform buffer that holds
// every dispatch of the submission, chosen with a dynamic offset, so the
// whole block is written once per submission.

// Dispatches wider than maxComputeWorkgroupsPerDimension spill into y.
fn wg_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// A mat-vec workgroup's (token, row group) from its index g over n
// tokens: the tokens of one row group run next to each other, so the
// rows they read are read from memory once and from the cache after.
struct TokenGroup {
    t: u32,
    group: u32,
}

fn token_group(g: u32, n: u32) -> TokenGroup {
    return TokenGroup(g % n, g / n);
}

// Large finite stand-in for -inf: WGSL has no infinity literal, and
// exp(NEG_BIG - m) is still exactly 0.
const NEG_BIG: f32 = -3.0e38;

// The f16 bits of v rounded to nearest, ties to even, as the CPU (and
// ggml) convert: Vulkan leaves the rounding of pack2x16float to the
// implementation, and NVIDIA's does not round to nearest (every Q8 scale
// and f16 cache value that ggml's mode rounds would differ from the CPU's).
// Overflow gives infinity, NaN a quiet NaN.
fn f16_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    let sign = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a >= 0x477ff000u) {
        // 65520 and up round to infinity.
        return sign | select(0x7c00u, 0x7e00u, a > 0x7f800000u);
    }
    var q: u32;
    var rem: u32;
    var half: u32;
    if (a >= 0x38800000u) {
        // Normal: rebias the exponent (127 - 15) and drop 13 mantissa bits;
        // a carry runs into the exponent as it should.
        let r = a - 0x38000000u;
        q = r >> 13u;
        rem = r & 0x1fffu;
        half = 0x1000u;
    } else {
        // Below 2^-14: a subnormal f16, round(v · 2^24).
        let e = a >> 23u;
        if (e < 102u) {
            return sign;
        }
        let m = (a & 0x7fffffu) | 0x800000u;
        let shift = 126u - e;
        q = m >> shift;
        rem = m & ((1u << shift) - 1u);
        half = 1u << (shift - 1u);
    }
    if (rem > half || (rem == half && (q & 1u) == 1u)) {
        q += 1u;
    }
    return sign | q;
}

// v rounded to the nearest f16, ties to even, as an f32: in the normal
// range by adding half an f16 ulp (less one, plus the kept bit for the
// tie) and clearing the 13 dropped bits, a few integer operations where
// f16_bits takes tens; subnormals and overflow through f16_bits.
fn f16_round(v: f32) -> f32 {
    let b = bitcast<u32>(v);
    let a = b & 0x7fffffffu;
    if (a >= 0x38800000u && a < 0x477ff000u) {
        return bitcast<f32>((b + 0x0fffu + ((b >> 13u) & 1u)) & ~0x1fffu);
    }
    return unpack2x16float(f16_bits(v)).x;
}

// Two f32 values as f16s in a word (the first in the low half), rounded
// to nearest even.
fn pack_f16(a: f32, b: f32) -> u32 {
    return f16_bits(a) | (f16_bits(b) << 16u);
}

// The f16 activations of `matmul_coop.wgsl` (copy.wgsl's BLOCKS): an
// (rows, cols) matrix as (cols / 32, rows, 32), blocks of 32 values along a
// row with the same block of every row together, so a block of consecutive
// rows is one run of memory. Word g holds values 2w, 2w + 1 of block b of
// row t; the first is element t · cols + 32b + 2w of the matrix.
fn block_pair(g: u32, cols: u32, rows: u32) -> u32 {
    let w = g % 16u;
    let t = (g / 16u) % rows;
    let b = g / (16u * rows);
    return t * cols + 32u * b + 2u * w;
}

// The inverse: the word holding element (t, c) of the matrix, c even.
fn block_word(t: u32, c: u32, rows: u32) -> u32 {
    return ((c / 32u) * rows + t) * 16u + (c % 32u) / 2u;
}

// Two f16 values packed in a u32 word, as f32. (Not through
// bitcast<vec2<f16>>: naga 30's WGSL front end types that as a scalar.)
fn h2(w: u32) -> vec2<f32> {
    return unpack2x16float(w);
}
