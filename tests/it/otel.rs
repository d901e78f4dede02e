//! OpenTelemetry traces (issue 16 part 3): the gateway exports its spans over
//! OTLP/HTTP protobuf to a receiver built here from the official OTLP message
//! types (`opentelemetry-proto`), on loopback.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use super::common::{chat, request_with, serve, serve_with_env, Proc};

/// Serves `handle` on a fresh loopback port, one task per connection.
async fn http_server<F, Fut>(handle: F) -> SocketAddr
where
    F: Fn(http::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = http::Response<Full<Bytes>>> + Send,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let handle = handle.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let handle = handle.clone();
                    async move { Ok::<_, Infallible>(handle(req).await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    addr
}

/// The spans a receiver got, in arrival order, and the headers of each export.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<Span>>>, Arc<Mutex<Vec<http::HeaderMap>>>);

impl Received {
    /// Waits (polling, 30 s at most) until `done` holds for the spans received.
    async fn wait(&self, what: &str, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.0.lock().unwrap().clone();
            if done(&spans) {
                return spans;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("{what}: not received within 30 s; got {spans:#?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// An OTLP/HTTP receiver: `POST /v1/traces` with a protobuf
/// `ExportTraceServiceRequest`.
async fn receiver() -> (SocketAddr, Received) {
    let got = Received::default();
    let sink = got.clone();
    let addr = http_server(move |req: http::Request<hyper::body::Incoming>| {
        let sink = sink.clone();
        async move {
            let path_ok = req.method() == http::Method::POST && req.uri().path() == "/v1/traces";
            let protobuf = req
                .headers()
                .get("content-type")
                .is_some_and(|v| v == "application/x-protobuf");
            sink.1.lock().unwrap().push(req.headers().clone());
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let status = match ExportTraceServiceRequest::decode(body) {
                Ok(export) if path_ok && protobuf => {
                    let mut spans = sink.0.lock().unwrap();
                    for rs in export.resource_spans {
                        for ss in rs.scope_spans {
                            spans.extend(ss.spans);
                        }
                    }
                    200
                }
                _ => 400,
            };
            http::Response::builder()
                .status(status)
                .header("content-type", "application/x-protobuf")
                .body(Full::new(Bytes::new()))
                .unwrap()
        }
    })
    .await;
    (addr, got)
}

/// What the upstream saw: the `traceparent` of each request.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Option<String>>>>);

const WHOLE: &str = r#"{"id":"up-1","object":"chat.completion","created":0,"model":"up-model-2024","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":4,"total_tokens":15}}"#;

const STREAM: &str = concat!(
    "data: {\"id\":\"up-s\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"up-model-2024\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"hel\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"up-s\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"up-model-2024\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n",
    "data: {\"id\":\"up-s\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"up-model-2024\",\"choices\":[],\"usage\":{\"prompt_tokens\":21,\"completion_tokens\":9,\"total_tokens\":30}}\n\n",
    "data: [DONE]\n\n"
);

/// An OpenAI-compatible upstream: upstream model `broken` answers 500, a
/// streaming request gets [`STREAM`], any other [`WHOLE`].
async fn upstream() -> (SocketAddr, Seen) {
    let seen = Seen::default();
    let log = seen.clone();
    let addr = http_server(move |req: http::Request<hyper::body::Incoming>| {
        let log = log.clone();
        async move {
            let tp = req
                .headers()
                .get("traceparent")
                .map(|v| v.to_str().unwrap().to_string());
            log.0.lock().unwrap().push(tp);
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let (status, ctype, answer) = if v["model"] == "broken" {
                (500, "application/json", r#"{"error":{"message":"boom"}}"#)
            } else if v["stream"] == true {
                (200, "text/event-stream", STREAM)
            } else {
                (200, "application/json", WHOLE)
            };
            http::Response::builder()
                .status(status)
                .header("content-type", ctype)
                .body(Full::new(Bytes::from_static(answer.as_bytes())))
                .unwrap()
        }
    })
    .await;
    (addr, seen)
}

fn gateway(up: SocketAddr, telemetry: &str) -> Proc {
    serve(&format!(
        "providers:\n  up: {{ kind: openai-compatible, base_url: http://{up}/v1 }}\n\
         models:\n  m: {{ endpoints: [ {{ provider: up, model: good-model }} ] }}\n  \
         bad: {{ endpoints: [ {{ provider: up, model: broken }} ] }}\n\
         server: {{ retry_budget_ms: 2000 }}\n{telemetry}"
    ))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn attrs(s: &Span) -> HashMap<String, Value> {
    s.attributes
        .iter()
        .filter_map(|kv| Some((kv.key.clone(), kv.value.as_ref()?.value.clone()?)))
        .collect()
}

fn str_attr(s: &Span, key: &str) -> Option<String> {
    match attrs(s).remove(key)? {
        Value::StringValue(v) => Some(v),
        other => panic!("{key} is not a string: {other:?}"),
    }
}

fn strs_attr(s: &Span, key: &str) -> Option<Vec<String>> {
    match attrs(s).remove(key)? {
        Value::ArrayValue(a) => Some(
            a.values
                .iter()
                .map(|v| match &v.value {
                    Some(Value::StringValue(s)) => s.clone(),
                    other => panic!("{key} holds a non-string: {other:?}"),
                })
                .collect(),
        ),
        other => panic!("{key} is not an array: {other:?}"),
    }
}

fn int_attr(s: &Span, key: &str) -> Option<i64> {
    match attrs(s).remove(key)? {
        Value::IntValue(v) => Some(v),
        other => panic!("{key} is not an int: {other:?}"),
    }
}

/// The spans of trace `trace_id` (hex).
fn of_trace<'a>(spans: &'a [Span], trace_id: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| hex(&s.trace_id) == trace_id)
        .collect()
}

fn server_span<'a>(spans: &[&'a Span]) -> &'a Span {
    let servers: Vec<_> = spans
        .iter()
        .filter(|s| s.kind == SpanKind::Server as i32)
        .collect();
    assert_eq!(servers.len(), 1, "one server span: {spans:#?}");
    servers[0]
}

fn children<'a>(spans: &[&'a Span], parent: &Span, kind: SpanKind) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.parent_span_id == parent.span_id && s.kind == kind as i32)
        .copied()
        .collect()
}

