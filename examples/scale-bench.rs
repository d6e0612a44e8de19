//! scale-bench: Strata on GB-scale checkpoints and on long runs of small ones (issue 11,
//! "Big checkpoints").
//!
//! ```text
//! cargo run --release --example scale-bench -- [--gb N] [--steps S] [--json] [--out DIR] [--keep]
//!     [--chain-gb N] [--chain-steps S] [--seed N] [--drift F] [--no-chain] [--no-zipnn]
//!     [--no-many] [--many N] [--small-steps N] [--retain-limit SECS] [--strata PATH]
//!     [--python PATH] [--strata-python PATH]
//! ```
//!
//! 1. **Data.** A model-like bf16 checkpoint of N GB (10^9 bytes) is generated, seeded, as a
//!    safetensors file streamed to disk: layers of seven 4096 x 4096 bf16 weights (32 MiB
//!    each, normal, std 0.02), two norms (near 1.0) and three biases (near 0) of 4096 values
//!    each. Step k + 1 is a fine-tuned successor: every value moved by `drift x std x normal`
//!    from step k and rounded to bf16 (default drift 0.01: a few bf16 ulps, so nearly every
//!    weight changes in its low bits and the high byte planes of the XOR delta are almost all
//!    zero). `--steps` files are made (default 2).
//! 2. **Big checkpoints.** Each figure comes from a separate process, the release `strata`
//!    binary (built first with `cargo build --release -p strata-cli`), timed by wall clock;
//!    its peak RSS is its `ru_maxrss` from `wait4`, read by a small process that starts it
//!    (this example re-run with `--child-run`): `strata import` of each step
//!    (step 1 is keyframes, later ones deltas), `strata export` of each (the exported file is
//!    compared with the generated one tensor by tensor, streaming, bit for bit), a whole-
//!    checkpoint load through `Store::read_checkpoint` (this example re-run as a child
//!    process; exports, loads, gets and histories run 3 times and the run of median time is
//!    reported),
//!    and the same checkpoint through the Python package's `load_checkpoint` (a python process
//!    of the venv `python/ci.sh` builds the package into, `--strata-python`: default
//!    `$STRATA_PY_VENV/bin/python`, else `~/.cache/strata/py-venv/bin/python`; timed inside
//!    it, without python's start and imports; every array is compared with the generated
//!    file), beside `cp FILE DEST && sync` of the same file on the same disk and ZipNN
//!    compress / decompress of it (per tensor, in a python process of the comparison
//!    harness's venv, target/compare-venv; the decompressed file is compared too).
//! 3. **Deep chains.** The default store decodes at most 6 segments per block (max_chain 6),
//!    reached by the 6th version of a tensor. Unless `--steps` is at least `--chain-steps`
//!    (default 8), a separate smaller model (`--chain-gb`, default min(N, 0.5)) is generated
//!    with that many steps and imported; `strata get` of one 32 MiB tensor at its deepest
//!    version (also with `-o x.npy`), `strata history` of one element (mid-block) over all its versions,
//!    and export and load (Rust and Python) of the deepest checkpoint are measured there.
//! 4. **Many checkpoints.** 1000 checkpoints (`--many`) of 300 tensors of 256 f32 values,
//!    written in-process with `Store::save_checkpoint`; at 10, 100 and 1000 checkpoints:
//!    `Store::open` (in-process, median of 5), `strata log STORE` (3 runs, the median),
//!    `get_at` of one tensor (in-process, fresh handle, median of 5) and
//!    `strata retain COPY --keep-last 3` on a copy of the store (stopped after `--retain-limit` seconds, default 900, and reported as
//!    such). Then the small-tensor cost: 300 checkpoints (`--small-steps`) of the same
//!    model, `Store::stats()` as written and after compaction.
//!
//! The page cache is left as the generator leaves it (warm for the files just written); it
//! is not dropped. Generated data goes under `--out` (default target/scale-bench) and is
//! deleted at the end unless `--keep`. `--json` prints one JSON document with every figure,
//! the targets of issue 11 beside them, and the machine; without it, tables.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use serde_json::{json, Value};
use strata::store::{DType, Store, TensorRef};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Bytes of one 4096 x 4096 bf16 weight.
const BIG: u64 = 4096 * 4096 * 2;
const HIDDEN: u64 = 4096;
/// Standard deviation of generated weights, as in trained transformers.
const WEIGHT_STD: f32 = 0.02;
/// Elements generated from one seeded stream: chunks are independent, so threads can share
/// the work and the data does not depend on the thread count.
const CHUNK: usize = 1 << 20;
/// Bytes compared at once when two files are checked.
const CMP_CHUNK: usize = 16 << 20;
/// Largest safetensors header read back.
const MAX_HEADER: u64 = 100 << 20;
/// Repetitions of the in-process micro-measurements (the median is reported).
const REPS: usize = 5;
/// The store's default bound on segments decoded per block (Options::max_chain).
const MAX_CHAIN: u8 = 6;

const GIB: f64 = (1u64 << 30) as f64;

#[derive(Debug, Clone)]
struct Args {
    gb: f64,
    steps: u64,
    json: bool,
    out: PathBuf,
    keep: bool,
    chain_gb: Option<f64>,
    chain_steps: u64,
    seed: u64,
    drift: f32,
    chain: bool,
    zipnn: bool,
    many: bool,
    many_n: u64,
    small_steps: u64,
    retain_limit: u64,
    strata: Option<PathBuf>,
    python: PathBuf,
    /// A python with the `strata` package (Python `load_checkpoint`).
    strata_python: PathBuf,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The python of the venv `python/ci.sh` builds the package into: `$STRATA_PY_VENV`, else
/// `~/.cache/strata/py-venv`.
fn default_strata_python() -> PathBuf {
    let venv = std::env::var_os("STRATA_PY_VENV")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/strata/py-venv"))
        })
        .unwrap_or_else(|| PathBuf::from(".venv"));
    venv.join("bin/python")
}

const USAGE: &str = "usage: scale-bench [--gb N] [--steps S] [--json] [--out DIR] [--keep] \
[--chain-gb N] [--chain-steps S] [--seed N] [--drift F] [--no-chain] [--no-zipnn] [--no-many] \
[--many N] [--small-steps N] [--retain-limit SECS] [--strata PATH] [--python PATH] \
[--strata-python PATH]";

fn parse() -> Res<Args> {
    let mut a = Args {
        gb: 2.0,
        steps: 2,
        json: false,
        out: root().join("target/scale-bench"),
        keep: false,
        chain_gb: None,
        chain_steps: 8,
        seed: 11,
        drift: 0.01,
        chain: true,
        zipnn: true,
        many: true,
        many_n: 1000,
        small_steps: 300,
        retain_limit: 900,
        strata: None,
        python: root().join("target/compare-venv/bin/python"),
        strata_python: default_strata_python(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--json" => a.json = true,
            "--keep" => a.keep = true,
            "--no-chain" => a.chain = false,
            "--no-zipnn" => a.zipnn = false,
            "--no-many" => a.many = false,
            "-h" | "--help" => return Err(USAGE.into()),
            _ => {
                let value = it
                    .next()
                    .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
                let float = || -> Res<f64> {
                    let v: f64 = value.parse().map_err(|e| format!("{flag} {value}: {e}"))?;
                    if !(v.is_finite() && v > 0.0) {
                        return Err(format!("{flag} {value}: must be a positive number").into());
                    }
                    Ok(v)
                };
                let int = || -> Res<u64> {
                    Ok(value
                        .parse::<u64>()
                        .map_err(|e| format!("{flag} {value}: {e}"))?)
                };
                match flag.as_str() {
                    "--gb" => a.gb = float()?,
                    "--steps" => a.steps = int()?,
                    "--out" => a.out = PathBuf::from(&value),
                    "--chain-gb" => a.chain_gb = Some(float()?),
                    "--chain-steps" => a.chain_steps = int()?,
                    "--seed" => a.seed = int()?,
                    "--drift" => a.drift = float()? as f32,
                    "--many" => a.many_n = int()?,
                    "--small-steps" => a.small_steps = int()?,
                    "--retain-limit" => a.retain_limit = int()?,
                    "--strata" => a.strata = Some(PathBuf::from(&value)),
                    "--python" => a.python = PathBuf::from(&value),
                    "--strata-python" => a.strata_python = PathBuf::from(&value),
                    _ => return Err(format!("unknown flag {flag}\n{USAGE}").into()),
                }
            }
        }
    }
    if a.gb > 1000.0 {
        return Err("--gb: at most 1000".into());
    }
    if !(1..=100).contains(&a.steps) {
        return Err("--steps must be in 1..=100".into());
    }
    if !(u64::from(MAX_CHAIN)..=100).contains(&a.chain_steps) {
        return Err(format!("--chain-steps must be in {MAX_CHAIN}..=100").into());
    }
    if a.many_n < 10 || a.small_steps == 0 {
        return Err("--many must be at least 10 and --small-steps at least 1".into());
    }
    Ok(a)
}

// ---------------------------------------------------------------------------------------
// Data generation
// ---------------------------------------------------------------------------------------

/// SplitMix64 (Steele, Lea, Flood 2014): fast, and good enough for test data.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Two standard normals (Box-Muller on two 24-bit uniforms of one draw).
    fn normal_pair(&mut self) -> (f32, f32) {
        let x = self.next_u64();
        let u1 = ((x >> 40) as f32 + 0.5) * (1.0 / 16_777_216.0);
        let u2 = ((x & 0xFF_FFFF) as f32) * (1.0 / 16_777_216.0);
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (std::f32::consts::TAU * u2).sin_cos();
        (r * c, r * s)
    }
}

