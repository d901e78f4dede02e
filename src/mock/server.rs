//! `switchyard mock`: the emulator as an HTTP server speaking one provider's API.
//!
//! Routes, by format: OpenAI `POST /v1/chat/completions` and `GET /v1/models`;
//! Anthropic `POST /v1/messages`; Gemini `POST /v1beta/models/{model}:generateContent`
//! and `:streamGenerateContent?alt=sse`; Bedrock `POST /model/{modelId}/converse` and
//! `/converse-stream` (authenticated, see [`bedrock::check_auth`]). Each also
//! answers without its version prefix
//! (a gateway's `base_url` may include it). Every format serves `GET /health` and
//! `GET /mock/requests` (the [`MockProvider::ledger`]); other paths get a 404 in the
//! format's error shape.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::server::RequestBody;
use http::{Method, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::Request;
use tokio::net::TcpListener;

use super::{anthropic, bedrock, gemini, MockOptions, MockProvider, Wire};
use crate::api::ChatRequest;
use crate::body::{self, Body};
use crate::error::{ErrorKind, GatewayError};
use crate::server::ConnLimits;

/// Largest request body the emulator reads, in bytes.
const MAX_BODY: usize = 32 * 1024 * 1024;

/// The emulator's connection limits: the gateway's defaults, but idle connections
/// are kept 120 s, longer than the gateway's upstream pool keeps them (90 s), so that
/// the pool, not the emulator, closes them and no request races a closing connection.
fn limits() -> ConnLimits {
    ConnLimits {
        idle_timeout: Duration::from_secs(120),
        ..ConnLimits::default()
    }
}

/// Binds `listen`, prints `switchyard mock listening on ADDR` (the real address, so
/// tests can bind port 0), and serves until SIGTERM/SIGINT.
///
/// # Errors
/// The bind error, if the address cannot be bound.
pub async fn run(listen: SocketAddr, opts: MockOptions, wire: Wire) -> std::io::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    println!("switchyard mock listening on {addr}");
    tracing::info!(%addr, ?opts, format = wire.as_str(), "mock provider listening");
    let provider = Arc::new(MockProvider::new(opts));
    crate::server::serve(
        listener,
        move |req, _peer| handle(provider.clone(), wire, req),
        crate::server::shutdown_signal(),
        Duration::from_secs(5),
        || {},
        limits(),
        crate::server::Refusals::default(),
    )
    .await;
    Ok(())
}

/// Routes one request to the emulator speaking `wire`.
pub async fn handle(
    provider: Arc<MockProvider>,
    wire: Wire,
    req: Request<RequestBody>,
) -> Response<Body> {
    let path = req.uri().path().trim_end_matches('/').to_string();
    match (req.method(), path.as_str()) {
        (&Method::GET, "/health" | "") => {
            return json(StatusCode::OK, serde_json::json!({"status": "ok"}))
        }
        (&Method::GET, "/mock/requests") => return json(StatusCode::OK, provider.ledger()),
        _ => {}
    }
    match wire {
        Wire::OpenAi => openai(provider, req, &path).await,
        Wire::Anthropic => match (req.method(), path.as_str()) {
            (&Method::POST, "/v1/messages" | "/messages") => {
                let headers = req.headers().clone();
                let bytes = match read(req).await {
                    Ok(b) => b,
                    Err(()) => return too_large(wire),
                };
                match anthropic::parse(&headers, &bytes, provider.options().prefill) {
                    Ok(turn) => provider.respond(wire, &turn).await,
                    Err(resp) => *resp,
                }
            }
            _ => not_found(wire, &req),
        },
        Wire::Gemini => {
            let Some((model, method)) = gemini_route(&path) else {
                return not_found(wire, &req);
            };
            if req.method() != Method::POST {
                return not_found(wire, &req);
            }
            let stream = match method {
                "generateContent" => false,
                "streamGenerateContent" => true,
                _ => return not_found(wire, &req),
            };
            let sse = req
                .uri()
                .query()
                .is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse"));
            if stream && !sse {
                return gemini::error(
                    400,
                    "INVALID_ARGUMENT",
                    "switchyard mock streams only as server-sent events: add ?alt=sse",
                );
            }
            let model = model.to_string();
            let bytes = match read(req).await {
                Ok(b) => b,
                Err(()) => return too_large(wire),
            };
            match gemini::parse(&model, stream, &bytes, provider.options().prefill) {
                Ok(turn) => provider.respond(wire, &turn).await,
                Err(resp) => *resp,
            }
        }
        Wire::Bedrock => {
            let Some((model, stream)) = bedrock::route(&path) else {
                return not_found(wire, &req);
            };
            if req.method() != Method::POST {
                return not_found(wire, &req);
            }
            if let Err(resp) = bedrock::check_auth(req.headers()) {
                return *resp;
            }
            let bytes = match read(req).await {
                Ok(b) => b,
                Err(()) => return too_large(wire),
            };
            match bedrock::parse(&model, stream, &bytes, provider.options().prefill) {
                Ok(turn) => provider.respond(wire, &turn).await,
                Err(resp) => *resp,
            }
        }
    }
}

