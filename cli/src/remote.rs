//! `strata push`, `strata pull`, `strata remote gc|retain|commit`, and the read commands
//! (`log`, `get`, `export`, `history`) on a remote URL instead of a store file (ADR 0018).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use strata_store::remote::{self, Progress, Remote, RemoteStore};
use strata_store::{to_f64, RetainPolicy, Store};

use crate::fmt::{mb, mb_s, ms, shape};
use crate::inspect::{print_checkpoints, CheckpointRow};
use crate::npy::npy_header;
use crate::progress::Output;
use crate::{CliError, CliResult};

/// Whether a store argument is a remote URL rather than a file.
pub(crate) fn is_url(arg: &Path) -> bool {
    arg.to_str()
        .is_some_and(|s| s.starts_with("s3://") || s.starts_with("file://"))
}

fn url_of(arg: &Path) -> &str {
    arg.to_str().unwrap_or_default()
}

/// The folder of remote read caches: `$STRATA_CACHE_DIR`, else `$XDG_CACHE_HOME/strata/remote`,
/// else `~/.cache/strata/remote`.
fn cache_dir() -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env("STRATA_CACHE_DIR")
        .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("strata/remote")))
        .or_else(|| env("HOME").map(|d| d.join(".cache/strata/remote")))
        .unwrap_or_else(|| std::env::temp_dir().join("strata-remote-cache"))
}

fn open(arg: &Path) -> CliResult<RemoteStore> {
    Ok(Store::open_remote(url_of(arg), cache_dir())?)
}

/// A progress callback that drives a byte bar.
fn bar_progress(bar: &indicatif::ProgressBar) -> impl Fn(Progress) + Sync + '_ {
    move |p: Progress| {
        bar.set_length(p.bytes_total);
        bar.set_position(p.bytes_done);
    }
}

/// `strata push STORE URL`, or with `--part` one process's part of checkpoint `--step`.
pub(crate) fn push(out: &Output, store: &Path, url: &str, part: Option<(&str, u64)>) -> CliResult {
    let store = Store::open_read_only(store)?;
    let remote = Remote::open(url)?;
    let t = Instant::now();
    if let Some((name, step)) = part {
        let r = remote::push_part(&store, &remote, step, name)?;
        say!(
            "pushed part {name:?} of step {step} to {url}: {} segments, {} bytes sent ({} present)",
            r.segments_sent,
            r.bytes_sent,
            r.segments_present
        );
        return Ok(());
    }
    let bar = out.bar(0, true);
    let r = remote::push(&store, &remote, Some(&bar_progress(&bar)))?;
    bar.finish_and_clear();
    let c = remote.counts();
    say!(
        "pushed {} checkpoint(s) to {url} ({} already there): {} segments, {} bytes sent, {} segments present, {} tags; {} requests in {}",
        r.steps_sent.len(),
        r.steps_present,
        r.segments_sent,
        r.bytes_sent,
        r.segments_present,
        r.tags_sent,
        c.requests,
        ms(t.elapsed())
    );
    if r.segments_repaired > 0 {
        say!(
            "repaired {url}: {} segment(s) its checkpoints name were missing (a gc raced a push) and were sent again",
            r.segments_repaired
        );
    }
    Ok(())
}

/// `strata pull URL STORE`.
pub(crate) fn pull(out: &Output, url: &str, store: &Path) -> CliResult {
    let store = Store::open(store)?;
    let remote = Remote::open(url)?;
    let t = Instant::now();
    let bar = out.bar(0, true);
    let r = remote::pull(&remote, &store, Some(&bar_progress(&bar)))?;
    bar.finish_and_clear();
    say!(
        "pulled {} checkpoint(s) from {url} ({} already here): {} segments, {} bytes received, {} tags; {}",
        r.steps_received.len(),
        r.steps_present,
        r.segments_received,
        r.bytes_received,
        r.tags_received,
        mb_s(r.bytes_received, t.elapsed())
    );
    Ok(())
}

/// `strata remote gc URL` (`segments_ahead_hours`, hidden, for the race tests).
pub(crate) fn gc(url: &str, grace_hours: f64, segments_ahead_hours: f64) -> CliResult {
    let hours = |flag: &str, h: f64| {
        if h.is_finite() && h >= 0.0 {
            Ok(Duration::from_secs_f64(h * 3600.0))
        } else {
            Err(CliError::Usage(format!(
                "--{flag} {h}: expected a number of hours"
            )))
        }
    };
    let grace = hours("grace-hours", grace_hours)?;
    let ahead = hours("segments-ahead-hours", segments_ahead_hours)?;
    let remote = Remote::open(url)?;
    let r = if ahead.is_zero() {
        remote::gc(&remote, grace)?
    } else {
        remote::gc_with_segments_aged(&remote, grace, ahead)?
    };
    say!(
        "gc {url}: {} segments deleted ({} bytes), {} kept, {} unnamed but younger than the grace period; {} old manifests deleted",
        r.segments_deleted,
        r.bytes_deleted,
        r.segments_kept,
        r.segments_young,
        r.manifests_deleted
    );
    if r.segments_left > 0 {
        say!(
            "gc {url}: {} old unnamed segments left for the next gc (this one reached the end of the time its lease allows for deletes)",
            r.segments_left
        );
    }
    Ok(())
}

