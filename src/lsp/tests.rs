//! No buffer content makes an editor feature panic: random edits of the shipped
//! policies (unbalanced braces, half strings, non-ASCII text, CR line ends, positions
//! past the end), each followed by every feature at random positions. The features
//! are called directly, not through the server, whose panic guard would hide a panic.

use lsp_types::{Position, Range, TextDocumentContentChangeEvent, Url};
use proptest::prelude::*;

use super::analysis::SetIndex;
use super::text::{apply_change, LineIndex};
use super::workspace::Documents;
use super::{complete, diagnostics, features, symbols};

const SHIPPED: &[&str] = &[
    include_str!("../../examples/policies/ab.policy"),
    include_str!("../../examples/policies/canary.policy"),
    include_str!("../../examples/policies/batch.policy"),
    include_str!("../../examples/policies/long_context.policy"),
    include_str!("../../examples/policies/reject.policy"),
    include_str!("../../examples/policies/builtin/exp3.policy"),
    include_str!("../../examples/policies/builtin/least_latency.policy"),
    include_str!("../../tests/policies/valid/resilience.policy"),
];

const SNIPPETS: &[&str] = &[
    "request.",
    "endpoint.",
    "state.",
    "outcome.",
    "via ",
    "via exp3(",
    "use \"",
    "\"",
    "{",
    "}",
    "(",
    ")",
    "strategy s(",
    "route r {",
    "rule x when ",
    "expect rule ",
    "test \"t\" {",
    "\r\n",
    "\r",
    "\n",
    "# é😀\n",
    "é😀",
    "->",
    "5%",
    "1e309",
    "\\",
    "on success {",
];

