//! The normalize phase: the body parsed and validated into a [`ChatRequest`], and the
//! request's policy features (body, headers, caller, time) computed once.
//!
//! The caller is read from the request's credentials when the context is made
//! ([`Caller::from_headers`](crate::routing::features::Caller::from_headers)); the
//! features carry it, so `request.api_key` and `request.org` mean the same in `serve`
//! as in `dry-run`.

use std::time::SystemTime;

use bytes::Bytes;
use http::HeaderMap;

use super::ctx::RequestCtx;
use super::Gateway;
use crate::api::ChatRequest;
use crate::error::GatewayError;
use crate::policy::RequestFeatures;
use crate::routing::features::features_reading;

/// Parses and validates the body: its declared media type and coding
/// ([`json_content_type`], [`identity_content_encoding`]),
/// [`ChatRequest::parse_bytes`]'s structural checks, then
/// [`crate::api::validate::check`]'s field rules (roles and content parts, tool calls
/// and results, tools and their schemas, `tool_choice`, parameter ranges).
///
/// # Errors
/// 415 for a body not declared as JSON; 400 naming the field at fault.
pub fn parse(
    ctx: &mut RequestCtx,
    body: Bytes,
    headers: &HeaderMap,
) -> Result<ChatRequest, GatewayError> {
    json_content_type(headers)?;
    identity_content_encoding(headers)?;
    let chat = ChatRequest::parse_bytes(body)?;
    ctx.model.clone_from(&chat.model);
    ctx.stream = chat.is_stream();
    crate::api::validate::check(&chat)?;
    Ok(chat)
}

/// Checks that a chat request's body is declared as JSON: its `Content-Type` is
/// `application/json` or a `+json` type of `application` (RFC 6839), parameters
/// such as `charset` aside and without regard to case, or is absent (a body sent
/// without one is read as JSON, and one that is not gets its 400 from the parse).
///
/// # Errors
/// 415 `unsupported_media_type` for any other type: `text/plain`, and the
/// `application/x-www-form-urlencoded` that `curl -d` sends by default. OpenAI's
/// API takes JSON bodies only; RFC 9110 section 15.5.16 gives the status.
pub fn json_content_type(headers: &HeaderMap) -> Result<(), GatewayError> {
    let Some(value) = headers.get(http::header::CONTENT_TYPE) else {
        return Ok(());
    };
    let essence = value
        .as_bytes()
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    // Compared without a lowercased copy: this runs on every chat request.
    let json = essence.eq_ignore_ascii_case(b"application/json")
        || (essence.len() >= 17
            && essence[..12].eq_ignore_ascii_case(b"application/")
            && essence[essence.len() - 5..].eq_ignore_ascii_case(b"+json"));
    if json {
        return Ok(());
    }
    Err(GatewayError::new(
        crate::error::ErrorKind::UnsupportedMediaType,
        format!(
            "unsupported Content-Type `{}`: this endpoint takes JSON bodies only; send `Content-Type: application/json`",
            crate::error::bounded(&String::from_utf8_lossy(value.as_bytes()), 128)
        ),
    )
    .with_code(crate::error::Code::UnsupportedMediaType))
}

/// Checks that a chat request's body is not compressed: no `Content-Encoding`, or
/// only `identity`. The gateway does not decode bodies, and a gzip body read as JSON
/// would get a misleading "not valid JSON".
///
/// # Errors
/// 415 `unsupported_media_type` naming the coding (RFC 9110 section 15.5.16: "the
/// content is in a ... content coding the server does not support"), with
/// `Accept-Encoding: identity` as that section asks.
pub fn identity_content_encoding(headers: &HeaderMap) -> Result<(), GatewayError> {
    let coded = headers
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .find(|c| !c.is_empty() && !c.eq_ignore_ascii_case(b"identity"));
    let Some(coding) = coded else {
        return Ok(());
    };
    let mut accept = HeaderMap::new();
    accept.insert(
        http::header::ACCEPT_ENCODING,
        http::HeaderValue::from_static("identity"),
    );
    Err(GatewayError::new(
        crate::error::ErrorKind::UnsupportedMediaType,
        format!(
            "unsupported Content-Encoding `{}`: send the JSON body uncompressed",
            crate::error::bounded(&String::from_utf8_lossy(coding), 64)
        ),
    )
    .with_code(crate::error::Code::UnsupportedMediaType)
    .with_headers(accept))
}

