//! The instruction set the SIMD kernels run with, detected once per process.
//!
//! Each kernel family (the plane splits and joins and 6-bit packing of [`crate::lossless`],
//! the quantizer and `max_abs` of [`crate::quant`]) takes a [`Simd`] at its entry point, as
//! bitpacking's `InstructionSet` does: the CPU is asked once, on the first call, not at every
//! call site. Most write their loops once, portably, and [`Simd::run`] compiles them a second
//! time with AVX2 enabled; the 6-bit packing matches on the variant for its intrinsics. Every
//! family keeps its portable code as the reference the SIMD variant is tested against. (The
//! rANS coder has its own `Kernel`, which also needs POPCNT.)

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

    /// Runs `kernel` compiled for this variant: for [`Simd::Avx2`] inside a function with
    /// AVX2 enabled, into which the closure and the `#[inline(always)]` loops it calls are
    /// inlined, so LLVM vectorizes them 32 bytes wide; for [`Simd::Scalar`] as it is. The
    /// kernel's portable code is thus compiled once per variant, and is its own reference.
    #[inline(always)]
    pub(crate) fn run<R>(self, kernel: impl FnOnce() -> R) -> R {
        match self {
            // SAFETY: `Simd::Avx2` is only made by `Simd::detect` when the CPU has AVX2, the
            // one requirement of the call.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { run_avx2(kernel) },
            Simd::Scalar => kernel(),
        }
    }
}

/// `kernel()` with AVX2 enabled (see [`Simd::run`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn run_avx2<R>(kernel: impl FnOnce() -> R) -> R {
    kernel()
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
