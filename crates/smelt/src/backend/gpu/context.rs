//! Adapters and devices: enumeration (for `smelt devices` and selection),
//! what each adapter can do, and opening a device with the features and
//! limits the kernels use.

use std::sync::{Arc, Mutex};

use crate::backend::{BackendError, Result};

use super::kernels::ShaderFeatures;
use super::kernels::matmul_coop::{CoopTile, coop_fits, coop_tile_fits};
use super::memory::{AdapterMemory, adapter_memory};

/// What an adapter is and can do, as `smelt devices` prints it.
#[derive(Clone, Debug)]
pub struct AdapterReport {
    /// Position in [`adapters`]' order: what `--device N` selects.
    pub index: usize,
    pub name: String,
    /// Discrete, integrated, virtual, CPU (software) or other.
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    /// Metal, Vulkan, DX12 or GL.
    pub backend: String,
    pub subgroups: bool,
    pub subgroup_sizes: (u32, u32),
    pub shader_f16: bool,
    pub cooperative_matrix: bool,
    pub timestamp_queries: bool,
    pub mappable_primary_buffers: bool,
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub max_compute_workgroup_storage_size: u32,
    pub max_compute_invocations_per_workgroup: u32,
    /// Host and device share memory (integrated and software adapters).
    pub unified_memory: bool,
    /// A software rasterizer (lavapipe, llvmpipe, WARP): used only when
    /// asked for by name or index.
    pub software: bool,
    /// The adapter's memory, where its API or the host says (`memory`).
    pub memory: Option<AdapterMemory>,
}

impl AdapterReport {
    fn new(index: usize, a: &wgpu::Adapter) -> Self {
        let info = a.get_info();
        let f = a.features();
        let l = a.limits();
        let software = info.device_type == wgpu::DeviceType::Cpu;
        // wgpu does not report memory heaps; integrated GPUs (Apple
        // silicon included) and software adapters share host memory.
        let unified_memory = matches!(
            info.device_type,
            wgpu::DeviceType::IntegratedGpu | wgpu::DeviceType::Cpu
        );
        Self {
            index,
            name: info.name.clone(),
            device_type: format!("{:?}", info.device_type),
            driver: info.driver.clone(),
            driver_info: info.driver_info.clone(),
            backend: format!("{:?}", info.backend),
            subgroups: f.contains(wgpu::Features::SUBGROUP),
            subgroup_sizes: (info.subgroup_min_size, info.subgroup_max_size),
            shader_f16: f.contains(wgpu::Features::SHADER_F16),
            cooperative_matrix: f.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX),
            timestamp_queries: f.contains(wgpu::Features::TIMESTAMP_QUERY),
            mappable_primary_buffers: f.contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS),
            max_buffer_size: l.max_buffer_size,
            max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
            max_compute_workgroup_storage_size: l.max_compute_workgroup_storage_size,
            max_compute_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
            unified_memory,
            software,
            memory: adapter_memory(a, unified_memory),
        }
    }

    /// A real GPU: what `auto` may pick.
    pub fn is_hardware(&self) -> bool {
        !self.software && matches!(self.device_type.as_str(), "DiscreteGpu" | "IntegratedGpu")
    }
}

/// Vulkan, Metal and DX12 unless `WGPU_BACKEND` names others (e.g. `gl`):
/// probing GL on a headless Linux machine only prints EGL noise.
fn backends() -> wgpu::Backends {
    wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY)
}

fn instance() -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    // No validation layers or debug labels in the hot path.
    desc.flags = wgpu::InstanceFlags::empty();
    desc.backends = backends();
    wgpu::Instance::new(desc)
}

/// Every adapter, in a stable order: as the drivers list them, GL (when
/// asked for) last. The drivers are asked once per process: choosing a
/// device and opening it see the same list, and driver layers that print
/// on every enumeration print once.
pub fn adapters() -> Vec<(AdapterReport, wgpu::Adapter)> {
    static LIST: std::sync::OnceLock<Vec<(AdapterReport, wgpu::Adapter)>> =
        std::sync::OnceLock::new();
    LIST.get_or_init(|| {
        let inst = instance();
        let mut list = pollster::block_on(inst.enumerate_adapters(backends()));
        list.sort_by_key(|a| a.get_info().backend == wgpu::Backend::Gl);
        list.into_iter()
            .enumerate()
            .map(|(i, a)| (AdapterReport::new(i, &a), a))
            .collect()
    })
    .clone()
}

