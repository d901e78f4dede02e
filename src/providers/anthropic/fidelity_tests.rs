//! Golden tests for issue 13 (provider fidelity), built from the wire format the
//! Anthropic API reference documents ("Messages", "Streaming Messages", "Extended
//! thinking", "Prompt caching", "Vision", "Errors") and from the recorded answers in
//! `tests/fixtures/provider-wire/anthropic/`.

use serde_json::{json, Value};

use super::*;
use crate::providers::testing::{self, assert_well_formed, fixture, replay, Replay};

fn chat(body: Value) -> ChatRequest {
    testing::chat(&body)
}

fn target() -> Target<'static> {
    Target {
        base_url: "https://api.anthropic.com/v1",
        model: "claude-sonnet-4-5",
        api_key: Some("sk-ant"),
    }
}

/// The Anthropic body built for `req`.
fn body(req: Value) -> Value {
    testing::build(&Anthropic, &target(), &chat(req)).1
}

/// The 400 for `req`, checked to name `param`.
fn refused(req: Value, param: &str) -> GatewayError {
    let e = Anthropic.request(&target(), &chat(req)).unwrap_err();
    assert_eq!(e.status(), 400, "{}", e.message);
    assert_eq!(e.param.as_deref(), Some(param), "{}", e.message);
    assert_eq!(e.to_json()["error"]["param"], param);
    e
}

fn ctx(include_usage: bool) -> StreamContext {
    StreamContext {
        logical_model: "claude".into(),
        include_usage,
        prompt_tokens_estimate: 3,
        track: true,
        resume: None,
    }
}

fn stream(lines: &str) -> Replay {
    let r = replay(Anthropic.stream(ctx(true)), lines, true);
    assert!(r.result.is_ok(), "{:?}", r.result);
    assert!(r.done);
    assert_well_formed(&r, "claude");
    r
}

fn respond(body: &Value) -> Value {
    let out = Anthropic
        .response(body.to_string().as_bytes(), "claude")
        .unwrap();
    serde_json::from_slice(&out).unwrap()
}

// ---- 1. usage -------------------------------------------------------------------

#[test]
fn a_zero_or_absent_input_count_in_message_delta_keeps_the_message_start_count() {
    for delta_usage in [
        json!({"input_tokens": 0, "output_tokens": 15}),
        json!({"output_tokens": 15}),
    ] {
        let lines = [
            json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}),
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}),
            json!({"type":"content_block_stop","index":0}),
            json!({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage": delta_usage}),
            json!({"type":"message_stop"}),
        ]
        .map(|l| l.to_string())
        .join("\n");
        let r = stream(&lines);
        assert_eq!(
            r.usage_chunks()[0]["usage"],
            json!({"prompt_tokens": 25, "completion_tokens": 15, "total_tokens": 40})
        );
    }
}

#[test]
fn a_later_real_input_count_still_wins() {
    // Recorded: message_start says 43, the final message_delta 61.
    let r = stream(&fixture(
        "anthropic/anthropic-message-delta-input-tokens.chunks.txt",
    ));
    assert_eq!(r.usage_chunks()[0]["usage"]["prompt_tokens"], 61);
}

