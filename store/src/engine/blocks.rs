//! Reading blocks: follow a block's delta chain down to a keyframe or a cached block, fetch
//! those segments (sequential I/O), then decode them (in parallel across blocks).
//!
//! Works on the tables of a read transaction or of a write transaction (re-basing reads
//! inside the transaction that changes things).

use std::collections::HashMap;
use std::sync::Arc;

use rayon::prelude::*;
use strata_codec::aged::AgedView;
use strata_codec::segment::{Segment, SegmentError, SegmentHeader};
use strata_codec::DType;

use super::buffers::POOL;
use super::cache::{Block, BlockCache};
use super::quantized;
use super::view::View;
use crate::error::{Corruption, Result, StoreError, TierFailure};
use crate::record::{BlockRecord, Form, ResidualRef, TierRow, VersionRecord};
use crate::tensor::Fidelity;

/// Longest chain a reader follows: above any `max_chain` the store writes (255), so only a
/// loop in damaged metadata reaches it.
pub(crate) const MAX_HOPS: usize = 256;
/// Decoded bytes of one batch of [`read_blocks`]: bounds what a read holds at once.
pub(crate) const BATCH_BYTES: usize = 16 << 20;
/// Bytes one batch of [`read_blocks`] holds before decoding: its blocks' decoded size and the
/// segments fetched to decode them. A keyframe's block fetches about its compressed size, a
/// block at the end of a chain that many segments: the batch ends at this bound, so a deep
/// chain's batch holds fewer blocks instead of `depth` times the bytes.
const BATCH_HELD_BYTES: usize = 16 << 20;
/// Blocks of one batch of [`read_blocks`], however small.
const BATCH_JOBS: usize = 4096;

/// One segment to decode: which block of which version it is.
#[derive(Debug)]
struct Link {
    step: u64,
    address: u128,
    bytes: Vec<u8>,
    /// A lossless segment or an aged blob.
    form: Form,
}

/// Everything needed to decode one block without touching the database.
#[derive(Debug)]
pub(crate) struct Job {
    name: Arc<str>,
    /// The version asked for.
    step: u64,
    block: u64,
    dtype: DType,
    /// Decoded bytes of the block.
    len: usize,
    /// Bytes of the block to decode: `len`, or fewer when the reader needs only the block's
    /// first elements (a lossless chain then decodes each link's prefix).
    want: usize,
    /// Segments from the requested block down (lossless or aged); the last is a keyframe
    /// unless `base` is set.
    links: Vec<Link>,
    /// The decoded block under the last link (from the cache), or the requested block itself
    /// when `links` is empty.
    base: Option<Block>,
    /// Lossless chain, quantized segment, or Tier 0 (rebuilt by the caller).
    form: Form,
    /// What the decoded bytes are worth.
    pub(crate) fidelity: Fidelity,
    /// A quantized block's sparse residual (HPΔKV blob), applied after dequantizing.
    sparse: Option<Vec<u8>>,
    /// A Tier 0 block's row (how to rebuild it).
    pub(crate) row: Option<TierRow>,
    /// Put what is decoded into the cache (reads that may come back); a streaming read of a
    /// whole checkpoint only looks the cache up.
    keep: bool,
}

/// Fetches chains through a memo of version records.
pub(crate) struct Fetcher<'a> {
    view: &'a dyn View,
    cache: &'a BlockCache,
    records: HashMap<(Arc<str>, u64), Arc<VersionRecord>>,
    keep: bool,
}

impl<'a> Fetcher<'a> {
    /// A fetcher whose jobs put what they decode into `cache`.
    pub(crate) fn new(view: &'a dyn View, cache: &'a BlockCache) -> Self {
        Fetcher {
            view,
            cache,
            records: HashMap::new(),
            keep: true,
        }
    }

    /// A fetcher for a read that streams through data it will not read again (exports,
    /// whole checkpoints): its jobs find bases in `cache` but add nothing to it, so they
    /// decode in reused buffers and leave the cache to reads that repeat.
    pub(crate) fn streaming(view: &'a dyn View, cache: &'a BlockCache) -> Self {
        Fetcher {
            keep: false,
            ..Fetcher::new(view, cache)
        }
    }

    /// The version before `step` of `name`, if any, with its record (put in the memo).
    pub(crate) fn predecessor(
        &mut self,
        name: &Arc<str>,
        step: u64,
    ) -> Result<Option<(u64, Arc<VersionRecord>)>> {
        let Some((s, rec)) = self.view.predecessor(name, step)? else {
            return Ok(None);
        };
        let rec = self
            .records
            .entry((name.clone(), s))
            .or_insert_with(|| Arc::new(rec))
            .clone();
        Ok(Some((s, rec)))
    }

