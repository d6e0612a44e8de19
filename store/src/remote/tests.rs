#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use proptest::prelude::*;

use super::manifest::of_checkpoint;
use super::*;
use crate::record::{Kind, Manifest};
use crate::{DType, NotFound, Options, RetainPolicy, Store, StoreError, TensorRef};

/// A tensor of `n` f32 values that drift with `step` (so versions are deltas).
fn weights(n: usize, seed: u32, step: u64) -> Vec<u8> {
    (0..n)
        .flat_map(|i| {
            let x = ((i as u32).wrapping_mul(2654435761) ^ seed) as f32 / u32::MAX as f32;
            (x + step as f32 * 1e-4).to_le_bytes()
        })
        .collect()
}

/// Saves checkpoints at `steps` with tensors `a` (large, several blocks) and `b` (small).
fn fill(store: &Store, steps: &[u64], seed: u32) {
    for &s in steps {
        let a = weights(300_000, seed, s);
        let b = weights(20_000, seed ^ 7, s);
        store
            .save_checkpoint(
                s,
                &[
                    (
                        "a",
                        TensorRef {
                            dtype: DType::F32,
                            shape: &[300_000],
                            bytes: &a,
                        },
                    ),
                    (
                        "b",
                        TensorRef {
                            dtype: DType::F32,
                            shape: &[200, 100],
                            bytes: &b,
                        },
                    ),
                ],
                &format!("{{\"step\": {s}}}"),
            )
            .unwrap();
    }
}

fn small_blocks() -> Options {
    Options {
        block_bytes: 256 << 10,
        ..Options::default()
    }
}

fn open(dir: &tempfile::TempDir, name: &str) -> Store {
    Store::open_with(dir.path().join(name), small_blocks()).unwrap()
}

fn same_checkpoints(a: &Store, b: &Store) {
    assert_eq!(a.checkpoints().unwrap(), b.checkpoints().unwrap());
    for s in a.checkpoints().unwrap() {
        assert_eq!(
            a.checkpoint_metadata(s).unwrap(),
            b.checkpoint_metadata(s).unwrap()
        );
        for name in ["a", "b"] {
            assert_eq!(
                a.get(name, s).unwrap().data,
                b.get(name, s).unwrap().data,
                "{name}@{s}"
            );
        }
    }
}

#[test]
fn push_then_pull_is_exact_and_incremental() {
    let dir = tempfile::tempdir().unwrap();
    let src = open(&dir, "src.strata");
    fill(&src, &[10, 20, 30], 1);
    src.tag("best", 20).unwrap();
    let remote = Remote::in_memory();
    let first = push(&src, &remote, None).unwrap();
    assert_eq!(first.steps_sent, vec![10, 20, 30]);
    assert!(first.segments_sent > 0);
    assert_eq!(first.tags_sent, 1);
    let stats = src.stats().unwrap();
    assert!(
        first.bytes_sent <= stats.segment_bytes,
        "sent {} of {} segment bytes",
        first.bytes_sent,
        stats.segment_bytes
    );

    let again = push(&src, &remote, None).unwrap();
    assert_eq!(again.segments_sent, 0);
    assert_eq!(again.steps_present, 3);
    assert!(again.steps_sent.is_empty());

    let dst = open(&dir, "dst.strata");
    let got = pull(&remote, &dst, None).unwrap();
    assert_eq!(got.steps_received, vec![10, 20, 30]);
    assert_eq!(got.tags_received, 1);
    same_checkpoints(&src, &dst);
    assert_eq!(dst.tags().unwrap(), vec![("best".to_string(), 20)]);
    assert!(dst.verify().unwrap().is_ok());

    // New steps on the source travel alone.
    fill(&src, &[40], 1);
    let more = push(&src, &remote, None).unwrap();
    assert_eq!(more.steps_sent, vec![40]);
    assert!(more.bytes_sent < first.bytes_sent);
    let got = pull(&remote, &dst, None).unwrap();
    assert_eq!(got.steps_received, vec![40]);
    assert_eq!(got.steps_present, 3);
    same_checkpoints(&src, &dst);
}

