//! Lossless float codec: XOR against a base, planes, an entropy stage per plane.
//!
//! Bit-exact for every input: NaN payloads, `-0.0`, subnormals and infinities are just bit
//! patterns here. Integer and boolean dtypes are planed but not rotated.
//!
//! # Payload layout
//!
//! For a dtype of `W` bytes and `n` elements (both from the segment header):
//!
//! | bytes | field |
//! |---|---|
//! | 1 | plane layout: 0 bytes, 1 head (floats of 2 or 4 bytes only), 2 differences (f32 deltas only) |
//! | `5 * W` | plane table: per plane, `method: u8` then `stored_len: u32` LE |
//! | ... | plane bodies, in plane order, `stored_len` bytes each |
//!
//! Every layout has `W` planes of `n` symbols each, cut from each (XORed, rotated)
//! little-endian word:
//!
//! - bytes: plane `k` holds byte `k`, 8 bits;
//! - differences (f32 with a base): as bytes, but the word is the element's bits minus the
//!   base's as a wrapping `i32`, zigzagged (`(d << 1) ^ (d >> 31)`), not XORed or rotated. A
//!   value that moved by a small relative step has a small difference either way of zero,
//!   where its XOR flips every bit below a carry: second moments and weights of f32 training
//!   states code 3-9 % smaller (ADR 0032). The encoder picks it per block by an estimate;
//! - head, top down: plane 0 holds the top 10 bits (the exponent and the top two mantissa
//!   bits of bf16 and f32, as one symbol), planes `1..W - 1` the following bytes, and
//!   plane `W - 1` the low 6 bits. The encoder uses it for keyframes of bf16, f16 and
//!   f32: coding exponent and top mantissa bits jointly captures how they depend on each
//!   other (0.3 to 0.4 % smaller on MiniLM), and a bf16 word then needs one coded symbol
//!   instead of two, its low 6 bits being close to random and stored raw (ADR 0004).
//!
//! Methods, for a plane of `b`-bit symbols:
//!
//! - 0 raw: the symbols packed LSB-first at `b` bits, `stored_len == ceil(n * b / 8)`, the
//!   unused bits of the last byte zero;
//! - 1 zstd (planes of at most 8 bits): a frame that decodes to exactly `n` bytes, one
//!   symbol each;
//! - 2 constant: the symbol, 1 byte (2 bytes LE for a 10-bit plane), repeated `n` times;
//! - 3 rANS: one model (see the `rans` module for the stream layout);
//! - 4 rANS with base contexts (float deltas only): a byte `lo`, then a rANS stream of `C`
//!   models; element `i` uses model `clamp(e_i - lo, 0, C - 1)`, where `e_i` is the top
//!   byte of the rotated base word, i.e. the base value's exponent. How much a weight moves
//!   depends on its magnitude, so this saves 18 % on the mantissa plane of bf16
//!   fine-tuning deltas (ADR 0004).
//!
//! - 5 marked (the exponent plane, `W - 1`, of bf16 and f32 deltas only): only the
//!   elements whose sign or top mantissa bit changed, as the planes below say, are coded,
//!   and the few other non-zero bytes are listed; see the `marked` module (ADR 0019).
//! - 6 sparse (byte planes only): the plane's non-zero elements listed by position gaps
//!   and bytes; the top plane of f32 differences on fine-tuning steps. The encoder lists a
//!   plane when that costs at most `n / 1024` bytes more than its best other coding: it
//!   decodes in a scan; see the `sparse` module (ADR 0033).
//!
//! Symbols at or above `2^b` are refused (a rANS table that has them, a constant).

mod marked;
mod planes;
mod rans;
mod scratch;
mod sparse;

use crate::DType;
use planes::{join, join_difference, join_head, split, split_difference, split_head, Head, Plane};
use thiserror::Error;

