//! Expression evaluation: the numeric semantics the JIT must reproduce.
//!
//! - Int `+ - *` saturate at i64 bounds; `-x` saturates (`-MIN = MAX`).
//! - Int `/` truncates toward zero; `x / 0 = 0`; `MIN / -1 = MAX` (saturating).
//! - Int `%` has the sign of the dividend; `x % 0 = 0`; `MIN % -1 = 0`.
//! - Float is IEEE 754 binary64: `x / 0.0` is ±inf or NaN; comparisons with NaN are
//!   false except `!=`, which is true.
//! - Mixed Int/Float operands: the Int is converted to the nearest f64 first.
//! - `min(a, b)` = `a` if `a <= b` else `b`; `max(a, b)` = `a` if `a >= b` else `b`
//!   (so a NaN in `a` yields `b`); `clamp(x, lo, hi)` = `min(max(x, lo), hi)`.
//! - `exp`, `ln`, `sqrt`, `pow` are Rust's `f64::exp`, `ln`, `sqrt`, `powf`.
//! - An absent optional field (only readable under a `has()` guard, so only through
//!   constructs like `if`) reads as 0, 0.0 or "".

use crate::policy::ast::PriorityLevel;
use crate::policy::checked::*;
use crate::policy::features::{EpStats, Outcome, RequestFeatures};
use crate::policy::registry::{EndpointRef, RegistryEndpoint};

use super::Leaf;

/// A runtime value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum V<'a> {
    /// Boolean.
    B(bool),
    /// Integer.
    I(i64),
    /// Float.
    F(f64),
    /// String.
    S(&'a str),
    /// Priority.
    P(PriorityLevel),
}

impl V<'_> {
    fn b(self) -> bool {
        matches!(self, V::B(true))
    }
    fn f(self) -> f64 {
        match self {
            V::F(v) => v,
            V::I(v) => v as f64,
            _ => 0.0,
        }
    }
    /// The value as shown in traces.
    pub fn show(self) -> String {
        match self {
            V::B(b) => b.to_string(),
            V::I(i) => i.to_string(),
            V::F(f) => format!("{f}"),
            V::S(s) => format!("{s:?}"),
            V::P(p) => format!("\"{}\"", p.as_str()),
        }
    }
}

/// One endpoint as a strategy or guard sees it.
#[derive(Debug, Clone)]
pub struct EpCtx<'a> {
    /// Registry entry.
    pub reg: EndpointRef<'a>,
    /// Statistics for the request's task (defaults when the source lacks the
    /// endpoint).
    pub stats: EpStats,
    /// Strategy state slot values (initialized), by slot index.
    pub state: StateSlots,
    /// Score (in `on` blocks).
    pub score: f64,
    /// Pick probability (in `on` blocks).
    pub probability: f64,
}

/// Strategy state slot values of one endpoint, on the stack up to four slots.
pub type StateSlots = smallvec::SmallVec<[f64; 4]>;

/// The strategy in scope.
pub struct StratCtx<'a> {
    /// The strategy.
    pub strategy: &'a CStrategy,
    /// Its argument values.
    pub args: &'a [Const],
    /// The candidates aggregates range over.
    pub cands: &'a [EpCtx<'a>],
    /// Aggregate cache, by aggregate index.
    pub aggs: Vec<Option<f64>>,
}

/// Evaluates typed expressions against one request (and optionally one endpoint).
pub struct Evaluator<'a, 's> {
    /// The set (strings, regexes).
    pub set: &'a CheckedPolicySet,
    /// The request.
    pub req: &'a RequestFeatures,
    /// The request priority as updated by `set priority` so far.
    pub priority: PriorityLevel,
    /// Endpoint in scope.
    pub ep: Option<&'s EpCtx<'a>>,
    /// Strategy in scope.
    pub strat: Option<&'s mut StratCtx<'a>>,
    /// Outcome in scope.
    pub outcome: Option<&'a Outcome>,
    /// Trace leaves, when explaining.
    pub leaves: Option<Vec<Leaf>>,
}

