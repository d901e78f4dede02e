//! `Deserialize` for the request types that keep unknown members ([`ChatRequest`],
//! [`Message`], [`StreamOptions`]: each has an `extra` map that forwards every member
//! the gateway does not read), written by hand.
//!
//! Why not `#[derive(Deserialize)]` with `#[serde(flatten)] extra`: a flattened map
//! makes serde buffer every member it does not know into its private `Content` tree
//! (an allocation per entry and per string) and then deserialize the map from that
//! buffer, for every message of every request. That was the better part of a
//! request body's parse (`ChatRequest::parse`, about 4,100 instructions for a
//! one-message body under `benches/load/callgrind.sh`). Here an unknown member's
//! value is read straight into a [`Value`].
//!
//! The result and the errors are the derived ones (the tests compare both with
//! the derive on the same bodies): each type reads only a JSON object (the expected
//! text names the type, as `struct ChatRequest`), a known member named twice is
//! `duplicate field`, a missing required one `missing field`, an unknown one named
//! twice keeps its last value, and a member's own type error is the one its type's
//! `Deserialize` gives. `serde_path_to_error` sees the same keys and values, so the
//! error paths (`messages[0].role`) are the same too.
//!
//! One exception, in the error only: with serde_json's `raw_value` feature, an
//! object whose first key is serde_json's private `$serde_json::private::RawValue`
//! is read as raw JSON text, the one way valid JSON can fail to read as a `Value`.
//! In an unknown member, the derive found that error only after the whole object
//! (after the missing-field checks, with the enclosing object's path); here it is
//! reported where it is, with its own path. The same bodies are accepted, with the
//! same values (`an_unknown_raw_value_member_is_accepted_or_refused_as_before`).

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{ChatRequest, Message, Messages, StreamOptions};

/// A member name: one of the type's known fields `F`, or an unknown one (its text,
/// for `extra`).
enum Key<F> {
    Known(F),
    Other(String),
}

/// Reads a member name, matched by the type's field function (a `match` on the
/// text, which the compiler turns into a switch on the length and word compares, as
/// the derive does) without allocating.
struct KeySeed<F>(fn(&str) -> Option<F>);

impl<'de, F> DeserializeSeed<'de> for KeySeed<F> {
    type Value = Key<F>;

    #[inline]
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key<F>, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de, F> Visitor<'de> for KeySeed<F> {
    type Value = Key<F>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field identifier")
    }

    #[inline]
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<F>, E> {
        Ok(match (self.0)(v) {
            Some(f) => Key::Known(f),
            None => Key::Other(v.to_owned()),
        })
    }

    #[inline]
    fn visit_string<E: de::Error>(self, v: String) -> Result<Key<F>, E> {
        Ok(match (self.0)(&v) {
            Some(f) => Key::Known(f),
            None => Key::Other(v),
        })
    }
}

/// Reads the value of a known member into `slot`, or fails with serde's
/// `duplicate field` when it was read before.
#[inline]
fn once<'de, A: MapAccess<'de>, T: Deserialize<'de>>(
    map: &mut A,
    slot: &mut Option<T>,
    name: &'static str,
) -> Result<(), A::Error> {
    if slot.is_some() {
        return Err(de::Error::duplicate_field(name));
    }
    *slot = Some(map.next_value()?);
    Ok(())
}

/// Reads an unknown member's value into `extra` (a later one of the same name
/// replaces it, as the flattened map did).
#[inline]
fn other<'de, A: MapAccess<'de>>(
    map: &mut A,
    extra: &mut Map<String, Value>,
    name: String,
) -> Result<(), A::Error> {
    let v: Value = map.next_value()?;
    extra.insert(name, v);
    Ok(())
}

/// A visitor of one object type `T` (its `visit_map` is `T`'s [`FromMap`]).
struct ObjectVisitor<T>(PhantomData<T>);

/// A type read from a JSON object's members.
trait FromMap<'de>: Sized {
    /// The type's name in serde's messages (`struct ChatRequest`).
    const EXPECTING: &'static str;
    /// Reads the members.
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error>;
}

impl<'de, T: FromMap<'de>> Visitor<'de> for ObjectVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }

    #[inline]
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::from_map(map)
    }
}

/// The members of a chat request the gateway reads.
enum RequestField {
    Model,
    Messages,
    Stream,
    StreamOptions,
    MaxTokens,
    MaxCompletionTokens,
    Temperature,
    Tools,
}

