//! Updates that write variables in place, run after every other node of a
//! step: SGD with momentum, Adam/AdamW (PyTorch's single-tensor
//! formulas), and the exponential moving average of batch norm's running
//! statistics.

use smelt::backend::cpu::pool::SharedMut;

use crate::cpu::{Cx, par_chunks};
use crate::error::{Result, shape_err};
use crate::gpu::dispatch::{Bind, Dispatch, Kernel, groups_1d};
use crate::graph::Shape;
use crate::ops::{Io, Shapes};

/// `v = μ·v + (g + λ·p)`; `p -= lr·(nesterov ? g + λp + μ·v : v)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sgd {
    pub lr: f32,
    pub momentum: f32,
    pub weight_decay: f32,
    pub nesterov: bool,
}

/// Adam (`decoupled`: AdamW). `slot` is the update's run-state entry
/// (step size `lr / (1 − β1ᵗ)` and `√(1 − β2ᵗ)`), set when compiled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Adam {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    pub decoupled: bool,
    pub slot: usize,
}

impl Adam {
    pub fn new(lr: f32) -> Self {
        Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled: false,
            slot: 0,
        }
    }

    /// The run-state words of run `t` (from 1): step size, `√(1 − β2ᵗ)`.
    pub fn run_words(&self, t: u32) -> [f32; 2] {
        let t = t.max(1) as i32;
        let bc1 = 1.0 - (self.beta1 as f64).powi(t);
        let bc2 = 1.0 - (self.beta2 as f64).powi(t);
        [(self.lr as f64 / bc1) as f32, bc2.sqrt() as f32]
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Update {
    /// Targets: parameter, velocity. Source: gradient.
    Sgd(Sgd),
    /// Targets: parameter, first moment, second moment. Source: gradient.
    Adam(Adam),
    /// `r = (1 − m)·r + m·x`. Target: r. Source: x.
    Ema { momentum: f32 },
}

impl Update {
    pub fn name(&self) -> &'static str {
        match self {
            Update::Sgd(_) => "sgd",
            Update::Adam(a) if a.decoupled => "adamw",
            Update::Adam(_) => "adam",
            Update::Ema { .. } => "ema",
        }
    }

    pub fn n_targets(&self) -> usize {
        match self {
            Update::Sgd(_) => 2,
            Update::Adam(_) => 3,
            Update::Ema { .. } => 1,
        }
    }

    pub fn infer(&self, s: &[&[usize]]) -> Result<Vec<Shape>> {
        let want = self.n_targets() + 1;
        if s.len() != want {
            return shape_err(self.name(), format!("{} inputs, not {want}", s.len()));
        }
        let n: usize = s[0].iter().product();
        if s.iter().any(|x| x.iter().product::<usize>() != n) {
            return shape_err(self.name(), format!("shapes differ: {s:?}"));
        }
        Ok(Vec::new())
    }

    pub fn cpu(&self, cx: &mut Cx, io: &mut Io) {
        let src = io.ins[0];
        let run = cx.run.clone();
        match *self {
            Update::Sgd(o) => {
                let (p, rest) = io.outs.split_at_mut(1);
                let vel_ptr = SharedMut::new(&mut *rest[0]);
                par_chunks(cx, &mut *p[0], 1024, &|start, p| {
                    // SAFETY: each chunk writes its own velocity range.
                    let v = unsafe { vel_ptr.slice(start, p.len()) };
                    for (k, (pk, vk)) in p.iter_mut().zip(v.iter_mut()).enumerate() {
                        let mut d = src[start + k];
                        if o.weight_decay != 0.0 {
                            d += o.weight_decay * *pk;
                        }
                        *vk = o.momentum * *vk + d;
                        let step = if o.nesterov {
                            d + o.momentum * *vk
                        } else {
                            *vk
                        };
                        *pk -= o.lr * step;
                    }
                });
            }
            Update::Adam(o) => {
                let [step_size, bc2_sqrt] = run.adam[o.slot];
                let w1 = (1.0 - o.beta1 as f64) as f32;
                let w2 = (1.0 - o.beta2 as f64) as f32;
                let (p, rest) = io.outs.split_at_mut(1);
                let (m, v) = rest.split_at_mut(1);
                let m = SharedMut::new(&mut *m[0]);
                let v = SharedMut::new(&mut *v[0]);
                par_chunks(cx, &mut *p[0], 1024, &|start, p| {
                    // SAFETY: each chunk writes its own moment ranges.
                    let (m, v) = unsafe { (m.slice(start, p.len()), v.slice(start, p.len())) };
                    let src = &src[start..][..p.len()];
                    let c = AdamTerms {
                        w1,
                        w2,
                        beta2: o.beta2,
                        eps: o.eps,
                        step_size,
                        bc2_sqrt,
                    };
                    match (o.weight_decay != 0.0, o.decoupled) {
                        (true, true) => {
                            let keep = 1.0 - o.lr * o.weight_decay;
                            p.iter_mut().for_each(|pk| *pk *= keep);
                            adam_update(&c, None, p, m, v, src);
                        }
                        (true, false) => adam_update(&c, Some(o.weight_decay), p, m, v, src),
                        _ => adam_update(&c, None, p, m, v, src),
                    }
                });
            }
            Update::Ema { momentum } => {
                par_chunks(cx, &mut *io.outs[0], 1024, &|start, r| {
                    for (k, rk) in r.iter_mut().enumerate() {
                        *rk = (1.0 - momentum) * *rk + momentum * src[start + k];
                    }
                });
            }
        }
    }

    pub fn gpu(&self, s: &Shapes) -> Vec<Dispatch> {
        let n: usize = s.ins[0].iter().product();
        let mut p = OptimParams {
            n: n as u32,
            ..Default::default()
        };
        let (define, binds) = match *self {
            Update::Sgd(o) => {
                p.lr = o.lr;
                p.momentum = o.momentum;
                p.weight_decay = o.weight_decay;
                p.nesterov = o.nesterov as u32;
                ("SGD", vec![Bind::In(0), Bind::In(1), Bind::In(2)])
            }
            Update::Adam(o) => {
                p.lr = o.lr;
                p.beta1_weight = (1.0 - o.beta1 as f64) as f32;
                p.beta2 = o.beta2;
                p.beta2_weight = (1.0 - o.beta2 as f64) as f32;
                p.eps = o.eps;
                p.weight_decay = o.weight_decay;
                p.decoupled = o.decoupled as u32;
                p.slot = o.slot as u32;
                (
                    "ADAM",
                    vec![
                        Bind::In(0),
                        Bind::In(1),
                        Bind::In(2),
                        Bind::In(3),
                        Bind::Run,
                    ],
                )
            }
            Update::Ema { momentum } => {
                p.momentum = momentum;
                ("EMA", vec![Bind::In(0), Bind::In(1)])
            }
        };
        vec![Dispatch::new(
            Kernel::new("optim", &[define]),
            bytemuck::bytes_of(&p),
            binds,
            groups_1d(n, 256),
        )]
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct OptimParams {
    pub n: u32,
    pub lr: f32,
    pub momentum: f32,
    pub weight_decay: f32,
    pub beta1_weight: f32,
    pub beta2: f32,
    pub beta2_weight: f32,
    pub eps: f32,
    pub nesterov: u32,
    pub decoupled: u32,
    pub slot: u32,
    pub pad: u32,
}

pub const OPTIM_FIELDS: &[&str] = &[
    "n",
    "lr",
    "momentum",
    "weight_decay",
    "beta1_weight",
    "beta2",
    "beta2_weight",
    "eps",
    "nesterov",
    "decoupled",
    "slot",
    "pad",
];

/// Adam's per-run constants.
struct AdamTerms {
    w1: f32,
    w2: f32,
    beta2: f32,
    eps: f32,
    step_size: f32,
    bc2_sqrt: f32,
}

/// `m += w1·(g − m)`, `v = v·β₂ + w2·g²`, `p −= step · m / (√v / bc2 + ε)`
/// with `g = grad (+ decay·p`, a coupled decay). The decay's branch is
/// taken once, so that each loop has none and vectorizes.
#[inline(always)]
fn adam_update(
    c: &AdamTerms,
    coupled_decay: Option<f32>,
    p: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    grad: &[f32],
) {
    let terms = p.iter_mut().zip(m.iter_mut()).zip(v.iter_mut()).zip(grad);
    if let Some(decay) = coupled_decay {
        for (((pk, mk), vk), &gk) in terms {
            adam_one(c, gk + decay * *pk, pk, mk, vk);
        }
    } else {
        for (((pk, mk), vk), &gk) in terms {
            adam_one(c, gk, pk, mk, vk);
        }
    }
}

#[inline(always)]
fn adam_one(c: &AdamTerms, g: f32, p: &mut f32, m: &mut f32, v: &mut f32) {
    *m += c.w1 * (g - *m);
    *v = *v * c.beta2 + c.w2 * g * g;
    let denom = v.sqrt() / c.bc2_sqrt + c.eps;
    *p += -c.step_size * (*m / denom);
}
