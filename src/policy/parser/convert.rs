//! pest pairs → AST nodes. The grammar guarantees the shape of each pair, so a shape
//! mismatch here is a bug; it is still reported as a syntax error rather than a panic.

use pest::iterators::{Pair, Pairs};

use super::{literal, Conv, Res, MAX_EXPR_DEPTH, PRATT};
use crate::policy::ast::*;
use crate::policy::diagnostic::{codes, Diagnostic};
use crate::policy::grammar::Rule;

impl Conv {
    fn sp(&self, p: &Pair<'_, Rule>) -> Span {
        let s = p.as_span();
        Span::new(self.file, s.start(), s.end())
    }

    fn bug(&self, p: &Pair<'_, Rule>) -> Diagnostic {
        Diagnostic::error(
            codes::SYNTAX,
            self.sp(p),
            format!("unexpected `{}` here", p.as_str()),
        )
    }

    fn next<'i>(&self, it: &mut Pairs<'i, Rule>, parent: &Pair<'i, Rule>) -> Res<Pair<'i, Rule>> {
        it.next().ok_or_else(|| self.bug(parent))
    }

    fn ident(&self, p: Pair<'_, Rule>) -> Ident {
        Ident {
            name: p.as_str().to_string(),
            span: self.sp(&p),
        }
    }

    fn string(&self, p: Pair<'_, Rule>) -> Res<Spanned<String>> {
        let span = self.sp(&p);
        let raw = p.into_inner().next().map(|i| i.as_str()).unwrap_or("");
        Ok(Spanned {
            node: literal::string(raw, span)?,
            span,
        })
    }

    /// A string token wrapped in an atomic rule (which yields no inner pairs), such
    /// as `reject_message`: decoded from its text.
    fn atomic_string(&self, p: Pair<'_, Rule>) -> Res<Spanned<String>> {
        let span = self.sp(&p);
        let t = p.as_str();
        let raw = t
            .strip_prefix('"')
            .and_then(|t| t.strip_suffix('"'))
            .unwrap_or(t);
        Ok(Spanned {
            node: literal::string(raw, span)?,
            span,
        })
    }

    fn int(&self, p: Pair<'_, Rule>) -> Res<Spanned<i64>> {
        let span = self.sp(&p);
        Ok(Spanned {
            node: literal::int(p.as_str(), span)?,
            span,
        })
    }

    fn duration(&self, p: Pair<'_, Rule>) -> Res<Spanned<i64>> {
        let span = self.sp(&p);
        Ok(Spanned {
            node: literal::duration(p.as_str(), span)?,
            span,
        })
    }

    fn lit_kind(&self, p: Pair<'_, Rule>) -> Res<LitKind> {
        let span = self.sp(&p);
        let t = p.as_str();
        Ok(match p.as_rule() {
            Rule::int => LitKind::Int(literal::int(t, span)?),
            Rule::float => LitKind::Float(literal::float(t, span)?),
            Rule::duration => LitKind::Duration(literal::duration(t, span)?, t.to_string()),
            Rule::percent => LitKind::Percent(literal::percent(t, span)?),
            Rule::bool => LitKind::Bool(t == "true"),
            Rule::string => LitKind::Str(self.string(p)?.node),
            _ => return Err(self.bug(&p)),
        })
    }

    /// `literal = { neg? ~ number | string | bool }`
    pub(super) fn literal(&self, p: Pair<'_, Rule>) -> Res<Literal> {
        let span = self.sp(&p);
        let mut it = p.clone().into_inner();
        let first = self.next(&mut it, &p)?;
        let kind = if first.as_rule() == Rule::neg {
            let n = self.next(&mut it, &p)?;
            if n.as_rule() == Rule::int {
                let v = literal::neg_int(n.as_str(), span)?;
                return Ok(Literal {
                    kind: LitKind::Int(v),
                    span,
                });
            }
            match self.lit_kind(n)? {
                LitKind::Int(v) => LitKind::Int(-v),
                LitKind::Float(v) => LitKind::Float(-v),
                LitKind::Duration(v, t) => LitKind::Duration(-v, format!("-{t}")),
                LitKind::Percent(v) => LitKind::Percent(-v),
                other => other,
            }
        } else {
            self.lit_kind(first)?
        };
        Ok(Literal { kind, span })
    }

    // ------------------------------------------------------------ expressions

