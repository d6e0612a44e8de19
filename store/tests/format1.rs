//! A store written by the first release of the format (store format 1, before tiers and
//! record checksums) opens, is upgraded in place, and reads back bit-exact.
//! `tests/fixtures/format1.strata` was made by `strata import` and `strata tag` at commit
//! fb59a1f from the three `step_*.safetensors` files beside it.

mod common;

use std::path::PathBuf;

use strata_store::{Store, Tier, TierPolicy};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures")).join(name)
}

#[test]
fn a_format_1_store_is_upgraded_and_reads_back_exactly() {
    let (_dir, path) = common::temp_store();
    std::fs::copy(fixture("format1.strata"), &path).expect("copy the fixture");
    {
        let store = Store::open(&path).expect("open and upgrade");
        assert_eq!(store.checkpoints().expect("checkpoints"), vec![10, 20, 30]);
        assert_eq!(store.tags().expect("tags"), vec![("best".to_string(), 20)]);
        for step in [10u64, 20, 30] {
            let source = std::fs::read(fixture(&format!("step_{step:06}.safetensors")))
                .expect("read the source file");
            let st = safetensors::SafeTensors::deserialize(&source).expect("parse");
            let cp = store.load_checkpoint(step).expect("load");
            assert_eq!(cp.tensors.len(), 4);
            for (name, t) in &cp.tensors {
                assert_eq!(
                    t.data,
                    st.tensor(name).expect("tensor").data(),
                    "{name} {step}"
                );
            }
        }
        assert!(store.verify().expect("verify").is_ok());
        // The upgraded store takes tiers.
        store
            .set_policy("layer.w", TierPolicy::tiered(Tier::Hot8))
            .expect("policy");
        store.maintain(1).expect("maintain");
    }
    // Reopened as format 2: no second upgrade, the same data.
    let store = Store::open(&path).expect("reopen");
    assert!(store.verify().expect("verify").is_ok());
    assert!(store.get("layer.w", 20).expect("get").fidelity != strata_store::Fidelity::Exact);
    assert_eq!(
        store.get("layer.b", 30).expect("get").fidelity,
        strata_store::Fidelity::Exact
    );
}
