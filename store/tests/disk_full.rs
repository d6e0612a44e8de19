//! A real full disk (issue 14, item 2): the store lives on a small tmpfs that an import fills.
//! The import must fail with an error that says the disk is full (ENOSPC in its chain), the
//! store must reopen, verify and hold exactly what it held before, and once the tmpfs is
//! remounted bigger the same import must succeed.
//!
//! Needs `mount` (root, Linux): where mounting a tmpfs is not permitted, the tests say why on
//! stderr and pass without running. The tmpfs is unmounted at the end, also when the test
//! fails (a guard).

#![allow(clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use strata_store::{DType, Options, Store, StoreError};

/// A tmpfs mounted on a fresh folder, unmounted on drop.
struct Tmpfs {
    dir: PathBuf,
    _parent: tempfile::TempDir,
}

fn mount(args: &[&str]) -> Result<(), String> {
    let out = Command::new("mount")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run mount: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "mount {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Tmpfs {
    /// Mounts a tmpfs of `mib` MiB, or says why it cannot.
    fn mount(mib: u64) -> Result<Tmpfs, String> {
        if !cfg!(target_os = "linux") {
            return Err("not Linux".into());
        }
        let parent = tempfile::tempdir().map_err(|e| format!("no temp dir: {e}"))?;
        let dir = parent.path().join("small-disk");
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {dir:?}: {e}"))?;
        let dir_s = dir.to_string_lossy().to_string();
        mount(&[
            "-t",
            "tmpfs",
            "-o",
            &format!("size={mib}m"),
            "tmpfs",
            &dir_s,
        ])?;
        Ok(Tmpfs {
            dir,
            _parent: parent,
        })
    }

    /// Remounts it with `mib` MiB.
    fn resize(&self, mib: u64) {
        let dir = self.dir.to_string_lossy().to_string();
        mount(&["-o", &format!("remount,size={mib}m"), &dir]).expect("remount the tmpfs bigger");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Something still has a file open there (a failing test's store): detach it.
            let lazy = Command::new("umount").arg("-l").arg(&self.dir).status();
            eprintln!("umount {:?} failed; lazy unmount: {lazy:?}", self.dir);
        }
    }
}

/// Deterministic pseudo-random f32s, hard to compress (24 random bits each).
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .flat_map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let x = ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1;
            x.to_le_bytes()
        })
        .collect()
}

/// Writes a safetensors file of `count` f32 tensors of `elems` elements each at `path`;
/// returns the tensors.
fn write_safetensors(path: &Path, count: usize, elems: usize, seed: u64) -> Vec<(String, Vec<u8>)> {
    let tensors: Vec<(String, Vec<u8>)> = (0..count)
        .map(|i| (format!("layer.{i}.w"), noise(elems, seed + i as u64)))
        .collect();
    let mut header = String::from("{");
    let mut offset = 0;
    for (i, (name, data)) in tensors.iter().enumerate() {
        if i > 0 {
            header.push(',');
        }
        header.push_str(&format!(
            "\"{name}\":{{\"dtype\":\"F32\",\"shape\":[{elems}],\"data_offsets\":[{offset},{}]}}",
            offset + data.len()
        ));
        offset += data.len();
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    for (_, data) in &tensors {
        out.extend_from_slice(data);
    }
    std::fs::write(path, out).expect("write a safetensors file");
    tensors
}

/// A checkpoint as a reader sees it: step, metadata, each tensor's name and bytes.
type Seen = (u64, String, Vec<(String, Vec<u8>)>);

/// What a reader sees: checkpoints with metadata, every version's bytes.
fn snapshot(store: &Store) -> Vec<Seen> {
    let mut out = Vec::new();
    for step in store.checkpoints().expect("checkpoints") {
        let info = store.checkpoint_info(step).expect("checkpoint info");
        let tensors = info
            .tensors
            .iter()
            .map(|n| (n.clone(), store.get(n, step).expect("get").data))
            .collect();
        out.push((step, info.metadata, tensors));
    }
    out
}

/// Whether the disk-full error is somewhere in `e`'s chain of sources.
fn is_disk_full(e: &StoreError) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.raw_os_error() == Some(28) || io.kind() == std::io::ErrorKind::StorageFull {
                return true;
            }
        }
        cur = err.source();
    }
    // redb's errors may hold the I/O error without exposing it as a source.
    e.to_string().contains("os error 28")
}

