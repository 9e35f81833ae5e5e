// softmax of each row, and argmax of each row (ARGMAX define). One
// workgroup per row.

struct Params {
    rows: u32,
    cols: u32,
}
@group(0) @binding(0) var<uniform> P: Params;

@group(0) @binding(1) var<storage, read_write> x: array<f32>;     // (rows, cols)
#ifdef ARGMAX
@group(0) @binding(2) var<storage, read_write> out: array<i32>;   // (rows)

var<workgroup> best_i: array<u32, RED_WG>;
#else
@group(0) @binding(2) var<storage, read_write> out: array<f32>;   // (rows, cols)
#endif

@compute @workgroup_size({{WG}})
fn main(ln: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = wg_index(wid, nwg);
    let cols = P.cols;
    if (r >= P.rows) {
        return;
    }
    let b = r * cols;
#ifdef ARGMAX
    // Each invocation keeps its first maximum; the tree keeps the lower
    // index on ties, so the result is the row's first maximum, like the CPU.
    var bv = NEG_BIG;
    var bi = 0xffffffffu;
    for (var c = ln.lid; c < cols; c += RED_WG) {
        if (x[b + c] > bv || bi == 0xffffffffu) {
            bv = x[b + c];
            bi = c;
        }
    }
    red[ln.lid] = bv;
    best_i[ln.lid] = bi;
    for (var s = RED_WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (ln.lid < s) {
            let ov = red[ln.lid + s];
            let oi = best_i[ln.lid + s];
            let mine = best_i[ln.lid];
            if (oi != 0xffffffffu && (mine == 0xffffffffu || ov > red[ln.lid] || (ov == red[ln.lid] && oi < mine))) {
                red[ln.lid] = ov;
                best_i[ln.lid] = oi;
            }
        }
    }
    if (ln.lid == 0u) {
        out[r] = i32(best_i[0]);
    }
#else
    var mx = NEG_BIG;
    for (var c = ln.lid; c < cols; c += RED_WG) {
        mx = max(mx, x[b + c]);
    }
    mx = wg_max(mx, ln);
    var s = 0.0;
    for (var c = ln.lid; c < cols; c += RED_WG) {
        s += exp(x[b + c] - mx);
    }
    let inv = 1.0 / wg_sum(s, ln);
    for (var c = ln.lid; c < cols; c += RED_WG) {
        out[b + c] = exp(x[b + c] - mx) * inv;
    }
#endif
}
