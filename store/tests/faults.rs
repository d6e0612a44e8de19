//! Injected I/O faults and power losses under every store operation that writes (issue 14,
//! item 1).
//!
//! Each operation runs on a store held by [`disk::FaultDisk`] (see `faults/disk.rs`: an
//! in-memory disk with a durable image, a log of unsynced writes, per-kind call counters).
//! It runs once without a fault to count its backend calls by kind (reads, writes,
//! `set_len`s, `sync_data`s) and to learn the state after it, then once per call position with
//! a fault there:
//!
//! - a read fails with EIO; a write (by position modulo 3) fails with EIO, or writes half its
//!   data and fails with ENOSPC, or does that and the disk stays full (every later write
//!   fails with ENOSPC until the end of the run); a `set_len` fails with ENOSPC, once (even
//!   positions) or with the disk staying full (odd); a `sync_data` fails with EIO. The other
//!   faults fire once.
//! - after the operation returns, the run ends one of three ways, by position index modulo 3:
//!   the handle is closed cleanly and everything written survives; the power goes off and
//!   every write since the last completed sync is lost; the power goes off and a seeded random
//!   subset of them survives (some torn at 4 KiB).
//!
//! and once per `sync_data` position with the power going off at that sync (three variants:
//! none, all, or a seeded subset of the unsynced writes survive).
//!
//! After each run the operation must have returned (a panic fails the test: the run is under
//! `catch_unwind`; a hang fails it too: the run is in a thread with a deadline) an error or
//! success; a fresh store opened on the surviving bytes must hold exactly the state before or
//! after the operation (checkpoints with their metadata and tensor lists, tags, tier policy
//! rules, every version of every tensor with its dtype, shape, fidelity and bytes), after if
//! the operation succeeded; `verify` must pass; and a further `put` must succeed and read back.
//!
//! The default run tries a sample of the positions (every 5th, and the first and last of each
//! kind); `cargo test --release -p strata-store --test faults -- --ignored` tries all of them.
//! Each operation prints one summary line.

#![allow(clippy::panic)]

#[path = "faults/disk.rs"]
mod disk;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use disk::{Fault, FaultDisk, Kind, Loss, Rng};
use strata_store::{
    Budget, Clock, DType, Fidelity, Options, PutOptions, RetainPolicy, Store, StoreError,
    TensorRef, Tier, TierOptions, TierPolicy,
};

const MINUTE: u64 = 60_000;
/// How long one run (open, operation, crash, reopen, checks) may take before it counts as a
/// hang.
const DEADLINE: Duration = Duration::from_secs(120);
/// The name the stores stand under in messages.
const NAME: &str = "faults.strata";

/// Small blocks, windows and redb cache, so that even these small writes stream in several
/// windows and flush dirty pages before their commit (ADR 0014). Chains of at most three
/// segments, so that the tree of tensor "d" (see [`baseline`]) has anchors after a few saves.
fn opts() -> Options {
    let (clock, _hand) = Clock::manual(0);
    Options {
        max_chain: 3,
        block_bytes: 32 << 10,
        window_bytes: 64 << 10,
        db_cache_bytes: 256 << 10,
        cache_bytes: 1 << 20,
        tiering: TierOptions {
            budget: Budget::UNLIMITED,
            clock,
            ..TierOptions::default()
        },
        ..Options::default()
    }
}

fn open(disk: &FaultDisk) -> Result<Store, StoreError> {
    Store::open_with_backend(NAME, disk.clone(), opts())
}

/// Blocks large enough for a save to keep the newest a keyframe (ADR 0006: the flip needs a
/// keyframe segment of 64 KiB): tensor "d"'s versions are written with these, and later
/// versions keep the block size of the one before.
fn tree_opts() -> Options {
    Options {
        block_bytes: 128 << 10,
        ..opts()
    }
}

/// Deterministic pseudo-random f32 weights.
fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| ((rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1)
        .collect()
}

