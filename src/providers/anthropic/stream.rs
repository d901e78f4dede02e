//! Anthropic's streamed message → OpenAI chunks.
//!
//! Source: Anthropic API reference, "Streaming Messages": `message_start`, then per
//! content block `content_block_start` / `content_block_delta` (`text_delta`,
//! `input_json_delta`, `thinking_delta`, `signature_delta`) / `content_block_stop`,
//! then `message_delta` (stop reason and cumulative usage) and `message_stop`; `ping`
//! keep-alives and `error` events may come anywhere, and new event types may be added
//! (they are ignored).
//!
//! Thinking text goes out as `delta.reasoning_content` as it arrives; when a thinking
//! block closes, the whole block with its signature goes out once as a
//! `delta.thinking_blocks` entry (a redacted block as soon as it starts), for the
//! client to send back (see [`crate::providers::reasoning`]).

use std::borrow::Cow;

use bytes::BytesMut;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{finish_reason, AnthropicUsage, ErrorDetail};
use crate::api::Usage;
use crate::error::{ErrorKind, GatewayError};
use crate::providers::common::{bad_upstream, end_of_body, hold, ChunkWriter, ToolDelta};
use crate::providers::reasoning::ThinkingBlock;
use crate::providers::{StreamContext, StreamStep, StreamTranscoder};
use crate::sse::SseEventRef;

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event<'a> {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: u64,
        #[serde(borrow)]
        content_block: StartBlock<'a>,
    },
    ContentBlockDelta {
        index: u64,
        #[serde(borrow)]
        delta: BlockDelta<'a>,
    },
    ContentBlockStop {
        index: u64,
    },
    MessageDelta {
        delta: MessageDeltaBody,
        #[serde(default)]
        usage: AnthropicUsage,
    },
    MessageStop,
    Error {
        error: ErrorDetail,
    },
    /// `ping` and event types added after this adapter was written.
    #[serde(other)]
    Other,
}

/// The error for a stream's `error` event (Anthropic API, "Streaming Messages":
/// "errors may be sent in the event stream", with the error types of "Errors"): an
/// account out of quota or over a spend limit ([`ErrorDetail::out_of_quota`]) as
/// its HTTP answer would be (429 `insufficient_quota`, the endpoint paused); a
/// `rate_limit_error` as a rate limit (429 `upstream_rate_limited`, retried after
/// the backoff); anything else a retryable 502 (`upstream_overloaded` for
/// `overloaded_error`).
fn stream_error(error: &ErrorDetail) -> GatewayError {
    use crate::error::{bounded, Code};
    if let Some(why) = error.out_of_quota() {
        return error.quota_error(why, "mid-stream");
    }
    let text = format!(
        "Anthropic reported an error mid-stream ({}): {}",
        bounded(&error.kind, 64),
        bounded(&error.message, 500)
    );
    match error.kind.as_str() {
        "rate_limit_error" => {
            GatewayError::new(ErrorKind::RateLimited, text).with_code(Code::UpstreamRateLimited)
        }
        "overloaded_error" => {
            GatewayError::new(ErrorKind::BadUpstream, text).with_code(Code::UpstreamOverloaded)
        }
        _ => GatewayError::new(ErrorKind::BadUpstream, text).with_code(Code::UpstreamError),
    }
}

#[derive(Deserialize)]
struct StartMessage {
    id: String,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: AnthropicUsage,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StartBlock<'a> {
    Text {
        #[serde(borrow, default)]
        text: Cow<'a, str>,
    },
    ToolUse {
        #[serde(borrow)]
        id: Cow<'a, str>,
        #[serde(borrow)]
        name: Cow<'a, str>,
    },
    Thinking {
        #[serde(borrow, default)]
        thinking: Cow<'a, str>,
        #[serde(borrow, default)]
        signature: Cow<'a, str>,
    },
    RedactedThinking {
        #[serde(borrow)]
        data: Cow<'a, str>,
    },
    /// Server-tool blocks and block types added later: not relayed.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta<'a> {
    TextDelta {
        #[serde(borrow)]
        text: Cow<'a, str>,
    },
    InputJsonDelta {
        #[serde(borrow)]
        partial_json: Cow<'a, str>,
    },
    ThinkingDelta {
        #[serde(borrow)]
        thinking: Cow<'a, str>,
    },
    SignatureDelta {
        #[serde(borrow)]
        signature: Cow<'a, str>,
    },
    /// Citation deltas and delta types added later: not relayed.
    #[serde(other)]
    Other,
}

