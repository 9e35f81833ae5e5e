//! Recording: ops append dispatches to one open compute pass of one open
//! command encoder; nothing reaches the GPU until a result is read (or the
//! parameter arena fills, or an early submit's piece is full). A forward
//! pass is therefore one submission with no CPU wait between its ops.
//!
//! Per-dispatch parameters (sizes, eps, offsets) go into a CPU-side arena of
//! 64-byte slots, one per dispatch, and reach the GPU in ONE
//! `queue.write_buffer` just before each submit (the queue runs it after
//! the submissions before, which read the same slots); each dispatch selects its
//! slot with a dynamic uniform offset. Bind groups are created once per
//! (kernel, buffers) and cached: buffers live as long as the backend.
//!
//! On a hardware adapter a pass goes out in growing pieces while it is
//! recorded (`GpuOptions::early_submits`): the GPU starts on the first ops
//! while the host encodes the rest. Still no CPU wait between ops: only a
//! read waits.
//!
//! A read waits for its submission by polling the device without sleeping
//! on a hardware adapter (`spin`): the driver's sleeping wait cost each
//! token its wake-up.
//!
//! Profiling (`GpuOptions::profile`) gives each dispatch its own pass with
//! timestamp writes at its start and end, and waits after each submission
//! to add the times up per kernel.

use std::collections::HashMap;

use crate::backend::{BackendError, OpTime, Result, Stats};

use super::context::{Context, EARLY_SUBMIT_FIRST};
use super::kernels::{Kernel, PARAMS_BYTES, ParamBlock};
use super::pipelines::PipelineCache;

/// The longest a read polls without sleeping before it blocks (a long
/// prefill need not hold a core).
const SPIN_LIMIT: std::time::Duration = std::time::Duration::from_millis(200);

/// Dispatches one submission can hold before the arena forces a submit.
const MAX_DISPATCHES: u64 = 4096;

pub struct Recorder {
    encoder: Option<wgpu::CommandEncoder>,
    pass: Option<wgpu::ComputePass<'static>>,
    /// (MAX_DISPATCHES, stride) bytes: this submission's parameter slots.
    arena: Vec<u8>,
    n_dispatches: u64,
    /// Bytes between slots: the adapter's uniform offset alignment.
    stride: u64,
    param_buf: wgpu::Buffer,
    bind_groups: HashMap<(Kernel, Vec<u32>), wgpu::BindGroup>,
    /// Reused MAP_READ buffer for `read`, grown on demand.
    readback: Option<wgpu::Buffer>,
    profiler: Option<Profiler>,
    /// With early submits: the dispatches at which the open submission
    /// goes out, reset to `EARLY_SUBMIT_FIRST` by every read.
    early_limit: Option<u64>,
    pub stats: Stats,
}

/// Dispatches one profiled submission can time (two queries each, within
/// wgpu's 4096 per query set).
const PROFILED_DISPATCHES: u64 = 2048;

/// Timestamp queries around every dispatch, and the totals per kernel.
struct Profiler {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    readback: wgpu::Buffer,
    /// The kernel of each timed dispatch of the open submission.
    kernels: Vec<Kernel>,
    /// Nanoseconds per timestamp tick.
    period: f64,
    totals: HashMap<Kernel, (u64, f64)>,
}

