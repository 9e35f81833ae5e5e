// Max and average pooling and their gradients (ops/pool.rs). One
// invocation per output (forward) or per input pixel (gradients), taps and
// windows in the op's order.

struct PoolParams {
    planes: u32,
    h: u32,
    w: u32,
    oh: u32,
    ow: u32,
    kh: u32,
    kw: u32,
    stride_h: u32,
    stride_w: u32,
    pad_h: u32,
    pad_w: u32,
    include_pad: u32,
}

@group(0) @binding(0) var<uniform> p: PoolParams;
#ifdef MAX
@group(0) @binding(1) var<storage, read> x: array<f32>;          // (planes, H, W)
@group(0) @binding(2) var<storage, read_write> y: array<f32>;    // (planes, OH, OW)
@group(0) @binding(3) var<storage, read_write> arg: array<f32>;  // (planes, OH, OW): u·W + v
#endif
#ifdef AVG
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
#endif
#ifdef MAX_GRAD
@group(0) @binding(1) var<storage, read> dy: array<f32>;
@group(0) @binding(2) var<storage, read> arg: array<f32>;
@group(0) @binding(3) var<storage, read_write> dx: array<f32>;
#endif
#ifdef AVG_GRAD
@group(0) @binding(1) var<storage, read> dy: array<f32>;
@group(0) @binding(2) var<storage, read_write> dx: array<f32>;
#endif

fn window_count(i: u32, j: u32) -> f32 {
    let u0 = i32(i * p.stride_h) - i32(p.pad_h);
    let v0 = i32(j * p.stride_w) - i32(p.pad_w);
    if (p.include_pad != 0u) {
        let u1 = min(u0 + i32(p.kh), i32(p.h + p.pad_h));
        let v1 = min(v0 + i32(p.kw), i32(p.w + p.pad_w));
        return f32(u1 - u0) * f32(v1 - v0);
    }
    let u1 = min(u0 + i32(p.kh), i32(p.h));
    let v1 = min(v0 + i32(p.kw), i32(p.w));
    return f32(u1 - max(u0, 0)) * f32(v1 - max(v0, 0));
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = flat(gid, nwg, 64u);
#ifdef MAX
    if (idx >= p.planes * p.oh * p.ow) {
        return;
    }
    let j = idx % p.ow;
    let i = (idx / p.ow) % p.oh;
    let plane = idx / (p.ow * p.oh);
    var best = -3.4028235e38;
    var at = -1.0;
    for (var a = 0u; a < p.kh; a++) {
        let u = i32(i * p.stride_h + a) - i32(p.pad_h);
        if (u < 0 || u >= i32(p.h)) {
            continue;
        }
        for (var b = 0u; b < p.kw; b++) {
            let v = i32(j * p.stride_w + b) - i32(p.pad_w);
            if (v < 0 || v >= i32(p.w)) {
                continue;
            }
            let val = x[(plane * p.h + u32(u)) * p.w + u32(v)];
            if (val > best || at < 0.0) {
                best = val;
                at = f32(u32(u) * p.w + u32(v));
            }
        }
    }
    y[idx] = best;
    arg[idx] = at;
#endif
#ifdef AVG
    if (idx >= p.planes * p.oh * p.ow) {
        return;
    }
    let j = idx % p.ow;
    let i = (idx / p.ow) % p.oh;
    let plane = idx / (p.ow * p.oh);
    var sum = 0.0;
    for (var a = 0u; a < p.kh; a++) {
        let u = i32(i * p.stride_h + a) - i32(p.pad_h);
        if (u < 0 || u >= i32(p.h)) {
            continue;
        }
        for (var b = 0u; b < p.kw; b++) {
            let v = i32(j * p.stride_w + b) - i32(p.pad_w);
            if (v < 0 || v >= i32(p.w)) {
                continue;
            }
            sum += x[(plane * p.h + u32(u)) * p.w + u32(v)];
        }
    }
    y[idx] = sum / window_count(i, j);
#endif
#ifdef MAX_GRAD
    if (idx >= p.planes * p.h * p.w) {
        return;
    }
    let v = idx % p.w;
    let u = (idx / p.w) % p.h;
    let plane = idx / (p.w * p.h);
    let me = f32(u * p.w + v);
    var acc = 0.0;
    // Windows (i, j) whose taps cover (u, v), in row-major order.
    let i0 = max(i32(u + p.pad_h) - i32(p.kh) + 1, 0);
    let j0 = max(i32(v + p.pad_w) - i32(p.kw) + 1, 0);
    for (var ti = i0; ti <= i32(u + p.pad_h); ti++) {
        if (ti % i32(p.stride_h) != 0 || ti / i32(p.stride_h) >= i32(p.oh)) {
            continue;
        }
        let i = u32(ti) / p.stride_h;
        for (var tj = j0; tj <= i32(v + p.pad_w); tj++) {
            if (tj % i32(p.stride_w) != 0 || tj / i32(p.stride_w) >= i32(p.ow)) {
                continue;
            }
            let k = (plane * p.oh + i) * p.ow + u32(tj) / p.stride_w;
            if (arg[k] == me) {
                acc += dy[k];
            }
        }
    }
    dx[idx] = acc;
#endif
#ifdef AVG_GRAD
    if (idx >= p.planes * p.h * p.w) {
        return;
    }
    let v = idx % p.w;
    let u = (idx / p.w) % p.h;
    let plane = idx / (p.w * p.h);
    var acc = 0.0;
    let i0 = max(i32(u + p.pad_h) - i32(p.kh) + 1, 0);
    let j0 = max(i32(v + p.pad_w) - i32(p.kw) + 1, 0);
    for (var ti = i0; ti <= i32(u + p.pad_h); ti++) {
        if (ti % i32(p.stride_h) != 0 || ti / i32(p.stride_h) >= i32(p.oh)) {
            continue;
        }
        let i = u32(ti) / p.stride_h;
        for (var tj = j0; tj <= i32(v + p.pad_w); tj++) {
            if (tj % i32(p.stride_w) != 0 || tj / i32(p.stride_w) >= i32(p.ow)) {
                continue;
            }
            let j = u32(tj) / p.stride_w;
            acc += dy[(plane * p.oh + i) * p.ow + j] / window_count(i, j);
        }
    }
    dx[idx] = acc;
#endif
}
