use super::*;
use proptest::prelude::*;
use strata_codec::DType;

fn sample() -> VersionRecord {
    VersionRecord {
        dtype: DType::BF16,
        shape: vec![4, 7],
        elements: 28,
        block_elems: 8,
        blocks: vec![
            BlockRecord {
                address: 0x1234_5678_9abc_def0_1122_3344_5566_7788,
                base: None,
                reference: false,
                depth: 1,
                run: 1,
                segment_len: 100,
                form: Form::Lossless,
            },
            BlockRecord {
                address: 7,
                base: Some(40),
                reference: true,
                depth: 3,
                run: 2,
                segment_len: 9,
                form: Form::Lossless,
            },
            BlockRecord {
                address: 8,
                base: None,
                reference: false,
                depth: 1,
                run: 1,
                segment_len: 19,
                form: Form::Quantized,
            },
            BlockRecord {
                address: 9,
                base: None,
                reference: false,
                depth: 1,
                run: 1,
                segment_len: 29,
                form: Form::Frame { index: 7 },
            },
        ],
        aged: None,
        inline: None,
        content: None,
    }
}

/// An aged version: one aged delta, one aged keyframe, one reference to an aged block.
fn aged_sample() -> VersionRecord {
    let block = |base, reference| BlockRecord {
        address: 11,
        base,
        reference,
        depth: if base.is_some() { 3 } else { 1 },
        run: 1,
        segment_len: 40,
        form: Form::Aged,
    };
    VersionRecord {
        dtype: DType::BF16,
        shape: vec![3, 8],
        elements: 24,
        block_elems: 8,
        blocks: vec![
            block(Some(60), false),
            block(None, false),
            block(Some(70), true),
        ],
        aged: Some(2.5e-3),
        inline: None,
        content: None,
    }
}

/// A lossless version with its content hash (record version 4).
fn content_sample() -> VersionRecord {
    let mut rec = sample();
    rec.blocks.truncate(2);
    rec.shape = vec![2, 8];
    rec.elements = 16;
    rec.content = Some(content_hash(&[0xfeed, 0xbeef]));
    rec
}

#[test]
fn a_content_hash_round_trips_in_record_version_4() {
    let rec = content_sample();
    let bytes = rec.encode();
    assert_eq!(bytes[0], 4);
    assert_eq!(bytes.len(), rec.encoded_len());
    assert_eq!(VersionRecord::decode(&bytes).unwrap(), rec);
    // Cut anywhere: an error, never a record.
    for cut in 0..bytes.len() {
        assert!(
            VersionRecord::decode(&bytes[..cut]).is_err(),
            "cut at {cut}"
        );
    }
    // One byte too many is refused too.
    let mut long = bytes.clone();
    long.push(0);
    assert!(VersionRecord::decode(&long).is_err());
}

#[cfg(feature = "remote")]
#[test]
fn same_content_ignores_the_encoding_not_the_data() {
    let rec = content_sample();
    // Re-encoded against another base: other addresses, bases and depths.
    let mut flipped = rec.clone();
    flipped.blocks[0].base = Some(99);
    flipped.blocks[0].depth = 2;
    flipped.blocks[0].address ^= 1;
    assert_ne!(flipped, rec);
    assert!(flipped.same_content(&rec) && rec.same_content(&flipped));
    // Other data, or another layout: different.
    let mut other = flipped.clone();
    other.content = Some(content_hash(&[0xfeed, 0xbeee]));
    assert!(!other.same_content(&rec));
    let mut reshaped = flipped.clone();
    reshaped.shape = vec![16];
    assert!(!reshaped.same_content(&rec));
    // Without a hash on either side, records compare whole.
    let mut old = flipped.clone();
    old.content = None;
    assert!(!old.same_content(&rec));
    assert!(old.same_content(&old.clone()));
    // A version no longer exact (a tiered block) is not the data it was written with.
    let mut tiered = flipped;
    tiered.blocks[1].form = Form::Quantized;
    tiered.blocks[1].base = None;
    assert!(!tiered.same_content(&rec));
}

