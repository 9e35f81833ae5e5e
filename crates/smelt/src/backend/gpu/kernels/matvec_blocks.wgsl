// Mat-vec for Q4_0 and Q8_0 weights (decode) in the f32-activation mode,
// on its repacked layout (REPACKED, quant.wgsl's: superblocks of 8 blocks
// whose quants are 16-byte words), with the activations rounded to Q8
// blocks first (quantize.wgsl's Q8, or inside the rms_norm or GLU before),
// as llama.cpp's GPU mat-vecs round them (the other legacy and K-quants
// alike, in their GGUF layout: matvec_blocks_gguf.wgsl's `rows4`, whose
// "blocks" are units of 32 or 64 values):
//
//   out[t, r] = Σ_b d_w · d_x · isum_b,   isum_b = Σ (q_w − 8) · q_x  (Q4_0; Q8_0: Σ q_w · q_x)
//
// with isum_b the block's exact integer dot product, four products per
// packed 4×8-bit dot (`dot4I8Packed`: one instruction where the device has
// integer dot products, Vulkan 1.3 and Metal); Q4_0's −8 · Σq_x comes from
// the same dots against bytes of 1, once per block for the 4 rows.
// Decoding nibbles to f32 and multiplying in f32 takes ~5 instructions per
// weight, enough to make a mat-vec compute-bound; here it is under one.
//
// Each invocation owns whole 32-value blocks (block b, b + WG, ...) of 4
// rows at once, four blocks per step (then two, then one); a block's 8
// activation words (two 16-byte loads) and its scales are shared by the 4
// rows. The 4 row sums
// meet in one vec4 reduction.
//
// MULTI: up to 3 weights of one input in one dispatch (`Backend::matmuls`:
// Q, K, V; gate, up), their row blocks one after the other; weight i > 0
// is bound as wq{i} and writes out{i}. The third may be of another K-quant
// than the first two (matvec_blocks_gguf.wgsl's DOT2).
//
// SINGLE (one weight): 4 rows a workgroup, or with ROWS16 16.
//
// GLU: gate (wq) and up (wq1) of one input, act = silu(gate) · up (or
// GELU), a workgroup per 32 rows of both, and with `round_q8` the Q8
// rounding of act for the down mat-vec (`Pending::GateUp`).
//
// RESID (single weight, whole rows of out): the residual add after the
// mat-vec in the same dispatch (`Pending::MatVec`), sum = res + out; sum
// may be res, or out.
//
// ID (matmul_id.wgsl's decode in the f32 mode): pair p = t·K + j of the
// n = tokens × K pairs, of its expert ids[p], whose rows are rows
// ids[p]·m.. of w's stack, on activation row p / x_div; out is (n, m).
//
// NORM (with MULTI or GLU, f32 mode): the rms_norm before the mat-vec
// taken in (`Pending::Norm`, `GpuBackend::norm_for_matvec`) instead of
// its Q8 activations: each workgroup normalises its token's row of `nx`
// and rounds it to Q8 in workgroup memory as norm.wgsl's RmsNormQ8 does
// (the same sums of squares over workgroups of the same size, the same
// words), and the first workgroup of a token writes the norm's output
// `nout`; the Q8 rounding is not stored. One dispatch fewer, for reading
// the row once per workgroup, from the cache: MULTI then takes 16 rows of
// one weight a workgroup (4 quads), not 4, so its row groups are of 16
// rows. Rows of up to NORM_BLOCKS blocks.

struct Params {
    m: u32,          // rows of w
    k: u32,          // values per row (a multiple of 32)
    n: u32,          // tokens
    row_blocks: u32, // blocks per row
    groups_m: u32,   // row groups of w (MULTI: per token)
    out_stride: u32, // out's row stride (SINGLE): m, or more for a part of a split weight
    out_col0: u32,   // out's first column (SINGLE)
    m1: u32,         // MULTI: rows of w1
    groups1: u32,    // its row groups
    m2: u32,         // rows of w2
    groups2: u32,    // its row groups (0: no third weight)
    eps: f32,        // NORM: the norm's eps
    round_q8: u32,   // GLU: 1 rounds act to Q8
    x_div: u32,      // ID: pairs per token row of the activations (K or 1)
    n_expert: u32,   // ID: experts in w's stack
}
@group(0) @binding(0) var<uniform> P: Params;

