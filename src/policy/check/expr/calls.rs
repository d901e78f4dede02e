//! Built-in function calls: `has`, `header`, `metadata`, `scope`, string tests, math,
//! `if`, `count` and the candidate aggregates.

use crate::policy::ast::{Expr, ExprKind, Ident, LitKind};
use crate::policy::checked::*;
use crate::policy::diagnostic::{codes, Diagnostic};
use crate::suggest::did_you_mean;

use super::{facts, texpr, to_float, Checker, Ctx, Scope};

/// Every built-in function: name, signature and reference line (what it returns and
/// where it may be used), for did-you-mean and the language server's hover and
/// completion. Keep in step with `docs/policy-language.md` ("Functions").
pub const FUNCTIONS: &[(&str, &str, &str)] = &[
    ("has", "has(optional) -> Bool", "Whether an optional value is present: `request.max_tokens`, `request.temperature`, `request.api_key`, `request.org`, `header(..)`, `metadata(..)`. Reading an optional value needs this guard."),
    ("header", "header(\"name\") -> Str (optional)", "A request header's value; the name is case-insensitive. Guard it with `has()`."),
    ("metadata", "metadata(\"key\") -> Str (optional)", "A request metadata entry. Guard it with `has()`."),
    ("scope", "scope(\"name\") -> Bool", "Whether the caller's verified credential carries the OAuth2 scope `name` (exact, case-sensitive); false for API keys."),
    ("starts_with", "starts_with(s, \"prefix\") -> Bool", "Whether string `s` starts with the literal prefix."),
    ("ends_with", "ends_with(s, \"suffix\") -> Bool", "Whether string `s` ends with the literal suffix."),
    ("contains", "contains(s, \"part\") -> Bool", "Whether string `s` contains the literal text."),
    ("glob", "glob(s, \"gpt-4*\") -> Bool", "Whether `s` matches the glob: `*` any run, `?` one character, everything else literal."),
    ("matches", "matches(s, \"regex\") -> Bool", "Whether `s` matches the regular expression (regex crate syntax, compiled at load)."),
    ("min", "min(a, b) -> number", "`a` if `a <= b`, else `b` (Int if both are Int, else Float)."),
    ("max", "max(a, b) -> number", "`a` if `a >= b`, else `b` (Int if both are Int, else Float)."),
    ("abs", "abs(x) -> number", "Absolute value (Int saturates: `abs(MIN) = MAX`)."),
    ("exp", "exp(x) -> Float", "e to the power `x`."),
    ("ln", "ln(x) -> Float", "Natural logarithm."),
    ("sqrt", "sqrt(x) -> Float", "Square root."),
    ("pow", "pow(x, y) -> Float", "`x` to the power `y`."),
    ("clamp", "clamp(x, lo, hi) -> number", "`min(max(x, lo), hi)`."),
    ("float", "float(x) -> Float", "`x` as a Float."),
    ("if", "if(c, a, b) -> type of a and b", "`a` when `c` holds, else `b`; only the chosen branch runs."),
    ("count", "count() -> Int", "Strategies: the number of candidates."),
    ("sum", "sum(e) -> Float", "Strategies: the sum of `e` over the candidates (0 over none)."),
    ("mean", "mean(e) -> Float", "Strategies: the mean of `e` over the candidates (NaN over none)."),
    ("lowest", "lowest(e) -> Float", "Strategies: the smallest `e` over the candidates (+inf over none; NaN skipped)."),
    ("highest", "highest(e) -> Float", "Strategies: the largest `e` over the candidates (-inf over none; NaN skipped)."),
    ("logsumexp", "logsumexp(e) -> Float", "Strategies: ln of the sum of exp(e) over the candidates, computed without overflow."),
];

