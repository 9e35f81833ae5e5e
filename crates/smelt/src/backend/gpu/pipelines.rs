//! The kernel table: every compute kernel, its WGSL source built from the
//! embedded `.wgsl` files with defines, its bindings, and the cache of
//! compiled pipelines keyed by [`Kernel`].
//!
//! WGSL has no preprocessor, so variants come from a small one here:
//! `#ifdef NAME`, `#ifndef NAME`, `#else`, `#endif` lines, and `{{NAME}}`
//! replaced by a define's value. One `.wgsl` file per op family; the type of
//! a weight, the f16 path and the subgroup path are defines, not copies.

use std::collections::HashMap;

use crate::backend::RopeMode;
use crate::quant::GgmlType;

/// The embedded sources, one file per op family.
mod src {
    pub const COMMON: &str = include_str!("kernels/common.wgsl");
    pub const REDUCE: &str = include_str!("kernels/reduce.wgsl");
    pub const QUANT: &str = include_str!("kernels/quant.wgsl");
    pub const GET_ROWS: &str = include_str!("kernels/get_rows.wgsl");
    pub const MATVEC: &str = include_str!("kernels/matvec.wgsl");
    pub const MATVEC_BLOCKS: &str = include_str!("kernels/matvec_blocks.wgsl");
    pub const MATMUL: &str = include_str!("kernels/matmul.wgsl");
    pub const NORM: &str = include_str!("kernels/norm.wgsl");
    pub const NORM_HALF: &str = include_str!("kernels/norm_half.wgsl");
    pub const ROPE: &str = include_str!("kernels/rope.wgsl");
    pub const ROTATE: &str = include_str!("kernels/rotate.wgsl");
    pub const ATTENTION_KEYS: &str = include_str!("kernels/attention_keys.wgsl");
    pub const ATTENTION: &str = include_str!("kernels/attention.wgsl");
    pub const ELEMENTWISE: &str = include_str!("kernels/elementwise.wgsl");
    pub const SOFTMAX: &str = include_str!("kernels/softmax.wgsl");
    pub const COPY: &str = include_str!("kernels/copy.wgsl");
    pub const QUANTIZE: &str = include_str!("kernels/quantize.wgsl");
    pub const EXACT: &str = include_str!("kernels/exact.wgsl");
    pub const MATMUL_Q8: &str = include_str!("kernels/matmul_q8.wgsl");
    pub const MATMUL_COOP: &str = include_str!("kernels/matmul_coop.wgsl");
    pub const ATTENTION_COOP: &str = include_str!("kernels/attention_coop.wgsl");
    pub const SPLIT_SUMS: &str = include_str!("kernels/split_sums.wgsl");
}

/// Weight types the matmul and get_rows kernels decode.
pub const WEIGHT_TYPES: [GgmlType; 10] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Elementwise ops of `elementwise.wgsl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elementwise {
    Add,
    Mul,
    Scale,
    SiluMul,
    GeluMul,
}

/// Weight types with ggml's integer-lane kernels on Q8-rounded activations
/// (`matmul_q8.wgsl`).
pub const Q8_WEIGHT_TYPES: [GgmlType; 5] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
];

/// How a matmul's activations are rounded first, as ggml's `vec_dot_type`
/// of the weight type does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActQuant {
    /// Q8_0 / Q8_1 blocks of 32 (legacy quants), kept as packed quants
    /// with their scales and sums.
    Q8,
    /// Q8_K blocks of 256 (K-quants).
    Q8K,
    /// F16 (F16 weights).
    F16,
}

impl ActQuant {
    /// ggml's activation type for a weight type; `None` for F32.
    pub fn for_weight(t: GgmlType) -> Option<Self> {
        use GgmlType::*;
        match t {
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 => Some(Self::Q8),
            Q4_K | Q5_K | Q6_K => Some(Self::Q8K),
            F16 => Some(Self::F16),
            _ => None,
        }
    }

    /// Values per block.
    pub fn block(self) -> usize {
        match self {
            Self::Q8 => 32,
            Self::Q8K => 256,
            Self::F16 => 1,
        }
    }
}

/// One compute kernel variant (without the adapter features).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    GetRows(GgmlType),
    /// One workgroup per (token, output row): decode, f32 activations.
    MatVec(GgmlType),
    /// Decode of repacked Q4_0 / Q8_0 (f32 mode) on Q8-rounded activations
    /// with packed integer dot products, and with `residual` the residual
    /// add after it.
    MatVecDot {
        t: GgmlType,
        residual: bool,
    },
    /// The same for up to 3 weights of one input in one dispatch
    /// (`Backend::matmuls`); with `norm`, the rms_norm before them taken
    /// in (16 rows a workgroup).
    MatVecMulti {
        t: GgmlType,
        norm: bool,
    },
    /// Gate and up (two weights of one input, rows a multiple of 32) with
    /// the GLU after them (`op`: SiluMul or GeluMul) and its Q8 rounding:
    /// a workgroup per 32 rows of both; with `norm`, the rms_norm before
    /// them taken in.
    MatVecGlu {
        t: GgmlType,
        op: Elementwise,
        norm: bool,
    },
    /// 64 × 64 output tiles: prefill, f32 activations.
    MatMul(GgmlType),
    /// Prefill on cooperative matrices (f16 operands, f32 sums), where the
    /// adapter has them (`ShaderFeatures::coop`), in tiles of one of four
    /// shapes, of one weight or several (`Multi`).
    MatMulCoop {
        t: GgmlType,
        tile: CoopTile,
        multi: Multi,
    },
    /// A legacy quant on Q8-rounded activations in ggml's arithmetic, a
    /// quad of invocations per row carrying up to 4 tokens (decode) ...
    MatVecQ8(GgmlType),
    /// ... or 8 tokens per group of workgroups (prefill).
    MatMulQ8(GgmlType),
    RmsNorm {
        weight: bool,
    },
    /// rms_norm with a weight, fused with the next matmul's Q8 rounding.
    RmsNormQ8,
    /// A residual add and the rms_norm (with a weight) of its sum.
    AddRmsNorm,
    /// AddRmsNorm that also writes its output as `HalfBlocks` does, for the
    /// next matmul on cooperative matrices (fast math: its own order of
    /// sums); with `sums`, the addend a split matmul's first half, its
    /// second half's sums added in (`Pending::SplitSums`).
    AddRmsNormHalf {
        sums: bool,
    },
    /// SiluMul or GeluMul fused with the next matmul's Q8 rounding.
    GluQ8(Elementwise),
    /// SiluMul or GeluMul that also writes its output as `HalfBlocks`
    /// does, for the next matmul on cooperative matrices.
    GluHalf(Elementwise),
    Rope(RopeMode),
    /// Two ropes at the same positions (Q and K) in one dispatch.
    RopePair(RopeMode),
    /// Q's and K's ropes (normal mode) with K's and V's cache writes (the
    /// cache type, F32 or F16) in one dispatch.
    RopeStore(GgmlType),
    /// The cache type, F32 or F16: one workgroup per (row, head), keys
    /// spread over the workgroup (decode).
    Attention(GgmlType),
    /// Decode attention that also rounds its output to Q8 blocks for the
    /// matmul after it (`Pending::Attention`).
    AttentionQ8(GgmlType),
    /// Decode attention of one row (f32 mode) that first ropes its Q and K
    /// heads and writes K's and V's cache rows (`RopeStore` joined), then
    /// takes the new key from workgroup memory; its last parameter says
    /// whether it rounds its output to Q8 too.
    AttentionRope(GgmlType),
    /// One invocation per (head, row), for a head size (prefill).
    AttentionRows {
        kv: GgmlType,
        head_dim: u32,
    },
    /// Four invocations per (head, row), each a quarter of the head, for a
    /// head size that is a multiple of 16 (prefill, f32 mode, subgroups).
    AttentionQuads {
        kv: GgmlType,
        head_dim: u32,
    },
    /// A workgroup per (`heads` query heads of one KV head, block of FS
    /// rows) on cooperative matrices, a subgroup per head, an F16 cache,
    /// heads of `COOP_ATTENTION_HEAD_DIMS` (prefill, f32 mode).
    AttentionCoop {
        head_dim: u32,
        heads: u32,
        /// Its output also as the next coop matmul's f16 blocks.
        half: bool,
    },
    Elementwise(Elementwise),
    Softmax,
    Argmax,
    Copy {
        src: GgmlType,
        dst: GgmlType,
    },
    /// F32 (rows, cols) to packed f16 in blocks of 32 along a row, each
    /// block of all rows together: (cols / 32, rows, 32), the activations
    /// of `matmul_coop.wgsl`.
    HalfBlocks,
    /// A split matmul's second half added to its first (`CoopTile::HugeSplit`).
    SplitSums,
    /// The destination (cache) type, F32 or F16.
    SetRows(GgmlType),
    /// Two KV-cache writes with the same ids (K and V) in one dispatch.
    SetRowsPair(GgmlType),
    /// Rounds activations as ggml's matmul does (`quantize.wgsl`).
    QuantizeActs(ActQuant),
}

/// The weights of a `MatMulCoop` dispatch: one, or up to 3 repacked
/// weights of one input (`Backend::matmuls`) bound each on its own, or
/// bound once as the joint buffer that holds them all (`Buffers::load_joined`).
/// `Glu`: gate and up joined, each tile's rows gate and up rows of the
/// same features in turns of a fragment, written with `out = op(gate) ·
/// up` and that as the next coop matmul's f16 blocks (`Pending::CoopGateUp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Multi {
    One,
    Apart,
    Joint,
    Glu(Elementwise),
}

