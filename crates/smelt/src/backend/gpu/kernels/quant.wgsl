// Weight decoding, in registers, straight from GGUF blocks.
//
// The kernel that includes this declares `wq: array<u32>`: a weight tensor
// in its GGUF layout, rows of `row_bytes` bytes of consecutive blocks. Blocks
// are 17, 18, 20, 22, 34, 84, 110, 136, 144, 176 or 210 bytes, so fields are not 4-byte
// aligned: rd8/rd16/rd32 read little-endian values at any byte offset (the
// buffer is padded so the word after the last one exists).
//
// One define picks the type: TYPE_F32, TYPE_F16, TYPE_BF16, TYPE_Q4_0,
// TYPE_Q4_1, TYPE_Q5_0, TYPE_Q5_1, TYPE_Q8_0, TYPE_Q2_K, TYPE_Q3_K,
// TYPE_Q4_K, TYPE_Q5_K, TYPE_Q6_K, TYPE_IQ4_NL, TYPE_IQ4_XS or TYPE_MXFP4.
// Each
// type provides
//   dq8(rb, i): values 8i..8i+8 of the row starting at byte rb;
//   dq1(rb, k): value k of that row;
//   ld8(rb, i) and de8(r, i): dq8 split into reading the words (an R8)
//   and decoding them, for a prefetch (REPACKED types; the others read
//   and decode in ld8); with HALF_DECODE (Q4_0 only) also de8h(r, i), the
//   same values as f16.
// PLAIN is defined for F32, F16 and BF16, whose rows may have any length; the
// block types always hold whole groups of 8. With WQ_F16 (F16 weights on an
// adapter with shader-f16) `wq` is `array<f16>` and read natively; with
// WQ_PAIRS (REPACKED only) it is `array<vec2<u32>>`, so that a pair of
// quant words (8-byte aligned in a superblock) is one load.

#ifndef WQ_F16
#ifndef WQ_PAIRS
fn rd8(b: u32) -> u32 {
    return (wq[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}

fn rd32(b: u32) -> u32 {
    let s = (b & 3u) * 8u;
    let lo = wq[b >> 2u];
    if (s == 0u) {
        return lo;
    }
    return (lo >> s) | (wq[(b >> 2u) + 1u] << (32u - s));
}

fn rd16(b: u32) -> u32 {
    return rd32(b) & 0xffffu;
}

fn rdf16(b: u32) -> f32 {
    return h2(rd16(b)).x;
}
#endif
#endif

struct V8 {
    a: vec4<f32>,
    b: vec4<f32>,
}

// The low nibble of each byte of w, as 4 values.
fn nib_lo(w: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xfu));
}

fn nib_hi(w: u32) -> vec4<f32> {
    return nib_lo(w >> 4u);
}

// Bit s of each byte of w.
fn bit_b4(w: u32, s: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(w) >> (vec4<u32>(0u, 8u, 16u, 24u) + s)) & vec4<u32>(1u));
}

// Bits s, s+1 of each byte of w.
fn bits2_b4(w: u32, s: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(w) >> (vec4<u32>(0u, 8u, 16u, 24u) + s)) & vec4<u32>(3u));
}

// Bits s..s+4 of x, one per value (Q5_0/Q5_1 high bits).
fn bits4(x: u32, s: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(x) >> (vec4<u32>(0u, 1u, 2u, 3u) + s)) & vec4<u32>(1u));
}

// The 4 bytes of w as signed values.
fn sbytes(w: u32) -> vec4<f32> {
    return vec4<f32>(vec4<i32>(
        bitcast<i32>(w << 24u) >> 24u,
        bitcast<i32>(w << 16u) >> 24u,
        bitcast<i32>(w << 8u) >> 24u,
        bitcast<i32>(w) >> 24u,
    ));
}

#ifdef TYPE_F32
fn dq1(rb: u32, k: u32) -> f32 {
    return bitcast<f32>(rd32(rb + 4u * k));
}

fn dq8(rb: u32, i: u32) -> V8 {
    let b = rb + 32u * i;
    return V8(
        bitcast<vec4<f32>>(vec4<u32>(rd32(b), rd32(b + 4u), rd32(b + 8u), rd32(b + 12u))),
        bitcast<vec4<f32>>(vec4<u32>(rd32(b + 16u), rd32(b + 20u), rd32(b + 24u), rd32(b + 28u))),
    );
}
#endif

