//! Streaming writes: one write transaction held open while tensors are encoded and inserted
//! window by window, so memory is bounded by [`crate::Options::window_bytes`], not by
//! the tensor or the checkpoint (ADR 0014).
//!
//! [`CheckpointWriter`] is the public face ([`Store::begin_checkpoint`]); `put`,
//! `save_checkpoint` and the safetensors import all write through a [`Session`]:
//!
//! 1. each version is planned ([`crate::engine::VersionPlan`]): checked, its predecessor and
//!    tier policy resolved; a version it replaces is deleted (its dependents re-based);
//! 2. its blocks are encoded a window at a time, in parallel; a large tensor's windows are
//!    pipelined (the pool encodes one while this thread inserts the segments of the one
//!    before and reads the one after); small tensors are gathered into a window (copied by
//!    `put`, borrowed by `put_many`, which `save_checkpoint` and imports of files in memory
//!    use), written in groups pipelined the same way;
//! 3. the version record (and tier rows) go in after its last block; the checkpoint record
//!    last; one commit makes everything visible at once.
//!
//! redb keeps at most half its page cache of dirty pages in memory and writes the rest to
//! free pages of the file before the commit; an abandoned transaction (a writer dropped
//! without `commit`, or a crash) leaves those pages unreferenced, and redb frees them when
//! it aborts or, after a crash, when it repairs the file on the next open. Once a write has
//! given more than that half, a [`Writeback`] thread syncs the file as it goes, so that the
//! commit does not wait for the disk to take the whole write at once.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::MutexGuard;
use redb::WriteTransaction;
use strata_tiering::Precision;

use crate::engine::{
    check_shape, delete_version, encode_tasks, packs, plan_version, prepare_window, put_row,
    store_residual, BlockBytes, BlockWork, CacheRoom, Encoded, FullPart, Packer, Reencoded, Task,
    TierChanges, VersionPlan, View, WriteTxn, Writeback,
};
use crate::error::{Corruption, DbContext, InvalidInput, Result, StoreError};
use crate::record::{
    content_hash, BlockRecord, CheckpointRecord, Form, Rebuild, ResidualRef, TierRow, VersionRecord,
};
use crate::roles::{role_of, Role};
use crate::store::{contain, Store};
use crate::tensor::TensorRef;
use crate::tiers::runtime::{spec_of, tiering_reconstruct};
use crate::DType;

/// Longest metadata text accepted with a checkpoint, in bytes.
pub(crate) const MAX_METADATA_BYTES: usize = 64 << 20;

/// Where a tensor's bytes come from: the caller's memory, or a reader that fills a buffer
/// from a byte offset of the tensor (a file being imported).
pub(crate) enum Data<'a> {
    /// The whole tensor, in memory.
    Slice(&'a [u8]),
    /// `read(offset, buf)` fills `buf` with the tensor's bytes from `offset`.
    Reader(&'a mut dyn FnMut(u64, &mut [u8]) -> Result<()>),
}

/// A version to write.
pub(crate) struct Item<'a> {
    pub(crate) name: Arc<str>,
    pub(crate) dtype: DType,
    pub(crate) shape: &'a [u64],
    pub(crate) data: Data<'a>,
}

/// A small tensor held until enough of them fill a window: its bytes copied (a `put`, whose
/// borrow ends with the call) or borrowed (a `put_many`, whose tensors outlive the call).
struct Pending<'a> {
    name: Arc<str>,
    dtype: DType,
    shape: Vec<u64>,
    bytes: Cow<'a, [u8]>,
}

/// A write transaction held open across calls, under the store's writer lock.
pub(crate) struct Session<'s> {
    pub(crate) store: &'s Store,
    _writer: MutexGuard<'s, ()>,
    /// `None` once committed.
    txn: Option<WriteTransaction>,
    changes: TierChanges,
    step_overwrite: bool,
    pending: Vec<Pending<'static>>,
    pending_bytes: u64,
    /// A step failed after changing the transaction: it must not commit.
    poisoned: bool,
    /// What this write may still add to the block cache.
    cache_room: Arc<CacheRoom>,
    /// Raw bytes given so far.
    written: u64,
    /// Started once `written` passes what redb holds in memory.
    writeback: Option<Writeback>,
}

