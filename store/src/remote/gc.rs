//! Retention and garbage collection on a remote. Deleting a checkpoint moves its manifest to
//! `trash/`; [`gc`] removes segments no manifest names, trash and abandoned parts, each only
//! once older than the grace period, so that a reader that listed a checkpoint before it was
//! deleted, or a push that counted on a segment, never loses data under it (ADR 0018).

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use super::object::Remote;
use super::pull::remote_tags;
use super::sync::{fetch_manifest, RemoteState, REFRESH_AGE};
use crate::error::InvalidInput;
use crate::error::RemoteError;
use crate::retain::RetainPolicy;
use crate::StoreError;

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
/// [`InvalidInput::Options`] if `grace` is under twice the age past which a push re-sends
/// an unnamed segment (one hour: pushes must finish within half the grace); request errors.
pub fn gc(remote: &Remote, grace: Duration) -> Result<GcReport, RemoteError> {
    if grace < 2 * REFRESH_AGE {
        return Err(StoreError::Invalid(InvalidInput::Options {
            reason: format!(
                "the grace period must be at least {} s, twice the age at which a push re-sends a segment",
                (2 * REFRESH_AGE).as_secs()
            ),
        })
        .into());
    }
    gc_at(remote, grace, SystemTime::now())
}

/// [`gc`] as if the time were `now` (tests move the clock instead of waiting).
#[doc(hidden)]
pub fn gc_at(remote: &Remote, grace: Duration, now: SystemTime) -> Result<GcReport, RemoteError> {
    let old = |t: SystemTime| now.duration_since(t).unwrap_or_default() >= grace;
    remote.block_on(async {
        let mut report = GcReport::default();
        if !remote.check_format(false).await? {
            return Ok(report);
        }
        let mut state = RemoteState::default();
        state.refresh(remote).await?;
        let mut named: BTreeSet<u128> = state
            .checkpoints
            .values()
            .flat_map(|m| m.segments().into_keys())
            .collect();
        for meta in remote.list("trash").await? {
            if old(meta.last_modified.into()) {
                remote.delete(&meta.location).await?;
                report.manifests_deleted += 1;
            } else if let Some(m) = fetch_manifest(remote, &meta.location).await? {
                named.extend(m.segments().into_keys());
            }
        }
        for meta in remote.list("parts").await? {
            if old(meta.last_modified.into()) {
                remote.delete(&meta.location).await?;
                report.manifests_deleted += 1;
            } else if let Some(m) = fetch_manifest(remote, &meta.location).await? {
                named.extend(m.segments().into_keys());
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
            } else if old(meta.last_modified.into()) {
                remote.delete(&meta.location).await?;
                report.segments_deleted += 1;
                report.bytes_deleted += meta.size;
            } else {
                report.segments_young += 1;
            }
        }
        Ok(report)
    })
}
