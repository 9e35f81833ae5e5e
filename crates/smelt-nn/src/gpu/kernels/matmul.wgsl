// C[m, n] = Σ_k A[m, k] · B[k, n], each output summed in order of k from
// zero (ops/matmul.rs). A 64×64 tile per workgroup of 256 invocations,
// 4×4 outputs each; steps of 16 along k staged in workgroup memory.
// A's element (i, p) is a[i·a_row + p·a_k]; B's (p, j) is b[p·b_k + j·b_col].

struct MatMulParams {
    m: u32,
    n: u32,
    k: u32,
    a_row: u32,
    a_k: u32,
    b_k: u32,
    b_col: u32,
    pad: u32,
}

@group(0) @binding(0) var<uniform> p: MatMulParams;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>; // (m, n)

const TILE: u32 = 64u;
const BK: u32 = 16u;

var<workgroup> ta: array<f32, 1024>; // (BK, TILE): A's tile, k-major
var<workgroup> tb: array<f32, 1024>; // (BK, TILE)

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let row0 = wid.y * TILE;
    let col0 = wid.x * TILE;
    let t = lid.y * 16u + lid.x;
    var acc: array<array<f32, 4>, 4>;
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        // 1024 values of each tile, 4 per invocation.
        for (var e = 0u; e < 4u; e++) {
            let idx = t + e * 256u;
            let kk = idx / TILE;
            let rr = idx % TILE;
            let kg = k0 + kk;
            var va = 0.0;
            if (kg < p.k && row0 + rr < p.m) {
                va = a[(row0 + rr) * p.a_row + kg * p.a_k];
            }
            ta[idx] = va;
            var vb = 0.0;
            if (kg < p.k && col0 + rr < p.n) {
                vb = b[kg * p.b_k + (col0 + rr) * p.b_col];
            }
            tb[idx] = vb;
        }
        workgroupBarrier();
        let kn = min(BK, p.k - k0);
        for (var kk = 0u; kk < kn; kk++) {
            var av: array<f32, 4>;
            var bv: array<f32, 4>;
            for (var r = 0u; r < 4u; r++) {
                av[r] = ta[kk * TILE + lid.y * 4u + r];
                bv[r] = tb[kk * TILE + lid.x * 4u + r];
            }
            for (var r = 0u; r < 4u; r++) {
                for (var q = 0u; q < 4u; q++) {
                    acc[r][q] += av[r] * bv[q];
                }
            }
        }
        workgroupBarrier();
    }
    for (var r = 0u; r < 4u; r++) {
        let i = row0 + lid.y * 4u + r;
        for (var q = 0u; q < 4u; q++) {
            let j = col0 + lid.x * 4u + q;
            if (i < p.m && j < p.n) {
                c[i * p.n + j] = acc[r][q];
            }
        }
    }
}
