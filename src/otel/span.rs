//! The spans of one request: the server span ([`RequestTrace`]) and its children
//! ([`ChildSpan`]), with the GenAI attributes (semconv 1.37).

use std::borrow::Cow;
use std::time::{Instant, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracer;

use super::Tracer;
use crate::api::Usage;
use crate::config::ProviderKind;
use crate::error::GatewayError;

/// `traceparent` (W3C Trace Context).
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// The server span of one chat request, and what its children hang from. Empty
/// when tracing is off: then every method returns at once. Cheap to clone (the
/// span is shared; it ends once, at [`RequestTrace::end`]).
#[derive(Clone, Default)]
pub struct RequestTrace(Option<Box<Live>>);

#[derive(Clone)]
struct Live {
    tracer: SdkTracer,
    /// Holds the server span.
    cx: Context,
}

impl std::fmt::Debug for RequestTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("RequestTrace(off)"),
            Some(l) => write!(f, "RequestTrace({:?})", l.cx.span().span_context()),
        }
    }
}

/// When `started` was, on the wall clock.
fn wall(started: Instant) -> SystemTime {
    SystemTime::now() - started.elapsed()
}

impl RequestTrace {
    /// Starts the server span of request `id`, which arrived at `started` with
    /// the client's `headers`: its parent is the client's `traceparent` when that
    /// is valid. Empty when `tracer` is off.
    pub fn start(
        tracer: &Tracer,
        headers: &HeaderMap,
        started: Instant,
        id: &HeaderValue,
    ) -> RequestTrace {
        let Some(live) = &tracer.0 else {
            return RequestTrace(None);
        };
        let parent =
            TraceContextPropagator::new().extract(&opentelemetry_http::HeaderExtractor(headers));
        let span = live
            .tracer
            .span_builder("chat")
            .with_kind(SpanKind::Server)
            .with_start_time(wall(started))
            .with_attributes([
                KeyValue::new("gen_ai.operation.name", "chat"),
                KeyValue::new("http.request.method", "POST"),
                KeyValue::new("url.path", "/v1/chat/completions"),
                KeyValue::new(
                    "switchyard.request_id",
                    crate::request_id::as_str(id).to_string(),
                ),
            ])
            .start_with_context(&live.tracer, &parent);
        RequestTrace(Some(Box::new(Live {
            tracer: live.tracer.clone(),
            cx: parent.with_span(span),
        })))
    }

    /// Whether the request is traced.
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// Now on the wall clock when traced (the start of a child made later with
    /// [`RequestTrace::child_since`]); `None` when off.
    pub fn now(&self) -> Option<SystemTime> {
        self.0.as_ref().map(|_| SystemTime::now())
    }

    /// Sets `attrs` (made only when traced) on the server span.
    pub fn set(&self, attrs: impl FnOnce() -> Vec<KeyValue>) {
        if let Some(l) = &self.0 {
            l.cx.span().set_attributes(attrs());
        }
    }

    /// Records the parsed request: logical `model`, output cap, temperature; the
    /// span is renamed `chat {model}`.
    pub fn requested(&self, chat: &crate::api::ChatRequest) {
        let Some(l) = &self.0 else { return };
        let span = l.cx.span();
        span.update_name(format!("chat {}", chat.model));
        span.set_attributes(request_attributes(chat, &chat.model));
    }

    /// A child span `name` (kind INTERNAL) that began at `began` ([`RequestTrace::now`])
    /// and ends now, with `attrs`.
    pub fn child_since(
        &self,
        name: &'static str,
        began: Option<SystemTime>,
        attrs: impl FnOnce() -> Vec<KeyValue>,
    ) {
        let (Some(l), Some(began)) = (&self.0, began) else {
            return;
        };
        let mut span = l
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_start_time(began)
            .with_attributes(attrs())
            .start_with_context(&l.tracer, &l.cx);
        span.end();
    }

    /// Starts the span of one upstream attempt (kind CLIENT): attempt number `n`
    /// of `chat` on `endpoint` (its id), sending `upstream_model` to provider
    /// `provider` of `kind` at `base_url`.
    #[allow(clippy::too_many_arguments)]
    pub fn attempt(
        &self,
        n: u32,
        chat: &crate::api::ChatRequest,
        endpoint: &str,
        upstream_model: &str,
        provider: &str,
        kind: ProviderKind,
        base_url: &str,
    ) -> ChildSpan {
        let Some(l) = &self.0 else {
            return ChildSpan(None);
        };
        let mut attrs = request_attributes(chat, upstream_model);
        attrs.push(KeyValue::new("gen_ai.provider.name", provider_name(kind)));
        attrs.push(KeyValue::new("switchyard.endpoint", endpoint.to_string()));
        attrs.push(KeyValue::new("switchyard.provider", provider.to_string()));
        attrs.push(KeyValue::new("switchyard.attempt", i64::from(n)));
        if let Ok(uri) = base_url.parse::<http::Uri>() {
            if let Some(host) = uri.host() {
                attrs.push(KeyValue::new("server.address", host.to_string()));
            }
            let port = uri.port_u16().or(match uri.scheme_str() {
                Some("https") => Some(443),
                Some("http") => Some(80),
                _ => None,
            });
            if let Some(p) = port {
                attrs.push(KeyValue::new("server.port", i64::from(p)));
            }
        }
        let span = l
            .tracer
            .span_builder(format!("chat {upstream_model}"))
            .with_kind(SpanKind::Client)
            .with_attributes(attrs)
            .start_with_context(&l.tracer, &l.cx);
        ChildSpan(Some(Box::new(span)))
    }

