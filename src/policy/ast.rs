//! The parsed (unchecked) syntax tree of a policy file.
//!
//! Produced by [`crate::policy::parser`], consumed by the checker, the linter and
//! `fmt`. Every node carries the [`Span`] of the text it came from; because spans
//! compare equal to each other, `==` on nodes compares structure only.
//!
//! Nothing here is validated beyond syntax: names may be unknown, types may not fit.
//! Only [`crate::policy::check`](mod@crate::policy::check) turns this into the form the interpreter runs.
//!
//! Comments are not nodes: they are kept in [`PolicyFile::comments`] with their spans
//! so that a formatter can re-attach them to the nearest following (or preceding) node.

use serde::{Deserialize, Serialize};

pub use super::source::{FileId, Span};

/// A name written in the source (route, rule, strategy, parameter, variable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ident {
    /// The name as written.
    pub name: String,
    /// Where it was written.
    pub span: Span,
}

/// A value with the span it was written at.
#[derive(Debug, Clone, PartialEq)]
pub struct Spanned<T> {
    /// The value.
    pub node: T,
    /// Where it was written.
    pub span: Span,
}

/// One `# ...` comment, text without the leading `#`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    /// The text after `#`, without the line break.
    pub text: String,
    /// The span of the whole comment including `#`.
    pub span: Span,
    /// Whether code precedes the comment on the same line (a trailing comment).
    pub trailing: bool,
}

/// One parsed `.policy` file.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyFile {
    /// The file in the [`super::source::SourceMap`].
    pub file: FileId,
    /// Routes, strategies and tests in source order.
    pub items: Vec<Item>,
    /// Every comment of the file in source order (side table for `fmt`).
    pub comments: Vec<Comment>,
}

/// A top-level definition.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// `route NAME [priority N] [when EXPR] { ... }`
    Route(RouteDef),
    /// `strategy NAME(params) { ... }`
    Strategy(StrategyDef),
    /// `test "name" { ... }`
    Test(TestDef),
}

// ------------------------------------------------------------------ routes and rules

/// `route NAME [priority N] [when EXPR] { route items }`.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteDef {
    /// The route's name, unique in the set.
    pub name: Ident,
    /// Explicit order among routes: higher is tried first (default 0).
    pub priority: Option<Spanned<i64>>,
    /// Which requests the route takes; absent means every request.
    pub when: Option<Expr>,
    /// Rules, default, fallback, cache, hold and priority settings in source order.
    pub items: Vec<RouteItem>,
    /// The whole definition.
    pub span: Span,
}

/// One entry inside a route's braces.
#[derive(Debug, Clone, PartialEq)]
pub enum RouteItem {
    /// `rule NAME [priority N] [when EXPR] { actions }`
    Rule(RuleDef),
    /// `default { actions }` or `default ACTION`.
    Default(DefaultDef),
    /// `fallback T -> T ... [retries N] [backoff D[..D]]` for the whole route.
    Fallback(FallbackDef),
    /// `cache on|exact [ttl D]` / `cache off` for the whole route.
    Cache(CacheDef),
    /// `hold off_peak` for every rule of the route.
    Hold(HoldDef),
    /// `set priority LEVEL [when EXPR]` evaluated before the rules.
    SetPriority(SetPriority),
}

/// `rule NAME [priority N] [when EXPR] { actions }`.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleDef {
    /// Name, unique within its route; part of the sticky split hash.
    pub name: Ident,
    /// Higher is tried first; equal priorities keep source order (default 0).
    pub priority: Option<Spanned<i64>>,
    /// The condition; absent means always.
    pub when: Option<Expr>,
    /// The body.
    pub body: Vec<Action>,
    /// The whole definition.
    pub span: Span,
}

/// `default { actions }` or the one-action form `default use ...`.
#[derive(Debug, Clone, PartialEq)]
pub struct DefaultDef {
    /// The body.
    pub body: Vec<Action>,
    /// Whether it was written with braces (kept for `fmt`).
    pub braced: bool,
    /// The whole definition.
    pub span: Span,
}

/// A statement of a rule body.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// `use TARGET [via STRATEGY[(args)]]`
    Use(UseAction),
    /// `split by KEY [seed N] { arms }`
    Split(SplitAction),
    /// `reject STATUS "message"`
    Reject(RejectAction),
    /// `set priority LEVEL [when EXPR]`
    SetPriority(SetPriority),
    /// `cache on|exact [ttl D]` / `cache off`
    Cache(CacheDef),
    /// `hold off_peak`
    Hold(HoldDef),
    /// `fallback ...` replacing the route's chain for this rule.
    Fallback(FallbackDef),
    /// `continue`: apply this rule's settings, then keep trying later rules.
    Continue(Span),
}

