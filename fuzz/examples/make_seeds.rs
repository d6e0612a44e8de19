//! Writes seed inputs for the fuzz targets, built with strata-codec's own encoders.
//!
//! ```text
//! cd fuzz && cargo run --release --example make_seeds [corpus-dir]   # default: corpus
//! ```
//!
//! Writes `<corpus-dir>/segment_decode/seed-*` (whole segments of every kind, frame
//! segments included), `<corpus-dir>/payload_decode/seed-*` (the block payloads behind the
//! 6-byte prefix that `payload_decode` reads) and `<corpus-dir>/hpdkv_decode/seed-*`
//! (HPΔKV blobs: dense and sparse, raw and compressed, fp16 and bf16, top-k residuals) and
//! `<corpus-dir>/aged_decode/seed-*` (aged blobs: f32, f16 and bf16, with and without a
//! base, 2- and 4-byte words). Deltas are made against [`base_pattern`], the base the
//! targets supply, so they decode fully as they are. Seeds are small (at most a few KB) so
//! libFuzzer's default input length stays modest, but for two segments of 2^14 elements
//! (about 4 KB each) whose planes use the 32-lane layout of the AVX2 kernels.

use std::error::Error;
use std::path::{Path, PathBuf};

use strata_codec::aged::{self, AgedView};
use strata_codec::frames::{FrameParams, FramePush, FrameStreamEncoder};
use strata_codec::hpdkv::{HalfDType, HpdkvBlob};
use strata_codec::lossless::LosslessOptions;
use strata_codec::quant::{QuantBits, QuantParams, TwoLevel};
use strata_codec::residual;
use strata_codec::segment::{self, Encoding, Segment};
use strata_codec::testing::SplitMix64;
use strata_codec::DType;
use strata_codec_fuzz::base_pattern;

/// [`SplitMix64`], so the seeds are the same on every run.
struct Rng(SplitMix64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Roughly normal (sum of four uniforms), scaled by `std`.
    fn weight(&mut self, std: f32) -> f32 {
        let s: f32 = (0..4)
            .map(|_| (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
            .sum();
        s * 1.7 * std
    }
}

fn weights(rng: &mut Rng, n: usize, std: f32) -> Vec<f32> {
    (0..n).map(|_| rng.weight(std)).collect()
}

/// `v` stored as `dtype` (floats converted, integers from the float's bits).
fn as_dtype(dtype: DType, v: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * dtype.size());
    for &x in v {
        match dtype {
            DType::F32 => out.extend_from_slice(&x.to_le_bytes()),
            DType::F64 => out.extend_from_slice(&f64::from(x).to_le_bytes()),
            DType::BF16 => out.extend_from_slice(&((x.to_bits() >> 16) as u16).to_le_bytes()),
            DType::F16 => out.extend_from_slice(&f16_bits(x).to_le_bytes()),
            DType::Bool => out.push(u8::from(x > 0.0)),
            _ => {
                // Small integers, as indices and counters look.
                let i = (x * 1000.0) as i64;
                out.extend_from_slice(&i.to_le_bytes()[..dtype.size()]);
            }
        }
    }
    out
}

/// f32 to IEEE binary16 (truncating; seeds only need plausible bit patterns).
fn f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xFF) as i32 - 127 + 15;
    let man = ((b >> 13) & 0x3FF) as u16;
    if exp <= 0 {
        sign
    } else if exp >= 31 {
        sign | 0x7C00
    } else {
        sign | ((exp as u16) << 10) | man
    }
}

/// `base` with the low mantissa bits of every word whose exponent is even replaced by
/// random bits, and every other word unchanged.
fn exponent_step(dtype: DType, base: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut out = base.to_vec();
    for word in out.chunks_exact_mut(dtype.size()) {
        // The top 16 bits of a bf16 or f32 word are sign, exponent and the top of the
        // mantissa; `top >> 7` is sign and exponent.
        let top = u16::from_le_bytes([word[word.len() - 2], word[word.len() - 1]]);
        if (top >> 7) % 2 == 0 {
            word[0] ^= (rng.next_u64() & 0x0F) as u8;
        }
    }
    out
}

