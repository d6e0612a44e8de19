//! `strata log` and `strata stats`: what the store holds, without decoding data.

use std::collections::BTreeMap;
use std::path::Path;

use strata_store::{BlockEncoding, Store, Tier};

use crate::fmt::shape;
use crate::CliResult;

/// How a version's blocks are stored, in a few words.
pub(crate) fn encoding(blocks: &[BlockEncoding]) -> String {
    if blocks.iter().any(|b| b.tier != Tier::Exact) {
        // A tiered version: how many blocks sit at each tier.
        let mut parts = Vec::new();
        for t in Tier::ALL.iter().rev() {
            let n = blocks.iter().filter(|b| b.tier == *t).count();
            if n > 0 {
                parts.push(format!("{n} {t}"));
            }
        }
        return format!("{} blocks: {}", blocks.len(), parts.join(" + "));
    }
    if let [b] = blocks {
        // A reference shares an earlier block's segment (its record is that block's).
        return match (b.base, b.reference) {
            _ if b.inline => "inline (exact, in its record or its checkpoint's pack)".into(),
            (_, true) => format!("reference (no new segment), depth {}", b.depth),
            (None, false) => "keyframe".into(),
            (Some(base), false) => format!("delta on {base}, depth {}", b.depth),
        };
    }
    let keys = blocks
        .iter()
        .filter(|b| b.base.is_none() && !b.reference)
        .count();
    let refs = blocks.iter().filter(|b| b.reference).count();
    let deltas = blocks.len() - keys - refs;
    let depth = blocks.iter().map(|b| b.depth).max().unwrap_or(0);
    let mut parts = Vec::new();
    for (n, what) in [(keys, "keyframe"), (deltas, "delta"), (refs, "reference")] {
        if n > 0 {
            parts.push(format!("{n} {what}"));
        }
    }
    format!(
        "{} blocks: {}, depth <= {depth}",
        blocks.len(),
        parts.join(" + ")
    )
}

/// `strata log`.
pub(crate) fn log(store: &Path, tensor: Option<&str>) -> CliResult {
    if crate::remote::is_url(store) {
        return crate::remote::log(store, tensor);
    }
    let store = Store::open_read_only(store)?;
    match tensor {
        Some(name) => log_tensor(&store, name),
        None => log_checkpoints(&store),
    }
}

fn log_tensor(store: &Store, name: &str) -> CliResult {
    say!(
        "{:>10}  {:5}  {:16}  {:>12}  {:>12}  encoding",
        "step",
        "dtype",
        "shape",
        "raw bytes",
        "stored bytes"
    );
    for v in store.versions(name)? {
        let aged = v
            .aged
            .map(|e| format!(", aged (rel. error {e:.2e})"))
            .unwrap_or_default();
        say!(
            "{:>10}  {:5}  {:16}  {:>12}  {:>12}  {}{aged}",
            v.step,
            v.dtype.to_string(),
            shape(&v.shape),
            v.raw_bytes,
            v.stored_bytes,
            encoding(&v.encodings)
        );
    }
    Ok(())
}

fn log_checkpoints(store: &Store) -> CliResult {
    let mut tags: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for (tag, step) in store.tags()? {
        tags.entry(step).or_default().push(tag);
    }
    let rows: Vec<CheckpointRow> = store
        .checkpoint_summaries()?
        .into_iter()
        .map(|c| CheckpointRow {
            step: c.step,
            tensors: c.tensors,
            raw: c.raw_bytes,
            stored: c.stored_bytes,
            tags: tags.remove(&c.step).unwrap_or_default(),
            aged: c.aged,
        })
        .collect();
    print_checkpoints(&rows)
}

/// One line of `strata log`'s checkpoint table.
pub(crate) struct CheckpointRow {
    pub(crate) step: u64,
    pub(crate) tensors: usize,
    pub(crate) raw: u64,
    pub(crate) stored: u64,
    pub(crate) tags: Vec<String>,
    /// The worst measured error of the checkpoint's aged versions, if it was aged.
    pub(crate) aged: Option<f64>,
}

/// Prints `strata log`'s checkpoint table (of a store or a remote).
pub(crate) fn print_checkpoints(rows: &[CheckpointRow]) -> CliResult {
    if rows.is_empty() {
        say!("no checkpoints");
        return Ok(());
    }
    say!(
        "{:>10}  {:>7}  {:>12}  {:>12}  tags",
        "step",
        "tensors",
        "raw bytes",
        "stored bytes"
    );
    for r in rows {
        let mut notes = r.tags.clone();
        if let Some(e) = r.aged {
            notes.push(format!("(aged, rel. error <= {e:.2e})"));
        }
        let row = format!(
            "{:>10}  {:>7}  {:>12}  {:>12}  {}",
            r.step,
            r.tensors,
            r.raw,
            r.stored,
            notes.join(", ")
        );
        say!("{}", row.trim_end());
    }
    Ok(())
}

/// `strata stats`. The one ratio is raw bytes over bytes on disk
/// ([`strata_store::StoreStats::ratio`]);
/// per tensor, raw bytes over stored bytes is named as such.
pub(crate) fn stats(store: &Path, json: bool) -> CliResult {
    let store = Store::open_read_only(store)?;
    let s = store.stats()?;
    let raw_over_stored = |raw: u64, stored: u64| raw as f64 / stored.max(1) as f64;
    if json {
        let tensors: Vec<serde_json::Value> = s
            .tensors
            .iter()
            .map(|t| {
                serde_json::json!({
                    "name": t.name,
                    "versions": t.versions,
                    "raw_bytes": t.raw_bytes,
                    "stored_bytes": t.stored_bytes,
                })
            })
            .collect();
        let doc = serde_json::json!({
            "path": store.path().display().to_string(),
            "raw_bytes": s.raw_bytes,
            "stored_bytes": s.stored_bytes,
            "segment_bytes": s.segment_bytes,
            "metadata_bytes": s.metadata_bytes,
            "file_bytes": s.file_bytes,
            "disk_bytes": s.disk_bytes,
            "ratio": s.ratio(),
            "segments": s.segments,
            "versions": s.versions,
            "checkpoints": s.checkpoints,
            "tier_bytes": s.tier_bytes,
            "packed_bytes": s.packed_bytes,
            "tensors": tensors,
        });
        say!("{doc:#}");
        return Ok(());
    }
    say!(
        "{:40}  {:>8}  {:>12}  {:>12}  {:>10}",
        "tensor",
        "versions",
        "raw bytes",
        "stored bytes",
        "raw/stored"
    );
    for t in &s.tensors {
        say!(
            "{:40}  {:>8}  {:>12}  {:>12}  {:>10.3}",
            t.name,
            t.versions,
            t.raw_bytes,
            t.stored_bytes,
            raw_over_stored(t.raw_bytes, t.stored_bytes)
        );
    }
    say!(
        "total: {} versions, {} checkpoints, raw {} bytes, stored {} bytes, file {} bytes \
         ({} on disk), ratio {:.3} (raw / bytes on disk)",
        s.versions,
        s.checkpoints,
        s.raw_bytes,
        s.stored_bytes,
        s.file_bytes,
        s.disk_bytes,
        s.ratio()
    );
    Ok(())
}
