//! The view of an upstream chat completion the OpenAI adapter reads before splicing
//! the logical model name into it.

use serde::Deserialize;
use serde_json::value::RawValue;

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
