//! `strata verify`, `strata compact`, `strata retain`, `strata age`, `strata tag`, and the
//! warning of a compaction that could not run after a commit.

use std::path::Path;
use std::time::Instant;

use strata_store::{
    AgePolicy, AgeReport, AgeRule, Issue, RetainPolicy, Role, RoleRule, Store, StoreError,
    VerifyReport,
};

use crate::fmt::ms;
use crate::progress::{warn, Output};
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

/// Why a compaction could not run, in words.
fn compaction_blocker(e: &StoreError) -> String {
    if e.is_compaction_blocked_by_read() {
        "another process is reading the store (a reader beside a run in progress, or a strata \
         read command)"
            .to_string()
    } else {
        e.to_string()
    }
}

/// Warns that `what` is committed but the file at `store` was not compacted, and why.
pub(crate) fn warn_deferred(what: &str, reason: &str, store: &Path) {
    warn(format_args!(
        "{what} is committed, but the file was not compacted: {reason}; `strata compact {}` \
         trims it later",
        store.display()
    ));
}

/// [`warn_deferred`] for the error of a compaction.
pub(crate) fn warn_not_compacted(what: &str, e: &StoreError, store: &Path) {
    warn_deferred(what, &compaction_blocker(e), store);
}

/// `strata compact`: fails (nothing changed) while another process reads the store.
pub(crate) fn compact(out: &Output, store: &Path) -> CliResult {
    let path = store;
    let mut store = Store::open(store)?;
    let (before, disk_before) = (store.file_bytes()?, store.disk_bytes()?);
    let spinner = out.spinner("compacting");
    let t = Instant::now();
    let compacted = store.compact();
    let dt = t.elapsed();
    spinner.finish_and_clear();
    match compacted {
        Ok(_) => {}
        Err(e) if e.is_compaction_blocked_by_read() => {
            return Err(CliError::Other(format!(
                "cannot compact {} now: {}; nothing was changed: retry when it is done",
                path.display(),
                compaction_blocker(&e)
            )))
        }
        Err(e) => return Err(e.into()),
    }
    let (file, disk) = closed_sizes(store)?;
    say!(
        "file {before} -> {file} bytes ({disk_before} -> {disk} on disk) in {}",
        ms(dt)
    );
    Ok(())
}

/// Closes a writer's handle and measures the file as it then is (its length, its bytes on
/// disk): the close records redb's allocator state, which may land past the pages a compaction
/// left.
pub(crate) fn closed_sizes(store: Store) -> strata_store::Result<(u64, u64)> {
    let path = store.path().to_path_buf();
    drop(store);
    let closed = Store::open_read_only(&path)?;
    Ok((closed.file_bytes()?, closed.disk_bytes()?))
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
    let path = store;
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
    // Run by hand, a retention gives the disk back: the room the library keeps for the
    // next saves of a training loop (ADR 0037) is compacted here too.
    if !r.compacted {
        if let Err(e) = store.compact() {
            warn_not_compacted("the retention", &e, path);
        }
    }
    // The retention is committed: a file that cannot be measured again is as it measured.
    let after = closed_sizes(store).map_or(r.file_bytes_after, |(file, _)| file);
    say!("file {} -> {after} bytes", r.file_bytes_before);
    Ok(())
}

/// The options of `strata age`.
pub(crate) struct AgeArgs {
    pub(crate) keep_exact_last: usize,
    pub(crate) keep_exact_every: Option<u64>,
    pub(crate) keep_tagged: bool,
    pub(crate) budget: Option<f64>,
    pub(crate) yes: bool,
    pub(crate) dry_run: bool,
    pub(crate) update_budget: Option<f64>,
    pub(crate) no_update_budget: bool,
    pub(crate) exact: Vec<String>,
    pub(crate) budget_for: Vec<String>,
    pub(crate) steps: Option<Vec<u64>>,
    pub(crate) max_chain: u8,
    pub(crate) first_moment_budget: Option<f64>,
    pub(crate) second_moment_budget: Option<f64>,
    pub(crate) exact_moments: bool,
    pub(crate) training_state: bool,
    pub(crate) roles: Vec<String>,
}