fn telemetry(collector: SocketAddr) -> String {
    format!(
        "telemetry: {{ otlp: {{ endpoint: \"http://{collector}\", service_name: sy-test, timeout_ms: 2000 }} }}\n"
    )
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_continues_the_clients_trace_with_genai_attributes_and_its_attempt_span_goes_upstream(
) {
    let (collector, got) = receiver().await;
    let (up, seen) = upstream().await;
    let gw = gateway(up, &telemetry(collector));
    let tp = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    let body = chat("m", false, r#","max_tokens":50,"temperature":0.5"#);
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[("traceparent", &tp), ("x-request-id", "otel-whole-1")],
        body,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());

    let spans = got
        .wait("server, decide and attempt spans", |s| {
            let t = of_trace(s, TRACE);
            t.iter().any(|s| s.kind == SpanKind::Server as i32)
                && t.iter().any(|s| s.kind == SpanKind::Client as i32)
                && t.iter().any(|s| s.name == "decide")
        })
        .await;
    let t = of_trace(&spans, TRACE);
    let server = server_span(&t);
    assert_eq!(
        hex(&server.parent_span_id),
        CLIENT_SPAN,
        "the client's span is the parent"
    );
    assert_eq!(server.name, "chat m");
    assert_eq!(
        str_attr(server, "gen_ai.operation.name").as_deref(),
        Some("chat")
    );
    assert_eq!(
        str_attr(server, "gen_ai.request.model").as_deref(),
        Some("m")
    );
    assert_eq!(int_attr(server, "gen_ai.request.max_tokens"), Some(50));
    assert!(
        matches!(attrs(server).get("gen_ai.request.temperature"), Some(Value::DoubleValue(t)) if *t == 0.5)
    );
    assert_eq!(int_attr(server, "gen_ai.usage.input_tokens"), Some(11));
    assert_eq!(int_attr(server, "gen_ai.usage.output_tokens"), Some(4));
    assert_eq!(
        str_attr(server, "gen_ai.response.id").as_deref(),
        Some("up-1")
    );
    assert_eq!(int_attr(server, "http.response.status_code"), Some(200));
    assert_eq!(
        str_attr(server, "switchyard.request_id").as_deref(),
        Some("otel-whole-1")
    );
    assert_eq!(
        str_attr(server, "switchyard.endpoint").as_deref(),
        Some("up/good-model")
    );
    assert_eq!(
        str_attr(server, "switchyard.priority").as_deref(),
        Some("normal")
    );
    assert_eq!(str_attr(server, "error.type"), None);
    let reasons = match attrs(server).remove("gen_ai.response.finish_reasons") {
        Some(Value::ArrayValue(a)) => a
            .values
            .into_iter()
            .filter_map(|v| v.value)
            .collect::<Vec<_>>(),
        other => panic!("finish_reasons: {other:?}"),
    };
    assert_eq!(reasons, [Value::StringValue("stop".into())]);

    let internal = children(&t, server, SpanKind::Internal);
    let decide = internal
        .iter()
        .find(|s| s.name == "decide")
        .expect("decide span");
    assert_eq!(
        str_attr(decide, "switchyard.priority").as_deref(),
        Some("normal")
    );
    assert!(
        matches!(attrs(decide).get("switchyard.plan"), Some(Value::ArrayValue(a)) if a.values.len() == 1),
        "{decide:#?}"
    );
    let attempts = children(&t, server, SpanKind::Client);
    assert_eq!(attempts.len(), 1, "{attempts:#?}");
    let attempt = attempts[0];
    assert_eq!(attempt.name, "chat good-model");
    assert_eq!(
        str_attr(attempt, "gen_ai.provider.name").as_deref(),
        Some("openai-compatible")
    );
    assert_eq!(
        str_attr(attempt, "gen_ai.request.model").as_deref(),
        Some("good-model")
    );
    assert_eq!(
        str_attr(attempt, "gen_ai.response.model").as_deref(),
        Some("up-model-2024")
    );
    assert_eq!(int_attr(attempt, "gen_ai.usage.input_tokens"), Some(11));
    assert_eq!(int_attr(attempt, "gen_ai.usage.output_tokens"), Some(4));
    assert_eq!(
        str_attr(attempt, "server.address").as_deref(),
        Some("127.0.0.1")
    );
    assert_eq!(int_attr(attempt, "http.response.status_code"), Some(200));

    let sent = seen.0.lock().unwrap().clone();
    assert_eq!(
        sent,
        [Some(format!("00-{TRACE}-{}-01", hex(&attempt.span_id)))],
        "the upstream got the attempt span's traceparent, not the client's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streams_server_span_ends_after_its_stream_with_the_final_usage() {
    let (collector, got) = receiver().await;
    let (up, _seen) = upstream().await;
    let gw = gateway(up, &telemetry(collector));
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let tp = format!("00-{trace}-b7ad6b7169203331-01");
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[("traceparent", &tp)],
        chat("m", true, ""),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(r.text().contains("[DONE]"), "{}", r.text());
    let spans = got
        .wait("a stream's spans", |s| {
            let t = of_trace(s, trace);
            t.iter().any(|s| s.kind == SpanKind::Server as i32)
                && t.iter().any(|s| s.kind == SpanKind::Client as i32)
        })
        .await;
    let t = of_trace(&spans, trace);
    let server = server_span(&t);
    let attempt = children(&t, server, SpanKind::Client)[0];
    // The usage chunk comes last in the stream: the spans saw the stream's end.
    assert_eq!(int_attr(attempt, "gen_ai.usage.output_tokens"), Some(9));
    assert_eq!(int_attr(server, "gen_ai.usage.input_tokens"), Some(21));
    assert_eq!(int_attr(server, "gen_ai.usage.output_tokens"), Some(9));
    assert_eq!(
        str_attr(attempt, "gen_ai.response.id").as_deref(),
        Some("up-s")
    );
    // The finish reason and the model of a stream, as for a whole answer: the
    // provider's model on the attempt, the client's on the server span.
    assert_eq!(
        strs_attr(attempt, "gen_ai.response.finish_reasons"),
        Some(vec!["stop".to_string()])
    );
    assert_eq!(
        str_attr(attempt, "gen_ai.response.model").as_deref(),
        Some("up-model-2024")
    );
    assert_eq!(
        strs_attr(server, "gen_ai.response.finish_reasons"),
        Some(vec!["stop".to_string()])
    );
    assert_eq!(
        str_attr(server, "gen_ai.response.model").as_deref(),
        Some("m")
    );
    assert_eq!(
        str_attr(server, "gen_ai.response.id").as_deref(),
        Some("up-s")
    );
    assert!(
        server.end_time_unix_nano >= attempt.end_time_unix_nano,
        "the server span ends with the stream, after its attempt"
    );
    assert_eq!(
        str_attr(server, "switchyard.outcome").as_deref(),
        Some("ok")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_error_sets_error_type_on_the_attempt_and_the_server_span() {
    let (collector, got) = receiver().await;
    let (up, seen) = upstream().await;
    let gw = gateway(up, &telemetry(collector));
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[("x-request-id", "otel-error-1")],
        chat("bad", false, ""),
    )
    .await;
    assert!(r.status >= 500, "{} {}", r.status, r.text());
    let spans = got
        .wait("the failed request's server span", |s| {
            s.iter().any(|s| {
                s.kind == SpanKind::Server as i32
                    && str_attr(s, "switchyard.request_id").as_deref() == Some("otel-error-1")
            })
        })
        .await;
    let server = spans
        .iter()
        .find(|s| str_attr(s, "switchyard.request_id").as_deref() == Some("otel-error-1"))
        .unwrap();
    assert!(str_attr(server, "error.type").is_some(), "{server:#?}");
    assert_eq!(
        int_attr(server, "http.response.status_code"),
        Some(i64::from(r.status))
    );
    let t = of_trace(&spans, &hex(&server.trace_id));
    let attempts = children(&t, server, SpanKind::Client);
    assert!(!attempts.is_empty());
    assert_eq!(
        attempts.len(),
        seen.0.lock().unwrap().len(),
        "one span per attempt"
    );
    for a in &attempts {
        assert_eq!(int_attr(a, "http.response.status_code"), Some(500));
        assert!(str_attr(a, "error.type").is_some(), "{a:#?}");
    }
    // A request without a traceparent starts a trace of its own.
    assert!(server.parent_span_id.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_succeed_while_the_collector_is_down() {
    // A port nothing listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let collector = dead.local_addr().unwrap();
    drop(dead);
    let (up, seen) = upstream().await;
    let gw = gateway(up, &telemetry(collector));
    for stream in [false, true, false] {
        let r = request_with(
            "POST",
            &gw.url("/v1/chat/completions"),
            &[("traceparent", &format!("00-{TRACE}-{CLIENT_SPAN}-01"))],
            chat("m", stream, ""),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // Tracing was on: each attempt still named its own span upstream.
    for tp in seen.0.lock().unwrap().iter() {
        let tp = tp.as_deref().unwrap();
        assert!(
            tp.starts_with(&format!("00-{TRACE}-")) && !tp.contains(CLIENT_SPAN),
            "{tp}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_telemetry_the_clients_traceparent_is_forwarded_unchanged() {
    let (up, seen) = upstream().await;
    let gw = gateway(up, "");
    let tp = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[("traceparent", &tp)],
        chat("m", false, ""),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(seen.0.lock().unwrap().clone(), [Some(tp)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_refused_before_its_body_is_read_is_traced() {
    let (collector, got) = receiver().await;
    let (up, seen) = upstream().await;
    let gw = serve(&format!(
        "providers:\n  up: {{ kind: openai-compatible, base_url: http://{up}/v1 }}\n\
         models:\n  m: {{ endpoints: [ {{ provider: up, model: good-model }} ] }}\n\
         server: {{ max_body_bytes: 1024 }}\n{}",
        telemetry(collector)
    ));
    let trace = "5c2f6b9e0d1a4c3b8e7f6a5b4c3d2e1f";
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[
            ("traceparent", &format!("00-{trace}-{CLIENT_SPAN}-01")),
            ("x-request-id", "otel-refused-1"),
        ],
        chat("m", false, &format!(r#","user":"{}""#, "x".repeat(2000))),
    )
    .await;
    assert_eq!(r.status, 413, "{}", r.text());
    let spans = got
        .wait("the refused request's server span", |s| {
            !of_trace(s, trace).is_empty()
        })
        .await;
    let t = of_trace(&spans, trace);
    let server = server_span(&t);
    assert_eq!(hex(&server.parent_span_id), CLIENT_SPAN);
    assert_eq!(
        str_attr(server, "switchyard.request_id").as_deref(),
        Some("otel-refused-1")
    );
    assert_eq!(int_attr(server, "http.response.status_code"), Some(413));
    assert!(str_attr(server, "error.type").is_some(), "{server:#?}");
    assert!(seen.0.lock().unwrap().is_empty(), "nothing went upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_headers_from_the_config_and_the_environment_reach_the_collector() {
    let (collector, got) = receiver().await;
    let (up, _seen) = upstream().await;
    let config = format!(
        "providers:\n  up: {{ kind: openai-compatible, base_url: http://{up}/v1 }}\n\
         models:\n  m: {{ endpoints: [ {{ provider: up, model: good-model }} ] }}\n\
         telemetry: {{ otlp: {{ endpoint: \"http://{collector}\", timeout_ms: 2000, headers: {{ x-api-key: \"k-${{OTLP_TEST_KEY}}\", x-both: from-config }} }} }}\n"
    );
    let gw = serve_with_env(
        &config,
        &[
            ("OTLP_TEST_KEY", "s3cret"),
            // The W3C Baggage form of the standard variable: percent-decoded.
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "x-tenant=acme%20co,x-both=from-env",
            ),
        ],
    );
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[],
        chat("m", false, ""),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    got.wait("a span", |s| !s.is_empty()).await;
    let headers = got.1.lock().unwrap().clone();
    let h = headers.first().expect("one export");
    assert_eq!(h.get("x-api-key").unwrap(), "k-s3cret");
    assert_eq!(h.get("x-tenant").unwrap(), "acme co");
    assert_eq!(
        h.get_all("x-both").iter().collect::<Vec<_>>(),
        ["from-config"],
        "the config wins over the variable"
    );
}
