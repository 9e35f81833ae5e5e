//! Decode in the f32-activation mode (`matvec_blocks.wgsl`): mat-vecs on
//! Q8-rounded activations with packed integer dot products, whole blocks
//! per invocation, of repacked Q4_0 / Q8_0 or of the other legacy and
//! K-quants in their GGUF layout (`matvec_blocks_gguf.wgsl`), and the ops
//! fused into them: the residual add after one weight, up to 3 weights of one
//! input in one dispatch, gate and up with their GLU, and the rms_norm
//! before them.

use crate::backend::Tensor;
use crate::quant::GgmlType;

use super::elementwise::Elementwise;
use super::matmul_id::Experts;
use super::{Aux, Binding, Dispatch, Family, ShaderFeatures, Source, WG_ROW, r, rw, shared};

const SOURCE: &str = include_str!("matvec_blocks.wgsl");
const GGUF: &str = include_str!("matvec_blocks_gguf.wgsl");

/// The weight types it takes (`ShaderFeatures::dots`).
pub const DOT_TYPES: [GgmlType; 10] = [
    GgmlType::Q4_0,
    GgmlType::Q8_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Values of a weight row one invocation takes per step (the WGSL's
/// blocks, or units): 64 for the K-quants (two scale groups that share
/// their quant bytes), a block of 32 otherwise.
fn unit_values(t: GgmlType) -> usize {
    if t.block_size() == 256 { 64 } else { 32 }
}

/// The K-quants, whose units are of 64 values (`UNIT64`): one MULTI
/// dispatch takes a third weight of another of them.
const UNIT64_TYPES: [GgmlType; 5] = [
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Whether `MatVecMulti` takes weights of types `t` (the first two) and
/// `v` (the third): one type, or two K-quants.
pub fn multi_types(t: GgmlType, v: GgmlType) -> bool {
    t == v || (UNIT64_TYPES.contains(&t) && UNIT64_TYPES.contains(&v))
}

/// The WGSL function of a K-quant's unit (`unit_dot_<type>`).
fn unit_fn(t: GgmlType) -> &'static str {
    match t {
        GgmlType::Q2_K => "unit_dot_q2_k",
        GgmlType::Q3_K => "unit_dot_q3_k",
        GgmlType::Q4_K => "unit_dot_q4_k",
        GgmlType::Q5_K => "unit_dot_q5_k",
        _ => "unit_dot_q6_k",
    }
}

/// Defines a K-quant's unit function (`UNIT_<type>`) and what it needs.
fn unit_defines(s: &mut Source, t: GgmlType) {
    s.def(match t {
        GgmlType::Q2_K => "UNIT_Q2_K",
        GgmlType::Q3_K => "UNIT_Q3_K",
        GgmlType::Q4_K => "UNIT_Q4_K",
        GgmlType::Q5_K => "UNIT_Q5_K",
        _ => "UNIT_Q6_K",
    });
    if matches!(t, GgmlType::Q4_K | GgmlType::Q5_K) {
        s.def("K_SCALES");
        s.def("ACT_SUMS");
    }
}

/// Whether a mat-vec of `w` takes 16 rows a workgroup: K-quant rows of
/// up to 64 units (4096 values), where 4 rows would leave at least half
/// of the workgroup's `WG_DOT` invocations without a unit, in a weight of
/// so many rows (the output projection's) that a quarter of the
/// workgroups still fill the device. Fewer rows keep 4 a workgroup: at
/// 2048-4096 rows, 16 made an attention output 7-23% slower.
fn rows16(w: Tensor) -> bool {
    unit_values(w.dtype) == 64 && row_units(w) <= WG_DOT / 2 && w.rows >= ROWS16_MIN_ROWS
}

/// Rows of a weight from which `rows16` takes 16 rows a workgroup (1024
/// workgroups of them).
const ROWS16_MIN_ROWS: usize = 16384;

/// Units per row of `w` (`Params::row_blocks`).
fn row_units(w: Tensor) -> u32 {
    (w.cols / unit_values(w.dtype)) as u32
}

kernel_params! {
    /// matvec_blocks.wgsl's parameters.
    pub struct Params {
        /// Rows of w (the first weight).
        pub m: u32,
        /// Values per row (a multiple of 32).
        pub k: u32,
        /// Tokens.
        pub n: u32,
        /// Blocks per row (units: K-quants' are of 64 values).
        pub row_blocks: u32,
        /// Row groups of w (MULTI: per token).
        pub groups_m: u32,
        /// SINGLE: out's row stride, m or more where w is a part of a
        /// split weight.
        pub out_stride: u32,
        /// SINGLE: out's first column.
        pub out_col0: u32,
        /// MULTI: rows of w1.
        pub m1: u32,
        /// MULTI: row groups of w1.
        pub groups1: u32,
        /// MULTI: rows of w2.
        pub m2: u32,
        /// MULTI: row groups of w2 (0: no third weight).
        pub groups2: u32,
        /// NORM: the norm's eps.
        pub eps: f32,
        /// GLU: 1 when act is rounded to Q8 too.
        pub round_q8: u32,
        /// ID: pairs per row of the activations (K, or 1).
        pub x_div: u32,
        /// ID: experts in w's stack.
        pub n_expert: u32,
    }
}

/// Workgroup size of the plain mat-vecs: 128 invocations with four blocks
/// a step kept more loads in flight than 64 with two.
const WG_DOT: u32 = 128;
/// The fused gate/up/GLU: 16 invocations per 4 rows; with the norm taken
/// in, it must be the norm's (`WG_ROW`).
const WG_GLU: u32 = 256;
const _: () = assert!(WG_GLU == WG_ROW);

/// The longest row the mat-vecs take their norm into (the WGSL's
/// NORM_BLOCKS blocks of 32).
pub const NORM_MAX_COLS: usize = 4096;

/// The weight type (one of `DOT_TYPES`) and what is fused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatVecBlocks {
    /// One weight, and with `residual` the residual add after it; with
    /// `rows16`, 16 rows a workgroup, not 4 (`rows16`).
    MatVecDot {
        t: GgmlType,
        residual: bool,
        rows16: bool,
    },
    /// The experts' mat-vecs of `matmul_id`: every (token, chosen expert)
    /// pair's rows of a stack of experts.
    MatVecDotId { t: GgmlType },
    /// Up to 3 weights of one input (`Backend::matmuls`): the first two of
    /// type `t`, the third of `v` (`multi_types`); with `norm`, the
    /// rms_norm before them taken in (16 rows a workgroup).
    MatVecMulti {
        t: GgmlType,
        v: GgmlType,
        norm: bool,
    },
    /// Gate and up (rows a multiple of 32) with the GLU after them (`op`:
    /// SiluMul or GeluMul) and its Q8 rounding: a workgroup per 32 rows of
    /// both; with `norm`, the rms_norm before them taken in.
    MatVecGlu {
        t: GgmlType,
        op: Elementwise,
        norm: bool,
    },
}

impl MatVecBlocks {
    fn weight(self) -> GgmlType {
        match self {
            MatVecBlocks::MatVecDot { t, .. }
            | MatVecBlocks::MatVecDotId { t }
            | MatVecBlocks::MatVecMulti { t, .. }
            | MatVecBlocks::MatVecGlu { t, .. } => t,
        }
    }

    fn norm(self) -> bool {
        matches!(
            self,
            MatVecBlocks::MatVecMulti { norm: true, .. }
                | MatVecBlocks::MatVecGlu { norm: true, .. }
        )
    }
}

impl Family for MatVecBlocks {
    type Params = Params;

    fn all() -> Vec<Self> {
        let mut kernels = Vec::new();
        for t in DOT_TYPES {
            for norm in [false, true] {
                for v in DOT_TYPES.into_iter().filter(|&v| multi_types(t, v)) {
                    kernels.push(MatVecBlocks::MatVecMulti { t, v, norm });
                }
                for op in [Elementwise::SiluMul, Elementwise::GeluMul] {
                    kernels.push(MatVecBlocks::MatVecGlu { t, op, norm });
                }
            }
            for residual in [false, true] {
                for rows16 in [false, true]
                    .into_iter()
                    .filter(|&r| !r || unit_values(t) == 64)
                {
                    kernels.push(MatVecBlocks::MatVecDot {
                        t,
                        residual,
                        rows16,
                    });
                }
            }
            kernels.push(MatVecBlocks::MatVecDotId { t });
        }
        kernels
    }

    /// Only in the f32-activation mode.
    fn builds_with(self, f: ShaderFeatures) -> bool {
        match self {
            MatVecBlocks::MatVecMulti { t, v, .. } => f.dots(t) && f.dots(v),
            _ => f.dots(self.weight()),
        }
    }

    fn bindings(self) -> &'static [Binding] {
        use MatVecBlocks::*;
        // The weight, the activations (Q8 quants and scales, or the norm's
        // input and weight), the output; the norm's output last.
        const Q8: [Binding; 3] = [r("wq"), r("aq"), r("ad")];
        const NORM: [Binding; 3] = [r("wq"), r("nx"), r("nw")];
        match self {
            MatVecDot {
                residual: false, ..
            } => &const { [Q8[0], Q8[1], Q8[2], rw("out")] },
            MatVecDot { residual: true, .. } => {
                &const { [Q8[0], Q8[1], Q8[2], rw("out"), rw("res"), rw("sum")] }
            }
            MatVecDotId { .. } => &const { [Q8[0], Q8[1], Q8[2], rw("out"), r("ids")] },
            MatVecMulti { norm: false, .. } => {
                &const {
                    [
                        Q8[0],
                        Q8[1],
                        Q8[2],
                        rw("out"),
                        r("wq1"),
                        rw("out1"),
                        r("wq2"),
                        rw("out2"),
                    ]
                }
            }
            MatVecMulti { norm: true, .. } => {
                &const {
                    [
                        NORM[0],
                        NORM[1],
                        NORM[2],
                        rw("out"),
                        r("wq1"),
                        rw("out1"),
                        r("wq2"),
                        rw("out2"),
                        rw("nout"),
                    ]
                }
            }
            MatVecGlu { norm: false, .. } => {
                &const {
                    [
                        Q8[0],
                        Q8[1],
                        Q8[2],
                        rw("out"),
                        r("wq1"),
                        rw("out1"),
                        rw("act"),
                        rw("xq"),
                        rw("xd"),
                        rw("xs"),
                    ]
                }
            }
            MatVecGlu { norm: true, .. } => {
                &const {
                    [
                        NORM[0],
                        NORM[1],
                        NORM[2],
                        rw("out"),
                        r("wq1"),
                        rw("out1"),
                        rw("act"),
                        rw("xq"),
                        rw("xd"),
                        rw("xs"),
                        rw("nout"),
                    ]
                }
            }
        }
    }

    fn source(self, f: ShaderFeatures, s: &mut Source) {
        let t = self.weight();
        s.weight_type(t);
        let repacked = f.repacks(t);
        if repacked {
            s.def("REPACKED");
            s.set("WQ", "vec4<u32>");
        } else {
            s.set("WQ", "u32");
            if unit_values(t) == 64 {
                s.def("UNIT64");
                unit_defines(s, t);
                s.set("DOT", unit_fn(t));
                s.set("Q6", t == GgmlType::Q6_K);
                if let MatVecBlocks::MatVecMulti { v, .. } = self
                    && v != t
                {
                    unit_defines(s, v);
                    s.set("DOT2", unit_fn(v));
                    s.set("Q6_2", v == GgmlType::Q6_K);
                }
            }
            if matches!(t, GgmlType::Q4_1 | GgmlType::Q5_1) {
                s.def("ACT_SUMS");
            }
        }
        s.wg = match self {
            MatVecBlocks::MatVecGlu { .. } => WG_GLU,
            _ => WG_DOT,
        };
        let norm = self.norm();
        if norm {
            // The norm's sums as norm.wgsl's, over as many invocations.
            s.wg = WG_ROW;
            s.def("NORM");
            s.def("Q8");
        }
        s.def("REDUCE4");
        match self {
            MatVecBlocks::MatVecMulti { .. } => {
                s.def("W1");
                s.def("MULTI");
                // Rounds into workgroup memory only.
                s.def("Q8_LOCAL");
            }
            MatVecBlocks::MatVecGlu { op, .. } => {
                s.def("W1");
                s.def("GLU");
                s.def("Q8");
                s.def(op.glu_define());
            }
            MatVecBlocks::MatVecDot {
                residual, rows16, ..
            } => {
                s.def("SINGLE");
                if residual {
                    s.def("RESID");
                }
                if rows16 {
                    s.def("ROWS16");
                }
            }
            MatVecBlocks::MatVecDotId { .. } => s.def("ID"),
        }
        s.include(&[shared::REDUCE]);
        if norm || matches!(self, MatVecBlocks::MatVecGlu { .. }) {
            s.include(&[shared::EXACT]);
        }
        if !repacked {
            s.include(&[GGUF]);
        }
        s.include(&[SOURCE]);
        if norm {
            s.binding("NOUT", "nout", self.bindings());
        }
    }
}

