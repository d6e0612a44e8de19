//! The domain of a block's values, read from the data whatever the tensor is called: whether
//! every value is non-negative (second moments, variances, counts), an integer (step
//! counters, indices, masks) and finite. Lossy paths keep a block in its domain (ADR 0027):
//! an aged block of non-negative values reads back non-negative, a block of integers is kept
//! exact, a block with NaN or infinities is kept exact.
//!
//! ```
//! use strata_codec::{domain::Domain, DType};
//! let f = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
//! let d = Domain::of(DType::F32, &f(&[0.0, 3.0, 1e-9])).unwrap();
//! assert!(d.non_negative && !d.integers && d.finite);
//! assert!(Domain::of(DType::F32, &f(&[1.0, 2.0, 40.0])).unwrap().integers);
//! ```

use crate::convert::{to_f32_into, ConvertError};
use crate::DType;

/// Elements converted at a time.
const CHUNK: usize = 1024;

/// What every value of a block is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Domain {
    /// Every value is `>= 0` (`-0.0` counts as 0; NaN does not).
    pub non_negative: bool,
    /// Every value is a whole number (zeros included).
    pub integers: bool,
    /// No value is NaN or infinite.
    pub finite: bool,
}

impl Domain {
    /// The domain of the little-endian values `bytes` of float `dtype`.
    ///
    /// # Errors
    /// [`ConvertError::NotFloat`] for an integer or bool dtype (whose values are integers
    /// by their type).
    pub fn of(dtype: DType, bytes: &[u8]) -> Result<Domain, ConvertError> {
        let size = dtype.size();
        let mut d = Domain::EMPTY;
        let mut buf = [0f32; CHUNK];
        for chunk in bytes.chunks(CHUNK * size) {
            let k = chunk.len() / size;
            to_f32_into(dtype, &chunk[..k * size], &mut buf[..k])?;
            d.add(&buf[..k]);
            if !(d.non_negative || d.integers || d.finite) {
                break;
            }
        }
        Ok(d)
    }

    /// The domain of `values`.
    pub fn of_values(values: &[f32]) -> Domain {
        let mut d = Domain::EMPTY;
        d.add(values);
        d
    }

    /// The domain of no value: everything holds.
    const EMPTY: Domain = Domain {
        non_negative: true,
        integers: true,
        finite: true,
    };

    fn add(&mut self, values: &[f32]) {
        // A block of weights has its first non-integer early: the rest is two comparisons
        // an element, which vectorize (aging checks every block it reads).
        if self.integers {
            self.integers = values.iter().all(|&x| is_integer(x));
        }
        for &x in values {
            self.non_negative &= x >= 0.0;
            self.finite &= x.is_finite();
        }
    }

    /// Whether a lossy encoding may change the block at all: finite values that are not all
    /// integers (a block of integers, zeros included, stays exact).
    pub fn lossy_allowed(&self) -> bool {
        self.finite && !self.integers
    }
}

/// Whether `x` is a finite whole number. Every f32 of magnitude 2^23 or more is one; below,
/// the round trip through an `i32` is exact only for whole numbers (`f32::trunc` is a libm
/// call on baseline x86-64).
fn is_integer(x: f32) -> bool {
    if !x.is_finite() {
        return false;
    }
    x.abs() >= 8_388_608.0 || (x as i32) as f32 == x
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn edge_values() {
        let d = |v: &[f32]| Domain::of(DType::F32, &f32_bytes(v)).unwrap();
        assert!(d(&[-0.0, 0.0]).non_negative);
        assert!(!d(&[f32::NAN]).non_negative && !d(&[f32::NAN]).finite);
        assert!(!d(&[f32::INFINITY]).integers);
        assert!(!d(&[-1e-30]).non_negative);
        assert!(d(&[]).integers && d(&[]).non_negative);
        assert!(d(&[0.5]).lossy_allowed() && !d(&[1.0, 2.0]).lossy_allowed());
        assert!(Domain::of(DType::I32, &[0; 4]).is_err());
    }

    proptest! {
        /// The domain agrees with a direct look at every value, for every float dtype.
        #[test]
        fn matches_each_value(v in proptest::collection::vec(-1e6f32..1e6, 0..3000), ints in any::<bool>()) {
            let v: Vec<f32> = if ints { v.iter().map(|x| x.trunc()).collect() } else { v };
            let d = Domain::of(DType::F32, &f32_bytes(&v)).unwrap();
            prop_assert_eq!(d.non_negative, v.iter().all(|&x| x >= 0.0));
            prop_assert_eq!(d.integers, v.iter().all(|&x| x == x.trunc()));
            prop_assert!(d.finite);
        }

        /// The fast test agrees with `trunc` on every float, huge, tiny and negative ones.
        #[test]
        fn integer_test_matches_trunc(bits in any::<u32>()) {
            let x = f32::from_bits(bits);
            prop_assert_eq!(is_integer(x), x.is_finite() && x == x.trunc());
        }
    }
}
