//! The quantization step search and the one reconstruction both the encoder's error
//! measurement and the decoder use.

use crate::convert::{from_f32_into, to_f32, to_f32_into};
use crate::DType;

/// Elements converted at a time on the way to and from the dtype.
const CHUNK: usize = 1024;
/// Elements the step search measures on (a regular sample of the block); the chosen step
/// is then checked on every element.
const SAMPLE: usize = 1 << 15;
/// Halvings of the search interval (in log scale) on the sample, from a bracket of 2^±4
/// around the step uniform rounding noise would give.
const ROUNDS: usize = 10;
/// Smallest step tried, as a fraction of the largest delta: `q` stays below 2^23, exact in
/// an f32.
const FINEST: f32 = 1.0 / (1u32 << 22) as f32;

/// A step and the quantized deltas it gives.
pub(super) struct Found {
    pub(super) q: Vec<i32>,
    pub(super) step: f32,
    pub(super) rel_error: f32,
    pub(super) max_abs_error: f32,
    pub(super) max_zigzag: u32,
}

/// What one step gives on the elements measured.
struct Measure {
    err2: f64,
    max_abs: f32,
    max_zigzag: u32,
}

fn quant(d: f32, inv_step: f32) -> i32 {
    // Round half away from zero by a truncating cast (`f32::round` is a libm call on
    // baseline x86-64), and a multiply by the reciprocal instead of a division. Any
    // rounding would do: the encoder measures, and stores, the `q` it chose. The cast
    // saturates, and a NaN delta gives 0 (its error, NaN, fails the budget).
    let x = d * inv_step;
    ((x + 0.5f32.copysign(x)) as i32).clamp(-(1 << 30), 1 << 30)
}

/// The smallest code at or above `q` whose value `b + q · step` (computed as a read does) is
/// not negative: a block of non-negative values reads back non-negative (ADR 0027).
fn lift(b: f32, q: i32, step: f32) -> i32 {
    if b + q as f32 * step >= 0.0 {
        return q;
    }
    // Close to the answer in one move, then exact in f32 as the read computes it.
    let mut q = q.max(((-b / step).ceil() as i32).saturating_sub(1));
    while b + q as f32 * step < 0.0 && q < (1 << 30) {
        q += 1;
    }
    q
}

/// `dtype(b + q · step)`: the value a read returns (also what the encoder measures).
fn recon_chunk(dtype: DType, b: &[f32], q: &[i32], step: f32, scratch: &mut [f32], out: &mut [u8]) {
    for ((r, &bv), &qv) in scratch.iter_mut().zip(b).zip(q) {
        *r = bv + qv as f32 * step;
    }
    // The dtype is one of the floats `supports` admits and the lengths match.
    let _ = from_f32_into(dtype, scratch, out);
}

/// Measures `step` on the elements `t` and their bases `b` (a whole block, or a sample
/// gathered from it), filling `keep` with `q`.
fn measure(
    dtype: DType,
    t: &[f32],
    b: &[f32],
    step: f32,
    non_negative: bool,
    mut keep: Option<&mut Vec<i32>>,
) -> Measure {
    let size = dtype.size();
    let mut m = Measure {
        err2: 0.0,
        max_abs: 0.0,
        max_zigzag: 0,
    };
    let (mut qb, mut rb) = ([0i32; CHUNK], [0f32; CHUNK]);
    let mut bytes = [0u8; CHUNK * 4];
    let mut back = [0f32; CHUNK];
    let inv_step = 1.0 / step;
    for (tb, bb) in t.chunks(CHUNK).zip(b.chunks(CHUNK)) {
        let k = tb.len();
        for ((q, &tv), &bv) in qb[..k].iter_mut().zip(tb).zip(bb) {
            *q = quant(tv - bv, inv_step);
        }
        if non_negative {
            for (q, &bv) in qb[..k].iter_mut().zip(bb) {
                *q = lift(bv, *q, step);
            }
        }
        let back: &[f32] = if dtype == DType::F32 {
            // f32 holds the sum as computed: what a read returns, without the round trip.
            for ((r, &bv), &qv) in rb[..k].iter_mut().zip(&bb[..k]).zip(&qb[..k]) {
                *r = bv + qv as f32 * step;
            }
            &rb[..k]
        } else {
            recon_chunk(
                dtype,
                &bb[..k],
                &qb[..k],
                step,
                &mut rb[..k],
                &mut bytes[..k * size],
            );
            let _ = to_f32_into(dtype, &bytes[..k * size], &mut back[..k]);
            &back[..k]
        };
        for j in 0..k {
            let e = back[j] - tb[j];
            m.err2 += f64::from(e) * f64::from(e);
            m.max_abs = m.max_abs.max(e.abs());
            m.max_zigzag = m.max_zigzag.max(qb[j].unsigned_abs() * 2);
        }
        if let Some(q) = keep.as_deref_mut() {
            q.extend_from_slice(&qb[..k]);
        }
        if !m.err2.is_finite() {
            break;
        }
    }
    m
}

