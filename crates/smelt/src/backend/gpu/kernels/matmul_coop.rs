//! Prefill on cooperative matrices (`matmul_coop.wgsl`): f16 operands,
//! f32 sums, in tiles of one of five shapes (`CoopTile`), of one weight or
//! of several of one input (`Multi`), where the adapter has them
//! (`ShaderFeatures::coop`).

use crate::backend::Tensor;
use crate::quant::GgmlType;

use super::elementwise::Elementwise;
use super::{Aux, Binding, Dispatch, Family, ShaderFeatures, Source, WEIGHT_TYPES, r, rw, shared};

const SOURCE: &str = include_str!("matmul_coop.wgsl");

kernel_params! {
    /// matmul_coop.wgsl's parameters.
    pub struct Params {
        /// Rows of w (the first weight).
        pub m: u32,
        /// Values per row (a multiple of 32).
        pub k: u32,
        /// Tokens.
        pub n: u32,
        /// w's row stride (`GpuBackend::row_param`).
        pub row_bytes: u32,
        /// Tiles along m (MULTI: of all the weights; GLU: of features).
        pub groups_m: u32,
        /// out's row stride: m, or more where w is a part of a split weight.
        pub out_stride: u32,
        /// out's first column.
        pub out_col0: u32,
        /// SPLIT: the k of each part.
        pub k_part: u32,
        /// MULTI: rows of w1.
        pub m1: u32,
        /// MULTI: rows of w2 (0: none).
        pub m2: u32,
        /// MULTI: w1's first tile.
        pub tile1: u32,
        /// MULTI: w2's first tile.
        pub tile2: u32,
        /// JOINT and GLU: the block where w (gate) starts in the joint buffer.
        pub first0: u32,
        /// ... where w1 (up) starts.
        pub first1: u32,
        /// ... where w2 starts.
        pub first2: u32,
        /// GLU: what is written: bit 0 act, bit 1 its f16 blocks, bit 2
        /// gate and up.
        pub writes: u32,
        /// SPLIT: the parts of k.
        pub parts: u32,
    }
}

/// A weight type, a tile shape and the weights of one dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatMulCoop {
    pub t: GgmlType,
    pub tile: CoopTile,
    pub multi: Multi,
}

/// The weights of a `MatMulCoop` dispatch: one, or up to 3 repacked
/// weights of one input (`Backend::matmuls`) bound each on its own, or
/// bound once as the joint buffer that holds them all (`Buffers::load_joined`).
/// `Glu`: gate and up joined, each tile's rows gate and up rows of the
/// same features in turns of a fragment, written with `out = op(gate) ·
/// up` and that as the next coop matmul's f16 blocks (`CoopGateUp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Multi {
    One,
    Apart,
    Joint,
    Glu(Elementwise),
}

impl Family for MatMulCoop {
    type Params = Params;

    fn all() -> Vec<Self> {
        let mut v = Vec::new();
        for t in WEIGHT_TYPES {
            for tile in CoopTile::ALL {
                v.push(MatMulCoop {
                    t,
                    tile,
                    multi: Multi::One,
                });
                if !tile.is_split() {
                    for multi in [Multi::Apart, Multi::Joint] {
                        v.push(MatMulCoop { t, tile, multi });
                    }
                }
                if tile == CoopTile::Huge && matches!(t, GgmlType::Q4_0 | GgmlType::Q8_0) {
                    for op in [Elementwise::SiluMul, Elementwise::GeluMul] {
                        let multi = Multi::Glu(op);
                        v.push(MatMulCoop { t, tile, multi });
                    }
                }
            }
        }
        v
    }

    /// Cooperative matrices with f16 and subgroups; several weights only
    /// repacked.
    fn builds_with(self, f: ShaderFeatures) -> bool {
        f.coop != 0
            && f.shader_f16
            && f.subgroups
            && (self.multi == Multi::One || f.repacks(self.t))
    }