/// Errors of the lossless codec.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LosslessError {
    /// The data length is not a multiple of the dtype size.
    #[error("{len} bytes is not a whole number of {dtype} elements")]
    RaggedLength {
        /// Bytes given.
        len: usize,
        /// The dtype.
        dtype: DType,
    },
    /// The base has another length than the data.
    #[error("base is {base} bytes but data is {data} bytes")]
    BaseLength {
        /// Base length.
        base: usize,
        /// Data length.
        data: usize,
    },
    /// The payload is shorter than its plane table says.
    #[error("lossless payload truncated: {needed} bytes needed, {actual} present")]
    Truncated {
        /// Bytes the table implies.
        needed: usize,
        /// Bytes present.
        actual: usize,
    },
    /// The payload is longer than its plane table says.
    #[error("lossless payload has {extra} trailing bytes")]
    TrailingBytes {
        /// Bytes past the last plane.
        extra: usize,
    },
    /// The payload's plane layout byte is unknown, or the layout does not fit the dtype.
    #[error("unknown plane layout {code} for {dtype} (damaged, or written by a newer Strata)")]
    UnknownPlaneLayout {
        /// The layout byte.
        code: u8,
        /// The dtype.
        dtype: DType,
    },
    /// The payload is a delta (differences from a base) but no base was given.
    #[error("plane layout {code} codes differences from a base, and no base was given")]
    MissingBase {
        /// The layout byte.
        code: u8,
    },
    /// A plane holds a symbol wider than the plane, or padding bits that are not zero.
    #[error("plane {plane}: symbol or padding out of range for {bits}-bit symbols")]
    SymbolRange {
        /// Plane index.
        plane: usize,
        /// Bits of the plane's symbols.
        bits: u32,
    },
    /// A plane uses a method code this version does not know.
    #[error("plane {plane}: unknown method {method} (damaged, or written by a newer Strata)")]
    UnknownMethod {
        /// Plane index.
        plane: usize,
        /// The method code.
        method: u8,
    },
    /// A plane's stored length does not fit its method.
    #[error("plane {plane}: stored length {stored} invalid for method {method} with {elements} elements")]
    PlaneLength {
        /// Plane index.
        plane: usize,
        /// Method code.
        method: u8,
        /// Stored length.
        stored: usize,
        /// Elements expected.
        elements: usize,
    },
    /// A zstd plane failed to decode or decoded to the wrong length.
    #[error("plane {plane}: zstd frame invalid: {reason}")]
    Zstd {
        /// Plane index.
        plane: usize,
        /// What zstd said, or the length mismatch.
        reason: String,
    },
    /// A rANS plane is invalid.
    #[error("plane {plane}: rANS stream invalid: {reason}")]
    Rans {
        /// Plane index.
        plane: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A marked plane (method 5) is invalid.
    #[error("plane {plane}: marked plane invalid: {reason}")]
    Marked {
        /// Plane index.
        plane: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A sparse plane (method 6) is invalid.
    #[error("plane {plane}: sparse plane invalid: {reason}")]
    Sparse {
        /// Plane index.
        plane: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A prefix asked of [`decode_prefix`] is longer than the data, or the data's length
    /// is not a whole number of elements.
    #[error("a prefix of {prefix} bytes of {len} decoded bytes")]
    Prefix {
        /// Bytes asked for.
        prefix: usize,
        /// Decoded bytes of the payload.
        len: usize,
    },
    /// zstd failed while compressing (out of memory, in practice).
    #[error("zstd compression failed: {0}")]
    Compress(String),
}

/// Entropy coder of one plane (the payload's method byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum PlaneMethod {
    /// Stored as is.
    Raw = 0,
    /// A zstd frame.
    Zstd = 1,
    /// One byte repeated.
    Constant = 2,
    /// Order-0 rANS with a per-plane frequency table.
    Rans = 3,
    /// rANS with one model per bucket of the base word's exponent (float deltas).
    RansBaseContext = 4,
    /// Only the elements the lower planes mark, and exceptions (the exponent plane of
    /// bf16 and f32 deltas).
    Marked = 5,
    /// A byte plane listed as its non-zero elements (ADR 0033).
    Sparse = 6,
}

/// For a delta of bf16 or f32, the plane that holds the top mantissa bit (`W - 2`): the
/// exponent plane may then be coded [`PlaneMethod::Marked`].
fn marks_plane(dtype: DType, delta: bool) -> Option<usize> {
    match dtype {
        DType::BF16 | DType::F32 if delta => Some(dtype.size() - 2),
        _ => None,
    }
}

/// Encoder settings.
///
/// Every plane that is not constant gets a histogram. A plane that coding would shrink by
/// less than `min_gain` is stored raw. Otherwise it is rANS-coded (with base contexts for
/// float deltas when they are smaller), and zstd may be tried too, the smaller output
/// kept: zstd wins on planes with repeats that an order-0 model cannot see (runs of
/// equal bytes, such as the rows of an embedding table that were never trained and keep
/// few mantissa bits), by 0.2 % on MiniLM in f32. It is tried only on planes of at most
/// 8 bits whose neighbours are equal more often than their histogram predicts, which
/// keeps its cost away from planes it cannot help.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LosslessOptions {
    /// zstd level to try beside rANS (default 3); `None` never tries zstd.
    pub zstd_level: Option<i32>,
    /// zstd is tried on a coded plane when the fraction of its symbols equal to the one
    /// before exceeds the probability that two symbols drawn from its histogram are
    /// equal by at least this much (default 0.02). `0.0` tries every coded plane.
    pub zstd_min_repeats: f64,
    /// Smallest fraction of a plane that coding must save to be used (default 0.001).
    /// Raising it stores near-random planes raw, which decode faster.
    pub min_gain: f64,
}

impl Default for LosslessOptions {
    fn default() -> Self {
        LosslessOptions {
            zstd_level: Some(3),
            zstd_min_repeats: 0.02,
            min_gain: 0.001,
        }
    }
}

impl LosslessOptions {
    /// The smallest output: zstd level 3 tried on every coded plane, at about twice the
    /// encode time of the default for 0.01 to 0.1 % on the shared series.
    pub fn max_ratio() -> Self {
        LosslessOptions {
            zstd_min_repeats: 0.0,
            ..LosslessOptions::default()
        }
    }

    /// The fastest: zstd never tried, planes that save under 0.5 % stored raw.
    pub fn fast() -> Self {
        LosslessOptions {
            zstd_level: None,
            zstd_min_repeats: 0.0,
            min_gain: 0.005,
        }
    }
}

/// What the encoder chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LosslessStats {
    /// Method and stored bytes per plane.
    pub planes: Vec<(PlaneMethod, usize)>,
    /// Bytes of the whole payload.
    pub payload_bytes: usize,
}

/// How words are cut into planes (the payload's first byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// Byte `k` of each word in plane `k`.
    Bytes,
    /// Head, bytes, tail (floats of 2 or 4 bytes).
    Head,
    /// Bytes of zigzagged integer differences from the base (f32 deltas).
    Difference,
}

impl Cut {
    /// The cut a block is encoded with: the head cut for keyframes of 2- and 4-byte floats;
    /// for f32 deltas, differences when a sample says they code smaller than XOR.
    fn choose(dtype: DType, data: &[u8], base: Option<&[u8]>) -> Cut {
        match base {
            None if dtype.is_float() && matches!(dtype.size(), 2 | 4) => Cut::Head,
            Some(b) if dtype == DType::F32 && planes::differences_code_smaller(data, b) => {
                Cut::Difference
            }
            _ => Cut::Bytes,
        }
    }

    fn from_code(code: u8, dtype: DType) -> Option<Cut> {
        match code {
            0 => Some(Cut::Bytes),
            1 if dtype.is_float() && matches!(dtype.size(), 2 | 4) => Some(Cut::Head),
            2 if dtype == DType::F32 => Some(Cut::Difference),
            _ => None,
        }
    }

    fn code(self) -> u8 {
        match self {
            Cut::Bytes => 0,
            Cut::Head => 1,
            Cut::Difference => 2,
        }
    }

    /// Bits of plane `k` of `w`.
    fn bits(self, k: usize, w: usize) -> u32 {
        match self {
            Cut::Bytes | Cut::Difference => 8,
            Cut::Head if k == 0 => planes::HEAD_BITS,
            Cut::Head if k == w - 1 => planes::TAIL_BITS,
            Cut::Head => 8,
        }
    }
}

/// Encodes `data` (optionally as a delta against `base`: XOR, or for f32 the integer
/// differences when a sample says they code smaller) and appends the payload to `out`.
///
/// # Errors
/// [`LosslessError::RaggedLength`], [`LosslessError::BaseLength`], or
/// [`LosslessError::Compress`] if zstd fails.
pub fn encode(
    dtype: DType,
    data: &[u8],
    base: Option<&[u8]>,
    opts: &LosslessOptions,
    out: &mut Vec<u8>,
) -> Result<LosslessStats, LosslessError> {
    check_lengths(dtype, data, base)?;
    let cut = Cut::choose(dtype, data, base);
    encode_cut(dtype, data, base, opts, cut, out)
}

