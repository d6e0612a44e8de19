//! # strata-wasm
//!
//! Strata's codec and tier policy for JavaScript, through wasm-bindgen, and the browser
//! demo in `wasm/www/`. Decisions are recorded in ADR 0010.
//!
//! The logic is plain Rust, tested natively; the [`bindings`] module is a thin layer that
//! turns typed arrays into slices and [`WasmError`]s into thrown JavaScript `Error`s:
//!
//! - [`ops`]: lossless encode and decode (keyframes and XOR deltas), quantize and
//!   dequantize at 8/7/5/3 bits, bit packing, XOR, segment headers, dtype conversions.
//! - [`analyze`]: what each tier costs and loses on a tensor (the demo page's figures).
//! - [`store`]: [`TieredStore`], versions of tensors in memory with tiered blocks moved by
//!   [`strata_tiering`] under a `warm_byte_cap`.
//!
//! Every input is validated: a bad argument or corrupt segment is an error naming what is
//! wrong, never a panic (which in WebAssembly would be a trap that kills the module).
//!
//! ```
//! use strata_wasm::{ops, DType};
//! let v: Vec<f32> = (0..256).map(|i| (i as f32).sin()).collect();
//! let seg = ops::quantize(&v, 7, DType::F32, None)?;
//! let back = ops::dequantize(&seg)?;
//! assert!(v.iter().zip(&back).all(|(a, b)| (a - b).abs() <= 1.0 / 126.0 + 1e-6));
//! let key = ops::encode(DType::F32, &ops::f32_bytes(&v), None, &Default::default())?;
//! assert_eq!(ops::decode(&key, None)?.1, ops::f32_bytes(&v));
//! # Ok::<(), strata_wasm::WasmError>(())
//! ```

#![forbid(unsafe_code)]

pub mod analyze;
pub mod bindings;
mod error;
pub mod ops;
pub mod store;

pub use error::WasmError;
pub use ops::MAX_DECODED_BYTES;
pub use store::{MaintainReport, StoreOptions, TieredStore, WritePolicy};
pub use strata_codec::{self as codec, DType};
pub use strata_tiering as tiering;
