// Workgroup reductions of one f32 per invocation. With the SUBGROUPS define
// each subgroup reduces in registers first and only one value per subgroup
// goes through workgroup memory; without it, a tree in workgroup memory.
// Every invocation must call these (they contain barriers), and every
// invocation gets the result.

const RED_WG: u32 = {{WG}}u;

var<workgroup> red: array<f32, RED_WG>;

struct Lane {
    @builtin(local_invocation_index) lid: u32,
#ifdef SUBGROUPS
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) sg_id: u32,
#endif
}

#ifdef REDUCE4
// Four sums at once (one per lane of a vec4): one pass of barriers for
// four rows of a mat-vec.
var<workgroup> red4: array<vec4<f32>, RED_WG>;

#ifdef SUBGROUPS
fn wg_sum4(v: vec4<f32>, ln: Lane) -> vec4<f32> {
    let s = subgroupAdd(v);
    workgroupBarrier();
    if (ln.sg_id == 0u) {
        red4[ln.lid / ln.sg_size] = s;
    }
    workgroupBarrier();
    var t = vec4<f32>(0.0);
    for (var i = 0u; i < (RED_WG + ln.sg_size - 1u) / ln.sg_size; i++) {
        t += red4[i];
    }
    return t;
}
#else
fn wg_sum4(v: vec4<f32>, ln: Lane) -> vec4<f32> {
    workgroupBarrier();
    red4[ln.lid] = v;
    for (var s = RED_WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (ln.lid < s) {
            red4[ln.lid] += red4[ln.lid + s];
        }
    }
    workgroupBarrier();
    return red4[0];
}
#endif
#endif

#ifdef SUBGROUPS
fn wg_sum(v: f32, ln: Lane) -> f32 {
    let s = subgroupAdd(v);
    workgroupBarrier();
    if (ln.sg_id == 0u) {
        red[ln.lid / ln.sg_size] = s;
    }
    workgroupBarrier();
    var t = 0.0;
    for (var i = 0u; i < (RED_WG + ln.sg_size - 1u) / ln.sg_size; i++) {
        t += red[i];
    }
    return t;
}

fn wg_max(v: f32, ln: Lane) -> f32 {
    let s = subgroupMax(v);
    workgroupBarrier();
    if (ln.sg_id == 0u) {
        red[ln.lid / ln.sg_size] = s;
    }
    workgroupBarrier();
    var t = NEG_BIG;
    for (var i = 0u; i < (RED_WG + ln.sg_size - 1u) / ln.sg_size; i++) {
        t = max(t, red[i]);
    }
    return t;
}
#else
fn wg_sum(v: f32, ln: Lane) -> f32 {
    workgroupBarrier();
    red[ln.lid] = v;
    for (var s = RED_WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (ln.lid < s) {
            red[ln.lid] += red[ln.lid + s];
        }
    }
    workgroupBarrier();
    return red[0];
}

fn wg_max(v: f32, ln: Lane) -> f32 {
    workgroupBarrier();
    red[ln.lid] = v;
    for (var s = RED_WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (ln.lid < s) {
            red[ln.lid] = max(red[ln.lid], red[ln.lid + s]);
        }
    }
    workgroupBarrier();
    return red[0];
}
#endif
