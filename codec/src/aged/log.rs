//! The log-relative mode of aged blocks (flag bit 1; ADR 0027): for blocks whose values are
//! all non-negative (Adam's second moments, variances), a relative error per element and a
//! reconstruction that can never leave the domain.
//!
//! Each element `t` is coded against the base's reconstruction `b` (1.0 for every element of
//! a block without base) as `q = round(2^k · (log2 t − log2 b))`, and read back as
//! `dtype(b · 2^(q / 2^k))`, a product of non-negative numbers: never negative, never NaN.
//! The step in the log2 domain is `2^-k` (`k` in `0..=`[`MAX_K`]); each element's relative
//! error is at most `2^(2^-k / 2) − 1` before the rounding to the dtype. Two values have
//! codes of their own: 0 for an element that is zero (read back as +0), 1 for an element
//! stored exactly in the escape list (a positive value over a base of zero, or one whose
//! code would not read back within the budget). The words are `0`, `1` or `2 + zigzag(q)`.
//!
//! Payload: `u32` length `L` of the coded words, `L` bytes of [`crate::lossless::encode`]
//! of the words (u8, u16 or u32), then the escaped values, raw, in element order. The
//! power-of-two table is built from square roots in `f64`, correctly rounded on every
//! platform, and each value is one `f64` product rounded once: encoder and decoder compute
//! the same bits everywhere (WebAssembly included).

use crate::convert::{from_f32_into, to_f32, to_f32_into};
use crate::DType;

/// The finest step: `2^-10` in log2, a relative step of 0.07 %.
pub(crate) const MAX_K: u32 = 10;
/// Largest `|q|` a word may carry (keeps `2 + zigzag(q)` inside a `u32`).
const MAX_Q: i64 = 1 << 29;
/// Elements converted at a time.
const CHUNK: usize = 1024;

/// `2^(j / 2^k)` for `j` in `0..2^k`.
pub(crate) fn pow2_table(k: u32) -> Vec<f64> {
    // roots[i] = 2^(2^-i): 2, sqrt 2, sqrt sqrt 2, ...
    let mut roots = vec![2.0f64];
    for i in 1..=k as usize {
        let r = roots[i - 1].sqrt();
        roots.push(r);
    }
    (0..1usize << k)
        .map(|j| {
            let mut x = 1.0f64;
            for m in 0..k {
                if j & (1 << m) != 0 {
                    // bit m of j stands for 2^(2^m / 2^k) = 2^(2^-(k - m))
                    x *= roots[(k - m) as usize];
                }
            }
            x
        })
        .collect()
}

/// `2^e` for an exponent clamped to what an `f64` holds (0 or infinity beyond).
fn pow2i(e: i64) -> f64 {
    if e < -1022 {
        0.0
    } else if e > 1023 {
        f64::INFINITY
    } else {
        f64::from_bits(((e + 1023) as u64) << 52)
    }
}

/// The value code `q` gives over base value `b` (before the rounding to the dtype): never
/// negative and never NaN, whatever the base (a base that is not above zero gives 0; the
/// encoder escapes the elements over such bases).
fn value(b: f32, q: i64, k: u32, table: &[f64]) -> f32 {
    let int = q >> k;
    let frac = (q & ((1 << k) - 1)) as usize;
    let p = table[frac] * pow2i(int);
    if b.is_nan() || b <= 0.0 || p == 0.0 {
        return 0.0;
    }
    (f64::from(b) * p) as f32
}

/// The codes of a block and what they are worth.
pub(super) struct LogFound {
    pub(super) words: Vec<u32>,
    pub(super) escapes: Vec<u8>,
    pub(super) k: u32,
    pub(super) rel_error: f32,
    pub(super) max_abs_error: f32,
    pub(super) max_elem_rel: f32,
}

/// The coarsest step whose measured largest relative error of an element is within
/// `max_rel`, with its codes; `None` when the block has a negative or non-finite value, is
/// all zeros, or no step up to [`MAX_K`] meets the budget.
pub(super) fn quantize(
    dtype: DType,
    data: &[u8],
    base: Option<&[u8]>,
    max_rel: f64,
) -> Option<LogFound> {
    let t = to_f32(dtype, data).ok()?;
    if t.iter().any(|&x| !(x.is_finite() && x >= 0.0)) || t.iter().all(|&x| x == 0.0) {
        return None;
    }
    let b = match base {
        Some(base) => to_f32(dtype, base).ok()?,
        None => vec![1.0f32; t.len()],
    };
    // Uniform rounding in log2 with step 2^-k leaves at most half a step.
    let predicted = |k: u32| 2f64.powf(0.5 / f64::from(1u32 << k)) - 1.0;
    let mut k = (0..=MAX_K).find(|&k| predicted(k) <= 0.9 * max_rel)?;
    loop {
        let found = code(dtype, &t, &b, k, max_rel);
        if f64::from(found.max_elem_rel) <= max_rel {
            return Some(found);
        }
        if k == MAX_K {
            return None;
        }
        k += 1;
    }
}

