//! The one error type of the request path.
//!
//! Every layer (ingress, routing, transform, egress) converts its failures into a
//! [`GatewayError`], and the server turns it into an HTTP response in exactly one place
//! ([`GatewayError::to_response_body`]). The error knows its HTTP status, the OpenAI
//! error `type` and `code`, who is at fault and whether a retry on another endpoint is
//! safe, so that metrics, logs and (later) fallback chains all read the same facts.
//!
//! The JSON shape is OpenAI's: `{"error":{"message","type","param","code"}}`
//! (OpenAI API reference, "Error codes").

use std::fmt;

/// Who caused an error: used for log levels and metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The downstream client sent something wrong (4xx).
    Client,
    /// The upstream provider failed or answered badly (502, 504, passed-through 429).
    Upstream,
    /// Switchyard itself (configuration or a bug).
    Gateway,
}

/// The class of a request-path error; fixes the HTTP status and OpenAI error type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// 400: malformed JSON or a missing/invalid field.
    InvalidRequest,
    /// 401: missing or invalid credentials (reserved for the auth layer).
    Unauthenticated,
    /// 403: credentials valid but not allowed (reserved for the auth layer).
    PermissionDenied,
    /// 404: unknown model or path.
    NotFound,
    /// 405: wrong HTTP method for a known path.
    MethodNotAllowed,
    /// 413: request body larger than `server.max_body_bytes`.
    PayloadTooLarge,
    /// 429: rate limited (by us or, passed through, by the upstream).
    RateLimited,
    /// 502: the upstream answered with an error or with something we cannot parse.
    BadUpstream,
    /// 503: no endpoint is available for the route.
    NoEndpoint,
    /// 504: the upstream did not answer (connect, first byte, idle or total timeout).
    UpstreamTimeout,
    /// 500: a Switchyard bug or misconfiguration.
    Internal,
}

impl ErrorKind {
    /// HTTP status code for this kind.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::InvalidRequest => 400,
            ErrorKind::Unauthenticated => 401,
            ErrorKind::PermissionDenied => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::MethodNotAllowed => 405,
            ErrorKind::PayloadTooLarge => 413,
            ErrorKind::RateLimited => 429,
            ErrorKind::BadUpstream => 502,
            ErrorKind::NoEndpoint => 503,
            ErrorKind::UpstreamTimeout => 504,
            ErrorKind::Internal => 500,
        }
    }

    /// OpenAI's error `type` string for this kind.
    pub fn openai_type(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest
            | ErrorKind::NotFound
            | ErrorKind::MethodNotAllowed
            | ErrorKind::PayloadTooLarge => "invalid_request_error",
            ErrorKind::Unauthenticated => "authentication_error",
            ErrorKind::PermissionDenied => "permission_error",
            ErrorKind::RateLimited => "rate_limit_error",
            ErrorKind::BadUpstream | ErrorKind::NoEndpoint | ErrorKind::UpstreamTimeout => {
                "api_error"
            }
            ErrorKind::Internal => "server_error",
        }
    }

    /// Who is at fault.
    pub fn fault(self) -> Fault {
        match self {
            ErrorKind::InvalidRequest
            | ErrorKind::Unauthenticated
            | ErrorKind::PermissionDenied
            | ErrorKind::NotFound
            | ErrorKind::MethodNotAllowed
            | ErrorKind::PayloadTooLarge => Fault::Client,
            ErrorKind::RateLimited
            | ErrorKind::BadUpstream
            | ErrorKind::NoEndpoint
            | ErrorKind::UpstreamTimeout => Fault::Upstream,
            ErrorKind::Internal => Fault::Gateway,
        }
    }

    /// Whether the same request may be retried on another endpoint.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::RateLimited
                | ErrorKind::BadUpstream
                | ErrorKind::NoEndpoint
                | ErrorKind::UpstreamTimeout
        )
    }

    /// Short label for the `kind` label of error metrics.
    pub fn metric_label(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::Unauthenticated => "unauthenticated",
            ErrorKind::PermissionDenied => "permission_denied",
            ErrorKind::NotFound => "not_found",
            ErrorKind::MethodNotAllowed => "method_not_allowed",
            ErrorKind::PayloadTooLarge => "payload_too_large",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::BadUpstream => "bad_upstream",
            ErrorKind::NoEndpoint => "no_endpoint",
            ErrorKind::UpstreamTimeout => "upstream_timeout",
            ErrorKind::Internal => "internal",
        }
    }
}

