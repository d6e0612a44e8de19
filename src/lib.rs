//! # strata
//!
//! An embedded store for tensors that change over time. This facade re-exports the member
//! crates; today only [`codec`] is implemented (see the README for what works).

pub use strata_codec as codec;
pub use strata_store as store;
pub use strata_tiering as tiering;