impl Profiler {
    fn new(ctx: &Context) -> Self {
        let bytes = PROFILED_DISPATCHES * 2 * 8;
        Self {
            set: ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("dispatch times"),
                ty: wgpu::QueryType::Timestamp,
                count: (PROFILED_DISPATCHES * 2) as u32,
            }),
            resolve: ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("dispatch times"),
                size: bytes,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }),
            readback: ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("dispatch times readback"),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            kernels: Vec::new(),
            period: f64::from(ctx.queue.get_timestamp_period()),
            totals: HashMap::new(),
        }
    }

    /// Timestamp writes for the next dispatch's pass.
    fn writes(&mut self, kernel: Kernel) -> wgpu::ComputePassTimestampWrites<'_> {
        let i = self.kernels.len() as u32;
        self.kernels.push(kernel);
        wgpu::ComputePassTimestampWrites {
            query_set: &self.set,
            beginning_of_pass_write_index: Some(2 * i),
            end_of_pass_write_index: Some(2 * i + 1),
        }
    }

    /// Records copying this submission's timestamps out.
    fn resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        let n = 2 * self.kernels.len() as u32;
        encoder.resolve_query_set(&self.set, 0..n, &self.resolve, 0);
        encoder.copy_buffer_to_buffer(&self.resolve, 0, &self.readback, 0, u64::from(n) * 8);
    }

    /// After the submission: waits for it and adds its times up.
    fn collect(&mut self, ctx: &Context) -> Result<()> {
        let n = 2 * self.kernels.len() as u64;
        let slice = self.readback.slice(..n * 8);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        ctx.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| BackendError::DeviceLost(e.to_string()))?;
        rx.recv()
            .map_err(|_| BackendError::Other("timestamps were never mapped".into()))?
            .map_err(|e| BackendError::Other(format!("mapping timestamps: {e}")))?;
        {
            let view = slice
                .get_mapped_range()
                .map_err(|e| BackendError::Other(format!("timestamp view: {e}")))?;
            let ticks: &[u64] = bytemuck::cast_slice(&view);
            for (kernel, t) in self.kernels.iter().zip(ticks.chunks_exact(2)) {
                let e = self.totals.entry(*kernel).or_default();
                e.0 += 1;
                e.1 += t[1].saturating_sub(t[0]) as f64 * self.period * 1e-9;
            }
        }
        self.readback.unmap();
        self.kernels.clear();
        Ok(())
    }
}

impl Recorder {
    pub fn new(ctx: &Context) -> Self {
        // Each slot starts on the adapter's alignment (a power of two).
        let align = u64::from(ctx.limits.min_uniform_buffer_offset_alignment);
        let stride = PARAMS_BYTES.next_multiple_of(align);
        let param_buf = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("dispatch params"),
            size: stride * MAX_DISPATCHES,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Self {
            encoder: None,
            pass: None,
            arena: Vec::with_capacity((stride * MAX_DISPATCHES) as usize),
            n_dispatches: 0,
            stride,
            param_buf,
            bind_groups: HashMap::new(),
            readback: None,
            profiler: ctx.profile.then(|| Profiler::new(ctx)),
            early_limit: ctx.early_submits.then_some(EARLY_SUBMIT_FIRST),
            stats: Stats::default(),
        }
    }

    /// Device time per kernel so far (profiling only; empty otherwise).
    pub fn op_times(&self) -> Vec<OpTime> {
        let Some(p) = &self.profiler else {
            return Vec::new();
        };
        let mut v: Vec<OpTime> = p
            .totals
            .iter()
            .map(|(k, &(calls, seconds))| OpTime {
                kernel: k.label(),
                calls,
                seconds,
            })
            .collect();
        v.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        v
    }

    /// The kernels timed so far (profiling only; empty otherwise).
    pub fn kernels_run(&self) -> Vec<Kernel> {
        self.profiler
            .as_ref()
            .map_or_else(Vec::new, |p| p.totals.keys().copied().collect())
    }

