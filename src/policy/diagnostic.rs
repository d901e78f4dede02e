//! Diagnostics: the one error/warning type of the policy pipeline.
//!
//! Every stage (parser, checker, linter, test runner) reports [`Diagnostic`]s with a
//! stable code from [`codes`], a plain-sentence message, a primary span, optional
//! secondary labels, and an optional help line and machine-applicable suggestion.
//!
//! Two renderings:
//! - [`Diagnostic::render`]: rustc-style text with `file:line:col`, the offending
//!   source line and a caret underline.
//! - [`Diagnostic::to_json`]: the stable JSON schema below (documented in
//!   `docs/policy-language.md`, "Diagnostics"). Fields are only ever added.
//!
//! ```json
//! { "code": "E0201", "severity": "error", "message": "...",
//!   "file": "policies/chat.policy", "line": 3, "column": 20,
//!   "end_line": 3, "end_column": 32,
//!   "labels": [ { "file": "...", "line": 1, "column": 1, "end_line": 1,
//!                 "end_column": 4, "message": "..." } ],
//!   "help": "did you mean `least_latency`?",
//!   "suggestion": { "replacement": "least_latency", "file": "...", "line": 3,
//!                   "column": 20, "end_line": 3, "end_column": 32 } }
//! ```
//! `file`/`line`/... are `null` for diagnostics without a location (e.g. "no policy
//! files"). Lines and columns are 1-based; columns count characters; `end_*` is
//! exclusive.

use std::fmt::Write as _;

use serde::Serialize;

use super::source::{SourceMap, Span};

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Extra information attached to another diagnostic.
    Note,
    /// Suspicious but valid; fails only with `--deny-warnings`.
    Warning,
    /// The policy set cannot be used.
    Error,
}

impl Severity {
    /// `error`, `warning` or `note`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Note => "note",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// A secondary location with its own short message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// Where.
    pub span: Span,
    /// What about it, e.g. "first defined here".
    pub message: String,
}

/// A replacement the user (or an editor) can apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suggestion {
    /// The text to replace.
    pub span: Span,
    /// The replacement text.
    pub replacement: String,
}

/// One error or warning about a policy set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Stable identifier such as `E0201` (see [`codes`]).
    pub code: &'static str,
    /// Error, warning or note.
    pub severity: Severity,
    /// A plain sentence about the user's policy.
    pub message: String,
    /// The primary location, with a short label under the caret (may be empty).
    pub span: Option<Span>,
    /// Text shown under the primary caret.
    pub span_label: String,
    /// Secondary locations.
    pub labels: Vec<Label>,
    /// One line of advice.
    pub help: Option<String>,
    /// A machine-applicable fix.
    pub suggestion: Option<Suggestion>,
}

