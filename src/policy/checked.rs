//! The checked, resolved form of a policy set: what the interpreter (and the JIT)
//! run. Only [`super::check::check`] builds a [`CheckedPolicySet`].
//!
//! Compared with the AST: names are resolved (fields to [`ReqField`]/[`EpField`],
//! variables to indices), strings are interned ([`Sym`]), every expression carries
//! its [`Ty`], implicit int→float promotions are explicit ([`TExprKind::ToFloat`]),
//! regexes are compiled (indexed by [`TExprKind::Match`]), rules are sorted in
//! evaluation order, and strategy arguments are complete constant vectors. Every
//! field a request or endpoint can contribute is a fixed enum variant, so the JIT can
//! lay them out in a flat feature vector.

use std::collections::HashMap;

use super::ast::{Event, JoinMode, PickMode, PriorityLevel, Span};
use super::registry::Registry;
use super::source::SourceMap;

/// An interned string id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sym(pub u32);

/// The string table of a checked set.
#[derive(Debug, Clone, Default)]
pub struct Interner {
    strings: Vec<String>,
    map: HashMap<String, Sym>,
}

impl Interner {
    /// The id of `s`, adding it if new.
    pub fn intern(&mut self, s: &str) -> Sym {
        if let Some(&id) = self.map.get(s) {
            return id;
        }
        let id = Sym(u32::try_from(self.strings.len()).unwrap_or(u32::MAX));
        self.strings.push(s.to_string());
        self.map.insert(s.to_string(), id);
        id
    }

    /// The id of `s` if interned (runtime strings that no policy mentions have none).
    pub fn lookup(&self, s: &str) -> Option<Sym> {
        self.map.get(s).copied()
    }

    /// The text of `id` (empty for a foreign id).
    pub fn resolve(&self, id: Sym) -> &str {
        self.strings
            .get(id.0 as usize)
            .map(String::as_str)
            .unwrap_or("")
    }

    /// Number of interned strings.
    pub fn len(&self) -> usize {
        self.strings.len()
    }

    /// Whether no string is interned.
    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }
}

/// Value types of the language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ty {
    /// `true` / `false`.
    Bool,
    /// 64-bit signed integer (durations are integers of milliseconds).
    Int,
    /// IEEE 754 binary64 (percentages are floats: `5%` is `0.05`).
    Float,
    /// UTF-8 string.
    Str,
    /// A priority level (compared with string literals naming a level).
    Priority,
}

impl Ty {
    /// The name used in type errors.
    pub fn name(self) -> &'static str {
        match self {
            Ty::Bool => "a boolean",
            Ty::Int => "an integer",
            Ty::Float => "a float",
            Ty::Str => "a string",
            Ty::Priority => "a priority",
        }
    }

    /// The plural used in type errors about several values (`cannot order strings`).
    pub fn plural(self) -> &'static str {
        match self {
            Ty::Bool => "booleans",
            Ty::Int => "integers",
            Ty::Float => "floats",
            Ty::Str => "strings",
            Ty::Priority => "priorities",
        }
    }
}

/// A constant value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Const {
    /// Boolean.
    Bool(bool),
    /// Integer.
    Int(i64),
    /// Float.
    Float(f64),
    /// Interned string.
    Str(Sym),
    /// Priority level.
    Priority(PriorityLevel),
}

/// Request fields (`request.*`, `header()`, `metadata()`, `scope()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReqField {
    /// `request.model`: Str.
    Model,
    /// `request.input_tokens`: Int.
    InputTokens,
    /// `request.max_tokens`: optional Int.
    MaxTokens,
    /// `request.temperature`: optional Float.
    Temperature,
    /// `request.stream`: Bool.
    Stream,
    /// `request.tools`: Bool.
    Tools,
    /// `request.messages`: Int.
    Messages,
    /// `request.api_key`: optional Str.
    ApiKey,
    /// `request.org`: optional Str.
    Org,
    /// `request.priority`: Priority.
    Priority,
    /// `request.hour`: Int 0..23 UTC.
    Hour,
    /// `request.weekday`: Int 1 (Monday) ..= 7 (Sunday).
    Weekday,
    /// `request.task`: Str.
    Task,
    /// `request.budget_remaining`: Float USD, the least spend left among the
    /// caller's budgets ([`crate::policy::NO_BUDGET`] when none applies).
    BudgetRemaining,
    /// `request.off_peak`: Bool, whether the gateway's off-peak window
    /// (`scheduler.off_peak`) holds now.
    OffPeak,
    /// `header("name")`: optional Str (name lowercased).
    Header(Sym),
    /// `metadata("key")`: optional Str.
    Metadata(Sym),
    /// `scope("name")`: Bool, whether the caller's credential carries the scope.
    Scope(Sym),
}