/// The input of mat-vecs of several weights (`MatVecMulti`, `MatVecGlu`):
/// its Q8 rounding (quants, scales), or the rms_norm whose output it is,
/// taken into the mat-vecs.
#[derive(Clone, Copy)]
pub enum DotIn {
    Q8([Tensor; 2]),
    Norm(NormJoin),
}

/// `out = rms_norm(x) · w` (`Step::Norm`; `fuse::norm_matvec`), taken into the mat-vecs of
/// its output.
#[derive(Clone, Copy)]
pub struct NormJoin {
    pub x: Tensor,
    pub w: Tensor,
    pub eps: f32,
    pub out: Tensor,
}

impl DotIn {
    /// Every tensor it reads or writes.
    pub fn tensors(self) -> Vec<Tensor> {
        match self {
            DotIn::Q8(q8) => q8.to_vec(),
            DotIn::Norm(n) => vec![n.x, n.w, n.out],
        }
    }

    fn norm(self) -> Option<NormJoin> {
        match self {
            DotIn::Q8(_) => None,
            DotIn::Norm(n) => Some(n),
        }
    }

    /// Its bindings and the norm's eps (0 without).
    fn bound(self) -> (Vec<(&'static str, Tensor)>, f32) {
        match self {
            DotIn::Q8([xq, xd]) => (vec![("aq", xq), ("ad", xd)], 0.0),
            DotIn::Norm(n) => (vec![("nx", n.x), ("nw", n.w), ("nout", n.out)], n.eps),
        }
    }
}

/// A repacked decode mat-vec `out[:, o0 .. o0 + w.rows] = x · wᵀ` (o0 >
/// 0: a part of a split weight) of x's Q8 blocks (quants, scales, sums),
/// with `resid = (res, sum)` the residual add `sum = res + out` (whole
/// rows of `out`).
pub fn dot(
    (w, [xq, xd, _], out): (Tensor, [Tensor; 3], Tensor),
    o0: usize,
    resid: Option<(Tensor, Tensor)>,
) -> Dispatch {
    let rows16 = rows16(w);
    let (m, n) = (w.rows, out.rows);
    let blocks = m.div_ceil(if rows16 { 16 } else { 4 });
    let params = Params {
        m: m as u32,
        k: w.cols as u32,
        n: n as u32,
        row_blocks: row_units(w),
        groups_m: blocks as u32,
        out_stride: out.cols as u32,
        out_col0: o0 as u32,
        ..Params::default()
    };
    let mut bound = vec![("wq", w), ("aq", xq), ("ad", xd), ("out", out)];
    if let Some((res, sum)) = resid {
        bound.extend([("res", res), ("sum", sum)]);
    }
    let kernel = MatVecBlocks::MatVecDot {
        t: w.dtype,
        residual: resid.is_some(),
        rows16,
    };
    Dispatch::new(kernel, params, &bound, (blocks * n) as u64)
}

/// `matmul_id` on Q8 activations (quants, scales, sums) of `x_rows` rows:
/// every pair's mat-vec of its expert in one dispatch (`MatVecDotId`).
pub fn dot_id(e: Experts, [xq, xd, _]: [Tensor; 3], x_rows: usize) -> Dispatch {
    let (m, pairs) = (e.out.cols, e.ids.n_elements());
    let blocks = m.div_ceil(4);
    let params = Params {
        m: m as u32,
        k: e.w.cols as u32,
        n: pairs as u32,
        row_blocks: row_units(e.w),
        groups_m: blocks as u32,
        out_stride: m as u32,
        x_div: (pairs / x_rows.max(1)) as u32,
        n_expert: e.n_expert as u32,
        ..Params::default()
    };
    let bound = [
        ("wq", e.w),
        ("aq", xq),
        ("ad", xd),
        ("out", e.out),
        ("ids", e.ids),
    ];
    let kernel = MatVecBlocks::MatVecDotId { t: e.w.dtype };
    Dispatch::new(kernel, params, &bound, (blocks * pairs) as u64)
}

/// Up to 3 repacked decode mat-vecs of one input `x` for `n` tokens in
/// one dispatch (`MatVecMulti`): of its Q8 rounding, 4 rows a workgroup,
/// or with the norm before them taken in, 16; the weights' row groups one
/// after the other.
pub fn multi(ws: &[Tensor], x: DotIn, outs: &[Tensor], n: usize) -> Dispatch {
    let norm = x.norm();
    let per = if norm.is_some() { 16 } else { 4 };
    let groups = |t: Tensor| t.rows.div_ceil(per);
    let (w, o) = (ws[0], outs[0]);
    let (w1, o1) = (ws[1], outs[1]);
    // A missing third weight binds the second again and has no rows.
    let (w2, o2) = (
        ws.get(2).copied().unwrap_or(w1),
        outs.get(2).copied().unwrap_or(o1),
    );
    let groups2 = if ws.len() == 3 { groups(w2) } else { 0 };
    let (mut bound, eps) = x.bound();
    let params = Params {
        m: w.rows as u32,
        k: w.cols as u32,
        n: n as u32,
        row_blocks: row_units(w),
        groups_m: groups(w) as u32,
        m1: w1.rows as u32,
        groups1: groups(w1) as u32,
        m2: w2.rows as u32,
        groups2: groups2 as u32,
        eps,
        ..Params::default()
    };
    bound.extend([
        ("wq", w),
        ("out", o),
        ("wq1", w1),
        ("out1", o1),
        ("wq2", w2),
        ("out2", o2),
    ]);
    let kernel = MatVecBlocks::MatVecMulti {
        t: w.dtype,
        v: w2.dtype,
        norm: norm.is_some(),
    };
    let workgroups = ((groups(w) + groups(w1) + groups2) * n) as u64;
    Dispatch::new(kernel, params, &bound, workgroups)
}

/// Gate and up mat-vecs (`w`, outputs `outs`) with `act = op(gate) · up`
/// after them, and with `q8` the Q8 rounding of `act`: a workgroup per 32
/// rows of both (`MatVecGlu`).
pub fn gate_up_glu(
    (w, x, outs): ([Tensor; 2], DotIn, [Tensor; 2]),
    (op, act): (Elementwise, Tensor),
    q8: Option<[Tensor; 3]>,
    aux: Aux,
) -> Dispatch {
    let (m, n) = (w[0].rows, outs[0].rows);
    let (mut bound, eps) = x.bound();
    let params = Params {
        m: m as u32,
        k: w[0].cols as u32,
        n: n as u32,
        row_blocks: row_units(w[0]),
        round_q8: u32::from(q8.is_some()),
        eps,
        ..Params::default()
    };
    let [xq, xd, xs] = q8.unwrap_or([aux.dummy; 3]);
    bound.extend([
        ("wq", w[0]),
        ("out", outs[0]),
        ("wq1", w[1]),
        ("out1", outs[1]),
        ("act", act),
        ("xq", xq),
        ("xd", xd),
        ("xs", xs),
    ]);
    let kernel = MatVecBlocks::MatVecGlu {
        t: w[0].dtype,
        op,
        norm: x.norm().is_some(),
    };
    Dispatch::new(kernel, params, &bound, (m / 32 * n) as u64)
}
