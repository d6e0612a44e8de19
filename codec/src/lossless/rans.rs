//! Interleaved rANS for one plane of symbols, with up to [`MAX_CONTEXTS`] static models.
//!
//! A plane holds bytes (an alphabet of 256) or 10-bit symbols (1024; the joint exponent
//! and top mantissa bits of a float, see the parent module). Each symbol is coded with the
//! model of its context (a small integer both sides know, e.g. a bucket of the base word's
//! exponent in a delta); with one context this is plain order-0 coding. Frequencies are
//! normalized to `2^PROB_BITS` and stored with the data.
//!
//! The coder is ryg's `rans_word` arranged for SIMD, as in htscodecs' `rans32x16`: 32-bit
//! states in `[2^15, 2^31)` that emit and consume 16-bit words. Symbol `i` goes to lane
//! `i % lanes`; the lanes are split into streams of `K` lanes that each own a word stream.
//! Within a step (one symbol per lane) the lanes of a stream that need a word take the next
//! ones in lane order. Two layouts:
//!
//! - narrow: 4 lanes, 1 stream, for small planes (least overhead);
//! - wide: 32 lanes, 4 streams of 8, for planes of at least [`WIDE_MIN`] symbols. A
//!   stream's 8 lanes are one AVX2 register: decoding a step is eight loads from the
//!   decode table (faster than a gather instruction, ADR 0004), a multiply-add, and a
//!   refill whose words are moved to their lanes by a
//!   permutation chosen by the refill mask; the four streams are independent, so their
//!   steps overlap. The scalar encoder divides by multiplying with a 32-bit reciprocal, the
//!   AVX2 one with a float reciprocal corrected by the remainder; both are exact.
//!
//! The SIMD paths compute exactly what the scalar code does, so the bytes are the same
//! whichever runs (the tests compare them); wasm32 and CPUs without AVX2 run the scalar
//! code.
//!
//! # Stream layout
//!
//! | bytes | field |
//! |---|---|
//! | 1 | number of contexts `C`, 1..=16 |
//! | ... | the `C` tables, one bit stream (most significant bit first) padded with zero bits to a byte; see below |
//! | 1 | layout: 0 narrow (4 lanes, 1 stream), 1 wide (32 lanes, 4 streams of 8 lanes) |
//! | `4 * lanes` | the final encoder states (the decoder's initial states), u32 LE, lane order |
//! | `4 * streams` | the number of 16-bit words in each stream, u32 LE |
//! | ... | the word streams one after the other, u16 LE, in decoder order |
//!
//! A table holds counts, not frequencies: a flag bit (1: counts coded as differences),
//! then for each present symbol, ascending, the Elias gamma code of its distance from the
//! previous one (the first from -1) and of its count (or of the zigzagged difference from
//! the previous count, the first from 0), then the gamma code of the distance from the last
//! present symbol to the alphabet's size. No symbol present marks an unused context. The
//! decoder turns counts into frequencies with [`normalize`], which is therefore part of
//! the format; the encoder writes exact counts when they sum to at most `2^PROB_BITS`, else
//! the frequencies (which normalize to themselves). Small contexts' counts are small
//! numbers, so tables cost 40 to 60 % less than frequencies in LEB128 behind a bitmap.

#[cfg(target_arch = "x86_64")]
mod avx2;

use super::LosslessError;

/// Frequency precision: frequencies sum to `2^PROB_BITS`.
const PROB_BITS: u32 = 12;
const PROB_SCALE: u32 = 1 << PROB_BITS;
const MASK: u32 = PROB_SCALE - 1;
/// Lower bound of the normalized state interval `[L, L << 16)`.
const RANS_L: u32 = 1 << 15;
/// Most contexts a stream may have.
pub(crate) const MAX_CONTEXTS: usize = 16;
/// Most lanes of any layout.
const MAX_LANES: usize = 32;
/// Planes of at least this many symbols use the wide layout. Below it the 130 extra bytes
/// of states and stream lengths would cost more than 1 % of a well-coded plane.
const WIDE_MIN: usize = 1 << 14;

/// The symbols of a plane: bytes, or 10-bit values in a `u16`.
///
/// A decode table entry packs `symbol | (freq - 1) << BITS | (slot - start) << (BITS +
/// FREQ_BITS)` into 32 bits, so wider symbols leave fewer bits for the frequency: a
/// 10-bit symbol's frequency is at most `2^11`, half the scale.
pub(crate) trait Symbol: Copy + Default + PartialEq + std::fmt::Debug + 'static {
    /// Bits of a symbol; the alphabet has `2^BITS` symbols.
    const BITS: u32;
    /// Bits of `freq - 1` in a decode table entry; frequencies are at most `2^FREQ_BITS`.
    const FREQ_BITS: u32;
    /// The symbol's number, reduced modulo `2^BITS` (a wider value is the caller's bug;
    /// every kernel reduces it the same way).
    fn index(self) -> usize;
    /// The symbol numbered `i` (`i < 2^BITS`).
    fn from_index(i: u32) -> Self;
    /// The plane as bytes, if its symbols are bytes.
    fn as_bytes(plane: &[Self]) -> Option<&[u8]>;
    /// The plane as bytes, if its symbols are bytes.
    fn as_bytes_mut(plane: &mut [Self]) -> Option<&mut [u8]>;
}

impl Symbol for u8 {
    const BITS: u32 = 8;
    const FREQ_BITS: u32 = 12;

    #[inline(always)]
    fn index(self) -> usize {
        usize::from(self)
    }

    #[inline(always)]
    fn from_index(i: u32) -> u8 {
        i as u8
    }

    fn as_bytes(plane: &[u8]) -> Option<&[u8]> {
        Some(plane)
    }

    fn as_bytes_mut(plane: &mut [u8]) -> Option<&mut [u8]> {
        Some(plane)
    }
}

impl Symbol for u16 {
    const BITS: u32 = 10;
    const FREQ_BITS: u32 = 11;

    #[inline(always)]
    fn index(self) -> usize {
        usize::from(self & 0x3FF)
    }

    #[inline(always)]
    fn from_index(i: u32) -> u16 {
        i as u16
    }

    fn as_bytes(_: &[u16]) -> Option<&[u8]> {
        None
    }

    fn as_bytes_mut(_: &mut [u16]) -> Option<&mut [u8]> {
        None
    }
}

/// The alphabet size of `S`.
const fn alphabet<S: Symbol>() -> usize {
    1 << S::BITS
}

/// How lanes and streams are arranged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// 4 lanes sharing one stream.
    Narrow,
    /// 32 lanes in 4 streams of 8.
    Wide,
}

impl Layout {
    fn for_len(n: usize) -> Layout {
        if n >= WIDE_MIN {
            Layout::Wide
        } else {
            Layout::Narrow
        }
    }

