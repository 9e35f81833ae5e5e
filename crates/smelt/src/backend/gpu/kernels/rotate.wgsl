// RoPE's rotation of pair i, values (x0, x1), at position `at`, as ggml
// computes it: theta = at · theta_scale^i by repeated f32 multiplication
// (FAST: pow), over the pair's frequency factor when there are factors
// (`factored`), angle = freq_scale · theta, libm's cosf/sinf
// (sincos_rn), and x0·cos − x1·sin, x0·sin + x1·cos fused as a C compiler
// contracts them. Shared by rope.wgsl and the decode attention that ropes
// its own query and key (attention.wgsl's ROPE). The angle's sine and
// cosine (`rope_angle`) are the same for every head, so a caller that
// turns several heads' pairs takes them once (`rope_turn` each).

fn rope_angle(i: u32, at: f32, theta_scale: f32, freq_scale: f32, factored: bool, factor: f32) -> vec2<f32> {
    var theta = at;
#ifdef FAST
    theta *= pow(theta_scale, f32(i));
#else
    for (var j = 0u; j < i; j++) {
        theta = opaque(theta * theta_scale);
    }
#endif
    if (factored) {
        theta = div_rn(theta, factor);
    }
    return sincos_rn(freq_scale * theta);
}

// The columns of pair i in a head: normal mode (2i, 2i + 1); the NEOX
// define (i, i + n_dims/2). Pairs from n_dims / 2 on are not turned and
// lie past n_dims, two neighbouring columns in either mode.
fn rope_columns(i: u32, n_dims: u32) -> vec2<u32> {
    let half = n_dims / 2u;
    if (i >= half) {
        return vec2<u32>(n_dims + 2u * (i - half), n_dims + 2u * (i - half) + 1u);
    }
#ifdef NEOX
    return vec2<u32>(i, i + half);
#else
    return vec2<u32>(2u * i, 2u * i + 1u);
#endif
}

// (x0, x1) turned by the angle of sine and cosine sc.
fn rope_turn(x0: f32, x1: f32, sc: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(fmaf(x0, sc.y, -(x1 * sc.x)), fmaf(x0, sc.x, x1 * sc.y));
}