/// `use TARGET [via STRATEGY[(args)]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct UseAction {
    /// What to send the request to.
    pub target: Target,
    /// How to choose among the target's endpoints; absent means `priority`.
    pub via: Option<ViaClause>,
    /// The whole action.
    pub span: Span,
}

/// A routing target.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// Which kind of target.
    pub kind: TargetKind,
    /// Where it was written.
    pub span: Span,
}

/// The kinds of routing target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetKind {
    /// `"gpt-4o"`: every endpoint of a logical model of the registry.
    Model(String),
    /// `endpoint "openai/gpt-4o"`: one named endpoint.
    Endpoint(String),
    /// `model`: the logical model the request asked for.
    RequestedModel,
    /// `any`: every endpoint of the registry.
    Any,
}

/// `via NAME[(arg = literal, ...)]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ViaClause {
    /// The strategy's name.
    pub strategy: Ident,
    /// Named arguments overriding parameter defaults.
    pub args: Vec<Arg>,
    /// The whole clause.
    pub span: Span,
}

/// `name = literal` in a strategy call.
#[derive(Debug, Clone, PartialEq)]
pub struct Arg {
    /// The parameter name.
    pub name: Ident,
    /// Its value.
    pub value: Literal,
    /// The whole argument.
    pub span: Span,
}

/// `split by KEY [seed N] { P% -> [canary] use ... [rollback when EXPR] ... }`.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitAction {
    /// What makes the split sticky.
    pub key: SplitKey,
    /// Salt for the bucket hash (default 0); change it to reshuffle assignments.
    pub seed: Option<Spanned<u64>>,
    /// The arms, in order; bucket ranges are assigned in this order.
    pub arms: Vec<SplitArm>,
    /// The whole action.
    pub span: Span,
}

/// The sticky key of a split (also the key varied by a test's `sample`).
#[derive(Debug, Clone, PartialEq)]
pub struct SplitKey {
    /// Which key.
    pub kind: SplitKeyKind,
    /// Where it was written.
    pub span: Span,
}

/// Kinds of sticky split key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitKeyKind {
    /// The API key id of the caller.
    ApiKey,
    /// The caller's organization.
    Org,
    /// A request header (name lowercased by the checker).
    Header(String),
    /// A request metadata entry.
    Metadata(String),
    /// No stickiness: a fresh draw from the decision's random source.
    Random,
}

/// `P% -> [canary] use ... [rollback when EXPR]`.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitArm {
    /// Share in basis points (1% = 100), as written.
    pub share: Spanned<i64>,
    /// Whether this arm is a canary (may be rolled back to the first stable arm).
    pub canary: bool,
    /// Where to send the arm's traffic.
    pub action: UseAction,
    /// Canary guard, evaluated per endpoint of the canary's target.
    pub rollback: Option<Expr>,
    /// The whole arm.
    pub span: Span,
}

/// `reject STATUS "message"`.
#[derive(Debug, Clone, PartialEq)]
pub struct RejectAction {
    /// The HTTP status as written.
    pub status: Spanned<i64>,
    /// The message returned to the client.
    pub message: Spanned<String>,
    /// The whole action.
    pub span: Span,
}

/// A request priority level (seed 000, Priority Queues). Ordered `low < normal <
/// high < critical`; serialized lowercase.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum PriorityLevel {
    /// Batch and embeddings; may be held for off-peak.
    Low,
    /// Ordinary application traffic (the default).
    #[default]
    Normal,
    /// Interactive traffic.
    High,
    /// Health checks and auth validation; bypasses rate limits.
    Critical,
}

impl PriorityLevel {
    /// All levels with their spelling, lowest first.
    pub const ALL: [(&'static str, PriorityLevel); 4] = [
        ("low", PriorityLevel::Low),
        ("normal", PriorityLevel::Normal),
        ("high", PriorityLevel::High),
        ("critical", PriorityLevel::Critical),
    ];

    /// The level spelt `s`.
    pub fn parse(s: &str) -> Option<PriorityLevel> {
        PriorityLevel::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, l)| *l)
    }

    /// The spelling of this level.
    pub fn as_str(self) -> &'static str {
        match self {
            PriorityLevel::Low => "low",
            PriorityLevel::Normal => "normal",
            PriorityLevel::High => "high",
            PriorityLevel::Critical => "critical",
        }
    }
}

