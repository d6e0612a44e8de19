//! # strata-tiering
//!
//! Strata's tier policy: which blocks stay at 8 bits, which drift to 7, 5 and 3 bits, and
//! which go to Tier 0. Pure logic: no I/O, no threads, no clock reads (time is a [`Tick`]
//! the caller passes, from a [`Clock`] of its choice). Builds for `wasm32-unknown-unknown`.
//! No `unsafe` code.
//! The decisions and their defaults are recorded in ADR 0005.
//!
//! - [`score`]: per-block read statistics; a score in reads per hour from a moving average
//!   with recency decay and a window of the last [`WINDOW`] reads.
//! - [`tier`]: [`Tier`], per-block [`Policy`], Tier 0 [`ReconstructPolicy`], block sizes.
//! - [`precision`]: what a block's data is still worth after the encodings it went through.
//! - [`state`]: [`TierState`], the registered blocks.
//! - [`plan`](mod@plan): [`plan`](fn@plan) and [`apply`]: moves within a [`Budget`], hysteresis,
//!   minimum residency, one step per move, `warm_byte_cap`, Tier 0.
//! - [`report`]: [`MaintainReport`], what a store's maintenance pass did.
//! - [`clock`]: [`Clock`], system time or a [`ManualClock`], for callers that keep one.
//!
//! ```
//! use strata_tiering::{BlockSpec, Budget, MoveReason, Tier, TierConfig, TierState, HOUR, MINUTE};
//!
//! let mut st = TierState::with_capacity(TierConfig::default(), 2)?;
//! st.register(BlockSpec::tiered(1, 4096, Tier::Hot8), 0)?; // read every minute
//! st.register(BlockSpec::tiered(2, 4096, Tier::Hot8), 0)?; // never read
//! let mut now = 0;
//! while now < HOUR {
//!     now += MINUTE;
//!     st.record_access(1, now)?;
//! }
//! let plan = st.plan(now, Budget::new(64 << 20, 100));
//! assert_eq!(plan.moves.len(), 1);
//! assert_eq!((plan.moves[0].block, plan.moves[0].to), (2, Tier::Warm7));
//! assert_eq!(plan.moves[0].reason, MoveReason::Demote);
//! st.apply(&plan)?; // after the store re-encoded block 2 at 7 bits
//! assert_eq!(st.tier(2)?, Tier::Warm7);
//! assert_eq!(st.effective_bits(2)?, Some(7));
//! # Ok::<(), strata_tiering::TierError>(())
//! ```

#![forbid(unsafe_code)]

pub mod clock;
pub mod config;
pub mod error;
pub mod plan;
pub mod precision;
pub mod report;
pub mod score;
pub mod state;
pub mod tier;

pub use clock::{Clock, ManualClock, Tick, HOUR, MINUTE, SECOND};
pub use config::TierConfig;
pub use error::TierError;
pub use plan::{apply, plan, Budget, Move, MoveReason, Plan};
pub use precision::Precision;
pub use report::MaintainReport;
pub use score::{AccessStats, ScoreConfig, STATS_BYTES, WINDOW};
pub use state::{BlockHandle, BlockSpec, BlockView, TierBytes, TierState};
pub use tier::{BlockId, Policy, ReconstructPolicy, SizeModel, Tier};
