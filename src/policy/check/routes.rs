//! Routes, rules and their actions.

use std::collections::HashMap;

use crate::policy::ast::*;
use crate::policy::checked::*;
use crate::policy::diagnostic::{codes, Diagnostic};
use crate::policy::status::{FallbackOn, StatusItem};
use crate::suggest::did_you_mean;

use super::expr::Ctx;
use super::{Checker, BUILTIN_PRIORITY};

/// Largest accepted `retries`.
pub const MAX_RETRIES: i64 = 10;

impl<'a> Checker<'a> {
    pub(super) fn route(
        &mut self,
        r: &RouteDef,
        strategies: &[CStrategy],
        complete: bool,
    ) -> Option<CRoute> {
        let when = r
            .when
            .as_ref()
            .map(|w| self.condition(w, Ctx::Request, "a route condition"));
        let mut out = CRoute {
            name: r.name.name.clone(),
            priority: r.priority.as_ref().map(|p| p.node).unwrap_or(0),
            when: None,
            set_priority: Vec::new(),
            cache: None,
            hold_off_peak: false,
            fallback: None,
            rules: Vec::new(),
            default: CRule {
                name: "default".to_string(),
                priority: i64::MIN,
                when: None,
                body: empty_body(),
                span: r.span,
            },
            span: r.span,
        };
        let mut ok = !matches!(when, Some(None));
        out.when = when.flatten();
        let mut names: HashMap<&str, Span> = HashMap::new();
        let mut default_seen: Option<Span> = None;
        let mut cache_seen = None;
        let mut hold_seen = None;
        let mut fallback_seen = None;
        let mut rules = Vec::new();
        for item in &r.items {
            match item {
                RouteItem::Rule(rule) => {
                    if self.duplicate(&mut names, &rule.name, "rule") {
                        ok = false;
                        continue;
                    }
                    if rule.name.name == "default" {
                        self.diags.push(Diagnostic::error(
                            codes::DUPLICATE,
                            rule.name.span,
                            "`default` is reserved for the route's default; pick another rule name",
                        ));
                        ok = false;
                        continue;
                    }
                    let when = rule
                        .when
                        .as_ref()
                        .map(|w| self.condition(w, Ctx::Request, "a rule condition"));
                    let body = self.body(&rule.body, rule.span, false, strategies, complete);
                    match (when, body) {
                        (Some(None), _) | (_, None) => ok = false,
                        (when, Some(body)) => rules.push(CRule {
                            name: rule.name.name.clone(),
                            priority: rule.priority.as_ref().map(|p| p.node).unwrap_or(0),
                            when: when.flatten(),
                            body,
                            span: rule.span,
                        }),
                    }
                }
                RouteItem::Default(d) => {
                    if let Some(first) = default_seen {
                        self.diags.push(
                            Diagnostic::error(
                                codes::DUPLICATE,
                                d.span,
                                format!("the route `{}` has two defaults", r.name.name),
                            )
                            .with_label(first, "first default here"),
                        );
                        ok = false;
                        continue;
                    }
                    default_seen = Some(d.span);
                    match self.body(&d.body, d.span, true, strategies, complete) {
                        Some(body) => {
                            out.default.body = body;
                            out.default.span = d.span;
                        }
                        None => ok = false,
                    }
                }
                RouteItem::Fallback(f) => {
                    if self.once(&mut fallback_seen, f.span, "fallback") {
                        out.fallback = self.fallback(f);
                        ok &= out.fallback.is_some();
                    }
                }
                RouteItem::Cache(cd) => {
                    if self.once(&mut cache_seen, cd.span, "cache setting") {
                        out.cache = self.cache(cd);
                        ok &= out.cache.is_some();
                    }
                }
                RouteItem::Hold(h) => {
                    if self.once(&mut hold_seen, h.span, "`hold`") {
                        out.hold_off_peak = self.hold(h);
                        ok &= out.hold_off_peak;
                    }
                }
                RouteItem::SetPriority(sp) => match self.set_priority(sp) {
                    Some(s) => out.set_priority.push(s),
                    None => ok = false,
                },
            }
        }
        if default_seen.is_none() {
            self.diags.push(
                Diagnostic::error(
                    codes::MISSING_DEFAULT,
                    r.name.span,
                    format!("the route `{}` has no default", r.name.name),
                )
                .with_help("add `default use model` (or another action) so every request it takes gets a decision"),
            );
            ok = false;
        }
        // Higher priority first; equal priorities keep source order (stable sort).
        rules.sort_by_key(|r| std::cmp::Reverse(r.priority));
        out.rules = rules;
        ok.then_some(out)
    }