/// The seed of one chunk of one tensor at one step.
fn chunk_seed(seed: u64, tensor: usize, step: u64, chunk: usize) -> u64 {
    let mut s = SplitMix64(seed ^ 0x5CA1_E000);
    let mut h = s.next_u64();
    for v in [tensor as u64, step, chunk as u64] {
        h = SplitMix64(h ^ v.wrapping_mul(0xD6E8_FEB8_6659_FD93)).next_u64();
    }
    h
}

fn bf16_bits(x: f32) -> u16 {
    let u = x.to_bits();
    // Round to nearest even; generated values are finite.
    ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) as u16
}

fn bf16_value(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Weight,
    Norm,
    Bias,
}

impl Kind {
    /// Center and spread of the values.
    fn law(self) -> (f32, f32) {
        match self {
            Kind::Weight => (0.0, WEIGHT_STD),
            Kind::Norm => (1.0, 0.05),
            Kind::Bias => (0.0, 0.002),
        }
    }
}

#[derive(Debug, Clone)]
struct Spec {
    name: String,
    shape: Vec<u64>,
    kind: Kind,
}

impl Spec {
    fn bytes(&self) -> u64 {
        self.shape.iter().product::<u64>() * 2
    }
}

/// A model of about `gb` x 10^9 bytes: as many 32 MiB weights as fit, by layers of seven.
fn model(gb: f64) -> Vec<Spec> {
    let big = ((gb * 1e9 / BIG as f64).round() as u64).max(1);
    let mut out = Vec::new();
    let parts = [
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.down_proj",
    ];
    let mut made = 0u64;
    let mut layer = 0u64;
    while made < big {
        let p = format!("model.layers.{layer}");
        out.push(Spec {
            name: format!("{p}.input_layernorm.weight"),
            shape: vec![HIDDEN],
            kind: Kind::Norm,
        });
        for (i, part) in parts.iter().enumerate() {
            if made == big {
                break;
            }
            out.push(Spec {
                name: format!("{p}.{part}.weight"),
                shape: vec![HIDDEN, HIDDEN],
                kind: Kind::Weight,
            });
            made += 1;
            if i < 3 {
                out.push(Spec {
                    name: format!("{p}.{part}.bias"),
                    shape: vec![HIDDEN],
                    kind: Kind::Bias,
                });
            }
            if i == 3 {
                out.push(Spec {
                    name: format!("{p}.post_attention_layernorm.weight"),
                    shape: vec![HIDDEN],
                    kind: Kind::Norm,
                });
            }
        }
        layer += 1;
    }
    out.push(Spec {
        name: "model.norm.weight".into(),
        shape: vec![HIDDEN],
        kind: Kind::Norm,
    });
    out
}

/// Runs `f(chunk index, chunk)` over `CHUNK`-element chunks of `buf` (bf16, 2 bytes each)
/// on all cores.
fn par_chunks(buf: &mut [u8], f: impl Fn(usize, &mut [u8]) + Sync) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut groups: Vec<Vec<(usize, &mut [u8])>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, c) in buf.chunks_mut(CHUNK * 2).enumerate() {
        groups[i % threads].push((i, c));
    }
    std::thread::scope(|s| {
        for g in groups {
            let f = &f;
            s.spawn(move || {
                for (i, c) in g {
                    f(i, c);
                }
            });
        }
    });
}

/// Fills `buf` with step 1 of tensor `t`.
fn fill_first(buf: &mut [u8], seed: u64, t: usize, kind: Kind) {
    let (center, std) = kind.law();
    par_chunks(buf, |ci, c| {
        let mut rng = SplitMix64(chunk_seed(seed, t, 1, ci));
        for pair in c.chunks_mut(4) {
            let (a, b) = rng.normal_pair();
            let bits = [bf16_bits(center + std * a), bf16_bits(center + std * b)];
            for (dst, v) in pair.chunks_exact_mut(2).zip(bits) {
                dst.copy_from_slice(&v.to_le_bytes());
            }
        }
    });
}

/// Moves `buf` (step `step - 1` of tensor `t`) to step `step`.
fn drift(buf: &mut [u8], seed: u64, t: usize, step: u64, kind: Kind, drift: f32) {
    let scale = drift * kind.law().1;
    par_chunks(buf, |ci, c| {
        let mut rng = SplitMix64(chunk_seed(seed, t, step, ci));
        for pair in c.chunks_mut(4) {
            let (a, b) = rng.normal_pair();
            for (dst, n) in pair.chunks_exact_mut(2).zip([a, b]) {
                let old = bf16_value(u16::from_le_bytes([dst[0], dst[1]]));
                dst.copy_from_slice(&bf16_bits(old + scale * n).to_le_bytes());
            }
        }
    });
}

/// The safetensors header (length prefix included) of `specs` in order.
fn header(specs: &[Spec], meta: &[(&str, String)]) -> Res<Vec<u8>> {
    let mut h = serde_json::Map::new();
    let m: serde_json::Map<String, Value> = meta
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.clone())))
        .collect();
    h.insert("__metadata__".into(), Value::Object(m));
    let mut off = 0u64;
    for s in specs {
        h.insert(
            s.name.clone(),
            json!({"dtype": "BF16", "shape": s.shape, "data_offsets": [off, off + s.bytes()]}),
        );
        off += s.bytes();
    }
    let mut text = serde_json::to_vec(&Value::Object(h))?;
    text.resize(text.len().next_multiple_of(8), b' ');
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    Ok(out)
}

/// Writes `steps` files `{prefix}_{k}.safetensors` of the model, streaming: one tensor in
/// memory at a time. Returns their paths.
fn generate(
    dir: &Path,
    prefix: &str,
    specs: &[Spec],
    steps: u64,
    seed: u64,
    drift_scale: f32,
) -> Res<Vec<PathBuf>> {
    let paths: Vec<PathBuf> = (1..=steps)
        .map(|k| dir.join(format!("{prefix}_{k}.safetensors")))
        .collect();
    let mut files = Vec::new();
    for (k, p) in (1..=steps).zip(&paths) {
        let f = File::create(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let mut w = BufWriter::with_capacity(8 << 20, f);
        let meta = [
            ("format", "pt".to_string()),
            ("generator", "strata scale-bench".to_string()),
            ("seed", seed.to_string()),
            ("step", k.to_string()),
        ];
        w.write_all(&header(specs, &meta)?)?;
        files.push(w);
    }
    let mut buf = Vec::new();
    for (t, s) in specs.iter().enumerate() {
        buf.clear();
        buf.resize(s.bytes() as usize, 0);
        fill_first(&mut buf, seed, t, s.kind);
        for (k, w) in (1..=steps).zip(files.iter_mut()) {
            if k > 1 {
                drift(&mut buf, seed, t, k, s.kind, drift_scale);
            }
            w.write_all(&buf)?;
        }
    }
    for (w, p) in files.into_iter().zip(&paths) {
        let f = w
            .into_inner()
            .map_err(|e| format!("{}: {}", p.display(), e.error()))?;
        f.sync_all()?;
    }
    Ok(paths)
}

// ---------------------------------------------------------------------------------------
// Checking files
// ---------------------------------------------------------------------------------------

struct Entry {
    dtype: String,
    shape: Vec<u64>,
    start: u64,
    end: u64,
}

/// The tensors of a safetensors file (absolute byte ranges), by name.
fn read_header(path: &Path) -> Res<BTreeMap<String, Entry>> {
    let bad = |why: &str| format!("{}: not a valid safetensors file: {why}", path.display());
    let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let len = f.metadata()?.len();
    let mut n = [0u8; 8];
    f.read_exact_at(&mut n, 0).map_err(|_| bad("too short"))?;
    let n = u64::from_le_bytes(n);
    if n > MAX_HEADER || 8 + n > len {
        return Err(bad("header length").into());
    }
    let mut text = vec![0u8; n as usize];
    f.read_exact_at(&mut text, 8)?;
    let v: Value = serde_json::from_slice(&text).map_err(|e| bad(&e.to_string()))?;
    let obj = v
        .as_object()
        .ok_or_else(|| bad("header is not an object"))?;
    let mut out = BTreeMap::new();
    for (name, info) in obj {
        if name == "__metadata__" {
            continue;
        }
        let dtype = info["dtype"].as_str().ok_or_else(|| bad("dtype"))?;
        let shape: Option<Vec<u64>> = info["shape"]
            .as_array()
            .and_then(|a| a.iter().map(Value::as_u64).collect());
        let offs: Option<Vec<u64>> = info["data_offsets"]
            .as_array()
            .and_then(|a| a.iter().map(Value::as_u64).collect());
        let (Some(shape), Some(offs)) = (shape, offs) else {
            return Err(bad(&format!("shape or offsets of {name}")).into());
        };
        let [a, b] = offs[..] else {
            return Err(bad(&format!("offsets of {name}")).into());
        };
        if a > b || 8 + n + b > len {
            return Err(bad(&format!("offsets of {name} outside the file")).into());
        }
        out.insert(
            name.clone(),
            Entry {
                dtype: dtype.to_string(),
                shape,
                start: 8 + n + a,
                end: 8 + n + b,
            },
        );
    }
    Ok(out)
}

/// Checks that `b` holds the same tensors as `a`, bit for bit, reading both a chunk at a
/// time. Returns the tensor bytes compared.
fn same_tensors(a: &Path, b: &Path) -> Res<u64> {
    let (ha, hb) = (read_header(a)?, read_header(b)?);
    let (fa, fb) = (File::open(a)?, File::open(b)?);
    let mut extra: Vec<&String> = hb.keys().filter(|k| !ha.contains_key(*k)).collect();
    if let Some(name) = extra.pop() {
        return Err(format!(
            "{} has a tensor {name} that {} lacks",
            b.display(),
            a.display()
        )
        .into());
    }
    let mut ba = vec![0u8; CMP_CHUNK];
    let mut bb = vec![0u8; CMP_CHUNK];
    let mut total = 0u64;
    for (name, ea) in &ha {
        let eb = hb
            .get(name)
            .ok_or_else(|| format!("{} lacks tensor {name}", b.display()))?;
        if ea.dtype != eb.dtype || ea.shape != eb.shape || ea.end - ea.start != eb.end - eb.start {
            return Err(format!(
                "{name}: {} {:?} in {}, {} {:?} in {}",
                ea.dtype,
                ea.shape,
                a.display(),
                eb.dtype,
                eb.shape,
                b.display()
            )
            .into());
        }
        let len = ea.end - ea.start;
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(CMP_CHUNK as u64) as usize;
            fa.read_exact_at(&mut ba[..n], ea.start + at)?;
            fb.read_exact_at(&mut bb[..n], eb.start + at)?;
            if ba[..n] != bb[..n] {
                let i = ba[..n].iter().zip(&bb[..n]).position(|(x, y)| x != y);
                return Err(format!(
                    "{name}: {} and {} differ at byte {} of the tensor",
                    a.display(),
                    b.display(),
                    at + i.unwrap_or(0) as u64
                )
                .into());
            }
            at += n as u64;
        }
        total += len;
    }
    Ok(total)
}

