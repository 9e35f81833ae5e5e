//! The K-quants: super-blocks of `QK_K = 256` values split into sub-blocks
//! of 16 or 32, each with its own small integer scale (and min) that a
//! super-block f16 scale multiplies. Q2_K..Q6_K are weight types; Q8_K is
//! the activation type their integer dot products pair with.
//!
//! One file per type: its block layout, dequantization and quantization.
//! Element order inside a super-block follows ggml's `dequantize_row_*`
//! exactly; each type's comment gives the index of value `e` in its arrays.
//! Quantizers follow ggml's `quantize_row_*_ref` (what llama-quantize runs
//! without an importance matrix) to the bit, through the scale searches in
//! `search.rs`.

mod q2_k;
mod q3_k;
mod q4_k;
mod q5_k;
mod q6_k;
mod q8_k;
mod search;

pub use q2_k::BlockQ2_K;
pub use q3_k::{BlockQ3_K, scale_q3_k};
pub use q4_k::{BlockQ4_K, scale_min_k4};
pub use q5_k::BlockQ5_K;
pub use q6_k::BlockQ6_K;
pub use q8_k::BlockQ8_K;
