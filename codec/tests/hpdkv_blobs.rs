//! HPΔKV readers refuse every malformed blob with a typed error naming the field and its
//! offset: truncation at every length, bad magic, unknown versions, dtypes and flags,
//! missing or dirty alignment padding, bad index blocks, declared sizes the input cannot
//! hold, and corrupted zlib streams.

use strata_codec::hpdkv::{
    Field, HalfDType, HpdkvBlob, HpdkvError, HpdkvView, ALIGN, FLAG_COMPRESSED, FLAG_INDICES,
    MAX_INFLATE_RATIO,
};

const LIMIT: usize = 1 << 24;

fn decode(bytes: &[u8]) -> Result<HpdkvBlob, HpdkvError> {
    HpdkvBlob::decode(bytes, LIMIT)
}

/// A sparse bf16 residual of a 3 x 7 tensor: rank 2, so the header is exactly 16 bytes
/// (no padding), then a 3-entry index block of 16 bytes (no padding), payload at 32.
fn sparse() -> HpdkvBlob {
    HpdkvBlob {
        dtype: HalfDType::BF16,
        shape: vec![3, 7],
        indices: Some(vec![2, 9, 20]),
        values: vec![0x3C00, 0xBB80, 0x0042],
    }
}

/// A dense fp16 tensor of rank 3 (header 20 bytes + 12 bytes of padding).
fn dense() -> HpdkvBlob {
    HpdkvBlob {
        dtype: HalfDType::F16,
        shape: vec![2, 3, 40],
        indices: None,
        values: (0..240u16).map(|i| i.wrapping_mul(0x1234)).collect(),
    }
}

fn all_blobs() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, blob) in [("sparse", sparse()), ("dense", dense())] {
        for compress in [false, true] {
            let bytes = blob.encode(compress).expect("encode");
            out.push((format!("{name} compressed={compress}"), bytes));
        }
    }
    out
}

