use super::*;
use crate::testing::SplitMix64;
use proptest::prelude::*;

/// Round trips with every preset; returns the default's payload.
fn round_trip(dtype: DType, data: &[u8], base: Option<&[u8]>) -> Vec<u8> {
    let presets = [
        LosslessOptions::default(),
        LosslessOptions::max_ratio(),
        LosslessOptions::fast(),
    ];
    let mut first = None;
    for opts in presets {
        let mut payload = Vec::new();
        let stats = encode(dtype, data, base, &opts, &mut payload).expect("encode");
        assert_eq!(stats.payload_bytes, payload.len());
        let mut out = vec![0xEEu8; data.len()];
        decode(dtype, &payload, base, &mut out).expect("decode");
        assert_eq!(out, data, "{dtype} round trip with {opts:?}");
        check_prefixes(dtype, &payload, data, base);
        first.get_or_insert(payload);
    }
    first.unwrap_or_default()
}

/// Checks that [`decode_prefix`] writes the first elements of `data` exactly, for prefixes
/// ending in every part of the planes: none, the first rANS step, mid-step, mid-plane,
/// all but one, all.
fn check_prefixes(dtype: DType, payload: &[u8], data: &[u8], base: Option<&[u8]>) {
    let size = dtype.size();
    let n = data.len() / size;
    for m in [0, 1, 3, 31, 33, 100, n / 2, n.saturating_sub(1), n] {
        let m = m.min(n);
        let mut out = vec![0xEEu8; m * size];
        let base = base.map(|b| &b[..m * size]);
        decode_prefix(dtype, payload, base, data.len(), &mut out).expect("decode a prefix");
        assert_eq!(
            out,
            data[..m * size],
            "{dtype}: prefix of {m} of {n} elements"
        );
    }
    // Any decoded length a header may declare is checked, never overflowed.
    let mut first = vec![0u8; size.min(data.len())];
    let base_first = base.map(|b| &b[..first.len()]);
    let _ = decode_prefix(
        dtype,
        payload,
        base_first,
        usize::MAX / size * size,
        &mut first,
    );
    let mut long = vec![0u8; data.len() + size];
    assert_eq!(
        decode_prefix(dtype, payload, None, data.len(), &mut long),
        Err(LosslessError::Prefix {
            prefix: long.len(),
            len: data.len()
        })
    );
}

fn special_f32() -> impl Strategy<Value = u32> {
    prop_oneof![
        any::<u32>(),
        (-1.0f32..1.0).prop_map(f32::to_bits),
        Just(f32::NAN.to_bits()),
        Just(0x7FC0_1234u32), // quiet NaN with payload
        Just(0xFF80_0001u32), // signalling NaN, negative
        Just(0x8000_0000u32), // -0.0
        Just(0x0000_0001u32), // smallest subnormal
        Just(f32::INFINITY.to_bits()),
        Just(f32::NEG_INFINITY.to_bits()),
    ]
}