/// `set priority LEVEL [when EXPR]`.
#[derive(Debug, Clone, PartialEq)]
pub struct SetPriority {
    /// The new level.
    pub level: Spanned<PriorityLevel>,
    /// Optional condition.
    pub when: Option<Expr>,
    /// The whole statement.
    pub span: Span,
}

/// `cache on [ttl D]`, `cache exact [ttl D]` or `cache off`.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheDef {
    /// Whether caching is on (`on` and `exact`).
    pub on: bool,
    /// `cache exact`: on, with the key a hash of the whole canonical request (no
    /// approximate matching); implies `on`.
    pub exact: bool,
    /// Time to live in milliseconds, if given.
    pub ttl_ms: Option<Spanned<i64>>,
    /// The whole statement.
    pub span: Span,
}

/// `hold off_peak`: the request may wait for the gateway's off-peak window.
#[derive(Debug, Clone, PartialEq)]
pub struct HoldDef {
    /// What the request is held for, as written; the checker accepts only
    /// [`HoldDef::OFF_PEAK`].
    pub what: Ident,
    /// The whole statement.
    pub span: Span,
}

impl HoldDef {
    /// The one thing a request can be held for: the off-peak window.
    pub const OFF_PEAK: &'static str = "off_peak";
}

/// `fallback T -> T ... [on STATUS, ...] [retries N] [backoff MIN[..MAX]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct FallbackDef {
    /// Targets tried, in order, after the primary choice.
    pub chain: Vec<Target>,
    /// `on 409, 5xx`: upstream statuses that move on to the next endpoint.
    pub on: Option<FallbackOnDef>,
    /// Extra attempts per endpoint on a retryable error.
    pub retries: Option<Spanned<i64>>,
    /// Backoff in milliseconds: first wait, and the cap of the doubling.
    pub backoff: Option<(Spanned<i64>, Option<Spanned<i64>>)>,
    /// The whole statement.
    pub span: Span,
}

/// The `on` clause of a `fallback`, as written (the checker validates the statuses).
#[derive(Debug, Clone, PartialEq)]
pub struct FallbackOnDef {
    /// The items in source order.
    pub items: Vec<Spanned<StatusLit>>,
    /// From `on` to the last item.
    pub span: Span,
}

/// One item of an `on` list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusLit {
    /// A status such as `409`.
    Code(i64),
    /// A class such as `5xx`: its leading digit.
    Class(u8),
}

// ------------------------------------------------------------------ strategies

/// `strategy NAME(params) { items }`.
#[derive(Debug, Clone, PartialEq)]
pub struct StrategyDef {
    /// The name used in `via`.
    pub name: Ident,
    /// Typed parameters with defaults.
    pub params: Vec<ParamDef>,
    /// State slots, lets, filters, score, pick and updates in source order.
    pub items: Vec<StrategyItem>,
    /// The whole definition.
    pub span: Span,
}

/// `name = default [in (lo, hi]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamDef {
    /// The parameter name.
    pub name: Ident,
    /// Its default; the parameter's type is the default's type.
    pub default: Literal,
    /// Allowed range, checked for the default and every call argument.
    pub range: Option<RangeSpec>,
    /// The whole parameter.
    pub span: Span,
}

/// An interval `(lo, hi]`, `[lo, hi)` etc.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeSpec {
    /// Lower bound.
    pub lo: Literal,
    /// Whether `lo` itself is allowed (`[`).
    pub lo_inclusive: bool,
    /// Upper bound.
    pub hi: Literal,
    /// Whether `hi` itself is allowed (`]`).
    pub hi_inclusive: bool,
    /// The whole interval.
    pub span: Span,
}

/// A statement of a strategy body.
#[derive(Debug, Clone, PartialEq)]
pub enum StrategyItem {
    /// `state NAME = EXPR [join mean|initial]`
    State(StateDef),
    /// `let NAME = EXPR` (per endpoint)
    Let(LetDef),
    /// `require EXPR`: candidates failing it are dropped; none left means no pick.
    Require(Expr),
    /// `prefer EXPR`: candidates failing it are dropped unless that drops all.
    Prefer(Expr),
    /// `score = EXPR`
    Score(Expr),
    /// `pick min|max|weighted|sample`
    Pick(Spanned<PickMode>),
    /// `on pick|success|failure { NAME = EXPR ... }`
    On(OnBlock),
}