#ifdef TYPE_F16
#ifdef WQ_F16
fn dq1(rb: u32, k: u32) -> f32 {
    return f32(wq[rb / 2u + k]);
}

fn dq8(rb: u32, i: u32) -> V8 {
    let e = rb / 2u + 8u * i;
    return V8(
        vec4<f32>(vec4<f16>(wq[e], wq[e + 1u], wq[e + 2u], wq[e + 3u])),
        vec4<f32>(vec4<f16>(wq[e + 4u], wq[e + 5u], wq[e + 6u], wq[e + 7u])),
    );
}
#else
fn dq1(rb: u32, k: u32) -> f32 {
    return rdf16(rb + 2u * k);
}

fn dq8(rb: u32, i: u32) -> V8 {
    let b = rb + 16u * i;
    return V8(
        vec4<f32>(h2(rd32(b)), h2(rd32(b + 4u))),
        vec4<f32>(h2(rd32(b + 8u)), h2(rd32(b + 12u))),
    );
}
#endif
#endif

// BF16: the top 16 bits of an f32.
#ifdef TYPE_BF16
fn bf2(w: u32) -> vec2<f32> {
    return bitcast<vec2<f32>>(vec2<u32>(w << 16u, w & 0xffff0000u));
}

fn dq1(rb: u32, k: u32) -> f32 {
    return bitcast<f32>(rd16(rb + 2u * k) << 16u);
}

fn dq8(rb: u32, i: u32) -> V8 {
    let b = rb + 16u * i;
    return V8(
        vec4<f32>(bf2(rd32(b)), bf2(rd32(b + 4u))),
        vec4<f32>(bf2(rd32(b + 8u)), bf2(rd32(b + 12u))),
    );
}
#endif

// REPACKED (f32 activations, `buffers::repack`): Q4_0 and Q8_0 blocks
// regrouped 8 to a superblock, the 8 blocks' quants first (16 or 32 bytes
// each, so every block's quants are 16-byte aligned), then their 8 f16
// scales: 36 or 68 words. `rb` is then the row's first block index (the
// host passes blocks per row as row_bytes), not a byte offset.
#ifdef REPACKED
// dq8 in two halves: `ld8` reads the words of 8 values, `de8` decodes
// them. The prefill GEMM's prefetch holds the words (4 registers, not 8
// values) and decodes them after its multiplies, waiting on no load. The
// words: two of quants at q, and the one holding block b's f16 scale,
// whose superblock starts at word `base` with its scales at `base + at`.
struct R8 {
    q0: u32,
    q1: u32,
    s: u32,
    hi: u32,
}

fn sb_words(q: u32, base: u32, at: u32, b: u32) -> R8 {
    let s = base + at + (b % 8u) / 2u;
#ifdef WQ_PAIRS
#ifdef MULTI
#ifndef JOINT
    // matmul_coop.wgsl's other weights, bound apart.
    if (part == 1u) {
        let p1 = wq1[q / 2u];
        return R8(p1.x, p1.y, wq1[s / 2u][s % 2u], (b & 1u) * 16u);
    }
    if (part == 2u) {
        let p2 = wq2[q / 2u];
        return R8(p2.x, p2.y, wq2[s / 2u][s % 2u], (b & 1u) * 16u);
    }
#endif
#endif
    let p = wq[q / 2u];
    return R8(p.x, p.y, wq[s / 2u][s % 2u], (b & 1u) * 16u);
#else
    return R8(wq[q], wq[q + 1u], wq[s], (b & 1u) * 16u);
#endif
}

fn sb_scale(r: R8) -> f32 {
    return h2(r.s >> r.hi).x;
}

fn dq8(rb: u32, i: u32) -> V8 {
    return de8(ld8(rb, i), i);
}
#endif

// Q4_0: { d: f16, qs: [u8; 16] }, 32 values: qs low nibbles are values
// 0..16, high nibbles 16..32; value = (q - 8) * d.
#ifdef TYPE_Q4_0
#ifdef REPACKED
fn ld8(rb: u32, i: u32) -> R8 {
    let b = rb + i / 4u;
    let base = 36u * (b / 8u);
    return sb_words(base + 4u * (b % 8u) + ((i % 4u) % 2u) * 2u, base, 32u, b);
}