#[test]
fn aged_version_record_round_trips_and_rejects_bad_values() {
    let r = aged_sample();
    let bytes = r.encode();
    assert_eq!(bytes[0], 2, "an aged record is record version 2");
    assert_eq!(bytes.len(), 3 + 16 + 12 + 3 * BLOCK_RECORD_LEN + 4);
    assert_eq!(bytes.len(), r.encoded_len());
    assert_eq!(VersionRecord::decode(&bytes), Ok(r));
    // Version 1 with the trailing error, version 2 without it: refused.
    let mut v1 = bytes.clone();
    v1[0] = 1;
    assert!(VersionRecord::decode(&v1).is_err());
    assert!(VersionRecord::decode(&bytes[..bytes.len() - 4]).is_err());
    // A non-finite or negative error.
    for bad in [f32::NAN, f32::INFINITY, -1.0] {
        let mut b = bytes.clone();
        let n = b.len();
        b[n - 4..].copy_from_slice(&bad.to_le_bytes());
        assert!(VersionRecord::decode(&b).is_err(), "{bad}");
    }
    // Aged with quantized, or a delta with a frame: refused.
    let flags_at = 3 + 16 + 12;
    for flags in [32 | 4, 32 | 8, 32 | 16, 1 | 16, 1 | 4] {
        let mut b = bytes.clone();
        b[flags_at] = flags;
        assert!(VersionRecord::decode(&b).is_err(), "flags {flags:#x}");
    }
}

#[test]
fn inline_version_record_round_trips_and_rejects_bad_lengths() {
    let r = VersionRecord::inline(DType::F32, vec![], 1, 7f32.to_le_bytes().to_vec());
    let bytes = r.encode();
    assert_eq!(bytes, [3, DType::F32.code(), 0, 0, 0, 0xe0, 0x40]);
    assert_eq!(bytes.len(), r.encoded_len());
    assert_eq!(VersionRecord::decode(&bytes), Ok(r.clone()));
    assert_eq!(r.blocks.len(), 1);
    assert!(!r.blocks[0].has_segment());
    assert_eq!(r.blocks[0].stored_bytes(), 0);
    // One byte short, one over, and a shape whose bytes exceed the inline bound: refused.
    assert!(VersionRecord::decode(&bytes[..bytes.len() - 1]).is_err());
    assert!(VersionRecord::decode(&[bytes.as_slice(), &[0]].concat()).is_err());
    let over = PACK_MEMBER_MAX_BYTES / 4 + 1;
    let mut big = vec![3, DType::F32.code(), 1];
    big.extend_from_slice(&over.to_le_bytes());
    big.extend_from_slice(&vec![0; over as usize * 4]);
    assert!(
        VersionRecord::decode(&big).is_err(),
        "{over} elements are over the bound"
    );
    let mut empty = vec![3, DType::F32.code(), 1];
    empty.extend_from_slice(&0u64.to_le_bytes());
    assert!(
        VersionRecord::decode(&empty).is_err(),
        "an empty tensor is not inline"
    );
}

#[test]
fn version_record_round_trips() {
    let r = sample();
    let bytes = r.encode();
    assert_eq!(bytes.len(), 3 + 16 + 12 + 4 * BLOCK_RECORD_LEN);
    assert_eq!(bytes.len(), r.encoded_len());
    assert_eq!(VersionRecord::decode(&bytes), Ok(r));
}

#[test]
fn version_record_rejects_damage_without_panicking() {
    let bytes = sample().encode();
    for cut in 0..bytes.len() {
        assert!(
            VersionRecord::decode(&bytes[..cut]).is_err(),
            "cut at {cut}"
        );
    }
    let mut long = bytes.clone();
    long.push(0);
    assert!(matches!(
        VersionRecord::decode(&long),
        Err(RecordError::Trailing { extra: 1 })
    ));
    for i in 0..bytes.len() {
        for v in [0u8, 1, 0x7f, 0xff] {
            let mut b = bytes.clone();
            b[i] = v;
            let _ = VersionRecord::decode(&b);
        }
    }
    // A shape whose element count overflows.
    let mut b = bytes.clone();
    b[3..11].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(VersionRecord::decode(&b).is_err());
}

