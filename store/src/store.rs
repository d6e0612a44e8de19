//! The [`Store`] handle: opening a file, checking its format, transactions, compaction.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use redb::{
    ConcurrencyMode, Database, DatabaseError, ReadableTable, StorageBackend, StorageError,
    TableError,
};

use crate::engine::{
    part_cache, BlockCache, Handle, PartCache, ReadTxn, WriteTxn, CHECKPOINTS, CHUNKS, FORMAT_KEY,
    MEMBERS, META, PAGE, POLICIES, SEGMENTS, TAGS, TAILS, TIERS, VERSIONS, WRITER_KEY,
};
use crate::error::{Corruption, DbContext, OpenError, Result, StoreError};
use crate::options::Options;
use crate::record::{FormatRecord, Rule, OLDEST_STORE_FORMAT};
use crate::repair::{open_beside_repairs, RepairMarker, REPAIR_WAIT};
use crate::tiers::rules::RuleSet;
use crate::tiers::runtime::{tiering_reconstruct, Runtime};

/// A Strata store: one redb file holding the history of many tensors.
///
/// Its methods, by where they live: opening and compaction here; reads (`get`, `get_at`,
/// `get_range`, `get_exact`, `versions`, `tensors`, `load_checkpoint`, checkpoint and tag
/// lists) in `read.rs`; writes (`put`, `save_checkpoint`, `delete`, `tag`) in `write.rs`;
/// `retain`, `stats`, `verify` and safetensors import/export in files of those names; tier
/// policies, `maintain`, Tier 0 rebuilds and frame streams in `tiers/`.
///
/// `Store` is `Send + Sync`: share it between threads (e.g. in an `Arc`). Reads run in
/// parallel with each other and with a writer; writes are serialized. Each read sees one
/// committed state; each write (a `put`, a checkpoint, a delete) is one transaction.
///
/// One process at a time opens a store to write ([`Store::open`]); any number of other
/// processes may open it meanwhile with [`Store::open_read_only`] and follow its commits.
///
/// Dropping a writer's handle closes the file, trimming the room redb reserved for growth when
/// the file's length exceeds its bytes on disk by more than a tenth, and the pages the handle's
/// deletions freed when they exceed a tenth of the stored bytes ([`Options::trim_on_close`],
/// [`Store::trim`], ADRs 0028, 0036 and 0038).
#[derive(Debug)]
pub struct Store {
    pub(crate) path: PathBuf,
    /// The database; closed in [`Store`]'s `Drop`, where a panic of redb's is contained.
    pub(crate) db: Handle,
    pub(crate) opts: Options,
    pub(crate) cache: BlockCache,
    /// Decoded pack parts, shared by this handle's transactions (ADR 0041).
    pub(crate) parts: PartCache,
    /// Held from planning to commit, so a write's plan still holds when it is inserted.
    pub(crate) writer: Mutex<()>,
    /// The tier policy's state and read statistics (reads record here, not in the file).
    pub(crate) tiers: Mutex<Runtime>,
    /// Tier policy rules by name pattern (changed under the writer lock).
    pub(crate) rules: RwLock<RuleSet>,
    /// The backend of a store opened with [`Store::open_with_backend`] (asked for its size).
    backend: Option<Arc<dyn StorageBackend>>,
    /// Pushes committed checkpoints to [`Options::upload`] (writers only).
    #[cfg(feature = "remote")]
    pub(crate) uploader: Option<crate::remote::Uploader>,
    /// A commit of this handle freed pages (deleted or re-encoded versions) that no
    /// compaction has given back since: the close then also trims them (ADR 0038).
    pages_freed: AtomicU8,
}

/// What the commits of a handle freed inside the file that no compaction has given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(crate) enum Freed {
    /// Nothing.
    None = 0,
    /// The previous newest version's keyframes, re-encoded against the version written
    /// (ADR 0006): about one checkpoint's keyframes, which the next save reuses. A close
    /// gives them back with the file's growth only, so a handle opened around every save does
    /// not compact at every close (ADR 0036).
    Reencoded = 1,
    /// Deleted or rewritten versions (ADR 0038): a close gives them back.
    Deleted = 2,
}

