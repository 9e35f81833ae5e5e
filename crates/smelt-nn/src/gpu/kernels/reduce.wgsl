// SumTo: out[j] = Σ_q (Σ_r x[q·inner·count + j·inner + r]), inner sums in
// order from zero, each added to the total in order (ops/reduce.rs).

struct SumToParams {
    inner: u32,
    count: u32,
    outer: u32,
    pad: u32,
}

@group(0) @binding(0) var<uniform> p: SumToParams;
@group(0) @binding(1) var<storage, read> x: array<f32>;        // (outer, count, inner)
@group(0) @binding(2) var<storage, read_write> out: array<f32>; // (count)

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = flat(gid, nwg, 64u);
    if (j >= p.count) {
        return;
    }
    let period = p.inner * p.count;
    var total = 0.0;
    for (var q = 0u; q < p.outer; q++) {
        let base = q * period + j * p.inner;
        var partial = 0.0;
        for (var r = 0u; r < p.inner; r++) {
            partial += x[base + r];
        }
        total += partial;
    }
    out[j] = total;
}