/// [`encode`] with the cut given (`Cut::Difference` only for f32 with a base).
fn encode_cut(
    dtype: DType,
    data: &[u8],
    base: Option<&[u8]>,
    opts: &LosslessOptions,
    cut: Cut,
    out: &mut Vec<u8>,
) -> Result<LosslessStats, LosslessError> {
    let w = dtype.plane_width();
    let n = data.len() / w;
    let rotate = dtype.is_float();
    // Room for the payload at its largest (raw planes, or a coded plane's regions before
    // they are trimmed), so that `out` is not moved as it grows; pages never written are
    // not made resident.
    out.reserve(data.len() + data.len() / 8 + 4096);
    let start = out.len();
    out.push(cut.code());
    let table = out.len();
    out.resize(table + 5 * w, 0);
    // Deltas of floats may condition each plane on the base word's exponent.
    let contexts = match base {
        Some(b) if rotate => BaseContexts::new(dtype, b),
        _ => None,
    };
    let mut enc = PlaneEncoder {
        opts,
        contexts: contexts.as_ref(),
        zstd: None,
        stats: Vec::with_capacity(w),
        beat: None,
        lists: true,
    };
    scratch::with(|scratch| -> Result<(), LosslessError> {
        match cut {
            Cut::Bytes => {
                let (planes, _) = scratch.get(data.len(), 0);
                match w {
                    1 => split::<1>(data, base, rotate, planes),
                    2 => split::<2>(data, base, rotate, planes),
                    4 => split::<4>(data, base, rotate, planes),
                    _ => split::<8>(data, base, rotate, planes),
                }
                let mantissa = marks_plane(dtype, base.is_some());
                for k in 0..w {
                    let plane = &planes[k * n..(k + 1) * n];
                    match mantissa {
                        Some(m) if k == w - 1 => {
                            let marks = (
                                Plane::Bytes(&planes[..n]),
                                Plane::Bytes(&planes[m * n..(m + 1) * n]),
                            );
                            enc.top_plane(plane, marks, out)?;
                        }
                        _ => enc.plane(plane, 8, out)?,
                    }
                }
            }
            Cut::Difference => {
                let (planes, _) = scratch.get(data.len(), 0);
                split_difference(data, base.unwrap_or_default(), planes);
                for k in 0..w {
                    enc.plane(&planes[k * n..(k + 1) * n], 8, out)?;
                }
            }
            Cut::Head => {
                let (rest, head) = scratch.get((w - 1) * n, n);
                match w {
                    2 => split_head::<2>(data, base, head, rest),
                    _ => split_head::<4>(data, base, head, rest),
                }
                enc.plane(head, cut.bits(0, w), out)?;
                for k in 1..w {
                    enc.plane(&rest[(k - 1) * n..k * n], cut.bits(k, w), out)?;
                }
            }
        }
        Ok(())
    })?;
    for (k, &(method, stored)) in enc.stats.iter().enumerate() {
        let e = &mut out[table + 5 * k..table + 5 * k + 5];
        e[0] = method as u8;
        e[1..].copy_from_slice(&(stored as u32).to_le_bytes());
    }
    Ok(LosslessStats {
        planes: enc.stats,
        payload_bytes: out.len() - start,
    })
}

fn check_lengths(dtype: DType, data: &[u8], base: Option<&[u8]>) -> Result<(), LosslessError> {
    if !data.len().is_multiple_of(dtype.size()) {
        return Err(LosslessError::RaggedLength {
            len: data.len(),
            dtype,
        });
    }
    match base {
        Some(b) if b.len() != data.len() => Err(LosslessError::BaseLength {
            base: b.len(),
            data: data.len(),
        }),
        _ => Ok(()),
    }
}

/// The byte that holds (the top of) each word's exponent: the top byte of the rotated word.
fn exponent_bytes(dtype: DType, data: &[u8]) -> Vec<u8> {
    let n = data.len() / dtype.size();
    let mut out = vec![0u8; n];
    // Fixed-size chunks and a pre-sized output: the loops vectorize.
    match dtype.size() {
        2 => {
            for (o, c) in out.iter_mut().zip(data.as_chunks::<2>().0) {
                *o = (u16::from_le_bytes(*c) >> 7) as u8;
            }
        }
        4 => {
            for (o, c) in out.iter_mut().zip(data.as_chunks::<4>().0) {
                *o = (u32::from_le_bytes(*c) >> 23) as u8;
            }
        }
        _ => {
            for (o, c) in out.iter_mut().zip(data.as_chunks::<8>().0) {
                *o = (u64::from_le_bytes(*c) >> 55) as u8;
            }
        }
    }
    out
}

/// The base-exponent contexts of a delta: element `i` has context
/// `clamp(e_i - lo, 0, count - 1)`.
struct BaseContexts {
    lo: u8,
    count: usize,
    map: rans::ContextMap,
    /// How many elements each context has: from the exponents' histogram, or for a marked
    /// plane's contexts counted when first needed.
    elements: std::cell::OnceCell<Vec<u32>>,
}

impl BaseContexts {
    /// The contexts of a delta against `base`, with the window placed over the most common
    /// exponents; `None` when they would all be one.
    fn new(dtype: DType, base: &[u8]) -> Option<BaseContexts> {
        let exps = exponent_bytes(dtype, base);
        let hist = rans::histogram(&exps);
        let (lo, count) = bucket_window(&hist);
        // Each context's elements, from the exponents' counts: `clamp(e - lo, 0, count - 1)`.
        let mut elements = vec![0u32; count];
        for (e, &c) in hist.iter().enumerate() {
            elements[e.saturating_sub(usize::from(lo)).min(count - 1)] += c;
        }
        (count >= 2).then(|| BaseContexts {
            lo,
            count,
            map: rans::ContextMap::bucketized(&exps, lo, count),
            elements: std::cell::OnceCell::from(elements),
        })
    }

    /// How many elements each context has.
    fn elements(&self) -> &[u32] {
        self.elements.get_or_init(|| {
            let mut h = rans::histogram(self.map.ctx());
            h.truncate(self.count);
            h
        })
    }
}