#ifdef HALF_DECODE
// de8 in f16 arithmetic, for a kernel that stores f16 (matmul_coop.wgsl):
// the nibbles of a word as 4 bytes, widened straight to f16, then one fma,
// q · d − 8d. That rounds (q − 8) · d once, exactly as rounding de8's f32
// product (exact: 4 bits × 11) to f16 does, in fewer instructions.
struct H8 {
    a: vec4<f16>,
    b: vec4<f16>,
}

fn de8h(r: R8, i: u32) -> H8 {
    let d = f16(sb_scale(r));
    let sh = select(4u, 0u, (i % 4u) < 2u);
    let q0 = vec4<f16>(unpack4xU8((r.q0 >> sh) & 0x0f0f0f0fu));
    let q1 = vec4<f16>(unpack4xU8((r.q1 >> sh) & 0x0f0f0f0fu));
    let dv = vec4<f16>(d);
    let o = vec4<f16>(-8.0h * d);
    return H8(fma(q0, dv, o), fma(q1, dv, o));
}
#endif

fn de8(r: R8, i: u32) -> V8 {
    let d = sb_scale(r);
    if ((i % 4u) < 2u) {
        return V8((nib_lo(r.q0) - 8.0) * d, (nib_lo(r.q1) - 8.0) * d);
    }
    return V8((nib_hi(r.q0) - 8.0) * d, (nib_hi(r.q1) - 8.0) * d);
}
#else
fn dq8(rb: u32, i: u32) -> V8 {
    let bo = rb + (i / 4u) * 18u;
    let j = (i % 4u) * 8u;
    let d = rdf16(bo);
    let q0 = rd32(bo + 2u + j % 16u);
    let q1 = rd32(bo + 6u + j % 16u);
    if (j < 16u) {
        return V8((nib_lo(q0) - 8.0) * d, (nib_lo(q1) - 8.0) * d);
    }
    return V8((nib_hi(q0) - 8.0) * d, (nib_hi(q1) - 8.0) * d);
}
#endif
#endif

// Q4_1: { d: f16, m: f16, qs: [u8; 16] }; value = q * d + m.
#ifdef TYPE_Q4_1
fn dq8(rb: u32, i: u32) -> V8 {
    let bo = rb + (i / 4u) * 20u;
    let j = (i % 4u) * 8u;
    let d = rdf16(bo);
    let m = rdf16(bo + 2u);
    let q0 = rd32(bo + 4u + j % 16u);
    let q1 = rd32(bo + 8u + j % 16u);
    if (j < 16u) {
        return V8(nib_lo(q0) * d + m, nib_lo(q1) * d + m);
    }
    return V8(nib_hi(q0) * d + m, nib_hi(q1) * d + m);
}
#endif

// Q5_0: { d: f16, qh: u32, qs: [u8; 16] }; bit t of qh is the fifth bit of
// value t; value = (q - 16) * d.
#ifdef TYPE_Q5_0
fn dq8(rb: u32, i: u32) -> V8 {
    let bo = rb + (i / 4u) * 22u;
    let j = (i % 4u) * 8u;
    let d = rdf16(bo);
    let qh = rd32(bo + 2u);
    let q0 = rd32(bo + 6u + j % 16u);
    let q1 = rd32(bo + 10u + j % 16u);
    var lo = nib_lo(q0);
    var hi = nib_lo(q1);
    if (j >= 16u) {
        lo = nib_hi(q0);
        hi = nib_hi(q1);
    }
    return V8(
        (lo + 16.0 * bits4(qh, j) - 16.0) * d,
        (hi + 16.0 * bits4(qh, j + 4u) - 16.0) * d,
    );
}
#endif

