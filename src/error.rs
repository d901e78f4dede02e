//! The one error type of the request path.
//!
//! Every layer (ingress, routing, transform, egress) converts its failures into a
//! [`GatewayError`], and errors become HTTP responses in exactly one place
//! ([`GatewayError::to_response`]). An error carries, as data, everything later code
//! decides from (the model is Pingora's `Error { etype, esource, retry }`):
//! - its [`ErrorKind`], which fixes the OpenAI error `type` and the default status;
//! - who is at fault ([`Fault`]): the downstream client, the upstream provider, or
//!   Switchyard itself. Health statistics only count upstream faults against an
//!   endpoint, and a limit Switchyard enforces itself is never blamed on a provider;
//! - where a retry is safe ([`Retry`]): nowhere, on another endpoint only, or on this
//!   endpoint or another (the one retry below the fallback chain, of a request not yet
//!   written on a reused pooled connection, is the connection pool's). The fallback
//!   chain (`gateway::dispatch`) reads only this field;
//! - a machine-readable [`Code`] (an upstream's own code passes through unchanged,
//!   so a client that matches `context_length_exceeded` keeps working behind us);
//! - the cause, kept through [`std::error::Error::source`].
//!
//! The JSON shape is OpenAI's: `{"error":{"message","type","param","code"}}`
//! (OpenAI API reference, "Error codes").

use std::fmt;
use std::sync::Arc;

use http::{HeaderValue, Response, StatusCode};

use crate::body::{self, Body};

/// Who caused an error: read by health statistics, log levels and metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The downstream client: a bad request, missing credentials, or a limit it
    /// exceeded at the gateway.
    Client,
    /// The upstream provider failed or answered badly.
    Upstream,
    /// Switchyard itself: configuration, shutdown, or a bug.
    Gateway,
}

/// Where the request of a failed attempt may be tried again.
///
/// Retrying is only ever safe because a chat completion has no effect beyond its
/// answer; what varies is whether another try can succeed, and what it costs (a
/// provider bills every request it received). A request that failed on a reused
/// pooled connection before it was written is re-sent by the connection pool itself
/// (hyper-util's client does exactly that, once, and only then): such a failure never
/// reaches the fallback chain, and nothing above the pool re-sends a request behind
/// the client's back. Every other re-send is an attempt of the fallback chain, counted
/// in `x-switchyard-attempts` and the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Nowhere: the request itself is at fault (any endpoint would refuse it), or
    /// nothing is left to try.
    Never,
    /// On another endpoint of the plan, never this one again: it can only fail the
    /// same way there (an upstream 404 for its model id, refused credentials).
    OtherEndpoint,
    /// On this endpoint again after the backoff, or on another (5xx, timeouts, a
    /// provider's 429, a connection that failed or closed mid-exchange).
    Any,
}

impl Retry {
    /// Whether the same endpoint may be tried again (after the backoff).
    pub fn same_endpoint(self) -> bool {
        matches!(self, Retry::Any)
    }

    /// Whether the next endpoint of the plan may be tried.
    pub fn other_endpoint(self) -> bool {
        !matches!(self, Retry::Never)
    }
}

