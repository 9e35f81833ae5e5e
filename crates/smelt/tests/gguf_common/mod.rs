//! Helpers for the `gguf_*` tests: a writer-built file that holds every value
//! type, and a raw byte builder for files no writer would produce.
#![allow(dead_code)]

use rand::{Rng, SeedableRng, rngs::StdRng};
use smelt::gguf::{Array, GgufWriter, Value};
use smelt::quant::GgmlType;

/// One metadata entry of every value type, scalar and array, with edge
/// values: extremes, -0.0, NaN, infinities, subnormals, empty and non-ASCII
/// strings, empty arrays, and arrays of arrays three deep.
pub fn every_value() -> Vec<(&'static str, Value)> {
    vec![
        ("general.architecture", Value::String("llama".into())),
        ("t.u8", Value::U8(u8::MAX)),
        ("t.i8", Value::I8(i8::MIN)),
        ("t.u16", Value::U16(0xBEEF)),
        ("t.i16", Value::I16(-12345)),
        ("t.u32", Value::U32(u32::MAX)),
        ("t.i32", Value::I32(i32::MIN)),
        ("t.f32", Value::F32(-0.0)),
        ("t.f32_nan", Value::F32(f32::from_bits(0x7fc0_1234))),
        ("t.f32_sub", Value::F32(f32::from_bits(1))),
        ("t.bool_t", Value::Bool(true)),
        ("t.bool_f", Value::Bool(false)),
        (
            "t.string",
            Value::String("héllo\n\"wörld\"\t\u{1F600}\0end".into()),
        ),
        ("t.string_empty", Value::String(String::new())),
        ("t.u64", Value::U64(u64::MAX)),
        ("t.i64", Value::I64(i64::MIN)),
        ("t.f64", Value::F64(std::f64::consts::PI)),
        ("t.f64_inf", Value::F64(f64::NEG_INFINITY)),
        ("a.u8", Value::Array(Array::U8(vec![0, 1, 255]))),
        ("a.i8", Value::Array(Array::I8(vec![-128, 0, 127]))),
        ("a.u16", Value::Array(Array::U16(vec![0, 65535]))),
        ("a.i16", Value::Array(Array::I16(vec![-32768, 32767]))),
        ("a.u32", Value::Array(Array::U32(vec![7, 0, u32::MAX]))),
        ("a.i32", Value::Array(Array::I32(vec![-1, 2, -3, 4]))),
        (
            "a.f32",
            Value::Array(Array::F32(vec![
                1.5,
                -0.0,
                f32::INFINITY,
                f32::MIN_POSITIVE,
            ])),
        ),
        ("a.bool", Value::Array(Array::Bool(vec![true, false, true]))),
        (
            "a.string",
            Value::Array(Array::String(vec![
                "a".into(),
                String::new(),
                "▁the".into(),
                "<|im_start|>".into(),
                "\u{10FFFF}".into(),
            ])),
        ),
        ("a.u64", Value::Array(Array::U64(vec![u64::MAX, 0]))),
        ("a.i64", Value::Array(Array::I64(vec![i64::MIN, i64::MAX]))),
        ("a.f64", Value::Array(Array::F64(vec![-1e300, 5e-324]))),
        ("a.empty_u32", Value::Array(Array::U32(vec![]))),
        ("a.empty_string", Value::Array(Array::String(vec![]))),
        (
            "a.nested",
            Value::Array(Array::Array(vec![
                Array::U32(vec![1, 2, 3]),
                Array::String(vec!["x".into(), "yz".into()]),
                Array::Array(vec![Array::F32(vec![0.25]), Array::Bool(vec![])]),
                Array::I8(vec![]),
            ])),
        ),
        ("a.nested_empty", Value::Array(Array::Array(vec![]))),
    ]
}