fn edit() -> impl Strategy<Value = (u32, u32, u32, u32, String)> {
    (
        0u32..80,
        0u32..140,
        0u32..3,
        0u32..40,
        prop_oneof![
            proptest::sample::select(SNIPPETS).prop_map(str::to_string),
            "[a-z_{}()\"#.= <>%é😀\\-]{0,10}",
        ],
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn no_edit_makes_a_feature_panic(
        base in 0usize..SHIPPED.len(),
        edits in proptest::collection::vec(edit(), 1..6),
        probes in proptest::collection::vec((0u32..90, 0u32..150), 4),
    ) {
        let uri = Url::parse("untitled:fuzz.policy").unwrap();
        let mut text = SHIPPED[base].to_string();
        let mut docs = Documents::default();
        for (line, ch, dl, dc, insert) in edits {
            let range = Range::new(Position::new(line, ch), Position::new(line + dl, dc));
            apply_change(&mut text, TextDocumentContentChangeEvent { range: Some(range), range_length: None, text: insert });
            docs.open.insert(uri.clone(), (1, text.clone()));
            let (_, view) = docs.read_set(&uri);
            let diags = view.lint();
            let by_file = diagnostics::by_file(&view, &diags, std::slice::from_ref(&uri));
            prop_assert!(by_file.contains_key(&uri));
            let ix = SetIndex::new(&view, &uri).expect("the buffer is in its set");
            let li = LineIndex::new(&text);
            for &(l, c) in &probes {
                let off = li.offset(&text, Position::new(l, c));
                prop_assert!(text.is_char_boundary(off));
                let _ = features::hover(&ix, off);
                let _ = features::definition(&ix, off);
                let _ = complete::complete(&ix, off);
            }
            let _ = symbols::document_symbols(&text);
            let _ = crate::policy::fmt::format_str("fuzz.policy", &text);
        }
    }
}

/// The labels completed at the end of `text` (an untitled buffer, built-in config).
fn labels_at_end(text: &str) -> Vec<String> {
    let uri = Url::parse("untitled:c.policy").unwrap();
    let mut docs = Documents::default();
    docs.open.insert(uri.clone(), (1, text.to_string()));
    let (_, view) = docs.read_set(&uri);
    let ix = SetIndex::new(&view, &uri).unwrap();
    complete::complete(&ix, text.len())
        .into_iter()
        .map(|i| i.label)
        .collect()
}

#[test]
fn completion_by_position() {
    let has = |v: &[String], w: &[&str]| w.iter().all(|x| v.iter().any(|l| l == x));
    let l = labels_at_end("route r {\n  default use model via least_latency(");
    assert!(has(&l, &["beta", "min_health"]), "{l:?}");
    let l = labels_at_end("route r {\n  default use model via ");
    assert!(has(&l, &["least_latency", "exp3", "priority"]), "{l:?}");
    let l = labels_at_end("strategy s(k = 1) {\n  state w = 1.0\n  score = state.");
    assert_eq!(l, vec!["w".to_string()]);
    let l = labels_at_end("strategy s(k = 1) {\n  score = k\n  pick ");
    assert_eq!(l, vec!["min", "max", "weighted", "sample"]);
    let l = labels_at_end("strategy s(k = 1) {\n  score = endpoint.");
    assert!(has(&l, &["health", "latency_ewma_ms", "circuit"]), "{l:?}");
    let l = labels_at_end("route r {\n  ");
    assert!(has(&l, &["rule", "default", "fallback"]), "{l:?}");
    assert!(!l.contains(&"score".to_string()), "{l:?}");
    let l = labels_at_end("strategy s(k = 1) {\n  let x = 2\n  score = ");
    assert!(has(&l, &["k", "x", "endpoint", "logsumexp"]), "{l:?}");
    let l = labels_at_end("# request.");
    assert!(l.is_empty(), "{l:?}");
}

#[test]
fn the_reference_documents_every_field_and_function_of_the_tables() {
    use crate::policy::check::expr::FUNCTIONS;
    use crate::policy::checked::{EpField, OutcomeField, ReqField};
    let doc = include_str!("../../docs/policy-language.md");
    let fields = ReqField::NAMED
        .iter()
        .map(|f| ("request", f.0))
        .chain(EpField::NAMED.iter().map(|f| ("endpoint", f.0)))
        .chain(OutcomeField::NAMED.iter().map(|f| ("outcome", f.0)));
    for (ns, name) in fields {
        assert!(
            doc.contains(&format!("`{ns}.{name}`")) || doc.contains(&format!("`.{name}`")),
            "{ns}.{name} is not in docs/policy-language.md"
        );
    }
    for (name, ..) in FUNCTIONS {
        assert!(
            doc.contains(&format!("`{name}(")) || doc.contains(&format!("`{name}`")),
            "{name} is not in docs/policy-language.md"
        );
    }
}

/// The diagnostics the editor gets for `text`, open alone as `uri`.
fn diagnostics_of(uri: &Url, text: &str) -> Vec<lsp_types::Diagnostic> {
    let mut docs = Documents::default();
    docs.open.insert(uri.clone(), (1, text.to_string()));
    let (_, view) = docs.read_set(uri);
    let mut by_file = diagnostics::by_file(&view, &view.lint(), std::slice::from_ref(uri));
    by_file.remove(uri).unwrap_or_default()
}

/// Lone-CR line endings made a comment swallow the rest of the file: the parser now
/// refuses the first lone CR, and the editor gets the diagnostic on the line it
/// shows (LSP counts a lone CR as a line break; everything before the first one ends
/// its lines with LF or CRLF, so both agree up to there).
#[test]
fn lone_cr_line_endings_made_a_comment_swallow_the_rest_of_the_file() {
    let uri = Url::parse("untitled:cr.policy").unwrap();
    let text = "route r {\r\n  # c\r  default use model\r}\r";
    let d = &diagnostics_of(&uri, text);
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].message.contains("lone carriage return"), "{d:?}");
    assert_eq!(
        d[0].range,
        Range::new(Position::new(1, 5), Position::new(2, 0))
    );
}

