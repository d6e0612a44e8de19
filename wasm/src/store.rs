//! An in-memory tiered store: versions of named tensors cut into blocks, each block a codec
//! segment, with [`strata_tiering::TierState`] deciding where tiered blocks live.
//!
//! - **Exact versions** (`WritePolicy::Exact`) are stored losslessly. Each block is a
//!   keyframe or an XOR delta against a block of the tensor's latest earlier exact version
//!   (same dtype and length), chosen by the delta-base rule strata-store follows too
//!   ([`strata_codec::chain`], ADR 0006): the previous version's block while at most
//!   `max_chain` segments are decoded per read, then under [`DeltaPolicy::Chain`] an anchor
//!   delta against the lineage's keyframe when it is smaller than a keyframe. They register
//!   as [`strata_tiering::Policy::Exact`] blocks and never move.
//! - **Tiered versions** (`WritePolicy::Tiered(tier)`) are quantized at `tier` and register
//!   as [`strata_tiering::Policy::Tiered`] blocks. [`TieredStore::maintain`] asks the policy for a plan,
//!   re-encodes each moved block from the data it holds (dequantize, quantize at the new
//!   width: no exact copy is kept, so a promoted block keeps its lost precision, as
//!   [`strata_tiering::Precision`] records) and applies the plan. A block holding NaN or
//!   an infinity has no quantized form: it is stored losslessly as an exact block.
//! - **Tier 0**: the store keeps no reconstruction sources, so a tiered block may go to
//!   Tier 0 only when `allow_zero_fill` is set; it then reads as zeros until rewritten.
//!
//! Time is the caller's: every call that reads or plans takes `now` in milliseconds
//! ([`strata_tiering::Tick`]). Reads through [`TieredStore::get`] and
//! [`TieredStore::record_access`] count toward the blocks' access scores.

use std::collections::{BTreeMap, HashMap};

use strata_codec::chain::{self, Base, DeltaPolicy, DeltaRule, Link, Root, DEFAULT_MAX_CHAIN};
use strata_codec::lossless::LosslessOptions;
use strata_codec::segment::Segment;
use strata_codec::DType;
pub use strata_tiering::MaintainReport;
use strata_tiering::{
    BlockId, BlockSpec, Budget, Plan, Tick, Tier, TierBytes, TierConfig, TierState,
};

use crate::error::{invalid, WasmError};
use crate::ops::{self, try_filled, MAX_DECODED_BYTES};

/// Settings of a [`TieredStore`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoreOptions {
    /// Values per block (default 4096).
    pub block_values: u32,
    /// Most segments decoded to read one exact block: [`DEFAULT_MAX_CHAIN`] (6) by default,
    /// strata-store's default too (ADR 0006).
    pub max_chain: u8,
    /// How exact versions choose their delta bases (default [`DeltaPolicy::Chain`]).
    pub delta_policy: DeltaPolicy,
    /// The tier policy's settings (`warm_byte_cap` among them).
    pub tiers: TierConfig,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            block_values: 4096,
            max_chain: DEFAULT_MAX_CHAIN,
            delta_policy: DeltaPolicy::Chain,
            tiers: TierConfig::default(),
        }
    }
}

impl StoreOptions {
    /// The delta-base rule of these settings.
    pub fn delta_rule(&self) -> DeltaRule {
        DeltaRule::new(self.delta_policy, self.max_chain)
    }
}

/// How a version is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WritePolicy {
    /// Losslessly, forever.
    Exact,
    /// Quantized, starting at the given tier (`Hot8`, `Warm7`, `Warm5` or `Cold3`), then
    /// moved by the policy.
    Tiered(Tier),
}

impl WritePolicy {
    /// The policy from its name: `"exact"`, or a start tier `"hot8"`, `"warm7"`, `"warm5"`,
    /// `"cold3"`.
    ///
    /// # Errors
    /// [`WasmError::InvalidArgument`] for another name.
    pub fn parse(name: &str) -> Result<Self, WasmError> {
        match name {
            "exact" => Ok(WritePolicy::Exact),
            "hot8" => Ok(WritePolicy::Tiered(Tier::Hot8)),
            "warm7" => Ok(WritePolicy::Tiered(Tier::Warm7)),
            "warm5" => Ok(WritePolicy::Tiered(Tier::Warm5)),
            "cold3" => Ok(WritePolicy::Tiered(Tier::Cold3)),
            other => Err(invalid(
                "policy",
                format!(
                    "{other:?}: expected \"exact\", \"hot8\", \"warm7\", \"warm5\" or \"cold3\""
                ),
            )),
        }
    }
}

/// What one block holds.
#[derive(Debug, Clone)]
enum Data {
    /// A lossless segment; a delta names the step of its base version.
    Lossless { segment: Vec<u8>, base: Option<u64> },
    /// A quantized segment.
    Quantized(Vec<u8>),
    /// Tier 0: nothing (reads as zeros).
    Absent,
}

#[derive(Debug, Clone)]
struct Block {
    id: BlockId,
    /// Its chain facts (a keyframe's for a quantized or Tier 0 block).
    link: Link,
    data: Data,
}

#[derive(Debug, Clone)]
struct Version {
    dtype: DType,
    elements: usize,
    policy: WritePolicy,
    blocks: Vec<Block>,
}