    fn encoder(&mut self, ctx: &Context) -> &mut wgpu::CommandEncoder {
        self.encoder.get_or_insert_with(|| {
            ctx.device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("step"),
                })
        })
    }

    fn end_pass(&mut self) {
        self.pass = None;
    }

    /// Records one dispatch of `kernel` over `groups` workgroups.
    /// `buffers` are (tensor id, buffer) in the kernel's binding order.
    pub fn record(
        &mut self,
        ctx: &Context,
        pipelines: &mut PipelineCache,
        kernel: Kernel,
        params: &ParamBlock,
        buffers: &[(u32, wgpu::BufferBinding)],
        groups: u64,
    ) -> Result<()> {
        if groups == 0 {
            return Ok(());
        }
        let max_dim = u64::from(ctx.limits.max_compute_workgroups_per_dimension);
        let x = groups.min(max_dim);
        let y = groups.div_ceil(x);
        if y > max_dim {
            return Err(BackendError::TooLarge {
                what: format!("{kernel:?} dispatch (workgroups)"),
                bytes: groups,
                limit: max_dim * max_dim,
            });
        }
        let full = match self.profiler {
            Some(ref p) => p.kernels.len() as u64 == PROFILED_DISPATCHES,
            None => self.n_dispatches == MAX_DISPATCHES,
        };
        if full || self.n_dispatches == MAX_DISPATCHES {
            self.submit(ctx)?;
        }
        if let Some(limit) = self.early_limit
            && self.n_dispatches >= limit
        {
            self.submit(ctx)?;
            self.early_limit = Some((2 * limit).min(MAX_DISPATCHES));
        }
        let offset = self.n_dispatches * self.stride;
        self.arena.resize(offset as usize, 0);
        self.arena.extend_from_slice(bytemuck::cast_slice(params));
        self.n_dispatches += 1;

        let pipeline =
            pipelines.get_or_build(&ctx.device, kernel, ctx.features, ctx.shader_bounds_checks);
        let key = (
            kernel,
            buffers.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        );
        let param_buf = &self.param_buf;
        let bind_group = self.bind_groups.entry(key).or_insert_with(|| {
            let mut entries = vec![wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: param_buf,
                    offset: 0,
                    size: wgpu::BufferSize::new(PARAMS_BYTES),
                }),
            }];
            for (i, (_, b)) in buffers.iter().enumerate() {
                entries.push(wgpu::BindGroupEntry {
                    binding: i as u32 + 1,
                    resource: wgpu::BindingResource::Buffer(b.clone()),
                });
            }
            ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(&kernel.label()),
                layout: &pipeline.layout,
                entries: &entries,
            })
        });
        if self.profiler.is_some() {
            // Its own pass, timed from start to end.
            self.pass = None;
        }
        if self.pass.is_none() {
            let enc = self.encoder.get_or_insert_with(|| {
                ctx.device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("step"),
                    })
            });
            let pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("ops"),
                timestamp_writes: self.profiler.as_mut().map(|p| p.writes(kernel)),
            });
            self.pass = Some(pass.forget_lifetime());
        }
        let pass = self.pass.as_mut().expect("pass opened above");
        pass.set_pipeline(&pipeline.pipeline);
        pass.set_bind_group(0, &*bind_group, &[offset as u32]);
        pass.dispatch_workgroups(x as u32, y as u32, 1);
        self.stats.dispatches += 1;
        Ok(())
    }

    /// Records a copy of `bytes` into the start of `dst`, ordered after the
    /// ops recorded so far and before those recorded later.
    pub fn write(&mut self, ctx: &Context, (dst, at): (&wgpu::Buffer, u64), bytes: &[u8]) {
        let len = bytes.len().div_ceil(4) * 4;
        if len == 0 {
            return;
        }
        if self.encoder.is_none() {
            // Nothing recorded yet: the queue orders this before the next
            // submission, which is all the contract asks.
            let mut data = bytes.to_vec();
            data.resize(len, 0);
            ctx.queue.write_buffer(dst, at, &data);
            return;
        }
        // Ops are pending that may read `dst` as it was: stage the bytes
        // and copy inside the encoder so the order is kept.
        let staging = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("write staging"),
            size: len as u64,
            usage: wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: true,
        });
        {
            let mut view = staging
                .get_mapped_range_mut(..)
                .expect("a buffer mapped at creation maps");
            view.slice(..bytes.len()).copy_from_slice(bytes);
            view.slice(bytes.len()..)
                .copy_from_slice(&[0u8; 4][..len - bytes.len()]);
        }
        staging.unmap();
        self.end_pass();
        self.encoder(ctx)
            .copy_buffer_to_buffer(&staging, 0, dst, at, len as u64);
    }

    /// Submits everything recorded, without waiting (unless profiling).
    pub fn submit(&mut self, ctx: &Context) -> Result<()> {
        self.end_pass();
        let Some(mut encoder) = self.encoder.take() else {
            return Ok(());
        };
        if !self.arena.is_empty() {
            ctx.queue.write_buffer(&self.param_buf, 0, &self.arena);
        }
        let timed = self
            .profiler
            .as_ref()
            .is_some_and(|p| !p.kernels.is_empty());
        if timed && let Some(p) = &self.profiler {
            p.resolve(&mut encoder);
        }
        ctx.queue.submit([encoder.finish()]);
        self.stats.submissions += 1;
        self.arena.clear();
        self.n_dispatches = 0;
        match &mut self.profiler {
            Some(p) if timed => p.collect(ctx),
            _ => Ok(()),
        }
    }

    /// Submits everything recorded plus a copy of `src`'s first `out.len()`
    /// bytes, waits, and returns them: one submission per step.
    pub fn read(
        &mut self,
        ctx: &Context,
        (src, at): (&wgpu::Buffer, u64),
        out: &mut [u8],
    ) -> Result<()> {
        let len = out.len();
        self.read_parts(ctx, &[(src, at, len)], out)
    }

    /// [`Recorder::read`] of several buffers in one submission: each part
    /// `(buffer, offset, len)` copied in turn into the next `len` bytes of
    /// `out` (whose length is their sum).
    pub fn read_parts(
        &mut self,
        ctx: &Context,
        parts: &[(&wgpu::Buffer, u64, usize)],
        out: &mut [u8],
    ) -> Result<()> {
        // Copies move whole words: each part's place in the readback buffer
        // starts on one.
        let words = |len: usize| (len.div_ceil(4) * 4) as u64;
        let len: u64 = parts.iter().map(|&(_, _, n)| words(n)).sum();
        if len == 0 {
            return self.wait(ctx);
        }
        if self.readback.as_ref().is_none_or(|b| b.size() < len) {
            self.readback = Some(ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("readback"),
                size: len.next_power_of_two(),
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
        }
        self.end_pass();
        let readback = self.readback.clone().expect("created above");
        let mut dst = 0;
        for &(src, at, n) in parts {
            self.encoder(ctx)
                .copy_buffer_to_buffer(src, at, &readback, dst, words(n));
            dst += words(n);
        }
        self.submit(ctx)?;
        self.restart_early_submits();
        let slice = readback.slice(..len);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        let mapped = match spin(ctx, &rx)? {
            Some(r) => r,
            None => {
                self.wait(ctx)?;
                rx.recv()
                    .map_err(|_| BackendError::Other("readback was never mapped".into()))?
            }
        };
        mapped.map_err(|e| BackendError::Other(format!("mapping the readback buffer: {e}")))?;
        {
            let view = slice
                .get_mapped_range()
                .map_err(|e| BackendError::Other(format!("readback view: {e}")))?;
            let (mut from, mut to) = (0, 0);
            for &(_, _, n) in parts {
                out[to..to + n].copy_from_slice(&view[from..from + n]);
                from += words(n) as usize;
                to += n;
            }
        }
        readback.unmap();
        Ok(())
    }

    /// The next pass starts with a small piece again.
    fn restart_early_submits(&mut self) {
        if self.early_limit.is_some() {
            self.early_limit = Some(EARLY_SUBMIT_FIRST);
        }
    }

    /// Submits what is recorded and blocks until the GPU is idle.
    pub fn wait(&mut self, ctx: &Context) -> Result<()> {
        self.submit(ctx)?;
        self.restart_early_submits();
        ctx.take_error()?;
        ctx.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| match e {
                wgpu::PollError::Timeout => BackendError::Other("GPU timed out".into()),
                other => BackendError::DeviceLost(other.to_string()),
            })?;
        ctx.take_error()
    }
}

/// On a hardware adapter, polls the device without sleeping until `rx`
/// has the mapping's result, for up to `SPIN_LIMIT`; None on a software
/// one (it needs the cores) or past the limit. Sleeping in the driver's
/// wait costs every token its wake-up and a slower core after it, for the
/// recording and submission of the next token too (docs/perf-notes.md).
fn spin(
    ctx: &Context,
    rx: &std::sync::mpsc::Receiver<std::result::Result<(), wgpu::BufferAsyncError>>,
) -> Result<Option<std::result::Result<(), wgpu::BufferAsyncError>>> {
    if ctx.report.software {
        return Ok(None);
    }
    let start = std::time::Instant::now();
    while start.elapsed() < SPIN_LIMIT {
        ctx.device
            .poll(wgpu::PollType::Poll)
            .map_err(|e| BackendError::DeviceLost(e.to_string()))?;
        if let Ok(r) = rx.try_recv() {
            ctx.take_error()?;
            return Ok(Some(r));
        }
        std::hint::spin_loop();
    }
    Ok(None)
}
