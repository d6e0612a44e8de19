//! # strata
//!
//! An embedded store for tensors that change over time. This facade re-exports the member
//! crates: [`codec`] (formats), [`tiering`] (the tier policy) and [`store`] (the database).

pub use strata_codec as codec;
pub use strata_store as store;
pub use strata_tiering as tiering;
