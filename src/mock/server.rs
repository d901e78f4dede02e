//! `switchyard mock`: the emulator as an HTTP server speaking OpenAI's API.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::Request;
use tokio::net::TcpListener;

use super::{MockOptions, MockProvider};
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
pub async fn run(listen: SocketAddr, opts: MockOptions) -> std::io::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    println!("switchyard mock listening on {addr}");
    tracing::info!(%addr, ?opts, "mock provider listening");
    let provider = Arc::new(MockProvider::new(opts));
    crate::server::serve(
        listener,
        move |req, _peer| handle(provider.clone(), req),
        crate::server::shutdown_signal(),
        Duration::from_secs(5),
        || {},
        limits(),
    )
    .await;
    Ok(())
}

/// Routes one request to the emulator.
pub async fn handle(provider: Arc<MockProvider>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().trim_end_matches('/');
    match (req.method(), path) {
        (&Method::POST, "/v1/chat/completions" | "/chat/completions") => {
            let bytes = match Limited::new(req.into_body(), MAX_BODY).collect().await {
                Ok(c) => c.to_bytes(),
                Err(_) => {
                    return error(GatewayError::new(
                        ErrorKind::PayloadTooLarge,
                        "request body too large or unreadable",
                    ))
                }
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
                "data": [{"id": "mock-1", "object": "model", "created": 0, "owned_by": "switchyard-mock"}],
            }),
        ),
        (&Method::GET, "/health" | "") => json(StatusCode::OK, serde_json::json!({"status": "ok"})),
        _ => error(GatewayError::new(
            ErrorKind::NotFound,
            format!("unknown path {} {}", req.method(), req.uri().path()),
        )),
    }
}

fn json(status: StatusCode, v: serde_json::Value) -> Response<Body> {
    body::json(status, serde_json::to_vec(&v).unwrap_or_default())
}

fn error(e: GatewayError) -> Response<Body> {
    e.to_response()
}

/// Convenience for tests: an emulator with `opts` on an ephemeral loopback port, served
/// in the background; returns its address.
///
/// # Errors
/// The bind error.
pub async fn spawn_local(opts: MockOptions) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let provider = Arc::new(MockProvider::new(opts));
    tokio::spawn(crate::server::serve(
        listener,
        move |req, _peer| handle(provider.clone(), req),
        std::future::pending(),
        Duration::from_secs(1),
        || {},
        limits(),
    ));
    Ok(addr)
}
