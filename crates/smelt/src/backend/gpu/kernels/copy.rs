//! Copies (`copy.wgsl`): F32 <-> F16 conversion, the f16 blocks of the
//! coop matmul's activations, and the KV-cache writes (`dst[ids[i]] =
//! src[i]`).

use crate::backend::Tensor;
use crate::quant::GgmlType::{self, F16, F32};

use super::{Binding, Dispatch, Family, ShaderFeatures, Source, rw};

const SOURCE: &str = include_str!("copy.wgsl");

kernel_params! {
    /// copy.wgsl's parameters.
    pub struct Params {
        /// Values (a copy), or rows of src (SET_ROWS).
        pub n: u32,
        /// Values per row (BLOCKS: a multiple of 32).
        pub cols: u32,
        /// SET_ROWS: rows of dst.
        pub dst_rows: u32,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CopyKernel {
    Copy {
        src: GgmlType,
        dst: GgmlType,
    },
    /// F32 (rows, cols) to packed f16 in blocks of 32 along a row, each
    /// block of all rows together: (cols / 32, rows, 32), the activations
    /// of `matmul_coop.wgsl`.
    HalfBlocks,
    /// A KV-cache write into a cache of this type, F32 or F16.
    SetRows(GgmlType),
    /// Two KV-cache writes with the same ids (K and V) in one dispatch.
    SetRowsPair(GgmlType),
}

impl Family for CopyKernel {
    type Params = Params;

    fn all() -> Vec<Self> {
        let mut v = Vec::new();
        for src in [F32, F16] {
            for dst in [F32, F16] {
                v.push(CopyKernel::Copy { src, dst });
            }
        }
        v.push(CopyKernel::HalfBlocks);
        for t in [F32, F16] {
            v.extend([CopyKernel::SetRows(t), CopyKernel::SetRowsPair(t)]);
        }
        v
    }

    fn bindings(self) -> &'static [Binding] {
        match self {
            CopyKernel::Copy { .. } | CopyKernel::HalfBlocks => &const { [rw("src"), rw("dst")] },
            CopyKernel::SetRows(_) => &const { [rw("src"), rw("dst"), rw("ids")] },
            CopyKernel::SetRowsPair(_) => {
                &const { [rw("src"), rw("dst"), rw("ids"), rw("src2"), rw("dst2")] }
            }
        }
    }

    fn source(self, _f: ShaderFeatures, s: &mut Source) {
        match self {
            CopyKernel::Copy { src, dst } => {
                if src == F16 {
                    s.def("SRC_F16");
                }
                if dst == F16 {
                    s.def("DST_F16");
                }
            }
            CopyKernel::HalfBlocks => {
                s.def("DST_F16");
                s.def("BLOCKS");
            }
            CopyKernel::SetRows(dst) | CopyKernel::SetRowsPair(dst) => {
                s.def("SET_ROWS");
                if matches!(self, CopyKernel::SetRowsPair(_)) {
                    s.def("PAIR");
                }
                if dst == F16 {
                    s.def("DST_F16");
                }
            }
        }
        s.include(&[SOURCE]);
    }
}

/// `dst = src`, converted between F32 and F16: one invocation per value,
/// or per word of two into F16.
pub fn copy(src: Tensor, dst: Tensor) -> Dispatch {
    let n = src.n_elements();
    let threads = if dst.dtype == F16 { n.div_ceil(2) } else { n };
    let kernel = CopyKernel::Copy {
        src: src.dtype,
        dst: dst.dtype,
    };
    let params = Params {
        n: n as u32,
        ..Params::default()
    };
    let groups = threads.div_ceil(256) as u64;
    Dispatch::new(kernel, params, &[("src", src), ("dst", dst)], groups)
}

/// `x` as packed f16 in `HalfBlocks`' layout, into `half`: one invocation
/// per word of two values.
pub fn half_blocks(x: Tensor, half: Tensor) -> Dispatch {
    let n = x.n_elements();
    let params = Params {
        n: n as u32,
        cols: x.cols as u32,
        dst_rows: 0,
    };
    let groups = n.div_ceil(2 * 256) as u64;
    Dispatch::new(
        CopyKernel::HalfBlocks,
        params,
        &[("src", x), ("dst", half)],
        groups,
    )
}

/// `dst[ids[i]] = src[i]` (and, paired, `dst2[ids[i]] = src2[i]`): one
/// invocation per value, or per pair of values of an F16 cache; a Q8_0 or
/// Q4_0 cache's rows are quantized by `kv_store`.
pub fn set_rows(
    (src, ids, dst): (Tensor, Tensor, Tensor),
    pair: Option<(Tensor, Tensor)>,
) -> Dispatch {
    if super::kv_store::BLOCK_CACHE_TYPES.contains(&dst.dtype) {
        return super::kv_store::set_rows((src, ids, dst), pair);
    }
    let n = ids.n_elements();
    let per_row = if dst.dtype == F16 {
        dst.cols / 2
    } else {
        dst.cols
    };
    let params = Params {
        n: n as u32,
        cols: dst.cols as u32,
        dst_rows: dst.rows as u32,
    };
    let calls = if pair.is_some() { 2 } else { 1 };
    let groups = (calls * n * per_row).div_ceil(256) as u64;
    let one = [("src", src), ("dst", dst), ("ids", ids)];
    match pair {
        None => Dispatch::new(CopyKernel::SetRows(dst.dtype), params, &one, groups),
        Some((src2, dst2)) => {
            let bound = [&one[..], &[("src2", src2), ("dst2", dst2)][..]].concat();
            Dispatch::new(CopyKernel::SetRowsPair(dst.dtype), params, &bound, groups)
        }
    }
}
