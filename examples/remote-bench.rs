//! remote-bench: a store's checkpoints in object storage, against issue 13's targets
//! (README "Remotes (object storage)" section).
//!
//! ```text
//! cargo run --release --example remote-bench -- [--series DIR] [--json]
//! ```
//!
//! The series (default `../shared/data/series/dev_ft/bf16` when it exists, else the committed
//! `testdata/series/dev_ft/bf16`) is imported into a temporary store, one checkpoint per
//! `step_NNNNNN.safetensors` file in step order, and compacted (as `strata import` leaves a
//! store). Then, for two remotes, moto's S3 server on 127.0.0.1 (started here from the venv
//! `tests/s3/venv.sh` makes, bucket `bkt`, URL `s3://bkt/bench`; stopped by its PID at the end,
//! also after an error) and a `file://` folder (no server), each with its wall time:
//!
//! - **push** of the whole store: checkpoints, segments and segment bytes sent, requests and
//!   body bytes ([`Remote::counts`]), against the store's `stats().segment_bytes` and file
//!   size (the target: a push sends only the stored bytes);
//! - **a second push**: segments sent (the target: none) and requests;
//! - **pull** into a new store: bytes received and requests, and that the pulled store equals
//!   the source (every checkpoint's metadata and tensors, bit for bit) and verifies;
//! - **get** of the largest tensor at the last step through a [`RemoteStore`] with a cold
//!   cache: requests and bytes fetched against the segment bytes of its chain (the target: at
//!   most those), then the same get again with the cache warm (the target: no request);
//! - **export** of the last checkpoint to safetensors from a fresh [`RemoteStore`] (cold
//!   cache): time and bytes fetched, the file compared tensor by tensor with the source.
//!
//! A tensor's chain is computed from the source store's [`Store::versions`]: each block
//! follows its delta bases back to a keyframe, and a block stored as a reference to its
//! predecessor's identical block counts that block's segment. Three figures are reported:
//! the blocks a decode reads (`chain_block_bytes`), every block of the versions on the chain
//! (`chain_version_bytes`: what a `RemoteStore` fetches, since it brings whole versions into
//! its cache; the target is checked against it), and every version of the tensor up to the step
//! (`upper_bound_bytes`).
//!
//! The peak RSS of the process (VmHWM) is read at the end. `--json` prints one JSON document
//! with every figure, the targets and the machine; without it, a table.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use serde_json::{json, Value};
use strata::store::remote::{pull, push, Remote, RemoteStore, RequestCounts, DEFAULT_CACHE_BYTES};
use strata::store::safetensors::SafeTensors;
use strata::store::{dtype_from_safetensors, Store, VersionInfo};
use strata_testkit::machine::{machine, peak_rss};
use strata_testkit::moto::Moto;
use strata_testkit::series::{list_step_files, series_root};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The prefix pushed to, in the bucket moto is started with.
const S3_URL: &str = "s3://bkt/bench";

struct Args {
    series: PathBuf,
    json: bool,
}

const USAGE: &str = "usage: remote-bench [--series DIR] [--json]";

fn parse_args() -> Res<Args> {
    let mut series = None;
    let mut json = false;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--series" => {
                series = Some(PathBuf::from(it.next().ok_or("--series needs a folder")?));
            }
            "--json" => json = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}\n{USAGE}").into()),
        }
    }
    let series = series.unwrap_or_else(|| series_root().join("dev_ft/bf16"));
    Ok(Args { series, json })
}

// ---------------------------------------------------------------------------------------
// The source store

/// `step_NNNNNN.safetensors` files of `dir`, by step.
fn series_files(dir: &Path) -> Res<Vec<(u64, PathBuf)>> {
    let files = list_step_files(dir)?;
    if files.is_empty() {
        return Err(format!("no step_N.safetensors files in {}", dir.display()).into());
    }
    Ok(files)
}

