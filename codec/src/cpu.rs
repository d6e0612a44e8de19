//! The instruction set the SIMD kernels run with, detected once per process.
//!
//! Each kernel family (the plane joins and 6-bit packing of [`crate::lossless`], the
//! quantizer and `max_abs` of [`crate::quant`]) takes a [`Simd`] at its entry point and
//! matches on it, as bitpacking's `InstructionSet` does: the CPU is asked once, on the first
//! call, not at every call site. Every family keeps its portable code as the reference the
//! SIMD variant is tested against. (The rANS coder has its own `Kernel`, which also needs
//! POPCNT.)

/// Which variant of a kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Simd {
    /// Portable code: wasm32, other architectures, x86_64 CPUs without AVX2.
    Scalar,
    /// AVX2 (x86_64).
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Simd {
    /// The best variant this CPU runs: detected on the first call, remembered after.
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn detect() -> Simd {
        static DETECTED: std::sync::OnceLock<Simd> = std::sync::OnceLock::new();
        *DETECTED.get_or_init(|| {
            if std::arch::is_x86_feature_detected!("avx2") {
                Simd::Avx2
            } else {
                Simd::Scalar
            }
        })
    }

    /// The best variant this target runs: the portable one.
    #[cfg(not(target_arch = "x86_64"))]
    pub(crate) const fn detect() -> Simd {
        Simd::Scalar
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_is_stable() {
        assert_eq!(Simd::detect(), Simd::detect());
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            Simd::detect() == Simd::Avx2,
            std::arch::is_x86_feature_detected!("avx2")
        );
    }
}
