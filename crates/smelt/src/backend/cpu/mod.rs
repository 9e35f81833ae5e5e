//! The CPU backend: the plain reference ops, and the fast multithreaded ones
//! checked against them.
//!
//! - [`CpuBackend::reference`] runs every op with the loops of
//!   [`reference`]: the oracle for every other backend.
//! - [`CpuBackend::new`] runs them on one persistent thread pool with
//!   vectorized kernels ([`fast`], `matmul`, `gemm8`, `attention`), weights
//!   kept in their GGUF type; [`CpuBackend::new_exact`] keeps every
//!   quantized matmul in ggml's order (bit for bit llama.cpp's numbers).
//!
//! Ops execute at once; there is nothing to record or submit.

mod attention;
mod attention_tiled;
mod fast;
mod gemm8;
mod gemmk;
mod kdot;
mod kdot_avx2;
pub mod kv_blocks;
mod matmul;
#[cfg(target_arch = "aarch64")]
mod neon;
pub mod pool;
mod q8;
mod q8_decode;
mod q8k;
pub mod reference;
mod simd;
mod store;
#[clippy::msrv = "1.89"]
mod vnni;

use super::{
    AttentionParams, Backend, BackendError, Caps, MoeParams, Op, Result, RopeParams, Tensor,
    WeightData, check,
};
use crate::quant::{self, GgmlType};
use kv_blocks::{BlockRows, BlockRowsMut};
use quant::can_dequantize;
use reference::{Rows, RowsMut};
pub use simd::Isa;
use store::{OutBuf, Store};

/// How the fast backend computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuOptions {
    /// Threads of the pool, the caller's included.
    pub threads: usize,
    /// Every quantized matmul in ggml's order (see [`CpuBackend::new_exact`]).
    pub exact: bool,
    /// The kernels' instruction set; one the CPU has.
    pub isa: Isa,
}

impl CpuOptions {
    /// `threads` threads, the fast order and the best instruction set.
    pub fn best(threads: usize) -> Self {
        Self {
            threads,
            exact: false,
            isa: Isa::detect(),
        }
    }

    /// [`CpuOptions::best`] changed by the environment: `SMELT_CPU_EXACT=1`
    /// asks for ggml's order, `SMELT_CPU_ISA=baseline` (or `avx2`, `avx512`, `neon`) for that
    /// instruction set's kernels, to compare them or to test one.
    pub fn from_env(threads: usize) -> Result<Self> {
        let mut o = Self::best(threads);
        o.exact = std::env::var_os("SMELT_CPU_EXACT").is_some_and(|v| v == "1");
        if let Some(name) = std::env::var_os("SMELT_CPU_ISA") {
            let name = name.to_string_lossy();
            o.isa = Isa::from_name(&name).ok_or_else(|| {
                BackendError::Other(format!(
                    "SMELT_CPU_ISA={name}: not an instruction set ({})",
                    Isa::names()
                ))
            })?;
        }
        Ok(o)
    }
}

/// The CPU backend.
pub struct CpuBackend {
    store: Store,
    /// The fast ops; `None` runs the reference ops.
    fast: Option<fast::Fast>,
    /// Reference-op scratch: one dequantized weight row, one row's scores.
    row: Vec<f32>,
    probs: Vec<f64>,
}

impl CpuBackend {
    /// The reference backend: plain, single-threaded, `f64` sums.
    pub fn reference() -> Self {
        Self {
            store: Store::default(),
            fast: None,
            row: Vec::new(),
            probs: Vec::new(),
        }
    }

    /// The fast backend on a pool of `n_threads` threads (the caller's
    /// included), with the options the environment sets
    /// ([`CpuOptions::from_env`]): by default quantized prefill matmuls take
    /// the interleaved GEMMs (`gemm8`, `gemmk`), not ggml's order, and the
    /// kernels the best instruction set the CPU has.
    pub fn new(n_threads: usize) -> Result<Self> {
        Self::with_options(&CpuOptions::from_env(n_threads)?)
    }

    /// The fast backend with every quantized matmul in ggml's order: bit
    /// for bit llama.cpp's CPU numbers and the GPU backend's ggml mode
    /// (prefill 1.4-1.7× slower than [`CpuBackend::new`]'s).
    pub fn new_exact(n_threads: usize) -> Result<Self> {
        Self::with_options(&CpuOptions {
            exact: true,
            ..CpuOptions::best(n_threads)
        })
    }