/// Buckets exponent bytes, given by their histogram `hist`, into at most
/// [`rans::MAX_CONTEXTS`] contexts: `clamp(e - lo, 0, count - 1)`. The window's top is the
/// exponent at or below which 99.9 % of the values lie; its bottom the exponent below which
/// lies under 1 % of them (or 15 below the top, if that is higher). The values under the bottom share its context: a context of its own would cost
/// a table for a few values. Measured on the shared series and a training state, this codes
/// every one as small as the 16 contexts below the top did or smaller, with fewer tables to
/// build (ADR 0043, addendum of 2026-12-03). Stores written with the 16 decode as before.
fn bucket_window(hist: &[u32]) -> (u8, usize) {
    let total: u64 = hist.iter().map(|&c| u64::from(c)).sum();
    let (mut lo, mut hi) = (None, 0usize);
    let mut acc = 0u64;
    for (e, &c) in hist.iter().enumerate() {
        acc += u64::from(c);
        if lo.is_none() && acc * 100 > total {
            lo = Some(e);
        }
        if acc * 1000 >= total * 999 {
            hi = e;
            break;
        }
    }
    let lo = lo
        .unwrap_or(0)
        .min(hi)
        .max(hi.saturating_sub(rans::MAX_CONTEXTS - 1));
    (lo as u8, hi - lo + 1)
}

/// Chooses and writes each plane's method.
struct PlaneEncoder<'a> {
    opts: &'a LosslessOptions,
    contexts: Option<&'a BaseContexts>,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    stats: Vec<(PlaneMethod, usize)>,
    /// The size another coding of the plane has: `choose` may then give up, writing
    /// nothing and returning [`PlaneMethod::Marked`], when its model shows it cannot
    /// beat it.
    beat: Option<usize>,
    /// Whether a byte plane may be listed ([`PlaneMethod::Sparse`]); not inside a marked
    /// plane, whose inner methods are fewer.
    lists: bool,
}

/// A byte plane of `n` elements is listed when that costs at most `n / SPARSE_SLACK` bytes
/// more than its best other coding (ADR 0033).
const SPARSE_SLACK: usize = 1024;