/// The segment bytes a read of `name` at `step` needs, from the source store's records.
struct Chain {
    /// Versions of the tensor on the chain (every block's bases, transitively), ascending.
    versions: Vec<u64>,
    /// Deepest block chain (segments decoded).
    depth: u8,
    /// Segments the decode of each block reads, each counted once.
    block_bytes: u64,
    /// Segments of every block of the versions on the chain.
    version_bytes: u64,
    /// Segments of every version of the tensor up to `step`.
    upper_bound_bytes: u64,
}

/// The chain under `name` at `step`. Segments are identified as (version, block): a reference
/// block (identical to its predecessor's block, so sharing that block's segment) is resolved
/// to the nearest earlier version whose same block holds a segment of its own.
fn chain(store: &Store, name: &str, step: u64) -> Res<Chain> {
    let infos: Vec<VersionInfo> = store.versions(name)?;
    let at: BTreeMap<u64, usize> = infos.iter().enumerate().map(|(i, v)| (v.step, i)).collect();
    let index = |s: u64| -> Res<usize> {
        at.get(&s)
            .copied()
            .ok_or_else(|| format!("{name}: a block's base step {s} is not a version").into())
    };
    let owner = |mut i: usize, b: usize| -> Res<usize> {
        loop {
            let enc = infos[i]
                .encodings
                .get(b)
                .ok_or_else(|| format!("{name} step {}: no block {b}", infos[i].step))?;
            if !enc.reference {
                return Ok(i);
            }
            i = i
                .checked_sub(1)
                .ok_or_else(|| format!("{name}: the first version's block {b} is a reference"))?;
        }
    };
    let seg = |(i, b): (usize, usize)| infos[i].encodings[b].stored_bytes;
    let target = index(step)?;
    // The blocks each decode reads.
    let mut blocks = BTreeSet::new();
    let mut depth = 0;
    for b in 0..infos[target].encodings.len() {
        let mut cur = Some(target);
        let mut d = 0u8;
        while let Some(i) = cur {
            blocks.insert((owner(i, b)?, b));
            d += 1;
            cur = match infos[i].encodings[b].base {
                Some(s) => Some(index(s)?),
                None => None,
            };
        }
        depth = depth.max(d);
    }
    // Whole versions, as a RemoteStore brings them into its cache.
    let mut versions = BTreeSet::new();
    let mut todo = vec![target];
    let mut whole = BTreeSet::new();
    while let Some(i) = todo.pop() {
        if !versions.insert(i) {
            continue;
        }
        for (b, enc) in infos[i].encodings.iter().enumerate() {
            whole.insert((owner(i, b)?, b));
            if let Some(s) = enc.base {
                todo.push(index(s)?);
            }
        }
    }
    let upper_bound_bytes = infos[..=target]
        .iter()
        .flat_map(|v| v.encodings.iter().map(|e| e.stored_bytes))
        .sum();
    Ok(Chain {
        versions: versions.iter().map(|&i| infos[i].step).collect(),
        depth,
        block_bytes: blocks.iter().map(|&k| seg(k)).sum(),
        version_bytes: whole.iter().map(|&k| seg(k)).sum(),
        upper_bound_bytes,
    })
}

/// Differences between two stores' checkpoints (metadata, tensor lists, tensors bit for
/// bit), at most a few named.
fn compare_stores(a: &Store, b: &Store) -> Res<Vec<String>> {
    let mut diff = Vec::new();
    let (sa, sb) = (a.checkpoints()?, b.checkpoints()?);
    if sa != sb {
        diff.push(format!("checkpoints {sa:?} against {sb:?}"));
        return Ok(diff);
    }
    for step in sa {
        let (ca, cb) = (a.load_checkpoint(step)?, b.load_checkpoint(step)?);
        if ca.metadata != cb.metadata {
            diff.push(format!("step {step}: metadata differs"));
        }
        if ca.tensors.len() != cb.tensors.len() {
            diff.push(format!(
                "step {step}: {} tensors against {}",
                ca.tensors.len(),
                cb.tensors.len()
            ));
            continue;
        }
        for ((na, ta), (nb, tb)) in ca.tensors.iter().zip(&cb.tensors) {
            if na != nb || ta.dtype != tb.dtype || ta.shape != tb.shape || ta.data != tb.data {
                diff.push(format!("step {step}: tensor {na} differs (pulled: {nb})"));
            }
        }
    }
    diff.truncate(10);
    Ok(diff)
}

