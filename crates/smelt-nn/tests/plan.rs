//! The compiler on hand-built graphs: the fusion rule, buffer reuse, and
//! clear errors for impossible shapes and bad feeds.

use smelt_nn::graph::Graph;
use smelt_nn::ops::{Conv2d, Op};
use smelt_nn::plan::Plan;
use smelt_nn::{Device, NnError};

fn maps(p: &Plan) -> usize {
    p.steps
        .iter()
        .filter(|s| matches!(s.op, Op::Map(_)))
        .count()
}

#[test]
fn an_elementwise_chain_fuses_into_one_kernel() {
    // relu(x) · 2 + y − sigmoid(y): four maps, one kernel.
    let mut g = Graph::new();
    let x = g.placeholder("x", &[3, 5]).unwrap();
    let y = g.placeholder("y", &[5]).unwrap();
    let r = g.relu(x).unwrap();
    let s = g.scale(r, 2.0).unwrap();
    let a = g.add(s, y).unwrap();
    let sy = g.sigmoid(y).unwrap();
    let out = g.sub(a, sy).unwrap();
    let plan = Plan::compile(&g, &[out]).unwrap();
    // sigmoid(y) has 5 elements, the chain 15: it is not read in full, so
    // it stays a kernel of its own.
    assert_eq!(maps(&plan), 2, "{:#?}", plan.steps);
    let mut dev = Device::cpu(1, 0).unwrap();
    let mut exe = dev.compile(&g, &[out]).unwrap();
    let xs: Vec<f32> = (0..15).map(|i| i as f32 - 7.0).collect();
    let ys: Vec<f32> = (0..5).map(|i| i as f32 * 0.5).collect();
    let got = dev.run(&mut exe, &[(x, &xs), (y, &ys)]).unwrap();
    for i in 0..15 {
        let yv = ys[i % 5];
        let want = xs[i].max(0.0) * 2.0 + yv - 1.0 / (1.0 + (-yv).exp());
        assert!(
            (got[0][i] - want).abs() < 1e-6,
            "{i}: {} vs {want}",
            got[0][i]
        );
    }
}

#[test]
fn a_value_read_by_two_kernels_or_asked_for_is_kept() {
    let mut g = Graph::new();
    let x = g.placeholder("x", &[8]).unwrap();
    let r = g.relu(x).unwrap();
    let a = g.scale(r, 2.0).unwrap();
    let b = g.scale(r, 3.0).unwrap();
    let out = g.add(a, b).unwrap();
    let plan = Plan::compile(&g, &[out]).unwrap();
    // Both scales fuse into the add, which then reads relu once: it
    // fuses too, computed once in registers.
    assert_eq!(maps(&plan), 1);
    // Asking for `a` keeps it, and relu, read by `a` and the add, stays.
    let plan = Plan::compile(&g, &[out, a]).unwrap();
    assert_eq!(maps(&plan), 3);
}

#[test]
fn buffers_are_reused_once_their_last_reader_ran() {
    let mut g = Graph::new();
    let x = g.placeholder("x", &[4, 16]).unwrap();
    let mut v = x;
    for _ in 0..10 {
        v = g.softmax(v).unwrap();
    }
    let plan = Plan::compile(&g, &[v]).unwrap();
    assert_eq!(plan.steps.len(), 10);
    assert!(
        plan.slots.len() <= 2,
        "{} buffers for a chain",
        plan.slots.len()
    );
}

#[test]
fn impossible_shapes_are_errors() {
    let mut g = Graph::new();
    let x = g.placeholder("x", &[2, 3, 8, 8]).unwrap();
    let w = g.placeholder("w", &[4, 2, 3, 3]).unwrap();
    let e = g.conv2d(x, w, None, Conv2d::new(3)).unwrap_err();
    assert!(matches!(e, NnError::Shape { op: "conv2d", .. }), "{e}");
    let big = g.placeholder("big", &[1, 3, 2, 2]).unwrap();
    let w3 = g.placeholder("w3", &[4, 3, 5, 5]).unwrap();
    assert!(g.conv2d(big, w3, None, Conv2d::new(5)).is_err());
    let a = g.placeholder("a", &[3, 4]).unwrap();
    let b = g.placeholder("b", &[5, 6]).unwrap();
    let e = g.matmul(a, b, false, false).unwrap_err();
    assert!(e.to_string().contains("matmul"), "{e}");
    assert!(g.add(a, b).is_err());
    assert!(g.placeholder("zero", &[0, 3]).is_err());
    assert!(g.placeholder("x", &[1]).is_err(), "a taken name");
    let loss = g.relu(a).unwrap();
    assert!(
        g.gradients(loss, &[a]).is_err(),
        "a loss that is not a scalar"
    );
}

#[test]
fn bad_feeds_are_errors() {
    let mut g = Graph::new();
    let x = g.placeholder("x", &[2, 3]).unwrap();
    let labels = g.index_placeholder("labels", &[2], 3).unwrap();
    let loss = g.cross_entropy(x, labels).unwrap();
    let mut dev = Device::cpu(1, 0).unwrap();
    let mut exe = dev.compile(&g, &[loss]).unwrap();
    let xs = [0.0f32; 6];
    let err = |r: smelt_nn::Result<Vec<Vec<f32>>>| r.unwrap_err().to_string();
    assert!(err(dev.run(&mut exe, &[(x, &xs[..5]), (labels, &[0.0, 1.0])])).contains("5 values"));
    assert!(err(dev.run(&mut exe, &[(x, &xs), (labels, &[0.0, 3.0])])).contains("not an index"));
    assert!(err(dev.run(&mut exe, &[(x, &xs), (labels, &[0.5, 1.0])])).contains("not an index"));
    assert!(err(dev.run(&mut exe, &[(x, &xs)])).contains("not fed"));
    let ok = dev
        .run(&mut exe, &[(x, &xs), (labels, &[0.0, 2.0])])
        .unwrap();
    assert!((ok[0][0] - 3f32.ln()).abs() < 1e-6);
}

#[test]
fn a_checkpoint_round_trips_and_hostile_files_are_errors() {
    use smelt_nn::safetensors::Tensors;
    let mut t = Tensors::default();
    t.insert("w", &[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    t.metadata.insert("model".into(), "test".into());
    let bytes = t.to_bytes();
    assert_eq!(Tensors::from_bytes(&bytes).unwrap(), t);
    assert!(
        Tensors::from_bytes(&bytes[..bytes.len() - 1]).is_err(),
        "truncated data"
    );
    assert!(Tensors::from_bytes(&bytes[..5]).is_err());
    let mut huge = bytes.clone();
    huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(Tensors::from_bytes(&huge).is_err());
    let evil = br#"{"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,24]}}"#;
    let mut f = (evil.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(evil);
    f.extend_from_slice(&[0; 24]);
    assert!(Tensors::from_bytes(&f).is_err());
}
