//! Request validation and context limits through the gateway (issue 15): every
//! refusal is a 400 naming the field, and the upstream never sees the request.

use std::sync::atomic::Ordering;

use crate::common::{
    aws_credentials, post, scripted_upstream, sequence_upstream, start_app, COMPLETION,
};

fn one_upstream_config(addr: std::net::SocketAddr, endpoint_extra: &str) -> String {
    format!(
        "providers:\n  a: {{ kind: openai-compatible, base_url: http://{addr}/v1 }}\nmodels:\n  gpt-4o: {{ endpoints: [ {{ provider: a, model: gpt-4o{endpoint_extra} }} ] }}\n"
    )
}

#[tokio::test]
async fn malformed_requests_get_a_400_naming_the_field_and_never_reach_the_upstream() {
    let (addr, hits) = scripted_upstream(200, COMPLETION);
    let gw = start_app(&one_upstream_config(addr, ""), &[]).await;
    let url = gw.url("/v1/chat/completions");
    let table = [
        (
            r#"{"model":"gpt-4o","messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_1","content":"r"},{"role":"tool","tool_call_id":"call_2","content":"r"}]}"#,
            "messages[3].tool_call_id",
        ),
        (
            r#"{"model":"gpt-4o","messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"ok"}},{"type":"function","function":{"name":"not ok"}}]}"#,
            "tools[1].function.name",
        ),
        (
            r#"{"model":"gpt-4o","messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"n":{"type":"integr"}}}}}]}"#,
            "tools[0].function.parameters",
        ),
        (
            r#"{"model":"gpt-4o","messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}"#,
            "tool_choice.function.name",
        ),
        (
            r#"{"model":"gpt-4o","messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"http://x/i.png"}}]}]}"#,
            "messages[0].content[0].type",
        ),
        (
            r#"{"model":"gpt-4o","messages":[{"role":"user","content":"q"}],"top_p":1.5}"#,
            "top_p",
        ),
        (
            r#"{"model":"gpt-4o","messages":[{"role":"user","content":"q"}],"stop":["a","b","c","d","e"]}"#,
            "stop",
        ),
    ];
    for (body, param) in table {
        let r = post(&url, body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        let e = &r.json()["error"];
        assert_eq!(e["type"], "invalid_request_error", "{}", r.text());
        assert_eq!(e["param"], param, "{}", r.text());
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains(&format!("`{param}`")),
            "{}",
            r.text()
        );
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the upstream saw a request");
    // A well-formed tool conversation goes through.
    let ok = r##"{"model":"gpt-4o","messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_1","content":"r"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}}}],"tool_choice":"auto"}"##;
    let r = post(&url, ok).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

/// "hello world" is 2 tokens in o200k_base, plus 3 for the message and 3 for the
/// reply's priming: 8 input tokens.
fn hello(max_tokens: u64) -> String {
    format!(
        r#"{{"model":"gpt-4o","max_tokens":{max_tokens},"messages":[{{"role":"user","content":"hello world"}}]}}"#
    )
}

fn two_windows(a: std::net::SocketAddr, b: std::net::SocketAddr, wa: u64, wb: u64) -> String {
    format!(
        "providers:\n  a: {{ kind: openai-compatible, base_url: http://{a}/v1 }}\n  b: {{ kind: openai-compatible, base_url: http://{b}/v1 }}\nmodels:\n  gpt-4o: {{ endpoints: [ {{ provider: a, model: gpt-4o, priority: 1, context_window: {wa} }}, {{ provider: b, model: gpt-4o, priority: 2, context_window: {wb} }} ] }}\n"
    )
}

#[tokio::test]
async fn a_request_that_fits_only_some_endpoints_is_routed_to_those() {
    let (a, hits_a) = sequence_upstream(vec![(200, "", COMPLETION)]);
    let (b, hits_b) = sequence_upstream(vec![(200, "", COMPLETION)]);
    let gw = start_app(&two_windows(a, b, 20, 1000), &[]).await;
    let url = gw.url("/v1/chat/completions");
    // 8 + 12 = 20 fits the preferred endpoint exactly.
    let r = post(&url, &hello(12)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "a/gpt-4o");
    // 8 + 13 = 21 does not: only b is tried.
    let r = post(&url, &hello(13)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "b/gpt-4o");
    assert_eq!(r.headers["x-switchyard-attempts"], "1");
    assert_eq!(hits_a.load(Ordering::SeqCst), 1);
    assert_eq!(hits_b.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_request_that_fits_no_endpoint_is_context_length_exceeded_before_any_upstream_call() {
    let (a, hits_a) = sequence_upstream(vec![(200, "", COMPLETION)]);
    let (b, hits_b) = sequence_upstream(vec![(200, "", COMPLETION)]);
    let gw = start_app(&two_windows(a, b, 15, 20), &[]).await;
    let r = post(&gw.url("/v1/chat/completions"), &hello(13)).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let e = &r.json()["error"];
    assert_eq!(e["code"], "context_length_exceeded", "{}", r.text());
    assert_eq!(e["param"], "messages");
    assert_eq!(e["type"], "invalid_request_error");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains("21 tokens (8 of input plus 13 of output requested)")
            && msg.contains("20 tokens"),
        "{msg}"
    );
    assert_eq!(
        hits_a.load(Ordering::SeqCst) + hits_b.load(Ordering::SeqCst),
        0
    );
}

#[tokio::test]
async fn an_output_cap_over_every_max_output_tokens_is_a_400_on_that_field() {
    let (addr, hits) = scripted_upstream(200, COMPLETION);
    let gw = start_app(&one_upstream_config(addr, ", max_output_tokens: 100"), &[]).await;
    let url = gw.url("/v1/chat/completions");
    let r = post(&url, &hello(101)).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["param"], "max_tokens", "{}", r.text());
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    let r = post(&url, &hello(100)).await;
    assert_eq!(r.status, 200, "{}", r.text());
}

/// A chat request with exactly these headers (no `content-type` added).
async fn post_with_content_type(
    url: &str,
    content_type: Option<&str>,
    body: &str,
) -> (u16, String) {
    let (status, _, text) = post_with_headers(url, content_type, &[], body.as_bytes()).await;
    (status, text)
}

/// A chat request with `content_type` (if any) and `headers`; the status, response
/// headers and body.
async fn post_with_headers(
    url: &str,
    content_type: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, http::HeaderMap, String) {
    use http_body_util::{BodyExt, Full};
    let client: hyper_util::client::legacy::Client<_, Full<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();
    let mut req = http::Request::builder().method("POST").uri(url);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(bytes::Bytes::copy_from_slice(body)))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

/// Found by the OpenAI-ingress review (2026-12-05): a body declared as `text/plain`
/// or as a form (`curl -d` without `-H`) was parsed as JSON anyway and forwarded;
/// it is a 415 `unsupported_media_type` (as OpenAI and RFC 9110 section 15.5.16 answer
/// a body in a media type the endpoint does not take), and the upstream never sees it.
#[tokio::test]
async fn a_body_declared_as_text_or_a_form_was_forwarded_instead_of_refused_with_415() {
    let (addr, hits) = scripted_upstream(200, COMPLETION);
    let gw = start_app(&one_upstream_config(addr, ""), &[]).await;
    let url = gw.url("/v1/chat/completions");
    let body = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"q"}]}"#;
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonl",
    ] {
        let (status, text) = post_with_content_type(&url, Some(ct), body).await;
        assert_eq!(status, 415, "{ct}: {text}");
        let e: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(e["error"]["type"], "invalid_request_error", "{text}");
        assert_eq!(e["error"]["code"], "unsupported_media_type", "{text}");
        assert!(
            e["error"]["message"].as_str().unwrap().contains(ct),
            "{text}"
        );
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the upstream saw a request");
    // JSON in any spelling, and a body with no declared type, go through.
    for ct in [
        None,
        Some("application/json"),
        Some("Application/JSON; charset=utf-8"),
        Some("application/vnd.api+json"),
    ] {
        let (status, text) = post_with_content_type(&url, ct, body).await;
        assert_eq!(status, 200, "{ct:?}: {text}");
    }
    assert_eq!(hits.load(Ordering::SeqCst), 4);
}

