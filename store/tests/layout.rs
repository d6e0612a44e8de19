//! The module layout of `store/src` has no import loop: no file reaches itself through the
//! `use` lines and `crate::` paths of the files it imports (re-exports resolved to the file
//! that defines the name). Test modules (`#[cfg(test)] mod tests`) are left out.
//!
//! Run with `--nocapture` to print who imports whom.

#![allow(clippy::panic, clippy::unwrap_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path of a source file: `engine/blocks.rs` -> `engine::blocks`, `tiers/mod.rs` ->
/// `tiers`, `lib.rs` -> ``.
fn module_of(rel: &Path) -> String {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts.join("::")
}

fn rust_files(dir: &Path, root: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, root, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p.strip_prefix(root).unwrap().to_path_buf());
        }
    }
}

/// The code of a file without comments and without its test module.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Expands `a::{b, c::{d, e}}` into full paths.
fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim().trim_end_matches("::");
        let inner = &tree[open + 1..tree.rfind('}').unwrap()];
        let base = join(prefix, head);
        let (mut depth, mut start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&base, &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand(&base, &inner[start..], out);
    } else if !tree.is_empty() {
        let path = tree.split(" as ").next().unwrap().trim();
        out.push(join(prefix, path));
    }
}

fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}::{b}"),
    }
}

/// Every path a file's code names, made absolute (`crate::` dropped).
fn paths_named(module: &str, code: &str, modules: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    // `use` statements (a line starting with `use`, `pub use` or `pub(crate) use`), possibly
    // over several lines.
    let mut stmt: Option<String> = None;
    for line in code.lines() {
        let t = line.trim_start();
        let t = t
            .strip_prefix("pub(crate) ")
            .or_else(|| t.strip_prefix("pub "))
            .unwrap_or(t);
        let mut s = match stmt.take() {
            Some(s) => s + " " + line,
            None => match t.strip_prefix("use ") {
                Some(rest) => rest.to_string(),
                None => continue,
            },
        };
        match s.find(';') {
            Some(end) => {
                s.truncate(end);
                let mut paths = Vec::new();
                expand("", &s, &mut paths);
                for p in paths {
                    out.push(absolute(module, &p, modules));
                }
            }
            None => stmt = Some(s),
        }
    }
    // `crate::a::b` paths written inline.
    for (i, _) in code.match_indices("crate::") {
        let tail: String = code[i..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        if !tail.contains('{') {
            out.push(absolute(module, tail.trim_end_matches(':'), modules));
        }
    }
    out
}

/// `crate::a`, `super::a`, `self::a` and `child::a` made absolute from `module`; an
/// external crate's path (std, redb, ...) becomes empty.
fn absolute(module: &str, path: &str, modules: &BTreeSet<String>) -> String {
    let mut parts: Vec<&str> = path.split("::").collect();
    let mut base: Vec<&str> = if module.is_empty() {
        vec![]
    } else {
        module.split("::").collect()
    };
    match parts.first().copied() {
        Some("crate") => {
            parts.remove(0);
            base.clear();
        }
        Some("self") => {
            parts.remove(0);
        }
        Some("super") => {
            while parts.first() == Some(&"super") {
                parts.remove(0);
                base.pop();
            }
        }
        Some(first) if modules.contains(&join(module, first)) => {}
        _ => return String::new(),
    }
    base.extend(parts);
    base.join("::")
}

#[test]
fn store_src_has_no_import_loop() {
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
    let mut files = Vec::new();
    rust_files(&root, &root, &mut files);
    // Module path -> file, and per module its re-exports (name -> module path).
    let mut modules: BTreeMap<String, PathBuf> = BTreeMap::new();
    for f in &files {
        if !f.starts_with("bin") {
            modules.insert(module_of(f), f.clone());
        }
    }
    let names: BTreeSet<String> = modules.keys().cloned().collect();
    let mut reexports: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut named: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let code = code_of(&text);
        for line in code.split(';') {
            let line = line.trim();
            if let Some(stmt) = line
                .strip_prefix("pub(crate) use ")
                .or_else(|| line.strip_prefix("pub use "))
            {
                let mut paths = Vec::new();
                expand("", stmt, &mut paths);
                for p in paths {
                    let target = absolute(module, &p, &names);
                    let name = p.rsplit("::").next().unwrap().to_string();
                    reexports
                        .entry(module.clone())
                        .or_default()
                        .insert(name, target);
                }
            }
        }
        named.insert(module.clone(), paths_named(module, &code, &names));
    }
    // The file a path lands in: the longest module prefix, following re-exports of names.
    let resolve = |path: &str| -> Option<String> {
        let mut path = path.to_string();
        for _ in 0..8 {
            let parts: Vec<&str> = path.split("::").collect();
            let (module, rest) = (1..=parts.len())
                .rev()
                .map(|n| (parts[..n].join("::"), parts[n..].to_vec()))
                .find(|(m, _)| modules.contains_key(m))
                .unwrap_or((String::new(), parts.clone()));
            match rest
                .first()
                .and_then(|name| reexports.get(&module)?.get(*name))
            {
                Some(target) if *target != path => path = target.clone(),
                _ => return Some(module),
            }
        }
        None
    };
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, paths) in &named {
        let entry = edges.entry(module.clone()).or_default();
        for p in paths.iter().filter(|p| !p.is_empty()) {
            if let Some(target) = resolve(p).filter(|t| !t.is_empty()) {
                // A module file importing its own children is how re-exports work.
                if target != *module && !target.starts_with(&format!("{module}::")) {
                    entry.insert(target);
                }
            }
        }
    }
    edges.remove("");
    for (m, to) in &edges {
        println!(
            "{m} -> {}",
            to.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    // Depth-first search for a cycle.
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(m) {
            Some(2) => return None,
            Some(1) => {
                let at = stack.iter().position(|s| s == m).unwrap_or(0);
                let mut cycle = stack[at..].to_vec();
                cycle.push(m.to_string());
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(m.to_string(), 1);
        stack.push(m.to_string());
        for next in edges.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, edges, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(m.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in edges.keys() {
        if let Some(cycle) = visit(m, &edges, &mut state, &mut Vec::new()) {
            panic!("import loop in store/src: {}", cycle.join(" -> "));
        }
    }
    assert!(
        edges.len() > 20,
        "the scan found only {} modules",
        edges.len()
    );
}
