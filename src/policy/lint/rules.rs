//! Route and rule analyses: constant conditions, unreachable and shadowed rules,
//! overlaps at equal priority, and split keys (W0201..W0205, W0207).

use super::dnf::Conv;
use super::domain::{self, Cube, Dnf, FieldC};
use super::index::Index;
use super::{codes, witness, AstIndex};
use crate::policy::checked::*;
use crate::policy::diagnostic::Diagnostic;
use crate::policy::source::Span;

/// One route or rule, as the analyses see it.
struct Unit<'a> {
    what: &'static str,
    name: &'a str,
    priority: i64,
    when: Option<&'a TExpr>,
    /// Whether a request it takes never reaches later units.
    terminates: bool,
    name_span: Span,
}

/// Lints every route of `set`.
pub fn lint(set: &CheckedPolicySet, ix: &AstIndex, out: &mut Vec<Diagnostic>) {
    // A route that can fall through may have changed the priority for later routes.
    let falls_through = set.routes.iter().any(|r| r.default.body.terminal.is_none());
    let mut conv = Conv::new(set, falls_through);
    let routes: Vec<Unit<'_>> = set
        .routes
        .iter()
        .map(|r| Unit {
            what: "route",
            name: &r.name,
            priority: r.priority,
            when: r.when.as_ref(),
            terminates: r.default.body.terminal.is_some(),
            name_span: ix.name(r.span),
        })
        .collect();
    let top = domain::top();
    units(
        set,
        &mut conv,
        &routes,
        &top,
        None,
        |i, j| set.routes[i] != set.routes[j],
        out,
    );
    for r in &set.routes {
        let mutable = !r.set_priority.is_empty()
            || r.rules
                .iter()
                .any(|x| x.body.terminal.is_none() && !x.body.set_priority.is_empty());
        let mut conv = Conv::new(set, mutable || falls_through);
        let ctx = r
            .when
            .as_ref()
            .map(|w| conv.dnf(w, false))
            .unwrap_or_else(domain::top);
        let rules: Vec<Unit<'_>> = r
            .rules
            .iter()
            .map(|x| Unit {
                what: "rule",
                name: &x.name,
                priority: x.priority,
                when: x.when.as_ref(),
                terminates: x.body.terminal.is_some(),
                name_span: ix.name(x.span),
            })
            .collect();
        units(
            set,
            &mut conv,
            &rules,
            &ctx,
            r.when.as_ref(),
            |i, j| r.rules[i].body != r.rules[j].body,
            out,
        );
        for rule in r.rules.iter().chain(std::iter::once(&r.default)) {
            if let Some(CTerminal::Split(s)) = &rule.body.terminal {
                let mut c = ctx.clone();
                if let Some(w) = &rule.when {
                    c = domain::and(&c, &conv.dnf(w, false));
                }
                split_key(set, ix, s, &rule.name, &c, out);
            }
        }
    }
    for r in &set.routes {
        for sp in r
            .set_priority
            .iter()
            .chain(r.rules.iter().flat_map(|x| &x.body.set_priority))
        {
            if let Some(w) = &sp.when {
                constant(
                    set,
                    w,
                    &format!("`set priority {}`", sp.level.as_str()),
                    out,
                );
            }
        }
    }
}

/// W0204 for a condition that is always true or always false; returns whether it was.
fn constant(set: &CheckedPolicySet, e: &TExpr, owner: &str, out: &mut Vec<Diagnostic>) -> bool {
    // `request.priority` cannot change while one condition is evaluated, so it is a
    // plain field here whatever `set priority` does between conditions.
    let mut conv = Conv::new(set, false);
    let (t, f) = (conv.dnf(e, false), conv.dnf(e, true));
    let which = if domain::is_empty(&t) == Some(true) {
        "false"
    } else if domain::is_empty(&f) == Some(true) {
        "true"
    } else {
        return false;
    };
    let (effect, help) = if which == "false" {
        (
            "it never applies",
            format!("no request satisfies it: fix the comparison, or remove {owner}"),
        )
    } else {
        (
            "the condition can be removed",
            "every request satisfies it: remove the `when` clause, or fix the comparison"
                .to_string(),
        )
    };
    out.push(
        Diagnostic::warning(
            codes::CONSTANT_CONDITION,
            e.span,
            format!("the condition of {owner} is always {which}, so {effect}"),
        )
        .with_span_label(format!("always {which}"))
        .with_help(help),
    );
    true
}