    const fn streams(self) -> usize {
        match self {
            Layout::Narrow => 1,
            Layout::Wide => 4,
        }
    }

    const fn lanes(self) -> usize {
        match self {
            Layout::Narrow => 4,
            Layout::Wide => 32,
        }
    }

    fn code(self) -> u8 {
        match self {
            Layout::Narrow => 0,
            Layout::Wide => 1,
        }
    }

    fn from_code(code: u8) -> Option<Layout> {
        match code {
            0 => Some(Layout::Narrow),
            1 => Some(Layout::Wide),
            _ => None,
        }
    }

    /// Bytes of the layout byte, states and stream lengths.
    const fn header_bytes(self) -> usize {
        1 + 4 * self.lanes() + 4 * self.streams()
    }
}

/// Which code runs the wide layout's steps. All give the same bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kernel {
    /// Portable scalar code (wasm32, CPUs without AVX2).
    Scalar,
    /// AVX2 (and POPCNT), 8 lanes per register. With `gather`, the decoder reads its
    /// table entries with `_mm256_i32gather_epi32`, else with eight scalar loads (the
    /// encoder always gathers).
    #[cfg(target_arch = "x86_64")]
    Avx2 { gather: bool },
}

impl Kernel {
    /// The fastest kernel this CPU runs.
    fn detect() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("popcnt")
        {
            return Kernel::Avx2 {
                gather: gather_pays(),
            };
        }
        Kernel::Scalar
    }
}

/// Whether the AVX2 decoder reads its table faster by gathers than by scalar loads on this
/// CPU, timed once per process (ADR 0004's addendum: scalar loads decode about 10 % faster on
/// AMD's Zen 1 and Zen 4, gathers 5-15 % faster on a recent Intel Xeon; both write the same
/// symbols). The trial decodes a plane of 10-bit symbols skewed as exponents are, 2^15 of
/// them, seven times each way, and keeps the faster minimum: about 0.3 ms on the Xeon of
/// the addendum.
#[cfg(target_arch = "x86_64")]
fn gather_pays() -> bool {
    static PAYS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PAYS.get_or_init(|| {
        let mut rng = crate::testing::SplitMix64::new(0x5EED);
        let plane: Vec<u16> = (0..1 << 15)
            .map(|_| {
                let r = rng.next_u64();
                // About 4.5 bits per symbol, as bf16 heads code.
                (0x1F0 + (r as u16 & 0x3F) * u16::from(r >> 8 & 7 == 0) + (r >> 16 & 7) as u16)
                    & 0x3FF
            })
            .collect();
        let Some(model) = Model::new::<u16>(&[histogram(&plane)]) else {
            return false;
        };
        let mut src = Vec::new();
        let loads = Kernel::Avx2 { gather: false };
        encode_with(
            loads,
            Layout::Wide,
            &plane,
            Contexts::Order0,
            &model,
            &mut src,
        );
        let (mut out, mut table) = (vec![0u16; plane.len()], Vec::new());
        let mut best = [f64::INFINITY; 2];
        for _ in 0..7 {
            for (gather, best) in [false, true].into_iter().zip(&mut best) {
                let k = Kernel::Avx2 { gather };
                let t = std::time::Instant::now();
                let r = decode_with(
                    k,
                    &src,
                    0,
                    Contexts::Order0,
                    10,
                    &mut out,
                    None,
                    &mut table,
                    true,
                );
                *best = best.min(t.elapsed().as_secs_f64());
                if r.is_err() || out != plane {
                    return false;
                }
            }
        }
        best[1] < best[0]
    })
}

/// The context of each element of a plane, and the largest context it can hold.
#[derive(Debug, Clone)]
pub(crate) struct ContextMap {
    ctx: Vec<u8>,
    /// No element's context is above it.
    top: u8,
}

impl ContextMap {
    /// The map of `ctx` (element `i` has context `ctx[i]`).
    pub(crate) fn new(ctx: Vec<u8>) -> ContextMap {
        let top = ctx.iter().copied().max().unwrap_or(0);
        ContextMap { ctx, top }
    }

    /// The map of contexts `clamp(e - lo, 0, count - 1)` of exponent bytes `exps`
    /// (`1 <= count <= 32`), in one pass of byte arithmetic (it vectorizes; which contexts
    /// occur is found only when a decode needs it, [`ContextMap::present`]).
    pub(crate) fn bucketized(exps: &[u8], lo: u8, count: usize) -> ContextMap {
        let top = count.clamp(1, 32) as u8 - 1;
        let ctx = exps
            .iter()
            .map(|&x| x.saturating_sub(lo).min(top))
            .collect();
        ContextMap { ctx, top }
    }

    /// Bit `k` set when some element has context `k` (contexts above 31 set bit 31).
    fn present(&self) -> u32 {
        let mut seen = [false; 256];
        for &k in &self.ctx {
            seen[usize::from(k)] = true;
        }
        seen.iter()
            .enumerate()
            .filter(|p| *p.1)
            .fold(0u32, |m, (k, _)| m | 1 << k.min(31))
    }

    /// The context of each element.
    pub(crate) fn ctx(&self) -> &[u8] {
        &self.ctx
    }
}

/// Where each symbol's model comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Contexts<'a> {
    /// One model for every symbol.
    Order0,
    /// Element `i` uses model `map.ctx[i]` (at least as many as the plane's symbols).
    Given(&'a ContextMap),
}

impl<'a> Contexts<'a> {
    #[inline(always)]
    fn at(self, i: usize) -> usize {
        match self {
            Contexts::Order0 => 0,
            Contexts::Given(m) => usize::from(m.ctx[i]),
        }
    }

    /// The per-element contexts of the first `n` elements, or `None` for order-0.
    #[cfg(target_arch = "x86_64")]
    fn head(self, n: usize) -> Option<&'a [u8]> {
        match self {
            Contexts::Order0 => None,
            Contexts::Given(m) => Some(&m.ctx[..n]),
        }
    }
}

/// Histogram of a plane: `2^S::BITS` counts.
pub(crate) fn histogram<S: Symbol>(plane: &[S]) -> Vec<u32> {
    // Four sub-histograms hide the store-to-load latency of repeated symbols.
    let a = alphabet::<S>();
    let mut h = vec![0u32; 4 * a];
    let (h0, rest) = h.split_at_mut(a);
    let (h1, rest) = rest.split_at_mut(a);
    let (h2, h3) = rest.split_at_mut(a);
    let chunks = plane.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        h0[c[0].index()] += 1;
        h1[c[1].index()] += 1;
        h2[c[2].index()] += 1;
        h3[c[3].index()] += 1;
    }
    for &s in tail {
        h0[s.index()] += 1;
    }
    for (((a, &b), &c), &d) in h0.iter_mut().zip(&*h1).zip(&*h2).zip(&*h3) {
        *a += b + c + d;
    }
    h.truncate(a);
    h
}

