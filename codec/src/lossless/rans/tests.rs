use super::*;
use crate::testing::SplitMix64;
use proptest::prelude::*;

/// The kernels this machine runs: scalar, and AVX2 with either table read where the CPU
/// has it.
fn kernels() -> Vec<Kernel> {
    let mut k = vec![Kernel::Scalar];
    #[cfg(target_arch = "x86_64")]
    if Kernel::detect() != Kernel::Scalar {
        k.extend([false, true].map(|gather| Kernel::Avx2 { gather }));
    }
    k
}

fn model<S: Symbol>(hists: &[Vec<u32>]) -> Model {
    Model::new::<S>(hists).expect("model")
}

/// Encodes with every kernel (the bytes must be the same), decodes with every kernel
/// (the plane must come back), returns the stream.
fn round_trip_with<S: Symbol>(
    plane: &[S],
    layout: Layout,
    ctx: Contexts<'_>,
    model: &Model,
) -> Vec<u8> {
    let mut streams = kernels().into_iter().map(|k| {
        let mut out = Vec::new();
        encode_with(k, layout, plane, ctx, model, &mut out);
        out
    });
    let first = streams.next().unwrap_or_default();
    for other in streams {
        assert!(other == first, "kernels encode differently");
    }
    for k in kernels() {
        let mut back = vec![S::from_index(5); plane.len()];
        decode_with(
            k,
            &first,
            0,
            ctx,
            S::BITS,
            &mut back,
            None,
            &mut Vec::new(),
            true,
        )
        .expect("decode");
        assert!(back == plane, "{k:?} decodes differently");
    }
    first
}

/// Round trip in both layouts; the size of the default one, which must be close to the
/// estimate.
fn round_trip<S: Symbol>(plane: &[S]) -> usize {
    let m = model::<S>(&[histogram(plane)]);
    let other = match Layout::for_len(plane.len()) {
        Layout::Narrow => Layout::Wide,
        Layout::Wide => Layout::Narrow,
    };
    round_trip_with(plane, other, Contexts::Order0, &m);
    let size = round_trip_with(plane, Layout::for_len(plane.len()), Contexts::Order0, &m).len();
    assert!(size <= m.bytes() + 64, "{size} vs estimate {}", m.bytes());
    size
}

/// Round trip with contexts in both layouts; the size of the default one.
fn round_trip_ctx<S: Symbol>(plane: &[S], ctx: &[u8], n: usize) -> usize {
    let m = model::<S>(&histograms(plane, ctx, n));
    let map = ContextMap::new(ctx.to_vec());
    let ctx = &map;
    round_trip_with(plane, Layout::Wide, Contexts::Given(ctx), &m);
    round_trip_with(plane, Layout::Narrow, Contexts::Given(ctx), &m);
    let layout = Layout::for_len(plane.len());
    let size = round_trip_with(plane, layout, Contexts::Given(ctx), &m).len();
    assert!(size <= m.bytes() + 64, "{size} vs estimate {}", m.bytes());
    size
}

/// `n` uniform random words from [`SplitMix64`], for test data.
fn noise(n: usize, seed: u64) -> Vec<u32> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| (rng.next_u64() >> 32) as u32).collect()
}

#[test]
fn skewed_plane_codes_near_entropy() {
    let plane: Vec<u8> = (0..100_000u32)
        .map(|i| if i % 10 == 0 { (i % 7) as u8 } else { 120 })
        .collect();
    let size = round_trip(&plane);
    assert!(size < plane.len() / 3);
}

#[test]
fn contexts_that_predict_the_symbol_code_to_almost_nothing() {
    // The symbol is a function of the context: each context has one symbol (freq 4096).
    let ctx: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 5) as u8).collect();
    let plane: Vec<u8> = ctx.iter().map(|&c| c * 40 + 1).collect();
    let with = round_trip_ctx(&plane, &ctx, 5);
    let without = round_trip(&plane);
    assert!(with < 400, "{with}");
    assert!(without > 10_000, "{without}");
}