impl ReqField {
    /// Whether the field is a string (`Str`, optional or not): what compiled code
    /// reads as a string id.
    pub fn is_str(self) -> bool {
        matches!(
            self,
            ReqField::Model
                | ReqField::Task
                | ReqField::ApiKey
                | ReqField::Org
                | ReqField::Header(_)
                | ReqField::Metadata(_)
        )
    }

    /// Fixed `request.NAME` fields with their type, optionality and reference line
    /// (unit and meaning, as `docs/policy-language.md` gives them): the one table the
    /// checker, the linter and the language server's hover and completion read.
    pub const NAMED: [(&'static str, ReqField, Ty, bool, &'static str); 15] = [
        ("model", ReqField::Model, Ty::Str, false, "The logical model the client asked for (the request's `model`)."),
        ("input_tokens", ReqField::InputTokens, Ty::Int, false, "Input tokens of the request (tokens; counted with the model's tokenizer where one exists, else estimated)."),
        ("max_tokens", ReqField::MaxTokens, Ty::Int, true, "The client's output cap (tokens), when it set one."),
        ("temperature", ReqField::Temperature, Ty::Float, true, "The sampling temperature, when the client set one."),
        ("stream", ReqField::Stream, Ty::Bool, false, "Whether the client asked for a server-sent event stream."),
        ("tools", ReqField::Tools, Ty::Bool, false, "Whether the request carries tool definitions."),
        ("messages", ReqField::Messages, Ty::Int, false, "Number of messages in the request (count)."),
        ("api_key", ReqField::ApiKey, Ty::Str, true, "The caller's API key id (never the key itself), when authenticated by key."),
        ("org", ReqField::Org, Ty::Str, true, "The caller's organization, when known."),
        ("priority", ReqField::Priority, Ty::Priority, false, "The request priority after the `set priority` statements run so far: `low < normal < high < critical` (default `normal`)."),
        ("hour", ReqField::Hour, Ty::Int, false, "Hour of the day, 0 to 23 (UTC)."),
        ("weekday", ReqField::Weekday, Ty::Int, false, "Day of the week, 1 (Monday) to 7 (Sunday) (UTC, ISO 8601)."),
        ("task", ReqField::Task, Ty::Str, false, "Task category for quality scores: `chat`, `code` or `tool_use`."),
        (
            "budget_remaining",
            ReqField::BudgetRemaining,
            Ty::Float,
            false,
            "USD: the least spend left among the budgets of the caller's key and organization for the current UTC day and month, as of admission; `1e18` when no budget applies.",
        ),
        ("off_peak", ReqField::OffPeak, Ty::Bool, false, "Whether the gateway's configured off-peak window (`scheduler.off_peak`) holds now; false when none is configured."),
    ];
}

/// Endpoint fields (`endpoint.*`), available inside strategies and rollback guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EpField {
    /// `endpoint.id`: Str.
    Id,
    /// `endpoint.provider`: Str.
    Provider,
    /// `endpoint.upstream_model`: Str.
    UpstreamModel,
    /// `endpoint.model`: Str (the logical model).
    Model,
    /// `endpoint.health`: Float.
    Health,
    /// `endpoint.latency_ewma_ms`: Float.
    LatencyEwmaMs,
    /// `endpoint.ttft_ewma_ms`: Float.
    TtftEwmaMs,
    /// `endpoint.capacity`: Float.
    Capacity,
    /// `endpoint.in_flight`: Int.
    InFlight,
    /// `endpoint.error_rate`: Float.
    ErrorRate,
    /// `endpoint.cost_in`: Float USD per input token.
    CostIn,
    /// `endpoint.cost_out`: Float USD per output token.
    CostOut,
    /// `endpoint.quality`: Float, score for `request.task` (0 if unknown).
    Quality,
    /// `endpoint.weight`: Int (registry).
    Weight,
    /// `endpoint.priority`: Int (registry; lower preferred).
    Priority,
    /// `endpoint.context_window`: Int tokens (statistics override, else registry;
    /// 0 when unknown).
    ContextWindow,
    /// `endpoint.circuit`: Str, `"closed"`, `"half_open"` or `"open"`
    /// ([`crate::policy::features::Circuit`]).
    Circuit,
}

