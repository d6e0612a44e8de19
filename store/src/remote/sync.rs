//! What a push does on the remote, given a read snapshot of a store: the remote's state
//! (manifests and segments), sending the segments it lacks, creating manifests. Used by
//! [`super::push`], [`super::pull`], [`super::gc`] and the background uploader, which has a
//! snapshot but no `Store`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use super::lease::wait_for_gc;
use super::manifest::of_checkpoint;
use super::object::{unhex, Remote};
use crate::engine::{ReadTxn, View};
use crate::error::RemoteError;
use crate::record::{Kind, Manifest};

/// Uploads in flight at once.
const PARALLEL: usize = 8;

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
    /// Segments sent again because a manifest of the store's checkpoints named them and the
    /// remote had lost them (a garbage collection racing an earlier push).
    pub segments_repaired: u64,
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
    /// When each part was pushed.
    pub(crate) part_times: BTreeMap<(u64, String), SystemTime>,
    /// Segments some manifest names.
    pub(crate) named: BTreeSet<u128>,
    /// Segments present, with their last-modified time (only after [`RemoteState::list_segments`]).
    pub(crate) segments: HashMap<u128, SystemTime>,
    /// Whether `segments` holds a listing.
    pub(crate) listed: bool,
}

impl RemoteState {
    /// Lists the remote's manifests and fetches those not known yet (all on the first call):
    /// parts first, then checkpoints, so that a checkpoint `commit_parts` creates before it
    /// deletes the parts is seen in one of the two listings.
    pub(crate) async fn refresh(&mut self, remote: &Remote) -> Result<(), RemoteError> {
        self.parts.clear();
        self.part_times.clear();
        for meta in remote.list("parts").await? {
            let Some((step, part)) = remote.name_in(&meta.location, "parts").and_then(|n| {
                let (s, p) = n.split_once('/')?;
                Some((s.parse::<u64>().ok()?, unhex(p)?))
            }) else {
                continue;
            };
            if let Some(m) = fetch_manifest(remote, &meta.location).await? {
                self.part_times
                    .insert((step, part.clone()), meta.last_modified.into());
                self.parts.insert((step, part), m);
            }
        }
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
        self.listed = true;
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

    /// The segments of `m` the remote lacks ([`RemoteState::has`]), with their lengths; those
    /// it holds are counted in `report`.
    pub(crate) fn missing(&self, m: &Manifest, report: &mut PushReport) -> Vec<(u128, u32)> {
        let mut send = Vec::new();
        for (a, l) in m.segments() {
            if self.has(a) {
                report.segments_present += 1;
            } else {
                send.push((a, l));
            }
        }
        send
    }

    /// Whether the remote holds segment `address`, as far as a push that declared an
    /// [`Intent`] naming it knows: in the listing taken after the intent; without a
    /// listing, named by a manifest live after the intent (which keeps it as long as it
    /// lives; the intent keeps it after).
    pub(crate) fn has(&self, address: u128) -> bool {
        if self.listed {
            self.segments.contains_key(&address)
        } else {
            self.named.contains(&address)
        }
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

/// Pushes `steps` of the snapshot `r` (the remote's manifests already in `state`), then the
/// tags naming pushed steps. For the new checkpoints, and the ones the remote holds
/// identical, the segments are made safe first ([`Intent`]): the remote's listing then says
/// what to send (with `list`), or, without it (the background uploader, which does not list a
/// growing remote for every checkpoint), every segment no live manifest names is sent. A
/// checkpoint the remote holds already whose segments it lost (an older push that a gc raced)
/// is repaired: the missing segments are sent again (with `list`).
pub(crate) async fn push_steps(
    remote: &Remote,
    r: &ReadTxn,
    state: &mut RemoteState,
    steps: &[u64],
    tags: &[(String, u64)],
    progress: Option<&(dyn Fn(Progress) + Sync)>,
    list: bool,
) -> Result<PushReport, RemoteError> {
    let mut report = PushReport::default();
    let mut todo = Vec::new();
    let mut conflict = None;
    // Segments of the checkpoints the remote holds already, identical: checked, not trusted.
    let mut present: BTreeMap<u128, u32> = BTreeMap::new();
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
        let disagrees = m.versions.iter().any(|((n, s), rec)| {
            known
                .get(&(n.as_str(), *s))
                .is_some_and(|old| !old.same_content(rec))
        });
        match state.checkpoints.get(&step) {
            Some(old) if *old == m => {
                report.steps_present += 1;
                if list {
                    present.extend(m.segments());
                }
            }
            Some(old) if old.same_content(&m) => {
                // The same data, encoded differently since it was pushed: the remote's
                // manifest stays. Of its segments, those this store holds too can be repaired.
                report.steps_present += 1;
                if list {
                    let ours = m.segments();
                    present.extend(
                        old.segments()
                            .into_iter()
                            .filter(|(a, _)| ours.contains_key(a)),
                    );
                }
            }
            Some(_) => {
                conflict = Some(conflict.map_or(step, |c: u64| c.min(step)));
            }
            None if disagrees => {
                conflict = Some(conflict.map_or(step, |c: u64| c.min(step)));
            }
            None => todo.push(m),
        }
    }
    drop(known);
    if let Some(first) = conflict {
        // The store's history parts from the remote's at `first`: a later checkpoint is of
        // that other history, even one that needs no version the remote holds (a keyframe).
        todo.retain(|m| m.step < first);
    }
    if !todo.is_empty() || !present.is_empty() {
        // A present checkpoint's segments need no intent: its live manifest (or, once
        // retained, its trashed one) keeps them from every gc that lists it.
        let mut versions = BTreeMap::new();
        for m in &todo {
            versions.extend(m.versions.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let needed = Manifest {
            kind: Kind::Part,
            step: todo.first().map_or(0, |m| m.step),
            metadata: String::new(),
            tensors: Vec::new(),
            versions,
        };
        let intent = match todo.is_empty() {
            true => None,
            false => Some(Intent::declare(remote, &needed).await?),
        };
        if list {
            state.list_segments(remote).await?;
        } else {
            state.refresh(remote).await?;
        }
        let mut send = state.missing(&needed, &mut report);
        for (a, l) in &present {
            if !state.has(*a) && !send.iter().any(|(s, _)| s == a) {
                report.segments_repaired += 1;
                send.push((*a, *l));
            }
        }
        upload_segments(remote, r, send, progress, &mut report).await?;
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
        if let Some(intent) = intent {
            intent.withdraw(remote).await?;
        }
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

/// A push's declaration of the segments it is about to name, `intents/<nonce>` (a part
/// manifest without tensors), which every garbage collection that lists it keeps alive
/// (module `lease`). Declared before the push decides what the remote holds, withdrawn once
/// its manifests exist.
#[derive(Debug)]
pub(crate) struct Intent {
    path: object_store::path::Path,
}

impl Intent {
    /// Writes the intent naming the segments of `needed`, then waits for every
    /// gc that may not have listed it (its lease is as old as the intent) to finish: from
    /// then on no gc deletes a segment the intent names.
    pub(crate) async fn declare(remote: &Remote, needed: &Manifest) -> Result<Intent, RemoteError> {
        let nonce = twox_hash::XxHash3_64::oneshot(
            format!(
                "{}-{:?}-{:?}",
                std::process::id(),
                std::thread::current().id(),
                SystemTime::now()
            )
            .as_bytes(),
        );
        let ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let path = remote.path(&format!("intents/{ms:013}-{nonce:016x}"));
        remote.put(&path, Bytes::from(needed.encode())).await?;
        let stamp = remote
            .head(&path)
            .await?
            .map_or_else(SystemTime::now, |meta| meta.last_modified.into());
        wait_for_gc(remote, stamp).await?;
        Ok(Intent { path })
    }

    /// Deletes the intent (the manifests it stood for exist now).
    pub(crate) async fn withdraw(self, remote: &Remote) -> Result<(), RemoteError> {
        remote.delete(&self.path).await
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
        Some(old) if old.same_content(m) => Ok(()),
        _ => Err(RemoteError::Conflict {
            step: m.step,
            object: p.to_string(),
        }),
    }
}

/// Sends the segments `send` (address, length) of the snapshot, [`PARALLEL`] at a time.
pub(crate) async fn upload_segments(
    remote: &Remote,
    r: &ReadTxn,
    send: Vec<(u128, u32)>,
    progress: Option<&(dyn Fn(Progress) + Sync)>,
    report: &mut PushReport,
) -> Result<(), RemoteError> {
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