/// Which features to use, of those the adapter has. Tests switch them off to
/// exercise the fallbacks.
#[derive(Clone, Copy, Debug)]
pub struct GpuOptions {
    /// `Some(i)`: adapter `i` of [`adapters`]; `None`: the best one.
    pub device: Option<usize>,
    pub allow_subgroups: bool,
    pub allow_shader_f16: bool,
    /// Write weights straight into mapped device memory where the adapter
    /// has unified memory and `MAPPABLE_PRIMARY_BUFFERS`.
    pub allow_zero_copy: bool,
    /// Keep wgpu's run-time bounds checks in the kernels. Off by default:
    /// the host checks every shape (see `pipelines::build`), and the checks
    /// cost up to half the time of a matmul. Tests run both ways.
    pub shader_bounds_checks: bool,
    /// The exact mode (`--exact`, [`GpuOptions::exact`]): a matmul's
    /// activations rounded as ggml rounds them (8-bit blocks for quantized
    /// weights, f16 for F16 weights) and ggml's CPU arithmetic bit for bit,
    /// to follow llama.cpp's numbers exactly. Off (the default, the fast
    /// mode): plain hardware arithmetic on f32 activations (cooperative
    /// matrices for prefill where the adapter has them), but for the
    /// quantized types' decode, which rounds them to 8-bit blocks for
    /// integer dot products as llama.cpp's GPU backends do.
    pub quantize_activations: bool,
    /// A binding limit for weights below the adapter's, to test weight
    /// splitting on any adapter; `None`: the adapter's.
    pub max_weight_binding_bytes: Option<u64>,
    /// A binding limit for every tensor below the adapter's, as an adapter
    /// with a small one has (weights are split under it, other tensors
    /// refused over it, and `Caps::max_tensor_bytes` reports it); `None`:
    /// the adapter's.
    pub max_binding_bytes: Option<u64>,
    /// Time every dispatch with timestamp queries (`Backend::op_times`),
    /// each in its own compute pass, waiting after each submission: for
    /// finding where the time goes, not for speed.
    pub profile: bool,
    /// Prefill on cooperative matrices (f16 operands) where the adapter has
    /// them and activations are not rounded as ggml's.
    pub allow_cooperative_matrix: bool,
    /// Submit a forward pass in growing pieces while it is recorded (the
    /// first after [`EARLY_SUBMIT_FIRST`] dispatches, then twice as many
    /// each time), so the GPU runs the first ops while the host still
    /// encodes the rest: wgpu's encoding costs a few µs a dispatch, which
    /// one submission per pass adds to every token. `None` (the default):
    /// on hardware adapters only; a software one runs the ops on the
    /// host's own cores, and there a pass stays one submission.
    pub early_submits: Option<bool>,
}

/// Dispatches before a pass's first early submission ([`GpuOptions::
/// early_submits`]): small, so the GPU starts soon.
pub const EARLY_SUBMIT_FIRST: u64 = 8;

impl Default for GpuOptions {
    fn default() -> Self {
        Self {
            device: None,
            allow_subgroups: true,
            allow_shader_f16: true,
            allow_zero_copy: true,
            shader_bounds_checks: false,
            quantize_activations: false,
            max_weight_binding_bytes: None,
            max_binding_bytes: None,
            allow_cooperative_matrix: true,
            profile: false,
            early_submits: None,
        }
    }
}

impl GpuOptions {
    /// The exact mode: ggml's rounding and arithmetic, bit for bit
    /// llama.cpp's CPU (see `quantize_activations`).
    pub fn exact() -> Self {
        Self {
            quantize_activations: true,
            ..Self::default()
        }
    }
}

/// An open device and what was enabled on it.
pub struct Context {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub report: AdapterReport,
    pub limits: wgpu::Limits,
    /// The largest buffer a tensor may have (`buffers::max_tensor_bytes`).
    pub max_binding: u64,
    /// The same for a weight part: `max_binding`, or the smaller test limit
    /// of `GpuOptions::max_weight_binding_bytes`.
    pub max_weight_binding: u64,
    pub features: ShaderFeatures,
    /// The limits hold `matmul_coop.wgsl`'s huge tiles too (`CoopTile`).
    pub coop_huge: bool,
    pub zero_copy: bool,
    pub shader_bounds_checks: bool,
    pub quantize_activations: bool,
    /// Dispatches are timed (`GpuOptions::profile` on an adapter with
    /// timestamp queries).
    pub profile: bool,
    /// A pass is submitted in pieces while recorded
    /// ([`GpuOptions::early_submits`]; never while profiling).
    pub early_submits: bool,
    /// The first uncaptured error or the device-lost reason, reported by the
    /// next call that waits on the device.
    pub error: Arc<Mutex<Option<BackendError>>>,
}

