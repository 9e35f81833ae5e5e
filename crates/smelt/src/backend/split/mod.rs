//! A layer split: one model over several backends (GPU adapters), each
//! running a contiguous run of layers with their weights and KV cache, as
//! llama.cpp's `--split-mode layer` does.
//!
//! [`SplitBackend`] is itself a [`Backend`], so model code runs on it
//! unchanged, as ggml's scheduler runs one graph over several backends:
//!
//! - **Placement.** Weights go where their GGUF names say (`placement`):
//!   layer N's with layer N, the input weights with the first layer, the
//!   output with the last. A layer's KV cache comes through
//!   [`Backend::alloc_in_layer`]. Activations ([`Backend::alloc`]) have a
//!   copy on every device.
//! - **Where an op runs.** On a device that holds all its weights and
//!   caches; of those, the one with the fewest bytes of its inputs to copy;
//!   on a tie the device of the previous op, or for an op on a weight kept
//!   on several devices (a tied embedding) the first of them, where a step
//!   starts.
//! - **Boundary copies.** Each tensor knows which devices hold its current
//!   bytes (`residency`). An op that reads bytes its device lacks copies
//!   them first: [`Backend::read`] on the device that holds them (which
//!   submits what that device recorded, copies to a mapped staging buffer
//!   and waits on that device only), then [`Backend::write`] on this one
//!   (a queue write, or a staged copy inside its open encoder so that the
//!   ops recorded before stay ordered before it). Neither device is
//!   otherwise synchronized: a forward pass is one submission per device
//!   (in pieces with early submits, `GpuOptions::early_submits`).
//!   Host writes (token ids, positions) go to every device.

mod ops;
mod placement;
pub mod plan;
mod residency;

use std::time::Instant;

pub use placement::Placement;
use residency::{Devices, Residency, device_bit};

use super::{
    AttentionParams, Backend, BackendError, Caps, Copies, DeviceStats, MoeParams, Op, OpTime,
    Result, RopeParams, Stats, Tensor, WeightData, WeightInput,
};
use crate::quant::GgmlType;

/// How a split runs.
#[derive(Clone, Copy, Debug, Default)]
pub struct SplitOptions {
    /// Time each boundary copy alone (`Copies::seconds`): the source device
    /// is synchronized first, which costs a submission, so this is for
    /// measuring (`--perf`), not for speed.
    pub time_copies: bool,
}

pub struct SplitBackend {
    devices: Vec<Device>,
    placement: Placement,
    /// Every handle given out, by its id.
    tensors: Vec<Entry>,
    /// The device of the previous op.
    current: usize,
    opts: SplitOptions,
    /// Host bytes of a copy, reused.
    staging: Vec<u8>,
}

struct Device {
    backend: Box<dyn Backend>,
    copies_in: Copies,
}

/// One tensor of the split: a copy per device that keeps it.
struct Entry {
    /// Per device, its handle there.
    local: Vec<Option<Tensor>>,
    /// The devices with a copy.
    on: Devices,
    residency: Residency,
    /// A weight's GGUF name, for errors and tie-breaking.
    weight: Option<String>,
}

impl SplitBackend {
    /// A split over `devices`, one per entry of `placement.layers`.
    pub fn new(
        devices: Vec<Box<dyn Backend>>,
        placement: Placement,
        opts: SplitOptions,
    ) -> Result<Self> {
        if devices.len() != placement.n_devices() || devices.is_empty() || devices.len() > 64 {
            return Err(BackendError::Other(format!(
                "a split over {} devices with {} layer runs (1 to 64 devices, one run each)",
                devices.len(),
                placement.n_devices()
            )));
        }
        Ok(Self {
            devices: devices
                .into_iter()
                .map(|backend| Device {
                    backend,
                    copies_in: Copies::default(),
                })
                .collect(),
            placement,
            tensors: Vec::new(),
            current: 0,
            opts,
            staging: Vec::new(),
        })
    }

    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    fn all(&self) -> Devices {
        if self.devices.len() == 64 {
            !0
        } else {
            (1 << self.devices.len()) - 1
        }
    }

    fn entry(&self, t: Tensor) -> Result<&Entry> {
        self.tensors
            .get(t.id as usize)
            .ok_or_else(|| BackendError::Other(format!("tensor {} is not the split's", t.id)))
    }

    /// A new handle for tensors of `dtype, rows × cols` made on `on` by
    /// `make(device)`.
    fn add(
        &mut self,
        dtype: GgmlType,
        rows: usize,
        cols: usize,
        on: Devices,
        weight: Option<String>,
        mut make: impl FnMut(&mut dyn Backend) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let mut local = vec![None; self.devices.len()];
        for (d, dev) in self.devices.iter_mut().enumerate() {
            if on & device_bit(d) != 0 {
                local[d] = Some(make(dev.backend.as_mut())?);
            }
        }
        Ok(self.push(dtype, rows, cols, local, weight))
    }

    /// A new handle for `local`, the tensors of `dtype, rows × cols` made
    /// on the devices where it is `Some`.
    fn push(
        &mut self,
        dtype: GgmlType,
        rows: usize,
        cols: usize,
        local: Vec<Option<Tensor>>,
        weight: Option<String>,
    ) -> Tensor {
        let on = local
            .iter()
            .enumerate()
            .filter(|(_, t)| t.is_some())
            .fold(0, |on, (d, _)| on | device_bit(d));
        let t = Tensor {
            id: self.tensors.len() as u32,
            dtype,
            rows,
            cols,
        };
        self.tensors.push(Entry {
            local,
            on,
            residency: Residency::new(t.n_bytes() as u64, on),
            weight,
        });
        t
    }

