//! AVX2 kernels of the wide layout (32 lanes, 4 streams of 8 lanes): the parent module's
//! arithmetic, one stream's 8 lanes per register. They write the same bytes as the scalar
//! code (tested), so a stream decodes the same way on every CPU.

use std::arch::x86_64::*;

use super::{
    EncTables, JoinInto, Reader, Streams, Symbol, MASK, MAX_LANES, PROB_BITS, PROB_SCALE, RANS_L,
};
use crate::lossless::planes::{HEAD_BITS, TAIL_BITS};

/// For each refill mask (bit `k`: lane `k` needs a word), the word each lane takes from the
/// 8 at the stream's position: lane `k` takes word `popcount(mask & ((1 << k) - 1))`.
static REFILL: [[u32; 8]; 256] = refill_table();

/// For each emit mask (bit `k`: lane `k` emits its low 16 bits), a byte shuffle that puts
/// the emitted words, in lane order, in the top words of a register: stored just below
/// the stream's position they come out in decoder order.
static EMIT: [[u8; 16]; 256] = emit_table();

const fn refill_table() -> [[u32; 8]; 256] {
    let mut t = [[0u32; 8]; 256];
    let mut m = 0;
    while m < 256 {
        let (mut k, mut n) = (0, 0);
        while k < 8 {
            t[m][k] = n;
            n += (m >> k & 1) as u32;
            k += 1;
        }
        m += 1;
    }
    t
}

const fn emit_table() -> [[u8; 16]; 256] {
    let mut t = [[0x80u8; 16]; 256];
    let mut m = 0;
    while m < 256 {
        let mut slot = 8 - (m as u32).count_ones() as usize;
        let mut k = 0;
        while k < 8 {
            if m >> k & 1 == 1 {
                t[m][2 * slot] = 2 * k as u8;
                t[m][2 * slot + 1] = 2 * k as u8 + 1;
                slot += 1;
            }
            k += 1;
        }
        m += 1;
    }
    t
}

