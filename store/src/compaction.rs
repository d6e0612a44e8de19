//! Compactions the store runs by itself: the one that ends a committed pass
//! ([`Store::retain`], [`Store::age`]), and the trim as a writer's handle closes (ADRs 0028
//! and 0036).
//! The pass is committed before its compaction runs, and a close has no caller to fail, so a
//! compaction that cannot run (another process holds a read, an I/O error) is reported in the
//! pass's report or skipped at close, never returned as an error: that would tell the caller a
//! committed pass had failed.

use redb::ReadableTable;

use crate::engine::{WriteTxn, META, TRIMMED_AT_KEY};
use crate::error::{DbContext, StoreError};
use crate::stats::stored_sizes_of;
use crate::store::{contain, Freed, Store};
#[cfg(doc)]
use crate::StoreStats;

/// Why a compaction did not run while a read was in progress.
const READ_IN_PROGRESS: &str =
    "a read is in progress (another process has the store open to read, or a reader of this \
     handle is still alive)";

impl Store {
    /// Compacts the file after a committed pass: `None` if it did, or why it did not, in
    /// words. The freed pages are then reused by later writes, and a later compaction shrinks
    /// the file.
    pub(crate) fn compact_after_commit(&mut self) -> Option<String> {
        let deferred = match self.compact() {
            Ok(_) => return None,
            Err(e) if e.is_compaction_blocked_by_read() => READ_IN_PROGRESS.to_string(),
            Err(e) => e.to_string(),
        };
        self.note_freed_pages();
        Some(deferred)
    }

    /// The trim of a writer's handle as it closes ([`crate::Options::trim_on_close`]):
    /// [`Store::trim`]. Anything that stops it (a read in progress here or in another process,
    /// an I/O error) leaves the file as it is, which is a store as good as a trimmed one: a
    /// close never fails for it. Not while the thread unwinds from a panic.
    pub(crate) fn trim_on_close(&mut self) {
        if self.opts.trim_on_close && !std::thread::panicking() {
            let _ = self.trim();
        }
    }

    /// Trims the file as a writer's close does. When its length exceeds its bytes on disk by
    /// more than a tenth (the room redb grows a file by: it doubles one under 4 GiB), a commit
    /// cuts the free pages off its end: the writer takes the lowest free pages (ADR 0040), so
    /// the room is there, and the cut reads no page. Then it compacts the file if the length
    /// still exceeds both its bytes on disk and the bytes it stores by more than a tenth, and
    /// its bytes on disk grew by more than a quarter since the last compaction (ADRs 0028 and
    /// 0036: a file written before ADR 0040, with room in its middle); or if a commit of this
    /// handle freed pages (a deletion, a retention that kept room for the next save, an
    /// overwrite, a tier move) that no compaction has given back since, and its bytes on disk
    /// exceed the bytes it stores by more than a tenth (ADR 0038). Whether it shortened the
    /// file (a cut or a compaction).
    ///
    /// A compaction visits every page of the file (redb's compaction reads them all), so the
    /// growth test keeps its cost in proportion to what was written since the last one, not to
    /// the history the file holds. [`Store::compact`] compacts on demand.
    ///
    /// The cheap tests come first (two `stat`s, one lookup); the stored bytes (a walk of the
    /// records, no segment page) only when they pass. The size a trim is decided at is
    /// committed before the compaction runs (none can run beside an open transaction), and put
    /// back if the compaction fails (a read in progress), so the next close tries again.
    /// `false` on a read-only handle and on a custom storage backend (its length is its size).
    ///
    /// # Errors
    /// Database errors, and [`StoreError::Compaction`] when the compaction cannot run
    /// ([`StoreError::is_compaction_blocked_by_read`] if a read is in progress).
    pub fn trim(&mut self) -> crate::Result<bool> {
        let path = self.path.clone();
        contain(&path, "trimming the file", || {
            if self.is_read_only() || self.has_backend() {
                return Ok(false);
            }
            let (mut file_bytes, mut disk_bytes) = (self.file_bytes()?, self.disk_bytes()?);
            let freed = self.has_freed_pages();
            let mut trimmed = false;
            if exceeds_by_a_tenth(file_bytes, disk_bytes) {
                // The writer takes the lowest free pages (ADR 0040): the room redb grew the
                // file by is at its end, and a commit cuts it off without reading a page.
                let _writer = self.writer.lock();
                self.db
                    .writer(&path, "trimming the file's end")?
                    .trim_free_end()
                    .ctx("trimming the file's end")?;
                (file_bytes, disk_bytes) = (self.file_bytes()?, self.disk_bytes()?);
                trimmed = true;
            }
            if freed == Freed::None && !exceeds_by_a_tenth(file_bytes, disk_bytes) {
                return Ok(trimmed);
            }
            let Some(last) = self.claim_trim(file_bytes, disk_bytes, freed)? else {
                return Ok(trimmed);
            };
            self.compact().map(|_| true).inspect_err(|_| {
                // Not trimmed after all: the next close tries again. If even this fails, the
                // next trim waits for a quarter more growth; the store is as good either way.
                let _ = self.record_trim(last);
            })
        })
    }