/// Ranks adapters for "the best GPU": discrete, integrated, then anything
/// else, non-GL first.
fn rank(r: &AdapterReport) -> u32 {
    let t = match r.device_type.as_str() {
        "DiscreteGpu" => 0,
        "IntegratedGpu" => 1,
        "VirtualGpu" => 2,
        _ => 3,
    };
    t * 2 + u32::from(r.backend == "Gl")
}

/// The adapter `auto` would use: the best hardware GPU, if any.
pub fn best_hardware() -> Option<AdapterReport> {
    best_hardware_of(adapters().iter().map(|(r, _)| r)).cloned()
}

/// [`best_hardware`] among adapters already listed: each listing probes
/// the drivers again (and Mesa prints its warnings again).
pub fn best_hardware_of<'a>(
    reports: impl IntoIterator<Item = &'a AdapterReport>,
) -> Option<&'a AdapterReport> {
    hardware_by_rank(reports).into_iter().next()
}

/// The hardware GPUs among `reports`, best first (as [`best_hardware_of`]
/// ranks them), in listing order within a rank.
pub fn hardware_by_rank<'a>(
    reports: impl IntoIterator<Item = &'a AdapterReport>,
) -> Vec<&'a AdapterReport> {
    let mut hardware: Vec<&AdapterReport> =
        reports.into_iter().filter(|r| r.is_hardware()).collect();
    hardware.sort_by_key(|r| rank(r));
    hardware
}

impl Context {
    pub fn open(opts: &GpuOptions) -> Result<Self> {
        let list = adapters();
        Self::open_in(list, opts)
    }

