//! `codec-bench`: measures strata-codec on a real safetensors checkpoint.
//!
//! ```text
//! cargo run --release -p strata-codec --example codec-bench -- FILE.safetensors [--as bf16] [--json]
//! ```
//!
//! - `--as bf16`: cast every F32 tensor to bf16 (round to nearest even, NaN stays NaN)
//!   before measuring, as if the checkpoint had been saved in bf16.
//! - `--json`: print one JSON object instead of the table.
//!
//! What is measured, on one thread:
//!
//! - **Lossless**: every tensor (float or not; dtypes the codec does not know are taken as
//!   raw bytes) is cut into blocks of 1 MiB and each block is encoded with
//!   [`segment::encode_keyframe`] and default options. Stored bytes are the segment
//!   lengths, headers included. Decoding parses each segment (checksum included) and
//!   decodes it; the output is compared with the input and any difference is an error.
//! - **Tiers 8, 7, 5, 3**: every float tensor is widened to f32 (outside the timed region),
//!   cut into blocks of 256 Ki values and encoded with [`segment::encode_quantized`] and
//!   [`QuantParams::new`] (groups of 64, two-level at 3 bits), then dequantized.
//!   `max_rel_err` is the worst group of 64 values over the file of
//!   `max|x - x̂| / max|x|` (all-zero groups skipped).
//!
//! Every timing is the median of at least [`REPS`] runs over the whole file (more for small
//! files, until the runs add up to [`MIN_TIME`]); GB/s divides the raw bytes (in the dtype
//! as stored, bf16 after `--as bf16`) by 1e9 and by the seconds.
//! `raw_bytes` and the lossless ratio count every tensor; the tier ratios count the float
//! tensors only (the same thing for usual checkpoints, which hold nothing else).
//!
//! Exit codes: 0 success, 1 unusable input or a codec failure, 2 bad command line.

use std::error::Error;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use safetensors::{Dtype, SafeTensors};
use serde::Serialize;
use strata_codec::lossless::LosslessOptions;
use strata_codec::quant::{QuantBits, QuantParams};
use strata_codec::segment::{self, Segment};
use strata_codec::{convert, DType};

type BoxError = Box<dyn Error>;

/// Raw bytes per lossless block.
const LOSSLESS_BLOCK_BYTES: usize = 1 << 20;
/// Values per quantized block.
const TIER_BLOCK_VALUES: usize = 256 << 10;
/// Values per group of the `max_rel_err` measure.
const ERR_GROUP: usize = 64;
/// Fewest timed repetitions of every measurement; the median is reported.
const REPS: usize = 5;
/// Most repetitions of one measurement.
const MAX_REPS: usize = 200;
/// Repetitions continue past [`REPS`] until they add up to this much time.
const MIN_TIME: Duration = Duration::from_millis(500);
/// Tiers measured, in report order.
const TIERS: [QuantBits; 4] = [QuantBits::B8, QuantBits::B7, QuantBits::B5, QuantBits::B3];

const USAGE: &str = "usage: codec-bench FILE.safetensors [--as bf16] [--json]";

/// The command line.
struct Args {
    file: String,
    as_bf16: bool,
    json: bool,
}

/// A tensor as measured: codec dtype (after any cast) and little-endian bytes.
struct Tensor {
    name: String,
    dtype: DType,
    data: Vec<u8>,
}

/// A float tensor widened to f32 for the quantized tiers.
struct FloatTensor<'a> {
    name: &'a str,
    dtype: DType,
    values: Vec<f32>,
}

/// One block of a measurement: the tensor it comes from and its slice.
struct Block<'a, T> {
    name: &'a str,
    dtype: DType,
    data: &'a [T],
}

#[derive(Serialize)]
struct Report {
    file: String,
    dtype: &'static str,
    raw_bytes: usize,
    lossless: LosslessReport,
    tiers: Tiers,
}

#[derive(Serialize)]
struct LosslessReport {
    bytes: usize,
    ratio: f64,
    encode_gbps: f64,
    decode_gbps: f64,
}

#[derive(Serialize)]
struct TierReport {
    bytes: usize,
    ratio: f64,
    max_rel_err: f64,
    encode_gbps: f64,
    decode_gbps: f64,
}