impl PlaneEncoder<'_> {
    /// Appends one plane of `bits`-bit symbols to `out` and records its method and size.
    fn plane<S: rans::Symbol>(
        &mut self,
        plane: &[S],
        bits: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), LosslessError> {
        let at = out.len();
        let method = self.choose(plane, bits, out)?;
        self.stats.push((method, out.len() - at));
        Ok(())
    }

    /// Appends the exponent plane of a bf16 or f32 delta, [`PlaneMethod::Marked`] when
    /// that is smaller; `marks` are the sign and top mantissa planes.
    ///
    /// The marked coding is made first (it is cheap: few elements are marked); the
    /// regular one is then only estimated when its model shows it cannot be the smaller.
    fn top_plane(
        &mut self,
        plane: &[u8],
        marks: (Plane<'_>, Plane<'_>),
        out: &mut Vec<u8>,
    ) -> Result<(), LosslessError> {
        let at = out.len();
        // Exceptions cost 2 to 3 bytes each: more than one per 64 elements cannot pay.
        // Nor can marking more than an eighth of the elements pay much (the marks are not
        // free, the regular coding's contexts see as much): not worth the time.
        let mut alt = Vec::new();
        let n = plane.len();
        // A constant plane (no exponent changed at all) is coded as one.
        let constant = plane.first().is_none_or(|&f| plane.iter().all(|&s| s == f));
        let marked = !constant
            && n >= 64
            && marked::count(&marks.0, &marks.1, n) <= n / 8
            && marked::put_exceptions(&marks.0, &marks.1, plane, plane.len() / 64, &mut alt)
                .is_some();
        if marked {
            let at_marks = marked::marked(&marks.0, &marks.1, n);
            let sub = marked::gather(&at_marks, plane);
            let sub_contexts = self.contexts.map(|bc| BaseContexts {
                lo: bc.lo,
                count: bc.count,
                map: rans::ContextMap::new(marked::gather(&at_marks, bc.map.ctx())),
                elements: std::cell::OnceCell::new(),
            });
            let opts = LosslessOptions {
                zstd_level: None,
                ..*self.opts
            };
            let mut inner = PlaneEncoder {
                opts: &opts,
                contexts: sub_contexts.as_ref(),
                zstd: None,
                stats: Vec::new(),
                beat: None,
                lists: false,
            };
            let tag = alt.len();
            alt.push(0);
            alt[tag] = inner.choose(&sub, 8, &mut alt)? as u8;
            self.beat = Some(alt.len());
        }
        let chosen = self.choose(plane, 8, out);
        self.beat = None;
        let mut method = chosen?;
        if marked && (method == PlaneMethod::Marked || alt.len() < out.len() - at) {
            out.truncate(at);
            out.extend_from_slice(&alt);
            method = PlaneMethod::Marked;
        }
        self.stats.push((method, out.len() - at));
        Ok(())
    }

    fn choose<S: rans::Symbol>(
        &mut self,
        plane: &[S],
        bits: u32,
        out: &mut Vec<u8>,
    ) -> Result<PlaneMethod, LosslessError> {
        let raw = planes::packed_len(plane.len(), bits);
        let Some(&first) = plane.first() else {
            return Ok(PlaneMethod::Raw);
        };
        if plane.len() > 1 && plane.iter().all(|&s| s == first) {
            let v = first.index() as u16;
            out.extend_from_slice(&v.to_le_bytes()[..constant_len(bits)]);
            return Ok(PlaneMethod::Constant);
        }
        let worth = |size: usize| (size as f64) < raw as f64 * (1.0 - self.opts.min_gain);
        // A byte plane that is almost all zeros may be listed: it then decodes in a scan.
        // A list within the slack is taken without modelling the plane.
        let slack = plane.len() / SPARSE_SLACK;
        let list = match S::as_bytes(plane) {
            Some(bytes) if self.lists && bits == 8 => {
                sparse::count_at_most(bytes, plane.len() / 64).map(|k| {
                    let mut list = Vec::new();
                    sparse::put(bytes, k, &mut list);
                    list
                })
            }
            _ => None,
        };
        if let Some(list) = list.as_ref().filter(|l| l.len() <= slack) {
            out.extend_from_slice(list);
            return Ok(PlaneMethod::Sparse);
        }
        if self.contexts.is_none() && self.clearly_random(plane, bits) {
            return Ok(self.raw(plane, bits, out));
        }
        // Candidate models: order-0, and with a base the base-exponent contexts; keep the
        // smaller estimate.
        // With base contexts, the order-0 histogram is the sum of the contexts' ones. The
        // better of the two by a quick estimate is then normalized.
        // A plane with a list (few non-zero bytes) is counted from its non-zero bytes.
        let sparse = S::as_bytes(plane).filter(|_| list.is_some());
        let hists = self.contexts.map(|bc| match sparse {
            Some(bytes) if bytes.len() == bc.map.ctx().len() => {
                sparse::histograms(bytes, Some((bc.map.ctx(), bc.count, bc.elements())))
            }
            _ => rans::histograms(plane, bc.map.ctx(), bc.count),
        });
        let hist = match (&hists, sparse) {
            (Some(h), _) => rans::merge(h),
            (None, Some(bytes)) => sparse::histograms(bytes, None).swap_remove(0),
            (None, None) => rans::histogram(plane),
        };
        let order0 = std::slice::from_ref(&hist);
        let best = match &hists {
            Some(h) if rans::estimate(h) + 1 < rans::estimate(order0) => {
                rans::Model::new::<S>(h).map(|m| (m.bytes() + 1, PlaneMethod::RansBaseContext, m))
            }
            _ => None,
        };
        let best = best
            .or_else(|| rans::Model::new::<S>(order0).map(|m| (m.bytes(), PlaneMethod::Rans, m)));
        if let Some(beat) = self.beat {
            // The stream is at least its estimate less 2 bytes per lane (what the final
            // states hold) and the rounding of the tables; 256 bytes cover both. zstd is
            // not tried on an exponent plane without repeats; raw is the plane's size.
            let coded = best
                .as_ref()
                .map_or(usize::MAX, |b| b.0.saturating_sub(256));
            let zstd_due = self.opts.zstd_level.is_some()
                && S::as_bytes(plane).is_some_and(|bytes| self.repeats(bytes, &hist));
            if beat < coded && beat < raw && !zstd_due {
                return Ok(PlaneMethod::Marked);
            }
        }
        let at = out.len();
        let mut method = PlaneMethod::Raw;
        if let Some((_, m, model)) = best.filter(|b| worth(b.0)) {
            method = m;
            match (m, self.contexts) {
                (PlaneMethod::RansBaseContext, Some(bc)) => {
                    out.push(bc.lo);
                    rans::encode(plane, rans::Contexts::Given(&bc.map), &model, out);
                }
                _ => rans::encode(plane, rans::Contexts::Order0, &model, out),
            }
            let zstd = match (self.opts.zstd_level, S::as_bytes(plane)) {
                (Some(level), Some(bytes)) if self.repeats(bytes, &hist) => Some((level, bytes)),
                _ => None,
            };
            if let Some((level, bytes)) = zstd {
                let c = match &mut self.zstd {
                    Some(c) => c,
                    None => self.zstd.insert(
                        zstd::bulk::Compressor::new(level)
                            .map_err(|e| LosslessError::Compress(e.to_string()))?,
                    ),
                };
                let z = c
                    .compress(bytes)
                    .map_err(|e| LosslessError::Compress(e.to_string()))?;
                if z.len() < out.len() - at {
                    out.truncate(at);
                    out.extend_from_slice(&z);
                    method = PlaneMethod::Zstd;
                }
            }
        }
        if method == PlaneMethod::Raw || !worth(out.len() - at) {
            out.truncate(at);
            method = self.raw(plane, bits, out);
        }
        if let Some(list) = list.filter(|l| l.len() <= out.len() - at + slack) {
            out.truncate(at);
            out.extend_from_slice(&list);
            method = PlaneMethod::Sparse;
        }
        Ok(method)
    }

    /// Appends `plane` raw.
    fn raw<S: rans::Symbol>(&self, plane: &[S], bits: u32, out: &mut Vec<u8>) -> PlaneMethod {
        match S::as_bytes(plane) {
            Some(bytes) if bits == 8 => out.extend_from_slice(bytes),
            _ => planes::pack(plane, bits, out),
        }
        PlaneMethod::Raw
    }

    /// Whether a sample shows `plane` too close to random for order-0 coding to save half
    /// of `min_gain` (the low mantissa bits of weights), so it can be stored raw without a
    /// histogram of all of it. The sample is 64 runs of 1024 symbols spread evenly, and
    /// planes under 2^16 symbols are never judged by it. Estimating entropy from a sample
    /// errs low, so it does not store raw what order-0 coding would shrink by `min_gain`;
    /// it is not used when base contexts could find what order-0 cannot.
    fn clearly_random<S: rans::Symbol>(&self, plane: &[S], bits: u32) -> bool {
        const RUNS: usize = 64;
        const RUN: usize = 1024;
        if plane.len() < 1 << 16 {
            return false;
        }
        let stride = plane.len() / RUNS;
        let mut hist = vec![0u32; 1 << S::BITS];
        for r in 0..RUNS {
            for &s in &plane[r * stride..r * stride + RUN] {
                hist[s.index()] += 1;
            }
        }
        let entropy = rans::order0_bits(&hist) / (RUNS * RUN) as f64;
        entropy >= f64::from(bits) * (1.0 - self.opts.min_gain / 2.0)
    }

    /// Whether zstd should be tried on `plane` (with histogram `hist`): its neighbours are
    /// equal more often than `zstd_min_repeats` above what the histogram predicts. Large
    /// planes are sampled: 64 runs of 1024 symbols spread evenly.
    fn repeats(&self, plane: &[u8], hist: &[u32]) -> bool {
        const RUNS: usize = 64;
        const RUN: usize = 1024;
        let min = self.opts.zstd_min_repeats;
        if min <= 0.0 {
            return true;
        }
        let n = plane.len() as f64;
        let collide: f64 = hist.iter().map(|&c| (f64::from(c) / n).powi(2)).sum();
        let equal_in = equal_neighbours;
        let (equal, pairs) = if plane.len() <= RUNS * RUN {
            (equal_in(plane), plane.len().saturating_sub(1))
        } else {
            let stride = plane.len() / RUNS;
            let equal = (0..RUNS)
                .map(|r| equal_in(&plane[r * stride..r * stride + RUN]))
                .sum();
            (equal, RUNS * (RUN - 1))
        };
        equal as f64 >= (collide + min) * pairs.max(1) as f64
    }
}

