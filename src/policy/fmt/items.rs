//! Routes, rules, actions, strategies and tests.

use super::Printer;
use crate::policy::ast::*;

fn join<T>(xs: &[T], sep: &str, f: impl Fn(&T) -> String) -> String {
    xs.iter().map(f).collect::<Vec<_>>().join(sep)
}

impl Printer<'_> {
    fn prio(&self, p: &Option<Spanned<i64>>) -> String {
        p.as_ref()
            .map(|p| format!(" priority {}", p.node))
            .unwrap_or_default()
    }

    /// ` when COND` or a line break and `when COND` if the author broke there.
    fn when(&self, w: &Option<Expr>, before: usize, indent: usize) -> String {
        let Some(w) = w else { return String::new() };
        let c = self.cond(w, indent);
        if self.broken(before, w.span.start as usize) {
            let nl = self.line_break(w.span.start as usize);
            format!("{nl}{}when {c}", " ".repeat(indent + 2))
        } else {
            format!(" when {c}")
        }
    }

    pub(super) fn route(&mut self, r: &RouteDef) {
        let before = r
            .priority
            .as_ref()
            .map(|p| p.span.end)
            .unwrap_or(r.name.span.end) as usize;
        let header = format!(
            "route {}{}{} {{",
            r.name.name,
            self.prio(&r.priority),
            self.when(&r.when, before, 0)
        );
        self.open(0, r.span, header);
        for it in &r.items {
            match it {
                RouteItem::Rule(x) => self.rule(x),
                RouteItem::Default(d) => {
                    if d.braced {
                        self.open(2, d.span, "default {".into());
                        self.actions(&d.body, 4);
                        self.close(2, d.span);
                    } else if let Some(Action::Split(s)) = d.body.first() {
                        self.split(s, 2, "default ");
                    } else {
                        let a = d
                            .body
                            .first()
                            .map(|a| self.action_line(a, 2))
                            .unwrap_or_default();
                        self.stmt(2, d.span, format!("default {a}"));
                    }
                }
                RouteItem::Fallback(f) => self.stmt(2, f.span, self.fallback(f)),
                RouteItem::Cache(c) => self.stmt(2, c.span, self.cache(c)),
                RouteItem::Hold(h) => self.stmt(2, h.span, hold(h)),
                RouteItem::SetPriority(s) => self.stmt(2, s.span, self.set_priority(s, 2)),
            }
        }
        self.close(0, r.span);
    }

    fn rule(&mut self, x: &RuleDef) {
        let before = x
            .priority
            .as_ref()
            .map(|p| p.span.end)
            .unwrap_or(x.name.span.end) as usize;
        let header = format!(
            "rule {}{}{} {{",
            x.name.name,
            self.prio(&x.priority),
            self.when(&x.when, before, 2)
        );
        self.open(2, x.span, header);
        self.actions(&x.body, 4);
        self.close(2, x.span);
    }

    fn actions(&mut self, body: &[Action], indent: usize) {
        for a in body {
            match a {
                Action::Split(s) => self.split(s, indent, ""),
                a => {
                    let line = self.action_line(a, indent);
                    self.stmt(indent, action_span(a), line);
                }
            }
        }
    }

    /// `split by KEY [seed N] {`, one arm per line (a canary's `rollback` on the next),
    /// `}`; `lead` goes before `split` (`default ` for a default without braces).
    fn split(&mut self, s: &SplitAction, indent: usize, lead: &str) {
        self.open(
            indent,
            s.span,
            format!("{lead}split by {}{} {{", self.key(&s.key), self.seed(s)),
        );
        for arm in &s.arms {
            let line = self.arm(arm, true, indent + 4);
            self.stmt(indent + 2, arm.span, line);
        }
        self.close(indent, s.span);
    }

    fn seed(&self, s: &SplitAction) -> String {
        s.seed
            .as_ref()
            .map(|n| format!(" seed {}", self.tok(n.span)))
            .unwrap_or_default()
    }

    /// `P% -> [canary ]use ...`, then `rollback when ...` if there is one: on a line
    /// of its own indented to `indent` when `own_line`, else after a space.
    fn arm(&self, arm: &SplitArm, own_line: bool, indent: usize) -> String {
        let canary = if arm.canary { "canary " } else { "" };
        let mut line = format!(
            "{} -> {canary}{}",
            self.tok(arm.share.span),
            self.use_action(&arm.action)
        );
        if let Some(rb) = &arm.rollback {
            if own_line {
                line.push_str(self.line_break(rb.span.start as usize));
                line.push_str(&" ".repeat(indent));
            } else {
                line.push(' ');
            }
            line.push_str(&format!("rollback when {}", self.cond(rb, indent)));
        }
        line
    }

    /// A one-line action (splits are printed by [`Printer::split`]; the one-line form
    /// here is complete all the same).
    fn action_line(&self, a: &Action, indent: usize) -> String {
        match a {
            Action::Use(u) => self.use_action(u),
            Action::Split(s) => format!(
                "split by {}{} {{ {} }}",
                self.key(&s.key),
                self.seed(s),
                join(&s.arms, " ", |arm| self.arm(arm, false, indent))
            ),
            Action::Reject(r) => format!("reject {} {}", r.status.node, self.tok(r.message.span)),
            Action::SetPriority(s) => self.set_priority(s, indent),
            Action::Cache(c) => self.cache(c),
            Action::Hold(h) => hold(h),
            Action::Fallback(f) => self.fallback(f),
            Action::Continue(_) => "continue".into(),
        }
    }

    fn use_action(&self, u: &UseAction) -> String {
        let via = match &u.via {
            Some(v) if v.args.is_empty() => format!(" via {}", v.strategy.name),
            Some(v) => format!(
                " via {}({})",
                v.strategy.name,
                join(&v.args, ", ", |a| format!(
                    "{} = {}",
                    a.name.name,
                    self.tok(a.value.span)
                ))
            ),
            None => String::new(),
        };
        format!("use {}{via}", self.target(&u.target))
    }

    fn target(&self, t: &Target) -> String {
        match &t.kind {
            TargetKind::Model(_) => self.tok(t.span),
            TargetKind::Endpoint(_) => format!(
                "endpoint {}",
                super::skip_gap(self.tok(t.span).trim_start_matches("endpoint"))
            ),
            TargetKind::RequestedModel => "model".into(),
            TargetKind::Any => "any".into(),
        }
    }

    fn key(&self, k: &SplitKey) -> String {
        match &k.kind {
            SplitKeyKind::ApiKey => "api_key".into(),
            SplitKeyKind::Org => "org".into(),
            SplitKeyKind::Random => "random".into(),
            SplitKeyKind::Header(h) => format!("header({h:?})"),
            SplitKeyKind::Metadata(m) => format!("metadata({m:?})"),
        }
    }

    fn set_priority(&self, s: &SetPriority, indent: usize) -> String {
        format!(
            "set priority {}{}",
            s.level.node.as_str(),
            self.when(&s.when, s.level.span.end as usize, indent)
        )
    }

    fn cache(&self, c: &CacheDef) -> String {
        if !c.on {
            return "cache off".into();
        }
        let mode = if c.exact { "exact" } else { "on" };
        match &c.ttl_ms {
            Some(t) => format!("cache {mode} ttl {}", self.tok(t.span)),
            None => format!("cache {mode}"),
        }
    }

    fn fallback(&self, f: &FallbackDef) -> String {
        let mut s = format!("fallback {}", join(&f.chain, " -> ", |t| self.target(t)));
        if let Some(on) = &f.on {
            let items = join(&on.items, ", ", |i| match i.node {
                StatusLit::Code(c) => c.to_string(),
                StatusLit::Class(k) => format!("{k}xx"),
            });
            s.push_str(&format!(" on {items}"));
        }
        if let Some(r) = &f.retries {
            s.push_str(&format!(" retries {}", r.node));
        }
        if let Some((lo, hi)) = &f.backoff {
            s.push_str(&format!(" backoff {}", self.tok(lo.span)));
            if let Some(hi) = hi {
                s.push_str(&format!("..{}", self.tok(hi.span)));
            }
        }
        s
    }

    pub(super) fn strategy(&mut self, s: &StrategyDef) {
        let params = join(&s.params, ", ", |p| {
            let range = p.range.as_ref().map(|r| {
                format!(
                    " in {}{}, {}{}",
                    if r.lo_inclusive { "[" } else { "(" },
                    self.tok(r.lo.span),
                    self.tok(r.hi.span),
                    if r.hi_inclusive { "]" } else { ")" }
                )
            });
            format!(
                "{} = {}{}",
                p.name.name,
                self.tok(p.default.span),
                range.unwrap_or_default()
            )
        });
        self.open(0, s.span, format!("strategy {}({params}) {{", s.name.name));
        for it in &s.items {
            match it {
                StrategyItem::State(st) => {
                    let join_mode = if st.join == JoinMode::Mean {
                        " join mean"
                    } else {
                        ""
                    };
                    self.stmt(
                        2,
                        st.span,
                        format!(
                            "state {} = {}{join_mode}",
                            st.name.name,
                            self.expr(&st.init)
                        ),
                    );
                }
                StrategyItem::Let(l) => self.stmt(
                    2,
                    l.span,
                    format!("let {} = {}", l.name.name, self.expr(&l.value)),
                ),
                StrategyItem::Require(e) => {
                    self.stmt(2, e.span, format!("require {}", self.cond(e, 2)))
                }
                StrategyItem::Prefer(e) => {
                    self.stmt(2, e.span, format!("prefer {}", self.cond(e, 2)))
                }
                StrategyItem::Score(e) => self.stmt(2, e.span, format!("score = {}", self.expr(e))),
                StrategyItem::Pick(m) => {
                    let mode = match m.node {
                        PickMode::Min => "min",
                        PickMode::Max => "max",
                        PickMode::Weighted => "weighted",
                        PickMode::Sample => "sample",
                    };
                    self.stmt(2, m.span, format!("pick {mode}"));
                }
                StrategyItem::On(o) => {
                    let ev = match o.event.node {
                        Event::Pick => "pick",
                        Event::Success => "success",
                        Event::Failure => "failure",
                    };
                    let one_line = !self.broken(o.span.start as usize, o.span.end as usize)
                        && o.assigns.len() == 1;
                    if one_line {
                        let a = &o.assigns[0];
                        self.stmt(
                            2,
                            o.span,
                            format!("on {ev} {{ {} = {} }}", a.name.name, self.expr(&a.value)),
                        );
                    } else {
                        self.open(2, o.span, format!("on {ev} {{"));
                        for a in &o.assigns {
                            self.stmt(
                                4,
                                a.span,
                                format!("{} = {}", a.name.name, self.expr(&a.value)),
                            );
                        }
                        self.close(2, o.span);
                    }
                }
            }
        }
        self.close(0, s.span);
    }

    pub(super) fn test(&mut self, t: &TestDef) {
        self.open(0, t.span, format!("test {} {{", self.tok(t.name.span)));
        for it in &t.items {
            match it {
                TestItem::Request(assigns, span) => {
                    let body = join(assigns, ", ", |a| {
                        let k = match &a.key {
                            ReqKey::Field(i) => i.name.clone(),
                            ReqKey::Header(h) => format!("header({h:?})"),
                            ReqKey::Metadata(m) => format!("metadata({m:?})"),
                        };
                        format!("{k} = {}", self.tok(a.value.span))
                    });
                    let line = if assigns.is_empty() {
                        "request {}".to_string()
                    } else {
                        format!("request {{ {body} }}")
                    };
                    self.stmt(2, *span, line);
                }
                TestItem::Stats(entries, span) => {
                    let lines: Vec<String> = entries.iter().map(|e| self.stats_entry(e)).collect();
                    if entries.len() <= 1 && !self.broken(span.start as usize, span.end as usize) {
                        let inner = lines.first().map(|e| format!(" {e} ")).unwrap_or_default();
                        self.stmt(2, *span, format!("stats {{{inner}}}"));
                    } else {
                        self.open(2, *span, "stats {".into());
                        for (e, line) in entries.iter().zip(lines) {
                            self.stmt(4, e.span, line);
                        }
                        self.close(2, *span);
                    }
                }
                TestItem::Seed(n) => self.stmt(2, n.span, format!("seed {}", self.tok(n.span))),
                TestItem::Sample { count, key, span } => self.stmt(
                    2,
                    *span,
                    format!("sample {} by {}", self.tok(count.span), self.key(key)),
                ),
                TestItem::Expect(e) => {
                    let body = match &e.kind {
                        ExpectKind::Is { what, value } => {
                            format!("{} {}", what.as_str(), self.tok(value.span))
                        }
                        ExpectKind::Reject(s) => format!("reject {}", s.node),
                        ExpectKind::Share {
                            what,
                            value,
                            share,
                            tolerance,
                        } => format!(
                            "share {} {} = {} within {}",
                            what.as_str(),
                            self.tok(value.span),
                            self.tok(share.span),
                            self.tok(tolerance.span)
                        ),
                    };
                    self.stmt(2, e.span, format!("expect {body}"));
                }
            }
        }
        self.close(0, t.span);
    }
}

impl Printer<'_> {
    fn stats_entry(&self, e: &StatsEntry) -> String {
        let fields = join(&e.fields, ", ", |(k, v)| {
            format!(
                "{} = {}",
                join(k, ".", |i| i.name.clone()),
                self.tok(v.span)
            )
        });
        if fields.is_empty() {
            format!("{} {{}}", self.tok(e.endpoint.span))
        } else {
            format!("{} {{ {fields} }}", self.tok(e.endpoint.span))
        }
    }
}

/// `hold NAME` as written (the checker rejects any name but `off_peak`; `fmt` runs on
/// unchecked files too, so it keeps the name).
fn hold(h: &HoldDef) -> String {
    format!("hold {}", h.what.name)
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
