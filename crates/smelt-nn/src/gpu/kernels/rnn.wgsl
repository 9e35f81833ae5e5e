// LSTM and GRU steps (ops/rnn.rs). LSTM_SEQ and LSTM_GRAD_SEQ run a whole
// sequence in one dispatch (below); the others are one dispatch per time
// step, one invocation per (batch row b, hidden unit j), each recurrent dot
// product summed over k in order from zero, an fma a term (as the CPU's gemm). The forward steps read W_hh transposed
// (TRANSPOSE writes it once per run), so that neighbouring invocations
// (neighbouring j) read neighbouring weights. Gradients run the steps
// backwards; the dispatch with t = steps makes dh0.

struct RnnParams {
    steps: u32,
    batch: u32,
    hidden: u32,
    t: u32,
}

@group(0) @binding(0) var<uniform> p: RnnParams;

// One LSTM cell's backward step, for LSTM_GRAD and LSTM_GRAD_SEQ alike:
// from the gates i, f, g, o (activated), the cell c and the previous cell
// cprev, the incoming dh and the next step's dc, the cell gradient passed
// back (dc · f) and the four pre-activation gradients.
struct CellGrad {
    dc_prev: f32,
    dpre: vec4<f32>, // i, f, g, o
}

fn lstm_cell_grad(gate: vec4<f32>, c: f32, cprev: f32, dh: f32, dc_next: f32) -> CellGrad {
    let i = gate.x;
    let f = gate.y;
    let g = gate.z;
    let o = gate.w;
    let tc = tanh(c);
    let d_o = dh * tc;
    let dcv = dc_next + dh * o * (1.0 - tc * tc);
    return CellGrad(
        dcv * f,
        vec4<f32>(dcv * g * (i * (1.0 - i)), dcv * cprev * (f * (1.0 - f)), dcv * i * (1.0 - g * g), d_o * (o * (1.0 - o))),
    );
}

#ifdef LSTM
@group(0) @binding(1) var<storage, read> xp: array<f32>;          // (T, B, 4H)
@group(0) @binding(2) var<storage, read> wt: array<f32>;          // (H, 4H): W_hh transposed
@group(0) @binding(3) var<storage, read> h0: array<f32>;          // (B, H)
@group(0) @binding(4) var<storage, read> c0: array<f32>;          // (B, H)
@group(0) @binding(5) var<storage, read_write> hs: array<f32>;    // (T, B, H)
@group(0) @binding(6) var<storage, read_write> cs: array<f32>;    // (T, B, H)
@group(0) @binding(7) var<storage, read_write> gates: array<f32>; // (T, B, 4H)
@group(0) @binding(8) var<storage, read> bias: array<f32>;        // (4H)

fn hprev(b: u32, k: u32) -> f32 {
    if (p.t == 0u) {
        return h0[b * p.hidden + k];
    }
    return hs[((p.t - 1u) * p.batch + b) * p.hidden + k];
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = flat(gid, nwg, 64u);
    let h = p.hidden;
    if (idx >= p.batch * h) {
        return;
    }
    let b = idx / h;
    let j = idx % h;
    var dot = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var k = 0u; k < h; k++) {
        let hv = hprev(b, k);
        for (var q = 0u; q < 4u; q++) {
            dot[q] = fma(hv, wt[k * 4u * h + q * h + j], dot[q]);
        }
    }
    let base = (p.t * p.batch + b) * 4u * h + j;
    let i = sigmoid((xp[base] + bias[j]) + dot[0]);
    let f = sigmoid((xp[base + h] + bias[h + j]) + dot[1]);
    let g = tanh((xp[base + 2u * h] + bias[2u * h + j]) + dot[2]);
    let o = sigmoid((xp[base + 3u * h] + bias[3u * h + j]) + dot[3]);
    var cprev = 0.0;
    if (p.t == 0u) {
        cprev = c0[idx];
    } else {
        cprev = cs[((p.t - 1u) * p.batch + b) * h + j];
    }
    let c = f * cprev + i * g;
    let at = (p.t * p.batch + b) * h + j;
    cs[at] = c;
    hs[at] = o * tanh(c);
    gates[base] = i;
    gates[base + h] = f;
    gates[base + 2u * h] = g;
    gates[base + 3u * h] = o;
}
#endif

