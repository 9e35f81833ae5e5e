//! Every op case on the GPU (lavapipe in CI) against the CPU twin: the
//! forward output and every input gradient, by normalised error
//! (`max |gpu − cpu| / max(1, max |cpu|)`), NaN failing.
//!
//! Tolerance 1e-5: both backends add the same terms in the same order;
//! they differ by the last bits of `exp`, `tanh`, `log`, `sqrt` and
//! division, by any multiply-add the GPU compiler contracts, and by the
//! products' terms on lavapipe, which rounds the multiply and the add of
//! WGSL's `fma` apart where the CPU fuses them (`LONG_SUMS`).

mod common;

use common::{build, cases, inputs, rel_err, run};
use smelt::backend::gpu::GpuOptions;
use smelt_nn::Device;
use smelt_nn::vars::Rng;

fn gpu() -> Option<Device> {
    match Device::gpu(&GpuOptions::default(), 1) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("no GPU adapter ({e}); skipping");
            None
        }
    }
}

/// The default bound on the normalised error.
const TOLERANCE: f64 = 1e-5;

/// Cases whose products sum thousands of terms, each rounded twice on
/// lavapipe and once on the CPU, and their bounds (`lstm_per_step`, 4100
/// terms: 5.5e-5).
const LONG_SUMS: &[(&str, f64)] = &[("lstm_per_step", 1e-4)];

#[test]
fn gpu_matches_cpu_for_every_op() {
    let Some(mut gdev) = gpu() else { return };
    let mut cdev = Device::cpu(2, 1).unwrap();
    let mut failures = Vec::new();
    for c in cases() {
        let data = inputs(&c, 21);
        let b = build(&c);
        let n_out: usize = b.graph.shape(b.out).iter().product();
        let mut rng = Rng::new(9);
        let dy: Vec<f32> = (0..n_out).map(|_| rng.normal()).collect();
        let (co, cg) = run(&mut cdev, &b, &data, &dy);
        let (go, gg) = run(&mut gdev, &b, &data, &dy);
        let tol = LONG_SUMS
            .iter()
            .find(|(name, _)| *name == c.name)
            .map_or(TOLERANCE, |&(_, t)| t);
        let e = rel_err(&go, &co);
        if e > tol {
            failures.push(format!("{} forward: error {e:e}", c.name));
        }
        for (i, (g, cpu)) in gg.iter().zip(&cg).enumerate() {
            let e = rel_err(g, cpu);
            if e > tol {
                failures.push(format!("{} gradient {i}: error {e:e}", c.name));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_training_step_is_one_submission() {
    let Some(mut dev) = gpu() else { return };
    let m = smelt_nn::models::lenet::LeNet::train(8, common::adam()).unwrap();
    let mut exe = dev.compile(&m.graph, &[m.loss.unwrap()]).unwrap();
    let images = vec![0.5f32; 8 * 64];
    let labels: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let before = dev.stats();
    for _ in 0..3 {
        dev.run(
            &mut exe,
            &[(m.images, &images), (m.labels.unwrap(), &labels)],
        )
        .unwrap();
    }
    let after = dev.stats();
    assert_eq!(after.submissions - before.submissions, 3);
    assert_eq!(
        (after.dispatches - before.dispatches) as usize,
        3 * exe.ops_per_run()
    );
}