@group(0) @binding(1) var<storage, read> wq: array<{{WQ}}>;        // (m, k) repacked, or GGUF blocks
#ifdef NORM
@group(0) @binding(2) var<storage, read> nx: array<f32>;           // (n, k) the norm's input
@group(0) @binding(3) var<storage, read> nw: array<f32>;           // (k) its weight
@group(0) @binding({{NOUT}}) var<storage, read_write> nout: array<f32>; // (n, k) its output
#else
@group(0) @binding(2) var<storage, read> aq: array<vec4<u32>>;     // (n, k / 16) Q8 quants, 4 per word
@group(0) @binding(3) var<storage, read> ad: array<f32>;           // (n, k / 32) d
#endif
@group(0) @binding(4) var<storage, read_write> out: array<f32>;    // (n, m)
#ifdef W1
@group(0) @binding(5) var<storage, read> wq1: array<{{WQ}}>;       // (m1, k) as wq
@group(0) @binding(6) var<storage, read_write> out1: array<f32>;   // (n, m1)
#endif
#ifdef MULTI
@group(0) @binding(7) var<storage, read> wq2: array<{{WQ}}>;       // (m2, k) as wq
@group(0) @binding(8) var<storage, read_write> out2: array<f32>;   // (n, m2)
#endif
#ifdef GLU
@group(0) @binding(7) var<storage, read_write> act: array<f32>;    // (n, m) act(out) · out1
@group(0) @binding(8) var<storage, read_write> xq: array<u32>;     // (n, m / 4) act's Q8 quants
@group(0) @binding(9) var<storage, read_write> xd: array<f32>;     // (n, m / 32) f16(d), widened
@group(0) @binding(10) var<storage, read_write> xs: array<f32>;    // (n, m / 32) f16(d · Σq), widened
#endif
#ifdef ID
@group(0) @binding(5) var<storage, read> ids: array<i32>;          // (n) expert of each pair
#endif
#ifdef RESID
@group(0) @binding(5) var<storage, read_write> res: array<f32>;    // (n, m)
@group(0) @binding(6) var<storage, read_write> sum: array<f32>;    // (n, m)
#endif

const NR: u32 = 4u;

// A block of the token's activations: quants 0..16 and 16..32, d, (Q4_0)
// 8 · Σq, and (matvec_blocks_gguf.wgsl's ACT_SUMS) d · Σq.
struct Act {
    lo: vec4<u32>,
    hi: vec4<u32>,
    d: f32,
    sum8: i32,
    s: f32,
}

#ifdef REPACKED
// The scale of block b from its superblock's scale word s (8 halves).
fn scale_of(s: vec4<u32>, b: u32) -> f32 {
    let dd = unpack2x16float(s[(b % 8u) / 2u]);
    return select(dd.x, dd.y, (b & 1u) == 1u);
}

// A block's words: quants (q2: Q8_0's second half) and its superblock's
// scales.
struct Blk {
    q: vec4<u32>,
    q2: vec4<u32>,
    s: vec4<u32>,
}

#ifdef TYPE_Q4_0
const SB_WORDS: u32 = 9u;
const Q_WORDS: u32 = 1u;
#else
const SB_WORDS: u32 = 17u;
const Q_WORDS: u32 = 2u;
#endif

