//! Reading provider bodies under the idle and total timeouts: whole (JSON answers and
//! error bodies) or as a live SSE relay to the client.
//!
//! The relay is a hand-written `http_body::Body`: each upstream frame is parsed,
//! transcoded and handed to hyper in the same poll, with no task, channel or buffering
//! in between, so a token reaches the client as soon as it arrives. If the client goes
//! away, hyper drops the relay and with it the upstream connection, which stops the
//! provider's generation.
//!
//! The client's stream always ends cleanly: with `data: [DONE]` when the provider
//! finished, or with one OpenAI-shaped error event (`data: {"error":{...}}`) when the
//! provider failed, stalled past `idle_ms`, overran `total_ms` or closed early.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::body::{Body, BoxError};
use crate::error::{ErrorKind, GatewayError};
use crate::providers::{StreamStep, StreamTranscoder};
use crate::sse::{write_event, SseParser};

/// Ends every stream relayed with it: the shutdown token. When the shutdown drain
/// runs out of time, the owner calls [`StreamStop::stop`] and each live relay ends
/// with one `gateway_shutdown` error event instead of a cut connection. Cloning shares
/// the token.
#[derive(Debug, Clone)]
pub struct StreamStop(std::sync::Arc<tokio::sync::watch::Sender<bool>>);

impl Default for StreamStop {
    fn default() -> Self {
        StreamStop(std::sync::Arc::new(tokio::sync::watch::channel(false).0))
    }
}

impl StreamStop {
    /// A token no stream has been stopped by yet.
    pub fn new() -> StreamStop {
        StreamStop::default()
    }

    /// Ends every stream relayed with this token, now and from now on.
    pub fn stop(&self) {
        self.0.send_replace(true);
    }

    /// Resolves once [`StreamStop::stop`] has been called.
    fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.0.subscribe();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }
}

/// Largest non-streaming provider body read, in bytes (64 MiB).
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// Reads a whole body, failing with 504 if the provider is silent for `idle` or the
/// exchange passes `deadline`, and 502 if the body breaks or exceeds
/// [`MAX_RESPONSE_BYTES`].
///
/// # Errors
/// As above; `provider` names the provider in messages.
pub async fn collect(
    mut body: Body,
    idle: Duration,
    deadline: Instant,
    provider: &str,
) -> Result<Bytes, GatewayError> {
    let mut buf = BytesMut::new();
    loop {
        let next = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx));
        let limit = (Instant::now() + idle).min(deadline);
        let frame = match tokio::time::timeout_at(limit, next).await {
            Err(_) => return Err(timeout_error(provider, Instant::now() >= deadline, idle)),
            Ok(None) => return Ok(buf.freeze()),
            Ok(Some(Err(e))) => return Err(broken(provider, &*e)),
            Ok(Some(Ok(f))) => f,
        };
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > MAX_RESPONSE_BYTES {
                return Err(GatewayError::new(
                    ErrorKind::BadUpstream,
                    format!("provider `{provider}` sent a response larger than {MAX_RESPONSE_BYTES} bytes"),
                )
                .with_code(crate::error::Code::UpstreamBadResponse));
            }
            buf.extend_from_slice(&data);
        }
    }
}

fn timeout_error(provider: &str, total: bool, idle: Duration) -> GatewayError {
    let msg = if total {
        format!("provider `{provider}` did not finish within its total timeout")
    } else {
        format!(
            "provider `{provider}` sent nothing for {} ms",
            idle.as_millis()
        )
    };
    GatewayError::new(ErrorKind::UpstreamTimeout, msg)
        .with_code(crate::error::Code::UpstreamTimeout)
}

fn broken(provider: &str, e: &(dyn std::error::Error + 'static)) -> GatewayError {
    let mut cause = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        cause = format!("{cause}: {s}");
        src = s.source();
    }
    GatewayError::new(
        ErrorKind::BadUpstream,
        format!("connection to provider `{provider}` broke: {cause}"),
    )
    .with_code(crate::error::Code::UpstreamStreamCut)
}

/// How a relayed stream ended.
#[derive(Debug)]
pub enum StreamEnd {
    /// The provider finished and `[DONE]` was sent.
    Completed,
    /// The provider failed; an error event was sent.
    Failed(GatewayError),
    /// The client went away before the end.
    ClientGone,
}

