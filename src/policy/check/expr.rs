//! Expression typing: AST [`Expr`] → [`TExpr`], with `has()` guard tracking.

use crate::policy::ast::{BinaryOp, Expr, ExprKind, Ident, LitKind, PriorityLevel, UnaryOp};
use crate::policy::checked::*;
use crate::policy::diagnostic::{codes, Diagnostic};
use crate::policy::features::Circuit;
use crate::suggest::did_you_mean;

use super::Checker;

/// Largest accepted expression, in nodes.
pub const MAX_EXPR_NODES: usize = 2_000;

/// What an expression may refer to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ctx {
    /// Route and rule conditions, `set priority ... when`: request fields only.
    Request,
    /// Canary rollback guards: request and endpoint fields.
    Endpoint,
    /// Strategy state initial values: parameters and constants only.
    Const,
    /// Strategy `require`/`prefer`: no aggregates.
    Filter,
    /// Strategy lets and score.
    Score,
    /// `on pick` blocks.
    OnPick,
    /// `on success` / `on failure` blocks: also `outcome.*`.
    OnOutcome,
}

/// The names a strategy body can see.
#[derive(Debug, Default)]
pub struct StratScope {
    /// Parameters and their types.
    pub params: Vec<(String, Ty)>,
    /// State slot names.
    pub states: Vec<String>,
    /// Lets defined so far: name, type, whether it contains an aggregate.
    pub lets: Vec<(String, Ty, bool)>,
    /// Aggregates numbered so far.
    pub aggregates: u32,
    /// Lets whose definition failed to check (already reported): their uses are
    /// not reported again as undefined.
    pub broken_lets: Vec<String>,
}

/// Everything expression checking needs besides the checker.
pub struct Scope<'a> {
    /// Which names are visible.
    pub ctx: Ctx,
    /// The strategy's names, in strategy contexts.
    pub strat: Option<&'a mut StratScope>,
    /// Optional request fields known to be present here.
    pub known: Vec<ReqField>,
    /// Whether we are inside an aggregate's argument.
    pub in_agg: bool,
    /// Whether the expression (so far) contains an aggregate.
    pub saw_agg: bool,
}

impl<'a> Scope<'a> {
    /// A scope for `ctx` without strategy names.
    pub fn new(ctx: Ctx) -> Scope<'a> {
        Scope {
            ctx,
            strat: None,
            known: Vec::new(),
            in_agg: false,
            saw_agg: false,
        }
    }
}

fn texpr(kind: TExprKind, ty: Ty, e: &Expr) -> TExpr {
    TExpr {
        kind,
        ty,
        span: e.span,
    }
}

fn is_optional(f: ReqField) -> bool {
    matches!(
        f,
        ReqField::MaxTokens
            | ReqField::Temperature
            | ReqField::ApiKey
            | ReqField::Org
            | ReqField::Header(_)
            | ReqField::Metadata(_)
    )
}

/// Optional fields proven present when `e` evaluates to `positive`.
fn facts(e: &TExpr, positive: bool, out: &mut Vec<ReqField>) {
    match (&e.kind, positive) {
        (TExprKind::Has(f), true) => out.push(*f),
        (TExprKind::Not(x), p) => facts(x, !p, out),
        (TExprKind::And(a, b), true) | (TExprKind::Or(a, b), false) => {
            facts(a, positive, out);
            facts(b, positive, out);
        }
        _ => {}
    }
}