/// Adapter capabilities a kernel may be built for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ShaderFeatures {
    /// Subgroup reductions (`subgroupAdd`, `subgroupMax`).
    pub subgroups: bool,
    /// Native `f16` (WGSL `enable f16;`) for unpacking f16 words.
    pub shader_f16: bool,
    /// `fma` rounds once (probed on the device: lavapipe's does not);
    /// otherwise exact.wgsl emulates it.
    pub fused_fma: bool,
    /// Plain hardware arithmetic (exact.wgsl's FAST): with f32 activations
    /// nothing follows ggml's CPU rounding.
    pub fast_math: bool,
    /// Cooperative matrices of this size (16 or 8) with f16 operands and
    /// f32 sums, and subgroups of 32; 0 without.
    pub coop: u32,
}

impl ShaderFeatures {
    /// Whether weights of type `t` are uploaded repacked into superblocks
    /// (`buffers::repack`; quant.wgsl's REPACKED): Q4_0 and Q8_0 in the
    /// f32-activation mode, whose kernels then load aligned 16-byte words.
    /// ggml's mode reads the GGUF layout.
    pub fn repacks(self, t: GgmlType) -> bool {
        self.fast_math && matches!(t, GgmlType::Q4_0 | GgmlType::Q8_0)
    }

    /// The prefill tile of `matmul_coop.wgsl` (rows × tokens) for these
    /// features.
    pub fn coop_tile(self, tile: CoopTile) -> (usize, usize) {
        CoopShape::of(self.coop, tile).tile(self.coop)
    }
}

/// The tile shapes of `matmul_coop.wgsl`, one pipeline each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoopTile {
    /// 64 rows × 128 tokens: a batch of many tokens.
    Wide,
    /// 32 rows × 128 tokens on 4 subgroups: a matmul of few wide tiles,
    /// which would leave streaming multiprocessors idle (the K and V
    /// projections).
    Slim,
    /// 128 rows × 32 tokens: a short batch, which 128 tokens would pad.
    Short,
    /// 128 rows × 256 tokens on 16 subgroups: a matmul of many rows and
    /// tokens (the FFN's gate and up), where the adapter's workgroup
    /// memory holds it (`coop_tile_fits`).
    Huge,
    /// Huge tiles with k in two halves, a workgroup per tile and half: a
    /// matmul of wide tiles with a long k but too few huge tiles to fill
    /// the GPU (8b's Q, O and down), the second half's sums added after
    /// (`CoopTile::split`).
    HugeSplit,
}

/// Prefill of this many tokens or more takes the tiles of 128 tokens.
const COOP_WIDE_MIN_TOKENS: usize = 96;
/// A matmul of this many rows and tokens or more takes huge tiles: on the
/// H200 (pp512) the gate and up projections of 14336 and 8192 rows ran
/// faster on them, those of 4096 rows were too few tiles.
const COOP_HUGE_MIN_ROWS: usize = 8192;
const COOP_HUGE_MIN_TOKENS: usize = 256;
/// A matmul of fewer wide tiles than this takes slim ones: about one
/// workgroup per multiprocessor of the large GPUs measured (132 on the
/// H100 and H200).
const COOP_FEW_TILES: usize = 132;
/// A k this long or longer may be split in two (`CoopTile::split`), if
/// each half is a multiple of 32.
const COOP_SPLIT_MIN_K: usize = 2048;

impl CoopTile {
    pub const ALL: [CoopTile; 5] = [
        CoopTile::Wide,
        CoopTile::Slim,
        CoopTile::Short,
        CoopTile::Huge,
        CoopTile::HugeSplit,
    ];

    /// The tile for an (m rows) × (n tokens) output, with fragments of fs;
    /// `huge`: whether the adapter holds the huge tiles.
    pub fn pick(fs: u32, m: usize, n: usize, huge: bool) -> CoopTile {
        if n < COOP_WIDE_MIN_TOKENS {
            return CoopTile::Short;
        }
        if huge && m >= COOP_HUGE_MIN_ROWS && n >= COOP_HUGE_MIN_TOKENS {
            return CoopTile::Huge;
        }
        if CoopTile::Wide.count(fs, m, n) < COOP_FEW_TILES {
            CoopTile::Slim
        } else {
            CoopTile::Wide
        }
    }

    /// The tile of `pick` for a matmul along k, with its output as one
    /// run (no column offset or stride): wide tiles become split huge
    /// ones where the adapter holds them, k is long, the huge tiles would
    /// be fewer than the multiprocessors and pad no more tokens than the
    /// wide ones. On the H200 (8b pp512: Q, O and down, 64 huge tiles
    /// each) they took 36.1 µs a token on wide tiles, 27.7 split plus 2.1
    /// for the adds.
    pub fn split(self, fs: u32, m: usize, n: usize, k: usize, huge: bool) -> CoopTile {
        let tokens = |tile: CoopTile| {
            let (_, tn) = CoopShape::of(fs, tile).tile(fs);
            n.div_ceil(tn) * tn
        };
        let few = CoopTile::Huge.count(fs, m, n) < COOP_FEW_TILES;
        let padded = tokens(CoopTile::Huge) > tokens(CoopTile::Wide);
        let long = k >= COOP_SPLIT_MIN_K && k.is_multiple_of(64);
        if self == CoopTile::Wide && huge && few && !padded && long {
            CoopTile::HugeSplit
        } else {
            self
        }
    }

