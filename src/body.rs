//! The HTTP body type used on both sides of the proxy.
//!
//! One boxed body type lets a response come from the network (hyper's `Incoming`), from
//! the in-process mock provider, or from a stream transcoder without generics leaking
//! through every layer. `UnsyncBoxBody` is used because `Incoming` and our streams are
//! `Send` but need not be `Sync`.

use bytes::Bytes;
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Empty, Full};

/// Error type carried by bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body type of every request and response inside Switchyard.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

/// A body holding `bytes` in one frame.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|e| match e {})
        .boxed_unsync()
}

/// An empty body.
pub fn empty() -> Body {
    Empty::<Bytes>::new().map_err(|e| match e {}).boxed_unsync()
}

/// A response with `status` and a JSON body of `bytes` (`content-type:
/// application/json`).
pub fn json(status: http::StatusCode, bytes: impl Into<Bytes>) -> http::Response<Body> {
    let mut r = http::Response::new(full(bytes));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

/// A response streaming `body` as server-sent events (`content-type:
/// text/event-stream`, `cache-control: no-cache`).
pub fn event_stream(body: Body) -> http::Response<Body> {
    let mut r = http::Response::new(body);
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache"),
    );
    r
}