#ifdef LSTM_SEQ
// The whole sequence in one dispatch: batch rows are independent at every
// step, so a workgroup owns {{ROWS}} of them and runs every step itself,
// its rows' h₋₁ in workgroup memory; invocation j computes hidden unit
// j's four gates (one vec4) of each row, summed over k in order from zero
// as LSTM does, and the cell update in the same pass.
@group(0) @binding(1) var<storage, read> xp: array<f32>;          // (T, B, 4H)
@group(0) @binding(2) var<storage, read> wt: array<f32>;          // (H, 4H): W_hh transposed
@group(0) @binding(3) var<storage, read> h0: array<f32>;          // (B, H)
@group(0) @binding(4) var<storage, read> c0: array<f32>;          // (B, H)
@group(0) @binding(5) var<storage, read_write> hs: array<f32>;    // (T, B, H)
@group(0) @binding(6) var<storage, read_write> cs: array<f32>;    // (T, B, H)
@group(0) @binding(7) var<storage, read_write> gates: array<f32>; // (T, B, 4H)
@group(0) @binding(8) var<storage, read> bias: array<f32>;        // (4H)

const ROWS: u32 = {{ROWS}}u;
const WG: u32 = {{WG}}u;
var<workgroup> hw: array<f32, {{SHARED}}>;                        // (ROWS, H): h₋₁

// Unit j's four gate weights at k: W_hh[q·H + j, k] for q = i, f, g, o.
fn weights4(k: u32, j: u32) -> vec4<f32> {
    let h = p.hidden;
    let w = k * 4u * h + j;
    return vec4<f32>(wt[w], wt[w + h], wt[w + 2u * h], wt[w + 3u * h]);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = p.hidden;
    let b0 = wid.x * ROWS;
    for (var e = lid; e < ROWS * h; e += WG) {
        let b = b0 + e / h;
        hw[e] = select(0.0, h0[min(b, p.batch - 1u) * h + e % h], b < p.batch);
    }
    workgroupBarrier();
    for (var t = 0u; t < p.steps; t++) {
        for (var j = lid; j < h; j += WG) {
            var dot: array<vec4<f32>, {{ROWS}}>;
            // 16 steps of k loaded before their terms are added (in
            // order): 64 loads in flight (see back_dots).
            var k = 0u;
            for (; k + 16u <= h; k += 16u) {
                let w0 = weights4(k, j);
                let w1 = weights4(k + 1u, j);
                let w2 = weights4(k + 2u, j);
                let w3 = weights4(k + 3u, j);
                let w4 = weights4(k + 4u, j);
                let w5 = weights4(k + 5u, j);
                let w6 = weights4(k + 6u, j);
                let w7 = weights4(k + 7u, j);
                let w8 = weights4(k + 8u, j);
                let w9 = weights4(k + 9u, j);
                let w10 = weights4(k + 10u, j);
                let w11 = weights4(k + 11u, j);
                let w12 = weights4(k + 12u, j);
                let w13 = weights4(k + 13u, j);
                let w14 = weights4(k + 14u, j);
                let w15 = weights4(k + 15u, j);
                for (var r = 0u; r < ROWS; r++) {
                    dot[r] = fma(vec4<f32>(hw[r * h + k]), w0, dot[r]);
                    dot[r] = fma(vec4<f32>(hw[r * h + k + 1u]), w1, dot[r]);
                    dot[r] = fma(vec4<f32>(hw[r * h + k + 2u]), w2, dot[r]);
                    dot[r] = fma(vec4<f32>(hw[r * h + k + 3u]), w3, dot[r]);
                    dot[r] = fma(vec4<f32>(hw[r * h + k + 4u]), w4, dot[r]);
                    dot[r] = fma(vec4<f32>(hw[r * h + k + 5u]), w5, dot[r]);
                    dot[r] = fma(vec4<f32>(hw[r * h + k + 6u]), w6, dot[r]);
                    dot[r] = fma(vec4<f32>(hw[r * h + k + 7u]), w7, dot[r]);
                    dot[r] = fma(vec4<f32>(hw[r * h + k + 8u]), w8, dot[r]);
                    dot[r] = fma(vec4<f32>(hw[r * h + k + 9u]), w9, dot[r]);
                    dot[r] = fma(vec4<f32>(hw[r * h + k + 10u]), w10, dot[r]);
                    dot[r] = fma(vec4<f32>(hw[r * h + k + 11u]), w11, dot[r]);
                    dot[r] = fma(vec4<f32>(hw[r * h + k + 12u]), w12, dot[r]);
                    dot[r] = fma(vec4<f32>(hw[r * h + k + 13u]), w13, dot[r]);
                    dot[r] = fma(vec4<f32>(hw[r * h + k + 14u]), w14, dot[r]);
                    dot[r] = fma(vec4<f32>(hw[r * h + k + 15u]), w15, dot[r]);
                }
            }
            for (; k < h; k++) {
                let wk = weights4(k, j);
                for (var r = 0u; r < ROWS; r++) {
                    dot[r] = fma(vec4<f32>(hw[r * h + k]), wk, dot[r]);
                }
            }
            for (var r = 0u; r < ROWS; r++) {
                let b = b0 + r;
                if (b >= p.batch) {
                    break;
                }
                let base = (t * p.batch + b) * 4u * h + j;
                let i = sigmoid((xp[base] + bias[j]) + dot[r].x);
                let f = sigmoid((xp[base + h] + bias[h + j]) + dot[r].y);
                let g = tanh((xp[base + 2u * h] + bias[2u * h + j]) + dot[r].z);
                let o = sigmoid((xp[base + 3u * h] + bias[3u * h + j]) + dot[r].w);
                var cprev = 0.0;
                if (t == 0u) {
                    cprev = c0[b * h + j];
                } else {
                    cprev = cs[((t - 1u) * p.batch + b) * h + j];
                }
                let c = f * cprev + i * g;
                let at = (t * p.batch + b) * h + j;
                cs[at] = c;
                hs[at] = o * tanh(c);
                gates[base] = i;
                gates[base + h] = f;
                gates[base + 2u * h] = g;
                gates[base + 3u * h] = o;
            }
        }
        // Every invocation has read h₋₁; each then moves in the h it wrote.
        workgroupBarrier();
        for (var j = lid; j < h; j += WG) {
            for (var r = 0u; r < ROWS; r++) {
                let b = b0 + r;
                if (b < p.batch) {
                    hw[r * h + j] = hs[(t * p.batch + b) * h + j];
                }
            }
        }
        workgroupBarrier();
    }
}
#endif