/// Saves that re-encode older versions against the newest (flips and anchors, ADR 0006) leave
/// the remote's copies as they were pushed: pushes after every save send the new step alone,
/// and pulls, incremental or into a fresh store, read every checkpoint exactly.
#[test]
fn pushes_and_pulls_follow_saves_that_re_encode_older_versions() {
    let dir = tempfile::tempdir().unwrap();
    let src = open(&dir, "src.strata");
    let dst = open(&dir, "dst.strata");
    let remote = Remote::in_memory();
    let steps: Vec<u64> = (1..=16).map(|s| s * 10).collect();
    for (i, &s) in steps.iter().enumerate() {
        fill(&src, &[s], 1);
        assert_eq!(push(&src, &remote, None).unwrap().steps_sent, vec![s]);
        if i % 3 == 2 {
            pull(&remote, &dst, None).unwrap();
            same_checkpoints(&src, &dst);
        }
    }
    // Some version was re-based onto a newer keyframe than the one after it: an anchor.
    let versions = src.versions("a").unwrap();
    assert!(
        versions
            .iter()
            .any(|v| v.encodings[0].base.is_some_and(|b| b > v.step + 10)),
        "no anchor: {versions:?}"
    );
    pull(&remote, &dst, None).unwrap();
    same_checkpoints(&src, &dst);
    assert!(dst.verify().unwrap().is_ok());
    let fresh = open(&dir, "fresh.strata");
    pull(&remote, &fresh, None).unwrap();
    same_checkpoints(&src, &fresh);
    assert!(fresh.verify().unwrap().is_ok());
    assert!(push(&src, &remote, None).unwrap().steps_sent.is_empty());
}

#[test]
fn a_different_checkpoint_at_a_pushed_step_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (open(&dir, "1.strata"), open(&dir, "2.strata"));
    fill(&one, &[10], 1);
    fill(&two, &[10, 20], 2);
    let remote = Remote::in_memory();
    push(&one, &remote, None).unwrap();
    let err = push(&two, &remote, None).unwrap_err();
    assert!(
        matches!(err, RemoteError::Conflict { step: 10, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("checkpoints/00000000000000000010"),
        "{err}"
    );
    // Step 20 of the second store is a delta against its own step 10, which the remote does
    // not hold: refused too. Step 10 is still the first writer's.
    let dst = open(&dir, "dst.strata");
    let _ = pull(&remote, &dst, None).unwrap();
    assert_eq!(dst.checkpoints().unwrap(), vec![10]);
    assert_eq!(
        dst.get("a", 10).unwrap().data,
        one.get("a", 10).unwrap().data
    );
}

#[test]
fn a_cold_read_fetches_only_its_chain() {
    let dir = tempfile::tempdir().unwrap();
    let src = open(&dir, "src.strata");
    fill(&src, &[10, 20, 30, 40], 3);
    let folder = dir.path().join("remote");
    let url = format!("file://{}", folder.display());
    let remote = Remote::open(&url).unwrap();
    push(&src, &remote, None).unwrap();

    let rs = Store::open_remote(&url, dir.path().join("cache")).unwrap();
    assert_eq!(rs.checkpoints(), vec![10, 20, 30, 40]);
    let before = rs.counts();
    let b = rs.get("b", 20).unwrap();
    assert_eq!(b.data, src.get("b", 20).unwrap().data);
    let after = rs.counts();
    // "b" is one block: its chain at step 20 runs up to the newest, a keyframe (ADR 0006).
    let versions = src.versions("b").unwrap();
    let mut chain = Vec::new();
    let mut at = Some(20);
    while let Some(step) = at {
        let v = versions.iter().find(|v| v.step == step).unwrap();
        chain.push(v);
        at = v.encodings[0].base;
    }
    assert!(chain.len() >= 2, "step 20 is a delta: {chain:?}");
    let b_bytes: u64 = chain.iter().map(|v| v.stored_bytes).sum();
    assert!(
        after.bytes_in - before.bytes_in <= b_bytes,
        "{after:?} {before:?} {b_bytes}"
    );
    assert!(after.requests - before.requests <= chain.len() as u64);
    // A second read of it is local.
    let _ = rs.get("b", 20).unwrap();
    assert_eq!(rs.counts().requests, after.requests);
    let (s, a) = rs.get_at("a", 35).unwrap();
    assert_eq!(s, 30);
    assert_eq!(a.data, src.get("a", 30).unwrap().data);
    let h = rs.history("b", 3..5, 10..=40).unwrap();
    assert_eq!(h.len(), 4);
    let out = dir.path().join("40.safetensors");
    rs.export_safetensors(40, &out).unwrap();
    let back = open(&dir, "back.strata");
    back.import_safetensors(&out, 40).unwrap();
    assert_eq!(
        back.get("a", 40).unwrap().data,
        src.get("a", 40).unwrap().data
    );
    assert!(matches!(
        rs.get("nope", 10).unwrap_err(),
        RemoteError::Store(StoreError::NotFound(_))
    ));
}

#[test]
fn the_read_cache_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let src = open(&dir, "src.strata");
    fill(&src, &[10, 20], 4);
    let remote = Remote::in_memory();
    push(&src, &remote, None).unwrap();
    let rs = RemoteStore::open(remote, dir.path().join("cache"), 1).unwrap();
    assert_eq!(
        rs.get("a", 20).unwrap().data,
        src.get("a", 20).unwrap().data
    );
    assert_eq!(
        rs.get("b", 20).unwrap().data,
        src.get("b", 20).unwrap().data
    );
    // Over the bound, "a" (least recently read) left the cache.
    assert_eq!(rs.cache().tensors().unwrap(), vec!["b".to_string()]);
    assert_eq!(
        rs.get("a", 10).unwrap().data,
        src.get("a", 10).unwrap().data
    );
    // A whole checkpoint is read even when it is larger than the bound.
    let ckpt = rs.load_checkpoint(20).unwrap();
    assert_eq!(ckpt.tensors.len(), 2);
    assert_eq!(ckpt.tensors[0].1.data, src.get("a", 20).unwrap().data);
    let (found, b) = rs.get_at("b", 15).unwrap();
    assert_eq!(found, 10);
    assert_eq!(b.data, src.get("b", 10).unwrap().data);
    rs.export_safetensors(20, dir.path().join("20.safetensors"))
        .unwrap();
}