/// Differences between an exported safetensors file and the source store's checkpoint.
fn compare_export(file: &Path, source: &Store, step: u64) -> Res<Vec<String>> {
    let bytes = std::fs::read(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    let st = SafeTensors::deserialize(&bytes)?;
    let info = source.checkpoint_info(step)?;
    let mut diff = Vec::new();
    if st.len() != info.tensors.len() {
        diff.push(format!(
            "{} tensors, the checkpoint has {}",
            st.len(),
            info.tensors.len()
        ));
    }
    for name in &info.tensors {
        let t = source.get(name, step)?;
        let same = st.tensor(name).is_ok_and(|v| {
            dtype_from_safetensors(v.dtype()) == Some(t.dtype)
                && v.shape()
                    .iter()
                    .map(|&d| d as u64)
                    .eq(t.shape.iter().copied())
                && v.data() == t.data.as_slice()
        });
        if !same {
            diff.push(format!("tensor {name} differs or is missing"));
        }
    }
    diff.truncate(10);
    Ok(diff)
}

// ---------------------------------------------------------------------------------------
// Measurements

fn counts_json(c: RequestCounts) -> Value {
    json!({"requests": c.requests, "bytes_in": c.bytes_in, "bytes_out": c.bytes_out})
}

fn minus(a: RequestCounts, b: RequestCounts) -> RequestCounts {
    RequestCounts {
        requests: a.requests - b.requests,
        bytes_in: a.bytes_in - b.bytes_in,
        bytes_out: a.bytes_out - b.bytes_out,
    }
}

/// What the measurements need of the source.
struct Source<'a> {
    store: &'a Store,
    segment_bytes: u64,
    file_bytes: u64,
    last: u64,
    tensor: &'a str,
    chain: &'a Chain,
    checkpoint_chain_bytes: u64,
}

