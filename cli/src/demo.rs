//! `strata demo`: import a fine-tuning series into a fresh store and show what it does: the
//! ratio on disk, a history query across steps, a partial read, verify.

use std::path::{Path, PathBuf};
use std::time::Instant;

use strata_store::{DType, Options, Store, TensorRef};

use crate::fmt::{mb, mb_s, ms, shape};
use crate::import::{import_files, series_files};
use crate::maintain::summary;
use crate::progress::{line, Output};
use crate::synth;
use crate::{CliError, CliResult};

/// The real series the demo imports, relative to the workspace's parent folder.
const SERIES: &str = "shared/data/series/dev_ft/bf16";
/// Ratio of ZipNN's XOR-delta mode on that series (from `shared/data/README.md`).
const ZIPNN_DELTA: f64 = 3.949;

/// The real series folder: `../shared/...` from the current directory, else beside the
/// workspace this binary was built from.
fn data_dir() -> Option<PathBuf> {
    let built = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(SERIES);
    [Path::new("..").join(SERIES), built]
        .into_iter()
        .find(|p| series_files(p).is_ok_and(|f| !f.is_empty()))
}

/// Where the demo store goes: `DIR/strata-demo.strata`, else the workspace's `target/`, else
/// a temp folder.
fn store_path(dir: Option<&Path>) -> CliResult<PathBuf> {
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => {
            let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
            if target.is_dir() {
                target
            } else {
                std::env::temp_dir()
            }
        }
    };
    std::fs::create_dir_all(&dir).map_err(|source| CliError::Io {
        path: dir.clone(),
        source,
    })?;
    let dir = dir.canonicalize().unwrap_or(dir);
    let path = dir.join("strata-demo.strata");
    if path.exists() {
        std::fs::remove_file(&path).map_err(|source| CliError::Io {
            path: path.clone(),
            source,
        })?;
    }
    Ok(path)
}

/// `strata demo`.
pub(crate) fn run(out: &Output, dir: Option<&Path>, synthetic: bool) -> CliResult {
    let path = store_path(dir)?;
    let mut store = Store::open(&path)?;
    let real = if synthetic { None } else { data_dir() };
    match &real {
        Some(d) => {
            let files = series_files(d)?;
            say!(
                "Strata demo: {} checkpoints of a bf16 fine-tuning run ({})",
                files.len(),
                d.display()
            );
            say!("store: {}\n", path.display());
            say!("import, one transaction per checkpoint:");
            import_files(out, &store, &files, false)?;
        }
        None => {
            let why = if synthetic {
                "asked for".to_string()
            } else {
                format!("../{SERIES} not found")
            };
            say!("Strata demo: a synthetic bf16 training series ({why})");
            say!("store: {}\n", path.display());
            say!("import, one transaction per checkpoint:");
            import_synthetic(out, &store)?;
        }
    }
    store.compact()?;
    let s = store.stats()?;
    let reference = if real.is_some() {
        format!(" (ZipNN XOR-delta on these files: {ZIPNN_DELTA:.2}x)")
    } else {
        String::new()
    };
    say!(
        "\nratio: {} raw -> {} on disk = {:.2}x (raw / bytes on disk){reference}",
        mb(s.raw_bytes),
        mb(s.disk_bytes),
        s.ratio()
    );
    drop(store);

    // Queries on a fresh handle without a block cache: every read decodes its delta chain.
    let store = Store::open_with(
        &path,
        Options {
            cache_bytes: 0,
            ..Options::default()
        },
    )?;
    let steps = store.checkpoints()?;
    let (name, dims) = largest_matrix(&store)?;
    partial_read(&store, &name, &dims, steps.last().copied().unwrap_or(0))?;
    drop(store);
    // The history on a handle with the default block cache, as an analyst would have it.
    let store = Store::open(&path)?;
    history(&store, &name, &dims, &steps)?;

    let t = Instant::now();
    let report = store.verify()?;
    if !report.is_ok() {
        for issue in &report.issues {
            say!("{}", crate::maintain::describe(issue));
        }
        return Err(CliError::Corrupt(report.issues.len()));
    }
    say!("\nverify OK: {} in {}", summary(&report), ms(t.elapsed()));
    let (strata, store) = (invocation(), shown(&path));
    say!("\nnext: {strata} log {store} {name}   |   {strata} stats {store}");
    Ok(())
}

/// How to run this binary from the current directory: `strata` when that name on `PATH` is
/// this binary (after `cargo install --path cli`), else its path (`target/release/strata`
/// after `cargo run`).
fn invocation() -> String {
    let Ok(me) = std::env::current_exe().and_then(|p| p.canonicalize()) else {
        return "strata".into();
    };
    let on_path = std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths)
            .any(|dir| dir.join("strata").canonicalize().is_ok_and(|p| p == me))
    });
    if on_path {
        "strata".into()
    } else {
        shown(&me)
    }
}

/// `path` relative to the current directory when it is below it, else as it is.
fn shown(path: &Path) -> String {
    let relative = std::env::current_dir()
        .ok()
        .and_then(|cwd| cwd.canonicalize().ok())
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(Path::to_path_buf));
    relative
        .unwrap_or_else(|| path.to_path_buf())
        .display()
        .to_string()
}