/// Whether any plane of a lossless segment uses base-exponent contexts (method 4). The
/// plane table follows the payload's plane-layout byte.
fn uses_base_contexts(seg: &[u8]) -> Result<bool, Box<dyn Error>> {
    let parsed = Segment::parse(seg)?;
    let width = parsed.header().dtype.size();
    let table = parsed
        .payload()
        .get(1..1 + 5 * width)
        .ok_or("short plane table")?;
    Ok(table.chunks_exact(5).any(|e| e[0] == 4))
}

/// A fine-tuning-like step of `base` (bf16 or f32): low mantissa bits change in most
/// words; in about 1 in 64 the exponent's low bit changes with the top mantissa bit (a
/// crossing of a power of two), and in 3 words without it (exceptions). The encoder codes
/// its exponent plane marked (plane method 5, ADR 0019).
fn marked_step(dtype: DType, base: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut out = base.to_vec();
    let w = dtype.size();
    let (low, cross, exp) = match w {
        2 => (0x0007u32, 0x00C0u32, 0x0080u32),
        _ => (0x0FFF, 0x00C0_0000, 0x0080_0000),
    };
    for (i, word) in out.chunks_exact_mut(w).enumerate() {
        let r = rng.next_u64();
        let mut x = (r as u32) & low;
        if r >> 58 == 0 {
            x |= cross;
        }
        if i % 1500 == 7 {
            x = exp;
        }
        for (k, b) in word.iter_mut().enumerate() {
            *b ^= (x >> (8 * k)) as u8;
        }
    }
    out
}

/// Whether a delta segment codes its last plane marked (method 5).
fn uses_marked(seg: &[u8]) -> Result<bool, Box<dyn Error>> {
    let parsed = Segment::parse(seg)?;
    let width = parsed.header().dtype.size();
    let table = parsed
        .payload()
        .get(1..1 + 5 * width)
        .ok_or("short plane table")?;
    Ok(table.chunks_exact(5).last().is_some_and(|e| e[0] == 5))
}

struct Seeds {
    segment_dir: PathBuf,
    payload_dir: PathBuf,
    hpdkv_dir: PathBuf,
    aged_dir: PathBuf,
    count: usize,
    frame_count: usize,
    hpdkv_count: usize,
    aged_count: usize,
}

impl Seeds {
    /// Writes `seg` as a `segment_decode` seed and its payload as a `payload_decode` seed.
    fn add(&mut self, name: &str, seg: &[u8]) -> Result<(), Box<dyn Error>> {
        let parsed = Segment::parse(seg)?;
        let h = parsed.header();
        // The flags byte of `payload_decode`: a delta gets a base, a quantized payload its
        // width and two-level shape.
        let flags = match h.encoding {
            Encoding::Keyframe => 0u8,
            Encoding::Delta => 1,
            Encoding::Quantized(bits) => width_index(bits) << 2,
            Encoding::TwoLevel3 => (width_index(QuantBits::B3) << 2) | 0x10,
            Encoding::QuantizedFrames(_) => return Err("frame segments go to add_frames".into()),
        };
        let n = u16::try_from(h.elements)?;
        let gs = u16::try_from(h.group_size)?;
        let mut p = vec![h.dtype.code()];
        p.extend_from_slice(&n.to_le_bytes());
        p.push(flags);
        p.extend_from_slice(&gs.to_le_bytes());
        p.extend_from_slice(parsed.payload());

        std::fs::write(self.segment_dir.join(format!("seed-{name}")), seg)?;
        std::fs::write(self.payload_dir.join(format!("seed-{name}")), &p)?;
        self.count += 1;
        Ok(())
    }

    /// Writes a frame segment as a `segment_decode` seed (`payload_decode` has no frame
    /// mode: its payloads reach the frame decoder through `segment_decode`'s resealing).
    fn add_frames(&mut self, name: &str, seg: &[u8]) -> Result<(), Box<dyn Error>> {
        Segment::parse(seg)?;
        std::fs::write(self.segment_dir.join(format!("seed-frames-{name}")), seg)?;
        self.frame_count += 1;
        Ok(())
    }

