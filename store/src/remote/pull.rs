//! Pull: bring a remote's checkpoints into a local store, fetching only the segments the
//! store lacks, one transaction per checkpoint (visible whole or not at all).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use twox_hash::XxHash3_128;

use super::manifest::of_checkpoint;
use super::object::{unhex, Remote, RANGE_BYTES};
use super::sync::{Progress, RemoteState};
use crate::engine::{checkpoint_steps, View, WriteTxn};
use crate::error::RemoteError;
use crate::error::StoreError;
use crate::record::Kind;
use crate::record::{CheckpointRecord, VersionRecord};
use crate::store::contain;
use crate::Store;

/// Downloads in flight at once.
const PARALLEL: usize = 8;

/// What a pull did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PullReport {
    /// Checkpoints added to the store.
    pub steps_received: Vec<u64>,
    /// Checkpoints the store held already, identical.
    pub steps_present: usize,
    /// Segments fetched.
    pub segments_received: u64,
    /// Segment bytes fetched.
    pub bytes_received: u64,
    /// Tags set in the store.
    pub tags_received: usize,
}

/// Pulls every checkpoint of the remote the store lacks, and the remote's tags.
/// Incremental: a pull killed midway loses at most the checkpoint it was writing.
///
/// # Errors
/// [`RemoteError::Conflict`] if the store holds a different checkpoint at a remote step (the
/// others are pulled first), [`RemoteError::VersionConflict`], damaged segments or manifests
/// (named), request errors, store errors.
pub fn pull(
    remote: &Remote,
    store: &Store,
    progress: Option<&(dyn Fn(Progress) + Sync)>,
) -> Result<PullReport, RemoteError> {
    Ok(contain(store.path(), "pulling", || {
        (|| {
            let mut report = PullReport::default();
            let mut state = RemoteState::default();
            let exists = remote.block_on(async {
                if !remote.check_format(false).await? {
                    return Ok::<_, RemoteError>(false);
                }
                state.refresh(remote).await?;
                Ok(true)
            })?;
            if !exists {
                return Ok(report);
            }
            let local: BTreeSet<u64> = checkpoint_steps(&store.read()?.checkpoints)?
                .into_iter()
                .collect();
            let mut conflict = None;
            let total: u64 = state
                .checkpoints
                .iter()
                .filter(|(s, _)| !local.contains(s))
                .map(|(_, m)| m.segments().values().map(|l| u64::from(*l)).sum::<u64>())
                .sum();
            let done = AtomicU64::new(0);
            let tick = |len: u64| {
                let d = done.fetch_add(len, Ordering::Relaxed) + len;
                if let Some(p) = progress {
                    p(Progress {
                        bytes_done: d,
                        bytes_total: total,
                    });
                }
            };
            for (step, m) in &state.checkpoints {
                if local.contains(step) {
                    let mine = of_checkpoint(&store.read()?, *step, Kind::Checkpoint);
                    match mine {
                        Ok(mine) if mine.same_content(m) => report.steps_present += 1,
                        _ => {
                            conflict.get_or_insert(*step);
                        }
                    }
                    continue;
                }
                let cp = CheckpointRecord::new(m.metadata.clone(), m.tensors.clone());
                let (segments, bytes) =
                    apply(store, remote, &m.versions, Some((*step, &cp)), &tick)?;
                report.segments_received += segments;
                report.bytes_received += bytes;
                report.steps_received.push(*step);
            }
            for (name, step) in remote_tags(remote)? {
                if state.checkpoints.contains_key(&step)
                    && store.tags()?.iter().all(|t| *t != (name.clone(), step))
                {
                    store.tag(&name, step)?;
                    report.tags_received += 1;
                }
            }
            match conflict {
                Some(step) => Err(RemoteError::Conflict {
                    step,
                    object: remote.manifest_path(step).to_string(),
                }),
                None => Ok(report),
            }
        })()
        .map_err(StoreError::from)
    })?)
}

/// The remote's tags, as (name, step).
pub(crate) fn remote_tags(remote: &Remote) -> Result<Vec<(String, u64)>, RemoteError> {
    remote.block_on(async {
        let mut out = Vec::new();
        for meta in remote.list("tags").await? {
            let Some(name) = remote.name_in(&meta.location, "tags").and_then(unhex) else {
                continue;
            };
            let Some(bytes) = remote.get(&meta.location).await? else {
                continue;
            };
            if let Some(step) = std::str::from_utf8(&bytes)
                .ok()
                .and_then(|t| t.trim().parse().ok())
            {
                out.push((name, step));
            }
        }
        Ok(out)
    })
}

