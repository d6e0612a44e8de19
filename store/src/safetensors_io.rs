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
//! Every Strata dtype maps to a safetensors dtype and back; a file tensor of another dtype
//! (fp8) is a [`crate::InvalidInput::UnsupportedDType`] naming it. A file with a bad header or bad
//! offsets is a [`StoreError::SafeTensors`] naming the file.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use safetensors::tensor::TensorInfo;
use safetensors::{Dtype, SafeTensorError, SafeTensors, View};

use crate::error::{InvalidInput, Result, StoreError};
use crate::store::Store;
use crate::tensor::TensorRef;
use crate::DType;

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

/// The Strata dtype of a safetensors dtype, or `None` for one Strata does not store (fp8).
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
        _ => return None,
    })
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

/// A parsed file: its tensors in file order and its metadata text.
struct Parsed<'a> {
    tensors: Vec<(String, DType, Vec<u64>, &'a [u8])>,
    metadata: String,
}

/// Parses a whole safetensors file held in memory.
fn parse<'a>(bytes: &'a [u8], path: &Path) -> Result<Parsed<'a>> {
    let st_err = |source: SafeTensorError| StoreError::SafeTensors {
        path: path.to_path_buf(),
        source: Box::new(source),
    };
    // The crate validates offsets, but adds header and data lengths unchecked (a header
    // declaring ~2^64 bytes overflows): turn any panic into an error on the file.
    let parsed = catch_unwind(AssertUnwindSafe(|| -> Result<Parsed<'a>> {
        let (header_len, meta) = SafeTensors::read_metadata(bytes).map_err(st_err)?;
        let data_len = bytes.len().saturating_sub(header_len.saturating_add(8));
        let mut infos: Vec<(String, &TensorInfo)> = meta.tensors().into_iter().collect();
        infos.sort_by_key(|a| a.1.data_offsets);
        let start = bytes.len() - data_len;
        let mut tensors = Vec::with_capacity(infos.len());
        for (name, info) in infos {
            let (s, e) = info.data_offsets;
            if s > e || e > data_len {
                return Err(st_err(SafeTensorError::InvalidOffset(name)));
            }
            let Some(dtype) = dtype_from_safetensors(info.dtype) else {
                return Err(StoreError::Invalid(InvalidInput::UnsupportedDType {
                    path: path.to_path_buf(),
                    tensor: name,
                    dtype: format!("{:?}", info.dtype),
                }));
            };
            let shape = info.shape.iter().map(|&d| d as u64).collect();
            tensors.push((name, dtype, shape, &bytes[start + s..start + e]));
        }
        Ok(Parsed {
            tensors,
            metadata: metadata_to_text(meta.metadata().as_ref()),
        })
    }));
    match parsed {
        Ok(r) => r,
        Err(_) => Err(st_err(SafeTensorError::ValidationOverflow)),
    }
}

/// A tensor to serialize.
struct Out {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Out {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

impl Store {
    /// Saves every tensor of the safetensors file at `path` as the checkpoint at `step`, in
    /// one transaction. The metadata is the file's `__metadata__` as JSON text, or empty.
    ///
    /// # Errors
    /// [`StoreError::Io`] reading the file, [`StoreError::SafeTensors`] for a bad header or
    /// offsets, [`crate::InvalidInput::UnsupportedDType`] naming the tensor, and those of
    /// [`Store::save_checkpoint`] (e.g. [`crate::InvalidInput::CheckpointExists`]).
    pub fn import_safetensors(&self, path: impl AsRef<Path>, step: u64) -> Result<ImportReport> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        self.import_safetensors_bytes(&bytes, step, path)
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
        let parsed = parse(bytes, path.as_ref())?;
        let refs: Vec<(&str, TensorRef<'_>)> = parsed
            .tensors
            .iter()
            .map(|(name, dtype, shape, data)| {
                (
                    name.as_str(),
                    TensorRef {
                        dtype: *dtype,
                        shape,
                        bytes: data,
                    },
                )
            })
            .collect();
        self.save_checkpoint(step, &refs, &parsed.metadata)?;
        Ok(ImportReport {
            step,
            tensors: refs.len(),
            raw_bytes: refs.iter().map(|(_, t)| t.bytes.len() as u64).sum(),
            metadata: parsed.metadata,
        })
    }

    /// Writes the checkpoint at `step` to a safetensors file at `path` (through a temporary
    /// file beside it, renamed into place, so a failed export leaves no partial file).
    ///
    /// # Errors
    /// [`crate::NotFound::Checkpoint`], the read errors of [`Store::load_checkpoint`],
    /// [`crate::InvalidInput::Name`] for a tensor named `__metadata__`, and
    /// [`StoreError::SafeTensors`] or [`StoreError::Io`] writing the file.
    pub fn export_safetensors(&self, step: u64, path: impl AsRef<Path>) -> Result<ExportReport> {
        let path = path.as_ref();
        let cp = self.load_checkpoint(step)?;
        let metadata = metadata_from_text(&cp.metadata);
        let mut outs = Vec::with_capacity(cp.tensors.len());
        let mut raw_bytes = 0u64;
        for (name, t) in cp.tensors {
            if name == "__metadata__" {
                return Err(StoreError::Invalid(InvalidInput::Name {
                    name,
                    reason: "reserved by the safetensors format",
                }));
            }
            let shape = t
                .shape
                .iter()
                .map(|&d| usize::try_from(d))
                .collect::<std::result::Result<Vec<usize>, _>>()
                .map_err(|_| {
                    StoreError::Invalid(InvalidInput::Shape {
                        tensor: name.clone(),
                        step,
                        shape: t.shape.clone(),
                    })
                })?;
            let Some(dtype) = dtype_to_safetensors(t.dtype) else {
                return Err(StoreError::Invalid(InvalidInput::UnsupportedDType {
                    path: path.to_path_buf(),
                    tensor: name,
                    dtype: t.dtype.to_string(),
                }));
            };
            raw_bytes += t.data.len() as u64;
            outs.push((
                name,
                Out {
                    dtype,
                    shape,
                    data: t.data,
                },
            ));
        }
        let tmp = temp_path(path);
        let written = safetensors::serialize_to_file(
            outs.iter().map(|(n, o)| (n.as_str(), o)),
            &metadata,
            &tmp,
        );
        if let Err(source) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(StoreError::SafeTensors {
                path: path.to_path_buf(),
                source: Box::new(source),
            });
        }
        let io = |source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        };
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(e)
        })?;
        let file_bytes = std::fs::metadata(path).map_err(io)?.len();
        Ok(ExportReport {
            step,
            tensors: outs.len(),
            raw_bytes,
            file_bytes,
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
    fn dtype_mapping_round_trips_and_refuses_fp8() {
        for d in DType::ALL {
            let st = dtype_to_safetensors(d).expect("every Strata dtype has a safetensors name");
            assert_eq!(dtype_from_safetensors(st), Some(d));
            assert_eq!(format!("{st:?}"), d.safetensors_name());
        }
        assert_eq!(dtype_from_safetensors(Dtype::F8_E4M3), None);
    }
}