    /// The record of a version, through the memo.
    pub(crate) fn record(
        &mut self,
        name: &Arc<str>,
        step: u64,
    ) -> Result<Option<Arc<VersionRecord>>> {
        let key = (name.clone(), step);
        if let Some(r) = self.records.get(&key) {
            return Ok(Some(r.clone()));
        }
        let Some(rec) = self.view.version(name, step)? else {
            return Ok(None);
        };
        let rec = Arc::new(rec);
        self.records.insert(key, rec.clone());
        Ok(Some(rec))
    }

    /// Gathers the segments that block `block` of `(name, step)` (record `rec`) needs.
    pub(crate) fn fetch(
        &mut self,
        name: &Arc<str>,
        step: u64,
        rec: &VersionRecord,
        block: u64,
    ) -> Result<Job> {
        self.fetch_prefix(name, step, rec, block, usize::MAX)
    }

    /// Gathers the segments that the first `want` bytes of a block need (the whole block
    /// when `want` is at least its length). A lossless chain decodes only that prefix of
    /// each link; a quantized, Tier 0 or aged block decodes whole.
    pub(crate) fn fetch_prefix(
        &mut self,
        name: &Arc<str>,
        step: u64,
        rec: &VersionRecord,
        block: u64,
        want: usize,
    ) -> Result<Job> {
        let mut job = Job::empty(name, step, rec, block, want, self.keep);
        let len = job.len;
        let (mut cur_step, mut cur) = (step, block_record(name, step, rec, block)?);
        if cur.form == Form::Inline {
            // The bytes are the record's (ADR 0029): nothing to fetch or decode.
            let bytes = rec.inline.as_ref().filter(|b| b.len() == len);
            let bytes = bytes.ok_or_else(|| {
                StoreError::Corrupt(Corruption::BlockMismatch {
                    tensor: name.to_string(),
                    step,
                    block,
                    reason: format!("an inline block without its {len} bytes"),
                })
            })?;
            job.base = Some(Arc::new(bytes.clone()));
            return Ok(job);
        }
        if !matches!(cur.form, Form::Lossless | Form::Aged) {
            job.want = len;
            return self.fetch_tiered(job, cur);
        }
        if let Some(e) = rec.aged {
            job.fidelity = Fidelity::Aged {
                rel_error: f64::from(e),
            };
        }
        loop {
            if cur.form == Form::Aged && job.want < len {
                // An aged blob decodes against its whole base: read the block whole.
                return self.fetch(name, step, rec, block);
            }
            // A whole block serves any prefix; a prefix block, a read of the same prefix.
            let prefix = Some(job.key(cur.address)).filter(|_| job.want < len);
            if let Some(hit) = self.cache.get(cur.address).or_else(|| {
                prefix
                    .and_then(|k| self.cache.get(k))
                    .filter(|b| b.len() == job.want)
            }) {
                job.base = Some(hit);
                return Ok(job);
            }
            let bytes = self
                .view
                .fetch_segment(name, cur_step, block, cur.address)?;
            job.links.push(Link {
                step: cur_step,
                address: cur.address,
                bytes,
                form: cur.form,
            });
            let Some(base_step) = cur.base else {
                return Ok(job);
            };
            if job.links.len() >= MAX_HOPS {
                return Err(StoreError::Corrupt(Corruption::ChainTooLong {
                    tensor: name.to_string(),
                    step,
                    block,
                    limit: MAX_HOPS,
                }));
            }
            let bad_base = |reason| {
                StoreError::Corrupt(Corruption::BadBase {
                    tensor: name.to_string(),
                    step: cur_step,
                    block,
                    base: base_step,
                    reason,
                })
            };
            let base_rec = self
                .record(name, base_step)?
                .ok_or_else(|| bad_base("does not exist"))?;
            if !base_rec.same_layout(rec) {
                return Err(bad_base("has another dtype, shape or block size"));
            }
            cur = block_record(name, base_step, &base_rec, block)?;
            if !matches!(cur.form, Form::Lossless | Form::Aged) {
                return Err(bad_base("is quantized or Tier 0: no delta may build on it"));
            }
            cur_step = base_step;
        }
    }
}

