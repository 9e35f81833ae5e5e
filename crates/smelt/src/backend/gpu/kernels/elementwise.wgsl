// Elementwise ops, one define each: ADD (out = a + b), MUL (a * b), SCALE
// (a * s), SILU_MUL (silu(a) * b), GELU_MUL (gelu_tanh(a) * b). For ADD and
// MUL, b may be a single row broadcast over a's rows. out may be a: every
// binding is read_write so the same buffer can be bound twice. SiLU and
// GELU are the fast CPU backend's, bit for bit (exact.wgsl).
//
// Params: 0 n (elements), 1 b_len (elements of b; b[i % b_len]), 2 s (f32).

@group(0) @binding(1) var<storage, read_write> a: array<f32>;     // (rows, cols)
@group(0) @binding(2) var<storage, read_write> out: array<f32>;   // (rows, cols)
#ifndef SCALE
@group(0) @binding(3) var<storage, read_write> b: array<f32>;     // (rows, cols) or (cols)
#endif

fn op(i: u32) -> f32 {
    let x = a[i];
#ifdef ADD
    return x + b[i % pu(1)];
#endif
#ifdef MUL
    return x * b[i % pu(1)];
#endif
#ifdef SCALE
    return x * pf(2);
#endif
#ifdef SILU_MUL
    return cpu_silu(x) * b[i];
#endif
#ifdef GELU_MUL
    return cpu_gelu(x) * b[i];
#endif
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i < pu(0)) {
        out[i] = op(i);
    }
}
