//! OpenAI message content → Anthropic content blocks.
//!
//! Source: Anthropic API reference, "Messages" (content blocks `text`, `image`,
//! `tool_use`, `tool_result`, `thinking`, `redacted_thinking`), "Vision" (image
//! sources `base64` and `url`; media types image/jpeg, image/png, image/gif,
//! image/webp) and "Prompt caching" (`cache_control: {"type":"ephemeral","ttl"}` on
//! tools, system blocks and message blocks; at most 4 per request).
//!
//! Anthropic rejects text blocks that are empty or only whitespace, so such parts are
//! dropped here.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::{Code, GatewayError};
use crate::providers::common::{
    accepted_media_type, field_error, image_ref, required_str, ImageRef,
};

/// Most `cache_control` markers Anthropic takes in one request ("Prompt caching").
pub(super) const MAX_CACHE_MARKERS: usize = 4;

/// One Anthropic content block, borrowing from the client's request.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Block<'a> {
    Text {
        text: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<&'a Value>,
    },
    Image {
        source: Source<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<&'a Value>,
    },
    ToolUse {
        /// As [`crate::providers::common::tool_use_id`] makes it.
        id: Cow<'a, str>,
        name: &'a str,
        input: &'a RawValue,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<&'a Value>,
    },
    ToolResult {
        /// As [`crate::providers::common::tool_use_id`] makes it.
        tool_use_id: Cow<'a, str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        content: Vec<Block<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<&'a Value>,
    },
    /// A thinking block replayed from the client's `thinking_blocks`.
    Thinking {
        thinking: Cow<'a, str>,
        signature: Cow<'a, str>,
    },
    /// A redacted thinking block replayed from the client's `thinking_blocks`.
    RedactedThinking { data: Cow<'a, str> },
}

impl<'a> Block<'a> {
    /// The block's cache marker slot, for blocks that take one.
    pub(super) fn marker(&mut self) -> Option<&mut Option<&'a Value>> {
        match self {
            Block::Text { cache_control, .. }
            | Block::Image { cache_control, .. }
            | Block::ToolUse { cache_control, .. }
            | Block::ToolResult { cache_control, .. } => Some(cache_control),
            _ => None,
        }
    }
}

/// An image source.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Source<'a> {
    Base64 {
        media_type: &'static str,
        data: &'a str,
    },
    Url {
        url: &'a str,
    },
}

/// Counts and checks the request's `cache_control` markers.
#[derive(Default)]
pub(super) struct Markers {
    count: usize,
}

impl Markers {
    /// Checks the marker `v` found at `param` (`None` when absent or null).
    ///
    /// # Errors
    /// 400 naming `param` when the marker is not `{"type":"ephemeral"}` with an
    /// optional `ttl` of "5m" or "1h", or when it is the fifth of the request.
    pub(super) fn check<'a>(
        &mut self,
        v: Option<&'a Value>,
        param: impl Fn() -> String,
    ) -> Result<Option<&'a Value>, GatewayError> {
        let Some(v) = v.filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let bad = |code: Code, why: &str| field_error(code, param(), why);
        if v.get("type").and_then(Value::as_str) != Some("ephemeral") {
            return Err(bad(
                Code::InvalidValue,
                "must be {\"type\":\"ephemeral\"} (with an optional \"ttl\" of \"5m\" or \"1h\")",
            ));
        }
        match v.get("ttl") {
            None | Some(Value::Null) => {}
            Some(t) if t == "5m" || t == "1h" => {}
            Some(_) => {
                return Err(bad(
                    Code::InvalidValue,
                    "has a `ttl` Anthropic does not take; use \"5m\" or \"1h\"",
                ))
            }
        }
        self.count += 1;
        if self.count > MAX_CACHE_MARKERS {
            return Err(bad(
                Code::UnsupportedValue,
                &format!(
                "is cache marker number {}; Anthropic takes at most {MAX_CACHE_MARKERS} per request",
                    self.count
                ),
            ));
        }
        Ok(Some(v))
    }
}

/// Image media types Anthropic takes ("Vision"); a declared type is normalised by
/// [`accepted_media_type`].
pub(super) const MEDIA_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

/// Whether Anthropic would reject `text` as a text block (empty or only whitespace).
pub(super) fn blank(text: &str) -> bool {
    text.trim().is_empty()
}

