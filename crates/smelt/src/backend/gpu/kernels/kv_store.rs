//! KV-cache writes into a cache of ggml blocks (`kv_store.wgsl`): each
//! row rotated in groups and quantized to Q8_0 or Q4_0 as the CPU's
//! `kv_blocks` stores it, one invocation per rotation group.

use crate::backend::Tensor;
use crate::backend::cpu::kv_blocks;
use crate::quant::GgmlType::{self, Q4_0, Q8_0};

use super::{Binding, Dispatch, Family, ShaderFeatures, Source, rw, shared};

const SOURCE: &str = include_str!("kv_store.wgsl");

kernel_params! {
    /// kv_store.wgsl's parameters.
    pub struct Params {
        /// Rows of src.
        pub n: u32,
        /// Values per row.
        pub cols: u32,
        /// Rows of dst.
        pub dst_rows: u32,
        /// Values per rotation group (`kv_blocks::rotation`).
        pub rot: u32,
        /// 1 / sqrt(rot), as `kv_blocks::hadamard` computes it.
        pub scale: f32,
        /// 0: exact.wgsl's `opaque` reads it, a value the compiler
        /// cannot fold.
        pub zero: u32,
    }
}

/// The cache types it writes.
pub const BLOCK_CACHE_TYPES: [GgmlType; 2] = [Q8_0, Q4_0];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KvStore {
    /// The cache type, Q8_0 or Q4_0.
    pub cache: GgmlType,
    /// Two writes with the same ids (K and V) in one dispatch.
    pub pair: bool,
}

impl Family for KvStore {
    type Params = Params;

    fn all() -> Vec<Self> {
        let mut v = Vec::new();
        for cache in BLOCK_CACHE_TYPES {
            for pair in [false, true] {
                v.push(KvStore { cache, pair });
            }
        }
        v
    }

    fn bindings(self) -> &'static [Binding] {
        if self.pair {
            &const { [rw("src"), rw("dst"), rw("ids"), rw("src2"), rw("dst2")] }
        } else {
            &const { [rw("src"), rw("dst"), rw("ids")] }
        }
    }

    fn source(self, _f: ShaderFeatures, s: &mut Source) {
        if self.pair {
            s.def("PAIR");
        }
        if self.cache == Q8_0 {
            s.def("Q8_0");
        }
        s.include(&[shared::EXACT, SOURCE]);
    }
}

/// `dst[ids[i]] = src[i]` (and, paired, `dst2[ids[i]] = src2[i]`) into a
/// Q8_0 or Q4_0 cache: one invocation per rotation group of a row.
pub fn set_rows(
    (src, ids, dst): (Tensor, Tensor, Tensor),
    pair: Option<(Tensor, Tensor)>,
) -> Dispatch {
    let n = ids.n_elements();
    let rot = kv_blocks::rotation(dst.cols);
    let params = Params {
        n: n as u32,
        cols: dst.cols as u32,
        dst_rows: dst.rows as u32,
        rot: rot as u32,
        scale: kv_blocks::hadamard_scale(rot),
        zero: 0,
    };
    let calls = if pair.is_some() { 2 } else { 1 };
    let groups = (calls * n * dst.cols / rot).div_ceil(64) as u64;
    let kernel = KvStore {
        cache: dst.dtype,
        pair: pair.is_some(),
    };
    let one = [("src", src), ("dst", dst), ("ids", ids)];
    match pair {
        None => Dispatch::new(kernel, params, &one, groups),
        Some((src2, dst2)) => {
            let bound = [&one[..], &[("src2", src2), ("dst2", dst2)][..]].concat();
            Dispatch::new(kernel, params, &bound, groups)
        }
    }
}
