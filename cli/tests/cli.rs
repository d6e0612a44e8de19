//! The `strata` binary end to end on the real bf16 fine-tuning series: import, export
//! (byte for byte against the source files), stats, verify (clean and corrupted), get (and
//! the fidelity it prints), log, tag, retain, and exit statuses.

mod common;
// The tool's own .npy module, for its header parser (the binary exports no library).
#[allow(dead_code)]
#[path = "../src/npy.rs"]
mod npy;

use std::path::Path;
use std::process::{Command, Output};

use common::{f32_bytes, load_series, noise, series_root};
use npy::parse_npy_header;
use safetensors::SafeTensors;
use strata_store::{DType, Fidelity, Options, Store, TensorRef};

fn strata(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .expect("run strata");
    eprintln!(
        "$ strata {}\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn ok(args: &[&str]) -> String {
    let out = strata(args);
    assert!(out.status.success(), "strata {args:?} failed: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

#[test]
fn cli_round_trip_on_dev_ft_bf16() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("ft.strata");
    let src = series_root().join("dev_ft/bf16");
    let series = load_series("dev_ft/bf16");

    let out = ok(&["import", p(&store), p(&src)]);
    for c in &series {
        assert!(
            out.contains(&format!("step {:>8}", c.step)),
            "no line for step {}",
            c.step
        );
    }
    assert!(out.contains("ratio"), "{out}");

    // Export each step and compare with the source file, tensor by tensor.
    for c in &series {
        let file = dir.path().join(format!("out_{}.safetensors", c.step));
        ok(&[
            "export",
            p(&store),
            "--step",
            &c.step.to_string(),
            "-o",
            p(&file),
        ]);
        let exported = std::fs::read(&file).expect("read export");
        let original = std::fs::read(src.join(format!("step_{:06}.safetensors", c.step)))
            .expect("read source");
        let a = SafeTensors::deserialize(&exported).expect("parse export");
        let b = SafeTensors::deserialize(&original).expect("parse source");
        let mut names_a: Vec<_> = a.names().into_iter().map(str::to_string).collect();
        let mut names_b: Vec<_> = b.names().into_iter().map(str::to_string).collect();
        names_a.sort();
        names_b.sort();
        assert_eq!(names_a, names_b, "step {}", c.step);
        for name in &names_b {
            let (x, y) = (a.tensor(name).expect("x"), b.tensor(name).expect("y"));
            assert_eq!(x.dtype(), y.dtype(), "{name}");
            assert_eq!(x.shape(), y.shape(), "{name}");
            assert!(x.data() == y.data(), "{name} step {}: data differs", c.step);
        }
    }

    // stats --json has the keys.
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["stats", p(&store), "--json"])).expect("stats JSON");
    for key in [
        "raw_bytes",
        "stored_bytes",
        "file_bytes",
        "disk_bytes",
        "ratio",
        "tensors",
    ] {
        assert!(json.get(key).is_some(), "stats --json lacks {key}: {json}");
    }
    let raw: u64 = series.iter().map(|c| c.raw_bytes()).sum();
    assert_eq!(json["raw_bytes"].as_u64(), Some(raw));
    // The one ratio: raw bytes over what the store takes on disk (ADR 0028).
    let disk = json["disk_bytes"].as_u64().expect("disk bytes");
    let ratio = json["ratio"].as_f64().expect("ratio");
    assert_eq!(ratio, raw as f64 / disk as f64, "{json}");
    assert!(ratio > 3.0, "{json}");
    assert_eq!(keys_naming_a_ratio(&json), ["ratio"], "{json}");
    assert_eq!(
        json["tensors"].as_array().expect("tensors").len(),
        series[0].tensors.len()
    );
    // The biases and norms are packed (ADR 0041): their bytes are in their checkpoints' parts.
    assert!(
        json["packed_bytes"].as_u64().is_some_and(|b| b > 0),
        "{json}"
    );
    let text = ok(&["stats", p(&store)]);
    assert_eq!(text.matches("ratio").count(), 1, "{text}");
    assert!(
        text.contains(&format!("ratio {ratio:.3} (raw / bytes on disk)")),
        "{text}"
    );

    let out = ok(&["verify", p(&store)]);
    assert!(out.starts_with("verify OK"), "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");

    // get -o .npy: header parses, data is the source tensor.
    let last = series.last().expect("steps");
    // A matrix: small vectors are packed (ADR 0041), read as inline versions.
    let (name, _, shape, data) = last
        .tensors
        .iter()
        .find(|t| t.2.len() >= 2)
        .expect("a matrix");
    let npy = dir.path().join("t.npy");
    let out = ok(&[
        "get",
        p(&store),
        name,
        "--step",
        &last.step.to_string(),
        "-o",
        p(&npy),
    ]);
    assert!(out.contains("'<u2'"), "bf16 note missing: {out}");
    let bytes = std::fs::read(&npy).expect("read npy");
    let h = parse_npy_header(&bytes).expect("npy header");
    assert_eq!(h.descr, "<u2");
    assert!(!h.fortran_order);
    assert_eq!(&h.shape, shape);
    assert_eq!(h.data_offset % 64, 0);
    assert!(bytes[h.data_offset..] == data[..], "npy data differs");
    // --at: the latest version at or before a step between checkpoints.
    let npy_at = dir.path().join("t_at.npy");
    let between = (last.step + 5).to_string();
    let out = ok(&[
        "get",
        p(&store),
        name,
        "--step",
        &between,
        "--at",
        "-o",
        p(&npy_at),
    ]);
    assert!(out.contains(&format!("step {}", last.step)), "{out}");
    assert_eq!(std::fs::read(&npy_at).expect("read"), bytes);
    // Without --at the version must exist.
    let out = strata(&["get", p(&store), name, "--step", &between]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: "));

    // log, tag, retain.
    let log = ok(&["log", p(&store)]);
    assert_eq!(log.lines().count(), 1 + series.len(), "{log}");
    let log = ok(&["log", p(&store), name]);
    assert!(log.contains("keyframe") && log.contains("delta"), "{log}");
    ok(&["tag", p(&store), "base", "--step", "350"]);
    let out = ok(&[
        "retain",
        p(&store),
        "--keep-last",
        "2",
        "--keep-every",
        "400",
    ]);
    assert!(
        out.contains("kept 4 checkpoint(s): 350, 400, 420, 430"),
        "{out}"
    );
    let s = Store::open(&store).expect("open");
    assert_eq!(s.checkpoints().expect("list"), vec![350, 400, 420, 430]);
    drop(s);
    assert!(ok(&["log", p(&store)]).contains("base"));
    // Run by hand, a retention gives the disk back even when it deletes one checkpoint (the
    // library keeps that room for a training loop's next save; ADR 0037).
    let out = ok(&["retain", p(&store), "--keep-last", "3", "--no-keep-tagged"]);
    assert!(out.contains("removed 1 checkpoint(s)"), "{out}");
    let sizes: Vec<u64> = out
        .lines()
        .find_map(|l| l.strip_prefix("file "))
        .and_then(|l| l.strip_suffix(" bytes"))
        .map(|l| l.split(" -> ").filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_default();
    assert!(sizes.len() == 2 && sizes[1] <= sizes[0], "{out}");
    // No room is kept: the file holds what it stores, and redb's fixed regions. (Deleting the
    // oldest checkpoint frees only its deltas when the newest is kept a keyframe, ADR 0006:
    // the file need not get shorter.)
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&["stats", p(&store), "--json"])).expect("stats json");
    let (file, stored) = (
        stats["file_bytes"].as_u64().expect("file bytes"),
        stats["stored_bytes"].as_u64().expect("stored bytes"),
    );
    assert!(
        file <= stored + stored / 10 + (512 << 10),
        "{file} {stored}"
    );

    // Usage errors exit 2, failures 1.
    let two = dir.path().join("step_1.safetensors");
    std::fs::copy(src.join("step_000350.safetensors"), &two).expect("copy");
    let out = strata(&["import", p(&store), p(&two), p(&two), "--step", "3"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(strata(&["retain", p(&store)]).status.code(), Some(2));
    assert_eq!(strata(&["frobnicate"]).status.code(), Some(2));
    let out = strata(&["export", p(&store), "--step", "1", "-o", p(&npy)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no checkpoint at step 1"));
    let bad = dir.path().join("bad.safetensors");
    std::fs::write(&bad, b"not a safetensors file").expect("write");
    let out = strata(&["import", p(&store), p(&bad), "--step", "9"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.safetensors"));
}

/// The number in `text` that follows `before` (e.g. "file " in "file 10 bytes").
fn number_after(text: &str, before: &str) -> u64 {
    text.find(before)
        .and_then(|at| {
            text[at + before.len()..]
                .split(|c: char| !c.is_ascii_digit())
                .next()
        })
        .and_then(|n| n.parse().ok())
        .expect("a number after the label")
}

/// Every key of a JSON document, nested ones included, that names a ratio.
fn keys_naming_a_ratio(doc: &serde_json::Value) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![doc];
    while let Some(v) = todo.pop() {
        match v {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    if k.contains("ratio") {
                        found.push(k.clone());
                    }
                    todo.push(v);
                }
            }
            serde_json::Value::Array(items) => todo.extend(items),
            _ => {}
        }
    }
    found
}

#[test]
fn import_leaves_a_truthful_length_with_or_without_compaction() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = series_root().join("dev_ft/bf16");
    let sizes = |store: &Path| {
        let stats: serde_json::Value =
            serde_json::from_str(&ok(&["stats", p(store), "--json"])).expect("stats json");
        let number = |key: &str| stats[key].as_u64().expect("a size in stats");
        (
            number("file_bytes"),
            number("disk_bytes"),
            number("stored_bytes"),
        )
    };

    // The file's length tells its size: within a tenth of its bytes on disk (ADR 0028).
    let store = dir.path().join("ft.strata");
    let out = ok(&["import", p(&store), p(&src)]);
    assert!(out.contains("on disk), ratio"), "{out}");
    let (file, disk, stored) = sizes(&store);
    assert!(disk >= stored && file * 10 <= disk * 11, "{out}");
    let printed = number_after(&out, "file ");
    assert_eq!(
        printed, file,
        "the import printed the size before its trim: {out}"
    );

    // --no-compact never compacts; the room redb grew the file by is at its end (the writer
    // takes the lowest free pages, ADR 0040), where redb's own close cuts it off.
    let store = dir.path().join("room.strata");
    ok(&["import", p(&store), p(&src), "--no-compact"]);
    let (file, disk, stored) = sizes(&store);
    assert!(disk >= stored && file * 10 <= disk * 11, "{file} {disk}");

    let out = ok(&["compact", p(&store)]);
    assert_eq!(number_after(&out, "file "), file, "{out}");
    let after = number_after(&out, "-> ");
    assert!(after <= file && after >= stored, "{out}");
    assert_eq!(std::fs::metadata(&store).expect("store").len(), after);
    ok(&["verify", p(&store)]);
}

#[test]
fn import_compacts_a_file_whose_free_pages_take_disk() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("freed.strata");
    {
        // Pages written, then freed below pages still in use: 8 MiB of noise saved, a small
        // checkpoint after it, and the first deleted; kept as they are when this handle
        // closes.
        let opts = Options {
            trim_on_close: false,
            ..Options::default()
        };
        let s = Store::open_with(&store, opts).expect("open");
        for (step, n) in [(1, 1 << 21), (2, 1024)] {
            let bytes = f32_bytes(&noise(n, step));
            let t = TensorRef {
                dtype: DType::F32,
                shape: &[n as u64],
                bytes: &bytes,
            };
            s.save_checkpoint(step, &[("w", t)], "").expect("save");
        }
        s.delete_checkpoint(1).expect("delete");
    }
    let before = std::fs::metadata(&store).expect("store").len();
    let src = dir.path().join("small.safetensors");
    common::write_noise_safetensors(&src, 2, 1024);
    ok(&["import", p(&store), p(&src), "--step", "3"]);
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&["stats", p(&store), "--json"])).expect("stats json");
    let file = stats["file_bytes"].as_u64().expect("file bytes");
    assert!(
        file * 4 < before,
        "the import compacted the freed pages away: {before} -> {file} bytes"
    );
    ok(&["verify", p(&store)]);
}

