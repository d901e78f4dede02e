//! The rate-limit and budget step of the admit phase (see [`crate::limits`]).
//!
//! Runs after normalize (the caller and the parsed request are known) and before
//! the policy features are built and route runs: a refused request never reaches a
//! policy or an upstream, and an admitted one's least budget left becomes
//! `request.budget_remaining`. Its 429 is the
//! client's (`Fault::Client`, kind `Throttled`), so no endpoint's statistics count it.
//! The admitted request's [`Permit`] is kept in `ctx.permit`; a whole (non-stream)
//! answer settles it in the respond phase ([`settle_whole`]), a stream where it ends.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::FutureExt as _;
use http::Response;
use http_body_util::BodyExt as _;

use super::ctx::RequestCtx;
use super::Gateway;
use crate::api::counts::Read;
use crate::api::{ChatRequest, Usage};
use crate::body::{self, Body};
use crate::error::GatewayError;
use crate::limits::tokens::TokenCounter;
use crate::server::lines::HeaderLines;

/// The token cost counted at admission: input tokens (`counter`: OpenAI's tokenizer
/// for OpenAI model families, else the estimate) plus [`output_reserve`].
pub fn cost(gw: &Gateway, counter: &TokenCounter, chat: &ChatRequest) -> u64 {
    counter
        .count(chat)
        .saturating_add(output_reserve(chat, gw.config.limits.default_output_tokens))
}

/// The output tokens reserved at admission: the output cap (`max_completion_tokens`,
/// else `max_tokens`, else `default`) for each of the `n` choices, as the cap bounds
/// each choice (OpenAI API reference, "Create chat completion", `n`; the OpenAI
/// cookbook's `api_request_parallel_processor.py` counts `n * max_tokens`).
pub fn output_reserve(chat: &ChatRequest, default: u64) -> u64 {
    let n = chat
        .extra
        .get("n")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(1)
        .max(1);
    chat.output_cap().unwrap_or(default).saturating_mul(n)
}

/// Admits the request against every limit and budget, or refuses it.
///
/// # Errors
/// 429 `rate_limit_exceeded` / `budget_exceeded`, 503 `rate_limiter_unavailable`.
pub async fn admit(
    gw: &Gateway,
    ctx: &mut RequestCtx,
    chat: &ChatRequest,
) -> Result<(), GatewayError> {
    if !gw.limits.applies(&ctx.caller) {
        return Ok(());
    }
    // What a budget reserves: the input estimate and the output cap at the dearest
    // of the model's endpoints (the one that serves is not chosen yet); for a name
    // only a policy routes (no endpoints of its own), at the dearest of all.
    let reserve = |l: &crate::limits::Limiter| {
        let all: Vec<usize>;
        let endpoints = match gw.registry.models.get(ctx.model.as_str()) {
            Some(m) if !m.endpoints.is_empty() => &m.endpoints[..],
            _ => {
                all = (0..gw.registry.endpoints.len()).collect();
                &all[..]
            }
        };
        let output = output_reserve(chat, gw.config.limits.default_output_tokens);
        l.reserve_usd(endpoints, chat.estimated_input_tokens(), output)
    };
    let mut permit = gw
        .limits
        .admit(&ctx.caller, |counter| cost(gw, counter, chat), reserve)
        .await?;
    permit.prompt_estimate = chat.estimated_input_tokens();
    // What `request.budget_remaining` reads (the features are built from the caller
    // after this step).
    ctx.caller.budget_remaining = permit.budget_remaining;
    ctx.permit = Some(Arc::new(permit));
    Ok(())
}

/// For a whole (non-stream) answer from a provider: reads the body's `usage` once
/// into `ctx.usage` (the access line and the token and cost metrics use it too),
/// settles `ctx.permit` with it, and adds the permit's `x-ratelimit-*` headers. The
/// body is one ready frame (dispatch builds it in memory), taken and put back without
/// waiting. An answer without `usage` is settled with estimates (the permit's
/// [`prompt_estimate`](crate::limits::Permit::prompt_estimate) in, [`text_tokens`]
/// of its choices out), as a stream without one is: else its spend would never
/// reach the budgets.
pub fn settle_whole(ctx: &mut RequestCtx, resp: &mut Response<Body>, lines: &mut HeaderLines) {
    if let Some(permit) = &ctx.permit {
        permit.write_lines(lines);
    }
    if ctx.stream || !ctx.served {
        return;
    }
    let (usage, output_estimate) = read_usage(resp);
    ctx.usage = usage;
    if let Some(permit) = &ctx.permit {
        let usage = ctx
            .usage
            .unwrap_or_else(|| Usage::new(permit.prompt_estimate, output_estimate));
        permit.settle(ctx.endpoint, &usage);
    }
}