#[test]
fn a_checkpoint_reads_into_buffers_laid_out_from_its_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let src = open(&dir, "src.strata");
    fill(&src, &[10, 20], 5);
    let remote = Remote::in_memory();
    push(&src, &remote, None).unwrap();
    // A bound smaller than one checkpoint: the read still sees every tensor.
    let rs = RemoteStore::open(remote, dir.path().join("cache"), 1).unwrap();
    let before = rs.counts().requests;
    let layout = rs.pending(20).unwrap();
    assert_eq!(layout, src.read_checkpoint(20).unwrap().pending().unwrap());
    assert_eq!(
        rs.counts().requests,
        before,
        "the layout comes from the manifest alone"
    );
    let mut bufs: Vec<Vec<u8>> = layout.iter().map(|t| vec![0; t.bytes as usize]).collect();
    let metadata = rs
        .with_checkpoint(20, |cache| {
            let mut reader = cache.read_checkpoint(20)?;
            assert_eq!(reader.pending()?, layout);
            let mut outs: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
            reader.read_into(&mut outs)?;
            Ok(reader.metadata().to_string())
        })
        .unwrap();
    assert_eq!(metadata, src.checkpoint_info(20).unwrap().metadata);
    for (t, buf) in layout.iter().zip(&bufs) {
        assert_eq!(*buf, src.get(&t.name, 20).unwrap().data, "{}", t.name);
    }
    // A failing read's error is the caller's.
    let err = rs
        .with_checkpoint(20, |_| -> crate::Result<()> {
            Err(StoreError::NotFound(NotFound::Checkpoint { step: 7 }))
        })
        .unwrap_err();
    assert!(matches!(err, RemoteError::Store(StoreError::NotFound(_))));
    assert!(matches!(
        rs.pending(15).unwrap_err(),
        RemoteError::Store(StoreError::NotFound(NotFound::Checkpoint { step: 15 }))
    ));
}

#[test]
fn parts_join_into_one_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let rank0 = open(&dir, "r0.strata");
    let rank1 = open(&dir, "r1.strata");
    let x = weights(1000, 5, 0);
    rank0
        .save_checkpoint(
            7,
            &[(
                "x0",
                TensorRef {
                    dtype: DType::F32,
                    shape: &[1000],
                    bytes: &x,
                },
            )],
            "",
        )
        .unwrap();
    rank1
        .save_checkpoint(
            7,
            &[(
                "x1",
                TensorRef {
                    dtype: DType::F32,
                    shape: &[1000],
                    bytes: &x,
                },
            )],
            "",
        )
        .unwrap();
    let remote = Remote::in_memory();
    push_part(&rank0, &remote, 7, "rank0").unwrap();
    // Not visible before the commit.
    let dst = open(&dir, "dst.strata");
    assert!(pull(&remote, &dst, None).unwrap().steps_received.is_empty());
    push_part(&rank1, &remote, 7, "rank1").unwrap();
    assert_eq!(commit_parts(&remote, 7, "{\"ranks\": 2}").unwrap(), 2);
    let got = pull(&remote, &dst, None).unwrap();
    assert_eq!(got.steps_received, vec![7]);
    assert_eq!(dst.checkpoint_metadata(7).unwrap(), "{\"ranks\": 2}");
    assert_eq!(dst.get("x0", 7).unwrap().data, x);
    assert_eq!(dst.get("x1", 7).unwrap().data, x);
    // Two parts holding one tensor cannot be joined.
    push_part(&rank0, &remote, 7, "a").unwrap_err_or_commit_fails(&remote);
}