    pub(super) fn expr(&self, p: Pair<'_, Rule>) -> Res<Expr> {
        // Bound prefix chains before the (recursive) Pratt parser sees them.
        let mut run = 0u32;
        for q in p.clone().into_inner() {
            if matches!(q.as_rule(), Rule::not_op | Rule::neg_op) {
                run += 1;
                if run > MAX_EXPR_DEPTH {
                    return Err(too_deep(self.sp(&q)));
                }
            } else {
                run = 0;
            }
        }
        // A `-` right before an integer is part of the literal, as in constants and
        // priorities: `-9223372036854775808` is `i64::MIN`, while its digits alone
        // are out of range. Map each such integer's start to its sign's start.
        let mut signed: Vec<(usize, usize)> = Vec::new();
        let mut prev: Option<Pair<'_, Rule>> = None;
        for q in p.clone().into_inner() {
            if let Some(op) = prev.filter(|o| o.as_rule() == Rule::neg_op) {
                if q.as_rule() == Rule::int {
                    signed.push((q.as_span().start(), op.as_span().start()));
                }
            }
            prev = Some(q);
        }
        let file = self.file;
        PRATT
            .map_primary(|q| {
                let at = q.as_span().start();
                match signed.iter().find(|(int, _)| *int == at) {
                    Some(&(_, sign)) => {
                        let span = Span::new(file, sign, q.as_span().end());
                        let kind = ExprKind::Lit(LitKind::Int(literal::neg_int(q.as_str(), span)?));
                        Ok((Expr { kind, span }, 1u32))
                    }
                    None => self.primary(q).map(|e| (e, 1u32)),
                }
            })
            .map_prefix(move |op, rhs| {
                let (rhs, d) = rhs?;
                // The sign the integer literal already took (above).
                if op.as_rule() == Rule::neg_op && rhs.span.start as usize == op.as_span().start() {
                    return Ok((rhs, d));
                }
                let span = Span::new(file, op.as_span().start(), rhs.span.end as usize);
                let uop = if op.as_rule() == Rule::not_op {
                    UnaryOp::Not
                } else {
                    UnaryOp::Neg
                };
                depth_ok(d + 1, span)?;
                Ok((
                    Expr {
                        kind: ExprKind::Unary(uop, Box::new(rhs)),
                        span,
                    },
                    d + 1,
                ))
            })
            .map_infix(|lhs, op, rhs| {
                let (lhs, dl) = lhs?;
                let (rhs, dr) = rhs?;
                let span = lhs.span.to(rhs.span);
                let d = dl.max(dr) + 1;
                depth_ok(d, span)?;
                let bop = match op.as_rule() {
                    Rule::or_op => BinaryOp::Or,
                    Rule::and_op => BinaryOp::And,
                    Rule::eq_op => BinaryOp::Eq,
                    Rule::ne_op => BinaryOp::Ne,
                    Rule::lt_op => BinaryOp::Lt,
                    Rule::le_op => BinaryOp::Le,
                    Rule::gt_op => BinaryOp::Gt,
                    Rule::ge_op => BinaryOp::Ge,
                    Rule::in_op => BinaryOp::In,
                    Rule::not_in_op => BinaryOp::NotIn,
                    Rule::add_op => BinaryOp::Add,
                    Rule::sub_op => BinaryOp::Sub,
                    Rule::mul_op => BinaryOp::Mul,
                    Rule::div_op => BinaryOp::Div,
                    _ => BinaryOp::Rem,
                };
                Ok((
                    Expr {
                        kind: ExprKind::Binary(bop, Box::new(lhs), Box::new(rhs)),
                        span,
                    },
                    d,
                ))
            })
            .parse(p.into_inner())
            .map(|(e, _)| e)
    }

    fn primary(&self, p: Pair<'_, Rule>) -> Res<Expr> {
        let span = self.sp(&p);
        let kind = match p.as_rule() {
            Rule::paren => {
                let inner = p.clone().into_inner().next().ok_or_else(|| self.bug(&p))?;
                let mut e = self.expr(inner)?;
                e.span = span;
                return Ok(e);
            }
            Rule::call => {
                let mut it = p.clone().into_inner();
                let name = self.ident(self.next(&mut it, &p)?);
                let args = it.map(|a| self.expr(a)).collect::<Res<Vec<_>>>()?;
                ExprKind::Call(name, args)
            }
            Rule::list => ExprKind::List(
                p.into_inner()
                    .map(|a| self.expr(a))
                    .collect::<Res<Vec<_>>>()?,
            ),
            Rule::path => ExprKind::Path(p.into_inner().map(|i| self.ident(i)).collect()),
            Rule::var => {
                let inner = p.clone().into_inner().next().ok_or_else(|| self.bug(&p))?;
                ExprKind::Var(self.ident(inner))
            }
            _ => ExprKind::Lit(self.lit_kind(p)?),
        };
        Ok(Expr { kind, span })
    }