/// Hooks for metrics and endpoint statistics, called from inside the relay.
pub trait StreamObserver: Send {
    /// The first content token was relayed.
    fn first_token(&mut self);
    /// The stream ended (called exactly once).
    fn finished(&mut self, end: StreamEnd);
}

/// The SSE relay body: upstream events in, OpenAI events out.
pub struct SseRelay {
    upstream: Body,
    parser: SseParser,
    transcoder: Box<dyn StreamTranscoder>,
    out: BytesMut,
    idle: Duration,
    idle_timer: Pin<Box<Sleep>>,
    deadline: Pin<Box<Sleep>>,
    provider: String,
    observer: Option<Box<dyn StreamObserver>>,
    done: bool,
    saw_token: bool,
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl SseRelay {
    /// Relays `upstream` through `transcoder`, with the provider's `idle` timeout and
    /// the exchange's `deadline`, until the end or until `stop` is triggered.
    pub fn new(
        upstream: Body,
        transcoder: Box<dyn StreamTranscoder>,
        idle: Duration,
        deadline: Instant,
        provider: &str,
        observer: Box<dyn StreamObserver>,
        stop: &StreamStop,
    ) -> SseRelay {
        SseRelay {
            upstream,
            parser: SseParser::new(),
            transcoder,
            out: BytesMut::with_capacity(1024),
            idle,
            idle_timer: Box::pin(tokio::time::sleep(idle)),
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            provider: provider.to_string(),
            observer: Some(observer),
            done: false,
            saw_token: false,
            stop: Box::pin(stop.stopped()),
        }
    }

    fn fail(&mut self, e: GatewayError) {
        tracing::warn!(provider = %self.provider, error = %e, "stream failed after the first byte");
        write_event(&mut self.out, &e.to_json());
        self.end(StreamEnd::Failed(e));
    }

    fn end(&mut self, end: StreamEnd) {
        self.done = true;
        if let Some(mut o) = self.observer.take() {
            o.finished(end);
        }
    }

    fn on_data(&mut self, data: &[u8]) {
        let deadline = Instant::now() + self.idle;
        self.idle_timer.as_mut().reset(deadline);
        if let Err(e) = self.parser.push(data) {
            self.fail(
                GatewayError::new(ErrorKind::BadUpstream, e.to_string())
                    .with_code(crate::error::Code::UpstreamBadResponse),
            );
            return;
        }
        while let Some(ev) = self.parser.next_event() {
            let step = self.transcoder.event(&ev, &mut self.out);
            if !self.saw_token && self.transcoder.produced_content() {
                self.saw_token = true;
                if let Some(o) = self.observer.as_mut() {
                    o.first_token();
                }
            }
            match step {
                Ok(StreamStep::Continue) => {}
                Ok(StreamStep::Done) => {
                    self.end(StreamEnd::Completed);
                    return;
                }
                Err(e) => {
                    self.fail(e);
                    return;
                }
            }
        }
    }
}

impl HttpBody for SseRelay {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            if !this.out.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(this.out.split().freeze()))));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.upstream).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        this.on_data(&data);
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    let e = broken(&this.provider, &*e);
                    this.fail(e);
                }
                Poll::Ready(None) => match this.transcoder.end(&mut this.out) {
                    Ok(()) => this.end(StreamEnd::Completed),
                    Err(e) => this.fail(e),
                },
                Poll::Pending => {
                    if this.stop.as_mut().poll(cx).is_ready() {
                        this.fail(
                            GatewayError::new(
                                ErrorKind::ShuttingDown,
                                "the gateway is shutting down; retry the request",
                            )
                            .with_code(crate::error::Code::GatewayShutdown),
                        );
                    } else if this.deadline.as_mut().poll(cx).is_ready() {
                        this.fail(timeout_error(&this.provider, true, this.idle));
                    } else if this.idle_timer.as_mut().poll(cx).is_ready() {
                        this.fail(timeout_error(&this.provider, false, this.idle));
                    } else {
                        return Poll::Pending;
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.out.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

impl Drop for SseRelay {
    fn drop(&mut self) {
        if let Some(mut o) = self.observer.take() {
            o.finished(StreamEnd::ClientGone);
        }
    }
}