/// Found by the OpenAI-ingress review (2026-12-05): a gzip-compressed body
/// (`Content-Encoding: gzip`) was read as JSON and answered "request body is not
/// valid JSON", as if the client had sent bad JSON; the gateway does not decode
/// bodies, and RFC 9110 section 15.5.16 answers a content coding the server does not
/// take with 415 and `Accept-Encoding`.
#[tokio::test]
async fn a_gzip_body_was_answered_as_invalid_json_instead_of_415() {
    let (addr, hits) = scripted_upstream(200, COMPLETION);
    let gw = start_app(&one_upstream_config(addr, ""), &[]).await;
    let url = gw.url("/v1/chat/completions");
    let body = br#"{"model":"gpt-4o","messages":[{"role":"user","content":"q"}]}"#;
    let (status, headers, text) = post_with_headers(
        &url,
        Some("application/json"),
        &[("content-encoding", "gzip")],
        &stored_gzip(body),
    )
    .await;
    assert_eq!(status, 415, "{text}");
    let e: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(e["error"]["code"], "unsupported_media_type", "{text}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("gzip"),
        "{text}"
    );
    assert_eq!(headers["accept-encoding"], "identity");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the upstream saw a request");
    // `identity` is no coding at all.
    let (status, _, text) = post_with_headers(
        &url,
        Some("application/json"),
        &[("content-encoding", "identity")],
        body,
    )
    .await;
    assert_eq!(status, 200, "{text}");
}

