//! The emulator's record of the requests it answered, served at `GET /mock/requests`
//! so that end-to-end tests can compare what a client saw through a gateway with what
//! the provider reported (usage, tool calls, replayed signatures).

use std::collections::VecDeque;
use std::sync::Mutex;

use serde_json::{json, Value};

use super::{Action, Call, Turn, Wire};
use crate::api::Usage;

/// Most entries kept; older ones are dropped first.
const KEEP: usize = 256;

/// A bounded list of answered requests, oldest first.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    entries: Mutex<VecDeque<Value>>,
}

impl Ledger {
    /// Records request `n`: its answer's HTTP `status`, and the usage reported when it
    /// succeeded with how many of its completion tokens were thinking.
    pub(super) fn record(
        &self,
        n: u64,
        wire: Wire,
        turn: &Turn,
        status: u16,
        usage: Option<(Usage, usize)>,
        call: Option<&Call>,
    ) {
        let reply = match (&turn.action, status) {
            (_, s) if s != 200 => "error",
            (Action::Call { .. } | Action::Custom { .. }, _) => "tool_call",
            (Action::AfterResult(_), _) => "tool_result_answer",
            (Action::Text | Action::Json(_), _) => "text",
        };
        let mut e = json!({
            "n": n,
            "format": wire.as_str(),
            "model": turn.model,
            "stream": turn.stream,
            "status": status,
            "reply": reply,
            "prompt_tokens": turn.prompt_tokens,
        });
        if let Some((u, thinking)) = usage {
            e["usage"] = json!(u);
            e["reasoning_tokens"] = json!(thinking);
        }
        if let (Some(c), 200) = (call, status) {
            e["tool_call"] = json!({"id": c.id, "name": c.name, "arguments": c.args});
        }
        if let Some(s) = turn.signature {
            e["thought_signature"] = json!(s.as_str());
        }
        let mut list = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if list.len() == KEEP {
            list.pop_front();
        }
        list.push_back(e);
    }

    /// `{"requests": [...]}`, oldest first.
    pub(super) fn to_json(&self) -> Value {
        let list = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        json!({"requests": list.iter().collect::<Vec<_>>()})
    }
}