/// How many bytes of `run` equal the byte before them.
fn equal_neighbours(run: &[u8]) -> usize {
    let Some(next) = run.get(1..) else {
        return 0;
    };
    // A byte sum of at most 255 compares per piece: LLVM vectorizes it into byte lanes, where
    // a sum of usizes, widened every byte, did not.
    next.chunks(255)
        .zip(run.chunks(255))
        .map(|(a, b)| {
            let same = a
                .iter()
                .zip(b)
                .fold(0u8, |n, (x, y)| n.wrapping_add(u8::from(x == y)));
            usize::from(same)
        })
        .sum()
}

/// Bytes of a constant plane's symbol.
fn constant_len(bits: u32) -> usize {
    if bits > 8 {
        2
    } else {
        1
    }
}

/// Decodes a payload into `out`, whose length gives the element count (`out.len() / W`).
///
/// Nothing is allocated beyond scratch buffers of about `2 * out.len()` bytes and the rANS
/// tables: every length read from the payload is checked against `out.len()` and the
/// payload's own size first.
///
/// # Errors
/// [`LosslessError::RaggedLength`] or [`LosslessError::BaseLength`] for bad arguments, and
/// [`LosslessError::Truncated`], [`LosslessError::TrailingBytes`],
/// [`LosslessError::UnknownPlaneLayout`], [`LosslessError::UnknownMethod`],
/// [`LosslessError::PlaneLength`], [`LosslessError::SymbolRange`],
/// [`LosslessError::Rans`], [`LosslessError::Zstd`] for a bad payload.
pub fn decode(
    dtype: DType,
    payload: &[u8],
    base: Option<&[u8]>,
    out: &mut [u8],
) -> Result<(), LosslessError> {
    check_lengths(dtype, out, base)?;
    decode_first(dtype, payload, base, out.len() / dtype.plane_width(), out)
}

/// Decodes the first `out.len()` bytes of a payload of `len` decoded bytes: the elements
/// a reader of one element range needs (`Store::history`), at the cost of decoding up to
/// them. `base`, for a delta, is the same prefix of the base.
///
/// The bytes are exactly those [`decode`] writes there. A payload is checked as far as
/// the prefix reaches: the plane table whole, each plane up to the prefix; what only the
/// end of a plane shows (leftover rANS words, padding bits) is checked by [`decode`].
///
/// # Errors
/// [`LosslessError::Prefix`] when `out` is longer than `len`, and those of [`decode`].
pub fn decode_prefix(
    dtype: DType,
    payload: &[u8],
    base: Option<&[u8]>,
    len: usize,
    out: &mut [u8],
) -> Result<(), LosslessError> {
    check_lengths(dtype, out, base)?;
    if out.len() > len || !len.is_multiple_of(dtype.size()) {
        return Err(LosslessError::Prefix {
            prefix: out.len(),
            len,
        });
    }
    decode_first(dtype, payload, base, len / dtype.plane_width(), out)
}

/// Decodes the first `out.len() / W` of the payload's `n` elements (checked by the callers:
/// `out` whole elements, no longer than `n`, `base` as long as `out`).
fn decode_first(
    dtype: DType,
    payload: &[u8],
    base: Option<&[u8]>,
    n: usize,
    out: &mut [u8],
) -> Result<(), LosslessError> {
    let w = dtype.plane_width();
    let float = dtype.is_float();
    let &code = payload.first().ok_or(LosslessError::Truncated {
        needed: 1,
        actual: 0,
    })?;
    let cut =
        Cut::from_code(code, dtype).ok_or(LosslessError::UnknownPlaneLayout { code, dtype })?;
    if cut == Cut::Difference && base.is_none() {
        return Err(LosslessError::MissingBase { code });
    }
    let table = payload.get(1..1 + 5 * w).ok_or(LosslessError::Truncated {
        needed: 1 + 5 * w,
        actual: payload.len(),
    })?;
    let mut entries = [(0u8, 0usize); 8];
    let mut total = 1 + 5 * w;
    for (k, e) in table.chunks_exact(5).enumerate() {
        let method = e[0];
        let stored = u32::from_le_bytes([e[1], e[2], e[3], e[4]]) as usize;
        let bits = cut.bits(k, w);
        let ok = match method {
            0 => stored == planes::packed_len(n, bits),
            1 => bits <= 8 && stored > 0 && stored <= payload.len(),
            2 => stored == constant_len(bits) && n > 0,
            3 => stored > 0 && stored <= payload.len() && n > 0,
            4 => stored > 1 && stored <= payload.len() && n > 0 && float && base.is_some(),
            6 => bits == 8 && stored > 0 && stored <= payload.len() && n > 0,
            5 => {
                cut == Cut::Bytes
                    && k == w - 1
                    && marks_plane(dtype, base.is_some()).is_some()
                    && stored > 1
                    && stored <= payload.len()
            }
            _ => return Err(LosslessError::UnknownMethod { plane: k, method }),
        };
        if !ok {
            return Err(LosslessError::PlaneLength {
                plane: k,
                method,
                stored,
                elements: n,
            });
        }
        entries[k] = (method, stored);
        total = total.saturating_add(stored);
    }
    if total > payload.len() {
        return Err(LosslessError::Truncated {
            needed: total,
            actual: payload.len(),
        });
    }
    if total < payload.len() {
        return Err(LosslessError::TrailingBytes {
            extra: payload.len() - total,
        });
    }
    let mut bodies = [&payload[..0]; 8];
    let mut pos = 1 + 5 * w;
    for (b, &(_, stored)) in bodies.iter_mut().zip(&entries[..w]) {
        *b = &payload[pos..pos + stored];
        pos += stored;
    }
    scratch::with(|scratch| {
        let mut table = std::mem::take(&mut scratch.table);
        let r = decode_planes(
            cut,
            dtype,
            &entries[..w],
            &bodies[..w],
            base,
            n,
            scratch,
            &mut table,
            out,
        );
        scratch.table = table;
        r
    })
}

