//! Retention: [`Store::retain`] keeps the last few checkpoints, every K-th and the tagged
//! ones, deletes the rest with their tensor versions, and compacts the file unless the room
//! it freed is what the next checkpoints will take (ADR 0037).

use std::collections::{BTreeMap, BTreeSet};

use crate::engine::{delete_versions, is_part_name, part_names, View, WriteTxn};
use crate::error::{InvalidInput, Result, StoreError};
use crate::read::stored_bytes;
use crate::stats::stored_sizes_of;
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
    /// Whether the file was compacted. It is not when the room the file takes on disk beyond
    /// its stored bytes is at most an eighth of the file or, after a retention that deleted
    /// one checkpoint, at most twice what the next save and retention will write (the newest
    /// checkpoint's stored bytes and the bytes this one re-encoded): the next writes reuse it,
    /// and a retention after every save does not pass over the whole store each time (ADR
    /// 0037). Nor is it while a read-only process ([`Store::open_read_only`]) has a read in
    /// progress. The freed pages are then reused by later writes, and a later `retain`,
    /// [`Store::compact`], or the handle's close (ADR 0038) shrinks the file.
    pub compacted: bool,
    /// Why the file was not compacted, when it was not: the room is kept for the next
    /// checkpoints, a read is in progress, or the error of the compaction. The deletions are
    /// committed either way.
    pub compaction_deferred: Option<String>,
}

/// What a retention leaves in the file, for the choice of compacting it (ADR 0037).
struct Room {
    /// Bytes the store holds (its records and segments): a lower bound of its pages in use.
    stored: u64,
    /// Bytes the newest checkpoint kept stores: about what the next save will write (with the
    /// newest kept a keyframe, and the checkpoint before it: the next save re-encodes the
    /// newest).
    newest: u64,
    /// Bytes of the segments the re-bases wrote: the versions that depended on a deleted
    /// one. Where a run's oldest checkpoint goes at every save, the next retention writes as
    /// much again.
    rewritten: u64,
    /// Checkpoints the retention deleted.
    removed: usize,
}

impl Room {
    /// Whether a file that takes `disk_bytes` is left as it is: its room beyond the stored
    /// bytes (an upper bound of its free pages) is at most an eighth of the file (ADR 0023's
    /// rule for imports), or, after a retention that deleted at most one checkpoint (one
    /// called after every save), at most twice what the next save and retention will write.
    /// A compaction passes over every page of the store, and the saves that follow would
    /// grow the file again. A retention that deleted more (a prune by hand) compacts.
    fn kept(&self, disk_bytes: u64) -> bool {
        let room = disk_bytes.saturating_sub(self.stored);
        let next = if self.removed <= 1 {
            self.newest.saturating_add(self.rewritten).saturating_mul(2)
        } else {
            0
        };
        room <= next.max(disk_bytes / 8)
    }
}

/// Bytes the checkpoint at `step` stores: its versions' records and segments (a block that
/// refers to an earlier one adds none), as [`crate::CheckpointSummary::stored_bytes`].
fn checkpoint_stored_bytes(wt: &WriteTxn<'_>, step: u64) -> Result<u64> {
    let Some(cp) = wt.checkpoint(step)? else {
        return Ok(0);
    };
    let mut sum = 0u64;
    // A packed tensor's bytes are in its checkpoint's pack parts (ADR 0041).
    for name in cp.unpacked().chain(&part_names(&cp)) {
        if let Some(rec) = wt.stored_version(name, step)? {
            sum = sum.saturating_add(stored_bytes(&rec));
        }
    }
    Ok(sum)
}

impl Store {
    /// Deletes every checkpoint `policy` does not keep, with all its tensor versions, in one
    /// transaction (versions that depend on a deleted one are re-based in it, as
    /// [`Store::delete`] does), then compacts the file unless the room it holds is what the
    /// next checkpoints will take ([`RetainReport::compacted`] says when). Versions written
    /// with [`Store::put`] outside any checkpoint are left alone.
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
            let (kept, removed, (versions_removed, room)) = {
                let _writer = self.writer.lock();
                let steps = self.checkpoints()?;
                let tagged: BTreeSet<u64> = self.tags()?.into_iter().map(|(_, s)| s).collect();
                let kept = policy.kept(&steps, &tagged);
                let removed: Vec<u64> = steps
                    .iter()
                    .copied()
                    .filter(|s| !kept.contains(s))
                    .collect();
                let counts = self.write(|wt| {
                    // Per tensor, the steps to delete: each tensor's versions are read once.
                    let mut by_tensor: BTreeMap<String, Vec<u64>> = BTreeMap::new();
                    for &step in &removed {
                        let Some(cp) = wt.checkpoint(step)? else {
                            continue;
                        };
                        for name in part_names(&cp).into_iter().chain(cp.tensors) {
                            by_tensor.entry(name).or_default().push(step);
                        }
                        wt.remove_checkpoint(step)?;
                    }
                    let (mut n, mut rewritten) = (0u64, 0u64);
                    for (name, steps) in &by_tensor {
                        rewritten += delete_versions(wt, &self.cache, &self.opts, name, steps)?;
                        if !is_part_name(name) {
                            n += steps.len() as u64;
                        }
                    }
                    let mut newest = match kept.last() {
                        Some(&step) => checkpoint_stored_bytes(wt, step)?,
                        None => 0,
                    };
                    if let Some(&before) = kept.iter().rev().nth(1) {
                        if self.opts.newest_keyframe {
                            // The next save writes keyframes and re-encodes the newest
                            // against them (ADR 0006): about the newest's bytes, and a delta
                            // as large as the one the checkpoint before it stores.
                            newest += checkpoint_stored_bytes(wt, before)?;
                        }
                    }
                    let room = Room {
                        stored: stored_sizes_of(wt)?.total(),
                        newest,
                        rewritten,
                        removed: removed.len(),
                    };
                    Ok((n, room))
                })?;
                (kept.into_iter().collect(), removed, counts)
            };
            // The bytes the file takes on disk: redb's unwritten room at its end costs none
            // (the close's trim returns it, ADR 0036).
            let disk_bytes = self.disk_bytes()?.min(self.file_bytes()?);
            let compaction_deferred = if room.kept(disk_bytes) {
                self.note_freed_pages();
                Some(format!(
                    "{} of the {disk_bytes} bytes the file takes on disk are kept as room for \
                     the next checkpoints and retentions (the newest checkpoint stores {} \
                     bytes, this retention re-encoded {}); compact returns them",
                    disk_bytes.saturating_sub(room.stored),
                    room.newest,
                    room.rewritten
                ))
            } else {
                self.compact_after_commit()
            };
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
