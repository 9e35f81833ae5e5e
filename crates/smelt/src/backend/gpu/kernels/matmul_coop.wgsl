// Tiled matmul for prefill on cooperative matrices (tensor cores, Apple's
// simdgroup matrices): out[t, r] = dot(w[r], x[t]) for n tokens, with f16
// operands and f32 sums.
//
// As matrices, OUT (n × m) = X (n × k) · Wᵀ (k × m): X is the A operand,
// Wᵀ the B operand, and each workgroup computes a TN (tokens) × TM (rows)
// tile of OUT as fragments of FS × FS. Its SR × ST subgroups (of 32) form
// a grid; each holds FM × FN accumulators (TM / SR rows × TN / ST tokens).
//
// The activations come as packed f16 (rounded once per input by the host's
// copy, not once per tile of rows: `GpuBackend::half_input`), two values a
// word, in blocks of 32 values along k with the same block of all n tokens
// together: a step's activation tile is one run of memory, which its
// invocations read in order (as rows of n × k, each token's 64 bytes would
// be a run of their own, and the loads take longer).
//
// Per step of TK = 32 along k, the workgroup decodes the weight tile
// from its GGUF blocks (`de8`, 8 values per call; for Q4_0 `de8h`, in f16
// arithmetic, about half the staging's instructions of `de8`)
// and widens the activations' words, both into workgroup memory as [row
// or token][k] with LDS halves per row, stored V halves at a time; each
// subgroup then loads its fragments from there and multiplies. The next
// step's activation words and the words of its weight blocks (`ld8`:
// decoded when staged, which holds fewer registers than the values and
// waits on no load) are read into registers before this step's
// multiplies, so their loads are in flight meanwhile. (Widening f16 pairs
// to f32 and rounding them back is exact; WGSL has no bitcast of a word to
// two f16 that naga 30 accepts, and `x` bound as f16, as
// `array<vec4<f16>>` or as a 16-byte struct of two, makes the GEMMs
// slower: docs/perf-notes.md.)
// At the end each subgroup stages one accumulator at a time in workgroup
// memory and writes the part inside (n, m) to `out`, so no dimension needs
// to be a multiple of the tile. k must be a multiple of 32 (the host checks).
//
// Built with FS = 16 where the adapter has 16×16×16 f16 → f32 (Vulkan on
// NVIDIA, AMD, Intel) or FS = 8 (Metal's simdgroup matrices, whose loads
// take scalar pointers: V = 1).
//
// SPLIT (huge or short tiles of a matmul whose tiles are too few): k in
// `parts` parts of `k_part` each, the first part's workgroups (`part` 0)
// writing `out` as above, part p's their sums to `sums1` at (p - 1, n, m),
// which the host then adds to `out` in order of p.
//
// MULTI (repacked types): up to 3 weights of one input in one dispatch
// (`Backend::matmuls`: Q, K, V; gate, up), their tiles along m one after
// the other, so the small K and V projections fill the GPU together with
// Q; weight i > 0 is bound as wq{i} and writes all of out{i}.
// With JOINT the weights are side by side in one buffer
// (`Buffers::load_joined`), bound once as wq, weight i from its first block
// (first0, first1, first2): a load then needs no branch on the weight,
// which costs the multi GEMMs ~25%.
//
// GLU (repacked types): gate and up joined in wq (from blocks first0 and
// first1), and a tile's rows gate and up rows of the same TM / 2 features in
// turns of FS: a subgroup's fragment rows 2i and 2i + 1 are then the gate
// and up of the same features, which `glu_emit` stores (`writes` bit 2)
// with act = op(gate) · up (bit 0) and act as the next coop matmul's f16
// blocks (bit 1), where a `GluHalf` dispatch would read gate and up back.
// `groups_m` counts tiles along the features (m, a multiple of 32).

