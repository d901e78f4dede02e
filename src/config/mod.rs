//! Gateway configuration: `switchyard.yaml`, validated into typed form.
//!
//! Loading happens in two steps, as linkerd and Pingora do it: the YAML is parsed into
//! a generic tree, then [`load::parse_str`] walks that tree and builds the typed
//! [`Config`], collecting **every** problem with its path (for example
//! `models.gpt-4o.endpoints[1].provider: unknown provider "azur" (did you mean
//! "azure"?)`) instead of stopping at the first. The same code runs at startup and for
//! `switchyard serve --check`.
//!
//! Secrets never appear in the config: a provider names the environment variable that
//! holds its key (`api_key_env`), and the key is read at startup and never logged.
//!
//! The model registry (`models:`) follows seed 001, "Model Mapping": a logical model
//! name maps to one or more provider endpoints with a priority and a weight.

pub mod auth;
pub mod cache;
mod defaults;
mod env;
pub mod headers;
pub mod limits;
mod load;
mod mock;
pub mod quality;
pub mod sched;
pub mod telemetry;

pub use auth::{AdminConfig, AuthConfig, AuthMode, KeyEntry};
pub use cache::{CacheConfig, CacheMode, Replay, Share};
pub use defaults::embedded;
pub use limits::{Budget, BudgetsConfig, LimitsConfig, OnError, RateLimit, StateConfig};
pub use load::{parse_str, ConfigError, ConfigErrors};
pub use mock::{ErrorShape, MockOptions, RetryAfterFormat};
pub use quality::{Leaderboard, QualityConfig};
pub use sched::{OffPeakConfig, QueueTimeouts, SchedConfig};
pub use telemetry::{AccessLogConfig, OtlpConfig, TelemetryConfig};

use std::net::SocketAddr;
use std::path::PathBuf;

/// The config file `serve` reads: `path`, else `./switchyard.yaml` if it exists;
/// `None` means the embedded default.
pub fn locate(path: Option<&std::path::Path>) -> Option<PathBuf> {
    match path {
        Some(p) => Some(p.to_path_buf()),
        None if std::path::Path::new("switchyard.yaml").exists() => {
            Some(PathBuf::from("switchyard.yaml"))
        }
        None => None,
    }
}

/// Finds and loads the config as `serve` and every tool do: `path` if given, else
/// `./switchyard.yaml` if it exists, else the embedded default (providers enabled by
/// their API-key variables). Returns the config and a line naming its source.
///
/// # Errors
/// [`LoadError::Unreadable`] when the file cannot be read (exit code 2, an I/O
/// error), [`LoadError::Invalid`] with every problem found in it (exit code 1).
pub fn locate_and_load(path: Option<&std::path::Path>) -> Result<(Config, String), LoadError> {
    match locate(path) {
        Some(p) => {
            let text = std::fs::read_to_string(&p).map_err(|e| {
                LoadError::Unreadable(format!("cannot read config {}: {e}", p.display()))
            })?;
            let c = parse_str(&text, Some(&p)).map_err(|e| LoadError::Invalid(e.to_string()))?;
            Ok((c, format!("config loaded from {}", p.display())))
        }
        None => Ok(embedded(|v| {
            std::env::var_os(v).is_some_and(|s| !s.is_empty())
        })),
    }
}

/// Why [`locate_and_load`] found no config, as one printable message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The file cannot be read (missing, a directory, no permission): an I/O error.
    #[error("{0}")]
    Unreadable(String),
    /// The file was read but is not a valid config: every problem, with its path.
    #[error("{0}")]
    Invalid(String),
}

impl LoadError {
    /// The process exit code of this failure, as the README lists them: 2 for an
    /// I/O error, 1 for an invalid config.
    pub fn exit_code(&self) -> u8 {
        match self {
            LoadError::Unreadable(_) => 2,
            LoadError::Invalid(_) => 1,
        }
    }
}

