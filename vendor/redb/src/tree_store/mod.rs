mod btree;
mod btree_base;
mod btree_cursor;
mod btree_cursor_range;
mod btree_iters;
mod btree_mutator;
mod extract_if;
mod multimap_btree;
pub(crate) mod page_store;
mod table_tree;
mod table_tree_base;

pub(crate) use btree::{Btree, BtreeMut, BtreeStats, RawBtree};
pub(crate) use btree_base::BtreeHeader;
pub use btree_base::{AccessGuard, AccessGuardMut, AccessGuardMutInPlace};
pub(crate) use btree_base::{BRANCH, LEAF, LeafAccessor, RawLeafBuilder};
pub(crate) use btree_cursor::{BtreeCursor, BtreeCursorMut};
pub(crate) use btree_cursor_range::BtreeCursorRange;
pub(crate) use btree_iters::{AllPageNumbersBtreeIter, encode_bounds};
pub(crate) use extract_if::BtreeExtractIf;
pub(crate) use multimap_btree::{DynamicCollection, DynamicCollectionType, multimap_btree_stats};
pub(crate) use page_store::ReadOnlyBackend;
#[cfg(not(redb_no_std))]
pub use page_store::file_backend;
pub(crate) use page_store::{
    AllocationPolicy, DatabaseLayout, FILE_FORMAT_VERSION3, HeaderGuard, MAX_PAIR_LENGTH,
    MAX_VALUE_LENGTH, PAGE_SIZE, Page, PageAllocator, PageHint, PageNumber, PageNumberHashMap,
    PageNumberHashSet, PageResolver, PageTracker, ScopedBorrow, SerializedSavepoint, ShrinkPolicy,
    TransactionalMemory, WriterLock,
};
pub use page_store::{InMemoryBackend, Savepoint};
pub(crate) use table_tree::{PageListMut, TableTree, TableTreeMut};
pub(crate) use table_tree_base::{InternalTableDefinition, TableType};
