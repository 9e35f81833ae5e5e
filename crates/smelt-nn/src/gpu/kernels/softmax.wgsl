// Softmax over rows and softmax cross-entropy (ops/softmax.rs): one
// invocation per row, sums in order along the row.

struct RowParams {
    rows: u32,
    cols: u32,
    pad: vec2<u32>,
}

@group(0) @binding(0) var<uniform> p: RowParams;
#ifdef SOFTMAX
@group(0) @binding(1) var<storage, read> x: array<f32>;        // (rows, cols)
@group(0) @binding(2) var<storage, read_write> y: array<f32>;  // (rows, cols)
#endif
#ifdef SOFTMAX_GRAD
@group(0) @binding(1) var<storage, read> dy: array<f32>;       // (rows, cols)
@group(0) @binding(2) var<storage, read> y: array<f32>;        // (rows, cols)
@group(0) @binding(3) var<storage, read_write> dx: array<f32>; // (rows, cols)
#endif
#ifdef CE
@group(0) @binding(1) var<storage, read> x: array<f32>;        // (rows, cols) logits
@group(0) @binding(2) var<storage, read> labels: array<f32>;   // (rows)
@group(0) @binding(3) var<storage, read_write> loss: array<f32>; // (rows)
#endif
#ifdef CE_GRAD
@group(0) @binding(1) var<storage, read> dl: array<f32>;       // (rows)
@group(0) @binding(2) var<storage, read> x: array<f32>;        // (rows, cols)
@group(0) @binding(3) var<storage, read> labels: array<f32>;   // (rows)
@group(0) @binding(4) var<storage, read_write> dx: array<f32>; // (rows, cols)
#endif

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = flat(gid, nwg, 64u);
    if (r >= p.rows) {
        return;
    }
    let base = r * p.cols;
#ifdef SOFTMAX_GRAD
    var dot = 0.0;
    for (var c = 0u; c < p.cols; c++) {
        dot += dy[base + c] * y[base + c];
    }
    for (var c = 0u; c < p.cols; c++) {
        dx[base + c] = y[base + c] * (dy[base + c] - dot);
    }
#else
    var m = -3.4028235e38;
    for (var c = 0u; c < p.cols; c++) {
        m = max(m, x[base + c]);
    }
    var s = 0.0;
    for (var c = 0u; c < p.cols; c++) {
        s += exp(x[base + c] - m);
    }
#endif
#ifdef SOFTMAX
    for (var c = 0u; c < p.cols; c++) {
        y[base + c] = exp(x[base + c] - m) / s;
    }
#endif
#ifdef CE
    loss[r] = m + log(s) - x[base + u32(labels[r])];
#endif
#ifdef CE_GRAD
    let label = u32(labels[r]);
    for (var c = 0u; c < p.cols; c++) {
        var onehot = 0.0;
        if (c == label) {
            onehot = 1.0;
        }
        dx[base + c] = (exp(x[base + c] - m) / s - onehot) * dl[r];
    }
#endif
}