#[test]
fn large_planes_are_identical_across_kernels() {
    // Skewed (an exponent plane), near-uniform (a mantissa plane) and sparse (a delta),
    // at lengths that leave every possible partial last step.
    for (seed, len) in [
        (1, 300_000),
        (2, 65_537),
        (3, 16_384 + 31),
        (4, 40_000 + 17),
    ] {
        let r = noise(len, seed);
        let skewed: Vec<u8> = r
            .iter()
            .map(|&v| 120 + (v % 64).trailing_zeros() as u8)
            .collect();
        let uniform: Vec<u8> = r.iter().map(|&v| (v >> 8) as u8).collect();
        let sparse: Vec<u8> = r
            .iter()
            .map(|&v| if v % 100 == 0 { (v >> 24) as u8 } else { 0 })
            .collect();
        let ctx: Vec<u8> = r.iter().map(|&v| (v >> 28) as u8).collect();
        for plane in [&skewed, &uniform, &sparse] {
            round_trip(plane);
            round_trip_ctx(plane, &ctx, 16);
        }
        // 10-bit symbols: a joint exponent and top mantissa bits, and all 1024 values.
        let head: Vec<u16> = r
            .iter()
            .map(|&v| (120 + (v % 64).trailing_zeros() as u16) << 2 | (v >> 30) as u16)
            .collect();
        let wide: Vec<u16> = r.iter().map(|&v| (v >> 7) as u16 & 0x3FF).collect();
        for plane in [&head, &wide] {
            round_trip(plane);
            round_trip_ctx(plane, &ctx, 16);
        }
    }
}

#[test]
fn a_context_with_one_symbol_round_trips() {
    // Frequency 4096: the state never changes and no word is ever emitted.
    let plane = vec![7u8; 50_000];
    let size = round_trip(&plane);
    assert!(size < 250, "{size}");
    let ctx: Vec<u8> = (0..50_000u32).map(|i| (i % 3) as u8).collect();
    let plane: Vec<u8> = ctx
        .iter()
        .map(|&c| if c == 0 { 9 } else { c * 50 + (c & 1) })
        .collect();
    round_trip_ctx(&plane, &ctx, 3);
}

#[test]
fn streams_that_outgrow_the_estimate_are_encoded_again() {
    // A model built for a plane of zeros (with every byte present once) estimates a few
    // bytes; coding near-random bytes with it needs about 12 bits a symbol, far more than
    // the regions sized from the estimate, so the encoder starts again at the worst case.
    let mut skewed = vec![1u32; 256];
    skewed[0] = 1_000_000;
    let m = model::<u8>(&[skewed]);
    for len in [100, 5000, 40_000] {
        let plane: Vec<u8> = noise(len, 7).iter().map(|&v| (v >> 9) as u8).collect();
        for layout in [Layout::Narrow, Layout::Wide] {
            let out = round_trip_with(&plane, layout, Contexts::Order0, &m);
            assert!(out.len() > len, "{len}: {}", out.len());
        }
    }
}

#[test]
fn ten_bit_symbols_cap_frequencies_at_half_the_scale() {
    // One symbol alone cannot be modelled with 10-bit symbols (it would need the whole
    // scale); with a second one it can, each at most 2^11.
    assert!(Model::new::<u16>(&[histogram(&[3u16; 100])]).is_none());
    let plane: Vec<u16> = (0..60_000u32)
        .map(|i| if i % 100 == 0 { 900 } else { 3 })
        .collect();
    let m = model::<u16>(&[histogram(&plane)]);
    assert!(m.freqs[0].iter().all(|&f| f <= 2048));
    round_trip(&plane);
}