/// `base` plus a small update, as a training step makes.
fn drift(base: &[f32], seed: u64) -> Vec<f32> {
    base.iter()
        .zip(noise(base.len(), seed))
        .map(|(b, d)| b + d * 1e-3)
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32_ref<'a>(shape: &'a [u64], b: &'a [u8]) -> TensorRef<'a> {
    TensorRef {
        dtype: DType::F32,
        shape,
        bytes: b,
    }
}

/// Tensor "a" at checkpoint `i` (1-based), 32 Ki f32.
fn a_at(i: u64) -> Vec<f32> {
    (1..=i).fold(noise(32 << 10, 1), |w, s| drift(&w, 100 + s))
}

/// Tensor "b" at checkpoint `i`, 16 Ki f32.
fn b_at(i: u64) -> Vec<f32> {
    (1..=i).fold(noise(16 << 10, 2), |w, s| drift(&w, 200 + s))
}

/// Tensor "d" at version `i` (1-based), 32 Ki f32 whose same elements move the same way at
/// every step (a fine-tune with momentum): a save keeps the newest a keyframe and re-encodes
/// the versions under the previous one (ADR 0006).
fn d_at(i: u64) -> Vec<f32> {
    let mut w = noise(32 << 10, 3);
    for _ in 0..i {
        for (k, x) in w.iter_mut().enumerate() {
            if k.is_multiple_of(7) {
                *x += 1e-4 * (((k / 7) % 5) as f32 - 2.5);
            }
        }
    }
    w
}

/// Versions of "d" in the baseline.
const D_VERSIONS: u64 = 10;
const D_SHAPE: [u64; 2] = [256, 128];

const A_SHAPE: [u64; 2] = [256, 128];
const B_SHAPE: [u64; 2] = [128, 128];

/// The store every operation starts from, as bytes: checkpoints 1 to 4 of "a" and "b" (deltas
/// on each other), tag "best" on 2, a version outside any checkpoint ("solo"), a tensor whose
/// policy became tiered after it was written ("kv.w": conversions pending for `maintain`), a
/// frame stream ("agent.state"), free pages left by a deleted tensor (work for `compact`), and
/// a tensor outside checkpoints ("d", versions 1 to [`D_VERSIONS`]) whose newest is a keyframe
/// with the versions before it in a tree of reverse chains and anchors, which the next save of
/// "d" re-encodes ([`the_baseline_tree_has_anchors_a_save_re_encodes`]).
fn baseline() -> Vec<u8> {
    let disk = FaultDisk::new();
    {
        let store =
            Store::open_with_backend(NAME, disk.clone(), tree_opts()).expect("open a new store");
        for i in 1..=D_VERSIONS {
            store
                .put("d", i, &f32_ref(&D_SHAPE, &bytes(&d_at(i))))
                .expect("put d");
        }
    }
    let store = open(&disk).expect("open the store");
    for i in 1..=4u64 {
        let (a, b) = (bytes(&a_at(i)), bytes(&b_at(i)));
        store
            .save_checkpoint(
                i,
                &[("a", f32_ref(&A_SHAPE, &a)), ("b", f32_ref(&B_SHAPE, &b))],
                &format!("{{\"step\": {i}}}"),
            )
            .expect("save a checkpoint");
    }
    store.tag("best", 2).expect("tag");
    let solo = bytes(&noise(4096, 5));
    store.put("solo", 5, &f32_ref(&[4096], &solo)).expect("put");
    let kv1 = noise(16 << 10, 6);
    let kv2 = drift(&kv1, 7);
    store
        .put("kv.w", 1, &f32_ref(&B_SHAPE, &bytes(&kv1)))
        .expect("put kv 1");
    store
        .put("kv.w", 2, &f32_ref(&B_SHAPE, &bytes(&kv2)))
        .expect("put kv 2");
    store
        .set_policy("kv.*", TierPolicy::tiered(Tier::Hot8))
        .expect("policy");
    for t in 0..4u64 {
        store
            .append_frame("agent.state", t, &noise(256, 300 + t))
            .expect("frame");
    }
    let scratch = bytes(&noise(64 << 10, 8));
    store
        .put("scratch", 1, &f32_ref(&[64 << 10], &scratch))
        .expect("put scratch");
    store.delete("scratch", 1).expect("delete scratch");
    drop(store);
    disk.current()
}

/// A safetensors file of two tensors, "imp.x" and a new step of "a", with metadata.
fn safetensors_file() -> Vec<u8> {
    let x = bytes(&noise(128 * 64, 9));
    let a = bytes(&drift(&a_at(4), 10));
    let header = format!(
        "{{\"__metadata__\":{{\"source\":\"faults\"}},\
         \"a\":{{\"dtype\":\"F32\",\"shape\":[256,128],\"data_offsets\":[0,{}]}},\
         \"imp.x\":{{\"dtype\":\"F32\",\"shape\":[128,64],\"data_offsets\":[{},{}]}}}}",
        a.len(),
        a.len(),
        a.len() + x.len()
    );
    let mut header = header.into_bytes();
    while header.len() % 8 != 0 {
        header.push(b' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&header);
    out.extend_from_slice(&a);
    out.extend_from_slice(&x);
    out
}

type OpFn = fn(&mut Store) -> Result<(), StoreError>;

/// Every store operation that writes, each on the baseline.
fn operations() -> Vec<(&'static str, OpFn)> {
    vec![
        ("put", |s| {
            let a = bytes(&drift(&a_at(4), 11));
            s.put("a", 10, &f32_ref(&A_SHAPE, &a))
        }),
        ("save_checkpoint", |s| {
            let (a, b) = (bytes(&a_at(5)), bytes(&b_at(5)));
            s.save_checkpoint(
                5,
                &[("a", f32_ref(&A_SHAPE, &a)), ("b", f32_ref(&B_SHAPE, &b))],
                "{\"step\": 5}",
            )
        }),
        (
            "save_checkpoint of small tensors in pipelined groups",
            |s| {
                // Twelve tensors of 32 KiB: more than one group of the small tensors' pipeline
                // (about 4 blocks per thread), each group encoded while the one before is
                // inserted.
                let small: Vec<Vec<u8>> =
                    (0..12).map(|i| bytes(&noise(8 << 10, 400 + i))).collect();
                let names: Vec<String> = (0..12).map(|i| format!("small.{i:02}")).collect();
                let tensors: Vec<(&str, TensorRef<'_>)> = names
                    .iter()
                    .zip(&small)
                    .map(|(n, b)| (n.as_str(), f32_ref(&[8 << 10], b)))
                    .collect();
                s.save_checkpoint(5, &tensors, "{\"step\": 5}")
            },
        ),
        ("streaming writer", |s| {
            let (a, b) = (bytes(&a_at(5)), bytes(&b_at(5)));
            // 512 KiB: eight windows of its own.
            let c = bytes(&noise(128 << 10, 12));
            let mut w = s.begin_checkpoint(6, "{\"step\": 6}")?;
            w.put("a", &f32_ref(&A_SHAPE, &a))?;
            w.put("b", &f32_ref(&B_SHAPE, &b))?;
            w.put("c", &f32_ref(&[512, 256], &c))?;
            w.commit()
        }),
        ("put overwrite", |s| {
            // Replaces a version others are deltas on: they are re-based in the same commit.
            let a = bytes(&drift(&a_at(1), 13));
            s.put_with(
                "a",
                2,
                &f32_ref(&A_SHAPE, &a),
                &PutOptions { overwrite: true },
            )
        }),
        ("delete", |s| s.delete("a", 2)),
        (
            "put (the newest kept a keyframe, anchors re-encoded)",
            |s| {
                let d = bytes(&d_at(D_VERSIONS + 1));
                s.put("d", D_VERSIONS + 1, &f32_ref(&D_SHAPE, &d))
            },
        ),
        ("delete the newest keyframe of a tree", |s| {
            s.delete("d", D_VERSIONS)
        }),
        ("delete an anchor", |s| s.delete("d", 4)),
        ("retain", |s| {
            let policy = RetainPolicy {
                keep_last: Some(1),
                keep_every: None,
                keep_tagged: true,
            };
            s.retain(&policy).map(|_| ())
        }),
        ("compact", |s| s.compact().map(|_| ())),
        ("maintain", |s| s.maintain(MINUTE).map(|_| ())),
        ("append_frame", |s| {
            s.append_frame("agent.state", 10, &noise(256, 310))
                .map(|_| ())
        }),
        ("tag", |s| s.tag("release", 3)),
        ("untag", |s| s.untag("best")),
        ("set_policy", |s| {
            s.set_policy("b", TierPolicy::tiered(Tier::Hot8))
        }),
        ("import_safetensors_bytes", |s| {
            s.import_safetensors_bytes(&safetensors_file(), 7, "import.safetensors")
                .map(|_| ())
        }),
    ]
}

/// One version as a reader sees it: step, dtype, shape, fidelity, bytes.
type Version = (u64, DType, Vec<u64>, Fidelity, Vec<u8>);

/// What a store holds, as a reader sees it.
#[derive(Debug, PartialEq)]
struct State {
    checkpoints: Vec<(u64, String, Vec<String>)>,
    tags: Vec<(String, u64)>,
    policies: String,
    /// By tensor, its versions.
    tensors: BTreeMap<String, Vec<Version>>,
}

fn snapshot(store: &Store) -> Result<State, StoreError> {
    let mut checkpoints = Vec::new();
    for step in store.checkpoints()? {
        let info = store.checkpoint_info(step)?;
        checkpoints.push((step, info.metadata, info.tensors));
    }
    let mut tensors = BTreeMap::new();
    for name in store.tensors()? {
        let mut versions = Vec::new();
        for v in store.versions(&name)? {
            let t = store.get(&name, v.step)?;
            versions.push((v.step, t.dtype, t.shape, t.fidelity, t.data));
        }
        tensors.insert(name, versions);
    }
    Ok(State {
        checkpoints,
        tags: store.tags()?,
        policies: format!("{:?}", store.policies()),
        tensors,
    })
}

/// The first difference between two states, in words.
fn diff(a: &State, b: &State) -> String {
    if a.checkpoints != b.checkpoints {
        return format!("checkpoints {:?} vs {:?}", a.checkpoints, b.checkpoints);
    }
    if a.tags != b.tags {
        return format!("tags {:?} vs {:?}", a.tags, b.tags);
    }
    if a.policies != b.policies {
        return format!("policies {} vs {}", a.policies, b.policies);
    }
    let names = |s: &State| s.tensors.keys().cloned().collect::<Vec<_>>();
    if names(a) != names(b) {
        return format!("tensors {:?} vs {:?}", names(a), names(b));
    }
    for (name, va) in &a.tensors {
        let vb = &b.tensors[name];
        let steps = |v: &[Version]| v.iter().map(|x| x.0).collect::<Vec<_>>();
        if steps(va) != steps(vb) {
            return format!("{name}: steps {:?} vs {:?}", steps(va), steps(vb));
        }
        for (x, y) in va.iter().zip(vb) {
            if x != y {
                let first = x.4.iter().zip(&y.4).position(|(p, q)| p != q);
                return format!(
                    "{name} step {}: {:?} {:?} {:?} vs {:?} {:?} {:?}, first differing byte {first:?}",
                    x.0, x.1, x.2, x.3, y.1, y.2, y.3
                );
            }
        }
    }
    "no difference".to_string()
}

/// How a run ends after the operation returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The handle is dropped with the power on: everything written survives.
    Close,
    /// The power goes off (unless a fault already turned it off).
    Power(Loss),
}

/// Which state the reopened store held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    Before,
    After,
    /// The operation changes nothing a reader sees (compaction): both at once.
    Same,
}

/// What one run showed.
#[derive(Debug)]
struct Outcome {
    /// The operation's error, by variant, or `None` for success.
    error: Option<String>,
    /// After an error, the retry on the same handle: `Some(None)` if it succeeded, else its
    /// error's kind.
    retried: Option<Option<String>>,
    found: Found,
    counts: [u64; 4],
    fired: bool,
}

/// The variant of an error (and of its source for database errors), for the summary.
fn error_kind(e: &StoreError) -> String {
    match e {
        StoreError::Io { source, .. } => format!("Io({:?})", source.kind()),
        StoreError::Database { source, .. } => {
            let s = format!("{source:?}");
            format!("Database({})", s.split(['(', ' ']).next().unwrap_or(""))
        }
        StoreError::Compaction { source } => {
            let s = format!("{source:?}");
            format!("Compaction({})", s.split(['(', ' ']).next().unwrap_or(""))
        }
        other => {
            let s = format!("{other:?}");
            s.split(['(', ' ', '{']).next().unwrap_or("").to_string()
        }
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_string())
}

/// Shared, read-only inputs of the runs of one operation.
struct Ctx {
    base: Vec<u8>,
    before: State,
    after: State,
    op: OpFn,
}

/// One run: open the baseline, arm `fault`, run the operation, end as `end`, reopen on the
/// surviving bytes and check. `Err` describes a failure of the store (or of redb).
fn run(ctx: &Ctx, fault: Option<(Kind, u64, Fault)>, end: End) -> Result<Outcome, String> {
    let disk = FaultDisk::with_bytes(ctx.base.clone());
    let mut store = open(&disk).map_err(|e| format!("opening the baseline failed: {e}"))?;
    disk.arm(fault);
    let result = catch_unwind(AssertUnwindSafe(|| (ctx.op)(&mut store)))
        .map_err(|p| format!("the operation panicked: {}", panic_text(&*p)))?;
    let counts = disk.counts();
    let fired = disk.fired();
    // An application that gets an error retries on the same handle (unless the power is off):
    // the retry may fail (redb refuses a handle after an I/O error until it is reopened), but
    // if it succeeds, the handle and the disk must both hold the state after.
    let mut retried = None;
    if result.is_err() && !matches!(fired, Some((_, _, Fault::PowerLoss(_)))) {
        let again = catch_unwind(AssertUnwindSafe(|| (ctx.op)(&mut store)))
            .map_err(|p| format!("retrying on the same handle panicked: {}", panic_text(&*p)))?;
        match catch_unwind(AssertUnwindSafe(|| snapshot(&store))) {
            Err(p) => {
                return Err(format!(
                    "reading the same handle panicked: {}",
                    panic_text(&*p)
                ))
            }
            Ok(Ok(state)) => {
                let ok = if again.is_ok() {
                    state == ctx.after
                } else {
                    state == ctx.before || state == ctx.after
                };
                if !ok {
                    return Err(format!(
                        "after the error (and a retry that {}), the same handle reads neither \
                         state: against before: {}; against after: {}",
                        if again.is_ok() { "succeeded" } else { "failed" },
                        diff(&state, &ctx.before),
                        diff(&state, &ctx.after)
                    ));
                }
            }
            Ok(Err(e)) if again.is_ok() => {
                return Err(format!(
                    "the retry succeeded but the handle cannot read: {e}"
                ))
            }
            Ok(Err(_)) => {}
        }
        retried = Some(match &again {
            Ok(()) => None,
            Err(e) => Some(error_kind(e)),
        });
    }
    let fired = fired.is_some();
    let surviving = match end {
        End::Close => {
            catch_unwind(AssertUnwindSafe(|| drop(store)))
                .map_err(|p| format!("closing the store panicked: {}", panic_text(&*p)))?;
            disk.current()
        }
        End::Power(loss) => {
            let b = disk.power_off(loss);
            catch_unwind(AssertUnwindSafe(|| drop(store))).map_err(|p| {
                format!(
                    "dropping the store after a power loss panicked: {}",
                    panic_text(&*p)
                )
            })?;
            b
        }
    };
    let error = result
        .as_ref()
        .err()
        .map(|e| format!("{}: {e}", error_kind(e)));
    let must_be_after = result.is_ok() || retried == Some(None);
    let checked = check_reopened(ctx, surviving, must_be_after);
    let found = checked.map_err(|e| match &error {
        Some(err) => format!("{e} (the operation returned {err})"),
        None => format!("{e} (the operation succeeded)"),
    })?;
    Ok(Outcome {
        error,
        retried,
        found,
        counts,
        fired,
    })
}

/// Opens a store on `surviving` and checks it: the state before or after the operation (after
/// if `must_be_after`), `verify`, a further put that reads back.
fn check_reopened(ctx: &Ctx, surviving: Vec<u8>, must_be_after: bool) -> Result<Found, String> {
    catch_unwind(AssertUnwindSafe(|| -> Result<Found, String> {
        let disk = FaultDisk::with_bytes(surviving);
        let store = open(&disk).map_err(|e| format!("reopening failed: {e}"))?;
        let state = snapshot(&store).map_err(|e| format!("reading the reopened store: {e}"))?;
        let found = match (state == ctx.before, state == ctx.after) {
            (true, true) => Found::Same,
            (true, false) if must_be_after => {
                return Err(
                    "the operation (or its retry) succeeded but the reopened store holds the \
                     state before it"
                        .into(),
                )
            }
            (true, false) => Found::Before,
            (false, true) => Found::After,
            (false, false) => {
                return Err(format!(
                    "the reopened store holds neither state: against before: {}; against after: {}",
                    diff(&state, &ctx.before),
                    diff(&state, &ctx.after)
                ))
            }
        };
        let report = store.verify().map_err(|e| format!("verify failed: {e}"))?;
        if !report.is_ok() {
            return Err(format!("verify found issues: {report:?}"));
        }
        let next = bytes(&noise(1024, 99));
        store
            .put("faults.next", 1 << 40, &f32_ref(&[1024], &next))
            .map_err(|e| format!("a further put failed: {e}"))?;
        let back = store
            .get("faults.next", 1 << 40)
            .map_err(|e| format!("reading the further put failed: {e}"))?;
        if back.data != next {
            return Err("the further put read back different bytes".into());
        }
        Ok(found)
    }))
    .unwrap_or_else(|p| {
        Err(format!(
            "checking the reopened store panicked: {}",
            panic_text(&*p)
        ))
    })
}

/// [`run`] in a thread with a deadline: a hang is a failure, not a stuck test.
fn run_guarded(
    ctx: &std::sync::Arc<Ctx>,
    fault: Option<(Kind, u64, Fault)>,
    end: End,
) -> Result<Outcome, String> {
    let c = ctx.clone();
    guarded(move || run(&c, fault, end))
}

/// Runs `f` in a thread with a deadline and under `catch_unwind`.
fn guarded<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = catch_unwind(AssertUnwindSafe(f))
            .unwrap_or_else(|p| Err(format!("the run panicked: {}", panic_text(&*p))));
        let _ = tx.send(r);
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {DEADLINE:?}: a hang")),
    }
}

