//! kill-bench: a writer process killed with SIGKILL a thousand times (issue 14, item 3).
//!
//! ```text
//! cargo run --release --example kill-bench -- --kills N [--seed S] [--json] [--dir DIR]
//! ```
//!
//! Each round starts a writer (this example run again with the hidden `--child OP`) on one
//! store, waits until it prints `begin OP`, sleeps a random delay from 0 to 1.2 times the
//! operation's measured duration, and kills it (SIGKILL). The writer repeats its operation in
//! a loop, so a kill always lands in the writer's work (most in the operation named, some in
//! the small setup between two of them). The operations, spread evenly over the rounds in a
//! seeded random order:
//!
//! - **import**: `Store::import_safetensors` of a committed file of `testdata/series` (the
//!   16 files of dev_ft and dev_pre, f32 and bf16; step S takes file S mod 16);
//! - **save**: `Store::save_checkpoint` of the same file's tensors from memory, with
//!   metadata, and a tag on every fifth step;
//! - **retain**: a save, then `Store::retain` (keep the last 3 and the tagged ones), which
//!   deletes in one transaction and then compacts the file;
//! - **maintain**: puts of four 256 KiB f32 tensors `kv.*` under a tiered policy (8 bits
//!   and an exact residual), reads, then `Store::maintain` at a clock that jumps days ahead,
//!   so blocks move down tiers;
//! - **compact**: a put of a `kv.*` tensor, deletes of older ones, then `Store::compact`.
//!
//! The writer prints a line after each operation returns (`ok import S`, `ok retain
//! S1,S2`, `ok put kv.1 S`, ...). After each kill the parent checks, from those lines, that:
//!
//! 1. the store opens and `verify` reports no issue;
//! 2. every checkpoint whose commit returned is there, and no other, except the one being
//!    written when the kill came; every checkpoint there holds all the tensors of its
//!    source file, bit for bit, and its metadata (a checkpoint is all there or absent);
//! 3. the steps removed by a retain that returned are gone (checkpoint and versions), and a
//!    retain cut short removed all its steps or none;
//! 4. no tensor of a checkpoint has a version outside the checkpoints (a torn save is
//!    invisible); every tag points at a checkpoint, and those whose call returned are there;
//! 5. every `kv.*` version whose put returned (and whose delete did not) is there and reads
//!    back, bit for bit with `get_exact`, and no version was put that the writer did not
//!    begin.
//!
//! A new store is started every 50 rounds. It prints kills per operation, checks passed and
//! failures (with the seed and round, to replay with `--seed S --kills N`); `--json` prints one
//! JSON document instead. It exits with 1 on any failure.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use strata::store::safetensors::SafeTensors;
use strata::store::{
    dtype_from_safetensors, metadata_to_text, DType, OpenError, Residual, RetainPolicy, Store,
    StoreError, TensorRef, Tier, TierPolicy,
};
use strata_testkit::machine::machine;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Rounds per store: a fresh store after this many kills.
const ROUNDS_PER_STORE: usize = 50;
/// Retain keeps this many of the latest checkpoints.
const KEEP_LAST: usize = 3;
/// Elements of each `kv.*` tensor (f32): 256 KiB.
const KV_ELEMS: usize = 64 * 1024;
/// `kv.*` tensors put per maintain iteration.
const KV_TENSORS: usize = 4;
/// One day on the tier clock, in milliseconds.
const DAY_MS: u64 = 86_400_000;

/// The operations a writer is killed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    Import,
    Save,
    Retain,
    Maintain,
    Compact,
}

impl Op {
    const ALL: [Op; 5] = [Op::Import, Op::Save, Op::Retain, Op::Maintain, Op::Compact];

    fn name(self) -> &'static str {
        match self {
            Op::Import => "import",
            Op::Save => "save",
            Op::Retain => "retain",
            Op::Maintain => "maintain",
            Op::Compact => "compact",
        }
    }

    fn parse(s: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|o| o.name() == s)
    }
}

/// xorshift64*: the kill delays and the order of operations.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

// ---------------------------------------------------------------------------------------
// Source data

/// One tensor of a source file.
struct SourceTensor {
    name: String,
    dtype: DType,
    shape: Vec<u64>,
    data: Vec<u8>,
}

/// One committed safetensors file.
struct SourceFile {
    path: PathBuf,
    metadata: String,
    tensors: Vec<SourceTensor>,
}

