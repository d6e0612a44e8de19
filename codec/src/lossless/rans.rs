//! rANS entropy coder for one byte plane, with up to [`MAX_CONTEXTS`] static models.
//!
//! Each symbol is coded with the model of its context (a small integer both sides know,
//! e.g. a bucket of the base word's exponent in a delta); with one context this is plain
//! order-0 coding. Frequencies are normalized to `2^PROB_BITS` and stored with the data.
//! Four interleaved 64-bit states (symbol `i` goes to state `i % 4`) each emit and consume
//! 32-bit words of their own stream, after ryg's `rans64`; the encoder divides by
//! multiplying with a precomputed reciprocal. Decoding is a table lookup, a multiply and a
//! branch-free refill, and the four states share no data, so they run in parallel.
//!
//! # Stream layout
//!
//! | bytes | field |
//! |---|---|
//! | 1 | number of contexts `C`, 1..=16 |
//! | per context | 32-byte bitmap of the symbols present (bit `s % 8` of byte `s / 8`), then the LEB128 frequency of each present symbol, ascending; they sum to `2^PROB_BITS`, or the bitmap is empty for an unused context |
//! | 32 | the four final encoder states, u64 LE (the decoder's initial states) |
//! | 16 | the number of words in each state's stream, u32 LE |
//! | `4 * k` | the four word streams one after the other, u32 LE, in decoder order |

use super::LosslessError;

/// Frequency precision: frequencies sum to `2^PROB_BITS`.
const PROB_BITS: u32 = 12;
const PROB_SCALE: u32 = 1 << PROB_BITS;
const MASK: u64 = (PROB_SCALE - 1) as u64;
/// Lower bound of the normalized state interval `[L, L << 32)`.
const RANS_L: u64 = 1 << 31;
const STATES: usize = 4;
/// Most contexts a stream may have.
pub(crate) const MAX_CONTEXTS: usize = 16;

/// Decode table: per slot, `symbol | (freq - 1) << 8 | (slot - start) << 20`.
type Table = [u32; PROB_SCALE as usize];
/// A byte histogram.
pub(crate) type Hist = [u32; 256];

/// Byte histogram of a plane.
pub(crate) fn histogram(plane: &[u8]) -> Hist {
    // Four sub-histograms hide the store-to-load latency of repeated symbols.
    let mut h = [[0u32; 256]; 4];
    let chunks = plane.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        h[0][usize::from(c[0])] += 1;
        h[1][usize::from(c[1])] += 1;
        h[2][usize::from(c[2])] += 1;
        h[3][usize::from(c[3])] += 1;
    }
    for &b in tail {
        h[0][usize::from(b)] += 1;
    }
    let mut out = [0u32; 256];
    for (s, o) in out.iter_mut().enumerate() {
        *o = h[0][s] + h[1][s] + h[2][s] + h[3][s];
    }
    out
}

/// One histogram per context (`ctx[i] < n` for every element).
pub(crate) fn histograms(plane: &[u8], ctx: &[u8], n: usize) -> Vec<Hist> {
    let mut h = vec![[0u32; 256]; n];
    for (&b, &c) in plane.iter().zip(ctx) {
        h[usize::from(c)][usize::from(b)] += 1;
    }
    h
}

/// Scales counts to frequencies summing to `PROB_SCALE`, every present symbol at least 1.
/// Rounds to nearest, then settles the difference on the most frequent symbols, whose
/// code lengths it changes least. An empty histogram gives all zeros.
fn normalize(hist: &Hist) -> [u32; 256] {
    let total: u64 = hist.iter().map(|&c| u64::from(c)).sum();
    let mut freq = [0u32; 256];
    if total == 0 {
        return freq;
    }
    let mut sum = 0i64;
    for (f, &c) in freq.iter_mut().zip(hist) {
        if c > 0 {
            let scaled = (u64::from(c) * u64::from(PROB_SCALE) + total / 2) / total;
            *f = scaled.max(1) as u32;
            sum += i64::from(*f);
        }
    }
    let mut order: Vec<usize> = (0..256).filter(|&s| freq[s] > 0).collect();
    order.sort_unstable_by(|&a, &b| freq[b].cmp(&freq[a]));
    let mut diff = i64::from(PROB_SCALE) - sum;
    if diff > 0 {
        freq[order[0]] += diff as u32;
    }
    // Take from the largest first; each keeps at least 1 (there is room: at most 256
    // symbols were raised to 1, and the largest holds at least SCALE / 256).
    let mut i = 0;
    while diff < 0 {
        let s = order[i % order.len()];
        if freq[s] > 1 {
            let take = (-diff)
                .min(i64::from(freq[s] - 1))
                .min(i64::from(freq[s] / 4).max(1));
            freq[s] -= take as u32;
            diff += take;
        }
        i += 1;
    }
    freq
}