/// Faults and power losses while a store is reopened after a power loss, when redb repairs
/// the file: the op runs with the power going off at its last sync (all, or none, of its
/// unsynced writes surviving); the open on those bytes is counted, then run with a fault at
/// each of its positions (sampled unless `full`), the power going off after it; the store
/// opened on what survives that must hold the same state as a fault-free open of the first
/// crash's bytes. Returns the failures, a summary and the number of faulty opens tried.
fn recovery_matrix(
    name: &str,
    ctx: &std::sync::Arc<Ctx>,
    op_syncs: u64,
    full: bool,
) -> (Vec<String>, String, u64) {
    let mut failures = Vec::new();
    let mut summary = Vec::new();
    let mut recovery_tried = 0u64;
    for loss in [Loss::KeepAll, Loss::DropAll] {
        let disk = FaultDisk::with_bytes(ctx.base.clone());
        let mut store = open(&disk).expect("open the baseline");
        disk.arm(Some((Kind::Sync, op_syncs - 1, Fault::PowerLoss(loss))));
        let _ = (ctx.op)(&mut store);
        let crashed = disk.power_off(Loss::DropAll);
        drop(store);
        let disk = FaultDisk::with_bytes(crashed.clone());
        disk.arm(None);
        let first = match open(&disk) {
            Ok(s) => s,
            Err(e) => {
                failures.push(format!(
                    "{name}: reopening after a power loss ({loss:?}) failed: {e}"
                ));
                continue;
            }
        };
        let counts = disk.counts();
        drop(first);
        let expected = match check_reopened(ctx, crashed.clone(), false) {
            Ok(f) => f,
            Err(e) => {
                failures.push(format!("{name}: after a power loss ({loss:?}): {e}"));
                continue;
            }
        };
        let mut tried = 0u64;
        let mut index = 0u64;
        for kind in Kind::ALL {
            let n = counts[kind as usize];
            for i in 0..n {
                index += 1;
                if !(full || i == 0 || i + 1 == n || index.is_multiple_of(5)) {
                    continue;
                }
                tried += 1;
                let fault = fault_for(kind, i);
                let end = if index.is_multiple_of(2) {
                    Loss::DropAll
                } else {
                    Loss::KeepSome(index)
                };
                let (c, bytes) = (ctx.clone(), crashed.clone());
                let r = guarded(move || {
                    let disk = FaultDisk::with_bytes(bytes);
                    disk.arm(Some((kind, i, fault)));
                    let opened = catch_unwind(AssertUnwindSafe(|| open(&disk)))
                        .map_err(|p| format!("the open panicked: {}", panic_text(&*p)))?;
                    let survived = disk.power_off(end);
                    drop(opened);
                    check_reopened(&c, survived, false)
                });
                match r {
                    Ok(found) if found == expected => {}
                    Ok(found) => failures.push(format!(
                        "{name}: power loss ({loss:?}), then {fault:?} at {kind:?} #{i} of the \
                         recovering open, power off ({end:?}): the store holds {found:?}, a \
                         fault-free recovery {expected:?}"
                    )),
                    Err(e) => failures.push(format!(
                        "{name}: power loss ({loss:?}), then {fault:?} at {kind:?} #{i} of the \
                         recovering open, power off ({end:?}): {e}"
                    )),
                }
            }
        }
        recovery_tried += tried;
        summary.push(format!(
            "after {loss:?}: open calls read {} write {} set_len {} sync {}, tried {tried}, state {expected:?}",
            counts[0], counts[1], counts[2], counts[3]
        ));
    }
    (failures, summary.join("; "), recovery_tried)
}