#ifdef LSTM_GRAD_SEQ
// The backward steps in one dispatch, batch rows split between workgroups
// as in LSTM_SEQ: a workgroup keeps its rows' pre-activation gradients of
// the step after in workgroup memory; invocation j sums dh over m in order
// from zero (LSTM_GRAD's order) and writes hidden unit j's four gate
// gradients. After step 0, dh0 is the same product of step 0's.
@group(0) @binding(1) var<storage, read> dhs: array<f32>;         // (T, B, H)
@group(0) @binding(2) var<storage, read> gates: array<f32>;       // (T, B, 4H)
@group(0) @binding(3) var<storage, read> cs: array<f32>;          // (T, B, H)
@group(0) @binding(4) var<storage, read> c0: array<f32>;          // (B, H)
@group(0) @binding(5) var<storage, read> w: array<f32>;           // (4H, H)
@group(0) @binding(6) var<storage, read_write> dxp: array<f32>;   // (T, B, 4H)
@group(0) @binding(7) var<storage, read_write> dh0: array<f32>;   // (B, H)
@group(0) @binding(8) var<storage, read_write> dc: array<f32>;    // (B, H): the running dc, then dc0

const ROWS: u32 = {{ROWS}}u;
const WG: u32 = {{WG}}u;
var<workgroup> dw: array<f32, {{SHARED}}>;                        // (ROWS, 4H): dpre of step s + 1

// Four weights of column j from row m on: w[m..m + 4, j].
fn column4(m: u32, j: u32) -> vec4<f32> {
    let h = p.hidden;
    return vec4<f32>(w[m * h + j], w[(m + 1u) * h + j], w[(m + 2u) * h + j], w[(m + 3u) * h + j]);
}

// Four neighbouring staged gradients from d on.
fn dpre4(d: u32) -> vec4<f32> {
    return vec4<f32>(dw[d], dw[d + 1u], dw[d + 2u], dw[d + 3u]);
}

// acc + x.x·y.x + x.y·y.y + x.z·y.z + x.w·y.w, added in that order.
fn add4(acc: f32, x: vec4<f32>, y: vec4<f32>) -> f32 {
    return fma(x.w, y.w, fma(x.z, y.z, fma(x.y, y.y, fma(x.x, y.x, acc))));
}

