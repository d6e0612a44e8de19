//! Setting tier policy rules, and what changes for the tensors they match.
//!
//! A rule change re-resolves every tensor's policy in the same transaction:
//! - lossless versions of a tensor that becomes tiered get *pending* tier rows (tier
//!   `Exact`); the next [`Store::maintain`] converts them (re-basing their dependents first);
//! - quantized and Tier 0 blocks of a tensor whose new policy is exact, or pinned at another
//!   tier, are pinned where they are (their data cannot become exact again); pending rows
//!   of a tensor that is exact again are dropped;
//! - blocks of a tensor that stays tiered take the new policy.

use std::collections::HashMap;
use std::sync::Arc;

use strata_tiering::{AccessStats, Policy, Precision, Tier};

use crate::engine::{check_name, put_row, remove_rows, View, WriteTxn};
use crate::error::{DbContext, InvalidInput, NotFound, Result, StoreError};
use crate::record::{Rebuild, Rule, TierRow};
use crate::store::{contain, Store};
use crate::tiers::policy::TierPolicy;
use crate::tiers::rules::RuleSet;
use crate::tiers::runtime::{spec_of, tiering_reconstruct};

impl Store {
    /// Sets the tier policy of every tensor whose name matches `pattern` (`*` any run of
    /// characters, `?` one; a plain name matches itself). Among matching rules, pins win,
    /// then the longest pattern. Existing versions follow (see [`Store::maintain`] for
    /// lossless versions that become tiered).
    ///
    /// ```no_run
    /// use strata_store::{Store, Tier, TierPolicy};
    /// let store = Store::open("agent.strata")?;
    /// store.set_policy("kv.*", TierPolicy::tiered(Tier::Hot8))?;
    /// store.pin("*.norm*")?; // layer norms stay exact
    /// # Ok::<(), strata_store::StoreError>(())
    /// ```
    ///
    /// # Errors
    /// [`crate::InvalidInput::Policy`], [`crate::InvalidInput::Name`] for an empty pattern.
    pub fn set_policy(&self, pattern: &str, policy: TierPolicy) -> Result<()> {
        contain(&self.path, "setting a policy", || {
            self.change_rule(pattern, Some((false, policy)))
        })
    }

    /// Pins tensors matching `pattern` exact: they are stored losslessly and never move,
    /// whatever other rules say.
    ///
    /// # Errors
    /// Those of [`Store::set_policy`].
    pub fn pin(&self, pattern: &str) -> Result<()> {
        contain(&self.path, "pinning", || {
            self.change_rule(pattern, Some((true, TierPolicy::exact())))
        })
    }

    /// Removes the rule with this exact pattern.
    ///
    /// # Errors
    /// [`crate::NotFound::Policy`].
    pub fn remove_policy(&self, pattern: &str) -> Result<()> {
        contain(&self.path, "removing a policy", || {
            self.change_rule(pattern, None)
        })
    }

    /// Every rule: pattern, whether it is a pin, and its policy, by priority.
    pub fn policies(&self) -> Vec<(String, bool, TierPolicy)> {
        self.rules
            .read()
            .rules()
            .map(|r| (r.pattern.clone(), r.pin, r.policy.clone()))
            .collect()
    }

    /// The policy tensor `name` gets.
    pub fn policy_of(&self, name: &str) -> TierPolicy {
        self.rules.read().resolve(name)
    }

