//! The graph-building API: arithmetic with broadcasting, activations and
//! the layers (convolution, pooling, normalisation, fully connected,
//! recurrent, embedding, dropout, losses), each as one op or a few.
//! Normalisations are maps and `SumTo`s, so autodiff and fusion treat them
//! like any other chain.

use crate::error::{Result, shape_err};
use crate::graph::{Graph, Init, Value, numel};
use crate::ops::matmul::MatMul;
use crate::ops::optim::{Adam, Sgd};
use crate::ops::{Bcast, Binary, Conv2d, ConvKind, Instr, MapOp, Op, Pool2d, Unary, Update};

/// What `Graph::lstm` returns: every step's hidden state `[T, B, H]` and
/// the cell states (`cs`, `[T, B, H]`, for carrying the last one on).
#[derive(Clone, Copy, Debug)]
pub struct LstmOut {
    pub hs: Value,
    pub cs: Value,
}

/// Batch norm's tensors: scale and shift (trainable), running mean and
/// variance (kept, not trained).
#[derive(Clone, Copy, Debug)]
pub struct BatchNorm {
    pub gamma: Value,
    pub beta: Value,
    pub running_mean: Value,
    pub running_var: Value,
    pub eps: f32,
    pub momentum: f32,
}

impl Graph {
    // ---- elementwise ----

    /// Adds a map node.
    pub fn map(&mut self, m: MapOp, inputs: &[Value]) -> Result<Value> {
        self.node1(Op::Map(m), inputs)
    }

    /// A tensor of one value.
    pub fn constant(&mut self, shape: &[usize], c: f32) -> Result<Value> {
        self.map(
            MapOp {
                code: vec![Instr::Const(c)],
                bcast: Vec::new(),
                shape: shape.to_vec(),
            },
            &[],
        )
    }

    /// How `x` is read for each element of a tensor of `target` shape:
    /// numpy's rule restricted to one run of matching dimensions (a
    /// per-channel vector, a per-row statistic, a scalar).
    pub fn bcast_to(&self, x: Value, target: &[usize]) -> Result<Bcast> {
        let xs = self.shape(x);
        let n = numel(target);
        if numel(xs) == n {
            return Ok(Bcast::full(n));
        }
        if numel(xs) == 1 {
            return Ok(Bcast { inner: n, count: 1 });
        }
        if xs.len() > target.len() {
            return shape_err("broadcast", format!("{xs:?} to {target:?}"));
        }
        let pad = target.len() - xs.len();
        let dims: Vec<usize> = std::iter::repeat_n(1, pad)
            .chain(xs.iter().copied())
            .collect();
        let used: Vec<usize> = (0..dims.len()).filter(|&i| dims[i] != 1).collect();
        let (first, last) = (used[0], *used.last().unwrap_or(&0));
        if (first..=last).any(|i| dims[i] != target[i]) {
            return shape_err("broadcast", format!("{xs:?} to {target:?}"));
        }
        Ok(Bcast {
            inner: target[last + 1..].iter().product(),
            count: target[first..=last].iter().product(),
        })
    }

    fn binary(&mut self, op: Binary, a: Value, b: Value) -> Result<Value> {
        let (sa, sb) = (self.shape(a).to_vec(), self.shape(b).to_vec());
        let target = if numel(&sa) >= numel(&sb) { sa } else { sb };
        let (ba, bb) = (self.bcast_to(a, &target)?, self.bcast_to(b, &target)?);
        self.map(MapOp::binary(op, ba, bb, &target), &[a, b])
    }

    pub fn add(&mut self, a: Value, b: Value) -> Result<Value> {
        self.binary(Binary::Add, a, b)
    }

    pub fn sub(&mut self, a: Value, b: Value) -> Result<Value> {
        self.binary(Binary::Sub, a, b)
    }

    pub fn mul(&mut self, a: Value, b: Value) -> Result<Value> {
        self.binary(Binary::Mul, a, b)
    }

    pub fn div(&mut self, a: Value, b: Value) -> Result<Value> {
        self.binary(Binary::Div, a, b)
    }

    pub fn scale(&mut self, x: Value, c: f32) -> Result<Value> {
        let s = self.shape(x).to_vec();
        self.map(MapOp::scale(c, &s), &[x])
    }