/// Decodes the first `out.len() / W` elements of the planes of a checked payload of `n`
/// elements (`entries` and `bodies` per plane) and joins them into `out`.
#[allow(clippy::too_many_arguments)]
fn decode_planes(
    cut: Cut,
    dtype: DType,
    entries: &[(u8, usize)],
    bodies: &[&[u8]],
    base: Option<&[u8]>,
    n: usize,
    scratch: &mut scratch::Scratch,
    table: &mut Vec<u32>,
    out: &mut [u8],
) -> Result<(), LosslessError> {
    let w = dtype.plane_width();
    let m = out.len() / w;
    let float = dtype.is_float();
    let contexts = match base {
        Some(b) if entries.iter().any(|e| e.0 == 4 || e.0 == 5) => Some(exponent_bytes(dtype, b)),
        _ => None,
    };
    let mut dec = PlaneDecoder {
        m,
        n,
        exps: contexts.as_deref(),
        map: None,
        table,
        zstd: None,
    };

    // Byte planes that are not stored as they are decode into scratch.
    let first_byte_plane = usize::from(cut == Cut::Head);
    let scratch_planes = (first_byte_plane..w)
        .filter(|&k| !(entries[k].0 == 2 || entries[k].0 == 0 && cut.bits(k, w) == 8))
        .count();
    let head_words = if cut == Cut::Head && entries[0].0 != 2 {
        m
    } else {
        0
    };
    let (bytes, words) = scratch.get(scratch_planes * m, head_words);
    let mut parts = bytes.chunks_mut(m.max(1));
    let mut planes: [Plane<'_>; 8] = [Plane::Constant(0); 8];
    for k in first_byte_plane..w {
        let (method, body) = (entries[k].0, bodies[k]);
        let bits = cut.bits(k, w);
        planes[k] = match method {
            // The table check made a raw byte plane `n >= m` bytes.
            0 if bits == 8 => Plane::Bytes(&body[..m]),
            2 => Plane::Constant(dec.constant(body, k, bits)? as u8),
            5 => {
                let dst = parts.next().unwrap_or_default();
                // The table check allows method 5 only on plane W - 1 of a bf16 or f32
                // delta, so planes 0 and W - 2 are decoded.
                let m = marks_plane(dtype, true).unwrap_or(0);
                dec.marked(body, k, (planes[0], planes[m]), dst)?;
                Plane::Bytes(dst)
            }
            _ => {
                let dst = parts.next().unwrap_or_default();
                dec.plane(method, body, k, bits, dst)?;
                Plane::Bytes(dst)
            }
        };
    }
    match cut {
        Cut::Bytes => match w {
            1 => join::<1>(&[planes[0]], base, float, out),
            2 => join::<2>(&[planes[0], planes[1]], base, float, out),
            4 => join::<4>(
                &[planes[0], planes[1], planes[2], planes[3]],
                base,
                float,
                out,
            ),
            _ => join::<8>(
                &[
                    planes[0], planes[1], planes[2], planes[3], planes[4], planes[5], planes[6],
                    planes[7],
                ],
                base,
                float,
                out,
            ),
        },
        // Checked by `decode_first`: f32 with a base.
        Cut::Difference => join_difference(
            &[planes[0], planes[1], planes[2], planes[3]],
            base.unwrap_or_default(),
            out,
        ),
        Cut::Head if matches!(entries[0].0, 3 | 4) => {
            // The rANS kernel writes whole words into `out` as it decodes the head, so the
            // head symbols make no pass of their own; the steps it leaves are joined after.
            let rest = &planes[1..w];
            let filled = planes::constant_fills(rest, m);
            let p = planes::plane_slices(rest, &filled);
            let into = rans::JoinInto { rest: &p, out };
            let joined = dec.head_joined(entries[0].0, bodies[0], words, into)?;
            match w {
                2 => planes::join_head_from::<2>(joined, words, &p, base, out),
                _ => planes::join_head_from::<4>(joined, words, &p, base, out),
            }
        }
        Cut::Head => {
            let (method, body) = (entries[0].0, bodies[0]);
            let head = if method == 2 {
                Head::Constant(dec.constant(body, 0, planes::HEAD_BITS)?)
            } else {
                dec.plane(method, body, 0, planes::HEAD_BITS, words)?;
                Head::Words(words)
            };
            match w {
                2 => join_head::<2>(head, &planes[1..2], base, out),
                _ => join_head::<4>(head, &planes[1..4], base, out),
            }
        }
    }
    Ok(())
}

/// Decodes the first `m` elements of the planes of one payload of `n` elements.
struct PlaneDecoder<'a> {
    m: usize,
    n: usize,
    /// The base's exponent bytes, when some plane uses base contexts.
    exps: Option<&'a [u8]>,
    /// The last base-context map, with its `lo` and context count (planes of a block
    /// usually share one).
    map: Option<(u8, usize, rans::ContextMap)>,
    /// rANS decode tables, reused from plane to plane.
    table: &'a mut Vec<u32>,
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

impl PlaneDecoder<'_> {
    /// The symbol of a constant plane (its table entry was checked).
    fn constant(&self, body: &[u8], plane: usize, bits: u32) -> Result<u16, LosslessError> {
        let mut v = [0u8; 2];
        v[..body.len()].copy_from_slice(body);
        let v = u16::from_le_bytes(v);
        if u32::from(v) >> bits != 0 {
            return Err(LosslessError::SymbolRange { plane, bits });
        }
        Ok(v)
    }

    /// Decodes a marked plane (method 5) into `dst`; `marks` are the decoded sign and top
    /// mantissa planes.
    fn marked(
        &mut self,
        body: &[u8],
        plane: usize,
        marks: (Plane<'_>, Plane<'_>),
        dst: &mut [u8],
    ) -> Result<(), LosslessError> {
        let (sign, mantissa) = (&marks.0, &marks.1);
        let b = marked::parse(body, plane, sign, mantissa, self.m, self.n)?;
        let mut sub = vec![0u8; b.marked.len()];
        match b.inner {
            // `parse` checked that the raw bytes cover the marked elements.
            0 => sub.copy_from_slice(&b.rest[..b.marked.len()]),
            2 => sub.fill(b.rest[0]),
            3 => self.rans(b.rest, plane, rans::Contexts::Order0, 8, &mut sub)?,
            _ => {
                let exps = self.exps.ok_or(LosslessError::Marked {
                    plane,
                    reason: "base contexts without a base",
                })?;
                let lo = b.rest[0];
                let count = rans::stream_contexts(&b.rest[1..], plane, rans::MAX_CONTEXTS)?;
                // The base-context planes below share `lo` and the count, as a rule.
                let all = match self.map.take() {
                    Some(m) if m.0 == lo && m.1 == count => m,
                    _ => (lo, count, rans::ContextMap::bucketized(exps, lo, count)),
                };
                let map = rans::ContextMap::new(marked::gather(&b.marked, all.2.ctx()));
                self.map = Some(all);
                let ctx = rans::Contexts::Given(&map);
                self.rans(&b.rest[1..], plane, ctx, 8, &mut sub)?;
            }
        }
        b.scatter(&sub, dst);
        Ok(())
    }

    /// Decodes a rANS stream of the plane into `dst`: its first `m` symbols, checked to the
    /// stream's end when they are all `n`.
    fn rans<S: rans::Symbol>(
        &mut self,
        src: &[u8],
        plane: usize,
        ctx: rans::Contexts<'_>,
        bits: u32,
        dst: &mut [S],
    ) -> Result<(), LosslessError> {
        rans::decode(src, plane, ctx, bits, dst, self.table, self.m == self.n)
    }

    /// Decodes plane `plane` (method 0, 1, 3, 4 or 6; the table entry was checked) into `dst`.
    fn plane<S: rans::Symbol>(
        &mut self,
        method: u8,
        body: &[u8],
        plane: usize,
        bits: u32,
        dst: &mut [S],
    ) -> Result<(), LosslessError> {
        match method {
            0 => {
                // The table check made the body `packed_len(n, bits)` bytes. The padding
                // bits are checked only when the last element is read.
                let src = &body[..planes::packed_len(self.m, bits)];
                if !planes::unpack(src, bits, dst) && self.m == self.n {
                    return Err(LosslessError::SymbolRange { plane, bits });
                }
            }
            1 => match S::as_bytes_mut(dst) {
                Some(d) if self.m < self.n => {
                    decode_zstd_prefix(body, plane, d)?;
                    if d.iter().any(|&b| u32::from(b) >> bits != 0) {
                        return Err(LosslessError::SymbolRange { plane, bits });
                    }
                }
                Some(d) => {
                    decode_zstd(body, plane, &mut self.zstd, d, self.n)?;
                    if d.iter().any(|&b| u32::from(b) >> bits != 0) {
                        return Err(LosslessError::SymbolRange { plane, bits });
                    }
                }
                None => return Err(LosslessError::UnknownMethod { plane, method }),
            },
            3 => self.rans(body, plane, rans::Contexts::Order0, bits, dst)?,
            // The table check allows method 6 only on byte planes.
            6 => match S::as_bytes_mut(dst) {
                Some(d) => sparse::decode(body, plane, self.n, d)?,
                None => return Err(LosslessError::UnknownMethod { plane, method }),
            },
            _ => {
                // Method 4; the table check guarantees a base of a float.
                let map = self.take_map(body, plane)?;
                let ctx = rans::Contexts::Given(&map.2);
                let r = self.rans(&body[1..], plane, ctx, bits, dst);
                self.map = Some(map);
                r?;
            }
        }
        Ok(())
    }

    /// The base-context map of a method 4 plane (`body` starts with its `lo` byte): the
    /// last one if it has the same `lo` and context count, else a new one. The caller puts
    /// it back in `self.map` when done.
    fn take_map(
        &mut self,
        body: &[u8],
        plane: usize,
    ) -> Result<(u8, usize, rans::ContextMap), LosslessError> {
        let count = rans::stream_contexts(&body[1..], plane, rans::MAX_CONTEXTS)?;
        let lo = body[0];
        Ok(match self.map.take() {
            Some(m) if m.0 == lo && m.1 == count => m,
            _ => {
                let exps = self.exps.unwrap_or_default();
                (lo, count, rans::ContextMap::bucketized(exps, lo, count))
            }
        })
    }

    /// Decodes a float's head plane (method 3 or 4; the table entry was checked) into
    /// `dst`, the kernel writing whole words into `into` as far as it goes: returns the
    /// count of leading elements written as words (see [`rans::decode_joined`]).
    fn head_joined(
        &mut self,
        method: u8,
        body: &[u8],
        dst: &mut [u16],
        into: rans::JoinInto<'_>,
    ) -> Result<usize, LosslessError> {
        let whole = self.m == self.n;
        if method == 3 {
            let ctx = rans::Contexts::Order0;
            return rans::decode_joined(body, 0, ctx, dst, into, self.table, whole);
        }
        let map = self.take_map(body, 0)?;
        let ctx = rans::Contexts::Given(&map.2);
        let r = rans::decode_joined(&body[1..], 0, ctx, dst, into, self.table, whole);
        self.map = Some(map);
        r
    }
}