impl<'s> Session<'s> {
    /// Takes the writer lock and begins a write transaction. With `overwrite`, versions that
    /// exist at the step written are replaced.
    pub(crate) fn begin(store: &'s Store, overwrite: bool) -> Result<Session<'s>> {
        let writer = store.writer.lock();
        let txn = store.db.begin_write(&store.path, "a write")?;
        Ok(Session {
            store,
            _writer: writer,
            txn: Some(txn),
            changes: TierChanges::default(),
            step_overwrite: overwrite,
            pending: Vec::new(),
            pending_bytes: 0,
            poisoned: false,
            cache_room: Arc::new(CacheRoom::new(store.cache.capacity())),
            written: 0,
            writeback: None,
        })
    }

    /// Counts `bytes` more given to the write; past the dirty pages redb holds in memory (half
    /// its cache), the file gets a [`Writeback`] thread.
    fn wrote(&mut self, bytes: u64) {
        self.written = self.written.saturating_add(bytes);
        if self.writeback.is_none() && self.written > self.store.opts.db_cache_bytes as u64 / 2 {
            self.writeback = Writeback::start(&self.store.path);
        }
    }

    /// Runs `f` on the transaction's tables, keeping the tier changes it records.
    pub(crate) fn with_tables<T>(
        &mut self,
        f: impl FnOnce(&mut WriteTxn<'_>) -> Result<T>,
    ) -> Result<T> {
        let txn = self.txn.as_ref().ok_or_else(committed)?;
        if self.poisoned {
            return Err(poisoned());
        }
        let mut tables = WriteTxn::open(txn, self.store.parts.clone())
            .map_err(|e| e.on_file(&self.store.path))?;
        let out = f(&mut tables).map_err(|e| e.on_file(&self.store.path));
        self.poisoned = out.is_err();
        let changes = std::mem::take(&mut tables.tier_changes);
        self.changes.forgotten.extend(changes.forgotten);
        self.changes.registered.extend(changes.registered);
        self.changes.pending.extend(changes.pending);
        out
    }

    /// Tensors at most this large are gathered with others into one window.
    fn small_limit(&self) -> u64 {
        (self.store.opts.window_bytes / 8).max(1)
    }

    /// Writes version `step` of a tensor whose bytes are in memory. Small tensors are copied
    /// and written with the next window of small tensors (or at commit).
    pub(crate) fn put(&mut self, step: u64, name: &str, t: &TensorRef<'_>) -> Result<()> {
        check_shape(name, step, t.dtype, t.shape, t.bytes.len() as u64)?;
        if (t.bytes.len() as u64) <= self.small_limit() {
            self.gather(
                step,
                Pending {
                    name: Arc::from(name),
                    dtype: t.dtype,
                    shape: t.shape.to_vec(),
                    bytes: Cow::Owned(t.bytes.to_vec()),
                },
            )?;
            return Ok(());
        }
        self.flush(step)?;
        self.wrote(t.bytes.len() as u64);
        self.write_item(
            step,
            Item {
                name: Arc::from(name),
                dtype: t.dtype,
                shape: t.shape,
                data: Data::Slice(t.bytes),
            },
        )
    }

    /// Writes version `step` of each of `tensors`, whose bytes stay borrowed for the call: the
    /// small ones are gathered into windows without a copy. Every shape is checked before
    /// anything is written.
    pub(crate) fn put_many(&mut self, step: u64, tensors: &[(&str, TensorRef<'_>)]) -> Result<()> {
        for (name, t) in tensors {
            check_shape(name, step, t.dtype, t.shape, t.bytes.len() as u64)?;
        }
        self.flush(step)?;
        let mut small = Vec::new();
        let mut small_bytes = 0;
        for (name, t) in tensors {
            let len = t.bytes.len() as u64;
            if len <= self.small_limit() {
                small.push(Pending {
                    name: Arc::from(*name),
                    dtype: t.dtype,
                    shape: t.shape.to_vec(),
                    bytes: Cow::Borrowed(t.bytes),
                });
                small_bytes += len;
                if small_bytes >= self.store.opts.window_bytes {
                    self.write_small(step, &std::mem::take(&mut small))?;
                    small_bytes = 0;
                }
                continue;
            }
            self.wrote(len);
            self.write_item(
                step,
                Item {
                    name: Arc::from(*name),
                    dtype: t.dtype,
                    shape: t.shape,
                    data: Data::Slice(t.bytes),
                },
            )?;
        }
        self.write_small(step, &small)
    }

    /// Writes version `step` of a tensor of `len` bytes read through `read`: a small one is
    /// read whole and gathered with others, a large one is read a window at a time.
    pub(crate) fn put_read(
        &mut self,
        step: u64,
        name: &str,
        dtype: DType,
        shape: &[u64],
        len: u64,
        read: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>,
    ) -> Result<()> {
        check_shape(name, step, dtype, shape, len)?;
        if len <= self.small_limit() {
            let mut bytes = vec![0u8; len as usize];
            read(0, &mut bytes)?;
            self.gather(
                step,
                Pending {
                    name: Arc::from(name),
                    dtype,
                    shape: shape.to_vec(),
                    bytes: Cow::Owned(bytes),
                },
            )?;
            return Ok(());
        }
        self.flush(step)?;
        self.wrote(len);
        self.write_item(
            step,
            Item {
                name: Arc::from(name),
                dtype,
                shape,
                data: Data::Reader(read),
            },
        )
    }

    /// Holds a small tensor with the others; writes them all once they fill a window.
    fn gather(&mut self, step: u64, p: Pending<'static>) -> Result<()> {
        self.pending_bytes += p.bytes.len() as u64;
        self.pending.push(p);
        if self.pending_bytes >= self.store.opts.window_bytes {
            self.flush(step)?;
        }
        Ok(())
    }

    /// Writes the gathered small tensors.
    pub(crate) fn flush(&mut self, step: u64) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        self.write_small(step, &pending)
    }

    /// Writes version `step` of each of `items`, pipelined as a large tensor's windows are
    /// ([`Session::write_item`]): the pool encodes a group of them while this thread inserts
    /// the group before and plans the one after.
    fn write_small(&mut self, step: u64, items: &[Pending<'_>]) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        self.wrote(items.iter().map(|p| p.bytes.len() as u64).sum());
        let store = self.store;
        let overwrite = self.step_overwrite;
        let cache_room = self.cache_room.clone();
        let groups = small_groups(items, pipeline_blocks() * store.opts.block_bytes);
        self.with_tables(|wt| {
            let mut stages = Groups {
                store,
                step,
                overwrite,
                groups,
            };
            pipelined(wt, store, &cache_room, &mut stages)
        })
    }

    /// Writes one version a window of blocks at a time, pipelined: while the thread pool
    /// encodes window `k`, this thread inserts window `k - 1`, then reads window `k + 1` and
    /// fetches its bases, so the pool finds the next window ready when it is done.
    fn write_item(&mut self, step: u64, item: Item<'_>) -> Result<()> {
        let store = self.store;
        let overwrite = self.step_overwrite;
        let cache_room = self.cache_room.clone();
        self.with_tables(|wt| {
            let head = Pending {
                name: item.name.clone(),
                dtype: item.dtype,
                shape: item.shape.to_vec(),
                bytes: Cow::Borrowed(&[]),
            };
            let plan = start_version(store, wt, step, &head, overwrite)?;
            let mut stages = Windows {
                store,
                windows: pipeline_windows(&plan, store.opts.window_bytes),
                plan,
                source: WindowSource::new(item.data),
                residuals: Vec::new(),
            };
            pipelined(wt, store, &cache_room, &mut stages)?;
            finish_version(store, wt, &stages.plan, &stages.residuals)
        })
    }

    /// Writes version `step` of a full pack part (ADR 0041): a hidden tensor, whose name
    /// the caller's checks would refuse.
    fn put_part(&mut self, step: u64, part: &FullPart) -> Result<()> {
        self.flush(step)?;
        self.wrote(part.bytes.len() as u64);
        let shape = part.shape();
        self.write_item(
            step,
            Item {
                name: Arc::from(part.name()),
                dtype: part.dtype,
                shape: &shape,
                data: Data::Slice(&part.bytes),
            },
        )
    }

    /// Writes what is still gathered, runs `last` on the tables (e.g. the checkpoint
    /// record), commits, and tells the tier state.
    pub(crate) fn commit(
        mut self,
        step: u64,
        last: impl FnOnce(&mut WriteTxn<'_>) -> Result<()>,
    ) -> Result<()> {
        self.flush(step)?;
        self.with_tables(last)?;
        let txn = self.txn.take().ok_or_else(committed)?;
        txn.commit()
            .ctx("committing")
            .map_err(|e| e.on_file(&self.store.path))?;
        let changes = std::mem::take(&mut self.changes);
        self.store
            .tiers
            .lock()
            .apply(changes, self.store.opts.tiering.clock.now())
    }
}

fn committed() -> StoreError {
    StoreError::Invalid(InvalidInput::Options {
        reason: "the write was already committed".into(),
    })
}

fn poisoned() -> StoreError {
    StoreError::Invalid(InvalidInput::Options {
        reason: "an earlier step of this write failed; drop it and start again".into(),
    })
}

fn missing_block(plan: &VersionPlan, block: u64) -> StoreError {
    StoreError::Encode {
        tensor: plan.name.to_string(),
        step: plan.step,
        block,
        source: "a block was not encoded".into(),
    }
}

/// Plans a version and deletes the one it replaces (re-basing that one's dependents).
fn start_version(
    store: &Store,
    wt: &mut WriteTxn<'_>,
    step: u64,
    p: &Pending,
    overwrite: bool,
) -> Result<VersionPlan> {
    let elements: u64 = p.shape.iter().product();
    let plan = |wt: &mut WriteTxn<'_>| {
        let rules = store.rules.read();
        plan_version(
            wt,
            &store.opts,
            &rules,
            p.name.clone(),
            step,
            p.dtype,
            &p.shape,
            elements,
            overwrite,
        )
    };
    let first = plan(wt)?;
    if !first.replaces {
        return Ok(first);
    }
    delete_version(wt, &store.cache, &store.opts, &p.name, step, false)?;
    store.note_freed_pages();
    // The deletion re-based the versions that were deltas against the one replaced (the
    // predecessor among them, when the replaced version was the newest keyframe): plan
    // against their records as they are now.
    let mut again = plan(wt)?;
    again.replaces = true;
    Ok(again)
}

/// The stages of a pipelined write ([`pipelined`]).
trait Stages<'d> {
    /// What inserting a stage needs beside its encoded blocks.
    type Held;
    /// Stages in all.
    fn count(&self) -> usize;
    /// Prepares stage `k`: what its insert needs, and its encode tasks (bases fetched).
    fn prepare(&mut self, wt: &mut WriteTxn<'_>, k: usize) -> Result<(Self::Held, Vec<Task<'d>>)>;
    /// Inserts the encoded blocks of a stage.
    fn insert(
        &mut self,
        wt: &mut WriteTxn<'_>,
        held: Self::Held,
        blocks: Vec<Encoded>,
    ) -> Result<()>;
    /// A stage's tasks are all encoded: the buffers they borrowed are free.
    fn encoded(&mut self) {}
}

/// Runs the stages of a pipelined write in order: while the pool encodes stage `k`, this
/// thread inserts stage `k - 1` and prepares stage `k + 1`, so the pool finds its next tasks
/// ready when it is done.
fn pipelined<'d, S: Stages<'d>>(
    wt: &mut WriteTxn<'_>,
    store: &Store,
    room: &CacheRoom,
    stages: &mut S,
) -> Result<()> {
    let count = stages.count();
    if count == 0 {
        return Ok(());
    }
    let mut current = stages.prepare(wt, 0)?;
    let mut before: Option<(S::Held, Vec<Encoded>)> = None;
    for k in 0..count {
        let (held, tasks) = current;
        let mut encoded = Ok(Vec::new());
        let mut done = Ok(());
        let mut next = None;
        rayon::in_place_scope(|scope| {
            let encoded = &mut encoded;
            scope.spawn(move |_| {
                *encoded = encode_tasks(tasks, &store.cache, room, &store.opts);
            });
            if let Some((held, blocks)) = before.take() {
                done = stages.insert(wt, held, blocks);
            }
            if done.is_ok() && k + 1 < count {
                match stages.prepare(wt, k + 1) {
                    Ok(stage) => next = Some(stage),
                    Err(e) => done = Err(e),
                }
            }
        });
        done?;
        before = Some((held, encoded?));
        stages.encoded();
        match next {
            Some(stage) => current = stage,
            None => break,
        }
    }
    match before {
        Some((held, blocks)) => stages.insert(wt, held, blocks),
        None => Ok(()),
    }
}

/// A large tensor's windows ([`pipeline_windows`]): the stages of [`Session::write_item`].
struct Windows<'a, 's> {
    store: &'s Store,
    plan: VersionPlan,
    windows: Vec<(std::ops::Range<u64>, std::ops::Range<u64>)>,
    source: WindowSource<'a>,
    residuals: Vec<Option<ResidualRef>>,
}

impl<'a> Stages<'a> for Windows<'a, '_> {
    /// The window's first block.
    type Held = u64;

    fn count(&self) -> usize {
        self.windows.len()
    }

    fn prepare(&mut self, wt: &mut WriteTxn<'_>, k: usize) -> Result<(u64, Vec<Task<'a>>)> {
        let w = &self.windows[k];
        let tasks = self.source.prepare(wt, self.store, &self.plan, w)?;
        Ok((w.0.start, tasks))
    }

    fn insert(&mut self, wt: &mut WriteTxn<'_>, first: u64, blocks: Vec<Encoded>) -> Result<()> {
        insert_blocks(wt, &mut self.plan, first, blocks, &mut self.residuals)
    }

    fn encoded(&mut self) {
        self.source.recycle();
    }
}

/// Small tensors cut into groups of about `bytes` (at least one tensor each), in order: the
/// stages of [`Session::write_small`]'s pipeline.
fn small_groups<'i, 'a>(items: &'i [Pending<'a>], bytes: u64) -> Vec<&'i [Pending<'a>]> {
    let mut groups = Vec::new();
    let (mut start, mut held) = (0, 0u64);
    for (i, p) in items.iter().enumerate() {
        held += p.bytes.len() as u64;
        if held >= bytes {
            groups.push(&items[start..=i]);
            (start, held) = (i + 1, 0);
        }
    }
    if start < items.len() {
        groups.push(&items[start..]);
    }
    groups
}

/// Groups of small tensors ([`small_groups`]): the stages of [`Session::write_small`].
struct Groups<'i, 'a, 's> {
    store: &'s Store,
    step: u64,
    overwrite: bool,
    groups: Vec<&'i [Pending<'a>]>,
}