    fn when(&self, p: Pair<'_, Rule>) -> Res<Expr> {
        let inner = p.clone().into_inner().next().ok_or_else(|| self.bug(&p))?;
        self.expr(inner)
    }

    fn prio(&self, p: Pair<'_, Rule>) -> Res<Spanned<i64>> {
        let span = self.sp(&p);
        let mut sign = None;
        let mut value = 0;
        for q in p.into_inner() {
            match (q.as_rule(), sign) {
                (Rule::neg, _) => sign = Some(q.as_span().start()),
                (_, Some(at)) => {
                    let lit = Span::new(self.file, at, q.as_span().end());
                    value = literal::neg_int(q.as_str(), lit)?;
                }
                _ => value = self.int(q)?.node,
            }
        }
        Ok(Spanned { node: value, span })
    }

    // ------------------------------------------------------------ routes

    pub(super) fn route(&self, p: Pair<'_, Rule>) -> Res<RouteDef> {
        let span = self.sp(&p);
        let mut it = p.clone().into_inner();
        let name = self.ident(self.next(&mut it, &p)?);
        let mut route = RouteDef {
            name,
            priority: None,
            when: None,
            items: Vec::new(),
            span,
        };
        for q in it {
            match q.as_rule() {
                Rule::item_prio => route.priority = Some(self.prio(q)?),
                Rule::when_clause => route.when = Some(self.when(q)?),
                Rule::rule_def => route.items.push(RouteItem::Rule(self.rule(q)?)),
                Rule::default_def => {
                    let dspan = self.sp(&q);
                    let inner = q.clone().into_inner().next().ok_or_else(|| self.bug(&q))?;
                    let braced = inner.as_rule() == Rule::block;
                    let body = if braced {
                        self.block(inner)?
                    } else {
                        vec![self.action(inner)?]
                    };
                    route.items.push(RouteItem::Default(DefaultDef {
                        body,
                        braced,
                        span: dspan,
                    }))
                }
                Rule::fallback_def => route.items.push(RouteItem::Fallback(self.fallback(q)?)),
                Rule::cache_def => route.items.push(RouteItem::Cache(self.cache(q)?)),
                Rule::hold_def => route.items.push(RouteItem::Hold(self.hold(q)?)),
                Rule::set_priority => route
                    .items
                    .push(RouteItem::SetPriority(self.set_priority(q)?)),
                _ => return Err(self.bug(&q)),
            }
        }
        Ok(route)
    }

    fn rule(&self, p: Pair<'_, Rule>) -> Res<RuleDef> {
        let span = self.sp(&p);
        let mut it = p.clone().into_inner();
        let name = self.ident(self.next(&mut it, &p)?);
        let mut rule = RuleDef {
            name,
            priority: None,
            when: None,
            body: Vec::new(),
            span,
        };
        for q in it {
            match q.as_rule() {
                Rule::item_prio => rule.priority = Some(self.prio(q)?),
                Rule::when_clause => rule.when = Some(self.when(q)?),
                Rule::block => rule.body = self.block(q)?,
                _ => return Err(self.bug(&q)),
            }
        }
        Ok(rule)
    }

    fn block(&self, p: Pair<'_, Rule>) -> Res<Vec<Action>> {
        p.into_inner().map(|q| self.action(q)).collect()
    }

    fn action(&self, p: Pair<'_, Rule>) -> Res<Action> {
        Ok(match p.as_rule() {
            Rule::use_action => Action::Use(self.use_action(p)?),
            Rule::split_action => Action::Split(self.split(p)?),
            Rule::reject_action => {
                let span = self.sp(&p);
                let mut it = p.clone().into_inner();
                let status = self.int(self.next(&mut it, &p)?)?;
                let message = self.atomic_string(self.next(&mut it, &p)?)?;
                Action::Reject(RejectAction {
                    status,
                    message,
                    span,
                })
            }
            Rule::set_priority => Action::SetPriority(self.set_priority(p)?),
            Rule::cache_def => Action::Cache(self.cache(p)?),
            Rule::hold_def => Action::Hold(self.hold(p)?),
            Rule::fallback_def => Action::Fallback(self.fallback(p)?),
            Rule::continue_action => Action::Continue(self.sp(&p)),
            _ => return Err(self.bug(&p)),
        })
    }