// Block b of weight `which` (0 unless MULTI).
fn blk(which: u32, b: u32) -> Blk {
    let qi = SB_WORDS * (b / 8u) + Q_WORDS * (b % 8u);
    let si = SB_WORDS * (b / 8u) + 8u * Q_WORDS;
    // Q4_0 has no second half: its q2 is q again, unused.
    let q2 = qi + Q_WORDS - 1u;
#ifdef W1
    if (which == 1u) {
        return Blk(wq1[qi], wq1[q2], wq1[si]);
    }
#endif
#ifdef MULTI
    if (which == 2u) {
        return Blk(wq2[qi], wq2[q2], wq2[si]);
    }
#endif
    return Blk(wq[qi], wq[q2], wq[si]);
}

#ifdef TYPE_Q4_0
const NIB: u32 = 0x0f0f0f0fu;

// Σ (q − 8) · x over Q4_0 block b (words k): quants' low nibbles are
// values 0..16, high nibbles 16..32, each as an unsigned byte.
fn block_dot_of(k: Blk, b: u32, a: Act) -> f32 {
    let q = k.q;
    let lo = dot4I8Packed(q.x & NIB, a.lo.x) + dot4I8Packed(q.y & NIB, a.lo.y)
        + dot4I8Packed(q.z & NIB, a.lo.z) + dot4I8Packed(q.w & NIB, a.lo.w);
    let hi = dot4I8Packed((q.x >> 4u) & NIB, a.hi.x) + dot4I8Packed((q.y >> 4u) & NIB, a.hi.y)
        + dot4I8Packed((q.z >> 4u) & NIB, a.hi.z) + dot4I8Packed((q.w >> 4u) & NIB, a.hi.w);
    return scale_of(k.s, b) * a.d * f32(lo + hi - a.sum8);
}
#endif

#ifdef TYPE_Q8_0
// Σ q · x over Q8_0 block b (words k).
fn block_dot_of(k: Blk, b: u32, a: Act) -> f32 {
    let qa = k.q;
    let qb = k.q2;
    let lo = dot4I8Packed(qa.x, a.lo.x) + dot4I8Packed(qa.y, a.lo.y)
        + dot4I8Packed(qa.z, a.lo.z) + dot4I8Packed(qa.w, a.lo.w);
    let hi = dot4I8Packed(qb.x, a.hi.x) + dot4I8Packed(qb.y, a.hi.y)
        + dot4I8Packed(qb.z, a.hi.z) + dot4I8Packed(qb.w, a.hi.w);
    return scale_of(k.s, b) * a.d * f32(lo + hi);
}
#endif
#endif

#ifdef NORM
// The longest row NORM takes: 4096 values (16 KB of workgroup memory in
// all with the GLU's).
const NORM_BLOCKS: u32 = 128u;
var<workgroup> nq: array<vec4<u32>, 2u * NORM_BLOCKS>; // the row's quants
var<workgroup> nd: array<f32, NORM_BLOCKS>;            // f16(d), widened

// Token t's row of nx normalised (times nw) into nout when `writes`, and
// rounded to Q8 blocks in nq and nd; norm.wgsl's FAST path with Q8, word
// for word (RED_WG is its WG_ROW). Every invocation calls it (barriers).
fn norm_row(ln: Lane, t: u32, writes: bool) {
    let k = P.k;
    let b = t * k;
    let lid = ln.lid;
    var s4 = vec4<f32>(0.0);
    var c = lid;
    for (; c + 3u * RED_WG < k; c += 4u * RED_WG) {
        let v = vec4<f32>(nx[b + c], nx[b + c + RED_WG], nx[b + c + 2u * RED_WG], nx[b + c + 3u * RED_WG]);
        s4 = fma(v, v, s4);
    }
    for (; c < k; c += RED_WG) {
        let v = nx[b + c];
        s4.x = fma(v, v, s4.x);
    }
    let mean = wg_sum((s4.x + s4.y) + (s4.z + s4.w), ln) / f32(k);
    let scale = div_rn(1.0, sqrt_rn(mean + P.eps));
    // One invocation per word of 4 values, RED_WG words at a time.
    for (var w0 = 0u; w0 < k / 4u; w0 += RED_WG) {
        let c4 = w0 + lid;
        let live = c4 < k / 4u;
        var v = vec4<f32>(0.0);
        if (live) {
            let c = 4u * c4;
            v = vec4<f32>(nx[b + c] * scale * nw[c], nx[b + c + 1u] * scale * nw[c + 1u],
                nx[b + c + 2u] * scale * nw[c + 2u], nx[b + c + 3u] * scale * nw[c + 3u]);
            if (writes) {
                nout[b + c] = v.x;
                nout[b + c + 1u] = v.y;
                nout[b + c + 2u] = v.z;
                nout[b + c + 3u] = v.w;
            }
        }
        let q = q8_round(v, lid);
        if (live) {
            nq[c4 / 4u][c4 % 4u] = q.word;
            if (c4 % 8u == 0u) {
                nd[c4 / 8u] = f16_round(q.d);
            }
        }
    }
    workgroupBarrier();
}
#endif

