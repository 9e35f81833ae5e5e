// Mat-vec for Q4_0 and Q8_0 weights on f32 activations (decode), on the
// repacked layout of the f32-activation mode (quant.wgsl's REPACKED:
// superblocks of 8 blocks whose quants are 16-byte words):
// out[t, r] = dot(w[r], x[t]). Decode reads every weight byte once, so the
// kernel is built to keep many bytes in flight: each invocation owns whole
// 32-value blocks (block b, b + WG, ...) of 4 rows at once, two blocks per
// step, reads each block's quants as one (Q4_0) or two (Q8_0) aligned
// 16-byte loads and the block's 32 activations as 8 vec4 loads shared by
// the 4 rows. The 4 row sums meet in one vec4 reduction, as in matvec.wgsl
// (same dispatch and parameters).
//
// Quants become floats without an integer conversion: a byte q or'ed into
// the mantissa of 2^23 is the float 2^23 + q exactly, and subtracting
// 2^23 + 8 (Q4_0) or 2^23 + 128 (Q8_0, after flipping the sign bit) gives
// q - 8 or the signed q exactly.
//
// Params: 0 m (rows of w), 1 k (cols, a multiple of 32), 2 n (tokens),
// 3 blocks per row, 4 row blocks (ceil(m / 4)), 5 out's row stride (m, or
// more when w is a part of a split weight), 6 out's first column.
//
// MULTI: up to 3 weights of one input in one dispatch (`Backend::matmuls`:
// Q, K, V; gate, up), their row blocks one after the other; weight i > 0
// is bound as wq{i} and writes out{i}. Params: 0 m, 1 k, 2 n, 3 blocks per
// row, 4 row blocks of w, 5 m1, 6 row blocks of w1, 7 m2, 8 row blocks of
// w2 (0: no third weight).
//
// The op before the mat-vec and the residual add after it, taken in
// (f32 mode; `Pending::MatVec`), each saving a dispatch per use:
// - IN_NORM: x is the row before an rms_norm with weight `aux`. The
//   sweep reads x · aux and sums x² on the way; the row's scale
//   1 / sqrt(mean + eps) multiplies the dot products at the end. The first
//   row block of each token also stores the normalised row (the norm's
//   output) in `xo`. Param EPS: eps.
// - IN_GLU (SILU_MUL or GELU_MUL): x is the gate, `aux` the up half; the
//   activations are act(gate) · up, stored in `xo` by the first row block.
// - RESID (single weight, whole rows): sum = res + out as well (sum may be
//   res, or out).

@group(0) @binding(1) var<storage, read> wq: array<vec4<u32>>;    // (m, k) repacked
#ifdef MULTI
@group(0) @binding(4) var<storage, read> wq1: array<vec4<u32>>;   // (m1, k) repacked
@group(0) @binding(5) var<storage, read_write> out1: array<f32>;  // (n, m1)
@group(0) @binding(6) var<storage, read> wq2: array<vec4<u32>>;   // (m2, k) repacked
@group(0) @binding(7) var<storage, read_write> out2: array<f32>;  // (n, m2)
#endif
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;     // (n, k / 4)
@group(0) @binding(3) var<storage, read_write> out: array<f32>;   // (n, m)
#ifdef IN_AUX
@group(0) @binding({{B_AUX}}) var<storage, read> aux: array<vec4<f32>>;       // norm weight (k / 4), or up (n, k / 4)
@group(0) @binding({{B_XO}}) var<storage, read_write> xo: array<vec4<f32>>;   // (n, k / 4)
#endif
#ifdef RESID
@group(0) @binding({{B_RES}}) var<storage, read_write> res: array<f32>;       // (n, m)
@group(0) @binding({{B_SUM}}) var<storage, read_write> sum: array<f32>;       // (n, m)
#endif

const NR: u32 = 4u;
const BIG: u32 = 0x4b000000u; // 2^23 as f32 bits