/// A syntax error at an emoji (or any character of more than one byte) got a
/// zero-width range: the span was one byte, which ends inside the character, and
/// the LSP position of its end went back to the character's start. The range now
/// covers the character in UTF-16 code units (two for an emoji), after a line that
/// holds other surrogate pairs.
#[test]
fn a_syntax_error_at_an_emoji_had_a_zero_width_range() {
    let uri = Url::parse("untitled:emoji.policy").unwrap();
    for (text, at, width) in [
        ("route r {\n  default use model\n  😀\n}\n", (2, 2), 2),
        ("route r {\n  é\n}\n", (1, 2), 1),
        (
            "route r when request.model == \"😀😀\" 𝄞 {\n}\n",
            (0, 37),
            2,
        ),
    ] {
        let d = &diagnostics_of(&uri, text);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(
            d[0].range,
            Range::new(Position::new(at.0, at.1), Position::new(at.0, at.1 + width)),
            "{text:?}: {}",
            d[0].message
        );
    }
}

/// The JSON bodies of the frames the server wrote.
fn frames(out: &[u8]) -> Vec<serde_json::Value> {
    let text = String::from_utf8_lossy(out);
    text.split("Content-Length: ")
        .filter_map(|f| f.split_once("\r\n\r\n"))
        .map(|(_, body)| serde_json::from_str(body).expect("a JSON body"))
        .collect()
}

/// A `didChange` whose params did not fit was dropped without a word, though the
/// server's copy of the document is behind the editor's from then on. A
/// notification gets no reply (JSON-RPC), so the server now says so in the client's
/// log (`window/logMessage`, type error), and goes on serving.
#[test]
fn a_did_change_with_invalid_params_was_dropped_silently() {
    use lsp_server::{Message, Notification, Request};
    use serde_json::json;

    use super::transport::Incoming;

    let uri = "untitled:bad.policy";
    let note = |method: &str, params| {
        Incoming::Message(Message::Notification(Notification::new(
            method.into(),
            params,
        )))
    };
    let request = |id: i32, method: &str, params| {
        Incoming::Message(Message::Request(Request::new(
            id.into(),
            method.into(),
            params,
        )))
    };
    let (tx, rx) = std::sync::mpsc::channel();
    for m in [
        request(1, "initialize", json!({ "capabilities": {} })),
        note("initialized", json!({})),
        note(
            "textDocument/didOpen",
            json!({ "textDocument": { "uri": uri, "languageId": "policy", "version": 1,
                    "text": "route r {\n  default use model\n}\n" } }),
        ),
        note(
            "textDocument/didChange",
            json!({ "textDocument": { "uri": uri, "version": "two" }, "contentChanges": {} }),
        ),
        note("textDocument/didSave", json!(7)),
        request(
            2,
            "textDocument/documentSymbol",
            json!({ "textDocument": { "uri": uri } }),
        ),
        request(3, "shutdown", json!(null)),
        note("exit", json!(null)),
    ] {
        tx.send(m).unwrap();
    }
    let mut out = Vec::new();
    assert_eq!(super::serve(&rx, &mut out), 0);
    let frames = frames(&out);
    let logs: Vec<&serde_json::Value> = frames
        .iter()
        .filter(|f| f["method"] == "window/logMessage")
        .collect();
    assert_eq!(logs.len(), 2, "{frames:#?}");
    assert_eq!(logs[0]["params"]["type"], 1, "{frames:#?}");
    let message = logs[0]["params"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("ignored `textDocument/didChange`: invalid params")
            && message.contains("close and reopen it"),
        "{message}"
    );
    let saved = logs[1]["params"]["message"].as_str().unwrap_or("");
    assert!(
        saved.contains("ignored `textDocument/didSave`: invalid params"),
        "{saved}"
    );
    // No reply to a notification, and the server still answers requests.
    let replies: Vec<&serde_json::Value> = frames
        .iter()
        .filter(|f| f.get("method").is_none())
        .collect();
    assert_eq!(
        replies.iter().map(|f| f["id"].clone()).collect::<Vec<_>>(),
        [json!(1), json!(2), json!(3)],
        "{frames:#?}"
    );
    let symbols = frames.iter().find(|f| f["id"] == 2).expect("an answer");
    assert_eq!(symbols["result"][0]["name"], "r", "{symbols}");
}
