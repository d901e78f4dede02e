//! Request validation and context limits through the gateway (issue 15): every
//! refusal is a 400 naming the field, and the upstream never sees the request.

use std::sync::atomic::Ordering;

use crate::common::{post, scripted_upstream, sequence_upstream, start_app, COMPLETION};

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