/// One histogram per context (`ctx[i] < n` for every element).
pub(crate) fn histograms<S: Symbol>(plane: &[S], ctx: &[u8], n: usize) -> Vec<Vec<u32>> {
    // One flat table, the context in the high bits of the index; four of them, for
    // elements in turn, so that repeated (context, symbol) pairs (the zero bytes of a
    // delta, mostly) do not wait on each other's stores.
    let a = alphabet::<S>();
    let size = n.next_power_of_two() * a;
    let mut flat = vec![0u32; 4 * size];
    let (h0, rest) = flat.split_at_mut(size);
    let (h1, rest) = rest.split_at_mut(size);
    let (h2, h3) = rest.split_at_mut(size);
    // Contexts are below `n`, so the mask never folds two together; it only spares the
    // bounds checks.
    let mask = size - 1;
    let at = |c: u8, s: S| (usize::from(c) << S::BITS | s.index()) & mask;
    let len = plane.len().min(ctx.len());
    let (plane, ctx) = (&plane[..len], &ctx[..len]);
    let full = len / 4 * 4;
    for (s, c) in plane[..full]
        .chunks_exact(4)
        .zip(ctx[..full].chunks_exact(4))
    {
        h0[at(c[0], s[0])] += 1;
        h1[at(c[1], s[1])] += 1;
        h2[at(c[2], s[2])] += 1;
        h3[at(c[3], s[3])] += 1;
    }
    for (&s, &c) in plane[full..].iter().zip(&ctx[full..]) {
        h0[at(c, s)] += 1;
    }
    (0..n)
        .map(|k| {
            let r = k * a..(k + 1) * a;
            let (a0, a1, a2, a3) = (&h0[r.clone()], &h1[r.clone()], &h2[r.clone()], &h3[r]);
            a0.iter()
                .zip(a1)
                .zip(a2)
                .zip(a3)
                .map(|(((w, x), y), z)| w + x + y + z)
                .collect()
        })
        .collect()
}

/// The order-0 histogram of a plane from its per-context histograms.
pub(crate) fn merge(hists: &[Vec<u32>]) -> Vec<u32> {
    let mut h = hists.first().cloned().unwrap_or_default();
    for other in hists.iter().skip(1) {
        for (a, &b) in h.iter_mut().zip(other) {
            *a += b;
        }
    }
    h
}

/// The frequencies of one context: `2^S::BITS` of them, summing to `PROB_SCALE` (or all
/// zero for a context no symbol uses).
type Freqs = Vec<u32>;

/// A plane's models, normalized from histograms, and the size they code the plane to.
#[derive(Debug, Clone)]
pub(crate) struct Model {
    freqs: Vec<Freqs>,
    /// What each context's table transmits: counts whose [`normalize`] gives its
    /// frequencies.
    counts: Vec<Vec<u32>>,
    /// Estimated bytes of the word streams.
    data_bytes: usize,
    bytes: usize,
}

impl Model {
    /// Normalizes one histogram per context (each of `2^S::BITS` counts) and estimates the
    /// stream's size: the plane's cost under the normalized frequencies, plus tables,
    /// states and stream lengths. `None` if a context cannot be normalized for `S` (a
    /// context whose only symbol needs the whole scale while `S` caps frequencies lower).
    pub(crate) fn new<S: Symbol>(hists: &[Vec<u32>]) -> Option<Model> {
        let log2 = log2_table();
        let mut bits = 0.0;
        let mut table_bits = 0;
        let mut n = 0u64;
        let mut freqs = Vec::with_capacity(hists.len());
        let mut counts = Vec::with_capacity(hists.len());
        for hist in hists {
            let f = normalize(hist, 1 << S::FREQ_BITS)?;
            let total: u64 = hist.iter().map(|&c| u64::from(c)).sum();
            for (&c, &f) in hist.iter().zip(&f) {
                if c > 0 {
                    bits += f64::from(c) * (f64::from(PROB_BITS) - log2[f as usize]);
                }
            }
            n += total;
            // Exact counts normalize to the frequencies; so do the frequencies themselves
            // (they sum to the scale), which are the smaller numbers for larger counts.
            let c = if total <= u64::from(PROB_SCALE) {
                hist.clone()
            } else {
                f.clone()
            };
            table_bits += table_len(&c).0;
            freqs.push(f);
            counts.push(c);
        }
        let layout = Layout::for_len(usize::try_from(n).unwrap_or(usize::MAX));
        let data_bytes = (bits / 8.0).ceil() as usize;
        let bytes = data_bytes + 1 + table_bits.div_ceil(8) + layout.header_bytes();
        Some(Model {
            freqs,
            counts,
            data_bytes,
            bytes,
        })
    }

    /// Estimated bytes of the stream (within a few bytes per lane of the real size).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

/// `log2(i)` for `i` in `0..=PROB_SCALE` (0 for 0), computed once.
fn log2_table() -> &'static [f64] {
    static TABLE: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=PROB_SCALE)
            .map(|i| if i == 0 { 0.0 } else { f64::from(i).log2() })
            .collect()
    })
}

/// Bits an order-0 code of the counted symbols takes: the entropy of the histogram
/// `counts` times its total (exact `log2`, for sampled decisions; see [`estimate`] for a
/// plane's bytes with its tables).
pub(crate) fn order0_bits(counts: &[u32]) -> f64 {
    let total: f64 = counts.iter().map(|&c| f64::from(c)).sum();
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| -f64::from(c) * (f64::from(c) / total).log2())
        .sum()
}

/// A quick estimate of the bytes a plane codes to with one model per histogram: the
/// order-0 entropy of each context (frequencies not normalized, `log2` of counts above
/// the scale approximated to 0.0008 bits) and the tables' length (counts above the scale
/// scaled down as the table carries them, not normalized). For choosing between models
/// before normalizing only the winner.
pub(crate) fn estimate(hists: &[Vec<u32>]) -> usize {
    let log2 = log2_table();
    // log2(c) to within 0.0008 bits, from the table, for any count: c >> k has at most
    // PROB_BITS bits, so it indexes the table.
    let lg = |c: u64| -> f64 {
        let k = (64 - c.leading_zeros()).saturating_sub(PROB_BITS);
        log2[(c >> k) as usize] + f64::from(k)
    };
    let scale = u64::from(PROB_SCALE);
    let mut bits = 8.0;
    for hist in hists {
        let total: u64 = hist.iter().map(|&c| u64::from(c)).sum();
        let shown = |c: u32| -> u32 {
            match u64::from(c) {
                0 => 0,
                c if total <= scale => c as u32,
                c => ((c * scale + total / 2) / total).max(1) as u32,
            }
        };
        bits += table_len_of(hist.len(), hist.iter().map(|&c| shown(c))).0 as f64;
        if total > 0 {
            let lt = lg(total);
            for &c in hist.iter().filter(|&&c| c > 0) {
                let c = u64::from(c);
                bits += c as f64 * (lt - lg(c));
            }
        }
    }
    (bits / 8.0) as usize
}

