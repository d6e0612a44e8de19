//! The README's command-line snippets and the demo as the README describes them, run with the
//! `strata` binary of this build, from a folder that holds nothing but the repository's
//! committed `testdata/` (what a fresh clone has):
//!
//! - every `strata ...` line of the README's "Command line" block succeeds, in order;
//! - the demo's closing hint names commands that run as printed (it used to say `strata`
//!   when `cargo run` had put no `strata` on `PATH`);
//! - the demo imports as many checkpoints as the README says, with and without the real series;
//! - `docs/cli.md` names every command and every flag `strata --help` lists.

#![allow(clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn run(program: &str, args: &[&str], cwd: &Path) -> Output {
    let out = Command::new(program)
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap_or_else(|e| panic!("run {program} {args:?} in {}: {e}", cwd.display()));
    eprintln!(
        "$ {program} {}\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn strata(args: &[&str], cwd: &Path) -> String {
    let out = run(env!("CARGO_BIN_EXE_strata"), args, cwd);
    assert!(out.status.success(), "strata {args:?} failed: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// The lines of the first ```sh block after `heading` in the README, comments cut off.
fn sh_block(heading: &str) -> Vec<String> {
    let text = read(&repo().join("README.md"));
    let block = text
        .split(heading)
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .unwrap_or_else(|| panic!("README.md has no sh block under {heading:?}"));
    block
        .lines()
        .map(|l| l.split(" #").next().unwrap_or("").trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// A folder like a fresh clone's root, as far as the snippets go: `testdata/` and nothing else.
fn clone_like() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink(repo().join("testdata"), dir.path().join("testdata"))
        .expect("link testdata");
    dir
}

#[test]
fn readme_command_line_block_runs() {
    let lines = sh_block("## Command line");
    let dir = clone_like();
    let mut ran = 0;
    for line in &lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.first() {
            Some(&"strata") => {
                strata(&words[1..], dir.path());
                ran += 1;
            }
            // Installs the binary this test runs.
            _ if line == "cargo install --path cli" => {}
            _ => panic!("the README's command-line block has a line this test cannot run: {line}"),
        }
    }
    assert!(ran >= 5, "only {ran} strata commands in the README's block");
    assert!(dir.path().join("run.strata").is_file());
    assert!(dir.path().join("w.npy").is_file());
}

#[test]
fn demo_closing_hint_runs_as_printed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = strata(
        &["demo", dir.path().to_str().expect("utf-8"), "--synthetic"],
        &repo(),
    );
    let hint = out
        .lines()
        .find_map(|l| l.strip_prefix("next: "))
        .unwrap_or_else(|| panic!("the demo printed no hint: {out}"));
    let commands: Vec<&str> = hint.split('|').map(str::trim).collect();
    assert_eq!(commands.len(), 2, "{hint}");
    for command in commands {
        let words: Vec<&str> = command.split_whitespace().collect();
        let out = run(words[0], &words[1..], &repo());
        assert!(
            out.status.success(),
            "the demo's hint `{command}` failed: {out:?}"
        );
    }
}

/// The number in `text` just before `after` ("8 generated" gives 8).
fn number_before(text: &str, after: &str) -> usize {
    let i = text
        .find(after)
        .unwrap_or_else(|| panic!("README.md does not say {after:?}"));
    let digits: String = text[..i]
        .trim_end()
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number before {after:?}"))
}

/// The checkpoints the demo imported: one `step N  T tensors ...` line each.
fn imported(out: &str) -> usize {
    out.lines()
        .filter(|l| l.starts_with("step ") && l.contains(" tensors "))
        .count()
}

#[test]
fn demo_imports_what_the_readme_says() {
    let readme = read(&repo().join("README.md"));
    let dir = tempfile::tempdir().expect("temp dir");
    let out = strata(
        &["demo", dir.path().to_str().expect("utf-8"), "--synthetic"],
        &repo(),
    );
    assert_eq!(
        imported(&out),
        number_before(&readme, "generated bf16 checkpoints")
    );

    let real = repo().join("../shared/data/series/dev_ft/bf16");
    if !real.is_dir() {
        eprintln!("skipped the real series: {} is absent", real.display());
        return;
    }
    let files = std::fs::read_dir(&real)
        .expect("the real series")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
        })
        .count();
    assert_eq!(
        files,
        number_before(&readme, "checkpoints) when it is beside")
    );
    let out = strata(&["demo", dir.path().to_str().expect("utf-8")], &repo());
    assert_eq!(imported(&out), files, "{out}");
}

/// The subcommands `strata [SUB...] --help` lists.
fn subcommands(path: &[&str]) -> Vec<String> {
    let mut args = path.to_vec();
    args.push("--help");
    let help = strata(&args, &repo());
    let Some(list) = help.split("Commands:\n").nth(1) else {
        return Vec::new();
    };
    list.lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect()
}

/// The long flags `strata [SUB...] --help` lists.
fn flags(path: &[&str]) -> Vec<String> {
    let mut args = path.to_vec();
    args.push("--help");
    let help = strata(&args, &repo());
    help.split_whitespace()
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| {
            w.trim_end_matches(|c: char| !c.is_alphanumeric() && c != '-')
                .split('=')
                .next()
                .unwrap_or(w)
                .to_string()
        })
        .filter(|f| f != "--help" && f != "--version")
        .collect()
}

#[test]
fn cli_reference_names_every_command_and_flag() {
    let doc = read(&repo().join("docs/cli.md"));
    let mut missing = Vec::new();
    let mut paths: Vec<Vec<String>> = vec![Vec::new()];
    let mut seen = 0;
    while let Some(path) = paths.pop() {
        let p: Vec<&str> = path.iter().map(String::as_str).collect();
        if !p.is_empty() {
            let usage = format!("strata {}", p.join(" "));
            if !doc.contains(&usage) {
                missing.push(usage.clone());
            }
            for f in flags(&p) {
                if !doc.contains(&f) {
                    missing.push(format!("{usage} {f}"));
                }
            }
            seen += 1;
        }
        for sub in subcommands(&p) {
            let mut next = path.clone();
            next.push(sub);
            paths.push(next);
        }
    }
    assert!(seen > 15, "only {seen} commands found in `strata --help`");
    assert!(
        missing.is_empty(),
        "docs/cli.md does not name: {}",
        missing.join(", ")
    );
}
