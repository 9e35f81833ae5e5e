//! Where a layer split keeps each weight, by its GGUF name, so that any
//! architecture's loader places its weights without knowing of the split:
//!
//! - `blk.N.*`: with layer N, on the device that runs it;
//! - the input weights (`token_embd`, `token_embd_norm`, `position_embd`,
//!   `token_types`): with the first layer, where the embedding runs;
//! - the output weights (`output`, `output_norm`, `cls`): with the last
//!   layer, where the logits come out; `token_embd` there too when the file
//!   ties the output to it (no `output.weight`);
//! - anything else (`rope_freqs`, other small tables every layer reads):
//!   on every device.

use std::ops::Range;

use super::residency::{Devices, device_bit};

/// The devices of a split, each with a contiguous run of layers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Per device, in order: the layers it runs (empty runs are refused).
    pub layers: Vec<Range<usize>>,
    /// The output projection is `token_embd` (no `output.weight`).
    pub tied_output: bool,
}

pub(super) const INPUT: &[&str] = &[
    "token_embd",
    "token_embd_norm",
    "position_embd",
    "token_types",
];
pub(super) const OUTPUT: &[&str] = &["output", "output_norm", "cls", "cls_out"];

impl Placement {
    /// `layers` of the model in `file`, whose output is tied to the token
    /// embeddings when it has no `output.weight`.
    pub fn of_file(layers: Vec<Range<usize>>, file: &crate::gguf::GgufFile) -> Placement {
        Placement {
            layers,
            tied_output: ties_output(file),
        }
    }

    pub fn n_devices(&self) -> usize {
        self.layers.len()
    }

    pub fn n_layers(&self) -> usize {
        self.layers.last().map_or(0, |r| r.end)
    }

    /// The device that runs layer `layer`, if the split has that layer.
    pub fn device_of_layer(&self, layer: usize) -> Option<usize> {
        self.layers.iter().position(|r| r.contains(&layer))
    }

    /// The devices that keep weight `name`; `None` for a layer the split
    /// does not have.
    pub fn devices_of(&self, name: &str) -> Option<Devices> {
        let first = device_bit(0);
        let last = device_bit(self.n_devices() - 1);
        if let Some(rest) = name.strip_prefix("blk.") {
            let layer = rest.split('.').next()?.parse().ok()?;
            return self.device_of_layer(layer).map(device_bit);
        }
        let stem = name.split('.').next().unwrap_or(name);
        Some(if stem == "token_embd" && self.tied_output {
            first | last
        } else if INPUT.contains(&stem) {
            first
        } else if OUTPUT.contains(&stem) {
            last
        } else {
            (1 << self.n_devices()) - 1
        })
    }
}

/// Whether `file` projects its output through the token embeddings (no
/// `output.weight`).
pub fn ties_output(file: &crate::gguf::GgufFile) -> bool {
    !file.tensors.iter().any(|t| t.name == "output.weight")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_go_with_their_layers_and_ends() {
        let p = Placement {
            layers: vec![0..3, 3..5, 5..8],
            tied_output: false,
        };
        assert_eq!(p.devices_of("blk.0.attn_q.weight"), Some(1));
        assert_eq!(p.devices_of("blk.4.ffn_down.weight"), Some(2));
        assert_eq!(p.devices_of("blk.7.attn_norm.weight"), Some(4));
        assert_eq!(p.devices_of("blk.8.attn_norm.weight"), None);
        assert_eq!(p.devices_of("blk.x.attn_norm.weight"), None);
        assert_eq!(p.devices_of("token_embd.weight"), Some(1));
        assert_eq!(p.devices_of("output.weight"), Some(4));
        assert_eq!(p.devices_of("output_norm.weight"), Some(4));
        assert_eq!(p.devices_of("rope_freqs.weight"), Some(7));
        let tied = Placement {
            tied_output: true,
            ..p
        };
        assert_eq!(tied.devices_of("token_embd.weight"), Some(5));
    }
}
