//! The committed series (`testdata/series`) is what `testdata/make.rs` cuts from the shared
//! one: the files `testdata/cut.rs` lists and no others, each holding the tensors it names,
//! 8 MB at most in all; and when the shared series is present, each file is the cut of the
//! shared file of the same name, bit for bit.

#![allow(clippy::panic)]

mod common;
#[allow(dead_code)]
#[path = "../testdata/cut.rs"]
mod cut;

use std::path::Path;

use common::{committed_root, load_file, shared_root};
use strata::store::DType;

/// Every file under `dir`, as paths relative to `root`.
fn files_under(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).expect("list testdata") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            files_under(root, &p, out);
        } else {
            let rel = p.strip_prefix(root).expect("under root");
            out.push(rel.to_str().expect("utf-8 name").replace('\\', "/"));
        }
    }
}

#[test]
fn committed_series_is_the_listed_cut() {
    let root = committed_root();
    let mut found = Vec::new();
    files_under(&root, &root, &mut found);
    found.sort();
    let mut listed = cut::files();
    listed.sort();
    assert_eq!(
        found, listed,
        "testdata/series holds other files than cut.rs lists"
    );

    let mut total = 0u64;
    for rel in &listed {
        let path = root.join(rel);
        total += std::fs::metadata(&path).expect("size").len();
        let tensors = load_file(&path);
        let names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, cut::TENSORS, "{rel}");
        let want = if rel.contains("/bf16/") {
            DType::BF16
        } else {
            DType::F32
        };
        assert!(tensors.iter().all(|t| t.dtype == want), "{rel}: dtypes");
        assert!(
            tensors.iter().any(|t| t.shape.len() == 2),
            "{rel}: a matrix"
        );
    }
    eprintln!("{} files, {total} bytes", listed.len());
    assert!(total <= 8_000_000, "the committed series is {total} bytes");
}

#[test]
fn committed_series_is_cut_bit_for_bit_from_the_shared_one() {
    let Some(shared) = shared_root() else {
        eprintln!("shared series absent: nothing to compare with");
        return;
    };
    for rel in cut::files() {
        let src = std::fs::read(shared.join(&rel)).expect("read shared file");
        let want = cut::cut(&src).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let got = std::fs::read(committed_root().join(&rel)).expect("read committed file");
        assert!(
            got == want,
            "{rel}: not the cut of the shared file (run `cargo run --release --example \
             make-testdata` and commit the result)"
        );
    }
}
