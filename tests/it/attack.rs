//! Attack tests against mid-stream failover, Retry-After throttling and
//! context-window routing, by an outside review. Tests marked `// Regression:` failed
//! when written (the comment says what was wrong) and pass since the fix; the others
//! held up from the start.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use crate::sse_script::*;

fn oa(addr: SocketAddr, extra: &str) -> String {
    format!("{{ kind: openai-compatible, base_url: http://{addr}/v1{extra} }}")
}

/// p/x, then q/x, then (optionally) r/x, in that order.
fn chain3(p: &str, q: &str, r: Option<&str>, server: &str) -> (String, String) {
    let mut cfg = format!("server: {{ {server} }}\nproviders:\n  p: {p}\n  q: {q}\n");
    if let Some(r) = r {
        cfg.push_str(&format!("  r: {r}\n"));
    }
    cfg.push_str("models:\n  m: { endpoints: [ { provider: p, model: x, priority: 1 }, { provider: q, model: x, priority: 2 }");
    if r.is_some() {
        cfg.push_str(", { provider: r, model: x, priority: 3 }");
    }
    cfg.push_str(" ] }\n");
    let mut policy =
        String::from("route r when request.model == \"m\" {\n  default use endpoint \"p/x\"\n  fallback endpoint \"q/x\"\n");
    if r.is_some() {
        policy.push_str("  fallback endpoint \"r/x\"\n");
    }
    policy.push_str("}\n");
    (cfg, policy)
}

/// A streamed chat request (model `m`, body members `extra`) through a gateway whose
/// plan is two OpenAI-format upstreams, the first answering `first` and the second
/// `second`: the reply, and the requests the second upstream received.
async fn over_two(
    first: String,
    second: String,
    extra: &str,
) -> (Reply, Arc<Mutex<Vec<serde_json::Value>>>) {
    let (a, _) = sse_upstream(vec![first]);
    let (b, seen_b) = sse_upstream(vec![second]);
    let (cfg, policy) = chain3(&oa(a, ""), &oa(b, ""), None, "");
    let gw = start_app(&cfg, &[("r.policy", &policy)]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, extra)).await;
    (r, seen_b)
}

/// [`clean_text`], checking too that `[DONE]` came exactly once.
/// The stream `events` of `r` hold exactly one error event, the last, and it
/// contains `needle`.
fn one_error_event_last(r: &Reply, events: &[String], needle: &str) {
    assert_eq!(
        events.iter().filter(|e| e.contains("\"error\"")).count(),
        1,
        "{}",
        r.text()
    );
    assert!(events.last().unwrap().contains(needle), "{}", r.text());
}

fn clean_text_once(r: &Reply) -> String {
    let done = r.events().iter().filter(|e| *e == "[DONE]").count();
    assert_eq!(done, 1, "one [DONE]: {}", r.text());
    clean_text(r)
}

// ---------------------------------------------------------------------------
// Findings
// ---------------------------------------------------------------------------

// Regression: a tool-call answer whose finish chunk (`finish_reason: "tool_calls"`) was
// already sent is complete, but when the provider then fails (an error event or a
// stall instead of `[DONE]`) `ClientStream::leg_failed` only treats
// `sent.finished && !sent.tool_calls` as whole. Expected: the stream ends with
// `[DONE]` (as it does for a text answer). Actual: an error event follows the
// finish chunk, so SDKs raise and the client loses a complete tool call.
#[tokio::test]
async fn attack_finished_tool_call_then_error_event_ends_with_done() {
    let tool = "data: {\"id\":\"up\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n\n";
    let mut body = tool.to_string();
    body.push_str(&finish_chunk("tool_calls"));
    body.push_str(PAUSE);
    body.push_str(ERROR_EVENT);
    let (r, _) = over_two(body, openai_sse(&["x"], true), "").await;
    assert_eq!(r.status, 200);
    let events = r.events();
    assert!(
        !events.iter().any(|e| e.contains("\"error\"")),
        "no error event after a complete tool-call answer: {}",
        r.text()
    );
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{}",
        r.text()
    );
}

