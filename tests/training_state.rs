//! Training state through every lossy path (issue 27, ADR 0027): every role a trainer's
//! checkpoint holds (weights, first and second moments, step counters, RNG and scheduler
//! state), named as the drop-ins name them, and the same data under neutral names (the data's
//! own domain guards it then), is aged under default and loose budgets and moved through every
//! tier. After each, every version of every tensor reads back in its domain: second moments
//! and other non-negative tensors never below zero, counters and every tensor of integers
//! bit-exact, no NaN or infinity anywhere, and the fidelity of each read says what it is.

#![allow(clippy::panic)]

use std::collections::BTreeMap;

use strata::store::{
    AgePolicy, Budget, Clock, DType, Fidelity, Options, Reconstruct, Role, RoleRule, Store,
    TensorRef, Tier, TierConfig, TierOptions, TierPolicy,
};
use strata_testkit::noise::{f32_bytes, f32s, Rng};

const MINUTE: u64 = 60_000;
const HOUR: u64 = 60 * MINUTE;

/// What a tensor's values must stay.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// Signed real values.
    Real,
    /// Non-negative values (second moments, variances).
    NonNegative,
    /// Whole numbers (counters, token counts): always exact.
    Integers,
}

/// A checkpoint's tensors at `step`: name, kind, shape, values.
fn state(step: u64) -> Vec<(String, Kind, Vec<u64>, Vec<f32>)> {
    let mut rng = Rng::new(27 + step);
    let mut normal = move || {
        // Sum of uniforms: near-normal, deterministic.
        (0..4).map(|_| rng.unit() as f32).sum::<f32>() - 2.0
    };
    let n = 96 * 64;
    let base: Vec<f32> = (0..n)
        .map(|i| ((i * 7919 % 1000) as f32 / 1000.0 - 0.5) * 0.1)
        .collect();
    let weights: Vec<f32> = base
        .iter()
        .map(|&w| w + 1e-3 * step as f32 + 1e-4 * normal())
        .collect();
    let exp_avg: Vec<f32> = (0..n).map(|_| 1e-3 * normal()).collect();
    let exp_avg_sq: Vec<f32> = (0..n)
        .map(|i| {
            if i % 53 == 0 {
                0.0
            } else {
                let g = 1e-3 * normal() * (1 + i % 9) as f32;
                g * g * (1.0 + 0.05 * step as f32)
            }
        })
        .collect();
    let counts: Vec<f32> = (0..1024)
        .map(|i| ((i * 31 + step as usize) % 97) as f32)
        .collect();
    let variance: Vec<f32> = (0..1024)
        .map(|i| (1e-4 * (i % 13) as f32) + 1e-6 * step as f32)
        .collect();
    let s = |v: &[u64]| v.to_vec();
    vec![
        (
            "blocks.0.attn.weight".into(),
            Kind::Real,
            s(&[96, 64]),
            weights.clone(),
        ),
        (
            "__trainer__/optimizer/state/0/exp_avg".into(),
            Kind::Real,
            s(&[96, 64]),
            exp_avg.clone(),
        ),
        (
            "__trainer__/optimizer/state/0/exp_avg_sq".into(),
            Kind::NonNegative,
            s(&[96, 64]),
            exp_avg_sq.clone(),
        ),
        (
            "__trainer__/optimizer/state/0/step".into(),
            Kind::Integers,
            s(&[]),
            vec![step as f32 * 25.0],
        ),
        (
            "__trainer__/lr_scheduler/last_epoch".into(),
            Kind::Integers,
            s(&[1]),
            vec![step as f32],
        ),
        // The same kinds of data under names that say nothing: the data guards them.
        (
            "data.token_counts".into(),
            Kind::Integers,
            s(&[32, 32]),
            counts,
        ),
        (
            "stats.spread".into(),
            Kind::NonNegative,
            s(&[32, 32]),
            variance,
        ),
        (
            "custom.acc".into(),
            Kind::NonNegative,
            s(&[96, 64]),
            exp_avg_sq,
        ),
    ]
}

