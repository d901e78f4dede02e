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
use crate::routing::features::features;

/// Parses and validates the body: [`ChatRequest::parse_bytes`]'s structural checks,
/// then [`crate::api::validate::check`]'s field rules (roles and content parts, tool
/// calls and results, tools and their schemas, `tool_choice`, parameter ranges).
///
/// # Errors
/// 400 naming the field at fault.
pub fn parse(ctx: &mut RequestCtx, body: Bytes) -> Result<ChatRequest, GatewayError> {
    let chat = ChatRequest::parse_bytes(body)?;
    ctx.model.clone_from(&chat.model);
    ctx.stream = chat.is_stream();
    crate::api::validate::check(&chat)?;
    Ok(chat)
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
    let mut f = features(chat, pairs, &ctx.caller, now);
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
