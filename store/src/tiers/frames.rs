//! Frame streams: [`Store::append_frame`] for tensors an agent writes every tick.
//!
//! Each frame is a version (shape `[n]`, f32) whose one block is frame `i` of a multi-frame
//! segment (the codec's `frames`): consecutive frames share per-group scales while every
//! group's largest magnitude stays within the drift tolerance of the epoch's first frame,
//! both ways. A frame outside it, or a full segment, starts a new epoch (segment).
//!
//! While an epoch is open, each append writes the epoch's segment with the new frame and
//! points the epoch's earlier frames at it, in one transaction (the old copy is released),
//! so a crash never leaves a frame without its segment and one frame always decodes on its
//! own. The cost is rewriting the open segment per append: `max_frames` (default 16) bounds
//! it. The encoder's state lives in memory and is resumed from the latest frame's segment
//! after a reopen.

use std::sync::Arc;

use strata_codec::frames::{FrameParams, FramePush, FrameSegment, FrameStreamEncoder};
use strata_codec::DType;
use strata_tiering::{Policy, Precision, Tier};

use crate::engine::{address_of, check_name, put_row, ReadTxn, View};
use crate::error::{InvalidInput, Result, StoreError, TierFailure};
use crate::record::{BlockRecord, Form, Rebuild, TierRow, VersionRecord};
use crate::store::{contain, Store};
use crate::tiers::runtime::{spec_of, tiering_reconstruct, Stream};

/// What [`Store::append_frame`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameAppend {
    /// The frame's index in its segment.
    pub frame: u32,
    /// Whether it started a new scale epoch (segment).
    pub new_epoch: bool,
    /// Bytes of the epoch's segment after the append.
    pub segment_bytes: u64,
}

/// The tier frames of a tensor with `policy` are stored at.
fn frame_tier(policy: Policy) -> Tier {
    match policy {
        Policy::Tiered { start } => start,
        Policy::Pinned(t) if t.bits().is_some() => t,
        _ => Tier::Hot8,
    }
}

impl Store {
    /// Appends a frame at `step` (after the tensor's latest version) to the frame stream
    /// `name`: an f32 tensor of shape `[values.len()]` stored quantized at the tensor's
    /// tier (8 bits under an exact policy, pinned there). Reads return it with its bound,
    /// `(1 + drift)^2 / (2 qmax)` of its groups' largest magnitudes.
    ///
    /// ```no_run
    /// use strata_store::Store;
    /// let store = Store::open("agent.strata")?;
    /// for tick in 0..100u64 {
    ///     let embedding = vec![0.01 * tick as f32; 384];
    ///     store.append_frame("agent.state", tick, &embedding)?;
    /// }
    /// let t = store.get("agent.state", 42)?; // one frame, decoded on its own
    /// # Ok::<(), strata_store::StoreError>(())
    /// ```
    ///
    /// # Errors
    /// [`crate::InvalidInput::StepExists`], [`crate::InvalidInput::StepNotAfter`], [`crate::TierFailure::Frame`] for
    /// NaN or infinite values or an empty frame, [`crate::InvalidInput::Name`].
    pub fn append_frame(&self, name: &str, step: u64, values: &[f32]) -> Result<FrameAppend> {
        contain(&self.path, "appending a frame", || {
            check_name(name)?;
            let _writer = self.writer.lock();
            let frame_err = |source| {
                StoreError::Tier(TierFailure::Frame {
                    tensor: name.to_string(),
                    step,
                    address: 0,
                    source: Box::new(source),
                })
            };
            let policy = self.rules.read().resolve(name);
            let tier = frame_tier(policy.policy);
            let bits = tier
                .quant_bits()
                .unwrap_or(strata_codec::quant::QuantBits::B8);
            let fo = self.opts.tiering.frames;
            let params = FrameParams::new(bits)
                .with_group_size(self.opts.tiering.config.group_size)
                .with_drift(fo.drift)
                .with_max_frames(fo.max_frames);

            let taken = self.tiers.lock().streams.remove(name);
            let mut stream = {
                let r = self.read()?;
                let latest = r.at_or_before(name, u64::MAX)?;
                if let Some((latest_step, _)) = &latest {
                    if *latest_step == step {
                        return Err(StoreError::Invalid(InvalidInput::StepExists {
                            tensor: name.to_string(),
                            step,
                        }));
                    }
                    if *latest_step > step {
                        return Err(StoreError::Invalid(InvalidInput::StepNotAfter {
                            tensor: name.to_string(),
                            step,
                            latest: *latest_step,
                        }));
                    }
                }
                match taken {
                    Some(s)
                        if s.encoder.frame_len() == values.len()
                            && s.encoder.params() == &params =>
                    {
                        s
                    }
                    _ => self.resume_stream(&r, name, latest, values.len(), params)?,
                }
            };
            let push = stream.encoder.push(values).map_err(frame_err)?;
            let (frame, new_epoch) = match push {
                FramePush::Reused { frame } => (frame, false),
                FramePush::NewEpoch { .. } => {
                    stream.steps.clear();
                    (0, true)
                }
            };
            let segment = stream
                .encoder
                .snapshot()
                .ok_or_else(|| frame_err(strata_codec::frames::FrameError::EmptyFrame))?;
            let address = address_of(&segment);
            let old = stream.address;
            let n = values.len() as u64;
            let precision = Precision::Lossy {
                min_bits: bits.bits(),
                bound_rel: (1.0 + f64::from(fo.drift)).powi(2) * bits.relative_error_bound(),
            };
            let row_policy = match policy.policy {
                Policy::Tiered { start } if start == tier => Policy::Tiered { start },
                _ => Policy::Pinned(tier),
            };
            let reconstruct = tiering_reconstruct(&policy.reconstruct);
            let steps = stream.steps.clone();
            self.write(|wt| {
                let record = |index: u32| {
                    BlockRecord::standalone(address, segment.len(), Form::Frame { index })
                };
                // Earlier frames of the open epoch move to the new copy of the segment.
                for &s in &steps {
                    let Some(mut rec) = wt.version(name, s)? else {
                        continue;
                    };
                    let Some(Form::Frame { index }) = rec.blocks.first().map(|b| b.form) else {
                        continue;
                    };
                    if rec.blocks[0].address != old {
                        continue;
                    }
                    wt.add_ref(name, s, 0, address, Some(&segment))?;
                    wt.release(name, s, 0, old)?;
                    rec.blocks[0] = record(index);
                    wt.put_version(name, s, &rec)?;
                }
                let rec = VersionRecord {
                    dtype: DType::F32,
                    shape: vec![n],
                    elements: n,
                    block_elems: n,
                    blocks: vec![record(frame)],
                    aged: None,
                    inline: None,
                    content: None,
                };
                wt.add_ref(name, step, 0, address, Some(&segment))?;
                wt.put_version(name, step, &rec)?;
                let id = wt.take_block_ids(1)?;
                let row = TierRow {
                    id,
                    tier,
                    policy: row_policy,
                    since: self.opts.tiering.clock.now(),
                    precision,
                    residual: None,
                    rebuild: Rebuild::None,
                    stats: None,
                };
                put_row(wt, name, step, 0, &row)?;
                let spec = spec_of(&row, n as u32, reconstruct);
                wt.tier_changes
                    .registered
                    .push(((Arc::from(name), step), 0, spec));
                Ok(())
            })?;
            stream.address = address;
            stream.steps.push(step);
            self.tiers.lock().streams.insert(Arc::from(name), stream);
            Ok(FrameAppend {
                frame,
                new_epoch,
                segment_bytes: segment.len() as u64,
            })
        })
    }

