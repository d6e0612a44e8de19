//! # strata-wasm
//!
//! wasm-bindgen API over Strata's codec and tiering, and the browser demo.
//! **Not implemented yet**: this crate is a placeholder in the workspace layout. Its work is
//! tracked by the WASM issue. The codec itself already builds for `wasm32-unknown-unknown`.

pub use strata_codec as codec;