    fn use_action(&self, p: Pair<'_, Rule>) -> Res<UseAction> {
        let span = self.sp(&p);
        let mut it = p.clone().into_inner();
        let target = self.target(self.next(&mut it, &p)?)?;
        let via = match it.next() {
            Some(v) => {
                let vspan = self.sp(&v);
                let mut vi = v.clone().into_inner();
                let strategy = self.ident(self.next(&mut vi, &v)?);
                let mut args = Vec::new();
                if let Some(a) = vi.next() {
                    for arg in a.into_inner() {
                        let aspan = self.sp(&arg);
                        let mut ai = arg.clone().into_inner();
                        let name = self.ident(self.next(&mut ai, &arg)?);
                        let value = self.literal(self.next(&mut ai, &arg)?)?;
                        args.push(Arg {
                            name,
                            value,
                            span: aspan,
                        });
                    }
                }
                Some(ViaClause {
                    strategy,
                    args,
                    span: vspan,
                })
            }
            None => None,
        };
        Ok(UseAction { target, via, span })
    }

    fn target(&self, p: Pair<'_, Rule>) -> Res<Target> {
        let span = self.sp(&p);
        let inner = p.clone().into_inner().next().ok_or_else(|| self.bug(&p))?;
        let kind = match inner.as_rule() {
            Rule::endpoint_target => {
                let s = inner
                    .clone()
                    .into_inner()
                    .next()
                    .ok_or_else(|| self.bug(&inner))?;
                TargetKind::Endpoint(self.string(s)?.node)
            }
            Rule::any_target => TargetKind::Any,
            Rule::model_target => TargetKind::RequestedModel,
            _ => TargetKind::Model(self.string(inner)?.node),
        };
        Ok(Target { kind, span })
    }