    /// Records what the client received of a served answer on the server span.
    pub fn answered(&self, answer: &Answer) {
        if let Some(l) = &self.0 {
            l.cx.span().set_attributes(answer.attributes());
        }
    }

    /// Ends the server span (the access-line point): final `status`, the
    /// request's facts, and `error` (its kind) for a request that failed.
    pub fn end(&self, status: u16, error: Option<&str>, attrs: impl FnOnce() -> Vec<KeyValue>) {
        let Some(l) = &self.0 else { return };
        let span = l.cx.span();
        let mut all = attrs();
        all.push(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        if let Some(kind) = error {
            all.push(KeyValue::new("error.type", kind.to_string()));
            span.set_status(Status::error(kind.to_string()));
        }
        span.set_attributes(all);
        span.end();
    }
}

/// The GenAI request attributes of `chat` sent for `model`.
fn request_attributes(chat: &crate::api::ChatRequest, model: &str) -> Vec<KeyValue> {
    let mut attrs = vec![
        KeyValue::new("gen_ai.operation.name", "chat"),
        KeyValue::new("gen_ai.request.model", model.to_string()),
    ];
    if let Some(n) = chat.max_completion_tokens.or(chat.max_tokens) {
        attrs.push(KeyValue::new("gen_ai.request.max_tokens", n as i64));
    }
    if let Some(t) = chat.temperature {
        attrs.push(KeyValue::new("gen_ai.request.temperature", t));
    }
    if chat.is_stream() {
        attrs.push(KeyValue::new("switchyard.stream", true));
    }
    attrs
}

/// `gen_ai.provider.name` of a provider kind (the semconv's well-known values
/// where one exists, else the config spelling).
fn provider_name(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::OpenAi => "openai",
        ProviderKind::AzureOpenAi => "azure.ai.openai",
        ProviderKind::Anthropic => "anthropic",
        ProviderKind::Gemini => "gcp.gemini",
        ProviderKind::Bedrock => "aws.bedrock",
        other => other.as_str(),
    }
}

/// What a served answer said about itself: `gen_ai.response.*` and usage.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Answer {
    /// `gen_ai.response.id`.
    pub id: Option<String>,
    /// `gen_ai.response.model`.
    pub model: Option<String>,
    /// `gen_ai.response.finish_reasons`, one per choice.
    pub finish_reasons: Vec<String>,
    /// `gen_ai.usage.input_tokens` and `gen_ai.usage.output_tokens`.
    pub usage: Option<Usage>,
}

#[derive(serde::Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    choices: Vec<ChoiceHead<'a>>,
    #[serde(borrow, default)]
    stop_reason: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(serde::Deserialize)]
struct ChoiceHead<'a> {
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

impl Answer {
    /// The answer facts of a JSON chat completion `body` (OpenAI's shape; an
    /// Anthropic body gives its `stop_reason`); empty when it is not one.
    pub fn parse(body: &[u8]) -> Answer {
        let Ok(head) = serde_json::from_slice::<Head<'_>>(body) else {
            return Answer::default();
        };
        let mut finish_reasons: Vec<String> = head
            .choices
            .iter()
            .filter_map(|c| c.finish_reason.as_deref().map(str::to_string))
            .collect();
        if let Some(r) = head.stop_reason {
            finish_reasons.push(r.into_owned());
        }
        Answer {
            id: head.id.map(Cow::into_owned),
            model: head.model.map(Cow::into_owned),
            finish_reasons,
            usage: head.usage,
        }
    }

    fn attributes(&self) -> Vec<KeyValue> {
        let mut attrs = Vec::with_capacity(5);
        if let Some(id) = &self.id {
            attrs.push(KeyValue::new("gen_ai.response.id", id.clone()));
        }
        if let Some(m) = &self.model {
            attrs.push(KeyValue::new("gen_ai.response.model", m.clone()));
        }
        if !self.finish_reasons.is_empty() {
            let reasons: Vec<opentelemetry::StringValue> = self
                .finish_reasons
                .iter()
                .map(|r| r.clone().into())
                .collect();
            attrs.push(KeyValue::new(
                "gen_ai.response.finish_reasons",
                Value::Array(reasons.into()),
            ));
        }
        if let Some(u) = &self.usage {
            push_usage(&mut attrs, u);
        }
        attrs
    }
}