/// `state NAME = EXPR [join mean|initial]`.
#[derive(Debug, Clone, PartialEq)]
pub struct StateDef {
    /// Slot name, read as `state.NAME`.
    pub name: Ident,
    /// Initial value (constant over parameters).
    pub init: Expr,
    /// Initial value of an endpoint that joins when others already have state.
    pub join: JoinMode,
    /// The whole statement.
    pub span: Span,
}

/// How a newly seen endpoint's state slot starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinMode {
    /// The slot's initial value.
    Initial,
    /// The mean of the slot over candidates that already have it (seed 004).
    Mean,
}

/// `let NAME = EXPR`.
#[derive(Debug, Clone, PartialEq)]
pub struct LetDef {
    /// The binding's name.
    pub name: Ident,
    /// Its value, evaluated per endpoint.
    pub value: Expr,
    /// The whole statement.
    pub span: Span,
}

/// How a strategy chooses from scored candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PickMode {
    /// Lowest score (ties: earlier endpoint).
    Min,
    /// Highest score (ties: earlier endpoint).
    Max,
    /// Random, probability proportional to score.
    Weighted,
    /// Random, scores are probabilities (normalized if they do not sum to 1).
    Sample,
}

/// The events a strategy can update state on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Event {
    /// When the endpoint is chosen.
    Pick,
    /// When a request to the endpoint succeeded.
    Success,
    /// When a request to the endpoint failed.
    Failure,
}

/// `on EVENT { NAME = EXPR ... }`.
#[derive(Debug, Clone, PartialEq)]
pub struct OnBlock {
    /// Which event.
    pub event: Spanned<Event>,
    /// Assignments to state slots, evaluated against the old state all at once.
    pub assigns: Vec<Assign>,
    /// The whole block.
    pub span: Span,
}

/// `NAME = EXPR` in an `on` block.
#[derive(Debug, Clone, PartialEq)]
pub struct Assign {
    /// The state slot.
    pub name: Ident,
    /// Its new value.
    pub value: Expr,
    /// The whole statement.
    pub span: Span,
}

// ------------------------------------------------------------------ expressions

/// A constant value as written.
#[derive(Debug, Clone, PartialEq)]
pub struct Literal {
    /// The value.
    pub kind: LitKind,
    /// Where it was written.
    pub span: Span,
}

/// Literal values. Durations and percentages keep their unit for `fmt`.
#[derive(Debug, Clone, PartialEq)]
pub enum LitKind {
    /// `42`, `1_000`
    Int(i64),
    /// `0.5`, `1e-3`
    Float(f64),
    /// `"text"` with escapes decoded.
    Str(String),
    /// `true`, `false`
    Bool(bool),
    /// `250ms`, `2s`, `5m`, `1h`: milliseconds, plus the text as written.
    Duration(i64, String),
    /// `5%`, `12.5%`: basis points (1% = 100).
    Percent(i64),
}

/// An expression node.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    /// What kind of expression.
    pub kind: ExprKind,
    /// The text it covers.
    pub span: Span,
}

/// Expression kinds.
#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    /// A literal.
    Lit(LitKind),
    /// `[a, b, c]` (only as the right side of `in`).
    List(Vec<Expr>),
    /// A dotted field: `request.input_tokens`, `endpoint.health`, `state.weight`.
    Path(Vec<Ident>),
    /// A bare name: a parameter, a `let`, or a state slot inside `on` blocks.
    Var(Ident),
    /// `name(args)`: built-in functions such as `has`, `header`, `matches`, `min`.
    Call(Ident, Vec<Expr>),
    /// `not e`, `-e`
    Unary(UnaryOp, Box<Expr>),
    /// `a op b`
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
}

/// Prefix operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryOp {
    /// `not`
    Not,
    /// `-`
    Neg,
}

/// Infix operators, lowest precedence first: `or`; `and`; comparisons and `in`;
/// `+ -`; `* / %`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    /// `or` (short-circuit)
    Or,
    /// `and` (short-circuit)
    And,
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
    /// `in`
    In,
    /// `not in`
    NotIn,
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

impl BinaryOp {
    /// The operator as written in policies.
    pub fn as_str(self) -> &'static str {
        match self {
            BinaryOp::Or => "or",
            BinaryOp::And => "and",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::In => "in",
            BinaryOp::NotIn => "not in",
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Rem => "%",
        }
    }
}

// ------------------------------------------------------------------ policy tests

/// `test "name" { request {...} stats {...} seed N sample N by KEY expect ... }`.
#[derive(Debug, Clone, PartialEq)]
pub struct TestDef {
    /// The test's name, shown in reports.
    pub name: Spanned<String>,
    /// Its statements in source order.
    pub items: Vec<TestItem>,
    /// The whole definition.
    pub span: Span,
}