    /// If a trim is due ([`grown_by_a_quarter`] since the one on record, [`worth_trimming`];
    /// or, after this handle `freed` pages, [`room_freed`]), records the size the trim leaves
    /// (`disk_bytes`, or the stored bytes after freed pages) as the last trim's in a commit of
    /// its own, and gives the size it replaced. The file holds free pages then (room redb has
    /// not written, or pages a commit freed), so that commit does not grow it.
    fn claim_trim(
        &self,
        file_bytes: u64,
        disk_bytes: u64,
        freed: Freed,
    ) -> crate::Result<Option<u64>> {
        let op = "deciding a trim";
        let _writer = self.writer.lock();
        let txn = self.db.begin_write(&self.path, op)?;
        let claimed = {
            let mut wt = WriteTxn::open(&txn, self.parts.clone())?;
            let last = wt
                .meta
                .get(TRIMMED_AT_KEY)
                .ctx(op)?
                // Absent (no trim has compacted the store yet) or unreadable: none on record.
                .and_then(|v| <[u8; 8]>::try_from(v.value()).ok())
                .map_or(0, u64::from_le_bytes);
            // The stored bytes (the records' keys and values, the segments) stand in for
            // redb's pages in use, which hold them: counting those pages visits every page of
            // the file, as the compaction then does again.
            let grown = grown_by_a_quarter(disk_bytes, last);
            let trimmed_to = if grown || freed == Freed::Deleted {
                let stored = stored_sizes_of(&wt)?.total();
                trimmed_size(file_bytes, disk_bytes, stored, grown, freed)
            } else {
                None
            };
            if let Some(size) = trimmed_to {
                set_trimmed_at(&mut wt.meta, size, op)?;
            }
            trimmed_to.map(|_| last)
        };
        match claimed {
            Some(_) => txn.commit().ctx(op)?,
            None => txn.abort().ctx(op)?,
        }
        Ok(claimed)
    }

    /// Records `disk_bytes` as the last trim's size.
    fn record_trim(&self, disk_bytes: u64) -> crate::Result<()> {
        let op = "recording a trim";
        let _writer = self.writer.lock();
        let txn = self.db.begin_write(&self.path, op)?;
        set_trimmed_at(&mut txn.open_table(META).ctx(op)?, disk_bytes, op)?;
        txn.commit().ctx(op)
    }
}

/// Writes `disk_bytes` under [`TRIMMED_AT_KEY`] in the meta table.
fn set_trimmed_at(
    meta: &mut redb::Table<'_, &'static [u8], &'static [u8]>,
    disk_bytes: u64,
    op: &'static str,
) -> crate::Result<()> {
    meta.insert(TRIMMED_AT_KEY, disk_bytes.to_le_bytes().as_slice())
        .ctx(op)?;
    Ok(())
}

/// Whether `disk_bytes` exceeds `last`, the bytes on disk at the last trim (0 for none), by
/// more than a quarter. Summed over a file's growth to a final size S, trims then visit at most
/// 5 S of pages (S + S/1.25 + S/1.25² + ...), however often the file is opened and closed.
fn grown_by_a_quarter(disk_bytes: u64, last: u64) -> bool {
    disk_bytes > last.saturating_add(last / 4)
}

/// Whether a file `file_bytes` long should be compacted so that its length tells its size: it
/// exceeds the `disk_bytes` it takes on disk by more than a tenth (unwritten room, which
/// `ls -l` counts and the store's ratio does not), and the `stored_bytes` it holds by more than
/// a tenth (else compaction frees nothing: a file system that compresses blocks also makes a
/// file take less than its length). The stored bytes are a lower bound of redb's pages in use,
/// so on such a file system a trim may run that frees little; the growth test bounds how often.
fn worth_trimming(file_bytes: u64, disk_bytes: u64, stored_bytes: u64) -> bool {
    exceeds_by_a_tenth(file_bytes, disk_bytes) && exceeds_by_a_tenth(file_bytes, stored_bytes)
}

