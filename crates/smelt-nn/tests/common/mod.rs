//! The op cases the tests share: each builds a small graph from its inputs,
//! and `run_case` computes its output and the gradients of
//! `loss = Σ out · dy` with respect to every float input, on any device.

#![allow(dead_code)]

use smelt_nn::graph::{Graph, Value};
use smelt_nn::ops::optim::Adam;
use smelt_nn::ops::{Bcast, Conv2d, Pool2d};
use smelt_nn::vars::Rng;
use smelt_nn::{Device, Result};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    /// Standard normal values, differentiated.
    Normal,
    /// Values in 0.5..1.5 (variances), differentiated.
    Positive,
    /// Integers in `0..n` (labels, ids), not differentiated.
    Index(usize),
}

pub struct Case {
    pub name: &'static str,
    pub inputs: Vec<(&'static str, Vec<usize>, Kind)>,
    pub build: fn(&mut Graph, &[Value]) -> Result<Value>,
    /// Whether finite differences can check it (no per-run randomness).
    pub fd: bool,
}

fn case(
    name: &'static str,
    inputs: Vec<(&'static str, Vec<usize>, Kind)>,
    build: fn(&mut Graph, &[Value]) -> Result<Value>,
) -> Case {
    Case {
        name,
        inputs,
        build,
        fd: true,
    }
}

use Kind::*;

fn conv(k: usize, stride: usize, pad: usize, dil: usize, groups: usize) -> Conv2d {
    Conv2d {
        kernel: [k, k],
        stride: [stride; 2],
        padding: [pad; 2],
        dilation: [dil; 2],
        groups,
    }
}

pub fn cases() -> Vec<Case> {
    vec![
        case(
            "conv2d",
            vec![
                ("x", vec![2, 3, 6, 5], Normal),
                ("w", vec![4, 3, 3, 3], Normal),
                ("b", vec![4], Normal),
            ],
            |g, v| g.conv2d(v[0], v[1], Some(v[2]), conv(3, 1, 1, 1, 1)),
        ),
        case(
            "conv2d_stride_groups",
            vec![
                ("x", vec![2, 4, 7, 6], Normal),
                ("w", vec![6, 2, 3, 3], Normal),
            ],
            |g, v| g.conv2d(v[0], v[1], None, conv(3, 2, 1, 1, 2)),
        ),
        case(
            "conv2d_dilated",
            vec![
                ("x", vec![1, 3, 9, 9], Normal),
                ("w", vec![4, 3, 3, 3], Normal),
            ],
            |g, v| g.conv2d(v[0], v[1], None, conv(3, 1, 2, 2, 1)),
        ),
        case(
            "conv2d_depthwise",
            vec![
                ("x", vec![2, 4, 6, 6], Normal),
                ("w", vec![4, 1, 3, 3], Normal),
            ],
            |g, v| g.conv2d(v[0], v[1], None, conv(3, 1, 1, 1, 4)),
        ),
        case(
            "conv_transpose2d",
            vec![
                ("x", vec![2, 4, 5, 5], Normal),
                ("w", vec![4, 3, 3, 3], Normal),
                ("b", vec![3], Normal),
            ],
            |g, v| g.conv_transpose2d(v[0], v[1], Some(v[2]), conv(3, 2, 1, 1, 1), [1, 1]),
        ),
        case(
            "conv_transpose2d_groups",
            vec![
                ("x", vec![1, 4, 4, 4], Normal),
                ("w", vec![4, 2, 3, 3], Normal),
            ],
            |g, v| g.conv_transpose2d(v[0], v[1], None, conv(3, 2, 0, 1, 2), [0, 0]),
        ),
        case(
            "max_pool2d",
            vec![("x", vec![2, 3, 7, 7], Normal)],
            |g, v| {
                g.max_pool2d(
                    v[0],
                    Pool2d {
                        padding: [1, 1],
                        ..Pool2d::new(3, 2)
                    },
                )
            },
        ),
        case(
            "avg_pool2d",
            vec![("x", vec![2, 3, 7, 7], Normal)],
            |g, v| {
                g.avg_pool2d(
                    v[0],
                    Pool2d {
                        padding: [1, 1],
                        ..Pool2d::new(3, 2)
                    },
                )
            },
        ),
        case(
            "avg_pool2d_exclude_pad",
            vec![("x", vec![1, 2, 6, 5], Normal)],
            |g, v| {
                g.avg_pool2d(
                    v[0],
                    Pool2d {
                        padding: [1, 1],
                        count_include_pad: false,
                        ..Pool2d::new(2, 2)
                    },
                )
            },
        ),
        case(
            "global_avg_pool",
            vec![("x", vec![2, 3, 5, 5], Normal)],
            |g, v| g.global_avg_pool(v[0]),
        ),
        case(
            "batch_norm_train",
            vec![
                ("x", vec![4, 3, 5, 5], Normal),
                ("gamma", vec![3], Normal),
                ("beta", vec![3], Normal),
            ],
            |g, v| {
                let mut bn = g.batch_norm_params("bn", 3)?;
                bn.gamma = v[1];
                bn.beta = v[2];
                g.batch_norm(v[0], &bn, true)
            },
        ),
        case(
            "batch_norm_eval",
            vec![
                ("x", vec![4, 3, 5, 5], Normal),
                ("gamma", vec![3], Normal),
                ("beta", vec![3], Normal),
                ("mean", vec![3], Normal),
                ("var", vec![3], Positive),
            ],
            |g, v| {
                let mut bn = g.batch_norm_params("bn", 3)?;
                (bn.gamma, bn.beta, bn.running_mean, bn.running_var) = (v[1], v[2], v[3], v[4]);
                g.batch_norm(v[0], &bn, false)
            },
        ),
        case(
            "layer_norm",
            vec![
                ("x", vec![3, 5, 8], Normal),
                ("gamma", vec![8], Normal),
                ("beta", vec![8], Normal),
            ],
            |g, v| g.layer_norm(v[0], v[1], v[2], 1e-5),
        ),
        case(
            "group_norm",
            vec![
                ("x", vec![2, 6, 4, 4], Normal),
                ("gamma", vec![6], Normal),
                ("beta", vec![6], Normal),
            ],
            |g, v| g.group_norm(v[0], 3, v[1], v[2], 1e-5),
        ),
        case("relu", vec![("x", vec![70], Normal)], |g, v| g.relu(v[0])),
        case("gelu", vec![("x", vec![70], Normal)], |g, v| g.gelu(v[0])),
        case("silu", vec![("x", vec![70], Normal)], |g, v| g.silu(v[0])),
        case("sigmoid", vec![("x", vec![70], Normal)], |g, v| {
            g.sigmoid(v[0])
        }),
        case("tanh", vec![("x", vec![70], Normal)], |g, v| g.tanh(v[0])),
        case(
            "arithmetic",
            vec![
                ("x", vec![3, 4], Normal),
                ("y", vec![4], Normal),
                ("z", vec![3, 4], Positive),
            ],
            |g, v| {
                // (x − y) · x / z + sqrt(z), y broadcast over rows.
                let d = g.sub(v[0], v[1])?;
                let m = g.mul(d, v[0])?;
                let q = g.div(m, v[2])?;
                let s = g.unary(smelt_nn::ops::Unary::Sqrt, v[2])?;
                g.add(q, s)
            },
        ),
        case("softmax", vec![("x", vec![4, 10], Normal)], |g, v| {
            g.softmax(v[0])
        }),
        case(
            "linear",
            vec![
                ("x", vec![5, 7], Normal),
                ("w", vec![3, 7], Normal),
                ("b", vec![3], Normal),
            ],
            |g, v| g.linear(v[0], v[1], Some(v[2])),
        ),
        case(
            "matmul_transposed",
            vec![("a", vec![6, 4], Normal), ("b", vec![5, 6], Normal)],
            |g, v| g.matmul(v[0], v[1], true, true),
        ),
        case(
            "matmul_large",
            vec![("a", vec![70, 33], Normal), ("b", vec![33, 90], Normal)],
            |g, v| g.matmul(v[0], v[1], false, false),
        ),
        // k = 200 with a 9 × 7 output: summed in chunks of 80, 80 and 40
        // (`matmul::split_chunk`), A and B both read transposed.
        case(
            "matmul_long_k",
            vec![("a", vec![200, 9], Normal), ("b", vec![7, 200], Normal)],
            |g, v| g.matmul(v[0], v[1], true, true),
        ),
        // A batch of 150: the weight gradient's k is split in two uneven
        // chunks, the bias gradient is a 32-lane tree over 150 terms.
        case(
            "linear_long_batch",
            vec![
                ("x", vec![150, 5], Normal),
                ("w", vec![3, 5], Normal),
                ("b", vec![3], Normal),
            ],
            |g, v| g.linear(v[0], v[1], Some(v[2])),
        ),
        // 2440 terms per output in runs of 61: the full 256-lane tree,
        // lanes of 9 and 10 terms.
        case(
            "sum_to_long",
            vec![("x", vec![40, 2, 61], Normal)],
            |g, v| {
                g.sum_to(
                    v[0],
                    Bcast {
                        inner: 61,
                        count: 2,
                    },
                )
            },
        ),
        // 20 terms per output: 4-lane trees, 64 outputs per workgroup, the
        // last workgroup part-filled.
        case(
            "sum_to_many_outputs",
            vec![("x", vec![20, 300], Normal)],
            |g, v| {
                g.sum_to(
                    v[0],
                    Bcast {
                        inner: 1,
                        count: 300,
                    },
                )
            },
        ),
        case(
            "lstm",
            vec![
                ("x", vec![5, 3, 4], Normal),
                ("w_ih", vec![24, 4], Normal),
                ("w_hh", vec![24, 6], Normal),
                ("b", vec![24], Normal),
                ("h0", vec![3, 6], Normal),
                ("c0", vec![3, 6], Normal),
            ],
            |g, v| Ok(g.lstm(v[0], v[1], v[2], v[3], v[4], v[5])?.hs),
        ),
        case(
            "gru",
            vec![
                ("x", vec![5, 3, 4], Normal),
                ("w_ih", vec![18, 4], Normal),
                ("w_hh", vec![18, 6], Normal),
                ("b_ih", vec![18], Normal),
                ("b_hh", vec![18], Normal),
                ("h0", vec![3, 6], Normal),
            ],
            |g, v| g.gru(v[0], v[1], v[2], v[3], v[4], v[5]),
        ),
        case(
            "embedding",
            vec![("table", vec![10, 4], Normal), ("ids", vec![7], Index(10))],
            |g, v| g.embedding(v[0], v[1]),
        ),
        case(
            "cross_entropy",
            vec![
                ("logits", vec![6, 5], Normal),
                ("labels", vec![6], Index(5)),
            ],
            |g, v| g.cross_entropy(v[0], v[1]),
        ),
        case(
            "mse",
            vec![("a", vec![4, 5], Normal), ("b", vec![4, 5], Normal)],
            |g, v| g.mse(v[0], v[1]),
        ),
        // Over 64 rows: the whole-sequence kernels put two in a workgroup.
        case(
            "lstm_many_rows",
            vec![
                ("x", vec![3, 70, 2], Normal),
                ("w_ih", vec![12, 2], Normal),
                ("w_hh", vec![12, 3], Normal),
                ("b", vec![12], Normal),
                ("h0", vec![70, 3], Normal),
                ("c0", vec![70, 3], Normal),
            ],
            |g, v| Ok(g.lstm(v[0], v[1], v[2], v[3], v[4], v[5])?.hs),
        ),
        // Four gates of 1025 units overflow a workgroup's memory: the GPU
        // runs one dispatch per step instead (too many weights for finite
        // differences).
        Case {
            name: "lstm_per_step",
            inputs: vec![
                ("x", vec![2, 1, 1], Normal),
                ("w_ih", vec![4100, 1], Normal),
                ("w_hh", vec![4100, 1025], Normal),
                ("b", vec![4100], Normal),
                ("h0", vec![1, 1025], Normal),
                ("c0", vec![1, 1025], Normal),
            ],
            build: |g, v| Ok(g.lstm(v[0], v[1], v[2], v[3], v[4], v[5])?.hs),
            fd: false,
        },
        Case {
            name: "dropout",
            inputs: vec![("x", vec![300], Normal)],
            build: |g, v| g.dropout(v[0], 0.3, 7),
            fd: false,
        },
    ]
}

/// Random inputs of a case.
pub fn inputs(c: &Case, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(seed);
    c.inputs
        .iter()
        .map(|(_, shape, kind)| {
            let n: usize = shape.iter().product();
            (0..n)
                .map(|_| match kind {
                    Normal => rng.normal(),
                    Positive => 0.5 + rng.uniform(),
                    Index(k) => rng.below(*k) as f32,
                })
                .collect()
        })
        .collect()
}

/// A case's graph: the inputs as placeholders, the output, `dy`, and the
/// gradients of `Σ out · dy`.
pub struct Built {
    pub graph: Graph,
    pub inputs: Vec<Value>,
    pub out: Value,
    pub dy: Value,
    pub loss: Value,
    pub grads: Vec<Value>,
    /// Which inputs have gradients.
    pub diff: Vec<bool>,
}

pub fn build(c: &Case) -> Built {
    let mut g = Graph::new();
    let inputs: Vec<Value> = c
        .inputs
        .iter()
        .map(|(name, shape, kind)| match kind {
            Index(k) => g.index_placeholder(name, shape, *k).unwrap(),
            _ => g.placeholder(name, shape).unwrap(),
        })
        .collect();
    let out = (c.build)(&mut g, &inputs).unwrap();
    let out_shape = g.shape(out).to_vec();
    let dy = g.placeholder("dy", &out_shape).unwrap();
    let prod = g.mul(out, dy).unwrap();
    let n: usize = g.shape(prod).iter().product();
    let loss = g.sum_to(prod, Bcast { inner: n, count: 1 }).unwrap();
    let diff: Vec<bool> = c
        .inputs
        .iter()
        .map(|(_, _, k)| !matches!(k, Index(_)))
        .collect();
    let wrt: Vec<Value> = inputs
        .iter()
        .zip(&diff)
        .filter(|(_, d)| **d)
        .map(|(v, _)| *v)
        .collect();
    let grads = g.gradients(loss, &wrt).unwrap();
    Built {
        graph: g,
        inputs,
        out,
        dy,
        loss,
        grads,
        diff,
    }
}

/// The output and the gradients (of the differentiated inputs) on `dev`.
pub fn run(
    dev: &mut Device,
    b: &Built,
    data: &[Vec<f32>],
    dy: &[f32],
) -> (Vec<f32>, Vec<Vec<f32>>) {
    let mut outs = vec![b.out];
    outs.extend(&b.grads);
    let mut exe = dev.compile(&b.graph, &outs).unwrap();
    let mut feeds: Vec<(Value, &[f32])> = b
        .inputs
        .iter()
        .zip(data)
        .map(|(v, d)| (*v, d.as_slice()))
        .collect();
    feeds.push((b.dy, dy));
    let mut r = dev.run(&mut exe, &feeds).unwrap();
    let out = r.remove(0);
    (out, r)
}

/// `max |a − b| / max(1, max |b|)`, infinite for a NaN or a length mismatch.
pub fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() || a.iter().any(|x| !x.is_finite()) {
        return f64::INFINITY;
    }
    let scale = b.iter().fold(1.0f64, |m, &x| m.max(x.abs() as f64));
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).abs())
        .fold(0.0, f64::max)
        / scale
}

pub fn adam() -> Adam {
    Adam::new(1e-3)
}