/// Scales counts to frequencies summing to `PROB_SCALE`, every present symbol at least 1
/// and none above `max`. The decoder runs it on the counts a table holds, so it is part of
/// the format: plain integer arithmetic, the same on every platform.
///
/// Symbols whose share of the scale is below one slot get one; the others share the rest
/// of the scale in proportion to their counts, rounded to nearest. The rounding error
/// (a few slots) then goes to or comes from the most frequent symbols, one at a time
/// (the most frequent first, ties to the lower symbol), whose code lengths it changes
/// least. Counts that already sum to the scale within the bounds are returned as they
/// are. An empty histogram gives all zeros; `None` if no symbol can take the rest (one
/// symbol, capped below the scale).
fn normalize(hist: &[u32], max: u32) -> Option<Freqs> {
    let present: Vec<(usize, u32)> = hist
        .iter()
        .enumerate()
        .filter(|&(_, &c)| c > 0)
        .map(|(s, &c)| (s, c))
        .collect();
    let mut freq = vec![0u32; hist.len()];
    for (&(s, _), f) in present.iter().zip(normalize_present(&present, max)?) {
        freq[s] = f;
    }
    Some(freq)
}

/// [`normalize`] of the present symbols only: `(symbol, count)` pairs in ascending symbol
/// order, counts above 0; the frequencies in the same order. The same arithmetic in the same
/// order of symbols (absent symbols take no slot and never move), without passes over the
/// whole alphabet: a context of a delta's plane holds a few dozen of 256 or 1024 symbols,
/// and the decoder normalizes every context of every block it reads.
fn normalize_present(present: &[(usize, u32)], max: u32) -> Option<Freqs> {
    let scale = u64::from(PROB_SCALE);
    let total: u64 = present.iter().map(|&(_, c)| u64::from(c)).sum();
    if total == 0 || total == scale && present.iter().all(|&(_, c)| c <= max) {
        return Some(present.iter().map(|&(_, c)| c).collect());
    }
    // Symbols below one slot, and what they leave to the others.
    let (mut forced, mut forced_count) = (0u64, 0u64);
    for &(_, c) in present {
        if u64::from(c) * scale < total {
            forced += 1;
            forced_count += u64::from(c);
        }
    }
    let (rest_total, rest_scale) = (total - forced_count, scale - forced);
    let mut sum = 0i64;
    let mut freq: Freqs = present
        .iter()
        .map(|&(_, c)| {
            let c = u64::from(c);
            let share = if c * scale < total {
                1
            } else {
                (c * rest_scale + rest_total / 2) / rest_total
            };
            let f = share.clamp(1, u64::from(max)) as u32;
            sum += i64::from(f);
            f
        })
        .collect();
    let mut diff = i64::from(PROB_SCALE) - sum;
    while diff != 0 {
        // The most frequent symbol that can still move the way `diff` asks (every present
        // symbol has a slot), the lowest of equals.
        let mut best: Option<usize> = None;
        for (i, (&f, &(_, c))) in freq.iter().zip(present).enumerate() {
            let movable = if diff > 0 { f < max } else { f > 1 };
            if movable && best.is_none_or(|b| c > present[b].1) {
                best = Some(i);
            }
        }
        let i = best?;
        let room = if diff > 0 {
            i64::from(max - freq[i])
        } else {
            i64::from(freq[i] - 1)
        };
        let step = diff.abs().min(room);
        if diff > 0 {
            freq[i] += step as u32;
            diff -= step;
        } else {
            freq[i] -= step as u32;
            diff += step;
        }
    }
    Some(freq)
}

/// Bits of Elias gamma code of `v >= 1`.
fn gamma_len(v: u32) -> usize {
    2 * (31 - v.leading_zeros()) as usize + 1
}

/// `d` mapped to `1, 2, 3, ...` for `0, -1, 1, -2, ...`, for gamma codes.
fn zigzag(d: i64) -> u32 {
    (if d >= 0 { 2 * d } else { -2 * d - 1 }) as u32 + 1
}

/// Bits of one context's table, and whether its counts are coded as differences.
///
/// A table is a flag bit (1: counts coded as differences), then for each present symbol
/// the gamma code of its distance from the previous one (the first from -1) and its count
/// (gamma of the count, or gamma of the zigzagged difference from the previous count,
/// the first from 0), and at last the gamma code of the distance from the last present
/// symbol to the alphabet's size.
fn table_len(counts: &[u32]) -> (usize, bool) {
    table_len_of(counts.len(), counts.iter().copied())
}

/// [`table_len`] of `len` counts given one by one.
fn table_len_of(len: usize, counts: impl Iterator<Item = u32>) -> (usize, bool) {
    let (mut plain, mut delta) = (1, 1);
    let (mut last, mut prev) = (-1i64, 0i64);
    for (s, c) in counts.enumerate() {
        if c > 0 {
            let gap = gamma_len((s as i64 - last) as u32);
            plain += gap + gamma_len(c);
            delta += gap + gamma_len(zigzag(i64::from(c) - prev));
            (last, prev) = (s as i64, i64::from(c));
        }
    }
    let end = gamma_len((len as i64 - last) as u32);
    (plain.min(delta) + end, delta < plain)
}

/// Writes one context's table (see [`table_len`]).
fn write_table(counts: &[u32], w: &mut BitWriter<'_>) {
    let delta = table_len(counts).1;
    w.put(u32::from(delta), 1);
    let (mut last, mut prev) = (-1i64, 0i64);
    for (s, &c) in counts.iter().enumerate() {
        if c > 0 {
            w.gamma((s as i64 - last) as u32);
            w.gamma(if delta {
                zigzag(i64::from(c) - prev)
            } else {
                c
            });
            (last, prev) = (s as i64, i64::from(c));
        }
    }
    w.gamma((counts.len() as i64 - last) as u32);
}

/// Writes bits most significant first.
struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    held: u32,
}

impl BitWriter<'_> {
    /// Appends the low `n` (at most 32) bits of `v`.
    fn put(&mut self, v: u32, n: u32) {
        self.acc = self.acc << n | u64::from(v) & ((1u64 << n) - 1);
        self.held += n;
        if self.held >= 32 {
            self.held -= 32;
            self.out
                .extend_from_slice(&((self.acc >> self.held) as u32).to_be_bytes());
        }
    }

    /// Appends the Elias gamma code of `v` (`1 <= v < 2^16`): as many zeros as `v` has
    /// bits after the first, then `v`, i.e. `v` in `2n + 1` bits.
    fn gamma(&mut self, v: u32) {
        let n = 31 - v.leading_zeros();
        self.put(v, 2 * n + 1);
    }

    /// Writes the bits held, the last byte padded with zeros.
    fn finish(self) {
        let bytes = self.held.div_ceil(8);
        let tail = (self.acc << (8 * bytes - self.held)) as u32;
        self.out
            .extend_from_slice(&tail.to_be_bytes()[4 - bytes as usize..]);
    }
}

