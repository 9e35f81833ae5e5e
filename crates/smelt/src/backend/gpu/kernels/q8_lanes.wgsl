// Legacy-quant weight blocks as ggml's integer lanes read them, shared by
// the kernels of Q8-rounded activations in ggml's arithmetic (`matmul_q8`,
// `matmul_id`): per 32-value block, lane l holds values 4l..4l+3 as packed
// signed bytes; an invocation of a quad takes lanes j and j + 4 (one qs word
// of a Q4 block holds both), and the quad's sums meet in `quad_sum` (a
// workgroup of 64). One TYPE_ define picks the type (quant.wgsl's, which
// this follows for rd32/rdf16).

// The 4-bit fields of w spread to the low nibbles of its bytes: values
// 4j..4j+3 of a Q4 block are the low nibbles of qs word j, values
// 16 + 4j.. the high ones.
fn nibbles(w: u32, hi: u32) -> u32 {
    return (w >> (4u * hi)) & 0x0f0f0f0fu;
}

// Bits 4j..4j+3 of qh as bit 4 of each byte (Q5's fifth bits).
fn fifth_bits(qh: u32, j: u32) -> u32 {
    let h = (qh >> j) & 0xfu;
    return ((h & 1u) | ((h & 2u) << 7u) | ((h & 4u) << 14u) | ((h & 8u) << 21u)) << 4u;
}

// Per type: BLOCK bytes; the block's scale (and minimum); and the packed
// signed bytes of lanes j and j + 4 of the block at byte bo.
#ifdef TYPE_Q4_0
const BLOCK: u32 = 18u;
fn lanes(bo: u32, j: u32) -> vec2<u32> {
    let w = rd32(bo + 2u + 4u * j);
    // q - 8 as a signed byte: flip bit 3, then extend it.
    let lo = nibbles(w, 0u) ^ 0x08080808u;
    let hi = nibbles(w, 1u) ^ 0x08080808u;
    return vec2<u32>(lo | ((lo & 0x08080808u) * 0x1eu), hi | ((hi & 0x08080808u) * 0x1eu));
}
#endif
#ifdef TYPE_Q4_1
const BLOCK: u32 = 20u;
fn lanes(bo: u32, j: u32) -> vec2<u32> {
    let w = rd32(bo + 4u + 4u * j);
    return vec2<u32>(nibbles(w, 0u), nibbles(w, 1u));
}
#endif
#ifdef TYPE_Q5_0
const BLOCK: u32 = 22u;
fn lanes(bo: u32, j: u32) -> vec2<u32> {
    let qh = rd32(bo + 2u);
    let w = rd32(bo + 6u + 4u * j);
    // q - 16 as a signed byte: flip bit 4, then extend it.
    let lo = (nibbles(w, 0u) | fifth_bits(qh, 4u * j)) ^ 0x10101010u;
    let hi = (nibbles(w, 1u) | fifth_bits(qh, 16u + 4u * j)) ^ 0x10101010u;
    return vec2<u32>(lo | ((lo & 0x10101010u) * 0x0eu), hi | ((hi & 0x10101010u) * 0x0eu));
}
#endif
#ifdef TYPE_Q5_1
const BLOCK: u32 = 24u;
fn lanes(bo: u32, j: u32) -> vec2<u32> {
    let qh = rd32(bo + 4u);
    let w = rd32(bo + 8u + 4u * j);
    return vec2<u32>(nibbles(w, 0u) | fifth_bits(qh, 4u * j), nibbles(w, 1u) | fifth_bits(qh, 16u + 4u * j));
}
#endif
#ifdef TYPE_Q8_0
const BLOCK: u32 = 34u;
fn lanes(bo: u32, j: u32) -> vec2<u32> {
    return vec2<u32>(rd32(bo + 2u + 4u * j), rd32(bo + 18u + 4u * j));
}
#endif

#ifndef SUBGROUPS
var<workgroup> quad: array<f32, 64>;
#endif

// ((a0 + a2) + (a1 + a3)) over the quad, valid in its invocation 0. Every
// invocation must call it.
fn quad_sum(a: f32, lid: u32) -> f32 {
#ifdef SUBGROUPS
    let b = a + subgroupShuffleXor(a, 2u);
    return b + subgroupShuffleXor(b, 1u);
#else
    workgroupBarrier();
    quad[lid] = a;
    workgroupBarrier();
    let q = lid & ~3u;
    return (quad[q] + quad[q + 2u]) + (quad[q + 1u] + quad[q + 3u]);
#endif
}
