//! Parsed files + registry → [`CheckedPolicySet`], or every error found.
//!
//! Checks: names (duplicates, unknown strategies, fields, functions, variables,
//! parameters), types and arity, registry references (unknown model or endpoint, with
//! did-you-mean), optional fields read without `has()`, regex validity (compiled once
//! here), split shares summing to 100%, parameter ranges (`alpha`/`gamma` default to
//! (0, 1]), a default in every route, fallback cycles, and a complexity budget.

use std::collections::HashMap;

use super::ast::*;
use super::checked::*;
use super::diagnostic::{codes, Diagnostic};
use super::registry::Registry;
use super::source::SourceMap;
use crate::suggest::did_you_mean;

pub mod expr;
mod routes;
mod strategy;

use expr::{Ctx, Scope};

/// Largest accepted policy set, in expression nodes.
pub const MAX_SET_NODES: usize = 2_000_000;

/// Name of the built-in strategy used when `via` is omitted.
pub const BUILTIN_PRIORITY: &str = "priority";

/// Checker state shared by the submodules.
pub struct Checker<'a> {
    /// Diagnostics so far.
    pub diags: Vec<Diagnostic>,
    /// The string table being built.
    pub strings: Interner,
    /// Compiled regexes.
    pub regexes: Vec<regex::Regex>,
    regex_index: HashMap<String, u32>,
    /// The registry names are resolved against.
    pub registry: &'a Registry,
    /// The sources (for quoting code in messages).
    pub sources: &'a SourceMap,
    /// Expression nodes seen (complexity budget).
    pub nodes: usize,
    /// Strategy names → (index, definition), filled before routes are checked.
    strategy_defs: Vec<&'a StrategyDef>,
}

/// Checks parsed files against `registry`.
///
/// `files` are in load order (the CLI sorts by path); route order among equal route
/// priorities follows it.
///
/// # Errors
/// Every error found, in file order. Warnings are never returned here (the linter
/// produces them).
pub fn check(
    files: &[PolicyFile],
    sources: &SourceMap,
    registry: &Registry,
) -> Result<CheckedPolicySet, Vec<Diagnostic>> {
    let mut c = Checker {
        diags: Vec::new(),
        strings: Interner::default(),
        regexes: Vec::new(),
        regex_index: HashMap::new(),
        registry,
        sources,
        nodes: 0,
        strategy_defs: Vec::new(),
    };
    let mut seen: HashMap<&str, Span> = HashMap::new();
    // Strategies first: routes refer to them by name across files.
    for item in files.iter().flat_map(|f| &f.items) {
        if let Item::Strategy(s) = item {
            if s.name.name == BUILTIN_PRIORITY {
                c.diags.push(Diagnostic::error(
                    codes::DUPLICATE,
                    s.name.span,
                    "`priority` is the built-in strategy and cannot be redefined",
                ));
                continue;
            }
            if c.duplicate(&mut seen, &s.name, "strategy") {
                continue;
            }
            c.strategy_defs.push(s);
        }
    }
    let defs = c.strategy_defs.clone();
    let strategies: Vec<CStrategy> = defs.iter().filter_map(|s| c.strategy(s)).collect();
    let complete = strategies.len() == defs.len();
    let mut routes = Vec::new();
    let mut route_names: HashMap<&str, Span> = HashMap::new();
    let mut order = 0usize;
    for item in files.iter().flat_map(|f| &f.items) {
        if let Item::Route(r) = item {
            if c.duplicate(&mut route_names, &r.name, "route") {
                continue;
            }
            if let Some(cr) = c.route(r, &strategies, complete) {
                routes.push((cr, order));
            }
            order += 1;
        }
    }
    routes.sort_by(|(a, ia), (b, ib)| b.priority.cmp(&a.priority).then(ia.cmp(ib)));
    let routes: Vec<CRoute> = routes.into_iter().map(|(r, _)| r).collect();
    let tests = super::testing::check_tests(&mut c, files, &routes, &strategies);
    if c.nodes > MAX_SET_NODES {
        c.diags.push(Diagnostic::global(
            codes::TOO_COMPLEX,
            format!(
                "the policy set has {} expression parts; the limit is {MAX_SET_NODES}",
                c.nodes
            ),
        ));
    }
    if !c.diags.is_empty() {
        let mut d = c.diags;
        d.sort_by_key(|d| d.span.map(|s| (s.file, s.start)));
        return Err(d);
    }
    Ok(CheckedPolicySet {
        names: super::names::Names::new(&routes, &strategies, registry),
        strings: c.strings,
        regexes: c.regexes,
        routes,
        strategies,
        tests,
        registry: registry.clone(),
        sources: sources.clone(),
        version: version(sources),
    })
}

