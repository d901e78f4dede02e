//! The module layering of `src/`, checked: no import cycle between top-level modules,
//! and the policy language pure (nothing from the HTTP side).
//!
//! An edge `a -> b` is any `crate::b` path (or `use crate::{b, ...}`) in a file of
//! top-level module `a`, outside comments and `#[cfg(test)]` code (everything after
//! the first `#[cfg(test)]` of a file, and files only compiled for tests).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text of `file` that is compiled outside tests, without line comments.
fn production_code(text: &str) -> String {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    code.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn idents_after(code: &str, prefix: &str) -> Vec<String> {
    code.match_indices(prefix)
        .map(|(i, _)| {
            code[i + prefix.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        })
        .filter(|s: &String| !s.is_empty())
        .collect()
}

/// Top-level module -> the top-level modules it imports.
fn edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let test_only = ["tests.rs", "testing.rs", "builtin_tests.rs"];
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "main" || module == "lib" {
            continue;
        }
        let name = f.file_name().unwrap().to_string_lossy();
        if test_only.contains(&name.as_ref()) || rel.components().any(|c| c.as_os_str() == "tests")
        {
            continue;
        }
        let code = production_code(&std::fs::read_to_string(&f).unwrap());
        let mut targets: Vec<String> = idents_after(&code, "crate::");
        for (i, _) in code.match_indices("use crate::{") {
            let inner = &code[i + "use crate::{".len()..];
            let inner = &inner[..inner.find('}').unwrap_or(inner.len())];
            targets.extend(
                inner
                    .split(',')
                    .map(|t| t.trim().split("::").next().unwrap_or("").to_string())
                    .filter(|t| !t.is_empty()),
            );
        }
        let set = edges.entry(module.clone()).or_default();
        set.extend(targets.into_iter().filter(|t| *t != module));
    }
    edges
}

fn reaches(edges: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from.to_string()];
    while let Some(m) = stack.pop() {
        for next in edges.get(&m).into_iter().flatten() {
            if next == to {
                return true;
            }
            if seen.insert(next.clone()) {
                stack.push(next.clone());
            }
        }
    }
    false
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    let edges = edges(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")));
    assert!(edges.len() > 10, "found too few modules: {edges:?}");
    let mut cycles = Vec::new();
    for (a, targets) in &edges {
        for b in targets {
            if reaches(&edges, b, a) {
                cycles.push(format!("{a} -> {b} -> ... -> {a}"));
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_policy_language_imports_nothing_from_the_http_side() {
    let src = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
    let edges = edges(src);
    let policy = edges.get("policy").cloned().unwrap_or_default();
    for forbidden in [
        "api", "gateway", "ingress", "egress", "server", "app", "routing",
    ] {
        assert!(
            !policy.contains(forbidden),
            "policy imports crate::{forbidden}"
        );
    }
    let mut files = Vec::new();
    rust_files(&src.join("policy"), &mut files);
    for f in files {
        let code = production_code(&std::fs::read_to_string(&f).unwrap());
        for krate in ["hyper::", "tokio::", "http::", "reqwest::"] {
            assert!(
                !code.contains(&format!("use {krate}")) && !code.contains(&format!(" {krate}")),
                "{} uses {krate}",
                f.display()
            );
        }
    }
}
