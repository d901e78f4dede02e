//! From an HTTP request to the features a policy sees ([`RequestFeatures`]).
//!
//! The same mapping serves live traffic and `switchyard dry-run`, so a dry run decides
//! exactly as the gateway would.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use serde_json::Value;

use crate::api::ChatRequest;
use crate::policy::RequestFeatures;

/// Headers never shown to policies (credentials).
const SECRET_HEADERS: [&str; 5] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "api-key",
];

/// Most headers copied into the features; more are ignored.
pub const MAX_HEADERS: usize = 64;

/// How much prompt text the task classifier reads, in bytes.
const CLASSIFY_BYTES: usize = 64 * 1024;

/// Words that mark a prompt as code (the classifier's second test).
const CODE_MARKERS: [&str; 12] = [
    "```",
    "def ",
    "fn ",
    "function ",
    "class ",
    "import ",
    "#include",
    "SELECT ",
    "public static",
    "console.log",
    "=> {",
    "};",
];

/// Builds the features of `chat` with request `headers`, at time `now`.
///
/// Header names are lowercased; credentials are left out. Metadata is the request's
/// OpenAI `metadata` object (string values; others as JSON text). API key id and
/// organization stay empty until the auth layer fills them.
pub fn request_features(
    chat: &ChatRequest,
    headers: &HeaderMap,
    now: SystemTime,
) -> RequestFeatures {
    let mut hdrs = BTreeMap::new();
    for (name, value) in headers {
        if hdrs.len() >= MAX_HEADERS {
            break;
        }
        let name = name.as_str();
        if SECRET_HEADERS.contains(&name) {
            continue;
        }
        if let Ok(v) = value.to_str() {
            hdrs.insert(name.to_string(), v.to_string());
        }
    }
    let metadata: BTreeMap<String, String> = match chat.extra.get("metadata") {
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), v)
            })
            .collect(),
        _ => BTreeMap::new(),
    };
    let secs = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = secs / 86_400;
    let task = classify_task(chat, metadata.get("task").map(String::as_str));
    RequestFeatures {
        model: chat.model.clone(),
        input_tokens: chat.estimated_input_tokens(),
        max_tokens: chat.output_cap(),
        temperature: chat.temperature,
        stream: chat.is_stream(),
        tools: chat.tools.as_ref().is_some_and(|t| !t.is_empty()),
        messages: chat.messages.len() as u64,
        headers: hdrs,
        metadata,
        api_key: None,
        org: None,
        priority: Default::default(),
        hour: ((secs % 86_400) / 3_600) as u8,
        // 1970-01-01 was a Thursday (ISO weekday 4).
        weekday: ((days + 3) % 7 + 1) as u8,
        task: task.to_string(),
    }
}

/// The task category for quality routing: `tool_use` when tools are present, `code`
/// when the user's text has a code fence or a code keyword, else `chat`; a `task`
/// metadata value of one of those three wins.
pub fn classify_task(chat: &ChatRequest, metadata_task: Option<&str>) -> &'static str {
    match metadata_task {
        Some("chat") => return "chat",
        Some("code") => return "code",
        Some("tool_use") => return "tool_use",
        _ => {}
    }
    if chat.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        return "tool_use";
    }
    let mut read = 0;
    for m in chat.messages.iter().filter(|m| m.role == "user") {
        let text = match &m.content {
            Value::String(s) => s.as_str(),
            _ => continue,
        };
        let end = text.len().min(CLASSIFY_BYTES.saturating_sub(read));
        let text = text.get(..end).unwrap_or(text);
        if CODE_MARKERS.iter().any(|k| text.contains(k)) {
            return "code";
        }
        read += end;
        if read >= CLASSIFY_BYTES {
            break;
        }
    }
    "chat"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: &str) -> ChatRequest {
        ChatRequest::parse(body.as_bytes()).unwrap()
    }

    #[test]
    fn features_from_a_request() {
        let c = chat(
            r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hello there"}],"max_tokens":9,"temperature":0,"stream":true,"metadata":{"team":"search","n":3}}"#,
        );
        let mut h = HeaderMap::new();
        h.insert("X-Team", "search".parse().unwrap());
        h.insert("authorization", "Bearer secret".parse().unwrap());
        // 2026-11-29 is a Sunday; 14:20 UTC.
        let now = UNIX_EPOCH + std::time::Duration::from_secs(1_795_962_000);
        let f = request_features(&c, &h, now);
        assert_eq!(f.model, "gpt-4o");
        assert_eq!(f.max_tokens, Some(9));
        assert!(f.stream);
        assert_eq!(f.messages, 1);
        assert_eq!(f.headers.get("x-team").map(String::as_str), Some("search"));
        assert!(!f.headers.contains_key("authorization"));
        assert_eq!(f.metadata["team"], "search");
        assert_eq!(f.metadata["n"], "3");
        assert_eq!(f.weekday, 7);
        assert_eq!(f.hour, 14);
        assert_eq!(f.task, "chat");
    }

    #[test]
    fn task_classifier() {
        let code = chat(
            r#"{"model":"m","messages":[{"role":"user","content":"fix this:\n```py\nx=1\n```"}]}"#,
        );
        assert_eq!(classify_task(&code, None), "code");
        let tools = chat(
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]}"#,
        );
        assert_eq!(classify_task(&tools, None), "tool_use");
        assert_eq!(classify_task(&tools, Some("chat")), "chat");
        let plain = chat(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#);
        assert_eq!(classify_task(&plain, None), "chat");
    }
}