/// The class of a request-path error; fixes the default HTTP status, the OpenAI error
/// type, and the default fault and retry safety.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// 400: malformed JSON or a missing/invalid field.
    InvalidRequest,
    /// 400: the prompt does not fit the model's context window (OpenAI code
    /// `context_length_exceeded`).
    ContextWindowExceeded,
    /// 401: missing or invalid credentials.
    Unauthenticated,
    /// 403: credentials valid but not allowed.
    PermissionDenied,
    /// 404: unknown model or path.
    NotFound,
    /// 405: wrong HTTP method for a known path.
    MethodNotAllowed,
    /// 501: a request method the server does not know (RFC 9110 section 9.1), on
    /// any path.
    NotImplemented,
    /// 408: the request (its body) did not arrive in time.
    RequestTimeout,
    /// 413: request body larger than `server.max_body_bytes`.
    PayloadTooLarge,
    /// 415: a request body whose `Content-Type` is not JSON.
    UnsupportedMediaType,
    /// 429 from Switchyard itself (a policy's `reject 429`, later rate limits and
    /// budgets): the client's fault, never an upstream's.
    Throttled,
    /// 429 from the upstream provider, passed through with its `Retry-After`.
    RateLimited,
    /// The upstream provider says Switchyard's account with it is out of quota or
    /// credit: OpenAI's 429 `insufficient_quota` ("You exceeded your current quota,
    /// please check your plan and billing details"), any provider's 402 Payment
    /// Required, Anthropic's 400 "Your credit balance is too low". Answered as OpenAI answers the first: 429 `insufficient_quota`. Not
    /// transient: never retried on the same endpoint, tried on the next one at once.
    QuotaExceeded,
    /// 502: the upstream answered with an error or with something we cannot parse, or
    /// could not be reached.
    BadUpstream,
    /// 503: no endpoint is available for the route.
    NoEndpoint,
    /// 503: the gateway is shutting down.
    ShuttingDown,
    /// 503: the gateway holds as many buffered request bodies as
    /// `server.max_buffered_bytes` allows and none freed up in time.
    Overloaded,
    /// 504: the upstream did not answer (connect, first byte, idle or total timeout).
    UpstreamTimeout,
    /// 500: a Switchyard bug or misconfiguration.
    Internal,
}

impl ErrorKind {
    /// The default HTTP status of this kind.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::InvalidRequest | ErrorKind::ContextWindowExceeded => 400,
            ErrorKind::Unauthenticated => 401,
            ErrorKind::PermissionDenied => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::MethodNotAllowed => 405,
            ErrorKind::NotImplemented => 501,
            ErrorKind::RequestTimeout => 408,
            ErrorKind::PayloadTooLarge => 413,
            ErrorKind::UnsupportedMediaType => 415,
            ErrorKind::Throttled | ErrorKind::RateLimited | ErrorKind::QuotaExceeded => 429,
            ErrorKind::BadUpstream => 502,
            ErrorKind::NoEndpoint | ErrorKind::ShuttingDown | ErrorKind::Overloaded => 503,
            ErrorKind::UpstreamTimeout => 504,
            ErrorKind::Internal => 500,
        }
    }

    /// OpenAI's error `type` string for this kind.
    pub fn openai_type(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest
            | ErrorKind::ContextWindowExceeded
            | ErrorKind::NotFound
            | ErrorKind::MethodNotAllowed
            | ErrorKind::NotImplemented
            | ErrorKind::RequestTimeout
            | ErrorKind::PayloadTooLarge
            | ErrorKind::UnsupportedMediaType => "invalid_request_error",
            ErrorKind::Unauthenticated => "authentication_error",
            ErrorKind::PermissionDenied => "permission_error",
            ErrorKind::Throttled | ErrorKind::RateLimited => "rate_limit_error",
            ErrorKind::QuotaExceeded => "insufficient_quota",
            ErrorKind::BadUpstream
            | ErrorKind::NoEndpoint
            | ErrorKind::ShuttingDown
            | ErrorKind::Overloaded
            | ErrorKind::UpstreamTimeout => "api_error",
            ErrorKind::Internal => "server_error",
        }
    }

    /// Who is at fault, unless the error says otherwise.
    pub fn fault(self) -> Fault {
        match self {
            ErrorKind::InvalidRequest
            | ErrorKind::ContextWindowExceeded
            | ErrorKind::Unauthenticated
            | ErrorKind::PermissionDenied
            | ErrorKind::NotFound
            | ErrorKind::MethodNotAllowed
            | ErrorKind::NotImplemented
            | ErrorKind::RequestTimeout
            | ErrorKind::PayloadTooLarge
            | ErrorKind::UnsupportedMediaType
            | ErrorKind::Throttled => Fault::Client,
            ErrorKind::RateLimited | ErrorKind::BadUpstream | ErrorKind::UpstreamTimeout => {
                Fault::Upstream
            }
            // Our account with the provider, like its refusal of our key.
            ErrorKind::QuotaExceeded
            | ErrorKind::NoEndpoint
            | ErrorKind::ShuttingDown
            | ErrorKind::Overloaded
            | ErrorKind::Internal => Fault::Gateway,
        }
    }

    /// Where a retry is safe, unless the error says otherwise.
    pub fn retry(self) -> Retry {
        match self {
            ErrorKind::RateLimited | ErrorKind::BadUpstream | ErrorKind::UpstreamTimeout => {
                Retry::Any
            }
            ErrorKind::QuotaExceeded => Retry::OtherEndpoint,
            _ => Retry::Never,
        }
    }

    /// Short label for the `kind` label of error metrics.
    pub fn metric_label(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::ContextWindowExceeded => "context_window_exceeded",
            ErrorKind::Unauthenticated => "unauthenticated",
            ErrorKind::PermissionDenied => "permission_denied",
            ErrorKind::NotFound => "not_found",
            ErrorKind::MethodNotAllowed => "method_not_allowed",
            ErrorKind::NotImplemented => "not_implemented",
            ErrorKind::RequestTimeout => "request_timeout",
            ErrorKind::PayloadTooLarge => "payload_too_large",
            ErrorKind::UnsupportedMediaType => "unsupported_media_type",
            ErrorKind::Throttled => "throttled",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::QuotaExceeded => "insufficient_quota",
            ErrorKind::BadUpstream => "bad_upstream",
            ErrorKind::NoEndpoint => "no_endpoint",
            ErrorKind::ShuttingDown => "shutting_down",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::UpstreamTimeout => "upstream_timeout",
            ErrorKind::Internal => "internal",
        }
    }
}