/// Reads what [`BitWriter`] wrote.
struct BitReader<'a> {
    src: &'a [u8],
    /// Next bit.
    pos: usize,
}

impl BitReader<'_> {
    fn bit(&mut self) -> Option<u32> {
        let b = self.src.get(self.pos / 8)?;
        let v = u32::from(b >> (7 - self.pos % 8) & 1);
        self.pos += 1;
        Some(v)
    }

    /// A gamma code of at most `max_bits` bits of value.
    fn gamma(&mut self, max_bits: u32) -> Option<u32> {
        let mut n = 0;
        while self.bit()? == 0 {
            n += 1;
            if n >= max_bits {
                return None;
            }
        }
        let mut v = 1;
        for _ in 0..n {
            v = v << 1 | self.bit()?;
        }
        Some(v)
    }

    /// Bytes used, `false` if the padding bits of the last one are not zero.
    fn finish(&self) -> (usize, bool) {
        let used = self.pos.div_ceil(8);
        let pad = (8 - self.pos % 8) % 8;
        let ok = pad == 0 || self.src[used - 1] & ((1 << pad) - 1) == 0;
        (used, ok)
    }
}

/// Encoder tables for every context: `sym[c << BITS | s]` packs `freq | start << 13 |
/// shift << 25` and `rcp[c << BITS | s]` is the reciprocal of the frequency for the
/// scalar division (see [`EncTables::put`]; the AVX2 encoder reads `sym` only).
struct EncTables {
    rcp: Vec<u32>,
    sym: Vec<u32>,
}

impl EncTables {
    fn new(model: &Model) -> EncTables {
        let n = model.freqs.iter().map(Vec::len).sum();
        let mut rcp = Vec::with_capacity(n);
        let mut sym = Vec::with_capacity(n);
        for freq in &model.freqs {
            let mut start = 0u32;
            for &f in freq {
                // Absent symbols are never coded; give them a valid entry all the same
                // (frequency 1, whose reciprocal needs no division).
                let (fe, r) = match f {
                    0 | 1 => (1, 1u64 << 31),
                    // shift = ceil(log2(f)); rcp = ceil(2^(31 + shift) / f) < 2^32.
                    f => {
                        let shift = 32 - (f - 1).leading_zeros();
                        (f, (1u64 << (31 + shift)).div_ceil(u64::from(f)))
                    }
                };
                let shift = 32 - (fe - 1).leading_zeros();
                rcp.push(r as u32);
                sym.push(fe | start.min(MASK) << 13 | shift << 25);
                start += f;
            }
        }
        EncTables { rcp, sym }
    }

    /// Codes symbol entry `e` into state `x`: first the word that keeps the state in range
    /// goes to word `*pos - 1` of `words` (written always; `pos` moves down by 0 or 1, so
    /// no branch depends on the data), then `x = x + start + (x / freq) * (SCALE - freq)`,
    /// i.e. `(x / freq) * SCALE + x % freq + start`, the quotient from the reciprocal.
    #[inline(always)]
    fn put(&self, e: usize, x: &mut u32, words: &mut [u8], pos: &mut usize) {
        let (r, p) = (self.rcp[e], self.sym[e]);
        let f = p & 0x1FFF;
        let start = p >> 13 & MASK;
        let shift = p >> 25;
        let v = *x;
        // x_max = ((L >> PROB_BITS) << 16) * f; at most 2^31, so x_max - 1 fits.
        let emit = u32::from(v > (f << 19) - 1);
        let at = 2 * (*pos - 1);
        words[at..at + 2].copy_from_slice(&(v as u16).to_le_bytes());
        *pos -= emit as usize;
        let v = v >> (16 * emit);
        let q = ((u64::from(v) * u64::from(r)) >> (31 + shift)) as u32;
        *x = v + start + q * (PROB_SCALE - f);
    }
}

/// The encoder's word streams, in one buffer of `streams` regions of `cap` words: each
/// region is filled from its end downwards, so that the words come out in decoder order;
/// `pos[s]` (in words, from the region's start) is where stream `s` begins.
struct Streams<'a> {
    bytes: &'a mut [u8],
    cap: usize,
    pos: [usize; 4],
}

impl Streams<'_> {
    /// Stream `s`'s region.
    fn region(&mut self, s: usize) -> &mut [u8] {
        &mut self.bytes[2 * s * self.cap..2 * (s + 1) * self.cap]
    }
}

/// Encodes `plane` with `model` (`ctx.at(i) < model.contexts()`), appending the stream to
/// `out`.
pub(crate) fn encode<S: Symbol>(plane: &[S], ctx: Contexts<'_>, model: &Model, out: &mut Vec<u8>) {
    let layout = Layout::for_len(plane.len());
    encode_with(Kernel::detect(), layout, plane, ctx, model, out);
}

fn encode_with<S: Symbol>(
    kernel: Kernel,
    layout: Layout,
    plane: &[S],
    ctx: Contexts<'_>,
    model: &Model,
    out: &mut Vec<u8>,
) {
    out.push(model.freqs.len() as u8);
    let mut w = BitWriter {
        out,
        acc: 0,
        held: 0,
    };
    for c in &model.counts {
        write_table(c, &mut w);
    }
    w.finish();
    out.push(layout.code());
    let tables = EncTables::new(model);
    // Each stream's region is sized from the model's estimate with a margin, so that
    // `out` does not grow to the worst case (two bytes per symbol); a stream that runs
    // out of room makes the encoder start again with the worst case, which always fits
    // (every symbol emits at most one word). 8 words more for the SIMD encoder's
    // whole-register stores, one for the scalar encoder's store below `pos`.
    let (lanes, streams) = (layout.lanes(), layout.streams());
    let per = lanes / streams;
    let worst = (plane.len() / lanes + 1) * per + 9;
    let estimate = model.data_bytes / 2 / streams;
    let tight = (estimate + estimate / 16 + 64).min(worst);
    let start = out.len();
    for cap in [tight, worst] {
        let enc = Encoding::new(kernel, layout, cap, out);
        if let Some(enc) = enc.encode(&tables, plane, ctx, out) {
            enc.finish(out);
            return;
        }
        out.truncate(start);
    }
}

/// The word streams of one rANS stream being encoded, and where they go in `out`.
struct Encoding {
    kernel: Kernel,
    layout: Layout,
    /// Where the states start in `out`; the stream lengths follow, then the words.
    states_at: usize,
    words_at: usize,
    cap: usize,
    x: [u32; MAX_LANES],
    pos: [usize; 4],
}