impl EpField {
    /// Whether the field's value comes from the endpoint's statistics (live numbers,
    /// or values the statistics may override: prices, context window), not from
    /// the registry alone.
    pub fn from_stats(self) -> bool {
        !matches!(
            self,
            EpField::Id
                | EpField::Provider
                | EpField::UpstreamModel
                | EpField::Model
                | EpField::Weight
                | EpField::Priority
        )
    }

    /// All `endpoint.NAME` fields with their type and reference line (unit and
    /// meaning): the one table the checker, the linter and the language server read.
    pub const NAMED: [(&'static str, EpField, Ty, &'static str); 17] = [
        ("id", EpField::Id, Ty::Str, "The endpoint's name in the registry (`name` in `switchyard.yaml`, default `provider/model`)."),
        ("provider", EpField::Provider, Ty::Str, "The endpoint's provider (a key of `providers:`)."),
        ("upstream_model", EpField::UpstreamModel, Ty::Str, "The model id (or Azure deployment) sent to the provider."),
        ("model", EpField::Model, Ty::Str, "The logical model the endpoint serves."),
        ("health", EpField::Health, Ty::Float, "Health H in [0, 1]: EWMA of outcomes (1 success, 0 failure), alpha 0.1."),
        ("latency_ewma_ms", EpField::LatencyEwmaMs, Ty::Float, "EWMA of the total latency (milliseconds)."),
        ("ttft_ewma_ms", EpField::TtftEwmaMs, Ty::Float, "EWMA of the time to first token (milliseconds)."),
        ("capacity", EpField::Capacity, Ty::Float, "Rate-limit headroom C in [0, 1] from the provider's rate-limit headers."),
        ("in_flight", EpField::InFlight, Ty::Int, "Requests in flight to the endpoint now (count)."),
        ("error_rate", EpField::ErrorRate, Ty::Float, "EWMA error rate in [0, 1] (a fraction: 5% is 0.05)."),
        ("cost_in", EpField::CostIn, Ty::Float, "Price of an input token (USD per token)."),
        ("cost_out", EpField::CostOut, Ty::Float, "Price of an output token (USD per token)."),
        ("quality", EpField::Quality, Ty::Float, "Quality score in [0, 1] for `request.task` (0 if unknown)."),
        ("weight", EpField::Weight, Ty::Int, "The endpoint's `weight` in the registry (share among equal priorities; 0 disables)."),
        ("priority", EpField::Priority, Ty::Int, "The endpoint's `priority` in the registry (lower is preferred)."),
        ("context_window", EpField::ContextWindow, Ty::Int, "Context window (tokens): config `context_window`, a `stats` entry may override it; 0 when unknown."),
        ("circuit", EpField::Circuit, Ty::Str, "The circuit breaker's state: `\"closed\"`, `\"half_open\"` or `\"open\"`."),
    ];
}

/// Outcome fields (`outcome.*`), available in `on success` / `on failure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutcomeField {
    /// `outcome.latency_ms`: Float.
    LatencyMs,
    /// `outcome.ttft_ms`: Float.
    TtftMs,
    /// `outcome.input_tokens`: Int.
    InputTokens,
    /// `outcome.output_tokens`: Int.
    OutputTokens,
}

impl OutcomeField {
    /// All `outcome.NAME` fields with their type and reference line.
    pub const NAMED: [(&'static str, OutcomeField, Ty, &'static str); 4] = [
        (
            "latency_ms",
            OutcomeField::LatencyMs,
            Ty::Float,
            "Total latency of the finished request (milliseconds).",
        ),
        (
            "ttft_ms",
            OutcomeField::TtftMs,
            Ty::Float,
            "Time to first token of the finished request (milliseconds).",
        ),
        (
            "input_tokens",
            OutcomeField::InputTokens,
            Ty::Int,
            "Input tokens billed (tokens).",
        ),
        (
            "output_tokens",
            OutcomeField::OutputTokens,
            Ty::Int,
            "Output tokens billed (tokens).",
        ),
    ];
}