impl Fetcher<'_> {
    /// Fetches only the segment of block `block` of `(name, step)` (record `rec`), a lossless
    /// delta whose base's bytes the caller has: [`Job::decode_over`] decodes it over them.
    pub(crate) fn fetch_delta(
        &mut self,
        name: &Arc<str>,
        step: u64,
        rec: &VersionRecord,
        block: u64,
    ) -> Result<Job> {
        let cur = block_record(name, step, rec, block)?;
        if cur.form != Form::Lossless || cur.base.is_none() {
            return Err(StoreError::Corrupt(Corruption::BlockMismatch {
                tensor: name.to_string(),
                step,
                block,
                reason: "not a lossless delta".into(),
            }));
        }
        let bytes = self.view.fetch_segment(name, step, block, cur.address)?;
        let mut job = Job::empty(name, step, rec, block, usize::MAX, false);
        job.links.push(Link {
            step,
            address: cur.address,
            bytes,
            form: cur.form,
        });
        Ok(job)
    }

    /// Gathers a quantized block (its segment and sparse residual) or a Tier 0 block's row.
    fn fetch_tiered(&mut self, mut job: Job, cur: BlockRecord) -> Result<Job> {
        let row = self
            .view
            .required_tier_row(&job.name, job.step, job.block)?;
        job.form = cur.form;
        job.fidelity = quantized::fidelity_of(row.precision, job.dtype);
        if cur.form == Form::Absent {
            job.row = Some(row);
            return Ok(job);
        }
        let fetch = |address| {
            self.view
                .fetch_segment(&job.name, job.step, job.block, address)
        };
        if let Some(ResidualRef::Sparse { address, .. }) = row.residual {
            job.sparse = Some(fetch(address)?);
        }
        if let Some(hit) = self.cache.get(cache_key(cur.address, cur.form)) {
            job.base = Some(hit);
        } else {
            let bytes = fetch(cur.address)?;
            job.links.push(Link {
                step: job.step,
                address: cur.address,
                bytes,
                form: cur.form,
            });
        }
        Ok(job)
    }
}

/// The cache key of the first `want` bytes of a lossless block decoded alone (a prefix
/// read): the segment's address mixed with the length, never equal to the key of the
/// whole block.
fn prefix_key(address: u128, want: usize) -> u128 {
    address
        ^ (want as u128 + 1).wrapping_mul(0xC2B2_AE3D_27D4_EB4F_1656_67B1_9E37_79F9)
        ^ (1 << 127)
}

/// The cache key of a decoded block: its segment's address, or for a frame of a
/// multi-frame segment, the address mixed with the frame index.
pub(crate) fn cache_key(address: u128, form: Form) -> u128 {
    match form {
        Form::Frame { index } => {
            address
                ^ (u128::from(index) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)
        }
        _ => address,
    }
}

fn block_record(name: &str, step: u64, rec: &VersionRecord, block: u64) -> Result<BlockRecord> {
    usize::try_from(block)
        .ok()
        .and_then(|b| rec.blocks.get(b))
        .copied()
        .ok_or_else(|| {
            StoreError::Corrupt(Corruption::BlockMismatch {
                tensor: name.to_string(),
                step,
                block,
                reason: format!("the version has only {} blocks", rec.blocks.len()),
            })
        })
}

/// Decoded bytes of block `block` (bounded by the record checks: at most 1 GiB).
pub(crate) fn block_bytes(rec: &VersionRecord, block: u64) -> usize {
    (rec.block_len(block) * rec.dtype.size() as u64) as usize
}

impl Job {
    /// A job for block `block` of `(name, step)` (record `rec`) with nothing fetched yet: the
    /// first `want` bytes of a lossless block, exact.
    fn empty(
        name: &Arc<str>,
        step: u64,
        rec: &VersionRecord,
        block: u64,
        want: usize,
        keep: bool,
    ) -> Job {
        let len = block_bytes(rec, block);
        Job {
            name: name.clone(),
            step,
            block,
            dtype: rec.dtype,
            len,
            want: want.min(len),
            links: Vec::new(),
            base: None,
            form: Form::Lossless,
            fidelity: Fidelity::Exact,
            sparse: None,
            row: None,
            keep,
        }
    }

    /// Bytes of the segments fetched to decode the block.
    fn fetched_bytes(&self) -> usize {
        self.links.iter().map(|l| l.bytes.len()).sum::<usize>()
            + self.sparse.as_ref().map_or(0, Vec::len)
    }

    /// Whether the block is at Tier 0: the caller rebuilds it from [`Job::row`].
    pub(crate) fn is_absent(&self) -> bool {
        self.form == Form::Absent
    }

    /// The version asked for and the block.
    pub(crate) fn at(&self) -> (&Arc<str>, u64, u64) {
        (&self.name, self.step, self.block)
    }

