//! Telemetry: every metric name Switchyard exports, their help texts, and the
//! Prometheus recorder. Metric names live only here, so a dashboard can be checked
//! against one file; the modules that count import the names.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `switchyard_requests_total` | counter | `model`, `endpoint`, `status` |
//! | `switchyard_request_duration_seconds` | histogram | `model`, `endpoint` |
//! | `switchyard_ttft_seconds` | histogram (streams) | `model`, `endpoint` |
//! | `switchyard_upstream_errors_total` | counter | `endpoint`, `kind` |
//! | `switchyard_in_flight_requests` | gauge | none |
//! | `switchyard_circuit_state` | gauge (0 closed, 1 open, 2 half-open) | `endpoint` |
//! | `switchyard_policy_reloads_total` | counter | `outcome` (`ok`, `failed`, `unchanged`) |
//! | `switchyard_policy_reload_duration_seconds` | histogram | none |
//! | `switchyard_policy_compiled_modules` | gauge | none |
//! | `switchyard_policy_version_info` | gauge | `version` |
//! | `switchyard_spend_usd_total` | gauge (only rises) | `key`, `org`, `model` |
//! | `switchyard_limit_backend_errors_total` | counter | none |
//! | `switchyard_cache_hits_total` | counter | `kind` (`exact`, `semantic`), `tier` (`l1`, `l2`) |
//! | `switchyard_cache_misses_total` | counter | none |
//! | `switchyard_cache_bypasses_total` | counter | `reason` (`request`, `policy`, `uncacheable`) |
//! | `switchyard_cache_stores_total` | counter | none |
//! | `switchyard_cache_evictions_total` | counter | none |
//! | `switchyard_cache_l2_errors_total` | counter | none |
//! | `switchyard_cache_bytes` | gauge | none |
//! | `switchyard_cache_tokens_saved_total` | counter | none |
//! | `switchyard_cache_usd_saved_total` | gauge (only rises) | `model` |
//! | `switchyard_queue_depth` | gauge | `endpoint`, `priority` |
//! | `switchyard_queue_wait_seconds` | histogram | `endpoint`, `priority` |
//! | `switchyard_queue_admitted_total` | counter | `endpoint`, `priority` |
//! | `switchyard_queue_timeouts_total` | counter | `endpoint`, `priority` |
//! | `switchyard_queue_full_total` | counter | `endpoint`, `priority` |
//! | `switchyard_queue_abandoned_total` | counter | `endpoint`, `priority` |
//! | `switchyard_endpoint_in_flight` | gauge | `endpoint` (endpoints with `max_in_flight`) |
//! | `switchyard_offpeak_held` | gauge | none |
//! | `switchyard_offpeak_released_total` | counter | `reason` (`window`, `max_wait`, `full`) |
//! | `switchyard_tokens_total` | counter | `model`, `endpoint`, `kind` (`input`, `output`, `cached`, `reasoning`) |
//! | `switchyard_cost_usd_total` | gauge (only rises) | `model`, `endpoint`, `key`, `org` (the last two `all` with `server.metrics_caller_labels: false`) |
//! | `switchyard_attempts_total` | counter | `endpoint`, `outcome` (`ok`, `failed`) |
//! | `switchyard_retries_total` | counter | `endpoint` |
//! | `switchyard_fallbacks_total` | counter | `model` |
//! | `switchyard_build_info` | gauge (always 1) | `version`, `commit` |
//! | `switchyard_otel_spans_dropped_total` | counter | none |
//! | `switchyard_access_log_dropped_total` | counter | none |
//!
//! `endpoint` is `none` when a request failed before an endpoint was chosen; `status`
//! is the HTTP status, or `stream_error` / `client_gone` for streams that began with
//! 200 and ended otherwise.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Requests served, by model, endpoint and final status.
pub const REQUESTS: &str = "switchyard_requests_total";
/// Whole-request latency in seconds (to the last byte for streams).
pub const DURATION: &str = "switchyard_request_duration_seconds";
/// Time to first token in seconds, streams only.
pub const TTFT: &str = "switchyard_ttft_seconds";
/// Upstream failures by endpoint and error kind.
pub const UPSTREAM_ERRORS: &str = "switchyard_upstream_errors_total";
/// Requests currently being served.
pub const IN_FLIGHT: &str = "switchyard_in_flight_requests";
/// Each endpoint's circuit (label `endpoint`): 0 closed, 1 open, 2 half-open.
pub const CIRCUIT_STATE: &str = "switchyard_circuit_state";
/// Policy reloads by outcome: `ok`, `failed`, `unchanged`.
pub const RELOADS: &str = "switchyard_policy_reloads_total";
/// Time from a reload trigger to the swap (or refusal), seconds.
pub const RELOAD_DURATION: &str = "switchyard_policy_reload_duration_seconds";
/// Compiled policy modules alive (the serving set, plus older sets still finishing
/// requests).
pub const COMPILED_MODULES: &str = "switchyard_policy_compiled_modules";
/// Request body bytes buffered now, against `server.max_buffered_bytes` (bytes; set
/// when `/metrics` is scraped).
pub const BUFFERED_BODY_BYTES: &str = "switchyard_buffered_body_bytes";
/// 1 for the active policy version (label `version`), 0 for replaced ones.
pub const VERSION_INFO: &str = "switchyard_policy_version_info";