/// What a message's role lets its content hold.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Allow {
    /// Text only (system and assistant messages).
    Text,
    /// Text and images (user messages and tool results).
    TextAndImages,
}

/// The content of message `i` as Anthropic blocks: a string is one text block, an
/// array is read part by part; blank text is dropped. A part's `cache_control` goes on
/// its block.
///
/// # Errors
/// 400 naming the part for a part type Anthropic does not take here (audio, files,
/// images outside user and tool messages), a malformed part, an image URL that is
/// neither http(s) nor base64 data, an image media type Anthropic cannot take, or a
/// bad cache marker.
pub(super) fn blocks<'a>(
    content: &'a Value,
    i: usize,
    allow: Allow,
    markers: &mut Markers,
) -> Result<Vec<Block<'a>>, GatewayError> {
    let items = match content {
        Value::String(s) if blank(s) => return Ok(Vec::new()),
        Value::String(text) => {
            return Ok(vec![Block::Text {
                text,
                cache_control: None,
            }])
        }
        Value::Array(items) => items,
        _ => return Ok(Vec::new()),
    };
    let mut out = Vec::with_capacity(items.len());
    for (j, p) in items.iter().enumerate() {
        let at = |field: &str| format!("messages[{i}].content[{j}]{field}");
        let err = |code: Code, field: &str, why: &str| field_error(code, at(field), why);
        let kind = p.get("type").and_then(Value::as_str).unwrap_or("");
        let block = match kind {
            "text" | "refusal" => {
                let text = p.get(kind).and_then(Value::as_str).ok_or_else(|| {
                    err(Code::InvalidType, &format!(".{kind}"), "must be a string")
                })?;
                if blank(text) {
                    continue;
                }
                Block::Text {
                    text,
                    cache_control: None,
                }
            }
            "image_url" if allow == Allow::TextAndImages => {
                let url = required_str(
                    p.get("image_url").and_then(|u| u.get("url").or(Some(u))),
                    || at(".image_url.url"),
                )?;
                let source = match image_ref(url)
                    .map_err(|why| err(Code::InvalidValue, ".image_url.url", why))?
                {
                    ImageRef::Inline { mime, data } => Source::Base64 {
                        media_type: accepted_media_type(mime, &MEDIA_TYPES).ok_or_else(|| {
                            err(
                                Code::UnsupportedValue,
                                ".image_url",
                                &format!(
                                    "has media type \"{}\"; Anthropic takes image/jpeg, image/png, image/gif and image/webp",
                                    crate::error::bounded(mime, 64)
                                ),
                            )
                        })?,
                        data,
                    },
                    ImageRef::Url(url) => Source::Url { url },
                };
                Block::Image {
                    source,
                    cache_control: None,
                }
            }
            "image_url" => {
                return Err(err(
                    Code::UnsupportedValue,
                    "",
                    "is an image; Anthropic takes images only in user and tool messages",
                ))
            }
            other => {
                return Err(err(
                    Code::UnsupportedValue,
                    ".type",
                    &format!(
                        "has content part type \"{}\", which Anthropic does not take",
                        crate::error::bounded(other, 64)
                    ),
                ))
            }
        };
        let mut block = block;
        let mark = markers.check(p.get("cache_control"), || at(".cache_control"))?;
        if let Some(slot) = block.marker() {
            *slot = mark;
        }
        out.push(block);
    }
    Ok(out)
}

/// Puts the message-level marker of message `m` (LiteLLM's shorthand for a marker on
/// the message's last block) on the last block of `blocks`, unless it has one.
///
/// # Errors
/// As [`Markers::check`].
pub(super) fn message_marker<'a>(
    m: &'a crate::api::Message,
    i: usize,
    blocks: &mut [Block<'a>],
    markers: &mut Markers,
) -> Result<(), GatewayError> {
    let Some(v) = m.extra.get("cache_control").filter(|v| !v.is_null()) else {
        return Ok(());
    };
    let Some(slot) = blocks.last_mut().and_then(Block::marker) else {
        return Ok(());
    };
    if slot.is_none() {
        *slot = markers.check(Some(v), || format!("messages[{i}].cache_control"))?;
    }
    Ok(())
}