/// Which member of a chat request the gateway reads `name` is.
fn request_field(name: &str) -> Option<RequestField> {
    Some(match name {
        "model" => RequestField::Model,
        "messages" => RequestField::Messages,
        "stream" => RequestField::Stream,
        "stream_options" => RequestField::StreamOptions,
        "max_tokens" => RequestField::MaxTokens,
        "max_completion_tokens" => RequestField::MaxCompletionTokens,
        "temperature" => RequestField::Temperature,
        "tools" => RequestField::Tools,
        _ => return None,
    })
}

impl<'de> FromMap<'de> for ChatRequest {
    const EXPECTING: &'static str = "struct ChatRequest";

    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut model: Option<String> = None;
        let mut messages: Option<Messages> = None;
        let mut stream: Option<Option<bool>> = None;
        let mut stream_options: Option<Option<StreamOptions>> = None;
        let mut max_tokens: Option<Option<u64>> = None;
        let mut max_completion_tokens: Option<Option<u64>> = None;
        let mut temperature: Option<Option<f64>> = None;
        let mut tools: Option<Option<Vec<Value>>> = None;
        let mut extra = Map::new();
        while let Some(key) = map.next_key_seed(KeySeed(request_field))? {
            use RequestField as F;
            match key {
                Key::Known(F::Model) => once(&mut map, &mut model, "model")?,
                Key::Known(F::Messages) => once(&mut map, &mut messages, "messages")?,
                Key::Known(F::Stream) => once(&mut map, &mut stream, "stream")?,
                Key::Known(F::StreamOptions) => {
                    once(&mut map, &mut stream_options, "stream_options")?;
                }
                Key::Known(F::MaxTokens) => once(&mut map, &mut max_tokens, "max_tokens")?,
                Key::Known(F::MaxCompletionTokens) => once(
                    &mut map,
                    &mut max_completion_tokens,
                    "max_completion_tokens",
                )?,
                Key::Known(F::Temperature) => once(&mut map, &mut temperature, "temperature")?,
                Key::Known(F::Tools) => once(&mut map, &mut tools, "tools")?,
                Key::Other(name) => other(&mut map, &mut extra, name)?,
            }
        }
        // Missing required members in the order serde checks them (declaration).
        let model = model.ok_or_else(|| de::Error::missing_field("model"))?;
        let messages = messages.ok_or_else(|| de::Error::missing_field("messages"))?;
        Ok(ChatRequest {
            model,
            messages,
            stream: stream.flatten(),
            stream_options: stream_options.flatten(),
            max_tokens: max_tokens.flatten(),
            max_completion_tokens: max_completion_tokens.flatten(),
            temperature: temperature.flatten(),
            tools: tools.flatten(),
            extra,
            raw: bytes::Bytes::new(),
            headers: http::HeaderMap::new(),
            request_id: None,
        })
    }
}

impl<'de> Deserialize<'de> for ChatRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ObjectVisitor::<ChatRequest>(PhantomData))
    }
}

/// The members of a message the gateway reads.
enum MessageField {
    Role,
    Content,
}

/// Which member of a message the gateway reads `name` is.
fn message_field(name: &str) -> Option<MessageField> {
    Some(match name {
        "role" => MessageField::Role,
        "content" => MessageField::Content,
        _ => return None,
    })
}

impl<'de> FromMap<'de> for Message {
    const EXPECTING: &'static str = "struct Message";

    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut role: Option<String> = None;
        let mut content: Option<Value> = None;
        let mut extra = Map::new();
        while let Some(key) = map.next_key_seed(KeySeed(message_field))? {
            match key {
                Key::Known(MessageField::Role) => once(&mut map, &mut role, "role")?,
                Key::Known(MessageField::Content) => once(&mut map, &mut content, "content")?,
                Key::Other(name) => other(&mut map, &mut extra, name)?,
            }
        }
        let role = role.ok_or_else(|| de::Error::missing_field("role"))?;
        Ok(Message {
            role,
            // An absent `content` is `null` (the derive had `#[serde(default)]`).
            content: content.unwrap_or_default(),
            extra,
        })
    }
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ObjectVisitor::<Message>(PhantomData))
    }
}

/// The one member of `stream_options` the gateway reads.
struct IncludeUsage;

/// Whether `name` is the member of `stream_options` the gateway reads.
fn stream_options_field(name: &str) -> Option<IncludeUsage> {
    (name == "include_usage").then_some(IncludeUsage)
}

impl<'de> FromMap<'de> for StreamOptions {
    const EXPECTING: &'static str = "struct StreamOptions";

    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut include_usage: Option<Option<bool>> = None;
        let mut extra = Map::new();
        while let Some(key) = map.next_key_seed(KeySeed(stream_options_field))? {
            match key {
                Key::Known(IncludeUsage) => once(&mut map, &mut include_usage, "include_usage")?,
                Key::Other(name) => other(&mut map, &mut extra, name)?,
            }
        }
        Ok(StreamOptions {
            include_usage: include_usage.flatten(),
            extra,
        })
    }
}

