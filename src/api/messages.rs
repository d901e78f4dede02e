//! A request's conversation ([`Messages`]), which a large body can set aside while it
//! waits on the upstream (issue 17, peak memory under large bodies).
//!
//! Parsing a body into [`Message`]s copies every string of it: a 6.8 MB prompt is held
//! twice, once as received (the bytes an OpenAI-format provider is sent, shared) and
//! once decoded. The phases before dispatch (validation, policy features, limits, the
//! cache key) read the decoded messages; an OpenAI-format attempt does not, as it
//! forwards the received bytes with `model` replaced. So once those phases are done,
//! the gateway calls [`Messages::set_aside`] with the byte range of `messages` in the
//! received body (which it keeps anyway): the decoded copy is freed, and is decoded
//! again from those bytes, once, only if something reads it later (a translation to
//! Anthropic, Gemini or Bedrock, a stream continued on another endpoint). The few
//! facts the dispatch path reads of every request (how many messages, their text's
//! length for the token estimate, whether any carries a `cache_control` marker) are
//! recorded when set aside, so an OpenAI-format attempt never decodes them again.
//!
//! Readers see no difference: [`Messages`] dereferences to `Vec<Message>` with the
//! same content either way.

use std::ops::{Deref, DerefMut};
use std::sync::OnceLock;

use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::Message;

/// The `messages` of a request: decoded [`Message`]s, or (after [`Messages::set_aside`])
/// the received JSON they are decoded from again on first read.
#[derive(Debug, Clone, Default)]
pub struct Messages {
    /// The decoded messages; empty while set aside and not read since.
    decoded: OnceLock<Vec<Message>>,
    /// Set while set aside: the source and the facts read before.
    aside: Option<Aside>,
}

/// What [`Messages::set_aside`] keeps.
#[derive(Debug, Clone)]
struct Aside {
    /// The `messages` array as received (a slice of the request body's bytes).
    source: Bytes,
    /// Number of messages.
    count: usize,
    /// Bytes of text, as [`Messages::text_len`].
    text_len: usize,
    /// As [`Messages::has_cache_control`].
    cache_control: bool,
}

impl Messages {
    /// Frees the decoded messages, keeping `source`, the JSON text of this very
    /// `messages` array as received (a cheap slice of the body), to decode them again
    /// on the next read; [`Messages::count`], [`Messages::text_len`] and
    /// [`Messages::has_cache_control`] are recorded first and read without decoding.
    ///
    /// Does nothing when already set aside. That `source` is what the messages were
    /// parsed from, unchanged since, is the caller's promise (the gateway passes the
    /// range [`crate::providers::splice::find`] gives for `messages` in the body the
    /// request was parsed from, before any layer changed the request).
    pub fn set_aside(&mut self, source: Bytes) {
        let Some(decoded) = self.decoded.take() else {
            return;
        };
        self.aside = Some(Aside {
            source,
            count: decoded.len(),
            text_len: text_len(&decoded),
            cache_control: decoded.iter().any(Message::has_cache_control),
        });
    }

    /// Whether the messages are decoded now (false while set aside and not read since).
    pub fn is_decoded(&self) -> bool {
        self.decoded.get().is_some()
    }

    /// Number of messages (without decoding them when set aside).
    pub fn count(&self) -> usize {
        match (&self.aside, self.decoded.get()) {
            (_, Some(d)) => d.len(),
            (Some(a), None) => a.count,
            (None, None) => 0,
        }
    }

    /// Bytes of text in the conversation: string contents, the `text` of content
    /// parts and assistants' tool calls (what
    /// [`crate::api::ChatRequest::estimated_input_tokens`] counts),
    /// without decoding the messages when set aside.
    pub fn text_len(&self) -> usize {
        match (&self.aside, self.decoded.get()) {
            (_, Some(d)) => text_len(d),
            (Some(a), None) => a.text_len,
            (None, None) => 0,
        }
    }

    /// Whether any message carries an Anthropic prompt-caching `cache_control`
    /// marker (on the message, its `function`, or a content part), without decoding
    /// the messages when set aside.
    pub fn has_cache_control(&self) -> bool {
        match (&self.aside, self.decoded.get()) {
            (_, Some(d)) => d.iter().any(Message::has_cache_control),
            (Some(a), None) => a.cache_control,
            (None, None) => false,
        }
    }

    /// The messages, decoded again from the kept source when set aside.
    fn decoded(&self) -> &Vec<Message> {
        self.decoded.get_or_init(|| match &self.aside {
            Some(a) => serde_json::from_slice(&a.source).unwrap_or_else(|e| {
                // The source is the array these messages were parsed from, so this
                // cannot fail; were it to, the request goes on without messages
                // and the provider refuses it.
                tracing::error!(error = %e, "set-aside messages no longer parse");
                Vec::new()
            }),
            None => Vec::new(),
        })
    }
}

