//! Max and average pooling over `[N, C, H, W]` (global average pooling is
//! `SumTo` and a scale). Windows of `kernel`, moved by `stride`, over the
//! image padded by `padding` (padding is never the maximum; the average
//! counts it when `count_include_pad`, as PyTorch's default does).
//!
//! - max: the first largest tap in order `(a, b)`; its index `u·W + v` is a
//!   second output, which the gradient reads;
//! - average: the window's taps summed in order, divided by the count;
//! - gradients: each input pixel sums its windows' contributions in window
//!   order (row-major `(i, j)`).

use crate::cpu::{Cx, par_for};
use crate::error::{Result, shape_err};
use crate::gpu::dispatch::{Bind, Dispatch, Kernel, groups_1d};
use crate::graph::{Graph, Shape, Value};
use crate::ops::{Backward, Io, Op, Shapes};
use smelt::backend::cpu::pool::SharedMut;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2d {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub count_include_pad: bool,
    /// The input's `[H, W]`: set for the gradients, which make it.
    pub input_hw: [usize; 2],
}

impl Pool2d {
    pub fn new(kernel: usize, stride: usize) -> Self {
        Pool2d {
            kernel: [kernel; 2],
            stride: [stride; 2],
            padding: [0; 2],
            count_include_pad: true,
            input_hw: [0; 2],
        }
    }

    fn out_len(&self, input: usize, a: usize) -> Option<usize> {
        let padded = input + 2 * self.padding[a];
        (padded >= self.kernel[a] && self.stride[a] > 0 && self.padding[a] * 2 <= self.kernel[a])
            .then(|| (padded - self.kernel[a]) / self.stride[a] + 1)
    }

    fn check(&self, name: &'static str, x: &[usize]) -> Result<[usize; 6]> {
        let Ok([n, c, h, w]) = <[usize; 4]>::try_from(x) else {
            return shape_err(name, format!("wants [N, C, H, W], got {x:?}"));
        };
        if self.kernel.contains(&0) || self.stride.contains(&0) {
            return shape_err(name, format!("{self:?} has a zero size"));
        }
        match (self.out_len(h, 0), self.out_len(w, 1)) {
            (Some(oh), Some(ow)) => Ok([n, c, h, w, oh, ow]),
            _ => shape_err(
                name,
                format!("{self:?} does not fit {x:?} (padding at most half the window)"),
            ),
        }
    }

    pub fn infer_max(&self, s: &[&[usize]]) -> Result<Vec<Shape>> {
        let [n, c, _, _, oh, ow] = self.check("max_pool2d", s[0])?;
        Ok(vec![vec![n, c, oh, ow], vec![n, c, oh, ow]])
    }

    pub fn infer_avg(&self, s: &[&[usize]]) -> Result<Vec<Shape>> {
        let [n, c, _, _, oh, ow] = self.check("avg_pool2d", s[0])?;
        Ok(vec![vec![n, c, oh, ow]])
    }

    fn infer_grad(&self, name: &'static str, s: &[&[usize]]) -> Result<Vec<Shape>> {
        let [n, c, ..] = s[0] else {
            return shape_err(name, format!("wants [N, C, OH, OW], got {:?}", s[0]));
        };
        let x = [*n, *c, self.input_hw[0], self.input_hw[1]];
        let [.., oh, ow] = self.check(name, &x)?;
        if s.iter().any(|t| *t != [*n, *c, oh, ow]) {
            return shape_err(name, format!("{s:?} do not pool {x:?}"));
        }
        Ok(vec![x.to_vec()])
    }

    pub fn infer_max_grad(&self, s: &[&[usize]]) -> Result<Vec<Shape>> {
        self.infer_grad("max_pool2d_grad", s)
    }

    pub fn infer_avg_grad(&self, s: &[&[usize]]) -> Result<Vec<Shape>> {
        self.infer_grad("avg_pool2d_grad", s)
    }

    fn with_input(&self, g: &Graph, x: Value) -> Pool2d {
        let s = g.shape(x);
        Pool2d {
            input_hw: [s[2], s[3]],
            ..*self
        }
    }