// Activation block b of the token whose blocks start at xb: from memory,
// or (NORM) from the workgroup's rounding of its row.
fn act_block(xb: u32, b: u32) -> Act {
#ifdef NORM
    return Act(nq[2u * b], nq[2u * b + 1u], nd[b], 0, 0.0);
#else
    let xi = xb + b;
    return Act(aq[2u * xi], aq[2u * xi + 1u], ad[xi], 0, 0.0);
#endif
}

#ifdef REPACKED
// Block b's contribution to 4 rows (first blocks rb) of weight `which`,
// from the token's activation blocks starting at block xb.
fn rows4(which: u32, rb: vec4<u32>, b: u32, xb: u32) -> vec4<f32> {
    var a = act_block(xb, b);
#ifdef TYPE_Q4_0
    let ones = 0x01010101u;
    a.sum8 = 8 * (dot4I8Packed(a.lo.x, ones) + dot4I8Packed(a.lo.y, ones) + dot4I8Packed(a.lo.z, ones)
        + dot4I8Packed(a.lo.w, ones) + dot4I8Packed(a.hi.x, ones) + dot4I8Packed(a.hi.y, ones)
        + dot4I8Packed(a.hi.z, ones) + dot4I8Packed(a.hi.w, ones));
#endif
    return vec4<f32>(
        block_dot_of(blk(which, rb.x + b), rb.x + b, a),
        block_dot_of(blk(which, rb.y + b), rb.y + b, a),
        block_dot_of(blk(which, rb.z + b), rb.z + b, a),
        block_dot_of(blk(which, rb.w + b), rb.w + b, a),
    );
}
#endif

