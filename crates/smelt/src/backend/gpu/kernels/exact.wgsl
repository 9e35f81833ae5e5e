// ggml's CPU rounding on the GPU. A small quantized model is chaotic under
// 8-bit activation rounding: one f32 ulp anywhere flips some Q8 rounding
// downstream, and the flips grow into tenths of a nat within a few tokens
// (measured: every op of the forward pass alone was enough). To follow
// llama.cpp's greedy choices the kernels therefore compute what ggml's CPU
// computes, bit for bit, as the fast CPU backend does:
// - fused multiply-adds exactly where ggml's compiled code fuses (`fma`),
//   and nowhere else: GPU compilers contract `a * b + c` freely, so a
//   product that ggml rounds before an add goes through `opaque`;
// - correctly rounded division and square root (GPU `/` and `sqrt` may be
//   off by an ulp or two);
// - f64 sums as float-float pairs (hi, lo) with ~48 bits (WGSL has no f64);
// - libm's expf, sinf and cosf correctly rounded from float-float
//   evaluations (TABLES; glibc's are within 0.51-0.56 ulp of that).
//
// A float-float is a vec2<f32> (hi, lo) with |lo| <= ulp(hi) / 2.
//
// With the FAST define (f32 activations, `--gpu-f32-acts`) none of this is
// wanted: every function here becomes the plain hardware operation (fma,
// /, sqrt, exp, sin, cos; float-floats keep only their high part), the
// arithmetic llama.cpp's own GPU backends use.

// a · b + c rounded once, as x86's vfmadd: the hardware's fma where it is
// fused (FUSED_FMA, probed when the device opens); otherwise from an exact
// product, as lavapipe's `fma` rounds the product first.
fn fmaf(a: f32, b: f32, c: f32) -> f32 {
#ifdef FAST
    return fma(a, b, c);
#else
#ifdef FUSED_FMA
    return fma(a, b, c);
#else
    let p = two_prod(a, b);
    let s = two_sum(p.x, c);
    return s.x + (s.y + p.y);
#endif
#endif
}

fn fmaf4(a: vec4<f32>, b: vec4<f32>, c: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(fmaf(a.x, b.x, c.x), fmaf(a.y, b.y, c.y), fmaf(a.z, b.z, c.z), fmaf(a.w, b.w, c.w));
}

// x itself, hidden from the compiler: it XORs with the parameter block's
// `zero`, which the host always leaves 0 (every family that includes this
// file without FAST declares it). Nothing can be contracted or simplified
// across it (float-float arithmetic relies on exact IEEE adds).
fn opaque(x: f32) -> f32 {
#ifdef FAST
    return x;
#else
    return bitcast<f32>(bitcast<u32>(x) ^ P.zero);
#endif
}

// s + e == a + b exactly (Knuth's TwoSum).
fn two_sum(a: f32, b: f32) -> vec2<f32> {
    let s = opaque(a + b);
    let bb = opaque(s - a);
    return vec2<f32>(s, (a - (s - bb)) + (b - bb));
}

// As two_sum, for |a| >= |b|.
fn fast_two_sum(a: f32, b: f32) -> vec2<f32> {
    let s = opaque(a + b);
    return vec2<f32>(s, b - (s - a));
}

// p + e == a * b exactly: with a fused fma, or by Dekker's splitting of
// each factor into 12-bit halves.
fn two_prod(a: f32, b: f32) -> vec2<f32> {
    let p = opaque(a * b);
#ifdef FUSED_FMA
    return vec2<f32>(p, fma(a, b, -p));
#else
    let ta = opaque(4097.0 * a);
    let ah = opaque(ta - opaque(ta - a));
    let al = a - ah;
    let tb = opaque(4097.0 * b);
    let bh = opaque(tb - opaque(tb - b));
    let bl = b - bh;
    return vec2<f32>(p, opaque(opaque(opaque(ah * bh - p) + ah * bl) + al * bh) + al * bl);
#endif
}

fn ff_add_f(x: vec2<f32>, b: f32) -> vec2<f32> {
#ifdef FAST
    return vec2<f32>(x.x + b, 0.0);
#endif
    let s = two_sum(x.x, b);
    return fast_two_sum(s.x, s.y + x.y);
}

fn ff_add(x: vec2<f32>, y: vec2<f32>) -> vec2<f32> {
#ifdef FAST
    return vec2<f32>(x.x + y.x, 0.0);
#endif
    let s = two_sum(x.x, y.x);
    return fast_two_sum(s.x, s.y + (x.y + y.y));
}

fn ff_mul(x: vec2<f32>, y: vec2<f32>) -> vec2<f32> {
    let p = two_prod(x.x, y.x);
    return fast_two_sum(p.x, p.y + (x.x * y.y + x.y * y.x));
}

