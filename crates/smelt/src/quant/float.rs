//! The plain float types: F32, F16 and BF16, one little-endian value per
//! element (a "block" of one).
//!
//! Conversions follow ggml: f16 rounds to nearest even (`GGML_FP32_TO_FP16`),
//! bf16 rounds to nearest even and quiets NaNs (`ggml_compute_fp32_to_bf16`).

use half::slice::HalfFloatSliceExt;

use super::GgmlType;

/// A float type's element width and conversions.
#[derive(Clone, Copy)]
pub struct FloatType {
    pub dtype: GgmlType,
    pub width: usize,
    decode: fn(&[u8]) -> f32,
    encode: fn(f32, &mut [u8]),
}

pub const F32: FloatType = FloatType {
    dtype: GgmlType::F32,
    width: 4,
    decode: |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
    encode: |x, out| out.copy_from_slice(&x.to_le_bytes()),
};

pub const F16: FloatType = FloatType {
    dtype: GgmlType::F16,
    width: 2,
    decode: |b| half::f16::from_le_bytes([b[0], b[1]]).to_f32(),
    encode: |x, out| out.copy_from_slice(&half::f16::from_f32(x).to_le_bytes()),
};

pub const BF16: FloatType = FloatType {
    dtype: GgmlType::BF16,
    width: 2,
    decode: |b| bf16_to_f32(u16::from_le_bytes([b[0], b[1]])),
    encode: |x, out| out.copy_from_slice(&f32_to_bf16(x).to_le_bytes()),
};

/// The float type for `dtype`, if it is one.
pub fn float_type(dtype: GgmlType) -> Option<FloatType> {
    match dtype {
        GgmlType::F32 => Some(F32),
        GgmlType::F16 => Some(F16),
        GgmlType::BF16 => Some(BF16),
        _ => None,
    }
}

impl FloatType {
    /// `dst.len()` values from `src`; the caller has checked the lengths.
    pub fn dequantize_row(self, src: &[u8], dst: &mut [f32]) {
        // An aligned F16 row (any row of a tensor in a GGUF file) converts
        // as a slice, with the CPU's conversion instructions where it has
        // them: exact either way.
        if self.dtype == GgmlType::F16
            && let Ok(h) = bytemuck::try_cast_slice::<u8, half::f16>(src)
        {
            h.convert_to_f32_slice(&mut dst[..h.len()]);
            return;
        }
        for (y, b) in dst.iter_mut().zip(src.chunks_exact(self.width)) {
            *y = (self.decode)(b);
        }
    }

    pub fn quantize_row(self, src: &[f32], dst: &mut [u8]) {
        for (&x, b) in src.iter().zip(dst.chunks_exact_mut(self.width)) {
            (self.encode)(x, b);
        }
    }

    /// Products in f32, summed in f64, like `ggml_vec_dot_f32`.
    pub fn dot_row(self, w: &[u8], x: &[f32]) -> f32 {
        w.chunks_exact(self.width)
            .zip(x)
            .map(|(b, &v)| f64::from((self.decode)(b) * v))
            .sum::<f64>() as f32
    }
}

/// bf16 is the top half of an f32, so widening is exact.
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// `ggml_compute_fp32_to_bf16`: NaNs keep their sign and top mantissa bits
/// and are made quiet (a truncated signalling NaN could become infinity);
/// other values round to nearest, ties to even, by adding 0x7fff plus the
/// lowest kept bit before truncating.
pub fn f32_to_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        // 1 + 2^-8 is halfway between two bf16 values; ties go to the even
        // one (1.0). 1 + 3*2^-8 is halfway too and goes up to 1 + 2^-6.
        assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8)), 0x3f80);
        assert_eq!(f32_to_bf16(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::INFINITY), 0x7f80);
        // A signalling NaN whose payload lies below bit 16 stays a NaN.
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(bf16_to_f32(0xc000), -2.0);
    }
}
