//! [`RemoteStore`]: read a remote without a local copy. Manifests are fetched when it opens;
//! a read fetches only the segments of the versions it decodes (the chain under them) into a
//! local cache store, bounded in bytes, and reads from there.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Range, RangeBounds};
use std::path::Path;

use parking_lot::Mutex;
use twox_hash::XxHash3_64;

use super::object::{Remote, RequestCounts};
use super::pull::{apply, remote_tags};
use super::sync::RemoteState;
use crate::error::RemoteError;
use crate::error::{NotFound, StoreError};
use crate::record::{CheckpointRecord, VersionRecord};
use crate::safetensors_io::ExportReport;
use crate::tensor::{Checkpoint, Tensor, TensorSlice};
use crate::{DType, PendingTensor, Store};

/// Default bound of a remote read cache: 4 GiB.
pub const DEFAULT_CACHE_BYTES: u64 = 4 << 30;

/// A remote opened for reading ([`Store::open_remote`]).
#[derive(Debug)]
pub struct RemoteStore {
    remote: Remote,
    cache: Store,
    checkpoints: BTreeMap<u64, crate::record::Manifest>,
    /// (tensor, step) -> the step of a manifest holding that version.
    index: BTreeMap<(String, u64), u64>,
    tags: Vec<(String, u64)>,
    cache_bytes: u64,
    /// Tensors in the cache, least recently used first, with the segment bytes fetched.
    held: Mutex<Vec<(String, u64)>>,
}

impl Store {
    /// Opens the remote at `url` (see [`Remote::open`]) for reading, with a cache of at
    /// most [`DEFAULT_CACHE_BYTES`] of segments in `cache_dir`.
    ///
    /// # Errors
    /// Those of [`Remote::open`] and [`RemoteStore::open`].
    pub fn open_remote(url: &str, cache_dir: impl AsRef<Path>) -> Result<RemoteStore, RemoteError> {
        RemoteStore::open(Remote::open(url)?, cache_dir, DEFAULT_CACHE_BYTES)
    }
}

impl RemoteStore {
    /// Opens `remote` for reading: lists and fetches its manifests and tags. The cache is a
    /// store file in `cache_dir` named after the remote's URL, holding at most about
    /// `cache_bytes` of segments (least recently read tensors leave first).
    ///
    /// # Errors
    /// [`RemoteError::NotARemote`] or [`RemoteError::NewerFormat`] for the remote, damaged
    /// manifests, request errors, and the cache store's open errors (a cache in use by another
    /// process is [`crate::OpenError::InUse`]).
    pub fn open(
        remote: Remote,
        cache_dir: impl AsRef<Path>,
        cache_bytes: u64,
    ) -> Result<RemoteStore, RemoteError> {
        let dir = cache_dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|source| RemoteError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut state = RemoteState::default();
        remote.block_on(async {
            if remote.check_format(false).await? {
                state.refresh(&remote).await?;
            }
            Ok::<_, RemoteError>(())
        })?;
        let tags = remote_tags(&remote)?;
        let cache = Store::open(dir.join(format!(
            "{:016x}.strata",
            XxHash3_64::oneshot(remote.url().as_bytes())
        )))?;
        let mut index = BTreeMap::new();
        for (step, m) in &state.checkpoints {
            for key in m.versions.keys() {
                index.entry(key.clone()).or_insert(*step);
            }
        }
        let held = cache
            .stats()?
            .tensors
            .into_iter()
            .map(|t| (t.name, t.stored_bytes))
            .collect();
        Ok(RemoteStore {
            remote,
            cache,
            checkpoints: state.checkpoints,
            index,
            tags,
            cache_bytes,
            held: Mutex::new(held),
        })
    }

    /// The remote.
    pub fn remote(&self) -> &Remote {
        &self.remote
    }

    /// Requests made and bytes fetched since the remote was opened.
    pub fn counts(&self) -> RequestCounts {
        self.remote.counts()
    }

    /// The local cache store.
    pub fn cache(&self) -> &Store {
        &self.cache
    }

    /// Steps of the remote's checkpoints, ascending.
    pub fn checkpoints(&self) -> Vec<u64> {
        self.checkpoints.keys().copied().collect()
    }

    /// The remote's tags, as (name, step).
    pub fn tags(&self) -> &[(String, u64)] {
        &self.tags
    }

    /// The metadata text of checkpoint `step`.
    ///
    /// # Errors
    /// [`NotFound::Checkpoint`].
    pub fn checkpoint_metadata(&self, step: u64) -> Result<&str, RemoteError> {
        Ok(&self.manifest(step)?.metadata)
    }

    /// The tensor names of checkpoint `step`.
    ///
    /// # Errors
    /// [`NotFound::Checkpoint`].
    pub fn checkpoint_tensors(&self, step: u64) -> Result<&[String], RemoteError> {
        Ok(&self.manifest(step)?.tensors)
    }

