//! # strata
//!
//! An embedded store for tensors that change over time. This facade re-exports the member
//! crates: [`codec`] (formats), [`tiering`] (the tier policy) and [`store`] (the database).

pub use strata_codec as codec;
pub use strata_store as store;
pub use strata_tiering as tiering;

/// The README's Rust program, compiled and run by `cargo test --doc -p strata`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The programs of `docs/rust.md`, compiled and run by `cargo test --doc -p strata`.
#[cfg(doctest)]
#[doc = include_str!("../docs/rust.md")]
pub struct RustGuideDoctests;
