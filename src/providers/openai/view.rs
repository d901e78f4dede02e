//! The view of an upstream chat completion the OpenAI adapter reads before splicing
//! the logical model name into it.

use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::super::json_walk;

/// What [`ResponseView`] tells of a chat completion, read by one strict pass of
/// [`json_walk`] instead of `serde_json`'s visitors, with where `model` is.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ResponseWalk {
    /// The (last) `choices` member is a list.
    pub choices_listed: bool,
    /// How many `model` members the object has.
    pub models: usize,
    /// The value of the last `model` member (quotes included for a string).
    pub model: Option<Range<usize>>,
}

impl ResponseWalk {
    /// The walk of `body`, or `None` when it is not a valid JSON object (or is
    /// nested deeper than [`json_walk::MAX_DEPTH`]).
    pub fn of(body: &[u8]) -> Option<ResponseWalk> {
        let mut walk = ResponseWalk {
            choices_listed: false,
            models: 0,
            model: None,
        };
        let mut undecodable = false;
        let valid = json_walk::object_members(body, |m| {
            // The key with its quotes, decoded if written with escapes
            // (`"mo\u0064el"` is `model`); one serde_json cannot decode (a lone
            // surrogate, read as empty) fails the walk, as it fails serde_json's read
            // of the keys (an escaped key is never empty once decoded).
            let key = super::chunk::key(&body[m.key.start - 1..m.key.end + 1], m.key_escaped);
            undecodable |= m.key_escaped && key.is_empty();
            match &*key {
                b"choices" => walk.choices_listed = body[m.value.start] == b'[',
                b"model" => {
                    walk.models += 1;
                    walk.model = Some(m.value.clone());
                }
                _ => {}
            }
        });
        (valid && !undecodable).then_some(walk)
    }
}

/// Just enough of a chat completion to know it is one, and how many `model` members
/// it has (a server may write two; the splice replaces one).
pub(super) struct ResponseView<'a> {
    /// The `choices` member's text, unless absent or `null`.
    pub choices: Option<&'a RawValue>,
    /// How many `model` members the object has.
    pub models: usize,
}

impl<'de> Deserialize<'de> for ResponseView<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, Visitor};
        /// A member's key as far as the view cares (decoded, so `"mod\u0065l"` is
        /// `model`; read without allocating).
        enum Key {
            Choices,
            Model,
            Other,
        }
        impl<'de> Deserialize<'de> for Key {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct K;
                impl Visitor<'_> for K {
                    type Value = Key;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("a key")
                    }
                    fn visit_str<E>(self, s: &str) -> Result<Key, E> {
                        Ok(match s {
                            "choices" => Key::Choices,
                            "model" => Key::Model,
                            _ => Key::Other,
                        })
                    }
                }
                d.deserialize_identifier(K)
            }
        }
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = ResponseView<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut view = ResponseView {
                    choices: None,
                    models: 0,
                };
                while let Some(k) = map.next_key::<Key>()? {
                    match k {
                        Key::Choices => view.choices = map.next_value()?,
                        Key::Model => {
                            view.models += 1;
                            map.next_value::<IgnoredAny>()?;
                        }
                        Key::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(view)
            }
        }
        d.deserialize_map(Members)
    }
}
