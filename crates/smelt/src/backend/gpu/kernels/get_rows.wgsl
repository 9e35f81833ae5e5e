// get_rows: out[i] = dequantize(table[ids[i]]), the embedding lookup.
// Includes quant.wgsl; one variant per table type.
//
// One invocation per 8 values (PLAIN types: per value) of an output row.

struct Params {
    n: u32,          // ids (output rows)
    cols: u32,       // values per row
    row_bytes: u32,  // the table's row stride
    table_rows: u32, // rows of the table, or of the part bound
    row0: u32,       // the part's first row in the whole table
    split: u32,      // 1: the table bound is a part of a split weight
}
@group(0) @binding(0) var<uniform> P: Params;

@group(0) @binding(1) var<storage, read> wq: array<{{WQ}}>;          // (table_rows, cols) in TYPE
@group(0) @binding(2) var<storage, read_write> ids: array<i32>;   // (n)
@group(0) @binding(3) var<storage, read_write> out: array<f32>;   // (n, cols)

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = gid.x + gid.y * nwg.x * 64u;
    let n = P.n;
    let cols = P.cols;
    let row_bytes = P.row_bytes;
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
    var row = u32(clamp(ids[i], 0, i32(P.table_rows) - 1));
    if (P.split != 0u) {
        // One part of a split table (rows row0 .. row0 + table_rows): only ids
        // that fall in it.
        let r = ids[i] - i32(P.row0);
        if (r < 0 || r >= i32(P.table_rows)) {
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