// ---------------------------------------------------------------------------------------
// Measuring processes
// ---------------------------------------------------------------------------------------

/// What one child process took.
#[derive(Debug, Clone)]
struct Run {
    secs: f64,
    /// Peak resident set of the child (`ru_maxrss` from `wait4`), bytes.
    rss: u64,
    stdout: String,
    /// The child ran past its time limit and was killed.
    timed_out: bool,
}

/// Runs of each export and load: one run's time on a shared machine can be several times
/// another's (a write after a large file was deleted waits for its blocks' discard).
const TIMED_RUNS: usize = 3;

/// `run(k)` for k in `0..TIMED_RUNS`, and the run of median wall time.
fn median_run(mut run: impl FnMut(usize) -> Res<Run>) -> Res<Run> {
    let mut runs = (0..TIMED_RUNS).map(&mut run).collect::<Res<Vec<Run>>>()?;
    runs.sort_by(|a, b| a.secs.total_cmp(&b.secs));
    Ok(runs.swap_remove(TIMED_RUNS / 2))
}

/// Runs `cmd` to completion, its output into files of `logs`, and returns its wall time
/// and peak RSS. A failing command is an error with its stderr.
fn measure(cmd: &mut Command, logs: &Path, label: &str) -> Res<Run> {
    measure_within(cmd, logs, label, None)
}

/// [`measure`], killing the command (SIGKILL) if it runs longer than `limit`: the run then
/// has `timed_out` set and is no error.
///
/// The command is started by a small process, this example re-run with `--child-run`, which
/// times it and reads its `ru_maxrss`: Linux counts in a child's `ru_maxrss` the resident
/// size of the process that forked it (the memory it starts from before `exec`), so a
/// child of this process, which holds generated data and open stores, would report at
/// least this process's peak.
fn measure_within(
    cmd: &mut Command,
    logs: &Path,
    label: &str,
    limit: Option<std::time::Duration>,
) -> Res<Run> {
    let out_path = logs.join(format!("{label}.out"));
    let err_path = logs.join(format!("{label}.err"));
    let result_path = logs.join(format!("{label}.rusage.json"));
    let limit_ms = limit.map_or(0, |l| l.as_millis().max(1));
    let mut outer = Command::new(std::env::current_exe()?);
    outer
        .arg("--child-run")
        .arg(&result_path)
        .arg(limit_ms.to_string())
        .arg("--")
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .stdin(Stdio::null())
        .stdout(File::create(&out_path)?)
        .stderr(File::create(&err_path)?);
    let status = outer
        .status()
        .map_err(|e| format!("{label}: cannot start {:?}: {e}", outer.get_program()))?;
    let stderr = || std::fs::read_to_string(&err_path).unwrap_or_default();
    if !status.success() {
        return Err(format!("{label}: measuring {cmd:?} failed: {}", stderr().trim()).into());
    }
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&result_path)?)
        .map_err(|e| format!("{label}: bad {}: {e}", result_path.display()))?;
    let timed_out = r["timed_out"] == json!(true);
    let code = r["code"].as_i64();
    if code != Some(0) && !timed_out {
        return Err(format!(
            "{label}: {cmd:?} failed ({}): {}",
            code.map_or("killed by a signal".to_string(), |c| format!("exit {c}")),
            stderr().trim()
        )
        .into());
    }
    Ok(Run {
        secs: r["seconds"].as_f64().unwrap_or(f64::NAN),
        rss: r["peak_rss_bytes"].as_u64().unwrap_or(0),
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        timed_out,
    })
}

/// `--child-run RESULT LIMIT_MS -- PROGRAM ARGS...`: runs the program (stdio inherited),
/// killing it after LIMIT_MS milliseconds (0: no limit), and writes its wall time, exit code
/// and peak RSS to RESULT as JSON.
fn child_run(argv: &[String]) -> Res<()> {
    let usage = "--child-run RESULT LIMIT_MS -- PROGRAM ARGS...";
    let (Some(result), Some(limit), Some("--"), Some(program)) = (
        argv.first(),
        argv.get(1),
        argv.get(2).map(String::as_str),
        argv.get(3),
    ) else {
        return Err(usage.into());
    };
    let limit: u64 = limit.parse().map_err(|_| usage)?;
    let limit = (limit > 0).then(|| std::time::Duration::from_millis(limit));
    let mut cmd = Command::new(program);
    cmd.args(&argv[4..]);
    let t = Instant::now();
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    let pid = libc::pid_t::try_from(child.id())?;
    let (code, rss, timed_out) = match limit {
        None => {
            let (code, rss) = wait_rusage(pid, 0)?.ok_or("wait4 returned no child")?;
            (code, rss, false)
        }
        Some(limit) => loop {
            if let Some((code, rss)) = wait_rusage(pid, libc::WNOHANG)? {
                break (code, rss, false);
            }
            if t.elapsed() > limit {
                // SAFETY: `pid` is our own child, not reaped yet (the poll above found it
                // running), so the id cannot belong to another process.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                let (code, rss) = wait_rusage(pid, 0)?.ok_or("wait4 returned no child")?;
                break (code, rss, true);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        },
    };
    let secs = t.elapsed().as_secs_f64();
    drop(child);
    let doc = json!({"seconds": secs, "code": code, "peak_rss_bytes": rss, "timed_out": timed_out});
    std::fs::write(result, doc.to_string()).map_err(|e| format!("{result}: {e}"))?;
    Ok(())
}

/// Waits for child `pid` (`flags` 0 or `WNOHANG`) and returns its exit code (`None` if a
/// signal ended it) and its peak RSS in bytes; `None` if it is still running (`WNOHANG`).
fn wait_rusage(pid: libc::pid_t, flags: libc::c_int) -> Res<Option<(Option<i32>, u64)>> {
    let mut status: libc::c_int = 0;
    // SAFETY: `rusage` is a plain C struct of integers, for which all zeros is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is a child of this process that nothing else waits for (the
        // `std::process::Child` is never waited on), and `status` and `ru` are valid for
        // writes for the duration of the call.
        let r = unsafe { libc::wait4(pid, &mut status, flags, &mut ru) };
        if r == pid {
            break;
        }
        if r == 0 {
            return Ok(None);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("wait4: {e}").into());
        }
    }
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    // ru_maxrss is in KiB on Linux.
    Ok(Some((code, (ru.ru_maxrss.max(0) as u64) * 1024)))
}

/// One measured operation, as it goes into the JSON document.
#[derive(Debug, Clone)]
struct Op {
    op: String,
    model: String,
    step: Option<u64>,
    depth: Option<u8>,
    secs: f64,
    rss: Option<u64>,
    bytes_in: u64,
    bytes_out: u64,
    /// Raw tensor bytes the GB/s is computed on.
    raw: u64,
    command: String,
    /// Time reported by the command itself (e.g. `read_ms` of `strata get --json`).
    inner_secs: Option<f64>,
    /// Wall time of the whole process when `secs` is timed inside it (ZipNN's python).
    process_secs: Option<f64>,
    note: String,
}

impl Op {
    fn gbps(&self) -> f64 {
        self.raw as f64 / 1e9 / self.secs.max(1e-9)
    }

    fn to_json(&self) -> Value {
        json!({
            "op": self.op,
            "model": self.model,
            "step": self.step,
            "depth": self.depth,
            "seconds": self.secs,
            "peak_rss_bytes": self.rss,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "raw_bytes": self.raw,
            "gbps": self.gbps(),
            "inner_seconds": self.inner_secs,
            "process_seconds": self.process_secs,
            "command": self.command,
            "note": self.note,
        })
    }
}