/// `body` as a gzip member holding one stored (uncompressed) deflate block: a gzip
/// body made without a compression library (its CRC-32 is left 0: the gateway never
/// decodes it).
fn stored_gzip(body: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    let len = body.len() as u16;
    out.push(1); // BFINAL = 1, BTYPE = stored
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&(!len).to_le_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out
}

/// Found by the conformance review: the gateway's own 400s carried `"code": null`
/// where OpenAI's carry the class of error; a client matching on
/// `missing_required_parameter` or `invalid_value` saw nothing behind Switchyard.
#[tokio::test]
async fn validation_400s_had_a_null_code_where_openai_gives_one() {
    let (addr, hits) = scripted_upstream(200, COMPLETION);
    let gw = start_app(&one_upstream_config(addr, ", max_output_tokens: 100"), &[]).await;
    let url = gw.url("/v1/chat/completions");
    let table = [
        (
            r#"{"model":"gpt-4o"}"#,
            "messages",
            Some("missing_required_parameter"),
        ),
        (
            r#"{"model":"gpt-4o","messages":[{"role":"user","content":7}]}"#,
            "messages[0].content",
            Some("invalid_type"),
        ),
        (
            r#"{"model":"gpt-4o","messages":[{"role":"robot","content":"q"}]}"#,
            "messages[0].role",
            Some("invalid_value"),
        ),
        (
            r#"{"model":"gpt-4o","messages":[{"role":"user","content":"q"}],"max_tokens":1000}"#,
            "max_tokens",
            Some("invalid_value"),
        ),
        (
            r#"{"model":"gpt-4o","messages":[{"role":"user","content":"q"}],"stream_options":{}}"#,
            "stream_options",
            None,
        ),
    ];
    for (body, param, code) in table {
        let r = post(&url, body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        let e = &r.json()["error"];
        assert_eq!(e["param"], param, "{}", r.text());
        assert_eq!(e["code"].as_str(), code, "{}", r.text());
    }
    let r = post(&url, "{not json").await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["code"].is_null(), "{}", r.text());
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the upstream saw a request");
}

