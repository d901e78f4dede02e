//! The linter: warnings about valid policies that probably do not do what their
//! author meant. Runs on a [`CheckedPolicySet`] (so every name and type is known) plus
//! the syntax trees it came from (for precise name spans).
//!
//! Conditions are analysed per request field over interval and finite-set domains
//! ([`domain`], [`dnf`]); no SMT solver. Whatever the domains cannot express is an
//! opaque atom, which can only make the analysis *less* sure: "unreachable" and
//! "shadowed" are claimed only when provable, and overlap witnesses are checked with
//! the interpreter's own evaluator before they are shown.
//!
//! The warning codes are stable; `docs/lint.md` lists them, and
//! `src/policy/explain/` explains each with an example.

use std::collections::HashMap;

use super::ast::{Action, Item, PolicyFile, RouteItem};
use super::checked::CheckedPolicySet;
use super::diagnostic::Diagnostic;
use super::registry::Registry;
use super::source::{SourceMap, Span};

pub mod dnf;
pub mod domain;
mod fallbacks;
mod index;
mod kept;
mod ranges;
mod rules;
mod targets;
pub mod witness;

pub use fallbacks::{LintOptions, DEFAULT_MAX_ATTEMPTS};

/// Stable lint warning codes (W02xx).
pub mod codes {
    /// A rule's condition contradicts its route's condition.
    pub const UNREACHABLE: &str = "W0201";
    /// A rule (or route) only matches requests an earlier one already takes.
    pub const SHADOWED: &str = "W0202";
    /// Two rules (or routes) at the same priority overlap and route differently.
    pub const OVERLAP: &str = "W0203";
    /// A condition is always true or always false.
    pub const CONSTANT_CONDITION: &str = "W0204";
    /// A split keyed by `random`: not sticky.
    pub const SPLIT_NOT_STICKY: &str = "W0205";
    /// A target that never gets traffic (0% arm, fallback already in the plan).
    pub const UNUSED_TARGET: &str = "W0206";
    /// A split keyed by a value that may be absent.
    pub const SPLIT_KEY_MAY_BE_ABSENT: &str = "W0207";
    /// A fallback's `on` list names only statuses that move on anyway.
    pub const FALLBACK_ON_NO_EFFECT: &str = "W0208";
    /// A fallback's `on` list names a 4xx that blames the request itself.
    pub const FALLBACK_ON_REQUEST_ERROR: &str = "W0209";
    /// A fallback chain needs more attempts than `server.max_attempts` allows.
    pub const ATTEMPTS_EXCEED_CAP: &str = "W0210";

    /// Every lint code with its name (for docs and JSON consumers).
    pub const ALL: &[(&str, &str)] = &[
        (UNREACHABLE, "unreachable-rule"),
        (SHADOWED, "shadowed-rule"),
        (OVERLAP, "overlapping-rules"),
        (CONSTANT_CONDITION, "constant-condition"),
        (SPLIT_NOT_STICKY, "split-not-sticky"),
        (UNUSED_TARGET, "unused-target"),
        (SPLIT_KEY_MAY_BE_ABSENT, "split-key-may-be-absent"),
        (FALLBACK_ON_NO_EFFECT, "fallback-on-no-effect"),
        (FALLBACK_ON_REQUEST_ERROR, "fallback-on-request-error"),
        (ATTEMPTS_EXCEED_CAP, "attempts-exceed-cap"),
    ];
}

/// Spans the checked form does not keep: names of routes and rules, split keys.
#[derive(Debug, Default)]
pub struct AstIndex {
    names: HashMap<(u32, u32), Span>,
    split_keys: HashMap<(u32, u32), Span>,
}

impl AstIndex {
    /// Indexes `files`.
    pub fn new(files: &[PolicyFile]) -> AstIndex {
        let mut ix = AstIndex::default();
        let key = |s: Span| (s.file.0, s.start);
        for item in files.iter().flat_map(|f| &f.items) {
            let Item::Route(r) = item else { continue };
            ix.names.insert(key(r.span), r.name.span);
            for it in &r.items {
                let body = match it {
                    RouteItem::Rule(x) => {
                        ix.names.insert(key(x.span), x.name.span);
                        &x.body
                    }
                    RouteItem::Default(d) => &d.body,
                    _ => continue,
                };
                for a in body {
                    if let Action::Split(s) = a {
                        ix.split_keys.insert(key(s.span), s.key.span);
                    }
                }
            }
        }
        ix
    }

    /// The name span of the route or rule defined at `def` (or `def` itself).
    pub fn name(&self, def: Span) -> Span {
        self.names
            .get(&(def.file.0, def.start))
            .copied()
            .unwrap_or(def)
    }

    /// The key span of the split action at `split` (or `split` itself).
    pub fn split_key(&self, split: Span) -> Span {
        self.split_keys
            .get(&(split.file.0, split.start))
            .copied()
            .unwrap_or(split)
    }
}

/// Every lint warning for a checked set built from `files`, in source order, with the
/// default [`LintOptions`] (no config known).
pub fn lint(set: &CheckedPolicySet, files: &[PolicyFile]) -> Vec<Diagnostic> {
    lint_with(set, files, &LintOptions::default())
}

/// Every lint warning for a checked set built from `files`, in source order, knowing
/// what `opts` says of the gateway config.
pub fn lint_with(
    set: &CheckedPolicySet,
    files: &[PolicyFile],
    opts: &LintOptions,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    rules::lint(set, &AstIndex::new(files), &mut out);
    ranges::lint(set, &mut out);
    targets::lint(files, set, &mut out);
    fallbacks::lint(files, opts, &mut out);
    sort(&mut out);
    out
}

/// Sorts diagnostics by file and position (global ones first), stably.
pub fn sort(diags: &mut [Diagnostic]) {
    diags.sort_by_key(|d| d.span.map(|s| (s.file, s.start, s.end)));
}

/// The outcome of linting a policy set.
#[derive(Debug)]
pub struct LintOutcome {
    /// Parse and checker errors, then lint warnings, each group in source order.
    pub diagnostics: Vec<Diagnostic>,
    /// The checked set, when there were no errors.
    pub set: Option<CheckedPolicySet>,
}

/// Parses, checks and lints every file of `sources` against `registry`, with the
/// default [`LintOptions`].
pub fn lint_sources(sources: &SourceMap, registry: &Registry) -> LintOutcome {
    lint_sources_with(sources, registry, &LintOptions::default())
}

/// Parses, checks and lints every file of `sources` against `registry`, knowing what
/// `opts` says of the gateway config.
pub fn lint_sources_with(
    sources: &SourceMap,
    registry: &Registry,
    opts: &LintOptions,
) -> LintOutcome {
    let mut files = Vec::new();
    let mut diags = Vec::new();
    for (id, _) in sources.files() {
        match super::parser::parse_file(sources, id) {
            Ok(f) => files.push(f),
            Err(d) => diags.extend(d),
        }
    }
    if !diags.is_empty() {
        sort(&mut diags);
        return LintOutcome {
            diagnostics: diags,
            set: None,
        };
    }
    match super::check::check(&files, sources, registry) {
        Ok(set) => LintOutcome {
            diagnostics: lint_with(&set, &files, opts),
            set: Some(set),
        },
        Err(mut d) => {
            sort(&mut d);
            LintOutcome {
                diagnostics: d,
                set: None,
            }
        }
    }
}

#[cfg(test)]
mod tests;