/// Codes every element at step `2^-k`; an element whose code would read back beyond
/// `max_rel` (or not finite) is escaped.
fn code(dtype: DType, t: &[f32], b: &[f32], k: u32, max_rel: f64) -> LogFound {
    let size = dtype.size();
    let table = pow2_table(k);
    let scale = f64::from(1u32 << k);
    let mut words = Vec::with_capacity(t.len());
    let mut escapes = Vec::new();
    let (mut err2, mut norm2, mut max_abs, mut max_rel_seen) = (0f64, 0f64, 0f32, 0f32);
    let (mut vals, mut bytes, mut back) = ([0f32; 1], [0u8; 8], [0f32; 1]);
    for (&x, &bv) in t.iter().zip(b) {
        norm2 += f64::from(x) * f64::from(x);
        if x == 0.0 {
            words.push(0);
            continue;
        }
        let mut coded = None;
        if bv > 0.0 && bv.is_finite() {
            let l = (f64::from(x).log2() - f64::from(bv).log2()) * scale;
            let q = (l.round() as i64).clamp(-MAX_Q, MAX_Q);
            vals[0] = value(bv, q, k, &table);
            // Round to the dtype and back, as a read does.
            let _ = from_f32_into(dtype, &vals, &mut bytes[..size]);
            let _ = to_f32_into(dtype, &bytes[..size], &mut back);
            let r = back[0];
            let rel = f64::from((r - x).abs()) / f64::from(x);
            if r.is_finite() && r >= 0.0 && rel <= max_rel {
                coded = Some((q, r));
            }
        }
        match coded {
            Some((q, r)) => {
                let z = ((q << 1) ^ (q >> 63)) as u32;
                words.push(2 + z);
                let e = r - x;
                err2 += f64::from(e) * f64::from(e);
                max_abs = max_abs.max(e.abs());
                max_rel_seen = max_rel_seen.max(e.abs() / x);
            }
            None => {
                words.push(1);
                vals[0] = x;
                let _ = from_f32_into(dtype, &vals, &mut bytes[..size]);
                escapes.extend_from_slice(&bytes[..size]);
            }
        }
    }
    LogFound {
        words,
        escapes,
        k,
        rel_error: if norm2 > 0.0 {
            (err2 / norm2).sqrt() as f32
        } else {
            0.0
        },
        max_abs_error: max_abs,
        max_elem_rel: max_rel_seen,
    }
}

/// Why a log-mode payload cannot be read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum LogDecodeError {
    /// The escape list has another length than the escape codes say.
    Escapes { expected: usize, found: usize },
    /// A word above the largest code.
    Word { index: usize, word: u32 },
}

/// Writes the values of `words` (decoded, one per element) over `base` (ones without) at
/// step `2^-k` into `out`, the escaped ones from `escapes`.
pub(super) fn reconstruct(
    dtype: DType,
    base: Option<&[u8]>,
    words: &[u32],
    k: u32,
    escapes: &[u8],
    out: &mut [u8],
) -> Result<(), LogDecodeError> {
    let size = dtype.size();
    let expected = words.iter().filter(|&&w| w == 1).count() * size;
    if escapes.len() != expected {
        return Err(LogDecodeError::Escapes {
            expected,
            found: escapes.len(),
        });
    }
    let table = pow2_table(k);
    let (mut bb, mut rb) = ([0f32; CHUNK], [0f32; CHUNK]);
    let mut esc = escapes.chunks_exact(size);
    for (c, (dst, w)) in out
        .chunks_mut(CHUNK * size)
        .zip(words.chunks(CHUNK))
        .enumerate()
    {
        let n = dst.len() / size;
        match base {
            Some(base) => {
                let src = &base[c * CHUNK * size..c * CHUNK * size + n * size];
                let _ = to_f32_into(dtype, src, &mut bb[..n]);
            }
            None => bb[..n].fill(1.0),
        }
        let mut escaped = Vec::new();
        for (j, &word) in w.iter().enumerate() {
            rb[j] = match word {
                0 => 0.0,
                1 => {
                    escaped.push(j);
                    0.0
                }
                z => {
                    let z = z - 2;
                    let q = i64::from((z >> 1) as i32 ^ -((z & 1) as i32));
                    if q.abs() > MAX_Q {
                        return Err(LogDecodeError::Word {
                            index: c * CHUNK + j,
                            word,
                        });
                    }
                    value(bb[j], q, k, &table)
                }
            };
        }
        let _ = from_f32_into(dtype, &rb[..n], dst);
        for j in escaped {
            if let Some(raw) = esc.next() {
                dst[j * size..(j + 1) * size].copy_from_slice(raw);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_powers_of_two() {
        for k in 0..=MAX_K {
            let t = pow2_table(k);
            assert_eq!(t.len(), 1 << k);
            for (j, &x) in t.iter().enumerate() {
                let want = 2f64.powf(j as f64 / f64::from(1u32 << k));
                assert!((x - want).abs() <= 4.0 * f64::EPSILON * want, "k {k} j {j}");
            }
        }
    }

    #[test]
    fn values_are_products_of_non_negatives() {
        let table = pow2_table(3);
        for q in [-(MAX_Q), -1000, -9, -1, 0, 1, 7, 8, 9, 1000, MAX_Q] {
            for b in [0.0f32, 1e-38, 0.5, 3.0, f32::MAX] {
                let v = value(b, q, 3, &table);
                assert!(v >= 0.0 && !v.is_nan(), "b {b} q {q}: {v}");
            }
        }
    }
}