/// Decodes the `out.len() / 32` full steps of `out` (the first step's contexts are
/// `ctx[..32]`), starting from states `x` and the four `readers`. A step reads up to 8
/// words (16 bytes) of each stream at once; the last 16 bytes of each stream are read
/// from a zero-padded copy, so the kernel runs to the end however few words a stream
/// holds. It stops early, marking the reader overrun, when a stream has been read past
/// its end (corrupt data). Returns the steps decoded.
///
/// `table` holds `n_ctx` decode tables of `PROB_SCALE` slots. Contexts above `n_ctx - 1`
/// are clamped (the caller has refused them already; the clamp keeps every table load
/// inside the table whatever the input).
///
/// With `join` (10-bit symbols only), each step writes its 32 elements' whole words into
/// `join.out` (`planes::join_head`'s words, built from the head symbol and the same
/// element's bytes of `join.rest`) instead of their head symbols into `out`, so that the
/// head makes no pass of its own.
///
/// # Panics
/// If `readers` are not 4, the tables are shorter than `n_ctx` say, `ctx` is shorter than
/// `out`, or `join` comes with 8-bit symbols, with other than 1 or 3 planes, or with planes
/// or words shorter than `out`: the caller guarantees all of these.
///
/// With `GATHER`, table entries are read by `_mm256_i32gather_epi32`, else by eight scalar
/// loads: the same symbols, at a speed that depends on the CPU (`super::gather_pays`).
#[target_feature(enable = "avx2,popcnt")]
pub(super) fn decode_steps<S: Symbol, const GATHER: bool>(
    table: &[u32],
    n_ctx: usize,
    ctx: Option<&[u8]>,
    join: Option<JoinInto<'_>>,
    out: &mut [S],
    x: &mut [u32; MAX_LANES],
    readers: &mut [Reader<'_>],
) -> usize {
    match S::BITS {
        8 => decode_kernel::<S, 8, 20, GATHER>(table, n_ctx, ctx, join, out, x, readers),
        _ => decode_kernel::<S, 10, 21, GATHER>(table, n_ctx, ctx, join, out, x, readers),
    }
}

/// [`decode_steps`] with the entry's field positions as constants: the frequency at bit
/// `FB` (= `S::BITS`), the offset at bit `OB` (= `S::BITS + S::FREQ_BITS`).
#[target_feature(enable = "avx2,popcnt")]
fn decode_kernel<S: Symbol, const FB: i32, const OB: i32, const GATHER: bool>(
    table: &[u32],
    n_ctx: usize,
    ctx: Option<&[u8]>,
    join: Option<JoinInto<'_>>,
    out: &mut [S],
    x: &mut [u32; MAX_LANES],
    readers: &mut [Reader<'_>],
) -> usize {
    assert!(FB as u32 == S::BITS && OB as u32 == S::BITS + S::FREQ_BITS);
    assert!(S::BITS == 8 || S::BITS == 10 && size_of::<S>() == 2);
    let steps = out.len() / 32;
    assert!((1..=super::MAX_CONTEXTS).contains(&n_ctx) && table.len() >= n_ctx << PROB_BITS);
    assert!(readers.len() == 4);
    assert!(ctx.is_none_or(|c| c.len() >= 32 * steps));
    // The joined words' planes (1 or 3 of them) and bytes.
    let (rest, into, width) = match join {
        Some(j) => {
            let width = j.rest.len() + 1;
            assert!(S::BITS == 10 && (width == 2 || width == 4));
            assert!(j.rest.iter().all(|p| p.len() >= 32 * steps));
            assert!(j.out.len() >= width * 32 * steps);
            let mut rest = [std::ptr::null::<u8>(); 3];
            for (r, p) in rest.iter_mut().zip(j.rest) {
                *r = p.as_ptr();
            }
            (rest, j.out.as_mut_ptr(), width)
        }
        None => ([std::ptr::null(); 3], std::ptr::null_mut(), 0),
    };
    let low = _mm256_set1_epi32(MASK as i32);
    let sym_mask = _mm256_set1_epi32((1 << S::BITS) - 1);
    let freq_mask = _mm256_set1_epi32((1 << S::FREQ_BITS) - 1);
    let one = _mm256_set1_epi32(1);
    let l = _mm256_set1_epi32(RANS_L as i32);
    let top = _mm256_set1_epi32(n_ctx as i32 - 1);
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    // SAFETY: lanes 8g..8g + 8 of the 32 in `x` for g = 0..4.
    let [mut x0, mut x1, mut x2, mut x3] =
        [0, 1, 2, 3].map(|g| unsafe { _mm256_loadu_si256(x.as_ptr().add(8 * g).cast()) });
    let mut pos = [0usize; 4];
    // Stream g's bytes `..main[g]` are read in place, the rest (at most 16) from `tails[g]`,
    // which pads them with 16 zero bytes.
    let mut main = [0usize; 4];
    let mut ends = [0usize; 4];
    let mut words = [std::ptr::null::<u8>(); 4];
    let mut tails = [[0u8; 32]; 4];
    for (g, r) in readers.iter().enumerate() {
        pos[g] = r.pos;
        ends[g] = r.bytes.len() / 2;
        main[g] = r.bytes.len().saturating_sub(16);
        words[g] = r.bytes.as_ptr();
        let tail = &r.bytes[main[g]..];
        tails[g][..tail.len()].copy_from_slice(tail);
    }
    let table = table.as_ptr().cast::<i32>();
    // One step of stream g's 8 lanes from state `v` (step t): the new state and the
    // symbols, one per 32-bit lane.
    let lanes = |v: __m256i, g: usize, t: usize, pos: &mut [usize; 4]| -> (__m256i, __m256i) {
        let mut idx = _mm256_and_si256(v, low);
        if let Some(c) = ctx {
            // SAFETY: `c.len() >= 32 * steps` (asserted) and t < steps, so the 8 bytes at
            // 32t + 8g are inside `c`.
            let cv = unsafe { _mm_loadl_epi64(c.as_ptr().add(32 * t + 8 * g).cast()) };
            let cv = _mm256_min_epu32(_mm256_cvtepu8_epi32(cv), top);
            idx = _mm256_or_si256(idx, _mm256_slli_epi32::<12>(cv));
        }
        // Every index is `(x & MASK) | ctx << 12` with `ctx <= n_ctx - 1`, so below
        // `n_ctx << PROB_BITS <= table.len()` (asserted).
        let e = if GATHER {
            // SAFETY: the 8 indices of `idx` are inside `table` (above), 4-byte entries.
            unsafe { _mm256_i32gather_epi32::<4>(table, idx) }
        } else {
            // Eight scalar loads, not a gather: decoding is about 10 % faster this way on
            // AMD's Zen 1 and Zen 4, whose gather is microcoded (ADR 0004).
            // SAFETY: `ix` holds the 8 indices, each inside `table` (above).
            unsafe {
                let mut ix = [0i32; 8];
                _mm256_storeu_si256(ix.as_mut_ptr().cast(), idx);
                _mm256_setr_epi32(
                    *table.add(ix[0] as usize),
                    *table.add(ix[1] as usize),
                    *table.add(ix[2] as usize),
                    *table.add(ix[3] as usize),
                    *table.add(ix[4] as usize),
                    *table.add(ix[5] as usize),
                    *table.add(ix[6] as usize),
                    *table.add(ix[7] as usize),
                )
            }
        };
        let f = _mm256_and_si256(_mm256_srli_epi32::<FB>(e), freq_mask);
        let f = _mm256_add_epi32(f, one);
        let v = _mm256_add_epi32(
            _mm256_mullo_epi32(f, _mm256_srli_epi32::<12>(v)),
            _mm256_srli_epi32::<OB>(e),
        );
        // States stay below 2^31, so the signed compare is an unsigned one.
        let need = _mm256_cmpgt_epi32(l, v);
        let m = _mm256_movemask_ps(_mm256_castsi256_ps(need)) as usize & 0xFF;
        let at = 2 * pos[g];
        // SAFETY: the loop below runs a step only while `pos[g] <= ends[g]`, so
        // `at <= bytes.len()`. Below `main[g] = bytes.len() - 16` the 16 bytes at `at` are
        // inside `bytes`; from there on `at - main[g] <= 16` and the 16 bytes are inside
        // the 32 of `tails[g]`.
        let w = unsafe {
            let p = if at < main[g] {
                words[g].add(at)
            } else {
                tails[g].as_ptr().add(at - main[g])
            };
            _mm_loadu_si128(p.cast())
        };
        // SAFETY: `REFILL[m]` is 8 u32, 32 bytes; no alignment is needed.
        let perm = unsafe { _mm256_loadu_si256(REFILL[m].as_ptr().cast()) };
        let w = _mm256_permutevar8x32_epi32(_mm256_cvtepu16_epi32(w), perm);
        let refilled = _mm256_or_si256(_mm256_slli_epi32::<16>(v), w);
        pos[g] += m.count_ones() as usize;
        (
            _mm256_blendv_epi8(v, refilled, need),
            _mm256_and_si256(e, sym_mask),
        )
    };
    let dst = out.as_mut_ptr().cast::<u8>();
    let mut done = 0;
    for t in 0..steps {
        if pos.iter().zip(&ends).any(|(p, e)| p > e) {
            break;
        }
        done += 1;
        let (y0, s0) = lanes(x0, 0, t, &mut pos);
        let (y1, s1) = lanes(x1, 1, t, &mut pos);
        let (y2, s2) = lanes(x2, 2, t, &mut pos);
        let (y3, s3) = lanes(x3, 3, t, &mut pos);
        [x0, x1, x2, x3] = [y0, y1, y2, y3];
        if width == 4 {
            // SAFETY: the three planes hold at least 32 * steps bytes and `into` 128 *
            // steps (asserted), and t < steps.
            unsafe { store_words4([s0, s1, s2, s3], rest, into, t) };
            continue;
        }
        // Packing to 16 bits gives [a0-3 b0-3 a4-7 b4-7] in 64-bit units; to bytes then
        // [a0-3 b0-3 c0-3 d0-3 a4-7 b4-7 c4-7 d4-7] in 32-bit units.
        let ab = _mm256_packus_epi32(s0, s1);
        let cd = _mm256_packus_epi32(s2, s3);
        if S::BITS == 8 {
            let b = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), order);
            // SAFETY: t < steps = out.len() / 32 and symbols are bytes, so bytes
            // 32t..32t + 32 are inside `out`.
            unsafe { _mm256_storeu_si256(dst.add(32 * t).cast(), b) };
            continue;
        }
        // Elements 32t..32t + 16 and 32t + 16..32t + 32, as 16-bit lanes.
        let ab = _mm256_permute4x64_epi64::<0b11_01_10_00>(ab);
        let cd = _mm256_permute4x64_epi64::<0b11_01_10_00>(cd);
        if width == 2 {
            // SAFETY: the plane holds at least 32 * steps bytes and `into` 64 * steps
            // (asserted), and t < steps: bytes 32t..32t + 32 of the one, 64t..64t + 64 of
            // the other.
            unsafe {
                let tv = _mm256_loadu_si256(rest[0].add(32 * t).cast());
                let lo = join_words2(ab, _mm256_cvtepu8_epi16(_mm256_castsi256_si128(tv)));
                let hi = join_words2(cd, _mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(tv)));
                _mm256_storeu_si256(into.add(64 * t).cast(), lo);
                _mm256_storeu_si256(into.add(64 * t + 32).cast(), hi);
            }
            continue;
        }
        // SAFETY: t < steps = out.len() / 32 and symbols are 2 bytes (asserted), so
        // bytes 64t..64t + 64 are inside `out`.
        unsafe {
            _mm256_storeu_si256(dst.add(64 * t).cast(), ab);
            _mm256_storeu_si256(dst.add(64 * t + 32).cast(), cd);
        }
    }
    for (g, v) in [x0, x1, x2, x3].into_iter().enumerate() {
        // SAFETY: lanes 8g..8g + 8 of the 32 in `x` (g < 4).
        unsafe { _mm256_storeu_si256(x.as_mut_ptr().add(8 * g).cast(), v) };
    }
    for ((r, p), e) in readers.iter_mut().zip(pos).zip(ends) {
        r.pos = p;
        r.overrun |= p > e;
    }
    done
}

