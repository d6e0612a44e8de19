//! `strata` at the edges of trust (issue 26): an import beside a reader is committed and
//! says it could not compact instead of failing; a folder is checked whole before its first
//! file is imported, every bad file named; aging needs a budget, and its dry run changes
//! nothing and measures what the pass would save.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{f32_bytes, noise, series_root, write_noise_safetensors};
use strata_store::{DType, Store, TensorRef};

fn strata(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .expect("run strata");
    eprintln!(
        "$ strata {}\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn ok(args: &[&str]) -> Output {
    let out = strata(args);
    assert!(out.status.success(), "strata {args:?} failed: {out:?}");
    out
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// A store whose file holds free pages worth compacting: 8 MiB saved at step 1, a small
/// checkpoint at step 2, step 1 deleted.
fn store_with_free_pages(store: &Path) {
    let s = Store::open(store).expect("open");
    for (step, n) in [(1, 1 << 21), (2, 1024)] {
        let bytes = f32_bytes(&noise(n, step));
        let t = TensorRef {
            dtype: DType::F32,
            shape: &[n as u64],
            bytes: &bytes,
        };
        s.save_checkpoint(step, &[("w", t)], "").expect("save");
    }
    s.delete_checkpoint(1).expect("delete");
}

#[test]
fn commands_beside_a_reader_commit_and_warn_that_they_did_not_compact() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("read.strata");
    store_with_free_pages(&store);
    let src = dir.path().join("small.safetensors");
    write_noise_safetensors(&src, 2, 1024);

    // This process reads the store, as a trainer's evaluator or a `strata get` would.
    let reader = Store::open_read_only(&store).expect("open to read");
    let held = reader.read_checkpoint(2).expect("a read in progress");

    // The import is committed; the compaction it would run cannot, and says so.
    let out = ok(&["import", p(&store), p(&src), "--step", "3"]);
    let err = stderr(&out);
    assert!(
        err.contains("warning: the import is committed, but the file was not compacted")
            && err.contains("another process is reading the store"),
        "{err}"
    );
    let log = String::from_utf8_lossy(&ok(&["log", p(&store)]).stdout).into_owned();
    assert!(log.contains('3'), "{log}");

    // An explicit compaction fails, nothing changed, and says to retry.
    let out = strata(&["compact", p(&store)]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = stderr(&out);
    assert!(
        err.contains("cannot compact")
            && err.contains("another process is reading")
            && err.contains("retry"),
        "{err}"
    );
    assert_eq!(
        String::from_utf8_lossy(&ok(&["log", p(&store)]).stdout),
        log
    );

    // Retention, aging and maintenance commit and warn the same way.
    let out = ok(&["retain", p(&store), "--keep-last", "1"]);
    assert!(
        stderr(&out).contains("warning: the retention is committed"),
        "{out:?}"
    );
    let out = ok(&[
        "age",
        p(&store),
        "--budget",
        "1e-2",
        "--keep-exact-last",
        "1",
    ]);
    assert!(
        stderr(&out).contains("warning: aging is committed"),
        "{out:?}"
    );
    let checkpoints = Store::open_read_only(&store)
        .expect("open")
        .checkpoints()
        .expect("list");
    assert_eq!(checkpoints, vec![3]);

    // Once the read is over, compaction runs.
    drop(held);
    drop(reader);
    let out = ok(&["compact", p(&store)]);
    assert!(stderr(&out).is_empty(), "{out:?}");
    ok(&["verify", p(&store)]);
}

#[test]
fn a_folder_is_checked_whole_before_its_first_file_is_imported() {
    let dir = tempfile::tempdir().expect("temp dir");
    let series = dir.path().join("series");
    std::fs::create_dir(&series).expect("mkdir");
    let src = series_root().join("dev_ft/bf16");
    let mut names: Vec<String> = std::fs::read_dir(&src)
        .expect("series")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    names.sort();
    assert!(names.len() >= 4, "{names:?}");
    for n in &names {
        std::fs::copy(src.join(n), series.join(n)).expect("copy");
    }
    // The second file cut short, the fourth with a tensor named twice.
    let cut = series.join(&names[1]);
    let bytes = std::fs::read(&cut).expect("read");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("cut");
    let twice = series.join(&names[3]);
    let header = r#"{"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(&[1; 8]);
    std::fs::write(&twice, file).expect("write");

    let store = dir.path().join("s.strata");
    let out = strata(&["import", p(&store), p(&series)]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = stderr(&out);
    assert!(err.contains("nothing was imported"), "{err}");
    assert!(
        err.contains(&names[1]) && err.contains("ends at byte") && err.contains("truncated"),
        "{err}"
    );
    assert!(
        err.contains(&names[3]) && err.contains(r#"names "w" twice"#),
        "{err}"
    );
    let s = Store::open_read_only(&store).expect("open");
    assert!(s.checkpoints().expect("list").is_empty());
    drop(s);

    // Fixed: a step already in the store is named too, before anything is written.
    std::fs::copy(src.join(&names[1]), &cut).expect("restore");
    std::fs::copy(src.join(&names[3]), &twice).expect("restore");
    ok(&["import", p(&store), p(&series.join(&names[2]))]);
    let out = strata(&["import", p(&store), p(&series)]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = stderr(&out);
    assert!(
        err.contains(&names[2]) && err.contains("already has a checkpoint"),
        "{err}"
    );
    let s = Store::open_read_only(&store).expect("open");
    assert_eq!(s.checkpoints().expect("list").len(), 1);
    drop(s);
    ok(&["import", p(&store), p(&series), "--skip-existing"]);
    let s = Store::open_read_only(&store).expect("open");
    assert_eq!(s.checkpoints().expect("list").len(), names.len());
    drop(s);

    // The same step from two arguments is a usage error, before anything is written.
    let other = dir.path().join("other.strata");
    let out = strata(&["import", p(&other), p(&series), p(&series.join(&names[0]))]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr(&out).contains("have the same step"), "{out:?}");
}

#[test]
fn aging_needs_a_budget_and_its_dry_run_changes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("age.strata");
    ok(&["import", p(&store), p(&series_root().join("dev_ft/bf16"))]);
    let before = std::fs::read(&store).expect("read the store");

    // No budget: refused with what to give, nothing changed.
    let out = strata(&["age", p(&store)]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = stderr(&out);
    assert!(
        err.contains("cannot be undone")
            && err.contains("--budget")
            && err.contains("--yes")
            && err.contains("--dry-run"),
        "{err}"
    );
    assert!(std::fs::read(&store).expect("read the store") == before);

    // A dry run measures the pass and changes nothing a reader sees.
    let json = |out: &Output| -> serde_json::Value {
        serde_json::from_slice(&out.stdout).expect("age --json")
    };
    let dry = json(&ok(&[
        "age",
        p(&store),
        "--budget",
        "1e-2",
        "--dry-run",
        "--json",
    ]));
    assert_eq!(dry["dry_run"], true, "{dry}");
    assert!(!dry["aged"].as_array().expect("aged").is_empty(), "{dry}");
    let (stored_before, stored_after) = (
        dry["stored_bytes_before"].as_u64().expect("before"),
        dry["stored_bytes_after"].as_u64().expect("after"),
    );
    assert!(stored_after < stored_before, "{dry}");
    let log = String::from_utf8_lossy(&ok(&["log", p(&store)]).stdout).into_owned();
    assert!(!log.contains("aged"), "{log}");
    let out = ok(&["age", p(&store), "--budget", "1e-2", "--dry-run"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("dry run") && text.contains("would age") && text.contains("would save"),
        "{text}"
    );
    let stats: serde_json::Value =
        serde_json::from_slice(&ok(&["stats", p(&store), "--json"]).stdout).expect("stats");
    assert_eq!(
        stats["stored_bytes"].as_u64(),
        Some(stored_before),
        "{stats}"
    );

    // The pass itself does what the dry run measured.
    let real = json(&ok(&["age", p(&store), "--budget", "1e-2", "--json"]));
    assert_eq!(real["dry_run"], false);
    for key in [
        "aged",
        "kept",
        "versions_aged",
        "max_rel_error",
        "stored_bytes_after",
    ] {
        assert_eq!(real[key], dry[key], "{key}: {real} vs {dry}");
    }
    // --yes ages at the default budget without --budget.
    let again = json(&ok(&["age", p(&store), "--yes", "--json"]));
    assert_eq!(again["budget"].as_f64(), Some(1e-3), "{again}");
    ok(&["verify", p(&store)]);
}