#[test]
fn unused_contexts_and_out_of_range_are_errors() {
    let plane: Vec<u8> = (0..1000u32).map(|i| (i % 3) as u8).collect();
    let ctx = vec![1u8; plane.len()];
    let m = model::<u8>(&histograms(&plane, &ctx, 3));
    let mut out = Vec::new();
    let map = ContextMap::new(ctx.clone());
    encode(&plane, Contexts::Given(&map), &m, &mut out);
    let (wrong, beyond) = (
        ContextMap::new(vec![0u8; plane.len()]),
        ContextMap::new(vec![3u8; plane.len()]),
    );
    let t = &mut Vec::new();
    let mut back = vec![0u8; plane.len()];
    assert!(
        decode(&out, 0, Contexts::Given(&wrong), 8, &mut back, t, true).is_err(),
        "context 0 is unused"
    );
    assert!(
        decode(&out, 0, Contexts::Given(&beyond), 8, &mut back, t, true).is_err(),
        "context 3 does not exist"
    );
    assert!(
        decode(&out, 0, Contexts::Given(&map), 1, &mut back, t, true).is_err(),
        "symbol 2 is too wide for a 1-bit plane"
    );
    decode(&out, 0, Contexts::Given(&map), 2, &mut back, t, true).unwrap();
    assert_eq!(back, plane);
    // Bucketized maps (contexts `clamp(e - lo, 0, count - 1)`, which contexts occur found
    // only when some context of the map has no table): exponents 11 with lo 10 give
    // context 1 everywhere, which decodes though contexts 0 and 2 have no table; one
    // element at context 0 or 2 is refused.
    let exps = vec![11u8; plane.len()];
    let ones = ContextMap::bucketized(&exps, 10, 3);
    back.fill(0);
    decode(&out, 0, Contexts::Given(&ones), 8, &mut back, t, true).unwrap();
    assert_eq!(back, plane);
    for e in [10u8, 12, 200] {
        let mut exps = exps.clone();
        exps[500] = e;
        let map = ContextMap::bucketized(&exps, 10, 3);
        assert!(
            decode(&out, 0, Contexts::Given(&map), 8, &mut back, t, true).is_err(),
            "exponent {e}: a context without a table"
        );
    }
    let beyond = ContextMap::bucketized(&exps, 0, 16);
    assert!(
        decode(&out, 0, Contexts::Given(&beyond), 8, &mut back, t, true).is_err(),
        "context 11 does not exist"
    );
}

#[test]
fn wide_streams_fail_when_corrupt() {
    let plane: Vec<u8> = noise(40_000, 9).iter().map(|&v| (v % 23) as u8).collect();
    let m = model::<u8>(&[histogram(&plane)]);
    let mut enc = Vec::new();
    encode(&plane, Contexts::Order0, &m, &mut enc);
    let mut back = vec![0u8; plane.len()];
    let mut table = Vec::new();
    let mut w = BitWriter {
        out: &mut table,
        acc: 0,
        held: 0,
    };
    write_table(&m.counts[0], &mut w);
    w.finish();
    for k in kernels() {
        let dec = |src: &[u8], back: &mut [u8]| {
            decode_with(
                k,
                src,
                0,
                Contexts::Order0,
                8,
                back,
                None,
                &mut Vec::new(),
                true,
            )
        };
        assert!(dec(&enc[..enc.len() - 2], &mut back).is_err());
        let mut long = enc.clone();
        long.extend_from_slice(&[0; 2]);
        assert!(dec(&long, &mut back).is_err());
        // Flip one bit of the last word: the final states no longer match.
        let mut flipped = enc.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x10;
        assert!(dec(&flipped, &mut back).is_err());
        // A layout this version does not know: the byte after the count and the table.
        let mut unknown = enc.clone();
        unknown[1 + table.len()] = 2;
        assert!(dec(&unknown, &mut back).is_err());
        dec(&enc, &mut back).unwrap();
        assert_eq!(back, plane);
    }
}

#[test]
fn corrupt_streams_fail() {
    let plane: Vec<u8> = (0..5000u32).map(|i| (i * i % 13) as u8).collect();
    let m = model::<u8>(&[histogram(&plane)]);
    let mut enc = Vec::new();
    encode(&plane, Contexts::Order0, &m, &mut enc);
    let mut back = vec![0u8; plane.len()];
    let dec = |src: &[u8], back: &mut [u8]| {
        decode(src, 0, Contexts::Order0, 8, back, &mut Vec::new(), true)
    };
    assert!(dec(&enc[..enc.len() - 4], &mut back).is_err());
    let mut long = enc.clone();
    long.extend_from_slice(&[0; 4]);
    assert!(dec(&long, &mut back).is_err());
    assert!(dec(&enc[..20], &mut back).is_err());
    let mut bad = enc.clone();
    bad[0] = 0;
    assert!(dec(&bad, &mut back).is_err(), "zero contexts");
    bad[0] = 17;
    assert!(dec(&bad, &mut back).is_err(), "too many contexts");
}

