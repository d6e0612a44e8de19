//! Bit packing of signed codes, exactly as ADR-019 section 3.6 lays it out.
//!
//! A code `v` of width `bits` (1..=8) is biased to unsigned, `u = v + qmax` with
//! `qmax = 2^(bits-1) - 1`, and the unsigned codes are written into one little-endian
//! bitstream, least significant bit first, with no padding anywhere: code `i` occupies
//! bits `i*bits .. (i+1)*bits` of the stream, and the last byte is zero-padded.
//!
//! Both directions are allocation-free: the caller passes the slices. Every width has a
//! fast path that turns 8 codes into exactly `bits` bytes with a branch-free SWAR fold on
//! one `u64` (see `fold8`); the scalar accumulator of ADR-019 handles the last `< 8` codes
//! and is kept as the reference the fast path is tested against.

use thiserror::Error;

/// Errors of [`pack_bits`] and [`unpack_bits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum BitsError {
    /// The output slice is too small; `required` bytes are needed.
    #[error("output buffer too small: {required} bytes required")]
    OutputTooSmall {
        /// Bytes the output must hold.
        required: usize,
    },
    /// The input slice holds fewer bytes than the requested codes need.
    #[error("input buffer too small: {required} bytes required")]
    InputTooSmall {
        /// Bytes the input must hold.
        required: usize,
    },
    /// The bit width is not in `1..=8`.
    #[error("invalid bit width {bits}: must be 1..=8")]
    InvalidBitWidth {
        /// The width that was asked for.
        bits: u8,
    },
    /// A code lies outside `-qmax..=qmax` and cannot be represented at this width.
    #[error("code {value} at index {index} is outside -{qmax}..={qmax} for {bits}-bit packing")]
    CodeOutOfRange {
        /// Position of the first offending code.
        index: usize,
        /// The offending code.
        value: i8,
        /// The width asked for.
        bits: u8,
        /// Largest magnitude representable at this width.
        qmax: i8,
    },
}

/// Largest code magnitude at a width: `2^(bits-1) - 1` (0 for 1 bit).
///
/// # Errors
/// [`BitsError::InvalidBitWidth`] when `bits` is not in `1..=8`.
pub fn qmax(bits: u8) -> Result<i8, BitsError> {
    check_width(bits)?;
    Ok(((1u16 << (bits - 1)) - 1) as i8)
}

/// Bytes needed to pack `count` codes at `bits` bits each: `ceil(count * bits / 8)`.
///
/// Saturates at `usize::MAX` instead of overflowing.
pub fn packed_len(count: usize, bits: u8) -> usize {
    let total = (count as u128) * u128::from(bits);
    usize::try_from(total.div_ceil(8)).unwrap_or(usize::MAX)
}

fn check_width(bits: u8) -> Result<(), BitsError> {
    if (1..=8).contains(&bits) {
        Ok(())
    } else {
        Err(BitsError::InvalidBitWidth { bits })
    }
}

/// Packs `values.len()` signed codes into `out` at `bits` bits per code.
///
/// Returns the number of bytes written, `packed_len(values.len(), bits)`. Bytes of `out`
/// past that are left untouched.
///
/// # Errors
/// - [`BitsError::InvalidBitWidth`] if `bits` is 0 or greater than 8;
/// - [`BitsError::CodeOutOfRange`] if a code is outside `-qmax..=qmax` (the ADR-019
///   reference silently masks such codes; we refuse them, since they would unpack as a
///   different value);
/// - [`BitsError::OutputTooSmall`] if `out` cannot hold the packed codes.
pub fn pack_bits(values: &[i8], bits: u8, out: &mut [u8]) -> Result<usize, BitsError> {
    let qmax = qmax(bits)?;
    check_range(values, bits, qmax)?;
    let required = packed_len(values.len(), bits);
    if out.len() < required {
        return Err(BitsError::OutputTooSmall { required });
    }
    match bits {
        1 => pack_fast::<1>(values, out),
        2 => pack_fast::<2>(values, out),
        3 => pack_fast::<3>(values, out),
        4 => pack_fast::<4>(values, out),
        5 => pack_fast::<5>(values, out),
        6 => pack_fast::<6>(values, out),
        7 => pack_fast::<7>(values, out),
        _ => pack_fast::<8>(values, out),
    }
    Ok(required)
}