/// The machine-readable `code` of an error body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Code {
    /// The requested logical model is not configured.
    ModelNotFound,
    /// No handler for the path.
    UnknownUrl,
    /// The body is over `server.max_body_bytes`.
    RequestTooLarge,
    /// The body did not arrive in time.
    RequestTimeout,
    /// The body's `Content-Type` is not JSON.
    UnsupportedMediaType,
    /// A policy's `reject`.
    RejectedByPolicy,
    /// No endpoint could serve the route.
    NoEndpoint,
    /// The gateway is shutting down.
    GatewayShutdown,
    /// The provider did not answer in time.
    UpstreamTimeout,
    /// The provider could not be reached (connect or transport failure).
    UpstreamUnreachable,
    /// The provider's answer could not be understood.
    UpstreamBadResponse,
    /// The provider's stream broke before its end.
    UpstreamStreamCut,
    /// A stream failed after reaching the client, and the endpoint that was to
    /// continue it began a different answer than the one already sent.
    UpstreamStreamDiverged,
    /// The provider refused Switchyard's credentials (401/403).
    UpstreamAuthFailed,
    /// The provider does not know the configured model id (404).
    UpstreamModelNotFound,
    /// The provider refused the request as invalid and gave no code of its own.
    UpstreamInvalidRequest,
    /// The provider's 429.
    UpstreamRateLimited,
    /// The provider says it is overloaded (Anthropic 529).
    UpstreamOverloaded,
    /// The provider's 429 saying our account is out of quota (OpenAI's own code).
    InsufficientQuota,
    /// Any other provider error.
    UpstreamError,
    /// The prompt does not fit the context window (OpenAI's code).
    ContextLengthExceeded,
    /// Missing or invalid credentials (OpenAI's code), whatever was wrong.
    InvalidApiKey,
    /// The caller's credential may not use the requested model.
    ModelNotAllowed,
    /// None of the providers serving the model are allowed for the caller.
    ProviderNotAllowed,
    /// A gateway rate limit (`limits:`) has no room for the request.
    RateLimitExceeded,
    /// A spend budget (`budgets:`) is used up for the period.
    BudgetExceeded,
    /// The shared limiter state (Redis) cannot be reached and the limit fails closed.
    RateLimiterUnavailable,
    /// A request waited its level's `scheduler.queue_timeout_ms` for an endpoint slot
    /// (`max_in_flight`) without getting one.
    QueueTimeout,
    /// An endpoint's queue already holds `scheduler.max_queued` requests.
    QueueFull,
    /// The gateway's budget of buffered request bodies (`server.max_buffered_bytes`)
    /// had no room for the request's body in time.
    Overloaded,
    /// The `x-switchyard-priority` header asks for a level above the key's
    /// `max_priority`.
    PriorityNotAllowed,
    /// A required request field is absent or null (OpenAI's
    /// `missing_required_parameter`).
    MissingRequiredParameter,
    /// A request field has the wrong JSON type (OpenAI's `invalid_type`).
    InvalidType,
    /// A request field's value is not one it may take: not in its enum, not matching
    /// its pattern, naming nothing declared (OpenAI's `invalid_value`).
    InvalidValue,
    /// An array that must have an element is empty (OpenAI's `empty_array`).
    EmptyArray,
    /// An array has more elements than allowed (OpenAI's `array_above_max_length`).
    ArrayAboveMaxLength,
    /// An integer below its minimum (OpenAI's `integer_below_min_value`).
    IntegerBelowMinValue,
    /// An integer above its maximum (OpenAI's `integer_above_max_value`).
    IntegerAboveMaxValue,
    /// A number below its minimum (OpenAI's `decimal_below_min_value`).
    DecimalBelowMinValue,
    /// A number above its maximum (OpenAI's `decimal_above_max_value`).
    DecimalAboveMaxValue,
    /// A function tool's `parameters` is not a valid JSON Schema (OpenAI's
    /// `invalid_function_parameters`).
    InvalidFunctionParameters,
    /// A request field the provider behind the route has no equivalent of, whatever
    /// its value (OpenAI's `unsupported_parameter`: "Unsupported parameter:
    /// 'max_tokens' is not supported with this model").
    UnsupportedParameter,
    /// A value the provider behind the route cannot take in a field it has (OpenAI's
    /// `unsupported_value`: "Unsupported value: 'temperature' does not support 0.0
    /// with this model").
    UnsupportedValue,
    /// The provider's own code, passed through unchanged (bounded in length).
    Provider(Box<str>),
}