    /// Writes an HPΔKV blob as a `hpdkv_decode` seed.
    fn add_hpdkv(&mut self, name: &str, blob: &[u8]) -> Result<(), Box<dyn Error>> {
        std::fs::write(self.hpdkv_dir.join(format!("seed-{name}")), blob)?;
        self.hpdkv_count += 1;
        Ok(())
    }

    /// Writes an aged blob as an `aged_decode` seed, after checking that it decodes as the
    /// target will read it (over `base_pattern` when it has a base) and has `width`-byte
    /// words.
    fn add_aged(
        &mut self,
        name: &str,
        dtype: DType,
        block: &aged::AgedBlock,
        width: u8,
    ) -> Result<(), Box<dyn Error>> {
        let view = AgedView::parse(&block.bytes)?;
        let len = view.elements() as usize * dtype.size();
        let base = view.has_base().then(|| base_pattern(len));
        view.decode_into(dtype, base.as_deref(), &mut vec![0; len])?;
        // The word width is header byte 7 (codec/src/aged/mod.rs, "Layout").
        if block.bytes[7] != width {
            return Err(format!("aged seed {name}: words of {} bytes", block.bytes[7]).into());
        }
        std::fs::write(self.aged_dir.join(format!("seed-{name}")), &block.bytes)?;
        self.aged_count += 1;
        Ok(())
    }
}

/// Frame segments: every width, drifting frames in one epoch, a ragged last group, a
/// frame length whose codes leave unused bits, zero groups, epochs cut by growth,
/// shrinking and the frame limit.
fn frame_seeds(seeds: &mut Seeds, rng: &mut Rng) -> Result<(), Box<dyn Error>> {
    let v = weights(rng, 150, 0.02);
    for bits in QuantBits::ALL {
        let params = FrameParams::new(bits).with_group_size(64);
        let mut enc = FrameStreamEncoder::new(DType::F32, v.len(), params)?;
        for t in 0..4 {
            let f = 1.0 + 0.02 * t as f32;
            let frame: Vec<f32> = v.iter().map(|x| x * f).collect();
            enc.push(&frame)?;
        }
        let seg = enc.finish().ok_or("no frames")?;
        seeds.add_frames(&format!("{}bit", bits.bits()), &seg)?;
    }
    // 13 values at 3 and 5 bits: unused bits at the end of every frame; groups of 5.
    for bits in [QuantBits::B3, QuantBits::B5] {
        let params = FrameParams::new(bits).with_group_size(5).with_drift(0.5);
        let mut enc = FrameStreamEncoder::new(DType::BF16, 13, params)?;
        enc.push(&v[..13])?;
        enc.push(&v[1..14])?;
        let seg = enc.finish().ok_or("no frames")?;
        seeds.add_frames(&format!("ragged{}", bits.bits()), &seg)?;
    }
    // A zero group, drift 0, one frame of one value.
    let mut enc = FrameStreamEncoder::new(
        DType::F16,
        8,
        FrameParams::new(QuantBits::B7)
            .with_group_size(4)
            .with_drift(0.0),
    )?;
    enc.push(&[0.0, 0.0, -0.0, 0.0, 1.0, -2.0, 0.5, 0.25])?;
    enc.push(&[0.0, 0.0, 0.0, 0.0, 2.0, -1.0, 0.5, 0.25])?;
    seeds.add_frames("zero-group", &enc.finish().ok_or("no frames")?)?;
    let mut enc = FrameStreamEncoder::new(DType::F32, 1, FrameParams::new(QuantBits::B8))?;
    enc.push(&[0.75])?;
    seeds.add_frames("single", &enc.finish().ok_or("no frames")?)?;
    // Epochs cut by growth, shrinking and a limit of 2 frames: every sealed segment.
    let params = FrameParams::new(QuantBits::B8).with_max_frames(2);
    let mut enc = FrameStreamEncoder::new(DType::F32, 40, params)?;
    let mut n = 0;
    for f in [1.0f32, 1.5, 1.5, 1.5, 0.5] {
        let frame: Vec<f32> = v[..40].iter().map(|x| x * f).collect();
        if let FramePush::NewEpoch {
            sealed: Some(s), ..
        } = enc.push(&frame)?
        {
            seeds.add_frames(&format!("epoch{n}"), &s)?;
            n += 1;
        }
    }
    seeds.add_frames(&format!("epoch{n}"), &enc.finish().ok_or("no frames")?)?;
    Ok(())
}

