//! Deterministic pseudo-random numbers (xorshift64), seeds a failed run can be replayed
//! with, and little-endian f32 bytes.

/// xorshift64: deterministic pseudo-random numbers from a seed.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// A generator for `seed` (any value; the state is never 0).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `n` deterministic pseudo-random f32s, uniform in `[-0.05, 0.05)`.
pub fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| ((rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1)
        .collect()
}

/// A seed: `STRATA_TEST_SEED` when set (to replay a run), else from the clock. Printed with
/// the test's name, so that a failure can be replayed.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("STRATA_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("{test}: seed {seed} (replay with STRATA_TEST_SEED={seed})");
    seed
}

/// Values as little-endian f32 bytes.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Little-endian f32 bytes as values (a trailing partial value is ignored).
pub fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Relative Frobenius error of `got` against `want`: `|got - want| / |want|`, 0 when both
/// are all zero, infinite when only `want` is.
pub fn rel_error(got: &[f32], want: &[f32]) -> f64 {
    let e: f64 = got
        .iter()
        .zip(want)
        .map(|(&x, &y)| f64::from(x - y).powi(2))
        .sum();
    let n: f64 = want.iter().map(|&y| f64::from(y).powi(2)).sum();
    match (e == 0.0, n == 0.0) {
        (true, _) => 0.0,
        (false, true) => f64::INFINITY,
        (false, false) => (e / n).sqrt(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noise_is_deterministic_bounded_and_round_trips_as_bytes() {
        let a = noise(1000, 7);
        assert_eq!(a, noise(1000, 7));
        assert_ne!(a, noise(1000, 8));
        assert!(a.iter().all(|x| (-0.05..0.05).contains(x)));
        assert_eq!(f32s(&f32_bytes(&a)), a);
        assert_eq!(rel_error(&[3.0, 4.0], &[3.0, 4.0]), 0.0);
        assert!((rel_error(&[3.0, 4.0], &[0.0, 5.0]) - (10f64).sqrt() / 5.0).abs() < 1e-12);
        assert_eq!(rel_error(&[0.0], &[0.0]), 0.0);
        assert_eq!(rel_error(&[1.0], &[0.0]), f64::INFINITY);
        let mut r = Rng::new(0);
        assert!((0..1000).map(|_| r.unit()).all(|u| (0.0..1.0).contains(&u)));
    }
}
