//! The manifest of a checkpoint in a remote: its metadata, its tensors, and every version
//! record needed to read them (the versions at its step and the chain versions their deltas
//! are taken against), so that a manifest is read without any other manifest and deleting one
//! never breaks another.
//!
//! ```text
//! 8 bytes       magic "STRATAMF"
//! u16           manifest format (1)
//! u8            kind: 0 a checkpoint, 1 a part of one (a rank's shard)
//! u64           step
//! u32 + bytes   metadata (UTF-8)
//! u32           tensor count, then per tensor u32 + bytes: name (UTF-8)
//! u32           version count, then per version:
//!   u32 + bytes   tensor name (UTF-8)
//!   u64           step
//!   u32 + bytes   the version record, as the store keeps it (record/version.rs)
//! u64           xxh3-64 of every byte before it
//! ```
//! Integers are little-endian. Decoding checks every length against the bytes left before
//! allocating, decodes every version record (its block count against its length), and
//! checks that each tensor has its version at the manifest's step and that each delta's base
//! is in the manifest.

use std::collections::{BTreeMap, BTreeSet};

use twox_hash::XxHash3_64;

use super::{Reader, RecordError, VersionRecord};

const MAGIC: &[u8; 8] = b"STRATAMF";
/// The manifest format this build writes and reads.
pub(crate) const MANIFEST_FORMAT: u16 = 1;
/// Smallest encoding of a version entry: name length, step, record length.
const MIN_VERSION_ENTRY: usize = 4 + 8 + 4;

/// Whether a manifest is a whole checkpoint or one process's part of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Checkpoint,
    Part,
}

/// A checkpoint (or part) as a remote holds it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Manifest {
    pub(crate) kind: Kind,
    pub(crate) step: u64,
    pub(crate) metadata: String,
    pub(crate) tensors: Vec<String>,
    /// Every version needed to read the tensors, by (name, step).
    pub(crate) versions: BTreeMap<(String, u64), VersionRecord>,
}

impl Manifest {
    #[cfg(feature = "remote")]
    /// The content addresses of every segment the manifest's versions read, with their
    /// lengths.
    pub(crate) fn segments(&self) -> BTreeMap<u128, u32> {
        self.versions
            .values()
            .flat_map(|r| r.blocks.iter())
            .filter(|b| b.has_segment())
            .map(|b| (b.address, b.segment_len))
            .collect()
    }

    /// The manifest's bytes.
    #[cfg(feature = "remote")]
    pub(crate) fn encode(&self) -> Vec<u8> {
        use super::put_string;
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&MANIFEST_FORMAT.to_le_bytes());
        out.push(match self.kind {
            Kind::Checkpoint => 0,
            Kind::Part => 1,
        });
        out.extend_from_slice(&self.step.to_le_bytes());
        put_string(&mut out, &self.metadata);
        out.extend_from_slice(&(self.tensors.len() as u32).to_le_bytes());
        for t in &self.tensors {
            put_string(&mut out, t);
        }
        out.extend_from_slice(&(self.versions.len() as u32).to_le_bytes());
        for ((name, step), rec) in &self.versions {
            put_string(&mut out, name);
            out.extend_from_slice(&step.to_le_bytes());
            let bytes = rec.encode();
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(&bytes);
        }
        let sum = XxHash3_64::oneshot(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// A manifest from its bytes, every field checked.
    ///
    /// # Errors
    /// [`ManifestError`] saying which field is wrong; [`ManifestError::NewerFormat`] for a
    /// manifest written by a newer Strata.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, ManifestError> {
        let body_len =
            bytes
                .len()
                .checked_sub(8)
                .ok_or(ManifestError::Record(RecordError::Truncated {
                    field: "checksum",
                    needed: 8,
                    at: 0,
                    len: bytes.len(),
                }))?;
        let (body, sum) = bytes.split_at(body_len);
        let mut r = Reader::new(body);
        if r.take(MAGIC.len(), "magic")? != MAGIC {
            return Err(ManifestError::NotAManifest);
        }
        let format = u16::from_le_bytes(r.array("manifest format")?);
        if format > MANIFEST_FORMAT {
            return Err(ManifestError::NewerFormat { found: format });
        }
        if format != MANIFEST_FORMAT {
            return Err(ManifestError::Record(RecordError::BadValue {
                field: "manifest format",
                value: format.into(),
            }));
        }
        let stored = u64::from_le_bytes(sum.try_into().unwrap_or([0; 8]));
        let computed = XxHash3_64::oneshot(body);
        if stored != computed {
            return Err(ManifestError::Record(RecordError::Checksum {
                stored,
                computed,
            }));
        }
        let kind = match r.u8("kind")? {
            0 => Kind::Checkpoint,
            1 => Kind::Part,
            k => {
                return Err(ManifestError::Record(RecordError::BadValue {
                    field: "kind",
                    value: k.into(),
                }))
            }
        };
        let step = r.u64("step")?;
        let metadata = r.string("metadata")?.to_owned();
        let count = checked_count(&mut r, "tensor count", 4)?;
        let mut tensors = Vec::with_capacity(count);
        for _ in 0..count {
            tensors.push(r.string("tensor name")?.to_owned());
        }
        let count = checked_count(&mut r, "version count", MIN_VERSION_ENTRY)?;
        let mut versions = BTreeMap::new();
        for _ in 0..count {
            let name = r.string("version name")?.to_owned();
            let vstep = r.u64("version step")?;
            let len = r.u32("version record length")? as usize;
            let rec = VersionRecord::decode(r.take(len, "version record")?)?;
            if versions.insert((name.clone(), vstep), rec).is_some() {
                return Err(ManifestError::Inconsistent(format!(
                    "version {name:?} at step {vstep} listed twice"
                )));
            }
        }
        r.finish()?;
        let m = Manifest {
            kind,
            step,
            metadata,
            tensors,
            versions,
        };
        m.check()?;
        Ok(m)
    }