    /// How many parts k is split into.
    pub fn parts(self) -> usize {
        if self == CoopTile::HugeSplit { 2 } else { 1 }
    }

    /// How matmuls of one input (`Backend::matmuls`, weights of `rows`)
    /// run as one multi dispatch: the weights from `first` on together on
    /// `tile`, those before it alone; None: each alone. Not on huge tiles
    /// (gate and up, each on huge tiles already, were slower as one
    /// dispatch: 8b pp512 44.2 → 55.0 µs a token on the H200). Q, K and V
    /// together where that fills the GPU better than K and V alone (1b: 10.3
    /// → 8.7 µs a token), but K and V without Q where all three would be
    /// more than two wide tiles a multiprocessor (8b: 384 tiles took as
    /// long, 17.2 µs, as Q on its own 256 and K and V on slim tiles).
    pub fn group(fs: u32, rows: &[usize], n: usize, huge: bool) -> Option<(usize, CoopTile)> {
        let pick = |rows: &[usize]| CoopTile::pick(fs, rows.iter().sum(), n, huge);
        let wide: usize = rows.iter().map(|&m| CoopTile::Wide.count(fs, m, n)).sum();
        let (first, tile) = match pick(rows) {
            CoopTile::Wide if rows.len() == 3 && wide > 2 * COOP_FEW_TILES => (1, pick(&rows[1..])),
            tile => (0, tile),
        };
        (tile != CoopTile::Huge).then_some((first, tile))
    }

    /// How many of these tiles an (m rows) × (n tokens) output takes.
    fn count(self, fs: u32, m: usize, n: usize) -> usize {
        let (tm, tn) = CoopShape::of(fs, self).tile(fs);
        m.div_ceil(tm) * n.div_ceil(tn)
    }
}

/// The shape of `matmul_coop.wgsl`'s workgroup: SR × ST subgroups of FM ×
/// FN fragments each. On the H200 (pp512, 16×16 fragments), more tokens
/// than rows per tile ran fastest, as each staged weight (decoded from its
/// blocks) then serves more tokens: 2 × 4 subgroups of 2 × 2 (64 rows ×
/// 128 tokens) ran 1b Q4_0, 1b Q8_0, 8b Q4_0 at 29687, 31607, 6509 t/s;
/// 4 × 4 of 2 × 2 (128 × 128) at 27418, -, 6184; 4 × 2 of 2 × 2 (128 × 64)
/// at 25221, -, 5224; 2 × 4 of 2 × 4 (64 × 256) at 25714, 27847, 5845.
/// The K and V projections of the 8b model (1024 rows: 64 wide tiles) ran
/// at 40 TFLOP/s against 107 for the others; slim tiles (1 × 4 subgroups
/// of 2 × 2) for matmuls of few wide tiles ran 8b at 6967 / 6864 t/s
/// against 6849 / 6832, 1b Q4_0 at 32071 against 30352 (64 × 64 tiles:
/// 6823 and 31159).
///
/// Later (f32 activations still, pp512 8b, 1b Q4_0, 1b Q8_0), with the
/// other matmuls kept on their tiles (a larger wide tile had sent Q, O and
/// down to the slim one, which the figures above mix in): wide tiles of
/// 2 × 4 of 2 × 2 at 7249, 35732; 4 × 4 of 2 × 2 6814; 2 × 2 of 4 × 4
/// 6756; 2 × 4 of 2 × 4 6561; 4 × 2 of 4 × 2 4957. Only the gate and up
/// projections gained from a larger tile, 4 × 4 of 2 × 4 (128 × 256): 8b
/// 7330 → 7782, 1b Q8_0 36459 → 40131; with f16 activations as words
/// (`half_input`) 8033, 40918, 42948.
#[derive(Clone, Copy, Debug)]
struct CoopShape {
    sr: usize,
    st: usize,
    fm: usize,
    fn_: usize,
}

impl CoopShape {
    fn of(fs: u32, tile: CoopTile) -> CoopShape {
        let (sr, st, fm, fn_) = match (fs, tile) {
            // Metal's 8 × 8 simdgroup matrices (not measured): 64 × 64.
            (8, _) => (2, 2, 4, 4),
            (_, CoopTile::Wide) => (2, 4, 2, 2),
            (_, CoopTile::Slim) => (1, 4, 2, 2),
            (_, CoopTile::Short) => (4, 1, 2, 2),
            (_, CoopTile::Huge | CoopTile::HugeSplit) => (4, 4, 2, 4),
        };
        CoopShape { sr, st, fm, fn_ }
    }

    /// Rows × tokens of the output tile.
    fn tile(self, fs: u32) -> (usize, usize) {
        let fs = fs as usize;
        (self.sr * self.fm * fs, self.st * self.fn_ * fs)
    }

    /// Workgroup memory in bytes (the staged tiles at 40 halves a row, and
    /// one f32 accumulator per subgroup) and invocations.
    fn requirements(self, fs: u32) -> (u32, u32) {
        let fs = fs as usize;
        let rows = self.sr * self.fm * fs + self.st * self.fn_ * fs;
        let subgroups = self.sr * self.st;
        (
            (rows * 40 * 2 + subgroups * fs * fs * 4) as u32,
            (subgroups * 32) as u32,
        )
    }

