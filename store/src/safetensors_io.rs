//! safetensors import and export: one file is one checkpoint.
//!
//! - [`Store::import_safetensors`] saves every tensor of a file as the checkpoint at a step
//!   (one transaction, so a crash leaves all of it or none), in file order, bit-exact. The
//!   checkpoint's metadata is the file's `__metadata__` map as JSON text (keys sorted), or
//!   empty when the file has none.
//! - [`Store::export_safetensors`] writes a checkpoint back: same names, dtypes, shapes and
//!   bytes. Metadata that is a JSON object of strings becomes `__metadata__` again; any other
//!   non-empty metadata is kept whole under the key [`METADATA_KEY`] (and an import of such
//!   a file restores it as it was).
//!
//! Every Strata dtype maps to a safetensors dtype and back. The sub-byte formats (`F4`,
//! `F6_E2M3`, `F6_E3M2`) are held as packed groups ([`DType::F4E2M1x2`], ...) whose last
//! dimension counts groups, as PyTorch's `float4_e2m1fn_x2` does; a file tensor whose last
//! dimension is not a whole number of groups, or of a dtype this version does not know, is a
//! [`crate::InvalidInput::UnsupportedDType`] naming it. A file with a bad header, bad
//! offsets or the wrong length is an [`InvalidInput::SafeTensorsFile`] naming the file, and
//! the tensor and numbers where there are some; the header is read key by key, so a tensor
//! named twice is refused rather than one of the two silently kept.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::marker::PhantomData;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::{Dtype, SafeTensorError};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::engine::{check_name, read_blocks, Fetcher, View};
use crate::error::{InvalidInput, NotFound, Result, SafeTensorsProblem, StoreError};
use crate::record::MAX_DIMS;
use crate::store::{contain, Store};
use crate::tensor::TensorRef;
use crate::DType;

/// Largest header the safetensors format allows (the crate's `MAX_HEADER_SIZE`).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// The `__metadata__` key under which checkpoint metadata that is not a JSON object of strings
/// is exported.
pub const METADATA_KEY: &str = "strata.metadata";

/// What [`Store::import_safetensors`] saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportReport {
    /// The checkpoint's step.
    pub step: u64,
    /// Tensors saved.
    pub tensors: usize,
    /// Raw bytes of those tensors.
    pub raw_bytes: u64,
    /// The metadata text saved with the checkpoint.
    pub metadata: String,
}

/// What [`Store::export_safetensors`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportReport {
    /// The checkpoint's step.
    pub step: u64,
    /// Tensors written.
    pub tensors: usize,
    /// Raw bytes of those tensors.
    pub raw_bytes: u64,
    /// Size of the file written.
    pub file_bytes: u64,
}

/// The Strata dtype of a safetensors dtype, or `None` for one this version does not know
/// (every dtype of safetensors 0.8 has one). The sub-byte formats map to their packed
/// groups ([`DType::F4E2M1x2`], ...), whose shapes [`shape_from_safetensors`] converts.
pub fn dtype_from_safetensors(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F64 => DType::F64,
        Dtype::I8 => DType::I8,
        Dtype::U8 => DType::U8,
        Dtype::I16 => DType::I16,
        Dtype::U16 => DType::U16,
        Dtype::I32 => DType::I32,
        Dtype::U32 => DType::U32,
        Dtype::I64 => DType::I64,
        Dtype::U64 => DType::U64,
        Dtype::BOOL => DType::Bool,
        Dtype::F8_E4M3 => DType::F8E4M3,
        Dtype::F8_E5M2 => DType::F8E5M2,
        Dtype::F8_E8M0 => DType::F8E8M0,
        Dtype::F8_E4M3FNUZ => DType::F8E4M3Fnuz,
        Dtype::F8_E5M2FNUZ => DType::F8E5M2Fnuz,
        Dtype::C64 => DType::C64,
        Dtype::F4 => DType::F4E2M1x2,
        Dtype::F6_E2M3 => DType::F6E2M3x4,
        Dtype::F6_E3M2 => DType::F6E3M2x4,
        _ => return None,
    })
}