    /// [`Context::open`] on adapters already listed by [`adapters`].
    pub fn open_in(
        mut list: Vec<(AdapterReport, wgpu::Adapter)>,
        opts: &GpuOptions,
    ) -> Result<Self> {
        if list.is_empty() {
            return Err(BackendError::NoAdapter(
                "no Vulkan, Metal, DX12 or GL adapter was found".into(),
            ));
        }
        let pick = match opts.device {
            Some(i) => {
                if i >= list.len() {
                    return Err(BackendError::NoAdapter(format!(
                        "device {i} does not exist; `smelt devices` lists {} (0..{})",
                        list.len(),
                        list.len() - 1
                    )));
                }
                i
            }
            None => (0..list.len())
                .min_by_key(|&i| rank(&list[i].0))
                .unwrap_or(0),
        };
        let (report, adapter) = list.swap_remove(pick);
        let af = adapter.features();
        let mut features = ShaderFeatures {
            subgroups: opts.allow_subgroups && af.contains(wgpu::Features::SUBGROUP),
            shader_f16: opts.allow_shader_f16 && af.contains(wgpu::Features::SHADER_F16),
            fused_fma: false,
            fast_math: !opts.quantize_activations,
            coop: 0,
        };
        if opts.allow_cooperative_matrix
            && !opts.quantize_activations
            && features.subgroups
            && features.shader_f16
            && report.subgroup_sizes == (32, 32)
            && af.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
        {
            let fs = coop_fragment_size(&adapter.cooperative_matrix_properties());
            if fs != 0 && coop_fits(fs, &adapter.limits()) {
                features.coop = fs;
            }
        }
        let zero_copy = opts.allow_zero_copy
            && report.unified_memory
            && af.contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS);
        let mut required = wgpu::Features::empty();
        if features.subgroups {
            required |= wgpu::Features::SUBGROUP;
        }
        if features.shader_f16 {
            required |= wgpu::Features::SHADER_F16;
        }
        if zero_copy {
            required |= wgpu::Features::MAPPABLE_PRIMARY_BUFFERS;
        }
        let profile = opts.profile && af.contains(wgpu::Features::TIMESTAMP_QUERY);
        if profile {
            required |= wgpu::Features::TIMESTAMP_QUERY;
        }
        let mut experimental = wgpu::ExperimentalFeatures::disabled();
        if features.coop != 0 {
            required |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
            // SAFETY: wgpu marks cooperative matrices experimental: its
            // implementation may have bugs. Our one kernel that uses them
            // (matmul_coop.wgsl) loads and stores fragments only inside
            // workgroup arrays sized for them, in uniform control flow, at
            // a size and types the adapter lists; and the differential
            // tests check its results against the CPU on such adapters.
            experimental = unsafe { wgpu::ExperimentalFeatures::enabled() };
        }
        // Ask for everything the adapter allows: model weights want the
        // largest buffers and bindings it has.
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("smelt"),
            required_features: required,
            required_limits: limits.clone(),
            experimental_features: experimental,
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| BackendError::NoAdapter(format!("{}: {e}", report.name)))?;

        features.fused_fma = fma_is_fused(&device, &queue)?;

        let error = Arc::new(Mutex::new(None));
        let sink = Arc::clone(&error);
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let err = match e {
                wgpu::Error::OutOfMemory { .. } => BackendError::OutOfMemory {
                    what: "a GPU buffer".into(),
                    bytes: 0,
                },
                other => BackendError::Other(format!("GPU error: {other}")),
            };
            let mut slot = sink.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert(err);
        }));
        let sink = Arc::clone(&error);
        device.set_device_lost_callback(move |reason, msg| {
            if reason != wgpu::DeviceLostReason::Destroyed {
                let mut slot = sink.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert(BackendError::DeviceLost(format!("{reason:?}: {msg}")));
            }
        });
        let coop_huge =
            features.coop != 0 && coop_tile_fits(features.coop, CoopTile::Huge, &limits);
        let max_binding = super::buffers::max_tensor_bytes(&limits)
            .min(opts.max_binding_bytes.unwrap_or(u64::MAX));
        let max_weight_binding = max_binding.min(opts.max_weight_binding_bytes.unwrap_or(u64::MAX));
        let early_submits = !profile && opts.early_submits.unwrap_or(!report.software);
        Ok(Self {
            device,
            queue,
            report,
            limits,
            max_binding,
            max_weight_binding,
            features,
            coop_huge,
            zero_copy,
            shader_bounds_checks: opts.shader_bounds_checks,
            quantize_activations: opts.quantize_activations,
            profile,
            early_submits,
            error,
        })
    }

    /// The first error the device reported since the last check.
    pub fn take_error(&self) -> Result<()> {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        match slot.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The cooperative-matrix size `matmul_coop.wgsl` is built for: 16×16×16
/// (tensor cores) or else 8×8×8 (Metal), with f16 operands and f32 sums in
/// subgroup scope; 0 if the adapter lists neither.
fn coop_fragment_size(props: &[wgpu::CooperativeMatrixProperties]) -> u32 {
    use wgpu::CooperativeScalarType::{F16, F32};
    let has = |s: u32| {
        props.iter().any(|p| {
            (p.m_size, p.n_size, p.k_size) == (s, s, s) && p.ab_type == F16 && p.cr_type == F32
        })
    };
    [16, 8].into_iter().find(|&s| has(s)).unwrap_or(0)
}

/// Whether the device's `fma` rounds once, as x86's vfmadd (and so ggml's
/// compiled code) does. (1 + 2^-12)² - (1 + 2^-11) is 2^-24 exactly; a
/// product rounded first gives 0.
fn fma_is_fused(device: &wgpu::Device, queue: &wgpu::Queue) -> Result<bool> {
    const PROBE: &str = "
        @group(0) @binding(0) var<storage, read_write> v: array<f32, 4>;
        @compute @workgroup_size(1)
        fn main() {
            v[3] = fma(v[0], v[1], v[2]);
        }";
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("fma probe"),
        source: wgpu::ShaderSource::Wgsl(PROBE.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("fma probe"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: wgpu::PipelineCompilationOptions::default(),
        cache: None,
    });
    let usage =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let buf = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("fma probe"),
        size: 16,
        usage,
        mapped_at_creation: false,
    });
    let readback = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("fma probe readback"),
        size: 16,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let a = 1.0 + 2f32.powi(-12);
    let inputs = [a, a, -(1.0 + 2f32.powi(-11)), 0.0];
    queue.write_buffer(&buf, 0, bytemuck::cast_slice(&inputs));
    let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("fma probe"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: buf.as_entire_binding(),
        }],
    });
    let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
    {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(1, 1, 1);
    }
    enc.copy_buffer_to_buffer(&buf, 0, &readback, 0, 16);
    queue.submit([enc.finish()]);
    let slice = readback.slice(..);
    let (tx, rx) = std::sync::mpsc::channel();
    slice.map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|e| BackendError::DeviceLost(e.to_string()))?;
    rx.recv()
        .map_err(|_| BackendError::Other("the fma probe was never mapped".into()))?
        .map_err(|e| BackendError::Other(format!("mapping the fma probe: {e}")))?;
    let view = slice
        .get_mapped_range()
        .map_err(|e| BackendError::Other(format!("fma probe view: {e}")))?;
    let out: &[f32] = bytemuck::cast_slice(&view);
    Ok(out[3] == 2f32.powi(-24))
}
