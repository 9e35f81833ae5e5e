// Elementwise ops, one define each: ADD (out = a + b), MUL (a * b), SCALE
// (a * s), SOFTCAP (s · tanh(a / s)), SILU_MUL (silu(a) * b), GELU_MUL
// (gelu_tanh(a) * b). For ADD and MUL, b may be a single row broadcast
// over a's rows; SCALE and SOFTCAP (ONE_INPUT) have no b. out may be a:
// every binding is read_write so the same buffer can be bound twice. SiLU
// and GELU are the fast CPU backend's, bit for bit (exact.wgsl).
//
// The Q8 define (SILU_MUL and GELU_MUL) fuses the next matmul's
// activation rounding (exact.wgsl's q8_store, as quantize.wgsl's Q8) on
// the values written: one invocation per word of 4 values.
//
// The HALF define (SILU_MUL and GELU_MUL) also writes the values as
// copy.wgsl's BLOCKS does, for the next matmul on cooperative matrices
// (`GpuBackend::half_input`): one invocation per word of 2 values, in the
// blocked order.
//
struct Params {
    n: u32,     // elements
    b_len: u32, // elements of b (b[i % b_len])
    s: f32,     // SCALE: the factor; SOFTCAP: the cap
    cols: u32,  // HALF: values per row (a multiple of 32)
    zero: u32,       // 0 (exact.wgsl's `opaque`)
}
@group(0) @binding(0) var<uniform> P: Params;

@group(0) @binding(1) var<storage, read_write> a: array<f32>;     // (rows, cols)
@group(0) @binding(2) var<storage, read_write> out: array<f32>;   // (rows, cols)
#ifndef ONE_INPUT
@group(0) @binding(3) var<storage, read_write> b: array<f32>;     // (rows, cols) or (cols)
#endif
#ifdef HALF
@group(0) @binding(4) var<storage, read_write> halves: array<u32>;  // (cols / 32, rows, 32) f16 pairs
#endif
#ifdef Q8
@group(0) @binding(4) var<storage, read_write> xq: array<u32>;    // (n / 4) quants, 4 per word
@group(0) @binding(5) var<storage, read_write> xd: array<f32>;    // (n / 32) f16(d), widened
@group(0) @binding(6) var<storage, read_write> xs: array<f32>;    // (n / 32) f16(d · Σq), widened
#endif

fn op(i: u32) -> f32 {
    let x = a[i];
#ifdef ADD
    return x + b[i % P.b_len];
#endif
#ifdef MUL
    return x * b[i % P.b_len];
#endif
#ifdef SCALE
    return x * P.s;
#endif
#ifdef SOFTCAP
    // tanh saturates to ±1 in f32 past ±10; some drivers' tanh overflows
    // to NaN far beyond.
    return tanh(clamp(x * (1.0 / P.s), -10.0, 10.0)) * P.s;
#endif
#ifdef SILU_MUL
    return cpu_silu(x) * b[i];
#endif
#ifdef GELU_MUL
    return cpu_gelu(x) * b[i];
#endif
}

#ifdef HALF
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = gid.x + gid.y * nwg.x * 256u;
    if (2u * g >= P.n) {
        return;
    }
    let e = block_pair(g, P.cols, P.n / P.cols);
    let v = vec2<f32>(op(e), op(e + 1u));
    out[e] = v.x;
    out[e + 1u] = v.y;
    halves[g] = pack_f16(v.x, v.y);
}
#else
#ifdef Q8
@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wg_index(wid, nwg) * {{WG}}u + lid;
    let live = g < P.n / 4u;
    var v = vec4<f32>(0.0);
    if (live) {
        for (var e = 0u; e < 4u; e++) {
            v[e] = op(4u * g + e);
            out[4u * g + e] = v[e];
        }
    }
    q8_store(v, lid, live, g);
}
#else
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i < P.n) {
        out[i] = op(i);
    }
}
#endif
#endif