/// Every measurement on the remote at `url`; `work` is a fresh folder for stores and caches.
fn measure(label: &str, url: &str, src: &Source<'_>, work: &Path) -> Res<Value> {
    std::fs::create_dir_all(work)?;
    let say = |what: &str| eprintln!("remote-bench: {label}: {what}");

    say("push");
    let remote = Remote::open(url)?;
    let t = Instant::now();
    let p1 = push(src.store, &remote, None)?;
    let push1_s = t.elapsed().as_secs_f64();
    let c1 = remote.counts();

    say("second push");
    let remote = Remote::open(url)?;
    let t = Instant::now();
    let p2 = push(src.store, &remote, None)?;
    let push2_s = t.elapsed().as_secs_f64();
    let c2 = remote.counts();

    say("pull");
    let pulled_path = work.join("pulled.strata");
    let pulled = Store::open(&pulled_path)?;
    let remote = Remote::open(url)?;
    let t = Instant::now();
    let pr = pull(&remote, &pulled, None)?;
    let pull_s = t.elapsed().as_secs_f64();
    let cp = remote.counts();
    let diff = compare_stores(src.store, &pulled)?;
    let verify = pulled.verify()?;
    let pulled_stats = pulled.stats()?;
    drop(pulled);

    say("cold and warm get");
    let t = Instant::now();
    let rs = RemoteStore::open(
        Remote::open(url)?,
        work.join("cache-get"),
        DEFAULT_CACHE_BYTES,
    )?;
    let open_s = t.elapsed().as_secs_f64();
    let c_open = rs.counts();
    let t = Instant::now();
    let got = rs.get(src.tensor, src.last)?;
    let cold_s = t.elapsed().as_secs_f64();
    let c_cold = minus(rs.counts(), c_open);
    let want = src.store.get(src.tensor, src.last)?;
    let cold_exact = got.dtype == want.dtype && got.shape == want.shape && got.data == want.data;
    let before = rs.counts();
    let t = Instant::now();
    let again = rs.get(src.tensor, src.last)?;
    let warm_s = t.elapsed().as_secs_f64();
    let c_warm = minus(rs.counts(), before);
    let warm_exact = again.data == want.data;
    drop(rs);

    say("export from a cold cache");
    let rs = RemoteStore::open(
        Remote::open(url)?,
        work.join("cache-export"),
        DEFAULT_CACHE_BYTES,
    )?;
    let before = rs.counts();
    let out = work.join("export.safetensors");
    let t = Instant::now();
    let er = rs.export_safetensors(src.last, &out)?;
    let export_s = t.elapsed().as_secs_f64();
    let c_export = minus(rs.counts(), before);
    drop(rs);
    let export_diff = compare_export(&out, src.store, src.last)?;

    let targets = json!({
        "push_sends_stored_bytes": p1.bytes_sent == src.segment_bytes && c1.bytes_out <= src.file_bytes,
        "second_push_no_segment": p2.segments_sent == 0,
        "pull_equal_and_verified": diff.is_empty() && verify.is_ok(),
        "cold_get_within_chain": c_cold.bytes_in <= src.chain.version_bytes && cold_exact,
        "warm_get_no_request": c_warm.requests == 0 && warm_exact,
        "export_exact": export_diff.is_empty(),
    });
    Ok(json!({
        "remote": label,
        "url": url,
        "push": {
            "seconds": push1_s,
            "checkpoints": p1.steps_sent.len(),
            "segments_sent": p1.segments_sent,
            "segment_bytes_sent": p1.bytes_sent,
            "segments_present": p1.segments_present,
            "counts": counts_json(c1),
        },
        "push_again": {
            "seconds": push2_s,
            "checkpoints_present": p2.steps_present,
            "segments_sent": p2.segments_sent,
            "segment_bytes_sent": p2.bytes_sent,
            "counts": counts_json(c2),
        },
        "pull": {
            "seconds": pull_s,
            "checkpoints": pr.steps_received.len(),
            "segments_received": pr.segments_received,
            "segment_bytes_received": pr.bytes_received,
            "counts": counts_json(cp),
            "equal": diff.is_empty(),
            "differences": diff,
            "verify_issues": verify.issues.len(),
            "file_bytes": pulled_stats.file_bytes,
            "segment_bytes": pulled_stats.segment_bytes,
        },
        "open": {"seconds": open_s, "counts": counts_json(c_open)},
        "get_cold": {
            "seconds": cold_s,
            "counts": counts_json(c_cold),
            "exact": cold_exact,
        },
        "get_warm": {
            "seconds": warm_s,
            "counts": counts_json(c_warm),
            "exact": warm_exact,
        },
        "export": {
            "seconds": export_s,
            "counts": counts_json(c_export),
            "tensors": er.tensors,
            "file_bytes": er.file_bytes,
            "checkpoint_chain_bytes": src.checkpoint_chain_bytes,
            "exact": export_diff.is_empty(),
            "differences": export_diff,
        },
        "targets": targets,
    }))
}

