//! Policy tests: `test "name" { ... }` blocks in policy files, checked with the set
//! and run by [`run_tests`] (the engine behind `switchyard test`).
//!
//! ```text
//! test "long prompts go to claude" {
//!   request { model = "gpt-4o", input_tokens = 150_000, header("x-team") = "search" }
//!   stats   { "anthropic/claude-sonnet" { health = 0.2 } }
//!   seed 7
//!   expect rule long_context
//!   expect endpoint "bedrock/claude-sonnet"
//! }
//! test "canary gets 5%" {
//!   request { model = "gpt-4o", header("x-team") = "search" }
//!   sample 20000 by api_key
//!   expect share model "gpt-4o-next" = 5% within 1%
//! }
//! ```
//! A distribution test (`sample N by KEY`) decides N requests whose key is
//! `key-0` .. `key-{N-1}` (for `random`, the seed is `seed + i`) and checks each
//! `expect share` within the tolerance, in percentage points. The requests are
//! decided in order, each on the statistics the one before left: its decision's
//! `on pick` updates are recorded into them as the gateway records them
//! ([`super::interp::Decision::record_state`]), so weighted round-robin splits by
//! weight as it does live. Outcomes (`on success` / `on failure`) never happen in a
//! test, and nothing else of the statistics changes.

use serde::Serialize;

use super::ast::*;
use super::check::Checker;
use super::checked::{CRoute, CSplitKey, CStrategy, CheckedPolicySet};
use super::diagnostic::{codes, Diagnostic};
use super::features::{Circuit, EndpointStats, RequestFeatures, StatsSnapshot};
use super::interp::{decide, Decision};
use crate::suggest::did_you_mean;

pub mod run;

pub use run::{run_tests_parallel, TestResults};

/// Largest `sample` count.
pub const MAX_SAMPLE: u64 = 1_000_000;

/// The default total budget of a set's tests, in test requests: a test without
/// `sample` decides one request, `sample N` decides N (each on every engine run).
/// Tests run in source order while the total fits; a test that would take the total
/// past the budget is skipped and reported, so one huge test cannot stall a reload.
/// The gateway uses this budget on every (re)load; `switchyard test --test-budget N`
/// sets another.
pub const DEFAULT_TEST_BUDGET: u64 = 200_000;

/// A checked policy test.
#[derive(Debug, Clone, PartialEq)]
pub struct CTest {
    /// Its name.
    pub name: String,
    /// The request.
    pub request: RequestFeatures,
    /// The endpoint statistics.
    pub stats: StatsSnapshot,
    /// The decision seed (default 0).
    pub seed: u64,
    /// Distribution test: number of requests and the key varied.
    pub sample: Option<(u64, CSplitKey)>,
    /// Expectations.
    pub expects: Vec<CExpect>,
    /// The definition.
    pub span: Span,
}

/// A checked expectation.
#[derive(Debug, Clone, PartialEq)]
pub struct CExpect {
    /// What is expected.
    pub kind: CExpectKind,
    /// The statement.
    pub span: Span,
}

/// Kinds of expectation.
#[derive(Debug, Clone, PartialEq)]
pub enum CExpectKind {
    /// A decision field equals a value.
    Is(ExpectField, String),
    /// A rejection with this status.
    Reject(u16),
    /// Share of a value among sampled decisions, basis points, with tolerance.
    Share(ExpectField, String, i64, i64),
}

/// Results of running every test of a set.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TestReport {
    /// One entry per test, in source order.
    pub cases: Vec<CaseResult>,
    /// Tests that passed.
    pub passed: usize,
    /// Tests that failed.
    pub failed: usize,
    /// Tests not run because they did not fit in the budget.
    pub skipped: usize,
    /// The total budget in test requests (`None`: unlimited).
    pub budget: Option<u64>,
    /// Test requests decided by the tests that ran.
    pub requests: u64,
    /// Of the passed tests, those whose inputs were unchanged since an earlier run
    /// and were checked on the compiled code alone ([`run::run_tests_parallel`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub reused: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The result of one test.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaseResult {
    /// Test name.
    pub name: String,
    /// `file:line:col` of the test.
    pub at: String,
    /// Whether every expectation held.
    pub passed: bool,
    /// One plain sentence per failed expectation, with its location.
    pub failures: Vec<String>,
    /// Whether the test was skipped (over the budget); `passed` is false then.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
}