/// Arithmetic operators (operand kind given by the node's type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
}

/// Comparison operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// String tests with a constant pattern (the JIT's pre-evaluated string atoms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrTest {
    /// `starts_with(s, "p")`
    Prefix,
    /// `ends_with(s, "p")`
    Suffix,
    /// `contains(s, "p")`
    Contains,
    /// `glob(s, "p*")`: `*` any run, `?` one char, everything else literal.
    Glob,
    /// `matches(s, "re")`: index into [`CheckedPolicySet::regexes`].
    Regex(u32),
}

/// Numeric built-in functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MathFn {
    /// `min(a, b)`: `a` if `a <= b`, else `b`.
    Min,
    /// `max(a, b)`: `a` if `a >= b`, else `b`.
    Max,
    /// `abs(x)` (integers saturate: `abs(MIN) = MAX`).
    Abs,
    /// `exp(x)` (f64::exp).
    Exp,
    /// `ln(x)` (f64::ln).
    Ln,
    /// `sqrt(x)` (f64::sqrt).
    Sqrt,
    /// `pow(x, y)` (f64::powf).
    Pow,
    /// `clamp(x, lo, hi)` = `min(max(x, lo), hi)`.
    Clamp,
}

/// Aggregates over a strategy's candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggFn {
    /// `sum(e)`, 0 over no candidates.
    Sum,
    /// `mean(e)`, NaN over no candidates.
    Mean,
    /// `lowest(e)`, +inf over none (NaN values skipped).
    Lowest,
    /// `highest(e)`, -inf over none (NaN values skipped).
    Highest,
    /// `logsumexp(e)` = ln Σ exp(e), computed as m + ln Σ exp(e − m) with m the
    /// largest value so it neither overflows nor underflows; -inf over none, NaN if
    /// any value is NaN, m when m is ±inf. Lets Exp3 keep log weights.
    LogSumExp,
}

/// A typed expression.
#[derive(Debug, Clone, PartialEq)]
pub struct TExpr {
    /// What it computes.
    pub kind: TExprKind,
    /// Its type.
    pub ty: Ty,
    /// The source it came from.
    pub span: Span,
}

impl TExpr {
    /// Whether `pred` holds for this expression or any expression inside it.
    pub fn any_node(&self, pred: &mut impl FnMut(&TExprKind) -> bool) -> bool {
        if pred(&self.kind) {
            return true;
        }
        match &self.kind {
            TExprKind::Const(_)
            | TExprKind::Req(_)
            | TExprKind::Has(_)
            | TExprKind::Ep(_)
            | TExprKind::State(_)
            | TExprKind::Param(_)
            | TExprKind::Let(_)
            | TExprKind::Outcome(_)
            | TExprKind::Score
            | TExprKind::Probability
            | TExprKind::Count => false,
            TExprKind::ToFloat(a) | TExprKind::Not(a) | TExprKind::Neg(a) => a.any_node(pred),
            TExprKind::And(a, b)
            | TExprKind::Or(a, b)
            | TExprKind::Arith(_, a, b)
            | TExprKind::Cmp(_, a, b) => a.any_node(pred) || b.any_node(pred),
            TExprKind::In(a, _, _) | TExprKind::Match(_, a, _) | TExprKind::Agg(_, _, a) => {
                a.any_node(pred)
            }
            TExprKind::Math(_, args) => args.iter().any(|a| a.any_node(pred)),
            TExprKind::If(c, a, b) => c.any_node(pred) || a.any_node(pred) || b.any_node(pred),
        }
    }
}