/// Longest provider `code` or `param` passed through, in bytes.
pub const MAX_PASSTHROUGH: usize = 128;

impl Code {
    /// The code as it appears in the error body.
    pub fn as_str(&self) -> &str {
        match self {
            Code::ModelNotFound => "model_not_found",
            Code::UnknownUrl => "unknown_url",
            Code::RequestTooLarge => "request_too_large",
            Code::RequestTimeout => "request_timeout",
            Code::UnsupportedMediaType => "unsupported_media_type",
            Code::RejectedByPolicy => "rejected_by_policy",
            Code::NoEndpoint => "no_endpoint",
            Code::GatewayShutdown => "gateway_shutdown",
            Code::UpstreamTimeout => "upstream_timeout",
            Code::UpstreamUnreachable => "upstream_unreachable",
            Code::UpstreamBadResponse => "upstream_bad_response",
            Code::UpstreamStreamCut => "upstream_stream_cut",
            Code::UpstreamStreamDiverged => "upstream_stream_diverged",
            Code::UpstreamAuthFailed => "upstream_auth_failed",
            Code::UpstreamModelNotFound => "upstream_model_not_found",
            Code::UpstreamInvalidRequest => "upstream_invalid_request",
            Code::UpstreamRateLimited => "upstream_rate_limited",
            Code::UpstreamOverloaded => "upstream_overloaded",
            Code::InsufficientQuota => "insufficient_quota",
            Code::UpstreamError => "upstream_error",
            Code::ContextLengthExceeded => "context_length_exceeded",
            Code::InvalidApiKey => "invalid_api_key",
            Code::ModelNotAllowed => "model_not_allowed",
            Code::ProviderNotAllowed => "provider_not_allowed",
            Code::RateLimitExceeded => "rate_limit_exceeded",
            Code::BudgetExceeded => "budget_exceeded",
            Code::RateLimiterUnavailable => "rate_limiter_unavailable",
            Code::QueueTimeout => "queue_timeout",
            Code::QueueFull => "queue_full",
            Code::Overloaded => "overloaded",
            Code::PriorityNotAllowed => "priority_not_allowed",
            Code::MissingRequiredParameter => "missing_required_parameter",
            Code::InvalidType => "invalid_type",
            Code::InvalidValue => "invalid_value",
            Code::EmptyArray => "empty_array",
            Code::ArrayAboveMaxLength => "array_above_max_length",
            Code::IntegerBelowMinValue => "integer_below_min_value",
            Code::IntegerAboveMaxValue => "integer_above_max_value",
            Code::DecimalBelowMinValue => "decimal_below_min_value",
            Code::DecimalAboveMaxValue => "decimal_above_max_value",
            Code::InvalidFunctionParameters => "invalid_function_parameters",
            Code::UnsupportedParameter => "unsupported_parameter",
            Code::UnsupportedValue => "unsupported_value",
            Code::Provider(s) => s,
        }
    }