    pub fn unary(&mut self, u: Unary, x: Value) -> Result<Value> {
        let s = self.shape(x).to_vec();
        self.map(MapOp::unary(u, &s), &[x])
    }

    pub fn relu(&mut self, x: Value) -> Result<Value> {
        self.unary(Unary::Relu, x)
    }

    /// GELU with erf (PyTorch's default).
    pub fn gelu(&mut self, x: Value) -> Result<Value> {
        self.unary(Unary::Gelu, x)
    }

    pub fn silu(&mut self, x: Value) -> Result<Value> {
        self.unary(Unary::Silu, x)
    }

    pub fn sigmoid(&mut self, x: Value) -> Result<Value> {
        self.unary(Unary::Sigmoid, x)
    }

    pub fn tanh(&mut self, x: Value) -> Result<Value> {
        self.unary(Unary::Tanh, x)
    }

    /// Zeroes each element with probability `p` and scales the rest by
    /// `1 / (1 − p)`; a new mask every run (from the run's seed and `salt`).
    pub fn dropout(&mut self, x: Value, p: f32, salt: u32) -> Result<Value> {
        if !(0.0..1.0).contains(&p) {
            return shape_err("dropout", format!("probability {p} is not in [0, 1)"));
        }
        let s = self.shape(x).to_vec();
        let m = MapOp {
            code: vec![
                Instr::Input(0),
                Instr::DropMask {
                    keep: 1.0 - p,
                    salt,
                },
                Instr::Binary(Binary::Mul, 0, 1),
            ],
            bcast: vec![Bcast::full(numel(&s))],
            shape: s,
        };
        self.map(m, &[x])
    }

    // ---- shapes and sums ----

    pub fn reshape(&mut self, x: Value, shape: &[usize]) -> Result<Value> {
        if self.shape(x) == shape {
            return Ok(x);
        }
        self.node1(Op::Reshape(shape.to_vec()), &[x])
    }

    /// `[N, …]` to `[N, rest]`.
    pub fn flatten(&mut self, x: Value) -> Result<Value> {
        let s = self.shape(x).to_vec();
        self.reshape(x, &[s[0], numel(&s[1..])])
    }

    pub fn sum_to(&mut self, x: Value, b: Bcast) -> Result<Value> {
        self.node1(Op::SumTo(b), &[x])
    }

    pub fn mean(&mut self, x: Value) -> Result<Value> {
        let n = numel(self.shape(x));
        let s = self.sum_to(x, Bcast { inner: n, count: 1 })?;
        self.scale(s, 1.0 / n as f32)
    }

    // ---- fully connected ----

    pub fn matmul(&mut self, a: Value, b: Value, trans_a: bool, trans_b: bool) -> Result<Value> {
        self.node1(Op::MatMul(MatMul { trans_a, trans_b }), &[a, b])
    }

    /// `x · wᵀ + b` over the last dimension: x `[…, I]`, w `[O, I]`, b `[O]`.
    pub fn linear(&mut self, x: Value, w: Value, b: Option<Value>) -> Result<Value> {
        let xs = self.shape(x).to_vec();
        let i = *xs.last().unwrap_or(&0);
        let x2 = self.reshape(x, &[numel(&xs) / i.max(1), i])?;
        let mut y = self.matmul(x2, w, false, true)?;
        if let Some(b) = b {
            y = self.add(y, b)?;
        }
        let mut out = xs.clone();
        *out.last_mut().expect("non-empty") = self.shape(y)[1];
        self.reshape(y, &out)
    }

    // ---- convolution and pooling ----

    /// x `[N, C, H, W]`, w `[O, C/groups, KH, KW]`, bias `[O]`.
    pub fn conv2d(&mut self, x: Value, w: Value, b: Option<Value>, c: Conv2d) -> Result<Value> {
        let y = self.node1(Op::Conv(ConvKind::Forward, c), &[x, w])?;
        self.channel_bias(y, b)
    }

