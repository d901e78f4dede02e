//! Reading provider bodies under the idle and total timeouts: whole (JSON answers and
//! error bodies) or as a live SSE relay to the client.
//!
//! The relay is polled from the client's response body: each upstream frame is
//! parsed, transcoded and handed to hyper in the same poll, with no task, channel or
//! buffering in between, so a token reaches the client as soon as it arrives. If the
//! client goes away, hyper drops the body and with it the relay and the upstream
//! connection, which stops the provider's generation.
//!
//! The relay reports how the provider's stream ended ([`Step`]): finished, or failed
//! (an error event, a stall past `idle_ms`, `total_ms` overrun, an early close). It
//! writes no error event itself: its owner either continues the answer on another
//! endpoint or ends the client's stream with one error event.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::FutureExt as _;
use http_body::Body as HttpBody;
use tokio::time::{Instant, Sleep};

use crate::body::Body;
use crate::error::{ErrorKind, GatewayError};
use crate::providers::{Sent, StreamStep, StreamTranscoder};
use crate::sse::SseParser;

/// Ends every stream relayed with it, and every request still waiting for its
/// answer: the shutdown token. When the shutdown drain runs out of time, the owner
/// calls [`StreamStop::stop`]; each live relay then ends with one `gateway_shutdown`
/// error event instead of a cut connection, and a request whose answer has not begun
/// gets a 503 `gateway_shutdown` error once its task is next polled (`Gateway::chat`
/// checks [`StreamStop::is_stopped`]; the server wakes those tasks). Cloning shares
/// the token.
#[derive(Debug, Clone)]
pub struct StreamStop(std::sync::Arc<Stop>);

#[derive(Debug)]
struct Stop {
    /// Wakes the relays waiting in [`StreamStop::stopped`].
    tx: tokio::sync::watch::Sender<bool>,
    /// The same fact for a check on every poll of a request (one load, no lock).
    stopped: std::sync::atomic::AtomicBool,
}

impl Default for StreamStop {
    fn default() -> Self {
        StreamStop(std::sync::Arc::new(Stop {
            tx: tokio::sync::watch::channel(false).0,
            stopped: std::sync::atomic::AtomicBool::new(false),
        }))
    }
}

impl StreamStop {
    /// A token no stream has been stopped by yet.
    pub fn new() -> StreamStop {
        StreamStop::default()
    }

    /// Ends every stream relayed with this token, now and from now on.
    pub fn stop(&self) {
        self.0
            .stopped
            .store(true, std::sync::atomic::Ordering::Release);
        self.0.tx.send_replace(true);
    }