impl TestReport {
    /// Human summary: one line per test and a total.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for c in &self.cases {
            out.push_str(&format!(
                "{} {} ({})\n",
                if c.skipped {
                    "SKIP"
                } else if c.passed {
                    "PASS"
                } else {
                    "FAIL"
                },
                c.name,
                c.at
            ));
            for f in &c.failures {
                out.push_str(&format!("    {f}\n"));
            }
        }
        out.push_str(&format!("{} passed, {} failed", self.passed, self.failed));
        if self.skipped > 0 {
            out.push_str(&format!(
                ", {} skipped: over the total test budget of {} requests",
                self.skipped,
                self.budget.unwrap_or(u64::MAX)
            ));
        }
        out.push('\n');
        out
    }
}

/// The value of decision field `f`, as tests spell it.
pub fn field_value(d: &Decision, f: ExpectField) -> String {
    field_str(d, f, |s| s.to_string())
}

/// Whether decision field `f` is `want`, as tests spell it (no allocation: it runs
/// for every request of a `sample`).
pub fn field_is(d: &Decision, f: ExpectField, want: &str) -> bool {
    match f {
        // The arm's decimal form without formatting it: the same number, written
        // without a sign or leading zeros.
        ExpectField::Arm => match &d.split {
            Some(a) => {
                let canonical = !want.starts_with('+') && (want == "0" || !want.starts_with('0'));
                canonical && want.parse::<u32>().ok() == Some(a.arm)
            }
            None => want == "none",
        },
        _ => field_str(d, f, |s| s == want),
    }
}

/// Applies `k` to the text of field `f` of `d` (an arm's number is formatted).
fn field_str<T>(d: &Decision, f: ExpectField, k: impl FnOnce(&str) -> T) -> T {
    fn s(o: &Option<crate::policy::names::Name>) -> &str {
        o.as_deref().unwrap_or("none")
    }
    match f {
        ExpectField::Route => k(s(&d.route)),
        ExpectField::Rule => k(s(&d.rule)),
        ExpectField::Endpoint => k(s(&d.endpoint)),
        ExpectField::Model => k(s(&d.model)),
        ExpectField::Strategy => k(s(&d.strategy)),
        ExpectField::Arm => match &d.split {
            Some(a) => k(&a.arm.to_string()),
            None => k("none"),
        },
        ExpectField::Priority => k(d.priority.as_str()),
        ExpectField::Cache => k(match d.cache {
            Some(c) if c.on && c.exact => "exact",
            Some(c) if c.on => "on",
            Some(_) => "off",
            None => "default",
        }),
        ExpectField::Hold => k(if d.hold_off_peak { "off_peak" } else { "none" }),
    }
}

/// Runs every test of `set` on the interpreter. Pure and deterministic.
pub fn run_tests(set: &CheckedPolicySet) -> TestReport {
    run_tests_with(set, &|r, s, seed| Ok(decide(set, r, s, seed)))
}

/// A decision procedure for [`run_tests_with`]: request, stats, seed → decision, or a
/// message that fails the test (e.g. two engines disagreeing). Called from several
/// threads at once.
pub type DecideFn<'a> =
    dyn Fn(&RequestFeatures, &StatsSnapshot, u64) -> Result<Decision, String> + Sync + 'a;

/// Runs every test of `set`, deciding with `decide` (an engine of
/// [`crate::policy::jit::engine`], or both compared). An `Err` from `decide` is a
/// failure of that test. Deterministic.
pub fn run_tests_with(set: &CheckedPolicySet, decide: &DecideFn<'_>) -> TestReport {
    run_tests_within(set, decide, None)
}

/// The number of test requests `t` decides: its `sample` count, else 1.
pub fn test_requests(t: &CTest) -> u64 {
    t.sample.as_ref().map_or(1, |(n, _)| *n)
}

/// The number of threads test runs use: the machine's parallelism.
pub fn test_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// As [`run_tests_with`], within a total `budget` of test requests
/// ([`DEFAULT_TEST_BUDGET`]; `None`: unlimited). A test whose requests
/// ([`test_requests`]) do not fit in what is left is skipped, with a sentence saying
/// so; later, smaller tests still run. The tests run on [`test_threads`] threads
/// ([`run::run_tests_parallel`]); the report is the same as one thread's.
pub fn run_tests_within(
    set: &CheckedPolicySet,
    decide: &DecideFn<'_>,
    budget: Option<u64>,
) -> TestReport {
    run::run_tests_parallel(set, decide, decide, budget, None, test_threads()).0
}

