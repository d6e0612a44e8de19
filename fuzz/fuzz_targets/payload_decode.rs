//! Fuzz target: raw payload bytes straight into [`lossless::decode`] and
//! [`quant::dequantize`], bypassing the segment header and its checksum.
//!
//! Input layout (6 leading bytes, then the payload):
//!
//! | byte | meaning |
//! |---|---|
//! | 0 | dtype: `DType::ALL[b % 13]` |
//! | 1..3 | element count, u16 LE, reduced modulo 4097 (so at most 4096) |
//! | 3 | flags: bit 0 XOR base ([`base_pattern`]) given, bit 1 base of a wrong length, bits 2-3 quantized width (3, 5, 7, 8), bit 4 two-level shape |
//! | 4..6 | group size, u16 LE (0 is invalid and must be refused) |
//! | 6.. | payload, given to both decoders |
//!
//! Errors are fine, panics are not. Each decoder also runs into buffers pre-filled with
//! 0xAA and 0x55, which must give the same result.

#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_codec::quant::{self, QuantBits, QuantShape};
use strata_codec::{lossless, DType};
use strata_codec_fuzz::base_pattern;

/// Largest element count the target decodes.
const MAX_ELEMENTS: usize = 4096;
/// Bytes before the payload.
const PREFIX: usize = 6;

fuzz_target!(|data: &[u8]| {
    let Some((prefix, payload)) = data.split_first_chunk::<PREFIX>() else {
        return;
    };
    let dtype = DType::ALL[usize::from(prefix[0]) % DType::ALL.len()];
    let n = usize::from(u16::from_le_bytes([prefix[1], prefix[2]])) % (MAX_ELEMENTS + 1);
    let flags = prefix[3];
    let group_size = u32::from(u16::from_le_bytes([prefix[4], prefix[5]]));

    // Lossless.
    let len = n * dtype.size();
    let base: Option<Vec<u8>> = (flags & 1 != 0).then(|| {
        let base_len = if flags & 2 != 0 { len + 1 } else { len };
        base_pattern(base_len)
    });
    let mut a = vec![0xAAu8; len];
    let mut b = vec![0x55u8; len];
    let ra = lossless::decode(dtype, payload, base.as_deref(), &mut a);
    let rb = lossless::decode(dtype, payload, base.as_deref(), &mut b);
    assert_same(
        &ra,
        &rb,
        "lossless result depends on the output buffer's contents",
    );
    if ra.is_ok() {
        assert!(
            a == b,
            "lossless output depends on the output buffer's contents"
        );
    }

    // Quantized.
    let bits = QuantBits::ALL[usize::from(flags >> 2) & 3];
    let shape = QuantShape {
        bits,
        group_size,
        two_level: flags & 0x10 != 0,
    };
    let mut a = vec![f32::from_bits(0xAAAA_AAAA); n];
    let mut b = vec![f32::from_bits(0x5555_5555); n];
    let ra = quant::dequantize(payload, shape, &mut a);
    let rb = quant::dequantize(payload, shape, &mut b);
    assert_same(
        &ra,
        &rb,
        "dequantize result depends on the output buffer's contents",
    );
    if ra.is_ok() {
        let same = a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(
            same,
            "dequantized values depend on the output buffer's contents"
        );
    }
});

/// Asserts two results are the same. Compared by their `Debug` form: a quantized error may
/// hold a NaN scale, which `PartialEq` never finds equal to itself.
fn assert_same<T: std::fmt::Debug, E: std::fmt::Debug>(
    a: &Result<T, E>,
    b: &Result<T, E>,
    what: &str,
) {
    let (a, b) = (format!("{a:?}"), format!("{b:?}"));
    assert!(a == b, "{what}: {a} vs {b}");
}
