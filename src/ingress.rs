//! Ingress (seed 001, "Ingress Layer"): the HTTP surface of the gateway.
//!
//! Routes requests by method and path, enforces the body size limit before reading a
//! byte more than allowed, and hands chat requests to [`Gateway::chat`]. Every error
//! leaves in OpenAI's JSON shape, and every response names the policy version
//! (`gateway::stamp`). Client authentication runs inside the gateway's chain (its
//! admit phase); the operator endpoints (`/admin/*`, `/metrics`) are guarded here by
//! [`AdminGuard`], and with `admin.listen` they are served only on their own
//! listener ([`Surface`]), like the status page `/ui` that shows them (the page is
//! a static shell; its data comes from `/admin/*`, with the admin key).
//!
//! `OPTIONS` answers 204 with `Allow` on every known path; with `server.cors_origins`
//! it is also the browser's CORS preflight, and answers under `/v1/` carry the CORS
//! fields ([`crate::cors`]), added here after routing like the request id, and to
//! the answers the listener gives by itself ([`refusals`]).
//!
//! Every response carries the request's `x-request-id` ([`crate::request_id`]), and
//! everything logged while serving it sits in a `request` span naming that id. A chat
//! request's access line is written by its response body (`Guarded`) when the body
//! ends, or by the stream body itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::server::lines::HeaderLines;
use crate::server::RequestBody;
use http::{HeaderValue, Method, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::Request;
use metrics_exporter_prometheus::PrometheusHandle;
use tracing::Instrument as _;

use crate::auth::AdminGuard;
use crate::body::{self, Body};
use crate::error::{Code, ErrorKind, GatewayError};
use crate::gateway::{Facts, Gateway, InFlight};
use crate::reload::Reloader;

/// What the HTTP surface routes to: the gateway, the operator views, and the
/// process-level state of `/metrics` and `/ready`.
#[derive(Debug)]
pub struct Services {
    /// The chat request path.
    pub gateway: Arc<Gateway>,
    /// The hot-reload machinery behind `/admin/policies` and `/admin/reload`.
    pub reloader: Arc<Reloader>,
    /// Renders `/metrics`; `None` when another recorder owns the process.
    pub metrics: Option<PrometheusHandle>,
    /// Who may call `/admin/*` and `/metrics`.
    pub admin: AdminGuard,
    /// Which browser origins may call `/v1/*` (`server.cors_origins`); `None`: CORS
    /// is off and costs a request one check.
    pub cors: Option<crate::cors::Cors>,
    draining: AtomicBool,
}

/// Which paths a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// Everything (no `admin.listen`).
    All,
    /// The client API, `/health` and `/ready`; `/admin/*`, `/metrics` and `/ui` are
    /// 404.
    Public,
    /// `/admin/*`, `/metrics`, `/ui`, `/health` and `/ready` only (the `admin.listen`
    /// listener).
    Admin,
}

impl Surface {
    fn serves(self, path: &str) -> bool {
        let operator = matches!(path, "/metrics" | "/ui") || path.starts_with("/admin/");
        // `*`: `OPTIONS *`, a question about the server, whichever listener it asks.
        let both = matches!(path, "/health" | "/ready" | "*");
        match self {
            Surface::All => true,
            Surface::Public => !operator,
            Surface::Admin => operator || both,
        }
    }
}

impl Services {
    /// The services of one running gateway.
    pub fn new(
        gateway: Arc<Gateway>,
        reloader: Arc<Reloader>,
        metrics: Option<PrometheusHandle>,
        admin: AdminGuard,
    ) -> Services {
        Services {
            cors: crate::cors::Cors::new(&gateway.config.server.cors_origins),
            gateway,
            reloader,
            metrics,
            admin,
            draining: AtomicBool::new(false),
        }
    }

    /// Marks the gateway as draining: `/ready` answers 503 from now on.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// Whether shutdown has begun.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }
}