    /// x `[N, C_in, H, W]`, w `[C_in, C_out/groups, KH, KW]` (PyTorch's
    /// layout), bias `[C_out]`; `output_padding` as PyTorch's.
    pub fn conv_transpose2d(
        &mut self,
        x: Value,
        w: Value,
        b: Option<Value>,
        c: Conv2d,
        output_padding: [usize; 2],
    ) -> Result<Value> {
        let xs = self.shape(x).to_vec();
        if xs.len() != 4 {
            return shape_err(
                "conv_transpose2d",
                format!("wants [N, C, H, W], got {xs:?}"),
            );
        }
        let size = |a: usize| {
            ((xs[2 + a] - 1) * c.stride[a]
                + c.dilation[a] * (c.kernel[a] - 1)
                + output_padding[a]
                + 1)
            .checked_sub(2 * c.padding[a])
        };
        let (Some(h), Some(w_)) = (size(0), size(1)) else {
            return shape_err("conv_transpose2d", "padding larger than the output");
        };
        if output_padding[0] >= c.stride[0].max(c.dilation[0])
            || output_padding[1] >= c.stride[1].max(c.dilation[1])
        {
            return shape_err(
                "conv_transpose2d",
                "output padding must be smaller than stride or dilation",
            );
        }
        let y = self.node1(
            Op::Conv(ConvKind::Transposed { out_hw: [h, w_] }, c),
            &[x, w],
        )?;
        self.channel_bias(y, b)
    }

    fn channel_bias(&mut self, y: Value, b: Option<Value>) -> Result<Value> {
        let Some(b) = b else { return Ok(y) };
        let ys = self.shape(y).to_vec();
        let bias = Bcast {
            inner: ys[2] * ys[3],
            count: ys[1],
        };
        if numel(self.shape(b)) != ys[1] {
            return shape_err(
                "bias",
                format!("{:?} for {} channels", self.shape(b), ys[1]),
            );
        }
        self.map(
            MapOp::binary(Binary::Add, Bcast::full(numel(&ys)), bias, &ys),
            &[y, b],
        )
    }

    pub fn max_pool2d(&mut self, x: Value, p: Pool2d) -> Result<Value> {
        Ok(self.add_node(Op::MaxPool(p), &[x])?[0])
    }

    pub fn avg_pool2d(&mut self, x: Value, p: Pool2d) -> Result<Value> {
        self.node1(Op::AvgPool(p), &[x])
    }

    /// `[N, C, H, W]` to `[N, C]`.
    pub fn global_avg_pool(&mut self, x: Value) -> Result<Value> {
        let s = self.shape(x).to_vec();
        if s.len() != 4 {
            return shape_err("global_avg_pool", format!("wants [N, C, H, W], got {s:?}"));
        }
        let hw = s[2] * s[3];
        let sum = self.sum_to(
            x,
            Bcast {
                inner: hw,
                count: s[0] * s[1],
            },
        )?;
        let mean = self.scale(sum, 1.0 / hw as f32)?;
        self.reshape(mean, &[s[0], s[1]])
    }

    // ---- normalisation ----

    /// Mean and biased variance over runs of `inner` elements read as
    /// `count` statistics (`Bcast`), and `x` centred.
    fn moments(&mut self, x: Value, b: Bcast) -> Result<(Value, Value, Value)> {
        let xs = self.shape(x).to_vec();
        let per = (numel(&xs) / b.count) as f32;
        let sum = self.sum_to(x, b)?;
        let mean = self.scale(sum, 1.0 / per)?;
        let centred = self.map(
            MapOp::binary(Binary::Sub, Bcast::full(numel(&xs)), b, &xs),
            &[x, mean],
        )?;
        let sq = self.unary(Unary::Square, centred)?;
        let sq_sum = self.sum_to(sq, b)?;
        let var = self.scale(sq_sum, 1.0 / per)?;
        Ok((mean, var, centred))
    }

