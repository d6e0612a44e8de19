//! Deterministic test data for the tests, benches, examples and fuzz seeds of every crate
//! of Strata.
//!
//! Not for cryptography, keys, or anything an attacker may try to predict: the generator
//! is a few arithmetic steps, fully determined by its seed.

/// The splitmix64 generator (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", 2014; the constants of Vigna's reference code): 64 bits of state, the same
/// stream on every run and every target, well mixed enough for test data.
///
/// For deterministic test data only, never for cryptography.
///
/// ```
/// use strata_codec::testing::SplitMix64;
///
/// let mut a = SplitMix64::new(42);
/// let mut b = SplitMix64::new(42);
/// assert_eq!(a.next_u64(), b.next_u64());
/// let x = a.next_f64();
/// assert!((0.0..1.0).contains(&x));
/// // The first output of a seed is the seed mixed once.
/// assert_eq!(SplitMix64::new(7).next_u64(), SplitMix64::mix(7));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// The golden-ratio increment added to the state at each step.
    const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

    /// A generator whose stream is fixed by `seed`.
    pub const fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(Self::GAMMA);
        Self::finalize(self.state)
    }

    /// Uniform in `[0, 1)`, from the top 53 bits of [`SplitMix64::next_u64`].
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (0 when `n` is 0), by a multiply-shift of
    /// [`SplitMix64::next_u64`] (bias below 2^-32 for `n` under 2^32).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A standard normal value (Box–Muller over two [`SplitMix64::next_f64`] draws).
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.next_f64();
        let v = self.next_f64();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// `x` hashed statelessly: the first output of a generator seeded with `x`. Spreads
    /// consecutive integers over all of `u64`.
    pub const fn mix(x: u64) -> u64 {
        Self::finalize(x.wrapping_add(Self::GAMMA))
    }

    /// The output function (the splitmix64 finalizer).
    const fn finalize(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_outputs() {
        // Vigna's splitmix64.c seeded with 1234567.
        let mut r = SplitMix64::new(1_234_567);
        let want = [
            6_457_827_717_110_365_317u64,
            3_203_168_211_198_807_973,
            9_817_491_932_198_370_423,
            4_593_380_528_125_082_431,
            16_408_922_859_458_223_821,
        ];
        for w in want {
            assert_eq!(r.next_u64(), w);
        }
    }

    #[test]
    fn ranges() {
        let mut r = SplitMix64::new(0);
        for _ in 0..1000 {
            assert!((0.0..1.0).contains(&r.next_f64()));
            assert!(r.below(10) < 10);
        }
        assert_eq!(r.below(0), 0);
        assert_eq!(SplitMix64::new(5).clone(), SplitMix64::new(5));
    }
}