// Q5_1: { d: f16, m: f16, qh: u32, qs: [u8; 16] }; value = q * d + m.
#ifdef TYPE_Q5_1
fn dq8(rb: u32, i: u32) -> V8 {
    let bo = rb + (i / 4u) * 24u;
    let j = (i % 4u) * 8u;
    let d = rdf16(bo);
    let m = rdf16(bo + 2u);
    let qh = rd32(bo + 4u);
    let q0 = rd32(bo + 8u + j % 16u);
    let q1 = rd32(bo + 12u + j % 16u);
    var lo = nib_lo(q0);
    var hi = nib_lo(q1);
    if (j >= 16u) {
        lo = nib_hi(q0);
        hi = nib_hi(q1);
    }
    return V8(
        (lo + 16.0 * bits4(qh, j)) * d + m,
        (hi + 16.0 * bits4(qh, j + 4u)) * d + m,
    );
}
#endif

// Q8_0: { d: f16, qs: [i8; 32] }; value = q * d.
#ifdef TYPE_Q8_0
#ifdef REPACKED
fn ld8(rb: u32, i: u32) -> R8 {
    let b = rb + i / 4u;
    let base = 68u * (b / 8u);
    return sb_words(base + 8u * (b % 8u) + 2u * (i % 4u), base, 64u, b);
}

fn de8(r: R8, i: u32) -> V8 {
    let d = sb_scale(r);
    return V8(sbytes(r.q0) * d, sbytes(r.q1) * d);
}
#else
fn dq8(rb: u32, i: u32) -> V8 {
    let bo = rb + (i / 4u) * 34u;
    let j = (i % 4u) * 8u;
    let d = rdf16(bo);
    return V8(sbytes(rd32(bo + 2u + j)) * d, sbytes(rd32(bo + 6u + j)) * d);
}
#endif
#endif

// Q2_K: { scales: [u8; 16], qs: [u8; 64], d: f16, dmin: f16 }, 256 values
// in 2 halves n of 128, each 4 groups j of 32: bits 2j of qs byte 32n + l
// are value l of group j; sub-block s = 8n + 2j + l / 16 of 16 values has
// scale byte s (low nibble: scale, high: min); value = d · sc · q − dmin · m.
#ifdef TYPE_Q2_K
fn dq8(rb: u32, i: u32) -> V8 {
    let bo = rb + (i / 32u) * 84u;
    let t = (i % 32u) * 8u;
    let n = t / 128u;
    let j = (t % 128u) / 32u;
    let l = t % 32u;
    let sc = rd8(bo + 8u * n + 2u * j + l / 16u);
    let d = rdf16(bo + 80u) * f32(sc & 0xfu);
    let m = rdf16(bo + 82u) * f32(sc >> 4u);
    let qb = bo + 16u + 32u * n + l;
    return V8(bits2_b4(rd32(qb), 2u * j) * d - m, bits2_b4(rd32(qb + 4u), 2u * j) * d - m);
}
#endif

// Q3_K: { hmask: [u8; 32], qs: [u8; 64], scales: [u8; 12], d: f16 }: as
// Q2_K's groups, with bit 4n + j of hmask byte l the third bit of value l
// of group j of half n (clear: minus 4), and 16 six-bit scales less 32:
// the low 4 bits of scale s in byte s % 8 (high nibble for s ≥ 8), the top
// 2 in bits 2 (s / 4) of byte 8 + s % 4; value = d · (sc − 32) · q.
#ifdef TYPE_Q3_K
fn q3k_scale(sb: u32, s: u32) -> f32 {
    let lo = (rd8(sb + s % 8u) >> (4u * (s / 8u))) & 0xfu;
    let hi = (rd8(sb + 8u + s % 4u) >> (2u * (s / 4u))) & 3u;
    return f32(i32(lo | (hi << 4u)) - 32);
}

fn dq8(rb: u32, i: u32) -> V8 {
    let bo = rb + (i / 32u) * 110u;
    let t = (i % 32u) * 8u;
    let n = t / 128u;
    let j = (t % 128u) / 32u;
    let l = t % 32u;
    let d = rdf16(bo + 108u) * q3k_scale(bo + 96u, 8u * n + 2u * j + l / 16u);
    let qb = bo + 32u + 32u * n + l;
    let h = 4u * n + j;
    return V8(
        (bits2_b4(rd32(qb), 2u * j) + 4.0 * bit_b4(rd32(bo + l), h) - 4.0) * d,
        (bits2_b4(rd32(qb + 4u), 2u * j) + 4.0 * bit_b4(rd32(bo + l + 4u), h) - 4.0) * d,
    );
}
#endif

