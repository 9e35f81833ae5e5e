//! The primitives against PyTorch 2.15 (CPU) on shared random inputs:
//! `testdata/nn/torch_ref.safetensors`, recorded by
//! `scripts/nn_torch_ref.py` (forward outputs, the gradients of
//! `Σ out · dy`, optimizer steps). Run on the CPU backend, and on the GPU
//! where there is one.
//!
//! Tolerances, by normalised error `max |ours − torch| / max(1, max |torch|)`:
//! 2e-6 for single products and elementwise ops, up to 1e-5 where sums are
//! long or formulas differ in rounding (normalisations: PyTorch's variance
//! is Welford's; GELU: our erf is within 1.5e-7 of the true one; recurrent
//! ops: error compounds over steps), 1e-5 for three optimizer steps.

use std::path::Path;

use smelt::backend::gpu::GpuOptions;
use smelt_nn::graph::{Graph, Value};
use smelt_nn::ops::optim::{Adam, Sgd};
use smelt_nn::ops::{Bcast, Conv2d, Pool2d};
use smelt_nn::safetensors::Tensors;
use smelt_nn::{Device, Init, Result};

fn reference() -> Tensors {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/nn/torch_ref.safetensors");
    Tensors::load(&path).unwrap()
}

fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() || a.iter().any(|x| !x.is_finite()) {
        return f64::INFINITY;
    }
    let scale = b.iter().fold(1.0f64, |m, &x| m.max(x.abs() as f64));
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).abs())
        .fold(0.0, f64::max)
        / scale
}

type Build = fn(&mut Graph, &[Value]) -> Result<Value>;

/// A recorded case: its inputs (name, differentiated) and how to build it.
struct Case {
    name: &'static str,
    inputs: &'static [(&'static str, bool)],
    build: Build,
    tol: f64,
}

fn conv(k: usize, stride: usize, pad: usize, dil: usize, groups: usize) -> Conv2d {
    Conv2d {
        kernel: [k, k],
        stride: [stride; 2],
        padding: [pad; 2],
        dilation: [dil; 2],
        groups,
    }
}

