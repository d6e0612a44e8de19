//! `strata-bench`: Strata's side of the comparison harness (`benches/compare/run.sh`).
//!
//! ```text
//! strata-bench codec  FILE.safetensors [--threads 1,2] [--reps N] [--min-time SECONDS]
//! strata-bench delta  DIR [--reps N] [--min-time SECONDS]
//! strata-bench write  STORE DIR [--reps N]
//! strata-bench read   STORE --step S --tensor NAME --expect FILE.safetensors [--reps N]
//! strata-bench load   STORE --step S --expect FILE.safetensors [--reps N]
//! strata-bench verify STORE DIR
//! ```
//!
//! Each command prints one JSON object on stdout; any failure (a round trip that differs
//! included) is a message on stderr and exit code 1, and the harness then reports Strata
//! as failing.
//!
//! - **codec**: every tensor of the file is cut into blocks the way the store cuts a
//!   version (`Options::default().block_bytes` raw bytes, whole elements) and each block is
//!   encoded with [`segment::encode_keyframe`] and the store's default lossless options,
//!   on a rayon pool of each thread count given (blocks in parallel, one codec call per
//!   block, as the store does). Decoding parses every segment (checksum included) and
//!   decodes it; the output is compared with the input, outside the timed region.
//!   `stored_bytes` is the sum of the segment lengths, headers included.
//! - **delta**: for each pair of consecutive `step_N.safetensors` files of DIR, every tensor
//!   of the later step that has a tensor of the same name, dtype and byte length at the
//!   earlier step is cut into blocks as `codec` cuts it, and so is its predecessor; each
//!   block is encoded with [`segment::encode_delta`] against the predecessor's block (the
//!   store's default lossless options) on one thread, one block after another (no pool).
//!   Decoding parses every segment (checksum included) and decodes it against its base; the
//!   output is compared with the input, outside the timed region. `raw_bytes` counts the
//!   encoded blocks; `skipped_bytes` the tensors left out for want of a predecessor.
//! - **write**: every `step_N.safetensors` of DIR is read into memory first; each timed
//!   repetition opens a new store (deleting the previous repetition's), imports each file as a checkpoint
//!   ([`Store::import_safetensors_bytes`], what `strata import` does), compacts the file
//!   (as `strata compact` does; `strata import` itself skips it on a fresh store, ADR 0023)
//!   and closes it (`compact_seconds`: the compaction and close alone). Sizes come from
//!   [`Store::stats`] afterwards.
//! - **read**: each repetition opens the store read-only ([`Store::open_read_only`], as the
//!   CLI's read commands and the Python drop-ins' loads do: a reader's smaller page cache, ADR 0031),
//!   then reads one tensor at one step; the open and the read are timed apart
//!   (`open_seconds`, `seconds`).
//! - **load**: the same with one whole checkpoint loaded.
//! - **verify**: every checkpoint is loaded and compared with its file (names, dtypes,
//!   shapes, bytes).
//!
//! Timings are medians of the repetitions. `peak_bytes` is the growth of the process's
//! peak resident memory over its resident memory when the measured work began (Linux: the
//! peak is reset through `/proc/self/clear_refs`; `null` elsewhere).

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rayon::prelude::*;
use serde_json::{json, Value};
use strata_codec::segment::{self, Segment};
use strata_codec::DType;
use strata_store::safetensors::SafeTensors;
use strata_store::{dtype_from_safetensors, Options, Store};

type BoxError = Box<dyn Error + Send + Sync>;

/// Fewest timed repetitions when `--reps` is not given.
const DEFAULT_REPS: usize = 5;
/// Codec repetitions go on past `--reps` until they add up to this much time, unless
/// `--min-time` says otherwise.
const DEFAULT_MIN_TIME: Duration = Duration::from_millis(1000);
/// Most repetitions of one codec measurement.
const MAX_REPS: usize = 100;