    /// A provider's own code: [`Code::ContextLengthExceeded`] for OpenAI's, else
    /// [`Code::Provider`] cut to [`MAX_PASSTHROUGH`] bytes.
    pub fn provider(code: &str) -> Code {
        if code == "context_length_exceeded" {
            return Code::ContextLengthExceeded;
        }
        Code::Provider(bounded(code, MAX_PASSTHROUGH).into())
    }
}

/// `s` cut to at most `max` bytes on a character boundary, with `…` when cut: for
/// values echoed back to a client (a 1 MB model name must not make a 1 MB answer).
pub fn bounded(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if s.len() <= max {
        return s.into();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end]).into()
}

/// The rarely set parts of a [`GatewayError`].
#[derive(Debug, Clone, Default)]
struct Extra {
    /// The cause.
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
    /// Extra response headers (e.g. the `x-ratelimit-*` of a gateway 429).
    headers: http::HeaderMap,
}

/// A request-path error: kind, message, status, fault, retry safety, OpenAI
/// `param`/`code`, and its cause.
#[derive(Debug, Clone)]
pub struct GatewayError {
    /// What went wrong; fixes the OpenAI type and the defaults below.
    pub kind: ErrorKind,
    /// A plain sentence for the client. Never contains secrets.
    pub message: String,
    /// The request field at fault, e.g. `messages[0].role` (OpenAI's `param`).
    pub param: Option<String>,
    /// A machine-readable code (OpenAI's `code`).
    pub code: Option<Code>,
    /// How long the client should wait before retrying (sent as `Retry-After` in
    /// whole seconds, rounded up); an upstream's own wait, which the fallback chain
    /// honours too.
    pub retry_after: Option<std::time::Duration>,
    /// Who is at fault (default: the kind's).
    pub fault: Fault,
    /// Where a retry is safe (default: the kind's).
    pub retry: Retry,
    /// The provider's HTTP status, when the error is the provider's own answer (a
    /// route's `fallback ... on` list is matched against it).
    pub upstream_status: Option<u16>,
    status: u16,
    /// The rarely set parts, boxed to keep the error (and every `Result` of the
    /// request path) small.
    extra: Option<Box<Extra>>,
}

