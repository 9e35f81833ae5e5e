//! The ops of the graph, one module per family. Each family has its shape
//! inference, its backward rule (new nodes that make its inputs'
//! gradients), its CPU twin and the dispatches of its WGSL kernel.
//!
//! The summation order of every reduction is part of an op's definition
//! and is the same on the CPU and the GPU (each output's terms are added in
//! the order its doc comment gives, one at a time, starting from zero), so
//! that the two backends differ only by the rounding of the math functions
//! (`exp`, `tanh`, `sqrt`) and any multiply-add the GPU's compiler fuses.

pub mod conv;
pub mod embed;
pub mod map;
pub mod matmul;
pub mod optim;
pub mod pool;
pub mod reduce;
pub mod rnn;
pub mod softmax;

use crate::cpu::Cx;
use crate::error::Result;
use crate::gpu::dispatch::Dispatch;
use crate::graph::{Graph, Shape, Value};

pub use conv::{Conv2d, ConvKind};
pub use map::{Bcast, Binary, Instr, MapOp, Unary};
pub use optim::Update;
pub use pool::Pool2d;

#[derive(Clone, Debug)]
pub enum Op {
    /// Elementwise program (`map`).
    Map(MapOp),
    /// Sums the input down to `count` values (`reduce`).
    SumTo(Bcast),
    /// The same memory with another shape: no kernel.
    Reshape(Shape),
    /// `[M, K] · [K, N]`, either operand transposed in memory.
    MatMul(matmul::MatMul),
    Conv(ConvKind, Conv2d),
    MaxPool(Pool2d),
    MaxPoolGrad(Pool2d),
    AvgPool(Pool2d),
    AvgPoolGrad(Pool2d),
    /// Over the last dimension.
    Softmax,
    SoftmaxGrad,
    /// Per row of logits `[N, C]` and labels `[N]`: `logsumexp − logit`.
    CrossEntropy,
    CrossEntropyGrad,
    /// Rows of a table by index (embedding).
    Gather,
    /// Sums gradient rows into a table of `vocab` rows.
    GatherGrad {
        vocab: usize,
    },
    Lstm,
    LstmGrad,
    Gru,
    GruGrad,
    /// `[h0; hs[..T-1]]`: each step's previous state.
    SeqShift,
    /// Writes variables in place (optimizers, running statistics); no
    /// outputs. Scheduled after every other node.
    Update(Update),
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Map(_) => "map",
            Op::SumTo(_) => "sum_to",
            Op::Reshape(_) => "reshape",
            Op::MatMul(_) => "matmul",
            Op::Conv(k, _) => k.name(),
            Op::MaxPool(_) => "max_pool2d",
            Op::MaxPoolGrad(_) => "max_pool2d_grad",
            Op::AvgPool(_) => "avg_pool2d",
            Op::AvgPoolGrad(_) => "avg_pool2d_grad",
            Op::Softmax => "softmax",
            Op::SoftmaxGrad => "softmax_grad",
            Op::CrossEntropy => "cross_entropy",
            Op::CrossEntropyGrad => "cross_entropy_grad",
            Op::Gather => "embedding",
            Op::GatherGrad { .. } => "embedding_grad",
            Op::Lstm => "lstm",
            Op::LstmGrad => "lstm_grad",
            Op::Gru => "gru",
            Op::GruGrad => "gru_grad",
            Op::SeqShift => "seq_shift",
            Op::Update(u) => u.name(),
        }
    }

    /// The outputs' shapes for inputs of these shapes, or why not.
    pub fn infer(&self, s: &[&[usize]]) -> Result<Vec<Shape>> {
        match self {
            Op::Map(m) => map_infer(m, s),
            Op::SumTo(b) => reduce::infer(b, s),
            Op::Reshape(to) => reshape_infer(to, s),
            Op::MatMul(m) => m.infer(s),
            Op::Conv(k, c) => c.infer(k, s),
            Op::MaxPool(p) => p.infer_max(s),
            Op::AvgPool(p) => p.infer_avg(s),
            Op::MaxPoolGrad(p) => p.infer_max_grad(s),
            Op::AvgPoolGrad(p) => p.infer_avg_grad(s),
            Op::Softmax => softmax::infer_softmax(s),
            Op::SoftmaxGrad => softmax::infer_softmax_grad(s),
            Op::CrossEntropy => softmax::infer_ce(s),
            Op::CrossEntropyGrad => softmax::infer_ce_grad(s),
            Op::Gather => embed::infer(s),
            Op::GatherGrad { vocab } => embed::infer_grad(*vocab, s),
            Op::Lstm => rnn::infer_lstm(s),
            Op::LstmGrad => rnn::infer_lstm_grad(s),
            Op::Gru => rnn::infer_gru(s),
            Op::GruGrad => rnn::infer_gru_grad(s),
            Op::SeqShift => rnn::infer_shift(s),
            Op::Update(u) => u.infer(s),
        }
    }

    /// The gradients of the inputs (`None`: zero or not needed) from those
    /// of the outputs, as new nodes of `g`.
    pub fn backward(&self, g: &mut Graph, b: &Backward) -> Result<Vec<Option<Value>>> {
        match self {
            Op::Map(m) => map_backward(m, g, b),
            Op::SumTo(bc) => reduce::backward(bc, g, b),
            Op::Reshape(_) => {
                let shape = g.shape(b.inputs[0]).to_vec();
                Ok(vec![match b.grads[0] {
                    Some(d) => Some(g.reshape(d, &shape)?),
                    None => None,
                }])
            }
            Op::MatMul(m) => m.backward(g, b),
            Op::Conv(k, c) => c.backward(k, g, b),
            Op::MaxPool(p) => p.backward_max(g, b),
            Op::AvgPool(p) => p.backward_avg(g, b),
            Op::Softmax => softmax::backward_softmax(g, b),
            Op::CrossEntropy => softmax::backward_ce(g, b),
            Op::Gather => embed::backward(g, b),
            Op::Lstm => rnn::backward_lstm(g, b),
            Op::Gru => rnn::backward_gru(g, b),
            Op::SeqShift => rnn::backward_shift(g, b),
            Op::MaxPoolGrad(_)
            | Op::AvgPoolGrad(_)
            | Op::SoftmaxGrad
            | Op::CrossEntropyGrad
            | Op::GatherGrad { .. }
            | Op::LstmGrad
            | Op::GruGrad
            | Op::Update(_) => Err(crate::error::NnError::Graph(format!(
                "{} has no gradient (second derivatives are not supported)",
                self.name()
            ))),
        }
    }

    /// Runs the op on the CPU. For an update, `outs` are the variables it
    /// writes (its first inputs) and `ins` the rest.
    pub fn cpu(&self, cx: &mut Cx, io: &mut Io) {
        match self {
            Op::Map(m) => crate::cpu::map::run(m, cx, io),
            Op::SumTo(b) => reduce::cpu(b, cx, io),
            Op::Reshape(_) => {}
            Op::MatMul(m) => m.cpu(cx, io),
            Op::Conv(k, c) => c.cpu(k, cx, io),
            Op::MaxPool(p) => p.cpu_max(cx, io),
            Op::MaxPoolGrad(p) => p.cpu_max_grad(cx, io),
            Op::AvgPool(p) => p.cpu_avg(cx, io),
            Op::AvgPoolGrad(p) => p.cpu_avg_grad(cx, io),
            Op::Softmax => softmax::cpu_softmax(cx, io),
            Op::SoftmaxGrad => softmax::cpu_softmax_grad(cx, io),
            Op::CrossEntropy => softmax::cpu_ce(cx, io),
            Op::CrossEntropyGrad => softmax::cpu_ce_grad(cx, io),
            Op::Gather => embed::cpu(cx, io),
            Op::GatherGrad { .. } => embed::cpu_grad(cx, io),
            Op::Lstm => rnn::cpu_lstm(cx, io),
            Op::LstmGrad => rnn::cpu_lstm_grad(cx, io),
            Op::Gru => rnn::cpu_gru(cx, io),
            Op::GruGrad => rnn::cpu_gru_grad(cx, io),
            Op::SeqShift => rnn::cpu_shift(cx, io),
            Op::Update(u) => u.cpu(cx, io),
        }
    }

    /// The op's GPU dispatches, in order.
    pub fn gpu(&self, s: &Shapes) -> Vec<Dispatch> {
        match self {
            Op::Map(m) => crate::gpu::map_wgsl::dispatches(m, s),
            Op::SumTo(b) => reduce::gpu(b, s),
            Op::Reshape(_) => Vec::new(),
            Op::MatMul(m) => m.gpu(s),
            Op::Conv(k, c) => c.gpu(k, s),
            Op::MaxPool(p) => p.gpu(pool::PoolKernel::Max, s),
            Op::MaxPoolGrad(p) => p.gpu(pool::PoolKernel::MaxGrad, s),
            Op::AvgPool(p) => p.gpu(pool::PoolKernel::Avg, s),
            Op::AvgPoolGrad(p) => p.gpu(pool::PoolKernel::AvgGrad, s),
            Op::Softmax => softmax::gpu("SOFTMAX", s),
            Op::SoftmaxGrad => softmax::gpu("SOFTMAX_GRAD", s),
            Op::CrossEntropy => softmax::gpu("CE", s),
            Op::CrossEntropyGrad => softmax::gpu("CE_GRAD", s),
            Op::Gather => embed::gpu(false, s),
            Op::GatherGrad { .. } => embed::gpu(true, s),
            Op::Lstm => rnn::gpu_lstm(s),
            Op::LstmGrad => rnn::gpu_lstm_grad(s),
            Op::Gru => rnn::gpu_gru(s),
            Op::GruGrad => rnn::gpu_gru_grad(s),
            Op::SeqShift => rnn::gpu_shift(s),
            Op::Update(u) => u.gpu(s),
        }
    }

    /// How many of the first inputs an update writes.
    pub fn n_targets(&self) -> usize {
        match self {
            Op::Update(u) => u.n_targets(),
            _ => 0,
        }
    }
}

