//! `max_abs`: the largest magnitude in a slice, with an AVX2 variant picked once per process
//! ([`Simd::detect`]).
//!
//! The magnitude is taken on the bit pattern: clearing the sign bit of an IEEE 754 float
//! gives an integer that orders like the magnitude, and NaN and infinity sort above every
//! finite value. One integer max therefore yields the largest magnitude and tells whether
//! the slice holds a non-finite value, and it vectorizes on any target.

use crate::cpu::Simd;

/// Bit pattern of `+inf`: every magnitude at or above it is infinite or NaN.
pub(crate) const INF_BITS: u32 = 0x7F80_0000;

/// The largest `|x|` in `values`, or 0.0 for an empty slice.
///
/// NaN anywhere gives a NaN; otherwise an infinity gives `+inf`. `-0.0` counts as zero.
/// On x86_64 with AVX2 (detected at run time) the loop runs 8 lanes wide; elsewhere,
/// including wasm32, a portable loop that the compiler vectorizes for the baseline target.
///
/// ```
/// assert_eq!(strata_codec::quant::max_abs(&[1.0, -3.5, 2.0]), 3.5);
/// assert!(strata_codec::quant::max_abs(&[1.0, f32::NAN]).is_nan());
/// ```
pub fn max_abs(values: &[f32]) -> f32 {
    f32::from_bits(max_abs_bits(values))
}

/// [`max_abs`] as the bit pattern of the magnitude.
fn max_abs_bits(values: &[f32]) -> u32 {
    max_abs_bits_with(Simd::detect(), values)
}

/// [`max_abs_bits`] with the given kernel: callers that take many maxima detect once.
#[inline]
pub(crate) fn max_abs_bits_with(simd: Simd, values: &[f32]) -> u32 {
    simd.run(
        #[inline(always)]
        || max_abs_bits_portable(values),
    )
}

/// Portable kernel; inlined into [`Simd::run`]'s AVX2 function, so it is compiled twice.
#[inline(always)]
pub(crate) fn max_abs_bits_portable(values: &[f32]) -> u32 {
    const LANES: usize = 16;
    let mut acc = [0u32; LANES];
    let chunks = values.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (a, &v) in acc.iter_mut().zip(chunk) {
            *a = (*a).max(v.to_bits() & 0x7FFF_FFFF);
        }
    }
    let mut m = acc.into_iter().max().unwrap_or(0);
    for &v in tail {
        m = m.max(v.to_bits() & 0x7FFF_FFFF);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn specials() {
        assert_eq!(max_abs(&[]), 0.0);
        assert_eq!(max_abs(&[-0.0]).to_bits(), 0);
        assert_eq!(max_abs(&[1.0, f32::NEG_INFINITY]), f32::INFINITY);
        assert!(max_abs(&[f32::INFINITY, f32::NAN, 1.0]).is_nan());
        assert_eq!(max_abs(&[1e-45, -2e-45]), 2e-45);
    }

    proptest! {
        #[test]
        fn matches_scalar_fold(v in prop::collection::vec(-1e30f32..1e30, 0..100)) {
            let expect = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            prop_assert_eq!(max_abs(&v), expect);
            prop_assert_eq!(max_abs_bits_portable(&v), expect.to_bits());
            prop_assert_eq!(max_abs_bits_with(Simd::Scalar, &v), expect.to_bits());
            prop_assert_eq!(max_abs_bits_with(Simd::detect(), &v), expect.to_bits());
        }
    }
}