const X: &[(&str, bool)] = &[("x", true)];

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "conv2d_groups",
            inputs: &[("x", true), ("w", true), ("b", true)],
            build: |g, v| g.conv2d(v[0], v[1], Some(v[2]), conv(3, 2, 1, 1, 2)),
            tol: 2e-6,
        },
        Case {
            name: "conv2d_dilated",
            inputs: &[("x", true), ("w", true)],
            build: |g, v| g.conv2d(v[0], v[1], None, conv(3, 1, 2, 2, 1)),
            tol: 2e-6,
        },
        Case {
            name: "conv2d_depthwise",
            inputs: &[("x", true), ("w", true)],
            build: |g, v| g.conv2d(v[0], v[1], None, conv(3, 1, 1, 1, 4)),
            tol: 2e-6,
        },
        Case {
            name: "conv_transpose2d",
            inputs: &[("x", true), ("w", true), ("b", true)],
            build: |g, v| g.conv_transpose2d(v[0], v[1], Some(v[2]), conv(3, 2, 1, 1, 1), [1, 1]),
            tol: 2e-6,
        },
        Case {
            name: "max_pool2d",
            inputs: X,
            build: |g, v| {
                g.max_pool2d(
                    v[0],
                    Pool2d {
                        padding: [1, 1],
                        ..Pool2d::new(3, 2)
                    },
                )
            },
            tol: 2e-6,
        },
        Case {
            name: "avg_pool2d",
            inputs: X,
            build: |g, v| {
                g.avg_pool2d(
                    v[0],
                    Pool2d {
                        padding: [1, 1],
                        ..Pool2d::new(3, 2)
                    },
                )
            },
            tol: 2e-6,
        },
        Case {
            name: "global_avg_pool",
            inputs: X,
            build: |g, v| g.global_avg_pool(v[0]),
            tol: 2e-6,
        },
        Case {
            name: "batch_norm_train",
            inputs: &[("x", true), ("gamma", true), ("beta", true)],
            build: |g, v| {
                let mut bn = g.batch_norm_params("bn", 3)?;
                (bn.gamma, bn.beta) = (v[1], v[2]);
                g.batch_norm(v[0], &bn, true)
            },
            tol: 1e-5,
        },
        Case {
            name: "batch_norm_eval",
            inputs: &[
                ("x", true),
                ("gamma", true),
                ("beta", true),
                ("running_mean", false),
                ("running_var", false),
            ],
            build: |g, v| {
                let mut bn = g.batch_norm_params("bn", 3)?;
                (bn.gamma, bn.beta, bn.running_mean, bn.running_var) = (v[1], v[2], v[3], v[4]);
                g.batch_norm(v[0], &bn, false)
            },
            tol: 2e-6,
        },
        Case {
            name: "layer_norm",
            inputs: &[("x", true), ("gamma", true), ("beta", true)],
            build: |g, v| g.layer_norm(v[0], v[1], v[2], 1e-5),
            tol: 1e-5,
        },
        Case {
            name: "group_norm",
            inputs: &[("x", true), ("gamma", true), ("beta", true)],
            build: |g, v| g.group_norm(v[0], 3, v[1], v[2], 1e-5),
            tol: 1e-5,
        },
        Case {
            name: "relu",
            inputs: X,
            build: |g, v| g.relu(v[0]),
            tol: 2e-6,
        },
        Case {
            name: "gelu",
            inputs: X,
            build: |g, v| g.gelu(v[0]),
            tol: 1e-5,
        },
        Case {
            name: "silu",
            inputs: X,
            build: |g, v| g.silu(v[0]),
            tol: 2e-6,
        },
        Case {
            name: "sigmoid",
            inputs: X,
            build: |g, v| g.sigmoid(v[0]),
            tol: 2e-6,
        },
        Case {
            name: "tanh",
            inputs: X,
            build: |g, v| g.tanh(v[0]),
            tol: 2e-6,
        },
        Case {
            name: "softmax",
            inputs: X,
            build: |g, v| g.softmax(v[0]),
            tol: 2e-6,
        },
        Case {
            name: "linear",
            inputs: &[("x", true), ("w", true), ("b", true)],
            build: |g, v| g.linear(v[0], v[1], Some(v[2])),
            tol: 2e-6,
        },
        Case {
            name: "lstm",
            inputs: &[
                ("x", true),
                ("w_ih", true),
                ("w_hh", true),
                ("b_ih", true),
                ("b_hh", true),
                ("h0", true),
                ("c0", true),
            ],
            build: |g, v| {
                let b = g.add(v[3], v[4])?;
                Ok(g.lstm(v[0], v[1], v[2], b, v[5], v[6])?.hs)
            },
            tol: 1e-5,
        },
        Case {
            name: "gru",
            inputs: &[
                ("x", true),
                ("w_ih", true),
                ("w_hh", true),
                ("b_ih", true),
                ("b_hh", true),
                ("h0", true),
            ],
            build: |g, v| g.gru(v[0], v[1], v[2], v[3], v[4], v[5]),
            tol: 1e-5,
        },
        Case {
            name: "embedding",
            inputs: &[("table", true), ("ids", false)],
            build: |g, v| g.embedding(v[0], v[1]),
            tol: 2e-6,
        },
        Case {
            name: "cross_entropy",
            inputs: &[("logits", true), ("labels", false)],
            build: |g, v| g.cross_entropy(v[0], v[1]),
            tol: 2e-6,
        },
        Case {
            name: "mse",
            inputs: &[("a", true), ("b", true)],
            build: |g, v| g.mse(v[0], v[1]),
            tol: 2e-6,
        },
    ]
}

fn devices() -> Vec<Device> {
    let mut d = vec![Device::cpu(2, 1).unwrap()];
    match Device::gpu(&GpuOptions::default(), 1) {
        Ok(g) => d.push(g),
        Err(e) => eprintln!("no GPU adapter ({e}); CPU only"),
    }
    d
}

