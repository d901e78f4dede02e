//! Input-token counts for the token buckets' cost: a real tokenizer for OpenAI model
//! families, the cheap estimate otherwise.
//!
//! A logical model is counted with OpenAI's BPE when its name, or else the upstream
//! model of its first endpoint, belongs to an OpenAI family (the `tiktoken-rs` crate,
//! which ships the vocabularies, so nothing is downloaded):
//! - `o200k_base`: `gpt-4o*`, `chatgpt-4o*`, `gpt-4.1*`, `gpt-4.5*`, `gpt-5*`, the
//!   `o1`/`o3`/`o4` reasoning series;
//! - `cl100k_base`: `gpt-4*` (other than the above), `gpt-3.5*`, `gpt-35*` (Azure's
//!   spelling).
//!
//! Every other model keeps [`ChatRequest::estimated_input_tokens`] (about 4
//! characters per token plus 4 per message). A message counts its text tokens plus 3
//! of framing, and a request 3 more for the reply's priming (OpenAI's
//! token-counting cookbook for these families); images, audio and tool definitions
//! are not counted.
//!
//! The vocabularies are parsed once, on a background thread started when the first
//! limiter that needs them is built (a request that arrives first waits for that one
//! parse, never a second), and never per request.
//!
//! BPE is slow next to the rest of admission: `cargo bench --bench limits` measured
//! `o200k_base` at about 100 µs per KiB of prose (1 KiB: 102 µs, 64 KiB: 3.4 ms, on
//! this project's 2-vCPU machine), against 3 µs for the whole in-memory rate-limit
//! check. So only the first [`MAX_TOKENIZED_BYTES`] of a request's text (in message
//! order) are tokenized, about 50 µs at most, and the rest is extrapolated at the
//! bytes per token measured on that sample: exact for short prompts, and for long ones
//! a count at the sample's own ratio (its language or code) instead of a fixed 4
//! characters per token.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use tiktoken_rs::CoreBPE;

use crate::api::ChatRequest;
use crate::routing::Registry;

/// Most bytes of one request's text run through the tokenizer (512, some 100 tokens
/// of prose, about 50 µs); the rest is extrapolated (see the module doc).
pub const MAX_TOKENIZED_BYTES: usize = 512;

/// Framing tokens per message, and once per request for the reply's priming.
const PER_MESSAGE: u64 = 3;

/// An OpenAI BPE vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `o200k_base` (GPT-4o and later, the o-series).
    O200k,
    /// `cl100k_base` (GPT-4, GPT-3.5).
    Cl100k,
}

impl Encoding {
    /// The encoding of an OpenAI model name (case-insensitive; a provider prefix like
    /// `openai/` is ignored), or `None` for other families.
    pub fn for_model(model: &str) -> Option<Encoding> {
        let m = model
            .rsplit('/')
            .next()
            .unwrap_or(model)
            .to_ascii_lowercase();
        let o_series = ["o1", "o3", "o4"]
            .iter()
            .any(|p| m == *p || m.starts_with(&format!("{p}-")));
        if o_series
            || ["gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5"]
                .iter()
                .any(|p| m.starts_with(p))
        {
            Some(Encoding::O200k)
        } else if ["gpt-4", "gpt-3.5", "gpt-35"]
            .iter()
            .any(|p| m.starts_with(p))
        {
            Some(Encoding::Cl100k)
        } else {
            None
        }
    }

    fn bpe(self) -> &'static CoreBPE {
        match self {
            Encoding::O200k => tiktoken_rs::o200k_base_singleton(),
            Encoding::Cl100k => tiktoken_rs::cl100k_base_singleton(),
        }
    }
}

/// Counts a request's input tokens by its logical model (see the module doc).
#[derive(Debug, Default, Clone)]
pub struct TokenCounter {
    by_model: HashMap<Arc<str>, Encoding>,
}

