//! Aging: [`Store::age`] keeps the last checkpoints, every K-th and the tagged ones
//! bit-exact and re-encodes the others lossy, as quantized deltas against the reconstruction
//! of a newer version, under a relative error budget per tensor (ADR 0020).

use std::collections::{BTreeMap, BTreeSet};

use strata_codec::aged;
use wildmatch::WildMatch;

use crate::engine::{age_versions, AgeHow, AgeJob, AgeTally, View, WriteTxn};
use crate::error::{DbContext, InvalidInput, NotFound, Result, StoreError};
use crate::retain::RetainPolicy;
use crate::roles::{role_of, Role, RoleRule};
use crate::stats::stored_sizes_of;
use crate::store::{contain, Store};

/// Deepest chain of aged versions a read decodes by default: aged versions are old
/// history, read rarely, and each aged link is a cheap decode (an entropy-coded delta
/// and an add), so a 20-checkpoint series ages as one chain.
pub const DEFAULT_AGE_CHAIN: u8 = 32;

/// [`AgePolicy::update_budget`] by default: an aged version's error is at most half its
/// distance from its newer neighbour.
pub const DEFAULT_UPDATE_BUDGET: f64 = 0.5;

/// An error budget for the tensors whose names match a pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct AgeRule {
    /// Name pattern: `*` any run of characters, `?` one character.
    pub pattern: String,
    /// Largest relative Frobenius error of a block; `None` keeps the tensors exact.
    pub budget: Option<f64>,
}

/// Which checkpoints [`Store::age`] ages and how far.
#[derive(Debug, Clone, PartialEq)]
pub struct AgePolicy {
    /// The `n` latest checkpoints stay exact (at least 1: training resumes from the latest).
    pub keep_exact_last: usize,
    /// Every checkpoint whose step is a multiple of `k` stays exact.
    pub keep_exact_every: Option<u64>,
    /// Tagged checkpoints stay exact (pointer tags, [`POINTER_TAG_PREFIX`], do not count).
    pub keep_tagged: bool,
    /// Largest relative Frobenius error `‖aged − exact‖ / ‖exact‖` of each block of a tensor
    /// of two or more dimensions, unless a rule says otherwise.
    pub budget: f64,
    /// Largest error of a block relative to its distance from its base, the reconstruction
    /// of the newer version it is a delta against: below 1, an aged version stays closer to
    /// its own exact data than to its newer neighbour, so it keeps its history however loose
    /// `budget` is. Fine-tuning steps move weights by well under 1 % of their norm, so a
    /// norm budget alone of 1e-2 would let old checkpoints turn into newer ones. `None`: no
    /// such bound (the norm budget alone).
    pub update_budget: Option<f64>,
    /// Budgets by name pattern, first match first; they beat `budget` and the rule that
    /// keeps scalars and 1-D weights (norms, biases) exact.
    pub rules: Vec<AgeRule>,
    /// Age exactly these checkpoints (each refused if the rules above keep it exact);
    /// `None` ages every checkpoint the rules do not keep.
    pub steps: Option<Vec<u64>>,
    /// Most segments a read of an aged block decodes.
    pub max_chain: u8,
    /// Roles by name pattern, first match first, before the role is read from the name
    /// ([`crate::roles`]; ADR 0027). Counters and other training state stay exact whatever
    /// the budgets; weights take `budget` and `update_budget`, moments the budgets below.
    pub roles: Vec<RoleRule>,
    /// Largest relative Frobenius error of a block of a first moment (Adam's `exp_avg`),
    /// aged against zero or the newer version, whichever costs less (1: it may read back as
    /// zeros, what a resumed optimizer rebuilds within tens of steps); `None`: exact.
    pub first_moment_budget: Option<f64>,
    /// Largest relative error of each element of a second moment (Adam's `exp_avg_sq`), in
    /// the log-relative mode: an aged second moment is never below zero; `None`: exact.
    pub second_moment_budget: Option<f64>,
}

