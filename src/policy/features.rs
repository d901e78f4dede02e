//! Per-request inputs of a decision: the request's features and a snapshot of endpoint
//! statistics. Both deserialize from JSON (all fields optional, with the defaults
//! below) so `dry-run` and policy tests can load them from files.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::ast::PriorityLevel;
use super::checked::EpField;
use super::registry::EndpointRef;

/// `request.budget_remaining` when no budget applies to the caller, USD (10^18: more
/// than any budget the config accepts, so `request.budget_remaining < X` is false).
pub const NO_BUDGET: f64 = 1e18;

/// What a policy can see of one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RequestFeatures {
    /// The logical model the client asked for (`request.model`).
    pub model: String,
    /// Estimated input tokens (`request.input_tokens`).
    pub input_tokens: u64,
    /// The output cap, if the client set one (`request.max_tokens`, optional).
    pub max_tokens: Option<u64>,
    /// Sampling temperature, if set (`request.temperature`, optional).
    pub temperature: Option<f64>,
    /// Server-sent events requested (`request.stream`).
    pub stream: bool,
    /// Tool definitions present (`request.tools`).
    pub tools: bool,
    /// Number of messages (`request.messages`).
    pub messages: u64,
    /// Header values by lowercased name (`header("name")`, optional).
    pub headers: BTreeMap<String, String>,
    /// Request metadata (`metadata("key")`, optional).
    pub metadata: BTreeMap<String, String>,
    /// The caller's API key id, never the key itself (`request.api_key`, optional).
    pub api_key: Option<Arc<str>>,
    /// The caller's organization (`request.org`, optional).
    pub org: Option<Arc<str>>,
    /// OAuth2 scopes of the caller's credential, sorted and deduplicated (`scope("name")`;
    /// empty for API keys and unverified callers). See [`RequestFeatures::set_scopes`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// Priority before the policy runs (`request.priority`, default `normal`).
    pub priority: PriorityLevel,
    /// UTC hour, 0 to 23 (`request.hour`).
    pub hour: u8,
    /// UTC weekday, 1 = Monday to 7 = Sunday (ISO 8601) (`request.weekday`).
    pub weekday: u8,
    /// Task category for quality scores: `chat`, `code` or `tool_use` (`request.task`,
    /// default `chat`; the gateway's classifier fills it, with one of those
    /// three constants: no allocation per request).
    pub task: Cow<'static, str>,
    /// The least spend left, USD, among the budgets of the caller's key and org for
    /// the current UTC day and month, as of admission (`request.budget_remaining`;
    /// default and without any budget: [`NO_BUDGET`]).
    pub budget_remaining: f64,
    /// Whether the gateway's configured off-peak window (`scheduler.off_peak`) holds
    /// now (`request.off_peak`); false when none is configured.
    pub off_peak: bool,
}

impl Default for RequestFeatures {
    fn default() -> Self {
        RequestFeatures {
            model: String::new(),
            input_tokens: 0,
            max_tokens: None,
            temperature: None,
            stream: false,
            tools: false,
            messages: 0,
            headers: BTreeMap::new(),
            metadata: BTreeMap::new(),
            api_key: None,
            org: None,
            scopes: Vec::new(),
            priority: PriorityLevel::default(),
            hour: 0,
            weekday: 0,
            task: Cow::Borrowed(""),
            budget_remaining: NO_BUDGET,
            off_peak: false,
        }
    }
}

impl RequestFeatures {
    /// A request for `model` with every other feature at its default.
    pub fn for_model(model: impl Into<String>) -> RequestFeatures {
        RequestFeatures {
            model: model.into(),
            weekday: 1,
            task: Cow::Borrowed("chat"),
            ..RequestFeatures::default()
        }
    }

    /// The header `name` (case-insensitive; names are kept lowercased).
    pub fn header(&self, name: &str) -> Option<&str> {
        match self.headers.get(name) {
            Some(v) => Some(v),
            // Only a name with capitals can differ from its lowercased form.
            None if name.bytes().any(|b| b.is_ascii_uppercase()) => self
                .headers
                .get(&name.to_ascii_lowercase())
                .map(String::as_str),
            None => None,
        }
    }

    /// Whether the caller's credential carries scope `name` (exact, case-sensitive,
    /// as OAuth2 scope tokens are). Does not rely on `scopes` being sorted, so a
    /// hand-built or deserialized list answers the same.
    pub fn has_scope(&self, name: &str) -> bool {
        self.scopes.iter().any(|s| s == name)
    }