impl Encoding {
    /// Appends room for the states, lengths and `layout.streams()` regions of `cap` words.
    fn new(kernel: Kernel, layout: Layout, cap: usize, out: &mut Vec<u8>) -> Encoding {
        let states_at = out.len();
        let words_at = states_at + 4 * layout.lanes() + 4 * layout.streams();
        out.resize(words_at + 2 * layout.streams() * cap, 0);
        Encoding {
            kernel,
            layout,
            states_at,
            words_at,
            cap,
            x: [RANS_L; MAX_LANES],
            pos: [cap; 4],
        }
    }

    /// Codes `plane` into the regions reserved in `out`; `None` if a stream ran out of
    /// room. Encoding runs backwards: the partial last step first, lanes in reverse order.
    fn encode<S: Symbol>(
        mut self,
        tables: &EncTables,
        plane: &[S],
        ctx: Contexts<'_>,
        out: &mut [u8],
    ) -> Option<Encoding> {
        let (lanes, streams) = (self.layout.lanes(), self.layout.streams());
        let per = lanes / streams;
        let n = plane.len();
        let steps = n / lanes;
        let full = steps * lanes;
        let mut st = Streams {
            bytes: &mut out[self.words_at..],
            cap: self.cap,
            pos: self.pos,
        };
        let x = &mut self.x;
        // The partial step puts at most `per` words in a stream.
        if st.pos[..streams].iter().any(|&p| p <= per) {
            return None;
        }
        for lane in (0..n - full).rev() {
            let i = full + lane;
            let e = ctx.at(i) << S::BITS | plane[i].index();
            let s = lane / per;
            let mut p = st.pos[s];
            tables.put(e, &mut x[lane], st.region(s), &mut p);
            st.pos[s] = p;
        }
        let done = match self.layout {
            Layout::Narrow => encode_steps::<S, 1, 4>(tables, plane, ctx, steps, x, &mut st),
            Layout::Wide => match self.kernel {
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx2 { .. } => {
                    let (plane, ctx) = (&plane[..full], ctx.head(full));
                    let n_ctx = tables.sym.len() >> S::BITS;
                    // SAFETY: `Kernel::Avx2` is only chosen when the CPU has AVX2 and
                    // POPCNT, the requirements of the call.
                    unsafe { avx2::encode_steps(tables, n_ctx, plane, ctx, x, &mut st) }
                }
                Kernel::Scalar => encode_steps::<S, 4, 8>(tables, plane, ctx, steps, x, &mut st),
            },
        };
        self.pos = st.pos;
        done.then_some(self)
    }

    /// Moves the streams together, writes the states and lengths, trims `out`.
    fn finish(self, out: &mut Vec<u8>) {
        let (lanes, streams) = (self.layout.lanes(), self.layout.streams());
        let mut at = self.words_at;
        for (s, &p) in self.pos.iter().enumerate().take(streams) {
            let from = self.words_at + 2 * (s * self.cap + p);
            let len = 2 * (self.cap - p);
            out.copy_within(from..from + len, at);
            at += len;
        }
        out.truncate(at);
        let mut head = self.states_at;
        for s in &self.x[..lanes] {
            out[head..head + 4].copy_from_slice(&s.to_le_bytes());
            head += 4;
        }
        for &p in &self.pos[..streams] {
            out[head..head + 4].copy_from_slice(&((self.cap - p) as u32).to_le_bytes());
            head += 4;
        }
    }
}

/// Encodes the full steps `0..steps` in reverse, `G` streams of `K` lanes, in scalar code;
/// `false` if a stream ran out of room.
fn encode_steps<S: Symbol, const G: usize, const K: usize>(
    tables: &EncTables,
    plane: &[S],
    ctx: Contexts<'_>,
    steps: usize,
    x: &mut [u32; MAX_LANES],
    st: &mut Streams<'_>,
) -> bool {
    let lanes = G * K;
    for t in (0..steps).rev() {
        for g in 0..G {
            let mut p = st.pos[g];
            // A step puts at most `K` words in a stream, each store one word below `p`.
            if p <= K {
                return false;
            }
            let words = st.region(g);
            for k in (0..K).rev() {
                let lane = g * K + k;
                let i = t * lanes + lane;
                let e = ctx.at(i) << S::BITS | plane[i].index();
                tables.put(e, &mut x[lane], words, &mut p);
            }
            st.pos[g] = p;
        }
    }
    true
}

/// The number of contexts a stream declares (its first byte), checked against `max`.
pub(crate) fn stream_contexts(
    src: &[u8],
    plane: usize,
    max: usize,
) -> Result<usize, LosslessError> {
    match src.first() {
        Some(&n) if (1..=max).contains(&usize::from(n)) => Ok(usize::from(n)),
        _ => Err(LosslessError::Rans {
            plane,
            reason: "bad context count",
        }),
    }
}

/// A word stream being decoded: its bytes and the next word.
#[derive(Debug, Default, Clone, Copy)]
struct Reader<'a> {
    bytes: &'a [u8],
    /// Next word (in words, not bytes).
    pos: usize,
    /// A read past the end was attempted.
    overrun: bool,
}

impl Reader<'_> {
    /// Whole words not yet read.
    #[inline(always)]
    fn words_left(&self) -> usize {
        (self.bytes.len() / 2).saturating_sub(self.pos)
    }
}

/// Decodes a stream written by [`encode`] into `out` (`out.len()` symbols, each below
/// `2^bits`, `bits <= S::BITS`); with [`Contexts::Given`], `ctx` must have `out.len()`
/// entries. With `whole`, `out` is the whole plane; without, its first `out.len()` symbols
/// (symbol `i` is decoded by lane `i % lanes` at step `i / lanes` either way, so a prefix
/// is exactly the start of a whole decode).
///
/// # Errors
/// [`LosslessError::Rans`] for a bad table (one with a symbol of `bits` bits or more
/// included), an unknown layout, a symbol in an unused or missing context, a truncated
/// stream, and with `whole`, leftover words or final states that do not return to the
/// initial state.
#[allow(clippy::too_many_arguments)]
pub(crate) fn decode<S: Symbol>(
    src: &[u8],
    plane: usize,
    ctx: Contexts<'_>,
    bits: u32,
    out: &mut [S],
    table: &mut Vec<u32>,
    whole: bool,
) -> Result<(), LosslessError> {
    decode_with(
        Kernel::detect(),
        src,
        plane,
        ctx,
        bits,
        out,
        None,
        table,
        whole,
    )
    .map(|_| ())
}

/// A float's other planes and its words, which the AVX2 kernel writes instead of head
/// symbols ([`decode_joined`]).
#[derive(Debug)]
// Only the AVX2 kernel reads it: elsewhere every word is joined after the decode.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct JoinInto<'a> {
    /// The `W - 1` planes after the head (1 for 2-byte floats, 3 for f32), each at least as
    /// long as the head.
    pub(crate) rest: &'a [&'a [u8]],
    /// The words: `W` bytes per element of the head.
    pub(crate) out: &'a mut [u8],
}

