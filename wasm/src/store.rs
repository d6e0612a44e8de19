//! An in-memory tiered store: versions of named tensors cut into blocks, each block a codec
//! segment, with [`strata_tiering::TierState`] deciding where tiered blocks live.
//!
//! - **Exact versions** (`WritePolicy::Exact`) are stored losslessly. Each block is a
//!   keyframe or an XOR delta against the same block of the tensor's latest earlier exact
//!   version (same dtype and length), with at most `max_chain` segments decoded per read,
//!   as in strata-store (ADR 0006). They register as [`strata_tiering::Policy::Exact`] blocks and never
//!   move.
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

use strata_codec::lossless::LosslessOptions;
use strata_codec::segment::Segment;
use strata_codec::DType;
use strata_tiering::{
    BlockId, BlockSpec, Budget, MoveReason, Plan, Tick, Tier, TierBytes, TierConfig, TierState,
};

use crate::error::{invalid, WasmError};
use crate::ops::{self, try_filled, MAX_DECODED_BYTES};

/// Settings of a [`TieredStore`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoreOptions {
    /// Values per block (default 4096).
    pub block_values: u32,
    /// Most segments decoded to read one exact block (default 8).
    pub max_chain: u8,
    /// The tier policy's settings (`warm_byte_cap` among them).
    pub tiers: TierConfig,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            block_values: 4096,
            max_chain: 8,
            tiers: TierConfig::default(),
        }
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
    /// Segments decoded to read this block (1 for a keyframe or a quantized block).
    depth: u8,
    data: Data,
}

#[derive(Debug, Clone)]
struct Version {
    dtype: DType,
    elements: usize,
    policy: WritePolicy,
    blocks: Vec<Block>,
}

/// Where a block lives: tensor, step, index in the version.
#[derive(Debug, Clone)]
struct Location {
    name: String,
    step: u64,
    index: usize,
}

/// What a [`TieredStore::maintain`] pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MaintainReport {
    /// Blocks moved.
    pub moves: u32,
    /// Moves up because the score crossed an entry threshold.
    pub promoted: u32,
    /// Moves down because the score fell below an exit threshold.
    pub demoted: u32,
    /// 7 -> 5 bits under `warm_byte_cap` pressure.
    pub squeezed: u32,
    /// Warm -> cold under `warm_byte_cap` pressure.
    pub evicted: u32,
    /// 5 -> 7 bits below the low watermark.
    pub restored: u32,
    /// Cold -> Tier 0.
    pub absent: u32,
    /// Bytes of the re-encoded segments.
    pub bytes_reencoded: u64,
    /// Moves the policy wanted but left for a later pass.
    pub deferred: u32,
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
            let (data, depth, spec) = match policy {
                WritePolicy::Exact => {
                    let (data, depth) = self.encode_exact(name, base, index, dtype, chunk)?;
                    (data, depth, BlockSpec::exact(0, values))
                }
                WritePolicy::Tiered(start) => {
                    let f = ops::widen(dtype, chunk)?;
                    let bits = start.bits().map_or(8, u32::from);
                    match ops::quantize(&f, bits, dtype, Some(self.opts.tiers.group_size)) {
                        Ok(seg) => (Data::Quantized(seg), 1, BlockSpec::tiered(0, values, start)),
                        Err(WasmError::Segment(_)) if f.iter().any(|v| !v.is_finite()) => {
                            let seg = ops::encode(dtype, chunk, None, &LosslessOptions::default())?;
                            let data = Data::Lossless {
                                segment: seg,
                                base: None,
                            };
                            (data, 1, BlockSpec::exact(0, values))
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            encoded.push((data, depth, spec));
        }
        let mut blocks: Vec<Block> = Vec::with_capacity(encoded.len());
        for (index, (data, depth, mut spec)) in encoded.into_iter().enumerate() {
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
            blocks.push(Block { id, depth, data });
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

    /// Encodes block `index` of an exact version: a delta against the base version's block
    /// when the chain stays within `max_chain`, else a keyframe.
    fn encode_exact(
        &self,
        name: &str,
        base: Option<u64>,
        index: usize,
        dtype: DType,
        chunk: &[u8],
    ) -> Result<(Data, u8), WasmError> {
        let opts = LosslessOptions::default();
        if let Some(bstep) = base {
            if let Some(b) = self.version(name, bstep)?.blocks.get(index) {
                if b.depth < self.opts.max_chain {
                    let base_bytes = self.decode_exact(name, bstep, index)?;
                    let segment = ops::encode(dtype, chunk, Some(&base_bytes), &opts)?;
                    let data = Data::Lossless {
                        segment,
                        base: Some(bstep),
                    };
                    return Ok((data, b.depth + 1));
                }
            }
        }
        let segment = ops::encode(dtype, chunk, None, &opts)?;
        Ok((
            Data::Lossless {
                segment,
                base: None,
            },
            1,
        ))
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
        let mut report = MaintainReport {
            deferred: plan.deferred,
            ..MaintainReport::default()
        };
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
        for (mv, data) in done.moves.iter().zip(reencoded) {
            if let Data::Quantized(seg) = &data {
                report.bytes_reencoded += seg.len() as u64;
            }
            if let Some(block) = self.block_mut(mv.block) {
                block.data = data;
            }
            report.moves += 1;
            match mv.reason {
                MoveReason::Promote => report.promoted += 1,
                MoveReason::Demote => report.demoted += 1,
                MoveReason::CapSqueeze => report.squeezed += 1,
                MoveReason::CapEvict => report.evicted += 1,
                MoveReason::CapRestore => report.restored += 1,
                MoveReason::Absent => report.absent += 1,
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
    use strata_tiering::{HOUR, MINUTE};

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
        // Chains stay within max_chain: version 8 is a keyframe again.
        let v = st.version("w", 80).unwrap();
        assert!(v.blocks.iter().all(|b| b.depth == 1));
        assert!(st
            .version("w", 70)
            .unwrap()
            .blocks
            .iter()
            .all(|b| b.depth == 8));
        assert_eq!(st.steps("w").len(), 20);
        assert_eq!(st.version_tiers("w", 0).unwrap()[Tier::Exact.index()], 3);
        assert_eq!(st.error_bound("w", 0).unwrap(), 0.0);
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
