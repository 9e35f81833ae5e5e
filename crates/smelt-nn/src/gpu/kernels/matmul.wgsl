// C[m, n] = Σ_k A[m, k] · B[k, n] (ops/matmul.rs), k in chunks of
// `chunk`: workgroup z sums the chunk [z·chunk, (z+1)·chunk) of each
// output in order of k from zero (an fma a term, as the CPU's gemm) and writes it to plane z of `c` (the
// product itself when there is one chunk, else partials that SPLIT_SUM
// adds in order of z). A 64×64 tile per workgroup of 256 invocations, 4×4
// outputs each; steps of 16 along k staged in workgroup memory (a chunk is
// a whole number of steps).
// A's element (i, p) is a[i·a_row + p·a_k]; B's (p, j) is b[p·b_k + j·b_col].

#ifdef SPLIT_SUM
struct SplitSumParams {
    len: u32,
    splits: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> p: SplitSumParams;
@group(0) @binding(1) var<storage, read> partial: array<f32>; // (splits, m, n)
@group(0) @binding(2) var<storage, read_write> c: array<f32>; // (m, n)

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat(gid, nwg, 256u);
    if (i >= p.len) {
        return;
    }
    var total = partial[i];
    for (var z = 1u; z < p.splits; z++) {
        total += partial[z * p.len + i];
    }
    c[i] = total;
}
#else
struct MatMulParams {
    m: u32,
    n: u32,
    k: u32,
    a_row: u32,
    a_k: u32,
    b_k: u32,
    b_col: u32,
    chunk: u32,
}

@group(0) @binding(0) var<uniform> p: MatMulParams;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>; // (chunks, m, n)

const TILE: u32 = 64u;
const BK: u32 = 16u;

var<workgroup> ta: array<f32, 1024>; // (BK, TILE): A's tile, k-major
var<workgroup> tb: array<f32, 1024>; // (BK, TILE)

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let row0 = wid.y * TILE;
    let col0 = wid.x * TILE;
    let k_begin = wid.z * p.chunk;
    let k_end = min(p.k, k_begin + p.chunk);
    let t = lid.y * 16u + lid.x;
    var acc: array<array<f32, 4>, 4>;
    for (var k0 = k_begin; k0 < k_end; k0 += BK) {
        // 1024 values of each tile, 4 per invocation.
        for (var e = 0u; e < 4u; e++) {
            let idx = t + e * 256u;
            let kk = idx / TILE;
            let rr = idx % TILE;
            let kg = k0 + kk;
            var va = 0.0;
            if (kg < k_end && row0 + rr < p.m) {
                va = a[(row0 + rr) * p.a_row + kg * p.a_k];
            }
            ta[idx] = va;
            var vb = 0.0;
            if (kg < k_end && col0 + rr < p.n) {
                vb = b[kg * p.b_k + (col0 + rr) * p.b_col];
            }
            tb[idx] = vb;
        }
        workgroupBarrier();
        let kn = min(BK, k_end - k0);
        for (var kk = 0u; kk < kn; kk++) {
            var av: array<f32, 4>;
            var bv: array<f32, 4>;
            for (var r = 0u; r < 4u; r++) {
                av[r] = ta[kk * TILE + lid.y * 4u + r];
                bv[r] = tb[kk * TILE + lid.x * 4u + r];
            }
            for (var r = 0u; r < 4u; r++) {
                for (var q = 0u; q < 4u; q++) {
                    acc[r][q] = fma(av[r], bv[q], acc[r][q]);
                }
            }
        }
        workgroupBarrier();
    }
    let plane = wid.z * p.m * p.n;
    for (var r = 0u; r < 4u; r++) {
        let i = row0 + lid.y * 4u + r;
        for (var q = 0u; q < 4u; q++) {
            let j = col0 + lid.x * 4u + q;
            if (i < p.m && j < p.n) {
                c[plane + i * p.n + j] = acc[r][q];
            }
        }
    }
}
#endif