/// The shape of the Strata tensor that holds a safetensors tensor of `dtype` (the Strata
/// dtype) and `shape`: the same, but for the packed sub-byte dtypes, whose last dimension
/// counts groups of [`DType::values_per_element`] values. `None` if the last dimension is
/// not a whole number of groups (or the tensor is a scalar): Strata cannot hold that
/// tensor's layout.
pub fn shape_from_safetensors(dtype: DType, shape: &[usize]) -> Option<Vec<u64>> {
    let per = dtype.values_per_element();
    let mut out: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    if per > 1 {
        let last = out.last_mut()?;
        if !last.is_multiple_of(per as u64) {
            return None;
        }
        *last /= per as u64;
    }
    Some(out)
}

/// The safetensors shape of a Strata tensor of `dtype` and `shape`: the inverse of
/// [`shape_from_safetensors`]; `None` if it does not fit in `usize` (or a packed tensor is
/// a scalar, which no import makes).
pub fn shape_to_safetensors(dtype: DType, shape: &[u64]) -> Option<Vec<usize>> {
    let per = dtype.values_per_element();
    let mut out = shape
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<Vec<usize>>>()?;
    if per > 1 {
        let last = out.last_mut()?;
        *last = last.checked_mul(per)?;
    }
    Some(out)
}

/// The safetensors dtype of a Strata dtype (every dtype of this version has one).
pub fn dtype_to_safetensors(d: DType) -> Option<Dtype> {
    Some(match d {
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F64 => Dtype::F64,
        DType::I8 => Dtype::I8,
        DType::U8 => Dtype::U8,
        DType::I16 => Dtype::I16,
        DType::U16 => Dtype::U16,
        DType::I32 => Dtype::I32,
        DType::U32 => Dtype::U32,
        DType::I64 => Dtype::I64,
        DType::U64 => Dtype::U64,
        DType::Bool => Dtype::BOOL,
        DType::F8E4M3 => Dtype::F8_E4M3,
        DType::F8E5M2 => Dtype::F8_E5M2,
        DType::F8E8M0 => Dtype::F8_E8M0,
        DType::F8E4M3Fnuz => Dtype::F8_E4M3FNUZ,
        DType::F8E5M2Fnuz => Dtype::F8_E5M2FNUZ,
        DType::C64 => Dtype::C64,
        DType::F4E2M1x2 => Dtype::F4,
        DType::F6E2M3x4 => Dtype::F6_E2M3,
        DType::F6E3M2x4 => Dtype::F6_E3M2,
        _ => return None,
    })
}

/// The checkpoint metadata text of a file's `__metadata__` map.
pub fn metadata_to_text(meta: Option<&HashMap<String, String>>) -> String {
    let Some(meta) = meta else {
        return String::new();
    };
    if meta.len() == 1 {
        if let Some(text) = meta.get(METADATA_KEY) {
            return text.clone();
        }
    }
    let sorted: BTreeMap<&String, &String> = meta.iter().collect();
    serde_json::to_string(&sorted).unwrap_or_default()
}

/// A safetensors header: `tensors` (the header's JSON object without `__metadata__`) with
/// `meta` put first, its keys in sorted order. `Metadata` would write them in a `HashMap`'s
/// order, which differs from one map to the next: two exports of one checkpoint would
/// differ in their bytes.
fn with_metadata(tensors: Vec<u8>, meta: Option<&HashMap<String, String>>) -> Vec<u8> {
    let Some(meta) = meta.filter(|m| !m.is_empty()) else {
        return tensors;
    };
    let sorted: BTreeMap<&String, &String> = meta.iter().collect();
    let mut out = b"{\"__metadata__\":".to_vec();
    // A map of strings always serializes.
    out.extend(serde_json::to_vec(&sorted).unwrap_or_else(|_| b"{}".to_vec()));
    match tensors.strip_prefix(b"{") {
        Some(b"}") | None => out.push(b'}'),
        Some(rest) => {
            out.push(b',');
            out.extend_from_slice(rest);
        }
    }
    out
}

/// The `__metadata__` map for checkpoint metadata text (`None` for empty text).
pub fn metadata_from_text(text: &str) -> Option<HashMap<String, String>> {
    if text.is_empty() {
        return None;
    }
    if let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(text) {
        let strings: Option<HashMap<String, String>> = map
            .iter()
            .map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
            .collect();
        if let Some(strings) = strings {
            return Some(strings);
        }
    }
    Some(HashMap::from([(
        METADATA_KEY.to_string(),
        text.to_string(),
    )]))
}

