//! The GPU backend's machinery, on lavapipe in CI: recording into one
//! submission, write ordering, bind-group reuse, adapter listing, and
//! errors (never panics) for bad calls.

use smelt::backend::gpu::{GpuBackend, GpuOptions, adapters, best_hardware};
use smelt::backend::{Backend, BackendError, BackendExt, Op, WeightData};
use smelt::quant::GgmlType::{F32, I32, IQ2_XXS, Q4_0};

fn gpu() -> GpuBackend {
    GpuBackend::new(&GpuOptions::default()).expect("a GPU adapter (lavapipe in CI)")
}

#[test]
fn adapters_are_listed_and_auto_never_picks_software() {
    let list = adapters();
    assert!(
        !list.is_empty(),
        "no adapter: is mesa-vulkan-drivers installed?"
    );
    for (r, _) in &list {
        assert!(!r.name.is_empty());
        assert!(r.max_storage_buffer_binding_size > 0);
    }
    if let Some(best) = best_hardware() {
        assert!(
            !best.software,
            "auto picked a software adapter: {}",
            best.name
        );
    }
    // lavapipe is there in CI and is reported as software.
    if list.iter().any(|(r, _)| r.name.contains("llvmpipe")) {
        assert!(
            list.iter()
                .filter(|(r, _)| r.name.contains("llvmpipe"))
                .all(|(r, _)| r.software)
        );
    }
}

#[test]
fn a_forward_pass_is_one_submission() {
    let mut g = gpu();
    let x = g.alloc(F32, 1, 64).unwrap();
    let y = g.alloc(F32, 1, 64).unwrap();
    let v: Vec<f32> = (0..64).map(|i| i as f32).collect();
    g.write_f32(x, &v).unwrap();
    let before = g.stats();
    for _ in 0..50 {
        g.scale(x, 0.5, y).unwrap();
        g.add(y, x, y).unwrap();
    }
    let out = g.read_f32(y).unwrap();
    let after = g.stats();
    assert_eq!(after.submissions - before.submissions, 1, "{after:?}");
    assert_eq!(after.dispatches - before.dispatches, 100);
    // y = 0.5 x + x, exact in binary.
    assert!(out.iter().zip(&v).all(|(o, x)| *o == 1.5 * x), "{out:?}");
}

