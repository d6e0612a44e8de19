use super::*;
use proptest::prelude::*;

fn sparse_blob() -> HpdkvBlob {
    HpdkvBlob {
        dtype: HalfDType::BF16,
        shape: vec![3, 5],
        indices: Some(vec![0, 4, 14]),
        values: vec![0x3F80, 0xBF80, 0x0001],
    }
}

#[test]
fn layout_matches_the_seed() {
    let bytes = sparse_blob().encode(false).unwrap();
    assert_eq!(&bytes[..4], b"HPDV");
    assert_eq!(bytes[4..8], [1, 1, 2, FLAG_INDICES]);
    assert_eq!(bytes[8..16], [3, 0, 0, 0, 5, 0, 0, 0]);
    // The header is 16 bytes; the index block starts on that boundary.
    assert_eq!(bytes[16..20], [3, 0, 0, 0]);
    assert_eq!(bytes[20..32], [0, 0, 0, 0, 4, 0, 0, 0, 14, 0, 0, 0]);
    // Index block is 16 bytes: no padding; payload at 32, three words.
    assert_eq!(bytes[32..], [0x80, 0x3F, 0x80, 0xBF, 0x01, 0x00]);
    let view = HpdkvView::parse(&bytes).unwrap();
    assert_eq!(view.payload_offset(), 32);
    assert_eq!(view.value_count(), 3);
    assert_eq!(view.elements(), 15);

    let dense = HpdkvBlob {
        dtype: HalfDType::F16,
        shape: vec![2],
        indices: None,
        values: vec![1, 2],
    };
    let bytes = dense.encode(false).unwrap();
    assert_eq!(bytes.len(), 16 + 4);
    assert_eq!(bytes[4..8], [1, 0, 1, 0]);
    assert_eq!(bytes[12..16], [0; 4]);
}

#[test]
fn payload_is_always_aligned() {
    for rank in 0..10usize {
        for k in 0..6u32 {
            let blob = HpdkvBlob {
                dtype: HalfDType::F16,
                shape: vec![2; rank],
                indices: Some((0..k.min(1 << rank)).collect()),
                values: vec![7; k.min(1 << rank) as usize],
            };
            for compress in [false, true] {
                let bytes = blob.encode(compress).unwrap();
                let view = HpdkvView::parse(&bytes).unwrap();
                assert_eq!(view.payload_offset() % ALIGN, 0);
                assert_eq!(view.values(1 << 20).unwrap(), blob.values);
            }
        }
    }
}

#[test]
fn rank_zero_is_one_element() {
    let blob = HpdkvBlob {
        dtype: HalfDType::F16,
        shape: vec![],
        indices: None,
        values: vec![0x3C00],
    };
    let bytes = blob.encode(true).unwrap();
    assert_eq!(HpdkvView::parse(&bytes).unwrap().elements(), 1);
    assert_eq!(HpdkvBlob::decode(&bytes, 16).unwrap(), blob);
}

#[test]
fn writer_refuses_what_the_format_cannot_hold() {
    let mut b = sparse_blob();
    b.indices = Some(vec![4, 4, 5]);
    assert!(matches!(
        b.encode(false),
        Err(HpdkvError::IndicesNotIncreasing { position: 1, .. })
    ));
    b.indices = Some(vec![0, 1, 15]);
    assert!(matches!(
        b.encode(false),
        Err(HpdkvError::IndexOutOfRange { index: 15, .. })
    ));
    b.indices = Some(vec![0, 1]);
    assert!(matches!(
        b.encode(false),
        Err(HpdkvError::ValueCount {
            expected: 2,
            values: 3
        })
    ));
    let dense = HpdkvBlob {
        dtype: HalfDType::F16,
        shape: vec![1 << 16, 1 << 16, 2],
        indices: None,
        values: vec![],
    };
    assert!(matches!(
        dense.encode(false),
        Err(HpdkvError::TooManyElements {
            field: Field::Shape { dim: 2 },
            offset: 16
        })
    ));
    let deep = HpdkvBlob {
        dtype: HalfDType::F16,
        shape: vec![1; 256],
        indices: None,
        values: vec![0],
    };
    assert!(matches!(
        deep.encode(false),
        Err(HpdkvError::RankTooLarge { rank: 256 })
    ));
}