    /// Sets `scopes` from any list of scope tokens: empty tokens dropped, sorted,
    /// deduplicated.
    pub fn set_scopes<S: Into<String>>(&mut self, scopes: impl IntoIterator<Item = S>) {
        self.scopes = normalize_scopes(scopes);
    }
}

/// Scope tokens as [`RequestFeatures::scopes`] keeps them: empty tokens dropped,
/// sorted, deduplicated.
pub fn normalize_scopes<S: Into<String>>(scopes: impl IntoIterator<Item = S>) -> Vec<String> {
    let mut v: Vec<String> = scopes
        .into_iter()
        .map(Into::into)
        .filter(|s| !s.is_empty())
        .collect();
    v.sort();
    v.dedup();
    v
}

/// Statistics of one endpoint at decision time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EndpointStats {
    /// Whether the runtime offers the endpoint to strategies. Default true; the live
    /// gateway takes it out while its circuit breaker is open (or its one half-open
    /// probe is out), and a `dry-run --stats` file can mark one unavailable.
    pub available: bool,
    /// Health H in [0, 1] (EWMA of outcomes, seed 001). Default 1.
    pub health: f64,
    /// EWMA latency in milliseconds. Default 0.
    pub latency_ewma_ms: f64,
    /// EWMA time to first token in milliseconds. Default 0.
    pub ttft_ewma_ms: f64,
    /// Rate-limit capacity C in [0, 1] (seed 000). Default 1.
    pub capacity: f64,
    /// Requests in flight. Default 0.
    pub in_flight: u64,
    /// EWMA error rate in [0, 1]. Default 0.
    pub error_rate: f64,
    /// USD per input token; default from the registry's price per 1M tokens.
    pub cost_in_per_token: Option<f64>,
    /// USD per output token; default from the registry's price per 1M tokens.
    pub cost_out_per_token: Option<f64>,
    /// Quality score in [0, 1] per task category (missing category reads as 0).
    pub quality: BTreeMap<String, f64>,
    /// Context window in tokens; default from the registry (config `context_window`),
    /// and 0 when neither says (`endpoint.context_window`).
    pub context_window: Option<u64>,
    /// The circuit breaker's state (`endpoint.circuit`). Default `closed`.
    pub circuit: Circuit,
    /// Strategy state: strategy name → slot name → value. Missing slots start at the
    /// strategy's declared initial value.
    pub state: BTreeMap<String, BTreeMap<String, f64>>,
}

impl Default for EndpointStats {
    /// An endpoint nothing is known about: the numbers of [`EpStats::UNKNOWN`], no
    /// quality scores, no strategy state.
    fn default() -> Self {
        let u = EpStats::UNKNOWN;
        EndpointStats {
            available: u.available,
            health: u.health,
            latency_ewma_ms: u.latency_ewma_ms,
            ttft_ewma_ms: u.ttft_ewma_ms,
            capacity: u.capacity,
            in_flight: u.in_flight,
            error_rate: u.error_rate,
            cost_in_per_token: u.cost_in_per_token,
            cost_out_per_token: u.cost_out_per_token,
            quality: BTreeMap::new(),
            context_window: u.context_window,
            circuit: u.circuit,
            state: BTreeMap::new(),
        }
    }
}

/// An endpoint's circuit-breaker state as policies see it: `endpoint.circuit` is the
/// string [`Circuit::as_str`] (`"closed"`, `"half_open"` or `"open"`), the same words
/// as `GET /admin/endpoints`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Circuit {
    /// Requests flow.
    #[default]
    Closed,
    /// The cooldown is over: one probe request may go (or is out).
    HalfOpen,
    /// Requests skip the endpoint until the cooldown ends.
    Open,
}

impl Circuit {
    /// Every state, in the order of [`Circuit::as_str`]'s documentation.
    pub const ALL: [Circuit; 3] = [Circuit::Closed, Circuit::HalfOpen, Circuit::Open];

    /// `closed`, `half_open` or `open`.
    pub fn as_str(self) -> &'static str {
        match self {
            Circuit::Closed => "closed",
            Circuit::HalfOpen => "half_open",
            Circuit::Open => "open",
        }
    }

    /// The state named `s`.
    pub fn parse(s: &str) -> Option<Circuit> {
        Circuit::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// Endpoint statistics by endpoint id; endpoints missing here use
/// [`EndpointStats::default`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StatsSnapshot {
    /// Endpoint id → statistics.
    pub endpoints: BTreeMap<String, EndpointStats>,
}