    fn bindings(self) -> &'static [Binding] {
        const IN: [Binding; 3] = [r("wq"), r("x"), rw("out")];
        match (self.tile, self.multi) {
            // Split: the other parts' sums after the output.
            (CoopTile::HugeSplit | CoopTile::ShortSplit, _) => {
                &const { [IN[0], IN[1], IN[2], rw("sums1")] }
            }
            (_, Multi::One) => &IN,
            // The other weights and outputs after them ...
            (_, Multi::Apart) => {
                &const {
                    [
                        IN[0],
                        IN[1],
                        IN[2],
                        r("wq1"),
                        rw("out1"),
                        r("wq2"),
                        rw("out2"),
                    ]
                }
            }
            // ... or (JOINT) the other outputs ...
            (_, Multi::Joint) => &const { [IN[0], IN[1], IN[2], rw("out1"), rw("out2")] },
            // ... or (GLU) up's output, the GLU's and its f16 blocks.
            (_, Multi::Glu(_)) => {
                &const { [IN[0], IN[1], IN[2], rw("out1"), rw("act"), rw("halves")] }
            }
        }
    }

    fn source(self, f: ShaderFeatures, s: &mut Source) {
        let t = self.t;
        let repacked = f.repacks(t);
        // The GEMM reads a repacked type's quant words in pairs.
        s.weights(t, repacked, f.shader_f16 && t == GgmlType::F16, repacked);
        // Q4_0's decode in f16 (quant.wgsl's de8h) ran its GEMMs faster;
        // Q8_0's was slower in f16 than in f32.
        if repacked && t == GgmlType::Q4_0 {
            s.def("HALF_DECODE");
        }
        match self.multi {
            Multi::One => {}
            Multi::Apart => s.def("MULTI"),
            Multi::Joint => {
                s.def("MULTI");
                s.def("JOINT");
            }
            Multi::Glu(op) => {
                s.def("GLU");
                s.def(op.glu_define());
            }
        }
        if self.tile.is_split() {
            s.def("SPLIT");
        }
        let c = CoopShape::of(f.coop, self.tile);
        s.set("FS", f.coop);
        s.set("FM", c.fm);
        s.set("FN", c.fn_);
        s.set("SR", c.sr);
        s.set("ST", c.st);
        s.coop_staging(f.coop);
        let glu = matches!(self.multi, Multi::Glu(_));
        for (name, code) in c.accumulator_code(f.coop, glu) {
            s.set(name, code);
        }
        if glu {
            s.include(&[shared::EXACT]);
        }
        s.include(&[shared::QUANT, SOURCE]);
        s.coop = true;
    }
}

/// The tile shapes, one pipeline each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoopTile {
    /// 64 rows × 128 tokens: a batch of many tokens.
    Wide,
    /// 32 rows × 128 tokens on 4 subgroups: a matmul of few wide tiles,
    /// which would leave multiprocessors idle (the K and V projections).
    Slim,
    /// 32 rows × 32 tokens on 2 subgroups: a short batch, which 128
    /// tokens would pad; small tiles, so that even a 2048-row matmul
    /// fills the multiprocessors.
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
    /// Short tiles with k in 2 to 16 parts, a workgroup per tile and part:
    /// a short batch's tiles, each walking a long k with two subgroups,
    /// leave the multiprocessors mostly waiting (`CoopTile::split`).
    ShortSplit,
}