    /// `centred · rsqrt(var + eps)` (stats read by `stat`), then `· gamma +
    /// beta` (read by `affine`).
    fn normalise(
        &mut self,
        centred: Value,
        var: Value,
        stat: Bcast,
        affine: Option<(Value, Value, Bcast)>,
        eps: f32,
    ) -> Result<Value> {
        let xs = self.shape(centred).to_vec();
        let full = Bcast::full(numel(&xs));
        let mut code = vec![
            Instr::Input(0),
            Instr::Input(1),
            Instr::Const(eps),
            Instr::Binary(Binary::Add, 1, 2),
            Instr::Unary(Unary::Rsqrt, 3),
            Instr::Binary(Binary::Mul, 0, 4),
        ];
        let mut bcast = vec![full, stat];
        let mut inputs = vec![centred, var];
        if let Some((gamma, beta, b)) = affine {
            code.extend([
                Instr::Input(2),
                Instr::Binary(Binary::Mul, 5, 6),
                Instr::Input(3),
                Instr::Binary(Binary::Add, 7, 8),
            ]);
            bcast.extend([b, b]);
            inputs.extend([gamma, beta]);
        }
        self.map(
            MapOp {
                code,
                bcast,
                shape: xs,
            },
            &inputs,
        )
    }

    /// Batch norm's tensors for `channels`, named `{name}.weight`, `.bias`,
    /// `.running_mean`, `.running_var` (PyTorch's names).
    pub fn batch_norm_params(&mut self, name: &str, channels: usize) -> Result<BatchNorm> {
        Ok(BatchNorm {
            gamma: self.parameter(&format!("{name}.weight"), &[channels], Init::Const(1.0))?,
            beta: self.parameter(&format!("{name}.bias"), &[channels], Init::Zeros)?,
            running_mean: self.variable(
                &format!("{name}.running_mean"),
                &[channels],
                Init::Zeros,
                false,
            )?,
            running_var: self.variable(
                &format!("{name}.running_var"),
                &[channels],
                Init::Const(1.0),
                false,
            )?,
            eps: 1e-5,
            momentum: 0.1,
        })
    }

    /// Batch norm over `[N, C]` or `[N, C, H, W]`: in training, the batch's
    /// statistics (and the running ones updated after the step, with the
    /// unbiased variance, as PyTorch); in evaluation, the running ones.
    pub fn batch_norm(&mut self, x: Value, bn: &BatchNorm, train: bool) -> Result<Value> {
        let xs = self.shape(x).to_vec();
        if xs.len() < 2 {
            return shape_err("batch_norm", format!("wants [N, C, …], got {xs:?}"));
        }
        let c = xs[1];
        let stat = Bcast {
            inner: numel(&xs[2..]),
            count: c,
        };
        let affine = Some((bn.gamma, bn.beta, stat));
        if !train {
            let full = Bcast::full(numel(&xs));
            let centred = self.map(
                MapOp::binary(Binary::Sub, full, stat, &xs),
                &[x, bn.running_mean],
            )?;
            return self.normalise(centred, bn.running_var, stat, affine, bn.eps);
        }
        let (mean, var, centred) = self.moments(x, stat)?;
        let m = (numel(&xs) / c) as f32;
        let unbiased = self.scale(var, m / (m - 1.0).max(1.0))?;
        let ema = Update::Ema {
            momentum: bn.momentum,
        };
        self.add_node(Op::Update(ema), &[bn.running_mean, mean])?;
        self.add_node(Op::Update(ema), &[bn.running_var, unbiased])?;
        self.normalise(centred, var, stat, affine, bn.eps)
    }

    /// Layer norm over the last dimension; gamma and beta `[D]`.
    pub fn layer_norm(&mut self, x: Value, gamma: Value, beta: Value, eps: f32) -> Result<Value> {
        let xs = self.shape(x).to_vec();
        let d = *xs.last().unwrap_or(&1);
        let stat = Bcast {
            inner: d,
            count: numel(&xs) / d,
        };
        let (_, var, centred) = self.moments(x, stat)?;
        let affine = Some((gamma, beta, Bcast { inner: 1, count: d }));
        self.normalise(centred, var, stat, affine, eps)
    }

    /// Group norm over `[N, C, …]` in `groups` groups of channels; gamma
    /// and beta `[C]`.
    pub fn group_norm(
        &mut self,
        x: Value,
        groups: usize,
        gamma: Value,
        beta: Value,
        eps: f32,
    ) -> Result<Value> {
        let xs = self.shape(x).to_vec();
        if xs.len() < 2 || groups == 0 || !xs[1].is_multiple_of(groups) {
            return shape_err("group_norm", format!("{groups} groups of {xs:?}"));
        }
        let spatial = numel(&xs[2..]);
        let stat = Bcast {
            inner: xs[1] / groups * spatial,
            count: xs[0] * groups,
        };
        let (_, var, centred) = self.moments(x, stat)?;
        let affine = Some((
            gamma,
            beta,
            Bcast {
                inner: spatial,
                count: xs[1],
            },
        ));
        self.normalise(centred, var, stat, affine, eps)
    }