/// The largest step whose measured error is within `budget` (of the block's norm, and of its
/// distance from the base), with its `q`; `None` when no step is (zeros, non-finite values,
/// a budget below what the dtype can hold). A block whose values are all non-negative gets
/// codes whose values are too ([`lift`]).
pub(super) fn quantize(
    dtype: DType,
    data: &[u8],
    base: Option<&[u8]>,
    budget: &super::Budget,
) -> Option<Found> {
    let t = to_f32(dtype, data).ok()?;
    let n = t.len();
    let b = match base {
        Some(base) => to_f32(dtype, base).ok()?,
        None => vec![0f32; n],
    };
    let norm2: f64 = t.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    let non_negative = t.iter().all(|&x| x >= 0.0);
    let max_delta = t
        .iter()
        .zip(&b)
        .fold(0f32, |m, (&x, &y)| m.max((x - y).abs()));
    if !(norm2.is_finite() && norm2 > 0.0 && max_delta.is_finite()) {
        return None;
    }
    let delta2: f64 = t
        .iter()
        .zip(&b)
        .map(|(&x, &y)| f64::from(x - y) * f64::from(x - y))
        .sum();
    // The error allowed, squared: of the norm, and of the distance from the base.
    let limit = |norm2: f64, delta2: f64| {
        let of_norm = budget.of_norm * budget.of_norm * norm2;
        budget
            .of_delta
            .map_or(of_norm, |f| of_norm.min(f * f * delta2))
    };
    let allowed = limit(norm2, delta2);
    let found = |step: f32| -> Option<Found> {
        let mut q = Vec::with_capacity(n);
        let m = measure(dtype, &t, &b, step, non_negative, Some(&mut q));
        (m.err2 <= allowed).then(|| Found {
            q,
            step,
            rel_error: (m.err2 / norm2).sqrt() as f32,
            max_abs_error: m.max_abs,
            max_zigzag: m.max_zigzag,
        })
    };
    if max_delta == 0.0 {
        return found(1.0);
    }
    let stride = n.div_ceil(SAMPLE).max(1);
    // The sample, gathered once: the search measures it about twenty times.
    let ts: Vec<f32> = t.iter().step_by(stride).copied().collect();
    let bs: Vec<f32> = b.iter().step_by(stride).copied().collect();
    let sample_norm2: f64 = ts.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    let sample_delta2: f64 = ts
        .iter()
        .zip(&bs)
        .map(|(&x, &y)| f64::from(x - y) * f64::from(x - y))
        .sum();
    let sample_allowed = limit(sample_norm2, sample_delta2);
    let ok = |step: f32| measure(dtype, &ts, &bs, step, non_negative, None).err2 <= sample_allowed;
    // A step of 4x the largest delta rounds every delta to 0: the base itself.
    let coarse = max_delta * 4.0;
    if ok(coarse) {
        if let Some(f) = found(coarse) {
            return Some(f);
        }
    }
    // Uniform rounding with step s leaves an error of about s / sqrt(12) per element.
    let guess = ((allowed * 12.0 / n as f64).sqrt() as f32).max(f32::MIN_POSITIVE);
    let (finest, coarse_ln) = ((max_delta * FINEST).ln(), coarse.ln());
    let mut lo = (guess.ln() - 4.0 * std::f32::consts::LN_2).clamp(finest, coarse_ln);
    let mut hi = (guess.ln() + 4.0 * std::f32::consts::LN_2).clamp(finest, coarse_ln);
    // Widen the bracket until `lo` meets the budget and `hi` does not (or the ends).
    while hi < coarse_ln && ok(hi.exp()) {
        lo = hi;
        hi = (hi + 8.0 * std::f32::consts::LN_2).min(coarse_ln);
    }
    while lo > finest && !ok(lo.exp()) {
        hi = lo;
        lo = (lo - 8.0 * std::f32::consts::LN_2).max(finest);
    }
    for _ in 0..ROUNDS {
        let mid = 0.5 * (lo + hi);
        if ok(mid.exp()) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let mut step = lo.exp();
    for _ in 0..8 {
        if let Some(f) = found(step) {
            return Some(f);
        }
        step *= 0.8;
    }
    found(max_delta * FINEST)
}

/// Writes `dtype(b + q · step)` for the zigzag words `words` (`width` bytes each) into
/// `out`; `base` is the base's reconstruction (zeros without one). Lengths are the
/// caller's checks.
pub(super) fn reconstruct(
    dtype: DType,
    base: Option<&[u8]>,
    words: &[u8],
    width: usize,
    step: f32,
    out: &mut [u8],
) {
    let size = dtype.size();
    let (mut bb, mut qb, mut rb) = ([0f32; CHUNK], [0i32; CHUNK], [0f32; CHUNK]);
    for (c, (dst, w)) in out
        .chunks_mut(CHUNK * size)
        .zip(words.chunks(CHUNK * width))
        .enumerate()
    {
        let k = dst.len() / size;
        match base {
            Some(base) => {
                let src = &base[c * CHUNK * size..c * CHUNK * size + k * size];
                let _ = to_f32_into(dtype, src, &mut bb[..k]);
            }
            None => bb[..k].fill(0.0),
        }
        for (q, z) in qb[..k].iter_mut().zip(w.chunks_exact(width)) {
            let z = match width {
                1 => u32::from(z[0]),
                2 => u32::from(u16::from_le_bytes([z[0], z[1]])),
                _ => u32::from_le_bytes([z[0], z[1], z[2], z[3]]),
            };
            *q = super::unzigzag(z);
        }
        recon_chunk(dtype, &bb[..k], &qb[..k], step, &mut rb[..k], dst);
    }
}