    /// Reports a second occurrence of a once-only statement.
    fn once(&mut self, seen: &mut Option<Span>, span: Span, what: &str) -> bool {
        if let Some(first) = seen {
            self.diags.push(
                Diagnostic::error(
                    codes::DUPLICATE,
                    span,
                    format!("only one {what} is allowed here"),
                )
                .with_label(*first, "first one here"),
            );
            return false;
        }
        *seen = Some(span);
        true
    }

    fn body(
        &mut self,
        actions: &[Action],
        span: Span,
        is_default: bool,
        strategies: &[CStrategy],
        complete: bool,
    ) -> Option<CBody> {
        let mut body = empty_body();
        let mut ok = true;
        let mut terminal_span: Option<Span> = None;
        let mut continued: Option<Span> = None;
        let (mut cache_seen, mut hold_seen, mut fallback_seen) = (None, None, None);
        for a in actions {
            let this_terminal = match a {
                Action::Use(u) => {
                    let cu = self.use_action(u, strategies, complete);
                    ok &= cu.is_some();
                    cu.map(CTerminal::Use)
                }
                Action::Split(s) => {
                    let cs = self.split(s, strategies, complete);
                    ok &= cs.is_some();
                    cs.map(CTerminal::Split)
                }
                Action::Reject(r) => {
                    if !(400..=599).contains(&r.status.node) {
                        self.diags.push(
                            Diagnostic::error(
                                codes::OUT_OF_RANGE,
                                r.status.span,
                                format!("{} is not an error status", r.status.node),
                            )
                            .with_help("reject with a status from 400 to 599, like 429 or 403"),
                        );
                        ok = false;
                        None
                    } else {
                        Some(CTerminal::Reject {
                            status: r.status.node as u16,
                            message: r.message.node.clone(),
                            span: r.span,
                        })
                    }
                }
                Action::SetPriority(sp) => {
                    match self.set_priority(sp) {
                        Some(s) => body.set_priority.push(s),
                        None => ok = false,
                    }
                    continue;
                }
                Action::Cache(cd) => {
                    if self.once(&mut cache_seen, cd.span, "cache setting") {
                        body.cache = self.cache(cd);
                        ok &= body.cache.is_some();
                    }
                    continue;
                }
                Action::Hold(h) => {
                    if self.once(&mut hold_seen, h.span, "`hold`") {
                        body.hold_off_peak = self.hold(h);
                        ok &= body.hold_off_peak;
                    }
                    continue;
                }
                Action::Fallback(f) => {
                    if self.once(&mut fallback_seen, f.span, "fallback") {
                        body.fallback = self.fallback(f);
                        ok &= body.fallback.is_some();
                    }
                    continue;
                }
                Action::Continue(s) => {
                    if is_default {
                        self.diags.push(Diagnostic::error(
                            codes::BAD_BODY,
                            *s,
                            "the default cannot `continue`: nothing comes after it",
                        ));
                        ok = false;
                    }
                    continued = Some(*s);
                    continue;
                }
            };
            let aspan = action_span(a);
            if let Some(first) = terminal_span {
                self.diags.push(
                    Diagnostic::error(
                        codes::BAD_BODY,
                        aspan,
                        "a rule can take only one of `use`, `split` and `reject`",
                    )
                    .with_label(first, "the first one is here"),
                );
                ok = false;
            }
            terminal_span = Some(aspan);
            body.terminal = this_terminal;
        }
        match (terminal_span, continued) {
            (Some(t), Some(c)) => {
                self.diags.push(
                    Diagnostic::error(
                        codes::BAD_BODY,
                        c,
                        "`continue` cannot follow `use`, `split` or `reject` in the same rule",
                    )
                    .with_label(t, "this already decides the route"),
                );
                ok = false;
            }
            (None, None) if ok => {
                self.diags.push(
                    Diagnostic::error(codes::BAD_BODY, span, "this rule decides nothing")
                        .with_help("end it with `use`, `split`, `reject` or `continue`"),
                );
                ok = false;
            }
            _ => {}
        }
        ok.then_some(body)
    }

