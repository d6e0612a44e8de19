//! What a push does on the remote, given a read snapshot of a store: the remote's state
//! (manifests and segments), sending the segments it lacks, creating manifests. Used by
//! [`super::push`], [`super::pull`], [`super::gc`] and the background uploader, which has a
//! snapshot but no `Store`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use super::manifest::of_checkpoint;
use super::object::{unhex, Remote};
use crate::engine::{ReadTxn, View};
use crate::error::RemoteError;
use crate::record::{Kind, Manifest};

/// Uploads in flight at once.
const PARALLEL: usize = 8;
/// A segment already in the remote but named by no manifest is sent again (refreshing its
/// age) once older than this: [`super::gc`] removes unnamed segments only past its grace
/// period, which must be at least twice this (ADR 0018).
pub(crate) const REFRESH_AGE: Duration = Duration::from_secs(30 * 60);

/// How far a push or pull has come, for progress bars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Segment bytes moved so far.
    pub bytes_done: u64,
    /// Segment bytes this call will move.
    pub bytes_total: u64,
}

/// What a push did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushReport {
    /// Checkpoints whose manifest this push created.
    pub steps_sent: Vec<u64>,
    /// Checkpoints the remote held already, identical.
    pub steps_present: usize,
    /// Segments sent.
    pub segments_sent: u64,
    /// Segment bytes sent.
    pub bytes_sent: u64,
    /// Segments the new manifests name that the remote held already.
    pub segments_present: u64,
    /// Tags written.
    pub tags_sent: usize,
}

/// What a push knows of the remote: its manifests (immutable, so fetched once) and, when
/// listed, its segments' ages.
#[derive(Debug, Default)]
pub(crate) struct RemoteState {
    /// Checkpoint manifests by step.
    pub(crate) checkpoints: BTreeMap<u64, Manifest>,
    /// Part manifests by (step, part name).
    pub(crate) parts: BTreeMap<(u64, String), Manifest>,
    /// Segments some manifest names.
    pub(crate) named: BTreeSet<u128>,
    /// Segments present, with their last-modified time (only after [`RemoteState::list_segments`]).
    pub(crate) segments: HashMap<u128, SystemTime>,
}

impl RemoteState {
    /// Lists the remote's manifests and fetches those not known yet (all on the first call).
    pub(crate) async fn refresh(&mut self, remote: &Remote) -> Result<(), RemoteError> {
        let listed = remote.list("checkpoints").await?;
        let mut live = BTreeSet::new();
        let mut todo = Vec::new();
        for meta in listed {
            let Some(step) = remote
                .name_in(&meta.location, "checkpoints")
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            live.insert(step);
            if !self.checkpoints.contains_key(&step) {
                todo.push((step, meta.location));
            }
        }
        self.checkpoints.retain(|s, _| live.contains(s));
        let fetched: Vec<(u64, Option<Manifest>)> = futures::stream::iter(todo)
            .map(|(step, p)| async move {
                Ok::<_, RemoteError>((step, fetch_manifest(remote, &p).await?))
            })
            .buffer_unordered(PARALLEL)
            .try_collect()
            .await?;
        for (step, m) in fetched {
            if let Some(m) = m {
                check_step(&m, step, &remote.manifest_path(step))?;
                self.checkpoints.insert(step, m);
            }
        }
        self.parts.clear();
        for meta in remote.list("parts").await? {
            let Some((step, part)) = remote.name_in(&meta.location, "parts").and_then(|n| {
                let (s, p) = n.split_once('/')?;
                Some((s.parse::<u64>().ok()?, unhex(p)?))
            }) else {
                continue;
            };
            if let Some(m) = fetch_manifest(remote, &meta.location).await? {
                self.parts.insert((step, part), m);
            }
        }
        self.named = self
            .checkpoints
            .values()
            .chain(self.parts.values())
            .flat_map(|m| m.segments().into_keys())
            .collect();
        Ok(())
    }

    /// Lists the remote's segments with their ages.
    pub(crate) async fn list_segments(&mut self, remote: &Remote) -> Result<(), RemoteError> {
        self.segments.clear();
        for meta in remote.list("segments").await? {
            if let Some(a) = remote
                .name_in(&meta.location, "segments")
                .and_then(|n| u128::from_str_radix(n, 16).ok())
            {
                self.segments.insert(a, meta.last_modified.into());
            }
        }
        Ok(())
    }

    /// Whether a push may leave segment `address` out: a manifest names it, or it is
    /// present and young enough that no garbage collection can remove it before the push
    /// ends.
    fn has(&self, address: u128, now: SystemTime) -> bool {
        self.named.contains(&address)
            || self
                .segments
                .get(&address)
                .is_some_and(|t| now.duration_since(*t).unwrap_or_default() < REFRESH_AGE)
    }
}

/// Fetches and decodes a manifest (`None` if it vanished meanwhile).
pub(crate) async fn fetch_manifest(
    remote: &Remote,
    p: &object_store::path::Path,
) -> Result<Option<Manifest>, RemoteError> {
    let Some(bytes) = remote.get(p).await? else {
        return Ok(None);
    };
    Manifest::decode(&bytes)
        .map(Some)
        .map_err(|source| match source {
            crate::record::ManifestError::NewerFormat { found } => RemoteError::NewerFormat {
                object: p.to_string(),
                found: found.into(),
                supported: crate::record::MANIFEST_FORMAT.into(),
            },
            source => RemoteError::BadManifest {
                object: p.to_string(),
                source,
            },
        })
}