/// Everything one run measured.
#[derive(Debug, Default)]
struct Report {
    ops: Vec<Op>,
    notes: Vec<String>,
    verified: Vec<Value>,
    stores: Vec<Value>,
    many: Vec<Value>,
    small: Option<Value>,
}

impl Report {
    fn find(&self, op: &str, model: &str) -> Option<&Op> {
        self.ops.iter().find(|o| o.op == op && o.model == model)
    }
}

fn file_len(p: &Path) -> Res<u64> {
    Ok(std::fs::metadata(p)
        .map_err(|e| format!("{}: {e}", p.display()))?
        .len())
}

fn remove(p: &Path) {
    let _ = std::fs::remove_file(p);
}

fn rel(p: &Path, dir: &Path) -> String {
    p.strip_prefix(dir).unwrap_or(p).display().to_string()
}

/// The `strata` binary: `--strata`, or the workspace's release build, built now.
fn strata_binary(a: &Args) -> Res<PathBuf> {
    if let Some(p) = &a.strata {
        return Ok(p.clone());
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "-q",
            "-p",
            "strata-cli",
            "--bin",
            "strata",
        ])
        .current_dir(root())
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run cargo to build strata: {e}"))?;
    if !status.success() {
        return Err("cargo build --release -p strata-cli failed".into());
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or(root().join("target"), PathBuf::from);
    let p = target.join("release/strata");
    if !p.is_file() {
        return Err(format!("{} is missing after the build", p.display()).into());
    }
    Ok(p)
}

/// Free bytes on the file system holding `dir` (`df`).
fn free_bytes(dir: &Path) -> Option<u64> {
    let out = Command::new("df").arg("-Pk").arg(dir).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let line = text.lines().nth(1)?;
    let kb: u64 = line.split_whitespace().nth(3)?.parse().ok()?;
    Some(kb * 1024)
}

// ---------------------------------------------------------------------------------------
// The big-checkpoint part
// ---------------------------------------------------------------------------------------

struct Ctx<'a> {
    a: &'a Args,
    strata: PathBuf,
    dir: PathBuf,
    logs: PathBuf,
    report: Report,
    label: usize,
    /// The python of `--strata-python` if it imports the `strata` package (checked once).
    strata_python: Option<PathBuf>,
}

impl Ctx<'_> {
    fn label(&mut self, what: &str) -> String {
        self.label += 1;
        format!("{:03}-{what}", self.label)
    }

    fn strata(&mut self, what: &str, args: &[&std::ffi::OsStr]) -> Res<Run> {
        let label = self.label(what);
        let mut cmd = Command::new(&self.strata);
        cmd.args(args);
        measure(&mut cmd, &self.logs, &label)
    }

    /// The store's file size, in-process (no other process holds it).
    fn store_stats(&mut self, store: &Path, model: &str, after: &str) -> Res<()> {
        let s = Store::open(store)?.stats()?;
        self.report.stores.push(json!({
            "model": model,
            "after": after,
            "raw_bytes": s.raw_bytes,
            "file_bytes": s.file_bytes,
            "disk_bytes": s.disk_bytes,
            "segment_bytes": s.segment_bytes,
            "metadata_bytes": s.metadata_bytes,
            "versions": s.versions,
            "ratio": s.ratio(),
        }));
        Ok(())
    }

    /// Deepest chain depth of each version of `tensor`.
    fn depths(&self, store: &Path, tensor: &str) -> Res<BTreeMap<u64, u8>> {
        let s = Store::open(store)?;
        Ok(s.versions(tensor)?
            .into_iter()
            .map(|v| {
                let d = v.encodings.iter().map(|e| e.depth).max().unwrap_or(0);
                (v.step, d)
            })
            .collect())
    }

    fn import(&mut self, store: &Path, file: &Path, step: u64, model: &str) -> Res<()> {
        let raw = tensor_bytes(file)?;
        let before = if store.exists() { file_len(store)? } else { 0 };
        let run = self.strata(
            &format!("import-{model}-{step}"),
            &[
                "-q".as_ref(),
                "import".as_ref(),
                store.as_os_str(),
                file.as_os_str(),
                "--step".as_ref(),
                step.to_string().as_ref(),
            ],
        )?;
        let after = file_len(store)?;
        let what = if step == 1 { "keyframes" } else { "deltas" };
        self.report.ops.push(Op {
            op: format!("import {what}"),
            model: model.into(),
            step: Some(step),
            depth: None,
            secs: run.secs,
            rss: Some(run.rss),
            bytes_in: file_len(file)?,
            bytes_out: after.saturating_sub(before),
            raw,
            command: format!(
                "strata -q import STORE {} --step {step}",
                rel(file, &self.dir)
            ),
            inner_secs: None,
            process_secs: None,
            note: "includes the CLI's compaction at the end".into(),
        });
        self.store_stats(store, model, &format!("import of step {step}"))
    }

    /// `strata export`, then the exported file is compared with `original`.
    fn export(
        &mut self,
        store: &Path,
        original: &Path,
        step: u64,
        depth: u8,
        model: &str,
    ) -> Res<()> {
        let out = self.dir.join(format!("export-{model}-{step}.safetensors"));
        let run = median_run(|k| {
            if k > 0 {
                remove(&out);
            }
            self.strata(
                &format!("export-{model}-{step}-{k}"),
                &[
                    "-q".as_ref(),
                    "export".as_ref(),
                    store.as_os_str(),
                    "--step".as_ref(),
                    step.to_string().as_ref(),
                    "-o".as_ref(),
                    out.as_os_str(),
                ],
            )
        })?;
        let checked = same_tensors(original, &out);
        let bytes_out = file_len(&out).unwrap_or(0);
        remove(&out);
        let checked = checked?;
        self.report.verified.push(json!({
            "what": format!("export of step {step} ({model}) = generated file"),
            "tensor_bytes": checked,
            "ok": true,
        }));
        self.report.ops.push(Op {
            op: if depth <= 1 {
                "export keyframes".into()
            } else {
                format!("export depth {depth}")
            },
            model: model.into(),
            step: Some(step),
            depth: Some(depth),
            secs: run.secs,
            rss: Some(run.rss),
            bytes_in: file_len(store)?,
            bytes_out,
            raw: checked,
            command: format!("strata -q export STORE --step {step} -o OUT.safetensors"),
            inner_secs: None,
            process_secs: None,
            note: "fsynced, then checked bit for bit against the generated file".into(),
        });
        Ok(())
    }

    /// A whole checkpoint through `Store::read_checkpoint`, in a child process (this
    /// example with `--child-load`).
    fn load(&mut self, store: &Path, step: u64, depth: u8, model: &str) -> Res<()> {
        let exe = std::env::current_exe()?;
        let (run, v) = self.median_json(&format!("load-{model}-{step}"), || {
            let mut cmd = Command::new(&exe);
            cmd.arg("--child-load").arg(store).arg(step.to_string());
            cmd
        })?;
        let raw = v["bytes"].as_u64().unwrap_or(0);
        self.report.ops.push(Op {
            op: load_op("load", depth),
            model: model.into(),
            step: Some(step),
            depth: Some(depth),
            secs: run.secs,
            rss: Some(run.rss),
            bytes_in: file_len(store)?,
            bytes_out: raw,
            raw,
            command: format!("Store::read_checkpoint({step}), every tensor (a child process)"),
            inner_secs: v["seconds"].as_f64(),
            process_secs: None,
            note: "tensors decoded and dropped one by one".into(),
        });
        Ok(())
    }

    /// The run of median time of `what` (a command made by `cmd`, run [`TIMED_RUNS`] times) and
    /// the JSON line it printed.
    fn median_json(&mut self, what: &str, mut cmd: impl FnMut() -> Command) -> Res<(Run, Value)> {
        let run = median_run(|k| {
            let label = self.label(&format!("{what}-{k}"));
            measure(&mut cmd(), &self.logs, &label)
        })?;
        let v: Value = serde_json::from_str(run.stdout.trim())
            .map_err(|e| format!("{what}: bad output {:?}: {e}", run.stdout))?;
        Ok((run, v))
    }

    /// A whole checkpoint through the Python package's `load_checkpoint` (NumPy arrays), in
    /// a python process of the package's venv, reported as operation `op`; each array is
    /// then compared with `file`. Skipped where no python has the package (a note says so).
    fn python_load(
        &mut self,
        store: &Path,
        file: &Path,
        step: u64,
        depth: u8,
        model: &str,
        op: String,
    ) -> Res<()> {
        let Some(py) = self.strata_python.clone() else {
            return Ok(());
        };
        let script = self.dir.join("strata_load.py");
        std::fs::write(&script, PY_LOAD_SCRIPT)?;
        let run = self.median_json(&format!("python-load-{model}-{step}"), || {
            let mut cmd = Command::new(&py);
            cmd.arg(&script).arg(store).arg(step.to_string()).arg(file);
            cmd
        });
        remove(&script);
        let (run, v) = run?;
        let raw = v["bytes"].as_u64().unwrap_or(0);
        self.report.ops.push(Op {
            op,
            model: model.into(),
            step: Some(step),
            depth: Some(depth),
            secs: v["seconds"].as_f64().unwrap_or(f64::NAN),
            rss: Some(run.rss),
            bytes_in: file_len(store)?,
            bytes_out: raw,
            raw,
            command: format!("strata.open_read_only(STORE).load_checkpoint({step}) (python)"),
            inner_secs: None,
            process_secs: Some(run.secs),
            note: format!(
                "NumPy arrays; seconds exclude python's start and imports (the process took \
                 {:.2} s, {:.0} MiB of its peak RSS were there after the imports)",
                run.secs,
                v["rss_after_import"].as_f64().unwrap_or(0.0) / (1 << 20) as f64
            ),
        });
        self.report.verified.push(json!({
            "what": format!("Python load_checkpoint of step {step} ({model}) = generated file"),
            "tensor_bytes": raw,
            "ok": true,
        }));
        Ok(())
    }

    fn cp_sync(&mut self, file: &Path, model: &str) -> Res<()> {
        let dest = self.dir.join("cp-copy.safetensors");
        let label = self.label(&format!("cp-{model}"));
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("cp \"$1\" \"$2\" && sync")
            .arg("sh")
            .arg(file)
            .arg(&dest);
        let run = measure(&mut cmd, &self.logs, &label);
        remove(&dest);
        let run = run?;
        let n = file_len(file)?;
        self.report.ops.push(Op {
            op: "cp + sync".into(),
            model: model.into(),
            step: Some(1),
            depth: None,
            secs: run.secs,
            rss: None,
            bytes_in: n,
            bytes_out: n,
            raw: tensor_bytes(file)?,
            command: format!("cp {} DEST && sync", rel(file, &self.dir)),
            inner_secs: None,
            process_secs: None,
            note: "same disk; time only".into(),
        });
        Ok(())
    }

    fn zipnn(&mut self, file: &Path, model: &str) -> Res<()> {
        if !self.a.python.is_file() {
            self.report.notes.push(format!(
                "ZipNN skipped: no {} (benches/compare/run.sh or benches/readme_tables.py makes the venv)",
                self.a.python.display()
            ));
            return Ok(());
        }
        let script = self.dir.join("zipnn_bench.py");
        std::fs::write(&script, ZIPNN_SCRIPT)?;
        let znn = self.dir.join("zipnn.znn");
        let back = self.dir.join("zipnn-back.safetensors");
        let result = (|| -> Res<()> {
            for (mode, src, dst) in [("compress", file, &znn), ("decompress", &znn, &back)] {
                let label = self.label(&format!("zipnn-{mode}"));
                let mut cmd = Command::new(&self.a.python);
                cmd.arg(&script).arg(mode).arg(src).arg(dst);
                let run = measure(&mut cmd, &self.logs, &label)?;
                let v: Value = serde_json::from_str(run.stdout.trim())
                    .map_err(|e| format!("{label}: bad output {:?}: {e}", run.stdout))?;
                let secs = v["seconds"].as_f64().unwrap_or(f64::NAN);
                self.report.ops.push(Op {
                    op: format!("ZipNN {mode}"),
                    model: model.into(),
                    step: Some(1),
                    depth: None,
                    secs,
                    rss: Some(run.rss),
                    bytes_in: file_len(src)?,
                    bytes_out: file_len(dst)?,
                    raw: v["raw_bytes"].as_u64().unwrap_or(0),
                    command: format!(
                        "python zipnn_bench.py {mode} {} {}",
                        rel(src, &self.dir),
                        rel(dst, &self.dir)
                    ),
                    inner_secs: None,
                    process_secs: Some(run.secs),
                    note: format!(
                        "zipnn {}, per tensor, default threads, output fsynced; seconds exclude \
                         python and zipnn's import (the process took {:.2} s, {:.0} MiB of its \
                         peak RSS were there after the import)",
                        v["zipnn"].as_str().unwrap_or("?"),
                        run.secs,
                        v["rss_after_import"].as_f64().unwrap_or(0.0) / (1 << 20) as f64
                    ),
                });
            }
            let n = same_tensors(file, &back)?;
            self.report.verified.push(json!({
                "what": "ZipNN decompress = generated file",
                "tensor_bytes": n,
                "ok": true,
            }));
            Ok(())
        })();
        remove(&znn);
        remove(&back);
        result
    }
}