impl Default for AgePolicy {
    /// The last 2 checkpoints and the tagged ones exact, a 1e-3 budget and at most half the
    /// distance from the newer neighbour, one chain.
    fn default() -> Self {
        AgePolicy {
            keep_exact_last: 2,
            keep_exact_every: None,
            keep_tagged: true,
            budget: 1e-3,
            update_budget: Some(DEFAULT_UPDATE_BUDGET),
            rules: Vec::new(),
            steps: None,
            max_chain: DEFAULT_AGE_CHAIN,
            roles: Vec::new(),
            first_moment_budget: Some(DEFAULT_FIRST_MOMENT_BUDGET),
            second_moment_budget: Some(DEFAULT_SECOND_MOMENT_BUDGET),
        }
    }
}

impl AgePolicy {
    /// The budgets for full training-state checkpoints (weights and optimizer state),
    /// measured to keep training resumed from every aged checkpoint within 1 % of resuming
    /// from the exact one (`benches/trainstate`, ADR 0027): weights within 5 % of their norm
    /// and 80 % of their distance from the newer checkpoint, first moments free to read back
    /// as zeros (the optimizer rebuilds them within tens of steps), second moments within
    /// 50 % of each element (in the log domain: never below zero). The last 2 checkpoints
    /// and tagged ones stay exact, as by default.
    pub fn training_state() -> AgePolicy {
        AgePolicy {
            budget: TRAINING_STATE_BUDGET,
            update_budget: Some(TRAINING_STATE_UPDATE_BUDGET),
            first_moment_budget: Some(1.0),
            second_moment_budget: Some(0.5),
            ..AgePolicy::default()
        }
    }
}

/// [`AgePolicy::training_state`]'s budget for weights.
pub const TRAINING_STATE_BUDGET: f64 = 5e-2;
/// [`AgePolicy::training_state`]'s update budget for weights.
pub const TRAINING_STATE_UPDATE_BUDGET: f64 = 0.8;

/// Tags of this prefix are pointers (`strata.lightning`'s `.ckpt` files name their checkpoint
/// by a tag `lightning:<path>`), which [`AgePolicy::keep_tagged`] does not count.
pub const POINTER_TAG_PREFIX: &str = "lightning:";

/// [`AgePolicy::first_moment_budget`] by default.
pub const DEFAULT_FIRST_MOMENT_BUDGET: f64 = 1e-2;
/// [`AgePolicy::second_moment_budget`] by default.
pub const DEFAULT_SECOND_MOMENT_BUDGET: f64 = 1e-2;

/// What [`Store::age`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct AgeReport {
    /// Steps of the checkpoints aged by this pass.
    pub aged: Vec<u64>,
    /// Steps of the checkpoints kept exact by the policy.
    pub kept: Vec<u64>,
    /// Tensor versions made lossy.
    pub versions_aged: u64,
    /// Tensor versions of aged checkpoints left exact: kept by a rule, by a pin, by their
    /// dtype (only f32, f16 and bf16 age), already tiered, or because no block aged.
    pub versions_exact: u64,
    /// Blocks left lossless because no quantization step met their budget.
    pub blocks_unmet: u64,
    /// The largest measured relative error of an aged version.
    pub max_rel_error: f64,
    /// Stored bytes (segments and records) before and after.
    pub stored_bytes_before: u64,
    /// Stored bytes after.
    pub stored_bytes_after: u64,
    /// File size before.
    pub file_bytes_before: u64,
    /// File size after aging and compacting.
    pub file_bytes_after: u64,
    /// Whether the file was compacted (not while a read-only process reads: see
    /// [`crate::RetainReport::compacted`]; never by [`Store::age_dry_run`]).
    pub compacted: bool,
    /// Why the file was not compacted after the pass, when a compaction was tried and could
    /// not run: a read in progress, or the compaction's error. The pass is committed either
    /// way.
    pub compaction_deferred: Option<String>,
}

