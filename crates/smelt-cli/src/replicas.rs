//! `smelt serve --replicas N`: a whole copy of the model on each of N GPU
//! adapters, each with its own session and scheduler (the throughput mode;
//! `smelt::server::Replicas` routes the requests).
//!
//! The adapters are `--devices` (an index may repeat: one adapter holding
//! two copies, as the tests do with lavapipe), or by default the first N
//! hardware GPUs. Replicas are GPU only: one CPU backend already works on
//! every core, so a second copy there would only share them (`--parallel`
//! serves more requests at once instead). Before anything loads, each
//! adapter must have room for all the copies it is to hold; then the
//! copies load at once, from the one opened file.

use std::io::IsTerminal;

use anyhow::bail;
use smelt::backend::gpu::{AdapterReport, MemorySource};
use smelt::backend::select::{self, BackendKind};
use smelt::model::{Session, SessionParams};

use crate::engine::{BackendArgs, EngineArgs, Prepared, SplitMode, available_memory, file_name};

/// Opens the model once and loads it on each of `n` adapters; returns
/// each session with the device it runs on (`GPU 1 (NAME)`).
pub fn open(
    args: &EngineArgs,
    params: SessionParams,
    n: usize,
) -> anyhow::Result<(Prepared, Vec<(Session, String)>)> {
    check_flags(&args.backend, n)?;
    let adapters = select::replica_adapters(n, &args.backend.devices)?;
    let prepared = Prepared::open(args.model.as_deref(), &args.backend, params)?;
    let name = file_name(&prepared.path);
    check_memory(&adapters, prepared.split_model().one_copy(), &name)?;
    let sessions = load_all(&prepared, &adapters, &args.backend)?;
    Ok((prepared, sessions))
}

/// Opens each adapter and loads a copy on it, all at once (each upload
/// has its own device and bus); one progress bar per copy on a terminal.
fn load_all(
    prepared: &Prepared,
    adapters: &[AdapterReport],
    backend: &BackendArgs,
) -> anyhow::Result<Vec<(Session, String)>> {
    let gpu = backend.gpu_options();
    let bars = std::io::stderr()
        .is_terminal()
        .then(indicatif::MultiProgress::new);
    let loads: Vec<anyhow::Result<Session>> = std::thread::scope(|s| {
        let handles: Vec<_> = adapters
            .iter()
            .enumerate()
            .map(|(replica, adapter)| {
                let bar = bars
                    .as_ref()
                    .map(|m| m.add(prepared.progress_bar(&format!("replica {replica}"))));
                s.spawn(move || {
                    let chosen = select::choose(BackendKind::Gpu, Some(adapter.index), None, &gpu)?;
                    eprintln!("smelt: replica {replica}: {}", chosen.choice);
                    let who = format!("replica {replica}: ");
                    prepared.load_with(chosen.backend, backend.verbose, bar, &who)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("loading a replica panicked")))
            })
            .collect()
    });
    loads
        .into_iter()
        .zip(adapters)
        .map(|(session, a)| Ok((session?, format!("GPU {} ({})", a.index, a.name))))
        .collect()
}

/// Refuses flags that contradict `--replicas n`, before anything opens.
fn check_flags(b: &BackendArgs, n: usize) -> anyhow::Result<()> {
    if b.split_mode == SplitMode::Layer || !b.tensor_split.is_empty() {
        bail!(
            "--replicas keeps a whole copy of the model on each adapter; it cannot go with a \
             layer split (--split-mode layer, --tensor-split)"
        );
    }
    if matches!(b.backend, BackendKind::Cpu | BackendKind::CpuRef) {
        bail!(
            "--replicas puts a copy of the model on each of several GPU adapters; it cannot go \
             with a CPU backend, whose one copy already uses every core (--parallel serves more \
             requests at once)"
        );
    }
    if b.device.is_some() {
        bail!("--replicas takes its adapters from --devices (e.g. --devices 0,1), not --device");
    }
    if !b.devices.is_empty() && b.devices.len() != n {
        bail!(
            "--replicas {n} needs {n} adapters in --devices, one per copy; it names {}",
            b.devices.len()
        );
    }
    Ok(())
}

/// Each adapter must hold its copies (`one_copy` bytes each: weights, KV
/// cache and activations) in the memory it has free: its own where it
/// says (a Vulkan heap), the host's where it shares it.
fn check_memory(adapters: &[AdapterReport], one_copy: u64, model: &str) -> anyhow::Result<()> {
    let gib = |b: u64| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64);
    for (first, a) in adapters.iter().enumerate() {
        if adapters[..first].iter().any(|b| b.index == a.index) {
            continue;
        }
        let free = if a.unified_memory {
            available_memory().map(|m| (m, "of the host's memory available"))
        } else {
            a.memory
                .filter(|m| m.source == MemorySource::VulkanHeap)
                .map(|m| (m.usable(), "free"))
        };
        let Some((free, said)) = free else {
            continue;
        };
        let copies = adapters.iter().filter(|b| b.index == a.index).count() as u64;
        let needed = one_copy.saturating_mul(copies);
        if needed > free {
            let what = match copies {
                1 => format!("a copy of {model} needs {}", gib(one_copy)),
                k => format!("{k} copies of {model} need {k} × {}", gib(one_copy)),
            };
            bail!(
                "{what} (weights, KV cache and activations) on GPU {} ({}), which has {} {said}: \
                 lower --ctx or --parallel, use fewer replicas, or a smaller quantization",
                a.index,
                a.name,
                gib(free)
            );
        }
    }
    Ok(())
}
