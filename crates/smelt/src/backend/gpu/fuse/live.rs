//! Outputs nothing reads. A step's output is dead when the first later
//! step on the tape that names its buffer writes all of it without
//! reading it, or when no later step names it and the buffer is scratch
//! (`Backend::alloc_scratch`: its values do not outlive the forward).
//! Kernels that can leave such an output unwritten are told so here:
//! gate and up on cooperative matrices with their GLU joined, and a split
//! matmul's first half whose sums the add after it takes in. (A decode
//! attention that takes in K's rope asks `dead` itself: `rope_store`.)

use super::Cx;
use crate::backend::Tensor;
use crate::backend::gpu::kernels::norm::AddNorm;
use crate::backend::gpu::tape::{Step, Touch};

/// Whether nothing reads `t` after the steps before `later`.
pub(super) fn dead<'s>(t: Tensor, later: impl IntoIterator<Item = &'s Step>, cx: &Cx) -> bool {
    for step in later {
        match step.touch(t.id) {
            Touch::None => {}
            Touch::Overwrites(w) => return w.n_bytes() >= t.n_bytes(),
            Touch::Reads => return false,
        }
    }
    cx.scratch.contains(&t.id)
}

/// `step`, about to be held, with its dead outputs left unwritten.
pub(super) fn trim(mut step: Step, later: &[Step], cx: &Cx) -> Step {
    match &mut step {
        Step::CoopGateUp(g) if g.keep && g.glu.is_some() => {
            g.keep = !g.outs.iter().all(|&o| dead(o, later, cx));
        }
        Step::Add { split: Some(s), .. } | Step::AddNorm(AddNorm { split: Some(s), .. })
            if s.keep =>
        {
            s.keep = !dead(s.out, later, cx);
        }
        _ => {}
    }
    step
}

#[cfg(test)]
mod tests {
    use super::super::testing::{cx_with, t};
    use super::{dead, trim};
    use crate::backend::gpu::kernels::elementwise::Elementwise;
    use crate::backend::gpu::kernels::split_sums::Split;
    use crate::backend::gpu::tape::Step;
    use std::collections::HashSet;

    fn glu(gate: u32, up: u32, out: u32) -> Step {
        Step::Glu {
            op: Elementwise::SiluMul,
            gate: t(gate, 8, 64),
            up: t(up, 8, 64),
            out: t(out, 8, 64),
        }
    }

    fn add(a: u32, b: u32, out: u32) -> Step {
        Step::Add {
            a: t(a, 8, 64),
            b: t(b, 8, 64),
            out: t(out, 8, 64),
            split: None,
        }
    }

    #[test]
    fn an_output_read_later_is_live_and_one_overwritten_first_is_dead() {
        let none = HashSet::new();
        let cx = cx_with(true, &none);
        let x = t(1, 8, 64);
        // Read by the GLU.
        assert!(!dead(x, &[add(5, 6, 7), glu(1, 2, 3)], &cx));
        // Written whole by the GLU, before anything reads it.
        assert!(dead(x, &[add(5, 6, 7), glu(2, 3, 1)], &cx));
        // Written in place: read.
        assert!(!dead(x, &[add(1, 2, 1)], &cx));
        // Written in part only (4 of its 8 rows).
        let part = Step::Glu {
            op: Elementwise::SiluMul,
            gate: t(2, 4, 64),
            up: t(3, 4, 64),
            out: t(1, 4, 64),
        };
        assert!(!dead(x, &[part], &cx));
        // The tape's end: dead only if scratch.
        assert!(!dead(x, &[add(5, 6, 7)], &cx));
        let scratch = HashSet::from([1]);
        assert!(dead(x, &[add(5, 6, 7)], &cx_with(true, &scratch)));
    }

    #[test]
    fn a_split_output_is_written_only_if_read_later() {
        let scratch = HashSet::from([2]);
        let cx = cx_with(true, &scratch);
        let (res, proj, sums) = (t(1, 8, 64), t(2, 8, 64), t(3, 8, 64));
        let held = || Step::Add {
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
        assert!(kept(&trim(held(), &[glu(2, 4, 5)], &cx)), "read after");
        assert!(!kept(&trim(held(), &[glu(4, 5, 2)], &cx)), "overwritten");
        assert!(!kept(&trim(held(), &[], &cx)), "scratch at the end");
    }
}