    /// Whether two manifests describe the same checkpoint: the same kind, step, metadata and
    /// tensors, and every version both hold the same data ([`VersionRecord::same_content`]).
    /// Encodings may differ: a store re-encodes a version when a newer one is written (its
    /// newest kept a keyframe, ADR 0006) or when a base is deleted, and a chain then reaches
    /// other versions. The versions at the step are in both; chain versions are compared
    /// where both hold them.
    #[cfg(feature = "remote")]
    pub(crate) fn same_content(&self, other: &Manifest) -> bool {
        if self == other {
            return true;
        }
        self.kind == other.kind
            && self.step == other.step
            && self.metadata == other.metadata
            && self.tensors == other.tensors
            && self.versions.iter().all(|(key, rec)| {
                other
                    .versions
                    .get(key)
                    .is_none_or(|theirs| rec.same_content(theirs))
            })
    }

    /// Every tensor has its version at the step; every delta's base version is present.
    fn check(&self) -> Result<(), ManifestError> {
        let mut names = BTreeSet::new();
        for t in &self.tensors {
            if !names.insert(t) {
                return Err(ManifestError::Inconsistent(format!(
                    "tensor {t:?} listed twice"
                )));
            }
            if !self.versions.contains_key(&(t.clone(), self.step)) {
                return Err(ManifestError::Inconsistent(format!(
                    "tensor {t:?} has no version at step {}",
                    self.step
                )));
            }
        }
        for ((name, step), rec) in &self.versions {
            for b in &rec.blocks {
                if !b.is_exact() {
                    return Err(ManifestError::Inconsistent(format!(
                        "version {name:?} at step {step} has a tiered block"
                    )));
                }
                if let Some(base) = b.base {
                    if base == *step || !self.versions.contains_key(&(name.clone(), base)) {
                        return Err(ManifestError::Inconsistent(format!(
                            "version {name:?} at step {step} is a delta against step {base}, \
                             which the manifest does not hold"
                        )));
                    }
                }
            }
        }
        self.check_acyclic()
    }

    /// Every chain of bases ends at a keyframe: a base may be an older or a newer version
    /// (the newest is a keyframe, ADR 0006), so a chain is followed, at most one step per
    /// version of the tensor, and one that comes back to a version it passed is refused.
    fn check_acyclic(&self) -> Result<(), ManifestError> {
        for ((name, step), rec) in &self.versions {
            for (b, block) in rec.blocks.iter().enumerate() {
                let mut next = block.base;
                let mut hops = 0usize;
                while let Some(at) = next {
                    hops += 1;
                    if hops > self.versions.len() {
                        return Err(ManifestError::Inconsistent(format!(
                            "block {b} of version {name:?} at step {step} has a chain of bases \
                             that loops"
                        )));
                    }
                    next = self
                        .versions
                        .get(&(name.clone(), at))
                        .and_then(|r| r.blocks.get(b))
                        .and_then(|x| x.base);
                }
            }
        }
        Ok(())
    }
}

/// Reads a `u32` count of entries of at least `min` bytes each, checked against the bytes
/// left.
fn checked_count(
    r: &mut Reader<'_>,
    field: &'static str,
    min: usize,
) -> Result<usize, ManifestError> {
    let count = r.u32(field)? as usize;
    if count.saturating_mul(min) > r.remaining() {
        return Err(ManifestError::Record(RecordError::BadValue {
            field,
            value: count as u64,
        }));
    }
    Ok(count)
}

/// Why manifest bytes were refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// The bytes do not start with the manifest magic.
    #[error("not a Strata manifest (bad magic)")]
    NotAManifest,
    /// Written by a newer Strata.
    #[error("manifest format {found} is newer than this build reads ({MANIFEST_FORMAT}); upgrade Strata")]
    NewerFormat {
        /// The format found.
        found: u16,
    },
    /// A field is truncated, out of range, or the checksum does not match.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The fields do not agree with each other.
    #[error("{0}")]
    Inconsistent(String),
}

/// Decodes manifest bytes (for the fuzz target `manifest_decode`): `Ok` with the number of
/// versions, or the error.
///
/// # Errors
/// Those of the manifest decoder.
pub fn decode_manifest(bytes: &[u8]) -> Result<usize, ManifestError> {
    Manifest::decode(bytes).map(|m| m.versions.len())
}