/// The fault a call of `kind` at position `n` gets.
fn fault_for(kind: Kind, n: u64) -> Fault {
    match kind {
        Kind::Read | Kind::Sync => Fault::Eio,
        Kind::Write => [Fault::Eio, Fault::ShortEnospc, Fault::DiskFull][(n % 3) as usize],
        Kind::SetLen if n.is_multiple_of(2) => Fault::Enospc,
        Kind::SetLen => Fault::DiskFull,
    }
}

/// Tallies of one operation's runs.
#[derive(Default)]
struct Tally {
    runs: u64,
    errors: u64,
    successes: u64,
    before: u64,
    after: u64,
    same: u64,
    retry_ok: u64,
    retry_err: u64,
    retry_kinds: BTreeMap<String, u64>,
    error_kinds: BTreeMap<String, u64>,
    failures: Vec<String>,
}

impl Tally {
    fn add(&mut self, what: &str, r: Result<Outcome, String>) {
        self.runs += 1;
        match r {
            Err(e) => self.failures.push(format!("{what}: {e}")),
            Ok(o) => {
                if !o.fired {
                    self.failures.push(format!(
                        "{what}: the fault did not fire (calls {:?})",
                        o.counts
                    ));
                }
                match &o.error {
                    Some(e) => {
                        self.errors += 1;
                        let kind = e.split(':').next().unwrap_or("").to_string();
                        *self.error_kinds.entry(kind).or_default() += 1;
                    }
                    None => self.successes += 1,
                }
                match o.retried {
                    Some(None) => self.retry_ok += 1,
                    Some(Some(kind)) => {
                        self.retry_err += 1;
                        *self.retry_kinds.entry(kind).or_default() += 1;
                    }
                    None => {}
                }
                match o.found {
                    Found::Before => self.before += 1,
                    Found::After => self.after += 1,
                    Found::Same => self.same += 1,
                }
            }
        }
    }
}