/// A lossless block's place in its delta chain.
#[derive(Debug, Clone, Copy)]
struct Chained {
    /// The step of its version.
    step: u64,
    /// The step of its base's version (`None`: a keyframe).
    base: Option<u64>,
    /// Bytes of its segment.
    segment_len: usize,
    /// Its chain facts.
    link: Link,
}

/// Where a block lives: tensor, step, index in the version.
#[derive(Debug, Clone)]
struct Location {
    name: String,
    step: u64,
    index: usize,
}

/// Versions of named tensors in memory, tiered by [`strata_tiering`]. See the
/// [module docs](self).
#[derive(Debug)]
pub struct TieredStore {
    opts: StoreOptions,
    state: TierState,
    tensors: BTreeMap<String, BTreeMap<u64, Version>>,
    locations: HashMap<BlockId, Location>,
    next_id: BlockId,
}

impl TieredStore {
    /// An empty store.
    ///
    /// # Errors
    /// [`WasmError::InvalidArgument`] for `block_values` 0 or `max_chain` 0,
    /// [`WasmError::Tier`] for an invalid tier config.
    pub fn new(opts: StoreOptions) -> Result<Self, WasmError> {
        if opts.block_values == 0 {
            return Err(invalid("block_values", "must be at least 1"));
        }
        if opts.max_chain == 0 {
            return Err(invalid("max_chain", "must be at least 1"));
        }
        Ok(TieredStore {
            opts,
            state: TierState::new(opts.tiers)?,
            tensors: BTreeMap::new(),
            locations: HashMap::new(),
            next_id: 0,
        })
    }

    /// The settings.
    pub fn options(&self) -> &StoreOptions {
        &self.opts
    }

    /// Sets `warm_byte_cap`; it takes effect at the next [`TieredStore::maintain`].
    ///
    /// # Errors
    /// [`WasmError::Tier`] if the config no longer validates (it always does).
    pub fn set_warm_byte_cap(&mut self, cap: u64) -> Result<(), WasmError> {
        let tiers = TierConfig {
            warm_byte_cap: cap,
            ..self.opts.tiers
        };
        self.state.set_config(tiers)?;
        self.opts.tiers = tiers;
        Ok(())
    }