/// Spend in USD from actual usage and provider prices, by API key id, org and model
/// (`none` when absent). A gauge because the value is fractional; it only rises.
pub const SPEND: &str = "switchyard_spend_usd_total";
/// Failed or timed-out calls to the shared limiter state (Redis).
pub const LIMIT_BACKEND_ERRORS: &str = "switchyard_limit_backend_errors_total";

/// Requests answered from the response cache, by `kind` (`exact`: identical
/// normalized text; `semantic`: within τ and verified) and `tier` (`l1`, `l2`).
pub const CACHE_HITS: &str = "switchyard_cache_hits_total";
/// Cacheable requests whose lookup found nothing servable.
pub const CACHE_MISSES: &str = "switchyard_cache_misses_total";
/// Requests caching applied to that did not read the cache, by `reason`: `request`
/// (`cache-control` or `x-switchyard-cache: off`), `policy` (`cache off`),
/// `uncacheable` (temperature not 0, `n` > 1).
pub const CACHE_BYPASSES: &str = "switchyard_cache_bypasses_total";
/// Complete answers written to the cache.
pub const CACHE_STORES: &str = "switchyard_cache_stores_total";
/// Entries evicted from L1 for room or expired.
pub const CACHE_EVICTIONS: &str = "switchyard_cache_evictions_total";
/// Failed or timed-out calls to the L2 cache (Redis); each counted as a miss.
pub const CACHE_L2_ERRORS: &str = "switchyard_cache_l2_errors_total";
/// Payload bytes held in the L1 cache.
pub const CACHE_BYTES: &str = "switchyard_cache_bytes";
/// Provider tokens (prompt + completion of the original answer) not spent because
/// a hit answered.
pub const CACHE_TOKENS_SAVED: &str = "switchyard_cache_tokens_saved_total";
/// USD not spent because a hit answered (the original endpoint's prices), by
/// logical `model`. A gauge because the value is fractional; it only rises.
pub const CACHE_USD_SAVED: &str = "switchyard_cache_usd_saved_total";