/// Estimated coded size in bytes with these per-context histograms: the order-0 entropy
/// of each context (12-bit frequencies cost well under 0.1 % more on real planes) plus
/// tables, states and stream lengths.
pub(crate) fn estimate(hists: &[Hist]) -> usize {
    let mut bits = 0.0;
    let mut table = 1 + 8 * STATES + 4 * STATES;
    for hist in hists {
        let total: f64 = hist.iter().map(|&c| f64::from(c)).sum();
        table += 32;
        for &c in hist.iter().filter(|&&c| c > 0) {
            let p = f64::from(c) / total;
            bits -= f64::from(c) * p.log2();
            table += if p * f64::from(PROB_SCALE) < 127.5 {
                1
            } else {
                2
            };
        }
    }
    (bits / 8.0) as usize + table
}

struct EncSymbol {
    x_max: u64,
    rcp_freq: u64,
    bias: u64,
    cmpl_freq: u64,
    rcp_shift: u32,
}

impl EncSymbol {
    fn new(start: u32, freq: u32) -> EncSymbol {
        let x_max = ((RANS_L >> PROB_BITS) << 32) * u64::from(freq);
        let cmpl_freq = u64::from(PROB_SCALE - freq);
        if freq < 2 {
            EncSymbol {
                x_max,
                rcp_freq: u64::MAX,
                bias: u64::from(start + PROB_SCALE - 1),
                cmpl_freq,
                rcp_shift: 0,
            }
        } else {
            let shift = 32 - (freq - 1).leading_zeros(); // ceil(log2(freq))
            let rcp = (1u128 << (shift + 63)).div_ceil(u128::from(freq));
            EncSymbol {
                x_max,
                rcp_freq: rcp as u64,
                bias: u64::from(start),
                cmpl_freq,
                rcp_shift: shift - 1,
            }
        }
    }
}

/// Where each symbol's model comes from.
pub(crate) trait Contexts: Copy {
    /// The context of element `i`.
    fn at(self, i: usize) -> usize;
}

/// One model for every symbol.
#[derive(Clone, Copy)]
pub(crate) struct Order0;

impl Contexts for Order0 {
    #[inline(always)]
    fn at(self, _: usize) -> usize {
        0
    }
}

impl Contexts for &[u8] {
    #[inline(always)]
    fn at(self, i: usize) -> usize {
        usize::from(self[i])
    }
}