#[derive(Serialize)]
struct Tiers {
    #[serde(rename = "8")]
    b8: TierReport,
    #[serde(rename = "7")]
    b7: TierReport,
    #[serde(rename = "5")]
    b5: TierReport,
    #[serde(rename = "3")]
    b3: TierReport,
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            return match emit(&format!("{USAGE}\n")) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::from(1),
            };
        }
        Err(msg) => {
            eprintln!("codec-bench: {msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("codec-bench: error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Parses the arguments; `Ok(None)` asks for the usage text.
fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut file = None;
    let mut as_bf16 = false;
    let mut json = false;
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--json" => json = true,
            "--as" => match it.next().as_deref() {
                Some("bf16") => as_bf16 = true,
                Some(other) => return Err(format!("--as {other}: only `--as bf16` is supported")),
                None => return Err("--as needs a dtype (bf16)".into()),
            },
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            s if file.is_none() => file = Some(s.to_string()),
            s => return Err(format!("unexpected argument {s}")),
        }
    }
    let file = file.ok_or("missing FILE.safetensors")?;
    Ok(Some(Args {
        file,
        as_bf16,
        json,
    }))
}

fn run(args: &Args) -> Result<(), BoxError> {
    let tensors = load(&args.file, args.as_bf16)?;
    let floats = widen_floats(&tensors);
    if floats.is_empty() {
        return Err(format!("{}: no float tensors (F32, BF16, F16, F64)", args.file).into());
    }
    let raw_bytes: usize = tensors.iter().map(|t| t.data.len()).sum();
    let float_bytes: usize = floats.iter().map(|t| t.values.len() * t.dtype.size()).sum();

    let lossless = bench_lossless(&tensors, raw_bytes)?;
    let mut tiers = Vec::with_capacity(TIERS.len());
    for bits in TIERS {
        tiers.push(bench_tier(&floats, bits, float_bytes)?);
    }
    let [b8, b7, b5, b3]: [TierReport; 4] = tiers
        .try_into()
        .map_err(|_| "internal error: wrong number of tiers")?;
    let report = Report {
        file: args.file.clone(),
        dtype: dominant_dtype(&tensors).name(),
        raw_bytes,
        lossless,
        tiers: Tiers { b8, b7, b5, b3 },
    };
    warn_over_bound(&report.tiers);
    if args.json {
        emit(&format!("{}\n", serde_json::to_string(&report)?))
    } else {
        emit(&table(&report, &tensors, float_bytes))
    }
}

// ---------------------------------------------------------------------------------------
// Loading

/// Reads every tensor of a safetensors file, in file order, casting F32 to bf16 if asked.
fn load(path: &str, as_bf16: bool) -> Result<Vec<Tensor>, BoxError> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| format!("{path} is not a valid safetensors file: {e:?}"))?;
    let mut views = st.tensors();
    views.sort_by_key(|(_, v)| v.data().as_ptr() as usize);
    let tensors = views
        .into_iter()
        .map(|(name, view)| {
            Ok(match (view.dtype(), as_bf16) {
                (Dtype::F32, true) => Tensor {
                    name,
                    dtype: DType::BF16,
                    data: f32_bytes_to_bf16(view.data())?,
                },
                (d, _) => Tensor {
                    name,
                    dtype: codec_dtype(d),
                    data: view.data().to_vec(),
                },
            })
        })
        .collect::<Result<_, BoxError>>()?;
    Ok(tensors)
}

/// The codec dtype of a safetensors dtype; dtypes the codec has no name for (FP8) are
/// taken as raw bytes.
fn codec_dtype(d: Dtype) -> DType {
    DType::from_safetensors_name(&format!("{d:?}")).unwrap_or(DType::U8)
}

/// Little-endian f32 bytes to little-endian bf16 bytes, round to nearest even.
fn f32_bytes_to_bf16(data: &[u8]) -> Result<Vec<u8>, BoxError> {
    Ok(convert::from_f32(
        DType::BF16,
        &convert::to_f32(DType::F32, data)?,
    )?)
}

/// The float tensors as f32 values (exact for bf16 and f16; f64 is rounded).
fn widen_floats(tensors: &[Tensor]) -> Vec<FloatTensor<'_>> {
    tensors
        .iter()
        .filter_map(|t| {
            Some(FloatTensor {
                name: &t.name,
                dtype: t.dtype,
                // `None` for the tensors that are not floats.
                values: convert::to_f32(t.dtype, &t.data).ok()?,
            })
        })
        .collect()
}

/// The float dtype holding the most bytes.
fn dominant_dtype(tensors: &[Tensor]) -> DType {
    [DType::F32, DType::BF16, DType::F16, DType::F64]
        .into_iter()
        .max_by_key(|&d| {
            tensors
                .iter()
                .filter(|t| t.dtype == d)
                .map(|t| t.data.len())
                .sum::<usize>()
        })
        .unwrap_or(DType::F32)
}

// ---------------------------------------------------------------------------------------
// Measurements

