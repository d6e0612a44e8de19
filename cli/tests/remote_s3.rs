//! `strata push`, `pull` and the read commands against a real S3-compatible server: moto's,
//! from PyPI, started here on 127.0.0.1 from the venv `tests/s3/venv.sh` makes, and stopped
//! by its PID (ADR 0018). Skipped, with the reason printed, only if that venv cannot be made.
//!
//! `STRATA_RACE_ROUNDS` sets the rounds of the race test (default 50).

#![allow(clippy::unwrap_used, clippy::panic, missing_docs)]

mod common;

use strata_testkit::moto::Moto;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_strata");

/// What these tests do with a server: run `strata` against it, list its keys.
trait Cli {
    /// Runs `strata` with the S3 environment of this server.
    fn strata(&self, args: &[&str]) -> Output;
    /// `strata` with the S3 environment of this server, not started.
    fn command(&self, args: &[&str]) -> Command;
    /// Object keys under `prefix`.
    fn list(&self, prefix: &str) -> Vec<String>;
}

impl Cli for Moto {
    fn strata(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args);
        self.with_env(c)
    }

    fn list(&self, prefix: &str) -> Vec<String> {
        self.keys(prefix).unwrap()
    }
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "strata failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn failed(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "strata succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8(out.stderr.clone()).unwrap();
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// Runs `strata` without a server (local commands).
fn local(args: &[&str]) -> String {
    ok(&Command::new(BIN).args(args).output().unwrap())
}

/// The committed bf16 series (5 checkpoints) imported into `dir/name`.
fn series_store(dir: &Path, name: &str) -> PathBuf {
    let store = dir.join(name);
    let series = common::committed_root().join("dev_ft/bf16");
    local(&[
        "import",
        "-q",
        store.to_str().unwrap(),
        series.to_str().unwrap(),
    ]);
    store
}

