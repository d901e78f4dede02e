//! Streams and their commit point, in process: a failure before the first content
//! falls back unseen; a failure after it continues the answer on the next endpoint
//! (restart with the repeated text dropped, or prefill), and the client reads one
//! continuous stream ending in `[DONE]` or one error event.

use std::time::Duration;

use crate::common::*;
use crate::sse_script::*;

/// Primary `p/x` (`p` as given), then secondary `q/x` (`q` as given), tried in that
/// order; `server` goes into the `server:` block.
fn chain(p: &str, q: &str, server: &str) -> String {
    format!(
        "server: {{ {server} }}\nproviders:\n  p: {p}\n  q: {q}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x, priority: 1 }}, {{ provider: q, model: x, priority: 2 }} ] }}\n"
    )
}

const CHAIN: &str = r#"
route r when request.model == "m" {
  default use endpoint "p/x"
  fallback endpoint "q/x"
}
"#;

#[tokio::test]
async fn an_error_event_before_the_first_content_falls_back_unseen() {
    let mut bad = openai_sse(&[], false);
    bad.push_str("data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\n");
    let (a, seen) = sse_upstream(vec![bad]);
    let gw = start_app(
        &chain(
            &format!("{{ kind: openai-compatible, base_url: http://{a}/v1 }}"),
            "{ kind: mock }",
            "",
        ),
        &[("r.policy", CHAIN)],
    )
    .await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200);
    assert_eq!(clean_text(&r), uninterrupted("{}").await);
    assert_eq!(r.headers["x-switchyard-endpoint"], "q/x");
    assert_eq!(r.headers["x-switchyard-attempts"], "2");
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_cut_before_the_first_content_falls_back_unseen() {
    let gw = start_app(
        &chain(
            "{ kind: mock, mock: { cut_after_chunks: 1 } }",
            "{ kind: mock }",
            "",
        ),
        &[("r.policy", CHAIN)],
    )
    .await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200);
    assert_eq!(clean_text(&r), uninterrupted("{}").await);
    assert_eq!(r.headers["x-switchyard-endpoint"], "q/x");
}

#[tokio::test]
async fn a_stall_before_the_first_content_falls_back_after_first_content_ms() {
    let gw = start_app(
        &chain(
            "{ kind: mock, timeouts: { first_content_ms: 300 }, mock: { stall_after_chunks: 1, stall_ms: 20000 } }",
            "{ kind: mock }",
            "",
        ),
        &[("r.policy", CHAIN)],
    )
    .await;
    let t = std::time::Instant::now();
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200);
    assert_eq!(clean_text(&r), uninterrupted("{}").await);
    assert_eq!(r.headers["x-switchyard-endpoint"], "q/x");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

#[tokio::test]
async fn every_stream_failing_before_content_gets_the_aggregate_error_not_a_200() {
    let gw = start_app(
        &chain(
            "{ kind: mock, mock: { cut_after_chunks: 1 } }",
            "{ kind: mock, mock: { cut_after_chunks: 1 } }",
            "",
        ),
        &[("r.policy", CHAIN)],
    )
    .await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 502, "{}", r.text());
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("all 2 attempts failed"), "{msg}");
    assert!(msg.contains("p/x") && msg.contains("q/x"), "{msg}");
}

#[tokio::test]
async fn a_cut_after_five_content_chunks_continues_by_restart_without_duplicates() {
    // Chunk 0 is the role chunk: the cut comes after five content chunks. The
    // secondary does not take a prefill, so it restarts; with the same seed its answer
    // repeats the five chunks, which are dropped.
    let gw = start_app(
        &chain(
            "{ kind: mock, mock: { cut_after_chunks: 6 } }",
            "{ kind: mock }",
            "",
        ),
        &[("r.policy", CHAIN)],
    )
    .await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers["x-switchyard-endpoint"], "p/x",
        "committed on the primary"
    );
    assert_eq!(clean_text(&r), uninterrupted("{}").await);
    let m = get(&gw.url("/metrics")).await.text();
    assert!(
        metric(
            &m,
            "switchyard_upstream_errors_total",
            &[("endpoint", "p/x")]
        ) >= 1.0
    );
}

