//! The Metal check of smelt-nn's kernels, as crates/smelt/tests/kernels_msl.rs
//! does for the LLM kernels: every kernel variant the ops can ask for, and
//! the fused map kernels of the example models' training graphs, parsed and
//! validated by naga, then written as MSL and SPIR-V.

use naga::back::{msl, spv};
use naga::valid::{Capabilities, ValidationFlags, Validator};
use smelt_nn::gpu::dispatch::Kernel;
use smelt_nn::graph::Graph;
use smelt_nn::models::{char_lstm, lenet};
use smelt_nn::ops::optim::Adam;
use smelt_nn::plan::Plan;

fn check(kernel: &Kernel) -> Result<(), String> {
    let src = kernel.text();
    let module = naga::front::wgsl::parse_str(&src).map_err(|e| e.emit_to_string(&src))?;
    let info = Validator::new(ValidationFlags::all(), Capabilities::empty())
        .validate(&module)
        .map_err(|e| e.emit_to_string(&src))?;
    let (metal, _) = msl::write_string(
        &module,
        &info,
        &msl::Options {
            lang_version: (2, 4),
            ..Default::default()
        },
        &msl::PipelineOptions::default(),
    )
    .map_err(|e| format!("MSL: {e}"))?;
    if !metal.contains("kernel void") {
        return Err("MSL output has no kernel function".into());
    }
    let words = spv::write_vec(&module, &info, &spv::Options::default(), None)
        .map_err(|e| format!("SPIR-V: {e}"))?;
    if words.first() != Some(&0x0723_0203) {
        return Err("SPIR-V output lacks the magic number".into());
    }
    Ok(())
}

/// The kernels of every step of these graphs' plans.
fn kernels_of(graphs: &[(&Graph, Vec<smelt_nn::Value>)]) -> Vec<Kernel> {
    let mut out: Vec<Kernel> = Vec::new();
    for (g, outputs) in graphs {
        let plan = Plan::compile(g, outputs).unwrap();
        for s in &plan.steps {
            for d in s.op.gpu(&s.shapes) {
                if !out.contains(&d.kernel) {
                    out.push(d.kernel);
                }
            }
        }
    }
    out
}

#[test]
fn every_kernel_validates_and_writes_msl_and_spirv() {
    let cnn = lenet::LeNet::train(4, Adam::new(1e-3)).unwrap();
    let cfg = char_lstm::Config {
        vocab: 7,
        embed: 3,
        hidden: 5,
    };
    let rnn = char_lstm::CharLstm::train(
        &cfg,
        3,
        2,
        Adam {
            decoupled: true,
            weight_decay: 0.1,
            ..Adam::new(1e-3)
        },
    )
    .unwrap();
    let mut kernels = kernels_of(&[
        (&cnn.graph, vec![cnn.loss.unwrap()]),
        (&rnn.graph, vec![rnn.loss.unwrap()]),
    ]);
    // Every file and define the ops use, whether or not the models do.
    let variants: &[(&str, &[&str])] = &[
        ("reduce", &[]),
        ("matmul", &[]),
        ("matmul", &["SPLIT_SUM"]),
        ("conv", &["FORWARD"]),
        ("conv", &["TRANSPOSED"]),
        ("conv", &["WEIGHT"]),
        ("pool", &["MAX"]),
        ("pool", &["AVG"]),
        ("pool", &["MAX_GRAD"]),
        ("pool", &["AVG_GRAD"]),
        ("softmax", &["SOFTMAX"]),
        ("softmax", &["SOFTMAX_GRAD"]),
        ("softmax", &["CE"]),
        ("softmax", &["CE_GRAD"]),
        ("embed", &["GATHER"]),
        ("embed", &["GRAD"]),
        ("rnn", &["LSTM"]),
        ("rnn", &["LSTM_GRAD"]),
        ("rnn", &["GRU"]),
        ("rnn", &["GRU_GRAD"]),
        ("rnn", &["SHIFT"]),
        ("rnn", &["TRANSPOSE"]),
        ("optim", &["SGD"]),
        ("optim", &["ADAM"]),
        ("optim", &["EMA"]),
    ];
    for (file, defines) in variants {
        let k = Kernel::new(file, defines);
        if !kernels.contains(&k) {
            kernels.push(k);
        }
    }
    // The whole-sequence LSTM kernels with several rows a workgroup.
    for define in ["LSTM_SEQ", "LSTM_GRAD_SEQ"] {
        let values = [("ROWS", "4"), ("WG", "64"), ("SHARED", "2048")];
        let mut d = vec![(define, String::new())];
        d.extend(values.iter().map(|(n, v)| (*n, v.to_string())));
        let k = Kernel::with_values("rnn", &d);
        if !kernels.contains(&k) {
            kernels.push(k);
        }
    }
    let n_maps = kernels.iter().filter(|k| k.label() == "map").count();
    assert!(n_maps >= 5, "only {n_maps} fused map kernels");
    let failures: Vec<String> = kernels
        .iter()
        .filter_map(|k| check(k).err().map(|e| format!("{}:\n{e}", k.label())))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} kernels failed:\n{}",
        failures.len(),
        kernels.len(),
        failures.join("\n\n")
    );
    println!(
        "{} kernels ({n_maps} maps) validated, written as MSL and SPIR-V",
        kernels.len()
    );
}

#[test]
fn an_invalid_kernel_is_caught() {
    let bad =
        Kernel::generated("@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }".into());
    assert!(check(&bad).is_err());
}
