// The keys a query row sees, for the attention kernels (attention.wgsl,
// attention_coop.wgsl), which declare `pos` and `seq` (per row), and the
// parameters of both; the merge of a split decode (MERGE) takes the
// parameters alone. With Q8, the decode's and the merge's rounding of an
// output head.

struct Params {
    n: u32,           // query rows
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    ctx: u32,         // positions per sequence slot
    window: u32,      // sliding window (0: none)
    scale: f32,       // over softcap when there is one
    softcap: f32,     // 0: none
    cache_rows: u32,  // rows of the caches
    n_dims: u32,      // ROPE: rope.wgsl's
    theta_scale: f32,
    freq_scale: f32,
    factored: u32,
    rope_writes: u32, // ROPE: 1 rounds the output to Q8, + 2 writes K rotated to ko, + 4 Q rotated to qo
    zero: u32,       // 0 (exact.wgsl's `opaque`)
    rot: u32,        // KV_BLOCKS: values per rotation group of a cache row
    row0: u32,       // prefill: the first query row taken (rows before it are decode rows)
}
@group(0) @binding(0) var<uniform> P: Params;

#ifdef Q8
// Rounds the attention head of hd values in the kernel's workgroup array
// qs (whole blocks of 32) to words wi0, wi0 + 1, ... of xq (exact.wgsl's
// q8_store), four consecutive values an invocation, stored where `store`.
// Every invocation calls it; the barrier first publishes the head.
fn q8_store_head(lid: u32, hd: u32, store: bool, wi0: u32) {
    workgroupBarrier();
    let live = 4u * lid < hd;
    var v = vec4<f32>(0.0);
    if (live) {
        let e = 4u * lid;
        v = vec4<f32>(qs[e], qs[e + 1u], qs[e + 2u], qs[e + 3u]);
    }
    q8_store(v, lid, live && store, wi0 + lid);
}
#endif

#ifndef MERGE
// Row i's position and its slot's first cache row, clamped so reads stay
// in the cache.
fn last_key(i: u32) -> u32 {
    return min(u32(max(pos[i], 0)), P.ctx - 1u);
}

fn slot_row0(i: u32) -> u32 {
    return min(u32(max(seq[i], 0)) * P.ctx, P.cache_rows - P.ctx);
}

// The first key a query at position p sees: p + 1 - window with a
// window, else 0.
fn first_key(p: u32) -> u32 {
    let win = P.window;
    if (win > 0u && p + 1u > win) {
        return p + 1u - win;
    }
    return 0u;
}
#endif