    fn set_priority(&mut self, sp: &SetPriority) -> Option<CSetPriority> {
        let when = match &sp.when {
            Some(w) => Some(self.condition(w, Ctx::Request, "a `set priority` condition")?),
            None => None,
        };
        Some(CSetPriority {
            level: sp.level.node,
            when,
            span: sp.span,
        })
    }

    fn cache(&mut self, cd: &CacheDef) -> Option<CacheSetting> {
        let ttl = match &cd.ttl_ms {
            Some(t) if t.node <= 0 => {
                self.diags.push(Diagnostic::error(
                    codes::OUT_OF_RANGE,
                    t.span,
                    "a cache TTL must be longer than zero",
                ));
                return None;
            }
            Some(t) => Some(t.node as u64),
            None => None,
        };
        Some(CacheSetting {
            on: cd.on,
            ttl_ms: ttl,
            exact: cd.exact,
        })
    }

    /// Whether `hold WHAT` names what a request can be held for (`off_peak`, the only
    /// one); reports it otherwise.
    fn hold(&mut self, h: &HoldDef) -> bool {
        let what = h.what.name.as_str();
        if what == HoldDef::OFF_PEAK {
            return true;
        }
        let mut d = Diagnostic::error(
            codes::OUT_OF_RANGE,
            h.what.span,
            format!("a request cannot be held for `{what}`"),
        )
        .with_span_label("not something to wait for")
        .with_did_you_mean(did_you_mean(what, [HoldDef::OFF_PEAK]));
        if d.help.is_none() {
            d = d.with_help(
                "`hold off_peak` lets a low-priority request wait for the off-peak window; it is the only hold",
            );
        }
        self.diags.push(d);
        false
    }

    fn fallback(&mut self, f: &FallbackDef) -> Option<CFallback> {
        let mut ok = true;
        let mut chain: Vec<CTarget> = Vec::new();
        let mut spans: Vec<Span> = Vec::new();
        for t in &f.chain {
            let Some(ct) = self.target(t) else {
                ok = false;
                continue;
            };
            if let Some(i) = chain.iter().position(|c| *c == ct) {
                self.diags.push(
                    Diagnostic::error(
                        codes::FALLBACK_CYCLE,
                        t.span,
                        format!("the fallback chain returns to {}", ct.describe()),
                    )
                    .with_label(spans[i], "first listed here")
                    .with_help("a chain is tried once, in order; list each target once"),
                );
                ok = false;
                continue;
            }
            chain.push(ct);
            spans.push(t.span);
        }
        let retries = match &f.retries {
            Some(r) if !(0..=MAX_RETRIES).contains(&r.node) => {
                self.diags.push(Diagnostic::error(
                    codes::OUT_OF_RANGE,
                    r.span,
                    format!("`retries` must be from 0 to {MAX_RETRIES}, not {}", r.node),
                ));
                ok = false;
                0
            }
            Some(r) => r.node as u32,
            None => 0,
        };
        let (lo, hi) = match &f.backoff {
            Some((lo, hi)) => {
                let hi_v = hi.as_ref().map(|h| h.node).unwrap_or(lo.node);
                if lo.node < 0 || hi_v < lo.node {
                    let s = hi.as_ref().map(|h| lo.span.to(h.span)).unwrap_or(lo.span);
                    self.diags.push(Diagnostic::error(
                        codes::OUT_OF_RANGE,
                        s,
                        "a backoff range must go from a shorter to a longer wait",
                    ));
                    ok = false;
                }
                (lo.node.max(0) as u64, hi_v.max(0) as u64)
            }
            None => (0, 0),
        };
        let on = match &f.on {
            Some(on) => {
                let checked = self.fallback_on(on);
                ok &= checked.is_some();
                checked
            }
            None => None,
        };
        ok.then_some(CFallback {
            chain,
            retries,
            backoff_min_ms: lo,
            backoff_max_ms: hi,
            on,
        })
    }