/// Parses and checks every file of `sources` (convenience for tools and tests).
///
/// # Errors
/// Parse errors of every file, or (if all parse) the checker's errors.
pub fn parse_and_check(
    sources: &SourceMap,
    registry: &Registry,
) -> Result<CheckedPolicySet, Vec<Diagnostic>> {
    let mut files = Vec::new();
    let mut diags = Vec::new();
    for (id, _) in sources.files() {
        match super::parser::parse_file(sources, id) {
            Ok(f) => files.push(f),
            Err(d) => diags.extend(d),
        }
    }
    if !diags.is_empty() {
        return Err(diags);
    }
    check(&files, sources, registry)
}

/// FNV-1a 64 over every file's name within the set ([`super::source::SourceFile::set_name`],
/// relative to the policy directory) and text, as 16 hex digits: the same for the
/// same files whatever the current directory.
pub fn version(sources: &SourceMap) -> String {
    let mut h = super::interp::hash::Fnv1a::new();
    for (_, f) in sources.files() {
        h.write(f.set_name.as_bytes());
        h.write(&[0xff]);
        h.write(f.text.as_bytes());
        h.write(&[0xff]);
    }
    format!("{:016x}", h.finish())
}

impl<'a> Checker<'a> {
    /// Records `name` in `seen`; reports and returns true if it was already there.
    fn duplicate<'n>(
        &mut self,
        seen: &mut HashMap<&'n str, Span>,
        name: &'n Ident,
        what: &str,
    ) -> bool {
        if let Some(first) = seen.get(name.name.as_str()) {
            self.diags.push(
                Diagnostic::error(
                    codes::DUPLICATE,
                    name.span,
                    format!("the {what} `{}` is defined twice", name.name),
                )
                .with_label(*first, "first defined here"),
            );
            return true;
        }
        seen.insert(&name.name, name.span);
        false
    }

    /// Resolves a target against the registry.
    fn target(&mut self, t: &Target) -> Option<CTarget> {
        match &t.kind {
            TargetKind::Model(m) => {
                if self.registry.model(m).is_some() {
                    return Some(CTarget::Model(m.clone()));
                }
                let mut d = Diagnostic::error(
                    codes::UNKNOWN_MODEL,
                    t.span,
                    format!("the model `{m}` is not in the registry"),
                )
                .with_span_label("unknown model")
                .with_did_you_mean(did_you_mean(m, self.registry.model_names()));
                if let Some(s) = &mut d.suggestion {
                    s.replacement = format!("\"{}\"", s.replacement);
                }
                if d.help.is_none() && self.registry.endpoint(m).is_some() {
                    d = d.with_help(format!("`{m}` is an endpoint; write `endpoint \"{m}\"`"));
                }
                self.diags.push(d);
                None
            }
            TargetKind::Endpoint(e) => {
                if self.registry.endpoint(e).is_some() {
                    return Some(CTarget::Endpoint(e.clone()));
                }
                self.diags.push(
                    Diagnostic::error(
                        codes::UNKNOWN_ENDPOINT,
                        t.span,
                        format!("the endpoint `{e}` is not in the registry"),
                    )
                    .with_span_label("unknown endpoint")
                    .with_did_you_mean(did_you_mean(e, self.registry.endpoint_ids())),
                );
                None
            }
            TargetKind::RequestedModel => Some(CTarget::RequestedModel),
            TargetKind::Any => Some(CTarget::Any),
        }
    }

    /// Checks a request-context condition.
    fn condition(&mut self, e: &Expr, ctx: Ctx, what: &str) -> Option<TExpr> {
        let mut scope = Scope::new(ctx);
        self.expr_of(e, &mut scope, Ty::Bool, what)
    }
}

#[cfg(test)]
mod tests;