/// Analyses units (routes, or the rules of one route) in evaluation order, in context
/// `ctx`; returns each unit's condition in context.
fn units(
    set: &CheckedPolicySet,
    conv: &mut Conv<'_>,
    us: &[Unit<'_>],
    ctx: &Dnf,
    ctx_expr: Option<&TExpr>,
    differ: impl Fn(usize, usize) -> bool,
    out: &mut Vec<Diagnostic>,
) -> Vec<Dnf> {
    let conds: Vec<Dnf> = us
        .iter()
        .map(|u| {
            u.when
                .map(|w| conv.dnf(w, false))
                .unwrap_or_else(domain::top)
        })
        .collect();
    let mut index = Index::new(&conds);
    let mut in_ctx = Vec::new();
    for (j, b) in us.iter().enumerate() {
        // Earlier units that can matter to `b` (the others cannot meet it), ascending.
        let cands = index.candidates(j);
        index.add(j);
        let bc = domain::and(ctx, &conds[j]);
        in_ctx.push(bc.clone());
        let label = format!("{} `{}`", b.what, b.name);
        if let Some(w) = b.when {
            if constant(set, w, &label, out) {
                continue;
            }
        }
        if domain::is_empty(&bc) == Some(true) {
            let mut d = Diagnostic::warning(
                codes::UNREACHABLE,
                b.name_span,
                format!("{label} can never apply: its condition contradicts the route's condition"),
            )
            .with_span_label("unreachable")
            .with_help(format!(
                "no request the route takes can match {label}: move it to a route that takes such requests, widen the route's condition, or remove it"
            ));
            if let Some(c) = ctx_expr {
                d = d.with_label(c.span, "the route only takes requests matching this");
            }
            out.push(d);
            continue;
        }
        let mut shadowed = false;
        for a in cands.iter().map(|&i| &us[i]) {
            if !a.terminates {
                continue;
            }
            let not_a = match a.when {
                Some(w) => conv.dnf(w, true),
                None => Some(Vec::new()),
            };
            if domain::is_empty(&domain::and(&bc, &not_a)) == Some(true) {
                let order = if a.priority > b.priority {
                    "has a higher priority"
                } else {
                    "comes first at the same priority"
                };
                out.push(
                    Diagnostic::warning(
                        codes::SHADOWED,
                        b.name_span,
                        format!("{label} is shadowed by {} `{}`: every request it matches is taken by `{}`, which {order}", a.what, a.name, a.name),
                    )
                    .with_span_label("never reached")
                    .with_label(a.name_span, format!("`{}` takes these requests first", a.name))
                    .with_help(format!("give `{}` a higher priority, narrow `{}`, or remove `{}`", b.name, a.name, b.name)),
                );
                shadowed = true;
                break;
            }
        }
        if shadowed || !b.terminates {
            continue;
        }
        for (i, a) in cands.iter().map(|&i| (i, &us[i])) {
            if !a.terminates || a.priority != b.priority || !differ(i, j) {
                continue;
            }
            let both = domain::and(&in_ctx[i], &conds[j]);
            let Some(cubes) = &both else { continue };
            let mut conds_e: Vec<&TExpr> = a.when.into_iter().chain(b.when).collect();
            conds_e.extend(ctx_expr);
            if let Some(example) = cubes
                .iter()
                .take(32)
                .find_map(|c| verified(set, c, &conds_e))
            {
                out.push(
                    Diagnostic::warning(
                        codes::OVERLAP,
                        b.name_span,
                        format!(
                            "{label} overlaps {} `{}` at the same priority ({}) and routes differently; `{}` wins only because it comes first",
                            a.what, a.name, a.priority, a.name
                        ),
                    )
                    .with_span_label("overlaps")
                    .with_label(a.name_span, "this one is tried first")
                    .with_help(format!("both match {example}; give one of them an explicit higher priority")),
                );
            }
        }
    }
    in_ctx
}

fn verified(set: &CheckedPolicySet, c: &Cube, conds: &[&TExpr]) -> Option<String> {
    let (req, text) = witness::from_cube(set, c);
    witness::holds(set, &req, conds).then_some(text)
}

/// W0205 (random key) and W0207 (sticky key possibly absent).
fn split_key(
    set: &CheckedPolicySet,
    ix: &AstIndex,
    s: &CSplit,
    rule: &str,
    ctx: &Dnf,
    out: &mut Vec<Diagnostic>,
) {
    let at = ix.split_key(s.span);
    let field = match &s.key {
        CSplitKey::Random => {
            out.push(
                Diagnostic::warning(codes::SPLIT_NOT_STICKY, at, format!("the split in `{rule}` is keyed by `random`, so one caller's requests land in different arms"))
                    .with_span_label("not sticky")
                    .with_help("split by `api_key`, `org`, `header(\"...\")` or `metadata(\"...\")` to keep each caller in one arm"),
            );
            return;
        }
        CSplitKey::ApiKey => Some(ReqField::ApiKey),
        CSplitKey::Org => Some(ReqField::Org),
        CSplitKey::Header(h) => set.strings.lookup(h).map(ReqField::Header),
        CSplitKey::Metadata(m) => set.strings.lookup(m).map(ReqField::Metadata),
    };
    let implied = field.is_some_and(|f| {
        let mut c = FieldC::full(f);
        c.present = false;
        let absent: Dnf = Some(Cube::of_field(c).into_iter().collect());
        domain::is_empty(&domain::and(ctx, &absent)) == Some(true)
    });
    if !implied {
        let key = match &s.key {
            CSplitKey::ApiKey => "request.api_key".to_string(),
            CSplitKey::Org => "request.org".to_string(),
            CSplitKey::Header(h) => format!("header({h:?})"),
            CSplitKey::Metadata(m) => format!("metadata({m:?})"),
            CSplitKey::Random => String::new(),
        };
        out.push(
            Diagnostic::warning(
                codes::SPLIT_KEY_MAY_BE_ABSENT,
                at,
                format!("the split in `{rule}` is keyed by `{key}`, which may be absent: every request without it lands in the same arm"),
            )
            .with_span_label("may be absent")
            .with_help(if rule == "default" {
                format!("move the split into a rule `when has({key})`, and give the default a target for requests without it")
            } else {
                format!("add `has({key})` to the condition of rule `{rule}`")
            }),
        );
    }
}
