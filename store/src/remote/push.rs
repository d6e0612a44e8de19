//! Push: send a store's checkpoints (or one process's part of one) to a remote, segments
//! first, manifests last, only what the remote lacks; and join parts into a checkpoint.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::manifest::of_checkpoint;
use super::object::Remote;
use super::sync::{
    create_manifest, fetch_manifest, push_steps, upload_segments, Intent, Progress, PushReport,
    RemoteState,
};
use crate::engine::{checkpoint_steps, tag_list};
use crate::error::{InvalidInput, RemoteError, StoreError};
use crate::record::{Kind, Manifest};
use crate::store::contain;
use crate::Store;

/// Pushes every checkpoint of `store` the remote lacks, and the tags of the pushed
/// checkpoints. Incremental: segments the remote holds are not sent again, so a push
/// killed midway resumes where it stopped.
///
/// # Errors
/// [`RemoteError::Conflict`] if the remote holds a different checkpoint at one of the
/// store's steps (the other steps are pushed first), [`RemoteError::Tiered`] for a checkpoint
/// with tiered versions, request errors (nothing half-visible is left: a checkpoint appears
/// only once all its segments are up).
pub fn push(
    store: &Store,
    remote: &Remote,
    progress: Option<&(dyn Fn(Progress) + Sync)>,
) -> Result<PushReport, RemoteError> {
    Ok(contain(store.path(), "pushing", || {
        (|| {
            let r = store.read()?;
            let steps = checkpoint_steps(&r.checkpoints)?;
            let tags = tag_list(&r.tags)?;
            remote.block_on(async {
                remote.check_format(true).await?;
                let mut state = RemoteState::default();
                state.refresh(remote).await?;
                push_steps(remote, &r, &mut state, &steps, &tags, progress, true).await
            })
        })()
        .map_err(StoreError::from)
    })?)
}

/// Pushes checkpoint `step` of `store` as part `part` of the remote's checkpoint `step` (one
/// rank's shard); [`commit_parts`] joins the parts into the checkpoint.
///
/// # Errors
/// As [`push`]; [`RemoteError::Parts`] if the part exists with other content.
pub fn push_part(
    store: &Store,
    remote: &Remote,
    step: u64,
    part: &str,
) -> Result<PushReport, RemoteError> {
    Ok(contain(store.path(), "pushing a part", || {
        (|| {
            if part.is_empty() {
                return Err(StoreError::Invalid(InvalidInput::Name {
                    name: part.to_string(),
                    reason: "a part name must not be empty",
                })
                .into());
            }
            let r = store.read()?;
            let m = of_checkpoint(&r, step, Kind::Part)?;
            remote.block_on(async {
                remote.check_format(true).await?;
                let intent = Intent::declare(remote, &m).await?;
                let mut state = RemoteState::default();
                state.list_segments(remote).await?;
                let mut report = PushReport::default();
                let mut send = Vec::new();
                for (a, l) in m.segments() {
                    if state.has(a) {
                        report.segments_present += 1;
                    } else {
                        send.push((a, l));
                    }
                }
                upload_segments(remote, &r, send, None, &mut report).await?;
                let p = remote.part_path(step, part);
                let bytes = Bytes::from(m.encode());
                if !remote.create(&p, bytes).await? {
                    let same = fetch_manifest(remote, &p)
                        .await?
                        .is_some_and(|old| old == m);
                    if !same {
                        return Err(RemoteError::Parts {
                            step,
                            reason: format!("part {part:?} exists with other content ({p})"),
                        });
                    }
                }
                intent.withdraw(remote).await?;
                report.steps_sent.push(step);
                Ok(report)
            })
        })()
        .map_err(StoreError::from)
    })?)
}

/// Joins the parts pushed for `step` into one checkpoint with `metadata`, visible whole or
/// not at all, and removes the parts. Returns the number of tensors.
///
/// # Errors
/// [`RemoteError::Parts`] if there are none or two parts hold the same tensor;
/// [`RemoteError::Conflict`] if a different checkpoint exists at `step`.
pub fn commit_parts(remote: &Remote, step: u64, metadata: &str) -> Result<usize, RemoteError> {
    remote.block_on(async {
        let mut state = RemoteState::default();
        state.refresh(remote).await?;
        let parts: Vec<(&String, &Manifest)> = state
            .parts
            .iter()
            .filter(|((s, _), _)| *s == step)
            .map(|((_, p), m)| (p, m))
            .collect();
        let bad = |reason: String| RemoteError::Parts { step, reason };
        if parts.is_empty() {
            if state.checkpoints.contains_key(&step) {
                return Ok(state.checkpoints[&step].tensors.len());
            }
            return Err(bad("no part was pushed".into()));
        }
        let mut joined = Manifest {
            kind: Kind::Checkpoint,
            step,
            metadata: metadata.to_string(),
            tensors: Vec::new(),
            versions: BTreeMap::new(),
        };
        let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
        for (part, m) in &parts {
            for t in &m.tensors {
                if let Some(other) = owner.insert(t, part) {
                    return Err(bad(format!(
                        "tensor {t:?} is in parts {other:?} and {part:?}"
                    )));
                }
                joined.tensors.push(t.clone());
            }
            for (k, rec) in &m.versions {
                if joined.versions.get(k).is_some_and(|old| old != rec) {
                    return Err(bad(format!(
                        "parts disagree on tensor {:?} at step {}",
                        k.0, k.1
                    )));
                }
                joined.versions.insert(k.clone(), rec.clone());
            }
        }
        joined.tensors.sort();
        create_manifest(remote, &joined).await?;
        for (part, _) in &parts {
            remote.delete(&remote.part_path(step, part)).await?;
        }
        Ok(joined.tensors.len())
    })
}
