// The keys a query row sees, for the attention kernels (attention.wgsl,
// attention_coop.wgsl), which declare `pos` and `seq` (per row) and take
// the attention params (4 ctx, 5 window, 8 cache rows).

// Row i's position and its slot's first cache row, clamped so reads stay
// in the cache.
fn last_key(i: u32) -> u32 {
    return min(u32(max(pos[i], 0)), pu(4) - 1u);
}

fn slot_row0(i: u32) -> u32 {
    return min(u32(max(seq[i], 0)) * pu(4), pu(8) - pu(4));
}

// The first key a query at position p sees: p + 1 - window with a
// window (param 5), else 0.
fn first_key(p: u32) -> u32 {
    let win = pu(5);
    if (win > 0u && p + 1u > win) {
        return p + 1u - win;
    }
    return 0u;
}