/// A manifest must describe the step its object is named after.
fn check_step(m: &Manifest, step: u64, p: &object_store::path::Path) -> Result<(), RemoteError> {
    if m.step == step && m.kind == Kind::Checkpoint {
        return Ok(());
    }
    Err(RemoteError::BadManifest {
        object: p.to_string(),
        source: crate::record::ManifestError::Inconsistent(format!(
            "it describes step {} ({:?}), not checkpoint {step}",
            m.step, m.kind
        )),
    })
}

/// Pushes `steps` of the snapshot `r`: segments the remote lacks, then one manifest per
/// step, then the tags naming pushed steps.
pub(crate) async fn push_steps(
    remote: &Remote,
    r: &ReadTxn,
    state: &mut RemoteState,
    steps: &[u64],
    tags: &[(String, u64)],
    progress: Option<&(dyn Fn(Progress) + Sync)>,
) -> Result<PushReport, RemoteError> {
    let mut report = PushReport::default();
    let mut todo = Vec::new();
    let mut conflict = None;
    // Versions the remote holds, by (tensor, step): a new checkpoint whose chain holds a
    // different version at one of them builds on a history the remote does not have.
    let known: HashMap<(&str, u64), &crate::record::VersionRecord> = state
        .checkpoints
        .values()
        .flat_map(|m| {
            m.versions
                .iter()
                .map(|((n, s), rec)| ((n.as_str(), *s), rec))
        })
        .collect();
    for &step in steps {
        let m = of_checkpoint(r, step, Kind::Checkpoint)?;
        let disagrees = m
            .versions
            .iter()
            .any(|((n, s), rec)| known.get(&(n.as_str(), *s)).is_some_and(|old| *old != rec));
        match state.checkpoints.get(&step) {
            Some(old) if *old == m => report.steps_present += 1,
            Some(_) => {
                conflict.get_or_insert(step);
            }
            None if disagrees => {
                conflict.get_or_insert(step);
            }
            None => todo.push(m),
        }
    }
    drop(known);
    let mut needed = BTreeMap::new();
    for m in &todo {
        needed.extend(m.segments());
    }
    send_segments(remote, r, state, &needed, progress, &mut report).await?;
    for m in todo {
        let step = m.step;
        match create_manifest(remote, &m).await {
            Ok(()) => {}
            Err(RemoteError::Conflict { .. }) => {
                conflict.get_or_insert(step);
                continue;
            }
            Err(e) => return Err(e),
        }
        state.named.extend(m.segments().into_keys());
        state.checkpoints.insert(step, m);
        report.steps_sent.push(step);
    }
    for (name, step) in tags {
        if !state.checkpoints.contains_key(step) {
            continue;
        }
        let p = remote.tag_path(name);
        let text = step.to_string();
        if remote.get(&p).await?.as_deref() != Some(text.as_bytes()) {
            remote.put(&p, Bytes::from(text)).await?;
            report.tags_sent += 1;
        }
    }
    match conflict {
        Some(step) => Err(RemoteError::Conflict {
            step,
            object: remote.manifest_path(step).to_string(),
        }),
        None => Ok(report),
    }
}

/// Creates the manifest object of `m`; an existing identical one counts as created (the
/// response of an earlier attempt was lost), a different one is a conflict.
pub(crate) async fn create_manifest(remote: &Remote, m: &Manifest) -> Result<(), RemoteError> {
    let p = remote.manifest_path(m.step);
    if remote.create(&p, Bytes::from(m.encode())).await? {
        return Ok(());
    }
    match fetch_manifest(remote, &p).await? {
        Some(old) if old == *m => Ok(()),
        _ => Err(RemoteError::Conflict {
            step: m.step,
            object: p.to_string(),
        }),
    }
}

/// Sends the segments of `needed` the remote lacks, [`PARALLEL`] at a time.
pub(crate) async fn send_segments(
    remote: &Remote,
    r: &ReadTxn,
    state: &RemoteState,
    needed: &BTreeMap<u128, u32>,
    progress: Option<&(dyn Fn(Progress) + Sync)>,
    report: &mut PushReport,
) -> Result<(), RemoteError> {
    let now = SystemTime::now();
    let send: Vec<(u128, u32)> = needed
        .iter()
        .filter(|(a, _)| !state.has(**a, now))
        .map(|(a, l)| (*a, *l))
        .collect();
    report.segments_present += (needed.len() - send.len()) as u64;
    let total: u64 = send.iter().map(|(_, l)| u64::from(*l)).sum();
    let done = AtomicU64::new(0);
    if let Some(p) = progress {
        p(Progress {
            bytes_done: 0,
            bytes_total: total,
        });
    }
    futures::stream::iter(send)
        .map(|(address, _)| {
            let bytes = r
                .segment_bytes(address)
                .map_err(|e| crate::engine::fetch_error(e, "(a segment to push)", 0, 0, address));
            let done = &done;
            async move {
                let bytes = bytes?;
                let len = bytes.len() as u64;
                remote
                    .put(&remote.segment_path(address), Bytes::from(bytes))
                    .await?;
                let d = done.fetch_add(len, Ordering::Relaxed) + len;
                if let Some(p) = progress {
                    p(Progress {
                        bytes_done: d,
                        bytes_total: total,
                    });
                }
                Ok::<u64, RemoteError>(len)
            }
        })
        .buffer_unordered(PARALLEL)
        .try_for_each(|len| {
            report.segments_sent += 1;
            report.bytes_sent += len;
            futures::future::ready(Ok(()))
        })
        .await
}
