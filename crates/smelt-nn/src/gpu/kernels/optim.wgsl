// In-place updates (ops/optim.rs): SGD with momentum, Adam/AdamW as
// PyTorch's single-tensor code computes them, and the running-statistics
// average. One invocation per element.

struct OptimParams {
    n: u32,
    lr: f32,
    momentum: f32,
    weight_decay: f32,
    beta1_weight: f32,
    beta2: f32,
    beta2_weight: f32,
    eps: f32,
    nesterov: u32,
    decoupled: u32,
    slot: u32,
    pad: u32,
}

@group(0) @binding(0) var<uniform> p: OptimParams;

#ifdef SGD
@group(0) @binding(1) var<storage, read_write> param: array<f32>;
@group(0) @binding(2) var<storage, read_write> vel: array<f32>;
@group(0) @binding(3) var<storage, read> grad: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg, 256u);
    if (i >= p.n) {
        return;
    }
    var d = grad[i];
    if (p.weight_decay != 0.0) {
        d += p.weight_decay * param[i];
    }
    let v = p.momentum * vel[i] + d;
    vel[i] = v;
    var step = v;
    if (p.nesterov != 0u) {
        step = d + p.momentum * v;
    }
    param[i] -= p.lr * step;
}
#endif

#ifdef ADAM
@group(0) @binding(1) var<storage, read_write> param: array<f32>;
@group(0) @binding(2) var<storage, read_write> m1: array<f32>;
@group(0) @binding(3) var<storage, read_write> m2: array<f32>;
@group(0) @binding(4) var<storage, read> grad: array<f32>;
@group(0) @binding(5) var<storage, read> run: array<u32>; // step, seed, pad, pad, (step size, √bc2) per Adam

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg, 256u);
    if (i >= p.n) {
        return;
    }
    let step_size = bitcast<f32>(run[4u + 2u * p.slot]);
    let bc2_sqrt = bitcast<f32>(run[5u + 2u * p.slot]);
    var g = grad[i];
    var w = param[i];
    if (p.weight_decay != 0.0) {
        if (p.decoupled != 0u) {
            w *= 1.0 - p.lr * p.weight_decay;
        } else {
            g += p.weight_decay * w;
        }
    }
    let m = m1[i] + p.beta1_weight * (g - m1[i]);
    let v = m2[i] * p.beta2 + p.beta2_weight * g * g;
    m1[i] = m;
    m2[i] = v;
    let denom = sqrt(v) / bc2_sqrt + p.eps;
    param[i] = w + -step_size * (m / denom);
}
#endif

#ifdef EMA
@group(0) @binding(1) var<storage, read_write> running: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg, 256u);
    if (i >= p.n) {
        return;
    }
    running[i] = (1.0 - p.momentum) * running[i] + p.momentum * x[i];
}
#endif
