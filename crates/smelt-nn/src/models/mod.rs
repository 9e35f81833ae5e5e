//! The example models, written once against the graph API and run on
//! either backend: a LeNet-style CNN for the 8×8 digits and a
//! character-level LSTM language model.

pub mod char_lstm;
pub mod lenet;

use crate::error::Result;
use crate::graph::{Graph, Init, Value};

/// A parameter drawn as PyTorch's default layers do: uniform in
/// `±1/√fan_in`.
pub fn param(g: &mut Graph, name: &str, shape: &[usize], fan_in: usize) -> Result<Value> {
    g.parameter(name, shape, Init::Uniform(1.0 / (fan_in as f32).sqrt()))
}