    // ---- softmax and losses ----

    pub fn softmax(&mut self, x: Value) -> Result<Value> {
        self.node1(Op::Softmax, &[x])
    }

    /// Mean softmax cross-entropy of logits `[N, C]` against labels `[N]`.
    pub fn cross_entropy(&mut self, logits: Value, labels: Value) -> Result<Value> {
        let rows = self.node1(Op::CrossEntropy, &[logits, labels])?;
        self.mean(rows)
    }

    /// Mean squared error.
    pub fn mse(&mut self, a: Value, b: Value) -> Result<Value> {
        if self.shape(a) != self.shape(b) {
            return shape_err(
                "mse",
                format!("{:?} and {:?}", self.shape(a), self.shape(b)),
            );
        }
        let d = self.sub(a, b)?;
        let sq = self.unary(Unary::Square, d)?;
        self.mean(sq)
    }

    // ---- embedding and recurrent layers ----

    /// Rows of `table` `[V, D]` for `ids` (an index placeholder).
    pub fn embedding(&mut self, table: Value, ids: Value) -> Result<Value> {
        self.node1(Op::Gather, &[table, ids])
    }

    /// An LSTM over x `[T, B, I]`: w_ih `[4H, I]`, w_hh `[4H, H]`, bias
    /// `[4H]` (PyTorch's two biases summed), states h0, c0 `[B, H]`.
    pub fn lstm(
        &mut self,
        x: Value,
        w_ih: Value,
        w_hh: Value,
        bias: Value,
        h0: Value,
        c0: Value,
    ) -> Result<LstmOut> {
        // The bias is added in the op, as each step reads its projection.
        let xp = self.linear(x, w_ih, None)?;
        let out = self.add_node(Op::Lstm, &[xp, w_hh, bias, h0, c0])?;
        Ok(LstmOut {
            hs: out[0],
            cs: out[1],
        })
    }

    /// A GRU over x `[T, B, I]`: w_ih `[3H, I]`, w_hh `[3H, H]`, biases
    /// `[3H]` (PyTorch's `b_ih`, `b_hh`), h0 `[B, H]`. Returns `hs`.
    pub fn gru(
        &mut self,
        x: Value,
        w_ih: Value,
        w_hh: Value,
        b_ih: Value,
        b_hh: Value,
        h0: Value,
    ) -> Result<Value> {
        let xp = self.linear(x, w_ih, Some(b_ih))?;
        Ok(self.add_node(Op::Gru, &[xp, w_hh, b_hh, h0])?[0])
    }

    // ---- optimizers ----

    /// SGD updates of `params` by `grads`; velocity variables
    /// `{param}.momentum`.
    pub fn sgd(&mut self, params: &[Value], grads: &[Value], o: Sgd) -> Result<()> {
        for (&p, &g) in params.iter().zip(grads) {
            let vel = self.state_of(p, "momentum")?;
            self.add_node(Op::Update(Update::Sgd(o)), &[p, vel, g])?;
        }
        Ok(())
    }

    /// Adam (AdamW when `o.decoupled`) updates; moment variables
    /// `{param}.exp_avg`, `{param}.exp_avg_sq`.
    pub fn adam(&mut self, params: &[Value], grads: &[Value], o: Adam) -> Result<()> {
        for (&p, &g) in params.iter().zip(grads) {
            let m = self.state_of(p, "exp_avg")?;
            let v = self.state_of(p, "exp_avg_sq")?;
            self.add_node(Op::Update(Update::Adam(o)), &[p, m, v, g])?;
        }
        Ok(())
    }

    fn state_of(&mut self, p: Value, what: &str) -> Result<Value> {
        let name = match &self.info(p).source {
            crate::graph::Source::Variable { name, .. } => name.clone(),
            _ => return shape_err("optimizer", format!("{p:?} is not a variable")),
        };
        let shape = self.shape(p).to_vec();
        self.variable(&format!("{name}.{what}"), &shape, Init::Zeros, false)
    }
}