/// A request-path error: kind, human message, and the optional OpenAI `param`/`code`.
#[derive(Debug, Clone)]
pub struct GatewayError {
    /// What went wrong; fixes status, type, fault and retryability.
    pub kind: ErrorKind,
    /// A plain sentence for the client. Never contains secrets.
    pub message: String,
    /// The request field at fault, e.g. `messages[0].role` (OpenAI's `param`).
    pub param: Option<String>,
    /// A machine-readable code, e.g. `model_not_found` (OpenAI's `code`).
    pub code: Option<&'static str>,
    /// Seconds the client should wait before retrying (sent as `Retry-After`).
    pub retry_after_s: Option<u64>,
    /// A status other than the kind's own (a policy's `reject 451 "..."`).
    pub status_override: Option<u16>,
}

impl GatewayError {
    /// The `kind` label of `switchyard_upstream_errors_total`: the kind's label, except
    /// that a provider that could not be reached at all (code `upstream_unreachable`)
    /// is `unreachable`, apart from the `bad_upstream` answers it received.
    pub fn metric_kind(&self) -> &'static str {
        match self.code {
            Some("upstream_unreachable") => "unreachable",
            _ => self.kind.metric_label(),
        }
    }

    /// A new error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        GatewayError {
            kind,
            message: message.into(),
            param: None,
            code: None,
            retry_after_s: None,
            status_override: None,
        }
    }

    /// 400 about a specific request field.
    pub fn invalid_field(param: impl Into<String>, message: impl Into<String>) -> Self {
        let mut e = GatewayError::new(ErrorKind::InvalidRequest, message);
        e.param = Some(param.into());
        e
    }

    /// Changes the kind (and so the status), keeping message, param and code.
    pub fn with_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = kind;
        self
    }

    /// Sets the OpenAI `code`.
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// Sets the `Retry-After` seconds.
    pub fn with_retry_after(mut self, seconds: Option<u64>) -> Self {
        self.retry_after_s = seconds;
        self
    }

    /// HTTP status code.
    pub fn status(&self) -> u16 {
        self.status_override.unwrap_or(self.kind.status())
    }

    /// The OpenAI error JSON body: `{"error":{"message","type","param","code"}}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind.openai_type(),
                "param": self.param,
                "code": self.code,
            }
        })
    }

    /// The OpenAI error JSON body as bytes.
    pub fn to_response_body(&self) -> bytes::Bytes {
        bytes::Bytes::from(serde_json::to_vec(&self.to_json()).unwrap_or_default())
    }
}

impl fmt::Display for GatewayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.kind.metric_label())
    }
}

impl std::error::Error for GatewayError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_openai_shape() {
        let e = GatewayError::invalid_field("messages", "`messages` must be a non-empty array");
        let v = e.to_json();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], "messages");
        assert!(v["error"]["code"].is_null());
        assert_eq!(e.status(), 400);
    }

    #[test]
    fn statuses_match_the_issue_table() {
        assert_eq!(ErrorKind::NotFound.status(), 404);
        assert_eq!(ErrorKind::PayloadTooLarge.status(), 413);
        assert_eq!(ErrorKind::BadUpstream.status(), 502);
        assert_eq!(ErrorKind::NoEndpoint.status(), 503);
        assert_eq!(ErrorKind::UpstreamTimeout.status(), 504);
        assert!(ErrorKind::UpstreamTimeout.retryable());
        assert!(!ErrorKind::InvalidRequest.retryable());
    }
}
