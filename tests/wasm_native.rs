//! The browser package's API (`strata-wasm`, run natively here: the same Rust that is
//! compiled to WebAssembly) makes, for every block of real checkpoints, the very segment the
//! store writes and the codec makes: byte for byte, for keyframes, XOR deltas and 8-bit
//! tiers, and each side decodes the other's segment bit-exact.
//!
//! The store does not hand out its segments, so the test finds them in its file: each
//! segment starts with a 48-byte header whose last 8 bytes are an xxh3-64 of the rest of
//! the header and the payload. A header of the WASM segment found in the store's file, with
//! the store's segment length ([`strata::store::BlockEncoding::stored_bytes`]) equal to the
//! WASM segment's, is the same segment.
//!
//! Runs on the committed series, and on the shared one too when present (see `common`).

// Checks fail the test by panicking, as assertions do.
#![allow(clippy::panic)]

mod common;

use std::collections::HashSet;
use std::path::Path;

use common::{all_series, Named, SeriesExt};
use strata::codec::lossless::LosslessOptions;
use strata::codec::quant::{QuantBits, QuantParams};
use strata::codec::segment::{self, Segment};
use strata::store::{BlockEncoding, DType, Options, Store, Tier, TierPolicy};
use strata_wasm::ops;

const BLOCK_BYTES: u64 = 64 << 10;
const HEADER: usize = 48;
const LIMIT: usize = 1 << 28;

/// Every 48-byte window of `file` that starts with a segment's magic.
fn headers_in(file: &Path) -> HashSet<Vec<u8>> {
    let bytes = std::fs::read(file).expect("read the store file");
    bytes
        .windows(HEADER)
        .filter(|w| w.starts_with(b"STSG"))
        .map(<[u8]>::to_vec)
        .collect()
}

fn open(path: &Path) -> Store {
    let opts = Options {
        block_bytes: BLOCK_BYTES,
        ..Options::default()
    };
    Store::open_with(path, opts).expect("open")
}

fn blocks(t: &Named) -> Vec<&[u8]> {
    t.data.chunks(BLOCK_BYTES as usize).collect()
}

fn encodings(store: &Store, name: &str, step: u64) -> Vec<BlockEncoding> {
    store
        .versions(name)
        .expect("versions")
        .into_iter()
        .find(|v| v.step == step)
        .unwrap_or_else(|| panic!("{name}: no version at {step}"))
        .encodings
}

/// The WASM segment equals the codec's, and is the store's (its header is in the store's
/// file, and the store's segment has its length).
fn same_segment(
    what: &str,
    wasm: &[u8],
    codec: &[u8],
    enc: &BlockEncoding,
    file: &HashSet<Vec<u8>>,
) {
    assert!(wasm == codec, "{what}: the WASM API and the codec differ");
    assert!(wasm.starts_with(b"STSG"), "{what}: not a segment");
    assert_eq!(
        wasm.len() as u64,
        enc.stored_bytes,
        "{what}: length differs from the store's"
    );
    assert!(
        file.contains(&wasm[..HEADER]),
        "{what}: the store's file holds no such segment"
    );
}

