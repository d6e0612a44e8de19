//! Retention and garbage collection on a remote. Deleting a checkpoint moves its manifest to
//! `trash/`; [`gc`] removes segments no manifest names, trash and abandoned parts, each only
//! once older than the grace period, so that a reader that listed a checkpoint before it was
//! deleted, or a push that counted on a segment, never loses data under it (ADR 0018).

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use super::lease::{remove_dead_leases, GcLease};
use super::object::Remote;
use super::pull::remote_tags;
use super::sync::{fetch_manifest, RemoteState};
use crate::error::InvalidInput;
use crate::error::RemoteError;
use crate::retain::RetainPolicy;
use crate::StoreError;

/// The shortest grace period [`gc`] accepts.
pub const MIN_GRACE: Duration = Duration::from_secs(3600);

/// What a garbage collection did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Segments some manifest (live, trashed within the grace period, or a part) names.
    pub segments_kept: u64,
    /// Segments deleted.
    pub segments_deleted: u64,
    /// Bytes of the deleted segments.
    pub bytes_deleted: u64,
    /// Unnamed segments left because they are younger than the grace period.
    pub segments_young: u64,
    /// Trashed manifests and abandoned parts deleted.
    pub manifests_deleted: u64,
    /// Unnamed old segments left because the gc ran out of the time its lease allows for
    /// deletes (ADR 0018: 8 minutes by default); the next gc goes on.
    pub segments_left: u64,
}

/// Deletes the remote's checkpoints that `policy` does not keep (tagged steps count as the
/// remote's tags say), moving each manifest to the trash first. Returns the deleted steps.
///
/// # Errors
/// [`InvalidInput::Options`] for a policy that keeps nothing by count or period; request
/// errors (a step whose manifest was moved but not deleted is retried by the next call).
pub fn retain(remote: &Remote, policy: &RetainPolicy) -> Result<Vec<u64>, RemoteError> {
    if policy.keep_last.is_none() && policy.keep_every.is_none() {
        return Err(StoreError::Invalid(InvalidInput::Options {
            reason: "a retention policy needs keep_last or keep_every".into(),
        })
        .into());
    }
    let tags = remote_tags(remote)?;
    let tagged: BTreeSet<u64> = tags.iter().map(|(_, s)| *s).collect();
    remote.block_on(async {
        let mut steps = Vec::new();
        for meta in remote.list("checkpoints").await? {
            if let Some(s) = remote
                .name_in(&meta.location, "checkpoints")
                .and_then(|n| n.parse::<u64>().ok())
            {
                steps.push(s);
            }
        }
        steps.sort_unstable();
        let kept = policy.kept(&steps, &tagged);
        let mut deleted = Vec::new();
        let now_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        for step in steps.into_iter().filter(|s| !kept.contains(s)) {
            let p = remote.manifest_path(step);
            let Some(bytes) = remote.get(&p).await? else {
                continue;
            };
            let trash = remote.path(&format!("trash/{step:020}-{now_ms}"));
            remote.put(&trash, bytes).await?;
            remote.delete(&p).await?;
            deleted.push(step);
        }
        for (name, step) in &tags {
            if deleted.contains(step) {
                remote.delete(&remote.tag_path(name)).await?;
            }
        }
        Ok(deleted)
    })
}

/// Removes what no manifest needs: segments named by no live checkpoint, no part and no
/// trashed manifest younger than `grace`, once they are older than `grace`; trashed
/// manifests and parts older than `grace`.
///
/// # Errors
/// [`InvalidInput::Options`] if `grace` is under [`MIN_GRACE`] (one hour: what a reader of
/// a checkpoint that is being deleted has to finish); request errors.
pub fn gc(remote: &Remote, grace: Duration) -> Result<GcReport, RemoteError> {
    if grace < MIN_GRACE {
        return Err(StoreError::Invalid(InvalidInput::Options {
            reason: format!(
                "the grace period must be at least {} s: a reader that listed a checkpoint before it was deleted has that long to finish",
                MIN_GRACE.as_secs()
            ),
        })
        .into());
    }
    gc_at(remote, grace, SystemTime::now())
}

