//! Metadata records and table keys: hand-written little-endian encodings.
//!
//! Every decoder checks each length against the bytes actually present before using it and
//! returns a [`RecordError`] instead of panicking; nothing is allocated from a length field
//! that the bytes present do not back.

mod checkpoint;
mod format;
mod keys;
mod manifest;
mod members;
mod policy;
mod segment;
mod tier;
mod version;

pub(crate) use checkpoint::{CheckpointRecord, Packed, Walk};
pub(crate) use format::{FormatRecord, OLDEST_STORE_FORMAT};
pub(crate) use keys::{
    decode_version_key, piece_key, version_key, version_key_range, MAX_NAME_BYTES,
};
pub use manifest::{decode_manifest, ManifestError};
#[cfg(feature = "remote")]
pub(crate) use manifest::{Kind, Manifest, MANIFEST_FORMAT};
pub(crate) use members::{MemberRun, RUN_MAX_STEPS};
pub(crate) use policy::Rule;
pub(crate) use segment::SegmentInfo;
pub(crate) use tier::{
    split_tier_key, tier_code, tier_from_code, tier_key, Rebuild, ResidualRef, SourceAt, TierRow,
};
#[cfg(test)]
pub(crate) use version::BLOCK_RECORD_LEN;
pub(crate) use version::{
    content_hash, BlockRecord, Form, VersionRecord, MAX_BLOCK_BYTES, MAX_DIMS,
    PACK_MEMBER_MAX_BYTES,
};

use thiserror::Error;

/// Why a metadata record could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The record ends before a field.
    #[error("truncated: field {field} needs {needed} bytes at offset {at}, record is {len} bytes")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Offset of the field.
        at: usize,
        /// Record length.
        len: usize,
    },
    /// Bytes left over after the last field.
    #[error("{extra} trailing bytes after the last field")]
    Trailing {
        /// Bytes left.
        extra: usize,
    },
    /// A record version this build does not read.
    #[error("record version {found} is not supported (this build reads {supported})")]
    Version {
        /// Version found.
        found: u8,
        /// Version supported.
        supported: u8,
    },
    /// A field holds a value outside its domain.
    #[error("field {field} has invalid value {value}")]
    BadValue {
        /// The field.
        field: &'static str,
        /// The value found.
        value: u64,
    },
    /// A text field is not UTF-8.
    #[error("field {field} is not valid UTF-8")]
    Utf8 {
        /// The field.
        field: &'static str,
    },
    /// The record's checksum (xxh3-64 of its key and value) does not match: the key or the
    /// value was changed on disk.
    #[error("checksum mismatch: stored {stored:016x}, computed {computed:016x}")]
    Checksum {
        /// The checksum stored after the value.
        stored: u64,
        /// The checksum of the key and value read.
        computed: u64,
    },
}

/// Bytes of the checksum every record value ends with (store format 2).
pub(crate) const CHECKSUM_LEN: usize = 8;

fn record_checksum(key: &[u8], value: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut h = twox_hash::XxHash3_64::new();
    h.write(&(key.len() as u64).to_le_bytes());
    h.write(key);
    h.write(value);
    h.finish()
}

/// A record value as stored: `value` followed by the xxh3-64 of the key and the value, so
/// that a changed byte in either is caught when the record is read.
pub(crate) fn seal(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + CHECKSUM_LEN);
    out.extend_from_slice(value);
    out.extend_from_slice(&record_checksum(key, value).to_le_bytes());
    out
}

/// The value of a stored record after checking its checksum against `key`.
pub(crate) fn unseal<'a>(key: &[u8], stored: &'a [u8]) -> Result<&'a [u8], RecordError> {
    let Some(split) = stored.len().checked_sub(CHECKSUM_LEN) else {
        return Err(RecordError::Truncated {
            field: "record checksum",
            needed: CHECKSUM_LEN,
            at: 0,
            len: stored.len(),
        });
    };
    let (value, sum) = stored.split_at(split);
    let mut b = [0u8; CHECKSUM_LEN];
    b.copy_from_slice(sum);
    let stored_sum = u64::from_le_bytes(b);
    let computed = record_checksum(key, value);
    if stored_sum != computed {
        return Err(RecordError::Checksum {
            stored: stored_sum,
            computed,
        });
    }
    Ok(value)
}

/// A record kept in a table with a checksum over its key and value ([`seal`]).
pub(crate) trait Stored: Sized {
    /// The value's bytes.
    fn encode_body(&self) -> Vec<u8>;
    /// The value from its bytes.
    fn decode_body(bytes: &[u8]) -> Result<Self, RecordError>;

    /// The bytes to store under `key`.
    fn to_stored(&self, key: &[u8]) -> Vec<u8> {
        seal(key, &self.encode_body())
    }

    /// The record stored under `key`, its checksum checked.
    fn from_stored(key: &[u8], stored: &[u8]) -> Result<Self, RecordError> {
        Self::decode_body(unseal(key, stored)?)
    }
}

/// Implements [`Stored`] for records with `encode` and `decode` methods.
macro_rules! stored_records {
    ($($t:ty),*) => {$(
        impl Stored for $t {
            fn encode_body(&self) -> Vec<u8> {
                self.encode().into()
            }
            fn decode_body(bytes: &[u8]) -> Result<Self, RecordError> {
                Self::decode(bytes)
            }
        }
    )*};
}

stored_records!(VersionRecord, CheckpointRecord, SegmentInfo, TierRow);

/// The checksum key of a checkpoint record (its step).
pub(crate) fn checkpoint_key(step: u64) -> [u8; 8] {
    step.to_be_bytes()
}

/// The checksum key of a segment index record (its address).
pub(crate) fn segment_key(address: u128) -> [u8; 16] {
    address.to_le_bytes()
}

/// A cursor over a record's bytes; every read is bounds-checked.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    pub(crate) fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], RecordError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(RecordError::Truncated {
                field,
                needed: n,
                at: self.pos,
                len: self.bytes.len(),
            });
        };
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    pub(crate) fn array<const N: usize>(
        &mut self,
        field: &'static str,
    ) -> Result<[u8; N], RecordError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }

    /// The record version byte every record starts with, which must be `supported`.
    pub(crate) fn version(
        &mut self,
        field: &'static str,
        supported: u8,
    ) -> Result<(), RecordError> {
        let found = self.u8(field)?;
        if found != supported {
            return Err(RecordError::Version { found, supported });
        }
        Ok(())
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, RecordError> {
        Ok(self.array::<1>(field)?[0])
    }

    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, RecordError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, RecordError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    pub(crate) fn u128(&mut self, field: &'static str) -> Result<u128, RecordError> {
        Ok(u128::from_le_bytes(self.array(field)?))
    }

    /// A `u32` length followed by that many bytes of UTF-8.
    pub(crate) fn string(&mut self, field: &'static str) -> Result<&'a str, RecordError> {
        let len = self.u32(field)? as usize;
        let bytes = self.take(len, field)?;
        std::str::from_utf8(bytes).map_err(|_| RecordError::Utf8 { field })
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// Fails unless every byte was read.
    pub(crate) fn finish(self) -> Result<(), RecordError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(RecordError::Trailing { extra }),
        }
    }
}

/// Appends a `u32` length and the bytes of `s`.
pub(crate) fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

#[cfg(test)]
mod tests;
