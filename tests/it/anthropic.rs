//! The Anthropic adapter end to end: a client speaking OpenAI through the gateway to a
//! scripted upstream speaking Anthropic's Messages API (issue 13, provider fidelity).

use crate::common::*;
use crate::sse_script::*;

fn config(upstream: std::net::SocketAddr) -> String {
    format!(
        "providers:\n  a: {{ kind: anthropic, base_url: http://{upstream} }}\nmodels:\n  m: {{ endpoints: [ {{ provider: a, model: claude-x }} ] }}\n"
    )
}

/// `events` (Anthropic JSON payloads) framed as Anthropic sends them.
fn anthropic_sse(events: &[&str]) -> String {
    events
        .iter()
        .map(|d| {
            let v: serde_json::Value = serde_json::from_str(d).unwrap();
            format!("event: {}\ndata: {d}\n\n", v["type"].as_str().unwrap())
        })
        .collect()
}

#[tokio::test]
async fn a_zero_input_count_in_message_delta_does_not_reach_the_client_as_prompt_0() {
    let script = anthropic_sse(&[
        r#"{"type":"message_start","message":{"id":"msg_u","type":"message","role":"assistant","content":[],"model":"claude-x","stop_reason":null,"usage":{"input_tokens":25,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Think."}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2ln"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi."}}"#,
        r#"{"type":"content_block_stop","index":1}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":0,"output_tokens":15}}"#,
        r#"{"type":"message_stop"}"#,
    ]);
    let (up, seen) = sse_upstream(vec![script]);
    let gw = start_app(&config(up), &[]).await;
    let r = post(
        &gw.url("/v1/chat/completions"),
        &chat(
            "m",
            true,
            r#","stream_options":{"include_usage":true},"reasoning_effort":"low""#,
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(clean_text(&r), "Hi.");
    let chunks: Vec<serde_json::Value> = r
        .events()
        .iter()
        .filter(|e| e.as_str() != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(
        (
            usage["prompt_tokens"].as_u64(),
            usage["total_tokens"].as_u64()
        ),
        (Some(25), Some(40)),
        "{usage}"
    );
    let reasoning: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
        .collect();
    assert_eq!(reasoning, "Think.");
    assert!(chunks.iter().any(|c| c["choices"][0]["delta"]["thinking_blocks"]
        == serde_json::json!([{"type": "thinking", "thinking": "Think.", "signature": "c2ln"}])));
    let sent = &seen.lock().unwrap()[0];
    assert_eq!(
        sent["thinking"],
        serde_json::json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert_eq!(sent["max_tokens"], 2048 + 4096);
}

#[tokio::test]
async fn an_image_anthropic_cannot_take_is_refused_before_any_upstream_call() {
    let (up, seen) = sse_upstream(vec![String::new()]);
    let gw = start_app(&config(up), &[]).await;
    let body = r#"{"model":"m","messages":[
        {"role":"system","content":"s"},
        {"role":"user","content":"a"},
        {"role":"user","content":[{"type":"text","text":"what?"},{"type":"image_url","image_url":{"url":"data:image/tiff;base64,SUkq"}}]}]}"#;
    let r = post(&gw.url("/v1/chat/completions"), body).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let e = r.json();
    assert_eq!(e["error"]["type"], "invalid_request_error");
    assert_eq!(e["error"]["param"], "messages[2].content[1].image_url");
    assert!(seen.lock().unwrap().is_empty(), "the upstream was called");
}

#[tokio::test]
async fn an_anthropic_server_error_body_is_not_relayed() {
    let (up, hits) = scripted_upstream(
        500,
        "Traceback (most recent call last):\n  File \"/srv/app.py\", line 9\nKeyError: 'db_password'",
    );
    let gw = start_app(&config(up), &[]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 502, "{}", r.text());
    let text = r.text();
    assert!(
        !text.contains("Traceback") && !text.contains("db_password"),
        "{text}"
    );
    assert!(hits.load(std::sync::atomic::Ordering::SeqCst) >= 1);
}
