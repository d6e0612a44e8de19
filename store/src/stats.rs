//! [`Store::stats`]: raw, stored and on-disk sizes, overall and per tensor.

use std::collections::{BTreeMap, HashMap};

use redb::{ReadableTable, ReadableTableMetadata};

use crate::engine::{
    checkpoint_damage, each_checkpoint_body, is_part_name, row_blobs, View, WriteTxn,
};
use crate::error::{Corruption, DbContext, Result, StoreError};
use crate::record::{
    decode_version_key, segment_key, Form, SegmentInfo, Stored, VersionRecord, Walk,
};
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
    /// Unique segments.
    pub segments: u64,
    /// Versions of all tensors.
    pub versions: u64,
    /// Checkpoints.
    pub checkpoints: u64,
    /// Per tensor, sorted by name. A tensor packed in checkpoints (ADR 0041) counts its
    /// versions and raw bytes here; the bytes its packs store are in `packed_bytes`.
    pub tensors: Vec<TensorStats>,
    /// Bytes the checkpoints' pack parts store (records and segments): the small tensors they
    /// pack (ADR 0041).
    pub packed_bytes: u64,
    /// Bytes of block segments (each version's own, references not counted) and of the
    /// residuals beside them, per tier name (`exact`, `hot8`, `warm7`, `warm5`, `cold3`,
    /// `absent`); tiers holding nothing are left out.
    pub tier_bytes: BTreeMap<String, u64>,
}

impl StoreStats {
    /// The store's compression ratio: `raw_bytes / disk_bytes`, raw bytes over the bytes the
    /// file takes on disk (ADR 0028). The one figure Strata calls a ratio, in `strata import`,
    /// `strata stats` (text and JSON) and Python's `Store.stats()`.
    pub fn ratio(&self) -> f64 {
        self.raw_bytes as f64 / self.disk_bytes.max(1) as f64
    }
}

/// What a store holds, before redb's page layout: [`StoreStats::segment_bytes`] and
/// [`StoreStats::metadata_bytes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoredSizes {
    /// Bytes of unique segments.
    pub(crate) segment_bytes: u64,
    /// Keys and values of every record.
    pub(crate) metadata_bytes: u64,
}

impl StoredSizes {
    /// `segment_bytes + metadata_bytes`: [`StoreStats::stored_bytes`].
    pub(crate) fn total(self) -> u64 {
        self.segment_bytes + self.metadata_bytes
    }
}

/// The stored sizes of a write in progress ([`stored_sizes`] of its tables).
pub(crate) fn stored_sizes_of(wt: &WriteTxn<'_>) -> Result<StoredSizes> {
    stored_sizes(
        &wt.segments,
        &wt.versions,
        &wt.tiers,
        &wt.checkpoints,
        &wt.tags,
        Some(&wt.members),
    )
}

/// The stored sizes of the tables of a read, or of a write in progress (an aging dry run
/// measures what its pass would leave before rolling it back).
pub(crate) fn stored_sizes(
    segments: &impl ReadableTable<u128, &'static [u8]>,
    versions: &impl ReadableTable<&'static [u8], &'static [u8]>,
    tiers: &impl ReadableTable<&'static [u8], &'static [u8]>,
    checkpoints: &impl ReadableTable<u64, &'static [u8]>,
    tags: &impl ReadableTable<&'static [u8], u64>,
    members: Option<&impl ReadableTable<&'static [u8], &'static [u8]>>,
) -> Result<StoredSizes> {
    let mut s = StoredSizes {
        segment_bytes: 0,
        metadata_bytes: 0,
    };
    for e in segments.iter().ctx("reading the segment index")? {
        let (k, v) = e.ctx("reading the segment index")?;
        s.metadata_bytes += 16 + v.value().len() as u64;
        s.segment_bytes += segment_len(k.value(), v.value())?;
    }
    for e in versions.iter().ctx("reading versions")? {
        let (k, v) = e.ctx("reading versions")?;
        s.metadata_bytes += (k.value().len() + v.value().len()) as u64;
    }
    for e in tiers.iter().ctx("reading tier rows")? {
        let (k, v) = e.ctx("reading tier rows")?;
        s.metadata_bytes += (k.value().len() + v.value().len()) as u64;
    }
    for e in checkpoints.iter().ctx("reading checkpoints")? {
        let (_, v) = e.ctx("reading checkpoints")?;
        s.metadata_bytes += 8 + v.value().len() as u64;
    }
    for e in tags.iter().ctx("reading tags")? {
        let (k, _) = e.ctx("reading tags")?;
        s.metadata_bytes += k.value().len() as u64 + 8;
    }
    if let Some(members) = members {
        for e in members.iter().ctx("reading the member index")? {
            let (k, v) = e.ctx("reading the member index")?;
            s.metadata_bytes += (k.value().len() + v.value().len()) as u64;
        }
    }
    Ok(s)
}

