//! The client's side of a streamed answer: the relay of the committed attempt and,
//! when that stream fails mid-answer, its continuation on the next endpoint of the
//! plan (seed 000, failover strategy (b) with prefill).
//!
//! The body keeps the dispatch phase's [`Cursor`], so a continuation is one more
//! attempt of the same request: the same plan, attempt cap, retry budget and circuit
//! breakers. A continuation goes to the next endpoint, with the text already sent
//! as an assistant prefill where the provider takes one, else as a restart whose
//! answer must repeat that text exactly (it is dropped, and only what follows is
//! passed on). Its chunks keep the first stream's `id` and `created` and carry no
//! second `role`, so the client reads one continuous answer.
//!
//! A stream is not continued when a tool call has started (a continuation could
//! break its JSON arguments), when its text outgrew
//! [`crate::providers::MAX_TRACKED_BYTES`], when the gateway is shutting down, when `n` > 1, or
//! when `server.stream_failover` is off. Then, or when the continuation fails too,
//! the client's stream ends with one OpenAI-shaped error event. A stream whose
//! finish reason had already been sent ends as a clean close would (the usage chunk
//! if one is owed, then `[DONE]`): the answer, text or tool calls, is whole.
//!
//! The continuation's usage chunk (when asked for) counts the continuation only.
//!
//! When the request may store its answer in the cache, the body keeps every frame
//! it sends (a reference, not a copy; [`Tee`]) and hands them to the cache when
//! the stream ends cleanly on its first endpoint with the provider's finish reason
//! sent. A stream that failed, was cut, was continued elsewhere, or whose `stop`
//! the gateway wrote because the provider sent no finish reason is not stored.
//!
//! The body writes the request's access line when it ends (or is dropped: the
//! client went away), from its copy of the request's facts, the attempts its cursor
//! made (the committed one timed to its last byte) and the usage it settles with;
//! it polls inside the request's span, so its log lines name the request.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};

use super::access::{End, Facts};
use super::cache::Tee;
use super::dispatch::{Cursor, Exchanged, Leg};
use super::log::StreamStatus;
use super::Gateway;
use crate::api::Usage;
use crate::body::BoxError;
use crate::egress::relay::Step;
use crate::error::{ErrorKind, GatewayError};
use crate::limits::Permit;
use crate::sse::write_event;

type Continuing = Pin<Box<dyn Future<Output = (Cursor, Result<Exchanged, GatewayError>)> + Send>>;
type Stopped = Pin<Box<dyn Future<Output = ()> + Send>>;

enum State {
    /// Relaying a committed stream.
    Relaying(Box<Leg>, Box<Cursor>),
    /// Starting the continuation of a stream that failed; the shutdown token ends
    /// the wait.
    Continuing(Continuing, Stopped),
    /// The stream is over.
    Ended,
}

/// The response body of a streamed chat completion.
pub struct ClientStream {
    gw: Arc<Gateway>,
    started: Instant,
    state: State,
    /// The endpoint whose stream the client is reading (for the request's metrics).
    ep: usize,
    /// Bytes to send before anything else (the final error event or `[DONE]`).
    pending: Option<Bytes>,
    logged: bool,
    /// The request's rate-limit permit, settled when the stream ends, with the
    /// estimated prompt tokens.
    permit: Option<(Arc<Permit>, u64)>,
    /// Content pieces sent so far (about one token each): the settled output.
    pieces: u64,
    /// The usage the provider reported for a stream that completed without a
    /// continuation: settled instead of the estimate.
    reported: Option<Usage>,
    /// The stream was continued on another endpoint: no single provider count
    /// covers it, so the estimate is settled.
    continued: bool,
    /// The frames sent so far, for the cache (`None`: not stored).
    tee: Option<Box<Tee>>,
    /// The request's access-line facts (`None`: not logged here).
    access: Option<Box<Facts>>,
    /// The estimated prompt tokens, for the usage of a stream without a provider
    /// count.
    prompt_tokens: u64,
    /// The request's span, entered while polling.
    span: tracing::Span,
    /// Time from the request's arrival to the stream's first content.
    ttft: Option<std::time::Duration>,
}

