// The keys a query row sees, for the attention kernels (attention.wgsl,
// attention_coop.wgsl), which declare `pos` and `seq` (per row), and the
// parameters of both.

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
}
@group(0) @binding(0) var<uniform> P: Params;

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
