// The math functions of ops/map.rs, same formulas: erf by Abramowitz and
// Stegun 7.1.26, GELU from it, sigmoid as 1 / (1 + e^-x), and the lowbias32
// hash of dropout's masks.

fn sigmoid(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}

fn erf_as(x: f32) -> f32 {
    var s = 1.0;
    if (x < 0.0) {
        s = -1.0;
    }
    let a = abs(x);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = ((((1.0614054 * t - 1.4531521) * t + 1.4214138) * t - 0.28449672) * t + 0.2548296) * t;
    return s * (1.0 - poly * exp(-a * a));
}

fn gelu(x: f32) -> f32 {
    return 0.5 * x * (1.0 + erf_as(x * 0.70710677));
}

fn gelu_deriv(x: f32) -> f32 {
    return 0.5 * (1.0 + erf_as(x * 0.70710677)) + x * 0.3989423 * exp(-0.5 * x * x);
}

fn silu(x: f32) -> f32 {
    return x * sigmoid(x);
}

fn silu_deriv(x: f32) -> f32 {
    let s = sigmoid(x);
    return s * (1.0 + x * (1.0 - s));
}

fn step(x: f32) -> f32 {
    if (x > 0.0) {
        return 1.0;
    }
    return 0.0;
}

fn hash32(v: u32) -> u32 {
    var x = v;
    x ^= x >> 16u;
    x *= 0x7feb352du;
    x ^= x >> 15u;
    x *= 0x846ca68bu;
    x ^= x >> 16u;
    return x;
}

fn drop_mask(i: u32, seed: u32, salt: u32, keep: f32) -> f32 {
    let h = hash32(i ^ hash32(seed ^ (salt * 0x9e3779b9u)));
    let u = f32(h >> 8u) * (1.0 / 16777216.0);
    if (u < keep) {
        return 1.0 / keep;
    }
    return 0.0;
}