/// The whole, validated gateway configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listener and request limits.
    pub server: ServerConfig,
    /// Where routing policies live.
    pub policies: PoliciesConfig,
    /// Upstream providers, in file order; names are unique.
    pub providers: Vec<ProviderConfig>,
    /// The model registry: logical models in file order; names are unique.
    pub models: Vec<ModelConfig>,
    /// Quality scores for quality-aware strategies (`quality:`, [`quality`]).
    pub quality: QualityConfig,
    /// Circuit-breaker thresholds and health recovery, for every endpoint
    /// (`breaker:`).
    pub breaker: BreakerConfig,
    /// Client authentication (`auth:`, [`auth`]).
    pub auth: AuthConfig,
    /// Operator endpoint access (`admin:`, [`auth`]).
    pub admin: AdminConfig,
    /// Rate limits per key, org and globally (`limits:`).
    pub limits: LimitsConfig,
    /// Spend budgets in USD per key and org (`budgets:`).
    pub budgets: BudgetsConfig,
    /// Where limit and spend state lives (`state:`).
    pub state: StateConfig,
    /// The response cache (`cache:`, [`cache`]).
    pub cache: CacheConfig,
    /// Priority queues and the off-peak hold (`scheduler:`, [`sched`]).
    pub scheduler: SchedConfig,
    /// Trace export over OTLP (`telemetry:`, [`telemetry`]).
    pub telemetry: TelemetryConfig,
    /// Where this config came from, for the startup log line.
    pub source: String,
}

impl Config {
    /// The provider named `name`.
    pub fn provider(&self, name: &str) -> Option<&ProviderConfig> {
        self.providers.iter().find(|p| p.name == name)
    }

    /// The logical model named `name`.
    pub fn model(&self, name: &str) -> Option<&ModelConfig> {
        self.models.iter().find(|m| m.name == name)
    }
}

/// `server:` section.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on (`listen`, default `127.0.0.1:8080`).
    pub listen: SocketAddr,
    /// Largest accepted request body in bytes (`max_body_bytes`, default 10 MiB); larger
    /// bodies get HTTP 413.
    pub max_body_bytes: usize,
    /// Most request body bytes the whole gateway holds buffered at once
    /// (`max_buffered_bytes`; `None`, the default: [`crate::budget::machine_default`],
    /// the smaller of total memory / 8 and 512 MiB). Bodies are charged as they are
    /// read; a request whose body finds no room within 2 s gets 503 `overloaded` with
    /// `Retry-After`. At least `max_body_bytes`.
    pub max_buffered_bytes: Option<usize>,
    /// On SIGTERM/SIGINT, how long in-flight requests and streams may run before the
    /// process exits anyway (`drain_timeout_ms`, default 30 000 ms).
    pub drain_timeout_ms: u64,
    /// How long a new connection may stay silent before its first byte arrives, in
    /// milliseconds (`first_byte_timeout_ms`, default 10 000 ms); then it is closed.
    pub first_byte_timeout_ms: u64,
    /// How long a request head (request line and headers; for HTTP/2 everything up to
    /// the first stream) may take from its first byte, in milliseconds
    /// (`header_timeout_ms`, default 10 000 ms); then the connection is closed.
    pub header_timeout_ms: u64,
    /// How long a connection may stay idle with no request in flight before it is
    /// closed, in milliseconds (`idle_timeout_ms`, default 75 000 ms, nginx's
    /// `keepalive_timeout`): HTTP/1 keep-alive between requests, HTTP/2 with no open
    /// stream.
    pub idle_timeout_ms: u64,
    /// While a request is in flight, how long writing its answer may wait for a
    /// client that reads nothing before the connection is closed, in milliseconds
    /// (`send_timeout_ms`, default 60 000 ms, nginx's `send_timeout`): the time
    /// between two writes that make progress, not the whole answer's.
    pub send_timeout_ms: u64,
    /// Largest request header section in bytes, counted as name + value + 4 per field
    /// without the request line (`max_header_bytes`, default 64 KiB); larger heads get
    /// 431. Independently of it, hyper refuses more than 100 fields or a head over
    /// about 400 KiB (431) and URIs over 65,534 bytes (414).
    pub max_header_bytes: usize,
    /// Retry budget of one request, in milliseconds (`retry_budget_ms`, default
    /// 30 000; seed 004): no attempt starts, and no backoff or `Retry-After` wait is
    /// taken, past this long after the request arrived. A wait that would end past it
    /// moves on to the next endpoint instead.
    pub retry_budget_ms: u64,
    /// Most upstream attempts for one request, across endpoints and retries
    /// (`max_attempts`, default 8, 1 to 64).
    pub max_attempts: u32,
    /// Continue a stream that fails after reaching the client on the next endpoint
    /// of its plan (`stream_failover`, default true; seed 000, strategy (b)): with
    /// the text already sent as an assistant prefill where the provider takes one
    /// (`providers.<name>.prefill`), else by restarting and passing on only what
    /// follows the text already sent. When false, such a stream ends with one error
    /// event.
    pub stream_failover: bool,
    /// Label `switchyard_cost_usd_total` with the caller's key id and org
    /// (`metrics_caller_labels`, default true). With many keys that is many series;
    /// false writes `all` for both, one series per model and endpoint.
    pub metrics_caller_labels: bool,
    /// How connections are spread over threads (`runtime`, default `per_core`).
    pub runtime: RuntimeMode,
    /// Threads that serve client connections (`threads`, 1 to 256; `None`, the
    /// default: the CPUs this process may run on, [`std::thread::available_parallelism`]).
    pub threads: Option<usize>,
    /// Browser origins allowed to call the client API under `/v1/` across origins
    /// (`cors_origins`, default empty: CORS off): serialized origins such as
    /// `https://app.example.com` (lowercase, no path), or `*` alone for every
    /// origin. Checked by [`check_origin`]; served by [`crate::cors`].
    pub cors_origins: Vec<String>,
}