    /// Writes a version of `name` at `step` from little-endian bytes of `dtype`.
    ///
    /// # Errors
    /// [`WasmError::DuplicateVersion`], [`WasmError::RaggedLength`], [`WasmError::NotFloat`]
    /// for a tiered integer tensor, [`WasmError::InvalidArgument`] for an empty tensor, or a
    /// codec error. Nothing is stored on error.
    pub fn put(
        &mut self,
        name: &str,
        step: u64,
        dtype: DType,
        bytes: &[u8],
        policy: WritePolicy,
        now: Tick,
    ) -> Result<(), WasmError> {
        if self
            .tensors
            .get(name)
            .is_some_and(|v| v.contains_key(&step))
        {
            return Err(WasmError::DuplicateVersion {
                name: name.to_owned(),
                step,
            });
        }
        let size = dtype.size();
        if !bytes.len().is_multiple_of(size) {
            return Err(WasmError::RaggedLength {
                what: "tensor data",
                len: bytes.len(),
                dtype,
                size,
            });
        }
        if bytes.is_empty() {
            return Err(invalid(
                "tensor data",
                "a version holds at least one element",
            ));
        }
        if let WritePolicy::Tiered(t) = policy {
            if !dtype.is_float() {
                return Err(WasmError::NotFloat {
                    what: "a tiered version",
                    dtype,
                });
            }
            if t.bits().is_none() {
                return Err(invalid(
                    "policy",
                    format!("start tier {t} is not quantized"),
                ));
            }
        }
        let elements = bytes.len() / size;
        let block_bytes = self.opts.block_values as usize * size;
        let base = match policy {
            WritePolicy::Exact => self.delta_base(name, step, dtype, elements),
            WritePolicy::Tiered(_) => None,
        };
        // Encode every block first: a failure leaves the store untouched.
        let mut encoded = Vec::with_capacity(elements.div_ceil(self.opts.block_values as usize));
        for (index, chunk) in bytes.chunks(block_bytes).enumerate() {
            let values = (chunk.len() / size) as u32;
            let (data, link, spec) = match policy {
                WritePolicy::Exact => {
                    let (data, link) = self.encode_exact(name, base, index, dtype, chunk)?;
                    (data, link, BlockSpec::exact(0, values))
                }
                WritePolicy::Tiered(start) => {
                    let f = ops::widen(dtype, chunk)?;
                    let bits = start.bits().map_or(8, u32::from);
                    match ops::quantize(&f, bits, dtype, Some(self.opts.tiers.group_size)) {
                        Ok(seg) => (
                            Data::Quantized(seg),
                            Link::KEYFRAME,
                            BlockSpec::tiered(0, values, start),
                        ),
                        Err(WasmError::Segment(_)) if f.iter().any(|v| !v.is_finite()) => {
                            let seg = ops::encode(dtype, chunk, None, &LosslessOptions::default())?;
                            let data = Data::Lossless {
                                segment: seg,
                                base: None,
                            };
                            (data, Link::KEYFRAME, BlockSpec::exact(0, values))
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            encoded.push((data, link, spec));
        }
        let mut blocks: Vec<Block> = Vec::with_capacity(encoded.len());
        for (index, (data, link, mut spec)) in encoded.into_iter().enumerate() {
            let id = self.next_id;
            spec.id = id;
            if let Err(e) = self.state.register(spec, now) {
                // Undo the blocks of this version registered so far.
                for b in &blocks {
                    // Registered a moment ago: removing it cannot fail.
                    let _ = self.state.remove(b.id);
                    self.locations.remove(&b.id);
                }
                return Err(e.into());
            }
            self.next_id += 1;
            self.locations.insert(
                id,
                Location {
                    name: name.to_owned(),
                    step,
                    index,
                },
            );
            blocks.push(Block { id, link, data });
        }
        self.tensors.entry(name.to_owned()).or_default().insert(
            step,
            Version {
                dtype,
                elements,
                policy,
                blocks,
            },
        );
        Ok(())
    }

    /// The step of the latest exact version of `name` before `step` with the same dtype
    /// and length: the base of a new exact version's deltas.
    fn delta_base(&self, name: &str, step: u64, dtype: DType, elements: usize) -> Option<u64> {
        let versions = self.tensors.get(name)?;
        let (&s, v) = versions
            .range(..step)
            .rev()
            .find(|(_, v)| v.policy == WritePolicy::Exact)?;
        (v.dtype == dtype && v.elements == elements).then_some(s)
    }

    /// Encodes block `index` of an exact version by the delta-base rule
    /// ([`StoreOptions::delta_rule`]): a delta against the base version's block, against
    /// its lineage's keyframe (an anchor, kept only when smaller than a keyframe,
    /// [`chain::keep_anchor`]) or against the block its base names (Star), or a keyframe.
    fn encode_exact(
        &self,
        name: &str,
        base: Option<u64>,
        index: usize,
        dtype: DType,
        chunk: &[u8],
    ) -> Result<(Data, Link), WasmError> {
        let opts = LosslessOptions::default();
        let keyframe = || -> Result<(Data, Link), WasmError> {
            let segment = ops::encode(dtype, chunk, None, &opts)?;
            Ok((
                Data::Lossless {
                    segment,
                    base: None,
                },
                Link::KEYFRAME,
            ))
        };
        // A delta against the block of the version at `bstep`, and its length.
        let delta = |bstep: u64| -> Result<(Data, usize), WasmError> {
            let base_bytes = self.decode_exact(name, bstep, index)?;
            let segment = ops::encode(dtype, chunk, Some(&base_bytes), &opts)?;
            let len = segment.len();
            let data = Data::Lossless {
                segment,
                base: Some(bstep),
            };
            Ok((data, len))
        };
        let Some(pstep) = base else {
            return keyframe();
        };
        let pred = match self.version(name, pstep)?.blocks.get(index) {
            Some(
                b @ Block {
                    data: Data::Lossless { .. },
                    ..
                },
            ) => b,
            _ => return keyframe(),
        };
        let rule = self.opts.delta_rule();
        let root = match rule.root_needed(pred.link) {
            Some(kind) => self.root_block(name, pstep, index, kind)?,
            None => None,
        };
        match (rule.choose(pred.link, root.map(|r| r.link)), root) {
            (Base::Predecessor { depth, run }, _) => Ok((delta(pstep)?.0, Link::delta(depth, run))),
            (Base::Root { depth, run, anchor }, Some(root)) => {
                let (data, len) = delta(root.step)?;
                if anchor && !chain::keep_anchor(len, root.segment_len) {
                    // No smaller than the keyframe: the tensor drifted far, a new lineage.
                    return keyframe();
                }
                Ok((data, Link::delta(depth, run)))
            }
            (Base::Root { .. }, None) | (Base::Keyframe, _) => keyframe(),
        }
    }

    /// The [`Root`] block the rule asked for, of block `index` of the version at `pstep`;
    /// `None` if a block on the way is missing or not lossless (at most `u8::MAX` bases are
    /// followed, as strata-store does).
    fn root_block(
        &self,
        name: &str,
        pstep: u64,
        index: usize,
        kind: Root,
    ) -> Result<Option<Chained>, WasmError> {
        let Some(pred) = self.chained(name, pstep, index)? else {
            return Ok(None);
        };
        match (kind, pred.base) {
            (Root::Base, Some(b)) => self.chained(name, b, index),
            (Root::Base, None) => Ok(None),
            (Root::Lineage, _) => {
                let mut at = pred;
                for _ in 0..u8::MAX {
                    let Some(b) = at.base else {
                        return Ok(Some(at));
                    };
                    match self.chained(name, b, index)? {
                        Some(next) => at = next,
                        None => return Ok(None),
                    }
                }
                Ok(None)
            }
        }
    }

    /// Block `index` of the version at `step`, if it is lossless.
    fn chained(&self, name: &str, step: u64, index: usize) -> Result<Option<Chained>, WasmError> {
        Ok(match self.version(name, step)?.blocks.get(index) {
            Some(Block {
                data: Data::Lossless { segment, base },
                link,
                ..
            }) => Some(Chained {
                step,
                base: *base,
                segment_len: segment.len(),
                link: *link,
            }),
            _ => None,
        })
    }

    fn version(&self, name: &str, step: u64) -> Result<&Version, WasmError> {
        self.tensors
            .get(name)
            .ok_or_else(|| WasmError::UnknownTensor {
                name: name.to_owned(),
            })?
            .get(&step)
            .ok_or_else(|| WasmError::UnknownVersion {
                name: name.to_owned(),
                step,
            })
    }

    /// Decodes lossless block `index` of a version, following its delta chain (at most
    /// `max_chain` segments, iteratively from the keyframe).
    fn decode_exact(&self, name: &str, step: u64, index: usize) -> Result<Vec<u8>, WasmError> {
        let mut chain = Vec::new();
        let mut at = step;
        loop {
            let block = self
                .version(name, at)?
                .blocks
                .get(index)
                .ok_or_else(|| invalid("block index", format!("{index} out of range")))?;
            match &block.data {
                Data::Lossless { segment, base } => {
                    chain.push((at, segment));
                    match base {
                        Some(b) => at = *b,
                        None => break,
                    }
                }
                _ => return Err(invalid("block", "a delta base is not lossless")),
            }
        }
        let mut bytes: Option<Vec<u8>> = None;
        for (at, segment) in chain.into_iter().rev() {
            let wrap = |source| WasmError::Block {
                name: name.to_owned(),
                step: at,
                block: index,
                source,
            };
            let seg = Segment::parse(segment).map_err(wrap)?;
            let len = seg.header().decoded_len().map_err(wrap)?;
            if len > MAX_DECODED_BYTES {
                return Err(WasmError::TooLarge {
                    bytes: len as u64,
                    limit: MAX_DECODED_BYTES,
                });
            }
            let mut out = try_filled::<u8>(len, "decoded block")?;
            seg.decode_lossless_into(bytes.as_deref(), &mut out)
                .map_err(wrap)?;
            bytes = Some(out);
        }
        bytes.ok_or_else(|| invalid("block", "empty delta chain"))
    }

    /// Reads a version as little-endian bytes of its dtype and records the read at `now`.
    /// Exact blocks come back bit-exact; quantized blocks are dequantized and rounded to
    /// the dtype (round to nearest even); Tier 0 blocks read as zeros.
    ///
    /// # Errors
    /// [`WasmError::UnknownTensor`], [`WasmError::UnknownVersion`], [`WasmError::Block`]
    /// for a block that fails to decode.
    pub fn get(&mut self, name: &str, step: u64, now: Tick) -> Result<(DType, Vec<u8>), WasmError> {
        let out = self.read(name, step)?;
        self.record_access(name, step, now)?;
        Ok(out)
    }

    /// Reads a float version as f32 values (exact for f32, bf16 and f16 exact versions) and
    /// records the read at `now`.
    ///
    /// # Errors
    /// As [`TieredStore::get`], and [`WasmError::NotFloat`].
    pub fn get_f32(&mut self, name: &str, step: u64, now: Tick) -> Result<Vec<f32>, WasmError> {
        let v = self.version(name, step)?;
        let dtype = v.dtype;
        if !dtype.is_float() {
            return Err(WasmError::NotFloat {
                what: "get_f32",
                dtype,
            });
        }
        let mut out = Vec::new();
        out.try_reserve_exact(v.elements)
            .map_err(|_| WasmError::OutOfMemory {
                what: "tensor values",
                bytes: v.elements.saturating_mul(4),
            })?;
        for index in 0..v.blocks.len() {
            match self.block_values(name, step, index)? {
                BlockValues::Bytes(b) => out.extend(ops::widen(dtype, &b)?),
                BlockValues::F32(f) => out.extend(f),
            }
        }
        self.record_access(name, step, now)?;
        Ok(out)
    }

    fn read(&self, name: &str, step: u64) -> Result<(DType, Vec<u8>), WasmError> {
        let v = self.version(name, step)?;
        let dtype = v.dtype;
        let mut out = Vec::new();
        out.try_reserve_exact(v.elements * dtype.size())
            .map_err(|_| WasmError::OutOfMemory {
                what: "tensor bytes",
                bytes: v.elements * dtype.size(),
            })?;
        for index in 0..v.blocks.len() {
            match self.block_values(name, step, index)? {
                BlockValues::Bytes(b) => out.extend_from_slice(&b),
                BlockValues::F32(f) => out.extend(ops::narrow(dtype, &f)?),
            }
        }
        Ok((dtype, out))
    }

    fn block_values(&self, name: &str, step: u64, index: usize) -> Result<BlockValues, WasmError> {
        let v = self.version(name, step)?;
        let block = v
            .blocks
            .get(index)
            .ok_or_else(|| invalid("block index", format!("{index} out of range")))?;
        let values = self.block_len(v, index);
        match &block.data {
            Data::Lossless { .. } => Ok(BlockValues::Bytes(self.decode_exact(name, step, index)?)),
            Data::Quantized(seg) => {
                let f = dequantize_block(seg, values).map_err(|source| WasmError::Block {
                    name: name.to_owned(),
                    step,
                    block: index,
                    source,
                })?;
                Ok(BlockValues::F32(f))
            }
            Data::Absent => Ok(BlockValues::F32(try_filled(values, "zero block")?)),
        }
    }

    /// Values in block `index` of `v`.
    fn block_len(&self, v: &Version, index: usize) -> usize {
        let per = self.opts.block_values as usize;
        per.min(v.elements.saturating_sub(index * per))
    }

    /// Records a read of a version at `now` without decoding it.
    ///
    /// # Errors
    /// [`WasmError::UnknownTensor`], [`WasmError::UnknownVersion`].
    pub fn record_access(&mut self, name: &str, step: u64, now: Tick) -> Result<(), WasmError> {
        let ids: Vec<BlockId> = self
            .version(name, step)?
            .blocks
            .iter()
            .map(|b| b.id)
            .collect();
        for id in ids {
            self.state.record_access(id, now)?;
        }
        Ok(())
    }

    /// One maintenance pass at `now`: plans within `budget`, re-encodes the moved blocks,
    /// applies the plan. If a re-encode fails, the moves before it are applied and the
    /// error is returned.
    ///
    /// # Errors
    /// [`WasmError::Block`] for a block that fails to decode, or a tier error.
    pub fn maintain(&mut self, now: Tick, budget: Budget) -> Result<MaintainReport, WasmError> {
        let plan = self.state.plan(now, budget);
        let mut reencoded = Vec::with_capacity(plan.moves.len());
        let mut failure = None;
        for mv in &plan.moves {
            match self.reencode(mv.block, mv.to) {
                Ok(data) => reencoded.push(data),
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let done = Plan {
            moves: plan.moves[..reencoded.len()].to_vec(),
            ..plan.clone()
        };
        self.state.apply(&done)?;
        let mut report = MaintainReport::from_plan(&plan, &done.moves, &self.state);
        for (mv, data) in done.moves.iter().zip(reencoded) {
            if let Data::Quantized(seg) = &data {
                report.bytes_written += seg.len() as u64;
            }
            if let Some(block) = self.block_mut(mv.block) {
                block.data = data;
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    /// The data block `id` holds once moved to `to`.
    fn reencode(&self, id: BlockId, to: Tier) -> Result<Data, WasmError> {
        let loc = self.locations.get(&id).ok_or(WasmError::Tier(
            strata_tiering::TierError::UnknownBlock { block: id },
        ))?;
        let v = self.version(&loc.name, loc.step)?;
        let Some(bits) = to.bits() else {
            return Ok(Data::Absent);
        };
        let values = match self.block_values(&loc.name, loc.step, loc.index)? {
            BlockValues::F32(f) => f,
            BlockValues::Bytes(b) => ops::widen(v.dtype, &b)?,
        };
        let seg = ops::quantize(
            &values,
            u32::from(bits),
            v.dtype,
            Some(self.opts.tiers.group_size),
        )?;
        Ok(Data::Quantized(seg))
    }

    fn block_mut(&mut self, id: BlockId) -> Option<&mut Block> {
        let loc = self.locations.get(&id)?;
        self.tensors
            .get_mut(&loc.name)?
            .get_mut(&loc.step)?
            .blocks
            .get_mut(loc.index)
    }

    /// Bytes of the segments held, per tier (indexed by [`Tier::index`]): what the store
    /// really holds. Warm figures equal the policy's ([`TieredStore::model_bytes`]), which
    /// `warm_byte_cap` limits.
    pub fn bytes_by_tier(&self) -> [u64; 6] {
        let mut out = [0u64; 6];
        for version in self.tensors.values().flat_map(|v| v.values()) {
            for b in &version.blocks {
                let tier = self.state.tier(b.id).unwrap_or(Tier::Exact);
                let len = match &b.data {
                    Data::Lossless { segment, .. } | Data::Quantized(segment) => segment.len(),
                    Data::Absent => 0,
                };
                out[tier.index()] += len as u64;
            }
        }
        out
    }

    /// Bytes per tier as the policy counts them ([`strata_tiering::SizeModel`]).
    pub fn model_bytes(&self) -> TierBytes {
        self.state.bytes_by_tier()
    }

    /// Blocks of a version per tier (indexed by [`Tier::index`]).
    ///
    /// # Errors
    /// [`WasmError::UnknownTensor`], [`WasmError::UnknownVersion`].
    pub fn version_tiers(&self, name: &str, step: u64) -> Result<[u32; 6], WasmError> {
        let mut out = [0u32; 6];
        for b in &self.version(name, step)?.blocks {
            out[self.state.tier(b.id)?.index()] += 1;
        }
        Ok(out)
    }

    /// The dtype and element count of a version.
    ///
    /// # Errors
    /// [`WasmError::UnknownTensor`], [`WasmError::UnknownVersion`].
    pub fn version_info(&self, name: &str, step: u64) -> Result<(DType, usize), WasmError> {
        let v = self.version(name, step)?;
        Ok((v.dtype, v.elements))
    }

    /// Steps of `name`'s versions, ascending (empty for an unknown tensor).
    pub fn steps(&self, name: &str) -> Vec<u64> {
        self.tensors
            .get(name)
            .map(|v| v.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Names of the tensors, sorted.
    pub fn names(&self) -> Vec<String> {
        self.tensors.keys().cloned().collect()
    }

    /// The worst-case error bound of a version's blocks relative to their group maxima
    /// (0 for exact data, infinite for Tier 0), from the policy's precision bookkeeping.
    ///
    /// # Errors
    /// [`WasmError::UnknownTensor`], [`WasmError::UnknownVersion`].
    pub fn error_bound(&self, name: &str, step: u64) -> Result<f64, WasmError> {
        let mut worst = 0f64;
        for b in &self.version(name, step)?.blocks {
            worst = worst.max(self.state.error_bound_rel(b.id)?);
        }
        Ok(worst)
    }
}

/// A block's decoded contents.
enum BlockValues {
    /// Bytes of the dtype (lossless).
    Bytes(Vec<u8>),
    /// Dequantized or zero values.
    F32(Vec<f32>),
}

fn dequantize_block(
    segment: &[u8],
    values: usize,
) -> Result<Vec<f32>, strata_codec::segment::SegmentError> {
    let seg = Segment::parse(segment)?;
    // The store wrote this segment for `values` values: dequantize_into checks it.
    let mut out = vec![0f32; values];
    seg.dequantize_into(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_tiering::{MoveReason, HOUR, MINUTE};

    fn weights(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }

    fn store(cap: u64) -> TieredStore {
        let mut opts = StoreOptions {
            block_values: 1024,
            ..StoreOptions::default()
        };
        opts.tiers.warm_byte_cap = cap;
        TieredStore::new(opts).unwrap()
    }

    #[test]
    fn exact_versions_are_bit_exact_through_delta_chains() {
        let mut st = store(1 << 20);
        let mut versions = Vec::new();
        let mut w = weights(3000, 1);
        for step in 0..20u64 {
            for (i, x) in w.iter_mut().enumerate() {
                if i % 7 == step as usize % 7 {
                    *x += 1e-3;
                }
            }
            let bytes = ops::narrow(DType::BF16, &w).unwrap();
            st.put("w", step * 10, DType::BF16, &bytes, WritePolicy::Exact, 0)
                .unwrap();
            versions.push(bytes);
        }
        for (k, bytes) in versions.iter().enumerate() {
            let (dt, back) = st.get("w", k as u64 * 10, MINUTE).unwrap();
            assert_eq!(dt, DType::BF16);
            assert_eq!(&back, bytes, "step {}", k * 10);
        }
        // Chains stay within max_chain, by the shared rule.
        assert_chains_obey_the_rule(&st, "w");
        assert_eq!(st.steps("w").len(), 20);
        assert_eq!(st.version_tiers("w", 0).unwrap()[Tier::Exact.index()], 3);
        assert_eq!(st.error_bound("w", 0).unwrap(), 0.0);
    }

    /// Checks every block of every exact version of `name` against the delta-base rule:
    /// its base and link are what [`DeltaRule::choose`] gives for its predecessor (an
    /// anchor may have become a keyframe, when it was no smaller), and its depth is the
    /// length of the chain a read decodes.
    fn assert_chains_obey_the_rule(st: &TieredStore, name: &str) {
        let rule = st.options().delta_rule();
        let steps = st.steps(name);
        for (k, &step) in steps.iter().enumerate() {
            let v = st.version(name, step).unwrap();
            for (index, b) in v.blocks.iter().enumerate() {
                let Data::Lossless { base, .. } = &b.data else {
                    panic!("exact block {step}/{index} is not lossless");
                };
                // The length of the chain a read decodes.
                let mut depth = 1u8;
                let mut at = *base;
                while let Some(s) = at {
                    depth += 1;
                    at = match &st.version(name, s).unwrap().blocks[index].data {
                        Data::Lossless { base, .. } => *base,
                        _ => panic!("a base is not lossless"),
                    };
                }
                assert_eq!(b.link.depth, depth, "{step}/{index}");
                assert!(depth <= rule.max_chain.max(1), "{step}/{index}");
                assert_eq!(b.link.keyframe, base.is_none());
                let Some(&pstep) = k.checked_sub(1).and_then(|p| steps.get(p)) else {
                    assert_eq!(b.link, Link::KEYFRAME);
                    continue;
                };
                let pred = st.version(name, pstep).unwrap().blocks[index].link;
                let root = rule
                    .root_needed(pred)
                    .and_then(|kind| st.root_block(name, pstep, index, kind).unwrap());
                match rule.choose(pred, root.map(|r| r.link)) {
                    Base::Predecessor { depth, run } => {
                        assert_eq!((*base, b.link), (Some(pstep), Link::delta(depth, run)));
                    }
                    Base::Root { depth, run, anchor } => {
                        let rstep = root.map(|r| r.step);
                        if *base == rstep {
                            assert_eq!(b.link, Link::delta(depth, run), "{step}/{index}");
                        } else {
                            assert!(anchor, "{step}/{index}: only an anchor is dropped");
                            assert_eq!((*base, b.link), (None, Link::KEYFRAME));
                        }
                    }
                    Base::Keyframe => assert_eq!((*base, b.link), (None, Link::KEYFRAME)),
                }
            }
        }
    }

    /// The links of block 0 of each version of `name`: (base step, depth, run).
    fn links(st: &TieredStore, name: &str) -> Vec<(Option<u64>, u8, u8)> {
        st.steps(name)
            .into_iter()
            .map(|s| {
                let b = &st.version(name, s).unwrap().blocks[0];
                let Data::Lossless { base, .. } = &b.data else {
                    panic!("not lossless");
                };
                (*base, b.link.depth, b.link.run)
            })
            .collect()
    }

    /// Writes `versions` as exact f32 versions at steps 0, 1, ... and checks they read back
    /// bit-exact and obey the rule.
    fn write_series(opts: StoreOptions, versions: &[Vec<f32>]) -> TieredStore {
        let mut st = TieredStore::new(opts).unwrap();
        for (k, v) in versions.iter().enumerate() {
            st.put(
                "s",
                k as u64,
                DType::F32,
                &ops::f32_bytes(v),
                WritePolicy::Exact,
                0,
            )
            .unwrap();
        }
        for (k, v) in versions.iter().enumerate() {
            assert_eq!(st.get("s", k as u64, 0).unwrap().1, ops::f32_bytes(v));
        }
        assert_chains_obey_the_rule(&st, "s");
        st
    }

    /// A slowly drifting tensor: one value in 100 moves per version.
    fn drifting(versions: usize) -> Vec<Vec<f32>> {
        let mut w = weights(1024, 11);
        (0..versions)
            .map(|k| {
                for x in w.iter_mut().skip(k % 100).step_by(100) {
                    *x += 0.25;
                }
                w.clone()
            })
            .collect()
    }

    #[test]
    fn the_default_chain_anchors_on_the_keyframe() {
        assert_eq!(StoreOptions::default().max_chain, DEFAULT_MAX_CHAIN);
        assert_eq!(StoreOptions::default().delta_rule(), DeltaRule::default());
        let opts = StoreOptions {
            block_values: 1024,
            ..StoreOptions::default()
        };
        let st = write_series(opts, &drifting(14));
        // Depth 1..=6, then an anchor on step 0 at depth 2, and the chain goes on from it.
        let mut want = vec![(None, 1, 1)];
        for k in 1..14u8 {
            let depth = if k < 6 { k + 1 } else { (k - 6) % 5 + 2 };
            let base = if depth == 2 && k >= 6 {
                0
            } else {
                u64::from(k) - 1
            };
            want.push((Some(base), depth, k + 1));
        }
        assert_eq!(links(&st, "s"), want);
    }

    #[test]
    fn an_anchor_no_smaller_than_a_keyframe_is_a_keyframe() {
        // A constant keyframe (a few bytes), then noise: the anchor on it is far larger.
        let mut versions = vec![vec![0.5f32; 1024]];
        versions.extend((1..9).map(|k| weights(1024, k)));
        let opts = StoreOptions {
            block_values: 1024,
            ..StoreOptions::default()
        };
        let st = write_series(opts, &versions);
        let l = links(&st, "s");
        assert_eq!(l[5], (Some(4), 6, 6));
        assert_eq!(l[6], (None, 1, 1)); // not an anchor: a new lineage
        assert_eq!(l[7], (Some(6), 2, 2));
    }

    #[test]
    fn star_deltas_on_the_keyframe_within_the_run() {
        let opts = StoreOptions {
            block_values: 1024,
            max_chain: 4,
            delta_policy: DeltaPolicy::Star,
            ..StoreOptions::default()
        };
        let st = write_series(opts, &drifting(7));
        assert_eq!(
            links(&st, "s"),
            vec![
                (None, 1, 1),
                (Some(0), 2, 2),
                (Some(0), 2, 3),
                (Some(0), 2, 4),
                (None, 1, 1),
                (Some(4), 2, 2),
                (Some(4), 2, 3),
            ]
        );
    }

    #[test]
    fn a_bound_of_one_writes_keyframes() {
        let opts = StoreOptions {
            block_values: 1024,
            max_chain: 1,
            ..StoreOptions::default()
        };
        let st = write_series(opts, &drifting(4));
        assert!(links(&st, "s").iter().all(|&l| l == (None, 1, 1)));
    }

    #[test]
    fn bad_calls_are_errors_and_change_nothing() {
        let mut st = store(1 << 20);
        let b = ops::f32_bytes(&[1.0, 2.0]);
        st.put("a", 1, DType::F32, &b, WritePolicy::Exact, 0)
            .unwrap();
        assert!(matches!(
            st.put("a", 1, DType::F32, &b, WritePolicy::Exact, 0),
            Err(WasmError::DuplicateVersion { .. })
        ));
        assert!(st
            .put("a", 2, DType::F32, &b[..5], WritePolicy::Exact, 0)
            .is_err());
        assert!(st
            .put("a", 2, DType::F32, &[], WritePolicy::Exact, 0)
            .is_err());
        assert!(matches!(
            st.put("i", 1, DType::I32, &b, WritePolicy::Tiered(Tier::Hot8), 0),
            Err(WasmError::NotFloat { .. })
        ));
        assert!(matches!(
            st.get("b", 1, 0),
            Err(WasmError::UnknownTensor { .. })
        ));
        assert!(matches!(
            st.get("a", 2, 0),
            Err(WasmError::UnknownVersion { .. })
        ));
        assert!(st.get_f32("a", 1, 0).is_ok());
        assert_eq!(st.names(), vec!["a".to_owned()]);
        assert!(WritePolicy::parse("hot9").is_err());
        assert!(TieredStore::new(StoreOptions {
            block_values: 0,
            ..StoreOptions::default()
        })
        .is_err());
    }

    #[test]
    fn non_finite_blocks_stay_lossless() {
        let mut st = store(1 << 20);
        let mut v = weights(2048, 3);
        v[5] = f32::INFINITY;
        let bytes = ops::f32_bytes(&v);
        st.put(
            "x",
            0,
            DType::F32,
            &bytes,
            WritePolicy::Tiered(Tier::Hot8),
            0,
        )
        .unwrap();
        let tiers = st.version_tiers("x", 0).unwrap();
        assert_eq!(tiers[Tier::Exact.index()], 1);
        assert_eq!(tiers[Tier::Hot8.index()], 1);
        let back = st.get_f32("x", 0, 0).unwrap();
        assert_eq!(back[5], f32::INFINITY);
        assert_eq!(&back[..1024], &v[..1024]);
    }

    #[test]
    fn tiers_follow_reads_and_warm_stays_under_the_cap() {
        let n = 4096;
        let per_block_warm7 = Tier::Warm7.block_bytes(1024, 64);
        // Room for 6 of the 16 blocks at 7 bits.
        let cap = 6 * per_block_warm7;
        let mut st = store(cap);
        let originals: Vec<Vec<f32>> = (0..4).map(|t| weights(n, t)).collect();
        for (t, w) in originals.iter().enumerate() {
            let bytes = ops::narrow(DType::BF16, w).unwrap();
            st.put(
                &format!("t{t}"),
                0,
                DType::BF16,
                &bytes,
                WritePolicy::Tiered(Tier::Hot8),
                0,
            )
            .unwrap();
        }
        let mut now = 0;
        let mut moves = 0;
        while now < 6 * HOUR {
            now += MINUTE;
            st.record_access("t0", 0, now).unwrap(); // hot: read every minute
            if now % (6 * MINUTE) == 0 {
                st.record_access("t1", 0, now).unwrap(); // warm: 10 reads an hour
            }
            if now % (5 * MINUTE) == 0 {
                let r = st.maintain(now, Budget::UNLIMITED).unwrap();
                moves += r.moves;
                let by_reason = [
                    MoveReason::Promote,
                    MoveReason::Demote,
                    MoveReason::CapSqueeze,
                    MoveReason::CapEvict,
                    MoveReason::CapRestore,
                    MoveReason::Absent,
                ]
                .map(|m| r.count(m));
                assert_eq!(by_reason.iter().sum::<usize>(), r.moves);
                assert_eq!(r.warm_bytes_after, st.model_bytes().warm());
                assert_eq!((r.converted, r.stats_saved), (0, 0));
                let actual = st.bytes_by_tier();
                let warm = actual[Tier::Warm7.index()] + actual[Tier::Warm5.index()];
                assert_eq!(warm, st.model_bytes().warm());
                assert!(warm <= cap, "warm {warm} over cap {cap} at {now}");
            }
        }
        assert!(moves > 0);
        let tiers = |name: &str| st.version_tiers(name, 0).unwrap();
        assert_eq!(tiers("t0")[Tier::Hot8.index()], 4);
        assert_eq!(tiers("t3")[Tier::Cold3.index()], 4);
        assert!(tiers("t1")[Tier::Warm7.index()] + tiers("t1")[Tier::Warm5.index()] > 0);
        // Every read stays within the bound the policy reports.
        for (t, w) in originals.iter().enumerate() {
            let name = format!("t{t}");
            let bound = st.error_bound(&name, 0).unwrap();
            let back = st.get_f32(&name, 0, now).unwrap();
            let bf: Vec<f32> =
                ops::widen(DType::BF16, &ops::narrow(DType::BF16, w).unwrap()).unwrap();
            for (g, h) in bf.chunks(64).zip(back.chunks(64)) {
                let m = g.iter().fold(0f32, |m, x| m.max(x.abs()));
                for (x, y) in g.iter().zip(h) {
                    assert!(
                        f64::from((x - y).abs()) <= f64::from(m) * bound * 1.001,
                        "{name}"
                    );
                }
            }
            let (_, bytes) = st.get(&name, 0, now).unwrap();
            assert_eq!(bytes.len(), n * 2);
        }
        // A lower cap squeezes at the next pass.
        st.set_warm_byte_cap(per_block_warm7).unwrap();
        let r = st.maintain(now + MINUTE, Budget::UNLIMITED).unwrap();
        assert!(st.model_bytes().warm() <= per_block_warm7, "{r:?}");
    }

    #[test]
    fn zero_fill_tier0_reads_zeros() {
        let mut opts = StoreOptions {
            block_values: 256,
            ..StoreOptions::default()
        };
        opts.tiers.allow_zero_fill = true;
        let mut st = TieredStore::new(opts).unwrap();
        let w = weights(256, 9);
        st.put(
            "z",
            0,
            DType::F32,
            &ops::f32_bytes(&w),
            WritePolicy::Tiered(Tier::Cold3),
            0,
        )
        .unwrap();
        let r = st.maintain(2 * 24 * HOUR, Budget::UNLIMITED).unwrap();
        assert_eq!(r.absent, 1);
        assert_eq!(st.bytes_by_tier()[Tier::Absent.index()], 0);
        assert!(st
            .get_f32("z", 0, 3 * 24 * HOUR)
            .unwrap()
            .iter()
            .all(|&x| x == 0.0));
        assert!(st.error_bound("z", 0).unwrap().is_infinite());
    }
}
