//! Criterion benchmarks of strata-codec's kernels, one thread.
//!
//! ```text
//! cargo bench -p strata-codec --bench codec [-- FILTER]
//! ```
//!
//! | group | input | throughput |
//! |---|---|---|
//! | `pack/{1..=8}`, `unpack/{1..=8}` | 1 Mi pseudo-random codes in `-qmax..=qmax` | values |
//! | `max_abs/f32` | 1 Mi weights | values |
//! | `quantize/{8,7,5,3}`, `dequantize/{8,7,5,3}` | 1 Mi weights, default parameters | values |
//! | `lossless_encode/{f32,bf16}`, `lossless_decode/{f32,bf16}` | 1 MiB of weights | bytes |
//! | `lossless_encode/{f32,bf16}_delta`, `lossless_decode/{f32,bf16}_delta` | the same 1 MiB as an XOR delta against the previous checkpoint | bytes |
//!
//! The weights are the first tensors of `shared/data/series/dev_ft/step_000430.safetensors`
//! (next to the workspace) in file order, repeated if they hold fewer than 1 Mi values;
//! the delta's base is the same from `step_000420.safetensors`. Without those files, a
//! deterministic pseudo-Gaussian sequence stands in, and as base the same nudged by about
//! 1e-4 relative. bf16 is the f32 weights rounded to nearest even.

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use safetensors::{Dtype, SafeTensors};
use strata_codec::bits::{pack_bits, packed_len, qmax, unpack_bits};
use strata_codec::lossless::{self, LosslessOptions};
use strata_codec::quant::{self, QuantBits, QuantParams, QuantShape};
use strata_codec::DType;

/// Values in every f32 input.
const N: usize = 1 << 20;
/// Raw bytes of the lossless block.
const BLOCK_BYTES: usize = 1 << 20;
/// Checkpoint the weights come from, relative to this crate.
const WEIGHTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/series/dev_ft/step_000430.safetensors"
);
/// The checkpoint before it, the base of the deltas.
const BASE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/series/dev_ft/step_000420.safetensors"
);
const TIERS: [QuantBits; 4] = [QuantBits::B8, QuantBits::B7, QuantBits::B5, QuantBits::B3];

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
}

/// xorshift64*: a small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Roughly N(0, 1): the sum of 12 uniforms, centred.
    fn gaussian(&mut self) -> f64 {
        (0..12).map(|_| self.uniform()).sum::<f64>() - 6.0
    }
}

/// `N` weights and the `N` of the checkpoint before: the checkpoints' f32 tensors in file
/// order, or a pseudo-Gaussian stand-in and a nudged copy.
fn weights() -> (Vec<f32>, Vec<f32>) {
    let real = checkpoint_values(Path::new(WEIGHTS)).zip(checkpoint_values(Path::new(BASE)));
    match real {
        Some((v, b)) if !v.is_empty() && v.len() == b.len() => (
            v.iter().copied().cycle().take(N).collect(),
            b.iter().copied().cycle().take(N).collect(),
        ),
        _ => {
            eprintln!("bench: {WEIGHTS} or {BASE} not usable, using pseudo-Gaussian weights");
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
            let w: Vec<f32> = (0..N).map(|_| (rng.gaussian() * 0.02) as f32).collect();
            let base = w
                .iter()
                .map(|&x| x * (1.0 + (rng.gaussian() * 1e-4) as f32))
                .collect();
            (w, base)
        }
    }
}

/// The f32 values of the first tensors of a checkpoint, up to `N` values.
fn checkpoint_values(path: &Path) -> Option<Vec<f32>> {
    let bytes = std::fs::read(path).ok()?;
    let st = SafeTensors::deserialize(&bytes).ok()?;
    let mut views = st.tensors();
    views.sort_by_key(|(_, v)| v.data().as_ptr() as usize);
    let mut out = Vec::with_capacity(N);
    for (_, view) in views.iter().filter(|(_, v)| v.dtype() == Dtype::F32) {
        let take = (N - out.len()) * 4;
        let data = &view.data()[..view.data().len().min(take)];
        out.extend(
            data.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        );
        if out.len() == N {
            break;
        }
    }
    Some(out)
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bf16_bytes(values: &[f32]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes())
        .collect()
}

/// `N` codes uniform in `-qmax..=qmax` of a width.
fn codes(bits: u8) -> Vec<i8> {
    let q = i64::from(qmax(bits).unwrap_or(0));
    let mut rng = Rng(0x2545_F491_4F6C_DD1D ^ u64::from(bits));
    (0..N)
        .map(|_| ((rng.next_u64() % (2 * q as u64 + 1)) as i64 - q) as i8)
        .collect()
}