/// `server.runtime`: how the gateway's listener and its request work are spread over
/// threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeMode {
    /// `per_core`, the default: one listener per thread with `SO_REUSEPORT` (the
    /// kernel spreads new connections over them), each thread with its own
    /// single-threaded runtime and its own upstream connection pools. A connection's
    /// request, its upstream call and its answer stay on one thread, as in nginx's
    /// worker model. On the 2-core benchmark (`benches/load/run.sh`) it took 30% less
    /// CPU per request than `shared`.
    PerCore,
    /// `shared`: one listener and one work-stealing runtime whose threads take work
    /// from each other, so one busy connection can never hold a thread while another
    /// idles; costs hand-offs between threads on every request.
    Shared,
}

impl ServerConfig {
    /// The number of serving threads: `threads`, else the CPUs this process may run on
    /// (1 when that cannot be read).
    pub fn serving_threads(&self) -> usize {
        self.threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        })
    }
}

impl Default for ServerConfig {
    /// The documented defaults: the values used for every key the file leaves out.
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_body_bytes: 10 * 1024 * 1024,
            max_buffered_bytes: None,
            drain_timeout_ms: 30_000,
            first_byte_timeout_ms: 10_000,
            header_timeout_ms: 10_000,
            idle_timeout_ms: 75_000,
            send_timeout_ms: 60_000,
            max_header_bytes: 64 * 1024,
            retry_budget_ms: 30_000,
            cors_origins: Vec::new(),
            max_attempts: 8,
            stream_failover: true,
            metrics_caller_labels: true,
            runtime: RuntimeMode::PerCore,
            threads: None,
        }
    }
}

/// `breaker:` section: when an endpoint's circuit opens, how long it stays open, and
/// how fast an endpoint's health recovers while nothing is sent to it (seed 001,
/// "Egress and Health Monitoring").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    /// The circuit opens when a failure leaves health H below this (`open_below`,
    /// default 0.3, in (0, 1]).
    pub open_below: f64,
    /// First cooldown before the half-open probe, in ms (`cooldown_ms`, default
    /// 30 000); each failed probe doubles it.
    pub cooldown_ms: u64,
    /// Longest cooldown, in ms (`max_cooldown_ms`, default 300 000).
    pub max_cooldown_ms: u64,
    /// Outcomes an endpoint must have before its circuit can open (`min_samples`,
    /// default 5).
    pub min_samples: u64,
    /// Half-life of an endpoint's missing health while it gets no outcomes, in ms
    /// (`recovery_half_life_ms`, default 60 000): after that long without outcomes,
    /// 1 − H is halved, so no strategy can starve an endpoint forever.
    pub recovery_half_life_ms: u64,
}

impl Default for BreakerConfig {
    /// The documented defaults.
    fn default() -> Self {
        BreakerConfig {
            open_below: 0.3,
            cooldown_ms: 30_000,
            max_cooldown_ms: 300_000,
            min_samples: 5,
            recovery_half_life_ms: 60_000,
        }
    }
}

/// `policies:` section.
#[derive(Debug, Clone)]
pub struct PoliciesConfig {
    /// Directory of `.policy` files (`dir`, default `policies/` beside the config
    /// file, used only if it exists). Relative paths are resolved against the config
    /// file's directory. `None` for the embedded default config: built-in strategies
    /// only.
    pub dir: Option<PathBuf>,
    /// Whether `dir` was set explicitly (then it must exist).
    pub explicit: bool,
}

