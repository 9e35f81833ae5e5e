//! The GPU backend on smelt's wgpu context: a compiled plan becomes fixed
//! buffers (one per planned slot, placeholder and variable), a parameter
//! block per dispatch in one uniform buffer, and bind groups, all made
//! once. A run writes the placeholders and the run state, records every
//! dispatch into one compute pass, copies the outputs to a readback buffer
//! and submits once.

pub mod dispatch;
pub mod map_wgsl;

use std::collections::HashMap;

use smelt::backend::gpu::{Context, GpuOptions};

use crate::cpu::RunState;
use crate::error::{NnError, Result};
use crate::plan::{Loc, Plan};
use dispatch::{Bind, Kernel};

pub struct Pipeline {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
}

/// Work done, for `--verbose`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub submissions: u64,
    pub dispatches: u64,
}

pub struct GpuDevice {
    pub(crate) ctx: Context,
    pipelines: HashMap<Kernel, Pipeline>,
    pub(crate) vars: Vec<wgpu::Buffer>,
    pub stats: Stats,
}

const USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

impl GpuDevice {
    pub fn new(opts: &GpuOptions) -> Result<Self> {
        let ctx = Context::open(opts)?;
        Ok(GpuDevice {
            ctx,
            pipelines: HashMap::new(),
            vars: Vec::new(),
            stats: Stats::default(),
        })
    }

    pub fn name(&self) -> String {
        format!("{} ({})", self.ctx.report.name, self.ctx.report.backend)
    }

    pub(crate) fn buffer(&self, label: &str, elements: usize) -> Result<wgpu::Buffer> {
        let bytes = (elements.max(1) * 4) as u64;
        if bytes > self.ctx.max_binding {
            return Err(NnError::Gpu(format!(
                "{label}: {bytes} bytes is over the adapter's binding limit of {}",
                self.ctx.max_binding
            )));
        }
        Ok(self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes,
            usage: USAGE,
            mapped_at_creation: false,
        }))
    }

    pub(crate) fn new_var(&mut self, name: &str, data: &[f32]) -> Result<()> {
        let buf = self.buffer(name, data.len())?;
        self.ctx
            .queue
            .write_buffer(&buf, 0, bytemuck::cast_slice(data));
        self.vars.push(buf);
        Ok(())
    }

    pub(crate) fn write_var(&mut self, id: usize, data: &[f32]) {
        self.ctx
            .queue
            .write_buffer(&self.vars[id], 0, bytemuck::cast_slice(data));
    }

    pub(crate) fn read_var(&mut self, id: usize, len: usize) -> Result<Vec<f32>> {
        let bytes = (len * 4) as u64;
        let readback = self.readback(bytes);
        let mut enc = self.ctx.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&self.vars[id], 0, &readback, 0, bytes);
        self.ctx.queue.submit([enc.finish()]);
        self.map(&readback, bytes)
    }

    fn readback(&self, bytes: u64) -> wgpu::Buffer {
        self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: bytes.max(4),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// Waits for the queue and reads `bytes` of a readback buffer.
    fn map(&self, buf: &wgpu::Buffer, bytes: u64) -> Result<Vec<f32>> {
        let slice = buf.slice(..bytes.max(4));
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.ctx
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| NnError::Gpu(e.to_string()))?;
        self.ctx.take_error()?;
        rx.recv()
            .map_err(|_| NnError::Gpu("the readback was never mapped".into()))?
            .map_err(|e| NnError::Gpu(format!("mapping the readback: {e}")))?;
        let out = {
            let view = slice
                .get_mapped_range()
                .map_err(|e| NnError::Gpu(format!("readback view: {e}")))?;
            bytemuck::cast_slice::<u8, f32>(&view)[..(bytes / 4) as usize].to_vec()
        };
        buf.unmap();
        Ok(out)
    }

    fn pipeline(&mut self, kernel: &Kernel) -> Result<&Pipeline> {
        if !self.pipelines.contains_key(kernel) {
            let text = kernel.text();
            let device = &self.ctx.device;
            let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
            let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(&kernel.label()),
                source: wgpu::ShaderSource::Wgsl(text.into()),
            });
            let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&kernel.label()),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
            if let Some(e) = pollster::block_on(scope.pop()) {
                return Err(NnError::Gpu(format!("kernel {}: {e}", kernel.label())));
            }
            let layout = pipeline.get_bind_group_layout(0);
            self.pipelines
                .insert(kernel.clone(), Pipeline { pipeline, layout });
        }
        Ok(&self.pipelines[kernel])
    }
}

