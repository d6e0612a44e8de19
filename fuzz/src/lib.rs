//! Shared by the fuzz targets and the seed writer (`examples/make_seeds.rs`).

/// The base block the fuzz targets decode deltas against: `len` pseudo-random bytes, the
/// same for every call with the same `len`.
///
/// Shaped like weights rather than all zeros: every odd byte is `0x3C..=0x3F`, with a
/// random sign bit, so read as little-endian bf16 or f32 every word is a float of
/// magnitude in `[2^-7, 1)` with one of 8 exponents. A delta coded with base-exponent
/// contexts (lossless plane method 4) then decodes through several of its models instead
/// of one. The seed writer makes its deltas against this base, so they decode fully in
/// the targets.
pub fn base_pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let x = (i as u32).wrapping_mul(0x9E37_79B9) ^ 0x5A5A_5A5A;
            let r = ((x >> 24) ^ (x >> 11)) as u8;
            if i % 2 == 1 {
                0x3C | (r & 0x83)
            } else {
                r
            }
        })
        .collect()
}

pub mod store_util;