#[test]
fn ops_match_pytorch() {
    let r = reference();
    let mut failures = Vec::new();
    for mut dev in devices() {
        for c in cases() {
            let get = |k: &str| {
                r.get(&format!("{}.{k}", c.name))
                    .unwrap_or_else(|| panic!("{}.{k} not recorded", c.name))
                    .clone()
            };
            let mut g = Graph::new();
            let mut vals = Vec::new();
            let mut data = Vec::new();
            for (name, diff) in c.inputs {
                let (shape, d) = get(&format!("in.{name}"));
                let v = if *diff || !name.contains("label") && !name.contains("ids") {
                    g.placeholder(name, &shape).unwrap()
                } else {
                    g.index_placeholder(name, &shape, 1 << 20).unwrap()
                };
                vals.push(v);
                data.push(d);
            }
            let out = (c.build)(&mut g, &vals).unwrap();
            let (_, want_out) = get("out");
            let (dy_shape, dy) = get("dy");
            // PyTorch's scalars are 0-D; ours are [1].
            let dy_shape = if dy_shape.is_empty() {
                vec![1]
            } else {
                dy_shape
            };
            let dy_v = g.placeholder("dy", &dy_shape).unwrap();
            let prod = g.mul(out, dy_v).unwrap();
            let n: usize = g.shape(prod).iter().product();
            let loss = g.sum_to(prod, Bcast { inner: n, count: 1 }).unwrap();
            let wrt: Vec<Value> = vals
                .iter()
                .zip(c.inputs)
                .filter(|(_, (_, d))| *d)
                .map(|(v, _)| *v)
                .collect();
            let grads = g.gradients(loss, &wrt).unwrap();
            let mut outs = vec![out];
            outs.extend(&grads);
            let mut exe = dev.compile(&g, &outs).unwrap();
            let mut feeds: Vec<(Value, &[f32])> = vals
                .iter()
                .zip(&data)
                .map(|(v, d)| (*v, d.as_slice()))
                .collect();
            feeds.push((dy_v, &dy));
            let got = dev.run(&mut exe, &feeds).unwrap();
            let e = rel_err(&got[0], &want_out);
            if e > c.tol {
                failures.push(format!("{} {} forward: {e:e}", dev.name(), c.name));
            }
            let names = c.inputs.iter().filter(|(_, d)| *d).map(|(n, _)| n);
            for (name, gv) in names.zip(&got[1..]) {
                let (_, want) = get(&format!("grad.{name}"));
                let e = rel_err(gv, &want);
                if e > c.tol {
                    failures.push(format!("{} {} d/d{name}: {e:e}", dev.name(), c.name));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn batch_norm_running_statistics_match_pytorch() {
    let r = reference();
    for mut dev in devices() {
        let (shape, x) = r.get("batch_norm_running.in.x").unwrap().clone();
        let mut g = Graph::new();
        let xv = g.placeholder("x", &shape).unwrap();
        let bn = g.batch_norm_params("bn", 3).unwrap();
        let y = g.batch_norm(xv, &bn, true).unwrap();
        let mut exe = dev.compile(&g, &[y]).unwrap();
        dev.run(&mut exe, &[(xv, &x)]).unwrap();
        for (var, key) in [("bn.running_mean", "mean"), ("bn.running_var", "var")] {
            let got = dev.read_variable(var).unwrap();
            let want = &r.get(&format!("batch_norm_running.{key}")).unwrap().1;
            let e = rel_err(&got, want);
            assert!(e < 1e-5, "{} {var}: {e:e}", dev.name());
        }
    }
}

#[test]
fn optimizers_match_pytorch() {
    let r = reference();
    let p0 = r.get("optim.p0").unwrap().1.clone();
    let grads: Vec<Vec<f32>> = (0..3)
        .map(|i| r.get(&format!("optim.grad{i}")).unwrap().1.clone())
        .collect();
    for mut dev in devices() {
        for (case, build) in [
            (
                "sgd",
                Box::new(|g: &mut Graph, p, gr| {
                    g.sgd(
                        &[p],
                        &[gr],
                        Sgd {
                            lr: 0.1,
                            momentum: 0.9,
                            weight_decay: 0.01,
                            nesterov: false,
                        },
                    )
                }) as Box<dyn Fn(&mut Graph, Value, Value) -> Result<()>>,
            ),
            (
                "sgd_nesterov",
                Box::new(|g: &mut Graph, p, gr| {
                    g.sgd(
                        &[p],
                        &[gr],
                        Sgd {
                            lr: 0.1,
                            momentum: 0.9,
                            weight_decay: 0.0,
                            nesterov: true,
                        },
                    )
                }),
            ),
            (
                "adam",
                Box::new(|g: &mut Graph, p, gr| {
                    g.adam(
                        &[p],
                        &[gr],
                        Adam {
                            weight_decay: 0.01,
                            ..Adam::new(0.01)
                        },
                    )
                }),
            ),
            (
                "adamw",
                Box::new(|g: &mut Graph, p, gr| {
                    g.adam(
                        &[p],
                        &[gr],
                        Adam {
                            weight_decay: 0.1,
                            decoupled: true,
                            ..Adam::new(0.01)
                        },
                    )
                }),
            ),
        ] {
            let mut g = Graph::new();
            let name = format!("{case}.p");
            let p = g.parameter(&name, &[12], Init::Zeros).unwrap();
            let gr = g.placeholder("grad", &[12]).unwrap();
            build(&mut g, p, gr).unwrap();
            let mut exe = dev.compile(&g, &[]).unwrap();
            dev.write_variable(&name, &p0).unwrap();
            for (i, gv) in grads.iter().enumerate() {
                dev.run(&mut exe, &[(gr, gv)]).unwrap();
                let got = dev.read_variable(&name).unwrap();
                let want = &r.get(&format!("{case}.step{i}")).unwrap().1;
                let e = rel_err(&got, want);
                assert!(e < 1e-5, "{} {case} step {i}: {e:e}", dev.name());
            }
        }
    }
}