/// Cuts every tensor into blocks of at most `len` elements.
fn blocks<'a, T>(
    items: impl Iterator<Item = (&'a str, DType, &'a [T])>,
    len: usize,
) -> Vec<Block<'a, T>> {
    items
        .flat_map(|(name, dtype, data)| {
            data.chunks(len)
                .map(move |data| Block { name, dtype, data })
        })
        .collect()
}

/// Repetitions of one measurement: at least [`REPS`], more (up to [`MAX_REPS`]) until
/// [`MIN_TIME`] has passed, so that small files are not timed on a few milliseconds.
struct Timer {
    times: Vec<Duration>,
    total: Duration,
}

impl Timer {
    fn new() -> Self {
        Timer {
            times: Vec::with_capacity(REPS),
            total: Duration::ZERO,
        }
    }

    /// Whether another repetition is due.
    fn more(&self) -> bool {
        let n = self.times.len();
        n < REPS || (self.total < MIN_TIME && n < MAX_REPS)
    }

    /// Runs and times one repetition.
    fn time<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let start = Instant::now();
        let r = f();
        let t = start.elapsed();
        self.times.push(t);
        self.total += t;
        r
    }

    /// The median repetition.
    fn median(mut self) -> Duration {
        self.times.sort();
        self.times
            .get(self.times.len() / 2)
            .copied()
            .unwrap_or(Duration::ZERO)
    }
}

fn gbps(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / 1e9 / t.as_secs_f64().max(1e-12)
}

fn bench_lossless(tensors: &[Tensor], raw_bytes: usize) -> Result<LosslessReport, BoxError> {
    let blocks = blocks(
        tensors
            .iter()
            .map(|t| (t.name.as_str(), t.dtype, t.data.as_slice())),
        LOSSLESS_BLOCK_BYTES,
    );
    let opts = LosslessOptions::default();
    let mut enc = Timer::new();
    let mut segments = Vec::new();
    while enc.more() {
        segments = enc.time(|| {
            blocks
                .iter()
                .map(|b| segment::encode_keyframe(b.dtype, b.data, &opts))
                .collect::<Result<Vec<_>, _>>()
        })?;
    }
    let mut outs: Vec<Vec<u8>> = blocks.iter().map(|b| vec![0u8; b.data.len()]).collect();
    let mut dec = Timer::new();
    while dec.more() {
        outs.iter_mut().for_each(|o| o.fill(0xA5));
        dec.time(|| decode_lossless(&segments, &mut outs))?;
        verify_lossless(&blocks, &outs)?;
    }
    let bytes: usize = segments.iter().map(Vec::len).sum();
    Ok(LosslessReport {
        bytes,
        ratio: raw_bytes as f64 / bytes as f64,
        encode_gbps: gbps(raw_bytes, enc.median()),
        decode_gbps: gbps(raw_bytes, dec.median()),
    })
}

fn decode_lossless(segments: &[Vec<u8>], outs: &mut [Vec<u8>]) -> Result<(), BoxError> {
    for (seg, out) in segments.iter().zip(outs.iter_mut()) {
        Segment::parse(seg)?.decode_lossless_into(None, out)?;
    }
    Ok(())
}