impl AgePolicy {
    fn validate(&self) -> Result<()> {
        let fail = |reason: String| Err(StoreError::Invalid(InvalidInput::Options { reason }));
        if self.keep_exact_last == 0 {
            return fail(
                "keep_exact_last must be at least 1: the latest checkpoint stays exact".into(),
            );
        }
        if self.keep_exact_every == Some(0) {
            return fail("keep_exact_every must be at least 1".into());
        }
        let budgets = std::iter::once(Some(self.budget)).chain(self.rules.iter().map(|r| r.budget));
        for b in budgets.flatten() {
            if !(b.is_finite() && b > 0.0 && b < 1.0) {
                return fail(format!("budget {b} must be a relative error in (0, 1)"));
            }
        }
        if let Some(u) = self.update_budget {
            if !(u.is_finite() && u > 0.0) {
                return fail(format!("update_budget {u} must be a positive number"));
            }
        }
        if let Some(b) = self.first_moment_budget {
            if !(b.is_finite() && b > 0.0 && b <= 1.0) {
                return fail(format!(
                    "first_moment_budget {b} must be a relative error in (0, 1] (1: the moment may read back as zeros)"
                ));
            }
        }
        if let Some(b) = self.second_moment_budget {
            if !(b.is_finite() && b > 0.0 && b < 1.0) {
                return fail(format!(
                    "second_moment_budget {b} must be a relative error in (0, 1)"
                ));
            }
        }
        if self.max_chain < 2 {
            return fail("max_chain must be at least 2 (a base and one aged delta)".into());
        }
        Ok(())
    }

    /// How the versions of tensor `name` (of `role`, with `ndim` dimensions) age, or `None`
    /// when they stay exact: counters and other state always exact; then a rule's budget
    /// (`None`: exact); then scalars, and weights of one dimension (norms, biases), exact;
    /// then the role's budget. The moments of norms and biases age by their role: resuming
    /// needs them no more precisely than a matrix's (ADR 0027, finetune-f32).
    fn how(
        &self,
        rules: &[(WildMatch, Option<f64>)],
        name: &str,
        role: Role,
        ndim: usize,
    ) -> Option<AgeHow> {
        if matches!(role, Role::Counter | Role::State) {
            return None;
        }
        let rule = rules.iter().find(|(m, _)| m.matches(name)).map(|(_, b)| *b);
        let budget = match rule {
            Some(b) => Some(b?),
            None if ndim == 0 || (ndim < 2 && role == Role::Weight) => return None,
            None => None,
        };
        Some(match role {
            Role::Weight => AgeHow::Linear(aged::Budget {
                of_norm: budget.unwrap_or(self.budget),
                of_delta: self.update_budget,
            }),
            Role::FirstMoment => AgeHow::LinearOrAlone(aged::Budget {
                of_norm: budget.or(self.first_moment_budget)?,
                of_delta: None,
            }),
            Role::SecondMoment => AgeHow::Log(budget.or(self.second_moment_budget)?),
            Role::Counter | Role::State => return None,
        })
    }
}

impl Store {
    /// Ages old checkpoints: every checkpoint `policy` does not keep exact has its tensor
    /// versions re-encoded lossy under their error budget (scalars, 1-D weights, counters,
    /// other state and pinned tensors stay exact), in one transaction, then the file is
    /// compacted. Exact versions that depended on an aged one are re-based first, in the
    /// same transaction: a crash leaves every checkpoint exact or aged. A read of an aged
    /// version returns [`crate::Fidelity::Aged`] with the error measured when it was aged.
    /// Versions already aged or tiered are left as they are. Aging cannot be undone:
    /// [`Store::age_dry_run`] runs the same pass and rolls it back.
    ///
    /// # Errors
    /// [`InvalidInput::Options`] for a bad policy, [`InvalidInput::AgeRefused`] for a step
    /// of `policy.steps` the policy keeps exact, [`NotFound::Checkpoint`] for a step that is
    /// no checkpoint (nothing changed then); read and encode errors of the versions
    /// (nothing changed); [`StoreError::Compaction`] from the compaction before the pass
    /// (nothing changed). Once the pass is committed nothing fails: a compaction that cannot
    /// run is [`AgeReport::compaction_deferred`].
    pub fn age(&mut self, policy: &AgePolicy) -> Result<AgeReport> {
        let path = self.path.clone();
        contain(&path, "aging", || {
            policy.validate()?;
            let file_bytes_before = self.file_bytes()?;
            let (targets, kept) = self.age_targets(policy)?;
            // Compacted first as well: on a store reopened with the growth slack of its imports
            // still in the file, compacting only after the pass left the file 1.6x its stored
            // bytes (MiniLM, 20 checkpoints); compacting before, 1.02x.
            self.compact_if_idle()?;
            let pass = {
                let _writer = self.writer.lock();
                self.write(|wt| self.age_pass(wt, policy, &targets))?
            };
            let compaction_deferred = self.compact_after_commit();
            let file_bytes_after = self.file_bytes()?;
            Ok(pass.report(
                (targets, kept),
                (file_bytes_before, file_bytes_after),
                compaction_deferred.is_none(),
                compaction_deferred,
            ))
        })
    }

