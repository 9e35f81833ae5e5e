//! A character-level LSTM language model: byte embedding, one LSTM layer,
//! a fully connected layer to the vocabulary's logits.
//!
//! ```text
//! ids [T, B] ─embed─▶ [T, B, E] ─lstm─▶ hs [T, B, H] ─fc─▶ logits [T·B, V]
//! ```

use crate::error::Result;
use crate::graph::{Graph, Value};
use crate::models::param;
use crate::ops::optim::Adam;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    pub vocab: usize,
    pub embed: usize,
    pub hidden: usize,
}

impl Config {
    pub fn params(&self) -> Vec<(&'static str, Vec<usize>)> {
        let (v, e, h) = (self.vocab, self.embed, self.hidden);
        vec![
            ("embed.weight", vec![v, e]),
            ("lstm.weight_ih", vec![4 * h, e]),
            ("lstm.weight_hh", vec![4 * h, h]),
            ("lstm.bias", vec![4 * h]),
            ("fc.weight", vec![v, h]),
            ("fc.bias", vec![v]),
        ]
    }
}

/// A graph of the model over `steps × batch` ids, with the state carried in
/// (`h0`, `c0`) and out (`hs`, `cs`: the last step's rows are the state).
pub struct CharLstm {
    pub graph: Graph,
    pub ids: Value,
    pub h0: Value,
    pub c0: Value,
    pub logits: Value,
    pub hs: Value,
    pub cs: Value,
    pub targets: Option<Value>,
    pub loss: Option<Value>,
}

impl CharLstm {
    fn build(cfg: &Config, steps: usize, batch: usize, with_loss: bool) -> Result<CharLstm> {
        let mut g = Graph::new();
        let ids = g.index_placeholder("ids", &[steps, batch], cfg.vocab)?;
        let h0 = g.placeholder("h0", &[batch, cfg.hidden])?;
        let c0 = g.placeholder("c0", &[batch, cfg.hidden])?;
        let mut p = Vec::new();
        for (name, shape) in cfg.params() {
            let fan = match name {
                // nn.Embedding draws N(0, 1).
                "embed.weight" => 1,
                _ => cfg.hidden,
            };
            let fan = if name.starts_with("fc") {
                cfg.hidden
            } else {
                fan
            };
            p.push(param(&mut g, name, &shape, fan)?);
        }
        let x = g.embedding(p[0], ids)?;
        let out = g.lstm(x, p[1], p[2], p[3], h0, c0)?;
        let flat = g.reshape(out.hs, &[steps * batch, cfg.hidden])?;
        let logits = g.linear(flat, p[4], Some(p[5]))?;
        let (targets, loss) = if with_loss {
            let t = g.index_placeholder("targets", &[steps * batch], cfg.vocab)?;
            (Some(t), Some(g.cross_entropy(logits, t)?))
        } else {
            (None, None)
        };
        Ok(CharLstm {
            graph: g,
            ids,
            h0,
            c0,
            logits,
            hs: out.hs,
            cs: out.cs,
            targets,
            loss,
        })
    }

    /// Training: loss, gradients, Adam updates.
    pub fn train(cfg: &Config, steps: usize, batch: usize, adam: Adam) -> Result<CharLstm> {
        let mut m = Self::build(cfg, steps, batch, true)?;
        let g = &mut m.graph;
        let params = g.trainable();
        let loss = m.loss.expect("built with a loss");
        let grads = g.gradients(loss, &params)?;
        g.adam(&params, &grads, adam)?;
        Ok(m)
    }

    /// Evaluation: loss over `steps × batch`, no updates.
    pub fn eval(cfg: &Config, steps: usize, batch: usize) -> Result<CharLstm> {
        Self::build(cfg, steps, batch, true)
    }

    /// Sampling: one step of one sequence.
    pub fn sampler(cfg: &Config) -> Result<CharLstm> {
        Self::build(cfg, 1, 1, false)
    }
}