#[test]
fn cache_reads_and_writes_are_in_prompt_tokens_and_its_details() {
    let usage = json!({"input_tokens": 10, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 100,
                       "cache_creation": {"ephemeral_5m_input_tokens": 20, "ephemeral_1h_input_tokens": 0},
                       "output_tokens": 7, "service_tier": "standard"});
    let expected = json!({"prompt_tokens": 130, "completion_tokens": 7, "total_tokens": 137,
                          "prompt_tokens_details": {"cached_tokens": 100, "cache_creation_tokens": 20}});
    let v = respond(
        &json!({"id": "msg_c", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "usage": usage}),
    );
    assert_eq!(v["usage"], expected);

    // Streamed: counts in message_start, and message_delta repeating the cache counts
    // as zero (as proxies do) must not erase them.
    let lines = [
        json!({"type":"message_start","message":{"id":"msg_s","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":10,"cache_creation_input_tokens":20,"cache_read_input_tokens":100,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":7}}),
        json!({"type":"message_stop"}),
    ]
    .map(|l| l.to_string())
    .join("\n");
    assert_eq!(stream(&lines).usage_chunks()[0]["usage"], expected);
}

// ---- 2. empty content -----------------------------------------------------------

#[test]
fn blank_text_blocks_are_dropped_and_a_message_left_empty_is_left_out() {
    let b = body(json!({"model": "m", "messages": [
        {"role": "system", "content": [{"type": "text", "text": "  "}, {"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "\n\t "}]},
        {"role": "assistant", "content": " \n", "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "  "},
        {"role": "assistant", "content": [{"type": "text", "text": ""}]},
        {"role": "user", "content": "   "},
        {"role": "user", "content": "Next"},
        {"role": "assistant", "content": "Sure \n"}
    ]}));
    assert_eq!(b["system"], json!([{"type": "text", "text": "Be brief."}]));
    assert_eq!(
        b["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1"},
                {"type": "text", "text": "Next"}
            ]},
            // The final assistant turn is a prefill: trailing whitespace trimmed.
            {"role": "assistant", "content": [{"type": "text", "text": "Sure"}]}
        ])
    );
    let e = refused(
        json!({"model": "m", "messages": [{"role": "user", "content": " "}, {"role": "assistant", "content": "\n"}]}),
        "messages",
    );
    assert!(e.message.contains("whitespace"), "{}", e.message);
}

// ---- 3. images ------------------------------------------------------------------

#[test]
fn image_media_types_are_normalised_and_urls_become_url_sources() {
    let b = body(
        json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/jpg;base64,/9j/4A=="}},
            {"type": "image_url", "image_url": {"url": "data:IMAGE/PNG;base64,iVBO"}},
            {"type": "image_url", "image_url": {"url": "data:image/WebP;charset=x;base64,UklG"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.gif", "detail": "low"}}
        ]}]}),
    );
    assert_eq!(
        b["messages"][0]["content"],
        json!([
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4A=="}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/webp", "data": "UklG"}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.gif"}}
        ])
    );
}

#[test]
fn an_image_type_anthropic_cannot_take_is_400_naming_the_part() {
    let e = refused(
        json!({"model": "m", "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "a"},
            {"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/bmp;base64,Qk0="}}
            ]}
        ]}),
        "messages[2].content[1].image_url",
    );
    assert!(e.message.contains("image/bmp"), "{}", e.message);
    assert_eq!(e.to_json()["error"]["type"], "invalid_request_error");
    refused(
        json!({"model": "m", "messages": [{"role": "assistant", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
        ]}]}),
        "messages[0].content[0]",
    );
}

// ---- 4. prompt caching ----------------------------------------------------------

#[test]
fn cache_markers_are_kept_on_system_user_tool_result_and_tool_blocks() {
    let eph = json!({"type": "ephemeral"});
    let hour = json!({"type": "ephemeral", "ttl": "1h"});
    let b = body(json!({"model": "m",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Long manual", "cache_control": hour}]},
            {"role": "user", "content": [
                {"type": "text", "text": "Doc", "cache_control": eph},
                {"type": "text", "text": "Question"}
            ]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "t1", "content": [{"type": "text", "text": "result", "cache_control": {"type": "ephemeral", "ttl": "5m"}}]}
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}, "cache_control": eph}]
    }));
    assert_eq!(
        b["system"],
        json!([{"type": "text", "text": "Long manual", "cache_control": hour}])
    );
    assert_eq!(
        b["messages"][0]["content"],
        json!([{"type": "text", "text": "Doc", "cache_control": eph}, {"type": "text", "text": "Question"}])
    );
    assert_eq!(
        b["messages"][2]["content"],
        json!([{"type": "tool_result", "tool_use_id": "t1",
                "content": [{"type": "text", "text": "result"}],
                "cache_control": {"type": "ephemeral", "ttl": "5m"}}])
    );
    assert_eq!(
        b["tools"],
        json!([{"name": "f", "input_schema": {"type": "object"}, "cache_control": eph}])
    );
    // Found by the translation attack of 2026-12-07: a marker inside the tool's
    // `function` (where Bedrock's adapter reads it too) was silently dropped.
    let b = body(
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "cache_control": eph}}]}),
    );
    assert_eq!(b["tools"][0]["cache_control"], eph, "{b}");

    // A marker on the message itself marks its last block.
    let b = body(json!({"model": "m", "messages": [
        {"role": "system", "content": "Manual", "cache_control": eph},
        {"role": "user", "content": "Hi", "cache_control": eph}
    ]}));
    assert_eq!(
        b["system"],
        json!([{"type": "text", "text": "Manual", "cache_control": eph}])
    );
    assert_eq!(b["messages"][0]["content"][0]["cache_control"], eph);
}

