//! Choosing a backend: `auto`, `gpu` or `cpu`, as `--backend`, `--device`
//! and `--exact` say on the command line.
//!
//! - [`auto`] (the default) uses the best *hardware* GPU (discrete, then
//!   integrated) and falls back to the CPU; [`choose`] says which, for the
//!   one line a command prints. Software adapters (lavapipe, llvmpipe,
//!   WARP) are never picked automatically: they are slower than the CPU
//!   backend.
//! - [`gpu`] uses the GPU it is given (`--device N` from `smelt devices`), or
//!   the best adapter, software ones included; it fails rather than fall
//!   back.
//! - [`cpu`] is the CPU backend on `threads` threads (default: the physical
//!   cores); `cpu-ref` its plain reference ops, for checking.
//!
//! The GPU runs in its fast mode unless asked for the exact one
//! ([`GpuOptions::exact`], `--exact`: ggml's arithmetic bit for bit).

use std::str::FromStr;

use super::cpu::CpuBackend;
use super::gpu::{
    AdapterReport, GpuBackend, GpuOptions, adapters, best_hardware_of, hardware_by_rank,
};
use super::split::{Placement, SplitBackend, SplitOptions};
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

/// What [`choose`] picked, for the one line a command prints about it
/// (`smelt: {choice}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// A GPU adapter: its index in [`adapters`](super::gpu::adapters)
    /// (`smelt devices`), name and API, and the arithmetic.
    Gpu {
        index: usize,
        name: String,
        api: String,
        exact: bool,
    },
    /// The fast CPU backend. `fallback` says why `auto` took it: no
    /// hardware GPU, or the one it found would not open.
    Cpu {
        threads: usize,
        exact: bool,
        fallback: Option<String>,
    },
    /// The CPU reference ops.
    CpuRef,
    /// A layer split over GPU adapters (`--devices`).
    Split {
        devices: Vec<SplitDevice>,
        exact: bool,
    },
}

/// One device of a layer split, for the line a command prints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitDevice {
    /// The adapter's index in `smelt devices`.
    pub index: usize,
    pub name: String,
    pub layers: std::ops::Range<usize>,
}

impl std::fmt::Display for Choice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = |exact: bool| if exact { "exact" } else { "fast" };
        match self {
            Self::Gpu {
                index,
                name,
                api,
                exact,
            } => write!(
                f,
                "using GPU {index} ({name}, {api}) in {} mode",
                mode(*exact)
            ),
            Self::Cpu {
                threads,
                exact,
                fallback,
            } => {
                if let Some(why) = fallback {
                    write!(f, "{why}; ")?;
                }
                let s = if *threads == 1 { "" } else { "s" };
                write!(f, "using the CPU ({threads} thread{s})")?;
                if *exact {
                    write!(f, " in exact mode")?;
                }
                Ok(())
            }
            Self::CpuRef => write!(f, "using the CPU reference ops (slow; for checking)"),
            Self::Split { devices, exact } => {
                let parts: Vec<String> = devices
                    .iter()
                    .map(|d| {
                        format!(
                            "GPU {} ({}) layers {}..{}",
                            d.index, d.name, d.layers.start, d.layers.end
                        )
                    })
                    .collect();
                write!(
                    f,
                    "using a layer split over {} in {} mode",
                    parts.join(", "),
                    mode(*exact)
                )
            }
        }
    }
}

/// A backend and what it is.
pub struct Chosen {
    pub backend: Box<dyn Backend>,
    pub choice: Choice,
}

/// The best hardware GPU, else the CPU. [`choose`] says which.
pub fn auto(threads: Option<usize>) -> Result<Box<dyn Backend>> {
    select(BackendKind::Auto, None, threads)
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
    Ok(cpu_backend(threads, false)?.0)
}

/// The CPU backend, exact or not, and its threads.
fn cpu_backend(threads: Option<usize>, exact: bool) -> Result<(Box<dyn Backend>, usize)> {
    let n = threads.unwrap_or_else(super::cpu::default_threads);
    if n == 0 {
        return Err(BackendError::Other("--threads must be at least 1".into()));
    }
    let b = if exact {
        CpuBackend::new_exact(n)?
    } else {
        CpuBackend::new(n)?
    };
    Ok((Box::new(b), n))
}

/// What `--backend KIND [--device N] [--threads N]` asks for, in the GPU's
/// default (fast) mode. A device index implies the GPU; with a CPU backend
/// it is an error. `threads` sizes the CPU backend's pool.
pub fn select(
    kind: BackendKind,
    device: Option<usize>,
    threads: Option<usize>,
) -> Result<Box<dyn Backend>> {
    Ok(choose(kind, device, threads, &GpuOptions::default())?.backend)
}