    /// The devices that keep weight `name`.
    fn weight_devices(&self, name: &str) -> Result<Devices> {
        self.placement.devices_of(name).ok_or_else(|| {
            BackendError::Other(format!(
                "weight {name} belongs to no layer of the split's {}",
                self.placement.n_layers()
            ))
        })
    }

    /// Picks the device of an op that reads `reads` and writes `writes`,
    /// and brings there the bytes of `reads` it lacks.
    fn enter(&mut self, op: Op, reads: &[Tensor], writes: &[Tensor]) -> Result<usize> {
        let mut can = self.all();
        let mut shared_weight = false;
        for &t in reads.iter().chain(writes) {
            let e = self.entry(t)?;
            can &= e.on;
            shared_weight |= e.weight.is_some() && e.on.count_ones() > 1;
        }
        if can == 0 {
            let names: Vec<String> = reads
                .iter()
                .chain(writes)
                .filter_map(|t| self.tensors[t.id as usize].weight.clone())
                .collect();
            return Err(BackendError::Other(format!(
                "{op:?} reads tensors that no one device of the split holds ({})",
                names.join(", ")
            )));
        }
        let missing = |d: usize| -> u64 {
            reads
                .iter()
                .map(|t| {
                    self.tensors[t.id as usize]
                        .residency
                        .missing(d, t.n_bytes() as u64)
                })
                .sum()
        };
        let candidates = (0..self.devices.len()).filter(|&d| can & device_bit(d) != 0);
        let least = candidates.clone().map(missing).min().unwrap_or(0);
        let mut ties = candidates.filter(|&d| missing(d) == least);
        let first = ties.next().expect("one device can run it");
        let d = if !shared_weight && (first == self.current || ties.any(|d| d == self.current)) {
            self.current
        } else {
            first
        };
        for &t in reads {
            self.bring(t, d)?;
        }
        self.current = d;
        Ok(d)
    }

    /// Records that device `d` wrote `writes`.
    fn leave(&mut self, d: usize, writes: &[Tensor]) {
        for t in writes {
            self.tensors[t.id as usize]
                .residency
                .set(t.n_bytes() as u64, device_bit(d));
        }
    }

    /// Copies to device `d` the bytes of `t`'s view it lacks.
    fn bring(&mut self, t: Tensor, d: usize) -> Result<()> {
        let r = &self.tensors[t.id as usize].residency;
        let len = t.n_bytes() as u64;
        if r.holds(d, len) {
            return Ok(());
        }
        // The end of the last range d lacks: everything before it is
        // written, so it must be current there after.
        let end = r
            .within(len)
            .filter(|&(_, _, held)| held != 0 && held & device_bit(d) == 0)
            .map(|(_, end, _)| end)
            .last()
            .unwrap_or(0);
        let src = r.holder_of(end, self.current);
        if self.opts.time_copies {
            // The sources' work first, so that the copy is timed alone.
            for s in (0..self.devices.len()).filter(|&s| s != d && src.is_none_or(|x| x == s)) {
                self.devices[s].backend.synchronize()?;
            }
        }
        let start = Instant::now();
        let mut bytes = std::mem::take(&mut self.staging);
        bytes.resize(end as usize, 0);
        let copied = match src {
            Some(src) => {
                let from = ops::local_handle(&self.tensors, src, t);
                self.devices[src].backend.read(from, &mut bytes)
            }
            None => self.gather(t, &mut bytes),
        }
        .and_then(|()| {
            let to = ops::local_handle(&self.tensors, d, t);
            self.devices[d].backend.write(to, &bytes)
        });
        self.staging = bytes;
        copied?;
        let c = &mut self.devices[d].copies_in;
        c.count += 1;
        c.bytes += end;
        if self.opts.time_copies {
            c.seconds += start.elapsed().as_secs_f64();
        }
        self.tensors[t.id as usize].residency.add(d, end);
        Ok(())
    }

    /// `t`'s first `out.len()` bytes assembled from the devices that hold
    /// each range (no one device holds them all); ranges no device holds
    /// are left as they are.
    fn gather(&mut self, t: Tensor, out: &mut [u8]) -> Result<()> {
        let ranges: Vec<_> = self.tensors[t.id as usize]
            .residency
            .within(out.len() as u64)
            .filter(|&(_, _, held)| held != 0)
            .collect();
        let mut part = Vec::new();
        for (start, end, held) in ranges {
            let src = held.trailing_zeros() as usize;
            part.resize(end as usize, 0);
            let from = ops::local_handle(&self.tensors, src, t);
            self.devices[src].backend.read(from, &mut part)?;
            out[start as usize..end as usize].copy_from_slice(&part[start as usize..]);
        }
        Ok(())
    }
}

impl Residency {
    /// Bytes of `[0, len)` some device holds and `d` does not.
    fn missing(&self, d: usize, len: u64) -> u64 {
        self.within(len)
            .filter(|&(_, _, held)| held != 0 && held & device_bit(d) == 0)
            .map(|(start, end, _)| end - start)
            .sum()
    }
}