    /// The accumulators as FM × FN variables (`acc{f}`, f = j · FM + i for
    /// fragment row i and token j): their declarations, one step of
    /// multiplies, and their stores; with `glu`, fragment rows 2i (gate)
    /// and 2i + 1 (up) stored as a pair (`glu_gate`, `glu_emit`).
    fn accumulator_code(self, fs: u32, glu: bool) -> [(&'static str, String); 3] {
        let n = self.fm * self.fn_;
        let mut decl = String::new();
        let mut step = String::new();
        let mut out = String::new();
        for f in 0..n {
            decl += &format!("    var acc{f}: coop_mat{fs}x{fs}<f32, C>;\n");
            if !glu {
                out += &format!(
                    "    coopStoreT(acc{f}, &cs[c0], FS);\n    emit({f}u, c0, t0 + st, r0 + sr, sl, sgs, m);\n"
                );
            } else if f % 2 == 0 {
                let up = f + 1;
                out += &format!(
                    "    coopStoreT(acc{f}, &cs[c0], FS);\n    glu_gate(c0, sl);\n    \
                     coopStoreT(acc{up}, &cs[c0], FS);\n    glu_emit({f}u, c0, t0 + st, r0 + sr / 2u, sl, m);\n"
                );
            }
        }
        for i in 0..self.fm {
            step += &format!("            let b{i} = frag_b(sr, {i}u, kk);\n");
        }
        for j in 0..self.fn_ {
            step += &format!("            let a{j} = frag_a(st, {j}u, kk);\n");
            for i in 0..self.fm {
                let f = j * self.fm + i;
                step += &format!("            acc{f} = coopMultiplyAdd(a{j}, b{i}, acc{f});\n");
            }
        }
        [("ACC_DECL", decl), ("ACC_STEP", step), ("ACC_OUT", out)]
    }
}

/// Head sizes `attention_coop.wgsl` is built for: its outputs and queries
/// are HD / FS fragments each, held in registers.
pub const COOP_ATTENTION_HEAD_DIMS: [u32; 2] = [64, 128];

/// The query heads of one KV head that an `attention_coop.wgsl`
/// workgroup takes (sharing its staged keys and values): 2 where they
/// divide the heads of a group. On the H200 (pp512, groups of 4 heads) 8b
/// attention took 9.4 µs a token with 2, 10.0 with 4 (half the workgroups,
/// and 8b pp512 varied by up to ±36% between runs) and 18.1 with 1; 1b
/// 2.5, 2.6 and 3.4.
pub fn coop_attention_heads(n_heads: usize, n_kv_heads: usize) -> u32 {
    let group = n_heads / n_kv_heads.max(1);
    if group.is_multiple_of(2) { 2 } else { 1 }
}

/// `attention_coop.wgsl`'s fragments as variables, HD / FS of each: the
/// queries (`qa{d}`, loaded once), one block's scores (`s`, summed over
/// them), the outputs (`o{d}`), one block's P·V into them, and their
/// stores.
fn attention_coop_code(fs: u32, hd: u32) -> [(&'static str, String); 6] {
    let mut q = String::new();
    let mut s = String::new();
    let mut decl = String::new();
    let mut step = String::new();
    let mut out = String::new();
    let mut rescale = String::new();
    for d in 0..hd / fs {
        q += &format!("    let qa{d} = query_frag(sg, {d}u);\n");
        let acc = if d == 0 { "zero" } else { "s" };
        let v = if d == 0 { "var s =" } else { "s =" };
        s += &format!("        {v} coopMultiplyAdd(key_frag(kb, {d}u), qa{d}, {acc});\n");
        decl += &format!("    var o{d}: coop_mat{fs}x{fs}<f32, C>;\n");
        step += &format!("        o{d} = coopMultiplyAdd(pa, value_frag(kb, {d}u), o{d});\n");
        rescale += &format!(
            "            coopStoreT(o{d}, &ss[sb], FS);\n            rescale(sb, k0, r, corr);\n            o{d} = coopLoadT<coop_mat{fs}x{fs}<f32, C>>(&ss[sb], FS);\n"
        );
        out += &format!(
            "    coopStoreT(o{d}, &ss[sb], FS);\n    emit({d}u, sb, ob, k0, r, inv, live && i0 + r < n);\n"
        );
    }
    [
        ("Q_DECL", q),
        ("S_STEP", s),
        ("O_DECL", decl),
        ("O_STEP", step),
        ("O_RESCALE", rescale),
        ("O_OUT", out),
    ]
}

/// Whether an adapter's limits hold `matmul_coop.wgsl` with fragments of
/// `fs` in the shapes it needs (all but the huge one).
pub fn coop_fits(fs: u32, limits: &wgpu::Limits) -> bool {
    CoopTile::ALL
        .into_iter()
        .filter(|&tile| !matches!(tile, CoopTile::Huge | CoopTile::HugeSplit))
        .all(|tile| coop_tile_fits(fs, tile, limits))
}

/// Whether an adapter's limits hold `matmul_coop.wgsl`'s `tile`.
pub fn coop_tile_fits(fs: u32, tile: CoopTile, limits: &wgpu::Limits) -> bool {
    let (bytes, invocations) = CoopShape::of(fs, tile).requirements(fs);
    bytes <= limits.max_compute_workgroup_storage_size
        && invocations <= limits.max_compute_invocations_per_workgroup
}

/// How a kernel's storage binding is declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    ReadWrite,
}

/// Workgroup size of the kernels that reduce across a workgroup.
const WG_MATVEC: u32 = 64;
/// `matvec_blocks.wgsl`: on the H100, 128 with four blocks a step ran
/// decode 0-7% faster than 64 with two (1b Q4_0, 1b Q8_0, 8b Q4_0: 515,
/// 516, 207 t/s against 516, 488, 194); 32 and 256 were slower.
const WG_MATVEC_DOT: u32 = 128;
pub const WG_ROW: u32 = 256;
/// The fused gate/up/GLU mat-vec: 16 invocations per 4 rows. On the H200
/// the 8b model's gate and up took 1018 µs/token against 1662 with 128 (8
/// a quad: too few loads in flight), and 1178 as a MatVecMulti and GluQ8.
/// With the norm taken in, it must be the norm's (`WG_ROW`).
const WG_MATVEC_GLU: u32 = 256;
const _: () = assert!(WG_MATVEC_GLU == WG_ROW);
/// Decode attention: on the H200, 128 ran tg128 0-5% faster than 64 (1b
/// Q4_0, 1b Q8_0, 8b Q4_0: 562, 542, 240 t/s against 527-546, 531-547,
/// 228-229), 256 no better overall (its attention −22%).
const WG_ATTENTION: u32 = 128;
/// Heads a rope invocation turns (rope.wgsl's HEADS): the angle taken
/// once for them, their loads in flight together. On the H200, 8b pp512's
/// ropes and cache writes took 1.00 µs a token, against 1.37 with one head
/// an invocation (the angle taken for each).
pub const ROPE_HEADS: usize = 8;

impl Kernel {
    /// Every kernel the backend can build, for the naga/Metal test.
    pub fn all() -> Vec<Kernel> {
        use GgmlType::{F16, F32};
        let mut v = Vec::new();
        for t in WEIGHT_TYPES {
            v.extend([Kernel::GetRows(t), Kernel::MatVec(t), Kernel::MatMul(t)]);
            for tile in CoopTile::ALL {
                v.push(Kernel::MatMulCoop {
                    t,
                    tile,
                    multi: Multi::One,
                });
                if tile != CoopTile::HugeSplit {
                    for multi in [Multi::Apart, Multi::Joint] {
                        v.push(Kernel::MatMulCoop { t, tile, multi });
                    }
                }
                if tile == CoopTile::Huge && matches!(t, GgmlType::Q4_0 | GgmlType::Q8_0) {
                    for op in [Elementwise::SiluMul, Elementwise::GeluMul] {
                        let multi = Multi::Glu(op);
                        v.push(Kernel::MatMulCoop { t, tile, multi });
                    }
                }
            }
        }
        for t in Q8_WEIGHT_TYPES {
            v.extend([Kernel::MatVecQ8(t), Kernel::MatMulQ8(t)]);
        }
        for t in [GgmlType::Q4_0, GgmlType::Q8_0] {
            for norm in [false, true] {
                v.push(Kernel::MatVecMulti { t, norm });
                for op in [Elementwise::SiluMul, Elementwise::GeluMul] {
                    v.push(Kernel::MatVecGlu { t, op, norm });
                }
            }
            v.extend([
                Kernel::MatVecDot { t, residual: false },
                Kernel::MatVecDot { t, residual: true },
            ]);
        }
        v.extend([
            Kernel::RmsNorm { weight: false },
            Kernel::RmsNorm { weight: true },
            Kernel::RmsNormQ8,
            Kernel::AddRmsNorm,
            Kernel::AddRmsNormHalf { sums: false },
            Kernel::AddRmsNormHalf { sums: true },
            Kernel::Rope(RopeMode::Normal),
            Kernel::Rope(RopeMode::Neox),
            Kernel::RopePair(RopeMode::Normal),
            Kernel::RopePair(RopeMode::Neox),
            Kernel::RopeStore(F32),
            Kernel::RopeStore(F16),
            Kernel::Attention(F32),
            Kernel::Attention(F16),
            Kernel::AttentionQ8(F32),
            Kernel::AttentionQ8(F16),
            Kernel::AttentionRope(F32),
            Kernel::AttentionRope(F16),
            Kernel::Softmax,
            Kernel::Argmax,
            Kernel::SetRows(F32),
            Kernel::SetRows(F16),
            Kernel::SetRowsPair(F32),
            Kernel::SetRowsPair(F16),
        ]);
        for op in [
            Elementwise::Add,
            Elementwise::Mul,
            Elementwise::Scale,
            Elementwise::SiluMul,
            Elementwise::GeluMul,
        ] {
            v.push(Kernel::Elementwise(op));
        }
        for op in [Elementwise::SiluMul, Elementwise::GeluMul] {
            v.push(Kernel::GluQ8(op));
            v.push(Kernel::GluHalf(op));
        }
        for src in [F32, F16] {
            for dst in [F32, F16] {
                v.push(Kernel::Copy { src, dst });
            }
        }
        v.push(Kernel::HalfBlocks);
        v.push(Kernel::SplitSums);
        for q in [ActQuant::Q8, ActQuant::Q8K, ActQuant::F16] {
            v.push(Kernel::QuantizeActs(q));
        }
        for kv in [F32, F16] {
            for head_dim in [64, 128, 256] {
                v.push(Kernel::AttentionRows { kv, head_dim });
                v.push(Kernel::AttentionQuads { kv, head_dim });
            }
        }
        for head_dim in COOP_ATTENTION_HEAD_DIMS {
            for heads in [1, 2] {
                for half in [false, true] {
                    v.push(Kernel::AttentionCoop {
                        head_dim,
                        heads,
                        half,
                    });
                }
            }
        }
        v
    }