fn bytes_of(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn every_dtype_round_trips() {
    // A whole number of elements of every size (1, 2, 3, 4 and 8 bytes).
    let data: Vec<u8> = (0..3 * 4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let base: Vec<u8> = data.iter().map(|b| b.rotate_left(3) ^ 0x5A).collect();
    for dtype in DType::ALL {
        round_trip(dtype, &data, None);
        round_trip(dtype, &data, Some(&base));
        round_trip(dtype, &[], None);
    }
}

#[test]
fn identical_to_base_is_tiny() {
    let data: Vec<u8> = bytes_of(
        &(0..10_000)
            .map(|i: u32| (i as f32 * 0.001).to_bits())
            .collect::<Vec<_>>(),
    );
    let payload = round_trip(DType::F32, &data, Some(&data));
    // The layout byte and four constant planes: 1 + 4 * (5 + 1) bytes.
    assert_eq!(payload.len(), 25);
}

#[test]
fn zstd_takes_planes_with_runs() {
    // f32 weights whose rows alternate between full precision and fp16 precision (the
    // low 13 mantissa bits zero), as in an embedding table with untrained rows: the two
    // low planes have long runs, which zstd codes and rANS cannot.
    let mut rng = SplitMix64::new(0x2545_F491);
    let words: Vec<u32> = (0..65_536u32)
        .map(|i| {
            let x = rng.next_u64() as u32;
            let v = ((x >> 8) as f32 / (1 << 24) as f32 - 0.5) * 0.1;
            if (i / 384) % 3 == 0 {
                v.to_bits() & !0x1FFF
            } else {
                v.to_bits()
            }
        })
        .collect();
    let data = bytes_of(&words);
    round_trip(DType::F32, &data, None);
    let mut payload = Vec::new();
    let stats = encode(
        DType::F32,
        &data,
        None,
        &LosslessOptions::default(),
        &mut payload,
    )
    .expect("encode");
    assert_eq!(stats.planes[2].0, PlaneMethod::Zstd, "{stats:?}");
    assert_eq!(stats.planes[3].0, PlaneMethod::Zstd, "{stats:?}");
    // A 6-bit plane whose zstd frame holds a wider symbol is refused.
    let z = zstd::bulk::compress(&vec![64u8; 65_536], 3).expect("zstd");
    let mut bad = payload[..1 + 5 * 4].to_vec();
    let bodies_at = 1 + 5 * 4;
    let mut at = bodies_at;
    for k in 0..3 {
        let len = stats.planes[k].1;
        bad.extend_from_slice(&payload[at..at + len]);
        at += len;
    }
    bad[1 + 15] = 1;
    bad[1 + 16..1 + 20].copy_from_slice(&(z.len() as u32).to_le_bytes());
    bad.extend_from_slice(&z);
    let mut out = vec![0u8; data.len()];
    assert_eq!(
        decode(DType::F32, &bad, None, &mut out),
        Err(LosslessError::SymbolRange { plane: 3, bits: 6 })
    );
}

#[test]
fn near_random_planes_are_raw_and_slightly_skewed_ones_coded() {
    // bf16 words whose low 6 bits are uniform, or uniform but for a 4 % excess of 0
    // (coding then saves about 0.2 %, above `min_gain`): the sampled check must store
    // the first raw and leave the second to the full histogram.
    let mut rng = SplitMix64::new(0x1234_5678);
    let mut next = move || rng.next_u64() as u32;
    for (skew, expect) in [(false, PlaneMethod::Raw), (true, PlaneMethod::Rans)] {
        let words: Vec<u16> = (0..200_000)
            .map(|_| {
                let r = next();
                let tail = if skew && r % 25 == 0 {
                    0
                } else {
                    (r >> 8) & 0x3F
                };
                let w = (0x3C0 | (r >> 20) & 0xF) << 6 | tail;
                (w as u16).rotate_right(1)
            })
            .collect();
        let data: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        round_trip(DType::BF16, &data, None);
        let mut payload = Vec::new();
        let stats = encode(
            DType::BF16,
            &data,
            None,
            &LosslessOptions::default(),
            &mut payload,
        )
        .expect("encode");
        assert_eq!(stats.planes[1].0, expect, "skew {skew}: {stats:?}");
    }
}

#[test]
fn smooth_weights_compress() {
    // Gaussian-ish bf16 weights: the exponent plane must code well below 8 bits.
    let mut rng = SplitMix64::new(0x1234_5678);
    let words: Vec<u16> = (0..65_536)
        .map(|_| {
            let x = rng.next_u64() as u32;
            let u = (x as f32 / u32::MAX as f32) - 0.5;
            let v = u * u * u * 0.05;
            (v.to_bits() >> 16) as u16
        })
        .collect();
    let data: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let payload = round_trip(DType::BF16, &data, None);
    assert!(
        payload.len() * 10 < data.len() * 8,
        "ratio {}",
        data.len() as f64 / payload.len() as f64
    );
}

#[test]
fn argument_errors() {
    let mut out = Vec::new();
    assert_eq!(
        encode(
            DType::F32,
            &[0; 6],
            None,
            &LosslessOptions::default(),
            &mut out
        ),
        Err(LosslessError::RaggedLength {
            len: 6,
            dtype: DType::F32
        })
    );
    assert_eq!(
        encode(
            DType::F32,
            &[0; 8],
            Some(&[0; 4]),
            &LosslessOptions::default(),
            &mut out
        ),
        Err(LosslessError::BaseLength { base: 4, data: 8 })
    );
}

#[test]
fn corrupt_payloads_are_errors() {
    let data: Vec<u8> = (0..2000u32)
        .flat_map(|i| ((i as f32).sin() * 0.02).to_bits().to_le_bytes())
        .collect();
    let mut payload = Vec::new();
    encode(
        DType::F32,
        &data,
        None,
        &LosslessOptions::default(),
        &mut payload,
    )
    .unwrap();
    let mut out = vec![0u8; data.len()];
    assert!(matches!(
        decode(DType::F32, &payload[..10], None, &mut out),
        Err(LosslessError::Truncated { .. })
    ));
    let mut long = payload.clone();
    long.push(1);
    assert_eq!(
        decode(DType::F32, &long, None, &mut out),
        Err(LosslessError::TrailingBytes { extra: 1 })
    );
    let mut bad = payload.clone();
    bad[1] = 9;
    assert_eq!(
        decode(DType::F32, &bad, None, &mut out),
        Err(LosslessError::UnknownMethod {
            plane: 0,
            method: 9
        })
    );
    let mut bad = payload.clone();
    bad[0] = 7;
    assert_eq!(
        decode(DType::F32, &bad, None, &mut out),
        Err(LosslessError::UnknownPlaneLayout {
            code: 7,
            dtype: DType::F32
        })
    );
    // The head cut is for floats of 2 and 4 bytes only.
    bad[0] = 1;
    assert!(matches!(
        decode(DType::I32, &bad, None, &mut out),
        Err(LosslessError::UnknownPlaneLayout { code: 1, .. })
    ));
    // Wrong element count for the payload.
    let mut short_out = vec![0u8; data.len() - 4];
    assert!(decode(DType::F32, &payload, None, &mut short_out).is_err());
}

proptest! {
    #[test]
    fn f32_specials_round_trip(words in prop::collection::vec(special_f32(), 0..700), base in prop::collection::vec(special_f32(), 700)) {
        let data = bytes_of(&words);
        round_trip(DType::F32, &data, None);
        let b = bytes_of(&base[..words.len()]);
        round_trip(DType::F32, &data, Some(&b));
    }

    #[test]
    fn half_types_round_trip(words in prop::collection::vec(any::<u16>(), 0..900), near in any::<bool>()) {
        // Either arbitrary bits or a slowly varying series (so zstd planes are exercised).
        let words: Vec<u16> = if near { words.iter().enumerate().map(|(i, w)| 0x3C00 ^ (w & 0x0F) ^ (i as u16 & 0x100)).collect() } else { words };
        let data: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let base: Vec<u8> = data.iter().map(|b| b ^ 0x01).collect();
        for dtype in [DType::BF16, DType::F16, DType::I16, DType::U16] {
            round_trip(dtype, &data, None);
            round_trip(dtype, &data, Some(&base));
        }
    }

    #[test]
    fn f64_round_trip(v in prop::collection::vec(any::<u64>(), 0..300)) {
        let data: Vec<u8> = v.iter().flat_map(|w| w.to_le_bytes()).collect();
        round_trip(DType::F64, &data, None);
        round_trip(DType::I64, &data, Some(&data.iter().rev().copied().collect::<Vec<_>>()));
    }

    /// The packed FP4 pairs and FP6 groups (3-byte elements, coded as raw byte planes), as
    /// keyframes and as deltas against a base that differs in a few nibbles.
    #[test]
    fn packed_sub_byte_round_trip(groups in prop::collection::vec(any::<[u8; 3]>(), 0..500), flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..16), 0..20)) {
        let data: Vec<u8> = groups.concat();
        let mut base = data.clone();
        for (at, x) in &flips {
            if !base.is_empty() {
                let i = at.index(base.len());
                base[i] ^= x;
            }
        }
        for dtype in [DType::F4E2M1x2, DType::F6E2M3x4, DType::F6E3M2x4] {
            round_trip(dtype, &data, None);
            round_trip(dtype, &data, Some(&base));
        }
    }
}

