// add_rms_norm_half: norm.wgsl's residual add and weighted rms_norm (ADD,
// plain f32 arithmetic) with the output also written as copy.wgsl's
// BLOCKS, for the next matmul on cooperative matrices
// (`GpuBackend::half_input`):
//   sum = x + addend (sum may be x itself),
//   out = sum · scale · w, scale = 1 / sqrt(mean(sum²) + eps),
//   halves = f16(out).
//
// One workgroup per row; each invocation takes 16-byte words of 4 values,
// words lid, lid + WG, ... of the row. It loads its first KEEP words (x,
// addend and w) before it stores anything, and keeps them in registers for
// the output: the sum may be x, so a store holds back every load after it,
// and one at a time they would wait a round trip to memory each. A row
// longer than KEEP · WG words has the rest summed and read back one word
// at a time.
//
// SUMS: the addend is a split matmul's first half (matmul_coop.wgsl's
// SPLIT), whose second half's sums are added to it here, as split_sums.wgsl
// would (addend + sums, then x + that); `keep` says whether the addend is
// written back whole.

struct Params {
    rows: u32,
    cols: u32, // a multiple of 4
    eps: f32,
    keep: u32, // SUMS: 1 writes the whole addend back
}
@group(0) @binding(0) var<uniform> P: Params;

@group(0) @binding(1) var<storage, read_write> x: array<vec4<f32>>;      // (rows, cols / 4)
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>;    // (rows, cols / 4)
@group(0) @binding(3) var<storage, read_write> w: array<vec4<f32>>;      // (cols / 4)
@group(0) @binding(4) var<storage, read_write> addend: array<vec4<f32>>; // (rows, cols / 4)
@group(0) @binding(5) var<storage, read_write> sum: array<vec4<f32>>;    // (rows, cols / 4), may be x
@group(0) @binding(6) var<storage, read_write> halves: array<u32>;       // (cols / 32, rows, 32) f16 pairs
#ifdef SUMS
@group(0) @binding(7) var<storage, read> sums: array<vec4<f32>>;         // (rows, cols / 4)
#endif

const NORM_WG: u32 = {{WG}}u;
const KEEP: u32 = 4u;

// The addend's word i, with SUMS its second half's sums added.
fn part(i: u32) -> vec4<f32> {
#ifdef SUMS
    return addend[i] + sums[i];
#else
    return addend[i];
#endif
}

// With SUMS and `keep`, the whole addend's word i written back.
fn keep(i: u32, a: vec4<f32>) {
#ifdef SUMS
    if (P.keep != 0u) {
        addend[i] = a;
    }
#endif
}

// Output word c of row r (at word i of out): in out, and its two f16
// words in halves.
fn put(r: u32, c: u32, i: u32, o: vec4<f32>) {
    out[i] = o;
    let h = block_word(r, 4u * c, P.rows);
    halves[h] = pack_f16(o.x, o.y);
    halves[h + 1u] = pack_f16(o.z, o.w);
}

@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let lid = ln.lid;
    let r = wg_index(wid, nwg);
    if (r >= P.rows) {
        return;
    }
    let words = P.cols / 4u;
    let b = r * words;
    var kept: array<vec4<f32>, KEEP>;
    var wk: array<vec4<f32>, KEEP>;
#ifdef SUMS
    var parts: array<vec4<f32>, KEEP>;
#endif
    for (var j = 0u; j < KEEP; j++) {
        let c = lid + j * NORM_WG;
        if (c < words) {
            let a = part(b + c);
#ifdef SUMS
            parts[j] = a;
#endif
            kept[j] = x[b + c] + a;
            wk[j] = w[c];
        }
    }
    var s4 = vec4<f32>(0.0);
    for (var j = 0u; j < KEEP; j++) {
        let c = lid + j * NORM_WG;
        if (c < words) {
            sum[b + c] = kept[j];
#ifdef SUMS
            keep(b + c, parts[j]);
#endif
            s4 = fma(kept[j], kept[j], s4);
        }
    }
    for (var c = lid + KEEP * NORM_WG; c < words; c += NORM_WG) {
        let a = part(b + c);
        let v = x[b + c] + a;
        sum[b + c] = v;
        keep(b + c, a);
        s4 = fma(v, v, s4);
    }
    let ss = wg_sum((s4.x + s4.y) + (s4.z + s4.w), ln);
    let scale = div_rn(1.0, sqrt_rn(ss / f32(P.cols) + P.eps));
    for (var j = 0u; j < KEEP; j++) {
        let c = lid + j * NORM_WG;
        if (c < words) {
            put(r, c, b + c, kept[j] * scale * wk[j]);
        }
    }
    for (var c = lid + KEEP * NORM_WG; c < words; c += NORM_WG) {
        put(r, c, b + c, sum[b + c] * scale * w[c]);
    }
}