// Q4_K and Q5_K pack 8 six-bit (scale, min) pairs of their 32-value
// sub-blocks into 12 bytes at byte 4 (ggml's get_scale_min_k4).
#ifdef K_SCALES
fn k4_scale_min(sb: u32, j: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(rd8(sb + j) & 63u), f32(rd8(sb + j + 4u) & 63u));
    }
    let a = rd8(sb + j + 4u);
    return vec2<f32>(
        f32((a & 0xfu) | ((rd8(sb + j - 4u) >> 6u) << 4u)),
        f32((a >> 4u) | ((rd8(sb + j) >> 6u) << 4u)),
    );
}
#endif

// Q4_K: { d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128] }, 256 values
// in 4 chunks of 64: the low nibbles of a chunk's 32 bytes are sub-block 2c,
// the high nibbles sub-block 2c+1; value = d * sc * q - dmin * m.
#ifdef TYPE_Q4_K
fn dq8(rb: u32, i: u32) -> V8 {
    let bo = rb + (i / 32u) * 144u;
    let t = (i % 32u) * 8u;
    let c = t / 64u;
    let r = t % 64u;
    let hi = r >= 32u;
    let sm = k4_scale_min(bo + 4u, 2u * c + select(0u, 1u, hi));
    let d = rdf16(bo) * sm.x;
    let m = rdf16(bo + 2u) * sm.y;
    let qb = bo + 16u + c * 32u + r % 32u;
    let q0 = rd32(qb);
    let q1 = rd32(qb + 4u);
    if (hi) {
        return V8(nib_hi(q0) * d - m, nib_hi(q1) * d - m);
    }
    return V8(nib_lo(q0) * d - m, nib_lo(q1) * d - m);
}
#endif

// Q5_K: { d, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128] }: as
// Q4_K, plus bit (2c + hi) of qh[l] as the fifth bit of value l of chunk c.
#ifdef TYPE_Q5_K
fn dq8(rb: u32, i: u32) -> V8 {
    let bo = rb + (i / 32u) * 176u;
    let t = (i % 32u) * 8u;
    let c = t / 64u;
    let r = t % 64u;
    let l = r % 32u;
    let hi = select(0u, 1u, r >= 32u);
    let sm = k4_scale_min(bo + 4u, 2u * c + hi);
    let d = rdf16(bo) * sm.x;
    let m = rdf16(bo + 2u) * sm.y;
    let h0 = bit_b4(rd32(bo + 16u + l), 2u * c + hi) * 16.0;
    let h1 = bit_b4(rd32(bo + 20u + l), 2u * c + hi) * 16.0;
    let q0 = rd32(bo + 48u + c * 32u + l);
    let q1 = rd32(bo + 52u + c * 32u + l);
    if (hi == 1u) {
        return V8((nib_hi(q0) + h0) * d - m, (nib_hi(q1) + h1) * d - m);
    }
    return V8((nib_lo(q0) + h0) * d - m, (nib_lo(q1) + h1) * d - m);
}
#endif

// Q6_K: { ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16 }, 256
// values in 2 halves of 128, each 4 groups g of 32: low 4 bits from ql
// (low nibbles for g < 2), high 2 bits from bits 2g of qh; value =
// d * scale * (q - 32).
#ifdef TYPE_Q6_K
fn dq8(rb: u32, i: u32) -> V8 {
    let bo = rb + (i / 32u) * 210u;
    let t = (i % 32u) * 8u;
    let n = t / 128u;
    let r = t % 128u;
    let g = r / 32u;
    let l = r % 32u;
    let qlb = bo + 64u * n + (g & 1u) * 32u + l;
    let qhb = bo + 128u + 32u * n + l;
    let sc = f32(bitcast<i32>(rd8(bo + 192u + 8u * n + l / 16u + 2u * g) << 24u) >> 24u);
    let d = rdf16(bo + 208u) * sc;
    var lo0 = nib_lo(rd32(qlb));
    var lo1 = nib_lo(rd32(qlb + 4u));
    if (g >= 2u) {
        lo0 = nib_hi(rd32(qlb));
        lo1 = nib_hi(rd32(qlb + 4u));
    }
    let h0 = bits2_b4(rd32(qhb), 2u * g) * 16.0;
    let h1 = bits2_b4(rd32(qhb + 4u), 2u * g) * 16.0;
    return V8((lo0 + h0 - 32.0) * d, (lo1 + h1 - 32.0) * d);
}
#endif