#[test]
fn the_quick_estimate_is_close_for_any_counts() {
    // Counts up to 2^32 - 1; the estimate is within a percent of the entropy.
    for scale in [1u64, 1000, 1_000_000, 4_000_000_000] {
        let hist: Vec<u32> = (0..256u64)
            .map(|s| (scale * (s + 1) / 256) as u32)
            .collect();
        let total: f64 = hist.iter().map(|&c| f64::from(c)).sum();
        let entropy: f64 = hist
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| -f64::from(c) * (f64::from(c) / total).log2())
            .sum::<f64>()
            / 8.0;
        let e = estimate(&[hist]) as f64;
        assert!(
            (e - entropy).abs() <= entropy * 0.01 + 400.0,
            "{scale}: {e} vs {entropy}"
        );
    }
}

#[test]
fn tables_are_gamma_coded_counts() {
    let mut counts = vec![0u32; 256];
    counts[0] = 3;
    counts[1] = 1;
    counts[200] = 2;
    let mut t = Vec::new();
    let mut w = BitWriter {
        out: &mut t,
        acc: 0,
        held: 0,
    };
    write_table(&counts, &mut w);
    w.finish();
    // Plain counts (0), then gap 1 (1), count 3 (011), gap 1 (1), count 1 (1),
    // gap 199 (0000000 11000111), count 2 (010), end gap 56 (00000 111000), padding.
    let bits = "0 1 011 1 1 000000011000111 010 00000111000";
    let bits: String = bits.split(' ').collect();
    assert_eq!(table_len(&counts), (bits.len(), false));
    let mut expect = vec![0u8; bits.len().div_ceil(8)];
    for (i, b) in bits.bytes().enumerate() {
        expect[i / 8] |= (b - b'0') << (7 - i % 8);
    }
    assert_eq!(t, expect);
    let mut dec = vec![0u32; PROB_SCALE as usize];
    let mut r = BitReader { src: &t, pos: 0 };
    assert_eq!(
        read_table::<u8>(&mut r, 8, &mut dec, &mut Vec::new()),
        Ok(true)
    );
    assert_eq!(r.finish(), (t.len(), true));
    // 3 : 1 : 2 normalize to 2048 : 683 : 1365.
    assert_eq!(dec[0] & 0xFF, 0);
    assert_eq!(dec[2048] & 0xFF, 1);
    assert_eq!(dec[2048 + 683] & 0xFF, 200);
    let mut r = BitReader { src: &t, pos: 0 };
    assert!(
        read_table::<u8>(&mut r, 7, &mut dec, &mut Vec::new()).is_err(),
        "symbol 200 needs 8 bits"
    );
    // Smooth counts are coded as differences.
    let smooth: Vec<u32> = (0..256).map(|s| 300 + s / 4).collect();
    let (len, delta) = table_len(&smooth);
    assert!(delta && len < 256 * 6, "{len}");
}

proptest! {
    #[test]
    fn round_trips(plane in prop::collection::vec(0u8..6, 2..3000), extra in any::<u8>()) {
        let mut plane = plane;
        plane.push(extra);
        plane.push(extra.wrapping_add(1));
        round_trip(&plane);
    }

    #[test]
    fn round_trips_any_bytes(plane in prop::collection::vec(any::<u8>(), 2..2000)) {
        let mut plane = plane;
        plane[0] = 0;
        plane[1] = 1;
        round_trip(&plane);
    }

    #[test]
    fn round_trips_ten_bit_symbols(plane in prop::collection::vec(0u16..1024, 2..2000), skew in 0u16..1024) {
        let mut plane: Vec<u16> = plane.iter().map(|&s| if s % 3 == 0 { skew } else { s }).collect();
        plane[0] = 0;
        plane[1] = 1023;
        round_trip(&plane);
    }

    #[test]
    fn round_trips_with_contexts(pairs in prop::collection::vec((0u8..16, any::<u8>()), 1..3000)) {
        let ctx: Vec<u8> = pairs.iter().map(|p| p.0).collect();
        let plane: Vec<u8> = pairs.iter().map(|p| p.1 % (p.0 + 2)).collect();
        round_trip_ctx(&plane, &ctx, 16);
    }
}

