//! Outputs nothing reads. A step's output is dead when later steps on
//! the tape write all of it (views are prefixes of their buffer) before
//! any step reads a byte of it not yet overwritten, or when none reads it
//! and the buffer is scratch (`Backend::alloc_scratch`: its values do not
//! outlive the forward).
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
    // The first bytes of t overwritten since.
    let mut overwritten = 0;
    for step in later {
        match step.touch(t.id) {
            Touch::None => {}
            Touch::Overwrites(w) => {
                overwritten = overwritten.max(w.n_bytes());
                if overwritten >= t.n_bytes() {
                    return true;
                }
            }
            Touch::Reads(extent) if extent > overwritten => return false,
            Touch::Reads(_) => {}
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
        // Written in part only (4 of its 8 rows)...
        let part = |gate, up, out| Step::Glu {
            op: Elementwise::SiluMul,
            gate: t(gate, 4, 64),
            up: t(up, 4, 64),
            out: t(out, 4, 64),
        };
        assert!(!dead(x, &[part(2, 3, 1)], &cx));
        // ... then that part read, then all of it written.
        let steps = [part(2, 3, 1), part(1, 3, 4), glu(2, 3, 1)];
        assert!(dead(x, &steps, &cx));
        // ... then more than that part read.
        assert!(!dead(x, &[part(2, 3, 1), glu(1, 3, 4)], &cx));
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
                parts: 2,
                keep: true,
            }),
        };
        let kept = |s: &Step| matches!(s, Step::Add { split: Some(s), .. } if s.keep);
        assert!(kept(&trim(held(), &[glu(2, 4, 5)], &cx)), "read after");
        assert!(!kept(&trim(held(), &[glu(4, 5, 2)], &cx)), "overwritten");
        assert!(!kept(&trim(held(), &[], &cx)), "scratch at the end");
    }
}
