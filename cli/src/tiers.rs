//! `strata policy` and `strata maintain`.

use std::path::Path;

use strata_store::{Residual, Store, Tier, TierPolicy};

use crate::maintain::{closed_sizes, warn_not_compacted};
use crate::{CliError, CliResult};

/// The flags of `strata policy`.
#[derive(Debug)]
pub(crate) struct PolicyArgs {
    pub(crate) tiered: Option<String>,
    pub(crate) pinned: Option<String>,
    pub(crate) pin: bool,
    pub(crate) remove: bool,
    pub(crate) residual: Option<String>,
}

fn tier(name: &str) -> CliResult<Tier> {
    Tier::ALL
        .into_iter()
        .find(|t| t.name() == name && t.bits().is_some())
        .ok_or_else(|| CliError::Usage(format!("{name:?}: expected hot8, warm7, warm5 or cold3")))
}

fn residual(text: &str) -> CliResult<Residual> {
    if text == "exact" {
        return Ok(Residual::Exact);
    }
    let fraction = text
        .strip_prefix("topk:")
        .and_then(|f| f.parse::<f32>().ok())
        .ok_or_else(|| CliError::Usage(format!("--residual {text:?}: expected exact or topk:F")))?;
    Ok(Residual::TopK { fraction })
}

fn describe(p: &TierPolicy) -> String {
    let mut s = match p.policy {
        strata_store::tiering::Policy::Exact => "exact".to_string(),
        strata_store::tiering::Policy::Tiered { start } => format!("tiered from {start}"),
        strata_store::tiering::Policy::Pinned(t) => format!("pinned at {t}"),
    };
    match p.residual {
        Residual::None => {}
        Residual::Exact => s.push_str(", exact residual"),
        Residual::TopK { fraction } => s.push_str(&format!(", top-{fraction} residual")),
    }
    if p.reconstruct != strata_store::Reconstruct::None {
        s.push_str(", Tier 0 rebuild");
    }
    s
}

/// `strata policy`.
pub(crate) fn policy(store: &Path, pattern: Option<&str>, args: PolicyArgs) -> CliResult {
    let store = Store::open(store)?;
    let Some(pattern) = pattern else {
        let rules = store.policies();
        if rules.is_empty() {
            say!("no tier policy rules: every tensor is exact");
        }
        for (pattern, pin, policy) in rules {
            let kind = if pin { "pin" } else { "rule" };
            say!("{kind:4}  {pattern:32}  {}", describe(&policy));
        }
        return Ok(());
    };
    if args.remove {
        store.remove_policy(pattern)?;
        say!("removed the rule {pattern:?}");
        return Ok(());
    }
    if args.pin {
        store.pin(pattern)?;
        say!("pinned {pattern:?} exact");
        return Ok(());
    }
    let mut p = match (&args.tiered, &args.pinned) {
        (Some(t), None) => TierPolicy::tiered(tier(t)?),
        (None, Some(t)) => TierPolicy::pinned(tier(t)?),
        _ => {
            return Err(CliError::Usage(
                "give one of --tiered TIER, --pinned TIER, --pin or --remove".into(),
            ))
        }
    };
    if let Some(r) = &args.residual {
        p = p.with_residual(residual(r)?);
    }
    store.set_policy(pattern, p.clone())?;
    say!("{pattern:?}: {}", describe(&p));
    Ok(())
}

/// `strata maintain`.
pub(crate) fn maintain(store: &Path, now: Option<u64>) -> CliResult {
    let path = store;
    let mut store = Store::open(store)?;
    let now = now.unwrap_or_else(|| store.options().tiering.clock.now());
    let before = store.file_bytes()?;
    let r = store.maintain(now)?;
    // Re-encoded blocks leave their old pages free: give them back. The pass is committed:
    // a compaction that cannot run is a warning.
    let compacted = r.bytes_written > 0
        && match store.compact() {
            Ok(_) => true,
            Err(e) => {
                warn_not_compacted("the maintenance pass", &e, path);
                false
            }
        };
    say!(
        "{} moves, {} versions converted, {} bytes written, warm bytes {} -> {}, {} deferred",
        r.moves,
        r.converted,
        r.bytes_written,
        r.warm_bytes_before,
        r.warm_bytes_after,
        r.deferred
    );
    // The pass is committed: a file that cannot be measured again is as it measured.
    let after = store.file_bytes()?;
    let after = closed_sizes(store).map_or(after, |(file, _)| file);
    say!(
        "file {before} -> {after} bytes{}",
        if compacted { " (compacted)" } else { "" }
    );
    Ok(())
}
