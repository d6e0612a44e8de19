//! `strata import`: safetensors files (or folders of `step_N.safetensors`) as checkpoints.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use strata_store::{check_safetensors, Options, Store, StoreStats};

use crate::fmt::{mb, mb_s};
use crate::maintain::{closed_sizes, warn_not_compacted};
use crate::progress::{line, warn, Output};
use crate::{CliError, CliResult};

/// Options of an import.
#[derive(Debug)]
pub(crate) struct Flags {
    /// The step of a single file.
    pub(crate) step: Option<u64>,
    /// Skip steps that have a checkpoint.
    pub(crate) skip_existing: bool,
    /// Compact at the end.
    pub(crate) compact: bool,
}

/// The step in a file name `step_N.safetensors` (also `step-N`, `stepN`), if it has one.
pub(crate) fn step_of(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".safetensors")?;
    let digits = stem.strip_prefix("step")?.trim_start_matches(['_', '-']);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The `step_N.safetensors` files of a folder, by step.
pub(crate) fn series_files(dir: &Path) -> CliResult<Vec<(u64, PathBuf)>> {
    let io = |source| CliError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.is_file() {
            if let Some(step) = step_of(&path) {
                files.push((step, path));
            }
        }
    }
    by_step(files)
}

/// `files` sorted by step; a usage error naming two files of the same step.
fn by_step(mut files: Vec<(u64, PathBuf)>) -> CliResult<Vec<(u64, PathBuf)>> {
    files.sort();
    if let Some(w) = files.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(CliError::Usage(format!(
            "{} and {} have the same step {}",
            w[0].1.display(),
            w[1].1.display(),
            w[0].0
        )));
    }
    Ok(files)
}

/// The files to import with their steps, by step.
fn plan(paths: &[PathBuf], step: Option<u64>) -> CliResult<Vec<(u64, PathBuf)>> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let found = series_files(p)?;
            if found.is_empty() {
                return Err(CliError::Usage(format!(
                    "no step_N.safetensors files in {}",
                    p.display()
                )));
            }
            files.extend(found);
        } else if let Some(s) = step {
            files.push((s, p.clone()));
        } else if !p.exists() {
            return Err(CliError::Io {
                path: p.clone(),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        } else {
            let s = step_of(p).ok_or_else(|| {
                CliError::Usage(format!(
                    "cannot read a step from the name {} (expected step_N.safetensors); give --step",
                    p.display()
                ))
            })?;
            files.push((s, p.clone()));
        }
    }
    if step.is_some() && (files.len() != 1 || paths.iter().any(|p| p.is_dir())) {
        return Err(CliError::Usage(
            "--step is only valid with a single file".into(),
        ));
    }
    // Two arguments (a folder and a file of it, two folders) may give one step twice: the
    // second import would fail after the first committed.
    by_step(files)
}

