//! Choosing a backend: `auto`, `gpu` or `cpu`, as `--backend` and
//! `--device` say on the command line.
//!
//! - [`auto`] uses the best *hardware* GPU (discrete, then integrated) and
//!   falls back to the CPU, saying so on stderr. Software adapters
//!   (lavapipe, llvmpipe, WARP) are never picked automatically: they are
//!   slower than the CPU backend.
//! - [`gpu`] uses the GPU it is given (`--device N` from `smelt devices`), or
//!   the best adapter, software ones included; it fails rather than fall
//!   back.
//! - [`cpu`] is the CPU backend on `threads` threads (default: the physical
//!   cores); `cpu-ref` its plain reference ops, for checking.

use std::str::FromStr;

use super::cpu::CpuBackend;
use super::gpu::{GpuBackend, GpuOptions, best_hardware};
use super::{Backend, BackendError, Result};

/// `--backend`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendKind {
    #[default]
    Auto,
    Gpu,
    Cpu,
    /// The CPU reference ops: slow, plain, the oracle.
    CpuRef,
}

impl FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "gpu" => Ok(Self::Gpu),
            "cpu" => Ok(Self::Cpu),
            "cpu-ref" => Ok(Self::CpuRef),
            other => Err(format!(
                "unknown backend {other:?}: use auto, gpu, cpu or cpu-ref"
            )),
        }
    }
}

/// The best hardware GPU, else the CPU (with a note on stderr).
pub fn auto(threads: Option<usize>) -> Result<Box<dyn Backend>> {
    auto_with(threads, &GpuOptions::default())
}

/// [`auto`] with the GPU options `base` (its `device` is ignored).
fn auto_with(threads: Option<usize>, base: &GpuOptions) -> Result<Box<dyn Backend>> {
    match best_hardware() {
        Some(r) => gpu(&GpuOptions {
            device: Some(r.index),
            ..*base
        }),
        None => {
            eprintln!(
                "smelt: no hardware GPU found; using the CPU backend \
                 (`smelt devices` lists adapters; --backend gpu uses a software one)"
            );
            cpu(threads)
        }
    }
}

/// The same choices on the trait object, for library users:
/// `<dyn Backend>::auto(None)`, `<dyn Backend>::gpu(&GpuOptions::default())`,
/// `<dyn Backend>::cpu(Some(4))`.
impl dyn Backend {
    /// See [`auto`].
    pub fn auto(threads: Option<usize>) -> Result<Box<dyn Backend>> {
        auto(threads)
    }

    /// See [`gpu`].
    pub fn gpu(opts: &GpuOptions) -> Result<Box<dyn Backend>> {
        gpu(opts)
    }

    /// See [`cpu`].
    pub fn cpu(threads: Option<usize>) -> Result<Box<dyn Backend>> {
        cpu(threads)
    }
}

/// A GPU backend, or an error saying why there is none.
pub fn gpu(opts: &GpuOptions) -> Result<Box<dyn Backend>> {
    Ok(Box::new(GpuBackend::new(opts)?))
}

/// The fast CPU backend on `threads` threads (default: the physical cores).
pub fn cpu(threads: Option<usize>) -> Result<Box<dyn Backend>> {
    let n = threads.unwrap_or_else(super::cpu::default_threads);
    if n == 0 {
        return Err(BackendError::Other("--threads must be at least 1".into()));
    }
    Ok(Box::new(CpuBackend::new(n)?))
}

/// What `--backend KIND [--device N] [--threads N]` asks for. A device
/// index implies the GPU; with a CPU backend it is an error. `threads`
/// sizes the CPU backend's pool.
pub fn select(
    kind: BackendKind,
    device: Option<usize>,
    threads: Option<usize>,
) -> Result<Box<dyn Backend>> {
    select_with(kind, device, threads, &GpuOptions::default())
}

/// [`select`] with the GPU options `base` (`--gpu-f32-acts`), its
/// `device` replaced by `device`.
pub fn select_with(
    kind: BackendKind,
    device: Option<usize>,
    threads: Option<usize>,
    base: &GpuOptions,
) -> Result<Box<dyn Backend>> {
    match (kind, device) {
        (BackendKind::Cpu | BackendKind::CpuRef, Some(_)) => Err(BackendError::Other(
            "--device selects a GPU; it cannot go with a CPU backend".into(),
        )),
        (BackendKind::Cpu, None) => cpu(threads),
        (BackendKind::CpuRef, None) => Ok(Box::new(CpuBackend::reference())),
        (BackendKind::Auto, None) => auto_with(threads, base),
        (_, device) => gpu(&GpuOptions { device, ..*base }),
    }
}