/// What a backward rule gets: the node's inputs and outputs and the
/// gradients of its outputs.
pub struct Backward<'a> {
    pub inputs: &'a [Value],
    pub outputs: &'a [Value],
    pub grads: &'a [Option<Value>],
    /// Which inputs need a gradient.
    pub needs: &'a [bool],
}

/// A node's tensors on the CPU.
pub struct Io<'a> {
    pub ins: Vec<&'a [f32]>,
    pub outs: Vec<&'a mut [f32]>,
    pub shapes: Shapes,
}

/// A node's shapes: inputs then outputs.
#[derive(Clone, Debug, Default)]
pub struct Shapes {
    pub ins: Vec<Shape>,
    pub outs: Vec<Shape>,
}

fn map_infer(m: &MapOp, s: &[&[usize]]) -> Result<Vec<Shape>> {
    let lens: Vec<usize> = s.iter().map(|x| x.iter().product()).collect();
    m.check(&lens)?;
    Ok(vec![m.shape.clone()])
}

fn map_backward(m: &MapOp, g: &mut Graph, b: &Backward) -> Result<Vec<Option<Value>>> {
    let Some(dy) = b.grads[0] else {
        return Ok(vec![None; b.inputs.len()]);
    };
    let n = m.len();
    let mut grads = Vec::with_capacity(b.inputs.len());
    for k in 0..b.inputs.len() {
        if !b.needs[k] {
            grads.push(None);
            continue;
        }
        let (gm, kept) = m.gradient(k);
        let all: Vec<Value> = b.inputs.iter().copied().chain([dy]).collect();
        let ins: Vec<Value> = kept.iter().map(|&j| all[j]).collect();
        // A gradient that is the output's own (an added input's) is that
        // value, not a copy of it.
        let full = if gm.is_identity() {
            ins[0]
        } else {
            g.map(gm, &ins)?
        };
        let bc = m.bcast[k];
        let in_shape = g.shape(b.inputs[k]).to_vec();
        grads.push(Some(if bc.is_full(n) {
            full
        } else {
            let s = g.sum_to(full, bc)?;
            g.reshape(s, &in_shape)?
        }));
    }
    Ok(grads)
}

fn reshape_infer(to: &Shape, s: &[&[usize]]) -> Result<Vec<Shape>> {
    let n: usize = s[0].iter().product();
    if to.iter().product::<usize>() != n || to.contains(&0) {
        return crate::error::shape_err("reshape", format!("{:?} to {to:?}", s[0]));
    }
    Ok(vec![to.clone()])
}
