//! The policy pipeline's diagnostics as LSP diagnostics, per file of a set.
//!
//! Same code, range, severity and message as `switchyard lint`; the help line is
//! appended to the message (`help: ...`), as LSP has no field of its own for it;
//! secondary labels become related information; a machine-applicable suggestion
//! travels in `data` for the quick fix (`textDocument/codeAction`).

use std::collections::BTreeMap;

use lsp_types::{
    Diagnostic as LspDiagnostic, DiagnosticRelatedInformation, DiagnosticSeverity, Location,
    NumberOrString, Position, Range, Url,
};
use serde_json::json;

use super::text::LineIndex;
use super::workspace::SetView;
use crate::policy::diagnostic::{Diagnostic, Severity};
use crate::policy::Span;

/// The `source` of every diagnostic this server publishes.
pub const SOURCE: &str = "switchyard";

/// Diagnostics of a set by file URI: every operator file of the set has an entry
/// (empty when clean), so a fix clears what was shown. Diagnostics without a
/// location go to the files in `open` (the set's open buffers).
pub fn by_file(
    view: &SetView,
    diags: &[Diagnostic],
    open: &[Url],
) -> BTreeMap<Url, Vec<LspDiagnostic>> {
    let mut out: BTreeMap<Url, Vec<LspDiagnostic>> = view
        .uris
        .values()
        .map(|u| (u.clone(), Vec::new()))
        .collect();
    let indexes: BTreeMap<u32, LineIndex> = view
        .sources
        .files()
        .filter(|(_, f)| view.uris.contains_key(&f.name))
        .map(|(id, f)| (id.0, LineIndex::new(&f.text)))
        .collect();
    let locate = |span: Span| -> Option<(Url, Range)> {
        let f = view.sources.get(span.file)?;
        let uri = view.uris.get(&f.name)?.clone();
        let ix = indexes.get(&span.file.0)?;
        Some((
            uri,
            ix.range(&f.text, span.start as usize, span.end as usize),
        ))
    };
    let start = Range::new(Position::new(0, 0), Position::new(0, 0));
    for d in diags {
        let mut message = d.message.clone();
        if let Some(h) = &d.help {
            message.push_str("\nhelp: ");
            message.push_str(h);
        }
        let related: Vec<DiagnosticRelatedInformation> = d
            .labels
            .iter()
            .filter_map(|l| {
                let (uri, range) = locate(l.span)?;
                Some(DiagnosticRelatedInformation {
                    location: Location::new(uri, range),
                    message: l.message.clone(),
                })
            })
            .collect();
        let data = d.suggestion.as_ref().and_then(|s| {
            let (uri, range) = locate(s.span)?;
            Some(json!({ "uri": uri, "range": range, "replacement": s.replacement }))
        });
        let lsp = |range: Range| LspDiagnostic {
            range,
            severity: Some(severity(d.severity)),
            code: Some(NumberOrString::String(d.code.to_string())),
            source: Some(SOURCE.to_string()),
            message: message.clone(),
            related_information: (!related.is_empty()).then(|| related.clone()),
            data: data.clone(),
            ..LspDiagnostic::default()
        };
        match d.span {
            Some(span) => {
                if let Some((uri, range)) = locate(span) {
                    out.entry(uri).or_default().push(lsp(range));
                }
                // A diagnostic inside an embedded built-in has nowhere to be shown:
                // the operator's files are what the editor holds.
            }
            None => {
                for u in open {
                    out.entry(u.clone()).or_default().push(lsp(start));
                }
            }
        }
    }
    for (uri, message, code) in &view.blocked {
        let targets: Vec<Url> = match uri {
            Some(u) => vec![u.clone()],
            None => open.to_vec(),
        };
        for u in targets {
            out.entry(u).or_default().push(LspDiagnostic {
                range: start,
                severity: Some(DiagnosticSeverity::ERROR),
                code: Some(NumberOrString::String(code.to_string())),
                source: Some(SOURCE.to_string()),
                message: message.clone(),
                ..LspDiagnostic::default()
            });
        }
    }
    out
}

fn severity(s: Severity) -> DiagnosticSeverity {
    match s {
        Severity::Error => DiagnosticSeverity::ERROR,
        Severity::Warning => DiagnosticSeverity::WARNING,
        Severity::Note => DiagnosticSeverity::INFORMATION,
    }
}