/// Decodes the first `dst.len()` bytes of a zstd plane, streaming: the decoder stops when
/// `dst` is full.
fn decode_zstd_prefix(body: &[u8], plane: usize, dst: &mut [u8]) -> Result<(), LosslessError> {
    use zstd::stream::raw::{Decoder, InBuffer, Operation, OutBuffer};
    let err = |reason: String| LosslessError::Zstd { plane, reason };
    let mut d = Decoder::new().map_err(|e| err(e.to_string()))?;
    let mut input = InBuffer::around(body);
    let mut output = OutBuffer::around(dst);
    while output.pos() < output.capacity() {
        let before = (input.pos(), output.pos());
        d.run(&mut input, &mut output)
            .map_err(|e| err(e.to_string()))?;
        if (input.pos(), output.pos()) == before {
            return Err(err(format!(
                "the frame ends after {} bytes, before the {} asked for",
                output.pos(),
                output.capacity()
            )));
        }
    }
    Ok(())
}

fn decode_zstd(
    body: &[u8],
    plane: usize,
    decoder: &mut Option<zstd::bulk::Decompressor<'static>>,
    dst: &mut [u8],
    n: usize,
) -> Result<(), LosslessError> {
    let err = |e: std::io::Error| LosslessError::Zstd {
        plane,
        reason: e.to_string(),
    };
    let d = match decoder {
        Some(d) => d,
        None => decoder.insert(zstd::bulk::Decompressor::new().map_err(err)?),
    };
    let got = d.decompress_to_buffer(body, dst).map_err(err)?;
    if got != n {
        return Err(LosslessError::Zstd {
            plane,
            reason: format!("decoded {got} bytes, expected {n}"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