    /// What [`Store::age`] would do with `policy`, measured by doing it: the same pass runs
    /// in a write transaction that is then rolled back, so the checkpoints it names, the
    /// versions it would age, their errors and the stored bytes after are those `age` would
    /// give now (`file_bytes_after` is the file's size, unchanged, and nothing is
    /// compacted). Nothing is committed, so no reader sees a change; the pages a large pass
    /// spills to the file before the rollback are free again after it (on the dev series the
    /// file kept its length and its space on disk). It holds the writer's lock for the
    /// length of the pass, as `age` does.
    ///
    /// # Errors
    /// Those of [`Store::age`] before its commit, and [`crate::InvalidInput::ReadOnly`] on
    /// a read-only handle.
    pub fn age_dry_run(&self, policy: &AgePolicy) -> Result<AgeReport> {
        contain(&self.path, "an aging dry run", || {
            policy.validate()?;
            let file_bytes = self.file_bytes()?;
            let (targets, kept) = self.age_targets(policy)?;
            let pass = {
                let _writer = self.writer.lock();
                let op = "an aging dry run";
                let rolled_back = (|| {
                    let txn = self.db.begin_write(&self.path, op)?;
                    let pass = {
                        let mut wt = WriteTxn::open(&txn, self.parts.clone())?;
                        self.age_pass(&mut wt, policy, &targets)?
                    };
                    txn.abort().ctx(op)?;
                    Ok(pass)
                })();
                rolled_back.map_err(|e: StoreError| e.on_file(&self.path))?
            };
            Ok(pass.report((targets, kept), (file_bytes, file_bytes), false, None))
        })
    }

    /// Ages the versions of the checkpoints `targets` in `wt`, measuring the stored bytes
    /// before and after.
    fn age_pass(
        &self,
        wt: &mut WriteTxn<'_>,
        policy: &AgePolicy,
        targets: &BTreeSet<u64>,
    ) -> Result<AgePass> {
        let rules: Vec<(WildMatch, Option<f64>)> = policy
            .rules
            .iter()
            .map(|r| (WildMatch::new(&r.pattern), r.budget))
            .collect();
        let stored_before = stored_sizes_of(wt)?;
        let pins = self.rules.read();
        // Per tensor, the steps to age: each tensor's chain is walked once.
        let mut by_tensor: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
        let mut tally = AgeTally::default();
        for &step in targets {
            let Some(cp) = wt.checkpoint(step)? else {
                continue;
            };
            // A packed tensor (ADR 0041) stays exact: its bytes are its pack part's.
            tally.versions_exact += cp.packed.len() as u64;
            for name in cp.unpacked() {
                by_tensor.entry(name.clone()).or_default().insert(step);
            }
        }
        let mut jobs = Vec::new();
        for (name, steps) in &by_tensor {
            let mut ageable = BTreeSet::new();
            let mut how = None;
            for &s in steps {
                let Some(rec) = wt.version(name, s)? else {
                    continue;
                };
                let role = role_of(&policy.roles, name, rec.dtype, &rec.shape);
                let h = policy.how(&rules, name, role, rec.shape.len());
                let lossless = rec
                    .blocks
                    .iter()
                    .all(|b| matches!(b.form, crate::record::Form::Lossless));
                if rec.aged.is_some() {
                    continue;
                }
                if h.is_none() || pins.is_pinned(name) || !aged::supports(rec.dtype) || !lossless {
                    tally.versions_exact += 1;
                    continue;
                }
                how = h;
                ageable.insert(s);
            }
            let Some(how) = how else {
                continue;
            };
            jobs.push(AgeJob {
                name: name.clone(),
                steps: ageable,
                how,
            });
        }
        let aged = age_versions(wt, &self.cache, &self.opts, jobs, policy.max_chain)?;
        tally.add(aged);
        Ok(AgePass {
            tally,
            stored_bytes_before: stored_before.total(),
            stored_bytes_after: stored_sizes_of(wt)?.total(),
        })
    }

