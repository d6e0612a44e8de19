//! The codec's operations as plain Rust functions over slices: what the JavaScript API
//! calls, testable natively. Every argument is checked here, so a bad call returns a
//! [`WasmError`] and never panics or traps.

use strata_codec::bits::{self, pack_bits, packed_len, unpack_bits};
use strata_codec::lossless::LosslessOptions;
use strata_codec::quant::{QuantBits, QuantParams, MAX_GROUP_SIZE};
use strata_codec::segment::{self, Segment, SegmentHeader};
use strata_codec::{convert, DType};

use crate::error::{invalid, WasmError};

/// Most bytes one segment may decode to through this API (1 GiB). WebAssembly memory is
/// 4 GiB at most; a segment that claims more is refused before anything is allocated.
pub const MAX_DECODED_BYTES: usize = 1 << 30;

/// A dtype from its name: Strata's lower-case names (`"bf16"`) or safetensors' (`"BF16"`).
///
/// # Errors
/// [`WasmError::UnknownDType`].
pub fn parse_dtype(name: &str) -> Result<DType, WasmError> {
    DType::ALL
        .into_iter()
        .find(|d| d.name() == name || d.safetensors_name() == name)
        .ok_or_else(|| WasmError::UnknownDType {
            name: name.to_owned(),
        })
}

/// Lossless encoder settings by name: `"default"` (or none), `"fast"` or `"max-ratio"`
/// (see [`LosslessOptions`]).
///
/// # Errors
/// [`WasmError::InvalidArgument`] for another name.
pub fn lossless_options(mode: Option<&str>) -> Result<LosslessOptions, WasmError> {
    match mode {
        None | Some("default") => Ok(LosslessOptions::default()),
        Some("fast") => Ok(LosslessOptions::fast()),
        Some("max-ratio") => Ok(LosslessOptions::max_ratio()),
        Some(other) => Err(invalid(
            "mode",
            format!("{other:?}: expected \"default\", \"fast\" or \"max-ratio\""),
        )),
    }
}

/// A vector of `n` default values, or [`WasmError::OutOfMemory`] instead of an abort when
/// the allocation fails.
pub(crate) fn try_filled<T: Clone + Default>(
    n: usize,
    what: &'static str,
) -> Result<Vec<T>, WasmError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| WasmError::OutOfMemory {
        what,
        bytes: n.saturating_mul(std::mem::size_of::<T>()),
    })?;
    v.resize(n, T::default());
    Ok(v)
}

fn check_ragged(what: &'static str, dtype: DType, len: usize) -> Result<(), WasmError> {
    if len.is_multiple_of(dtype.size()) {
        Ok(())
    } else {
        Err(WasmError::RaggedLength {
            what,
            len,
            dtype,
            size: dtype.size(),
        })
    }
}

/// Encodes `data` (little-endian elements of `dtype`) as a lossless segment: a keyframe,
/// or an XOR delta against `base` (same length) when one is given.
///
/// # Errors
/// [`WasmError::RaggedLength`], [`WasmError::InvalidArgument`] for a base of another
/// length, [`WasmError::Segment`] if the codec fails.
pub fn encode(
    dtype: DType,
    data: &[u8],
    base: Option<&[u8]>,
    opts: &LosslessOptions,
) -> Result<Vec<u8>, WasmError> {
    check_ragged("data", dtype, data.len())?;
    match base {
        None => Ok(segment::encode_keyframe(dtype, data, opts)?),
        Some(b) if b.len() != data.len() => Err(invalid(
            "base",
            format!("{} bytes, data is {} bytes", b.len(), data.len()),
        )),
        Some(b) => Ok(segment::encode_delta(dtype, data, b, opts)?),
    }
}

/// Parses a segment and checks that it decodes to at most [`MAX_DECODED_BYTES`].
fn parse_bounded(bytes: &[u8]) -> Result<Segment<'_>, WasmError> {
    let seg = Segment::parse(bytes)?;
    let len = seg.header().decoded_len()?;
    if len > MAX_DECODED_BYTES {
        return Err(WasmError::TooLarge {
            bytes: len as u64,
            limit: MAX_DECODED_BYTES,
        });
    }
    Ok(seg)
}

/// Decodes a lossless segment to its bytes. A delta needs the base it was made against
/// (checked by hash); a keyframe takes none.
///
/// # Errors
/// [`WasmError::Segment`] for a corrupt segment, a quantized one, a missing or wrong base;
/// [`WasmError::TooLarge`], [`WasmError::OutOfMemory`].
pub fn decode(segment_bytes: &[u8], base: Option<&[u8]>) -> Result<(DType, Vec<u8>), WasmError> {
    let seg = parse_bounded(segment_bytes)?;
    let h = seg.header();
    if !h.encoding.is_lossless() {
        return Err(invalid(
            "segment",
            format!("{:?} is quantized: use dequantize", h.encoding),
        ));
    }
    let mut out = try_filled::<u8>(h.decoded_len()?, "decoded segment")?;
    seg.decode_lossless_into(base, &mut out)?;
    Ok((h.dtype, out))
}

