//! Tiers in the store: policies, every transition `maintain` makes, honest fidelity,
//! residuals, Tier 0 reconstruct policies, persistence, on real weights.

#![allow(clippy::panic)]

mod common;

use common::{all_series, temp_store, Series, SeriesExt};
use strata_store::{
    Budget, Clock, DType, Fidelity, InvalidInput, ManualClock, NotFound, Options, Reconstruct,
    Residual, Source, Store, StoreError, Tensor, TensorRef, Tier, TierConfig, TierFailure,
    TierOptions, TierPolicy,
};

const MINUTE: u64 = 60_000;
const HOUR: u64 = 60 * MINUTE;

/// The largest real f32 weight matrix of the `i`-th checkpoint of dev_ft in `src`, as
/// (shape, bytes): a [576, 192] attention weight in the committed series, a [768, 192] MLP
/// weight in the shared one.
fn weight(src: &Series, i: usize) -> (Vec<u64>, Vec<u8>) {
    let c = src.load_nth("dev_ft", i);
    let (_, dt, shape, bytes) = c
        .tensors
        .iter()
        .filter(|t| t.1 == DType::F32 && t.2.len() == 2)
        .max_by_key(|t| t.3.len())
        .expect("a 2-D f32 tensor");
    assert_eq!(*dt, DType::F32);
    (shape.clone(), bytes.clone())
}

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    clock: ManualClock,
    opts: Options,
}

fn fixture(config: TierConfig) -> Fixture {
    let (dir, path) = temp_store();
    let (clock, handle) = Clock::manual(0);
    let opts = Options {
        block_bytes: 64 << 10,
        tiering: TierOptions {
            config,
            budget: Budget::UNLIMITED,
            clock,
            ..TierOptions::default()
        },
        ..Options::default()
    };
    Fixture {
        _dir: dir,
        path,
        clock: handle,
        opts,
    }
}