impl<'i> Stages<'i> for Groups<'i, '_, '_> {
    /// The plans of the group's versions.
    type Held = Vec<VersionPlan>;

    fn count(&self) -> usize {
        self.groups.len()
    }

    /// Plans the versions of the group and fetches their blocks' bases; the tasks borrow the
    /// tensors' bytes only.
    fn prepare(
        &mut self,
        wt: &mut WriteTxn<'_>,
        k: usize,
    ) -> Result<(Vec<VersionPlan>, Vec<Task<'i>>)> {
        let group: &'i [Pending<'_>] = self.groups[k];
        let mut plans = Vec::with_capacity(group.len());
        for p in group {
            plans.push(start_version(self.store, wt, self.step, p, self.overwrite)?);
        }
        let mut work = Vec::new();
        for (plan, p) in plans.iter().zip(group) {
            let bytes: &'i [u8] = &p.bytes;
            for b in 0..plan.blocks {
                let r = plan.block_range(b);
                work.push(BlockWork {
                    plan,
                    block: b,
                    data: BlockBytes::Borrowed(&bytes[r.start as usize..r.end as usize]),
                });
            }
        }
        let tasks = prepare_window(wt, &self.store.cache, &self.store.opts, &work)?;
        drop(work);
        Ok((plans, tasks))
    }

    /// Inserts the encoded blocks of the group's versions (in order) and their records.
    fn insert(
        &mut self,
        wt: &mut WriteTxn<'_>,
        plans: Vec<VersionPlan>,
        blocks: Vec<Encoded>,
    ) -> Result<()> {
        let mut blocks = blocks.into_iter();
        for mut plan in plans {
            let mut residuals = Vec::new();
            for b in 0..plan.blocks {
                let enc = blocks.next().ok_or_else(|| missing_block(&plan, b))?;
                insert_block(wt, &mut plan, b, enc, &mut residuals)?;
            }
            finish_version(self.store, wt, &plan, &residuals)?;
        }
        Ok(())
    }
}

