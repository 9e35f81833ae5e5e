//! A LeNet-style CNN for 8×8 digits: two 3×3 convolutions (16 and 32
//! channels, padded) each with ReLU and 2×2 max pooling, then fully
//! connected 128 → 64 → 10.
//!
//! ```text
//! images [N, 1, 8, 8] ─conv1─relu─pool─▶ [N, 16, 4, 4] ─conv2─relu─pool─▶ [N, 32, 2, 2]
//!   ─flatten─▶ [N, 128] ─fc1─relu─▶ [N, 64] ─fc2─▶ logits [N, 10]
//! ```

use crate::error::Result;
use crate::graph::{Graph, Value};
use crate::models::param;
use crate::ops::optim::Adam;
use crate::ops::{Conv2d, Pool2d};

pub const CLASSES: usize = 10;

/// Parameter names and shapes, as a PyTorch `nn.Module` of the same
/// layers names them.
pub const PARAMS: &[(&str, &[usize])] = &[
    ("conv1.weight", &[16, 1, 3, 3]),
    ("conv1.bias", &[16]),
    ("conv2.weight", &[32, 16, 3, 3]),
    ("conv2.bias", &[32]),
    ("fc1.weight", &[64, 128]),
    ("fc1.bias", &[64]),
    ("fc2.weight", &[10, 64]),
    ("fc2.bias", &[10]),
];

/// A LeNet graph: for training (loss, gradients, Adam updates) or for
/// inference (logits).
pub struct LeNet {
    pub graph: Graph,
    pub images: Value,
    pub labels: Option<Value>,
    pub logits: Value,
    pub loss: Option<Value>,
}

fn fan_in(shape: &[usize]) -> usize {
    shape[1..].iter().product()
}

fn forward(g: &mut Graph, images: Value) -> Result<Value> {
    let mut p = Vec::new();
    for (name, shape) in PARAMS {
        let fan = if name.ends_with("bias") {
            fan_in(
                PARAMS
                    .iter()
                    .find(|(n, _)| *n == name.replace("bias", "weight"))
                    .expect("weight")
                    .1,
            )
        } else {
            fan_in(shape)
        };
        p.push(param(g, name, shape, fan)?);
    }
    let conv = Conv2d {
        padding: [1, 1],
        ..Conv2d::new(3)
    };
    let pool = Pool2d::new(2, 2);
    let x = g.conv2d(images, p[0], Some(p[1]), conv)?;
    let x = g.relu(x)?;
    let x = g.max_pool2d(x, pool)?;
    let x = g.conv2d(x, p[2], Some(p[3]), conv)?;
    let x = g.relu(x)?;
    let x = g.max_pool2d(x, pool)?;
    let x = g.flatten(x)?;
    let x = g.linear(x, p[4], Some(p[5]))?;
    let x = g.relu(x)?;
    g.linear(x, p[6], Some(p[7]))
}

impl LeNet {
    /// The training graph for batches of `batch`, updated by Adam.
    pub fn train(batch: usize, adam: Adam) -> Result<LeNet> {
        let mut g = Graph::new();
        let images = g.placeholder("images", &[batch, 1, 8, 8])?;
        let labels = g.index_placeholder("labels", &[batch], CLASSES)?;
        let logits = forward(&mut g, images)?;
        let loss = g.cross_entropy(logits, labels)?;
        let params = g.trainable();
        let grads = g.gradients(loss, &params)?;
        g.adam(&params, &grads, adam)?;
        Ok(LeNet {
            graph: g,
            images,
            labels: Some(labels),
            logits,
            loss: Some(loss),
        })
    }

    /// The inference graph for batches of `batch`.
    pub fn infer(batch: usize) -> Result<LeNet> {
        let mut g = Graph::new();
        let images = g.placeholder("images", &[batch, 1, 8, 8])?;
        let logits = forward(&mut g, images)?;
        Ok(LeNet {
            graph: g,
            images,
            labels: None,
            logits,
            loss: None,
        })
    }
}

/// The class of each row of logits.
pub fn argmax_rows(logits: &[f32], classes: usize) -> Vec<usize> {
    logits
        .chunks(classes)
        .map(|row| {
            row.iter()
                .enumerate()
                .fold((0, f32::NEG_INFINITY), |best, (i, &v)| {
                    if v > best.1 { (i, v) } else { best }
                })
                .0
        })
        .collect()
}
