//! [`Store::verify`]: decode every block of every version and audit the segment index.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use redb::ReadableTable;

use crate::engine::{
    all_members, decode_all, is_part_name, part_names, row_blobs, BlockCache, Fetcher, ReadTxn,
    View,
};
use crate::error::{Corruption, DbContext, Result, StoreError};
use crate::record::Stored;
use crate::record::{decode_version_key, CheckpointRecord, SegmentInfo, VersionRecord};
use crate::store::{contain, Store};

/// A problem [`Store::verify`] found.
#[derive(Debug)]
#[non_exhaustive]
pub enum Issue {
    /// A block cannot be read back.
    Block {
        /// Tensor name.
        tensor: String,
        /// Step of the version.
        step: u64,
        /// Block index.
        block: u64,
        /// Why (the error a `get` would return).
        error: StoreError,
    },
    /// A version record cannot be decoded.
    Version {
        /// Tensor name (lossy if the key itself is damaged).
        tensor: String,
        /// Step.
        step: u64,
        /// Why.
        error: StoreError,
    },
    /// The segment index disagrees with the blocks or the chunks.
    Segment {
        /// Content address.
        address: u128,
        /// What disagrees.
        reason: String,
    },
    /// A tier row cannot be decoded or has no version.
    TierRow {
        /// Tensor name.
        tensor: String,
        /// Step.
        step: u64,
        /// Block index.
        block: u64,
        /// What is wrong.
        reason: String,
    },
    /// A checkpoint or tag refers to something that is not there.
    Checkpoint {
        /// Checkpoint step.
        step: u64,
        /// What is wrong.
        reason: String,
    },
}

impl std::fmt::Display for Issue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Issue::Block { error, .. } | Issue::Version { error, .. } => write!(f, "{error}"),
            Issue::Segment { address, reason } => write!(f, "segment {address:032x}: {reason}"),
            Issue::Checkpoint { step, reason } => write!(f, "checkpoint {step}: {reason}"),
            Issue::TierRow {
                tensor,
                step,
                block,
                reason,
            } => write!(
                f,
                "tier row of tensor {tensor:?} step {step} block {block}: {reason}"
            ),
        }
    }
}

/// What [`Store::verify`] checked and found.
#[derive(Debug, Default)]
pub struct VerifyReport {
    /// Versions walked.
    pub versions: u64,
    /// Blocks decoded.
    pub blocks: u64,
    /// Segments in the index.
    pub segments: u64,
    /// Checkpoints checked.
    pub checkpoints: u64,
    /// Every problem, in the order found.
    pub issues: Vec<Issue>,
}

impl VerifyReport {
    /// Whether nothing is wrong.
    pub fn is_ok(&self) -> bool {
        self.issues.is_empty()
    }
}

