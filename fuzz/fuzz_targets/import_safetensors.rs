//! Fuzz target: a safetensors file given to [`Store::import_safetensors_bytes`], as a
//! trainer's or a downloaded file would be.
//!
//! Each input is imported into a fresh store (a copy of an empty store made once, in a
//! scratch file on `/dev/shm` when there is one: creating a store takes longer) as
//! checkpoint 7. An import may fail (bad header, offsets, dtype, name, shape);
//! then nothing of it may be visible: no checkpoint, no tensor. One that succeeds must
//! round-trip exactly:
//! - the `safetensors` crate must parse the input too (the store's header parser is its
//!   own, on the crate's `Metadata`: a file the store takes and the crate refuses is a
//!   discrepancy), and it is the reference: the checkpoint lists the same tensors, `get`
//!   of each gives back exactly its dtype, shape and bytes, and the checkpoint's metadata
//!   is the file's `__metadata__` (or, for a map of the one key `METADATA_KEY`, its value:
//!   checkpoint text an export kept whole, as `safetensors_io.rs` documents);
//! - `export_safetensors` writes a file the `safetensors` crate parses, with the same
//!   tensors (dtype, shape, bytes).

#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use strata_codec_fuzz::store_util::{empty_store, scratch_path};
use strata_store::safetensors::SafeTensors;
use strata_store::{
    dtype_from_safetensors, metadata_from_text, shape_from_safetensors, DType, Store, METADATA_KEY,
};

const STEP: u64 = 7;

/// One tensor as the header declares it.
#[derive(Debug)]
struct Declared {
    name: String,
    dtype: DType,
    shape: Vec<u64>,
    bytes: Vec<u8>,
}

/// The tensors of a file and its `__metadata__`, read with the `safetensors` crate, sorted by
/// name.
fn declared(data: &[u8]) -> Result<(Vec<Declared>, Option<HashMap<String, String>>), String> {
    let st = SafeTensors::deserialize(data).map_err(|e| e.to_string())?;
    let (_, meta) = SafeTensors::read_metadata(data).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for (name, view) in st.tensors() {
        let dtype = dtype_from_safetensors(view.dtype())
            .ok_or_else(|| format!("{name}: dtype {:?} has no store dtype", view.dtype()))?;
        let shape = shape_from_safetensors(dtype, view.shape())
            .ok_or_else(|| format!("{name}: shape {:?} splits a packed group", view.shape()))?;
        out.push(Declared {
            name,
            dtype,
            shape,
            bytes: view.data().to_vec(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((out, meta.metadata().clone()))
}

fuzz_target!(|data: &[u8]| {
    let path = scratch_path("import.strata");
    std::fs::write(&path, empty_store()).expect("write the scratch store");
    let store = Store::open(&path).expect("a fresh store opens");
    let imported = store.import_safetensors_bytes(data, STEP, "fuzz.safetensors");
    let Ok(report) = imported else {
        // Nothing of a failed import is visible.
        assert_eq!(store.checkpoints().expect("checkpoints"), Vec::<u64>::new());
        assert_eq!(store.tensors().expect("tensors"), Vec::<String>::new());
        return;
    };
    let info = store
        .checkpoint_info(STEP)
        .expect("the imported checkpoint");
    assert_eq!(info.tensors.len(), report.tensors, "report and checkpoint");

    // The store's view, by name.
    let mut ours = Vec::new();
    for name in &info.tensors {
        let t = store.get(name, STEP).expect("get an imported tensor");
        assert!(t.fidelity.is_exact(), "{name}: imported inexact");
        ours.push(Declared {
            name: name.clone(),
            dtype: t.dtype,
            shape: t.shape,
            bytes: t.data,
        });
    }
    ours.sort_by(|a, b| a.name.cmp(&b.name));

    // What the file holds, as the safetensors crate reads it.
    match declared(data) {
        Ok((theirs, meta)) => {
            assert_eq!(ours.len(), theirs.len(), "tensor count");
            for (a, b) in ours.iter().zip(&theirs) {
                assert_eq!(a.name, b.name);
                assert_eq!((a.dtype, &a.shape), (b.dtype, &b.shape), "{}", a.name);
                assert!(
                    a.bytes == b.bytes,
                    "{}: bytes differ from the file's",
                    a.name
                );
            }
            // A map of the one key METADATA_KEY is checkpoint text kept whole by an export
            // (safetensors_io.rs): it imports as that text, as documented.
            match meta.as_ref().filter(|m| m.len() == 1) {
                Some(m) if m.contains_key(METADATA_KEY) => {
                    assert_eq!(Some(&report.metadata), m.get(METADATA_KEY), "metadata text");
                }
                _ => assert_eq!(
                    metadata_from_text(&report.metadata),
                    meta,
                    "metadata differs from the file's"
                ),
            }
        }
        Err(why) => panic!("the store imported a file the safetensors crate refuses: {why}"),
    }

    // Export, and read the file back.
    let out = scratch_path("import-export.safetensors");
    store.export_safetensors(STEP, &out).expect("export");
    let exported = std::fs::read(&out).expect("read the export");
    let (back, _) = declared(&exported).expect("the export parses");
    assert_eq!(back.len(), ours.len(), "exported tensor count");
    for (a, b) in ours.iter().zip(&back) {
        assert_eq!(a.name, b.name);
        assert_eq!((a.dtype, &a.shape), (b.dtype, &b.shape), "{}", a.name);
        assert!(a.bytes == b.bytes, "{}: exported bytes differ", a.name);
    }
});
