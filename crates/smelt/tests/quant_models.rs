//! Every tensor of both test models, dequantized by smelt and by the `gguf`
//! Python package (`scripts/quant_ref.py stream`), value for value.
//!
//! Python streams each tensor's f32 values through a pipe, tensor by
//! tensor, so neither side holds a whole model in f32. Values must agree
//! within 1e-6 of the largest reference magnitude in their row; every 8th
//! row's reference dot product is also checked against an f64 dot of the
//! Python values (within 1e-6 of Σ|w·x|).

mod common;
mod quant_ref;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::Stdio;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use smelt::gguf::GgufFile;
use smelt::quant::{self, GgmlType};

fn check_model(path: &Path) {
    let file = GgufFile::open(path).unwrap();
    let mut child = quant_ref::python()
        .arg(quant_ref::script())
        .arg("stream")
        .arg(path)
        .stdout(Stdio::piped())
        .spawn()
        .expect("cannot start python3: the quant tests need Python 3 with gguf and numpy");
    let mut py = BufReader::with_capacity(1 << 20, child.stdout.take().unwrap());
    let mut rng = StdRng::seed_from_u64(quant_ref::seed("check_model"));

    // Per type: (tensors, values, values bit-exact).
    let mut stats: BTreeMap<GgmlType, (usize, usize, usize)> = BTreeMap::new();
    let mut line = String::new();
    for info in &file.tensors {
        line.clear();
        py.read_line(&mut line).unwrap();
        let fields: Vec<&str> = line.trim_end().split('\t').collect();
        assert_eq!(
            fields,
            [
                info.name.as_str(),
                info.dtype.name(),
                &info.n_elements().to_string()
            ],
            "python's tensor header (did quant_ref.py fail? see its stderr above)"
        );

        let row_len = info.row_len() as usize;
        let row_bytes = info.dtype.row_bytes(row_len).unwrap();
        // (row_len) smelt's values, python's bytes, python's values.
        let mut ours = vec![0f32; row_len];
        let mut raw = vec![0u8; row_len * 4];
        let mut theirs = vec![0f32; row_len];
        let x: Vec<f32> = (0..row_len).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let stat = stats.entry(info.dtype).or_default();
        stat.0 += 1;
        for (r, row) in file.tensor_data(info).chunks_exact(row_bytes).enumerate() {
            quant::dequantize_row(info.dtype, row, &mut ours)
                .unwrap_or_else(|e| panic!("{}: {e}", info.name));
            py.read_exact(&mut raw).unwrap();
            for (t, c) in theirs.iter_mut().zip(raw.chunks_exact(4)) {
                *t = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
            let what = format!("{} row {r}", info.name);
            stat.2 += quant_ref::assert_close_rows(&what, &ours, &theirs, row_len);
            stat.1 += row_len;

            if r % 8 == 0 {
                let got = quant::dot_f32(info.dtype, row, &x).unwrap();
                let (sum, abs) = theirs
                    .iter()
                    .zip(&x)
                    .fold((0f64, 0f64), |(s, a), (&w, &x)| {
                        let p = f64::from(w) * f64::from(x);
                        (s + p, a + p.abs())
                    });
                assert!(
                    (f64::from(got) - sum).abs() <= 1e-6 * abs,
                    "{what}: dot {got:e}, reference {sum:e} (Σ|wx| {abs:e})"
                );
            }
        }
    }
    line.clear();
    py.read_line(&mut line).unwrap();
    assert_eq!(
        line, "END\n",
        "python streamed more tensors than the file has"
    );
    assert!(
        child.wait().unwrap().success(),
        "quant_ref.py stream failed"
    );

    let name = path.file_name().unwrap().to_string_lossy();
    for (t, (tensors, values, exact)) in stats {
        eprintln!("{name}: {t}: {tensors} tensors, {values} values, {exact} bit-exact");
    }
}

#[test]
fn smollm2_every_tensor_matches_gguf() {
    check_model(&common::model(common::SMOLLM2));
}

#[test]
fn gemma3_every_tensor_matches_gguf() {
    check_model(&common::model(common::GEMMA3));
}
