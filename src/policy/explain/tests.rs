//! Every code the pipeline can emit has an explanation, and every explanation's
//! example produces its code while its fix does not.

// This file is compiled only through `#[cfg(test)] mod tests;`; the attribute below
// says so where a line-based layering check (tests/layering.rs, modcycles.py) looks,
// since the built-in strategies' sources it lints with come from `routing`.
#[cfg(test)]
use crate::routing::policy::with_builtins;
use std::collections::BTreeSet;

use super::*;
use crate::policy::diagnostic::codes as ecodes;
use crate::policy::lint::{codes as wcodes, lint_sources_with, LintOptions};
use crate::policy::{Registry, SourceMap};

/// Codes whose example is a description, with the input the test builds instead
/// (`None`: no input is known to reach the code, see E0105's text).
const SCHEMATIC: &[&str] = &["E0102", "E0105", "E0106", "E0701"];

fn rs_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every code written anywhere in `src/policy` (outside this module) and in the
/// policy docs.
fn emitted_codes() -> BTreeSet<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let re = regex::Regex::new(r"\b[EW]0[1-9][0-9]{2}\b").unwrap();
    let mut files = Vec::new();
    rs_files(&root.join("src/policy"), &mut files);
    files.retain(|p| !p.starts_with(root.join("src/policy/explain")));
    files.push(root.join("docs/lint.md"));
    files.push(root.join("docs/policy-language.md"));
    let mut out = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        out.extend(re.find_iter(&text).map(|m| m.as_str().to_string()));
    }
    out
}

#[test]
fn every_code_is_explained_and_every_explanation_is_a_code() {
    let explained: BTreeSet<String> = EXPLANATIONS.iter().map(|(c, _)| c.to_string()).collect();
    let emitted = emitted_codes();
    // The code tables and the scan of the sources agree with the explanations.
    let tables: BTreeSet<String> = ecodes::ALL
        .iter()
        .chain(wcodes::ALL)
        .map(|(c, _)| c.to_string())
        .collect();
    assert!(emitted.len() >= 40, "{emitted:?}");
    assert_eq!(
        emitted, explained,
        "codes in src/policy and docs vs explanations"
    );
    assert_eq!(tables, explained, "codes::ALL tables vs explanations");
    for (code, text) in EXPLANATIONS {
        assert!(text.starts_with(&format!("# {code}: ")), "{code}");
        assert!(
            text.contains("## Example") && text.contains("## Fix"),
            "{code}"
        );
        assert_eq!(explain(&code.to_lowercase()), Some(*text));
    }
    assert_eq!(explain("E9999"), None);
}

fn lint(text: &str) -> Vec<crate::policy::Diagnostic> {
    let sources = with_builtins(vec![("example.policy".into(), text.into())]);
    lint_sources_with(&sources, &Registry::example(), &LintOptions::default()).diagnostics
}

fn failed_tests(text: &str) -> usize {
    let sources = with_builtins(vec![("example.policy".into(), text.into())]);
    let set = crate::policy::parse_and_check(&sources, &Registry::example()).expect("checks");
    crate::policy::run_tests(&set).failed
}

#[test]
fn each_example_produces_its_code_and_its_fix_does_not() {
    for (code, text) in EXPLANATIONS {
        let blocks = policy_blocks(text);
        if SCHEMATIC.contains(code) {
            assert!(
                blocks.len() <= 1,
                "{code}: the schematic example is a text block"
            );
            continue;
        }
        assert_eq!(blocks.len(), 2, "{code}: an example and a fix");
        let (bad, good) = (&blocks[0], &blocks[1]);
        if *code == ecodes::TEST_FAILED {
            assert!(lint(bad).is_empty() && failed_tests(bad) > 0, "{code}");
            assert!(lint(good).is_empty() && failed_tests(good) == 0, "{code}");
            continue;
        }
        let d = lint(bad);
        assert!(
            d.iter().any(|d| d.code == *code),
            "{code}: example gives {d:#?}"
        );
        let d = lint(good);
        assert!(
            d.iter().all(|d| d.code != *code && !d.is_error()),
            "{code}: fix gives {d:#?}"
        );
    }
}

#[test]
fn schematic_examples_are_built_and_produce_their_codes() {
    let has = |d: &[crate::policy::Diagnostic], c: &str| d.iter().any(|d| d.code == c);
    // E0102: a file over 1 MiB.
    let big = format!("# {}\n", "x".repeat(crate::policy::parser::MAX_INPUT_BYTES));
    assert!(has(&lint(&big), ecodes::INPUT_TOO_LARGE));
    // E0701: a list of 3,000 models.
    let list: Vec<String> = (0..3000).map(|i| format!("\"m{i}\"")).collect();
    let p = format!(
        "route r {{\n  rule a when request.model in [{}] {{ use \"gpt-4o\" }}\n  default use model\n}}\n",
        list.join(", ")
    );
    assert!(has(&lint(&p), ecodes::TOO_COMPLEX));
    // E0106: a Latin-1 byte, through the loader that reads files.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("latin1.policy");
    std::fs::write(&f, b"route r {\n  default reject 400 \"caf\xE9\"\n}\n").unwrap();
    match crate::routing::policy::read_policy_file(&f, "latin1.policy") {
        Err(crate::routing::policy::LoadError::NotUtf8(e)) => {
            assert_eq!(e.diagnostics[0].code, ecodes::NOT_UTF8, "{}", e.render())
        }
        other => panic!("{other:?}"),
    }
    // E0105 has no known input (its explanation says so); it is the only one.
    let unbuilt: Vec<&str> = SCHEMATIC
        .iter()
        .copied()
        .filter(|c| {
            ![
                ecodes::INPUT_TOO_LARGE,
                ecodes::TOO_COMPLEX,
                ecodes::NOT_UTF8,
            ]
            .contains(c)
        })
        .collect();
    assert_eq!(unbuilt, vec![ecodes::PARSE_LIMIT]);
    let _ = SourceMap::new();
}