fn save(store: &Store, step: u64, bf16: bool) -> BTreeMap<String, (Kind, Vec<u8>)> {
    let tensors = state(step);
    let dtype = if bf16 { DType::BF16 } else { DType::F32 };
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, _, _, v)| {
            if bf16 {
                strata::codec::convert::from_f32(DType::BF16, v).expect("bf16")
            } else {
                f32_bytes(v)
            }
        })
        .collect();
    let refs: Vec<(&str, TensorRef<'_>)> = tensors
        .iter()
        .zip(&bytes)
        .map(|((name, _, shape, _), b)| {
            (
                name.as_str(),
                TensorRef {
                    dtype,
                    shape,
                    bytes: b,
                },
            )
        })
        .collect();
    store.save_checkpoint(step, &refs, "{}").expect("save");
    tensors
        .into_iter()
        .zip(bytes)
        .map(|((name, kind, _, _), b)| (name, (kind, b)))
        .collect()
}

/// Every version of every tensor reads back in its domain; returns how many reads were lossy.
fn check(
    store: &Store,
    written: &BTreeMap<u64, BTreeMap<String, (Kind, Vec<u8>)>>,
    bf16: bool,
    what: &str,
) -> usize {
    let dtype = if bf16 { DType::BF16 } else { DType::F32 };
    let mut lossy = 0;
    for (step, tensors) in written {
        for (name, (kind, exact)) in tensors {
            let t = store
                .get(name, *step)
                .unwrap_or_else(|e| panic!("{what}: {name}@{step}: {e}"));
            let values = if bf16 {
                strata::codec::convert::to_f32(dtype, &t.data).expect("bf16")
            } else {
                f32s(&t.data)
            };
            assert!(
                values.iter().all(|x| x.is_finite()),
                "{what}: {name}@{step} reads back a non-finite value ({:?})",
                t.fidelity
            );
            match kind {
                Kind::Integers => assert!(
                    t.data == *exact && t.fidelity == Fidelity::Exact,
                    "{what}: {name}@{step}, integers, changed ({:?})",
                    t.fidelity
                ),
                Kind::NonNegative => {
                    let negative = values.iter().filter(|&&x| x < 0.0).count();
                    assert_eq!(
                        negative, 0,
                        "{what}: {name}@{step} has {negative} values below zero ({:?})",
                        t.fidelity
                    );
                }
                Kind::Real => {}
            }
            if t.fidelity != Fidelity::Exact {
                lossy += 1;
            } else {
                assert!(
                    t.data == *exact,
                    "{what}: {name}@{step} claims exact and is not"
                );
            }
        }
    }
    lossy
}

#[test]
fn every_role_stays_in_its_domain_through_aging() {
    for bf16 in [false, true] {
        let policies = [
            ("the default policy", AgePolicy::default()),
            (
                "loose budgets",
                AgePolicy {
                    budget: 0.3,
                    update_budget: None,
                    first_moment_budget: Some(1.0),
                    second_moment_budget: Some(0.9),
                    ..AgePolicy::default()
                },
            ),
            (
                "every tensor called a weight",
                AgePolicy {
                    budget: 0.5,
                    update_budget: None,
                    roles: vec![RoleRule {
                        pattern: "*".into(),
                        role: Role::Weight,
                    }],
                    rules: vec![strata::store::AgeRule {
                        pattern: "*".into(),
                        budget: Some(0.5),
                    }],
                    ..AgePolicy::default()
                },
            ),
        ];
        for (what, policy) in policies {
            let dir = tempfile::tempdir().expect("temp dir");
            let mut store = Store::open(dir.path().join("s.strata")).expect("open");
            let written: BTreeMap<u64, _> = (1..=6).map(|s| (s, save(&store, s, bf16))).collect();
            let report = store.age(&policy).expect("age");
            assert!(report.versions_aged > 0, "{what}: nothing aged: {report:?}");
            let what = format!("{what} ({})", if bf16 { "bf16" } else { "f32" });
            let lossy = check(&store, &written, bf16, &what);
            assert!(lossy > 0, "{what}: no read was lossy");
            assert!(store.verify().expect("verify").is_ok());
        }
    }
}