trait PartOutcome {
    fn unwrap_err_or_commit_fails(self, remote: &Remote);
}

impl PartOutcome for Result<PushReport, RemoteError> {
    /// Step 7 is committed, so a new part of it is pushed but joining it again must not
    /// replace the checkpoint.
    fn unwrap_err_or_commit_fails(self, remote: &Remote) {
        self.unwrap();
        let err = commit_parts(remote, 7, "other").unwrap_err();
        assert!(
            matches!(err, RemoteError::Conflict { step: 7, .. }),
            "{err}"
        );
    }
}

#[test]
fn gc_keeps_what_manifests_name_and_waits_out_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let src = open(&dir, "src.strata");
    fill(&src, &[10, 20, 30], 6);
    let remote = Remote::in_memory();
    push(&src, &remote, None).unwrap();
    let deleted = retain(
        &remote,
        &RetainPolicy {
            keep_last: Some(1),
            keep_every: None,
            keep_tagged: true,
        },
    )
    .unwrap();
    assert_eq!(deleted, vec![10, 20]);
    let grace = Duration::from_secs(3600);
    // Within the grace period nothing goes.
    let early = gc_at(&remote, grace, SystemTime::now()).unwrap();
    assert_eq!(early.segments_deleted, 0);
    // Past it, what only deleted checkpoints named goes, and step 30 still reads whole.
    let late = gc_at(&remote, grace, SystemTime::now() + 2 * grace).unwrap();
    assert_eq!(late.manifests_deleted, 2);
    let dst = open(&dir, "dst.strata");
    pull(&remote, &dst, None).unwrap();
    assert_eq!(dst.checkpoints().unwrap(), vec![30]);
    assert_eq!(
        dst.get("a", 30).unwrap().data,
        src.get("a", 30).unwrap().data
    );
    assert!(gc(&remote, Duration::from_secs(60)).is_err());
}

#[test]
fn a_push_repairs_a_checkpoint_whose_segments_the_remote_lost() {
    let dir = tempfile::tempdir().unwrap();
    let src = open(&dir, "src.strata");
    fill(&src, &[10, 20], 11);
    let remote = Remote::in_memory();
    push(&src, &remote, None).unwrap();
    // What a gc racing an older push left: a manifest naming a segment that is gone.
    let m = of_checkpoint(&src.read().unwrap(), 20, Kind::Checkpoint).unwrap();
    let lost = *m.segments().keys().last().unwrap();
    remote
        .block_on(remote.delete(&remote.segment_path(lost)))
        .unwrap();
    let err = pull(&remote, &open(&dir, "broken.strata"), None).unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
    // Pushing again sends it again.
    let again = push(&src, &remote, None).unwrap();
    assert_eq!(again.segments_repaired, 1, "{again:?}");
    assert_eq!(again.steps_present, 2);
    let dst = open(&dir, "dst.strata");
    pull(&remote, &dst, None).unwrap();
    same_checkpoints(&src, &dst);
}