impl Checker<'_> {
    /// Types `e` in `scope`, or reports why it cannot and returns `None`.
    pub fn expr(&mut self, e: &Expr, scope: &mut Scope<'_>) -> Option<TExpr> {
        let before = self.nodes;
        let out = self.expr_inner(e, scope);
        if self.nodes - before > MAX_EXPR_NODES {
            self.diags.push(
                Diagnostic::error(
                    codes::TOO_COMPLEX,
                    e.span,
                    format!("this expression has more than {MAX_EXPR_NODES} parts"),
                )
                .with_help("split it into several rules or `let` bindings"),
            );
            return None;
        }
        out
    }

    /// Types `e` and requires type `want` (Int is promoted to Float when `want` is Float).
    pub fn expr_of(
        &mut self,
        e: &Expr,
        scope: &mut Scope<'_>,
        want: Ty,
        what: &str,
    ) -> Option<TExpr> {
        let t = self.expr(e, scope)?;
        self.coerce(t, want, what)
    }

    fn coerce(&mut self, t: TExpr, want: Ty, what: &str) -> Option<TExpr> {
        if t.ty == want {
            return Some(t);
        }
        if t.ty == Ty::Int && want == Ty::Float {
            return Some(to_float(t));
        }
        self.diags.push(
            Diagnostic::error(
                codes::TYPE_MISMATCH,
                t.span,
                format!(
                    "{what} must be {}, but this is {}",
                    want.name(),
                    t.ty.name()
                ),
            )
            .with_span_label(t.ty.name()),
        );
        None
    }

    fn mismatch(&mut self, e: &Expr, msg: String) -> Option<TExpr> {
        self.diags
            .push(Diagnostic::error(codes::TYPE_MISMATCH, e.span, msg));
        None
    }

    fn expr_inner(&mut self, e: &Expr, scope: &mut Scope<'_>) -> Option<TExpr> {
        self.nodes += 1;
        match &e.kind {
            ExprKind::Lit(l) => Some(self.lit(l, e)),
            ExprKind::List(_) => self.mismatch(
                e,
                "a list can only appear after `in` or `not in`".to_string(),
            ),
            ExprKind::Path(parts) => self.path(parts, e, scope),
            ExprKind::Var(id) => self.var(id, e, scope),
            ExprKind::Call(name, args) => self.call(name, args, e, scope),
            ExprKind::Unary(UnaryOp::Not, x) => {
                let x = self.expr_of(x, scope, Ty::Bool, "the operand of `not`")?;
                Some(texpr(TExprKind::Not(Box::new(x)), Ty::Bool, e))
            }
            ExprKind::Unary(UnaryOp::Neg, x) => {
                let x = self.expr(x, scope)?;
                if !matches!(x.ty, Ty::Int | Ty::Float) {
                    return self.mismatch(
                        e,
                        format!("`-` needs a number, but this is {}", x.ty.name()),
                    );
                }
                let ty = x.ty;
                Some(texpr(TExprKind::Neg(Box::new(x)), ty, e))
            }
            ExprKind::Binary(op, a, b) => self.binary(*op, a, b, e, scope),
        }
    }

    fn lit(&mut self, l: &LitKind, e: &Expr) -> TExpr {
        let (c, ty) = match l {
            LitKind::Int(v) | LitKind::Duration(v, _) => (Const::Int(*v), Ty::Int),
            LitKind::Float(v) => (Const::Float(*v), Ty::Float),
            LitKind::Percent(bp) => (Const::Float(*bp as f64 / 10_000.0), Ty::Float),
            LitKind::Bool(b) => (Const::Bool(*b), Ty::Bool),
            LitKind::Str(s) => (Const::Str(self.strings.intern(s)), Ty::Str),
        };
        texpr(TExprKind::Const(c), ty, e)
    }

    fn read_req(&mut self, f: ReqField, ty: Ty, e: &Expr, scope: &Scope<'_>) -> Option<TExpr> {
        if is_optional(f) && !scope.known.contains(&f) {
            let shown = self.sources_slice(e);
            self.diags.push(
                Diagnostic::error(
                    codes::UNGUARDED_OPTIONAL,
                    e.span,
                    format!("`{shown}` may be absent, and it is read here without checking"),
                )
                .with_span_label("may be absent")
                .with_help(format!("guard it: `has({shown}) and ...`")),
            );
            return None;
        }
        Some(texpr(TExprKind::Req(f), ty, e))
    }

    fn path(&mut self, parts: &[Ident], e: &Expr, scope: &mut Scope<'_>) -> Option<TExpr> {
        let root = parts[0].name.as_str();
        let field = parts.get(1);
        let Some(field) = field.filter(|_| parts.len() == 2) else {
            return self.unknown_field(e, parts, &[]);
        };
        let name = field.name.as_str();
        match root {
            "request" => {
                if scope.ctx == Ctx::Const {
                    return self.context_error(
                        e,
                        "a state's initial value can only use parameters and constants",
                    );
                }
                match ReqField::NAMED.iter().find(|(n, ..)| *n == name) {
                    Some((_, f, ty, ..)) => self.read_req(*f, *ty, e, scope),
                    None => {
                        let names: Vec<&str> = ReqField::NAMED.iter().map(|(n, ..)| *n).collect();
                        self.unknown_field(e, parts, &names)
                    }
                }
            }
            "endpoint" => {
                if matches!(scope.ctx, Ctx::Request | Ctx::Const) {
                    return self.context_error(
                        e,
                        "`endpoint.*` fields exist only in strategies and canary `rollback` guards",
                    );
                }
                match EpField::NAMED.iter().find(|(n, ..)| *n == name) {
                    Some((_, f, ty, _)) => Some(texpr(TExprKind::Ep(*f), *ty, e)),
                    None => {
                        let names: Vec<&str> = EpField::NAMED.iter().map(|(n, ..)| *n).collect();
                        self.unknown_field(e, parts, &names)
                    }
                }
            }
            "state" => {
                let Some(strat) = scope.strat.as_deref().filter(|_| scope.ctx != Ctx::Const) else {
                    return self.context_error(
                        e,
                        "`state.*` exists only in strategy scores, filters and updates",
                    );
                };
                match strat.states.iter().position(|s| s == name) {
                    Some(i) => Some(texpr(TExprKind::State(i as u32), Ty::Float, e)),
                    None => {
                        let names: Vec<String> = strat.states.clone();
                        let names: Vec<&str> = names.iter().map(String::as_str).collect();
                        self.unknown_field(e, parts, &names)
                    }
                }
            }
            "outcome" => {
                if scope.ctx != Ctx::OnOutcome {
                    return self.context_error(
                        e,
                        "`outcome.*` exists only in `on success` and `on failure` blocks",
                    );
                }
                match OutcomeField::NAMED.iter().find(|(n, ..)| *n == name) {
                    Some((_, f, ty, _)) => Some(texpr(TExprKind::Outcome(*f), *ty, e)),
                    None => {
                        let names: Vec<&str> =
                            OutcomeField::NAMED.iter().map(|(n, ..)| *n).collect();
                        self.unknown_field(e, parts, &names)
                    }
                }
            }
            _ => {
                let d = Diagnostic::error(
                    codes::UNKNOWN_FIELD,
                    parts[0].span,
                    format!("`{root}` is not a known record"),
                )
                .with_help("fields start with `request.`, `endpoint.`, `state.` or `outcome.`");
                self.diags.push(d);
                None
            }
        }
    }

    fn unknown_field(&mut self, e: &Expr, parts: &[Ident], names: &[&str]) -> Option<TExpr> {
        let last = parts.last().map(|i| i.span).unwrap_or(e.span);
        let shown: Vec<&str> = parts.iter().map(|i| i.name.as_str()).collect();
        let word = parts.get(1).map(|i| i.name.as_str()).unwrap_or("");
        let d = Diagnostic::error(
            codes::UNKNOWN_FIELD,
            last,
            format!("`{}` is not a known field", shown.join(".")),
        )
        .with_did_you_mean(did_you_mean(word, names.iter().copied()));
        self.diags.push(d);
        None
    }

    fn context_error(&mut self, e: &Expr, msg: &str) -> Option<TExpr> {
        self.diags.push(Diagnostic::error(
            codes::WRONG_CONTEXT,
            e.span,
            msg.to_string(),
        ));
        None
    }

    fn var(&mut self, id: &Ident, e: &Expr, scope: &mut Scope<'_>) -> Option<TExpr> {
        let name = id.name.as_str();
        if matches!(scope.ctx, Ctx::OnPick | Ctx::OnOutcome) {
            match name {
                "score" => return Some(texpr(TExprKind::Score, Ty::Float, e)),
                "probability" => return Some(texpr(TExprKind::Probability, Ty::Float, e)),
                _ => {}
            }
        }
        if let Some(strat) = scope.strat.as_deref() {
            if let Some(i) = strat.params.iter().position(|(n, _)| n == name) {
                return Some(texpr(TExprKind::Param(i as u32), strat.params[i].1, e));
            }
            if scope.ctx != Ctx::Const {
                if let Some(i) = strat.lets.iter().position(|(n, ..)| n == name) {
                    let (_, ty, has_agg) = strat.lets[i];
                    if has_agg {
                        scope.saw_agg = true;
                        if scope.in_agg {
                            return self.context_error(
                                e,
                                "an aggregate cannot use a `let` that itself contains an aggregate",
                            );
                        }
                    }
                    return Some(texpr(TExprKind::Let(i as u32), ty, e));
                }
                if strat.broken_lets.iter().any(|n| n == name) {
                    return None;
                }
            }
            if strat.states.iter().any(|s| s == name) {
                let d = Diagnostic::error(
                    codes::UNKNOWN_VARIABLE,
                    id.span,
                    format!("`{name}` is a state slot; read it as `state.{name}`"),
                );
                self.diags.push(d);
                return None;
            }
            let mut names: Vec<String> = strat.params.iter().map(|(n, _)| n.clone()).collect();
            names.extend(strat.lets.iter().map(|(n, ..)| n.clone()));
            let d = Diagnostic::error(
                codes::UNKNOWN_VARIABLE,
                id.span,
                format!("`{name}` is not defined"),
            )
            .with_did_you_mean(did_you_mean(name, names.iter().map(String::as_str)));
            self.diags.push(d);
            return None;
        }
        let guess = ReqField::NAMED
            .iter()
            .find(|(n, ..)| *n == name)
            .map(|_| format!("request.{name}"));
        let mut d = Diagnostic::error(
            codes::UNKNOWN_VARIABLE,
            id.span,
            format!("`{name}` is not defined"),
        );
        d = match guess {
            Some(g) => d.with_did_you_mean(Some(&g)),
            None => {
                d.with_help("request fields are written `request.NAME`, headers `header(\"name\")`")
            }
        };
        self.diags.push(d);
        None
    }

    fn binary(
        &mut self,
        op: BinaryOp,
        a: &Expr,
        b: &Expr,
        e: &Expr,
        scope: &mut Scope<'_>,
    ) -> Option<TExpr> {
        match op {
            BinaryOp::And | BinaryOp::Or => {
                let l = self.expr_of(
                    a,
                    scope,
                    Ty::Bool,
                    &format!("the left side of `{}`", op.as_str()),
                );
                let saved = scope.known.len();
                if let Some(l) = &l {
                    facts(l, op == BinaryOp::And, &mut scope.known);
                }
                let r = self.expr_of(
                    b,
                    scope,
                    Ty::Bool,
                    &format!("the right side of `{}`", op.as_str()),
                );
                scope.known.truncate(saved);
                let (l, r) = (Box::new(l?), Box::new(r?));
                let kind = if op == BinaryOp::And {
                    TExprKind::And(l, r)
                } else {
                    TExprKind::Or(l, r)
                };
                Some(texpr(kind, Ty::Bool, e))
            }
            BinaryOp::In | BinaryOp::NotIn => self.in_list(op == BinaryOp::NotIn, a, b, e, scope),
            BinaryOp::Eq
            | BinaryOp::Ne
            | BinaryOp::Lt
            | BinaryOp::Le
            | BinaryOp::Gt
            | BinaryOp::Ge => {
                let l = self.expr(a, scope);
                let r = self.expr(b, scope);
                let (l, r) = (l?, r?);
                let (l, r) = self.unify(l, r, e)?;
                let cmp = match op {
                    BinaryOp::Eq => CmpOp::Eq,
                    BinaryOp::Ne => CmpOp::Ne,
                    BinaryOp::Lt => CmpOp::Lt,
                    BinaryOp::Le => CmpOp::Le,
                    BinaryOp::Gt => CmpOp::Gt,
                    _ => CmpOp::Ge,
                };
                if !matches!(cmp, CmpOp::Eq | CmpOp::Ne) && matches!(l.ty, Ty::Str | Ty::Bool) {
                    return self.mismatch(
                        e,
                        format!(
                            "`{}` cannot order {}; use `==` or `!=`",
                            op.as_str(),
                            l.ty.plural()
                        ),
                    );
                }
                Some(texpr(
                    TExprKind::Cmp(cmp, Box::new(l), Box::new(r)),
                    Ty::Bool,
                    e,
                ))
            }
            _ => {
                let l = self.expr(a, scope);
                let r = self.expr(b, scope);
                let (l, r) = self.unify(l?, r?, e)?;
                if !matches!(l.ty, Ty::Int | Ty::Float) {
                    return self.mismatch(
                        e,
                        format!(
                            "`{}` needs numbers, but these are {}",
                            op.as_str(),
                            l.ty.plural()
                        ),
                    );
                }
                let ar = match op {
                    BinaryOp::Add => ArithOp::Add,
                    BinaryOp::Sub => ArithOp::Sub,
                    BinaryOp::Mul => ArithOp::Mul,
                    BinaryOp::Div => ArithOp::Div,
                    _ => ArithOp::Rem,
                };
                let ty = l.ty;
                Some(texpr(TExprKind::Arith(ar, Box::new(l), Box::new(r)), ty, e))
            }
        }
    }

    /// Brings two operands to one type: Int+Float → Float; Priority vs string literal →
    /// Priority constant.
    pub(super) fn unify(&mut self, l: TExpr, r: TExpr, e: &Expr) -> Option<(TExpr, TExpr)> {
        if !(self.circuit_word_ok(&l, &r) && self.circuit_word_ok(&r, &l)) {
            return None;
        }
        match (l.ty, r.ty) {
            (a, b) if a == b => Some((l, r)),
            (Ty::Int, Ty::Float) => Some((to_float(l), r)),
            (Ty::Float, Ty::Int) => Some((l, to_float(r))),
            (Ty::Priority, Ty::Str) => {
                let r = self.priority_const(r)?;
                Some((l, r))
            }
            (Ty::Str, Ty::Priority) => {
                let l = self.priority_const(l)?;
                Some((l, r))
            }
            (a, b) => {
                self.mismatch(
                    e,
                    format!("cannot compare or combine {} with {}", a.name(), b.name()),
                );
                None
            }
        }
    }

    /// Whether `lit`, compared with `field`, is fine: a string literal compared with
    /// `endpoint.circuit` must name a state (a typo would silently never match).
    fn circuit_word_ok(&mut self, field: &TExpr, lit: &TExpr) -> bool {
        let (TExprKind::Ep(EpField::Circuit), TExprKind::Const(Const::Str(s))) =
            (&field.kind, &lit.kind)
        else {
            return true;
        };
        let text = self.strings.resolve(*s).to_string();
        if Circuit::parse(&text).is_some() {
            return true;
        }
        let mut d = Diagnostic::error(
            codes::TYPE_MISMATCH,
            lit.span,
            format!("\"{text}\" is not a circuit state"),
        )
        .with_did_you_mean(did_you_mean(&text, Circuit::ALL.iter().map(|c| c.as_str())));
        if d.help.is_none() {
            d = d.with_help("the states are \"closed\", \"half_open\" and \"open\"");
        }
        self.diags.push(d);
        false
    }

    fn priority_const(&mut self, t: TExpr) -> Option<TExpr> {
        let TExprKind::Const(Const::Str(s)) = t.kind else {
            self.diags.push(Diagnostic::error(
                codes::TYPE_MISMATCH,
                t.span,
                "a priority can only be compared with a literal level like \"high\"",
            ));
            return None;
        };
        let text = self.strings.resolve(s).to_string();
        match PriorityLevel::parse(&text) {
            Some(l) => Some(TExpr {
                kind: TExprKind::Const(Const::Priority(l)),
                ty: Ty::Priority,
                span: t.span,
            }),
            None => {
                let mut d = Diagnostic::error(
                    codes::TYPE_MISMATCH,
                    t.span,
                    format!("\"{text}\" is not a priority level"),
                )
                .with_did_you_mean(did_you_mean(
                    &text,
                    PriorityLevel::ALL.iter().map(|(n, _)| *n),
                ));
                if d.help.is_none() {
                    d = d
                        .with_help("the levels are \"critical\", \"high\", \"normal\" and \"low\"");
                }
                self.diags.push(d);
                None
            }
        }
    }

    fn in_list(
        &mut self,
        negated: bool,
        a: &Expr,
        b: &Expr,
        e: &Expr,
        scope: &mut Scope<'_>,
    ) -> Option<TExpr> {
        let l = self.expr(a, scope)?;
        let ExprKind::List(items) = &b.kind else {
            return self.mismatch(
                b,
                "`in` needs a list like `[\"a\", \"b\"]` on its right".to_string(),
            );
        };
        let mut consts = Vec::new();
        let mut ok = true;
        for item in items {
            self.nodes += 1;
            let c = match &item.kind {
                ExprKind::Lit(lit) => Some(self.lit(lit, item)),
                ExprKind::Unary(UnaryOp::Neg, x) => match &x.kind {
                    ExprKind::Lit(LitKind::Int(v)) => Some(texpr(
                        TExprKind::Const(Const::Int(v.saturating_neg())),
                        Ty::Int,
                        item,
                    )),
                    ExprKind::Lit(LitKind::Float(v)) => {
                        Some(texpr(TExprKind::Const(Const::Float(-v)), Ty::Float, item))
                    }
                    _ => None,
                },
                _ => None,
            };
            let Some(c) = c else {
                self.diags.push(Diagnostic::error(
                    codes::NOT_CONSTANT,
                    item.span,
                    "list items must be literals",
                ));
                ok = false;
                continue;
            };
            if !self.circuit_word_ok(&l, &c) {
                ok = false;
                continue;
            }
            let c = match (l.ty, c.ty) {
                (Ty::Priority, Ty::Str) => self.priority_const(c),
                (Ty::Float, Ty::Int) => Some(to_float_const(c)),
                (x, y) if x == y => Some(c),
                (x, y) => {
                    self.diags.push(Diagnostic::error(
                        codes::TYPE_MISMATCH,
                        item.span,
                        format!(
                            "this list item is {}, but the value tested is {}",
                            y.name(),
                            x.name()
                        ),
                    ));
                    None
                }
            };
            match c.map(|c| c.kind) {
                Some(TExprKind::Const(k)) => consts.push(k),
                _ => ok = false,
            }
        }
        if l.ty == Ty::Int
            && items
                .iter()
                .any(|i| matches!(i.kind, ExprKind::Lit(LitKind::Float(_))))
        {
            return self.mismatch(
                b,
                "this list has floats, but the value tested is an integer".to_string(),
            );
        }
        ok.then(|| texpr(TExprKind::In(Box::new(l), consts, negated), Ty::Bool, e))
    }

    fn sources_slice(&self, e: &Expr) -> String {
        self.sources.slice(e.span).to_string()
    }
}

/// Wraps an Int expression in an explicit promotion (constants are folded).
pub fn to_float(t: TExpr) -> TExpr {
    if let TExprKind::Const(Const::Int(v)) = t.kind {
        return TExpr {
            kind: TExprKind::Const(Const::Float(v as f64)),
            ty: Ty::Float,
            span: t.span,
        };
    }
    let span = t.span;
    TExpr {
        kind: TExprKind::ToFloat(Box::new(t)),
        ty: Ty::Float,
        span,
    }
}

fn to_float_const(t: TExpr) -> TExpr {
    to_float(t)
}

mod calls;
pub use calls::FUNCTIONS;