// Bytes 0..4 of w, each (byte & mask) ^ flip or'ed into 2^23, as floats
// minus `bias`.
fn bytes4(w: u32, mask: u32, flip: u32, bias: f32) -> vec4<f32> {
    let v = ((vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(mask)) ^ vec4<u32>(BIG | flip);
    return bitcast<vec4<f32>>(v) - bias;
}

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
#ifdef MULTI
    if (which == 1u) {
        return Blk(wq1[qi], wq1[q2], wq1[si]);
    }
    if (which == 2u) {
        return Blk(wq2[qi], wq2[q2], wq2[si]);
    }
#endif
    return Blk(wq[qi], wq[q2], wq[si]);
}

#ifdef TYPE_Q4_0
fn lo4(w: u32) -> vec4<f32> {
    return bytes4(w, 0xfu, 0u, 8388616.0);
}

// Σ (q - 8) · x over Q4_0 block b (words k), times its scale.
fn block_dot_of(k: Blk, b: u32, xs: array<vec4<f32>, 8>) -> f32 {
    let q = k.q;
    let d = scale_of(k.s, b);
    let s = (lo4(q.x) * xs[0] + lo4(q.y) * xs[1]) + (lo4(q.z) * xs[2] + lo4(q.w) * xs[3])
        + (lo4(q.x >> 4u) * xs[4] + lo4(q.y >> 4u) * xs[5])
        + (lo4(q.z >> 4u) * xs[6] + lo4(q.w >> 4u) * xs[7]);
    return d * ((s.x + s.y) + (s.z + s.w));
}
#endif

#ifdef TYPE_Q8_0
fn i8x4(w: u32) -> vec4<f32> {
    return bytes4(w, 0xffu, 0x80u, 8388736.0);
}

// Σ q · x over Q8_0 block b (words k), times its scale.
fn block_dot_of(k: Blk, b: u32, xs: array<vec4<f32>, 8>) -> f32 {
    let qa = k.q;
    let qb = k.q2;
    let d = scale_of(k.s, b);
    let s = (i8x4(qa.x) * xs[0] + i8x4(qa.y) * xs[1]) + (i8x4(qa.z) * xs[2] + i8x4(qa.w) * xs[3])
        + (i8x4(qb.x) * xs[4] + i8x4(qb.y) * xs[5])
        + (i8x4(qb.z) * xs[6] + i8x4(qb.w) * xs[7]);
    return d * ((s.x + s.y) + (s.z + s.w));
}
#endif

#ifdef IN_GLU
fn glu(g: vec4<f32>, u: vec4<f32>) -> vec4<f32> {
#ifdef GELU_MUL
    return vec4<f32>(cpu_gelu(g.x), cpu_gelu(g.y), cpu_gelu(g.z), cpu_gelu(g.w)) * u;
#else
    return vec4<f32>(cpu_silu(g.x), cpu_silu(g.y), cpu_silu(g.z), cpu_silu(g.w)) * u;
#endif
}
#endif

// IN_NORM: this invocation's sum of the squares of the values it read.
var<private> squares: f32;

// Activations c..c + 4 of the token at vec4 xb, as the dot products take
// them: x, x · norm weight (IN_NORM), or act(gate) · up (IN_GLU).
fn act4(xb: u32, c: u32) -> vec4<f32> {
    let v = x[xb + c];
#ifdef IN_NORM
    squares += dot(v, v);
    return v * aux[c];
#endif
#ifdef IN_GLU
    return glu(v, aux[xb + c]);
#endif
    return v;
}

// Block b's contribution to 4 rows (first blocks rb) of weight `which`,
// from the token's activations at vec4 xb.
fn rows4(which: u32, rb: vec4<u32>, b: u32, xb: u32) -> vec4<f32> {
    let c = b * 8u;
    let xs = array<vec4<f32>, 8>(
        act4(xb, c), act4(xb, c + 1u), act4(xb, c + 2u), act4(xb, c + 3u),
        act4(xb, c + 4u), act4(xb, c + 5u), act4(xb, c + 6u), act4(xb, c + 7u),
    );
    return vec4<f32>(
        block_dot_of(blk(which, rb.x + b), rb.x + b, xs),
        block_dot_of(blk(which, rb.y + b), rb.y + b, xs),
        block_dot_of(blk(which, rb.z + b), rb.z + b, xs),
        block_dot_of(blk(which, rb.w + b), rb.w + b, xs),
    );
}