// Σ_m dpre[s + 1, row, m] · w[m, j] of each row, m in order. 64 weights
// are loaded before their terms are added (in order), so that 64 loads are
// in flight: a workgroup per batch row leaves too few threads on the GPU
// to hide a load's latency otherwise (64 rather than 8: a training step
// 4.7 -> 3.6 ms on an H200).
fn back_dots(j: u32) -> array<f32, {{ROWS}}> {
    let h = p.hidden;
    let n = 4u * h;
    var acc: array<f32, {{ROWS}}>;
    var m = 0u;
    for (; m + 64u <= n; m += 64u) {
        let w0 = column4(m, j);
        let w1 = column4(m + 4u, j);
        let w2 = column4(m + 8u, j);
        let w3 = column4(m + 12u, j);
        let w4 = column4(m + 16u, j);
        let w5 = column4(m + 20u, j);
        let w6 = column4(m + 24u, j);
        let w7 = column4(m + 28u, j);
        let w8 = column4(m + 32u, j);
        let w9 = column4(m + 36u, j);
        let w10 = column4(m + 40u, j);
        let w11 = column4(m + 44u, j);
        let w12 = column4(m + 48u, j);
        let w13 = column4(m + 52u, j);
        let w14 = column4(m + 56u, j);
        let w15 = column4(m + 60u, j);
        for (var r = 0u; r < ROWS; r++) {
            let d = r * n + m;
            var a = acc[r];
            a = add4(a, dpre4(d), w0);
            a = add4(a, dpre4(d + 4u), w1);
            a = add4(a, dpre4(d + 8u), w2);
            a = add4(a, dpre4(d + 12u), w3);
            a = add4(a, dpre4(d + 16u), w4);
            a = add4(a, dpre4(d + 20u), w5);
            a = add4(a, dpre4(d + 24u), w6);
            a = add4(a, dpre4(d + 28u), w7);
            a = add4(a, dpre4(d + 32u), w8);
            a = add4(a, dpre4(d + 36u), w9);
            a = add4(a, dpre4(d + 40u), w10);
            a = add4(a, dpre4(d + 44u), w11);
            a = add4(a, dpre4(d + 48u), w12);
            a = add4(a, dpre4(d + 52u), w13);
            a = add4(a, dpre4(d + 56u), w14);
            a = add4(a, dpre4(d + 60u), w15);
            acc[r] = a;
        }
    }
    for (; m < n; m++) {
        let wv = w[m * h + j];
        for (var r = 0u; r < ROWS; r++) {
            acc[r] = fma(dw[r * n + m], wv, acc[r]);
        }
    }
    return acc;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = p.hidden;
    let b0 = wid.x * ROWS;
    for (var e = lid; e < ROWS * 4u * h; e += WG) {
        dw[e] = 0.0;
    }
    workgroupBarrier();
    for (var step = 0u; step < p.steps; step++) {
        let s = p.steps - 1u - step;
        for (var j = lid; j < h; j += WG) {
            var dots: array<f32, {{ROWS}}>;
            if (step > 0u) {
                dots = back_dots(j);
            }
            for (var r = 0u; r < ROWS; r++) {
                let b = b0 + r;
                if (b >= p.batch) {
                    break;
                }
                let idx = b * h + j;
                let base = (s * p.batch + b) * 4u * h + j;
                let i = gates[base];
                let f = gates[base + h];
                let g = gates[base + 2u * h];
                let o = gates[base + 3u * h];
                let at = (s * p.batch + b) * h + j;
                var dh = dhs[at];
                var dc_next = 0.0;
                if (step > 0u) {
                    dh = dhs[at] + dots[r];
                    dc_next = dc[idx];
                }
                let c = cs[at];
                var cprev = 0.0;
                if (s == 0u) {
                    cprev = c0[idx];
                } else {
                    cprev = cs[at - p.batch * h];
                }
                let cg = lstm_cell_grad(vec4<f32>(i, f, g, o), c, cprev, dh, dc_next);
                dc[idx] = cg.dc_prev;
                dxp[base] = cg.dpre.x;
                dxp[base + h] = cg.dpre.y;
                dxp[base + 2u * h] = cg.dpre.z;
                dxp[base + 3u * h] = cg.dpre.w;
            }
        }
        // Every invocation has read step s + 1's gradients; each then moves
        // in the ones it wrote.
        workgroupBarrier();
        for (var j = lid; j < h; j += WG) {
            for (var r = 0u; r < ROWS; r++) {
                let b = b0 + r;
                if (b < p.batch) {
                    let base = (s * p.batch + b) * 4u * h + j;
                    for (var q = 0u; q < 4u; q++) {
                        dw[r * 4u * h + q * h + j] = dxp[base + q * h];
                    }
                }
            }
        }
        workgroupBarrier();
    }
    for (var j = lid; j < h; j += WG) {
        let dots = back_dots(j);
        for (var r = 0u; r < ROWS; r++) {
            let b = b0 + r;
            if (b < p.batch) {
                dh0[b * h + j] = dots[r];
            }
        }
    }
}
#endif