/// Blocks per window of a pipelined write ([`Session::write_item`]): enough for every thread
/// of the pool to have a few, few enough that reading and inserting one window overlaps the
/// encoding of the next several times per tensor.
fn pipeline_blocks() -> u64 {
    4 * rayon::current_num_threads().max(2) as u64
}

/// The windows of a version's blocks for a pipelined write, and their bytes in the tensor: at
/// least one block each, at most [`pipeline_blocks`] blocks and `window_bytes` bytes.
fn pipeline_windows(
    plan: &VersionPlan,
    window_bytes: u64,
) -> Vec<(std::ops::Range<u64>, std::ops::Range<u64>)> {
    let most = pipeline_blocks();
    let mut windows = Vec::new();
    let mut b = 0;
    while b < plan.blocks {
        let first = b;
        let start = plan.block_range(first).start;
        b += 1;
        while b < plan.blocks && b - first < most && plan.block_range(b).end - start <= window_bytes
        {
            b += 1;
        }
        windows.push((first..b, start..plan.block_range(b - 1).end));
    }
    windows
}

/// Where the windows of a pipelined write come from: slices of a tensor in memory, or
/// buffers filled by a reader (a file being imported), each shared by its window's blocks
/// until the pool has encoded them, then reused for a later window.
struct WindowSource<'a> {
    data: Data<'a>,
    /// Buffers whose window may still be encoding.
    lent: Vec<Arc<Vec<u8>>>,
    /// Buffers free to read the next window into.
    spare: Vec<Vec<u8>>,
}

