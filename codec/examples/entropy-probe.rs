//! `entropy-probe`: would a Huffman stage (segment format 3, ADR 0043) beat the rANS stage on
//! the planes that cost the most to decode? Measures both on the same 1 MiB blocks, one
//! thread.
//!
//! ```text
//! cargo run --release -p strata-codec --example entropy-probe -- [--reps N] [--max-len BITS] SET...
//! ```
//!
//! A SET is `key-bf16:FILE.safetensors` (F32 tensors cast to bf16, every bf16 block a
//! keyframe), `key:FILE` (the file's bf16 tensors only) or `delta:DIR` (the bf16 tensors of the
//! `step_N.safetensors` of DIR, each block an XOR delta against the same block of the step
//! before, as a store's chain deltas are). Blocks are cut as `plane-bench` cuts them
//! (`common/sets.rs`): 1 MiB, tensors in name order.
//!
//! - **rANS** (the codec): [`lossless::encode`] with the default options; the figure is the
//!   bytes of the plane the probe recodes (the 10-bit head of a keyframe, the low byte of a
//!   delta) as the encoder stored it, and the time of [`lossless::decode`] of whole blocks.
//! - **Huffman**: canonical codes limited to `--max-len` bits (10 to 12, default 12), one
//!   table per context, 8 streams interleaved, decoded 4 symbols per refill of a 64-bit
//!   window from a table of u16 entries (2^12 per context). Keyframes: the head coded, the 6
//!   tail bits stored a byte each, and decoding joins them into bf16 words (the whole block,
//!   as the codec's decode does). Deltas: the low byte plane with 16 contexts from the base
//!   word's exponent (the probe's own buckets: the most common exponent and the 12 below it
//!   and 3 above), decoded alone. Its bytes include its tables (gamma-coded gaps between
//!   present symbols and 4 bits per length).
//!
//! Every Huffman decode is compared with its input. Timings are the fastest of `--reps`
//! (default 9) passes over the whole set.

use std::collections::BinaryHeap;
use std::error::Error;
use std::time::Instant;

use strata_codec::lossless::{self, LosslessOptions};
use strata_codec::DType;

#[path = "common/sets.rs"]
mod sets;
use sets::{set_blocks, Block};

type BoxError = Box<dyn Error>;

/// bf16 values per 1 MiB block.
const BLOCK: usize = 1 << 19;
/// Longest code any run may ask for (`--max-len`), and bits of a context's table index.
const MAX_LEN: u32 = 12;
/// Interleaved streams per plane.
const STREAMS: usize = 8;
/// Contexts of a delta plane.
const CONTEXTS: usize = 16;

/// Code lengths of a length-limited Huffman code for `hist` (zero for absent symbols).
fn code_lengths(hist: &[u32], max_len: u32) -> Vec<u8> {
    let mut len = vec![0u8; hist.len()];
    let mut present: Vec<usize> = (0..hist.len()).filter(|&s| hist[s] > 0).collect();
    if present.len() == 1 {
        len[present[0]] = 1;
    }
    if present.len() <= 1 {
        return len;
    }
    // Huffman's tree by a heap of (weight, node); node ids past the alphabet are inner nodes.
    let n = hist.len();
    let mut parent = vec![usize::MAX; 2 * n];
    let mut heap: BinaryHeap<std::cmp::Reverse<(u64, usize)>> = present
        .iter()
        .map(|&s| std::cmp::Reverse((u64::from(hist[s]), s)))
        .collect();
    let mut next = n;
    while let (Some(a), Some(b)) = (heap.pop(), heap.pop()) {
        let (std::cmp::Reverse((wa, x)), std::cmp::Reverse((wb, y))) = (a, b);
        parent[x] = next;
        parent[y] = next;
        heap.push(std::cmp::Reverse((wa + wb, next)));
        next += 1;
    }
    let root = next - 1;
    for &s in &present {
        let (mut depth, mut at) = (0u32, s);
        while at != root {
            at = parent[at];
            depth += 1;
        }
        len[s] = depth.min(max_len) as u8;
    }
    // Capping broke the Kraft sum: lengthen the rarest codes that can grow until it holds,
    // then shorten the most frequent ones while the slack allows.
    present.sort_by_key(|&s| hist[s]);
    let unit = |l: u8| 1u64 << (max_len - u32::from(l));
    let mut kraft: u64 = present.iter().map(|&s| unit(len[s])).sum();
    while kraft > 1 << max_len {
        let s = present
            .iter()
            .copied()
            .filter(|&s| u32::from(len[s]) < max_len)
            .max_by_key(|&s| (len[s], std::cmp::Reverse(hist[s])))
            .expect("a code shorter than the limit exists while the sum is over");
        kraft -= unit(len[s]) / 2;
        len[s] += 1;
    }
    for &s in present.iter().rev() {
        while len[s] > 1 && kraft + unit(len[s]) <= 1 << max_len {
            kraft += unit(len[s]);
            len[s] -= 1;
        }
    }
    len
}