/// Requests waiting for a slot of an endpoint with `max_in_flight`, by `endpoint`
/// and `priority` (`high`, `normal`, `low`).
pub const QUEUE_DEPTH: &str = "switchyard_queue_depth";
/// Time queued requests waited for their slot, seconds (admitted ones only).
pub const QUEUE_WAIT: &str = "switchyard_queue_wait_seconds";
/// Requests given a slot (at once or after waiting), by `endpoint` and `priority`
/// (`critical` included).
pub const QUEUE_ADMITTED: &str = "switchyard_queue_admitted_total";
/// Requests that waited their level's `queue_timeout_ms` and got 503.
pub const QUEUE_TIMEOUTS: &str = "switchyard_queue_timeouts_total";
/// Requests refused with 503 because `max_queued` were already waiting.
pub const QUEUE_FULL: &str = "switchyard_queue_full_total";
/// Queued requests whose client went away before they got a slot.
pub const QUEUE_ABANDONED: &str = "switchyard_queue_abandoned_total";
/// Attempts in flight to each endpoint with `max_in_flight`.
pub const ENDPOINT_IN_FLIGHT: &str = "switchyard_endpoint_in_flight";
/// Low-priority requests held for the off-peak window now.
pub const OFFPEAK_HELD: &str = "switchyard_offpeak_held";
/// Held requests let go, by `reason`: `window` (it opened), `max_wait`, or `full`
/// (`max_held` were already held, so the request was dispatched at once).
pub const OFFPEAK_RELEASED: &str = "switchyard_offpeak_released_total";
/// Provider tokens of served requests, by logical `model`, serving `endpoint` and
/// `kind`: `input`, `output`, and the parts of them `cached` (input read from the
/// provider's prompt cache) and `reasoning` (output spent on reasoning).
pub const TOKENS: &str = "switchyard_tokens_total";
/// USD cost of served requests from the serving endpoint's provider prices, by
/// `model`, `endpoint`, caller `key` id and `org` (`none` when absent; `all` when
/// `server.metrics_caller_labels` is off). A gauge because the value is fractional;
/// it only rises.
pub const COST: &str = "switchyard_cost_usd_total";
/// Upstream attempts, by `endpoint` and `outcome` (`ok`: its answer went to the
/// client; `failed`).
pub const ATTEMPTS: &str = "switchyard_attempts_total";
/// Attempts that repeated the previous attempt's endpoint, by `endpoint`.
pub const RETRIES: &str = "switchyard_retries_total";
/// Attempts that moved to another endpoint after a failure (a fallback), by logical
/// `model`.
pub const FALLBACKS: &str = "switchyard_fallbacks_total";
/// Always 1; labels `version` (the crate version) and `commit` (see [`COMMIT`]).
pub const BUILD_INFO: &str = "switchyard_build_info";

/// Spans dropped because the trace export queue was full (`crate::otel`).
pub const OTEL_SPANS_DROPPED: &str = "switchyard_otel_spans_dropped_total";
/// Access lines not written to the access-log file because its queue was full
/// (`crate::logging`; set when `/metrics` is scraped).
pub const ACCESS_LOG_DROPPED: &str = "switchyard_access_log_dropped_total";

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit the binary was built from (12 hex digits), `unknown` outside a
/// git checkout (`build.rs`).
pub const COMMIT: &str = env!("SWITCHYARD_COMMIT");
/// What `switchyard --version` prints after the name: version and commit.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SWITCHYARD_COMMIT"),
    ")"
);