/// The bit width of a tier from a number.
///
/// # Errors
/// [`WasmError::InvalidArgument`] unless `bits` is 8, 7, 5 or 3.
pub fn quant_bits(bits: u32) -> Result<QuantBits, WasmError> {
    u8::try_from(bits)
        .ok()
        .and_then(QuantBits::from_bits)
        .ok_or_else(|| invalid("bits", format!("{bits}: tiers are 8, 7, 5 or 3 bits")))
}

/// Quantizes `values` at `bits` (8, 7, 5, 3) in groups of `group_size` (default 64;
/// two-level groups at 3 bits) into a segment recording `dtype` as the source type.
///
/// # Errors
/// [`WasmError::InvalidArgument`] for bits or group size, [`WasmError::NotFloat`],
/// [`WasmError::Segment`] (NaN and infinities are refused, see ADR 0003).
pub fn quantize(
    values: &[f32],
    bits: u32,
    dtype: DType,
    group_size: Option<u32>,
) -> Result<Vec<u8>, WasmError> {
    let bits = quant_bits(bits)?;
    if !dtype.is_float() {
        return Err(WasmError::NotFloat {
            what: "quantize",
            dtype,
        });
    }
    let mut params = QuantParams::new(bits);
    if let Some(g) = group_size {
        if !(1..=MAX_GROUP_SIZE).contains(&g) {
            return Err(invalid(
                "group size",
                format!("{g}: must be 1..={MAX_GROUP_SIZE}"),
            ));
        }
        params = params.with_group_size(g);
    }
    Ok(segment::encode_quantized(dtype, values, &params)?)
}

/// Dequantizes a quantized segment to f32 values.
///
/// # Errors
/// [`WasmError::Segment`] for a corrupt or lossless segment, [`WasmError::TooLarge`],
/// [`WasmError::OutOfMemory`].
pub fn dequantize(segment_bytes: &[u8]) -> Result<Vec<f32>, WasmError> {
    let seg = parse_bounded(segment_bytes)?;
    let h = seg.header();
    if h.encoding.is_lossless() {
        return Err(invalid(
            "segment",
            format!("{:?} is lossless: use decode", h.encoding),
        ));
    }
    let mut out = try_filled::<f32>(h.decoded_len()? / 4, "dequantized values")?;
    seg.dequantize_into(&mut out)?;
    Ok(out)
}

/// The validated header of a segment (checksum included).
///
/// # Errors
/// [`WasmError::Segment`].
pub fn segment_header(segment_bytes: &[u8]) -> Result<SegmentHeader, WasmError> {
    Ok(*Segment::parse(segment_bytes)?.header())
}

/// Packs signed codes at `bits` (1..=8) bits each, LSB first (ADR-019).
///
/// # Errors
/// [`WasmError::Bits`] for a bad width or a code outside `-qmax..=qmax`.
pub fn pack(codes: &[i8], bits: u32) -> Result<Vec<u8>, WasmError> {
    let bits = width(bits)?;
    let mut out = try_filled::<u8>(packed_len(codes.len(), bits), "packed codes")?;
    pack_bits(codes, bits, &mut out)?;
    Ok(out)
}

/// Unpacks `count` codes of `bits` bits from `packed`.
///
/// # Errors
/// [`WasmError::Bits`] for a bad width or input shorter than `count` codes need.
pub fn unpack(packed: &[u8], bits: u32, count: usize) -> Result<Vec<i8>, WasmError> {
    let bits = width(bits)?;
    let required = packed_len(count, bits);
    if packed.len() < required {
        return Err(bits::BitsError::InputTooSmall { required }.into());
    }
    let mut out = try_filled::<i8>(count, "unpacked codes")?;
    unpack_bits(packed, bits, &mut out)?;
    Ok(out)
}

fn width(bits: u32) -> Result<u8, WasmError> {
    match u8::try_from(bits) {
        Ok(b @ 1..=8) => Ok(b),
        _ => Err(bits::BitsError::InvalidBitWidth {
            bits: u8::try_from(bits).unwrap_or(u8::MAX),
        }
        .into()),
    }
}