const USAGE: &str = "usage:
  strata-bench codec  FILE.safetensors [--threads 1,2] [--reps N] [--min-time SECONDS]
  strata-bench delta  DIR [--reps N] [--min-time SECONDS]
  strata-bench write  STORE DIR [--reps N]
  strata-bench read   STORE --step S --tensor NAME --expect FILE.safetensors [--reps N]
  strata-bench load   STORE --step S --expect FILE.safetensors [--reps N]
  strata-bench verify STORE DIR";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    match run(&args) {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("strata-bench: {e}");
            ExitCode::from(1)
        }
    }
}

/// The parsed command line: positional arguments and `--name value` options.
#[derive(Debug)]
struct Args {
    positional: Vec<String>,
    options: Vec<(String, String)>,
}

impl Args {
    fn parse(args: &[String]) -> Result<Args, BoxError> {
        let mut positional = Vec::new();
        let mut options = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if let Some(name) = a.strip_prefix("--") {
                let value = it.next().ok_or_else(|| format!("--{name} needs a value"))?;
                options.push((name.to_string(), value.clone()));
            } else {
                positional.push(a.clone());
            }
        }
        Ok(Args {
            positional,
            options,
        })
    }

    fn option(&self, name: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn required(&self, name: &str) -> Result<&str, BoxError> {
        self.option(name)
            .ok_or_else(|| format!("missing --{name}\n{USAGE}").into())
    }

    fn reps(&self) -> Result<usize, BoxError> {
        match self.option("reps") {
            None => Ok(DEFAULT_REPS),
            Some(s) => match s.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("--reps {s}: expected a positive integer").into()),
            },
        }
    }

    fn min_time(&self) -> Result<Duration, BoxError> {
        match self.option("min-time") {
            None => Ok(DEFAULT_MIN_TIME),
            Some(s) => match s.parse::<f64>() {
                Ok(t) if (0.0..=3600.0).contains(&t) => Ok(Duration::from_secs_f64(t)),
                _ => Err(format!("--min-time {s}: expected seconds, 0 to 3600").into()),
            },
        }
    }

    fn step(&self) -> Result<u64, BoxError> {
        let s = self.required("step")?;
        s.parse()
            .map_err(|_| format!("--step {s}: expected an integer").into())
    }

    /// Checks the positional arguments and the option names.
    fn expect(&self, positional: usize, options: &[&str]) -> Result<(), BoxError> {
        if self.positional.len() != positional + 1 {
            return Err(format!("wrong number of arguments\n{USAGE}").into());
        }
        if let Some((n, _)) = self
            .options
            .iter()
            .find(|(n, _)| !options.contains(&n.as_str()))
        {
            return Err(format!("unknown option --{n}\n{USAGE}").into());
        }
        Ok(())
    }
}

fn run(raw: &[String]) -> Result<Value, BoxError> {
    let args = Args::parse(raw)?;
    let command = args.positional.first().map(String::as_str).unwrap_or("");
    let pos = |i: usize| args.positional.get(i).map(String::as_str).unwrap_or("");
    match command {
        "codec" => {
            args.expect(1, &["threads", "reps", "min-time"])?;
            let threads = parse_threads(args.option("threads").unwrap_or("1"))?;
            codec(Path::new(pos(1)), &threads, args.reps()?, args.min_time()?)
        }
        "delta" => {
            args.expect(1, &["reps", "min-time"])?;
            delta(Path::new(pos(1)), args.reps()?, args.min_time()?)
        }
        "write" => {
            args.expect(2, &["reps"])?;
            write(Path::new(pos(1)), Path::new(pos(2)), args.reps()?)
        }
        "read" => {
            args.expect(1, &["step", "tensor", "expect", "reps"])?;
            read(
                Path::new(pos(1)),
                args.step()?,
                args.required("tensor")?,
                Path::new(args.required("expect")?),
                args.reps()?,
            )
        }
        "load" => {
            args.expect(1, &["step", "expect", "reps"])?;
            load(
                Path::new(pos(1)),
                args.step()?,
                Path::new(args.required("expect")?),
                args.reps()?,
            )
        }
        "verify" => {
            args.expect(2, &[])?;
            verify(Path::new(pos(1)), Path::new(pos(2)))
        }
        other => Err(format!("unknown command {other:?}\n{USAGE}").into()),
    }
}