impl Diagnostic {
    /// An error with code `code` at `span`.
    pub fn error(code: &'static str, span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            code,
            severity: Severity::Error,
            message: message.into(),
            span: Some(span),
            span_label: String::new(),
            labels: Vec::new(),
            help: None,
            suggestion: None,
        }
    }

    /// A warning with code `code` at `span`.
    pub fn warning(code: &'static str, span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(code, span, message)
        }
    }

    /// An error without a source location.
    pub fn global(code: &'static str, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            span: None,
            ..Diagnostic::error(code, Span::default(), message)
        }
    }

    /// Sets the text under the primary caret.
    pub fn with_span_label(mut self, label: impl Into<String>) -> Diagnostic {
        self.span_label = label.into();
        self
    }

    /// Adds a secondary label.
    pub fn with_label(mut self, span: Span, message: impl Into<String>) -> Diagnostic {
        self.labels.push(Label {
            span,
            message: message.into(),
        });
        self
    }

    /// Sets the help line.
    pub fn with_help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }

    /// Adds "did you mean `x`?" as help and as a suggestion replacing the primary span.
    pub fn with_did_you_mean(mut self, candidate: Option<&str>) -> Diagnostic {
        if let (Some(c), Some(span)) = (candidate, self.span) {
            self.help = Some(format!("did you mean `{c}`?"));
            self.suggestion = Some(Suggestion {
                span,
                replacement: c.to_string(),
            });
        }
        self
    }

    /// Whether this is an error.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// Renders the diagnostic as text, rustc style.
    pub fn render(&self, sources: &SourceMap) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}[{}]: {}",
            self.severity.as_str(),
            self.code,
            self.message
        );
        // One gutter for every snippet, as wide as the widest line number (rustc's
        // layout), so the `|` columns line up.
        let gutter = self
            .span
            .into_iter()
            .chain(self.labels.iter().map(|l| l.span))
            .filter_map(|s| {
                sources
                    .get(s.file)
                    .map(|f| f.line_col(s.start as usize).line)
            })
            .map(|line| line.to_string().len())
            .max()
            .unwrap_or(1);
        if let Some(span) = self.span {
            render_snippet(&mut out, sources, span, &self.span_label, "-->", gutter);
        }
        for label in &self.labels {
            render_snippet(&mut out, sources, label.span, &label.message, ":::", gutter);
        }
        if let Some(help) = &self.help {
            let _ = writeln!(out, "  = help: {help}");
        }
        out
    }

    /// The stable JSON form (see the module documentation for the schema).
    pub fn to_json(&self, sources: &SourceMap) -> serde_json::Value {
        let mut v = serde_json::json!({
            "code": self.code,
            "severity": self.severity.as_str(),
            "message": self.message,
            "help": self.help,
        });
        let loc = |span: Option<Span>| -> serde_json::Value {
            match span.and_then(|s| sources.get(s.file).map(|f| (s, f))) {
                Some((s, f)) => {
                    let a = f.line_col(s.start as usize);
                    let b = f.line_col(s.end as usize);
                    serde_json::json!({
                        "file": f.name, "line": a.line, "column": a.col,
                        "end_line": b.line, "end_column": b.col,
                    })
                }
                None => serde_json::json!({
                    "file": null, "line": null, "column": null,
                    "end_line": null, "end_column": null,
                }),
            }
        };
        merge(&mut v, loc(self.span));
        let labels: Vec<serde_json::Value> = self
            .labels
            .iter()
            .map(|l| {
                let mut o = loc(Some(l.span));
                merge(&mut o, serde_json::json!({ "message": l.message }));
                o
            })
            .collect();
        merge(&mut v, serde_json::json!({ "labels": labels }));
        let suggestion = match &self.suggestion {
            Some(s) => {
                let mut o = loc(Some(s.span));
                merge(&mut o, serde_json::json!({ "replacement": s.replacement }));
                o
            }
            None => serde_json::Value::Null,
        };
        merge(&mut v, serde_json::json!({ "suggestion": suggestion }));
        v
    }
}

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    if let (Some(a), serde_json::Value::Object(b)) = (into.as_object_mut(), from) {
        a.extend(b);
    }
}

/// Longest source line shown in full under a diagnostic, in characters.
const MAX_SHOWN_LINE: usize = 160;

fn render_snippet(
    out: &mut String,
    sources: &SourceMap,
    span: Span,
    label: &str,
    arrow: &str,
    gutter: usize,
) {
    let Some(file) = sources.get(span.file) else {
        return;
    };
    let a = file.line_col(span.start as usize);
    let b = file.line_col(span.end as usize);
    let line_no = format!("{:>gutter$}", a.line);
    let pad = " ".repeat(gutter);
    let text = file.line_text(a.line);
    let _ = writeln!(out, "{pad}{arrow} {}:{}:{}", file.name, a.line, a.col);
    let _ = writeln!(out, "{pad} |");
    let mut start_col = a.col as usize;
    let mut width = if b.line == a.line && b.col > a.col {
        (b.col - a.col) as usize
    } else if b.line != a.line {
        (text.chars().count() + 1).saturating_sub(start_col).max(1)
    } else {
        1
    };
    // Very long lines (minified or generated files) are shown as a window around the
    // caret, so one diagnostic never carries megabytes of source.
    let chars: Vec<char> = text.chars().collect();
    let shown: String = if chars.len() > MAX_SHOWN_LINE {
        let from = start_col
            .saturating_sub(1)
            .saturating_sub(MAX_SHOWN_LINE / 3);
        let to = (from + MAX_SHOWN_LINE).min(chars.len());
        let mut w: String = chars[from..to].iter().collect();
        if to < chars.len() {
            w.push('…');
        }
        if from > 0 {
            w.insert(0, '…');
            start_col = start_col - from + 1;
        }
        width = width.min(to.saturating_sub(from)).max(1);
        w
    } else {
        text.to_string()
    };
    // One column each, so the caret stays under its character; a raw CR would send
    // the terminal's cursor back to the start of the line.
    let _ = writeln!(out, "{line_no} | {}", shown.replace(['\t', '\r'], " "));
    let mut underline = format!("{pad} | {}{}", " ".repeat(start_col - 1), "^".repeat(width));
    if !label.is_empty() {
        underline.push(' ');
        underline.push_str(label);
    }
    let _ = writeln!(out, "{underline}");
}

