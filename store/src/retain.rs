//! Retention: [`Store::retain`] keeps the last few checkpoints, every K-th and the tagged
//! ones, deletes the rest with their tensor versions, and compacts the file.

use std::collections::{BTreeMap, BTreeSet};

use crate::engine::{delete_versions, View};
use crate::error::{InvalidInput, Result, StoreError};
use crate::store::{contain, Store};

/// Which checkpoints [`Store::retain`] keeps: the union of its rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetainPolicy {
    /// Keep the `n` latest checkpoints.
    pub keep_last: Option<usize>,
    /// Keep every checkpoint whose step is a multiple of `k` (`k >= 1`).
    pub keep_every: Option<u64>,
    /// Keep every checkpoint that has a tag.
    pub keep_tagged: bool,
}

impl Default for RetainPolicy {
    /// Keeps the 3 latest checkpoints and the tagged ones.
    fn default() -> Self {
        RetainPolicy {
            keep_last: Some(3),
            keep_every: None,
            keep_tagged: true,
        }
    }
}

impl RetainPolicy {
    /// The steps of `checkpoints` (ascending) this policy keeps, given the tagged steps.
    pub fn kept(&self, checkpoints: &[u64], tagged: &BTreeSet<u64>) -> BTreeSet<u64> {
        let mut keep = BTreeSet::new();
        if let Some(n) = self.keep_last {
            keep.extend(checkpoints.iter().rev().take(n).copied());
        }
        if let Some(k) = self.keep_every.filter(|&k| k > 0) {
            keep.extend(checkpoints.iter().copied().filter(|s| s % k == 0));
        }
        if self.keep_tagged {
            keep.extend(checkpoints.iter().copied().filter(|s| tagged.contains(s)));
        }
        keep
    }

    fn validate(&self) -> Result<()> {
        if self.keep_last.is_none() && self.keep_every.is_none() {
            return Err(StoreError::Invalid(InvalidInput::Options {
                reason: "a retention policy needs keep_last or keep_every".into(),
            }));
        }
        if self.keep_every == Some(0) {
            return Err(StoreError::Invalid(InvalidInput::Options {
                reason: "keep_every must be at least 1".into(),
            }));
        }
        Ok(())
    }
}

/// What [`Store::retain`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetainReport {
    /// Steps of the checkpoints kept.
    pub kept: Vec<u64>,
    /// Steps of the checkpoints deleted.
    pub removed: Vec<u64>,
    /// Tensor versions deleted with them.
    pub versions_removed: u64,
    /// File size before.
    pub file_bytes_before: u64,
    /// File size after deleting and compacting.
    pub file_bytes_after: u64,
    /// Whether the file was compacted. It is not while a read-only process
    /// ([`Store::open_read_only`]) has a read in progress: the freed pages are then reused by
    /// later writes instead, and a later `retain` or [`Store::compact`] shrinks the file.
    pub compacted: bool,
    /// Why the file was not compacted, when it was not: a read in progress, or the error of
    /// the compaction. The deletions are committed either way.
    pub compaction_deferred: Option<String>,
}

impl Store {
    /// Deletes every checkpoint `policy` does not keep, with all its tensor versions, in one
    /// transaction (versions that depend on a deleted one are re-based in it, as
    /// [`Store::delete`] does), then compacts the file. Versions written with
    /// [`Store::put`] outside any checkpoint are left alone.
    ///
    /// # Errors
    /// [`crate::InvalidInput::Options`] for a policy with neither `keep_last` nor `keep_every`
    /// (it would delete everything untagged) or with `keep_every` 0; the errors of
    /// [`Store::delete`] (nothing is deleted then). Once the deletions are committed nothing
    /// fails: a compaction that cannot run is [`RetainReport::compaction_deferred`].
    pub fn retain(&mut self, policy: &RetainPolicy) -> Result<RetainReport> {
        let path = self.path.clone();
        contain(&path, "applying retention", || {
            policy.validate()?;
            let file_bytes_before = self.file_bytes()?;
            let (kept, removed, versions_removed) = {
                let _writer = self.writer.lock();
                let steps = self.checkpoints()?;
                let tagged: BTreeSet<u64> = self.tags()?.into_iter().map(|(_, s)| s).collect();
                let kept = policy.kept(&steps, &tagged);
                let removed: Vec<u64> = steps
                    .iter()
                    .copied()
                    .filter(|s| !kept.contains(s))
                    .collect();
                let versions_removed = self.write(|wt| {
                    // Per tensor, the steps to delete: each tensor's versions are read once.
                    let mut by_tensor: BTreeMap<String, Vec<u64>> = BTreeMap::new();
                    for &step in &removed {
                        let Some(cp) = wt.checkpoint(step)? else {
                            continue;
                        };
                        for name in cp.tensors {
                            by_tensor.entry(name).or_default().push(step);
                        }
                        wt.remove_checkpoint(step)?;
                    }
                    let mut n = 0u64;
                    for (name, steps) in &by_tensor {
                        delete_versions(wt, &self.cache, &self.opts, name, steps)?;
                        n += steps.len() as u64;
                    }
                    Ok(n)
                })?;
                (kept.into_iter().collect(), removed, versions_removed)
            };
            let compaction_deferred = self.compact_after_commit();
            Ok(RetainReport {
                compacted: compaction_deferred.is_none(),
                compaction_deferred,
                kept,
                removed,
                versions_removed,
                file_bytes_before,
                file_bytes_after: self.file_bytes()?,
            })
        })
    }
}
