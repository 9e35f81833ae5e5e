// RoPE: rotates pairs of each head by the angle of pair i at position p,
// pos · freq_scale · base^(-2i/n_dims) (divided by freq_factors[i] when
// given). Normal mode pairs (2i, 2i+1); the NEOX define pairs
// (i, i + n_dims/2). Values past n_dims pass through. One invocation per
// pair; x and out may be the same buffer.
//
// As ggml: theta_scale = base^(-2/n_dims) (computed by the host with
// powf), theta = p · theta_scale^i by repeated f32 multiplication, angle
// = freq_scale · theta (/ factor), libm's cosf/sinf (sincos_rn), and
// x0·cos − x1·sin, x0·sin + x1·cos fused as a C compiler contracts them.
//
// Params: 0 rows, 1 n_heads, 2 head_dim, 3 n_dims, 4 theta_scale (f32),
// 5 freq_scale (f32), 6 has freq_factors.

@group(0) @binding(1) var<storage, read_write> x: array<f32>;     // (rows, n_heads * head_dim)
@group(0) @binding(2) var<storage, read_write> pos: array<i32>;   // (rows)
@group(0) @binding(3) var<storage, read_write> out: array<f32>;   // (rows, n_heads * head_dim)
@group(0) @binding(4) var<storage, read_write> ff: array<f32>;    // (n_dims / 2), or a dummy

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = gid.x + gid.y * nwg.x * 64u;
    let n_heads = pu(1);
    let hd = pu(2);
    let n_dims = pu(3);
    let half_pairs = hd / 2u;
    if (g >= pu(0) * n_heads * half_pairs) {
        return;
    }
    let p = g % half_pairs;
    let row = g / (n_heads * half_pairs);
    let base = (g / half_pairs) * hd;
    let nd2 = n_dims / 2u;
    if (p >= nd2) {
#ifdef NEOX
        let i0 = base + n_dims + 2u * (p - nd2);
#else
        let i0 = base + 2u * p;
#endif
        out[i0] = x[i0];
        out[i0 + 1u] = x[i0 + 1u];
        return;
    }
#ifdef NEOX
    let i0 = base + p;
    let i1 = base + p + nd2;
#else
    let i0 = base + 2u * p;
    let i1 = i0 + 1u;
#endif
    var theta = f32(pos[row]);
#ifdef FAST
    theta *= pow(pf(4), f32(p));
#else
    for (var i = 0u; i < p; i++) {
        theta = opaque(theta * pf(4));
    }
#endif
    if (pu(6) != 0u) {
        theta = div_rn(theta, ff[p]);
    }
    let sc = sincos_rn(pf(5) * theta);
    let x0 = x[i0];
    let x1 = x[i1];
    out[i0] = fmaf(x0, sc.y, -(x1 * sc.x));
    out[i1] = fmaf(x0, sc.x, x1 * sc.y);
}