fn parse_threads(s: &str) -> Result<Vec<usize>, BoxError> {
    s.split(',')
        .map(|t| match t.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => {
                Err(format!("--threads {s}: expected positive integers separated by commas").into())
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Input files

/// A tensor of a safetensors file: name, Strata dtype, shape and bytes.
#[derive(Debug)]
struct InputTensor {
    name: String,
    dtype: DType,
    shape: Vec<u64>,
    data: Vec<u8>,
}

fn read_file(path: &Path) -> Result<Vec<u8>, BoxError> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()).into())
}

/// The tensors of a safetensors file in file order. Dtypes Strata has no name for are
/// taken as raw bytes (U8), as `codec-bench` does.
fn tensors_of(path: &Path) -> Result<Vec<InputTensor>, BoxError> {
    let bytes = read_file(path)?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| format!("{} is not a valid safetensors file: {e:?}", path.display()))?;
    let mut views = st.tensors();
    views.sort_by_key(|(_, v)| v.data().as_ptr() as usize);
    Ok(views
        .into_iter()
        .map(|(name, v)| InputTensor {
            name,
            dtype: dtype_from_safetensors(v.dtype()).unwrap_or(DType::U8),
            shape: v.shape().iter().map(|&d| d as u64).collect(),
            data: v.data().to_vec(),
        })
        .collect())
}

/// The step of a file named `step_N.safetensors`.
fn step_of(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    let digits = name.strip_prefix("step_")?.strip_suffix(".safetensors")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The `step_N.safetensors` files of a folder, by step.
fn series(dir: &Path) -> Result<Vec<(u64, PathBuf)>, BoxError> {
    let mut files = Vec::new();
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
            .path();
        if let Some(step) = step_of(&path) {
            files.push((step, path));
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(format!("no step_N.safetensors files in {}", dir.display()).into());
    }
    Ok(files)
}

// ---------------------------------------------------------------------------------------
// Timing and memory

/// Repeated timings of one measurement.
#[derive(Debug)]
struct Timer {
    times: Vec<Duration>,
    total: Duration,
    min_reps: usize,
    min_time: Duration,
}

impl Timer {
    fn new(min_reps: usize, min_time: Duration) -> Self {
        Timer {
            times: Vec::new(),
            total: Duration::ZERO,
            min_reps,
            min_time,
        }
    }

    /// Whether another repetition is due.
    fn more(&self) -> bool {
        let n = self.times.len();
        n < self.min_reps || (self.total < self.min_time && n < MAX_REPS)
    }

    fn time<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let start = Instant::now();
        let r = f();
        self.record(start.elapsed());
        r
    }

    fn record(&mut self, t: Duration) {
        self.times.push(t);
        self.total += t;
    }

    fn median(&self) -> f64 {
        let mut t = self.times.clone();
        t.sort();
        t.get(t.len() / 2).map_or(0.0, Duration::as_secs_f64)
    }
}

/// A `kB` field of `/proc/self/status`, in bytes.
fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Peak resident memory measured from now on: [`PeakMemory::growth`] is how far the peak
/// rose above the resident memory at [`PeakMemory::start`].
#[derive(Debug)]
struct PeakMemory {
    baseline: Option<u64>,
}

impl PeakMemory {
    /// Resets the kernel's peak (`VmHWM`) to the current resident size.
    fn start() -> Self {
        let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        PeakMemory {
            baseline: if reset { status_bytes("VmRSS") } else { None },
        }
    }

    fn growth(&self) -> Option<u64> {
        let base = self.baseline?;
        Some(status_bytes("VmHWM")?.saturating_sub(base))
    }
}

