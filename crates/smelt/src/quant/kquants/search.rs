//! The scale searches the K-quant quantizers share: for a sub-block of
//! values, the scale (and min) whose rounded quants fit the values best.
//!
//! These follow ggml's `make_qx_quants`, `make_q3_quants` and
//! `make_qkx2_quants` (without an importance matrix) operation for
//! operation: ggml builds them as portable C without `-ffast-math` or FMA,
//! so each `a*b + c` rounds twice, sums run in index order, and every
//! value here is an f32. Changing any of that changes the bytes of
//! llama-quantize's files, which `tests/quantize_llama.rs` compares.

/// Sub-blocks whose largest magnitude is below this are all zero
/// (ggml's `GROUP_MAX_EPS`).
pub const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: adds 1.5 * 2^23, so the f32 addition rounds to an
/// integer (ties to even), and reads that integer from the mantissa bits.
/// Exact for |x| < 2^22; larger (or non-finite) values give whatever those
/// bits hold, as in ggml, and every caller clamps the result.
pub fn nearest_int(x: f32) -> i32 {
    let biased = x + 12_582_912.0;
    (biased.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// The value of largest magnitude with its sign, the first one on ties, and
/// that magnitude.
pub fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// Symmetric quants `l` in `-nmax..nmax` of `x`, with the x²-weighted least
/// squares scale (`make_qx_quants` with `rmse_type = 1`, as Q6_K uses it):
/// the quants of `-nmax / max` and of 18 nearby inverse scales are tried,
/// and the one with the best `(Σ w·x·l)² / Σ w·l²` kept.
///
/// `levels` receives `l + nmax`; returns the scale (0 for an all-zero
/// sub-block, whose levels are then 0).
pub fn make_qx_quants(nmax: i32, x: &[f32], levels: &mut [u8]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let quant = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    // (Σ w·x·l, Σ w·l²) with w = x², each product rounded as ggml rounds it.
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for &v in x {
            let l = quant(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let set_levels = |levels: &mut [u8], iscale: f32| {
        for (q, &v) in levels.iter_mut().zip(x) {
            *q = (nmax + quant(iscale, v)) as u8;
        }
    };

    let iscale = -(nmax as f32) / max;
    set_levels(levels, iscale);
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for step in (-9..=9).filter(|&s| s != 0) {
        let iscale = -(nmax as f32 + 0.1 * step as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            set_levels(levels, iscale);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Symmetric quants in `-nmax..nmax` refined one value at a time
/// (`make_q3_quants` with `do_rmse`, as Q3_K uses it): starting from the
/// quants of `-nmax / max`, each value moves to its best level given the
/// others while that raises `(Σ w·x·l)² / Σ w·l²` (w = x²), for up to 5
/// passes.
///
/// `levels` receives `l + nmax`; returns the scale (0 for an all-zero
/// sub-block, whose levels are then 0, not `nmax`).
pub fn make_q3_quants(nmax: i32, x: &[f32], levels: &mut [u8]) -> f32 {
    const PASSES: usize = 5;
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    // (16) at most a sub-block of 16 values.
    let mut l = [0i32; 16];
    let l = &mut l[..x.len()];
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (li, &v) in l.iter_mut().zip(x) {
        *li = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        let w = v * v;
        sumlx += w * v * *li as f32;
        suml2 += w * *li as f32 * *li as f32;
    }
    for _ in 0..PASSES {
        let mut changed = false;
        for (li, &v) in l.iter_mut().zip(x) {
            if let Some((new_l, slx, sl2)) = better_level(nmax, v, *li, sumlx, suml2) {
                (*li, sumlx, suml2) = (new_l, slx, sl2);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    for (q, &li) in levels.iter_mut().zip(l.iter()) {
        *q = (li + nmax) as u8;
    }
    if suml2 > 0.0 { sumlx / suml2 } else { 0.0 }
}

/// One step of `make_q3_quants`' refinement: value `v`, now at level `l`,
/// moves to the level that fits the others' scale, if that raises the fit.
/// Returns the new level and sums.
fn better_level(nmax: i32, v: f32, l: i32, sumlx: f32, suml2: f32) -> Option<(i32, f32, f32)> {
    let w = v * v;
    let slx = sumlx - w * v * l as f32;
    let sl2 = suml2 - w * l as f32 * l as f32;
    // `slx > 0` fails for a NaN too, as ggml's test does.
    let new_l = (slx > 0.0).then(|| nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1))?;
    if new_l == l {
        return None;
    }
    let slx = slx + w * v * new_l as f32;
    let sl2 = sl2 + w * new_l as f32 * new_l as f32;
    (sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2).then_some((new_l, slx, sl2))
}

/// How `make_qkx2_quants` searches: inverse scales `(rmin + rdelta*i +
/// nmax) / (max - min)` for `i` in `0..=steps`, errors weighed as absolute
/// values (`mad`) or squares.
#[derive(Clone, Copy)]
pub struct AffineSearch {
    pub nmax: i32,
    pub rmin: f32,
    pub rdelta: f32,
    pub steps: i32,
    pub mad: bool,
}

/// Affine quants `l` in `0..=nmax` of `x ≈ scale*l - min` (`make_qkx2_quants`):
/// for each inverse scale tried, the weighted least-squares scale and min
/// of its quants (min clamped to at most 0), keeping the pair with the
/// least weighted error.
///
/// `levels` receives the quants and `aux` is scratch of the same length;
/// returns `(scale, min)` with `min >= 0` subtracted.
pub fn make_qkx2_quants(
    search: AffineSearch,
    x: &[f32],
    weights: &[f32],
    levels: &mut [u8],
    aux: &mut [u8],
) -> (f32, f32) {
    let nmax = search.nmax;
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for (&v, &w) in x.iter().zip(weights).skip(1) {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
        sum_w += w;
        sum_x += w * v;
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        levels.fill(0);
        return (0.0, -min);
    }
    let quant = |iscale: f32, v: f32, min: f32| nearest_int(iscale * (v - min)).clamp(0, nmax);
    let error = |diff: f32| if search.mad { diff.abs() } else { diff * diff };

    let iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for ((q, &v), &w) in levels.iter_mut().zip(x).zip(weights) {
        *q = quant(iscale, v, min) as u8;
        best_error += w * error(scale * f32::from(*q) + min - v);
    }
    if search.steps < 1 {
        return (scale, -min);
    }
    // Each candidate is quantized against the best min so far.
    for step in 0..=search.steps {
        let iscale = (search.rmin + search.rdelta * step as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for ((a, &v), &w) in aux.iter_mut().zip(x).zip(weights) {
            let l = quant(iscale, v, min);
            *a = l as u8;
            let l = l as f32;
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * v;
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for ((&a, &v), &w) in aux.iter().zip(x).zip(weights) {
                cur_error += w * error(this_scale * f32::from(a) + this_min - v);
            }
            if cur_error < best_error {
                levels.copy_from_slice(aux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_ties_to_even_like_ggml() {
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(3.5), 4);
        assert_eq!(nearest_int(-2.5), -2);
        assert_eq!(nearest_int(-0.4), 0);
        assert_eq!(nearest_int(4_194_303.0), 4_194_303);
    }

    #[test]
    fn qx_quants_fit_a_grid_exactly() {
        // Values on a grid of step 0.5 come back on it.
        let x: Vec<f32> = (0..16).map(|i| (i as f32 - 8.0) * 0.5).collect();
        let mut levels = [0u8; 16];
        let scale = make_qx_quants(32, &x, &mut levels);
        for (&q, &v) in levels.iter().zip(&x) {
            assert!((scale * (f32::from(q) - 32.0) - v).abs() < 1e-6, "{v}");
        }
    }
}