// The first blocks of rows r0..r0 + 4 (nb blocks per row); rows past m
// (the last row block) repeat row m - 1 and are not stored.
fn firsts(r0: u32, m: u32, nb: u32) -> vec4<u32> {
    return min(vec4<u32>(r0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(m - 1u)) * nb;
}

// The 4 rows' sums over blocks b0, b0 + st, ... of a row, (REPACKED) four blocks a
// step so that their loads are in flight together.
fn sweep(which: u32, rb: vec4<u32>, nb: u32, xb: u32, b0: u32, st: u32) -> vec4<f32> {
    var acc = vec4<f32>(0.0);
    var b = b0;
#ifndef REPACKED
    // The GGUF-layout types' units load many words each already; one a
    // step also keeps their kernels small enough for lavapipe to compile.
    for (; b < nb; b += st) {
        acc += rows4(which, rb, b, xb);
    }
#else
    for (; b + 3u * st < nb; b += 4u * st) {
        acc += (rows4(which, rb, b, xb) + rows4(which, rb, b + st, xb))
            + (rows4(which, rb, b + 2u * st, xb) + rows4(which, rb, b + 3u * st, xb));
    }
    for (; b + st < nb; b += 2u * st) {
        acc += rows4(which, rb, b, xb) + rows4(which, rb, b + st, xb);
    }
    if (b < nb) {
        acc += rows4(which, rb, b, xb);
    }
#endif
    return acc;
}

#ifdef MULTI
// Group gb of a token's groups (of rows, per weight):
// which weight, its rows, and the group within it. Uniform over the
// workgroup.
struct Group {
    which: u32,
    m: u32,
    gb: u32,
}

fn group_of(gb: u32) -> Group {
    if (gb < P.groups_m) {
        return Group(0u, P.m, gb);
    }
    if (gb < P.groups_m + P.groups1) {
        return Group(1u, P.m1, gb - P.groups_m);
    }
    return Group(2u, P.m2, gb - P.groups_m - P.groups1);
}

// Token t's sums of rows r0..r0 + 4 of weight p.which into its output
// (rows past p.m are not stored).
fn store4(p: Group, t: u32, r0: u32, total: vec4<f32>) {
    for (var r = 0u; r < NR; r++) {
        let o = t * p.m + r0 + r;
        if (r0 + r < p.m) {
            if (p.which == 0u) {
                out[o] = total[r];
            } else if (p.which == 1u) {
                out1[o] = total[r];
            } else {
                out2[o] = total[r];
            }
        }
    }
}

#ifdef NORM
// 16 rows of one weight a workgroup: 4 quads of rows, PER invocations
// each, whose sums meet in a tree over workgroup memory.
const QUADS: u32 = 4u;
const PER: u32 = RED_WG / QUADS;
var<workgroup> part: array<vec4<f32>, RED_WG>;

@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wg_index(wid, nwg);
    let per_t = P.groups_m + P.groups1 + P.groups2;
    // Past the last group (a grid spilled into y): clamped, nothing
    // stored (no early return before the barriers).
    let live = g < per_t * P.n;
    let tg = token_group(min(g, per_t * P.n - 1u), P.n);
    let t = tg.t;
    let gb = tg.group;
    norm_row(ln, t, live && gb == 0u);
    let p = group_of(gb);
    let lid = ln.lid;
    let r0 = (p.gb * QUADS + lid / PER) * NR;
    let nb = P.row_blocks;
    part[lid] = sweep(p.which, firsts(r0, p.m, nb), nb, 0u, lid % PER, PER);
    for (var s = PER / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (lid % PER < s) {
            part[lid] += part[lid + s];
        }
    }
    if (live && lid % PER == 0u) {
        store4(p, t, r0, part[lid]);
    }
}
#else
@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wg_index(wid, nwg);
    let per_t = P.groups_m + P.groups1 + P.groups2;
    if (g >= per_t * P.n) {
        return;
    }
    let tg = token_group(g, P.n);
    let t = tg.t;
    let p = group_of(tg.group);
    let r0 = p.gb * NR;
    let nb = P.row_blocks;
    let total = wg_sum4(sweep(p.which, firsts(r0, p.m, nb), nb, t * (P.k / 32u), ln.lid, RED_WG), ln);
    if (ln.lid == 0u) {
        store4(p, t, r0, total);
    }
}
#endif
#endif

#ifdef SINGLE
// ROWS16: 4 quads of rows a workgroup, RED_WG / 4 invocations each, for
// rows of few units (a K-quant row of 4096 values is 64), which would
// leave most of a 4-row workgroup idle.
#ifdef ROWS16
const QUADS: u32 = 4u;
#else
const QUADS: u32 = 1u;
#endif
const PER: u32 = RED_WG / QUADS;

@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wg_index(wid, nwg);
    let m = P.m;
    let blocks = P.groups_m;
    if (g >= blocks * P.n) {
        return;
    }
    let tg = token_group(g, P.n);
    let t = tg.t;
    let nb = P.row_blocks;
    let lid = ln.lid;
    let r0 = (tg.group * QUADS + lid / PER) * NR;
    let part = sweep(0u, firsts(r0, m, nb), nb, t * (P.k / 32u), lid % PER, PER);