/// Tensor bytes of a safetensors file (the file less its header).
fn tensor_bytes(p: &Path) -> Res<u64> {
    Ok(read_header(p)?.values().map(|e| e.end - e.start).sum())
}

/// The name of a whole-checkpoint load's operation: `PREFIX keyframes` at depth 1, else
/// `PREFIX depth D`.
fn load_op(prefix: &str, depth: u8) -> String {
    if depth <= 1 {
        format!("{prefix} keyframes")
    } else {
        format!("{prefix} depth {depth}")
    }
}

/// `python` if it is a file that imports the `strata` package.
fn python_with_strata(python: &Path) -> Option<PathBuf> {
    let imports = python.is_file()
        && Command::new(python)
            .args(["-c", "import strata"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    imports.then(|| python.to_path_buf())
}

/// Loads a checkpoint with the Python package (`load_checkpoint`, NumPy arrays), timed
/// inside the process, then compares every array's bytes, dtype width and shape with the
/// safetensors file it was imported from. Prints one JSON line; exits 1 on a difference.
const PY_LOAD_SCRIPT: &str = r#"import json, resource, struct, sys, time
store, step, src = sys.argv[1], int(sys.argv[2]), sys.argv[3]
import numpy as np
import strata
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
t0 = time.perf_counter()
with strata.open_read_only(store) as st:
    arrays = st.load_checkpoint(step)
seconds = time.perf_counter() - t0
with open(src, "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(n))
    base = 8 + n
    meta = {k: v for k, v in header.items() if k != "__metadata__"}
    if sorted(meta) != sorted(arrays):
        sys.exit(f"tensor names differ: {sorted(set(meta) ^ set(arrays))[:5]}")
    for name, e in meta.items():
        a = arrays[name]
        lo, hi = e["data_offsets"]
        f.seek(base + lo)
        if list(a.shape) != e["shape"] or a.nbytes != hi - lo or a.tobytes() != f.read(hi - lo):
            sys.exit(f"tensor {name} differs from {src}")
print(json.dumps({"seconds": seconds, "bytes": sum(a.nbytes for a in arrays.values()),
                  "rss_after_import": rss0}))
"#;

/// Compresses or decompresses a safetensors file tensor by tensor with ZipNN (the
/// comparison harness's configuration: byte input, the tensor's dtype, default threads).
/// The .znn file is the header, then per tensor a u64 length and the compressed bytes;
/// decompress writes the original layout back. Prints one JSON line.
const ZIPNN_SCRIPT: &str = r#"import json, os, resource, struct, sys, time
mode, src, dst = sys.argv[1:4]
from importlib.metadata import version
from zipnn import ZipNN
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
DT = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}
codecs = {}
def z(dt):
    key = DT[dt]
    if key not in codecs:
        codecs[key] = ZipNN(input_format="byte", bytearray_dtype=key)
    return codecs[key]
t0 = time.perf_counter()
raw = 0
with open(src, "rb") as f, open(dst, "wb") as g:
    n = struct.unpack("<Q", f.read(8))[0]
    head = f.read(n)
    g.write(struct.pack("<Q", n)); g.write(head)
    meta = json.loads(head)
    items = sorted((v["data_offsets"][0], v["data_offsets"][1], v["dtype"])
                   for k, v in meta.items() if k != "__metadata__")
    for a, b, dt in items:
        if mode == "compress":
            buf = bytearray(b - a)  # a fresh copy: ZipNN rewrites its input in place
            if f.readinto(buf) != b - a:
                sys.exit("short read")
            blob = z(dt).compress(buf)
            g.write(struct.pack("<Q", len(blob))); g.write(blob)
        else:
            m = struct.unpack("<Q", f.read(8))[0]
            out = z(dt).decompress(f.read(m))
            if len(out) != b - a:
                sys.exit("decompressed size differs")
            g.write(out)
        raw += b - a
    g.flush(); os.fsync(g.fileno())
secs = time.perf_counter() - t0
print(json.dumps({"seconds": secs, "raw_bytes": raw, "rss_after_import": rss0,
                  "zipnn": version("zipnn")}))
"#;

/// The big-checkpoint and deep-chain measurements.
fn big(ctx: &mut Ctx<'_>) -> Res<Value> {
    let a = ctx.a.clone();
    let dir = ctx.dir.clone();
    let specs = model(a.gb);
    let raw: u64 = specs.iter().map(Spec::bytes).sum();
    let bigs = specs.iter().filter(|s| s.shape.len() == 2).count();
    let t = Instant::now();
    let files = generate(&dir, "main", &specs, a.steps, a.seed, a.drift)?;
    let gen_secs = t.elapsed().as_secs_f64();
    let mut info = json!({
        "main": {
            "tensors": specs.len(),
            "weights_4096x4096": bigs,
            "raw_bytes": raw,
            "file_bytes": file_len(&files[0])?,
            "steps": a.steps,
            "generate_seconds": gen_secs,
        }
    });
    let store = dir.join("main.strata");
    remove(&store);

    ctx.cp_sync(&files[0], "main")?;
    for (k, f) in (1..).zip(&files) {
        ctx.import(&store, f, k, "main")?;
    }
    let probe = specs
        .iter()
        .find(|s| s.shape.len() == 2)
        .map(|s| s.name.clone())
        .ok_or("the model has no 4096 x 4096 tensor")?;
    let depths = ctx.depths(&store, &probe)?;
    for (k, f) in (1..).zip(&files) {
        let d = depths.get(&k).copied().unwrap_or(0);
        ctx.export(&store, f, k, d, "main")?;
    }
    // The newest checkpoint kept as keyframes (ADR 0006): step 1 when every later one is
    // a delta, the newest when writes re-encode their predecessors against it.
    let (&key_step, &key_depth) = depths
        .iter()
        .rev()
        .find(|(_, d)| **d <= 1)
        .or_else(|| depths.iter().next())
        .ok_or("no versions of the probe tensor")?;
    ctx.load(&store, key_step, key_depth, "main")?;
    let key_file = files
        .get((key_step - 1) as usize)
        .ok_or("the keyframe step outside the files")?;
    let op = load_op("python load", key_depth);
    ctx.python_load(&store, key_file, key_step, key_depth, "main", op)?;
    if a.zipnn {
        ctx.zipnn(&files[0], "main")?;
    } else {
        ctx.report.notes.push("ZipNN skipped (--no-zipnn)".into());
    }

    if a.chain {
        let on_main = a.steps >= a.chain_steps;
        let (cstore, cfiles, cspecs, model_name) = if on_main {
            (store.clone(), files.clone(), specs.clone(), "main")
        } else {
            let cgb = a.chain_gb.unwrap_or(a.gb.min(0.5));
            let cspecs = model(cgb);
            let t = Instant::now();
            let cfiles = generate(&dir, "chain", &cspecs, a.chain_steps, a.seed + 1, a.drift)?;
            info["chain"] = json!({
                "tensors": cspecs.len(),
                "weights_4096x4096": cspecs.iter().filter(|s| s.shape.len() == 2).count(),
                "raw_bytes": cspecs.iter().map(Spec::bytes).sum::<u64>(),
                "steps": a.chain_steps,
                "generate_seconds": t.elapsed().as_secs_f64(),
            });
            let cstore = dir.join("chain.strata");
            remove(&cstore);
            for (k, f) in (1..).zip(&cfiles) {
                ctx.import(&cstore, f, k, "chain")?;
            }
            (cstore, cfiles, cspecs, "chain")
        };
        ctx.report.notes.push(if on_main {
            format!("deep-chain figures on the main model ({} steps)", a.steps)
        } else {
            format!(
                "deep-chain figures on a separate {:.2} GB model of {} steps (importing {} x {} GB would be slow)",
                a.chain_gb.unwrap_or(a.gb.min(0.5)),
                a.chain_steps,
                a.chain_steps,
                a.gb
            )
        });
        let tensor = cspecs
            .iter()
            .find(|s| s.shape.len() == 2)
            .map(|s| s.name.clone())
            .ok_or("the chain model has no 4096 x 4096 tensor")?;
        let depths = ctx.depths(&cstore, &tensor)?;
        let (&deep_step, &deep) = depths
            .iter()
            .max_by_key(|(s, d)| (**d, std::cmp::Reverse(**s)))
            .ok_or("no versions")?;
        if deep < MAX_CHAIN {
            ctx.report.notes.push(format!(
                "the deepest version of {tensor} has depth {deep}, below max_chain {MAX_CHAIN}"
            ));
        }
        info["deep"] =
            json!({"tensor": tensor, "step": deep_step, "depth": deep, "depths": depths});
        let cfile = cfiles
            .get((deep_step - 1) as usize)
            .ok_or("deep step outside the files")?
            .clone();
        if !on_main || deep_step > a.steps {
            ctx.export(&cstore, &cfile, deep_step, deep, model_name)?;
        }
        ctx.load(&cstore, deep_step, deep, model_name)?;
        let op = load_op("python load", deep);
        ctx.python_load(&cstore, &cfile, deep_step, deep, model_name, op)?;
        // The newest checkpoint after the whole history: what a resume loads.
        if let Some((&newest, &newest_depth)) = depths.iter().next_back() {
            let nfile = cfiles
                .get((newest - 1) as usize)
                .ok_or("the newest step outside the files")?;
            let op = format!(
                "python load newest ({} steps), depth {newest_depth}",
                depths.len()
            );
            ctx.python_load(&cstore, nfile, newest, newest_depth, model_name, op)?;
        }
        get(ctx, &cstore, &tensor, deep_step, deep, model_name, None)?;
        let npy = dir.join("x.npy");
        get(
            ctx,
            &cstore,
            &tensor,
            deep_step,
            deep,
            model_name,
            Some(&npy),
        )?;
        remove(&npy);
        // One element in the middle of the tensor and in the middle of its block (1 MiB of
        // bf16 by default): a history read decodes each block up to the element, so one
        // near a block's start would cost next to nothing, and this one the average.
        let index = HIDDEN * (HIDDEN / 2) + (1 << 18) + 17;
        let (&first, &last) = (
            depths.keys().next().ok_or("no versions")?,
            depths.keys().next_back().ok_or("no versions")?,
        );
        let run = median_run(|_| {
            ctx.strata(
                "history",
                &[
                    "history".as_ref(),
                    cstore.as_os_str(),
                    tensor.as_ref(),
                    "--index".as_ref(),
                    index.to_string().as_ref(),
                    "--from".as_ref(),
                    first.to_string().as_ref(),
                    "--to".as_ref(),
                    last.to_string().as_ref(),
                    "--json".as_ref(),
                ],
            )
        })?;
        let v: Value = serde_json::from_str(&run.stdout)?;
        let versions = v["versions"].as_array().map_or(0, Vec::len) as u64;
        ctx.report.ops.push(Op {
            op: format!("history of 1 element, {versions} versions"),
            model: model_name.into(),
            step: None,
            depth: Some(deep),
            secs: run.secs,
            rss: Some(run.rss),
            bytes_in: 0,
            bytes_out: versions * 2,
            raw: versions * 2,
            command: format!(
                "strata history STORE {tensor} --index {index} --from {first} --to {last} --json"
            ),
            inner_secs: v["read_ms"].as_f64().map(|ms| ms / 1e3),
            process_secs: None,
            note: format!("{versions} versions"),
        });
        if !a.keep && !on_main {
            for f in &cfiles {
                remove(f);
            }
            remove(&cstore);
        }
    }
    if !a.keep {
        for f in &files {
            remove(f);
        }
        remove(&store);
    }
    Ok(info)
}

/// `strata get` of one tensor, summary only or into a `.npy` file.
fn get(
    ctx: &mut Ctx<'_>,
    store: &Path,
    tensor: &str,
    step: u64,
    depth: u8,
    model: &str,
    npy: Option<&Path>,
) -> Res<()> {
    let step_s = step.to_string();
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "get".as_ref(),
        store.as_os_str(),
        tensor.as_ref(),
        "--step".as_ref(),
        step_s.as_ref(),
        "--json".as_ref(),
    ];
    if let Some(p) = npy {
        args.extend(["-o".as_ref(), p.as_os_str()]);
    }
    let what = if npy.is_some() { "get-npy" } else { "get" };
    let run = median_run(|_| ctx.strata(what, &args))?;
    let v: Value = serde_json::from_str(&run.stdout)?;
    let bytes = v["bytes"].as_u64().unwrap_or(0);
    ctx.report.ops.push(Op {
        op: format!(
            "get 32 MiB tensor{}, depth {depth}",
            if npy.is_some() { " to .npy" } else { "" }
        ),
        model: model.into(),
        step: Some(step),
        depth: Some(depth),
        secs: run.secs,
        rss: Some(run.rss),
        bytes_in: 0,
        bytes_out: npy.map_or(0, |p| file_len(p).unwrap_or(0)),
        raw: bytes,
        command: format!(
            "strata get STORE {tensor} --step {step} --json{}",
            if npy.is_some() { " -o x.npy" } else { "" }
        ),
        inner_secs: v["read_ms"].as_f64().map(|ms| ms / 1e3),
        process_secs: None,
        note: "inner = read_ms the command reports (after opening the store)".into(),
    });
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Many checkpoints of small tensors
// ---------------------------------------------------------------------------------------

const SMALL_TENSORS: usize = 300;
const SMALL_VALUES: usize = 256;

/// A model of 300 tensors of 256 f32 values that drifts a little every step.
struct SmallModel {
    names: Vec<String>,
    values: Vec<Vec<f32>>,
    bytes: Vec<Vec<u8>>,
    rng: SplitMix64,
}

impl SmallModel {
    fn new(seed: u64) -> SmallModel {
        let mut rng = SplitMix64(seed ^ 0x000A_11CE);
        let names = (0..SMALL_TENSORS)
            .map(|i| format!("blocks.{:02}.param{}", i / 10, i % 10))
            .collect();
        let values = (0..SMALL_TENSORS)
            .map(|_| {
                (0..SMALL_VALUES / 2)
                    .flat_map(|_| {
                        let (a, b) = rng.normal_pair();
                        [a * WEIGHT_STD, b * WEIGHT_STD]
                    })
                    .collect()
            })
            .collect();
        let mut m = SmallModel {
            names,
            values,
            bytes: Vec::new(),
            rng,
        };
        m.encode();
        m
    }

    fn encode(&mut self) {
        self.bytes = self
            .values
            .iter()
            .map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect())
            .collect();
    }

    fn step(&mut self) {
        for v in &mut self.values {
            for pair in v.chunks_mut(2) {
                let (a, b) = self.rng.normal_pair();
                for (x, n) in pair.iter_mut().zip([a, b]) {
                    *x += 1e-3 * WEIGHT_STD * n;
                }
            }
        }
        self.encode();
    }

    fn save(&self, store: &Store, step: u64) -> Res<()> {
        let shape = [SMALL_VALUES as u64];
        let tensors: Vec<(&str, TensorRef<'_>)> = self
            .names
            .iter()
            .zip(&self.bytes)
            .map(|(n, b)| {
                (
                    n.as_str(),
                    TensorRef {
                        dtype: DType::F32,
                        shape: &shape,
                        bytes: b,
                    },
                )
            })
            .collect();
        store.save_checkpoint(step, &tensors, "{}")?;
        Ok(())
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// 1000 checkpoints measured at 10, 100 and 1000; then the small-tensor cost.
fn many(ctx: &mut Ctx<'_>) -> Res<()> {
    let dir = ctx.dir.clone();
    let path = dir.join("many.strata");
    remove(&path);
    let mut m = SmallModel::new(ctx.a.seed);
    let mut points: Vec<u64> = [10u64, 100, 1000, 10_000]
        .into_iter()
        .filter(|&p| p < ctx.a.many_n)
        .collect();
    points.push(ctx.a.many_n);
    let mut written = 0u64;
    let mut write_secs = 0.0;
    let probe = m.names[SMALL_TENSORS / 2].clone();
    for &p in &points {
        {
            let store = Store::open(&path)?;
            let t = Instant::now();
            while written < p {
                written += 1;
                if written > 1 {
                    m.step();
                }
                m.save(&store, written * 10)?;
            }
            write_secs += t.elapsed().as_secs_f64();
        }
        let mut opens = Vec::new();
        let mut gets = Vec::new();
        let at = (p / 2) * 10 + 5;
        for _ in 0..REPS {
            let t = Instant::now();
            let store = Store::open(&path)?;
            opens.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            let (found, tensor) = store.get_at(&probe, at)?;
            gets.push(t.elapsed().as_secs_f64());
            if found != (p / 2) * 10 || tensor.data.len() != SMALL_VALUES * 4 {
                return Err(format!("get_at({probe}, {at}) found step {found}").into());
            }
        }
        let log =
            median_run(|k| ctx.strata(&format!("log-{k}"), &["log".as_ref(), path.as_os_str()]))?;
        let copy = dir.join("many-retain.strata");
        std::fs::copy(&path, &copy)?;
        let label = ctx.label("retain");
        let mut cmd = Command::new(&ctx.strata);
        cmd.arg("retain").arg(&copy).args(["--keep-last", "3"]);
        let limit = std::time::Duration::from_secs(ctx.a.retain_limit);
        let retain = measure_within(&mut cmd, &ctx.logs, &label, Some(limit));
        let copy_after = file_len(&copy).unwrap_or(0);
        remove(&copy);
        let retain = retain?;
        ctx.report.many.push(json!({
            "checkpoints": p,
            "tensors": SMALL_TENSORS,
            "file_bytes": file_len(&path)?,
            "open_seconds": median(opens),
            "get_at_seconds": median(gets),
            "log_seconds": log.secs,
            "log_peak_rss_bytes": log.rss,
            "log_lines": log.stdout.lines().count(),
            "retain_seconds": retain.secs,
            "retain_timed_out": retain.timed_out,
            "retain_peak_rss_bytes": retain.rss,
            "retain_file_bytes_after": copy_after,
            "write_seconds_so_far": write_secs,
        }));
    }
    if !ctx.a.keep {
        remove(&path);
    }

    // The small-tensor cost: 300 checkpoints of the same model.
    let path = dir.join("small.strata");
    remove(&path);
    let mut m = SmallModel::new(ctx.a.seed + 7);
    let n = ctx.a.small_steps;
    let mut store = Store::open(&path)?;
    let t = Instant::now();
    for k in 1..=n {
        if k > 1 {
            m.step();
        }
        m.save(&store, k * 10)?;
    }
    let secs = t.elapsed().as_secs_f64();
    let cost = |s: &strata::store::StoreStats| {
        json!({
            "raw_bytes": s.raw_bytes,
            "file_bytes": s.file_bytes,
            "segment_bytes": s.segment_bytes,
            "metadata_bytes": s.metadata_bytes,
            "versions": s.versions,
            "metadata_bytes_per_version": s.metadata_bytes as f64 / s.versions.max(1) as f64,
            "file_over_stored": s.file_bytes as f64 / (s.segment_bytes + s.metadata_bytes).max(1) as f64,
            "disk_bytes": s.disk_bytes,
            "disk_over_stored": s.disk_bytes as f64 / (s.segment_bytes + s.metadata_bytes).max(1) as f64,
        })
    };
    let written = cost(&store.stats()?);
    store.compact()?;
    let compacted = cost(&store.stats()?);
    drop(store);
    remove(&path);
    ctx.report.small = Some(json!({
        "checkpoints": n,
        "tensors": SMALL_TENSORS,
        "values": SMALL_VALUES,
        "dtype": "f32",
        "write_seconds": secs,
        "as_written": written,
        "compacted": compacted,
    }));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------

fn machine() -> Value {
    let cpu = strata_testkit::machine::cpu();
    let mem = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        t.lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    });
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short", "HEAD"]);
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).map(|s| !s.is_empty());
    json!({
        "cpu": cpu,
        "cores": strata_testkit::machine::cores(),
        "memory_bytes": mem,
        "date": today(),
        "git_commit": commit,
        "git_dirty": dirty,
        "rss_method": "ru_maxrss from wait4, read by a small parent process (--child-run) that starts the command",
    })
}

/// Today's UTC date, YYYY-MM-DD (days to civil date, H. Hinnant's algorithm).
fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// One target of issue 11 against this run's figure.
fn target(what: &str, figure: Option<f64>, unit: &str, goal: &str, met: Option<bool>) -> Value {
    json!({"what": what, "figure": figure, "unit": unit, "target": goal, "met": met})
}

fn targets(r: &Report) -> Vec<Value> {
    let mut out = Vec::new();
    let rss_goal = 1.5 * GIB;
    for op in ["import keyframes", "import deltas", "export keyframes"] {
        if let Some(o) = r.find(op, "main") {
            let rss = o.rss.map(|b| b as f64);
            out.push(target(
                &format!("peak RSS, {op}"),
                rss.map(|b| b / GIB),
                "GiB",
                "<= 1.5 GiB (at 8 GB, and within 10% of the 2 GB figure)",
                rss.map(|b| b <= rss_goal),
            ));
        }
    }
    if let (Some(i), Some(c)) = (
        r.find("import keyframes", "main"),
        r.find("cp + sync", "main"),
    ) {
        out.push(target(
            "import time / (cp + sync) time",
            Some(i.secs / c.secs),
            "x",
            "<= 1",
            Some(i.secs <= c.secs),
        ));
    }
    if let Some(o) = r
        .ops
        .iter()
        .find(|o| o.op.starts_with("python load newest"))
    {
        out.push(target(
            &format!(
                "python load GB/s, the newest checkpoint of the chain model (depth {})",
                o.depth.unwrap_or(0)
            ),
            Some(o.gbps()),
            "GB/s",
            ">= 1.5",
            Some(o.gbps() >= 1.5),
        ));
    }
    for (prefix, goal) in [("export", 1.5), ("load", 1.5), ("python load", 1.5)] {
        if let Some(o) = r.find(&format!("{prefix} keyframes"), "main") {
            out.push(target(
                &format!("{prefix} GB/s, keyframes"),
                Some(o.gbps()),
                "GB/s",
                ">= 1.5",
                Some(o.gbps() >= goal),
            ));
        }
        let deep = r
            .ops
            .iter()
            .filter(|o| o.op.starts_with(&format!("{prefix} depth")))
            .max_by_key(|o| o.depth);
        if let Some(o) = deep {
            out.push(target(
                &format!(
                    "{prefix} GB/s, deepest chain (depth {})",
                    o.depth.unwrap_or(0)
                ),
                Some(o.gbps()),
                "GB/s",
                ">= 1.0",
                Some(o.gbps() >= 1.0),
            ));
        }
    }
    if let Some(o) = r
        .ops
        .iter()
        .find(|o| o.op.starts_with("get 32 MiB tensor,"))
    {
        out.push(target(
            "get of a 32 MiB tensor at the deepest depth (whole command)",
            Some(o.secs * 1e3),
            "ms",
            "<= 40 ms",
            Some(o.secs <= 0.040),
        ));
    }
    if let Some(o) = r.ops.iter().find(|o| o.op.starts_with("history")) {
        let n = (o.raw / 2).max(1) as f64;
        out.push(target(
            "history of one element, per version (whole command)",
            Some(o.secs * 1e3 / n),
            "ms",
            "<= 1 ms",
            Some(o.secs * 1e3 / n <= 1.0),
        ));
    }
    if let Some(s) = &r.small {
        let w = &s["as_written"];
        let per = w["metadata_bytes_per_version"].as_f64();
        out.push(target(
            "metadata bytes per version (300 x 300 x 256 f32)",
            per,
            "B",
            "<= 40",
            per.map(|p| p <= 40.0),
        ));
        for (what, key) in [
            (
                "file / (segment + metadata), as written",
                "file_over_stored",
            ),
            (
                "on disk / (segment + metadata), as written",
                "disk_over_stored",
            ),
        ] {
            let ratio = w[key].as_f64();
            out.push(target(what, ratio, "x", "<= 1.1", ratio.map(|r| r <= 1.1)));
        }
    }
    out
}

fn ratios(r: &Report) -> Value {
    let get = |op: &str| r.find(op, "main");
    let ratio = |a: Option<&Op>, b: Option<&Op>| match (a, b) {
        (Some(a), Some(b)) => Some(a.secs / b.secs),
        _ => None,
    };
    let deep_export = r
        .ops
        .iter()
        .filter(|o| o.op.starts_with("export depth"))
        .max_by_key(|o| o.depth);
    json!({
        "import_over_cp_sync": ratio(get("import keyframes"), get("cp + sync")),
        "import_deltas_over_cp_sync": ratio(get("import deltas"), get("cp + sync")),
        "strata_import_gbps": get("import keyframes").map(Op::gbps),
        "strata_export_gbps": get("export keyframes").map(Op::gbps),
        "strata_export_deepest_gbps": deep_export.map(Op::gbps),
        "zipnn_compress_gbps": get("ZipNN compress").map(Op::gbps),
        "zipnn_decompress_gbps": get("ZipNN decompress").map(Op::gbps),
        "strata_import_over_zipnn_compress_speed": match (get("import keyframes"), get("ZipNN compress")) {
            (Some(s), Some(z)) => Some(s.gbps() / z.gbps()),
            _ => None,
        },
        "strata_export_over_zipnn_decompress_speed": match (get("export keyframes"), get("ZipNN decompress")) {
            (Some(s), Some(z)) => Some(s.gbps() / z.gbps()),
            _ => None,
        },
    })
}

fn mib(b: Option<u64>) -> String {
    b.map_or("-".into(), |b| {
        format!("{:.0}", b as f64 / (1 << 20) as f64)
    })
}

fn print_text(doc: &Value, r: &Report) {
    let m = &doc["machine"];
    println!(
        "scale-bench {} on {}, {} cores, commit {}{}",
        m["date"].as_str().unwrap_or("?"),
        m["cpu"].as_str().unwrap_or("?"),
        m["cores"],
        m["git_commit"].as_str().unwrap_or("?"),
        if m["git_dirty"] == json!(true) {
            "+changes"
        } else {
            ""
        }
    );
    println!("peak RSS: {}", m["rss_method"].as_str().unwrap_or("?"));
    if let Some(model) = doc["models"]["main"].as_object() {
        println!(
            "main model: {} tensors ({} of 4096 x 4096 bf16), {:.3} GB raw, {} steps",
            model["tensors"],
            model["weights_4096x4096"],
            model["raw_bytes"].as_f64().unwrap_or(0.0) / 1e9,
            model["steps"]
        );
    }
    if let Some(model) = doc["models"]["chain"].as_object() {
        println!(
            "chain model: {} tensors, {:.3} GB raw, {} steps",
            model["tensors"],
            model["raw_bytes"].as_f64().unwrap_or(0.0) / 1e9,
            model["steps"]
        );
    }
    if !r.ops.is_empty() {
        println!();
        println!(
            "{:<34} {:>6} {:>5} {:>10} {:>8} {:>10} {:>10}",
            "operation", "model", "step", "seconds", "GB/s", "RSS MiB", "inner s"
        );
        for o in &r.ops {
            println!(
                "{:<34} {:>6} {:>5} {:>10.4} {:>8.3} {:>10} {:>10}",
                o.op,
                o.model,
                o.step.map_or("-".into(), |s| s.to_string()),
                o.secs,
                o.gbps(),
                mib(o.rss),
                o.inner_secs.map_or("-".into(), |s| format!("{s:.4}"))
            );
        }
    }
    for v in &r.verified {
        println!(
            "verified: {} ({} tensor bytes)",
            v["what"].as_str().unwrap_or("?"),
            v["tensor_bytes"]
        );
    }
    if let Some(obj) = doc["ratios"].as_object() {
        for (k, v) in obj {
            if let Some(x) = v.as_f64() {
                println!("{k}: {x:.3}");
            }
        }
    }
    if !r.many.is_empty() {
        println!();
        println!(
            "{:>11} {:>12} {:>10} {:>10} {:>11} {:>10} {:>12}",
            "checkpoints", "file MB", "open ms", "log ms", "get_at ms", "retain s", "retain MiB"
        );
        for p in &r.many {
            println!(
                "{:>11} {:>12.2} {:>10.3} {:>10.1} {:>11.3} {:>10} {:>12}",
                p["checkpoints"],
                p["file_bytes"].as_f64().unwrap_or(0.0) / 1e6,
                p["open_seconds"].as_f64().unwrap_or(0.0) * 1e3,
                p["log_seconds"].as_f64().unwrap_or(0.0) * 1e3,
                p["get_at_seconds"].as_f64().unwrap_or(0.0) * 1e3,
                if p["retain_timed_out"] == json!(true) {
                    format!(">{:.0}", p["retain_seconds"].as_f64().unwrap_or(0.0))
                } else {
                    format!("{:.3}", p["retain_seconds"].as_f64().unwrap_or(0.0))
                },
                mib(p["retain_peak_rss_bytes"].as_u64())
            );
        }
    }
    if let Some(s) = &r.small {
        println!();
        for key in ["as_written", "compacted"] {
            let w = &s[key];
            println!(
                "small-tensor cost ({} checkpoints x {} x {} f32, {key}): file {} B, segments {} B, metadata {} B, {} versions, {:.1} B metadata/version, file/(segments+metadata) {:.3}",
                s["checkpoints"], s["tensors"], s["values"], w["file_bytes"], w["segment_bytes"],
                w["metadata_bytes"], w["versions"],
                w["metadata_bytes_per_version"].as_f64().unwrap_or(0.0),
                w["file_over_stored"].as_f64().unwrap_or(0.0)
            );
        }
    }
    println!();
    for t in doc["targets"].as_array().into_iter().flatten() {
        let met = match t["met"].as_bool() {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "-",
        };
        println!(
            "target: {}: {:.3} {} (target {}) {met}",
            t["what"].as_str().unwrap_or("?"),
            t["figure"].as_f64().unwrap_or(f64::NAN),
            t["unit"].as_str().unwrap_or(""),
            t["target"].as_str().unwrap_or("?")
        );
    }
    for n in &r.notes {
        println!("note: {n}");
    }
}

/// `--child-load STORE STEP`: reads the checkpoint tensor by tensor, prints seconds and bytes.
fn child_load(store: &str, step: &str) -> Res<()> {
    let step: u64 = step.parse().map_err(|e| format!("step {step}: {e}"))?;
    let t = Instant::now();
    let s = Store::open(store)?;
    let mut bytes = 0u64;
    for item in s.read_checkpoint(step)? {
        let (_, tensor) = item?;
        bytes += tensor.data.len() as u64;
    }
    println!(
        "{}",
        json!({"seconds": t.elapsed().as_secs_f64(), "bytes": bytes})
    );
    Ok(())
}

fn run() -> Res<()> {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("--child-run") {
        return child_run(&argv[2..]);
    }
    if argv.get(1).map(String::as_str) == Some("--child-load") {
        let (Some(store), Some(step)) = (argv.get(2), argv.get(3)) else {
            return Err("--child-load STORE STEP".into());
        };
        return child_load(store, step);
    }
    let a = parse()?;
    let dir = a.out.join(format!("gb-{}", a.gb));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Room for the step files, a copy, the store, an export and ZipNN's files at once.
    let size = a.gb * 1e9;
    let need = size * (a.steps as f64 + 3.5);
    if let Some(free) = free_bytes(&dir) {
        if (free as f64) < need {
            return Err(format!(
                "{} has {:.1} GB free; --gb {} with --steps {} needs about {:.1} GB",
                dir.display(),
                free as f64 / 1e9,
                a.gb,
                a.steps,
                need / 1e9
            )
            .into());
        }
    }
    let result = measure_all(&a, &dir);
    if !a.keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

/// Everything after the arguments and the disk check; the caller removes `dir` afterwards.
fn measure_all(a: &Args, dir: &Path) -> Res<()> {
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let strata = strata_binary(a)?;
    let mut ctx = Ctx {
        a,
        strata,
        dir: dir.to_path_buf(),
        logs,
        report: Report::default(),
        label: 0,
        strata_python: None,
    };
    ctx.strata_python = python_with_strata(&a.strata_python);
    if ctx.strata_python.is_none() {
        ctx.report.notes.push(format!(
            "Python load_checkpoint skipped: no python with the strata package at {} \
             (python/ci.sh builds it there; --strata-python names another)",
            a.strata_python.display()
        ));
    }
    let models = big(&mut ctx)?;
    if a.many {
        many(&mut ctx)?;
    }
    let r = ctx.report;
    let doc = json!({
        "machine": machine(),
        "config": {
            "gb": a.gb,
            "steps": a.steps,
            "chain_gb": a.chain_gb.unwrap_or(a.gb.min(0.5)),
            "chain_steps": a.chain_steps,
            "seed": a.seed,
            "drift": a.drift,
            "out": dir.display().to_string(),
            "strata": ctx.strata.display().to_string(),
        },
        "models": models,
        "ops": r.ops.iter().map(Op::to_json).collect::<Vec<_>>(),
        "ratios": ratios(&r),
        "verified": r.verified.clone(),
        "stores": r.stores.clone(),
        "many": r.many.clone(),
        "small_cost": r.small.clone(),
        "targets": targets(&r),
        "notes": r.notes.clone(),
    });
    if a.json {
        println!("{doc:#}");
    } else {
        print_text(&doc, &r);
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