proptest! {
    /// Planes of mostly zeros (the exponent planes of deltas): every kernel must agree.
    #[test]
    fn mostly_zero_planes_round_trip(
        seed in any::<u64>(),
        p0 in 0.9f64..1.0,
        n_ctx in 1usize..=16,
        extra in 0usize..64,
    ) {
        let n = WIDE_MIN + extra;
        let r = noise(n, seed);
        let plane: Vec<u8> = r
            .iter()
            .map(|&v| if f64::from(v >> 8) / f64::from(1u32 << 24) < p0 { 0 } else { (v & 0xFF) as u8 })
            .collect();
        if n_ctx == 1 {
            round_trip(&plane);
        } else {
            let ctx: Vec<u8> = r.iter().map(|&v| (v.rotate_left(7) % n_ctx as u32) as u8).collect();
            round_trip_ctx(&plane, &ctx, n_ctx);
        }
    }
}

/// `normalize` as it was written over the whole alphabet (every stream ever written was
/// decoded with it): the sparse arithmetic must give the same frequencies on every input.
fn normalize_dense_reference(hist: &[u32], max: u32) -> Option<Freqs> {
    let scale = u64::from(PROB_SCALE);
    let total: u64 = hist.iter().map(|&c| u64::from(c)).sum();
    if total == 0 || total == scale && hist.iter().all(|&c| c <= max) {
        return Some(hist.to_vec());
    }
    let (mut forced, mut forced_count) = (0u64, 0u64);
    for &c in hist.iter().filter(|&&c| c > 0) {
        if u64::from(c) * scale < total {
            forced += 1;
            forced_count += u64::from(c);
        }
    }
    let (rest_total, rest_scale) = (total - forced_count, scale - forced);
    let mut freq = vec![0u32; hist.len()];
    let mut sum = 0i64;
    for (f, &c) in freq.iter_mut().zip(hist) {
        let c = u64::from(c);
        if c > 0 {
            let share = if c * scale < total {
                1
            } else {
                (c * rest_scale + rest_total / 2) / rest_total
            };
            *f = share.clamp(1, u64::from(max)) as u32;
            sum += i64::from(*f);
        }
    }
    let mut diff = i64::from(PROB_SCALE) - sum;
    while diff != 0 {
        let mut best: Option<usize> = None;
        for (s, (&f, &c)) in freq.iter().zip(hist).enumerate() {
            let movable = if diff > 0 { f > 0 && f < max } else { f > 1 };
            if movable && best.is_none_or(|b| c > hist[b]) {
                best = Some(s);
            }
        }
        let s = best?;
        let room = if diff > 0 {
            i64::from(max - freq[s])
        } else {
            i64::from(freq[s] - 1)
        };
        let step = diff.abs().min(room);
        if diff > 0 {
            freq[s] += step as u32;
            diff -= step;
        } else {
            freq[s] -= step as u32;
            diff += step;
        }
    }
    Some(freq)
}

/// Histograms of the shapes tables hold: a few symbols or many, small exact counts or
/// large ones, ties, one symbol near the cap, counts that already sum to the scale.
fn histogram_strategy() -> impl Strategy<Value = (Vec<u32>, u32)> {
    let alphabet = prop_oneof![Just(256usize), Just(1024usize)];
    let max = prop_oneof![Just(1u32 << 12), Just(1u32 << 11)];
    (alphabet, max, 1usize..40, any::<u64>(), 0u8..4).prop_map(|(a, max, k, seed, kind)| {
        let mut rng = SplitMix64::new(seed);
        let mut hist = vec![0u32; a];
        for _ in 0..k {
            let s = (rng.next_u64() % a as u64) as usize;
            hist[s] = match kind {
                0 => 1 + (rng.next_u64() % 4) as u32,
                1 => 1 + (rng.next_u64() % 65536) as u32,
                2 => 1 + (rng.next_u64() % 300) as u32,
                _ => 7,
            };
        }
        if kind == 3 {
            // Exactly the scale: returned as given unless a count is above the cap.
            let total: u32 = hist.iter().sum();
            if let Some(first) = hist.iter_mut().find(|c| **c > 0) {
                *first += PROB_SCALE.saturating_sub(total);
            }
        }
        (hist, max)
    })
}

