//! Golden diagnostics for the invalid-policy corpus, the never-panic property tests
//! of the parser and checker, and `fmt` idempotence on generated policies.
//!
//! Each `tests/policies/invalid/NAME.policy` has `NAME.expected`: the exact human
//! rendering of `switchyard lint` for it against the example registry. Regenerate with
//! `UPDATE_GOLDEN=1 cargo test --test policy_corpus`.

use std::path::{Path, PathBuf};

use switchyard::policy::diagnostic::render_all;
use switchyard::policy::lint::lint_sources;
use switchyard::policy::{Registry, SourceMap};

#[path = "policy_corpus/fuzz.rs"]
mod fuzz;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/policies/invalid")
}

/// The human lint output for one file, named by its path relative to the corpus.
fn render(name: &str, text: &str) -> (String, usize) {
    let mut m = SourceMap::new();
    m.add(name, text);
    let out = lint_sources(&m, &Registry::example());
    let errors = out.diagnostics.iter().filter(|d| d.is_error()).count();
    (render_all(&out.diagnostics, &m), errors)
}

#[test]
fn invalid_corpus_matches_golden_files() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("corpus directory")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "policy"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 30,
        "the corpus has only {} files",
        files.len()
    );
    let mut mismatches = Vec::new();
    for f in &files {
        let name = format!(
            "invalid/{}",
            f.file_name().and_then(|n| n.to_str()).unwrap_or("")
        );
        let text = std::fs::read_to_string(f).expect("readable");
        let (got, errors) = render(&name, &text);
        assert!(errors > 0, "{name} produced no error:\n{got}");
        let golden = f.with_extension("expected");
        if update {
            std::fs::write(&golden, &got).expect("writable");
            continue;
        }
        let want = std::fs::read_to_string(&golden).unwrap_or_default();
        if want != got {
            mismatches.push(format!("--- {name}: expected\n{want}--- got\n{got}"));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} golden mismatch(es); run with UPDATE_GOLDEN=1 to accept:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

#[test]
fn oversized_input_is_refused_with_a_clear_error() {
    let text = format!(
        "# {}\nroute r {{\n  default use model\n}}\n",
        "x".repeat(switchyard::policy::parser::MAX_INPUT_BYTES)
    );
    let (got, errors) = render("big.policy", &text);
    assert_eq!(errors, 1);
    assert!(got.starts_with("error[E0102]: the policy file is"), "{got}");
}