    /// Whether [`StreamStop::stop`] has been called.
    pub fn is_stopped(&self) -> bool {
        self.0.stopped.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Resolves once [`StreamStop::stop`] has been called.
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.0.tx.subscribe();
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
        // A frame already read (most answers arrive with their head) is taken
        // without a timer: arming one reads the clock and enters the timer wheel,
        // and cancelling it takes it out again.
        let mut next = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx));
        let polled = match (&mut next).now_or_never() {
            Some(frame) => frame,
            None => {
                let limit = (Instant::now() + idle).min(deadline);
                match tokio::time::timeout_at(limit, next).await {
                    Err(_) => {
                        return Err(timeout_error(provider, Instant::now() >= deadline, idle))
                    }
                    Ok(frame) => frame,
                }
            }
        };
        let frame = match polled {
            None => return Ok(buf.freeze()),
            Some(Err(e)) => return Err(broken(provider, &*e, &progress(0, buf.len()))),
            Some(Ok(f)) => f,
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

/// The error of a provider body that broke `after` ("after 3 events", "after 120
/// bytes"): what happened in the field's words (the provider closed the stream, or
/// reset the connection), not hyper's (`error reading a body from connection:
/// unexpected EOF during chunk size line`), which goes to the debug log.
fn broken(provider: &str, e: &(dyn std::error::Error + 'static), after: &str) -> GatewayError {
    use std::io::ErrorKind as Io;
    let mut io_kind = None;
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut cause = String::new();
    while let Some(s) = src {
        if io_kind.is_none() {
            io_kind = s.downcast_ref::<std::io::Error>().map(std::io::Error::kind);
        }
        if !cause.is_empty() {
            cause.push_str(": ");
        }
        cause.push_str(&s.to_string());
        src = s.source();
    }
    tracing::debug!(provider, cause, "upstream body broke");
    let what = match io_kind {
        Some(Io::ConnectionReset | Io::ConnectionAborted | Io::BrokenPipe) => {
            format!("provider `{provider}` reset the connection {after}, before the answer was complete")
        }
        Some(Io::TimedOut) => {
            format!("the connection to provider `{provider}` timed out {after}, before the answer was complete")
        }
        // The body's HTTP framing was broken (a chunk size that is not one, trailers
        // past their bound): the cause says how.
        Some(Io::InvalidData) => format!(
            "provider `{provider}` sent a body that breaks HTTP/1.1 framing {after} ({cause})"
        ),
        // An early EOF (the usual case: the provider closed the connection inside
        // a chunked body) and anything else that ends the body unfinished.
        _ => format!(
            "provider `{provider}` closed the stream {after}, before the answer was complete"
        ),
    };
    GatewayError::new(ErrorKind::BadUpstream, what).with_code(crate::error::Code::UpstreamStreamCut)
}

/// "after N events" (or "after N bytes" for a non-SSE body), for [`broken`].
fn progress(events: u64, bytes: usize) -> String {
    match (events, bytes) {
        (0, 0) => "before sending anything".to_string(),
        (0, b) => format!("after {b} byte{}", if b == 1 { "" } else { "s" }),
        (1, _) => "after 1 event".to_string(),
        (n, _) => format!("after {n} events"),
    }
}

/// Most bytes of role chunks, pings and other content-free events held before a
/// stream's commit point (64 KiB); past it the stream is committed anyway.
pub const MAX_HELD_BYTES: usize = 64 * 1024;

/// One step of a relayed stream after its commit point.
#[derive(Debug)]
pub enum Step {
    /// Transcoded SSE bytes for the client (whole events).
    Data(Bytes),
    /// The provider finished; its last bytes (ending in `data: [DONE]`) have been
    /// yielded.
    Done,
    /// The provider failed, stalled past `idle_ms`, overran `total_ms` or closed
    /// early, or the gateway is shutting down; the bytes before the failure have been
    /// yielded. Nothing has been written for the failure itself: the owner decides
    /// between continuing elsewhere and ending with an error event.
    Failed(GatewayError),
}

/// The SSE relay: upstream events in, OpenAI events out, under the provider's idle
/// timeout, the exchange's deadline and the shutdown token.
///
/// It is the inner step of a streamed exchange: [`SseRelay::poll_commit`] reads
/// until the first content (holding what came before), then [`SseRelay::poll_step`]
/// yields the transcoded bytes as they arrive. The owner (the gateway's stream body)
/// writes the client's final error event, so a failure can be continued elsewhere.
pub struct SseRelay {
    upstream: Body,
    parser: SseParser,
    transcoder: Box<dyn StreamTranscoder>,
    out: BytesMut,
    idle: Duration,
    idle_timer: Pin<Box<Sleep>>,
    deadline: Pin<Box<Sleep>>,
    provider: String,
    finished: bool,
    failure: Option<GatewayError>,
    over: bool,
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// SSE events parsed so far (0 for a transcoder that reads the raw body).
    events: u64,
    /// Body bytes received so far.
    bytes: usize,
}

impl SseRelay {
    /// Relays `upstream` through `transcoder`, with the provider's `idle` timeout and
    /// the exchange's `deadline`, until the end or until `stop` is triggered;
    /// `provider` names the provider in errors.
    pub fn new(
        upstream: Body,
        transcoder: Box<dyn StreamTranscoder>,
        idle: Duration,
        deadline: Instant,
        provider: &str,
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
            finished: false,
            failure: None,
            over: false,
            stop: Box::pin(stop.stopped()),
            events: 0,
            bytes: 0,
        }
    }

    /// What the stream has sent (or holds for sending) so far.
    pub fn sent(&self) -> &Sent {
        self.transcoder.sent()
    }

    /// Whether content (text or a tool call) has arrived.
    pub fn produced_content(&self) -> bool {
        self.transcoder.produced_content()
    }

    /// Reads until the commit point: the first content, the end of the answer, or
    /// [`MAX_HELD_BYTES`] held; everything before it stays held (a role chunk is not
    /// worth committing to a provider for). `first_content` bounds the wait.
    ///
    /// # Errors
    /// Any failure before the commit point (an error event, a cut, a stall, the
    /// deadline, `first_content`): the attempt failed, and the client has seen
    /// nothing of it.
    pub fn poll_commit(
        &mut self,
        cx: &mut Context<'_>,
        first_content: Pin<&mut Sleep>,
    ) -> Poll<Result<(), GatewayError>> {
        let mut first_content = first_content;
        loop {
            if let Some(e) = self.failure.take() {
                self.over = true;
                return Poll::Ready(Err(e));
            }
            if self.finished || self.produced_content() || self.out.len() > MAX_HELD_BYTES {
                return Poll::Ready(Ok(()));
            }
            if first_content.as_mut().poll(cx).is_ready() {
                self.over = true;
                return Poll::Ready(Err(GatewayError::new(
                    ErrorKind::UpstreamTimeout,
                    format!(
                        "provider `{}` started a stream but sent no content within its first_content_ms",
                        self.provider
                    ),
                )
                .with_code(crate::error::Code::UpstreamTimeout)));
            }
            if self.poll_upstream(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }

    /// The next step after the commit point (see [`Step`]); `Ready(None)` once the
    /// stream is over.
    pub fn poll_step(&mut self, cx: &mut Context<'_>) -> Poll<Option<Step>> {
        loop {
            if !self.out.is_empty() {
                return Poll::Ready(Some(Step::Data(self.out.split().freeze())));
            }
            if self.over {
                return Poll::Ready(None);
            }
            if self.finished {
                self.over = true;
                return Poll::Ready(Some(Step::Done));
            }
            if let Some(e) = self.failure.take() {
                self.over = true;
                return Poll::Ready(Some(Step::Failed(e)));
            }
            if self.poll_upstream(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }

    /// The provider finished. A restart that has not repeated all the text already
    /// sent did not give the same answer: what it wrote instead (its finish chunk
    /// and `[DONE]`) is dropped, and the stream fails as diverged.
    fn finish(&mut self) {
        if self.transcoder.sent().unmatched > 0 {
            self.out.clear();
            self.fail(
                GatewayError::new(
                    ErrorKind::BadUpstream,
                    "the stream broke, and the endpoint that was to continue it finished its answer before repeating the text already sent",
                )
                .with_code(crate::error::Code::UpstreamStreamDiverged)
                .with_retry(crate::error::Retry::OtherEndpoint),
            );
            return;
        }
        self.finished = true;
    }

    /// After a failure that came once the finish reason had been sent: what the
    /// provider left unsaid (the usage chunk owed to the client, `[DONE]`), as the
    /// transcoder writes it for a clean end.
    pub fn close_after_finish(&mut self) -> Bytes {
        let mut out = BytesMut::new();
        if self.transcoder.end(&mut out).is_err() {
            crate::sse::write_done(&mut out);
        }
        out.freeze()
    }

    fn fail(&mut self, e: GatewayError) {
        if self.failure.is_none() && !self.finished {
            self.failure = Some(e);
        }
    }

    /// Reads one upstream frame (or notices a timer or the stop): `Ready` when the
    /// state moved, `Pending` when nothing happened.
    fn poll_upstream(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.finished || self.failure.is_some() || self.over {
            return Poll::Ready(());
        }
        match Pin::new(&mut self.upstream).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    self.on_data(&data);
                }
            }
            Poll::Ready(Some(Err(e))) => {
                let e = broken(&self.provider, &*e, &progress(self.events, self.bytes));
                self.fail(e);
            }
            Poll::Ready(None) => {
                // An SSE body may end without the blank line of its last event.
                if let Some(ev) = self.parser.finish() {
                    let step = checked(&mut self.out, &mut *self.transcoder, |t, out| {
                        t.event(ev.view(), out)
                    });
                    match step {
                        Ok(StreamStep::Continue) => {}
                        Ok(StreamStep::Done) => {
                            self.finish();
                            return Poll::Ready(());
                        }
                        // Not a whole event: the body was cut inside it.
                        Err(e) if e.code == Some(crate::error::Code::UpstreamBadResponse) => {
                            self.fail(
                                GatewayError::new(
                                    ErrorKind::BadUpstream,
                                    format!(
                                        "provider `{}` closed the stream in the middle of an event ({})",
                                        self.provider, e.message
                                    ),
                                )
                                .with_code(crate::error::Code::UpstreamStreamCut),
                            );
                            return Poll::Ready(());
                        }
                        Err(e) => {
                            self.fail(e);
                            return Poll::Ready(());
                        }
                    }
                }
                match self.transcoder.end(&mut self.out) {
                    Ok(()) => self.finish(),
                    Err(mut e) => {
                        if e.code == Some(crate::error::Code::UpstreamStreamCut) {
                            // A clean end of the body before the answer's: named as
                            // the relay names a broken body, provider and progress.
                            e.message = format!(
                                "provider `{}` closed the stream {}, before the answer was complete",
                                self.provider,
                                progress(self.events, self.bytes)
                            );
                        }
                        self.fail(e);
                    }
                }
            }
            Poll::Pending => {
                if self.stop.as_mut().poll(cx).is_ready() {
                    self.fail(
                        GatewayError::new(
                            ErrorKind::ShuttingDown,
                            "the gateway is shutting down; retry the request",
                        )
                        .with_code(crate::error::Code::GatewayShutdown),
                    );
                } else if self.deadline.as_mut().poll(cx).is_ready() {
                    self.fail(timeout_error(&self.provider, true, self.idle));
                } else if self.idle_timer.as_mut().poll(cx).is_ready() {
                    self.fail(timeout_error(&self.provider, false, self.idle));
                } else {
                    return Poll::Pending;
                }
            }
        }
        Poll::Ready(())
    }

    fn on_data(&mut self, data: &[u8]) {
        let deadline = Instant::now() + self.idle;
        self.idle_timer.as_mut().reset(deadline);
        self.bytes += data.len();
        let before = before_event(&self.out, &*self.transcoder);
        if let Some(step) = self.transcoder.raw(data, &mut self.out) {
            match step
                .and_then(|s| restarting(&mut self.out, &*self.transcoder, before).map(|()| s))
            {
                Ok(StreamStep::Continue) => {}
                Ok(StreamStep::Done) => self.finish(),
                Err(e) => self.fail(e),
            }
            return;
        }
        if let Err(e) = self.parser.push(data) {
            self.fail(
                GatewayError::new(ErrorKind::BadUpstream, e.to_string())
                    .with_code(crate::error::Code::UpstreamBadResponse),
            );
            return;
        }
        // The events of one frame go out as one write: room for all of them at once.
        // A relayed event is about as long as the upstream's, plus what the
        // transcoder adds to each: a longer model name, and `"usage":null` (14
        // bytes) on every chunk for a client that asked for usage. With only 256
        // bytes of slack, a frame of 24 chunks of about 150 bytes outgrew the
        // buffer once, and its reallocation and copy were about 800 instructions
        // per stream (`benches/load/callgrind.sh`); a quarter more covers that.
        self.out.reserve(data.len() + data.len() / 4 + 256);
        // Each event a view into the parser's buffer (or a buffer it reuses): no
        // allocation or copy per event.
        while let Some(ev) = self.parser.next_ref() {
            self.events += 1;
            match checked(&mut self.out, &mut *self.transcoder, |t, out| {
                t.event(ev, out)
            }) {
                Ok(StreamStep::Continue) => {}
                Ok(StreamStep::Done) => {
                    self.finish();
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

/// One event through `transcoder` (`step` writes it to `out`), with the restart
/// rule of [`restarting`] applied to what it wrote.
fn checked(
    out: &mut BytesMut,
    transcoder: &mut dyn StreamTranscoder,
    step: impl FnOnce(&mut dyn StreamTranscoder, &mut BytesMut) -> Result<StreamStep, GatewayError>,
) -> Result<StreamStep, GatewayError> {
    let before = before_event(out, transcoder);
    let s = step(transcoder, out)?;
    restarting(out, transcoder, before).map(|()| s)
}

/// What [`restarting`] compares an event's outcome with: the bytes written so far
/// to `out`, and whether `transcoder` had sent a tool call.
fn before_event(out: &BytesMut, transcoder: &dyn StreamTranscoder) -> (usize, bool) {
    (out.len(), transcoder.sent().tool_calls)
}

/// After an event that `transcoder` wrote to `out`, in a restart that has not yet
/// repeated all the text already sent ([`crate::providers::Sent::unmatched`]):
/// nothing the event wrote reaches the client (only what follows that text is
/// passed on; a restarted reasoning model's reasoning, for one, comes before it),
/// and a tool call there means the restart is giving another answer.
///
/// # Errors
/// [`crate::error::Code::UpstreamStreamDiverged`] when the event started a tool
/// call.
fn restarting(
    out: &mut BytesMut,
    transcoder: &dyn StreamTranscoder,
    (mark, tools): (usize, bool),
) -> Result<(), GatewayError> {
    let sent = transcoder.sent();
    if sent.unmatched == 0 {
        return Ok(());
    }
    out.truncate(mark);
    if sent.tool_calls && !tools {
        return Err(GatewayError::new(
                ErrorKind::BadUpstream,
                "the stream broke, and the endpoint that was to continue it began a tool call instead of repeating the text already sent",
            )
            .with_code(crate::error::Code::UpstreamStreamDiverged)
            .with_retry(crate::error::Retry::OtherEndpoint));
    }
    Ok(())
}