/// Reference packer: most significant bit first, one bit at a time.
fn pack_reference(values: &[u16], bits: u32) -> Vec<u8> {
    let mut out = vec![0u8; planes::packed_len(values.len(), bits)];
    for (i, &v) in values.iter().enumerate() {
        for b in 0..bits {
            if v >> (bits - 1 - b) & 1 == 1 {
                let at = i * bits as usize + b as usize;
                out[at / 8] |= 0x80 >> (at % 8);
            }
        }
    }
    out
}

#[test]
fn packing_matches_the_reference_at_every_width() {
    let mut rng = SplitMix64::new(0x9E37_79B9);
    for bits in 1..=10u32 {
        for n in (0..80).chain([1000, 4099]) {
            let values: Vec<u16> = (0..n)
                .map(|_| (rng.next_u64() & ((1 << bits) - 1)) as u16)
                .collect();
            let expect = pack_reference(&values, bits);
            let mut packed = Vec::new();
            planes::pack(&values, bits, &mut packed);
            assert_eq!(packed, expect, "{bits} bits, {n} values");
            let mut back = vec![0u16; n];
            assert!(planes::unpack(&packed, bits, &mut back));
            assert_eq!(back, values);
            if bits <= 8 {
                // Byte symbols take the fast paths (6 bits: AVX2 where the CPU has it).
                let bytes: Vec<u8> = values.iter().map(|&v| v as u8).collect();
                let mut packed = Vec::new();
                planes::pack(&bytes, bits, &mut packed);
                assert_eq!(packed, expect, "{bits} bits, {n} byte values");
                let mut back = vec![0u8; n];
                assert!(planes::unpack(&packed, bits, &mut back));
                assert_eq!(back, bytes);
                if !(n * bits as usize).is_multiple_of(8) {
                    // A set padding bit is refused.
                    let last = packed.len() - 1;
                    packed[last] |= 1;
                    assert!(!planes::unpack(&packed, bits, &mut back));
                }
            }
        }
    }
}

