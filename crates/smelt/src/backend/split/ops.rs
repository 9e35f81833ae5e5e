//! The contract on a layer split: memory calls go to the devices that keep
//! a tensor, each op to the one device [`SplitBackend::enter`] picks, with
//! the split's handles swapped for that device's.

use super::*;

impl SplitBackend {
    /// Runs `op` on the device `enter` picks for `reads` and `writes`:
    /// `f(device, local)` with `local` mapping the split's handles to that
    /// device's.
    fn run(
        &mut self,
        op: Op,
        reads: &[Tensor],
        writes: &[Tensor],
        f: impl FnOnce(&mut dyn Backend, &dyn Fn(Tensor) -> Tensor) -> Result<()>,
    ) -> Result<()> {
        let d = self.enter(op, reads, writes)?;
        let tensors = &self.tensors;
        let local = |t: Tensor| local_handle(tensors, d, t);
        let result = f(self.devices[d].backend.as_mut(), &local);
        self.leave(d, writes);
        result
    }
}

/// `t` (a view of a split tensor) on device `d`, which `enter` made sure
/// keeps it.
pub(super) fn local_handle(tensors: &[Entry], d: usize, t: Tensor) -> Tensor {
    let id = tensors[t.id as usize].local[d]
        .expect("enter picks a device that keeps every tensor of the op")
        .id;
    Tensor { id, ..t }
}

impl Backend for SplitBackend {
    fn name(&self) -> String {
        let names: Vec<String> = self.devices.iter().map(|d| d.backend.name()).collect();
        format!("layer split over {}", names.join(" + "))
    }

    fn caps(&self) -> Caps {
        let all: Vec<Caps> = self.devices.iter().map(|d| d.backend.caps()).collect();
        Caps {
            is_gpu: all.iter().all(|c| c.is_gpu),
            unified_memory: all.iter().all(|c| c.unified_memory),
            max_tensor_bytes: all.iter().map(|c| c.max_tensor_bytes).min().unwrap_or(0),
        }
    }

    fn supports(&self, op: Op, dtype: GgmlType) -> bool {
        self.devices.iter().all(|d| d.backend.supports(op, dtype))
    }

    fn alloc(&mut self, dtype: GgmlType, rows: usize, cols: usize) -> Result<Tensor> {
        let all = self.all();
        self.add(dtype, rows, cols, all, None, |b| b.alloc(dtype, rows, cols))
    }

    fn alloc_scratch(&mut self, dtype: GgmlType, rows: usize, cols: usize) -> Result<Tensor> {
        let all = self.all();
        self.add(dtype, rows, cols, all, None, |b| {
            b.alloc_scratch(dtype, rows, cols)
        })
    }

    fn alloc_in_layer(
        &mut self,
        layer: usize,
        dtype: GgmlType,
        rows: usize,
        cols: usize,
    ) -> Result<Tensor> {
        let d = self.placement.device_of_layer(layer).ok_or_else(|| {
            BackendError::Other(format!(
                "layer {layer} is past the split's {} layers",
                self.placement.n_layers()
            ))
        })?;
        self.add(dtype, rows, cols, device_bit(d), None, |b| {
            b.alloc_in_layer(layer, dtype, rows, cols)
        })
    }

    fn load_weight(
        &mut self,
        name: &str,
        dtype: GgmlType,
        rows: usize,
        cols: usize,
        data: WeightData,
    ) -> Result<Tensor> {
        let on = self.weight_devices(name)?;
        self.add(dtype, rows, cols, on, Some(name.into()), |b| {
            b.load_weight(name, dtype, rows, cols, data.clone())
        })
    }