/// The committed series, `testdata/series` (16 files).
fn source_files() -> Res<Vec<SourceFile>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/series");
    let mut paths = Vec::new();
    for dir in ["dev_ft", "dev_ft/bf16", "dev_pre", "dev_pre/bf16"] {
        let mut ps: Vec<PathBuf> = std::fs::read_dir(root.join(dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        ps.sort();
        paths.extend(ps);
    }
    if paths.is_empty() {
        return Err(format!("no safetensors files under {}", root.display()).into());
    }
    let mut files = Vec::new();
    for path in paths {
        let bytes = std::fs::read(&path)?;
        let st = SafeTensors::deserialize(&bytes)?;
        let (_, meta) = SafeTensors::read_metadata(&bytes)?;
        let mut tensors = Vec::new();
        for (name, view) in st.tensors() {
            let dtype = dtype_from_safetensors(view.dtype())
                .ok_or_else(|| format!("{}: {name}: unsupported dtype", path.display()))?;
            tensors.push(SourceTensor {
                name,
                dtype,
                shape: view.shape().iter().map(|&d| d as u64).collect(),
                data: view.data().to_vec(),
            });
        }
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        files.push(SourceFile {
            path,
            metadata: metadata_to_text(meta.metadata().as_ref()),
            tensors,
        });
    }
    Ok(files)
}

/// The metadata `save` gives the checkpoint at `step`.
fn save_metadata(step: u64) -> String {
    format!("{{\"step\": {step}, \"by\": \"kill-bench\"}}")
}

/// The bytes of `kv.<i>` at `step`: f32 values, deterministic in (name, step).
fn kv_data(name: &str, step: u64) -> Vec<u8> {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    let mut rng = Rng::new(h ^ step.wrapping_mul(0x9E37));
    let mut out = Vec::with_capacity(KV_ELEMS * 4);
    for i in 0..KV_ELEMS {
        let base = ((i % 509) as f32 - 254.0) * 1e-3;
        let v = base + (rng.unit() as f32 - 0.5) * 1e-4;
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

fn kv_policy() -> TierPolicy {
    TierPolicy::tiered(Tier::Hot8).with_residual(Residual::Exact)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------
// The writer (child process)

/// Prints one protocol line and flushes it, so that the parent has it before a kill.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // The parent gone, nothing is left to tell: the writer is being killed.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Opens the store, waiting while a killed writer's lock is still held.
fn open_retrying(path: &Path) -> Result<Store, StoreError> {
    let start = Instant::now();
    loop {
        match Store::open(path) {
            Err(StoreError::Open(OpenError::InUse { .. }))
                if start.elapsed() < Duration::from_secs(10) =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

fn next_checkpoint_step(store: &Store) -> Res<u64> {
    Ok(store.checkpoints()?.last().map_or(1, |s| s + 1))
}

fn next_kv_step(store: &Store) -> Res<u64> {
    let mut next = 1;
    for name in store.tensors()? {
        if name.starts_with("kv.") {
            if let Some(v) = store.versions(&name)?.last() {
                next = next.max(v.step + 1);
            }
        }
    }
    Ok(next)
}

/// One save of the checkpoint at `step` from file `step mod 16`'s tensors, printed.
fn child_save(store: &Store, files: &[SourceFile], step: u64) -> Res<()> {
    let f = &files[(step % files.len() as u64) as usize];
    let refs: Vec<(&str, TensorRef<'_>)> = f
        .tensors
        .iter()
        .map(|t| {
            (
                t.name.as_str(),
                TensorRef {
                    dtype: t.dtype,
                    shape: &t.shape,
                    bytes: &t.data,
                },
            )
        })
        .collect();
    say(&format!("begin save {step}"));
    let t = Instant::now();
    store.save_checkpoint(step, &refs, &save_metadata(step))?;
    say(&format!("ok save {step} {}", t.elapsed().as_micros()));
    if step.is_multiple_of(5) {
        let tag = format!("t{step}");
        say(&format!("begin tag {tag} {step}"));
        store.tag(&tag, step)?;
        say(&format!("ok tag {tag} {step}"));
    }
    Ok(())
}

/// A put of `kv.<i>` at `step`, printed.
fn child_put(store: &Store, name: &str, step: u64) -> Res<()> {
    let data = kv_data(name, step);
    say(&format!("begin put {name} {step}"));
    store.put(
        name,
        step,
        &TensorRef {
            dtype: DType::F32,
            shape: &[KV_ELEMS as u64],
            bytes: &data,
        },
    )?;
    say(&format!("ok put {name} {step}"));
    Ok(())
}

/// Deletes every `kv.*` version but the latest `keep` of each, printed.
fn child_trim_kv(store: &Store, keep: usize) -> Res<()> {
    for name in store.tensors()? {
        if !name.starts_with("kv.") {
            continue;
        }
        let versions = store.versions(&name)?;
        let n = versions.len().saturating_sub(keep);
        for v in &versions[..n] {
            say(&format!("begin delete {name} {}", v.step));
            store.delete(&name, v.step)?;
            say(&format!("ok delete {name} {}", v.step));
        }
    }
    Ok(())
}

/// The writer: repeats `op` until killed. `clock` is the tier clock's offset (ms).
fn child(op: Op, path: &Path, clock: u64) -> Res<()> {
    let files = source_files()?;
    let mut store = open_retrying(path)?;
    store.set_policy("kv.*", kv_policy())?;
    say("ready");
    let mut iter = 0u64;
    loop {
        iter += 1;
        match op {
            Op::Import => {
                let step = next_checkpoint_step(&store)?;
                let f = &files[(step % files.len() as u64) as usize];
                say(&format!("begin import {step}"));
                let t = Instant::now();
                store.import_safetensors(&f.path, step)?;
                say(&format!("ok import {step} {}", t.elapsed().as_micros()));
            }
            Op::Save => {
                let step = next_checkpoint_step(&store)?;
                child_save(&store, &files, step)?;
            }
            Op::Retain => {
                let step = next_checkpoint_step(&store)?;
                child_save(&store, &files, step)?;
                let policy = RetainPolicy {
                    keep_last: Some(KEEP_LAST),
                    keep_every: None,
                    keep_tagged: true,
                };
                let steps = store.checkpoints()?;
                let tagged: BTreeSet<u64> = store.tags()?.into_iter().map(|(_, s)| s).collect();
                let kept = policy.kept(&steps, &tagged);
                let removed: Vec<String> = steps
                    .iter()
                    .filter(|s| !kept.contains(s))
                    .map(|s| s.to_string())
                    .collect();
                let list = if removed.is_empty() {
                    "-".to_string()
                } else {
                    removed.join(",")
                };
                say(&format!("begin retain {list}"));
                let t = Instant::now();
                store.retain(&policy)?;
                say(&format!("ok retain {list} {}", t.elapsed().as_micros()));
            }
            Op::Maintain => {
                let step = next_kv_step(&store)?;
                for i in 0..KV_TENSORS {
                    let name = format!("kv.{i}");
                    child_put(&store, &name, step)?;
                }
                // Reads of one tensor, so that blocks differ in heat.
                let _ = store.get("kv.0", step)?;
                child_trim_kv(&store, 3)?;
                say("begin maintain");
                let t = Instant::now();
                let report = store.maintain(now_ms() + clock + iter * DAY_MS / 4)?;
                say(&format!(
                    "ok maintain {} {}",
                    t.elapsed().as_micros(),
                    report.moves
                ));
            }
            Op::Compact => {
                let step = next_kv_step(&store)?;
                child_put(&store, "kv.c", step)?;
                child_trim_kv(&store, 1)?;
                say("begin compact");
                let t = Instant::now();
                store.compact()?;
                say(&format!("ok compact {}", t.elapsed().as_micros()));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The parent: rounds, kills and checks

/// A checkpoint the parent expects: how it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    Import,
    Save,
}

/// The operation a writer had begun and not finished when it was killed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pending {
    Checkpoint(u64, Written),
    Tag(String, u64),
    Retain(Vec<u64>),
    Put(String, u64),
    Delete(String, u64),
    Other,
}

/// What the store must hold, from the lines of every writer so far.
#[derive(Debug, Default)]
struct Model {
    checkpoints: BTreeMap<u64, Written>,
    gone: BTreeSet<u64>,
    tags: BTreeMap<String, u64>,
    kv: BTreeSet<(String, u64)>,
    kv_gone: BTreeSet<(String, u64)>,
}

/// One line of a writer, applied to the model; returns the operation it began, if any.
fn apply(model: &mut Model, line: &str, pending: &mut Option<Pending>, dur: &mut Durations) {
    let w: Vec<&str> = line.split_whitespace().collect();
    let num = |i: usize| w.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    let steps = |i: usize| -> Vec<u64> {
        w.get(i)
            .filter(|s| **s != "-")
            .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
            .unwrap_or_default()
    };
    match (w.first().copied(), w.get(1).copied()) {
        (Some("begin"), Some("import")) => {
            *pending = Some(Pending::Checkpoint(num(2), Written::Import));
        }
        (Some("begin"), Some("save")) => {
            *pending = Some(Pending::Checkpoint(num(2), Written::Save))
        }
        (Some("begin"), Some("tag")) => {
            *pending = Some(Pending::Tag(w.get(2).unwrap_or(&"").to_string(), num(3)));
        }
        (Some("begin"), Some("retain")) => *pending = Some(Pending::Retain(steps(2))),
        (Some("begin"), Some("put")) => {
            *pending = Some(Pending::Put(w.get(2).unwrap_or(&"").to_string(), num(3)));
        }
        (Some("begin"), Some("delete")) => {
            *pending = Some(Pending::Delete(w.get(2).unwrap_or(&"").to_string(), num(3)));
        }
        (Some("begin"), _) => *pending = Some(Pending::Other),
        (Some("ok"), Some(kind)) => {
            *pending = None;
            match kind {
                "import" => {
                    model.checkpoints.insert(num(2), Written::Import);
                    dur.observe(Op::Import, num(3));
                }
                "save" => {
                    model.checkpoints.insert(num(2), Written::Save);
                    dur.observe(Op::Save, num(3));
                }
                "tag" => {
                    model
                        .tags
                        .insert(w.get(2).unwrap_or(&"").to_string(), num(3));
                }
                "retain" => {
                    remove_steps(model, &steps(2));
                    dur.observe(Op::Retain, num(3));
                }
                "put" => {
                    model
                        .kv
                        .insert((w.get(2).unwrap_or(&"").to_string(), num(3)));
                }
                "delete" => {
                    let key = (w.get(2).unwrap_or(&"").to_string(), num(3));
                    model.kv.remove(&key);
                    model.kv_gone.insert(key);
                }
                "maintain" => dur.observe(Op::Maintain, num(2)),
                "compact" => dur.observe(Op::Compact, num(2)),
                _ => {}
            }
        }
        _ => {}
    }
}

fn remove_steps(model: &mut Model, steps: &[u64]) {
    for s in steps {
        model.checkpoints.remove(s);
        model.gone.insert(*s);
        model.tags.retain(|_, t| t != s);
    }
}

/// Measured duration of each operation (µs), an exponential moving average.
#[derive(Debug)]
struct Durations(BTreeMap<Op, f64>);

impl Durations {
    fn new() -> Durations {
        Durations(Op::ALL.iter().map(|&o| (o, 200_000.0)).collect())
    }

    fn observe(&mut self, op: Op, micros: u64) {
        if micros > 0 {
            let e = self.0.entry(op).or_insert(micros as f64);
            *e = 0.7 * *e + 0.3 * micros as f64;
        }
    }

    fn get(&self, op: Op) -> Duration {
        Duration::from_micros(self.0.get(&op).copied().unwrap_or(200_000.0) as u64)
    }
}

/// A writer and the channel of its lines.
struct Writer {
    child: Child,
    lines: Receiver<String>,
    stderr: std::thread::JoinHandle<String>,
}

fn spawn_writer(op: Op, path: &Path, clock: u64) -> Res<Writer> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--child", op.name(), "--store"])
        .arg(path)
        .args(["--clock", &clock.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let out = child.stdout.take().ok_or("no stdout")?;
    let mut err = child.stderr.take().ok_or("no stderr")?;
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    Ok(Writer {
        child,
        lines,
        stderr,
    })
}

/// What one round found.
struct RoundResult {
    /// Whether the kill came while the named operation was in progress.
    inside: bool,
    /// Checks that passed (checkpoints compared, versions read, ...).
    checks: u64,
}

/// Runs one round: a writer of `op`, killed after a random delay, then the checks.
#[allow(clippy::too_many_arguments)]
fn round(
    op: Op,
    path: &Path,
    clock: u64,
    rng: &mut Rng,
    model: &mut Model,
    dur: &mut Durations,
    files: &[SourceFile],
) -> Result<RoundResult, String> {
    let mut w = spawn_writer(op, path, clock).map_err(|e| format!("spawn: {e}"))?;
    let mut pending = None;
    let begin_tag = format!("begin {}", op.name());
    let deadline = Instant::now() + Duration::from_secs(120);
    // Wait for the first `begin OP`, applying every line before it.
    loop {
        match w.lines.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => {
                apply(model, &line, &mut pending, dur);
                if line.starts_with(&begin_tag) {
                    break;
                }
            }
            Err(RecvTimeoutError::Timeout) if Instant::now() < deadline => {
                if let Ok(Some(status)) = w.child.try_wait() {
                    let _ = w.child.wait();
                    let err = w.stderr.join().unwrap_or_default();
                    return Err(format!(
                        "writer ended before `{begin_tag}`: {status}: {err}"
                    ));
                }
            }
            Err(_) => {
                let _ = w.child.kill();
                let _ = w.child.wait();
                return Err(format!("writer printed no `{begin_tag}` in 120 s"));
            }
        }
    }
    let delay = dur.get(op).mul_f64(1.2 * rng.unit());
    let kill_at = Instant::now() + delay;
    loop {
        let left = kill_at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match w.lines.recv_timeout(left) {
            Ok(line) => apply(model, &line, &mut pending, dur),
            Err(RecvTimeoutError::Timeout) => break,
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    let running = matches!(w.child.try_wait(), Ok(None));
    if running {
        w.child
            .kill()
            .map_err(|e| format!("SIGKILL the writer: {e}"))?;
    }
    let status = w.child.wait().map_err(|e| format!("wait: {e}"))?;
    // Lines printed before the kill are still in the pipe.
    while let Ok(line) = w.lines.recv_timeout(Duration::from_millis(200)) {
        apply(model, &line, &mut pending, dur);
    }
    let err = w.stderr.join().unwrap_or_default();
    if !running {
        return Err(format!("writer ended by itself: {status}: {err}"));
    }
    let inside = matches!(
        (&pending, op),
        (Some(Pending::Checkpoint(_, Written::Import)), Op::Import)
            | (Some(Pending::Checkpoint(_, Written::Save)), Op::Save)
            | (Some(Pending::Retain(_)), Op::Retain)
            | (Some(Pending::Other), Op::Maintain | Op::Compact)
    );
    let checks = check(path, model, pending, files)?;
    Ok(RoundResult { inside, checks })
}

/// Opens the store after a kill and checks it against the model, adopting the pending
/// operation's effect if it committed. Returns the number of checks that passed.
fn check(
    path: &Path,
    model: &mut Model,
    pending: Option<Pending>,
    files: &[SourceFile],
) -> Result<u64, String> {
    let e = |what: &str| {
        let what = what.to_string();
        move |err: StoreError| format!("{what}: {err}")
    };
    let store = open_retrying(path).map_err(e("the store does not open"))?;
    let mut checks = 1u64;
    let report = store.verify().map_err(e("verify"))?;
    if !report.is_ok() {
        let issues: Vec<String> = report.issues.iter().map(|i| i.to_string()).collect();
        return Err(format!("verify: {}", issues.join("; ")));
    }
    checks += 1;
    let present: BTreeSet<u64> = store
        .checkpoints()
        .map_err(e("checkpoints"))?
        .into_iter()
        .collect();

    // The pending operation: did it commit?
    match &pending {
        Some(Pending::Checkpoint(step, how)) if present.contains(step) => {
            model.checkpoints.entry(*step).or_insert(*how);
        }
        Some(Pending::Retain(steps)) if !steps.is_empty() => {
            let there = steps.iter().filter(|s| present.contains(s)).count();
            if there == 0 {
                remove_steps(model, steps);
            } else if there != steps.len() {
                return Err(format!(
                    "a retain cut short removed some of {steps:?}: {there} left"
                ));
            }
            checks += 1;
        }
        _ => {}
    }

    let expected: BTreeSet<u64> = model.checkpoints.keys().copied().collect();
    if present != expected {
        let missing: Vec<_> = expected.difference(&present).collect();
        let extra: Vec<_> = present.difference(&expected).collect();
        return Err(format!(
            "checkpoints differ: missing {missing:?} (committed), unexpected {extra:?}"
        ));
    }
    for g in &model.gone {
        if present.contains(g) {
            return Err(format!("checkpoint {g} removed by a retain is back"));
        }
    }
    // Every checkpoint: all its tensors, bit for bit, and its metadata.
    for (&step, &how) in &model.checkpoints {
        let f = &files[(step % files.len() as u64) as usize];
        let cp = store
            .load_checkpoint(step)
            .map_err(|err| format!("load checkpoint {step}: {err}"))?;
        let want_meta = match how {
            Written::Import => f.metadata.clone(),
            Written::Save => save_metadata(step),
        };
        if cp.metadata != want_meta {
            return Err(format!(
                "checkpoint {step}: metadata {:?}, expected {want_meta:?}",
                cp.metadata
            ));
        }
        let mut got: Vec<_> = cp.tensors.iter().collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        if got.len() != f.tensors.len() {
            return Err(format!(
                "checkpoint {step} is partial: {} of {} tensors",
                got.len(),
                f.tensors.len()
            ));
        }
        for ((name, t), s) in got.iter().zip(&f.tensors) {
            if *name != s.name || t.dtype != s.dtype || t.shape != s.shape || t.data != s.data {
                return Err(format!(
                    "checkpoint {step}: tensor {name} differs from {} of {}",
                    s.name,
                    f.path.display()
                ));
            }
            checks += 1;
        }
    }

    // Tags: each points at a checkpoint; those that returned are there.
    let tags: BTreeMap<String, u64> = store.tags().map_err(e("tags"))?.into_iter().collect();
    if let Some(Pending::Tag(tag, step)) = &pending {
        if tags.get(tag) == Some(step) {
            model.tags.insert(tag.clone(), *step);
        }
    }
    model.tags.retain(|_, s| present.contains(s));
    for (tag, step) in &tags {
        if !present.contains(step) {
            return Err(format!("tag {tag} points at step {step}, not a checkpoint"));
        }
    }
    for (tag, step) in &model.tags {
        if tags.get(tag) != Some(step) {
            return Err(format!("tag {tag} -> {step} is missing"));
        }
        checks += 1;
    }

    // Versions: checkpoint tensors only at checkpoints; kv versions as put.
    let mut kv_present = BTreeSet::new();
    for name in store.tensors().map_err(e("tensors"))? {
        for v in store
            .versions(&name)
            .map_err(|err| format!("versions of {name}: {err}"))?
        {
            if name.starts_with("kv.") {
                kv_present.insert((name.clone(), v.step));
            } else if !present.contains(&v.step) {
                return Err(format!(
                    "{name} has a version at step {} outside any checkpoint",
                    v.step
                ));
            }
        }
    }
    match &pending {
        Some(Pending::Put(name, step)) if kv_present.contains(&(name.clone(), *step)) => {
            model.kv.insert((name.clone(), *step));
        }
        Some(Pending::Delete(name, step)) if !kv_present.contains(&(name.clone(), *step)) => {
            let key = (name.clone(), *step);
            model.kv.remove(&key);
            model.kv_gone.insert(key);
        }
        _ => {}
    }
    if kv_present != model.kv {
        let missing: Vec<_> = model.kv.difference(&kv_present).collect();
        let extra: Vec<_> = kv_present.difference(&model.kv).collect();
        return Err(format!(
            "kv versions differ: missing {missing:?}, unexpected {extra:?}"
        ));
    }
    for (name, step) in &model.kv {
        let t = store
            .get_exact(name, *step)
            .map_err(|err| format!("get_exact {name} step {step}: {err}"))?;
        if t.data != kv_data(name, *step) {
            return Err(format!(
                "{name} step {step}: get_exact differs from the put"
            ));
        }
        checks += 1;
    }
    Ok(checks)
}

/// Per operation: kills, kills inside the operation, checks passed.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    kills: u64,
    inside: u64,
    rounds_ok: u64,
    checks: u64,
}

struct Args {
    kills: usize,
    seed: u64,
    json: bool,
    dir: Option<PathBuf>,
}

fn parse_args(args: &[String]) -> Res<Args> {
    let mut a = Args {
        kills: 100,
        seed: now_ms(),
        json: false,
        dir: None,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--kills" => a.kills = value()?.parse()?,
            "--seed" => a.seed = value()?.parse()?,
            "--json" => a.json = true,
            "--dir" => a.dir = Some(PathBuf::from(value()?)),
            "-h" | "--help" => {
                println!(
                    "kill-bench --kills N [--seed S] [--json] [--dir DIR]: SIGKILL a writer N \
                     times during import, save, retain, maintain and compaction, checking the \
                     store after each kill"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    Ok(a)
}

fn run(args: Args) -> Res<bool> {
    let files = source_files()?;
    let tmp;
    let dir = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let mut rng = Rng::new(args.seed);
    // Every operation equally often, in a seeded random order.
    let mut ops: Vec<Op> = (0..args.kills)
        .map(|i| Op::ALL[i % Op::ALL.len()])
        .collect();
    for i in (1..ops.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        ops.swap(i, j);
    }
    let mut tally: BTreeMap<Op, Tally> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut dur = Durations::new();
    let mut model = Model::default();
    let mut path = PathBuf::new();
    let started = Instant::now();
    for (i, &op) in ops.iter().enumerate() {
        if i % ROUNDS_PER_STORE == 0 {
            path = dir.join(format!("kill-{}.strata", i / ROUNDS_PER_STORE));
            let _ = std::fs::remove_file(&path);
            // Created here, so that no kill lands in the file's creation; with a first
            // checkpoint, so that retain and maintain rounds have a store to work on.
            let store = Store::open(&path)?;
            store.set_policy("kv.*", kv_policy())?;
            drop(store);
            model = Model::default();
        }
        let t = tally.entry(op).or_default();
        t.kills += 1;
        let clock = i as u64 * 2 * DAY_MS;
        match round(op, &path, clock, &mut rng, &mut model, &mut dur, &files) {
            Ok(r) => {
                t.rounds_ok += 1;
                t.checks += r.checks;
                t.inside += u64::from(r.inside);
            }
            Err(why) => {
                failures.push(json!({"round": i, "op": op.name(), "error": why}));
                if !args.json {
                    eprintln!("round {i} ({}): FAILED: {why}", op.name());
                }
                // Start over on a fresh store: the model no longer describes this one.
                model = Model::default();
                path = dir.join(format!("kill-failed-{i}.strata"));
                let _ = std::fs::remove_file(&path);
                let store = Store::open(&path)?;
                store.set_policy("kv.*", kv_policy())?;
            }
        }
        if !args.json && (i + 1) % 100 == 0 {
            eprintln!(
                "{} kills, {} failures, {:.0} s",
                i + 1,
                failures.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let ok = failures.is_empty();
    if args.json {
        let per_op: Vec<_> = tally
            .iter()
            .map(|(op, t)| {
                json!({
                    "op": op.name(),
                    "kills": t.kills,
                    "inside_op": t.inside,
                    "rounds_ok": t.rounds_ok,
                    "checks": t.checks,
                    "mean_op_ms": dur.get(*op).as_secs_f64() * 1e3,
                })
            })
            .collect();
        let doc = json!({
            "kills": args.kills,
            "seed": args.seed,
            "wall_s": wall,
            "machine": machine(),
            "ops": per_op,
            "checks": tally.values().map(|t| t.checks).sum::<u64>(),
            "failures": failures,
            "ok": ok,
            "replay": format!("cargo run --release --example kill-bench -- --kills {} --seed {}", args.kills, args.seed),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!(
            "kill-bench: {} kills, seed {}, {wall:.1} s on {}",
            args.kills,
            args.seed,
            machine()
        );
        println!(
            "| operation | kills | inside the operation | rounds passed | checks passed | op ms |"
        );
        println!("|---|---|---|---|---|---|");
        for (op, t) in &tally {
            println!(
                "| {} | {} | {} | {} | {} | {:.0} |",
                op.name(),
                t.kills,
                t.inside,
                t.rounds_ok,
                t.checks,
                dur.get(*op).as_secs_f64() * 1e3
            );
        }
        if ok {
            println!("no failures");
        } else {
            println!(
                "{} failures; replay: cargo run --release --example kill-bench -- --kills {} --seed {}",
                failures.len(),
                args.kills,
                args.seed
            );
            for f in &failures {
                println!("  {f}");
            }
        }
    }
    Ok(ok)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        let op = args.get(1).and_then(|s| Op::parse(s));
        let path = args.get(3).map(PathBuf::from);
        let clock = args.get(5).and_then(|s| s.parse().ok()).unwrap_or(0);
        let (Some(op), Some(path)) = (op, path) else {
            eprintln!("usage: kill-bench --child OP --store PATH --clock MS");
            return ExitCode::from(2);
        };
        return match child(op, &path, clock) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("writer {}: {e}", op.name());
                ExitCode::from(2)
            }
        };
    }
    match parse_args(&args).and_then(run) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("kill-bench: {e}");
            ExitCode::from(2)
        }
    }
}
