// Tiled matmul for prefill on cooperative matrices (tensor cores, Apple's
// simdgroup matrices): out[t, r] = dot(w[r], x[t]) for n tokens, with f16
// operands and f32 sums.
//
// As matrices, OUT (n × m) = X (n × k) · Wᵀ (k × m): X is the A operand,
// Wᵀ the B operand, and each workgroup computes a TN (tokens) × TM (rows)
// tile of OUT as fragments of FS × FS. Its 4 subgroups form a 2 × 2 grid;
// each holds FN × FM accumulators (TN / 2 tokens × TM / 2 rows).
//
// Per step of TK = 32 along k, the workgroup decodes the weight tile from
// its GGUF blocks (`dq8`, 8 values per call) and rounds the activations to
// f16, both into workgroup memory as [row or token][k] with LDS halves per
// row; each subgroup then loads its fragments from there and multiplies.
// At the end each subgroup stages one accumulator at a time in workgroup
// memory and writes the part inside (n, m) to `out`, so no dimension needs
// to be a multiple of the tile. k must be a multiple of 32 (the host checks).
//
// Built with FS = 16 where the adapter has 16×16×16 f16 → f32 (Vulkan on
// NVIDIA, AMD, Intel) or FS = 8 (Metal's simdgroup matrices).
//
// Params: 0 m, 1 k, 2 n, 3 row_bytes, 4 tiles along m, 5 out's row stride
// (m, or more when w is a part of a split weight), 6 out's first column.

@group(0) @binding(1) var<storage, read> wq: array<{{WQ}}>;        // (m, k) in TYPE
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;   // (n, k / 4)
@group(0) @binding(3) var<storage, read_write> out: array<f32>; // (n, m)

const FS: u32 = {{FS}}u;
const FM: u32 = {{FM}}u;
const FN: u32 = {{FN}}u;
const TM: u32 = 2u * FM * FS;
const TN: u32 = 2u * FN * FS;
const TK: u32 = 32u;
// Halves per row of a staged tile: TK plus 8 of padding, which keeps
// fragment rows 16-byte aligned and spreads them over the banks.
const LDS: u32 = TK + 8u;
const WG: u32 = 128u;

var<workgroup> ws: array<f16, TM * LDS>; // weight rows × k
var<workgroup> xs: array<f16, TN * LDS>; // tokens × k
var<workgroup> cs: array<f32, 4u * FS * FS>; // one accumulator per subgroup

@compute @workgroup_size(128)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) sl: u32,
    @builtin(subgroup_size) sgs: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let m = pu(0);
    let k = pu(1);
    let n = pu(2);
    let row_bytes = pu(3);
    let g = wg_index(wid, nwg);
    let r0 = (g % pu(4)) * TM;
    let t0 = (g / pu(4)) * TN;
    // No early return for a workgroup past the tiles (a grid spilled into
    // y): cooperative ops need uniform control flow, so it computes a
    // clamped tile and stores nothing.
    // This subgroup's corner within the tile.
    let sr = (sg % 2u) * FM * FS;
    let st = (sg / 2u) * FN * FS;
    var acc: array<coop_mat{{FS}}x{{FS}}<f32, C>, FM * FN>;
    for (var k0 = 0u; k0 < k; k0 += TK) {
        // Weights: TM rows × 4 groups of 8 values.
        for (var i = lid; i < TM * (TK / 8u); i += WG) {
            let rr = i / (TK / 8u);
            let kg = i % (TK / 8u);
            let r = min(r0 + rr, m - 1u);
            let v = dq8(r * row_bytes, k0 / 8u + kg);
            let o = rr * LDS + 8u * kg;
            for (var e = 0u; e < 4u; e++) {
                ws[o + e] = f16(v.a[e]);
                ws[o + 4u + e] = f16(v.b[e]);
            }
        }
        // Activations: TN tokens × 8 vec4s.
        for (var i = lid; i < TN * (TK / 4u); i += WG) {
            let tt = i / (TK / 4u);
            let c4 = i % (TK / 4u);
            let t = min(t0 + tt, n - 1u);
            let v = x[(t * k + k0) / 4u + c4];
            let o = tt * LDS + 4u * c4;
            for (var e = 0u; e < 4u; e++) {
                xs[o + e] = f16(v[e]);
            }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk += FS) {
            for (var j = 0u; j < FN; j++) {
                let a = coopLoadT<coop_mat{{FS}}x{{FS}}<f16, A>>(&xs[(st + j * FS) * LDS + kk], LDS);
                for (var i = 0u; i < FM; i++) {
                    let b = coopLoad<coop_mat{{FS}}x{{FS}}<f16, B>>(&ws[(sr + i * FS) * LDS + kk], LDS);
                    acc[j * FM + i] = coopMultiplyAdd(a, b, acc[j * FM + i]);
                }
            }
        }
        workgroupBarrier();
    }
    // Rows (tokens) past n and m were clamped copies: not stored.
    let c0 = sg * FS * FS;
    for (var f = 0u; f < FM * FN; f++) {
        coopStoreT(acc[f], &cs[c0], FS);
        workgroupBarrier();
        let tb = t0 + st + (f / FM) * FS;
        let rb = r0 + sr + (f % FM) * FS;
        for (var e = sl; e < FS * FS; e += sgs) {
            let t = tb + e / FS;
            let r = rb + e % FS;
            if (t < n && r < m) {
                out[t * pu(5) + pu(6) + r] = cs[c0 + e];
            }
        }
        workgroupBarrier();
    }
}