/// The `usage` of the whole answer in `resp`, its body taken and put back; without
/// one, the estimated output tokens of the answer ([`text_tokens`]) beside `None`.
fn read_usage(resp: &mut Response<Body>) -> (Option<Usage>, u64) {
    let mut taken = std::mem::take(resp.body_mut());
    let Some(Some(Ok(frame))) = taken.frame().now_or_never() else {
        // Not ready at once (never for dispatch's whole answers): no usage.
        *resp.body_mut() = taken;
        return (None, 0);
    };
    let data = match frame.into_data() {
        Ok(data) => data,
        Err(frame) => {
            *resp.body_mut() = prepend(frame, taken);
            return (None, 0);
        }
    };
    let usage = usage_of(&data);
    let estimate = if usage.is_none() {
        text_tokens(&data)
    } else {
        0
    };
    *resp.body_mut() = if http_body::Body::is_end_stream(&taken) {
        body::full(data)
    } else {
        prepend(http_body::Frame::data(data), taken)
    };
    (usage, estimate)
}

/// The estimated output tokens of a chat completion body that reports no `usage`:
/// the bytes of every string under `choices` (content, refusals, tool call
/// arguments), about 4 per token as the input estimate counts; a body that is not
/// JSON counts whole.
pub fn text_tokens(data: &[u8]) -> u64 {
    fn text_bytes(v: &serde_json::Value) -> u64 {
        match v {
            serde_json::Value::String(s) => s.len() as u64,
            serde_json::Value::Array(a) => a.iter().map(text_bytes).sum(),
            serde_json::Value::Object(o) => o.values().map(text_bytes).sum(),
            _ => 0,
        }
    }
    let bytes = match serde_json::from_slice::<serde_json::Value>(data) {
        Ok(v) => v.get("choices").map_or(0, text_bytes),
        Err(_) => data.len() as u64,
    };
    bytes.div_ceil(4)
}

fn prepend(first: http_body::Frame<Bytes>, rest: Body) -> Body {
    use futures_util::StreamExt as _;
    let head = futures_util::stream::once(std::future::ready(Ok(first)));
    http_body_util::StreamBody::new(head.chain(http_body_util::BodyStream::new(rest)))
        .boxed_unsync()
        .into()
}

#[derive(serde::Deserialize, Debug, PartialEq, Eq)]
struct Counts {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<crate::api::PromptTokensDetails>,
    #[serde(default)]
    completion_tokens_details: Option<crate::api::CompletionTokensDetails>,
}

impl From<crate::api::counts::Counts> for Counts {
    /// The counts as `serde_json` reads them into [`Counts`]: a details object's
    /// missing count is 0.
    fn from(c: crate::api::counts::Counts) -> Counts {
        Counts {
            prompt_tokens: c.prompt_tokens,
            completion_tokens: c.completion_tokens,
            prompt_tokens_details: c.prompt_details.map(|d| crate::api::PromptTokensDetails {
                cached_tokens: d.cached_tokens.unwrap_or(0),
                cache_creation_tokens: d.cache_creation_tokens,
            }),
            completion_tokens_details: c.completion_details.map(|d| {
                crate::api::CompletionTokensDetails {
                    reasoning_tokens: d.reasoning_tokens.unwrap_or(0),
                }
            }),
        }
    }
}

/// The `usage` value at the start of `value` read by `serde_json` (what follows it
/// ignored): `None` for `null` and for anything that is not a usage object.
fn counts_serde(value: &[u8]) -> Option<Counts> {
    let mut de = serde_json::Deserializer::from_slice(value);
    let u: Option<Counts> = serde::Deserialize::deserialize(&mut de).ok()?;
    u
}

/// The `usage` of an OpenAI chat completion body.
///
/// `usage` sits near the end of the body (OpenAI and the adapters write it after
/// `choices`), so the last `"usage":` is found from the end and only its object is
/// parsed, not the whole answer again. The bytes `"usage":` cannot occur inside a
/// JSON string (its quotes would be escaped), so the match is a key; if it is not the
/// top-level one (or the body is not in that order), the whole body is parsed.
fn usage_of(data: &[u8]) -> Option<Usage> {
    usage_read_with(data, |value| match crate::api::counts::read(value) {
        Read::Counts(c, _) => Some(Counts::from(c)),
        Read::Null(_) => None,
        Read::Unsure => counts_serde(value),
    })
}

/// Where the value after the last `"usage":` of `data` starts (`None`: there is
/// none).
///
/// From the end, colon by colon: every member of a JSON object has one, `usage` is
/// among an answer's last members, and `memrchr` finds each in a few vector steps.
/// A colon preceded by `"usage"` ends the last occurrence of the eight bytes, so this
/// is `memmem`'s reverse search for them, which has no vector path and took about
/// 400 instructions of every JSON answer (`benches/load/callgrind.sh`).
fn last_usage_key(data: &[u8]) -> Option<usize> {
    const NAME: &[u8] = b"\"usage\"";
    memchr::memrchr_iter(b':', data)
        .find(|&colon| data[..colon].ends_with(NAME))
        .map(|colon| colon + 1)
}