/// (type, dims) of the sample tensors: several types, odd sizes, 1-D to 4-D,
/// and an empty tensor.
pub const TENSORS: &[(GgmlType, &[u64])] = &[
    (GgmlType::F32, &[5, 3]),
    (GgmlType::F16, &[7]),
    (GgmlType::Q4_0, &[64, 2]),
    (GgmlType::Q4_1, &[32, 3]),
    (GgmlType::Q8_0, &[32, 1, 2]),
    (GgmlType::Q4_K, &[256]),
    (GgmlType::Q6_K, &[256, 2]),
    (GgmlType::BF16, &[2, 2, 2, 2]),
    (GgmlType::I32, &[3]),
    (GgmlType::I8, &[9]),
    (GgmlType::F32, &[0, 4]),
];

/// Random bytes for a tensor of `dims` in `dtype`.
pub fn tensor_bytes(rng: &mut StdRng, dtype: GgmlType, dims: &[u64]) -> Vec<u8> {
    let n = dims.iter().product::<u64>() as usize;
    let len = dtype.row_bytes(n).expect("whole blocks");
    (0..len).map(|_| rng.r#gen()).collect()
}

/// A writer holding `every_value()` and `TENSORS` with random data, and
/// `alignment` if it is not the default.
pub fn sample_writer(alignment: Option<u32>, seed: u64) -> GgufWriter {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut w = GgufWriter::new();
    for (key, value) in every_value() {
        w.set(key, value);
    }
    if let Some(a) = alignment {
        w.set("general.alignment", Value::U32(a));
    }
    for (i, &(dtype, dims)) in TENSORS.iter().enumerate() {
        let data = tensor_bytes(&mut rng, dtype, dims);
        w.add_tensor(format!("t{i}.{dtype}"), dtype, dims, data)
            .expect("valid tensor");
    }
    w
}

/// A small valid file: a few keys of each kind and two tensors, for sweeps
/// that parse it thousands of times.
pub fn small_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()))
        .set("llama.block_count", Value::U32(2))
        .set("t.f32", Value::F32(1e-5))
        .set("t.bool", Value::Bool(true))
        .set(
            "tokenizer.ggml.tokens",
            Value::Array(Array::String(vec!["<s>".into(), "a".into(), "bc".into()])),
        )
        .set("t.scores", Value::Array(Array::F32(vec![0.0, -1.0, -2.0])))
        .set(
            "t.nested",
            Value::Array(Array::Array(vec![
                Array::U8(vec![1]),
                Array::Array(vec![Array::String(vec!["q".into()])]),
            ])),
        )
        .set("t.bools", Value::Array(Array::Bool(vec![true, false])))
        .set("general.alignment", Value::U32(16));
    w.add_tensor("token_embd.weight", GgmlType::Q8_0, &[32, 2], vec![3; 68])
        .expect("valid")
        .add_tensor("output_norm.weight", GgmlType::F32, &[5], vec![7; 20])
        .expect("valid");
    w.to_bytes()
}

/// Raw GGUF bytes, for files that no writer would produce.
#[derive(Clone, Default)]
pub struct Raw(pub Vec<u8>);

/// GGUF value type ids.
pub mod ty {
    pub const U8: u32 = 0;
    pub const U32: u32 = 4;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
}

impl Raw {
    /// Magic, version and the two counts.
    pub fn header(version: u32, n_tensors: u64, n_kv: u64) -> Self {
        let mut r = Raw::default();
        r.bytes(b"GGUF").u32(version).u64(n_tensors).u64(n_kv);
        r
    }

    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }

    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.bytes(&[v])
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    pub fn string(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }

    /// A key and its value type; the value bytes follow.
    pub fn key(&mut self, key: &str, ty: u32) -> &mut Self {
        self.string(key).u32(ty)
    }

    pub fn tensor_info(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.string(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }

    /// Zero bytes up to a multiple of `align`.
    pub fn pad(&mut self, align: usize) -> &mut Self {
        while !self.0.len().is_multiple_of(align) {
            self.0.push(0);
        }
        self
    }

    pub fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }

    pub fn build(&self) -> Vec<u8> {
        self.0.clone()
    }
}