struct Recorded {
    kernel: Kernel,
    group: wgpu::BindGroup,
    groups: [u32; 3],
}

/// A plan's buffers, parameters and bind groups on the GPU.
pub struct GpuExec {
    feeds: Vec<wgpu::Buffer>,
    run_buf: wgpu::Buffer,
    recorded: Vec<Recorded>,
    readback: wgpu::Buffer,
    /// Each output: its buffer's source and where it lands in `readback`.
    outputs: Vec<(Loc, u64, u64)>,
    slots: Vec<wgpu::Buffer>,
    _params: Option<wgpu::Buffer>,
    _scratch: wgpu::Buffer,
}

impl GpuExec {
    pub fn new(dev: &mut GpuDevice, plan: &Plan, var_ids: &[usize]) -> Result<Self> {
        let slots = plan
            .slots
            .iter()
            .enumerate()
            .map(|(i, &n)| dev.buffer(&format!("slot {i}"), n))
            .collect::<Result<Vec<_>>>()?;
        let feeds = plan
            .feeds
            .iter()
            .map(|f| dev.buffer(&f.name, f.shape.iter().product()))
            .collect::<Result<Vec<_>>>()?;
        let run_buf = dev.buffer("run state", 4 + 2 * plan.n_adam)?;

        // Every dispatch, with its parameter block at an aligned offset.
        let align = dev.ctx.limits.min_uniform_buffer_offset_alignment.max(16) as usize;
        let mut all = Vec::new();
        let mut params: Vec<u8> = Vec::new();
        for step in &plan.steps {
            for d in step.op.gpu(&step.shapes) {
                let offset = params.len();
                if !d.params.is_empty() {
                    params.extend_from_slice(&d.params);
                    params.resize(offset + d.params.len().div_ceil(align) * align, 0);
                }
                all.push((step, d, offset));
            }
        }
        let scratch_len = all.iter().map(|(_, d, _)| d.scratch).max().unwrap_or(0);
        let scratch = dev.buffer("scratch", scratch_len)?;
        let params_buf = (!params.is_empty()).then(|| {
            let buf = dev.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("params"),
                size: params.len() as u64,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            dev.ctx.queue.write_buffer(&buf, 0, &params);
            buf
        });
        let mut recorded = Vec::with_capacity(all.len());
        for (step, d, offset) in all {
            let pipeline = dev.pipeline(&d.kernel)?;
            let layout = pipeline.layout.clone();
            let buffer_of = |l: Loc| -> &wgpu::Buffer {
                match l {
                    Loc::Slot(s) => &slots[s],
                    Loc::Var(v) => &dev.vars[var_ids[v]],
                    Loc::Feed(f) => &feeds[f],
                }
            };
            let mut entries = Vec::new();
            let mut binding = 0;
            if let Some(pb) = params_buf.as_ref().filter(|_| !d.params.is_empty()) {
                entries.push(wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: pb,
                        offset: offset as u64,
                        size: wgpu::BufferSize::new(d.params.len().div_ceil(16) as u64 * 16),
                    }),
                });
                binding = 1;
            }
            for b in &d.binds {
                let buf = match *b {
                    Bind::In(i) => buffer_of(step.ins[i]),
                    Bind::Out(o) => buffer_of(step.outs[o]),
                    Bind::Run => &run_buf,
                    Bind::Scratch => &scratch,
                };
                entries.push(wgpu::BindGroupEntry {
                    binding,
                    resource: buf.as_entire_binding(),
                });
                binding += 1;
            }
            let group = dev
                .ctx
                .device
                .create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &layout,
                    entries: &entries,
                });
            recorded.push(Recorded {
                kernel: d.kernel,
                group,
                groups: d.groups,
            });
        }
        let mut outputs = Vec::new();
        let mut at = 0u64;
        for (l, shape) in &plan.outputs {
            let bytes = (shape.iter().product::<usize>() * 4) as u64;
            outputs.push((*l, at, bytes));
            at += bytes;
        }
        let readback = dev.readback(at);
        dev.ctx.take_error()?;
        Ok(GpuExec {
            feeds,
            run_buf,
            recorded,
            readback,
            outputs,
            slots,
            _params: params_buf,
            _scratch: scratch,
        })
    }

    pub fn dispatches(&self) -> usize {
        self.recorded.len()
    }

    /// Wall time of each dispatch on its own (a submission and a wait
    /// each), summed by kernel: where a step's time goes. For finding
    /// limits, not for speed figures.
    pub fn profile(&self, dev: &mut GpuDevice) -> Result<Vec<(String, f64, usize)>> {
        let mut by_kernel: Vec<(String, f64, usize)> = Vec::new();
        for r in &self.recorded {
            let mut enc = dev.ctx.device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                let p = &dev.pipelines[&r.kernel];
                pass.set_pipeline(&p.pipeline);
                pass.set_bind_group(0, &r.group, &[]);
                pass.dispatch_workgroups(r.groups[0], r.groups[1], r.groups[2]);
            }
            let start = std::time::Instant::now();
            dev.ctx.queue.submit([enc.finish()]);
            dev.ctx
                .device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| NnError::Gpu(e.to_string()))?;
            let t = start.elapsed().as_secs_f64();
            let label = r.kernel.label();
            match by_kernel.iter_mut().find(|(l, _, _)| *l == label) {
                Some(e) => {
                    e.1 += t;
                    e.2 += 1;
                }
                None => by_kernel.push((label, t, 1)),
            }
        }
        by_kernel.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(by_kernel)
    }

    /// One run: one submission.
    pub fn run(
        &mut self,
        dev: &mut GpuDevice,
        var_ids: &[usize],
        feeds: &[&[f32]],
        run: &RunState,
    ) -> Result<Vec<Vec<f32>>> {
        let q = &dev.ctx.queue;
        for (buf, data) in self.feeds.iter().zip(feeds) {
            q.write_buffer(buf, 0, bytemuck::cast_slice(data));
        }
        let mut words = vec![run.step, run.seed, 0, 0];
        for a in &run.adam {
            words.extend(a.iter().map(|x| x.to_bits()));
        }
        q.write_buffer(&self.run_buf, 0, bytemuck::cast_slice(&words));
        let mut enc = dev.ctx.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            for r in &self.recorded {
                let p = &dev.pipelines[&r.kernel];
                pass.set_pipeline(&p.pipeline);
                pass.set_bind_group(0, &r.group, &[]);
                pass.dispatch_workgroups(r.groups[0], r.groups[1], r.groups[2]);
            }
        }
        for &(l, at, bytes) in &self.outputs {
            let src = match l {
                Loc::Slot(s) => &self.slots[s],
                Loc::Var(v) => &dev.vars[var_ids[v]],
                Loc::Feed(f) => &self.feeds[f],
            };
            enc.copy_buffer_to_buffer(src, 0, &self.readback, at, bytes);
        }
        q.submit([enc.finish()]);
        dev.stats.submissions += 1;
        dev.stats.dispatches += self.recorded.len() as u64;
        let total: u64 = self.outputs.iter().map(|o| o.2).sum();
        let flat = dev.map(&self.readback, total)?;
        Ok(self
            .outputs
            .iter()
            .map(|&(_, at, bytes)| flat[(at / 4) as usize..((at + bytes) / 4) as usize].to_vec())
            .collect())
    }
}