#[test]
fn checkpoint_record_round_trips_and_rejects_damage() {
    let c = CheckpointRecord::new("{\"lr\": 0.001}".into(), vec!["a".into(), "b.c".into()]);
    let bytes = c.encode();
    assert_eq!(CheckpointRecord::decode(&bytes), Ok(c));
    for cut in 0..bytes.len() {
        assert!(CheckpointRecord::decode(&bytes[..cut]).is_err());
    }
    let mut huge = bytes.clone();
    let at = 1 + 4 + 13;
    huge[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(CheckpointRecord::decode(&huge).is_err());
}

#[test]
fn checkpoint_names_are_front_coded() {
    let names: Vec<String> = (0..100)
        .flat_map(|i| ["step", "exp_avg", "exp_avg_sq"].map(|r| format!("optimizer.state.{i}.{r}")))
        .collect();
    let c = CheckpointRecord::new(String::new(), names.clone());
    let bytes = c.encode();
    let whole: usize = names.iter().map(|n| 4 + n.len()).sum();
    assert!(bytes.len() * 4 < whole, "{} vs {whole}", bytes.len());
    assert_eq!(CheckpointRecord::decode(&bytes), Ok(c));
    // Prefixes end on character boundaries: "aé" and "aè" share only "a".
    let c = CheckpointRecord::new(
        "m".into(),
        vec!["aé".into(), "aè".into(), "aè".into(), "b".into()],
    );
    assert_eq!(CheckpointRecord::decode(&c.encode()), Ok(c));
}

#[test]
fn version_1_checkpoint_records_still_read() {
    let mut v1 = vec![1u8];
    put_string(&mut v1, "meta");
    v1.extend_from_slice(&2u32.to_le_bytes());
    put_string(&mut v1, "w.0");
    put_string(&mut v1, "w.1");
    let c = CheckpointRecord::decode(&v1).unwrap();
    assert_eq!(c.metadata, "meta");
    assert_eq!(c.tensors, ["w.0", "w.1"]);
    v1[0] = 4;
    assert_eq!(
        CheckpointRecord::decode(&v1),
        Err(RecordError::Version {
            found: 4,
            supported: 3
        })
    );
}

#[test]
fn bad_front_coded_names_are_errors() {
    let record = |names: &[u8]| {
        let mut b = vec![2u8];
        put_string(&mut b, "");
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(names);
        CheckpointRecord::decode(&b)
    };
    assert!(record(&[0, 2, b'a', b'b', 2, 1, b'c']).is_ok());
    // Sharing more than the name before has.
    assert!(matches!(
        record(&[0, 2, b'a', b'b', 3, 1, b'c']),
        Err(RecordError::BadValue { .. })
    ));
    // A name over 4096 bytes, and one that is not UTF-8.
    assert!(matches!(
        record(&[0, 2, b'a', b'b', 2, 0xFF, 0x1F, b'c']),
        Err(RecordError::BadValue { .. })
    ));
    assert!(matches!(
        record(&[0, 2, b'a', b'b', 1, 1, 0xC3]),
        Err(RecordError::Utf8 { .. })
    ));
    // A varint longer than 10 bytes.
    assert!(record(&[0xFF; 12]).is_err());
}

proptest! {
    #[test]
    fn checkpoint_records_round_trip(
        metadata in ".{0,20}",
        tensors in proptest::collection::vec("(é|a|b|\\.|0|1){1,12}", 0..30),
    ) {
        let c = CheckpointRecord::new(metadata, tensors);
        prop_assert_eq!(CheckpointRecord::decode(&c.encode()), Ok(c));
    }

    #[test]
    fn packed_checkpoint_records_round_trip(
        tensors in proptest::collection::btree_map(
            "(a|b|\\.|0|1){1,12}",
            proptest::option::of((0u8..3, proptest::collection::vec(1u64..16, 0..4), 0u32..5, 0u64..(1 << 20))),
            1..30,
        ),
        reversed in any::<bool>(),
    ) {
        // In name order, and in reverse: a checkpoint keeps its tensors in the caller's order.
        let mut names: Vec<String> = tensors.keys().cloned().collect();
        if reversed {
            names.reverse();
        }
        let mut c = CheckpointRecord::new("m".into(), names.clone());
        for (name, p) in &tensors {
            if let Some((code, shape, part, offset)) = p {
                let dtype = DType::from_code(*code).unwrap();
                c.packed.insert(name.clone(), Packed {
                    dtype,
                    elements: shape.iter().product(),
                    shape: shape.clone(),
                    part: *part,
                    offset: *offset,
                });
            }
        }
        let bytes = c.encode();
        let decoded = CheckpointRecord::decode(&bytes);
        prop_assert_eq!(&decoded, &Ok(c.clone()));
        let unpacked: Vec<&String> = names.iter().filter(|n| tensors[*n].is_none()).collect();
        let decoded = decoded.unwrap();
        prop_assert_eq!(decoded.unpacked().collect::<Vec<_>>(), unpacked);
        for cut in 0..bytes.len() {
            prop_assert!(CheckpointRecord::decode(&bytes[..cut]).is_err());
        }
        let mut longer = bytes.clone();
        longer.push(0);
        prop_assert_eq!(CheckpointRecord::decode(&longer), Err(RecordError::Trailing { extra: 1 }));
        // The walk the summaries use sees the same tensors, in order.
        let mut walk = Walk::new(&bytes).unwrap();
        prop_assert_eq!(walk.count(), names.len());
        let mut seen = Vec::new();
        while let Some((name, at)) = walk.next().unwrap() {
            seen.push((name.to_owned(), at.map(|p| (p.dtype, p.shape.to_vec(), p.len(), p.part, p.offset))));
        }
        let expected: Vec<_> = names
            .iter()
            .map(|n| (n.clone(), decoded.packed.get(n).map(|p| (p.dtype, p.shape.clone(), p.len(), p.part, p.offset))))
            .collect();
        prop_assert_eq!(seen, expected);
    }

    #[test]
    fn member_runs_round_trip(first in 0u64..1000, gaps in proptest::collection::vec(1u64..1 << 40, 0..RUN_MAX_STEPS)) {
        let mut steps = vec![first];
        for g in gaps {
            let next = steps[steps.len() - 1] + g;
            steps.push(next);
        }
        let run = MemberRun { steps };
        let bytes = run.encode();
        prop_assert_eq!(MemberRun::decode(first, &bytes), Ok(run));
        // A cut inside a varint is an error, never a shorter run read as whole.
        for cut in 0..bytes.len() {
            if let Ok(r) = MemberRun::decode(first, &bytes[..cut]) {
                prop_assert!(cut == 0 || bytes[cut - 1] < 0x80, "{:?}", r);
            }
        }
    }
}

#[test]
fn damaged_member_runs_are_errors() {
    assert!(MemberRun::decode(5, &[]).is_err());
    assert!(MemberRun::decode(5, &[2]).is_err());
    // A gap of zero, and a gap past u64::MAX.
    assert!(matches!(
        MemberRun::decode(5, &[1, 0]),
        Err(RecordError::BadValue { .. })
    ));
    let mut b = vec![1u8];
    b.extend_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]);
    assert!(MemberRun::decode(5, &b).is_err());
    // More steps than a run holds.
    let mut long = vec![1u8];
    long.extend(std::iter::repeat_n(1u8, RUN_MAX_STEPS));
    assert!(matches!(
        MemberRun::decode(5, &long),
        Err(RecordError::BadValue { .. })
    ));
    long.pop();
    assert_eq!(
        MemberRun::decode(5, &long).map(|r| r.steps.len()),
        Ok(RUN_MAX_STEPS)
    );
}