// IQ4_NL, IQ4_XS and MXFP4: 4-bit quants that index a table of 16 levels
// (CODEBOOK), signed bytes packed 4 to a word: ggml's kvalues_iq4nl, and
// kvalues_mxfp4 (e2m1 values doubled, so the block scale is halved).
#ifdef CODEBOOK
#ifdef TYPE_MXFP4
const LEVELS = vec4<u32>(0x03020100u, 0x0c080604u, 0xfdfeff00u, 0xf4f8fafcu);
#else
const LEVELS = vec4<u32>(0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u);
#endif

fn level(q: u32) -> f32 {
    return f32(bitcast<i32>(LEVELS[q >> 2u] << (24u - 8u * (q & 3u))) >> 24u);
}

// The levels of the low nibbles of w's 4 bytes.
fn levels4(w: u32) -> vec4<f32> {
    return vec4<f32>(level(w & 0xfu), level((w >> 8u) & 0xfu), level((w >> 16u) & 0xfu), level((w >> 24u) & 0xfu));
}

// Values 8i..8i+8 of a 32-value block of nibbles packed as Q4_0's (value
// j low, j + 16 high) at byte qb, times d.
fn nibble_levels(qb: u32, i: u32, d: f32) -> V8 {
    let j = (i % 4u) * 8u;
    let sh = select(4u, 0u, j < 16u);
    return V8(levels4(rd32(qb + j % 16u) >> sh) * d, levels4(rd32(qb + 4u + j % 16u) >> sh) * d);
}
#endif

// IQ4_NL: { d: f16, qs: [u8; 16] }; value = d · level(q).
#ifdef TYPE_IQ4_NL
fn dq8(rb: u32, i: u32) -> V8 {
    let bo = rb + (i / 4u) * 18u;
    return nibble_levels(bo + 2u, i, rdf16(bo));
}
#endif

// MXFP4: { e: u8, qs: [u8; 16] }; value = 2^(e − 128) · level(q), the
// scale built from its bits (e < 2: a subnormal).
#ifdef TYPE_MXFP4
fn dq8(rb: u32, i: u32) -> V8 {
    let bo = rb + (i / 4u) * 17u;
    let e = rd8(bo);
    let d = bitcast<f32>(select((e - 1u) << 23u, 0x00200000u << e, e < 2u));
    return nibble_levels(bo + 1u, i, d);
}
#endif

// IQ4_XS: { d: f16, scales_h: u16, scales_l: [u8; 4], qs: [u8; 128] }, 8
// sub-blocks of 32 coded as IQ4_NL's with a 6-bit scale ls (low 4 bits:
// nibble ib % 2 of scales_l[ib / 2], top 2: bits 2ib of scales_h);
// value = d · (ls − 32) · level(q).
#ifdef TYPE_IQ4_XS
fn dq8(rb: u32, i: u32) -> V8 {
    let bo = rb + (i / 32u) * 136u;
    let ib = (i % 32u) / 4u;
    let lo = (rd8(bo + 4u + ib / 2u) >> (4u * (ib % 2u))) & 0xfu;
    let hi = (rd16(bo + 2u) >> (2u * ib)) & 3u;
    let d = rdf16(bo) * f32(i32(lo | (hi << 4u)) - 32);
    return nibble_levels(bo + 8u + 16u * ib, i, d);
}
#endif

#ifndef PLAIN
fn dq1(rb: u32, k: u32) -> f32 {
    let v = dq8(rb, k / 8u);
    let e = k % 8u;
    if (e < 4u) {
        return v.a[e];
    }
    return v.b[e - 4u];
}
#endif

// The other types read and decode in one go: ld8 is dq8, de8 nothing.
#ifndef REPACKED
alias R8 = V8;

fn ld8(rb: u32, i: u32) -> V8 {
    return dq8(rb, i);
}

fn de8(r: V8, i: u32) -> V8 {
    return r;
}
#endif