/// What the scenario showed, for the tests to check.
struct Shown {
    message: String,
    store_path: PathBuf,
}

/// Fills an 8 MiB tmpfs with a 16 MiB import under `opts`, checks the store after it, and
/// imports again after remounting with 64 MiB. `None`: mounting is not permitted here.
fn fill_the_disk(label: &str, opts: &Options) -> Option<Shown> {
    let disk = match Tmpfs::mount(8) {
        Ok(d) => d,
        Err(why) => {
            eprintln!("disk_full: skipped ({why})");
            return None;
        }
    };
    let src = tempfile::tempdir().expect("temp dir");
    let small = src.path().join("small.safetensors");
    let big = src.path().join("big.safetensors");
    write_safetensors(&small, 2, 64 << 10, 1);
    let big_tensors = write_safetensors(&big, 4, 1 << 20, 10);
    let path = disk.dir.join("run.strata");

    let store = Store::open_with(&path, opts.clone()).expect("create the store");
    store
        .import_safetensors(&small, 1)
        .expect("import the small file");
    let before = snapshot(&store);
    let err = store
        .import_safetensors(&big, 2)
        .expect_err("a 16 MiB import on an 8 MiB disk fails");
    let message = err.to_string();
    println!("disk_full ({label}): the import failed with: {message}");
    println!("disk_full ({label}): {err:?}");
    assert!(
        is_disk_full(&err),
        "the error does not say the disk is full: {err:?}"
    );
    drop(store);

    let store = Store::open_with(&path, opts.clone()).expect("reopen on the full disk");
    assert_eq!(
        snapshot(&store),
        before,
        "after the failed import the store holds what it held before"
    );
    let report = store.verify().expect("verify");
    assert!(report.is_ok(), "verify after the failed import: {report:?}");
    drop(store);

    disk.resize(64);
    let store = Store::open_with(&path, opts.clone()).expect("reopen after freeing space");
    store
        .import_safetensors(&big, 2)
        .expect("the same import once there is room");
    assert_eq!(store.checkpoints().expect("checkpoints"), vec![1, 2]);
    for (name, data) in &big_tensors {
        let t = store.get(name, 2).expect("read back");
        assert_eq!(t.dtype, DType::F32);
        assert!(&t.data == data, "{name} reads back different bytes");
    }
    let report = store.verify().expect("verify");
    assert!(report.is_ok(), "verify after the second import: {report:?}");
    println!(
        "disk_full ({label}): after remounting with 64 MiB the import succeeded; file {} bytes",
        std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0)
    );
    drop(store);
    Some(Shown {
        message,
        store_path: path,
    })
}

fn small_windows() -> Options {
    Options {
        window_bytes: 1 << 20,
        db_cache_bytes: 2 << 20,
        ..Options::default()
    }
}

/// Default options: the whole import is one window, and the disk fills at the commit.
#[test]
fn an_import_that_fills_the_disk_fails_cleanly_and_succeeds_once_there_is_room() {
    fill_the_disk("default options", &Options::default());
}

/// 1 MiB windows and a 2 MiB redb cache: the disk fills while dirty pages are flushed before
/// the commit.
#[test]
fn an_import_that_fills_the_disk_mid_stream_fails_cleanly_and_succeeds_once_there_is_room() {
    fill_the_disk("small windows", &small_windows());
}

/// The disk-full error says which file is full: redb's I/O errors on the store file come back
/// as `StoreError::Io` naming it (they were `StoreError::Database { op, source }`, whose
/// message named no file, until this test found it).
#[test]
fn the_disk_full_error_names_the_store_file() {
    let Some(seen) = fill_the_disk("default options, message", &Options::default()) else {
        return;
    };
    let name = seen.store_path.to_string_lossy();
    assert!(
        seen.message.contains(&*name),
        "the message {:?} does not name {name}",
        seen.message
    );
}