    /// Raw bytes of checkpoint `step`'s tensors, and the segment bytes of their versions at
    /// that step (what reading them adds over their bases).
    ///
    /// # Errors
    /// [`NotFound::Checkpoint`].
    pub fn checkpoint_sizes(&self, step: u64) -> Result<(u64, u64), RemoteError> {
        let m = self.manifest(step)?;
        let (mut raw, mut stored) = (0, 0);
        for t in &m.tensors {
            if let Some(rec) = m.versions.get(&(t.clone(), step)) {
                raw += rec.raw_bytes();
                stored += rec
                    .blocks
                    .iter()
                    .map(|b| u64::from(b.segment_len))
                    .sum::<u64>();
            }
        }
        Ok((raw, stored))
    }

    /// Steps at which `name` has a version, ascending.
    pub fn versions(&self, name: &str) -> Vec<u64> {
        self.index
            .range((name.to_string(), 0)..=(name.to_string(), u64::MAX))
            .map(|((_, s), _)| *s)
            .collect()
    }

    /// Names of every tensor of the remote's checkpoints, sorted.
    pub fn tensors(&self) -> Vec<String> {
        let mut names: Vec<String> = self.index.keys().map(|(n, _)| n.clone()).collect();
        names.dedup();
        names
    }

    /// Dtype and shape of version `step` of `name`, from its manifest (nothing fetched).
    ///
    /// # Errors
    /// [`NotFound::Version`].
    pub fn version_shape(&self, name: &str, step: u64) -> Result<(DType, Vec<u64>), RemoteError> {
        let key = (name.to_string(), step);
        let rec = self
            .index
            .get(&key)
            .and_then(|ms| self.checkpoints.get(ms))
            .and_then(|m| m.versions.get(&key))
            .ok_or_else(|| {
                StoreError::NotFound(NotFound::Version {
                    tensor: name.to_string(),
                    step,
                })
            })?;
        Ok((rec.dtype, rec.shape.clone()))
    }

    /// Flat elements `elems` of version `step` of `name` ([`Store::get_range`]; the whole
    /// version is fetched into the cache).
    ///
    /// # Errors
    /// Those of [`RemoteStore::get`] and [`Store::get_range`].
    pub fn get_range(
        &self,
        name: &str,
        step: u64,
        elems: Range<u64>,
    ) -> Result<TensorSlice, RemoteError> {
        self.ensure(name, &[step])?;
        self.evict(&[name.to_string()])?;
        Ok(self.cache.get_range(name, step, elems)?)
    }

    /// Version `step` of `name`, bit-exact.
    ///
    /// # Errors
    /// [`NotFound::Tensor`] or [`NotFound::Version`], damaged segments, request errors.
    pub fn get(&self, name: &str, step: u64) -> Result<Tensor, RemoteError> {
        self.ensure(name, &[step])?;
        self.evict(&[name.to_string()])?;
        Ok(self.cache.get(name, step)?)
    }

    /// The latest version of `name` at or before `step`, with its step.
    ///
    /// # Errors
    /// [`NotFound::AtOrBefore`], and those of [`RemoteStore::get`].
    pub fn get_at(&self, name: &str, step: u64) -> Result<(u64, Tensor), RemoteError> {
        let found = self.versions(name).into_iter().rfind(|s| *s <= step);
        let Some(s) = found else {
            return Err(StoreError::NotFound(NotFound::AtOrBefore {
                tensor: name.to_string(),
                step,
            })
            .into());
        };
        Ok((s, self.get(name, s)?))
    }

    /// Elements `elems` of `name` at each of its versions in `steps` ([`Store::history`]).
    ///
    /// # Errors
    /// Those of [`Store::history`] and of fetching.
    pub fn history(
        &self,
        name: &str,
        elems: Range<u64>,
        steps: impl RangeBounds<u64>,
    ) -> Result<Vec<(u64, TensorSlice)>, RemoteError> {
        let wanted: Vec<u64> = self
            .versions(name)
            .into_iter()
            .filter(|s| steps.contains(s))
            .collect();
        self.ensure(name, &wanted)?;
        self.evict(&[name.to_string()])?;
        Ok(self.cache.history(name, elems, steps)?)
    }

    /// Every tensor of checkpoint `step`.
    ///
    /// # Errors
    /// [`NotFound::Checkpoint`], and those of [`RemoteStore::get`].
    pub fn load_checkpoint(&self, step: u64) -> Result<Checkpoint, RemoteError> {
        self.with_checkpoint(step, |cache| cache.load_checkpoint(step))
    }

    /// The tensors of checkpoint `step`, in its order, with the bytes each reads back as, from
    /// its manifest (nothing fetched): the buffers for [`crate::CheckpointReader::read_into`]
    /// under [`RemoteStore::with_checkpoint`].
    ///
    /// # Errors
    /// [`NotFound::Checkpoint`].
    pub fn pending(&self, step: u64) -> Result<Vec<PendingTensor>, RemoteError> {
        let m = self.manifest(step)?;
        m.tensors
            .iter()
            .map(|name| {
                let rec = m.versions.get(&(name.clone(), step)).ok_or_else(|| {
                    StoreError::NotFound(NotFound::Version {
                        tensor: name.clone(),
                        step,
                    })
                })?;
                Ok(PendingTensor::of(name, rec))
            })
            .collect()
    }