fn bench_bits(c: &mut Criterion) {
    let mut pack = c.benchmark_group("pack");
    pack.throughput(Throughput::Elements(N as u64));
    for bits in 1..=8u8 {
        let values = codes(bits);
        let mut out = vec![0u8; packed_len(N, bits)];
        pack.bench_function(BenchmarkId::from_parameter(bits), |b| {
            b.iter(|| pack_bits(black_box(&values), bits, &mut out))
        });
    }
    pack.finish();

    let mut unpack = c.benchmark_group("unpack");
    unpack.throughput(Throughput::Elements(N as u64));
    for bits in 1..=8u8 {
        let mut packed = vec![0u8; packed_len(N, bits)];
        if let Err(e) = pack_bits(&codes(bits), bits, &mut packed) {
            eprintln!("bench: pack_bits failed at {bits} bits: {e}; skipping unpack/{bits}");
            continue;
        }
        let mut out = vec![0i8; N];
        unpack.bench_function(BenchmarkId::from_parameter(bits), |b| {
            b.iter(|| unpack_bits(black_box(&packed), bits, &mut out))
        });
    }
    unpack.finish();
}

fn bench_max_abs(c: &mut Criterion, w: &[f32]) {
    let mut g = c.benchmark_group("max_abs");
    g.throughput(Throughput::Elements(w.len() as u64));
    g.bench_function("f32", |b| b.iter(|| quant::max_abs(black_box(w))));
    g.finish();
}

fn bench_quant(c: &mut Criterion, w: &[f32]) {
    let mut g = c.benchmark_group("quantize");
    g.throughput(Throughput::Elements(w.len() as u64));
    for bits in TIERS {
        let params = QuantParams::new(bits);
        let mut out = Vec::new();
        g.bench_function(BenchmarkId::from_parameter(bits.bits()), |b| {
            b.iter(|| {
                out.clear();
                quant::quantize(black_box(w), &params, &mut out)
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("dequantize");
    g.throughput(Throughput::Elements(w.len() as u64));
    for bits in TIERS {
        let params = QuantParams::new(bits);
        let mut payload = Vec::new();
        let stats = match quant::quantize(w, &params, &mut payload) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("bench: quantize failed at {} bits: {e}", bits.bits());
                continue;
            }
        };
        let shape = QuantShape {
            bits,
            group_size: params.group_size,
            two_level: stats.two_level_groups > 0,
        };
        let mut out = vec![0f32; w.len()];
        g.bench_function(BenchmarkId::from_parameter(bits.bits()), |b| {
            b.iter(|| quant::dequantize(black_box(&payload), shape, &mut out))
        });
    }
    g.finish();
}

fn bench_lossless(c: &mut Criterion, w: &[f32], base: &[f32]) {
    let f32_block = f32_bytes(&w[..BLOCK_BYTES / 4]);
    let bf16_block = bf16_bytes(&w[..BLOCK_BYTES / 2]);
    let f32_base = f32_bytes(&base[..BLOCK_BYTES / 4]);
    let bf16_base = bf16_bytes(&base[..BLOCK_BYTES / 2]);
    let inputs = [
        ("f32", DType::F32, &f32_block, None),
        ("bf16", DType::BF16, &bf16_block, None),
        ("f32_delta", DType::F32, &f32_block, Some(&f32_base)),
        ("bf16_delta", DType::BF16, &bf16_block, Some(&bf16_base)),
    ];
    let opts = LosslessOptions::default();

    let mut g = c.benchmark_group("lossless_encode");
    g.throughput(Throughput::Bytes(BLOCK_BYTES as u64));
    for (name, dtype, data, base) in &inputs {
        let base = base.map(Vec::as_slice);
        let mut out = Vec::new();
        g.bench_function(*name, |b| {
            b.iter(|| {
                out.clear();
                lossless::encode(*dtype, black_box(data), base, &opts, &mut out)
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("lossless_decode");
    g.throughput(Throughput::Bytes(BLOCK_BYTES as u64));
    for (name, dtype, data, base) in &inputs {
        let base = base.map(Vec::as_slice);
        let mut payload = Vec::new();
        if let Err(e) = lossless::encode(*dtype, data, base, &opts, &mut payload) {
            eprintln!("bench: lossless encode failed for {name}: {e}");
            continue;
        }
        let mut out = vec![0u8; data.len()];
        let round_trip = lossless::decode(*dtype, &payload, base, &mut out);
        if round_trip.is_err() || out != **data {
            eprintln!("bench: lossless round trip of {name} fails: {round_trip:?}");
        }
        g.bench_function(*name, |b| {
            b.iter(|| lossless::decode(*dtype, black_box(&payload), base, &mut out))
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    let (w, base) = weights();
    bench_bits(c);
    bench_max_abs(c, &w);
    bench_quant(c, &w);
    bench_lossless(c, &w, &base);
}

// What `criterion_group!` and `criterion_main!` expand to, written out so that no
// undocumented `pub fn` is generated.
fn main() {
    let mut c = config().configure_from_args();
    benches(&mut c);
    c.final_summary();
}