/// A tensor of a file: name, dtype, shape, byte range in the data section.
struct Entry {
    name: String,
    dtype: DType,
    shape: Vec<u64>,
    range: Range<u64>,
}

/// A file's header: its tensors in file order, where its data section starts, its metadata.
struct Header {
    tensors: Vec<Entry>,
    data_start: u64,
    metadata: String,
}

/// What a safetensors file holds, by its header: [`check_safetensors`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafeTensorsSummary {
    /// Tensors in the file.
    pub tensors: usize,
    /// Raw bytes of those tensors.
    pub raw_bytes: u64,
    /// The metadata text an import saves with the checkpoint.
    pub metadata: String,
}

/// Checks the safetensors file at `path` as [`Store::import_safetensors`] does before it
/// writes anything (its header, every tensor's dtype, shape and offsets, and the file's
/// length), without reading its data: what it holds, or why an import would refuse it.
///
/// # Errors
/// [`StoreError::Io`] reading the file, [`InvalidInput::SafeTensorsFile`] for a bad header
/// or length, [`InvalidInput::UnsupportedDType`] naming the tensor.
pub fn check_safetensors(path: impl AsRef<Path>) -> Result<SafeTensorsSummary> {
    let path = path.as_ref();
    let file = File::open(path).map_err(io_error(path))?;
    let header = read_header(&file, path)?;
    Ok(SafeTensorsSummary {
        tensors: header.tensors.len(),
        raw_bytes: header
            .tensors
            .iter()
            .map(|e| e.range.end - e.range.start)
            .sum(),
        metadata: header.metadata,
    })
}

/// The error of an I/O failure on `path`.
fn io_error(path: &Path) -> impl Fn(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The refusal of the file at `path` for `problem`.
fn refuse(path: &Path, problem: SafeTensorsProblem) -> StoreError {
    StoreError::Invalid(InvalidInput::SafeTensorsFile {
        path: path.to_path_buf(),
        problem: Box::new(problem),
    })
}

/// Reads and checks the header of an open safetensors file.
fn read_header(file: &File, path: &Path) -> Result<Header> {
    let io = io_error(path);
    let file_len = file.metadata().map_err(&io)?.len();
    let mut head = vec![0u8; 8.min(file_len) as usize];
    file.read_exact_at(&mut head, 0).map_err(&io)?;
    let n = header_len(&head, file_len).map_err(|p| refuse(path, p))?;
    head.resize(8 + n as usize, 0);
    file.read_exact_at(&mut head[8..], 8).map_err(&io)?;
    parse_header(&head, file_len, path)
}

/// A JSON object's entries in file order, every one of them: serde_json's maps (and the
/// safetensors crate's `Metadata`, built on one) keep the last of two equal keys silently.
struct Ordered<V>(Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Ordered<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Entries<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Entries<V> {
            type Value = Ordered<V>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Ordered<V>, A::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Ordered(entries))
            }
        }
        d.deserialize_map(Entries(PhantomData))
    }
}

impl<V> Ordered<V> {
    /// The first key that comes twice, if any.
    fn duplicate(&self) -> Option<&str> {
        let mut seen = HashSet::with_capacity(self.0.len());
        self.0
            .iter()
            .map(|(k, _)| k.as_str())
            .find(|k| !seen.insert(*k))
    }
}

/// A tensor's entry in a header, as written.
#[derive(Deserialize)]
struct RawEntry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