/// A context's code: lengths and canonical codes, bit-reversed for least-significant-bit-first
/// streams.
struct Code {
    len: Vec<u8>,
    bits: Vec<u32>,
}

impl Code {
    fn new(hist: &[u32], max_len: u32) -> Code {
        let len = code_lengths(hist, max_len);
        let mut order: Vec<usize> = (0..len.len()).filter(|&s| len[s] > 0).collect();
        order.sort_by_key(|&s| (len[s], s));
        let (mut code, mut prev) = (0u32, 0u8);
        let mut bits = vec![0u32; len.len()];
        for &s in &order {
            code <<= len[s] - prev;
            prev = len[s];
            bits[s] = code.reverse_bits() >> (32 - u32::from(len[s]));
            code += 1;
        }
        Code { len, bits }
    }

    /// Decode table entries (symbol | length << 12) for every `MAX_LEN`-bit window.
    fn fill(&self, table: &mut [u16]) {
        for (s, (&l, &b)) in self.len.iter().zip(&self.bits).enumerate() {
            if l == 0 {
                continue;
            }
            let mut i = b as usize;
            while i < table.len() {
                table[i] = s as u16 | u16::from(l) << 12;
                i += 1 << l;
            }
        }
    }

    /// Bits of the stored table: per present symbol the gamma code of its gap from the
    /// previous one and 4 bits of length, then the gap to the alphabet's end.
    fn table_bits(&self) -> usize {
        let gamma = |n: usize| 2 * (usize::BITS - 1 - n.leading_zeros()) as usize + 1;
        let mut bits = 0;
        let mut last = -1i64;
        for (s, &l) in self.len.iter().enumerate() {
            if l > 0 {
                bits += gamma((s as i64 - last) as usize) + 4;
                last = s as i64;
            }
        }
        bits + gamma((self.len.len() as i64 - last) as usize)
    }
}

/// The symbols of one plane, with the context of each and one code per context, in
/// [`STREAMS`] streams (the plane cut into that many runs), each padded for 8-byte reads.
struct Coded {
    streams: Vec<Vec<u8>>,
    table: Box<[u16; CONTEXTS << MAX_LEN]>,
    bytes: usize,
    /// Longest code: bits of the window a symbol is looked up by.
    max_len: u32,
}

fn split_runs(n: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let per = n / STREAMS;
    (0..STREAMS).map(move |k| k * per..if k == STREAMS - 1 { n } else { (k + 1) * per })
}

fn encode(symbols: &[u16], ctx: &[u8], alphabet: usize, max_len: u32) -> Coded {
    let contexts = (usize::from(ctx.iter().copied().max().unwrap_or(0)) + 1).min(CONTEXTS);
    let mut hists = vec![vec![0u32; alphabet]; contexts];
    for (&s, &c) in symbols.iter().zip(ctx) {
        hists[usize::from(c)][usize::from(s)] += 1;
    }
    let codes: Vec<Code> = hists.iter().map(|h| Code::new(h, max_len)).collect();
    let mut table = Box::new([0u16; CONTEXTS << MAX_LEN]);
    for (c, code) in codes.iter().enumerate() {
        code.fill(&mut table[c << MAX_LEN..(c + 1) << MAX_LEN]);
    }
    let mut bytes = codes
        .iter()
        .map(Code::table_bits)
        .sum::<usize>()
        .div_ceil(8);
    let streams = split_runs(symbols.len())
        .map(|run| {
            let mut out = Vec::with_capacity(run.len() * 2 + 16);
            let (mut acc, mut filled) = (0u64, 0u32);
            for i in run {
                let code = &codes[usize::from(ctx[i])];
                let s = usize::from(symbols[i]);
                acc |= u64::from(code.bits[s]) << filled;
                filled += u32::from(code.len[s]);
                if filled >= 32 {
                    out.extend_from_slice(&(acc as u32).to_le_bytes());
                    acc >>= 32;
                    filled -= 32;
                }
            }
            out.extend_from_slice(&acc.to_le_bytes()[..filled.div_ceil(8) as usize]);
            bytes += out.len();
            out.extend_from_slice(&[0; 8]);
            out
        })
        .collect();
    Coded {
        streams,
        table,
        bytes,
        max_len,
    }
}