/// Prefill of this many tokens or more takes the tiles of 128 tokens.
const COOP_WIDE_MIN_TOKENS: usize = 96;
/// A matmul of this many rows and tokens or more takes huge tiles: gate
/// and up projections of 8192 rows and more ran faster on them, those of
/// 4096 rows were too few tiles.
const COOP_HUGE_MIN_ROWS: usize = 8192;
const COOP_HUGE_MIN_TOKENS: usize = 256;
/// A matmul of fewer wide tiles than this takes slim ones: about one
/// workgroup per multiprocessor of a large GPU (132 SMs).
const COOP_FEW_TILES: usize = 132;
/// A k this long or longer may be split in two (`CoopTile::split`), if
/// each half is a multiple of 32.
const COOP_SPLIT_MIN_K: usize = 2048;
/// Short tiles split k until the tiles times the parts reach this many
/// workgroups of 64 invocations, about 8 a multiprocessor on 132: at 32
/// tokens an 8b's short tiles ran 128 workgroups walking k = 4096-14336
/// alone, 35 ms of a 44 ms step.
const SHORT_SPLIT_WORKGROUPS: usize = 1024;
/// ... in parts of at least this many values of k (8 steps of 32).
const SHORT_SPLIT_MIN_PART: usize = 256;
/// ... and at most this many parts.
const SHORT_SPLIT_MAX_PARTS: usize = 16;