/// Unpacks `out.len()` codes of `bits` bits from `inp`, unbiasing each back to signed.
///
/// Returns the number of bytes consumed, `packed_len(out.len(), bits)`.
///
/// The all-ones code `2^bits - 1` is never written by [`pack_bits`]; if the input holds
/// one (corrupt data) it unpacks to `qmax + 1`, which wraps to `-128` at 8 bits. Callers
/// that need to reject it check the range of the result (the segment decoder does).
///
/// # Errors
/// - [`BitsError::InvalidBitWidth`] if `bits` is 0 or greater than 8;
/// - [`BitsError::InputTooSmall`] if `inp` holds fewer than `packed_len(out.len(), bits)` bytes.
pub fn unpack_bits(inp: &[u8], bits: u8, out: &mut [i8]) -> Result<usize, BitsError> {
    check_width(bits)?;
    let required = packed_len(out.len(), bits);
    if inp.len() < required {
        return Err(BitsError::InputTooSmall { required });
    }
    match bits {
        1 => unpack_fast::<1>(inp, out),
        2 => unpack_fast::<2>(inp, out),
        3 => unpack_fast::<3>(inp, out),
        4 => unpack_fast::<4>(inp, out),
        5 => unpack_fast::<5>(inp, out),
        6 => unpack_fast::<6>(inp, out),
        7 => unpack_fast::<7>(inp, out),
        _ => unpack_fast::<8>(inp, out),
    }
    Ok(required)
}