/// The wire format family of a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// api.openai.com, Chat Completions.
    OpenAi,
    /// Azure OpenAI: deployment in the URL, `api-key` header, `api-version` query.
    AzureOpenAi,
    /// Anthropic Messages API.
    Anthropic,
    /// Google Gemini `generateContent`.
    Gemini,
    /// AWS Bedrock Converse.
    Bedrock,
    /// Any server speaking OpenAI's Chat Completions (vLLM, llama.cpp, Ollama, Groq, ...).
    OpenAiCompatible,
    /// Switchyard's in-process provider emulator (`switchyard mock`, same code).
    Mock,
}

impl ProviderKind {
    /// All kinds with their config spelling.
    pub const ALL: [(&'static str, ProviderKind); 7] = [
        ("openai", ProviderKind::OpenAi),
        ("azure-openai", ProviderKind::AzureOpenAi),
        ("anthropic", ProviderKind::Anthropic),
        ("gemini", ProviderKind::Gemini),
        ("bedrock", ProviderKind::Bedrock),
        ("openai-compatible", ProviderKind::OpenAiCompatible),
        ("mock", ProviderKind::Mock),
    ];

    /// The config spelling of this kind.
    pub fn as_str(self) -> &'static str {
        ProviderKind::ALL
            .iter()
            .find(|(_, k)| *k == self)
            .map(|(s, _)| *s)
            .unwrap_or("unknown")
    }

    /// The base URL used when the config gives none.
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            ProviderKind::OpenAi => Some("https://api.openai.com/v1"),
            ProviderKind::Anthropic => Some("https://api.anthropic.com/v1"),
            ProviderKind::Gemini => Some("https://generativelanguage.googleapis.com/v1beta"),
            _ => None,
        }
    }
}

/// Upstream timeouts of one provider, all in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP (and TLS) connect (default 2 000 ms).
    pub connect_ms: u64,
    /// From sending the request to the response headers (default 30 000 ms).
    pub first_byte_ms: u64,
    /// From sending a streaming request to its first content (text or tool-call
    /// delta), the stream's commit point (default 60 000 ms). Until then role chunks
    /// and pings are held and a failure moves to the next attempt unseen.
    pub first_content_ms: u64,
    /// Longest silence between two body chunks (default 30 000 ms).
    pub idle_ms: u64,
    /// Whole upstream exchange, stream included (default 600 000 ms).
    pub total_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect_ms: 2_000,
            first_byte_ms: 30_000,
            first_content_ms: 60_000,
            idle_ms: 30_000,
            total_ms: 600_000,
        }
    }
}

/// Prices of a provider, in USD per 1M tokens.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Pricing {
    /// USD per 1M input (prompt) tokens.
    pub input_per_mtok: f64,
    /// USD per 1M output (completion) tokens.
    pub output_per_mtok: f64,
}

/// One entry of `providers:`.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// The key under `providers:`.
    pub name: String,
    /// Wire format family.
    pub kind: ProviderKind,
    /// Base URL without a trailing slash, e.g. `http://127.0.0.1:8081/v1`. Empty for
    /// `mock`, and for `bedrock` without one (the region's endpoint is used).
    pub base_url: String,
    /// Environment variable holding the API key; the key itself is never in config.
    pub api_key_env: Option<String>,
    /// Azure OpenAI `api-version` query parameter (default `2024-10-21`).
    pub api_version: Option<String>,
    /// Upstream timeouts.
    pub timeouts: Timeouts,
    /// Prices, USD per 1M tokens.
    pub pricing: Pricing,
    /// Behaviour of the in-process emulator (`kind: mock` only).
    pub mock: MockOptions,
    /// The provider continues a final assistant message (`prefill`; default true for
    /// `anthropic`, whose Messages API documents it, false otherwise): a stream that
    /// broke elsewhere is continued here with the text already sent as that message.
    /// Without it the request is restarted and only what follows that text is passed
    /// on.
    pub prefill: bool,
    /// Client headers forwarded to this provider besides the built-in rule
    /// (`forward_headers`, see [`crate::egress::forward`]).
    pub forward_headers: Vec<headers::Listed>,
    /// OpenAI-format kinds: ask for usage on every stream
    /// (`stream_options.include_usage`; `stream_usage`, default true). Off for a
    /// server that rejects `stream_options`; its streams are then settled with an
    /// estimate unless the client asked for usage.
    pub stream_usage: bool,
    /// AWS region of a `bedrock` provider (`region`; else `AWS_REGION` or
    /// `AWS_DEFAULT_REGION` at startup). Only `bedrock` takes it.
    pub region: Option<String>,
    /// Path of the AWS shared credentials file a `bedrock` provider reads when the
    /// AWS key variables are unset (`credentials_file`; else
    /// `AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`).
    pub credentials_file: Option<String>,
    /// Profile of that file (`profile`; else `AWS_PROFILE`, else `default`).
    pub profile: Option<String>,
}

