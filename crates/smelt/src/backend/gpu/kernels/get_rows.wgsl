// get_rows: out[i] = dequantize(table[ids[i]]), the embedding lookup.
// Includes quant.wgsl; one variant per table type.
//
// Params: 0 n_ids, 1 cols, 2 row_bytes (of the table), 3 n_table_rows,
// 4 first row and 5 1 when the table is one part of a split weight.
// One invocation per 8 values (PLAIN types: per value) of an output row.

@group(0) @binding(1) var<storage, read> wq: array<{{WQ}}>;          // (table_rows, cols) in TYPE
@group(0) @binding(2) var<storage, read_write> ids: array<i32>;   // (n)
@group(0) @binding(3) var<storage, read_write> out: array<f32>;   // (n, cols)

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = gid.x + gid.y * nwg.x * 64u;
    let n = pu(0);
    let cols = pu(1);
    let row_bytes = pu(2);
#ifdef PLAIN
    let per_row = cols;
#else
    let per_row = cols / 8u;
#endif
    if (g >= n * per_row) {
        return;
    }
    let i = g / per_row;
    let c = g % per_row;
    // Ids were range-checked on the host when possible; clamp anyway so a
    // bad id can never read outside the table.
    var row = u32(clamp(ids[i], 0, i32(pu(3)) - 1));
    if (pu(5) != 0u) {
        // One part of a split table (rows pu(4) .. pu(4) + pu(3)): only ids
        // that fall in it.
        let r = ids[i] - i32(pu(4));
        if (r < 0 || r >= i32(pu(3))) {
            return;
        }
        row = u32(r);
    }
#ifdef PLAIN
    out[i * cols + c] = dq1(row * row_bytes, c);
#else
    let v = dq8(row * row_bytes, c);
    let o = i * cols + c * 8u;
    for (var e = 0u; e < 4u; e++) {
        out[o + e] = v.a[e];
        out[o + 4u + e] = v.b[e];
    }
#endif
}