/// Handles one HTTP request from `peer` on a listener serving `surface`.
///
/// Not an `async fn`: the request is taken apart before its future is made, and the
/// future holds the head once and lends it to the routing. An `async fn` keeps a
/// by-value argument twice (the argument's slot and the local it is moved to), and
/// the request passed down two of them sat in every request's future four times,
/// beside its parts (`-Zprint-type-sizes`: 6,752 bytes per request before).
pub fn handle(
    svc: Arc<Services>,
    req: Request<RequestBody>,
    peer: std::net::SocketAddr,
    surface: Surface,
) -> impl std::future::Future<Output = (Response<Body>, HeaderLines)> + Send + 'static {
    let id = crate::request_id::of(req.headers());
    let span = tracing::info_span!("request", id = crate::request_id::as_str(&id));
    let (parts, body) = req.into_parts();
    async move {
        let mut lines = HeaderLines::default();
        let resp = route(&svc, &parts, body, peer, surface, &id, &mut lines)
            .instrument(span)
            .await;
        // Chat responses carry the version their request ran on; every other
        // response (errors before routing, /v1/models, ...) the version serving now.
        // The respond phase is the one writer of field lines before this, and it
        // always writes the version: lines present mean the version is among them.
        debug_assert!(
            lines.as_bytes().is_empty() || lines.contains(&crate::gateway::POLICY_HEADER)
        );
        if lines.as_bytes().is_empty() {
            let gw = &svc.gateway;
            crate::gateway::stamp(gw, &mut lines, &gw.policy.load().version_header, None);
        }
        lines.push(&crate::request_id::HEADER, &id);
        if let Some(cors) = &svc.cors {
            if surface != Surface::Admin && crate::cors::Cors::covers(parts.uri.path()) {
                cors.actual(&parts.method, &parts.headers, &mut lines);
            }
        }
        (resp, lines)
    }
}

/// The fields the listener serving `surface` adds to the answers it gives by itself
/// ([`crate::server::Refusals`]: a request head it could not parse or whose URI or
/// header section is too large): the CORS fields [`handle`] adds to every answer
/// under `/v1/` ([`crate::cors::Cors::actual`]), so a page on an allowed origin
/// reads the 414 or 431 rather than a network error. None with CORS off or on the
/// admin listener. A head whose method could not be read is not taken for a
/// preflight.
pub fn refusals(svc: &Services, surface: Surface) -> crate::server::Refusals {
    let Some(cors) = svc.cors.clone().filter(|_| surface != Surface::Admin) else {
        return crate::server::Refusals::default();
    };
    crate::server::Refusals::new(move |req, lines| {
        if crate::cors::Cors::covers(req.path) {
            let method = req.method.unwrap_or(&Method::GET);
            cors.actual(method, req.headers, lines);
        }
    })
}

