// Causal grouped-query attention over the KV cache, flash style: an online
// softmax over the keys in position order (running max m and sum l, the
// output rescaled by exp(m_old - m_new) when the max grows), so scores are
// never stored whole. It computes what ggml's CPU flash attention computes
// (as the fast CPU backend does, exact.wgsl says why): with an F16 cache the
// query rounded to f16 and the value accumulator rounded to f16 after every
// update (`rh`); q·k summed in ggml's order (`kdot`); libm's expf
// (`exp_rn`); fused multiply-adds where ggml fuses. This file has the
// bindings and helpers; the kernels are attention_decode.wgsl and
// attention_rows.wgsl (prefill).
//
// One workgroup per (query row, head) for decode: invocation `lid` scores
// key j0 + lid of each chunk of WG keys, then every invocation walks the
// chunk's scores in order for its output dims lid, lid + WG, ...
// (head_dim <= 4 * WG).
//
// For prefill (attention_rows.wgsl), one invocation per (head, query row)
// instead: it walks its keys alone with the same online softmax, the query
// and the output row in registers ({{HD}}, the head size, is a constant),
// and no barriers. Neighbouring invocations are neighbouring rows of one
// head, so they read the same keys.
//
// With the QUADS define (prefill in the f32 mode, with subgroups), four
// invocations per (head, query row) instead, each holding a quarter of the
// query and output head: the query's scores are partial dots summed across
// the quad (subgroupShuffleXor), four keys a step with one online-softmax
// update per step. A workgroup is 32 neighbouring rows of one head, so its
// quads read the same keys (from L1) and hold a quarter of the registers
// of one invocation a row.
//
// The Q8 define (decode) also rounds the output row to Q8 blocks for the
// matmul after it (exact.wgsl's q8_store, as quantize.wgsl's Q8), a head
// being whole blocks of 32: one dispatch fewer per layer.
//
// The ROPE define (decode of one row, FAST, head_dim a multiple of 4)
// takes in the ropes and cache writes before it (`AttentionRope`): each
// workgroup rotates its Q head and its group's K head (rotate.wgsl), keeps
// the new key and value as the cache holds them in workgroup memory, and
// the group's first head writes both cache rows (rows ids[i]) and, where
// something reads it after, K rotated. Key p is taken from workgroup memory when ids[i] is the row
// the attention reads for it (slot · ctx + pos, as the model writes it);
// a write elsewhere inside the window would race with the reads (no
// caller does that). With Q8 always bound, `rope_writes` says whether the
// output is rounded (1), whether K rotated is written (2) and whether Q
// rotated is (4).
//
// The SPLIT define (decode, FAST, F32 or F16 cache) splits a (row,
// head)'s keys into {{PARTS}} ranges, a workgroup each: it writes its
// range's running max m, sum l and output before the division by l to
// `parts`, and attention_merge.wgsl (a dispatch of its own) rescales the
// parts to their common max and sums them (flash decoding). With one
// workgroup per (row, head), a decode of 32 heads ran 32 workgroups, each
// walking every key in turn, on a GPU of 132 multiprocessors.
//
// The parameters are declared in attention_keys.wgsl.

