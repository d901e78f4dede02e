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

/// A body of `parts` sent one after another, its exact length known (so the
/// request has a `Content-Length`): a request spliced from the client's bytes is
/// sent without copying them into one buffer. Below [`JOIN_BELOW`] bytes the parts
/// are joined into one frame instead, which costs less than several.
pub fn parts(parts: Vec<Bytes>) -> Body {
    let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
    if len < JOIN_BELOW as u64 || parts.len() < 2 {
        return full(Bytes::from(parts.concat()));
    }
    Parts {
        parts: parts.into(),
        len,
    }
    .boxed_unsync()
}

/// Bodies shorter than this are sent as one frame by [`parts`] (16 KiB).
pub const JOIN_BELOW: usize = 16 * 1024;

/// See [`parts`].
struct Parts {
    parts: std::collections::VecDeque<Bytes>,
    /// Bytes not yet yielded.
    len: u64,
}

impl http_body::Body for Parts {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        let next = self.parts.pop_front();
        if let Some(p) = &next {
            self.len -= p.len() as u64;
        }
        std::task::Poll::Ready(next.map(|p| Ok(http_body::Frame::data(p))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.len)
    }
}

/// An empty body.
pub fn empty() -> Body {
    Empty::<Bytes>::new().map_err(|e| match e {}).boxed_unsync()
}

/// Header fields a gateway answer's map is made with room for: its content type, a
/// stream's `cache-control`, the provider's `x-upstream-request-id`, and a spare
/// (`retry-after`, a cache hit's fields). The gateway's own fields (`x-ratelimit-*`,
/// `x-switchyard-*`, `x-request-id`) are not in the map but in the answer's field
/// lines ([`crate::server::lines`]); a map sized for them too (20) was an allocation
/// of about 2 KiB per answer mostly unused.
const RESPONSE_HEADERS: usize = 4;

/// A response with `status` and a JSON body of `bytes` (`content-type:
/// application/json`).
pub fn json(status: http::StatusCode, bytes: impl Into<Bytes>) -> http::Response<Body> {
    let mut r = http::Response::new(full(bytes));
    *r.status_mut() = status;
    *r.headers_mut() = http::HeaderMap::with_capacity(RESPONSE_HEADERS);
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
    *r.headers_mut() = http::HeaderMap::with_capacity(RESPONSE_HEADERS);
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
