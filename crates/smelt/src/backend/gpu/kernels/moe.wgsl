// Mixture-of-experts routing and combining, as the CPU's reference computes
// them (backend/cpu/reference.rs):
//
// TOPK: a workgroup per token row of router logits (cols = n_expert).
//   SOFTMAX gating: p = softmax(logits) (exp(x - max), summed in f64 as a
//   float-float, times the f32 reciprocal of the sum), experts ranked by p;
//   otherwise (softmax-weight) ranked by the logits, and the k chosen
//   logits then go through the same softmax. NORMALIZE (params): the
//   chosen weights divided by their f64 sum, clamped to f16's smallest
//   normal. The k best are picked one at a time: each is the best of those
//   ranked after the previous pick, in the order (value descending by
//   Rust's total_cmp, then index ascending), so ties go to the lower
//   expert as on the CPU.
// SUM: out[t, c] = Σ_j weights[t, j] · experts[t·K + j, c], the products
//   rounded before each add in order of j, an invocation per output.

struct Params {
    rows: u32,       // tokens
    cols: u32,       // TOPK: experts; SUM: values per row
    k_used: u32,     // experts per token
    normalize: u32,  // TOPK: 1 to divide the weights by their sum
    zero: u32,       // 0 (exact.wgsl's `opaque`)
}
@group(0) @binding(0) var<uniform> P: Params;

#ifdef TOPK
@group(0) @binding(1) var<storage, read> logits: array<f32>;      // (rows, n_expert)
@group(0) @binding(2) var<storage, read_write> ids: array<i32>;   // (rows, k_used)
@group(0) @binding(3) var<storage, read_write> weights: array<f32>; // (rows, k_used)

const MAX_EXPERTS: u32 = {{MAX_EXPERTS}}u;
const MAX_USED: u32 = {{MAX_USED}}u;

var<workgroup> probs: array<f32, MAX_EXPERTS>;
var<workgroup> best_key: array<u32, RED_WG>;
var<workgroup> best_idx: array<u32, RED_WG>;
var<workgroup> inv_sum: f32;

const NONE: u32 = 0xffffffffu;

// A u32 that orders as Rust's f32::total_cmp orders the floats.
fn order_key(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

// Whether (ka, ia) ranks before (kb, ib): larger value, then lower index.
fn before(ka: u32, ia: u32, kb: u32, ib: u32) -> bool {
    return ka > kb || (ka == kb && ia < ib);
}

// 1 / (hi + lo) rounded to f32: f64's `1.0 / sum` then `as f32`.
fn ff_recip(s: vec2<f32>) -> f32 {
#ifdef FAST
    return 1.0 / s.x;
#else
    let q = div_rn(1.0, s.x);
    let r = fmaf(-q, s.x, 1.0) - opaque(q * s.y);
    return q + r / s.x;
#endif
}

// ggml's softmax of w[0..n] in place, as the CPU's `softmax_ggml`.
fn softmax_small(w: ptr<function, array<f32, MAX_USED>>, n: u32) {
    var mx = (*w)[0];
    for (var j = 1u; j < n; j++) {
        mx = max(mx, (*w)[j]);
    }
    var s = vec2<f32>(0.0);
    for (var j = 0u; j < n; j++) {
        (*w)[j] = exp_rn((*w)[j] - mx);
        s = ff_add_f(s, (*w)[j]);
    }
    let inv = ff_recip(s);
    for (var j = 0u; j < n; j++) {
        (*w)[j] *= inv;
    }
}

@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = wg_index(wid, nwg);
    if (t >= P.rows) {
        return;
    }
    let n = P.cols;
    let k = P.k_used;
    let row = t * n;
    for (var c = ln.lid; c < n; c += RED_WG) {
        probs[c] = logits[row + c];
    }
#ifdef SOFTMAX
    var mx = NEG_BIG;
    for (var c = ln.lid; c < n; c += RED_WG) {
        mx = max(mx, probs[c]);
    }
    mx = wg_max(mx, ln);
    for (var c = ln.lid; c < n; c += RED_WG) {
        probs[c] = exp_rn(probs[c] - mx);
    }
    workgroupBarrier();
    if (ln.lid == 0u) {
        // In order, as the CPU's f64 sum.
        var s = vec2<f32>(0.0);
        for (var c = 0u; c < n; c++) {
            s = ff_add_f(s, probs[c]);
        }
        inv_sum = ff_recip(s);
    }
    workgroupBarrier();
    let inv = inv_sum;
    for (var c = ln.lid; c < n; c += RED_WG) {
        probs[c] *= inv;
    }
#endif
    workgroupBarrier();
    // The k best, one pick at a time.
    var w: array<f32, MAX_USED>;
    var prev_key = NONE;
    var prev_idx = NONE;
    for (var j = 0u; j < k; j++) {
        var bk = 0u;
        var bi = NONE;
        for (var c = ln.lid; c < n; c += RED_WG) {
            let key = order_key(probs[c]);
            let after = j == 0u || before(prev_key, prev_idx, key, c);
            if (after && (bi == NONE || before(key, c, bk, bi))) {
                bk = key;
                bi = c;
            }
        }
        best_key[ln.lid] = bk;
        best_idx[ln.lid] = bi;
        for (var s = RED_WG / 2u; s > 0u; s >>= 1u) {
            workgroupBarrier();
            if (ln.lid < s) {
                let ok = best_key[ln.lid + s];
                let oi = best_idx[ln.lid + s];
                let mi = best_idx[ln.lid];
                if (oi != NONE && (mi == NONE || before(ok, oi, best_key[ln.lid], mi))) {
                    best_key[ln.lid] = ok;
                    best_idx[ln.lid] = oi;
                }
            }
        }
        workgroupBarrier();
        prev_key = best_key[0];
        prev_idx = best_idx[0];
        // Everyone has read the pick before the next one is reduced.
        workgroupBarrier();
        if (ln.lid == 0u) {
            ids[t * k + j] = i32(prev_idx);
            w[j] = probs[prev_idx];
        }
    }
    if (ln.lid != 0u) {
        return;
    }
#ifndef SOFTMAX
    softmax_small(&w, k);
#endif
    if (P.normalize != 0u) {
        var s = vec2<f32>(0.0);
        for (var j = 0u; j < k; j++) {
            s = ff_add_f(s, w[j]);
        }
        // ggml's f16-normal floor against a division by zero.
        let sum = max(s.x, 6.103515625e-5);
        for (var j = 0u; j < k; j++) {
            w[j] = div_rn(w[j], sum);
        }
    }
    for (var j = 0u; j < k; j++) {
        weights[t * k + j] = w[j];
    }
}
#endif

#ifdef SUM
@group(0) @binding(1) var<storage, read> experts: array<f32>;     // (rows · k_used, cols)
@group(0) @binding(2) var<storage, read> weights: array<f32>;     // (rows, k_used)
@group(0) @binding(3) var<storage, read_write> out: array<f32>;   // (rows, cols)

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = wg_index(wid, nwg) * {{WG}}u + lid;
    let n = P.cols;
    if (i >= P.rows * n) {
        return;
    }
    let t = i / n;
    let c = i % n;
    let k = P.k_used;
    var o = experts[t * k * n + c] * weights[t * k];
    for (var j = 1u; j < k; j++) {
        o += opaque(experts[(t * k + j) * n + c] * weights[t * k + j]);
    }
    out[i] = o;
}
#endif
