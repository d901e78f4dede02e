//! Property tests: the parser, checker, linter and formatter never panic or hang,
//! and `fmt` is idempotent and meaning-preserving on generated valid policies.
//! Case counts are bounded so the whole file runs in a few seconds in CI.

use proptest::prelude::*;

use switchyard::policy::fmt::format_str;
use switchyard::policy::lint::lint_sources;
use switchyard::policy::parser::parse_str;
use switchyard::policy::{Registry, SourceMap};

fn shipped() -> Vec<String> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/policies");
    let mut out = Vec::new();
    for dir in [root.to_string(), format!("{root}/builtin")] {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if e.path().extension().is_some_and(|x| x == "policy") {
                out.push(std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
    }
    out.sort();
    assert!(out.len() > 5, "no shipped policies under {root}");
    out
}

/// Everything a tool does with a text; must return without panicking.
fn all_tools(text: &str) {
    let mut m = SourceMap::new();
    m.add("f.policy", text);
    let out = lint_sources(&m, &Registry::example());
    for d in &out.diagnostics {
        let _ = d.render(&m);
        let _ = d.to_json(&m);
    }
    if let Ok(formatted) = format_str("f.policy", text) {
        let again = format_str("f.policy", &formatted).expect("formatted text parses");
        assert_eq!(again, formatted, "fmt not idempotent on:\n{text}");
    }
}

const TOKENS: &[&str] = &[
    "route",
    "rule",
    "default",
    "when",
    "use",
    "via",
    "split",
    "by",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    "and",
    "or",
    "not",
    "in",
    "==",
    "<",
    ">=",
    "->",
    "50%",
    "2s",
    "1_000",
    "\"gpt-4o\"",
    "model",
    "request.model",
    "request.input_tokens",
    "has(request.org)",
    "header(\"x\")",
    "priority",
    "1",
    "strategy",
    "score",
    "=",
    "pick",
    "min",
    "test",
    "expect",
    "#c\n",
    "\n",
    ",",
    "-",
    "*",
    "..",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_strings_never_panic(s in "\\PC{0,200}") {
        all_tools(&s);
    }

    #[test]
    fn token_soup_never_panics(toks in prop::collection::vec(0..TOKENS.len(), 0..60)) {
        let text: Vec<&str> = toks.iter().map(|i| TOKENS[*i]).collect();
        all_tools(&text.join(" "));
    }

    #[test]
    fn mutated_shipped_policies_never_panic(file in 0usize..16, at in 0usize..4000, len in 0usize..12, tok in 0..TOKENS.len()) {
        let files = shipped();
        let text = &files[file % files.len()];
        let mut cut = at % (text.len() + 1);
        while !text.is_char_boundary(cut) { cut -= 1; }
        let mut end = (cut + len).min(text.len());
        while !text.is_char_boundary(end) { end -= 1; }
        let mutated = format!("{}{}{}", &text[..cut], TOKENS[tok], &text[end.max(cut)..]);
        all_tools(&mutated);
    }

    #[test]
    fn generated_policies_format_idempotently(
        rules in prop::collection::vec((0u8..4, 0u64..200_000, prop::bool::ANY, -3i64..3), 1..6),
        comment in prop::bool::ANY,
    ) {
        let mut text = String::new();
        if comment { text.push_str("# generated\n"); }
        text.push_str("route gen when request.model in [\"gpt-4o\", \"smollm\"] {\n");
        for (i, (kind, n, b, prio)) in rules.iter().enumerate() {
            let cond = match kind {
                0 => format!("request.input_tokens > {n}"),
                1 => format!("request.stream == {b} or (request.input_tokens <= {n} and not request.tools)"),
                2 => format!("has(request.org) and request.org in [\"a\", \"b{n}\"]"),
                _ => format!("-(request.messages * 2) < {n} - 3"),
            };
            text.push_str(&format!("  rule r{i} priority {prio}   when {cond}{{ use \"smollm\" }}{}\n", if *b { " # trailing" } else { "" }));
        }
        text.push_str("  default use model\n}\n");
        let once = format_str("g.policy", &text).expect("generated policy parses");
        let twice = format_str("g.policy", &once).expect("formatted policy parses");
        prop_assert_eq!(&twice, &once);
        let (_, a) = parse_str("g.policy", &text).map_err(|_| ()).expect("parses");
        let (_, b) = parse_str("g.policy", &once).map_err(|_| ()).expect("parses");
        prop_assert_eq!(a.items, b.items);
    }
}