    pub(super) fn split_key(&self, p: Pair<'_, Rule>) -> Res<SplitKey> {
        let span = self.sp(&p);
        let inner = p.clone().into_inner().next().ok_or_else(|| self.bug(&p))?;
        let arg = |q: &Pair<'_, Rule>| -> Res<String> {
            let s = q.clone().into_inner().next().ok_or_else(|| self.bug(q))?;
            Ok(self.string(s)?.node)
        };
        let kind = match inner.as_rule() {
            Rule::header_key => SplitKeyKind::Header(arg(&inner)?),
            Rule::metadata_key => SplitKeyKind::Metadata(arg(&inner)?),
            Rule::api_key_key => SplitKeyKind::ApiKey,
            Rule::org_key => SplitKeyKind::Org,
            _ => SplitKeyKind::Random,
        };
        Ok(SplitKey { kind, span })
    }

    fn split(&self, p: Pair<'_, Rule>) -> Res<SplitAction> {
        let span = self.sp(&p);
        let mut it = p.clone().into_inner();
        let key = self.split_key(self.next(&mut it, &p)?)?;
        let mut split = SplitAction {
            key,
            seed: None,
            arms: Vec::new(),
            span,
        };
        for q in it {
            match q.as_rule() {
                Rule::split_seed => {
                    let s = q.clone().into_inner().next().ok_or_else(|| self.bug(&q))?;
                    let v = self.int(s)?;
                    split.seed = Some(Spanned {
                        node: v.node.unsigned_abs(),
                        span: v.span,
                    });
                }
                Rule::split_arm => {
                    let aspan = self.sp(&q);
                    let mut share = None;
                    let mut canary = false;
                    let mut action = None;
                    let mut rollback = None;
                    for r in q.clone().into_inner() {
                        match r.as_rule() {
                            Rule::percent => {
                                let rs = self.sp(&r);
                                share = Some(Spanned {
                                    node: literal::percent(r.as_str(), rs)?,
                                    span: rs,
                                })
                            }
                            Rule::canary_kw => canary = true,
                            Rule::use_action => action = Some(self.use_action(r)?),
                            Rule::rollback => {
                                let w =
                                    r.clone().into_inner().next().ok_or_else(|| self.bug(&r))?;
                                rollback = Some(self.when(w)?)
                            }
                            _ => return Err(self.bug(&r)),
                        }
                    }
                    let (Some(share), Some(action)) = (share, action) else {
                        return Err(self.bug(&q));
                    };
                    split.arms.push(SplitArm {
                        share,
                        canary,
                        action,
                        rollback,
                        span: aspan,
                    });
                }
                _ => return Err(self.bug(&q)),
            }
        }
        Ok(split)
    }

    fn set_priority(&self, p: Pair<'_, Rule>) -> Res<SetPriority> {
        let span = self.sp(&p);
        let mut it = p.clone().into_inner();
        let lp = self.next(&mut it, &p)?;
        let level = Spanned {
            node: PriorityLevel::parse(lp.as_str()).ok_or_else(|| self.bug(&lp))?,
            span: self.sp(&lp),
        };
        let when = match it.next() {
            Some(w) => Some(self.when(w)?),
            None => None,
        };
        Ok(SetPriority { level, when, span })
    }

    fn cache(&self, p: Pair<'_, Rule>) -> Res<CacheDef> {
        let span = self.sp(&p);
        let inner = p.clone().into_inner().next().ok_or_else(|| self.bug(&p))?;
        if inner.as_rule() == Rule::cache_off {
            return Ok(CacheDef {
                on: false,
                exact: false,
                ttl_ms: None,
                span,
            });
        }
        let exact = inner.as_rule() == Rule::cache_exact;
        let ttl_ms = match inner.into_inner().find(|d| d.as_rule() == Rule::duration) {
            Some(d) => Some(self.duration(d)?),
            None => None,
        };
        Ok(CacheDef {
            on: true,
            exact,
            ttl_ms,
            span,
        })
    }

    fn hold(&self, p: Pair<'_, Rule>) -> Res<HoldDef> {
        let span = self.sp(&p);
        let what = p
            .clone()
            .into_inner()
            .find(|q| q.as_rule() == Rule::hold_what)
            .ok_or_else(|| self.bug(&p))?;
        Ok(HoldDef {
            what: self.ident(what),
            span,
        })
    }

    fn fallback(&self, p: Pair<'_, Rule>) -> Res<FallbackDef> {
        let span = self.sp(&p);
        let mut fb = FallbackDef {
            chain: Vec::new(),
            on: None,
            retries: None,
            backoff: None,
            span,
        };
        for q in p.into_inner() {
            match q.as_rule() {
                Rule::target => fb.chain.push(self.target(q)?),
                Rule::fallback_on => {
                    let span = self.sp(&q);
                    let mut items = Vec::new();
                    for i in q.into_inner() {
                        let node = match i.as_rule() {
                            Rule::status_class => {
                                let d = i.as_str().as_bytes().first().copied().unwrap_or(b'0');
                                StatusLit::Class(d.wrapping_sub(b'0'))
                            }
                            Rule::int => StatusLit::Code(self.int(i.clone())?.node),
                            _ => return Err(self.bug(&i)),
                        };
                        items.push(Spanned {
                            node,
                            span: self.sp(&i),
                        });
                    }
                    fb.on = Some(FallbackOnDef { items, span });
                }
                Rule::retries => {
                    let n = q.clone().into_inner().next().ok_or_else(|| self.bug(&q))?;
                    fb.retries = Some(self.int(n)?);
                }
                Rule::backoff => {
                    let mut it = q.clone().into_inner();
                    let lo = self.duration(self.next(&mut it, &q)?)?;
                    let hi = match it.next() {
                        Some(h) => Some(self.duration(h)?),
                        None => None,
                    };
                    fb.backoff = Some((lo, hi));
                }
                _ => return Err(self.bug(&q)),
            }
        }
        Ok(fb)
    }
}

fn depth_ok(d: u32, span: Span) -> Res<()> {
    if d > MAX_EXPR_DEPTH {
        Err(too_deep(span))
    } else {
        Ok(())
    }
}

fn too_deep(span: Span) -> Diagnostic {
    Diagnostic::error(
        codes::TOO_DEEP,
        span,
        format!("this expression nests more than {MAX_EXPR_DEPTH} operators deep"),
    )
    .with_help("use `in [...]` lists or `let` bindings instead of long chains")
}

mod items;