/// Found by the conformance review: `parallel_tool_calls` without `tools` went to
/// the upstream, where OpenAI itself refuses it with a 400 on that field.
#[tokio::test]
async fn parallel_tool_calls_without_tools_was_forwarded_to_the_upstream() {
    let (addr, hits) = scripted_upstream(200, COMPLETION);
    let gw = start_app(&one_upstream_config(addr, ""), &[]).await;
    let url = gw.url("/v1/chat/completions");
    let r = post(
        &url,
        r#"{"model":"gpt-4o","messages":[{"role":"user","content":"q"}],"parallel_tool_calls":false}"#,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    let e = &r.json()["error"];
    assert_eq!(e["param"], "parallel_tool_calls", "{}", r.text());
    assert_eq!(e["type"], "invalid_request_error");
    assert!(e["code"].is_null(), "{}", r.text());
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the upstream saw it");
    let ok = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"q"}],"parallel_tool_calls":false,"tools":[{"type":"function","function":{"name":"f"}}]}"#;
    assert_eq!(post(&url, ok).await.status, 200);
}

/// Found by the conformance review: a 400 an adapter gives for what its provider
/// cannot express (Anthropic's one choice, Gemini's media types, Bedrock's
/// temperature range and its need for `tools`) carried `"code": null`, where
/// validation's 400s and OpenAI's carry the class of error; `param` names the field.
#[tokio::test]
async fn adapter_400s_for_what_a_provider_cannot_express_had_a_null_code() {
    let (addr, hits) = scripted_upstream(200, COMPLETION);
    let dir = tempfile::tempdir().unwrap();
    let credentials = aws_credentials(&dir);
    let gw = start_app(
        &format!(
            "providers:\n  a: {{ kind: anthropic, base_url: http://{addr} }}\n  g: {{ kind: gemini, base_url: http://{addr} }}\n  b: {{ kind: bedrock, base_url: http://{addr}, region: us-east-1, credentials_file: {} }}\nmodels:\n  claude: {{ endpoints: [ {{ provider: a, model: c }} ] }}\n  gem: {{ endpoints: [ {{ provider: g, model: g }} ] }}\n  rock: {{ endpoints: [ {{ provider: b, model: \"anthropic.claude-3-haiku-20240307-v1:0\" }} ] }}\n",
            credentials.display()
        ),
        &[],
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    let hi = r#""messages":[{"role":"user","content":"hi"}]"#;
    let calls = r#""messages":[{"role":"user","content":"go"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"x"}]"#;
    let table = [
        (
            format!(r#"{{"model":"claude","n":2,{hi}}}"#),
            "n",
            "unsupported_value",
        ),
        (
            format!(r#"{{"model":"claude","logprobs":true,{hi}}}"#),
            "logprobs",
            "unsupported_parameter",
        ),
        (
            format!(
                r#"{{"model":"claude","thinking":{{"type":"enabled","budget_tokens":100}},{hi}}}"#
            ),
            "thinking.budget_tokens",
            "integer_below_min_value",
        ),
        (
            r#"{"model":"gem","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/gif;base64,R0lGOD"}}]}]}"#.to_string(),
            "messages[0].content[0].image_url.url",
            "unsupported_value",
        ),
        (
            format!(r#"{{"model":"rock","temperature":1.5,{hi}}}"#),
            "temperature",
            "unsupported_value",
        ),
        (
            format!(r#"{{"model":"rock",{calls}}}"#),
            "tools",
            "missing_required_parameter",
        ),
    ];
    for (body, param, code) in table {
        let r = post(&url, &body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        let e = &r.json()["error"];
        assert_eq!(e["type"], "invalid_request_error", "{}", r.text());
        assert_eq!(e["param"], param, "{}", r.text());
        assert_eq!(e["code"], code, "{}", r.text());
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the upstream saw a request");
}