    /// Decodes the chain bottom-up, caching every block decoded on the way.
    pub(crate) fn decode(self, cache: &BlockCache) -> Result<Block> {
        match self.form {
            // An inline job holds its bytes as its base, with no link to decode.
            Form::Lossless | Form::Aged | Form::Inline => self.decode_chain(cache),
            Form::Quantized | Form::Frame { .. } => self.decode_quantized(cache),
            Form::Absent => Err(StoreError::Tier(TierFailure::Reconstruct {
                tensor: self.name.to_string(),
                step: self.step,
                block: self.block,
                reason: "a Tier 0 block has no segment to decode".into(),
            })),
        }
    }

    fn segment_error(&self, link: &Link, source: SegmentError) -> StoreError {
        StoreError::Corrupt(Corruption::Segment {
            tensor: self.name.to_string(),
            step: link.step,
            block: self.block,
            address: link.address,
            source: Box::new(source),
        })
    }

    /// Parses a link's segment and checks its dtype, and its size with `size_ok`.
    ///
    /// The segment's checksum is not computed again: every link's bytes came through
    /// [`View::fetch_segment`], which checked the xxh3-128 content address of the whole
    /// segment, a stronger proof of the same bytes.
    fn parse_checked<'l>(
        &self,
        link: &'l Link,
        size_ok: impl Fn(&SegmentHeader) -> bool,
    ) -> Result<Segment<'l>> {
        let seg = Segment::parse_without_checksum(&link.bytes)
            .map_err(|e| self.segment_error(link, e))?;
        let h = seg.header();
        if h.dtype != self.dtype || !size_ok(h) {
            return Err(StoreError::Corrupt(Corruption::BlockMismatch {
                tensor: self.name.to_string(),
                step: link.step,
                block: self.block,
                reason: format!(
                    "segment holds {} elements of {}, the record expects {} bytes of {}",
                    h.elements, h.dtype, self.len, self.dtype
                ),
            }));
        }
        Ok(seg)
    }

    /// Dequantizes the block (cached by segment address) and applies its sparse residual.
    fn decode_quantized(mut self, cache: &BlockCache) -> Result<Block> {
        let block = match (self.base.take(), self.links.first()) {
            (Some(hit), _) => hit,
            (None, Some(link)) => {
                let seg_err = |source| self.segment_error(link, source);
                // A frame segment's element count is per frame, like a block's.
                self.parse_checked(link, |h| {
                    h.elements.checked_mul(self.dtype.size() as u64) == Some(self.len as u64)
                })?;
                let out = match self.form {
                    Form::Frame { index } => {
                        quantized::decode_frame(self.dtype, &link.bytes, index, self.len).map_err(
                            |e| {
                                StoreError::Tier(TierFailure::Frame {
                                    tensor: self.name.to_string(),
                                    step: link.step,
                                    address: link.address,
                                    source: Box::new(e),
                                })
                            },
                        )?
                    }
                    _ => quantized::decode(self.dtype, &link.bytes, self.len).map_err(seg_err)?,
                };
                let block = Arc::new(out);
                cache.insert(cache_key(link.address, self.form), block.clone());
                block
            }
            (None, None) => {
                return Err(StoreError::Corrupt(Corruption::BlockMismatch {
                    tensor: self.name.to_string(),
                    step: self.step,
                    block: self.block,
                    reason: "a quantized block without its segment".into(),
                }))
            }
        };
        if block.len() != self.len {
            return Err(StoreError::Corrupt(Corruption::BlockMismatch {
                tensor: self.name.to_string(),
                step: self.step,
                block: self.block,
                reason: format!(
                    "the block decodes to {} bytes, the record expects {}",
                    block.len(),
                    self.len
                ),
            }));
        }
        match &self.sparse {
            None => Ok(block),
            Some(blob) => {
                let mut values = quantized::to_f32(self.dtype, &block).unwrap_or_default();
                quantized::apply_sparse(blob, &mut values).map_err(|source| {
                    StoreError::Corrupt(Corruption::Residual {
                        tensor: self.name.to_string(),
                        step: self.step,
                        block: self.block,
                        source: Box::new(source),
                    })
                })?;
                Ok(Arc::new(quantized::from_f32(self.dtype, &values)))
            }
        }
    }

    /// Decodes one link of a chain over `base` into `out`: a lossless segment (XOR delta or
    /// keyframe) or an aged blob (a quantized delta against the base's reconstruction).
    fn decode_link(&self, link: &Link, base: Option<&[u8]>, out: &mut [u8]) -> Result<()> {
        if link.form == Form::Aged {
            return AgedView::parse(&link.bytes)
                .and_then(|view| view.decode_into(self.dtype, base, out))
                .map_err(|source| {
                    StoreError::Corrupt(Corruption::Aged {
                        tensor: self.name.to_string(),
                        step: link.step,
                        block: self.block,
                        address: link.address,
                        source: Box::new(source),
                    })
                });
        }
        let seg = self.parse_checked(link, |h| h.decoded_len().ok() == Some(self.len))?;
        if out.len() < self.len {
            // A prefix read: the base is a prefix too, or a whole block cut to one.
            let base = base.map(|b| b.get(..out.len()).unwrap_or(b));
            return seg
                .decode_lossless_prefix_into(base, out)
                .map_err(|e| self.segment_error(link, e));
        }
        seg.decode_lossless_into(base, out)
            .map_err(|e| self.segment_error(link, e))
    }

    /// The cache key of a block this job decodes from `address`.
    fn key(&self, address: u128) -> u128 {
        if self.want < self.len {
            prefix_key(address, self.want)
        } else {
            address
        }
    }

    fn decode_chain(mut self, cache: &BlockCache) -> Result<Block> {
        if !self.keep || !cache.wants(self.want) {
            return self.decode_chain_uncached();
        }
        let mut base = self.base.take();
        let links = std::mem::take(&mut self.links);
        for link in links.into_iter().rev() {
            // A buffer the cache evicted, when there is one: fresh pages fault one by one.
            let mut out = POOL.take_filled(self.want);
            self.decode_link(&link, base.as_deref().map(Vec::as_slice), &mut out)?;
            let block = Arc::new(out);
            cache.insert(self.key(link.address), block.clone());
            base = Some(block);
            POOL.give(link.bytes);
        }
        match base {
            Some(block) if block.len() == self.len || block.len() == self.want => Ok(block),
            other => Err(StoreError::Corrupt(Corruption::BlockMismatch {
                tensor: self.name.to_string(),
                step: self.step,
                block: self.block,
                reason: format!(
                    "the block decodes to {} bytes, the record expects {}",
                    other.map_or(0, |b| b.len()),
                    self.len
                ),
            })),
        }
    }
}

