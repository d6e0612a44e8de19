//! `strata`: the command-line tool of a Strata store (import and export safetensors, read
//! tensors, history, stats, verify, retention, tags, and a demo).
//!
//! Exit status: 0 on success, 1 on a failure (or a corrupt store for `verify`), 2 on a usage
//! error.
//!
//! A crate of its own, beside the library (ADR 0009): programs that embed `strata-store` do
//! not build clap, indicatif or mimalloc. `cargo install --path cli` installs `strata`.

#![forbid(unsafe_code)]

/// mimalloc keeps freed pages for reuse: importing a checkpoint allocates and frees about
/// three times its size in block buffers, and the system allocator's fresh pages cost a page
/// fault each (measured in the store issue's closing note).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `println!` that returns [`CliError::BrokenPipe`] from the calling function when stdout is
/// closed, instead of panicking.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::progress::write_line(format_args!($($arg)*))?
    };
}

mod demo;
mod fmt;
mod import;
mod inspect;
mod maintain;
mod npy;
mod progress;
mod read;
mod remote;
mod synth;
mod tiers;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use strata_store::remote::RemoteError;
use strata_store::{raised_in_engine, RetainPolicy, StoreError};

/// Strata: an embedded store for tensors that change over time.
#[derive(Debug, Parser)]
#[command(
    name = "strata",
    version,
    about = "Strata: an embedded store for tensors that change over time",
    long_about = None
)]
struct Cli {
    /// Hide progress bars (they are hidden anyway when stdout is not a terminal).
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Import safetensors files, one checkpoint per file (every file is checked before the
    /// first is imported); compact the store after if its file holds more than an eighth of
    /// free pages on disk (a warning, not an error, if it cannot); the room redb grew the file
    /// by is cut off its end without a compaction.
    Import {
        /// The store file (created if missing).
        store: PathBuf,
        /// safetensors files, or folders of step_N.safetensors files (step from the name).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// The step of the checkpoint (only with a single file).
        #[arg(long)]
        step: Option<u64>,
        /// Skip files whose step already has a checkpoint (resume an interrupted import).
        #[arg(long)]
        skip_existing: bool,
        /// Never compact the store at the end (its close still cuts the free pages off the
        /// file's end, which reads no page).
        #[arg(long)]
        no_compact: bool,
    },
    /// Export a checkpoint to a safetensors file.
    Export {
        /// The store file.
        store: PathBuf,
        /// Step of the checkpoint.
        #[arg(long)]
        step: u64,
        /// The safetensors file to write.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Read one tensor at a step; write it as .npy, or print a summary (with its fidelity:
    /// exact, or what a tier's bound is) and its first values.
    Get {
        /// The store file.
        store: PathBuf,
        /// Tensor name.
        tensor: String,
        /// Step of the version.
        #[arg(long)]
        step: u64,
        /// Take the latest version at or before --step.
        #[arg(long)]
        at: bool,
        /// Print the summary as JSON (tensor, step, dtype, shape, bytes, fidelity, read_ms,
        /// output, head).
        #[arg(long)]
        json: bool,
        /// The .npy file to write (bf16 is written as '<u2' raw bits, the 8-bit floats as '|u1').
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Values of elements of one tensor across its versions (one decode per block per
    /// version).
    History {
        /// The store file.
        store: PathBuf,
        /// Tensor name.
        tensor: String,
        /// Flat element index `I`, or range `I..J` (J excluded).
        #[arg(long)]
        index: String,
        /// First step (default: the first version).
        #[arg(long)]
        from: Option<u64>,
        /// Last step, included (default: the last version).
        #[arg(long)]
        to: Option<u64>,
        /// Print JSON: one object per version.
        #[arg(long)]
        json: bool,
    },
    /// List checkpoints, or the versions of one tensor with their encoding.
    Log {
        /// The store file.
        store: PathBuf,
        /// A tensor name: list its versions.
        tensor: Option<String>,
    },
    /// Raw, stored, file and on-disk sizes, per tensor and in total, and the store's ratio
    /// (raw bytes / bytes on disk).
    Stats {
        /// The store file.
        store: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Read every block back and audit the store; exit 1 if anything is corrupt.
    Verify {
        /// The store file.
        store: PathBuf,
    },
    /// Move the file's pages to its front and trim the free space after them (pages freed in
    /// the middle of the file; a writer's close cuts only the free pages at its end).
    Compact {
        /// The store file.
        store: PathBuf,
    },
    /// Delete checkpoints not kept by the policy, then compact (always, even where the library
    /// keeps the room one deleted checkpoint frees for the next save).
    Retain {
        /// The store file.
        store: PathBuf,
        /// Keep the N latest checkpoints.
        #[arg(long)]
        keep_last: Option<usize>,
        /// Keep every checkpoint whose step is a multiple of K.
        #[arg(long)]
        keep_every: Option<u64>,
        /// Delete tagged checkpoints too when the rules do not keep them.
        #[arg(long)]
        no_keep_tagged: bool,
    },
    /// Re-encode old checkpoints lossy under an error budget (ADR 0020): the last N, every
    /// K-th and tagged checkpoints stay exact; so do scalars, 1-D weights (norms, biases),
    /// counters and pinned tensors (the moments of norms and biases age by their role). Reads of aged versions report the error measured when they were aged. Cannot be
    /// undone: needs --budget (or --yes); --dry-run shows what it would do.
    Age {
        /// The store file.
        store: PathBuf,
        /// Keep the N latest checkpoints exact (at least 1).
        #[arg(long, default_value_t = 2)]
        keep_exact_last: usize,
        /// Keep every checkpoint whose step is a multiple of K exact.
        #[arg(long)]
        keep_exact_every: Option<u64>,
        /// Age tagged checkpoints too when the rules do not keep them (the `lightning:` tags
        /// of strata.lightning's pointer files never keep a checkpoint exact).
        #[arg(long)]
        no_keep_tagged: bool,
        /// Largest relative Frobenius error of each block of a 2-D (or larger) tensor. Aging
        /// cannot be undone: it needs this, or --yes for the default (1e-3).
        #[arg(long)]
        budget: Option<f64>,
        /// Age at the default budget (1e-3) without --budget.
        #[arg(long)]
        yes: bool,
        /// Run the pass and roll it back: print what would be aged, the errors and the bytes
        /// it would save, and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Largest error of a block relative to its distance from the newer version it is a
        /// delta against (below 1: an old checkpoint never turns into a newer one; default
        /// 0.5, 0.8 with --training-state).
        #[arg(long, conflicts_with = "no_update_budget")]
        update_budget: Option<f64>,
        /// No bound relative to the distance from the newer version: --budget alone.
        #[arg(long)]
        no_update_budget: bool,
        /// Keep tensors matching this pattern exact (repeatable).
        #[arg(long, value_name = "PATTERN")]
        exact: Vec<String>,
        /// A budget for tensors matching a pattern, as PATTERN=ERROR (repeatable; beats
        /// --budget and the rule for scalars and 1-D weights; the first matching --exact or --budget-for wins, in
        /// the order given, --exact first).
        #[arg(long, value_name = "PATTERN=ERROR")]
        budget_for: Vec<String>,
        /// Age only these checkpoints (comma-separated steps); refused if the rules keep one.
        #[arg(long, value_delimiter = ',')]
        steps: Option<Vec<u64>>,
        /// Most segments a read of an aged block decodes (2: every aged version a delta
        /// against an exact one).
        #[arg(long, default_value_t = strata_store::DEFAULT_AGE_CHAIN)]
        max_chain: u8,
        /// Largest relative Frobenius error of a block of an optimizer's first moment
        /// (Adam's exp_avg; ADR 0027; 1: may read back as zeros; default 1e-2, 1 with
        /// --training-state).
        #[arg(long)]
        first_moment_budget: Option<f64>,
        /// Largest relative error of each element of an optimizer's second moment (Adam's
        /// exp_avg_sq), aged in the log-relative mode: never below zero (default 1e-2, 0.5
        /// with --training-state).
        #[arg(long)]
        second_moment_budget: Option<f64>,
        /// Full training-state checkpoints (weights and optimizer state): the budgets
        /// measured to keep training resumed from every aged checkpoint within 1 % of the
        /// exact one (weights 5e-2 and update budget 0.8, first moments 1, second moments
        /// 0.5; ADR 0027). Explicit flags beat it; it counts as a budget (no --yes needed).
        #[arg(long)]
        training_state: bool,
        /// Keep optimizer moments exact (weights still age).
        #[arg(long)]
        exact_moments: bool,
        /// The role of tensors matching a pattern, as PATTERN=ROLE (weight, first-moment,
        /// second-moment, counter, state; repeatable, first match first): where the names do
        /// not say (roles are read from the names trainers give optimizer state).
        #[arg(long, value_name = "PATTERN=ROLE")]
        role: Vec<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Set, pin, remove or list tier policy rules (no pattern: list them).
    Policy {
        /// The store file.
        store: PathBuf,
        /// Tensor name pattern (`*` any run of characters, `?` one character).
        pattern: Option<String>,
        /// Tiered, starting at this tier: hot8, warm7, warm5 or cold3.
        #[arg(long, value_name = "TIER", conflicts_with_all = ["pin", "remove", "pinned"])]
        tiered: Option<String>,
        /// Held at this quantized tier forever.
        #[arg(long, value_name = "TIER", conflicts_with_all = ["pin", "remove"])]
        pinned: Option<String>,
        /// Always exact, whatever other rules say.
        #[arg(long, conflicts_with = "remove")]
        pin: bool,
        /// Remove the rule with this pattern.
        #[arg(long)]
        remove: bool,
        /// What lossy blocks keep: `exact` (an exact XOR residual) or `topk:F` (the fraction
        /// F of largest errors).
        #[arg(long)]
        residual: Option<String>,
    },
    /// Run one tier maintenance pass: move blocks between tiers by their read scores.
    Maintain {
        /// The store file.
        store: PathBuf,
        /// The time of the pass in milliseconds since the Unix epoch (default: now).
        #[arg(long)]
        now: Option<u64>,
    },
    /// Name a checkpoint.
    Tag {
        /// The store file.
        store: PathBuf,
        /// Tag name.
        name: String,
        /// Step of the checkpoint.
        #[arg(long)]
        step: u64,
    },
    /// Send the store's checkpoints the remote lacks (only the segments it lacks), then their
    /// tags. URL: s3://bucket/prefix (AWS_* environment variables; AWS_ENDPOINT_URL for an
    /// S3-compatible server) or file:///path.
    Push {
        /// The store file.
        store: PathBuf,
        /// The remote.
        url: String,
        /// Push checkpoint --step as this process's part of it (a rank's shard); `strata
        /// remote commit` joins the parts.
        #[arg(long, requires = "step")]
        part: Option<String>,
        /// The step of the part.
        #[arg(long, requires = "part")]
        step: Option<u64>,
    },
    /// Bring the remote's checkpoints the store lacks into it (created if missing).
    Pull {
        /// The remote.
        url: String,
        /// The store file.
        store: PathBuf,
    },
    /// Retention, garbage collection and joining parts on a remote.
    Remote {
        #[command(subcommand)]
        command: RemoteCommand,
    },
    /// Import a real (or synthetic) fine-tuning series and show what the store does.
    Demo {
        /// Folder for the demo store (default: the workspace's target/ or a temp folder).
        dir: Option<PathBuf>,
        /// Use the synthetic series even when the real one is there.
        #[arg(long)]
        synthetic: bool,
    },
}

/// `strata remote ...`.
#[derive(Debug, Subcommand)]
enum RemoteCommand {
    /// Delete the remote's checkpoints the policy does not keep (their manifests go to the
    /// trash; `gc` removes what only they named, after the grace period).
    Retain {
        /// The remote.
        url: String,
        /// Keep the N latest checkpoints.
        #[arg(long)]
        keep_last: Option<usize>,
        /// Keep every checkpoint whose step is a multiple of K.
        #[arg(long)]
        keep_every: Option<u64>,
        /// Delete tagged checkpoints too when the rules do not keep them.
        #[arg(long)]
        no_keep_tagged: bool,
    },
    /// Delete segments no checkpoint names, trash and abandoned parts, once older than the
    /// grace period (a reader or push in progress never loses data under it).
    Gc {
        /// The remote.
        url: String,
        /// The grace period in hours (at least 1).
        #[arg(long, default_value_t = 24.0)]
        grace_hours: f64,
        /// For tests: judge segments' ages as if the clock were this many hours ahead, so
        /// that a race with pushes can be run without waiting for segments to grow old.
        #[arg(long, hide = true, default_value_t = 0.0)]
        segments_ahead_hours: f64,
    },
    /// Join the parts pushed for a step into one checkpoint, visible whole.
    Commit {
        /// The remote.
        url: String,
        /// The step.
        #[arg(long)]
        step: u64,
        /// The checkpoint's metadata (JSON text).
        #[arg(long, default_value = "")]
        metadata: String,
    },
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
enum CliError {
    /// The store said no.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A remote said no.
    #[error(transparent)]
    Remote(#[from] RemoteError),
    /// The arguments do not make sense together (exit status 2).
    #[error("{0}")]
    Usage(String),
    /// An I/O error on a file or folder of the command line.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Files an import refused before writing anything, one line per problem.
    #[error(
        "nothing was imported: {} problem(s) in the {files} file(s) checked; fix them and run it \
         again:\n  {}",
        problems.len(),
        problems.join("\n  ")
    )]
    Refused {
        /// Each problem, naming its file.
        problems: Vec<String>,
        /// Files checked.
        files: usize,
    },
    /// An import that failed after its files were checked (an I/O error, a store error):
    /// the checkpoints before it are committed.
    #[error(
        "step {step} ({path}) was not imported: {source}\n  {committed} checkpoint(s) before it \
         are imported and committed; {left} file(s) after it were not tried: rerun with \
         --skip-existing to import the rest"
    )]
    ImportStopped {
        /// The file that failed.
        path: PathBuf,
        /// Its step.
        step: u64,
        /// Checkpoints this run imported before it.
        committed: usize,
        /// Files after it, not tried.
        left: usize,
        /// Why it failed (boxed: errors stay small).
        source: Box<StoreError>,
    },
    /// `verify` found problems (they are printed already).
    #[error("{0} problem(s) found")]
    Corrupt(usize),
    /// stdout was closed (e.g. `strata log STORE | head`): stop quietly.
    #[error("stdout closed")]
    BrokenPipe,
    /// Anything else, said in words.
    #[error("{0}")]
    Other(String),
}

type CliResult<T = ()> = Result<T, CliError>;

fn main() -> ExitCode {
    quiet_contained_panics();
    let cli = Cli::parse();
    let out = progress::Output::new(cli.quiet);
    let result = match cli.command {
        Command::Import {
            store,
            paths,
            step,
            skip_existing,
            no_compact,
        } => import::run(
            &out,
            &store,
            &paths,
            &import::Flags {
                step,
                skip_existing,
                compact: !no_compact,
            },
        ),
        Command::Export {
            store,
            step,
            output,
        } => read::export(&out, &store, step, &output),
        Command::Get {
            store,
            tensor,
            step,
            at,
            json,
            output,
        } => read::get(&store, &tensor, step, at, json, output.as_deref()),
        Command::History {
            store,
            tensor,
            index,
            from,
            to,
            json,
        } => read::history(&store, &tensor, &index, from, to, json),
        Command::Log { store, tensor } => inspect::log(&store, tensor.as_deref()),
        Command::Stats { store, json } => inspect::stats(&store, json),
        Command::Verify { store } => maintain::verify(&out, &store),
        Command::Compact { store } => maintain::compact(&out, &store),
        Command::Retain {
            store,
            keep_last,
            keep_every,
            no_keep_tagged,
        } => maintain::retain(&store, keep_last, keep_every, !no_keep_tagged),
        Command::Age {
            store,
            keep_exact_last,
            keep_exact_every,
            no_keep_tagged,
            budget,
            yes,
            dry_run,
            update_budget,
            no_update_budget,
            exact,
            budget_for,
            steps,
            max_chain,
            first_moment_budget,
            second_moment_budget,
            exact_moments,
            training_state,
            role,
            json,
        } => maintain::age(
            &store,
            maintain::AgeArgs {
                keep_exact_last,
                keep_exact_every,
                keep_tagged: !no_keep_tagged,
                budget,
                yes,
                dry_run,
                update_budget,
                no_update_budget,
                exact,
                budget_for,
                steps,
                max_chain,
                first_moment_budget,
                second_moment_budget,
                exact_moments,
                training_state,
                roles: role,
            },
            json,
        ),
        Command::Tag { store, name, step } => maintain::tag(&store, &name, step),
        Command::Policy {
            store,
            pattern,
            tiered,
            pinned,
            pin,
            remove,
            residual,
        } => tiers::policy(
            &store,
            pattern.as_deref(),
            tiers::PolicyArgs {
                tiered,
                pinned,
                pin,
                remove,
                residual,
            },
        ),
        Command::Maintain { store, now } => tiers::maintain(&store, now),
        Command::Push {
            store,
            url,
            part,
            step,
        } => remote::push(&out, &store, &url, part.as_deref().zip(step)),
        Command::Pull { url, store } => remote::pull(&out, &url, &store),
        Command::Remote { command } => match command {
            RemoteCommand::Retain {
                url,
                keep_last,
                keep_every,
                no_keep_tagged,
            } => remote::retain(
                &url,
                &RetainPolicy {
                    keep_last,
                    keep_every,
                    keep_tagged: !no_keep_tagged,
                },
            ),
            RemoteCommand::Gc {
                url,
                grace_hours,
                segments_ahead_hours,
            } => remote::gc(&url, grace_hours, segments_ahead_hours),
            RemoteCommand::Commit {
                url,
                step,
                metadata,
            } => remote::commit(&url, step, &metadata),
        },
        Command::Demo { dir, synthetic } => demo::run(&out, dir.as_deref(), synthetic),
    };
    let mut stderr = std::io::stderr();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // As a tool killed by SIGPIPE would.
        Err(CliError::BrokenPipe) => ExitCode::from(141),
        Err(CliError::Corrupt(n)) => {
            let _ = writeln!(stderr, "error: verify found {n} problem(s)");
            ExitCode::from(1)
        }
        Err(e @ CliError::Usage(_)) => {
            let _ = writeln!(stderr, "error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            // Store errors carry their causes in their message already.
            let _ = writeln!(stderr, "error: {e}");
            ExitCode::from(1)
        }
    }
}

/// redb trusts its pages and can panic on a damaged file; the store contains those panics and
/// returns `Corruption::Engine` naming the file, which this tool prints as any error. The
/// default hook would print each such panic first, as if the tool had crashed: this one stays
/// quiet for panics raised in redb's code (`STRATA_DEBUG` set prints them), and prints every
/// other panic as before.
fn quiet_contained_panics() {
    let default = std::panic::take_hook();
    let debug = std::env::var_os("STRATA_DEBUG").is_some();
    std::panic::set_hook(Box::new(move |info| {
        let in_redb = info.location().is_some_and(raised_in_engine);
        if !in_redb || debug {
            default(info);
        }
    }));
}
