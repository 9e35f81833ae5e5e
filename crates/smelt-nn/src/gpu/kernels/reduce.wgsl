// SumTo: out[j] = Σ of the terms e < terms, term e being
// x[(e / inner)·inner·count + j·inner + e % inner], as a fixed tree
// (ops/reduce.rs): lane t of `lanes` sums the terms e ≡ t (mod lanes) in
// order of e from zero, then the lanes are halved in workgroup memory,
// part[t] += part[t + s] for s = lanes/2, …, 1. 256 / lanes outputs per
// workgroup, its invocations output-major or (outputs_minor) lane-major.

struct SumToParams {
    inner: u32,
    count: u32,
    terms: u32,
    lanes: u32,
    outputs_minor: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> p: SumToParams;
@group(0) @binding(1) var<storage, read> x: array<f32>;        // (outer, count, inner)
@group(0) @binding(2) var<storage, read_write> out: array<f32>; // (count)

var<workgroup> part: array<f32, 256>;

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let group = wid.x + wid.y * nwg.x;
    let per_group = 256u / p.lanes;
    // Where lane `lane` of the group's output `o` keeps its sum.
    var lane = t % p.lanes;
    var o = t / p.lanes;
    var lane_step = 1u;
    if (p.outputs_minor == 1u) {
        lane = t / per_group;
        o = t % per_group;
        lane_step = per_group;
    }
    let j = group * per_group + o;
    var acc = 0.0;
    if (j < p.count) {
        let period = p.inner * p.count;
        // Term e = lane + i·lanes, walked as (q, r) = (e / inner, e % inner).
        let dq = p.lanes / p.inner;
        let dr = p.lanes % p.inner;
        var q = lane / p.inner;
        var r = lane % p.inner;
        for (var e = lane; e < p.terms; e += p.lanes) {
            acc += x[q * period + j * p.inner + r];
            q += dq;
            r += dr;
            if (r >= p.inner) {
                r -= p.inner;
                q += 1u;
            }
        }
    }
    part[t] = acc;
    workgroupBarrier();
    for (var s = p.lanes / 2u; s > 0u; s /= 2u) {
        if (lane < s) {
            part[t] += part[t + s * lane_step];
        }
        workgroupBarrier();
    }
    if (lane == 0u && j < p.count) {
        out[j] = part[t];
    }
}
