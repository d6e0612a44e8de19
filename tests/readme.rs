//! Checks of the README and the pages under `docs/` as a reader meets them: short, Python
//! before the command line and Rust, no words only the team knows, no paths of the machine
//! the figures were made on, no line twice, every relative link to a file that exists, and
//! the test command the one CI runs. The snippets themselves run elsewhere: the Rust ones as
//! doctests of this crate (`src/lib.rs`), the Python ones in `python/tests/test_readme.py`,
//! the command-line ones in `cli/tests/readme.rs`.

#![allow(clippy::panic)]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// README.md and every Markdown page under docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let docs = std::fs::read_dir(root().join("docs")).expect("docs/");
    let mut more: Vec<PathBuf> = docs
        .map(|e| e.expect("docs entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    more.sort();
    assert!(!more.is_empty(), "no page in docs/");
    pages.extend(more);
    pages
}

/// The lines of `text` outside fenced code blocks, with their numbers (from 1).
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

#[test]
fn readme_is_short_and_puts_python_first() {
    let text = read(&root().join("README.md"));
    let lines = text.lines().count();
    assert!(
        lines < 200,
        "README.md has {lines} lines; the full tables belong in docs/benchmarks.md"
    );
    let at = |heading: &str| {
        text.lines()
            .position(|l| l == heading)
            .unwrap_or_else(|| panic!("README.md has no heading {heading:?}"))
    };
    let order = ["## Two commands", "## Python", "## Command line", "## Rust"];
    let lines_at: Vec<usize> = order.iter().map(|h| at(h)).collect();
    assert!(
        lines_at.windows(2).all(|w| w[0] < w[1]),
        "README.md's sections are not in the order {order:?}: lines {lines_at:?}"
    );
}

#[test]
fn readme_test_command_is_what_ci_runs() {
    let text = read(&root().join("README.md"));
    let block = text
        .split("## Two commands")
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .expect("README.md's two commands in a sh block");
    let commands: Vec<&str> = block
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        commands,
        [
            "cargo run --release -p strata-cli -- demo",
            "cargo test --workspace --release"
        ]
    );
    let ci = read(&root().join(".ci/run"));
    assert!(
        ci.lines().any(|l| l.trim() == commands[1]),
        ".ci/run does not run the README's test command {:?}",
        commands[1]
    );
}

#[test]
fn pages_hold_no_internal_words_and_no_machine_paths() {
    let internal = [
        regex_free::Pattern::WordNumber("issue"),
        regex_free::Pattern::WordNumber("issues"),
        regex_free::Pattern::WordNumber("stop"),
        regex_free::Pattern::Text("the seed specifies"),
    ];
    let machine = ["/work/", "/root/", "/home/", "/Users/", "/tmp/.tmp"];
    let mut found = Vec::new();
    for page in pages() {
        let text = read(&page);
        let name = page
            .strip_prefix(root())
            .unwrap_or(&page)
            .display()
            .to_string();
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            for p in &internal {
                if p.matches(&lower) {
                    found.push(format!("{name}:{}: internal word ({p:?}): {line}", n + 1));
                }
            }
            for m in machine {
                if line.contains(m) {
                    found.push(format!(
                        "{name}:{}: a path of this machine ({m}): {line}",
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn readme_has_no_line_twice() {
    let text = read(&root().join("README.md"));
    let mut seen = std::collections::HashMap::new();
    let mut twice = Vec::new();
    for (n, line) in prose(&text) {
        let l = line.trim();
        // Blank lines, markers and table rules repeat by nature.
        if l.is_empty() || l.starts_with("<!--") || l.starts_with("|---") {
            continue;
        }
        if let Some(first) = seen.insert(l.to_string(), n) {
            twice.push(format!("lines {first} and {n}: {l}"));
        }
    }
    assert!(
        twice.is_empty(),
        "README.md repeats lines:\n{}",
        twice.join("\n")
    );
}

#[test]
fn relative_links_point_at_files_that_exist() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = read(&page);
        let dir = page.parent().expect("page folder");
        for (n, line) in prose(&text) {
            let mut rest = line;
            while let Some(i) = rest.find("](") {
                rest = &rest[i + 2..];
                let Some(end) = rest.find(')') else { break };
                let target = &rest[..end];
                rest = &rest[end..];
                if target.contains("://")
                    || target.starts_with('#')
                    || target.starts_with("mailto:")
                {
                    continue;
                }
                let file = target.split('#').next().unwrap_or(target);
                checked += 1;
                if !dir.join(file).exists() {
                    broken.push(format!("{}:{n}: {target}", page.display()));
                }
            }
        }
    }
    assert!(checked > 10, "only {checked} links checked");
    assert!(
        broken.is_empty(),
        "links to missing files:\n{}",
        broken.join("\n")
    );
}

/// Matching without a regex crate (this crate does not depend on one).
mod regex_free {
    /// What an internal word looks like.
    #[derive(Debug)]
    pub(crate) enum Pattern {
        /// The word, a space and a number (`issue 11`, `stop 3`).
        WordNumber(&'static str),
        /// A phrase, anywhere.
        Text(&'static str),
    }

    impl Pattern {
        /// Whether the lower-cased `line` holds it.
        pub(crate) fn matches(&self, line: &str) -> bool {
            match self {
                Pattern::Text(t) => line.contains(t),
                Pattern::WordNumber(w) => line.match_indices(w).any(|(i, _)| {
                    let before = line[..i].chars().next_back();
                    let after = &line[i + w.len()..];
                    before.is_none_or(|c| !c.is_alphanumeric())
                        && after.starts_with(' ')
                        && after[1..].starts_with(|c: char| c.is_ascii_digit())
                }),
            }
        }
    }
}