// The first blocks of rows r0..r0 + 4 (nb blocks per row); rows past m
// (the last row block) repeat row m - 1 and are not stored.
fn firsts(r0: u32, m: u32, nb: u32) -> vec4<u32> {
    return min(vec4<u32>(r0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(m - 1u)) * nb;
}

// The 4 rows' sums over this invocation's blocks, two blocks a step so
// that both blocks' loads are in flight together.
fn sweep(which: u32, rb: vec4<u32>, nb: u32, xb: u32, lid: u32) -> vec4<f32> {
    var acc = vec4<f32>(0.0);
    var b = lid;
    for (; b + RED_WG < nb; b += 2u * RED_WG) {
        acc += rows4(which, rb, b, xb) + rows4(which, rb, b + RED_WG, xb);
    }
    if (b < nb) {
        acc += rows4(which, rb, b, xb);
    }
    return acc;
}

// After the sweep, for token t (activations at vec4 xb): the factor of its
// dot products, 1 / sqrt(mean(x²) + eps) with IN_NORM and 1 otherwise; the
// first row block (`first`) also stores the op's output in `xo`. Every
// invocation calls it (a workgroup reduction).
fn taken_in(xb: u32, first: bool, ln: Lane) -> f32 {
    var scale = 1.0;
#ifdef IN_NORM
    scale = 1.0 / sqrt(wg_sum(squares, ln) / f32(pu(1)) + pf({{EPS}}));
#endif
#ifdef IN_AUX
    if (first) {
        for (var c = ln.lid; c < pu(1) / 4u; c += RED_WG) {
#ifdef IN_NORM
            xo[xb + c] = x[xb + c] * scale * aux[c];
#else
            xo[xb + c] = glu(x[xb + c], aux[xb + c]);
#endif
        }
    }
#endif
    return scale;
}

#ifdef MULTI
@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wg_index(wid, nwg);
    let per_t = pu(4) + pu(6) + pu(8);
    if (g >= per_t * pu(2)) {
        return;
    }
    let t = g / per_t;
    // Which weight, and its row block: uniform over the workgroup.
    var gb = g % per_t;
    var which = 0u;
    var m = pu(0);
    if (gb >= pu(4)) {
        gb -= pu(4);
        which = 1u;
        m = pu(5);
        if (gb >= pu(6)) {
            gb -= pu(6);
            which = 2u;
            m = pu(7);
        }
    }
    let r0 = gb * NR;
    let nb = pu(3);
    let xb = t * nb * 8u;
    let sums = wg_sum4(sweep(which, firsts(r0, m, nb), nb, xb, ln.lid), ln);
    let total = sums * taken_in(xb, g % per_t == 0u, ln);
    if (ln.lid == 0u) {
        for (var r = 0u; r < NR; r++) {
            let o = t * m + r0 + r;
            if (r0 + r < m) {
                if (which == 0u) {
                    out[o] = total[r];
                } else if (which == 1u) {
                    out1[o] = total[r];
                } else {
                    out2[o] = total[r];
                }
            }
        }
    }
}
#endif

#ifndef MULTI
@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wg_index(wid, nwg);
    let m = pu(0);
    let blocks = pu(4);
    if (g >= blocks * pu(2)) {
        return;
    }
    let r0 = (g % blocks) * NR;
    let t = g / blocks;
    let nb = pu(3);
    let xb = t * nb * 8u;
    let sums = wg_sum4(sweep(0u, firsts(r0, m, nb), nb, xb, ln.lid), ln);
    let total = sums * taken_in(xb, g % blocks == 0u, ln);
    if (ln.lid == 0u) {
        for (var r = 0u; r < NR; r++) {
            if (r0 + r < m) {
                let o = t * pu(5) + pu(6) + r0 + r;
                out[o] = total[r];
#ifdef RESID
                sum[o] = res[o] + total[r];
#endif
            }
        }
    }
}
#endif