impl Store {
    /// Reads every block of every version back through its whole chain (checksums and
    /// content hashes included, bypassing the shared cache), checks reference counts, chunks,
    /// checkpoints and tags, and names each problem with its tensor, step and block.
    ///
    /// # Errors
    /// Only database errors that stop the walk; damage is reported in the
    /// [`VerifyReport`].
    pub fn verify(&self) -> Result<VerifyReport> {
        contain(&self.path, "verifying", || {
            let r = self.read_from_disk()?;
            let cache = BlockCache::new(self.opts.cache_bytes);
            let mut fetcher = Fetcher::new(&r, &cache);
            let mut report = VerifyReport::default();
            let mut refs: HashMap<u128, u64> = HashMap::new();
            let mut versions_seen: HashSet<(String, u64)> = HashSet::new();

            let mut keys = Vec::new();
            for e in r.versions.iter().ctx("verifying versions")? {
                let (k, v) = e.ctx("verifying versions")?;
                keys.push((
                    k.value().to_vec(),
                    VersionRecord::from_stored(k.value(), v.value()),
                ));
            }
            for (key, rec) in keys {
                report.versions += 1;
                let Some((name, step)) = decode_version_key(&key) else {
                    report.issues.push(Issue::Version {
                        tensor: String::from_utf8_lossy(&key).into_owned(),
                        step: 0,
                        error: StoreError::Corrupt(Corruption::Record {
                            what: "a version key".into(),
                            source: crate::record::RecordError::BadValue {
                                field: "version key",
                                value: key.len() as u64,
                            },
                        }),
                    });
                    continue;
                };
                versions_seen.insert((name.to_string(), step));
                let rec = match rec {
                    Ok(rec) => rec,
                    Err(source) => {
                        report.issues.push(Issue::Version {
                            tensor: name.to_string(),
                            step,
                            error: StoreError::Corrupt(Corruption::Record {
                                what: format!("version record of tensor {name:?} step {step}"),
                                source,
                            }),
                        });
                        continue;
                    }
                };
                let name_arc: Arc<str> = Arc::from(name);
                let mut jobs = Vec::new();
                let mut blocks = Vec::new();
                for (b, block) in rec.blocks.iter().enumerate() {
                    if block.has_segment() {
                        *refs.entry(block.address).or_default() += 1;
                    }
                    report.blocks += 1;
                    match fetcher.fetch(&name_arc, step, &rec, b as u64) {
                        Ok(job) if job.is_absent() => {
                            // Tier 0: no data to decode; its rebuild's sources are checked by
                            // reading it.
                            if let Err(error) = self.rebuild_block(&r, &job, &rec, 0) {
                                report.issues.push(Issue::Block {
                                    tensor: name.to_string(),
                                    step,
                                    block: b as u64,
                                    error,
                                });
                            }
                        }
                        Ok(job) => {
                            jobs.push(job);
                            blocks.push(b as u64);
                        }
                        Err(error) => report.issues.push(Issue::Block {
                            tensor: name.to_string(),
                            step,
                            block: b as u64,
                            error,
                        }),
                    }
                }
                for (b, res) in blocks.into_iter().zip(decode_all(jobs, &cache)) {
                    if let Err(error) = res {
                        report.issues.push(Issue::Block {
                            tensor: name.to_string(),
                            step,
                            block: b,
                            error,
                        });
                    }
                }
            }

            self.audit_tier_rows(&r, &versions_seen, &mut refs, &mut report)?;
            self.audit_segments(&r, &refs, &mut report)?;
            self.audit_checkpoints(&r, &versions_seen, &mut report)?;
            Ok(report)
        })
    }

    /// Counts the blobs tier rows hold and reports rows that cannot be decoded or whose
    /// version is gone.
    fn audit_tier_rows(
        &self,
        r: &ReadTxn,
        versions_seen: &HashSet<(String, u64)>,
        refs: &mut HashMap<u128, u64>,
        report: &mut VerifyReport,
    ) -> Result<()> {
        for e in r.tiers.iter().ctx("verifying tier rows")? {
            let (k, v) = e.ctx("verifying tier rows")?;
            let key = crate::record::split_tier_key(k.value())
                .and_then(|(vk, b)| Some((decode_version_key(vk)?, b)));
            let Some(((name, step), block)) = key else {
                report.issues.push(Issue::TierRow {
                    tensor: String::from_utf8_lossy(k.value()).into_owned(),
                    step: 0,
                    block: 0,
                    reason: "the key is malformed".into(),
                });
                continue;
            };
            let row = match crate::record::TierRow::from_stored(k.value(), v.value()) {
                Ok(row) => row,
                Err(e) => {
                    report.issues.push(Issue::TierRow {
                        tensor: name.to_string(),
                        step,
                        block: u64::from(block),
                        reason: e.to_string(),
                    });
                    continue;
                }
            };
            if !versions_seen.contains(&(name.to_string(), step)) {
                report.issues.push(Issue::TierRow {
                    tensor: name.to_string(),
                    step,
                    block: u64::from(block),
                    reason: "its version does not exist".into(),
                });
            }
            for address in row_blobs(&row) {
                *refs.entry(address).or_default() += 1;
            }
        }
        Ok(())
    }