// a / b rounded to nearest, for normal finite operands: two Newton
// corrections of the hardware quotient on exact fma residuals.
fn div_rn(a: f32, b: f32) -> f32 {
#ifdef FAST
    return a / b;
#endif
    let y = 1.0 / b;
    var q = opaque(a * y);
    q = fmaf(fmaf(-q, b, a), y, q);
    q = fmaf(fmaf(-q, b, a), y, q);
    return q;
}

// sqrt(x) rounded to nearest, for x > 0.
fn sqrt_rn(x: f32) -> f32 {
#ifdef FAST
    return sqrt(x);
#endif
    var s = sqrt(x);
    let h = 0.5 / s;
    s = fmaf(fmaf(-s, s, x), h, s);
    s = fmaf(fmaf(-s, s, x), h, s);
    return s;
}

// (hi + lo) / c rounded to nearest: f64's `sum / n` then `as f32`.
fn ff_div_rn(x: vec2<f32>, c: f32) -> f32 {
#ifdef FAST
    return x.x / c;
#endif
    let q = div_rn(x.x, c);
    let r = fmaf(-q, c, x.x);
    return q + (r + x.y) / c;
}

// Rust's f32::round: half away from zero.
fn round_away(v: f32) -> f32 {
    let t = trunc(v);
    return select(t, t + sign(v), abs(v - t) >= 0.5);
}

// The fast CPU backend's e^x (`simd::exp` with FMA): x = n·ln2 + r, a
// degree-6 Taylor polynomial in Horner form, times 2^n. Constants by their
// f32 bits.
fn cpu_exp(x_in: f32) -> f32 {
#ifdef FAST
    return exp(x_in);
#endif
    let x = clamp(x_in, -87.0, 88.0);
    let n = round_away(x * bitcast<f32>(0x3fb8aa3bu));
    let r = fmaf(n, -bitcast<f32>(0xb95e8083u), fmaf(n, -bitcast<f32>(0x3f318000u), x));
    var p = bitcast<f32>(0x3ab60b61u); // 1/720
    p = fmaf(p, r, bitcast<f32>(0x3c088889u)); // 1/120
    p = fmaf(p, r, bitcast<f32>(0x3d2aaaabu)); // 1/24
    p = fmaf(p, r, bitcast<f32>(0x3e2aaaabu)); // 1/6
    p = fmaf(p, r, 0.5);
    p = fmaf(p, r, 1.0);
    p = fmaf(p, r, 1.0);
    return p * bitcast<f32>(u32(i32(n) + 127) << 23u);
}

// The fast CPU backend's silu and tanh-GELU.
fn cpu_silu(x: f32) -> f32 {
    return div_rn(x, 1.0 + cpu_exp(-x));
}

// GELU as ggml's CPU takes it from its f16 table: of the input rounded to
// f16, rounded to f16; 0 at or below -10, the input at or above 10.
fn cpu_gelu(x: f32) -> f32 {
    if (x <= -10.0) {
        return 0.0;
    }
    if (x >= 10.0) {
        return x;
    }
    let h = f16_round(x);
    let y = bitcast<f32>(0x3f4c422au) * fmaf(opaque(bitcast<f32>(0x3d372713u) * h) * h, h, h);
    return f16_round(h * (1.0 - div_rn(1.0, cpu_exp(2.0 * y) + 1.0)));
}

#ifdef TABLES
// Constants and tables made on the host in f64 and split into f32 parts
// (`exact::tables`):
//   0..2    32 / ln2, 32 / pi
//   2..5    ln2 / 32 as three parts
//   5..8    pi / 32 as three parts
//   8..72   2^(j/32), j = 0..32, as (hi, lo)
//   72..328 sin and cos of k·pi/32, k = 0..64, as (sin hi, sin lo, cos hi, cos lo)
@group(0) @binding({{TAB}}) var<storage, read> tab: array<f32>;

// x - k·C as a float-float, C given in three parts from tab[c].
fn reduce(x: f32, k: f32, c: u32) -> vec2<f32> {
    let p1 = two_prod(k, tab[c]);
    var r = vec2<f32>(x - p1.x, 0.0);
    r = ff_add_f(r, -p1.y);
    let p2 = two_prod(k, tab[c + 1u]);
    r = ff_add_f(r, -p2.x);
    r = ff_add_f(r, -p2.y);
    return ff_add_f(r, -opaque(k * tab[c + 2u]));
}

