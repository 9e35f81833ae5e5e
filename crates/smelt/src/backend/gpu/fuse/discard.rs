//! `Backend::discard` on the step held before it: gate and up joined with
//! their GLU are not written if both are discarded, nor a split matmul's
//! whole output where the add and norm after it take its sums in.

use crate::backend::Tensor;
use crate::backend::gpu::kernels::norm::AddNorm;
use crate::backend::gpu::tape::Step;

pub(super) fn apply(held: &mut Step, ts: &[Tensor]) {
    match held {
        Step::CoopGateUp(g) if g.glu.is_some() && g.outs.iter().all(|o| ts.contains(o)) => {
            g.keep = false;
        }
        Step::Add { split: Some(s), .. } | Step::AddNorm(AddNorm { split: Some(s), .. })
            if ts.contains(&s.out) =>
        {
            s.keep = false
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::t;
    use super::apply;
    use crate::backend::gpu::kernels::split_sums::Split;
    use crate::backend::gpu::tape::Step;

    #[test]
    fn a_discarded_split_output_is_not_written() {
        let (res, proj, sums) = (t(1, 8, 64), t(2, 8, 64), t(3, 8, 64));
        let add = || Step::Add {
            a: res,
            b: proj,
            out: res,
            split: Some(Split {
                out: proj,
                sums,
                keep: true,
            }),
        };
        let kept = |s: &Step| matches!(s, Step::Add { split: Some(s), .. } if s.keep);
        let mut held = add();
        apply(&mut held, &[res]);
        assert!(kept(&held), "another tensor discarded");
        apply(&mut held, &[proj]);
        assert!(!kept(&held));
    }
}