/// The number in `text` right before `what` (e.g. "25 segments").
fn number_before(text: &str, what: &str) -> u64 {
    let i = text
        .find(what)
        .unwrap_or_else(|| panic!("{what:?} not in {text}"));
    text[..i]
        .split_whitespace()
        .last()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn push_pull_and_read_through_s3() {
    let Some(moto) = Moto::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = series_store(dir.path(), "a.strata");
    let s = store.to_str().unwrap();
    local(&["tag", s, "best", "--step", "410"]);
    let url = "s3://bkt/runs/one";

    let first = ok(&moto.strata(&["push", s, url]));
    assert_eq!(number_before(&first, "checkpoint(s)"), 5, "{first}");
    let sent = number_before(&first, "bytes sent");
    let file = std::fs::metadata(&store).unwrap().len();
    assert!(sent <= file, "sent {sent} bytes of a {file}-byte store");
    let again = ok(&moto.strata(&["push", s, url]));
    assert_eq!(number_before(&again, "segments,"), 0, "{again}");

    // Reads without a local copy, through a cold cache.
    let cache = dir.path().join("cache");
    let read = |args: &[&str]| {
        let mut c = moto.command(args);
        c.env("STRATA_CACHE_DIR", &cache);
        c.output().unwrap()
    };
    let log = ok(&read(&["log", url]));
    assert!(log.contains("best") && log.contains("430"), "{log}");
    let tensor =
        common::tensor_names(&common::committed_root().join("dev_ft/bf16/step_000400.safetensors"))
            .into_iter()
            .next()
            .unwrap();
    let (remote_npy, local_npy) = (dir.path().join("r.npy"), dir.path().join("l.npy"));
    let got = ok(&read(&[
        "get",
        url,
        &tensor,
        "--step",
        "420",
        "-o",
        remote_npy.to_str().unwrap(),
    ]));
    local(&[
        "get",
        s,
        &tensor,
        "--step",
        "420",
        "-o",
        local_npy.to_str().unwrap(),
    ]);
    assert_eq!(
        std::fs::read(&remote_npy).unwrap(),
        std::fs::read(&local_npy).unwrap()
    );
    let fetched = number_before(&got, "bytes fetched");
    assert!(
        fetched < sent,
        "a one-tensor read fetched {fetched} of {sent} bytes: {got}"
    );
    let (remote_st, local_st) = (
        dir.path().join("r.safetensors"),
        dir.path().join("l.safetensors"),
    );
    ok(&read(&[
        "export",
        url,
        "--step",
        "430",
        "-o",
        remote_st.to_str().unwrap(),
    ]));
    local(&[
        "export",
        s,
        "--step",
        "430",
        "-o",
        local_st.to_str().unwrap(),
    ]);
    assert_eq!(
        std::fs::read(&remote_st).unwrap(),
        std::fs::read(&local_st).unwrap()
    );
    let h = ok(&read(&[
        "history", url, &tensor, "--index", "0..3", "--json",
    ]));
    let l = local(&["history", s, &tensor, "--index", "0..3", "--json"]);
    let versions =
        |t: &str| serde_json::from_str::<serde_json::Value>(t).unwrap()["versions"].clone();
    assert_eq!(versions(&h), versions(&l));

    // Pull into a new store: the same checkpoints and tags, verified.
    let b = dir.path().join("b.strata");
    let pulled = ok(&moto.strata(&["pull", url, b.to_str().unwrap()]));
    assert_eq!(number_before(&pulled, "checkpoint(s)"), 5, "{pulled}");
    assert!(local(&["verify", b.to_str().unwrap()]).contains("verify OK"));
    assert!(local(&["log", b.to_str().unwrap()]).contains("best"));

    // Retention on the remote, then gc within the grace period: nothing named goes.
    let kept = ok(&moto.strata(&["remote", "retain", url, "--keep-last", "2"]));
    assert!(kept.contains("deleted 2"), "{kept}");
    let gc = ok(&moto.strata(&["remote", "gc", url, "--grace-hours", "1"]));
    assert_eq!(number_before(&gc, "segments deleted"), 0, "{gc}");
    let c = dir.path().join("c.strata");
    ok(&moto.strata(&["pull", url, c.to_str().unwrap()]));
    let steps = local(&["log", c.to_str().unwrap()]);
    for step in ["410", "420", "430"] {
        assert!(steps.contains(step), "{steps}");
    }
}

#[test]
fn eight_pushers_race_for_one_remote() {
    let Some(moto) = Moto::start() else { return };
    let rounds: usize = std::env::var("STRATA_RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let dir = tempfile::tempdir().unwrap();
    // Eight stores, one checkpoint each at its own step, from eight different files; and a
    // ninth holding other content at step 1.
    let mut files: Vec<PathBuf> = Vec::new();
    for series in ["dev_ft/bf16", "dev_ft"] {
        let mut f: Vec<PathBuf> = std::fs::read_dir(common::committed_root().join(series))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        f.sort();
        files.extend(f);
    }
    assert!(files.len() >= 9);
    let stores: Vec<PathBuf> = (1..=9)
        .map(|k| {
            let store = dir.path().join(format!("s{k}.strata"));
            let step = if k == 9 { 1 } else { k };
            local(&[
                "import",
                "-q",
                store.to_str().unwrap(),
                files[k - 1].to_str().unwrap(),
                "--step",
                &step.to_string(),
            ]);
            store
        })
        .collect();
    let exports: Vec<Vec<u8>> = stores
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let out = dir.path().join(format!("s{i}.safetensors"));
            let step = if i == 8 { 1 } else { i + 1 };
            local(&[
                "export",
                s.to_str().unwrap(),
                "--step",
                &step.to_string(),
                "-o",
                out.to_str().unwrap(),
            ]);
            std::fs::read(out).unwrap()
        })
        .collect();
    let t = Instant::now();
    for round in 0..rounds {
        let url = format!("s3://bkt/race/{round}");
        let children: Vec<Child> = stores
            .iter()
            .map(|s| {
                moto.command(&["push", s.to_str().unwrap(), &url])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let outs: Vec<Output> = children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect();
        for out in &outs[..8]
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 0)
            .map(|(_, o)| o)
            .collect::<Vec<_>>()
        {
            ok(out);
        }
        // Step 1 had two writers with different content: exactly one won.
        let winners: Vec<usize> = [0, 8]
            .into_iter()
            .filter(|&i| outs[i].status.success())
            .collect();
        assert_eq!(
            winners.len(),
            1,
            "round {round}: step 1 winners {winners:?}"
        );
        let loser = if winners[0] == 0 { 8 } else { 0 };
        let err = failed(&outs[loser]);
        assert!(
            err.contains("already holds a different checkpoint at step 1"),
            "{err}"
        );
        // Every step present and exact.
        let pulled = dir.path().join(format!("pull{round}.strata"));
        ok(&moto.strata(&["pull", &url, pulled.to_str().unwrap()]));
        for k in 1..=8usize {
            let out = dir.path().join("check.safetensors");
            local(&[
                "export",
                pulled.to_str().unwrap(),
                "--step",
                &k.to_string(),
                "-o",
                out.to_str().unwrap(),
            ]);
            let want = if k == 1 {
                &exports[winners[0]]
            } else {
                &exports[k - 1]
            };
            assert!(
                std::fs::read(&out).unwrap() == *want,
                "round {round}: step {k} differs"
            );
        }
        std::fs::remove_file(&pulled).unwrap();
    }
    eprintln!(
        "race: {rounds} rounds of 9 concurrent pushes in {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

#[test]
fn a_killed_push_resumes_and_a_killed_server_is_an_error() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // A store of incompressible data: 48 one-MiB segments.
    let store = dir.path().join("big.strata");
    let st = store.to_str().unwrap();
    let raw = dir.path().join("big.safetensors");
    common::write_noise_safetensors(&raw, 48, 1 << 18);
    local(&["import", "-q", st, raw.to_str().unwrap(), "--step", "1"]);
    let url = "s3://bkt/big";

    // Kill the pusher once some segments are up; the next push sends only the rest.
    let mut child = moto
        .command(&["push", st, url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while moto.list("big/segments/").len() < 8 && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let killed = child.wait_with_output().unwrap();
    let before = moto.list("big/segments/").len();
    let manifests = moto.list("big/checkpoints/").len();
    if killed.status.success() {
        eprintln!("note: the push finished before it could be killed");
    } else {
        assert_eq!(manifests, 0, "a killed push left a manifest");
    }
    let resumed = ok(&moto.strata(&["push", st, url]));
    let sent = number_before(&resumed, "segments,");
    assert!(
        sent as usize <= 48 - before.min(48),
        "resumed push sent {sent}, {before} were up: {resumed}"
    );
    let back = dir.path().join("back.strata");
    ok(&moto.strata(&["pull", url, back.to_str().unwrap()]));
    let (a, b) = (dir.path().join("a.st"), dir.path().join("b.st"));
    local(&["export", st, "--step", "1", "-o", a.to_str().unwrap()]);
    local(&[
        "export",
        back.to_str().unwrap(),
        "--step",
        "1",
        "-o",
        b.to_str().unwrap(),
    ]);
    assert!(std::fs::read(a).unwrap() == std::fs::read(b).unwrap());

    // Kill the server mid-push: a clear error naming an object, no panic, nothing visible;
    // with a server back, the push completes.
    let child = moto
        .command(&["push", st, "s3://bkt/second"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while moto.list("second/segments/").len() < 4 && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    moto.kill();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        eprintln!("note: the push finished before the server was killed");
    } else {
        let err = failed(&out);
        assert!(err.contains("bkt") || err.contains("second/"), "{err}");
    }
    moto.restart().unwrap();
    let done = ok(&moto.strata(&["push", st, "s3://bkt/second"]));
    assert_eq!(number_before(&done, "checkpoint(s)"), 1, "{done}");
}

#[test]
fn bad_input_gets_clear_errors() {
    let Some(moto) = Moto::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = series_store(dir.path(), "a.strata");
    let s = store.to_str().unwrap();

    let err = failed(&moto.strata(&["push", s, "ftp://host/x"]));
    assert!(err.contains("ftp://host/x"), "{err}");
    let err = failed(
        &Command::new(BIN)
            .args(["push", s, "s3://bkt/x"])
            .env_remove("AWS_ACCESS_KEY_ID")
            .output()
            .unwrap(),
    );
    assert!(err.contains("no credentials"), "{err}");
    let err = failed(&moto.strata(&["push", s, "s3://no-such-bucket/x"]));
    assert!(
        err.contains("no-such-bucket") || err.contains("strata-remote.json"),
        "{err}"
    );

    // A remote written by a newer format.
    moto.http(
        "PUT",
        "/bkt/newer/strata-remote.json",
        br#"{"format": "strata-remote", "version": 2}"#,
    )
    .unwrap();
    let err = failed(&moto.strata(&["push", s, "s3://bkt/newer"]));
    assert!(
        err.contains("newer") && err.contains("strata-remote.json"),
        "{err}"
    );

    // A segment whose bytes do not match its address: planted before a push, which trusts
    // a present segment's name; the pull checks the bytes.
    ok(&moto.strata(&["push", s, "s3://bkt/ok"]));
    let key = moto.list("ok/segments/").into_iter().next().unwrap();
    let planted = key.replacen("ok/", "bad/", 1);
    assert_eq!(
        moto.http("PUT", &format!("/bkt/{planted}"), b"not the segment")
            .unwrap()
            .0,
        200
    );
    ok(&moto.strata(&["push", s, "s3://bkt/bad"]));
    let b = dir.path().join("b.strata");
    let err = failed(&moto.strata(&["pull", "s3://bkt/bad", b.to_str().unwrap()]));
    assert!(err.contains(&planted), "{err}");
    assert!(
        !local(&["log", b.to_str().unwrap()]).contains("430"),
        "a damaged pull left a checkpoint"
    );
}

/// A server that answers every request with HTTP 500: after object_store's retries the push
/// fails with an error naming the object, and writes nothing (no moto needed).
#[test]
fn a_server_answering_500_is_a_clear_error() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 65536];
            let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let store = series_store(dir.path(), "a.strata");
    let t = Instant::now();
    let out = Command::new(BIN)
        .args(["push", store.to_str().unwrap(), "s3://bkt/x"])
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"))
        .output()
        .unwrap();
    let err = failed(&out);
    assert!(
        err.contains("x/strata-remote.json") && err.contains("500"),
        "{err}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(90),
        "retries took {:?}",
        t.elapsed()
    );
}

/// ADR 0018's promise under any interleaving: pushes, garbage collections, retention and
/// pulls run at once, in separate processes, round after round against one remote. The gcs
/// judge segments' ages as if their clock were two hours ahead, so every unnamed segment is
/// past the grace period and a gc deletes whatever it does not see named: the segments a
/// push is counting on (present and young by the real clock, or just sent, before its
/// manifest) are exactly what it removes without the intents and leases of ADR 0018. Parts
/// pushed and never committed leave unnamed segments behind, as killed pushes do. Every
/// command must succeed (a pull too: retained checkpoints keep their segments for the grace
/// period, on the real clock); after each round the remote is pulled whole into a fresh
/// store, and every checkpoint it lists must read back bit-exact.
///
/// `STRATA_GC_RACE_ROUNDS` sets the rounds (default 12).
#[test]
fn gc_racing_push_retain_and_pull_never_loses_a_listed_checkpoint() {
    let Some(moto) = Moto::start() else { return };
    let rounds: usize = std::env::var("STRATA_GC_RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let dir = tempfile::tempdir().unwrap();
    let mut files: Vec<PathBuf> = Vec::new();
    for series in ["dev_ft/bf16", "dev_ft"] {
        let mut f: Vec<PathBuf> = std::fs::read_dir(common::committed_root().join(series))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        f.sort();
        files.extend(f);
    }
    // One store per step, and the bytes an export of each must give.
    let n = files.len().min(8);
    let stores: Vec<PathBuf> = (0..n)
        .map(|k| {
            let store = dir.path().join(format!("s{k}.strata"));
            local(&[
                "import",
                "-q",
                store.to_str().unwrap(),
                files[k].to_str().unwrap(),
                "--step",
                &(k + 1).to_string(),
            ]);
            store
        })
        .collect();
    let export = |store: &Path, step: u64, name: &str| -> Vec<u8> {
        let out = dir.path().join(name);
        local(&[
            "export",
            store.to_str().unwrap(),
            "--step",
            &step.to_string(),
            "-o",
            out.to_str().unwrap(),
        ]);
        std::fs::read(out).unwrap()
    };
    let want: Vec<Vec<u8>> = stores
        .iter()
        .enumerate()
        .map(|(k, s)| export(s, k as u64 + 1, &format!("want{k}.safetensors")))
        .collect();
    let url = "s3://bkt/gcrace";
    let spawn = |args: &[&str]| {
        moto.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut repaired = 0;
    for round in 0..rounds {
        let (a, b, c) = (round % n, (round + 3) % n, (round + 5) % n);
        let pulled = dir.path().join(format!("during{round}.strata"));
        let mut children = vec![
            ("push", spawn(&["push", stores[a].to_str().unwrap(), url])),
            ("push", spawn(&["push", stores[b].to_str().unwrap(), url])),
            (
                "part",
                spawn(&[
                    "push",
                    stores[c].to_str().unwrap(),
                    url,
                    "--part",
                    &format!("r{round}"),
                    "--step",
                    &(c + 1).to_string(),
                ]),
            ),
            (
                "gc",
                spawn(&[
                    "remote",
                    "gc",
                    url,
                    "--grace-hours",
                    "1",
                    "--segments-ahead-hours",
                    "2",
                ]),
            ),
            (
                "gc",
                spawn(&[
                    "remote",
                    "gc",
                    url,
                    "--grace-hours",
                    "1",
                    "--segments-ahead-hours",
                    "2",
                ]),
            ),
            ("pull", spawn(&["pull", url, pulled.to_str().unwrap()])),
        ];
        if round % 2 == 1 {
            children.push((
                "retain",
                spawn(&["remote", "retain", url, "--keep-last", "3"]),
            ));
        }
        for (what, child) in children {
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr).to_string();
            assert!(
                !stderr.contains("panicked"),
                "round {round}: {what}: {stderr}"
            );
            let stdout = ok(&out);
            if what == "push" && stdout.contains("repaired") {
                repaired += 1;
            }
        }
        // Quiet now: every listed checkpoint must pull whole and read back bit-exact.
        let back = dir.path().join(format!("after{round}.strata"));
        ok(&moto.strata(&["pull", url, back.to_str().unwrap()]));
        let log = local(&["log", back.to_str().unwrap()]);
        for (k, want) in want.iter().enumerate() {
            let step = k as u64 + 1;
            let listed = log
                .lines()
                .any(|l| l.split_whitespace().next() == Some(step.to_string().as_str()));
            if listed {
                let got = export(&back, step, &format!("got{round}-{k}.safetensors"));
                assert!(
                    got == *want,
                    "round {round}: step {step} differs after the race"
                );
            }
        }
    }
    eprintln!("{rounds} rounds: {repaired} pushes repaired segments an older push had lost");
}

/// A server that accepts connections and never answers: every request, its retries included,
/// ends within the remote's bound (ADR 0018: 60 s by default, `STRATA_REMOTE_TIMEOUT` seconds
/// here), with an error that says it timed out and names the object; a bound that is not a
/// number of seconds is refused by name (no moto needed).
#[test]
fn a_stalled_server_fails_within_the_bound() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream); // never read, never answered, never closed
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let store = series_store(dir.path(), "a.strata");
    let push = |timeout: &str| {
        Command::new(BIN)
            .args(["push", store.to_str().unwrap(), "s3://bkt/x"])
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"))
            .env("STRATA_REMOTE_TIMEOUT", timeout)
            .output()
            .unwrap()
    };
    let t = Instant::now();
    let err = failed(&push("2"));
    assert!(
        err.contains("timed out after 2 s") && err.contains("x/strata-remote.json"),
        "{err}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
    let err = failed(&push("soon"));
    assert!(err.contains("STRATA_REMOTE_TIMEOUT"), "{err}");
}
