// Embedding rows and their gradient (ops/embed.rs). GATHER: one invocation
// per output value. GRAD: one per table value, summing over the indices in
// order.

struct EmbedParams {
    dim: u32,
    ids: u32,
    vocab: u32,
    pad: u32,
}

@group(0) @binding(0) var<uniform> p: EmbedParams;
#ifdef GATHER
@group(0) @binding(1) var<storage, read> table: array<f32>;     // (vocab, dim)
@group(0) @binding(2) var<storage, read> ids: array<f32>;       // (ids)
@group(0) @binding(3) var<storage, read_write> out: array<f32>; // (ids, dim)
#endif
#ifdef GRAD
@group(0) @binding(1) var<storage, read> dy: array<f32>;        // (ids, dim)
@group(0) @binding(2) var<storage, read> ids: array<f32>;       // (ids)
@group(0) @binding(3) var<storage, read_write> out: array<f32>; // (vocab, dim)
#endif

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg, 64u);
    let e = i % p.dim;
    let r = i / p.dim;
#ifdef GATHER
    if (r >= p.ids) {
        return;
    }
    out[i] = table[u32(ids[r]) * p.dim + e];
#endif
#ifdef GRAD
    if (r >= p.vocab) {
        return;
    }
    let v = f32(r);
    var acc = 0.0;
    for (var n = 0u; n < p.ids; n++) {
        if (ids[n] == v) {
            acc += dy[n * p.dim + e];
        }
    }
    out[i] = acc;
#endif
}