impl<'a> WindowSource<'a> {
    fn new(data: Data<'a>) -> Self {
        WindowSource {
            data,
            lent: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// Reads window `(blocks, at)` of `plan`'s tensor (`at`: its bytes in the tensor) and
    /// fetches the bases of its blocks through `view`: the window's encode tasks.
    fn prepare(
        &mut self,
        view: &dyn View,
        store: &Store,
        plan: &VersionPlan,
        (blocks, at): &(std::ops::Range<u64>, std::ops::Range<u64>),
    ) -> Result<Vec<Task<'a>>> {
        let shared = match &mut self.data {
            Data::Slice(s) => {
                let tensor: &'a [u8] = s;
                let window = &tensor[at.start as usize..at.end as usize];
                return prepare_blocks(view, store, plan, blocks, at.start, |r| {
                    BlockBytes::Borrowed(&window[r])
                });
            }
            Data::Reader(read) => {
                let mut buf = self.spare.pop().unwrap_or_default();
                // A reused buffer keeps its length: only what it grows by is zeroed.
                buf.resize((at.end - at.start) as usize, 0);
                read(at.start, &mut buf)?;
                Arc::new(buf)
            }
        };
        self.lent.push(shared.clone());
        prepare_blocks(view, store, plan, blocks, at.start, |r| {
            BlockBytes::Shared(shared.clone(), r)
        })
    }

    /// Takes back the buffers whose window's tasks are all done.
    fn recycle(&mut self) {
        for buf in std::mem::take(&mut self.lent) {
            match Arc::try_unwrap(buf) {
                Ok(buf) => self.spare.push(buf),
                Err(buf) => self.lent.push(buf),
            }
        }
    }
}

/// The encode tasks of `blocks` of `plan`'s version, a window starting at byte `start` of the
/// tensor whose bytes `bytes` gives (ranges relative to `start`), their bases fetched through
/// `view`.
fn prepare_blocks<'d>(
    view: &dyn View,
    store: &Store,
    plan: &VersionPlan,
    blocks: &std::ops::Range<u64>,
    start: u64,
    bytes: impl Fn(std::ops::Range<usize>) -> BlockBytes<'d>,
) -> Result<Vec<Task<'d>>> {
    let work: Vec<BlockWork<'_, 'd>> = blocks
        .clone()
        .map(|b| {
            let r = plan.block_range(b);
            BlockWork {
                plan,
                block: b,
                data: bytes((r.start - start) as usize..(r.end - start) as usize),
            }
        })
        .collect();
    prepare_window(view, &store.cache, &store.opts, &work)
}

/// Inserts the encoded blocks `first..` of a version, in order.
fn insert_blocks(
    wt: &mut WriteTxn<'_>,
    plan: &mut VersionPlan,
    first: u64,
    blocks: Vec<Encoded>,
    residuals: &mut Vec<Option<ResidualRef>>,
) -> Result<()> {
    for (b, enc) in (first..).zip(blocks) {
        insert_block(wt, plan, b, enc, residuals)?;
    }
    Ok(())
}

/// Stores an encoded block's segment (or a reference to it) and residual; records the block.
fn insert_block(
    wt: &mut WriteTxn<'_>,
    plan: &mut VersionPlan,
    block: u64,
    enc: Encoded,
    residuals: &mut Vec<Option<ResidualRef>>,
) -> Result<()> {
    match (&mut plan.raw_hashes, enc.raw_hash) {
        (Some(hashes), Some(h)) => hashes.push(h),
        (hashes, _) => *hashes = None,
    }
    if enc.record.form == Form::Inline {
        // The bytes go in the version record: no segment (ADR 0029).
        plan.record.inline = enc.segment;
        plan.record.blocks.push(enc.record);
        return Ok(());
    }
    wt.add_ref(
        &plan.name,
        plan.step,
        block,
        enc.record.address,
        enc.segment.as_deref(),
    )?;
    plan.record.blocks.push(enc.record);
    if let Some(f) = enc.flipped {
        // The predecessor's keyframe, now a delta against this block (ADR 0006).
        replace_segment(wt, &plan.name, block, &f)?;
        plan.flipped.push((block, f.record));
    }
    for a in enc.anchors {
        // An older version's block, re-based from the predecessor onto this block.
        replace_segment(wt, &plan.name, block, &a)?;
        plan.anchored.push((a.step, block, a.record, a.old.depth));
    }
    if plan.tiered.is_some() {
        let r = match &enc.residual {
            Some(r) => Some(store_residual(wt, &plan.name, plan.step, block, r)?),
            None => None,
        };
        residuals.push(r);
    }
    Ok(())
}

/// Points block `block` of an older version at its re-encoded segment `r` (a reference to a
/// stored one when `r` has none) and releases the segment it had.
fn replace_segment(wt: &mut WriteTxn<'_>, name: &str, block: u64, r: &Reencoded) -> Result<()> {
    wt.add_ref(name, r.step, block, r.record.address, r.segment.as_deref())?;
    wt.release(name, r.step, block, r.old.address)
}