@group(0) @binding(1) var<storage, read_write> q: array<f32>;     // (n, n_heads * head_dim)
#ifdef KV_BLOCKS
// Blocks of 32 values along each row, as words (attention_blocks.wgsl).
@group(0) @binding(2) var<storage, read> kc: array<u32>;          // (slots * ctx, n_kv_heads * head_dim / 32 blocks)
@group(0) @binding(3) var<storage, read> vc: array<u32>;          // (slots * ctx, n_kv_heads * head_dim / 32 blocks)
#else
#ifdef KV_F16
#ifdef ROPE
// Written too (the new key and value): u32 words, as rope.wgsl writes them.
@group(0) @binding(2) var<storage, read_write> kc: array<u32>;    // (slots * ctx, n_kv_heads * head_dim / 2)
@group(0) @binding(3) var<storage, read_write> vc: array<u32>;    // (slots * ctx, n_kv_heads * head_dim / 2)
#else
// With shader-f16, {{KV}} is vec2<f16>, read natively; else u32 words
// unpacked in registers.
@group(0) @binding(2) var<storage, read> kc: array<{{KV}}>;       // (slots * ctx, n_kv_heads * head_dim / 2)
@group(0) @binding(3) var<storage, read> vc: array<{{KV}}>;       // (slots * ctx, n_kv_heads * head_dim / 2)
#endif
#ifdef KV_HALF
fn kv2(w: vec2<f16>) -> vec2<f32> {
    return vec2<f32>(w);
}
#else
fn kv2(w: u32) -> vec2<f32> {
    return h2(w);
}
#endif
#else
#ifdef ROPE
@group(0) @binding(2) var<storage, read_write> kc: array<f32>;    // (slots * ctx, n_kv_heads * head_dim)
@group(0) @binding(3) var<storage, read_write> vc: array<f32>;    // (slots * ctx, n_kv_heads * head_dim)
#else
@group(0) @binding(2) var<storage, read> kc: array<f32>;          // (slots * ctx, n_kv_heads * head_dim)
@group(0) @binding(3) var<storage, read> vc: array<f32>;          // (slots * ctx, n_kv_heads * head_dim)
#endif
#endif
#endif
@group(0) @binding(4) var<storage, read_write> pos: array<i32>;   // (n)
@group(0) @binding(5) var<storage, read_write> seq: array<i32>;   // (n)
#ifdef SPLIT
// Each (row, head, part)'s unnormalised output, then its max and sum.
@group(0) @binding(6) var<storage, read_write> parts: array<f32>; // (n * n_heads * PARTS, head_dim + 2)
#else
@group(0) @binding(6) var<storage, read_write> out: array<f32>;   // (n, n_heads * head_dim)
#endif
// With Q8, and beside the rope's bindings (ROPE), which a split's parts
// leave unread (its merge rounds the output): Q8_BOUND.
#ifdef Q8_BOUND
@group(0) @binding(7) var<storage, read_write> xq: array<u32>;    // (n, n_heads * head_dim / 4) quants, 4 per word
@group(0) @binding(8) var<storage, read_write> xd: array<f32>;    // (n, n_heads * head_dim / 32) f16(d), widened
@group(0) @binding(9) var<storage, read_write> xs: array<f32>;    // (n, n_heads * head_dim / 32) f16(d · Σq), widened
#endif
#ifdef ROPE
// The rope's outputs and the cache writes' inputs (q, binding 1, is Q
// before its rope).
@group(0) @binding(10) var<storage, read_write> qo: array<f32>;   // (1, n_heads * head_dim) Q rotated
@group(0) @binding(11) var<storage, read_write> xk: array<f32>;   // (1, n_kv_heads * head_dim) K
@group(0) @binding(12) var<storage, read_write> ko: array<f32>;   // (1, n_kv_heads * head_dim) K rotated
@group(0) @binding(13) var<storage, read_write> xv: array<f32>;   // (1, n_kv_heads * head_dim) V
@group(0) @binding(14) var<storage, read_write> ff: array<f32>;   // (n_dims / 2) frequency factors, or a dummy
@group(0) @binding(15) var<storage, read_write> ids: array<i32>;  // (1) the new row's cache row
#endif

// Rounds to the cache type: f16 for an F16 cache.
fn rh(v: f32) -> f32 {
#ifdef FAST
    return v;
#endif
#ifdef KV_F16
    return f16_round(v);
#else
    return v;
#endif
}

fn rh4(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(rh(v.x), rh(v.y), rh(v.z), rh(v.w));
}

// A scaled score, capped as ggml caps it: cap · tanh(s · scale / cap).
fn capped(s: f32) -> f32 {
    let cap = P.softcap;
    let v = s * P.scale;
    if (cap <= 0.0) {
        return v;
    }
    let e = exp_rn(-2.0 * abs(v));
    return cap * sign(v) * div_rn(1.0 - e, 1.0 + e);
}

// Sums 4 × 8 lane accumulators of q·k as ggml's AVX2 vec_dot_f16 does:
// folded 0+2, 1+3, then together; lanes l + (l + 4); then (0+1) + (2+3).
fn fold_dot(a: array<f32, 32>) -> f32 {
    var v: array<f32, 8>;
    for (var l = 0u; l < 8u; l++) {
        v[l] = (a[l] + a[16u + l]) + (a[8u + l] + a[24u + l]);
    }
    return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

#ifndef KV_BLOCKS
// 4 cache values at element e (a multiple of 4).
fn k4(e: u32) -> vec4<f32> {
#ifdef KV_F16
    return vec4<f32>(kv2(kc[e / 2u]), kv2(kc[e / 2u + 1u]));
#else
    return vec4<f32>(kc[e], kc[e + 1u], kc[e + 2u], kc[e + 3u]);
#endif
}

fn v4(e: u32) -> vec4<f32> {
#ifdef KV_F16
    return vec4<f32>(kv2(vc[e / 2u]), kv2(vc[e / 2u + 1u]));
#else
    return vec4<f32>(vc[e], vc[e + 1u], vc[e + 2u], vc[e + 3u]);
#endif
}

// Value e of the key cache.
fn k1(e: u32) -> f32 {
#ifdef KV_F16
    return kv2(kc[e / 2u])[e % 2u];
#else
    return kc[e];
#endif
}
#endif