impl GatewayError {
    /// A new error of `kind` with `message` and the kind's status, fault and retry.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        GatewayError {
            kind,
            message: message.into(),
            param: None,
            code: None,
            retry_after: None,
            fault: kind.fault(),
            retry: kind.retry(),
            upstream_status: None,
            status: kind.status(),
            extra: None,
        }
    }

    /// 400 about a specific request field, with `code: null`: for the rules OpenAI
    /// answers without a code (one field allowed only with another, such as
    /// `stream_options` without `stream`). A field that is missing, of the wrong type
    /// or out of range gets [`GatewayError::invalid_param`] instead.
    pub fn invalid_field(param: impl Into<String>, message: impl Into<String>) -> Self {
        let mut e = GatewayError::new(ErrorKind::InvalidRequest, message);
        e.param = Some(param.into());
        e
    }

    /// 400 about a specific request field with the `code` OpenAI gives the same
    /// class of error ([`Code::MissingRequiredParameter`], [`Code::InvalidType`],
    /// [`Code::InvalidValue`], ...; OpenAI API reference, "Error codes", and the
    /// bodies of its own 400s).
    pub fn invalid_param(code: Code, param: impl Into<String>, message: impl Into<String>) -> Self {
        GatewayError::invalid_field(param, message).with_code(code)
    }

    /// A policy's `reject STATUS "message"`: the status as written (400..=599), the
    /// kind the status implies (401 unauthenticated, 429 throttled by the gateway,
    /// ...), code `rejected_by_policy`, never retried.
    pub fn rejected(status: u16, message: impl Into<String>) -> Self {
        let kind = match status {
            401 => ErrorKind::Unauthenticated,
            403 => ErrorKind::PermissionDenied,
            404 => ErrorKind::NotFound,
            408 => ErrorKind::RequestTimeout,
            413 => ErrorKind::PayloadTooLarge,
            429 => ErrorKind::Throttled,
            503 => ErrorKind::NoEndpoint,
            500..=599 => ErrorKind::Internal,
            _ => ErrorKind::InvalidRequest,
        };
        let mut e = GatewayError::new(kind, message).with_code(Code::RejectedByPolicy);
        e.status = if (400..=599).contains(&status) {
            status
        } else {
            kind.status()
        };
        e.retry = Retry::Never;
        e
    }

    /// The `kind` label of `switchyard_upstream_errors_total` (and the access line's
    /// `error`): the kind's label, except that a provider that could not be reached
    /// at all is `unreachable`, apart from the `bad_upstream` answers it sent, and an
    /// endpoint queue's refusals are `queue_timeout` and `queue_full` (not
    /// `no_endpoint`: the endpoint was there, its slots busy).
    pub fn metric_kind(&self) -> &'static str {
        match self.code {
            Some(Code::UpstreamUnreachable) => "unreachable",
            Some(Code::QueueTimeout) => "queue_timeout",
            Some(Code::QueueFull) => "queue_full",
            _ => self.kind.metric_label(),
        }
    }

    /// Changes the kind and with it the status, fault and retry defaults, keeping
    /// message, param, code and cause.
    pub fn with_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = kind;
        self.status = kind.status();
        self.fault = kind.fault();
        self.retry = kind.retry();
        self
    }

    /// Sets the OpenAI `code`.
    pub fn with_code(mut self, code: Code) -> Self {
        self.code = Some(code);
        self
    }

    /// Sets the OpenAI `param`.
    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// Sets the wait before a retry (`Retry-After`).
    pub fn with_retry_after(mut self, wait: Option<std::time::Duration>) -> Self {
        self.retry_after = wait;
        self
    }

    /// The `Retry-After` value: whole seconds, rounded up.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after
            .map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0))
    }

    /// Adds the response headers of `extra` (later values replace earlier ones).
    pub fn with_headers(mut self, extra: http::HeaderMap) -> Self {
        let h = &mut self.extra.get_or_insert_with(Default::default).headers;
        for (name, value) in &extra {
            h.insert(name.clone(), value.clone());
        }
        self
    }

    /// The extra response headers (see [`GatewayError::with_headers`]).
    pub fn headers(&self) -> Option<&http::HeaderMap> {
        self.extra.as_ref().map(|e| &e.headers)
    }

    /// Sets the HTTP status, keeping everything else (a status the kind does not
    /// imply, e.g. 503 for an unreachable limiter).
    pub fn with_status(mut self, status: u16) -> Self {
        if (400..=599).contains(&status) {
            self.status = status;
        }
        self
    }

    /// Sets where a retry is safe.
    pub fn with_retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// Sets who is at fault.
    pub fn with_fault(mut self, fault: Fault) -> Self {
        self.fault = fault;
        self
    }

    /// Keeps `cause` as the error's [`source`](std::error::Error::source).
    pub fn with_source(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.extra.get_or_insert_with(Default::default).source = Some(Arc::new(cause));
        self
    }

    /// HTTP status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The OpenAI error JSON body: `{"error":{"message","type","param","code"}}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind.openai_type(),
                "param": self.param,
                "code": self.code.as_ref().map(Code::as_str),
            }
        })
    }

    /// The OpenAI error JSON body as bytes.
    pub fn to_response_body(&self) -> bytes::Bytes {
        bytes::Bytes::from(serde_json::to_vec(&self.to_json()).unwrap_or_default())
    }

    /// The HTTP response for this error: its status, the OpenAI JSON body,
    /// `Retry-After` when known, and `WWW-Authenticate: Bearer` on a 401 (RFC 6750).
    /// The only place an error becomes a response.
    pub fn to_response(&self) -> Response<Body> {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut r = body::json(status, self.to_response_body());
        if let Some(extra) = self.headers() {
            for (name, value) in extra.iter() {
                r.headers_mut().insert(name.clone(), value.clone());
            }
        }
        if let Some(s) = self.retry_after_secs() {
            r.headers_mut()
                .insert(http::header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.status == 401 {
            r.headers_mut().insert(
                http::header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer"),
            );
        }
        r
    }
}

impl fmt::Display for GatewayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.kind.metric_label())
    }
}

