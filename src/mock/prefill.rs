//! Continuation mode (`prefill`): a trailing assistant message is the start of the
//! answer, as with Anthropic's prefill or a gateway resuming a cut stream.
//!
//! The answer is the one the emulator gives to the conversation without that message;
//! when its text starts with the prefix P, only the rest is sent, cut at the answer's
//! own token boundaries, so P + the rest is the uninterrupted answer byte for byte.

use serde_json::Value;

use crate::api::ChatRequest;

/// The assistant prefix of `req`: the string content of its last message when that
/// message is the assistant's.
pub(super) fn prefix(req: &ChatRequest) -> Option<&str> {
    let last = req.messages.last()?;
    match (&last.role[..], &last.content) {
        ("assistant", Value::String(p)) => Some(p),
        _ => None,
    }
}

/// The prompt text of `req` without its last message: what the answer is drawn from
/// in continuation mode.
pub(super) fn prompt_without_last(req: &ChatRequest) -> String {
    let mut base = req.clone();
    base.messages.pop();
    base.prompt_text()
}

/// The tokens of `answer` after the string prefix `p`, at the same boundaries (the
/// first may be the tail of a token `p` ends inside); `None` when the answer's text
/// does not start with `p`.
///
/// Matching is on text, not tokens: a prefix whose trailing space was trimmed (as
/// Anthropic requires) leaves a remainder that starts with that space.
pub fn continuation(answer: &[String], p: &str) -> Option<Vec<String>> {
    if !answer.concat().starts_with(p) {
        return None;
    }
    let mut start = 0;
    let mut rest = Vec::new();
    for token in answer {
        let end = start + token.len();
        if end > p.len() {
            let from = p.len().saturating_sub(start);
            rest.push(token.get(from..).unwrap_or_default().to_string());
        }
        start = end;
    }
    Some(rest)
}