fn arith_i(op: ArithOp, a: i64, b: i64) -> i64 {
    match op {
        ArithOp::Add => a.saturating_add(b),
        ArithOp::Sub => a.saturating_sub(b),
        ArithOp::Mul => a.saturating_mul(b),
        ArithOp::Div if b == 0 => 0,
        ArithOp::Div => a.saturating_div(b),
        ArithOp::Rem if b == 0 => 0,
        ArithOp::Rem => a.wrapping_rem(b),
    }
}

fn arith_f(op: ArithOp, a: f64, b: f64) -> f64 {
    match op {
        ArithOp::Add => a + b,
        ArithOp::Sub => a - b,
        ArithOp::Mul => a * b,
        ArithOp::Div => a / b,
        ArithOp::Rem => a % b,
    }
}

fn cmp_ord<T: PartialOrd>(op: CmpOp, a: T, b: T) -> bool {
    match op {
        CmpOp::Eq => a == b,
        CmpOp::Ne => a != b,
        CmpOp::Lt => a < b,
        CmpOp::Le => a <= b,
        CmpOp::Gt => a > b,
        CmpOp::Ge => a >= b,
    }
}

fn min_v<'a>(a: V<'a>, b: V<'a>) -> V<'a> {
    match (a, b) {
        (V::I(x), V::I(y)) => V::I(if x <= y { x } else { y }),
        _ => V::F(if a.f() <= b.f() { a.f() } else { b.f() }),
    }
}

fn max_v<'a>(a: V<'a>, b: V<'a>) -> V<'a> {
    match (a, b) {
        (V::I(x), V::I(y)) => V::I(if x >= y { x } else { y }),
        _ => V::F(if a.f() >= b.f() { a.f() } else { b.f() }),
    }
}

/// ln Σ exp(xᵢ) without overflow: m + ln Σ exp(xᵢ − m), m = max; -inf for no values,
/// NaN if any value is NaN, m itself when m is infinite.
pub fn log_sum_exp(values: &[f64]) -> f64 {
    if values.iter().any(|v| v.is_nan()) {
        return f64::NAN;
    }
    let m = values.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v));
    if m.is_infinite() {
        return m;
    }
    m + values.iter().map(|v| (v - m).exp()).sum::<f64>().ln()
}

/// An aggregate of per-candidate values (shared with the JIT so both reduce in the
/// same order): `sum` of none is 0, `mean` NaN, `lowest` +inf, `highest` -inf; NaN
/// values are skipped by `lowest`/`highest`.
pub fn reduce(f: AggFn, values: &[f64]) -> f64 {
    match f {
        AggFn::Sum => values.iter().sum(),
        AggFn::Mean if values.is_empty() => f64::NAN,
        AggFn::Mean => values.iter().sum::<f64>() / values.len() as f64,
        AggFn::Lowest => values
            .iter()
            .filter(|v| !v.is_nan())
            .fold(f64::INFINITY, |m, &v| if v < m { v } else { m }),
        AggFn::Highest => values
            .iter()
            .filter(|v| !v.is_nan())
            .fold(f64::NEG_INFINITY, |m, &v| if v > m { v } else { m }),
        AggFn::LogSumExp => log_sum_exp(values),
    }
}

/// `endpoint.context_window`: the statistics' override, else the registry's window,
/// else 0 (unknown), saturated to `i64`. Shared with the JIT's host side.
pub fn context_window(e: &RegistryEndpoint, s: &EpStats) -> i64 {
    let w = s.context_window.or(e.context_window).unwrap_or(0);
    i64::try_from(w).unwrap_or(i64::MAX)
}

/// `*` matches any run of characters, `?` one character; no escapes.
pub fn glob(text: &str, pat: &str) -> bool {
    // Two cursors over chars (byte offsets, always on char boundaries) with one
    // backtrack point at the last `*`; no allocation.
    let first = |s: &str, i: usize| s.get(i..).and_then(|r| r.chars().next());
    let (mut ti, mut pi) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while let Some(tc) = first(text, ti) {
        let pc = first(pat, pi);
        if pc == Some('?') || pc == Some(tc) {
            ti += tc.len_utf8();
            pi += pc.map_or(1, char::len_utf8);
        } else if pc == Some('*') {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            let Some(c) = first(text, st) else {
                return false;
            };
            pi = sp + 1;
            ti = st + c.len_utf8();
            star = Some((sp, ti));
        } else {
            return false;
        }
    }
    pat.get(pi..).is_some_and(|r| r.bytes().all(|b| b == b'*'))
}