proptest! {
    #[test]
    fn sparse_normalization_matches_the_dense_one((hist, max) in histogram_strategy()) {
        prop_assert_eq!(normalize(&hist, max), normalize_dense_reference(&hist, max));
    }
}

#[test]
fn sparse_normalization_matches_the_dense_one_at_the_edges() {
    let mut one = vec![0u32; 256];
    one[9] = 5;
    let mut capped = vec![0u32; 1024];
    capped[3] = 4096;
    let mut dense = vec![1u32; 1024];
    dense[0] = 100_000;
    for (hist, max) in [
        (vec![0u32; 256], 4096),
        (one, 4096),
        (capped.clone(), 2048),
        (capped, 4096),
        (dense, 2048),
    ] {
        assert_eq!(normalize(&hist, max), normalize_dense_reference(&hist, max));
    }
}

proptest! {
    /// A float's head decoded into its words (`decode_joined`), 2- and 4-byte words: with
    /// every kernel, the words the kernel wrote followed by `join_head_from` over the rest
    /// are the bytes `planes::join_head` writes from the plain decode, and AVX2 writes every
    /// full step.
    #[test]
    fn joined_head_decode_matches_join_after(
        seed in any::<u64>(),
        extra in 0usize..100,
        n_ctx in 1usize..=4,
        wide in any::<bool>(),
        four in any::<bool>(),
        offset in 0usize..4,
    ) {
        use crate::lossless::planes::{join_head, join_head_from, Head, Plane};
        let n = if wide { WIDE_MIN + extra } else { 40 + extra };
        let r = noise(n, seed);
        // Skewed 10-bit symbols, as exponents are; other planes of any bytes, a 6-bit tail.
        let plane: Vec<u16> = r.iter().map(|&v| (v >> 22) as u16 & ((v & 3) as u16 * 0x155)).collect();
        let byte = |shift: u32, mask: u32| -> Vec<u8> { r.iter().map(|&v| (v >> shift & mask) as u8).collect() };
        let rest_planes = if four { vec![byte(2, 0xFF), byte(10, 0xFF), byte(18, 0x3F)] } else { vec![byte(3, 0x3F)] };
        let rest: Vec<&[u8]> = rest_planes.iter().map(Vec::as_slice).collect();
        let width = rest.len() + 1;
        let ctx: Vec<u8> = r.iter().map(|&v| (v.rotate_left(11) % n_ctx as u32) as u8).collect();
        let map = ContextMap::new(ctx.clone());
        let ctx = if n_ctx == 1 { Contexts::Order0 } else { Contexts::Given(&map) };
        let hists = if n_ctx == 1 { vec![histogram(&plane)] } else { histograms(&plane, &map.ctx, n_ctx) };
        let m = model::<u16>(&hists);
        let mut src = Vec::new();
        encode_with(Kernel::detect(), Layout::for_len(n), &plane, ctx, &m, &mut src);
        let mut want = vec![0u8; width * n];
        let bytes: Vec<Plane<'_>> = rest.iter().map(|p| Plane::Bytes(p)).collect();
        match width {
            2 => join_head::<2>(Head::Words(&plane), &bytes, None, &mut want),
            _ => join_head::<4>(Head::Words(&plane), &bytes, None, &mut want),
        }
        for k in kernels() {
            let mut symbols = vec![0u16; n];
            // Words at any byte offset: the kernel stores unaligned.
            let mut buf = vec![0xEEu8; width * n + offset];
            let out = &mut buf[offset..];
            let into = JoinInto { rest: &rest, out: &mut *out };
            let joined = decode_with(k, &src, 0, ctx, 10, &mut symbols, Some(into), &mut Vec::new(), true)
                .expect("decode");
            let full = if wide && k != Kernel::Scalar { n / 32 * 32 } else { 0 };
            prop_assert_eq!(joined, full, "{:?}", k);
            match width {
                2 => join_head_from::<2>(joined, &symbols, &rest, None, out),
                _ => join_head_from::<4>(joined, &symbols, &rest, None, out),
            }
            prop_assert!(*out == want[..], "{:?} joins differently", k);
        }
    }
}