/// Latency buckets in seconds: 5 ms to 5 minutes.
const BUCKETS: [f64; 16] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process-wide Prometheus recorder once and returns its handle (the same
/// handle on later calls). `None` if another recorder was installed first.
pub fn install() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &BUCKETS)
                .ok()?;
            let handle = builder.install_recorder().ok()?;
            metrics::describe_counter!(REQUESTS, "Requests served, by model, endpoint and status.");
            metrics::describe_histogram!(
                DURATION,
                metrics::Unit::Seconds,
                "Request latency, to the last byte for streams."
            );
            metrics::describe_histogram!(
                TTFT,
                metrics::Unit::Seconds,
                "Time to first token of streams."
            );
            metrics::describe_counter!(UPSTREAM_ERRORS, "Upstream failures by endpoint and kind.");
            metrics::describe_gauge!(IN_FLIGHT, "Requests currently being served.");
            metrics::describe_gauge!(
                CIRCUIT_STATE,
                "Circuit of each endpoint: 0 closed, 1 open, 2 half-open."
            );
            metrics::describe_counter!(RELOADS, "Policy reloads by outcome.");
            metrics::describe_histogram!(
                RELOAD_DURATION,
                metrics::Unit::Seconds,
                "Time from a reload trigger to the swap or refusal."
            );
            metrics::describe_gauge!(COMPILED_MODULES, "Compiled policy modules alive.");
            metrics::describe_gauge!(
                BUFFERED_BODY_BYTES,
                metrics::Unit::Bytes,
                "Request body bytes buffered now (budget: server.max_buffered_bytes)."
            );
            metrics::describe_gauge!(VERSION_INFO, "1 for the serving policy version.");
            metrics::describe_gauge!(SPEND, "Spend in USD by API key id, org and model.");
            metrics::describe_counter!(
                LIMIT_BACKEND_ERRORS,
                "Failed or timed-out calls to the rate-limit state (Redis)."
            );
            metrics::describe_counter!(
                CACHE_HITS,
                "Requests answered from the cache, by kind and tier."
            );
            metrics::describe_counter!(CACHE_MISSES, "Cache lookups that found nothing servable.");
            metrics::describe_counter!(
                CACHE_BYPASSES,
                "Requests that did not read the cache, by reason."
            );
            metrics::describe_counter!(CACHE_STORES, "Complete answers written to the cache.");
            metrics::describe_counter!(
                CACHE_EVICTIONS,
                "Cache entries evicted for room or expired."
            );
            metrics::describe_counter!(
                CACHE_L2_ERRORS,
                "Failed or timed-out calls to the L2 cache (Redis)."
            );
            metrics::describe_gauge!(
                CACHE_BYTES,
                "Bytes held in the L1 cache: answers and their prompts, normalized and canonical."
            );
            metrics::describe_counter!(
                CACHE_TOKENS_SAVED,
                "Provider tokens not spent thanks to cache hits."
            );
            metrics::describe_gauge!(
                CACHE_USD_SAVED,
                "USD not spent thanks to cache hits, by model."
            );
            metrics::describe_gauge!(
                QUEUE_DEPTH,
                "Requests waiting for an endpoint slot, by endpoint and priority."
            );
            metrics::describe_histogram!(
                QUEUE_WAIT,
                metrics::Unit::Seconds,
                "Time queued requests waited for their endpoint slot."
            );
            metrics::describe_counter!(
                QUEUE_ADMITTED,
                "Requests given an endpoint slot, by endpoint and priority."
            );
            metrics::describe_counter!(QUEUE_TIMEOUTS, "Queued requests that timed out with 503.");
            metrics::describe_counter!(
                QUEUE_FULL,
                "Requests refused because the endpoint queue was full."
            );
            metrics::describe_counter!(QUEUE_ABANDONED, "Queued requests whose client went away.");
            metrics::describe_gauge!(
                ENDPOINT_IN_FLIGHT,
                "Attempts in flight per endpoint with max_in_flight."
            );
            metrics::describe_gauge!(
                OFFPEAK_HELD,
                "Low-priority requests held for the off-peak window."
            );
            metrics::describe_counter!(OFFPEAK_RELEASED, "Held requests let go, by reason.");
            metrics::describe_counter!(
                TOKENS,
                "Provider tokens of served requests, by model, endpoint and kind (input, output, cached, reasoning)."
            );
            metrics::describe_gauge!(
                COST,
                "USD cost of served requests from provider prices, by model, endpoint, key id and org."
            );
            metrics::describe_counter!(ATTEMPTS, "Upstream attempts by endpoint and outcome.");
            metrics::describe_counter!(
                RETRIES,
                "Attempts that retried the previous attempt's endpoint."
            );
            metrics::describe_counter!(
                FALLBACKS,
                "Attempts that moved to another endpoint after a failure, by model."
            );
            metrics::describe_counter!(
                OTEL_SPANS_DROPPED,
                "Spans dropped because the trace export queue was full."
            );
            metrics::describe_counter!(
                ACCESS_LOG_DROPPED,
                "Access lines not written to the access-log file because its queue was full."
            );
            metrics::describe_gauge!(BUILD_INFO, "Always 1: the version and commit serving.");
            metrics::gauge!(BUILD_INFO, "version" => VERSION, "commit" => COMMIT).set(1.0);
            Some(handle)
        })
        .clone()
}

/// Runs the recorder's upkeep (histogram draining) every 5 s, forever.
pub async fn upkeep(handle: PrometheusHandle) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tick.tick().await;
        handle.run_upkeep();
        metrics::gauge!(COMPILED_MODULES).set(crate::policy::jit::live_compiled_modules() as f64);
    }
}

