//! `strata verify`, `strata retain`, `strata tag`.

use std::path::Path;
use std::time::Instant;

use strata_store::{Issue, RetainPolicy, Store, VerifyReport};

use crate::fmt::ms;
use crate::progress::Output;
use crate::{CliError, CliResult};

/// One line per issue: tensor, step, block, error.
pub(crate) fn describe(issue: &Issue) -> String {
    match issue {
        Issue::Block {
            tensor,
            step,
            block,
            error,
        } => {
            // The error names the block it failed on; name the one verified if it differs
            // (a block whose base is damaged).
            let this = format!("tensor {tensor:?} step {step} block {block}: ");
            let text = error.to_string();
            if text.starts_with(&this) {
                text
            } else {
                format!("{this}{text}")
            }
        }
        Issue::Version {
            tensor,
            step,
            error,
        } => {
            let this = format!("tensor {tensor:?} step {step}");
            let text = error.to_string();
            if text.contains(&this) {
                text
            } else {
                format!("{this}: {text}")
            }
        }
        other => other.to_string(),
    }
}

/// A one-line summary of a clean report.
pub(crate) fn summary(r: &VerifyReport) -> String {
    format!(
        "{} versions, {} blocks, {} segments, {} checkpoints",
        r.versions, r.blocks, r.segments, r.checkpoints
    )
}

/// `strata verify`: exit status 1 when anything is corrupt.
pub(crate) fn verify(out: &Output, store: &Path) -> CliResult {
    let store = Store::open_read_only(store)?;
    let spinner = out.spinner("verifying");
    let t = Instant::now();
    let report = store.verify()?;
    let dt = t.elapsed();
    spinner.finish_and_clear();
    if report.is_ok() {
        say!("verify OK: {} in {}", summary(&report), ms(dt));
        return Ok(());
    }
    for issue in &report.issues {
        say!("{}", describe(issue));
    }
    Err(CliError::Corrupt(report.issues.len()))
}

/// `strata retain`.
pub(crate) fn retain(
    store: &Path,
    keep_last: Option<usize>,
    keep_every: Option<u64>,
    keep_tagged: bool,
) -> CliResult {
    if keep_last.is_none() && keep_every.is_none() {
        return Err(CliError::Usage(
            "give --keep-last and/or --keep-every".into(),
        ));
    }
    let mut store = Store::open(store)?;
    let r = store.retain(&RetainPolicy {
        keep_last,
        keep_every,
        keep_tagged,
    })?;
    let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
    say!("kept {} checkpoint(s): {}", r.kept.len(), list(&r.kept));
    say!(
        "removed {} checkpoint(s) ({} tensor versions): {}",
        r.removed.len(),
        r.versions_removed,
        list(&r.removed)
    );
    say!(
        "file {} -> {} bytes",
        r.file_bytes_before,
        r.file_bytes_after
    );
    Ok(())
}

/// `strata tag`.
pub(crate) fn tag(store: &Path, name: &str, step: u64) -> CliResult {
    let store = Store::open(store)?;
    store.tag(name, step)?;
    say!("tagged checkpoint {step} {name:?}");
    Ok(())
}