/// Renders a list of diagnostics as text, followed by a one-line summary.
pub fn render_all(diags: &[Diagnostic], sources: &SourceMap) -> String {
    let mut out = String::new();
    for d in diags {
        out.push_str(&d.render(sources));
        out.push('\n');
    }
    let errors = diags.iter().filter(|d| d.is_error()).count();
    let warnings = diags
        .iter()
        .filter(|d| d.severity == Severity::Warning)
        .count();
    let _ = writeln!(out, "{errors} error(s), {warnings} warning(s)");
    out
}

/// The stable diagnostic codes. E01xx syntax and limits, E02xx names, E03xx types,
/// E04xx registry references, E05xx values and ranges, E06xx structure, E07xx
/// complexity, E08xx policy tests; W02xx are lint warnings (see `ALL` for the text).
pub mod codes {
    /// Syntax error.
    pub const SYNTAX: &str = "E0101";
    /// The file is larger than the input size limit.
    pub const INPUT_TOO_LARGE: &str = "E0102";
    /// Brackets or prefix operators nest deeper than the limit.
    pub const TOO_DEEP: &str = "E0103";
    /// A literal is malformed (bad escape, integer too large, unit mismatch).
    pub const BAD_LITERAL: &str = "E0104";
    /// The parser gave up: the input takes too much work to parse.
    pub const PARSE_LIMIT: &str = "E0105";
    /// The file is not UTF-8 text.
    pub const NOT_UTF8: &str = "E0106";
    /// Two definitions share a name.
    pub const DUPLICATE: &str = "E0201";
    /// Unknown strategy.
    pub const UNKNOWN_STRATEGY: &str = "E0202";
    /// Unknown field of `request`, `endpoint`, `state` or `outcome`.
    pub const UNKNOWN_FIELD: &str = "E0203";
    /// Unknown function.
    pub const UNKNOWN_FUNCTION: &str = "E0204";
    /// Unknown variable (parameter, `let` or state slot).
    pub const UNKNOWN_VARIABLE: &str = "E0205";
    /// Unknown strategy parameter in a call.
    pub const UNKNOWN_PARAM: &str = "E0206";
    /// A field is not available in this context (e.g. `endpoint.*` in a rule condition).
    pub const WRONG_CONTEXT: &str = "E0207";
    /// Type mismatch.
    pub const TYPE_MISMATCH: &str = "E0301";
    /// Wrong number of arguments.
    pub const ARITY: &str = "E0302";
    /// An optional value is read without a `has()` guard.
    pub const UNGUARDED_OPTIONAL: &str = "E0303";
    /// An argument must be a constant literal.
    pub const NOT_CONSTANT: &str = "E0304";
    /// Unknown logical model.
    pub const UNKNOWN_MODEL: &str = "E0401";
    /// Unknown endpoint.
    pub const UNKNOWN_ENDPOINT: &str = "E0402";
    /// Invalid regular expression.
    pub const BAD_REGEX: &str = "E0501";
    /// Split shares do not add up to 100%.
    pub const SPLIT_SUM: &str = "E0502";
    /// A value is outside its allowed range.
    pub const OUT_OF_RANGE: &str = "E0503";
    /// A route has no `default`.
    pub const MISSING_DEFAULT: &str = "E0601";
    /// A fallback chain names a target twice.
    pub const FALLBACK_CYCLE: &str = "E0602";
    /// A rule body is malformed (no terminal action, two terminals, ...).
    pub const BAD_BODY: &str = "E0603";
    /// A strategy is incomplete (no `score` or no `pick`, or two of them).
    pub const BAD_STRATEGY: &str = "E0604";
    /// A split has a canary arm but no stable arm to roll back to.
    pub const NO_STABLE_ARM: &str = "E0605";
    /// An expression or policy set exceeds the complexity budget.
    pub const TOO_COMPLEX: &str = "E0701";
    /// A policy test is malformed (unknown request field, bad expectation).
    pub const BAD_TEST: &str = "E0801";
    /// A policy test failed (reported by `run_tests`).
    pub const TEST_FAILED: &str = "E0802";