/// Parses and checks a safetensors header (`head` holds at least its first 8 bytes and, if
/// they declare `n`, the `n` bytes after them); `file_len` is the size of the whole file.
/// Every key is seen (a name twice is refused), every tensor's dtype, shape and offsets are
/// checked with checked arithmetic, and its tensors must tile the data section, which must
/// end where the file does: each refusal names the tensor and the numbers.
fn parse_header(head: &[u8], file_len: u64, path: &Path) -> Result<Header> {
    let bad = |problem| refuse(path, problem);
    let n = header_len(head, file_len).map_err(bad)?;
    let json = head.get(8..8 + n as usize).ok_or_else(|| {
        bad(SafeTensorsProblem::HeaderPastEnd {
            declared: n,
            available: head.len().saturating_sub(8) as u64,
        })
    })?;
    let entries: Ordered<&RawValue> =
        serde_json::from_slice(json).map_err(|error| bad(SafeTensorsProblem::Json { error }))?;
    if let Some(key) = entries.duplicate() {
        return Err(bad(SafeTensorsProblem::DuplicateKey {
            key: key.to_string(),
        }));
    }
    let mut metadata = None;
    let mut tensors = Vec::with_capacity(entries.0.len());
    for (name, raw) in entries.0 {
        if name == "__metadata__" {
            let pairs: Ordered<String> = serde_json::from_str(raw.get())
                .map_err(|error| bad(SafeTensorsProblem::Metadata { error }))?;
            if let Some(key) = pairs.duplicate() {
                return Err(bad(SafeTensorsProblem::DuplicateMetadataKey {
                    key: key.to_string(),
                }));
            }
            metadata = Some(pairs.0.into_iter().collect::<HashMap<_, _>>());
            continue;
        }
        let raw: RawEntry = match serde_json::from_str(raw.get()) {
            Ok(e) => e,
            Err(error) => {
                return Err(bad(SafeTensorsProblem::Entry {
                    tensor: name,
                    error,
                }))
            }
        };
        tensors.push(check_entry(name, raw, path)?);
    }
    tensors.sort_by_key(|e| (e.range.start, e.range.end));
    let data_bytes = file_len - 8 - n;
    let mut covered = 0u64;
    let mut last: Option<&Entry> = None;
    for e in &tensors {
        if let (Some(prev), true) = (last, e.range.start < covered) {
            return Err(bad(SafeTensorsProblem::Overlap {
                first: prev.name.clone(),
                first_start: prev.range.start,
                first_end: prev.range.end,
                second: e.name.clone(),
                second_start: e.range.start,
                second_end: e.range.end,
            }));
        }
        if e.range.start > covered {
            return Err(bad(SafeTensorsProblem::Hole {
                start: covered,
                end: e.range.start,
            }));
        }
        if e.range.end > data_bytes {
            return Err(bad(SafeTensorsProblem::PastEnd {
                tensor: e.name.clone(),
                end: e.range.end,
                data_bytes,
            }));
        }
        covered = e.range.end;
        last = Some(e);
    }
    if covered != data_bytes {
        return Err(bad(SafeTensorsProblem::Trailing {
            covered,
            data_bytes,
        }));
    }
    Ok(Header {
        tensors,
        data_start: 8 + n,
        metadata: metadata_to_text(metadata.as_ref()),
    })
}

/// Checks one tensor's entry: a name and a dtype Strata takes, a shape it can hold, offsets
/// that span exactly the bytes the shape and dtype need.
fn check_entry(name: String, raw: RawEntry, path: &Path) -> Result<Entry> {
    if let Err(e) = check_name(&name) {
        return Err(match e {
            StoreError::Invalid(InvalidInput::Name { name, reason }) => refuse(
                path,
                SafeTensorsProblem::Name {
                    tensor: name,
                    reason,
                },
            ),
            other => other,
        });
    }
    if raw.shape.len() > MAX_DIMS {
        return Err(refuse(
            path,
            SafeTensorsProblem::Dimensions {
                tensor: name,
                shape: raw.shape,
                limit: MAX_DIMS,
            },
        ));
    }
    let unsupported = |name: String, reason: String| {
        StoreError::Invalid(InvalidInput::UnsupportedDType {
            path: path.to_path_buf(),
            tensor: name,
            dtype: raw.dtype.clone(),
            reason,
        })
    };
    let Some(dtype) = DType::from_safetensors_name(&raw.dtype) else {
        return Err(unsupported(
            name,
            "this version of Strata does not know it".to_string(),
        ));
    };
    let overflow = |name: String| {
        refuse(
            path,
            SafeTensorsProblem::ShapeOverflow {
                tensor: name,
                dtype: raw.dtype.clone(),
                shape: raw.shape.clone(),
            },
        )
    };
    let Some(file_shape) = raw
        .shape
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<Vec<usize>>>()
    else {
        return Err(overflow(name));
    };
    let Some(shape) = shape_from_safetensors(dtype, &file_shape) else {
        let reason = format!(
            "the last dimension of its shape {:?} is not a multiple of {}, the values Strata \
             packs in one element of this dtype",
            raw.shape,
            dtype.values_per_element()
        );
        return Err(unsupported(name, reason));
    };
    let Some(expected) = shape
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .and_then(|n| n.checked_mul(dtype.size() as u64))
    else {
        return Err(overflow(name));
    };
    let (start, end) = raw.data_offsets;
    if end < start {
        return Err(refuse(
            path,
            SafeTensorsProblem::Offsets {
                tensor: name,
                start,
                end,
            },
        ));
    }
    if end - start != expected {
        return Err(refuse(
            path,
            SafeTensorsProblem::Size {
                tensor: name,
                dtype: raw.dtype,
                shape: raw.shape,
                start,
                end,
                expected,
            },
        ));
    }
    Ok(Entry {
        name,
        dtype,
        shape,
        range: start..end,
    })
}