    /// Whether the kernel exists for these features: the cooperative-matrix
    /// matmul needs them with f16 and subgroups; a weight type repacked
    /// under them decodes with MatVecDot/MatVecMulti, any other with MatVec.
    pub fn builds_with(self, f: ShaderFeatures) -> bool {
        match self {
            Kernel::MatMulCoop { t, multi, .. } => {
                f.coop != 0 && f.shader_f16 && f.subgroups && (multi == Multi::One || f.repacks(t))
            }
            Kernel::MatVecMulti { t, .. }
            | Kernel::MatVecDot { t, .. }
            | Kernel::MatVecGlu { t, .. } => f.repacks(t),
            // Repacked weights decode on Q8 activations (MatVecDot).
            Kernel::MatVec(t) => !f.repacks(t),
            // Its quad sums in registers: plain f32 arithmetic.
            Kernel::AttentionQuads { .. } => f.fast_math && f.subgroups,
            Kernel::AttentionCoop { .. } => {
                f.coop != 0 && f.shader_f16 && f.subgroups && f.fast_math
            }
            Kernel::AttentionRope(_) | Kernel::AddRmsNormHalf { .. } => f.fast_math,
            _ => true,
        }
    }

    /// The storage bindings after the parameter block (binding 0), in
    /// binding order, as the WGSL declares them.
    pub fn bindings(self) -> &'static [Access] {
        use Access::{Read as R, ReadWrite as RW};
        match self {
            Kernel::GetRows(_) | Kernel::MatMul(_) => &[R, RW, RW],
            // Split: the second half's sums after the output.
            Kernel::MatMulCoop {
                tile: CoopTile::HugeSplit,
                ..
            } => &[R, R, RW, RW],
            // Activations read-only: the driver may use its read-only cache.
            Kernel::MatVec(_)
            | Kernel::MatMulCoop {
                multi: Multi::One, ..
            } => &[R, R, RW],
            // With MULTI, the other weights and outputs after them ...
            Kernel::MatMulCoop {
                multi: Multi::Apart,
                ..
            } => &[R, R, RW, R, RW, R, RW],
            // ... or (JOINT) the other outputs.
            Kernel::MatMulCoop {
                multi: Multi::Joint,
                ..
            } => &[R, R, RW, RW, RW],
            // With GLU, up's output, the GLU's and its f16 blocks.
            Kernel::MatMulCoop {
                multi: Multi::Glu(_),
                ..
            } => &[R, R, RW, RW, RW, RW],
            // Weights, Q8 quants, scales, out ...
            Kernel::MatVecDot {
                residual: false, ..
            } => &[R, R, R, RW],
            // ... the residual and the sum ...
            Kernel::MatVecDot { residual: true, .. } => &[R, R, R, RW, RW, RW],
            // ... or the other weights and outputs ...
            Kernel::MatVecMulti { norm: false, .. } => &[R, R, R, RW, R, RW, R, RW],
            // ... or the up weight and output, the GLU's output and its Q8.
            Kernel::MatVecGlu { norm: false, .. } => &[R, R, R, RW, R, RW, RW, RW, RW, RW],
            // With the norm: its input and weight for the Q8 activations,
            // and its output last.
            Kernel::MatVecMulti { norm: true, .. } => &[R, R, R, RW, R, RW, R, RW, RW],
            Kernel::MatVecGlu { norm: true, .. } => &[R, R, R, RW, R, RW, RW, RW, RW, RW, RW],
            Kernel::MatVecQ8(t) | Kernel::MatMulQ8(t) if has_min(t) => &[R, R, R, RW, R],
            Kernel::MatVecQ8(_) | Kernel::MatMulQ8(_) => &[R, R, R, RW],
            Kernel::RmsNorm { weight: false } => &[RW, RW],
            Kernel::RmsNorm { weight: true } => &[RW, RW, RW],
            Kernel::RmsNormQ8 | Kernel::GluQ8(_) => &[RW, RW, RW, RW, RW, RW],
            Kernel::GluHalf(_) => &[RW, RW, RW, RW],
            Kernel::AddRmsNorm => &[RW, RW, RW, RW, RW],
            Kernel::AddRmsNormHalf { sums: false } => &[RW, RW, RW, RW, RW, RW],
            // The split's sums last.
            Kernel::AddRmsNormHalf { sums: true } => &[RW, RW, RW, RW, RW, RW, R],
            // The last binding is the exact.wgsl tables.
            Kernel::Rope(_) => &[RW, RW, RW, RW, R],
            Kernel::RopePair(_) => &[RW, RW, RW, RW, RW, RW, R],
            Kernel::RopeStore(_) => &[RW, RW, RW, RW, RW, RW, RW, RW, RW, RW, R],
            Kernel::Attention(_)
            | Kernel::AttentionRows { .. }
            | Kernel::AttentionQuads { .. }
            | Kernel::AttentionCoop { half: false, .. } => &[RW, R, R, RW, RW, RW, R],
            // ... and the f16 blocks after the tables.
            Kernel::AttentionCoop { half: true, .. } => &[RW, R, R, RW, RW, RW, R, RW],
            Kernel::AttentionQ8(_) => &[RW, R, R, RW, RW, RW, RW, RW, RW, R],
            // ... or the caches written too, then Q rotated, K, K rotated,
            // V, the frequency factors and the cache row.
            Kernel::AttentionRope(_) => &[
                RW, RW, RW, RW, RW, RW, RW, RW, RW, RW, RW, RW, RW, RW, RW, R,
            ],
            Kernel::Elementwise(Elementwise::Scale) => &[RW, RW],
            Kernel::Elementwise(_) => &[RW, RW, RW],
            Kernel::SplitSums => &[RW, R],
            Kernel::Softmax | Kernel::Argmax | Kernel::Copy { .. } | Kernel::HalfBlocks => {
                &[RW, RW]
            }
            Kernel::SetRows(_) => &[RW, RW, RW],
            Kernel::SetRowsPair(_) => &[RW, RW, RW, RW, RW],
            Kernel::QuantizeActs(ActQuant::Q8) => &[RW, RW, RW, RW],
            Kernel::QuantizeActs(_) => &[RW, RW],
        }
    }