/// Writes the version record and, for a quantized version, its tier rows (registered with
/// the tier state once the transaction commits).
fn finish_version(
    store: &Store,
    wt: &mut WriteTxn<'_>,
    plan: &VersionPlan,
    residuals: &[Option<ResidualRef>],
) -> Result<()> {
    if plan.record.blocks.len() as u64 != plan.blocks {
        return Err(missing_block(plan, plan.record.blocks.len() as u64));
    }
    let mut record = std::borrow::Cow::Borrowed(&plan.record);
    if let Some(hashes) = plan.raw_hashes.as_deref().filter(|_| plan.tiered.is_none()) {
        record.to_mut().content = Some(content_hash(hashes));
    }
    wt.put_version(&plan.name, plan.step, &record)?;
    if let Some(pstep) = plan.pred_step().filter(|_| !plan.flipped.is_empty()) {
        // Anchors first: a chain head re-based onto this version no longer deepens with the
        // predecessor's chain.
        write_anchored(wt, &store.opts, &plan.name, &plan.anchored)?;
        flip_predecessor(wt, &store.opts, &plan.name, pstep, &plan.flipped)?;
        // The predecessor's keyframes are freed: the next save reuses their pages, a close
        // gives them back with the file's growth.
        store.note_reencoded_pages();
    }
    let Some(policy) = &plan.tiered else {
        return Ok(());
    };
    let now = store.opts.tiering.clock.now();
    let count = plan.blocks;
    let first = wt.take_block_ids(count)?;
    let tier = policy.policy.write_tier();
    let vid: (Arc<str>, u64) = (plan.name.clone(), plan.step);
    for b in 0..count {
        let row = TierRow {
            id: first + b,
            tier,
            policy: policy.policy,
            since: now,
            precision: Precision::fresh(tier),
            residual: residuals.get(b as usize).copied().flatten(),
            rebuild: Rebuild::None,
            stats: None,
        };
        put_row(wt, &plan.name, plan.step, b as u32, &row)?;
        let values = plan.record.block_len(b) as u32;
        let spec = spec_of(&row, values, tiering_reconstruct(&policy.reconstruct));
        wt.tier_changes
            .registered
            .push((vid.clone(), b as u32, spec));
    }
    Ok(())
}

/// Writes the blocks of older versions re-based onto the new version or its newest anchor
/// (`anchored`: step, block, new record, depth before) into their version records.
fn write_anchored(
    wt: &mut WriteTxn<'_>,
    opts: &crate::Options,
    name: &Arc<str>,
    anchored: &[(u64, u64, BlockRecord, u8)],
) -> Result<()> {
    let mut by_step: std::collections::BTreeMap<u64, Vec<(u64, BlockRecord, u8)>> =
        Default::default();
    for &(step, b, record, old_depth) in anchored {
        by_step
            .entry(step)
            .or_default()
            .push((b, record, old_depth));
    }
    for (step, blocks) in by_step {
        let Some(mut rec) = wt.version(name, step)? else {
            return Err(StoreError::Corrupt(Corruption::BadBase {
                tensor: name.to_string(),
                step,
                block: blocks.first().map_or(0, |(b, _, _)| *b),
                base: step,
                reason: "disappeared while the newest version was written",
            }));
        };
        // A block that reads through more or fewer segments than before (an anchor that
        // became a keyframe or a reference to one, a chain's head moved under an anchor):
        // the chain under it moves with it.
        let mut follow = Vec::new();
        for (b, record, old_depth) in blocks {
            if let Some(slot) = rec.blocks.get_mut(b as usize) {
                *slot = record;
                if record.depth != old_depth {
                    follow.push((b, step, record.depth.saturating_add(1)));
                }
            }
        }
        wt.put_version(name, step, &rec)?;
        renumber_chains(wt, opts, name, &rec, step, follow)?;
    }
    Ok(())
}

/// Writes the predecessor's re-encoded blocks (`flipped`: deltas against the new version)
/// into its record, and deepens by one the blocks of older versions that read through them:
/// the reverse chain under each flipped block, a delta against the version after it in turn
/// ([`renumber_chains`]).
fn flip_predecessor(
    wt: &mut WriteTxn<'_>,
    opts: &crate::Options,
    name: &Arc<str>,
    pstep: u64,
    flipped: &[(u64, BlockRecord)],
) -> Result<()> {
    let Some(mut rec) = wt.version(name, pstep)? else {
        return Err(StoreError::Corrupt(Corruption::BadBase {
            tensor: name.to_string(),
            step: pstep,
            block: flipped.first().map_or(0, |(b, _)| *b),
            base: pstep,
            reason: "disappeared while the next version was written",
        }));
    };
    // Per block still followed: the step its next older link must be a delta against, and
    // that link's new depth.
    let mut follow: Vec<(u64, u64, u8)> = Vec::with_capacity(flipped.len());
    for &(b, record) in flipped {
        if let Some(slot) = rec.blocks.get_mut(b as usize) {
            *slot = record;
            follow.push((b, pstep, record.depth.saturating_add(1)));
        }
    }
    wt.put_version(name, pstep, &rec)?;
    renumber_chains(wt, opts, name, &rec, pstep, follow)
}