/// Encodes `plane` with one model per histogram in `hists` (`ctx.at(i) < hists.len()`),
/// appending the stream to `out`.
pub(crate) fn encode<C: Contexts>(plane: &[u8], ctx: C, hists: &[Hist], out: &mut Vec<u8>) {
    out.push(hists.len() as u8);
    let mut models: Vec<Vec<EncSymbol>> = Vec::with_capacity(hists.len());
    for hist in hists {
        let freq = normalize(hist);
        let mut bitmap = [0u8; 32];
        for (s, &f) in freq.iter().enumerate() {
            if f > 0 {
                bitmap[s / 8] |= 1 << (s % 8);
            }
        }
        out.extend_from_slice(&bitmap);
        let mut syms = Vec::with_capacity(256);
        let mut start = 0u32;
        for &f in &freq {
            if f > 0 {
                write_leb128(out, f);
            }
            syms.push(EncSymbol::new(start, f.max(1)));
            start += f;
        }
        models.push(syms);
    }

    // Encode backwards (symbol i with state i % STATES). A symbol emits at most one word,
    // so each state's stream is sized for its symbol count and written branch-free; the
    // words come out in reverse and are flipped at the end so the decoder reads forwards.
    let per_state = plane.len() / STATES + 1;
    let mut words: [Vec<u32>; STATES] = std::array::from_fn(|_| vec![0u32; per_state]);
    let mut used = [0usize; STATES];
    let sym = |i: usize, b: u8| &models[ctx.at(i)][usize::from(b)];
    let mut x = [RANS_L; STATES];
    let full = plane.len() / STATES * STATES;
    for (j, &b) in plane[full..].iter().enumerate().rev() {
        put(&mut x[j], sym(full + j, b), &mut words[j], &mut used[j]);
    }
    for (g, c) in plane[..full].chunks_exact(STATES).enumerate().rev() {
        let i = g * STATES;
        for k in (0..STATES).rev() {
            put(&mut x[k], sym(i + k, c[k]), &mut words[k], &mut used[k]);
        }
    }
    for s in x {
        out.extend_from_slice(&s.to_le_bytes());
    }
    for &u in &used {
        out.extend_from_slice(&(u as u32).to_le_bytes());
    }
    out.reserve(used.iter().sum::<usize>() * 4);
    for (w, &u) in words.iter().zip(&used) {
        for v in w[..u].iter().rev() {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// Encodes one symbol into state `x`, emitting a word to `words[*used]` when the state
/// would leave its interval. The word is always written and `used` advances by 0 or 1,
/// so no branch depends on the data.
#[inline(always)]
fn put(x: &mut u64, sym: &EncSymbol, words: &mut [u32], used: &mut usize) {
    let v = *x;
    let emit = u64::from(v >= sym.x_max);
    words[*used] = v as u32;
    *used += emit as usize;
    let v = v >> (32 * emit);
    let q = ((u128::from(v) * u128::from(sym.rcp_freq)) >> 64) as u64 >> sym.rcp_shift;
    *x = v + sym.bias + q * sym.cmpl_freq;
}

fn write_leb128(out: &mut Vec<u8>, mut v: u32) {
    loop {
        let b = (v & 0x7F) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
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

/// Decodes a stream written by [`encode`] into `out` (`out.len()` symbols); `ctx` must
/// give every element a context below the stream's context count.
///
/// # Errors
/// [`LosslessError::Rans`] for a bad table, a symbol in an unused context, a truncated
/// stream, leftover words, or final states that do not return to the initial state.
pub(crate) fn decode<C: Contexts>(
    src: &[u8],
    plane: usize,
    ctx: C,
    out: &mut [u8],
) -> Result<(), LosslessError> {
    let bad = |reason: &'static str| LosslessError::Rans { plane, reason };
    let n_ctx = stream_contexts(src, plane, MAX_CONTEXTS)?;
    let mut pos = 1;
    let mut tables: Vec<Option<Box<Table>>> = Vec::with_capacity(n_ctx);
    for _ in 0..n_ctx {
        let (table, used) = read_table(src.get(pos..).unwrap_or_default()).map_err(bad)?;
        pos += used;
        tables.push(table);
    }
    let states = src
        .get(pos..pos + 8 * STATES)
        .ok_or(bad("truncated states"))?;
    let mut x = [0u64; STATES];
    for (s, b) in x.iter_mut().zip(states.chunks_exact(8)) {
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        *s = u64::from_le_bytes(a);
        if *s < RANS_L {
            return Err(bad("initial state out of range"));
        }
    }
    pos += 8 * STATES;
    let counts = src
        .get(pos..pos + 4 * STATES)
        .ok_or(bad("truncated stream lengths"))?;
    pos += 4 * STATES;
    let mut rest = &src[pos..];
    let mut readers: [Reader<'_>; STATES] = Default::default();
    for (r, c) in readers.iter_mut().zip(counts.chunks_exact(4)) {
        let len = (u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize).checked_mul(4);
        let len = len
            .filter(|&l| l <= rest.len())
            .ok_or(bad("stream lengths exceed the data"))?;
        let (words, next) = rest.split_at(len);
        *r = Reader {
            words,
            pos: 0,
            overrun: false,
        };
        rest = next;
    }
    if !rest.is_empty() {
        return Err(bad("trailing bytes after the word streams"));
    }
    // Check every element's context once (in range and used), so the loop below indexes
    // a plain array: unused contexts point at the first used table and are never reached.
    let Some(fallback) = tables.iter().flatten().next() else {
        return Err(bad("every context is unused"));
    };
    let mut refs: [&Table; MAX_CONTEXTS] = [&**fallback; MAX_CONTEXTS];
    let mut used = 0u32;
    for (k, t) in tables.iter().enumerate() {
        if let Some(t) = t {
            refs[k] = t;
            used |= 1 << k;
        }
    }
    if used != (1u32 << n_ctx) - 1 {
        let mut seen = 0u32;
        for i in 0..out.len() {
            seen |= 1u32 << ctx.at(i).min(31);
        }
        if seen & !used != 0 {
            return Err(bad("symbol in an unused context"));
        }
    } else if (0..out.len()).any(|i| ctx.at(i) >= n_ctx) {
        return Err(bad("context out of range"));
    }
    let table_of = |i: usize| refs[ctx.at(i)];

    let full = out.len() / STATES * STATES;
    let (head, tail) = out.split_at_mut(full);
    // A group of STATES symbols reads at most one word per stream, so while every stream
    // has `k` words left, the next `k` groups need no bounds check: run them in one go, then
    // look again. When some stream runs dry, one checked group.
    let mut groups = head.chunks_exact_mut(STATES).enumerate();
    loop {
        let safe = readers.iter().map(Reader::words_left).min().unwrap_or(0);
        let mut ran = 0;
        for (g, c) in groups.by_ref().take(safe) {
            let i = g * STATES;
            for k in 0..STATES {
                c[k] = step_fast(table_of(i + k), &mut x[k], &mut readers[k]);
            }
            ran += 1;
        }
        if ran == safe && safe > 0 {
            continue;
        }
        let Some((g, c)) = groups.next() else { break };
        let i = g * STATES;
        for k in 0..STATES {
            c[k] = step(table_of(i + k), &mut x[k], &mut readers[k]);
        }
    }
    for (j, o) in tail.iter_mut().enumerate() {
        *o = step(table_of(full + j), &mut x[j], &mut readers[j]);
    }
    if readers.iter().any(|r| r.overrun || r.pos != r.words.len()) {
        return Err(bad("word stream length does not match the data"));
    }
    if x.iter().any(|&s| s != RANS_L) {
        return Err(bad("final state mismatch"));
    }
    Ok(())
}

/// Reads one context's bitmap and frequencies into a decode table; `None` for an unused
/// context (empty bitmap). Returns the bytes read too.
fn read_table(src: &[u8]) -> Result<(Option<Box<Table>>, usize), &'static str> {
    let bitmap = src.get(..32).ok_or("truncated table")?;
    let mut pos = 32;
    let mut table: Box<Table> = Box::new([0u32; PROB_SCALE as usize]);
    let mut start = 0u32;
    for s in 0..256u32 {
        if bitmap[(s / 8) as usize] >> (s % 8) & 1 == 0 {
            continue;
        }
        let (f, used) = read_leb128(src.get(pos..).unwrap_or_default()).ok_or("bad frequency")?;
        pos += used;
        if f == 0 || start + f > PROB_SCALE {
            return Err("frequencies do not sum to the scale");
        }
        for slot in start..start + f {
            table[slot as usize] = s | (f - 1) << 8 | (slot - start) << 20;
        }
        start += f;
    }
    match start {
        0 => Ok((None, pos)),
        PROB_SCALE => Ok((Some(table), pos)),
        _ => Err("frequencies do not sum to the scale"),
    }
}

#[derive(Default)]
struct Reader<'a> {
    words: &'a [u8],
    pos: usize,
    overrun: bool,
}

impl Reader<'_> {
    /// Whole words not yet read.
    #[inline(always)]
    fn words_left(&self) -> usize {
        self.words.len().saturating_sub(self.pos) / 4
    }
}

/// One decode step with a checked refill (near the end of a stream).
#[inline(always)]
fn step(table: &Table, x: &mut u64, r: &mut Reader<'_>) -> u8 {
    let (sym, mut v) = advance(table, *x);
    if v < RANS_L {
        match r.words.get(r.pos..r.pos + 4) {
            Some(w) => v = (v << 32) | u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]])),
            None => r.overrun = true,
        }
        r.pos += 4;
    }
    *x = v;
    sym
}

