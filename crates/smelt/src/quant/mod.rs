//! Weight types: block layouts, dequantization, quantization and reference
//! dot products, one file per family.
//!
//! Everything here works on raw GGUF bytes: a row of `n` values of type `t`
//! is `t.row_bytes(n)` bytes of consecutive blocks.

mod types;

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

/// Dequantizes one row: `src` holds `dst.len()` values of `dtype`.
pub fn dequantize_row(dtype: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    check_row(dtype, src.len(), dst.len())?;
    match dtype {
        GgmlType::F32 => {
            for (d, c) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        GgmlType::F16 => {
            for (d, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        _ => {
            return Err(QuantError::Unsupported {
                op: "dequantize",
                dtype,
            });
        }
    }
    Ok(())
}