#[test]
fn writes_are_ordered_between_recorded_ops() {
    let mut g = gpu();
    let a = g.alloc(F32, 1, 5).unwrap();
    let out1 = g.alloc(F32, 1, 5).unwrap();
    let out2 = g.alloc(F32, 1, 5).unwrap();
    g.write_f32(a, &[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
    g.scale(a, 2.0, out1).unwrap();
    // Recorded ops are pending: this write must land after them.
    g.write_f32(a, &[10.0, 20.0, 30.0, 40.0, 50.0]).unwrap();
    g.scale(a, 2.0, out2).unwrap();
    assert_eq!(g.read_f32(out1).unwrap(), [2.0, 4.0, 6.0, 8.0, 10.0]);
    assert_eq!(g.read_f32(out2).unwrap(), [20.0, 40.0, 60.0, 80.0, 100.0]);
}

#[test]
fn views_dispatch_over_their_own_rows() {
    let mut g = gpu();
    let x = g.alloc(F32, 4, 3).unwrap();
    let out = g.alloc(F32, 4, 3).unwrap();
    g.write_f32(x, &[1.0; 12]).unwrap();
    g.write_f32(out, &[-1.0; 12]).unwrap();
    g.scale(x.with_rows(2), 3.0, out.with_rows(2)).unwrap();
    let o = g.read_f32(out).unwrap();
    assert_eq!(&o[..6], &[3.0; 6]);
    assert_eq!(&o[6..], &[-1.0; 6], "rows past the view were written");
}

#[test]
fn bad_calls_are_errors() {
    let mut g = gpu();
    let a = g.alloc(F32, 2, 8).unwrap();
    let b = g.alloc(F32, 3, 8).unwrap();
    let ids = g.alloc(I32, 1, 2).unwrap();
    assert!(matches!(
        g.add(a, b, a),
        Err(BackendError::Shape { op: Op::Add, .. })
    ));
    assert!(!g.supports(Op::MatMul, IQ2_XXS));
    let iq2 = g
        .load_weight("iq2", IQ2_XXS, 1, 256, WeightData::from_vec(vec![0; 66]))
        .unwrap();
    let out = g.alloc(F32, 2, 256).unwrap();
    assert!(matches!(
        g.get_rows(iq2, ids, out),
        Err(BackendError::Unsupported { .. })
    ));
    let short = g.load_weight("short", Q4_0, 2, 32, WeightData::from_vec(vec![0; 20]));
    assert!(short.is_err(), "a weight with the wrong byte count loaded");
    let odd = g.alloc(Q4_0, 1, 33);
    assert!(odd.is_err(), "33 values of Q4_0 allocated");
}

#[test]
fn a_tensor_past_the_binding_limit_is_refused_with_the_limit() {
    let mut g = gpu();
    let limit = g.caps().max_tensor_bytes;
    let cols = 1 << 20;
    let rows = (limit / (4 * cols as u64) + 2) as usize;
    match g.alloc(F32, rows, cols) {
        Err(BackendError::TooLarge {
            limit: l,
            bytes,
            what,
        }) => {
            assert!(bytes > l, "{bytes} <= {l}");
            assert!(what.contains("max_storage_buffer_binding_size"), "{what}");
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
}

#[test]
fn backend_selection_follows_the_flags() {
    use smelt::backend::select::{BackendKind, select};
    assert_eq!("GPU".parse::<BackendKind>(), Ok(BackendKind::Gpu));
    assert!("metal".parse::<BackendKind>().is_err());
    assert!(
        select(BackendKind::Cpu, Some(0), Some(1)).is_err(),
        "--device with cpu"
    );
    assert!(
        !select(BackendKind::Cpu, None, Some(1))
            .unwrap()
            .caps()
            .is_gpu
    );
    // --backend gpu takes a software adapter too (lavapipe in CI).
    assert!(
        select(BackendKind::Gpu, None, Some(1))
            .unwrap()
            .caps()
            .is_gpu
    );
    assert!(select(BackendKind::Gpu, Some(adapters().len()), Some(1)).is_err());
    // auto never picks a software adapter.
    let auto = select(BackendKind::Auto, None, Some(1)).unwrap();
    assert_eq!(auto.caps().is_gpu, best_hardware().is_some());

    // The library's names for the same choices.
    let auto = <dyn Backend>::auto(Some(1)).unwrap();
    assert_eq!(auto.caps().is_gpu, best_hardware().is_some());
    assert!(
        <dyn Backend>::gpu(&GpuOptions::default())
            .unwrap()
            .caps()
            .is_gpu
    );
    assert!(!<dyn Backend>::cpu(Some(1)).unwrap().caps().is_gpu);
    assert!(<dyn Backend>::cpu(Some(0)).is_err(), "0 threads");
}

/// What `choose` picked, as the line a command prints: auto's GPU or its
/// fallback and why, the GPU's mode (fast unless asked), the CPU's threads.
#[test]
fn the_choice_names_the_backend_and_the_mode() {
    use smelt::backend::select::{BackendKind, Choice, choose};
    let fast = GpuOptions::default();
    let auto = choose(BackendKind::Auto, None, Some(1), &fast).unwrap();
    match best_hardware() {
        None => {
            assert_eq!(
                auto.choice,
                Choice::Cpu {
                    threads: 1,
                    exact: false,
                    fallback: Some("no hardware GPU".into()),
                }
            );
            assert_eq!(
                auto.choice.to_string(),
                "no hardware GPU; using the CPU (1 thread)"
            );
        }
        Some(r) => assert!(
            matches!(&auto.choice, Choice::Gpu { index, exact: false, .. } if *index == r.index),
            "{:?}",
            auto.choice
        ),
    }
    let gpu = choose(BackendKind::Gpu, None, None, &fast).unwrap();
    let line = gpu.choice.to_string();
    assert!(
        line.starts_with("using GPU ") && line.ends_with(" mode") && line.contains("fast"),
        "{line}"
    );
    let exact = choose(BackendKind::Gpu, None, None, &GpuOptions::exact()).unwrap();
    assert!(
        matches!(exact.choice, Choice::Gpu { exact: true, .. }),
        "{:?}",
        exact.choice
    );
    assert!(exact.choice.to_string().ends_with("in exact mode"));
    let cpu = choose(BackendKind::Cpu, None, Some(2), &GpuOptions::exact()).unwrap();
    assert_eq!(
        cpu.choice.to_string(),
        "using the CPU (2 threads) in exact mode"
    );
}