#ifdef ROWS16
    // The quads' sums meet in a tree over workgroup memory.
    red4[lid] = part;
    for (var s = PER / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (lid % PER < s) {
            red4[lid] += red4[lid + s];
        }
    }
    let total = red4[lid];
    if (lid % PER == 0u) {
#else
    let total = wg_sum4(part, ln);
    if (lid == 0u) {
#endif
        for (var r = 0u; r < NR; r++) {
            if (r0 + r < m) {
                let o = t * P.out_stride + P.out_col0 + r0 + r;
                out[o] = total[r];
#ifdef RESID
                sum[o] = res[o] + total[r];
#endif
            }
        }
    }
}
#endif

#ifdef ID
@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wg_index(wid, nwg);
    let m = P.m;
    let blocks = P.groups_m;
    if (g >= blocks * P.n) {
        return;
    }
    let r0 = (g % blocks) * NR;
    let p = g / blocks;
    let nb = P.row_blocks;
    // Clamped: a kernel cannot refuse an id, and must not read outside w.
    let e = u32(clamp(ids[p], 0, i32(P.n_expert) - 1));
    let rb = firsts(r0, m, nb) + vec4<u32>(e * m * nb);
    let total = wg_sum4(sweep(0u, rb, nb, (p / P.x_div) * (P.k / 32u), ln.lid, RED_WG), ln);
    if (ln.lid == 0u) {
        for (var r = 0u; r < NR; r++) {
            if (r0 + r < m) {
                out[p * m + r0 + r] = total[r];
            }
        }
    }
}
#endif

#ifdef GLU
// 32 rows of each weight (gate rows 0..32 and up rows 32..64) for the GLU:
// 16 quads of rows, PER invocations each (the 8b model's gate and up,
// 128 blocks a row, took ~1.4× the time of the separate mat-vec and GLU
// with 8 invocations a quad: too few loads in flight).
const PER: u32 = RED_WG / 16u;
var<workgroup> glu_part: array<vec4<f32>, RED_WG>;
var<workgroup> glu_rows: array<f32, 64>;

@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let lid = ln.lid;
    let g = wg_index(wid, nwg);
    let m = P.m;
    let groups = m / 32u;
    // Past the last group (a grid spilled into y): clamped, nothing stored.
    let tg = token_group(min(g, groups * P.n - 1u), P.n);
    let r0 = tg.group * 32u;
    let t = tg.t;
#ifdef NORM
    norm_row(ln, t, g < groups * P.n && r0 == 0u);
#endif
    let nb = P.row_blocks;
    // Invocation lid: quad lid / PER of the 16 (8 of gate rows, 8 of up
    // rows), blocks lid % PER, lid % PER + PER, ... of its 4 rows.
    let quad = lid / PER;
    let which = quad / 8u;
    let rb = firsts(r0 + 4u * (quad % 8u), m, nb);
    glu_part[lid] = sweep(which, rb, nb, t * (P.k / 32u), lid % PER, PER);
    workgroupBarrier();
    if (lid < 64u) {
        var v = 0.0;
        for (var l = 0u; l < PER; l++) {
            v += glu_part[(lid / 4u) * PER + l][lid % 4u];
        }
        glu_rows[lid] = v;
        let live_row = g < groups * P.n;
        if (live_row && lid < 32u) {
            out[t * m + r0 + lid] = v;
        } else if (live_row) {
            out1[t * m + r0 + lid - 32u] = v;
        }
    }
    workgroupBarrier();
    // One Q8 block: 8 invocations of 4 values each.
    let live = lid < 8u && g < groups * P.n;
    var v = vec4<f32>(0.0);
    if (live) {
        for (var e = 0u; e < 4u; e++) {
            let i = 4u * lid + e;
#ifdef SILU_MUL
            v[e] = cpu_silu(glu_rows[i]) * glu_rows[32u + i];
#else
            v[e] = cpu_gelu(glu_rows[i]) * glu_rows[32u + i];
#endif
            act[t * m + r0 + i] = v[e];
        }
    }
    q8_store(v, lid, live && P.round_q8 == 1u, (t * m + r0) / 4u + lid);
}
#endif
