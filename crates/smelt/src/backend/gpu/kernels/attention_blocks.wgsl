// Attention over a cache of ggml blocks (KV_BLOCKS: KV_Q8_0 or KV_Q4_0),
// stored as kv_store.wgsl writes it: each row's rotation groups of P.rot
// values multiplied by the orthonormal Walsh-Hadamard matrix H, then
// quantized. The blocks are dequantized where they are read (4 values at a
// time, `k4` / `v4`), never the whole cache. H is symmetric and its own
// inverse, so q · (H k') = (H q) · k' and Σ p v = H Σ p v': the kernels
// rotate the query once, score and sum the rotated keys and values as they
// are stored, and rotate the output back once, a head being whole groups
// (the host checks). attention.wgsl declares the caches as words.

#ifdef KV_Q8_0
// Q8_0: { d: f16, qs: [i8; 32] }, 34 bytes; value = q · d.
const KV_BLOCK_BYTES: u32 = 34u;
#else
// Q4_0: { d: f16, qs: [u8; 16] }, 18 bytes: value j in the low nibble of
// byte j, value j + 16 in its high one; value = (q - 8) · d.
const KV_BLOCK_BYTES: u32 = 18u;
#endif

// The word at byte b of K's cache, or V's (`v`), from any 2-byte boundary.
fn kv_word(v: bool, b: u32) -> u32 {
    let w = b / 4u;
    var lo: u32;
    var hi: u32;
    if (v) {
        lo = vc[w];
        hi = vc[w + select(0u, 1u, b % 4u != 0u)];
    } else {
        lo = kc[w];
        hi = kc[w + select(0u, 1u, b % 4u != 0u)];
    }
    if (b % 4u == 0u) {
        return lo;
    }
    return (lo >> 16u) | (hi << 16u);
}

// Values e..e+4 of the cache (e a multiple of 4), as stored (rotated).
fn kv4(v: bool, e: u32) -> vec4<f32> {
    let bo = (e / 32u) * KV_BLOCK_BYTES;
    let j = e % 32u;
    var dw: u32;
    if (v) {
        dw = vc[bo / 4u];
    } else {
        dw = kc[bo / 4u];
    }
    let d = h2(dw >> ((bo % 4u) * 8u)).x;
#ifdef KV_Q8_0
    let w = kv_word(v, bo + 2u + j);
    let q = vec4<i32>(bitcast<i32>(w << 24u), bitcast<i32>(w << 16u), bitcast<i32>(w << 8u), bitcast<i32>(w)) >> vec4<u32>(24u);
    return vec4<f32>(q) * d;
#else
    let w = kv_word(v, bo + 2u + j % 16u);
    let shift = select(0u, 4u, j >= 16u);
    let q = (vec4<u32>(w) >> (vec4<u32>(0u, 8u, 16u, 24u) + vec4<u32>(shift))) & vec4<u32>(0xfu);
    return (vec4<f32>(q) - 8.0) * d;
#endif
}

fn k4(e: u32) -> vec4<f32> {
    return kv4(false, e);
}

fn v4(e: u32) -> vec4<f32> {
    return kv4(true, e);
}

// Value e of the caches.
fn k1(e: u32) -> f32 {
    return kv4(false, e & ~3u)[e % 4u];
}

fn vval(e: u32) -> f32 {
    return kv4(true, e & ~3u)[e % 4u];
}

fn k2_at(e: u32) -> vec2<f32> {
    let v = kv4(false, e & ~3u);
    if (e % 4u == 0u) {
        return v.xy;
    }
    return v.zw;
}

// H's scale, 1 / sqrt(rot).
fn rot_scale() -> f32 {
    return 1.0 / sqrt(f32(P.rot));
}
