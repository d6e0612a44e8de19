//! Aged blocks: a lossy version of a block kept as a quantized arithmetic delta against the
//! *reconstruction* of its base, so errors do not add up along a chain (ADR 0020).
//!
//! Encoding picks one quantization step `Δ` for the block, the largest whose measured
//! relative Frobenius error `‖r − t‖ / ‖t‖` (`t` the block written, `r` what a read returns,
//! rounded to the block's dtype) is within the budget; it stores `q = round((t − b) / Δ)`
//! (`b` the base's reconstruction, or zeros for a block without base) as zigzag words
//! coded by the lossless codec's byte planes, whose rANS coder spends about the entropy of
//! `q`: a uniform step with an entropy coder is what minimises bits at a given squared error,
//! and blocks where the delta is small cost a fraction of a bit per value. A read computes
//! `r = dtype(b + q · Δ)` in `f32`, the same operations in the same order as the encoder.
//!
//! # Layout
//!
//! All integers little-endian; offsets from the start of the blob.
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 4 | magic `SAGD` |
//! | 4 | 1 | version, 1; readers refuse any other |
//! | 5 | 1 | dtype code ([`DType::code`]): f32, f16 or bf16 |
//! | 6 | 1 | flags: bit 0 the block has a base; bit 1 log-relative mode (below); bits 2..=7 must be 0 |
//! | 7 | 1 | width of a coded word: 1 (u8), 2 (u16) or 4 (u32), the narrowest that holds every `zigzag(q)` |
//! | 8 | 8 | elements `n` |
//! | 16 | 4 | step `Δ`, f32, finite and above 0 |
//! | 20 | 4 | measured relative Frobenius error of the block, f32, finite, `>= 0` |
//! | 24 | 4 | measured largest absolute error of an element, f32, finite, `>= 0` |
//! | 28 | 8 | xxh3-64 of the base reconstruction's bytes (0 without a base) |
//! | 36 | 4 | payload length `P` |
//! | 40 | `P` | payload: [`crate::lossless::encode`] of the `n` words `zigzag(q)` as u8, u16 or u32 |
//! | 40 + `P` | 8 | xxh3-64 of bytes `0 .. 40 + P`; the blob ends here |
//!
//! **Log-relative mode** (flag bit 1, [`encode_log`]; ADR 0027): for blocks of non-negative
//! values (Adam's second moments), each element is coded as the log2 ratio to its base
//! element (to 1.0 without a base) at a step of `2^-k`, stored in the step field, and read
//! back as a product of non-negative numbers, so it can never go negative; zeros stay zero,
//! and elements no code holds within the budget are kept exactly. Its payload layout is in
//! the `log` module.
//!
//! The base hash makes a blob's content address depend on the base it was made against
//! (two versions whose deltas quantize alike over different bases never share a segment),
//! and a read checks it: a block decoded over the wrong base is an error, not wrong data.
//!
//! ```
//! use strata_codec::aged::{self, AgedView};
//! use strata_codec::{lossless::LosslessOptions, DType};
//!
//! let f = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
//! let base = f(&[1.0, -2.0, 3.0, 4.0]);
//! let next = f(&[1.001, -2.0, 3.01, 3.999]);
//! let blob = aged::encode(DType::F32, &next, Some(&base), 1e-3, &LosslessOptions::default())?
//!     .expect("a budget of 1e-3 is met");
//! let view = AgedView::parse(&blob.bytes)?;
//! let mut out = vec![0u8; next.len()];
//! view.decode_into(DType::F32, Some(&base), &mut out)?;
//! assert!(view.rel_error() <= 1e-3);
//! # Ok::<(), aged::AgedError>(())
//! ```

mod log;
mod search;
#[cfg(test)]
mod tests;

use twox_hash::XxHash3_64;

use crate::lossless::{self, LosslessError, LosslessOptions};
use crate::DType;