    /// `on 409, 5xx`: each item a status 400..=599 or the class `4xx`/`5xx`, none
    /// listed twice or inside a class also listed.
    fn fallback_on(&mut self, on: &FallbackOnDef) -> Option<FallbackOn> {
        let mut ok = true;
        let mut items: Vec<(StatusItem, Span)> = Vec::new();
        for it in &on.items {
            let item = match it.node {
                StatusLit::Code(c) if (400..=599).contains(&c) => StatusItem::Code(c as u16),
                StatusLit::Class(k) if k == 4 || k == 5 => StatusItem::Class(k),
                bad => {
                    let what = match bad {
                        StatusLit::Code(c) => c.to_string(),
                        StatusLit::Class(k) => format!("{k}xx"),
                    };
                    self.diags.push(
                        Diagnostic::error(
                            codes::OUT_OF_RANGE,
                            it.span,
                            format!("`{what}` is not an error status a fallback can act on"),
                        )
                        .with_help(
                            "list HTTP statuses from 400 to 599, or the classes `4xx` and `5xx`",
                        ),
                    );
                    ok = false;
                    continue;
                }
            };
            let earlier = items.iter().find(|(e, _)| match (*e, item) {
                (a, b) if a == b => true,
                (StatusItem::Class(_), StatusItem::Code(c)) => e.matches(c),
                (StatusItem::Code(c), StatusItem::Class(_)) => item.matches(c),
                _ => false,
            });
            if let Some(&(e, at)) = earlier {
                let msg = if e == item {
                    format!("`{}` is listed twice", item.text())
                } else if let StatusItem::Class(_) = e {
                    format!("`{}` is already covered by `{}`", item.text(), e.text())
                } else {
                    format!("`{}` covers `{}`, listed earlier", item.text(), e.text())
                };
                self.diags.push(
                    Diagnostic::error(codes::DUPLICATE, it.span, msg)
                        .with_label(at, "listed here")
                        .with_help("list each status once; a class covers all of its statuses"),
                );
                ok = false;
                continue;
            }
            items.push((item, it.span));
        }
        ok.then(|| FallbackOn::new(items.into_iter().map(|(i, _)| i).collect()))
    }

    pub(super) fn use_action(
        &mut self,
        u: &UseAction,
        strategies: &[CStrategy],
        complete: bool,
    ) -> Option<CUse> {
        let target = self.target(&u.target);
        let (strategy, args) = match &u.via {
            None => (None, Vec::new()),
            Some(v) if v.strategy.name == BUILTIN_PRIORITY => {
                if let Some(a) = v.args.first() {
                    self.diags.push(Diagnostic::error(
                        codes::UNKNOWN_PARAM,
                        a.span,
                        "the built-in `priority` strategy takes no parameters",
                    ));
                    return None;
                }
                (None, Vec::new())
            }
            Some(v) => {
                let Some(idx) = self
                    .strategy_defs
                    .iter()
                    .position(|s| s.name.name == v.strategy.name)
                else {
                    let mut names: Vec<&str> = self
                        .strategy_defs
                        .iter()
                        .map(|s| s.name.name.as_str())
                        .collect();
                    names.push(BUILTIN_PRIORITY);
                    self.diags.push(
                        Diagnostic::error(
                            codes::UNKNOWN_STRATEGY,
                            v.strategy.span,
                            format!("no strategy is named `{}`", v.strategy.name),
                        )
                        .with_span_label("unknown strategy")
                        .with_did_you_mean(did_you_mean(&v.strategy.name, names)),
                    );
                    return None;
                };
                // The strategy itself failed to check: its errors are already reported.
                if !complete {
                    let name = &v.strategy.name;
                    let found = strategies.iter().position(|s| &s.name == name)?;
                    (Some(found as u32), self.args(&strategies[found], v)?)
                } else {
                    (Some(idx as u32), self.args(&strategies[idx], v)?)
                }
            }
        };
        let target = target?;
        Some(CUse {
            described: target.describe().into(),
            target,
            strategy,
            args: args.into(),
            span: u.span,
        })
    }

    fn args(&mut self, s: &CStrategy, v: &ViaClause) -> Option<Vec<Const>> {
        let mut values: Vec<Const> = s.params.iter().map(|p| p.default).collect();
        let mut seen: HashMap<&str, Span> = HashMap::new();
        let mut ok = true;
        for a in &v.args {
            if self.duplicate(&mut seen, &a.name, "argument") {
                ok = false;
                continue;
            }
            let Some(i) = s.params.iter().position(|p| p.name == a.name.name) else {
                self.diags.push(
                    Diagnostic::error(
                        codes::UNKNOWN_PARAM,
                        a.name.span,
                        format!(
                            "the strategy `{}` has no parameter `{}`",
                            s.name, a.name.name
                        ),
                    )
                    .with_did_you_mean(did_you_mean(
                        &a.name.name,
                        s.params.iter().map(|p| p.name.as_str()),
                    )),
                );
                ok = false;
                continue;
            };
            match self.param_value(
                &s.params[i].name,
                s.params[i].ty,
                &a.value,
                self.param_range(s, i),
            ) {
                Some(c) => values[i] = c,
                None => ok = false,
            }
        }
        ok.then_some(values)
    }