#[test]
fn intact_blobs_decode() {
    for (name, bytes) in all_blobs() {
        let got = decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = if name.starts_with("sparse") {
            sparse()
        } else {
            dense()
        };
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn truncation_at_every_length_is_refused() {
    for (name, bytes) in all_blobs() {
        for len in 0..bytes.len() {
            let r = decode(&bytes[..len]);
            assert!(r.is_err(), "{name}: prefix of {len} bytes decoded");
        }
    }
    // The field named is the one cut short.
    let bytes = dense().encode(false).expect("encode");
    assert!(matches!(
        decode(&bytes[..3]),
        Err(HpdkvError::Truncated {
            field: Field::Magic,
            offset: 0,
            ..
        })
    ));
    assert!(matches!(
        decode(&bytes[..14]),
        Err(HpdkvError::Truncated {
            field: Field::Shape { dim: 1 },
            offset: 12,
            ..
        })
    ));
    assert!(matches!(
        decode(&bytes[..25]),
        Err(HpdkvError::Truncated {
            field: Field::HeaderPadding,
            offset: 20,
            ..
        })
    ));
    assert!(matches!(
        decode(&bytes[..40]),
        Err(HpdkvError::PayloadLength {
            offset: 32,
            expected: 480,
            actual: 8
        })
    ));
    let bytes = sparse().encode(false).expect("encode");
    assert!(matches!(
        decode(&bytes[..18]),
        Err(HpdkvError::Truncated {
            field: Field::IndexCount,
            offset: 16,
            ..
        })
    ));
    assert!(matches!(
        decode(&bytes[..27]),
        Err(HpdkvError::Truncated {
            field: Field::Indices,
            offset: 20,
            end: 32,
            len: 27
        })
    ));
}

#[test]
fn bad_magic_version_dtype_flags() {
    let good = sparse().encode(true).expect("encode");
    let with = |at: usize, b: u8| {
        let mut v = good.clone();
        v[at] = b;
        decode(&v)
    };
    assert!(matches!(
        with(0, b'X'),
        Err(HpdkvError::BadMagic {
            found: [b'X', b'P', b'D', b'V']
        })
    ));
    for version in [0u8, 2, 255] {
        assert_eq!(
            with(4, version),
            Err(HpdkvError::UnsupportedVersion { version })
        );
    }
    assert_eq!(with(5, 2), Err(HpdkvError::UnknownDType { code: 2 }));
    let flags = FLAG_INDICES | FLAG_COMPRESSED | 0x40;
    assert_eq!(
        with(7, flags),
        Err(HpdkvError::UnknownFlags {
            flags,
            unknown: 0x40
        })
    );
}

#[test]
fn bad_alignment_is_refused() {
    // A writer that forgot the padding: payload right after a rank-3 shape (offset 20).
    let good = dense().encode(false).expect("encode");
    let mut unpadded = good[..20].to_vec();
    unpadded.extend_from_slice(&good[32..]);
    assert!(decode(&unpadded).is_err());
    // The same with payload bytes that are not zero where the padding should be.
    let mut v = unpadded.clone();
    v[20..32].fill(0x11);
    assert_eq!(
        decode(&v),
        Err(HpdkvError::NonZeroPadding {
            field: Field::HeaderPadding,
            offset: 20,
            value: 0x11
        })
    );
    // Dirty padding in an otherwise good blob: header and index padding.
    let mut v = good.clone();
    v[31] = 1;
    assert_eq!(
        decode(&v),
        Err(HpdkvError::NonZeroPadding {
            field: Field::HeaderPadding,
            offset: 31,
            value: 1
        })
    );
    let two = HpdkvBlob {
        indices: Some(vec![1, 5]),
        values: vec![1, 2],
        ..sparse()
    }
    .encode(false)
    .expect("encode");
    // Index block at 16: count + 2 indices = 12 bytes, padding 28..32, payload at 32.
    assert_eq!(HpdkvView::parse(&two).expect("parse").payload_offset(), 32);
    let mut v = two.clone();
    v[29] = 0xFF;
    assert_eq!(
        decode(&v),
        Err(HpdkvError::NonZeroPadding {
            field: Field::IndexPadding,
            offset: 29,
            value: 0xFF
        })
    );
    for (name, bytes) in all_blobs() {
        let view = HpdkvView::parse(&bytes).expect("parse");
        assert_eq!(view.payload_offset() % ALIGN, 0, "{name}");
    }
}

#[test]
fn bad_index_blocks_are_refused() {
    let good = sparse().encode(false).expect("encode");
    let with_index = |entry: usize, value: u32| {
        let mut v = good.clone();
        let at = 20 + 4 * entry;
        v[at..at + 4].copy_from_slice(&value.to_le_bytes());
        decode(&v)
    };
    assert_eq!(
        with_index(2, 21),
        Err(HpdkvError::IndexOutOfRange {
            position: 2,
            index: 21,
            elements: 21,
            offset: 28
        })
    );
    assert_eq!(
        with_index(1, 2),
        Err(HpdkvError::IndicesNotIncreasing {
            position: 1,
            index: 2,
            previous: 2,
            offset: 24
        })
    );
    assert_eq!(
        with_index(0, 10),
        Err(HpdkvError::IndicesNotIncreasing {
            position: 1,
            index: 9,
            previous: 10,
            offset: 24
        })
    );
    // More indices than elements.
    let mut v = good.clone();
    v[16..20].copy_from_slice(&22u32.to_le_bytes());
    assert_eq!(
        decode(&v),
        Err(HpdkvError::IndexCountTooLarge {
            count: 22,
            elements: 21,
            offset: 16
        })
    );
}

#[test]
fn declared_sizes_beyond_the_input_are_refused() {
    // A huge dense shape over a few payload bytes: refused from the header alone.
    let mut v = dense().encode(false).expect("encode");
    v[16..20].copy_from_slice(&(1u32 << 20).to_le_bytes());
    assert!(matches!(
        decode(&v),
        Err(HpdkvError::PayloadLength { offset: 32, .. })
    ));
    let mut v = dense().encode(true).expect("encode");
    let payload = v.len() - 32;
    let too_many = (payload * MAX_INFLATE_RATIO / 2 / 6 + 1) as u32;
    v[16..20].copy_from_slice(&too_many.to_le_bytes());
    assert!(matches!(
        decode(&v),
        Err(HpdkvError::DeclaredSizeExceedsInput { offset: 32, .. })
    ));
    // Over 2^32 elements.
    let mut v = dense().encode(false).expect("encode");
    v[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    v[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        decode(&v),
        Err(HpdkvError::TooManyElements {
            field: Field::Shape { dim: 1 },
            offset: 12
        })
    );
    // An index count of u32::MAX in a sparse blob of a large shape: the index block is
    // checked against the bytes present before anything is read or allocated.
    let mut v = sparse().encode(false).expect("encode");
    v[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    v[12..16].copy_from_slice(&1u32.to_le_bytes());
    v[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        decode(&v),
        Err(HpdkvError::Truncated {
            field: Field::Indices,
            offset: 20,
            ..
        })
    ));
    // The caller's limit applies to the values.
    let bytes = dense().encode(true).expect("encode");
    assert!(matches!(
        HpdkvBlob::decode(&bytes, 479),
        Err(HpdkvError::OverLimit {
            len: 480,
            limit: 479
        })
    ));
}

/// HPΔKV has no checksum of its own (the seed defines none; the store checksums whole
/// blobs, ADR 0012). What the format itself catches, for every single-byte change:
///
/// - magic, version, rank, flags, index count and padding: always an error;
/// - a zlib payload: an error, or (a flip in bits deflate ignores) exactly the same blob,
///   since Adler-32 covers the inflated bytes;
/// - the dtype byte, the shape and the indices: an error, or another blob that is
///   consistent (indices increasing and in range);
/// - raw payload values: anything; never a panic.
#[test]
fn corruption() {
    for (name, bytes) in all_blobs() {
        let view = HpdkvView::parse(&bytes).expect("parse");
        let rank = view.shape().len();
        let shape = 8..8 + 4 * rank;
        let indices = if view.is_sparse() {
            20..20 + 4 * view.value_count() as usize
        } else {
            0..0
        };
        let payload_at = view.payload_offset();
        let compressed = view.is_compressed();
        let original = decode(&bytes).expect("intact");
        let mut bad = bytes.clone();
        for pos in 0..bytes.len() {
            for mask in [0x01u8, 0x80, 0xFF] {
                bad[pos] ^= mask;
                let got = decode(&bad);
                let what = format!("{name}: byte {pos} ^ {mask:#04x} of {}", bytes.len());
                if pos >= payload_at {
                    if compressed {
                        if let Ok(b) = &got {
                            assert_eq!(b, &original, "{what}");
                        }
                    }
                } else if pos == 5 || shape.contains(&pos) || indices.contains(&pos) {
                    if let Ok(b) = &got {
                        assert_ne!(b, &original, "{what}");
                        let n: u64 = b.shape.iter().map(|&d| u64::from(d)).product();
                        if let Some(ix) = &b.indices {
                            assert!(ix.windows(2).all(|w| w[0] < w[1]), "{what}");
                            assert!(ix.iter().all(|&i| u64::from(i) < n), "{what}");
                        } else {
                            assert_eq!(b.values.len() as u64, n, "{what}");
                        }
                    }
                } else {
                    assert!(got.is_err(), "{what} decoded to data");
                }
                bad[pos] ^= mask;
            }
        }
    }
}