impl CoopTile {
    pub const ALL: [CoopTile; 6] = [
        CoopTile::Wide,
        CoopTile::Slim,
        CoopTile::Short,
        CoopTile::Huge,
        CoopTile::HugeSplit,
        CoopTile::ShortSplit,
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
    /// run (no column offset or stride), and the parts k is split into:
    /// wide tiles become split huge ones (2 parts) where the adapter holds
    /// them, k is long, the huge tiles would be fewer than the
    /// multiprocessors and pad no more tokens than the wide ones; short
    /// tiles split k while they are fewer than `SHORT_SPLIT_WORKGROUPS`
    /// and each part keeps `SHORT_SPLIT_MIN_PART` values or more.
    pub fn split(self, fs: u32, m: usize, n: usize, k: usize, huge: bool) -> (CoopTile, usize) {
        let tokens = |tile: CoopTile| {
            let (_, tn) = tile.size(fs);
            n.div_ceil(tn) * tn
        };
        let few = CoopTile::Huge.count(fs, m, n) < COOP_FEW_TILES;
        let padded = tokens(CoopTile::Huge) > tokens(CoopTile::Wide);
        let long = k >= COOP_SPLIT_MIN_K && k.is_multiple_of(64);
        if self == CoopTile::Wide && huge && few && !padded && long {
            return (CoopTile::HugeSplit, 2);
        }
        if self == CoopTile::Short {
            let tiles = self.count(fs, m, n);
            let mut parts = 1;
            while parts < SHORT_SPLIT_MAX_PARTS
                && tiles * parts < SHORT_SPLIT_WORKGROUPS
                && k.is_multiple_of(2 * parts * 32)
                && k / (2 * parts) >= SHORT_SPLIT_MIN_PART
            {
                parts *= 2;
            }
            if parts > 1 {
                return (CoopTile::ShortSplit, parts);
            }
        }
        (self, 1)
    }

    /// Whether the tile runs k in parts (`SPLIT`).
    pub fn is_split(self) -> bool {
        matches!(self, CoopTile::HugeSplit | CoopTile::ShortSplit)
    }

    /// How matmuls of one input (`Backend::matmuls`, weights of `rows`)
    /// run as one multi dispatch: the weights from `first` on together on
    /// `tile`, those before it alone; None: each alone. Not on huge tiles
    /// (gate and up, each on huge tiles already, ran slower as one
    /// dispatch). Q, K and V together where that fills the GPU better than
    /// K and V alone, but K and V without Q where all three would be more
    /// than two wide tiles a multiprocessor (no faster than Q alone and K
    /// and V on slim tiles).
    pub fn group(fs: u32, rows: &[usize], n: usize, huge: bool) -> Option<(usize, CoopTile)> {
        let pick = |rows: &[usize]| CoopTile::pick(fs, rows.iter().sum(), n, huge);
        let wide: usize = rows.iter().map(|&m| CoopTile::Wide.count(fs, m, n)).sum();
        let (first, tile) = match pick(rows) {
            CoopTile::Wide if rows.len() == 3 && wide > 2 * COOP_FEW_TILES => (1, pick(&rows[1..])),
            tile => (0, tile),
        };
        (tile != CoopTile::Huge).then_some((first, tile))
    }

    /// Rows × tokens of the output tile, with fragments of fs.
    pub fn size(self, fs: u32) -> (usize, usize) {
        CoopShape::of(fs, self).tile(fs)
    }

    /// How many of these tiles an (m rows) × (n tokens) output takes.
    fn count(self, fs: u32, m: usize, n: usize) -> usize {
        let (tm, tn) = self.size(fs);
        m.div_ceil(tm) * n.div_ceil(tn)
    }
}

/// The shape of the workgroup: SR × ST subgroups of FM × FN fragments
/// each. More tokens than rows per tile, as each staged weight (decoded
/// from its blocks) then serves more tokens; docs/perf-notes.md has the
/// shapes measured.
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
            (_, CoopTile::Short | CoopTile::ShortSplit) => (2, 1, 1, 2),
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
    /// fragment row i and token j), as NVIDIA puts arrays of them in local
    /// memory: their declarations, one step of multiplies, and their
    /// stores; with `glu`, fragment rows 2i (gate) and 2i + 1 (up) stored
    /// as a pair (`glu_gate`, `glu_emit`).
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

/// Whether an adapter's limits hold the kernel with fragments of `fs` in
/// the shapes it needs (all but the huge ones).
pub fn coop_fits(fs: u32, limits: &wgpu::Limits) -> bool {
    CoopTile::ALL
        .into_iter()
        .filter(|&tile| !matches!(tile, CoopTile::Huge | CoopTile::HugeSplit))
        .all(|tile| coop_tile_fits(fs, tile, limits))
}

/// Whether an adapter's limits hold `tile`.
pub fn coop_tile_fits(fs: u32, tile: CoopTile, limits: &wgpu::Limits) -> bool {
    let (bytes, invocations) = CoopShape::of(fs, tile).requirements(fs);
    bytes <= limits.max_compute_workgroup_storage_size
        && invocations <= limits.max_compute_invocations_per_workgroup
}

/// `out[:, o0 .. o0 + w.rows] = x · wᵀ` on `tile` with fragments of `fs`,
/// of x's f16 blocks (`half`: `HalfBlocks`' layout; `row_bytes`: w's row
/// stride); with `sums1` (a split tile: `CoopTile::split`), k in `parts`
/// and parts 1.. summed there, `(parts - 1) × n × m`.
pub fn one(
    (w, half, out): (Tensor, Tensor, Tensor),
    (o0, row_bytes): (usize, usize),
    (tile, fs): (CoopTile, u32),
    sums1: Option<(Tensor, usize)>,
) -> Dispatch {
    let (m, k, n) = (w.rows, w.cols, out.rows);
    let (tm, tn) = tile.size(fs);
    let parts = sums1.map_or(1, |(_, parts)| parts);
    let tiles_m = m.div_ceil(tm);
    let params = Params {
        m: m as u32,
        k: k as u32,
        n: n as u32,
        row_bytes: row_bytes as u32,
        groups_m: tiles_m as u32,
        out_stride: out.cols as u32,
        out_col0: o0 as u32,
        k_part: (k / parts) as u32,
        parts: parts as u32,
        ..Params::default()
    };
    let kernel = MatMulCoop {
        t: w.dtype,
        tile,
        multi: Multi::One,
    };
    let groups = (tiles_m * n.div_ceil(tn) * parts) as u64;
    let (a, b, c) = (("wq", w), ("x", half), ("out", out));
    match sums1 {
        None => Dispatch::new(kernel, params, &[a, b, c], groups),
        Some((s, _)) => Dispatch::new(kernel, params, &[a, b, c, ("sums1", s)], groups),
    }
}

/// Matmuls of one input (2 or 3 repacked weights) in one dispatch on
/// `tile`: the weights' tiles along m one after the other, of x's f16
/// blocks `half`; `joint`: the buffer that holds the weights side by side
/// and the block where each starts in it.
pub fn multi(
    (ws, half, outs): (&[Tensor], Tensor, &[Tensor]),
    (tile, fs): (CoopTile, u32),
    row_bytes: usize,
    joint: Option<(Tensor, Vec<u32>)>,
) -> Dispatch {
    let (w, n) = (ws[0], outs[0].rows);
    let (tm, tn) = tile.size(fs);
    let tiles: Vec<usize> = ws.iter().map(|w| w.rows.div_ceil(tm)).collect();
    let all = tiles.iter().sum::<usize>();
    // A missing third weight binds the second again and has no tiles.
    let (w2, o2) = (
        ws.get(2).copied().unwrap_or(ws[1]),
        outs.get(2).copied().unwrap_or(outs[1]),
    );
    let m2 = if ws.len() == 3 { w2.rows } else { 0 };
    let mut params = Params {
        m: w.rows as u32,
        k: w.cols as u32,
        n: n as u32,
        row_bytes: row_bytes as u32,
        groups_m: all as u32,
        out_stride: w.rows as u32,
        m1: ws[1].rows as u32,
        m2: m2 as u32,
        tile1: tiles[0] as u32,
        tile2: (tiles[0] + tiles[1]) as u32,
        ..Params::default()
    };
    let groups = (all * n.div_ceil(tn)) as u64;
    let outs3 = [("out", outs[0]), ("out1", outs[1]), ("out2", o2)];
    match joint {
        // Weights side by side in one buffer: bound once, each from its
        // first block.
        Some((joint, firsts)) => {
            let at = |i: usize| firsts.get(i).copied().unwrap_or(0);
            (params.first0, params.first1, params.first2) = (at(0), at(1), at(2));
            let kernel = MatMulCoop {
                t: w.dtype,
                tile,
                multi: Multi::Joint,
            };
            let bound = [&[("wq", joint), ("x", half)][..], &outs3[..]].concat();
            Dispatch::new(kernel, params, &bound, groups)
        }
        None => {
            let kernel = MatMulCoop {
                t: w.dtype,
                tile,
                multi: Multi::Apart,
            };
            let weights = [("wq", w), ("x", half), ("wq1", ws[1]), ("wq2", w2)];
            Dispatch::new(kernel, params, &[&weights[..], &outs3[..]].concat(), groups)
        }
    }
}

/// Gate and up on cooperative matrices, joined (prefill, f32 mode;
/// `Multi::Glu`), a step of the tape (`Step::CoopGateUp`): the weights, the
/// joint buffer that holds them and the blocks where each starts in it,
/// the input's f16 blocks, the outputs, the GLU that joined (op, output),
/// and the tile (rows × tokens) and w's row stride.
#[derive(Clone, Copy)]
pub struct CoopGateUp {
    pub w: [Tensor; 2],
    pub joint: (Tensor, [u32; 2]),
    pub x: Tensor,
    pub outs: [Tensor; 2],
    pub glu: Option<(Elementwise, Tensor)>,
    /// Whether gate and up are written (not where nothing reads them
    /// after, `fuse::live`).
    pub keep: bool,
    pub tile: (usize, usize),
    pub row_bytes: usize,
}

impl CoopGateUp {
    /// Its dispatch: gate and up, the GLU if one joined, and with `half`
    /// the GLU's f16 blocks (huge tiles of TM / 2 features).
    pub fn call(self, half: Option<Tensor>, aux: Aux) -> Dispatch {
        let (w, n) = (self.w[0], self.x.rows);
        let (tm, tn) = self.tile;
        let tiles = w.rows.div_ceil(tm / 2);
        let (joint, [g0, u0]) = self.joint;
        let writes = u32::from(self.glu.is_some())
            | (u32::from(half.is_some()) << 1)
            | (u32::from(self.keep) << 2);
        let params = Params {
            m: w.rows as u32,
            k: w.cols as u32,
            n: n as u32,
            row_bytes: self.row_bytes as u32,
            groups_m: tiles as u32,
            out_stride: w.rows as u32,
            first0: g0,
            first1: u0,
            writes,
            ..Params::default()
        };
        // Nothing is written to what `writes` leaves out.
        let (op, act) = self.glu.unwrap_or((Elementwise::SiluMul, aux.dummy));
        let kernel = MatMulCoop {
            t: w.dtype,
            tile: CoopTile::Huge,
            multi: Multi::Glu(op),
        };
        let bound = [
            ("wq", joint),
            ("x", self.x),
            ("out", self.outs[0]),
            ("out1", self.outs[1]),
            ("act", act),
            ("halves", half.unwrap_or(aux.dummy)),
        ];
        Dispatch::new(kernel, params, &bound, (tiles * n.div_ceil(tn)) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::CoopTile;

    /// Split huge tiles only where the wide ones would have run, k is
    /// long, the huge tiles are few and pad no more tokens.
    #[test]
    fn coop_tiles_split_only_where_they_fill_the_gpu() {
        let split = |m, n, k, huge| CoopTile::pick(16, m, n, huge).split(16, m, n, k, huge);
        // 8b pp512: Q and O (k 4096), down (k 14336), gate and up.
        assert_eq!(split(4096, 512, 4096, true), (CoopTile::HugeSplit, 2));
        assert_eq!(split(4096, 512, 14336, true), (CoopTile::HugeSplit, 2));
        assert_eq!(split(14336, 512, 4096, true), (CoopTile::Huge, 1));
        // Not without huge tiles, with a short k, with a batch the huge
        // tiles pad more (300 tokens: 512 against 384), nor with enough
        // huge tiles of their own (2048 tokens: 256).
        assert_eq!(split(4096, 512, 4096, false), (CoopTile::Wide, 1));
        assert_eq!(split(4096, 512, 1024, true), (CoopTile::Wide, 1));
        assert_eq!(split(4096, 300, 4096, true), (CoopTile::Wide, 1));
        assert_eq!(split(4096, 2048, 4096, true), (CoopTile::Wide, 1));
        // Slim tiles stay.
        assert_eq!(split(1024, 512, 4096, true), (CoopTile::Slim, 1));
    }

    /// Short tiles split k into parts of 256 values or more until the
    /// tiles times the parts reach 1024 workgroups.
    #[test]
    fn short_tiles_split_k_until_they_fill_the_gpu() {
        let split = |m, n, k| CoopTile::pick(16, m, n, true).split(16, m, n, k, true);
        // 8b at 32 tokens: Q and O (128 tiles), K and V (32), gate and up
        // (448), down (128, k 14336).
        assert_eq!(split(4096, 32, 4096), (CoopTile::ShortSplit, 8));
        assert_eq!(split(1024, 32, 4096), (CoopTile::ShortSplit, 16));
        assert_eq!(split(14336, 32, 4096), (CoopTile::ShortSplit, 4));
        assert_eq!(split(4096, 32, 14336), (CoopTile::ShortSplit, 8));
        // 64 tokens: two tiles along the tokens.
        assert_eq!(split(4096, 64, 4096), (CoopTile::ShortSplit, 4));
        // Not a k of 256 values; no parts that would not be whole steps
        // of 32 (k 2112: 1056 in two, but 528 in four).
        assert_eq!(split(4096, 32, 256), (CoopTile::Short, 1));
        assert_eq!(split(4096, 32, 2112), (CoopTile::ShortSplit, 2));
        // Enough tiles of their own.
        assert_eq!(split(65536, 32, 4096), (CoopTile::Short, 1));
    }
}