/// The report entry of test `t`, skipped: it decides `cost` requests and only `left`
/// of the total `budget` are left.
fn skipped_case(
    set: &CheckedPolicySet,
    t: &CTest,
    cost: u64,
    left: u64,
    budget: Option<u64>,
) -> CaseResult {
    CaseResult {
        name: t.name.clone(),
        at: set.sources.location(t.span),
        passed: false,
        failures: vec![format!(
            "not run: it decides {cost} requests and {left} of the total test budget of {} are left",
            budget.unwrap_or(u64::MAX)
        )],
        skipped: true,
    }
}

/// The failed expectations of a test without `sample`, given its decision.
fn expect_failures(set: &CheckedPolicySet, t: &CTest, d: &Decision) -> Vec<String> {
    let at = |e: &CExpect| set.sources.location(e.span);
    let mut failures = Vec::new();
    for e in &t.expects {
        match &e.kind {
            CExpectKind::Is(f, want) => {
                if !field_is(d, *f, want) {
                    failures.push(format!(
                        "{}: expected {} `{want}`, got `{}`",
                        at(e),
                        f.as_str(),
                        field_value(d, *f)
                    ));
                }
            }
            CExpectKind::Reject(status) => match &d.reject {
                Some(r) if r.status == *status => {}
                Some(r) => failures.push(format!(
                    "{}: expected a {status} rejection, got {} ({})",
                    at(e),
                    r.status,
                    r.message
                )),
                None => failures.push(format!(
                    "{}: expected a {status} rejection, but the request went to `{}`",
                    at(e),
                    d.endpoint.as_deref().unwrap_or("none")
                )),
            },
            CExpectKind::Share(..) => {}
        }
    }
    failures
}

/// The failures of test `t` from what its requests found: `failures` of its
/// expectations (a test without `sample`), the first request that failed to decide
/// (`error`), and the matches of each `expect share` (`counts`, by expectation).
fn failures_of(
    set: &CheckedPolicySet,
    t: &CTest,
    failures: Vec<String>,
    error: Option<(u64, String)>,
    counts: &[u64],
) -> Vec<String> {
    let at_test = set.sources.location(t.span);
    let Some((n, _)) = &t.sample else {
        return match error {
            Some((_, e)) => vec![format!("{at_test}: {e}")],
            None => failures,
        };
    };
    if let Some((i, e)) = error {
        return vec![format!("{at_test}: request {i}: {e}")];
    }
    let mut out = Vec::new();
    for (j, e) in t.expects.iter().enumerate() {
        if let CExpectKind::Share(f, v, share, tol) = &e.kind {
            let hits = counts.get(j).copied().unwrap_or(0);
            let got = (hits as f64) * 10_000.0 / (*n).max(1) as f64;
            if (got - *share as f64).abs() > *tol as f64 {
                out.push(format!(
                    "{}: expected {} `{v}` in {:.2}% ± {:.2}% of {n} requests, got {:.2}%",
                    set.sources.location(e.span),
                    f.as_str(),
                    *share as f64 / 100.0,
                    *tol as f64 / 100.0,
                    got / 100.0
                ));
            }
        }
    }
    out
}

/// Checks every `test` item of `files`.
pub(crate) fn check_tests(
    c: &mut Checker<'_>,
    files: &[PolicyFile],
    routes: &[CRoute],
    strategies: &[CStrategy],
) -> Vec<CTest> {
    // Names as written, including those of definitions that failed to check: a test
    // naming one gets no follow-on "no rule is named" error (the definition's own
    // error already says what is wrong).
    let mut declared: Vec<(ExpectField, &str)> = Vec::new();
    for item in files.iter().flat_map(|f| &f.items) {
        match item {
            Item::Route(r) => {
                declared.push((ExpectField::Route, &r.name.name));
                for ri in &r.items {
                    if let RouteItem::Rule(rule) = ri {
                        declared.push((ExpectField::Rule, &rule.name.name));
                    }
                }
            }
            Item::Strategy(s) => declared.push((ExpectField::Strategy, &s.name.name)),
            Item::Test(_) => {}
        }
    }
    let mut out = Vec::new();
    for item in files.iter().flat_map(|f| &f.items) {
        if let Item::Test(t) = item {
            if let Some(ct) = check_test(c, t, routes, strategies, &declared) {
                out.push(ct);
            }
        }
    }
    out
}

