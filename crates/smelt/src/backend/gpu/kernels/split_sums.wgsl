// The second half's sums of a split matmul (matmul_coop.wgsl's SPLIT)
// added to the first's: out += sums, four values an invocation, as whole
// 16-byte words (n a multiple of 4; the host checks).

struct Params {
    n: u32, // elements
}
@group(0) @binding(0) var<uniform> P: Params;

@group(0) @binding(1) var<storage, read_write> out: array<vec4<f32>>;  // (n / 4)
@group(0) @binding(2) var<storage, read> sums: array<vec4<f32>>;       // (n / 4)

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i < P.n / 4u) {
        out[i] += sums[i];
    }
}