#ifdef LSTM_GRAD
@group(0) @binding(1) var<storage, read> dhs: array<f32>;         // (T, B, H)
@group(0) @binding(2) var<storage, read> gates: array<f32>;       // (T, B, 4H)
@group(0) @binding(3) var<storage, read> cs: array<f32>;          // (T, B, H)
@group(0) @binding(4) var<storage, read> c0: array<f32>;          // (B, H)
@group(0) @binding(5) var<storage, read> w: array<f32>;           // (4H, H)
@group(0) @binding(6) var<storage, read_write> dxp: array<f32>;   // (T, B, 4H)
@group(0) @binding(7) var<storage, read_write> dh0: array<f32>;   // (B, H)
@group(0) @binding(8) var<storage, read_write> dc: array<f32>;    // (B, H): the running dc, then dc0

// Σ_m dxp[s, b, m] · w[m, j], m in order.
fn back_dot(s: u32, b: u32, j: u32) -> f32 {
    let h = p.hidden;
    var acc = 0.0;
    for (var m = 0u; m < 4u * h; m++) {
        acc = fma(dxp[(s * p.batch + b) * 4u * h + m], w[m * h + j], acc);
    }
    return acc;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = flat(gid, nwg, 64u);
    let h = p.hidden;
    if (idx >= p.batch * h) {
        return;
    }
    let b = idx / h;
    let j = idx % h;
    if (p.t == p.steps) {
        dh0[idx] = back_dot(0u, b, j);
        return;
    }
    let s = p.t;
    let base = (s * p.batch + b) * 4u * h + j;
    let i = gates[base];
    let f = gates[base + h];
    let g = gates[base + 2u * h];
    let o = gates[base + 3u * h];
    let at = (s * p.batch + b) * h + j;
    var dh = dhs[at];
    var dc_next = 0.0;
    if (s + 1u < p.steps) {
        dh = dhs[at] + back_dot(s + 1u, b, j);
        dc_next = dc[idx];
    }
    let c = cs[at];
    var cprev = 0.0;
    if (s == 0u) {
        cprev = c0[idx];
    } else {
        cprev = cs[at - p.batch * h];
    }
    let cg = lstm_cell_grad(vec4<f32>(i, f, g, o), c, cprev, dh, dc_next);
    dc[idx] = cg.dc_prev;
    dxp[base] = cg.dpre.x;
    dxp[base + h] = cg.dpre.y;
    dxp[base + 2u * h] = cg.dpre.z;
    dxp[base + 3u * h] = cg.dpre.w;
}
#endif

#ifdef GRU
@group(0) @binding(1) var<storage, read> xp: array<f32>;          // (T, B, 3H)
@group(0) @binding(2) var<storage, read> wt: array<f32>;          // (H, 3H): W_hh transposed
@group(0) @binding(3) var<storage, read> bias: array<f32>;        // (3H)
@group(0) @binding(4) var<storage, read> h0: array<f32>;          // (B, H)
@group(0) @binding(5) var<storage, read_write> hs: array<f32>;    // (T, B, H)
@group(0) @binding(6) var<storage, read_write> acts: array<f32>;  // (T, B, 4H): r, z, n, rec_n