struct Params {
    m: u32,          // rows of w
    k: u32,          // values per row (a multiple of 32)
    n: u32,          // tokens
    row_bytes: u32,  // w's row stride
    groups_m: u32,   // tiles along m (MULTI: of all weights; GLU: of features)
    out_stride: u32, // out's row stride: m, or more for a part of a split weight
    out_col0: u32,   // out's first column
    k_part: u32,     // SPLIT: k of each part
    m1: u32,         // MULTI: rows of w1
    m2: u32,         // rows of w2 (0: none)
    tile1: u32,      // w1's first tile
    tile2: u32,      // w2's first tile
    first0: u32,     // JOINT, GLU: the block where w (gate) starts in wq
    first1: u32,     // where w1 (up) starts
    first2: u32,     // where w2 starts
    writes: u32,     // GLU: bit 0 act, bit 1 its f16 blocks, bit 2 gate and up are written
    parts: u32,      // SPLIT: parts of k
}
@group(0) @binding(0) var<uniform> P: Params;

@group(0) @binding(1) var<storage, read> wq: array<{{WQ}}>;        // (m, k) in TYPE
@group(0) @binding(2) var<storage, read> x: array<vec4<u32>>;   // (k / 32, n, 4) of 8 f16
@group(0) @binding(3) var<storage, read_write> out: array<f32>; // (n, m)
#ifdef SPLIT
@group(0) @binding(4) var<storage, read_write> sums1: array<f32>; // (parts - 1, n, m)
#endif
#ifdef MULTI
#ifdef JOINT
@group(0) @binding(4) var<storage, read_write> out1: array<f32>; // (n, m1)
@group(0) @binding(5) var<storage, read_write> out2: array<f32>; // (n, m2)
#else
@group(0) @binding(4) var<storage, read> wq1: array<{{WQ}}>;       // (m1, k)
@group(0) @binding(5) var<storage, read_write> out1: array<f32>; // (n, m1)
@group(0) @binding(6) var<storage, read> wq2: array<{{WQ}}>;       // (m2, k)
@group(0) @binding(7) var<storage, read_write> out2: array<f32>; // (n, m2)
#endif
#endif
#ifdef GLU
@group(0) @binding(4) var<storage, read_write> out1: array<f32>;   // (n, m) up
@group(0) @binding(5) var<storage, read_write> act: array<f32>;    // (n, m)
@group(0) @binding(6) var<storage, read_write> halves: array<u32>; // (m / 32, n, 32) f16 pairs
#endif
// The weight this workgroup's rows are of (MULTI's i; else 0), which
// quant.wgsl's loads read; with SPLIT the part of k (parts: past the
// tiles).
var<private> part: u32;
// The block where the weight's rows start in wq (JOINT; else 0).
var<private> first_block: u32;

const FS: u32 = {{FS}}u;
const FM: u32 = {{FM}}u;
const FN: u32 = {{FN}}u;
const SR: u32 = {{SR}}u;
const ST: u32 = {{ST}}u;
const TM: u32 = SR * FM * FS;
const TN: u32 = ST * FN * FS;
const TK: u32 = 32u;
const WG: u32 = SR * ST * 32u;
// Halves per row of a staged tile: TK plus 8 of padding, which keeps
// fragment rows 16-byte aligned and spreads them over the banks.
const LDS: u32 = TK + 8u;
// Halves per element of the staged tiles.
const V: u32 = {{V}}u;
// dq8 calls and activation words of 8 values per invocation and step.
const NW: u32 = TM * (TK / 8u) / WG;
const NX: u32 = TN * (TK / 8u) / WG;

var<workgroup> ws: array<{{LT}}, TM * LDS / V>; // weight rows × k
var<workgroup> xs: array<{{LT}}, TN * LDS / V>; // tokens × k
var<workgroup> cs: array<f32, SR * ST * FS * FS>; // one accumulator per subgroup

// Stores 4 values at half h (a multiple of 4) of a staged tile.
fn put_w(h: u32, v: vec4<f16>) {
#ifdef LV4
    ws[h / 4u] = v;
#else
    for (var e = 0u; e < 4u; e++) {
        ws[h + e] = v[e];
    }
#endif
}

fn put_x(h: u32, v: vec4<f16>) {
#ifdef LV4
    xs[h / 4u] = v;
#else
    for (var e = 0u; e < 4u; e++) {
        xs[h + e] = v[e];
    }
#endif
}

// One step's weights and activations in registers: the ld8 calls and
// activation words of invocation lid, in the order `stage` stores them.
struct Step {
    w: array<R8, NW>,
    x: array<vec4<u32>, NX>,
}