#[test]
fn a_push_waits_for_a_gc_that_may_not_have_listed_its_intent() {
    let dir = tempfile::tempdir().unwrap();
    let src = open(&dir, "src.strata");
    fill(&src, &[10], 12);
    let remote = Remote::in_memory();
    push(
        &Store::open(dir.path().join("empty.strata")).unwrap(),
        &remote,
        None,
    )
    .unwrap();
    // A gc holds a lease taken before the push starts.
    let lease = remote.path("leases/gc-0000000000000-test");
    remote
        .block_on(remote.put(&lease, Bytes::from_static(b"{}")))
        .unwrap();
    let pusher = {
        let remote = remote.clone();
        let path = dir.path().join("src.strata");
        drop(src);
        std::thread::spawn(move || {
            let src = Store::open_with(path, small_blocks()).unwrap();
            push(&src, &remote, None).unwrap()
        })
    };
    let listed = |folder: &str| remote.block_on(remote.list(folder)).unwrap().len();
    let t = std::time::Instant::now();
    while listed("intents") == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no intent was declared"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // While the lease is held the push sends nothing and creates no manifest.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(listed("segments"), 0, "segments sent while a gc may delete");
    assert_eq!(listed("checkpoints"), 0);
    remote.block_on(remote.delete(&lease)).unwrap();
    let report = pusher.join().unwrap();
    assert_eq!(report.steps_sent, vec![10]);
    assert_eq!(listed("intents"), 0, "the intent was not withdrawn");
    assert!(listed("segments") > 0);
}

#[test]
fn gc_keeps_what_an_intent_names() {
    let dir = tempfile::tempdir().unwrap();
    let src = open(&dir, "src.strata");
    fill(&src, &[10], 13);
    let remote = Remote::in_memory();
    let r = src.read().unwrap();
    let m = of_checkpoint(&r, 10, Kind::Part).unwrap();
    // A push in progress: its intent declared and its segments sent, no manifest yet.
    let report = remote
        .block_on(async {
            remote.check_format(true).await?;
            let intent = sync::Intent::declare(&remote, &m).await?;
            let mut report = PushReport::default();
            let send = m.segments().into_iter().collect();
            sync::upload_segments(&remote, &r, send, None, &mut report).await?;
            Ok::<_, RemoteError>((intent, report))
        })
        .unwrap();
    let (intent, sent) = report;
    // A gc for which every segment is old keeps them all: the intent names them.
    let hour = Duration::from_secs(3600);
    let g = gc_with_segments_aged(&remote, hour, 2 * hour).unwrap();
    assert_eq!(g.segments_deleted, 0, "{g:?}");
    assert_eq!(g.segments_kept, sent.segments_sent);
    // Withdrawn, with no manifest naming them, they go.
    remote.block_on(intent.withdraw(&remote)).unwrap();
    let g = gc_with_segments_aged(&remote, hour, 2 * hour).unwrap();
    assert_eq!(g.segments_deleted, sent.segments_sent, "{g:?}");
    assert_eq!(remote.block_on(remote.list("leases")).unwrap().len(), 0);
}

#[test]
fn damaged_objects_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let src = open(&dir, "src.strata");
    fill(&src, &[10], 7);
    let remote = Remote::in_memory();
    push(&src, &remote, None).unwrap();
    let m = remote
        .block_on(super::sync::fetch_manifest(
            &remote,
            &remote.manifest_path(10),
        ))
        .unwrap()
        .unwrap();
    let (address, len) = m.segments().into_iter().next().unwrap();
    let p = remote.segment_path(address);
    remote
        .block_on(remote.put(&p, Bytes::from(vec![0u8; len as usize])))
        .unwrap();
    let dst = open(&dir, "dst.strata");
    let err = pull(&remote, &dst, None).unwrap_err();
    assert!(matches!(err, RemoteError::BadSegment { .. }), "{err}");
    assert!(
        err.to_string().contains(&format!("{address:032x}")),
        "{err}"
    );
    // Nothing half-pulled.
    assert!(dst.checkpoints().unwrap().is_empty());
    assert_eq!(dst.stats().unwrap().segments, 0);

    let fmt = remote.path("strata-remote.json");
    remote
        .block_on(remote.put(
            &fmt,
            Bytes::from_static(b"{\"format\": \"strata-remote\", \"version\": 9}"),
        ))
        .unwrap();
    let err = push(&src, &remote, None).unwrap_err();
    assert!(
        matches!(err, RemoteError::NewerFormat { found: 9, .. }),
        "{err}"
    );

    let mp = remote.manifest_path(10);
    remote
        .block_on(remote.put(&mp, Bytes::from_static(b"STRATAMF\x01\x00garbage")))
        .unwrap();
    remote
        .block_on(remote.put(
            &fmt,
            Bytes::from_static(b"{\"format\": \"strata-remote\", \"version\": 1}"),
        ))
        .unwrap();
    let err = pull(&remote, &dst, None).unwrap_err();
    assert!(matches!(err, RemoteError::BadManifest { .. }), "{err}");
}