/// HPΔKV blobs of every kind, and top-k residuals of a 3-bit tier.
fn hpdkv_seeds(seeds: &mut Seeds, rng: &mut Rng) -> Result<(), Box<dyn Error>> {
    let v = weights(rng, 96, 0.02);
    for dtype in HalfDType::ALL {
        let words: Vec<u16> = v.iter().map(|&x| dtype.from_f32(x)).collect();
        let dense = HpdkvBlob {
            dtype,
            shape: vec![8, 12],
            indices: None,
            values: words.clone(),
        };
        let sparse = HpdkvBlob {
            dtype,
            shape: vec![2, 3, 16],
            indices: Some((0..96).step_by(7).collect()),
            values: words.iter().step_by(7).copied().collect(),
        };
        for compress in [false, true] {
            let z = if compress { "zlib" } else { "raw" };
            seeds.add_hpdkv(&format!("dense-{dtype:?}-{z}"), &dense.encode(compress)?)?;
            seeds.add_hpdkv(&format!("sparse-{dtype:?}-{z}"), &sparse.encode(compress)?)?;
        }
    }
    // Rank 0, an empty shape, an empty index block.
    let scalar = HpdkvBlob {
        dtype: HalfDType::F16,
        shape: vec![],
        indices: None,
        values: vec![0x3C00],
    };
    seeds.add_hpdkv("scalar", &scalar.encode(false)?)?;
    let empty = HpdkvBlob {
        dtype: HalfDType::BF16,
        shape: vec![0, 5],
        indices: None,
        values: vec![],
    };
    seeds.add_hpdkv("empty-zlib", &empty.encode(true)?)?;
    let no_entries = HpdkvBlob {
        dtype: HalfDType::F16,
        shape: vec![5, 5, 5, 5, 5],
        indices: Some(vec![]),
        values: vec![],
    };
    seeds.add_hpdkv("no-entries", &no_entries.encode(false)?)?;
    // Top-k residual of a 3-bit tier, as the store writes it.
    let tier = segment::encode_quantized(DType::F32, &v, &QuantParams::new(QuantBits::B3))?;
    let approx = Segment::parse(&tier)?.dequantize(1 << 20)?;
    for dtype in HalfDType::ALL {
        let blob = residual::topk_residual(&v, &approx, &[96], 10, dtype)?;
        seeds.add_hpdkv(&format!("topk-{dtype:?}"), &blob.encode(true)?)?;
    }
    Ok(())
}