impl StatsSnapshot {
    /// Every value outside its documented range ([`EndpointStats`]), one sentence
    /// each naming the endpoint id and the field: `health`, `capacity`,
    /// `error_rate` and `quality` scores are fractions in [0, 1]; the latencies
    /// (milliseconds) and the costs (USD per token) are 0 or more. Strategy
    /// `state` slots have no range. Empty when all are in range.
    pub fn out_of_range(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (id, st) in &self.endpoints {
            let mut check = |field: &str, x: f64, hi: f64| {
                if !(0.0..=hi).contains(&x) {
                    let range = if hi == 1.0 {
                        "a fraction in [0, 1] (5% is 0.05)"
                    } else {
                        "0 or more"
                    };
                    out.push(format!("`{id}`: `{field}` is {x}; it is {range}"));
                }
            };
            check("health", st.health, 1.0);
            check("capacity", st.capacity, 1.0);
            check("error_rate", st.error_rate, 1.0);
            check("latency_ewma_ms", st.latency_ewma_ms, f64::INFINITY);
            check("ttft_ewma_ms", st.ttft_ewma_ms, f64::INFINITY);
            if let Some(c) = st.cost_in_per_token {
                check("cost_in_per_token", c, f64::INFINITY);
            }
            if let Some(c) = st.cost_out_per_token {
                check("cost_out_per_token", c, f64::INFINITY);
            }
            for (cat, q) in &st.quality {
                check(&format!("quality.{cat}"), *q, 1.0);
            }
        }
        out
    }

    /// Applies a decision's or an outcome's state update, as the gateway applies it
    /// to its live statistics (for tests and tools that replay decisions): the
    /// update's slots of its strategy take their new values, other slots keep theirs.
    pub fn apply(&mut self, u: &super::interp::StateUpdate) {
        let e = self.endpoints.entry(u.endpoint.to_string()).or_default();
        let m = e.state.entry(u.strategy.to_string()).or_default();
        for (k, v) in &u.slots {
            m.insert(k.to_string(), *v);
        }
    }

    /// The statistics of `id` (defaults if absent).
    pub fn get(&self, id: &str) -> std::borrow::Cow<'_, EndpointStats> {
        match self.endpoints.get(id) {
            Some(s) => std::borrow::Cow::Borrowed(s),
            None => std::borrow::Cow::Owned(EndpointStats::default()),
        }
    }
}

/// Where strategy state updates are written ([`super::interp::Decision::record_state`]):
/// the gateway's live statistics (`crate::stats::StatsStore`), or a [`StatsSnapshot`]
/// that a `sample` policy test carries from one request to the next.
pub trait StateSink {
    /// Writes `u`: its slots of its strategy for its endpoint take the new values,
    /// the endpoint's other slots keep theirs.
    fn record(&mut self, u: &super::interp::StateUpdate);
}

impl StateSink for StatsSnapshot {
    fn record(&mut self, u: &super::interp::StateUpdate) {
        self.apply(u);
    }
}

/// One endpoint's statistics as a decision reads them: numbers only, with the quality
/// score of the request's task category picked out (`endpoint.quality`). What
/// [`StatsSource::stats`] returns; the gateway builds it from an endpoint's atomics in
/// place, without copying maps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpStats {
    /// See [`EndpointStats::available`].
    pub available: bool,
    /// See [`EndpointStats::health`].
    pub health: f64,
    /// See [`EndpointStats::latency_ewma_ms`].
    pub latency_ewma_ms: f64,
    /// See [`EndpointStats::ttft_ewma_ms`].
    pub ttft_ewma_ms: f64,
    /// See [`EndpointStats::capacity`].
    pub capacity: f64,
    /// See [`EndpointStats::in_flight`].
    pub in_flight: u64,
    /// See [`EndpointStats::error_rate`].
    pub error_rate: f64,
    /// See [`EndpointStats::cost_in_per_token`].
    pub cost_in_per_token: Option<f64>,
    /// See [`EndpointStats::cost_out_per_token`].
    pub cost_out_per_token: Option<f64>,
    /// The quality score of the request's task category, in [0, 1] (0 when unknown).
    pub quality: f64,
    /// See [`EndpointStats::context_window`].
    pub context_window: Option<u64>,
    /// See [`EndpointStats::circuit`].
    pub circuit: Circuit,
}