impl Store {
    /// Opens the store at `path` with default [`Options`], creating it if the file does not
    /// exist or is empty.
    ///
    /// # Errors
    /// [`crate::OpenError::InUse`] if another process or handle has it open,
    /// [`crate::OpenError::NotAStore`] for a file that is not a Strata store,
    /// [`crate::OpenError::UnsupportedFormat`], [`crate::OpenError::Damaged`], [`StoreError::Io`].
    pub fn open(path: impl AsRef<Path>) -> Result<Store> {
        Store::open_with(path, Options::default())
    }

    /// Opens the store at `path` with `opts`, creating it if needed.
    ///
    /// # Errors
    /// Those of [`Store::open`], and [`crate::InvalidInput::Options`].
    pub fn open_with(path: impl AsRef<Path>, opts: Options) -> Result<Store> {
        opts.validate()?;
        let path = path.as_ref().to_path_buf();
        let io = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        let exists = match std::fs::metadata(&path) {
            Ok(m) => m.len() > 0,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(io(e)),
        };
        if !exists {
            create_file(&path, &opts)?;
        }
        let db = open_beside_repairs(&path, REPAIR_WAIT, || {
            guarded_open(&path, || builder(&opts).create(&path))
        })?;
        Store::from_handle(path, Handle::Writer(db), opts)
    }

