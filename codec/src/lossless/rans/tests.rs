use super::*;
use proptest::prelude::*;

fn round_trip(plane: &[u8]) -> usize {
    let mut out = Vec::new();
    encode(plane, Order0, &[histogram(plane)], &mut out);
    let mut back = vec![0u8; plane.len()];
    decode(&out, 0, Order0, &mut back).expect("decode");
    assert_eq!(back, plane);
    out.len()
}

fn round_trip_ctx(plane: &[u8], ctx: &[u8], n: usize) -> usize {
    let hists = histograms(plane, ctx, n);
    let mut out = Vec::new();
    encode(plane, ctx, &hists, &mut out);
    let mut back = vec![0u8; plane.len()];
    decode(&out, 0, ctx, &mut back).expect("decode");
    assert_eq!(back, plane);
    assert!(
        out.len() <= estimate(&hists) + 64,
        "{} vs estimate {}",
        out.len(),
        estimate(&hists)
    );
    out.len()
}

#[test]
fn skewed_plane_codes_near_entropy() {
    let plane: Vec<u8> = (0..100_000u32)
        .map(|i| if i % 10 == 0 { (i % 7) as u8 } else { 120 })
        .collect();
    let size = round_trip(&plane);
    let est = estimate(&[histogram(&plane)]);
    assert!(size <= est + 64, "size {size} vs estimate {est}");
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
fn unused_contexts_and_out_of_range_are_errors() {
    let plane: Vec<u8> = (0..1000u32).map(|i| (i % 3) as u8).collect();
    let ctx = vec![1u8; plane.len()];
    let hists = histograms(&plane, &ctx, 3);
    let mut out = Vec::new();
    encode(&plane, ctx.as_slice(), &hists, &mut out);
    let mut back = vec![0u8; plane.len()];
    let wrong = vec![0u8; plane.len()];
    assert!(
        decode(&out, 0, wrong.as_slice(), &mut back).is_err(),
        "context 0 is unused"
    );
    let beyond = vec![3u8; plane.len()];
    assert!(
        decode(&out, 0, beyond.as_slice(), &mut back).is_err(),
        "context 3 does not exist"
    );
    decode(&out, 0, ctx.as_slice(), &mut back).unwrap();
    assert_eq!(back, plane);
}

#[test]
fn corrupt_streams_fail() {
    let plane: Vec<u8> = (0..5000u32).map(|i| (i * i % 13) as u8).collect();
    let mut enc = Vec::new();
    encode(&plane, Order0, &[histogram(&plane)], &mut enc);
    let mut back = vec![0u8; plane.len()];
    assert!(decode(&enc[..enc.len() - 4], 0, Order0, &mut back).is_err());
    let mut long = enc.clone();
    long.extend_from_slice(&[0; 4]);
    assert!(decode(&long, 0, Order0, &mut back).is_err());
    assert!(decode(&enc[..20], 0, Order0, &mut back).is_err());
    let mut bad = enc.clone();
    bad[0] = 0;
    assert!(decode(&bad, 0, Order0, &mut back).is_err(), "zero contexts");
    bad[0] = 17;
    assert!(
        decode(&bad, 0, Order0, &mut back).is_err(),
        "too many contexts"
    );
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
    fn round_trips_with_contexts(pairs in prop::collection::vec((0u8..16, any::<u8>()), 1..3000)) {
        let ctx: Vec<u8> = pairs.iter().map(|p| p.0).collect();
        let plane: Vec<u8> = pairs.iter().map(|p| p.1 % (p.0 + 2)).collect();
        round_trip_ctx(&plane, &ctx, 16);
    }
}
