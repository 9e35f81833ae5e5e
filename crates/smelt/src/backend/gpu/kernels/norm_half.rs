//! A residual add and rms_norm that also writes its output as the next
//! coop matmul's f16 blocks (`norm_half.wgsl`; fast math, its own order of
//! sums), and with `sums` a split matmul's second half's sums added in.
//! Its dispatch is built by `norm::AddNorm`.

use super::{Binding, Family, ShaderFeatures, Source, r, rw, shared};

const SOURCE: &str = include_str!("norm_half.wgsl");

kernel_params! {
    /// norm_half.wgsl's parameters.
    pub struct Params {
        pub rows: u32,
        /// A multiple of 4.
        pub cols: u32,
        pub eps: f32,
        /// SUMS: 1 writes the whole addend back.
        pub keep: u32,
    }
}

/// With `sums`, the addend a split matmul's first half, its second half's
/// sums added in (`Step::SplitSums`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AddRmsNormHalf {
    pub sums: bool,
}

impl Family for AddRmsNormHalf {
    type Params = Params;

    fn all() -> Vec<Self> {
        vec![
            AddRmsNormHalf { sums: false },
            AddRmsNormHalf { sums: true },
        ]
    }

    fn builds_with(self, f: ShaderFeatures) -> bool {
        f.fast_math
    }

    fn bindings(self) -> &'static [Binding] {
        const HALF: [Binding; 6] = [
            rw("x"),
            rw("out"),
            rw("w"),
            rw("addend"),
            rw("sum"),
            rw("halves"),
        ];
        if self.sums {
            // The split's sums last.
            &const {
                [
                    HALF[0],
                    HALF[1],
                    HALF[2],
                    HALF[3],
                    HALF[4],
                    HALF[5],
                    r("sums"),
                ]
            }
        } else {
            &HALF
        }
    }

    fn source(self, _f: ShaderFeatures, s: &mut Source) {
        if self.sums {
            s.def("SUMS");
        }
        s.include(&[shared::REDUCE, shared::EXACT, SOURCE]);
    }
}