fn bad(c: &mut Checker<'_>, span: Span, msg: impl Into<String>) {
    c.diags.push(Diagnostic::error(codes::BAD_TEST, span, msg));
}

fn check_test(
    c: &mut Checker<'_>,
    t: &TestDef,
    routes: &[CRoute],
    strategies: &[CStrategy],
    declared: &[(ExpectField, &str)],
) -> Option<CTest> {
    let before = c.diags.len();
    let mut skipped = false;
    let mut seeded = false;
    let mut ct = CTest {
        name: t.name.node.clone(),
        request: RequestFeatures::for_model(""),
        stats: StatsSnapshot::default(),
        seed: 0,
        sample: None,
        expects: Vec::new(),
        span: t.span,
    };
    for item in &t.items {
        match item {
            TestItem::Request(fields, _) => {
                for a in fields {
                    request_field(c, &mut ct.request, a);
                }
            }
            TestItem::Stats(entries, _) => {
                for e in entries {
                    if c.registry.endpoint(&e.endpoint.node).is_none() {
                        c.diags.push(
                            Diagnostic::error(
                                codes::UNKNOWN_ENDPOINT,
                                e.endpoint.span,
                                format!(
                                    "the endpoint `{}` is not in the registry",
                                    e.endpoint.node
                                ),
                            )
                            .with_did_you_mean(did_you_mean(
                                &e.endpoint.node,
                                c.registry.endpoint_ids(),
                            )),
                        );
                        continue;
                    }
                    if ct.stats.endpoints.contains_key(&e.endpoint.node) {
                        bad(
                            c,
                            e.endpoint.span,
                            format!(
                                "the statistics of `{}` are given twice; write them in one entry",
                                e.endpoint.node
                            ),
                        );
                        continue;
                    }
                    let mut st = EndpointStats::default();
                    for (key, value) in &e.fields {
                        stats_field(c, &mut st, key, value);
                    }
                    ct.stats.endpoints.insert(e.endpoint.node.clone(), st);
                }
            }
            TestItem::Seed(s) => {
                if seeded {
                    bad(c, s.span, "a test can have only one `seed`");
                }
                seeded = true;
                ct.seed = s.node;
            }
            TestItem::Sample { count, key, span } => {
                if count.node == 0 || count.node > MAX_SAMPLE {
                    bad(
                        c,
                        count.span,
                        format!("`sample` takes 1 to {MAX_SAMPLE} requests"),
                    );
                }
                if ct.sample.is_some() {
                    bad(c, *span, "a test can have only one `sample`");
                }
                let k = match &key.kind {
                    SplitKeyKind::ApiKey => CSplitKey::ApiKey,
                    SplitKeyKind::Org => CSplitKey::Org,
                    SplitKeyKind::Header(h) => CSplitKey::Header(h.to_ascii_lowercase()),
                    SplitKeyKind::Metadata(m) => CSplitKey::Metadata(m.clone()),
                    SplitKeyKind::Random => CSplitKey::Random,
                };
                ct.sample = Some((count.node, k));
            }
            TestItem::Expect(e) => {
                if let Some(k) = expectation(c, e, routes, strategies, declared, &mut skipped) {
                    ct.expects.push(CExpect {
                        kind: k,
                        span: e.span,
                    });
                }
            }
        }
    }
    let shares = ct
        .expects
        .iter()
        .filter(|e| matches!(e.kind, CExpectKind::Share(..)))
        .count();
    if ct.sample.is_some() && shares != ct.expects.len() {
        bad(
            c,
            t.name.span,
            "a `sample` test can only have `expect share` expectations",
        );
    }
    if ct.sample.is_none() && shares > 0 {
        bad(
            c,
            t.name.span,
            "`expect share` needs `sample N by KEY` in the same test",
        );
    }
    if ct.expects.is_empty() && c.diags.len() == before && !skipped {
        bad(
            c,
            t.name.span,
            format!("the test \"{}\" expects nothing", t.name.node),
        );
    }
    (c.diags.len() == before && !skipped).then_some(ct)
}