    /// Runs `read` on the local cache once every tensor of checkpoint `step` is in it
    /// (fetched if not), then brings the cache back within its bound, whether `read`
    /// succeeded or not (this checkpoint's tensors stay until a later read needs the room).
    /// `read` opens what it needs itself: [`Store::read_checkpoint`] to read into the
    /// caller's buffers, [`Store::load_checkpoint`], an export.
    ///
    /// # Errors
    /// [`NotFound::Checkpoint`], those of fetching, and `read`'s.
    pub fn with_checkpoint<T>(
        &self,
        step: u64,
        read: impl FnOnce(&Store) -> crate::Result<T>,
    ) -> Result<T, RemoteError> {
        let keep = self.ensure_checkpoint(step)?;
        let out = read(&self.cache);
        self.evict(&keep)?;
        Ok(out?)
    }

    /// Writes checkpoint `step` as a safetensors file ([`Store::export_safetensors`]).
    ///
    /// # Errors
    /// [`NotFound::Checkpoint`], and those of fetching and of the export.
    pub fn export_safetensors(
        &self,
        step: u64,
        path: impl AsRef<Path>,
    ) -> Result<ExportReport, RemoteError> {
        self.with_checkpoint(step, |cache| cache.export_safetensors(step, path))
    }

    fn manifest(&self, step: u64) -> Result<&crate::record::Manifest, RemoteError> {
        self.checkpoints
            .get(&step)
            .ok_or_else(|| StoreError::NotFound(NotFound::Checkpoint { step }).into())
    }

    /// Brings every tensor of checkpoint `step` and its record into the cache; returns the
    /// tensor names.
    fn ensure_checkpoint(&self, step: u64) -> Result<Vec<String>, RemoteError> {
        let m = self.manifest(step)?;
        for name in &m.tensors {
            self.ensure(name, &[step])?;
        }
        let cached = self.cache.checkpoint_info(step).ok();
        if !cached.is_some_and(|c| c.tensors == m.tensors && c.metadata == m.metadata) {
            let cp = CheckpointRecord::new(m.metadata.clone(), m.tensors.clone());
            apply(
                &self.cache,
                &self.remote,
                &BTreeMap::new(),
                Some((step, &cp)),
                &|_| {},
            )?;
        }
        Ok(m.tensors.clone())
    }

    /// Brings versions `steps` of `name`, and the chain under them, into the cache.
    fn ensure(&self, name: &str, steps: &[u64]) -> Result<(), RemoteError> {
        let mut wanted: BTreeMap<(String, u64), VersionRecord> = BTreeMap::new();
        let mut todo: Vec<u64> = steps.to_vec();
        let mut seen = BTreeSet::new();
        while let Some(s) = todo.pop() {
            if !seen.insert(s) {
                continue;
            }
            let key = (name.to_string(), s);
            let Some(m) = self.index.get(&key).and_then(|ms| self.checkpoints.get(ms)) else {
                return Err(StoreError::NotFound(if self.versions(name).is_empty() {
                    NotFound::Tensor {
                        tensor: name.to_string(),
                    }
                } else {
                    NotFound::Version {
                        tensor: name.to_string(),
                        step: s,
                    }
                })
                .into());
            };
            let rec = &m.versions[&key];
            todo.extend(rec.blocks.iter().filter_map(|b| b.base));
            wanted.insert(key, rec.clone());
        }
        let r = self.cache.read()?;
        let mut missing = BTreeMap::new();
        for ((n, s), rec) in wanted {
            if crate::engine::View::version(&r, &n, s)?.is_none() {
                missing.insert((n, s), rec);
            }
        }
        drop(r);
        let fetched = if missing.is_empty() {
            0
        } else {
            apply(&self.cache, &self.remote, &missing, None, &|_| {})?.1
        };
        self.note(name, fetched);
        Ok(())
    }

    /// Marks `name` most recently used, holding `added` more bytes.
    fn note(&self, name: &str, added: u64) {
        let mut held = self.held.lock();
        let before = held
            .iter()
            .position(|(n, _)| n == name)
            .map(|i| held.remove(i).1);
        held.push((name.to_string(), before.unwrap_or(0) + added));
    }

    /// Evicts the least recently used tensors but those of `keep` while the cache holds
    /// more than its bound.
    fn evict(&self, keep: &[String]) -> Result<(), RemoteError> {
        let mut held = self.held.lock();
        let mut total: u64 = held.iter().map(|(_, b)| b).sum();
        let mut i = 0;
        while total > self.cache_bytes && i < held.len() {
            if keep.contains(&held[i].0) {
                i += 1;
                continue;
            }
            let (victim, bytes) = held.remove(i);
            let r = self.cache.read()?;
            let mut steps: Vec<u64> = crate::engine::View::versions_of(&r, &victim)?
                .into_iter()
                .map(|(s, _)| s)
                .collect();
            drop(r);
            // Newest first: no version left depends on the one deleted.
            steps.reverse();
            for s in steps {
                self.cache.delete(&victim, s)?;
            }
            total -= bytes;
        }
        Ok(())
    }
}