/// The 64 bits of `stream` from bit `at` on (the stream is padded with 8 zero bytes).
#[inline(always)]
fn window(stream: &[u8], at: usize) -> u64 {
    let i = at >> 3;
    let word: [u8; 8] = stream[i..i + 8].try_into().expect("8 bytes");
    u64::from_le_bytes(word) >> (at & 7)
}

/// Decodes `coded` into `out` (`out.len()` symbols, contexts `ctx` when `CTX`, else every
/// symbol with the first table), 4 symbols of each stream per refill: 4 x 12 bits fit the
/// 57 a refill guarantees.
fn decode<const CTX: bool>(coded: &Coded, ctx: &[u8], out: &mut [u16]) {
    let n = out.len();
    assert!(!CTX || ctx.len() == n);
    let per = n / STREAMS;
    let mut at = [0usize; STREAMS];
    let mask = (1u64 << coded.max_len) - 1;
    // The index is below CONTEXTS << MAX_LEN, the table's fixed length: no bounds check.
    let table: &[u16; CONTEXTS << MAX_LEN] = &coded.table;
    let entry = |c: u8, bits: u64| {
        table[(usize::from(c) & (CONTEXTS - 1)) << MAX_LEN | (bits & mask) as usize]
    };
    for i in 0..per / 4 {
        for (k, pos) in at.iter_mut().enumerate() {
            let mut bits = window(&coded.streams[k], *pos);
            let mut used = 0;
            let first = k * per + 4 * i;
            for j in first..first + 4 {
                // Both indices without bounds checks: i < per / 4 and k < STREAMS, so
                // j < k * per + per <= n, and `out` has n elements, `ctx` too when CTX
                // (asserted).
                let c = if CTX {
                    // SAFETY: j < n = ctx.len(), above.
                    unsafe { *ctx.get_unchecked(j) }
                } else {
                    0
                };
                let e = entry(c, bits);
                // SAFETY: j < n = out.len(), above.
                unsafe { *out.get_unchecked_mut(j) = e & 0x3FF };
                bits >>= e >> 12;
                used += usize::from(e >> 12);
            }
            *pos += used;
        }
    }
    for (k, run) in split_runs(n).enumerate() {
        for j in run.start + per / 4 * 4..run.end {
            let c = if CTX { ctx[j] } else { 0 };
            let e = entry(c, window(&coded.streams[k], at[k]));
            out[j] = e & 0x3FF;
            at[k] += usize::from(e >> 12);
        }
    }
}

/// The little-endian u16 words of `bytes`.
fn words(bytes: &[u8]) -> Vec<u16> {
    bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect()
}

/// The bf16 blocks the probe codes of a set: every one of a keyframe set, the deltas of a
/// delta set (a tensor without a base in the step before is left out).
fn bf16_blocks(set: &str) -> Result<Vec<Block>, BoxError> {
    let delta = set.starts_with("delta:");
    let blocks: Vec<Block> = set_blocks(set)?
        .into_iter()
        .filter(|b| b.dtype == DType::BF16 && (b.base.is_some() || !delta))
        .collect();
    if blocks.is_empty() {
        return Err(format!("{set}: no bf16 blocks").into());
    }
    Ok(blocks)
}

/// The probe's contexts of a delta's symbols: the base word's exponent in 16 buckets around
/// the most common one.
fn exponent_contexts(base: &[u16]) -> Vec<u8> {
    let mut hist = [0u32; 256];
    for &w in base {
        hist[usize::from((w >> 7) & 0xFF)] += 1;
    }
    let top = (0..256).max_by_key(|&e| hist[e]).unwrap_or(0) as i32;
    base.iter()
        .map(|&w| (i32::from((w >> 7) & 0xFF) - (top - 12)).clamp(0, CONTEXTS as i32 - 1) as u8)
        .collect()
}

/// What the probe codes of a block of `words` (and `base`, a delta's): (symbols, contexts,
/// alphabet).
fn plane(words: &[u16], base: Option<&[u8]>) -> (Vec<u16>, Vec<u8>, usize) {
    match base.map(self::words) {
        None => (
            words.iter().map(|w| w.rotate_left(1) >> 6).collect(),
            vec![0; words.len()],
            1 << 10,
        ),
        Some(base) => (
            words
                .iter()
                .zip(&base)
                .map(|(w, b)| (w ^ b).rotate_left(1) & 0xFF)
                .collect(),
            exponent_contexts(&base),
            1 << 8,
        ),
    }
}

