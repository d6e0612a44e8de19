//! `strata verify`, `strata compact`, `strata retain`, `strata tag`.

use std::path::Path;
use std::time::Instant;

use strata_store::{AgePolicy, AgeRule, Issue, RetainPolicy, Store, VerifyReport};

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

/// `strata compact`.
pub(crate) fn compact(out: &Output, store: &Path) -> CliResult {
    let mut store = Store::open(store)?;
    let (before, disk_before) = (store.file_bytes()?, store.disk_bytes()?);
    let spinner = out.spinner("compacting");
    let t = Instant::now();
    store.compact()?;
    let dt = t.elapsed();
    spinner.finish_and_clear();
    say!(
        "file {before} -> {} bytes ({disk_before} -> {} on disk) in {}",
        store.file_bytes()?,
        store.disk_bytes()?,
        ms(dt)
    );
    Ok(())
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

/// The options of `strata age`.
pub(crate) struct AgeArgs {
    pub(crate) keep_exact_last: usize,
    pub(crate) keep_exact_every: Option<u64>,
    pub(crate) keep_tagged: bool,
    pub(crate) budget: f64,
    pub(crate) update_budget: Option<f64>,
    pub(crate) exact: Vec<String>,
    pub(crate) budget_for: Vec<String>,
    pub(crate) steps: Option<Vec<u64>>,
    pub(crate) max_chain: u8,
}

/// `strata age`.
pub(crate) fn age(store: &Path, args: AgeArgs, json: bool) -> CliResult {
    let mut rules: Vec<AgeRule> = args
        .exact
        .into_iter()
        .map(|pattern| AgeRule {
            pattern,
            budget: None,
        })
        .collect();
    for spec in &args.budget_for {
        let parsed = spec
            .rsplit_once('=')
            .and_then(|(p, e)| Some((p, e.parse::<f64>().ok()?)));
        let Some((pattern, budget)) = parsed.filter(|(p, _)| !p.is_empty()) else {
            return Err(CliError::Usage(format!(
                "--budget-for {spec:?}: expected PATTERN=ERROR, e.g. 'blocks.*=3e-3'"
            )));
        };
        rules.push(AgeRule {
            pattern: pattern.to_string(),
            budget: Some(budget),
        });
    }
    let mut store = Store::open(store)?;
    let r = store.age(&AgePolicy {
        keep_exact_last: args.keep_exact_last,
        keep_exact_every: args.keep_exact_every,
        keep_tagged: args.keep_tagged,
        budget: args.budget,
        update_budget: args.update_budget,
        rules,
        steps: args.steps,
        max_chain: args.max_chain,
    })?;
    if json {
        let v = serde_json::json!({
            "aged": r.aged,
            "kept": r.kept,
            "versions_aged": r.versions_aged,
            "versions_exact": r.versions_exact,
            "blocks_unmet": r.blocks_unmet,
            "max_rel_error": r.max_rel_error,
            "stored_bytes_before": r.stored_bytes_before,
            "stored_bytes_after": r.stored_bytes_after,
            "file_bytes_before": r.file_bytes_before,
            "file_bytes_after": r.file_bytes_after,
            "compacted": r.compacted,
        });
        say!("{v}");
        return Ok(());
    }
    let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
    say!("aged {} checkpoint(s): {}", r.aged.len(), list(&r.aged));
    say!(
        "kept exact {} checkpoint(s): {}",
        r.kept.len(),
        list(&r.kept)
    );
    say!(
        "{} tensor versions aged (worst rel. error {:.2e}), {} left exact",
        r.versions_aged,
        r.max_rel_error,
        r.versions_exact
    );
    if r.blocks_unmet > 0 {
        say!(
            "{} block(s) kept exact: no quantization step meets a budget of {:e}",
            r.blocks_unmet,
            args.budget
        );
    }
    say!(
        "stored {} -> {} bytes, file {} -> {} bytes{}",
        r.stored_bytes_before,
        r.stored_bytes_after,
        r.file_bytes_before,
        r.file_bytes_after,
        if r.compacted {
            ""
        } else {
            " (not compacted: a read is in progress in another process)"
        }
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