/// Bytes of text in `messages`: string contents, the `text` of content parts, and
/// an assistant's tool calls (`tool_calls`, the legacy `function_call`: their
/// names and JSON arguments, which the model reads back as input).
fn text_len(messages: &[Message]) -> usize {
    messages
        .iter()
        .map(|m| {
            let content = match &m.content {
                Value::String(s) => s.len(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .map(str::len)
                    .sum(),
                _ => 0,
            };
            content + m.calls_len()
        })
        .sum()
}

impl From<Vec<Message>> for Messages {
    fn from(v: Vec<Message>) -> Messages {
        Messages {
            decoded: OnceLock::from(v),
            aside: None,
        }
    }
}

impl Deref for Messages {
    type Target = Vec<Message>;

    fn deref(&self) -> &Vec<Message> {
        self.decoded()
    }
}

impl DerefMut for Messages {
    /// The messages to change: decoded (when set aside), and no longer set aside, as
    /// the source would not hold the change.
    fn deref_mut(&mut self) -> &mut Vec<Message> {
        self.decoded();
        self.aside = None;
        self.decoded.get_mut().expect("decoded just above")
    }
}

impl Serialize for Messages {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.decoded().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Messages, D::Error> {
        Vec::<Message>::deserialize(d).map(Messages::from)
    }
}

impl<'a> IntoIterator for &'a Messages {
    type Item = &'a Message;
    type IntoIter = std::slice::Iter<'a, Message>;

    fn into_iter(self) -> Self::IntoIter {
        self.decoded().iter()
    }
}

impl<'a> IntoIterator for &'a mut Messages {
    type Item = &'a mut Message;
    type IntoIter = std::slice::IterMut<'a, Message>;

    fn into_iter(self) -> Self::IntoIter {
        self.deref_mut().iter_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ChatRequest;

    /// A request whose `messages` are set aside from its own body.
    fn set_aside(body: &str) -> ChatRequest {
        let raw = Bytes::from(body.to_string());
        let mut c = ChatRequest::parse_bytes(raw.clone()).unwrap();
        let start = body.find("[{").unwrap();
        let end = body.rfind("}]").unwrap() + 2;
        c.messages.set_aside(raw.slice(start..end));
        c
    }

    const BODY: &str = r#"{"model":"m","messages":[{"role":"system","content":"be \"brief\"\n\u00e9"},{"role":"user","content":[{"type":"text","text":"ab","cache_control":{"type":"ephemeral"}},{"type":"image_url","image_url":{"url":"u"}}],"name":"x"}]}"#;

    #[test]
    fn set_aside_frees_the_decoded_copy_and_reads_back_the_same() {
        let parsed = ChatRequest::parse(BODY.as_bytes()).unwrap();
        let c = set_aside(BODY);
        assert!(!c.messages.is_decoded());
        // The facts the dispatch path reads come without decoding.
        assert_eq!(c.messages.count(), 2);
        assert_eq!(c.messages.text_len(), parsed.messages.text_len());
        assert!(c.messages.has_cache_control());
        assert_eq!(c.estimated_input_tokens(), parsed.estimated_input_tokens());
        assert!(!c.messages.is_decoded());
        // A read decodes again, escapes included, the same content as parsed.
        assert_eq!(c.messages[0].content, "be \"brief\"\né");
        assert!(c.messages.is_decoded());
        assert_eq!(
            serde_json::to_value(&c.messages).unwrap(),
            serde_json::to_value(&parsed.messages).unwrap()
        );
        assert_eq!(c.prompt_text(), parsed.prompt_text());
    }

    #[test]
    fn facts_match_decoded_messages() {
        let parsed = ChatRequest::parse(BODY.as_bytes()).unwrap();
        // "be \"brief\"\né" (13 bytes) + "ab"
        assert_eq!(parsed.messages.text_len(), 15);
        assert_eq!(parsed.messages.count(), 2);
        assert!(parsed.messages.has_cache_control());
        let plain =
            ChatRequest::parse(br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#)
                .unwrap();
        assert!(!plain.messages.has_cache_control());
        assert_eq!(Messages::default().count(), 0);
        assert!(Messages::default().is_empty());
    }

    #[test]
    fn a_change_after_set_aside_is_kept() {
        let mut c = set_aside(BODY);
        c.messages.pop();
        assert_eq!(c.messages.count(), 1);
        // No longer set aside: setting aside again needs a new source, and the
        // changed list is what every read sees.
        assert!(c.messages.is_decoded());
        assert!(!c.messages.has_cache_control());
        let mut cloned = c.clone();
        for m in &mut cloned.messages {
            m.role = "user".into();
        }
        assert_eq!(cloned.messages[0].role, "user");
        assert_eq!(c.messages[0].role, "system");
    }

    #[test]
    fn a_clone_of_a_set_aside_request_decodes_on_its_own() {
        let c = set_aside(BODY);
        let d = c.clone();
        assert_eq!(d.messages[1].role, "user");
        assert!(d.messages.is_decoded());
        assert!(!c.messages.is_decoded());
    }

    #[test]
    fn a_source_that_does_not_parse_reads_as_no_messages() {
        let mut m = Messages::from(vec![]);
        m.set_aside(Bytes::from_static(b"[{"));
        assert_eq!(m.count(), 0);
        assert!(m.is_empty());
    }
}