// ---------------------------------------------------------------------------------------
// Commands

/// One block of a tensor, as the store cuts it.
#[derive(Debug)]
struct Block<'a> {
    name: &'a str,
    dtype: DType,
    data: &'a [u8],
}

fn codec(
    file: &Path,
    threads: &[usize],
    reps: usize,
    min_time: Duration,
) -> Result<Value, BoxError> {
    let tensors = tensors_of(file)?;
    let opts = Options::default();
    let blocks: Vec<Block<'_>> = tensors
        .iter()
        .flat_map(|t| {
            let size = t.dtype.size();
            let per_block = (opts.block_bytes / size as u64).max(1) as usize * size;
            t.data.chunks(per_block).map(move |data| Block {
                name: &t.name,
                dtype: t.dtype,
                data,
            })
        })
        .collect();
    let raw_bytes: usize = blocks.iter().map(|b| b.data.len()).sum();
    let mut runs = Vec::new();
    let mut stored_bytes = None;
    for &n in threads {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(n).build()?;
        let mut enc = Timer::new(reps, min_time);
        let mut segments: Vec<Vec<u8>> = Vec::new();
        while enc.more() {
            segments = enc.time(|| {
                pool.install(|| {
                    blocks
                        .par_iter()
                        .map(|b| {
                            segment::encode_keyframe(b.dtype, b.data, &opts.lossless)
                                .map_err(|e| format!("encoding {}: {e}", b.name))
                        })
                        .collect::<Result<Vec<_>, String>>()
                })
            })?;
        }
        let stored: usize = segments.iter().map(Vec::len).sum();
        if *stored_bytes.get_or_insert(stored) != stored {
            return Err(format!("{n} threads stored {stored} bytes, another count did not").into());
        }
        let mut outs: Vec<Vec<u8>> = blocks.iter().map(|b| vec![0u8; b.data.len()]).collect();
        let mut dec = Timer::new(reps, min_time);
        while dec.more() {
            outs.iter_mut().for_each(|o| o.fill(0xA5));
            dec.time(|| {
                pool.install(|| {
                    segments
                        .par_iter()
                        .zip(outs.par_iter_mut())
                        .try_for_each(|(s, o)| Segment::parse(s)?.decode_lossless_into(None, o))
                })
            })?;
            for (b, o) in blocks.iter().zip(&outs) {
                if b.data != o.as_slice() {
                    return Err(format!("round trip differs in tensor {}", b.name).into());
                }
            }
        }
        runs.push(json!({
            "threads": n,
            "encode_s": enc.median(),
            "decode_s": dec.median(),
            "encode_reps": enc.times.len(),
            "decode_reps": dec.times.len(),
        }));
    }
    Ok(json!({
        "file": file.display().to_string(),
        "raw_bytes": raw_bytes,
        "stored_bytes": stored_bytes.unwrap_or(0),
        "blocks": blocks.len(),
        "block_bytes": opts.block_bytes,
        "runs": runs,
    }))
}

/// One block of a tensor at a step and the same block of the tensor at the step before.
#[derive(Debug)]
struct DeltaBlock<'a> {
    step: u64,
    block: Block<'a>,
    base: &'a [u8],
}