async fn route(
    svc: &Services,
    req: &http::request::Parts,
    body: RequestBody,
    peer: std::net::SocketAddr,
    surface: Surface,
    id: &HeaderValue,
    lines: &mut HeaderLines,
) -> Response<Body> {
    let gw = &svc.gateway;
    let started = Instant::now();
    let path = req.uri.path();
    let path = if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path
    };
    if !surface.serves(path) {
        return unknown_path(&req.method, path);
    }
    if path.starts_with("/admin/") {
        if let Err(e) = svc.admin.check_admin(&req.headers) {
            return e.to_response();
        }
    } else if path == "/metrics" {
        if let Err(e) = svc.admin.check_metrics(peer.ip(), &req.headers) {
            return e.to_response();
        }
    }
    // A method no path here could take, because no server knows it (RFC 9110
    // section 9.1: 501; methods are case-sensitive, so `get` is one).
    if !KNOWN_METHODS.contains(&req.method) {
        return GatewayError::new(
            ErrorKind::NotImplemented,
            format!(
                "the method {} is not implemented",
                crate::error::bounded(req.method.as_str(), 32)
            ),
        )
        .to_response();
    }
    // OPTIONS asks what a path takes (RFC 9110 section 9.3.7), and is how a browser
    // asks whether it may call it from another origin (a CORS preflight).
    if req.method == Method::OPTIONS {
        return options(svc.cors.as_ref(), path, &req.headers);
    }
    // HEAD is GET without the body (RFC 9110 section 9.3.2): both servers drop a
    // HEAD answer's body and keep its framing fields.
    let method = if req.method == Method::HEAD {
        &Method::GET
    } else {
        &req.method
    };
    match (method, path) {
        (&Method::POST, "/v1/chat/completions") => {
            // Counted until the response body ends (streams included), and released
            // even when the client goes away and the future is dropped.
            let guard = gw.log.in_flight();
            // The body's bytes in the buffer budget, held until the response body
            // ends or the request is dropped (a client gone mid-body).
            let mut charge = gw.body_budget.charge();
            let limit = gw.config.server.max_body_bytes;
            let (resp, facts) = match read_body(&req.headers, body, limit, &mut charge, started)
                .await
            {
                Ok(bytes) => {
                    gw.chat(bytes, &req.headers, started, id.clone(), lines)
                        .await
                }
                Err(e) => {
                    // The caller, for the access line's key. A client without valid
                    // credentials gets 401 whatever it sent (README,
                    // "Authentication"), an oversized or unreadable body included.
                    // Authenticated here, on this path only: an accepted body is
                    // authenticated by the admit phase.
                    let (e, caller) = match gw.auth.authenticate(&req.headers) {
                        Ok(p) => (e, crate::routing::features::Caller::from_principal(&p)),
                        Err(_) if e.status() == CLIENT_CLOSED => (e, Default::default()),
                        Err(unauthenticated) => (unauthenticated, Default::default()),
                    };
                    let facts = Facts::refused(gw, id.clone(), &req.headers, started, caller, &e);
                    if e.status() == CLIENT_CLOSED {
                        // Nobody reads an answer: the line is written now, as
                        // `client_gone` (a body cut short was logged as a 400
                        // `invalid_request`, found by attack, 2026-12-07). The request
                        // metrics count answers, and this had none.
                        facts.emit(gw, crate::gateway::access::End::ClientGone);
                        (e.to_response(), None)
                    } else {
                        // Counted as every other answer is (a 413 was not).
                        gw.log.failed(None, None, &e);
                        (e.to_response(), Some(facts))
                    }
                }
            };
            let access = facts.map(|f| (gw.clone(), f, tracing::Span::current()));
            resp.map(|b| {
                Body::boxed(Guarded {
                    inner: b,
                    _guard: guard,
                    _charge: charge,
                    access,
                })
            })
        }
        // Authenticated as a chat request is, and listed as its key sees them.
        (&Method::GET, "/v1/models") => match gw.auth.authenticate(&req.headers) {
            Ok(p) => body::json(StatusCode::OK, gw.models_json(&p)),
            Err(e) => e.to_response(),
        },
        (&Method::GET, p) if p.starts_with(MODEL_PATH) => {
            // A model name may hold `/` (sent as is or as `%2F`) or other escapes.
            let name =
                percent_encoding::percent_decode_str(&p[MODEL_PATH.len()..]).decode_utf8_lossy();
            match gw
                .auth
                .authenticate(&req.headers)
                .and_then(|principal| gw.model_json(&name, &principal))
            {
                Ok(b) => body::json(StatusCode::OK, b),
                Err(e) => e.to_response(),
            }
        }
        (&Method::GET, "/health") => body::json(StatusCode::OK, &br#"{"status":"ok"}"#[..]),
        (&Method::GET, "/ready") => {
            if svc.is_draining() {
                body::json(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &br#"{"status":"draining"}"#[..],
                )
            } else {
                body::json(StatusCode::OK, &br#"{"status":"ready"}"#[..])
            }
        }
        (&Method::GET, "/metrics") => match &svc.metrics {
            Some(h) => {
                gw.cache.export_metrics();
                crate::telemetry::process::record();
                metrics::counter!(crate::telemetry::ACCESS_LOG_DROPPED)
                    .absolute(crate::logging::dropped_lines() as u64);
                // Read at scrape time: the request path keeps no gauge up to date.
                metrics::gauge!(crate::telemetry::BUFFERED_BODY_BYTES)
                    .set(gw.body_budget.used() as f64);
                let mut r = Response::new(body::full(h.render()));
                r.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4"),
                );
                r
            }
            None => GatewayError::new(
                ErrorKind::NotFound,
                "metrics are not enabled in this process",
            )
            .to_response(),
        },
        (&Method::GET, "/admin/endpoints") => crate::admin::endpoints::handle(gw),
        (&Method::GET, "/admin/policies") => crate::admin::policies::status(&svc.reloader),
        (&Method::POST, "/admin/reload") => crate::admin::policies::reload(&svc.reloader).await,
        (&Method::GET, "/admin/traffic") => crate::admin::recent::traffic(gw),
        (&Method::GET, "/admin/decisions") => crate::admin::recent::decisions(gw),
        // The page shell carries no data; what it shows comes from `/admin/*` above,
        // with the admin key (`admin::ui`).
        (&Method::GET, "/ui") => crate::admin::ui::page(),
        _ => match Takes::of(path) {
            Some(takes) => method_not_allowed(&req.method, path, takes),
            None => unknown_path(&req.method, path),
        },
    }
}