#[test]
fn verify_exits_1_on_a_corrupt_segment() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("ft.strata");
    let src = series_root().join("dev_ft/bf16");
    ok(&["import", p(&store), p(&src)]);
    let clean = std::fs::read(&store).expect("read store");
    let hits: Vec<usize> = clean
        .windows(4)
        .enumerate()
        .filter(|(_, w)| *w == b"STSG")
        .map(|(i, _)| i)
        .collect();
    assert!(!hits.is_empty(), "no segment magic in the store");
    let mut detected = 0;
    for &at in hits.iter().take(6) {
        let mut bad = clean.clone();
        let i = (at + 60).min(bad.len() - 1);
        bad[i] ^= 0x5a;
        std::fs::write(&store, &bad).expect("write");
        let out = strata(&["verify", p(&store)]);
        let code = out.status.code();
        assert!(code == Some(0) || code == Some(1), "verify: {out:?}");
        if code == Some(1) {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                text.contains("tensor ") && text.contains("block "),
                "{text}"
            );
            detected += 1;
        }
    }
    assert!(detected > 0, "no corruption was detected");
    std::fs::write(&store, &clean).expect("restore");
    assert_eq!(strata(&["verify", p(&store)]).status.code(), Some(0));
}

#[test]
fn demo_runs_on_real_and_synthetic_data() {
    for synthetic in [false, true] {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut args = vec!["demo", p(dir.path())];
        if synthetic {
            args.push("--synthetic");
        }
        let out = ok(&args);
        for part in ["ratio:", "partial read", "history of", "verify OK"] {
            assert!(out.contains(part), "demo output lacks {part:?}: {out}");
        }
        assert!(dir.path().join("strata-demo.strata").is_file());
    }
}

