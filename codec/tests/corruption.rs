//! Corruption test: every single-byte flip and every truncation of an encoded segment must
//! decode to an error, never to data.
//!
//! Each segment kind the codec writes is built from a few KB of weight-like data. For every
//! byte position and the masks 0x01, 0x80 and 0xFF the byte is XORed, and the result is
//! parsed and decoded through the public API (a delta with its correct base); every prefix
//! `0..len` is tried the same way.

use strata_codec::frames::{FrameParams, FrameSegment, FrameStreamEncoder};
use strata_codec::lossless::LosslessOptions;
use strata_codec::quant::{QuantBits, QuantParams};
use strata_codec::segment::{self, Encoding, Segment};
use strata_codec::testing::SplitMix64;
use strata_codec::{convert, DType};

/// Generous decode limit: the segments here decode to a few KB.
const LIMIT: usize = 1 << 24;
const MASKS: [u8; 3] = [0x01, 0x80, 0xFF];

/// Test data from [`SplitMix64`]: deterministic, the same on every run.
struct Rng(SplitMix64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(SplitMix64::new(seed))
    }

    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// Weight-like values: N(0, std), as initialised layers look.
fn weights(rng: &mut Rng, n: usize, std: f64) -> Vec<f32> {
    (0..n).map(|_| (rng.normal() * std) as f32).collect()
}

/// One optimizer step: every value moves by a small fraction of its size.
fn step(rng: &mut Rng, base: &[f32]) -> Vec<f32> {
    base.iter()
        .map(|&x| x + (rng.normal() * 1e-4) as f32 + x * 1e-3)
        .collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    convert::from_f32(DType::F32, v).expect("a float dtype")
}

fn bf16_bytes(v: &[f32]) -> Vec<u8> {
    convert::from_f32(DType::BF16, v).expect("a float dtype")
}

/// What a decode gave back. Only its existence matters to the corruption checks.
#[derive(Debug, PartialEq)]
enum Decoded {
    Bytes(Vec<u8>),
    Floats(Vec<f32>),
}

/// Parses and decodes `bytes` by whatever its header claims; a delta gets `base`, a frame
/// segment decodes every frame. The error is only reported, so it is kept as text.
fn decode(bytes: &[u8], base: Option<&[u8]>) -> Result<Decoded, String> {
    decode_typed(bytes, base).map_err(|e| e.to_string())
}

fn decode_typed(bytes: &[u8], base: Option<&[u8]>) -> Result<Decoded, Box<dyn std::error::Error>> {
    let seg = Segment::parse(bytes)?;
    Ok(match seg.header().encoding {
        Encoding::Keyframe => seg.decode_lossless(None, LIMIT).map(Decoded::Bytes)?,
        Encoding::Delta => seg.decode_lossless(base, LIMIT).map(Decoded::Bytes)?,
        Encoding::Quantized(_) | Encoding::TwoLevel3 => {
            seg.dequantize(LIMIT).map(Decoded::Floats)?
        }
        Encoding::QuantizedFrames(_) => {
            Decoded::Floats(FrameSegment::from_segment(&seg)?.decode_all(LIMIT)?)
        }
    })
}

/// The segment decodes as given; every flipped byte and every truncation fails.
fn assert_corruption_detected(name: &str, seg: &[u8], base: Option<&[u8]>) {
    assert!(
        decode(seg, base).is_ok(),
        "{name}: the intact segment must decode"
    );
    let mut bad = seg.to_vec();
    for pos in 0..seg.len() {
        for mask in MASKS {
            bad[pos] ^= mask;
            let got = decode(&bad, base);
            assert!(
                got.is_err(),
                "{name}: byte {pos} ^ {mask:#04x} of {} decoded to data",
                seg.len()
            );
            bad[pos] ^= mask;
        }
    }
    for len in 0..seg.len() {
        assert!(
            decode(&seg[..len], base).is_err(),
            "{name}: truncation to {len} of {} bytes decoded to data",
            seg.len()
        );
    }
}

fn encoding_of(seg: &[u8]) -> Encoding {
    Segment::parse(seg)
        .expect("freshly encoded segment parses")
        .header()
        .encoding
}

#[test]
fn keyframe_f32() {
    let v = weights(&mut Rng::new(1), 1024, 0.02);
    let seg = segment::encode_keyframe(DType::F32, &f32_bytes(&v), &LosslessOptions::default())
        .expect("encode");
    assert_eq!(encoding_of(&seg), Encoding::Keyframe);
    assert_corruption_detected("keyframe f32", &seg, None);
}