/// The methods of RFC 9110 section 9 and PATCH (RFC 5789): any other gets 501.
const KNOWN_METHODS: [Method; 9] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::CONNECT,
    Method::OPTIONS,
    Method::TRACE,
    Method::PATCH,
];

/// Where `GET /v1/models/{model}` starts.
const MODEL_PATH: &str = "/v1/models/";

/// The methods a known path takes besides `OPTIONS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Takes {
    /// `POST` (chat, `/admin/reload`).
    Post,
    /// `GET` and `HEAD` (every other path).
    Get,
}

impl Takes {
    /// What `path` (without a trailing `/`) takes; `None` for a path that is not
    /// served.
    fn of(path: &str) -> Option<Takes> {
        match path {
            "/v1/chat/completions" | "/admin/reload" => Some(Takes::Post),
            "/v1/models" | "/health" | "/ready" | "/metrics" | "/admin/endpoints"
            | "/admin/policies" | "/admin/traffic" | "/admin/decisions" | "/ui" => Some(Takes::Get),
            p if p.starts_with(MODEL_PATH) => Some(Takes::Get),
            _ => None,
        }
    }

    /// The methods, as `Access-Control-Allow-Methods` names them.
    fn methods(self) -> &'static str {
        match self {
            Takes::Post => "POST",
            Takes::Get => "GET, HEAD",
        }
    }

    /// The `Allow` value (RFC 9110 section 10.2.1): the methods and `OPTIONS`.
    fn allow(self) -> &'static str {
        match self {
            Takes::Post => "POST, OPTIONS",
            Takes::Get => "GET, HEAD, OPTIONS",
        }
    }
}

/// `Allow` of `OPTIONS *`: every method some path of the server takes.
const ALLOW_ANY_PATH: &str = "GET, HEAD, POST, OPTIONS";