/// 16 words of a 2-byte float from 16 head symbols `h` and their tail bytes `t` (16-bit
/// lanes): `(h << TAIL_BITS | t).rotate_right(1)`, as `planes::join_head` builds them.
#[inline]
#[target_feature(enable = "avx2")]
fn join_words2(h: __m256i, t: __m256i) -> __m256i {
    const TAIL: i32 = TAIL_BITS as i32;
    let w = _mm256_or_si256(_mm256_slli_epi16::<TAIL>(h), t);
    _mm256_or_si256(_mm256_srli_epi16::<1>(w), _mm256_slli_epi16::<15>(w))
}

/// Writes step `t`'s 32 f32 words from the head symbols of its four lane groups `s` (32-bit
/// lanes, elements 32t + 8g..32t + 8g + 8) and the same elements' bytes of the three other
/// planes `rest`: `(h << 22 | a << 14 | b << 6 | c).rotate_right(1)`, as
/// `planes::join_head` builds them, at bytes 128t..128t + 128 of `words`.
///
/// # Safety
/// Bytes 32t..32t + 32 of each plane of `rest` and 128t..128t + 128 of `words` must be
/// inside their allocations.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn store_words4(s: [__m256i; 4], rest: [*const u8; 3], words: *mut u8, t: usize) {
    const A: i32 = (32 - HEAD_BITS) as i32;
    const B: i32 = A - 8;
    const TAIL: i32 = TAIL_BITS as i32;
    for (g, h) in s.into_iter().enumerate() {
        let at = 32 * t + 8 * g;
        // SAFETY: bytes at..at + 8 of each plane and 4at..4at + 32 of `words` are inside
        // the ranges the caller vouches for.
        unsafe {
            let byte = |p: *const u8| _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.add(at).cast()));
            let w = _mm256_or_si256(
                _mm256_or_si256(
                    _mm256_slli_epi32::<A>(h),
                    _mm256_slli_epi32::<B>(byte(rest[0])),
                ),
                _mm256_or_si256(_mm256_slli_epi32::<TAIL>(byte(rest[1])), byte(rest[2])),
            );
            let w = _mm256_or_si256(_mm256_srli_epi32::<1>(w), _mm256_slli_epi32::<31>(w));
            _mm256_storeu_si256(words.add(4 * at).cast(), w);
        }
    }
}