/// [`select`] with the GPU options `base` (its `device` replaced by
/// `device`), and what was chosen. `base.quantize_activations` (`--exact`)
/// makes the CPU backend exact too ([`CpuBackend::new_exact`]).
///
/// `auto` lists the adapters once and opens the best hardware GPU from
/// that list; software adapters (lavapipe, llvmpipe, WARP) are never picked
/// by it, being slower than the CPU backend. Where there is no hardware
/// GPU, or it does not open, it takes the CPU, and the choice says why.
pub fn choose(
    kind: BackendKind,
    device: Option<usize>,
    threads: Option<usize>,
    base: &GpuOptions,
) -> Result<Chosen> {
    let exact = base.quantize_activations;
    match (kind, device) {
        (BackendKind::Cpu | BackendKind::CpuRef, Some(_)) => Err(BackendError::Other(
            "--device selects a GPU; it cannot go with a CPU backend".into(),
        )),
        (BackendKind::Cpu, None) => {
            let (backend, threads) = cpu_backend(threads, exact)?;
            Ok(Chosen {
                backend,
                choice: Choice::Cpu {
                    threads,
                    exact,
                    fallback: None,
                },
            })
        }
        (BackendKind::CpuRef, None) => Ok(Chosen {
            backend: Box::new(CpuBackend::reference()),
            choice: Choice::CpuRef,
        }),
        (BackendKind::Auto, None) => {
            let list = adapters();
            let fallback = match best_hardware_of(list.iter().map(|(r, _)| r)) {
                None => "no hardware GPU".to_string(),
                Some(r) => {
                    let (index, name) = (r.index, r.name.clone());
                    let opts = GpuOptions {
                        device: Some(index),
                        ..*base
                    };
                    match GpuBackend::new_in(list, &opts) {
                        Ok(g) => return Ok(gpu_chosen(g)),
                        Err(e) => format!("GPU {index} ({name}) did not open: {e}"),
                    }
                }
            };
            let (backend, threads) = cpu_backend(threads, exact)?;
            Ok(Chosen {
                backend,
                choice: Choice::Cpu {
                    threads,
                    exact,
                    fallback: Some(fallback),
                },
            })
        }
        (_, device) => {
            let opts = GpuOptions { device, ..*base };
            match GpuBackend::new(&opts) {
                Ok(g) => Ok(gpu_chosen(g)),
                // Asked for by name, the GPU is never swapped for the CPU:
                // the error says how to get it.
                Err(BackendError::NoAdapter(why)) => Err(BackendError::NoAdapter(format!(
                    "{why} (--backend auto or --backend cpu runs on the CPU)"
                ))),
                Err(e) => Err(e),
            }
        }
    }
}

fn gpu_chosen(g: GpuBackend) -> Chosen {
    let r = g.adapter();
    let choice = Choice::Gpu {
        index: r.index,
        name: r.name.clone(),
        api: r.backend.clone(),
        exact: g.exact(),
    };
    Chosen {
        backend: Box::new(g),
        choice,
    }
}

/// The adapters `--devices` names, from one listing, for planning a layer
/// split before anything is opened; an index may repeat (the same adapter
/// opened as two devices, as the tests do with lavapipe).
pub fn split_adapters(indices: &[usize]) -> Result<Vec<AdapterReport>> {
    if indices.is_empty() {
        return Err(BackendError::Other("--devices names no adapter".into()));
    }
    let list: Vec<AdapterReport> = adapters().into_iter().map(|(r, _)| r).collect();
    indices
        .iter()
        .map(|&i| {
            list.get(i).cloned().ok_or_else(|| {
                let have: Vec<String> = list
                    .iter()
                    .map(|r| format!("{} {}", r.index, r.name))
                    .collect();
                BackendError::NoAdapter(format!(
                    "--devices names adapter {i}, but there {} ({}); `smelt devices` lists them",
                    match list.len() {
                        0 => "are none".to_string(),
                        1 => "is 1".to_string(),
                        n => format!("are {n}"),
                    },
                    have.join(", ")
                ))
            })
        })
        .collect()
}

/// The adapters of `n` replicas (`smelt serve --replicas N`): those
/// `indices` names (`--devices`; an index may repeat, as with
/// [`split_adapters`]), or by default the first `n` hardware GPUs, best
/// first. Software adapters serve only when named.
pub fn replica_adapters(n: usize, indices: &[usize]) -> Result<Vec<AdapterReport>> {
    if !indices.is_empty() {
        return split_adapters(indices);
    }
    let list: Vec<AdapterReport> = adapters().into_iter().map(|(r, _)| r).collect();
    let hardware = hardware_by_rank(&list);
    if hardware.len() < n {
        let have: Vec<String> = list
            .iter()
            .map(|r| {
                let kind = if r.is_hardware() { "" } else { ", software" };
                format!("{} {}{kind}", r.index, r.name)
            })
            .collect();
        let found = match (have.len(), hardware.len()) {
            (0, _) => "no adapter was found".to_string(),
            (_, 1) => format!("1 hardware GPU was found (adapters: {})", have.join("; ")),
            (_, h) => format!(
                "{h} hardware GPUs were found (adapters: {})",
                have.join("; ")
            ),
        };
        return Err(BackendError::NoAdapter(format!(
            "--replicas {n} puts a copy of the model on each of {n} GPUs, but {found}; \
             name the adapters with --devices (an index may repeat, to test on one adapter)"
        )));
    }
    Ok(hardware.into_iter().take(n).cloned().collect())
}

/// A layer split over the adapters `indices` (one device each, opened
/// with `base`'s options), placed as `placement` says.
pub fn split(
    indices: &[usize],
    base: &GpuOptions,
    placement: Placement,
    opts: SplitOptions,
) -> Result<Chosen> {
    let mut backends: Vec<Box<dyn Backend>> = Vec::with_capacity(indices.len());
    let mut devices = Vec::with_capacity(indices.len());
    for (&index, layers) in indices.iter().zip(&placement.layers) {
        let g = GpuBackend::new(&GpuOptions {
            device: Some(index),
            ..*base
        })?;
        devices.push(SplitDevice {
            index,
            name: g.adapter().name.clone(),
            layers: layers.clone(),
        });
        backends.push(Box::new(g));
    }
    let backend = SplitBackend::new(backends, placement, opts)?;
    Ok(Chosen {
        backend: Box::new(backend),
        choice: Choice::Split {
            devices,
            exact: base.quantize_activations,
        },
    })
}