/// [`gc`] as if the time were `now` (tests move the clock instead of waiting).
///
/// The gc holds a lease (`leases/gc-...`, module `lease`) from before its first listing to
/// after its last delete, so that no push decides what to send while it may delete. It lists
/// the intents of pushes in progress, then parts, then checkpoints, then the trash, then the
/// segments: a checkpoint a push creates before it withdraws its intent, one `commit_parts`
/// creates before it deletes the parts, or one `retain` moves to the trash before deleting
/// it, is seen in one of the two listings.
#[doc(hidden)]
pub fn gc_at(remote: &Remote, grace: Duration, now: SystemTime) -> Result<GcReport, RemoteError> {
    gc_clocks(remote, grace, now, now)
}

/// [`gc`] judging the segments' ages as if the clock were `ahead` later (tests: every
/// unnamed segment counts as old, so a gc deletes whatever no intent or manifest names;
/// the protocol must keep pushes safe whatever the segments' ages). Intents, parts and the
/// trash keep their real ages.
#[doc(hidden)]
pub fn gc_with_segments_aged(
    remote: &Remote,
    grace: Duration,
    ahead: Duration,
) -> Result<GcReport, RemoteError> {
    let now = SystemTime::now();
    gc_clocks(remote, grace, now, now + ahead)
}

/// A gc judging manifests' ages at `now` and segments' at `segments_now`.
fn gc_clocks(
    remote: &Remote,
    grace: Duration,
    now: SystemTime,
    segments_now: SystemTime,
) -> Result<GcReport, RemoteError> {
    remote.block_on(async {
        if !remote.check_format(false).await? {
            return Ok(GcReport::default());
        }
        let lease = GcLease::take(remote).await?;
        let result = collect(remote, grace, (now, segments_now), &lease).await;
        // Released even after an error: a push would otherwise wait for it to expire.
        let released = lease.release(remote).await;
        let report = result?;
        released?;
        remove_dead_leases(remote, now).await?;
        Ok(report)
    })
}

/// The listings and deletes of a gc that holds `lease`.
async fn collect(
    remote: &Remote,
    grace: Duration,
    (now, segments_now): (SystemTime, SystemTime),
    lease: &GcLease,
) -> Result<GcReport, RemoteError> {
    let old = |t: SystemTime| now.duration_since(t).unwrap_or_default() >= grace;
    let old_segment = |t: SystemTime| segments_now.duration_since(t).unwrap_or_default() >= grace;
    let mut report = GcReport::default();
    // Intents of pushes in progress; one older than the grace period is a killed push's.
    let mut intents = BTreeSet::new();
    for meta in remote.list("intents").await? {
        if old(meta.last_modified.into()) && lease.may_delete(remote) {
            remote.delete(&meta.location).await?;
            report.manifests_deleted += 1;
        } else if let Some(m) = fetch_manifest(remote, &meta.location).await? {
            intents.extend(m.segments().into_keys());
        }
    }
    let mut state = RemoteState::default();
    state.refresh(remote).await?;
    let mut named = intents;
    named.extend(state.named.iter().copied());
    for meta in remote.list("trash").await? {
        if old(meta.last_modified.into()) && lease.may_delete(remote) {
            remote.delete(&meta.location).await?;
            report.manifests_deleted += 1;
        } else if let Some(m) = fetch_manifest(remote, &meta.location).await? {
            named.extend(m.segments().into_keys());
        }
    }
    // An abandoned part's segments stay named this time; the next gc may delete them.
    for ((step, part), pushed) in &state.part_times {
        if old(*pushed) && lease.may_delete(remote) {
            remote.delete(&remote.part_path(*step, part)).await?;
            report.manifests_deleted += 1;
        }
    }
    for meta in remote.list("segments").await? {
        let Some(address) = remote
            .name_in(&meta.location, "segments")
            .and_then(|n| u128::from_str_radix(n, 16).ok())
        else {
            continue;
        };
        if named.contains(&address) {
            report.segments_kept += 1;
        } else if !old_segment(meta.last_modified.into()) {
            report.segments_young += 1;
        } else if lease.may_delete(remote) {
            remote.delete(&meta.location).await?;
            report.segments_deleted += 1;
            report.bytes_deleted += meta.size;
        } else {
            report.segments_left += 1;
        }
    }
    Ok(report)
}
