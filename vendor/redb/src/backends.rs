pub use crate::tree_store::InMemoryBackend;
#[cfg(not(redb_no_std))]
pub use crate::tree_store::file_backend::FileBackend;