/// [`decode`] of a float's head plane (10-bit symbols) that writes, where the AVX2 kernel
/// decodes, each element's whole word into `into.out` (as `planes::join_head` builds it, in
/// little-endian order) instead of its head symbol into `out`. Returns `j`, the count of
/// leading elements written as words: `out[j..]` holds head symbols, which
/// `planes::join_head_from` joins. `j` is 0 on CPUs without AVX2.
///
/// # Errors
/// As [`decode`].
pub(crate) fn decode_joined(
    src: &[u8],
    plane: usize,
    ctx: Contexts<'_>,
    out: &mut [u16],
    into: JoinInto<'_>,
    table: &mut Vec<u32>,
    whole: bool,
) -> Result<usize, LosslessError> {
    let bits = super::planes::HEAD_BITS;
    let kernel = Kernel::detect();
    decode_with(kernel, src, plane, ctx, bits, out, Some(into), table, whole)
}

/// [`decode`] with the kernel given, writing words into `join` where the AVX2 kernel
/// decodes ([`decode_joined`]); returns the count of leading elements written so.
#[allow(clippy::too_many_arguments)]
fn decode_with<S: Symbol>(
    kernel: Kernel,
    src: &[u8],
    plane: usize,
    ctx: Contexts<'_>,
    bits: u32,
    out: &mut [S],
    join: Option<JoinInto<'_>>,
    table: &mut Vec<u32>,
    whole: bool,
) -> Result<usize, LosslessError> {
    let bad = |reason: &'static str| LosslessError::Rans { plane, reason };
    let n_ctx = stream_contexts(src, plane, MAX_CONTEXTS)?;
    // One decode table of PROB_SCALE slots per context, one after the other. The buffer
    // is reused: a used context's table is written whole, an unused one is never read.
    table.resize(n_ctx << PROB_BITS, 0);
    let table = &mut table[..n_ctx << PROB_BITS];
    let mut used = 0u32;
    let mut r = BitReader { src, pos: 8 };
    let mut symbols = Vec::new();
    for (k, t) in table.chunks_exact_mut(PROB_SCALE as usize).enumerate() {
        let present = read_table::<S>(&mut r, bits, t, &mut symbols).map_err(bad)?;
        used |= u32::from(present) << k;
    }
    let (mut pos, padded) = r.finish();
    if !padded {
        return Err(bad("table padding is not zero"));
    }
    let layout = src
        .get(pos)
        .copied()
        .and_then(Layout::from_code)
        .ok_or(bad("unknown lane layout"))?;
    pos += 1;
    let (lanes, streams) = (layout.lanes(), layout.streams());
    let states = src
        .get(pos..pos + 4 * lanes)
        .ok_or(bad("truncated states"))?;
    let mut x = [RANS_L; MAX_LANES];
    for (s, b) in x.iter_mut().zip(states.chunks_exact(4)) {
        *s = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if !(RANS_L..RANS_L << 16).contains(s) {
            return Err(bad("initial state out of range"));
        }
    }
    pos += 4 * lanes;
    let counts = src
        .get(pos..pos + 4 * streams)
        .ok_or(bad("truncated stream lengths"))?;
    pos += 4 * streams;
    let mut rest = &src[pos..];
    let mut readers = [Reader::default(); 4];
    for (r, c) in readers.iter_mut().zip(counts.chunks_exact(4)) {
        let len = (u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize).checked_mul(2);
        let len = len
            .filter(|&l| l <= rest.len())
            .ok_or(bad("stream lengths exceed the data"))?;
        let (bytes, next) = rest.split_at(len);
        r.bytes = bytes;
        rest = next;
    }
    if !rest.is_empty() {
        return Err(bad("trailing bytes after the word streams"));
    }
    check_contexts(ctx, out.len(), n_ctx, used).map_err(bad)?;

    let full = out.len() / lanes * lanes;
    let (head, tail) = out.split_at_mut(full);
    let r = &mut readers[..streams];
    let joined = match layout {
        Layout::Narrow => {
            decode_steps::<S, 1, 4>(table, ctx, 0, head, &mut x, r);
            0
        }
        Layout::Wide => decode_wide(kernel, table, ctx, join, head, &mut x, r),
    };
    let per = lanes / streams;
    for (lane, o) in tail.iter_mut().enumerate() {
        let t = &table[ctx.at(full + lane) << PROB_BITS..];
        *o = step_checked::<S>(t, &mut x[lane], &mut readers[lane / per]);
    }
    if readers.iter().any(|r| r.overrun) {
        return Err(bad("word stream length does not match the data"));
    }
    if !whole {
        return Ok(joined);
    }
    if readers.iter().any(|r| r.words_left() != 0) {
        return Err(bad("word stream length does not match the data"));
    }
    if x.iter().any(|&s| s != RANS_L) {
        return Err(bad("final state mismatch"));
    }
    Ok(joined)
}

/// Checks that every element's context exists and has a table, so decoding never meets a
/// context without one. `used` has bit `k` set when context `k` has a table.
fn check_contexts(
    ctx: Contexts<'_>,
    n: usize,
    n_ctx: usize,
    used: u32,
) -> Result<(), &'static str> {
    match ctx {
        Contexts::Order0 if n == 0 || used & 1 != 0 => Ok(()),
        Contexts::Order0 => Err("symbol in an unused context"),
        Contexts::Given(m) if m.ctx.len() < n => Err("fewer contexts than symbols"),
        // Every context the map can hold has a table: nothing to look for.
        Contexts::Given(m)
            if usize::from(m.top) < n_ctx && used & through(m.top) == through(m.top) =>
        {
            Ok(())
        }
        Contexts::Given(m) => {
            let present = m.present();
            if present >> n_ctx != 0 {
                Err("context out of range")
            } else if present & !used != 0 {
                Err("symbol in an unused context")
            } else {
                Ok(())
            }
        }
    }
}

/// Bits `0..=top` (every bit for `top >= 31`).
fn through(top: u8) -> u32 {
    u32::MAX >> 31u32.saturating_sub(u32::from(top))
}