#[test]
fn lossless_segments_equal_the_stores_and_decode_both_ways() {
    for src in all_series() {
        for sub in ["dev_ft", "dev_ft/bf16"] {
            let base = src.load(&format!("{sub}/step_000400.safetensors"));
            let next = src.load(&format!("{sub}/step_000410.safetensors"));
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join("lossless.strata");
            let store = open(&path);
            for (step, ts) in [(400, &base), (410, &next)] {
                let refs: Vec<_> = ts.iter().map(|t| (t.name.as_str(), t.as_ref())).collect();
                store.save_checkpoint(step, &refs, "").expect("save");
            }
            let plan: Vec<(u64, Vec<Vec<BlockEncoding>>)> = [400u64, 410]
                .iter()
                .map(|&s| {
                    (
                        s,
                        base.iter().map(|t| encodings(&store, &t.name, s)).collect(),
                    )
                })
                .collect();
            drop(store);
            let file = headers_in(&path);

            let opts = ops::lossless_options(None).expect("default options");
            let (mut keys, mut deltas, mut refs) = (0, 0, 0);
            for (step, per_tensor) in &plan {
                // The other step: a delta's base either way (the newest is kept a keyframe
                // and the step before re-encoded against it, ADR 0006).
                let (ts, others, other) = if *step == 400 {
                    (&base, &next, 410)
                } else {
                    (&next, &base, 400)
                };
                for ((t, b), encs) in ts.iter().zip(others).zip(per_tensor) {
                    assert_eq!(t.name, b.name);
                    if encs.iter().all(|e| e.inline) {
                        // Packed with the other small tensors (ADR 0041): no segment of its own.
                        continue;
                    }
                    let (data, base_blocks) = (blocks(t), blocks(b));
                    assert_eq!(data.len(), encs.len(), "{}: block count", t.name);
                    for (i, (block, enc)) in data.iter().zip(encs).enumerate() {
                        let what = format!("{} {sub} {} step {step} block {i}", src.label, t.name);
                        if enc.reference {
                            assert_eq!(
                                *block, base_blocks[i],
                                "{what}: a reference to another block"
                            );
                            refs += 1;
                            continue;
                        }
                        let against = enc.base.map(|s| {
                            assert_eq!(s, other, "{what}: unexpected base");
                            base_blocks[i]
                        });
                        let wasm =
                            ops::encode(t.dtype, block, against, &opts).expect("WASM encode");
                        let codec = match against {
                            None => segment::encode_keyframe(
                                t.dtype,
                                block,
                                &LosslessOptions::default(),
                            ),
                            Some(a) => segment::encode_delta(
                                t.dtype,
                                block,
                                a,
                                &LosslessOptions::default(),
                            ),
                        }
                        .expect("codec encode");
                        same_segment(&what, &wasm, &codec, enc, &file);
                        // Each side decodes the other's segment bit-exact.
                        let by_codec = Segment::parse(&wasm)
                            .and_then(|s| s.decode_lossless(against, LIMIT))
                            .expect("codec decodes the WASM segment");
                        assert!(by_codec == *block, "{what}: codec decode differs");
                        let (dtype, by_wasm) = ops::decode(&codec, against).expect("WASM decodes");
                        assert_eq!(dtype, t.dtype);
                        assert!(by_wasm == *block, "{what}: WASM decode differs");
                        if against.is_some() {
                            deltas += 1;
                        } else {
                            keys += 1;
                        }
                    }
                }
            }
            eprintln!(
                "{} {sub}: {keys} keyframes, {deltas} deltas, {refs} references compared",
                src.label
            );
            assert!(
                keys > 0 && deltas > 0,
                "{} {sub}: both kinds compared",
                src.label
            );
        }
    }
}

#[test]
fn quantized_segments_equal_the_stores_and_read_the_same_values() {
    for src in all_series() {
        for sub in ["dev_ft", "dev_ft/bf16"] {
            let ts = src.load(&format!("{sub}/step_000430.safetensors"));
            let want = if sub.ends_with("bf16") {
                DType::BF16
            } else {
                DType::F32
            };
            assert!(ts.iter().all(|t| t.dtype == want), "{sub}: dtypes");
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join("hot8.strata");
            let store = open(&path);
            store
                .set_policy("*", TierPolicy::tiered(Tier::Hot8))
                .expect("policy");
            for t in &ts {
                store.put(&t.name, 430, &t.as_ref()).expect("put");
            }
            let stored: Vec<(Vec<BlockEncoding>, Vec<u8>)> = ts
                .iter()
                .map(|t| {
                    let got = store.get(&t.name, 430).expect("get");
                    (encodings(&store, &t.name, 430), got.data)
                })
                .collect();
            drop(store);
            let file = headers_in(&path);

            let mut compared = 0;
            for (t, (encs, read)) in ts.iter().zip(&stored) {
                let read_blocks: Vec<&[u8]> = read.chunks(BLOCK_BYTES as usize).collect();
                for (i, (block, enc)) in blocks(t).iter().zip(encs).enumerate() {
                    let what = format!("{} {sub} {} block {i}", src.label, t.name);
                    assert_eq!(enc.tier, Tier::Hot8, "{what}");
                    let values = ops::widen(t.dtype, block).expect("widen");
                    let wasm = ops::quantize(&values, 8, t.dtype, None).expect("WASM quantize");
                    let codec = segment::encode_quantized(
                        t.dtype,
                        &values,
                        &QuantParams::new(QuantBits::B8),
                    )
                    .expect("codec quantize");
                    same_segment(&what, &wasm, &codec, enc, &file);
                    // Both dequantize to the same values, which are what the store reads.
                    let by_wasm = ops::dequantize(&codec).expect("WASM dequantize");
                    let by_codec = Segment::parse(&wasm)
                        .and_then(|s| s.dequantize(LIMIT))
                        .expect("codec dequantize");
                    assert!(
                        by_wasm
                            .iter()
                            .map(|v| v.to_bits())
                            .eq(by_codec.iter().map(|v| v.to_bits())),
                        "{what}: dequantized values differ"
                    );
                    let as_dtype = ops::narrow(t.dtype, &by_wasm).expect("narrow");
                    assert!(
                        as_dtype == read_blocks[i],
                        "{what}: the store reads other values"
                    );
                    compared += 1;
                }
            }
            assert!(compared > 0);
            eprintln!("{} {sub}: {compared} 8-bit blocks compared", src.label);
        }
    }
}