// Regression: with `stream_options.include_usage`, a stream whose finish chunk arrived but
// whose provider then failed before its usage chunk and `[DONE]` ends with `[DONE]`
// alone (`leg_failed` writes only `[DONE]`). Expected: the usage chunk the client
// asked for (estimated, as `OpenAiStream::close` does when the provider omits it),
// then `[DONE]`. Actual: no usage chunk at all.
#[tokio::test]
async fn attack_error_after_finish_with_include_usage_still_sends_a_usage_chunk() {
    let mut body = openai_sse(&["Hello", " world"], false);
    body.push_str(&finish_chunk("stop"));
    body.push_str(PAUSE);
    body.push_str(ERROR_EVENT);
    let (r, _) = over_two(
        body,
        openai_sse(&["Hello", " world"], true),
        r#","stream_options":{"include_usage":true}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(clean_text_once(&r), "Hello world");
    assert!(
        r.events()
            .iter()
            .any(|e| e.contains("\"usage\"") && e.contains("completion_tokens")),
        "usage chunk asked for: {}",
        r.text()
    );
}

// Regression: a restart (no prefill) must repeat the text already sent exactly
// (`Resume.exact`); `Progress::text` only checks the pieces that arrive. A restart
// that finishes *before* it has repeated all of the sent text is accepted: the
// client reads "Hello world" + finish + [DONE] although the continuing model's
// answer was only "Hello" (it never produced the rest, nor anything after it).
// Expected: the divergence error event (upstream_stream_diverged), as for a restart
// that differs. Actual: a clean stream with `finish_reason: stop`.
#[tokio::test]
async fn attack_restart_that_finishes_before_repeating_the_sent_text_is_diverged() {
    let mut cut = openai_sse(&["Hello", " world", " and"], false);
    cut.push_str(PAUSE);
    cut.push_str(ERROR_EVENT);
    let (r, _) = over_two(cut, openai_sse(&["Hello"], true), "").await;
    assert_eq!(r.status, 200);
    assert!(
        r.text().contains("upstream_stream_diverged"),
        "a restart shorter than the sent text is not the same answer: {}",
        r.text()
    );
}

// Regression (outside attack, 2026-12-07): the same short restart, but with its first
// piece in a frame of its own, so the continuation commits before its finish chunk
// arrives. The finish chunk was dropped (the restart had not repeated the text yet),
// yet it marked the answer finished (`Sent::finished`), so the divergence that
// followed was taken for a failure after the finish: the client got "Hello world
// and", `[DONE]`, no finish reason and no usage chunk, and the access line said `ok`
// (about a third of the tries with the attacker's timing). Expected: the divergence
// error event, as when the whole restart arrives at once.
#[tokio::test]
async fn a_short_restart_committed_before_its_finish_is_diverged_not_done() {
    let mut cut = openai_sse(&["Hello", " world", " and"], false);
    cut.push_str(PAUSE);
    cut.push_str(ERROR_EVENT);
    let mut short = openai_sse(&["Hello"], false);
    short.push_str(PAUSE);
    short.push_str(&finish_chunk("stop"));
    short.push_str("data: {\"id\":\"up\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1,\"total_tokens\":6}}\n\n");
    short.push_str(DONE);
    let (r, _) = over_two(cut, short, r#","stream_options":{"include_usage":true}"#).await;
    assert_eq!(r.status, 200);
    let events = r.events();
    assert!(
        events
            .last()
            .is_some_and(|e| e.contains("upstream_stream_diverged")),
        "one error event last, not [DONE]: {}",
        r.text()
    );
    assert!(!events.iter().any(|e| e == "[DONE]"), "{}", r.text());
}

/// A chunk of an OpenAI-format reasoning model (DeepSeek, xAI, vLLM) carrying a
/// piece of `delta.reasoning_content`.
fn reasoning_chunk(p: &str) -> String {
    format!(
        "data: {{\"id\":\"up\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"x\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":null,\"reasoning_content\":{}}},\"finish_reason\":null}}]}}\n\n",
        serde_json::to_string(p).unwrap()
    )
}

// Regression: the OpenAI-format relay read only `delta.content` and `delta.tool_calls`,
// so a DeepSeek/xAI/vLLM stream's `reasoning_content` was invisible to it: the README
// says a stream that sent reasoning is not continued, yet this one was, and the
// restart on q streamed its reasoning again after the text the client already had.
// Expected: one error event after "Hello", the reasoning once, q never asked.
#[tokio::test]
async fn a_stream_cut_after_openai_format_reasoning_is_not_continued() {
    let mut cut = role_chunk();
    cut.push_str(&reasoning_chunk("Let me think."));
    cut.push_str(&text_chunk("Hello"));
    cut.push_str(PAUSE);
    cut.push_str(ERROR_EVENT);
    let (a, _) = sse_upstream(vec![cut]);
    let mut again = role_chunk();
    again.push_str(&reasoning_chunk("Let me think again."));
    again.push_str(&openai_sse(&["Hello", " world"], true)[role_chunk().len()..]);
    let (b, seen_b) = sse_upstream(vec![again]);
    let (cfg, policy) = chain3(&oa(a, ""), &oa(b, ""), None, "");
    let gw = start_app(&cfg, &[("r.policy", &policy)]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200);
    let events = r.events();
    let reasoning: Vec<&String> = events
        .iter()
        .filter(|e| e.contains("reasoning_content\":\""))
        .collect();
    assert_eq!(reasoning.len(), 1, "the reasoning once: {}", r.text());
    one_error_event_last(&r, &events, "\"error\"");
    assert!(!events.iter().any(|e| e == "[DONE]"), "{}", r.text());
    assert_eq!(seen_b.lock().unwrap().len(), 0, "not continued on q");
}

// Regression: Groq, DeepSeek and Mistral put the usage on the finish chunk and send no
// usage chunk. A client that asked for `include_usage` got no `choices: []` chunk, and
// a finish chunk whose `usage` was not null (OpenAI: "all other chunks will also
// include a usage field, but with a null value"); here after a mid-stream failover.
#[tokio::test]
async fn usage_on_a_continuations_finish_chunk_goes_out_in_one_usage_chunk() {
    let mut cut = openai_sse(&["Hello", " world"], false);
    cut.push_str(PAUSE);
    cut.push_str(ERROR_EVENT);
    let (a, _) = sse_upstream(vec![cut]);
    let mut groq = openai_sse(&["Hello", " world", " again"], false);
    groq.push_str("data: {\"id\":\"up\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3,\"total_tokens\":12}}\n\n");
    groq.push_str(DONE);
    let (b, _) = sse_upstream(vec![groq]);
    let (cfg, policy) = chain3(&oa(a, ""), &oa(b, ""), None, "");
    let gw = start_app(&cfg, &[("r.policy", &policy)]).await;
    let r = post(
        &gw.url("/v1/chat/completions"),
        &chat("m", true, r#","stream_options":{"include_usage":true}"#),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(clean_text_once(&r), "Hello world again");
    let events = r.events();
    let chunks: Vec<serde_json::Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let (last, rest) = chunks.split_last().unwrap();
    assert_eq!(last["choices"], serde_json::json!([]), "{}", r.text());
    assert_eq!(last["usage"]["completion_tokens"], 3, "{}", r.text());
    for c in rest {
        assert!(c.get("usage").is_some_and(|u| u.is_null()), "{c}");
    }
    let finishes = rest
        .iter()
        .filter(|c| !c["choices"][0]["finish_reason"].is_null())
        .count();
    assert_eq!(finishes, 1, "{}", r.text());
}

// Regression: with `n` > 1, the first choice's `finish_reason` was taken for the end of
// the whole answer: a stream cut after choice 0 finished, while choice 1 was still
// streaming, ended with `[DONE]` as a clean close would, choice 1 silently cut short.
// Expected: one error event, no `[DONE]`.
#[tokio::test]
async fn a_stream_with_two_choices_cut_after_the_first_finished_ends_with_one_error_event() {
    let two = |i: u32, delta: &str, finish: &str| {
        format!("data: {{\"id\":\"up\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"x\",\"choices\":[{{\"index\":{i},\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n")
    };
    let mut cut = String::new();
    for i in 0..2 {
        cut.push_str(&two(i, r#"{"role":"assistant","content":""}"#, "null"));
        cut.push_str(&two(i, r#"{"content":"one"}"#, "null"));
    }
    cut.push_str(&two(0, "{}", r#""stop""#));
    cut.push_str(&two(1, r#"{"content":" two"}"#, "null"));
    cut.push_str(PAUSE);
    let (r, _) = over_two(cut, openai_sse(&["x"], true), r#","n":2"#).await;
    assert_eq!(r.status, 200);
    let events = r.events();
    assert!(!events.iter().any(|e| e == "[DONE]"), "{}", r.text());
    one_error_event_last(&r, &events, "upstream_stream_cut");
}

// Regression: Mistral's reasoning models stream `delta.content` as a list of parts. With
// a fallback in the plan (the stream's text tracked for a failover), the relay refused
// the list as "not a string", so every attempt on p failed and the answer came from q.
// Expected: p's stream, relayed as it came, and q never asked.
#[tokio::test]
async fn content_streamed_as_a_list_of_parts_is_relayed_with_a_fallback_in_the_plan() {
    let part = |content: &str| {
        format!("data: {{\"id\":\"up\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"x\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{content}}},\"finish_reason\":null}}]}}\n\n")
    };
    let mut script = role_chunk();
    script.push_str(&part(
        r#"[{"type":"thinking","thinking":[{"type":"text","text":"Hmm."}]}]"#,
    ));
    script.push_str(&part(r#"[{"type":"text","text":"Hello"}]"#));
    script.push_str(&finish_chunk("stop"));
    script.push_str(DONE);
    let (r, seen_b) = over_two(script, openai_sse(&["from q"], true), "").await;
    assert_eq!(r.status, 200);
    assert!(
        r.text().contains(r#"[{"type":"text","text":"Hello"}]"#),
        "{}",
        r.text()
    );
    assert_eq!(
        r.events().last().map(String::as_str),
        Some("[DONE]"),
        "{}",
        r.text()
    );
    assert_eq!(seen_b.lock().unwrap().len(), 0, "{}", r.text());
}

// Regression: a restart (no prefill) passes on only what follows the text already sent,
// but only text was held back: a restarted reasoning model's reasoning, streamed before
// it repeated the text, reached the client after that text; and a restart that began a
// tool call instead had its tool-call deltas relayed before the divergence error.
#[tokio::test]
async fn a_restart_passes_on_nothing_before_it_has_repeated_the_text_already_sent() {
    let mut cut = openai_sse(&["Hello", " wor"], false);
    cut.push_str(PAUSE);
    let thinking = format!(
        "{}{}{}",
        role_chunk(),
        reasoning_chunk("Thinking again."),
        &openai_sse(&["Hello", " world", " again"], true)[role_chunk().len()..]
    );
    let tool = format!("{}data: {{\"id\":\"up\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"x\",\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{{\"name\":\"f\",\"arguments\":\"{{}}\"}}}}]}},\"finish_reason\":null}}]}}\n\n{}{DONE}", role_chunk(), finish_chunk("tool_calls"));
    for (again, clean) in [(thinking, true), (tool, false)] {
        let (r, _) = over_two(cut.clone(), again, "").await;
        assert_eq!(r.status, 200);
        assert!(!r.text().contains("reasoning_content\":\""), "{}", r.text());
        assert!(!r.text().contains("tool_calls\":["), "{}", r.text());
        if clean {
            assert_eq!(clean_text_once(&r), "Hello world again");
        } else {
            let events = r.events();
            one_error_event_last(&r, &events, "upstream_stream_diverged");
        }
    }
}

// Regression: a provider (or a proxy before it) that answers a streamed request with 200
// and a JSON error body was refused as "not an event stream", its own message dropped:
// the client could not tell a quota error from a misconfigured server. Expected: the
// provider's `error.message` in the error the client gets.
#[tokio::test]
async fn a_200_json_error_body_to_a_stream_request_names_the_providers_message() {
    let (up, _) = loopback_upstream(
        |_| (),
        |_, _, s| {
            let body = br#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
            write_raw(s, "200 OK", "application/json", body, 1024)
        },
    );
    let cfg = format!(
        "providers:\n  p: {}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x }} ] }}\n",
        oa(up, "")
    );
    let gw = start_app(&cfg, &[]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 502, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["code"], "upstream_bad_response", "{}", r.text());
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("not an event stream"), "{message}");
    assert!(
        message.contains("You exceeded your current quota"),
        "{message}"
    );
}

// ---------------------------------------------------------------------------
// Held up (kept as regression checks)
// ---------------------------------------------------------------------------

#[tokio::test]
async fn attack_three_endpoint_chain_with_two_cuts_reads_as_one_answer() {
    // p is cut after 3 content chunks, q (restart) after 6, r completes.
    let (cfg, policy) = chain3(
        "{ kind: mock, mock: { cut_after_chunks: 4 } }",
        "{ kind: mock, mock: { cut_after_chunks: 7 } }",
        Some("{ kind: mock }"),
        "",
    );
    let _ = policy;
    let gw = start_app(&cfg, &[]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200);
    assert_eq!(clean_text_once(&r), uninterrupted("{}").await);
}

#[tokio::test]
async fn attack_three_endpoint_chain_with_prefill_cut_twice() {
    let (cfg, policy) = chain3(
        "{ kind: mock, mock: { cut_after_chunks: 4 } }",
        "{ kind: mock, prefill: true, mock: { cut_after_chunks: 3 } }",
        Some("{ kind: mock, prefill: true }"),
        "",
    );
    let _ = policy;
    let gw = start_app(&cfg, &[]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200);
    assert_eq!(clean_text_once(&r), uninterrupted("{}").await);
}

#[tokio::test]
async fn attack_multibyte_restart_chunked_differently_is_clean() {
    let mut cut = openai_sse(&["h", "é", "l🎉"], false);
    cut.push_str(PAUSE);
    cut.push_str(ERROR_EVENT);
    let (r, _) = over_two(
        cut,
        openai_sse(&["hél", "🎉 wö", "rld"], true),
        r#","stream_options":{"include_usage":true}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(clean_text_once(&r), "hél🎉 wörld");
}

#[tokio::test]
async fn attack_cut_in_the_middle_of_the_skipped_text_goes_to_the_third_endpoint() {
    let mut cut = openai_sse(&["one", " two", " three"], false);
    cut.push_str(PAUSE);
    cut.push_str(ERROR_EVENT);
    let (a, _) = sse_upstream(vec![cut]);
    // q restarts but dies while still repeating.
    let mut q = openai_sse(&["one", " tw"], false);
    q.push_str(PAUSE);
    q.push_str(ERROR_EVENT);
    let (b, _) = sse_upstream(vec![q]);
    let (c, _) = sse_upstream(vec![openai_sse(&["one two", " three", " four"], true)]);
    let (cfg, _) = chain3(&oa(a, ""), &oa(b, ""), Some(&oa(c, "")), "");
    let gw = start_app(&cfg, &[]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200);
    assert_eq!(clean_text_once(&r), "one two three four");
}

#[tokio::test]
async fn attack_plan_exhausted_mid_stream_ends_with_exactly_one_error_event() {
    let mut cut = openai_sse(&["one", " two"], false);
    cut.push_str(PAUSE);
    cut.push_str(ERROR_EVENT);
    let (r, _) = over_two(cut.clone(), cut, "").await;
    let events = r.events();
    one_error_event_last(&r, &events, "\"error\"");
    assert!(!r.text().contains("[DONE]"));
    let mut text = String::new();
    for e in &events {
        let v: serde_json::Value = serde_json::from_str(e).unwrap();
        if let Some(t) = v["choices"]
            .get(0)
            .and_then(|c| c["delta"]["content"].as_str())
        {
            text.push_str(t);
        }
    }
    assert_eq!(text, "one two", "no duplicated text: {}", r.text());
}

#[tokio::test]
async fn attack_max_attempts_reached_mid_stream_is_one_error_event() {
    let mut cut = openai_sse(&["one", " two"], false);
    cut.push_str(PAUSE);
    cut.push_str(ERROR_EVENT);
    let (a, _) = sse_upstream(vec![cut]);
    let (b, seen_b) = sse_upstream(vec![openai_sse(&["one two three"], true)]);
    let (cfg, policy) = chain3(&oa(a, ""), &oa(b, ""), None, "max_attempts: 1");
    let gw = start_app(&cfg, &[("r.policy", &policy)]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    let events = r.events();
    assert_eq!(
        events.iter().filter(|e| e.contains("\"error\"")).count(),
        1,
        "{}",
        r.text()
    );
    assert_eq!(seen_b.lock().unwrap().len(), 0);
}

#[tokio::test]
async fn attack_stall_mid_stream_continues_on_the_next_endpoint() {
    let mut cut = openai_sse(&["one", " two"], false);
    cut.push_str(STALL);
    cut.push_str(&text_chunk(" LATE"));
    let (a, _) = sse_upstream(vec![cut]);
    let (b, _) = sse_upstream(vec![openai_sse(&["one two", " three"], true)]);
    let (cfg, policy) = chain3(&oa(a, ", timeouts: { idle_ms: 500 }"), &oa(b, ""), None, "");
    let gw = start_app(&cfg, &[("r.policy", &policy)]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(clean_text_once(&r), "one two three");
}

// Regression: when the only endpoint of a model is paused by its provider's Retry-After,
// the routing phase (strategies see a throttled endpoint as unavailable) rejects
// the request before dispatch with 503 `rejected_by_policy` "No endpoint is
// available for model." and no Retry-After header (`route.rs` `next_probe` only
// knows open circuits). Expected (dispatch.rs module doc, README): 429 with the
// remaining wait in Retry-After. Actual: 503 without Retry-After, so clients and
// SDKs retry at once or treat it as an outage.
#[tokio::test]
async fn attack_only_endpoint_throttled_is_429_with_retry_after_not_a_hang() {
    let (a, hits) = sequence_upstream(vec![
        (
            429,
            "retry-after: 20\r\n",
            r#"{"error":{"message":"slow down"}}"#,
        ),
        (200, "", COMPLETION),
    ]);
    let gw = start_app(
        &format!("providers:\n  p: {{ kind: openai-compatible, base_url: http://{a}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x }} ] }}\n"),
        &[],
    )
    .await;
    let t = std::time::Instant::now();
    let r1 = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    let r2 = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert!(t.elapsed() < Duration::from_secs(25), "{:?}", t.elapsed());
    assert_eq!(
        r2.status,
        429,
        "{} / {} / {:?}",
        r1.status,
        r2.text(),
        r2.headers
    );
    let ra: u64 = r2.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=20).contains(&ra), "{ra}");
    assert!(hits.load(std::sync::atomic::Ordering::SeqCst) <= 2);
}

#[tokio::test]
async fn attack_anthropic_shaped_context_error_moves_to_a_larger_window() {
    let (a, _) = sequence_upstream(vec![(
        400,
        "",
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 250000 tokens > 200000 maximum"}}"#,
    )]);
    let (b, _) = sequence_upstream(vec![(200, "", COMPLETION)]);
    let cfg = format!(
        "providers:\n  p: {{ kind: anthropic, base_url: http://{a} }}\n  q: {{ kind: openai-compatible, base_url: http://{b}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x, priority: 1, context_window: 100 }}, {{ provider: q, model: x, priority: 2, context_window: 100000 }} ] }}\n"
    );
    let policy = "route r when request.model == \"m\" {\n  default use endpoint \"p/x\"\n  fallback endpoint \"q/x\"\n}\n";
    let gw = start_app(&cfg, &[("r.policy", policy)]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "q/x");
}

/// Requests in flight over every endpoint of `/admin/endpoints`.
fn in_flight(eps: &serde_json::Value) -> u64 {
    eps["endpoints"]
        .as_array()
        .expect("an endpoints list")
        .iter()
        .map(|e| e["stats"]["in_flight"].as_u64().expect("a count"))
        .sum()
}

/// A client that reads the stream until `marker` appears, then drops the
/// connection.
async fn read_until_then_drop(addr: SocketAddr, body: &str, marker: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !String::from_utf8_lossy(&got).contains(marker) {
        let n = tokio::time::timeout_at(deadline, s.read(&mut buf))
            .await
            .expect("marker within 10 s")
            .unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    drop(s);
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn attack_client_gone_during_continuation_leaks_no_in_flight() {
    let mut cut = openai_sse(&["one", " two"], false);
    cut.push_str(PAUSE);
    cut.push_str(ERROR_EVENT);
    let (a, _) = sse_upstream(vec![cut]);
    // The continuation takes its time: the client leaves in the middle of it.
    let mut slow = openai_sse(&["one two"], false);
    for _ in 0..30 {
        slow.push_str(PAUSE);
        slow.push_str(&text_chunk(" more"));
    }
    slow.push_str(&finish_chunk("stop"));
    slow.push_str(DONE);
    let (b, _) = sse_upstream(vec![slow]);
    let (cfg, policy) = chain3(&oa(a, ""), &oa(b, ""), None, "");
    let gw = start_app(&cfg, &[("r.policy", &policy)]).await;
    let base = metric(
        &get(&gw.url("/metrics")).await.text(),
        "switchyard_in_flight_requests",
        &[],
    );
    let got = read_until_then_drop(gw.app.addr(), &chat("m", true, ""), "more").await;
    assert!(got.contains("one"), "{got}");
    let left = std::time::Instant::now();
    let mut settled = None;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = metric(
            &get(&gw.url("/metrics")).await.text(),
            "switchyard_in_flight_requests",
            &[],
        );
        if now <= base {
            settled = Some(left.elapsed());
            break;
        }
    }
    eprintln!("in-flight settled after {settled:?}");
    let m = get(&gw.url("/metrics")).await.text();
    let m = m.replace(
        &format!(
            "switchyard_in_flight_requests {}",
            metric(&m, "switchyard_in_flight_requests", &[])
        ),
        &format!(
            "switchyard_in_flight_requests {}",
            metric(&m, "switchyard_in_flight_requests", &[]) - base
        ),
    );
    let lines: Vec<&str> = m.lines().filter(|l| l.contains("in_flight")).collect();
    // (The gauge is process-wide: other tests of this binary move it, so it is
    // only printed; the per-endpoint count below is this gateway's own.)
    eprintln!("{lines:?}");
    // Regression: this looked for `"in_flight":1` in pretty-printed JSON
    // (`"in_flight": 1`), so it could not fail.
    let eps = get(&gw.url("/admin/endpoints")).await.json();
    assert_eq!(in_flight(&eps), 0, "{eps}");
}

#[tokio::test]
async fn attack_many_role_only_chunks_before_content_are_bounded() {
    // 2 MB of role-only chunks before content: the relay commits at 64 KiB held
    // and the client still gets one usable stream.
    let mut body = String::new();
    while body.len() < 2 * 1024 * 1024 {
        body.push_str(&role_chunk());
    }
    body.push_str(&text_chunk("hi"));
    body.push_str(&finish_chunk("stop"));
    body.push_str(DONE);
    let (a, _) = sse_upstream(vec![body]);
    let gw = start_app(
        &format!(
            "providers:\n  p: {}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x }} ] }}\n",
            oa(a, "")
        ),
        &[],
    )
    .await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200);
    assert!(r.text().ends_with("data: [DONE]\n\n"));
    assert!(r.text().contains("\"hi\""));
}

#[tokio::test]
async fn attack_gemini_restart_as_the_fallback_is_clean() {
    let mut cut = openai_sse(&["one", " two"], false);
    cut.push_str(PAUSE);
    cut.push_str(ERROR_EVENT);
    let (a, _) = sse_upstream(vec![cut]);
    let g = [
        r#"{"candidates":[{"content":{"parts":[{"text":"one t"}],"role":"model"},"index":0}],"responseId":"g1"}"#,
        r#"{"candidates":[{"content":{"parts":[{"text":"wo three"}],"role":"model"},"index":0}]}"#,
        r#"{"candidates":[{"content":{"parts":[{"text":"."}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":4,"totalTokenCount":7}}"#,
    ]
    .iter()
    .map(|d| format!("data: {d}\r\n\r\n"))
    .collect::<String>();
    let (b, _) = sse_upstream(vec![g]);
    let (cfg, policy) = chain3(
        &oa(a, ""),
        &format!("{{ kind: gemini, base_url: http://{b} }}"),
        None,
        "",
    );
    let gw = start_app(&cfg, &[("r.policy", &policy)]).await;
    let r = post(
        &gw.url("/v1/chat/completions"),
        &chat("m", true, r#","stream_options":{"include_usage":true}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(clean_text_once(&r), "one two three.");
}

#[tokio::test]
async fn attack_anthropic_restart_as_the_fallback_is_clean() {
    let mut cut = openai_sse(&["Hello", " wor"], false);
    cut.push_str(PAUSE);
    cut.push_str(ERROR_EVENT);
    let (a, _) = sse_upstream(vec![cut]);
    let anthropic = [
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude","stop_reason":null,"usage":{"input_tokens":5,"output_tokens":1}}}"#,
        r#"{"type":"ping"}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello w"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"orld."}}"#,
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
    let (b, _) = sse_upstream(vec![anthropic]);
    let (cfg, policy) = chain3(
        &oa(a, ""),
        &format!("{{ kind: anthropic, base_url: http://{b}, prefill: false }}"),
        None,
        "",
    );
    let gw = start_app(&cfg, &[("r.policy", &policy)]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(clean_text_once(&r), "Hello world.");
}

#[tokio::test]
async fn attack_n2_stream_cut_is_not_continued_and_ends_with_one_error() {
    let mut cut = openai_sse(&["one", " two"], false);
    cut.push_str(PAUSE);
    cut.push_str(ERROR_EVENT);
    let (r, seen_b) = over_two(cut, openai_sse(&["x"], true), r#","n":2"#).await;
    let events = r.events();
    one_error_event_last(&r, &events, "\"error\"");
    assert_eq!(seen_b.lock().unwrap().len(), 0);
}

/// A client that leaves while its stream waits between events is noticed at once,
/// not when the provider speaks again: the server runs HTTP/1 with hyper's
/// `half_close`, so its own end-of-stream read on a busy connection is off and the
/// response body watches the socket (`ClientWatch`). The provider here is silent for
/// 15 s after the first event; the endpoint must have nothing in flight long before.
#[tokio::test]
async fn attack_client_gone_while_a_stream_waits_between_events_is_noticed_at_once() {
    let mut script = openai_sse(&["one"], false);
    for _ in 0..5 {
        script.push_str(STALL);
    }
    script.push_str(&text_chunk(" late"));
    script.push_str(&finish_chunk("stop"));
    script.push_str(DONE);
    let (a, _) = sse_upstream(vec![script]);
    let cfg = format!(
        "providers:\n  p: {}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x }} ] }}\n",
        oa(a, "")
    );
    let gw = start_app(&cfg, &[]).await;
    let got = read_until_then_drop(gw.app.addr(), &chat("m", true, ""), "one").await;
    assert!(got.contains("one"), "{got}");
    let left = std::time::Instant::now();
    loop {
        let eps = get(&gw.url("/admin/endpoints")).await.json();
        if in_flight(&eps) == 0 {
            break;
        }
        assert!(
            left.elapsed() < Duration::from_secs(5),
            "still in flight 5 s after the client left (the provider is silent for 15 s): {eps}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