impl std::error::Error for GatewayError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.extra
            .as_ref()
            .and_then(|e| e.source.as_deref())
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_openai_shape() {
        let e = GatewayError::invalid_param(
            Code::EmptyArray,
            "messages",
            "`messages` must be a non-empty array",
        );
        let v = e.to_json();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], "messages");
        assert_eq!(v["error"]["code"], "empty_array");
        assert_eq!(e.status(), 400);
        let e = GatewayError::invalid_field("stream_options", "only with `stream`");
        assert!(e.to_json()["error"]["code"].is_null());
    }

    #[test]
    fn statuses_match_the_issue_table() {
        assert_eq!(ErrorKind::NotFound.status(), 404);
        assert_eq!(ErrorKind::PayloadTooLarge.status(), 413);
        assert_eq!(ErrorKind::BadUpstream.status(), 502);
        assert_eq!(ErrorKind::NoEndpoint.status(), 503);
        assert_eq!(ErrorKind::UpstreamTimeout.status(), 504);
        assert!(ErrorKind::UpstreamTimeout.retry().same_endpoint());
        assert!(!ErrorKind::InvalidRequest.retry().other_endpoint());
    }

    #[test]
    fn a_gateway_429_is_the_clients_fault_and_never_retried() {
        let e = GatewayError::rejected(429, "slow down");
        assert_eq!(e.status(), 429);
        assert_eq!(e.kind, ErrorKind::Throttled);
        assert_eq!(e.fault, Fault::Client);
        assert_eq!(e.retry, Retry::Never);
        assert_eq!(e.to_json()["error"]["type"], "rate_limit_error");
        let up = GatewayError::new(ErrorKind::RateLimited, "upstream");
        assert_eq!((up.fault, up.retry), (Fault::Upstream, Retry::Any));
    }

    #[test]
    fn rejections_keep_their_status() {
        assert_eq!(GatewayError::rejected(451, "no").status(), 451);
        assert_eq!(
            GatewayError::rejected(451, "no").to_json()["error"]["code"],
            "rejected_by_policy"
        );
        assert_eq!(GatewayError::rejected(200, "no").status(), 400);
    }

    #[test]
    fn causes_are_kept() {
        let io = std::io::Error::other("socket closed");
        let e = GatewayError::new(ErrorKind::BadUpstream, "broke").with_source(io);
        let src = std::error::Error::source(&e).expect("a source");
        assert_eq!(src.to_string(), "socket closed");
    }

    #[test]
    fn provider_codes_pass_through_bounded() {
        assert_eq!(
            Code::provider("context_length_exceeded"),
            Code::ContextLengthExceeded
        );
        assert_eq!(Code::provider("weird_code").as_str(), "weird_code");
        let long = "x".repeat(10_000);
        assert!(Code::provider(&long).as_str().len() <= MAX_PASSTHROUGH + 3);
        assert_eq!(bounded("héllo", 2), "h…");
    }

    /// Found by the operator attack of 2026-12-07: an endpoint queue's refusals
    /// were logged as `error="no_endpoint"` although the client got `queue_timeout`.
    #[test]
    fn queue_refusals_have_their_own_error_kind() {
        let e = |code| GatewayError::new(ErrorKind::NoEndpoint, "x").with_code(code);
        assert_eq!(e(Code::QueueTimeout).metric_kind(), "queue_timeout");
        assert_eq!(e(Code::QueueFull).metric_kind(), "queue_full");
        assert_eq!(e(Code::NoEndpoint).metric_kind(), "no_endpoint");
    }
}