/// The header length a file declares in its first 8 bytes, checked against the format's
/// limit and the file's size.
fn header_len(head: &[u8], file_len: u64) -> std::result::Result<u64, SafeTensorsProblem> {
    let n: [u8; 8] = head
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or(SafeTensorsProblem::TooShort { len: file_len })?;
    let n = u64::from_le_bytes(n);
    if n > MAX_HEADER_BYTES {
        return Err(SafeTensorsProblem::HeaderTooLarge {
            declared: n,
            limit: MAX_HEADER_BYTES,
        });
    }
    if 8 + n > file_len {
        return Err(SafeTensorsProblem::HeaderPastEnd {
            declared: n,
            available: file_len - 8,
        });
    }
    Ok(n)
}

impl Store {
    /// Saves every tensor of the safetensors file at `path` as the checkpoint at `step`, in
    /// one transaction, reading the file tensor by tensor (large tensors a window at a time):
    /// memory stays bounded by [`crate::Options::window_bytes`] whatever the file's size.
    /// The metadata is the file's `__metadata__` as JSON text, or empty.
    ///
    /// Nothing is written before the whole header is checked ([`check_safetensors`]): a name
    /// twice, offsets that overlap, leave a hole, or run past the end of the file, a shape
    /// that disagrees with its offsets are each refused, naming the tensor and the numbers.
    ///
    /// # Errors
    /// [`StoreError::Io`] reading the file, [`InvalidInput::SafeTensorsFile`] for a bad
    /// header or length (a file that shrinks while it is read included),
    /// [`crate::InvalidInput::UnsupportedDType`] naming the tensor, and those of
    /// [`Store::save_checkpoint`] (e.g. [`crate::InvalidInput::CheckpointExists`]). Nothing
    /// of the checkpoint is visible after an error.
    pub fn import_safetensors(&self, path: impl AsRef<Path>, step: u64) -> Result<ImportReport> {
        contain(&self.path, "importing a safetensors file", || {
            let path = path.as_ref();
            let io = io_error(path);
            let file = File::open(path).map_err(&io)?;
            let header = read_header(&file, path)?;
            let mut writer = self.begin_checkpoint(step, &header.metadata)?;
            let mut raw_bytes = 0u64;
            for e in &header.tensors {
                let base = header.data_start + e.range.start;
                let mut read = |offset: u64, buf: &mut [u8]| -> Result<()> {
                    let at = base + offset;
                    file.read_exact_at(buf, at).map_err(|source| {
                        if source.kind() != std::io::ErrorKind::UnexpectedEof {
                            return io(source);
                        }
                        match file.metadata() {
                            Ok(m) => refuse(
                                path,
                                SafeTensorsProblem::Shrunk {
                                    tensor: e.name.clone(),
                                    needed: at + buf.len() as u64,
                                    file_bytes: m.len(),
                                },
                            ),
                            Err(_) => io(source),
                        }
                    })
                };
                writer.put_read(
                    &e.name,
                    e.dtype,
                    &e.shape,
                    e.range.end - e.range.start,
                    &mut read,
                )?;
                raw_bytes += e.range.end - e.range.start;
            }
            writer.commit()?;
            Ok(ImportReport {
                step,
                tensors: header.tensors.len(),
                raw_bytes,
                metadata: header.metadata,
            })
        })
    }

