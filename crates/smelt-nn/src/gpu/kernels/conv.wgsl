// 2-D convolution (ops/conv.rs): one invocation per output element, terms
// summed in the order the op defines, an fma a term (as the CPU's gemm). FORWARD: x (N, C, H, W), w (O, C/g,
// KH, KW) -> y (N, O, OH, OW). TRANSPOSED: y (N, O, OH, OW), w -> x̂ (N, C,
// H, W). WEIGHT: x, dy (N, O, OH, OW) -> per-sample partials (N, O, C/g, KH, KW).

struct ConvParams {
    n: u32,
    c: u32,
    h: u32,
    w: u32,
    o: u32,
    oh: u32,
    ow: u32,
    kh: u32,
    kw: u32,
    stride_h: u32,
    stride_w: u32,
    pad_h: u32,
    pad_w: u32,
    dil_h: u32,
    dil_w: u32,
    groups: u32,
}

@group(0) @binding(0) var<uniform> p: ConvParams;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

// The input row (or column) a tap reads, or -1 outside the image.
fn tap(i: u32, k: u32, stride: u32, dil: u32, pad: u32, size: u32) -> i32 {
    let u = i32(i * stride + k * dil) - i32(pad);
    if (u < 0 || u >= i32(size)) {
        return -1;
    }
    return u;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = flat(gid, nwg, 64u);
    let cg = p.c / p.groups;
    let og = p.o / p.groups;
#ifdef FORWARD
    if (idx >= p.n * p.o * p.oh * p.ow) {
        return;
    }
    let j = idx % p.ow;
    let i = (idx / p.ow) % p.oh;
    let o = (idx / (p.ow * p.oh)) % p.o;
    let n = idx / (p.ow * p.oh * p.o);
    let g = o / og;
    var acc = 0.0;
    for (var c = 0u; c < cg; c++) {
        let xbase = (n * p.c + g * cg + c) * p.h * p.w;
        let wbase = (o * cg + c) * p.kh * p.kw;
        for (var ka = 0u; ka < p.kh; ka++) {
            let u = tap(i, ka, p.stride_h, p.dil_h, p.pad_h, p.h);
            if (u < 0) {
                continue;
            }
            for (var kb = 0u; kb < p.kw; kb++) {
                let v = tap(j, kb, p.stride_w, p.dil_w, p.pad_w, p.w);
                if (v < 0) {
                    continue;
                }
                acc = fma(a[xbase + u32(u) * p.w + u32(v)], b[wbase + ka * p.kw + kb], acc);
            }
        }
    }
    out[idx] = acc;
#endif
#ifdef TRANSPOSED
    if (idx >= p.n * p.c * p.h * p.w) {
        return;
    }
    let v = idx % p.w;
    let u = (idx / p.w) % p.h;
    let c = (idx / (p.w * p.h)) % p.c;
    let n = idx / (p.w * p.h * p.c);
    let g = c / cg;
    let cl = c % cg;
    var acc = 0.0;
    for (var ka = 0u; ka < p.kh; ka++) {
        let ti = i32(u + p.pad_h) - i32(ka * p.dil_h);
        if (ti < 0 || ti % i32(p.stride_h) != 0 || ti / i32(p.stride_h) >= i32(p.oh)) {
            continue;
        }
        let i = u32(ti) / p.stride_h;
        for (var kb = 0u; kb < p.kw; kb++) {
            let tj = i32(v + p.pad_w) - i32(kb * p.dil_w);
            if (tj < 0 || tj % i32(p.stride_w) != 0 || tj / i32(p.stride_w) >= i32(p.ow)) {
                continue;
            }
            let j = u32(tj) / p.stride_w;
            var partial = 0.0;
            for (var ol = 0u; ol < og; ol++) {
                let o = g * og + ol;
                partial = fma(a[((n * p.o + o) * p.oh + i) * p.ow + j], b[((o * cg + cl) * p.kh + ka) * p.kw + kb], partial);
            }
            acc += partial;
        }
    }
    out[idx] = acc;
#endif
#ifdef WEIGHT
    if (idx >= p.n * p.o * cg * p.kh * p.kw) {
        return;
    }
    let kb = idx % p.kw;
    let ka = (idx / p.kw) % p.kh;
    let cl = (idx / (p.kw * p.kh)) % cg;
    let o = (idx / (p.kw * p.kh * cg)) % p.o;
    let n = idx / (p.kw * p.kh * cg * p.o);
    let g = o / og;
    let xbase = (n * p.c + g * cg + cl) * p.h * p.w;
    let ybase = (n * p.o + o) * p.oh * p.ow;
    var acc = 0.0;
    for (var i = 0u; i < p.oh; i++) {
        let u = tap(i, ka, p.stride_h, p.dil_h, p.pad_h, p.h);
        if (u < 0) {
            continue;
        }
        for (var j = 0u; j < p.ow; j++) {
            let v = tap(j, kb, p.stride_w, p.dil_w, p.pad_w, p.w);
            if (v < 0) {
                continue;
            }
            acc = fma(a[xbase + u32(u) * p.w + u32(v)], b[ybase + i * p.ow + j], acc);
        }
    }
    out[idx] = acc;
#endif
}