fn delta(dir: &Path, reps: usize, min_time: Duration) -> Result<Value, BoxError> {
    let files = series(dir)?;
    if files.len() < 2 {
        return Err(format!("delta needs two steps or more in {}", dir.display()).into());
    }
    let steps: Vec<(u64, Vec<InputTensor>)> = files
        .iter()
        .map(|(step, p)| Ok((*step, tensors_of(p)?)))
        .collect::<Result<_, BoxError>>()?;
    let opts = Options::default();
    let mut blocks: Vec<DeltaBlock<'_>> = Vec::new();
    let mut skipped_bytes = 0usize;
    for pair in steps.windows(2) {
        let ((_, before), (step, tensors)) = (&pair[0], &pair[1]);
        for t in tensors {
            let Some(base) = before
                .iter()
                .find(|b| b.name == t.name && b.dtype == t.dtype && b.data.len() == t.data.len())
            else {
                skipped_bytes += t.data.len();
                continue;
            };
            let size = t.dtype.size();
            let per_block = (opts.block_bytes / size as u64).max(1) as usize * size;
            blocks.extend(
                t.data
                    .chunks(per_block)
                    .zip(base.data.chunks(per_block))
                    .map(|(data, base)| DeltaBlock {
                        step: *step,
                        block: Block {
                            name: &t.name,
                            dtype: t.dtype,
                            data,
                        },
                        base,
                    }),
            );
        }
    }
    let raw_bytes: usize = blocks.iter().map(|b| b.block.data.len()).sum();
    let mut enc = Timer::new(reps, min_time);
    let mut segments: Vec<Vec<u8>> = Vec::new();
    while enc.more() {
        segments = enc.time(|| {
            blocks
                .iter()
                .map(|d| {
                    let b = &d.block;
                    segment::encode_delta(b.dtype, b.data, d.base, &opts.lossless)
                        .map_err(|e| format!("encoding {} at step {}: {e}", b.name, d.step))
                })
                .collect::<Result<Vec<_>, String>>()
        })?;
    }
    let stored_bytes: usize = segments.iter().map(Vec::len).sum();
    let mut outs: Vec<Vec<u8>> = blocks
        .iter()
        .map(|d| vec![0u8; d.block.data.len()])
        .collect();
    let mut dec = Timer::new(reps, min_time);
    while dec.more() {
        outs.iter_mut().for_each(|o| o.fill(0xA5));
        dec.time(|| {
            segments
                .iter()
                .zip(&blocks)
                .zip(outs.iter_mut())
                .try_for_each(|((s, d), o)| {
                    Segment::parse(s)?.decode_lossless_into(Some(d.base), o)
                })
        })?;
        for (d, o) in blocks.iter().zip(&outs) {
            if d.block.data != o.as_slice() {
                return Err(format!(
                    "round trip differs in tensor {} at step {}",
                    d.block.name, d.step
                )
                .into());
            }
        }
    }
    Ok(json!({
        "dir": dir.display().to_string(),
        "pairs": steps.len() - 1,
        "raw_bytes": raw_bytes,
        "stored_bytes": stored_bytes,
        "skipped_bytes": skipped_bytes,
        "blocks": blocks.len(),
        "block_bytes": opts.block_bytes,
        "threads": 1,
        "encode_s": enc.median(),
        "decode_s": dec.median(),
        "encode_reps": enc.times.len(),
        "decode_reps": dec.times.len(),
    }))
}

fn write(store_path: &Path, dir: &Path, reps: usize) -> Result<Value, BoxError> {
    if store_path.exists() {
        return Err(format!("{} exists; write needs a new store", store_path.display()).into());
    }
    let files = series(dir)?;
    let inputs: Vec<(u64, &Path, Vec<u8>)> = files
        .iter()
        .map(|(step, p)| Ok((*step, p.as_path(), read_file(p)?)))
        .collect::<Result<_, BoxError>>()?;
    let mem = PeakMemory::start();
    let mut timer = Timer::new(reps, Duration::ZERO);
    let mut compact = Timer::new(reps, Duration::ZERO);
    while timer.more() {
        if store_path.exists() {
            // The store of the previous repetition.
            std::fs::remove_file(store_path)?;
        }
        let start = Instant::now();
        let mut store = Store::open(store_path)?;
        for (step, path, bytes) in &inputs {
            store.import_safetensors_bytes(bytes, *step, path)?;
        }
        compact.time(|| -> Result<(), BoxError> {
            store.compact()?;
            drop(store);
            Ok(())
        })?;
        timer.record(start.elapsed());
    }
    let peak = mem.growth();
    let stats = Store::open(store_path)?.stats()?;
    Ok(json!({
        "steps": inputs.len(),
        "seconds": timer.median(),
        "compact_seconds": compact.median(),
        "reps": timer.times.len(),
        "raw_bytes": stats.raw_bytes,
        "stored_bytes": stats.stored_bytes,
        "file_bytes": std::fs::metadata(store_path)?.len(),
        "peak_bytes": peak,
    }))
}

