//! The one error type of the crate. JavaScript sees it as a thrown `Error` whose message is
//! the [`Display`](std::fmt::Display) text below.

use strata_codec::bits::BitsError;
use strata_codec::quant::QuantError;
use strata_codec::segment::SegmentError;
use strata_codec::DType;
use strata_tiering::TierError;
use thiserror::Error;

/// What went wrong in a call, and with which argument, tensor or block.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum WasmError {
    /// An argument is out of range or malformed; `what` names it.
    #[error("invalid {what}: {reason}")]
    InvalidArgument {
        /// The argument.
        what: &'static str,
        /// What it must be (and what it was).
        reason: String,
    },
    /// A dtype name that is not one of Strata's.
    #[error("unknown dtype {name:?}: expected one of f32, f16, bf16, f64, i8, u8, i16, u16, i32, u32, i64, u64, bool")]
    UnknownDType {
        /// The name given.
        name: String,
    },
    /// A call that needs a floating-point dtype got another one.
    #[error("{what} needs a float dtype (f32, f16, bf16, f64), got {dtype}")]
    NotFloat {
        /// The call.
        what: &'static str,
        /// The dtype given.
        dtype: DType,
    },
    /// A byte length that is not a whole number of elements.
    #[error("{what} is {len} bytes, not a whole number of {dtype} elements ({size} bytes each)")]
    RaggedLength {
        /// The argument.
        what: &'static str,
        /// Bytes given.
        len: usize,
        /// The dtype.
        dtype: DType,
        /// Bytes per element.
        size: usize,
    },
    /// A buffer could not be allocated (WebAssembly memory is limited to 4 GiB).
    #[error("cannot allocate {bytes} bytes for {what}")]
    OutOfMemory {
        /// What the buffer was for.
        what: &'static str,
        /// Bytes asked for.
        bytes: usize,
    },
    /// A decoded block would exceed [`crate::MAX_DECODED_BYTES`].
    #[error("segment decodes to {bytes} bytes, over the limit of {limit}")]
    TooLarge {
        /// Bytes the segment decodes to.
        bytes: u64,
        /// The limit.
        limit: usize,
    },
    /// No tensor of that name in the store.
    #[error("no tensor named {name:?}")]
    UnknownTensor {
        /// The name.
        name: String,
    },
    /// The tensor has no version at that step.
    #[error("tensor {name:?} has no version at step {step}")]
    UnknownVersion {
        /// The tensor.
        name: String,
        /// The step asked for.
        step: u64,
    },
    /// A version at that step exists already; versions are immutable.
    #[error("tensor {name:?} already has a version at step {step}")]
    DuplicateVersion {
        /// The tensor.
        name: String,
        /// The step.
        step: u64,
    },
    /// Bit packing refused its arguments.
    #[error("bits: {0}")]
    Bits(#[from] BitsError),
    /// Quantization refused its input.
    #[error("quant: {0}")]
    Quant(#[from] QuantError),
    /// A segment could not be encoded, parsed or decoded.
    #[error("segment: {0}")]
    Segment(#[from] SegmentError),
    /// The tier policy refused a call.
    #[error("tiering: {0}")]
    Tier(#[from] TierError),
    /// A stored block failed to decode or re-encode: the store names the tensor and block.
    #[error("tensor {name:?} step {step} block {block}: {source}")]
    Block {
        /// The tensor.
        name: String,
        /// The version.
        step: u64,
        /// Block index within the version.
        block: usize,
        /// The codec's error.
        source: SegmentError,
    },
}

/// Shorthand for [`WasmError::InvalidArgument`].
pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> WasmError {
    WasmError::InvalidArgument {
        what,
        reason: reason.into(),
    }
}