/// A statement of a test.
#[derive(Debug, Clone, PartialEq)]
pub enum TestItem {
    /// `request { field = literal, header("h") = "v", metadata("k") = "v" }`
    Request(Vec<ReqAssign>, Span),
    /// `stats { "endpoint-id" { health = 0.5, state.exp3.weight = 2.0 } }`
    Stats(Vec<StatsEntry>, Span),
    /// `seed N`: the random source of the decision.
    Seed(Spanned<u64>),
    /// `sample N by KEY`: a distribution test over N generated key values.
    Sample {
        /// How many requests.
        count: Spanned<u64>,
        /// Which key is varied.
        key: SplitKey,
        /// The whole statement.
        span: Span,
    },
    /// `expect ...`
    Expect(Expectation),
}

/// `key = literal` in a test's `request` block.
#[derive(Debug, Clone, PartialEq)]
pub struct ReqAssign {
    /// Which request feature.
    pub key: ReqKey,
    /// Its value.
    pub value: Literal,
    /// The whole assignment.
    pub span: Span,
}

/// The left side of a request assignment.
#[derive(Debug, Clone, PartialEq)]
pub enum ReqKey {
    /// A field of `request.*`, e.g. `input_tokens`.
    Field(Ident),
    /// `header("name")`
    Header(String),
    /// `metadata("key")`
    Metadata(String),
}

/// `"endpoint-id" { key = literal ... }` in a test's `stats` block.
#[derive(Debug, Clone, PartialEq)]
pub struct StatsEntry {
    /// The endpoint id.
    pub endpoint: Spanned<String>,
    /// Its statistics; keys like `health`, `quality.code`, `state.exp3.weight`.
    pub fields: Vec<(Vec<Ident>, Literal)>,
    /// The whole entry.
    pub span: Span,
}

/// `expect ...`.
#[derive(Debug, Clone, PartialEq)]
pub struct Expectation {
    /// What is expected.
    pub kind: ExpectKind,
    /// The whole statement.
    pub span: Span,
}

/// What a test expects.
#[derive(Debug, Clone, PartialEq)]
pub enum ExpectKind {
    /// `expect rule long_context`, `expect endpoint "openai/gpt-4o"`, ...
    Is {
        /// Which decision field.
        what: ExpectField,
        /// The expected value as written (name, string or number).
        value: Spanned<String>,
    },
    /// `expect reject 429`
    Reject(Spanned<i64>),
    /// `expect share endpoint "x" = 5% within 1%` (with `sample`).
    Share {
        /// Which decision field.
        what: ExpectField,
        /// The value whose share is counted.
        value: Spanned<String>,
        /// Expected share in basis points.
        share: Spanned<i64>,
        /// Allowed absolute deviation in basis points.
        tolerance: Spanned<i64>,
    },
}

/// Decision fields a test can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectField {
    /// The route name.
    Route,
    /// The rule name (`default` for the default).
    Rule,
    /// The chosen endpoint id.
    Endpoint,
    /// The chosen endpoint's logical model.
    Model,
    /// The strategy name.
    Strategy,
    /// The split arm index (0-based).
    Arm,
    /// The final request priority.
    Priority,
    /// `on`, `exact`, `off` or `default`.
    Cache,
    /// `off_peak` (the decision says `hold off_peak`) or `none`.
    Hold,
}

impl ExpectField {
    /// The keyword for this field.
    pub fn parse(s: &str) -> Option<ExpectField> {
        Some(match s {
            "route" => ExpectField::Route,
            "rule" => ExpectField::Rule,
            "endpoint" => ExpectField::Endpoint,
            "model" => ExpectField::Model,
            "strategy" => ExpectField::Strategy,
            "arm" => ExpectField::Arm,
            "priority" => ExpectField::Priority,
            "cache" => ExpectField::Cache,
            "hold" => ExpectField::Hold,
            _ => return None,
        })
    }

    /// The keyword of this field.
    pub fn as_str(self) -> &'static str {
        match self {
            ExpectField::Route => "route",
            ExpectField::Rule => "rule",
            ExpectField::Endpoint => "endpoint",
            ExpectField::Model => "model",
            ExpectField::Strategy => "strategy",
            ExpectField::Arm => "arm",
            ExpectField::Priority => "priority",
            ExpectField::Cache => "cache",
            ExpectField::Hold => "hold",
        }
    }
}