impl TokenCounter {
    /// The counter for the logical models of `registry`; with `preload`, starts
    /// parsing the vocabularies it needs on a background thread (else the first
    /// count parses one, some 100 ms).
    pub fn new(registry: &Registry, preload: bool) -> TokenCounter {
        let mut by_model = HashMap::new();
        for (name, m) in &registry.models {
            let upstream = m
                .endpoints
                .first()
                .and_then(|&e| registry.endpoints.get(e))
                .map(|e| &*e.upstream_model);
            if let Some(enc) =
                Encoding::for_model(name).or_else(|| upstream.and_then(Encoding::for_model))
            {
                by_model.insert(name.clone(), enc);
            }
        }
        let mut wanted: Vec<Encoding> = Vec::new();
        for e in by_model.values() {
            if !wanted.contains(e) {
                wanted.push(*e);
            }
        }
        if preload && !wanted.is_empty() {
            let _ = std::thread::Builder::new()
                .name("tokenizer-load".into())
                .spawn(move || {
                    for e in wanted {
                        e.bpe();
                    }
                });
        }
        TokenCounter { by_model }
    }

    /// The encoding used for logical model `model` (`None`: the estimate).
    pub fn encoding(&self, model: &str) -> Option<Encoding> {
        self.by_model.get(model).copied()
    }

    /// Whether [`TokenCounter::count`] of `chat` is the tokenizer's exact count (an
    /// OpenAI family and at most [`MAX_TOKENIZED_BYTES`] of text), not an estimate
    /// or an extrapolation.
    pub fn is_exact(&self, chat: &ChatRequest) -> bool {
        self.encoding(&chat.model).is_some()
            && chat
                .messages
                .iter()
                .flat_map(|m| texts(&m.content))
                .map(str::len)
                .sum::<usize>()
                <= MAX_TOKENIZED_BYTES
    }

    /// The input tokens of `chat`.
    pub fn count(&self, chat: &ChatRequest) -> u64 {
        match self.encoding(&chat.model) {
            Some(e) => count_with(e.bpe(), chat),
            None => chat.estimated_input_tokens(),
        }
    }
}

/// The texts of one message's content (a string, or the `text` of its parts).
fn texts(content: &Value) -> impl Iterator<Item = &str> {
    let (one, parts) = match content {
        Value::String(s) => (Some(s.as_str()), None),
        Value::Array(p) => (None, Some(p.iter())),
        _ => (None, None),
    };
    one.into_iter().chain(
        parts
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("text").and_then(Value::as_str)),
    )
}

/// Most bytes per token assumed for the text past the tokenized sample (8: prose
/// and code run at 3 to 5 in `o200k_base` and `cl100k_base`; only long runs of
/// whitespace or repeated characters compress further). A sample of 512 spaces
/// (4 tokens) would otherwise make a 1 MB prompt count as some 7,000 tokens
/// instead of 200,000, and slip that many past a `tokens_per_min` bucket and the
/// context check at once.
pub const MAX_EXTRAPOLATED_BYTES_PER_TOKEN: u64 = 8;