impl ClientStream {
    /// The body for `leg`, a stream past its commit point, with the `cursor` that
    /// produced it.
    pub(super) fn new(
        gw: Arc<Gateway>,
        started: Instant,
        leg: Box<Leg>,
        cursor: Box<Cursor>,
    ) -> Self {
        let ttft = leg.ttft.map(|_| started.elapsed());
        if ttft.is_some() {
            gw.log.first_token(leg.ep, started);
        }
        ClientStream {
            gw,
            started,
            ep: leg.ep,
            state: State::Relaying(leg, cursor),
            pending: None,
            logged: false,
            permit: None,
            pieces: 0,
            reported: None,
            continued: false,
            tee: None,
            access: None,
            prompt_tokens: 0,
            span: tracing::Span::current(),
            ttft,
        }
    }

    /// Writes the request's access line from `facts` when the stream ends;
    /// `prompt_tokens` (estimated) is its input when the provider reports no usage.
    pub(super) fn logging(mut self, facts: Box<Facts>, prompt_tokens: u64) -> Self {
        self.access = Some(facts);
        self.prompt_tokens = prompt_tokens;
        self
    }

    /// Keeps the frames sent with `tee`, to store the stream when it ends cleanly.
    pub(super) fn caching(mut self, tee: Tee) -> Self {
        self.tee = Some(Box::new(tee));
        self
    }

    /// Settles `permit` when the stream ends: the provider's reported usage when it
    /// sent one (OpenAI-format upstreams are always asked for it), else
    /// `prompt_tokens` (estimated) in and the content pieces sent (about a token
    /// each) out.
    pub(super) fn settling(mut self, permit: Arc<Permit>, prompt_tokens: u64) -> Self {
        self.permit = Some((permit, prompt_tokens));
        self.prompt_tokens = prompt_tokens;
        self
    }

    /// The stream's usage: the provider's report for a stream that completed
    /// without a continuation, else the estimated prompt tokens in and the content
    /// pieces sent (about a token each) out.
    fn usage(&self) -> Usage {
        match self.reported.filter(|_| !self.continued) {
            Some(u) => u,
            None => Usage::new(self.prompt_tokens, self.pieces),
        }
    }

    fn settle(&mut self) {
        if let Some((permit, _)) = self.permit.take() {
            permit.settle(Some(self.ep), &self.usage());
        }
    }

    /// Copies the attempts of `cursor` into the access facts; `leg`: the committed
    /// attempt's send time, which times it to now.
    fn note(&mut self, cursor: &Cursor, leg: Option<Instant>) {
        let Some(f) = &mut self.access else { return };
        f.tried.clone_from(&cursor.tried);
        if let (Some(began), Some(t)) = (leg, f.tried.last_mut()) {
            *t = super::access::Try::new(t.ep as usize, t.status, began.elapsed());
        }
    }

    /// Keeps the text a stream's legs sent for the access line's
    /// `response_text`, when bodies are logged.
    fn keep_text(&mut self, sent: &crate::providers::Sent) {
        if let Some(b) = self.access.as_mut().and_then(|f| f.bodies.as_mut()) {
            b.text = (!sent.untracked).then(|| sent.text.clone());
        }
    }

    /// Records on the request's server span what the client received of a
    /// stream that ended with its answer whole: the answer id, the client's
    /// model, the finish reason (the usage is added with the access line).
    fn answered(&self, sent: &crate::providers::Sent) {
        let Some(f) = self.access.as_ref().filter(|f| f.trace.is_on()) else {
            return;
        };
        let mut answer = stream_answer(sent);
        answer.model = Some(f.model.clone()).filter(|m| !m.is_empty());
        answer.usage = None;
        f.trace.answered(&answer);
    }

    fn end(&mut self, status: StreamStatus) {
        self.state = State::Ended;
        self.settle();
        self.logged(status);
    }

