//! Weight types: block layouts, dequantization, quantization and reference
//! dot products, one file per family.
//!
//! Everything here works on raw GGUF bytes: a row of `n` values of type `t`
//! is `t.row_bytes(n)` bytes of consecutive blocks.
//!
//! - `float.rs`: F32, F16, BF16.
//! - `legacy.rs`: the 32-value blocks Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
//! - `kquants/`: the 256-value super-blocks Q2_K..Q6_K and Q8_K, a file each.
//! - `codebook.rs`: IQ4_NL, IQ4_XS and MXFP4, whose quants index a table.
//! - `ternary.rs`: TQ1_0 and TQ2_0.
//! - `ftype.rs`: llama.cpp's file types (`Q4_K_M`), which name a mix of these.
//! - `blocks.rs`: the [`Block`] trait and the row loops they share.
//!
//! The code here is the plain reference: obviously correct, checked against
//! the `gguf` Python package, and what every fast path is compared with.

mod blocks;
mod codebook;
mod float;
mod ftype;
mod kquants;
mod legacy;
mod ternary;
mod types;

pub use blocks::{Block, F16Bytes, Quantize, as_blocks, as_blocks_mut, f16_to_f32, f32_to_f16};
pub use codebook::{
    BlockIQ4_NL, BlockIQ4_XS, BlockMXFP4, KVALUES_IQ4NL, KVALUES_MXFP4, e8m0_to_f32_half,
};
pub use float::{bf16_to_f32, f32_to_bf16};
pub use ftype::{FileType, UNKNOWN_FILE_TYPE, describe_file_type};
pub use kquants::{
    BlockQ2_K, BlockQ3_K, BlockQ4_K, BlockQ5_K, BlockQ6_K, BlockQ8_K, scale_min_k4, scale_q3_k,
};
pub use legacy::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1};
pub use ternary::{BlockTQ1_0, BlockTQ2_0};
pub use types::{ALL_TYPES, GgmlType, QK_K};

#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    #[error("{op} is not implemented for {dtype}")]
    Unsupported { op: &'static str, dtype: GgmlType },
    #[error("{dtype}: {n} values is not a whole number of {block}-value blocks")]
    NotWholeBlocks {
        dtype: GgmlType,
        n: usize,
        block: usize,
    },
    #[error("{dtype}: {got} bytes given for {n} values, {expected} expected")]
    WrongLength {
        dtype: GgmlType,
        n: usize,
        got: usize,
        expected: usize,
    },
}

/// Checks that `bytes` holds exactly `n` values of `dtype`.
pub fn check_row(dtype: GgmlType, bytes: usize, n: usize) -> Result<(), QuantError> {
    let expected = dtype.row_bytes(n).ok_or(QuantError::NotWholeBlocks {
        dtype,
        n,
        block: dtype.block_size(),
    })?;
    if bytes != expected {
        return Err(QuantError::WrongLength {
            dtype,
            n,
            got: bytes,
            expected,
        });
    }
    Ok(())
}

/// `Some($e)` with `$B` naming the block type of `$dtype`, for the listed
/// types; `None` for the others.
macro_rules! dispatch {
    ($dtype:expr, $B:ident => $e:expr, [$($t:ident => $block:ty),* $(,)?]) => {
        match $dtype {
            $(GgmlType::$t => Some({
                type $B = $block;
                $e
            }),)*
            _ => None,
        }
    };
}

/// Every block type that dequantizes.
macro_rules! with_block {
    ($dtype:expr, $B:ident => $e:expr) => {
        dispatch!($dtype, $B => $e, [
            Q4_0 => BlockQ4_0, Q4_1 => BlockQ4_1, Q5_0 => BlockQ5_0, Q5_1 => BlockQ5_1,
            Q8_0 => BlockQ8_0, Q8_1 => BlockQ8_1,
            Q2_K => BlockQ2_K, Q3_K => BlockQ3_K, Q4_K => BlockQ4_K, Q5_K => BlockQ5_K,
            Q6_K => BlockQ6_K, Q8_K => BlockQ8_K,
            IQ4_NL => BlockIQ4_NL, IQ4_XS => BlockIQ4_XS, MXFP4 => BlockMXFP4,
            TQ1_0 => BlockTQ1_0, TQ2_0 => BlockTQ2_0,
        ])
    };
}

/// The block types that also quantize.
macro_rules! with_quantizer {
    ($dtype:expr, $B:ident => $e:expr) => {
        dispatch!($dtype, $B => $e, [
            Q4_0 => BlockQ4_0, Q4_1 => BlockQ4_1, Q5_0 => BlockQ5_0, Q5_1 => BlockQ5_1,
            Q8_0 => BlockQ8_0, Q8_1 => BlockQ8_1,
            Q2_K => BlockQ2_K, Q3_K => BlockQ3_K, Q4_K => BlockQ4_K, Q5_K => BlockQ5_K,
            Q6_K => BlockQ6_K, Q8_K => BlockQ8_K,
        ])
    };
}

