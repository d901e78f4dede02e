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
//! the stream ends cleanly on its first endpoint with its finish reason sent. A
//! stream that failed, was cut, or was continued elsewhere is not stored.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};

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
        if leg.ttft.is_some() {
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
        }
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
        self
    }

    fn settle(&mut self) {
        if let Some((permit, prompt)) = self.permit.take() {
            let usage = match self.reported.filter(|_| !self.continued) {
                Some(u) => u,
                None => Usage::new(prompt, self.pieces),
            };
            permit.settle(Some(self.ep), &usage);
        }
    }

    fn end(&mut self, status: StreamStatus) {
        self.state = State::Ended;
        self.settle();
        if !self.logged {
            self.logged = true;
            self.gw.log.stream_ended(self.ep, self.started, status);
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
        } = *leg;
        let mut relay = relay;
        // A failed stream is never stored, even one whose answer was whole.
        self.tee = None;
        let sent = relay.sent().clone();
        self.pieces = sent.pieces;
        self.continued = true;
        if sent.finished {
            // Only the end of the stream was lost; the answer itself (text or tool
            // calls) is whole: end it as a clean close would.
            self.pending = Some(relay.close_after_finish());
            drop(relay);
            attempt.succeeded(ttft);
            self.end(StreamStatus::Completed);
            return;
        }
        drop(relay);
        let e = attempt.failed(e);
        let continuable = e.kind != ErrorKind::ShuttingDown
            && !sent.tool_calls
            && !sent.reasoning
            && !sent.untracked
            && cursor.can_continue();
        if !continuable {
            if e.kind != ErrorKind::ShuttingDown {
                self.gw.log.upstream_error(ep, &e);
            }
            self.end_with_error(&e);
            return;
        }
        tracing::info!(error = %e, pieces = sent.pieces, "stream failed mid-answer; continuing on the next endpoint");
        cursor.failed_mid_stream(ep, e, began.elapsed());
        let continuing = Box::pin(async move {
            let mut cursor = *cursor;
            let result = cursor.run(Some(&sent)).await;
            (cursor, result)
        });
        let stopped = Box::pin(self.gw.stream_stop.stopped());
        self.state = State::Continuing(continuing, stopped);
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
                        if let State::Relaying(leg, _) =
                            std::mem::replace(&mut this.state, State::Ended)
                        {
                            let sent = leg.relay.sent();
                            this.pieces = sent.pieces;
                            this.reported = sent.usage;
                            if let Some(tee) = this.tee.take() {
                                if sent.finished && !this.continued {
                                    tee.finish(&this.gw, leg.ep, sent.usage);
                                }
                            }
                            leg.attempt.succeeded(leg.ttft);
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
                    Poll::Ready((_, Ok(Exchanged::Whole(_)))) => {
                        let e = GatewayError::new(
                            ErrorKind::Internal,
                            "the continuation of a stream answered with a whole response",
                        );
                        this.end_with_error(&e);
                    }
                    Poll::Ready((_, Err(mut e))) => {
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
        if let State::Relaying(leg, _) = &self.state {
            self.pieces = leg.relay.sent().pieces;
        }
        self.settle();
        if !self.logged {
            self.logged = true;
            self.gw
                .log
                .stream_ended(self.ep, self.started, StreamStatus::ClientGone);
        }
    }
}