    /// Counts the stream's end and writes its access line, once.
    fn logged(&mut self, status: StreamStatus) {
        if self.logged {
            return;
        }
        self.logged = true;
        self.gw.log.stream_ended(self.ep, self.started, status);
        if let Some(mut f) = self.access.take() {
            // The last bytes (`[DONE]`, or the error event) go out after the line.
            if let (Some(b), Some(p)) = (f.bodies.as_mut(), &self.pending) {
                b.sent(p, self.gw.config.telemetry.access_log.max_body_bytes);
            }
            f.endpoint = Some(self.ep);
            f.ttft = self.ttft;
            f.usage = Some(self.usage());
            let end = match status {
                StreamStatus::Completed => End::Ok,
                StreamStatus::Failed => End::StreamError,
                StreamStatus::ClientGone => End::ClientGone,
            };
            f.emit(&self.gw, end);
        }
    }

    fn end_with_error(&mut self, e: &GatewayError) {
        tracing::warn!(error = %e, "stream ended with an error event");
        let mut out = BytesMut::with_capacity(256);
        write_event(&mut out, &e.to_json());
        self.pending = Some(out.freeze());
        self.end(StreamStatus::Failed);
    }

    /// The committed stream of `leg` failed with `e`: continue it elsewhere or end.
    fn leg_failed(&mut self, leg: Box<Leg>, mut cursor: Box<Cursor>, e: GatewayError) {
        let Leg {
            relay,
            attempt,
            ep,
            began,
            ttft,
            mut span,
            ..
        } = *leg;
        let mut relay = relay;
        // A failed stream is never stored, even one whose answer was whole.
        self.tee = None;
        let sent = relay.sent().clone();
        self.keep_text(&sent);
        self.pieces = sent.pieces;
        self.continued = true;
        // A restart's finish chunk that came before it had repeated the text already
        // sent (`unmatched`) was dropped, not sent: that answer is not whole.
        if sent.finished && sent.unmatched == 0 {
            // Only the end of the stream was lost; the answer itself (text or tool
            // calls) is whole: end it as a clean close would.
            self.note(&cursor, Some(began));
            self.pending = Some(relay.close_after_finish());
            drop(relay);
            attempt.succeeded(ttft);
            streamed(&mut span, &sent);
            span.end();
            self.answered(&sent);
            self.end(StreamStatus::Completed);
            return;
        }
        drop(relay);
        let e = attempt.failed(e);
        // An account out of quota (an error event after the stream began) takes
        // the endpoint out of rotation as before the first content.
        super::dispatch::pause_after(&self.gw, ep, &e);
        span.failed(&e);
        span.end();
        let continuable = e.kind != ErrorKind::ShuttingDown
            && !sent.tool_calls
            && !sent.reasoning
            && !sent.untracked
            && cursor.can_continue();
        if !continuable {
            if e.kind != ErrorKind::ShuttingDown {
                self.gw.log.upstream_error(ep, &e);
            }
            self.note(&cursor, Some(began));
            if let Some(t) = self.access.as_mut().and_then(|f| f.tried.last_mut()) {
                t.status = e.upstream_status.unwrap_or(e.status());
            }
            self.end_with_error(&e);
            return;
        }
        tracing::info!(error = %e, pieces = sent.pieces, "stream failed mid-answer; continuing on the next endpoint");
        cursor.failed_mid_stream(ep, e, began.elapsed());
        self.note(&cursor, None);
        let continuing = Box::pin(async move {
            let mut cursor = *cursor;
            let result = cursor.run(Some(&sent)).await;
            (cursor, result)
        });
        let stopped = Box::pin(self.gw.stream_stop.stopped());
        self.state = State::Continuing(continuing, stopped);
    }
}