    /// The fast backend with these options; an instruction set the CPU
    /// lacks is an error.
    pub fn with_options(options: &CpuOptions) -> Result<Self> {
        if !Isa::available().contains(&options.isa) {
            return Err(BackendError::Other(format!(
                "this CPU cannot run the {} kernels",
                options.isa.name()
            )));
        }
        let fast = fast::Fast::new(options.threads, options.exact, options.isa)
            .map_err(|e| BackendError::Other(format!("cannot start CPU threads: {e}")))?;
        Ok(Self {
            fast: Some(fast),
            ..Self::reference()
        })
    }

    /// Threads the backend computes on.
    pub fn n_threads(&self) -> usize {
        self.fast.as_ref().map_or(1, |f| f.n_threads())
    }

    /// Runs `f` with `out` taken out of the store, putting it back after.
    fn with_out<R>(
        &mut self,
        out: Tensor,
        f: impl FnOnce(&mut Self, &mut OutBuf) -> Result<R>,
    ) -> Result<R> {
        let mut buf = self.store.take(out)?;
        let r = f(self, &mut buf);
        self.store.put(buf);
        r
    }
}

fn rows(store: &Store, t: Tensor) -> Result<Rows<'_>> {
    Ok(match t.dtype {
        GgmlType::F16 => Rows::F16(store.f16(t)?),
        GgmlType::Q8_0 => Rows::Q8_0(block_rows(store.bytes(t)?, t.cols)?),
        GgmlType::Q4_0 => Rows::Q4_0(block_rows(store.bytes(t)?, t.cols)?),
        _ => Rows::F32(store.f32(t)?),
    })
}

/// A cache's bytes as ggml blocks in rows of `cols` values.
fn block_rows<B: quant::Block>(bytes: &[u8], cols: usize) -> Result<BlockRows<'_, B>> {
    Ok(BlockRows {
        blocks: quant::as_blocks(bytes).map_err(|e| BackendError::Other(e.to_string()))?,
        group: kv_blocks::rotation(cols),
    })
}

/// A cache's bytes as ggml blocks in rows of `cols` values, for writing.
fn block_rows_mut<B: quant::Block>(bytes: &mut [u8], cols: usize) -> Result<BlockRowsMut<'_, B>> {
    Ok(BlockRowsMut {
        blocks: quant::as_blocks_mut(bytes).map_err(|e| BackendError::Other(e.to_string()))?,
        group: kv_blocks::rotation(cols),
    })
}

fn rows_mut(buf: &mut OutBuf, t: Tensor) -> Result<RowsMut<'_>> {
    Ok(match t.dtype {
        GgmlType::F16 => RowsMut::F16(buf.f16(t)),
        GgmlType::Q8_0 => RowsMut::Q8_0(block_rows_mut(buf.bytes(t), t.cols)?),
        GgmlType::Q4_0 => RowsMut::Q4_0(block_rows_mut(buf.bytes(t), t.cols)?),
        _ => RowsMut::F32(buf.f32(t)),
    })
}

/// Threads for the fast backend when none are asked for: the physical
/// cores (hyper-threads share a core's vector units, which the matmuls
/// keep busy), but no more than this process may run on.
pub fn default_threads() -> usize {
    let allowed = std::thread::available_parallelism().map_or(1, |n| n.get());
    physical_cores().unwrap_or(allowed).clamp(1, allowed)
}