/// Adds `versions` (and the checkpoint record, if given) to the store in one transaction,
/// fetching the segments it lacks. Versions the store holds already must be identical.
/// Returns the segments and bytes fetched.
pub(crate) fn apply(
    store: &Store,
    remote: &Remote,
    versions: &BTreeMap<(String, u64), VersionRecord>,
    checkpoint: Option<(u64, &CheckpointRecord)>,
    tick: &(dyn Fn(u64) + Sync),
) -> Result<(u64, u64), RemoteError> {
    let _writer = store.writer.lock();
    store
        .write(|wt| apply_in(wt, remote, versions, checkpoint, tick).map_err(StoreError::from))
        .map_err(RemoteError::from)
}

fn apply_in(
    wt: &mut WriteTxn<'_>,
    remote: &Remote,
    versions: &BTreeMap<(String, u64), VersionRecord>,
    checkpoint: Option<(u64, &CheckpointRecord)>,
    tick: &(dyn Fn(u64) + Sync),
) -> Result<(u64, u64), RemoteError> {
    let mut new = Vec::new();
    for ((name, step), rec) in versions {
        match wt.version(name, *step)? {
            // The same data, perhaps encoded against other bases: the store's stays.
            Some(old) if old.same_content(rec) => {}
            Some(_) => {
                return Err(RemoteError::VersionConflict {
                    tensor: name.clone(),
                    step: *step,
                })
            }
            None => new.push((name, *step, rec)),
        }
    }
    let mut refs: BTreeMap<u128, (u32, u64)> = BTreeMap::new();
    for (_, _, rec) in &new {
        for b in rec.blocks.iter().filter(|b| b.has_segment()) {
            refs.entry(b.address).or_insert((b.segment_len, 0)).1 += 1;
        }
    }
    let mut missing = Vec::new();
    for (address, (len, _)) in &refs {
        if !wt.has_segment(*address)? {
            missing.push((*address, *len));
        }
    }
    let mut fetched = HashMap::new();
    let (mut count, mut bytes) = (0u64, 0u64);
    remote.block_on(
        futures::stream::iter(missing)
            .map(|(address, len)| async move {
                let b = fetch_segment(remote, address, len).await?;
                tick(b.len() as u64);
                Ok::<_, RemoteError>((address, b))
            })
            .buffer_unordered(PARALLEL)
            .try_for_each(|(address, b)| {
                let r = wt
                    .add_ref("(pulled segment)", 0, 0, address, Some(&b))
                    .map_err(RemoteError::from);
                count += 1;
                bytes += b.len() as u64;
                fetched.insert(address, ());
                futures::future::ready(r)
            }),
    )?;
    for (address, (_, n)) in &refs {
        let first = u64::from(fetched.contains_key(address));
        for _ in first..*n {
            wt.add_ref("(pulled segment)", 0, 0, *address, None)?;
        }
    }
    for (name, step, rec) in &new {
        wt.put_version(name, *step, rec)?;
    }
    if let Some((step, cp)) = checkpoint {
        wt.put_checkpoint(step, cp)?;
    }
    Ok((count, bytes))
}

/// Fetches a segment (in parallel ranges if large) and checks its length and address.
pub(crate) async fn fetch_segment(
    remote: &Remote,
    address: u128,
    len: u32,
) -> Result<Bytes, RemoteError> {
    let p = remote.segment_path(address);
    let len = u64::from(len);
    if len > crate::engine::MAX_SEGMENT_BYTES {
        return Err(RemoteError::BadSegment {
            object: p.to_string(),
            reason: format!("the manifest says {len} bytes, over the store's segment limit"),
        });
    }
    let bytes = if len > RANGE_BYTES {
        let ranges: Vec<_> = (0..len)
            .step_by(RANGE_BYTES as usize)
            .map(|s| s..(s + RANGE_BYTES).min(len))
            .collect();
        let parts: Vec<Bytes> = futures::stream::iter(ranges)
            .map(|r| remote.get_range(&p, r))
            .buffered(4)
            .try_collect()
            .await?;
        let mut all = Vec::with_capacity(len as usize);
        for part in parts {
            all.extend_from_slice(&part);
        }
        Bytes::from(all)
    } else {
        remote
            .get(&p)
            .await?
            .ok_or_else(|| RemoteError::BadSegment {
                object: p.to_string(),
                reason: "it is missing, though a manifest names it".into(),
            })?
    };
    let bad = |reason: String| RemoteError::BadSegment {
        object: p.to_string(),
        reason,
    };
    if bytes.len() as u64 != len {
        return Err(bad(format!(
            "{} bytes, the manifest says {len}",
            bytes.len()
        )));
    }
    let found = XxHash3_128::oneshot(&bytes);
    if found != address {
        return Err(bad(format!("its bytes hash to {found:032x}")));
    }
    Ok(bytes)
}