/// Typed expression kinds.
#[derive(Debug, Clone, PartialEq)]
pub enum TExprKind {
    /// A constant.
    Const(Const),
    /// A request field (optional fields only under a `has()` guard; absent reads give
    /// 0, 0.0 or "").
    Req(ReqField),
    /// Whether an optional request field is present.
    Has(ReqField),
    /// An endpoint field of the endpoint in scope.
    Ep(EpField),
    /// A strategy state slot of the endpoint in scope (index into the strategy's slots).
    State(u32),
    /// A strategy parameter (index into the call's argument vector).
    Param(u32),
    /// A strategy `let` (index into the strategy's lets), per endpoint.
    Let(u32),
    /// An outcome field.
    Outcome(OutcomeField),
    /// The endpoint's score (in `on` blocks).
    Score,
    /// The endpoint's pick probability (in `on` blocks).
    Probability,
    /// Number of candidates (`count()`), Int.
    Count,
    /// Int → Float.
    ToFloat(Box<TExpr>),
    /// `not e`.
    Not(Box<TExpr>),
    /// `-e` (Int saturates).
    Neg(Box<TExpr>),
    /// Short-circuit `and`.
    And(Box<TExpr>, Box<TExpr>),
    /// Short-circuit `or`.
    Or(Box<TExpr>, Box<TExpr>),
    /// Arithmetic; both operands have the node's type (Int or Float).
    Arith(ArithOp, Box<TExpr>, Box<TExpr>),
    /// Comparison; both operands have the same type.
    Cmp(CmpOp, Box<TExpr>, Box<TExpr>),
    /// `e in [consts]` (or `not in` when the flag is true).
    In(Box<TExpr>, Vec<Const>, bool),
    /// A string test against a constant pattern.
    Match(StrTest, Box<TExpr>, Sym),
    /// A numeric function; all arguments have the node's type.
    Math(MathFn, Vec<TExpr>),
    /// `if(c, a, b)`: only the chosen branch is evaluated.
    If(Box<TExpr>, Box<TExpr>, Box<TExpr>),
    /// An aggregate over candidates; the index numbers the strategy's aggregates.
    Agg(AggFn, u32, Box<TExpr>),
}

/// A routing target, resolved against the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CTarget {
    /// Every endpoint of the logical model.
    Model(String),
    /// One endpoint by id.
    Endpoint(String),
    /// The endpoints of `request.model`.
    RequestedModel,
    /// Every endpoint of the registry.
    Any,
}

impl CTarget {
    /// The target as policies write it.
    pub fn describe(&self) -> String {
        // Built by hand, not with `format!`: this runs on every decision.
        let quoted = |prefix: &str, s: &str| {
            let mut out = String::with_capacity(prefix.len() + s.len() + 2);
            out.push_str(prefix);
            out.push('"');
            out.push_str(s);
            out.push('"');
            out
        };
        match self {
            CTarget::Model(m) => quoted("", m),
            CTarget::Endpoint(e) => quoted("endpoint ", e),
            CTarget::RequestedModel => "model".to_string(),
            CTarget::Any => "any".to_string(),
        }
    }
}

/// `use TARGET via STRATEGY(args)`.
#[derive(Debug, Clone, PartialEq)]
pub struct CUse {
    /// Where.
    pub target: CTarget,
    /// The target as policies write it ([`CTarget::describe`]), shared by the
    /// decisions that name it.
    pub described: super::names::Name,
    /// Strategy index in [`CheckedPolicySet::strategies`]; `None` is the built-in
    /// `priority` strategy (registry priority, then weight, then config order).
    pub strategy: Option<u32>,
    /// Every parameter's value, defaults filled in, in declaration order (shared
    /// with the strategy calls of decisions).
    pub args: std::sync::Arc<[Const]>,
    /// The `use` action.
    pub span: Span,
}

/// The sticky key of a split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CSplitKey {
    /// `api_key`
    ApiKey,
    /// `org`
    Org,
    /// `header("name")` (lowercased)
    Header(String),
    /// `metadata("key")`
    Metadata(String),
    /// `random`
    Random,
}

/// One arm of a split.
#[derive(Debug, Clone, PartialEq)]
pub struct CArm {
    /// Share in basis points.
    pub share_bp: u32,
    /// Exclusive end of the arm's bucket range (cumulative share).
    pub upto_bp: u32,
    /// Whether this arm is a canary.
    pub canary: bool,
    /// Where its traffic goes.
    pub action: CUse,
    /// Canary guard, evaluated per endpoint of the arm's target.
    pub rollback: Option<TExpr>,
}

/// `split by KEY seed N { arms }`.
#[derive(Debug, Clone, PartialEq)]
pub struct CSplit {
    /// The sticky key.
    pub key: CSplitKey,
    /// The hash salt.
    pub seed: u64,
    /// Arms in order; their shares sum to 10 000 basis points.
    pub arms: Vec<CArm>,
    /// The arm a rolled-back canary falls back to: the first non-canary arm.
    pub stable_arm: Option<u32>,
    /// The split action.
    pub span: Span,
}