    /// [`Store::import_safetensors`] on a file already in memory; `path` names it in errors.
    ///
    /// # Errors
    /// Those of [`Store::import_safetensors`].
    pub fn import_safetensors_bytes(
        &self,
        bytes: &[u8],
        step: u64,
        path: impl AsRef<Path>,
    ) -> Result<ImportReport> {
        contain(&self.path, "importing a safetensors file", || {
            let path = path.as_ref();
            let header = parse_header(bytes, bytes.len() as u64, path)?;
            let mut writer = self.begin_checkpoint(step, &header.metadata)?;
            let mut raw_bytes = 0u64;
            let mut tensors = Vec::with_capacity(header.tensors.len());
            for e in &header.tensors {
                let start = (header.data_start + e.range.start) as usize;
                let end = (header.data_start + e.range.end) as usize;
                let t = TensorRef {
                    dtype: e.dtype,
                    shape: &e.shape,
                    bytes: &bytes[start..end],
                };
                tensors.push((e.name.as_str(), t));
                raw_bytes += e.range.end - e.range.start;
            }
            writer.put_many(&tensors)?;
            writer.commit()?;
            Ok(ImportReport {
                step,
                tensors: header.tensors.len(),
                raw_bytes,
                metadata: header.metadata,
            })
        })
    }

    /// Writes the checkpoint at `step` to a safetensors file at `path`, tensor by tensor in
    /// the order they were saved, decoding blocks in parallel batches: memory stays bounded
    /// whatever the checkpoint's size. The file goes through a temporary file beside it,
    /// renamed into place, so a failed export leaves no partial file.
    ///
    /// # Errors
    /// [`crate::NotFound::Checkpoint`], the read errors of [`Store::get`],
    /// [`crate::InvalidInput::Name`] for a tensor named `__metadata__`, and
    /// [`StoreError::SafeTensors`] or [`StoreError::Io`] writing the file.
    pub fn export_safetensors(&self, step: u64, path: impl AsRef<Path>) -> Result<ExportReport> {
        contain(&self.path, "exporting a checkpoint", || {
            let path = path.as_ref();
            let io = |source| StoreError::Io {
                path: path.to_path_buf(),
                source,
            };
            let r = self.read()?;
            let cp = r
                .checkpoint(step)?
                .ok_or(StoreError::NotFound(NotFound::Checkpoint { step }))?;
            let mut recs = Vec::with_capacity(cp.tensors.len());
            let mut infos = Vec::with_capacity(cp.tensors.len());
            let mut offset = 0usize;
            for name in &cp.tensors {
                if name == "__metadata__" {
                    return Err(StoreError::Invalid(InvalidInput::Name {
                        name: name.clone(),
                        reason: "reserved by the safetensors format",
                    }));
                }
                let rec = self.version_record(&r, name, step)?;
                let bad_shape = || {
                    StoreError::Invalid(InvalidInput::Shape {
                        tensor: name.clone(),
                        step,
                        shape: rec.shape.clone(),
                    })
                };
                let shape = shape_to_safetensors(rec.dtype, &rec.shape).ok_or_else(bad_shape)?;
                let Some(dtype) = dtype_to_safetensors(rec.dtype) else {
                    return Err(StoreError::Invalid(InvalidInput::UnsupportedDType {
                        path: path.to_path_buf(),
                        tensor: name.clone(),
                        dtype: rec.dtype.to_string(),
                        reason: "safetensors has no name for it".to_string(),
                    }));
                };
                let len = usize::try_from(rec.raw_bytes()).map_err(|_| bad_shape())?;
                let end = offset.checked_add(len).ok_or_else(bad_shape)?;
                infos.push((
                    name.clone(),
                    TensorInfo {
                        dtype,
                        shape,
                        data_offsets: (offset, end),
                    },
                ));
                offset = end;
                recs.push(rec);
            }
            let st_err = |source: SafeTensorError| StoreError::SafeTensors {
                path: path.to_path_buf(),
                source: Box::new(source),
            };
            let meta = Metadata::new(None, infos).map_err(st_err)?;
            let tensors = serde_json::to_vec(&meta)
                .map_err(|e| st_err(SafeTensorError::InvalidHeaderDeserialization(e)))?;
            let mut header = with_metadata(tensors, metadata_from_text(&cp.metadata).as_ref());
            // As the safetensors crate writes it: padded with spaces to a multiple of 8 bytes.
            header.resize(header.len().next_multiple_of(8), b' ');
            let tmp = temp_path(path);
            let written = (|| -> Result<u64> {
                let file = File::create(&tmp).map_err(io)?;
                let mut out = BufWriter::with_capacity(1 << 20, file);
                out.write_all(&(header.len() as u64).to_le_bytes())
                    .map_err(io)?;
                out.write_all(&header).map_err(io)?;
                let spans = crate::reader::whole_spans(cp.tensors.iter(), &recs, step);
                let mut fetcher = Fetcher::streaming(&r, &self.cache);
                read_blocks(
                    &mut fetcher,
                    &self.cache,
                    &spans,
                    |si, job| self.rebuild_block(&r, job, spans[si].rec, 0),
                    |_, _, bytes, _| out.write_all(bytes).map_err(io),
                )?;
                // Not synced: like the safetensors crate's own writer, an export is a copy that
                // can be made again (the rename still keeps a failed export from showing).
                out.flush().map_err(io)?;
                Ok(8 + header.len() as u64 + offset as u64)
            })();
            let file_bytes = match written {
                Ok(n) => n,
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(e);
                }
            };
            std::fs::rename(&tmp, path).map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                io(e)
            })?;
            for (name, rec) in cp.tensors.iter().zip(&recs) {
                self.record_read(name, step, 0..rec.blocks.len() as u64);
            }
            Ok(ExportReport {
                step,
                tensors: recs.len(),
                raw_bytes: offset as u64,
                file_bytes,
            })
        })
    }
}

