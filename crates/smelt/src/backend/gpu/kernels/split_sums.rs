//! A split matmul's second half's sums added to its first's
//! (`split_sums.wgsl`; `CoopTile::HugeSplit`).

use crate::backend::Tensor;

use super::{Binding, Dispatch, Family, ShaderFeatures, Source, r, rw};

const SOURCE: &str = include_str!("split_sums.wgsl");

kernel_params! {
    /// split_sums.wgsl's parameters.
    pub struct Params {
        /// Elements (a multiple of 4).
        pub n: u32,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SplitSums;

impl Family for SplitSums {
    type Params = Params;

    fn all() -> Vec<Self> {
        vec![SplitSums]
    }

    fn bindings(self) -> &'static [Binding] {
        &const { [rw("out"), r("sums")] }
    }

    fn source(self, _f: ShaderFeatures, s: &mut Source) {
        s.include(&[SOURCE]);
    }
}

/// A split matmul's first half's output and its second half's sums, not
/// yet added (`Step::SplitSums`).
#[derive(Clone, Copy)]
pub struct Split {
    pub out: Tensor,
    pub sums: Tensor,
    /// Whether `out` gets the whole sums (not where nothing reads it
    /// after, `fuse::live`: an add and norm that take the sums in leave
    /// it as it is).
    pub keep: bool,
}

impl Split {
    /// The adds on their own: `out += sums`, 4 values an invocation.
    pub fn call(self) -> Dispatch {
        let len = self.out.n_elements();
        let bound = [("out", self.out), ("sums", self.sums)];
        let groups = len.div_ceil(4 * 256) as u64;
        Dispatch::new(SplitSums, Params { n: len as u32 }, &bound, groups)
    }
}