/// Finds the first code outside `-qmax..=qmax`. The min/max fold vectorizes, so the
/// common all-valid case costs a fraction of the packing itself.
fn check_range(values: &[i8], bits: u8, qmax: i8) -> Result<(), BitsError> {
    for (c, chunk) in values.chunks(4096).enumerate() {
        let (lo, hi) = chunk
            .iter()
            .fold((i8::MAX, i8::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        if lo < -qmax || hi > qmax {
            let pos = chunk
                .iter()
                .position(|&v| v < -qmax || v > qmax)
                .unwrap_or(0);
            return Err(BitsError::CodeOutOfRange {
                index: c * 4096 + pos,
                value: chunk[pos],
                bits,
                qmax,
            });
        }
    }
    Ok(())
}

/// Collapses 8 unsigned `B`-bit lanes (one per byte of `x`, high bits clear) into the low
/// `8*B` bits, lane 0 lowest. Three pairwise steps: 8 lanes of 8 bits to 4 of 16, to 2 of
/// 32, to one.
#[inline(always)]
fn fold8<const B: u32>(x: u64) -> u64 {
    let x = (x & 0x00FF_00FF_00FF_00FF) | ((x & 0xFF00_FF00_FF00_FF00) >> (8 - B));
    let x = (x & 0x0000_FFFF_0000_FFFF) | ((x & 0xFFFF_0000_FFFF_0000) >> (16 - 2 * B));
    (x & 0x0000_0000_FFFF_FFFF) | ((x & 0xFFFF_FFFF_0000_0000) >> (32 - 4 * B))
}

/// The inverse of [`fold8`]: spreads the low `8*B` bits of `x` into 8 byte lanes.
#[inline(always)]
fn unfold8<const B: u32>(x: u64) -> u64 {
    let m4 = (1u64 << (4 * B)) - 1;
    let x = (x & m4) | ((x >> (4 * B)) << 32);
    let m2 = ((1u64 << (2 * B)) - 1) * 0x0000_0001_0000_0001;
    let x = (x & m2) | (((x >> (2 * B)) & m2) << 16);
    let m1 = ((1u64 << B) - 1) * 0x0001_0001_0001_0001;
    (x & m1) | (((x >> B) & m1) << 8)
}

/// Bias `2^(B-1) - 1` repeated in every byte lane.
#[inline(always)]
const fn bias_lanes<const B: u32>() -> u64 {
    ((1u64 << (B - 1)) - 1) * 0x0101_0101_0101_0101
}

const HIGH: u64 = 0x8080_8080_8080_8080;

/// Adds byte lanes modulo 256 with no carry between lanes. In-range codes plus the bias
/// give `0..2^B - 1`, so the high bits of each lane come out clear.
#[inline(always)]
fn lane_add(x: u64, y: u64) -> u64 {
    ((x & !HIGH) + (y & !HIGH)) ^ ((x ^ y) & HIGH)
}

/// Subtracts byte lanes modulo 256 with no borrow between lanes.
#[inline(always)]
fn lane_sub(x: u64, y: u64) -> u64 {
    ((x | HIGH) - (y & !HIGH)) ^ ((x ^ !y) & HIGH)
}

fn pack_fast<const B: u32>(values: &[i8], out: &mut [u8]) {
    let nbytes = B as usize;
    let chunks = values.chunks_exact(8);
    let tail = chunks.remainder();
    let mut pos = 0;
    for chunk in chunks {
        let mut lanes = [0u8; 8];
        for (l, &v) in lanes.iter_mut().zip(chunk) {
            *l = v as u8;
        }
        let x = lane_add(u64::from_le_bytes(lanes), bias_lanes::<B>());
        let packed = fold8::<B>(x).to_le_bytes();
        out[pos..pos + nbytes].copy_from_slice(&packed[..nbytes]);
        pos += nbytes;
    }
    pack_scalar(tail, B as u8, &mut out[pos..]);
}

fn unpack_fast<const B: u32>(inp: &[u8], out: &mut [i8]) {
    let nbytes = B as usize;
    let full = out.len() / 8;
    let (head, tail) = out.split_at_mut(full * 8);
    for (chunk, src) in head.chunks_exact_mut(8).zip(inp.chunks_exact(nbytes)) {
        let mut word = [0u8; 8];
        word[..nbytes].copy_from_slice(src);
        let x = lane_sub(unfold8::<B>(u64::from_le_bytes(word)), bias_lanes::<B>());
        for (o, b) in chunk.iter_mut().zip(x.to_le_bytes()) {
            *o = b as i8;
        }
    }
    unpack_scalar(&inp[full * nbytes..], B as u8, tail);
}

/// ADR-019's reference packer: a 64-bit accumulator flushed a byte at a time.
/// `values` must be in range and `out` large enough (checked by the callers).
fn pack_scalar(values: &[i8], bits: u8, out: &mut [u8]) {
    let bias = (1i16 << (bits - 1)) - 1;
    let mask = (1u64 << bits) - 1;
    let mut acc = 0u64;
    let mut acc_bits = 0u32;
    let mut pos = 0;
    for &v in values {
        acc |= ((i16::from(v) + bias) as u64 & mask) << acc_bits;
        acc_bits += u32::from(bits);
        while acc_bits >= 8 {
            out[pos] = acc as u8;
            pos += 1;
            acc >>= 8;
            acc_bits -= 8;
        }
    }
    if acc_bits > 0 {
        out[pos] = acc as u8;
    }
}

/// ADR-019's reference unpacker. `inp` must hold enough bytes (checked by the callers).
fn unpack_scalar(inp: &[u8], bits: u8, out: &mut [i8]) {
    let bias = ((1u16 << (bits - 1)) - 1) as u8;
    let mask = (1u64 << bits) - 1;
    let mut acc = 0u64;
    let mut acc_bits = 0u32;
    let mut pos = 0;
    for o in out.iter_mut() {
        while acc_bits < u32::from(bits) {
            acc |= u64::from(inp[pos]) << acc_bits;
            pos += 1;
            acc_bits += 8;
        }
        *o = ((acc & mask) as u8).wrapping_sub(bias) as i8;
        acc >>= bits;
        acc_bits -= u32::from(bits);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reference_pack(values: &[i8], bits: u8) -> Vec<u8> {
        let mut out = vec![0u8; packed_len(values.len(), bits)];
        pack_scalar(values, bits, &mut out);
        out
    }

    #[test]
    fn adr019_7bit_layout() {
        // u = v + 63; byte 0 = u0[6:0] | u1[0] << 7, as the ADR's diagram shows.
        let v: [i8; 8] = [-63, 63, 0, 1, -1, 5, -5, 10];
        let mut out = [0u8; 7];
        assert_eq!(pack_bits(&v, 7, &mut out), Ok(7));
        let u: Vec<u64> = v.iter().map(|&x| (i64::from(x) + 63) as u64).collect();
        let stream = u
            .iter()
            .enumerate()
            .fold(0u64, |acc, (i, &x)| acc | (x << (7 * i)));
        assert_eq!(out.to_vec(), stream.to_le_bytes()[..7].to_vec());
        assert_eq!(out[0], (u[0] as u8) | ((u[1] as u8 & 1) << 7));
    }

    #[test]
    fn adr019_3bit_and_5bit_sizes() {
        let v = [0i8; 64];
        let mut out = [0u8; 64];
        assert_eq!(pack_bits(&v, 3, &mut out), Ok(24));
        assert_eq!(pack_bits(&v, 5, &mut out), Ok(40));
        assert_eq!(pack_bits(&v, 7, &mut out), Ok(56));
        assert_eq!(pack_bits(&v, 8, &mut out), Ok(64));
    }

    #[test]
    fn errors_are_typed() {
        let mut out = [0u8; 2];
        assert_eq!(
            pack_bits(&[0; 3], 0, &mut out),
            Err(BitsError::InvalidBitWidth { bits: 0 })
        );
        assert_eq!(
            pack_bits(&[0; 3], 9, &mut out),
            Err(BitsError::InvalidBitWidth { bits: 9 })
        );
        assert_eq!(
            pack_bits(&[0; 8], 3, &mut out),
            Err(BitsError::OutputTooSmall { required: 3 })
        );
        assert_eq!(
            pack_bits(&[0, 4], 3, &mut out),
            Err(BitsError::CodeOutOfRange {
                index: 1,
                value: 4,
                bits: 3,
                qmax: 3
            })
        );
        assert_eq!(
            pack_bits(&[-128], 8, &mut out),
            Err(BitsError::CodeOutOfRange {
                index: 0,
                value: -128,
                bits: 8,
                qmax: 127
            })
        );
        let mut codes = [0i8; 8];
        assert_eq!(
            unpack_bits(&[0; 2], 3, &mut codes),
            Err(BitsError::InputTooSmall { required: 3 })
        );
        assert_eq!(
            unpack_bits(&[0; 2], 0, &mut codes),
            Err(BitsError::InvalidBitWidth { bits: 0 })
        );
    }

    #[test]
    fn empty_input_packs_to_nothing() {
        assert_eq!(pack_bits(&[], 5, &mut []), Ok(0));
        assert_eq!(unpack_bits(&[], 5, &mut []), Ok(0));
    }

    #[test]
    fn all_ones_code_unpacks_out_of_range() {
        let mut out = [0i8; 1];
        unpack_bits(&[0xFF], 8, &mut out).unwrap();
        assert_eq!(out[0], -128);
        unpack_bits(&[0x07], 3, &mut out).unwrap();
        assert_eq!(out[0], 4);
    }

    fn codes(bits: u8) -> impl Strategy<Value = Vec<i8>> {
        let q = qmax(bits).unwrap();
        prop::collection::vec(-q..=q, 0..300)
    }

    proptest! {
        #[test]
        fn round_trip_every_width(bits in 1u8..=8, seed in codes(8)) {
            let q = qmax(bits).unwrap();
            let values: Vec<i8> = seed.iter().map(|&v| v.clamp(-q, q)).collect();
            let mut packed = vec![0xAAu8; packed_len(values.len(), bits) + 3];
            let n = pack_bits(&values, bits, &mut packed).unwrap();
            prop_assert_eq!(n, packed_len(values.len(), bits));
            prop_assert_eq!(&packed[n..], &[0xAA; 3][..]);
            prop_assert_eq!(&packed[..n], &reference_pack(&values, bits)[..]);
            let mut back = vec![0i8; values.len()];
            prop_assert_eq!(unpack_bits(&packed[..n], bits, &mut back), Ok(n));
            prop_assert_eq!(back, values);
        }

        #[test]
        fn fast_path_matches_reference(v in codes(3)) {
            let mut fast = vec![0u8; packed_len(v.len(), 3)];
            pack_bits(&v, 3, &mut fast).unwrap();
            prop_assert_eq!(fast, reference_pack(&v, 3));
        }

        #[test]
        fn unpack_matches_reference_on_any_bytes(bits in 1u8..=8, bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let n = bytes.len() * 8 / usize::from(bits);
            let mut fast = vec![0i8; n];
            let mut slow = vec![0i8; n];
            unpack_bits(&bytes, bits, &mut fast).unwrap();
            unpack_scalar(&bytes, bits, &mut slow);
            prop_assert_eq!(fast, slow);
        }
    }
}