const MAGIC: &[u8; 4] = b"SAGD";
const VERSION: u8 = 1;
const FLAG_BASE: u8 = 1;
const FLAG_LOG: u8 = 2;
/// Bytes before the payload.
pub const HEADER_LEN: usize = 40;
/// Bytes of the trailing checksum.
const CHECKSUM_LEN: usize = 8;

/// Why an aged blob was refused or could not be made.
#[derive(Debug, thiserror::Error)]
pub enum AgedError {
    /// The blob ends before a field.
    #[error("aged blob is {len} bytes: {field} needs bytes {offset}..{end}")]
    Truncated {
        /// The field.
        field: &'static str,
        /// Its first byte.
        offset: usize,
        /// One past its last byte.
        end: usize,
        /// Bytes in the blob.
        len: usize,
    },
    /// Not an aged blob.
    #[error("not an aged blob: magic {found:02x?} at offset 0, expected \"SAGD\"")]
    Magic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// A header field holds a value this version does not define.
    #[error("aged blob field {field} at offset {offset} is {value}: {reason}")]
    BadField {
        /// The field.
        field: &'static str,
        /// Its offset.
        offset: usize,
        /// Its value, as text.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The checksum does not match the bytes.
    #[error("aged blob checksum {stored:#018x} at offset {offset} does not match its bytes ({computed:#018x})")]
    Checksum {
        /// Where the checksum is.
        offset: usize,
        /// The checksum stored.
        stored: u64,
        /// The checksum of the bytes.
        computed: u64,
    },
    /// The caller's dtype, length or base does not match the blob.
    #[error("aged blob does not fit the read: {reason}")]
    Mismatch {
        /// What differs.
        reason: String,
    },
    /// The base given is not the one the blob was made against.
    #[error("aged blob was made against a base hashing to {expected:#018x}, the base given hashes to {actual:#018x}")]
    BaseMismatch {
        /// The hash stored in the blob.
        expected: u64,
        /// The hash of the base given.
        actual: u64,
    },
    /// The payload does not decode.
    #[error("aged blob payload at offset {HEADER_LEN}: {source}")]
    Payload {
        /// The lossless codec's error.
        #[source]
        source: LosslessError,
    },
    /// Only f32, f16 and bf16 blocks can be aged.
    #[error("{dtype} blocks cannot be aged (only f32, f16 and bf16)")]
    Dtype {
        /// The dtype asked for.
        dtype: DType,
    },
}

/// An encoded aged block and what it is worth.
#[derive(Debug, Clone, PartialEq)]
pub struct AgedBlock {
    /// The blob.
    pub bytes: Vec<u8>,
    /// Measured relative Frobenius error of the reconstruction.
    pub rel_error: f32,
    /// Measured largest absolute error of one element.
    pub max_abs_error: f32,
    /// Every `q` is 0: the reconstruction is the base's, so a store may keep a reference
    /// to the base block instead of the blob.
    pub all_zero: bool,
}

/// How far an aged block may be from the block written: both bounds hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Largest relative Frobenius error `‖r − t‖ / ‖t‖`.
    pub of_norm: f64,
    /// Largest error relative to the block's distance from its base, `‖r − t‖ / ‖t − b‖`:
    /// below 1, an aged block stays closer to what was written than to its base, so a
    /// version cannot turn into its base however loose `of_norm` is. `None`: no such bound.
    pub of_delta: Option<f64>,
}