/// Sets the depths of the reverse chains under blocks of version `at` (record `layout`):
/// `follow` holds per block the step its next older link must be a delta against (`at`) and
/// that link's new depth; each link down gets one more, for at most `max_chain` versions.
/// Depths stay exact for those chains; a block that reads through another way (a reference,
/// an aged blob on a newer base) keeps the depth it was written with, a lower bound.
fn renumber_chains(
    wt: &mut WriteTxn<'_>,
    opts: &crate::Options,
    name: &Arc<str>,
    layout: &VersionRecord,
    at: u64,
    mut follow: Vec<(u64, u64, u8)>,
) -> Result<()> {
    let mut at = at;
    for _ in 1..opts.max_chain.max(1) {
        if follow.is_empty() {
            break;
        }
        let Some((step, mut older)) = wt.predecessor(name, at)? else {
            break;
        };
        if !older.same_layout(layout) {
            break;
        }
        let mut changed = false;
        follow.retain_mut(|(b, above, depth)| {
            let Some(block) = older.blocks.get_mut(*b as usize) else {
                return false;
            };
            if !block.reads_through(*above) {
                return false;
            }
            changed |= block.depth != *depth;
            block.depth = *depth;
            (*above, *depth) = (step, depth.saturating_add(1));
            true
        });
        if changed {
            wt.put_version(name, step, &older)?;
        }
        at = step;
    }
    Ok(())
}

/// Writes a checkpoint tensor by tensor in bounded memory; nothing of it is visible until
/// [`CheckpointWriter::commit`], and dropping the writer without committing leaves the store
/// as it was. From [`Store::begin_checkpoint`].
///
/// The writer holds the store's write lock: other writes (from other threads) wait until it
/// commits or is dropped; reads go on.
///
/// ```no_run
/// use strata_store::{DType, Store, TensorRef};
/// let store = Store::open("run.strata")?;
/// let mut w = store.begin_checkpoint(1000, r#"{"loss": 1.93}"#)?;
/// for layer in 0..4 {
///     let bytes = vec![0u8; 4096 * 4];
///     w.put(&format!("layer.{layer}.w"), &TensorRef { dtype: DType::F32, shape: &[64, 64], bytes: &bytes })?;
/// }
/// w.commit()?;
/// # Ok::<(), strata_store::StoreError>(())
/// ```
pub struct CheckpointWriter<'s> {
    session: Session<'s>,
    step: u64,
    metadata: String,
    names: Vec<String>,
    seen: HashSet<String>,
    /// The small tensors packed so far (ADR 0041).
    packer: Packer,
}

impl std::fmt::Debug for CheckpointWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointWriter")
            .field("step", &self.step)
            .field("tensors", &self.names.len())
            .finish_non_exhaustive()
    }
}

impl<'s> CheckpointWriter<'s> {
    /// Adds a tensor: large ones are encoded and written now, a window at a time; small ones
    /// are copied and written with the next window of small tensors.
    ///
    /// # Errors
    /// [`InvalidInput::DuplicateTensor`], [`InvalidInput::StepExists`] if the tensor has a
    /// version at this step, the input errors of [`Store::put`], and database errors. After
    /// an error the checkpoint cannot be committed; drop the writer.
    pub fn put(&mut self, name: &str, tensor: &TensorRef<'_>) -> Result<()> {
        let store = self.session.store;
        contain(&store.path, "writing a checkpoint", || {
            self.check_new(name)?;
            if self.packs(name, tensor.dtype, tensor.shape, tensor.bytes.len() as u64) {
                self.check_packed(name, tensor.dtype, tensor.shape, tensor.bytes.len() as u64)?;
                self.pack(name, tensor.dtype, tensor.shape, tensor.bytes)?;
            } else {
                self.session.put(self.step, name, tensor)?;
            }
            self.claim(name);
            Ok(())
        })
    }