    fn audit_segments(
        &self,
        r: &ReadTxn,
        refs: &HashMap<u128, u64>,
        report: &mut VerifyReport,
    ) -> Result<()> {
        let mut ids = HashSet::new();
        for e in r.segments.iter().ctx("verifying segments")? {
            let (k, v) = e.ctx("verifying segments")?;
            let address = k.value();
            report.segments += 1;
            let counted = refs.get(&address).copied().unwrap_or(0);
            match SegmentInfo::from_stored(&crate::record::segment_key(address), v.value()) {
                Ok(info) if info.refcount != counted => {
                    ids.insert(info.id);
                    report.issues.push(Issue::Segment {
                        address,
                        reason: format!(
                            "index counts {} references, {counted} blocks refer to it",
                            info.refcount
                        ),
                    });
                }
                Ok(info) => {
                    ids.insert(info.id);
                }
                Err(e) => report.issues.push(Issue::Segment {
                    address,
                    reason: format!("index entry: {e}"),
                }),
            }
        }
        let mut orphans = HashSet::new();
        for (table, what) in [(&r.chunks, "chunks"), (&r.tails, "tail pieces")] {
            for e in table.iter().ctx("verifying segment pieces")? {
                let (k, _) = e.ctx("verifying segment pieces")?;
                let mut id = [0u8; 8];
                id.copy_from_slice(&k.value()[..8]);
                let id = u64::from_be_bytes(id);
                if !ids.contains(&id) && orphans.insert(id) {
                    report.issues.push(Issue::Segment {
                        address: 0,
                        reason: format!("{what} of segment id {id} stored but not in the index"),
                    });
                }
            }
        }
        Ok(())
    }

    /// Checks a packed tensor (ADR 0041): the member index lists it, and its bytes read from
    /// its pack part.
    fn audit_packed(
        &self,
        r: &ReadTxn,
        name: &str,
        step: u64,
        report: &mut VerifyReport,
    ) -> Result<()> {
        if !r.is_member(name, step)? {
            report.issues.push(Issue::Checkpoint {
                step,
                reason: format!("packs tensor {name:?}, which the member index does not list"),
            });
        } else if let Err(error) = r.version(name, step) {
            report.issues.push(Issue::Block {
                tensor: name.to_string(),
                step,
                block: 0,
                error,
            });
        }
        Ok(())
    }

    fn audit_checkpoints(
        &self,
        r: &ReadTxn,
        versions: &HashSet<(String, u64)>,
        report: &mut VerifyReport,
    ) -> Result<()> {
        let mut steps = HashSet::new();
        let mut packed = HashSet::new();
        let mut parts = HashSet::new();
        for e in r.checkpoints.iter().ctx("verifying checkpoints")? {
            let (k, v) = e.ctx("verifying checkpoints")?;
            let step = k.value();
            report.checkpoints += 1;
            steps.insert(step);
            match CheckpointRecord::from_stored(&crate::record::checkpoint_key(step), v.value()) {
                Ok(cp) => {
                    for part in part_names(&cp) {
                        if !versions.contains(&(part.clone(), step)) {
                            report.issues.push(Issue::Checkpoint {
                                step,
                                reason: format!("its pack part {part:?} has no version there"),
                            });
                        }
                        parts.insert((part, step));
                    }
                    for t in cp.tensors {
                        if cp.packed.contains_key(&t) {
                            report.versions += 1;
                            self.audit_packed(r, &t, step, report)?;
                            packed.insert((t, step));
                        } else if !versions.contains(&(t.clone(), step)) {
                            report.issues.push(Issue::Checkpoint {
                                step,
                                reason: format!("lists tensor {t:?}, which has no version there"),
                            });
                        }
                    }
                }
                Err(e) => report.issues.push(Issue::Checkpoint {
                    step,
                    reason: format!("record: {e}"),
                }),
            }
        }
        match all_members(r.members.as_ref()) {
            Ok(all) => {
                for (name, member_steps) in all {
                    for step in member_steps {
                        if !packed.contains(&(name.clone(), step)) {
                            report.issues.push(Issue::Checkpoint {
                                step,
                                reason: format!(
                                    "the member index lists tensor {name:?} packed there, but \
                                     the checkpoint does not"
                                ),
                            });
                        }
                    }
                }
            }
            Err(e) => report.issues.push(Issue::Checkpoint {
                step: 0,
                reason: format!("member index: {e}"),
            }),
        }
        for (name, step) in versions.iter().filter(|(n, _)| is_part_name(n)) {
            if !parts.contains(&(name.clone(), *step)) {
                report.issues.push(Issue::Checkpoint {
                    step: *step,
                    reason: format!(
                        "pack part {name:?} has a version there, but no checkpoint packs into it"
                    ),
                });
            }
        }
        for e in r.tags.iter().ctx("verifying tags")? {
            let (k, v) = e.ctx("verifying tags")?;
            if !steps.contains(&v.value()) {
                report.issues.push(Issue::Checkpoint {
                    step: v.value(),
                    reason: format!(
                        "tag {:?} names it, but there is no checkpoint",
                        String::from_utf8_lossy(k.value())
                    ),
                });
            }
        }
        Ok(())
    }
}
