//! Ingress (seed 001, "Ingress Layer"): the HTTP surface of the gateway.
//!
//! Routes requests by method and path, enforces the body size limit before reading a
//! byte more than allowed, and hands chat requests to [`Gateway::chat`]. Every error
//! leaves here in OpenAI's JSON shape. Authentication and rate limits will sit here,
//! before the body is read.

use std::sync::Arc;
use std::time::Instant;

use http::{HeaderValue, Method, Response, StatusCode};
use http_body_util::BodyExt;
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
                format!(
                    "{} is not allowed on {path}; use {allow}",
                    crate::error::bounded(req.method().as_str(), 32)
                ),
            ));
            r.headers_mut()
                .insert(http::header::ALLOW, HeaderValue::from_static(allow));
            r
        }
        _ => error_response(
            &GatewayError::new(
                ErrorKind::NotFound,
                format!(
                    "unknown path {} {}",
                    req.method(),
                    crate::error::bounded(path, 256)
                ),
            )
            .with_code(crate::error::Code::UnknownUrl),
        ),
    }
}

/// Reads the body, refusing more than `limit` bytes with 413 (by `Content-Length`
/// before reading, or while reading when the length is not declared).
///
/// A refused body is read and thrown away first, up to [`DRAIN_MAX_BYTES`] and
/// [`DRAIN_TIMEOUT`], the way nginx discards one: a client that writes its whole body
/// before reading (most do) then reads the 413 instead of a reset connection. A body
/// declared larger than `limit` + [`DRAIN_MAX_BYTES`], or declared too large with
/// `Expect: 100-continue` (the client waits before sending it), is refused at once.
async fn read_body(
    headers: &http::HeaderMap,
    mut body: Incoming,
    limit: usize,
) -> Result<bytes::Bytes, GatewayError> {
    let too_large = || {
        GatewayError::new(
            ErrorKind::PayloadTooLarge,
            format!("request body is larger than the limit of {limit} bytes"),
        )
        .with_code(crate::error::Code::RequestTooLarge)
    };
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse::<u64>().ok());
    if let Some(len) = declared.filter(|len| *len > limit as u64) {
        // A client that sent `Expect: 100-continue` has not sent the body and waits
        // for our word: reading (which makes hyper send `100 Continue`) would only
        // make it upload what we throw away. Answer at once, as nginx does.
        let expects_continue = headers
            .get(http::header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        if !expects_continue && len <= (limit + DRAIN_MAX_BYTES) as u64 {
            discard(&mut body).await;
        }
        return Err(too_large());
    }
    let read = async {
        let mut parts: Vec<bytes::Bytes> = Vec::new();
        let mut total = 0usize;
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame?.into_data() else {
                continue;
            };
            total += data.len();
            if total > limit {
                return Ok(None);
            }
            parts.push(data);
        }
        Ok::<_, hyper::Error>(Some(match parts.len() {
            0 => bytes::Bytes::new(),
            1 => parts.swap_remove(0),
            _ => {
                let mut all = bytes::BytesMut::with_capacity(total);
                for p in &parts {
                    all.extend_from_slice(p);
                }
                all.freeze()
            }
        }))
    };
    match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Err(_) => {
            Err(GatewayError::new(
                ErrorKind::RequestTimeout,
                format!(
                    "the request body did not arrive within {} s",
                    BODY_TIMEOUT.as_secs()
                ),
            )
            .with_code(crate::error::Code::RequestTimeout))
        }
        Ok(Ok(Some(b))) => Ok(b),
        Ok(Ok(None)) => {
            discard(&mut body).await;
            Err(too_large())
        }
        Ok(Err(e)) => Err(GatewayError::new(
            ErrorKind::InvalidRequest,
            format!("could not read the request body: {e}"),
        )),
    }
}

/// Most bytes of a refused body read and thrown away before the 413 is sent.
pub const DRAIN_MAX_BYTES: usize = 16 * 1024 * 1024;

/// Longest time spent throwing a refused body away before the 413 is sent.
pub const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads and drops the rest of `body`, within [`DRAIN_MAX_BYTES`] and
/// [`DRAIN_TIMEOUT`]; errors end it quietly (the 413 follows either way).
async fn discard(body: &mut Incoming) {
    let drain = async {
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(d) = frame.into_data() {
                seen += d.len();
                if seen > DRAIN_MAX_BYTES {
                    return;
                }
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, drain).await;
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