    /// A short name for labels and the perf table.
    pub fn label(self) -> String {
        format!("{self:?}")
    }

    /// The kernel's full WGSL source for these features.
    pub fn source(self, f: ShaderFeatures) -> String {
        let mut defines: Vec<(&str, String)> = Vec::new();
        let mut def = |name: &'static str| defines.push((name, String::new()));
        if f.subgroups {
            def("SUBGROUPS");
        }
        // Caches read as vec2<f16> (the rope-joined attention writes them
        // as u32 words, as rope.wgsl does).
        if f.shader_f16 && !matches!(self, Kernel::AttentionRope(_)) {
            def("KV_HALF");
        }
        if f.fused_fma {
            def("FUSED_FMA");
        }
        if f.fast_math {
            def("FAST");
        }
        let mut parts = vec![src::COMMON];
        let mut wg = WG_ROW;
        // Kernels that read the exact.wgsl tables bind them last.
        let tables = |defines: &mut Vec<(&str, String)>| {
            defines.push(("TABLES", String::new()));
            defines.push(("TAB", self.bindings().len().to_string()));
        };
        match self {
            // Repacked Q4_0 and Q8_0 decode: whole blocks per invocation.
            Kernel::MatVecMulti { t, .. }
            | Kernel::MatVecDot { t, .. }
            | Kernel::MatVecGlu { t, .. } => {
                type_defines(t, &mut def);
                let norm = matches!(
                    self,
                    Kernel::MatVecMulti { norm: true, .. } | Kernel::MatVecGlu { norm: true, .. }
                );
                wg = WG_MATVEC_DOT;
                if matches!(self, Kernel::MatVecGlu { .. }) {
                    wg = WG_MATVEC_GLU;
                }
                if norm {
                    // The norm's sums as norm.wgsl's, over as many
                    // invocations.
                    wg = WG_ROW;
                    def("NORM");
                    def("Q8");
                }
                def("REDUCE4");
                match self {
                    Kernel::MatVecMulti { .. } => {
                        def("W1");
                        def("MULTI");
                        // Rounds into workgroup memory only.
                        def("Q8_LOCAL");
                    }
                    Kernel::MatVecGlu { op, .. } => {
                        def("W1");
                        def("GLU");
                        def("Q8");
                        def(match op {
                            Elementwise::GeluMul => "GELU_MUL",
                            _ => "SILU_MUL",
                        });
                    }
                    Kernel::MatVecDot { residual, .. } => {
                        def("SINGLE");
                        if residual {
                            def("RESID");
                        }
                    }
                    _ => {}
                }
                parts.push(src::REDUCE);
                if norm || matches!(self, Kernel::MatVecGlu { .. }) {
                    parts.push(src::EXACT);
                }
                parts.push(src::MATVEC_BLOCKS);
                if norm {
                    // The norm's output: bound last.
                    defines.push(("NOUT", self.bindings().len().to_string()));
                }
            }
            Kernel::MatMulCoop { t, tile, multi } => {
                type_defines(t, &mut def);
                match multi {
                    Multi::One => {}
                    Multi::Apart => def("MULTI"),
                    Multi::Joint => {
                        def("MULTI");
                        def("JOINT");
                    }
                    Multi::Glu(op) => {
                        def("GLU");
                        def(match op {
                            Elementwise::GeluMul => "GELU_MUL",
                            _ => "SILU_MUL",
                        });
                    }
                }
                if tile == CoopTile::HugeSplit {
                    def("SPLIT");
                }
                let c = CoopShape::of(f.coop, tile);
                defines.push(("FS", f.coop.to_string()));
                defines.push(("FM", c.fm.to_string()));
                defines.push(("FN", c.fn_.to_string()));
                defines.push(("SR", c.sr.to_string()));
                defines.push(("ST", c.st.to_string()));
                staging_defines(f.coop, &mut defines);
                let glu = matches!(multi, Multi::Glu(_));
                defines.extend(c.accumulator_code(f.coop, glu));
                if glu {
                    parts.push(src::EXACT);
                }
                parts.extend([src::QUANT, src::MATMUL_COOP]);
            }
            Kernel::GetRows(t) | Kernel::MatVec(t) | Kernel::MatMul(t) => {
                type_defines(t, &mut def);
                parts.push(src::QUANT);
                match self {
                    Kernel::GetRows(_) => parts.push(src::GET_ROWS),
                    Kernel::MatVec(_) => {
                        wg = WG_MATVEC;
                        def("REDUCE4");
                        parts.extend([src::REDUCE, src::MATVEC]);
                    }
                    _ => parts.push(src::MATMUL),
                }
            }
            Kernel::MatVecQ8(t) | Kernel::MatMulQ8(t) => {
                type_defines(t, &mut def);
                if has_min(t) {
                    def("HAS_MIN");
                }
                let tokens = if matches!(self, Kernel::MatVecQ8(_)) {
                    MATVEC_Q8_TOKENS
                } else {
                    MATMUL_Q8_TOKENS
                };
                defines.push(("TT", tokens.to_string()));
                parts.extend([src::QUANT, src::EXACT, src::MATMUL_Q8]);
            }
            Kernel::RmsNorm { weight } => {
                if weight {
                    def("WEIGHT");
                }
                parts.extend([src::REDUCE, src::EXACT, src::NORM]);
            }
            Kernel::RmsNormQ8 => {
                def("WEIGHT");
                def("Q8");
                parts.extend([src::REDUCE, src::EXACT, src::NORM]);
            }
            Kernel::AddRmsNorm => {
                def("WEIGHT");
                def("ADD");
                parts.extend([src::REDUCE, src::EXACT, src::NORM]);
            }
            Kernel::AddRmsNormHalf { sums } => {
                if sums {
                    def("SUMS");
                }
                parts.extend([src::REDUCE, src::EXACT, src::NORM_HALF]);
            }
            Kernel::Rope(mode) | Kernel::RopePair(mode) => {
                if mode == RopeMode::Neox {
                    def("NEOX");
                }
                if matches!(self, Kernel::RopePair(_)) {
                    def("PAIR");
                }
                tables(&mut defines);
                defines.push(("HEADS", ROPE_HEADS.to_string()));
                parts.extend([src::EXACT, src::ROTATE, src::ROPE]);
            }
            Kernel::RopeStore(cache) => {
                def("PAIR");
                def("STORE");
                if cache == GgmlType::F16 {
                    def("CACHE_F16");
                }
                tables(&mut defines);
                defines.push(("HEADS", ROPE_HEADS.to_string()));
                parts.extend([src::EXACT, src::ROTATE, src::ROPE]);
            }
            Kernel::Attention(kv) | Kernel::AttentionQ8(kv) | Kernel::AttentionRope(kv) => {
                if kv == GgmlType::F16 {
                    def("KV_F16");
                }
                if !matches!(self, Kernel::Attention(_)) {
                    def("Q8");
                }
                let rope = matches!(self, Kernel::AttentionRope(_));
                if rope {
                    def("ROPE");
                }
                wg = WG_ATTENTION;
                tables(&mut defines);
                parts.extend([src::REDUCE, src::EXACT]);
                if rope {
                    parts.push(src::ROTATE);
                }
                parts.extend([src::ATTENTION_KEYS, src::ATTENTION]);
            }
            Kernel::AttentionRows { kv, head_dim } | Kernel::AttentionQuads { kv, head_dim } => {
                if kv == GgmlType::F16 {
                    def("KV_F16");
                }
                def("ROWS");
                if matches!(self, Kernel::AttentionQuads { .. }) {
                    def("QUADS");
                }
                defines.push(("HD", head_dim.to_string()));
                tables(&mut defines);
                parts.extend([src::EXACT, src::ATTENTION_KEYS, src::ATTENTION]);
            }
            Kernel::AttentionCoop {
                head_dim,
                heads,
                half,
            } => {
                if half {
                    def("HALF");
                }
                defines.push(("HD", head_dim.to_string()));
                defines.push(("FS", f.coop.to_string()));
                defines.push(("SQ", heads.to_string()));
                staging_defines(f.coop, &mut defines);
                defines.extend(attention_coop_code(f.coop, head_dim));
                parts.extend([src::ATTENTION_KEYS, src::ATTENTION_COOP]);
            }
            Kernel::Elementwise(op) => {
                def(match op {
                    Elementwise::Add => "ADD",
                    Elementwise::Mul => "MUL",
                    Elementwise::Scale => "SCALE",
                    Elementwise::SiluMul => "SILU_MUL",
                    Elementwise::GeluMul => "GELU_MUL",
                });
                parts.extend([src::EXACT, src::ELEMENTWISE]);
            }
            Kernel::GluQ8(op) | Kernel::GluHalf(op) => {
                def(match op {
                    Elementwise::GeluMul => "GELU_MUL",
                    _ => "SILU_MUL",
                });
                def(if matches!(self, Kernel::GluQ8(_)) {
                    "Q8"
                } else {
                    "HALF"
                });
                parts.extend([src::EXACT, src::ELEMENTWISE]);
            }
            Kernel::Softmax | Kernel::Argmax => {
                if self == Kernel::Argmax {
                    def("ARGMAX");
                }
                parts.extend([src::REDUCE, src::SOFTMAX]);
            }
            Kernel::Copy { src: s, dst } => {
                if s == GgmlType::F16 {
                    def("SRC_F16");
                }
                if dst == GgmlType::F16 {
                    def("DST_F16");
                }
                parts.push(src::COPY);
            }
            Kernel::HalfBlocks => {
                def("DST_F16");
                def("BLOCKS");
                parts.push(src::COPY);
            }
            Kernel::SplitSums => parts.push(src::SPLIT_SUMS),
            Kernel::QuantizeActs(q) => {
                def(match q {
                    ActQuant::Q8 => "Q8",
                    ActQuant::Q8K => "Q8_K",
                    ActQuant::F16 => "F16",
                });
                parts.extend([src::EXACT, src::QUANTIZE]);
            }
            Kernel::SetRows(dst) | Kernel::SetRowsPair(dst) => {
                def("SET_ROWS");
                if matches!(self, Kernel::SetRowsPair(_)) {
                    def("PAIR");
                }
                if dst == GgmlType::F16 {
                    def("DST_F16");
                }
                parts.push(src::COPY);
            }
        }
        let repacked = matches!(self,
            Kernel::GetRows(t)
            | Kernel::MatVec(t)
            | Kernel::MatVecMulti { t, .. }
            | Kernel::MatVecGlu { t, .. }
            | Kernel::MatMul(t)
            | Kernel::MatMulCoop { t, .. } if f.repacks(t));
        if repacked {
            defines.push(("REPACKED", String::new()));
        }
        defines.push(("WG", wg.to_string()));
        // Native f16 storage for F16 weights and caches where the adapter
        // has shader-f16.
        let f16_weights = f.shader_f16
            && matches!(
                self,
                Kernel::GetRows(GgmlType::F16)
                    | Kernel::MatVec(GgmlType::F16)
                    | Kernel::MatMul(GgmlType::F16)
                    | Kernel::MatMulCoop {
                        t: GgmlType::F16,
                        ..
                    }
            );
        // The prefill GEMM reads a repacked type's quant words in pairs.
        let pairs = repacked && matches!(self, Kernel::MatMulCoop { .. });
        if f16_weights {
            defines.push(("WQ_F16", String::new()));
        }
        if pairs {
            defines.push(("WQ_PAIRS", String::new()));
        }
        // Q4_0's decode in f16 for the GEMM (quant.wgsl's de8h): on the
        // H200 8b pp512's GEMMs 91 → 82 µs a token, 1b 14.9 → 13.4. Q8_0's
        // in f16 was slower than in f32 (1b 13.3 → 13.7), so it stays.
        let q4_0_gemm = matches!(
            self,
            Kernel::MatMulCoop {
                t: GgmlType::Q4_0,
                ..
            }
        );
        if pairs && q4_0_gemm {
            defines.push(("HALF_DECODE", String::new()));
        }
        let wq = match (f16_weights, pairs) {
            (true, _) => "f16",
            (false, true) => "vec2<u32>",
            (false, false) => "u32",
        };
        defines.push(("WQ", wq.to_string()));
        defines.push((
            "KV",
            if f.shader_f16 { "vec2<f16>" } else { "u32" }.to_string(),
        ));
        let mut out = String::new();
        if f.shader_f16 {
            // Enable directives must come before any declaration.
            out.push_str("enable f16;\n");
        }
        if matches!(
            self,
            Kernel::MatMulCoop { .. } | Kernel::AttentionCoop { .. }
        ) {
            out.push_str("enable wgpu_cooperative_matrix;\n");
        }
        for p in parts {
            out.push_str(&preprocess(p, &defines));
            out.push('\n');
        }
        out
    }
}

