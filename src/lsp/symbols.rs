//! The document outline (`textDocument/documentSymbol`): routes with their rules,
//! strategies with their parameters, state slots and lets, and tests.

use lsp_types::{DocumentSymbol, SymbolKind};

use super::outline::{DefKind, Outline};
use super::text::LineIndex;

/// The outline of `text` as nested symbols.
#[allow(deprecated)] // `DocumentSymbol::deprecated` must still be written.
pub fn document_symbols(text: &str) -> Vec<DocumentSymbol> {
    let o = Outline::new(text);
    let li = LineIndex::new(text);
    let symbol = |i: usize| {
        let d = &o.defs[i];
        let (kind, detail) = match d.kind {
            DefKind::Route => (SymbolKind::MODULE, "route"),
            DefKind::Rule => (SymbolKind::FUNCTION, "rule"),
            DefKind::Strategy => (SymbolKind::CLASS, "strategy"),
            DefKind::Param => (SymbolKind::PROPERTY, "parameter"),
            DefKind::State => (SymbolKind::FIELD, "state"),
            DefKind::Let => (SymbolKind::VARIABLE, "let"),
            DefKind::Test => (SymbolKind::EVENT, "test"),
        };
        let span = (d.span.0.min(d.name_span.0), d.span.1.max(d.name_span.1));
        DocumentSymbol {
            name: if d.name.is_empty() {
                "\"\"".into()
            } else {
                d.name.clone()
            },
            detail: Some(detail.to_string()),
            kind,
            tags: None,
            deprecated: None,
            range: li.range(text, span.0, span.1),
            selection_range: li.range(text, d.name_span.0, d.name_span.1),
            children: None,
        }
    };
    let mut out = Vec::new();
    for (i, d) in o.defs.iter().enumerate() {
        if d.container.is_some() {
            continue;
        }
        let mut s = symbol(i);
        let kids: Vec<DocumentSymbol> = o
            .defs
            .iter()
            .enumerate()
            .filter(|(_, k)| k.container == Some(i))
            .map(|(j, _)| symbol(j))
            .collect();
        s.children = (!kids.is_empty()).then_some(kids);
        out.push(s);
    }
    out
}