/// Byte-wise XOR of two equally long buffers: the delta the lossless codec encodes, and
/// its own inverse (`xor(xor(a, b), b) == a`).
///
/// # Errors
/// [`WasmError::InvalidArgument`] when the lengths differ.
pub fn xor(a: &[u8], b: &[u8]) -> Result<Vec<u8>, WasmError> {
    if a.len() != b.len() {
        return Err(invalid(
            "xor operands",
            format!("lengths differ: {} and {} bytes", a.len(), b.len()),
        ));
    }
    let mut out = try_filled::<u8>(a.len(), "xor")?;
    for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
        *o = x ^ y;
    }
    Ok(out)
}

/// Little-endian bytes of f32 values.
pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    // F32 is a float dtype: the conversion cannot fail.
    convert::from_f32(DType::F32, values).unwrap_or_default()
}

/// Little-endian bytes of u16 words (bf16 or f16 bit patterns).
pub fn u16_bytes(words: &[u16]) -> Vec<u8> {
    words.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// f32 values from little-endian bytes (a multiple of 4 long; a tail is ignored).
pub fn f32_from_bytes(bytes: &[u8]) -> Vec<f32> {
    // F32 is a float dtype: the conversion cannot fail.
    convert::to_f32(DType::F32, bytes).unwrap_or_default()
}

/// u16 words from little-endian bytes (an even length; a tail byte is ignored).
pub fn u16_from_bytes(bytes: &[u8]) -> Vec<u16> {
    bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect()
}

/// Widens a float tensor's little-endian bytes to f32 ([`convert::to_f32`]): exact for
/// f32, bf16 and f16; f64 is rounded to the nearest f32.
///
/// # Errors
/// [`WasmError::NotFloat`], [`WasmError::RaggedLength`].
pub fn widen(dtype: DType, bytes: &[u8]) -> Result<Vec<f32>, WasmError> {
    check_ragged("data", dtype, bytes.len())?;
    if !dtype.is_float() {
        return Err(WasmError::NotFloat {
            what: "widening to f32",
            dtype,
        });
    }
    let mut out = try_filled::<f32>(bytes.len() / dtype.size(), "widened values")?;
    convert::to_f32_into(dtype, bytes, &mut out).map_err(|_| WasmError::NotFloat {
        what: "widening to f32",
        dtype,
    })?;
    Ok(out)
}

/// Narrows f32 values to little-endian bytes of a float `dtype` ([`convert::from_f32`]:
/// round to nearest even for bf16 and f16; f64 widens exactly).
///
/// # Errors
/// [`WasmError::NotFloat`], [`WasmError::OutOfMemory`].
pub fn narrow(dtype: DType, values: &[f32]) -> Result<Vec<u8>, WasmError> {
    let not_float = WasmError::NotFloat {
        what: "narrowing from f32",
        dtype,
    };
    if !dtype.is_float() {
        return Err(not_float);
    }
    let mut out = try_filled::<u8>(values.len().saturating_mul(dtype.size()), "narrowed bytes")?;
    convert::from_f32_into(dtype, values, &mut out).map_err(|_| not_float)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bf16_bytes(v: &[f32]) -> Vec<u8> {
        narrow(DType::BF16, v).unwrap()
    }

    #[test]
    fn dtype_names() {
        assert_eq!(parse_dtype("bf16").unwrap(), DType::BF16);
        assert_eq!(parse_dtype("BF16").unwrap(), DType::BF16);
        assert_eq!(parse_dtype("BOOL").unwrap(), DType::Bool);
        let e = parse_dtype("fp8").unwrap_err();
        assert!(e.to_string().contains("unknown dtype \"fp8\""), "{e}");
    }

    #[test]
    fn lossless_round_trip_with_delta() {
        let a: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = a.iter().map(|x| x + 1e-3).collect();
        let (a, b) = (bf16_bytes(&a), bf16_bytes(&b));
        let opts = LosslessOptions::default();
        let key = encode(DType::BF16, &a, None, &opts).unwrap();
        let delta = encode(DType::BF16, &b, Some(&a), &opts).unwrap();
        assert_eq!(decode(&key, None).unwrap(), (DType::BF16, a.clone()));
        assert_eq!(decode(&delta, Some(&a)).unwrap(), (DType::BF16, b));
        // The delta with the wrong base, or without one, is an error.
        assert!(matches!(
            decode(&delta, Some(&vec![0u8; a.len()])),
            Err(WasmError::Segment(_))
        ));
        assert!(decode(&delta, None).is_err());
    }

    #[test]
    fn bad_arguments_are_named() {
        let opts = LosslessOptions::default();
        let e = encode(DType::F32, &[1, 2, 3], None, &opts).unwrap_err();
        assert!(e.to_string().contains("3 bytes"), "{e}");
        let e = encode(DType::U8, &[1, 2], Some(&[1]), &opts).unwrap_err();
        assert!(e.to_string().contains("invalid base"), "{e}");
        let e = quantize(&[1.0], 4, DType::F32, None).unwrap_err();
        assert!(e.to_string().contains("8, 7, 5 or 3"), "{e}");
        let e = quantize(&[1.0], 8, DType::I32, None).unwrap_err();
        assert!(matches!(e, WasmError::NotFloat { .. }), "{e}");
        let e = quantize(&[1.0], 8, DType::F32, Some(0)).unwrap_err();
        assert!(e.to_string().contains("group size"), "{e}");
        let e = quantize(&[f32::NAN], 8, DType::F32, None).unwrap_err();
        assert!(e.to_string().contains("not finite"), "{e}");
        assert!(pack(&[0], 0).is_err());
        assert!(pack(&[0], 300).is_err());
        assert!(pack(&[4], 3).unwrap_err().to_string().contains("outside"));
        assert!(unpack(&[0], 3, 3)
            .unwrap_err()
            .to_string()
            .contains("too small"));
        assert!(unpack(&[], 3, usize::MAX).is_err());
        assert!(xor(&[1], &[1, 2])
            .unwrap_err()
            .to_string()
            .contains("lengths differ"));
        assert!(lossless_options(Some("turbo")).is_err());
        assert!(decode(b"not a segment", None).is_err());
        assert!(dequantize(&[]).is_err());
        assert!(widen(DType::I8, &[1]).is_err());
        assert!(widen(DType::F32, &[1]).is_err());
    }

    #[test]
    fn wrong_kind_is_refused() {
        let q = quantize(&[1.0, 2.0], 8, DType::F32, None).unwrap();
        assert!(decode(&q, None)
            .unwrap_err()
            .to_string()
            .contains("dequantize"));
        let k = encode(
            DType::F32,
            &f32_bytes(&[1.0]),
            None,
            &LosslessOptions::default(),
        )
        .unwrap();
        assert!(dequantize(&k)
            .unwrap_err()
            .to_string()
            .contains("use decode"));
        assert_eq!(segment_header(&k).unwrap().elements, 1);
    }

    #[test]
    fn conversions() {
        let v = [1.5f32, -0.0, 3.0e-3, 65504.0];
        for dt in [DType::F32, DType::BF16, DType::F16, DType::F64] {
            let back = widen(dt, &narrow(dt, &v).unwrap()).unwrap();
            for (a, b) in v.iter().zip(&back) {
                assert!((a - b).abs() <= a.abs() / 128.0, "{dt}: {a} {b}");
            }
        }
        assert_eq!(u16_from_bytes(&u16_bytes(&[1, 65535])), vec![1, 65535]);
        assert_eq!(f32_from_bytes(&f32_bytes(&[1.0, -2.5])), vec![1.0, -2.5]);
    }

    proptest! {
        #[test]
        fn pack_unpack_round_trip(bits in 1u32..=8, raw in proptest::collection::vec(any::<i8>(), 0..300)) {
            let q = (1i16 << (bits - 1)) - 1;
            let codes: Vec<i8> = raw.iter().map(|&c| (i16::from(c) % (q + 1)) as i8).collect();
            let packed = pack(&codes, bits).unwrap();
            prop_assert_eq!(unpack(&packed, bits, codes.len()).unwrap(), codes);
        }

        #[test]
        fn quantize_within_bound(bits in prop::sample::select(vec![3u32, 5, 7, 8]),
                                 v in proptest::collection::vec(-1.0e3f32..1.0e3, 1..200)) {
            let seg = quantize(&v, bits, DType::F32, Some(64)).unwrap();
            let back = dequantize(&seg).unwrap();
            prop_assert_eq!(back.len(), v.len());
            let bound = quant_bits(bits).unwrap().relative_error_bound();
            for (g, (a, b)) in v.chunks(64).zip(back.chunks(64)).enumerate() {
                let m = a.iter().fold(0f32, |m, x| m.max(x.abs()));
                for (x, y) in a.iter().zip(b) {
                    // Two-level 3-bit groups use a smaller scale for most values: still
                    // within the standard bound.
                    prop_assert!(f64::from((x - y).abs()) <= f64::from(m) * bound * 1.0001 + 1e-30, "group {}", g);
                }
            }
        }

        #[test]
        fn xor_is_its_own_inverse(a in proptest::collection::vec(any::<u8>(), 0..100), seed in any::<u8>()) {
            let b: Vec<u8> = a.iter().map(|x| x.wrapping_mul(seed)).collect();
            prop_assert_eq!(xor(&xor(&a, &b).unwrap(), &b).unwrap(), a);
        }
    }
}
