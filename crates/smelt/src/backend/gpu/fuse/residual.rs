//! Residual adds (f32 mode), each joined with its neighbour:
//!
//! - into the repacked decode mat-vec before it whose output it adds
//!   (`MatVecDot` with `residual`);
//! - a split matmul's second half's sums into the add of its output
//!   (`Add` with `split`; the sums are added where the add lowers);
//! - with the rms_norm of its sum after it (`AddRmsNorm`);
//! - after the rms_norm of its addend (a post-norm, `RmsNormResidual`),
//!   where nothing reads the norm's output after the add.

use super::{Cx, live};
use crate::backend::gpu::kernels::matvec_blocks;
use crate::backend::gpu::kernels::norm::{self, AddNorm};
use crate::backend::gpu::tape::Step;

/// A post-norm and the residual add of its output: `sum = res +
/// rms_norm(x) · w` in one dispatch (f32 mode).
pub(super) fn post_norm(held: &Step, next: &Step, later: &[Step], cx: &Cx) -> Option<Step> {
    let (
        &Step::Norm {
            x,
            w,
            eps,
            out: normed,
            q8: None,
        },
        &Step::Add {
            a,
            b,
            out: sum,
            split: None,
        },
    ) = (held, next)
    else {
        return None;
    };
    let res = match (a == normed, b == normed) {
        (false, true) => a,
        (true, false) => b,
        _ => return None,
    };
    let shapes = [x, res, sum]
        .iter()
        .all(|t| (t.rows, t.cols) == (normed.rows, normed.cols));
    // The norm's input and weight are not written; the residual may be
    // the sum.
    let apart = [x.id, w.id]
        .iter()
        .all(|&id| id != sum.id && id != res.id && id != normed.id)
        && res.id != normed.id
        && sum.id != normed.id;
    let joins = cx.features.fast_math
        && !cx.quantize_activations
        && shapes
        && apart
        && live::dead(normed, later, cx);
    joins.then(|| Step::Dispatch(norm::rms_norm_residual(x, w, eps, res, sum)))
}

pub(super) fn join(held: &Step, next: &Step) -> Option<Step> {
    match (held, next) {
        (&Step::MatVec { w, x, out }, &Step::Add { a, b, out: sum, .. }) => {
            let res = match (a == out, b == out) {
                (_, true) => a,
                (true, false) => b,
                (false, false) => return None,
            };
            // Not a tensor the mat-vec reads (bound read-only).
            let clash = [w, x[0], x[1]]
                .iter()
                .any(|t| t.id == res.id || t.id == sum.id);
            if clash || (res.rows, res.cols) != (out.rows, out.cols) {
                return None;
            }
            let d = matvec_blocks::dot((w, x, out), 0, Some((res, sum)));
            Some(Step::Dispatch(d))
        }
        // The add (and norm) take in the sums of a matmul in two halves.
        (&Step::SplitSums(s), &Step::Add { a, b, out, .. }) => {
            if s.parts != 2 || s.out.id == out.id || a.id == b.id {
                return None;
            }
            let other = if b == s.out {
                a
            } else if a == s.out {
                b
            } else {
                return None;
            };
            if other.id == s.sums.id || out.id == s.sums.id {
                return None;
            }
            Some(Step::Add {
                a: other,
                b: s.out,
                out,
                split: Some(s),
            })
        }
        (
            &Step::Add {
                a,
                b,
                out: sum,
                split,
            },
            &Step::Norm {
                x,
                w,
                eps,
                out,
                q8: None,
            },
        ) => {
            let on_sums = split.is_some_and(|s| s.sums.id == out.id);
            if sum != x || out.id == sum.id || out.id == a.id || out.id == b.id || on_sums {
                return None;
            }
            Some(Step::AddNorm(AddNorm {
                a,
                b,
                sum,
                w,
                eps,
                out,
                split,
            }))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{cx, kernels, q8, t, typed};
    use crate::backend::gpu::kernels::Kernel;
    use crate::backend::gpu::kernels::matvec_blocks::MatVecBlocks;
    use crate::backend::gpu::kernels::norm::Norm;
    use crate::backend::gpu::kernels::split_sums::{Split, SplitSums};
    use crate::backend::gpu::tape::Step;
    use crate::quant::GgmlType::Q4_0;

    fn add(a: crate::backend::Tensor, b: crate::backend::Tensor) -> Step {
        Step::Add {
            a,
            b,
            out: a,
            split: None,
        }
    }

    #[test]
    fn a_residual_add_joins_the_mat_vec_of_its_addend() {
        let (res, proj) = (t(1, 1, 64), t(2, 1, 64));
        let matvec = || Step::MatVec {
            w: typed(20, Q4_0, 64, 64),
            x: q8(10, 64),
            out: proj,
        };
        let ks = kernels(vec![matvec(), add(res, proj)], &cx(true));
        assert!(matches!(
            ks[..],
            [Kernel::MatVecBlocks(MatVecBlocks::MatVecDot { .. })]
        ));
        // An add of something else is its own dispatch.
        let other = t(3, 1, 64);
        assert_eq!(kernels(vec![matvec(), add(res, other)], &cx(true)).len(), 2);
    }

    #[test]
    fn an_add_and_the_norm_of_its_sum_are_one_dispatch_after_a_split() {
        let (res, proj, h) = (t(1, 8, 64), t(2, 8, 64), t(3, 8, 64));
        let split = Split {
            out: proj,
            sums: t(4, 8, 64),
            parts: 2,
            keep: true,
        };
        let norm = Step::Norm {
            x: res,
            w: t(5, 1, 64),
            eps: 1e-6,
            out: h,
            q8: None,
        };
        let tape = vec![Step::SplitSums(split), add(res, proj), norm];
        assert_eq!(
            kernels(tape, &cx(true)),
            [Kernel::SplitSums(SplitSums), Kernel::Norm(Norm::AddRmsNorm)]
        );
    }

    /// Gemma's post-norm: the projection normed into h, h added to the
    /// residual, then (`overwritten`) h written by the next norm.
    fn post_norm_tape(overwritten: bool) -> Vec<Step> {
        let (res, proj, h, w) = (t(1, 2, 64), t(2, 2, 64), t(3, 2, 64), t(4, 1, 64));
        let norm = |x, out| Step::Norm {
            x,
            w,
            eps: 1e-6,
            out,
            q8: None,
        };
        let mut steps = vec![norm(proj, h), add(res, h)];
        if overwritten {
            steps.push(norm(res, h));
        }
        steps
    }

    #[test]
    fn a_post_norm_joins_the_residual_add_of_its_output() {
        let ks = kernels(post_norm_tape(true), &cx(true));
        assert_eq!(
            ks,
            [
                Kernel::Norm(Norm::RmsNormResidual),
                Kernel::Norm(Norm::RmsNorm { weight: true })
            ]
        );
        // h read by the host after: apart.
        let ks = kernels(post_norm_tape(false), &cx(true));
        assert_eq!(ks[0], Kernel::Norm(Norm::RmsNorm { weight: true }));
        assert_eq!(ks.len(), 2);
        // The exact mode keeps both.
        assert_eq!(kernels(post_norm_tape(true), &cx(false)).len(), 3);
    }
}