fn read(
    store_path: &Path,
    step: u64,
    tensor: &str,
    expect: &Path,
    reps: usize,
) -> Result<Value, BoxError> {
    let expected = tensors_of(expect)?
        .into_iter()
        .find(|t| t.name == tensor)
        .ok_or_else(|| format!("{} has no tensor {tensor:?}", expect.display()))?;
    let mem = PeakMemory::start();
    let (open, work) = open_then(
        store_path,
        reps,
        |store| Ok(store.get(tensor, step)?),
        |got| {
            if got.data != expected.data
                || got.dtype != expected.dtype
                || got.shape != expected.shape
            {
                return Err(
                    format!("tensor {tensor:?} at step {step} differs from its file").into(),
                );
            }
            Ok(())
        },
    )?;
    Ok(json!({
        "open_seconds": open.median(),
        "seconds": work.median(),
        "reps": work.times.len(),
        "bytes": expected.data.len(),
        "peak_bytes": mem.growth(),
    }))
}

fn load(store_path: &Path, step: u64, expect: &Path, reps: usize) -> Result<Value, BoxError> {
    let expected = tensors_of(expect)?;
    let mem = PeakMemory::start();
    let (open, work) = open_then(
        store_path,
        reps,
        |store| Ok(store.load_checkpoint(step)?),
        |got| same_checkpoint(step, &got.tensors, &expected),
    )?;
    Ok(json!({
        "open_seconds": open.median(),
        "seconds": work.median(),
        "reps": work.times.len(),
        "bytes": expected.iter().map(|t| t.data.len()).sum::<usize>(),
        "peak_bytes": mem.growth(),
    }))
}

/// Repetitions of: open the store (timed by the first timer), run `op` on the fresh handle
/// (timed by the second), close it, and `check` the result outside the timed regions.
fn open_then<R>(
    store_path: &Path,
    reps: usize,
    mut op: impl FnMut(&Store) -> Result<R, BoxError>,
    mut check: impl FnMut(&R) -> Result<(), BoxError>,
) -> Result<(Timer, Timer), BoxError> {
    let mut open = Timer::new(reps, Duration::ZERO);
    let mut work = Timer::new(reps, Duration::ZERO);
    while work.more() {
        let store = open.time(|| Store::open_read_only(store_path))?;
        let got = work.time(|| op(&store))?;
        drop(store);
        check(&got)?;
    }
    Ok((open, work))
}

fn verify(store_path: &Path, dir: &Path) -> Result<Value, BoxError> {
    let store = Store::open(store_path)?;
    let files = series(dir)?;
    for (step, path) in &files {
        let got = store.load_checkpoint(*step)?;
        same_checkpoint(*step, &got.tensors, &tensors_of(path)?)?;
    }
    Ok(json!({ "ok": true, "steps": files.len() }))
}

/// Checks that a loaded checkpoint holds exactly the tensors of its file.
fn same_checkpoint(
    step: u64,
    got: &[(String, strata_store::Tensor)],
    expected: &[InputTensor],
) -> Result<(), BoxError> {
    if got.len() != expected.len() {
        return Err(format!(
            "step {step}: {} tensors loaded, the file has {}",
            got.len(),
            expected.len()
        )
        .into());
    }
    for e in expected {
        let t = got
            .iter()
            .find(|(n, _)| *n == e.name)
            .map(|(_, t)| t)
            .ok_or_else(|| format!("step {step}: tensor {:?} missing", e.name))?;
        if t.data != e.data || t.dtype != e.dtype || t.shape != e.shape {
            return Err(format!("step {step}: tensor {:?} differs from its file", e.name).into());
        }
    }
    Ok(())
}
