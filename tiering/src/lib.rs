//! # strata-tiering
//!
//! Access scores and tier decisions for Strata. **Not implemented yet**: this crate is a
//! placeholder in the workspace layout and exports nothing. Its work is tracked by the
//! tiering issue (access-score tiers, `warm_byte_cap` hysteresis, Tier 0).