    fn split(
        &mut self,
        s: &SplitAction,
        strategies: &[CStrategy],
        complete: bool,
    ) -> Option<CSplit> {
        let mut ok = true;
        let key = match &s.key.kind {
            SplitKeyKind::ApiKey => CSplitKey::ApiKey,
            SplitKeyKind::Org => CSplitKey::Org,
            SplitKeyKind::Header(h) => CSplitKey::Header(h.to_ascii_lowercase()),
            SplitKeyKind::Metadata(m) => CSplitKey::Metadata(m.clone()),
            SplitKeyKind::Random => CSplitKey::Random,
        };
        let mut arms = Vec::new();
        let mut total: i64 = 0;
        let mut stable_arm = None;
        for arm in &s.arms {
            if arm.share.node <= 0 || arm.share.node > 10_000 {
                self.diags.push(Diagnostic::error(
                    codes::OUT_OF_RANGE,
                    arm.share.span,
                    "a split arm's share must be more than 0% and at most 100%",
                ));
                ok = false;
            }
            total = total.saturating_add(arm.share.node);
            if let (Some(r), false) = (&arm.rollback, arm.canary) {
                self.diags.push(
                    Diagnostic::error(
                        codes::BAD_BODY,
                        r.span,
                        "only a canary arm can have a `rollback` guard",
                    )
                    .with_help("write `canary use ...` to mark the arm as a canary"),
                );
                ok = false;
            }
            let rollback = match &arm.rollback {
                Some(r) => {
                    let t = self.condition(r, Ctx::Endpoint, "a rollback guard");
                    ok &= t.is_some();
                    t
                }
                None => None,
            };
            if !arm.canary && stable_arm.is_none() {
                stable_arm = Some(arms.len() as u32);
            }
            match self.use_action(&arm.action, strategies, complete) {
                Some(action) => arms.push(CArm {
                    share_bp: arm.share.node.clamp(0, 10_000) as u32,
                    upto_bp: total.clamp(0, 10_000) as u32,
                    canary: arm.canary,
                    action,
                    rollback,
                }),
                None => ok = false,
            }
        }
        if total != 10_000 {
            self.diags.push(
                Diagnostic::error(
                    codes::SPLIT_SUM,
                    s.span,
                    format!("the split's shares add up to {}, not 100%", show_bp(total)),
                )
                .with_help("make the arms' percentages sum to exactly 100%"),
            );
            ok = false;
        }
        if stable_arm.is_none() && s.arms.iter().any(|a| a.canary) {
            self.diags.push(
                Diagnostic::error(
                    codes::NO_STABLE_ARM,
                    s.span,
                    "every arm of this split is a canary, so a rollback has nowhere to go",
                )
                .with_help("leave at least one arm without `canary`"),
            );
            ok = false;
        }
        ok.then(|| CSplit {
            key,
            seed: s.seed.as_ref().map(|x| x.node).unwrap_or(0),
            arms,
            stable_arm,
            span: s.span,
        })
    }
}

fn show_bp(bp: i64) -> String {
    if bp % 100 == 0 {
        format!("{}%", bp / 100)
    } else {
        format!("{}.{:02}%", bp / 100, (bp % 100).abs())
    }
}

fn empty_body() -> CBody {
    CBody {
        terminal: None,
        set_priority: Vec::new(),
        cache: None,
        hold_off_peak: false,
        fallback: None,
    }
}

fn action_span(a: &Action) -> Span {
    match a {
        Action::Use(u) => u.span,
        Action::Split(s) => s.span,
        Action::Reject(r) => r.span,
        Action::SetPriority(s) => s.span,
        Action::Cache(c) => c.span,
        Action::Hold(h) => h.span,
        Action::Fallback(f) => f.span,
        Action::Continue(s) => *s,
    }
}
