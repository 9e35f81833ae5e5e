//! The two training examples as library code (the `smelt train`,
//! `classify` and `sample` commands are thin loops around them): batches,
//! the step loop, evaluation on the held-out split and checkpoints.

pub mod cnn;
pub mod rnn;

use crate::device::Device;
use crate::error::{NnError, Result};
use crate::safetensors::Tensors;

/// What a training loop reports after each step.
#[derive(Clone, Copy, Debug)]
pub struct StepInfo {
    pub step: usize,
    pub steps: usize,
    pub loss: f32,
    /// Examples (CNN) or characters (RNN) per step.
    pub items: usize,
}

/// The trainable variables (and any others named in `extra`) in a
/// checkpoint with `metadata`.
pub fn checkpoint(
    dev: &mut Device,
    names: &[String],
    metadata: &[(&str, String)],
) -> Result<Tensors> {
    let mut t = Tensors::default();
    for (name, shape) in dev.variables() {
        if names.contains(&name) {
            let data = dev.read_variable(&name)?;
            t.insert(&name, &shape, data);
        }
    }
    for (k, v) in metadata {
        t.metadata.insert(k.to_string(), v.clone());
    }
    Ok(t)
}

/// Writes a checkpoint's tensors into the device's variables of the same
/// names, checking every one is there with its shape.
pub fn restore(dev: &mut Device, t: &Tensors, names: &[String]) -> Result<()> {
    for name in names {
        let Some((shape, data)) = t.get(name) else {
            return Err(NnError::Graph(format!(
                "the checkpoint has no tensor {name}"
            )));
        };
        let want = dev
            .variables()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s)
            .ok_or_else(|| NnError::Graph(format!("the model has no variable {name}")))?;
        if *shape != want {
            return Err(NnError::Graph(format!(
                "checkpoint tensor {name} is {shape:?}, the model wants {want:?}"
            )));
        }
        dev.write_variable(name, data)?;
    }
    Ok(())
}