/// The action that ends rule evaluation.
#[derive(Debug, Clone, PartialEq)]
pub enum CTerminal {
    /// `use ...`
    Use(CUse),
    /// `split ...`
    Split(CSplit),
    /// `reject STATUS "message"`
    Reject {
        /// HTTP status 400..=599.
        status: u16,
        /// Message for the client.
        message: String,
        /// The action.
        span: Span,
    },
}

/// `fallback ...` resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct CFallback {
    /// Targets after the primary, in order.
    pub chain: Vec<CTarget>,
    /// Extra attempts per endpoint on retryable errors.
    pub retries: u32,
    /// First backoff wait in milliseconds.
    pub backoff_min_ms: u64,
    /// Cap of the doubling backoff in milliseconds.
    pub backoff_max_ms: u64,
    /// `on ...`: upstream statuses that move on to the next endpoint.
    pub on: Option<crate::policy::status::FallbackOn>,
}

/// `cache on [ttl D]` / `cache exact [ttl D]` / `cache off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CacheSetting {
    /// Whether responses may be served from and stored in the cache.
    pub on: bool,
    /// Time to live in milliseconds; `None` is the gateway's default.
    pub ttl_ms: Option<u64>,
    /// `cache exact`: the key is a hash of the whole canonical request (no SimHash
    /// approximation); `false` is the gateway's configured mode.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub exact: bool,
}

/// `set priority LEVEL [when EXPR]`.
#[derive(Debug, Clone, PartialEq)]
pub struct CSetPriority {
    /// The level.
    pub level: PriorityLevel,
    /// The condition, if any.
    pub when: Option<TExpr>,
    /// The statement.
    pub span: Span,
}

/// A rule body (also the default's).
#[derive(Debug, Clone, PartialEq)]
pub struct CBody {
    /// `use`, `split` or `reject`; `None` exactly when the body ends in `continue`.
    pub terminal: Option<CTerminal>,
    /// Priority changes, in order.
    pub set_priority: Vec<CSetPriority>,
    /// Cache override.
    pub cache: Option<CacheSetting>,
    /// `hold off_peak`: when this rule applies, the request may wait for the
    /// off-peak window (added to the route's; there is no statement that removes it).
    pub hold_off_peak: bool,
    /// Fallback override.
    pub fallback: Option<CFallback>,
}

/// A checked rule.
#[derive(Debug, Clone, PartialEq)]
pub struct CRule {
    /// Its name (`default` for the default).
    pub name: String,
    /// Its explicit priority.
    pub priority: i64,
    /// Its condition (`None`: always).
    pub when: Option<TExpr>,
    /// Its body.
    pub body: CBody,
    /// The definition.
    pub span: Span,
}

/// A checked route; rules sorted by priority (higher first, then source order).
#[derive(Debug, Clone, PartialEq)]
pub struct CRoute {
    /// Its name.
    pub name: String,
    /// Its explicit priority among routes.
    pub priority: i64,
    /// Its condition.
    pub when: Option<TExpr>,
    /// Priority settings evaluated before the rules.
    pub set_priority: Vec<CSetPriority>,
    /// Route-wide cache setting.
    pub cache: Option<CacheSetting>,
    /// Route-wide `hold off_peak`: every request the route takes may wait for the
    /// off-peak window.
    pub hold_off_peak: bool,
    /// Route-wide fallback chain.
    pub fallback: Option<CFallback>,
    /// Rules in evaluation order.
    pub rules: Vec<CRule>,
    /// The default, tried last.
    pub default: CRule,
    /// The definition.
    pub span: Span,
}

/// A checked strategy parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct CParam {
    /// Name.
    pub name: String,
    /// Type (the default's).
    pub ty: Ty,
    /// Default value.
    pub default: Const,
    /// Allowed values (checked for the default and every argument).
    pub range: Option<ParamRange>,
}

/// An interval of allowed numeric parameter values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParamRange {
    /// Lower bound.
    pub lo: f64,
    /// Whether `lo` is allowed.
    pub lo_inclusive: bool,
    /// Upper bound.
    pub hi: f64,
    /// Whether `hi` is allowed.
    pub hi_inclusive: bool,
}

