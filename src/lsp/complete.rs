//! Completion: field names after `request.` / `endpoint.` / `outcome.` / `state.`,
//! strategy names after `via`, a strategy's parameters inside `via NAME(...)`, model
//! and endpoint names of the registry inside strings, the words a position allows
//! (statement keywords of the enclosing block, pick modes, priority levels, ...), and
//! in expressions the functions, namespaces and a strategy's locals.

use lsp_types::{
    CompletionItem, CompletionItemKind, CompletionTextEdit, Documentation, MarkupContent,
    MarkupKind, Range, TextEdit,
};

use super::analysis::{Cursor, SetIndex};
use super::features::ty_name;
use super::lex::Kind;
use super::outline::{Block, DefKind};
use super::text::LineIndex;
use crate::policy::check::expr::FUNCTIONS;
use crate::policy::checked::{EpField, OutcomeField, ReqField};

/// The completions at byte `offset` of the current file.
pub fn complete(ix: &SetIndex<'_>, offset: usize) -> Vec<CompletionItem> {
    let file = ix.file();
    let c = Cursor::new(file, offset);
    if c.in_comment {
        return Vec::new();
    }
    let li = LineIndex::new(&file.text);
    // The token being typed: a word, or the inside of a string, up to the cursor.
    let (typed_from, i_prev) = match c.at.map(|i| (i, c.code[i])) {
        Some((i, t)) if t.kind == Kind::Ident && t.end >= offset && t.start < offset => {
            (t.start, i.checked_sub(1))
        }
        Some((i, t)) if t.kind == Kind::Str && t.start < offset => {
            let closed = t.end > t.start + 1 && t.text(c.src).ends_with('"');
            if closed && offset >= t.end {
                return Vec::new();
            }
            return strings(ix, &c, i, t.start + 1, &li);
        }
        // Not inside a word: the previous token is the last one that ends before the
        // cursor (spaces may separate them).
        _ => (offset, c.code.iter().rposition(|t| t.end <= offset)),
    };
    let range = li.range(&file.text, typed_from, offset);
    let prev = i_prev.map_or("", |j| c.text(j));
    let prev2 = i_prev.map_or("", |j| c.before(j, 1));
    let item = |label: &str, kind: CompletionItemKind, detail: String, doc: &str| CompletionItem {
        label: label.to_string(),
        kind: Some(kind),
        detail: (!detail.is_empty()).then_some(detail),
        documentation: (!doc.is_empty()).then(|| {
            Documentation::MarkupContent(MarkupContent {
                kind: MarkupKind::Markdown,
                value: doc.to_string(),
            })
        }),
        text_edit: Some(CompletionTextEdit::Edit(TextEdit::new(
            range,
            label.to_string(),
        ))),
        ..CompletionItem::default()
    };
    let words = |ws: &[&str]| -> Vec<CompletionItem> {
        ws.iter()
            .map(|w| item(w, CompletionItemKind::KEYWORD, String::new(), ""))
            .collect()
    };
    if prev == "." {
        let f = CompletionItemKind::FIELD;
        return match prev2 {
            "request" => ReqField::NAMED
                .iter()
                .map(|(n, _, t, opt, doc)| {
                    let o = if *opt { " (optional)" } else { "" };
                    item(n, f, format!("{}{o}", ty_name(*t)), doc)
                })
                .collect(),
            "endpoint" => EpField::NAMED
                .iter()
                .map(|(n, _, t, doc)| item(n, f, ty_name(*t).to_string(), doc))
                .collect(),
            "outcome" => OutcomeField::NAMED
                .iter()
                .map(|(n, _, t, doc)| item(n, f, ty_name(*t).to_string(), doc))
                .collect(),
            "state" => {
                let o = &file.outline;
                ix.locals(offset)
                    .into_iter()
                    .filter(|&d| o.defs[d].kind == DefKind::State)
                    .map(|d| item(&o.defs[d].name, f, "Float".into(), ""))
                    .collect()
            }
            _ => Vec::new(),
        };
    }
    match (prev2, prev) {
        (_, "via") | ("expect", "strategy") => {
            return ix
                .strategy_names()
                .iter()
                .map(|n| item(n, CompletionItemKind::FUNCTION, "strategy".into(), ""))
                .collect()
        }
        ("expect", "route") | ("expect", "rule") => {
            let kind = if prev == "route" {
                DefKind::Route
            } else {
                DefKind::Rule
            };
            let mut names: Vec<String> = ix
                .files
                .iter()
                .flat_map(|f| f.outline.defs.iter())
                .filter(|d| d.kind == kind)
                .map(|d| d.name.clone())
                .collect();
            names.sort();
            names.dedup();
            return names
                .iter()
                .map(|n| item(n, CompletionItemKind::REFERENCE, prev.to_string(), ""))
                .collect();
        }
        (_, "pick") => return words(&["min", "max", "weighted", "sample"]),
        ("set", "priority") => return words(&["critical", "high", "normal", "low"]),
        (_, "hold") => return words(&["off_peak"]),
        (_, "cache") => return words(&["on", "exact", "off"]),
        (_, "join") => return words(&["mean", "initial"]),
        ("split" | "sample", "by") | (_, "by") => {
            return words(&["api_key", "org", "header", "metadata", "random"])
        }
        (_, "expect") => {
            return words(&[
                "route", "rule", "endpoint", "model", "strategy", "arm", "priority", "cache",
                "hold", "share", "reject",
            ])
        }
        (_, "use" | "->" | "fallback") => {
            let mut v = words(&["model", "any", "endpoint"]);
            v.extend(ix.view.registry.model_names().map(|m| {
                item(
                    &format!("\"{m}\""),
                    CompletionItemKind::VALUE,
                    "model".into(),
                    "",
                )
            }));
            return v;
        }
        _ => {}
    }
    if let Some(params) = via_params(ix, &c, i_prev) {
        return params
            .into_iter()
            .map(|(name, header)| item(&name, CompletionItemKind::PROPERTY, header, ""))
            .collect();
    }
    // A statement or an expression: the block's statements, then expression words.
    let frames = file.outline.frames_at(offset);
    let mut out = words(match frames.last().map(|f| f.kind) {
        None => &["route", "strategy", "test"],
        Some(Block::Route) => &[
            "rule", "default", "fallback", "cache", "hold", "set", "priority", "when",
        ],
        Some(Block::Rule | Block::Default) => &[
            "use", "split", "reject", "set", "cache", "hold", "fallback", "continue", "via",
        ],
        Some(Block::Split) => &["canary", "use", "via", "rollback", "when"],
        Some(Block::Strategy) => &[
            "state", "let", "require", "prefer", "score", "pick", "on", "join",
        ],
        Some(Block::On) => &[],
        Some(Block::Test) => &["request", "stats", "seed", "sample", "expect"],
        Some(Block::Request) => &["header", "metadata", "scopes"],
        Some(Block::Stats | Block::Other) => &[],
    });
    if frames.last().map(|f| f.kind) == Some(Block::Request) {
        out.extend(ReqField::NAMED.iter().map(|(n, _, t, _, doc)| {
            item(n, CompletionItemKind::FIELD, ty_name(*t).to_string(), doc)
        }));
        return out;
    }
    if !frames.is_empty() {
        let in_strategy = frames.first().map(|f| f.kind) == Some(Block::Strategy);
        out.extend(words(&[
            "and", "or", "not", "in", "true", "false", "request",
        ]));
        if in_strategy || frames.iter().any(|f| f.kind == Block::Split) {
            out.extend(words(&["endpoint"]));
        }
        if in_strategy {
            out.extend(words(&["state", "outcome", "score", "probability"]));
            let o = &file.outline;
            for d in ix.locals(offset) {
                if matches!(o.defs[d].kind, DefKind::Param | DefKind::Let) {
                    let h = ix.header(ix.current, d);
                    out.push(item(&o.defs[d].name, CompletionItemKind::VARIABLE, h, ""));
                }
            }
        }
        out.extend(
            FUNCTIONS
                .iter()
                .map(|(n, sig, doc)| item(n, CompletionItemKind::FUNCTION, sig.to_string(), doc)),
        );
    }
    out
}

