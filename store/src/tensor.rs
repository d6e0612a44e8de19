//! The values callers put in and get out.

use strata_codec::DType;

use crate::tiers::Fidelity;

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
}

/// One version of a tensor, as [`crate::Store::versions`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
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
