//! Ingress (seed 001, "Ingress Layer"): the HTTP surface of the gateway.
//!
//! Routes requests by method and path, enforces the body size limit before reading a
//! byte more than allowed, and hands chat requests to [`Gateway::chat`]. Every error
//! leaves here in OpenAI's JSON shape. Authentication and rate limits will sit here,
//! before the body is read.

use std::sync::Arc;
use std::time::Instant;

use http::{HeaderValue, Method, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::Request;

use crate::body::{self, Body};
use crate::error::{ErrorKind, GatewayError};
use crate::gateway::{error_response, Gateway};

/// Handles one HTTP request.
pub async fn handle(gw: Arc<Gateway>, req: Request<Incoming>) -> Response<Body> {
    let mut resp = route(&gw, req).await;
    // Chat responses carry the version their request ran on; every other response
    // (errors before routing, /v1/models, ...) the version serving now.
    if !resp.headers().contains_key(POLICY_HEADER) {
        if let Ok(v) = HeaderValue::from_str(&gw.policy.load().version) {
            resp.headers_mut().insert(POLICY_HEADER, v);
        }
    }
    resp
}

/// The response header naming the policy version (content hash) in force.
pub const POLICY_HEADER: &str = "x-switchyard-policy";

async fn route(gw: &Arc<Gateway>, req: Request<Incoming>) -> Response<Body> {
    let started = Instant::now();
    let path = req.uri().path();
    let path = if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path
    };
    match (req.method(), path) {
        (&Method::POST, "/v1/chat/completions") => {
            // Counted until the response body ends (streams included), and released
            // even when the client goes away and the future is dropped.
            let guard = InFlight::new(gw.in_flight.clone());
            let (parts, body) = req.into_parts();
            let resp = match read_body(&parts.headers, body, gw.config.server.max_body_bytes).await
            {
                Ok(bytes) => gw.chat(bytes, &parts.headers, started).await,
                Err(e) => error_response(&e),
            };
            resp.map(|b| {
                Body::new(Guarded {
                    inner: b,
                    _guard: guard,
                })
            })
        }
        (&Method::GET, "/v1/models") => json(StatusCode::OK, gw.models_json()),
        (&Method::GET | &Method::HEAD, "/health") => {
            json(StatusCode::OK, &br#"{"status":"ok"}"#[..])
        }
        (&Method::GET, "/ready") => {
            if gw.is_draining() {
                json(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &br#"{"status":"draining"}"#[..],
                )
            } else {
                json(StatusCode::OK, &br#"{"status":"ready"}"#[..])
            }
        }
        (&Method::GET, "/metrics") => match &gw.metrics {
            Some(h) => {
                let mut r = Response::new(body::full(h.render()));
                r.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4"),
                );
                r
            }
            None => error_response(&GatewayError::new(
                ErrorKind::NotFound,
                "metrics are not enabled in this process",
            )),
        },
        (&Method::GET, "/admin/endpoints") => crate::admin::endpoints::handle(gw),
        (&Method::GET, "/admin/policies") => crate::reload::admin_status(gw),
        (&Method::POST, "/admin/reload") => crate::reload::admin_reload(gw).await,
        (
            _,
            "/v1/chat/completions"
            | "/v1/models"
            | "/health"
            | "/ready"
            | "/metrics"
            | "/admin/endpoints"
            | "/admin/policies"
            | "/admin/reload",
        ) => {
            let allow = if matches!(path, "/v1/chat/completions" | "/admin/reload") {
                "POST"
            } else {
                "GET"
            };
            let mut r = error_response(&GatewayError::new(
                ErrorKind::MethodNotAllowed,
                format!("{} is not allowed on {path}; use {allow}", req.method()),
            ));
            r.headers_mut()
                .insert(http::header::ALLOW, HeaderValue::from_static(allow));
            r
        }
        _ => error_response(
            &GatewayError::new(
                ErrorKind::NotFound,
                format!("unknown path {} {path}", req.method()),
            )
            .with_code("unknown_url"),
        ),
    }
}

/// Reads the body, refusing more than `limit` bytes with 413 (by `Content-Length`
/// before reading, or while reading when the length is not declared).
async fn read_body(
    headers: &http::HeaderMap,
    body: Incoming,
    limit: usize,
) -> Result<bytes::Bytes, GatewayError> {
    let too_large = || {
        GatewayError::new(
            ErrorKind::PayloadTooLarge,
            format!("request body is larger than the limit of {limit} bytes"),
        )
        .with_code("request_too_large")
    };
    if let Some(len) = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse::<u64>().ok())
    {
        if len > limit as u64 {
            return Err(too_large());
        }
    }
    let read = tokio::time::timeout(BODY_TIMEOUT, Limited::new(body, limit).collect());
    match read.await {
        Err(_) => {
            let mut e = GatewayError::new(
                ErrorKind::InvalidRequest,
                format!(
                    "the request body did not arrive within {} s",
                    BODY_TIMEOUT.as_secs()
                ),
            )
            .with_code("request_timeout");
            e.status_override = Some(408);
            Err(e)
        }
        Ok(Ok(c)) => Ok(c.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(e)) => Err(GatewayError::new(
            ErrorKind::InvalidRequest,
            format!("could not read the request body: {e}"),
        )),
    }
}

/// Longest wait for a request body once its headers arrived (slow clients get 408).
pub const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Holds one unit of the in-flight gauge; gives it back when dropped.
struct InFlight(metrics::Gauge);

impl InFlight {
    fn new(g: metrics::Gauge) -> InFlight {
        g.increment(1.0);
        InFlight(g)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// A response body that keeps an [`InFlight`] until it ends or is dropped.
struct Guarded {
    inner: Body,
    _guard: InFlight,
}

impl http_body::Body for Guarded {
    type Data = bytes::Bytes;
    type Error = crate::body::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

pub(crate) fn json(status: StatusCode, bytes: impl Into<bytes::Bytes>) -> Response<Body> {
    let mut r = Response::new(body::full(bytes));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}
