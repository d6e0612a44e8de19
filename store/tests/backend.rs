//! A store on a redb backend other than a file: redb's `InMemoryBackend`.

use strata_store::redb::backends::InMemoryBackend;
use strata_store::{DType, Options, Store, TensorRef};

#[test]
fn a_store_in_memory_reads_back_and_reports_its_size() {
    let store = Store::open_with_backend("memory", InMemoryBackend::new(), Options::default())
        .expect("open in memory");
    let bytes: Vec<u8> = (0..4096u32)
        .flat_map(|i| (i as f32).to_le_bytes())
        .collect();
    let t = TensorRef {
        dtype: DType::F32,
        shape: &[64, 64],
        bytes: &bytes,
    };
    store.save_checkpoint(1, &[("w", t)], "{}").expect("save");
    assert_eq!(store.get("w", 1).expect("get").data, bytes);
    assert_eq!(store.checkpoints().expect("list"), vec![1]);
    let stats = store.stats().expect("stats");
    assert!(stats.file_bytes > 0, "the backend's size: {stats:?}");
    assert!(store.allocated_bytes().expect("pages in use").is_some());
    assert!(store.verify().expect("verify").is_ok());
    assert!(!store.is_read_only());
}