fn fetch(lid: u32, k0: u32, r0: u32, t0: u32, m: u32) -> Step {
    let n = P.n;
    var s: Step;
    for (var c = 0u; c < NW; c++) {
        let i = lid + c * WG;
#ifdef GLU
        // Tile row i / 4: gate or up row of feature r0 + ....
        let tr = i / (TK / 8u);
        let r = min(r0 + (tr / (2u * FS)) * FS + tr % FS, m - 1u);
        let first = select(P.first0, P.first1, (tr / FS) % 2u == 1u);
#else
        let r = min(r0 + i / (TK / 8u), m - 1u);
        let first = first_block;
#endif
        s.w[c] = ld8(first + r * P.row_bytes, k0 / 8u + i % (TK / 8u));
    }
    for (var c = 0u; c < NX; c++) {
        let i = lid + c * WG;
        let t = min(t0 + i / (TK / 8u), n - 1u);
        s.x[c] = x[((k0 / TK) * n + t) * (TK / 8u) + i % (TK / 8u)];
    }
    return s;
}

fn stage(lid: u32, s: Step) {
    for (var c = 0u; c < NW; c++) {
        let i = lid + c * WG;
        let h = (i / (TK / 8u)) * LDS + 8u * (i % (TK / 8u));
#ifdef HALF_DECODE
        let v = de8h(s.w[c], i % (TK / 8u));
        put_w(h, v.a);
        put_w(h + 4u, v.b);
#else
        let v = de8(s.w[c], i % (TK / 8u));
        put_w(h, vec4<f16>(v.a));
        put_w(h + 4u, vec4<f16>(v.b));
#endif
    }
    for (var c = 0u; c < NX; c++) {
        let i = lid + c * WG;
        let h = (i / (TK / 8u)) * LDS + 8u * (i % (TK / 8u));
        let q = s.x[c];
        put_x(h, vec4<f16>(vec4<f32>(unpack2x16float(q.x), unpack2x16float(q.y))));
        put_x(h + 4u, vec4<f16>(vec4<f32>(unpack2x16float(q.z), unpack2x16float(q.w))));
    }
}

// Fragment rows i of this subgroup's weights (the B operand) and tokens j
// of its activations (A), at step kk of the staged tiles.
fn frag_b(sr: u32, i: u32, kk: u32) -> coop_mat{{FS}}x{{FS}}<f16, B> {
    return coopLoad<coop_mat{{FS}}x{{FS}}<f16, B>>(&ws[((sr + i * FS) * LDS + kk) / V], LDS / V);
}

fn frag_a(st: u32, j: u32, kk: u32) -> coop_mat{{FS}}x{{FS}}<f16, A> {
    return coopLoadT<coop_mat{{FS}}x{{FS}}<f16, A>>(&xs[((st + j * FS) * LDS + kk) / V], LDS / V);
}

// Writes accumulator f (tokens f / FM, rows f % FM of the subgroup's
// corner), staged at cs[c0..], inside (n, m) to `out` (MULTI: its part's).
fn emit(f: u32, c0: u32, tb: u32, rb: u32, sl: u32, sgs: u32, m: u32) {
    workgroupBarrier();
    let t1 = tb + (f / FM) * FS;
    let r1 = rb + (f % FM) * FS;
    for (var e = sl; e < FS * FS; e += sgs) {
        let t = t1 + e / FS;
        let r = r1 + e % FS;
        if (t < P.n && r < m) {
#ifdef SPLIT
            if (part != 0u) {
                if (part < P.parts) {
                    sums1[((part - 1u) * P.n + t) * m + r] = cs[c0 + e];
                }
                continue;
            }
#endif
#ifdef MULTI
            if (part == 1u) {
                out1[t * m + r] = cs[c0 + e];
                continue;
            }
            if (part == 2u) {
                out2[t * m + r] = cs[c0 + e];
                continue;
            }
#endif
            out[t * P.out_stride + P.out_col0 + r] = cs[c0 + e];
        }
    }
    workgroupBarrier();
}

#ifdef GLU
// Pairs of values a lane of a subgroup (of 32) stores per accumulator.
const GP: u32 = FS * FS / 64u;
var<private> gate_pairs: array<vec2<f32>, GP>;

// Takes the gate accumulator staged at cs[c0..] into registers: lane sl
// holds values 2 (sl + 32 q) and the next of it, q < GP.
fn glu_gate(c0: u32, sl: u32) {
    workgroupBarrier();
    for (var q = 0u; q < GP; q++) {
        let e = 2u * (sl + 32u * q);
        gate_pairs[q] = vec2<f32>(cs[c0 + e], cs[c0 + e + 1u]);
    }
    workgroupBarrier();
}

