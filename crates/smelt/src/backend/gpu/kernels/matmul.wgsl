// Tiled matmul for prefill: out[t, r] = dot(w[r], x[t]) for n tokens.
// Each workgroup of 64 invocations computes a 64 (rows of w) × 64 (tokens)
// tile of out, stepping k by 32. Per step, invocation lid decodes 8
// consecutive values of 4 neighbouring weight rows from their GGUF blocks
// (and loads the same of 4 tokens), storing them as vec4s across rows
// (tokens) in workgroup memory. Then each invocation accumulates an 8 × 8
// block in registers: four vec4 loads per 64 multiply-adds.

struct Params {
    m: u32,          // rows of w
    k: u32,          // values per row
    n: u32,          // tokens
    row_bytes: u32,  // w's row stride
    groups_m: u32,   // workgroups along m (rows)
    out_stride: u32, // out's row stride: m, or more for a part of a split weight
    out_col0: u32,   // out's first column
    zero: u32,       // 0 (exact.wgsl's `opaque`)
}
@group(0) @binding(0) var<uniform> P: Params;

@group(0) @binding(1) var<storage, read> wq: array<{{WQ}}>;          // (m, k) in TYPE
@group(0) @binding(2) var<storage, read_write> x: array<f32>;     // (n, k)
@group(0) @binding(3) var<storage, read_write> out: array<f32>;   // (n, m)

const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 32u;

var<workgroup> ws: array<vec4<f32>, 512>; // (TK, TM / 4): rows 4i..4i+4 at column kk
var<workgroup> xs: array<vec4<f32>, 512>; // (TK, TN / 4): tokens 4j..4j+4 at column kk

// Value e (0..8) of a V8.
fn v8_at(v: V8, e: u32) -> f32 {
    if (e < 4u) {
        return v.a[e];
    }
    return v.b[e - 4u];
}

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let m = P.m;
    let k = P.k;
    let n = P.n;
    let row_bytes = P.row_bytes;
    let g = wg_index(wid, nwg);
    let r0 = (g % P.groups_m) * TM;
    let t0 = (g / P.groups_m) * TN;
    if (t0 >= n) {
        return;
    }
    // Loading: rows (tokens) 4q..4q+4 of the tile, columns 8kg..8kg+8.
    let q = lid / 4u;
    let kg = lid % 4u;
    // Computing: rows 8ty..8ty+8, tokens 8tx..8tx+8 of the tile.
    let tx = lid % 8u;
    let ty = lid / 8u;
    var acc: array<vec4<f32>, 16>; // (8 tokens, 2 row quads)
    for (var k0 = 0u; k0 < k; k0 += TK) {
        var rows: array<V8, 4>;
        for (var i = 0u; i < 4u; i++) {
            let r = r0 + 4u * q + i;
            var v = V8(vec4<f32>(0.0), vec4<f32>(0.0));
#ifdef PLAIN
            for (var e = 0u; e < 8u; e++) {
                let c = k0 + 8u * kg + e;
                if (r < m && c < k) {
                    if (e < 4u) {
                        v.a[e] = dq1(r * row_bytes, c);
                    } else {
                        v.b[e - 4u] = dq1(r * row_bytes, c);
                    }
                }
            }
#else
            if (r < m) {
                v = dq8(r * row_bytes, k0 / 8u + kg);
            }
#endif
            rows[i] = v;
        }
        for (var e = 0u; e < 8u; e++) {
            ws[(8u * kg + e) * 16u + q] = vec4<f32>(
                v8_at(rows[0], e),
                v8_at(rows[1], e),
                v8_at(rows[2], e),
                v8_at(rows[3], e),
            );
        }
        for (var e = 0u; e < 8u; e++) {
            let c = k0 + 8u * kg + e;
            var v = vec4<f32>(0.0);
            for (var i = 0u; i < 4u; i++) {
                let t = t0 + 4u * q + i;
                if (t < n && c < k) {
                    v[i] = x[t * k + c];
                }
            }
            xs[(8u * kg + e) * 16u + q] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk++) {
            let a0 = ws[kk * 16u + 2u * ty];
            let a1 = ws[kk * 16u + 2u * ty + 1u];
            let b0 = xs[kk * 16u + 2u * tx];
            let b1 = xs[kk * 16u + 2u * tx + 1u];
            acc[0] += a0 * b0.x;
            acc[1] += a1 * b0.x;
            acc[2] += a0 * b0.y;
            acc[3] += a1 * b0.y;
            acc[4] += a0 * b0.z;
            acc[5] += a1 * b0.z;
            acc[6] += a0 * b0.w;
            acc[7] += a1 * b0.w;
            acc[8] += a0 * b1.x;
            acc[9] += a1 * b1.x;
            acc[10] += a0 * b1.y;
            acc[11] += a1 * b1.y;
            acc[12] += a0 * b1.z;
            acc[13] += a1 * b1.z;
            acc[14] += a0 * b1.w;
            acc[15] += a1 * b1.w;
        }
        workgroupBarrier();
    }
    for (var j = 0u; j < 8u; j++) {
        let t = t0 + 8u * tx + j;
        for (var h = 0u; h < 2u; h++) {
            for (var i = 0u; i < 4u; i++) {
                let r = r0 + 8u * ty + 4u * h + i;
                if (t < n && r < m) {
                    out[t * P.out_stride + P.out_col0 + r] = acc[2u * j + h][i];
                }
            }
        }
    }
}
