//! 2-D convolution over `[N, C, H, W]` images with weights
//! `[O, C/groups, KH, KW]`: stride, padding, dilation and groups (depthwise
//! is `groups = C`). Three kernels make the forward pass, the transposed
//! convolution (also the gradient of the input) and the gradient of the
//! weights:
//!
//! - forward: `y[n,o,i,j] = Σ_{c,a,b} x[n, g·C/g + c, i·s − p + a·d, j·s − p + b·d] · w[o,c,a,b]`,
//!   summed over `(c, a, b)` in that order;
//! - transposed: `x̂[n, g·C/g + c, u, v] = Σ_{a,b} (Σ_o y[n,o,i,j] · w[o,c,a,b])`
//!   over the taps `(a, b)` in order whose `(i, j)` exist, each tap's sum
//!   over the group's `o` in order;
//! - weight partials: `w̃[n,o,c,a,b] = Σ_{i,j} y[n,o,i,j] · x[…]` per sample,
//!   in order of `(i, j)`; `SumTo` then adds the samples in order.
//!
//! Terms outside the image are zero (the CPU multiplies them, the GPU skips
//! them: the sums are the same).

use crate::cpu::gemm::{View, gemm_serial};
use crate::cpu::{Cx, par_for};
use crate::error::{Result, shape_err};
use crate::gpu::dispatch::{Bind, Dispatch, Kernel, groups_1d};
use crate::graph::{Graph, Shape, Value};
use crate::ops::{Backward, Bcast, Io, Op, Shapes};
use smelt::backend::cpu::pool::SharedMut;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2d {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
}

impl Conv2d {
    pub fn new(kernel: usize) -> Self {
        Conv2d {
            kernel: [kernel; 2],
            stride: [1; 2],
            padding: [0; 2],
            dilation: [1; 2],
            groups: 1,
        }
    }

    /// The output size of a forward convolution along axis `a`, if any.
    pub fn out_len(&self, input: usize, a: usize) -> Option<usize> {
        let span = self.dilation[a] * (self.kernel[a] - 1) + 1;
        let padded = input + 2 * self.padding[a];
        (padded >= span && self.stride[a] > 0).then(|| (padded - span) / self.stride[a] + 1)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvKind {
    /// x `[N, C, H, W]`, w → y `[N, O, OH, OW]`.
    Forward,
    /// y `[N, O, OH, OW]`, w → x̂ `[N, C, H, W]` of this `[H, W]`.
    Transposed { out_hw: [usize; 2] },
    /// x, dy → per-sample weight gradients `[N, O, C/g, KH, KW]`.
    WeightPartials,
}

impl ConvKind {
    pub fn name(&self) -> &'static str {
        match self {
            ConvKind::Forward => "conv2d",
            ConvKind::Transposed { .. } => "conv_transpose2d",
            ConvKind::WeightPartials => "conv2d_weight_grad",
        }
    }
}

/// The sizes of one convolution, in the forward direction's names.
#[derive(Clone, Copy, Debug)]
struct Dims {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    o: usize,
    oh: usize,
    ow: usize,
}

impl Conv2d {
    fn dims(&self, kind: &ConvKind, s: &[&[usize]]) -> Result<Dims> {
        let name = kind.name();
        let (Some(a), Some(b)) = (four(s[0]), four(s.get(1).copied().unwrap_or(&[]))) else {
            return shape_err(name, format!("wants 4-D inputs, got {:?}", s));
        };
        if self.groups == 0
            || self.kernel.contains(&0)
            || self.stride.contains(&0)
            || self.dilation.contains(&0)
        {
            return shape_err(name, format!("{self:?} has a zero size"));
        }
        let g = self.groups;
        let d = match kind {
            ConvKind::Forward => {
                let [n, c, h, w] = a;
                let [o, cg, kh, kw] = b;
                if cg * g != c || o % g != 0 || [kh, kw] != self.kernel {
                    return shape_err(
                        name,
                        format!("input {a:?} and weight {b:?} do not fit {self:?}"),
                    );
                }
                let (Some(oh), Some(ow)) = (self.out_len(h, 0), self.out_len(w, 1)) else {
                    return shape_err(
                        name,
                        format!("the kernel is larger than the padded input {a:?}"),
                    );
                };
                Dims {
                    n,
                    c,
                    h,
                    w,
                    o,
                    oh,
                    ow,
                }
            }
            ConvKind::Transposed { out_hw } => {
                let [n, o, oh, ow] = a;
                let [wo, cg, kh, kw] = b;
                let [h, w] = *out_hw;
                if wo != o || o % g != 0 || [kh, kw] != self.kernel {
                    return shape_err(
                        name,
                        format!("input {a:?} and weight {b:?} do not fit {self:?}"),
                    );
                }
                if self.out_len(h, 0) != Some(oh) || self.out_len(w, 1) != Some(ow) {
                    return shape_err(
                        name,
                        format!("output {out_hw:?} does not convolve back to {:?}", [oh, ow]),
                    );
                }
                Dims {
                    n,
                    c: cg * g,
                    h,
                    w,
                    o,
                    oh,
                    ow,
                }
            }
            ConvKind::WeightPartials => {
                let [n, c, h, w] = a;
                let [n2, o, oh, ow] = b;
                if n2 != n
                    || c % g != 0
                    || o % g != 0
                    || self.out_len(h, 0) != Some(oh)
                    || self.out_len(w, 1) != Some(ow)
                {
                    return shape_err(
                        name,
                        format!("input {a:?} and gradient {b:?} do not fit {self:?}"),
                    );
                }
                Dims {
                    n,
                    c,
                    h,
                    w,
                    o,
                    oh,
                    ow,
                }
            }
        };
        Ok(d)
    }