#[test]
fn damaged_packed_entries_are_errors() {
    let mut c = CheckpointRecord::new(String::new(), vec!["a".into()]);
    c.packed.insert(
        "a".into(),
        Packed {
            dtype: DType::F32,
            shape: vec![2, 3],
            elements: 6,
            part: 1,
            offset: 8,
        },
    );
    let bytes = c.encode();
    // version, metadata (u32 len), count, shared, suffix len, "a", then the kind byte.
    let kind = 1 + 4 + 4 + 1 + 1 + 1;
    let mut b = bytes.clone();
    b[kind] = 2;
    assert!(matches!(
        CheckpointRecord::decode(&b),
        Err(RecordError::BadValue { .. })
    ));
    let mut b = bytes.clone();
    b[kind + 1] = 0xEE;
    assert!(matches!(
        CheckpointRecord::decode(&b),
        Err(RecordError::BadValue { .. })
    ));
    let mut b = bytes;
    b[kind + 2] = 200;
    assert!(CheckpointRecord::decode(&b).is_err());
}

#[test]
fn version_keys_order_by_name_then_step() {
    let a = version_key("w", 5);
    let b = version_key("w", 300);
    assert!(a < b);
    assert_eq!(decode_version_key(&b), Some(("w", 300)));
    assert_eq!(decode_version_key(&b[..b.len() - 1]), None);
    let r = version_key_range("w", 0..=u64::MAX);
    assert!(*r.start() <= a && a <= *r.end());
    assert!(!r.contains(&version_key("w2", 1)));
}