/// A `content_block_delta` event's members, read when the event's `type` comes
/// first (see [`fast_event`]); its `delta` is read by [`block_delta`].
#[derive(Deserialize)]
struct BlockDeltaEvent<'a> {
    /// The tag, read again only so that a second `type` member is refused as the
    /// enum refuses it (`duplicate field`).
    #[serde(rename = "type")]
    _tag: serde::de::IgnoredAny,
    index: u64,
    #[serde(borrow)]
    delta: &'a RawValue,
}

/// `text_delta`'s members.
#[derive(Deserialize)]
struct TextPiece<'a> {
    /// The tag, read again only so that a second `type` member is refused as the
    /// enum refuses it (`duplicate field`).
    #[serde(rename = "type")]
    _tag: serde::de::IgnoredAny,
    #[serde(borrow)]
    text: Cow<'a, str>,
}

/// `input_json_delta`'s members.
#[derive(Deserialize)]
struct JsonPiece<'a> {
    /// The tag, read again only so that a second `type` member is refused as the
    /// enum refuses it (`duplicate field`).
    #[serde(rename = "type")]
    _tag: serde::de::IgnoredAny,
    #[serde(borrow)]
    partial_json: Cow<'a, str>,
}

/// `thinking_delta`'s members.
#[derive(Deserialize)]
struct ThinkingPiece<'a> {
    /// The tag, read again only so that a second `type` member is refused as the
    /// enum refuses it (`duplicate field`).
    #[serde(rename = "type")]
    _tag: serde::de::IgnoredAny,
    #[serde(borrow)]
    thinking: Cow<'a, str>,
}

/// The value of an object's `type` member when it is the object's first, as
/// Anthropic writes every event and delta (`{"type":"content_block_delta",...`),
/// and holds no escape; `None` otherwise.
fn leading_tag(json: &str) -> Option<&str> {
    let rest = json.strip_prefix("{\"type\":\"")?;
    let tag = &rest[..memchr::memchr(b'"', rest.as_bytes())?];
    (!tag.bytes().any(|b| b == b'\\')).then_some(tag)
}

/// The event `data` holds, read without buffering when it is a
/// `content_block_delta` whose `type` comes first: `None` for any other event,
/// which [`Event`] reads.
///
/// Why: `serde` reads an internally tagged enum ([`Event`], [`BlockDelta`]) by
/// buffering the whole object in a tree of its own first (its tag may come last),
/// then reading the variant from the tree; for the deltas, nearly every event of a
/// stream, that was half of a translated Anthropic stream's reading
/// (`examples/translate_cost.rs anthropic-stream` under callgrind). With the tag
/// known, the variant's members are read straight from the text; the variant
/// chosen, the members required, their types and a repeated member are those of
/// [`Event`] and [`BlockDelta`] (the tests read every recorded stream, and malformed
/// and random events, both ways). One difference, on purpose: members the adapter
/// does not read are skipped as every other provider struct skips them, where the
/// enum's buffer read them whole and refused a number beyond `f64`, a lone UTF-16
/// surrogate escape or nesting deeper than 128 in them; such an event's text is
/// relayed rather than the stream failed.
fn fast_event(data: &str) -> Option<serde_json::Result<Event<'_>>> {
    if leading_tag(data)? != "content_block_delta" {
        return None;
    }
    Some(
        serde_json::from_str::<BlockDeltaEvent<'_>>(data).and_then(|e| {
            Ok(Event::ContentBlockDelta {
                index: e.index,
                delta: block_delta(e.delta.get())?,
            })
        }),
    )
}

/// A `content_block_delta`'s `delta`: straight when its `type` comes first and is
/// one of the relayed kinds, through [`BlockDelta`] otherwise.
fn block_delta(raw: &str) -> serde_json::Result<BlockDelta<'_>> {
    match leading_tag(raw) {
        Some("text_delta") => serde_json::from_str::<TextPiece<'_>>(raw)
            .map(|d| BlockDelta::TextDelta { text: d.text }),
        Some("input_json_delta") => {
            serde_json::from_str::<JsonPiece<'_>>(raw).map(|d| BlockDelta::InputJsonDelta {
                partial_json: d.partial_json,
            })
        }
        Some("thinking_delta") => {
            serde_json::from_str::<ThinkingPiece<'_>>(raw).map(|d| BlockDelta::ThinkingDelta {
                thinking: d.thinking,
            })
        }
        _ => serde_json::from_str(raw),
    }
}

#[derive(Deserialize)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
    /// With `stop_reason: refusal`, the reason given (`explanation`), streamed as
    /// `delta.refusal` as the whole answer's `message.refusal` carries it.
    #[serde(default)]
    stop_details: Option<super::StopDetails>,
}