#[test]
fn keyframe_bf16() {
    let v = weights(&mut Rng::new(2), 2048, 0.02);
    let seg = segment::encode_keyframe(DType::BF16, &bf16_bytes(&v), &LosslessOptions::default())
        .expect("encode");
    assert_eq!(encoding_of(&seg), Encoding::Keyframe);
    assert_corruption_detected("keyframe bf16", &seg, None);
}

#[test]
fn delta_f32() {
    let mut rng = Rng::new(3);
    let base = weights(&mut rng, 1024, 0.02);
    let next = step(&mut rng, &base);
    let base = f32_bytes(&base);
    let seg = segment::encode_delta(
        DType::F32,
        &f32_bytes(&next),
        &base,
        &LosslessOptions::default(),
    )
    .expect("encode");
    assert_eq!(encoding_of(&seg), Encoding::Delta);
    assert_eq!(
        decode(&seg, Some(&base)),
        Ok(Decoded::Bytes(f32_bytes(&next)))
    );
    assert_corruption_detected("delta f32", &seg, Some(&base));
}

#[test]
fn delta_bf16() {
    let mut rng = Rng::new(4);
    let base = weights(&mut rng, 2048, 0.02);
    let next = step(&mut rng, &base);
    let base = bf16_bytes(&base);
    let seg = segment::encode_delta(
        DType::BF16,
        &bf16_bytes(&next),
        &base,
        &LosslessOptions::default(),
    )
    .expect("encode");
    assert_eq!(encoding_of(&seg), Encoding::Delta);
    assert_corruption_detected("delta bf16", &seg, Some(&base));
}

#[test]
fn quantized_every_width() {
    let v = weights(&mut Rng::new(5), 4096, 0.02);
    for bits in QuantBits::ALL {
        // Plain groups at every width, 3 bits included: two-level off.
        let params = QuantParams {
            two_level: None,
            ..QuantParams::new(bits)
        };
        let seg = segment::encode_quantized(DType::F32, &v, &params).expect("encode");
        assert_eq!(encoding_of(&seg), Encoding::Quantized(bits));
        assert_corruption_detected(&format!("quantized {}-bit", bits.bits()), &seg, None);
    }
}

#[test]
fn quantized_bf16_block() {
    // A bf16 block quantizes its values as f32; the header records the dtype.
    let v = weights(&mut Rng::new(6), 2048, 0.02);
    let seg = segment::encode_quantized(DType::BF16, &v, &QuantParams::new(QuantBits::B7))
        .expect("encode");
    assert_eq!(encoding_of(&seg), Encoding::Quantized(QuantBits::B7));
    assert_corruption_detected("quantized 7-bit bf16", &seg, None);
}

#[test]
fn two_level_3bit() {
    // Heavy-tailed groups: tiny values and one spike per group of 64, so
    // max_abs / median_abs is far above the default threshold of 5.
    let mut rng = Rng::new(7);
    let mut v = weights(&mut rng, 4096, 1e-3);
    for g in 0..v.len() / 64 {
        let at = g * 64 + (rng.next_u64() % 64) as usize;
        v[at] = if g % 2 == 0 { 0.5 } else { -0.75 };
    }
    let seg = segment::encode_quantized(DType::F32, &v, &QuantParams::new(QuantBits::B3))
        .expect("encode");
    assert_eq!(encoding_of(&seg), Encoding::TwoLevel3);
    assert_corruption_detected("two-level 3-bit", &seg, None);
}

#[test]
fn frame_segments_every_width() {
    // Frames drifting within 10 %: one epoch of 5 frames per width, 500 values each (a
    // ragged last group, and a last byte with unused bits at 3, 5 and 7 bits).
    let mut rng = Rng::new(8);
    let v = weights(&mut rng, 500, 0.02);
    for bits in QuantBits::ALL {
        let mut enc =
            FrameStreamEncoder::new(DType::F32, v.len(), FrameParams::new(bits)).expect("encoder");
        for t in 0..5 {
            let f = 1.0 + 0.015 * t as f32;
            let frame: Vec<f32> = v.iter().map(|x| x * f).collect();
            enc.push(&frame).expect("push");
        }
        let seg = enc.finish().expect("frames pushed");
        assert_eq!(encoding_of(&seg), Encoding::QuantizedFrames(bits));
        let frames = FrameSegment::parse(&seg).expect("parse").frame_count();
        assert_eq!(frames, 5, "{}-bit frames share one epoch", bits.bits());
        assert_corruption_detected(&format!("frames {}-bit", bits.bits()), &seg, None);
    }
}