    /// The stream of `name` as stored: the latest frame's segment continues if it is open
    /// (same frame length and parameters), else a new stream starts.
    fn resume_stream(
        &self,
        r: &ReadTxn,
        name: &str,
        latest: Option<(u64, VersionRecord)>,
        len: usize,
        params: FrameParams,
    ) -> Result<Stream> {
        let fresh = || -> Result<Stream> {
            Ok(Stream {
                encoder: FrameStreamEncoder::new(DType::F32, len, params).map_err(|source| {
                    StoreError::Tier(TierFailure::Frame {
                        tensor: name.to_string(),
                        step: 0,
                        address: 0,
                        source: Box::new(source),
                    })
                })?,
                address: 0,
                steps: Vec::new(),
            })
        };
        let Some((step, rec)) = latest else {
            return fresh();
        };
        let block = match rec.blocks.as_slice() {
            [b] if matches!(b.form, Form::Frame { .. }) && rec.elements == len as u64 => *b,
            _ => return fresh(),
        };
        let bytes = r.fetch_segment(name, step, 0, block.address)?;
        let frame_err = |source| {
            StoreError::Tier(TierFailure::Frame {
                tensor: name.to_string(),
                step,
                address: block.address,
                source: Box::new(source),
            })
        };
        let seg = FrameSegment::parse(&bytes).map_err(frame_err)?;
        if seg.bits() != params.bits
            || seg.header().group_size != params.group_size
            || seg.drift() != params.drift
        {
            return fresh();
        }
        let encoder = FrameStreamEncoder::resume(&bytes, params.max_frames).map_err(frame_err)?;
        // The epoch's frames: the latest versions that point at this segment.
        let mut steps = Vec::new();
        for (s, rec) in r.versions_of(name)?.into_iter().rev() {
            match rec.blocks.first() {
                Some(b) if b.address == block.address => steps.push(s),
                _ => break,
            }
        }
        steps.reverse();
        Ok(Stream {
            encoder,
            address: block.address,
            steps,
        })
    }
}