/// `n` weights like a fine-tuned layer's, and a step of them: each moves by about
/// `rel` of itself, a few (`jumps` in 1000) by much more (exceptions to the marks), and
/// with `zeros` some bases are exact zeros.
fn fine_tune_step(n: usize, seed: u64, rel: f32, jumps: u64, zeros: bool) -> (Vec<f32>, Vec<f32>) {
    let mut rng = SplitMix64::new(seed);
    let mut next = move || rng.next_u64();
    let mut base = Vec::with_capacity(n);
    let mut data = Vec::with_capacity(n);
    for _ in 0..n {
        let r = next();
        let u = (r >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        let b = if zeros && r % 500 == 0 { 0.0 } else { u * 0.08 };
        let step = ((next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * rel;
        let d = if next() % 1000 < jumps {
            b * -3.7 + 1e-3
        } else {
            b * (1.0 + step) + if b == 0.0 { step * 1e-3 } else { 0.0 }
        };
        base.push(b);
        data.push(d);
    }
    (data, base)
}

fn bf16_of(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes())
        .collect()
}

fn f32_of(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn fine_tune_exponent_planes_are_marked_and_smaller() {
    for (dtype, of) in [
        (DType::BF16, bf16_of as fn(&[f32]) -> Vec<u8>),
        (DType::F32, f32_of),
    ] {
        let (data, base) = fine_tune_step(200_000, 7, 0.01, 1, true);
        let (data, base) = (of(&data), of(&base));
        let opts = LosslessOptions::default();
        let mut payload = Vec::new();
        // The XOR cut (f32 deltas like these code smaller as differences, which have no
        // marked plane).
        let stats = encode_cut(dtype, &data, Some(&base), &opts, Cut::Bytes, &mut payload).unwrap();
        let top = stats.planes[dtype.size() - 1];
        assert_eq!(top.0, PlaneMethod::Marked, "{dtype}: {stats:?}");
        round_trip(dtype, &data, Some(&base));
        // Bytes one byte at a time: never larger than the regular coding would be.
        let w = dtype.size();
        let n = data.len() / w;
        let mut planes = vec![0u8; data.len()];
        match w {
            2 => planes::split::<2>(&data, Some(&base), true, &mut planes),
            _ => planes::split::<4>(&data, Some(&base), true, &mut planes),
        }
        let contexts = BaseContexts::new(dtype, &base);
        let mut enc = PlaneEncoder {
            opts: &opts,
            contexts: contexts.as_ref(),
            zstd: None,
            stats: Vec::new(),
            beat: None,
            lists: false,
        };
        let mut regular = Vec::new();
        enc.choose(&planes[(w - 1) * n..], 8, &mut regular).unwrap();
        assert!(
            top.1 < regular.len(),
            "{dtype}: {} vs {}",
            top.1,
            regular.len()
        );
    }
}

/// Float heads coded with rANS decode into the words as they go (the rANS kernel writes
/// them): the bytes are those of the plain decode at any output offset, for bf16, f16 and
/// f32 keyframes and deltas, whole and in prefixes.
#[test]
fn rans_heads_decode_into_words_at_any_offset() {
    let (data, base) = fine_tune_step(50_000, 3, 0.01, 1, false);
    for dtype in [DType::BF16, DType::F16, DType::F32] {
        let of = |v: &[f32]| -> Vec<u8> {
            match dtype {
                DType::BF16 => bf16_of(v),
                DType::F32 => f32_of(v),
                _ => v
                    .iter()
                    .flat_map(|&x| half::f16::from_f32(x).to_bits().to_le_bytes())
                    .collect(),
            }
        };
        let size = dtype.size();
        let (data, base) = (of(&data), of(&base));
        for b in [None, Some(&base[..])] {
            let mut payload = Vec::new();
            let opts = LosslessOptions::default();
            let stats = encode_cut(dtype, &data, b, &opts, Cut::Head, &mut payload).unwrap();
            let head = stats.planes[0].0;
            assert!(
                matches!(head, PlaneMethod::Rans | PlaneMethod::RansBaseContext),
                "{dtype}: {stats:?}"
            );
            let mut buf = vec![0xEEu8; data.len() + 3];
            for offset in [0, 1, 3] {
                let n = data.len() / size;
                for m in [n - 1, n] {
                    let out = &mut buf[offset..offset + size * m];
                    let base = b.map(|b| &b[..size * m]);
                    decode_prefix(dtype, &payload, base, data.len(), out).unwrap();
                    assert!(
                        out == &data[..size * m],
                        "{dtype} at offset {offset}, {m} elements"
                    );
                }
            }
        }
    }
}

#[test]
fn many_exceptions_fall_back_to_the_regular_coding() {
    // Large moves everywhere: exponents change without marks.
    let (data, base) = fine_tune_step(50_000, 3, 0.01, 300, false);
    let (data, base) = (bf16_of(&data), bf16_of(&base));
    let mut payload = Vec::new();
    let stats = encode(
        DType::BF16,
        &data,
        Some(&base),
        &LosslessOptions::default(),
        &mut payload,
    )
    .unwrap();
    assert_ne!(stats.planes[1].0, PlaneMethod::Marked, "{stats:?}");
    round_trip(DType::BF16, &data, Some(&base));
}

#[test]
fn marked_planes_refuse_bad_bodies() {
    let (data, base) = fine_tune_step(20_000, 11, 0.01, 1, true);
    let (data, base) = (bf16_of(&data), bf16_of(&base));
    let mut payload = Vec::new();
    let stats = encode(
        DType::BF16,
        &data,
        Some(&base),
        &LosslessOptions::default(),
        &mut payload,
    )
    .unwrap();
    assert_eq!(stats.planes[1].0, PlaneMethod::Marked, "{stats:?}");
    let mut out = vec![0u8; data.len()];
    // Method 5 is refused where it does not belong: without a base, for other dtypes,
    // on plane 0.
    assert!(decode(DType::BF16, &payload, None, &mut out).is_err());
    assert!(decode(DType::F16, &payload, Some(&base), &mut out).is_err());
    let mut swapped = payload.clone();
    swapped[1] = 5;
    assert!(decode(DType::BF16, &swapped, Some(&base), &mut out).is_err());
    // Every single-byte change of the marked body is an error or another output, never
    // a panic.
    let start = payload.len() - stats.planes[1].1;
    for i in start..payload.len() {
        for flip in [0x01u8, 0x80, 0xFF] {
            let mut bad = payload.clone();
            bad[i] ^= flip;
            let _ = decode(DType::BF16, &bad, Some(&base), &mut out);
        }
    }
    // Truncated bodies: every cut is an error.
    for cut in start..payload.len() {
        let mut bad = payload[..cut].to_vec();
        let shorter = (payload.len() - cut) as u32;
        let len = stats.planes[1].1 as u32 - shorter;
        bad[1 + 5 + 1..1 + 5 + 5].copy_from_slice(&len.to_le_bytes());
        assert!(decode(DType::BF16, &bad, Some(&base), &mut out).is_err());
    }
}

proptest! {
    #[test]
    fn fine_tune_deltas_round_trip(
        n in 0usize..3000,
        seed in any::<u64>(),
        rel in prop_oneof![Just(0.0f32), 0.0001f32..0.1],
        jumps in 0u64..40,
        zeros in any::<bool>(),
    ) {
        let (data, base) = fine_tune_step(n, seed, rel, jumps, zeros);
        round_trip(DType::BF16, &bf16_of(&data), Some(&bf16_of(&base)));
        round_trip(DType::F32, &f32_of(&data), Some(&f32_of(&base)));
    }

    #[test]
    fn marked_bodies_never_panic(
        body in prop::collection::vec(any::<u8>(), 0..64),
        sign in prop::collection::vec(any::<u8>(), 40),
        mantissa in prop::collection::vec(any::<u8>(), 40),
    ) {
        // A bf16 delta payload of 40 elements: plane 0 raw, plane 1 method 5 with `body`.
        let mut payload = vec![0u8];
        payload.push(0);
        payload.extend_from_slice(&40u32.to_le_bytes());
        payload.push(5);
        payload.extend_from_slice(&(body.len() as u32).to_le_bytes());
        payload.extend_from_slice(&sign);
        payload.extend_from_slice(&body);
        let base: Vec<u8> = mantissa.iter().flat_map(|&m| [m, 0x3F]).collect();
        let mut out = vec![0u8; 80];
        let _ = decode(DType::BF16, &payload, Some(&base), &mut out);
    }
}

/// Encodes with the cut given and checks the decode and every prefix; returns the payload.
fn round_trip_cut(cut: Cut, data: &[u8], base: &[u8]) -> Vec<u8> {
    let mut payload = Vec::new();
    let opts = LosslessOptions::default();
    encode_cut(DType::F32, data, Some(base), &opts, cut, &mut payload).expect("encode");
    assert_eq!(payload[0], cut.code());
    let mut out = vec![0xEEu8; data.len()];
    decode(DType::F32, &payload, Some(base), &mut out).expect("decode");
    assert_eq!(out, data, "{cut:?} round trip");
    check_prefixes(DType::F32, &payload, data, Some(base));
    payload
}

/// A second moment's step: each value decays by `decay` and gains a noisy square, as
/// AdamW's `exp_avg_sq` between two checkpoints.
fn second_moment_step(n: usize, seed: u64, decay: f32) -> (Vec<f32>, Vec<f32>) {
    let (g, v) = fine_tune_step(n, seed, 0.5, 0, false);
    let base: Vec<f32> = v.iter().map(|x| x * x + 1e-8).collect();
    let data = base
        .iter()
        .zip(&g)
        .map(|(b, g)| b * decay + (1.0 - decay) * g * g)
        .collect();
    (data, base)
}

#[test]
fn second_moments_code_as_differences_and_smaller() {
    let (data, base) = second_moment_step(100_000, 11, 0.975);
    let (data, base) = (f32_of(&data), f32_of(&base));
    assert!(planes::differences_code_smaller(&data, &base));
    let chosen = round_trip(DType::F32, &data, Some(&base));
    assert_eq!(
        chosen[0],
        Cut::Difference.code(),
        "encode picks the difference cut"
    );
    let xor = round_trip_cut(Cut::Bytes, &data, &base);
    let difference = round_trip_cut(Cut::Difference, &data, &base);
    assert_eq!(chosen, difference);
    assert!(
        difference.len() * 100 < xor.len() * 97,
        "differences {} bytes, XOR {}",
        difference.len(),
        xor.len()
    );
}

#[test]
fn unrelated_words_keep_the_xor_cut() {
    // Words with no relation to their base: neither delta codes, XOR stays.
    let words: Vec<u32> = (0..20_000u32)
        .map(|i| i.wrapping_mul(0x9E37_79B9))
        .collect();
    let base: Vec<u32> = (0..20_000u32)
        .map(|i| i.wrapping_mul(0x85EB_CA6B))
        .collect();
    let (data, base) = (bytes_of(&words), bytes_of(&base));
    assert!(!planes::differences_code_smaller(&data, &base));
    assert_eq!(
        round_trip(DType::F32, &data, Some(&base))[0],
        Cut::Bytes.code()
    );
}

#[test]
fn difference_payloads_need_a_base_and_f32() {
    let (data, base) = second_moment_step(1000, 3, 0.9);
    let (data, base) = (f32_of(&data), f32_of(&base));
    let payload = round_trip_cut(Cut::Difference, &data, &base);
    let mut out = vec![0u8; data.len()];
    assert_eq!(
        decode(DType::F32, &payload, None, &mut out),
        Err(LosslessError::MissingBase { code: 2 })
    );
    for dtype in [DType::I32, DType::U32, DType::BF16, DType::F64] {
        let mut out = vec![0u8; data.len() / 4 * dtype.size()];
        let base = vec![0u8; out.len()];
        assert!(
            matches!(
                decode(dtype, &payload, Some(&base), &mut out),
                Err(LosslessError::UnknownPlaneLayout { code: 2, .. })
            ),
            "{dtype}"
        );
    }
}

proptest! {
    #[test]
    fn differences_round_trip_any_words(
        pairs in prop::collection::vec((special_f32(), special_f32()), 0..900),
    ) {
        let (words, base): (Vec<u32>, Vec<u32>) = pairs.into_iter().unzip();
        round_trip_cut(Cut::Difference, &bytes_of(&words), &bytes_of(&base));
        round_trip_cut(Cut::Bytes, &bytes_of(&words), &bytes_of(&base));
    }

    #[test]
    fn second_moment_deltas_round_trip(n in 0usize..3000, seed in any::<u64>(), decay in 0.5f32..1.0) {
        let (data, base) = second_moment_step(n, seed, decay);
        round_trip(DType::F32, &f32_of(&data), Some(&f32_of(&base)));
        round_trip_cut(Cut::Difference, &f32_of(&data), &f32_of(&base));
    }
}

/// A fine-tuning step of f32 weights taken as differences: the top plane is non-zero only
/// where a weight jumped, so it is listed (method 6).
fn sparse_top_payload(n: usize, seed: u64) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let (data, base) = fine_tune_step(n, seed, 1e-3, 1, false);
    let (data, base) = (f32_of(&data), f32_of(&base));
    let payload = round_trip_cut(Cut::Difference, &data, &base);
    (payload, data, base)
}

#[test]
fn near_empty_planes_are_listed() {
    let (data, base) = fine_tune_step(100_000, 5, 1e-3, 1, false);
    let (data, base) = (f32_of(&data), f32_of(&base));
    let mut payload = Vec::new();
    let opts = LosslessOptions::default();
    let stats = encode_cut(
        DType::F32,
        &data,
        Some(&base),
        &opts,
        Cut::Difference,
        &mut payload,
    )
    .expect("encode");
    assert_eq!(stats.planes[3].0, PlaneMethod::Sparse, "{stats:?}");
    // The list costs no more than the slack over what rANS would store.
    let top = &planes_of_difference(&data, &base)[3 * 100_000..];
    let mut enc = PlaneEncoder {
        opts: &opts,
        contexts: None,
        zstd: None,
        stats: Vec::new(),
        beat: None,
        lists: false,
    };
    let mut regular = Vec::new();
    assert_eq!(enc.choose(top, 8, &mut regular).unwrap(), PlaneMethod::Rans);
    assert!(stats.planes[3].1 <= regular.len() + 100_000 / SPARSE_SLACK);
    let mut out = vec![0u8; data.len()];
    decode(DType::F32, &payload, Some(&base), &mut out).expect("decode");
    assert_eq!(out, data);
}

fn planes_of_difference(data: &[u8], base: &[u8]) -> Vec<u8> {
    let mut planes = vec![0u8; data.len()];
    planes::split_difference(data, base, &mut planes);
    planes
}

#[test]
fn listed_planes_refuse_bad_bodies() {
    let (payload, data, base) = sparse_top_payload(20_000, 9);
    let w = 4;
    let table = &payload[1..1 + 5 * w];
    assert_eq!(table[5 * 3], PlaneMethod::Sparse as u8);
    let top_len = u32::from_le_bytes(table[16..20].try_into().unwrap()) as usize;
    let top = payload.len() - top_len;
    let mut out = vec![0u8; data.len()];
    let with_top = |body: &[u8]| {
        let mut p = payload[..top].to_vec();
        p[17..21].copy_from_slice(&(body.len() as u32).to_le_bytes());
        p.extend_from_slice(body);
        p
    };
    // The payload with its own body decodes; then a zero listed byte, a position past the
    // plane, a count over the elements, bytes after the list.
    decode(
        DType::F32,
        &with_top(&payload[top..]),
        Some(&base),
        &mut out,
    )
    .expect("decode");
    assert_eq!(out, data);
    let past = [1, 0xA0, 0x9C, 0x01, 5]; // 20_000
    let count = [0xA1, 0x9C, 0x01]; // 20_001
    for (body, reason) in [
        (&[1, 0, 0][..], "a listed byte is zero"),
        (&past[..], "position outside the plane"),
        (&count[..], "more non-zero elements than elements"),
        (&[1, 0, 5, 7][..], "bytes after the list"),
    ] {
        let r = decode(DType::F32, &with_top(body), Some(&base), &mut out);
        assert_eq!(r, Err(LosslessError::Sparse { plane: 3, reason }));
    }
    // Method 6 on a plane of 16-bit symbols (the head of layout 1) is refused by the table.
    let mut head = vec![0u8; data.len()];
    let mut payload = Vec::new();
    encode_cut(
        DType::F32,
        &data,
        Some(&base),
        &LosslessOptions::default(),
        Cut::Head,
        &mut payload,
    )
    .expect("encode");
    payload[1] = PlaneMethod::Sparse as u8;
    assert!(matches!(
        decode(DType::F32, &payload, Some(&base), &mut head),
        Err(LosslessError::PlaneLength {
            plane: 0,
            method: 6,
            ..
        })
    ));
}

proptest! {
    #[test]
    fn listed_planes_round_trip(n in 0usize..5000, seed in any::<u64>()) {
        sparse_top_payload(n, seed);
    }
}

#[test]
fn equal_neighbours_counts_every_repeat() {
    let mut rng = SplitMix64::new(0xE9A1);
    for len in [0usize, 1, 2, 254, 255, 256, 257, 511, 1024, 70_000] {
        for alphabet in [1u64, 2, 7, 256] {
            let run: Vec<u8> = (0..len)
                .map(|_| (rng.next_u64() % alphabet) as u8)
                .collect();
            let expect = run.windows(2).filter(|w| w[0] == w[1]).count();
            assert_eq!(equal_neighbours(&run), expect, "{len} bytes of {alphabet}");
        }
    }
}