impl<'de> Deserialize<'de> for StreamOptions {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ObjectVisitor::<StreamOptions>(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    //! The hand-written readers against the derive they replace, on the same texts:
    //! the same value (compared as re-serialized JSON) or the same error message,
    //! also through `serde_path_to_error` (the path of the error).

    use serde::{Deserialize, Serialize};

    /// The types as they were derived, under their own names (serde's messages name
    /// the type).
    mod derived {
        use serde::{Deserialize, Serialize};
        use serde_json::{Map, Value};

        /// [`super::super::ChatRequest`] as it was derived.
        #[derive(Debug, Serialize, Deserialize)]
        pub(super) struct ChatRequest {
            model: String,
            messages: Vec<Message>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            stream: Option<bool>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            stream_options: Option<StreamOptions>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            max_tokens: Option<u64>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            max_completion_tokens: Option<u64>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            temperature: Option<f64>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            tools: Option<Vec<Value>>,
            #[serde(flatten)]
            extra: Map<String, Value>,
        }

        /// [`super::super::StreamOptions`] as it was derived.
        #[derive(Debug, Serialize, Deserialize)]
        pub(super) struct StreamOptions {
            #[serde(default, skip_serializing_if = "Option::is_none")]
            include_usage: Option<bool>,
            #[serde(flatten)]
            extra: Map<String, Value>,
        }

        /// [`super::super::Message`] as it was derived.
        #[derive(Debug, Serialize, Deserialize)]
        pub(super) struct Message {
            role: String,
            #[serde(default)]
            content: Value,
            #[serde(flatten)]
            extra: Map<String, Value>,
        }
    }

    /// The outcome of reading `text` as `T`, with the path tracked and without (as
    /// `ChatRequest::parse` reads first): its JSON, or the error's message (and
    /// path).
    fn outcome<'a, T: Deserialize<'a> + Serialize>(
        text: &'a str,
    ) -> (Result<String, String>, Result<String, String>) {
        let mut de = serde_json::Deserializer::from_str(text);
        let tracked = match serde_path_to_error::deserialize::<_, T>(&mut de) {
            Ok(v) => Ok(serde_json::to_string(&v).unwrap()),
            Err(e) => Err(format!("{} at {}", e.inner(), e.path())),
        };
        let plain = serde_json::from_str::<T>(text)
            .map(|v| serde_json::to_string(&v).unwrap())
            .map_err(|e| e.to_string());
        (tracked, plain)
    }

    fn assert_same(text: &str) {
        assert_eq!(
            outcome::<super::ChatRequest>(text),
            outcome::<derived::ChatRequest>(text),
            "{text}"
        );
    }

    #[test]
    fn hand_written_readers_match_the_derive_on_typical_and_odd_bodies() {
        for text in [
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"hi","name":"a","cache_control":{"type":"ephemeral"}}],"max_tokens":16,"stream":true,"stream_options":{"include_usage":true,"x":1},"temperature":0.5,"tools":[{"type":"function"}],"seed":3,"user":"u","response_format":{"type":"json_object"}}"#,
            r#"{"messages":[{"role":"assistant","tool_calls":[{"id":"c"}]}],"model":"m"}"#,
            r#"{"model":"m","messages":[{"role":"user"}],"stream":null,"stream_options":null,"tools":null,"max_tokens":null}"#,
            r#"{"model":"m","messages":[],"x":1,"x":2}"#,
            r#"{"model":"m\u0041","messages":[{"ro\u006ce":"user","content":[{"type":"text","text":"a\"b"}]}],"e\u0078tra":true}"#,
            // Errors: each must say what the derive said, at the same path.
            r#"{"model":"m","model":"n","messages":[]}"#,
            r#"{"model":"m"}"#,
            r#"{"messages":[]}"#,
            r#"{"model":"m","messages":[{"content":"hi"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","role":"user"}]}"#,
            r#"{"model":"m","messages":[{"role":3}]}"#,
            r#"{"model":"m","messages":["hi"]}"#,
            r#"{"model":"m","messages":{}}"#,
            r#"{"model":1,"messages":[]}"#,
            r#"{"model":"m","messages":[],"max_tokens":-1}"#,
            r#"{"model":"m","messages":[],"max_tokens":"16"}"#,
            r#"{"model":"m","messages":[],"temperature":"hot"}"#,
            r#"{"model":"m","messages":[],"stream":"yes"}"#,
            r#"{"model":"m","messages":[],"stream_options":{"include_usage":1}}"#,
            r#"{"model":"m","messages":[],"stream_options":[]}"#,
            r#"{"model":"m","messages":[],"tools":{}}"#,
            r#"{"model":"m","messages":[],"stream":true,"stream":false}"#,
            r#"[]"#,
            r#"[{"model":"m"}]"#,
            r#""text""#,
            r#"null"#,
            r#"3"#,
            r#"{"model":"m","messages":[]"#,
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],}"#,
            r#"{"model":"m","messages":[{"role":"user","x":tru}]}"#,
            r#"{"model":"m","messages":[],"x":{"y":[1,2,{"z":null}]},"x":"last"}"#,
            r#"{"model":"m","messages":[],"x":-0,"y":1e400}"#,
            r#"{"model":"m","messages":[],"x":-0.0,"y":18446744073709551616,"z":-9223372036854775809}"#,
        ] {
            assert_same(text);
        }
    }

    /// The module doc's exception: serde_json's private raw-value key in an unknown
    /// member. Accepted bodies read the same; refused ones are refused by both (the
    /// derive's error came later, with the enclosing object's path).
    #[test]
    fn an_unknown_raw_value_member_is_accepted_or_refused_as_before() {
        for text in [
            r#"{"model":"m","messages":[],"x":{"$serde_json::private::RawValue":"[1,2]"}}"#,
            r#"{"model":"m","messages":[],"x":{"$serde_json::private::Raw\u0056alue":"{\"a\":1}"}}"#,
            r#"{"model":"m","messages":[],"x":{"a":1,"$serde_json::private::RawValue":5}}"#,
            r#"{"model":"m","messages":[],"$serde_json::private::RawValue":5}"#,
        ] {
            assert_same(text);
        }
        for text in [
            r#"{"model":"m","messages":[],"x":{"$serde_json::private::RawValue":5}}"#,
            r#"{"model":"m","messages":[],"x":{"$serde_json::private::RawValue":"[1,2"}}"#,
            r#"{"model":"m","messages":[],"x":{"$serde_json::private::RawValue":"1","a":2}}"#,
            r#"{"model":"m","messages":[],"x":[{"$serde_json::private::RawValue":"tru"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","x":{"$serde_json::private::RawValue":5}}]}"#,
            r#"{"model":"m","messages":[],"stream_options":{"x":{"$serde_json::private::RawValue":5}}}"#,
            r#"{"x":{"$serde_json::private::RawValue":5}}"#,
            r#"{"x":{"$serde_json::private::RawValue":5},"model":"a","model":"b"}"#,
        ] {
            let (new, new_plain) = outcome::<super::ChatRequest>(text);
            let (old, old_plain) = outcome::<derived::ChatRequest>(text);
            assert!(new.is_err() && old.is_err(), "{text}: {new:?} / {old:?}");
            assert!(new_plain.is_err() && old_plain.is_err(), "{text}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
        /// Bodies built from the known members, unknown ones and repeated ones, in any
        /// order, with values of the right type or not.
        #[test]
        fn hand_written_readers_match_the_derive_on_any_member_list(
            members in proptest::collection::vec((0usize..14, 0usize..8), 0..8),
            message_members in proptest::collection::vec((0usize..5, 0usize..8), 0..5),
        ) {
            const VALUES: [&str; 8] =
                ["\"s\"", "1", "-2", "0.5", "true", "null", "[]", "{\"include_usage\":false,\"k\":\"v\"}"];
            const NAMES: [&str; 14] = [
                "model", "messages", "stream", "stream_options", "max_tokens",
                "max_completion_tokens", "temperature", "tools", "user", "seed", "n",
                "model", "messages", "x",
            ];
            const MESSAGE_NAMES: [&str; 5] = ["role", "content", "name", "role", "tool_calls"];
            let message = message_members
                .iter()
                .map(|&(k, v)| format!("\"{}\":{}", MESSAGE_NAMES[k], VALUES[v]))
                .collect::<Vec<_>>()
                .join(",");
            let text = members
                .iter()
                .map(|&(k, v)| {
                    let value = if NAMES[k] == "messages" && v % 2 == 0 {
                        format!("[{{{message}}}]")
                    } else {
                        VALUES[v].to_string()
                    };
                    format!("\"{}\":{value}", NAMES[k])
                })
                .collect::<Vec<_>>()
                .join(",");
            let text = format!("{{{text}}}");
            proptest::prop_assert_eq!(
                outcome::<super::ChatRequest>(&text),
                outcome::<derived::ChatRequest>(&text),
                "{}", text
            );
        }
    }
}
