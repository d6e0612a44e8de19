//! # strata-store
//!
//! The versioned tensor database on redb, and the `strata` command-line tool.
//! **Not implemented yet**: this crate is a placeholder in the workspace layout and exports
//! only the codec it will build on. Its work is tracked by the store issue.

pub use strata_codec as codec;