impl<'a, 's> Evaluator<'a, 's> {
    /// An evaluator inside strategy `strat`, at the request's own priority, with
    /// endpoint `ep` in scope (if any), no outcome, not explaining: how a strategy's
    /// filters, score, state initial values and `on` blocks are read.
    pub fn in_strategy(
        set: &'a CheckedPolicySet,
        req: &'a RequestFeatures,
        ep: Option<&'s EpCtx<'a>>,
        strat: &'s mut StratCtx<'a>,
    ) -> Self {
        Evaluator {
            set,
            req,
            priority: req.priority,
            ep,
            strat: Some(strat),
            outcome: None,
            leaves: None,
        }
    }

    fn konst(&self, c: Const) -> V<'a> {
        match c {
            Const::Bool(b) => V::B(b),
            Const::Int(i) => V::I(i),
            Const::Float(f) => V::F(f),
            Const::Str(s) => V::S(self.set.strings.resolve(s)),
            Const::Priority(p) => V::P(p),
        }
    }

    fn req_field(&self, f: ReqField) -> V<'a> {
        let r = self.req;
        let int = |v: u64| V::I(i64::try_from(v).unwrap_or(i64::MAX));
        match f {
            ReqField::Model => V::S(&r.model),
            ReqField::InputTokens => int(r.input_tokens),
            ReqField::MaxTokens => int(r.max_tokens.unwrap_or(0)),
            ReqField::Temperature => V::F(r.temperature.unwrap_or(0.0)),
            ReqField::Stream => V::B(r.stream),
            ReqField::Tools => V::B(r.tools),
            ReqField::OffPeak => V::B(r.off_peak),
            ReqField::Messages => int(r.messages),
            ReqField::ApiKey => V::S(r.api_key.as_deref().unwrap_or("")),
            ReqField::Org => V::S(r.org.as_deref().unwrap_or("")),
            ReqField::Priority => V::P(self.priority),
            ReqField::Hour => V::I(i64::from(r.hour)),
            ReqField::Weekday => V::I(i64::from(r.weekday)),
            ReqField::Task => V::S(&r.task),
            ReqField::BudgetRemaining => V::F(r.budget_remaining),
            ReqField::Header(s) => V::S(r.header(self.set.strings.resolve(s)).unwrap_or("")),
            ReqField::Metadata(s) => V::S(
                r.metadata
                    .get(self.set.strings.resolve(s))
                    .map(String::as_str)
                    .unwrap_or(""),
            ),
            ReqField::Scope(s) => V::B(r.has_scope(self.set.strings.resolve(s))),
        }
    }

    fn has(&self, f: ReqField) -> bool {
        let r = self.req;
        match f {
            ReqField::MaxTokens => r.max_tokens.is_some(),
            ReqField::Temperature => r.temperature.is_some(),
            ReqField::ApiKey => r.api_key.is_some(),
            ReqField::Org => r.org.is_some(),
            ReqField::Header(s) => r.header(self.set.strings.resolve(s)).is_some(),
            ReqField::Metadata(s) => r.metadata.contains_key(self.set.strings.resolve(s)),
            _ => true,
        }
    }

    fn ep_field(&self, f: EpField) -> V<'a> {
        let Some(ep) = self.ep else {
            return V::F(0.0);
        };
        let (e, s) = (ep.reg.endpoint, &ep.stats);
        match f {
            EpField::Id => V::S(&e.id),
            EpField::Provider => V::S(&e.provider),
            EpField::UpstreamModel => V::S(&e.model),
            EpField::Model => V::S(&ep.reg.model.name),
            EpField::Health => V::F(s.health),
            EpField::LatencyEwmaMs => V::F(s.latency_ewma_ms),
            EpField::TtftEwmaMs => V::F(s.ttft_ewma_ms),
            EpField::Capacity => V::F(s.capacity),
            EpField::InFlight => V::I(i64::try_from(s.in_flight).unwrap_or(i64::MAX)),
            EpField::ErrorRate => V::F(s.error_rate),
            EpField::CostIn => V::F(s.cost_in_per_token.unwrap_or(e.input_per_mtok / 1e6)),
            EpField::CostOut => V::F(s.cost_out_per_token.unwrap_or(e.output_per_mtok / 1e6)),
            EpField::Quality => V::F(s.quality),
            EpField::Weight => V::I(i64::from(e.weight)),
            EpField::Priority => V::I(i64::from(e.priority)),
            EpField::ContextWindow => V::I(context_window(e, s)),
            EpField::Circuit => V::S(s.circuit.as_str()),
        }
    }

    /// Records a trace leaf when explaining; `saw` (the operands as shown) is only
    /// called then, so a plain decision formats nothing.
    fn leaf(&mut self, e: &TExpr, value: bool, saw: impl FnOnce() -> Vec<String>) {
        if let Some(leaves) = &mut self.leaves {
            leaves.push(Leaf {
                at: self.set.sources.location(e.span),
                text: self.set.sources.slice(e.span).to_string(),
                value,
                saw: saw(),
            });
        }
    }

    /// Evaluates `e` to a boolean.
    pub fn truth(&mut self, e: &TExpr) -> bool {
        self.eval(e).b()
    }

    /// Evaluates `e` to a float (Int converted).
    pub fn number(&mut self, e: &TExpr) -> f64 {
        self.eval(e).f()
    }

    /// Evaluates `e`.
    pub fn eval(&mut self, e: &TExpr) -> V<'a> {
        match &e.kind {
            TExprKind::Const(c) => self.konst(*c),
            TExprKind::Req(f) => self.req_field(*f),
            TExprKind::Has(f) => {
                let v = self.has(*f);
                self.leaf(e, v, Vec::new);
                V::B(v)
            }
            TExprKind::Ep(f) => self.ep_field(*f),
            TExprKind::State(i) => V::F(
                self.ep
                    .and_then(|p| p.state.get(*i as usize).copied())
                    .unwrap_or(0.0),
            ),
            TExprKind::Param(i) => {
                let c = self
                    .strat
                    .as_ref()
                    .and_then(|s| s.args.get(*i as usize).copied());
                c.map(|c| self.konst(c)).unwrap_or(V::F(0.0))
            }
            TExprKind::Let(i) => {
                let Some(expr) = self
                    .strat
                    .as_ref()
                    .and_then(|s| s.strategy.lets.get(*i as usize))
                    .map(|(_, x)| x)
                else {
                    return V::F(0.0);
                };
                self.eval(expr)
            }
            TExprKind::Outcome(f) => {
                let o = self.outcome.copied().unwrap_or_default();
                match f {
                    OutcomeField::LatencyMs => V::F(o.latency_ms),
                    OutcomeField::TtftMs => V::F(o.ttft_ms),
                    OutcomeField::InputTokens => {
                        V::I(i64::try_from(o.input_tokens).unwrap_or(i64::MAX))
                    }
                    OutcomeField::OutputTokens => {
                        V::I(i64::try_from(o.output_tokens).unwrap_or(i64::MAX))
                    }
                }
            }
            TExprKind::Score => V::F(self.ep.map(|p| p.score).unwrap_or(0.0)),
            TExprKind::Probability => V::F(self.ep.map(|p| p.probability).unwrap_or(0.0)),
            TExprKind::Count => V::I(
                self.strat
                    .as_ref()
                    .map(|s| s.cands.len() as i64)
                    .unwrap_or(0),
            ),
            TExprKind::ToFloat(x) => V::F(self.eval(x).f()),
            TExprKind::Not(x) => V::B(!self.eval(x).b()),
            TExprKind::Neg(x) => match self.eval(x) {
                V::I(i) => V::I(i.saturating_neg()),
                v => V::F(-v.f()),
            },
            TExprKind::And(a, b) => V::B(self.eval(a).b() && self.eval(b).b()),
            TExprKind::Or(a, b) => V::B(self.eval(a).b() || self.eval(b).b()),
            TExprKind::Arith(op, a, b) => match (self.eval(a), self.eval(b)) {
                (V::I(x), V::I(y)) => V::I(arith_i(*op, x, y)),
                (x, y) => V::F(arith_f(*op, x.f(), y.f())),
            },
            TExprKind::Cmp(op, a, b) => {
                let (x, y) = (self.eval(a), self.eval(b));
                let v = match (x, y) {
                    (V::I(p), V::I(q)) => cmp_ord(*op, p, q),
                    (V::S(p), V::S(q)) => cmp_ord(*op, p, q),
                    (V::B(p), V::B(q)) => cmp_ord(*op, p, q),
                    (V::P(p), V::P(q)) => cmp_ord(*op, p, q),
                    (p, q) => cmp_ord(*op, p.f(), q.f()),
                };
                self.leaf(e, v, || vec![x.show(), y.show()]);
                V::B(v)
            }
            TExprKind::In(x, list, negated) => {
                let v = self.eval(x);
                let found = list.iter().any(|c| {
                    let c = self.konst(*c);
                    match (v, c) {
                        (V::F(_), _) | (_, V::F(_)) => v.f() == c.f(),
                        _ => v == c,
                    }
                });
                let r = found != *negated;
                self.leaf(e, r, || vec![v.show()]);
                V::B(r)
            }
            TExprKind::Match(test, x, pat) => {
                let v = self.eval(x);
                let s = if let V::S(s) = v { s } else { "" };
                let p = self.set.strings.resolve(*pat);
                let r = match test {
                    StrTest::Prefix => s.starts_with(p),
                    StrTest::Suffix => s.ends_with(p),
                    StrTest::Contains => s.contains(p),
                    StrTest::Glob => glob(s, p),
                    StrTest::Regex(i) => self
                        .set
                        .regexes
                        .get(*i as usize)
                        .is_some_and(|re| re.is_match(s)),
                };
                self.leaf(e, r, || vec![v.show()]);
                V::B(r)
            }
            TExprKind::Math(f, args) => self.math(*f, args),
            TExprKind::If(c, a, b) => {
                if self.eval(c).b() {
                    self.eval(a)
                } else {
                    self.eval(b)
                }
            }
            TExprKind::Agg(f, idx, arg) => V::F(self.aggregate(*f, *idx, arg)),
        }
    }

    fn math(&mut self, f: MathFn, args: &[TExpr]) -> V<'a> {
        let vals: Vec<V<'a>> = args.iter().map(|a| self.eval(a)).collect();
        let a = vals.first().copied().unwrap_or(V::F(0.0));
        let b = vals.get(1).copied().unwrap_or(V::F(0.0));
        match f {
            MathFn::Min => min_v(a, b),
            MathFn::Max => max_v(a, b),
            MathFn::Clamp => min_v(max_v(a, b), vals.get(2).copied().unwrap_or(V::F(0.0))),
            MathFn::Abs => match a {
                V::I(i) => V::I(i.saturating_abs()),
                v => V::F(v.f().abs()),
            },
            MathFn::Exp => V::F(a.f().exp()),
            MathFn::Ln => V::F(a.f().ln()),
            MathFn::Sqrt => V::F(a.f().sqrt()),
            MathFn::Pow => V::F(a.f().powf(b.f())),
        }
    }

    fn aggregate(&mut self, f: AggFn, idx: u32, arg: &TExpr) -> f64 {
        let Some(strat) = self.strat.as_deref_mut() else {
            return 0.0;
        };
        if let Some(Some(v)) = strat.aggs.get(idx as usize) {
            return *v;
        }
        let cands = strat.cands;
        let strategy = strat.strategy;
        let args = strat.args;
        let mut values = Vec::with_capacity(cands.len());
        for c in cands {
            // Aggregate arguments contain no aggregates (checked), so a fresh
            // evaluator per candidate needs no cache.
            let mut inner = StratCtx {
                strategy,
                args,
                cands,
                aggs: Vec::new(),
            };
            let mut ev = Evaluator {
                set: self.set,
                req: self.req,
                priority: self.priority,
                ep: Some(c),
                strat: Some(&mut inner),
                outcome: self.outcome,
                leaves: None,
            };
            values.push(ev.number(arg));
        }
        let v = reduce(f, &values);
        if let Some(strat) = self.strat.as_deref_mut() {
            if strat.aggs.len() <= idx as usize {
                strat.aggs.resize(idx as usize + 1, None);
            }
            strat.aggs[idx as usize] = Some(v);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_semantics_are_total() {
        assert_eq!(arith_i(ArithOp::Div, 7, 0), 0);
        assert_eq!(arith_i(ArithOp::Rem, 7, 0), 0);
        assert_eq!(arith_i(ArithOp::Div, i64::MIN, -1), i64::MAX);
        assert_eq!(arith_i(ArithOp::Rem, i64::MIN, -1), 0);
        assert_eq!(arith_i(ArithOp::Add, i64::MAX, 1), i64::MAX);
        assert_eq!(arith_i(ArithOp::Mul, i64::MIN, 2), i64::MIN);
        assert_eq!(arith_i(ArithOp::Div, -7, 2), -3);
        assert_eq!(arith_i(ArithOp::Rem, -7, 2), -1);
    }

    #[test]
    fn float_semantics_follow_ieee() {
        assert!(arith_f(ArithOp::Div, 1.0, 0.0).is_infinite());
        assert!(arith_f(ArithOp::Div, 0.0, 0.0).is_nan());
        assert!(!cmp_ord(CmpOp::Eq, f64::NAN, f64::NAN));
        assert!(cmp_ord(CmpOp::Ne, f64::NAN, 1.0));
        assert_eq!(min_v(V::F(f64::NAN), V::F(1.0)), V::F(1.0));
    }

    #[test]
    fn log_sum_exp_is_stable() {
        let v = log_sum_exp(&[1000.0, 1000.0]);
        assert!((v - (1000.0 + 2f64.ln())).abs() < 1e-9, "{v}");
        let v = log_sum_exp(&[-1000.0, -1000.0 - 2f64.ln()]);
        assert!((v - (-1000.0 + 1.5f64.ln())).abs() < 1e-9, "{v}");
        assert_eq!(log_sum_exp(&[]), f64::NEG_INFINITY);
        assert_eq!(log_sum_exp(&[f64::NEG_INFINITY, 2.0]), 2.0);
        assert_eq!(log_sum_exp(&[f64::INFINITY, 2.0]), f64::INFINITY);
        assert!(log_sum_exp(&[f64::NAN, 2.0]).is_nan());
    }

    #[test]
    fn glob_matches() {
        assert!(glob("gpt-4o-mini", "gpt-4o*"));
        assert!(glob("abc", "a?c"));
        assert!(glob("", "*"));
        assert!(!glob("abc", "a?"));
        assert!(glob("aXbXc", "a*b*c"));
    }

    /// The char-vector formulation of the same matcher (the reference `glob` was
    /// written as before it stopped allocating).
    fn glob_by_chars(text: &str, pat: &str) -> bool {
        let t: Vec<char> = text.chars().collect();
        let p: Vec<char> = pat.chars().collect();
        let (mut ti, mut pi) = (0usize, 0usize);
        let mut star: Option<(usize, usize)> = None;
        while ti < t.len() {
            if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
                ti += 1;
                pi += 1;
            } else if pi < p.len() && p[pi] == '*' {
                star = Some((pi, ti));
                pi += 1;
            } else if let Some((sp, st)) = star {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|&c| c == '*')
    }

    proptest::proptest! {
        #[test]
        fn glob_agrees_with_the_char_vector_matcher(
            text in "[ab\u{e9}\u{1f600}?*]{0,8}",
            pat in "[ab\u{e9}\u{1f600}?*]{0,6}",
        ) {
            proptest::prop_assert_eq!(glob(&text, &pat), glob_by_chars(&text, &pat));
        }
    }
}