impl EpStats {
    /// An endpoint nothing is known about (available, healthy, 0 ms, capacity 1, no
    /// cost, quality 0, circuit closed): what [`EndpointStats::default`] gives for any
    /// task, and where its numbers come from.
    /// A constant, since a policy test or `dry-run` asks for it for every endpoint of
    /// every decision without statistics, and building it through an
    /// [`EndpointStats`] made and dropped two maps each time (issue 17).
    pub const UNKNOWN: EpStats = EpStats {
        available: true,
        health: 1.0,
        latency_ewma_ms: 0.0,
        ttft_ewma_ms: 0.0,
        capacity: 1.0,
        in_flight: 0,
        error_rate: 0.0,
        cost_in_per_token: None,
        cost_out_per_token: None,
        quality: 0.0,
        context_window: None,
        circuit: Circuit::Closed,
    };
}

/// The endpoint fields a strategy can read as a column ([`StatsSource::numbers`]):
/// live numbers that need none of the rest of the statistics. The one list of
/// them; [`EpStats::number`] and the live store's reading match on it exhaustively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveNumber {
    /// `endpoint.health`, in [0, 1].
    Health,
    /// `endpoint.latency_ewma_ms`, ms.
    LatencyEwmaMs,
    /// `endpoint.ttft_ewma_ms`, ms.
    TtftEwmaMs,
    /// `endpoint.capacity`, in [0, 1].
    Capacity,
    /// `endpoint.error_rate`, in [0, 1].
    ErrorRate,
}

impl LiveNumber {
    /// The live number field `f` is, if it is one.
    pub fn of(f: EpField) -> Option<LiveNumber> {
        Some(match f {
            EpField::Health => LiveNumber::Health,
            EpField::LatencyEwmaMs => LiveNumber::LatencyEwmaMs,
            EpField::TtftEwmaMs => LiveNumber::TtftEwmaMs,
            EpField::Capacity => LiveNumber::Capacity,
            EpField::ErrorRate => LiveNumber::ErrorRate,
            _ => return None,
        })
    }
}

impl EpStats {
    /// The value of live number `n`.
    #[inline]
    pub fn number(&self, n: LiveNumber) -> f64 {
        match n {
            LiveNumber::Health => self.health,
            LiveNumber::LatencyEwmaMs => self.latency_ewma_ms,
            LiveNumber::TtftEwmaMs => self.ttft_ewma_ms,
            LiveNumber::Capacity => self.capacity,
            LiveNumber::ErrorRate => self.error_rate,
        }
    }
}

impl Default for EpStats {
    /// [`EpStats::UNKNOWN`].
    fn default() -> Self {
        EpStats::UNKNOWN
    }
}

impl EndpointStats {
    /// The numbers a decision for a request of task category `task` reads.
    pub fn for_task(&self, task: &str) -> EpStats {
        EpStats {
            available: self.available,
            health: self.health,
            latency_ewma_ms: self.latency_ewma_ms,
            ttft_ewma_ms: self.ttft_ewma_ms,
            capacity: self.capacity,
            in_flight: self.in_flight,
            error_rate: self.error_rate,
            cost_in_per_token: self.cost_in_per_token,
            cost_out_per_token: self.cost_out_per_token,
            quality: self.quality.get(task).copied().unwrap_or(0.0),
            context_window: self.context_window,
            circuit: self.circuit,
        }
    }
}

/// Where a decision reads endpoint statistics: a [`StatsSnapshot`] (policy tests,
/// `dry-run --stats`, `/admin/endpoints`) or the gateway's live store read in place
/// (`crate::stats::LiveStats`), so a decision costs only the endpoints it looks at,
/// not a copy of every endpoint's statistics, and allocates nothing for them.
///
/// A source is read for the candidates of the request's model (and of any model a
/// route names), each at most a few times per decision. Endpoints are named by
/// registry index and id ([`crate::policy::registry::EndpointRef`]); a source that
/// does not know one answers with the defaults ([`EndpointStats::default`]).
pub trait StatsSource {
    /// The statistics of the endpoint for a request of task category `task`.
    fn stats(&self, index: usize, id: &str, task: &str) -> EpStats;

    /// Whether the runtime offers the endpoint to strategies
    /// ([`EndpointStats::available`]), without reading the rest.
    fn available(&self, index: usize, id: &str) -> bool;

