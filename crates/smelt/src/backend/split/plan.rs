//! Planning a layer split before anything is uploaded: which contiguous
//! run of layers each device takes, and whether the model fits at all.
//!
//! Device `d` gets a share `s_d` of the layers' bytes: its memory over the
//! devices' total (`--tensor-split` overrides it; equal shares where a
//! device's memory is unknown). Walking the layers in order, layer `i`
//! goes to the first device whose cumulative share reaches the middle of
//! layer `i`'s bytes:
//!
//! ```text
//! device(i) = min d such that (B_0 + … + B_{i-1} + B_i / 2) / ΣB ≤ s_0 + … + s_d
//! ```
//!
//! with every device keeping at least one layer. A device holds its layers'
//! weights and KV cache, the input weights on the first device, the output
//! weights on the last, and the activation buffers (`reserve`) on each.

use std::ops::Range;

use super::Placement;
use crate::gguf::GgufFile;

/// What a split must hold, in bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Need {
    /// Per layer: its weights and KV cache.
    pub layers: Vec<u64>,
    /// The input weights (token embeddings): on the first device.
    pub input: u64,
    /// The output weights: on the last device.
    pub output: u64,
    /// Activations and small shared tables: on every device.
    pub reserve: u64,
    /// The output projection is the token embeddings, on both ends.
    pub tied_output: bool,
}

impl Need {
    /// The weights of `file` by where a split keeps them, with `kv_per_layer`
    /// bytes of KV cache on each of `n_layer` layers and `reserve` bytes of
    /// activations on every device.
    pub fn from_gguf(file: &GgufFile, n_layer: usize, kv_per_layer: u64, reserve: u64) -> Need {
        let mut need = Need {
            layers: vec![kv_per_layer; n_layer],
            input: 0,
            output: 0,
            reserve,
            tied_output: super::placement::ties_output(file),
        };
        for t in &file.tensors {
            let layer = t
                .name
                .strip_prefix("blk.")
                .and_then(|rest| rest.split('.').next()?.parse::<usize>().ok());
            let stem = t.name.split('.').next().unwrap_or(&t.name);
            match layer {
                Some(l) if l < n_layer => need.layers[l] += t.size,
                None if super::placement::INPUT.contains(&stem) => need.input += t.size,
                None if super::placement::OUTPUT.contains(&stem) => need.output += t.size,
                Some(_) => {}
                None => need.reserve += t.size,
            }
        }
        need
    }

    /// Bytes on device `d` of `n` holding `layers`.
    pub fn on_device(&self, d: usize, n: usize, layers: &Range<usize>) -> u64 {
        let mut bytes = self.reserve + self.layers[layers.clone()].iter().sum::<u64>();
        if d == 0 {
            bytes += self.input;
        }
        if d + 1 == n {
            bytes += self.output;
            if self.tied_output && n > 1 {
                bytes += self.input;
            }
        }
        bytes
    }
}

/// A device a plan may use: its name and the bytes it may hold, where
/// known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceMemory {
    pub name: String,
    pub bytes: Option<u64>,
}

/// The placement of `need` over `devices`, split by `shares` (one positive
/// weight per device; by default their memory), refused with what does not
/// fit before anything is loaded.
pub fn plan(
    need: &Need,
    devices: &[DeviceMemory],
    shares: Option<&[f64]>,
) -> Result<Placement, String> {
    let n = devices.len();
    if n == 0 {
        return Err("a split needs at least one device".into());
    }
    if need.layers.len() < n {
        return Err(format!(
            "a split over {n} devices needs at least {n} layers; the model has {}",
            need.layers.len()
        ));
    }
    let shares = match shares {
        Some(s) => check_shares(s, n)?,
        None => memory_shares(devices),
    };
    let placement = Placement {
        layers: layer_runs(&need.layers, &shares),
        tied_output: need.tied_output,
    };
    check_fits(need, devices, &placement)?;
    Ok(placement)
}