impl ClientStream {
    /// [`HttpBody::poll_frame`], inside the request's span.
    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self;
        loop {
            if let Some(b) = this.pending.take() {
                return Poll::Ready(Some(Ok(Frame::data(b))));
            }
            match &mut this.state {
                State::Ended => return Poll::Ready(None),
                State::Relaying(leg, _) => match leg.relay.poll_step(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(Step::Data(b))) => {
                        if let Some(tee) = &mut this.tee {
                            if !tee.push(&b) {
                                this.tee = None;
                            }
                        }
                        return Poll::Ready(Some(Ok(Frame::data(b))));
                    }
                    Poll::Ready(Some(Step::Done)) | Poll::Ready(None) => {
                        if let State::Relaying(mut leg, cursor) =
                            std::mem::replace(&mut this.state, State::Ended)
                        {
                            this.note(&cursor, Some(leg.began));
                            let sent = leg.relay.sent();
                            streamed(&mut leg.span, sent);
                            this.answered(sent);
                            this.keep_text(sent);
                            this.pieces = sent.pieces;
                            this.reported = sent.usage;
                            if let Some(tee) = this.tee.take() {
                                // A `stop` the gateway wrote for a provider
                                // that sent none is no sign the answer was whole.
                                if sent.finished && !sent.finish_supplied && !this.continued {
                                    tee.finish(&this.gw, leg.ep, sent.usage, sent.pieces);
                                }
                            }
                            leg.attempt.succeeded(leg.ttft);
                            std::mem::take(&mut leg.span).end();
                        }
                        this.end(StreamStatus::Completed);
                    }
                    Poll::Ready(Some(Step::Failed(e))) => {
                        if let State::Relaying(leg, cursor) =
                            std::mem::replace(&mut this.state, State::Ended)
                        {
                            this.leg_failed(leg, cursor, e);
                        }
                    }
                },
                State::Continuing(fut, stopped) => match fut.as_mut().poll(cx) {
                    Poll::Pending => {
                        if stopped.as_mut().poll(cx).is_pending() {
                            return Poll::Pending;
                        }
                        let e = GatewayError::new(
                            ErrorKind::ShuttingDown,
                            "the gateway is shutting down; retry the request",
                        )
                        .with_code(crate::error::Code::GatewayShutdown);
                        this.end_with_error(&e);
                    }
                    Poll::Ready((cursor, Ok(Exchanged::Stream(leg)))) => {
                        this.ep = leg.ep;
                        this.state = State::Relaying(leg, Box::new(cursor));
                    }
                    Poll::Ready((cursor, Ok(Exchanged::Whole(_)))) => {
                        this.note(&cursor, None);
                        let e = GatewayError::new(
                            ErrorKind::Internal,
                            "the continuation of a stream answered with a whole response",
                        );
                        this.end_with_error(&e);
                    }
                    Poll::Ready((cursor, Err(mut e))) => {
                        this.note(&cursor, None);
                        e.message = format!(
                            "the stream broke mid-answer and could not be continued: {}",
                            e.message
                        );
                        this.end_with_error(&e);
                    }
                },
            }
        }
    }
}

impl HttpBody for ClientStream {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        // Polled inside the request's span (taken out for the call: no clone).
        let span = std::mem::replace(&mut this.span, tracing::Span::none());
        let polled = span.in_scope(|| this.poll_body(cx));
        this.span = span;
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let (Some(b), Some(data)) = (
                this.access.as_mut().and_then(|f| f.bodies.as_mut()),
                frame.data_ref(),
            ) {
                b.sent(data, this.gw.config.telemetry.access_log.max_body_bytes);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Ended) && self.pending.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

impl Drop for ClientStream {
    fn drop(&mut self) {
        // Dropped before its end: the client went away. The attempt in flight (if
        // any) counts as neither success nor failure when it drops.
        let span = std::mem::replace(&mut self.span, tracing::Span::none());
        let _in = span.enter();
        if let State::Relaying(mut leg, cursor) = std::mem::replace(&mut self.state, State::Ended) {
            self.pieces = leg.relay.sent().pieces;
            self.keep_text(leg.relay.sent());
            self.note(&cursor, Some(leg.began));
            leg.span.cancelled();
        }
        self.settle();
        self.logged(StreamStatus::ClientGone);
    }
}

/// What a stream `sent`, as the trace spans record it: the provider's answer id,
/// the model it named, the finish reason and its reported usage (each when known).
fn stream_answer(sent: &crate::providers::Sent) -> crate::otel::Answer {
    crate::otel::Answer {
        id: Some(sent.id.clone()).filter(|id| !id.is_empty()),
        model: sent.model.clone(),
        finish_reasons: sent.finish_reason.iter().cloned().collect(),
        usage: sent.usage,
    }
}

/// Records on an attempt's `span` what its stream `sent` ([`stream_answer`]).
fn streamed(span: &mut crate::otel::ChildSpan, sent: &crate::providers::Sent) {
    if span.is_on() {
        span.answered(200, &stream_answer(sent));
    }
}