/// A `tool_use` content block being streamed.
struct ToolBlock {
    /// Anthropic's content block index.
    block: u64,
    /// The OpenAI `tool_calls[].index`.
    call: u32,
    /// Whether any argument text was relayed.
    args: bool,
}

/// A `thinking` content block being streamed: its text and signature so far.
struct Thinking {
    /// Anthropic's content block index.
    block: u64,
    text: String,
    signature: String,
}

/// Most skipped content blocks remembered per stream ([`AnthropicStream::skipped`]);
/// an input delta of a block past them is refused as one of no tool call.
const MAX_SKIPPED_BLOCKS: usize = 1_024;

/// The transcoder for one Anthropic stream.
pub(super) struct AnthropicStream {
    w: ChunkWriter,
    include_usage: bool,
    prompt_estimate: u64,
    /// Token counts from `message_start`, updated by `message_delta` (see
    /// [`AnthropicUsage::update`]).
    usage: AnthropicUsage,
    tools: Vec<ToolBlock>,
    /// Content blocks of types not relayed (server-tool blocks such as
    /// `server_tool_use` and `mcp_tool_use`, types added later), whose deltas are
    /// dropped with them: Anthropic streams a server tool's input as
    /// `input_json_delta` too (Messages streaming reference).
    skipped: Vec<u64>,
    thinking: Option<Thinking>,
    /// The finish reason, once its chunk has been written.
    finish: Option<&'static str>,
    /// `message_start` or a content block event has arrived.
    started: bool,
}

impl AnthropicStream {
    pub(super) fn new(ctx: StreamContext) -> Self {
        AnthropicStream {
            started: false,
            w: ChunkWriter::new(&ctx),
            include_usage: ctx.include_usage,
            prompt_estimate: ctx.prompt_tokens_estimate,
            usage: AnthropicUsage::default(),
            tools: Vec::new(),
            skipped: Vec::new(),
            thinking: None,
            finish: None,
        }
    }

    /// Writes the finish chunk (once), the usage chunk if asked, and `[DONE]`.
    fn close(&mut self, out: &mut BytesMut) {
        let usage = self.include_usage.then(|| {
            self.usage.to_openai().unwrap_or_else(|| {
                Usage::new(self.prompt_estimate, self.usage.output_tokens.unwrap_or(0))
            })
        });
        self.w.close(out, &mut self.finish, usage);
    }
}

impl AnthropicStream {
    /// The thinking block open at content block `index`.
    ///
    /// # Errors
    /// 502 when no thinking block is open there.
    fn thinking_block(&mut self, index: u64) -> Result<&mut Thinking, GatewayError> {
        self.thinking.as_mut().filter(|t| t.block == index).ok_or_else(|| {
            bad_upstream(format!(
                "Anthropic sent a thinking delta for content block {index}, which is not a thinking block"
            ))
        })
    }
}