fn fastest(reps: usize, mut f: impl FnMut() -> Result<(), BoxError>) -> Result<f64, BoxError> {
    let mut best = f64::MAX;
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

fn probe(set: &str, reps: usize, max_len: u32) -> Result<(), BoxError> {
    let blocks = bf16_blocks(set)?;
    let symbols: usize = blocks.iter().map(|b| b.data.len() / 2).sum();
    let opts = LosslessOptions::default();
    // The codec: payloads, and the bytes of the probed plane (plane 0: the head of a
    // keyframe, the low byte of a delta).
    let mut payloads = Vec::with_capacity(blocks.len());
    let (mut rans_plane, mut codec_bytes) = (0usize, 0usize);
    for b in &blocks {
        let mut out = Vec::new();
        let stats = lossless::encode(DType::BF16, &b.data, b.base.as_deref(), &opts, &mut out)?;
        rans_plane += stats.planes.first().map_or(0, |p| p.1);
        codec_bytes += out.len();
        payloads.push(out);
    }
    let mut out = vec![0u8; 2 * BLOCK];
    let codec_s = fastest(reps, || {
        for (p, b) in payloads.iter().zip(&blocks) {
            let out = &mut out[..b.data.len()];
            lossless::decode(DType::BF16, p, b.base.as_deref(), out)?;
            std::hint::black_box(out);
        }
        Ok(())
    })?;
    // Huffman on the same plane.
    let block_words: Vec<Vec<u16>> = blocks.iter().map(|b| words(&b.data)).collect();
    let planes: Vec<_> = block_words
        .iter()
        .zip(&blocks)
        .map(|(w, b)| plane(w, b.base.as_deref()))
        .collect();
    let coded: Vec<Coded> = planes
        .iter()
        .map(|(s, c, a)| encode(s, c, *a, max_len))
        .collect();
    let huffman_plane: usize = coded.iter().map(|c| c.bytes).sum();
    let tails: Vec<Vec<u8>> = block_words
        .iter()
        .map(|w| w.iter().map(|w| (w.rotate_left(1) & 0x3F) as u8).collect())
        .collect();
    let mut sym = vec![0u16; BLOCK];
    let mut joined = vec![0u16; BLOCK];
    let huffman_s = fastest(reps, || {
        for (i, ((_, ctx, _), c)) in planes.iter().zip(&coded).enumerate() {
            let n = ctx.len();
            if blocks[i].base.is_some() {
                decode::<true>(c, ctx, &mut sym[..n]);
            } else {
                decode::<false>(c, ctx, &mut sym[..n]);
                for ((w, &h), &t) in joined.iter_mut().zip(&sym[..n]).zip(&tails[i]) {
                    *w = (h << 6 | u16::from(t)).rotate_right(1);
                }
                std::hint::black_box(&joined);
            }
        }
        Ok(())
    })?;
    for ((s, ctx, _), c) in planes.iter().zip(&coded) {
        decode::<true>(c, ctx, &mut sym[..s.len()]);
        if sym[..s.len()] != s[..] {
            return Err(format!("{set}: a Huffman decode differs from its input").into());
        }
    }
    let bits = |bytes: usize| bytes as f64 * 8.0 / symbols as f64;
    let what = if blocks[0].base.is_none() {
        "head (10 bits) + tail joined, whole block"
    } else {
        "low byte plane alone, 16 contexts"
    };
    println!("{set}: {} blocks, {symbols} values", blocks.len());
    println!(
        "  probed plane: rANS {:.4} bits/value, Huffman {:.4} ({:+.3} % of the plane, {:+.3} % of the codec's payload of {codec_bytes} bytes)",
        bits(rans_plane),
        bits(huffman_plane),
        (huffman_plane as f64 / rans_plane as f64 - 1.0) * 100.0,
        (huffman_plane as f64 - rans_plane as f64) / codec_bytes as f64 * 100.0
    );
    println!(
        "  decode, one thread: codec (whole blocks) {:.3} ns/value; Huffman ({what}) {:.3} ns/value",
        codec_s * 1e9 / symbols as f64,
        huffman_s * 1e9 / symbols as f64
    );
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let mut reps = 9;
    let mut max_len = MAX_LEN;
    let mut sets = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--reps" {
            reps = args.next().ok_or("--reps N")?.parse()?;
        } else if a == "--max-len" {
            max_len = args.next().ok_or("--max-len BITS")?.parse()?;
            // Every one of a head's 2^10 symbols may be present: shorter limits cannot code them.
            if !(10..=MAX_LEN).contains(&max_len) {
                return Err(format!("--max-len: 10 to {MAX_LEN}").into());
            }
        } else {
            sets.push(a);
        }
    }
    if sets.is_empty() {
        return Err(
            "usage: entropy-probe [--reps N] [--max-len BITS] key-bf16:FILE | delta:DIR ...".into(),
        );
    }
    for set in &sets {
        probe(set, reps.max(1), max_len)?;
    }
    Ok(())
}