/// Tokens one invocation of the Q8 kernels carries: mat-vec up to this
/// many, prefill in groups of this many.
pub const MATVEC_Q8_TOKENS: usize = 4;
pub const MATMUL_Q8_TOKENS: usize = 8;

/// Q4_1 and Q5_1: a block minimum, multiplied by the activations' sums.
pub fn has_min(t: GgmlType) -> bool {
    matches!(t, GgmlType::Q4_1 | GgmlType::Q5_1)
}

fn type_defines(t: GgmlType, def: &mut impl FnMut(&'static str)) {
    use GgmlType::*;
    def(match t {
        F32 => "TYPE_F32",
        F16 => "TYPE_F16",
        Q4_0 => "TYPE_Q4_0",
        Q4_1 => "TYPE_Q4_1",
        Q5_0 => "TYPE_Q5_0",
        Q5_1 => "TYPE_Q5_1",
        Q8_0 => "TYPE_Q8_0",
        Q4_K => "TYPE_Q4_K",
        Q5_K => "TYPE_Q5_K",
        Q6_K => "TYPE_Q6_K",
        // Callers check `supports` first; an unknown type builds nothing
        // that naga would accept, so the error surfaces at pipeline build.
        _ => "TYPE_UNSUPPORTED",
    });
    match t {
        F32 | F16 => def("PLAIN"),
        Q4_K | Q5_K => def("K_SCALES"),
        _ => {}
    }
}

/// How the cooperative kernels stage f16 tiles in workgroup memory: V
/// halves an element of type LT (LV4: vec4<f16>). Metal's simdgroup loads
/// (fragments of 8) take scalar pointers.
fn staging_defines(fs: u32, defines: &mut Vec<(&str, String)>) {
    let v = if fs == 8 { 1 } else { 4 };
    defines.push(("V", v.to_string()));
    defines.push(("LT", if v == 4 { "vec4<f16>" } else { "f16" }.to_string()));
    if v == 4 {
        defines.push(("LV4", String::new()));
    }
}

/// Applies `#ifdef`/`#ifndef`/`#else`/`#endif` lines and `{{NAME}}`
/// substitutions. Directive lines themselves are dropped.
pub fn preprocess(text: &str, defines: &[(&str, String)]) -> String {
    let defined = |name: &str| defines.iter().any(|(d, _)| *d == name);
    // One entry per open #if: (this branch is live, the enclosing is live).
    let mut stack: Vec<(bool, bool)> = Vec::new();
    let mut live = true;
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("#ifdef ") {
            stack.push((live, live));
            live = live && defined(name.trim());
        } else if let Some(name) = t.strip_prefix("#ifndef ") {
            stack.push((live, live));
            live = live && !defined(name.trim());
        } else if t == "#else" {
            let (_, outer) = *stack
                .last()
                .expect("#else without #ifdef in an embedded kernel");
            live = outer && !live;
        } else if t == "#endif" {
            let (_, outer) = stack
                .pop()
                .expect("#endif without #ifdef in an embedded kernel");
            live = outer;
        } else if live {
            let mut l = line.to_string();
            for (name, value) in defines {
                l = l.replace(&format!("{{{{{name}}}}}"), value);
            }
            out.push_str(&l);
            out.push('\n');
        }
    }
    assert!(stack.is_empty(), "unclosed #ifdef in an embedded kernel");
    out
}