/// Appends the GenAI usage attributes of `u` (`gen_ai.usage.input_tokens`,
/// `gen_ai.usage.output_tokens`, tokens) to `attrs`: one place for the attempt and
/// the server span.
pub(crate) fn push_usage(attrs: &mut Vec<KeyValue>, u: &Usage) {
    attrs.push(KeyValue::new(
        "gen_ai.usage.input_tokens",
        u.prompt_tokens as i64,
    ));
    attrs.push(KeyValue::new(
        "gen_ai.usage.output_tokens",
        u.completion_tokens as i64,
    ));
}

/// A child span being recorded (an upstream attempt); empty when tracing is off.
/// Ends at [`ChildSpan::end`] (or when dropped).
///
/// Boxed: the SDK's span is 280 bytes, and an attempt's future holds this across
/// the whole exchange, so unboxed every request's future carried it even with
/// tracing off (`-Zprint-type-sizes`, issue 17's memory per connection).
#[derive(Default)]
pub struct ChildSpan(Option<Box<opentelemetry_sdk::trace::Span>>);

impl std::fmt::Debug for ChildSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "ChildSpan(on)"
        } else {
            "ChildSpan(off)"
        })
    }
}

impl ChildSpan {
    /// The `traceparent` naming this span, for the upstream request (`None` when
    /// off).
    pub fn traceparent(&self) -> Option<HeaderValue> {
        let sc = self.0.as_ref()?.span_context();
        let v = format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        );
        HeaderValue::from_str(&v).ok()
    }

    /// Whether the span is recorded (tracing is on).
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// Records the provider's HTTP `status` and what its `answer` said.
    pub fn answered(&mut self, status: u16, answer: &Answer) {
        if let Some(s) = &mut self.0 {
            s.set_attribute(KeyValue::new(
                "http.response.status_code",
                i64::from(status),
            ));
            s.set_attributes(answer.attributes());
        }
    }

    /// Records that the attempt failed with `e`: `error.type` is its kind
    /// (`GatewayError::metric_kind`), with the provider's status when it sent one.
    pub fn failed(&mut self, e: &GatewayError) {
        if let Some(s) = &mut self.0 {
            if let Some(status) = e.upstream_status {
                s.set_attribute(KeyValue::new(
                    "http.response.status_code",
                    i64::from(status),
                ));
            }
            s.set_attribute(KeyValue::new("error.type", e.metric_kind()));
            s.set_status(Status::error(
                crate::error::bounded(&e.message, 300).to_string(),
            ));
        }
    }

    /// Records that the client went away while this attempt streamed.
    pub fn cancelled(&mut self) {
        if let Some(s) = &mut self.0 {
            s.set_attribute(KeyValue::new("error.type", "client_gone"));
        }
    }

    /// Ends the span now.
    pub fn end(mut self) {
        if let Some(s) = &mut self.0 {
            s.end();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_give_their_id_model_finish_reasons_and_usage() {
        let a = Answer::parse(
            br#"{"id":"chatcmpl-1","model":"gpt-x","choices":[{"index":0,"finish_reason":"stop"},{"finish_reason":"length"}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#,
        );
        assert_eq!(a.id.as_deref(), Some("chatcmpl-1"));
        assert_eq!(a.model.as_deref(), Some("gpt-x"));
        assert_eq!(a.finish_reasons, ["stop", "length"]);
        assert_eq!(
            a.usage.map(|u| (u.prompt_tokens, u.completion_tokens)),
            Some((7, 3))
        );
        let anthropic =
            Answer::parse(br#"{"id":"msg_1","model":"claude","stop_reason":"end_turn"}"#);
        assert_eq!(anthropic.finish_reasons, ["end_turn"]);
        assert_eq!(Answer::parse(b"not json"), Answer::default());
    }

    #[test]
    fn an_off_trace_builds_nothing() {
        let t = RequestTrace::start(
            &Tracer::default(),
            &HeaderMap::new(),
            Instant::now(),
            &HeaderValue::from_static("x"),
        );
        assert!(!t.is_on());
        assert_eq!(t.now(), None);
        let chat: crate::api::ChatRequest =
            serde_json::from_str(r#"{"model":"m","messages":[]}"#).unwrap();
        let span = t.attempt(1, &chat, "e", "m", "p", ProviderKind::OpenAi, "http://h:1");
        assert!(span.traceparent().is_none());
    }
}