// libm's expf(x), correctly rounded (denormal results only roughly).
fn exp_rn(x: f32) -> f32 {
#ifdef FAST
    return exp(x);
#endif
    if (x < -104.0) {
        return 0.0;
    }
    let k = round(min(x, 88.8) * tab[0]);
    let r = reduce(x, k, 2u);
    // e^r - 1 for |r| <= ln2/64: r + r²/2 in float-float, the rest in f32.
    let r2 = ff_mul(r, r);
    var e = ff_add(r, r2 * 0.5);
    e = ff_add_f(e, r2.x * r.x * fmaf(r.x, 1.0 / 24.0, 1.0 / 6.0));
    let ki = i32(k);
    let j = u32(ki & 31);
    let t = vec2<f32>(tab[8u + 2u * j], tab[9u + 2u * j]);
    let y = ff_add(t, ff_mul(t, e)).x;
    // 2^(k >> 5) in two steps, so that neither factor leaves the normals.
    let n = ki >> 5u;
    let n1 = n / 2;
    return y * bitcast<f32>(u32(n1 + 127) << 23u) * bitcast<f32>(u32(n - n1 + 127) << 23u);
}

// (sin t, cos t), each correctly rounded, for t >= 0 of moderate size
// (RoPE angles: positions times frequencies).
fn sincos_rn(t: f32) -> vec2<f32> {
#ifdef FAST
    return vec2<f32>(sin(t), cos(t));
#endif
    let k = round(t * tab[1]);
    let r = reduce(t, k, 5u);
    let r2 = ff_mul(r, r);
    // sin r = r - r³/6 + r⁵/120, cos r = 1 - r²/2 + r⁴/24 - r⁶/720 for
    // |r| <= pi/64: the leading terms in float-float.
    let sr = ff_add_f(r, r2.x * r.x * fmaf(r2.x, 1.0 / 120.0, -1.0 / 6.0));
    var cr = ff_add(vec2<f32>(1.0, 0.0), r2 * -0.5);
    cr = ff_add_f(cr, r2.x * r2.x * fmaf(r2.x, -1.0 / 720.0, 1.0 / 24.0));
    let i = 72u + 4u * u32(i32(k) & 63);
    let sa = vec2<f32>(tab[i], tab[i + 1u]);
    let ca = vec2<f32>(tab[i + 2u], tab[i + 3u]);
    let s = ff_add(ff_mul(sa, cr), ff_mul(ca, sr));
    let c = ff_add(ff_mul(ca, cr), ff_mul(sa, sr) * -1.0);
    return vec2<f32>(s.x, c.x);
}
#endif


#ifdef Q8
// Activations rounded as ggml's quantize_row_q8_1 (quantize.wgsl, and
// fused into norm.wgsl's rms_norm and elementwise.wgsl's GLU): blocks of
// 32, d = amax / 127, q = round_ties_even(x · (127 / amax)) packed 4 per
// word, d and s = d · Σq as f16, widened. A block is spread over 8
// consecutive invocations, one word (4 values) each: invocation lid holds
// word lid % 8 of its block. The block's amax and Σq meet in workgroup
// memory (max and an integer sum: the numbers do not depend on how the
// block is split).
var<workgroup> q8_amax: array<f32, {{WG}}>;
var<workgroup> q8_qsum: array<i32, {{WG}}>;

// A word's rounding: its 4 quants packed, and its block's d and Σq.
struct Q8Word {
    word: u32,
    d: f32,
    total: i32,
}

// Rounds word v (invocation lid's, word lid % 8 of its block). Every
// invocation of the workgroup calls it (barriers); one without a word
// passes zeros.
fn q8_round(v: vec4<f32>, lid: u32) -> Q8Word {
    let first = lid & ~7u;
    q8_amax[lid] = max(max(abs(v.x), abs(v.y)), max(abs(v.z), abs(v.w)));
    workgroupBarrier();
    var amax = 0.0;
    for (var i = 0u; i < 8u; i++) {
        amax = max(amax, q8_amax[first + i]);
    }
    let d = div_rn(amax, 127.0);
    var id = 0.0;
    if (amax != 0.0) {
        id = div_rn(127.0, amax);
    }
    var word = 0u;
    var sum = 0;
    for (var e = 0u; e < 4u; e++) {
        // |x · id| <= 127: the product is rounded, then rounded to an
        // integer, ties to even, as _mm256_round_ps does.
        let q = i32(round(v[e] * id));
        sum += q;
        word |= (bitcast<u32>(q) & 0xffu) << (8u * e);
    }
    q8_qsum[lid] = sum;
    workgroupBarrier();
    var total = 0;
    for (var i = 0u; i < 8u; i++) {
        total += q8_qsum[first + i];
    }
    return Q8Word(word, d, total);
}

#ifndef Q8_LOCAL
// Rounds word v and, when `live`, stores it as word wi of the kernel's
// xq, and (the block's first word) the block's d and s in xd and xs.
// Every invocation of the workgroup calls it (barriers); one without a
// word passes zeros and `live` false.
fn q8_store(v: vec4<f32>, lid: u32, live: bool, wi: u32) {
    let q = q8_round(v, lid);
    if (live) {
        xq[wi] = q.word;
        if (wi % 8u == 0u) {
            xd[wi / 8u] = f16_round(q.d);
            xs[wi / 8u] = f16_round(q.d * f32(q.total));
        }
    }
}
#endif
#endif