#[test]
fn bad_urls_are_refused() {
    for url in ["http://x/y", "s3://", "file://relative/path", "gs://b/p"] {
        let err = Remote::open(url).unwrap_err();
        assert!(matches!(err, RemoteError::BadUrl { .. }), "{url}: {err}");
    }
}

#[test]
fn tiered_versions_stay_local() {
    let dir = tempfile::tempdir().unwrap();
    let src = open(&dir, "src.strata");
    fill(&src, &[10], 8);
    src.set_policy("a", crate::TierPolicy::tiered(crate::Tier::Hot8))
        .unwrap();
    src.maintain(48 * 3_600_000).unwrap();
    let remote = Remote::in_memory();
    match push(&src, &remote, None) {
        Err(RemoteError::Tiered { tensor, step: 10 }) => assert_eq!(tensor, "a"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn committed_checkpoints_upload_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("remote").display());
    let store = Store::open_with(
        dir.path().join("auto.strata"),
        Options {
            upload: Some(UploadOptions::new(url.clone())),
            ..small_blocks()
        },
    )
    .unwrap();
    fill(&store, &[1, 2, 3], 9);
    store.flush().unwrap();
    let dst = open(&dir, "dst.strata");
    let got = pull(&Remote::open(&url).unwrap(), &dst, None).unwrap();
    assert_eq!(got.steps_received, vec![1, 2, 3]);
    same_checkpoints(&store, &dst);
}

fn arb_manifest() -> impl Strategy<Value = (Vec<u8>, u64)> {
    (1usize..4000, any::<u32>(), 1u64..5).prop_map(|(n, seed, steps)| {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open_with(dir.path().join("m.strata"), small_blocks()).unwrap();
        for step in 1..=steps {
            let w = weights(n, seed, step);
            s.save_checkpoint(
                step,
                &[(
                    "w",
                    TensorRef {
                        dtype: DType::F32,
                        shape: &[n as u64],
                        bytes: &w,
                    },
                )],
                "m",
            )
            .unwrap();
        }
        let m = of_checkpoint(&s.read().unwrap(), steps, Kind::Checkpoint).unwrap();
        (m.encode(), steps)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn manifests_round_trip_and_refuse_damage((bytes, step) in arb_manifest(), at in any::<usize>(), bit in 0u8..8) {
        let m = Manifest::decode(&bytes).unwrap();
        prop_assert_eq!(m.step, step);
        prop_assert_eq!(m.encode(), bytes.clone());
        let mut bad = bytes.clone();
        let i = at % bad.len();
        bad[i] ^= 1 << bit;
        prop_assert!(Manifest::decode(&bad).is_err());
        prop_assert!(Manifest::decode(&bytes[..i]).is_err());
    }
}

#[test]
fn small_tensors_travel_in_their_records() {
    // A step counter is stored inline (ADR 0029): no segment to send or fetch, and its bytes
    // arrive with the manifest, through pull and through a remote read.
    let dir = tempfile::tempdir().unwrap();
    let src = open(&dir, "src.strata");
    for s in [10u64, 20, 30] {
        let a = weights(1000, 5, s);
        let counter = (s as f32).to_le_bytes();
        src.save_checkpoint(
            s,
            &[
                (
                    "a",
                    TensorRef {
                        dtype: DType::F32,
                        shape: &[1000],
                        bytes: &a,
                    },
                ),
                (
                    "step",
                    TensorRef {
                        dtype: DType::F32,
                        shape: &[],
                        bytes: &counter,
                    },
                ),
            ],
            "{}",
        )
        .unwrap();
    }
    assert!(src.versions("step").unwrap()[0].encodings[0].inline);
    let folder = dir.path().join("remote");
    let url = format!("file://{}", folder.display());
    let remote = Remote::open(&url).unwrap();
    let sent = push(&src, &remote, None).unwrap();
    assert_eq!(sent.steps_sent, vec![10, 20, 30]);
    let dst = open(&dir, "dst.strata");
    pull(&remote, &dst, None).unwrap();
    let rs = Store::open_remote(&url, dir.path().join("cache")).unwrap();
    for s in [10u64, 20, 30] {
        let want = (s as f32).to_le_bytes().to_vec();
        assert_eq!(dst.get("step", s).unwrap().data, want);
        assert_eq!(rs.get("step", s).unwrap().data, want);
        assert_eq!(dst.get("a", s).unwrap().data, src.get("a", s).unwrap().data);
    }
    assert!(dst.versions("step").unwrap()[0].encodings[0].inline);
    assert!(dst.verify().unwrap().is_ok());
}
