//! The values callers put in and get out, and what a read is worth ([`Fidelity`]).

use strata_codec::convert::to_f64;
use strata_codec::DType;

/// A borrowed tensor to write: element type, shape and little-endian element bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorRef<'a> {
    /// Element type.
    pub dtype: DType,
    /// Dimensions; the element count is their product (1 for an empty shape).
    pub shape: &'a [u64],
    /// `product(shape) * dtype.size()` bytes, elements in row-major order, little-endian.
    pub bytes: &'a [u8],
}

/// An owned tensor read from the store.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Element bytes, row-major, little-endian.
    pub data: Vec<u8>,
    /// What the data is worth: exact for lossless versions, a bound for quantized ones,
    /// rebuilt or zeros for Tier 0 (the worst block's).
    pub fidelity: Fidelity,
}

impl Tensor {
    /// A borrowed view, e.g. to write this tensor back.
    pub fn as_ref(&self) -> TensorRef<'_> {
        TensorRef {
            dtype: self.dtype,
            shape: &self.shape,
            bytes: &self.data,
        }
    }

    /// Number of elements.
    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// Elements `elems` of a tensor version, from [`crate::Store::get_range`].
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSlice {
    /// Element type.
    pub dtype: DType,
    /// Shape of the whole tensor.
    pub shape: Vec<u64>,
    /// The element range (flat, row-major indices).
    pub elems: std::ops::Range<u64>,
    /// Bytes of those elements.
    pub data: Vec<u8>,
    /// What the data is worth (the worst block read).
    pub fidelity: Fidelity,
}

/// How one block of a version is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockEncoding {
    /// The block's segment is an XOR delta against the same block of version `base`
    /// (`None`: a keyframe).
    pub base: Option<u64>,
    /// The block is identical to its base block and only refers to an existing segment.
    pub reference: bool,
    /// Segments decoded to read the block.
    pub depth: u8,
    /// Bytes of the segment (0 for a reference, whose segment another version holds).
    pub stored_bytes: u64,
    /// The block's tier: `Exact` for lossless blocks.
    pub tier: strata_tiering::Tier,
    /// The block's bytes are held in its version record, not in a segment: a tensor of at
    /// most 32 bytes (a step counter, a scalar), always exact (ADR 0029).
    pub inline: bool,
}

/// One version of a tensor, as [`crate::Store::versions`] lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionInfo {
    /// Step.
    pub step: u64,
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Raw bytes of the tensor.
    pub raw_bytes: u64,
    /// Bytes this version added: its record and the segments of its non-reference blocks
    /// (a segment that is byte-identical to one of another tensor counts in both).
    pub stored_bytes: u64,
    /// One entry per block.
    pub encodings: Vec<BlockEncoding>,
    /// For an aged version ([`crate::Store::age`]), its measured relative error; `None` for
    /// an exact or tiered one.
    pub aged: Option<f64>,
}

/// A checkpoint read back whole.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Step.
    pub step: u64,
    /// Every tensor, in the order they were saved.
    pub tensors: Vec<(String, Tensor)>,
    /// The metadata text saved with it.
    pub metadata: String,
}

/// A checkpoint's record without its data, from [`crate::Store::checkpoint_info`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// Step.
    pub step: u64,
    /// Names of its tensors, in the order they were saved.
    pub tensors: Vec<String>,
    /// The metadata text saved with it.
    pub metadata: String,
}

/// What a read returned, for the worst block of the tensor or range read.
///
/// Ordered from best to worst: `Exact < Aged < Bounded < Reconstructed < Zeros`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fidelity {
    /// Bit-exact data.
    Exact,
    /// An aged checkpoint version ([`crate::Store::age`]): lossy, with the error measured
    /// against the exact data when it was aged.
    Aged {
        /// The largest relative Frobenius error `‖read − written‖ / ‖written‖` of any block
        /// of the version ([`crate::Options::block_bytes`]); the tensor's own is at most this.
        rel_error: f64,
    },
    /// Quantized data: every element is within `max_rel_error x max_abs(group)` of what
    /// was written, the group being the element's quantization group (64 values by
    /// default) in the data as written.
    Bounded {
        /// Fewest bits per value any encoding of the data used since it was written.
        bits: u8,
        /// The bound, relative to the group's largest magnitude; it includes the rounding
        /// to the tensor's dtype (bf16, f16) on the way out.
        max_rel_error: f64,
    },
    /// A Tier 0 block rebuilt through its reconstruct policy, through `depth` tensors.
    /// No bound is claimed.
    Reconstructed {
        /// Blocks rebuilt in the chain (1 when the sources were held).
        depth: u8,
    },
    /// A Tier 0 block with no reconstruct policy: the data returned is zeros.
    Zeros,
}

impl Fidelity {
    fn rank(&self) -> u8 {
        match self {
            Fidelity::Exact => 0,
            Fidelity::Aged { .. } => 1,
            Fidelity::Bounded { .. } => 2,
            Fidelity::Reconstructed { .. } => 3,
            Fidelity::Zeros => 4,
        }
    }

    /// The worse of two (for two bounds: fewer bits, larger bound; for two
    /// reconstructions: the deeper).
    pub fn worst(self, other: Fidelity) -> Fidelity {
        match (self, other) {
            (
                Fidelity::Bounded {
                    bits: a,
                    max_rel_error: x,
                },
                Fidelity::Bounded {
                    bits: b,
                    max_rel_error: y,
                },
            ) => Fidelity::Bounded {
                bits: a.min(b),
                max_rel_error: x.max(y),
            },
            (Fidelity::Aged { rel_error: x }, Fidelity::Aged { rel_error: y }) => Fidelity::Aged {
                rel_error: x.max(y),
            },
            (Fidelity::Reconstructed { depth: a }, Fidelity::Reconstructed { depth: b }) => {
                Fidelity::Reconstructed { depth: a.max(b) }
            }
            (a, b) => {
                if b.rank() > a.rank() {
                    b
                } else {
                    a
                }
            }
        }
    }

    /// Whether the data is bit-exact.
    pub fn is_exact(&self) -> bool {
        matches!(self, Fidelity::Exact)
    }
}

impl Tensor {
    /// The values as `f64` ([`strata_codec::convert::to_f64`]: exact for every dtype but
    /// 64-bit integers above 2^53; bool is 0 or 1; every value of a packed sub-byte group).
    pub fn to_f64(&self) -> Vec<f64> {
        to_f64(self.dtype, &self.data)
    }
}

impl TensorSlice {
    /// The elements of the slice as `f64` (as [`Tensor::to_f64`]).
    pub fn to_f64(&self) -> Vec<f64> {
        to_f64(self.dtype, &self.data)
    }
}