    /// Every code with a one-line description, for docs and `lint --explain`.
    pub const ALL: &[(&str, &str)] = &[
        (SYNTAX, "syntax error"),
        (INPUT_TOO_LARGE, "file larger than the input size limit"),
        (TOO_DEEP, "nesting deeper than the limit"),
        (BAD_LITERAL, "malformed literal"),
        (PARSE_LIMIT, "input takes too much work to parse"),
        (NOT_UTF8, "file is not UTF-8 text"),
        (DUPLICATE, "duplicate name"),
        (UNKNOWN_STRATEGY, "unknown strategy"),
        (UNKNOWN_FIELD, "unknown field"),
        (UNKNOWN_FUNCTION, "unknown function"),
        (UNKNOWN_VARIABLE, "unknown variable"),
        (UNKNOWN_PARAM, "unknown strategy parameter"),
        (WRONG_CONTEXT, "field not available here"),
        (TYPE_MISMATCH, "type mismatch"),
        (ARITY, "wrong number of arguments"),
        (UNGUARDED_OPTIONAL, "optional value read without has()"),
        (NOT_CONSTANT, "argument must be a literal"),
        (UNKNOWN_MODEL, "unknown logical model"),
        (UNKNOWN_ENDPOINT, "unknown endpoint"),
        (BAD_REGEX, "invalid regular expression"),
        (SPLIT_SUM, "split shares do not add up to 100%"),
        (OUT_OF_RANGE, "value out of range"),
        (MISSING_DEFAULT, "route without default"),
        (FALLBACK_CYCLE, "fallback chain names a target twice"),
        (BAD_BODY, "malformed rule body"),
        (BAD_STRATEGY, "incomplete strategy"),
        (NO_STABLE_ARM, "canary without a stable arm"),
        (TOO_COMPLEX, "complexity budget exceeded"),
        (BAD_TEST, "malformed policy test"),
        (TEST_FAILED, "policy test failed"),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::source::{FileId, SourceMap};

    fn sample() -> (SourceMap, Diagnostic) {
        let mut m = SourceMap::new();
        let f = m.add("p.policy", "route a {\n  default use \"gpt-4\"\n}\n");
        let d = Diagnostic::error(
            codes::UNKNOWN_MODEL,
            Span::new(f, 24, 31),
            "unknown model `gpt-4`",
        )
        .with_span_label("not in the registry")
        .with_did_you_mean(Some("gpt-4o"));
        (m, d)
    }

    #[test]
    fn human_render_has_location_caret_and_help() {
        let (m, d) = sample();
        let text = d.render(&m);
        assert_eq!(
            text,
            "error[E0401]: unknown model `gpt-4`\n \
             --> p.policy:2:15\n  |\n2 |   default use \"gpt-4\"\n  |               \
             ^^^^^^^ not in the registry\n  = help: did you mean `gpt-4o`?\n"
        );
    }

    #[test]
    fn json_has_stable_fields() {
        let (m, d) = sample();
        let v = d.to_json(&m);
        assert_eq!(v["code"], "E0401");
        assert_eq!(v["severity"], "error");
        assert_eq!(v["line"], 2);
        assert_eq!(v["column"], 15);
        assert_eq!(v["end_column"], 22);
        assert_eq!(v["suggestion"]["replacement"], "gpt-4o");
        let g = Diagnostic::global(codes::SYNTAX, "x").to_json(&m);
        assert!(g["file"].is_null());
        let _ = FileId(0);
    }
}

#[cfg(test)]
mod long_line_tests {
    use super::*;

    #[test]
    fn long_lines_are_windowed_around_the_caret() {
        let mut sources = SourceMap::new();
        let text = format!("{}BAD{}", "a".repeat(5000), "b".repeat(5000));
        let f = sources.add("long.policy", text);
        let d = Diagnostic::error("E0000", Span::new(f, 5000, 5003), "bad token");
        let out = d.render(&sources);
        assert!(out.len() < 1000, "{} bytes", out.len());
        let lines: Vec<&str> = out.lines().collect();
        let src = lines.iter().find(|l| l.contains("BAD")).unwrap();
        let caret = lines.iter().find(|l| l.contains("^^^")).unwrap();
        assert_eq!(
            src.find("BAD").unwrap(),
            caret.find('^').unwrap() + '…'.len_utf8() - 1
        );
    }
}