/// The answer to `OPTIONS` on `path` with request `headers`: 204 with `Allow`, plus
/// the preflight grant of `cors` ([`crate::cors::Cors::preflight`]) on the paths it
/// covers; 404 for an unknown path. `OPTIONS *` names what the server as a whole
/// takes, never with CORS fields (browsers do not send it).
fn options(
    cors: Option<&crate::cors::Cors>,
    path: &str,
    headers: &http::HeaderMap,
) -> Response<Body> {
    let (allow, takes) = match (path, Takes::of(path)) {
        ("*", _) => (ALLOW_ANY_PATH, None),
        (_, Some(t)) => (t.allow(), Some(t)),
        (_, None) => return unknown_path(&Method::OPTIONS, path),
    };
    let mut r = Response::new(body::empty());
    *r.status_mut() = StatusCode::NO_CONTENT;
    r.headers_mut()
        .insert(http::header::ALLOW, HeaderValue::from_static(allow));
    if let (Some(cors), Some(t)) = (cors, takes) {
        if crate::cors::Cors::covers(path) {
            cors.preflight(headers, t.methods(), r.headers_mut());
        }
    }
    r
}

/// 405 for `method` on `path`, which `takes` other methods, with `Allow` naming
/// them.
fn method_not_allowed(method: &Method, path: &str, takes: Takes) -> Response<Body> {
    let mut r = GatewayError::new(
        ErrorKind::MethodNotAllowed,
        format!(
            "{} is not allowed on {path}; use {}",
            crate::error::bounded(method.as_str(), 32),
            takes.methods()
        ),
    )
    .to_response();
    r.headers_mut()
        .insert(http::header::ALLOW, HeaderValue::from_static(takes.allow()));
    r
}

fn unknown_path(method: &Method, path: &str) -> Response<Body> {
    GatewayError::new(
        ErrorKind::NotFound,
        format!("unknown path {method} {}", crate::error::bounded(path, 256)),
    )
    .with_code(Code::UnknownUrl)
    .to_response()
}

/// Reads the body, refusing more than `limit` bytes with 413 (by `Content-Length`
/// before reading, or while reading when the length is not declared), and charging
/// every chunk to `charge` ([`crate::budget`]) before keeping it: 503 `overloaded`
/// when the gateway's buffer budget has no room for it within
/// [`crate::budget::WAIT`].
///
/// A refused body is read and thrown away first, up to [`DRAIN_MAX_BYTES`] and
/// [`DRAIN_TIMEOUT`], the way nginx discards one: a client that writes its whole body
/// before reading (most do) then reads the 413 instead of a reset connection. A body
/// declared larger than `limit` + [`DRAIN_MAX_BYTES`], or declared too large with
/// `Expect: 100-continue` (the client waits before sending it), is refused at once.
///
/// `started`: when the request's head was read, from which [`BODY_TIMEOUT`] and the
/// budget's wait count (one reading of the clock serves the request's every
/// deadline here).
async fn read_body(
    headers: &http::HeaderMap,
    mut body: RequestBody,
    limit: usize,
    charge: &mut crate::budget::Charge,
    started: Instant,
) -> Result<bytes::Bytes, GatewayError> {
    let too_large = || {
        GatewayError::new(
            ErrorKind::PayloadTooLarge,
            format!("request body is larger than the limit of {limit} bytes"),
        )
        .with_code(Code::RequestTooLarge)
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
    let started = tokio::time::Instant::from_std(started);
    let deadline = started + crate::budget::WAIT;
    let read = async {
        // One buffer of the declared length: the chunks are copied in as they come
        // and dropped, so a body is held once (plus the chunk in hand), not as a list
        // of chunks and then their concatenation.
        let mut all = bytes::BytesMut::with_capacity(declared.unwrap_or(0) as usize);
        let mut first: Option<bytes::Bytes> = None;
        let mut total = 0usize;
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.map_err(Read::Body)?.into_data() else {
                continue;
            };
            total += data.len();
            if total > limit {
                return Err(Read::TooLarge);
            }
            charge
                .add(data.len(), deadline)
                .await
                .map_err(Read::Budget)?;
            // A body of one chunk is kept as it came, without a copy.
            if first.is_none() && all.is_empty() {
                first = Some(data);
            } else {
                if let Some(f) = first.take() {
                    all.extend_from_slice(&f);
                }
                all.extend_from_slice(&data);
            }
        }
        Ok(first.unwrap_or_else(|| all.freeze()))
    };
    match tokio::time::timeout_at(started + BODY_TIMEOUT, read).await {
        Err(_) => Err(GatewayError::new(
            ErrorKind::RequestTimeout,
            format!(
                "the request body did not arrive within {} s",
                BODY_TIMEOUT.as_secs()
            ),
        )
        .with_code(Code::RequestTimeout)),
        Ok(Ok(b)) => Ok(b),
        Ok(Err(Read::TooLarge)) => {
            discard(&mut body).await;
            Err(too_large())
        }
        Ok(Err(Read::Budget(e))) => {
            // What was read is given back before the rest is thrown away.
            *charge = charge.empty();
            discard(&mut body).await;
            Err(e)
        }
        Ok(Err(Read::Body(e))) if client_left(&*e) => Err(GatewayError::new(
            ErrorKind::InvalidRequest,
            "the client closed the connection before the request body was complete",
        )
        .with_status(CLIENT_CLOSED)),
        Ok(Err(Read::Body(e))) => Err(GatewayError::new(
            ErrorKind::InvalidRequest,
            format!("could not read the request body: {e}"),
        )),
    }
}