    pub fn infer(&self, kind: &ConvKind, s: &[&[usize]]) -> Result<Vec<Shape>> {
        let d = self.dims(kind, s)?;
        let [kh, kw] = self.kernel;
        Ok(vec![match kind {
            ConvKind::Forward => vec![d.n, d.o, d.oh, d.ow],
            ConvKind::Transposed { .. } => vec![d.n, d.c, d.h, d.w],
            ConvKind::WeightPartials => vec![d.n, d.o, d.c / self.groups, kh, kw],
        }])
    }

    pub fn backward(
        &self,
        kind: &ConvKind,
        g: &mut Graph,
        b: &Backward,
    ) -> Result<Vec<Option<Value>>> {
        let Some(dy) = b.grads[0] else {
            return Ok(vec![None, None]);
        };
        let (x, w) = (b.inputs[0], b.inputs[1]);
        let w_shape = g.shape(w).to_vec();
        let weight_grad = |g: &mut Graph, image: Value, grad: Value| -> Result<Value> {
            let parts = g.node1(Op::Conv(ConvKind::WeightPartials, *self), &[image, grad])?;
            let per_sample: usize = w_shape.iter().product();
            let sum = g.sum_to(
                parts,
                Bcast {
                    inner: 1,
                    count: per_sample,
                },
            )?;
            g.reshape(sum, &w_shape)
        };
        match kind {
            ConvKind::Forward => {
                let xs = g.shape(x).to_vec();
                let dx = if b.needs[0] {
                    Some(g.node1(
                        Op::Conv(
                            ConvKind::Transposed {
                                out_hw: [xs[2], xs[3]],
                            },
                            *self,
                        ),
                        &[dy, w],
                    )?)
                } else {
                    None
                };
                let dw = if b.needs[1] {
                    Some(weight_grad(g, x, dy)?)
                } else {
                    None
                };
                Ok(vec![dx, dw])
            }
            ConvKind::Transposed { .. } => {
                let dx = if b.needs[0] {
                    Some(g.node1(Op::Conv(ConvKind::Forward, *self), &[dy, w])?)
                } else {
                    None
                };
                let dw = if b.needs[1] {
                    Some(weight_grad(g, dy, x)?)
                } else {
                    None
                };
                Ok(vec![dx, dw])
            }
            ConvKind::WeightPartials => Err(crate::error::NnError::Graph(
                "conv2d_weight_grad has no gradient".into(),
            )),
        }
    }

    pub fn cpu(&self, kind: &ConvKind, cx: &mut Cx, io: &mut Io) {
        let ins: Vec<&[usize]> = io.shapes.ins.iter().map(|s| s.as_slice()).collect();
        let d = self.dims(kind, &ins).expect("checked shapes");
        let g = self.groups;
        let (cg, og) = (d.c / g, d.o / g);
        let [kh, kw] = self.kernel;
        let kk = cg * kh * kw;
        let hw_out = d.oh * d.ow;
        let (a, b) = (io.ins[0], io.ins[1]);
        let out_per_sample = io.outs[0].len() / d.n;
        let out = SharedMut::new(&mut *io.outs[0]);
        let this = *self;
        par_for(cx, d.n, 1, &|n| {
            // SAFETY: each sample's output is written by one task.
            let y = unsafe { out.slice(n * out_per_sample, out_per_sample) };
            let mut col = vec![0f32; kk * hw_out];
            for gi in 0..g {
                match kind {
                    ConvKind::Forward => {
                        let x = &a[(n * d.c + gi * cg) * d.h * d.w..][..cg * d.h * d.w];
                        this.im2col(x, &d, cg, &mut col);
                        let wg = &b[gi * og * kk..][..og * kk];
                        let yg = &mut y[gi * og * hw_out..][..og * hw_out];
                        gemm_serial(
                            og,
                            hw_out,
                            kk,
                            View::new(wg, kk, og, false),
                            View::new(&col, hw_out, kk, false),
                            yg,
                        );
                    }
                    ConvKind::Transposed { .. } => {
                        let yin = &a[(n * d.o + gi * og) * hw_out..][..og * hw_out];
                        let wg = &b[gi * og * kk..][..og * kk];
                        gemm_serial(
                            kk,
                            hw_out,
                            og,
                            View::new(wg, og, kk, true),
                            View::new(yin, hw_out, og, false),
                            &mut col,
                        );
                        let xg = &mut y[gi * cg * d.h * d.w..][..cg * d.h * d.w];
                        this.col2im(&col, &d, cg, xg);
                    }
                    ConvKind::WeightPartials => {
                        let x = &a[(n * d.c + gi * cg) * d.h * d.w..][..cg * d.h * d.w];
                        this.im2col(x, &d, cg, &mut col);
                        let dy = &b[(n * d.o + gi * og) * hw_out..][..og * hw_out];
                        let part = &mut y[gi * og * kk..][..og * kk];
                        gemm_serial(
                            og,
                            kk,
                            hw_out,
                            View::new(dy, hw_out, og, false),
                            View::new(&col, kk, hw_out, true),
                            part,
                        );
                    }
                }
            }
        });
    }

