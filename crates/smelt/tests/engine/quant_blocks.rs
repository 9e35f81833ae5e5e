//! The fast CPU block decoders and Q8 matmuls (Q4_0, Q4_1, Q8_0) against the
//! `gguf` Python package: `get_rows` of every row against its
//! dequantization, and matmuls against a numpy version of ggml's Q8
//! arithmetic (8-bit activation blocks, integer block dot products).

use smelt::backend::cpu::CpuBackend;
use smelt::backend::{Backend, BackendExt};
use smelt::gguf::TensorBytes;
use smelt::quant::GgmlType;

use crate::fast::nmse;
use crate::ops::{f32s, i32s};

fn read_f32(path: std::path::PathBuf) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn fast_decoders_and_q8_matmuls_match_gguf_py() {
    let (m, k, n) = (37, 96, 70);
    let types = ["Q4_0", "Q4_1", "Q8_0"];
    let (ms, ks, ns) = (m.to_string(), k.to_string(), n.to_string());
    let dir = crate::python(
        "quant_blocks.py",
        &[&ms, &ks, &ns, types[0], types[1], types[2]],
    );
    let x = read_f32(dir.join("x.f32"));
    for name in types {
        let dtype = GgmlType::from_name(name).unwrap();
        let q = std::fs::read(dir.join(format!("{name}.q"))).unwrap();
        let deq = read_f32(dir.join(format!("{name}.f32")));
        let mm = read_f32(dir.join(format!("{name}.mm")));
        for threads in [1, 2] {
            let mut b = CpuBackend::new(threads).unwrap();
            let w = b
                .load_weight(name, dtype, m, k, TensorBytes::from_vec(q.clone()))
                .unwrap();
            let ids: Vec<i32> = (0..m as i32).collect();
            let ids = i32s(&mut b, &ids);
            let rows = b.alloc(GgmlType::F32, m, k).unwrap();
            b.get_rows(w, ids, rows).unwrap();
            let e = nmse(&b.read_f32(rows).unwrap(), &deq);
            assert!(e < 1e-13, "{name} get_rows: nmse {e:e}");

            // One row (decode), a few, and enough for every tile shape.
            for rows in [1, 4, n] {
                let xt = f32s(&mut b, rows, k, &x[..rows * k]);
                let out = b.alloc(GgmlType::F32, rows, m).unwrap();
                b.matmul(w, xt, out).unwrap();
                let e = nmse(&b.read_f32(out).unwrap(), &mm[..rows * m]);
                assert!(e < 1e-12, "{name} matmul of {rows} rows: nmse {e:e}");
            }
        }
    }
    std::fs::remove_dir_all(dir).ok();
}