impl Job {
    /// Decodes a job from [`Fetcher::fetch_delta`] over `base`, the bytes of its base block.
    pub(crate) fn decode_over(self, base: &[u8]) -> Result<Block> {
        let Some(link) = self.links.first().filter(|_| self.links.len() == 1) else {
            return Err(StoreError::Corrupt(Corruption::BlockMismatch {
                tensor: self.name.to_string(),
                step: self.step,
                block: self.block,
                reason: "a delta without its one segment".into(),
            }));
        };
        let mut out = POOL.take_filled(self.len);
        self.decode_link(link, Some(base), &mut out)?;
        Ok(Arc::new(out))
    }
}

impl Job {
    /// Decodes the block into `dst`, which must be exactly its bytes. A lossless or aged
    /// chain of a streaming read ([`Fetcher::streaming`]) decodes its last link straight into
    /// `dst` (the links under it in pooled buffers): the block needs no buffer of its own and
    /// no copy. Other blocks (a read that fills the cache, a quantized block, a block found
    /// in the cache) decode as [`Job::decode`] does and are copied.
    pub(crate) fn decode_into(mut self, cache: &BlockCache, dst: &mut [u8]) -> Result<()> {
        let (name, step, block, len) = (self.name.clone(), self.step, self.block, self.len);
        let mismatch = |got: usize| {
            StoreError::Corrupt(Corruption::BlockMismatch {
                tensor: name.to_string(),
                step,
                block,
                reason: format!("the block decodes to {got} bytes, the record expects {len}"),
            })
        };
        let direct = !self.keep
            && self.want == self.len
            && matches!(self.form, Form::Lossless | Form::Aged)
            && !self.links.is_empty();
        if !direct {
            let block = self.decode(cache)?;
            if block.len() != dst.len() {
                return Err(mismatch(block.len()));
            }
            dst.copy_from_slice(&block);
            // Not held by the cache: the buffer serves the next block.
            if let Ok(buf) = Arc::try_unwrap(block) {
                POOL.give(buf);
            }
            return Ok(());
        }
        if dst.len() != self.len {
            return Err(mismatch(dst.len()));
        }
        let cached = self.base.take();
        let links = std::mem::take(&mut self.links);
        let last = links.len() - 1;
        // The link below the one being decoded, and a buffer free for the next.
        let mut below: Option<Vec<u8>> = None;
        let mut spare: Option<Vec<u8>> = None;
        for (i, link) in links.into_iter().rev().enumerate() {
            let base = below.as_deref().or(cached.as_deref().map(Vec::as_slice));
            if i == last {
                self.decode_link(&link, base, dst)?;
            } else {
                let mut out = spare.take().unwrap_or_else(|| POOL.take_filled(self.len));
                self.decode_link(&link, base, &mut out)?;
                spare = below.replace(out);
            }
            POOL.give(link.bytes);
        }
        for buf in below.into_iter().chain(spare) {
            POOL.give(buf);
        }
        Ok(())
    }