/// Distinct cores by Linux's topology files: one `core_cpus_list` (or the
/// older `thread_siblings_list`) per core, shared by its hyper-threads.
fn physical_cores() -> Option<usize> {
    let mut cores = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir("/sys/devices/system/cpu").ok()? {
        let path = entry.ok()?.path();
        let name = path.file_name()?.to_str()?;
        if name
            .strip_prefix("cpu")
            .is_none_or(|n| n.parse::<u32>().is_err())
        {
            continue;
        }
        let topo = path.join("topology");
        let list = std::fs::read_to_string(topo.join("core_cpus_list"))
            .or_else(|_| std::fs::read_to_string(topo.join("thread_siblings_list")))
            .ok()?;
        cores.insert(list.trim().to_string());
    }
    (!cores.is_empty()).then_some(cores.len())
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        match self.fast {
            Some(_) => "cpu".into(),
            None => "cpu-ref".into(),
        }
    }

    fn caps(&self) -> Caps {
        Caps {
            is_gpu: false,
            unified_memory: true,
            max_tensor_bytes: isize::MAX as u64,
        }
    }

    fn supports(&self, op: Op, dtype: GgmlType) -> bool {
        match op {
            Op::GetRows | Op::MatMul => {
                (self.fast.is_some() && matmul::has_decoder(dtype)) || can_dequantize(dtype)
            }
            Op::SetRows | Op::Attention => matches!(
                dtype,
                GgmlType::F32 | GgmlType::F16 | GgmlType::Q8_0 | GgmlType::Q4_0
            ),
            Op::Copy => matches!(dtype, GgmlType::F32 | GgmlType::F16),
            Op::MatMulId => self.supports(Op::MatMul, dtype),
            Op::Argmax => dtype == GgmlType::F32,
            Op::Softcap | Op::TopKMoe | Op::MoeSum => dtype == GgmlType::F32,
            Op::RmsNorm
            | Op::Rope
            | Op::Add
            | Op::Mul
            | Op::Scale
            | Op::SiluMul
            | Op::GeluMul
            | Op::Softmax => dtype == GgmlType::F32,
        }
    }

    fn alloc(&mut self, dtype: GgmlType, rows: usize, cols: usize) -> Result<Tensor> {
        self.store.alloc(dtype, rows, cols)
    }

    fn load_weight(
        &mut self,
        name: &str,
        dtype: GgmlType,
        rows: usize,
        cols: usize,
        data: WeightData,
    ) -> Result<Tensor> {
        self.store.load_weight(name, dtype, rows, cols, data)
    }

    fn write(&mut self, t: Tensor, bytes: &[u8]) -> Result<()> {
        if bytes.len() > t.n_bytes() {
            return Err(BackendError::Other(format!(
                "write of {} bytes into a tensor of {}",
                bytes.len(),
                t.n_bytes()
            )));
        }
        self.with_out(t, |_, out| {
            out.bytes(t)[..bytes.len()].copy_from_slice(bytes);
            Ok(())
        })
    }

    fn read(&mut self, t: Tensor, out: &mut [u8]) -> Result<()> {
        let src = self.store.bytes(t)?;
        if out.len() > src.len() {
            return Err(BackendError::Other(format!(
                "read of {} bytes from a tensor of {}",
                out.len(),
                src.len()
            )));
        }
        out.copy_from_slice(&src[..out.len()]);
        Ok(())
    }

    fn synchronize(&mut self) -> Result<()> {
        Ok(())
    }

    fn get_rows(&mut self, table: Tensor, ids: Tensor, out: Tensor) -> Result<()> {
        check::get_rows(table, ids, out)?;
        self.with_out(out, |b, o| {
            let (t, i) = (b.store.bytes(table)?, b.store.i32(ids)?);
            match &mut b.fast {
                Some(f) => f.get_rows(t, table.dtype, table.cols, i, o.f32(out)),
                None => reference::get_rows(t, table.dtype, table.cols, i, o.f32(out)),
            }
        })
    }

    fn set_rows(&mut self, src: Tensor, ids: Tensor, dst: Tensor) -> Result<()> {
        check::set_rows(src, ids, dst)?;
        self.with_out(dst, |b, o| {
            let (s, i) = (b.store.f32(src)?, b.store.i32(ids)?);
            match &mut b.fast {
                Some(f) => f.set_rows(s, src.cols, i, rows_mut(o, dst)?),
                None => reference::set_rows(s, src.cols, i, rows_mut(o, dst)?),
            }
        })
    }

    fn rms_norm(&mut self, x: Tensor, weight: Option<Tensor>, eps: f32, out: Tensor) -> Result<()> {
        check::rms_norm(x, weight, out)?;
        self.with_out(out, |b, o| {
            let xs = b.store.f32(x)?;
            let w = weight.map(|w| b.store.f32(w)).transpose()?;
            match &mut b.fast {
                Some(f) => f.rms_norm(xs, x.cols, w, eps, o.f32(out)),
                None => reference::rms_norm(xs, x.cols, w, eps, o.f32(out)),
            }
            Ok(())
        })
    }

    fn rope(&mut self, x: Tensor, pos: Tensor, p: &RopeParams, out: Tensor) -> Result<()> {
        check::rope(x, pos, p, out)?;
        self.with_out(out, |b, o| {
            let ps = b.store.i32(pos)?;
            let factors = p.freq_factors.map(|f| b.store.f32(f)).transpose()?;
            let src = if x.id == out.id {
                None
            } else {
                Some(b.store.f32(x)?)
            };
            match &mut b.fast {
                Some(f) => f.rope(src, o.f32(out), ps, p, factors),
                None => reference::rope(src, o.f32(out), ps, p, factors),
            }
            Ok(())
        })
    }

    fn matmul(&mut self, w: Tensor, x: Tensor, out: Tensor) -> Result<()> {
        check::matmul(w, x, out)?;
        if !self.supports(Op::MatMul, w.dtype) {
            return Err(BackendError::Unsupported {
                backend: self.name(),
                op: Op::MatMul,
                dtype: w.dtype,
            });
        }
        self.with_out(out, |b, o| {
            let (ws, xs) = (b.store.bytes(w)?, b.store.f32(x)?);
            match &mut b.fast {
                Some(f) => f.matmul(ws, w.dtype, w.cols, xs, o.f32(out)),
                None => reference::matmul(ws, w.dtype, w.cols, xs, o.f32(out), &mut b.row),
            }
        })
    }

    fn matmuls(&mut self, ws: &[Tensor], x: Tensor, outs: &[Tensor]) -> Result<()> {
        let distinct = outs
            .iter()
            .enumerate()
            .all(|(i, o)| o.id != x.id && outs[..i].iter().all(|p| p.id != o.id));
        let shared = self.fast.is_some()
            && ws.len() == outs.len()
            && distinct
            && ws
                .iter()
                .all(|w| fast::Fast::shares_matmuls(w.dtype, w.cols));
        if !shared {
            for (&w, &out) in ws.iter().zip(outs) {
                self.matmul(w, x, out)?;
            }
            return Ok(());
        }
        for (&w, &out) in ws.iter().zip(outs) {
            check::matmul(w, x, out)?;
        }
        let mut bufs = Vec::with_capacity(outs.len());
        for &out in outs {
            match self.store.take(out) {
                Ok(b) => bufs.push(b),
                Err(e) => {
                    bufs.into_iter().for_each(|b| self.store.put(b));
                    return Err(e);
                }
            }
        }
        let r = (|| {
            let xs = self.store.f32(x)?;
            let mut ms = Vec::with_capacity(ws.len());
            for &w in ws {
                ms.push((self.store.bytes(w)?, w.dtype));
            }
            let mut os: Vec<&mut [f32]> =
                bufs.iter_mut().zip(outs).map(|(b, &o)| b.f32(o)).collect();
            let f = self.fast.as_mut().expect("checked above");
            f.matmuls(&ms, x.cols, xs, &mut os)
        })();
        bufs.into_iter().for_each(|b| self.store.put(b));
        r
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
        check::attention(q, k_cache, v_cache, pos, seq, p, out)?;
        self.with_out(out, |b, o| {
            let (qs, ps, ss) = (b.store.f32(q)?, b.store.i32(pos)?, b.store.i32(seq)?);
            let (k, v) = (rows(&b.store, k_cache)?, rows(&b.store, v_cache)?);
            let n_rows = k_cache.rows;
            match &mut b.fast {
                Some(f) => f.attention(qs, k, v, n_rows, ps, ss, p, o.f32(out)),
                None => reference::attention(qs, k, v, n_rows, ps, ss, p, o.f32(out), &mut b.probs),
            }
        })
    }

    fn add(&mut self, a: Tensor, b: Tensor, out: Tensor) -> Result<()> {
        self.binary(Op::Add, a, b, out, |x, y| x + y)
    }

    fn mul(&mut self, a: Tensor, b: Tensor, out: Tensor) -> Result<()> {
        self.binary(Op::Mul, a, b, out, |x, y| x * y)
    }

    fn scale(&mut self, x: Tensor, s: f32, out: Tensor) -> Result<()> {
        check::scale(x, out)?;
        self.with_out(out, |b, o| {
            let src = if x.id == out.id {
                None
            } else {
                Some(b.store.f32(x)?)
            };
            let o = o.f32(out);
            match src {
                Some(v) => o.iter_mut().zip(v).for_each(|(o, &v)| *o = v * s),
                None => o.iter_mut().for_each(|o| *o *= s),
            }
            Ok(())
        })
    }

    fn silu_mul(&mut self, gate: Tensor, up: Tensor, out: Tensor) -> Result<()> {
        self.glu(Op::SiluMul, gate, up, out)
    }

    fn gelu_mul(&mut self, gate: Tensor, up: Tensor, out: Tensor) -> Result<()> {
        self.glu(Op::GeluMul, gate, up, out)
    }

    fn softmax(&mut self, x: Tensor, out: Tensor) -> Result<()> {
        check::softmax(x, out)?;
        self.with_out(out, |b, o| {
            let xs = b.store.f32(x)?;
            match &mut b.fast {
                Some(f) => f.softmax(xs, x.cols, o.f32(out)),
                None => reference::softmax(xs, x.cols, o.f32(out)),
            }
            Ok(())
        })
    }

    fn argmax(&mut self, x: Tensor, out: Tensor) -> Result<()> {
        check::argmax(x, out)?;
        self.with_out(out, |b, o| {
            reference::argmax(b.store.f32(x)?, x.cols, o.i32(out));
            Ok(())
        })
    }

    fn softcap(&mut self, x: Tensor, cap: f32, out: Tensor) -> Result<()> {
        check::softcap(x, cap, out)?;
        self.with_out(out, |b, o| {
            let src = if x.id == out.id {
                None
            } else {
                Some(b.store.f32(x)?)
            };
            reference::softcap(src, cap, o.f32(out));
            Ok(())
        })
    }

    fn topk_moe(
        &mut self,
        logits: Tensor,
        p: &MoeParams,
        ids: Tensor,
        weights: Tensor,
    ) -> Result<()> {
        check::topk_moe(logits, p, ids, weights)?;
        let mut id_buf = self.store.take(ids)?;
        let r = self.with_out(weights, |b, o| {
            let l = b.store.f32(logits)?;
            reference::topk_moe(l, logits.cols, p, id_buf.i32(ids), o.f32(weights));
            Ok(())
        });
        self.store.put(id_buf);
        r
    }

    fn matmul_id(&mut self, w: Tensor, x: Tensor, ids: Tensor, out: Tensor) -> Result<()> {
        let n_expert = check::matmul_id(w, x, ids, out)?;
        if !self.supports(Op::MatMulId, w.dtype) {
            return Err(self.unsupported(Op::MatMulId, w.dtype));
        }
        self.with_out(out, |b, o| {
            let (ws, xs, is) = (b.store.bytes(w)?, b.store.f32(x)?, b.store.i32(ids)?);
            let (k, k_used) = (w.cols, ids.cols);
            match &mut b.fast {
                Some(f) => f.matmul_id(ws, w.dtype, k, n_expert, xs, is, k_used, o.f32(out)),
                None => reference::matmul_id(
                    ws,
                    w.dtype,
                    k,
                    n_expert,
                    xs,
                    is,
                    k_used,
                    o.f32(out),
                    &mut b.row,
                ),
            }
        })
    }

    fn moe_sum(&mut self, experts: Tensor, weights: Tensor, out: Tensor) -> Result<()> {
        check::moe_sum(experts, weights, out)?;
        self.with_out(out, |b, o| {
            let (e, w) = (b.store.f32(experts)?, b.store.f32(weights)?);
            reference::moe_sum(e, w, weights.cols, o.f32(out));
            Ok(())
        })
    }

    fn copy(&mut self, src: Tensor, dst: Tensor) -> Result<()> {
        check::copy(src, dst)?;
        self.with_out(dst, |b, o| {
            let s = rows(&b.store, src)?;
            match &mut b.fast {
                Some(f) => f.copy(s, rows_mut(o, dst)?),
                None => reference::copy(s, rows_mut(o, dst)?),
            }
            Ok(())
        })
    }
}