/// `path` with `.tmp-<pid>` appended to its file name.
fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp-{}", std::process::id()));
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_goes_first_with_sorted_keys() {
        let meta: HashMap<String, String> = [("b", "2"), ("a", "1"), ("c", "\"3\"")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let tensors = br#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#.to_vec();
        assert_eq!(
            String::from_utf8(with_metadata(tensors.clone(), Some(&meta))).unwrap(),
            r#"{"__metadata__":{"a":"1","b":"2","c":"\"3\""},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#
        );
        assert_eq!(
            String::from_utf8(with_metadata(b"{}".to_vec(), Some(&meta))).unwrap(),
            r#"{"__metadata__":{"a":"1","b":"2","c":"\"3\""}}"#
        );
        assert_eq!(with_metadata(tensors.clone(), None), tensors);
        assert_eq!(
            with_metadata(tensors.clone(), Some(&HashMap::new())),
            tensors
        );
    }

    #[test]
    fn dtype_mapping_round_trips() {
        for d in DType::ALL {
            let st = dtype_to_safetensors(d).expect("every Strata dtype has a safetensors name");
            assert_eq!(dtype_from_safetensors(st), Some(d));
            assert_eq!(format!("{st:?}"), d.safetensors_name());
            // A packed group's bytes are its values' bits.
            assert_eq!(d.size() * 8, st.bitsize() * d.values_per_element(), "{d}");
        }
    }

    #[test]
    fn packed_shapes_count_groups_along_the_last_dimension() {
        let f4 = DType::F4E2M1x2;
        assert_eq!(shape_from_safetensors(f4, &[3, 64]), Some(vec![3, 32]));
        assert_eq!(shape_to_safetensors(f4, &[3, 32]), Some(vec![3, 64]));
        assert_eq!(shape_from_safetensors(f4, &[2, 3]), None);
        assert_eq!(shape_from_safetensors(f4, &[]), None);
        let f6 = DType::F6E3M2x4;
        assert_eq!(shape_from_safetensors(f6, &[8]), Some(vec![2]));
        assert_eq!(shape_from_safetensors(f6, &[6]), None);
        assert_eq!(shape_to_safetensors(f6, &[2]), Some(vec![8]));
        assert_eq!(shape_to_safetensors(f6, &[u64::MAX]), None);
        assert_eq!(shape_from_safetensors(DType::BF16, &[]), Some(vec![]));
        assert_eq!(
            shape_from_safetensors(DType::BF16, &[2, 3]),
            Some(vec![2, 3])
        );
    }
}
