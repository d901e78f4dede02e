//! OpenTelemetry traces of chat requests, exported over OTLP/HTTP (protobuf).
//!
//! Off unless `telemetry.otlp` is configured or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
//! / `OTEL_EXPORTER_OTLP_ENDPOINT` is set ([`Tracer::start`]). When off, a request
//! carries an empty [`RequestTrace`] and every span call is a branch on `None`: no
//! span is built, no attribute formatted, no header parsed.
//!
//! The span tree of one request (GenAI semantic conventions, semconv 1.37: the
//! provider is `gen_ai.provider.name`):
//!
//! ```text
//! chat {model}                 SERVER  ingress to the end of the body (a stream's last byte)
//! ├── decide                   INTERNAL  the policy decision (route, rule, plan)
//! ├── cache lookup             INTERNAL  only when caching is in play
//! └── chat {upstream model}    CLIENT  one per upstream attempt (retries, fallbacks,
//!                                      a stream's continuation), to its last byte
//! ```
//!
//! A client's W3C `traceparent` makes the server span its child; each attempt sends
//! a `traceparent` naming its own span in place of the client's.
//!
//! Export never holds up a request: ended spans go to a bounded queue
//! (`telemetry.otlp.max_queue`) that the SDK's batch processor drains on its own
//! thread; a span ending while the queue is full is dropped and counted
//! (`switchyard_otel_spans_dropped_total`). One export (retries included) is bounded by
//! `timeout_ms`; a collector that is down costs failed exports, never requests.
//!
//! Why the OpenTelemetry API directly and not `tracing-opentelemetry`: the server
//! span must end at the access-line point (a stream's end, long after the
//! handler's `tracing` span is gone), its attributes (response model, tokens,
//! finish reasons) are known only at the end, and when tracing is off no span may
//! be built at all; a `tracing` layer would build every span for the fmt layer
//! anyway and needs every field declared up front.

mod export;
pub(crate) mod span;

pub use export::Tracer;
pub use span::{Answer, ChildSpan, RequestTrace, TRACEPARENT};
