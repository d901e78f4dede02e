//! The HTTP body type used on both sides of the proxy.
//!
//! One body type lets a response come from the network, from the in-process mock
//! provider, or from a stream transcoder without generics leaking through every
//! layer: a boxed body (`UnsyncBoxBody`: `Incoming` and our streams are `Send` but
//! need not be `Sync`). A body that is one buffer known at once (every JSON request
//! sent upstream, every whole answer and error) is held as that buffer, unboxed: a
//! box was an allocation, and its frames calls through a vtable, for each of the four
//! such bodies of a proxied JSON request (issue 17, `benches/load/callgrind.sh`).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt};

/// Error type carried by bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body type of every request and response inside Switchyard: one buffer
/// ([`full`], [`empty`]) or any other body, boxed ([`Body::boxed`]).
#[derive(Debug)]
pub struct Body(Inner);

#[derive(Debug)]
enum Inner {
    /// One buffer, not yet yielded (`None`: yielded, or empty from the start).
    Full(Option<Bytes>),
    /// Any other body.
    Boxed(UnsyncBoxBody<Bytes, BoxError>),
}

impl Body {
    /// `body` boxed: a stream, a body read from the network, a transcoder's.
    pub fn boxed<B>(body: B) -> Body
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        Body(Inner::Boxed(body.map_err(Into::into).boxed_unsync()))
    }
}

impl Default for Body {
    /// An empty body.
    fn default() -> Body {
        empty()
    }
}

impl From<UnsyncBoxBody<Bytes, BoxError>> for Body {
    fn from(b: UnsyncBoxBody<Bytes, BoxError>) -> Body {
        Body(Inner::Boxed(b))
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match &mut self.get_mut().0 {
            Inner::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Inner::Boxed(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Inner::Full(b) => b.is_none(),
            Inner::Boxed(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Inner::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Inner::Boxed(b) => b.size_hint(),
        }
    }
}

/// A body holding `bytes` in one frame (none when `bytes` is empty).
pub fn full(bytes: impl Into<Bytes>) -> Body {
    let bytes = bytes.into();
    Body(Inner::Full((!bytes.is_empty()).then_some(bytes)))
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
    Body::boxed(Parts {
        parts: parts.into(),
        len,
    })
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
    Body(Inner::Full(None))
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