/// `strata remote retain URL`.
pub(crate) fn retain(url: &str, policy: &RetainPolicy) -> CliResult {
    let remote = Remote::open(url)?;
    let deleted = remote::retain(&remote, policy)?;
    say!(
        "retain {url}: deleted {} checkpoint(s) {:?}; their segments go at the next gc past the grace period",
        deleted.len(),
        deleted
    );
    Ok(())
}

/// `strata remote commit URL --step S`.
pub(crate) fn commit(url: &str, step: u64, metadata: &str) -> CliResult {
    let remote = Remote::open(url)?;
    let n = remote::commit_parts(&remote, step, metadata)?;
    say!("committed step {step} in {url}: {n} tensors");
    Ok(())
}

/// `strata log URL [TENSOR]`.
pub(crate) fn log(arg: &Path, tensor: Option<&str>) -> CliResult {
    let rs = open(arg)?;
    if let Some(name) = tensor {
        let versions = rs.versions(name);
        if versions.is_empty() {
            return Err(CliError::Other(format!(
                "no tensor named {name:?} in {}",
                url_of(arg)
            )));
        }
        say!("{name}: versions at steps {versions:?}");
        return Ok(());
    }
    let mut rows = Vec::new();
    for step in rs.checkpoints() {
        let (raw, stored) = rs.checkpoint_sizes(step)?;
        rows.push(CheckpointRow {
            step,
            tensors: rs.checkpoint_tensors(step)?.len(),
            raw,
            stored,
            tags: rs
                .tags()
                .iter()
                .filter(|(_, s)| *s == step)
                .map(|(t, _)| t.clone())
                .collect(),
            // A remote holds exact versions only.
            aged: None,
        });
    }
    print_checkpoints(&rows)
}

/// `strata get URL TENSOR --step S`.
pub(crate) fn get(
    arg: &Path,
    tensor: &str,
    step: u64,
    at: bool,
    output: Option<&Path>,
) -> CliResult {
    let rs = open(arg)?;
    let t = Instant::now();
    let (found, data) = if at {
        rs.get_at(tensor, step)?
    } else {
        (step, rs.get(tensor, step)?)
    };
    let dt = t.elapsed();
    let c = rs.counts();
    let what = format!(
        "{tensor} step {found}: {} {}, {} bytes, read in {} ({} requests, {} bytes fetched)",
        data.dtype,
        shape(&data.shape),
        data.data.len(),
        ms(dt),
        c.requests,
        c.bytes_in
    );
    match output {
        Some(path) => {
            let mut bytes = npy_header(data.dtype, &data.shape);
            bytes.extend_from_slice(&data.data);
            std::fs::write(path, bytes).map_err(|source| CliError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            say!("wrote {}: {what}", path.display());
        }
        None => {
            say!("{what}");
            let n = 8usize.min(data.data.len() / data.dtype.size().max(1));
            let head: Vec<String> = to_f64(data.dtype, &data.data[..n * data.dtype.size()])
                .iter()
                .take(8)
                .map(|v| format!("{v:.6}"))
                .collect();
            say!("[{}]", head.join(", "));
        }
    }
    Ok(())
}

/// `strata export URL --step S -o FILE`.
pub(crate) fn export(out: &Output, arg: &Path, step: u64, output: &Path) -> CliResult {
    let rs = open(arg)?;
    let spinner = out.spinner("fetching and exporting");
    let t = Instant::now();
    let r = rs.export_safetensors(step, output)?;
    let dt = t.elapsed();
    spinner.finish_and_clear();
    let c = rs.counts();
    say!(
        "wrote {}: step {step}, {} tensors, raw {}, {}; {} requests, {} bytes fetched",
        output.display(),
        r.tensors,
        mb(r.raw_bytes),
        mb_s(r.raw_bytes, dt),
        c.requests,
        c.bytes_in
    );
    Ok(())
}

/// `strata history URL TENSOR --index I[..J]`.
pub(crate) fn history(
    arg: &Path,
    tensor: &str,
    elems: std::ops::Range<u64>,
    steps: std::ops::RangeInclusive<u64>,
    json: bool,
) -> CliResult {
    let rs = open(arg)?;
    let rows = rs.history(tensor, elems.clone(), steps)?;
    crate::read::print_history(tensor, &elems, &rows, Duration::ZERO, json)
}
