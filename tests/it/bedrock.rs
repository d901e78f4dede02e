//! The Bedrock adapter end to end: a client speaking OpenAI through the gateway to a
//! scripted upstream speaking the Converse API (JSON, and ConverseStream's binary
//! event stream), with SigV4 signing from a shared credentials file (issue 13).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use aws_smithy_types::event_stream::{Header, HeaderValue, Message};

use crate::common::*;
use crate::sse_script::{clean_text, loopback_upstream, write_raw, Received};

/// One request as the upstream saw it.
#[derive(Debug, Clone)]
struct Seen {
    /// Request line and headers, lower-cased.
    head: String,
    body: serde_json::Value,
}

/// An upstream answering each request with `(content type, body)` from `script` (the
/// last again once it runs out), after checking it is SigV4-signed; an unsigned
/// request gets a 403. Bodies are written in pieces of 7 bytes, so the gateway sees
/// frames split across reads.
fn bedrock_upstream(script: Vec<(&'static str, Vec<u8>)>) -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let keep = |r: &Received| Seen {
        head: r.head.clone(),
        body: serde_json::from_slice(&r.body).unwrap_or_default(),
    };
    loopback_upstream(keep, move |n, r, s| {
        let signed = r
            .head
            .contains("\r\nauthorization: aws4-hmac-sha256 credential=")
            && r.head.contains("\r\nx-amz-date: ");
        let (kind, answer) = &script[n.min(script.len() - 1)];
        if signed {
            write_raw(s, "200 OK", kind, answer, 7);
        } else {
            let denied = br#"{"message":"Missing Authentication Token"}"#;
            write_raw(s, "403 Forbidden", "application/json", denied, 7);
        }
    })
}

/// One ConverseStream event frame.
fn frame(kind: &str, payload: &str) -> Vec<u8> {
    let m = Message::new(payload.as_bytes().to_vec())
        .add_header(Header::new(
            ":message-type",
            HeaderValue::String("event".into()),
        ))
        .add_header(Header::new(
            ":event-type",
            HeaderValue::String(kind.to_string().into()),
        ))
        .add_header(Header::new(
            ":content-type",
            HeaderValue::String("application/json".into()),
        ));
    let mut out = Vec::new();
    aws_smithy_eventstream::frame::write_message_to(&m, &mut out).unwrap();
    out
}

/// Config for a bedrock provider at `upstream`, signing with the `[team]` profile of
/// a credentials file written in `dir`.
fn config(upstream: SocketAddr, dir: &std::path::Path) -> String {
    let file = dir.join("credentials");
    std::fs::write(
        &file,
        "[default]\naws_access_key_id = WRONG\naws_secret_access_key = x\n[team]\naws_access_key_id = AKIDTEAM\naws_secret_access_key = teamsecret\naws_session_token = teamtoken\n",
    )
    .unwrap();
    format!(
        "providers:\n  b: {{ kind: bedrock, base_url: http://{upstream}, region: us-west-2, credentials_file: {}, profile: team }}\nmodels:\n  m: {{ endpoints: [ {{ provider: b, model: \"anthropic.claude-3-haiku-20240307-v1:0\" }} ] }}\n",
        file.display()
    )
}

const TOOLS: &str = r#","tools":[{"type":"function","function":{"name":"weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]"#;