fn glu(g: f32, u: f32) -> f32 {
#ifdef SILU_MUL
    return cpu_silu(g) * u;
#else
    return cpu_gelu(g) * u;
#endif
}

// Writes accumulator pair f, f + 1 (gate, then up, staged at cs[c0..]):
// tokens from tb + (f / FM) · FS, features from fb + (f % FM) / 2 · FS,
// those inside (n, m): gate, up and (with the params' bits) the GLU and
// its f16 pairs.
fn glu_emit(f: u32, c0: u32, tb: u32, fb: u32, sl: u32, m: u32) {
    workgroupBarrier();
    let t1 = tb + (f / FM) * FS;
    let c1 = fb + ((f % FM) / 2u) * FS;
    for (var q = 0u; q < GP; q++) {
        let e = 2u * (sl + 32u * q);
        let t = t1 + e / FS;
        let c = c1 + e % FS;
        if (t < P.n && c < m) {
            let g = gate_pairs[q];
            let u = vec2<f32>(cs[c0 + e], cs[c0 + e + 1u]);
            let o = t * m + c;
            if ((P.writes & 4u) != 0u) {
                out[o] = g.x;
                out[o + 1u] = g.y;
                out1[o] = u.x;
                out1[o + 1u] = u.y;
            }
            if ((P.writes & 1u) != 0u) {
                let a = vec2<f32>(glu(g.x, u.x), glu(g.y, u.y));
                act[o] = a.x;
                act[o + 1u] = a.y;
                if ((P.writes & 2u) != 0u) {
                    halves[block_word(t, c, P.n)] = pack_f16(a.x, a.y);
                }
            }
        }
    }
    workgroupBarrier();
}
#endif

@compute @workgroup_size(WG)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) sl: u32,
    @builtin(subgroup_size) sgs: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    var g = wg_index(wid, nwg);
    // The steps along k: all of them, or with SPLIT this part's.
    var kb = 0u;
    var k = P.k;
#ifdef SPLIT
    let tiles = P.groups_m * ((P.n + TN - 1u) / TN);
    part = min(g / tiles, P.parts);
    g = g % tiles;
    kb = min(part, P.parts - 1u) * P.k_part;
    k = select(kb + P.k_part, kb, part >= P.parts);
#endif
    let gm = g % P.groups_m;
    let t0 = (g / P.groups_m) * TN;
    var m = P.m;
#ifdef GLU
    // The tile's features: TM / 2 of gate and up each.
    var r0 = gm * (TM / 2u);
#else
    var r0 = gm * TM;
#endif
#ifdef MULTI
    if (gm >= P.tile2) {
        part = 2u;
        m = P.m2;
        r0 = (gm - P.tile2) * TM;
    } else if (gm >= P.tile1) {
        part = 1u;
        m = P.m1;
        r0 = (gm - P.tile1) * TM;
    }
#ifdef JOINT
    first_block = select(select(P.first0, P.first1, part == 1u), P.first2, part == 2u);
#endif
#endif
    // No early return for a workgroup past the tiles (a grid spilled into
    // y): cooperative ops need uniform control flow, so it computes a
    // clamped tile and stores nothing.
    // This subgroup's corner within the tile.
    let sr = (sg % SR) * FM * FS;
    let st = (sg / SR) * FN * FS;
    // The FM × FN accumulators acc_f, one variable each (generated by the
    // host: NVIDIA's compiler puts an array of cooperative matrices in
    // local memory, which halved the speed).
{{ACC_DECL}}
    var next = fetch(lid, kb, r0, t0, m);
    for (var k0 = kb; k0 < k; k0 += TK) {
        stage(lid, next);
        workgroupBarrier();
        // The next step's loads are in flight during the multiplies.
        if (k0 + TK < k) {
            next = fetch(lid, k0 + TK, r0, t0, m);
        }
        for (var kk = 0u; kk < TK; kk += FS) {
{{ACC_STEP}}
        }
        workgroupBarrier();
    }
    // Rows (tokens) past n and m were clamped copies: not stored.
    let c0 = sg * FS * FS;
{{ACC_OUT}}
}