/// Bodies of at least this many bytes have their decoded messages set aside by
/// [`set_aside_messages`] (64 KiB: far above a typical chat request, whose
/// messages stay decoded, and whose path is unchanged).
pub const SET_ASIDE_FROM: usize = 64 * 1024;

/// Frees the decoded copy of a large body's messages once the phases that read
/// them (validation, features, limits, the cache key) are done, so that it is not
/// held while the request waits in a queue or on the upstream: the messages are
/// decoded again from the received body, which the request keeps anyway, only if an
/// attempt reads them (see [`crate::api::messages`]). Does nothing for bodies under
/// [`SET_ASIDE_FROM`] bytes, or when a layer has changed the request (`raw` cleared).
pub fn set_aside_messages(chat: &mut ChatRequest) {
    if chat.raw.len() < SET_ASIDE_FROM {
        return;
    }
    if let Some(crate::providers::splice::Field::Found(range)) =
        crate::providers::splice::find(&chat.raw, "messages")
    {
        let source = chat.raw.slice(range);
        chat.messages.set_aside(source);
    }
}

/// The policy features of `chat` with the client's `headers`, for the caller in
/// `ctx`, at the current time.
///
/// `request.input_tokens` is counted with the model's tokenizer
/// ([`input_tokens`]) only when the request's policy set reads it; otherwise it
/// keeps the cheap estimate of [`features`], as nothing decides from it.
pub fn request_features(
    gw: &Gateway,
    ctx: &RequestCtx,
    chat: &ChatRequest,
    headers: &HeaderMap,
) -> RequestFeatures {
    let now = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let pairs = headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)));
    let mut f = features_reading(
        chat,
        pairs,
        &ctx.caller,
        now,
        Some(&ctx.snapshot.reads_names),
    );
    f.off_peak = gw.sched.off_peak_now();
    if ctx.snapshot.reads_input_tokens {
        f.input_tokens = input_tokens(gw, chat);
    }
    f
}

/// The input tokens of `chat` by its model's tokenizer: OpenAI's BPE for OpenAI
/// model families, else the documented estimate (`crate::limits::tokens`, the
/// same counter the token buckets charge).
pub fn input_tokens(gw: &Gateway, chat: &ChatRequest) -> u64 {
    gw.limits.token_counter().count(chat)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{anthropic::Anthropic, openai::OpenAi, Adapter, Target};
    use http_body_util::BodyExt;

    /// A chat request with one user message of `len` bytes of text with escapes.
    fn body(len: usize) -> Bytes {
        let text = "say \"hi\" \u{e9}\n".repeat(len / 12 + 1);
        let v = serde_json::json!({
            "model": "m", "max_tokens": 5, "seed": 1,
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": text}],
        });
        Bytes::from(serde_json::to_vec(&v).unwrap())
    }

    fn sent(adapter: &dyn Adapter, chat: &ChatRequest) -> Bytes {
        let t = Target {
            base_url: "http://h/v1",
            model: "up",
            api_key: Some("k"),
        };
        let req = adapter.request(&t, chat).unwrap();
        futures_util::FutureExt::now_or_never(req.into_body().collect())
            .unwrap()
            .unwrap()
            .to_bytes()
    }

    #[test]
    fn large_bodies_set_aside_their_messages_and_send_the_same() {
        let raw = body(SET_ASIDE_FROM);
        let kept = ChatRequest::parse_bytes(raw.clone()).unwrap();
        let mut chat = ChatRequest::parse_bytes(raw.clone()).unwrap();
        set_aside_messages(&mut chat);
        assert!(!chat.messages.is_decoded());
        assert_eq!(chat.estimated_input_tokens(), kept.estimated_input_tokens());
        // An OpenAI-format attempt sends the received bytes without decoding them.
        let openai = OpenAi::standard();
        assert_eq!(sent(&openai, &chat), sent(&openai, &kept));
        assert!(!chat.messages.is_decoded());
        // A translation decodes them again, and sends what it sends without.
        assert_eq!(sent(&Anthropic, &chat), sent(&Anthropic, &kept));
        assert!(chat.messages.is_decoded());
    }

    #[test]
    fn small_or_changed_bodies_keep_their_messages() {
        let mut small = ChatRequest::parse_bytes(body(1000)).unwrap();
        set_aside_messages(&mut small);
        assert!(small.messages.is_decoded());
        let mut changed = ChatRequest::parse_bytes(body(SET_ASIDE_FROM)).unwrap();
        changed.raw = Bytes::new();
        set_aside_messages(&mut changed);
        assert!(changed.messages.is_decoded());
    }
}