/// `--tensor-split`'s weights as shares summing to 1.
fn check_shares(s: &[f64], n: usize) -> Result<Vec<f64>, String> {
    if s.len() != n {
        return Err(format!(
            "--tensor-split has {} values for {n} devices: give one per device",
            s.len()
        ));
    }
    if let Some(bad) = s.iter().find(|v| !v.is_finite() || **v <= 0.0) {
        return Err(format!(
            "--tensor-split value {bad} is not a positive number (each device needs a share)"
        ));
    }
    let sum: f64 = s.iter().sum();
    Ok(s.iter().map(|v| v / sum).collect())
}

/// Shares by memory; equal where any device's memory is unknown.
fn memory_shares(devices: &[DeviceMemory]) -> Vec<f64> {
    let known: Option<Vec<u64>> = devices.iter().map(|d| d.bytes).collect();
    match known {
        Some(b) if b.iter().sum::<u64>() > 0 => {
            let sum = b.iter().sum::<u64>() as f64;
            b.iter().map(|&v| v as f64 / sum).collect()
        }
        _ => vec![1.0 / devices.len() as f64; devices.len()],
    }
}

/// Contiguous runs of layers by the rule in the module docs, each device
/// at least one layer (`layers.len() >= shares.len()`).
fn layer_runs(layers: &[u64], shares: &[f64]) -> Vec<Range<usize>> {
    let (n, total) = (shares.len(), layers.iter().sum::<u64>().max(1) as f64);
    let mut runs = Vec::with_capacity(n);
    let (mut d, mut start, mut share_end, mut before) = (0, 0, shares[0], 0u64);
    for (i, &b) in layers.iter().enumerate() {
        let middle = (before as f64 + b as f64 / 2.0) / total;
        before += b;
        // Layers i.. must leave one for each device after d.
        let keep_one_each = layers.len() - i < n - d;
        if d + 1 < n && i > start && (middle > share_end || keep_one_each) {
            runs.push(start..i);
            (d, start) = (d + 1, i);
            share_end += shares[d];
        }
    }
    runs.push(start..layers.len());
    runs
}