/// Whether blocks of `dtype` can be aged.
pub fn supports(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// Encodes block `data` (elements of `dtype`) against `base` (the base's reconstruction,
/// same length) under a relative Frobenius error `budget`. Returns `None` when no step
/// meets the budget (a block of zeros, non-finite values, or a budget finer than the
/// dtype can hold): the caller keeps the block exact.
///
/// # Errors
/// [`AgedError::Dtype`] for a dtype [`supports`] refuses, [`AgedError::Mismatch`] for a
/// ragged length, a base of another length or a budget that is not a positive finite
/// number, [`AgedError::Payload`] if the lossless stage fails.
pub fn encode(
    dtype: DType,
    data: &[u8],
    base: Option<&[u8]>,
    budget: f64,
    opts: &LosslessOptions,
) -> Result<Option<AgedBlock>, AgedError> {
    let budget = Budget {
        of_norm: budget,
        of_delta: None,
    };
    encode_within(dtype, data, base, &budget, opts)
}

/// [`encode`] under both bounds of a [`Budget`].
///
/// # Errors
/// Those of [`encode`]; [`AgedError::Mismatch`] also for an `of_delta` that is not a
/// positive finite number.
pub fn encode_within(
    dtype: DType,
    data: &[u8],
    base: Option<&[u8]>,
    budget: &Budget,
    opts: &LosslessOptions,
) -> Result<Option<AgedBlock>, AgedError> {
    check_block(dtype, data, base)?;
    for b in std::iter::once(budget.of_norm).chain(budget.of_delta) {
        check_budget(b)?;
    }
    let Some(found) = search::quantize(dtype, data, base, budget) else {
        return Ok(None);
    };
    let words = found.q.iter().map(|&q| zigzag(q));
    let head = Head {
        dtype,
        flags: if base.is_some() { FLAG_BASE } else { 0 },
        elements: data.len() / dtype.size(),
        step: found.step,
        rel_error: found.rel_error,
        max_abs_error: found.max_abs_error,
        base,
    };
    let bytes = head.write(words, found.max_zigzag, None, opts)?;
    Ok(Some(AgedBlock {
        bytes,
        rel_error: found.rel_error,
        max_abs_error: found.max_abs_error,
        all_zero: found.max_zigzag == 0,
    }))
}

/// Encodes block `data` (non-negative elements of `dtype`) in the log-relative mode against
/// `base` (the base's reconstruction; each element's ratio to 1.0 without one): the coarsest
/// step whose measured relative error of every element is within `max_rel`. The blob reads
/// back non-negative and finite whatever the base. Returns `None` for a block with a
/// negative or non-finite value, all zeros, or a budget finer than a step of `2^-10` holds.
///
/// # Errors
/// Those of [`encode`].
pub fn encode_log(
    dtype: DType,
    data: &[u8],
    base: Option<&[u8]>,
    max_rel: f64,
    opts: &LosslessOptions,
) -> Result<Option<AgedBlock>, AgedError> {
    check_block(dtype, data, base)?;
    check_budget(max_rel)?;
    let Some(found) = log::quantize(dtype, data, base, max_rel) else {
        return Ok(None);
    };
    let head = Head {
        dtype,
        flags: FLAG_LOG | if base.is_some() { FLAG_BASE } else { 0 },
        elements: data.len() / dtype.size(),
        step: 1.0 / (1u32 << found.k) as f32,
        rel_error: found.rel_error,
        max_abs_error: found.max_abs_error,
        base,
    };
    let max_word = found.words.iter().copied().max().unwrap_or(0);
    let words = found.words.iter().copied();
    let bytes = head.write(words, max_word, Some(&found.escapes), opts)?;
    Ok(Some(AgedBlock {
        bytes,
        rel_error: found.rel_error,
        max_abs_error: found.max_abs_error,
        all_zero: base.is_some() && found.escapes.is_empty() && found.words.iter().all(|&w| w == 2),
    }))
}

/// The dtype and lengths an encoder accepts.
fn check_block(dtype: DType, data: &[u8], base: Option<&[u8]>) -> Result<(), AgedError> {
    if !supports(dtype) {
        return Err(AgedError::Dtype { dtype });
    }
    if !data.len().is_multiple_of(dtype.size()) || base.is_some_and(|b| b.len() != data.len()) {
        return Err(AgedError::Mismatch {
            reason: format!(
                "{} bytes of {dtype} with a base of {:?} bytes",
                data.len(),
                base.map(<[u8]>::len)
            ),
        });
    }
    Ok(())
}

/// A budget must be a positive number.
fn check_budget(b: f64) -> Result<(), AgedError> {
    if b.is_finite() && b > 0.0 {
        return Ok(());
    }
    Err(AgedError::Mismatch {
        reason: format!("budget {b} is not a positive number"),
    })
}

/// The header fields of a blob being written.
struct Head<'a> {
    dtype: DType,
    flags: u8,
    elements: usize,
    step: f32,
    rel_error: f32,
    max_abs_error: f32,
    base: Option<&'a [u8]>,
}

