//! Leases and intents: what keeps a garbage collection from deleting a segment a push is
//! counting on.
//!
//! Object storage has no conditional delete: [`super::gc`] decides from listings, and a push
//! decides what to send from listings too. Ages alone cannot order the two (a process can
//! stall between a listing and a delete for any time), so:
//!
//! - each gc takes a **lease** before it lists anything, an object `leases/gc-<ms>-<nonce>`,
//!   deletes only within [`delete_window`] of taking it (on its own clock, its bound on one
//!   request included), and deletes the lease when done;
//! - each push first declares an **intent** (`intents/<ms>-<nonce>`, a manifest naming every
//!   segment it is about to name; `sync::Intent`), then waits until no lease stamped at or
//!   before the intent is held ([`wait_for_gc`]), and only then lists the remote's segments to
//!   decide what to send; it creates its manifests, then withdraws the intent.
//!
//! A gc lists intents first, then parts, then checkpoints, then the trash, then segments. A gc
//! whose lease is newer than an intent lists the intent (or, once it is withdrawn, the
//! manifests it stood for) and keeps every segment it names; one whose lease is as old has
//! stopped deleting before the push lists anything: so a segment a push found is there until
//! its manifest names it, and a reader never sees a checkpoint with a missing segment. A lease
//! older than [`LEASE_TTL`] on the server's clock is the leftover of a gc that died; a push
//! waits at most that long. Object times have a resolution of one second, so a lease stamped
//! in the same second as an intent counts as taken before it.

use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;

use super::object::Remote;
use crate::error::RemoteError;

/// How long a lease holds: after this, on the server's clock, a push stops waiting for it.
pub(crate) const LEASE_TTL: Duration = Duration::from_secs(10 * 60);
/// The margin a gc keeps under [`LEASE_TTL`] beyond its bound on one request, for requests
/// the server applies late and clocks that run at slightly different rates.
const MARGIN: Duration = Duration::from_secs(60);
/// How often a waiting push lists the leases again.
const POLL: Duration = Duration::from_millis(500);

/// The time after taking its lease during which a gc may still start a delete on `remote`:
/// [`LEASE_TTL`] less the bound on one request and a margin (8 minutes by default).
pub(crate) fn delete_window(remote: &Remote) -> Duration {
    LEASE_TTL.saturating_sub(remote.timeout() + MARGIN)
}

/// A lease a gc holds; [`GcLease::release`] deletes it.
#[derive(Debug)]
pub(crate) struct GcLease {
    id: String,
    taken: Instant,
}

impl GcLease {
    /// Creates a new lease object, its clock started before the request (so the window
    /// never runs past what the server's time stamp allows).
    pub(crate) async fn take(remote: &Remote) -> Result<GcLease, RemoteError> {
        let taken = Instant::now();
        let ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let nonce = twox_hash::XxHash3_64::oneshot(
            format!("{ms}-{}-{taken:?}", std::process::id()).as_bytes(),
        );
        let id = format!("{ms:013}-{nonce:016x}");
        let body = format!(
            "{{\"gc\": {{\"pid\": {}, \"unix_ms\": {ms}}}}}\n",
            std::process::id()
        );
        remote
            .put(&remote.path(&format!("leases/gc-{id}")), Bytes::from(body))
            .await?;
        Ok(GcLease { id, taken })
    }

    /// Whether a delete may still start now.
    pub(crate) fn may_delete(&self, remote: &Remote) -> bool {
        self.taken.elapsed() < delete_window(remote)
    }

    /// Deletes the lease.
    pub(crate) async fn release(self, remote: &Remote) -> Result<(), RemoteError> {
        remote
            .delete(&remote.path(&format!("leases/gc-{}", self.id)))
            .await
    }
}

/// Deletes leases of gcs that died (older than twice [`LEASE_TTL`] by `now`). Returns how
/// many.
pub(crate) async fn remove_dead_leases(
    remote: &Remote,
    now: SystemTime,
) -> Result<u64, RemoteError> {
    let mut removed = 0;
    for meta in remote.list("leases").await? {
        let age = now
            .duration_since(meta.last_modified.into())
            .unwrap_or_default();
        if age >= 2 * LEASE_TTL {
            remote.delete(&meta.location).await?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Whole seconds since the epoch (object times have a resolution of one second).
fn secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// Waits until no gc lease stamped at or before `intent` (the server's time stamp of a
/// push's intent) is held, or each such lease is older than [`LEASE_TTL`]. Returns how long
/// it waited.
pub(crate) async fn wait_for_gc(
    remote: &Remote,
    intent: SystemTime,
) -> Result<Duration, RemoteError> {
    let start = Instant::now();
    loop {
        let mut wait_left = Duration::ZERO;
        for meta in remote.list("leases").await? {
            let stamp: SystemTime = meta.last_modified.into();
            if secs(stamp) > secs(intent) {
                continue; // taken after the intent existed: that gc lists it
            }
            // How long it may still hold, from the server's time at the intent.
            let age = intent.duration_since(stamp).unwrap_or_default();
            let left = LEASE_TTL
                .saturating_sub(age)
                .saturating_sub(start.elapsed());
            wait_left = wait_left.max(left);
        }
        if wait_left.is_zero() {
            return Ok(start.elapsed());
        }
        tokio::time::sleep(POLL.min(wait_left)).await;
    }
}