fn request_field(c: &mut Checker<'_>, r: &mut RequestFeatures, a: &ReqAssign) {
    let v = &a.value;
    let str_val = |c: &mut Checker<'_>| match &v.kind {
        LitKind::Str(s) => Some(s.clone()),
        _ => {
            bad(c, v.span, "this request field takes a string");
            None
        }
    };
    let uint = |c: &mut Checker<'_>| match v.kind {
        LitKind::Int(i) if i >= 0 => Some(i as u64),
        _ => {
            bad(
                c,
                v.span,
                "this request field takes a whole number of 0 or more",
            );
            None
        }
    };
    let boolean = |c: &mut Checker<'_>| match v.kind {
        LitKind::Bool(b) => Some(b),
        _ => {
            bad(c, v.span, "this request field takes `true` or `false`");
            None
        }
    };
    match &a.key {
        ReqKey::Header(h) => {
            if let Some(s) = str_val(c) {
                r.headers.insert(h.to_ascii_lowercase(), s);
            }
        }
        ReqKey::Metadata(m) => {
            if let Some(s) = str_val(c) {
                r.metadata.insert(m.clone(), s);
            }
        }
        ReqKey::Field(f) => match f.name.as_str() {
            "model" => r.model = str_val(c).unwrap_or_default(),
            "task" => r.task = str_val(c).unwrap_or_default().into(),
            "api_key" => r.api_key = str_val(c).map(Into::into),
            "org" => r.org = str_val(c).map(Into::into),
            "input_tokens" => r.input_tokens = uint(c).unwrap_or(0),
            "max_tokens" => r.max_tokens = uint(c),
            "messages" => r.messages = uint(c).unwrap_or(0),
            "hour" => match uint(c) {
                Some(h @ 0..=23) => r.hour = h as u8,
                Some(_) => bad(c, v.span, "`hour` is 0 to 23 (UTC)"),
                None => {}
            },
            "weekday" => match uint(c) {
                Some(d @ 1..=7) => r.weekday = d as u8,
                Some(_) => bad(c, v.span, "`weekday` is 1 (Monday) to 7 (Sunday)"),
                None => {}
            },
            "stream" => r.stream = boolean(c).unwrap_or(false),
            // Written like a JWT's `scope` claim: space-separated tokens.
            "scopes" => r.set_scopes(str_val(c).unwrap_or_default().split_whitespace()),
            "tools" => r.tools = boolean(c).unwrap_or(false),
            "off_peak" => r.off_peak = boolean(c).unwrap_or(false),
            "temperature" => {
                r.temperature = match v.kind {
                    LitKind::Float(x) => Some(x),
                    LitKind::Int(i) => Some(i as f64),
                    _ => {
                        bad(c, v.span, "`temperature` takes a number");
                        None
                    }
                }
            }
            "budget_remaining" => match v.kind {
                LitKind::Float(x) => r.budget_remaining = x,
                LitKind::Int(i) => r.budget_remaining = i as f64,
                _ => bad(c, v.span, "`budget_remaining` takes a number (USD)"),
            },
            "priority" => match str_val(c).as_deref().map(|s| (s, PriorityLevel::parse(s))) {
                Some((_, Some(p))) => r.priority = p,
                Some((s, None)) => bad(c, v.span, format!("\"{s}\" is not a priority level")),
                None => {}
            },
            other => {
                let names: Vec<&str> = super::checked::ReqField::NAMED
                    .iter()
                    .map(|(n, ..)| *n)
                    .chain(["scopes"])
                    .collect();
                c.diags.push(
                    Diagnostic::error(
                        codes::BAD_TEST,
                        f.span,
                        format!("`{other}` is not a request field"),
                    )
                    .with_did_you_mean(did_you_mean(other, names)),
                );
            }
        },
    }
}

