//! A split matmul's other parts' sums added to its first's
//! (`split_sums.wgsl`; `CoopTile::split`).

use crate::backend::Tensor;

use super::{Binding, Dispatch, Family, ShaderFeatures, Source, r, rw};

const SOURCE: &str = include_str!("split_sums.wgsl");

kernel_params! {
    /// split_sums.wgsl's parameters.
    pub struct Params {
        /// Elements of out (a multiple of 4).
        pub n: u32,
        /// Parts of sums, each n elements.
        pub terms: u32,
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

/// A split matmul's first part's output and the other parts' sums, not
/// yet added (`Step::SplitSums`).
#[derive(Clone, Copy)]
pub struct Split {
    pub out: Tensor,
    /// `(parts - 1) × out`'s elements.
    pub sums: Tensor,
    /// The parts of k: 2 (a huge tile's halves), or up to 16 (short tiles).
    pub parts: usize,
    /// Whether `out` gets the whole sums (not where nothing reads it
    /// after, `fuse::live`: an add and norm that take the sums in leave
    /// it as it is).
    pub keep: bool,
}

impl Split {
    /// The adds on their own: `out += sums[0] + sums[1] + ...`, 4 values
    /// an invocation.
    pub fn call(self) -> Dispatch {
        let len = self.out.n_elements();
        let bound = [("out", self.out), ("sums", self.sums)];
        let groups = len.div_ceil(4 * 256) as u64;
        let params = Params {
            n: len as u32,
            terms: (self.parts - 1) as u32,
        };
        Dispatch::new(SplitSums, params, &bound, groups)
    }
}