/// The size a trim is recorded at, if one is due, from which the next growth test starts: the
/// bytes on disk, which do not count redb's unwritten room, when the file `grown` by a quarter
/// holds room [`worth_trimming`], or when this handle re-encoded pages ([`Freed::Reencoded`],
/// which the next save reuses) and the file grew by a quarter and they are [`room_freed`];
/// the stored bytes (the freed pages go too) when this handle deleted pages
/// ([`Freed::Deleted`]) and they are [`room_freed`].
fn trimmed_size(
    file_bytes: u64,
    disk_bytes: u64,
    stored_bytes: u64,
    grown: bool,
    freed: Freed,
) -> Option<u64> {
    match freed {
        _ if grown && worth_trimming(file_bytes, disk_bytes, stored_bytes) => Some(disk_bytes),
        // Re-encoded pages: the next save reuses them. The growth test starts from the bytes
        // on disk before the compaction, as for growth room, so that a handle per save
        // compacts once per quarter of growth (ADR 0040).
        Freed::Reencoded if grown && room_freed(file_bytes, disk_bytes, stored_bytes) => {
            Some(disk_bytes)
        }
        Freed::Deleted if room_freed(file_bytes, disk_bytes, stored_bytes) => Some(stored_bytes),
        _ => None,
    }
}

/// Whether pages freed inside a file (deleted or re-encoded versions) are worth a compaction
/// as its handle closes: the bytes it takes on disk (at most its length: unwritten room at its
/// end costs none) exceed the `stored_bytes` it holds by more than a tenth. No growth test:
/// the room was kept for the handle's next saves, which a closing handle will not write.
fn room_freed(file_bytes: u64, disk_bytes: u64, stored_bytes: u64) -> bool {
    exceeds_by_a_tenth(file_bytes.min(disk_bytes), stored_bytes)
}

/// `a > 1.1 * b`, in integers.
fn exceeds_by_a_tenth(a: u64, b: u64) -> bool {
    a > b.saturating_add(b / 10)
}

impl StoreError {
    /// Whether the error is a compaction ([`Store::compact`]) that could not run because a
    /// read is in progress: in another process ([`Store::open_read_only`]), or a reader of
    /// this handle (a [`crate::CheckpointReader`]). Nothing changed; it can run once the read
    /// is over.
    pub fn is_compaction_blocked_by_read(&self) -> bool {
        matches!(
            self,
            StoreError::Compaction { source }
                if matches!(**source, redb::CompactionError::TransactionInProgress)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{grown_by_a_quarter, room_freed, trimmed_size, worth_trimming, Freed};

    #[test]
    fn a_trim_records_the_size_it_leaves() {
        use Freed::{Deleted, Reencoded};
        // Growth room: what is on disk stays.
        assert_eq!(trimmed_size(200, 100, 100, true, Freed::None), Some(100));
        // Freed pages: they go too, down to what is stored.
        assert_eq!(trimmed_size(200, 200, 100, false, Deleted), Some(100));
        assert_eq!(trimmed_size(200, 200, 100, true, Deleted), Some(100));
        // Re-encoded pages go with a quarter of growth only, and the next growth test starts
        // from the bytes on disk before the compaction (ADR 0040).
        assert_eq!(trimmed_size(200, 200, 100, true, Reencoded), Some(200));
        assert_eq!(trimmed_size(200, 200, 100, false, Reencoded), None);
        // Neither due.
        assert_eq!(trimmed_size(200, 200, 100, true, Freed::None), None);
        assert_eq!(trimmed_size(200, 100, 100, false, Deleted), None);
        assert_eq!(trimmed_size(105, 105, 100, true, Deleted), None);
    }

    #[test]
    fn freed_room_is_trimmed_beyond_a_tenth_of_the_stored_bytes() {
        // Free pages written to disk, twice what is stored: trimmed.
        assert!(room_freed(200, 200, 100));
        assert!(!room_freed(110, 110, 100));
        assert!(room_freed(111, 111, 100));
        // Unwritten room at the end costs nothing on disk: not counted here.
        assert!(!room_freed(200, 105, 100));
    }

    #[test]
    fn trims_only_room_beyond_a_tenth_of_both_sizes() {
        // Growth room: twice the length of what is on disk and in use.
        assert!(worth_trimming(200, 100, 100));
        // Within a tenth: left alone.
        assert!(!worth_trimming(110, 100, 100));
        assert!(worth_trimming(111, 100, 100));
        // Shorter on disk than in use (a compressing file system): nothing to free.
        assert!(!worth_trimming(200, 100, 195));
        // Free pages written to disk: its length does not mislead.
        assert!(!worth_trimming(200, 200, 100));
    }

    #[test]
    fn trims_again_only_after_a_quarter_of_growth() {
        // No trim on record: any file is due.
        assert!(grown_by_a_quarter(1, 0));
        assert!(!grown_by_a_quarter(0, 0));
        assert!(!grown_by_a_quarter(125, 100));
        assert!(grown_by_a_quarter(126, 100));
        // Smaller than at the last trim (a retention freed pages): not due.
        assert!(!grown_by_a_quarter(50, 100));
        assert!(grown_by_a_quarter(u64::MAX, u64::MAX / 2));
    }
}