/// Saves the synthetic series, printing per-step figures.
fn import_synthetic(out: &Output, store: &Store) -> CliResult {
    let series = synth::series(8);
    let bar = out.bar(series.len() as u64, false);
    for (step, tensors) in &series {
        let refs: Vec<(&str, TensorRef<'_>)> = tensors
            .iter()
            .map(|(n, s, b)| {
                (
                    n.as_str(),
                    TensorRef {
                        dtype: DType::BF16,
                        shape: s,
                        bytes: b,
                    },
                )
            })
            .collect();
        let raw: u64 = tensors.iter().map(|t| t.2.len() as u64).sum();
        let t = Instant::now();
        store.save_checkpoint(*step, &refs, &format!("{{\"step\": \"{step}\"}}"))?;
        let dt = t.elapsed();
        line(
            &bar,
            format!(
                "step {step:>8}  {:>4} tensors  raw {:>10}  {:>12}",
                tensors.len(),
                mb(raw),
                mb_s(raw, dt)
            ),
        )?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(())
}

/// The tensor with two or more dimensions and the most elements.
fn largest_matrix(store: &Store) -> CliResult<(String, Vec<u64>)> {
    let mut best: Option<(u64, String, Vec<u64>)> = None;
    for name in store.tensors()? {
        let Some(v) = store.versions(&name)?.pop() else {
            continue;
        };
        let n: u64 = v.shape.iter().product();
        if v.shape.len() >= 2 && best.as_ref().is_none_or(|b| n > b.0) {
            best = Some((n, name, v.shape));
        }
    }
    best.map(|(_, n, s)| (n, s))
        .ok_or_else(|| CliError::Other("the store has no matrix to query".into()))
}

/// A few rows of `name` at `step` with `get_range`, timed, against a whole `get`.
fn partial_read(store: &Store, name: &str, dims: &[u64], step: u64) -> CliResult {
    let cols: u64 = dims[1..].iter().product();
    let rows = 4.min(dims[0]);
    let first = dims[0] / 2;
    // The whole tensor first: the process's first read also pays for starting its threads.
    let t = Instant::now();
    let whole = store.get(name, step)?;
    let dt_whole = t.elapsed();
    let t = Instant::now();
    let slice = store.get_range(name, step, first * cols..(first + rows) * cols)?;
    let dt_range = t.elapsed();
    let values = slice.to_f64();
    say!(
        "\npartial read (no block cache): rows {first}..{} of {name} {} at step {step}: \
         {} values in {} (whole tensor, {} bytes: {})",
        first + rows,
        shape(dims),
        values.len(),
        ms(dt_range),
        whole.data.len(),
        ms(dt_whole)
    );
    let head: Vec<String> = values.iter().take(6).map(|v| format!("{v:+.5}")).collect();
    say!("  row {first}: [{}, ...]", head.join(", "));
    Ok(())
}

/// How a few elements of `name` evolved across `steps` (one `Store::history` per element).
fn history(store: &Store, name: &str, dims: &[u64], steps: &[u64]) -> CliResult {
    let (Some(&s0), Some(&s1)) = (steps.first(), steps.last()) else {
        return Ok(());
    };
    // The first elements that changed between the first and the last step (else 0..4).
    let a = store.get(name, s0)?.to_f64();
    let b = store.get(name, s1)?.to_f64();
    let mut picks: Vec<u64> = (0..a.len().min(b.len()))
        .filter(|&i| a[i].to_bits() != b[i].to_bits())
        .take(4)
        .map(|i| i as u64)
        .collect();
    if picks.is_empty() {
        picks = (0..4.min(a.len() as u64)).collect();
    }
    let cols: u64 = dims[1..].iter().product::<u64>().max(1);
    let label = |i: u64| format!("[{},{}]", i / cols, i % cols);
    say!(
        "\nhistory of {name} {}, the first elements that changed:",
        shape(dims)
    );
    let header: Vec<String> = picks.iter().map(|&i| format!("{:>10}", label(i))).collect();
    say!("  {:>8}  {}", "step", header.join(" "));
    // One column per element: its value at every step, in step order.
    let t = Instant::now();
    let mut columns = Vec::with_capacity(picks.len());
    for &i in &picks {
        let rows = store.history(name, i..i + 1, s0..=s1)?;
        let by_step: std::collections::BTreeMap<u64, f64> = rows
            .into_iter()
            .map(|(step, slice)| (step, slice.to_f64().first().copied().unwrap_or(f64::NAN)))
            .collect();
        columns.push(by_step);
    }
    let spent = t.elapsed();
    let mut values = 0u32;
    for &step in steps {
        let row: Vec<String> = columns
            .iter()
            .map(|c| {
                values += 1;
                format!("{:>+10.5}", c.get(&step).copied().unwrap_or(f64::NAN))
            })
            .collect();
        say!("  {step:>8}  {}", row.join(" "));
    }
    say!(
        "  ({} history queries, {values} values in {}, {:.3} ms per value)",
        picks.len(),
        ms(spent),
        spent.as_secs_f64() * 1e3 / f64::from(values.max(1))
    );
    Ok(())
}
