//! CPU gradients against central finite differences of the CPU forward
//! pass, for every op case. The loss is `Σ out · dy` summed in f64 on the
//! host; 12 elements of each input are nudged by ±1e-2.
//!
//! Tolerance: |analytic − numeric| ≤ 2e-2 · max(1, |analytic|). Float32
//! forward passes leave the difference quotient ~1e-4 of noise, and the
//! step's second-order error is ~1e-3 for these smooth ops; a wrong
//! formula is off by O(1). One mismatch per input is let pass: an element
//! within the step of a kink (ReLU, a max pooling tie) has no derivative.

mod common;

use common::{Case, build, cases, inputs, run};
use smelt_nn::Device;
use smelt_nn::vars::Rng;

fn loss_at(dev: &mut Device, c: &Case, data: &[Vec<f32>], dy: &[f32]) -> f64 {
    let b = build(c);
    let (out, _) = run(dev, &b, data, dy);
    out.iter().zip(dy).map(|(&o, &d)| o as f64 * d as f64).sum()
}

#[test]
fn cpu_gradients_match_finite_differences() {
    let mut dev = Device::cpu(2, 1).unwrap();
    let mut failures = Vec::new();
    for c in cases().iter().filter(|c| c.fd) {
        let data = inputs(c, 11);
        let b = build(c);
        let n_out: usize = b.graph.shape(b.out).iter().product();
        let mut rng = Rng::new(5);
        let dy: Vec<f32> = (0..n_out).map(|_| rng.normal()).collect();
        let (_, grads) = run(&mut dev, &b, &data, &dy);
        let mut gi = 0;
        for (k, (name, _, _)) in c.inputs.iter().enumerate() {
            if !b.diff[k] {
                continue;
            }
            let g = &grads[gi];
            gi += 1;
            let mut bad = 0;
            for _ in 0..12 {
                let e = rng.below(data[k].len());
                let eps = 1e-2f32;
                let mut plus = data.clone();
                plus[k][e] += eps;
                let mut minus = data.clone();
                minus[k][e] -= eps;
                let numeric = (loss_at(&mut dev, c, &plus, &dy)
                    - loss_at(&mut dev, c, &minus, &dy))
                    / (2.0 * eps as f64);
                let analytic = g[e] as f64;
                if (analytic - numeric).abs() > 2e-2 * analytic.abs().max(1.0) {
                    bad += 1;
                    if bad > 1 {
                        failures.push(format!(
                            "{} d/d{name}[{e}]: analytic {analytic}, numeric {numeric}",
                            c.name
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn dropout_keeps_the_expected_share_and_scales() {
    let mut dev = Device::cpu(2, 3).unwrap();
    let c = cases().into_iter().find(|c| c.name == "dropout").unwrap();
    let b = build(&c);
    let x = vec![1.0f32; 300];
    let dy = vec![1.0f32; 300];
    let (out, grads) = run(&mut dev, &b, &[x], &dy);
    let zeros = out.iter().filter(|&&v| v == 0.0).count();
    assert!(
        (60..=120).contains(&zeros),
        "{zeros} of 300 dropped at p = 0.3"
    );
    assert!(
        out.iter()
            .all(|&v| v == 0.0 || (v - 1.0 / 0.7).abs() < 1e-6)
    );
    // The gradient is the same mask.
    assert_eq!(out, grads[0]);
}