/// Tokens of `chat` under `bpe`, tokenizing at most [`MAX_TOKENIZED_BYTES`].
pub fn count_with(bpe: &CoreBPE, chat: &ChatRequest) -> u64 {
    let mut budget = MAX_TOKENIZED_BYTES;
    let (mut tokens, mut tokenized, mut skipped) = (0u64, 0u64, 0u64);
    for m in &chat.messages {
        for text in texts(&m.content) {
            if budget == 0 {
                skipped += text.len() as u64;
                continue;
            }
            let mut cut = text.len().min(budget);
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            tokens += bpe.encode_ordinary(&text[..cut]).len() as u64;
            tokenized += cut as u64;
            skipped += (text.len() - cut) as u64;
            budget -= cut;
        }
    }
    if skipped > 0 {
        // Extrapolate at the measured bytes per token (4 if nothing was measured),
        // but at no more than MAX_EXTRAPOLATED_BYTES_PER_TOKEN: a sample the client
        // padded (512 spaces are 4 tokens) must not make the rest count as nearly
        // nothing.
        let extra = if tokens > 0 {
            (skipped as f64 * tokens as f64 / tokenized.max(1) as f64).ceil() as u64
        } else {
            skipped.div_ceil(4)
        };
        tokens += extra.max(skipped.div_ceil(MAX_EXTRAPOLATED_BYTES_PER_TOKEN));
    }
    // Tool definitions, the response schema and assistants' tool calls: estimated,
    // not tokenized (JSON names, descriptions and arguments, about 4 bytes a token).
    let calls: usize = chat
        .messages
        .iter()
        .map(crate::api::Message::calls_len)
        .sum();
    let definitions = ((chat.definitions_len() + calls) as u64).div_ceil(4);
    tokens + definitions + PER_MESSAGE * chat.messages.len() as u64 + PER_MESSAGE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(model: &str, text: &str) -> ChatRequest {
        let body = serde_json::json!({
            "model": model,
            "messages": [{"role": "user", "content": text}],
        });
        ChatRequest::parse(&serde_json::to_vec(&body).unwrap()).unwrap()
    }

    #[test]
    fn families_pick_their_encoding() {
        for m in [
            "gpt-4o",
            "gpt-4o-mini",
            "openai/gpt-4.1-nano",
            "o3",
            "o4-mini",
            "gpt-5",
            "GPT-4O",
        ] {
            assert_eq!(Encoding::for_model(m), Some(Encoding::O200k), "{m}");
        }
        for m in ["gpt-4", "gpt-4-turbo", "gpt-3.5-turbo", "gpt-35-turbo"] {
            assert_eq!(Encoding::for_model(m), Some(Encoding::Cl100k), "{m}");
        }
        for m in [
            "claude-sonnet-4",
            "gemini-2.5-pro",
            "smollm2",
            "o1x",
            "mock-1",
        ] {
            assert_eq!(Encoding::for_model(m), None, "{m}");
        }
    }

    #[test]
    fn counts_are_the_bpe_token_counts_plus_framing() {
        // "hello world" is 2 tokens in both vocabularies; 3 per message + 3 priming.
        let c = chat("gpt-4o", "hello world");
        assert_eq!(count_with(Encoding::O200k.bpe(), &c), 2 + 3 + 3);
        assert_eq!(count_with(Encoding::Cl100k.bpe(), &c), 2 + 3 + 3);
        // A vocabulary difference: o200k has fewer tokens for this non-English text.
        let c = chat("gpt-4o", "Привет, как дела? Это проверка токенизатора.");
        let o = count_with(Encoding::O200k.bpe(), &c);
        let cl = count_with(Encoding::Cl100k.bpe(), &c);
        assert!(o < cl, "o200k {o}, cl100k {cl}");
    }

    /// A fixed corpus (prose, code, JSON, Cyrillic, Japanese, emoji, whitespace) of
    /// texts under [`MAX_TOKENIZED_BYTES`]: the count is the reference tokenizer's
    /// (a fresh `tiktoken-rs` vocabulary, not the singleton the counter uses) plus
    /// 3 per message and 3 for the reply's priming, for each family's vocabulary,
    /// through the model-name lookup the gateway uses.
    #[test]
    fn counts_equal_tiktoken_on_a_fixed_corpus() {
        let corpus = [
            "hello world",
            "The quick brown fox jumps over the lazy dog.",
            "fn main() {\n    println!(\"{}\", 1 + 2);\n}\n",
            r#"{"id": "r7", "price": 19.99, "tags": ["a", "b"]}"#,
            "Привет, как дела? Это проверка токенизатора.",
            "日本語のテキストをトークンに分割します。",
            "emoji 🎉🚀 and accents: café, naïve, façade",
            "   leading spaces\t\ttabs\n\n\nnewlines   ",
            "",
        ];
        let fresh = [
            ("gpt-4o", tiktoken_rs::o200k_base().unwrap()),
            ("gpt-4-turbo", tiktoken_rs::cl100k_base().unwrap()),
        ];
        let yaml = "providers: { p: { kind: mock } }\nmodels:\n  gpt-4o: { endpoints: [ { provider: p, model: a } ] }\n  gpt-4-turbo: { endpoints: [ { provider: p, model: b } ] }\n  mine: { endpoints: [ { provider: p, model: gpt-4o-mini } ] }\n";
        let config = crate::config::parse_str(yaml, None).unwrap();
        let counter = TokenCounter::new(&Registry::from_config(&config, |_| Some(0)), false);
        for (model, reference) in &fresh {
            for text in corpus {
                let c = chat(model, text);
                assert!(counter.is_exact(&c));
                let want = reference.encode_ordinary(text).len() as u64 + 6;
                assert_eq!(counter.count(&c), want, "{model}: {text:?}");
            }
        }
        // Known counts from OpenAI's tokenizer: "hello world" is 2 tokens in both.
        assert_eq!(counter.count(&chat("gpt-4o", "hello world")), 8);
        // Several messages and content parts: text of every part, 3 per message.
        let body = serde_json::json!({"model": "gpt-4o", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "image_url", "image_url": {"url": "data:x"}}, {"type": "text", "text": " world"}]},
        ]});
        let c = ChatRequest::parse(&serde_json::to_vec(&body).unwrap()).unwrap();
        let o = &fresh[0].1;
        let want = (o.encode_ordinary("Be brief.").len()
            + o.encode_ordinary("hello").len()
            + o.encode_ordinary(" world").len()) as u64
            + 2 * 3
            + 3;
        assert_eq!(counter.count(&c), want);
        // A logical model named otherwise counts by its endpoint's upstream model.
        assert_eq!(counter.encoding("mine"), Some(Encoding::O200k));
        // Other families: the estimate, never called exact.
        let c = chat("claude-x", "hello world");
        assert!(!counter.is_exact(&c));
        assert_eq!(counter.count(&c), c.estimated_input_tokens());
        // Past the tokenized prefix the count is extrapolated, not exact.
        assert!(!counter.is_exact(&chat("gpt-4o", &"word ".repeat(200))));
    }

    #[test]
    fn long_text_is_bounded_and_extrapolated() {
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(4000); // 180 KB
        let c = chat("gpt-4o", &text);
        let bpe = Encoding::O200k.bpe();
        let n = count_with(bpe, &c);
        let exact = bpe.encode_ordinary(&text).len() as u64 + 6;
        // A repetitive text extrapolates closely from its 512-byte sample.
        let err = (n as f64 - exact as f64).abs() / exact as f64;
        assert!(err < 0.03, "estimate {n}, exact {exact}");
        // Short text is counted exactly.
        let c = chat("gpt-4o", &text[..400]);
        let exact = bpe.encode_ordinary(&text[..400]).len() as u64 + 6;
        assert_eq!(count_with(bpe, &c), exact);
    }

    #[test]
    fn a_padded_sample_does_not_shrink_the_rest() {
        // 512 spaces first (4 tokens), then 900 KB of prose (about 200,000 tokens):
        // the count stays within a factor of two of the truth.
        let text = format!(
            "{}{}",
            " ".repeat(MAX_TOKENIZED_BYTES),
            "The quick brown fox jumps over the lazy dog. ".repeat(20_000)
        );
        let c = chat("gpt-4o", &text);
        let bpe = Encoding::O200k.bpe();
        let exact = bpe.encode_ordinary(&text).len() as u64;
        let n = count_with(bpe, &c);
        assert!(n * 2 >= exact, "estimate {n}, exact {exact}");
    }

    // Regression (outside attack, 2026-12-07): tool definitions, a tool call's
    // arguments and a `response_format` schema were not counted, so twenty requests
    // with a 108 KB tool description went through a 6,000 tokens-per-minute limit
    // (and past the context check) at about 6 tokens each.
    #[test]
    fn tool_definitions_calls_and_schemas_count_as_input() {
        let big = "lorem ipsum dolor sit amet ".repeat(4000);
        let with = |extra: serde_json::Value| {
            let mut body = serde_json::json!({
                "model": "gpt-4o",
                "messages": [{"role": "user", "content": "hi"}],
            });
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            ChatRequest::parse(&serde_json::to_vec(&body).unwrap()).unwrap()
        };
        let tool = with(
            serde_json::json!({"tools": [{"type": "function", "function": {"name": "f", "description": big, "parameters": {"type": "object"}}}]}),
        );
        let schema = with(
            serde_json::json!({"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"description": big}}}}),
        );
        let call = with(serde_json::json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": serde_json::to_string(&serde_json::json!({"x": big})).unwrap()}}]},
            {"role": "tool", "tool_call_id": "c", "content": "ok"},
        ]}));
        // Numbers are text too (outside attack: an `enum` of 20,000 integers, some
        // 100 KB of schema, counted as 18 tokens).
        let numbers = with(
            serde_json::json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"n": {"enum": (100_000..120_000).collect::<Vec<u32>>()}}}}}]}),
        );
        assert!(
            numbers.estimated_input_tokens() >= 25_000,
            "{}",
            numbers.estimated_input_tokens()
        );
        let floor = big.len() as u64 / 4;
        let o200k = Encoding::O200k.bpe();
        for (name, c) in [
            ("tools", &tool),
            ("response_format", &schema),
            ("tool_calls", &call),
        ] {
            assert!(
                c.estimated_input_tokens() >= floor,
                "{name}: {}",
                c.estimated_input_tokens()
            );
            assert!(
                count_with(o200k, c) >= floor,
                "{name}: {}",
                count_with(o200k, c)
            );
        }
    }
}
