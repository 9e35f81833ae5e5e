// Shared by every kernel: the per-dispatch parameter block and the
// workgroup-index helper. Prepended to each kernel's source.
//
// Each dispatch gets one 64-byte slot of a uniform buffer that holds every
// dispatch of the submission; the slot is chosen with a dynamic offset, so
// the whole block is written once per submission.

struct Params {
    v: array<vec4<u32>, 4>,
}

@group(0) @binding(0) var<uniform> P: Params;

// The i-th 32-bit parameter.
fn pu(i: u32) -> u32 {
    return P.v[i / 4u][i % 4u];
}

fn pf(i: u32) -> f32 {
    return bitcast<f32>(pu(i));
}

// Dispatches wider than maxComputeWorkgroupsPerDimension spill into y.
fn wg_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// Large finite stand-in for -inf: WGSL has no infinity literal, and
// exp(NEG_BIG - m) is still exactly 0.
const NEG_BIG: f32 = -3.0e38;

// Two f16 values packed in a u32 word, as f32. (Not through
// bitcast<vec2<f16>>: naga 30's WGSL front end types that as a scalar.)
fn h2(w: u32) -> vec2<f32> {
    return unpack2x16float(w);
}
