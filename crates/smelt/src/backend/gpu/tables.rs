//! The constants and tables of `kernels/exact.wgsl`'s correctly rounded
//! `exp_rn` and `sincos_rn`, made here in f64 and split into f32 parts
//! (WGSL has no f64, and its literals go through naga's own rounding).
//!
//! Layout (f32 values; the WGSL comment repeats it):
//!
//! ```text
//!   0..2    32 / ln2, 32 / pi
//!   2..5    ln2 / 32 as three parts
//!   5..8    pi / 32 as three parts
//!   8..72   2^(j/32), j = 0..32, as (hi, lo)
//!   72..328 sin and cos of k·pi/32, k = 0..64, as (sin hi, sin lo, cos hi, cos lo)
//! ```

use std::f64::consts::{LN_2, PI};

/// Values in the table.
pub const LEN: usize = 328;

/// `v` as hi + lo with hi = v rounded to f32.
fn split2(v: f64) -> [f32; 2] {
    let hi = v as f32;
    [hi, (v - f64::from(hi)) as f32]
}

/// pi/32 and ln2/32 as three f32 parts whose sum is within 2^-73 of the
/// constant (found with exact rationals from 60-digit values): the
/// reduction `x - k·C` multiplies the first two exactly (fma) and the third
/// in f32, an error near 2^-70 for the |k| < 2^20 of RoPE angles (Cody and
/// Waite's scheme). f64 alone would leave 2^-53.
const PI_32: [u32; 3] = [0x3dc9_0fdb, 0xb13b_bd2e, 0xa4f7_2ced];
const LN2_32: [u32; 3] = [0x3cb1_7218, 0xae82_e308, 0xa24a_86c4];

pub fn exact_tables() -> Vec<f32> {
    let mut t = Vec::with_capacity(LEN);
    t.push((32.0 / LN_2) as f32);
    t.push((32.0 / PI) as f32);
    t.extend(LN2_32.map(f32::from_bits));
    t.extend(PI_32.map(f32::from_bits));
    for j in 0..32 {
        t.extend(split2((f64::from(j) / 32.0).exp2()));
    }
    for k in 0..64 {
        let a = f64::from(k) * PI / 32.0;
        t.extend(split2(a.sin()));
        t.extend(split2(a.cos()));
    }
    debug_assert_eq!(t.len(), LEN);
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_sum_to_the_constant() {
        for (parts, v) in [(LN2_32, LN_2 / 32.0), (PI_32, PI / 32.0)] {
            let [a, b, c] = parts.map(|p| f64::from(f32::from_bits(p)));
            assert!(((a + b + c) - v).abs() < v * 1e-16, "{v}");
            assert!(c.abs() < b.abs() * 1e-6 && b.abs() < a.abs() * 1e-6);
        }
        let t = exact_tables();
        assert_eq!(t.len(), LEN);
        // 2^(1/2) and cos(pi/2) ~ 0.
        let r2 = f64::from(t[8 + 32]) + f64::from(t[9 + 32]);
        assert!((r2 - 2f64.sqrt()).abs() < 1e-15);
        assert!(t[72 + 4 * 16 + 2].abs() < 1e-7);
    }
}
