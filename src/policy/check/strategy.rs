//! Strategy definitions: parameters, state slots, lets, filters, score, pick and
//! updates.

use std::collections::HashMap;

use crate::policy::ast::*;
use crate::policy::checked::*;
use crate::policy::diagnostic::{codes, Diagnostic};

use super::expr::{Ctx, Scope, StratScope};
use super::Checker;

/// Parameter names that default to the range (0, 1] (EWMA alpha, Exp3 gamma).
fn implicit_range(name: &str) -> Option<ParamRange> {
    let unit = ["alpha", "gamma"];
    unit.iter()
        .any(|u| name == *u || name.ends_with(&format!("_{u}")))
        .then_some(ParamRange {
            lo: 0.0,
            lo_inclusive: false,
            hi: 1.0,
            hi_inclusive: true,
        })
}

fn lit_number(l: &Literal) -> Option<f64> {
    match l.kind {
        LitKind::Int(v) | LitKind::Duration(v, _) => Some(v as f64),
        LitKind::Float(v) => Some(v),
        LitKind::Percent(bp) => Some(bp as f64 / 10_000.0),
        _ => None,
    }
}

impl Checker<'_> {
    /// The allowed range of parameter `i` of `s`.
    pub(super) fn param_range(&self, s: &CStrategy, i: usize) -> Option<ParamRange> {
        s.params.get(i).and_then(|p| p.range)
    }

    /// Converts a literal to a parameter's type and checks its range.
    pub(super) fn param_value(
        &mut self,
        name: &str,
        ty: Ty,
        l: &Literal,
        range: Option<ParamRange>,
    ) -> Option<Const> {
        let c = match (&l.kind, ty) {
            (LitKind::Int(v) | LitKind::Duration(v, _), Ty::Int) => Const::Int(*v),
            (LitKind::Int(v) | LitKind::Duration(v, _), Ty::Float) => Const::Float(*v as f64),
            (LitKind::Float(v), Ty::Float) => Const::Float(*v),
            (LitKind::Percent(bp), Ty::Float) => Const::Float(*bp as f64 / 10_000.0),
            (LitKind::Bool(b), Ty::Bool) => Const::Bool(*b),
            (LitKind::Str(s), Ty::Str) => Const::Str(self.strings.intern(s)),
            _ => {
                self.diags.push(Diagnostic::error(
                    codes::TYPE_MISMATCH,
                    l.span,
                    format!("the parameter `{name}` takes {}", ty.name()),
                ));
                return None;
            }
        };
        if let (Some(r), Some(v)) = (range, lit_number(l)) {
            if !r.contains(v) {
                self.diags.push(
                    Diagnostic::error(
                        codes::OUT_OF_RANGE,
                        l.span,
                        format!(
                            "the parameter `{name}` must lie in {}, not {v}",
                            r.describe()
                        ),
                    )
                    .with_span_label("out of range"),
                );
                return None;
            }
        }
        Some(c)
    }

    pub(super) fn strategy(&mut self, s: &StrategyDef) -> Option<CStrategy> {
        let mut ok = true;
        let mut scope_names = StratScope::default();
        let mut params = Vec::new();
        let mut seen: HashMap<&str, Span> = HashMap::new();
        for p in &s.params {
            if self.duplicate(&mut seen, &p.name, "parameter") {
                ok = false;
                continue;
            }
            let ty = match &p.default.kind {
                LitKind::Int(_) | LitKind::Duration(..) => Ty::Int,
                LitKind::Float(_) | LitKind::Percent(_) => Ty::Float,
                LitKind::Bool(_) => Ty::Bool,
                LitKind::Str(_) => Ty::Str,
            };
            let range = match &p.range {
                Some(r) if !matches!(ty, Ty::Int | Ty::Float) => {
                    self.diags.push(
                        Diagnostic::error(
                            codes::OUT_OF_RANGE,
                            r.span,
                            format!(
                                "the parameter `{}` is {}, so it cannot have a numeric range",
                                p.name.name,
                                ty.name()
                            ),
                        )
                        .with_span_label("range on a non-number")
                        .with_help("ranges apply to integer, float, percentage and duration parameters; remove this `in ...`"),
                    );
                    ok = false;
                    None
                }
                Some(r) => match (lit_number(&r.lo), lit_number(&r.hi)) {
                    (Some(lo), Some(hi))
                        if lo < hi || (lo == hi && r.lo_inclusive && r.hi_inclusive) =>
                    {
                        Some(ParamRange {
                            lo,
                            lo_inclusive: r.lo_inclusive,
                            hi,
                            hi_inclusive: r.hi_inclusive,
                        })
                    }
                    (Some(lo), Some(hi)) if lo == hi => {
                        self.diags.push(
                            Diagnostic::error(
                                codes::OUT_OF_RANGE,
                                r.span,
                                format!(
                                    "the range of `{}` is empty: no number lies in it",
                                    p.name.name
                                ),
                            )
                            .with_span_label("empty range")
                            .with_help(format!(
                                "write `[{lo}, {lo}]` for the single value, or widen the range"
                            )),
                        );
                        ok = false;
                        None
                    }
                    _ => {
                        self.diags.push(Diagnostic::error(
                            codes::OUT_OF_RANGE,
                            r.span,
                            "a range needs two numbers, the smaller first",
                        ));
                        ok = false;
                        None
                    }
                },
                None => implicit_range(&p.name.name),
            };
            // The name stays defined even when its default is refused, so its uses
            // are checked rather than reported again as undefined.
            scope_names.params.push((p.name.name.clone(), ty));
            match self.param_value(&p.name.name, ty, &p.default, range) {
                Some(default) => params.push(CParam {
                    name: p.name.name.clone(),
                    ty,
                    default,
                    range,
                }),
                None => ok = false,
            }
        }
        // State slots are visible everywhere in the body.
        let mut state_defs = Vec::new();
        for item in &s.items {
            if let StrategyItem::State(st) = item {
                if self.duplicate(&mut seen, &st.name, "name") {
                    ok = false;
                    continue;
                }
                scope_names.states.push(st.name.name.clone());
                state_defs.push(st);
            }
        }
        let mut states = Vec::new();
        for st in &state_defs {
            let mut scope = Scope {
                ctx: Ctx::Const,
                strat: Some(&mut scope_names),
                known: Vec::new(),
                in_agg: false,
                saw_agg: false,
            };
            match self.expr_of(&st.init, &mut scope, Ty::Float, "a state's initial value") {
                Some(init) => states.push(CState {
                    name: st.name.name.clone(),
                    init,
                    join: st.join,
                }),
                None => ok = false,
            }
        }
        let mut lets = Vec::new();
        let (mut require, mut prefer) = (Vec::new(), Vec::new());
        let mut score: Option<(TExpr, Span)> = None;
        // Where the first `score` was written, whether or not it checked.
        let mut score_at: Option<Span> = None;
        let mut pick: Option<Spanned<PickMode>> = None;
        let mut updates: Vec<(Event, Vec<(u32, TExpr)>)> = Vec::new();
        let mut events: HashMap<Event, Span> = HashMap::new();
        for item in &s.items {
            match item {
                StrategyItem::State(_) => {}
                StrategyItem::Let(l) => {
                    if self.duplicate(&mut seen, &l.name, "name") {
                        ok = false;
                        continue;
                    }
                    let mut scope = Scope {
                        ctx: Ctx::Score,
                        strat: Some(&mut scope_names),
                        known: Vec::new(),
                        in_agg: false,
                        saw_agg: false,
                    };
                    let t = self.expr(&l.value, &mut scope);
                    let saw = scope.saw_agg;
                    match t {
                        Some(t) => {
                            scope_names.lets.push((l.name.name.clone(), t.ty, saw));
                            lets.push((l.name.name.clone(), t));
                        }
                        None => {
                            scope_names.broken_lets.push(l.name.name.clone());
                            ok = false;
                        }
                    }
                }
                StrategyItem::Require(e) | StrategyItem::Prefer(e) => {
                    let mut scope = Scope {
                        ctx: Ctx::Filter,
                        strat: Some(&mut scope_names),
                        known: Vec::new(),
                        in_agg: false,
                        saw_agg: false,
                    };
                    let t = self.expr_of(e, &mut scope, Ty::Bool, "a candidate filter");
                    let has_agg = scope.saw_agg;
                    if has_agg {
                        self.diags.push(Diagnostic::error(codes::WRONG_CONTEXT, e.span, "`require` and `prefer` cannot use aggregates or lets that contain them"));
                        ok = false;
                    }
                    match (t, item) {
                        (Some(t), StrategyItem::Require(_)) => require.push(t),
                        (Some(t), _) => prefer.push(t),
                        (None, _) => ok = false,
                    }
                }
                StrategyItem::Score(e) => {
                    if let Some(first) = score_at {
                        self.diags.push(
                            Diagnostic::error(
                                codes::BAD_STRATEGY,
                                e.span,
                                "a strategy has exactly one `score`",
                            )
                            .with_label(first, "first score here"),
                        );
                        ok = false;
                        continue;
                    }
                    score_at = Some(e.span);
                    let mut scope = Scope {
                        ctx: Ctx::Score,
                        strat: Some(&mut scope_names),
                        known: Vec::new(),
                        in_agg: false,
                        saw_agg: false,
                    };
                    match self.expr_of(e, &mut scope, Ty::Float, "a score") {
                        Some(t) => score = Some((t, e.span)),
                        None => ok = false,
                    }
                }
                StrategyItem::Pick(p) => {
                    if let Some(first) = &pick {
                        self.diags.push(
                            Diagnostic::error(
                                codes::BAD_STRATEGY,
                                p.span,
                                "a strategy has exactly one `pick`",
                            )
                            .with_label(first.span, "first pick here"),
                        );
                        ok = false;
                        continue;
                    }
                    pick = Some(p.clone());
                }
                StrategyItem::On(on) => {
                    if let Some(first) = events.get(&on.event.node) {
                        self.diags.push(
                            Diagnostic::error(
                                codes::DUPLICATE,
                                on.event.span,
                                "this event already has an `on` block",
                            )
                            .with_label(*first, "first block here"),
                        );
                        ok = false;
                        continue;
                    }
                    events.insert(on.event.node, on.event.span);
                    let ctx = if on.event.node == Event::Pick {
                        Ctx::OnPick
                    } else {
                        Ctx::OnOutcome
                    };
                    let mut assigned: HashMap<&str, Span> = HashMap::new();
                    let mut list = Vec::new();
                    for a in &on.assigns {
                        let Some(slot) = scope_names.states.iter().position(|n| *n == a.name.name)
                        else {
                            self.diags.push(
                                Diagnostic::error(
                                    codes::UNKNOWN_VARIABLE,
                                    a.name.span,
                                    format!(
                                        "`{}` is not a state slot of this strategy",
                                        a.name.name
                                    ),
                                )
                                .with_did_you_mean(crate::suggest::did_you_mean(
                                    &a.name.name,
                                    scope_names.states.iter().map(String::as_str),
                                ))
                                .with_help(format!(
                                    "declare it first: `state {} = 0.0`",
                                    a.name.name
                                )),
                            );
                            ok = false;
                            continue;
                        };
                        if self.duplicate(&mut assigned, &a.name, "assignment to") {
                            ok = false;
                            continue;
                        }
                        let mut scope = Scope {
                            ctx,
                            strat: Some(&mut scope_names),
                            known: Vec::new(),
                            in_agg: false,
                            saw_agg: false,
                        };
                        match self.expr_of(&a.value, &mut scope, Ty::Float, "a state value") {
                            Some(t) => list.push((slot as u32, t)),
                            None => ok = false,
                        }
                    }
                    updates.push((on.event.node, list));
                }
            }
        }
        let Some((score, _)) = score else {
            if score_at.is_some() {
                // The score was written and its error is already reported.
                return None;
            }
            self.diags.push(
                Diagnostic::error(
                    codes::BAD_STRATEGY,
                    s.name.span,
                    format!("the strategy `{}` has no `score`", s.name.name),
                )
                .with_help("add `score = ...`, an expression per endpoint"),
            );
            return None;
        };
        let Some(pick) = pick else {
            self.diags.push(
                Diagnostic::error(
                    codes::BAD_STRATEGY,
                    s.name.span,
                    format!("the strategy `{}` has no `pick`", s.name.name),
                )
                .with_help("add `pick min`, `pick max`, `pick weighted` or `pick sample`"),
            );
            return None;
        };
        ok.then(|| {
            let mut c = CStrategy {
                name: s.name.name.clone(),
                params,
                states,
                lets,
                require,
                prefer,
                score,
                pick: pick.node,
                aggregates: scope_names.aggregates,
                updates,
                reads_stats: true,
                span: s.span,
            };
            c.reads_stats = c.compute_reads_stats();
            c
        })
    }
}