    fn change_rule(&self, pattern: &str, change: Option<(bool, TierPolicy)>) -> Result<()> {
        check_name(pattern)?;
        if let Some((_, p)) = &change {
            p.validate().map_err(|reason| {
                StoreError::Invalid(InvalidInput::Policy {
                    pattern: pattern.to_string(),
                    reason,
                })
            })?;
        }
        let _writer = self.writer.lock();
        let old = self.rules.read().rules().cloned().collect::<Vec<Rule>>();
        let mut new: Vec<Rule> = old
            .iter()
            .filter(|r| r.pattern != pattern)
            .cloned()
            .collect();
        match &change {
            Some((pin, policy)) => new.push(Rule {
                pattern: pattern.to_string(),
                pin: *pin,
                policy: policy.clone(),
            }),
            None if new.len() == old.len() => {
                return Err(StoreError::NotFound(NotFound::Policy {
                    pattern: pattern.to_string(),
                }))
            }
            None => {}
        }
        let (old_set, new_set) = (RuleSet::new(old), RuleSet::new(new));
        let names = self.tensors()?;
        let now = self.opts.tiering.clock.now();
        // Read statistics so far, kept in the rows of blocks that are re-registered.
        let stats: HashMap<u64, AccessStats> = {
            let rt = self.tiers.lock();
            rt.location
                .keys()
                .filter_map(|&id| Some((id, rt.state.stats(id).ok()?)))
                .collect()
        };
        self.write(|wt| {
            match &change {
                Some(_) => {
                    let rule = new_set
                        .rules()
                        .find(|r| r.pattern == pattern)
                        .ok_or_else(|| {
                            StoreError::NotFound(NotFound::Policy {
                                pattern: pattern.to_string(),
                            })
                        })?;
                    wt.policies
                        .insert(pattern.as_bytes(), rule.encode_value().as_slice())
                        .ctx("writing a tier policy rule")?;
                }
                None => {
                    wt.policies
                        .remove(pattern.as_bytes())
                        .ctx("removing a tier policy rule")?;
                }
            }
            for name in &names {
                let (before, after) = (old_set.resolve(name), new_set.resolve(name));
                if before != after {
                    follow_policy(wt, name, &after, &stats, now)?;
                }
            }
            Ok(())
        })?;
        *self.rules.write() = new_set;
        Ok(())
    }
}

/// Brings the tier rows of every version of `name` in line with `policy`.
fn follow_policy(
    wt: &mut WriteTxn<'_>,
    name: &str,
    policy: &TierPolicy,
    stats: &HashMap<u64, AccessStats>,
    now: u64,
) -> Result<()> {
    let reconstruct = tiering_reconstruct(&policy.reconstruct);
    for (step, rec) in wt.versions_of(name)? {
        let vid: (Arc<str>, u64) = (Arc::from(name), step);
        let rows = wt.tier_rows(name, step)?;
        if rows.is_empty() {
            // A lossless version; an inline one stays exact (ADR 0029).
            if policy.is_lossy() && rec.dtype.is_float() && rec.inline.is_none() {
                let first = wt.take_block_ids(rec.blocks.len() as u64)?;
                for b in 0..rec.blocks.len() as u32 {
                    let row = TierRow {
                        id: first + u64::from(b),
                        tier: Tier::Exact,
                        policy: policy.policy,
                        since: now,
                        precision: Precision::Exact,
                        residual: None,
                        rebuild: Rebuild::None,
                        stats: None,
                    };
                    put_row(wt, name, step, b, &row)?;
                }
                wt.tier_changes.pending.push(vid);
            }
            continue;
        }
        let pending = rows.iter().all(|(_, r)| r.tier == Tier::Exact);
        if pending && !policy.is_lossy() {
            // Exact again before it was converted: the version stays lossless.
            remove_rows(wt, name, step)?;
            continue;
        }
        wt.tier_changes.forgotten.push(vid.clone());
        if pending {
            for (b, mut row) in rows {
                row.policy = policy.policy;
                put_row(wt, name, step, b, &row)?;
            }
            wt.tier_changes.pending.push(vid);
            continue;
        }
        for (b, mut row) in rows {
            row.policy = match policy.policy {
                Policy::Tiered { start } => Policy::Tiered { start },
                Policy::Pinned(t) if t == row.tier => Policy::Pinned(t),
                // Exact, or pinned elsewhere: the data stays where it is.
                _ => Policy::Pinned(row.tier),
            };
            if let Some(s) = stats.get(&row.id) {
                row.stats = Some(*s);
            }
            put_row(wt, name, step, b, &row)?;
            let values = rec.block_len(u64::from(b)) as u32;
            wt.tier_changes
                .registered
                .push((vid.clone(), b, spec_of(&row, values, reconstruct)));
        }
    }
    Ok(())
}
