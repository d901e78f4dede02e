//! Request validation and token count benchmark (issue 15): the normalize phase's
//! field checks (`api::validate::check`, with the tool-schema cache warm, as for a
//! client that sends the same tools every turn) plus the input-token count
//! (`limits::tokens::TokenCounter`, OpenAI's `o200k_base` for `gpt-4o`) of a
//! 20-message, 10-tool request. Target: at most 50 µs together.
//!
//! `cargo bench --bench validate` (release profile).

use std::hint::black_box;

use criterion::Criterion;
use serde_json::json;

use switchyard::api::ChatRequest;
use switchyard::config::parse_str;
use switchyard::limits::tokens::TokenCounter;
use switchyard::routing::Registry;

const CONFIG: &str = "providers: { p: { kind: mock } }\nmodels: { gpt-4o: { endpoints: [ { provider: p, model: gpt-4o, context_window: 128000 } ] } }\n";

/// 20 messages (system, then user / assistant with a tool call / tool result turns)
/// and 10 tools, each with a nested schema using `$defs` and `$ref`.
fn request() -> Vec<u8> {
    let tools: Vec<_> = (0..10)
        .map(|i| {
            json!({"type": "function", "function": {
                "name": format!("tool_{i}"),
                "description": "Looks something up in the catalogue by id and returns its record.",
                "parameters": {
                    "type": "object",
                    "$defs": {"filter": {"type": "object", "properties": {
                        "field": {"type": "string"}, "value": {"type": ["string", "number"]},
                        "and": {"type": "array", "items": {"$ref": "#/$defs/filter"}}
                    }, "required": ["field"]}},
                    "properties": {
                        "id": {"type": "string", "description": "The record id."},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                        "filter": {"$ref": "#/$defs/filter"},
                        "variant": {"enum": ["a", "b", format!("c{i}")]}
                    },
                    "required": ["id"],
                    "additionalProperties": false
                }
            }})
        })
        .collect();
    let mut messages = vec![
        json!({"role": "system", "content": "You are a concise assistant for the catalogue team. Answer with facts from tool results only."}),
    ];
    let mut turn = 0;
    while messages.len() < 20 {
        let id = format!("call_{turn}");
        messages.push(json!({"role": "user", "content": format!("Please find record number {turn} and tell me its price and the date it was last updated.")}));
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": format!("tool_{}", turn % 10), "arguments": format!("{{\"id\":\"r{turn}\",\"limit\":1}}")}}
        ]}));
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": format!("{{\"id\":\"r{turn}\",\"price\":\"19.99\",\"updated\":\"2026-11-0{}\"}}", turn % 9 + 1)}));
        turn += 1;
    }
    messages.truncate(19);
    messages.push(json!({"role": "user", "content": [{"type": "text", "text": "Thanks. Summarise all of them in one table."}]}));
    serde_json::to_vec(&json!({
        "model": "gpt-4o", "messages": messages, "tools": tools, "tool_choice": "auto",
        "temperature": 0.2, "top_p": 0.9, "max_completion_tokens": 512, "stop": ["END"], "seed": 7
    }))
    .unwrap()
}

fn main() {
    let config = parse_str(CONFIG, None).expect("valid config");
    let registry = Registry::from_config(&config, |_| Some(0));
    let counter = TokenCounter::new(&registry, false);
    let body = request();
    let chat = ChatRequest::parse(&body).expect("a valid request");
    assert_eq!(chat.messages.len(), 20);
    assert_eq!(chat.tools.as_ref().map(Vec::len), Some(10));
    switchyard::api::validate::check(&chat).expect("passes validation");
    counter.count(&chat); // loads the vocabulary
    let mut c = Criterion::default().configure_from_args();
    c.bench_function("validate+tokens/20_messages_10_tools", |b| {
        b.iter(|| {
            switchyard::api::validate::check(black_box(&chat)).unwrap();
            black_box(counter.count(black_box(&chat)))
        })
    });
    c.bench_function("validate/20_messages_10_tools", |b| {
        b.iter(|| switchyard::api::validate::check(black_box(&chat)).unwrap())
    });
    c.bench_function("tokens/20_messages", |b| {
        b.iter(|| black_box(counter.count(black_box(&chat))))
    });
    c.bench_function("schema/uncached_one_tool", |b| {
        let schema = &chat.tools.as_ref().unwrap()[0]["function"]["parameters"];
        b.iter(|| {
            black_box(switchyard::api::validate::schema::check_uncached(
                black_box(schema),
            ))
        })
    });
    c.final_summary();
}
