//! The write API of [`Store`]: `put`, `save_checkpoint`, `delete`, tags. Versions are
//! written through a streaming write session (`writer.rs`): encoded a window at a time inside
//! one write transaction.

use crate::engine::{check_name, delete_version, delete_versions, part_names, View};
use crate::error::{DbContext, NotFound, Result, StoreError};
use crate::options::PutOptions;
use crate::store::{contain, Store};
use crate::tensor::TensorRef;
use crate::writer::Session;

impl Store {
    /// Writes version `step` of tensor `name`.
    ///
    /// # Errors
    /// [`crate::InvalidInput::StepExists`] if the version exists (see [`Store::put_with`]),
    /// [`crate::InvalidInput::DataLength`], [`crate::InvalidInput::Shape`], [`crate::InvalidInput::Name`].
    pub fn put(&self, name: &str, step: u64, tensor: &TensorRef<'_>) -> Result<()> {
        contain(&self.path, "writing a version", || {
            self.put_with(name, step, tensor, &PutOptions::default())
        })
    }

    /// Writes version `step` of tensor `name` with options (e.g. overwrite).
    ///
    /// # Errors
    /// Those of [`Store::put`].
    pub fn put_with(
        &self,
        name: &str,
        step: u64,
        tensor: &TensorRef<'_>,
        opts: &PutOptions,
    ) -> Result<()> {
        contain(&self.path, "writing a version", || {
            let mut session = Session::begin(self, opts.overwrite)?;
            session.put(step, name, tensor)?;
            session.commit(step, |_| Ok(()))
        })
    }

    /// Writes every tensor of a checkpoint at `step` in one transaction: after a crash
    /// either all of them are there or none. `metadata` is stored as given (JSON or any text).
    /// Memory stays bounded by [`crate::Options::window_bytes`] beyond the caller's
    /// tensors (it is [`Store::begin_checkpoint`], a `put` per tensor, and `commit`).
    ///
    /// # Errors
    /// [`crate::InvalidInput::CheckpointExists`], [`crate::InvalidInput::DuplicateTensor`],
    /// [`crate::InvalidInput::StepExists`] if one of the tensors already has a version at `step`,
    /// and the input errors of [`Store::put`].
    pub fn save_checkpoint(
        &self,
        step: u64,
        tensors: &[(&str, TensorRef<'_>)],
        metadata: &str,
    ) -> Result<()> {
        contain(&self.path, "saving a checkpoint", || {
            let mut writer = self.begin_checkpoint(step, metadata)?;
            writer.put_many(tensors)?;
            writer.commit()
        })
    }

    /// Deletes version `step` of `name`. Versions whose blocks are deltas against it are
    /// re-encoded in the same transaction; the tensor leaves the checkpoint at `step`, if any
    /// (an emptied checkpoint is removed with its tags).
    ///
    /// # Errors
    /// [`crate::NotFound::Tensor`], [`crate::NotFound::Version`], and block errors
    /// if a dependent cannot be decoded.
    pub fn delete(&self, name: &str, step: u64) -> Result<()> {
        contain(&self.path, "deleting a version", || {
            check_name(name)?;
            let _writer = self.writer.lock();
            self.write(|wt| delete_version(wt, &self.cache, &self.opts, name, step, true))?;
            self.note_freed_pages();
            Ok(())
        })
    }

    /// Deletes the checkpoint at `step` whole, in one transaction: every tensor version of it
    /// (their dependents re-based, as [`Store::delete`] does), its record and its tags.
    /// Returns the number of tensor versions deleted.
    ///
    /// # Errors
    /// [`crate::NotFound::Checkpoint`], and block errors if a dependent cannot be decoded
    /// (nothing is deleted then).
    pub fn delete_checkpoint(&self, step: u64) -> Result<usize> {
        contain(&self.path, "deleting a checkpoint", || {
            let _writer = self.writer.lock();
            self.write(|wt| {
                let Some(cp) = wt.checkpoint(step)? else {
                    return Err(StoreError::NotFound(NotFound::Checkpoint { step }));
                };
                wt.remove_checkpoint(step)?;
                for name in cp.tensors.iter().chain(&part_names(&cp)) {
                    delete_versions(wt, &self.cache, &self.opts, name, &[step])?;
                }
                Ok(cp.tensors.len())
            })
            .inspect(|_| self.note_freed_pages())
        })
    }

    /// Names the checkpoint at `step` `tag` (moving the tag if it exists).
    ///
    /// # Errors
    /// [`crate::NotFound::Checkpoint`], [`crate::InvalidInput::Name`] for an empty tag.
    pub fn tag(&self, tag: &str, step: u64) -> Result<()> {
        contain(&self.path, "tagging", || {
            check_name(tag)?;
            let _writer = self.writer.lock();
            self.write(|wt| {
                if wt.checkpoint(step)?.is_none() {
                    return Err(StoreError::NotFound(NotFound::Checkpoint { step }));
                }
                wt.tags.insert(tag.as_bytes(), step).ctx("writing a tag")?;
                Ok(())
            })
        })
    }

    /// Removes a tag.
    ///
    /// # Errors
    /// [`crate::NotFound::Tag`].
    pub fn untag(&self, tag: &str) -> Result<()> {
        contain(&self.path, "untagging", || {
            let _writer = self.writer.lock();
            self.write(|wt| {
                if wt
                    .tags
                    .remove(tag.as_bytes())
                    .ctx("removing a tag")?
                    .is_none()
                {
                    return Err(StoreError::NotFound(NotFound::Tag {
                        tag: tag.to_string(),
                    }));
                }
                Ok(())
            })
        })
    }
}