#[test]
fn format_and_segment_records() {
    let f = FormatRecord::current();
    assert_eq!(FormatRecord::decode(&f.encode()), Ok(Some(f)));
    assert_eq!(FormatRecord::decode(b"something-else!!"), Ok(None));
    let s = SegmentInfo {
        refcount: 3,
        len: 77,
        id: 9,
        chunks: 0,
        tail_pieces: 1,
    };
    assert_eq!(SegmentInfo::decode(&s.encode()), Ok(s));
    assert!(SegmentInfo::decode(&s.encode()[..31]).is_err());
}

#[test]
fn sealed_records_catch_any_changed_byte_of_key_or_value() {
    let key = version_key("layer.0.w", 1200);
    let value = sample().encode();
    let stored = sample().to_stored(&key);
    assert_eq!(VersionRecord::from_stored(&key, &stored), Ok(sample()));
    for i in 0..stored.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = stored.clone();
            bad[i] ^= bit;
            assert!(
                VersionRecord::from_stored(&key, &bad).is_err(),
                "value byte {i} bit {bit:#x}"
            );
        }
    }
    for i in 0..key.len() {
        let mut k = key.clone();
        k[i] ^= 0x04;
        assert!(matches!(
            VersionRecord::from_stored(&k, &stored),
            Err(RecordError::Checksum { .. })
        ));
    }
    // A value moved under another key of the same length is caught too.
    let other = version_key("layer.0.w", 1201);
    assert!(VersionRecord::from_stored(&other, &stored).is_err());
    assert!(unseal(&key, &value[..3]).is_err());
}

mod arbitrary_bytes {
    //! Every record decoder on arbitrary bytes: an error or a record, never a panic, and a
    //! record that decodes encodes back to the same bytes (a checkpoint record decodes from what
    //! it encodes: version 1 bytes read, version 2 is written).

    use super::*;
    use crate::record::Rule;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            if let Ok(r) = VersionRecord::decode(&bytes) {
                prop_assert_eq!(r.encoded_len(), bytes.len());
                prop_assert_eq!(r.encode(), bytes.clone());
            }
            if let Ok(r) = TierRow::decode(&bytes) {
                prop_assert_eq!(TierRow::decode(&r.encode()), Ok(r));
            }
            if let Ok(r) = CheckpointRecord::decode(&bytes) {
                // Version 1 bytes decode too; what is written again is version 2.
                prop_assert_eq!(CheckpointRecord::decode(&r.encode()), Ok(r));
            }
            let _ = SegmentInfo::decode(&bytes);
            let _ = Rule::decode(b"kv.*", &bytes);
            let _ = unseal(b"key", &bytes);
        }

        #[test]
        fn inline_records_round_trip(
            shape in proptest::collection::vec(1u64..4, 0..3),
            seed in any::<u64>(),
        ) {
            let elements: u64 = shape.iter().product();
            let bytes: Vec<u8> = (0..elements * 2).map(|i| (seed >> (i % 64)) as u8).collect();
            let r = VersionRecord::inline(DType::BF16, shape, elements, bytes);
            let enc = r.encode();
            prop_assert_eq!(enc.len(), r.encoded_len());
            prop_assert_eq!(VersionRecord::decode(&enc), Ok(r));
        }

        #[test]
        fn mutated_records_never_panic(at in 0usize..200, byte in any::<u8>()) {
            let mut v = sample().encode();
            let i = at % v.len();
            v[i] = byte;
            let _ = VersionRecord::decode(&v);
        }
    }
}