#[test]
fn every_role_stays_in_its_domain_through_every_tier() {
    for reconstruct in [
        Reconstruct::None,
        Reconstruct::Delta {
            base: strata::store::Source::same_step("blocks.0.attn.weight"),
            keep: 0.01,
        },
    ] {
        let dir = tempfile::tempdir().expect("temp dir");
        let (clock, handle) = Clock::manual(0);
        let opts = Options {
            tiering: TierOptions {
                config: TierConfig {
                    allow_zero_fill: true,
                    ..TierConfig::default()
                },
                budget: Budget::UNLIMITED,
                clock,
                ..TierOptions::default()
            },
            ..Options::default()
        };
        let store = Store::open_with(dir.path().join("t.strata"), opts).expect("open");
        store
            .set_policy(
                "*",
                TierPolicy::tiered(Tier::Hot8).with_reconstruct(reconstruct.clone()),
            )
            .expect("policy");
        store
            .set_policy("blocks.*", TierPolicy::exact())
            .expect("policy");
        let written: BTreeMap<u64, _> = (1..=2).map(|s| (s, save(&store, s, false))).collect();
        check(&store, &written, false, "written at 8 bits");
        for (now, what) in [
            (11 * MINUTE, "warm"),
            (22 * MINUTE, "cold"),
            (48 * HOUR, "tier 0"),
        ] {
            handle.set(now);
            store.maintain(now).expect("maintain");
            let what = format!("{what}, {reconstruct:?}");
            // Tier 0 reads of a signed tensor are zeros or rebuilt: in its (real) domain.
            check(&store, &written, false, &what);
        }
    }
}

/// The rule for tensors of one dimension: a norm's (or bias's) weights stay exact, and its
/// AdamW moments age by their role, as a matrix's do (ADR 0027: they were most of what an
/// aged fine-tuning checkpoint still stored). A scalar of any role stays exact.
#[test]
fn moments_of_norms_age_by_role_and_norms_stay_exact() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Store::open(dir.path().join("n.strata")).expect("open");
    let n = 4096;
    let names = [
        ("blocks.0.norm.weight", vec![n as u64]),
        ("__trainer__/optimizer/state/1/exp_avg", vec![n as u64]),
        ("__trainer__/optimizer/state/1/exp_avg_sq", vec![n as u64]),
        ("__trainer__/optimizer/state/2/exp_avg_sq", vec![]),
    ];
    let mut written = BTreeMap::new();
    for step in 1..=5u64 {
        let mut rng = Rng::new(step);
        let mut normal = move || (0..4).map(|_| rng.unit() as f32).sum::<f32>() - 2.0;
        let norm: Vec<f32> = (0..n).map(|_| 1.0 + 1e-2 * normal()).collect();
        let m: Vec<f32> = (0..n).map(|_| 1e-3 * normal()).collect();
        let v: Vec<f32> = m.iter().map(|x| x * x * 3.0).collect();
        let values = [norm, m, v, vec![2.5e-7 * step as f32]];
        let bytes: Vec<Vec<u8>> = values.iter().map(|v| f32_bytes(v)).collect();
        let refs: Vec<(&str, TensorRef<'_>)> = names
            .iter()
            .zip(&bytes)
            .map(|((name, shape), b)| {
                let t = TensorRef {
                    dtype: DType::F32,
                    shape,
                    bytes: b,
                };
                (*name, t)
            })
            .collect();
        store.save_checkpoint(step, &refs, "{}").expect("save");
        written.insert(step, bytes);
    }
    let report = store.age(&AgePolicy::training_state()).expect("age");
    assert_eq!(report.aged, vec![1, 2, 3]);
    for (step, bytes) in &written {
        for ((name, _), exact) in names.iter().zip(bytes) {
            let t = store.get(name, *step).expect("get");
            let values = f32s(&t.data);
            assert!(values.iter().all(|x| x.is_finite()), "{name}@{step}");
            if report.aged.contains(step) && name.contains("/state/1/") {
                assert!(
                    matches!(t.fidelity, Fidelity::Aged { .. }),
                    "{name}@{step}: {:?}",
                    t.fidelity
                );
            } else {
                assert_eq!(t.fidelity, Fidelity::Exact, "{name}@{step}");
                assert!(t.data == *exact, "{name}@{step} claims exact and is not");
            }
            if name.ends_with("exp_avg_sq") {
                assert!(values.iter().all(|&x| x >= 0.0), "{name}@{step} below zero");
            }
        }
    }
}