impl CpuBackend {
    fn glu(&mut self, op: Op, gate: Tensor, up: Tensor, out: Tensor) -> Result<()> {
        check::glu(op, gate, up, out)?;
        let gelu = op == Op::GeluMul;
        self.with_out(out, |b, o| {
            let (g, u) = (b.store.f32(gate)?, b.store.f32(up)?);
            match &mut b.fast {
                Some(f) => f.glu(g, u, gate.cols, o.f32(out), gelu),
                None if gelu => reference::glu(g, u, o.f32(out), reference::gelu),
                None => reference::glu(g, u, o.f32(out), reference::silu),
            }
            Ok(())
        })
    }

    fn binary(
        &mut self,
        op: Op,
        a: Tensor,
        bt: Tensor,
        out: Tensor,
        f: impl Fn(f32, f32) -> f32,
    ) -> Result<()> {
        check::binary(op, a, bt, out)?;
        self.with_out(out, |b, o| {
            let src = if a.id == out.id {
                None
            } else {
                Some(b.store.f32(a)?)
            };
            let bs = b.store.f32(bt)?;
            match &mut b.fast {
                Some(fast) => fast.binary(src, bs, o.f32(out), f),
                None => reference::binary(src, bs, o.f32(out), f),
            }
            Ok(())
        })
    }
}