fn check_fits(need: &Need, devices: &[DeviceMemory], p: &Placement) -> Result<(), String> {
    let n = devices.len();
    let gib = |b: u64| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64);
    let on: Vec<u64> = (0..n).map(|d| need.on_device(d, n, &p.layers[d])).collect();
    let known: Option<Vec<u64>> = devices.iter().map(|d| d.bytes).collect();
    if let Some(memory) = &known {
        let (needed, have) = (on.iter().sum::<u64>(), memory.iter().sum::<u64>());
        if needed > have {
            let each: Vec<String> = devices
                .iter()
                .zip(memory)
                .map(|(d, &m)| format!("{} {}", d.name, gib(m)))
                .collect();
            let (fit, have_what) = if n == 1 {
                ("the model does not fit the device", "it has")
            } else {
                ("the model does not fit the devices together", "they have")
            };
            return Err(format!(
                "{fit}: it needs {} (weights, KV cache and activations), {have_what} {} ({}); \
                 lower --ctx or --parallel, or use a smaller quantization",
                gib(needed),
                gib(have),
                each.join(", ")
            ));
        }
    }
    for (d, dev) in devices.iter().enumerate() {
        if let Some(m) = dev.bytes.filter(|&m| on[d] > m) {
            let r = &p.layers[d];
            return Err(format!(
                "device {d} ({}) would hold layers {}..{} ({}) but has {}: \
                 give it a smaller --tensor-split share",
                dev.name,
                r.start,
                r.end,
                gib(on[d]),
                gib(m)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn need(n_layer: usize, per_layer: u64) -> Need {
        Need {
            layers: vec![per_layer; n_layer],
            input: 0,
            output: 0,
            reserve: 0,
            tied_output: false,
        }
    }

    fn devices(memory: &[Option<u64>]) -> Vec<DeviceMemory> {
        memory
            .iter()
            .enumerate()
            .map(|(i, &bytes)| DeviceMemory {
                name: format!("gpu{i}"),
                bytes,
            })
            .collect()
    }

    #[test]
    fn layers_follow_memory() {
        let p = plan(
            &need(32, GIB),
            &devices(&[Some(80 * GIB), Some(80 * GIB)]),
            None,
        )
        .unwrap();
        assert_eq!(p.layers, vec![0..16, 16..32]);
        let p = plan(
            &need(32, GIB),
            &devices(&[Some(60 * GIB), Some(20 * GIB)]),
            None,
        )
        .unwrap();
        assert_eq!(p.layers, vec![0..24, 24..32]);
        // Unknown memory: equal shares, no fit check.
        let p = plan(&need(30, GIB), &devices(&[None, None, None]), None).unwrap();
        assert_eq!(p.layers, vec![0..10, 10..20, 20..30]);
    }

    #[test]
    fn tensor_split_overrides_memory() {
        let d = devices(&[Some(80 * GIB), Some(80 * GIB)]);
        let p = plan(&need(32, GIB), &d, Some(&[3.0, 1.0])).unwrap();
        assert_eq!(p.layers, vec![0..24, 24..32]);
        let p = plan(&need(8, GIB), &d, Some(&[1.0, 3.0])).unwrap();
        assert_eq!(p.layers, vec![0..2, 2..8]);
        // A share too small for a whole layer still gets one.
        let p = plan(&need(4, GIB), &d, Some(&[1000.0, 1.0])).unwrap();
        assert_eq!(p.layers, vec![0..3, 3..4]);
    }

    #[test]
    fn output_and_input_count_on_their_devices() {
        let n = Need {
            input: 5,
            output: 7,
            reserve: 1,
            tied_output: true,
            ..need(4, 10)
        };
        assert_eq!(n.on_device(0, 2, &(0..2)), 1 + 20 + 5);
        assert_eq!(n.on_device(1, 2, &(2..4)), 1 + 20 + 7 + 5);
        assert_eq!(n.on_device(0, 1, &(0..4)), 1 + 40 + 5 + 7);
    }

    #[test]
    fn what_does_not_fit_is_refused() {
        let e = plan(
            &need(80, GIB),
            &devices(&[Some(40 * GIB), Some(39 * GIB)]),
            None,
        )
        .unwrap_err();
        assert!(e.contains("does not fit the devices together"), "{e}");
        assert!(e.contains("80.00 GiB") && e.contains("79.00 GiB"), "{e}");
        // One device: the check of a single GPU before its upload.
        let e = plan(&need(80, GIB), &devices(&[Some(79 * GIB)]), None).unwrap_err();
        assert!(
            e.contains("does not fit the device: ") && e.contains("it has 79.00 GiB"),
            "{e}"
        );
        // Fits together, but not as the override splits it.
        let d = devices(&[Some(40 * GIB), Some(40 * GIB)]);
        let e = plan(&need(64, GIB), &d, Some(&[3.0, 1.0])).unwrap_err();
        assert!(e.contains("device 0 (gpu0) would hold layers 0..48"), "{e}");
    }

    #[test]
    fn bad_shares_are_refused() {
        let d = devices(&[None, None]);
        let n = need(8, GIB);
        for (shares, says) in [
            (&[1.0][..], "1 values for 2 devices"),
            (&[1.0, 2.0, 3.0][..], "3 values for 2 devices"),
            (&[1.0, 0.0][..], "value 0 is not a positive"),
            (&[-1.0, 2.0][..], "value -1 is not a positive"),
            (&[f64::NAN, 2.0][..], "NaN is not a positive"),
        ] {
            let e = plan(&n, &d, Some(shares)).unwrap_err();
            assert!(e.contains(says), "{shares:?}: {e}");
        }
        let e = plan(&need(1, GIB), &d, None).unwrap_err();
        assert!(e.contains("at least 2 layers"), "{e}");
    }
}