    /// Opens an existing store to read only, with [`Options::for_reading`]: a trainer (or any one
    /// process) may hold it open for writing meanwhile, and each read sees the writer's latest
    /// commit, every checkpoint whole or not at all. Writes fail with
    /// [`crate::InvalidInput::ReadOnly`].
    ///
    /// The reads of a read-only handle move the tier access scores of this handle only: they
    /// are not written to the file and do not reach the writer's policy.
    ///
    /// A store whose last writer crashed needs the repair the next writer's open does, which a
    /// reader cannot do: if no writer holds it, this open recovers it first as a writer would
    /// (the only case where it writes to the file), holding a lock on a marker file beside it
    /// (`<store>.repair`, deleted after) so that a writer opening meanwhile waits for the repair
    /// instead of failing with `InUse` (at most [`crate::REPAIR_WAIT`]).
    ///
    /// # Errors
    /// Those of [`Store::open`] but `InUse` (a writer that opened the store with a Strata before
    /// read-only opens existed, which locks the whole file, still gives `InUse`), and
    /// [`crate::OpenError::NotFound`] if the file does not exist.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Store> {
        Store::open_read_only_with(path, Options::for_reading())
    }

    /// [`Store::open_read_only`] with `opts` (cache sizes and tier options apply; the write
    /// options are unused).
    ///
    /// # Errors
    /// Those of [`Store::open_read_only`], and [`crate::InvalidInput::Options`].
    pub fn open_read_only_with(path: impl AsRef<Path>, opts: Options) -> Result<Store> {
        opts.validate()?;
        let path = path.as_ref().to_path_buf();
        match std::fs::metadata(&path) {
            Ok(m) if m.len() > 0 => {}
            Ok(_) => {
                return Err(StoreError::Open(OpenError::NotAStore {
                    path,
                    reason: "the file is empty".to_string(),
                }))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::Open(OpenError::NotFound { path }))
            }
            Err(source) => return Err(StoreError::Io { path, source }),
        }
        let start = std::time::Instant::now();
        let db = loop {
            let opened = catch_unwind(AssertUnwindSafe(|| builder(&opts).open_read_only(&path)));
            if !matches!(opened, Ok(Err(DatabaseError::RepairAborted)))
                || start.elapsed() > REPAIR_WAIT
            {
                break guarded(&path, opened)?;
            }
            // The last writer crashed and no writer has opened the store since: a reader
            // cannot repair it. Recover it as the next writer would (this open writes), then
            // read. A writer that holds it meanwhile (InUse) is repairing it as it opens:
            // wait for that, as long as a repair may take.
            let marker = RepairMarker::hold(&path)?;
            let repaired = guarded_open(&path, || builder(&opts).create(&path));
            match repaired {
                // The writer's handle closes before the marker does: a writer that waits
                // for the marker then finds the file free.
                Ok(writer) => drop(writer),
                Err(StoreError::Open(OpenError::InUse { .. })) => {
                    drop(marker);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    continue;
                }
                Err(e) => return Err(e),
            }
            drop(marker);
        };
        Store::from_handle(path, Handle::Reader(db), opts)
    }

    /// Opens (or, if it is empty, creates) a store on a redb [`StorageBackend`] instead of a
    /// file: redb's `InMemoryBackend` for a store in memory, or a wrapper of
    /// `FileBackend` that injects faults in tests. `name` stands for the file in messages and
    /// [`Store::path`]. The backend is this process's alone (redb's exclusive-writer mode: no
    /// read-only handles beside it).
    ///
    /// # Errors
    /// Those of [`Store::open_with`].
    pub fn open_with_backend(
        name: impl Into<PathBuf>,
        backend: impl StorageBackend,
        opts: Options,
    ) -> Result<Store> {
        opts.validate()?;
        let path = name.into();
        let backend = Arc::new(backend);
        let mut b = builder(&opts);
        b.set_concurrency_mode(ConcurrencyMode::ExclusiveWriter);
        let db = guarded_open(&path, || {
            b.create_with_backend(SharedBackend(backend.clone()))
        })?;
        let mut store = Store::from_handle(path, Handle::Writer(db), opts)?;
        store.backend = Some(backend);
        Ok(store)
    }

    /// Wraps an open database: checks its format and loads the tier state. A writer takes
    /// the lowest free pages (ADR 0040), so that the room redb grows the file by stays at its
    /// end, where a trim cuts it off without a compaction. redb caches single pages only
    /// (ADR 0042): the larger ones hold segment chunks, decoded once and kept decoded in the
    /// block cache.
    fn from_handle(path: PathBuf, mut db: Handle, opts: Options) -> Result<Store> {
        match &mut db {
            Handle::Writer(db) => {
                db.set_lowest_page_allocation(true);
                db.set_max_cached_page_size(CACHED_PAGE_BYTES);
            }
            Handle::Reader(db) => db.set_max_cached_page_size(CACHED_PAGE_BYTES),
            Handle::Closed => {}
        }
        let runtime = Runtime::new(opts.tiering.config)?;
        let store = Store {
            cache: BlockCache::new(opts.cache_bytes),
            parts: part_cache(),
            path,
            db,
            opts,
            writer: Mutex::new(()),
            tiers: Mutex::new(runtime),
            rules: RwLock::new(RuleSet::default()),
            backend: None,
            #[cfg(feature = "remote")]
            uploader: None,
            pages_freed: AtomicU8::new(Freed::None as u8),
        };
        // redb trusts its file past the open too: a damaged one can make it panic while the
        // format record and the tier rows are read. Turn that into an error as well.
        let path = store.path.clone();
        let failed = match catch_unwind(AssertUnwindSafe(|| {
            store.check_format()?;
            store.load_tiers()
        })) {
            Ok(Ok(())) => return store.start_upload(),
            Ok(Err(e)) => first_read_error(e, &path),
            Err(panic) => StoreError::Open(OpenError::Damaged {
                path,
                reason: format!("redb failed reading it: {}", panic_message(&panic)),
            }),
        };
        // Closing the database commits, and on a damaged file redb can panic there too: the
        // error is what the caller gets either way. No trim of a file that failed to open.
        let mut store = store;
        store.opts.trim_on_close = false;
        let _ = catch_unwind(AssertUnwindSafe(move || drop(store)));
        Err(failed)
    }

    /// Starts the background uploader of [`Options::upload`] on a writer's handle.
    fn start_upload(self) -> Result<Store> {
        #[cfg(feature = "remote")]
        {
            let mut store = self;
            if let (Some(up), false) = (&store.opts.upload, store.is_read_only()) {
                store.uploader = Some(crate::remote::Uploader::start(up)?);
            }
            Ok(store)
        }
        #[cfg(not(feature = "remote"))]
        Ok(self)
    }

    /// Waits until every checkpoint committed so far is in the remote of [`Options::upload`]
    /// (at once without one). A failed upload is retried with the next checkpoint and here.
    ///
    /// # Errors
    /// [`StoreError::Remote`] with the latest upload error if a checkpoint is still not
    /// uploaded.
    pub fn flush(&self) -> Result<()> {
        #[cfg(feature = "remote")]
        if let Some(u) = &self.uploader {
            u.flush()?;
        }
        Ok(())
    }

    /// Tells the uploader, if any, that checkpoint `step` was committed.
    pub(crate) fn checkpoint_committed(&self, step: u64) {
        #[cfg(feature = "remote")]
        if let Some(u) = &self.uploader {
            if let Ok(snapshot) = self.read() {
                u.enqueue(step, snapshot);
            }
        }
        #[cfg(not(feature = "remote"))]
        let _ = step;
    }

    /// Whether this handle was opened with [`Store::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        matches!(self.db, Handle::Reader(_))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The options in force.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// Compacts the file: moves live pages down and truncates the free tail, so the file
    /// shrinks after deletes (and after the growth slack of large writes). Needs exclusive
    /// access. Returns whether anything moved.
    ///
    /// # Errors
    /// [`StoreError::Compaction`] if redb cannot compact (e.g. a read is in progress).
    pub fn compact(&mut self) -> Result<bool> {
        let path = self.path.clone();
        contain(&path, "compacting", || {
            // An upload holds a read snapshot, which compaction cannot move pages under.
            #[cfg(feature = "remote")]
            if let Some(u) = &self.uploader {
                let _ = u.flush();
            }
            let path = self.path.clone();
            let compacted = self
                .db
                .writer_mut(&path, "compaction")?
                .compact()
                .map_err(|e| StoreError::Compaction {
                    source: Box::new(e),
                })?;
            self.pages_freed.store(Freed::None as u8, Ordering::Relaxed);
            Ok(compacted)
        })
    }

    /// Notes that a commit of this handle freed pages (it deleted or re-encoded versions)
    /// and no compaction followed: the close trims them (ADR 0038).
    pub(crate) fn note_freed_pages(&self) {
        self.pages_freed
            .fetch_max(Freed::Deleted as u8, Ordering::Relaxed);
    }

    /// Notes that a commit of this handle re-encoded the previous newest version against the
    /// one it wrote (ADR 0006), freeing the previous keyframes' pages: the next save reuses
    /// them, so a close gives them back only with the file's growth (ADR 0036).
    pub(crate) fn note_reencoded_pages(&self) {
        self.pages_freed
            .fetch_max(Freed::Reencoded as u8, Ordering::Relaxed);
    }

    /// What the commits of this handle freed that no compaction has given back since.
    pub(crate) fn has_freed_pages(&self) -> Freed {
        match self.pages_freed.load(Ordering::Relaxed) {
            0 => Freed::None,
            1 => Freed::Reencoded,
            _ => Freed::Deleted,
        }
    }

    /// [`Store::compact`] after a pass that rewrote many versions (retention and aging do it
    /// themselves; call it after [`Store::maintain`], which runs beside reads and cannot):
    /// whether the file was compacted. A read in progress in another process
    /// ([`Store::open_read_only`]) defers it, and is no error: the freed pages are reused by
    /// later writes, and a later pass or [`Store::compact`] shrinks the file.
    ///
    /// # Errors
    /// [`StoreError::Compaction`] for any other reason redb cannot compact.
    pub fn compact_if_idle(&mut self) -> Result<bool> {
        let path = self.path.clone();
        contain(&path, "compacting", || match self.compact() {
            Ok(_) => Ok(true),
            Err(StoreError::Compaction { source })
                if matches!(*source, redb::CompactionError::TransactionInProgress) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        })
    }

    fn check_format(&self) -> Result<()> {
        let not_a_store = |reason: &str| {
            StoreError::Open(OpenError::NotAStore {
                path: self.path.clone(),
                reason: reason.to_string(),
            })
        };
        let txn = self.db.begin_read().ctx("opening the store")?;
        let meta = match txn.open_table(META) {
            Ok(t) => t,
            Err(TableError::TableDoesNotExist(_)) => {
                let tables = txn.list_tables().ctx("opening the store")?.count()
                    + txn.list_multimap_tables().ctx("opening the store")?.count();
                if tables > 0 {
                    return Err(not_a_store("a redb database without Strata's tables"));
                }
                drop(txn);
                return init_tables(self.db.writer(&self.path, "creating Strata's tables")?);
            }
            Err(e) => return Err(StoreError::db("opening the store")(e.into())),
        };
        let Some(v) = meta.get(FORMAT_KEY).ctx("opening the store")? else {
            return Err(not_a_store("no format record"));
        };
        let format = FormatRecord::decode(v.value()).map_err(|source| {
            StoreError::Corrupt(Corruption::Record {
                what: format!("format record of {}", self.path.display()),
                source,
            })
        })?;
        let Some(format) = format else {
            return Err(not_a_store("the format record has another magic"));
        };
        let current = FormatRecord::current();
        if !(OLDEST_STORE_FORMAT..=current.version).contains(&format.version) {
            return Err(StoreError::Open(OpenError::UnsupportedFormat {
                path: self.path.clone(),
                found: format.version,
                supported: current.version,
            }));
        }
        Ok(())
    }

    /// Loads the policy rules and rebuilds the tier state from the tier rows.
    fn load_tiers(&self) -> Result<()> {
        let op = "loading tier policies";
        let r = self.read()?;
        let mut rules = Vec::new();
        for entry in r.policies.iter().ctx(op)? {
            let (k, v) = entry.ctx(op)?;
            let rule = Rule::decode(k.value(), v.value()).map_err(|source| {
                StoreError::Corrupt(Corruption::Record {
                    what: format!("tier policy rule {:?}", String::from_utf8_lossy(k.value())),
                    source,
                })
            })?;
            rules.push(rule);
        }
        let rules = RuleSet::new(rules);
        let runtime = Runtime::load(
            self.opts.tiering.config,
            &r,
            |name| tiering_reconstruct(&rules.resolve(name).reconstruct),
            self.opts.tiering.clock.now(),
        )?;
        *self.tiers.lock() = runtime;
        *self.rules.write() = rules;
        Ok(())
    }

    /// Opens a read transaction and its tables.
    pub(crate) fn read(&self) -> Result<ReadTxn> {
        ReadTxn::begin(&self.db, self.parts.clone()).map_err(|e| e.on_file(&self.path))
    }

    /// Opens a read transaction whose pack parts decode from the file, not from blocks
    /// earlier transactions decoded (verify).
    pub(crate) fn read_from_disk(&self) -> Result<ReadTxn> {
        ReadTxn::begin(&self.db, part_cache()).map_err(|e| e.on_file(&self.path))
    }

    /// Runs `f` in a write transaction and commits if it succeeds (dropping it aborts); the
    /// tier state learns the transaction's changes after the commit.
    pub(crate) fn write<T>(&self, f: impl FnOnce(&mut WriteTxn<'_>) -> Result<T>) -> Result<T> {
        self.write_txn(f).map_err(|e| e.on_file(&self.path))
    }

    fn write_txn<T>(&self, f: impl FnOnce(&mut WriteTxn<'_>) -> Result<T>) -> Result<T> {
        let txn = self.db.begin_write(&self.path, "a write")?;
        let (out, changes) = {
            let mut tables = WriteTxn::open(&txn, self.parts.clone())?;
            let out = f(&mut tables)?;
            (out, std::mem::take(&mut tables.tier_changes))
        };
        txn.commit().ctx("committing")?;
        self.tiers
            .lock()
            .apply(changes, self.opts.tiering.clock.now())?;
        Ok(out)
    }

    /// Bytes the file takes on disk: its allocated blocks. redb grows the file ahead of its
    /// pages (doubling it while it is small) with `set_len`, which leaves the unwritten part a
    /// hole on file systems with sparse files, so a freshly written store can be much shorter
    /// on disk than [`Store::file_bytes`]. Where block counts are unknown (not Unix, or a
    /// custom backend), the file's length.
    ///
    /// # Errors
    /// [`StoreError::Io`] if the size cannot be read.
    pub fn disk_bytes(&self) -> Result<u64> {
        contain(&self.path, "measuring the file", || {
            if self.backend.is_some() {
                return self.file_bytes();
            }
            let m = self.file_metadata()?;
            #[cfg(unix)]
            {
                use std::os::unix::fs::MetadataExt;
                Ok(m.blocks() * 512)
            }
            #[cfg(not(unix))]
            {
                Ok(m.len())
            }
        })
    }

    /// Length of the file (or of the backend's storage); [`Store::disk_bytes`] is what it
    /// takes on disk.
    ///
    /// # Errors
    /// [`StoreError::Io`] if the size cannot be read.
    pub fn file_bytes(&self) -> Result<u64> {
        if let Some(backend) = &self.backend {
            return backend.len().map_err(|source| StoreError::Io {
                path: self.path.clone(),
                source,
            });
        }
        Ok(self.file_metadata()?.len())
    }

    /// Whether the store was opened with [`Store::open_with_backend`].
    pub(crate) fn has_backend(&self) -> bool {
        self.backend.is_some()
    }

    /// Bytes of the pages redb has allocated (the rest of the file is free space), or `None`
    /// on a read-only handle: redb reports page use to its writer only, in a write transaction
    /// (aborted here). The count is its allocator's: no page is read (redb's own `stats` visits
    /// every page of every table for it, and read the whole file until ADR 0039's patch 5).
    ///
    /// # Errors
    /// Database errors.
    pub fn allocated_bytes(&self) -> Result<Option<u64>> {
        contain(&self.path, "counting the pages in use", || {
            if self.is_read_only() {
                return Ok(None);
            }
            let op = "reading database stats";
            let _writer = self.writer.lock();
            let txn = self.db.begin_write(&self.path, op)?;
            let bytes = txn.allocated_bytes().ctx(op)?;
            txn.abort().ctx(op)?;
            Ok(Some(bytes))
        })
    }

    /// The store file's metadata, its error naming the file.
    fn file_metadata(&self) -> Result<std::fs::Metadata> {
        std::fs::metadata(&self.path).map_err(|source| StoreError::Io {
            path: self.path.clone(),
            source,
        })
    }
}

/// Creates the tables and the format record of a new store in `db`.
fn init_tables(db: &Database) -> Result<()> {
    let op = "creating the store";
    let txn = db.begin_write().ctx(op)?;
    {
        let mut meta = txn.open_table(META).ctx(op)?;
        meta.insert(FORMAT_KEY, FormatRecord::current().encode().as_slice())
            .ctx(op)?;
        meta.insert(WRITER_KEY, env!("CARGO_PKG_VERSION").as_bytes())
            .ctx(op)?;
        txn.open_table(VERSIONS).ctx(op)?;
        txn.open_table(SEGMENTS).ctx(op)?;
        txn.open_table(CHUNKS).ctx(op)?;
        txn.open_table(TAILS).ctx(op)?;
        txn.open_table(CHECKPOINTS).ctx(op)?;
        txn.open_table(TAGS).ctx(op)?;
        txn.open_table(TIERS).ctx(op)?;
        txn.open_table(POLICIES).ctx(op)?;
        txn.open_table(MEMBERS).ctx(op)?;
    }
    txn.commit().ctx(op)?;
    Ok(())
}

/// Creates a new store file at `path` whole or not at all: the store is made under a
/// temporary name beside it and linked into place only once its format record is committed,
/// so a process killed while creating a store leaves no half-made file that would never open
/// (redb writes its magic last). An empty file at `path` counts as absent. If another process
/// creates the store first, its file is kept.
fn create_file(path: &Path, opts: &Options) -> Result<()> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| StoreError::Io { path: p, source }
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.creating-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let made = (|| -> Result<()> {
        let db = builder(opts)
            .create(&tmp)
            .map_err(|e| open_error(&tmp, e))?;
        init_tables(&db)?;
        drop(db);
        if matches!(std::fs::metadata(path), Ok(m) if m.len() == 0) {
            std::fs::remove_file(path).map_err(io(path))?;
        }
        match std::fs::hard_link(&tmp, path) {
            Ok(()) => {}
            // Another process created the store meanwhile: use theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            // A file system without hard links: a rename, which cannot tell a race.
            Err(_) => std::fs::rename(&tmp, path).map_err(io(path))?,
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The new name is durable once the directory is.
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&tmp);
    made
}

/// A backend shared between redb and the [`Store`], which asks it for its size.
#[derive(Debug)]
struct SharedBackend(Arc<dyn StorageBackend>);

impl StorageBackend for SharedBackend {
    fn len(&self) -> std::io::Result<u64> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.0.write(offset, data)
    }
    fn close(&self) -> std::io::Result<()> {
        self.0.close()
    }
}

/// The largest page redb keeps in its cache: one page, which holds the trees' branches and
/// small records. Segment chunks fill pages of 8 to 64 KiB.
const CACHED_PAGE_BYTES: usize = PAGE;

/// redb's settings for this store: its cache, and the `SingleWriter` mode that lets read-only
/// processes follow a writer.
fn builder(opts: &Options) -> redb::Builder {
    let mut builder = Database::builder();
    builder
        .set_cache_size(opts.db_cache_bytes)
        .set_concurrency_mode(ConcurrencyMode::SingleWriter);
    builder
}

/// Whether a panic at `location` was raised in the database engine's code (redb, from
/// crates.io or the copy vendored in this repository), the panics every public method of
/// [`Store`] contains as [`Corruption::Engine`]: for a panic hook that keeps quiet about them.
pub fn raised_in_engine(location: &std::panic::Location<'_>) -> bool {
    let file = location.file();
    file.contains("/redb-") || file.contains("vendor/redb/")
}

/// Runs redb's open of `path`, turning its errors, and a panic on a damaged file (redb trusts
/// its own file), into [`StoreError`]s.
/// A panic raised in a caller's code (a callback of [`Store::get_blocks`]) on its way through
/// [`contain`], which hands it on instead of reporting damage.
pub(crate) struct CallerPanic(pub(crate) Box<dyn std::any::Any + Send>);

/// Runs `f`, a public operation `op` of the store at `path`, turning a panic inside it into
/// [`Corruption::Engine`]. redb trusts its own pages: a damaged one can make it panic (an
/// index out of range in its B-tree code) wherever it reads, past the open, in a listing, a
/// lookup or the commit as the database closes. Every public method of [`Store`] and of the
/// readers and writers it hands out runs inside this, so a damaged file gives an error that
/// names it, never a panic (issue 26; the store_open fuzz target fails on any panic that
/// escapes). A panic of the caller's own code ([`CallerPanic`]) goes on unwinding.
pub(crate) fn contain<T>(
    path: &Path,
    op: &'static str,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(|e| e.on_file(path)),
        Err(panic) => match panic.downcast::<CallerPanic>() {
            Ok(caller) => resume_unwind(caller.0),
            Err(panic) => Err(StoreError::Corrupt(Corruption::Engine {
                path: path.to_path_buf(),
                op,
                message: panic_message(&panic),
            })),
        },
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // The uploads still queued hold read snapshots, which a compaction cannot move pages
        // under: they end first (the uploader's drop waits for them either way).
        #[cfg(feature = "remote")]
        drop(self.uploader.take());
        // A writer trims the room redb keeps for growth, when it is worth it (ADR 0028). It
        // never fails the close: what stops it leaves the file as it is.
        let _ = catch_unwind(AssertUnwindSafe(|| self.trim_on_close()));
        let db = std::mem::replace(&mut self.db, Handle::Closed);
        // redb commits as a writer's database closes, and can panic there on a damaged
        // file; a panic in a drop would abort a process that is already unwinding.
        let _ = catch_unwind(AssertUnwindSafe(move || drop(db)));
    }
}