fn run(args: &Args) -> Res<Value> {
    let started = Instant::now();
    let files = series_files(&args.series)?;
    let tmp = tempfile::tempdir()?;

    // moto first: its environment is set before any thread of this process exists.
    let moto = Moto::try_start()?;
    std::env::set_var("AWS_ACCESS_KEY_ID", "test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
    std::env::set_var("AWS_REGION", "us-east-1");
    std::env::set_var("AWS_ENDPOINT_URL", moto.endpoint());
    std::env::remove_var("AWS_SESSION_TOKEN");

    eprintln!(
        "remote-bench: importing {} files of {}",
        files.len(),
        args.series.display()
    );
    let mut store = Store::open(tmp.path().join("source.strata"))?;
    let t = Instant::now();
    let mut raw_bytes = 0;
    for (step, path) in &files {
        raw_bytes += store.import_safetensors(path, *step)?.raw_bytes;
    }
    let file_bytes_imported = store.stats()?.file_bytes;
    store.compact()?;
    let import_s = t.elapsed().as_secs_f64();
    let stats = store.stats()?;
    let last = *store
        .checkpoints()?
        .last()
        .expect("the series imported at least one checkpoint");

    // The largest tensor of the last checkpoint (the first by name among equals).
    let info = store.checkpoint_info(last)?;
    let mut largest: Option<(u64, &str)> = None;
    for name in &info.tensors {
        let raw = store.version_info(name, last)?.raw_bytes;
        if largest.is_none_or(|(r, _)| raw > r) {
            largest = Some((raw, name));
        }
    }
    let (tensor_raw, tensor) = largest.expect("the last checkpoint holds a tensor");
    let tchain = chain(&store, tensor, last)?;
    let blocks = store.version_info(tensor, last)?.encodings.len();
    let mut checkpoint_chain_bytes = 0;
    for name in &info.tensors {
        checkpoint_chain_bytes += chain(&store, name, last)?.version_bytes;
    }

    let src = Source {
        store: &store,
        segment_bytes: stats.segment_bytes,
        file_bytes: stats.file_bytes,
        last,
        tensor,
        chain: &tchain,
        checkpoint_chain_bytes,
    };
    let file_url = format!("file://{}", tmp.path().join("file-remote").display());
    let remotes = vec![
        measure("S3 (moto)", S3_URL, &src, &tmp.path().join("work-s3"))?,
        measure("file://", &file_url, &src, &tmp.path().join("work-file"))?,
    ];
    drop(moto);

    Ok(json!({
        "series": args.series.display().to_string(),
        "checkpoints": files.len(),
        "raw_bytes": raw_bytes,
        "import_seconds": import_s,
        "store": {
            "file_bytes": stats.file_bytes,
            "file_bytes_before_compact": file_bytes_imported,
            "segment_bytes": stats.segment_bytes,
            "stored_bytes": stats.stored_bytes,
            "metadata_bytes": stats.metadata_bytes,
            "segments": stats.segments,
            "versions": stats.versions,
            "tensors": stats.tensors.len(),
        },
        "tensor": {
            "name": tensor,
            "step": last,
            "raw_bytes": tensor_raw,
            "blocks": blocks,
            "chain_versions": tchain.versions,
            "chain_depth": tchain.depth,
            "chain_block_bytes": tchain.block_bytes,
            "chain_version_bytes": tchain.version_bytes,
            "upper_bound_bytes": tchain.upper_bound_bytes,
        },
        "remotes": remotes,
        "peak_rss_bytes": peak_rss(),
        "wall_seconds": started.elapsed().as_secs_f64(),
        "machine": machine(),
    }))
}

fn mb(b: &Value) -> String {
    b.as_u64()
        .map_or("–".into(), |b| format!("{:.3}", b as f64 / 1e6))
}

fn print_human(doc: &Value) {
    let st = &doc["store"];
    let t = &doc["tensor"];
    println!(
        "remote-bench: {} ({} checkpoints, {} MB raw) on {}, {:.1} s",
        doc["series"].as_str().unwrap_or("?"),
        doc["checkpoints"],
        mb(&doc["raw_bytes"]),
        doc["machine"].as_str().unwrap_or("?"),
        doc["wall_seconds"].as_f64().unwrap_or(0.0)
    );
    println!(
        "store: file {} MB (compacted), segments {} MB ({} unique)",
        mb(&st["file_bytes"]),
        mb(&st["segment_bytes"]),
        st["segments"]
    );
    println!(
        "get target: {} at step {} ({} MB raw, {} blocks), chain versions {}, depth {}; \
         chain segments {} MB (blocks read) / {} MB (whole versions) / {} MB (all versions up to the step)",
        t["name"].as_str().unwrap_or("?"),
        t["step"],
        mb(&t["raw_bytes"]),
        t["blocks"],
        t["chain_versions"],
        t["chain_depth"],
        mb(&t["chain_block_bytes"]),
        mb(&t["chain_version_bytes"]),
        mb(&t["upper_bound_bytes"])
    );
    let empty = Vec::new();
    let rs = doc["remotes"].as_array().unwrap_or(&empty);
    let head: Vec<String> = rs
        .iter()
        .map(|r| r["remote"].as_str().unwrap_or("?").to_string())
        .collect();
    println!("\n| | {} |", head.join(" | "));
    println!("|---|{}", "---|".repeat(rs.len()));
    type Cell = fn(&Value) -> String;
    let rows: [(&str, Cell); 14] = [
        ("push s", |r| {
            format!("{:.2}", r["push"]["seconds"].as_f64().unwrap_or(0.0))
        }),
        ("push segment MB sent", |r| {
            mb(&r["push"]["segment_bytes_sent"])
        }),
        ("push body MB sent (all requests)", |r| {
            mb(&r["push"]["counts"]["bytes_out"])
        }),
        ("push requests", |r| {
            r["push"]["counts"]["requests"].to_string()
        }),
        ("second push segments sent", |r| {
            r["push_again"]["segments_sent"].to_string()
        }),
        ("second push requests", |r| {
            r["push_again"]["counts"]["requests"].to_string()
        }),
        ("pull s", |r| {
            format!("{:.2}", r["pull"]["seconds"].as_f64().unwrap_or(0.0))
        }),
        ("pull MB received / requests", |r| {
            format!(
                "{} / {}",
                mb(&r["pull"]["counts"]["bytes_in"]),
                r["pull"]["counts"]["requests"]
            )
        }),
        ("pulled store equal, verify issues", |r| {
            format!("{}, {}", r["pull"]["equal"], r["pull"]["verify_issues"])
        }),
        ("cold get MB / requests", |r| {
            format!(
                "{} / {}",
                mb(&r["get_cold"]["counts"]["bytes_in"]),
                r["get_cold"]["counts"]["requests"]
            )
        }),
        ("cold get ms", |r| {
            format!(
                "{:.1}",
                r["get_cold"]["seconds"].as_f64().unwrap_or(0.0) * 1e3
            )
        }),
        ("warm get requests", |r| {
            r["get_warm"]["counts"]["requests"].to_string()
        }),
        ("cold export s / MB fetched", |r| {
            format!(
                "{:.2} / {}",
                r["export"]["seconds"].as_f64().unwrap_or(0.0),
                mb(&r["export"]["counts"]["bytes_in"])
            )
        }),
        ("targets met", |r| {
            let t = r["targets"].as_object();
            let all = t.is_some_and(|t| t.values().all(|v| v.as_bool() == Some(true)));
            if all {
                "all".into()
            } else {
                format!("NOT ALL: {}", r["targets"])
            }
        }),
    ];
    for (label, cell) in rows {
        let cells: Vec<String> = rs.iter().map(cell).collect();
        println!("| {label} | {} |", cells.join(" | "));
    }
    println!(
        "\npeak RSS {} MB",
        doc["peak_rss_bytes"]
            .as_u64()
            .map_or("?".into(), |b| format!("{:.0}", b as f64 / 1e6))
    );
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("remote-bench: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(doc) => {
            if args.json {
                match serde_json::to_string_pretty(&doc) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("remote-bench: {e}");
                        return ExitCode::from(2);
                    }
                }
            } else {
                print_human(&doc);
            }
            let met = doc["remotes"].as_array().is_some_and(|rs| {
                rs.iter().all(|r| {
                    r["targets"]
                        .as_object()
                        .is_some_and(|t| t.values().all(|v| v.as_bool() == Some(true)))
                })
            });
            if met {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("remote-bench: {e}");
            ExitCode::from(2)
        }
    }
}