/// [`usage_of`] with `tail` reading the value after the last `"usage":` (`None`:
/// not a usage object there).
fn usage_read_with(data: &[u8], tail: impl Fn(&[u8]) -> Option<Counts>) -> Option<Usage> {
    let from_tail = last_usage_key(data).and_then(|value| tail(&data[value..]));
    let counts = match from_tail {
        Some(c) => c,
        None => {
            #[derive(serde::Deserialize)]
            struct Completion {
                usage: Option<Counts>,
            }
            serde_json::from_slice::<Completion>(data).ok()?.usage?
        }
    };
    let mut usage = Usage::new(counts.prompt_tokens, counts.completion_tokens);
    usage.prompt_tokens_details = counts.prompt_tokens_details;
    usage.completion_tokens_details = counts.completion_tokens_details;
    Some(usage)
}

#[cfg(test)]
mod tests {
    use super::{output_reserve, usage_of};

    /// `usage_of` as it was before the quick reader: `serde_json` alone.
    fn usage_of_serde(data: &[u8]) -> Option<crate::api::Usage> {
        super::usage_read_with(data, super::counts_serde)
    }

    proptest::proptest! {
        // About one text in eight is a usage object the quick reader reads itself.
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn the_quick_usage_reader_settles_what_serde_reads(
            usage in crate::api::counts::usage_texts()
        ) {
            for body in [
                format!(r#"{{"id":"x","choices":[],"usage":{usage}}}"#),
                format!(r#"{{"choices":[],"usage":{usage},"model":"m"}}"#),
                format!(r#"{{"usage":{usage}"#),
            ] {
                proptest::prop_assert_eq!(
                    usage_of(body.as_bytes()),
                    usage_of_serde(body.as_bytes()),
                    "{}", body
                );
            }
        }
    }

    proptest::proptest! {
        // Texts of the key's own bytes and a few others, so that whole keys,
        // partial ones and colons everywhere are common.
        #[test]
        fn the_last_usage_key_is_the_one_a_reverse_substring_search_finds(
            text in proptest::collection::vec(
                proptest::sample::select(b"\"usage:{} \\x".to_vec()), 0..64)
        ) {
            let with_keys = [&text[..], b"\"usage\":", &text[..]].concat();
            for t in [&text[..], &with_keys[..]] {
                let expected = memchr::memmem::rfind(t, b"\"usage\":").map(|at| at + 8);
                proptest::prop_assert_eq!(super::last_usage_key(t), expected);
            }
        }
    }

    #[test]
    fn n_choices_reserve_the_output_cap_each() {
        let chat = |extra: &str| {
            let body =
                format!(r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}]{extra}}}"#);
            crate::api::ChatRequest::parse(body.as_bytes()).unwrap()
        };
        assert_eq!(output_reserve(&chat(""), 1024), 1024);
        assert_eq!(output_reserve(&chat(r#","max_tokens":100"#), 1024), 100);
        assert_eq!(
            output_reserve(&chat(r#","max_tokens":100,"n":8"#), 1024),
            800
        );
        assert_eq!(output_reserve(&chat(r#","n":3"#), 10), 30);
        assert_eq!(
            output_reserve(
                &chat(r#","max_completion_tokens":50,"max_tokens":9,"n":2"#),
                1
            ),
            100
        );
        let huge = format!(r#","max_tokens":{},"n":128"#, u64::MAX / 2);
        assert_eq!(output_reserve(&chat(&huge), 1), u64::MAX);
    }

    #[test]
    fn usage_is_read_from_the_tail_or_the_whole_body() {
        let tail = br#"{"id":"x","choices":[{"message":{"content":"say \"usage\": {}"}}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#;
        let u = usage_of(tail).unwrap();
        assert_eq!((u.prompt_tokens, u.completion_tokens), (7, 3));
        // usage first, a nested "usage" key later: the top-level one still counts.
        let nested = br#"{"usage":{"prompt_tokens":5,"completion_tokens":1},"choices":[{"message":{"content":"hi"},"x":{"usage":"n/a"}}]}"#;
        let u = usage_of(nested).unwrap();
        assert_eq!((u.prompt_tokens, u.completion_tokens), (5, 1));
        assert!(usage_of(br#"{"choices":[]}"#).is_none());
        let details = br#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":6},"completion_tokens_details":{"reasoning_tokens":2}}}"#;
        let u = usage_of(details).unwrap();
        assert_eq!(u.prompt_tokens_details.map(|d| d.cached_tokens), Some(6));
        assert_eq!(
            u.completion_tokens_details.map(|d| d.reasoning_tokens),
            Some(2)
        );
        assert!(usage_of(br#"{"usage":null}"#).is_none());
        assert!(usage_of(b"not json").is_none());
    }
}