    pub fn backward_max(&self, g: &mut Graph, b: &Backward) -> Result<Vec<Option<Value>>> {
        let Some(dy) = b.grads[0] else {
            return Ok(vec![None]);
        };
        let p = self.with_input(g, b.inputs[0]);
        Ok(vec![Some(
            g.node1(Op::MaxPoolGrad(p), &[dy, b.outputs[1]])?,
        )])
    }

    pub fn backward_avg(&self, g: &mut Graph, b: &Backward) -> Result<Vec<Option<Value>>> {
        let Some(dy) = b.grads[0] else {
            return Ok(vec![None]);
        };
        let p = self.with_input(g, b.inputs[0]);
        Ok(vec![Some(g.node1(Op::AvgPoolGrad(p), &[dy])?)])
    }

    /// The taps of window `(i, j)` in order: `(u, v)` inside the image.
    fn taps(
        &self,
        i: usize,
        j: usize,
        h: usize,
        w: usize,
    ) -> impl Iterator<Item = (usize, usize)> + '_ {
        let (u0, v0) = (
            (i * self.stride[0]) as isize - self.padding[0] as isize,
            (j * self.stride[1]) as isize - self.padding[1] as isize,
        );
        (0..self.kernel[0]).flat_map(move |a| {
            (0..self.kernel[1]).filter_map(move |b| {
                let (u, v) = (u0 + a as isize, v0 + b as isize);
                (u >= 0 && (u as usize) < h && v >= 0 && (v as usize) < w)
                    .then_some((u as usize, v as usize))
            })
        })
    }

    fn count(&self, i: usize, j: usize, h: usize, w: usize) -> f32 {
        if self.count_include_pad {
            // Taps in the padding count; taps beyond it (a last window that
            // overhangs) do not, as in PyTorch.
            let span = |o: usize, a: usize, len: usize| {
                let start = (o * self.stride[a]) as isize - self.padding[a] as isize;
                let end = (start + self.kernel[a] as isize).min((len + self.padding[a]) as isize);
                (end - start) as f32
            };
            span(i, 0, h) * span(j, 1, w)
        } else {
            self.taps(i, j, h, w).count() as f32
        }
    }

    pub fn cpu_max(&self, cx: &mut Cx, io: &mut Io) {
        let [n, c, h, w, oh, ow] = self
            .check("max_pool2d", &io.shapes.ins[0])
            .expect("checked");
        let x = io.ins[0];
        let (ys, rest) = io.outs.split_at_mut(1);
        let y = SharedMut::new(&mut *ys[0]);
        let arg = SharedMut::new(&mut *rest[0]);
        par_for(cx, n * c, 4, &|plane| {
            let xp = &x[plane * h * w..][..h * w];
            // SAFETY: each plane is written by one task.
            let (yp, ap) = unsafe {
                (
                    y.slice(plane * oh * ow, oh * ow),
                    arg.slice(plane * oh * ow, oh * ow),
                )
            };
            for i in 0..oh {
                for j in 0..ow {
                    let mut best = f32::NEG_INFINITY;
                    let mut at = -1.0;
                    for (u, v) in self.taps(i, j, h, w) {
                        let val = xp[u * w + v];
                        if val > best || at < 0.0 {
                            best = val;
                            at = (u * w + v) as f32;
                        }
                    }
                    yp[i * ow + j] = best;
                    ap[i * ow + j] = at;
                }
            }
        });
    }

    pub fn cpu_avg(&self, cx: &mut Cx, io: &mut Io) {
        let [n, c, h, w, oh, ow] = self
            .check("avg_pool2d", &io.shapes.ins[0])
            .expect("checked");
        let x = io.ins[0];
        let y = SharedMut::new(&mut *io.outs[0]);
        par_for(cx, n * c, 4, &|plane| {
            let xp = &x[plane * h * w..][..h * w];
            // SAFETY: each plane is written by one task.
            let yp = unsafe { y.slice(plane * oh * ow, oh * ow) };
            for i in 0..oh {
                for j in 0..ow {
                    let mut sum = 0.0f32;
                    for (u, v) in self.taps(i, j, h, w) {
                        sum += xp[u * w + v];
                    }
                    yp[i * ow + j] = sum / self.count(i, j, h, w);
                }
            }
        });
    }

    pub fn cpu_max_grad(&self, cx: &mut Cx, io: &mut Io) {
        let [n, c, h, w] = <[usize; 4]>::try_from(io.shapes.outs[0].as_slice()).expect("4-D");
        let [.., oh, ow] = self
            .check("max_pool2d_grad", &io.shapes.outs[0])
            .expect("checked");
        let (dy, arg) = (io.ins[0], io.ins[1]);
        let dx = SharedMut::new(&mut *io.outs[0]);
        par_for(cx, n * c, 4, &|plane| {
            // SAFETY: each plane is written by one task.
            let d = unsafe { dx.slice(plane * h * w, h * w) };
            d.fill(0.0);
            for k in 0..oh * ow {
                d[arg[plane * oh * ow + k] as usize] += dy[plane * oh * ow + k];
            }
        });
    }

    pub fn cpu_avg_grad(&self, cx: &mut Cx, io: &mut Io) {
        let [n, c, h, w] = <[usize; 4]>::try_from(io.shapes.outs[0].as_slice()).expect("4-D");
        let [.., oh, ow] = self
            .check("avg_pool2d_grad", &io.shapes.outs[0])
            .expect("checked");
        let dy = io.ins[0];
        let dx = SharedMut::new(&mut *io.outs[0]);
        par_for(cx, n * c, 4, &|plane| {
            // SAFETY: each plane is written by one task.
            let d = unsafe { dx.slice(plane * h * w, h * w) };
            d.fill(0.0);
            for i in 0..oh {
                for j in 0..ow {
                    let share = dy[plane * oh * ow + i * ow + j] / self.count(i, j, h, w);
                    for (u, v) in self.taps(i, j, h, w) {
                        d[u * w + v] += share;
                    }
                }
            }
        });
    }

    pub fn gpu(&self, kind: PoolKernel, s: &Shapes) -> Vec<Dispatch> {
        let x = match kind {
            PoolKernel::Max | PoolKernel::Avg => &s.ins[0],
            PoolKernel::MaxGrad | PoolKernel::AvgGrad => &s.outs[0],
        };
        let [n, c, h, w, oh, ow] = self.check("pool", x).expect("checked");
        let p = PoolParams {
            planes: (n * c) as u32,
            h: h as u32,
            w: w as u32,
            oh: oh as u32,
            ow: ow as u32,
            kh: self.kernel[0] as u32,
            kw: self.kernel[1] as u32,
            stride_h: self.stride[0] as u32,
            stride_w: self.stride[1] as u32,
            pad_h: self.padding[0] as u32,
            pad_w: self.padding[1] as u32,
            include_pad: self.count_include_pad as u32,
        };
        let (define, binds, threads) = match kind {
            PoolKernel::Max => (
                "MAX",
                vec![Bind::In(0), Bind::Out(0), Bind::Out(1)],
                n * c * oh * ow,
            ),
            PoolKernel::Avg => ("AVG", vec![Bind::In(0), Bind::Out(0)], n * c * oh * ow),
            PoolKernel::MaxGrad => (
                "MAX_GRAD",
                vec![Bind::In(0), Bind::In(1), Bind::Out(0)],
                n * c * h * w,
            ),
            PoolKernel::AvgGrad => ("AVG_GRAD", vec![Bind::In(0), Bind::Out(0)], n * c * h * w),
        };
        vec![Dispatch::new(
            Kernel::new("pool", &[define]),
            bytemuck::bytes_of(&p),
            binds,
            groups_1d(threads, 64),
        )]
    }
}

#[derive(Clone, Copy, Debug)]
pub enum PoolKernel {
    Max,
    Avg,
    MaxGrad,
    AvgGrad,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PoolParams {
    pub planes: u32,
    pub h: u32,
    pub w: u32,
    pub oh: u32,
    pub ow: u32,
    pub kh: u32,
    pub kw: u32,
    pub stride_h: u32,
    pub stride_w: u32,
    pub pad_h: u32,
    pub pad_w: u32,
    pub include_pad: u32,
}

pub const POOL_FIELDS: &[&str] = &[
    "planes",
    "h",
    "w",
    "oh",
    "ow",
    "kh",
    "kw",
    "stride_h",
    "stride_w",
    "pad_h",
    "pad_w",
    "include_pad",
];