/// Encodes the `plane.len() / 32` full steps of `plane` in reverse (step `t`'s contexts
/// are `ctx[32t..32t + 32]`) into the four streams of `st`, from states `x`.
///
/// Contexts above `n_ctx - 1` are clamped, as in [`decode_steps`].
///
/// Returns `false`, leaving the states and streams half done, if a stream runs out of
/// room (the caller then starts again with regions of the worst-case size).
///
/// # Panics
/// If the tables are shorter than `n_ctx` say, `ctx` is shorter than `plane`, or the
/// streams' regions are not inside `st.bytes`: the caller guarantees all of these.
#[target_feature(enable = "avx2,popcnt")]
pub(super) fn encode_steps<S: Symbol>(
    tables: &EncTables,
    n_ctx: usize,
    plane: &[S],
    ctx: Option<&[u8]>,
    x: &mut [u32; MAX_LANES],
    st: &mut Streams<'_>,
) -> bool {
    match S::BITS {
        8 => encode_kernel::<S, 8>(tables, n_ctx, plane, ctx, x, st),
        _ => encode_kernel::<S, 10>(tables, n_ctx, plane, ctx, x, st),
    }
}

/// [`encode_steps`] with `S::BITS` as the constant `SB`.
#[target_feature(enable = "avx2,popcnt")]
fn encode_kernel<S: Symbol, const SB: i32>(
    tables: &EncTables,
    n_ctx: usize,
    plane: &[S],
    ctx: Option<&[u8]>,
    x: &mut [u32; MAX_LANES],
    st: &mut Streams<'_>,
) -> bool {
    assert!(SB as u32 == S::BITS);
    assert!(S::BITS == 8 || S::BITS == 10 && size_of::<S>() == 2);
    let steps = plane.len() / 32;
    let entries = n_ctx << S::BITS;
    assert!((1..=super::MAX_CONTEXTS).contains(&n_ctx));
    assert!(tables.sym.len() >= entries);
    assert!(ctx.is_none_or(|c| c.len() >= 32 * steps));
    assert!(st.bytes.len() >= 2 * 4 * st.cap && st.pos.iter().all(|&p| p <= st.cap));
    let low = _mm256_set1_epi32(MASK as i32);
    let low16 = _mm256_set1_epi32(0xFFFF);
    let freq_mask = _mm256_set1_epi32(0x1FFF);
    let one = _mm256_set1_epi32(1);
    let zero = _mm256_setzero_si256();
    let two = _mm256_set1_ps(2.0);
    let scale = _mm256_set1_epi32(PROB_SCALE as i32);
    let top = _mm256_set1_epi32(n_ctx as i32 - 1);
    let sym_mask = _mm256_set1_epi32((1 << S::BITS) - 1);
    // SAFETY: lanes 8g..8g + 8 of the 32 in `x` for g = 0..4.
    let [mut x0, mut x1, mut x2, mut x3] =
        [0, 1, 2, 3].map(|g| unsafe { _mm256_loadu_si256(x.as_ptr().add(8 * g).cast()) });
    let sym = tables.sym.as_ptr().cast::<i32>();
    let src = plane.as_ptr().cast::<u8>();
    let words = st.bytes.as_mut_ptr();
    let cap = st.cap;
    let mut pos = st.pos;
    // One step of stream g's 8 lanes, state `v`, symbols of step t.
    let lanes = |v: __m256i, g: usize, t: usize, pos: &mut [usize; 4]| -> __m256i {
        let mut idx = if S::BITS == 8 {
            // SAFETY: t < steps = plane.len() / 32 and symbols are bytes, so the 8 bytes
            // at 32t + 8g are inside `plane`.
            _mm256_cvtepu8_epi32(unsafe { _mm_loadl_epi64(src.add(32 * t + 8 * g).cast()) })
        } else {
            // SAFETY: as above with 2-byte symbols (asserted): bytes 64t + 16g..+16.
            let v = unsafe { _mm_loadu_si128(src.add(64 * t + 16 * g).cast()) };
            _mm256_and_si256(_mm256_cvtepu16_epi32(v), sym_mask)
        };
        if let Some(c) = ctx {
            // SAFETY: `c.len() >= 32 * steps` (asserted), so the 8 bytes at 32t + 8g are
            // inside `c`.
            let cv = unsafe { _mm_loadl_epi64(c.as_ptr().add(32 * t + 8 * g).cast()) };
            let cv = _mm256_min_epu32(_mm256_cvtepu8_epi32(cv), top);
            idx = _mm256_or_si256(idx, _mm256_slli_epi32::<SB>(cv));
        }
        // SAFETY: every index is `symbol | ctx << S::BITS` with `symbol < 2^S::BITS`
        // (masked) and `ctx <= n_ctx - 1`, below `n_ctx << S::BITS`, which the table
        // reaches (asserted).
        let p = unsafe { _mm256_i32gather_epi32::<4>(sym, idx) };
        let f = _mm256_and_si256(p, freq_mask);
        let start = _mm256_and_si256(_mm256_srli_epi32::<13>(p), low);
        let x_max = _mm256_sub_epi32(_mm256_slli_epi32::<19>(f), one);
        // States and `x_max - 1` are below 2^31: a signed compare is right.
        let emit = _mm256_cmpgt_epi32(v, x_max);
        let m = _mm256_movemask_ps(_mm256_castsi256_ps(emit)) as usize & 0xFF;
        let w = _mm256_and_si256(v, low16);
        let w = _mm256_permute4x64_epi64::<0b1000>(_mm256_packus_epi32(w, w));
        // SAFETY: `EMIT[m]` is 16 bytes; no alignment is needed.
        let shuffle = unsafe { _mm_loadu_si128(EMIT[m].as_ptr().cast()) };
        let w = _mm_shuffle_epi8(_mm256_castsi256_si128(w), shuffle);
        // SAFETY: the loop below runs a step only while every `pos[g] >= 8`, and
        // `pos[g] <= cap` (asserted, and it only decreases), so the 8 words below it are
        // inside stream g's region, words `g * cap..(g + 1) * cap` of `st.bytes`
        // (asserted long enough).
        unsafe { _mm_storeu_si128(words.add(2 * (g * cap + pos[g] - 8)).cast(), w) };
        pos[g] -= m.count_ones() as usize;
        let v = _mm256_blendv_epi8(v, _mm256_srli_epi32::<16>(v), emit);
        // q = v / f. Now v < 2^19 f, so q < 2^19: a float estimate from a reciprocal
        // refined by one Newton step (relative error below 2^-21) is within 0.32 of v / f,
        // so its floor is off by at most one, which the remainder corrects. The result is
        // exact, whatever the CPU's `rcp` approximation.
        let ff = _mm256_cvtepi32_ps(f);
        let r = _mm256_rcp_ps(ff);
        let r = _mm256_mul_ps(r, _mm256_sub_ps(two, _mm256_mul_ps(ff, r)));
        let q = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_cvtepi32_ps(v), r));
        let rem = _mm256_sub_epi32(v, _mm256_mullo_epi32(q, f));
        let q = _mm256_add_epi32(q, _mm256_cmpgt_epi32(zero, rem));
        let q = _mm256_sub_epi32(q, _mm256_cmpgt_epi32(rem, _mm256_sub_epi32(f, one)));
        // x = v + start + q * (SCALE - f) = q * SCALE + v % f + start.
        let q_scale = _mm256_mullo_epi32(q, _mm256_sub_epi32(scale, f));
        _mm256_add_epi32(_mm256_add_epi32(v, start), q_scale)
    };
    let mut room = true;
    for t in (0..steps).rev() {
        if pos.iter().any(|&p| p < 8) {
            room = false;
            break;
        }
        x0 = lanes(x0, 0, t, &mut pos);
        x1 = lanes(x1, 1, t, &mut pos);
        x2 = lanes(x2, 2, t, &mut pos);
        x3 = lanes(x3, 3, t, &mut pos);
    }
    for (g, v) in [x0, x1, x2, x3].into_iter().enumerate() {
        // SAFETY: lanes 8g..8g + 8 of the 32 in `x` (g < 4).
        unsafe { _mm256_storeu_si256(x.as_mut_ptr().add(8 * g).cast(), v) };
    }
    st.pos = pos;
    room
}
