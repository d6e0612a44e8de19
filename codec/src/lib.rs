//! # strata-codec
//!
//! The codec every other part of Strata stands on. No I/O; builds for `wasm32-unknown-unknown`.
//!
//! - [`aged`]: lossy versions as quantized deltas against a base's reconstruction (ADR 0020).
//! - [`bits`]: signed codes of width 1..=8 packed LSB-first into one bitstream (ADR-019).
//! - [`quant`]: symmetric per-group quantization at 8, 7, 5 and 3 bits, two-level 3-bit.
//! - [`lossless`]: bit-exact float codec: rotate, XOR against a base, cut into an exponent
//!   head and byte planes, then per plane a 32-lane rANS coder (AVX2 kernels where the CPU
//!   has them), zstd only where a plane repeats, or constant or raw (ADR 0004).
//! - [`segment`]: the self-describing, checksummed byte string that stores one block.
//! - [`frames`]: frame streams, several frames of one tensor quantized with shared per-group
//!   scales in one segment, each frame decodable on its own (ADR 0013).
//! - [`hpdkv`]: HPΔKV blobs, dense or sparse fp16/bf16 residuals (ADR 0012).
//! - [`residual`]: exact (bit-for-bit) and top-k residuals of a quantized tier (ADR 0012).
//! - [`chain`]: the delta-base rule every store follows: delta, anchor or keyframe, within
//!   `max_chain` (ADR 0006).
//! - [`convert`]: little-endian bytes of a dtype to and from `f32`, and to `f64`: the one
//!   definition of those casts.
//! - [`testing`]: [`testing::SplitMix64`], deterministic test data for tests, benches and
//!   examples (not cryptography).
//!
//! ```
//! use strata_codec::{segment::{self, Segment}, lossless::LosslessOptions, DType};
//!
//! let v1: Vec<u8> = [0.5f32, -1.25, 3.0].iter().flat_map(|x| x.to_le_bytes()).collect();
//! let v2: Vec<u8> = [0.5f32, -1.5, 3.0].iter().flat_map(|x| x.to_le_bytes()).collect();
//! let opts = LosslessOptions::default();
//! let key = segment::encode_keyframe(DType::F32, &v1, &opts)?;
//! let delta = segment::encode_delta(DType::F32, &v2, &v1, &opts)?;
//!
//! let base = Segment::parse(&key)?.decode_lossless(None, 1 << 20)?;
//! let back = Segment::parse(&delta)?.decode_lossless(Some(&base), 1 << 20)?;
//! assert_eq!(back, v2);
//! # Ok::<(), strata_codec::segment::SegmentError>(())
//! ```

pub mod aged;
pub mod bits;
pub mod chain;
pub mod convert;
mod cpu;
pub mod domain;
mod dtype;
pub mod frames;
pub mod hpdkv;
pub mod lossless;
pub mod quant;
pub mod residual;
pub mod segment;
pub mod testing;

pub use dtype::DType;