    fn load_joined(&mut self, ws: &[WeightInput]) -> Result<Vec<Tensor>> {
        let Some(first) = ws.first() else {
            return Ok(Vec::new());
        };
        let on = self.weight_devices(&first.name)?;
        for w in ws {
            if self.weight_devices(&w.name)? != on {
                return Err(BackendError::Other(format!(
                    "{} and {} are loaded together but kept on different devices",
                    first.name, w.name
                )));
            }
        }
        let mut per_device = vec![None; self.devices.len()];
        for (d, dev) in self.devices.iter_mut().enumerate() {
            if on & device_bit(d) != 0 {
                per_device[d] = Some(dev.backend.load_joined(ws)?);
            }
        }
        Ok(ws
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let local = per_device
                    .iter()
                    .map(|ts| ts.as_ref().map(|ts| ts[i]))
                    .collect();
                self.push(w.dtype, w.rows, w.cols, local, Some(w.name.clone()))
            })
            .collect())
    }

    fn write(&mut self, t: Tensor, bytes: &[u8]) -> Result<()> {
        let on = self.entry(t)?.on;
        for d in (0..self.devices.len()).filter(|&d| on & device_bit(d) != 0) {
            let local = local_handle(&self.tensors, d, t);
            self.devices[d].backend.write(local, bytes)?;
        }
        self.tensors[t.id as usize]
            .residency
            .set(bytes.len() as u64, on);
        Ok(())
    }

    fn read(&mut self, t: Tensor, out: &mut [u8]) -> Result<()> {
        let src = self
            .entry(t)?
            .residency
            .holder_of(out.len() as u64, self.current);
        match src {
            Some(d) => {
                let local = local_handle(&self.tensors, d, t);
                self.devices[d].backend.read(local, out)
            }
            None => self.gather(t, out),
        }
    }

    fn read_all(&mut self, ts: &[Tensor], out: &mut [u8]) -> Result<()> {
        // One device holding them all reads them with its one sync.
        let mut holders = self.all();
        for &t in ts {
            let r = &self.entry(t)?.residency;
            holders &= (0..self.devices.len())
                .filter(|&d| r.holds(d, t.n_bytes() as u64))
                .fold(0, |on, d| on | device_bit(d));
        }
        if holders == 0 {
            let total: usize = ts.iter().map(Tensor::n_bytes).sum();
            if total != out.len() {
                return Err(BackendError::Other(format!(
                    "read of {total} bytes into {} bytes",
                    out.len()
                )));
            }
            let mut rest = out;
            for &t in ts {
                let (part, tail) = rest.split_at_mut(t.n_bytes());
                self.read(t, part)?;
                rest = tail;
            }
            return Ok(());
        }
        let d = if holders & device_bit(self.current) != 0 {
            self.current
        } else {
            holders.trailing_zeros() as usize
        };
        let local: Vec<Tensor> = ts
            .iter()
            .map(|&t| local_handle(&self.tensors, d, t))
            .collect();
        self.devices[d].backend.read_all(&local, out)
    }

    fn synchronize(&mut self) -> Result<()> {
        for dev in &mut self.devices {
            dev.backend.synchronize()?;
        }
        Ok(())
    }

    fn stats(&self) -> Stats {
        self.devices.iter().fold(Stats::default(), |sum, d| {
            let s = d.backend.stats();
            Stats {
                submissions: sum.submissions + s.submissions,
                dispatches: sum.dispatches + s.dispatches,
            }
        })
    }

    fn device_stats(&self) -> Vec<DeviceStats> {
        self.devices
            .iter()
            .map(|d| DeviceStats {
                name: d.backend.name(),
                stats: d.backend.stats(),
                copies_in: d.copies_in,
            })
            .collect()
    }

    fn op_times(&self) -> Vec<OpTime> {
        self.devices
            .iter()
            .enumerate()
            .flat_map(|(d, dev)| {
                dev.backend.op_times().into_iter().map(move |t| OpTime {
                    kernel: format!("{} (device {d})", t.kernel),
                    ..t
                })
            })
            .collect()
    }

    fn get_rows(&mut self, table: Tensor, ids: Tensor, out: Tensor) -> Result<()> {
        self.run(Op::GetRows, &[table, ids], &[out], |b, l| {
            b.get_rows(l(table), l(ids), l(out))
        })
    }

    fn set_rows(&mut self, src: Tensor, ids: Tensor, dst: Tensor) -> Result<()> {
        // The rows not written stay as they were: `dst` is read too.
        self.run(Op::SetRows, &[src, ids, dst], &[dst], |b, l| {
            b.set_rows(l(src), l(ids), l(dst))
        })
    }

    fn rms_norm(&mut self, x: Tensor, weight: Option<Tensor>, eps: f32, out: Tensor) -> Result<()> {
        let reads: Vec<Tensor> = std::iter::once(x).chain(weight).collect();
        self.run(Op::RmsNorm, &reads, &[out], |b, l| {
            b.rms_norm(l(x), weight.map(l), eps, l(out))
        })
    }

    fn rope(&mut self, x: Tensor, pos: Tensor, p: &RopeParams, out: Tensor) -> Result<()> {
        // The frequency factors are a tensor too: read, and local there.
        let reads: Vec<Tensor> = [x, pos].into_iter().chain(p.freq_factors).collect();
        self.run(Op::Rope, &reads, &[out], |b, l| {
            let local = RopeParams {
                freq_factors: p.freq_factors.map(l),
                ..*p
            };
            b.rope(l(x), l(pos), &local, l(out))
        })
    }

    fn matmul(&mut self, w: Tensor, x: Tensor, out: Tensor) -> Result<()> {
        self.run(Op::MatMul, &[w, x], &[out], |b, l| {
            b.matmul(l(w), l(x), l(out))
        })
    }

    fn matmuls(&mut self, ws: &[Tensor], x: Tensor, outs: &[Tensor]) -> Result<()> {
        let reads: Vec<Tensor> = ws.iter().copied().chain([x]).collect();
        self.run(Op::MatMul, &reads, outs, |b, l| {
            let ws: Vec<Tensor> = ws.iter().map(|&w| l(w)).collect();
            let outs: Vec<Tensor> = outs.iter().map(|&o| l(o)).collect();
            b.matmuls(&ws, l(x), &outs)
        })
    }

    fn attention(
        &mut self,
        q: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        pos: Tensor,
        seq: Tensor,
        p: &AttentionParams,
        out: Tensor,
    ) -> Result<()> {
        let reads = [q, k_cache, v_cache, pos, seq];
        self.run(Op::Attention, &reads, &[out], |b, l| {
            b.attention(l(q), l(k_cache), l(v_cache), l(pos), l(seq), p, l(out))
        })
    }

    fn add(&mut self, a: Tensor, b: Tensor, out: Tensor) -> Result<()> {
        self.run(Op::Add, &[a, b], &[out], |be, l| be.add(l(a), l(b), l(out)))
    }

    fn mul(&mut self, a: Tensor, b: Tensor, out: Tensor) -> Result<()> {
        self.run(Op::Mul, &[a, b], &[out], |be, l| be.mul(l(a), l(b), l(out)))
    }

    fn scale(&mut self, x: Tensor, s: f32, out: Tensor) -> Result<()> {
        self.run(Op::Scale, &[x], &[out], |b, l| b.scale(l(x), s, l(out)))
    }

    fn silu_mul(&mut self, gate: Tensor, up: Tensor, out: Tensor) -> Result<()> {
        self.run(Op::SiluMul, &[gate, up], &[out], |b, l| {
            b.silu_mul(l(gate), l(up), l(out))
        })
    }

    fn gelu_mul(&mut self, gate: Tensor, up: Tensor, out: Tensor) -> Result<()> {
        self.run(Op::GeluMul, &[gate, up], &[out], |b, l| {
            b.gelu_mul(l(gate), l(up), l(out))
        })
    }

    fn softmax(&mut self, x: Tensor, out: Tensor) -> Result<()> {
        self.run(Op::Softmax, &[x], &[out], |b, l| b.softmax(l(x), l(out)))
    }

    fn argmax(&mut self, x: Tensor, out: Tensor) -> Result<()> {
        self.run(Op::Argmax, &[x], &[out], |b, l| b.argmax(l(x), l(out)))
    }

    fn copy(&mut self, src: Tensor, dst: Tensor) -> Result<()> {
        self.run(Op::Copy, &[src], &[dst], |b, l| b.copy(l(src), l(dst)))
    }

    fn softcap(&mut self, x: Tensor, cap: f32, out: Tensor) -> Result<()> {
        self.run(Op::Softcap, &[x], &[out], |b, l| {
            b.softcap(l(x), cap, l(out))
        })
    }

    fn topk_moe(
        &mut self,
        logits: Tensor,
        p: &MoeParams,
        ids: Tensor,
        weights: Tensor,
    ) -> Result<()> {
        self.run(Op::TopKMoe, &[logits], &[ids, weights], |b, l| {
            b.topk_moe(l(logits), p, l(ids), l(weights))
        })
    }

    fn matmul_id(&mut self, w: Tensor, x: Tensor, ids: Tensor, out: Tensor) -> Result<()> {
        self.run(Op::MatMulId, &[w, x, ids], &[out], |b, l| {
            b.matmul_id(l(w), l(x), l(ids), l(out))
        })
    }

    fn moe_sum(&mut self, experts: Tensor, weights: Tensor, out: Tensor) -> Result<()> {
        self.run(Op::MoeSum, &[experts, weights], &[out], |b, l| {
            b.moe_sum(l(experts), l(weights), l(out))
        })
    }
}