impl ParamRange {
    /// Whether `v` lies in the interval (NaN never does).
    pub fn contains(&self, v: f64) -> bool {
        let lo_ok = if self.lo_inclusive {
            v >= self.lo
        } else {
            v > self.lo
        };
        let hi_ok = if self.hi_inclusive {
            v <= self.hi
        } else {
            v < self.hi
        };
        lo_ok && hi_ok
    }

    /// The interval as written, e.g. `(0, 1]`.
    pub fn describe(&self) -> String {
        format!(
            "{}{}, {}{}",
            if self.lo_inclusive { "[" } else { "(" },
            self.lo,
            self.hi,
            if self.hi_inclusive { "]" } else { ")" }
        )
    }
}

/// A checked state slot.
#[derive(Debug, Clone, PartialEq)]
pub struct CState {
    /// Slot name.
    pub name: String,
    /// Initial value: a constant expression over parameters (Float).
    pub init: TExpr,
    /// How a newly seen endpoint starts.
    pub join: JoinMode,
}

/// A checked strategy.
#[derive(Debug, Clone, PartialEq)]
pub struct CStrategy {
    /// Name.
    pub name: String,
    /// Parameters in order.
    pub params: Vec<CParam>,
    /// State slots (all Float).
    pub states: Vec<CState>,
    /// `let` bindings in order (a let may use earlier lets).
    pub lets: Vec<(String, TExpr)>,
    /// `require` filters.
    pub require: Vec<TExpr>,
    /// `prefer` filters.
    pub prefer: Vec<TExpr>,
    /// The score (Float).
    pub score: TExpr,
    /// The pick mode.
    pub pick: PickMode,
    /// Number of aggregate nodes (indices `0..aggregates`).
    pub aggregates: u32,
    /// Updates per event: (slot index, new value), applied all at once.
    pub updates: Vec<(Event, Vec<(u32, TExpr)>)>,
    /// Whether some expression of the strategy reads an endpoint field that comes
    /// from the statistics ([`EpField::from_stats`]); when none does, a decision
    /// does not read the candidates' statistics at all.
    pub reads_stats: bool,
    /// The definition.
    pub span: Span,
}

impl CStrategy {
    /// Every expression of the strategy: state initialisers, lets, filters, the
    /// score and the `on` updates.
    pub fn exprs(&self) -> impl Iterator<Item = &TExpr> {
        self.states
            .iter()
            .map(|st| &st.init)
            .chain(self.lets.iter().map(|(_, e)| e))
            .chain(&self.require)
            .chain(&self.prefer)
            .chain(std::iter::once(&self.score))
            .chain(
                self.updates
                    .iter()
                    .flat_map(|(_, u)| u.iter().map(|(_, e)| e)),
            )
    }

    /// Computes [`CStrategy::reads_stats`] from the expressions.
    pub fn compute_reads_stats(&self) -> bool {
        self.exprs()
            .any(|e| e.any_node(&mut |k| matches!(k, TExprKind::Ep(f) if f.from_stats())))
    }
}

/// A checked set of policy files: the only input the interpreter accepts.
#[derive(Debug, Clone)]
pub struct CheckedPolicySet {
    /// Interned strings.
    pub strings: Interner,
    /// Compiled regexes, indexed by [`StrTest::Regex`].
    pub regexes: Vec<regex::Regex>,
    /// Routes in evaluation order (priority, then file order, then source order).
    pub routes: Vec<CRoute>,
    /// Strategies by index.
    pub strategies: Vec<CStrategy>,
    /// Policy tests.
    pub tests: Vec<super::testing::CTest>,
    /// The registry the set was checked against.
    pub registry: Registry,
    /// The sources, for locations in traces and test reports.
    pub sources: SourceMap,
    /// FNV-1a 64 of every file's name and text, hex: the policy version.
    pub version: String,
    /// The names decisions report, shared ([`super::names`]).
    pub names: super::names::Names,
}

impl CheckedPolicySet {
    /// The strategy named `name`.
    pub fn strategy(&self, name: &str) -> Option<(u32, &CStrategy)> {
        self.strategies
            .iter()
            .enumerate()
            .find(|(_, s)| s.name == name)
            .map(|(i, s)| (i as u32, s))
    }
}