#[tokio::test]
async fn a_cut_after_content_continues_with_the_text_as_prefill() {
    let (b, seen) = sse_upstream(vec![openai_sse(&[" and", " more."], true)]);
    let gw = start_app(
        &chain(
            "{ kind: mock, mock: { cut_after_chunks: 3 } }",
            &format!("{{ kind: openai-compatible, base_url: http://{b}/v1, prefill: true }}"),
            "",
        ),
        &[("r.policy", CHAIN)],
    )
    .await;
    let r = post(
        &gw.url("/v1/chat/completions"),
        &chat("m", true, r#","max_tokens":10"#),
    )
    .await;
    assert_eq!(r.status, 200);
    let text = clean_text(&r);
    let full = uninterrupted("{ completion_tokens: 10 }").await;
    let words: Vec<&str> = full.split_inclusive(' ').collect();
    let sent: String = full.split(' ').take(2).collect::<Vec<_>>().join(" ");
    assert!(words.len() > 2);
    assert_eq!(text, format!("{sent} and more."));
    let bodies = seen.lock().unwrap();
    assert_eq!(bodies.len(), 1);
    let last = bodies[0]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["content"], sent);
    assert_eq!(
        bodies[0]["max_tokens"], 8,
        "the cap shrinks by the pieces sent"
    );
}

#[tokio::test]
async fn a_restart_that_diverges_ends_with_one_error_event() {
    let gw = start_app(
        &chain(
            "{ kind: mock, mock: { cut_after_chunks: 4 } }",
            "{ kind: mock, mock: { seed: 99 } }",
            "",
        ),
        &[("r.policy", CHAIN)],
    )
    .await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200);
    let events = r.events();
    let errors: Vec<_> = events.iter().filter(|e| e.contains("\"error\"")).collect();
    assert_eq!(errors.len(), 1, "{}", r.text());
    assert!(
        errors[0].contains("upstream_stream_diverged"),
        "{}",
        errors[0]
    );
    assert!(events.last().unwrap().contains("error"), "error event last");
    assert!(!r.text().contains("[DONE]"));
}

#[tokio::test]
async fn a_tool_call_stream_that_breaks_is_not_continued() {
    let tool = "data: {\"id\":\"up\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":\"}}]},\"finish_reason\":null}]}\n\n";
    let (a, _) = sse_upstream(vec![tool.to_string()]);
    let (b, seen_b) = sse_upstream(vec![openai_sse(&["x"], true)]);
    let gw = start_app(
        &chain(
            &format!("{{ kind: openai-compatible, base_url: http://{a}/v1 }}"),
            &format!("{{ kind: openai-compatible, base_url: http://{b}/v1 }}"),
            "",
        ),
        &[("r.policy", CHAIN)],
    )
    .await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200);
    let events = r.events();
    assert!(events.last().unwrap().contains("\"error\""), "{}", r.text());
    assert_eq!(
        seen_b.lock().unwrap().len(),
        0,
        "the fallback was not asked"
    );
}

#[tokio::test]
async fn with_stream_failover_off_a_cut_ends_with_one_error_event() {
    let gw = start_app(
        &chain(
            "{ kind: mock, mock: { cut_after_chunks: 4 } }",
            "{ kind: mock }",
            "stream_failover: false",
        ),
        &[("r.policy", CHAIN)],
    )
    .await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    let events = r.events();
    assert!(
        events.last().unwrap().contains("upstream_stream_cut"),
        "{}",
        r.text()
    );
    assert_eq!(events.iter().filter(|e| e.contains("\"error\"")).count(), 1);
}

#[tokio::test]
async fn an_anthropic_continuation_gets_the_text_as_prefill_without_trailing_whitespace() {
    let mut cut = openai_sse(&["Hello", " wor", "ld. "], false);
    cut.push_str(PAUSE);
    cut.push_str("data: {\"error\":{\"message\":\"backend died\"}}\n\n");
    let (a, _) = sse_upstream(vec![cut]);
    let anthropic = [
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude","stop_reason":null,"usage":{"input_tokens":5,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" More."}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
        r#"{"type":"message_stop"}"#,
    ]
    .iter()
    .map(|d| {
        let kind = serde_json::from_str::<serde_json::Value>(d).unwrap()["type"]
            .as_str()
            .unwrap()
            .to_string();
        format!("event: {kind}\ndata: {d}\n\n")
    })
    .collect::<String>();
    let (b, seen) = sse_upstream(vec![anthropic]);
    let gw = start_app(
        &chain(
            &format!("{{ kind: openai-compatible, base_url: http://{a}/v1 }}"),
            &format!("{{ kind: anthropic, base_url: http://{b} }}"),
            "",
        ),
        &[("r.policy", CHAIN)],
    )
    .await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200);
    assert_eq!(clean_text(&r), "Hello world. More.");
    let bodies = seen.lock().unwrap();
    let last = bodies[0]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "assistant");
    let prefill = last["content"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| last["content"][0]["text"].as_str().unwrap().to_string());
    assert_eq!(
        prefill, "Hello world.",
        "trailing whitespace trimmed: {last}"
    );
}