    /// Adds tensors whose bytes stay borrowed for the call: as [`CheckpointWriter::put`], but
    /// the small ones are gathered into windows without a copy (a trainer's state dict, a
    /// file in memory). Every name and shape is checked before anything is written.
    ///
    /// # Errors
    /// Those of [`CheckpointWriter::put`], for the first tensor that has one.
    pub fn put_many(&mut self, tensors: &[(&str, TensorRef<'_>)]) -> Result<()> {
        let store = self.session.store;
        contain(&store.path, "writing a checkpoint", || {
            let mut given = HashSet::with_capacity(tensors.len());
            for (name, _) in tensors {
                self.check_new(name)?;
                if !given.insert(*name) {
                    return Err(StoreError::Invalid(InvalidInput::DuplicateTensor {
                        step: self.step,
                        tensor: name.to_string(),
                    }));
                }
            }
            for (name, t) in tensors {
                check_shape(name, self.step, t.dtype, t.shape, t.bytes.len() as u64)?;
            }
            let (small, large): (Vec<(&str, TensorRef<'_>)>, Vec<_>) = tensors
                .iter()
                .cloned()
                .partition(|(n, t)| self.packs(n, t.dtype, t.shape, t.bytes.len() as u64));
            let small_names: Vec<&str> = small.iter().map(|(n, _)| *n).collect();
            self.check_free(&small_names)?;
            for (name, t) in &small {
                self.pack(name, t.dtype, t.shape, t.bytes)?;
            }
            self.session.put_many(self.step, &large)?;
            for (name, _) in tensors {
                self.claim(name);
            }
            Ok(())
        })
    }

    /// Adds a tensor of `len` bytes that `read(offset, buf)` fills in pieces (e.g. from a
    /// file), so that it never has to be in memory whole.
    pub(crate) fn put_read(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[u64],
        len: u64,
        read: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>,
    ) -> Result<()> {
        let store = self.session.store;
        contain(&store.path, "writing a checkpoint", || {
            self.check_new(name)?;
            if self.packs(name, dtype, shape, len) {
                self.check_packed(name, dtype, shape, len)?;
                let mut bytes = vec![0u8; len as usize];
                read(0, &mut bytes)?;
                self.pack(name, dtype, shape, &bytes)?;
            } else {
                self.session
                    .put_read(self.step, name, dtype, shape, len, read)?;
            }
            self.claim(name);
            Ok(())
        })
    }

    /// Whether the checkpoint packs this tensor (ADR 0041): a small one of at most one
    /// dimension that nothing would make lossy, neither its tier policy nor aging by its role
    /// (an optimizer moment ages, ADR 0027). A packed tensor stays exact.
    fn packs(&self, name: &str, dtype: DType, shape: &[u64], len: u64) -> bool {
        packs(len, shape.len())
            && !matches!(
                role_of(&[], name, dtype, shape),
                Role::FirstMoment | Role::SecondMoment
            )
            && !self.session.store.rules.read().resolve(name).is_lossy()
    }

    /// Refuses tensors that have a version at this step already (written outside a
    /// checkpoint): a packed tensor gets no version record of its own to collide.
    fn check_free(&mut self, names: &[&str]) -> Result<()> {
        if names.is_empty() {
            return Ok(());
        }
        let step = self.step;
        let taken = self.session.with_tables(|wt| {
            for name in names {
                if wt.version(name, step)?.is_some() {
                    return Ok(Some(name.to_string()));
                }
            }
            Ok(None)
        })?;
        match taken {
            Some(tensor) => Err(StoreError::Invalid(InvalidInput::StepExists {
                tensor,
                step,
            })),
            None => Ok(()),
        }
    }

    /// The checks of one tensor to pack, before its bytes are read: its shape and length,
    /// and that it has no version at this step.
    fn check_packed(&mut self, name: &str, dtype: DType, shape: &[u64], len: u64) -> Result<()> {
        check_shape(name, self.step, dtype, shape, len)?;
        self.check_free(&[name])
    }

    /// Packs a small tensor whose shape was checked; writes its part once full.
    fn pack(&mut self, name: &str, dtype: DType, shape: &[u64], bytes: &[u8]) -> Result<()> {
        match self.packer.add(name, dtype, shape, bytes) {
            Some(full) => self.session.put_part(self.step, &full),
            None => Ok(()),
        }
    }

    fn check_new(&self, name: &str) -> Result<()> {
        if self.seen.contains(name) {
            return Err(StoreError::Invalid(InvalidInput::DuplicateTensor {
                step: self.step,
                tensor: name.to_string(),
            }));
        }
        Ok(())
    }

    /// Records a tensor added (after its `put` succeeded).
    fn claim(&mut self, name: &str) {
        self.seen.insert(name.to_string());
        self.names.push(name.to_string());
    }

    /// The step being written.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Tensors added so far.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether no tensor was added yet.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Writes what is left and commits: the whole checkpoint becomes visible at once.
    ///
    /// # Errors
    /// [`InvalidInput::CheckpointExists`] if another handle committed a checkpoint at this
    /// step meanwhile, and database errors; nothing is visible then.
    pub fn commit(self) -> Result<()> {
        let CheckpointWriter {
            mut session,
            step,
            metadata,
            names,
            mut packer,
            ..
        } = self;
        let store = session.store;
        contain(&store.path, "committing a checkpoint", || {
            for full in packer.finish() {
                session.put_part(step, &full)?;
            }
            let mut record = CheckpointRecord::new(metadata, names);
            record.packed = packer.packed;
            session.commit(step, |wt| {
                if wt.checkpoint(step)?.is_some() {
                    return Err(StoreError::Invalid(InvalidInput::CheckpointExists { step }));
                }
                if !record.packed.is_empty() {
                    wt.require_packed_format()?;
                }
                for name in record.packed.keys() {
                    wt.add_member(name, step)?;
                }
                wt.put_checkpoint(step, &record)
            })
        })?;
        store.checkpoint_committed(step);
        Ok(())
    }
}

impl Store {
    /// Starts writing the checkpoint at `step` tensor by tensor ([`CheckpointWriter`]), in
    /// memory bounded by [`crate::Options::window_bytes`] whatever the checkpoint's size.
    ///
    /// # Errors
    /// [`InvalidInput::CheckpointExists`], [`InvalidInput::Options`] for metadata over 64 MiB,
    /// and database errors.
    pub fn begin_checkpoint(&self, step: u64, metadata: &str) -> Result<CheckpointWriter<'_>> {
        if metadata.len() > MAX_METADATA_BYTES {
            return Err(StoreError::Invalid(InvalidInput::Options {
                reason: format!(
                    "checkpoint metadata is {} bytes, over the {MAX_METADATA_BYTES}-byte limit",
                    metadata.len()
                ),
            }));
        }
        let session = contain(&self.path, "starting a checkpoint", || {
            let mut session = Session::begin(self, false)?;
            if session.with_tables(|wt| wt.checkpoint(step))?.is_some() {
                return Err(StoreError::Invalid(InvalidInput::CheckpointExists { step }));
            }
            Ok(session)
        })?;
        Ok(CheckpointWriter {
            session,
            step,
            metadata: metadata.to_string(),
            names: Vec::new(),
            seen: HashSet::new(),
            packer: Packer::default(),
        })
    }
}