/// `(model, method)` of a Gemini path `[/v1beta|/v1]/models/{model}:{method}`.
fn gemini_route(path: &str) -> Option<(&str, &str)> {
    let rest = path
        .strip_prefix("/v1beta")
        .or_else(|| path.strip_prefix("/v1"))
        .unwrap_or(path);
    let (model, method) = rest.strip_prefix("/models/")?.rsplit_once(':')?;
    (!model.is_empty() && !model.contains('/')).then_some((model, method))
}

async fn read(req: Request<RequestBody>) -> Result<bytes::Bytes, ()> {
    match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(_) => Err(()),
    }
}

const TOO_LARGE: &str = "request body too large or unreadable";

fn too_large(wire: Wire) -> Response<Body> {
    match wire {
        Wire::OpenAi => error(GatewayError::new(ErrorKind::PayloadTooLarge, TOO_LARGE)),
        Wire::Anthropic => json(
            StatusCode::PAYLOAD_TOO_LARGE,
            serde_json::json!({"type": "error", "error": {"type": "request_too_large", "message": TOO_LARGE}}),
        ),
        Wire::Gemini => gemini::error(413, "INVALID_ARGUMENT", TOO_LARGE),
        Wire::Bedrock => bedrock::error(413, "ValidationException", TOO_LARGE),
    }
}

fn not_found(wire: Wire, req: &Request<RequestBody>) -> Response<Body> {
    let message = format!("unknown path {} {}", req.method(), req.uri().path());
    match wire {
        Wire::OpenAi => error(GatewayError::new(ErrorKind::NotFound, message)),
        Wire::Anthropic => json(
            StatusCode::NOT_FOUND,
            serde_json::json!({"type": "error", "error": {"type": "not_found_error", "message": message}}),
        ),
        Wire::Gemini => gemini::error(404, "NOT_FOUND", message),
        // AWS answers an unknown operation path so.
        Wire::Bedrock => bedrock::error(404, "UnknownOperationException", message),
    }
}

async fn openai(
    provider: Arc<MockProvider>,
    req: Request<RequestBody>,
    path: &str,
) -> Response<Body> {
    match (req.method(), path) {
        (&Method::POST, "/v1/chat/completions" | "/chat/completions") => {
            let bytes = match read(req).await {
                Ok(b) => b,
                Err(()) => return too_large(Wire::OpenAi),
            };
            match ChatRequest::parse(&bytes) {
                Ok(chat) => provider.chat(&chat).await,
                Err(e) => error(e),
            }
        }
        (&Method::GET, "/v1/models" | "/models") => json(
            StatusCode::OK,
            serde_json::json!({
                "object": "list",
                "data": [{"id": "mock-1", "object": "model", "created": provider.started(), "owned_by": "switchyard-mock"}],
            }),
        ),
        _ => not_found(Wire::OpenAi, &req),
    }
}

fn json(status: StatusCode, v: serde_json::Value) -> Response<Body> {
    body::json(status, serde_json::to_vec(&v).unwrap_or_default())
}

fn error(e: GatewayError) -> Response<Body> {
    e.to_response()
}

/// Convenience for tests: an OpenAI-format emulator with `opts` on an ephemeral
/// loopback port, served in the background; returns its address.
///
/// # Errors
/// The bind error.
pub async fn spawn_local(opts: MockOptions) -> std::io::Result<SocketAddr> {
    spawn_local_wire(opts, Wire::OpenAi).await
}

/// As [`spawn_local`], speaking `wire`.
///
/// # Errors
/// The bind error.
pub async fn spawn_local_wire(opts: MockOptions, wire: Wire) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let provider = Arc::new(MockProvider::new(opts));
    tokio::spawn(crate::server::serve(
        listener,
        move |req, _peer| handle(provider.clone(), wire, req),
        std::future::pending(),
        Duration::from_secs(1),
        || {},
        limits(),
        crate::server::Refusals::default(),
    ));
    Ok(addr)
}