fn stats_field(c: &mut Checker<'_>, st: &mut EndpointStats, key: &[Ident], v: &Literal) {
    let num = match v.kind {
        LitKind::Float(x) => Some(x),
        LitKind::Int(i) | LitKind::Duration(i, _) => Some(i as f64),
        LitKind::Percent(bp) => Some(bp as f64 / 10_000.0),
        _ => None,
    };
    let names: Vec<&str> = key.iter().map(|i| i.name.as_str()).collect();
    let span = key.first().map(|k| k.span.to(v.span)).unwrap_or(v.span);
    if names == ["circuit"] {
        match &v.kind {
            LitKind::Str(name) => match Circuit::parse(name) {
                Some(state) => st.circuit = state,
                None => bad(
                    c,
                    v.span,
                    "a circuit is \"closed\", \"half_open\" or \"open\"",
                ),
            },
            _ => bad(
                c,
                v.span,
                "a circuit is a string: \"closed\", \"half_open\" or \"open\"",
            ),
        }
        return;
    }
    let Some(x) = num.or(if let LitKind::Bool(b) = v.kind {
        Some(f64::from(u8::from(b)))
    } else {
        None
    }) else {
        bad(c, v.span, "statistics are numbers");
        return;
    };
    match names.as_slice() {
        ["available"] => st.available = x != 0.0,
        ["health"] => st.health = x,
        ["latency_ewma_ms"] => st.latency_ewma_ms = x,
        ["ttft_ewma_ms"] => st.ttft_ewma_ms = x,
        ["capacity"] => st.capacity = x,
        ["error_rate"] => st.error_rate = x,
        ["in_flight"] => st.in_flight = x.max(0.0) as u64,
        ["cost_in"] => st.cost_in_per_token = Some(x),
        ["cost_out"] => st.cost_out_per_token = Some(x),
        ["context_window"] => st.context_window = Some(x.max(0.0) as u64),
        ["quality", cat] => {
            st.quality.insert((*cat).to_string(), x);
        }
        ["state", strat, slot] => {
            st.state
                .entry((*strat).to_string())
                .or_default()
                .insert((*slot).to_string(), x);
        }
        _ => {
            let known = [
                "available",
                "health",
                "latency_ewma_ms",
                "ttft_ewma_ms",
                "capacity",
                "error_rate",
                "in_flight",
                "cost_in",
                "cost_out",
                "context_window",
                "circuit",
            ];
            c.diags.push(
                Diagnostic::error(codes::BAD_TEST, span, format!("`{}` is not an endpoint statistic", names.join(".")))
                    .with_did_you_mean(did_you_mean(names.first().copied().unwrap_or(""), known))
                    .with_help("statistics are health, latency_ewma_ms, ttft_ewma_ms, capacity, error_rate, in_flight, cost_in, cost_out, context_window, circuit, available, quality.CATEGORY and state.STRATEGY.SLOT"),
            );
        }
    }
}

fn expectation(
    c: &mut Checker<'_>,
    e: &Expectation,
    routes: &[CRoute],
    strategies: &[CStrategy],
    declared: &[(ExpectField, &str)],
    skipped: &mut bool,
) -> Option<CExpectKind> {
    let (what, value) = match &e.kind {
        ExpectKind::Reject(s) => {
            if !(400..=599).contains(&s.node) {
                bad(c, s.span, "a rejection status is from 400 to 599");
                return None;
            }
            return Some(CExpectKind::Reject(s.node as u16));
        }
        ExpectKind::Is { what, value } | ExpectKind::Share { what, value, .. } => (*what, value),
    };
    let v = value.node.as_str();
    let names: Vec<String> = match what {
        ExpectField::Route => routes.iter().map(|r| r.name.clone()).collect(),
        ExpectField::Rule => routes
            .iter()
            .flat_map(|r| r.rules.iter().map(|x| x.name.clone()))
            .chain(["default".to_string()])
            .collect(),
        ExpectField::Endpoint => c.registry.endpoint_ids().map(String::from).collect(),
        ExpectField::Model => c.registry.model_names().map(String::from).collect(),
        ExpectField::Strategy => strategies
            .iter()
            .map(|s| s.name.clone())
            .chain(["priority".to_string()])
            .collect(),
        ExpectField::Priority => PriorityLevel::ALL
            .iter()
            .map(|(n, _)| n.to_string())
            .collect(),
        ExpectField::Cache => vec!["on".into(), "exact".into(), "off".into(), "default".into()],
        ExpectField::Hold => vec![HoldDef::OFF_PEAK.into()],
        ExpectField::Arm => vec![v.to_string()],
    };
    let known = names.iter().any(|n| n == v) || (v == "none" && what != ExpectField::Arm);
    if !known && declared.contains(&(what, v)) {
        // Declared but not checked: its definition's error is already reported.
        *skipped = true;
        return None;
    }
    if !known {
        c.diags.push(
            Diagnostic::error(
                codes::BAD_TEST,
                value.span,
                format!("no {} is named `{v}`", what.as_str()),
            )
            .with_did_you_mean(did_you_mean(v, names.iter().map(String::as_str))),
        );
        return None;
    }
    if what == ExpectField::Arm && v.parse::<u32>().is_err() {
        bad(c, value.span, "an arm is a number: 0 for the first arm");
        return None;
    }
    Some(match &e.kind {
        ExpectKind::Share {
            share, tolerance, ..
        } => CExpectKind::Share(what, v.to_string(), share.node, tolerance.node),
        _ => CExpectKind::Is(what, v.to_string()),
    })
}