    /// The checkpoints `policy` ages and those it keeps exact, or the refusal of an asked
    /// step, under the writer lock.
    fn age_targets(&self, policy: &AgePolicy) -> Result<(BTreeSet<u64>, BTreeSet<u64>)> {
        let _writer = self.writer.lock();
        let steps = self.checkpoints()?;
        // A pointer's tag (`lightning:<path>`, strata.lightning's `.ckpt` files) marks a
        // checkpoint a file names, not one the user asked to keep exact: an aged checkpoint
        // still loads through it.
        let tagged: BTreeMap<u64, String> = self
            .tags()?
            .into_iter()
            .filter(|(t, _)| !t.starts_with(POINTER_TAG_PREFIX))
            .map(|(t, s)| (s, t))
            .collect();
        let keep = RetainPolicy {
            keep_last: Some(policy.keep_exact_last),
            keep_every: policy.keep_exact_every,
            keep_tagged: policy.keep_tagged,
        };
        let kept = keep.kept(&steps, &tagged.keys().copied().collect());
        let targets: BTreeSet<u64> = match &policy.steps {
            None => steps
                .iter()
                .copied()
                .filter(|s| !kept.contains(s))
                .collect(),
            Some(asked) => {
                for &s in asked {
                    if steps.binary_search(&s).is_err() {
                        return Err(StoreError::NotFound(NotFound::Checkpoint { step: s }));
                    }
                    if kept.contains(&s) {
                        return Err(StoreError::Invalid(InvalidInput::AgeRefused {
                            step: s,
                            reason: refusal(policy, &steps, &tagged, s),
                        }));
                    }
                }
                asked.iter().copied().collect()
            }
        };
        Ok((targets, kept))
    }
}

/// What an aging pass did in its transaction.
struct AgePass {
    tally: AgeTally,
    stored_bytes_before: u64,
    stored_bytes_after: u64,
}

impl AgePass {
    /// The report of the pass over `targets`, `kept` exact, with the file's size before and
    /// after.
    fn report(
        self,
        (targets, kept): (BTreeSet<u64>, BTreeSet<u64>),
        (file_bytes_before, file_bytes_after): (u64, u64),
        compacted: bool,
        compaction_deferred: Option<String>,
    ) -> AgeReport {
        AgeReport {
            aged: targets.into_iter().collect(),
            kept: kept.into_iter().collect(),
            versions_aged: self.tally.versions_aged,
            versions_exact: self.tally.versions_exact,
            blocks_unmet: self.tally.blocks_unmet,
            max_rel_error: self.tally.max_rel_error,
            stored_bytes_before: self.stored_bytes_before,
            stored_bytes_after: self.stored_bytes_after,
            file_bytes_before,
            file_bytes_after,
            compacted,
            compaction_deferred,
        }
    }
}

/// Why the policy keeps checkpoint `step` exact.
fn refusal(policy: &AgePolicy, steps: &[u64], tagged: &BTreeMap<u64, String>, step: u64) -> String {
    if let (true, Some(tag)) = (policy.keep_tagged, tagged.get(&step)) {
        return format!("it is tagged {tag:?} (keep_tagged)");
    }
    if steps
        .iter()
        .rev()
        .take(policy.keep_exact_last)
        .any(|&s| s == step)
    {
        return format!(
            "it is one of the last {} checkpoints (keep_exact_last)",
            policy.keep_exact_last
        );
    }
    match policy.keep_exact_every {
        Some(k) => format!("its step is a multiple of {k} (keep_exact_every)"),
        None => "the policy keeps it exact".into(),
    }
}