impl Fixture {
    fn open(&self) -> Store {
        Store::open_with(&self.path, self.opts.clone()).expect("open")
    }
    fn set_time(&self, t: u64) {
        self.clock.set(t);
    }
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Checks every element against the bound the fidelity claims (groups of 64); returns the
/// worst error relative to its group's largest magnitude.
fn check_bound(original: &[u8], t: &Tensor) -> f64 {
    let (x, y) = (f32s(original), f32s(&t.data));
    assert_eq!(x.len(), y.len());
    let bound = match t.fidelity {
        Fidelity::Exact => 0.0,
        Fidelity::Bounded { max_rel_error, .. } => max_rel_error,
        other => panic!("no bound claimed: {other:?}"),
    };
    let mut worst = 0f64;
    for (gx, gy) in x.chunks(64).zip(y.chunks(64)) {
        let max = gx.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
        for (a, b) in gx.iter().zip(gy) {
            let err = (*a as f64 - *b as f64).abs();
            let rel = if max > 0.0 { err / max } else { err };
            worst = worst.max(rel);
            assert!(
                rel <= bound * (1.0 + 1e-5) + 1e-7,
                "error {rel} above the claimed bound {bound} ({:?})",
                t.fidelity
            );
        }
    }
    worst
}

fn tensor_ref<'a>(shape: &'a [u64], bytes: &'a [u8]) -> TensorRef<'a> {
    TensorRef {
        dtype: DType::F32,
        shape,
        bytes,
    }
}

fn tiers_of(store: &Store, name: &str, step: u64) -> Vec<Tier> {
    store
        .versions(name)
        .expect("versions")
        .into_iter()
        .find(|v| v.step == step)
        .expect("version")
        .encodings
        .iter()
        .map(|e| e.tier)
        .collect()
}

#[test]
fn tiered_writes_and_every_demotion_report_honest_bounds() {
    for src in all_series() {
        eprintln!("on the {} series", src.label);
        tiered_writes_and_every_demotion_report_honest_bounds_on(&src);
    }
}

fn tiered_writes_and_every_demotion_report_honest_bounds_on(src: &Series) {
    let f = fixture(TierConfig {
        allow_zero_fill: true,
        ..TierConfig::default()
    });
    let store = f.open();
    store
        .set_policy("kv.*", TierPolicy::tiered(Tier::Hot8))
        .expect("policy");
    let (shape, w) = weight(src, 0);
    store.put("kv.w", 1, &tensor_ref(&shape, &w)).expect("put");
    store
        .put("exact.w", 1, &tensor_ref(&shape, &w))
        .expect("put");

    let t = store.get("kv.w", 1).expect("get");
    assert!(matches!(t.fidelity, Fidelity::Bounded { bits: 8, .. }));
    let e8 = check_bound(&w, &t);
    assert!(e8 > 0.0);
    let exact = store.get("exact.w", 1).expect("get");
    assert_eq!(exact.fidelity, Fidelity::Exact);
    assert_eq!(exact.data, w);

    // Nobody reads it: hot -> warm (7 bits) -> cold (3 bits) -> Tier 0 (zeros allowed).
    let mut expect = [
        (11 * MINUTE, Tier::Warm7, 7u8),
        (22 * MINUTE, Tier::Cold3, 3),
    ];
    for (now, tier, bits) in expect.iter_mut() {
        let report = store.maintain(*now).expect("maintain");
        assert!(report.moves > 0, "{report:?}");
        assert!(tiers_of(&store, "kv.w", 1).iter().all(|t| t == tier));
        let t = store.get("kv.w", 1).expect("get");
        match t.fidelity {
            Fidelity::Bounded { bits: b, .. } => assert_eq!(b, *bits),
            other => panic!("{other:?}"),
        }
        check_bound(&w, &t);
    }
    store.maintain(48 * HOUR).expect("maintain");
    assert!(tiers_of(&store, "kv.w", 1)
        .iter()
        .all(|t| *t == Tier::Absent));
    let t = store.get("kv.w", 1).expect("get");
    assert_eq!(t.fidelity, Fidelity::Zeros);
    assert!(t.data.iter().all(|b| *b == 0));
    // The exact tensor never moved.
    assert_eq!(store.get("exact.w", 1).expect("get").data, w);
    assert!(store.verify().expect("verify").is_ok());
    // A write brings it back at the start tier.
    store
        .put_with(
            "kv.w",
            1,
            &tensor_ref(&shape, &w),
            &strata_store::PutOptions { overwrite: true },
        )
        .expect("overwrite");
    assert!(matches!(
        store.get("kv.w", 1).expect("get").fidelity,
        Fidelity::Bounded { bits: 8, .. }
    ));
}

#[test]
fn fail_fast_tier_zero_without_policy_is_an_error() {
    for src in all_series() {
        eprintln!("on the {} series", src.label);
        fail_fast_tier_zero_without_policy_is_an_error_on(&src);
    }
}

fn fail_fast_tier_zero_without_policy_is_an_error_on(src: &Series) {
    let mut f = fixture(TierConfig {
        allow_zero_fill: true,
        ..TierConfig::default()
    });
    f.opts.tiering.fail_fast = true;
    let store = f.open();
    store
        .set_policy("*", TierPolicy::tiered(Tier::Cold3))
        .expect("policy");
    let (shape, w) = weight(src, 0);
    store.put("a", 1, &tensor_ref(&shape, &w)).expect("put");
    store.maintain(48 * HOUR).expect("maintain");
    assert!(matches!(
        store.get("a", 1),
        Err(StoreError::Tier(TierFailure::ZeroNoPolicy { .. }))
    ));
}

#[test]
fn promoted_blocks_keep_their_real_precision_unless_an_exact_residual_is_kept() {
    for src in all_series() {
        eprintln!("on the {} series", src.label);
        promoted_blocks_keep_their_real_precision_unless_an_exact_residual_is_kept_on(&src);
    }
}

fn promoted_blocks_keep_their_real_precision_unless_an_exact_residual_is_kept_on(src: &Series) {
    let f = fixture(TierConfig::default());
    let store = f.open();
    store
        .set_policy("lossy", TierPolicy::tiered(Tier::Cold3))
        .expect("policy");
    store
        .set_policy(
            "kept",
            TierPolicy::tiered(Tier::Cold3).with_residual(Residual::Exact),
        )
        .expect("policy");
    let (shape, w) = weight(src, 1);
    for name in ["lossy", "kept"] {
        store.put(name, 5, &tensor_ref(&shape, &w)).expect("put");
    }
    // Read both every minute for an hour: cold -> warm -> hot.
    let mut now = 0;
    for _ in 0..3 {
        for _ in 0..30 {
            now += MINUTE;
            f.set_time(now);
            store.get("lossy", 5).expect("get");
            store.get("kept", 5).expect("get");
        }
        store.maintain(now).expect("maintain");
    }
    assert!(tiers_of(&store, "lossy", 5)
        .iter()
        .all(|t| *t == Tier::Hot8));
    assert!(tiers_of(&store, "kept", 5).iter().all(|t| *t == Tier::Hot8));
    let lossy = store.get("lossy", 5).expect("get");
    match lossy.fidelity {
        // Promoted to 8 bits, but the data went through 3 bits.
        Fidelity::Bounded { bits, .. } => assert_eq!(bits, 3),
        other => panic!("{other:?}"),
    }
    check_bound(&w, &lossy);
    let kept = store.get("kept", 5).expect("get");
    assert!(matches!(kept.fidelity, Fidelity::Bounded { bits: 8, .. }));
    check_bound(&w, &kept);
    // The exact residual rebuilds the original bit for bit; the other cannot.
    assert_eq!(store.get_exact("kept", 5).expect("exact").data, w);
    assert!(matches!(
        store.get_exact("lossy", 5),
        Err(StoreError::Tier(TierFailure::NotExact { .. }))
    ));
    assert!(store.verify().expect("verify").is_ok());
}

#[test]
fn top_k_residual_lowers_the_error() {
    for src in all_series() {
        eprintln!("on the {} series", src.label);
        top_k_residual_lowers_the_error_on(&src);
    }
}

fn top_k_residual_lowers_the_error_on(src: &Series) {
    let f = fixture(TierConfig::default());
    let store = f.open();
    store
        .set_policy("plain", TierPolicy::tiered(Tier::Cold3))
        .expect("policy");
    store
        .set_policy(
            "topk",
            TierPolicy::tiered(Tier::Cold3).with_residual(Residual::TopK { fraction: 0.25 }),
        )
        .expect("policy");
    let (shape, w) = weight(src, 2);
    store.put("plain", 1, &tensor_ref(&shape, &w)).expect("put");
    store.put("topk", 1, &tensor_ref(&shape, &w)).expect("put");
    let sq = |t: &Tensor| -> f64 {
        f32s(&w)
            .iter()
            .zip(f32s(&t.data))
            .map(|(a, b)| ((a - b) as f64).powi(2))
            .sum()
    };
    let plain = store.get("plain", 1).expect("get");
    let topk = store.get("topk", 1).expect("get");
    check_bound(&w, &plain);
    check_bound(&w, &topk);
    // Quantization errors are near uniform: the largest quarter carries about 58 % of the
    // squared error.
    assert!(
        sq(&topk) < 0.6 * sq(&plain),
        "top-k {} vs plain {}",
        sq(&topk),
        sq(&plain)
    );
}

#[test]
fn tier_zero_reconstruct_policies() {
    for src in all_series() {
        eprintln!("on the {} series", src.label);
        tier_zero_reconstruct_policies_on(&src);
    }
}

fn tier_zero_reconstruct_policies_on(src: &Series) {
    let f = fixture(TierConfig::default());
    let store = f.open();
    let (shape, w0) = weight(src, 0);
    let (_, w1) = weight(src, 1);
    // Base exact; the tiered tensor rebuilds from it plus every difference.
    store.put("base", 1, &tensor_ref(&shape, &w0)).expect("put");
    store
        .set_policy(
            "delta",
            TierPolicy::tiered(Tier::Cold3).with_reconstruct(Reconstruct::Delta {
                base: Source::same_step("base"),
                keep: 1.0,
            }),
        )
        .expect("policy");
    store
        .put("delta", 1, &tensor_ref(&shape, &w1))
        .expect("put");
    // Low rank: 3 x 4 times 4 x 3. Signed values that are not all whole numbers, at 3 bits
    // too: a block of integers or of non-negative values never goes to a Tier 0 rebuild (ADR
    // 0027). Each tensor is over 32 bytes: smaller ones are stored in their records, never
    // tiered (ADR 0029).
    let l: Vec<u8> = [
        1.5f32, -2., -3., 4., -5., 6.25, 0.5, -1., 2., 1., -0.5, 8.25,
    ]
    .iter()
    .flat_map(|v| v.to_le_bytes())
    .collect();
    let r: Vec<u8> = [1f32, 0., 0., 0., 1., 0., 0., 0., 1., 1., 1., 1.]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    store.put("left", 1, &tensor_ref(&[3, 4], &l)).expect("put");
    store
        .put("right", 1, &tensor_ref(&[4, 3], &r))
        .expect("put");
    store
        .set_policy(
            "prod",
            TierPolicy::tiered(Tier::Cold3).with_reconstruct(Reconstruct::LowRank {
                left: Source::same_step("left"),
                right: Source::same_step("right"),
            }),
        )
        .expect("policy");
    let prod: Vec<u8> = [5.5f32, 2., 1., -6., 5.25, -0.5, 10.25, 9.25, 7.75]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    store
        .put("prod", 1, &tensor_ref(&[3, 3], &prod))
        .expect("put");
    // Scaled and permuted rows of `left`: row i is 2 x row permutation[i].
    store
        .set_policy(
            "scaled",
            TierPolicy::tiered(Tier::Cold3).with_reconstruct(Reconstruct::Scaled {
                source: Source::same_step("left"),
                scale: 2.0,
                permutation: Some(vec![2, 0, 1]),
            }),
        )
        .expect("policy");
    let scaled: Vec<u8> = [4f32, 2., -1., 16.5, 3., -4., -6., 8., -10., 12.5, 1., -2.]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    store
        .put("scaled", 1, &tensor_ref(&[3, 4], &scaled))
        .expect("put");

    // The delta is taken from the data held when the block goes to Tier 0 (3 bits here).
    let held = store.get("delta", 1).expect("get");
    store.maintain(48 * HOUR).expect("maintain");
    for name in ["delta", "prod", "scaled"] {
        assert!(
            tiers_of(&store, name, 1).iter().all(|t| *t == Tier::Absent),
            "{name}: {:?}",
            tiers_of(&store, name, 1)
        );
    }
    let d = store.get("delta", 1).expect("get");
    assert!(matches!(d.fidelity, Fidelity::Reconstructed { depth: 1 }));
    // Base + every difference in f16: the held data to f16 precision of the difference.
    for ((a, b), base) in f32s(&held.data).iter().zip(f32s(&d.data)).zip(f32s(&w0)) {
        let diff = (a - base).abs();
        assert!(
            (a - b).abs() <= diff * 1e-3 + 1e-7,
            "{a} vs {b} (base {base})"
        );
    }
    assert_eq!(store.get("prod", 1).expect("get").data, prod);
    assert_eq!(store.get("scaled", 1).expect("get").data, scaled);
    assert!(store.verify().expect("verify").is_ok());
}

#[test]
fn reconstruction_chains_are_bounded() {
    let f = fixture(TierConfig {
        max_reconstruct_depth: 3,
        ..TierConfig::default()
    });
    let store = f.open();
    // Signed (a block of non-negative values never goes to a Tier 0 rebuild: ADR 0027).
    let x: Vec<u8> = (0..256u32)
        .flat_map(|i| ((i as f32 - 128.0) * 0.01).to_le_bytes())
        .collect();
    store.put("t0", 1, &tensor_ref(&[256], &x)).expect("put");
    // t1 rebuilds from t0, t2 from t1, ... t4 from t3: reading t4 needs 4 rebuilds.
    for i in 1..=4 {
        store
            .set_policy(
                &format!("t{i}"),
                TierPolicy::tiered(Tier::Cold3).with_reconstruct(Reconstruct::Delta {
                    base: Source::same_step(&format!("t{}", i - 1)),
                    keep: 1.0,
                }),
            )
            .expect("policy");
        store
            .put(&format!("t{i}"), 1, &tensor_ref(&[256], &x))
            .expect("put");
    }
    store.maintain(48 * HOUR).expect("maintain");
    assert!(matches!(
        store.get("t3", 1).expect("get").fidelity,
        Fidelity::Reconstructed { depth: 3 }
    ));
    assert!(matches!(
        store.get("t4", 1),
        Err(StoreError::Tier(TierFailure::DepthExceeded {
            limit: 3,
            ..
        }))
    ));
}

#[test]
fn converting_lossless_history_rebases_dependents_first() {
    for src in all_series() {
        eprintln!("on the {} series", src.label);
        converting_lossless_history_rebases_dependents_first_on(&src);
    }
}

fn converting_lossless_history_rebases_dependents_first_on(src: &Series) {
    let mut f = fixture(TierConfig::default());
    // One conversion per pass.
    f.opts.tiering.budget = Budget::new(u64::MAX, 1);
    let store = f.open();
    let mut data = Vec::new();
    for i in 0..3 {
        let (shape, w) = weight(src, i);
        store
            .put("w", i as u64, &tensor_ref(&shape, &w))
            .expect("put");
        data.push(w);
    }
    // Versions 1 and 2 are deltas on 0 and 1.
    assert!(store.versions("w").expect("versions")[1]
        .encodings
        .iter()
        .any(|e| e.base.is_some()));
    store
        .set_policy("w", TierPolicy::tiered(Tier::Hot8))
        .expect("policy");
    let report = store.maintain(MINUTE).expect("maintain");
    assert_eq!(report.converted, 1);
    // Version 0 is lossy now; 1 and 2 still read bit-exact.
    assert!(matches!(
        store.get("w", 0).expect("get").fidelity,
        Fidelity::Bounded { bits: 8, .. }
    ));
    for i in 1..3 {
        let t = store.get("w", i).expect("get");
        assert_eq!(t.fidelity, Fidelity::Exact);
        assert_eq!(t.data, data[i as usize]);
    }
    assert!(store.verify().expect("verify").is_ok());
    store.maintain(2 * MINUTE).expect("maintain");
    store.maintain(3 * MINUTE).expect("maintain");
    for i in 0..3 {
        let t = store.get("w", i).expect("get");
        check_bound(&data[i as usize], &t);
        assert!(matches!(t.fidelity, Fidelity::Bounded { bits: 8, .. }));
    }
    assert!(store.verify().expect("verify").is_ok());
}

#[test]
fn pins_win_and_state_survives_reopening() {
    for src in all_series() {
        eprintln!("on the {} series", src.label);
        pins_win_and_state_survives_reopening_on(&src);
    }
}

fn pins_win_and_state_survives_reopening_on(src: &Series) {
    let f = fixture(TierConfig::default());
    let (shape, w) = weight(src, 0);
    {
        let store = f.open();
        store
            .set_policy("*", TierPolicy::tiered(Tier::Hot8))
            .expect("policy");
        store.pin("*norm*").expect("pin");
        store
            .put("layer.norm", 1, &tensor_ref(&shape, &w))
            .expect("put");
        store
            .put("layer.w", 1, &tensor_ref(&shape, &w))
            .expect("put");
        assert_eq!(store.get("layer.norm", 1).expect("get").data, w);
        store.maintain(11 * MINUTE).expect("maintain");
        assert!(tiers_of(&store, "layer.w", 1)
            .iter()
            .all(|t| *t == Tier::Warm7));
    }
    let store = f.open();
    assert_eq!(store.policies().len(), 2);
    assert!(tiers_of(&store, "layer.w", 1)
        .iter()
        .all(|t| *t == Tier::Warm7));
    assert!(matches!(
        store.get("layer.w", 1).expect("get").fidelity,
        Fidelity::Bounded { bits: 7, .. }
    ));
    assert_eq!(
        store.get("layer.norm", 1).expect("get").fidelity,
        Fidelity::Exact
    );
    // The policy goes on from the saved tiers.
    store.maintain(30 * MINUTE).expect("maintain");
    assert!(tiers_of(&store, "layer.w", 1)
        .iter()
        .all(|t| *t == Tier::Cold3));
    // Removing the tiered rule pins lossy blocks where they are.
    store.remove_policy("*").expect("remove");
    store.maintain(60 * HOUR).expect("maintain");
    assert!(tiers_of(&store, "layer.w", 1)
        .iter()
        .all(|t| *t == Tier::Cold3));
    assert!(matches!(
        store.remove_policy("*"),
        Err(StoreError::NotFound(NotFound::Policy { .. }))
    ));
    assert!(matches!(
        store.set_policy("x", TierPolicy::tiered(Tier::Exact)),
        Err(StoreError::Invalid(InvalidInput::Policy { .. }))
    ));
}

#[test]
fn warm_bytes_stay_under_the_cap() {
    for src in all_series() {
        eprintln!("on the {} series", src.label);
        warm_bytes_stay_under_the_cap_on(&src);
    }
}

fn warm_bytes_stay_under_the_cap_on(src: &Series) {
    let f = fixture(TierConfig {
        warm_byte_cap: 200 << 10,
        ..TierConfig::default()
    });
    let store = f.open();
    store
        .set_policy("*", TierPolicy::tiered(Tier::Hot8))
        .expect("policy");
    let (shape, w) = weight(src, 0);
    for i in 0..4 {
        store
            .put(&format!("t{i}"), 1, &tensor_ref(&shape, &w))
            .expect("put");
    }
    // Keep them warm (a read every few minutes), never hot.
    let mut now = 0;
    for pass in 0..6 {
        for _ in 0..6 {
            now += 5 * MINUTE;
            f.set_time(now);
            for i in 0..4 {
                store.get(&format!("t{i}"), 1).expect("get");
            }
        }
        let report = store.maintain(now).expect("maintain");
        if pass > 0 {
            assert!(
                report.warm_bytes_after <= 200 << 10,
                "pass {pass}: {report:?}"
            );
        }
    }
    let stats = store.stats().expect("stats");
    assert!(
        stats.tier_bytes.contains_key("warm5"),
        "{:?}",
        stats.tier_bytes
    );
    for i in 0..4 {
        check_bound(&w, &store.get(&format!("t{i}"), 1).expect("get"));
    }
}

/// A slowly drifting embedding of 384 values for tick `t`, scaled by `scale`.
fn frame(t: u64, scale: f32) -> Vec<f32> {
    (0..384)
        .map(|i| scale * ((i as f32 * 0.37 + t as f32 * 0.01).sin() + 0.01 * (t % 7) as f32))
        .collect()
}

fn check_frame(store: &Store, name: &str, step: u64, want: &[f32]) {
    let t = store.get(name, step).expect("get frame");
    let bound = match t.fidelity {
        Fidelity::Bounded {
            max_rel_error,
            bits,
        } => {
            assert_eq!(bits, 8);
            max_rel_error
        }
        other => panic!("{other:?}"),
    };
    let got = f32s(&t.data);
    for (gx, gy) in want.chunks(64).zip(got.chunks(64)) {
        let max = gx.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
        for (a, b) in gx.iter().zip(gy) {
            assert!(((a - b).abs() as f64) <= bound * max * (1.0 + 1e-5) + 1e-9);
        }
    }
}

#[test]
fn frame_streams_share_scales_and_decode_one_frame_at_a_time() {
    let f = fixture(TierConfig::default());
    let store = f.open();
    let mut epochs = 0;
    for t in 0..40u64 {
        let a = store
            .append_frame("agent.state", t, &frame(t, 1.0))
            .expect("append");
        epochs += usize::from(a.new_epoch);
        if t > 0 && t % 16 != 0 {
            // Drift stays small: only a full segment (16 frames) starts an epoch.
            assert!(!a.new_epoch, "tick {t}: {a:?}");
        }
    }
    assert_eq!(epochs, 3);
    // Growth and shrinking beyond the tolerance both start epochs.
    assert!(
        store
            .append_frame("agent.state", 40, &frame(40, 2.0))
            .expect("grow")
            .new_epoch
    );
    assert!(store
        .append_frame("agent.state", 41, &frame(41, 2.0))
        .map(|a| !a.new_epoch)
        .expect("same"));
    assert!(
        store
            .append_frame("agent.state", 42, &frame(42, 0.5))
            .expect("shrink")
            .new_epoch
    );
    for t in 0..40 {
        check_frame(&store, "agent.state", t, &frame(t, 1.0));
    }
    check_frame(&store, "agent.state", 40, &frame(40, 2.0));
    check_frame(&store, "agent.state", 42, &frame(42, 0.5));
    // One segment per epoch: 3 + 2 (the drift epochs), not one per frame.
    assert_eq!(store.stats().expect("stats").segments, 5);
    // Bad input.
    assert!(matches!(
        store.append_frame("agent.state", 10, &frame(10, 1.0)),
        Err(StoreError::Invalid(InvalidInput::StepNotAfter {
            latest: 42,
            ..
        }))
    ));
    assert!(matches!(
        store.append_frame("agent.state", 42, &frame(42, 1.0)),
        Err(StoreError::Invalid(InvalidInput::StepExists { .. }))
    ));
    let mut bad = frame(50, 1.0);
    bad[3] = f32::NAN;
    assert!(matches!(
        store.append_frame("agent.state", 50, &bad),
        Err(StoreError::Tier(TierFailure::Frame { .. }))
    ));
    assert!(store.verify().expect("verify").is_ok());
}

#[test]
fn frame_streams_resume_after_reopening_and_survive_deletes_and_moves() {
    let f = fixture(TierConfig::default());
    {
        let store = f.open();
        store
            .set_policy("agent.*", TierPolicy::tiered(Tier::Hot8))
            .expect("policy");
        for t in 0..5u64 {
            store
                .append_frame("agent.kv", t, &frame(t, 1.0))
                .expect("append");
        }
    }
    let store = f.open();
    let a = store
        .append_frame("agent.kv", 5, &frame(5, 1.0))
        .expect("append");
    assert_eq!((a.frame, a.new_epoch), (5, false));
    store.delete("agent.kv", 2).expect("delete");
    for t in [0u64, 1, 3, 4, 5] {
        check_frame(&store, "agent.kv", t, &frame(t, 1.0));
    }
    // Nobody reads them: the policy moves the frames out of their segment to 7 bits.
    store.maintain(11 * MINUTE).expect("maintain");
    assert!(tiers_of(&store, "agent.kv", 3)
        .iter()
        .all(|t| *t == Tier::Warm7));
    let t = store.get("agent.kv", 3).expect("get");
    assert!(matches!(t.fidelity, Fidelity::Bounded { bits: 7, .. }));
    // The open epoch's frames left its segment: the next frame starts a new one.
    let a = store
        .append_frame("agent.kv", 6, &frame(6, 1.0))
        .expect("append");
    assert_eq!((a.frame, a.new_epoch), (0, true));
    check_frame(&store, "agent.kv", 6, &frame(6, 1.0));
    assert!(store.verify().expect("verify").is_ok());
}
