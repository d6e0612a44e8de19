//! The storage engine under the [`crate::Store`] API: tables and transactions, lookups,
//! content-addressed segment storage, block reads down delta chains, write planning and
//! encoding, re-basing, the block cache.
//!
//! The modules are private; the rest of the crate uses only the names re-exported here.
//!
//! | module | holds |
//! |---|---|
//! | `handle` | the redb database, writable or read-only ([`Handle`]) |
//! | `tables` | the redb table definitions and meta keys |
//! | `txn` | [`ReadTxn`], [`WriteTxn`]: the tables of a transaction |
//! | `view` | the [`View`] both give the read path |
//! | `versions` | lookups of versions, checkpoints, tags and tier rows; the name check |
//! | `packs` | small tensors packed per checkpoint: pack parts, the member index |
//! | `segments` | segments stored once per content address, in page-filling pieces |
//! | `blocks` | reading blocks: fetch a chain ([`Fetcher`]), decode it ([`Job`]) |
//! | `read_into` | reading whole versions straight into the caller's buffers |
//! | `encode` | planning a write: bases by the delta policy, encoding in parallel |
//! | `rebase` | deleting a version, re-basing the blocks that depend on it |
//! | `quantized` | float blocks to and from quantized segments and residuals |
//! | `tier_rows` | writing tier rows and the blobs they hold |
//! | `cache`, `buffers` | decoded blocks kept for reads; reused read buffers |
//! | `writeback` | syncing a large write's pages in the background ([`Writeback`]) |

mod aging;
mod blocks;
mod buffers;
mod cache;
mod encode;
mod handle;
mod packs;
mod quantized;
mod read_into;
mod rebase;
mod segments;
mod tables;
mod tier_rows;
mod txn;
mod versions;
mod view;
mod writeback;

pub(crate) use aging::{age_versions, AgeHow, AgeJob, AgeTally};
pub(crate) use blocks::{decode_all, read_blocks, Fetcher, Job, Span};
pub(crate) use cache::{part_cache, Block, BlockCache, CacheRoom, PartCache};
pub(crate) use encode::{
    check_shape, encode_tasks, plan_version, prepare_window, BlockBytes, BlockWork, Encoded,
    Reencoded, Task, VersionPlan,
};
pub(crate) use handle::Handle;
pub(crate) use packs::{all_members, packed_at, packs, part_name, part_names, FullPart, Packer};
pub(crate) use quantized::ResidualBytes;
pub(crate) use read_into::read_blocks_into;
pub(crate) use rebase::{delete_version, delete_versions, rebase_dependents};
pub(crate) use segments::{address_of, PAGE};
#[cfg(feature = "remote")]
pub(crate) use segments::{fetch_error, MAX_SEGMENT_BYTES};
pub(crate) use tables::{
    CHECKPOINTS, CHUNKS, FORMAT_KEY, MEMBERS, META, POLICIES, SEGMENTS, TAGS, TAILS, TIERS,
    TRIMMED_AT_KEY, VERSIONS, WRITER_KEY,
};
pub(crate) use tier_rows::{put_row, remove_rows, row_blobs, store_residual};
pub(crate) use txn::{ReadTxn, TierChanges, VersionId, WriteTxn};
pub(crate) use versions::{
    check_name, checkpoint_damage, checkpoint_steps, each_checkpoint_body, is_part_name, tag_list,
    tensor_names, versions_between, BytesTable,
};
pub(crate) use view::View;
pub(crate) use writeback::Writeback;

/// Quantized blocks and residuals (the `quantized` module), for tiers and frame streams.
pub(crate) mod lossy {
    pub(crate) use super::quantized::{
        apply_sparse, encode, fidelity_of, from_f32, sparse_residual, to_f32,
    };
}
