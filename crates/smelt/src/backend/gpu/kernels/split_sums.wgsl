// The other parts' sums of a split matmul (matmul_coop.wgsl's SPLIT)
// added to the first's in order of the parts: out += sums[0] + sums[1] +
// ..., four values an invocation, as whole 16-byte words (n a multiple of
// 4; the host checks).

struct Params {
    n: u32,     // elements of out
    terms: u32, // parts of sums, each n elements
}
@group(0) @binding(0) var<uniform> P: Params;

@group(0) @binding(1) var<storage, read_write> out: array<vec4<f32>>;  // (n / 4)
@group(0) @binding(2) var<storage, read> sums: array<vec4<f32>>;       // (terms, n / 4)

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    let words = P.n / 4u;
    if (i < words) {
        var acc = out[i];
        for (var p = 0u; p < P.terms; p++) {
            acc += sums[p * words + i];
        }
        out[i] = acc;
    }
}