    /// The chain decoded in two buffers that trade places at each link: nothing decoded on
    /// the way is kept (the cache would not take it), so no link allocates (fresh pages cost
    /// a page fault each; at chain depth 5 this halves a 4 MiB read, ADR 0006).
    fn decode_chain_uncached(mut self) -> Result<Block> {
        let cached = self.base.take();
        let mut prev: Option<Vec<u8>> = None;
        let mut out = POOL.take_filled(self.want);
        let links = std::mem::take(&mut self.links);
        let count = links.len();
        for (i, link) in links.into_iter().rev().enumerate() {
            let base = prev.as_deref().or(cached.as_deref().map(Vec::as_slice));
            self.decode_link(&link, base, &mut out)?;
            POOL.give(link.bytes);
            let next = match prev.take() {
                Some(buf) => buf,
                None if i + 1 < count => POOL.take_filled(self.want),
                None => Vec::new(),
            };
            prev = Some(std::mem::replace(&mut out, next));
        }
        POOL.give(out);
        match (prev, cached) {
            (Some(block), _) => Ok(Arc::new(block)),
            (None, Some(block)) if block.len() == self.len || block.len() == self.want => Ok(block),
            _ => Err(StoreError::Corrupt(Corruption::BlockMismatch {
                tensor: self.name.to_string(),
                step: self.step,
                block: self.block,
                reason: "the block has no segment to decode".into(),
            })),
        }
    }
}

/// Decodes jobs, in parallel when there is more than one; results in job order.
pub(crate) fn decode_all(jobs: Vec<Job>, cache: &BlockCache) -> Vec<Result<Block>> {
    if jobs.len() <= 1 {
        return jobs.into_iter().map(|j| j.decode(cache)).collect();
    }
    jobs.into_par_iter().map(|j| j.decode(cache)).collect()
}

/// Blocks of one version to read, for [`read_blocks`].
pub(crate) struct Span<'r> {
    pub(crate) name: Arc<str>,
    pub(crate) step: u64,
    pub(crate) rec: &'r VersionRecord,
    pub(crate) blocks: std::ops::Range<u64>,
    /// The end of the elements the reader needs, when it needs none past it: a lossless
    /// block that ends later decodes only up to it.
    pub(crate) upto: Option<u64>,
}