/// True when [`dequantize_row`] and [`dot_f32`] handle `dtype`.
pub fn can_dequantize(dtype: GgmlType) -> bool {
    float::float_type(dtype).is_some() || with_block!(dtype, B => size_of::<B>()).is_some()
}

/// True when [`quantize_row`] handles `dtype`.
pub fn can_quantize(dtype: GgmlType) -> bool {
    float::float_type(dtype).is_some() || with_quantizer!(dtype, B => size_of::<B>()).is_some()
}

/// Dequantizes one row: `src` holds `dst.len()` values of `dtype`.
pub fn dequantize_row(dtype: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    check_row(dtype, src.len(), dst.len())?;
    if let Some(f) = float::float_type(dtype) {
        f.dequantize_row(src, dst);
        return Ok(());
    }
    with_block!(dtype, B => blocks::dequantize_row::<B>(src, dst)).unwrap_or(Err(
        QuantError::Unsupported {
            op: "dequantize",
            dtype,
        },
    ))
}

/// Quantizes one row: `dst` receives `src.len()` values of `dtype`, rounded
/// as ggml's `quantize_row_*_ref` rounds them.
pub fn quantize_row(dtype: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    check_row(dtype, dst.len(), src.len())?;
    if let Some(f) = float::float_type(dtype) {
        f.quantize_row(src, dst);
        return Ok(());
    }
    with_quantizer!(dtype, B => blocks::quantize_row::<B>(src, dst)).unwrap_or(Err(
        QuantError::Unsupported {
            op: "quantize",
            dtype,
        },
    ))
}

/// The reference dot product of one weight row (`x.len()` values of
/// `dtype`) with f32 values: the weights are dequantized block by block,
/// multiplied in f32 and summed in f64.
pub fn dot_f32(dtype: GgmlType, w_row: &[u8], x: &[f32]) -> Result<f32, QuantError> {
    check_row(dtype, w_row.len(), x.len())?;
    if let Some(f) = float::float_type(dtype) {
        return Ok(f.dot_row(w_row, x));
    }
    with_block!(dtype, B => blocks::dot_row::<B>(w_row, x)).unwrap_or(Err(
        QuantError::Unsupported {
            op: "dot product",
            dtype,
        },
    ))
}

/// Converts whole rows of `row_len` values from `src_type` to `dst_type`
/// through f32 (dequantize, then quantize), one row at a time in `scratch`.
/// `src` and `dst` must hold the same number of rows.
pub fn convert_rows(
    src_type: GgmlType,
    src: &[u8],
    dst_type: GgmlType,
    dst: &mut [u8],
    row_len: usize,
    scratch: &mut Vec<f32>,
) -> Result<(), QuantError> {
    let not_whole = |dtype: GgmlType| QuantError::NotWholeBlocks {
        dtype,
        n: row_len,
        block: dtype.block_size(),
    };
    if row_len == 0 {
        check_row(src_type, src.len(), 0)?;
        return check_row(dst_type, dst.len(), 0);
    }
    let src_row = src_type.row_bytes(row_len).ok_or(not_whole(src_type))?;
    let dst_row = dst_type.row_bytes(row_len).ok_or(not_whole(dst_type))?;
    let rows = src.len().checked_div(src_row).unwrap_or(0);
    check_row(src_type, src.len(), rows * row_len)?;
    check_row(dst_type, dst.len(), rows * row_len)?;
    scratch.resize(row_len, 0.0);
    for (s, d) in src.chunks_exact(src_row).zip(dst.chunks_exact_mut(dst_row)) {
        dequantize_row(src_type, s, scratch)?;
        quantize_row(dst_type, scratch, d)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_lengths_and_types_are_errors() {
        let mut out = [0f32; 32];
        assert!(matches!(
            dequantize_row(GgmlType::Q4_0, &[0; 17], &mut out),
            Err(QuantError::WrongLength { expected: 18, .. })
        ));
        assert!(matches!(
            dequantize_row(GgmlType::Q4_0, &[0; 18], &mut out[..31]),
            Err(QuantError::NotWholeBlocks { .. })
        ));
        assert!(matches!(
            dequantize_row(GgmlType::IQ2_XXS, &[], &mut []),
            Err(QuantError::Unsupported { .. })
        ));
        assert!(matches!(
            quantize_row(GgmlType::IQ4_XS, &[0.0; 256], &mut [0; 136]),
            Err(QuantError::Unsupported { .. })
        ));
        assert!(dot_f32(GgmlType::Q8_0, &[0; 34], &[0.0; 33]).is_err());
    }

    #[test]
    fn capabilities_match_the_dispatch() {
        for t in ALL_TYPES {
            let n = t.block_size();
            let bytes = vec![0u8; t.type_size()];
            let ok = dequantize_row(t, &bytes, &mut vec![0.0; n]).is_ok();
            assert_eq!(ok, can_dequantize(t), "{t}");
            assert_eq!(dot_f32(t, &bytes, &vec![0.0; n]).is_ok(), ok, "{t}");
            let q = quantize_row(t, &vec![0.0; n], &mut vec![0u8; t.type_size()]).is_ok();
            assert_eq!(q, can_quantize(t), "{t}");
        }
    }
}