    /// `col[(c, a, b), (i, j)]` = the input tap, zero outside the image.
    fn im2col(&self, x: &[f32], d: &Dims, cg: usize, col: &mut [f32]) {
        let [kh, kw] = self.kernel;
        let mut r = 0;
        for c in 0..cg {
            for ka in 0..kh {
                for kb in 0..kw {
                    let row = &mut col[r * d.oh * d.ow..][..d.oh * d.ow];
                    for i in 0..d.oh {
                        let u = (i * self.stride[0] + ka * self.dilation[0]) as isize
                            - self.padding[0] as isize;
                        for j in 0..d.ow {
                            let v = (j * self.stride[1] + kb * self.dilation[1]) as isize
                                - self.padding[1] as isize;
                            row[i * d.ow + j] =
                                if u >= 0 && (u as usize) < d.h && v >= 0 && (v as usize) < d.w {
                                    x[(c * d.h + u as usize) * d.w + v as usize]
                                } else {
                                    0.0
                                };
                        }
                    }
                    r += 1;
                }
            }
        }
    }

    /// Adds `col`'s taps back into the image (zeroed first), tap by tap in
    /// order of `(a, b)` for every pixel.
    fn col2im(&self, col: &[f32], d: &Dims, cg: usize, x: &mut [f32]) {
        let [kh, kw] = self.kernel;
        x.fill(0.0);
        let mut r = 0;
        for c in 0..cg {
            for ka in 0..kh {
                for kb in 0..kw {
                    let row = &col[r * d.oh * d.ow..][..d.oh * d.ow];
                    for i in 0..d.oh {
                        let u = (i * self.stride[0] + ka * self.dilation[0]) as isize
                            - self.padding[0] as isize;
                        if u < 0 || u as usize >= d.h {
                            continue;
                        }
                        for j in 0..d.ow {
                            let v = (j * self.stride[1] + kb * self.dilation[1]) as isize
                                - self.padding[1] as isize;
                            if v >= 0 && (v as usize) < d.w {
                                x[(c * d.h + u as usize) * d.w + v as usize] += row[i * d.ow + j];
                            }
                        }
                    }
                    r += 1;
                }
            }
        }
    }

    pub fn gpu(&self, kind: &ConvKind, s: &Shapes) -> Vec<Dispatch> {
        let ins: Vec<&[usize]> = s.ins.iter().map(|s| s.as_slice()).collect();
        let d = self.dims(kind, &ins).expect("checked shapes");
        let p = ConvParams {
            n: d.n as u32,
            c: d.c as u32,
            h: d.h as u32,
            w: d.w as u32,
            o: d.o as u32,
            oh: d.oh as u32,
            ow: d.ow as u32,
            kh: self.kernel[0] as u32,
            kw: self.kernel[1] as u32,
            stride_h: self.stride[0] as u32,
            stride_w: self.stride[1] as u32,
            pad_h: self.padding[0] as u32,
            pad_w: self.padding[1] as u32,
            dil_h: self.dilation[0] as u32,
            dil_w: self.dilation[1] as u32,
            groups: self.groups as u32,
        };
        let (define, threads) = match kind {
            ConvKind::Forward => ("FORWARD", d.n * d.o * d.oh * d.ow),
            ConvKind::Transposed { .. } => ("TRANSPOSED", d.n * d.c * d.h * d.w),
            ConvKind::WeightPartials => (
                "WEIGHT",
                d.n * d.o * (d.c / self.groups) * self.kernel[0] * self.kernel[1],
            ),
        };
        vec![Dispatch::new(
            Kernel::new("conv", &[define]),
            bytemuck::bytes_of(&p),
            vec![Bind::In(0), Bind::In(1), Bind::Out(0)],
            groups_1d(threads, 64),
        )]
    }
}

fn four(s: &[usize]) -> Option<[usize; 4]> {
    s.try_into().ok()
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ConvParams {
    pub n: u32,
    pub c: u32,
    pub h: u32,
    pub w: u32,
    pub o: u32,
    pub oh: u32,
    pub ow: u32,
    pub kh: u32,
    pub kw: u32,
    pub stride_h: u32,
    pub stride_w: u32,
    pub pad_h: u32,
    pub pad_w: u32,
    pub dil_h: u32,
    pub dil_w: u32,
    pub groups: u32,
}

pub const CONV_FIELDS: &[&str] = &[
    "n", "c", "h", "w", "o", "oh", "ow", "kh", "kw", "stride_h", "stride_w", "pad_h", "pad_w",
    "dil_h", "dil_w", "groups",
];