/// Decodes the full steps of `out` (`out.len()` a multiple of `G * K`; the first is step
/// `first`, which selects the contexts) with `G` streams of `K` lanes, in scalar code.
/// While every stream holds `K` words per step left, one bounds check per stream and step;
/// near the ends, checked reads.
fn decode_steps<S: Symbol, const G: usize, const K: usize>(
    table: &[u32],
    ctx: Contexts<'_>,
    first: usize,
    out: &mut [S],
    x: &mut [u32; MAX_LANES],
    readers: &mut [Reader<'_>],
) {
    let lanes = G * K;
    let mut steps = out.chunks_exact_mut(lanes).enumerate();
    loop {
        let safe = readers
            .iter()
            .map(|r| r.words_left() / K)
            .min()
            .unwrap_or(0);
        let mut ran = 0;
        for (t, o) in steps.by_ref().take(safe) {
            let i = (first + t) * lanes;
            for (g, r) in readers.iter_mut().enumerate().take(G) {
                let words = &r.bytes[2 * r.pos..2 * r.pos + 2 * K];
                let mut j = 0;
                for k in 0..K {
                    let lane = g * K + k;
                    let t = &table[ctx.at(i + lane) << PROB_BITS..];
                    let (sym, v) = advance::<S>(t, x[lane]);
                    let jj = j.min(K - 1);
                    let w = u32::from(u16::from_le_bytes([words[2 * jj], words[2 * jj + 1]]));
                    let need = u32::from(v < RANS_L);
                    // Shift by 0 or 16 and or in 0 or the word: no branch on the data.
                    x[lane] = v << (16 * need) | (w & need.wrapping_neg());
                    j += need as usize;
                    o[lane] = sym;
                }
                r.pos += j;
            }
            ran += 1;
        }
        if ran == safe && safe > 0 {
            continue;
        }
        let Some((t, o)) = steps.next() else { break };
        let i = (first + t) * lanes;
        for (lane, o) in o.iter_mut().enumerate() {
            let t = &table[ctx.at(i + lane) << PROB_BITS..];
            *o = step_checked::<S>(t, &mut x[lane], &mut readers[lane / K]);
        }
    }
}

/// The wide layout's full steps: with AVX2, in batches that no stream can run dry in;
/// scalar code for the rest. Returns the count of leading elements the AVX2 kernel wrote
/// as words into `join` (0 without one).
fn decode_wide<S: Symbol>(
    kernel: Kernel,
    table: &[u32],
    ctx: Contexts<'_>,
    join: Option<JoinInto<'_>>,
    out: &mut [S],
    x: &mut [u32; MAX_LANES],
    readers: &mut [Reader<'_>],
) -> usize {
    let joining = join.is_some();
    let done = match kernel {
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 { gather } => decode_avx2(table, ctx, join, gather, out, x, readers),
        Kernel::Scalar => 0,
    };
    decode_steps::<S, 4, 8>(table, ctx, done, &mut out[done * 32..], x, readers);
    if joining {
        done * 32
    } else {
        0
    }
}

/// Runs the AVX2 kernel over the full steps; returns the steps done (all, unless a
/// stream ran out: corrupt data, which the checked steps after it report).
#[cfg(target_arch = "x86_64")]
fn decode_avx2<S: Symbol>(
    table: &[u32],
    ctx: Contexts<'_>,
    join: Option<JoinInto<'_>>,
    gather: bool,
    out: &mut [S],
    x: &mut [u32; MAX_LANES],
    readers: &mut [Reader<'_>],
) -> usize {
    let n_ctx = table.len() >> PROB_BITS;
    let full = out.len() / 32 * 32;
    let c = ctx.head(full);
    // SAFETY: `Kernel::Avx2` is only chosen when the CPU has AVX2 and POPCNT, the
    // requirements of the call.
    unsafe {
        let out = &mut out[..full];
        if gather {
            avx2::decode_steps::<S, true>(table, n_ctx, c, join, out, x, readers)
        } else {
            avx2::decode_steps::<S, false>(table, n_ctx, c, join, out, x, readers)
        }
    }
}

/// Reads one context's table (see [`table_len`]) into its decode table `t`; `false` for
/// an unused context (no symbol present). Symbols of `bits` bits or more are refused.
///
/// A slot's entry is `symbol | (freq - 1) << S::BITS | (slot - start) << (S::BITS +
/// S::FREQ_BITS)`.
fn read_table<S: Symbol>(
    r: &mut BitReader<'_>,
    bits: u32,
    t: &mut [u32],
    present: &mut Vec<(usize, u32)>,
) -> Result<bool, &'static str> {
    const TRUNCATED: &str = "truncated or bad table";
    let a = alphabet::<S>();
    let limit = 1usize << bits.min(S::BITS);
    let delta = r.bit().ok_or(TRUNCATED)? == 1;
    present.clear();
    let (mut s, mut prev) = (-1i64, 0i64);
    loop {
        let gap = r.gamma(12).ok_or(TRUNCATED)?;
        s += i64::from(gap);
        if s == a as i64 {
            break;
        }
        if s >= limit as i64 {
            return Err("symbol out of range");
        }
        let v = r.gamma(17).ok_or(TRUNCATED)?;
        let c = if delta {
            // Undo the zigzag: 1, 2, 3, ... for 0, -1, 1, ...
            let z = i64::from(v - 1);
            prev + if z % 2 == 0 { z / 2 } else { -(z + 1) / 2 }
        } else {
            i64::from(v)
        };
        if !(1..=1 << 16).contains(&c) {
            return Err("bad count");
        }
        present.push((s as usize, c as u32));
        prev = c;
    }
    if present.is_empty() {
        return Ok(false);
    }
    let freq = normalize_present(present, 1 << S::FREQ_BITS).ok_or("counts do not normalize")?;
    let mut start = 0usize;
    for (&(s, _), &f) in present.iter().zip(&freq) {
        let slots = &mut t[start..start + f as usize];
        for (d, e) in slots.iter_mut().enumerate() {
            *e = s as u32 | (f - 1) << S::BITS | (d as u32) << (S::BITS + S::FREQ_BITS);
        }
        start += f as usize;
    }
    Ok(true)
}

/// One decode step with a checked refill (near the end of a stream, and in the last
/// partial step).
#[inline(always)]
fn step_checked<S: Symbol>(table: &[u32], x: &mut u32, r: &mut Reader<'_>) -> S {
    let (sym, mut v) = advance::<S>(table, *x);
    if v < RANS_L {
        match r.bytes.get(2 * r.pos..2 * r.pos + 2) {
            Some(w) => v = v << 16 | u32::from(u16::from_le_bytes([w[0], w[1]])),
            None => r.overrun = true,
        }
        r.pos += 1;
    }
    *x = v;
    sym
}

/// Decodes one symbol from `x` with a context's table (`table[..PROB_SCALE]`): the symbol
/// and the state before any refill.
#[inline(always)]
fn advance<S: Symbol>(table: &[u32], x: u32) -> (S, u32) {
    let e = table[(x & MASK) as usize];
    let sym = e & ((1 << S::BITS) - 1);
    let f = (e >> S::BITS & ((1 << S::FREQ_BITS) - 1)) + 1;
    let off = e >> (S::BITS + S::FREQ_BITS);
    (S::from_index(sym), f * (x >> PROB_BITS) + off)
}

#[cfg(test)]
mod tests;