fn verify_lossless(blocks: &[Block<'_, u8>], outs: &[Vec<u8>]) -> Result<(), BoxError> {
    for (i, (b, out)) in blocks.iter().zip(outs).enumerate() {
        if let Some(pos) = b.data.iter().zip(out).position(|(x, y)| x != y) {
            return Err(format!(
                "lossless round trip differs: tensor {} ({}), block {i}, byte {pos}",
                b.name, b.dtype
            )
            .into());
        }
    }
    Ok(())
}

fn bench_tier(
    floats: &[FloatTensor<'_>],
    bits: QuantBits,
    float_bytes: usize,
) -> Result<TierReport, BoxError> {
    let blocks = blocks(
        floats
            .iter()
            .map(|t| (t.name, t.dtype, t.values.as_slice())),
        TIER_BLOCK_VALUES,
    );
    let params = QuantParams::new(bits);
    let mut enc = Timer::new();
    let mut segments = Vec::new();
    while enc.more() {
        segments = enc.time(|| encode_tier(&blocks, &params))?;
    }
    let mut outs: Vec<Vec<f32>> = blocks.iter().map(|b| vec![0f32; b.data.len()]).collect();
    let mut dec = Timer::new();
    while dec.more() {
        dec.time(|| dequantize_tier(&segments, &mut outs))?;
    }
    let bytes: usize = segments.iter().map(Vec::len).sum();
    Ok(TierReport {
        bytes,
        ratio: float_bytes as f64 / bytes as f64,
        max_rel_err: max_rel_err(&blocks, &outs)?,
        encode_gbps: gbps(float_bytes, enc.median()),
        decode_gbps: gbps(float_bytes, dec.median()),
    })
}

fn encode_tier(blocks: &[Block<'_, f32>], params: &QuantParams) -> Result<Vec<Vec<u8>>, BoxError> {
    blocks
        .iter()
        .map(|b| {
            segment::encode_quantized(b.dtype, b.data, params).map_err(|e| {
                let bits = params.bits.bits();
                format!("{bits}-bit tier, tensor {}: {e}", b.name).into()
            })
        })
        .collect()
}

fn dequantize_tier(segments: &[Vec<u8>], outs: &mut [Vec<f32>]) -> Result<(), BoxError> {
    for (seg, out) in segments.iter().zip(outs.iter_mut()) {
        Segment::parse(seg)?.dequantize_into(out)?;
    }
    Ok(())
}

/// The worst group's `max|x - x̂| / max|x|` over all blocks.
fn max_rel_err(blocks: &[Block<'_, f32>], outs: &[Vec<f32>]) -> Result<f64, BoxError> {
    let mut worst = 0f64;
    for (b, out) in blocks.iter().zip(outs) {
        for (x, y) in b.data.chunks(ERR_GROUP).zip(out.chunks(ERR_GROUP)) {
            let (m, e) = x.iter().zip(y).fold((0f64, 0f64), |(m, e), (&x, &y)| {
                let (x, y) = (f64::from(x), f64::from(y));
                (m.max(x.abs()), e.max((x - y).abs()))
            });
            if y.iter().any(|v| !v.is_finite()) {
                return Err(format!("tensor {}: dequantized a non-finite value", b.name).into());
            }
            if m > 0.0 {
                worst = worst.max(e / m);
            }
        }
    }
    Ok(worst)
}

// ---------------------------------------------------------------------------------------
// Output

/// Writes to stdout; a closed pipe (`| head`) is not an error.
fn emit(text: &str) -> Result<(), BoxError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Warns on stderr when a tier's error exceeds its documented bound `1 / (2 * qmax)` by
/// more than f32 rounding allows (`x̂ = code * scale` is rounded to f32, which can add
/// half an ulp of `max|x|` to the exact-arithmetic bound).
fn warn_over_bound(tiers: &Tiers) {
    let all = [
        (QuantBits::B8, &tiers.b8),
        (QuantBits::B7, &tiers.b7),
        (QuantBits::B5, &tiers.b5),
        (QuantBits::B3, &tiers.b3),
    ];
    for (bits, t) in all {
        let bound = bits.relative_error_bound();
        if t.max_rel_err > bound + 2.0 * f64::from(f32::EPSILON) {
            eprintln!(
                "codec-bench: warning: {}-bit max_rel_err {:.9} exceeds the bound 1/(2*qmax) = {:.9}",
                bits.bits(),
                t.max_rel_err,
                bound
            );
        }
    }
}

/// The human-readable report.
fn table(r: &Report, tensors: &[Tensor], float_bytes: usize) -> String {
    let mut s = String::new();
    let n_float = tensors.iter().filter(|t| t.dtype.is_float()).count();
    s.push_str(&format!("file   {}\n", r.file));
    s.push_str(&format!(
        "dtype  {}   tensors {} ({} float)   raw {:.2} MB ({:.2} MB float)\n",
        r.dtype,
        tensors.len(),
        n_float,
        r.raw_bytes as f64 / 1e6,
        float_bytes as f64 / 1e6
    ));
    s.push_str(&format!(
        "median of >= {REPS} runs, one thread; GB/s of raw bytes in the stored dtype\n\n"
    ));
    s.push_str(&format!(
        "{:<9} {:>13} {:>7} {:>12} {:>9} {:>9}\n",
        "mode", "bytes", "ratio", "max_rel_err", "enc GB/s", "dec GB/s"
    ));
    let l = &r.lossless;
    s.push_str(&format!(
        "{:<9} {:>13} {:>7.3} {:>12} {:>9.3} {:>9.3}\n",
        "lossless", l.bytes, l.ratio, "0", l.encode_gbps, l.decode_gbps
    ));
    let tiers = [
        ("8-bit", &r.tiers.b8),
        ("7-bit", &r.tiers.b7),
        ("5-bit", &r.tiers.b5),
        ("3-bit", &r.tiers.b3),
    ];
    for (name, t) in tiers {
        s.push_str(&format!(
            "{:<9} {:>13} {:>7.3} {:>12.6} {:>9.3} {:>9.3}\n",
            name, t.bytes, t.ratio, t.max_rel_err, t.encode_gbps, t.decode_gbps
        ));
    }
    s
}