#[test]
fn cli_tier_policies_and_maintenance() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("tiers.strata");
    let src = series_root().join("dev_ft/bf16/step_000430.safetensors");
    ok(&["import", p(&store), p(&src), "--step", "430"]);
    // A matrix: a small vector is packed, exact whatever its policy (ADR 0041).
    let name = load_series("dev_ft/bf16")[0]
        .tensors
        .iter()
        .find(|t| t.2.len() >= 2)
        .expect("a matrix")
        .0
        .clone();

    assert!(ok(&["policy", p(&store)]).contains("no tier policy rules"));
    let out = ok(&["policy", p(&store), "*", "--tiered", "warm7"]);
    assert!(out.contains("tiered from warm7"), "{out}");
    ok(&["policy", p(&store), "*norm*", "--pin"]);
    let out = ok(&["policy", p(&store)]);
    assert!(out.contains("pin ") && out.contains("*norm*"), "{out}");

    // The lossless checkpoint converts at the next pass (at a fixed time, for the test).
    let out = ok(&["maintain", p(&store), "--now", "1000"]);
    assert!(out.contains("versions converted"), "{out}");
    assert!(!out.starts_with("0 moves, 0 versions"), "{out}");
    let log = ok(&["log", p(&store), &name]);
    let tiered = log.contains("warm7") || name.contains("norm");
    assert!(tiered, "{log}");
    let stats = ok(&["stats", p(&store), "--json"]);
    assert!(stats.contains("\"tier_bytes\""), "{stats}");
    assert!(ok(&["verify", p(&store)]).contains("verify OK"));

    // Bad input: an unknown tier, no action, an unknown rule.
    for args in [
        vec!["policy", p(&store), "x", "--tiered", "warm6"],
        vec!["policy", p(&store), "x"],
    ] {
        let out = strata(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    let out = strata(&["policy", p(&store), "nope", "--remove"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no tier policy rule"));
}

#[test]
fn get_prints_fidelity_exact_and_tiered() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("fidelity.strata");
    // A rule through the tool: tensors named kv.* are written at 5 bits.
    ok(&["policy", p(&store), "kv.*", "--tiered", "warm5"]);
    let values = noise(64 * 256, 7);
    let bytes = f32_bytes(&values);
    let t = TensorRef {
        dtype: DType::F32,
        shape: &[64, 256],
        bytes: &bytes,
    };
    let s = Store::open(&store).expect("open");
    s.put("w", 7, &t).expect("put w");
    s.put("kv.0", 7, &t).expect("put kv.0");
    let bounded = s.get("kv.0", 7).expect("get kv.0").fidelity;
    assert_eq!(s.get("w", 7).expect("get w").fidelity, Fidelity::Exact);
    drop(s);
    let Fidelity::Bounded {
        bits,
        max_rel_error,
    } = bounded
    else {
        panic!("kv.0 is not quantized: {bounded:?}");
    };
    assert_eq!(bits, 5);

    // Text: a line of its own, after the summary line.
    let out = ok(&["get", p(&store), "w", "--step", "7"]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("w step 7: f32 [64, 256]"), "{out}");
    assert_eq!(lines[1], "fidelity: exact", "{out}");
    let out = ok(&["get", p(&store), "kv.0", "--step", "7"]);
    let want =
        format!("fidelity: 5 bits, max rel. error {max_rel_error:.4} (of each group's max |x|)");
    assert_eq!(out.lines().nth(1), Some(want.as_str()), "{out}");
    // Writing a file says it too.
    let npy = dir.path().join("kv.npy");
    let out = ok(&["get", p(&store), "kv.0", "--step", "7", "-o", p(&npy)]);
    assert!(out.contains(&want), "{out}");

    // JSON.
    let doc = |name: &str| -> serde_json::Value {
        serde_json::from_str(&ok(&["get", p(&store), name, "--step", "7", "--json"]))
            .expect("get --json")
    };
    let w = doc("w");
    assert_eq!(w["fidelity"], serde_json::json!({ "kind": "exact" }), "{w}");
    assert_eq!(w["step"].as_u64(), Some(7));
    assert_eq!(w["shape"], serde_json::json!([64, 256]));
    assert_eq!(w["bytes"].as_u64(), Some(bytes.len() as u64));
    assert_eq!(w["head"].as_array().map(Vec::len), Some(8));
    let kv = doc("kv.0");
    assert_eq!(kv["fidelity"]["kind"], "bounded", "{kv}");
    assert_eq!(kv["fidelity"]["bits"].as_u64(), Some(5), "{kv}");
    assert_eq!(
        kv["fidelity"]["max_rel_error"].as_f64(),
        Some(max_rel_error),
        "{kv}"
    );
}

#[test]
fn read_commands_work_while_a_writer_holds_the_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("held.strata");
    let values = noise(32 * 64, 3);
    let bytes = f32_bytes(&values);
    let t = TensorRef {
        dtype: DType::F32,
        shape: &[32, 64],
        bytes: &bytes,
    };
    // This process is the trainer: it holds the store open for writing throughout.
    let writer = Store::open(&store).expect("open the writer");
    writer
        .save_checkpoint(10, &[("w", t)], "{}")
        .expect("save 10");

    let out = ok(&["log", p(&store)]);
    assert!(out.contains("10"), "{out}");
    let out = ok(&["get", p(&store), "w", "--step", "10", "--json"]);
    assert!(out.contains("\"exact\""), "{out}");
    ok(&["stats", p(&store)]);
    ok(&["verify", p(&store)]);
    ok(&["history", p(&store), "w", "--index", "0"]);
    let exported = dir.path().join("10.safetensors");
    ok(&["export", p(&store), "--step", "10", "-o", p(&exported)]);
    let file = std::fs::read(&exported).expect("read export");
    let st = SafeTensors::deserialize(&file).expect("safetensors");
    assert_eq!(st.tensor("w").expect("w").data(), bytes.as_slice());

    // A commit made after the reads started is seen by the next command.
    writer
        .save_checkpoint(20, &[("w", t)], "{}")
        .expect("save 20");
    let out = ok(&["log", p(&store)]);
    assert!(out.contains("20"), "{out}");

    // A write from another process is refused: the store is in use.
    let out = strata(&["tag", p(&store), "best", "--step", "10"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("in use"),
        "{out:?}"
    );
    // A read command on a store that does not exist says so and creates nothing.
    let missing = dir.path().join("missing.strata");
    let out = strata(&["log", p(&missing)]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not exist"),
        "{out:?}"
    );
    assert!(!missing.exists());
}

#[test]
fn age_keeps_the_last_exact_and_reports_the_error_of_the_others() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("age.strata");
    let series = load_series("dev_ft/bf16");
    ok(&["import", p(&store), p(&series_root().join("dev_ft/bf16"))]);
    let (oldest, last) = (series[0].step, series[series.len() - 1].step);
    let matrix = series[0]
        .tensors
        .iter()
        .find(|(n, _, _, _)| n.contains("attn") && n.ends_with("weight"))
        .map(|t| t.0.clone())
        .expect("an attention matrix");

    // Refused with the reason, nothing changed: the last checkpoint, a bad budget pattern.
    let out = strata(&[
        "age",
        p(&store),
        "--budget",
        "1e-2",
        "--steps",
        &last.to_string(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("keep_exact_last"));
    let out = strata(&[
        "age",
        p(&store),
        "--budget",
        "1e-2",
        "--budget-for",
        "no-error-here",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PATTERN=ERROR"));

    let out = ok(&["age", p(&store), "--budget", "1e-2", "--json"]);
    let report: serde_json::Value = serde_json::from_str(out.trim()).expect("age --json");
    assert_eq!(report["kept"].as_array().map(Vec::len), Some(2), "{report}");
    assert!(report["max_rel_error"].as_f64().expect("max_rel_error") <= 1e-2);
    assert!(
        report["stored_bytes_after"].as_u64() < report["stored_bytes_before"].as_u64(),
        "{report}"
    );
    let log = ok(&["log", p(&store)]);
    assert!(log.contains("(aged, rel. error <="), "{log}");
    let got = ok(&["get", p(&store), &matrix, "--step", &oldest.to_string()]);
    assert!(got.contains("fidelity: aged, rel. error"), "{got}");
    let got = ok(&["get", p(&store), &matrix, "--step", &last.to_string()]);
    assert!(got.contains("fidelity: exact"), "{got}");
    assert!(ok(&["verify", p(&store)]).contains("verify OK"));
}

#[test]
fn sub_byte_floats_import_print_and_export() {
    use safetensors::tensor::{serialize, Dtype, TensorView};
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("mx.strata");
    // FP4 pairs: 0x21 is (0.5, 1.0), 0xF7 is (6.0, -6.0). FP6 E2M3: 1.0 then 7.5, 0, 0.
    let fp4: Vec<u8> = [0x21u8, 0xF7].repeat(32);
    let fp6: Vec<u8> = [0xC8u8, 0x07, 0x00].repeat(4);
    let views = [
        (
            "fp4",
            TensorView::new(Dtype::F4, vec![4, 32], &fp4).expect("fp4 view"),
        ),
        (
            "fp6",
            TensorView::new(Dtype::F6_E2M3, vec![16], &fp6).expect("fp6 view"),
        ),
    ];
    let src = dir.path().join("step_5.safetensors");
    std::fs::write(&src, serialize(views, None).expect("serialize")).expect("write");
    ok(&["import", p(&store), p(&src)]);

    let out = ok(&["get", p(&store), "fp4", "--step", "5"]);
    assert!(
        out.starts_with("fp4 step 5: f4_e2m1_x2 [4, 16], 64 bytes"),
        "{out}"
    );
    assert!(
        out.contains("[0.500000, 1.000000, 6.000000, -6.000000, 0.500000"),
        "{out}"
    );
    let out = ok(&["get", p(&store), "fp6", "--step", "5"]);
    assert!(
        out.contains("[1.000000, 7.500000, 0.000000, 0.000000, 1.000000"),
        "{out}"
    );

    // .npy: FP4 pairs are bytes, FP6 groups 3-byte voids.
    let npy = dir.path().join("fp4.npy");
    ok(&["get", p(&store), "fp4", "--step", "5", "-o", p(&npy)]);
    let bytes = std::fs::read(&npy).expect("read npy");
    let h = parse_npy_header(&bytes).expect("npy header");
    assert_eq!((h.descr.as_str(), &h.shape[..]), ("|u1", &[4u64, 16][..]));
    assert_eq!(bytes[h.data_offset..], fp4[..]);
    ok(&["get", p(&store), "fp6", "--step", "5", "-o", p(&npy)]);
    let bytes = std::fs::read(&npy).expect("read npy");
    let h = parse_npy_header(&bytes).expect("npy header");
    assert_eq!((h.descr.as_str(), &h.shape[..]), ("|V3", &[4u64][..]));

    let back = dir.path().join("back.safetensors");
    ok(&["export", p(&store), "--step", "5", "-o", p(&back)]);
    assert_eq!(
        std::fs::read(&back).expect("read"),
        std::fs::read(&src).expect("read")
    );
}