impl Head<'_> {
    /// The blob: header, the `words` (all at most `max_word`) in the narrowest width coded
    /// by the lossless codec, then (log-relative mode) the coded length first and the
    /// `escapes` after, and the checksum.
    fn write(
        &self,
        words: impl Iterator<Item = u32>,
        max_word: u32,
        escapes: Option<&[u8]>,
        opts: &LosslessOptions,
    ) -> Result<Vec<u8>, AgedError> {
        let width: usize = if max_word <= u32::from(u8::MAX) {
            1
        } else if max_word <= u32::from(u16::MAX) {
            2
        } else {
            4
        };
        let mut coded = Vec::with_capacity(self.elements * width);
        for z in words {
            match width {
                1 => coded.push(z as u8),
                2 => coded.extend_from_slice(&(z as u16).to_le_bytes()),
                _ => coded.extend_from_slice(&z.to_le_bytes()),
            }
        }
        let extra = escapes.map_or(0, <[u8]>::len);
        let mut out = Vec::with_capacity(HEADER_LEN + coded.len() / 4 + extra + 64);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.push(self.dtype.code());
        out.push(self.flags);
        out.push(width as u8);
        out.extend_from_slice(&(self.elements as u64).to_le_bytes());
        out.extend_from_slice(&self.step.to_le_bytes());
        out.extend_from_slice(&self.rel_error.to_le_bytes());
        out.extend_from_slice(&self.max_abs_error.to_le_bytes());
        out.extend_from_slice(&self.base.map_or(0, XxHash3_64::oneshot).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        if escapes.is_some() {
            out.extend_from_slice(&[0; 4]);
        }
        lossless::encode(word_dtype(width), &coded, None, opts, &mut out)
            .map_err(|source| AgedError::Payload { source })?;
        if let Some(escapes) = escapes {
            let len = (out.len() - HEADER_LEN - 4) as u32;
            out[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&len.to_le_bytes());
            out.extend_from_slice(escapes);
        }
        let payload = (out.len() - HEADER_LEN) as u32;
        out[36..40].copy_from_slice(&payload.to_le_bytes());
        let sum = XxHash3_64::oneshot(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        Ok(out)
    }
}

/// A parsed, checksum-checked aged blob.
#[derive(Debug, Clone, Copy)]
pub struct AgedView<'a> {
    dtype: DType,
    has_base: bool,
    /// The log-relative mode's `k` (its step is `2^-k`), `None` in the linear mode.
    log_k: Option<u32>,
    width: usize,
    elements: u64,
    step: f32,
    rel_error: f32,
    max_abs_error: f32,
    base_hash: u64,
    payload: &'a [u8],
}

fn field<'a>(
    bytes: &'a [u8],
    name: &'static str,
    offset: usize,
    len: usize,
) -> Result<&'a [u8], AgedError> {
    bytes.get(offset..offset + len).ok_or(AgedError::Truncated {
        field: name,
        offset,
        end: offset + len,
        len: bytes.len(),
    })
}

fn bad(
    field: &'static str,
    offset: usize,
    value: impl ToString,
    reason: &'static str,
) -> AgedError {
    AgedError::BadField {
        field,
        offset,
        value: value.to_string(),
        reason,
    }
}

