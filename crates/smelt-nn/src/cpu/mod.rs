//! The CPU backend: runs a plan's steps in order on smelt's thread pool,
//! each op's CPU twin (`ops::*::cpu`). Intermediates live in the planned
//! buffers, allocated once per compiled graph.

pub mod gemm;
pub mod lstm;
pub mod map;
pub mod vmath;

use std::ops::Range;

use smelt::backend::cpu::pool::{SharedMut, ThreadPool};

use crate::error::{NnError, Result};
use crate::ops::{Io, Op};
use crate::plan::{Loc, Plan};
use crate::vars::Vars;

/// Per-run values every backend reads: the run counter (Adam's `t`), the
/// dropout seed and each Adam update's step size and bias correction.
#[derive(Clone, Debug, Default)]
pub struct RunState {
    pub step: u32,
    pub seed: u32,
    pub adam: Vec<[f32; 2]>,
}

/// What an op's CPU twin gets besides its tensors.
pub struct Cx<'a> {
    pub pool: &'a mut ThreadPool,
    pub run: &'a RunState,
}

/// Runs `f(start, chunk)` over `out` cut into chunks of `chunk` elements,
/// on the pool's threads.
pub fn par_chunks(
    cx: &mut Cx,
    out: &mut [f32],
    chunk: usize,
    f: &(dyn Fn(usize, &mut [f32]) + Sync),
) {
    let len = out.len();
    let chunk = chunk.max(1);
    let shared = SharedMut::new(out);
    let n_chunks = len.div_ceil(chunk);
    cx.pool.for_each(n_chunks, 1, &|_, r: Range<usize>| {
        for c in r {
            let start = c * chunk;
            let n = chunk.min(len - start);
            // SAFETY: chunks `c` are disjoint and each is handed out once.
            let s = unsafe { shared.slice(start, n) };
            f(start, s);
        }
    });
}

/// Runs `f(i)` for `i` in `0..n` on the pool's threads, `chunk` at a time.
pub fn par_for(cx: &mut Cx, n: usize, chunk: usize, f: &(dyn Fn(usize) + Sync)) {
    cx.pool.for_each(n, chunk, &|_, r: Range<usize>| {
        for i in r {
            f(i);
        }
    });
}

pub struct CpuDevice {
    pub(crate) pool: ThreadPool,
}

impl CpuDevice {
    pub fn new(threads: usize) -> Result<Self> {
        Ok(CpuDevice {
            pool: ThreadPool::new(threads.max(1))?,
        })
    }

    pub fn threads(&self) -> usize {
        self.pool.n_threads()
    }
}

/// A plan's buffers on the CPU.
pub struct CpuExec {
    slots: Vec<Vec<f32>>,
}

impl CpuExec {
    pub fn new(plan: &Plan) -> Self {
        CpuExec {
            slots: plan.slots.iter().map(|&n| vec![0.0; n]).collect(),
        }
    }

    /// Runs every step; `var_ids[k]` is the device variable of the plan's
    /// variable `k`.
    pub fn run(
        &mut self,
        dev: &mut CpuDevice,
        vars: &mut Vars,
        plan: &Plan,
        var_ids: &[usize],
        feeds: &[&[f32]],
        run: &RunState,
    ) -> Result<Vec<Vec<f32>>> {
        for step in &plan.steps {
            if matches!(step.op, Op::Reshape(_)) {
                continue;
            }
            let n_targets = step.op.n_targets();
            // Take the written buffers out, so the read ones can be borrowed.
            let (written, written_shapes): (Vec<Loc>, Vec<Vec<usize>>) = if n_targets > 0 {
                (
                    step.ins[..n_targets].to_vec(),
                    step.shapes.ins[..n_targets].to_vec(),
                )
            } else {
                (step.outs.clone(), step.shapes.outs.clone())
            };
            let mut taken: Vec<Vec<f32>> = written
                .iter()
                .map(|&l| match l {
                    Loc::Slot(s) => std::mem::take(&mut self.slots[s]),
                    Loc::Var(v) => std::mem::take(&mut vars.data[var_ids[v]]),
                    Loc::Feed(_) => Vec::new(),
                })
                .collect();
            if taken.iter().any(|t| t.is_empty()) {
                return Err(NnError::Graph(format!(
                    "{} writes a placeholder or a value it reads",
                    step.op.name()
                )));
            }
            {
                let read = if n_targets > 0 {
                    &step.ins[n_targets..]
                } else {
                    &step.ins[..]
                };
                let read_shapes = if n_targets > 0 {
                    &step.shapes.ins[n_targets..]
                } else {
                    &step.shapes.ins[..]
                };
                let ins: Vec<&[f32]> = read
                    .iter()
                    .zip(read_shapes)
                    .map(|(&l, s)| {
                        let n: usize = s.iter().product();
                        match l {
                            Loc::Slot(k) => &self.slots[k][..n],
                            Loc::Var(v) => &vars.data[var_ids[v]][..n],
                            Loc::Feed(f) => &feeds[f][..n],
                        }
                    })
                    .collect();
                let outs: Vec<&mut [f32]> = taken
                    .iter_mut()
                    .zip(&written_shapes)
                    .map(|(t, s)| &mut t[..s.iter().product::<usize>()])
                    .collect();
                let mut io = Io {
                    ins,
                    outs,
                    shapes: step.shapes.clone(),
                };
                let mut cx = Cx {
                    pool: &mut dev.pool,
                    run,
                };
                step.op.cpu(&mut cx, &mut io);
            }
            for (l, t) in written.iter().zip(taken) {
                match *l {
                    Loc::Slot(s) => self.slots[s] = t,
                    Loc::Var(v) => vars.data[var_ids[v]] = t,
                    Loc::Feed(_) => {}
                }
            }
        }
        Ok(plan
            .outputs
            .iter()
            .map(|(l, shape)| {
                let n: usize = shape.iter().product();
                match *l {
                    Loc::Slot(s) => self.slots[s][..n].to_vec(),
                    Loc::Var(v) => vars.data[var_ids[v]][..n].to_vec(),
                    Loc::Feed(f) => feeds[f][..n].to_vec(),
                }
            })
            .collect())
    }
}