/// Aged blobs: every dtype with and without a base (a training-like step of
/// `base_pattern`, and weights on their own), 2-byte words (the usual case) and 4-byte words
/// (a budget so fine against values so far apart that some `q` leave u16: a few spikes
/// among small weights), a block of more than one 1024-element chunk with a ragged end, and
/// a blob whose deltas all round to 0 (the base itself). A generator of their own, so that
/// the seeds before them stay as they were.
fn aged_seeds(seeds: &mut Seeds) -> Result<(), Box<dyn Error>> {
    let mut rng = Rng(SplitMix64::new(0xA6ED));
    let opts = LosslessOptions::default();
    let n = 512;
    let v = weights(&mut rng, n, 0.02);
    let mut spiky = weights(&mut rng, n, 1e-3);
    for i in [3, 200, 411] {
        spiky[i] = if i % 2 == 0 { 60.0 } else { -45.0 };
    }
    for dtype in [DType::BF16, DType::F16, DType::F32] {
        let blob = |data: &[u8], base: Option<&[u8]>, budget: f64| {
            aged::encode(dtype, data, base, budget, &opts)?
                .ok_or_else(|| Box::<dyn Error>::from(format!("{dtype}: budget {budget} not met")))
        };
        // Without a base: weights (1- or 2-byte words, as the codec chooses).
        let data = as_dtype(dtype, &v);
        let block = blob(&data, None, 1e-2)?;
        seeds.add_aged(&format!("{dtype}-nobase"), dtype, &block, block.bytes[7])?;
        // With the target's base: a small step of it.
        let base = base_pattern(n * dtype.size());
        let step = marked_step(dtype, &base, &mut rng);
        let block = blob(&step, Some(&base), 1e-3)?;
        seeds.add_aged(&format!("{dtype}-base"), dtype, &block, block.bytes[7])?;
        // 4-byte words: spikes 4-5 orders of magnitude above the rest, a fine budget; then
        // the same spikes in the step above.
        let data = as_dtype(dtype, &spiky);
        let wide = [1e-4, 1e-5, 1e-6]
            .into_iter()
            .filter_map(|b| blob(&data, None, b).ok())
            .find(|b| b.bytes[7] == 4)
            .ok_or_else(|| format!("{dtype}: no budget gives 4-byte words"))?;
        seeds.add_aged(&format!("{dtype}-nobase-u32"), dtype, &wide, 4)?;
        let mut spiky_step = step.clone();
        let spikes = as_dtype(dtype, &spiky);
        for i in [3, 200, 411] {
            let w = dtype.size();
            spiky_step[i * w..(i + 1) * w].copy_from_slice(&spikes[i * w..(i + 1) * w]);
        }
        let wide = [1e-4, 1e-5, 1e-6]
            .into_iter()
            .filter_map(|b| blob(&spiky_step, Some(&base), b).ok())
            .find(|b| b.bytes[7] == 4)
            .ok_or_else(|| format!("{dtype}: no budget gives 4-byte words over a base"))?;
        seeds.add_aged(&format!("{dtype}-base-u32"), dtype, &wide, 4)?;
    }
    // More than one chunk of 1024, ragged: 1500 bf16 elements over the base.
    let base = base_pattern(1500 * 2);
    let step = marked_step(DType::BF16, &base, &mut rng);
    let block = aged::encode(DType::BF16, &step, Some(&base), 1e-3, &opts)?
        .ok_or("bf16 1500: budget not met")?;
    seeds.add_aged("bf16-base-1500", DType::BF16, &block, block.bytes[7])?;
    // The base itself: every q is 0.
    let base = base_pattern(256 * 4);
    let block = aged::encode(DType::F32, &base, Some(&base), 1e-3, &opts)?
        .ok_or("f32 zero delta: budget not met")?;
    if !block.all_zero {
        return Err("the zero-delta seed has a q other than 0".into());
    }
    seeds.add_aged("f32-base-zero", DType::F32, &block, block.bytes[7])?;
    // The log-relative mode (flag bit 1, ADR 0027): non-negative values with zeros, without a
    // base and over the target's base (whose negative elements make escapes).
    let moments: Vec<f32> = v
        .iter()
        .enumerate()
        .map(|(i, x)| if i % 37 == 0 { 0.0 } else { x * x })
        .collect();
    for dtype in [DType::BF16, DType::F16, DType::F32] {
        let data = as_dtype(dtype, &moments);
        let base = base_pattern(n * dtype.size());
        for (name, base) in [("log-nobase", None), ("log-base", Some(base.as_slice()))] {
            let block = aged::encode_log(dtype, &data, base, 0.05, &opts)?
                .ok_or_else(|| format!("{dtype} {name}: budget not met"))?;
            let width = block.bytes[7];
            seeds.add_aged(&format!("{dtype}-{name}"), dtype, &block, width)?;
        }
    }
    Ok(())
}

fn width_index(bits: QuantBits) -> u8 {
    QuantBits::ALL
        .iter()
        .position(|&b| b == bits)
        .map_or(0, |i| i as u8)
}

