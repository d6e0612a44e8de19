//! [`Store::stats`]: raw, stored and on-disk sizes, overall and per tensor.

use std::collections::{BTreeMap, HashMap};

use redb::{ReadableTable, ReadableTableMetadata};

use crate::engine::{row_blobs, View};
use crate::error::{Corruption, DbContext, Result, StoreError};
use crate::record::{decode_version_key, segment_key, SegmentInfo, Stored, VersionRecord};
use crate::store::{contain, Store};
use strata_tiering::Tier;

/// Sizes of one tensor's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorStats {
    /// Tensor name.
    pub name: String,
    /// Versions stored.
    pub versions: u64,
    /// Raw bytes of all versions.
    pub raw_bytes: u64,
    /// Bytes of its version records and of the unique segments it was first to refer to.
    pub stored_bytes: u64,
}

/// Sizes of the whole store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreStats {
    /// Raw bytes of every version of every tensor.
    pub raw_bytes: u64,
    /// `segment_bytes + metadata_bytes`: what the store holds, before redb's page layout.
    pub stored_bytes: u64,
    /// Bytes of unique segments.
    pub segment_bytes: u64,
    /// Keys and values of every record (versions, segment index, checkpoints, tags, meta).
    pub metadata_bytes: u64,
    /// Length of the file.
    pub file_bytes: u64,
    /// Bytes the file takes on disk ([`Store::disk_bytes`]): less than `file_bytes` while
    /// the space redb reserved for growth is still unwritten.
    pub disk_bytes: u64,
    /// Bytes of the pages redb has allocated (the rest of the file is free space); `None` on a
    /// read-only handle, since redb reports page use to its writer only.
    pub allocated_bytes: Option<u64>,
    /// Unique segments.
    pub segments: u64,
    /// Versions of all tensors.
    pub versions: u64,
    /// Checkpoints.
    pub checkpoints: u64,
    /// Per tensor, sorted by name.
    pub tensors: Vec<TensorStats>,
    /// Bytes of block segments (each version's own, references not counted) and of the
    /// residuals beside them, per tier name (`exact`, `hot8`, `warm7`, `warm5`, `cold3`,
    /// `absent`); tiers holding nothing are left out.
    pub tier_bytes: BTreeMap<String, u64>,
}

impl StoreStats {
    /// `raw_bytes / file_bytes`.
    pub fn file_ratio(&self) -> f64 {
        self.raw_bytes as f64 / self.file_bytes.max(1) as f64
    }

    /// `raw_bytes / stored_bytes`.
    pub fn stored_ratio(&self) -> f64 {
        self.raw_bytes as f64 / self.stored_bytes.max(1) as f64
    }
}

impl Store {
    /// Computes sizes by walking every record (no segment is decoded).
    ///
    /// # Errors
    /// Database and record errors.
    pub fn stats(&self) -> Result<StoreStats> {
        contain(&self.path, "computing stats", || {
            let r = self.read()?;
            let mut metadata_bytes = 0u64;
            let mut segment_bytes = 0u64;
            let mut seg_len: HashMap<u128, u64> = HashMap::new();
            for e in r.segments.iter().ctx("reading the segment index")? {
                let (k, v) = e.ctx("reading the segment index")?;
                metadata_bytes += 16 + v.value().len() as u64;
                let info = SegmentInfo::from_stored(&segment_key(k.value()), v.value()).map_err(
                    |source| {
                        StoreError::Corrupt(Corruption::Record {
                            what: format!("segment index entry {:032x}", k.value()),
                            source,
                        })
                    },
                )?;
                segment_bytes += info.len;
                seg_len.insert(k.value(), info.len);
            }
            let mut per: BTreeMap<String, TensorStats> = BTreeMap::new();
            let mut raw_bytes = 0u64;
            let mut versions = 0u64;
            let mut tier_bytes: BTreeMap<String, u64> = BTreeMap::new();
            for e in r.versions.iter().ctx("reading versions")? {
                let (k, v) = e.ctx("reading versions")?;
                let (name, step) = decode_version_key(k.value()).unwrap_or(("?", 0));
                let rec = VersionRecord::from_stored(k.value(), v.value()).map_err(|source| {
                    StoreError::Corrupt(Corruption::Record {
                        what: format!("version record of tensor {name:?} step {step}"),
                        source,
                    })
                })?;
                let record_bytes = (k.value().len() + v.value().len()) as u64;
                metadata_bytes += record_bytes;
                raw_bytes += rec.raw_bytes();
                versions += 1;
                let t = per.entry(name.to_string()).or_insert_with(|| TensorStats {
                    name: name.to_string(),
                    versions: 0,
                    raw_bytes: 0,
                    stored_bytes: 0,
                });
                t.versions += 1;
                t.raw_bytes += rec.raw_bytes();
                t.stored_bytes += record_bytes;
                let rows = r.tier_rows_by_block(name, step, rec.blocks.len())?;
                for (b, row) in rec.blocks.iter().zip(&rows) {
                    let row = row.as_ref();
                    let tier = row.map_or(Tier::Exact, |row| row.tier);
                    let mut bytes = if b.reference {
                        0
                    } else {
                        u64::from(b.segment_len)
                    };
                    if let Some(row) = row {
                        for address in row_blobs(row) {
                            if let Some(len) = seg_len.remove(&address) {
                                t.stored_bytes += len;
                                bytes += len;
                            }
                        }
                    }
                    if bytes > 0 || b.has_segment() {
                        *tier_bytes.entry(tier.name().to_string()).or_insert(0) += bytes;
                    }
                    // The first tensor to refer to a segment is charged for it.
                    if let Some(len) = seg_len.remove(&b.address) {
                        t.stored_bytes += len;
                    }
                }
            }
            for e in r.tiers.iter().ctx("reading tier rows")? {
                let (k, v) = e.ctx("reading tier rows")?;
                metadata_bytes += (k.value().len() + v.value().len()) as u64;
            }
            let mut checkpoints = 0u64;
            for e in r.checkpoints.iter().ctx("reading checkpoints")? {
                let (_, v) = e.ctx("reading checkpoints")?;
                metadata_bytes += 8 + v.value().len() as u64;
                checkpoints += 1;
            }
            for e in r.tags.iter().ctx("reading tags")? {
                let (k, _) = e.ctx("reading tags")?;
                metadata_bytes += k.value().len() as u64 + 8;
            }
            let segments = r.segments.len().ctx("reading the segment index")?;
            drop(r);
            let file_bytes = self.file_bytes()?;
            let disk_bytes = self.disk_bytes()?;
            let allocated_bytes = if self.is_read_only() {
                None
            } else {
                let _writer = self.writer.lock();
                let txn = self.db.begin_write(&self.path, "reading database stats")?;
                let s = txn.stats().ctx("reading database stats")?;
                let bytes = s.allocated_pages() * s.page_size() as u64;
                txn.abort().ctx("reading database stats")?;
                Some(bytes)
            };
            Ok(StoreStats {
                raw_bytes,
                stored_bytes: segment_bytes + metadata_bytes,
                segment_bytes,
                metadata_bytes,
                file_bytes,
                disk_bytes,
                allocated_bytes,
                segments,
                versions,
                checkpoints,
                tensors: per.into_values().collect(),
                tier_bytes,
            })
        })
    }
}