fn f32_at(bytes: &[u8], name: &'static str, offset: usize) -> Result<f32, AgedError> {
    let b = field(bytes, name, offset, 4)?;
    Ok(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn u64_at(bytes: &[u8], name: &'static str, offset: usize) -> Result<u64, AgedError> {
    let b = field(bytes, name, offset, 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Ok(u64::from_le_bytes(a))
}

impl<'a> AgedView<'a> {
    /// Parses and checks a blob: every header field, the payload length and the checksum.
    ///
    /// # Errors
    /// [`AgedError::Truncated`], [`AgedError::Magic`], [`AgedError::BadField`],
    /// [`AgedError::Checksum`].
    pub fn parse(bytes: &'a [u8]) -> Result<Self, AgedError> {
        let magic = field(bytes, "magic", 0, 4)?;
        if magic != MAGIC {
            return Err(AgedError::Magic {
                found: [magic[0], magic[1], magic[2], magic[3]],
            });
        }
        let head = field(bytes, "header", 0, HEADER_LEN)?;
        if head[4] != VERSION {
            return Err(bad("version", 4, head[4], "only version 1 is defined"));
        }
        let dtype = DType::from_code(head[5])
            .filter(|&d| supports(d))
            .ok_or_else(|| bad("dtype", 5, head[5], "not f32, f16 or bf16"))?;
        if head[6] & !(FLAG_BASE | FLAG_LOG) != 0 {
            return Err(bad("flags", 6, head[6], "undefined bits set"));
        }
        let width = usize::from(head[7]);
        if !matches!(width, 1 | 2 | 4) {
            return Err(bad("word width", 7, width, "must be 1, 2 or 4"));
        }
        let elements = u64_at(bytes, "elements", 8)?;
        let step = f32_at(bytes, "step", 16)?;
        if !(step.is_finite() && step > 0.0) {
            return Err(bad("step", 16, step, "must be finite and above 0"));
        }
        let log_k = if head[6] & FLAG_LOG != 0 {
            let k = (0..=log::MAX_K).find(|&k| step == 1.0 / (1u32 << k) as f32);
            Some(k.ok_or_else(|| {
                bad(
                    "step",
                    16,
                    step,
                    "the log-relative mode's step must be 2^-k for k in 0..=10",
                )
            })?)
        } else {
            None
        };
        let rel_error = f32_at(bytes, "relative error", 20)?;
        let max_abs_error = f32_at(bytes, "largest error", 24)?;
        for (v, name, off) in [
            (rel_error, "relative error", 20),
            (max_abs_error, "largest error", 24),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(bad(name, off, v, "must be finite and at least 0"));
            }
        }
        let base_hash = u64_at(bytes, "base hash", 28)?;
        let p = u32::from_le_bytes([head[36], head[37], head[38], head[39]]) as usize;
        let payload = field(bytes, "payload", HEADER_LEN, p)?;
        let end = HEADER_LEN + p;
        let stored = u64_at(bytes, "checksum", end)?;
        if bytes.len() != end + CHECKSUM_LEN {
            return Err(bad(
                "blob length",
                end + CHECKSUM_LEN,
                bytes.len(),
                "bytes after the checksum",
            ));
        }
        let computed = XxHash3_64::oneshot(&bytes[..end]);
        if computed != stored {
            return Err(AgedError::Checksum {
                offset: end,
                stored,
                computed,
            });
        }
        Ok(AgedView {
            dtype,
            has_base: head[6] & FLAG_BASE != 0,
            log_k,
            width,
            elements,
            step,
            rel_error,
            max_abs_error,
            base_hash,
            payload,
        })
    }

    /// The dtype of the block.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Elements of the block.
    pub fn elements(&self) -> u64 {
        self.elements
    }

    /// Whether the blob is a delta against a base.
    pub fn has_base(&self) -> bool {
        self.has_base
    }

    /// Whether the blob is in the log-relative mode (its values read back non-negative).
    pub fn is_log(&self) -> bool {
        self.log_k.is_some()
    }

    /// Measured relative Frobenius error of the block, stored when it was encoded.
    pub fn rel_error(&self) -> f32 {
        self.rel_error
    }

    /// Measured largest absolute error of one element.
    pub fn max_abs_error(&self) -> f32 {
        self.max_abs_error
    }

    /// Decodes into `out` (`elements × dtype size` bytes) over `base`, the reconstruction
    /// of the base block (required exactly when [`AgedView::has_base`]).
    ///
    /// # Errors
    /// [`AgedError::Mismatch`] for another dtype or length or a missing or extra base,
    /// [`AgedError::BaseMismatch`] for a base the blob was not made against,
    /// [`AgedError::Payload`] for a payload that does not decode.
    pub fn decode_into(
        &self,
        dtype: DType,
        base: Option<&[u8]>,
        out: &mut [u8],
    ) -> Result<(), AgedError> {
        let size = dtype.size();
        if dtype != self.dtype
            || (out.len() / size) as u64 != self.elements
            || !out.len().is_multiple_of(size)
        {
            return Err(AgedError::Mismatch {
                reason: format!(
                    "the blob holds {} elements of {}, the read wants {} bytes of {dtype}",
                    self.elements,
                    self.dtype,
                    out.len()
                ),
            });
        }
        match (self.has_base, base) {
            (true, Some(b)) if b.len() == out.len() => {
                let actual = XxHash3_64::oneshot(b);
                if actual != self.base_hash {
                    return Err(AgedError::BaseMismatch {
                        expected: self.base_hash,
                        actual,
                    });
                }
            }
            (false, None) => {}
            (has, b) => {
                return Err(AgedError::Mismatch {
                    reason: format!(
                        "the blob {} a base, the read gives {}",
                        if has { "needs" } else { "has no" },
                        b.map_or("none".to_string(), |b| format!("{} bytes", b.len()))
                    ),
                })
            }
        }
        let n = self.elements as usize;
        let mut words = vec![0u8; n * self.width];
        let Some(k) = self.log_k else {
            lossless::decode(word_dtype(self.width), self.payload, None, &mut words)
                .map_err(|source| AgedError::Payload { source })?;
            search::reconstruct(self.dtype, base, &words, self.width, self.step, out);
            return Ok(());
        };
        let bad_payload = |reason: String| AgedError::Mismatch { reason };
        let coded_len = self
            .payload
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or_else(|| {
                bad_payload("a log-mode payload shorter than its length field".into())
            })?;
        let coded = self.payload.get(4..4 + coded_len).ok_or_else(|| {
            bad_payload(format!("coded words of {coded_len} bytes past the payload"))
        })?;
        lossless::decode(word_dtype(self.width), coded, None, &mut words)
            .map_err(|source| AgedError::Payload { source })?;
        let words: Vec<u32> = words
            .chunks_exact(self.width)
            .map(|z| match self.width {
                1 => u32::from(z[0]),
                2 => u32::from(u16::from_le_bytes([z[0], z[1]])),
                _ => u32::from_le_bytes([z[0], z[1], z[2], z[3]]),
            })
            .collect();
        let escapes = &self.payload[4 + coded_len..];
        log::reconstruct(self.dtype, base, &words, k, escapes, out).map_err(|e| match e {
            log::LogDecodeError::Escapes { expected, found } => bad_payload(format!(
                "the escape codes need {expected} bytes of escaped values, the payload holds {found}"
            )),
            log::LogDecodeError::Word { index, word } => bad_payload(format!(
                "element {index}: word {word} is beyond the largest code"
            )),
        })
    }
}

/// The lossless codec's dtype for coded words of `width` bytes.
fn word_dtype(width: usize) -> DType {
    match width {
        1 => DType::U8,
        2 => DType::U16,
        _ => DType::U32,
    }
}

fn zigzag(q: i32) -> u32 {
    ((q << 1) ^ (q >> 31)) as u32
}

fn unzigzag(z: u32) -> i32 {
    ((z >> 1) as i32) ^ -((z & 1) as i32)
}