fn main() -> Result<(), Box<dyn Error>> {
    let root = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from("corpus"), PathBuf::from);
    let mut seeds = Seeds {
        segment_dir: root.join("segment_decode"),
        payload_dir: root.join("payload_decode"),
        hpdkv_dir: root.join("hpdkv_decode"),
        aged_dir: root.join("aged_decode"),
        count: 0,
        frame_count: 0,
        hpdkv_count: 0,
        aged_count: 0,
    };
    std::fs::create_dir_all(&seeds.segment_dir)?;
    std::fs::create_dir_all(&seeds.payload_dir)?;
    std::fs::create_dir_all(&seeds.hpdkv_dir)?;
    std::fs::create_dir_all(&seeds.aged_dir)?;

    let opts = LosslessOptions::default();
    let mut rng = Rng(SplitMix64::new(0x5EED));

    // Keyframes of every dtype: 256 weight-like elements (zstd and raw planes).
    let v = weights(&mut rng, 256, 0.02);
    for dtype in DType::ALL {
        let seg = segment::encode_keyframe(dtype, &as_dtype(dtype, &v), &opts)?;
        seeds.add(&format!("key-{dtype}"), &seg)?;
    }
    // Small, empty and constant blocks: raw and constant planes.
    let small = weights(&mut rng, 7, 1.0);
    seeds.add(
        "key-f32-small",
        &segment::encode_keyframe(DType::F32, &as_dtype(DType::F32, &small), &opts)?,
    )?;
    seeds.add(
        "key-f32-empty",
        &segment::encode_keyframe(DType::F32, &[], &opts)?,
    )?;
    seeds.add(
        "key-bf16-const",
        &segment::encode_keyframe(DType::BF16, &as_dtype(DType::BF16, &[0.5; 300]), &opts)?,
    )?;
    let specials = [
        f32::NAN,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e-45,
        f32::MAX,
        f32::MIN_POSITIVE,
        1.0,
    ];
    seeds.add(
        "key-f32-specials",
        &segment::encode_keyframe(DType::F32, &as_dtype(DType::F32, &specials), &opts)?,
    )?;

    // Deltas against the targets' base (`base_pattern`), so they decode fully there.
    for dtype in [DType::F32, DType::BF16, DType::F64, DType::I32, DType::U8] {
        let data = as_dtype(dtype, &v);
        let seg = segment::encode_delta(dtype, &data, &base_pattern(data.len()), &opts)?;
        seeds.add(&format!("delta-pattern-{dtype}"), &seg)?;
    }
    // The base with a change that depends on each word's exponent, as a training step's
    // does: the encoder picks base-exponent contexts (plane method 4).
    for dtype in [DType::BF16, DType::F32] {
        let base = base_pattern(4096 * dtype.size());
        let seg =
            segment::encode_delta(dtype, &exponent_step(dtype, &base, &mut rng), &base, &opts)?;
        if !uses_base_contexts(&seg)? {
            eprintln!("note: the {dtype} context seed does not use base contexts (method 4)");
        }
        seeds.add(&format!("delta-ctx-{dtype}"), &seg)?;
    }
    // Exponent planes coded marked (method 5), with exceptions. A generator of their own,
    // so that the seeds after them stay as they were.
    let mut marked_rng = Rng(SplitMix64::new(0x3A2C));
    for dtype in [DType::BF16, DType::F32] {
        let base = base_pattern(4096 * dtype.size());
        let step = marked_step(dtype, &base, &mut marked_rng);
        let seg = segment::encode_delta(dtype, &step, &base, &opts)?;
        if !uses_marked(&seg)? {
            eprintln!("note: the {dtype} marked seed does not use method 5");
        }
        seeds.add(&format!("delta-marked-{dtype}"), &seg)?;
    }
    // A small weight update against a realistic base (decodes only in payload_decode).
    let next: Vec<f32> = v.iter().map(|&x| x + rng.weight(1e-4)).collect();
    for dtype in [DType::F32, DType::BF16] {
        let seg =
            segment::encode_delta(dtype, &as_dtype(dtype, &next), &as_dtype(dtype, &v), &opts)?;
        seeds.add(&format!("delta-step-{dtype}"), &seg)?;
    }
    // Planes of 2^14 symbols and more use the 32-lane layout, which the AVX2 kernels
    // decode: a bf16 keyframe (the 10-bit head and the 6-bit tail both coded: one value
    // in most places keeps it small) and a bf16 delta with base contexts. payload_decode
    // reads at most 4096 elements, so only their segments are useful.
    let wide: Vec<f32> = (0..1u32 << 14)
        .map(|i| match i.wrapping_mul(0x9E37_79B9) >> 28 {
            0 => (i % 61) as f32 * 0.003 - 0.09,
            _ => 0.0123,
        })
        .collect();
    seeds.add(
        "key-bf16-wide",
        &segment::encode_keyframe(DType::BF16, &as_dtype(DType::BF16, &wide), &opts)?,
    )?;
    let base = base_pattern(2 << 14);
    let seg = segment::encode_delta(
        DType::BF16,
        &exponent_step(DType::BF16, &base, &mut rng),
        &base,
        &opts,
    )?;
    seeds.add("delta-ctx-bf16-wide", &seg)?;
    // zstd planes: the same blocks at maximum ratio.
    let zopts = LosslessOptions::max_ratio();
    let sparse: Vec<f32> = (0..1024)
        .map(|i| if i % 16 < 2 { v[i % 256] } else { 0.0 })
        .collect();
    seeds.add(
        "key-zstd-f32",
        &segment::encode_keyframe(DType::F32, &as_dtype(DType::F32, &sparse), &zopts)?,
    )?;
    let base = base_pattern(1024 * 2);
    seeds.add(
        "delta-zstd-bf16",
        &segment::encode_delta(DType::BF16, &as_dtype(DType::BF16, &sparse), &base, &zopts)?,
    )?;

    // Quantized, every width; a ragged last group; groups of 1 and one group for all.
    let q = weights(&mut rng, 200, 0.02);
    for bits in QuantBits::ALL {
        let params = QuantParams {
            two_level: None,
            ..QuantParams::new(bits)
        };
        let seg = segment::encode_quantized(DType::F32, &q, &params)?;
        seeds.add(&format!("quant{}", bits.bits()), &seg)?;
    }
    for (name, gs) in [("gs1", 1), ("gs1000", 1000), ("gs7", 7)] {
        let params = QuantParams::new(QuantBits::B5).with_group_size(gs);
        let seg = segment::encode_quantized(DType::BF16, &q[..40], &params)?;
        seeds.add(&format!("quant5-{name}"), &seg)?;
    }
    seeds.add(
        "quant8-empty",
        &segment::encode_quantized(DType::F32, &[], &QuantParams::new(QuantBits::B8))?,
    )?;
    seeds.add(
        "quant3-zeros",
        &segment::encode_quantized(DType::F16, &[0.0; 70], &QuantParams::new(QuantBits::B3))?,
    )?;

    // Two-level 3-bit: tiny values with a spike in every other group of 64.
    let mut t = weights(&mut rng, 200, 1e-3);
    t[10] = 0.5;
    t[150] = -0.7;
    let params = QuantParams {
        two_level: Some(TwoLevel::default()),
        ..QuantParams::new(QuantBits::B3)
    };
    let seg = segment::encode_quantized(DType::F32, &t, &params)?;
    if Segment::parse(&seg)?.header().encoding != Encoding::TwoLevel3 {
        return Err("two-level seed did not come out two-level".into());
    }
    seeds.add("twolevel3", &seg)?;

    frame_seeds(&mut seeds, &mut rng)?;
    hpdkv_seeds(&mut seeds, &mut rng)?;
    aged_seeds(&mut seeds)?;

    println!(
        "wrote {} seeds to each of {} and {}, {} frame segments to the first, {} blobs to {}, \
         {} aged blobs to {}",
        seeds.count,
        show(&seeds.segment_dir),
        show(&seeds.payload_dir),
        seeds.frame_count,
        seeds.hpdkv_count,
        show(&seeds.hpdkv_dir),
        seeds.aged_count,
        show(&seeds.aged_dir)
    );
    Ok(())
}

fn show(p: &Path) -> String {
    p.display().to_string()
}