impl Checker<'_> {
    fn arity(&mut self, name: &Ident, args: &[Expr], n: usize, e: &Expr) -> bool {
        if args.len() == n {
            return true;
        }
        self.diags.push(
            Diagnostic::error(
                codes::ARITY,
                e.span,
                format!(
                    "`{}` takes {n} argument{}, but {} {} given",
                    name.name,
                    if n == 1 { "" } else { "s" },
                    args.len(),
                    if args.len() == 1 { "was" } else { "were" }
                ),
            )
            .with_span_label(format!("expected {n}")),
        );
        false
    }

    fn literal_string(&mut self, arg: &Expr, what: &str) -> Option<String> {
        match &arg.kind {
            ExprKind::Lit(LitKind::Str(s)) => Some(s.clone()),
            _ => {
                self.diags.push(Diagnostic::error(
                    codes::NOT_CONSTANT,
                    arg.span,
                    format!("{what} must be a string literal like \"x\""),
                ));
                None
            }
        }
    }

    pub(super) fn call(
        &mut self,
        name: &Ident,
        args: &[Expr],
        e: &Expr,
        scope: &mut Scope<'_>,
    ) -> Option<TExpr> {
        let n = name.name.as_str();
        match n {
            "header" | "metadata" => {
                if !self.arity(name, args, 1, e) {
                    return None;
                }
                let (f, ty) = self.optional_source(n, &args[0])?;
                self.read_req(f, ty, e, scope)
            }
            "scope" => {
                if !self.arity(name, args, 1, e) {
                    return None;
                }
                let sym = self.scope_name(&args[0])?;
                if scope.ctx == Ctx::Const {
                    return self.context_error(
                        e,
                        "a state's initial value can only use parameters and constants",
                    );
                }
                Some(texpr(TExprKind::Req(ReqField::Scope(sym)), Ty::Bool, e))
            }
            "has" => {
                if !self.arity(name, args, 1, e) {
                    return None;
                }
                let inner = &args[0];
                let field = match &inner.kind {
                    ExprKind::Call(id, a)
                        if (id.name == "header" || id.name == "metadata") && a.len() == 1 =>
                    {
                        self.optional_source(&id.name, &a[0]).map(|(f, _)| f)
                    }
                    ExprKind::Path(p) if p.len() == 2 && p[0].name == "request" => {
                        match ReqField::NAMED.iter().find(|(n, ..)| *n == p[1].name) {
                            Some((_, f, _, true, _)) => Some(*f),
                            Some(_) => {
                                self.diags.push(Diagnostic::error(
                                    codes::TYPE_MISMATCH,
                                    inner.span,
                                    format!("`request.{}` is always present; `has()` is only for optional fields", p[1].name),
                                ));
                                None
                            }
                            None => {
                                let names: Vec<&str> =
                                    ReqField::NAMED.iter().map(|(n, ..)| *n).collect();
                                self.unknown_field(inner, p, &names)
                                    .map(|_| ReqField::Model)
                            }
                        }
                    }
                    _ => {
                        self.diags.push(Diagnostic::error(
                            codes::TYPE_MISMATCH,
                            inner.span,
                            "`has()` takes an optional field: `header(\"x\")`, `metadata(\"k\")`, `request.max_tokens`, `request.temperature`, `request.api_key` or `request.org`",
                        ));
                        None
                    }
                }?;
                if scope.ctx == Ctx::Const {
                    return self.context_error(
                        e,
                        "a state's initial value can only use parameters and constants",
                    );
                }
                Some(texpr(TExprKind::Has(field), Ty::Bool, e))
            }
            "starts_with" | "ends_with" | "contains" | "glob" | "matches" => {
                if !self.arity(name, args, 2, e) {
                    return None;
                }
                let s = self.expr_of(
                    &args[0],
                    scope,
                    Ty::Str,
                    &format!("the first argument of `{n}`"),
                );
                let pat = self.literal_string(&args[1], &format!("the pattern of `{n}`"))?;
                let test = match n {
                    "starts_with" => StrTest::Prefix,
                    "ends_with" => StrTest::Suffix,
                    "contains" => StrTest::Contains,
                    "glob" => StrTest::Glob,
                    _ => StrTest::Regex(self.regex(&pat, &args[1])?),
                };
                let sym = self.strings.intern(&pat);
                Some(texpr(
                    TExprKind::Match(test, Box::new(s?), sym),
                    Ty::Bool,
                    e,
                ))
            }
            "min" | "max" | "pow" => {
                if !self.arity(name, args, 2, e) {
                    return None;
                }
                let a = self.expr(&args[0], scope);
                let b = self.expr(&args[1], scope);
                let (mut a, mut b) = self.unify(a?, b?, e)?;
                if !matches!(a.ty, Ty::Int | Ty::Float) {
                    return self.mismatch(
                        e,
                        format!("`{n}` needs numbers, but these are {}", a.ty.plural()),
                    );
                }
                if n == "pow" {
                    a = to_float(a);
                    b = to_float(b);
                }
                let f = match n {
                    "min" => MathFn::Min,
                    "max" => MathFn::Max,
                    _ => MathFn::Pow,
                };
                let ty = a.ty;
                Some(texpr(TExprKind::Math(f, vec![a, b]), ty, e))
            }
            "clamp" => {
                if !self.arity(name, args, 3, e) {
                    return None;
                }
                let parts: Vec<Option<TExpr>> = args.iter().map(|a| self.expr(a, scope)).collect();
                let parts: Vec<TExpr> = parts.into_iter().collect::<Option<_>>()?;
                let float = parts.iter().any(|p| p.ty == Ty::Float);
                let mut out = Vec::new();
                for p in parts {
                    match p.ty {
                        Ty::Int if float => out.push(to_float(p)),
                        Ty::Int | Ty::Float => out.push(p),
                        other => {
                            return self.mismatch(
                                e,
                                format!("`clamp` needs numbers, but got {}", other.name()),
                            )
                        }
                    }
                }
                let ty = if float { Ty::Float } else { Ty::Int };
                Some(texpr(TExprKind::Math(MathFn::Clamp, out), ty, e))
            }
            "abs" => {
                if !self.arity(name, args, 1, e) {
                    return None;
                }
                let a = self.expr(&args[0], scope)?;
                if !matches!(a.ty, Ty::Int | Ty::Float) {
                    return self
                        .mismatch(e, format!("`abs` needs a number, but got {}", a.ty.name()));
                }
                let ty = a.ty;
                Some(texpr(TExprKind::Math(MathFn::Abs, vec![a]), ty, e))
            }
            "exp" | "ln" | "sqrt" | "float" => {
                if !self.arity(name, args, 1, e) {
                    return None;
                }
                let a = self.expr_of(
                    &args[0],
                    scope,
                    Ty::Float,
                    &format!("the argument of `{n}`"),
                )?;
                let f = match n {
                    "exp" => MathFn::Exp,
                    "ln" => MathFn::Ln,
                    "sqrt" => MathFn::Sqrt,
                    _ => return Some(TExpr { span: e.span, ..a }),
                };
                Some(texpr(TExprKind::Math(f, vec![a]), Ty::Float, e))
            }
            "if" => {
                if !self.arity(name, args, 3, e) {
                    return None;
                }
                let c = self.expr_of(&args[0], scope, Ty::Bool, "the condition of `if`");
                let saved = scope.known.len();
                if let Some(c) = &c {
                    facts(c, true, &mut scope.known);
                }
                let a = self.expr(&args[1], scope);
                scope.known.truncate(saved);
                if let Some(c) = &c {
                    facts(c, false, &mut scope.known);
                }
                let b = self.expr(&args[2], scope);
                scope.known.truncate(saved);
                let (a, b) = self.unify(a?, b?, e)?;
                let ty = a.ty;
                Some(texpr(
                    TExprKind::If(Box::new(c?), Box::new(a), Box::new(b)),
                    ty,
                    e,
                ))
            }
            "count" | "sum" | "mean" | "lowest" | "highest" | "logsumexp" => {
                self.aggregate(name, args, e, scope)
            }
            _ => {
                self.diags.push(
                    Diagnostic::error(
                        codes::UNKNOWN_FUNCTION,
                        name.span,
                        format!("`{n}` is not a known function"),
                    )
                    .with_did_you_mean(did_you_mean(n, FUNCTIONS.iter().map(|f| f.0))),
                );
                None
            }
        }
    }

    fn aggregate(
        &mut self,
        name: &Ident,
        args: &[Expr],
        e: &Expr,
        scope: &mut Scope<'_>,
    ) -> Option<TExpr> {
        let n = name.name.as_str();
        if !matches!(scope.ctx, Ctx::Score | Ctx::OnPick | Ctx::OnOutcome) || scope.strat.is_none()
        {
            return self.context_error(
                e,
                &format!("`{n}()` aggregates over a strategy's candidates; it is allowed only in `let`, `score` and `on` blocks"),
            );
        }
        if scope.in_agg {
            return self.context_error(e, "aggregates cannot be nested");
        }
        scope.saw_agg = true;
        if n == "count" {
            if !self.arity(name, args, 0, e) {
                return None;
            }
            return Some(texpr(TExprKind::Count, Ty::Int, e));
        }
        if !self.arity(name, args, 1, e) {
            return None;
        }
        scope.in_agg = true;
        let a = self.expr_of(
            &args[0],
            scope,
            Ty::Float,
            &format!("the argument of `{n}`"),
        );
        scope.in_agg = false;
        let a = a?;
        let f = match n {
            "sum" => AggFn::Sum,
            "mean" => AggFn::Mean,
            "lowest" => AggFn::Lowest,
            "logsumexp" => AggFn::LogSumExp,
            _ => AggFn::Highest,
        };
        let strat = scope.strat.as_deref_mut()?;
        let idx = strat.aggregates;
        strat.aggregates += 1;
        Some(texpr(TExprKind::Agg(f, idx, Box::new(a)), Ty::Float, e))
    }

    fn optional_source(&mut self, n: &str, arg: &Expr) -> Option<(ReqField, Ty)> {
        let key = self.literal_string(arg, &format!("the argument of `{n}`"))?;
        if n == "header" {
            let sym = self.strings.intern(&key.to_ascii_lowercase());
            Some((ReqField::Header(sym), Ty::Str))
        } else {
            let sym = self.strings.intern(&key);
            Some((ReqField::Metadata(sym), Ty::Str))
        }
    }

    /// The interned scope name of `scope("name")`: a non-empty string literal without
    /// whitespace (an OAuth2 scope token; a token's `scope` claim separates them by
    /// spaces, so a name with a space could never match).
    fn scope_name(&mut self, arg: &Expr) -> Option<Sym> {
        let name = self.literal_string(arg, "the argument of `scope`")?;
        let problem = if name.is_empty() {
            Some("the scope name is empty")
        } else if name.chars().any(char::is_whitespace) {
            Some("a scope name cannot contain spaces")
        } else {
            None
        };
        if let Some(msg) = problem {
            self.diags.push(
                Diagnostic::error(codes::BAD_LITERAL, arg.span, msg).with_help(
                    "name one scope of the caller's token, like `scope(\"chat:write\")`",
                ),
            );
            return None;
        }
        Some(self.strings.intern(&name))
    }

    fn regex(&mut self, pat: &str, arg: &Expr) -> Option<u32> {
        if let Some(&i) = self.regex_index.get(pat) {
            return Some(i);
        }
        match regex::RegexBuilder::new(pat).size_limit(1 << 20).build() {
            Ok(re) => {
                let i = self.regexes.len() as u32;
                self.regexes.push(re);
                self.regex_index.insert(pat.to_string(), i);
                Some(i)
            }
            Err(err) => {
                let detail = err.to_string();
                let last = detail.lines().last().unwrap_or("").trim().to_string();
                self.diags.push(
                    Diagnostic::error(
                        codes::BAD_REGEX,
                        arg.span,
                        "this regular expression is invalid",
                    )
                    .with_help(last),
                );
                None
            }
        }
    }
}