/// The standard Prometheus process metrics (the names the Prometheus client
/// libraries export, <https://prometheus.io/docs/instrumenting/writing_clientlibs/#process-metrics>),
/// read from `/proc/self` when `/metrics` is scraped, so the request path pays
/// nothing: `process_cpu_seconds_total` (user + system CPU, seconds),
/// `process_resident_memory_bytes`, `process_virtual_memory_bytes`,
/// `process_open_fds`, `process_max_fds`, `process_threads` and
/// `process_start_time_seconds` (Unix time). On a system without `/proc` nothing is
/// exported.
pub mod process {
    /// Reads `/proc/self` and sets the gauges; a file that cannot be read leaves its
    /// series out.
    pub fn record() {
        static DESCRIBED: std::sync::Once = std::sync::Once::new();
        DESCRIBED.call_once(|| {
            // A gauge: `metrics` counters are whole numbers, and CPU seconds are not.
            metrics::describe_gauge!(
                "process_cpu_seconds_total",
                metrics::Unit::Seconds,
                "Total user and system CPU time spent, in seconds."
            );
            metrics::describe_gauge!(
                "process_resident_memory_bytes",
                metrics::Unit::Bytes,
                "Resident memory size, in bytes."
            );
            metrics::describe_gauge!(
                "process_virtual_memory_bytes",
                metrics::Unit::Bytes,
                "Virtual memory size, in bytes."
            );
            metrics::describe_gauge!("process_open_fds", "Open file descriptors.");
            metrics::describe_gauge!("process_max_fds", "Limit of open file descriptors.");
            metrics::describe_gauge!("process_threads", "Operating-system threads.");
            metrics::describe_gauge!(
                "process_start_time_seconds",
                metrics::Unit::Seconds,
                "Start time of the process since the Unix epoch, in seconds."
            );
        });
        let Some(s) = read_stat() else { return };
        // The clock tick of /proc times; 100 on every Linux ABI in use.
        const TICKS: f64 = 100.0;
        const PAGE: f64 = 4096.0;
        metrics::gauge!("process_cpu_seconds_total").set((s.utime + s.stime) as f64 / TICKS);
        metrics::gauge!("process_resident_memory_bytes").set(s.rss_pages as f64 * PAGE);
        metrics::gauge!("process_virtual_memory_bytes").set(s.vsize as f64);
        metrics::gauge!("process_threads").set(s.threads as f64);
        if let Some(boot) = boot_time() {
            metrics::gauge!("process_start_time_seconds").set(boot + s.start_ticks as f64 / TICKS);
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            metrics::gauge!("process_open_fds").set(dir.count() as f64);
        }
        if let Some(max) = max_fds() {
            metrics::gauge!("process_max_fds").set(max);
        }
    }

    /// The fields of `/proc/self/stat` used here.
    #[derive(Debug, PartialEq)]
    pub(crate) struct Stat {
        pub utime: u64,
        pub stime: u64,
        pub threads: u64,
        pub start_ticks: u64,
        pub vsize: u64,
        pub rss_pages: u64,
    }

    fn read_stat() -> Option<Stat> {
        parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)
    }

    /// Parses a `/proc/PID/stat` line (proc(5)); the command name, in parentheses,
    /// may hold spaces and parentheses, so fields are counted after its last `)`.
    pub(crate) fn parse_stat(line: &str) -> Option<Stat> {
        let rest = &line[line.rfind(')')? + 1..];
        // Fields from 3 (state) on; proc(5) numbers them from 1.
        let f: Vec<&str> = rest.split_whitespace().collect();
        let at = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
        Some(Stat {
            utime: at(14)?,
            stime: at(15)?,
            threads: at(20)?,
            start_ticks: at(22)?,
            vsize: at(23)?,
            rss_pages: at(24)?,
        })
    }

    fn boot_time() -> Option<f64> {
        let text = std::fs::read_to_string("/proc/stat").ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())
    }

    fn max_fds() -> Option<f64> {
        let text = std::fs::read_to_string("/proc/self/limits").ok()?;
        let line = text.lines().find(|l| l.starts_with("Max open files"))?;
        line.split_whitespace().nth(3)?.parse::<f64>().ok()
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_stat_line_with_spaces_and_parentheses_in_the_name_parses() {
            let line = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 9 0 123456 987654321 2048 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
            assert_eq!(
                parse_stat(line),
                Some(Stat {
                    utime: 250,
                    stime: 75,
                    threads: 9,
                    start_ticks: 123456,
                    vsize: 987654321,
                    rss_pages: 2048,
                })
            );
            assert_eq!(parse_stat("garbage"), None);
            assert_eq!(parse_stat("1 (x) S 1 2"), None);
        }

        #[test]
        fn this_process_reads() {
            let s = read_stat().expect("/proc/self/stat on Linux");
            assert!(s.threads >= 1 && s.rss_pages > 0, "{s:?}");
        }
    }
}