/// Model or endpoint names inside the string at token `i`, whose content starts at
/// byte `from`.
fn strings(
    ix: &SetIndex<'_>,
    c: &Cursor<'_>,
    i: usize,
    from: usize,
    li: &LineIndex,
) -> Vec<CompletionItem> {
    let prev = c.before(i, 1);
    let names: Vec<(&str, String)> = if prev == "endpoint" {
        ix.view
            .registry
            .endpoints()
            .map(|e| {
                (
                    e.endpoint.id.as_str(),
                    format!("endpoint of {}", e.model.name),
                )
            })
            .collect()
    } else if matches!(prev, "use" | "->" | "fallback")
        || (prev == "model" && matches!(c.before(i, 2), "expect" | "share"))
    {
        ix.view
            .registry
            .models
            .iter()
            .map(|m| {
                (
                    m.name.as_str(),
                    format!("model, {} endpoint(s)", m.endpoints.len()),
                )
            })
            .collect()
    } else {
        return Vec::new();
    };
    let range: Range = li.range(c.src, from, c.offset);
    names
        .into_iter()
        .map(|(n, detail)| CompletionItem {
            label: n.to_string(),
            kind: Some(CompletionItemKind::VALUE),
            detail: Some(detail),
            text_edit: Some(CompletionTextEdit::Edit(TextEdit::new(
                range,
                n.to_string(),
            ))),
            ..CompletionItem::default()
        })
        .collect()
}

/// Inside `via NAME(...)` at an argument name's place (after `(` or `,`): the
/// parameters of strategy NAME with their headers.
fn via_params(
    ix: &SetIndex<'_>,
    c: &Cursor<'_>,
    i_prev: Option<usize>,
) -> Option<Vec<(String, String)>> {
    let j = i_prev?;
    if !matches!(c.text(j), "(" | ",") {
        return None;
    }
    // Back to the `(` of this argument list, then `via NAME`.
    let mut k = j;
    let mut depth = 0;
    loop {
        match c.text(k) {
            ")" => depth += 1,
            "(" if depth == 0 => break,
            "(" => depth -= 1,
            "{" | "}" => return None,
            _ => {}
        }
        k = k.checked_sub(1)?;
    }
    if c.before(k, 2) != "via" {
        return None;
    }
    let name = c.before(k, 1);
    let (fi, si) = *ix.defs(DefKind::Strategy, name).first()?;
    let o = &ix.files[fi].outline;
    Some(
        o.defs
            .iter()
            .enumerate()
            .filter(|(_, d)| d.kind == DefKind::Param && d.container == Some(si))
            .map(|(di, d)| (d.name.clone(), ix.header(fi, di)))
            .collect(),
    )
}