    /// Keeps the endpoints of `v` the runtime offers to strategies
    /// ([`StatsSource::available`] of each), in order. One call per candidate list:
    /// through `dyn StatsSource` this is one indirect call for the whole list, and
    /// each source's own `available` is called directly (issue 17: a model with 128
    /// endpoints paid an indirect call per endpoint per decision).
    fn retain_available(&self, v: &mut smallvec::SmallVec<[EndpointRef<'_>; 8]>) {
        retain_where(v, |e| self.available(e.index, &e.endpoint.id));
    }

    /// Writes live number `n` of each endpoint of `eps` into `out` (`out[k]` for
    /// `eps[k]`), each equal to `self.stats(..).number(n)`. A strategy that reads one
    /// or two numbers of each of a model's endpoints then needs neither their whole
    /// statistics (the breaker's state, the quality map's lookup by task, every
    /// EWMA) nor a copy of them per candidate (issue 17). The default reads the
    /// whole statistics.
    fn numbers(&self, eps: &[EndpointRef<'_>], n: LiveNumber, out: &mut [f64]) {
        for (v, e) in out.iter_mut().zip(eps) {
            *v = self.stats(e.index, &e.endpoint.id, "").number(n);
        }
    }

    /// Calls `f` with the endpoint's state slots for strategy `strategy` (slot name →
    /// value, [`EndpointStats::state`]), if it holds any; not at all otherwise.
    fn state(
        &self,
        index: usize,
        id: &str,
        strategy: &str,
        f: &mut dyn FnMut(&BTreeMap<String, f64>),
    );

    /// The state slots named `slots` of strategy `strategy` for every endpoint of
    /// `eps`, row by row: `out[k * slots.len() + j]` becomes endpoint `k`'s slot `j`
    /// (left as it is where the endpoint holds none). The default asks
    /// [`StatsSource::state`] endpoint by endpoint; a source that can look the names
    /// up once for all endpoints does so.
    fn states(
        &self,
        eps: &[EndpointRef<'_>],
        strategy: &str,
        slots: &[&str],
        out: &mut [Option<f64>],
    ) {
        let n = slots.len();
        for (e, row) in eps.iter().zip(out.chunks_mut(n.max(1))) {
            self.state(e.index, &e.endpoint.id, strategy, &mut |m| {
                for (v, name) in row.iter_mut().zip(slots) {
                    *v = m.get(*name).copied();
                }
            });
        }
    }
}

/// Keeps the endpoints of `v` for which `keep` holds, in order: what
/// [`StatsSource::retain_available`] does with a source's own `available`.
pub fn retain_where<'a>(
    v: &mut smallvec::SmallVec<[EndpointRef<'a>; 8]>,
    keep: impl Fn(&EndpointRef<'a>) -> bool,
) {
    // Compacts in place over one slice (`SmallVec::retain` swaps element by
    // element, and indexing the `SmallVec` itself checks where it lives each time).
    let s = v.as_mut_slice();
    let mut kept = 0;
    for i in 0..s.len() {
        let e = s[i];
        if keep(&e) {
            s[kept] = e;
            kept += 1;
        }
    }
    v.truncate(kept);
}

impl StatsSource for StatsSnapshot {
    fn stats(&self, _index: usize, id: &str, task: &str) -> EpStats {
        match self.endpoints.get(id) {
            Some(s) => s.for_task(task),
            None => EpStats::UNKNOWN,
        }
    }

    fn available(&self, _index: usize, id: &str) -> bool {
        self.endpoints.get(id).is_none_or(|s| s.available)
    }

    fn state(
        &self,
        _index: usize,
        id: &str,
        strategy: &str,
        f: &mut dyn FnMut(&BTreeMap<String, f64>),
    ) {
        if let Some(m) = self.endpoints.get(id).and_then(|s| s.state.get(strategy)) {
            f(m);
        }
    }
}

/// What happened to a request sent to an endpoint, for `on success` / `on failure`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Outcome {
    /// Total latency in milliseconds (`outcome.latency_ms`).
    pub latency_ms: f64,
    /// Time to first token in milliseconds (`outcome.ttft_ms`).
    pub ttft_ms: f64,
    /// Input tokens billed (`outcome.input_tokens`).
    pub input_tokens: u64,
    /// Output tokens billed (`outcome.output_tokens`).
    pub output_tokens: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_endpoint_stats_are_the_default_endpoint_stats_for_any_task() {
        let mut known = EndpointStats::default();
        assert_eq!(EpStats::UNKNOWN, known.for_task(""));
        assert_eq!(EpStats::UNKNOWN, known.for_task("code"));
        known.quality.insert("code".into(), 0.9);
        assert_ne!(EpStats::UNKNOWN, known.for_task("code"));
        assert_eq!(EpStats::default(), EpStats::UNKNOWN);
    }
}