fn hprev(b: u32, k: u32) -> f32 {
    if (p.t == 0u) {
        return h0[b * p.hidden + k];
    }
    return hs[((p.t - 1u) * p.batch + b) * p.hidden + k];
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = flat(gid, nwg, 64u);
    let h = p.hidden;
    if (idx >= p.batch * h) {
        return;
    }
    let b = idx / h;
    let j = idx % h;
    var dot = array<f32, 3>(0.0, 0.0, 0.0);
    for (var k = 0u; k < h; k++) {
        let hv = hprev(b, k);
        for (var q = 0u; q < 3u; q++) {
            dot[q] = fma(hv, wt[k * 3u * h + q * h + j], dot[q]);
        }
    }
    let x = (p.t * p.batch + b) * 3u * h + j;
    let r = sigmoid(xp[x] + (dot[0] + bias[j]));
    let z = sigmoid(xp[x + h] + (dot[1] + bias[h + j]));
    let hn = dot[2] + bias[2u * h + j];
    let n = tanh(xp[x + 2u * h] + r * hn);
    let hp = hprev(b, j);
    hs[(p.t * p.batch + b) * h + j] = (1.0 - z) * n + z * hp;
    let a = (p.t * p.batch + b) * 4u * h + j;
    acts[a] = r;
    acts[a + h] = z;
    acts[a + 2u * h] = n;
    acts[a + 3u * h] = hn;
}
#endif

#ifdef GRU_GRAD
@group(0) @binding(1) var<storage, read> dhs: array<f32>;         // (T, B, H)
@group(0) @binding(2) var<storage, read> acts: array<f32>;        // (T, B, 4H)
@group(0) @binding(3) var<storage, read> hs: array<f32>;          // (T, B, H)
@group(0) @binding(4) var<storage, read> h0: array<f32>;          // (B, H)
@group(0) @binding(5) var<storage, read> w: array<f32>;           // (3H, H)
@group(0) @binding(6) var<storage, read_write> dxp: array<f32>;   // (T, B, 3H)
@group(0) @binding(7) var<storage, read_write> drec: array<f32>;  // (T, B, 3H)
@group(0) @binding(8) var<storage, read_write> dh: array<f32>;     // (B, H): the running dh, then dh0

fn back_dot(s: u32, b: u32, j: u32) -> f32 {
    let h = p.hidden;
    var acc = 0.0;
    for (var m = 0u; m < 3u * h; m++) {
        acc = fma(drec[(s * p.batch + b) * 3u * h + m], w[m * h + j], acc);
    }
    return acc;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = flat(gid, nwg, 64u);
    let h = p.hidden;
    if (idx >= p.batch * h) {
        return;
    }
    let b = idx / h;
    let j = idx % h;
    if (p.t == p.steps) {
        dh[idx] = back_dot(0u, b, j) + dh[idx] * acts[b * 4u * h + h + j];
        return;
    }
    let s = p.t;
    let a = (s * p.batch + b) * 4u * h + j;
    let r = acts[a];
    let z = acts[a + h];
    let n = acts[a + 2u * h];
    let hn = acts[a + 3u * h];
    let at = (s * p.batch + b) * h + j;
    var d = dhs[at];
    if (s + 1u < p.steps) {
        let zn = acts[((s + 1u) * p.batch + b) * 4u * h + h + j];
        d = dhs[at] + back_dot(s + 1u, b, j) + dh[idx] * zn;
    }
    dh[idx] = d;
    var hp = 0.0;
    if (s == 0u) {
        hp = h0[idx];
    } else {
        hp = hs[at - p.batch * h];
    }
    let dn = d * (1.0 - z) * (1.0 - n * n);
    let dz = d * (hp - n) * (z * (1.0 - z));
    let dr = dn * hn * (r * (1.0 - r));
    let o = (s * p.batch + b) * 3u * h + j;
    dxp[o] = dr;
    dxp[o + h] = dz;
    dxp[o + 2u * h] = dn;
    drec[o] = dr;
    drec[o + h] = dz;
    drec[o + 2u * h] = dn * r;
}
#endif

#ifdef TRANSPOSE
// wt[k, r] = w[r, k]: p.steps = w's rows (gates · H), p.hidden = H.
@group(0) @binding(1) var<storage, read> w: array<f32>;           // (rows, H)
@group(0) @binding(2) var<storage, read_write> wt: array<f32>;    // (H, rows)

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg, 64u);
    let rows = p.steps;
    if (i >= rows * p.hidden) {
        return;
    }
    let k = i / rows;
    let r = i % rows;
    wt[i] = w[r * p.hidden + k];
}
#endif

#ifdef SHIFT
// [h0; hs[..T-1]]: p.steps = all elements, p.batch = h0's elements.
@group(0) @binding(1) var<storage, read> h0: array<f32>;
@group(0) @binding(2) var<storage, read> hs: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg, 64u);
    if (i >= p.steps) {
        return;
    }
    if (i < p.batch) {
        out[i] = h0[i];
    } else {
        out[i] = hs[i - p.batch];
    }
}
#endif