/// A compiled kernel and the layout its bind groups use.
pub struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
}

/// Compiled pipelines, built on first use and kept for the session.
#[derive(Default)]
pub struct PipelineCache {
    map: HashMap<Kernel, Pipeline>,
}

impl PipelineCache {
    pub fn get_or_build(
        &mut self,
        device: &wgpu::Device,
        kernel: Kernel,
        features: ShaderFeatures,
        bounds_checks: bool,
    ) -> &Pipeline {
        self.map
            .entry(kernel)
            .or_insert_with(|| build(device, kernel, features, bounds_checks))
    }
}

fn build(
    device: &wgpu::Device,
    kernel: Kernel,
    features: ShaderFeatures,
    bounds_checks: bool,
) -> Pipeline {
    let label = kernel.label();
    let desc = wgpu::ShaderModuleDescriptor {
        label: Some(&label),
        source: wgpu::ShaderSource::Wgsl(kernel.source(features).into()),
    };
    let module = if bounds_checks {
        device.create_shader_module(desc)
    } else {
        // SAFETY: wgpu's checks guard against out-of-bounds accesses, loops
        // that never end and integer division by zero. Our kernels have
        // none of them, given what the host checks before each dispatch:
        // - every buffer holds at least the tensor view a dispatch covers
        //   (`Buffers::get`), plus one spare word for the unaligned u32
        //   reads of GGUF blocks;
        // - the contract's shape checks (`backend::check`) and the kernel limits
        //   in `ops.rs` (head_dim <= 256, even F16 rows, cache rows >= ctx)
        //   hold, so every index a kernel derives from its parameters is in
        //   range, and invocations past the end return early;
        // - data-dependent indices (token ids, positions, slots) are
        //   clamped in the kernels;
        // - every loop is bounded by a parameter, and no dispatch is
        //   recorded with zero workgroups, so no divisor is zero.
        // The differential tests run with the checks on and off.
        unsafe { device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked()) }
    };
    let mut entries = vec![wgpu::BindGroupLayoutEntry {
        binding: 0,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: true,
            min_binding_size: wgpu::BufferSize::new(PARAMS_BYTES),
        },
        count: None,
    }];
    for (i, access) in kernel.bindings().iter().enumerate() {
        entries.push(wgpu::BindGroupLayoutEntry {
            binding: i as u32 + 1,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage {
                    read_only: *access == Access::Read,
                },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        });
    }
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some(&label),
        entries: &entries,
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(&label),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(&label),
        layout: Some(&pipeline_layout),
        module: &module,
        entry_point: Some("main"),
        compilation_options: wgpu::PipelineCompilationOptions::default(),
        cache: None,
    });
    Pipeline { pipeline, layout }
}

/// Bytes of one dispatch's parameter block (`struct Params` in common.wgsl).
pub const PARAMS_BYTES: u64 = 64;

#[cfg(test)]
mod tests {
    use super::CoopTile;

    /// Split huge tiles only where the wide ones would have run, k is
    /// long, the huge tiles are few and pad no more tokens.
    #[test]
    fn coop_tiles_split_only_where_they_fill_the_gpu() {
        let split = |m, n, k, huge| CoopTile::pick(16, m, n, huge).split(16, m, n, k, huge);
        // 8b pp512: Q and O (k 4096), down (k 14336), gate and up.
        assert_eq!(split(4096, 512, 4096, true), CoopTile::HugeSplit);
        assert_eq!(split(4096, 512, 14336, true), CoopTile::HugeSplit);
        assert_eq!(split(14336, 512, 4096, true), CoopTile::Huge);
        // Not without huge tiles, with a short k, with a batch the huge
        // tiles pad more (300 tokens: 512 against 384), nor with enough
        // huge tiles of their own (2048 tokens: 256).
        assert_eq!(split(4096, 512, 4096, false), CoopTile::Wide);
        assert_eq!(split(4096, 512, 1024, true), CoopTile::Wide);
        assert_eq!(split(4096, 300, 4096, true), CoopTile::Wide);
        assert_eq!(split(4096, 2048, 4096, true), CoopTile::Wide);
        // Slim and short tiles stay.
        assert_eq!(split(1024, 512, 4096, true), CoopTile::Slim);
        assert_eq!(split(4096, 64, 4096, true), CoopTile::Short);
        assert_eq!(CoopTile::HugeSplit.parts(), 2);
        assert_eq!(CoopTile::Wide.parts(), 1);
    }
}