/// `strata age`: needs `--budget` (or `--yes`), since it cannot be undone; `--dry-run` runs
/// the pass and rolls it back.
pub(crate) fn age(store: &Path, args: AgeArgs, json: bool) -> CliResult {
    let preset = if args.training_state {
        AgePolicy::training_state()
    } else {
        AgePolicy::default()
    };
    let default = preset.budget;
    let budget = match args.budget {
        Some(b) => b,
        None if args.yes || args.dry_run || args.training_state => default,
        None => {
            return Err(CliError::Usage(format!(
                "aging rewrites old checkpoints lossily and cannot be undone: give --budget E \
                 (the largest relative error of a block, e.g. --budget 1e-3), or --yes to age \
                 at the default budget {default:e}; --dry-run shows what would be aged and the \
                 bytes it would save"
            )))
        }
    };
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
    let mut roles = Vec::new();
    for spec in &args.roles {
        let parsed = spec
            .rsplit_once('=')
            .and_then(|(p, r)| Some((p, Role::parse(r)?)));
        let Some((pattern, role)) = parsed.filter(|(p, _)| !p.is_empty()) else {
            return Err(CliError::Usage(format!(
                "--role {spec:?}: expected PATTERN=ROLE with a role of weight, first-moment, \
                 second-moment, counter or state, e.g. 'opt.*.v=second-moment'"
            )));
        };
        roles.push(RoleRule {
            pattern: pattern.to_string(),
            role,
        });
    }
    let path = store;
    let mut store = Store::open(store)?;
    let policy = AgePolicy {
        keep_exact_last: args.keep_exact_last,
        keep_exact_every: args.keep_exact_every,
        keep_tagged: args.keep_tagged,
        budget,
        update_budget: if args.no_update_budget {
            None
        } else {
            args.update_budget.or(preset.update_budget)
        },
        rules,
        steps: args.steps,
        max_chain: args.max_chain,
        roles,
        first_moment_budget: (!args.exact_moments)
            .then(|| args.first_moment_budget.or(preset.first_moment_budget))
            .flatten(),
        second_moment_budget: (!args.exact_moments)
            .then(|| args.second_moment_budget.or(preset.second_moment_budget))
            .flatten(),
    };
    let r = if args.dry_run {
        store.age_dry_run(&policy)?
    } else {
        store.age(&policy)?
    };
    if json {
        let v = serde_json::json!({
            "dry_run": args.dry_run,
            "budget": budget,
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
            "compaction_deferred": r.compaction_deferred,
        });
        say!("{v}");
    } else {
        print_age_report(&r, budget, args.budget.is_none(), args.dry_run)?;
    }
    if let Some(reason) = &r.compaction_deferred {
        warn_deferred("aging", reason, path);
    }
    Ok(())
}

/// The text report of `strata age` (`defaulted`: the budget was not given).
fn print_age_report(r: &AgeReport, budget: f64, defaulted: bool, dry_run: bool) -> CliResult {
    let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
    let (age, keep, versions) = if dry_run {
        say!("dry run: the pass ran in a transaction that was rolled back; nothing changed");
        ("would age", "would keep exact", "would be aged")
    } else {
        ("aged", "kept exact", "aged")
    };
    let default = if defaulted { " (the default)" } else { "" };
    say!("budget {budget:e}{default}");
    say!("{age} {} checkpoint(s): {}", r.aged.len(), list(&r.aged));
    say!("{keep} {} checkpoint(s): {}", r.kept.len(), list(&r.kept));
    say!(
        "{} tensor versions {versions} (worst rel. error {:.2e}), {} left exact",
        r.versions_aged,
        r.max_rel_error,
        r.versions_exact
    );
    if r.blocks_unmet > 0 {
        say!(
            "{} block(s) kept exact: no quantization step meets a budget of {budget:e}",
            r.blocks_unmet,
        );
    }
    let saved = r.stored_bytes_before.saturating_sub(r.stored_bytes_after);
    if dry_run {
        say!(
            "stored {} -> {} bytes: aging would save {saved} bytes ({:.1} %); the file, {} \
             bytes now, is compacted after the pass to a little over its stored bytes",
            r.stored_bytes_before,
            r.stored_bytes_after,
            100.0 * saved as f64 / r.stored_bytes_before.max(1) as f64,
            r.file_bytes_before
        );
    } else {
        say!(
            "stored {} -> {} bytes, file {} -> {} bytes",
            r.stored_bytes_before,
            r.stored_bytes_after,
            r.file_bytes_before,
            r.file_bytes_after
        );
    }
    Ok(())
}

/// `strata tag`.
pub(crate) fn tag(store: &Path, name: &str, step: u64) -> CliResult {
    let store = Store::open(store)?;
    store.tag(name, step)?;
    say!("tagged checkpoint {step} {name:?}");
    Ok(())
}