/// The length of the segment a segment index entry describes.
fn segment_len(key: u128, stored: &[u8]) -> Result<u64> {
    SegmentInfo::from_stored(&segment_key(key), stored)
        .map(|info| info.len)
        .map_err(|source| {
            StoreError::Corrupt(Corruption::Record {
                what: format!("segment index entry {key:032x}"),
                source,
            })
        })
}

/// The entry the pack parts' bytes are gathered under while the tensors are walked, taken out
/// into [`StoreStats::packed_bytes`] (a name no tensor may have: it starts with U+0001).
const PACKED_NAME: &str = "\u{1}packed";

impl Store {
    /// Computes sizes by walking every record: no segment is decoded, and no page of segment
    /// bytes is read (redb's count of pages in use is [`Store::allocated_bytes`], which needs
    /// the writer).
    ///
    /// # Errors
    /// Database and record errors.
    pub fn stats(&self) -> Result<StoreStats> {
        contain(&self.path, "computing stats", || {
            let r = self.read()?;
            let StoredSizes {
                segment_bytes,
                metadata_bytes,
            } = stored_sizes(
                &r.segments,
                &r.versions,
                &r.tiers,
                &r.checkpoints,
                &r.tags,
                r.members.as_ref(),
            )?;
            let mut seg_len: HashMap<u128, u64> = HashMap::new();
            for e in r.segments.iter().ctx("reading the segment index")? {
                let (k, v) = e.ctx("reading the segment index")?;
                seg_len.insert(k.value(), segment_len(k.value(), v.value())?);
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
                // A pack part (ADR 0041) holds the bytes of the versions its checkpoint
                // packs, counted below: its own are stored bytes only, under one name.
                let part = is_part_name(name);
                if !part {
                    raw_bytes += rec.raw_bytes();
                    versions += 1;
                }
                let shown = if part { PACKED_NAME } else { name };
                let t = per.entry(shown.to_string()).or_insert_with(|| TensorStats {
                    name: shown.to_string(),
                    versions: 0,
                    raw_bytes: 0,
                    stored_bytes: 0,
                });
                if !part {
                    t.versions += 1;
                    t.raw_bytes += rec.raw_bytes();
                }
                t.stored_bytes += record_bytes;
                let rows = r.tier_rows_by_block(name, step, rec.blocks.len())?;
                for (b, row) in rec.blocks.iter().zip(&rows) {
                    let row = row.as_ref();
                    let tier = row.map_or(Tier::Exact, |row| row.tier);
                    let mut bytes = b.stored_bytes();
                    if b.form == Form::Inline {
                        // Exact bytes held in the version record (ADR 0029).
                        bytes = u64::from(b.segment_len);
                    }
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
            // Packed tensors (ADR 0041) are counted from the checkpoint records, walked without
            // a name allocated per tensor (the names are allocated once, in `per`).
            each_checkpoint_body(&r.checkpoints, |step, body| {
                let damage = |source| checkpoint_damage(step, source);
                let mut walk = Walk::new(body).map_err(damage)?;
                while let Some((name, packed)) = walk.next().map_err(damage)? {
                    let Some(p) = packed else { continue };
                    raw_bytes += p.len();
                    versions += 1;
                    let t = match per.get_mut(name) {
                        Some(t) => t,
                        None => per.entry(name.to_owned()).or_insert_with(|| TensorStats {
                            name: name.to_owned(),
                            versions: 0,
                            raw_bytes: 0,
                            stored_bytes: 0,
                        }),
                    };
                    t.versions += 1;
                    t.raw_bytes += p.len();
                }
                Ok(())
            })?;
            let packed_bytes = per.remove(PACKED_NAME).map_or(0, |t| t.stored_bytes);
            let checkpoints = r.checkpoints.len().ctx("reading checkpoints")?;
            let segments = r.segments.len().ctx("reading the segment index")?;
            drop(r);
            let file_bytes = self.file_bytes()?;
            let disk_bytes = self.disk_bytes()?;
            Ok(StoreStats {
                raw_bytes,
                stored_bytes: segment_bytes + metadata_bytes,
                segment_bytes,
                metadata_bytes,
                file_bytes,
                disk_bytes,
                segments,
                versions,
                checkpoints,
                tensors: per.into_values().collect(),
                packed_bytes,
                tier_bytes,
            })
        })
    }
}