#[test]
fn inflate_checks_the_declared_size_both_ways() {
    let blob = HpdkvBlob {
        dtype: HalfDType::F16,
        shape: vec![100],
        indices: None,
        values: (0..100).collect(),
    };
    let mut bytes = blob.encode(true).unwrap();
    // Declare 99 or 101 elements over the same stream.
    bytes[8] = 99;
    assert!(matches!(
        HpdkvBlob::decode(&bytes, 1 << 20),
        Err(HpdkvError::InflatedTooLong { declared: 198, .. })
    ));
    bytes[8] = 101;
    assert!(matches!(
        HpdkvBlob::decode(&bytes, 1 << 20),
        Err(HpdkvError::InflatedTooShort {
            declared: 202,
            produced: 200,
            ..
        })
    ));
    bytes[8] = 100;
    bytes.push(0);
    assert!(matches!(
        HpdkvBlob::decode(&bytes, 1 << 20),
        Err(HpdkvError::TrailingBytes { count: 1, .. })
    ));
}

#[test]
fn empty_dense_compressed_stream() {
    let blob = HpdkvBlob {
        dtype: HalfDType::BF16,
        shape: vec![0, 7],
        indices: None,
        values: vec![],
    };
    let bytes = blob.encode(true).unwrap();
    assert_eq!(HpdkvBlob::decode(&bytes, 0).unwrap(), blob);
}

#[test]
fn limits_and_output_length() {
    let bytes = sparse_blob().encode(true).unwrap();
    assert!(matches!(
        HpdkvBlob::decode(&bytes, 5),
        Err(HpdkvError::OverLimit { len: 6, limit: 5 })
    ));
    let view = HpdkvView::parse(&bytes).unwrap();
    assert!(matches!(
        view.values_into(&mut [0u16; 2]),
        Err(HpdkvError::OutputLength {
            expected: 3,
            actual: 2
        })
    ));
}

#[test]
fn half_conversions_round_to_nearest_even() {
    assert_eq!(HalfDType::F16.from_f32(1.0), 0x3C00);
    assert_eq!(HalfDType::BF16.from_f32(1.0), 0x3F80);
    // 1 + 2^-8 is halfway between two bf16 values: ties to even (1.0).
    assert_eq!(HalfDType::BF16.from_f32(1.0 + 1.0 / 256.0), 0x3F80);
    assert_eq!(HalfDType::F16.to_f32(0xC000), -2.0);
    for t in HalfDType::ALL {
        assert_eq!(HalfDType::from_code(t.code()), Some(t));
        assert!(t.dtype().is_float());
    }
    assert_eq!(HalfDType::from_code(2), None);
}

fn blob_strategy() -> impl Strategy<Value = HpdkvBlob> {
    (
        prop::collection::vec(0u32..12, 0..4),
        any::<bool>(),
        prop::sample::select(HalfDType::ALL.to_vec()),
        any::<u64>(),
    )
        .prop_flat_map(|(shape, sparse, dtype, seed)| {
            let n: u32 = shape.iter().product();
            let indices = if sparse {
                prop::collection::btree_set(0..n.max(1), 0..=n as usize)
                    .prop_map(move |s| Some(s.into_iter().filter(|&i| i < n).collect::<Vec<_>>()))
                    .boxed()
            } else {
                Just(None).boxed()
            };
            (Just(shape), indices, Just(dtype), Just(seed))
        })
        .prop_map(|(shape, indices, dtype, seed)| {
            let count = indices
                .as_ref()
                .map_or(shape.iter().product::<u32>() as usize, Vec::len);
            // Arbitrary bit patterns, NaN and infinities included: the format carries any.
            let values = (0..count as u64)
                .map(|i| (seed.wrapping_mul(i + 1) >> 17) as u16)
                .collect();
            HpdkvBlob {
                dtype,
                shape,
                indices,
                values,
            }
        })
}

proptest! {
    #[test]
    fn round_trip(blob in blob_strategy(), compress in any::<bool>()) {
        let bytes = blob.encode(compress).unwrap();
        let view = HpdkvView::parse(&bytes).unwrap();
        prop_assert_eq!(view.payload_offset() % ALIGN, 0);
        prop_assert_eq!(view.is_compressed(), compress);
        prop_assert_eq!(view.is_sparse(), blob.indices.is_some());
        prop_assert_eq!(HpdkvBlob::decode(&bytes, usize::MAX).unwrap(), blob);
    }

    #[test]
    fn every_truncation_is_refused(blob in blob_strategy(), compress in any::<bool>()) {
        let bytes = blob.encode(compress).unwrap();
        for len in 0..bytes.len() {
            prop_assert!(HpdkvBlob::decode(&bytes[..len], usize::MAX).is_err(), "prefix {}", len);
        }
    }
}