/// Runs the matrix of one operation: every position when `full`, else a sample. Returns the
/// failures.
fn matrix(name: &str, op: OpFn, base: &[u8], before: &State, full: bool) -> Vec<String> {
    let started = Instant::now();
    // The counting run, which also gives the state after.
    let disk = FaultDisk::with_bytes(base.to_vec());
    let mut store = open(&disk).expect("open the baseline");
    disk.arm(None);
    op(&mut store).unwrap_or_else(|e| panic!("{name} without a fault failed: {e}"));
    let counts = disk.counts();
    disk.arm(None);
    drop(store);
    let close_counts = disk.counts();
    let after = {
        let store = open(&FaultDisk::with_bytes(disk.current())).expect("reopen after");
        snapshot(&store).expect("state after")
    };
    if name != "compact" {
        assert!(after != *before, "{name} without a fault changed nothing");
    }
    assert!(
        counts[1] > 0 && counts[3] > 0,
        "{name}: no write or sync counted: {counts:?}"
    );
    let ctx = std::sync::Arc::new(Ctx {
        base: base.to_vec(),
        before: snapshot_of(base),
        after,
        op,
    });
    assert!(ctx.before == *before, "the baseline reads back differently");
    let mut positions = Vec::new();
    for kind in Kind::ALL {
        let n = counts[kind as usize];
        for i in 0..n {
            positions.push((kind, i, i == 0 || i + 1 == n));
        }
    }
    let mut tally = Tally::default();
    let mut tried = 0u64;
    for (index, &(kind, i, edge)) in positions.iter().enumerate() {
        if !(full || edge || index.is_multiple_of(5)) {
            continue;
        }
        tried += 1;
        let index = index as u64;
        let end = match index % 3 {
            0 => End::Close,
            1 => End::Power(Loss::DropAll),
            _ => End::Power(Loss::KeepSome(index)),
        };
        let fault = fault_for(kind, i);
        let what = format!("{name}: {fault:?} at {kind:?} #{i}, then {end:?}");
        tally.add(&what, run_guarded(&ctx, Some((kind, i, fault)), end));
    }
    // Power losses at each sync.
    let syncs = counts[Kind::Sync as usize];
    let mut losses = 0u64;
    for i in 0..syncs {
        if !(full || i == 0 || i + 1 == syncs || i.is_multiple_of(5)) {
            continue;
        }
        for loss in [Loss::DropAll, Loss::KeepAll, Loss::KeepSome(i * 7919 + 1)] {
            losses += 1;
            let fault = Fault::PowerLoss(loss);
            let what = format!("{name}: power loss at Sync #{i} ({loss:?})");
            tally.add(
                &what,
                run_guarded(
                    &ctx,
                    Some((Kind::Sync, i, fault)),
                    End::Power(Loss::DropAll),
                ),
            );
        }
    }
    // Faults while the handle closes after the operation succeeded: the commit was synced, so
    // the store must hold the state after whatever the close does.
    let mut close_runs = 0u64;
    for kind in Kind::ALL {
        let n = close_counts[kind as usize];
        for i in 0..n {
            if !(full || i == 0 || i + 1 == n || i.is_multiple_of(5)) {
                continue;
            }
            close_runs += 1;
            let fault = fault_for(kind, i);
            let loss = if i.is_multiple_of(2) {
                Loss::DropAll
            } else {
                Loss::KeepSome(i + 17)
            };
            let c = ctx.clone();
            let r = guarded(move || {
                let disk = FaultDisk::with_bytes(c.base.clone());
                let mut store = open(&disk).map_err(|e| format!("open: {e}"))?;
                (c.op)(&mut store).map_err(|e| format!("the operation failed: {e}"))?;
                disk.arm(Some((kind, i, fault)));
                catch_unwind(AssertUnwindSafe(|| drop(store)))
                    .map_err(|p| format!("the close panicked: {}", panic_text(&*p)))?;
                check_reopened(&c, disk.power_off(loss), true)
            });
            if let Err(e) = r {
                tally.failures.push(format!(
                    "{name}: {fault:?} at {kind:?} #{i} of the close after it succeeded, then a \
                     power loss ({loss:?}): {e}"
                ));
            }
        }
    }
    let (recovery_failures, recovery, recovery_tried) = recovery_matrix(name, &ctx, syncs, full);
    tally.failures.extend(recovery_failures);
    if tally.errors == 0 {
        tally.failures.push(format!(
            "{name}: no run returned an error: the faults had no effect"
        ));
    }
    let list = |m: &BTreeMap<String, u64>| {
        m.iter()
            .map(|(k, n)| format!("{k} x{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "faults: {name}: calls read {} write {} set_len {} sync {}; positions tried {tried} of {}, \
         power losses {losses}; outcomes: {} error, {} ok; retries on the same handle: {} ok, {} error; reopened: {} before, {} after, {} same; \
         failures {}; errors: {}; retry errors: {}; {:.1} s\n\
         faults: {name}: close: calls read {} write {} set_len {} sync {}, tried {close_runs}\n\
         faults: {name}: recovery: {recovery}",
        counts[0],
        counts[1],
        counts[2],
        counts[3],
        positions.len(),
        tally.errors,
        tally.successes,
        tally.retry_ok,
        tally.retry_err,
        tally.before,
        tally.after,
        tally.same,
        tally.failures.len(),
        list(&tally.error_kinds),
        list(&tally.retry_kinds),
        started.elapsed().as_secs_f64(),
        close_counts[0],
        close_counts[1],
        close_counts[2],
        close_counts[3],
    );
    // For benches/readme_tables.py.
    let json = serde_json::json!({
        "operation": name,
        "full": full,
        "calls": {"read": counts[0], "write": counts[1], "set_len": counts[2], "sync": counts[3]},
        "positions": positions.len(),
        "tried": tried,
        "power_losses": losses,
        "errors": tally.errors,
        "successes": tally.successes,
        "retries_ok": tally.retry_ok,
        "before": tally.before,
        "after": tally.after,
        "same": tally.same,
        "recovery_opens": recovery_tried,
        "close_runs": close_runs,
        "failures": tally.failures.len(),
        "seconds": started.elapsed().as_secs_f64(),
    });
    println!("faults-json: {json}");
    tally.failures
}

fn snapshot_of(b: &[u8]) -> State {
    let store = open(&FaultDisk::with_bytes(b.to_vec())).expect("open");
    snapshot(&store).expect("snapshot")
}

fn all_operations(full: bool) {
    let started = Instant::now();
    let base = baseline();
    let before = snapshot_of(&base);
    let mut failures = Vec::new();
    for (name, op) in operations() {
        failures.extend(matrix(name, op, &base, &before, full));
    }
    println!(
        "faults: {} operations, {} failures, {:.1} s",
        operations().len(),
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    if !failures.is_empty() {
        let shown: Vec<&String> = failures.iter().take(40).collect();
        panic!(
            "{} failed runs (first {}):\n{}",
            failures.len(),
            shown.len(),
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// The baseline's tree of "d" is what the operations on it are meant to hit: its newest is a
/// keyframe, at least two anchors other than the previous newest hang on it, and the next save
/// re-encodes them against the new keyframe and moves a chain's head.
#[test]
fn the_baseline_tree_has_anchors_a_save_re_encodes() {
    let disk = FaultDisk::with_bytes(baseline());
    let store = open(&disk).expect("open");
    let bases = |store: &Store| -> Vec<(u64, Option<u64>)> {
        let versions = store.versions("d").expect("versions");
        versions
            .iter()
            .map(|v| (v.step, v.encodings[0].base))
            .collect()
    };
    let before = bases(&store);
    let on = |b: &[(u64, Option<u64>)], k: u64| b.iter().filter(|v| v.1 == Some(k)).count();
    assert_eq!(before.last(), Some(&(D_VERSIONS, None)), "{before:?}");
    assert!(on(&before, D_VERSIONS) >= 3, "{before:?}");
    let d = bytes(&d_at(D_VERSIONS + 1));
    store
        .put("d", D_VERSIONS + 1, &f32_ref(&D_SHAPE, &d))
        .expect("put");
    let after = bases(&store);
    assert_eq!(after.last(), Some(&(D_VERSIONS + 1, None)), "{after:?}");
    // The previous newest and the anchors moved onto the new keyframe, and some version's
    // base changed to another than the new keyframe (a head moved under an anchor).
    let base_after = |k: u64| after.iter().find(|v| v.0 == k).and_then(|v| v.1);
    assert_eq!(base_after(D_VERSIONS), Some(D_VERSIONS + 1), "{after:?}");
    let re_encoded = before
        .iter()
        .filter(|v| v.1 == Some(D_VERSIONS) && base_after(v.0) == Some(D_VERSIONS + 1))
        .count();
    assert!(re_encoded >= 2, "{before:?} -> {after:?}");
    let moved = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| b.1 != a.1 && a.1 != Some(D_VERSIONS + 1))
        .count();
    assert!(moved >= 1, "no head moved: {before:?} -> {after:?}");
    for i in 1..=D_VERSIONS + 1 {
        assert_eq!(
            store.get("d", i).expect("get").data,
            bytes(&d_at(i)),
            "d {i}"
        );
    }
}

/// A sample of the positions of every operation (CI).
#[test]
fn every_write_survives_sampled_faults_and_power_losses() {
    all_operations(false);
}

/// Every position of every operation.
#[test]
#[ignore = "the full matrix: run with --release -- --ignored"]
fn every_write_survives_faults_and_power_losses_at_every_position() {
    all_operations(true);
}

/// The disk itself: a write not synced is lost at a power loss, a synced one is not, and a
/// fault fires once at its position.
#[test]
fn the_fault_disk_drops_unsynced_writes_and_fires_once() {
    use strata_store::redb::StorageBackend;
    let disk = FaultDisk::new();
    disk.write(0, b"durable").expect("write");
    disk.sync_data().expect("sync");
    disk.write(0, b"lost!!!").expect("write");
    disk.arm(Some((Kind::Write, 1, Fault::ShortEnospc)));
    disk.write(7, b"ok").expect("write 0");
    let e = disk.write(9, b"half").expect_err("write 1 fails");
    assert_eq!(e.raw_os_error(), Some(28));
    disk.write(11, b"again").expect("write 2 succeeds");
    assert_eq!(disk.counts(), [0, 3, 0, 0]);
    assert!(disk.fired().is_some());
    let mut out = [0u8; 11];
    disk.read(0, &mut out).expect("read");
    assert_eq!(&out, b"lost!!!okha");
    assert_eq!(disk.current().len(), 16);
    assert_eq!(disk.power_off(Loss::DropAll), b"durable".to_vec());
    assert!(disk.write(0, b"x").is_err(), "the power is off");

    let full = FaultDisk::new();
    full.arm(Some((Kind::Write, 0, Fault::DiskFull)));
    let e = full.write(0, b"abcd").expect_err("the disk fills");
    assert_eq!(e.raw_os_error(), Some(28));
    assert!(full.write(2, b"x").is_err(), "the disk stays full");
    assert!(full.set_len(100).is_err(), "growing fails on a full disk");
    full.set_len(1).expect("shrinking works on a full disk");
    assert_eq!(full.current(), b"a".to_vec());
}