/// One logical model of the registry.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// The name clients send as `model`.
    pub name: String,
    /// Provider endpoints serving it, in file order.
    pub endpoints: Vec<EndpointConfig>,
}

/// One provider endpoint of a logical model.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// Unique endpoint name, used in policies, metrics and logs (`name`, default
    /// `<provider>/<model>`, made unique with a `#N` suffix).
    pub id: String,
    /// The provider's name (a key of `providers:`).
    pub provider: String,
    /// The upstream model id (or the Azure deployment name) sent to the provider.
    pub model: String,
    /// Lower is preferred (`priority`, default 1).
    pub priority: u32,
    /// Share among endpoints of equal priority (`weight`, default 1; 0 disables).
    pub weight: u32,
    /// Optional region label (seed 001 "Model Mapping").
    pub region: Option<String>,
    /// Latency target in milliseconds (`latency_target_ms`, optional): a success
    /// slower than this counts h = 0.5 instead of 1 in the endpoint's health (seed 001,
    /// "Health Tracking": fractional h for degraded performance such as elevated
    /// latency). Without it every success counts 1.
    pub latency_target_ms: Option<u64>,
    /// The upstream model's context window in tokens (`context_window`, optional,
    /// 1 to 100,000,000): read by policies as `endpoint.context_window` and by the
    /// gateway's [`crate::routing::Endpoint::fits`]. Unknown when absent.
    pub context_window: Option<u64>,
    /// The most output tokens the upstream model produces per request
    /// (`max_output_tokens`, optional, 1 to 100,000,000): a request asking for more
    /// (`max_completion_tokens`, else `max_tokens`) is not sent to this endpoint
    /// ([`crate::routing::Endpoint::fits`]). Unknown when absent.
    pub max_output_tokens: Option<u64>,
    /// Most attempts in flight to this endpoint at once (`max_in_flight`, optional,
    /// 1 to 1,000,000): beyond it requests wait in its priority queues
    /// ([`crate::sched`]). No limit and no queue when absent.
    pub max_in_flight: Option<u32>,
}

/// `entry` as a `server.cors_origins` entry: `*`, or a serialized origin
/// (`scheme://host` or `scheme://host:port`, as a browser's `Origin` header carries
/// it; RFC 6454 section 6.2), lowercased. An error sentence naming the problem
/// otherwise.
pub fn check_origin(entry: &str) -> Result<String, String> {
    if entry == "*" {
        return Ok(entry.to_string());
    }
    let Some((scheme, rest)) = entry.split_once("://") else {
        return Err(format!(
            "\"{entry}\" is not an origin like https://app.example.com, or \"*\""
        ));
    };
    let scheme_ok = scheme
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic())
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    if !scheme_ok {
        return Err(format!(
            "\"{entry}\" does not start with a scheme like https://"
        ));
    }
    if let Some(at) = rest.find(['/', '?', '#']) {
        return Err(format!(
            "\"{entry}\" has a path; an origin is scheme, host and port only: \"{scheme}://{}\"",
            &rest[..at]
        ));
    }
    let host_ok = !rest.is_empty()
        && rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    if !host_ok {
        return Err(format!("\"{entry}\" does not name a host"));
    }
    // A port, when given, is 1 to 65535 (a browser never sends another): after an
    // IPv6 literal's `]`, else after the last `:`.
    let port = match rest.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((_, "")) => None,
            Some((_, after)) => Some(after.strip_prefix(':').unwrap_or(after)),
            None => {
                return Err(format!(
                    "\"{entry}\" has an IPv6 address without its closing `]`"
                ))
            }
        },
        None => rest.rsplit_once(':').map(|(_, p)| p),
    };
    if let Some(p) = port {
        if !p.parse::<u16>().is_ok_and(|p| p > 0) || p.starts_with('+') {
            return Err(format!("\"{entry}\" has port `{p}`; a port is 1 to 65535"));
        }
    }
    Ok(entry.to_ascii_lowercase())
}