#[test]
fn bad_cache_markers_and_a_fifth_one_are_400() {
    refused(
        json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "x", "cache_control": {"type": "persistent"}}]}]}),
        "messages[0].content[0].cache_control",
    );
    refused(
        json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "2h"}}]}]}),
        "messages[0].content[0].cache_control",
    );
    let part = json!({"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}});
    refused(
        json!({"model": "m", "messages": [{"role": "user", "content": [part, part, part, part, part]}]}),
        "messages[0].content[4].cache_control",
    );
}

// ---- 5. reasoning ---------------------------------------------------------------

#[test]
fn thinking_passes_through_and_reasoning_effort_becomes_a_budget() {
    let hi = json!([{"role": "user", "content": "hi"}]);
    let b = body(json!({"model": "m", "messages": hi, "max_tokens": 16000,
        "thinking": {"type": "enabled", "budget_tokens": 10000}}));
    assert_eq!(
        b["thinking"],
        json!({"type": "enabled", "budget_tokens": 10000})
    );
    assert_eq!(b["max_tokens"], 16000);

    for (effort, budget) in [
        ("minimal", 1024),
        ("low", 2048),
        ("medium", 8192),
        ("high", 16384),
    ] {
        let b = body(json!({"model": "m", "messages": hi, "reasoning_effort": effort}));
        assert_eq!(
            b["thinking"],
            json!({"type": "enabled", "budget_tokens": budget})
        );
        // No client cap: the budget plus the default answer room.
        assert_eq!(b["max_tokens"], budget + DEFAULT_MAX_TOKENS);
    }
    let b = body(json!({"model": "m", "messages": hi, "reasoning_effort": "none"}));
    assert!(b.get("thinking").is_none());
    assert_eq!(b["max_tokens"], DEFAULT_MAX_TOKENS);
    // An explicit `thinking` wins over `reasoning_effort`.
    let b = body(
        json!({"model": "m", "messages": hi, "reasoning_effort": "high", "thinking": {"type": "disabled"}}),
    );
    assert_eq!(b["thinking"], json!({"type": "disabled"}));
}

/// Found by the translation attack of 2026-12-07: a tool loop asked with
/// `reasoning_effort` failed on its second turn, as an OpenAI client replays the
/// assistant's tool calls without `thinking_blocks` and Claude refuses that turn with
/// thinking on. Without the blocks the request runs without thinking; with them
/// (a client that keeps Switchyard's extension), with it.
#[test]
fn reasoning_effort_with_a_replayed_tool_turn_lacking_its_thinking_was_refused() {
    let turn = |blocks: Option<Value>| {
        let mut assistant = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "get", "arguments": "{}"}}]});
        if let Some(b) = blocks {
            assistant["thinking_blocks"] = b;
        }
        json!({"model": "m", "reasoning_effort": "low", "tools": [{"type": "function", "function": {"name": "get"}}],
            "messages": [{"role": "user", "content": "weather?"}, assistant,
                {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"}]})
    };
    let b = body(turn(None));
    assert!(b.get("thinking").is_none(), "{b}");
    assert_eq!(b["max_tokens"], DEFAULT_MAX_TOKENS);
    let b = body(turn(Some(
        json!([{"type": "thinking", "thinking": "t", "signature": "s"}]),
    )));
    assert_eq!(
        b["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert_eq!(b["messages"][1]["content"][0]["type"], "thinking", "{b}");
    // The client's own `thinking` is its choice, kept as sent.
    let mut t = turn(None);
    t["thinking"] = json!({"type": "enabled", "budget_tokens": 2000});
    t["max_tokens"] = json!(5000);
    assert_eq!(body(t)["thinking"]["type"], "enabled");
}

#[test]
fn an_output_cap_not_above_the_thinking_budget_is_400_naming_it() {
    let hi = json!([{"role": "user", "content": "hi"}]);
    let e = refused(
        json!({"model": "m", "messages": hi, "max_completion_tokens": 2048, "reasoning_effort": "low"}),
        "max_completion_tokens",
    );
    assert!(e.message.contains("2048"), "{}", e.message);
    refused(
        json!({"model": "m", "messages": hi, "max_tokens": 500, "thinking": {"type": "enabled", "budget_tokens": 1024}}),
        "max_tokens",
    );
    refused(
        json!({"model": "m", "messages": hi, "thinking": {"type": "enabled", "budget_tokens": 512}}),
        "thinking.budget_tokens",
    );
    refused(
        json!({"model": "m", "messages": hi, "thinking": {"budget_tokens": 2000}}),
        "thinking.type",
    );
    refused(
        json!({"model": "m", "messages": hi, "reasoning_effort": "extreme"}),
        "reasoning_effort",
    );
}

/// An answer with interleaved thinking and a tool call, in the documented shape
/// ("Extended thinking", thinking with tool use).
fn thinking_answer() -> Value {
    json!({
        "id": "msg_01Think", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [
            {"type": "thinking", "thinking": "The user wants the weather in Paris.\nI should call the tool.",
             "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/op91XW=="},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"},
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_01A", "name": "weather", "input": {"city": "Paris"}}
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 50, "output_tokens": 80}
    })
}

#[test]
fn thinking_blocks_reach_the_client_and_replay_byte_exact() {
    let answer = thinking_answer();
    let v = respond(&answer);
    let m = &v["choices"][0]["message"];
    assert_eq!(
        m["reasoning_content"],
        "The user wants the weather in Paris.\nI should call the tool."
    );
    assert_eq!(
        m["thinking_blocks"],
        json!([answer["content"][0], answer["content"][1]])
    );
    assert_eq!(m["content"], "Let me check.");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");

    // The client sends the message back with the tool result (and an image).
    let mut replayed = m.clone();
    replayed.as_object_mut().unwrap().remove("refusal");
    let b = body(json!({"model": "m", "max_tokens": 4000,
        "thinking": {"type": "enabled", "budget_tokens": 2000},
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Weather in Paris? Here is the sky:", "cache_control": {"type": "ephemeral"}},
                {"type": "image_url", "image_url": {"url": "data:image/jpg;base64,/9j/4A=="}}
            ]},
            replayed,
            {"role": "tool", "tool_call_id": "toolu_01A", "content": "{\"temp\":21}"}
        ],
        "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    }));
    assert_eq!(
        b["messages"],
        json!([
            {"role": "user", "content": [
                {"type": "text", "text": "Weather in Paris? Here is the sky:", "cache_control": {"type": "ephemeral"}},
                {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4A=="}}
            ]},
            // Exactly the blocks Anthropic sent, thinking first.
            {"role": "assistant", "content": answer["content"]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A", "content": [{"type": "text", "text": "{\"temp\":21}"}]}
            ]}
        ])
    );
    assert_eq!(
        b["thinking"],
        json!({"type": "enabled", "budget_tokens": 2000})
    );
    // Byte-exact: the signature's bytes are the same after the round trip.
    let raw = serde_json::to_string(&b).unwrap();
    assert!(raw.contains(
        r#""signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/op91XW==""#
    ));
}

/// The documented thinking stream ("Streaming Messages", extended thinking), with a
/// redacted block added.
const THINKING_STREAM: &str = r#"{"type":"message_start","message":{"id":"msg_01T","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":30,"output_tokens":1}}}
{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}
{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me solve this step by step:\n\n1. First break down 27 * 453"}}
{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"\n2. 453 = 400 + 50 + 3"}}
{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}
{"type":"content_block_stop","index":0}
{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix"}}
{"type":"content_block_stop","index":1}
{"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}
{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"27 * 453 = 12,231"}}
{"type":"content_block_stop","index":2}
{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":100}}
{"type":"message_stop"}"#;

#[test]
fn a_thinking_stream_gives_reasoning_deltas_and_whole_signed_blocks() {
    let r = stream(THINKING_STREAM);
    let reasoning: String = r
        .chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
        .collect();
    assert_eq!(
        reasoning,
        "Let me solve this step by step:\n\n1. First break down 27 * 453\n2. 453 = 400 + 50 + 3"
    );
    let blocks: Vec<Value> = r
        .chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["thinking_blocks"].as_array())
        .flatten()
        .cloned()
        .collect();
    assert_eq!(
        blocks,
        [
            json!({"type": "thinking", "thinking": reasoning, "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}),
            json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"})
        ]
    );
    assert_eq!(r.text(), "27 * 453 = 12,231");
    assert!(r.content);
    assert_eq!(r.finish_reasons(), ["stop"]);
    assert_eq!(
        r.usage_chunks()[0]["usage"],
        json!({"prompt_tokens": 30, "completion_tokens": 100, "total_tokens": 130})
    );
    // Reasoning is not assistant text: a continuation must not prefill it, and a
    // stream that sent some is not continued.
    let t = {
        let mut t = Anthropic.stream(ctx(false));
        let mut out = bytes::BytesMut::new();
        let mut parser = crate::sse::SseParser::new();
        for line in THINKING_STREAM.lines().take(3) {
            parser.push(format!("data: {line}\n\n").as_bytes()).unwrap();
        }
        while let Some(ev) = parser.next_ref() {
            t.event(ev, &mut out).unwrap();
        }
        t
    };
    assert!(t.produced_content());
    assert!(t.sent().reasoning);
    assert!(t.sent().text.is_empty());

    // The streamed blocks replay as they came, first in the assistant turn.
    let b = body(json!({"model": "m", "messages": [
        {"role": "user", "content": "27 * 453?"},
        {"role": "assistant", "content": r.text(), "reasoning_content": reasoning, "thinking_blocks": blocks},
        {"role": "user", "content": "And 28 * 453?"}
    ]}));
    assert_eq!(
        b["messages"][1]["content"],
        json!([blocks[0], blocks[1], {"type": "text", "text": "27 * 453 = 12,231"}])
    );
}

#[test]
fn a_thinking_delta_outside_a_thinking_block_is_502() {
    let lines = r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":1}}}
{"type":"content_block_delta","index":3,"delta":{"type":"signature_delta","signature":"x"}}"#;
    let r = replay(Anthropic.stream(ctx(false)), lines, true);
    assert_eq!(r.result.unwrap_err().status(), 502);
}

// ---- 6. errors ------------------------------------------------------------------

#[test]
fn a_client_error_keeps_anthropics_type_and_message() {
    let h = HeaderMap::new();
    let e = Anthropic.error(
        400,
        &h,
        br#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0.text: text content blocks must contain non-whitespace text"}}"#,
    );
    assert_eq!(e.status(), 400);
    let j = e.to_json();
    assert_eq!(j["error"]["type"], "invalid_request_error");
    assert_eq!(j["error"]["code"], "invalid_request_error");
    assert!(j["error"]["message"]
        .as_str()
        .unwrap()
        .contains("must contain non-whitespace text"));

    let e = Anthropic.error(
        400,
        &h,
        br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
    );
    assert_eq!(e.to_json()["error"]["code"], "context_length_exceeded");

    let e = Anthropic.error(
        413,
        &h,
        br#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}"#,
    );
    // The provider's status, unchanged (README, "Failover and error classification").
    assert_eq!(e.status(), 413);
    assert_eq!(e.to_json()["error"]["code"], "request_too_large");
}

#[test]
fn server_error_bodies_are_never_relayed() {
    let h = HeaderMap::new();
    let traceback = b"Traceback (most recent call last):\n  File \"/srv/app.py\", line 12, in handler\nKeyError: 'secret_key'";
    let e = Anthropic.error(500, &h, traceback);
    assert_eq!(e.status(), 502);
    assert!(e.retry.same_endpoint());
    assert!(
        !e.message.contains("Traceback") && !e.message.contains("secret"),
        "{}",
        e.message
    );
    assert_eq!(e.message, "Anthropic answered an error (HTTP 500)");

    let e = Anthropic.error(
        500,
        &h,
        br#"{"type":"error","error":{"type":"api_error","message":"Internal error at /srv/x.py line 3"}}"#,
    );
    assert_eq!(
        e.message,
        "Anthropic answered an error (HTTP 500, api_error)"
    );

    let e = Anthropic.error(
        529,
        &h,
        br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    );
    assert_eq!(e.status(), 502);
    assert!(e.retry.same_endpoint());
    assert_eq!(e.to_json()["error"]["code"], "upstream_overloaded");

    // Mid-stream overload: retryable code too.
    let r = replay(
        Anthropic.stream(ctx(false)),
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        true,
    );
    assert_eq!(
        r.result.unwrap_err().code,
        Some(crate::error::Code::UpstreamOverloaded)
    );
}

// ---- fields Anthropic cannot honour ----------------------------------------------

#[test]
fn fields_anthropic_cannot_honour_are_400_and_others_dropped() {
    let hi = json!([{"role": "user", "content": "hi"}]);
    refused(
        json!({"model": "m", "messages": hi, "temperature": 1.5}),
        "temperature",
    );
    refused(
        json!({"model": "m", "messages": hi, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}}),
        "response_format",
    );
    refused(
        json!({"model": "m", "messages": hi, "logprobs": true}),
        "logprobs",
    );
    refused(
        json!({"model": "m", "messages": hi, "modalities": ["text", "audio"]}),
        "modalities",
    );
    refused(
        json!({"model": "m", "messages": hi, "functions": [{"name": "f"}]}),
        "functions",
    );
    let b = body(
        json!({"model": "m", "messages": hi, "seed": 3, "presence_penalty": 0.5,
        "response_format": {"type": "text"}, "top_k": 5, "logprobs": false}),
    );
    assert_eq!(b["top_k"], 5);
    for dropped in ["seed", "presence_penalty", "response_format", "logprobs"] {
        assert!(b.get(dropped).is_none(), "{dropped}");
    }
}

#[test]
fn tool_results_take_images_and_bare_reasoning_text_is_not_replayed() {
    let b = body(json!({"model": "m", "messages": [
        {"role": "user", "content": "Screenshot?"},
        {"role": "assistant", "content": null, "reasoning_content": "I will call it.",
         "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "shot", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t1", "content": [
            {"type": "text", "text": "here"},
            {"type": "image_url", "image_url": {"url": "data:image/PNG;base64,iVBO"}}
        ]}
    ]}));
    assert_eq!(
        b["messages"][1]["content"],
        json!([{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}])
    );
    assert_eq!(
        b["messages"][2]["content"],
        json!([{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "text", "text": "here"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}
        ]}])
    );
}

/// Anthropic answers any `tool_choice` on a request without `tools` with a 400
/// ("tool_choice may only be specified while providing tools"); OpenAI SDKs send
/// `parallel_tool_calls: false` or `tool_choice: "none"` on calls without tools.
#[test]
fn tool_choice_without_tools_is_not_sent_to_anthropic() {
    let hi = json!([{"role": "user", "content": "hi"}]);
    for extra in [
        json!({"parallel_tool_calls": false}),
        json!({"tool_choice": "none"}),
        json!({"tool_choice": "none", "parallel_tool_calls": false}),
        json!({"tool_choice": "auto", "tools": []}),
    ] {
        let mut req = json!({"model": "m", "messages": hi});
        req.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let b = body(req);
        assert!(b.get("tool_choice").is_none(), "{extra}: {b}");
        assert!(b.get("tools").is_none(), "{extra}: {b}");
    }
    // With tools, `parallel_tool_calls: false` still rides on an auto choice.
    let b = body(
        json!({"model": "m", "messages": hi, "parallel_tool_calls": false,
        "tools": [{"type": "function", "function": {"name": "f"}}]}),
    );
    assert_eq!(
        b["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
}

/// Anthropic refuses a `tool_use.id` outside `^[a-zA-Z0-9_-]+$` ("String should
/// match pattern"); ids of conversations begun elsewhere are rewritten, the call and
/// its result the same way.
#[test]
fn tool_call_ids_outside_anthropics_pattern_are_rewritten_in_call_and_result() {
    let b = body(json!({"model": "m", "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "functions.get_weather:0", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
            {"id": "call_ok-1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        ]},
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_ok-1", "content": "rainy"}
    ], "tools": [{"type": "function", "function": {"name": "get_weather"}}]}));
    let calls = &b["messages"][1]["content"];
    let results = &b["messages"][2]["content"];
    let id = calls[0]["id"].as_str().unwrap();
    assert!(crate::providers::common::is_tool_use_id(id), "{id}");
    assert_eq!(results[0]["tool_use_id"], id);
    assert_eq!(calls[1]["id"], "call_ok-1");
    assert_eq!(results[1]["tool_use_id"], "call_ok-1");
}

/// Anthropic refuses whitespace-only stop sequences ("stop_sequences: each stop
/// sequence must contain non-whitespace", LiteLLM issue 3286 for `stop: ["\n"]`):
/// they are left out, the others kept.
#[test]
fn whitespace_only_stop_sequences_are_not_sent_to_anthropic() {
    let hi = json!([{"role": "user", "content": "hi"}]);
    let b = body(json!({"model": "m", "messages": hi, "stop": ["\n", "END", " \t", "\n\nHuman:"]}));
    assert_eq!(b["stop_sequences"], json!(["END", "\n\nHuman:"]));
    let b = body(json!({"model": "m", "messages": hi, "stop": "\n"}));
    assert!(b.get("stop_sequences").is_none(), "{b}");
    let b = body(json!({"model": "m", "messages": hi, "stop": "###"}));
    assert_eq!(b["stop_sequences"], json!(["###"]));
}

/// Anthropic API reference, Messages: `tools[].input_schema.type` is "object" and
/// required; OpenAI takes `parameters` without `type` (`{}`, only `properties`) and
/// `null` (no parameters).
#[test]
fn tool_parameters_without_type_or_null_become_an_object_input_schema() {
    for (params, expected) in [
        (json!(null), json!({"type": "object", "properties": {}})),
        (json!({}), json!({"type": "object"})),
        (
            json!({"properties": {"a": {"type": "string"}}}),
            json!({"type": "object", "properties": {"a": {"type": "string"}}}),
        ),
        (
            json!({"type": "object", "properties": {}, "required": []}),
            json!({"type": "object", "properties": {}, "required": []}),
        ),
    ] {
        let b = body(
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": params}}]}),
        );
        assert_eq!(b["tools"][0]["input_schema"], expected, "{params}");
    }
}

/// OpenAI's `safety_identifier` ("A stable identifier used to help detect users of
/// your application that may be violating OpenAI's usage policies", replacing the
/// deprecated `user`) is what Anthropic's `metadata.user_id` is for ("Anthropic may
/// use this id to help detect abuse"); it was dropped.
#[test]
fn safety_identifier_becomes_metadata_user_id_before_user() {
    let hi = json!([{"role": "user", "content": "hi"}]);
    let b = body(json!({"model": "m", "messages": hi, "safety_identifier": "hash-1"}));
    assert_eq!(b["metadata"], json!({"user_id": "hash-1"}));
    let b = body(json!({"model": "m", "messages": hi, "safety_identifier": "hash-1", "user": "u"}));
    assert_eq!(b["metadata"], json!({"user_id": "hash-1"}));
    let b = body(json!({"model": "m", "messages": hi, "user": "u"}));
    assert_eq!(b["metadata"], json!({"user_id": "u"}));
}