/// Checks every file before anything is written: its header, dtypes, shapes, offsets and
/// length ([`check_safetensors`]), and that its step has no checkpoint yet (unless
/// `skip_existing`). Every problem is reported, each naming its file; one bad file among a
/// hundred stops the import before its first commit, not after fifty.
fn preflight(store: &Store, files: &[(u64, PathBuf)], skip_existing: bool) -> CliResult {
    let existing = store.checkpoints()?;
    let mut problems = Vec::new();
    for (step, path) in files {
        let exists = existing.binary_search(step).is_ok();
        if exists && skip_existing {
            continue;
        }
        if let Err(e) = check_safetensors(path) {
            problems.push(e.to_string());
        }
        if exists {
            problems.push(format!(
                "{}: step {step} already has a checkpoint (--skip-existing skips it)",
                path.display()
            ));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(CliError::Refused {
        problems,
        files: files.len(),
    })
}

/// Totals of an import.
#[derive(Debug, Default)]
pub(crate) struct Totals {
    pub(crate) files: usize,
    pub(crate) raw_bytes: u64,
    pub(crate) time: Duration,
}

/// Imports `files` into `store`, printing one line per file.
pub(crate) fn import_files(
    out: &Output,
    store: &Store,
    files: &[(u64, PathBuf)],
    skip_existing: bool,
) -> CliResult<Totals> {
    let sizes: Vec<u64> = files
        .iter()
        .map(|(_, p)| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .collect();
    let bar = out.bar(sizes.iter().sum(), true);
    let existing = if skip_existing {
        store.checkpoints()?
    } else {
        Vec::new()
    };
    let mut totals = Totals::default();
    for (i, ((step, path), size)) in files.iter().zip(sizes).enumerate() {
        bar.set_message(format!("step {step}"));
        if existing.binary_search(step).is_ok() {
            line(&bar, format!("step {step:>8}  exists, skipped"))?;
            bar.inc(size);
            continue;
        }
        let t = Instant::now();
        let r = store.import_safetensors(path, *step).map_err(|source| {
            bar.finish_and_clear();
            CliError::ImportStopped {
                path: path.clone(),
                step: *step,
                committed: totals.files,
                left: files.len() - i - 1,
                source: Box::new(source),
            }
        })?;
        let dt = t.elapsed();
        totals.files += 1;
        totals.raw_bytes += r.raw_bytes;
        totals.time += dt;
        line(
            &bar,
            format!(
                "step {step:>8}  {:>4} tensors  raw {:>10}  {:>12}  {}",
                r.tensors,
                mb(r.raw_bytes),
                mb_s(r.raw_bytes, dt),
                path.file_name().unwrap_or_default().to_string_lossy()
            ),
        )?;
        bar.inc(size);
    }
    bar.finish_and_clear();
    Ok(totals)
}

/// Compacts the store after an import if its file holds more than an eighth of free pages on
/// disk (pages of versions the import replaced, or left by earlier deletes; ADR 0023), else
/// trims the room redb reserves for growth if a writer's close would (`Store::trim`, ADRs 0028
/// and 0036), here so that the sizes printed are the file's after the import. Whether it
/// compacted. redb's count of pages in use is taken only if the bytes on disk exceed the
/// stored bytes, which those pages hold, by an eighth.
fn compact_after_import(store: &mut Store, s: &StoreStats) -> strata_store::Result<bool> {
    if free_pages_worth_compacting(s.disk_bytes, s.stored_bytes) {
        let allocated = store.allocated_bytes()?;
        if allocated.is_some_and(|a| free_pages_worth_compacting(s.disk_bytes, a)) {
            store.compact()?;
            return Ok(true);
        }
    }
    store.trim()
}

fn free_pages_worth_compacting(disk_bytes: u64, allocated_bytes: u64) -> bool {
    disk_bytes > allocated_bytes + allocated_bytes / 8
}

/// `strata import`: every file is checked before the first is imported; each is then one
/// transaction. The compaction after the imports cannot undo them, so its failure is a
/// warning, not an error exit.
pub(crate) fn run(out: &Output, store: &Path, paths: &[PathBuf], flags: &Flags) -> CliResult {
    let files = plan(paths, flags.step)?;
    // A write keeps a decoded copy of each block it writes for the next write of the tensor
    // (ADR 0030). Importing one file, no write follows in this process: the copies (up to the
    // whole cache, 256 MiB) only cost memory and page faults. Bases are still read, once each.
    let one_checkpoint = files.len() == 1;
    let opts = Options {
        trim_on_close: flags.compact,
        cache_bytes: if one_checkpoint {
            0
        } else {
            Options::default().cache_bytes
        },
        ..Options::default()
    };
    let mut store = Store::open_with(store, opts)?;
    preflight(&store, &files, flags.skip_existing)?;
    let totals = import_files(out, &store, &files, flags.skip_existing)?;
    say!(
        "imported {} checkpoint(s): raw {} in {:.2} s ({})",
        totals.files,
        mb(totals.raw_bytes),
        totals.time.as_secs_f64(),
        mb_s(totals.raw_bytes, totals.time)
    );
    let what = "the import";
    let Some(mut s) = stats_after_commit(&store, what) else {
        return Ok(());
    };
    if flags.compact {
        let spinner = out.spinner("compacting");
        let compacted = compact_after_import(&mut store, &s);
        spinner.finish_and_clear();
        match compacted {
            Ok(false) => {}
            Ok(true) => match stats_after_commit(&store, what) {
                Some(after) => s = after,
                None => return Ok(()),
            },
            Err(e) => warn_not_compacted(what, &e, store.path()),
        }
    }
    // The import is committed: sizes that cannot be measured again stay as measured before.
    if let Ok(sizes) = closed_sizes(store) {
        (s.file_bytes, s.disk_bytes) = sizes;
    }
    say!(
        "store: raw {} bytes, file {} bytes ({} on disk), ratio {:.3} (raw / bytes on disk)",
        s.raw_bytes,
        s.file_bytes,
        s.disk_bytes,
        s.ratio()
    );
    Ok(())
}

/// The store's sizes after `what` committed, or `None` with a warning if they cannot be
/// read (the commit stands).
fn stats_after_commit(store: &Store, what: &str) -> Option<StoreStats> {
    store
        .stats()
        .map_err(|e| {
            warn(format_args!(
                "{what} is committed, but the store's sizes cannot be read: {e}"
            ))
        })
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compacts_when_free_pages_take_an_eighth() {
        assert!(!free_pages_worth_compacting(330_366_976, 330_371_072));
        assert!(!free_pages_worth_compacting(1125, 1000));
        assert!(free_pages_worth_compacting(1126, 1000));
        assert!(free_pages_worth_compacting(660_000_000, 330_000_000));
    }

    #[test]
    fn steps_from_names() {
        assert_eq!(step_of(Path::new("a/step_000350.safetensors")), Some(350));
        assert_eq!(step_of(Path::new("step-7.safetensors")), Some(7));
        assert_eq!(step_of(Path::new("step_.safetensors")), None);
        assert_eq!(step_of(Path::new("model.safetensors")), None);
        assert_eq!(step_of(Path::new("step_12.bin")), None);
    }
}