impl StreamTranscoder for AnthropicStream {
    fn event(
        &mut self,
        event: SseEventRef<'_>,
        out: &mut BytesMut,
    ) -> Result<StreamStep, GatewayError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(StreamStep::Continue);
        }
        let ev: Event<'_> = fast_event(data)
            .unwrap_or_else(|| serde_json::from_str(data))
            .map_err(|e| {
                bad_upstream(format!(
                    "Anthropic sent a stream event that is not valid: {e}"
                ))
            })?;
        if matches!(
            ev,
            Event::MessageStart { .. }
                | Event::ContentBlockStart { .. }
                | Event::ContentBlockDelta { .. }
                | Event::ContentBlockStop { .. }
        ) {
            self.started = true;
        }
        match ev {
            Event::MessageStart { message } => {
                self.w.set_id(message.id);
                if let Some(m) = message.model {
                    self.w.set_upstream_model(m);
                }
                self.usage = message.usage;
                self.w.start(out);
            }
            Event::ContentBlockStart {
                index,
                content_block,
            } => match content_block {
                StartBlock::Text { text } if !text.is_empty() => self.w.text(out, &text)?,
                StartBlock::ToolUse { id, name } => {
                    let call = self.tools.len() as u32;
                    self.tools.push(ToolBlock {
                        block: index,
                        call,
                        args: false,
                    });
                    let piece = ToolDelta::opening(call, &id, &name);
                    self.w.tool(out, piece);
                }
                StartBlock::Thinking {
                    thinking,
                    signature,
                } => {
                    self.w.reasoning(out, &thinking);
                    self.thinking = Some(Thinking {
                        block: index,
                        text: thinking.into_owned(),
                        signature: signature.into_owned(),
                    });
                }
                StartBlock::RedactedThinking { data } => {
                    self.w
                        .thinking_block(out, &ThinkingBlock::RedactedThinking { data });
                }
                StartBlock::Other => {
                    // Bounded like the tools: one entry per block of the answer.
                    if self.skipped.len() < MAX_SKIPPED_BLOCKS {
                        self.skipped.push(index);
                    }
                }
                StartBlock::Text { .. } => {}
            },
            Event::ContentBlockDelta { index, delta } => match delta {
                BlockDelta::TextDelta { text } if !text.is_empty() => self.w.text(out, &text)?,
                BlockDelta::InputJsonDelta { .. } if self.skipped.contains(&index) => {}
                BlockDelta::InputJsonDelta { partial_json } if !partial_json.is_empty() => {
                    let tool = self.tools.iter_mut().find(|t| t.block == index).ok_or_else(|| {
                        bad_upstream(format!(
                            "Anthropic sent tool input for content block {index}, which is not a tool call"
                        ))
                    })?;
                    tool.args = true;
                    let piece = ToolDelta::arguments(tool.call, &partial_json);
                    self.w.tool(out, piece);
                }
                BlockDelta::ThinkingDelta { thinking } => {
                    let block = self.thinking_block(index)?;
                    hold(&mut block.text, &thinking, "thinking block")?;
                    self.w.reasoning(out, &thinking);
                }
                BlockDelta::SignatureDelta { signature } => {
                    let block = self.thinking_block(index)?;
                    hold(&mut block.signature, &signature, "thinking signature")?;
                }
                _ => {}
            },
            Event::ContentBlockStop { index } => {
                if let Some(t) = self.thinking.take_if(|t| t.block == index) {
                    let block = ThinkingBlock::Thinking {
                        thinking: t.text.into(),
                        signature: t.signature.into(),
                    };
                    self.w.thinking_block(out, &block);
                }
                // A tool called without arguments streams no input; OpenAI clients
                // expect a JSON object string.
                if let Some(t) = self.tools.iter_mut().find(|t| t.block == index && !t.args) {
                    t.args = true;
                    let piece = ToolDelta::arguments(t.call, "{}");
                    self.w.tool(out, piece);
                }
            }
            Event::MessageDelta { delta, usage } => {
                self.usage.update(&usage);
                if self.finish.is_none() {
                    if let Some(reason) = delta.stop_reason.as_deref() {
                        let reason = finish_reason(Some(reason));
                        if reason == "content_filter" {
                            let why = delta.stop_details.and_then(|d| d.explanation);
                            self.w.refusal(out, why.as_deref().unwrap_or_default());
                        }
                        self.finish = Some(reason);
                        self.w.finish(out, reason);
                    }
                }
            }
            Event::MessageStop => {
                // A stream that is only its end is not an (empty) answer.
                if !self.started {
                    return Err(bad_upstream(
                        "Anthropic ended the stream (message_stop) before any message_start or content block",
                    ));
                }
                self.close(out);
                return Ok(StreamStep::Done);
            }
            Event::Error { error } => return Err(stream_error(&error)),
            Event::Other => {}
        }
        Ok(StreamStep::Continue)
    }

    fn end(&mut self, out: &mut BytesMut) -> Result<(), GatewayError> {
        end_of_body(self.finish, || self.close(out))
    }

    fn produced_content(&self) -> bool {
        self.w.content()
    }

    fn sent(&self) -> &crate::providers::Sent {
        &self.w.progress.sent
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// What a read event says, for comparing the two ways of reading one:
    /// `None` for an event other than a content block delta.
    fn delta_of(ev: &Event<'_>) -> Option<String> {
        let Event::ContentBlockDelta { index, delta } = ev else {
            return None;
        };
        Some(match delta {
            BlockDelta::TextDelta { text } => format!("{index} text {text:?}"),
            BlockDelta::InputJsonDelta { partial_json } => format!("{index} json {partial_json:?}"),
            BlockDelta::ThinkingDelta { thinking } => format!("{index} thinking {thinking:?}"),
            BlockDelta::SignatureDelta { signature } => format!("{index} signature {signature:?}"),
            BlockDelta::Other => format!("{index} other"),
        })
    }

    /// `data` read straight ([`fast_event`]), when it is, reads as [`Event`] reads
    /// it: the same delta, or an error both ways.
    fn agree(data: &str) -> Result<(), TestCaseError> {
        let Some(fast) = fast_event(data) else {
            return Ok(());
        };
        let tree = serde_json::from_str::<Event<'_>>(data);
        match (&fast, &tree) {
            (Ok(f), Ok(t)) => {
                prop_assert!(delta_of(f).is_some(), "{}", data);
                prop_assert_eq!(delta_of(f), delta_of(t), "{}", data);
            }
            (Err(_), Err(_)) => {}
            _ => prop_assert!(
                false,
                "{data}: straight {:?}, through the tree {:?}",
                fast.as_ref().err(),
                tree.as_ref().err()
            ),
        }
        Ok(())
    }

    #[test]
    fn recorded_and_malformed_deltas_read_straight_as_through_the_tree() {
        let mut read_straight = 0;
        let fixtures = [
            include_str!(
                "../../../tests/fixtures/provider-wire/anthropic/anthropic-text.chunks.txt"
            ),
            include_str!(
                "../../../tests/fixtures/provider-wire/anthropic/anthropic-json-tool.1.chunks.txt"
            ),
            include_str!(
                "../../../tests/fixtures/provider-wire/anthropic/anthropic-refusal.chunks.txt"
            ),
            include_str!(
                "../../../tests/fixtures/provider-wire/anthropic/anthropic-tool-no-args.chunks.txt"
            ),
        ];
        let crafted = [
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\"b\\c\u00e9"}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"thinking_delta","thinking":"hm"}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"signature_delta","signature":"s"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"citations_delta","citation":{"x":1}}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"text":"late tag","type":"text_delta"}}"#,
            r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"x"},"index":3,"extra":[1,{"a":null}]}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":5}}"#,
            r#"{"type":"content_block_delta","index":-1,"delta":{"type":"text_delta","text":"x"}}"#,
            r#"{"type":"content_block_delta","index":0}"#,
            r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":"text"}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}} trailing"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text\u005fdelta","text":"x"}}"#,
            r#"{"type":"content_block_delta","index":0,"index":1,"delta":{"type":"text_delta","text":"x"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x","text":"y"}}"#,
            r#"{"type":"content_block_delta","type":"x","index":0,"delta":{"type":"text_delta","text":"x"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","type":"thinking_delta","text":"x"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","type":"x","partial_json":"x"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"x","type":"x"}}"#,
        ];
        for data in fixtures.iter().flat_map(|f| f.lines()).chain(crafted) {
            read_straight += usize::from(fast_event(data).is_some());
            agree(data).unwrap();
        }
        assert!(read_straight > 12, "{read_straight}");
    }

    /// Values the enum's buffer refused in members the adapter does not read are
    /// skipped, and the delta is read (see [`fast_event`]).
    #[test]
    fn unread_members_the_tree_refused_are_skipped() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        for unread in ["1e400", r#""\ud800""#, deep.as_str()] {
            for data in [
                format!(
                    r#"{{"type":"content_block_delta","index":0,"x":{unread},"delta":{{"type":"text_delta","text":"hi"}}}}"#
                ),
                format!(
                    r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","c":{unread},"text":"hi"}}}}"#
                ),
            ] {
                assert!(serde_json::from_str::<Event<'_>>(&data).is_err(), "{data}");
                let ev = fast_event(&data).unwrap().unwrap();
                assert_eq!(delta_of(&ev).as_deref(), Some("0 text \"hi\""), "{data}");
            }
        }
    }

    proptest! {
        /// Deltas of any text, index and kind, with members in any order and with
        /// unknown ones, read straight as through the tree.
        #[test]
        fn any_delta_reads_straight_as_through_the_tree(
            index in prop_oneof![Just("0".to_string()), any::<u64>().prop_map(|i| i.to_string()), Just("-3".to_string()), Just("1.5".to_string())],
            kind in prop_oneof![Just("text_delta"), Just("input_json_delta"), Just("thinking_delta"), Just("signature_delta"), Just("citations_delta")],
            field in prop_oneof![Just("text"), Just("partial_json"), Just("thinking"), Just("signature"), Just("other")],
            text in any::<String>(),
            order in 0..4u8,
        ) {
            let value = serde_json::to_string(&text).unwrap();
            let delta = match order {
                0 | 1 => format!(r#"{{"type":"{kind}","{field}":{value}}}"#),
                2 => format!(r#"{{"{field}":{value},"type":"{kind}"}}"#),
                _ => format!(r#"{{"type":"{kind}","x":[{value}],"{field}":{value}}}"#),
            };
            let data = match order {
                0 | 2 => format!(r#"{{"type":"content_block_delta","index":{index},"delta":{delta}}}"#),
                1 => format!(r#"{{"type":"content_block_delta","delta":{delta},"index":{index}}}"#),
                _ => format!(r#"{{"index":{index},"type":"content_block_delta","delta":{delta}}}"#),
            };
            agree(&data)?;
        }
    }
}