/// nginx's status for a client that closed its connection before the answer
/// (`client_gone` in the access line): what [`read_body`] gives a body cut short by
/// its client, where a malformed one is 400.
const CLIENT_CLOSED: u16 = 499;

/// Whether reading a body failed because its client closed or reset the connection
/// (the server's `UnexpectedEof` for a body cut short, or the socket's reset).
fn client_left(e: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>().is_some_and(|e| {
        matches!(
            e.kind(),
            std::io::ErrorKind::UnexpectedEof
                | std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::BrokenPipe
        )
    })
}

/// Why reading a body stopped early.
enum Read {
    /// Over `max_body_bytes`.
    TooLarge,
    /// No room in the buffer budget in time.
    Budget(GatewayError),
    /// The connection failed.
    Body(crate::body::BoxError),
}

/// Most bytes of a refused body read and thrown away before the 413 is sent.
pub const DRAIN_MAX_BYTES: usize = 16 * 1024 * 1024;

/// Longest time spent throwing a refused body away before the 413 is sent.
pub const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads and drops the rest of `body`, within [`DRAIN_MAX_BYTES`] and
/// [`DRAIN_TIMEOUT`]; errors end it quietly (the 413 follows either way).
async fn discard(body: &mut RequestBody) {
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

/// A chat response body that keeps an [`InFlight`] until it ends or is dropped, and
/// writes the request's access line then (when the gateway handed its facts over),
/// in the request's span.
struct Guarded {
    inner: Body,
    _guard: InFlight,
    _charge: crate::budget::Charge,
    access: Option<(Arc<Gateway>, Box<Facts>, tracing::Span)>,
}

impl Guarded {
    /// Writes the access line once: `complete` when the whole body was produced.
    fn log(&mut self, complete: bool) {
        if let Some((gw, facts, span)) = self.access.take() {
            let _in = span.enter();
            facts.emit_body_end(&gw, complete);
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        let complete = http_body::Body::is_end_stream(&self.inner);
        self.log(complete);
    }
}

impl http_body::Body for Guarded {
    type Data = bytes::Bytes;
    type Error = crate::body::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if let std::task::Poll::Ready(Some(Ok(frame))) = &polled {
            if let (Some((gw, facts, _)), Some(data)) = (self.access.as_mut(), frame.data_ref()) {
                if let Some(b) = facts.bodies.as_mut() {
                    b.sent(data, gw.config.telemetry.access_log.max_body_bytes);
                }
            }
        }
        match &polled {
            std::task::Poll::Ready(None) => self.log(true),
            std::task::Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.log(true),
            std::task::Poll::Ready(Some(Err(_))) => self.log(false),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
