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
// Params: 0 rows, 1 cols (a multiple of 4), 2 eps (f32).

@group(0) @binding(1) var<storage, read_write> x: array<vec4<f32>>;      // (rows, cols / 4)
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>;    // (rows, cols / 4)
@group(0) @binding(3) var<storage, read_write> w: array<vec4<f32>>;      // (cols / 4)
@group(0) @binding(4) var<storage, read_write> addend: array<vec4<f32>>; // (rows, cols / 4)
@group(0) @binding(5) var<storage, read_write> sum: array<vec4<f32>>;    // (rows, cols / 4), may be x
@group(0) @binding(6) var<storage, read_write> halves: array<u32>;       // (cols / 32, rows, 32) f16 pairs

const NORM_WG: u32 = {{WG}}u;
const KEEP: u32 = 4u;

// Output word c of row r (at word i of out): in out, and its two f16
// words in halves.
fn put(r: u32, c: u32, i: u32, o: vec4<f32>) {
    out[i] = o;
    let h = block_word(r, 4u * c, pu(0));
    halves[h] = pack_f16(o.x, o.y);
    halves[h + 1u] = pack_f16(o.z, o.w);
}

@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let lid = ln.lid;
    let r = wg_index(wid, nwg);
    if (r >= pu(0)) {
        return;
    }
    let words = pu(1) / 4u;
    let b = r * words;
    var kept: array<vec4<f32>, KEEP>;
    var wk: array<vec4<f32>, KEEP>;
    for (var j = 0u; j < KEEP; j++) {
        let c = lid + j * NORM_WG;
        if (c < words) {
            kept[j] = x[b + c] + addend[b + c];
            wk[j] = w[c];
        }
    }
    var s4 = vec4<f32>(0.0);
    for (var j = 0u; j < KEEP; j++) {
        let c = lid + j * NORM_WG;
        if (c < words) {
            sum[b + c] = kept[j];
            s4 = fma(kept[j], kept[j], s4);
        }
    }
    for (var c = lid + KEEP * NORM_WG; c < words; c += NORM_WG) {
        let v = x[b + c] + addend[b + c];
        sum[b + c] = v;
        s4 = fma(v, v, s4);
    }
    let ss = wg_sum((s4.x + s4.y) + (s4.z + s4.w), ln);
    let scale = div_rn(1.0, sqrt_rn(ss / f32(pu(1)) + pf(2)));
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