#[tokio::test]
async fn converse_through_the_gateway_is_signed_and_translated() {
    let answer = br#"{"output":{"message":{"role":"assistant","content":[{"text":"Checking."},{"toolUse":{"toolUseId":"tu_1","name":"weather","input":{"city":"Paris"}}}]}},"stopReason":"tool_use","usage":{"inputTokens":30,"outputTokens":12,"totalTokens":42,"cacheReadInputTokens":0,"cacheWriteInputTokens":0},"metrics":{"latencyMs":10}}"#;
    let (up, seen) = bedrock_upstream(vec![("application/json", answer.to_vec())]);
    let dir = tempfile::tempdir().unwrap();
    let gw = start_app(&config(up, dir.path()), &[]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, TOOLS)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["model"], "m");
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "tool_calls");
    assert_eq!(c["message"]["content"], "Checking.");
    assert_eq!(c["message"]["tool_calls"][0]["id"], "tu_1");
    assert_eq!(c["message"]["tool_calls"][0]["function"]["name"], "weather");
    assert_eq!(
        c["message"]["tool_calls"][0]["function"]["arguments"],
        r#"{"city":"Paris"}"#
    );
    assert_eq!(
        v["usage"],
        serde_json::json!({"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42})
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let head = &seen[0].head;
    assert!(
        head.starts_with("post /model/anthropic.claude-3-haiku-20240307-v1%3a0/converse http/1.1"),
        "{head}"
    );
    assert!(
        head.contains("credential=akidteam/") && head.contains("/us-west-2/bedrock/aws4_request"),
        "{head}"
    );
    assert!(
        head.contains("\r\nx-amz-security-token: teamtoken"),
        "{head}"
    );
    assert_eq!(
        seen[0].body["messages"][0]["content"][0]["text"],
        "hello there"
    );
    assert_eq!(
        seen[0].body["toolConfig"]["tools"][0]["toolSpec"]["name"],
        "weather"
    );
}

#[tokio::test]
async fn converse_stream_through_the_gateway_relays_text_tool_call_and_usage() {
    let mut events = Vec::new();
    events.extend(frame("messageStart", r#"{"role":"assistant"}"#));
    events.extend(frame(
        "contentBlockDelta",
        r#"{"contentBlockIndex":0,"delta":{"text":"Let me "}}"#,
    ));
    events.extend(frame(
        "contentBlockDelta",
        r#"{"contentBlockIndex":0,"delta":{"text":"check."}}"#,
    ));
    events.extend(frame("contentBlockStop", r#"{"contentBlockIndex":0}"#));
    events.extend(frame(
        "contentBlockStart",
        r#"{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"tu_9","name":"weather"}}}"#,
    ));
    events.extend(frame(
        "contentBlockDelta",
        r#"{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\"city\":"}}}"#,
    ));
    events.extend(frame(
        "contentBlockDelta",
        r#"{"contentBlockIndex":1,"delta":{"toolUse":{"input":"\"Oslo\"}"}}}"#,
    ));
    events.extend(frame("contentBlockStop", r#"{"contentBlockIndex":1}"#));
    events.extend(frame("messageStop", r#"{"stopReason":"tool_use"}"#));
    events.extend(frame("metadata", r#"{"usage":{"inputTokens":25,"outputTokens":15,"totalTokens":45,"cacheReadInputTokens":5},"metrics":{"latencyMs":9}}"#));
    let (up, seen) = bedrock_upstream(vec![("application/vnd.amazon.eventstream", events)]);
    let dir = tempfile::tempdir().unwrap();
    let gw = start_app(&config(up, dir.path()), &[]).await;
    let extra = format!(r#"{TOOLS},"stream_options":{{"include_usage":true}}"#);
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, &extra)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(clean_text(&r), "Let me check.");
    let chunks: Vec<serde_json::Value> = r
        .events()
        .iter()
        .filter(|e| e.as_str() != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let mut args = String::new();
    let mut ids = Vec::new();
    for c in &chunks {
        for t in c["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(id) = t["id"].as_str() {
                ids.push((
                    id.to_string(),
                    t["function"]["name"].as_str().unwrap().to_string(),
                ));
            }
            args.push_str(t["function"]["arguments"].as_str().unwrap_or(""));
        }
    }
    assert_eq!(ids, [("tu_9".to_string(), "weather".to_string())]);
    assert_eq!(args, r#"{"city":"Oslo"}"#);
    let finishes: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["finish_reason"].as_str())
        .collect();
    assert_eq!(finishes, ["tool_calls"]);
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage["prompt_tokens"], 30);
    assert_eq!(usage["completion_tokens"], 15);
    assert_eq!(usage["total_tokens"], 45);
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 5);
    let head = &seen.lock().unwrap()[0].head;
    assert!(head.contains("/converse-stream http/1.1"), "{head}");
    assert!(
        head.contains("\r\naccept: application/vnd.amazon.eventstream"),
        "{head}"
    );
}

#[tokio::test]
async fn an_image_url_is_refused_before_any_upstream_call() {
    let (up, seen) = bedrock_upstream(vec![("application/json", b"{}".to_vec())]);
    let dir = tempfile::tempdir().unwrap();
    let gw = start_app(&config(up, dir.path()), &[]).await;
    let body = r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}"#;
    let r = post(&gw.url("/v1/chat/completions"), body).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.json()["error"]["param"],
        "messages[0].content[1].image_url.url"
    );
    assert!(seen.lock().unwrap().is_empty());
}