/// One decode step with a branch-free refill; needs a whole word left in `r`.
/// The refill is arithmetic (shift by 0 or 32, add 0 or the word) so that it compiles to
/// no branch: whether a state refills is data, and a branch on it mispredicts often.
#[inline(always)]
fn step_fast(table: &Table, x: &mut u64, r: &mut Reader<'_>) -> u8 {
    let (sym, v) = advance(table, *x);
    debug_assert!(r.words_left() > 0);
    // SAFETY: the caller runs at most `k` groups of steps after seeing every reader with
    // `words_left() >= k`; each group steps each reader once and a step reads at most one
    // word, so this reader has at least 4 bytes at `pos`. `read_unaligned` has no
    // alignment requirement.
    let w = unsafe {
        r.words
            .as_ptr()
            .add(r.pos)
            .cast::<[u8; 4]>()
            .read_unaligned()
    };
    let w = u64::from(u32::from_le_bytes(w));
    let need = u64::from(v < RANS_L);
    *x = (v << (need * 32)) | (w * need);
    r.pos += 4 * need as usize;
    sym
}

#[inline(always)]
fn advance(table: &Table, x: u64) -> (u8, u64) {
    let e = table[(x & MASK) as usize];
    let f = u64::from((e >> 8 & 0xFFF) + 1);
    let off = u64::from(e >> 20);
    (e as u8, f * (x >> PROB_BITS) + off)
}

fn read_leb128(b: &[u8]) -> Option<(u32, usize)> {
    let mut v = 0u32;
    for (i, &byte) in b.iter().take(3).enumerate() {
        v |= u32::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests;