fn guarded_open<D>(
    path: &Path,
    open: impl FnOnce() -> std::result::Result<D, DatabaseError>,
) -> Result<D> {
    guarded(path, catch_unwind(AssertUnwindSafe(open)))
}

/// The outcome of a redb open run under `catch_unwind`, as [`guarded_open`] gives it.
fn guarded<D>(
    path: &Path,
    opened: std::thread::Result<std::result::Result<D, DatabaseError>>,
) -> Result<D> {
    match opened {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(e)) => Err(open_error(path, e)),
        Err(panic) => Err(StoreError::Open(OpenError::Damaged {
            path: path.to_path_buf(),
            reason: format!("redb failed opening it: {}", panic_message(&panic)),
        })),
    }
}

fn open_error(path: &Path, e: DatabaseError) -> StoreError {
    let path = path.to_path_buf();
    match e {
        DatabaseError::DatabaseAlreadyOpen => StoreError::Open(OpenError::InUse { path }),
        DatabaseError::UpgradeRequired(v) => StoreError::Open(OpenError::NotAStore {
            path,
            reason: format!("a redb database of file format {v}, which this build does not read"),
        }),
        DatabaseError::Storage(StorageError::Io(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            StoreError::Open(OpenError::NotAStore {
                path,
                reason: format!("not a redb database ({e})"),
            })
        }
        DatabaseError::Storage(StorageError::Io(source)) => StoreError::Io { path, source },
        other => StoreError::Open(OpenError::Damaged {
            path,
            reason: other.to_string(),
        }),
    }
}

/// An error of the first reads of a file just opened (its format record, its tier rows),
/// naming the file: a read past its end means the file is shorter than the pages its header
/// points to, a truncated store ([`OpenError::Damaged`]); redb checks that when a writer
/// opens the file, not when a reader does.
fn first_read_error(e: StoreError, path: &Path) -> StoreError {
    match e.on_file(path) {
        StoreError::Io { path, source } if source.kind() == std::io::ErrorKind::UnexpectedEof => {
            StoreError::Open(OpenError::Damaged {
                path,
                reason: format!(
                    "the file ends before the pages its header points to (truncated?): {source}"
                ),
            })
        }
        other => other,
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".to_string())
}
