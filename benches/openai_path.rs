//! The OpenAI-format pass-through path (issue 13): what asking every stream for
//! usage and stripping it back out costs per request and per chunk, against the
//! plain `model` splice, and what the header rule costs.
//!
//! `cargo bench --bench openai_path` (release profile).

use std::hint::black_box;

use bytes::Bytes;
use criterion::Criterion;
use http::{HeaderMap, HeaderName, HeaderValue};

use switchyard::api::ChatRequest;
use switchyard::config::ProviderKind;
use switchyard::egress::forward;
use switchyard::providers::openai::OpenAi;
use switchyard::providers::{splice, Adapter, Target};

/// A 2 KB chat body: a system prompt and a few turns.
fn body(stream: bool) -> Bytes {
    let turn = "Tell me about the weather in Paris and what to wear tomorrow. ".repeat(4);
    Bytes::from(format!(
        r#"{{"model":"m","stream":{stream},"messages":[{{"role":"system","content":"You are brief."}},{{"role":"user","content":"{turn}"}},{{"role":"assistant","content":"{turn}"}},{{"role":"user","content":"{turn}"}},{{"role":"assistant","content":"{turn}"}},{{"role":"user","content":"{turn}"}}],"temperature":0.2}}"#
    ))
}

const CHUNK: &str = r#"{"id":"chatcmpl-D8Z5oo6uDh67AD85p73ksdT1KxhE0","object":"chat.completion.chunk","created":1770933892,"model":"gpt-4.1-nano-2025-04-14","service_tier":"default","system_fingerprint":"fp_de604bd877","choices":[{"index":0,"delta":{"content":" Name"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"yoKFv"}"#;

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let adapter = OpenAi::standard();
    let plain = OpenAi::standard().with_stream_usage(false);
    let target = Target {
        base_url: "http://127.0.0.1:1/v1",
        model: "upstream-model",
        api_key: Some("sk-x"),
    };
    let streamed = ChatRequest::parse_bytes(body(true)).unwrap();
    c.bench_function(
        "request: stream, model spliced only (stream_usage off)",
        |b| b.iter(|| black_box(plain.request(&target, black_box(&streamed)).unwrap())),
    );
    c.bench_function(
        "request: stream, model spliced + include_usage inserted",
        |b| b.iter(|| black_box(adapter.request(&target, black_box(&streamed)).unwrap())),
    );
    c.bench_function("chunk: model spliced", |b| {
        b.iter(|| {
            black_box(splice::set_string(
                black_box(CHUNK.as_bytes()),
                "model",
                "gpt-4o",
            ))
        })
    });
    c.bench_function("chunk: model spliced + usage member dropped", |b| {
        b.iter(|| {
            black_box(splice::set_string_dropping(
                black_box(CHUNK.as_bytes()),
                "model",
                "gpt-4o",
                "usage",
            ))
        })
    });
    let mut client = HeaderMap::new();
    for (k, v) in [
        ("host", "gw:8080"),
        ("accept-encoding", "gzip, deflate"),
        ("connection", "keep-alive"),
        ("accept", "application/json"),
        ("content-type", "application/json"),
        ("user-agent", "OpenAI/Python 1.55.0"),
        ("x-stainless-lang", "python"),
        ("x-stainless-package-version", "1.55.0"),
        ("x-stainless-os", "Linux"),
        ("x-stainless-arch", "x64"),
        ("x-stainless-runtime", "CPython"),
        ("x-stainless-runtime-version", "3.12.1"),
        ("authorization", "Bearer sk-client"),
        ("x-stainless-async", "false"),
        ("x-stainless-retry-count", "0"),
        ("x-stainless-read-timeout", "600"),
        ("x-stainless-timeout", "600"),
        ("content-length", "900"),
        (
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ),
    ] {
        client.append(HeaderName::from_static(k), HeaderValue::from_static(v));
    }
    c.bench_function(
        "headers: candidates + apply (OpenAI SDK's set, kind openai)",
        |b| {
            b.iter(|| {
                let kept = forward::candidates(black_box(&client));
                let mut up = HeaderMap::new();
                forward::apply(&kept, ProviderKind::OpenAi, &[], &mut up);
                black_box(up)
            })
        },
    );
    c.final_summary();
}