impl<'r> Span<'r> {
    /// Every block of version `step` of `name` (record `rec`).
    pub(crate) fn whole(name: Arc<str>, step: u64, rec: &'r VersionRecord) -> Span<'r> {
        Span {
            name,
            step,
            rec,
            blocks: 0..rec.blocks.len() as u64,
            upto: None,
        }
    }
}

/// Reads the blocks of `spans` in order, fetching them a batch at a time
/// ([`fetch_next_batch`]: a bounded number of bytes decoded and fetched) and decoding each batch in
/// parallel, so many small tensors decode together and a large one in bounded memory. Tier 0
/// blocks go to `rebuild`; `sink` gets each block's bytes and fidelity (span index, block
/// index) in order.
///
/// A streaming read (a [`Fetcher::streaming`], which adds nothing to the cache) decodes a
/// batch in the thread pool while this thread hands the batch before it to `sink` and
/// fetches the batch after it, so the pool's threads do not wait for fetches and writes.
/// Other reads decode one batch after another: a batch's blocks, once cached, may be the
/// bases of the next batch's.
pub(crate) fn read_blocks(
    fetcher: &mut Fetcher<'_>,
    cache: &BlockCache,
    spans: &[Span<'_>],
    mut rebuild: impl FnMut(usize, &Job) -> Result<(Block, Fidelity)>,
    mut sink: impl FnMut(usize, u64, &[u8], Fidelity) -> Result<()>,
) -> Result<()> {
    let mut todo = spans
        .iter()
        .enumerate()
        .flat_map(|(si, s)| s.blocks.clone().map(move |b| (si, b)))
        .peekable();
    let pipelined = !fetcher.keep;
    let mut fetch_next = || fetch_next_batch(fetcher, &mut todo, spans, &mut rebuild);
    if !pipelined {
        while let Some(f) = fetch_next()? {
            let decoded = decode_all(f.jobs, cache);
            deliver(spans, f.blocks, decoded, &mut sink)?;
        }
        return Ok(());
    }
    let mut current = fetch_next()?;
    let mut decoded_before: Option<(Vec<FetchedBlock>, Vec<Result<Block>>)> = None;
    while let Some(f) = current.take() {
        let mut decoded = Vec::new();
        let mut delivered = Ok(());
        let mut next = Ok(None);
        rayon::in_place_scope(|s| {
            let jobs = f.jobs;
            let decoded = &mut decoded;
            s.spawn(move |_| *decoded = decode_all(jobs, cache));
            if let Some((blocks, results)) = decoded_before.take() {
                delivered = deliver(spans, blocks, results, &mut sink);
            }
            if delivered.is_ok() {
                next = fetch_next();
            }
        });
        delivered?;
        decoded_before = Some((f.blocks, decoded));
        current = next?;
    }
    if let Some((blocks, results)) = decoded_before {
        deliver(spans, blocks, results, &mut sink)?;
    }
    Ok(())
}

/// Fetches the next batch of a read and rebuilds its Tier 0 blocks: blocks in `todo`'s order
/// until they hold [`BATCH_HELD_BYTES`] (decoded size and fetched segments), at most
/// [`BATCH_BYTES`] of decoded data and [`BATCH_JOBS`] blocks; at least one block, and as many as
/// the thread pool has threads when the bounds allow, so that every thread has a block to
/// decode. `None` when `todo` is empty.
pub(super) fn fetch_next_batch(
    fetcher: &mut Fetcher<'_>,
    todo: &mut std::iter::Peekable<impl Iterator<Item = (usize, u64)>>,
    spans: &[Span<'_>],
    rebuild: &mut impl FnMut(usize, &Job) -> Result<(Block, Fidelity)>,
) -> Result<Option<Fetched>> {
    let threads = rayon::current_num_threads().max(1);
    let mut fetched = Fetched {
        blocks: Vec::new(),
        jobs: Vec::new(),
    };
    let (mut decoded, mut held) = (0usize, 0usize);
    while let Some(&(si, b)) = todo.peek() {
        let len = block_bytes(spans[si].rec, b);
        let n = fetched.blocks.len();
        let full = decoded + len > BATCH_BYTES || n >= BATCH_JOBS || held >= BATCH_HELD_BYTES;
        if n > 0 && full && !(n < threads && decoded + len <= BATCH_BYTES) {
            break;
        }
        todo.next();
        decoded += len;
        held += len + fetch_block(fetcher, spans, si, b, rebuild, &mut fetched)?;
    }
    Ok((!fetched.blocks.is_empty()).then_some(fetched))
}

/// Fetches block `b` of span `si` into `fetched` (a Tier 0 block rebuilt by `rebuild`);
/// returns the bytes of the segments it fetched.
fn fetch_block(
    fetcher: &mut Fetcher<'_>,
    spans: &[Span<'_>],
    si: usize,
    b: u64,
    rebuild: &mut impl FnMut(usize, &Job) -> Result<(Block, Fidelity)>,
    fetched: &mut Fetched,
) -> Result<usize> {
    let s = &spans[si];
    let want = s.upto.map_or(usize::MAX, |end| {
        let elems = end.saturating_sub(b * s.rec.block_elems);
        usize::try_from(elems * s.rec.dtype.size() as u64).unwrap_or(usize::MAX)
    });
    let job = fetcher.fetch_prefix(&s.name, s.step, s.rec, b, want)?;
    let fidelity = job.fidelity;
    let bytes = job.fetched_bytes();
    let rebuilt = if job.is_absent() {
        Some(rebuild(si, &job)?)
    } else {
        fetched.jobs.push(job);
        None
    };
    fetched.blocks.push(FetchedBlock {
        span: si,
        block: b,
        fidelity,
        rebuilt,
    });
    Ok(bytes)
}

/// One block of a fetched batch: where it is, its fidelity, and its bytes if `rebuild`
/// made them (Tier 0) instead of a decode.
pub(super) struct FetchedBlock {
    pub(super) span: usize,
    pub(super) block: u64,
    pub(super) fidelity: Fidelity,
    pub(super) rebuilt: Option<(Block, Fidelity)>,
}

/// A batch of [`read_blocks`] fetched: its blocks in order, and the jobs that decode those
/// not rebuilt, in the same order.
pub(super) struct Fetched {
    pub(super) blocks: Vec<FetchedBlock>,
    pub(super) jobs: Vec<Job>,
}

/// Hands a batch's blocks to `sink` in order (`decoded`: the results of its jobs), and
/// their buffers back to the pool.
fn deliver(
    spans: &[Span<'_>],
    blocks: Vec<FetchedBlock>,
    decoded: Vec<Result<Block>>,
    sink: &mut impl FnMut(usize, u64, &[u8], Fidelity) -> Result<()>,
) -> Result<()> {
    let mut decoded = decoded.into_iter();
    for f in blocks {
        let (block, fidelity) = match f.rebuilt {
            Some(done) => done,
            None => {
                let block = decoded.next().ok_or_else(|| {
                    StoreError::Corrupt(Corruption::BlockMismatch {
                        tensor: spans[f.span].name.to_string(),
                        step: spans[f.span].step,
                        block: f.block,
                        reason: "a block was not decoded".into(),
                    })
                })??;
                (block, f.fidelity)
            }
        };
        sink(f.span, f.block, &block, fidelity)?;
        // Not held by the cache: the buffer serves the next read.
        if let Ok(buf) = Arc::try_unwrap(block) {
            POOL.give(buf);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Options, Store, TensorRef};
    use strata_codec::testing::SplitMix64;

    /// The held bytes of each batch a read of every block of `(name, step)` fetches.
    fn batches(store: &Store, name: &str, step: u64) -> Vec<(usize, usize)> {
        let r = store.read().unwrap();
        let rec = store.version_record(&r, name, step).unwrap();
        let spans = [Span::whole(Arc::from(name), step, &rec)];
        let mut todo = spans[0].blocks.clone().map(|b| (0, b)).peekable();
        let mut fetcher = Fetcher::streaming(&r, &store.cache);
        let mut out = Vec::new();
        let mut no_rebuild =
            |_: usize, _: &Job| -> Result<(Block, Fidelity)> { panic!("no Tier 0 block here") };
        while let Some(f) =
            fetch_next_batch(&mut fetcher, &mut todo, &spans, &mut no_rebuild).unwrap()
        {
            let held: usize = f.jobs.iter().map(|j| j.len + j.fetched_bytes()).sum();
            out.push((f.blocks.len(), held));
        }
        out
    }

    /// A block at the end of a chain fetches every segment of the chain: a batch of such
    /// blocks ends at the bound on what it holds, not after 16 MiB of decoded blocks, while
    /// keyframes of the same tensor still come in one batch.
    #[test]
    fn a_batch_is_bounded_by_the_segments_it_fetches() {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            block_bytes: 64 << 10,
            newest_keyframe: false,
            cache_bytes: 0,
            ..Options::default()
        };
        let store = Store::open_with(dir.path().join("s.strata"), opts).unwrap();
        // 8 MiB of f32 whose low bytes are noise: every delta is about a third of its block.
        let n = 2 << 20;
        let mut rng = SplitMix64::new(7);
        let mut values: Vec<u32> = (0..n)
            .map(|_| 0x3f80_0000 | (rng.next_u64() as u32 & 0xff_ffff))
            .collect();
        for step in 0..6u64 {
            if step > 0 {
                for v in values.iter_mut() {
                    *v ^= rng.next_u64() as u32 & 0xffff;
                }
            }
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            let t = TensorRef {
                dtype: DType::F32,
                shape: &[n as u64],
                bytes: &bytes,
            };
            store.put("w", step, &t).unwrap();
        }
        assert_eq!(store.versions("w").unwrap()[5].encodings[0].depth, 6);
        let block = 64 << 10;
        let keyframes = batches(&store, "w", 0);
        let deep = batches(&store, "w", 5);
        for (blocks, held) in keyframes.iter().chain(&deep) {
            // The block that crosses the bound is the last one taken.
            assert!(
                *held <= BATCH_HELD_BYTES + 7 * block,
                "{blocks} blocks held {held} bytes"
            );
        }
        // 8 MiB of blocks: one batch of keyframes; at depth 6 they fetch over 30 MB.
        assert_eq!(keyframes.len(), 1, "{keyframes:?}");
        assert!(deep.len() >= 3, "a deep read takes more batches: {deep:?}");
        assert_eq!(keyframes.iter().map(|x| x.0).sum::<usize>(), 128);
        assert_eq!(deep.iter().map(|x| x.0).sum::<usize>(), 128);
    }
}
